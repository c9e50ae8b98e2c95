"""The client's retry, error and reachability rules on status values, as the
Rust SDK's unit tests check them (client.rs, backoff.rs, error.rs, reach.rs).
No cluster: the statuses are built as a node sends them, trailers included."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

import gavel
from gavel._invoke import MethodSpec, _Attempts, _Route, jittered
from gavel.errors import _Status, from_attempt, retryable_attempt
from gavel.v1 import approval_pb2, cluster_pb2, error_pb2


class Refusal(grpc.RpcError):
    """A finished call's error, as grpc hands it over: code, details, trailers."""

    def __init__(self, code: grpc.StatusCode, details: str, detail: error_pb2.ErrorDetail | None = None) -> None:
        self._code, self._details = code, details
        self._trailers: list[tuple[str, Any]] = []
        if detail is not None:
            status = _Status(code=code.value[0], message=details)
            packed = status.details.add()
            packed.type_url = "type.googleapis.com/gavel.v1.ErrorDetail"
            packed.value = detail.SerializeToString()
            self._trailers = [
                ("gavel-error-code", detail.code),
                ("grpc-status-details-bin", status.SerializeToString()),
            ]

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> list[tuple[str, Any]]:
        return self._trailers


def overload() -> Refusal:
    detail = error_pb2.ErrorDetail(code="RESOURCE_EXHAUSTED", message="this node is overloaded", retry_after_ms=50)
    return Refusal(grpc.StatusCode.RESOURCE_EXHAUSTED, "this node is overloaded", detail)


def test_what_is_retried_with_the_same_request_id() -> None:
    assert retryable_attempt(Refusal(grpc.StatusCode.UNAVAILABLE, "failed to connect to all addresses"))
    assert retryable_attempt(overload())
    calm = "h2 protocol error: http2 error: connection error received: ENHANCE_YOUR_CALM"
    assert retryable_attempt(Refusal(grpc.StatusCode.RESOURCE_EXHAUSTED, calm))
    assert not retryable_attempt(Refusal(grpc.StatusCode.RESOURCE_EXHAUSTED, "message larger than max"))
    for code in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.INTERNAL):
        assert retryable_attempt(Refusal(code, "stream broke")), code
        answered = Refusal(code, "a node's answer", error_pb2.ErrorDetail(code="INTERNAL", message="x"))
        assert not retryable_attempt(answered), code
    domain = error_pb2.ErrorDetail(code="APPROVAL_CONSUMED", message="approval a cannot be consumed")
    assert not retryable_attempt(Refusal(grpc.StatusCode.FAILED_PRECONDITION, "refused", domain))
    tls = "failed to connect to all addresses; Ssl handshake failed: CERTIFICATE_VERIFY_FAILED"
    assert not retryable_attempt(Refusal(grpc.StatusCode.UNAVAILABLE, tls))
    assert from_attempt(Refusal(grpc.StatusCode.UNAVAILABLE, tls), "n1:1").code == "UNAUTHENTICATED"
    # A handshake cut short (the node closed it at its authentication
    # deadline, or a starved node was slow) is not a refusal: asked again.
    cut = "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:7401: handshaker shutdown"
    assert retryable_attempt(Refusal(grpc.StatusCode.UNAVAILABLE, cut))
    assert from_attempt(Refusal(grpc.StatusCode.UNAVAILABLE, cut), "n1:1").code == "UNAVAILABLE"
    # So is a handshake the peer reset (a node SIGKILLed mid-handshake; seen
    # in test_client.py's leader SIGKILL).
    reset = (
        "failed to connect to all addresses; last error: UNAVAILABLE: ipv4:127.0.0.1:27990: "
        "Handshake read failed (recvmsg:Connection reset by peer (104))"
    )
    assert retryable_attempt(Refusal(grpc.StatusCode.UNAVAILABLE, reset))
    assert from_attempt(Refusal(grpc.StatusCode.UNAVAILABLE, reset), "n1:1").code == "UNAVAILABLE"


def test_the_domain_code_and_the_approval_state_come_from_the_error_detail() -> None:
    detail = error_pb2.ErrorDetail(
        code="FAILED_PRECONDITION",
        message="approval a1 cannot be consumed (status: consumed, consumed by e1)",
        approval_status=approval_pb2.APPROVAL_STATUS_CONSUMED,
        consumed_by_execution_id="e1",
        problems=["one", "two"],
    )
    error = from_attempt(Refusal(grpc.StatusCode.FAILED_PRECONDITION, detail.message, detail), "n1:1")
    assert (error.code, error.status, error.message) == (
        "FAILED_PRECONDITION",
        grpc.StatusCode.FAILED_PRECONDITION,
        detail.message,
    )
    assert error.approval_status == approval_pb2.APPROVAL_STATUS_CONSUMED
    assert error.consumed_by_execution_id == "e1" and error.problems == ["one", "two"]
    unknown = error_pb2.ErrorDetail(code="FAILED_PRECONDITION", message="m", approval_status=99)
    assert from_attempt(Refusal(grpc.StatusCode.FAILED_PRECONDITION, "m", unknown), "n1:1").approval_status == 99
    bare = from_attempt(Refusal(grpc.StatusCode.PERMISSION_DENIED, "no"), "n1:1")
    assert bare.code == "PERMISSION_DENIED" and bare.access_refused and not bare.retryable


def test_a_retry_follows_the_leader_hint_and_waits_at_least_the_retry_hint() -> None:
    route = _Route(gavel.ClientOptions(endpoints=("n1:1", "n2:2", "n3:3")))
    hinted = error_pb2.ErrorDetail(code="NOT_LEADER", message="not the leader", leader_hint="n3:3", retry_after_ms=400)
    pause, failure = route.failed(0, Refusal(grpc.StatusCode.UNAVAILABLE, "not the leader", hinted), 0.05)
    assert (route.preferred, pause) == (2, 0.4) and failure == "n1:1: not the leader"
    route.failed(2, Refusal(grpc.StatusCode.UNAVAILABLE, "down"), 0.05)
    assert route.preferred == 0, "without a hint, the next endpoint"
    route.succeeded([("gavel-leader", "n2:2")])
    assert route.preferred == 1
    route.succeeded([("gavel-leader", "elsewhere:9")])
    assert route.preferred == 1, "a leader outside the configured endpoints is not followed"


def test_a_mutating_call_gets_one_request_id_for_all_its_retries_and_the_budget_ends_them() -> None:
    route = _Route(gavel.ClientOptions(endpoints=("n1:1", "n2:2"), retry_budget=0.3))
    spec = MethodSpec(
        path="/gavel.v1.ApprovalService/CancelApproval",
        request_type=approval_pb2.CancelApprovalRequest,
        response_type=approval_pb2.CancelApprovalResponse,
        mutating=True,
        long_poll_field=None,
        streaming=False,
    )
    attempts = _Attempts(route, spec, None, {"id": "a1"}, None)
    assert attempts.request.request_id.startswith("py-") and attempts.deadline == 5.0
    pauses = []
    while (pause := attempts.retry_pause(attempts.next_index(), Refusal(grpc.StatusCode.UNAVAILABLE, "x"))) is not None:
        pauses.append(pause)
    assert 1 <= len(pauses) <= 3 and all(0.05 <= pause <= 0.6 for pause in pauses), pauses
    assert route.attempts == len(pauses) + 1
    with pytest.raises(gavel.GavelError) as caught:
        attempts.retry_pause(0, Refusal(grpc.StatusCode.NOT_FOUND, "approval a1 was not found"))
    assert caught.value.code == "NOT_FOUND"
    given = approval_pb2.CancelApprovalRequest(id="a1", request_id="mine")
    assert _Attempts(route, spec, given, {}, 1.5).request is given


def test_jitter_never_shortens_a_pause_and_adds_at_most_half() -> None:
    pauses = [jittered(0.1) for _ in range(200)]
    assert all(0.1 <= pause <= 0.15 for pause in pauses) and len(set(pauses)) > 100


def test_reachability_names_a_lost_quorum() -> None:
    def status(node_id: int, role: str, term: int) -> cluster_pb2.StatusResponse:
        members = [cluster_pb2.Member(node_id=i, addr=f"n{i}", voter=True) for i in (1, 2, 3)]
        return cluster_pb2.StatusResponse(node_id=node_id, role=role, term=term, members=members)

    lone = gavel.Reachability.of([status(1, "Leader", 3)], 3)
    assert not lone.has_quorum and lone.describe() == "no leader: quorum lost (1 of 3 nodes reachable)"
    two = gavel.Reachability.of([status(1, "Leader", 3), status(2, "Follower", 3)], 3)
    assert two.describe() == "2 of 3 nodes reachable" and two.leader == 1
    assert gavel.Reachability.of([], 3).describe() == "no node reachable (0 of 3 nodes)"
    leaderless = gavel.Reachability.of([status(1, "Follower", 3), status(2, "Candidate", 4)], 3)
    assert leaderless.describe() == "no leader elected yet (2 of 3 nodes reachable)"
