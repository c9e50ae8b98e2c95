//! No lost writes: every acknowledged mutation is in every node's final state.

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

/// Checks that every acknowledged (`ok`) mutation survived on every node:
///
/// - every node of the header has a final state, every final state was read
///   (its `state_hash` is `Some`) and all hashes are equal;
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
    let hashes: BTreeSet<&str> = finals.iter().filter_map(|state| state.state_hash.as_deref()).collect();
    if hashes.len() > 1 {
        let list: Vec<String> =
            finals.iter().map(|state| format!("node {}: {:?}", state.node, state.state_hash)).collect();
        findings.invalid(format!("the nodes' state hashes differ: {}", list.join(", ")));
    }
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
            Op::ApprovalGet { .. } | Op::ExecGet { .. } | Op::WorkerPoll { .. } => true,
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
                    Op::ApprovalGet { .. } | Op::ExecGet { .. } | Op::WorkerPoll { .. } => Seen::Kept,
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
