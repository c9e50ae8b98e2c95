//! Bounded standing approvals in the pure core (issue #25): one decision
//! covers at most N resumes within a window, each spending one use in the
//! command that creates its execution; exhausted or expired, it closes; a
//! use's input is the approved one, or equal to it at the bound JSON
//! pointers. A property test drives random resumes, inputs and clock jumps
//! and checks that no standing approval is ever spent more than N times.

mod support;

use gavel_core::command::{Command, Reply};
use gavel_core::{ApprovalStatus, ErrorCode, EventKind, SideEffect, StandingSpec};
use proptest::prelude::*;
use proptest::test_runner::RngAlgorithm;
use support::*;

const WINDOW_MS: u64 = 3_600_000;

/// A script with capability `orders.refund` (write, needs approval).
fn script() -> Script {
    let mut script = Script::new();
    script.register(gated("orders.refund", SideEffect::Write, 600_000));
    script
}

/// Creates standing approval `id` for alice over `input`, then has bob approve it.
fn approved_standing(script: &mut Script, id: &str, input: &str, uses_max: u32, pointers: &[&str]) {
    let mut request = approval_request(id);
    request.input_json = input.to_string();
    let standing = StandingSpec {
        uses_max,
        window_ms: WINDOW_MS,
        bound_pointers: pointers.iter().map(|p| p.to_string()).collect(),
    };
    let (approval, _) = approval_of(script.apply(Command::CreateStandingApproval { request, standing }));
    assert!(approval.standing.is_some());
    let (_, status) = approval_of(script.decide(id, ApprovalStatus::Approved, bob()));
    assert_eq!(status, ApprovalStatus::Approved);
}

fn resume(script: &mut Script, id: &str, execution_id: &str, input: Option<&str>) -> Reply {
    script.apply(Command::Resume {
        approval_id: id.to_string(),
        execution_id: execution_id.to_string(),
        input_json: input.map(str::to_string),
    })
}

#[test]
fn five_refunds_for_one_order_within_an_hour_then_the_standing_approval_closes() {
    let mut script = script();
    approved_standing(&mut script, "s1", r#"{"amount":10,"order_id":"o-1"}"#, 5, &["/order_id"]);
    for n in 0..5 {
        let input = format!(r#"{{"amount":{},"order_id":"o-1"}}"#, 10 + n);
        let (execution, created) = execution_of(resume(&mut script, "s1", &format!("e{n}"), Some(&input)));
        assert!(created);
        assert!(execution.input_json.contains(&format!("\"amount\":{}", 10 + n)), "each use runs its own input");
        assert_eq!(execution.approval_id.as_deref(), Some("s1"));
    }
    let approval = script.approval("s1");
    assert_eq!(approval.status_at(script.now_ms), ApprovalStatus::Consumed, "exhausted, it closes");
    assert_eq!(approval.standing.expect("standing").used_by.len(), 5);
    let sixth = resume(&mut script, "s1", "e5", Some(r#"{"amount":1,"order_id":"o-1"}"#));
    refused(sixth, ErrorCode::ApprovalConsumed);
    let spent: Vec<u32> = script
        .events()
        .iter()
        .filter_map(|event| match event.kind {
            EventKind::StandingUseSpent { used, .. } => Some(used),
            _ => None,
        })
        .collect();
    assert_eq!(spent, [1, 2, 3, 4, 5]);
}

#[test]
fn a_use_for_another_order_or_without_its_input_is_refused_and_spends_nothing() {
    let mut script = script();
    approved_standing(&mut script, "s1", r#"{"amount":10,"order_id":"o-1"}"#, 2, &["/order_id"]);
    let other = resume(&mut script, "s1", "e1", Some(r#"{"amount":10,"order_id":"o-2"}"#));
    assert!(refused(other, ErrorCode::ApprovalInputMismatch).message.contains("/order_id"));
    let missing = resume(&mut script, "s1", "e1", Some(r#"{"amount":10}"#));
    refused(missing, ErrorCode::ApprovalInputMismatch);
    refused(resume(&mut script, "s1", "e1", None), ErrorCode::InvalidArgument);
    assert!(script.approval("s1").standing.expect("standing").used_by.is_empty());
}

#[test]
fn a_hash_bound_standing_approval_runs_only_the_approved_input() {
    let mut script = script();
    let input = r#"{"amount":10,"order_id":"o-1"}"#;
    approved_standing(&mut script, "s1", input, 2, &[]);
    refused(
        resume(&mut script, "s1", "e1", Some(r#"{"amount":11,"order_id":"o-1"}"#)),
        ErrorCode::ApprovalInputMismatch,
    );
    let (first, _) = execution_of(resume(&mut script, "s1", "e1", None));
    let (second, _) = execution_of(resume(&mut script, "s1", "e2", Some(input)));
    assert_eq!(first.input_hash, second.input_hash);
    refused(resume(&mut script, "s1", "e3", None), ErrorCode::ApprovalConsumed);
}

#[test]
fn the_window_runs_from_the_decision_and_an_expired_standing_approval_spends_nothing() {
    let mut script = script();
    approved_standing(&mut script, "s1", r#"{"order_id":"o-1"}"#, 3, &[]);
    execution_of(resume(&mut script, "s1", "e1", None));
    script.advance(WINDOW_MS + 1);
    refused(resume(&mut script, "s1", "e2", None), ErrorCode::ApprovalExpired);
    assert_eq!(script.approval("s1").standing.expect("standing").used_by.len(), 1);
}

#[test]
fn unbounded_standing_approvals_are_refused_before_the_log() {
    let mut script = script();
    for (uses_max, window_ms, pointer) in
        [(0, WINDOW_MS, "/order_id"), (101, WINDOW_MS, "/order_id"), (2, 0, "/order_id"), (2, WINDOW_MS, "/nothing")]
    {
        let mut request = approval_request("bad");
        request.input_json = r#"{"order_id":"o-1"}"#.to_string();
        let standing = StandingSpec { uses_max, window_ms, bound_pointers: vec![pointer.to_string()] };
        let command = Command::CreateStandingApproval { request, standing };
        assert!(gavel_core::precheck::precheck(&command).is_err(), "{uses_max} {window_ms} {pointer}");
        refused(script.apply(command), ErrorCode::InvalidArgument);
    }
    let mut request = approval_request("bad");
    request.input_json = r#"{"order_id":"o-1"}"#.to_string();
    let standing = StandingSpec { uses_max: 2, window_ms: u64::MAX, bound_pointers: Vec::new() };
    refused(script.apply(Command::CreateStandingApproval { request, standing }), ErrorCode::InvalidArgument);
}

#[derive(Debug, Clone)]
enum Step {
    /// Resume with a matching (or, when false, another order's) input.
    Resume {
        matching: bool,
        repeat_request: bool,
    },
    Advance {
        ms: u64,
    },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (prop::bool::weighted(0.8), prop::bool::weighted(0.2))
            .prop_map(|(matching, repeat_request)| Step::Resume { matching, repeat_request }),
        1 => (0..WINDOW_MS / 2).prop_map(|ms| Step::Advance { ms }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, rng_algorithm: RngAlgorithm::XorShift, ..ProptestConfig::default() })]

    #[test]
    fn a_standing_approval_is_never_spent_more_than_n_times(
        uses_max in 1..=6u32,
        steps in prop::collection::vec(step(), 1..40),
    ) {
        let mut script = script();
        approved_standing(&mut script, "s1", r#"{"amount":1,"order_id":"o-1"}"#, uses_max, &["/order_id"]);
        let approved_at = script.now_ms;
        let mut attempted: Vec<String> = Vec::new();
        let mut previous: Option<(String, Command)> = None;
        for (index, step) in steps.into_iter().enumerate() {
            match step {
                Step::Advance { ms } => script.advance(ms),
                Step::Resume { matching, repeat_request } => {
                    let used_before = script.approval("s1").standing.expect("standing").used_by.len() as u32;
                    // A retry re-sends the previous request (same request id,
                    // same command): it may never spend a second use.
                    let (request_id, command, fresh) = match (&previous, repeat_request) {
                        (Some((request_id, command)), true) => (request_id.clone(), command.clone(), false),
                        _ => {
                            let order = if matching { "o-1" } else { "o-2" };
                            let command = Command::Resume {
                                approval_id: "s1".to_string(),
                                execution_id: format!("e{index}"),
                                input_json: Some(format!(r#"{{"amount":{index},"order_id":"{order}"}}"#)),
                            };
                            attempted.push(format!("e{index}"));
                            (format!("r{index}"), command, true)
                        }
                    };
                    let reply = script.apply_as(&request_id, command.clone());
                    if fresh {
                        let expected_ok =
                            matching && used_before < uses_max && script.now_ms <= approved_at + WINDOW_MS;
                        let ok = matches!(reply, Reply::Execution { created: true, .. });
                        prop_assert_eq!(ok, expected_ok, "{:?}", reply);
                    }
                    previous = Some((request_id, command));
                }
            }
            let approval = script.approval("s1");
            let used_by = approval.standing.as_ref().expect("standing").used_by.clone();
            let executions: Vec<&String> = attempted
                .iter()
                .filter(|id| script.state.execution(id).is_some_and(|e| e.approval_id.as_deref() == Some("s1")))
                .collect();
            prop_assert!(used_by.len() as u32 <= uses_max, "spent {} of {}", used_by.len(), uses_max);
            prop_assert_eq!(used_by.len(), executions.len(), "one use per execution created");
            prop_assert_eq!(approval.status_at(script.now_ms) == ApprovalStatus::Consumed, used_by.len() as u32 == uses_max);
        }
    }
}
