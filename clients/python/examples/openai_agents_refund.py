"""The refund from an OpenAI Agents SDK agent: a scripted model (the SDK's
own ScriptedModel, no network) calls the refund tool; the tool's
needs_approval is backed by Gavel, so the run is interrupted until someone
decides in Gavel (the CLI); that decision resumes the run.

    python openai_agents_refund.py <order_id> <amount_cents>

Its principal needs the submitter grant.
"""

from __future__ import annotations

import asyncio
import json
import sys

from agents import Agent, Runner, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

import gavel
from gavel.openai_agents import GavelTool

CAPABILITY_ID = "orders.refund.py"
REFUND_SCHEMA = {
    "type": "object",
    "properties": {"order_id": {"type": "string"}, "amount_cents": {"type": "integer"}},
    "required": ["order_id", "amount_cents"],
    "additionalProperties": False,
}


async def main() -> int:
    order_id = sys.argv[1] if len(sys.argv) > 1 else "o-42"
    amount_cents = int(sys.argv[2]) if len(sys.argv) > 2 else 1250
    set_tracing_disabled(True)  # no trace export: this example talks to Gavel only
    model = ScriptedModel(
        [
            [function_call("refund_order", {"order_id": order_id, "amount_cents": amount_cents}, call_id="call_1")],
            [assistant_message(f"Refund of order {order_id} done.")],
        ]
    )
    async with gavel.AsyncClient.from_env() as client:
        refund = GavelTool(
            client,
            name="refund_order",
            capability_id=CAPABILITY_ID,
            description="Refund an order",
            params_json_schema=REFUND_SCHEMA,
            run_key=f"support-run-{order_id}",
        )
        agent = Agent(name="support", instructions="Refund orders when asked.", model=model, tools=[refund.tool])
        result = await Runner.run(agent, f"Please refund order {order_id}")
        while result.interruptions:
            state = result.to_state()
            for item in result.interruptions:
                approval_id = refund.approval_id(item.call_id or "")
                print(f"approval required: {approval_id}", flush=True)
                print(f"an approver runs: gavel approval approve {approval_id}", flush=True)
            decisions = await refund.apply_decisions(state)
            print(f"decided: {json.dumps(decisions, sort_keys=True)}", flush=True)
            result = await Runner.run(agent, state)
        print(f"final output: {result.final_output}", flush=True)
        tool_outputs = [item.output for item in result.new_items if item.type == "tool_call_output_item"]
        for output in tool_outputs:
            print(f"tool output: {output}", flush=True)
        return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
