"""GavelError: every failed call, with the stable domain code.

The server puts an ErrorDetail (proto/gavel/v1/error.proto) in the status
details: the ``grpc-status-details-bin`` trailer holds a google.rpc.Status
whose details list one google.protobuf.Any of type gavel.v1.ErrorDetail, and
the ``gavel-error-code`` trailer holds the code alone. Branch on ``code``,
never on the message.
"""

from __future__ import annotations

import re
from typing import Any

import grpc
from google.protobuf import any_pb2, descriptor_pb2, descriptor_pool, message_factory

from gavel.v1 import approval_pb2, error_pb2

_ERROR_DETAIL_TYPE = "type.googleapis.com/gavel.v1.ErrorDetail"


def _status_message_class() -> Any:
    # google.rpc.Status, built in a private descriptor pool: the package needs
    # no googleapis-common-protos, and cannot clash with it when installed.
    pool = descriptor_pool.DescriptorPool()
    any_file = descriptor_pb2.FileDescriptorProto()
    any_pb2.DESCRIPTOR.CopyToProto(any_file)
    pool.Add(any_file)
    status_file = descriptor_pb2.FileDescriptorProto(
        name="gavel_private/google_rpc_status.proto", package="google.rpc", dependency=["google/protobuf/any.proto"]
    )
    status = status_file.message_type.add(name="Status")
    status.field.add(name="code", number=1, type=5, label=1)  # int32
    status.field.add(name="message", number=2, type=9, label=1)  # string
    status.field.add(name="details", number=3, type=11, label=3, type_name=".google.protobuf.Any")
    pool.Add(status_file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("google.rpc.Status"))


_Status = _status_message_class()

# Transport failures that asking again never fixes: the handshake failed or
# the node refused our certificate.
_TLS_FAILURE = re.compile(r"ssl|tls|handshake|certificate|CERTIFICATE_VERIFY_FAILED|alert", re.IGNORECASE)

# A handshake that was cut, not refused: gRPC core's "handshaker shutdown"
# when the connection closed or the attempt ran out of time mid-handshake (a
# node closes a handshake that outlasts its authentication deadline, and a
# starved node is slow to finish one), and a handshake read or write that met
# a connection reset by the peer or a broken pipe (a node SIGKILLed or
# restarting mid-handshake: "Handshake read failed (recvmsg:Connection reset
# by peer (104))"). A refusal comes with a TLS alert instead. Asking again
# can succeed.
_HANDSHAKE_CUT = re.compile(r"handshaker shutdown|connection reset by peer|broken pipe", re.IGNORECASE)


def _trailers(error: grpc.RpcError) -> list[tuple[str, Any]]:
    trailing = getattr(error, "trailing_metadata", None)
    if trailing is None:
        return []
    try:
        return list(trailing() or ())
    except Exception:  # a call that never started has no trailers
        return []


def read_error_detail(error: grpc.RpcError) -> error_pb2.ErrorDetail | None:
    """The ErrorDetail the server attached to a failed call, if any."""
    for key, value in _trailers(error):
        if key == "grpc-status-details-bin" and isinstance(value, bytes):
            status = _Status.FromString(value)
            for detail in status.details:
                if detail.type_url == _ERROR_DETAIL_TYPE:
                    parsed = error_pb2.ErrorDetail()
                    parsed.ParseFromString(detail.value)
                    return parsed
    return None


def _code(error: grpc.RpcError) -> grpc.StatusCode:
    code = error.code() if callable(getattr(error, "code", None)) else None
    return code if isinstance(code, grpc.StatusCode) else grpc.StatusCode.UNKNOWN


def _details(error: grpc.RpcError) -> str:
    details = error.details() if callable(getattr(error, "details", None)) else None
    return details or ""


def tls_failure(error: grpc.RpcError) -> str | None:
    """The TLS failure behind a transport error, if that is what it is."""
    if _code(error) != grpc.StatusCode.UNAVAILABLE or read_error_detail(error) is not None:
        return None
    details = _details(error)
    if _HANDSHAKE_CUT.search(details):
        return None
    return details if _TLS_FAILURE.search(details) else None


class GavelError(Exception):
    """Why a call failed.

    ``code`` is the stable domain code (``APPROVAL_CONSUMED``, ``LEASE_LOST``,
    ``INVALID_ARGUMENT``, ...), ``UNAVAILABLE`` when no node could serve the
    call within the retry budget, or ``CONFIG`` for a client-side
    configuration problem.
    """

    def __init__(
        self,
        code: str,
        message: str,
        status: grpc.StatusCode = grpc.StatusCode.UNKNOWN,
        detail: error_pb2.ErrorDetail | None = None,
    ) -> None:
        super().__init__(f"{code}: {message}")
        #: Stable domain code.
        self.code = code
        #: What went wrong, for people.
        self.message = message
        #: The gRPC status code the error arrived with.
        self.status = status
        #: The server's whole ErrorDetail, when it sent one.
        self.detail = detail
        #: Every validation problem, when there were several.
        self.problems: list[str] = list(detail.problems) if detail is not None else []

    @property
    def retryable(self) -> bool:
        """Whether retrying the same call (same request id) may succeed."""
        return self.code == "UNAVAILABLE" and self.status == grpc.StatusCode.UNAVAILABLE

    @property
    def access_refused(self) -> bool:
        """Whether the cluster refused who the caller is or what it may do."""
        return self.status in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)

    @property
    def approval_status(self) -> int | None:
        """For a refused decide, cancel, consume or resume: the approval's status then (approval_pb2.ApprovalStatus)."""
        if self.detail is None or not self.detail.HasField("approval_status"):
            return None
        status = self.detail.approval_status
        return status if status != approval_pb2.APPROVAL_STATUS_UNSPECIFIED else None

    @property
    def consumed_by_execution_id(self) -> str | None:
        """The execution that consumed the approval, when the refusal says it was consumed."""
        if self.approval_status is None or not self.detail or not self.detail.HasField("consumed_by_execution_id"):
            return None
        return self.detail.consumed_by_execution_id


def _fallback_code(error: grpc.RpcError) -> str:
    for key, value in _trailers(error):
        if key == "gavel-error-code" and isinstance(value, str) and value:
            return str(value)
    return str(_code(error).name)


def from_attempt(error: grpc.RpcError, endpoint: str) -> GavelError:
    """The GavelError of one failed attempt on ``endpoint``."""
    tls = tls_failure(error)
    if tls is not None:
        return GavelError("UNAUTHENTICATED", f"TLS with {endpoint} failed: {tls}", grpc.StatusCode.UNAUTHENTICATED)
    detail = read_error_detail(error)
    if detail is not None:
        return GavelError(detail.code, detail.message or _details(error), _code(error), detail)
    return GavelError(_fallback_code(error), _details(error), _code(error))


def retryable_attempt(error: grpc.RpcError) -> bool:
    """Whether a failed attempt may be retried with the same request id.

    The Rust SDK's rule (crates/gavel-client/src/client.rs, backoff.rs): the
    cluster said UNAVAILABLE, or shed load (RESOURCE_EXHAUSTED with a
    retry_after_ms), or the transport broke before a Gavel answer (an HTTP/2
    reset; UNKNOWN, CANCELLED, DEADLINE_EXCEEDED or INTERNAL without a Gavel
    detail). A failed TLS handshake is not retried.
    """
    if tls_failure(error) is not None:
        return False
    code = _code(error)
    detail = read_error_detail(error)
    if code == grpc.StatusCode.UNAVAILABLE:
        return True
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        overload = detail is not None and detail.HasField("retry_after_ms")
        reset = detail is None and _details(error).startswith("h2 protocol error:")
        return overload or reset
    if code in (
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.INTERNAL,
    ):
        return detail is None
    return False
