// Asks for a refund for user:agent-alice, waits (through the coordinator)
// until someone else approves it, resumes it and prints the one result;
// from a CommonJS app.  node agent.cjs <orderId> <amountCents>
"use strict";
const { ActorKind, ExecutionState } = require("@gavel/client");
const { createGavelApprovalCoordinator } = require("@gavel/orpc-agent");
const { refundMeta, runWithClient } = require("./refund.cjs");

runWithClient("agent", async (client) => {
  const [orderId, amountCents] = process.argv.slice(2);
  const executionId = `refund-${orderId}`;
  const submitted = await client.executions.submit({
    executionId,
    capabilityId: refundMeta.id,
    inputJson: JSON.stringify({ orderId, amountCents: Number(amountCents) }),
    actor: { id: "agent-alice", kind: ActorKind.USER },
    surface: "aiSdk",
  });
  if (submitted.outcome.case === "approvalRequired") {
    const approvalId = submitted.outcome.value.id;
    console.log(`approval required: ${approvalId}`);
    // No clock injected: the app's principal needs no clock grant.
    const approvals = createGavelApprovalCoordinator({ client });
    const giveUpAt = Date.now() + 60_000;
    let record = await approvals.get(approvalId);
    while (record?.status === "pending" && Date.now() < giveUpAt) {
      await new Promise((resolve) => setTimeout(resolve, 200));
      record = await approvals.get(approvalId);
    }
    if (record?.status !== "approved") {
      throw new Error(`approval ${approvalId} is ${record?.status ?? "missing"}`);
    }
    await client.executions.resume({ approvalId });
  }
  const { execution } = await client.executions.waitExecution({ executionId, timeoutMs: 30_000 });
  const { outcome } = execution?.result ?? {};
  if (outcome?.case !== "completed") {
    throw new Error(`execution ${executionId} ended ${ExecutionState[execution?.state ?? 0]}`);
  }
  const approver = `${ActorKind[execution.approver.kind].toLowerCase()}:${execution.approver.id}`;
  console.log(`result: ${outcome.value.outputJson} (attempts ${outcome.value.attempts}, approver ${approver})`);
});
