// A small benchmark of the TypeScript client: sequential approval lifecycles
// (create, decide by another actor, consume) from one client against a fresh
// `gavel dev` cluster, for a fixed time after a warm-up; prints p50/p99 of the
// lifecycle and of each call. Not part of the test suite:
//
//   node test/dist/bench.js [seconds]      (default 10)
import { randomUUID } from "node:crypto";
import { ActorKind, ApprovalStatus, Risk, SideEffect } from "@gavel/client";
import { TestCluster } from "./cluster.js";

const seconds = Number(process.argv[2] ?? 10);
const warmupMs = 2000;

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))] ?? Number.NaN;
}

const cluster = await TestCluster.start();
try {
  const client = cluster.adminClient();
  const run = randomUUID().slice(0, 8);
  const timings = { lifecycle: [] as number[], create: [] as number[], decide: [] as number[], consume: [] as number[] };
  let serial = 0;
  const lifecycle = async (record: boolean) => {
    serial += 1;
    const id = `bench_${run}_${serial}`;
    const t0 = performance.now();
    await client.approvals.createApproval({
      id,
      capabilityId: "bench.approval",
      surface: "bench",
      actor: { id: "agent", kind: ActorKind.AUTOMATION },
      inputJson: `{"n":${serial}}`,
      risk: Risk.LOW,
      sideEffect: SideEffect.WRITE,
    });
    const t1 = performance.now();
    await client.approvals.decideApproval({
      id,
      status: ApprovalStatus.APPROVED,
      approver: { id: "approver", kind: ActorKind.USER },
    });
    const t2 = performance.now();
    await client.approvals.consumeApproval({ id, executionId: `exe_${serial}` });
    const t3 = performance.now();
    if (record) {
      timings.create.push(t1 - t0);
      timings.decide.push(t2 - t1);
      timings.consume.push(t3 - t2);
      timings.lifecycle.push(t3 - t0);
    }
  };
  const warmEnd = performance.now() + warmupMs;
  while (performance.now() < warmEnd) await lifecycle(false);
  const end = performance.now() + seconds * 1000;
  while (performance.now() < end) await lifecycle(true);
  const line = (name: string, values: number[]) => {
    const sorted = [...values].sort((a, b) => a - b);
    return `${name.padEnd(10)} n=${sorted.length} p50 ${percentile(sorted, 50).toFixed(2)} ms  p99 ${percentile(sorted, 99).toFixed(2)} ms`;
  };
  console.log(`TypeScript client, 1 client, ${seconds}s, secured gavel dev cluster (TLS, client certificate):`);
  console.log(`  ${(timings.lifecycle.length / seconds).toFixed(1)} lifecycles/s`);
  for (const [name, values] of Object.entries(timings)) console.log(`  ${line(name, values)}`);
} finally {
  await cluster.stop();
}
