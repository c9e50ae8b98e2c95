//! Commands the leader proposes, and the replies the state machine returns.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::access::{Caller, Grant, GrantName, Principal};
use crate::audit::Event;
use crate::error::DomainError;
use crate::model::{Actor, Approval, ApprovalStatus, Capability, Execution, Lease, ReportOutcome, Risk, SideEffect};
use crate::policies::{Policy, PolicySpec};
use crate::quotas::{QuotaChange, QuotaView};
use crate::standing::StandingSpec;

/// One replicated command: the leader's clock reading plus what to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Envelope {
    /// Client-chosen idempotency token; a repeat gets the first reply back.
    pub request_id: Option<String>,
    /// The leader's clock when it proposed the command. The state machine's
    /// clock never runs backwards: it takes the maximum of this and what it saw before.
    pub now_ms: u64,
    /// Who authenticated the call, stamped by the node that did; `None` only
    /// from a node started with `--insecure` (identity self-declared, no
    /// grant checked) and for the leader's own ticks.
    pub caller: Option<Caller>,
    /// What to do.
    pub command: Command,
}

/// Everything that changes state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// Register a new version of a capability.
    RegisterCapability(CapabilitySpec),
    /// Store a pending approval.
    CreateApproval(CreateApproval),
    /// Approve or reject a pending approval.
    DecideApproval {
        /// Approval to decide.
        approval_id: String,
        /// `Approved` or `Rejected`; anything else is refused.
        status: ApprovalStatus,
        /// Who decides.
        approver: Actor,
        /// Optional comment.
        comment: Option<String>,
        /// The caller's own clock, used for this request's comparisons and timestamps.
        caller_now_ms: Option<u64>,
        /// The terms hash of the terms the decider was shown (SPEC §13);
        /// refused when it is not the approval's.
        #[serde(default)]
        terms_hash: Option<String>,
    },
    /// Spend an approved approval on one execution (`markConsumed`).
    ConsumeApproval {
        /// Approval to consume.
        approval_id: String,
        /// Execution it authorizes.
        execution_id: String,
        /// The caller's own clock.
        caller_now_ms: Option<u64>,
    },
    /// Withdraw a pending approval.
    CancelApproval {
        /// Approval to cancel.
        approval_id: String,
        /// The caller's own clock.
        caller_now_ms: Option<u64>,
    },
    /// Submit an execution (or an approval request for it).
    Submit(Submit),
    /// Verify and consume an approval, then create its execution, in one command.
    Resume {
        /// The approval created by submit.
        approval_id: String,
        /// Execution id to use when the approval does not name one.
        execution_id: String,
        /// When given, must hash to the approved input.
        input_json: Option<String>,
    },
    /// Lease up to `tasks_max` ready executions from `queues` to a worker.
    Poll {
        /// The polling worker.
        worker_id: String,
        /// Queues to take from, in order.
        queues: Vec<String>,
        /// At most this many tasks.
        tasks_max: u32,
    },
    /// A worker's liveness signal for a lease.
    Heartbeat {
        /// The lease.
        lease_id: u64,
        /// The worker holding it.
        worker_id: String,
    },
    /// A worker's outcome for a lease.
    Report {
        /// The lease.
        lease_id: u64,
        /// The worker holding it.
        worker_id: String,
        /// What happened.
        outcome: ReportOutcome,
    },
    /// The caller cancels an execution: terminal.
    CancelExecution {
        /// Execution to cancel.
        execution_id: String,
        /// Who cancels (recorded in the audit trail).
        actor: Option<Actor>,
    },
    /// Bind a grant to a principal (admin only); replaces a grant of the
    /// same name. An audit event.
    Grant {
        /// Who receives it.
        principal: Principal,
        /// What is granted.
        grant: Grant,
    },
    /// Remove a grant from a principal (admin only). An audit event.
    Revoke {
        /// Whose grant.
        principal: Principal,
        /// Which grant.
        name: GrantName,
    },
    /// Change one principal's quotas (admin only). An audit event.
    SetQuota {
        /// Whose quotas.
        principal: Principal,
        /// What changes.
        change: QuotaChange,
    },
    /// Append an application's own event to the audit trail
    /// (`AuditService.RecordEvent`).
    RecordEvent(RecordEvent),
    /// A node registers (or replaces) the Ed25519 public key of its note
    /// key, which signs audit checkpoints. Only that node may send it.
    RegisterNoteKey {
        /// The node.
        node_id: u64,
        /// Its Ed25519 public key (32 bytes).
        public_key: Vec<u8>,
    },
    /// A node cosigns the audit checkpoint of the first `size` leaves,
    /// computed from its own tree (`machine/checkpoints.rs`). Only that node
    /// may send it.
    CosignCheckpoint {
        /// The signing node.
        node_id: u64,
        /// The checkpoint's tree size.
        size: u64,
        /// The C2SP `tlog-cosignature/v1` timestamp (POSIX seconds) the
        /// signature commits to.
        timestamp_s: u64,
        /// The Ed25519 signature over the `cosignature/v1` message of the
        /// checkpoint body (64 bytes).
        signature: Vec<u8>,
        /// The log's signature: the node's plain Ed25519 signature over the
        /// body, under the origin's name (docs/decisions/0099). The node that
        /// starts a checkpoint (the leader) sends it; the first one is kept.
        log_signature: Option<Vec<u8>>,
    },
    /// The leader stores an external witness's C2SP cosignature of the
    /// published checkpoint of `size`, which it verified with the witness's
    /// key before proposing (docs/decisions/0100). Only that node may send it.
    AddWitnessCosignature {
        /// The proposing node.
        node_id: u64,
        /// The checkpoint's tree size.
        size: u64,
        /// The witness's key name.
        witness: String,
        /// The signature line's bytes: key id, timestamp and Ed25519 signature (4 + 8 + 64).
        signature: Vec<u8>,
    },
    /// Name the first admin of a secured cluster, like etcd's root user.
    /// Proposed by the bootstrapping node; accepted only while no admin
    /// exists, and a repeat naming the same admin changes nothing.
    BootstrapAdmin {
        /// The first admin.
        admin: Principal,
    },
    /// Time passed: expire leases, end backoffs, compact old records.
    Tick {
        /// Retention to apply, stamped by the leader so every replica compacts alike.
        retention: Retention,
    },
    /// Create or change an approval policy (admin only): a new version,
    /// which voids the open approvals of the old one it no longer allows.
    /// An audit event.
    SetPolicy(PolicySpec),
    /// Delete an approval policy (admin only), voiding its open approvals
    /// like a change. An audit event.
    DeletePolicy {
        /// The policy.
        name: String,
        /// Leave approved-but-unconsumed approvals standing.
        non_retroactive: bool,
    },
    /// One approver's vote on an approval a policy governs; the vote that
    /// meets every factor approves it, the one that reaches the deny
    /// threshold rejects it.
    CastVote {
        /// The approval.
        approval_id: String,
        /// Approve (`true`) or deny.
        approve: bool,
        /// The input hash the voter saw: must be the approval's.
        input_hash: String,
        /// Who votes: the caller itself (a vote is never cast for another).
        approver: Actor,
        /// Optional comment.
        comment: Option<String>,
        /// The terms hash of the terms the voter was shown (SPEC §13);
        /// refused when it is not the approval's.
        #[serde(default)]
        terms_hash: Option<String>,
    },
    /// Withdraw one's own vote from a pending approval.
    WithdrawVote {
        /// The approval.
        approval_id: String,
        /// Whose vote: the caller itself.
        approver: Actor,
    },
    /// Store a pending standing approval: once decided, it covers up to
    /// `standing.uses_max` resumes within `standing.window_ms`, each one
    /// use spent atomically.
    CreateStandingApproval {
        /// The approval request, as for `CreateApproval`.
        request: CreateApproval,
        /// Its terms.
        standing: StandingSpec,
    },
    /// A command (`Submit`, `Resume`) and a worker's waiting poll it hands
    /// its work to in the same apply (decision 0107). Only the leader builds
    /// one, around a command it admitted and a poll it authenticated; a
    /// client never sends one, and one nested in another is refused.
    Handoff(Box<Handoff>),
    /// A decision (`DecideApproval`, `CastVote`) and the requester's
    /// `Resume` that waits for it, applied in one entry (decision 0108).
    /// Only the leader builds one, around a decision it admitted and a
    /// waiting resume it authenticated; a client never sends one. A
    /// [`Command::Handoff`] may carry one, nothing else may.
    DecideThenResume(Box<DecideThenResume>),
}

/// A decision travelling with the requester's resume that waits for it.
/// The decision is admitted, deduplicated and answered as if it were alone;
/// when it decided the approval just now (not a replay), the same apply
/// runs the resume under its own request id and caller, exactly as the
/// resume proposed on its own would run (admitted again, deduplicated,
/// remembered), so the waiting call reads its answer by request id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecideThenResume {
    /// The `DecideApproval` or `CastVote`, as its caller sent it.
    pub decide: Command,
    /// The waiting `Resume` of the same approval.
    pub resume: Command,
    /// The request id the waiting resume was sent with.
    pub resume_request_id: String,
    /// Who sent the resume, as the leader authenticated it.
    pub resumer: Option<Caller>,
}

impl DecideThenResume {
    /// The approval both commands are about.
    pub fn approval_id(&self) -> Option<&str> {
        match &self.resume {
            Command::Resume { approval_id, .. } => Some(approval_id),
            _ => None,
        }
    }
}

/// A waiting worker poll that the command it travels with hands its work
/// to: when that command created an execution, the same apply runs this
/// poll, under its own request id and caller, exactly as a `Poll` proposed
/// on its own would run (admitted again, deduplicated, remembered). The
/// wrapped command is admitted, deduplicated and answered as if it were
/// alone, so a retry of it without the hand-off is the same request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Handoff {
    /// The command that makes work ready.
    pub command: Command,
    /// The request id the poll's grant is remembered under: one grant
    /// attempt of the waiting poll ([`crate::ids::grant_request_id`]), so
    /// a retried poll finds it ([`crate::State::replayed_grants_for`]).
    pub grant_request_id: String,
    /// Who sent the poll, as the leader authenticated it.
    pub worker: Option<Caller>,
    /// The polling worker.
    pub worker_id: String,
    /// Its queues, in order.
    pub queues: Vec<String>,
    /// At most this many tasks.
    pub tasks_max: u32,
    /// When the waiting poll gives up, by the leader's clock: a hand-off
    /// applied at a later cluster time grants nothing (that poll has gone).
    pub poll_deadline_ms: u64,
}

impl Handoff {
    /// The `Poll` this hand-off runs: the same command the waiting poll
    /// would propose itself, so both are one request to deduplication.
    pub fn poll(&self) -> Command {
        Command::Poll { worker_id: self.worker_id.clone(), queues: self.queues.clone(), tasks_max: self.tasks_max }
    }
}

/// How long finalized records and events are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Retention {
    /// Finalized executions and closed approvals are dropped this long after closing.
    pub records_ms: u64,
    /// Audit events are dropped this long after their timestamp.
    pub events_ms: u64,
}

impl Default for Retention {
    /// Three days for both, like Temporal's default namespace retention.
    fn default() -> Self {
        Retention { records_ms: 72 * 60 * 60 * 1000, events_ms: 72 * 60 * 60 * 1000 }
    }
}

/// A capability declaration as the caller wrote it; defaults are resolved on registration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct CapabilitySpec {
    /// Capability id.
    pub id: String,
    /// Side effect class (required).
    pub side_effect: Option<SideEffect>,
    /// Risk (required).
    pub risk: Option<Risk>,
    /// Idempotency claim.
    pub idempotent: bool,
    /// Retry configuration.
    pub retry: Option<RetrySpec>,
    /// Per-attempt timeout (default 30000).
    pub timeout_ms: Option<u64>,
    /// Heartbeat timeout.
    pub heartbeat_timeout_ms: Option<u64>,
    /// Approval policy.
    pub approval: Option<ApprovalPolicySpec>,
    /// Queue (default: the id).
    pub queue: Option<String>,
    /// Tags.
    pub tags: Vec<String>,
}

/// Retry configuration as written by the caller.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct RetrySpec {
    /// Additional attempts after the first.
    pub attempts_max: u32,
    /// Base backoff (default 250).
    pub backoff_ms: Option<u64>,
    /// Codes never retried.
    pub non_retryable_codes: Vec<String>,
}

/// Approval policy as written by the caller.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct ApprovalPolicySpec {
    /// Approval required before execution.
    pub required: bool,
    /// Approval type.
    pub approval_type: Option<String>,
    /// Validity (default 900000).
    pub expires_in_ms: Option<u64>,
}

/// An approval request (orpc-agent's `ApprovalCoordinator.create`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateApproval {
    /// Approval id.
    pub id: String,
    /// Capability id.
    pub capability_id: String,
    /// Surface.
    pub surface: String,
    /// Requester.
    pub actor: Actor,
    /// JSON input.
    pub input_json: String,
    /// Input hash; computed when absent, must match the input when present.
    pub input_hash: Option<String>,
    /// Reasons.
    pub reasons: Vec<String>,
    /// Types.
    pub types: Vec<String>,
    /// Risk.
    pub risk: Risk,
    /// Side effect.
    pub side_effect: SideEffect,
    /// Requested-at; defaults to now.
    pub requested_at_ms: Option<u64>,
    /// Expires-at; defaults to requested-at + `expires_in_ms`.
    pub expires_at_ms: Option<u64>,
    /// Validity relative to requested-at (default 15 minutes); resolved by the
    /// state machine, so a retried request is the same command whenever and
    /// wherever it is retried. At most one of this and `expires_at_ms`.
    #[serde(default)]
    pub expires_in_ms: Option<u64>,
    /// Opt out of the self-approval check.
    pub allow_self_approval: bool,
    /// The caller's own clock.
    pub caller_now_ms: Option<u64>,
}

/// An execution submission.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Submit {
    /// Execution id (the edge generates one when the client did not).
    pub execution_id: String,
    /// Capability to run.
    pub capability_id: String,
    /// JSON input.
    pub input_json: String,
    /// Caller.
    pub actor: Actor,
    /// Surface.
    pub surface: String,
    /// Correlation id.
    pub correlation_id: Option<String>,
}

/// An application event to append to the audit trail.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordEvent {
    /// The application's event type (`policy.denied`), bounded by
    /// [`crate::limits::APP_EVENT_TYPE_BYTES_MAX`]; not one of Gavel's own.
    pub event_type: String,
    /// Who caused it (the caller, unless it may act for another).
    pub actor: Actor,
    /// Execution it is about; it need not exist.
    pub execution_id: Option<String>,
    /// Approval it is about.
    pub approval_id: Option<String>,
    /// Application correlation id.
    pub correlation_id: Option<String>,
    /// Capability it is about.
    pub capability_id: Option<String>,
    /// JSON payload, bounded by [`crate::limits::APP_EVENT_PAYLOAD_BYTES_MAX`].
    pub payload_json: Option<String>,
    /// The application's attributes of the event.
    pub attributes: BTreeMap<String, String>,
}

/// A leased unit of work handed to a worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Task {
    /// The lease; `lease.lease_id` is the fencing token.
    pub lease: Lease,
    /// Stable across retries of this execution.
    pub idempotency_key: String,
    /// The capability version the execution was submitted under.
    pub capability: Capability,
    /// Canonical JSON input.
    pub input_json: String,
    /// Caller.
    pub actor: Actor,
    /// Approver, when approved.
    pub approver: Option<Actor>,
    /// Correlation id.
    pub correlation_id: Option<String>,
    /// Approval consumed.
    pub approval_id: Option<String>,
    /// Where the execution was submitted from (its surface).
    pub surface: String,
}

/// What a command produced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reply {
    /// A registered capability.
    Capability(Capability),
    /// An approval and its status as seen at the command's time.
    Approval {
        /// The record.
        approval: Approval,
        /// Status including lazy expiry.
        status: ApprovalStatus,
    },
    /// Submit needs an approval first.
    ApprovalRequired {
        /// The pending approval.
        approval: Approval,
        /// Its status.
        status: ApprovalStatus,
    },
    /// An execution; `created` is false when submit found it already there.
    Execution {
        /// The record.
        execution: Execution,
        /// Whether this command created it.
        created: bool,
    },
    /// Leased tasks (possibly none).
    Tasks(Vec<Task>),
    /// Heartbeat answer.
    Heartbeat {
        /// The caller cancelled: stop.
        cancel_requested: bool,
        /// The attempt's deadline.
        deadline_ms: u64,
    },
    /// A report was accepted.
    Reported {
        /// The execution after the report.
        execution: Execution,
        /// A retry was scheduled.
        retry_scheduled: bool,
    },
    /// What a tick did.
    Ticked {
        /// Leases expired.
        leases_expired: u32,
        /// Executions whose backoff ended.
        backoffs_ended: u32,
        /// Records dropped by retention.
        records_compacted: u32,
    },
    /// The event a `RecordEvent` appended.
    Event(Event),
    /// A note key registered, or a cosignature taken: the checkpoint being
    /// cosigned (0 when none) and whether this command published it.
    Cosigned {
        /// The size of the checkpoint the command was about.
        size: u64,
        /// Whether a quorum has now signed it (it is published).
        published: bool,
    },
    /// A principal's grants after a `Grant`, `Revoke` or `BootstrapAdmin`.
    Grants {
        /// Whose grants.
        principal: Principal,
        /// Every grant it now holds.
        grants: Vec<Grant>,
    },
    /// A principal's quota after a `SetQuota`.
    Quota(QuotaView),
    /// A policy after a `SetPolicy` (its new version) or `DeletePolicy`
    /// (the version deleted), and how many approvals the change voided.
    Policy {
        /// The policy.
        policy: Policy,
        /// Open approvals of older versions it voided.
        voided: u32,
    },
    /// The command was refused; nothing changed except, where noted, the audit trail.
    Error(DomainError),
}

impl Reply {
    /// The refusal, if this reply is one.
    pub fn error(&self) -> Option<&DomainError> {
        match self {
            Reply::Error(error) => Some(error),
            _ => None,
        }
    }
}

impl From<DomainError> for Reply {
    fn from(error: DomainError) -> Self {
        Reply::Error(error)
    }
}
