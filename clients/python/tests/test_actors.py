"""One spelling of a principal (docs/decisions/0090), and typed keywords.

An actor reads ``kind:id`` in every outcome; an actor id that already names
a kind (``user:py-alice``) is refused before anything is sent, with the
cluster's INVALID_ARGUMENT and message; a keyword of the wrong type is a
GavelError too, and ``mypy --strict`` catches a misspelt one. No cluster:
the client points at a port nothing listens on, and every refusal must come
before the first attempt.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

import gavel
from gavel.tools import outcome, refusal
from gavel.v1 import approval_pb2, common_pb2, execution_pb2


@pytest.fixture
def client() -> Iterator[gavel.Client]:
    with gavel.Client(gavel.ClientOptions(endpoints=("127.0.0.1:9",), retry_budget=0.0)) as nowhere:
        yield nowhere


def test_an_actor_id_that_names_a_kind_is_refused_before_sending(client: gavel.Client) -> None:
    alice = common_pb2.Actor(id="user:py-alice", kind=common_pb2.ACTOR_KIND_USER)
    with pytest.raises(gavel.GavelError) as submitted:
        client.executions.submit(execution_id="ex-1", capability_id="orders.refund", input_json="{}", actor=alice)
    assert submitted.value.code == "INVALID_ARGUMENT"
    assert submitted.value.status == grpc.StatusCode.INVALID_ARGUMENT
    assert submitted.value.message == 'actor id "user:py-alice" already names a kind; pass id "py-alice" with kind user'

    # A request message, and an approver named by a principal kind.
    worker = {"id": "worker:w1", "kind": "ACTOR_KIND_AUTOMATION"}
    decide = approval_pb2.DecideApprovalRequest(id="apr-1", approver=worker)
    expected = 'approver id "worker:w1" already names a kind; pass id "w1" with kind automation'
    with pytest.raises(gavel.GavelError, match=expected):
        client.approvals.decide_approval(decide)
    assert client.attempts() == 0, "nothing was sent"


def test_colons_that_name_no_kind_are_the_ids_own() -> None:
    for actor_id in ["alice", "tenant:alice", "alice@example.com", "User:alice", "urn:user:alice"]:
        assert gavel.actor_id_problem("actor", actor_id) is None, actor_id
    node = gavel.actor_id_problem("actor", "node:2")
    assert node == 'actor id "node:2" already names a kind; pass id "2" with kind service'


def test_a_keyword_of_the_wrong_type_is_invalid_argument_naming_the_field(client: gavel.Client) -> None:
    with pytest.raises(gavel.GavelError) as wrong:
        client.executions.submit(execution_id=42, capability_id="orders.refund")  # type: ignore[arg-type]
    assert wrong.value.code == "INVALID_ARGUMENT"
    assert "SubmitRequest.execution_id" in wrong.value.message and "int" in wrong.value.message
    with pytest.raises(TypeError, match="capability_idd"):
        client.executions.submit(capability_idd="orders.refund")  # type: ignore[call-arg]
    assert client.attempts() == 0


def test_mypy_strict_refuses_a_misspelt_keyword_and_a_wrong_type(tmp_path: Path) -> None:
    api = pytest.importorskip("mypy.api")
    program = tmp_path / "caller.py"
    program.write_text(
        textwrap.dedent(
            """\
            import gavel

            def call(client: gavel.Client) -> None:
                client.executions.submit(capability_idd="orders.refund")
                client.executions.get_execution(execution_id=42)
                client.approvals.list_approvals(capability_id="orders.refund", limit=10)
            """
        )
    )
    report, _, status = api.run(
        ["--strict", "--ignore-missing-imports", "--cache-dir", str(tmp_path / "cache"), str(program)]
    )
    assert status == 1, report
    assert 'Unexpected keyword argument "capability_idd"' in report, report
    assert 'Argument "execution_id" to "get_execution"' in report and '"int"' in report, report
    assert report.count("error:") == 2, report


def test_outcomes_name_the_approver_kind_and_id() -> None:
    bob = common_pb2.Actor(id="bob-finance", kind=common_pb2.ACTOR_KIND_USER)
    execution = execution_pb2.Execution(execution_id="tc_1", attempts=1, approval_id="apr_tc_1", approver=bob)
    execution.result.completed.output_json = '{"refunded":true}'
    assert outcome(execution)["approver"] == "user:bob-finance"
    approval = approval_pb2.Approval(id="apr_tc_2", status=approval_pb2.APPROVAL_STATUS_REJECTED)
    approval.decision.approver.CopyFrom(bob)
    assert refusal(approval)["approver"] == "user:bob-finance"
    agent = common_pb2.Actor(id="agent-7", kind=common_pb2.ACTOR_KIND_AUTOMATION)
    assert gavel.actor_text(agent) == "automation:agent-7"
