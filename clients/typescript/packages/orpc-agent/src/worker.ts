// createGavelWorker: runs oRPC procedures (orpc-agent capabilities) as Gavel
// tasks. Each task is one attempt under a Gavel lease: the procedure is
// invoked with @orpc/server's `call`, its context carrying
// `agent.{idempotencyKey, executionId, signal}` from the lease, so the
// handler code is the same as under orpc-agent's own runtime; the worker
// runtime of @gavel/client heartbeats, aborts the signal on cancel, lease loss
// and the deadline, and reports the result.
//
// @orpc/server is ESM-only and an optional peer: it is loaded with import()
// on the first task, never at this module's load, so the CommonJS build of
// this package loads on Node 20 (which cannot require() an ES module) and an
// app that uses only the coordinator, the audit sink or capability sync
// needs no @orpc/server at all.
import type { AnyProcedure } from "@orpc/server";
import { type GavelClient, HandlerError, type TaskContext, type Worker, createWorker } from "@gavel/client";
import { fromPbActor } from "./coordinator.js";
import type { Actor } from "./types.js";

/** What a procedure finds at `context.agent`. */
export interface GavelAgentContext {
  /** Stable across retries of one execution, unique across executions. */
  idempotencyKey: string;
  executionId: string;
  /** Aborted on cancel, lease loss, the attempt deadline or shutdown. */
  signal: AbortSignal;
  attempt: number;
  /** The lease's fencing token, for downstream services that check it. */
  leaseId: number;
  capabilityId: string;
  surface: string;
  /** The requesting actor (the one the execution was submitted for). */
  actor: Actor;
  /** The approver, when an approval was consumed. */
  approver?: Actor;
  approvalId?: string;
  correlationId?: string;
}

/** Options of createGavelWorker. */
export interface GavelWorkerOptions<TContext extends object> {
  /** A client whose principal holds the worker grant for `queues`. */
  client: GavelClient;
  /** Queues to poll; default the capability ids of `procedures`. */
  queues?: readonly string[];
  /** The procedure to run for each capability id. */
  procedures: Record<string, AnyProcedure>;
  /** The rest of the procedure's initial context, built per task. */
  createContext?: (task: TaskContext) => TContext | Promise<TContext>;
  concurrency?: number;
  workerId?: string;
  pollWaitMs?: number;
  heartbeatIntervalMs?: number;
  shutdownGraceMs?: number;
  onError?: Parameters<typeof createWorker>[0]["onError"];
}

/** @orpc/server, loaded once, on the first task. */
let orpcServer: Promise<typeof import("@orpc/server")> | undefined;
const loadOrpcServer = () => (orpcServer ??= import("@orpc/server"));

/**
 * Whether `error` is an ORPCError: by its shape (a string code, an HTTP
 * status, the `defined` flag), so no @orpc/server needs loading to tell, and
 * an ORPCError of another copy of @orpc/server counts too.
 */
function isOrpcError(error: unknown): error is Error & { code: string; status: number; defined: boolean } {
  if (!(error instanceof Error)) {
    return false;
  }
  const fields = error as Error & { code?: unknown; status?: unknown; defined?: unknown };
  return typeof fields.code === "string" && typeof fields.status === "number" && typeof fields.defined === "boolean";
}

/**
 * The HandlerError of a procedure's throw: an error saying `retryable`
 * (orpc-agent's CapabilityError) keeps it; an ORPCError is retryable when its
 * status is 5xx or 408/429 and fatal otherwise (bad input stays bad); any other
 * throw is retryable, and the capability's rule decides.
 */
export function toHandlerError(error: unknown): HandlerError {
  if (error instanceof HandlerError) {
    return error;
  }
  const message = error instanceof Error ? error.message : String(error);
  const declared = (error as { retryable?: unknown; code?: unknown } | null) ?? {};
  if (isOrpcError(error)) {
    const retryable =
      typeof declared.retryable === "boolean"
        ? declared.retryable
        : error.status >= 500 || error.status === 408 || error.status === 429;
    return new HandlerError(String(error.code), message, retryable);
  }
  if (typeof declared.retryable === "boolean" && typeof declared.code === "string") {
    return new HandlerError(declared.code, message, declared.retryable);
  }
  return HandlerError.retryable("EXECUTION_FAILED", message);
}

/** Starts a worker running `procedures`; stop it with `shutdown()`. */
export function createGavelWorker<TContext extends object = Record<never, never>>(
  options: GavelWorkerOptions<TContext>,
): Worker {
  const handlers: Record<string, (task: TaskContext) => Promise<unknown>> = {};
  for (const [capabilityId, procedure] of Object.entries(options.procedures)) {
    handlers[capabilityId] = async (task) => {
      const base = options.createContext !== undefined ? await options.createContext(task) : ({} as TContext);
      const agent: GavelAgentContext = {
        idempotencyKey: task.idempotencyKey,
        executionId: task.executionId,
        signal: task.signal,
        attempt: task.attempt,
        leaseId: task.leaseId,
        capabilityId,
        surface: task.task.surface,
        actor: fromPbActor(task.actor),
      };
      if (task.approver !== undefined) agent.approver = fromPbActor(task.approver);
      if (task.approvalId !== undefined) agent.approvalId = task.approvalId;
      if (task.correlationId !== undefined) agent.correlationId = task.correlationId;
      const { call } = await loadOrpcServer();
      try {
        return await call(procedure, task.input as never, {
          context: { ...base, agent } as never,
          signal: task.signal,
          path: [capabilityId],
        });
      } catch (error) {
        throw toHandlerError(error);
      }
    };
  }
  const workerOptions: Parameters<typeof createWorker>[0] = {
    client: options.client,
    queues: options.queues ?? Object.keys(options.procedures),
    handlers,
  };
  if (options.concurrency !== undefined) workerOptions.concurrency = options.concurrency;
  if (options.workerId !== undefined) workerOptions.workerId = options.workerId;
  if (options.pollWaitMs !== undefined) workerOptions.pollWaitMs = options.pollWaitMs;
  if (options.heartbeatIntervalMs !== undefined) workerOptions.heartbeatIntervalMs = options.heartbeatIntervalMs;
  if (options.shutdownGraceMs !== undefined) workerOptions.shutdownGraceMs = options.shutdownGraceMs;
  if (options.onError !== undefined) workerOptions.onError = options.onError;
  return createWorker(workerOptions);
}
