"""The refund from a LangGraph graph: a scripted agent node proposes the
refund (no LLM), a tool node runs it through Gavel, interrupting the graph
until someone approves it; the app then resumes the graph.

    python langgraph_refund.py <order_id> <amount_cents>

Its principal needs the submitter grant. The graph's checkpoints live in
memory (InMemorySaver): a real app keeps them in a database, and can resume
the thread from another process.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command

import gavel
from gavel.langgraph import gavel_tool_call

CAPABILITY_ID = "orders.refund.py"
DECISION_WAIT_S = float(os.environ.get("DECISION_WAIT_S", "600"))


class State(TypedDict, total=False):
    order_id: str
    amount_cents: int
    tool_call: dict[str, Any]
    outcome: dict[str, Any]


def build_graph(client: gavel.Client, capability_id: str = CAPABILITY_ID) -> Any:
    """agent (scripted: proposes one refund tool call) -> refund (governed by Gavel)."""

    def agent(state: State) -> State:
        arguments = {"order_id": state["order_id"], "amount_cents": state["amount_cents"]}
        return {"tool_call": {"id": f"call-refund-{state['order_id']}", "name": "refund", "args": arguments}}

    def refund(state: State, config: RunnableConfig) -> State:
        call = state["tool_call"]
        outcome = gavel_tool_call(
            client, config, capability_id=capability_id, input=call["args"], tool_call_id=call["id"]
        )
        return {"outcome": outcome}

    graph = StateGraph(State)
    graph.add_node("agent", agent)
    graph.add_node("refund", refund)
    graph.add_edge(START, "agent")
    graph.add_edge("agent", "refund")
    graph.add_edge("refund", END)
    return graph.compile(checkpointer=InMemorySaver())


def main() -> int:
    order_id = sys.argv[1] if len(sys.argv) > 1 else "o-42"
    amount_cents = int(sys.argv[2]) if len(sys.argv) > 2 else 1250
    with gavel.Client.from_env() as client:
        graph = build_graph(client)
        config: RunnableConfig = {"configurable": {"thread_id": f"refund-thread-{order_id}"}}
        result = graph.invoke({"order_id": order_id, "amount_cents": amount_cents}, config)
        for pending in result.get("__interrupt__", []):
            approval_id = pending.value["gavel_approval_id"]
            print(f"approval required: {approval_id}", flush=True)
            print(f"an approver runs: gavel approval approve {approval_id}", flush=True)
            # Long-polls until the decision (WaitApproval): no polling loop.
            client.wait_decision(approval_id, timeout=DECISION_WAIT_S)
            # Resume the thread: the node replays and spends the approval once.
            result = graph.invoke(Command(resume={"gavel_approval_id": approval_id}), config)
        outcome = result["outcome"]
        print(f"outcome: {json.dumps(outcome, sort_keys=True)}", flush=True)
        return 0 if outcome["status"] == "completed" else 3


if __name__ == "__main__":
    sys.exit(main())
