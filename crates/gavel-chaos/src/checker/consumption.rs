//! At most one consumption per approval, cluster-wide.

use std::collections::{BTreeMap, BTreeSet};

use super::{is_readable, state_name, CheckOptions, CheckResult, Findings};
use crate::history::{ApprovalState, Entry, Op, OpResult, Outcome};

/// Checks that each approval was consumed by at most one execution (a
/// standing approval the header lists is left to `policy_quorum`):
///
/// - the execution ids of all `ok` consumes (`ApprovalConsume`, and
///   `ExecResume`, which consumes its approval) of one approval are one and
///   the same (two distinct ids: `invalid`);
/// - every `ok` approval view that shows `consumed` (get and consume results)
///   and every readable node's final state of a consumed approval names that
///   same execution (or, with no `ok` consume in the history, all of them
///   name one execution); a `consumed` view without `consumed_by` cannot be
///   judged (`unknown`);
/// - the readable nodes' final states agree on every approval's state and
///   consumer (a node whose list lacks an approval the others read is
///   `unknown`: the harness lists only what it could read).
///
/// Unreadable nodes (no state hash, empty lists) are skipped here; the
/// lost-writes checker flags them.
pub fn at_most_one_consumption(history: &[Entry], options: &CheckOptions) -> CheckResult {
    let mut findings = Findings::new("at_most_one_consumption", options);
    let operations = super::operations(history);
    // A standing approval is spent up to N times: `policy_quorum` bounds it.
    let standing = super::standing_ids(history);
    // Per approval: consumers by ok consume, and consumers named by views.
    let mut consumers: BTreeMap<&str, BTreeMap<&str, Vec<u64>>> = BTreeMap::new();
    let mut named: BTreeMap<&str, BTreeMap<&str, Vec<String>>> = BTreeMap::new();
    let (mut ok_consumes, mut consumed_views) = (0u64, 0u64);
    for operation in &operations {
        if operation.outcome != Outcome::Ok {
            continue;
        }
        match operation.op {
            Op::ApprovalConsume { id, execution_id } | Op::ExecResume { approval_id: id, execution_id }
                if !standing.contains(id.as_str()) =>
            {
                ok_consumes += 1;
                consumers.entry(id).or_default().entry(execution_id).or_default().push(operation.op_id);
            }
            _ => {}
        }
        if let (Some(id), Some(OpResult::Approval { state: ApprovalState::Consumed, consumed_by })) =
            (operation.op.approval_id(), operation.result)
        {
            consumed_views += 1;
            match consumed_by {
                Some(by) => named.entry(id).or_default().entry(by).or_default().push(format!("op {}", operation.op_id)),
                None => findings.unknown(format!(
                    "approval {id}: op {} saw it consumed without naming the consumer",
                    operation.op_id
                )),
            }
        }
    }
    let finals: Vec<_> = super::final_states(history).into_iter().filter(|state| is_readable(state)).collect();
    for state in &finals {
        for (id, approval_state, consumed_by) in &state.approvals {
            if *approval_state != ApprovalState::Consumed {
                continue;
            }
            match consumed_by {
                Some(by) => named.entry(id).or_default().entry(by).or_default().push(format!("node {}", state.node)),
                None => findings.unknown(format!(
                    "approval {id}: node {}'s final state shows it consumed without naming the consumer",
                    state.node
                )),
            }
        }
    }

    let mut multiply_consumed = 0u64;
    for (id, by) in &consumers {
        if by.len() > 1 {
            multiply_consumed += 1;
            let list: Vec<String> = by.iter().map(|(execution, ops)| format!("{execution} (ops {ops:?})")).collect();
            findings.invalid(format!(
                "approval {id} was consumed by {} executions, each acknowledged: {}",
                by.len(),
                list.join(", ")
            ));
        }
    }
    for (id, names) in &named {
        let winners: BTreeSet<&str> = consumers.get(id).map(|by| by.keys().copied().collect()).unwrap_or_default();
        if winners.len() > 1 {
            continue; // already flagged above
        }
        match winners.iter().next() {
            Some(winner) => {
                for (by, sources) in names.iter().filter(|(by, _)| *by != winner) {
                    findings.invalid(format!(
                        "approval {id} was consumed by {winner} (ok consume) but {} name {by} as its consumer",
                        sources.join(", ")
                    ));
                }
            }
            None if names.len() > 1 => {
                let list: Vec<String> =
                    names.iter().map(|(by, sources)| format!("{by} (seen by {})", sources.join(", "))).collect();
                findings
                    .invalid(format!("approval {id} is seen consumed by different executions: {}", list.join("; ")));
            }
            None => {}
        }
    }

    // The nodes agree on every approval.
    let mut disagreements = 0u64;
    if finals.len() > 1 {
        let views: Vec<BTreeMap<&str, (ApprovalState, Option<&str>)>> = finals
            .iter()
            .map(|state| {
                state.approvals.iter().map(|(id, status, by)| (id.as_str(), (*status, by.as_deref()))).collect()
            })
            .collect();
        let all_ids: BTreeSet<&str> = views.iter().flat_map(|view| view.keys().copied()).collect();
        for id in all_ids {
            let seen: Vec<Option<&(ApprovalState, Option<&str>)>> = views.iter().map(|view| view.get(id)).collect();
            let first = seen.iter().flatten().next();
            if seen.iter().flatten().all(|value| Some(value) == first) {
                // Missing on some node: the harness lists only what it could read.
                if seen.iter().any(Option::is_none) {
                    let missing: Vec<u64> = finals
                        .iter()
                        .zip(&seen)
                        .filter(|(_, view)| view.is_none())
                        .map(|(state, _)| state.node)
                        .collect();
                    findings.unknown(format!("approval {id} was not read on nodes {missing:?}"));
                }
                continue;
            }
            disagreements += 1;
            let list: Vec<String> = finals
                .iter()
                .zip(&seen)
                .map(|(state, view)| match view {
                    None => format!("node {}: missing", state.node),
                    Some((status, Some(by))) => format!("node {}: {} by {by}", state.node, state_name(*status)),
                    Some((status, None)) => format!("node {}: {}", state.node, state_name(*status)),
                })
                .collect();
            findings.invalid(format!("approval {id}: the nodes' final states disagree ({})", list.join(", ")));
        }
    }
    findings.set("approvals_consumed", consumers.len() as u64);
    findings.set("ok_consumes", ok_consumes);
    findings.set("consumed_views", consumed_views);
    findings.set("approvals_multiply_consumed", multiply_consumed);
    findings.set("final_disagreements", disagreements);
    findings.set("nodes_compared", finals.len() as u64);
    findings.finish()
}
