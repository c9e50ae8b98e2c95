// README.md's orpc-refund walk-through, run by the tests the way a reader
// runs it: the grants README.md gives, the capability sync as the dev admin,
// the worker and the agent as their own principals (tokens), the approval
// from the CLI as a third principal, one charge in the worker's ledger.
// example.test.ts runs it on the workspace build of examples/orpc-refund;
// package.test.ts on an app outside the repository that installed the
// packed tarballs, as an ES module app and as a CommonJS app.
import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import type { TestCluster } from "./cluster.js";
import { readmeGrants } from "./readme.js";

/** Where one run's programs are. */
export interface RefundApp {
  /** The path of the program `sync`, `worker` or `agent` (run with node). */
  program: (name: "sync" | "worker" | "agent") => string;
  /** The working directory: the worker's ledger is written here. */
  cwd: string;
  /** The order to refund; the approval is `apr_refund-<orderId>`. */
  orderId: string;
  /** Node's own options for every program. */
  nodeOptions?: string[];
}

type Child = ChildProcess & { output: () => string };

async function waitFor(what: string, check: () => boolean, timeoutMs: number, output: () => string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    assert.ok(Date.now() < deadline, `timed out waiting for ${what}:\n${output()}`);
    await new Promise((resolveWait) => setTimeout(resolveWait, 50));
  }
}

async function token(cluster: TestCluster, principal: string): Promise<string> {
  const { stdout } = await cluster.gavel(["token", "issue", "--certs-dir", cluster.certsDir, "--sub", principal]);
  return stdout.trim();
}

/** Runs the walk-through against `cluster`; every process it starts is stopped by PID before it returns. */
export async function runRefundWalkthrough(cluster: TestCluster, app: RefundApp): Promise<void> {
  const children: Child[] = [];
  const start = (name: "sync" | "worker" | "agent", args: string[], env: Record<string, string>): Child => {
    const child = spawn(process.execPath, [...(app.nodeOptions ?? []), app.program(name), ...args], {
      cwd: app.cwd,
      env: { ...process.env, ...cluster.env, ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let output = "";
    child.stdout?.on("data", (chunk: Buffer) => (output += chunk.toString()));
    child.stderr?.on("data", (chunk: Buffer) => (output += chunk.toString()));
    const tracked = Object.assign(child, { output: () => output });
    children.push(tracked);
    return tracked;
  };
  const approvalId = `apr_refund-${app.orderId}`;
  try {
    for (const [principal, grant] of readmeGrants()) {
      await cluster.gavel(["access", "grant", principal, grant]);
    }
    const sync = start("sync", [], {});
    await waitFor("sync to finish", () => sync.exitCode !== null, 20_000, sync.output);
    assert.equal(sync.exitCode, 0, sync.output());
    assert.match(sync.output(), /registered orders\.refund\.ts version \d+/);

    const worker = start("worker", [], { GAVEL_TOKEN: await token(cluster, "worker:refunds") });
    await waitFor("the worker to poll", () => worker.output().includes("polling"), 10_000, worker.output);

    const agent = start("agent", [app.orderId, "1250"], { GAVEL_TOKEN: await token(cluster, "service:refund-app") });
    await waitFor("the approval request", () => agent.output().includes(`approval required: ${approvalId}`), 15_000, agent.output);

    // The agent's own principal cannot approve it: it lacks the approver grant.
    // (`--yes`: decide on the terms the CLI prints, there being no terminal
    // to confirm them on.)
    const self = await cluster
      .gavel(["approval", "approve", approvalId, "--yes"], {
        GAVEL_TOKEN: await token(cluster, "service:refund-app"),
        GAVEL_CERT: undefined,
        GAVEL_KEY: undefined,
      })
      .then(
        () => "approved",
        (error: { stderr?: string }) => error.stderr ?? "",
      );
    assert.match(self, /PERMISSION_DENIED/);

    const approved = await cluster.gavel(["approval", "approve", approvalId, "--yes", "--comment", "customer verified"], {
      GAVEL_TOKEN: await token(cluster, "user:bob-finance"),
      GAVEL_CERT: undefined,
      GAVEL_KEY: undefined,
    });
    assert.match(approved.stdout, /approved by user:bob-finance/);

    await waitFor("the agent to print the result", () => agent.exitCode !== null, 30_000, agent.output);
    assert.equal(agent.exitCode, 0, agent.output());
    const result = `result: {"orderId":"${app.orderId}","reference":"ch_0001","refunded":true} (attempts 1, approver user:bob-finance)`;
    assert.ok(agent.output().includes(result), `${result}\nnot in:\n${agent.output()}`);
    const ledger = readFileSync(join(app.cwd, "orpc-refund-ledger.jsonl"), "utf8").trim().split("\n");
    assert.equal(ledger.length, 1, "one charge");

    process.kill(worker.pid!, "SIGTERM");
    await waitFor("the worker to stop", () => worker.exitCode !== null || worker.signalCode !== null, 15_000, worker.output);
    assert.match(worker.output(), /stopped/);
  } finally {
    for (const child of children) {
      if (child.pid !== undefined && child.exitCode === null && child.signalCode === null) {
        process.kill(child.pid, "SIGKILL");
      }
    }
  }
}
