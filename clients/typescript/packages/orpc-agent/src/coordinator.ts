// createGavelApprovalCoordinator: orpc-agent's ApprovalCoordinator on a Gavel
// cluster, so "approval executes at most once" holds across every process of
// the fleet, not only within one coordinator.
//
// - With an injected clock (`now`), every call carries it as caller_now_ms
//   (and `create` the request's own requestedAt/expiresAt; both need the
//   `clock` grant), so expiry is computed lazily on that clock, in `list`
//   too. Without one nothing claims a time: the cluster stamps requestedAt
//   and the approval lasts expiresAt - requestedAt (expiresInMs), so the
//   app's principal needs no `clock` grant.
// - The requester (`act-for`) and the approver (`delegate-decide`) are the
//   actors orpc-agent passes, not the app's service principal.
// - `decide` names the terms hash the decision was made on (SPEC section 13):
//   the one the caller passes (`termsHash`, what the person was shown, from
//   `terms(id)`), else the approval's, read just before; the cluster refuses
//   terms that are not the approval's (APPROVAL_TERMS_CHANGED).
// - Input is validated here before anything is sent, and errors are plain
//   Errors with orpc-agent's wording; the underlying GavelError is `cause`.
import {
  type Actor as PbActor,
  ActorKind as PbActorKind,
  actorText,
  type Approval,
  ApprovalStatus as PbStatus,
  type Plain,
  Code,
  type GavelClient,
  GavelError,
  stringifyIJson,
} from "@gavel/client";
import { ACTOR_KINDS, RISKS, SIDE_EFFECTS } from "./mapping.js";
import type {
  Actor,
  ApprovalCoordinator,
  ApprovalDecision,
  ApprovalListFilter,
  ApprovalRecord,
  ApprovalRequest,
  ApprovalStatus,
  Surface,
} from "./types.js";

/** Options of createGavelApprovalCoordinator. */
export interface GavelApprovalCoordinatorOptions {
  /** A client connected as the app's service principal. */
  client: GavelClient;
  /**
   * The clock orpc-agent injects. When given, every call sends it as
   * `callerNowMs` (the principal needs the `clock` grant); without it the
   * cluster's clock decides expiry and no time is sent.
   */
  now?: () => Date | number;
  /**
   * Let the requester approve its own request: the runtime's
   * `rejectSelfApproval: false`. Gavel enforces self-approval at decide, so
   * this maps onto each created approval's allow_self_approval (it needs the
   * `self-approval` grant). Default false.
   */
  allowSelfApproval?: boolean;
  /** Page size of `list`. Default 500. */
  pageSize?: number;
  /** Upper bound on the records `list` returns, so a listing is bounded. Default 100000. */
  maxListed?: number;
}

/**
 * An orpc-agent decision with the terms hash the person deciding was shown
 * (`GavelApprovalCoordinator.terms(id).termsHash`). With it, `decide` sends
 * it as is; without it, `decide` reads the approval first and sends the
 * hash of what it read. Either way a decision on terms that are not the
 * approval's (another approval's page, or terms that changed since) is
 * refused by the cluster (APPROVAL_TERMS_CHANGED).
 */
export type GavelApprovalDecision = ApprovalDecision & { termsHash?: string };

/**
 * The terms of a decision (SPEC section 13), as the cluster computed them:
 * everything a person must see to decide the approval. Show them, and pass
 * `termsHash` with the person's decision.
 */
export interface ApprovalTerms {
  /** SHA-256 (lower-case hex) of `termsJson`. */
  termsHash: string;
  /** The RFC 8785 canonical JSON of the terms. */
  termsJson: string;
  /** `termsJson` parsed. */
  terms: Record<string, unknown>;
}

/**
 * A GavelApprovalCoordinator is an orpc-agent ApprovalCoordinator whose
 * `list` is always there, whose `decide` takes the terms hash the person
 * was shown, and which reads an approval's terms.
 */
export type GavelApprovalCoordinator = ApprovalCoordinator &
  Required<Pick<ApprovalCoordinator, "list">> & {
    decide(id: string, decision: GavelApprovalDecision): Promise<ApprovalRecord>;
    /** The terms of approval `id` as the cluster computed them, or null when there is none. */
    terms(id: string): Promise<ApprovalTerms | null>;
  };

const STATUSES: Record<ApprovalStatus, PbStatus> = {
  pending: PbStatus.PENDING,
  approved: PbStatus.APPROVED,
  rejected: PbStatus.REJECTED,
  expired: PbStatus.EXPIRED,
  cancelled: PbStatus.CANCELLED,
  consumed: PbStatus.CONSUMED,
};

function invert<K extends string, V extends number>(map: Record<K, V>): Map<V, K> {
  return new Map(Object.entries(map).map(([key, value]) => [value as V, key as K]));
}
const ACTOR_KIND_NAMES = invert(ACTOR_KINDS);
const RISK_NAMES = invert(RISKS);
const SIDE_EFFECT_NAMES = invert(SIDE_EFFECTS);
const STATUS_NAMES = invert(STATUSES);
// orpc-agent has no "voided": an approval a policy change voided can be
// neither decided nor consumed any more, which is what "cancelled" means to
// it (docs/decisions.md); `quorum` on the record says which policy it was.
STATUS_NAMES.set(PbStatus.VOIDED, "cancelled");

/**
 * The quorum progress of an approval a Gavel policy governs
 * (docs/policies.md): the policy, the version the approval was created
 * under, each factor's progress, and the votes. A `decide` on such an
 * approval casts one vote.
 */
export interface QuorumProgress {
  policy: string;
  policyVersion: number;
  /** Each factor: how many distinct principals it needs and how many count now. */
  factors: { name: string; k: number; counted: number }[];
  denyThreshold: number;
  denials: number;
  votes: { principal: string; approve: boolean; factor?: string; selfApproval: boolean; castAt: Date }[];
  /** True when the approval was voided by a change of its policy (its status then reads "cancelled"). */
  voided: boolean;
}

/** An orpc-agent record with Gavel's quorum progress when a policy governs the approval. */
export type GavelApprovalRecord = ApprovalRecord & { quorum?: QuorumProgress };

/** Whether `value` is a well-formed actor: a non-empty id and a known kind. */
export function isWellFormedActor(value: unknown): value is Actor {
  if (value === null || typeof value !== "object") {
    return false;
  }
  const actor = value as Record<string, unknown>;
  return (
    typeof actor.id === "string" &&
    actor.id.length > 0 &&
    typeof actor.kind === "string" &&
    Object.hasOwn(ACTOR_KINDS, actor.kind) &&
    (actor.displayName === undefined || typeof actor.displayName === "string") &&
    (actor.attributes === undefined || (actor.attributes !== null && typeof actor.attributes === "object"))
  );
}

/**
 * Problems with an actor's attributes: Gavel stores them as a string map, so
 * every value must be a string (orpc-agent allows any value; a non-string is
 * refused here, before anything is sent, rather than silently changed).
 */
export function attributeProblems(actor: Actor, name: string): string[] {
  if (actor.attributes === undefined) {
    return [];
  }
  return Object.entries(actor.attributes)
    .filter(([, value]) => typeof value !== "string")
    .map(([key]) => `${name}.attributes.${key} must be a string (Gavel stores actor attributes as strings)`);
}

/** The proto actor of an orpc-agent actor. */
export function toPbActor(actor: Actor): PbActor {
  const attributes: Record<string, string> = {};
  for (const [key, value] of Object.entries(actor.attributes ?? {})) {
    attributes[key] = typeof value === "string" ? value : JSON.stringify(value);
  }
  return {
    $typeName: "gavel.v1.Actor",
    id: actor.id,
    kind: ACTOR_KINDS[actor.kind] ?? PbActorKind.UNSPECIFIED,
    displayName: actor.displayName,
    attributes,
  };
}

/** The orpc-agent actor of a proto actor (attributes only when there are some). */
export function fromPbActor(actor: PbActor | undefined): Actor {
  const out: Actor = { id: actor?.id ?? "", kind: ACTOR_KIND_NAMES.get(actor?.kind ?? 0) ?? "anonymous" };
  if (actor?.displayName !== undefined) {
    out.displayName = actor.displayName;
  }
  if (actor !== undefined && Object.keys(actor.attributes).length > 0) {
    out.attributes = { ...actor.attributes };
  }
  return out;
}

/** The orpc-agent record of a Gavel approval (as the client returns it, or a protobuf-es message). */
export function toRecord(approval: Plain<Approval> | Approval): GavelApprovalRecord {
  const record: GavelApprovalRecord = {
    id: approval.id,
    capabilityId: approval.capabilityId,
    surface: approval.surface as Surface,
    actor: fromPbActor(approval.actor),
    input: JSON.parse(approval.inputJson) as unknown,
    inputHash: approval.inputHash,
    reasons: [...approval.reasons],
    types: [...approval.types],
    risk: RISK_NAMES.get(approval.risk) ?? "low",
    sideEffect: SIDE_EFFECT_NAMES.get(approval.sideEffect) ?? "none",
    requestedAt: new Date(Number(approval.requestedAtMs)),
    expiresAt: new Date(Number(approval.expiresAtMs)),
    status: STATUS_NAMES.get(approval.status) ?? "pending",
  };
  if (approval.decision !== undefined) {
    const decision = approval.decision;
    record.decision = {
      status: decision.status === PbStatus.APPROVED ? "approved" : "rejected",
      approver: fromPbActor(decision.approver),
      decidedAt: new Date(Number(decision.decidedAtMs)),
    };
    if (decision.comment !== undefined) {
      record.decision.comment = decision.comment;
    }
  }
  if (approval.consumedByExecutionId !== undefined) {
    record.consumedByExecutionId = approval.consumedByExecutionId;
  }
  if (approval.quorum !== undefined) {
    const quorum = approval.quorum;
    record.quorum = {
      policy: quorum.policy,
      policyVersion: Number(quorum.policyVersion),
      factors: quorum.factors.map((factor) => ({ name: factor.name, k: factor.k, counted: factor.counted })),
      denyThreshold: quorum.denyThreshold,
      denials: quorum.denials,
      votes: quorum.votes.map((vote) => ({
        principal: vote.principal,
        approve: vote.approve,
        ...(vote.factor === undefined ? {} : { factor: vote.factor }),
        selfApproval: vote.selfApproval,
        castAt: new Date(Number(vote.castAtMs)),
      })),
      voided: approval.status === PbStatus.VOIDED,
    };
  }
  return record;
}

/** A plain Error with orpc-agent's wording, keeping Gavel's error as its cause. */
function refusal(message: string, cause?: unknown): Error {
  return cause === undefined ? new Error(message) : new Error(message, { cause });
}

/**
 * The current status (and consumer) of a refused decide or consume. It is
 * read from the error itself, never by a second (racy) read: the structured
 * error detail when the server sends it, otherwise the server's message
 * `... (status: <s>[, consumed by <exe>])`.
 */
function refusedState(error: GavelError): { status: string; consumedBy?: string } | undefined {
  const detail = error.detail;
  if (detail?.approvalStatus !== undefined && detail.approvalStatus !== PbStatus.UNSPECIFIED) {
    const status = STATUS_NAMES.get(detail.approvalStatus);
    if (status !== undefined) {
      return detail.consumedByExecutionId !== undefined
        ? { status, consumedBy: detail.consumedByExecutionId }
        : { status };
    }
  }
  const match = (detail?.message ?? error.message).match(/\(status: ([a-z]+)(?:, consumed by (.+))?\)\s*$/);
  if (match?.[1] === undefined) {
    return undefined;
  }
  return match[2] !== undefined ? { status: match[1], consumedBy: match[2] } : { status: match[1] };
}

/**
 * A refused act (decide, consume) on approval `id`: NOT_FOUND throws
 * orpc-agent's "was not found"; a refusal by the record's state returns that
 * state; anything else returns undefined.
 */
function refusalOfAct(error: unknown, id: string): { status: string; consumedBy?: string } | undefined {
  if (!(error instanceof GavelError)) {
    return undefined;
  }
  if (error.code === "NOT_FOUND") {
    throw refusal(`Approval "${id}" was not found`, error);
  }
  if (error.grpcCode !== Code.FailedPrecondition) {
    return undefined;
  }
  return refusedState(error) ?? { status: "unknown" };
}

function asDate(value: unknown): Date | undefined {
  return value instanceof Date && !Number.isNaN(value.getTime()) ? value : undefined;
}

/** Every problem of an approval request, before anything is sent. */
function requestProblems(request: ApprovalRequest): string[] {
  const problems: string[] = [];
  if (typeof request.id !== "string" || request.id.length === 0) problems.push("id must be a non-empty string");
  if (typeof request.capabilityId !== "string" || request.capabilityId.length === 0)
    problems.push("capabilityId must be a non-empty string");
  if (typeof request.surface !== "string") problems.push("surface must be a string");
  if (!isWellFormedActor(request.actor)) problems.push("actor must be a well-formed actor");
  else problems.push(...attributeProblems(request.actor, "actor"));
  if (typeof request.inputHash !== "string" || !/^[0-9a-f]{64}$/.test(request.inputHash))
    problems.push("inputHash must be 64 lower-case hex digits");
  if (!Array.isArray(request.reasons) || !request.reasons.every((reason) => typeof reason === "string"))
    problems.push("reasons must be strings");
  if (!Array.isArray(request.types) || !request.types.every((type) => typeof type === "string"))
    problems.push("types must be strings");
  if (!Object.hasOwn(RISKS, request.risk)) problems.push(`risk "${String(request.risk)}" is not one of ${Object.keys(RISKS).join(", ")}`);
  if (!Object.hasOwn(SIDE_EFFECTS, request.sideEffect))
    problems.push(`sideEffect "${String(request.sideEffect)}" is not one of ${Object.keys(SIDE_EFFECTS).join(", ")}`);
  if (asDate(request.requestedAt) === undefined) problems.push("requestedAt must be a valid Date");
  if (asDate(request.expiresAt) === undefined) problems.push("expiresAt must be a valid Date");
  return problems;
}

/** Creates an orpc-agent ApprovalCoordinator backed by a Gavel cluster. */
export function createGavelApprovalCoordinator(options: GavelApprovalCoordinatorOptions): GavelApprovalCoordinator {
  const { client } = options;
  const clock = options.now;
  /** The injected clock's reading, or undefined without one (the cluster's clock counts). */
  const nowMs = (): number | undefined => {
    if (clock === undefined) {
      return undefined;
    }
    const now = clock();
    return Math.trunc(typeof now === "number" ? now : now.getTime());
  };
  const allowSelfApproval = options.allowSelfApproval ?? false;
  const pageSize = options.pageSize ?? 500;
  const maxListed = options.maxListed ?? 100_000;
  /** Approval `id`, or undefined when the cluster answers NOT_FOUND (none, or not readable by this client). */
  const readApproval = async (id: string): Promise<Plain<Approval> | undefined> => {
    try {
      return (await client.approvals.getApproval({ id, callerNowMs: nowMs() })).approval;
    } catch (error) {
      if (error instanceof GavelError && error.code === "NOT_FOUND") {
        return undefined;
      }
      throw error;
    }
  };

  return {
    async create(request: ApprovalRequest): Promise<ApprovalRecord> {
      const problems = requestProblems(request);
      // Without a clock the cluster stamps requestedAt, and the request's
      // window (expiresAt - requestedAt) is sent as expiresInMs.
      const windowMs = problems.length === 0 ? request.expiresAt.getTime() - request.requestedAt.getTime() : 0;
      if (problems.length === 0 && clock === undefined && windowMs <= 0) {
        problems.push("expiresAt must be after requestedAt (without an injected clock the approval lasts expiresAt - requestedAt from the cluster's time)");
      }
      if (problems.length > 0) {
        throw refusal(`Invalid approval request "${String(request?.id)}": ${problems.join("; ")}`);
      }
      let inputJson: string | undefined;
      try {
        // JSON.stringify, refusing what Gavel refuses (an integer beyond
        // 2^53 - 1, NaN, which JSON.stringify would write as null, ...).
        inputJson = stringifyIJson(request.input, { name: "input", code: "INVALID_ARGUMENT" });
      } catch (error) {
        throw refusal(`Approval "${request.id}" input is not serializable: ${String(error)}`, error);
      }
      if (inputJson === undefined) {
        throw refusal(`Approval "${request.id}" input is not serializable: undefined`);
      }
      try {
        const validity =
          clock !== undefined
            ? {
                callerNowMs: nowMs(),
                requestedAtMs: request.requestedAt.getTime(),
                expiresAtMs: request.expiresAt.getTime(),
              }
            : { expiresInMs: windowMs };
        const response = await client.approvals.createApproval({
          ...validity,
          id: request.id,
          capabilityId: request.capabilityId,
          surface: request.surface,
          actor: toPbActor(request.actor),
          inputJson,
          inputHash: request.inputHash,
          reasons: request.reasons,
          types: request.types,
          risk: RISKS[request.risk],
          sideEffect: SIDE_EFFECTS[request.sideEffect],
          allowSelfApproval,
        });
        return toRecord(response.approval!);
      } catch (error) {
        if (error instanceof GavelError && error.code === "ALREADY_EXISTS") {
          throw refusal(`Approval "${request.id}" already exists`, error);
        }
        throw error;
      }
    },

    async get(id: string): Promise<ApprovalRecord | null> {
      const approval = await readApproval(id);
      return approval === undefined ? null : toRecord(approval);
    },

    async terms(id: string): Promise<ApprovalTerms | null> {
      const approval = await readApproval(id);
      if (approval === undefined) {
        return null;
      }
      return {
        termsHash: approval.termsHash,
        termsJson: approval.termsJson,
        terms: (approval.termsJson === "" ? {} : JSON.parse(approval.termsJson)) as Record<string, unknown>,
      };
    },

    async decide(id: string, decision: GavelApprovalDecision): Promise<ApprovalRecord> {
      const status = (decision as { status?: unknown } | null)?.status;
      if (status !== "approved" && status !== "rejected") {
        throw refusal(`Invalid decision status "${String(status)}"`);
      }
      if (!isWellFormedActor(decision.approver)) {
        throw refusal("Decision approver must be a well-formed actor");
      }
      const approverProblems = attributeProblems(decision.approver, "approver");
      if (approverProblems.length > 0) {
        throw refusal(`Invalid decision: ${approverProblems.join("; ")}`);
      }
      if (decision.comment !== undefined && typeof decision.comment !== "string") {
        throw refusal("Decision comment must be a string");
      }
      const shown = decision.termsHash;
      if (shown !== undefined && (typeof shown !== "string" || !/^[0-9a-f]{64}$/.test(shown))) {
        throw refusal("Decision termsHash must be 64 lower-case hex digits (an approval's termsHash)");
      }
      let termsHash = shown;
      try {
        const callerNowMs = nowMs();
        if (termsHash === undefined) {
          // No terms hash from the caller: decide on the terms as they are
          // now, read here, so the decision still names the terms it binds.
          const current = await client.approvals.getApproval({ id, callerNowMs });
          if (current.approval === undefined) {
            throw refusal(`Approval "${id}" was not found`);
          }
          termsHash = current.approval.termsHash === "" ? undefined : current.approval.termsHash;
        }
        const response = await client.approvals.decideApproval({
          callerNowMs,
          id,
          status: status === "approved" ? PbStatus.APPROVED : PbStatus.REJECTED,
          approver: toPbActor(decision.approver),
          comment: decision.comment,
          termsHash,
        });
        return toRecord(response.approval!);
      } catch (error) {
        if (error instanceof GavelError && error.code === "APPROVAL_TERMS_CHANGED") {
          throw refusal(
            `Approval "${id}" cannot be decided on terms hash ${String(termsHash)}: its terms are other ones (read them again)`,
            error,
          );
        }
        const state = refusalOfAct(error, id);
        if (state !== undefined) {
          throw refusal(`Approval "${id}" is not pending (status: ${state.status})`, error);
        }
        if (error instanceof GavelError) {
          if (error.code === "APPROVAL_SELF_APPROVAL") {
            throw refusal(
              `Approval "${id}" cannot be decided by its requester ${actorText(decision.approver)} (self-approval is refused)`,
              error,
            );
          }
        }
        throw error;
      }
    },

    async markConsumed(id: string, executionId: string): Promise<ApprovalRecord> {
      if (typeof executionId !== "string" || executionId.length === 0) {
        throw refusal(`Approval "${id}" cannot be consumed without an execution id`);
      }
      try {
        const response = await client.approvals.consumeApproval({ callerNowMs: nowMs(), id, executionId });
        return toRecord(response.approval!);
      } catch (error) {
        const state = refusalOfAct(error, id);
        if (state === undefined) {
          throw error;
        }
        if (state.status === "consumed" && state.consumedBy === executionId) {
          // Our own earlier consume (a retry after an ambiguous failure,
          // from this process or another): the approval is ours.
          const current = await client.approvals.getApproval({ id, callerNowMs: nowMs() });
          if (current.approval?.consumedByExecutionId === executionId) {
            return toRecord(current.approval);
          }
        }
        const by = state.consumedBy !== undefined ? `, consumed by ${state.consumedBy}` : "";
        throw refusal(`Approval "${id}" cannot be consumed (status: ${state.status}${by})`, error);
      }
    },

    async list(filter: ApprovalListFilter = {}): Promise<ApprovalRecord[]> {
      if (filter.status !== undefined && !Object.hasOwn(STATUSES, filter.status)) {
        throw refusal(`Invalid approval status filter "${String(filter.status)}"`);
      }
      const callerNowMs = nowMs();
      const records: ApprovalRecord[] = [];
      let pageToken = "";
      do {
        const response = await client.approvals.listApprovals({
          status: filter.status !== undefined ? STATUSES[filter.status] : undefined,
          capabilityId: filter.capabilityId,
          actorId: filter.actorId,
          callerNowMs,
          limit: pageSize,
          pageToken,
          // SPEC §3 orders a listing by (requestedAt, id); the cluster's
          // default is newest first.
          oldestFirst: true,
        });
        for (const approval of response.approvals) {
          records.push(toRecord(approval));
        }
        pageToken = response.nextPageToken;
      } while (pageToken !== "" && records.length < maxListed);
      return records.slice(0, maxListed);
    },
  };
}
