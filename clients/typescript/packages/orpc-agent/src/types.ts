// The orpc-agent interfaces this package plugs into, written from their
// documented shape (orpc-agent is not published as a package): the
// ApprovalCoordinator seam of `createAgentRuntime({ approvals: { coordinator } })`,
// its records, the audit sink and the capability metadata. A Gavel object
// satisfies orpc-agent's types structurally.

/** What kind of principal an actor is. */
export type ActorKind = "user" | "service" | "automation" | "anonymous";

/** Who performs or requests an operation. */
export interface Actor {
  id: string;
  kind: ActorKind;
  displayName?: string;
  attributes?: Record<string, unknown>;
}

/** Where a capability was called from. */
export type Surface = "direct" | "aiSdk" | "mcp" | "workflow" | "test";

/** How much harm a capability can do. */
export type Risk = "low" | "medium" | "high" | "critical";

/** What a capability does to the world. */
export type SideEffect = "none" | "read" | "write" | "destructive" | "external";

/** Lifecycle status of an approval record. */
export type ApprovalStatus = "pending" | "approved" | "rejected" | "expired" | "cancelled" | "consumed";

/** A request for approval of one operation. */
export interface ApprovalRequest {
  id: string;
  capabilityId: string;
  surface: Surface;
  actor: Actor;
  input: unknown;
  /** SHA-256 (lower-case hex) of the canonical JSON of `input`. */
  inputHash: string;
  reasons: string[];
  types: string[];
  risk: Risk;
  sideEffect: SideEffect;
  requestedAt: Date;
  expiresAt: Date;
}

/** A decision on an approval. */
export interface ApprovalDecision {
  status: "approved" | "rejected";
  approver: Actor;
  comment?: string;
}

/** An approval record: the request, its status and what happened to it. */
export interface ApprovalRecord extends ApprovalRequest {
  status: ApprovalStatus;
  decision?: ApprovalDecision & { decidedAt: Date };
  consumedByExecutionId?: string;
}

/** Filters of `list`, composed with AND. */
export interface ApprovalListFilter {
  status?: ApprovalStatus;
  capabilityId?: string;
  actorId?: string;
}

/** orpc-agent's approval store seam. */
export interface ApprovalCoordinator {
  create(request: ApprovalRequest): Promise<ApprovalRecord>;
  get(id: string): Promise<ApprovalRecord | null>;
  decide(id: string, decision: ApprovalDecision): Promise<ApprovalRecord>;
  markConsumed(id: string, executionId: string): Promise<ApprovalRecord>;
  list?(filter?: ApprovalListFilter): Promise<ApprovalRecord[]>;
}

/** The 11 event types orpc-agent emits to its audit sinks. */
export type AuditEventType =
  | "capability.denied"
  | "capability.approval_requested"
  | "capability.approved"
  | "capability.rejected"
  | "capability.started"
  | "capability.retried"
  | "capability.completed"
  | "capability.failed"
  | "capability.cancelled"
  | "capability.requested"
  | "capabilities.discovered";

/** An orpc-agent audit event: the envelope plus type-specific fields. */
export interface AuditEvent {
  type: AuditEventType | (string & {});
  timestamp: Date;
  surface: Surface | (string & {});
  actor: Actor;
  executionId?: string;
  capabilityId?: string;
  correlationId?: string;
  inputHash?: string;
  [field: string]: unknown;
}

/** orpc-agent's audit sink. */
export type AuditSink = (event: AuditEvent) => void | Promise<void>;

/** orpc-agent's retry metadata of a capability. */
export interface RetryMeta {
  maxAttempts: number;
  backoffMs?: number;
  /** Decides per error whether to retry; a function, so it cannot be sent to Gavel. */
  retryOn?: unknown;
}

/** orpc-agent's approval metadata of a capability. */
export interface ApprovalMeta {
  required?: boolean;
  type?: string;
  expiresInMs?: number;
  /** A predicate deciding per call; cannot be sent to Gavel. */
  when?: unknown;
}

/** orpc-agent capability metadata (AgentMeta), the part Gavel understands. */
export interface AgentMeta {
  id: string;
  sideEffect: SideEffect;
  risk?: Risk;
  idempotent?: boolean;
  retry?: RetryMeta;
  timeoutMs?: number;
  approval?: boolean | ApprovalMeta;
  tags?: string[];
  [field: string]: unknown;
}
