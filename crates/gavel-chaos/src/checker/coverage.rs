//! Coverage: the run really exercised what it was asked to.

use std::collections::BTreeMap;

use super::{fault_name, CheckOptions, CheckResult, Findings};
use crate::history::{Entry, FaultKind, Op, Outcome, Phase};

/// Checks that the run exercised the faults and situations it was meant to;
/// a shortfall makes the run `unknown` (it proves nothing either way), never
/// `invalid`:
///
/// - each fault in the header's `faults` has at least
///   [`CheckOptions::min_fault_count`] nemesis starts with `injected: true`;
/// - any nemesis event with `injected: false` (a fault that could not be injected);
/// - at least [`CheckOptions::min_leader_changes`] leader changes: the larger
///   of [`CheckOptions::leader_changes`] and the largest
///   `FinalState::leader_changes`;
/// - at least [`CheckOptions::min_late_reports`] late reports sent
///   (`Op::WorkerReport { late: true }` invokes).
pub fn coverage(history: &[Entry], options: &CheckOptions) -> CheckResult {
    let mut findings = Findings::new("coverage", options);
    let mut injected: BTreeMap<FaultKind, u64> = BTreeMap::new();
    let mut not_injected = 0u64;
    for event in super::nemesis_events(history) {
        if !event.injected {
            not_injected += 1;
            findings.unknown(format!(
                "{} ({:?}) at {:.1} ms on nodes {:?} was not injected: {}",
                fault_name(event.fault),
                event.phase,
                event.time_ms,
                event.nodes,
                event.detail
            ));
        } else if event.phase == Phase::Start {
            *injected.entry(event.fault).or_insert(0) += 1;
        }
    }
    match super::header(history) {
        Some(header) => {
            for fault in &header.faults {
                let count = injected.get(fault).copied().unwrap_or(0);
                if count < options.min_fault_count {
                    findings.unknown(format!(
                        "{} was injected {count} times, fewer than the {} required",
                        fault_name(*fault),
                        options.min_fault_count
                    ));
                }
            }
        }
        None => findings.unknown("the history has no header: the faults asked for are unknown".to_string()),
    }
    let observed = super::final_states(history).iter().map(|state| state.leader_changes).max().unwrap_or(0);
    let leader_changes = options.leader_changes.max(observed);
    if leader_changes < options.min_leader_changes {
        findings.unknown(format!(
            "{leader_changes} leader changes, fewer than the {} required",
            options.min_leader_changes
        ));
    }
    let operations = super::operations(history);
    let late: Vec<_> =
        operations.iter().filter(|operation| matches!(operation.op, Op::WorkerReport { late: true, .. })).collect();
    let late_rejected = late.iter().filter(|operation| operation.outcome == Outcome::Fail).count() as u64;
    if (late.len() as u64) < options.min_late_reports {
        findings.unknown(format!(
            "{} late reports sent, fewer than the {} required",
            late.len(),
            options.min_late_reports
        ));
    }
    for (fault, count) in &injected {
        findings.set(&format!("injected.{}", fault_name(*fault)), *count);
    }
    findings.set("not_injected", not_injected);
    findings.set("leader_changes", leader_changes);
    findings.set("late_reports", late.len() as u64);
    findings.set("late_rejected", late_rejected);
    findings.finish()
}
