//! Execution rules (SPEC §4–§6): submission, resume, leases, heartbeats,
//! reports, the SI-11 retry rule, timeouts, cancellation, the audit trail,
//! request-id deduplication, retention and snapshots. One test per rule.

mod support;

use gavel_core::command::{CapabilitySpec, Command, Retention, RetrySpec};
use gavel_core::limits::{DEDUP_TTL_MS, INPUT_BYTES_MAX};
use gavel_core::{
    Actor, ApprovalStatus, CancelCode, ErrorCode, EventKind, ExecutedBeforeFailure, Execution, ExecutionState,
    ResultEnvelope, SideEffect, StoredApprovalStatus,
};
use support::*;

/// A read capability that retries `attempts_max` times with `backoff_ms` base backoff.
fn retrying_read(script: &mut Script, attempts_max: u32, backoff_ms: u64) {
    script.register(retrying("search", SideEffect::Read, attempts_max, backoff_ms));
}

/// The result of a finalized execution.
fn result_of(script: &Script, execution_id: &str) -> ResultEnvelope {
    let execution = script.execution(execution_id);
    assert!(execution.state.is_final(), "{execution_id} is {:?}", execution.state);
    execution.result.unwrap_or_else(|| panic!("final execution {execution_id} has no result"))
}

/// Every `capability.retried` event of an execution, as (attempt, previous code, backoff).
fn retries(script: &Script, execution_id: &str) -> Vec<(u32, String, u64)> {
    script
        .events()
        .into_iter()
        .filter(|event| event.execution_id.as_deref() == Some(execution_id))
        .filter_map(|event| match event.kind {
            EventKind::Retried { attempt, previous_error_code, backoff_ms } => {
                Some((attempt, previous_error_code, backoff_ms))
            }
            _ => None,
        })
        .collect()
}

/// Submits an approval-required execution, and returns its approval id.
fn gated_submission(script: &mut Script, input_json: &str) -> String {
    script.register(gated("refund", SideEffect::Write, 60_000));
    match script.submit("exec-1", "refund", input_json) {
        gavel_core::Reply::ApprovalRequired { approval, .. } => approval.id,
        other => panic!("expected approval-required, got {other:?}"),
    }
}

// ------------------------------------------------------------------ submission

#[test]
fn submit_creates_a_queued_execution_and_records_the_request() {
    let mut script = Script::new();
    script.register(capability("search", SideEffect::Read));

    let execution = script.submit_ok("exec-1", "search", r#"{"q": "rust"}"#);

    assert_eq!(execution.state, ExecutionState::Queued);
    assert_eq!(execution.capability_version, 1);
    assert_eq!(execution.input_json, r#"{"q":"rust"}"#);
    assert_eq!(execution.actor, alice());
    assert_eq!(execution.attempts, 0);
    assert_eq!(execution.result, None);
    assert_eq!(script.execution("exec-1"), execution);
    assert_eq!(script.event_types("exec-1"), vec!["capability.requested"]);
}

#[test]
fn submit_repeated_with_the_same_execution_id_and_input_returns_the_existing_execution() {
    let mut script = Script::new();
    script.register(capability("search", SideEffect::Read));
    let first = script.submit_ok("exec-1", "search", r#"{"a":1,"b":2}"#);

    // Same value, different spelling: same canonical hash.
    let (again, created) = execution_of(script.submit("exec-1", "search", r#"{ "b": 2, "a": 1.0 }"#));

    assert!(!created);
    assert_eq!(again, first);
    assert_eq!(script.state.execution_count(), 1);
    assert_eq!(script.event_types("exec-1"), vec!["capability.requested"]);
}

#[test]
fn submit_repeated_with_the_same_execution_id_and_a_different_input_is_already_exists() {
    let mut script = Script::new();
    script.register(capability("search", SideEffect::Read));
    let first = script.submit_ok("exec-1", "search", r#"{"a":1}"#);

    refused(script.submit("exec-1", "search", r#"{"a":2}"#), ErrorCode::AlreadyExists);

    assert_eq!(script.execution("exec-1"), first);
}

#[test]
fn submit_of_an_unknown_capability_is_capability_not_found() {
    let mut script = Script::new();
    refused(script.submit("exec-1", "nope", "{}"), ErrorCode::CapabilityNotFound);
    assert!(script.state.execution("exec-1").is_none());
}

#[test]
fn submit_of_input_that_is_not_json_is_input_invalid() {
    let mut script = Script::new();
    script.register(capability("search", SideEffect::Read));
    for bad in ["", "{", "{'a':1}", "[1,]", "NaN"] {
        refused(script.submit("exec-1", "search", bad), ErrorCode::InputInvalid);
    }
    assert!(script.state.execution("exec-1").is_none());
}

#[test]
fn submit_of_input_over_the_size_limit_is_input_invalid() {
    let mut script = Script::new();
    script.register(capability("search", SideEffect::Read));
    let oversized = format!("\"{}\"", "x".repeat(INPUT_BYTES_MAX));

    refused(script.submit("exec-1", "search", &oversized), ErrorCode::InputInvalid);

    assert!(script.state.execution("exec-1").is_none());
}

#[test]
fn submit_with_an_empty_actor_id_is_invalid_argument() {
    let mut script = Script::new();
    script.register(capability("search", SideEffect::Read));
    let submit = gavel_core::Submit { actor: Actor::user(""), ..submission("exec-1", "search", "{}") };

    refused(script.apply(Command::Submit(submit)), ErrorCode::InvalidArgument);

    assert!(script.state.execution("exec-1").is_none());
}

#[test]
fn submit_of_an_approval_required_capability_creates_a_pending_approval_and_no_execution() {
    let mut script = Script::new();
    script.register(gated("refund", SideEffect::Write, 60_000));

    let reply = script.submit("exec-1", "refund", r#"{"amount":5}"#);

    let gavel_core::Reply::ApprovalRequired { approval, status } = reply else {
        panic!("expected approval-required, got {reply:?}");
    };
    assert_eq!(status, ApprovalStatus::Pending);
    assert_eq!(approval.status, StoredApprovalStatus::Pending);
    assert_eq!(approval.capability_id, "refund");
    assert_eq!(approval.actor, alice());
    assert_eq!(approval.input_json, r#"{"amount":5}"#);
    assert_eq!(approval.side_effect, SideEffect::Write);
    assert_eq!(approval.requested_at_ms, START_MS);
    assert_eq!(approval.expires_at_ms, START_MS + 60_000);
    assert_eq!(approval.execution_id.as_deref(), Some("exec-1"));
    assert_eq!(script.approval(&approval.id), approval);
    assert!(script.state.execution("exec-1").is_none());
    assert!(script.poll("w1", "refund").is_none());
}

#[test]
fn repeating_an_approval_required_submit_returns_the_same_approval() {
    let mut script = Script::new();
    let approval_id = gated_submission(&mut script, r#"{"amount":5}"#);
    let events_before = script.events().len();

    let reply = script.submit("exec-1", "refund", r#"{"amount":5}"#);

    let gavel_core::Reply::ApprovalRequired { approval, .. } = reply else {
        panic!("expected approval-required, got {reply:?}");
    };
    assert_eq!(approval.id, approval_id);
    assert_eq!(
        script.state.list_approvals(&Default::default(), START_MS, None, 100, gavel_core::ListOrder::OldestFirst).len(),
        1
    );
    assert_eq!(script.events().len(), events_before);
    refused(script.submit("exec-1", "refund", r#"{"amount":6}"#), ErrorCode::AlreadyExists);
}

// ------------------------------------------------------------------ resume

#[test]
fn resume_of_a_pending_approval_is_approval_pending() {
    let mut script = Script::new();
    let approval_id = gated_submission(&mut script, "{}");
    let before = script.state.state_hash();

    refused(script.resume(&approval_id, None), ErrorCode::ApprovalPending);

    assert_eq!(script.state.state_hash(), before);
}

#[test]
fn resume_of_a_rejected_approval_is_approval_rejected() {
    let mut script = Script::new();
    let approval_id = gated_submission(&mut script, "{}");
    approval_of(script.decide(&approval_id, ApprovalStatus::Rejected, bob()));

    refused(script.resume(&approval_id, None), ErrorCode::ApprovalRejected);

    assert!(script.state.execution("exec-1").is_none());
}

#[test]
fn resume_of_a_cancelled_approval_is_approval_cancelled() {
    let mut script = Script::new();
    let approval_id = gated_submission(&mut script, "{}");
    approval_of(script.apply(Command::CancelApproval { approval_id: approval_id.clone(), caller_now_ms: None }));

    refused(script.resume(&approval_id, None), ErrorCode::ApprovalCancelled);

    assert!(script.state.execution("exec-1").is_none());
}

#[test]
fn resume_of_an_approval_that_expired_while_pending_is_approval_expired() {
    let mut script = Script::new();
    let approval_id = gated_submission(&mut script, "{}");
    script.advance(60_001);

    refused(script.resume(&approval_id, None), ErrorCode::ApprovalExpired);

    assert_eq!(script.approval(&approval_id).status, StoredApprovalStatus::Pending);
    assert!(script.state.execution("exec-1").is_none());
}

#[test]
fn resume_of_an_approval_approved_but_past_its_expiry_is_approval_expired() {
    let mut script = Script::new();
    let approval_id = gated_submission(&mut script, "{}");
    approval_of(script.decide(&approval_id, ApprovalStatus::Approved, bob()));
    script.advance(60_001);

    refused(script.resume(&approval_id, None), ErrorCode::ApprovalExpired);

    assert_eq!(script.approval(&approval_id).status, StoredApprovalStatus::Approved, "not consumed");
    assert!(script.state.execution("exec-1").is_none());
}

#[test]
fn resume_of_a_consumed_approval_is_approval_consumed() {
    let mut script = Script::new();
    let approval_id = gated_submission(&mut script, "{}");
    approval_of(script.decide(&approval_id, ApprovalStatus::Approved, bob()));
    execution_of(script.resume(&approval_id, None));

    refused(script.resume(&approval_id, None), ErrorCode::ApprovalConsumed);

    assert_eq!(script.state.execution_count(), 1);
}

#[test]
fn resume_with_a_different_input_is_approval_input_mismatch() {
    let mut script = Script::new();
    let approval_id = gated_submission(&mut script, r#"{"amount":5}"#);
    approval_of(script.decide(&approval_id, ApprovalStatus::Approved, bob()));

    refused(script.resume(&approval_id, Some(r#"{"amount":500}"#)), ErrorCode::ApprovalInputMismatch);

    assert_eq!(script.approval(&approval_id).status, StoredApprovalStatus::Approved, "not consumed");
    assert!(script.state.execution("exec-1").is_none());
    // The same value spelled differently matches.
    execution_of(script.resume(&approval_id, Some(r#"{ "amount": 5.0 }"#)));
}

#[test]
fn the_requester_cannot_approve_their_own_submission() {
    // Submit-created approvals never opt out of the self-approval check, so the
    // check at decide is what keeps a requester from approving; the check at
    // resume (APPROVAL_SELF_APPROVAL) is a second line that decide makes unreachable.
    let mut script = Script::new();
    let approval_id = gated_submission(&mut script, "{}");

    refused(script.decide(&approval_id, ApprovalStatus::Approved, alice()), ErrorCode::ApprovalSelfApproval);

    refused(script.resume(&approval_id, None), ErrorCode::ApprovalPending);
}

#[test]
fn resume_consumes_the_approval_and_creates_the_execution_in_one_command() {
    let mut script = Script::new();
    let approval_id = gated_submission(&mut script, r#"{"amount":5}"#);
    approval_of(script.decide(&approval_id, ApprovalStatus::Approved, bob()));
    let next_cursor = script.state.next_cursor();

    let (execution, created) = execution_of(script.resume(&approval_id, None));

    assert!(created);
    assert_eq!(execution.execution_id, "exec-1", "the id chosen at submit");
    assert_eq!(execution.input_json, r#"{"amount":5}"#);
    assert_eq!(execution.approval_id.as_deref(), Some(approval_id.as_str()));
    assert_eq!(execution.approver, Some(bob()));
    assert_eq!(execution.actor, alice());
    assert_eq!(execution.state, ExecutionState::Queued);
    let approval = script.approval(&approval_id);
    assert_eq!(approval.status, StoredApprovalStatus::Consumed);
    assert_eq!(approval.consumed_by_execution_id.as_deref(), Some("exec-1"));
    let new_events: Vec<&str> =
        script.state.events_after(next_cursor - 1, 100).iter().map(|event| event.kind.type_name()).collect();
    assert_eq!(new_events, vec!["approval.consumed"]);
    // A repeated submit now finds the execution.
    let (again, created) = execution_of(script.submit("exec-1", "refund", r#"{"amount":5}"#));
    assert!(!created);
    assert_eq!(again.execution_id, "exec-1");
    // The worker gets the approver with the task.
    let task = script.lease("w1", "refund");
    assert_eq!(task.approver, Some(bob()));
    assert_eq!(task.approval_id.as_deref(), Some(approval_id.as_str()));
}

// ------------------------------------------------------------------ leasing

#[test]
fn leases_are_granted_fifo_per_queue() {
    let mut script = Script::new();
    script.register(capability("search", SideEffect::Read));
    script.register(capability("other", SideEffect::Read));
    for id in ["e3", "e1", "e2"] {
        script.submit_ok(id, "search", "{}");
        script.advance(1);
    }
    script.submit_ok("x1", "other", "{}");

    let order: Vec<String> =
        script.poll_many("w1", "search", 10).into_iter().map(|task| task.lease.execution_id).collect();

    assert_eq!(order, vec!["e3", "e1", "e2"]);
    assert!(script.poll("w1", "search").is_none(), "each is leased to one worker at a time");
    assert_eq!(script.lease("w2", "other").lease.execution_id, "x1");
}

#[test]
fn lease_ids_strictly_increase() {
    let mut script = Script::new();
    retrying_read(&mut script, 5, 0);
    for id in ["e1", "e2", "e3"] {
        script.submit_ok(id, "search", "{}");
    }
    let mut lease_ids = Vec::new();
    for _ in 0..3 {
        let task = script.lease("w1", "search");
        lease_ids.push(task.lease.lease_id);
        // Fail it so it is retried and leased again.
        reported(script.report_err(task.lease.lease_id, "w1", "FLAKY", true));
    }
    lease_ids.extend(script.poll_many("w2", "search", 10).into_iter().map(|task| task.lease.lease_id));

    assert_eq!(lease_ids.len(), 6);
    assert!(lease_ids.windows(2).all(|pair| pair[0] < pair[1]), "{lease_ids:?}");
}

#[test]
fn a_task_carries_the_attempt_deadline_idempotency_key_input_and_actor() {
    let mut script = Script::new();
    script.register(CapabilitySpec { timeout_ms: Some(5_000), ..capability("search", SideEffect::Read) });
    let execution = script.submit_ok("exec-1", "search", r#"{"q":"x"}"#);
    script.advance(7);

    let task = script.lease("w1", "search");

    assert_eq!(task.lease.execution_id, "exec-1");
    assert_eq!(task.lease.attempt, 1);
    assert_eq!(task.lease.worker_id, "w1");
    assert_eq!(task.lease.granted_at_ms, START_MS + 7);
    assert_eq!(task.lease.deadline_ms, START_MS + 7 + 5_000);
    assert_eq!(task.idempotency_key, execution.idempotency_key);
    assert_eq!(task.input_json, r#"{"q":"x"}"#);
    assert_eq!(task.actor, alice());
    let leased = script.execution("exec-1");
    assert_eq!(leased.state, ExecutionState::Leased);
    assert_eq!(leased.attempts, 1);
    assert_eq!(leased.lease, Some(task.lease.clone()));
    assert_eq!(script.event_types("exec-1"), vec!["capability.requested", "capability.started"]);
}

#[test]
fn a_poll_with_nothing_ready_leases_nothing() {
    let mut script = Script::new();
    script.register(capability("search", SideEffect::Read));
    assert!(script.poll_many("w1", "search", 5).is_empty());
    assert!(script.poll_many("w1", "unknown-queue", 5).is_empty());
}

// ------------------------------------------------------------------ heartbeats

#[test]
fn heartbeats_do_not_extend_the_attempt_deadline() {
    let mut script = Script::new();
    script.register(CapabilitySpec {
        timeout_ms: Some(10_000),
        heartbeat_timeout_ms: Some(1_000),
        ..capability("search", SideEffect::Read)
    });
    script.submit_ok("exec-1", "search", "{}");
    let task = script.lease("w1", "search");
    let deadline = task.lease.deadline_ms;

    // Heartbeating every 500 ms keeps the worker from being lost...
    while script.now_ms + 500 < deadline {
        script.advance(500);
        assert_eq!(
            script.heartbeat(task.lease.lease_id, "w1"),
            gavel_core::Reply::Heartbeat { cancel_requested: false, deadline_ms: deadline }
        );
        script.tick();
        assert_eq!(script.execution("exec-1").state, ExecutionState::Leased);
    }
    // ...but not past the attempt's deadline.
    script.at(deadline);
    script.tick();

    assert_eq!(
        result_of(&script, "exec-1"),
        ResultEnvelope::Cancelled { code: CancelCode::Timeout, attempts: 1, duration_ms: 10_000 }
    );
    let expired = script.events().into_iter().find_map(|event| match event.kind {
        EventKind::LeaseExpired { code, .. } => Some(code),
        _ => None,
    });
    assert_eq!(expired.as_deref(), Some("TIMEOUT"));
}

#[test]
fn heartbeat_after_a_caller_cancel_tells_the_worker_to_stop() {
    let mut script = Script::new();
    script.register(capability("search", SideEffect::Read));
    script.submit_ok("exec-1", "search", "{}");
    let task = script.lease("w1", "search");
    execution_of(script.cancel("exec-1"));

    let reply = script.heartbeat(task.lease.lease_id, "w1");

    let gavel_core::Reply::Heartbeat { cancel_requested, .. } = reply else {
        panic!("expected a heartbeat answer, got {reply:?}");
    };
    assert!(cancel_requested);
}

#[test]
fn heartbeat_for_a_lease_that_is_not_current_is_lease_lost() {
    let mut script = Script::new();
    script.register(capability("search", SideEffect::Read));
    script.submit_ok("exec-1", "search", "{}");
    let task = script.lease("w1", "search");

    refused(script.heartbeat(task.lease.lease_id, "w2"), ErrorCode::LeaseLost);
    refused(script.heartbeat(999, "w1"), ErrorCode::LeaseLost);
    reported(script.report_ok(task.lease.lease_id, "w1", "{}"));
    refused(script.heartbeat(task.lease.lease_id, "w1"), ErrorCode::LeaseLost);
}

// ------------------------------------------------------------------ reports

#[test]
fn a_completed_report_finalizes_the_execution_with_its_output() {
    let mut script = Script::new();
    script.register(capability("search", SideEffect::Read));
    script.submit_ok("exec-1", "search", "{}");
    let task = script.lease("w1", "search");
    script.advance(25);

    let (execution, retry_scheduled) = reported(script.report_ok(task.lease.lease_id, "w1", r#"{ "hits": [1, 2] }"#));

    assert!(!retry_scheduled);
    assert_eq!(execution.state, ExecutionState::Completed);
    assert_eq!(execution.lease, None);
    let expected =
        ResultEnvelope::Completed { output_json: r#"{"hits":[1,2]}"#.to_string(), attempts: 1, duration_ms: 25 };
    assert_eq!(result_of(&script, "exec-1"), expected);
    assert_eq!(script.event_types("exec-1").last(), Some(&"capability.completed"));
}

#[test]
fn reporting_the_same_outcome_for_the_same_lease_twice_gets_the_same_answer() {
    let mut script = Script::new();
    retrying_read(&mut script, 1, 0);
    script.submit_ok("exec-1", "search", "{}");
    let task = script.lease("w1", "search");
    let first = script.report_err(task.lease.lease_id, "w1", "FLAKY", true);
    let events_after_first = script.events().len();

    let second = script.report_err(task.lease.lease_id, "w1", "FLAKY", true);

    assert_eq!(second, first);
    assert!(reported(second).1, "the repeat says a retry was scheduled, like the first");
    assert_eq!(script.events().len(), events_after_first, "no second effect");
    // A different outcome for the same lease is not a repeat.
    refused(script.report_ok(task.lease.lease_id, "w1", "{}"), ErrorCode::LeaseLost);
}

#[test]
fn a_repeated_completed_report_gets_the_same_answer() {
    let mut script = Script::new();
    script.register(capability("search", SideEffect::Read));
    script.submit_ok("exec-1", "search", "{}");
    let task = script.lease("w1", "search");
    let first = script.report_ok(task.lease.lease_id, "w1", r#"{"ok":true}"#);
    reported(first.clone());

    assert_eq!(script.report_ok(task.lease.lease_id, "w1", r#"{"ok":true}"#), first);
}

#[test]
fn a_report_under_a_superseded_lease_is_lease_lost_and_recorded() {
    let mut script = Script::new();
    script.register(CapabilitySpec { timeout_ms: Some(1_000), ..retrying("search", SideEffect::Read, 1, 0) });
    script.submit_ok("exec-1", "search", "{}");
    let stale = script.lease("w1", "search");
    script.advance(1_000);
    script.tick();
    let current = script.lease("w2", "search");

    let error = refused(script.report_ok(stale.lease.lease_id, "w1", r#"{"late":true}"#), ErrorCode::LeaseLost);

    assert!(error.message.contains(&stale.lease.lease_id.to_string()), "{}", error.message);
    let late = script.events().pop().expect("an event");
    assert_eq!(late.kind, EventKind::LateReportRejected { lease_id: stale.lease.lease_id, attempt: 1 });
    assert_eq!(late.execution_id.as_deref(), Some("exec-1"));
    let execution = script.execution("exec-1");
    assert_eq!(execution.state, ExecutionState::Leased, "the late output was not consumed");
    assert_eq!(execution.lease.map(|lease| lease.lease_id), Some(current.lease.lease_id));
    // The current lease's report is the one that counts.
    reported(script.report_ok(current.lease.lease_id, "w2", r#"{"late":false}"#));
    let ResultEnvelope::Completed { output_json, attempts, .. } = result_of(&script, "exec-1") else {
        panic!("expected completed");
    };
    assert_eq!((output_json.as_str(), attempts), (r#"{"late":false}"#, 2));
}

#[test]
fn a_report_after_the_deadline_but_before_any_tick_is_lease_lost() {
    let mut script = Script::new();
    script.register(CapabilitySpec { timeout_ms: Some(1_000), ..capability("search", SideEffect::Read) });
    script.submit_ok("exec-1", "search", "{}");
    let task = script.lease("w1", "search");
    script.advance(1_000);

    refused(script.report_ok(task.lease.lease_id, "w1", "{}"), ErrorCode::LeaseLost);

    let ResultEnvelope::Cancelled { code, .. } = result_of(&script, "exec-1") else {
        panic!("the output must not become the result");
    };
    assert_eq!(code, CancelCode::Timeout);
    let types = script.event_types("exec-1");
    assert!(types.contains(&"lease.expired") && types.contains(&"lease.late_report_rejected"), "{types:?}");
}

#[test]
fn a_report_from_a_worker_that_does_not_hold_the_lease_is_lease_lost() {
    let mut script = Script::new();
    script.register(capability("search", SideEffect::Read));
    script.submit_ok("exec-1", "search", "{}");
    let task = script.lease("w1", "search");

    refused(script.report_ok(task.lease.lease_id, "w2", "{}"), ErrorCode::LeaseLost);
    refused(script.report_ok(task.lease.lease_id + 100, "w1", "{}"), ErrorCode::LeaseLost);

    assert_eq!(script.execution("exec-1").state, ExecutionState::Leased);
    reported(script.report_ok(task.lease.lease_id, "w1", "{}"));
}

// ------------------------------------------------------------------ SI-11 retry rule

#[test]
fn a_failure_without_a_retry_config_finalizes_failed() {
    let mut script = Script::new();
    script.register(capability("search", SideEffect::Read));
    script.submit_ok("exec-1", "search", "{}");
    let task = script.lease("w1", "search");

    let (_, retry_scheduled) = reported(script.report_err(task.lease.lease_id, "w1", "UPSTREAM_DOWN", true));

    assert!(!retry_scheduled);
    let expected = ResultEnvelope::Failed {
        code: "UPSTREAM_DOWN".to_string(),
        message: "UPSTREAM_DOWN happened".to_string(),
        retryable: true,
        attempts: 1,
        executed_before_failure: None,
    };
    assert_eq!(result_of(&script, "exec-1"), expected);
    assert!(retries(&script, "exec-1").is_empty());
}

#[test]
fn a_retry_config_with_zero_max_attempts_never_retries() {
    let mut script = Script::new();
    retrying_read(&mut script, 0, 0);
    script.submit_ok("exec-1", "search", "{}");
    let task = script.lease("w1", "search");

    let (execution, retry_scheduled) = reported(script.report_err(task.lease.lease_id, "w1", "FLAKY", true));

    assert!(!retry_scheduled);
    assert_eq!(execution.state, ExecutionState::Failed);
}

#[test]
fn a_retryable_failure_is_retried_while_attempts_so_far_are_at_most_max_attempts() {
    let mut script = Script::new();
    retrying_read(&mut script, 2, 0);
    script.submit_ok("exec-1", "search", "{}");

    let mut scheduled = Vec::new();
    while let Some(task) = script.poll("w1", "search") {
        scheduled.push(reported(script.report_err(task.lease.lease_id, "w1", "FLAKY", true)).1);
    }

    // One first attempt plus two additional attempts.
    assert_eq!(scheduled, vec![true, true, false]);
    let ResultEnvelope::Failed { attempts, code, .. } = result_of(&script, "exec-1") else { panic!("failed") };
    assert_eq!((attempts, code.as_str()), (3, "FLAKY"));
    let attempts: Vec<u32> = retries(&script, "exec-1").into_iter().map(|(attempt, _, _)| attempt).collect();
    assert_eq!(attempts, vec![2, 3]);
}

#[test]
fn a_failure_the_worker_marks_non_retryable_is_not_retried() {
    let mut script = Script::new();
    retrying_read(&mut script, 3, 0);
    script.submit_ok("exec-1", "search", "{}");
    let task = script.lease("w1", "search");

    let (execution, retry_scheduled) = reported(script.report_err(task.lease.lease_id, "w1", "BAD_QUERY", false));

    assert!(!retry_scheduled);
    assert_eq!(execution.state, ExecutionState::Failed);
    assert!(script.poll("w1", "search").is_none());
}

#[test]
fn a_code_listed_in_non_retryable_codes_is_not_retried() {
    let mut script = Script::new();
    script.register(CapabilitySpec {
        retry: Some(RetrySpec {
            attempts_max: 3,
            backoff_ms: Some(1),
            non_retryable_codes: vec!["QUOTA".to_string(), "TIMEOUT".to_string()],
        }),
        timeout_ms: Some(1_000),
        ..capability("search", SideEffect::Read)
    });
    script.submit_ok("exec-1", "search", "{}");
    script.submit_ok("exec-2", "search", "{}");
    let first = script.lease("w1", "search");
    script.lease("w1", "search");

    let (_, retry_scheduled) = reported(script.report_err(first.lease.lease_id, "w1", "QUOTA", true));
    assert!(!retry_scheduled, "a listed code is not retried even when the worker says retryable");
    // A listed TIMEOUT makes a timed-out attempt final too.
    script.advance(1_000);
    script.tick();
    assert!(matches!(result_of(&script, "exec-2"), ResultEnvelope::Cancelled { code: CancelCode::Timeout, .. }));
    assert!(retries(&script, "exec-1").is_empty() && retries(&script, "exec-2").is_empty());
}

#[test]
fn an_idempotent_write_with_a_retry_config_is_retried() {
    let mut script = Script::new();
    script.register(retrying("pay", SideEffect::Write, 1, 0));
    script.submit_ok("exec-1", "pay", "{}");
    let first = script.lease("w1", "pay");

    let (_, retry_scheduled) = reported(script.report_err(first.lease.lease_id, "w1", "GATEWAY_503", true));

    assert!(retry_scheduled);
    let second = script.lease("w1", "pay");
    assert_eq!(second.lease.attempt, 2);
    assert_eq!(second.idempotency_key, first.idempotency_key);
}

#[test]
fn a_write_without_a_retry_config_is_never_retried() {
    let mut script = Script::new();
    script.register(CapabilitySpec { idempotent: true, ..capability("pay", SideEffect::Write) });
    script.submit_ok("exec-1", "pay", "{}");
    let task = script.lease("w1", "pay");

    let (execution, retry_scheduled) = reported(script.report_err(task.lease.lease_id, "w1", "GATEWAY_503", true));

    assert!(!retry_scheduled);
    assert_eq!(execution.state, ExecutionState::Failed);
}

#[test]
fn backoff_doubles_with_each_attempt_and_the_next_lease_waits_for_it() {
    let mut script = Script::new();
    retrying_read(&mut script, 3, 100);
    script.submit_ok("exec-1", "search", "{}");

    let mut lease_times = Vec::new();
    let mut task = script.lease("w1", "search");
    for expected_backoff in [100, 200, 400] {
        script.advance(10);
        let failed_at = script.now_ms;
        assert!(reported(script.report_err(task.lease.lease_id, "w1", "FLAKY", true)).1);
        assert_eq!(script.execution("exec-1").state, ExecutionState::Backoff);
        assert_eq!(script.execution("exec-1").backoff_until_ms, Some(failed_at + expected_backoff));
        script.at(failed_at + expected_backoff - 1);
        assert!(script.poll("w1", "search").is_none(), "leased before its backoff of {expected_backoff} ended");
        script.at(failed_at + expected_backoff);
        task = script.lease("w1", "search");
        lease_times.push(task.lease.granted_at_ms - failed_at);
    }

    assert_eq!(lease_times, vec![100, 200, 400]);
    let backoffs: Vec<(u32, u64)> =
        retries(&script, "exec-1").into_iter().map(|(attempt, _, backoff)| (attempt, backoff)).collect();
    assert_eq!(backoffs, vec![(2, 100), (3, 200), (4, 400)]);
}

#[test]
fn a_tick_ends_a_due_backoff_and_requeues_the_execution() {
    let mut script = Script::new();
    retrying_read(&mut script, 1, 100);
    script.submit_ok("exec-1", "search", "{}");
    let task = script.lease("w1", "search");
    reported(script.report_err(task.lease.lease_id, "w1", "FLAKY", true));

    script.advance(99);
    script.tick();
    assert_eq!(script.execution("exec-1").state, ExecutionState::Backoff);
    script.advance(1);
    let reply = script.tick();

    assert!(matches!(reply, gavel_core::Reply::Ticked { backoffs_ended: 1, .. }), "{reply:?}");
    assert_eq!(script.execution("exec-1").state, ExecutionState::Queued);
}

#[test]
fn an_expired_deadline_re_leases_a_retryable_read_with_the_same_execution_id_and_idempotency_key() {
    let mut script = Script::new();
    script.register(CapabilitySpec { timeout_ms: Some(1_000), ..retrying("search", SideEffect::Read, 1, 50) });
    script.submit_ok("exec-1", "search", "{}");
    let first = script.lease("w1", "search");
    script.advance(999);
    script.tick();
    assert_eq!(script.execution("exec-1").state, ExecutionState::Leased, "not before the deadline");

    script.advance(1);
    let reply = script.tick();

    assert!(matches!(reply, gavel_core::Reply::Ticked { leases_expired: 1, .. }), "{reply:?}");
    assert_eq!(retries(&script, "exec-1"), vec![(2, "TIMEOUT".to_string(), 50)]);
    script.advance(50);
    let second = script.lease("w2", "search");
    assert_eq!(second.lease.execution_id, "exec-1");
    assert_eq!(second.idempotency_key, first.idempotency_key);
    assert_eq!(second.lease.attempt, 2);
    assert!(second.lease.lease_id > first.lease.lease_id);
    let types = script.event_types("exec-1");
    assert_eq!(
        types,
        vec!["capability.requested", "capability.started", "lease.expired", "capability.retried", "capability.started"]
    );
}

#[test]
fn a_timed_out_write_that_is_not_retry_eligible_is_cancelled_with_timeout_and_never_re_leased() {
    let mut script = Script::new();
    script.register(CapabilitySpec { timeout_ms: Some(1_000), ..capability("pay", SideEffect::Write) });
    script.submit_ok("exec-1", "pay", "{}");
    script.lease("w1", "pay");
    script.advance(1_000);

    script.tick();

    assert_eq!(
        result_of(&script, "exec-1"),
        ResultEnvelope::Cancelled { code: CancelCode::Timeout, attempts: 1, duration_ms: 1_000 }
    );
    script.advance(1_000_000);
    script.tick();
    assert!(script.poll("w1", "pay").is_none());
    assert!(retries(&script, "exec-1").is_empty());
    assert_eq!(script.event_types("exec-1").last(), Some(&"capability.cancelled"));
}

#[test]
fn a_lost_worker_of_a_write_that_is_not_retry_eligible_fails_with_unknown_execution() {
    let mut script = Script::new();
    script.register(CapabilitySpec {
        timeout_ms: Some(10_000),
        heartbeat_timeout_ms: Some(1_000),
        ..capability("pay", SideEffect::Write)
    });
    script.submit_ok("exec-1", "pay", "{}");
    let task = script.lease("w1", "pay");
    script.advance(500);
    script.heartbeat(task.lease.lease_id, "w1");
    script.advance(999);
    script.tick();
    assert_eq!(script.execution("exec-1").state, ExecutionState::Leased, "the heartbeat kept it alive");

    script.advance(1);
    script.tick();

    let ResultEnvelope::Failed { code, retryable, attempts, executed_before_failure, .. } =
        result_of(&script, "exec-1")
    else {
        panic!("expected failed");
    };
    assert_eq!(code, "WORKER_LOST");
    assert!(retryable);
    assert_eq!(attempts, 1);
    assert_eq!(executed_before_failure, Some(ExecutedBeforeFailure::Unknown));
    assert!(script.poll("w1", "pay").is_none());
    let expired = script.events().into_iter().find_map(|event| match event.kind {
        EventKind::LeaseExpired { code, .. } => Some(code),
        _ => None,
    });
    assert_eq!(expired.as_deref(), Some("WORKER_LOST"));
}

#[test]
fn a_lost_worker_of_a_retryable_read_is_retried() {
    let mut script = Script::new();
    script.register(CapabilitySpec { heartbeat_timeout_ms: Some(1_000), ..retrying("search", SideEffect::Read, 1, 0) });
    script.submit_ok("exec-1", "search", "{}");
    script.lease("w1", "search");
    script.advance(1_000);

    script.tick();

    assert_eq!(retries(&script, "exec-1"), vec![(2, "WORKER_LOST".to_string(), 0)]);
    assert_eq!(script.lease("w2", "search").lease.attempt, 2);
}

// ------------------------------------------------------------------ cancellation

#[test]
fn a_caller_cancel_of_a_leased_execution_is_terminal() {
    let mut script = Script::new();
    retrying_read(&mut script, 5, 0);
    script.submit_ok("exec-1", "search", "{}");
    let task = script.lease("w1", "search");
    script.advance(30);

    let (execution, _) = execution_of(script.cancel("exec-1"));

    assert_eq!(execution.state, ExecutionState::Cancelled);
    assert_eq!(execution.lease, None, "the lease is revoked");
    assert_eq!(
        result_of(&script, "exec-1"),
        ResultEnvelope::Cancelled { code: CancelCode::Cancelled, attempts: 1, duration_ms: 30 }
    );
    refused(script.report_ok(task.lease.lease_id, "w1", "{}"), ErrorCode::LeaseLost);
    refused(script.report_err(task.lease.lease_id, "w1", "X", true), ErrorCode::LeaseLost);
    script.advance(1_000_000);
    script.tick();
    assert!(script.poll("w1", "search").is_none(), "never retried");
    assert!(retries(&script, "exec-1").is_empty());
    assert_eq!(script.execution("exec-1").state, ExecutionState::Cancelled);
}

#[test]
fn a_caller_cancel_cuts_a_backoff_short() {
    let mut script = Script::new();
    retrying_read(&mut script, 1, 10_000);
    script.submit_ok("exec-1", "search", "{}");
    let task = script.lease("w1", "search");
    reported(script.report_err(task.lease.lease_id, "w1", "FLAKY", true));

    execution_of(script.cancel("exec-1"));

    assert_eq!(script.execution("exec-1").state, ExecutionState::Cancelled);
    assert_eq!(script.state.next_deadline_ms().filter(|deadline| *deadline > START_MS), None);
    script.advance(10_000);
    assert!(script.poll("w1", "search").is_none());
}

#[test]
fn a_caller_cancel_of_a_queued_execution_removes_it_from_its_queue() {
    let mut script = Script::new();
    script.register(capability("search", SideEffect::Read));
    script.submit_ok("exec-1", "search", "{}");
    script.submit_ok("exec-2", "search", "{}");

    execution_of(script.cancel("exec-1"));

    assert_eq!(script.lease("w1", "search").lease.execution_id, "exec-2");
    assert!(script.poll("w1", "search").is_none());
    assert_eq!(
        result_of(&script, "exec-1"),
        ResultEnvelope::Cancelled { code: CancelCode::Cancelled, attempts: 0, duration_ms: 0 }
    );
}

#[test]
fn cancel_of_a_final_execution_is_execution_final() {
    let mut script = Script::new();
    script.register(capability("search", SideEffect::Read));
    script.submit_ok("exec-1", "search", "{}");
    let task = script.lease("w1", "search");
    reported(script.report_ok(task.lease.lease_id, "w1", "{}"));
    let before = script.execution("exec-1");

    refused(script.cancel("exec-1"), ErrorCode::ExecutionFinal);

    assert_eq!(script.execution("exec-1"), before);
    refused(script.cancel("exec-404"), ErrorCode::NotFound);
}

// ------------------------------------------------------------------ audit trail

/// Runs one execution of each ending through a script.
fn every_ending(script: &mut Script) -> Vec<&'static str> {
    script.register(CapabilitySpec { timeout_ms: Some(1_000), ..retrying("search", SideEffect::Read, 1, 0) });
    script.register(CapabilitySpec { timeout_ms: Some(1_000), ..capability("pay", SideEffect::Write) });
    let input = r#"{"card":"s3cr3t-input-value"}"#;
    for id in ["completed", "failed", "retried", "cancelled"] {
        script.submit_ok(id, "search", input);
    }
    script.submit_ok("timed-out", "pay", input);
    let tasks = script.poll_many("w1", "search", 4);
    let lease = |id: &str| tasks.iter().find(|task| task.lease.execution_id == id).expect("leased").lease.lease_id;
    reported(script.report_ok(lease("completed"), "w1", r#"{"token":"s3cr3t-output-value"}"#));
    reported(script.report_err(lease("failed"), "w1", "BAD", false));
    reported(script.report_err(lease("retried"), "w1", "FLAKY", true));
    execution_of(script.cancel("cancelled"));
    let retry = script.lease("w1", "search");
    reported(script.report_ok(retry.lease.lease_id, "w1", r#"{"token":"s3cr3t-output-value"}"#));
    script.lease("w1", "pay");
    script.advance(1_000);
    script.tick();
    vec!["completed", "failed", "retried", "cancelled", "timed-out"]
}

#[test]
fn every_execution_ends_in_exactly_one_result_envelope() {
    let mut script = Script::new();
    let ids = every_ending(&mut script);
    script.advance(1_000_000);
    script.tick();

    for id in ids {
        let execution: Execution = script.execution(id);
        assert!(execution.state.is_final() && execution.result.is_some(), "{id}: {execution:?}");
        assert!(execution.finalized_at_ms.is_some());
        let finals = script
            .event_types(id)
            .into_iter()
            .filter(|kind| ["capability.completed", "capability.failed", "capability.cancelled"].contains(kind))
            .count();
        assert_eq!(finals, 1, "{id} has {finals} final events");
    }
}

#[test]
fn event_cursors_strictly_increase_from_one() {
    let mut script = Script::new();
    every_ending(&mut script);

    let cursors: Vec<u64> = script.events().iter().map(|event| event.cursor).collect();

    assert_eq!(cursors.first(), Some(&1));
    assert!(cursors.windows(2).all(|pair| pair[1] == pair[0] + 1), "{cursors:?}");
    assert_eq!(script.state.next_cursor(), cursors.last().expect("events") + 1);
    let tail: Vec<u64> = script.state.events_after(5, 3).iter().map(|event| event.cursor).collect();
    assert_eq!(tail, vec![6, 7, 8], "a subscriber resumes right after its cursor");
}

#[test]
fn every_transition_records_its_event() {
    let mut script = Script::new();
    every_ending(&mut script);

    assert_eq!(
        script.event_types("completed"),
        vec!["capability.requested", "capability.started", "capability.completed"]
    );
    assert_eq!(script.event_types("failed"), vec!["capability.requested", "capability.started", "capability.failed"]);
    assert_eq!(
        script.event_types("retried"),
        vec![
            "capability.requested",
            "capability.started",
            "capability.retried",
            "capability.started",
            "capability.completed"
        ]
    );
    assert_eq!(
        script.event_types("cancelled"),
        vec!["capability.requested", "capability.started", "capability.cancelled"]
    );
    assert_eq!(
        script.event_types("timed-out"),
        vec!["capability.requested", "capability.started", "lease.expired", "capability.cancelled"]
    );
    let execution = script.execution("completed");
    for event in script.events().iter().filter(|event| event.execution_id.as_deref() == Some("completed")) {
        assert_eq!(event.capability_id.as_deref(), Some("search"));
        assert_eq!(event.input_hash.as_deref(), Some(execution.input_hash.as_str()));
    }
}

#[test]
fn no_event_carries_a_raw_input_or_output() {
    let mut script = Script::new();
    every_ending(&mut script);
    // A late report with an output, and an approval flow, too.
    let approval_id = {
        script.register(gated("refund", SideEffect::Write, 60_000));
        match script.submit("gated", "refund", r#"{"card":"s3cr3t-input-value"}"#) {
            gavel_core::Reply::ApprovalRequired { approval, .. } => approval.id,
            other => panic!("expected approval-required, got {other:?}"),
        }
    };
    approval_of(script.decide(&approval_id, ApprovalStatus::Approved, bob()));
    execution_of(script.resume(&approval_id, None));
    let task = script.lease("w1", "refund");
    execution_of(script.cancel("gated"));
    refused(script.report_ok(task.lease.lease_id, "w1", r#"{"token":"s3cr3t-output-value"}"#), ErrorCode::LeaseLost);

    let events = serde_json::to_string(&script.events()).expect("events serialize");

    assert!(events.contains("lease.late_report_rejected") || events.contains("LateReportRejected"));
    assert!(!events.contains("s3cr3t-input-value"), "an event carries the input");
    assert!(!events.contains("s3cr3t-output-value"), "an event carries an output");
}

// ------------------------------------------------------------------ request-id deduplication

#[test]
fn a_repeated_request_id_gets_the_first_reply_without_a_second_effect() {
    let mut script = Script::new();
    script.create_approval(approval_request("apr-1"));
    approval_of(script.decide("apr-1", ApprovalStatus::Approved, bob()));
    let first = script.apply_as("req-1", consume_command("apr-1", "exec-1"));
    let (_, status) = approval_of(first.clone());
    assert_eq!(status, ApprovalStatus::Consumed);
    let hash_after_first = script.state.state_hash();
    let events_after_first = script.events().len();

    let again = script.apply_as("req-1", consume_command("apr-1", "exec-1"));

    assert_eq!(again, first, "the retry succeeds like the first call");
    assert_eq!(script.events().len(), events_after_first);
    assert_eq!(script.state.state_hash(), hash_after_first);
    // Without the request id, the same command is a second, refused, consume.
    refused(script.consume("apr-1", "exec-1"), ErrorCode::FailedPrecondition);
}

#[test]
fn a_repeated_submit_with_a_request_id_creates_one_execution() {
    let mut script = Script::new();
    script.register(capability("search", SideEffect::Read));
    let submit = || Command::Submit(submission("exec-1", "search", "{}"));

    let first = script.apply_as("req-1", submit());
    let again = script.apply_as("req-1", submit());

    assert_eq!(again, first);
    assert!(execution_of(again).1, "the repeat reports what the first did: created");
    assert_eq!(script.event_types("exec-1"), vec!["capability.requested"]);
}

#[test]
fn a_request_id_reused_for_a_different_command_is_request_id_reused() {
    let mut script = Script::new();
    script.create_approval(approval_request("apr-1"));
    approval_of(script.decide("apr-1", ApprovalStatus::Approved, bob()));
    approval_of(script.apply_as("req-1", consume_command("apr-1", "exec-1")));
    let before = script.state.state_hash();

    let reply = script.apply_as("req-1", consume_command("apr-1", "exec-2"));

    refused(reply, ErrorCode::RequestIdReused);
    assert_eq!(script.state.state_hash(), before);
    assert_eq!(script.approval("apr-1").consumed_by_execution_id.as_deref(), Some("exec-1"));
}

#[test]
fn a_remembered_request_id_is_forgotten_after_the_dedup_ttl() {
    let mut script = Script::new();
    script.create_approval(approval_request("apr-1"));
    approval_of(script.decide("apr-1", ApprovalStatus::Approved, bob()));
    let first = script.apply_as("req-1", consume_command("apr-1", "exec-1"));
    approval_of(first.clone());

    script.advance(DEDUP_TTL_MS - 1);
    assert_eq!(script.apply_as("req-1", consume_command("apr-1", "exec-1")), first, "still remembered");

    script.at(START_MS + DEDUP_TTL_MS);
    let reply = script.apply_as("req-1", consume_command("apr-1", "exec-1"));

    let error = refused(reply, ErrorCode::FailedPrecondition);
    assert_eq!(error.message, "approval apr-1 cannot be consumed (status: consumed, consumed by exec-1)");
}

// ------------------------------------------------------------------ retention, snapshots, deadlines

#[test]
fn retention_drops_finalized_executions_and_old_events_but_never_a_non_final_execution() {
    let mut script = Script::new();
    script.register(CapabilitySpec { timeout_ms: Some(86_400_000), ..capability("search", SideEffect::Read) });
    script.submit_ok("done", "search", "{}");
    let task = script.lease("w1", "search");
    reported(script.report_ok(task.lease.lease_id, "w1", "{}"));
    script.submit_ok("leased", "search", "{}");
    let leased = script.lease("w1", "search");
    script.submit_ok("queued", "search", "{}");
    script.register(retrying("slow", SideEffect::Read, 1, 3_000_000));
    script.submit_ok("backing-off", "slow", "{}");
    let slow = script.lease("w1", "slow");
    reported(script.report_err(slow.lease.lease_id, "w1", "FLAKY", true));
    script.advance(120_000);
    script.submit_ok("recent", "search", "{}");
    let retention = Retention { records_ms: 1_000, events_ms: 1_000 };

    let reply = script.tick_with(retention);

    let gavel_core::Reply::Ticked { records_compacted, .. } = reply else { panic!("expected ticked: {reply:?}") };
    assert!(records_compacted > 0);
    assert!(script.state.execution("done").is_none(), "the finalized execution is dropped");
    for id in ["leased", "queued", "backing-off", "recent"] {
        assert!(!script.execution(id).state.is_final(), "{id} is kept");
    }
    let horizon = script.now_ms - retention.events_ms;
    let events = script.events();
    assert!(events.iter().all(|event| event.timestamp_ms > horizon), "an old event survived");
    assert_eq!(script.event_types("recent"), vec!["capability.requested"], "a recent event was dropped");
    // The kept executions still work.
    reported(script.report_ok(leased.lease.lease_id, "w1", "{}"));
    assert_eq!(script.lease("w1", "search").lease.execution_id, "queued");
}

#[test]
fn retention_drops_a_finalized_execution_only_after_the_records_window() {
    let mut script = Script::new();
    script.register(capability("search", SideEffect::Read));
    script.submit_ok("done", "search", "{}");
    execution_of(script.cancel("done"));
    let retention = Retention { records_ms: 200_000, events_ms: 200_000 };

    script.advance(100_000);
    script.tick_with(retention);
    assert!(script.state.execution("done").is_some(), "dropped inside the window");
    assert_eq!(script.event_types("done").len(), 2);

    script.advance(100_000);
    script.tick_with(retention);
    assert!(script.state.execution("done").is_none());
}

#[test]
fn snapshot_then_restore_gives_the_same_state_hash_and_behaviour() {
    let mut script = Script::new();
    every_ending(&mut script);
    script.register(retrying("other", SideEffect::Read, 2, 100));
    script.submit_ok("pending", "other", "{}");
    let task = script.lease("w1", "other");
    reported(script.report_err(task.lease.lease_id, "w1", "FLAKY", true));
    approval_of(script.apply_as("req-1", Command::CreateApproval(approval_request("apr-1"))));

    let restored = State::restore(&script.state.snapshot()).expect("a snapshot restores");

    assert_eq!(restored.state_hash(), script.state.state_hash());
    assert_eq!(restored, script.state);
    // Both continue identically.
    let mut copy = Script { state: restored, now_ms: script.now_ms };
    for replica in [&mut script, &mut copy] {
        replica.advance(100);
        replica.lease("w2", "other");
        approval_of(replica.apply_as("req-1", Command::CreateApproval(approval_request("apr-1"))));
    }
    assert_eq!(copy.state.state_hash(), script.state.state_hash());
    assert!(State::restore(b"not a snapshot").is_err());
}

#[test]
fn a_snapshot_of_another_format_is_refused_by_name() {
    let script = Script::new();
    let bytes = script.state.snapshot();
    assert_eq!(&bytes[..8], gavel_core::SNAPSHOT_MAGIC, "a snapshot names its format");
    assert!(State::restore(&bytes).is_ok());
    // What a build before format 2 wrote: the hot state first, no header.
    let headerless = &bytes[12..];
    let refused = State::restore(headerless).expect_err("a headerless snapshot is refused");
    assert!(matches!(refused, gavel_core::SnapshotError::Format(_)), "{refused}");
    assert!(refused.to_string().contains("before format 2"), "{refused}");
    assert!(State::snapshot_state_hash(headerless).is_err());
    // A later format.
    let mut later = bytes.clone();
    later[8..12].copy_from_slice(&(gavel_core::SNAPSHOT_FORMAT + 1).to_le_bytes());
    let refused = State::restore(&later).expect_err("another format is refused");
    assert!(
        refused.to_string().contains(&format!("this build reads format {}", gavel_core::SNAPSHOT_FORMAT)),
        "{refused}"
    );
}

#[test]
fn next_deadline_reports_the_earliest_lease_deadline_or_backoff_end() {
    let mut script = Script::new();
    script.tick();
    script.register(CapabilitySpec { timeout_ms: Some(5_000), ..retrying("search", SideEffect::Read, 1, 300) });
    script.register(CapabilitySpec {
        timeout_ms: Some(5_000),
        heartbeat_timeout_ms: Some(2_000),
        ..capability("beat", SideEffect::Read)
    });
    script.submit_ok("exec-1", "search", "{}");
    script.submit_ok("exec-2", "beat", "{}");
    let task = script.lease("w1", "search");
    assert_eq!(script.state.next_deadline_ms(), Some(START_MS + 5_000), "the lease deadline");

    script.advance(10);
    let beat = script.lease("w1", "beat");
    // The `beat` lease's effective deadline is its heartbeat deadline, earlier than the first lease's.
    assert_eq!(script.state.next_deadline_ms(), Some(START_MS + 10 + 2_000), "the earlier of two leases");
    script.advance(10);
    reported(script.report_err(task.lease.lease_id, "w1", "FLAKY", true));
    assert_eq!(script.state.next_deadline_ms(), Some(START_MS + 20 + 300), "the backoff end");

    script.advance(300);
    script.lease("w1", "search");
    // With the backoff over, the `beat` lease's heartbeat deadline is earliest again.
    assert_eq!(script.state.next_deadline_ms(), Some(START_MS + 10 + 2_000));
    script.advance(1_000);
    script.heartbeat(beat.lease.lease_id, "w1");
    assert_eq!(script.state.next_deadline_ms(), Some(START_MS + 1_320 + 2_000), "the heartbeat moved it");
}

// ------------------------------------------------------------------ edge cases

#[test]
fn the_same_report_repeated_after_a_later_attempt_was_accepted_gets_the_same_answer() {
    let mut script = Script::new();
    retrying_read(&mut script, 1, 0);
    script.submit_ok("exec-1", "search", "{}");
    let first = script.lease("w1", "search");
    let first_answer = script.report_err(first.lease.lease_id, "w1", "FLAKY", true);
    assert!(reported(first_answer.clone()).1);
    let second = script.lease("w2", "search");
    reported(script.report_ok(second.lease.lease_id, "w2", r#"{"n":2}"#));
    let events_before = script.events().len();

    // Worker 1 retries its report (its first answer was lost in transit).
    let (execution, retry_scheduled) = reported(script.report_err(first.lease.lease_id, "w1", "FLAKY", true));

    assert!(retry_scheduled, "the same answer as the first time");
    assert_eq!(execution.state, ExecutionState::Completed);
    assert_eq!(script.events().len(), events_before, "a retried report is not a late report");
}

#[test]
fn a_lost_worker_is_lost_even_when_the_tick_comes_after_the_attempt_deadline() {
    let mut script = Script::new();
    script.register(CapabilitySpec {
        timeout_ms: Some(10_000),
        heartbeat_timeout_ms: Some(1_000),
        ..capability("pay", SideEffect::Write)
    });
    script.submit_ok("exec-1", "pay", "{}");
    script.lease("w1", "pay");

    // The worker went silent at once; the first tick after that comes late.
    script.advance(20_000);
    script.tick();

    let ResultEnvelope::Failed { code, executed_before_failure, .. } = result_of(&script, "exec-1") else {
        panic!("a lost worker fails, got {:?}", script.execution("exec-1").result);
    };
    assert_eq!(code, "WORKER_LOST");
    assert_eq!(executed_before_failure, Some(ExecutedBeforeFailure::Unknown));
}

#[test]
fn an_approval_required_submit_with_a_maximum_length_execution_id_can_be_resumed() {
    let mut script = Script::new();
    script.register(gated("refund", SideEffect::Write, 60_000));
    let execution_id = "e".repeat(gavel_core::limits::ID_BYTES_MAX);
    let approval_id = match script.submit(&execution_id, "refund", "{}") {
        gavel_core::Reply::ApprovalRequired { approval, .. } => approval.id,
        other => panic!("expected approval-required, got {other:?}"),
    };
    approval_of(script.decide(&approval_id, ApprovalStatus::Approved, bob()));

    let (execution, created) = execution_of(script.resume(&approval_id, None));

    assert!(created);
    assert_eq!(execution.execution_id, execution_id);
}

#[test]
fn an_approved_execution_runs_under_the_capability_version_it_was_submitted_under() {
    let mut script = Script::new();
    let approval_id = gated_submission(&mut script, "{}");
    script.register(CapabilitySpec { timeout_ms: Some(1), ..gated("refund", SideEffect::Write, 60_000) });
    approval_of(script.decide(&approval_id, ApprovalStatus::Approved, bob()));

    let (execution, _) = execution_of(script.resume(&approval_id, None));

    assert_eq!(execution.capability_version, 1);
    assert_eq!(script.lease("w1", "refund").capability.timeout_ms, 30_000);
}

#[test]
fn resume_of_an_approval_created_directly_uses_the_given_execution_id() {
    let mut script = Script::new();
    script.register(capability("orders.refund", SideEffect::Write));
    script.create_approval(approval_request("apr-1"));
    approval_of(script.decide("apr-1", ApprovalStatus::Approved, bob()));

    let (execution, _) = execution_of(script.resume("apr-1", None));

    assert_eq!(execution.execution_id, "exec-of-apr-1");
    assert_eq!(execution.input_json, r#"{"amount":100,"order":"o-1"}"#);
    assert_eq!(script.approval("apr-1").consumed_by_execution_id.as_deref(), Some("exec-of-apr-1"));
}

#[test]
fn the_correlation_id_is_carried_by_every_event_of_its_execution() {
    let mut script = Script::new();
    retrying_read(&mut script, 1, 0);
    let submit =
        gavel_core::Submit { correlation_id: Some("corr-7".to_string()), ..submission("exec-1", "search", "{}") };
    execution_of(script.apply(Command::Submit(submit)));
    let task = script.lease("w1", "search");
    reported(script.report_err(task.lease.lease_id, "w1", "FLAKY", true));
    let task = script.lease("w1", "search");
    assert_eq!(task.correlation_id.as_deref(), Some("corr-7"));
    reported(script.report_ok(task.lease.lease_id, "w1", "{}"));

    let events: Vec<_> =
        script.events().into_iter().filter(|event| event.execution_id.as_deref() == Some("exec-1")).collect();

    assert_eq!(events.len(), 5);
    assert!(events.iter().all(|event| event.correlation_id.as_deref() == Some("corr-7")), "{events:?}");
}

#[test]
fn a_command_stamped_before_the_clock_does_not_move_it_backwards() {
    let mut script = Script::new();
    script.register(capability("search", SideEffect::Read));
    script.submit_ok("exec-1", "search", "{}");
    script.at(START_MS - 500);

    let task = script.lease("w1", "search");

    assert_eq!(script.state.clock_ms(), START_MS);
    assert_eq!(task.lease.granted_at_ms, START_MS);
    let timestamps: Vec<u64> = script.events().iter().map(|event| event.timestamp_ms).collect();
    assert!(timestamps.windows(2).all(|pair| pair[0] <= pair[1]), "{timestamps:?}");
}

#[test]
fn a_repeated_poll_with_a_request_id_returns_the_same_tasks_and_leases_nothing_more() {
    let mut script = Script::new();
    script.register(capability("search", SideEffect::Read));
    for id in ["e1", "e2", "e3"] {
        script.submit_ok(id, "search", "{}");
    }
    let poll = || Command::Poll { worker_id: "w1".to_string(), queues: vec!["search".to_string()], tasks_max: 2 };
    let first = script.apply_as("poll-1", poll());

    let again = script.apply_as("poll-1", poll());

    assert_eq!(again, first);
    let gavel_core::Reply::Tasks(tasks) = again else { panic!("expected tasks") };
    assert_eq!(tasks.len(), 2);
    assert_eq!(script.execution("e3").state, ExecutionState::Queued, "the repeat leased nothing");
}

#[test]
fn a_retried_poll_replays_the_current_leases_its_earlier_grant_attempts_took() {
    use gavel_core::ids::grant_request_id;
    let mut script = Script::new();
    script.register(capability("search", SideEffect::Read));
    script.submit_ok("exec-1", "search", r#"{"q": 1}"#);
    script.submit_ok("exec-2", "search", r#"{"q": 2}"#);
    let poll = Command::Poll { worker_id: "w1".to_string(), queues: vec!["search".to_string()], tasks_max: 1 };

    // Two grant attempts of one long-poll, as the server derives their ids.
    let mut granted = Vec::new();
    for attempt in 0..2 {
        match script.apply_as(&grant_request_id("poll-1", attempt), poll.clone()) {
            gavel_core::Reply::Tasks(tasks) => granted.extend(tasks),
            other => panic!("poll refused: {other:?}"),
        }
    }
    assert_eq!(granted.len(), 2);

    let replayed = script.state.replayed_grants("poll-1", &poll).expect("both grants are remembered");
    assert_eq!(replayed, granted, "the retry gets the very leases, nothing new is granted");
    assert_eq!(script.state.replayed_grants("poll-2", &poll), None, "another poll's id replays nothing");
    let other_queue = Command::Poll { worker_id: "w1".to_string(), queues: vec!["other".to_string()], tasks_max: 1 };
    assert_eq!(script.state.replayed_grants("poll-1", &other_queue), None, "a different command replays nothing");

    // A lease that is no longer current is not handed out again.
    reported(script.report_ok(granted[0].lease.lease_id, "w1", r#"{"ok":true}"#));
    let replayed = script.state.replayed_grants("poll-1", &poll).expect("the second grant is still current");
    assert_eq!(replayed, vec![granted[1].clone()]);
}

#[test]
fn counts_report_records_by_status_and_state_ready_work_per_queue_and_current_leases() {
    let mut script = Script::new();
    script.register(capability("search", SideEffect::Read));
    script.submit_ok("x1", "search", "{}");
    script.submit_ok("x2", "search", "{}");
    script.create_approval(approval_request("apr-1"));
    let lease = script.lease("w1", "search");
    let counts = script.state.counts(script.now_ms);
    assert_eq!(counts.executions_by_state.get("leased"), Some(&1));
    assert_eq!(counts.executions_by_state.get("queued"), Some(&1));
    assert_eq!(counts.ready_by_queue.get("search"), Some(&1));
    assert_eq!(counts.approvals_by_status.get("pending"), Some(&1));
    assert_eq!(counts.current_leases, 1);
    script.report_ok(lease.lease.lease_id, "w1", "{}");
    let counts = script.state.counts(script.now_ms);
    assert_eq!(counts.executions_by_state.get("completed"), Some(&1));
    assert_eq!(counts.current_leases, 0);
}

/// A page of `ListEvents` for any pair of cursors a caller can send: the
/// largest `after` cursor panicked on `low + 1` while the read held the
/// node's state lock, which poisoned it and stopped the node serving
/// (found 2026-12-07 by `gavel audit tail --after 18446744073709551615`).
#[test]
fn an_events_page_for_any_cursors_is_an_answer_never_a_panic() {
    let mut script = Script::new();
    script.register(capability("search", SideEffect::Read));
    script.submit_ok("exec-1", "search", r#"{"q": "rust"}"#);
    let next = script.state.next_cursor();
    assert!(!script.state.events_before(None, 0, next, 50).is_empty(), "the trail has events");
    for (after, before) in [(u64::MAX, u64::MAX), (u64::MAX, 0), (u64::MAX - 1, u64::MAX), (0, 0), (u64::MAX, 1)] {
        for execution in [None, Some("exec-1")] {
            let page = script.state.events_before(execution, after, before, u32::MAX);
            assert!(page.is_empty(), "after {after}, before {before}, {execution:?}: {page:?}");
        }
    }
    assert_eq!(script.state.events_before(Some("exec-1"), 0, next, 0).len(), 1, "a limit of 0 is one");
}
