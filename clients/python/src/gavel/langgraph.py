"""LangGraph: a tool call that waits for a Gavel approval with ``interrupt()``.

Inside a node::

    from gavel.langgraph import gavel_tool_call

    def refund(state: State, config: RunnableConfig) -> dict:
        outcome = gavel_tool_call(client, config, capability_id="orders.refund.py",
                                  input={"order_id": ..., "amount_cents": ...},
                                  tool_call_id="refund")
        return {"outcome": outcome}

The first run submits the call to Gavel. When the capability needs approval,
it interrupts the graph with the pending approval (``__interrupt__`` in the
graph's result); someone decides it in Gavel (the CLI, the console); then
the application resumes the graph with ``Command(resume=...)``. LangGraph
re-runs the node from its start: the call's execution id is derived from the
thread id and ``tool_call_id`` (gavel.tools), so the replay finds the same
approval, and ``Resume`` spends it exactly once. Replaying the node again
later (time travel, a crash after the resume) finds the execution the
resume created and returns its result: the effect runs once.

The outcome is a plain dict: ``status`` is ``completed`` (with ``output``),
``failed``, ``cancelled``, or, when the approval was refused, ``rejected``,
``expired`` or ``cancelled`` (with ``approval_id`` and the ``approver``).
"""

from __future__ import annotations

from typing import Any

from langgraph.types import interrupt

from gavel.canonical import canonical_json
from gavel.client import Client
from gavel.errors import GavelError
from gavel.tools import REFUSED, outcome, refusal, resume_request_id, tool_execution_id
from gavel.v1 import approval_pb2


def gavel_tool_call(
    client: Client,
    config: Any,
    *,
    capability_id: str,
    input: Any,
    tool_call_id: str,
    surface: str = "langgraph",
    wait_timeout: float = 60.0,
) -> dict[str, Any]:
    """Runs one governed tool call from a LangGraph node and returns its outcome.

    ``config`` is the node's RunnableConfig (its ``configurable.thread_id``
    scopes the call). Interrupts the graph while the approval is pending.
    """
    thread_id = str(config["configurable"]["thread_id"])
    execution_id = tool_execution_id(thread_id, tool_call_id)
    submitted = client.executions.submit(
        execution_id=execution_id,
        capability_id=capability_id,
        input_json=canonical_json(input),
        surface=surface,
        correlation_id=thread_id,
    )
    if submitted.WhichOneof("outcome") == "execution":
        # No approval needed, or a replay after the resume: the execution exists.
        return outcome(client.wait_final(execution_id, wait_timeout))
    approval = submitted.approval_required
    while approval.status == approval_pb2.APPROVAL_STATUS_PENDING:
        interrupt(
            {
                "gavel_approval_id": approval.id,
                "capability_id": approval.capability_id,
                "input_hash": approval.input_hash,
                "expires_at_ms": approval.expires_at_ms,
            }
        )
        # Resumed: Gavel, not the resume value, says whether it was approved.
        approval = client.approvals.get_approval(id=approval.id).approval
    if approval.status in REFUSED:
        return refusal(approval)
    try:
        client.executions.resume(approval_id=approval.id, request_id=resume_request_id(execution_id))
    except GavelError as error:
        # Another replay of this same call spent it first: that is our execution.
        if error.code != "APPROVAL_CONSUMED" or error.consumed_by_execution_id != execution_id:
            raise
    return outcome(client.wait_final(execution_id, wait_timeout))
