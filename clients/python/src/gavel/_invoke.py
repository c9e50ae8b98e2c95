"""One logical call: leader following and safe retries, sync and asyncio.

The rules are the Rust SDK's (crates/gavel-client/src/client.rs and
backoff.rs), which the TypeScript client follows too:

- every attempt goes to the preferred endpoint, the last known leader;
- a ``gavel-leader: host:port`` response header from a follower that
  forwarded the call makes that node preferred (one hop instead of two);
- a retryable failure (errors.retryable_attempt) is retried with the same
  request id, going to the ErrorDetail's ``leader_hint`` or else the next
  endpoint, pausing 50 ms doubling to 1 s, at least the server's
  ``retry_after_ms``, plus up to half again of random jitter, until the
  retry budget is spent; then the error says how many nodes answer;
- every mutating request without a request id gets one (``py-<uuid4>``),
  kept by all its retries, so a retry after an ambiguous failure receives
  the original answer instead of causing a second effect;
- every other failure is a GavelError with the stable domain code.

The sync and asyncio invokers share this module's policy functions and
differ only in how they wait.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

import grpc
import grpc.aio

from gavel.actors import check_actors
from gavel.config import ClientOptions, normalize_endpoint
from gavel.errors import GavelError, from_attempt, read_error_detail, retryable_attempt
from gavel.limits import DEADLINE_SLACK_S, RETRY_PAUSE_FIRST_S, RETRY_PAUSE_MAX_S, SURVEY_TIMEOUT_S
from gavel.reach import Reachability
from gavel.v1 import cluster_pb2

#: The response header a follower adds when it forwarded a call.
LEADER_HEADER = "gavel-leader"

_STATUS_PATH = "/gavel.v1.ClusterService/Status"

_CHANNEL_OPTIONS = [
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1_000),
    # Retries are this module's: gRPC's own would not keep the request id rule.
    ("grpc.enable_retries", 0),
]


#: Calls that carry another call's request as a field (resume-and-wait,
#: report-and-poll): that part's request_id is filled in like a top-level one.
NESTED_REQUESTS = {
    "/gavel.v1.ExecutionService/ResumeAndWait": "resume",
    "/gavel.v1.WorkerService/ReportAndPoll": "report",
}


def new_request_id() -> str:
    """A fresh request id for one logical call; every retry of the call reuses it."""
    return f"py-{uuid.uuid4()}"


#: The response message type of an RPC.
Response = TypeVar("Response")


@dataclass(frozen=True)
class MethodSpec(Generic[Response]):
    """One RPC of gavel.v1, as the generated service classes describe it."""

    path: str
    request_type: Any
    response_type: type[Response]
    #: Whether the request has a request_id (a mutating call).
    mutating: bool
    #: The request field (milliseconds) that lengthens the deadline of a long-poll.
    long_poll_field: str | None
    streaming: bool


def build_request(spec: MethodSpec[Any], fields: Mapping[str, Any]) -> Any:
    """The request message of ``fields``; a field of the wrong type is GavelError ``INVALID_ARGUMENT``, naming it.

    The typed keywords of every method (gavel._services) let ``mypy --strict``
    catch a wrong type before it runs; this is the same refusal at run time,
    in the error type every other refusal has.
    """
    try:
        return spec.request_type(**fields)
    except (TypeError, ValueError) as error:
        name = spec.request_type.DESCRIPTOR.name
        for field, value in fields.items():
            try:
                spec.request_type(**{field: value})
            except (TypeError, ValueError) as problem:
                message = f"{name}.{field}: {problem} (got {type(value).__name__} {value!r:.60})"
                raise GavelError("INVALID_ARGUMENT", message, grpc.StatusCode.INVALID_ARGUMENT) from error
        raise GavelError("INVALID_ARGUMENT", f"{name}: {error}", grpc.StatusCode.INVALID_ARGUMENT) from error


def jittered(pause: float) -> float:
    """``pause`` plus a random extra of up to half of it: never earlier, and many clients spread out."""
    return pause + pause * random.random() / 2


class _Route:
    """The endpoints, which one is preferred, and the policy after each attempt."""

    def __init__(self, options: ClientOptions) -> None:
        if not options.endpoints:
            raise GavelError("CONFIG", "at least one endpoint is required")
        if options.token is not None and any(ch in options.token for ch in "\r\n"):
            raise GavelError("CONFIG", "the token has characters a header cannot carry")
        self.options = options
        self.endpoints = [normalize_endpoint(endpoint, options.tls is not None) for endpoint in options.endpoints]
        self.preferred = 0
        self.attempts = 0
        self.metadata: tuple[tuple[str, str], ...] = (
            (("authorization", f"Bearer {options.token}"),) if options.token is not None else ()
        )
        self.credentials = (
            grpc.ssl_channel_credentials(
                root_certificates=options.tls.ca, private_key=options.tls.key, certificate_chain=options.tls.cert
            )
            if options.tls is not None
            else None
        )

    def prepare(
        self, spec: MethodSpec[Any], request: Any, fields: Mapping[str, Any], timeout: float | None
    ) -> tuple[Any, float]:
        """The request to send (with a request id when mutating) and the deadline of each attempt.

        Raises GavelError ``INVALID_ARGUMENT``, sending nothing, for a field
        of the wrong type and for an actor id the cluster would refuse
        (gavel.actors).
        """
        if request is None:
            request = build_request(spec, fields)
        elif fields:
            raise TypeError("pass either a request message or its fields as keywords, not both")
        elif not isinstance(request, spec.request_type):
            raise TypeError(
                f"{spec.path} takes a {spec.request_type.DESCRIPTOR.full_name}, not {type(request).__name__}"
            )
        check_actors(request)
        if spec.mutating and not request.request_id:
            copy = spec.request_type()
            copy.CopyFrom(request)
            copy.request_id = new_request_id()
            request = copy
        nested = NESTED_REQUESTS.get(spec.path)
        if nested is not None and not getattr(request, nested).request_id:
            copy = spec.request_type()
            copy.CopyFrom(request)
            getattr(copy, nested).request_id = new_request_id()
            request = copy
        deadline = self.options.call_timeout if timeout is None else timeout
        if spec.long_poll_field is not None:
            deadline += getattr(request, spec.long_poll_field) / 1000
        return request, deadline

    def succeeded(self, initial_metadata: Any) -> None:
        """A follower forwarded the call and names the leader: go there directly next time."""
        if not self.options.follow_leader or not initial_metadata:
            return
        for key, value in initial_metadata:
            if key == LEADER_HEADER and value in self.endpoints:
                self.preferred = self.endpoints.index(value)

    def failed(self, index: int, error: grpc.RpcError, pause: float) -> tuple[float, str]:
        """After a retryable failure on endpoint ``index``: the next pause and the failure's text."""
        detail = read_error_detail(error)
        hinted = detail.leader_hint if detail is not None and detail.HasField("leader_hint") else None
        following = self.endpoints.index(hinted) if hinted in self.endpoints else (index + 1) % len(self.endpoints)
        if self.preferred == index:
            self.preferred = following
        if detail is not None and detail.HasField("retry_after_ms"):
            pause = max(pause, detail.retry_after_ms / 1000)
        details = error.details() if callable(getattr(error, "details", None)) else ""
        return pause, f"{self.endpoints[index]}: {details}"

    def gave_up(self, reach: Reachability, failure: str) -> GavelError:
        """The error of a call that ran out of retry budget."""
        return GavelError(
            "UNAVAILABLE",
            f"cluster unreachable: {reach.describe()}; last error: {failure}; "
            f"endpoints tried: {', '.join(self.endpoints)}",
            grpc.StatusCode.UNAVAILABLE,
        )


class _Attempts:
    """The state of one logical call across its attempts: which endpoint, how long to pause."""

    def __init__(
        self, route: _Route, spec: MethodSpec[Any], request: Any, fields: Mapping[str, Any], timeout: float | None
    ) -> None:
        self.route = route
        self.spec = spec
        self.request, self.deadline = route.prepare(spec, request, fields, timeout)
        self.started = time.monotonic()
        self.pause = RETRY_PAUSE_FIRST_S
        self.failure = ""

    def next_index(self) -> int:
        """The endpoint of the next attempt, counted as sent."""
        self.route.attempts += 1
        return self.route.preferred % len(self.route.endpoints)

    def retry_pause(self, index: int, error: grpc.RpcError) -> float | None:
        """After a failed attempt: how long to sleep before the next, or None when the budget is spent.

        Raises the GavelError of a failure that is not retryable.
        """
        if not retryable_attempt(error):
            raise from_attempt(error, self.route.endpoints[index]) from None
        self.pause, self.failure = self.route.failed(index, error, self.pause)
        if time.monotonic() - self.started + self.pause > self.route.options.retry_budget:
            return None
        sleep = jittered(self.pause)
        self.pause = min(self.pause * 2, RETRY_PAUSE_MAX_S)
        return sleep


def _callable(channel: Any, spec: MethodSpec[Any]) -> Any:
    make = channel.unary_stream if spec.streaming else channel.unary_unary
    return make(
        spec.path,
        request_serializer=spec.request_type.SerializeToString,
        response_deserializer=spec.response_type.FromString,
    )


def _stream_request(route: _Route, spec: MethodSpec[Any], request: Any, fields: Mapping[str, Any]) -> tuple[int, Any]:
    request = build_request(spec, fields) if request is None else request
    route.attempts += 1
    return route.preferred % len(route.endpoints), request


_STATUS_SPEC = MethodSpec(
    path=_STATUS_PATH,
    request_type=cluster_pb2.StatusRequest,
    response_type=cluster_pb2.StatusResponse,
    mutating=False,
    long_poll_field=None,
    streaming=False,
)
_SURVEY_REQUEST = cluster_pb2.StatusRequest(without_state_hash=True)


class Invoker:
    """Runs calls on blocking gRPC channels, one per endpoint."""

    def __init__(self, options: ClientOptions) -> None:
        self.route = _Route(options)
        self.channels = [
            grpc.secure_channel(endpoint, self.route.credentials, _CHANNEL_OPTIONS)
            if self.route.credentials is not None
            else grpc.insecure_channel(endpoint, _CHANNEL_OPTIONS)
            for endpoint in self.route.endpoints
        ]

    def unary(
        self, spec: MethodSpec[Response], request: Any, fields: Mapping[str, Any], timeout: float | None
    ) -> Response:
        """One logical unary call, retried by the module's rules."""
        attempts = _Attempts(self.route, spec, request, fields, timeout)
        while True:
            index = attempts.next_index()
            try:
                response, call = _callable(self.channels[index], spec).with_call(
                    attempts.request, timeout=attempts.deadline, metadata=self.route.metadata
                )
            except grpc.RpcError as error:
                pause = attempts.retry_pause(index, error)
                if pause is None:
                    raise self.route.gave_up(self.reachability(), attempts.failure) from None
                time.sleep(pause)
            else:
                self.route.succeeded(call.initial_metadata())
                return cast(Response, response)

    def stream(
        self, spec: MethodSpec[Response], request: Any, fields: Mapping[str, Any], timeout: float | None
    ) -> Iterator[Response]:
        """A server stream from the preferred node; the caller resumes by cursor when it breaks."""
        index, request = _stream_request(self.route, spec, request, fields)
        responses = _callable(self.channels[index], spec)(request, timeout=timeout, metadata=self.route.metadata)

        def iterate() -> Iterator[Any]:
            try:
                yield from responses
            except grpc.RpcError as error:
                raise from_attempt(error, self.route.endpoints[index]) from None
            finally:
                responses.cancel()

        return iterate()

    def reachability(self) -> Reachability:
        """Asks every endpoint for its status once and says how many voters answer."""
        futures = [
            _callable(channel, _STATUS_SPEC).future(
                _SURVEY_REQUEST, timeout=SURVEY_TIMEOUT_S, metadata=self.route.metadata
            )
            for channel in self.channels
        ]
        answers = []
        for future in futures:
            try:
                answers.append(future.result(timeout=SURVEY_TIMEOUT_S + DEADLINE_SLACK_S))
            except Exception:  # an endpoint that does not answer is what is being counted
                continue
        return Reachability.of(answers, len(self.channels))

    def close(self) -> None:
        """Closes every channel."""
        for channel in self.channels:
            channel.close()


class AsyncInvoker:
    """Runs calls on asyncio gRPC channels, one per endpoint."""

    def __init__(self, options: ClientOptions) -> None:
        self.route = _Route(options)
        self.channels = [
            grpc.aio.secure_channel(endpoint, self.route.credentials, _CHANNEL_OPTIONS)
            if self.route.credentials is not None
            else grpc.aio.insecure_channel(endpoint, _CHANNEL_OPTIONS)
            for endpoint in self.route.endpoints
        ]

    async def unary(
        self, spec: MethodSpec[Response], request: Any, fields: Mapping[str, Any], timeout: float | None
    ) -> Response:
        """One logical unary call, retried by the module's rules."""
        attempts = _Attempts(self.route, spec, request, fields, timeout)
        while True:
            index = attempts.next_index()
            call = _callable(self.channels[index], spec)(
                attempts.request, timeout=attempts.deadline, metadata=self.route.metadata
            )
            try:
                response = await call
                initial_metadata = await call.initial_metadata()
            except grpc.RpcError as error:
                pause = attempts.retry_pause(index, error)
                if pause is None:
                    raise self.route.gave_up(await self.reachability(), attempts.failure) from None
                await asyncio.sleep(pause)
            else:
                self.route.succeeded(initial_metadata)
                return cast(Response, response)

    def stream(
        self, spec: MethodSpec[Response], request: Any, fields: Mapping[str, Any], timeout: float | None
    ) -> AsyncIterator[Response]:
        """A server stream from the preferred node; the caller resumes by cursor when it breaks."""
        index, request = _stream_request(self.route, spec, request, fields)
        call = _callable(self.channels[index], spec)(request, timeout=timeout, metadata=self.route.metadata)

        async def iterate() -> AsyncIterator[Any]:
            try:
                async for response in call:
                    yield response
            except grpc.RpcError as error:
                raise from_attempt(error, self.route.endpoints[index]) from None
            finally:
                call.cancel()

        return iterate()

    async def reachability(self) -> Reachability:
        """Asks every endpoint for its status once and says how many voters answer."""

        async def status(channel: grpc.aio.Channel) -> cluster_pb2.StatusResponse | None:
            try:
                return await _callable(channel, _STATUS_SPEC)(  # type: ignore[no-any-return]
                    _SURVEY_REQUEST, timeout=SURVEY_TIMEOUT_S, metadata=self.route.metadata
                )
            except (grpc.RpcError, asyncio.TimeoutError):
                return None

        answers = await asyncio.gather(*(status(channel) for channel in self.channels))
        return Reachability.of([answer for answer in answers if answer is not None], len(self.channels))

    async def close(self) -> None:
        """Closes every channel."""
        for channel in self.channels:
            await channel.close()
