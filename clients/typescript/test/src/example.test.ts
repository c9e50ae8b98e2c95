// examples/orpc-refund runs as the README gives it: the grants, the
// capability sync as the dev admin, the worker and the agent as their own
// principals (tokens), and the approval from the CLI as a third principal.
import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import { TestCluster } from "./cluster.js";
import { readmeGrants } from "./readme.js";

const example = resolve(dirname(fileURLToPath(import.meta.url)), "../../../../examples/orpc-refund");
let cluster: TestCluster;
let scratch: string;
const children: ChildProcess[] = [];

function start(script: string, args: string[], env: Record<string, string>): ChildProcess & { output: () => string } {
  const child = spawn(process.execPath, [join(example, "dist", script), ...args], {
    cwd: scratch,
    env: { ...process.env, ...cluster.env, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  child.stdout?.on("data", (chunk: Buffer) => (output += chunk.toString()));
  child.stderr?.on("data", (chunk: Buffer) => (output += chunk.toString()));
  children.push(child);
  return Object.assign(child, { output: () => output });
}

async function waitFor(what: string, check: () => boolean, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    assert.ok(Date.now() < deadline, `timed out waiting for ${what}`);
    await new Promise((resolveWait) => setTimeout(resolveWait, 50));
  }
}

async function token(principal: string): Promise<string> {
  const { stdout } = await cluster.gavel(["token", "issue", "--certs-dir", cluster.certsDir, "--sub", principal]);
  return stdout.trim();
}

before(async () => {
  cluster = await TestCluster.start();
  scratch = mkdtempSync(join(tmpdir(), "orpc-refund-"));
});

after(async () => {
  for (const child of children) {
    if (child.pid !== undefined && child.exitCode === null && child.signalCode === null) {
      process.kill(child.pid, "SIGKILL");
    }
  }
  await cluster?.stop();
  rmSync(scratch, { recursive: true, force: true });
});

test("the orpc-refund example: submit, approve from the CLI as another principal, one result", async () => {
  for (const [principal, grant] of readmeGrants()) {
    await cluster.gavel(["access", "grant", principal, grant]);
  }
  const sync = start("sync.js", [], {});
  await waitFor("sync to finish", () => sync.exitCode !== null, 20_000);
  assert.equal(sync.exitCode, 0, sync.output());
  assert.match(sync.output(), /registered orders\.refund\.ts version \d+/);

  const worker = start("worker.js", [], { GAVEL_TOKEN: await token("worker:refunds") });
  await waitFor("the worker to poll", () => worker.output().includes("polling"), 10_000);

  const agent = start("agent.js", ["o-42", "1250"], { GAVEL_TOKEN: await token("service:refund-app") });
  await waitFor("the approval request", () => agent.output().includes("approval required: apr_refund-o-42"), 15_000);

  // The agent's own principal cannot approve it: it lacks the approver grant.
  const self = await cluster
    .gavel(["approval", "approve", "apr_refund-o-42"], {
      GAVEL_TOKEN: await token("service:refund-app"),
      GAVEL_CERT: undefined,
      GAVEL_KEY: undefined,
    })
    .then(
      () => "approved",
      (error: { stderr?: string }) => error.stderr ?? "",
    );
  assert.match(self, /PERMISSION_DENIED/);

  const approved = await cluster.gavel(["approval", "approve", "apr_refund-o-42", "--comment", "customer verified"], {
    GAVEL_TOKEN: await token("user:bob-finance"),
    GAVEL_CERT: undefined,
    GAVEL_KEY: undefined,
  });
  assert.match(approved.stdout, /approved by user:bob-finance/);

  await waitFor("the agent to print the result", () => agent.exitCode !== null, 30_000);
  assert.equal(agent.exitCode, 0, agent.output());
  assert.match(
    agent.output(),
    /result: \{"orderId":"o-42","reference":"ch_0001","refunded":true\} \(attempts 1, approver user:bob-finance\)/,
  );
  const ledger = readFileSync(join(scratch, "orpc-refund-ledger.jsonl"), "utf8").trim().split("\n");
  assert.equal(ledger.length, 1, "one charge");

  process.kill(worker.pid!, "SIGTERM");
  await waitFor("the worker to stop", () => worker.exitCode !== null || worker.signalCode !== null, 15_000);
  assert.match(worker.output(), /stopped/);
});
