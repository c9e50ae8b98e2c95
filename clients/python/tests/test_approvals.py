"""The approval behaviours of the TypeScript contract suite, through the Python
client, on a real secured three-node cluster.

Each principal acts on its own records: the app (service:py-app) creates,
reads, cancels and consumes its approvals; approvers (user:py-bob, ...)
decide them.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import threading
import time
import uuid

import grpc
import pytest

import gavel
from cluster import TestCluster
from gavel.v1 import approval_pb2, capability_pb2, common_pb2, execution_pb2, policy_pb2

APP = "service:py-app"
APPROVERS = ("user:py-bob", "user:py-carol", "user:py-dan")
RUN = uuid.uuid4().hex[:8]
_serial = 0


@pytest.fixture(scope="module")
def app(cluster: TestCluster) -> gavel.Client:
    cluster.grant(APP, "submitter", "approver", "clock", "self-approval")
    for approver in APPROVERS:
        cluster.grant(approver, "approver")
    return cluster.token_client(APP)


@pytest.fixture(scope="module")
def bob(cluster: TestCluster, app: gavel.Client) -> gavel.Client:
    return cluster.token_client(APPROVERS[0])


def create(app: gavel.Client, **overrides: object) -> approval_pb2.Approval:
    global _serial
    _serial += 1
    value = overrides.pop("input", {"orderId": f"o-{_serial}", "amountCents": 1250 + _serial, "note": "refund 💸"})
    fields: dict[str, object] = {
        "id": f"apr_py_{RUN}_{_serial}",
        "capability_id": f"orders.refund.{RUN}",
        "surface": "python",
        "input_json": gavel.canonical_json(value),
        "input_hash": gavel.input_hash(value),
        "reasons": ["amount over limit"],
        "types": ["finance"],
        "risk": common_pb2.RISK_HIGH,
        "side_effect": common_pb2.SIDE_EFFECT_WRITE,
        **overrides,
    }
    return app.approvals.create_approval(**fields).approval


def refusal(call: object, *args: object, **kwargs: object) -> gavel.GavelError:
    with pytest.raises(gavel.GavelError) as caught:
        call(*args, **kwargs)  # type: ignore[operator]
    return caught.value


def test_wait_decision_returns_once_the_approval_is_decided(app: gavel.Client, bob: gavel.Client) -> None:
    created = create(app)
    assert app.wait_decision(created.id, timeout=0.1).status == approval_pb2.APPROVAL_STATUS_PENDING
    seen: list[approval_pb2.Approval] = []
    waiter = threading.Thread(target=lambda: seen.append(app.wait_decision(created.id, timeout=20)))
    waiter.start()
    time.sleep(0.3)  # let the wait start (not an assertion)
    started = time.monotonic()
    bob.decide(created.id, True)
    waiter.join(timeout=20)
    assert [approval.status for approval in seen] == [approval_pb2.APPROVAL_STATUS_APPROVED]
    assert time.monotonic() - started < 10, "the wait woke on the decision"


def test_create_returns_every_field_and_get_reads_the_same_record(app: gavel.Client) -> None:
    value = {"b": [1, 2.5, None, True], "a": "é\u2028", "n": -0.0, "big": 1e21}
    created = create(app, input=value, expires_in_ms=60_000)
    assert created.status == approval_pb2.APPROVAL_STATUS_PENDING
    assert created.input_hash == gavel.input_hash(value)
    assert (
        created.input_json == gavel.canonical_json(value) == '{"a":"é\u2028","b":[1,2.5,null,true],"big":1e+21,"n":0}'
    )
    assert created.actor.id == "py-app" and created.actor.kind == common_pb2.ACTOR_KIND_SERVICE
    assert list(created.reasons) == ["amount over limit"] and list(created.types) == ["finance"]
    assert created.expires_at_ms - created.requested_at_ms == 60_000
    read = app.approvals.get_approval(id=created.id).approval
    # A read also carries what its caller may do with the approval (the
    # cluster's answer, which the console renders); a write's reply does not.
    assert read.HasField("controls") and not created.HasField("controls")
    read.ClearField("controls")
    assert read == created


def test_a_duplicate_id_is_refused_and_the_first_record_stays(app: gavel.Client) -> None:
    created = create(app)
    error = refusal(create, app, id=created.id, input={"other": 1})
    assert (error.code, error.status) == ("ALREADY_EXISTS", grpc.StatusCode.ALREADY_EXISTS)
    assert error.message == f'approval "{created.id}" already exists'
    assert app.approvals.get_approval(id=created.id).approval.input_hash == created.input_hash


def test_a_retried_create_with_the_same_request_id_gets_the_first_answer(app: gavel.Client) -> None:
    request_id = gavel.new_request_id()
    fields = {"request_id": request_id, "id": f"apr_py_{RUN}_retried", "input": {"same": True}}
    first = create(app, **fields)
    again = create(app, **fields)
    assert again == first


def test_an_unknown_id_is_not_found_on_read_and_on_decide(app: gavel.Client, bob: gavel.Client) -> None:
    unknown = refusal(app.approvals.get_approval, id=f"apr_py_{RUN}_missing")
    assert (unknown.code, unknown.status) == ("NOT_FOUND", grpc.StatusCode.NOT_FOUND)
    error = refusal(
        bob.approvals.decide_approval, id=f"apr_py_{RUN}_missing", status=approval_pb2.APPROVAL_STATUS_APPROVED
    )
    assert (error.code, error.status) == ("NOT_FOUND", grpc.StatusCode.NOT_FOUND)


def test_decide_records_the_approver_and_the_comment_and_a_decided_record_stays_decided(
    app: gavel.Client, bob: gavel.Client
) -> None:
    created = create(app)
    decided = bob.approvals.decide_approval(
        id=created.id, status=approval_pb2.APPROVAL_STATUS_APPROVED, comment="customer verified"
    ).approval
    assert decided.status == approval_pb2.APPROVAL_STATUS_APPROVED
    assert decided.decision.approver.id == "py-bob" and decided.decision.comment == "customer verified"
    error = refusal(bob.approvals.decide_approval, id=created.id, status=approval_pb2.APPROVAL_STATUS_REJECTED)
    assert (error.code, error.status) == ("FAILED_PRECONDITION", grpc.StatusCode.FAILED_PRECONDITION)
    assert error.approval_status == approval_pb2.APPROVAL_STATUS_APPROVED
    assert "is not pending (status: approved)" in error.message


def test_a_malformed_decision_is_invalid_and_changes_nothing(app: gavel.Client, bob: gavel.Client) -> None:
    created = create(app)
    error = refusal(bob.approvals.decide_approval, id=created.id, status=approval_pb2.APPROVAL_STATUS_CONSUMED)
    assert (error.code, error.status) == ("INVALID_ARGUMENT", grpc.StatusCode.INVALID_ARGUMENT)
    assert "invalid decision status" in error.message
    assert app.approvals.get_approval(id=created.id).approval.status == approval_pb2.APPROVAL_STATUS_PENDING


def test_self_approval_is_refused_unless_the_request_opted_out(app: gavel.Client) -> None:
    created = create(app)
    error = refusal(app.approvals.decide_approval, id=created.id, status=approval_pb2.APPROVAL_STATUS_APPROVED)
    assert (error.code, error.status) == ("APPROVAL_SELF_APPROVAL", grpc.StatusCode.PERMISSION_DENIED)
    assert error.access_refused
    assert app.approvals.get_approval(id=created.id).approval.status == approval_pb2.APPROVAL_STATUS_PENDING
    own = create(app, allow_self_approval=True)
    decided = app.approvals.decide_approval(id=own.id, status=approval_pb2.APPROVAL_STATUS_APPROVED).approval
    assert decided.status == approval_pb2.APPROVAL_STATUS_APPROVED


def test_an_expired_pending_record_reads_expired_and_cannot_be_decided(app: gavel.Client, bob: gavel.Client) -> None:
    past_ms = int(time.time() * 1000) - 120_000
    created = create(app, requested_at_ms=past_ms, expires_at_ms=past_ms + 60_000)
    assert app.approvals.get_approval(id=created.id).approval.status == approval_pb2.APPROVAL_STATUS_EXPIRED
    error = refusal(bob.approvals.decide_approval, id=created.id, status=approval_pb2.APPROVAL_STATUS_APPROVED)
    assert error.code == "FAILED_PRECONDITION"
    assert error.approval_status == approval_pb2.APPROVAL_STATUS_EXPIRED


def test_cancel_withdraws_a_pending_record_once(app: gavel.Client, bob: gavel.Client) -> None:
    created = create(app)
    cancelled = app.approvals.cancel_approval(id=created.id).approval
    assert cancelled.status == approval_pb2.APPROVAL_STATUS_CANCELLED
    error = refusal(app.approvals.cancel_approval, id=created.id)
    assert error.code == "FAILED_PRECONDITION"
    assert error.approval_status == approval_pb2.APPROVAL_STATUS_CANCELLED
    error = refusal(bob.approvals.decide_approval, id=created.id, status=approval_pb2.APPROVAL_STATUS_APPROVED)
    assert error.code == "FAILED_PRECONDITION"


def test_an_approval_is_consumed_once_and_pending_ones_not_at_all(app: gavel.Client, bob: gavel.Client) -> None:
    pending = create(app)
    error = refusal(app.approvals.consume_approval, id=pending.id, execution_id="exe_py_never")
    assert error.code == "FAILED_PRECONDITION" and error.approval_status == approval_pb2.APPROVAL_STATUS_PENDING
    created = create(app)
    bob.approvals.decide_approval(id=created.id, status=approval_pb2.APPROVAL_STATUS_APPROVED)
    consumed = app.approvals.consume_approval(id=created.id, execution_id="exe_py_first").approval
    assert consumed.status == approval_pb2.APPROVAL_STATUS_CONSUMED
    error = refusal(app.approvals.consume_approval, id=created.id, execution_id="exe_py_second")
    assert error.approval_status == approval_pb2.APPROVAL_STATUS_CONSUMED
    assert error.consumed_by_execution_id == "exe_py_first"
    assert f"approval {created.id} cannot be consumed (status: consumed, consumed by exe_py_first)" in error.message


def test_list_filters_by_status_capability_and_actor(app: gavel.Client, bob: gavel.Client) -> None:
    capability_id = f"orders.list.{RUN}"
    made = [create(app, capability_id=capability_id) for _ in range(3)]
    bob.approvals.decide_approval(id=made[1].id, status=approval_pb2.APPROVAL_STATUS_REJECTED)
    listed = app.approvals.list_approvals(capability_id=capability_id).approvals
    assert [approval.id for approval in listed] == [approval.id for approval in reversed(made)], "newest first"
    oldest = app.approvals.list_approvals(capability_id=capability_id, oldest_first=True).approvals
    assert [approval.id for approval in oldest] == [approval.id for approval in made]
    first = app.approvals.list_approvals(capability_id=capability_id, limit=2)
    assert len(first.approvals) == 2 and first.next_page_token
    rest = app.approvals.list_approvals(capability_id=capability_id, limit=2, page_token=first.next_page_token)
    paged = [approval.id for approval in [*first.approvals, *rest.approvals]]
    assert paged == [approval.id for approval in reversed(made)] and rest.next_page_token == ""
    executions = app.executions.list_executions(limit=1)
    assert len(executions.executions) <= 1
    rejected = app.approvals.list_approvals(
        capability_id=capability_id, status=approval_pb2.APPROVAL_STATUS_REJECTED
    ).approvals
    assert [approval.id for approval in rejected] == [made[1].id]
    mine = app.approvals.list_approvals(capability_id=capability_id, actor_id="py-app").approvals
    assert len(mine) == 3
    assert app.approvals.list_approvals(capability_id=capability_id, actor_id="nobody").approvals == []


def test_an_input_hash_that_does_not_match_is_refused_and_nothing_is_stored(app: gavel.Client) -> None:
    approval_id = f"apr_py_{RUN}_badhash"
    error = refusal(
        create, app, id=approval_id, input_hash="e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    )
    assert (error.code, error.status) == ("INVALID_ARGUMENT", grpc.StatusCode.INVALID_ARGUMENT)
    assert refusal(app.approvals.get_approval, id=approval_id).code == "NOT_FOUND"


def test_a_number_a_double_cannot_hold_is_refused_by_the_client_naming_its_path(app: gavel.Client) -> None:
    with pytest.raises(gavel.UnserializableInputError) as caught:
        create(app, input={"order": {"amounts": [1, 2**53 + 1]}})
    assert caught.value.path == "input.order.amounts[1]"
    assert caught.value.code == "INPUT_INVALID"


def test_racing_decides_over_all_three_nodes_exactly_one_wins(cluster: TestCluster, app: gavel.Client) -> None:
    async def race(approval_id: str) -> list[object]:
        clients = [
            gavel.AsyncClient(cluster.token_options(approver, endpoints=(endpoint,)))
            for approver in APPROVERS
            for endpoint in cluster.endpoints
        ]
        try:
            statuses = [approval_pb2.APPROVAL_STATUS_APPROVED, approval_pb2.APPROVAL_STATUS_REJECTED]
            return await asyncio.gather(
                *(
                    client.approvals.decide_approval(id=approval_id, status=statuses[index % 2])
                    for index, client in enumerate(clients)
                ),
                return_exceptions=True,
            )
        finally:
            for client in clients:
                await client.close()

    for _ in range(3):
        created = create(app)
        outcomes = asyncio.run(race(created.id))
        winners = [outcome for outcome in outcomes if isinstance(outcome, approval_pb2.DecideApprovalResponse)]
        losers = [outcome for outcome in outcomes if isinstance(outcome, gavel.GavelError)]
        assert len(winners) == 1 and len(losers) == len(outcomes) - 1, outcomes
        assert all(loser.code == "FAILED_PRECONDITION" for loser in losers)
        assert all(loser.approval_status == winners[0].approval.status for loser in losers)
        assert app.approvals.get_approval(id=created.id).approval.decision == winners[0].approval.decision


def test_racing_consumes_over_all_three_nodes_exactly_one_wins(
    cluster: TestCluster, app: gavel.Client, bob: gavel.Client
) -> None:
    created = create(app)
    bob.approvals.decide_approval(id=created.id, status=approval_pb2.APPROVAL_STATUS_APPROVED)

    async def race() -> list[object]:
        clients = [
            gavel.AsyncClient(cluster.token_options(APP, endpoints=(endpoint,))) for endpoint in cluster.endpoints
        ]
        try:
            return await asyncio.gather(
                *(
                    client.approvals.consume_approval(id=created.id, execution_id=f"exe_py_{node}_{twice}")
                    for node, client in enumerate(clients)
                    for twice in range(3)
                ),
                return_exceptions=True,
            )
        finally:
            for client in clients:
                await client.close()

    outcomes = asyncio.run(race())
    winners = [outcome for outcome in outcomes if isinstance(outcome, approval_pb2.ConsumeApprovalResponse)]
    assert len(winners) == 1, outcomes
    consumer = winners[0].approval.consumed_by_execution_id
    for outcome in outcomes:
        if isinstance(outcome, gavel.GavelError):
            assert outcome.consumed_by_execution_id == consumer


def register_gated(cluster: TestCluster, capability_id: str) -> None:
    """Registers a write capability that needs a human approval."""
    cluster.admin().capabilities.register_capability(
        spec=capability_pb2.CapabilitySpec(
            id=capability_id,
            side_effect=common_pb2.SIDE_EFFECT_WRITE,
            risk=common_pb2.RISK_HIGH,
            approval=capability_pb2.ApprovalPolicy(required=True, type="human"),
        )
    )


def test_submit_needs_approval_and_resume_spends_it_once(
    cluster: TestCluster, app: gavel.Client, bob: gavel.Client
) -> None:
    capability_id = f"py.approved.{RUN}"
    register_gated(cluster, capability_id)
    submitted = app.executions.submit(
        execution_id=f"exe_py_{RUN}_resume",
        capability_id=capability_id,
        input_json=gavel.canonical_json({"n": 1}),
        surface="python",
    )
    assert submitted.WhichOneof("outcome") == "approval_required"
    approval_id = submitted.approval_required.id
    error = refusal(app.executions.resume, approval_id=approval_id)
    assert (error.code, error.status) == ("APPROVAL_PENDING", grpc.StatusCode.FAILED_PRECONDITION)
    bob.approvals.decide_approval(id=approval_id, status=approval_pb2.APPROVAL_STATUS_APPROVED)
    resumed = app.executions.resume(approval_id=approval_id).execution
    assert resumed.execution_id == f"exe_py_{RUN}_resume" and resumed.state == execution_pb2.EXECUTION_STATE_QUEUED
    error = refusal(app.executions.resume, approval_id=approval_id)
    assert (error.code, error.status) == ("APPROVAL_CONSUMED", grpc.StatusCode.FAILED_PRECONDITION)
    app.executions.cancel_execution(execution_id=resumed.execution_id)


def test_a_resume_awaiting_the_decision_runs_once_it_is_approved_and_spends_nothing_while_pending(
    cluster: TestCluster, app: gavel.Client, bob: gavel.Client
) -> None:
    capability_id = f"py.on_decision.{RUN}"
    register_gated(cluster, capability_id)

    def submit(suffix: str) -> str:
        submitted = app.executions.submit(
            execution_id=f"exe_py_{RUN}_{suffix}",
            capability_id=capability_id,
            input_json=gavel.canonical_json({"n": suffix}),
            surface="python",
        )
        assert submitted.WhichOneof("outcome") == "approval_required"
        return submitted.approval_required.id

    # Nobody decides within the wait: APPROVAL_PENDING, and nothing was spent.
    silent = submit("silent")
    error = refusal(app.resume_and_wait, silent, timeout=0.3, await_decision=True)
    assert (error.code, error.status) == ("APPROVAL_PENDING", grpc.StatusCode.FAILED_PRECONDITION)
    assert app.approvals.get_approval(id=silent).approval.status == approval_pb2.APPROVAL_STATUS_PENDING

    # The resume waits; the decision resumes it; the caller gets the final
    # execution (cancelled here: no worker takes this capability's queue).
    approval_id = submit("on_decision")
    outcome: dict[str, object] = {}

    def resume() -> None:
        try:
            outcome["execution"] = app.resume_and_wait(approval_id, timeout=30, await_decision=True)
        except gavel.GavelError as error:  # pragma: no cover - reported by the assertion below
            outcome["error"] = error

    waiting = threading.Thread(target=resume)
    waiting.start()
    time.sleep(0.3)
    bob.approvals.decide_approval(id=approval_id, status=approval_pb2.APPROVAL_STATUS_APPROVED)
    execution_id = f"exe_py_{RUN}_on_decision"
    deadline = time.monotonic() + 20
    while True:
        try:
            created = app.executions.get_execution(execution_id=execution_id).execution
            break
        except gavel.GavelError as error:
            assert error.code == "NOT_FOUND" and time.monotonic() < deadline, error
            time.sleep(0.05)
    assert created.approval_id == approval_id
    app.executions.cancel_execution(execution_id=execution_id)
    waiting.join(30)
    assert "error" not in outcome, outcome
    execution = outcome["execution"]
    assert isinstance(execution, execution_pb2.Execution)
    assert (execution.execution_id, execution.state) == (execution_id, execution_pb2.EXECUTION_STATE_CANCELLED)
    error = refusal(app.executions.resume, approval_id=approval_id)
    assert error.code == "APPROVAL_CONSUMED"


def test_submit_errors_carry_their_domain_codes(app: gavel.Client) -> None:
    error = refusal(app.executions.submit, capability_id=f"py.unknown.{RUN}", input_json="{}", surface="python")
    assert (error.code, error.status) == ("CAPABILITY_NOT_FOUND", grpc.StatusCode.NOT_FOUND)
    error = refusal(app.executions.submit, capability_id=f"py.unknown.{RUN}", input_json="{not json", surface="python")
    assert (error.code, error.status) == ("INPUT_INVALID", grpc.StatusCode.INVALID_ARGUMENT)


def test_a_principal_without_the_grant_is_refused(cluster: TestCluster, app: gavel.Client) -> None:
    created = create(app)
    mallory = cluster.token_client("user:py-mallory")
    error = refusal(mallory.approvals.decide_approval, id=created.id, status=approval_pb2.APPROVAL_STATUS_APPROVED)
    assert (error.code, error.status) == ("PERMISSION_DENIED", grpc.StatusCode.PERMISSION_DENIED)
    assert error.access_refused


def test_a_decision_names_the_terms_it_was_made_on(app: gavel.Client, bob: gavel.Client) -> None:
    created, decoy = create(app), create(app)
    assert re.fullmatch(r"[0-9a-f]{64}", created.terms_hash) and created.terms_hash != decoy.terms_hash
    assert hashlib.sha256(created.terms_json.encode()).hexdigest() == created.terms_hash
    terms = json.loads(created.terms_json)
    assert (terms["approvalId"], terms["inputHash"]) == (created.id, created.input_hash)

    error = refusal(bob.decide, created.id, True, terms_hash=decoy.terms_hash)
    assert (error.code, error.status) == ("APPROVAL_TERMS_CHANGED", grpc.StatusCode.FAILED_PRECONDITION)
    assert app.approvals.get_approval(id=created.id).approval.status == approval_pb2.APPROVAL_STATUS_PENDING
    decided = bob.decide(created.id, True, terms_hash=created.terms_hash, comment="terms seen")
    assert decided.status == approval_pb2.APPROVAL_STATUS_APPROVED and decided.decision.comment == "terms seen"

    # Without a terms hash, decide reads the approval and names what it read.
    assert bob.decide(decoy.id, False).status == approval_pb2.APPROVAL_STATUS_REJECTED
    error = refusal(bob.decide, f"apr_py_{RUN}_no_terms", True)
    assert (error.code, error.status) == ("NOT_FOUND", grpc.StatusCode.NOT_FOUND)


def test_votes_name_the_terms_too_sync_and_async(cluster: TestCluster, app: gavel.Client) -> None:
    capability_id = f"orders.refund.{RUN}.voted"
    cluster.admin().policies.set_policy(
        name=f"py-terms-{RUN}",
        capability_ids=[capability_id],
        factors=[policy_pb2.PolicyFactor(name="pair", k=2, group=list(APPROVERS[1:]))],
    )
    created, decoy = create(app, capability_id=capability_id), create(app)
    carol = cluster.token_client(APPROVERS[1])
    error = refusal(carol.vote, created.id, True, terms_hash=decoy.terms_hash)
    assert (error.code, error.status) == ("APPROVAL_TERMS_CHANGED", grpc.StatusCode.FAILED_PRECONDITION)
    voted = carol.vote(created.id, True)
    assert voted.status == approval_pb2.APPROVAL_STATUS_PENDING and len(voted.quorum.votes) == 1

    async def decide_as_dan() -> approval_pb2.Approval:
        async with gavel.AsyncClient(cluster.token_options(APPROVERS[2])) as dan:
            return await dan.decide(created.id, True, terms_hash=created.terms_hash)

    assert asyncio.run(decide_as_dan()).status == approval_pb2.APPROVAL_STATUS_APPROVED
