"""The worker runtime on a real secured three-node cluster: background
heartbeats, the idempotency key and fencing token, retries, cancellation
(asyncio cancellation and threading.Event), lease loss, the attempt deadline
on the local clock, and graceful shutdown."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

import gavel
from cluster import TestCluster, eventually
from gavel.v1 import capability_pb2, common_pb2, execution_pb2

RUN = uuid.uuid4().hex[:8]
APP = "service:py-worker-app"
WORKER = "worker:py-1"


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def app(cluster: TestCluster) -> AsyncIterator[gavel.AsyncClient]:
    cluster.grant(APP, "submitter")
    cluster.grant(WORKER, "worker")
    async with gavel.AsyncClient(cluster.token_options(APP)) as client:
        yield client


@pytest.fixture(scope="module")
def worker_options(cluster: TestCluster, app: gavel.AsyncClient) -> gavel.ClientOptions:
    return cluster.token_options(WORKER)


def register(cluster: TestCluster, name: str, **spec: Any) -> str:
    capability_id = f"py.{name}.{RUN}"
    fields: dict[str, Any] = {
        "side_effect": common_pb2.SIDE_EFFECT_READ,
        "risk": common_pb2.RISK_LOW,
        "timeout_ms": 30_000,
        **spec,
    }
    cluster.admin().capabilities.register_capability(
        spec=capability_pb2.CapabilitySpec(id=capability_id, queue=capability_id, **fields)
    )
    return capability_id


async def submit(app: gavel.AsyncClient, capability_id: str, value: Any, execution_id: str | None = None) -> str:
    execution_id = execution_id or f"exe_py_{uuid.uuid4().hex}"
    await app.executions.submit(
        execution_id=execution_id,
        capability_id=capability_id,
        input_json=gavel.canonical_json(value),
        surface="python-test",
    )
    return execution_id


async def wait_final(app: gavel.AsyncClient, execution_id: str, timeout: float = 20.0) -> execution_pb2.Execution:
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        assert left > 0, f"execution {execution_id} not final within {timeout}s"
        reply = await app.executions.wait_execution(execution_id=execution_id, timeout_ms=int(min(left, 5.0) * 1000))
        if not reply.timed_out:
            return reply.execution


async def until(what: str, check: Any, timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while (value := check()) is None:
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        await asyncio.sleep(0.01)
    return value


def start(worker: gavel.Worker) -> asyncio.Task[None]:
    return asyncio.ensure_future(worker.run())


async def stop(worker: gavel.Worker, running: asyncio.Task[None]) -> None:
    worker.stop()
    await asyncio.wait_for(running, timeout=30)


@pytest.mark.asyncio(loop_scope="session")
async def test_runs_a_task_heartbeats_past_the_heartbeat_timeout_and_reports(
    cluster: TestCluster, app: gavel.AsyncClient, worker_options: gavel.ClientOptions
) -> None:
    capability_id = register(cluster, "echo", heartbeat_timeout_ms=800)
    seen: list[gavel.Task] = []

    async def echo(task: gavel.Task) -> Any:
        seen.append(task)
        await asyncio.sleep(2.0)  # well past the heartbeat timeout: only heartbeats keep the lease
        return {"echo": task.input["word"], "attempt": task.attempt}

    worker = gavel.Worker(
        {capability_id: echo}, queues=[capability_id], options=worker_options, poll_wait=1.0, heartbeat_interval=0.2
    )
    running = start(worker)
    try:
        execution_id = await submit(app, capability_id, {"word": "hi 😀"})
        execution = await wait_final(app, execution_id)
    finally:
        await stop(worker, running)
    assert execution.state == execution_pb2.EXECUTION_STATE_COMPLETED, execution
    assert execution.result.completed.output_json == '{"attempt":1,"echo":"hi 😀"}'
    task = seen[0]
    assert task.idempotency_key == execution.idempotency_key and task.idempotency_key.startswith("idk_")
    assert task.lease_id > 0 and task.execution_id == execution_id and task.actor.id == "py-worker-app"
    assert task.input_json == '{"word":"hi 😀"}' and task.stop_reason is None


@pytest.mark.asyncio(loop_scope="session")
async def test_resume_and_wait_returns_the_final_execution_in_one_call(
    cluster: TestCluster, app: gavel.AsyncClient, worker_options: gavel.ClientOptions
) -> None:
    capability_id = register(cluster, "gated", approval=capability_pb2.ApprovalPolicy(required=True, type="finance"))
    cluster.grant("user:py-w-approver", "approver")

    async def refund(task: gavel.Task) -> Any:
        return {"refunded": task.input["cents"]}

    worker = gavel.Worker({capability_id: refund}, queues=[capability_id], options=worker_options, poll_wait=1.0)
    running = start(worker)
    try:
        submitted = await app.executions.submit(
            capability_id=capability_id, input_json=gavel.canonical_json({"cents": 5}), surface="python-test"
        )
        approval_id = submitted.approval_required.id
        async with gavel.AsyncClient(cluster.token_options("user:py-w-approver")) as approver:
            await approver.decide(approval_id, True)
        execution = await app.resume_and_wait(approval_id, timeout=20)
    finally:
        await stop(worker, running)
    assert execution.state == execution_pb2.EXECUTION_STATE_COMPLETED, execution
    assert execution.result.completed.output_json == '{"refunded":5}'


@pytest.mark.asyncio(loop_scope="session")
async def test_a_retry_keeps_the_idempotency_key_and_a_fatal_failure_is_not_retried(
    cluster: TestCluster, app: gavel.AsyncClient, worker_options: gavel.ClientOptions
) -> None:
    capability_id = register(
        cluster, "flaky", retry=capability_pb2.RetryConfig(max_attempts=2, backoff_ms=10), idempotent=True
    )
    attempts: dict[str, list[tuple[int, str, int]]] = {}

    def flaky(task: gavel.Task) -> Any:  # a plain function: runs in a thread
        attempts.setdefault(task.execution_id, []).append((task.attempt, task.idempotency_key, task.lease_id))
        if task.input["fatal"]:
            raise gavel.HandlerError.fatal("REFUSED", "the gateway refused the card")
        if task.attempt == 1:
            raise gavel.HandlerError.transient("GATEWAY_TIMEOUT", "try again")
        if task.attempt == 2:
            raise RuntimeError("a bug in the handler")  # reported retryable as HANDLER_ERROR
        return {"paid": True}

    worker = gavel.Worker(flaky, queues=[capability_id], options=worker_options, poll_wait=1.0)
    running = start(worker)
    try:
        retried = await submit(app, capability_id, {"fatal": False})
        fatal = await submit(app, capability_id, {"fatal": True})
        retried_execution = await wait_final(app, retried)
        fatal_execution = await wait_final(app, fatal)
    finally:
        await stop(worker, running)
    assert retried_execution.state == execution_pb2.EXECUTION_STATE_COMPLETED
    assert retried_execution.attempts == 3
    keys = {key for _, key, _ in attempts[retried]}
    assert keys == {retried_execution.idempotency_key}, "every attempt gets the same idempotency key"
    leases = [lease for _, _, lease in attempts[retried]]
    assert leases == sorted(leases) and len(set(leases)) == 3, "each attempt has a newer fencing token"
    assert fatal_execution.state == execution_pb2.EXECUTION_STATE_FAILED
    assert fatal_execution.result.failed.code == "REFUSED" and fatal_execution.attempts == 1


@pytest.mark.asyncio(loop_scope="session")
async def test_cancel_reaches_an_async_handler_as_cancellation_and_a_sync_one_as_an_event(
    cluster: TestCluster, app: gavel.AsyncClient, worker_options: gavel.ClientOptions
) -> None:
    async_id = register(cluster, "cancel-async", timeout_ms=60_000)
    sync_id = register(cluster, "cancel-sync", timeout_ms=60_000)
    started: dict[str, gavel.Task] = {}
    stopped: dict[str, str] = {}

    async def waits_forever(task: gavel.Task) -> Any:
        started[task.execution_id] = task
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            stopped[task.execution_id] = f"CancelledError ({task.stop_reason})"
            raise

    def waits_for_the_event(task: gavel.Task) -> Any:
        started[task.execution_id] = task
        if task.cancelled.wait(timeout=30):
            stopped[task.execution_id] = f"event ({task.stop_reason})"
        return {"ignored": True}  # returned after the cancel: never reported

    worker = gavel.Worker(
        {async_id: waits_forever, sync_id: waits_for_the_event},
        queues=[async_id, sync_id],
        options=worker_options,
        # Above the cluster's 64 tasks per poll: the worker asks for at most
        # that many (a worker of concurrency 100 once never took work).
        concurrency=100,
        poll_wait=1.0,
        heartbeat_interval=0.1,
    )
    running = start(worker)
    try:
        for capability_id in (async_id, sync_id):
            execution_id = await submit(app, capability_id, {"cancel": capability_id})
            await until("the handler to start", lambda execution_id=execution_id: started.get(execution_id))
            await app.executions.cancel_execution(execution_id=execution_id)
            await until("the handler to stop", lambda execution_id=execution_id: stopped.get(execution_id), 5.0)
            execution = await wait_final(app, execution_id)
            assert execution.state == execution_pb2.EXECUTION_STATE_CANCELLED
            assert execution.result.cancelled.code == common_pb2.CANCEL_CODE_CANCELLED
    finally:
        await stop(worker, running)
    assert sorted(stopped.values()) == ["CancelledError (cancelled)", "event (cancelled)"]


@pytest.mark.asyncio(loop_scope="session")
async def test_a_lost_lease_stops_the_handler_and_a_late_report_is_refused_with_lease_lost(
    cluster: TestCluster, app: gavel.AsyncClient, worker_options: gavel.ClientOptions
) -> None:
    capability_id = register(
        cluster, "slow", timeout_ms=1000, retry=capability_pb2.RetryConfig(max_attempts=2, backoff_ms=10)
    )
    # By hand: take a lease, let its deadline pass, then report.
    execution_id = await submit(app, capability_id, {"by": "hand"})
    async with gavel.AsyncClient(worker_options) as hand:
        polled = await hand.workers.poll(worker_id="hand", queues=[capability_id], max_tasks=1, wait_ms=5000)
        lease_id = polled.tasks[0].lease.lease_id
        deadline = time.monotonic() + 10
        while (
            await app.executions.get_execution(execution_id=execution_id)
        ).execution.current_lease.lease_id == lease_id:
            assert time.monotonic() < deadline, "the attempt did not time out"
            await asyncio.sleep(0.1)
        with pytest.raises(gavel.GavelError) as caught:
            await hand.workers.report(lease_id=lease_id, worker_id="hand", completed={"output_json": "1"})
        assert caught.value.code == "LEASE_LOST"

    # The runtime: a handler that ignores its stop and finishes after the
    # deadline is not reported; the next attempt's result is the one kept.
    reports: list[str] = []

    def slow(task: gavel.Task) -> Any:
        if task.attempt == 2:
            time.sleep(1.8)
            reports.append(f"late {task.attempt} ({task.stop_reason})")
        return {"attempt": task.attempt}

    worker = gavel.Worker(
        slow,
        queues=[capability_id],
        options=worker_options,
        poll_wait=1.0,
        on_error=lambda error, stage, _: reports.append(f"{stage}: {error}"),
    )
    running = start(worker)
    try:
        execution = await wait_final(app, execution_id)
        await until("the late handler to return", lambda: reports or None, 5.0)
        await asyncio.sleep(0.3)
    finally:
        await stop(worker, running)
    assert execution.state == execution_pb2.EXECUTION_STATE_COMPLETED and execution.attempts == 3
    assert execution.result.completed.output_json == '{"attempt":3}', "the third attempt's, not the late second's"
    # Stopped by the local deadline, or by a heartbeat that learned of the
    # expiry first (both are the same lease's end); either way never reported.
    assert reports in (["late 2 (deadline)"], ["late 2 (lease-lost)"]), reports


@pytest.mark.asyncio(loop_scope="session")
async def test_a_lease_revoked_for_missed_heartbeats_stops_the_handler_as_lease_lost(
    cluster: TestCluster, app: gavel.AsyncClient, worker_options: gavel.ClientOptions
) -> None:
    capability_id = register(cluster, "missed", heartbeat_timeout_ms=300)
    reasons: list[str | None] = []

    def waits(task: gavel.Task) -> Any:
        task.cancelled.wait(timeout=20)
        reasons.append(task.stop_reason)
        return {"ignored": True}

    # A heartbeat interval longer than the capability's heartbeat timeout: the
    # cluster revokes the lease, and the first heartbeat learns LEASE_LOST.
    worker = gavel.Worker(waits, queues=[capability_id], options=worker_options, poll_wait=1.0, heartbeat_interval=1.0)
    running = start(worker)
    try:
        execution_id = await submit(app, capability_id, {"n": 1})
        await until("the handler to stop", lambda: reasons or None, 10.0)
        execution = (await app.executions.get_execution(execution_id=execution_id)).execution
    finally:
        await stop(worker, running)
    assert reasons[0] == "lease-lost"
    assert execution.state != execution_pb2.EXECUTION_STATE_COMPLETED, "the stopped handler's output was not reported"


def test_graceful_shutdown_lets_a_running_handler_finish_and_report_then_stops_polling(
    cluster: TestCluster, worker_options: gavel.ClientOptions
) -> None:
    cluster.grant(APP, "submitter")
    app = cluster.token_client(APP)
    capability_id = register(cluster, "graceful")
    ends: list[bool] = []

    def handler(task: gavel.Task) -> Any:
        time.sleep(0.8)
        ends.append(task.cancelled.is_set())
        return {"done": True}

    worker = gavel.Worker(handler, queues=[capability_id], options=worker_options, poll_wait=0.5)
    thread = threading.Thread(target=worker.run_sync)  # the blocking API
    thread.start()
    first = f"exe_py_graceful_{RUN}_1"
    app.executions.submit(execution_id=first, capability_id=capability_id, input_json="{}", surface="python-test")
    eventually("the handler to start", lambda: worker.running() or None, 10.0, 0.01)
    worker.stop()
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert ends == [False], "the handler ran to its end without being stopped"
    assert app.executions.get_execution(execution_id=first).execution.state == execution_pb2.EXECUTION_STATE_COMPLETED
    second = f"exe_py_graceful_{RUN}_2"
    app.executions.submit(execution_id=second, capability_id=capability_id, input_json="{}", surface="python-test")
    time.sleep(1.0)
    assert app.executions.get_execution(execution_id=second).execution.state == execution_pb2.EXECUTION_STATE_QUEUED


@pytest.mark.asyncio(loop_scope="session")
async def test_shutdown_past_its_grace_cancels_the_handler_with_reason_shutdown(
    cluster: TestCluster, app: gavel.AsyncClient, worker_options: gavel.ClientOptions
) -> None:
    capability_id = register(cluster, "stubborn")
    reasons: list[str | None] = []

    async def stubborn(task: gavel.Task) -> Any:
        try:
            await asyncio.sleep(3600)
        finally:
            reasons.append(task.stop_reason)

    worker = gavel.Worker(stubborn, queues=[capability_id], options=worker_options, poll_wait=0.5, shutdown_grace=0.3)
    running = start(worker)
    await submit(app, capability_id, {"n": 1})
    await until("the handler to start", lambda: worker.running() or None)
    begun = time.monotonic()
    await stop(worker, running)
    assert reasons == ["shutdown"]
    assert time.monotonic() - begun < 3, "shutdown is bounded by its grace"


def test_the_attempt_deadline_stops_the_handler_on_the_local_clock_with_no_cluster_left() -> None:
    own = TestCluster.start()
    try:
        own.grant(WORKER, "worker")
        capability_id = register(own, "deadline", timeout_ms=2000)
        own.admin().executions.submit(capability_id=capability_id, input_json="{}", surface="python-test")
        seen: dict[str, Any] = {}

        def blocks(task: gavel.Task) -> Any:
            seen["deadline_ms"] = task.deadline_ms
            task.cancelled.wait(timeout=20)
            seen["stopped_at_ms"] = time.time_ns() // 1_000_000
            seen["reason"] = task.stop_reason
            return None

        worker = gavel.Worker(
            blocks,
            queues=[capability_id],
            options=own.token_options(WORKER),
            poll_wait=0.5,
            heartbeat_interval=0.1,
            shutdown_grace=1.0,
        )
        thread = threading.Thread(target=worker.run_sync)
        thread.start()
        try:
            eventually("the handler to start", lambda: seen.get("deadline_ms"), 10.0, 0.01)
            for pid in own.node_pids:  # take the whole cluster away: only the local clock is left
                os.kill(pid, signal.SIGKILL)
            eventually("the deadline stop", lambda: seen.get("stopped_at_ms"), 5.0, 0.01)
        finally:
            worker.stop()
            thread.join(timeout=30)
        assert seen["reason"] == "deadline"
        late_by = seen["stopped_at_ms"] - seen["deadline_ms"]
        assert -50 <= late_by < 500, f"stopped {late_by} ms after the deadline"
    finally:
        own.stop()
