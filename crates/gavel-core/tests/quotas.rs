//! Per-principal quotas in the pure core: count quotas (pending approvals,
//! non-final executions) and the write token bucket, enforced at apply and
//! checked the same way by the edge (`State::check_quota`); the counters
//! equal a recount from the records after every generated command.

mod support;

use gavel_core::command::{Command, Envelope, Reply, Retention};
use gavel_core::{
    ApprovalStatus, Caller, ErrorCode, EventKind, Grant, GrantName, Principal, PrincipalKind, QuotaChange, QuotaKind,
    ReportOutcome, SideEffect, State,
};
use proptest::prelude::*;
use proptest::test_runner::RngAlgorithm;
use support::*;

fn user(id: &str) -> Principal {
    Principal::new(PrincipalKind::User, id).expect("a well-formed id")
}

fn root() -> Caller {
    Caller::of(user("root"))
}

/// A secured script: admin `user:root`, submitters `user:s0`..`user:s2`
/// (each also `act-for`, so it may name actor alice), approver
/// `user:approver`, worker `user:worker`; capabilities `cap` (no approval)
/// and `gated` (approval, valid 10 s).
fn secured() -> Script {
    let mut script = Script::new();
    let node = Caller::of(Principal::node(1));
    assert!(matches!(script.apply_by(&node, Command::BootstrapAdmin { admin: user("root") }), Reply::Grants { .. }));
    for spec in [capability("cap", SideEffect::Read), gated("gated", SideEffect::Read, 10_000)] {
        assert!(matches!(script.apply_by(&root(), Command::RegisterCapability(spec)), Reply::Capability(_)));
    }
    let grants: [(&str, &[GrantName]); 5] = [
        ("s0", &[GrantName::Submitter, GrantName::ActFor]),
        ("s1", &[GrantName::Submitter, GrantName::ActFor]),
        ("s2", &[GrantName::Submitter, GrantName::ActFor]),
        ("approver", &[GrantName::Approver]),
        ("worker", &[GrantName::Worker]),
    ];
    for (id, names) in grants {
        for name in names {
            let reply = script.apply_by(&root(), Command::Grant { principal: user(id), grant: Grant::of(*name) });
            assert!(matches!(reply, Reply::Grants { .. }), "{reply:?}");
        }
    }
    script
}

fn set_quota(script: &mut Script, principal: &str, change: QuotaChange) -> Reply {
    script.apply_by(&root(), Command::SetQuota { principal: user(principal), change })
}

fn create(script: &mut Script, by: &str, id: &str) -> Reply {
    script.apply_by(&Caller::of(user(by)), Command::CreateApproval(approval_request(id)))
}

fn quota_refusal(reply: Reply, kind: QuotaKind) -> gavel_core::DomainError {
    let error = refused(reply, ErrorCode::QuotaExceeded);
    assert_eq!(error.quota.map(|quota| quota.kind), Some(kind), "{error:?}");
    error
}

#[test]
fn a_principal_at_its_pending_quota_is_refused_until_it_closes_one() {
    let mut script = secured();
    set_quota(&mut script, "s0", QuotaChange { pending_approvals_max: Some(2), ..QuotaChange::default() });
    approval_of(create(&mut script, "s0", "a1"));
    approval_of(create(&mut script, "s0", "a2"));
    let before = script.state.state_hash();
    let refused = quota_refusal(create(&mut script, "s0", "a3"), QuotaKind::PendingApprovals);
    assert_eq!(refused.quota.and_then(|quota| quota.retry_after_ms), None, "no retry time for a count");
    assert!(refused.message.contains("user:s0") && refused.message.contains("quota is 2"), "{}", refused.message);
    assert_eq!(script.state.state_hash(), before, "a refusal changes nothing");
    // Another principal is not affected.
    approval_of(create(&mut script, "s1", "b1"));
    // A submit of a gated capability creates a pending approval too.
    let gated = Command::Submit(submission("e1", "gated", "{}"));
    quota_refusal(script.apply_by(&Caller::of(user("s0")), gated.clone()), QuotaKind::PendingApprovals);
    // Deciding one (approved or rejected) or cancelling one frees a place.
    let decide = Command::DecideApproval {
        terms_hash: None,
        approval_id: "a1".to_string(),
        status: ApprovalStatus::Rejected,
        approver: user("approver").as_actor(),
        comment: None,
        caller_now_ms: None,
    };
    approval_of(script.apply_by(&Caller::of(user("approver")), decide));
    assert!(matches!(script.apply_by(&Caller::of(user("s0")), gated), Reply::ApprovalRequired { .. }));
    let cancel = Command::CancelApproval { approval_id: "a2".to_string(), caller_now_ms: None };
    approval_of(script.apply_by(&Caller::of(user("s0")), cancel));
    approval_of(create(&mut script, "s0", "a3"));
    assert_eq!(script.state.quota(&user("s0")).usage.pending_approvals, 2);
    assert_eq!(script.state.quota_usage(), script.state.recount_quota_usage());
}

#[test]
fn an_expired_pending_approval_counts_until_retention_drops_it() {
    let mut script = secured();
    set_quota(&mut script, "s0", QuotaChange { pending_approvals_max: Some(1), ..QuotaChange::default() });
    approval_of(create(&mut script, "s0", "a1"));
    script.advance(16 * 60 * 1000); // past the default 15-minute validity
    quota_refusal(create(&mut script, "s0", "a2"), QuotaKind::PendingApprovals);
    let retention = Retention { records_ms: 60_000, events_ms: 60_000 };
    script.advance(61_000);
    script.apply_by(&Caller::of(Principal::node(1)), Command::Tick { retention });
    assert_eq!(script.state.quota(&user("s0")).usage.pending_approvals, 0);
    approval_of(create(&mut script, "s0", "a2"));
}

#[test]
fn a_principal_at_its_active_executions_quota_is_refused_until_one_is_final() {
    let mut script = secured();
    set_quota(&mut script, "s0", QuotaChange { active_executions_max: Some(1), ..QuotaChange::default() });
    let s0 = Caller::of(user("s0"));
    execution_of(script.apply_by(&s0, Command::Submit(submission("e1", "cap", "{}"))));
    // Repeating the same submit opens nothing and is answered as before.
    let (_, created) = execution_of(script.apply_by(&s0, Command::Submit(submission("e1", "cap", "{}"))));
    assert!(!created);
    quota_refusal(script.apply_by(&s0, Command::Submit(submission("e2", "cap", "{}"))), QuotaKind::ActiveExecutions);
    let worker = Caller::of(user("worker"));
    let poll = Command::Poll { worker_id: "w".to_string(), queues: vec!["cap".to_string()], tasks_max: 1 };
    let Reply::Tasks(tasks) = script.apply_by(&worker, poll) else { panic!("a poll answers tasks") };
    let report = Command::Report {
        lease_id: tasks[0].lease.lease_id,
        worker_id: "w".to_string(),
        outcome: ReportOutcome::Completed { output_json: "{}".to_string() },
    };
    reported(script.apply_by(&worker, report));
    execution_of(script.apply_by(&s0, Command::Submit(submission("e2", "cap", "{}"))));
    let cancel = Command::CancelExecution { execution_id: "e2".to_string(), actor: None };
    execution_of(script.apply_by(&s0, cancel));
    assert_eq!(script.state.quota(&user("s0")).usage.active_executions, 0);
}

#[test]
fn the_write_bucket_refuses_with_a_retry_hint_and_refills_by_cluster_time() {
    let mut script = secured();
    set_quota(
        &mut script,
        "s0",
        QuotaChange { writes_per_second: Some(4), write_burst: Some(2), ..QuotaChange::default() },
    );
    approval_of(create(&mut script, "s0", "a1"));
    approval_of(create(&mut script, "s0", "a2"));
    let before = script.state.state_hash();
    let refused = quota_refusal(create(&mut script, "s0", "a3"), QuotaKind::WriteRate);
    assert_eq!(refused.quota.and_then(|quota| quota.retry_after_ms), Some(250), "one token every 250 ms");
    assert_eq!(script.state.state_hash(), before, "a refused write takes no token and changes nothing");
    // The edge's check agrees, and counts in-flight writes against it.
    let next = Command::CreateApproval(approval_request("a3"));
    let s0 = Caller::of(user("s0"));
    assert!(script.state.check_quota(Some(&s0), None, &next, script.now_ms, 0).is_err());
    script.advance(250);
    script.state.check_quota(Some(&s0), None, &next, script.now_ms, 0).expect("one token back");
    let in_flight = script.state.check_quota(Some(&s0), None, &next, script.now_ms, 1).expect_err("one in flight");
    assert_eq!(in_flight.quota.and_then(|quota| quota.retry_after_ms), Some(250));
    approval_of(create(&mut script, "s0", "a3"));
    // Workers' reports, polls and heartbeats are never throttled, nor is another principal.
    approval_of(create(&mut script, "s1", "b1"));
    let worker = Caller::of(user("worker"));
    for _ in 0..50 {
        let poll = Command::Poll { worker_id: "w".to_string(), queues: vec!["cap".to_string()], tasks_max: 1 };
        assert!(matches!(script.apply_by(&worker, poll), Reply::Tasks(_)));
    }
}

#[test]
fn a_retried_request_gets_its_first_answer_even_when_the_bucket_is_empty() {
    let mut script = secured();
    set_quota(
        &mut script,
        "s0",
        QuotaChange { writes_per_second: Some(1), write_burst: Some(1), ..QuotaChange::default() },
    );
    let s0 = Caller::of(user("s0"));
    let command = Command::CreateApproval(approval_request("a1"));
    approval_of(script.apply_by_as("r1", &s0, command.clone()));
    script
        .state
        .check_quota(Some(&s0), Some("r1"), &command, script.now_ms, 0)
        .expect("the edge lets the retry through");
    let (approval, _) = approval_of(script.apply_by_as("r1", &s0, command));
    assert_eq!(approval.id, "a1");
    quota_refusal(create(&mut script, "s0", "a2"), QuotaKind::WriteRate);
}

#[test]
fn only_an_admin_sets_quotas_and_each_change_is_audited() {
    let mut script = secured();
    let denied = Command::SetQuota {
        principal: user("s0"),
        change: QuotaChange { pending_approvals_max: Some(1_000_000), ..QuotaChange::default() },
    };
    refused(script.apply_by(&Caller::of(user("s0")), denied), ErrorCode::PermissionDenied);
    let Reply::Quota(view) =
        set_quota(&mut script, "s0", QuotaChange { pending_approvals_max: Some(7), ..QuotaChange::default() })
    else {
        panic!("SetQuota answers the quota")
    };
    assert!(view.overridden);
    assert_eq!((view.limits.pending_approvals_max, view.limits.writes_per_second), (7, 1_000));
    let last = script.events().pop().expect("an event");
    assert_eq!(last.kind.event_type(), "quota.set");
    assert!(matches!(last.kind, EventKind::QuotaSet { pending_approvals_max: 7, .. }), "{:?}", last.kind);
    refused(
        set_quota(&mut script, "s0", QuotaChange { write_burst: Some(0), ..QuotaChange::default() }),
        ErrorCode::InvalidArgument,
    );
    let node = Command::SetQuota { principal: Principal::node(2), change: QuotaChange::default() };
    refused(script.apply_by(&root(), node), ErrorCode::InvalidArgument);
    // Reads: one's own, or any with admin.
    let s0 = Caller::of(user("s0"));
    script.state.authorize_quota_read(Some(&s0), Some(&user("s0"))).expect("its own");
    refused(
        Reply::Error(script.state.authorize_quota_read(Some(&s0), Some(&user("s1"))).expect_err("another's")),
        ErrorCode::PermissionDenied,
    );
    refused(
        Reply::Error(script.state.authorize_quota_read(Some(&s0), None).expect_err("the list")),
        ErrorCode::PermissionDenied,
    );
    script.state.authorize_quota_read(Some(&root()), Some(&user("s1"))).expect("an admin reads any");
    let Reply::Quota(view) = set_quota(&mut script, "s0", QuotaChange { reset: true, ..QuotaChange::default() }) else {
        panic!("SetQuota answers the quota")
    };
    assert!(!view.overridden);
}

// ---------------------------------------------------------------- property

#[derive(Debug, Clone)]
enum Step {
    Create { by: usize, id: usize },
    Submit { by: usize, id: usize, gated: bool },
    Decide { id: usize, approve: bool },
    CancelApproval { by: usize, id: usize },
    Resume { by: usize, id: usize },
    Work { ok: bool },
    CancelExecution { by: usize, id: usize },
    Advance { ms: u64 },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0..3usize, 0..12usize).prop_map(|(by, id)| Step::Create { by, id }),
        3 => (0..3usize, 0..12usize, any::<bool>()).prop_map(|(by, id, gated)| Step::Submit { by, id, gated }),
        2 => (0..12usize, any::<bool>()).prop_map(|(id, approve)| Step::Decide { id, approve }),
        1 => (0..3usize, 0..12usize).prop_map(|(by, id)| Step::CancelApproval { by, id }),
        2 => (0..3usize, 0..12usize).prop_map(|(by, id)| Step::Resume { by, id }),
        2 => any::<bool>().prop_map(|ok| Step::Work { ok }),
        1 => (0..3usize, 0..12usize).prop_map(|(by, id)| Step::CancelExecution { by, id }),
        2 => prop_oneof![0..400u64, 20_000..70_000u64].prop_map(|ms| Step::Advance { ms }),
    ]
}

/// The approval id a step names: created ones (`a<id>`) and those of gated
/// submits (derived from `e<id>`), half each.
fn approval_id(state: &State, id: usize) -> String {
    let derived = gavel_core::ids::approval_id_for(&format!("e{}", id / 2));
    if id.is_multiple_of(2) && state.approval(&derived).is_some() {
        derived
    } else {
        format!("a{id}")
    }
}

const PENDING_MAX: u64 = 3;
const ACTIVE_MAX: u64 = 4;
const RATE: u64 = 5;
const BURST: u64 = 4;

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, rng_algorithm: RngAlgorithm::XorShift, ..ProptestConfig::default() })]

    #[test]
    fn counters_equal_a_recount_and_no_principal_exceeds_its_quota(steps in prop::collection::vec(step(), 1..120)) {
        let mut script = secured();
        for by in 0..3 {
            let change = QuotaChange {
                pending_approvals_max: Some(PENDING_MAX),
                active_executions_max: Some(ACTIVE_MAX),
                writes_per_second: Some(RATE),
                write_burst: Some(BURST),
                reset: false,
            };
            set_quota(&mut script, &format!("s{by}"), change);
        }
        let started_ms = script.now_ms;
        let mut accepted = [0u64; 3];
        let retention = Retention { records_ms: 30_000, events_ms: 30_000 };
        let approver = Caller::of(user("approver"));
        let worker = Caller::of(user("worker"));
        for step in steps {
            let (by, command) = match step {
                Step::Create { by, id } => (Some(by), Command::CreateApproval(approval_request(&format!("a{id}")))),
                Step::Submit { by, id, gated } => {
                    let capability = if gated { "gated" } else { "cap" };
                    (Some(by), Command::Submit(submission(&format!("e{id}"), capability, "{}")))
                }
                Step::Decide { id, approve } => {
                    let status = if approve { ApprovalStatus::Approved } else { ApprovalStatus::Rejected };
                    let approval_id = approval_id(&script.state, id);
                    script.apply_by(&approver, Command::DecideApproval { terms_hash: None,
                        approval_id, status, approver: user("approver").as_actor(), comment: None, caller_now_ms: None,
                    });
                    (None, Command::Tick { retention })
                }
                Step::CancelApproval { by, id } => {
                    let approval_id = approval_id(&script.state, id);
                    (Some(by), Command::CancelApproval { approval_id, caller_now_ms: None })
                }
                Step::Resume { by, id } => {
                    let approval_id = approval_id(&script.state, id);
                    (Some(by), Command::Resume { approval_id, execution_id: format!("r{id}"), input_json: None })
                }
                Step::Work { ok } => {
                    let poll = Command::Poll {
                        worker_id: "w".to_string(),
                        queues: vec!["cap".to_string(), "gated".to_string()],
                        tasks_max: 2,
                    };
                    if let Reply::Tasks(tasks) = script.apply_by(&worker, poll) {
                        for task in tasks {
                            let outcome = if ok {
                                ReportOutcome::Completed { output_json: "{}".to_string() }
                            } else {
                                ReportOutcome::Failed { code: "E".to_string(), message: "m".to_string(), retryable: false }
                            };
                            let report = Command::Report { lease_id: task.lease.lease_id, worker_id: "w".to_string(), outcome };
                            script.apply_by(&worker, report);
                        }
                    }
                    (None, Command::Tick { retention })
                }
                Step::CancelExecution { by, id } => {
                    (Some(by), Command::CancelExecution { execution_id: format!("e{id}"), actor: None })
                }
                Step::Advance { ms } => {
                    script.advance(ms);
                    (None, Command::Tick { retention })
                }
            };
            let caller = match by {
                Some(by) => Caller::of(user(&format!("s{by}"))),
                None => Caller::of(Principal::node(1)),
            };
            let reply = script.state.apply(&Envelope { request_id: None, now_ms: script.now_ms, caller: Some(caller), command });
            if let Some(by) = by {
                if reply.error().is_none_or(|error| error.code != ErrorCode::QuotaExceeded) {
                    accepted[by] += 1;
                }
            }
            prop_assert_eq!(script.state.quota_usage(), script.state.recount_quota_usage());
            for (by, accepted) in accepted.iter().enumerate() {
                let view = script.state.quota(&user(&format!("s{by}")));
                prop_assert!(view.usage.pending_approvals <= PENDING_MAX, "{:?}", view);
                prop_assert!(view.usage.active_executions <= ACTIVE_MAX, "{:?}", view);
                // Every write the bucket let through since the start: at most
                // the burst plus what cluster time refilled.
                let refilled = (script.now_ms - started_ms) * RATE / 1_000;
                prop_assert!(*accepted <= BURST + refilled, "s{} wrote {} by {} ms", by, accepted, script.now_ms - started_ms);
            }
        }
        // The counters travel with the snapshot.
        let restored = State::restore(&script.state.snapshot()).expect("a snapshot restores");
        prop_assert_eq!(restored.quota_usage(), script.state.quota_usage());
        prop_assert_eq!(restored.state_hash(), script.state.state_hash());
    }
}
