// One unary gRPC call, written straight onto an HTTP/2 stream of Connect's
// session manager (decision 0105). Connect's generic call path builds, for
// every unary call, an async-iterable pipeline for a one-message body, a
// serialization lookup, linked abort controllers, web `Headers` objects for
// the request, the response and the trailers, and a ConnectError and a
// DOMException to close it all; a profile of the client put most of its CPU
// per call there. A unary call needs none of it: one framed message out,
// one in, the status in the trailers. Sessions (connecting, keepalive
// pings, reconnecting after GOAWAY) stay Connect's, and so do the status
// and error-detail parsing (`findTrailerError`) and server streams.
import type { ClientHttp2Stream, IncomingHttpHeaders, OutgoingHttpHeaders } from "node:http2";
import { constants } from "node:http2";
import { type DescMessage, fromBinary } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { codeFromHttpStatus, findTrailerError } from "@connectrpc/connect/protocol-grpc";
import type { Http2SessionManager } from "@connectrpc/connect-node";

/** The answer of one unary call: the decoded message and the raw response headers and trailers. */
export interface UnaryAnswer {
  message: unknown;
  header: IncomingHttpHeaders;
  trailer: IncomingHttpHeaders;
}

/** What one unary call sends. */
export interface UnaryRequest {
  /** `/package.Service/Method`. */
  path: string;
  /** The response message type. */
  output: DescMessage;
  /** The serialized request message. */
  body: Uint8Array;
  /** Request headers besides the gRPC ones (authorization, the caller's own). */
  headers: OutgoingHttpHeaders;
  /** The call's deadline, sent as `grpc-timeout` and enforced here. */
  timeoutMs: number;
  /** Aborts the call (Code.Canceled). */
  signal?: AbortSignal | undefined;
}

/** HTTP/2 reset codes as gRPC codes (gRPC's PROTOCOL-HTTP2.md, as Connect maps them). */
function codeOfReset(rstCode: number): Code {
  switch (rstCode) {
    case constants.NGHTTP2_REFUSED_STREAM:
      return Code.Unavailable;
    case constants.NGHTTP2_CANCEL:
      return Code.Canceled;
    case constants.NGHTTP2_ENHANCE_YOUR_CALM:
      return Code.ResourceExhausted;
    case constants.NGHTTP2_INADEQUATE_SECURITY:
      return Code.PermissionDenied;
    default:
      return Code.Internal;
  }
}

/** A transport failure as a ConnectError that keeps the cause (errors.ts looks for TLS failures in it). */
function transportError(reason: unknown): ConnectError {
  if (reason instanceof ConnectError) {
    return reason;
  }
  const code = (reason as { code?: unknown } | null)?.code === "ECONNRESET" ? Code.Aborted : Code.Unavailable;
  return new ConnectError(reason instanceof Error ? reason.message : String(reason), code, undefined, undefined, reason);
}

/** Node's header objects as web Headers (off the fast path: errors, and callers' `onHeader`). */
export function webHeaders(...sources: IncomingHttpHeaders[]): Headers {
  const headers = new Headers();
  for (const source of sources) {
    for (const [key, value] of Object.entries(source)) {
      if (key.startsWith(":") || value === undefined) {
        continue;
      }
      for (const item of Array.isArray(value) ? value : [value]) {
        headers.append(key, item);
      }
    }
  }
  return headers;
}

/** The message of a finished response, or the error it carries. */
function answerOf(
  request: UnaryRequest,
  header: IncomingHttpHeaders,
  trailer: IncomingHttpHeaders,
  chunks: Buffer[],
): UnaryAnswer | ConnectError {
  const status = Number(header[":status"] ?? 0);
  if (status !== 200) {
    return new ConnectError(`HTTP ${status}`, codeFromHttpStatus(status), webHeaders(header));
  }
  const contentType = header["content-type"] ?? "";
  if (!contentType.startsWith("application/grpc")) {
    return new ConnectError(`unsupported content type ${contentType}`, Code.Unknown);
  }
  // A trailers-only response carries its status in the headers.
  const statusAt = header["grpc-status"] !== undefined ? header : trailer;
  if (statusAt["grpc-status"] !== "0" || statusAt["grpc-status-details-bin"] !== undefined) {
    const error = findTrailerError(webHeaders(statusAt));
    if (error !== undefined) {
      if (statusAt === trailer) {
        for (const [key, value] of webHeaders(header)) {
          error.metadata.append(key, value);
        }
      }
      return error;
    }
    if (statusAt["grpc-status"] === undefined) {
      return new ConnectError("protocol error: missing status", Code.Internal);
    }
  }
  const body = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks);
  if (body.length < 5) {
    return new ConnectError("protocol error: missing output message for unary method", Code.Unimplemented);
  }
  if ((body[0]! & 0b1) !== 0) {
    return new ConnectError("protocol error: a compressed message, which was not asked for", Code.Internal);
  }
  const length = body.readUInt32BE(1);
  if (body.length !== 5 + length) {
    return new ConnectError("protocol error: the response is not exactly one message", Code.Unimplemented);
  }
  try {
    return { message: fromBinary(request.output, body.subarray(5)), header, trailer };
  } catch (error) {
    return new ConnectError(`parse binary: ${String(error)}`, Code.Internal);
  }
}

/** Sends one unary gRPC call on `session` and resolves with its answer, or rejects with a ConnectError. */
export function unaryCall(session: Http2SessionManager, request: UnaryRequest): Promise<UnaryAnswer> {
  const { signal } = request;
  if (signal?.aborted) {
    return Promise.reject(new ConnectError("operation was aborted via signal", Code.Canceled, undefined, undefined, signal.reason));
  }
  const frame = Buffer.allocUnsafe(5 + request.body.length);
  frame[0] = 0;
  frame.writeUInt32BE(request.body.length, 1);
  frame.set(request.body, 5);
  const headers: OutgoingHttpHeaders = {
    ...request.headers,
    "content-type": "application/grpc+proto",
    te: "trailers",
    "grpc-timeout": `${Math.max(1, Math.ceil(request.timeoutMs))}m`,
  };
  return new Promise<UnaryAnswer>((resolve, reject) => {
    let stream: ClientHttp2Stream | undefined;
    let settled = false;
    const settle = (outcome: UnaryAnswer | ConnectError) => {
      if (settled) {
        return;
      }
      settled = true;
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
      if (outcome instanceof ConnectError) {
        if (stream !== undefined && !stream.closed) {
          stream.close(outcome.code === Code.Internal ? constants.NGHTTP2_INTERNAL_ERROR : constants.NGHTTP2_CANCEL);
        }
        reject(outcome);
      } else {
        resolve(outcome);
      }
    };
    const timer = setTimeout(
      () => settle(new ConnectError("the operation timed out", Code.DeadlineExceeded)),
      request.timeoutMs,
    );
    const onAbort = () =>
      settle(new ConnectError("operation was aborted via signal", Code.Canceled, undefined, undefined, signal?.reason));
    signal?.addEventListener("abort", onAbort, { once: true });
    session.request("POST", request.path, headers, {}).then(
      (opened) => {
        if (settled) {
          opened.close(constants.NGHTTP2_CANCEL);
          return;
        }
        stream = opened;
        let header: IncomingHttpHeaders | undefined;
        let trailer: IncomingHttpHeaders = {};
        const chunks: Buffer[] = [];
        opened.on("response", (received) => {
          header = received;
        });
        opened.on("data", (chunk: Buffer) => {
          chunks.push(chunk);
          session.notifyResponseByteRead(opened);
        });
        opened.on("trailers", (received) => {
          trailer = received;
        });
        opened.on("error", (error) => settle(transportError(error)));
        opened.on("close", () => {
          const reset = opened.rstCode ?? constants.NGHTTP2_NO_ERROR;
          const statusSeen = header?.["grpc-status"] !== undefined || trailer["grpc-status"] !== undefined;
          if (header === undefined || (reset !== constants.NGHTTP2_NO_ERROR && !statusSeen)) {
            settle(new ConnectError(`http/2 stream closed with error code ${reset} before an answer`, codeOfReset(reset)));
            return;
          }
          settle(answerOf(request, header, trailer, chunks));
        });
        opened.end(frame);
      },
      (reason: unknown) => settle(transportError(reason)),
    );
  });
}
