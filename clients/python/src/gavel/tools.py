"""What the agent-framework integrations share: a tool call governed by Gavel.

A tool call becomes a Gavel execution whose id is derived from the caller's
scope (a LangGraph thread id, an agent run's key) and the model's tool call
id. A framework that replays the call (LangGraph re-runs a node from its
start on resume) therefore submits the same execution id again, and Gavel's
submit is idempotent on it: the replay finds the same pending approval, or
the execution a resume already created, instead of making new ones. The
approval is spent by ExecutionService.Resume, which consumes it once,
cluster-wide, in one replicated command.
"""

from __future__ import annotations

import hashlib
from typing import Any

from gavel.actors import actor_text
from gavel.canonical import parse_json
from gavel.limits import ID_BYTES_MAX
from gavel.v1 import approval_pb2, common_pb2, execution_pb2


def tool_execution_id(scope: str, tool_call_id: str) -> str:
    """The execution id of one tool call: the same for every replay of the call."""
    digest = hashlib.sha256(f"{scope}\0{tool_call_id}".encode()).hexdigest()
    return f"tc_{digest[:40]}"


def approval_id_for(execution_id: str) -> str:
    """The id of the approval Gavel's submit creates for an execution that needs one.

    The server's rule (crates/gavel-core/src/ids.rs, approval_id_for):
    ``apr_`` + the execution id, or + its SHA-256 when that would pass the
    128-byte id limit.
    """
    approval_id = f"apr_{execution_id}"
    if len(approval_id.encode()) <= ID_BYTES_MAX:
        return approval_id
    return f"apr_{hashlib.sha256(execution_id.encode()).hexdigest()}"


def resume_request_id(execution_id: str) -> str:
    """The request id of the resume that spends a tool call's approval.

    Fixed per call, so that a resume retried by a replay inside the server's
    deduplication window receives the first answer.
    """
    return f"resume-{execution_id}"


#: Approval statuses that end a tool call without running it.
REFUSED = {
    approval_pb2.APPROVAL_STATUS_REJECTED: "rejected",
    approval_pb2.APPROVAL_STATUS_CANCELLED: "cancelled",
    approval_pb2.APPROVAL_STATUS_EXPIRED: "expired",
}


def refusal(approval: approval_pb2.Approval) -> dict[str, Any]:
    """The outcome of a tool call whose approval was refused (rejected, cancelled or expired).

    The approver is written ``kind:id`` (``user:bob-finance``), as everywhere people read a principal.
    """
    outcome: dict[str, Any] = {"status": REFUSED[approval.status], "approval_id": approval.id}
    if approval.HasField("decision"):
        outcome["approver"] = actor_text(approval.decision.approver)
        if approval.decision.HasField("comment"):
            outcome["comment"] = approval.decision.comment
    return outcome


def outcome(execution: execution_pb2.Execution) -> dict[str, Any]:
    """The outcome of a tool call whose execution is final, as plain JSON-able data (the approver as ``kind:id``)."""
    result: dict[str, Any] = {"execution_id": execution.execution_id, "attempts": execution.attempts}
    if execution.HasField("approval_id"):
        result["approval_id"] = execution.approval_id
        result["approver"] = actor_text(execution.approver)
    which = execution.result.WhichOneof("outcome")
    if which == "completed":
        result.update(status="completed", output=parse_json(execution.result.completed.output_json))
    elif which == "failed":
        failed = execution.result.failed
        result.update(status="failed", code=failed.code, message=failed.message)
    else:
        code = common_pb2.CancelCode.Name(execution.result.cancelled.code).removeprefix("CANCEL_CODE_")
        result.update(status="cancelled", code=code)
    return result
