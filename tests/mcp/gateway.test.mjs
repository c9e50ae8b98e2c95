// gavel mcp end to end, every part real: a secured three-node `gavel dev`
// cluster, two gateway processes (`gavel mcp --http`) in front of the
// reference filesystem server, and the official TypeScript SDK as the
// agents' MCP client, each agent with its own Gavel token.
import assert from "node:assert/strict";
import { execFile, spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { after, before, test } from "node:test";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { z } from "zod";
import { DevCluster, gavelBin } from "../browser/cluster.mjs";

const execFileAsync = promisify(execFile);
const TASKS_EXTENSION = "io.modelcontextprotocol/tasks";
const here = dirname(fileURLToPath(import.meta.url));
const filesystemServer = join(here, "node_modules/@modelcontextprotocol/server-filesystem/dist/index.js");
const everythingServer = join(here, "node_modules/@modelcontextprotocol/server-everything/dist/index.js");
const Result = z.looseObject({});

let cluster;
let root;
let configPath;
const gateways = [];
const upstreamProcesses = [];
const clients = [];

/** Starts `gavel mcp --http 127.0.0.1:0` as service:mcp-gateway; resolves with its URL. */
async function startGateway(token, extraArgs = [], config = configPath) {
  const env = { ...process.env, ...cluster.env, GAVEL_TOKEN: token, RUST_LOG: "warn" };
  delete env.GAVEL_CERT;
  delete env.GAVEL_KEY;
  const child = spawn(gavelBin, ["mcp", "--config", config, "--http", "127.0.0.1:0", ...extraArgs], {
    stdio: ["ignore", "pipe", "pipe"],
    env,
  });
  gateways.push(child);
  let output = "";
  const url = await new Promise((resolveUrl, reject) => {
    const timer = setTimeout(() => reject(new Error(`gavel mcp did not start:\n${output}`)), 30_000);
    child.stdout.on("data", (chunk) => {
      output += chunk;
      const match = /serving MCP at (http:\/\/\S+)/.exec(output);
      if (match) {
        clearTimeout(timer);
        resolveUrl(match[1]);
      }
    });
    child.stderr.on("data", (chunk) => {
      output += chunk;
    });
    child.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`gavel mcp exited (${code}):\n${output}`));
    });
  });
  return { child, url };
}

/** Kills a gateway with SIGKILL and waits for it to be gone. */
async function kill(gateway) {
  const exited = new Promise((resolveExit) => gateway.child.once("exit", resolveExit));
  gateway.child.kill("SIGKILL");
  await exited;
}

/** An MCP client of `url` declaring the Tasks extension, as the agent `token` names (none: anonymous). */
async function connect(url, token) {
  const headers = token === undefined ? {} : { Authorization: `Bearer ${token}` };
  const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } });
  const client = new Client(
    { name: "gavel-mcp-test-agent", version: "1.0.0" },
    { capabilities: { extensions: { [TASKS_EXTENSION]: {} } } },
  );
  await client.connect(transport);
  clients.push(client);
  return client;
}

const callTool = (client, name, args) => client.request({ method: "tools/call", params: { name, arguments: args } }, Result);
const getTask = (client, taskId) => client.request({ method: "tasks/get", params: { taskId } }, Result);
const cancelTask = (client, taskId) => client.request({ method: "tasks/cancel", params: { taskId } }, Result);

async function until(what, probe, timeoutMs = 20_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) {
      return value;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out waiting for ${what}`);
    }
    await new Promise((resolveWait) => setTimeout(resolveWait, 200));
  }
}

/** The CLI's exit code and standard error for a command expected to fail. */
async function refusal(args, principal) {
  try {
    await cluster.gavel(args, principal);
  } catch (error) {
    return { code: error.code, stderr: String(error.stderr) };
  }
  throw new Error(`gavel ${args.join(" ")} succeeded`);
}

let gatewayToken;
let aliceToken;
let alice;
let aliceOnB;
let mallory;
let anonymous;

before(async () => {
  cluster = await DevCluster.start();
  root = mkdtempSync(join(tmpdir(), "gavel-mcp-root-"));
  configPath = join(cluster.dataDir, "gavel-mcp.toml");
  writeFileSync(
    configPath,
    [
      `console_url = ${JSON.stringify(cluster.consoleUrl)}`,
      "[[server]]",
      'name = "filesystem"',
      `command = [${JSON.stringify(process.execPath)}, ${JSON.stringify(filesystemServer)}, ${JSON.stringify(root)}]`,
      "[[tool]]",
      'server = "filesystem"',
      'tool = "write_file"',
      "",
    ].join("\n"),
  );
  // The operator registers the governed capability (as the dev admin).
  const checked = await execFileAsync(gavelBin, ["mcp", "check", configPath, "--register"], {
    env: { ...process.env, ...cluster.env },
    timeout: 30_000,
  });
  assert.match(checked.stdout, /filesystem\.write_file -> mcp\.filesystem\.write_file \(destructive/);
  await cluster.gavel(["access", "grant", "service:mcp-gateway", "worker"]);
  await cluster.gavel(["access", "grant", "user:mallory", "submitter"]);
  // Alice may approve others' calls, so that refusing her own is the
  // self-approval rule, not a missing grant.
  await cluster.gavel(["access", "grant", "user:alice", "approver"]);
  gatewayToken = await cluster.token("service:mcp-gateway");
  // Gateway A runs the governed tools; gateway B only answers.
  const [gatewayA, gatewayB] = await Promise.all([
    startGateway(gatewayToken),
    startGateway(gatewayToken, ["--no-worker"]),
  ]);
  const [urlA, urlB] = [gatewayA.url, gatewayB.url];
  aliceToken = await cluster.token("user:alice");
  alice = await connect(urlA, aliceToken);
  aliceOnB = await connect(urlB, aliceToken);
  mallory = await connect(urlA, await cluster.token("user:mallory"));
  anonymous = await connect(urlA);
});

after(async () => {
  for (const client of clients) {
    await client.close().catch(() => {});
  }
  for (const child of [...gateways, ...upstreamProcesses]) {
    if (child.exitCode === null) child.kill("SIGKILL");
  }
  await cluster?.stop();
  if (root) rmSync(root, { recursive: true, force: true });
});

test("the upstream tools are listed and an ungoverned call passes through", async () => {
  const { tools } = await alice.listTools();
  const names = tools.map((tool) => tool.name);
  assert.ok(names.includes("write_file") && names.includes("read_text_file"), names.join(","));
  writeFileSync(join(root, "hello.txt"), "hello from the upstream");
  const read = await callTool(alice, "read_text_file", { path: join(root, "hello.txt") });
  assert.equal(read.isError ?? false, false);
  assert.match(read.content[0].text, /hello from the upstream/);
});

test("a governed write waits for another principal's approval, runs once, and any gateway answers its task", async () => {
  const target = join(root, "approved.txt");
  const created = await callTool(alice, "write_file", { path: target, content: "approved content" });
  assert.equal(created.resultType, "task");
  const taskId = created.taskId;
  assert.match(taskId, /^mcp-[0-9a-f]{32}$/);
  assert.equal(created.status, "working");
  assert.match(created.statusMessage, new RegExp(`/approvals/apr_${taskId}`));

  // Pending: nothing ran, on either gateway's answer.
  await new Promise((resolveWait) => setTimeout(resolveWait, 1_000));
  for (const client of [alice, aliceOnB]) {
    const pending = await getTask(client, taskId);
    assert.equal(pending.status, "working");
    assert.match(pending.statusMessage, /waiting for approval/);
  }
  assert.equal(existsSync(target), false);

  // The requester cannot approve its own call.
  const self = await refusal(["approval", "approve", `apr_${taskId}`, "--yes"], "user:alice");
  assert.equal(self.code, 3);
  assert.match(self.stderr, /APPROVAL_SELF_APPROVAL/);

  // Another principal approves; gateway B's tasks/get spends the approval
  // and gateway A's worker runs the write.
  await cluster.gavel(["approval", "approve", `apr_${taskId}`, "--yes", "--comment", "ok"], "user:carol");
  const done = await until("the task to complete", async () => {
    const task = await getTask(aliceOnB, taskId);
    return task.status === "working" ? undefined : task;
  });
  assert.equal(done.status, "completed", JSON.stringify(done));
  assert.equal(done.result.isError ?? false, false, JSON.stringify(done.result));
  assert.equal(readFileSync(target, "utf8"), "approved content");
  assert.deepEqual((await getTask(alice, taskId)).result, done.result);

  // Exactly once: one attempt, and polling both gateways again never
  // writes the (now removed) file a second time.
  const execution = await cluster.gavel(["exec", "get", taskId]);
  assert.equal(execution.attempts, 1, JSON.stringify(execution));
  rmSync(target);
  for (let poll = 0; poll < 3; poll += 1) {
    assert.equal((await getTask(alice, taskId)).status, "completed");
    assert.equal((await getTask(aliceOnB, taskId)).status, "completed");
  }
  await new Promise((resolveWait) => setTimeout(resolveWait, 1_000));
  assert.equal(existsSync(target), false);
});

test("a rejected call never writes and its task fails with the reason", async () => {
  const target = join(root, "rejected.txt");
  const created = await callTool(alice, "write_file", { path: target, content: "never" });
  await cluster.gavel(["approval", "reject", `apr_${created.taskId}`, "--yes", "--comment", "no"], "user:carol");
  const task = await getTask(aliceOnB, created.taskId);
  assert.equal(task.status, "failed", JSON.stringify(task));
  assert.equal(task.error.data.gavelCode, "APPROVAL_REJECTED");
  assert.match(task.error.message, /rejected by user:carol: no/);
  await new Promise((resolveWait) => setTimeout(resolveWait, 1_000));
  assert.equal(existsSync(target), false);
});

test("another principal's tasks/get and tasks/cancel are answered as for an unknown task", async () => {
  const target = join(root, "alice-only.txt");
  const created = await callTool(alice, "write_file", { path: target, content: "alice's" });
  const unknownId = "mcp-00000000000000000000000000000000";
  for (const [client, id] of [
    [mallory, created.taskId],
    [mallory, unknownId],
    [anonymous, created.taskId],
  ]) {
    for (const call of [getTask, cancelTask]) {
      await assert.rejects(call(client, id), (error) => {
        assert.equal(error.code, -32602);
        assert.equal(error.message.replace(id, "ID"), 'MCP error -32602: unknown task "ID"');
        return true;
      });
    }
  }
  // Still alice's, still pending; she withdraws it and it ends cancelled.
  assert.equal((await getTask(alice, created.taskId)).status, "working");
  await cancelTask(alice, created.taskId);
  assert.equal((await getTask(aliceOnB, created.taskId)).status, "cancelled");
  assert.equal(existsSync(target), false);
});

test("an unauthenticated client gets nothing governed", async () => {
  const target = join(root, "anonymous.txt");
  const refused = await callTool(anonymous, "write_file", { path: target, content: "no" });
  assert.equal(refused.isError, true);
  assert.match(refused.content[0].text, /governed by Gavel and needs an authenticated agent/);
  assert.equal(existsSync(target), false);
});

test("a gateway killed after the approval or during the call never runs a non-idempotent tool twice", async () => {
  // Its own upstream: append_line, a write that is not idempotent (two
  // runs leave two lines), with an attempt deadline of 4 s and no retries.
  const crashConfig = join(cluster.dataDir, "gavel-mcp-ledger.toml");
  writeFileSync(
    crashConfig,
    [
      "[[server]]",
      'name = "ledger"',
      `command = [${JSON.stringify(process.execPath)}, ${JSON.stringify(join(here, "ledger-server.mjs"))}]`,
      "[[tool]]",
      'server = "ledger"',
      'tool = "append_line"',
      "approval = true",
      "timeout_ms = 4000",
      "",
    ].join("\n"),
  );
  await execFileAsync(gavelBin, ["mcp", "check", crashConfig, "--register"], {
    env: { ...process.env, ...cluster.env },
    timeout: 30_000,
  });
  const ledger = join(root, "ledger.txt");
  const lines = () => (existsSync(ledger) ? readFileSync(ledger, "utf8").split("\n").filter(Boolean) : []);
  const answering = await startGateway(gatewayToken, ["--no-worker"], crashConfig);
  let worker = await startGateway(gatewayToken, [], crashConfig);
  const agent = await connect(answering.url, aliceToken);
  const approvedCall = async (line, delayMs) => {
    const created = await callTool(agent, "append_line", { path: ledger, line, delay_ms: delayMs });
    await cluster.gavel(["approval", "approve", `apr_${created.taskId}`, "--yes"], "user:carol");
    return created.taskId;
  };
  const terminal = (taskId) =>
    until("a final task", async () => {
      const task = await getTask(agent, taskId);
      return task.status === "working" ? undefined : task;
    });

  // Killed between the approval and the upstream call: the approved call
  // waits in the cluster and the next worker runs it, once.
  const first = await approvedCall("first", 0);
  await kill(worker);
  assert.equal((await getTask(agent, first)).status, "working"); // spends the approval: queued, no worker
  await new Promise((resolveWait) => setTimeout(resolveWait, 500));
  assert.deepEqual(lines(), []);
  worker = await startGateway(gatewayToken, [], crashConfig);
  assert.equal((await terminal(first)).status, "completed");
  assert.deepEqual(lines(), ["first"]);

  // Killed during the upstream call: the lease runs out, and the cluster's
  // retry rules (a write, not idempotent, no retries) end the task as
  // "may have run" instead of running it again on the next worker.
  const second = await approvedCall("second", 2_000);
  assert.equal((await getTask(agent, second)).status, "working");
  await until("the attempt's lease", async () => {
    const execution = await cluster.gavel(["exec", "get", second]);
    return execution.state === "leased" ? execution : undefined;
  });
  await kill(worker);
  worker = await startGateway(gatewayToken, [], crashConfig);
  const ended = await terminal(second);
  assert.equal(ended.status, "failed", JSON.stringify(ended));
  assert.equal(ended.error.data.gavelCode, "TIMEOUT");
  assert.equal(ended.error.data.mayHaveRun, true);
  await new Promise((resolveWait) => setTimeout(resolveWait, 2_500));
  const seconds = lines().filter((line) => line === "second");
  assert.ok(seconds.length <= 1, lines().join(","));
  assert.equal((await cluster.gavel(["exec", "get", second])).attempts, 1);
  await kill(worker);
});

/** A loopback port nobody listens on (for a server that cannot be told port 0). */
async function freePort() {
  const probe = createServer();
  await new Promise((resolveListen) => probe.listen(0, "127.0.0.1", resolveListen));
  const { port } = probe.address();
  await new Promise((resolveClose) => probe.close(resolveClose));
  return port;
}

test("a streamable-HTTP upstream's tools pass through and run governed on the gateway's worker", async () => {
  // The reference "everything" server in its streamable-HTTP mode, reached
  // by URL: an ungoverned echo, and get-sum governed (read-only, so no
  // approval: the call becomes an execution the worker runs at once).
  const port = await freePort();
  const everything = spawn(process.execPath, [everythingServer, "streamableHttp"], {
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, PORT: String(port) },
  });
  upstreamProcesses.push(everything);
  let log = "";
  await new Promise((resolveListen, reject) => {
    const timer = setTimeout(() => reject(new Error(`server-everything did not start:\n${log}`)), 20_000);
    const seen = (chunk) => {
      log += chunk;
      if (/listening on port/.test(log)) {
        clearTimeout(timer);
        resolveListen();
      }
    };
    everything.stdout.on("data", seen);
    everything.stderr.on("data", seen);
    everything.once("exit", (code) => reject(new Error(`server-everything exited (${code}):\n${log}`)));
  });
  const httpConfig = join(cluster.dataDir, "gavel-mcp-http.toml");
  writeFileSync(
    httpConfig,
    [
      "[[server]]",
      'name = "everything"',
      `url = "http://127.0.0.1:${port}/mcp"`,
      "[[tool]]",
      'server = "everything"',
      'tool = "get-sum"',
      "",
    ].join("\n"),
  );
  const checked = await execFileAsync(gavelBin, ["mcp", "check", httpConfig, "--register"], {
    env: { ...process.env, ...cluster.env },
    timeout: 30_000,
  });
  assert.match(checked.stdout, /everything\.get-sum -> mcp\.everything\.get-sum \(read, idempotent true, approval not required\)/);
  const gateway = await startGateway(gatewayToken, [], httpConfig);
  const agent = await connect(gateway.url, aliceToken);

  const echoed = await callTool(agent, "echo", { message: "through the gateway" });
  assert.equal(echoed.isError ?? false, false, JSON.stringify(echoed));
  assert.match(echoed.content[0].text, /through the gateway/);

  const created = await callTool(agent, "get-sum", { a: 2, b: 40 });
  assert.equal(created.resultType, "task", JSON.stringify(created));
  const done = await until("the get-sum task", async () => {
    const task = await getTask(agent, created.taskId);
    return task.status === "working" ? undefined : task;
  });
  assert.equal(done.status, "completed", JSON.stringify(done));
  assert.match(done.result.content[0].text, /42/);
  await kill(gateway);
});
