//! Retry discipline: no re-run the side-effect rule forbids, no attempt past the budget.

use std::collections::{BTreeMap, BTreeSet};

use super::{reference_audit, CheckOptions, CheckResult, Findings};
use crate::history::{CapabilityInfo, Entry, Op, OpResult, Outcome};

/// Whether the side-effect rule lets this capability be re-run: reads (and
/// side-effect-free calls) may be, write-like ones only when declared
/// idempotent with a retry config.
fn retry_allowed(capability: &CapabilityInfo) -> bool {
    matches!(capability.side_effect.as_str(), "read" | "none")
        || (capability.idempotent && capability.max_attempts.is_some())
}

/// The most attempts an execution of this capability may start: 1 when the
/// side-effect rule forbids re-runs, else 1 + `max_attempts` (0 without a
/// retry config).
fn attempts_limit(capability: &CapabilityInfo) -> u32 {
    if retry_allowed(capability) {
        1 + capability.max_attempts.unwrap_or(0)
    } else {
        1
    }
}

/// Checks the retry rule (SI-11) from the header's capabilities, the audit
/// trail and the history:
///
/// - an execution of a capability whose side effect is not `read`/`none` and
///   that is not (`idempotent` and with a retry config) has at most one
///   `capability.started` and no `capability.retried`;
/// - no execution has more `capability.started` events, or a started
///   attempt number, above 1 + `max_attempts` (0 without a retry config);
///   its started attempt numbers strictly increase;
/// - the same limits hold for the leases workers were granted (`ok` polls:
///   distinct lease ids and attempt numbers per execution) and for the
///   `attempts` of every execution view (results and final states).
///
/// An execution's capability comes from its submit operation or its lease
/// grants; one whose capability is unknown (or not in the header) is
/// `unknown` only if it was started more than once.
pub fn retry_discipline(history: &[Entry], options: &CheckOptions) -> CheckResult {
    let mut findings = Findings::new("retry_discipline", options);
    let Some(header) = super::header(history) else {
        findings.unknown("the history has no header: the capabilities are unknown".to_string());
        return findings.finish();
    };
    let capabilities: BTreeMap<&str, &CapabilityInfo> =
        header.capabilities.iter().map(|capability| (capability.id.as_str(), capability)).collect();
    let operations = super::operations(history);

    // Execution → capability, from submits and grants.
    let mut capability_of: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    // Execution → (lease ids, attempts) granted to workers.
    let mut granted: BTreeMap<&str, (BTreeSet<u64>, BTreeSet<u32>)> = BTreeMap::new();
    // Execution → the largest `attempts` any view showed, and where.
    let mut viewed_attempts: BTreeMap<&str, (u32, String)> = BTreeMap::new();
    fn note_view<'a>(viewed: &mut BTreeMap<&'a str, (u32, String)>, execution: &'a str, attempts: u32, source: String) {
        let entry = viewed.entry(execution).or_insert((0, String::new()));
        if attempts > entry.0 {
            *entry = (attempts, source);
        }
    }
    for operation in &operations {
        if let Op::ExecSubmit { execution_id, capability } = operation.op {
            capability_of.entry(execution_id).or_default().insert(capability);
        }
        if operation.outcome != Outcome::Ok {
            continue;
        }
        match operation.result {
            Some(OpResult::Lease(Some(grant))) => {
                if !grant.capability.is_empty() {
                    capability_of.entry(&grant.execution_id).or_default().insert(&grant.capability);
                }
                let entry = granted.entry(&grant.execution_id).or_default();
                entry.0.insert(grant.lease_id);
                entry.1.insert(grant.attempt);
            }
            Some(OpResult::Execution(view)) => {
                note_view(&mut viewed_attempts, &view.execution_id, view.attempts, format!("op {}", operation.op_id));
            }
            _ => {}
        }
    }
    let finals = super::final_states(history);
    for state in &finals {
        for view in &state.executions {
            note_view(&mut viewed_attempts, &view.execution_id, view.attempts, format!("node {}", state.node));
        }
    }
    let audit = reference_audit(&finals);
    let mut starts: BTreeMap<&str, Vec<(u64, Option<u32>)>> = BTreeMap::new();
    let mut retries: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for event in &audit.events {
        let Some(execution) = event.execution_id.as_deref() else { continue };
        match event.event_type.as_str() {
            "capability.started" => starts.entry(execution).or_default().push((event.cursor, event.attempt)),
            "capability.retried" => retries.entry(execution).or_default().push(event.cursor),
            _ => {}
        }
    }

    let executions: BTreeSet<&str> =
        starts.keys().chain(retries.keys()).chain(granted.keys()).chain(viewed_attempts.keys()).copied().collect();
    let (mut judged, mut retried_executions) = (0u64, 0u64);
    for execution in executions {
        let started = starts.get(execution).map(Vec::as_slice).unwrap_or_default();
        let retried = retries.get(execution).map(Vec::as_slice).unwrap_or_default();
        let (leases, attempts) = granted.get(execution).cloned().unwrap_or_default();
        let viewed = viewed_attempts.get(execution);
        let most_attempts = started
            .len()
            .max(leases.len())
            .max(attempts.iter().max().copied().unwrap_or(0) as usize)
            .max(viewed.map_or(0, |(attempts, _)| *attempts as usize));
        if started.len() > 1 || leases.len() > 1 {
            retried_executions += 1;
        }
        let names = capability_of.get(execution);
        let capability = match names.map(|names| names.iter().collect::<Vec<_>>()).as_deref() {
            Some([name]) => capabilities.get(**name).copied(),
            _ => None,
        };
        let Some(capability) = capability else {
            if most_attempts > 1 {
                findings.unknown(format!(
                    "execution {execution} ran {most_attempts} attempts but its capability is unknown ({:?})",
                    names
                ));
            }
            continue;
        };
        judged += 1;
        let limit = attempts_limit(capability) as usize;
        let rule = if retry_allowed(capability) {
            format!(
                "capability {} (side effect {}, max_attempts {:?}) allows {limit} attempts",
                capability.id, capability.side_effect, capability.max_attempts
            )
        } else {
            format!(
                "capability {} (side effect {}, idempotent {}, max_attempts {:?}) must never be re-run",
                capability.id, capability.side_effect, capability.idempotent, capability.max_attempts
            )
        };
        if started.len() > limit {
            let cursors: Vec<u64> = started.iter().map(|(cursor, _)| *cursor).collect();
            findings.invalid(format!(
                "execution {execution} was started {} times (audit cursors {cursors:?}); {rule}",
                started.len()
            ));
        }
        if let Some((cursor, attempt)) =
            started.iter().find(|(_, attempt)| attempt.is_some_and(|attempt| attempt as usize > limit))
        {
            findings.invalid(format!("execution {execution} started attempt {attempt:?} (cursor {cursor}); {rule}"));
        }
        if started.windows(2).any(|pair| matches!((pair[0].1, pair[1].1), (Some(a), Some(b)) if b <= a)) {
            let numbers: Vec<Option<u32>> = started.iter().map(|(_, attempt)| *attempt).collect();
            findings.invalid(format!("execution {execution}: started attempt numbers do not increase: {numbers:?}"));
        }
        if !retry_allowed(capability) && !retried.is_empty() {
            findings
                .invalid(format!("execution {execution} has capability.retried events (cursors {retried:?}); {rule}"));
        }
        if leases.len() > limit || attempts.iter().any(|&attempt| attempt as usize > limit) {
            findings.invalid(format!(
                "execution {execution}: workers were granted leases {leases:?} for attempts {attempts:?}; {rule}"
            ));
        }
        if let Some((attempts, source)) = viewed.filter(|(attempts, _)| *attempts as usize > limit) {
            findings.invalid(format!("execution {execution}: {source} shows {attempts} attempts; {rule}"));
        }
    }
    findings.set("executions_judged", judged);
    findings.set("executions_retried", retried_executions);
    findings.set("audit_starts", starts.values().map(|starts| starts.len() as u64).sum());
    findings.set("audit_retries", retries.values().map(|retries| retries.len() as u64).sum());
    findings.finish()
}
