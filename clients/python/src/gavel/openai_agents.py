"""The OpenAI Agents SDK: a tool whose ``needs_approval`` is backed by Gavel.

::

    from gavel.openai_agents import GavelTool

    refund = GavelTool(client, name="refund_order", capability_id="orders.refund.py",
                       description="Refund an order", params_json_schema={...}, run_key="conversation-7")
    agent = Agent(name="support", model=..., tools=[refund.tool])
    result = await Runner.run(agent, "refund order o-42")
    if result.interruptions:
        state = result.to_state()
        await refund.apply_decisions(state)   # waits for Gavel's decision (made by the CLI, the console)
        result = await Runner.run(agent, state)

``needs_approval`` submits the call to Gavel (execution id derived from
``run_key`` and the model's call id, gavel.tools): when the capability needs
approval, Gavel stores a pending approval and the run is interrupted.
``apply_decisions`` waits until Gavel has a decision for each of the run's
interruptions and approves or rejects it in the RunState accordingly; a
decision made elsewhere thus resumes the run. The tool's body then spends the
approval through Gavel's Resume (exactly once) and returns the result a
Gavel worker reported.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from agents import FunctionTool, RunContextWrapper, RunState
from agents.tool_context import ToolContext

from gavel.canonical import canonical_json
from gavel.client import AsyncClient
from gavel.errors import GavelError
from gavel.tools import REFUSED, approval_id_for, outcome, refusal, resume_request_id, tool_execution_id
from gavel.v1 import approval_pb2

#: How often apply_decisions reads a pending approval again, in seconds.
DECISION_POLL_S = 0.2


class GavelTool:
    """A function tool of the Agents SDK whose calls run as Gavel executions."""

    def __init__(
        self,
        client: AsyncClient,
        *,
        name: str,
        capability_id: str,
        description: str,
        params_json_schema: dict[str, Any],
        run_key: str,
        surface: str = "openai-agents",
        wait_timeout: float = 60.0,
    ) -> None:
        self.client = client
        self.capability_id = capability_id
        self.run_key = run_key
        self.surface = surface
        self.wait_timeout = wait_timeout
        #: The Agents SDK tool to give the agent.
        self.tool = FunctionTool(
            name=name,
            description=description,
            params_json_schema=params_json_schema,
            on_invoke_tool=self._invoke,
            needs_approval=self._needs_approval,
        )

    def execution_id(self, call_id: str) -> str:
        """The Gavel execution of the model's call ``call_id``."""
        return tool_execution_id(self.run_key, call_id)

    def approval_id(self, call_id: str) -> str:
        """The Gavel approval of the model's call ``call_id``, when its capability needs one."""
        return approval_id_for(self.execution_id(call_id))

    async def _submit(self, arguments: Any, call_id: str) -> Any:
        return await self.client.executions.submit(
            execution_id=self.execution_id(call_id),
            capability_id=self.capability_id,
            input_json=canonical_json(arguments),
            surface=self.surface,
            correlation_id=self.run_key,
        )

    async def _needs_approval(self, context: RunContextWrapper[Any], arguments: dict[str, Any], call_id: str) -> bool:
        submitted = await self._submit(arguments, call_id)
        return bool(
            submitted.WhichOneof("outcome") == "approval_required"
            and submitted.approval_required.status == approval_pb2.APPROVAL_STATUS_PENDING
        )

    async def apply_decisions(self, state: RunState[Any], timeout: float = 900.0) -> list[dict[str, Any]]:
        """Waits for Gavel's decision on each of this tool's interruptions and applies it to ``state``.

        Returns one ``{"call_id", "approval_id", "status"}`` per interruption.
        """
        applied = []
        for item in state.get_interruptions():
            if item.tool_name != self.tool.name:
                continue
            call_id = item.call_id or ""
            # Submitting again is idempotent: it names the call's approval.
            submitted = await self._submit(json.loads(item.arguments or "{}"), call_id)
            if submitted.WhichOneof("outcome") != "approval_required":
                state.approve(item)  # no approval needed (any more): the execution exists
                applied.append({"call_id": call_id, "execution_id": self.execution_id(call_id), "status": "approved"})
                continue
            approval = await self._decision(submitted.approval_required.id, timeout)
            if approval.status in REFUSED:
                state.reject(item)
            else:
                state.approve(item)
            status = approval_pb2.ApprovalStatus.Name(approval.status).removeprefix("APPROVAL_STATUS_").lower()
            applied.append({"call_id": call_id, "approval_id": approval.id, "status": status})
        return applied

    async def _decision(self, approval_id: str, timeout: float) -> approval_pb2.Approval:
        deadline = time.monotonic() + timeout
        while True:
            approval = (await self.client.approvals.get_approval(id=approval_id)).approval
            if approval.status != approval_pb2.APPROVAL_STATUS_PENDING:
                return approval
            if time.monotonic() > deadline:
                raise GavelError("WAIT_TIMEOUT", f"approval {approval_id} was not decided within {timeout}s")
            await asyncio.sleep(DECISION_POLL_S)

    async def _invoke(self, context: ToolContext[Any], arguments_json: str) -> str:
        call_id = context.tool_call_id
        execution_id = self.execution_id(call_id)
        submitted = await self._submit(json.loads(arguments_json or "{}"), call_id)
        if submitted.WhichOneof("outcome") == "approval_required":
            approval = submitted.approval_required
            if approval.status in REFUSED:
                return json.dumps(refusal(approval))
            try:
                await self.client.executions.resume(approval_id=approval.id, request_id=resume_request_id(execution_id))
            except GavelError as error:
                if error.code != "APPROVAL_CONSUMED" or error.consumed_by_execution_id != execution_id:
                    raise
        return json.dumps(outcome(await self.client.wait_final(execution_id, self.wait_timeout)))
