//! The history of one chaos run: one JSON object per line.
//!
//! Every client operation is recorded twice: an [`Entry::Invoke`] when it is
//! sent and an [`Entry::Complete`] when its outcome is known. Outcomes follow
//! Jepsen: `ok` (it happened, with this result), `fail` (it definitely did not
//! happen: the cluster refused it with a domain code) and `info` (unknown: it
//! timed out or the connection was lost, so it may or may not have happened).
//! Nemesis faults are recorded as [`Entry::Nemesis`] with a start and a stop.
//! The file starts with one [`Entry::Header`] and ends with the final state
//! of every node ([`Entry::Final`]).

use std::io::{BufRead, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};

/// One line of the history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Entry {
    /// The run's parameters: written first.
    Header(Header),
    /// A client sent an operation.
    Invoke(Invoke),
    /// An operation's outcome became known.
    Complete(Complete),
    /// A fault started or stopped.
    Nemesis(NemesisEvent),
    /// What one node holds after healing: written last, once per node.
    Final(FinalState),
    /// The audit tree's head as one node answered `GetCheckpoint` during the run.
    Checkpoint(CheckpointSeen),
    /// The proofs read after healing: each checkpoint seen against the
    /// final tree, and a sample of the final trail's events in it.
    AuditProofs(AuditProofs),
}

/// The run's parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Header {
    /// Seed of the schedule and the workload.
    pub seed: u64,
    /// Whether the nodes ran in network namespaces (partitions possible).
    pub namespaces: bool,
    /// The faults the run was asked to inject.
    pub faults: Vec<FaultKind>,
    /// The capabilities the workload registered.
    pub capabilities: Vec<CapabilityInfo>,
    /// Node ids.
    pub nodes: Vec<u64>,
    /// The approval policy the workload set, if any (absent in older histories).
    #[serde(default)]
    pub policy: Option<PolicyInfo>,
    /// The standing approvals the workload created (absent in older histories).
    #[serde(default)]
    pub standing: Vec<StandingInfo>,
}

/// What the policy checker needs to know about the workload's policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyInfo {
    /// Approvals whose id starts with this were created under the policy.
    pub approval_id_prefix: String,
    /// Distinct eligible approving votes it needs (one factor).
    pub k: u32,
    /// The eligible principals (`kind:id`), the factor's group.
    pub eligible: Vec<String>,
}

/// A standing approval the workload created.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StandingInfo {
    /// Approval id.
    pub approval_id: String,
    /// Uses it allows.
    pub uses_max: u32,
}

/// What the checkers need to know about a capability.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapabilityInfo {
    /// Capability id.
    pub id: String,
    /// "read", "write", "destructive" or "external".
    pub side_effect: String,
    /// Whether it is declared idempotent.
    pub idempotent: bool,
    /// `max_attempts` of its retry config; `None` without a retry config.
    pub max_attempts: Option<u32>,
    /// Whether its calls need an approval first.
    pub requires_approval: bool,
}

/// A client sent an operation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Invoke {
    /// Pairs the invoke with its completion: unique in the run.
    pub op_id: u64,
    /// Milliseconds since the run started (monotonic clock).
    pub time_ms: f64,
    /// The client or worker that sent it. One process runs one operation at a time.
    pub process: u64,
    /// The node the client sent it to first (the SDK may follow a leader hint).
    pub node: u64,
    /// The operation.
    pub op: Op,
}

/// An operation's outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Complete {
    /// The invoke's `op_id`.
    pub op_id: u64,
    /// Milliseconds since the run started.
    pub time_ms: f64,
    /// The invoke's process.
    pub process: u64,
    /// ok, fail or info.
    pub outcome: Outcome,
    /// What an `ok` operation returned; `None` for fail and info.
    pub result: Option<OpResult>,
    /// The stable error code of a `fail` (e.g. "APPROVAL_NOT_APPROVED") or
    /// the transport error of an `info`.
    pub error: Option<String>,
}

/// Jepsen's three outcomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// It happened.
    Ok,
    /// It definitely did not happen.
    Fail,
    /// Unknown: it may or may not have happened.
    Info,
}

/// An approval's status as the register model sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalState {
    /// No approval with this id.
    Absent,
    /// Created, not decided.
    Pending,
    /// Approved, not consumed.
    Approved,
    /// Rejected.
    Rejected,
    /// Approved and consumed.
    Consumed,
    /// Withdrawn (not used by the workload, but read if seen).
    Cancelled,
    /// Pending past its expiry (the workload uses long expiries).
    Expired,
    /// Voided by a policy change (the workload sets its policy once, before
    /// any approval it governs exists, so it never sees one; read if seen).
    Voided,
}

/// The operations the workload performs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "f", rename_all = "snake_case")]
pub enum Op {
    /// CreateApproval with this id (expiry far in the future).
    ApprovalCreate {
        /// Approval id.
        id: String,
    },
    /// DecideApproval.
    ApprovalDecide {
        /// Approval id.
        id: String,
        /// Approve (true) or reject (false).
        approve: bool,
    },
    /// ConsumeApproval by an execution id.
    ApprovalConsume {
        /// Approval id.
        id: String,
        /// The consuming execution id (unique per consume operation).
        execution_id: String,
    },
    /// GetApproval.
    ApprovalGet {
        /// Approval id.
        id: String,
    },
    /// Submit an execution.
    ExecSubmit {
        /// Execution id.
        execution_id: String,
        /// Capability id.
        capability: String,
    },
    /// Resume an execution after its approval was approved.
    ExecResume {
        /// Execution id.
        execution_id: String,
        /// The approval it waited for.
        approval_id: String,
    },
    /// CancelExecution by its caller.
    ExecCancel {
        /// Execution id.
        execution_id: String,
    },
    /// GetExecution (a read of its state or final result).
    ExecGet {
        /// Execution id.
        execution_id: String,
    },
    /// A worker's Poll that may grant a lease.
    WorkerPoll {
        /// Worker id.
        worker_id: String,
    },
    /// CastVote on an approval a policy governs, as `voter`.
    VoteCast {
        /// Approval id.
        id: String,
        /// The voting principal (`kind:id`), whose certificate the call used.
        voter: String,
        /// Approve (true) or deny (false).
        approve: bool,
    },
    /// WithdrawVote of `voter`'s own vote.
    VoteWithdraw {
        /// Approval id.
        id: String,
        /// The withdrawing principal (`kind:id`).
        voter: String,
    },
    /// A worker's Report of one attempt under a lease.
    WorkerReport {
        /// Execution id.
        execution_id: String,
        /// Attempt number the lease was for.
        attempt: u32,
        /// Lease id being reported under.
        lease_id: u64,
        /// "ok", "retryable" or "fatal".
        report: String,
        /// True when the worker deliberately stalled past the lease deadline first.
        late: bool,
    },
}

impl Op {
    /// The serde tag of the operation (`approval_create`, ..., `worker_report`).
    pub fn kind(&self) -> &'static str {
        match self {
            Op::ApprovalCreate { .. } => "approval_create",
            Op::ApprovalDecide { .. } => "approval_decide",
            Op::ApprovalConsume { .. } => "approval_consume",
            Op::ApprovalGet { .. } => "approval_get",
            Op::ExecSubmit { .. } => "exec_submit",
            Op::ExecResume { .. } => "exec_resume",
            Op::ExecCancel { .. } => "exec_cancel",
            Op::ExecGet { .. } => "exec_get",
            Op::WorkerPoll { .. } => "worker_poll",
            Op::VoteCast { .. } => "vote_cast",
            Op::VoteWithdraw { .. } => "vote_withdraw",
            Op::WorkerReport { .. } => "worker_report",
        }
    }

    /// The approval id of an approval register operation (create, decide,
    /// consume, get). Votes are not register operations: the policy checker
    /// judges them from the audit trail.
    pub fn approval_id(&self) -> Option<&str> {
        match self {
            Op::ApprovalCreate { id }
            | Op::ApprovalDecide { id, .. }
            | Op::ApprovalConsume { id, .. }
            | Op::ApprovalGet { id } => Some(id),
            _ => None,
        }
    }

    /// The execution id of an execution or report operation.
    pub fn execution_id(&self) -> Option<&str> {
        match self {
            Op::ExecSubmit { execution_id, .. }
            | Op::ExecResume { execution_id, .. }
            | Op::ExecCancel { execution_id }
            | Op::ExecGet { execution_id }
            | Op::WorkerReport { execution_id, .. } => Some(execution_id),
            _ => None,
        }
    }

    /// Whether the operation may change state (reads and polls are not mutations
    /// for the lost-write check; a poll's lease grant is checked through its result).
    pub fn is_mutation(&self) -> bool {
        !matches!(self, Op::ApprovalGet { .. } | Op::ExecGet { .. } | Op::WorkerPoll { .. })
    }
}

/// What an `ok` operation returned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum OpResult {
    /// An approval operation's view of the approval after it.
    Approval {
        /// Status after the operation (`absent` for a get of an unknown id).
        state: ApprovalState,
        /// Execution that consumed it, when consumed.
        consumed_by: Option<String>,
    },
    /// An execution operation's view of the execution after it.
    Execution(ExecutionView),
    /// A poll: the lease it granted, if any. Written as
    /// `{"kind":"lease","grant":null|{..}}`: serde cannot put a bare
    /// `Option` under an internal tag.
    Lease(#[serde(with = "lease_grant_field")] Option<LeaseGrant>),
    /// A report was accepted.
    Reported,
}

/// The `grant` field that carries [`OpResult::Lease`]'s optional grant.
mod lease_grant_field {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::LeaseGrant;

    #[derive(Serialize)]
    struct Written<'a> {
        grant: &'a Option<LeaseGrant>,
    }

    #[derive(Deserialize)]
    struct Read {
        #[serde(default)]
        grant: Option<LeaseGrant>,
    }

    pub(super) fn serialize<S: Serializer>(grant: &Option<LeaseGrant>, serializer: S) -> Result<S::Ok, S::Error> {
        Written { grant }.serialize(serializer)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<LeaseGrant>, D::Error> {
        Ok(Read::deserialize(deserializer)?.grant)
    }
}

/// An execution as a client saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecutionView {
    /// Execution id.
    pub execution_id: String,
    /// "pending_approval", "queued", "running", "retry_wait", "completed",
    /// "failed", "cancelled" (the lower-case ExecutionStatus without prefix).
    pub status: String,
    /// Attempts started so far.
    pub attempts: u32,
    /// A digest of the final result (status, output JSON or error code);
    /// `None` while not final. Two views of one execution with a final
    /// result must carry the same digest.
    pub final_digest: Option<String>,
}

/// A lease granted by a poll.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeaseGrant {
    /// Execution id.
    pub execution_id: String,
    /// Capability id.
    pub capability: String,
    /// Attempt number (1-based).
    pub attempt: u32,
    /// Lease id (the fencing token).
    pub lease_id: u64,
    /// Lease deadline on the cluster clock (Unix epoch ms).
    pub deadline_ms: i64,
}

/// The faults the nemesis can inject.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    /// SIGKILL the leader, then restart it on the same data.
    KillLeader,
    /// SIGKILL a follower, then restart it.
    KillFollower,
    /// SIGKILL all three nodes, then restart them.
    KillAll,
    /// SIGSTOP a node, then SIGCONT it.
    Pause,
    /// Cut the leader off from the other nodes (both directions).
    PartitionLeader,
    /// Cut a follower off from the other nodes (both directions).
    PartitionFollower,
    /// Cut n1–n2 while n3 still sees both.
    PartitionBridge,
    /// Drop packets in one direction only, between two nodes.
    PartitionOneWay,
    /// Random packet loss on every node.
    PacketLoss,
    /// A lease holder sleeps past its deadline, then reports.
    WorkerStall,
}

impl FaultKind {
    /// Every fault.
    pub const ALL: [FaultKind; 10] = [
        FaultKind::KillLeader,
        FaultKind::KillFollower,
        FaultKind::KillAll,
        FaultKind::Pause,
        FaultKind::PartitionLeader,
        FaultKind::PartitionFollower,
        FaultKind::PartitionBridge,
        FaultKind::PartitionOneWay,
        FaultKind::PacketLoss,
        FaultKind::WorkerStall,
    ];

    /// Whether the fault needs network namespaces and iptables.
    pub fn needs_network(self) -> bool {
        matches!(
            self,
            FaultKind::PartitionLeader
                | FaultKind::PartitionFollower
                | FaultKind::PartitionBridge
                | FaultKind::PartitionOneWay
                | FaultKind::PacketLoss
        )
    }
}

/// A fault started or stopped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NemesisEvent {
    /// Milliseconds since the run started.
    pub time_ms: f64,
    /// Which fault.
    pub fault: FaultKind,
    /// start or stop.
    pub phase: Phase,
    /// Nodes it hit.
    pub nodes: Vec<u64>,
    /// Whether the fault was really injected (false: it could not be, e.g.
    /// no namespaces; a run with such an event cannot be judged valid).
    pub injected: bool,
    /// Free-form detail (the iptables rules, the leader at the time, ...).
    pub detail: String,
}

/// start or stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// The fault began.
    Start,
    /// The fault was healed.
    Stop,
}

/// What one node holds after healing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FinalState {
    /// Node id.
    pub node: u64,
    /// Its state hash (`None` when it could not be read).
    pub state_hash: Option<String>,
    /// Its last applied log index.
    pub applied_index: Option<u64>,
    /// The leader it saw.
    pub leader: Option<u64>,
    /// Every approval the workload created, read through this node.
    pub approvals: Vec<(String, ApprovalState, Option<String>)>,
    /// Every execution the workload submitted, read through this node.
    pub executions: Vec<ExecutionView>,
    /// The whole audit trail, read through this node.
    pub audit: Vec<AuditEvent>,
    /// Leader changes this node observed during the run (term changes seen by the harness).
    pub leader_changes: u64,
}

/// The audit-trail fields the checkers use.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditEvent {
    /// Cursor.
    pub cursor: u64,
    /// Event type, e.g. "capability.started".
    pub event_type: String,
    /// Execution concerned.
    pub execution_id: Option<String>,
    /// Approval concerned.
    pub approval_id: Option<String>,
    /// Attempt number.
    pub attempt: Option<u32>,
    /// Lease id.
    pub lease_id: Option<u64>,
    /// Failure or cancellation code.
    pub code: Option<String>,
    /// The principal that caused it (the voter of `approval.vote_cast`).
    #[serde(default)]
    pub principal: Option<String>,
    /// `approve` or `deny` for `approval.vote_cast` (its `vote` attribute).
    #[serde(default)]
    pub vote: Option<String>,
}

/// The audit tree's head as one node answered `GetCheckpoint`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointSeen {
    /// Milliseconds since the run started.
    pub time_ms: f64,
    /// The node that answered.
    pub node: u64,
    /// Tree size (leaves).
    pub size: u64,
    /// Tree root, lower-case hex.
    pub root: String,
}

/// The proofs read after healing, all against one final tree head.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditProofs {
    /// The node the proofs were read from.
    pub node: u64,
    /// The final tree head (`None` when it could not be read).
    pub head: Option<TreeHead>,
    /// One consistency proof per distinct checkpoint seen (all of them).
    pub consistency: Vec<ConsistencyRecord>,
    /// One inclusion proof per sampled event of the final trail.
    pub inclusion: Vec<InclusionRecord>,
}

/// A tree size and its root (lower-case hex).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TreeHead {
    /// Leaves.
    pub size: u64,
    /// Root, lower-case hex.
    pub root: String,
}

/// `GetConsistencyProof` from a checkpoint seen to the final head.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConsistencyRecord {
    /// The checkpoint seen during the run.
    pub old: TreeHead,
    /// The proof's hashes (lower-case hex); empty on error.
    pub proof: Vec<String>,
    /// The newer size and root the node answered with (`None` on error).
    pub new: Option<TreeHead>,
    /// The error, when the proof could not be read.
    pub error: Option<String>,
}

/// `GetInclusionProof` of one event of the final trail in the final head.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InclusionRecord {
    /// The event's cursor (leaf `cursor - 1`).
    pub cursor: u64,
    /// The leaf hash the node answered with (lower-case hex).
    pub leaf_hash: String,
    /// The audit path (lower-case hex).
    pub proof: Vec<String>,
    /// The tree size and root the proof is against (`None` on error).
    pub head: Option<TreeHead>,
    /// The event's canonical bytes, when the node still keeps them.
    pub canonical_event: Option<String>,
    /// The error, when the proof could not be read.
    pub error: Option<String>,
}

/// Appends entries to a JSONL file, one line each, flushed per line.
pub struct HistoryWriter {
    out: std::io::BufWriter<std::fs::File>,
}

impl HistoryWriter {
    /// Creates (truncates) the file.
    pub fn create(path: &Path) -> std::io::Result<HistoryWriter> {
        Ok(HistoryWriter { out: std::io::BufWriter::new(std::fs::File::create(path)?) })
    }

    /// Writes one entry as one line.
    pub fn write(&mut self, entry: &Entry) -> std::io::Result<()> {
        serde_json::to_writer(&mut self.out, entry)?;
        self.out.write_all(b"\n")?;
        self.out.flush()
    }
}

/// Reads a whole history file.
pub fn read_history(path: &Path) -> std::io::Result<Vec<Entry>> {
    let file = std::io::BufReader::new(std::fs::File::open(path)?);
    let mut entries = Vec::new();
    for (number, line) in file.lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let entry = serde_json::from_str(&line).map_err(|error| {
            std::io::Error::new(std::io::ErrorKind::InvalidData, format!("history line {}: {error}", number + 1))
        })?;
        entries.push(entry);
    }
    Ok(entries)
}
