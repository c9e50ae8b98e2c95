// GavelError: every failed call, with the stable domain code the server put
// in its ErrorDetail (docs/api.md, "Errors"). Branch on `code`, never on
// `message`.
import { Code, ConnectError } from "@connectrpc/connect";
import { type ErrorDetail, ErrorDetailSchema } from "./gen/gavel/v1/error_pb.js";
import { type Plain, toPlain } from "./plain.js";

/** Why a call failed. */
export class GavelError extends Error {
  /**
   * Stable domain code (`APPROVAL_CONSUMED`, `LEASE_LOST`, `INVALID_ARGUMENT`,
   * ...), `UNAVAILABLE` when no node could serve the call within the retry
   * budget, or `CONFIG` for a client-side configuration problem.
   */
  readonly code: string;
  /** The gRPC status code the error arrived with (`Code.FailedPrecondition`, ...). */
  readonly grpcCode: Code;
  /** Every validation problem, when there were several. */
  readonly problems: readonly string[];
  /** The server's whole ErrorDetail, when it sent one (64-bit integers as numbers, like every record the client returns). */
  readonly detail: Plain<ErrorDetail> | undefined;

  constructor(code: string, message: string, grpcCode: Code, detail?: Plain<ErrorDetail>, options?: { cause?: unknown }) {
    super(`${code}: ${message}`, options);
    this.name = "GavelError";
    this.code = code;
    this.grpcCode = grpcCode;
    this.problems = detail?.problems ?? [];
    this.detail = detail;
  }

  /** Whether retrying the same call (same request id) may succeed. */
  get retryable(): boolean {
    return this.code === "UNAVAILABLE" && this.grpcCode === Code.Unavailable;
  }

  /** Whether the cluster refused who the caller is or what it may do. */
  get accessRefused(): boolean {
    return this.grpcCode === Code.Unauthenticated || this.grpcCode === Code.PermissionDenied;
  }
}

/** The ErrorDetail of a ConnectError, read from the status details. */
export function readErrorDetail(error: ConnectError): ErrorDetail | undefined {
  const [detail] = error.findDetails(ErrorDetailSchema);
  return detail;
}

/** The domain code of a status without detail (from a proxy or the transport). */
function fallbackCode(error: ConnectError): string {
  const fromTrailer = error.metadata.get("gavel-error-code");
  if (fromTrailer) {
    return fromTrailer;
  }
  switch (error.code) {
    case Code.Unauthenticated:
      return "UNAUTHENTICATED";
    case Code.PermissionDenied:
      return "PERMISSION_DENIED";
    default:
      return Code[error.code].replace(/([a-z])([A-Z])/g, "$1_$2").toUpperCase();
  }
}

/** Node's TLS verification failures, which asking again never fixes. */
const TLS_FAILURES = /CERT|SELF_SIGNED|UNABLE_TO_VERIFY|UNABLE_TO_GET_ISSUER|ERR_TLS|ERR_SSL|HOSTNAME_MISMATCH/;

/** The TLS failure under a transport error, if that is what it is. */
export function tlsFailure(error: unknown): string | undefined {
  for (let cause = error, depth = 0; cause instanceof Error && depth < 8; depth += 1) {
    const code = (cause as { code?: unknown }).code;
    if (typeof code === "string" && TLS_FAILURES.test(code)) {
      return `${code}: ${cause.message}`;
    }
    cause = cause.cause;
  }
  return undefined;
}

/** The GavelError of one failed attempt on `endpoint`. */
export function fromAttempt(error: unknown, endpoint: string): GavelError {
  const tls = tlsFailure(error);
  if (tls !== undefined) {
    return new GavelError("UNAUTHENTICATED", `TLS with ${endpoint} failed: ${tls}`, Code.Unauthenticated, undefined, {
      cause: error,
    });
  }
  const connect = ConnectError.from(error);
  const detail = readErrorDetail(connect);
  if (detail !== undefined) {
    return new GavelError(detail.code, detail.message || connect.rawMessage, connect.code, toPlain(detail), { cause: error });
  }
  return new GavelError(fallbackCode(connect), connect.rawMessage, connect.code, undefined, { cause: error });
}

/**
 * Whether a failed attempt may be retried with the same request id: the
 * cluster said UNAVAILABLE, or RESOURCE_EXHAUSTED with a retry_after_ms
 * (node overload, or a principal over its write rate: QUOTA_EXCEEDED with
 * quota_kind write_rate), or the transport broke before a Gavel answer. A
 * count quota (QUOTA_EXCEEDED without retry_after_ms) and a failed TLS
 * handshake are not retried.
 */
export function retryableAttempt(error: unknown): boolean {
  if (tlsFailure(error) !== undefined) {
    return false;
  }
  const connect = ConnectError.from(error);
  switch (connect.code) {
    case Code.Unavailable:
      return true;
    case Code.ResourceExhausted:
      return readErrorDetail(connect)?.retryAfterMs !== undefined;
    case Code.Unknown:
    case Code.Aborted: // connect-node's code for a reset connection (ECONNRESET)
    case Code.Canceled:
    case Code.DeadlineExceeded:
    case Code.Internal:
      return readErrorDetail(connect) === undefined;
    default:
      return false;
  }
}
