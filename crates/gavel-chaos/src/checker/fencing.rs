//! Fencing: no report accepted under a lease that was no longer current.
//!
//! The rule, from the audit trail (the longest node's; the nodes' trails
//! must be identical — a divergence is `invalid`, a lagging prefix `unknown`):
//!
//! For an accepted report (`ok` `Op::WorkerReport` of execution E under
//! lease L), let S be the `capability.started` event of E with lease id L,
//! and X the first event after S that ends L's currency: a
//! `capability.started` of E with another lease id (superseded), a
//! `lease.expired` of L (expired) or a `capability.cancelled` of E (revoked).
//! The accepted report must have left its resolution event strictly between
//! S and X (or after S when there is no X): `capability.completed` for an
//! `ok` report, `capability.failed` for a `fatal` one, `capability.failed`
//! or `capability.retried` for a `retryable` one (any of the three for
//! another report kind). The state machine writes that event in the same
//! command that accepts the report, so a report accepted while L was current
//! always has it there; one accepted after X cannot, unless an earlier
//! identical report under L was accepted in time — which is the idempotent
//! re-report the spec allows, and harmless because the result was already
//! recorded. So:
//!
//! - no S for L while E has audit events: `invalid` (accepted under a lease
//!   the cluster never granted);
//! - X exists and no matching resolution in (S, X): `invalid`;
//! - no X and no matching resolution after S: `unknown` (no trace);
//! - E has no audit events at all, or there is no audit: `unknown`.
//!
//! A second rule needs no audit: if a poll granted E a lease L' > L (lease
//! ids are monotonic fencing tokens) and completed before an accepted report
//! under L was invoked, L was superseded before the report was sent; that is
//! `invalid` unless another report under L with the same outcome (`ok` or
//! `info`) was invoked before that grant completed (the idempotent re-report).
//!
//! A third rule needs no audit either: a report marked `late` (the worker
//! slept until at least 300 ms past the lease deadline, on the clock the
//! cluster also stamps) must never be accepted.
//!
//! Also `invalid`: one lease id started twice in the audit.
//!
//! Counters for the coverage checker: late reports (`late: true`) sent,
//! rejected (`fail`), accepted (`ok`) and unknown (`info`), and the audit's
//! `lease.late_report_rejected`, `lease.expired` and `capability.started` counts.

use std::collections::{BTreeMap, HashMap};

use super::{reference_audit, CheckOptions, CheckResult, Findings};
use crate::history::{AuditEvent, Entry, Op, OpResult, Outcome};

/// The audit event types that can record an accepted report of this kind.
fn resolutions(report: &str) -> &'static [&'static str] {
    match report {
        "ok" => &["capability.completed"],
        "fatal" => &["capability.failed"],
        "retryable" => &["capability.failed", "capability.retried"],
        _ => &["capability.completed", "capability.failed", "capability.retried"],
    }
}

/// Checks that no report was accepted under an expired, revoked or
/// superseded lease, that the nodes' audit trails agree, and counts late
/// reports; the exact rules are in the [module documentation](mod@self).
pub fn fencing(history: &[Entry], options: &CheckOptions) -> CheckResult {
    let mut findings = Findings::new("fencing", options);
    let operations = super::operations(history);
    let finals = super::final_states(history);
    let audit = reference_audit(&finals);
    for (verdict, issue) in &audit.issues {
        findings.flag(*verdict, issue.clone());
    }
    let events = &audit.events;

    // Index the audit.
    let mut by_execution: HashMap<&str, Vec<usize>> = HashMap::new();
    let mut started_by_lease: HashMap<u64, Vec<usize>> = HashMap::new();
    let mut expired_by_lease: HashMap<u64, Vec<usize>> = HashMap::new();
    let mut counts: BTreeMap<&str, u64> = BTreeMap::new();
    for (position, event) in events.iter().enumerate() {
        *counts.entry(event.event_type.as_str()).or_insert(0) += 1;
        if let Some(execution) = &event.execution_id {
            by_execution.entry(execution).or_default().push(position);
        }
        match (event.event_type.as_str(), event.lease_id) {
            ("capability.started", Some(lease)) => started_by_lease.entry(lease).or_default().push(position),
            ("lease.expired", Some(lease)) => expired_by_lease.entry(lease).or_default().push(position),
            _ => {}
        }
    }
    for (lease, positions) in &started_by_lease {
        if positions.len() > 1 {
            let cursors: Vec<u64> = positions.iter().map(|&position| events[position].cursor).collect();
            findings.invalid(format!("lease {lease} was started {} times (cursors {cursors:?})", positions.len()));
        }
    }

    // Grants seen by workers: execution → (lease, completion, op).
    let mut grants: HashMap<&str, Vec<(u64, f64, u64)>> = HashMap::new();
    for operation in operations.iter().filter(|operation| operation.is_ok()) {
        if let Some(OpResult::Lease(Some(grant))) = operation.result {
            grants.entry(grant.execution_id.as_str()).or_default().push((
                grant.lease_id,
                operation.complete_ms.unwrap_or(operation.invoke_ms),
                operation.op_id,
            ));
        }
    }

    // The deadline rule: a late report is sent at least 300 ms after its
    // lease deadline (on the same machine's clock the cluster stamps), so the
    // lease had expired when it arrived, whatever the audit says. Checked
    // after the other rules, whose findings say more when they apply.
    let late_accepted: Vec<String> = operations
        .iter()
        .filter(|operation| operation.outcome == Outcome::Ok)
        .filter_map(|operation| match operation.op {
            Op::WorkerReport { execution_id, lease_id, late: true, .. } => Some(format!(
                "op {} accepted a report for {execution_id} under lease {lease_id} sent after the lease deadline had passed",
                operation.op_id
            )),
            _ => None,
        })
        .collect();

    let mut counters: BTreeMap<&str, u64> = BTreeMap::new();
    let mut unjudged_without_audit = 0u64;
    for operation in &operations {
        let Op::WorkerReport { execution_id, attempt, lease_id, report, late } = operation.op else { continue };
        let outcome_key = match operation.outcome {
            Outcome::Ok => "reports_accepted",
            Outcome::Fail => "reports_rejected",
            Outcome::Info => "reports_unknown",
        };
        *counters.entry(outcome_key).or_insert(0) += 1;
        if *late {
            *counters.entry("late_reports").or_insert(0) += 1;
            let late_key = match operation.outcome {
                Outcome::Ok => "late_accepted",
                Outcome::Fail => "late_rejected",
                Outcome::Info => "late_unknown",
            };
            *counters.entry(late_key).or_insert(0) += 1;
        }
        if operation.outcome != Outcome::Ok {
            continue;
        }
        let what = format!(
            "op {} accepted a {report} report for {execution_id} attempt {attempt} under lease {lease_id}",
            operation.op_id
        );

        // The history rule: a newer grant completed before the report was sent.
        if let Some(&(newer, granted_ms, grant_op)) = grants
            .get(execution_id.as_str())
            .into_iter()
            .flatten()
            .filter(|(lease, granted_ms, _)| *lease > *lease_id && *granted_ms < operation.invoke_ms)
            .min_by(|a, b| a.1.total_cmp(&b.1))
        {
            let re_report = operations.iter().any(|other| {
                other.op_id != operation.op_id
                    && other.outcome != Outcome::Fail
                    && other.invoke_ms < granted_ms
                    && matches!(other.op, Op::WorkerReport { execution_id: e, lease_id: l, report: r, .. }
                        if e == execution_id && l == lease_id && r == report)
            });
            if !re_report {
                findings.invalid(format!(
                    "{what}, invoked at {:.1} ms, after poll op {grant_op} had granted the newer lease {newer} \
                     (completed at {granted_ms:.1} ms)",
                    operation.invoke_ms
                ));
            }
        }

        // The audit rule.
        if events.is_empty() {
            unjudged_without_audit += 1;
            continue;
        }
        let Some(execution_events) = by_execution.get(execution_id.as_str()) else {
            findings.unknown(format!("{what}, but the audit has no event of {execution_id}"));
            continue;
        };
        let Some(&start) = started_by_lease
            .get(lease_id)
            .into_iter()
            .flatten()
            .find(|&&position| events[position].execution_id.as_deref() == Some(execution_id.as_str()))
        else {
            findings.invalid(format!("{what}, a lease the audit never shows started for {execution_id}"));
            continue;
        };
        let started_attempt = events[start].attempt;
        let ends_currency = |event: &AuditEvent| match event.event_type.as_str() {
            "capability.started" => event.lease_id != Some(*lease_id),
            "capability.cancelled" => true,
            "lease.expired" => match event.lease_id {
                Some(lease) => lease == *lease_id,
                None => event.attempt.is_some() && event.attempt == started_attempt,
            },
            _ => false,
        };
        let after_start = execution_events.iter().copied().filter(|&position| position > start);
        let expired = expired_by_lease.get(lease_id).into_iter().flatten().copied().find(|&position| position > start);
        let end =
            after_start.clone().find(|&position| ends_currency(events[position])).into_iter().chain(expired).min();
        let wanted = resolutions(report);
        let resolved = after_start
            .take_while(|&position| end.is_none_or(|end| position < end))
            .any(|position| wanted.contains(&events[position].event_type.as_str()));
        if resolved {
            *counters.entry("reports_checked").or_insert(0) += 1;
            continue;
        }
        match end {
            Some(end) => {
                let ended = events[end];
                let how = match ended.event_type.as_str() {
                    "capability.started" => format!("superseded by lease {:?}", ended.lease_id),
                    "lease.expired" => "expired".to_string(),
                    _ => "revoked by cancellation".to_string(),
                };
                findings.invalid(format!(
                    "{what}, but the audit shows lease {lease_id} {how} at cursor {} with no {} while it was current \
                     (started at cursor {})",
                    ended.cursor,
                    wanted.join(" or "),
                    events[start].cursor
                ));
            }
            None => findings.unknown(format!(
                "{what}, but the audit shows no {} after lease {lease_id} started (cursor {})",
                wanted.join(" or "),
                events[start].cursor
            )),
        }
    }
    if unjudged_without_audit > 0 {
        findings.unknown(format!(
            "{unjudged_without_audit} accepted reports could not be checked against the audit: no node's audit trail \
             was recorded"
        ));
    }
    for key in [
        "reports_accepted",
        "reports_rejected",
        "reports_unknown",
        "reports_checked",
        "late_reports",
        "late_rejected",
        "late_accepted",
        "late_unknown",
    ] {
        findings.set(key, counters.get(key).copied().unwrap_or(0));
    }
    findings.set("audit_events", events.len() as u64);
    findings.set("audit_leases_started", counts.get("capability.started").copied().unwrap_or(0));
    findings.set("audit_leases_expired", counts.get("lease.expired").copied().unwrap_or(0));
    findings.set("audit_late_reports_rejected", counts.get("lease.late_report_rejected").copied().unwrap_or(0));
    for detail in late_accepted {
        findings.invalid(detail);
    }
    findings.finish()
}
