// What one call costs the Node process that makes it: CPU time (user +
// system, process.cpuUsage) per call of @gavel/client against a fresh
// `gavel dev` cluster, one caller and 64 concurrent callers, for a read
// (GetApproval), a write (CreateApproval) and the governed tool call of
// issue 42 (Submit needing approval, DecideApproval by another actor,
// ResumeAndWait, with a worker of the same process running the tool: the
// CPU of caller and worker together). Three rounds after a warm-up; prints
// each round and the median. Not part of the test suite:
//
//   node test/dist/cost.js [calls per round]                     (default 2000)
//   GAVEL_CLIENT_MODULE=/path/to/esm/index.js node test/dist/cost.js   (another build of the client)
//   node --cpu-prof --cpu-prof-dir=DIR test/dist/cost.js          (where the time goes)
//   COST_ONLY="governed call" node test/dist/cost.js              (the cases whose name starts so)
import { randomUUID } from "node:crypto";
import { TestCluster } from "./cluster.js";

const calls = Number(process.argv[2] ?? 2000);
const rounds = 3;
const gavel = (await import(process.env.GAVEL_CLIENT_MODULE ?? "@gavel/client")) as typeof import("@gavel/client");

/** Runs `call` `count` times from `concurrency` callers; CPU µs and wall ms per call. */
async function measure(concurrency: number, count: number, call: (serial: number) => Promise<unknown>) {
  let next = 0;
  const cpu = process.cpuUsage();
  const started = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < count) {
        next += 1;
        await call(next);
      }
    }),
  );
  const used = process.cpuUsage(cpu);
  return { cpuUsPerCall: (used.user + used.system) / count, wallMsPerCall: (performance.now() - started) / count };
}

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;

const cluster = await TestCluster.start();
try {
  await cluster.leader();
  const client = gavel.createGavelClient({
    endpoints: cluster.endpoints,
    tls: { ca: cluster.ca, cert: cluster.adminCert, key: cluster.adminKey },
  });
  const run = randomUUID().slice(0, 8);
  const create = (serial: number) =>
    client.approvals.createApproval({
      id: `cost_${run}_${serial}_${Math.random().toString(36).slice(2)}`,
      capabilityId: "cost.approval",
      surface: "bench",
      actor: { id: "agent", kind: gavel.ActorKind.AUTOMATION },
      inputJson: `{"n":${serial}}`,
      risk: gavel.Risk.LOW,
      sideEffect: gavel.SideEffect.WRITE,
    });
  const readId = `cost_${run}_read`;
  await client.approvals.createApproval({
    id: readId,
    capabilityId: "cost.approval",
    surface: "bench",
    actor: { id: "agent", kind: gavel.ActorKind.AUTOMATION },
    inputJson: "{}",
    risk: gavel.Risk.LOW,
    sideEffect: gavel.SideEffect.WRITE,
  });
  const read = () => client.approvals.getApproval({ id: readId });
  const toolId = `cost.tool.${run}`;
  await client.capabilities.registerCapability({
    spec: {
      id: toolId,
      queue: toolId,
      sideEffect: gavel.SideEffect.WRITE,
      risk: gavel.Risk.LOW,
      timeoutMs: 30_000,
      approval: { required: true },
    },
  });
  const workerClient = gavel.createGavelClient({
    endpoints: cluster.endpoints,
    tls: { ca: cluster.ca, cert: cluster.adminCert, key: cluster.adminKey },
  });
  const worker = gavel.createWorker({
    client: workerClient,
    queues: [toolId],
    concurrency: 64,
    handlers: { [toolId]: ({ input }) => ({ sent: input }) },
  });
  const governed = async (serial: number) => {
    const executionId = `cost_${run}_${serial}_${Math.random().toString(36).slice(2)}`;
    const submitted = await client.executions.submit({
      executionId,
      capabilityId: toolId,
      inputJson: '{"to":"ops@example.com"}',
      actor: { id: "agent", kind: gavel.ActorKind.USER },
      surface: "bench",
    });
    if (submitted.outcome.case !== "approvalRequired") {
      throw new Error(`submit of ${executionId} did not ask for approval`);
    }
    const approvalId = submitted.outcome.value.id;
    await client.approvals.decideApproval({
      id: approvalId,
      status: gavel.ApprovalStatus.APPROVED,
      approver: { id: "approver", kind: gavel.ActorKind.USER },
    });
    const done = await client.executions.resumeAndWait({ resume: { approvalId }, waitMs: 30_000 });
    if (done.execution?.state !== gavel.ExecutionState.COMPLETED) {
      throw new Error(`execution ${executionId} ended ${done.execution?.state}`);
    }
  };
  const cases: [string, number, number, (serial: number) => Promise<unknown>][] = [
    ["GetApproval", 1, calls, read],
    ["GetApproval", 64, calls, read],
    ["CreateApproval", 1, calls, create],
    ["CreateApproval", 64, calls, create],
    ["governed call", 1, Math.ceil(calls / 5), governed],
    ["governed call", 64, Math.ceil(calls / 5), governed],
  ];
  const only = process.env.COST_ONLY ?? "";
  for (const [name, concurrency, count, call] of cases.filter(([name]) => name.startsWith(only))) {
    await measure(concurrency, Math.min(count, 500), call); // warm-up: connections, JIT
    const results = [];
    for (let round = 0; round < rounds; round += 1) {
      results.push(await measure(concurrency, count, call));
    }
    const cpu = results.map((result) => result.cpuUsPerCall);
    const wall = results.map((result) => result.wallMsPerCall);
    console.log(
      `${name.padEnd(15)} c=${String(concurrency).padEnd(3)} calls=${count} cpu_us_per_call median ${median(cpu).toFixed(0)} ` +
        `(rounds ${cpu.map((value) => value.toFixed(0)).join(" ")})  wall_ms_per_call median ${median(wall).toFixed(3)}`,
    );
  }
  await worker.shutdown();
  workerClient.close();
  client.close();
} finally {
  await cluster.stop();
}
