//! Approval rules (SPEC §3), one test per rule, driven through `State::apply`.

mod support;

use gavel_core::command::{Command, Retention};
use gavel_core::{
    Actor, ActorKind, ApprovalFilter, ApprovalStatus, Decision, ErrorCode, EventKind, Risk, SideEffect,
    StoredApprovalStatus,
};
use support::*;

/// The default validity of an approval created without `expiresAt`.
const FIFTEEN_MINUTES_MS: u64 = 900_000;

#[test]
fn create_stores_every_field_of_the_request_and_returns_it() {
    let mut script = Script::new();
    let request = gavel_core::CreateApproval {
        surface: "http".to_string(),
        actor: Actor { display_name: Some("Billing".to_string()), ..Actor::new("svc-7", ActorKind::Service) },
        input_json: r#"{ "order": "o-9", "amount": 12.50 }"#.to_string(),
        reasons: vec!["high value".to_string(), "new customer".to_string()],
        types: vec!["finance".to_string()],
        risk: Risk::Critical,
        side_effect: SideEffect::External,
        requested_at_ms: Some(START_MS - 10),
        expires_at_ms: Some(START_MS + 5_000),
        ..approval_request("apr-1")
    };
    let (returned, status) = approval_of(script.apply(Command::CreateApproval(request)));

    assert_eq!(status, ApprovalStatus::Pending);
    assert_eq!(returned.id, "apr-1");
    assert_eq!(returned.capability_id, "orders.refund");
    assert_eq!(returned.surface, "http");
    assert_eq!(returned.actor.id, "svc-7");
    assert_eq!(returned.actor.kind, ActorKind::Service);
    assert_eq!(returned.actor.display_name.as_deref(), Some("Billing"));
    // The input is stored canonically, and its hash is the JCS SHA-256 of it.
    assert_eq!(returned.input_json, r#"{"amount":12.5,"order":"o-9"}"#);
    let (_, expected_hash) =
        gavel_core::canonical_json::input_hash(r#"{"order":"o-9","amount":12.5}"#).expect("valid JSON");
    assert_eq!(returned.input_hash, expected_hash);
    assert_eq!(returned.reasons, vec!["high value", "new customer"]);
    assert_eq!(returned.types, vec!["finance"]);
    assert_eq!(returned.risk, Risk::Critical);
    assert_eq!(returned.side_effect, SideEffect::External);
    assert_eq!(returned.requested_at_ms, START_MS - 10);
    assert_eq!(returned.expires_at_ms, START_MS + 5_000);
    assert_eq!(returned.status, StoredApprovalStatus::Pending);
    assert_eq!(returned.decision, None);
    assert_eq!(returned.consumed_by_execution_id, None);
    assert_eq!(script.approval("apr-1"), returned, "the reply is the stored record");
}

#[test]
fn create_defaults_requested_at_to_now_and_expiry_to_fifteen_minutes_later() {
    let mut script = Script::new();
    let approval = script.create_approval(approval_request("apr-1"));
    assert_eq!(approval.requested_at_ms, START_MS);
    assert_eq!(approval.expires_at_ms, START_MS + FIFTEEN_MINUTES_MS);
}

#[test]
fn create_with_a_duplicate_id_is_already_exists_and_keeps_the_first_record() {
    let mut script = Script::new();
    let first = script.create_approval(approval_request("apr-1"));
    let second = gavel_core::CreateApproval { surface: "other".to_string(), ..approval_request("apr-1") };

    let error = refused(script.apply(Command::CreateApproval(second)), ErrorCode::AlreadyExists);

    assert_eq!(error.message, "approval \"apr-1\" already exists");
    assert_eq!(script.approval("apr-1"), first);
}

#[test]
fn create_with_an_input_hash_that_does_not_match_the_input_is_refused() {
    let mut script = Script::new();
    let request = gavel_core::CreateApproval { input_hash: Some("00".repeat(32)), ..approval_request("apr-1") };
    refused(script.apply(Command::CreateApproval(request)), ErrorCode::InvalidArgument);
    assert!(script.state.approval("apr-1").is_none());
}

#[test]
fn get_of_an_unknown_id_is_none() {
    let mut script = Script::new();
    script.create_approval(approval_request("apr-1"));
    assert!(script.state.approval("apr-2").is_none());
}

#[test]
fn pending_past_expiry_reads_as_expired_and_is_never_written_back() {
    let mut script = Script::new();
    let approval = script.create_approval(approval_request("apr-1"));

    assert_eq!(approval.status_at(approval.expires_at_ms), ApprovalStatus::Pending, "expiry is strictly after");
    script.at(approval.expires_at_ms + 1);
    script.tick();

    let stored = script.approval("apr-1");
    assert_eq!(stored.status, StoredApprovalStatus::Pending, "expiry is computed on read, never stored");
    assert_eq!(stored.status_at(script.state.clock_ms()), ApprovalStatus::Expired);
    let expired = ApprovalFilter { status: Some(ApprovalStatus::Expired), ..ApprovalFilter::default() };
    assert_eq!(
        script
            .state
            .list_approvals(&expired, script.state.clock_ms(), None, 10, gavel_core::ListOrder::OldestFirst)
            .len(),
        1
    );
}

#[test]
fn decide_with_a_status_other_than_approved_or_rejected_is_refused_before_any_change() {
    let mut script = Script::new();
    script.create_approval(approval_request("apr-1"));
    let before = script.state.state_hash();

    for status in
        [ApprovalStatus::Pending, ApprovalStatus::Expired, ApprovalStatus::Consumed, ApprovalStatus::Cancelled]
    {
        let error = refused(script.decide("apr-1", status, bob()), ErrorCode::InvalidArgument);
        assert_eq!(error.message, "invalid decision status");
    }
    // Validation comes before the lookup: an unknown id with a bad status is a validation error too.
    let error = refused(script.decide("nope", ApprovalStatus::Pending, bob()), ErrorCode::InvalidArgument);
    assert_eq!(error.message, "invalid decision status");

    assert_eq!(script.state.state_hash(), before);
}

#[test]
fn decide_with_an_ill_formed_approver_is_refused_before_any_change() {
    let mut script = Script::new();
    script.create_approval(approval_request("apr-1"));
    let before = script.state.state_hash();

    refused(script.decide("apr-1", ApprovalStatus::Approved, Actor::user("")), ErrorCode::InvalidArgument);
    let too_long = Actor::user(&"x".repeat(gavel_core::limits::ID_BYTES_MAX + 1));
    refused(script.decide("apr-1", ApprovalStatus::Approved, too_long), ErrorCode::InvalidArgument);

    assert_eq!(script.state.state_hash(), before);
    assert_eq!(script.approval("apr-1").status, StoredApprovalStatus::Pending);
}

#[test]
fn decide_records_the_decision_with_approver_comment_and_decided_at() {
    let mut script = Script::new();
    script.create_approval(approval_request("apr-1"));
    script.advance(42);

    let reply = script.apply(Command::DecideApproval {
        terms_hash: None,
        approval_id: "apr-1".to_string(),
        status: ApprovalStatus::Approved,
        approver: bob(),
        comment: Some("looks right".to_string()),
        caller_now_ms: None,
    });
    let (approval, status) = approval_of(reply);

    assert_eq!(status, ApprovalStatus::Approved);
    assert_eq!(approval.status, StoredApprovalStatus::Approved);
    let expected = Decision {
        status: ApprovalStatus::Approved,
        approver: bob(),
        comment: Some("looks right".to_string()),
        decided_at_ms: START_MS + 42,
    };
    assert_eq!(approval.decision, Some(expected));
    assert_eq!(script.approval("apr-1"), approval);
    let last = script.events().pop().expect("an event");
    assert_eq!(last.kind, EventKind::Approved { terms_hash: approval.terms_hash.clone() });
    assert_eq!(last.actor, bob());
    assert_eq!(last.approval_id.as_deref(), Some("apr-1"));
}

#[test]
fn reject_records_a_rejected_decision_and_its_event() {
    let mut script = Script::new();
    script.create_approval(approval_request("apr-1"));

    let (approval, status) = approval_of(script.decide("apr-1", ApprovalStatus::Rejected, bob()));

    assert_eq!(status, ApprovalStatus::Rejected);
    assert_eq!(approval.status, StoredApprovalStatus::Rejected);
    assert_eq!(approval.decision.as_ref().map(|decision| decision.status), Some(ApprovalStatus::Rejected));
    assert_eq!(
        script.events().pop().map(|event| event.kind),
        Some(EventKind::Rejected { terms_hash: approval.terms_hash })
    );
}

#[test]
fn decide_on_a_decided_approval_is_failed_precondition_naming_its_status() {
    let mut script = Script::new();
    script.create_approval(approval_request("apr-1"));
    approval_of(script.decide("apr-1", ApprovalStatus::Approved, bob()));

    let error = refused(script.decide("apr-1", ApprovalStatus::Rejected, bob()), ErrorCode::FailedPrecondition);

    assert_eq!(error.message, "approval apr-1 is not pending (status: approved)");
    assert_eq!(script.approval("apr-1").status, StoredApprovalStatus::Approved);
}

#[test]
fn decide_on_an_expired_approval_is_failed_precondition_with_status_expired() {
    let mut script = Script::new();
    let approval = script.create_approval(approval_request("apr-1"));
    script.at(approval.expires_at_ms + 1);

    let error = refused(script.decide("apr-1", ApprovalStatus::Approved, bob()), ErrorCode::FailedPrecondition);

    assert_eq!(error.message, "approval apr-1 is not pending (status: expired)");
    assert_eq!(script.approval("apr-1").status, StoredApprovalStatus::Pending);
}

#[test]
fn decide_on_an_unknown_id_is_not_found() {
    let mut script = Script::new();
    let error = refused(script.decide("apr-404", ApprovalStatus::Approved, bob()), ErrorCode::NotFound);
    assert_eq!(error.message, "approval apr-404 was not found");
}

#[test]
fn approval_by_the_requester_is_refused_as_self_approval() {
    let mut script = Script::new();
    script.create_approval(approval_request("apr-1"));
    let before = script.state.state_hash();

    let error = refused(script.decide("apr-1", ApprovalStatus::Approved, alice()), ErrorCode::ApprovalSelfApproval);

    assert_eq!(script.state.state_hash(), before);
    // The refusal writes the approver as people read principals: kind:id.
    assert_eq!(error.message, "approver user:alice requested approval apr-1 and cannot decide it");
}

#[test]
fn approval_by_the_requester_is_allowed_when_the_request_opted_out() {
    let mut script = Script::new();
    script.create_approval(gavel_core::CreateApproval { allow_self_approval: true, ..approval_request("apr-1") });

    let (approval, _) = approval_of(script.decide("apr-1", ApprovalStatus::Approved, alice()));

    assert_eq!(approval.status, StoredApprovalStatus::Approved);
    assert_eq!(approval.decision.map(|decision| decision.approver), Some(alice()));
}

#[test]
fn consume_spends_an_approved_approval_exactly_once() {
    let mut script = Script::new();
    script.create_approval(approval_request("apr-1"));
    approval_of(script.decide("apr-1", ApprovalStatus::Approved, bob()));

    let (approval, status) = approval_of(script.consume("apr-1", "exec-1"));
    assert_eq!(status, ApprovalStatus::Consumed);
    assert_eq!(approval.status, StoredApprovalStatus::Consumed);
    assert_eq!(approval.consumed_by_execution_id.as_deref(), Some("exec-1"));

    let error = refused(script.consume("apr-1", "exec-2"), ErrorCode::FailedPrecondition);
    assert_eq!(error.message, "approval apr-1 cannot be consumed (status: consumed, consumed by exec-1)");
    assert_eq!(script.approval("apr-1").consumed_by_execution_id.as_deref(), Some("exec-1"));
    let consumed_events = script.events().iter().filter(|event| event.kind == EventKind::ApprovalConsumed).count();
    assert_eq!(consumed_events, 1);
}

#[test]
fn of_many_consumes_of_one_approval_exactly_one_succeeds() {
    let mut script = Script::new();
    script.create_approval(approval_request("apr-1"));
    approval_of(script.decide("apr-1", ApprovalStatus::Approved, bob()));

    let successes = (0..10).filter(|n| script.consume("apr-1", &format!("exec-{n}")).error().is_none()).count();

    assert_eq!(successes, 1);
}

#[test]
fn consume_of_an_approval_that_is_not_approved_is_failed_precondition() {
    let mut script = Script::new();
    script.create_approval(approval_request("apr-pending"));
    script.create_approval(approval_request("apr-rejected"));
    approval_of(script.decide("apr-rejected", ApprovalStatus::Rejected, bob()));

    let error = refused(script.consume("apr-pending", "exec-1"), ErrorCode::FailedPrecondition);
    assert_eq!(error.message, "approval apr-pending cannot be consumed (status: pending)");
    let error = refused(script.consume("apr-rejected", "exec-1"), ErrorCode::FailedPrecondition);
    assert_eq!(error.message, "approval apr-rejected cannot be consumed (status: rejected)");
    let error = refused(script.consume("apr-404", "exec-1"), ErrorCode::NotFound);
    assert_eq!(error.message, "approval apr-404 was not found");
}

#[test]
fn consume_does_not_check_post_approval_expiry() {
    let mut script = Script::new();
    let approval = script.create_approval(approval_request("apr-1"));
    approval_of(script.decide("apr-1", ApprovalStatus::Approved, bob()));
    script.at(approval.expires_at_ms + 1);

    let (approval, _) = approval_of(script.consume("apr-1", "exec-1"));

    assert_eq!(approval.status, StoredApprovalStatus::Consumed);
}

#[test]
fn list_filters_compose_and_results_are_ordered_by_requested_at_then_id() {
    let mut script = Script::new();
    let at = |id: &str, requested_at: u64, capability: &str, actor: &str| gavel_core::CreateApproval {
        requested_at_ms: Some(requested_at),
        capability_id: capability.to_string(),
        actor: Actor::user(actor),
        ..approval_request(id)
    };
    // Created out of order on purpose.
    script.create_approval(at("c", START_MS + 2, "refund", "alice"));
    script.create_approval(at("b", START_MS + 1, "refund", "alice"));
    script.create_approval(at("a", START_MS + 2, "refund", "alice"));
    script.create_approval(at("d", START_MS, "refund", "carol"));
    script.create_approval(at("e", START_MS, "delete", "alice"));
    approval_of(script.decide("b", ApprovalStatus::Approved, bob()));
    let now = script.state.clock_ms();
    let ids = |filter: ApprovalFilter| listed_ids(&script, &filter, now);

    assert_eq!(ids(ApprovalFilter::default()), vec!["d", "e", "b", "a", "c"]);
    let refund = ApprovalFilter { capability_id: Some("refund".to_string()), ..ApprovalFilter::default() };
    assert_eq!(ids(refund.clone()), vec!["d", "b", "a", "c"]);
    let refund_by_alice = ApprovalFilter { actor_id: Some("alice".to_string()), ..refund };
    assert_eq!(ids(refund_by_alice.clone()), vec!["b", "a", "c"]);
    let pending_refund_by_alice = ApprovalFilter { status: Some(ApprovalStatus::Pending), ..refund_by_alice };
    assert_eq!(ids(pending_refund_by_alice), vec!["a", "c"]);
}

#[test]
fn list_status_filter_sees_lazily_expired_approvals() {
    let mut script = Script::new();
    let short = |id: &str, expires_at: u64| gavel_core::CreateApproval {
        expires_at_ms: Some(expires_at),
        ..approval_request(id)
    };
    script.create_approval(short("soon", START_MS + 10));
    script.create_approval(short("later", START_MS + 1_000));
    let now = START_MS + 11;
    let ids = |status: ApprovalStatus| -> Vec<String> {
        listed_ids(&script, &ApprovalFilter { status: Some(status), ..ApprovalFilter::default() }, now)
    };

    assert_eq!(ids(ApprovalStatus::Expired), vec!["soon"]);
    assert_eq!(ids(ApprovalStatus::Pending), vec!["later"]);
}

#[test]
fn cancel_moves_a_pending_approval_to_cancelled() {
    let mut script = Script::new();
    script.create_approval(approval_request("apr-1"));

    let reply = script.apply(Command::CancelApproval { approval_id: "apr-1".to_string(), caller_now_ms: None });
    let (approval, status) = approval_of(reply);

    assert_eq!(status, ApprovalStatus::Cancelled);
    assert_eq!(approval.status, StoredApprovalStatus::Cancelled);
    assert_eq!(script.events().pop().map(|event| event.kind), Some(EventKind::ApprovalCancelled));
    let error = refused(script.decide("apr-1", ApprovalStatus::Approved, bob()), ErrorCode::FailedPrecondition);
    assert_eq!(error.message, "approval apr-1 is not pending (status: cancelled)");
}

#[test]
fn cancel_of_an_approval_that_is_not_pending_is_refused() {
    let mut script = Script::new();
    script.create_approval(approval_request("apr-1"));
    approval_of(script.decide("apr-1", ApprovalStatus::Approved, bob()));
    let cancel = |id: &str| Command::CancelApproval { approval_id: id.to_string(), caller_now_ms: None };

    let error = refused(script.apply(cancel("apr-1")), ErrorCode::FailedPrecondition);
    assert_eq!(error.message, "approval apr-1 is not pending (status: approved)");
    assert_eq!(script.approval("apr-1").status, StoredApprovalStatus::Approved);
    refused(script.apply(cancel("apr-404")), ErrorCode::NotFound);
}

#[test]
fn a_caller_provided_now_is_used_for_that_requests_comparisons_and_timestamps() {
    let mut script = Script::new();
    // The cluster clock is far past the caller's: by the cluster's clock the
    // approval below would be long expired.
    script.at(START_MS + 10 * FIFTEEN_MINUTES_MS);
    let caller_now = START_MS;
    let request = gavel_core::CreateApproval { caller_now_ms: Some(caller_now), ..approval_request("apr-1") };
    let (created, status) = approval_of(script.apply(Command::CreateApproval(request)));
    assert_eq!(created.requested_at_ms, caller_now);
    assert_eq!(created.expires_at_ms, caller_now + FIFTEEN_MINUTES_MS);
    assert_eq!(status, ApprovalStatus::Pending, "status is computed at the caller's now");

    let decide = |now: u64| Command::DecideApproval {
        terms_hash: None,
        approval_id: "apr-1".to_string(),
        status: ApprovalStatus::Approved,
        approver: bob(),
        comment: None,
        caller_now_ms: Some(now),
    };
    // A caller whose clock says the approval expired is refused, whatever the cluster clock.
    let error = refused(script.apply(decide(caller_now + FIFTEEN_MINUTES_MS + 1)), ErrorCode::FailedPrecondition);
    assert_eq!(error.message, "approval apr-1 is not pending (status: expired)");

    let (decided, status) = approval_of(script.apply(decide(caller_now + 5)));
    assert_eq!(status, ApprovalStatus::Approved);
    assert_eq!(decided.decision.map(|decision| decision.decided_at_ms), Some(caller_now + 5));

    let consume = Command::ConsumeApproval {
        approval_id: "apr-1".to_string(),
        execution_id: "exec-1".to_string(),
        caller_now_ms: Some(caller_now + 6),
    };
    let (consumed, _) = approval_of(script.apply(consume));
    assert_eq!(consumed.closed_at_ms, Some(caller_now + 6));
}

#[test]
fn approval_events_record_creation_decision_and_consumption_in_order() {
    let mut script = Script::new();
    script.create_approval(approval_request("apr-1"));
    approval_of(script.decide("apr-1", ApprovalStatus::Approved, bob()));
    approval_of(script.consume("apr-1", "exec-1"));

    let types: Vec<&str> = script.events().iter().map(|event| event.kind.type_name()).collect();

    assert_eq!(types, vec!["capability.approval_requested", "capability.approved", "approval.consumed"]);
}

#[test]
fn retention_drops_closed_approvals_but_keeps_open_ones() {
    let mut script = Script::new();
    for id in ["pending", "approved", "rejected", "consumed", "cancelled"] {
        let request = gavel_core::CreateApproval { expires_at_ms: Some(START_MS + 1_000_000), ..approval_request(id) };
        script.create_approval(request);
    }
    approval_of(script.decide("approved", ApprovalStatus::Approved, bob()));
    approval_of(script.decide("rejected", ApprovalStatus::Rejected, bob()));
    approval_of(script.decide("consumed", ApprovalStatus::Approved, bob()));
    approval_of(script.consume("consumed", "exec-1"));
    approval_of(script.apply(Command::CancelApproval { approval_id: "cancelled".to_string(), caller_now_ms: None }));
    script.advance(10_000);

    script.tick_with(Retention { records_ms: 1_000, events_ms: 1_000 });

    assert!(script.state.approval("pending").is_some(), "an unexpired pending approval is kept");
    assert!(script.state.approval("approved").is_some(), "an approved, unconsumed approval is kept");
    for id in ["rejected", "consumed", "cancelled"] {
        assert!(script.state.approval(id).is_none(), "{id} is kept past retention");
    }
}

#[test]
fn retention_drops_expired_pending_and_unspent_approved_approvals_after_their_expiry() {
    let mut script = Script::new();
    for id in ["pending", "approved"] {
        let request = gavel_core::CreateApproval { expires_at_ms: Some(START_MS + 5_000), ..approval_request(id) };
        script.create_approval(request);
    }
    approval_of(script.decide("approved", ApprovalStatus::Approved, bob()));
    approval_of(script.consume("approved", "exec-never-created"));
    assert!(!script.state.execution_events("exec-never-created", 0, 10).is_empty(), "the consume is indexed");
    script.create_approval(gavel_core::CreateApproval {
        expires_at_ms: Some(START_MS + 5_000),
        ..approval_request("approved-unspent")
    });
    approval_of(script.decide("approved-unspent", ApprovalStatus::Approved, bob()));

    script.advance(4_000);
    script.tick_with(Retention { records_ms: 1_000, events_ms: 1_000 });
    assert!(script.state.approval("approved-unspent").is_some(), "still resumable before its expiry");

    script.advance(120_000);
    script.tick_with(Retention { records_ms: 1_000, events_ms: 1_000 });
    for id in ["pending", "approved", "approved-unspent"] {
        assert!(script.state.approval(id).is_none(), "{id} is kept past its expiry plus retention");
    }
    assert_eq!(
        script.state.indexed_execution_count(),
        0,
        "the index of an execution that never existed is dropped with its events"
    );
}

/// Found by `gavel-lab chaos`: the server used to resolve `expiresInMs` against
/// the clock of the node that converted the request, so a client's retry of
/// an ambiguous create (same request id, later, maybe through another node)
/// was a different command and was refused as REQUEST_ID_REUSED although the
/// first attempt had created the approval. The state machine now resolves it.
#[test]
fn a_create_with_relative_expiry_retried_later_is_the_same_request() {
    let mut script = Script::new();
    let create = Command::CreateApproval(gavel_core::CreateApproval {
        expires_in_ms: Some(60_000),
        ..approval_request("apr-1")
    });
    let first = script.apply_as("req-create-1", create.clone());
    let gavel_core::Reply::Approval { approval: created, .. } = &first else { panic!("created: {first:?}") };
    assert_eq!(created.expires_at_ms, created.requested_at_ms + 60_000, "resolved against requested-at");
    script.advance(5_000);
    let retried = script.apply_as("req-create-1", create);
    assert_eq!(retried, first, "the retry gets the first answer, not REQUEST_ID_REUSED");
}

#[test]
fn an_absolute_expiry_more_than_30_days_after_the_cluster_clock_is_refused_at_apply() {
    // No requestedAt and no caller clock: only apply knows the time, so the
    // 30-day cap on an absolute expiry is enforced there.
    let mut script = Script::new();
    let far = gavel_core::CreateApproval {
        expires_at_ms: Some(gavel_core::limits::TIMESTAMP_MS_MAX),
        ..approval_request("apr-year-9999")
    };
    let error = refused(script.apply(Command::CreateApproval(far)), ErrorCode::InvalidArgument);
    assert!(error.message.contains("30 days"), "{error:?}");
    assert!(script.state.approval("apr-year-9999").is_none());

    let thirty_days_ms = gavel_core::limits::APPROVAL_EXPIRES_IN_MS_MAX;
    let at_the_cap =
        gavel_core::CreateApproval { expires_at_ms: Some(START_MS + thirty_days_ms), ..approval_request("apr-cap") };
    let (approval, _) = approval_of(script.apply(Command::CreateApproval(at_the_cap)));
    assert_eq!(approval.expires_at_ms, START_MS + thirty_days_ms);
}

/// The ids of the first 100 approvals listed oldest first under `filter` at `now`.
fn listed_ids(script: &Script, filter: &ApprovalFilter, now: u64) -> Vec<String> {
    let listed = script.state.list_approvals(filter, now, None, 100, gavel_core::ListOrder::OldestFirst);
    listed.into_iter().map(|approval| approval.id.clone()).collect()
}
