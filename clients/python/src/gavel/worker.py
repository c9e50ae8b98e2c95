"""Worker: the handler author writes only the handler.

The worker long-polls its queues, runs up to ``concurrency`` handlers at
once, heartbeats each lease in the background, and reports each attempt's
outcome, as the Rust and TypeScript workers do
(crates/gavel-client/src/worker.rs, clients/typescript/.../worker.ts). A
report takes the next ready task for the slot it frees in the same call
(ReportAndPoll, no wait), so a busy worker spends one round trip per task.

A handler is stopped when the caller cancels the execution (a heartbeat
answers cancel_requested), when the lease is lost (a heartbeat answers
LEASE_LOST), at the attempt's deadline on the worker's own clock (which
fires even when no node can be reached), and when a shutdown's grace period
runs out. How the handler learns it:

- an ``async def`` handler is cancelled: ``asyncio.CancelledError`` is raised
  at its current ``await``;
- a plain ``def`` handler runs in a thread of its own and sees
  ``task.cancelled`` (a ``threading.Event``) set; it should check it, or wait
  on it, and return (a thread cannot be interrupted).

``task.stop_reason`` then says why (``cancelled``, ``lease-lost``,
``deadline``, ``shutdown``). A stopped handler is not reported: the cluster
has already moved on (it finalized the cancel, re-leased the attempt, or
times it out itself), so a report would only be refused as LEASE_LOST.

Each handler gets the execution's ``idempotency_key`` (the same for every
attempt: deduplicate the effect with it where the effect lives) and the
lease id, ``task.lease_id``, a fencing token strictly increasing across
leases that a downstream service can use to refuse an older attempt.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gavel._invoke import new_request_id
from gavel.canonical import UnserializableInputError, canonical_json, parse_json
from gavel.client import AsyncClient
from gavel.config import ClientOptions
from gavel.errors import GavelError
from gavel.v1 import capability_pb2, common_pb2, worker_pb2

_log = logging.getLogger("gavel.worker")

#: Why a handler was stopped.
STOP_REASONS = ("cancelled", "lease-lost", "deadline", "shutdown")

#: The most tasks one poll may ask for (the cluster's ``POLL_TASKS_MAX``); a
#: worker with a higher concurrency fills its slots over several polls.
POLL_TASKS_MAX = 64


@dataclass
class Task:
    """What a handler is given for one attempt."""

    #: The execution; the same for every attempt.
    execution_id: str
    #: Attempt number, 1 for the first.
    attempt: int
    #: Stable key for deduplicating the effect; the same for every attempt.
    idempotency_key: str
    #: The lease's fencing token: pass it to downstream services.
    lease_id: int
    #: The attempt's deadline (Unix epoch ms, cluster clock).
    deadline_ms: int
    #: The input, parsed from JSON.
    input: Any
    #: The input as the canonical JSON text the cluster stored.
    input_json: str
    #: Who submitted the execution.
    actor: common_pb2.Actor | None
    #: Who approved it, when an approval was consumed.
    approver: common_pb2.Actor | None
    #: The capability version the execution runs under.
    capability: capability_pb2.Capability | None
    #: Application correlation id.
    correlation_id: str | None
    #: Approval consumed to create the execution, if any.
    approval_id: str | None
    #: The raw task.
    raw: worker_pb2.Task
    #: Set when the handler must stop (cancel, lease lost, deadline, shutdown).
    cancelled: threading.Event = field(default_factory=threading.Event)
    #: Why it was stopped, once ``cancelled`` is set.
    stop_reason: str | None = None
    # The same signal for the worker's event loop.
    _stopped: asyncio.Event = field(default_factory=asyncio.Event, repr=False)


class HandlerError(Exception):
    """A failed attempt, as a handler raises it.

    Any other exception is reported as retryable with code HANDLER_ERROR; the
    cluster still applies the capability's retry rule.
    """

    def __init__(self, code: str, message: str, retryable: bool) -> None:
        super().__init__(f"{code}: {message}")
        #: Stable failure code, matched against the capability's non_retryable_codes.
        self.code = code
        #: Message for people.
        self.message = message
        #: Whether the failure is transient.
        self.retryable = retryable

    @staticmethod
    def transient(code: str, message: str) -> HandlerError:
        """A failure a retry may fix."""
        return HandlerError(code, message, True)

    @staticmethod
    def fatal(code: str, message: str) -> HandlerError:
        """A failure no retry can fix."""
        return HandlerError(code, message, False)


Handler = Callable[[Task], Any | Awaitable[Any]]
ErrorHook = Callable[[BaseException, str, str | None], None]


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class Worker:
    """Pulls tasks from queues, runs handlers, heartbeats and reports.

    ``handlers`` maps capability ids to handlers (``"*"`` for any), or is one
    handler for every capability. ``run()`` is a coroutine that returns after
    ``stop()``; ``run_sync()`` runs it on a fresh event loop in the calling
    thread. ``stop()`` may be called from any thread. ``on_error(error,
    stage, execution_id)`` hears of each problem the worker copes with itself
    (``poll`` failed, ``report`` refused, a ``handler`` raised something other
    than a HandlerError); by default a warning on the ``gavel.worker`` logger.
    """

    def __init__(
        self,
        handlers: Mapping[str, Handler] | Handler,
        *,
        queues: list[str],
        client: AsyncClient | None = None,
        options: ClientOptions | None = None,
        concurrency: int = 1,
        worker_id: str | None = None,
        poll_wait: float = 10.0,
        heartbeat_interval: float = 0.5,
        shutdown_grace: float = 10.0,
        on_error: ErrorHook | None = None,
    ) -> None:
        if not queues:
            raise GavelError("CONFIG", "at least one queue is required")
        self.handlers: Mapping[str, Handler] = handlers if isinstance(handlers, Mapping) else {"*": handlers}
        if not self.handlers:
            raise GavelError("CONFIG", "at least one handler is required")
        self.queues = list(queues)
        self.concurrency = max(1, concurrency)
        self.worker_id = worker_id or f"worker-{uuid.uuid4()}"
        self.poll_wait = poll_wait
        self.heartbeat_interval = heartbeat_interval
        self.shutdown_grace = shutdown_grace
        self.on_error: ErrorHook = on_error or _log_error
        self._client = client
        self._options = options
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._stop_requested = threading.Event()
        self._running: dict[int, tuple[Task, asyncio.Task[None]]] = {}

    def running(self) -> int:
        """Attempts currently running."""
        return len(self._running)

    def stop(self) -> None:
        """Stops polling; running handlers get the grace period, then are stopped. Thread-safe."""
        self._stop_requested.set()
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)

    def run_sync(self) -> None:
        """Runs the worker on a new event loop in this thread until ``stop()``."""
        asyncio.run(self.run())

    async def run(self) -> None:
        """Polls and runs tasks until ``stop()``, then drains within the grace period."""
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        if self._stop_requested.is_set():
            self._stop.set()
        own_client = self._client is None
        client = self._client or AsyncClient(self._options or ClientOptions.from_env())
        # Heartbeats give up quickly: the next one is due soon anyway, and the
        # local deadline, not the heartbeat, is what stops a cut-off worker.
        heartbeats = client.with_options(retry_budget=self.heartbeat_interval, call_timeout=2.0)
        freed = asyncio.Event()
        try:
            await self._poll_loop(client, heartbeats, freed)
            await self._drain()
        finally:
            await heartbeats.close()
            if own_client:
                await client.close()

    async def _poll_loop(self, client: AsyncClient, heartbeats: AsyncClient, freed: asyncio.Event) -> None:
        assert self._stop is not None
        stop_waiter = asyncio.ensure_future(self._stop.wait())
        try:
            while not self._stop.is_set():
                if len(self._running) >= self.concurrency:
                    freed.clear()
                    freed_waiter = asyncio.ensure_future(freed.wait())
                    await asyncio.wait({stop_waiter, freed_waiter}, return_when="FIRST_COMPLETED")
                    freed_waiter.cancel()
                    continue
                poll = asyncio.ensure_future(
                    client.workers.poll(
                        request_id=new_request_id(),
                        worker_id=self.worker_id,
                        queues=self.queues,
                        max_tasks=min(POLL_TASKS_MAX, self.concurrency - len(self._running)),
                        wait_ms=int(self.poll_wait * 1000),
                    )
                )
                await asyncio.wait({poll, stop_waiter}, return_when="FIRST_COMPLETED")
                if not poll.done():
                    poll.cancel()
                    break
                try:
                    tasks = poll.result().tasks
                except GavelError as error:
                    self.on_error(error, "poll", None)
                    await asyncio.wait({stop_waiter}, timeout=0.5)
                    continue
                for raw in tasks:
                    task = _task_of(raw)
                    runner = asyncio.ensure_future(self._run_slot(client, heartbeats, task.lease_id, task))
                    self._running[task.lease_id] = (task, runner)
                    runner.add_done_callback(functools.partial(self._finished, task.lease_id, freed))
        finally:
            stop_waiter.cancel()

    def _finished(self, lease_id: int, freed: asyncio.Event, _: object) -> None:
        """An attempt ended: its slot is free."""
        self._running.pop(lease_id, None)
        freed.set()

    async def _drain(self) -> None:
        runners = [runner for _, runner in self._running.values()]
        if not runners:
            return
        _, pending = await asyncio.wait(runners, timeout=self.shutdown_grace)
        if pending:
            for task, _ in list(self._running.values()):
                _stop(task, "shutdown")
            await asyncio.wait(pending)

    def _handler_for(self, task: Task) -> Handler | None:
        capability_id = task.capability.spec.id if task.capability is not None else ""
        return self.handlers.get(capability_id) or self.handlers.get("*")

    async def _run_slot(self, client: AsyncClient, heartbeats: AsyncClient, key: int, task: Task) -> None:
        """Runs ``task``, then each next task its report takes for the slot it frees (ReportAndPoll)."""
        current: Task | None = task
        while current is not None:
            entry = self._running.get(key)
            if entry is not None:
                self._running[key] = (current, entry[1])  # shutdown stops the task the slot runs now
            raw = await self._run_task(client, heartbeats, current)
            current = _task_of(raw) if raw is not None else None

    async def _run_task(self, client: AsyncClient, heartbeats: AsyncClient, task: Task) -> worker_pb2.Task | None:
        """Runs one task and reports it; returns the task the report took for the freed slot, if one was ready."""
        heartbeat = asyncio.ensure_future(self._heartbeat_loop(heartbeats, task))
        try:
            outcome = await self._outcome(task)
        finally:
            heartbeat.cancel()
        if outcome is None or task.stop_reason is not None:
            _log.info(
                "execution %s lease %s stopped (%s) unreported", task.execution_id, task.lease_id, task.stop_reason
            )
            return None
        request = worker_pb2.ReportRequest(
            request_id=new_request_id(), lease_id=task.lease_id, worker_id=self.worker_id
        )
        if isinstance(outcome, worker_pb2.ReportCompleted):
            request.completed.CopyFrom(outcome)
        else:
            request.failed.CopyFrom(outcome)
        try:
            if self._stop is not None and self._stop.is_set():
                await client.workers.report(request)
                return None
            # Report and take the next ready task for this slot in one call, without
            # waiting (wait_ms 0): an idle slot goes back to the long-poll.
            reply = await client.workers.report_and_poll(report=request, queues=self.queues, max_tasks=1, wait_ms=0)
        except GavelError as error:
            self.on_error(error, "report", task.execution_id)
            return None
        if reply.HasField("poll_failure"):
            detail = reply.poll_failure.detail
            self.on_error(GavelError(detail.code or "UNKNOWN", detail.message), "poll", None)
        return reply.tasks[0] if reply.tasks else None

    async def _outcome(self, task: Task) -> worker_pb2.ReportCompleted | worker_pb2.ReportFailed | None:
        """Runs the handler until it returns or is stopped; None when stopped."""
        handler = self._handler_for(task)
        if handler is None:
            capability_id = task.capability.spec.id if task.capability is not None else ""
            return _failed(
                HandlerError.fatal("NO_HANDLER", f"this worker has no handler for capability {capability_id}")
            )
        if task.input is _UNDECODABLE:
            return _failed(HandlerError.fatal("INPUT_INVALID", "input does not decode as JSON"))
        running: asyncio.Future[Any]
        if inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(type(handler).__call__):
            running = asyncio.ensure_future(handler(task))
        else:
            running = _in_thread(asyncio.get_running_loop(), handler, task)
        # The deadline on this worker's clock: it fires with no cluster at all.
        remaining = max(0.0, (task.deadline_ms - _now_ms()) / 1000)
        stop_waiter = asyncio.ensure_future(task._stopped.wait())
        try:
            await asyncio.wait({running, stop_waiter}, timeout=remaining, return_when="FIRST_COMPLETED")
        finally:
            stop_waiter.cancel()
        if not running.done():
            _stop(task, "deadline")
            running.cancel()
            # An async handler's finally blocks run before its slot frees; a
            # thread cannot be interrupted and ends when it sees the event.
            await asyncio.wait({running}, timeout=self.shutdown_grace)
            return None
        try:
            output = running.result()
        except HandlerError as error:
            return _failed(error)
        except asyncio.CancelledError:
            return None
        except Exception as error:  # the handler's own failure: reported retryable
            self.on_error(error, "handler", task.execution_id)
            return _failed(HandlerError.transient("HANDLER_ERROR", str(error) or type(error).__name__))
        try:
            return worker_pb2.ReportCompleted(output_json=canonical_json(output, path="output"))
        except UnserializableInputError as error:
            return _failed(HandlerError.fatal("OUTPUT_INVALID", f"output is not JSON: {error}"))

    async def _heartbeat_loop(self, heartbeats: AsyncClient, task: Task) -> None:
        while not task.cancelled.is_set():
            await asyncio.sleep(self.heartbeat_interval)
            try:
                reply = await heartbeats.workers.heartbeat(
                    request_id=new_request_id(), lease_id=task.lease_id, worker_id=self.worker_id
                )
            except GavelError as error:
                if error.code == "LEASE_LOST":
                    _stop(task, "lease-lost")
                    return
                continue  # unreachable cluster: keep trying; the local deadline still stops the handler
            if reply.cancel_requested:
                _stop(task, "cancelled")
                return


_UNDECODABLE = object()


def _task_of(raw: worker_pb2.Task) -> Task:
    try:
        value: Any = parse_json(raw.input_json)
    except ValueError:
        value = _UNDECODABLE
    return Task(
        execution_id=raw.execution_id,
        attempt=raw.attempt,
        idempotency_key=raw.idempotency_key,
        lease_id=raw.lease.lease_id,
        deadline_ms=raw.lease.deadline_ms,
        input=value,
        input_json=raw.input_json,
        actor=raw.actor if raw.HasField("actor") else None,
        approver=raw.approver if raw.HasField("approver") else None,
        capability=raw.capability if raw.HasField("capability") else None,
        correlation_id=raw.correlation_id if raw.HasField("correlation_id") else None,
        approval_id=raw.approval_id if raw.HasField("approval_id") else None,
        raw=raw,
    )


def _log_error(error: BaseException, stage: str, execution_id: str | None) -> None:
    """The default ``on_error``: a warning on the ``gavel.worker`` logger."""
    _log.warning("%s failed (execution %s): %s", stage, execution_id or "-", error)


def _in_thread(loop: asyncio.AbstractEventLoop, handler: Handler, task: Task) -> asyncio.Future[Any]:
    """Runs a plain handler in a thread of its own and returns its outcome as a future.

    A thread per attempt, not a pool: a handler that ignores ``task.cancelled``
    keeps its thread after its slot was freed, and must not hold up the next
    attempts behind it.
    """
    future: asyncio.Future[Any] = loop.create_future()

    def settle(result: Any, error: BaseException | None) -> None:
        if future.done():
            return  # stopped meanwhile: the outcome is not reported
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    def run() -> None:
        try:
            outcome, failure = handler(task), None
        except BaseException as error:  # the handler's failure travels to the loop as it is
            outcome, failure = None, error
        try:
            loop.call_soon_threadsafe(settle, outcome, failure)
        except RuntimeError:
            pass  # the worker's loop is closed: nobody waits for this outcome any more

    threading.Thread(target=run, name=f"gavel-handler-{task.lease_id}").start()
    return future


def _stop(task: Task, reason: str) -> None:
    """Stops a task's handler: the first reason wins. Called on the worker's event loop."""
    if task.stop_reason is None:
        task.stop_reason = reason
    task.cancelled.set()
    task._stopped.set()


def _failed(error: HandlerError) -> worker_pb2.ReportFailed:
    return worker_pb2.ReportFailed(code=error.code, message=error.message, retryable=error.retryable)
