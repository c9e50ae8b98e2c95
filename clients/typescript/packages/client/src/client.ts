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
// - a request's JSON (ijson.ts) and its actor's id (actors.ts) are refused
//   before sending when the cluster would refuse them.
import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import { type DescMethod, type DescService, create } from "@bufbuild/protobuf";
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
import { type DecideOptions, type VoteOptions, decide, vote } from "./decide.js";
import type { Approval } from "./gen/gavel/v1/approval_pb.js";

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
  readonly approvals: Client<typeof ApprovalService>;
  readonly capabilities: Client<typeof CapabilityService>;
  readonly executions: Client<typeof ExecutionService>;
  readonly workers: Client<typeof WorkerService>;
  readonly audit: Client<typeof AuditService>;
  readonly cluster: Client<typeof ClusterService>;
  readonly access: Client<typeof AccessService>;
  /** Approval policies and votes (docs/policies.md). */
  readonly policies: Client<typeof PolicyService>;
  /**
   * Approves or rejects an approval, naming the terms hash it was decided on
   * (`decision.termsHash`, the hash the person was shown; absent, the
   * approval is read first and the hash of what was read is sent). A hash
   * that is not the approval's is refused with APPROVAL_TERMS_CHANGED.
   */
  decide(id: string, decision: DecideOptions, callOptions?: CallOptions): Promise<Approval>;
  /**
   * Casts one vote on an approval a policy governs, naming the terms hash
   * and input hash it was cast on (read first when not given).
   */
  vote(id: string, vote: VoteOptions, callOptions?: CallOptions): Promise<Approval>;
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
  const state = { preferred: 0, attempts: 0 };
  return buildClient(options, endpoints, nodes, state);
}

function buildClient(
  options: ClientOptions,
  endpoints: string[],
  nodes: Node[],
  state: { preferred: number; attempts: number },
): GavelClient {
  const callTimeoutMs = options.callTimeoutMs ?? 5000;
  const retryBudgetMs = options.retryBudgetMs ?? 20_000;
  const followLeader = options.followLeader ?? true;
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
    for (;;) {
      const index = state.preferred % nodes.length;
      const node = nodes[index]!;
      const call = methodOf<Promise<unknown>>(node, service, method);
      state.attempts += 1;
      let leader: string | null = null;
      let failure: string;
      try {
        const response = await call(message, {
          ...callOptions,
          timeoutMs: deadlineMs,
          headers: headersFor(callOptions?.headers),
          onHeader: (headers) => {
            leader = headers.get(LEADER_HEADER);
            callOptions?.onHeader?.(headers);
          },
        });
        if (followLeader && leader !== null) {
          const position = endpoints.indexOf(leader);
          if (position >= 0) {
            state.preferred = position;
          }
        }
        return response;
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

  /** A server stream from the preferred node (WatchEvents); the caller resumes by cursor. */
  const callStream = (
    service: DescService,
    method: DescMethod,
    request: unknown,
    callOptions: CallOptions | undefined,
  ): AsyncIterable<unknown> => {
    const index = state.preferred % nodes.length;
    const node = nodes[index]!;
    const call = methodOf<AsyncIterable<unknown>>(node, service, method);
    state.attempts += 1;
    const stream = call(request, {
      ...callOptions,
      headers: headersFor(callOptions?.headers),
    });
    return {
      async *[Symbol.asyncIterator]() {
        try {
          yield* stream;
        } catch (error) {
          throw fromAttempt(error, node.endpoint);
        }
      },
    };
  };

  const wrap = <S extends DescService>(service: S): Client<S> => {
    const wrapped: Record<string, unknown> = {};
    for (const method of service.methods) {
      wrapped[method.localName] =
        method.methodKind === "server_streaming"
          ? (request: unknown, callOptions?: CallOptions) => callStream(service, method, request, callOptions)
          : (request: unknown, callOptions?: CallOptions) => callUnary(service, method, request, callOptions);
    }
    return wrapped as Client<S>;
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
      answers.filter((answer): answer is StatusResponse => answer !== undefined),
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
