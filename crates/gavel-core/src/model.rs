//! Domain records: actors, capabilities, approvals, executions, leases and results (SPEC §2).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// Who asked, decided or cancelled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Actor {
    /// Non-empty identifier.
    pub id: String,
    /// What kind of principal this is.
    pub kind: ActorKind,
    /// Optional human-readable name.
    pub display_name: Option<String>,
    /// The application's attributes of the actor (orpc-agent's
    /// `actor.attributes`): stored with the record that names the actor and
    /// returned on it, never compared or interpreted. Ordered, so the state
    /// hash does not depend on insertion order; bounded by
    /// [`crate::limits::ATTRIBUTES_MAX`] and its key and value limits. An
    /// actor written without them reads as having none.
    #[serde(default)]
    pub attributes: BTreeMap<String, String>,
}

impl Actor {
    /// An actor of `kind` named `id`, with no display name and no attributes.
    pub fn new(id: &str, kind: ActorKind) -> Actor {
        Actor { id: id.to_string(), kind, display_name: None, attributes: BTreeMap::new() }
    }

    /// A user actor with no display name (handy in tests and examples).
    pub fn user(id: &str) -> Actor {
        Actor::new(id, ActorKind::User)
    }

    /// The system actor that stamps cluster-initiated events (expiry, retries).
    pub fn system() -> Actor {
        Actor::new("gavel", ActorKind::Automation)
    }

    /// This actor without its attributes: who it is, as an audit event names
    /// it (events carry ids and codes, not the application's data).
    pub fn without_attributes(&self) -> Actor {
        Actor {
            id: self.id.clone(),
            kind: self.kind,
            display_name: self.display_name.clone(),
            attributes: BTreeMap::new(),
        }
    }
}

/// The kind of principal behind an actor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ActorKind {
    /// A person.
    User,
    /// Another service.
    Service,
    /// An automated process acting on its own.
    Automation,
    /// Unidentified caller.
    Anonymous,
}

impl ActorKind {
    /// Every kind, in order.
    pub const ALL: [ActorKind; 4] = [ActorKind::User, ActorKind::Service, ActorKind::Automation, ActorKind::Anonymous];

    /// The name people read and write: `user`, `service`, `automation` or `anonymous`.
    pub fn as_str(self) -> &'static str {
        match self {
            ActorKind::User => "user",
            ActorKind::Service => "service",
            ActorKind::Automation => "automation",
            ActorKind::Anonymous => "anonymous",
        }
    }
}

/// `kind:id` (`user:bob-finance`): the one spelling of an actor wherever a
/// person reads it, the same as a principal's (docs/decisions/0090).
impl std::fmt::Display for Actor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.kind.as_str(), self.id)
    }
}

/// What running a capability does to the world.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum SideEffect {
    /// Pure computation.
    None,
    /// Reads only.
    Read,
    /// Writes state somewhere.
    Write,
    /// Destroys state somewhere.
    Destructive,
    /// Acts on an external system.
    External,
}

impl SideEffect {
    /// True for write, destructive and external: the classes whose retry needs `idempotent`.
    pub fn is_write_like(self) -> bool {
        matches!(self, SideEffect::Write | SideEffect::Destructive | SideEffect::External)
    }
}

/// Declared risk of a capability.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Risk {
    /// Low risk.
    Low,
    /// Medium risk.
    Medium,
    /// High risk.
    High,
    /// Critical risk.
    Critical,
}

/// Runtime retry configuration of a capability.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryConfig {
    /// Additional attempts after the first (`maxAttempts`).
    pub attempts_max: u32,
    /// Base backoff; attempt n+1 waits `backoff_ms × 2^(n-1)`.
    pub backoff_ms: u64,
    /// Error codes that are never retried.
    pub non_retryable_codes: Vec<String>,
}

/// Whether and how a capability needs approval.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalPolicy {
    /// True when every execution needs an approval first.
    pub required: bool,
    /// Optional approval type recorded in the approval's `types`.
    pub approval_type: Option<String>,
    /// How long a created approval stays valid.
    pub expires_in_ms: u64,
}

/// A capability as registered: the caller's declaration with defaults resolved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capability {
    /// Capability id, e.g. `orders.refund`.
    pub id: String,
    /// Registry version, starting at 1 and growing with each registration.
    pub version: u64,
    /// When this version was registered.
    pub registered_at_ms: u64,
    /// What running it does.
    pub side_effect: SideEffect,
    /// Declared risk.
    pub risk: Risk,
    /// The reviewable claim that repeating a call with the same input is safe.
    pub idempotent: bool,
    /// Runtime retry configuration, if any.
    pub retry: Option<RetryConfig>,
    /// Per-attempt timeout.
    pub timeout_ms: u64,
    /// A lease that misses heartbeats for this long is lost.
    pub heartbeat_timeout_ms: Option<u64>,
    /// Approval policy, if any.
    pub approval: Option<ApprovalPolicy>,
    /// Queue workers poll for this capability.
    pub queue: String,
    /// Free-form tags.
    pub tags: Vec<String>,
}

impl Capability {
    /// True when an execution needs an approval before it may exist.
    pub fn requires_approval(&self) -> bool {
        self.approval.as_ref().is_some_and(|policy| policy.required)
    }

    /// The SI-11 side-effect clause: may this capability be retried at all?
    pub fn retry_allowed_by_side_effect(&self) -> bool {
        !self.side_effect.is_write_like() || (self.idempotent && self.retry.is_some())
    }
}

/// Stored lifecycle status of an approval. `Expired` is never stored: it is
/// computed on read from `Pending` and the clock (see [`ApprovalStatus`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum StoredApprovalStatus {
    /// Waiting for a decision.
    Pending,
    /// Approved, not yet consumed.
    Approved,
    /// Rejected.
    Rejected,
    /// Withdrawn by the application.
    Cancelled,
    /// Approved and spent by one execution.
    Consumed,
    /// Closed because the policy it was created under changed or was
    /// deleted (issue #25): pending, or approved and not yet consumed.
    Voided,
}

/// Approval status as seen by readers, including lazily computed expiry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ApprovalStatus {
    /// Waiting for a decision.
    Pending,
    /// Approved, not yet consumed.
    Approved,
    /// Rejected.
    Rejected,
    /// Withdrawn by the application.
    Cancelled,
    /// Pending past its expiry.
    Expired,
    /// Approved and spent.
    Consumed,
    /// Closed by a change of the policy it was created under.
    Voided,
}

impl ApprovalStatus {
    /// Lower-case name used in messages (`approved`, `consumed`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalStatus::Pending => "pending",
            ApprovalStatus::Approved => "approved",
            ApprovalStatus::Rejected => "rejected",
            ApprovalStatus::Cancelled => "cancelled",
            ApprovalStatus::Expired => "expired",
            ApprovalStatus::Consumed => "consumed",
            ApprovalStatus::Voided => "voided",
        }
    }
}

/// A decision on an approval.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    /// Approved or rejected.
    pub status: ApprovalStatus,
    /// Who decided.
    pub approver: Actor,
    /// Optional comment.
    pub comment: Option<String>,
    /// When the decision was recorded.
    pub decided_at_ms: u64,
}

/// A stored approval record (SPEC §3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Approval {
    /// Approval id.
    pub id: String,
    /// Capability the approval is for.
    pub capability_id: String,
    /// Where the request came from (e.g. `mcp`, `http`).
    pub surface: String,
    /// The requester.
    pub actor: Actor,
    /// Canonical JSON of the approved input.
    pub input_json: String,
    /// SHA-256 of the canonical input, lower-case hex.
    #[serde(with = "hash_hex")]
    pub input_hash: String,
    /// Why approval is needed.
    pub reasons: Vec<String>,
    /// Approval types requested.
    pub types: Vec<String>,
    /// Risk at request time.
    pub risk: Risk,
    /// Side effect at request time.
    pub side_effect: SideEffect,
    /// When it was requested.
    pub requested_at_ms: u64,
    /// When a pending request expires.
    pub expires_at_ms: u64,
    /// The request opted out of the self-approval check.
    pub allow_self_approval: bool,
    /// The authenticated principal that requested it (`None` on a node
    /// started with `--insecure`). A principal deciding as itself may not
    /// decide its own request, whatever actor it named when requesting.
    pub requester_principal: Option<Principal>,
    /// Stored status (never `Expired`).
    pub status: StoredApprovalStatus,
    /// The decision, once decided.
    pub decision: Option<Decision>,
    /// The execution that consumed it.
    pub consumed_by_execution_id: Option<String>,
    /// For approvals created by submit: the execution resume will create.
    pub execution_id: Option<String>,
    /// For approvals created by submit: the capability version submitted under.
    pub capability_version: Option<u64>,
    /// For approvals created by submit: the caller's correlation id, carried to the execution.
    pub correlation_id: Option<String>,
    /// When it left the pending/approved states for good (rejected, cancelled,
    /// consumed, voided); retention counts from here.
    pub closed_at_ms: Option<u64>,
    /// The policy that governs it, the version it was created under and
    /// its votes (issue #25); `None` for an approval no policy governed
    /// when it was created, which a single decision decides.
    #[serde(default)]
    pub quorum: Option<Quorum>,
    /// For a standing approval: its terms (N uses within a window, the
    /// input binding) and the uses spent; `None` for a one-use approval.
    #[serde(default)]
    pub standing: Option<Standing>,
    /// The capability as the registry declared it when the approval was
    /// created (`None`: not registered then); part of its terms.
    #[serde(default)]
    pub registered: Option<RegisteredCapability>,
    /// SHA-256 of the approval's terms (SPEC §13, [`crate::terms`]), set
    /// when it is created: a decision or vote that names another is refused.
    #[serde(with = "hash_hex")]
    pub terms_hash: String,
}

impl Approval {
    /// Status as seen at `now_ms`: a pending record past `expires_at_ms` reads as expired.
    pub fn status_at(&self, now_ms: u64) -> ApprovalStatus {
        match self.status {
            StoredApprovalStatus::Pending if now_ms > self.expires_at_ms => ApprovalStatus::Expired,
            StoredApprovalStatus::Pending => ApprovalStatus::Pending,
            StoredApprovalStatus::Approved => ApprovalStatus::Approved,
            StoredApprovalStatus::Rejected => ApprovalStatus::Rejected,
            StoredApprovalStatus::Cancelled => ApprovalStatus::Cancelled,
            StoredApprovalStatus::Consumed => ApprovalStatus::Consumed,
            StoredApprovalStatus::Voided => ApprovalStatus::Voided,
        }
    }
}

/// Where an execution is in its lifecycle (SPEC §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ExecutionState {
    /// Waiting for a worker.
    Queued,
    /// Leased to a worker.
    Leased,
    /// Waiting out a retry backoff.
    Backoff,
    /// Final: completed.
    Completed,
    /// Final: failed.
    Failed,
    /// Final: cancelled (timeout or caller).
    Cancelled,
}

impl ExecutionState {
    /// Lower-case name used in messages and metrics (`queued`, `leased`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            ExecutionState::Queued => "queued",
            ExecutionState::Leased => "leased",
            ExecutionState::Backoff => "backoff",
            ExecutionState::Completed => "completed",
            ExecutionState::Failed => "failed",
            ExecutionState::Cancelled => "cancelled",
        }
    }

    /// True for the three final states.
    pub fn is_final(self) -> bool {
        matches!(self, ExecutionState::Completed | ExecutionState::Failed | ExecutionState::Cancelled)
    }
}

/// Why a cancelled execution was cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CancelCode {
    /// The per-attempt timeout passed and no retry was allowed.
    Timeout,
    /// The caller cancelled.
    Cancelled,
}

impl CancelCode {
    /// Wire string (`TIMEOUT`, `CANCELLED`).
    pub fn as_str(self) -> &'static str {
        match self {
            CancelCode::Timeout => "TIMEOUT",
            CancelCode::Cancelled => "CANCELLED",
        }
    }
}

/// Whether the side effect may have happened before a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ExecutedBeforeFailure {
    /// The worker said the effect did not happen.
    No,
    /// Nobody knows (the worker was lost mid-attempt).
    Unknown,
}

/// The one final result of an execution.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ResultEnvelope {
    /// The handler returned an output.
    Completed {
        /// Canonical JSON output.
        output_json: String,
        /// Attempts made.
        attempts: u32,
        /// From submission to finalization.
        duration_ms: u64,
    },
    /// The handler failed and no retry was allowed.
    Failed {
        /// Error code reported (or `WORKER_LOST`).
        code: String,
        /// Error message.
        message: String,
        /// Whether the error itself was retryable.
        retryable: bool,
        /// Attempts made.
        attempts: u32,
        /// Whether the effect may have happened.
        executed_before_failure: Option<ExecutedBeforeFailure>,
    },
    /// Timed out without a permitted retry, or cancelled by the caller.
    Cancelled {
        /// Timeout or caller cancel.
        code: CancelCode,
        /// Attempts made.
        attempts: u32,
        /// From submission to finalization.
        duration_ms: u64,
    },
}

/// A worker's right to run one attempt, fenced by `lease_id`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// Fencing token: unique and strictly increasing across the cluster.
    pub lease_id: u64,
    /// The execution leased.
    pub execution_id: String,
    /// Attempt number, starting at 1.
    pub attempt: u32,
    /// Worker holding the lease.
    pub worker_id: String,
    /// When the lease was granted.
    pub granted_at_ms: u64,
    /// When the attempt times out.
    pub deadline_ms: u64,
    /// Last heartbeat (or the grant time).
    pub heartbeat_at_ms: u64,
}

/// An execution record (SPEC §2, §4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Execution {
    /// Execution id, unique cluster-wide.
    pub execution_id: String,
    /// Capability id.
    pub capability_id: String,
    /// Capability version snapshotted at submission.
    pub capability_version: u64,
    /// Canonical JSON input.
    pub input_json: String,
    /// SHA-256 of the canonical input.
    #[serde(with = "hash_hex")]
    pub input_hash: String,
    /// Who submitted it.
    pub actor: Actor,
    /// The authenticated principal that owns it (`None` on a node started
    /// with `--insecure`): the principal that submitted it, or, for an
    /// execution resumed from an approval, the principal that requested the
    /// approval. With [`Execution::actor`] it decides who may act on the
    /// execution and read it (docs/security.md, "Ownership").
    pub requester_principal: Option<Principal>,
    /// Where it came from.
    pub surface: String,
    /// Caller's correlation id.
    pub correlation_id: Option<String>,
    /// Approval consumed to create it.
    pub approval_id: Option<String>,
    /// Who approved it.
    pub approver: Option<Actor>,
    /// Stable across retries, unique across executions.
    pub idempotency_key: String,
    /// Lifecycle state.
    pub state: ExecutionState,
    /// Attempts started so far.
    pub attempts: u32,
    /// The final result, once final.
    pub result: Option<ResultEnvelope>,
    /// When it was submitted (or resumed).
    pub submitted_at_ms: u64,
    /// When it was finalized.
    pub finalized_at_ms: Option<u64>,
    /// The current lease while leased.
    pub lease: Option<Lease>,
    /// End of the current backoff.
    pub backoff_until_ms: Option<u64>,
    /// The caller asked to cancel (the worker learns it on its next heartbeat).
    pub cancel_requested: bool,
    /// The lease revoked by a caller cancel, so its holder's heartbeat still
    /// hears `cancel_requested` instead of `LEASE_LOST`.
    pub revoked_lease_id: Option<u64>,
    /// The accepted report, kept so a repeated identical report gets the same answer.
    pub accepted_report: Option<AcceptedReport>,
    /// FIFO position in its queue while queued.
    pub queue_position: u64,
    /// Every lease granted to this execution, oldest first.
    pub lease_ids: Vec<u64>,
}

/// The report an execution accepted for one lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcceptedReport {
    /// Lease the report was made under.
    pub lease_id: u64,
    /// The outcome reported, to recognise a repeat.
    pub outcome: ReportOutcome,
    /// Whether that report scheduled a retry.
    pub retry_scheduled: bool,
}

/// What a worker reports for an attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReportOutcome {
    /// The handler returned this output.
    Completed {
        /// JSON output.
        output_json: String,
    },
    /// The handler failed.
    Failed {
        /// Error code.
        code: String,
        /// Error message.
        message: String,
        /// Whether the handler considers it retryable.
        retryable: bool,
    },
}

/// Serde for a SHA-256 in lower-case hex: the string itself in a
/// human-readable format (JSON), its 32 bytes in a binary one (bincode:
/// cold records, snapshots, the log), and the string when it is not 64
/// lower-case hex digits (so every value round-trips exactly).
pub(crate) mod hash_hex {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    /// The binary form, written from a borrowed string.
    #[derive(Serialize)]
    enum Written<'a> {
        Bytes([u8; 32]),
        Text(&'a str),
    }

    /// The binary form, read back (the same variants as [`Written`]).
    #[derive(Deserialize)]
    enum Read {
        Bytes([u8; 32]),
        Text(String),
    }

    fn bytes_of(hash: &str) -> Option<[u8; 32]> {
        let lower = hash.bytes().all(|byte| matches!(byte, b'0'..=b'9' | b'a'..=b'f'));
        let mut bytes = [0u8; 32];
        (lower && hex::decode_to_slice(hash, &mut bytes).is_ok()).then_some(bytes)
    }

    fn written(hash: &str) -> Written<'_> {
        bytes_of(hash).map_or(Written::Text(hash), Written::Bytes)
    }

    fn read(form: Read) -> String {
        match form {
            Read::Bytes(bytes) => hex::encode(bytes),
            Read::Text(text) => text,
        }
    }

    pub(crate) fn serialize<S: Serializer>(hash: &str, serializer: S) -> Result<S::Ok, S::Error> {
        if serializer.is_human_readable() {
            return serializer.serialize_str(hash);
        }
        written(hash).serialize(serializer)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
        if deserializer.is_human_readable() {
            return String::deserialize(deserializer);
        }
        Read::deserialize(deserializer).map(read)
    }

    /// The same for an optional hash.
    pub(crate) mod option {
        use serde::{Deserialize, Deserializer, Serialize, Serializer};

        pub(crate) fn serialize<S: Serializer>(hash: &Option<String>, serializer: S) -> Result<S::Ok, S::Error> {
            if serializer.is_human_readable() {
                return hash.serialize(serializer);
            }
            hash.as_deref().map(super::written).serialize(serializer)
        }

        pub(crate) fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<String>, D::Error> {
            if deserializer.is_human_readable() {
                return Option::<String>::deserialize(deserializer);
            }
            Option::<super::Read>::deserialize(deserializer).map(|form| form.map(super::read))
        }
    }

    #[cfg(test)]
    mod tests {
        #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
        struct Hashed {
            #[serde(with = "super")]
            hash: String,
            #[serde(with = "super::option")]
            optional: Option<String>,
        }

        #[test]
        fn a_lower_case_sha256_is_32_bytes_in_bincode_and_anything_else_round_trips_as_text() {
            let hex = "ab".repeat(32);
            for (hash, optional) in [
                (hex.clone(), Some(hex.clone())),
                (hex.to_uppercase(), None),
                ("not a hash".to_string(), Some("ab".repeat(31))),
                (String::new(), Some(format!("{}zz", "a".repeat(62)))),
            ] {
                let value = Hashed { hash, optional };
                let bytes = bincode::serialize(&value).expect("bincode");
                assert_eq!(bincode::deserialize::<Hashed>(&bytes).expect("bincode back"), value);
                let json = serde_json::to_string(&value).expect("json");
                assert_eq!(serde_json::from_str::<Hashed>(&json).expect("json back"), value);
                assert!(json.contains(&format!("\"{}\"", value.hash)), "JSON keeps the string: {json}");
            }
            let compact = Hashed { hash: hex.clone(), optional: None };
            assert_eq!(bincode::serialize(&compact).expect("bincode").len(), 4 + 32 + 1, "a tag and 32 bytes");
        }
    }
}

// The types of the records' parts that other modules give rules to
// (access: principals; policies: quorums and votes; standing: standing
// terms; terms: the registered capability): defined here, with the
// records, so that this module is a leaf; their rules live in those
// modules' `impl` blocks.

/// What kind of principal authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum PrincipalKind {
    /// A person.
    User,
    /// A backend service or app acting on its own behalf (or, with `act-for`,
    /// on its users' behalf).
    Service,
    /// A worker process that runs executions.
    Worker,
    /// A Gavel node (peer certificate).
    Node,
}

/// An authenticated identity: `kind:id`, e.g. `user:bob`, `worker:refunds-1`,
/// `node:2`. In a certificate it is the SAN URI `gavel://kind/id`; in a token
/// it is the `sub` claim, written `kind:id`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Principal {
    /// What kind of principal.
    pub kind: PrincipalKind,
    /// Its id within the kind: 1 to 128 characters of `[A-Za-z0-9._@-]`.
    pub id: String,
}

/// One principal's vote on a governed approval.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Vote {
    /// Who voted (the authenticated principal).
    pub principal: Principal,
    /// The actor it voted as (its own).
    pub approver: Actor,
    /// Approve (`true`) or deny.
    pub approve: bool,
    /// The factors it was eligible for when it voted, by index in the
    /// policy; kept current when its grants change.
    pub eligible: BTreeSet<u32>,
    /// The factor this vote counts for in the current assignment (`None`:
    /// a denial, or an approval no unmet factor needs).
    pub factor: Option<u32>,
    /// The input hash the voter saw; equal to the approval's.
    #[serde(with = "crate::model::hash_hex")]
    pub input_hash: String,
    /// The voter is the requester (or acts for it) and holds the
    /// self-approval grant.
    pub self_approval: bool,
    /// Optional comment.
    pub comment: Option<String>,
    /// When it was cast.
    pub cast_at_ms: u64,
}

/// What an approval records of the policy that governs it: the version it
/// was created under and the votes so far.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quorum {
    /// Policy name.
    pub policy: String,
    /// The version the approval was created under.
    pub policy_version: u64,
    /// Each factor's name and `k`, copied from that version, so a reader
    /// sees progress without the policy (which may have changed since).
    pub factors: Vec<(String, u32)>,
    /// The deny threshold of that version.
    pub deny_threshold: u32,
    /// Votes in the order they were cast (withdrawn ones removed).
    pub votes: Vec<Vote>,
}

/// What a requester asks for when it creates a standing approval.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StandingSpec {
    /// Most uses, 1 to [`STANDING_USES_MAX`].
    pub uses_max: u32,
    /// How long after the decision uses are allowed, 1 ms to
    /// [`STANDING_WINDOW_MS_MAX`].
    pub window_ms: u64,
    /// Empty: every use runs exactly the approved input (its hash).
    /// Otherwise each use names its own input, which must equal the
    /// approved input at each of these JSON pointers (RFC 6901), e.g.
    /// `/order_id`.
    pub bound_pointers: Vec<String>,
}

/// A standing approval's terms and the uses spent, on its record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Standing {
    /// Its terms.
    pub spec: StandingSpec,
    /// The executions that spent a use, in order (at most `uses_max`).
    pub used_by: Vec<String>,
}

/// What the registry declared of an approval's capability when the
/// approval was created: the part of the terms its requester cannot
/// choose. `None` on an approval for a capability that was not registered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisteredCapability {
    /// The capability version.
    pub version: u64,
    /// Its side effect as registered.
    pub side_effect: SideEffect,
    /// Its risk as registered.
    pub risk: Risk,
    /// Its idempotency claim as registered.
    pub idempotent: bool,
    /// The approval type its registration declares, if any: a policy on
    /// that type governs the approval whatever types the requester named.
    pub approval_type: Option<String>,
}
