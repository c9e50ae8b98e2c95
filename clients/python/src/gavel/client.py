"""Client and AsyncClient: one typed object per gavel.v1 service.

    client = gavel.Client.from_env()
    client.approvals.get_approval(id="apr_refund-1")

Every method takes the request message, or its fields as keywords, and
returns the response message (proto/gavel/v1). Failures raise GavelError
with the stable domain code. Calls follow the leader and retry by the Rust
SDK's rules (see gavel._invoke).

``client.decide`` and ``client.vote`` decide an approval by its terms (SPEC
section 13): they name the terms hash the person was shown (``terms_hash``),
or else read the approval first and name the hash of what they read; the
cluster refuses a hash that is not the approval's with
``APPROVAL_TERMS_CHANGED``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import grpc

from gavel import _services
from gavel._invoke import AsyncInvoker, Invoker
from gavel.config import ClientOptions
from gavel.errors import GavelError
from gavel.limits import WAIT_SLICE_S
from gavel.reach import Reachability
from gavel.v1 import approval_pb2, common_pb2, execution_pb2


class _ClientBase:
    """What the sync and asyncio clients share: options, endpoints, counters."""

    _invoker: Invoker | AsyncInvoker

    def _setup(self, options: ClientOptions | None, changes: Mapping[str, Any], prefix: str) -> ClientOptions:
        options = options if options is not None else ClientOptions()
        if changes:
            options = _replace(options, changes)
        self.options = options
        self._invoker = Invoker(options) if prefix == "" else AsyncInvoker(options)
        for accessor, service in _services.SERVICES:
            setattr(self, accessor, getattr(_services, prefix + service)(self._invoker))
        return options

    @property
    def endpoints(self) -> list[str]:
        """The configured endpoints, as ``host:port``."""
        return list(self._invoker.route.endpoints)

    def preferred_endpoint(self) -> str:
        """The endpoint calls go to first (the last known leader)."""
        route = self._invoker.route
        return route.endpoints[route.preferred % len(route.endpoints)]

    def attempts(self) -> int:
        """RPC attempts sent so far, retries included."""
        return self._invoker.route.attempts


class Client(_ClientBase):
    """A blocking client for a Gavel cluster. Thread-safe; close it (or use ``with``) when done."""

    capabilities: _services.CapabilityService
    approvals: _services.ApprovalService
    executions: _services.ExecutionService
    workers: _services.WorkerService
    audit: _services.AuditService
    cluster: _services.ClusterService
    access: _services.AccessService
    policies: _services.PolicyService

    def __init__(self, options: ClientOptions | None = None, **changes: Any) -> None:
        self._setup(options, changes, "")
        self._invoker: Invoker

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **changes: Any) -> Client:
        """A client for the endpoints and credentials the ``GAVEL_*`` variables name."""
        return cls(ClientOptions.from_env(env), **changes)

    def reachability(self) -> Reachability:
        """Asks every endpoint for its status once and says how many voters answer."""
        return self._invoker.reachability()

    def wait_final(self, execution_id: str, timeout: float = 60.0) -> execution_pb2.Execution:
        """Long-polls until the execution is final; GavelError WAIT_TIMEOUT after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            reply = self.executions.wait_execution(execution_id=execution_id, timeout_ms=_wait_ms(left))
            if not reply.timed_out:
                return reply.execution
        raise _wait_timeout(execution_id, timeout)

    def wait_decision(self, approval_id: str, timeout: float = 60.0) -> approval_pb2.Approval:
        """Long-polls (WaitApproval) until the approval is no longer pending, and returns it; after
        ``timeout`` seconds, returns it as it is then (still pending)."""
        deadline = time.monotonic() + timeout
        while True:
            left = max(0.0, deadline - time.monotonic())
            reply = self.approvals.wait_approval(id=approval_id, wait_ms=_wait_ms(left) if left > 0 else 0)
            if not reply.timed_out or time.monotonic() >= deadline:
                return reply.approval

    def resume_and_wait(
        self, approval_id: str, timeout: float = 60.0, await_decision: bool = False, **resume: Any
    ) -> execution_pb2.Execution:
        """Resumes an approved approval and long-polls until its execution is final, the first wait in the
        same call (ResumeAndWait); GavelError WAIT_TIMEOUT after ``timeout`` seconds. With
        ``await_decision``, a pending approval is waited for (within the first wait) and resumed by the
        decision itself, in the same log entry (GavelError APPROVAL_PENDING if it is still pending then,
        APPROVAL_REJECTED if it is rejected). ``resume`` holds further ResumeRequest fields
        (``input_json``, ``execution_id``, ``request_id``)."""
        deadline = time.monotonic() + timeout
        request = execution_pb2.ResumeRequest(approval_id=approval_id, **resume)
        reply = self.executions.resume_and_wait(
            resume=request, wait_ms=_wait_ms(timeout), await_decision=await_decision
        )
        if not reply.timed_out:
            return reply.execution
        left = deadline - time.monotonic()
        if left <= 0:
            raise _wait_timeout(reply.execution.execution_id, timeout)
        return self.wait_final(reply.execution.execution_id, left)

    def decide(
        self,
        approval_id: str,
        approve: bool,
        *,
        terms_hash: str | None = None,
        comment: str | None = None,
        approver: common_pb2.Actor | None = None,
        caller_now_ms: int | None = None,
        request_id: str | None = None,
        timeout: float | None = None,
    ) -> approval_pb2.Approval:
        """Approves (``approve=True``) or rejects an approval, naming the terms hash it was decided on.

        ``terms_hash`` is the hash of the terms the person deciding was shown
        (``Approval.terms_hash``), sent as is; without it the approval is read
        first and the hash of what was read is sent. A hash that is not the
        approval's raises GavelError ``APPROVAL_TERMS_CHANGED``. Returns the
        approval after the decision (still pending while a policy's quorum is
        unmet: the decision is one vote).
        """
        if terms_hash is None:
            read = self.approvals.get_approval(timeout=timeout, **_read_fields(approval_id, caller_now_ms))
            terms_hash = _terms_hash_of(read, approval_id)
        fields = _decide_fields(approval_id, approve, terms_hash, comment, approver, caller_now_ms, request_id)
        return self.approvals.decide_approval(timeout=timeout, **fields).approval

    def vote(
        self,
        approval_id: str,
        approve: bool,
        *,
        terms_hash: str | None = None,
        input_hash: str | None = None,
        comment: str | None = None,
        approver: common_pb2.Actor | None = None,
        request_id: str | None = None,
        timeout: float | None = None,
    ) -> approval_pb2.Approval:
        """Casts one vote on an approval a policy governs, naming the terms hash and input hash it was cast on.

        Either hash not given is read from the approval first. A terms hash
        that is not the approval's raises GavelError ``APPROVAL_TERMS_CHANGED``.
        Returns the approval after the vote, with its quorum progress.
        """
        if terms_hash is None or input_hash is None:
            read = self.approvals.get_approval(timeout=timeout, **_read_fields(approval_id, None))
            terms_hash = terms_hash if terms_hash is not None else _terms_hash_of(read, approval_id)
            input_hash = input_hash if input_hash is not None else read.approval.input_hash
        fields = _vote_fields(approval_id, approve, terms_hash, input_hash, comment, approver, request_id)
        return self.policies.cast_vote(timeout=timeout, **fields).approval

    def with_options(self, **changes: Any) -> Client:
        """A client with the same endpoints and credentials but other timings."""
        return Client(_replace(self.options, changes))

    def close(self) -> None:
        """Closes every connection."""
        self._invoker.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncClient(_ClientBase):
    """An asyncio client for a Gavel cluster. Create and use it inside one event loop."""

    capabilities: _services.AsyncCapabilityService
    approvals: _services.AsyncApprovalService
    executions: _services.AsyncExecutionService
    workers: _services.AsyncWorkerService
    audit: _services.AsyncAuditService
    cluster: _services.AsyncClusterService
    access: _services.AsyncAccessService
    policies: _services.AsyncPolicyService

    def __init__(self, options: ClientOptions | None = None, **changes: Any) -> None:
        self._setup(options, changes, "Async")
        self._invoker: AsyncInvoker

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **changes: Any) -> AsyncClient:
        """A client for the endpoints and credentials the ``GAVEL_*`` variables name."""
        return cls(ClientOptions.from_env(env), **changes)

    async def reachability(self) -> Reachability:
        """Asks every endpoint for its status once and says how many voters answer."""
        return await self._invoker.reachability()

    async def wait_final(self, execution_id: str, timeout: float = 60.0) -> execution_pb2.Execution:
        """Long-polls until the execution is final; GavelError WAIT_TIMEOUT after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            reply = await self.executions.wait_execution(execution_id=execution_id, timeout_ms=_wait_ms(left))
            if not reply.timed_out:
                return reply.execution
        raise _wait_timeout(execution_id, timeout)

    async def wait_decision(self, approval_id: str, timeout: float = 60.0) -> approval_pb2.Approval:
        """Long-polls (WaitApproval) until the approval is no longer pending, and returns it; after
        ``timeout`` seconds, returns it as it is then (still pending)."""
        deadline = time.monotonic() + timeout
        while True:
            left = max(0.0, deadline - time.monotonic())
            reply = await self.approvals.wait_approval(id=approval_id, wait_ms=_wait_ms(left) if left > 0 else 0)
            if not reply.timed_out or time.monotonic() >= deadline:
                return reply.approval

    async def resume_and_wait(
        self, approval_id: str, timeout: float = 60.0, await_decision: bool = False, **resume: Any
    ) -> execution_pb2.Execution:
        """Resumes an approved approval and long-polls until its execution is final, the first wait in the
        same call (ResumeAndWait); GavelError WAIT_TIMEOUT after ``timeout`` seconds. With
        ``await_decision``, a pending approval is waited for (within the first wait) and resumed by the
        decision itself, in the same log entry (GavelError APPROVAL_PENDING if it is still pending then,
        APPROVAL_REJECTED if it is rejected). ``resume`` holds further ResumeRequest fields
        (``input_json``, ``execution_id``, ``request_id``)."""
        deadline = time.monotonic() + timeout
        request = execution_pb2.ResumeRequest(approval_id=approval_id, **resume)
        reply = await self.executions.resume_and_wait(
            resume=request, wait_ms=_wait_ms(timeout), await_decision=await_decision
        )
        if not reply.timed_out:
            return reply.execution
        left = deadline - time.monotonic()
        if left <= 0:
            raise _wait_timeout(reply.execution.execution_id, timeout)
        return await self.wait_final(reply.execution.execution_id, left)

    async def decide(
        self,
        approval_id: str,
        approve: bool,
        *,
        terms_hash: str | None = None,
        comment: str | None = None,
        approver: common_pb2.Actor | None = None,
        caller_now_ms: int | None = None,
        request_id: str | None = None,
        timeout: float | None = None,
    ) -> approval_pb2.Approval:
        """Approves (``approve=True``) or rejects an approval, naming the terms hash it was decided on.

        ``terms_hash`` is the hash of the terms the person deciding was shown
        (``Approval.terms_hash``), sent as is; without it the approval is read
        first and the hash of what was read is sent. A hash that is not the
        approval's raises GavelError ``APPROVAL_TERMS_CHANGED``. Returns the
        approval after the decision (still pending while a policy's quorum is
        unmet: the decision is one vote).
        """
        if terms_hash is None:
            read = await self.approvals.get_approval(timeout=timeout, **_read_fields(approval_id, caller_now_ms))
            terms_hash = _terms_hash_of(read, approval_id)
        fields = _decide_fields(approval_id, approve, terms_hash, comment, approver, caller_now_ms, request_id)
        return (await self.approvals.decide_approval(timeout=timeout, **fields)).approval

    async def vote(
        self,
        approval_id: str,
        approve: bool,
        *,
        terms_hash: str | None = None,
        input_hash: str | None = None,
        comment: str | None = None,
        approver: common_pb2.Actor | None = None,
        request_id: str | None = None,
        timeout: float | None = None,
    ) -> approval_pb2.Approval:
        """Casts one vote on an approval a policy governs, naming the terms hash and input hash it was cast on.

        Either hash not given is read from the approval first. A terms hash
        that is not the approval's raises GavelError ``APPROVAL_TERMS_CHANGED``.
        Returns the approval after the vote, with its quorum progress.
        """
        if terms_hash is None or input_hash is None:
            read = await self.approvals.get_approval(timeout=timeout, **_read_fields(approval_id, None))
            terms_hash = terms_hash if terms_hash is not None else _terms_hash_of(read, approval_id)
            input_hash = input_hash if input_hash is not None else read.approval.input_hash
        fields = _vote_fields(approval_id, approve, terms_hash, input_hash, comment, approver, request_id)
        return (await self.policies.cast_vote(timeout=timeout, **fields)).approval

    def with_options(self, **changes: Any) -> AsyncClient:
        """A client with the same endpoints and credentials but other timings."""
        return AsyncClient(_replace(self.options, changes))

    async def close(self) -> None:
        """Closes every connection."""
        await self._invoker.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _read_fields(approval_id: str, caller_now_ms: int | None) -> dict[str, Any]:
    fields: dict[str, Any] = {"id": approval_id}
    if caller_now_ms is not None:
        fields["caller_now_ms"] = caller_now_ms
    return fields


def _terms_hash_of(read: approval_pb2.GetApprovalResponse, approval_id: str) -> str | None:
    """The terms hash of a read approval (None from a cluster that predates terms); NOT_FOUND when absent."""
    if not read.HasField("approval"):
        raise GavelError("NOT_FOUND", f"approval {approval_id} was not found", grpc.StatusCode.NOT_FOUND)
    return read.approval.terms_hash or None


def _given(**fields: Any) -> dict[str, Any]:
    return {name: value for name, value in fields.items() if value is not None}


def _decide_fields(
    approval_id: str,
    approve: bool,
    terms_hash: str | None,
    comment: str | None,
    approver: common_pb2.Actor | None,
    caller_now_ms: int | None,
    request_id: str | None,
) -> dict[str, Any]:
    status = approval_pb2.APPROVAL_STATUS_APPROVED if approve else approval_pb2.APPROVAL_STATUS_REJECTED
    return _given(
        id=approval_id,
        status=status,
        terms_hash=terms_hash,
        comment=comment,
        approver=approver,
        caller_now_ms=caller_now_ms,
        request_id=request_id,
    )


def _vote_fields(
    approval_id: str,
    approve: bool,
    terms_hash: str | None,
    input_hash: str,
    comment: str | None,
    approver: common_pb2.Actor | None,
    request_id: str | None,
) -> dict[str, Any]:
    return _given(
        approval_id=approval_id,
        approve=approve,
        input_hash=input_hash,
        terms_hash=terms_hash,
        comment=comment,
        approver=approver,
        request_id=request_id,
    )


def _wait_ms(left: float) -> int:
    # One long-poll waits at most WAIT_SLICE_S; the server caps it anyway (WAIT_MS_MAX).
    return max(1, int(min(left, WAIT_SLICE_S) * 1000))


def _wait_timeout(execution_id: str, timeout: float) -> GavelError:
    return GavelError("WAIT_TIMEOUT", f"execution {execution_id} was not final within {timeout}s")


def _replace(options: ClientOptions, changes: Mapping[str, Any]) -> ClientOptions:
    import dataclasses

    if "endpoints" in changes:
        changes = {**changes, "endpoints": tuple(changes["endpoints"])}
    return dataclasses.replace(options, **changes)
