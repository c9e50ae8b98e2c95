// The worker runtime against a real secured three-node cluster: automatic
// heartbeats, the AbortSignal on cancel (latency printed), lease loss and the
// attempt deadline, retries under one idempotencyKey, and graceful shutdown.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, describe, test } from "node:test";
import {
  CapabilitySpecSchema,
  type GavelClient,
  ExecutionState,
  GavelError,
  HandlerError,
  type MessageInitShape,
  type PlainInit,
  Risk,
  SideEffect,
  type TaskContext,
  createWorker,
} from "@gavel/client";
import { TestCluster, eventually } from "./cluster.js";

const run = randomUUID().slice(0, 8);
let cluster: TestCluster;
let submitter: GavelClient;
let workerClient: GavelClient;

async function register(name: string, spec: Omit<PlainInit<MessageInitShape<typeof CapabilitySpecSchema>>, "id" | "queue" | "$typeName"> = {}) {
  const id = `${name}.${run}`;
  await submitter.capabilities.registerCapability({
    spec: { id, queue: id, sideEffect: SideEffect.READ, risk: Risk.LOW, timeoutMs: 30_000, ...spec },
  });
  return id;
}

async function submit(capabilityId: string, input: unknown, executionId = `exe_${randomUUID()}`) {
  await submitter.executions.submit({ executionId, capabilityId, inputJson: JSON.stringify(input), surface: "test" });
  return executionId;
}

async function waitFinal(executionId: string, timeoutMs = 20_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const left = deadline - Date.now();
    assert.ok(left > 0, `execution ${executionId} not final within ${timeoutMs} ms`);
    const reply = await submitter.executions.waitExecution({ executionId, timeoutMs: Math.min(left, 5000) });
    if (!reply.timedOut) {
      return reply.execution!;
    }
  }
}

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
}

before(async () => {
  cluster = await TestCluster.start();
  submitter = cluster.adminClient();
  await cluster.grant("worker:ts-1", ["worker"]);
  workerClient = await cluster.certClient("worker:ts-1");
});

after(async () => {
  await cluster?.stop();
});

describe("createWorker", () => {
  test("runs a task, heartbeats on its own past the heartbeat timeout, and reports ok", async () => {
    const capabilityId = await register("echo", { heartbeatTimeoutMs: 1000 });
    const seen: TaskContext[] = [];
    const worker = createWorker({
      client: workerClient,
      queues: [capabilityId],
      // Above the cluster's 64 tasks per poll: the SDK asks for at most that
      // many (a worker of concurrency 100 once never took work, silently).
      concurrency: 100,
      pollWaitMs: 1000,
      heartbeatIntervalMs: 200,
      handlers: {
        [capabilityId]: async (context) => {
          seen.push(context);
          await new Promise((resolve) => setTimeout(resolve, 2500));
          return { echoed: context.input };
        },
      },
    });
    try {
      const executionId = await submit(capabilityId, { word: "hi \u{1F600}" });
      const execution = await waitFinal(executionId);
      assert.equal(execution.state, ExecutionState.COMPLETED);
      assert.equal(execution.attempts, 1);
      assert.deepEqual(JSON.parse(execution.result?.outcome.case === "completed" ? execution.result.outcome.value.outputJson : "null"), {
        echoed: { word: "hi \u{1F600}" },
      });
      assert.equal(seen.length, 1);
      assert.equal(seen[0]!.executionId, executionId);
      assert.equal(seen[0]!.attempt, 1);
      assert.equal(seen[0]!.idempotencyKey, execution.idempotencyKey);
      assert.equal(seen[0]!.signal.aborted, true, "the signal is aborted once the attempt is over");
    } finally {
      await worker.shutdown();
    }
  });

  test("a retry keeps the idempotencyKey; a fatal failure is not retried", async () => {
    const capabilityId = await register("flaky", {
      sideEffect: SideEffect.WRITE,
      idempotent: true,
      retry: { maxAttempts: 3, backoffMs: 50 },
    });
    const keys = new Map<string, { attempt: number; key: string }[]>();
    const worker = createWorker({
      client: workerClient,
      queues: [capabilityId],
      pollWaitMs: 1000,
      handlers: {
        [capabilityId]: (context) => {
          const list = keys.get(context.executionId) ?? [];
          list.push({ attempt: context.attempt, key: context.idempotencyKey });
          keys.set(context.executionId, list);
          const { fatal } = context.input as { fatal: boolean };
          if (fatal) {
            throw HandlerError.fatal("CARD_DECLINED", "the card was declined");
          }
          if (context.attempt === 1) {
            throw HandlerError.retryable("GATEWAY_TIMEOUT", "the gateway timed out");
          }
          return { attempt: context.attempt };
        },
      },
    });
    try {
      const retried = await submit(capabilityId, { fatal: false });
      const execution = await waitFinal(retried);
      assert.equal(execution.state, ExecutionState.COMPLETED);
      assert.equal(execution.attempts, 2);
      const attempts = keys.get(retried)!;
      assert.deepEqual(attempts.map((entry) => entry.attempt), [1, 2]);
      assert.equal(attempts[0]!.key, attempts[1]!.key);
      assert.equal(attempts[0]!.key, execution.idempotencyKey);

      const fatal = await submit(capabilityId, { fatal: true });
      const failed = await waitFinal(fatal);
      assert.equal(failed.state, ExecutionState.FAILED);
      assert.equal(failed.attempts, 1);
      assert.equal(failed.result?.outcome.case === "failed" ? failed.result.outcome.value.code : "", "CARD_DECLINED");
      assert.notEqual(keys.get(fatal)![0]!.key, attempts[0]!.key, "keys are unique across executions");
    } finally {
      await worker.shutdown();
    }
  });

  test("cancel reaches the AbortSignal (latency p50/p99 printed)", async () => {
    const capabilityId = await register("cancellable", { timeoutMs: 60_000 });
    const HEARTBEAT_MS = 100;
    const SAMPLES = 30;
    const aborted = new Map<string, { at: number; reason: unknown }>();
    const started = new Map<string, () => void>();
    const worker = createWorker({
      client: workerClient,
      queues: [capabilityId],
      pollWaitMs: 1000,
      heartbeatIntervalMs: HEARTBEAT_MS,
      handlers: {
        [capabilityId]: (context) =>
          new Promise((_, reject) => {
            context.signal.addEventListener("abort", () => {
              aborted.set(context.executionId, { at: performance.now(), reason: context.signal.reason });
              reject(new Error("aborted"));
            });
            started.get(context.executionId)?.();
          }),
      },
    });
    const latencies: number[] = [];
    try {
      for (let sample = 0; sample < SAMPLES; sample += 1) {
        const executionId = `exe_cancel_${run}_${sample}`;
        const running = new Promise<void>((resolve) => started.set(executionId, resolve));
        await submit(capabilityId, { sample }, executionId);
        await Promise.race([
          running,
          new Promise((_, reject) => setTimeout(() => reject(new Error("handler did not start")), 10_000)),
        ]);
        const cancelledAt = performance.now();
        await submitter.executions.cancelExecution({ executionId });
        const seen = await eventually(`abort of ${executionId}`, async () => aborted.get(executionId), 5000, 2);
        assert.equal(seen.reason, "cancelled");
        latencies.push(seen.at - cancelledAt);
        const execution = await waitFinal(executionId);
        assert.equal(execution.state, ExecutionState.CANCELLED);
      }
    } finally {
      await worker.shutdown();
    }
    latencies.sort((a, b) => a - b);
    const p50 = percentile(latencies, 50);
    const p99 = percentile(latencies, 99);
    console.log(
      `cancel -> AbortSignal latency over ${SAMPLES} cancels, heartbeat interval ${HEARTBEAT_MS} ms: p50 ${p50.toFixed(1)} ms, p99 ${p99.toFixed(1)} ms, max ${latencies.at(-1)!.toFixed(1)} ms`,
    );
    // The median is one heartbeat interval plus a call; the tail depends on
    // the machine's load (each sample is bounded by the 5 s wait above).
    assert.ok(p50 < HEARTBEAT_MS * 2 + 300, `p50 ${p50} ms is about the heartbeat interval plus a call`);
  });

  test("a report after the lease was lost is refused with LEASE_LOST, and the worker does not send one", async () => {
    const capabilityId = await register("slow", {
      timeoutMs: 1000,
      sideEffect: SideEffect.READ,
      retry: { maxAttempts: 2, backoffMs: 10 },
    });
    // By hand: take a lease, let its deadline pass, then report.
    const executionId = await submit(capabilityId, { by: "hand" });
    const polled = await workerClient.workers.poll({ workerId: "hand", queues: [capabilityId], maxTasks: 1, waitMs: 5000 });
    const task = polled.tasks[0];
    assert.ok(task?.lease !== undefined, "a task was leased");
    await eventually(
      "the attempt to time out",
      async () => {
        const { execution } = await submitter.executions.getExecution({ executionId });
        return execution?.currentLease?.leaseId !== task.lease!.leaseId ? true : undefined;
      },
      10_000,
      100,
    );
    const late = await workerClient.workers
      .report({ leaseId: task.lease.leaseId, workerId: "hand", outcome: { case: "completed", value: { outputJson: "1" } } })
      .then(
        () => undefined,
        (error: unknown) => error,
      );
    assert.ok(late instanceof GavelError, `refused, got ${String(late)}`);
    assert.equal(late.code, "LEASE_LOST");

    // The runtime: a handler that ignores its signal and finishes after the
    // deadline is not reported; the next attempt's result is the one kept.
    const reports: string[] = [];
    const worker = createWorker({
      client: workerClient,
      queues: [capabilityId],
      pollWaitMs: 1000,
      handlers: {
        [capabilityId]: async (context) => {
          if (context.attempt === 2) {
            await new Promise((resolve) => setTimeout(resolve, 1800));
            reports.push(`late ${context.attempt}`);
            return { attempt: context.attempt, late: true };
          }
          return { attempt: context.attempt };
        },
      },
      onError: (error, where) => reports.push(`${where.stage}: ${String(error)}`),
    });
    try {
      const execution = await waitFinal(executionId);
      assert.equal(execution.state, ExecutionState.COMPLETED);
      assert.equal(execution.attempts, 3);
      const output = execution.result?.outcome.case === "completed" ? execution.result.outcome.value.outputJson : "";
      assert.deepEqual(JSON.parse(output), { attempt: 3 }, "the third attempt's result, not the late second one");
      await eventually("the late handler to return", async () => (reports.length > 0 ? true : undefined), 5000, 20);
      await new Promise((resolve) => setTimeout(resolve, 300));
      assert.deepEqual(reports, ["late 2"], "the late result was not reported");
    } finally {
      await worker.shutdown();
    }
  });

  test("graceful shutdown lets a running handler finish and report, then stops polling", async () => {
    const capabilityId = await register("graceful");
    let signalAtEnd: boolean | undefined;
    const worker = createWorker({
      client: workerClient,
      queues: [capabilityId],
      pollWaitMs: 500,
      handlers: {
        [capabilityId]: async (context) => {
          await new Promise((resolve) => setTimeout(resolve, 800));
          signalAtEnd = context.signal.aborted;
          return { done: true };
        },
      },
    });
    const first = await submit(capabilityId, { n: 1 });
    await eventually("the handler to start", async () => (worker.running() > 0 ? true : undefined), 10_000, 10);
    await worker.shutdown();
    assert.equal(signalAtEnd, false, "the handler ran to its end without being aborted");
    const finished = await submitter.executions.getExecution({ executionId: first });
    assert.equal(finished.execution?.state, ExecutionState.COMPLETED, "it reported before shutdown resolved");
    const second = await submit(capabilityId, { n: 2 });
    await new Promise((resolve) => setTimeout(resolve, 1000));
    const waiting = await submitter.executions.getExecution({ executionId: second });
    assert.equal(waiting.execution?.state, ExecutionState.QUEUED, "no poll after shutdown");
  });

  test("shutdown past its grace aborts the handler with reason shutdown", async () => {
    const capabilityId = await register("stubborn");
    let reason: unknown;
    const worker = createWorker({
      client: workerClient,
      queues: [capabilityId],
      pollWaitMs: 500,
      shutdownGraceMs: 300,
      handlers: {
        [capabilityId]: (context) =>
          new Promise((_, reject) =>
            context.signal.addEventListener("abort", () => {
              reason = context.signal.reason;
              reject(new Error("stopped"));
            }),
          ),
      },
    });
    await submit(capabilityId, { n: 1 });
    await eventually("the handler to start", async () => (worker.running() > 0 ? true : undefined), 10_000, 10);
    const begun = Date.now();
    await worker.shutdown();
    assert.equal(reason, "shutdown");
    assert.ok(Date.now() - begun < 3000, "shutdown is bounded by its grace");
  });

  test("the attempt deadline aborts the signal on the local clock, with no cluster left", async () => {
    const capabilityId = await register("deadline", { timeoutMs: 2000 });
    let lease: { deadlineMs: number; abortedAt?: number; reason?: unknown } | undefined;
    const worker = createWorker({
      client: workerClient,
      queues: [capabilityId],
      pollWaitMs: 500,
      heartbeatIntervalMs: 100,
      handlers: {
        [capabilityId]: (context) =>
          new Promise((_, reject) => {
            lease = { deadlineMs: context.deadlineMs };
            context.signal.addEventListener("abort", () => {
              lease!.abortedAt = Date.now();
              lease!.reason = context.signal.reason;
              reject(new Error("deadline"));
            });
          }),
      },
    });
    try {
      await submit(capabilityId, { n: 1 });
      await eventually("the handler to start", async () => lease, 10_000, 10);
      // Take the whole cluster away: heartbeats now fail, only the local clock is left.
      for (const pid of cluster.nodePids) {
        process.kill(pid, "SIGKILL");
      }
      await eventually("the deadline abort", async () => lease?.abortedAt, 5000, 10);
      assert.equal(lease?.reason, "deadline");
      const lateBy = lease!.abortedAt! - lease!.deadlineMs;
      assert.ok(lateBy >= -50 && lateBy < 500, `aborted ${lateBy} ms after the deadline`);
    } finally {
      const stopped = worker.shutdown();
      await stopped;
    }
  });
});
