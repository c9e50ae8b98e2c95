// The agent side: asks for a refund on behalf of a user, waits for someone
// else to approve it, resumes it and prints the one result.
//
//   node dist/agent.js <orderId> <amountCents>
//
// Its principal needs submitter and act-for (it names the user it acts for).
import { actorText, createGavelClient, optionsFromEnv } from "@gavel/client";
import { ActorKind, ApprovalStatus, ExecutionState, type Execution, type Plain } from "@gavel/client";
import { refundMeta } from "./refund.js";

/** How long the agent waits for the decision. */
const DECISION_WAIT_MS = Number(process.env.DECISION_WAIT_MS ?? 600_000);

/** The longest single wait the cluster grants (WAIT_MS_MAX). */
const WAIT_CALL_MS_MAX = 60_000;

/** An actor as `kind:id`, the way principals are written. */
const who = (actor: { id: string; kind: ActorKind } | undefined) => (actor === undefined ? "none" : actorText(actor));

const [orderId = "o-42", amount = "1250"] = process.argv.slice(2);
const client = createGavelClient(optionsFromEnv());
try {
  const executionId = `refund-${orderId}`;
  const submitted = await client.executions.submit({
    executionId,
    capabilityId: refundMeta.id,
    inputJson: JSON.stringify({ orderId, amountCents: Number(amount) }),
    actor: { id: "agent-alice", kind: ActorKind.USER, displayName: "Alice's agent" },
    surface: "aiSdk",
  });
  let resumed: Plain<Execution> | undefined;
  if (submitted.outcome.case === "approvalRequired") {
    const approvalId = submitted.outcome.value.id;
    console.log(`approval required: ${approvalId}`);
    console.log(`an approver runs: gavel approval approve ${approvalId}`);
    // One long-poll per minute at most, until the decision (no polling loop).
    const deadline = Date.now() + DECISION_WAIT_MS;
    let status = submitted.outcome.value.status;
    while (status === ApprovalStatus.PENDING && Date.now() < deadline) {
      const waitMs = Math.min(WAIT_CALL_MS_MAX, Math.max(0, deadline - Date.now()));
      status = (await client.approvals.waitApproval({ id: approvalId, waitMs })).approval?.status ?? status;
    }
    if (status !== ApprovalStatus.APPROVED && status !== ApprovalStatus.CONSUMED) {
      console.error(`approval ${approvalId} is ${ApprovalStatus[status].toLowerCase()}; nothing was refunded`);
      process.exitCode = 3;
    } else {
      if (status === ApprovalStatus.APPROVED) {
        // Resume and wait for the result in one call.
        resumed = (await client.executions.resumeAndWait({ resume: { approvalId }, waitMs: 30_000 })).execution;
      }
      console.log(`approved; resumed ${executionId}`);
    }
  }
  if (process.exitCode === undefined) {
    const execution =
      resumed !== undefined && resumed.result !== undefined
        ? resumed
        : (await client.executions.waitExecution({ executionId, timeoutMs: 30_000 })).execution;
    const result = execution?.result?.outcome;
    if (execution?.state === ExecutionState.COMPLETED && result?.case === "completed") {
      console.log(`result: ${result.value.outputJson} (attempts ${result.value.attempts}, approver ${who(execution.approver)})`);
    } else {
      console.error(`execution ${executionId} ended ${ExecutionState[execution?.state ?? 0]}: ${JSON.stringify(result?.value ?? null)}`);
      process.exitCode = 1;
    }
  }
} finally {
  client.close();
}
