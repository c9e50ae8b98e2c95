"""The LangGraph and OpenAI Agents SDK integrations in-process, on the real
cluster: replays never create a second approval or a second charge, and a
rejection made in Gavel ends the call without running it."""

from __future__ import annotations

import asyncio
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import gavel
from cluster import TestCluster
from gavel.v1 import approval_pb2, capability_pb2, common_pb2

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

RUN = uuid.uuid4().hex[:8]
APP = "service:py-integrations"
APPROVER = "user:py-integrations-bob"
WORKER = "worker:py-integrations"
CAPABILITY_ID = f"py.refund.{RUN}"


class Ledger:
    """The charges a worker made, keyed by idempotency key."""

    def __init__(self) -> None:
        self.charges: dict[str, dict[str, Any]] = {}
        self.calls = 0
        self.lock = threading.Lock()

    def refund(self, task: gavel.Task) -> dict[str, Any]:
        with self.lock:
            self.calls += 1
            charge = self.charges.setdefault(
                task.idempotency_key, {**task.input, "reference": f"ch_{len(self.charges) + 1}"}
            )
        return {"orderId": charge["order_id"], "reference": charge["reference"], "refunded": True}


@pytest.fixture(scope="module")
def ledger(cluster: TestCluster) -> Iterator[Ledger]:
    cluster.grant(APP, "submitter")
    cluster.grant(APPROVER, "approver")
    cluster.grant(WORKER, "worker")
    cluster.admin().capabilities.register_capability(
        spec=capability_pb2.CapabilitySpec(
            id=CAPABILITY_ID,
            side_effect=common_pb2.SIDE_EFFECT_WRITE,
            risk=common_pb2.RISK_HIGH,
            idempotent=True,
            approval=capability_pb2.ApprovalPolicy(required=True, type="human"),
        )
    )
    book = Ledger()
    worker = gavel.Worker(book.refund, queues=[CAPABILITY_ID], options=cluster.token_options(WORKER), poll_wait=1.0)
    thread = threading.Thread(target=worker.run_sync)
    thread.start()
    try:
        yield book
    finally:
        worker.stop()
        thread.join(timeout=30)


@pytest.fixture(scope="module")
def app(cluster: TestCluster, ledger: Ledger) -> gavel.Client:
    return cluster.token_client(APP)


@pytest.fixture(scope="module")
def bob(cluster: TestCluster, ledger: Ledger) -> gavel.Client:
    return cluster.token_client(APPROVER)


def decide(bob: gavel.Client, approval_id: str, status: int) -> None:
    bob.approvals.decide_approval(id=approval_id, status=status, comment="decided in the test")


def approvals_of(app: gavel.Client, order_id: str) -> list[approval_pb2.Approval]:
    listed = app.approvals.list_approvals(capability_id=CAPABILITY_ID).approvals
    return [approval for approval in listed if gavel.canonical.parse_json(approval.input_json)["order_id"] == order_id]


def start_graph(app: gavel.Client, order_id: str) -> tuple[Any, dict[str, Any], str]:
    """The example's graph run on a thread of its own until it interrupts: (graph, config, approval id)."""
    from langgraph_refund import build_graph

    graph = build_graph(app, CAPABILITY_ID)
    config = {"configurable": {"thread_id": f"thread-{order_id}"}}
    first = graph.invoke({"order_id": order_id, "amount_cents": 700}, config)
    return graph, config, first["__interrupt__"][0].value["gavel_approval_id"]


def test_langgraph_replays_find_the_same_approval_and_spend_it_once(
    app: gavel.Client, bob: gavel.Client, ledger: Ledger
) -> None:
    from langgraph.types import Command
    from langgraph_refund import build_graph

    order_id = f"lg-{RUN}"
    graph, config, approval_id = start_graph(app, order_id)
    interrupted = graph.get_state(config).config
    # Resumed before anyone decided: the node replays, finds the same pending
    # approval, and interrupts again.
    again = graph.invoke(Command(resume="too early"), config)
    assert again["__interrupt__"][0].value["gavel_approval_id"] == approval_id
    assert [approval.id for approval in approvals_of(app, order_id)] == [approval_id]
    decide(bob, approval_id, approval_pb2.APPROVAL_STATUS_APPROVED)
    done = graph.invoke(Command(resume="approved"), config)
    assert done["outcome"]["status"] == "completed" and done["outcome"]["approver"] == APPROVER
    execution_id = done["outcome"]["execution_id"]
    # Replay the node once more from the interrupted checkpoint (time travel),
    # and from a fresh graph that lost every checkpoint: both find the
    # execution the resume created; nothing runs twice.
    replayed = graph.invoke(Command(resume="approved"), interrupted)
    fresh = build_graph(app, CAPABILITY_ID).invoke({"order_id": order_id, "amount_cents": 700}, config)
    assert replayed["outcome"] == done["outcome"] == fresh["outcome"]
    approval = app.approvals.get_approval(id=approval_id).approval
    assert approval.status == approval_pb2.APPROVAL_STATUS_CONSUMED
    assert approval.consumed_by_execution_id == execution_id
    charges = [charge for charge in ledger.charges.values() if charge["order_id"] == order_id]
    assert len(charges) == 1


def test_langgraph_a_rejection_in_gavel_ends_the_call_without_running_it(
    app: gavel.Client, bob: gavel.Client, ledger: Ledger
) -> None:
    from langgraph.types import Command

    order_id = f"lg-rejected-{RUN}"
    graph, config, approval_id = start_graph(app, order_id)
    decide(bob, approval_id, approval_pb2.APPROVAL_STATUS_REJECTED)
    outcome = graph.invoke(Command(resume="approved, says the app"), config)["outcome"]
    assert outcome == {
        "status": "rejected",
        "approval_id": approval_id,
        "approver": APPROVER,
        "comment": "decided in the test",
    }
    assert not any(charge["order_id"] == order_id for charge in ledger.charges.values())


def run_agent(cluster: TestCluster, bob: gavel.Client, order_id: str, decision: int) -> tuple[Any, list[str]]:
    from agents import Agent, Runner, set_tracing_disabled
    from agents.testing import ScriptedModel, assistant_message, function_call
    from openai_agents_refund import REFUND_SCHEMA

    from gavel.openai_agents import GavelTool

    set_tracing_disabled(True)
    arguments = {"order_id": order_id, "amount_cents": 321}

    async def run() -> tuple[Any, list[str]]:
        async with gavel.AsyncClient(cluster.token_options(APP)) as client:
            tool = GavelTool(
                client,
                name="refund_order",
                capability_id=CAPABILITY_ID,
                description="Refund an order",
                params_json_schema=REFUND_SCHEMA,
                run_key=f"run-{order_id}",
            )
            model = ScriptedModel(
                [[function_call("refund_order", arguments, call_id="call_1")], [assistant_message("done")]]
            )
            agent = Agent(name="support", model=model, tools=[tool.tool])
            result = await Runner.run(agent, "refund it")
            assert len(result.interruptions) == 1
            approval_id = tool.approval_id("call_1")
            # The decision is made elsewhere (here: another principal's client).
            await asyncio.to_thread(decide, bob, approval_id, decision)
            state = result.to_state()
            applied = await tool.apply_decisions(state)
            result = await Runner.run(agent, state)
            outputs = [item.output for item in result.new_items if item.type == "tool_call_output_item"]
            return applied, outputs

    return asyncio.run(run())


@pytest.mark.parametrize(
    ("decision", "applied", "stored", "charged"),
    [
        (approval_pb2.APPROVAL_STATUS_APPROVED, "approved", approval_pb2.APPROVAL_STATUS_CONSUMED, 1),
        (approval_pb2.APPROVAL_STATUS_REJECTED, "rejected", approval_pb2.APPROVAL_STATUS_REJECTED, 0),
    ],
)
def test_openai_agents_the_decision_made_in_gavel_resumes_the_run(
    cluster: TestCluster,
    app: gavel.Client,
    bob: gavel.Client,
    ledger: Ledger,
    decision: int,
    applied: str,
    stored: int,
    charged: int,
) -> None:
    order_id = f"oa-{applied}-{RUN}"
    decisions, outputs = run_agent(cluster, bob, order_id, decision)
    assert [made["status"] for made in decisions] == [applied]
    assert len(outputs) == 1, outputs
    assert ('"status": "completed"' in outputs[0] and '"refunded": true' in outputs[0]) == bool(charged), outputs
    (approval,) = approvals_of(app, order_id)
    assert approval.status == stored
    assert len([charge for charge in ledger.charges.values() if charge["order_id"] == order_id]) == charged
