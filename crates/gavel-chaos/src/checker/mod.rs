//! The checkers that judge a recorded history.
//!
//! Every checker takes the whole history as a slice of [`Entry`] (so a
//! simulation test can build one in memory) and returns one [`CheckResult`]:
//! a [`Verdict`], a bounded list of human-readable anomalies and a few
//! counters. [`check_all`] runs them all and combines the verdicts: `invalid`
//! dominates `unknown`, which dominates `valid`.
//!
//! - `invalid` means the history proves a guarantee was broken.
//! - `unknown` means the history cannot settle it (search budget exhausted,
//!   evidence missing, a fault that could not be injected, coverage not met).
//! - `valid` means every rule was checked and held.
//!
//! The checkers and their rules (each function's doc, and each submodule's,
//! has the details):
//!
//! 1. [`linearizable_approvals`]: per approval id, the ok/fail/info operations
//!    admit a linearization against the approval register model.
//! 2. [`at_most_one_consumption`]: at most one execution ever consumed an
//!    approval, and every view of a consumed approval names it.
//! 3. [`one_final_result`]: one final digest per execution, and a final
//!    result never changes or goes back to non-final.
//! 4. [`fencing()`]: no report accepted under an expired, revoked or superseded lease.
//! 5. [`retry_discipline`]: no re-run the side-effect rule forbids, no attempt past the budget.
//! 6. [`no_lost_writes`]: every acknowledged mutation is in every node's final
//!    state, and state hashes read at one applied index are equal.
//! 7. [`liveness()`]: after healing there is one agreed leader and every execution finished.
//! 8. [`coverage()`]: the run really exercised the faults it was asked for.
//! 9. [`audit_proofs()`]: every checkpoint seen is a prefix of the final audit
//!    tree (verified consistency proofs), and sampled events of the final
//!    trail are in it (verified inclusion proofs).
//!
//! 10. [`policy_quorum`]: no approval the header's policy governs was
//!     consumed without k distinct eligible approving votes standing before
//!     its approval in the final trail, and no standing approval of the
//!     header was spent by more executions than its uses (issue #25).
//!
//! A standing approval (listed in the header) is spent up to N times by
//! design, so it is not a one-shot register: [`linearizable_approvals`] and
//! [`at_most_one_consumption`] leave its id to [`policy_quorum`], which
//! bounds its uses instead ([`standing_ids`]).
//!
//! Operations are paired by `op_id` ([`operations`]); an invoke without a
//! completion counts as `info` (it may or may not have happened).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::history::{
    ApprovalState, AuditEvent, Entry, FaultKind, FinalState, Header, NemesisEvent, Op, OpResult, Outcome,
};

pub mod audit_proofs;
pub mod consumption;
pub mod coverage;
pub mod fencing;
pub mod final_result;
pub mod linearizable;
pub mod liveness;
pub mod lost_writes;
pub mod policy;
pub mod retry;

pub use audit_proofs::audit_proofs;
pub use consumption::at_most_one_consumption;
pub use coverage::coverage;
pub use fencing::fencing;
pub use final_result::one_final_result;
pub use linearizable::linearizable_approvals;
pub use liveness::liveness;
pub use lost_writes::no_lost_writes;
pub use policy::policy_quorum;
pub use retry::retry_discipline;

/// The checkers' names, in the order [`check_all`] reports them.
pub const CHECKER_NAMES: [&str; 10] = [
    "linearizable_approvals",
    "at_most_one_consumption",
    "one_final_result",
    "fencing",
    "retry_discipline",
    "no_lost_writes",
    "liveness",
    "coverage",
    "audit_proofs",
    "policy_quorum",
];

/// A checker's judgement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Every rule was checked and held.
    Valid,
    /// The history proves a rule was broken.
    Invalid,
    /// The history cannot settle it (budget exhausted, evidence missing, coverage not met).
    Unknown,
}

impl Verdict {
    /// How bad the verdict is: valid 0, unknown 1, invalid 2.
    pub fn severity(self) -> u8 {
        match self {
            Verdict::Valid => 0,
            Verdict::Unknown => 1,
            Verdict::Invalid => 2,
        }
    }

    /// The worse of two verdicts: invalid dominates unknown, which dominates valid.
    pub fn combine(self, other: Verdict) -> Verdict {
        if other.severity() > self.severity() {
            other
        } else {
            self
        }
    }

    /// The lower-case name ("valid", "invalid", "unknown").
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Valid => "valid",
            Verdict::Invalid => "invalid",
            Verdict::Unknown => "unknown",
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.as_str())
    }
}

/// What the checkers need to know beyond the history. Deserializing fills
/// missing fields from [`CheckOptions::default`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CheckOptions {
    /// Anomalies kept in each [`CheckResult::details`] (all are counted).
    pub max_details: usize,
    /// Search steps the linearizability search may spend on one approval id
    /// before it gives up on that id with `unknown`.
    pub max_search_steps_per_key: u64,
    /// Error codes of `fail` outcomes that say nothing about the approval's
    /// state (bad input, self-approval, ...): such an operation is treated as
    /// having no effect and no observation. Matched against the first word
    /// of `Complete::error`.
    pub stateless_fail_codes: BTreeSet<String>,
    /// Minimum `injected: true` starts of each fault the header asks for.
    pub min_fault_count: u64,
    /// Minimum leader changes the run must have seen.
    pub min_leader_changes: u64,
    /// Leader changes counted by the harness (the larger of this and the
    /// nodes' `FinalState::leader_changes` is used).
    pub leader_changes: u64,
    /// Minimum late reports (`Op::WorkerReport { late: true }`) the run must have sent.
    pub min_late_reports: u64,
    /// Executions allowed to be unfinished at the end (their workers were dead).
    pub allowed_unfinished: BTreeSet<String>,
    /// Whether an execution still in `pending_approval` at the end is fine
    /// (it waits for a human, not for the cluster).
    pub allow_pending_approval: bool,
}

impl Default for CheckOptions {
    fn default() -> CheckOptions {
        let stateless = [
            "INVALID_ARGUMENT",
            "CAPABILITY_NOT_FOUND",
            "CAPABILITY_INVALID",
            "INPUT_INVALID",
            "UNAUTHENTICATED",
            "APPROVAL_SELF_APPROVAL",
            "APPROVAL_INPUT_MISMATCH",
            "APPROVAL_EXPIRED",
            "REQUEST_ID_REUSED",
            "UNAVAILABLE",
            "DEADLINE_EXCEEDED",
            "RESOURCE_EXHAUSTED",
            "PERMISSION_DENIED",
        ];
        CheckOptions {
            max_details: 20,
            max_search_steps_per_key: 200_000,
            stateless_fail_codes: stateless.iter().map(|code| code.to_string()).collect(),
            min_fault_count: 2,
            min_leader_changes: 2,
            leader_changes: 0,
            min_late_reports: 20,
            allowed_unfinished: BTreeSet::new(),
            allow_pending_approval: true,
        }
    }
}

/// One checker's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckResult {
    /// The checker's name (one of [`CHECKER_NAMES`]).
    pub name: String,
    /// Its verdict.
    pub verdict: Verdict,
    /// The first anomalies, one sentence each (at most [`CheckOptions::max_details`]).
    pub details: Vec<String>,
    /// How many anomalies were found in all (`details` may hold fewer).
    pub anomalies: usize,
    /// Counters (what was checked, how much work it took).
    pub stats: BTreeMap<String, u64>,
}

impl CheckResult {
    /// A counter, 0 when absent.
    pub fn stat(&self, key: &str) -> u64 {
        self.stats.get(key).copied().unwrap_or(0)
    }
}

/// The results of all checkers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckReport {
    /// The combined verdict: the worst of the results'.
    pub verdict: Verdict,
    /// One result per checker, in [`CHECKER_NAMES`] order.
    pub results: Vec<CheckResult>,
}

impl CheckReport {
    /// Builds a report from results, combining their verdicts.
    pub fn from_results(results: Vec<CheckResult>) -> CheckReport {
        let verdict = results.iter().fold(Verdict::Valid, |verdict, result| verdict.combine(result.verdict));
        CheckReport { verdict, results }
    }

    /// The result of the checker with this name.
    pub fn result(&self, name: &str) -> Option<&CheckResult> {
        self.results.iter().find(|result| result.name == name)
    }
}

/// Runs every checker on the history.
pub fn check_all(history: &[Entry], options: &CheckOptions) -> CheckReport {
    CheckReport::from_results(vec![
        linearizable_approvals(history, options),
        at_most_one_consumption(history, options),
        one_final_result(history, options),
        fencing(history, options),
        retry_discipline(history, options),
        no_lost_writes(history, options),
        liveness(history, options),
        coverage(history, options),
        audit_proofs(history, options),
        policy_quorum(history, options),
    ])
}

/// One logical operation: an invoke paired with its completion.
#[derive(Debug, Clone, PartialEq)]
pub struct Operation<'a> {
    /// The operation's id.
    pub op_id: u64,
    /// The client or worker that ran it.
    pub process: u64,
    /// The node it was sent to first.
    pub node: u64,
    /// When it was invoked (ms since the run started).
    pub invoke_ms: f64,
    /// When its outcome became known; `None` when the history has no completion.
    pub complete_ms: Option<f64>,
    /// Its outcome; `info` when the history has no completion.
    pub outcome: Outcome,
    /// The operation.
    pub op: &'a Op,
    /// What it returned (`ok` only).
    pub result: Option<&'a OpResult>,
    /// The error code of a `fail`, the transport error of an `info`.
    pub error: Option<&'a str>,
}

impl Operation<'_> {
    /// Whether the outcome is `ok`.
    pub fn is_ok(&self) -> bool {
        self.outcome == Outcome::Ok
    }

    /// Completion minus invoke, for completed operations.
    pub fn latency_ms(&self) -> Option<f64> {
        self.complete_ms.map(|complete| (complete - self.invoke_ms).max(0.0))
    }

    /// The latest time the operation can have taken effect: its completion
    /// for `ok` and `fail`, +infinity for `info`.
    pub fn effect_deadline_ms(&self) -> f64 {
        match (self.outcome, self.complete_ms) {
            (Outcome::Info, _) | (_, None) => f64::INFINITY,
            (_, Some(complete)) => complete.max(self.invoke_ms),
        }
    }

    /// The first word of the error (the stable domain code), if any.
    pub fn error_code(&self) -> Option<&str> {
        let error = self.error?;
        error.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).find(|word| !word.is_empty())
    }
}

/// Pairs every invoke with its completion, in invoke order. A repeated
/// `op_id` keeps its first invoke and first completion; a completion
/// without an invoke is ignored.
pub fn operations(history: &[Entry]) -> Vec<Operation<'_>> {
    let mut index: HashMap<u64, usize> = HashMap::new();
    let mut operations: Vec<Operation<'_>> = Vec::new();
    for entry in history {
        match entry {
            Entry::Invoke(invoke) => {
                if index.contains_key(&invoke.op_id) {
                    continue;
                }
                index.insert(invoke.op_id, operations.len());
                operations.push(Operation {
                    op_id: invoke.op_id,
                    process: invoke.process,
                    node: invoke.node,
                    invoke_ms: invoke.time_ms,
                    complete_ms: None,
                    outcome: Outcome::Info,
                    op: &invoke.op,
                    result: None,
                    error: None,
                });
            }
            Entry::Complete(complete) => {
                let Some(&position) = index.get(&complete.op_id) else { continue };
                let operation = &mut operations[position];
                if operation.complete_ms.is_some() {
                    continue;
                }
                operation.complete_ms = Some(complete.time_ms);
                operation.outcome = complete.outcome;
                operation.result = if complete.outcome == Outcome::Ok { complete.result.as_ref() } else { None };
                operation.error = complete.error.as_deref();
            }
            _ => {}
        }
    }
    operations
}

/// The ids of the standing approvals the header lists: approvals a run
/// spends up to their `uses_max` times, judged by [`policy_quorum`] only.
pub fn standing_ids(history: &[Entry]) -> BTreeSet<&str> {
    header(history)
        .map(|header| header.standing.iter().map(|info| info.approval_id.as_str()).collect())
        .unwrap_or_default()
}

/// The history's header, if it has one.
pub fn header(history: &[Entry]) -> Option<&Header> {
    history.iter().find_map(|entry| match entry {
        Entry::Header(header) => Some(header),
        _ => None,
    })
}

/// Every node's final state, in history order.
pub fn final_states(history: &[Entry]) -> Vec<&FinalState> {
    history
        .iter()
        .filter_map(|entry| match entry {
            Entry::Final(state) => Some(state),
            _ => None,
        })
        .collect()
}

/// Every nemesis event, in history order.
pub fn nemesis_events(history: &[Entry]) -> Vec<&NemesisEvent> {
    history
        .iter()
        .filter_map(|entry| match entry {
            Entry::Nemesis(event) => Some(event),
            _ => None,
        })
        .collect()
}

/// Whether a final state was actually read (a node that could not be read
/// has no hash and empty lists).
pub(crate) fn is_readable(state: &FinalState) -> bool {
    state.state_hash.is_some() || !state.approvals.is_empty() || !state.executions.is_empty() || !state.audit.is_empty()
}

/// The snake_case name of a fault.
pub fn fault_name(fault: FaultKind) -> &'static str {
    match fault {
        FaultKind::KillLeader => "kill_leader",
        FaultKind::KillFollower => "kill_follower",
        FaultKind::KillAll => "kill_all",
        FaultKind::Pause => "pause",
        FaultKind::PartitionLeader => "partition_leader",
        FaultKind::PartitionFollower => "partition_follower",
        FaultKind::PartitionBridge => "partition_bridge",
        FaultKind::PartitionOneWay => "partition_one_way",
        FaultKind::PacketLoss => "packet_loss",
        FaultKind::WorkerStall => "worker_stall",
    }
}

/// The snake_case name of an approval state.
pub(crate) fn state_name(state: ApprovalState) -> &'static str {
    match state {
        ApprovalState::Absent => "absent",
        ApprovalState::Pending => "pending",
        ApprovalState::Approved => "approved",
        ApprovalState::Rejected => "rejected",
        ApprovalState::Consumed => "consumed",
        ApprovalState::Cancelled => "cancelled",
        ApprovalState::Expired => "expired",
        ApprovalState::Voided => "voided",
    }
}

/// Whether an execution status is final.
pub(crate) fn is_final_status(status: &str) -> bool {
    matches!(status, "completed" | "failed" | "cancelled")
}

/// A short label of an operation, e.g. `consume(a1, by e1)`.
pub fn op_label(op: &Op) -> String {
    match op {
        Op::ApprovalCreate { id } => format!("create({id})"),
        Op::ApprovalDecide { id, approve } => {
            format!("decide({id}, {})", if *approve { "approve" } else { "reject" })
        }
        Op::ApprovalConsume { id, execution_id } => format!("consume({id}, by {execution_id})"),
        Op::ApprovalGet { id } => format!("get({id})"),
        Op::ExecSubmit { execution_id, capability } => format!("submit({execution_id}, {capability})"),
        Op::ExecResume { execution_id, approval_id } => format!("resume({execution_id}, {approval_id})"),
        Op::ExecCancel { execution_id } => format!("cancel({execution_id})"),
        Op::ExecGet { execution_id } => format!("exec_get({execution_id})"),
        Op::WorkerPoll { worker_id } => format!("poll({worker_id})"),
        Op::WorkerReport { execution_id, attempt, lease_id, report, late } => format!(
            "report({execution_id}, attempt {attempt}, lease {lease_id}, {report}{})",
            if *late { ", late" } else { "" }
        ),
        Op::VoteCast { id, voter, approve } => {
            format!("vote({id}, {voter}, {})", if *approve { "approve" } else { "deny" })
        }
        Op::VoteWithdraw { id, voter } => format!("withdraw_vote({id}, {voter})"),
    }
}

/// A short label of a result, e.g. `consumed by e1`.
pub fn result_label(result: &OpResult) -> String {
    match result {
        OpResult::Approval { state, consumed_by: Some(by) } => format!("{} by {by}", state_name(*state)),
        OpResult::Approval { state, consumed_by: None } => state_name(*state).to_string(),
        OpResult::Execution(view) => match &view.final_digest {
            Some(digest) => format!("{} (attempts {}, digest {digest})", view.status, view.attempts),
            None => format!("{} (attempts {})", view.status, view.attempts),
        },
        OpResult::Lease(Some(grant)) => {
            format!("lease {} for {} attempt {}", grant.lease_id, grant.execution_id, grant.attempt)
        }
        OpResult::Lease(None) => "no lease".to_string(),
        OpResult::Reported => "reported".to_string(),
    }
}

/// One line describing an operation: id, process, interval, op and outcome.
pub fn describe(operation: &Operation<'_>) -> String {
    let interval = match operation.complete_ms {
        Some(complete) => format!("{:.1}–{:.1} ms", operation.invoke_ms, complete),
        None => format!("{:.1}–∞ ms", operation.invoke_ms),
    };
    let outcome = match operation.outcome {
        Outcome::Ok => match operation.result {
            Some(result) => format!("ok → {}", result_label(result)),
            None => "ok".to_string(),
        },
        Outcome::Fail => format!("fail({})", operation.error.unwrap_or("?")),
        Outcome::Info if operation.complete_ms.is_none() => "info (never completed)".to_string(),
        Outcome::Info => "info".to_string(),
    };
    format!("op {} (process {}, {interval}) {} {outcome}", operation.op_id, operation.process, op_label(operation.op))
}

/// Collects one checker's anomalies, bounded, and its counters.
pub(crate) struct Findings {
    name: &'static str,
    verdict: Verdict,
    details: Vec<String>,
    anomalies: usize,
    max_details: usize,
    stats: BTreeMap<String, u64>,
}

impl Findings {
    /// Starts a checker's findings.
    pub(crate) fn new(name: &'static str, options: &CheckOptions) -> Findings {
        Findings {
            name,
            verdict: Verdict::Valid,
            details: Vec::new(),
            anomalies: 0,
            max_details: options.max_details,
            stats: BTreeMap::new(),
        }
    }

    /// Records an anomaly with its verdict.
    pub(crate) fn flag(&mut self, verdict: Verdict, detail: String) {
        self.verdict = self.verdict.combine(verdict);
        self.anomalies += 1;
        if self.details.len() < self.max_details {
            let prefix = if verdict == Verdict::Invalid { "" } else { "(unknown) " };
            self.details.push(format!("{prefix}{detail}"));
        }
    }

    /// Records a proof that a rule was broken.
    pub(crate) fn invalid(&mut self, detail: String) {
        self.flag(Verdict::Invalid, detail);
    }

    /// Records something the history cannot settle.
    pub(crate) fn unknown(&mut self, detail: String) {
        self.flag(Verdict::Unknown, detail);
    }

    /// Sets a counter.
    pub(crate) fn set(&mut self, key: &str, value: u64) {
        self.stats.insert(key.to_string(), value);
    }

    /// The result.
    pub(crate) fn finish(self) -> CheckResult {
        CheckResult {
            name: self.name.to_string(),
            verdict: self.verdict,
            details: self.details,
            anomalies: self.anomalies,
            stats: self.stats,
        }
    }
}

/// The audit trail the execution checkers read: the longest trail of any
/// node, in cursor order, and what differed between the nodes' trails.
pub(crate) struct ReferenceAudit<'a> {
    /// The events, ordered by cursor.
    pub(crate) events: Vec<&'a AuditEvent>,
    /// Disagreements between nodes: a node whose trail is a strict prefix
    /// of the reference lags (`unknown`); one that differs diverged (`invalid`).
    pub(crate) issues: Vec<(Verdict, String)>,
}

/// Picks the longest audit trail and compares every readable node's trail to it.
pub(crate) fn reference_audit<'a>(finals: &[&'a FinalState]) -> ReferenceAudit<'a> {
    let mut issues = Vec::new();
    let Some(reference) = finals.iter().copied().max_by_key(|state| state.audit.len()) else {
        return ReferenceAudit { events: Vec::new(), issues };
    };
    for state in finals.iter().copied().filter(|state| is_readable(state)) {
        if std::ptr::eq(state, reference) {
            continue;
        }
        let mismatch = state.audit.iter().zip(&reference.audit).position(|(mine, theirs)| mine != theirs);
        match mismatch {
            Some(position) => issues.push((
                Verdict::Invalid,
                format!(
                    "audit trails diverge: node {} and node {} differ at position {position} ({:?} vs {:?})",
                    state.node, reference.node, state.audit[position], reference.audit[position]
                ),
            )),
            None if state.audit.len() < reference.audit.len() => issues.push((
                Verdict::Unknown,
                format!(
                    "node {}'s audit trail is a strict prefix of node {}'s ({} of {} events): it lags",
                    state.node,
                    reference.node,
                    state.audit.len(),
                    reference.audit.len()
                ),
            )),
            None => {}
        }
    }
    let mut events: Vec<&AuditEvent> = reference.audit.iter().collect();
    if events.windows(2).any(|pair| pair[0].cursor >= pair[1].cursor) {
        issues.push((
            Verdict::Unknown,
            format!("node {}'s audit trail is not in strictly increasing cursor order", reference.node),
        ));
        events.sort_by_key(|event| event.cursor);
    }
    ReferenceAudit { events, issues }
}
