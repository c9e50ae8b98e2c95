// The agent side: asks for a refund on behalf of a user, waits for someone
// else to approve it, resumes it and prints the one result.
//
//   node dist/agent.js <orderId> <amountCents>
//
// Its principal needs submitter and act-for (it names the user it acts for).
import { actorText, createGavelClient, optionsFromEnv } from "@gavel/client";
import { ActorKind, ExecutionState } from "@gavel/client";
import { createGavelApprovalCoordinator } from "@gavel/orpc-agent";
import { refundMeta } from "./refund.js";

/** How long the agent waits for the decision. */
const DECISION_WAIT_MS = Number(process.env.DECISION_WAIT_MS ?? 600_000);

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
  if (submitted.outcome.case === "approvalRequired") {
    const approvalId = submitted.outcome.value.id;
    console.log(`approval required: ${approvalId}`);
    console.log(`an approver runs: gavel approval approve ${approvalId}`);
    const approvals = createGavelApprovalCoordinator({ client });
    const deadline = Date.now() + DECISION_WAIT_MS;
    let status = "pending";
    while (status === "pending" && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 250));
      status = (await approvals.get(approvalId))?.status ?? "missing";
    }
    if (status !== "approved" && status !== "consumed") {
      console.error(`approval ${approvalId} is ${status}; nothing was refunded`);
      process.exitCode = 3;
    } else {
      if (status === "approved") {
        await client.executions.resume({ approvalId });
      }
      console.log(`approved; resumed ${executionId}`);
    }
  }
  if (process.exitCode === undefined) {
    const { execution } = await client.executions.waitExecution({ executionId, timeoutMs: 30_000n });
    const result = execution?.result?.outcome;
    if (execution?.state === ExecutionState.COMPLETED && result?.case === "completed") {
      console.log(`result: ${result.value.outputJson} (attempts ${result.value.attempts}, approver ${who(execution.approver)})`);
    } else {
      console.error(`execution ${executionId} ended ${ExecutionState[execution?.state ?? 0]}: ${JSON.stringify(result?.value ?? null, (_, v) => (typeof v === "bigint" ? Number(v) : v))}`);
      process.exitCode = 1;
    }
  }
} finally {
  client.close();
}
