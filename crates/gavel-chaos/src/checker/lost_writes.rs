//! No lost writes: every acknowledged mutation is in every node's final state,
//! and the nodes' state hashes agree wherever they were read at one applied index.
//!
//! A state hash describes the state after one applied index, and the leader's
//! ticker may append an entry between the harness's reads of two nodes. So
//! hashes are compared only at equal applied indexes: the harness reads the
//! nodes repeatedly into [`HashObservations`] until one index was seen on all
//! of them, and records the pair at that index. Hashes read at different
//! indexes prove nothing either way (`unknown`); different hashes at one
//! index are a divergence (`invalid`).

use std::collections::{BTreeMap, BTreeSet};

use super::{describe, is_final_status, is_readable, state_name, CheckOptions, CheckResult, Findings};
use crate::history::{ApprovalState, Entry, ExecutionView, FinalState, Op, OpResult, Outcome};

/// One node's final state, indexed.
struct NodeState<'a> {
    node: u64,
    approvals: BTreeMap<&'a str, (ApprovalState, Option<&'a str>)>,
    executions: BTreeMap<&'a str, &'a ExecutionView>,
}

impl<'a> NodeState<'a> {
    fn new(state: &'a FinalState) -> NodeState<'a> {
        NodeState {
            node: state.node,
            approvals: state.approvals.iter().map(|(id, status, by)| (id.as_str(), (*status, by.as_deref()))).collect(),
            executions: state.executions.iter().map(|view| (view.execution_id.as_str(), view)).collect(),
        }
    }

    fn approval(&self, id: &str) -> String {
        match self.approvals.get(id) {
            None => "missing".to_string(),
            Some((status, Some(by))) => format!("{} by {by}", state_name(*status)),
            Some((status, None)) => state_name(*status).to_string(),
        }
    }
}

/// What one node's final state says about one acknowledged write.
enum Seen {
    /// The write is there.
    Kept,
    /// The node's state contradicts the write: lost.
    Lost(String),
    /// The harness could not read the record on this node (it lists only
    /// what it read): no evidence either way.
    NotRead(String),
}

/// An approval the write expects, as one node holds it.
fn approval_check(node: &NodeState<'_>, id: &str, expected: impl Fn(ApprovalState, Option<&str>) -> bool) -> Seen {
    match node.approvals.get(id) {
        None => Seen::NotRead(format!("approval {id} was not read")),
        Some((status, by)) if expected(*status, *by) => Seen::Kept,
        Some(_) => Seen::Lost(format!("approval {id} is {}", node.approval(id))),
    }
}

/// An execution the write expects, as one node holds it.
fn execution_check(node: &NodeState<'_>, id: &str, expected: impl Fn(&ExecutionView) -> bool, wanted: &str) -> Seen {
    match node.executions.get(id) {
        None => Seen::NotRead(format!("execution {id} is missing")),
        Some(view) if expected(view) => Seen::Kept,
        Some(view) => Seen::Lost(format!("execution {id} is {}, not {wanted}", view.status)),
    }
}

/// Compares the final states' hashes, only between nodes read at the same
/// applied index: different hashes at one index are `invalid`; nodes read at
/// different indexes (they never agreed on one while the harness read them)
/// are `unknown`, since a state hash says nothing about another index.
fn compare_state_hashes(finals: &[&FinalState], findings: &mut Findings) {
    let mut by_index: BTreeMap<Option<u64>, Vec<(u64, &str)>> = BTreeMap::new();
    for state in finals {
        if let Some(hash) = state.state_hash.as_deref() {
            by_index.entry(state.applied_index).or_default().push((state.node, hash));
        }
    }
    for (index, nodes) in &by_index {
        let hashes: BTreeSet<&str> = nodes.iter().map(|(_, hash)| *hash).collect();
        if hashes.len() > 1 {
            let list: Vec<String> = nodes.iter().map(|(node, hash)| format!("node {node}: {hash}")).collect();
            let at = index.map_or_else(|| "an unrecorded applied index".to_string(), |index| index.to_string());
            findings.invalid(format!("the nodes' state hashes differ at applied index {at}: {}", list.join(", ")));
        }
    }
    if by_index.len() > 1 {
        let list: Vec<String> = by_index
            .iter()
            .map(|(index, nodes)| {
                let names: Vec<String> = nodes.iter().map(|(node, _)| node.to_string()).collect();
                let at = index.map_or_else(|| "an unrecorded index".to_string(), |index| index.to_string());
                let noun = if names.len() == 1 { "node" } else { "nodes" };
                format!("{noun} {} at {at}", names.join(", "))
            })
            .collect();
        findings.unknown(format!(
            "the nodes' state hashes were read at different applied indexes ({}) and never at a common one: \
             they cannot be compared",
            list.join("; ")
        ));
    }
}

/// The `(applied index, state hash)` pairs read from each node after healing.
///
/// The harness records every read, so that hashes can be compared at any
/// index several nodes were seen at, although the ticker keeps appending.
#[derive(Debug, Clone, Default)]
pub struct HashObservations {
    /// Every node whose pair is wanted.
    nodes: Vec<u64>,
    /// Per node, every hash read at each applied index (more than one when a
    /// status read raced an apply).
    seen: BTreeMap<u64, BTreeMap<u64, BTreeSet<String>>>,
    /// Per node, the last pair read.
    latest: BTreeMap<u64, (u64, String)>,
}

impl HashObservations {
    /// No reads yet of `nodes`.
    pub fn new(nodes: &[u64]) -> HashObservations {
        HashObservations { nodes: nodes.to_vec(), ..HashObservations::default() }
    }

    /// Records one read of `node`.
    pub fn record(&mut self, node: u64, applied_index: u64, state_hash: &str) {
        self.seen.entry(node).or_default().entry(applied_index).or_default().insert(state_hash.to_string());
        self.latest.insert(node, (applied_index, state_hash.to_string()));
    }

    /// Applied indexes every node was seen at, highest first.
    fn common_indexes(&self) -> Vec<u64> {
        let Some((first, rest)) = self.nodes.split_first() else { return Vec::new() };
        let Some(candidates) = self.seen.get(first) else { return Vec::new() };
        candidates
            .keys()
            .rev()
            .copied()
            .filter(|index| rest.iter().all(|node| self.seen.get(node).is_some_and(|seen| seen.contains_key(index))))
            .collect()
    }

    /// The hash every node was seen with at `index`, if there is one.
    fn agreed_hash(&self, index: u64) -> Option<&str> {
        let (first, rest) = self.nodes.split_first()?;
        self.seen.get(first)?.get(&index)?.iter().map(String::as_str).find(|hash| {
            rest.iter().all(|node| {
                self.seen.get(node).and_then(|seen| seen.get(&index)).is_some_and(|hashes| hashes.contains(*hash))
            })
        })
    }

    /// The highest applied index at which every node was seen with one hash.
    pub fn agreed(&self) -> Option<u64> {
        self.common_indexes().into_iter().find(|index| self.agreed_hash(*index).is_some())
    }

    /// The pair to record for each node that was read: at the agreed index
    /// when there is one; else at the highest index every node was seen at
    /// (where their hashes differ: a divergence); else each node's last read.
    pub fn chosen(&self) -> BTreeMap<u64, (u64, String)> {
        if let Some(index) = self.agreed() {
            let hash = self.agreed_hash(index).unwrap_or_default().to_string();
            return self.nodes.iter().map(|node| (*node, (index, hash.clone()))).collect();
        }
        if let Some(index) = self.common_indexes().first().copied() {
            return self
                .seen
                .iter()
                .filter_map(|(node, seen)| Some((*node, (index, seen.get(&index)?.iter().next()?.clone()))))
                .collect();
        }
        self.latest.clone()
    }
}

/// Checks that every acknowledged (`ok`) mutation survived on every node:
///
/// - every node of the header has a final state, every final state was read
///   (its `state_hash` is `Some`), and hashes read at one applied index are
///   equal (hashes read at different indexes are `unknown`: see the module doc);
/// - `ok` create → the approval is not `absent`;
/// - `ok` decide(approve) → `approved` or `consumed`; `ok` decide(reject) → `rejected`;
/// - `ok` consume(e) → the approval is `consumed` by e;
/// - `ok` resume(e, a) → execution e exists and, when the final states track
///   approval a, it is `consumed` by e;
/// - `ok` submit → the execution exists (skipped when the capability requires
///   approval or the result is an approval / `pending_approval` view: no
///   execution exists until the resume);
/// - `ok` cancel → the execution is final;
/// - an accepted (`ok`) report `ok` → the execution is `completed`; `fatal` →
///   `failed`; any other accepted report → the execution exists.
///
/// The final states list only what the harness could read, so a record
/// missing from one node's list is `unknown` (a read failure looks the same),
/// while a record read in a contradicting state is `invalid`, and an
/// execution missing from every readable node is `invalid`. Approvals that
/// no node's final state lists (created by submits) are not checked here.
/// Unreadable nodes are flagged once and not checked write by write. A
/// header node with no final state, or a history with no final state at
/// all, is `unknown`.
pub fn no_lost_writes(history: &[Entry], options: &CheckOptions) -> CheckResult {
    let mut findings = Findings::new("no_lost_writes", options);
    let finals = super::final_states(history);
    if finals.is_empty() {
        findings.unknown("the history has no final state: nothing to compare the writes with".to_string());
        return findings.finish();
    }
    let header = super::header(history);
    if let Some(header) = header {
        for node in &header.nodes {
            if !finals.iter().any(|state| state.node == *node) {
                findings.unknown(format!("node {node} has no final state in the history"));
            }
        }
    }
    for state in finals.iter().filter(|state| state.state_hash.is_none()) {
        findings.invalid(format!("node {}'s state could not be read after healing (no state hash)", state.node));
    }
    compare_state_hashes(&finals, &mut findings);
    let nodes: Vec<NodeState<'_>> =
        finals.iter().filter(|state| is_readable(state)).map(|state| NodeState::new(state)).collect();
    let tracked: BTreeSet<&str> = nodes.iter().flat_map(|node| node.approvals.keys().copied()).collect();
    let requires_approval: BTreeSet<&str> = header
        .map(|header| {
            header
                .capabilities
                .iter()
                .filter(|capability| capability.requires_approval)
                .map(|capability| capability.id.as_str())
                .collect()
        })
        .unwrap_or_default();

    let operations = super::operations(history);
    let (mut checked, mut lost, mut not_read, mut untracked) = (0u64, 0u64, 0u64, 0u64);
    for operation in operations.iter().filter(|operation| operation.outcome == Outcome::Ok) {
        let approval_id = match operation.op {
            Op::ApprovalCreate { id }
            | Op::ApprovalDecide { id, .. }
            | Op::ApprovalConsume { id, .. }
            | Op::ExecResume { approval_id: id, .. } => Some(id.as_str()),
            _ => None,
        };
        let approval_tracked = approval_id.is_some_and(|id| tracked.contains(id));
        if approval_id.is_some() && !approval_tracked {
            untracked += 1;
        }
        let skip = match operation.op {
            // A vote's effect is judged by `policy_quorum` from the trail.
            Op::ApprovalGet { .. } | Op::ExecGet { .. } | Op::WorkerPoll { .. } => true,
            Op::VoteCast { .. } | Op::VoteWithdraw { .. } => true,
            Op::ApprovalCreate { .. } | Op::ApprovalDecide { .. } | Op::ApprovalConsume { .. } => !approval_tracked,
            Op::ExecSubmit { capability, .. } => {
                requires_approval.contains(capability.as_str())
                    || matches!(operation.result, Some(OpResult::Execution(view)) if view.status == "pending_approval")
                    || matches!(operation.result, Some(OpResult::Approval { .. }))
            }
            Op::ExecResume { .. } | Op::ExecCancel { .. } | Op::WorkerReport { .. } => false,
        };
        if skip {
            continue;
        }
        let seen: Vec<(u64, Seen)> = nodes
            .iter()
            .map(|node| {
                let seen = match operation.op {
                    Op::ApprovalCreate { id } => approval_check(node, id, |status, _| status != ApprovalState::Absent),
                    Op::ApprovalDecide { id, approve } => approval_check(node, id, |status, _| {
                        if *approve {
                            matches!(status, ApprovalState::Approved | ApprovalState::Consumed)
                        } else {
                            status == ApprovalState::Rejected
                        }
                    }),
                    Op::ApprovalConsume { id, execution_id } => approval_check(node, id, |status, by| {
                        status == ApprovalState::Consumed && by == Some(execution_id.as_str())
                    }),
                    Op::ExecResume { execution_id, approval_id } => {
                        match execution_check(node, execution_id, |_| true, "present") {
                            Seen::Kept if approval_tracked => approval_check(node, approval_id, |status, by| {
                                status == ApprovalState::Consumed && by == Some(execution_id.as_str())
                            }),
                            other => other,
                        }
                    }
                    Op::ExecSubmit { execution_id, .. } => execution_check(node, execution_id, |_| true, "present"),
                    Op::ExecCancel { execution_id } => {
                        execution_check(node, execution_id, |view| is_final_status(&view.status), "final")
                    }
                    Op::WorkerReport { execution_id, report, .. } => {
                        let wanted = match report.as_str() {
                            "ok" => "completed",
                            "fatal" => "failed",
                            _ => "present",
                        };
                        execution_check(node, execution_id, |view| wanted == "present" || view.status == wanted, wanted)
                    }
                    Op::ApprovalGet { .. }
                    | Op::ExecGet { .. }
                    | Op::WorkerPoll { .. }
                    | Op::VoteCast { .. }
                    | Op::VoteWithdraw { .. } => Seen::Kept,
                };
                (node.node, seen)
            })
            .collect();
        checked += seen.len() as u64;
        let everywhere_missing = !seen.is_empty() && seen.iter().all(|(_, seen)| matches!(seen, Seen::NotRead(_)));
        let execution_op =
            !matches!(operation.op, Op::ApprovalCreate { .. } | Op::ApprovalDecide { .. } | Op::ApprovalConsume { .. });
        if everywhere_missing && execution_op {
            lost += 1;
            findings.invalid(format!(
                "lost write: {} was acknowledged but no node holds the execution",
                describe(operation)
            ));
            continue;
        }
        for (node, seen) in seen {
            match seen {
                Seen::Kept => {}
                Seen::Lost(problem) => {
                    lost += 1;
                    findings.invalid(format!(
                        "lost write: {} was acknowledged but on node {node} {problem}",
                        describe(operation)
                    ));
                }
                Seen::NotRead(problem) => {
                    not_read += 1;
                    findings.unknown(format!(
                        "{} was acknowledged but on node {node} {problem} (the harness may have failed to read it)",
                        describe(operation)
                    ));
                }
            }
        }
    }
    findings.set("nodes", finals.len() as u64);
    findings.set("nodes_readable", nodes.len() as u64);
    findings.set("write_checks", checked);
    findings.set("lost_writes", lost);
    findings.set("not_read", not_read);
    findings.set("untracked_approval_writes", untracked);
    findings.finish()
}
