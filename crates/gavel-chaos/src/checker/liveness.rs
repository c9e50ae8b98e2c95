//! Liveness after healing: one agreed leader, every execution finished.

use std::collections::{BTreeMap, BTreeSet};

use super::{is_final_status, is_readable, CheckOptions, CheckResult, Findings};
use crate::history::Entry;

/// Checks that the cluster recovered once the faults were healed:
///
/// - every readable final state reports a leader and they all name the same
///   one (no final state at all: `unknown`; unreadable nodes are left to the
///   lost-writes checker unless no node could be read);
/// - every execution in any readable node's final state is final
///   (`completed`, `failed` or `cancelled`), unless it is listed in
///   [`CheckOptions::allowed_unfinished`] or, with
///   [`CheckOptions::allow_pending_approval`], still waits in
///   `pending_approval` for a human decision.
pub fn liveness(history: &[Entry], options: &CheckOptions) -> CheckResult {
    let mut findings = Findings::new("liveness", options);
    let finals = super::final_states(history);
    if finals.is_empty() {
        findings.unknown("the history has no final state: cannot tell whether the cluster recovered".to_string());
        return findings.finish();
    }
    // Unreadable nodes (flagged by the lost-writes checker) report no leader
    // because they could not be read; they do not vote unless all are.
    let readable: Vec<_> = finals.iter().copied().filter(|state| is_readable(state)).collect();
    let voters = if readable.is_empty() { finals.clone() } else { readable };
    let leaders: BTreeSet<Option<u64>> = voters.iter().map(|state| state.leader).collect();
    let list = || -> String {
        let nodes: Vec<String> = voters
            .iter()
            .map(|state| match state.leader {
                Some(leader) => format!("node {} sees {leader}", state.node),
                None => format!("node {} sees none", state.node),
            })
            .collect();
        nodes.join(", ")
    };
    if leaders.iter().all(Option::is_none) {
        findings.invalid(format!("no node reports a leader after healing ({})", list()));
    } else if leaders.len() > 1 {
        findings.invalid(format!("the nodes do not agree on a leader after healing ({})", list()));
    }

    let mut unfinished: BTreeMap<&str, Vec<(u64, &str)>> = BTreeMap::new();
    let mut executions: BTreeSet<&str> = BTreeSet::new();
    let (mut allowed, mut waiting_for_approval) = (0u64, 0u64);
    for state in finals.iter().filter(|state| is_readable(state)) {
        for view in &state.executions {
            executions.insert(&view.execution_id);
            if !is_final_status(&view.status) {
                unfinished.entry(&view.execution_id).or_default().push((state.node, &view.status));
            }
        }
    }
    for (execution, nodes) in &unfinished {
        if options.allowed_unfinished.contains(*execution) {
            allowed += 1;
            continue;
        }
        if options.allow_pending_approval && nodes.iter().all(|(_, status)| *status == "pending_approval") {
            waiting_for_approval += 1;
            continue;
        }
        let list: Vec<String> = nodes.iter().map(|(node, status)| format!("node {node}: {status}")).collect();
        findings.invalid(format!("execution {execution} never finished ({})", list.join(", ")));
    }
    findings.set("executions", executions.len() as u64);
    findings.set("unfinished", unfinished.len() as u64);
    findings.set("unfinished_allowed", allowed);
    findings.set("waiting_for_approval", waiting_for_approval);
    findings.set("leader", leaders.iter().flatten().next().copied().unwrap_or(0));
    findings.finish()
}
