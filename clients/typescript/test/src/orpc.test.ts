// @gavel/orpc-agent end to end on a real secured three-node cluster:
// syncCapabilities, an agent-side submit that needs approval, a decision
// through the coordinator on behalf of another user, the worker adapter
// running an oRPC procedure with context.agent set from the lease, cancel
// reaching the procedure's signal, and the audit sink.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, describe, test } from "node:test";
import { os } from "@orpc/server";
import { ActorKind, ApprovalStatus, ExecutionState, type GavelClient, actorText } from "@gavel/client";
import {
  type AgentMeta,
  type GavelAgentContext,
  createGavelApprovalCoordinator,
  createGavelAuditSink,
  createGavelWorker,
  syncCapabilities,
  toCapabilitySpec,
} from "@gavel/orpc-agent";
import { TestCluster, eventually } from "./cluster.js";

const run = randomUUID().slice(0, 8);
let cluster: TestCluster;
let app: GavelClient;
let workerClient: GavelClient;

const refundMeta: AgentMeta = {
  id: `orders.refund.${run}`,
  sideEffect: "write",
  risk: "high",
  idempotent: true,
  retry: { maxAttempts: 1, backoffMs: 50, retryOn: () => true },
  timeoutMs: 20_000,
  approval: { required: true, type: "finance", expiresInMs: 600_000 },
};
const slowMeta: AgentMeta = { id: `reports.slow.${run}`, sideEffect: "read", timeoutMs: 60_000 };

const base = os.$context<{ agent: GavelAgentContext; ledger: Map<string, unknown> }>();
const calls: { idempotencyKey: string; executionId: string; signalIsLeases: boolean; actor: string }[] = [];
const refundOrder = base.handler(async ({ input, context, signal }) => {
  const { orderId, amountCents } = input as { orderId: string; amountCents: number };
  calls.push({
    idempotencyKey: context.agent.idempotencyKey,
    executionId: context.agent.executionId,
    signalIsLeases: signal === context.agent.signal || signal?.aborted === context.agent.signal.aborted,
    actor: actorText(context.agent.actor),
  });
  const existing = context.ledger.get(context.agent.idempotencyKey);
  if (existing) return existing;
  // The outcome names its approver as people read principals: kind:id.
  const result = { orderId, refunded: amountCents, approver: context.agent.approver ? actorText(context.agent.approver) : null };
  context.ledger.set(context.agent.idempotencyKey, result);
  return result;
});
let slowAbortReason: unknown;
const slowReport = base.handler(
  ({ signal }) =>
    new Promise((_, reject) => {
      signal?.addEventListener("abort", () => {
        slowAbortReason = signal.reason;
        reject(new Error("aborted"));
      });
    }),
);

before(async () => {
  cluster = await TestCluster.start();
  await cluster.grant("service:refund-app", ["admin", "submitter", "approver", "act-for", "delegate-decide", "clock"]);
  app = await cluster.tokenClient("service:refund-app");
  await cluster.grant("worker:refunds", ["worker"]);
  workerClient = await cluster.certClient("worker:refunds");
});

after(async () => {
  await cluster?.stop();
});

describe("@gavel/orpc-agent", () => {
  test("syncCapabilities registers AgentMeta and reports what it cannot map", async () => {
    const report = await syncCapabilities(app, [refundMeta, slowMeta]);
    assert.deepEqual(report.registered.map((entry) => entry.id), [refundMeta.id, slowMeta.id]);
    assert.deepEqual(
      report.unmapped.map((entry) => `${entry.capabilityId}:${entry.field}`),
      [`${refundMeta.id}:retry.retryOn`, `${slowMeta.id}:risk`],
    );
    const { capability } = await app.capabilities.getCapability({ id: refundMeta.id });
    assert.equal(capability?.spec?.idempotent, true);
    assert.equal(capability?.spec?.retry?.maxAttempts, 1);
    assert.equal(capability?.spec?.approval?.required, true);
    assert.equal(capability?.spec?.approval?.type, "finance");
    assert.equal(capability?.spec?.timeoutMs, 20_000);
    const unknown = toCapabilitySpec({ ...slowMeta, risk: "low", owner: "team-a" });
    assert.deepEqual(unknown.unmapped.map((entry) => entry.field), ["owner"]);
  });

  test("submit, approve through the coordinator, resume: the worker adapter runs the procedure once", async () => {
    const ledger = new Map<string, unknown>();
    const worker = createGavelWorker({
      client: workerClient,
      procedures: { [refundMeta.id]: refundOrder, [slowMeta.id]: slowReport },
      createContext: () => ({ ledger }),
      pollWaitMs: 1000,
      heartbeatIntervalMs: 100,
    });
    try {
      const agent = { id: "agent-alice", kind: ActorKind.USER, attributes: { tenant: "acme" } };
      const submitted = await app.executions.submit({
        executionId: `refund-${run}`,
        capabilityId: refundMeta.id,
        inputJson: JSON.stringify({ orderId: "o-42", amountCents: 1250 }),
        actor: agent,
        surface: "aiSdk",
      });
      assert.equal(submitted.outcome.case, "approvalRequired");
      const approvalId = submitted.outcome.case === "approvalRequired" ? submitted.outcome.value.id : "";
      const coordinator = createGavelApprovalCoordinator({ client: app });
      const pending = await coordinator.get(approvalId);
      assert.equal(pending?.status, "pending");
      assert.deepEqual(pending?.actor, { id: "agent-alice", kind: "user", attributes: { tenant: "acme" } });
      await coordinator.decide(approvalId, {
        status: "approved",
        approver: { id: "bob-finance", kind: "user" },
        comment: "customer verified",
      });
      const resumed = await app.executions.resume({ approvalId });
      const done = await app.executions.waitExecution({ executionId: resumed.execution!.executionId, timeoutMs: 20_000 });
      assert.equal(done.execution?.state, ExecutionState.COMPLETED);
      const output = done.execution?.result?.outcome.case === "completed" ? done.execution.result.outcome.value.outputJson : "";
      assert.deepEqual(JSON.parse(output), { orderId: "o-42", refunded: 1250, approver: "user:bob-finance" });
      const ours = calls.filter((call) => call.executionId === resumed.execution!.executionId);
      assert.equal(ours.length, 1);
      assert.equal(ours[0]!.idempotencyKey, done.execution!.idempotencyKey);
      assert.equal(ours[0]!.actor, "user:agent-alice");
      assert.ok(ours[0]!.signalIsLeases);
      const again = await app.executions.resume({ approvalId }).then(
        () => undefined,
        (error: unknown) => error as { code?: string },
      );
      assert.equal(again?.code, "APPROVAL_CONSUMED");

      // Cancel reaches the procedure's signal.
      const slow = await app.executions.submit({ capabilityId: slowMeta.id, inputJson: "{}", surface: "direct" });
      const slowId = slow.outcome.case === "execution" ? slow.outcome.value.executionId : "";
      await eventually("the slow procedure to start", async () => (worker.running() > 0 ? true : undefined), 10_000, 10);
      await app.executions.cancelExecution({ executionId: slowId });
      await eventually("the procedure's signal to abort", async () => slowAbortReason, 5000, 10);
      assert.equal(slowAbortReason, "cancelled");
    } finally {
      await worker.shutdown();
    }
  });

  test("waitApproval returns once the approval is decided, and as it is at the deadline", async () => {
    const agent = { id: "agent-alice", kind: ActorKind.USER };
    const submitted = await app.executions.submit({
      executionId: `refund-wait-${run}`,
      capabilityId: refundMeta.id,
      inputJson: JSON.stringify({ orderId: "o-43", amountCents: 100 }),
      actor: agent,
      surface: "aiSdk",
    });
    const approvalId = submitted.outcome.case === "approvalRequired" ? submitted.outcome.value.id : "";
    const pending = await app.approvals.waitApproval({ id: approvalId, waitMs: 100 });
    assert.equal(pending.timedOut, true);
    assert.equal(pending.approval?.status, ApprovalStatus.PENDING);
    const waiting = app.approvals.waitApproval({ id: approvalId, waitMs: 20_000 });
    const started = Date.now();
    await app.decide(approvalId, { approve: true, approver: { id: "bob-finance", kind: ActorKind.USER } });
    const decided = await waiting;
    assert.equal(decided.timedOut, false);
    assert.equal(decided.approval?.status, ApprovalStatus.APPROVED);
    assert.ok(Date.now() - started < 10_000, "the wait woke on the decision");
  });

  test("resumeAndWait resumes and returns the final execution in one call", async () => {
    const worker = createGavelWorker({
      client: workerClient,
      procedures: { [refundMeta.id]: refundOrder },
      createContext: () => ({ ledger: new Map<string, unknown>() }),
      pollWaitMs: 1000,
      heartbeatIntervalMs: 100,
    });
    // A pending refund of `amountCents` for `orderId`; its approval's id.
    const pendingRefund = async (executionId: string, orderId: string, amountCents: number) => {
      const submitted = await app.executions.submit({
        executionId,
        capabilityId: refundMeta.id,
        inputJson: JSON.stringify({ orderId, amountCents }),
        actor: { id: "agent-alice", kind: ActorKind.USER },
        surface: "aiSdk",
      });
      return submitted.outcome.case === "approvalRequired" ? submitted.outcome.value.id : "";
    };
    const refunded = (done: Awaited<ReturnType<typeof app.executions.resumeAndWait>>) => {
      assert.equal(done.timedOut, false);
      assert.equal(done.waitRefused, false);
      assert.equal(done.execution?.state, ExecutionState.COMPLETED);
      const output = done.execution?.result?.outcome.case === "completed" ? done.execution.result.outcome.value.outputJson : "";
      return JSON.parse(output);
    };
    try {
      const approvalId = await pendingRefund(`refund-resume-wait-${run}`, "o-44", 200);
      await app.decide(approvalId, { approve: true, approver: { id: "bob-finance", kind: ActorKind.USER } });
      const done = await app.executions.resumeAndWait({ resume: { approvalId }, waitMs: 20_000 });
      assert.deepEqual(refunded(done), { orderId: "o-44", refunded: 200, approver: "user:bob-finance" });

      // Sent before the decision with awaitDecision, the call waits for it
      // (decision 0108): the approver's "yes" runs the resume, and the one
      // call returns the tool's result.
      const second = await pendingRefund(`refund-await-decision-${run}`, "o-45", 300);
      const waiting = app.executions.resumeAndWait({ resume: { approvalId: second }, waitMs: 20_000, awaitDecision: true });
      await app.decide(second, { approve: true, approver: { id: "bob-finance", kind: ActorKind.USER } });
      assert.deepEqual(refunded(await waiting), { orderId: "o-45", refunded: 300, approver: "user:bob-finance" });
    } finally {
      await worker.shutdown();
    }
  });

  test("the audit sink appends orpc-agent events to Gavel's trail as the app", async () => {
    const sink = createGavelAuditSink({ client: app });
    const executionId = `exe_audit_${run}`;
    await sink({
      type: "capability.denied",
      timestamp: new Date(),
      surface: "mcp",
      actor: { id: "mallory", kind: "user" },
      executionId,
      capabilityId: refundMeta.id,
      reason: "policy: refunds over 1000 need a manager",
      policyDecisions: [{ policy: "refund-limit", effect: "deny" }],
    });
    const events = await app.executions.listExecutionEvents({ executionId });
    const recorded = events.events.filter((event) => event.type === "orpc.capability.denied");
    assert.equal(recorded.length, 1);
    const event = recorded[0]!;
    assert.equal(event.recordedByApplication, true);
    assert.equal(event.actor?.id, "mallory");
    assert.equal(event.principal, "service:refund-app");
    assert.equal(event.attributes.surface, "mcp");
    const payload = JSON.parse(event.payloadJson ?? "{}") as Record<string, unknown>;
    assert.equal(payload.reason, "policy: refunds over 1000 need a manager");
    assert.deepEqual(payload.policyDecisions, [{ effect: "deny", policy: "refund-limit" }]);

    const swallowed: unknown[] = [];
    const lenient = createGavelAuditSink({ client: app, onError: (error) => swallowed.push(error) });
    await lenient({ type: "capability.completed", timestamp: new Date(), surface: "direct", actor: { id: "", kind: "user" }, big: "x".repeat(20_000) });
    assert.equal(swallowed.length, 1, "an event over the payload limit is reported, not thrown");
  });
});
