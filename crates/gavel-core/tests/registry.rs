//! Capability registry rules (SPEC §2), one test per rule.

mod support;

use gavel_core::command::{ApprovalPolicySpec, CapabilitySpec, Command, RetrySpec};
use gavel_core::{ErrorCode, EventKind, Risk, SideEffect};
use support::*;

fn retry(attempts_max: u32) -> Option<RetrySpec> {
    Some(RetrySpec { attempts_max, backoff_ms: None, non_retryable_codes: Vec::new() })
}

#[test]
fn registration_reports_every_problem_at_once() {
    let mut script = Script::new();
    let spec = CapabilitySpec {
        id: String::new(),
        side_effect: None,
        risk: None,
        timeout_ms: Some(0),
        heartbeat_timeout_ms: Some(0),
        ..CapabilitySpec::default()
    };

    let error = refused(script.apply(Command::RegisterCapability(spec)), ErrorCode::CapabilityInvalid);

    assert_eq!(error.problems.len(), 5, "{:?}", error.problems);
    let mentions = |field: &str| error.problems.iter().any(|problem| problem.contains(field));
    for field in ["id", "sideEffect", "risk", "timeoutMs", "heartbeatTimeoutMs"] {
        assert!(mentions(field), "no problem mentions {field}: {:?}", error.problems);
    }
    assert!(script.state.capabilities().is_empty());
}

#[test]
fn non_positive_timeouts_are_refused() {
    let mut script = Script::new();
    let zero = |timeout_ms, heartbeat_timeout_ms, expires_in_ms: Option<u64>| CapabilitySpec {
        timeout_ms,
        heartbeat_timeout_ms,
        approval: expires_in_ms.map(|expires| ApprovalPolicySpec {
            required: true,
            approval_type: None,
            expires_in_ms: Some(expires),
        }),
        ..capability("cap", SideEffect::Read)
    };
    for (spec, field) in [
        (zero(Some(0), None, None), "timeoutMs must be positive"),
        (zero(None, Some(0), None), "heartbeatTimeoutMs must be positive"),
        (zero(None, None, Some(0)), "approval.expiresInMs must be positive"),
    ] {
        let error = refused(script.apply(Command::RegisterCapability(spec)), ErrorCode::CapabilityInvalid);
        assert_eq!(error.problems, vec![field.to_string()]);
    }
    assert!(script.state.capability("cap", None).is_none());
}

#[test]
fn retry_on_a_write_like_capability_without_idempotent_is_refused() {
    let mut script = Script::new();
    for side_effect in [SideEffect::Write, SideEffect::Destructive, SideEffect::External] {
        let spec = CapabilitySpec { retry: retry(2), idempotent: false, ..capability("cap", side_effect) };
        let error = refused(script.apply(Command::RegisterCapability(spec)), ErrorCode::CapabilityInvalid);
        assert_eq!(error.problems.len(), 1, "{side_effect:?}: {:?}", error.problems);
        assert!(error.problems[0].contains("idempotent"), "{:?}", error.problems);
    }
    assert!(script.state.capability("cap", None).is_none());
}

#[test]
fn retry_on_an_idempotent_write_or_on_a_read_is_accepted() {
    let mut script = Script::new();
    let write =
        script.register(CapabilitySpec { retry: retry(2), idempotent: true, ..capability("w", SideEffect::Write) });
    let read = script.register(CapabilitySpec { retry: retry(2), ..capability("r", SideEffect::Read) });
    let pure = script.register(CapabilitySpec { retry: retry(2), ..capability("n", SideEffect::None) });
    assert!(write.retry.is_some() && read.retry.is_some() && pure.retry.is_some());
}

#[test]
fn registration_resolves_the_documented_defaults() {
    let mut script = Script::new();
    let spec = CapabilitySpec {
        retry: retry(1),
        approval: Some(ApprovalPolicySpec { required: true, approval_type: None, expires_in_ms: None }),
        ..capability("orders.refund", SideEffect::Read)
    };

    let registered = script.register(spec);

    assert_eq!(registered.version, 1);
    assert_eq!(registered.registered_at_ms, START_MS);
    assert_eq!(registered.timeout_ms, 30_000);
    assert_eq!(registered.retry.map(|retry| retry.backoff_ms), Some(250));
    assert_eq!(registered.approval.map(|approval| approval.expires_in_ms), Some(900_000));
    assert_eq!(registered.queue, "orders.refund");
    assert_eq!(registered.heartbeat_timeout_ms, None);
}

#[test]
fn registration_keeps_explicit_values() {
    let mut script = Script::new();
    let spec = CapabilitySpec {
        risk: Some(Risk::High),
        retry: Some(RetrySpec {
            attempts_max: 3,
            backoff_ms: Some(10),
            non_retryable_codes: vec!["BAD_INPUT".to_string()],
        }),
        timeout_ms: Some(5_000),
        heartbeat_timeout_ms: Some(1_000),
        queue: Some("refunds".to_string()),
        tags: vec!["finance".to_string()],
        ..capability("orders.refund", SideEffect::Read)
    };

    let registered = script.register(spec);

    assert_eq!(registered.risk, Risk::High);
    let retry = registered.retry.expect("retry kept");
    assert_eq!((retry.attempts_max, retry.backoff_ms), (3, 10));
    assert_eq!(retry.non_retryable_codes, vec!["BAD_INPUT"]);
    assert_eq!(registered.timeout_ms, 5_000);
    assert_eq!(registered.heartbeat_timeout_ms, Some(1_000));
    assert_eq!(registered.queue, "refunds");
    assert_eq!(registered.tags, vec!["finance"]);
}

#[test]
fn re_registering_an_identical_declaration_returns_the_same_version() {
    let mut script = Script::new();
    let first = script.register(capability("cap", SideEffect::Read));
    let events_before = script.events().len();
    script.advance(1_000);

    let again = script.register(capability("cap", SideEffect::Read));

    assert_eq!(again, first, "same version, same registration time");
    assert_eq!(script.events().len(), events_before, "no new version, no new event");
}

#[test]
fn a_changed_declaration_becomes_the_next_version() {
    let mut script = Script::new();
    script.register(capability("cap", SideEffect::Read));
    script.advance(1_000);

    let changed = script.register(CapabilitySpec { timeout_ms: Some(1_000), ..capability("cap", SideEffect::Read) });

    assert_eq!(changed.version, 2);
    assert_eq!(changed.registered_at_ms, START_MS + 1_000);
    assert_eq!(script.state.capability("cap", None), Some(&changed));
    assert_eq!(script.state.capability("cap", Some(1)).map(|old| old.timeout_ms), Some(30_000));
    let last = script.events().pop().expect("a registration event");
    assert_eq!(last.kind, EventKind::CapabilityRegistered { version: 2 });
    assert_eq!(last.capability_id.as_deref(), Some("cap"));
}

#[test]
fn an_execution_keeps_the_capability_version_it_was_submitted_under() {
    let mut script = Script::new();
    script.register(CapabilitySpec { timeout_ms: Some(10_000), ..capability("cap", SideEffect::Read) });
    let execution = script.submit_ok("exec-1", "cap", "{}");
    script.register(CapabilitySpec {
        timeout_ms: Some(99_000),
        queue: Some("elsewhere".to_string()),
        ..capability("cap", SideEffect::Read)
    });

    assert_eq!(execution.capability_version, 1);
    // Still on the old queue, with the old timeout.
    assert!(script.poll("w1", "elsewhere").is_none());
    let task = script.lease("w1", "cap");
    assert_eq!(task.capability.version, 1);
    assert_eq!(task.capability.timeout_ms, 10_000);
    assert_eq!(task.lease.deadline_ms, START_MS + 10_000);
    // A new submission uses the new version.
    assert_eq!(script.submit_ok("exec-2", "cap", "{}").capability_version, 2);
}
