//! Approval policies and standing approvals (issue #25): no approval the
//! policy governs is consumed without its quorum, and no standing approval
//! is spent beyond its uses.

use std::collections::{BTreeMap, BTreeSet};

use super::{is_readable, CheckOptions, CheckResult, Findings};
use crate::history::{ApprovalState, AuditEvent, Entry, Op, Outcome};

/// The audit event of an approving or denying vote.
const VOTE_CAST: &str = "approval.vote_cast";
/// The audit event of a voter withdrawing its own vote (its principal is
/// the voter): the vote no longer counts.
const VOTE_WITHDRAWN: &str = "approval.vote_withdrawn";
/// The audit event of a vote removed by a grant change: one before the
/// approval makes the count `unknown` (the history does not record whose
/// vote it removed; the chaos workload never revokes a grant).
const VOTE_REMOVED: &str = "approval.vote_removed";
/// The audit event of the decision that approved.
const APPROVED: &str = "capability.approved";
/// The audit event of one use of a standing approval.
const STANDING_USE: &str = "approval.standing_use_spent";

/// Checks the header's policy and standing approvals against the history:
///
/// - **quorum**: every approval the policy governs (its id starts with the
///   policy's prefix) that was consumed (an `ok` `ApprovalConsume` or
///   `ExecResume` of it, or a readable node's final state showing it
///   consumed, or a standing use in the trail) has a `capability.approved`
///   event in the final audit trail, and before that event at least `k`
///   distinct principals of the eligible group cast an approving vote
///   (`approval.vote_cast` with `vote` = `approve`) on it that still stood
///   when it was approved: the trail is replayed in order, and a voter's
///   `approval.vote_withdrawn` takes its vote away. Consumed without an
///   approval event, or approved with fewer than `k` standing eligible
///   votes before it, is `invalid`; a vote removed by a grant change in
///   between (`approval.vote_removed`, whose voter the history does not
///   keep) is `unknown`. `eligible` must leave the requester out: its vote
///   never counts, so a bug that counted it is caught here;
/// - **standing**: each standing approval of the header was spent by at
///   most `uses_max` distinct executions, counting both the executions of
///   its `ok` resumes and the executions of its `approval.standing_use_spent`
///   events; more is `invalid`.
///
/// A header without a policy and without standing approvals is `valid`
/// with nothing checked (`governed_approvals` = 0); a header with a policy
/// whose governed approvals were never consumed is `unknown` (the run did
/// not exercise it).
pub fn policy_quorum(history: &[Entry], options: &CheckOptions) -> CheckResult {
    let mut findings = Findings::new("policy_quorum", options);
    let Some(header) = super::header(history) else {
        findings.unknown("the history has no header".to_string());
        return findings.finish();
    };
    let finals: Vec<_> = super::final_states(history).into_iter().filter(|state| is_readable(state)).collect();
    let trail = super::reference_audit(&finals).events;
    let standing: BTreeMap<&str, u32> =
        header.standing.iter().map(|info| (info.approval_id.as_str(), info.uses_max)).collect();

    // Executions that spent each approval, by ok operations.
    let mut spent_by: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for operation in super::operations(history).iter().filter(|operation| operation.outcome == Outcome::Ok) {
        if let Op::ApprovalConsume { id, execution_id } | Op::ExecResume { approval_id: id, execution_id } =
            operation.op
        {
            spent_by.entry(id).or_default().insert(execution_id);
        }
    }
    let mut consumed: BTreeSet<&str> = spent_by.keys().copied().collect();
    for state in &finals {
        for (id, approval_state, _) in &state.approvals {
            if *approval_state == ApprovalState::Consumed {
                consumed.insert(id);
            }
        }
    }
    let mut trail_uses: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for event in trail.iter().filter(|event| event.event_type == STANDING_USE) {
        if let (Some(id), Some(execution)) = (&event.approval_id, &event.execution_id) {
            consumed.insert(id);
            trail_uses.entry(id).or_default().insert(execution);
        }
    }

    let mut governed_consumed = 0u64;
    if let Some(policy) = &header.policy {
        let eligible: BTreeSet<&str> = policy.eligible.iter().map(String::as_str).collect();
        for id in consumed.iter().filter(|id| id.starts_with(&policy.approval_id_prefix)) {
            governed_consumed += 1;
            let events: Vec<&&AuditEvent> =
                trail.iter().filter(|event| event.approval_id.as_deref() == Some(id)).collect();
            let Some(approved_at) = events.iter().position(|event| event.event_type == APPROVED) else {
                findings.invalid(format!("approval {id} was consumed but the trail has no {APPROVED} event for it"));
                continue;
            };
            let before = &events[..approved_at];
            if before.iter().any(|event| event.event_type == VOTE_REMOVED) {
                findings.unknown(format!("approval {id}: a vote was withdrawn before it was approved"));
                continue;
            }
            // Replay the votes: the ones standing when it was approved count.
            let mut voters: BTreeSet<&str> = BTreeSet::new();
            for event in before {
                let Some(principal) = event.principal.as_deref() else { continue };
                match event.event_type.as_str() {
                    VOTE_CAST if event.vote.as_deref() == Some("approve") => {
                        voters.insert(principal);
                    }
                    VOTE_CAST | VOTE_WITHDRAWN => {
                        voters.remove(principal);
                    }
                    _ => {}
                }
            }
            voters.retain(|principal| eligible.contains(principal));
            if voters.len() < policy.k as usize {
                findings.invalid(format!(
                    "approval {id} was consumed with {} distinct eligible approving votes before it was approved \
                     ({voters:?}); the policy needs {}",
                    voters.len(),
                    policy.k
                ));
            }
        }
        if governed_consumed == 0 {
            findings
                .unknown("no approval the policy governs was consumed: the quorum rule was not exercised".to_string());
        }
    }

    let mut overspent = 0u64;
    for (id, uses_max) in &standing {
        let mut users: BTreeSet<&str> = spent_by.get(id).cloned().unwrap_or_default();
        users.extend(trail_uses.get(id).into_iter().flatten().copied());
        if users.len() > *uses_max as usize {
            overspent += 1;
            findings.invalid(format!(
                "standing approval {id} allows {uses_max} uses and was spent by {} executions: {users:?}",
                users.len()
            ));
        }
    }
    findings.set("governed_approvals_consumed", governed_consumed);
    findings.set("standing_approvals", standing.len() as u64);
    findings.set("standing_overspent", overspent);
    findings.finish()
}
