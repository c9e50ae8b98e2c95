"""The agent side: asks for a refund, waits for someone else to approve it,
resumes it and prints the one result.

    python refund_agent.py <order_id> <amount_cents>

Its principal needs the submitter grant.
"""

from __future__ import annotations

import os
import sys

import gavel
from gavel.v1 import approval_pb2, execution_pb2

CAPABILITY_ID = "orders.refund.py"
#: How long the agent waits for the decision, in seconds.
DECISION_WAIT_S = float(os.environ.get("DECISION_WAIT_S", "600"))


def main() -> int:
    order_id = sys.argv[1] if len(sys.argv) > 1 else "o-42"
    amount_cents = int(sys.argv[2]) if len(sys.argv) > 2 else 1250
    execution_id = f"refund-py-{order_id}"
    with gavel.Client.from_env() as client:
        submitted = client.executions.submit(
            execution_id=execution_id,
            capability_id=CAPABILITY_ID,
            input_json=gavel.canonical_json({"order_id": order_id, "amount_cents": amount_cents}),
            surface="python",
        )
        execution: execution_pb2.Execution | None = None
        if submitted.WhichOneof("outcome") == "approval_required":
            approval = submitted.approval_required
            print(f"approval required: {approval.id}", flush=True)
            print(f"an approver runs: gavel approval approve {approval.id}", flush=True)
            # Long-polls until the decision (WaitApproval), then resumes and
            # waits for the result in one call (ResumeAndWait).
            approval = client.wait_decision(approval.id, timeout=DECISION_WAIT_S)
            if approval.status == approval_pb2.APPROVAL_STATUS_APPROVED:
                execution = client.resume_and_wait(approval.id, timeout=30)
            elif approval.status != approval_pb2.APPROVAL_STATUS_CONSUMED:
                status = approval_pb2.ApprovalStatus.Name(approval.status).removeprefix("APPROVAL_STATUS_").lower()
                print(f"approval {approval.id} is {status}; nothing was refunded", file=sys.stderr)
                return 3
            print(f"approved; resumed {execution_id}", flush=True)
        if execution is None:
            execution = client.wait_final(execution_id, timeout=30)
        if execution.state != execution_pb2.EXECUTION_STATE_COMPLETED:
            state = execution_pb2.ExecutionState.Name(execution.state)
            print(f"execution {execution_id} ended {state}: {execution.result}", file=sys.stderr)
            return 1
        completed, approver = execution.result.completed, gavel.actor_text(execution.approver)
        print(f"result: {completed.output_json} (attempts {completed.attempts}, approver {approver})", flush=True)
        return 0


if __name__ == "__main__":
    sys.exit(main())
