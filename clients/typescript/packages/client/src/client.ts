// createGavelClient: typed calls to every gavel.v1 service that follow the
// leader and retry safely, the same behaviour as the Rust SDK's Client
// (crates/gavel-client/src/client.rs):
//
// - every attempt goes to the preferred endpoint, the last known leader;
// - a response header `gavel-leader: host:port` from a follower that
//   forwarded the call makes that node preferred (one hop instead of two);
// - UNAVAILABLE and transport breaks are retried with the same request id,
//   pausing at least the server's `retry_after_ms` and going to its
//   `leader_hint`, until the retry budget is spent;
// - every other failure is a GavelError carrying the stable domain code;
// - a request's JSON (ijson.ts), its actor's id (actors.ts) and a number
//   in a 64-bit field that is not a safe integer (plain.ts) are refused
//   before sending when the cluster would refuse them or it would be rounded;
// - every record comes back with its 64-bit integers as numbers (plain.ts);
// - a unary call goes straight onto an HTTP/2 stream of the node's one
//   session (unary.ts); server streams go through Connect's gRPC transport,
//   to the preferred node or, under `readFrom: "any"`, to each node in turn.
import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import type { OutgoingHttpHeaders } from "node:http2";
import { type DescMessage, type DescMethod, type DescService, create, toBinary } from "@bufbuild/protobuf";
import { type CallOptions, type Client, Code, createClient } from "@connectrpc/connect";
import { Http2SessionManager, createGrpcTransport } from "@connectrpc/connect-node";
import { AccessService } from "./gen/gavel/v1/access_pb.js";
import { ApprovalService } from "./gen/gavel/v1/approval_pb.js";
import { AuditService } from "./gen/gavel/v1/audit_pb.js";
import { CapabilityService } from "./gen/gavel/v1/capability_pb.js";
import { ClusterService, type StatusResponse } from "./gen/gavel/v1/cluster_pb.js";
import { ExecutionService } from "./gen/gavel/v1/execution_pb.js";
import { PolicyService } from "./gen/gavel/v1/policy_pb.js";
import { WorkerService } from "./gen/gavel/v1/worker_pb.js";
import { GavelError, fromAttempt, readErrorDetail, retryableAttempt } from "./errors.js";
import { ConnectError } from "@connectrpc/connect";
import { type JsonField, checkJsonText } from "./ijson.js";
import { checkActors } from "./actors.js";
import { Reachability } from "./reach.js";
import { unaryCall, webHeaders } from "./unary.js";
import { type DecideOptions, type VoteOptions, decide, vote } from "./decide.js";
import type { Approval } from "./gen/gavel/v1/approval_pb.js";
import { type GavelServiceClient, type Plain, integerProblem, toPlain } from "./plain.js";

/** The response header a follower adds when it forwarded a call. */
export const LEADER_HEADER = "gavel-leader";

/** TLS material, as PEM text or buffers. */
export interface TlsOptions {
  /** The cluster CA certificate: the nodes' certificates must chain to it. */
  ca: string | Buffer;
  /** A client certificate whose SAN URI gavel://kind/id names the principal. */
  cert?: string | Buffer;
  /** The private key of `cert`. */
  key?: string | Buffer;
}

/** How to reach a cluster, and the client's timings. */
export interface ClientOptions {
  /** Node addresses, `host:port` (or `https://host:port`); any node works. */
  endpoints: readonly string[];
  /** TLS towards the nodes. Absent: plaintext, which only an `--insecure` node answers. */
  tls?: TlsOptions;
  /** A bearer token (JWT) sent as `authorization: Bearer <token>` on every call. */
  token?: string;
  /** Deadline of one attempt of one call, in ms (long-polls add their wait). Default 5000. */
  callTimeoutMs?: number;
  /** How long a call keeps retrying UNAVAILABLE and broken connections, in ms. Default 20000. */
  retryBudgetMs?: number;
  /** Send later calls straight to the leader a follower names. Default true. */
  followLeader?: boolean;
  /**
   * Which node serves the reads a node may serve from its own replica:
   * `"leader"` (default) sends them to the preferred endpoint like every
   * call; `"any"` spreads them over all endpoints in turn. Today that is
   * `AuditService/WatchEvents`: a follower streams the same events in the
   * same order without gaps, but may lag the leader, so an event of a write
   * that was just acknowledged can arrive a little later. Every other read
   * is linearizable at the leader (a follower would only forward it), so it
   * goes to the leader either way (docs/guarantees.md).
   */
  readFrom?: "leader" | "any";
}

/**
 * Reads client options from the environment `gavel dev` prints:
 * GAVEL_ENDPOINTS, GAVEL_CA, GAVEL_CERT, GAVEL_KEY, GAVEL_TOKEN.
 */
export function optionsFromEnv(env: NodeJS.ProcessEnv = process.env): ClientOptions {
  const endpoints = (env.GAVEL_ENDPOINTS ?? "127.0.0.1:7401,127.0.0.1:7402,127.0.0.1:7403")
    .split(",")
    .map((endpoint) => endpoint.trim())
    .filter((endpoint) => endpoint.length > 0);
  const options: ClientOptions = { endpoints };
  if (env.GAVEL_CA) {
    options.tls = { ca: readFileSync(env.GAVEL_CA) };
    if (env.GAVEL_CERT && env.GAVEL_KEY && !env.GAVEL_TOKEN) {
      options.tls.cert = readFileSync(env.GAVEL_CERT);
      options.tls.key = readFileSync(env.GAVEL_KEY);
    }
  }
  if (env.GAVEL_TOKEN) {
    options.token = env.GAVEL_TOKEN;
  }
  return options;
}

/** A client for a Gavel cluster: one typed client per service. */
export interface GavelClient {
  readonly approvals: GavelServiceClient<typeof ApprovalService>;
  readonly capabilities: GavelServiceClient<typeof CapabilityService>;
  readonly executions: GavelServiceClient<typeof ExecutionService>;
  readonly workers: GavelServiceClient<typeof WorkerService>;
  readonly audit: GavelServiceClient<typeof AuditService>;
  readonly cluster: GavelServiceClient<typeof ClusterService>;
  readonly access: GavelServiceClient<typeof AccessService>;
  /** Approval policies and votes (docs/policies.md). */
  readonly policies: GavelServiceClient<typeof PolicyService>;
  /**
   * Approves or rejects an approval, naming the terms hash it was decided on
   * (`decision.termsHash`, the hash the person was shown; absent, the
   * approval is read first and the hash of what was read is sent). A hash
   * that is not the approval's is refused with APPROVAL_TERMS_CHANGED.
   */
  decide(id: string, decision: DecideOptions, callOptions?: CallOptions): Promise<Plain<Approval>>;
  /**
   * Casts one vote on an approval a policy governs, naming the terms hash
   * and input hash it was cast on (read first when not given).
   */
  vote(id: string, vote: VoteOptions, callOptions?: CallOptions): Promise<Plain<Approval>>;
  /** The configured endpoints, as `host:port`. */
  readonly endpoints: readonly string[];
  /** The endpoint calls go to first (the last known leader). */
  preferredEndpoint(): string;
  /** RPC attempts sent so far, retries included. */
  attempts(): number;
  /** Asks every endpoint for its status once and says how many voters answer. */
  reachability(): Promise<Reachability>;
  /** A client with the same endpoints and credentials but other timings. */
  withOptions(options: Partial<Omit<ClientOptions, "endpoints" | "tls" | "token">>): GavelClient;
  /** Closes every connection. */
  close(): void;
}

/** A fresh request id for one logical call; every retry of the call reuses it. */
export function newRequestId(): string {
  return `ts-${randomUUID()}`;
}

/** Deadline of one status call of the survey a failed call ends with. */
const SURVEY_TIMEOUT_MS = 1000;

/**
 * The calls every node serves from its own replica that `readFrom: "any"`
 * spreads (the server's list is `SERVED_BY_EVERY_NODE` in
 * crates/gavel-server/src/routing.rs). `ClusterService/Status` is served by
 * every node too, but it answers with that node's own view, so it stays on
 * the endpoint the caller prefers.
 */
const REPLICA_READS: ReadonlySet<string> = new Set(["gavel.v1.AuditService.WatchEvents"]);

/** Long-polls: the request field that extends the attempt's deadline. */
const LONG_POLL_FIELDS: Record<string, string> = {
  "gavel.v1.WorkerService.Poll": "waitMs",
  "gavel.v1.ExecutionService.WaitExecution": "timeoutMs",
  "gavel.v1.ApprovalService.WaitApproval": "waitMs",
  "gavel.v1.ExecutionService.ResumeAndWait": "waitMs",
  "gavel.v1.WorkerService.ReportAndPoll": "waitMs",
};

/**
 * Calls that carry another call's request as a field (resume-and-wait,
 * report-and-poll): that part's request id is filled in like a top-level one.
 */
const NESTED_REQUESTS: Record<string, string> = {
  "gavel.v1.ExecutionService.ResumeAndWait": "resume",
  "gavel.v1.WorkerService.ReportAndPoll": "report",
};

/**
 * The caller's JSON text a request carries and where it sits, for the
 * methods that carry one; it is checked before sending (ijson.ts).
 */
function requestJson(method: string, message: Record<string, unknown>): [string, JsonField] | undefined {
  const text = (value: unknown, field: JsonField): [string, JsonField] | undefined =>
    typeof value === "string" ? [value, field] : undefined;
  switch (method) {
    case "gavel.v1.ExecutionService.Submit":
    case "gavel.v1.ExecutionService.Resume":
      return text(message.inputJson, { name: "input", code: "INPUT_INVALID" });
    case "gavel.v1.ApprovalService.CreateApproval":
      return text(message.inputJson, { name: "input", code: "INVALID_ARGUMENT" });
    case "gavel.v1.AuditService.RecordEvent":
      return text(message.payloadJson, { name: "payload", code: "INVALID_ARGUMENT" });
    case "gavel.v1.ExecutionService.ResumeAndWait":
    case "gavel.v1.WorkerService.ReportAndPoll": {
      const inner = method.endsWith("ResumeAndWait") ? "gavel.v1.ExecutionService.Resume" : "gavel.v1.WorkerService.Report";
      const part = message[NESTED_REQUESTS[method]!] as Record<string, unknown> | undefined;
      return part === undefined ? undefined : requestJson(inner, part);
    }
    case "gavel.v1.WorkerService.Report": {
      const outcome = message.outcome as { case?: string; value?: { outputJson?: unknown } } | undefined;
      return outcome?.case === "completed" ? text(outcome.value?.outputJson, { name: "output", code: "INVALID_ARGUMENT" }) : undefined;
    }
    default:
      return undefined;
  }
}

/** `host:port` of an endpoint, checked; a typo fails at once. */
function normalizeEndpoint(endpoint: string, tls: boolean): string {
  let bare = endpoint;
  const scheme = endpoint.match(/^([a-z]+):\/\//);
  if (scheme) {
    if (scheme[1] !== "http" && scheme[1] !== "https") {
      throw new GavelError("CONFIG", `endpoint ${JSON.stringify(endpoint)} is not host:port`, Code.InvalidArgument);
    }
    if ((scheme[1] === "https") !== tls) {
      throw new GavelError(
        "CONFIG",
        tls
          ? `endpoint ${JSON.stringify(endpoint)} is plaintext but TLS is configured; write it as host:port or https://`
          : `endpoint ${JSON.stringify(endpoint)} needs TLS: give the cluster CA`,
        Code.InvalidArgument,
      );
    }
    bare = endpoint.slice(scheme[0].length);
  }
  bare = bare.replace(/\/$/, "");
  const colon = bare.lastIndexOf(":");
  const host = bare.slice(0, colon);
  const port = Number(bare.slice(colon + 1));
  if (colon <= 0 || host.includes("/") || !Number.isInteger(port) || port <= 0 || port > 65535) {
    throw new GavelError(
      "CONFIG",
      `endpoint ${JSON.stringify(endpoint)} is not host:port (as in 127.0.0.1:7401)`,
      Code.InvalidArgument,
    );
  }
  return bare;
}

interface Node {
  endpoint: string;
  session: Http2SessionManager;
  services: Map<string, Client<DescService>>;
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Refuses, before sending, a number in a 64-bit field that is not a safe integer (plain.ts). */
function refuseUnsafeIntegers(input: DescMessage, message: Record<string, unknown>): void {
  const problem = integerProblem(input, message);
  if (problem !== undefined) {
    throw new GavelError("INVALID_ARGUMENT", problem, Code.InvalidArgument);
  }
}

/** Creates a client for a cluster. No connection is opened until the first call. */
export function createGavelClient(options: ClientOptions): GavelClient {
  if (options.endpoints.length === 0) {
    throw new GavelError("CONFIG", "at least one endpoint is required", Code.InvalidArgument);
  }
  if (options.token !== undefined && /[\r\n]/.test(options.token)) {
    throw new GavelError("CONFIG", "the token is not a valid header value", Code.InvalidArgument);
  }
  const tls = options.tls !== undefined;
  const endpoints = options.endpoints.map((endpoint) => normalizeEndpoint(endpoint, tls));
  const nodes: Node[] = endpoints.map((endpoint) => {
    const url = `${tls ? "https" : "http"}://${endpoint}`;
    const tlsOptions = options.tls
      ? { ca: options.tls.ca, cert: options.tls.cert, key: options.tls.key, ALPNProtocols: ["h2"] }
      : {};
    const session = new Http2SessionManager(url, { pingIntervalMs: 10_000, pingIdleConnection: true }, tlsOptions);
    return { endpoint, session, services: new Map() };
  });
  const state = { preferred: 0, attempts: 0, nextReplicaRead: 0 };
  return buildClient(options, endpoints, nodes, state);
}

function buildClient(
  options: ClientOptions,
  endpoints: string[],
  nodes: Node[],
  state: { preferred: number; attempts: number; nextReplicaRead: number },
): GavelClient {
  const callTimeoutMs = options.callTimeoutMs ?? 5000;
  const retryBudgetMs = options.retryBudgetMs ?? 20_000;
  const followLeader = options.followLeader ?? true;
  const readFrom = options.readFrom ?? "leader";
  if (readFrom !== "leader" && readFrom !== "any") {
    throw new GavelError("CONFIG", `readFrom is "leader" or "any", not ${JSON.stringify(readFrom)}`, Code.InvalidArgument);
  }
  const authorization = options.token !== undefined ? `Bearer ${options.token}` : undefined;

  const serviceOf = <S extends DescService>(node: Node, service: S): Client<S> => {
    let client = node.services.get(service.typeName);
    if (client === undefined) {
      const transport = createGrpcTransport({
        baseUrl: `${options.tls ? "https" : "http"}://${node.endpoint}`,
        sessionManager: node.session,
      });
      client = createClient(service, transport) as Client<DescService>;
      node.services.set(service.typeName, client);
    }
    return client as unknown as Client<S>;
  };

  /** The generated client's function for `method` on `node`. */
  const methodOf = <R>(node: Node, service: DescService, method: DescMethod) => {
    const client = serviceOf(node, service) as unknown as Record<string, (request: unknown, options: CallOptions) => R>;
    return client[method.localName]!;
  };

  /** The request headers of a unary call (unary.ts): the caller's own and the token. */
  const requestHeaders = (given: CallOptions["headers"]): OutgoingHttpHeaders => {
    const headers: OutgoingHttpHeaders = {};
    if (given !== undefined) {
      for (const [key, value] of new Headers(given)) {
        headers[key] = value;
      }
    }
    if (authorization !== undefined) {
      headers.authorization = authorization;
    }
    return headers;
  };

  const headersFor = (given: CallOptions["headers"]): Headers => {
    const headers = new Headers(given);
    if (authorization !== undefined) {
      headers.set("authorization", authorization);
    }
    return headers;
  };

  const gaveUp = async (failure: string): Promise<GavelError> => {
    const reach = await reachability();
    return new GavelError(
      "UNAVAILABLE",
      `cluster unreachable: ${reach.describe()}; last error: ${failure}; endpoints tried: ${endpoints.join(", ")}`,
      Code.Unavailable,
    );
  };

  /** One logical unary call with leader following and retries. */
  const callUnary = async (
    service: DescService,
    method: DescMethod,
    request: unknown,
    callOptions: CallOptions | undefined,
  ): Promise<unknown> => {
    const message = create(method.input, request as never) as Record<string, unknown>;
    const json = requestJson(`${service.typeName}.${method.name}`, message);
    if (json !== undefined) {
      checkJsonText(...json);
    }
    checkActors(method.input, message);
    refuseUnsafeIntegers(method.input, message);
    if ("requestId" in message && message.requestId === "") {
      message.requestId = newRequestId();
    }
    const nested = NESTED_REQUESTS[`${service.typeName}.${method.name}`];
    const part = nested === undefined ? undefined : (message[nested] as Record<string, unknown> | undefined);
    if (part !== undefined && part.requestId === "") {
      part.requestId = newRequestId();
    }
    const longPollField = LONG_POLL_FIELDS[`${service.typeName}.${method.name}`];
    const extraMs = longPollField !== undefined ? Number(message[longPollField] ?? 0) : 0;
    const deadlineMs = (callOptions?.timeoutMs ?? callTimeoutMs) + extraMs;
    const started = Date.now();
    let pauseMs = 50;
    const call = {
      path: `/${service.typeName}/${method.name}`,
      output: method.output,
      body: toBinary(method.input, message as never),
      headers: requestHeaders(callOptions?.headers),
      timeoutMs: deadlineMs,
      signal: callOptions?.signal,
    };
    for (;;) {
      const index = state.preferred % nodes.length;
      const node = nodes[index]!;
      state.attempts += 1;
      let failure: string;
      try {
        const answer = await unaryCall(node.session, call);
        callOptions?.onHeader?.(webHeaders(answer.header));
        callOptions?.onTrailer?.(webHeaders(answer.trailer));
        const leader = answer.header[LEADER_HEADER];
        if (followLeader && typeof leader === "string") {
          const position = endpoints.indexOf(leader);
          if (position >= 0) {
            state.preferred = position;
          }
        }
        return toPlain(answer.message);
      } catch (error) {
        if (callOptions?.signal?.aborted || !retryableAttempt(error)) {
          throw fromAttempt(error, node.endpoint);
        }
        const connect = ConnectError.from(error);
        const detail = readErrorDetail(connect);
        const hinted = detail?.leaderHint !== undefined ? endpoints.indexOf(detail.leaderHint) : -1;
        const next = hinted >= 0 ? hinted : (index + 1) % nodes.length;
        if (state.preferred % nodes.length === index) {
          state.preferred = next;
        }
        if (detail?.retryAfterMs !== undefined) {
          pauseMs = Math.max(pauseMs, Number(detail.retryAfterMs));
        }
        failure = `${node.endpoint}: ${connect.rawMessage}`;
      }
      if (Date.now() - started + pauseMs > retryBudgetMs) {
        throw await gaveUp(failure);
      }
      await sleep(pauseMs);
      pauseMs = Math.min(pauseMs * 2, 1000);
    }
  };

  /**
   * A server stream (WatchEvents) from the preferred node, or from the next
   * node in turn under `readFrom: "any"`; the caller resumes by cursor.
   */
  const callStream = (
    service: DescService,
    method: DescMethod,
    request: unknown,
    callOptions: CallOptions | undefined,
  ): AsyncIterable<unknown> => {
    const message = create(method.input, request as never) as Record<string, unknown>;
    refuseUnsafeIntegers(method.input, message);
    const spread = readFrom === "any" && REPLICA_READS.has(`${service.typeName}.${method.name}`);
    const index = spread ? state.nextReplicaRead++ % nodes.length : state.preferred % nodes.length;
    const node = nodes[index]!;
    const call = methodOf<AsyncIterable<unknown>>(node, service, method);
    state.attempts += 1;
    // Connect leaves the HTTP/2 stream open when the caller stops reading
    // early (a `break` out of `for await`), and the node keeps streaming
    // into it; aborting this controller then closes it.
    const stop = new AbortController();
    const given = callOptions?.signal;
    const forward = () => stop.abort(given?.reason);
    if (given?.aborted) {
      forward();
    }
    given?.addEventListener("abort", forward, { once: true });
    const stream = call(message, {
      ...callOptions,
      signal: stop.signal,
      headers: headersFor(callOptions?.headers),
    });
    return {
      async *[Symbol.asyncIterator]() {
        try {
          for await (const item of stream) {
            yield toPlain(item);
          }
        } catch (error) {
          throw fromAttempt(error, node.endpoint);
        } finally {
          given?.removeEventListener("abort", forward);
          stop.abort();
        }
      },
    };
  };

  const wrap = <S extends DescService>(service: S): GavelServiceClient<S> => {
    const wrapped: Record<string, unknown> = {};
    for (const method of service.methods) {
      wrapped[method.localName] =
        method.methodKind === "server_streaming"
          ? (request: unknown, callOptions?: CallOptions) => callStream(service, method, request, callOptions)
          : (request: unknown, callOptions?: CallOptions) => callUnary(service, method, request, callOptions);
    }
    return wrapped as GavelServiceClient<S>;
  };

  const cluster = wrap(ClusterService);

  const reachability = async (): Promise<Reachability> => {
    const answers = await Promise.all(
      nodes.map(async (node) => {
        try {
          const client = serviceOf(node, ClusterService);
          return await client.status(
            { withoutStateHash: true },
            { timeoutMs: SURVEY_TIMEOUT_MS, headers: headersFor(undefined) },
          );
        } catch {
          return undefined;
        }
      }),
    );
    return Reachability.of(
      answers.filter((answer): answer is StatusResponse => answer !== undefined).map((answer) => toPlain(answer)),
      nodes.length,
    );
  };

  const client: GavelClient = {
    approvals: wrap(ApprovalService),
    capabilities: wrap(CapabilityService),
    executions: wrap(ExecutionService),
    workers: wrap(WorkerService),
    audit: wrap(AuditService),
    cluster,
    access: wrap(AccessService),
    policies: wrap(PolicyService),
    decide: (id, decision, callOptions) => decide(client, id, decision, callOptions),
    vote: (id, cast, callOptions) => vote(client, id, cast, callOptions),
    endpoints,
    preferredEndpoint: () => endpoints[state.preferred % endpoints.length]!,
    attempts: () => state.attempts,
    reachability,
    withOptions: (changes) => buildClient({ ...options, ...changes }, endpoints, nodes, { ...state, attempts: 0 }),
    close: () => {
      for (const node of nodes) {
        (node.session as unknown as { abort(reason?: unknown): void }).abort();
      }
    },
  };
  return client;
}
