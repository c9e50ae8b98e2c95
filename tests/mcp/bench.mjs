// Benchmark of `gavel mcp` (not part of the suite; `npm run bench` in
// tests/mcp, after `npm ci`). Prints numbers, asserts nothing.
//
// 1. Ungoverned overhead: the reference "everything" server in its
//    streamable-HTTP mode, its `echo` tool called by the official
//    TypeScript SDK directly and through a gateway that reaches it by URL,
//    one call at a time; per-call p50 and p99 of both and their difference.
// 2. Governed lifecycles per second: a secured three-node `gavel dev`
//    cluster, `echo` governed with an approval; each lifecycle is
//    tools/call (a task) -> an approving script decides the approval (the
//    TypeScript Gavel client, as another principal) -> tasks/get until the
//    gateway's worker has run the call and the task is completed.
//
// Each figure is the median of RUNS runs, with the spread (min-max). The
// gateway is GAVEL_BIN (default target/debug/gavel): say which build the
// figures are of.
import { execFile, spawn } from "node:child_process";
import { setMaxListeners } from "node:events";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { cpus, loadavg, tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { z } from "zod";
import { DevCluster, freePort, gavelBin, repoRoot } from "../browser/cluster.mjs";

const execFileAsync = promisify(execFile);
const here = dirname(fileURLToPath(import.meta.url));
const everythingServer = join(here, "node_modules/@modelcontextprotocol/server-everything/dist/index.js");
const TASKS_EXTENSION = "io.modelcontextprotocol/tasks";
const Result = z.looseObject({});

const RUNS = Number(process.env.BENCH_RUNS ?? 3);
const CALLS = Number(process.env.BENCH_CALLS ?? 1000);
const WARMUP_CALLS = 200;
const LIFECYCLE_SECONDS = Number(process.env.BENCH_SECONDS ?? 10);
const LIFECYCLE_CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 8);

// The SDK's HTTP client adds an abort listener per request to one signal
// of a long-lived connection; thousands of calls would print a warning each.
setMaxListeners(1_000_000);

const children = [];
process.on("exit", () => {
  for (const child of children) if (child.exitCode === null) child.kill("SIGKILL");
});

/** Spawns `command` and resolves once its output matches `ready`; resolves with the match. */
function startProcess(command, args, env, ready) {
  // A null value removes the variable.
  const merged = Object.fromEntries(Object.entries({ ...process.env, ...env }).filter(([, value]) => value !== null));
  const child = spawn(command, args, { stdio: ["ignore", "pipe", "pipe"], env: merged });
  children.push(child);
  let output = "";
  return new Promise((resolveReady, reject) => {
    const timer = setTimeout(() => reject(new Error(`${command} did not start:\n${output}`)), 30_000);
    const seen = (chunk) => {
      output += chunk;
      const match = ready.exec(output);
      if (match) {
        clearTimeout(timer);
        child.stdout.resume();
        child.stderr.resume();
        resolveReady({ child, match });
      }
    };
    child.stdout.on("data", seen);
    child.stderr.on("data", seen);
    child.once("exit", (code) => reject(new Error(`${command} exited (${code}):\n${output}`)));
  });
}

const startGateway = (config, env = {}) =>
  startProcess(gavelBin, ["mcp", "--config", config, "--http", "127.0.0.1:0"], { RUST_LOG: "warn", ...env }, /serving MCP at (http:\/\/\S+)/).then(
    ({ match }) => match[1],
  );

async function connect(url, token, tasks = false) {
  const headers = token === undefined ? {} : { Authorization: `Bearer ${token}` };
  const client = new Client(
    { name: "gavel-mcp-bench", version: "1.0.0" },
    { capabilities: tasks ? { extensions: { [TASKS_EXTENSION]: {} } } : {} },
  );
  await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } }));
  return client;
}

const percentile = (sorted, p) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
const median = (values) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];
const spread = (values, digits) =>
  `${median(values).toFixed(digits)} (${Math.min(...values).toFixed(digits)}-${Math.max(...values).toFixed(digits)})`;

/** Per-call latencies (ms, sorted) of `calls` sequential echo calls. */
async function latencies(client, calls) {
  const times = [];
  for (let call = 0; call < calls; call += 1) {
    const started = process.hrtime.bigint();
    await client.callTool({ name: "echo", arguments: { message: "bench" } });
    times.push(Number(process.hrtime.bigint() - started) / 1e6);
  }
  return times.sort((a, b) => a - b);
}

async function ungoverned(scratch) {
  const port = await freePort();
  await startProcess(process.execPath, [everythingServer, "streamableHttp"], { PORT: String(port) }, /listening on port/);
  const upstreamUrl = `http://127.0.0.1:${port}/mcp`;
  const config = join(scratch, "bench-ungoverned.toml");
  writeFileSync(config, `[[server]]\nname = "everything"\nurl = "${upstreamUrl}"\n`);
  const gatewayUrl = await startGateway(config);
  const direct = await connect(upstreamUrl);
  const gated = await connect(gatewayUrl);
  await latencies(direct, WARMUP_CALLS);
  await latencies(gated, WARMUP_CALLS);
  const rows = { direct50: [], direct99: [], gateway50: [], gateway99: [], over50: [], over99: [] };
  for (let run = 0; run < RUNS; run += 1) {
    const d = await latencies(direct, CALLS);
    const g = await latencies(gated, CALLS);
    rows.direct50.push(percentile(d, 50));
    rows.direct99.push(percentile(d, 99));
    rows.gateway50.push(percentile(g, 50));
    rows.gateway99.push(percentile(g, 99));
    rows.over50.push(percentile(g, 50) - percentile(d, 50));
    rows.over99.push(percentile(g, 99) - percentile(d, 99));
    console.error(`  run ${run + 1}: direct p50 ${percentile(d, 50).toFixed(2)} ms, gateway p50 ${percentile(g, 50).toFixed(2)} ms`);
  }
  await Promise.all([direct.close(), gated.close()]);
  console.log(`ungoverned echo, ${CALLS} sequential calls per run, median of ${RUNS} runs (min-max), ms:`);
  console.log(`  direct to the upstream   p50 ${spread(rows.direct50, 2)}   p99 ${spread(rows.direct99, 2)}`);
  console.log(`  through the gateway      p50 ${spread(rows.gateway50, 2)}   p99 ${spread(rows.gateway99, 2)}`);
  console.log(`  gateway overhead         p50 ${spread(rows.over50, 2)}   p99 ${spread(rows.over99, 2)}`);
  return upstreamUrl;
}

async function governed(upstreamUrl) {
  const cluster = await DevCluster.start();
  try {
    const config = join(cluster.dataDir, "bench-governed.toml");
    writeFileSync(
      config,
      `[[server]]\nname = "everything"\nurl = "${upstreamUrl}"\n[[tool]]\nserver = "everything"\ntool = "echo"\napproval = true\n`,
    );
    await execFileAsync(gavelBin, ["mcp", "check", config, "--register"], { env: { ...process.env, ...cluster.env } });
    await cluster.gavel(["access", "grant", "service:mcp-gateway", "worker"]);
    const gatewayUrl = await startGateway(config, { ...cluster.env, GAVEL_CERT: null, GAVEL_KEY: null, GAVEL_TOKEN: await cluster.token("service:mcp-gateway") });
    const agent = await connect(gatewayUrl, await cluster.token("user:alice"), true);
    const { createGavelClient } = await import(join(repoRoot, "clients/typescript/packages/client/dist/esm/index.js"));
    const approver = createGavelClient({
      endpoints: cluster.env.GAVEL_ENDPOINTS.split(","),
      tls: { ca: readFileSync(cluster.env.GAVEL_CA) },
      token: await cluster.token("user:carol"),
    });
    const lifecycle = async () => {
      const created = await agent.request({ method: "tools/call", params: { name: "echo", arguments: { message: "governed" } } }, Result);
      await approver.decide(`apr_${created.taskId}`, { approve: true, comment: "bench" });
      for (;;) {
        const task = await agent.request({ method: "tasks/get", params: { taskId: created.taskId } }, Result);
        if (task.status === "completed") return;
        if (task.status !== "working") throw new Error(`task ended ${JSON.stringify(task)}`);
        await new Promise((resolveWait) => setTimeout(resolveWait, 10));
      }
    };
    const measure = async (seconds) => {
      const deadline = Date.now() + seconds * 1000;
      const started = process.hrtime.bigint();
      let done = 0;
      await Promise.all(
        Array.from({ length: LIFECYCLE_CONCURRENCY }, async () => {
          while (Date.now() < deadline) {
            await lifecycle();
            done += 1;
          }
        }),
      );
      return done / (Number(process.hrtime.bigint() - started) / 1e9);
    };
    await measure(2);
    const rates = [];
    for (let run = 0; run < RUNS; run += 1) {
      rates.push(await measure(LIFECYCLE_SECONDS));
      console.error(`  run ${run + 1}: ${rates.at(-1).toFixed(1)} lifecycles/s`);
    }
    await agent.close();
    console.log(
      `governed echo with an approval, ${LIFECYCLE_CONCURRENCY} lifecycles in flight, ${LIFECYCLE_SECONDS} s per run, median of ${RUNS} runs (min-max):`,
    );
    console.log(`  call -> task -> approved -> tasks/get resumes -> worker runs -> completed: ${spread(rates, 1)} lifecycles/s`);
  } finally {
    await cluster.stop();
  }
}

const scratch = mkdtempSync(join(tmpdir(), "gavel-mcp-bench-"));
console.log(`gavel mcp bench: ${gavelBin}, node ${process.version}, ${cpus().length} cores, load ${loadavg().map((l) => l.toFixed(2)).join(" ")}`);
const upstreamUrl = await ungoverned(scratch);
await governed(upstreamUrl);
console.log(`load after: ${loadavg().map((l) => l.toFixed(2)).join(" ")}`);
process.exit(0);
