// createWorker: pulls tasks, runs handlers, heartbeats on its own and reports
// each attempt, the same behaviour as the Rust SDK's Worker
// (crates/gavel-client/src/worker.rs).
//
// Each handler gets an AbortSignal that aborts when the caller cancels the
// execution (a heartbeat answers cancel_requested), when the lease is lost
// (a heartbeat answers LEASE_LOST), at the attempt's deadline on the local
// clock, and when a shutdown's grace period runs out. A handler stopped for
// any of these reasons is not reported: the cluster has already moved on (it
// finalized the cancel, re-leased the attempt or timed it out), so a report
// would be refused anyway.
import { randomUUID } from "node:crypto";
import { type GavelClient, newRequestId } from "./client.js";
import { GavelError } from "./errors.js";
import { stringifyIJson } from "./ijson.js";
import type { Actor } from "./gen/gavel/v1/common_pb.js";
import type { Capability } from "./gen/gavel/v1/capability_pb.js";
import type { Task as TaskMessage } from "./gen/gavel/v1/worker_pb.js";
import type { Plain } from "./plain.js";

/** A leased task as the client returns it. */
type Task = Plain<TaskMessage>;

/** Why a handler's signal was aborted. */
export type AbortReason = "cancelled" | "lease-lost" | "deadline" | "shutdown";

/** What a handler is given for one attempt. */
export interface TaskContext {
  /** The input, parsed from JSON. */
  input: unknown;
  /** The input as the JSON text the cluster stored. */
  inputJson: string;
  /** Stable key for deduplicating the effect; the same for every attempt. */
  idempotencyKey: string;
  /** The execution id; the same for every attempt. */
  executionId: string;
  /** Attempt number, 1 for the first. */
  attempt: number;
  /** The lease's fencing token: pass it to downstream services. */
  leaseId: number;
  /** The attempt's deadline (Unix epoch ms). */
  deadlineMs: number;
  /** Aborted on cancel, lease loss, the deadline or shutdown; `signal.reason` is an AbortReason. */
  signal: AbortSignal;
  /** Who submitted the execution. */
  actor: Actor | undefined;
  /** Who approved it, when an approval was consumed. */
  approver: Actor | undefined;
  /** The capability version the execution runs under. */
  capability: Plain<Capability> | undefined;
  /** Application correlation id. */
  correlationId: string | undefined;
  /** Approval consumed to create the execution, if any. */
  approvalId: string | undefined;
  /** The raw task. */
  task: Task;
}

/** A failed attempt, as a handler throws it. */
export class HandlerError extends Error {
  constructor(
    /** Stable failure code, matched against the capability's non_retryable_codes. */
    readonly code: string,
    message: string,
    /** Whether the failure is transient; the cluster still applies the capability's retry rule. */
    readonly retryable: boolean,
  ) {
    super(message);
    this.name = "HandlerError";
  }

  /** A transient failure: the cluster retries it when the capability allows. */
  static retryable(code: string, message: string): HandlerError {
    return new HandlerError(code, message, true);
  }

  /** A failure no retry can fix. */
  static fatal(code: string, message: string): HandlerError {
    return new HandlerError(code, message, false);
  }
}

/** A handler: resolves with the output (any JSON value) or throws. A throw that is not a HandlerError is reported retryable, code HANDLER_ERROR. */
export type Handler = (context: TaskContext) => Promise<unknown> | unknown;

/** Options of createWorker. */
export interface WorkerOptions {
  /** The client (its credentials must hold the worker grant for the queues). */
  client: GavelClient;
  /** Queues to poll. */
  queues: readonly string[];
  /** One handler per capability id, or `"*"` for any capability. */
  handlers: Record<string, Handler>;
  /** Attempts run at the same time. Default 1. */
  concurrency?: number;
  /** Worker id; default `worker-<uuid>`. */
  workerId?: string;
  /** How long one poll waits for work, ms. Default 10000. */
  pollWaitMs?: number;
  /** Interval between heartbeats of one attempt, ms. Default 500. */
  heartbeatIntervalMs?: number;
  /** How long a shutdown waits for running handlers before aborting them, ms. Default 10000. */
  shutdownGraceMs?: number;
  /**
   * Called with each problem the worker copes with itself (a failed poll, a
   * refused report). Default: one `console.warn` line per problem.
   */
  onError?: (error: unknown, context: { executionId?: string; stage: "poll" | "report" | "handler" }) => void;
}

/** A running worker. */
export interface Worker {
  /** Resolves when the worker has stopped (after `shutdown`). */
  readonly done: Promise<void>;
  /** Stops polling, waits up to the grace period for running handlers, then aborts them. */
  shutdown(): Promise<void>;
  /** Attempts currently running. */
  running(): number;
}

const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve) => {
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    }
    signal?.addEventListener("abort", done, { once: true });
  });

/**
 * The most tasks one poll may ask for (the cluster's `POLL_TASKS_MAX`); a
 * worker with a higher concurrency fills its slots over several polls.
 */
export const POLL_TASKS_MAX = 64;

/** The default `onError`: a problem the worker copes with is still said. */
function warnOfError(error: unknown, context: { executionId?: string; stage: "poll" | "report" | "handler" }): void {
  const where = context.executionId === undefined ? context.stage : `${context.stage} of ${context.executionId}`;
  console.warn(`gavel worker: ${where} failed: ${error instanceof Error ? error.message : String(error)}`);
}

/** Starts a worker; it runs until `shutdown()`. */
export function createWorker(options: WorkerOptions): Worker {
  if (options.queues.length === 0) {
    throw new GavelError("CONFIG", "at least one queue is required", 3);
  }
  if (Object.keys(options.handlers).length === 0) {
    throw new GavelError("CONFIG", "at least one handler is required", 3);
  }
  const concurrency = Math.max(1, options.concurrency ?? 1);
  const workerId = options.workerId ?? `worker-${randomUUID()}`;
  const pollWaitMs = options.pollWaitMs ?? 10_000;
  const heartbeatIntervalMs = options.heartbeatIntervalMs ?? 500;
  const shutdownGraceMs = options.shutdownGraceMs ?? 10_000;
  const client = options.client;
  // Heartbeats give up quickly: the next one is due soon anyway.
  const heartbeats = client.withOptions({ retryBudgetMs: heartbeatIntervalMs, callTimeoutMs: 2000 });
  const onError = options.onError ?? warnOfError;

  const stopPolling = new AbortController();
  const running = new Map<string, { controller: AbortController; finished: Promise<void> }>();
  let freed: (() => void) | undefined;

  /** Runs one task and reports it; resolves with the next task the report took for the freed slot, if any. */
  const runTask = async (task: Task, controller: AbortController): Promise<Task | undefined> => {
    const lease = task.lease;
    if (lease === undefined) {
      return;
    }
    const signal = controller.signal;
    const abort = (reason: AbortReason) => {
      if (!signal.aborted) {
        controller.abort(reason);
      }
    };
    const deadlineMs = Number(lease.deadlineMs);
    const deadlineTimer = setTimeout(() => abort("deadline"), Math.max(0, deadlineMs - Date.now()));
    const heartbeat = (async () => {
      for (let beat = 0; !signal.aborted; beat += 1) {
        await sleep(heartbeatIntervalMs, signal);
        if (signal.aborted) {
          return;
        }
        try {
          const reply = await heartbeats.workers.heartbeat({
            requestId: newRequestId(),
            leaseId: lease.leaseId,
            workerId,
          });
          if (reply.cancelRequested) {
            abort("cancelled");
            return;
          }
        } catch (error) {
          if (error instanceof GavelError && error.code === "LEASE_LOST") {
            abort("lease-lost");
            return;
          }
        }
      }
    })();
    const capabilityId = task.capability?.spec?.id ?? "";
    const handler = options.handlers[capabilityId] ?? options.handlers["*"];
    let outcome: { ok: true; output: unknown } | { ok: false; error: HandlerError };
    try {
      if (handler === undefined) {
        throw HandlerError.fatal("NO_HANDLER", `this worker has no handler for capability ${capabilityId}`);
      }
      let input: unknown;
      try {
        input = JSON.parse(task.inputJson);
      } catch (error) {
        throw HandlerError.fatal("INPUT_INVALID", `input does not decode: ${String(error)}`);
      }
      const aborted = new Promise<never>((_, reject) => {
        const onAbort = () => reject(signal.reason);
        if (signal.aborted) {
          onAbort();
        } else {
          signal.addEventListener("abort", onAbort, { once: true });
        }
      });
      aborted.catch(() => {});
      const output = await Promise.race([
        Promise.resolve().then(() =>
          handler({
            input,
            inputJson: task.inputJson,
            idempotencyKey: task.idempotencyKey,
            executionId: task.executionId,
            attempt: task.attempt,
            leaseId: lease.leaseId,
            deadlineMs,
            signal,
            actor: task.actor,
            approver: task.approver,
            capability: task.capability,
            correlationId: task.correlationId,
            approvalId: task.approvalId,
            task,
          }),
        ),
        aborted,
      ]);
      outcome = { ok: true, output: output === undefined ? null : output };
    } catch (error) {
      outcome = {
        ok: false,
        error:
          error instanceof HandlerError
            ? error
            : HandlerError.retryable("HANDLER_ERROR", error instanceof Error ? error.message : String(error)),
      };
      if (!(error instanceof HandlerError) && !signal.aborted) {
        onError(error, { executionId: task.executionId, stage: "handler" });
      }
    }
    const stoppedBy = signal.aborted ? (signal.reason as AbortReason) : undefined;
    clearTimeout(deadlineTimer);
    abort("shutdown"); // ends the heartbeat loop; the handler has returned
    await heartbeat;
    if (stoppedBy !== undefined) {
      return;
    }
    let outputJson: string | undefined;
    if (outcome.ok) {
      try {
        // Refuses what the cluster would refuse as not I-JSON (an integer
        // beyond 2^53 - 1, a bigint, ...), naming the JSON Pointer: a report
        // of it would be refused, and the attempt would only end at its deadline.
        outputJson = stringifyIJson(outcome.output, { name: "output", code: "INVALID_ARGUMENT" });
      } catch (error) {
        const reason = error instanceof GavelError ? error.message : `output is not JSON: ${String(error)}`;
        outcome = { ok: false, error: HandlerError.fatal("OUTPUT_INVALID", reason) };
      }
    }
    const report = {
      requestId: newRequestId(),
      leaseId: lease.leaseId,
      workerId,
      outcome: outcome.ok
        ? { case: "completed" as const, value: { outputJson: outputJson ?? "null" } }
        : {
            case: "failed" as const,
            value: { code: outcome.error.code, message: outcome.error.message, retryable: outcome.error.retryable },
          },
    };
    try {
      if (stopPolling.signal.aborted) {
        await client.workers.report(report);
        return undefined;
      }
      // Report and take the next ready task for this slot in one call,
      // without waiting (waitMs 0): an idle slot goes back to the long-poll.
      const answer = await client.workers.reportAndPoll({ report, queues: [...options.queues], maxTasks: 1, waitMs: 0 });
      if (answer.pollFailure !== undefined) {
        const detail = answer.pollFailure.detail;
        onError(new GavelError(detail?.code ?? "UNKNOWN", detail?.message ?? "", answer.pollFailure.statusCode), {
          stage: "poll",
        });
      }
      return answer.tasks[0];
    } catch (error) {
      onError(error, { executionId: task.executionId, stage: "report" });
      return undefined;
    }
  };

  /** Runs a task in a slot of its own, then each next task its report brings back, in the same slot. */
  const start = (first: Task) => {
    const key = randomUUID();
    const entry = { controller: new AbortController(), finished: Promise.resolve() };
    entry.finished = (async () => {
      for (let task: Task | undefined = first; task !== undefined; ) {
        const current: Task = task;
        entry.controller = new AbortController();
        task = await runTask(current, entry.controller).catch((error: unknown) => {
          onError(error, { executionId: current.executionId, stage: "handler" });
          return undefined;
        });
      }
    })().finally(() => {
      running.delete(key);
      freed?.();
    });
    running.set(key, entry);
  };

  const done = (async () => {
    while (!stopPolling.signal.aborted) {
      while (running.size >= concurrency && !stopPolling.signal.aborted) {
        await new Promise<void>((resolve) => {
          const onStop = () => resolve();
          freed = () => {
            stopPolling.signal.removeEventListener("abort", onStop);
            resolve();
          };
          stopPolling.signal.addEventListener("abort", onStop, { once: true });
        });
        freed = undefined;
      }
      if (stopPolling.signal.aborted) {
        break;
      }
      let tasks: Task[];
      try {
        const response = await client.workers.poll(
          {
            requestId: newRequestId(),
            workerId,
            queues: [...options.queues],
            maxTasks: Math.min(POLL_TASKS_MAX, concurrency - running.size),
            waitMs: pollWaitMs,
          },
          { signal: stopPolling.signal },
        );
        tasks = response.tasks;
      } catch (error) {
        if (stopPolling.signal.aborted) {
          break;
        }
        onError(error, { stage: "poll" });
        await sleep(500, stopPolling.signal);
        continue;
      }
      for (const task of tasks) {
        start(task);
      }
    }
    const drained = Promise.all([...running.values()].map((entry) => entry.finished));
    let timer: NodeJS.Timeout | undefined;
    const graceOver = new Promise<"timeout">((resolve) => {
      timer = setTimeout(() => resolve("timeout"), shutdownGraceMs);
    });
    if ((await Promise.race([drained, graceOver])) === "timeout") {
      for (const entry of running.values()) {
        entry.controller.abort("shutdown" satisfies AbortReason);
      }
      await Promise.all([...running.values()].map((entry) => entry.finished));
    }
    clearTimeout(timer);
  })();

  return {
    done,
    running: () => running.size,
    shutdown: async () => {
      stopPolling.abort();
      await done;
    },
  };
}
