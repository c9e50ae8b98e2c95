//! One final result per execution, never changed once final.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use super::{is_final_status, is_readable, CheckOptions, CheckResult, Findings};
use crate::history::{Entry, ExecutionView, OpResult, Outcome};

/// Whether a view shows a final execution (a final digest or a final status).
fn is_final(view: &ExecutionView) -> bool {
    view.final_digest.is_some() || is_final_status(&view.status)
}

/// Checks that each execution has at most one final result:
///
/// - all [`ExecutionView`]s carrying a `final_digest` — from `ok` results of
///   any operation (submit, resume, cancel, get) by any process, and from
///   every readable node's final state — carry the same digest;
/// - a process never sees an execution final and later (in its own
///   operation order) non-final;
/// - reads are linearizable, so no `ok` operation invoked after another `ok`
///   operation on the same execution completed with a final view returns a
///   non-final view;
/// - every readable node's final view of an execution that some view showed
///   final is final too.
pub fn one_final_result(history: &[Entry], options: &CheckOptions) -> CheckResult {
    let mut findings = Findings::new("one_final_result", options);
    let operations = super::operations(history);
    // Every ok view, per execution: (source label, process, invoke, complete, view).
    struct Seen<'a> {
        op_id: u64,
        process: u64,
        invoke_ms: f64,
        complete_ms: f64,
        view: &'a ExecutionView,
    }
    let mut seen: BTreeMap<&str, Vec<Seen<'_>>> = BTreeMap::new();
    for operation in &operations {
        if operation.outcome != Outcome::Ok {
            continue;
        }
        if let Some(OpResult::Execution(view)) = operation.result {
            seen.entry(view.execution_id.as_str()).or_default().push(Seen {
                op_id: operation.op_id,
                process: operation.process,
                invoke_ms: operation.invoke_ms,
                complete_ms: operation.complete_ms.unwrap_or(operation.invoke_ms),
                view,
            });
        }
    }
    let finals: Vec<_> = super::final_states(history).into_iter().filter(|state| is_readable(state)).collect();
    let mut node_views: BTreeMap<&str, Vec<(u64, &ExecutionView)>> = BTreeMap::new();
    for state in &finals {
        for view in &state.executions {
            node_views.entry(view.execution_id.as_str()).or_default().push((state.node, view));
        }
    }
    let executions: BTreeSet<&str> = seen.keys().chain(node_views.keys()).copied().collect();
    let executions_count = executions.len() as u64;
    let (mut views_total, mut executions_final, mut final_without_digest) = (0u64, 0u64, 0u64);
    for execution in executions {
        let ops = seen.get(execution).map(Vec::as_slice).unwrap_or_default();
        let nodes = node_views.get(execution).map(Vec::as_slice).unwrap_or_default();
        views_total += (ops.len() + nodes.len()) as u64;
        final_without_digest += ops
            .iter()
            .map(|seen| seen.view)
            .chain(nodes.iter().map(|(_, view)| *view))
            .filter(|view| is_final_status(&view.status) && view.final_digest.is_none())
            .count() as u64;

        // One digest.
        let mut digests: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for seen in ops {
            if let Some(digest) = &seen.view.final_digest {
                digests.entry(digest).or_default().push(format!("op {}", seen.op_id));
            }
        }
        for (node, view) in nodes {
            if let Some(digest) = &view.final_digest {
                digests.entry(digest).or_default().push(format!("node {node}"));
            }
        }
        if digests.len() > 1 {
            let list: Vec<String> =
                digests.iter().map(|(digest, sources)| format!("{digest} ({})", sources.join(", "))).collect();
            findings.invalid(format!(
                "execution {execution} has {} different final results: {}",
                digests.len(),
                list.join("; ")
            ));
        }
        let ever_final = ops.iter().any(|seen| is_final(seen.view)) || nodes.iter().any(|(_, view)| is_final(view));
        if !ever_final {
            continue;
        }
        executions_final += 1;

        // A process's reads never go back to non-final.
        let mut flagged: HashSet<u64> = HashSet::new();
        let mut by_process: BTreeMap<u64, Vec<&Seen<'_>>> = BTreeMap::new();
        for seen in ops {
            by_process.entry(seen.process).or_default().push(seen);
        }
        for (process, mut views) in by_process {
            views.sort_by(|a, b| a.invoke_ms.total_cmp(&b.invoke_ms).then(a.op_id.cmp(&b.op_id)));
            let mut first_final: Option<u64> = None;
            for seen in views {
                match (first_final, is_final(seen.view)) {
                    (None, true) => first_final = Some(seen.op_id),
                    (Some(earlier), false) => {
                        flagged.insert(seen.op_id);
                        findings.invalid(format!(
                            "execution {execution}: process {process} saw it final (op {earlier}) and then non-final \
                             ({}, op {})",
                            seen.view.status, seen.op_id
                        ));
                    }
                    _ => {}
                }
            }
        }
        // Real time: nothing invoked after a final view completed reads non-final.
        if let Some(first) =
            ops.iter().filter(|seen| is_final(seen.view)).min_by(|a, b| a.complete_ms.total_cmp(&b.complete_ms))
        {
            for seen in ops.iter().filter(|seen| seen.invoke_ms > first.complete_ms && !is_final(seen.view)) {
                if flagged.insert(seen.op_id) {
                    findings.invalid(format!(
                        "execution {execution}: op {} (invoked at {:.1} ms) read it {} after op {} had read it final \
                         (completed at {:.1} ms): a stale read",
                        seen.op_id, seen.invoke_ms, seen.view.status, first.op_id, first.complete_ms
                    ));
                }
            }
        }
        // Every node ends final.
        for (node, view) in nodes.iter().filter(|(_, view)| !is_final(view)) {
            findings.invalid(format!(
                "execution {execution}: node {node}'s final state shows it {} although it was seen final",
                view.status
            ));
        }
    }
    findings.set("executions", executions_count);
    findings.set("executions_final", executions_final);
    findings.set("views", views_total);
    findings.set("final_status_without_digest", final_without_digest);
    findings.finish()
}
