//! The state machine's side of what orpc-agent needs from Gavel: actor
//! attributes stored and returned, the surface on worker tasks, application
//! events appended with `RecordEvent`, and refusals of decide, cancel and
//! consume that say which state the approval was in.

mod support;

use std::collections::BTreeMap;

use gavel_core::audit::GAVEL_EVENT_TYPES;
use gavel_core::command::{Command, Reply};
use gavel_core::limits::{
    APP_EVENT_PAYLOAD_BYTES_MAX, APP_EVENT_TYPE_BYTES_MAX, ATTRIBUTES_MAX, ATTRIBUTE_KEY_BYTES_MAX,
    ATTRIBUTE_VALUE_BYTES_MAX,
};
use gavel_core::{
    Actor, ActorKind, ApprovalStatus, Caller, ErrorCode, EventKind, Grant, GrantName, Principal, PrincipalKind,
    RecordEvent, RefusedApproval, SideEffect,
};
use proptest::prelude::*;
use support::*;

// ---------------------------------------------------------------- helpers

fn attributes(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(key, value)| (key.to_string(), value.to_string())).collect()
}

/// Alice with a tenant and a role, as orpc-agent's actors carry them.
fn alice_with_attributes() -> Actor {
    Actor { attributes: attributes(&[("tenant", "acme"), ("role", "agent")]), ..alice() }
}

fn record(event_type: &str) -> RecordEvent {
    RecordEvent {
        event_type: event_type.to_string(),
        actor: alice(),
        execution_id: None,
        approval_id: None,
        correlation_id: None,
        capability_id: None,
        payload_json: None,
        attributes: BTreeMap::new(),
    }
}

fn event_of(reply: Reply) -> gavel_core::Event {
    match reply {
        Reply::Event(event) => event,
        other => panic!("expected a recorded event, got {other:?}"),
    }
}

fn principal(kind: PrincipalKind, id: &str) -> Principal {
    Principal::new(kind, id).expect("a well-formed principal")
}

/// A secured script whose admin `user:root` granted `service:app` the
/// submitter grant; returns the script and the app's caller.
fn secured_with_app() -> (Script, Caller) {
    let mut script = Script::new();
    let root = principal(PrincipalKind::User, "root");
    let reply = script.apply_by(&Caller::of(Principal::node(1)), Command::BootstrapAdmin { admin: root.clone() });
    assert!(matches!(reply, Reply::Grants { .. }), "{reply:?}");
    let app = principal(PrincipalKind::Service, "app");
    let grant = Command::Grant { principal: app.clone(), grant: Grant::of(GrantName::Submitter) };
    assert!(matches!(script.apply_by(&Caller::of(root), grant), Reply::Grants { .. }));
    (script, Caller::of(app))
}

/// A script whose clock has moved (the first command moves it), so that a
/// refusal after it must leave the state hash as it is; and that hash.
fn settled_script() -> (Script, String) {
    let mut script = Script::new();
    script.tick();
    let hash = script.state.state_hash();
    (script, hash)
}

/// Checks that the edge's precheck and the state machine refuse `command`
/// alike, with `code`, and returns the refusal.
fn refused_alike(script: &mut Script, command: Command, code: ErrorCode) -> gavel_core::DomainError {
    let precheck = gavel_core::precheck::precheck(&command).expect_err("the edge refuses it");
    assert_eq!(precheck.code, code, "{command:?}: {precheck:?}");
    let refusal = refused(script.apply(command), code);
    assert_eq!(refusal, precheck, "the edge and the state machine refuse alike");
    refusal
}

fn grant(script: &mut Script, to: &Principal, name: GrantName) {
    let command = Command::Grant { principal: to.clone(), grant: Grant::of(name) };
    let reply = script.apply_by(&Caller::of(principal(PrincipalKind::User, "root")), command);
    assert!(matches!(reply, Reply::Grants { .. }), "{reply:?}");
}

// ---------------------------------------------------------------- attributes

#[test]
fn actor_attributes_are_stored_on_approvals_executions_decisions_and_tasks() {
    let mut script = Script::new();
    script.register(gated("refund", SideEffect::Write, 60_000));
    let mut submit = submission("e1", "refund", r#"{"amount":5}"#);
    submit.actor = alice_with_attributes();
    let approval = match script.apply(Command::Submit(submit)) {
        Reply::ApprovalRequired { approval, .. } => approval,
        other => panic!("expected an approval, got {other:?}"),
    };
    assert_eq!(approval.actor.attributes, alice_with_attributes().attributes);

    let approver = Actor { attributes: attributes(&[("team", "finance")]), ..bob() };
    let (decided, _) = approval_of(script.decide(&approval.id, ApprovalStatus::Approved, approver.clone()));
    assert_eq!(decided.decision.expect("decided").approver.attributes, approver.attributes);

    let (execution, _) = execution_of(script.resume(&approval.id, None));
    assert_eq!(execution.actor.attributes, alice_with_attributes().attributes);
    assert_eq!(execution.approver.as_ref().map(|actor| &actor.attributes), Some(&approver.attributes));

    let task = script.lease("w1", "refund");
    assert_eq!(task.actor.attributes, alice_with_attributes().attributes);
    assert_eq!(task.approver.map(|actor| actor.attributes), Some(approver.attributes));
}

#[test]
fn audit_events_name_the_actor_without_its_attributes() {
    let mut script = Script::new();
    script.register(capability("search", SideEffect::Read));
    let mut submit = submission("e1", "search", "{}");
    submit.actor = alice_with_attributes();
    execution_of(script.apply(Command::Submit(submit)));
    let events = script.events();
    let requested = events.iter().find(|event| event.kind == EventKind::Requested).expect("capability.requested");
    assert_eq!(requested.actor.id, "alice");
    assert!(requested.actor.attributes.is_empty(), "{:?}", requested.actor);
}

#[test]
fn attributes_over_their_limits_are_refused_as_invalid_argument_and_change_nothing() {
    let too_many: BTreeMap<String, String> =
        (0..=ATTRIBUTES_MAX).map(|index| (format!("k{index}"), "v".to_string())).collect();
    let long_key = attributes(&[(&"k".repeat(ATTRIBUTE_KEY_BYTES_MAX + 1), "v")]);
    let long_value = attributes(&[("k", &"v".repeat(ATTRIBUTE_VALUE_BYTES_MAX + 1))]);
    let empty_key = attributes(&[("", "v")]);
    let control_key = attributes(&[("a\nb", "v")]);
    for bad in [too_many, long_key, long_value, empty_key, control_key] {
        let (mut script, before) = settled_script();
        let mut submit = submission("e1", "search", "{}");
        submit.actor = Actor { attributes: bad.clone(), ..alice() };
        let refusal = refused_alike(&mut script, Command::Submit(submit), ErrorCode::InvalidArgument);
        assert!(refusal.message.contains("actor has invalid attributes"), "{}", refusal.message);
        assert_eq!(script.state.state_hash(), before, "nothing changed for {bad:?}");
    }
}

#[test]
fn attributes_at_their_limits_are_accepted() {
    let mut script = Script::new();
    script.register(capability("search", SideEffect::Read));
    let full: BTreeMap<String, String> = (0..ATTRIBUTES_MAX)
        .map(|index| {
            let key = format!("{index:0width$}", width = ATTRIBUTE_KEY_BYTES_MAX);
            (key, "v".repeat(ATTRIBUTE_VALUE_BYTES_MAX))
        })
        .collect();
    let mut submit = submission("e1", "search", "{}");
    submit.actor = Actor { attributes: full.clone(), ..alice() };
    let (execution, _) = execution_of(script.apply(Command::Submit(submit)));
    assert_eq!(execution.actor.attributes, full);
}

#[test]
fn a_bad_actor_identity_is_invalid_argument_whatever_its_attributes() {
    let mut script = Script::new();
    script.register(capability("search", SideEffect::Read));
    let mut submit = submission("e1", "search", "{}");
    submit.actor = Actor { id: String::new(), ..alice_with_attributes() };
    refused(script.apply(Command::Submit(submit)), ErrorCode::InvalidArgument);
}

#[test]
fn an_actor_written_without_attributes_reads_as_having_none() {
    // A self-describing encoding of an actor from before attributes existed.
    let old = r#"{"id":"alice","kind":"User","display_name":null}"#;
    let actor: Actor = serde_json::from_str(old).expect("an old actor decodes");
    assert_eq!(actor, alice());
    assert!(actor.attributes.is_empty());
}

#[test]
fn the_state_hash_does_not_depend_on_the_order_attributes_were_given_in() {
    let hash_with = |pairs: &[(&str, &str)]| {
        let mut script = Script::new();
        script.register(capability("search", SideEffect::Read));
        let mut submit = submission("e1", "search", "{}");
        let mut actor = alice();
        for (key, value) in pairs {
            actor.attributes.insert(key.to_string(), value.to_string());
        }
        submit.actor = actor;
        execution_of(script.apply(Command::Submit(submit)));
        script.state.state_hash()
    };
    let forward = hash_with(&[("a", "1"), ("b", "2"), ("c", "3")]);
    let backward = hash_with(&[("c", "3"), ("b", "2"), ("a", "1")]);
    assert_eq!(forward, backward);
    assert_ne!(forward, hash_with(&[("a", "1"), ("b", "2")]), "attributes are part of the state");
}

/// What the attribute limits allow, written independently of `validate.rs`.
fn within_limits(attributes: &BTreeMap<String, String>) -> bool {
    attributes.len() <= ATTRIBUTES_MAX
        && attributes.iter().all(|(key, value)| {
            !key.is_empty()
                && key.len() <= ATTRIBUTE_KEY_BYTES_MAX
                && !key.chars().any(char::is_control)
                && value.len() <= ATTRIBUTE_VALUE_BYTES_MAX
        })
}

fn attribute_text(bytes_max: usize) -> impl Strategy<Value = String> {
    prop_oneof!["[a-z.]{0,12}", "[a-z\\n\\t]{1,4}", (0..bytes_max + 3).prop_map(|length| "é".repeat(length / 2)),]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// A submission is accepted exactly when its actor's attributes are
    /// within the limits; a refused one changes nothing, an accepted one
    /// stores them as given.
    #[test]
    fn attributes_are_accepted_exactly_within_their_limits(
        attributes in prop::collection::btree_map(
            attribute_text(ATTRIBUTE_KEY_BYTES_MAX),
            attribute_text(ATTRIBUTE_VALUE_BYTES_MAX),
            0..ATTRIBUTES_MAX + 3,
        ),
    ) {
        let mut script = Script::new();
        script.register(capability("search", SideEffect::Read));
        let before = script.state.state_hash();
        let mut submit = submission("e1", "search", "{}");
        submit.actor = Actor { attributes: attributes.clone(), ..alice() };
        let reply = script.apply(Command::Submit(submit));
        if within_limits(&attributes) {
            let (execution, _) = execution_of(reply);
            prop_assert_eq!(execution.actor.attributes, attributes);
        } else {
            refused(reply, ErrorCode::InvalidArgument);
            prop_assert_eq!(script.state.state_hash(), before);
        }
    }
}

// ---------------------------------------------------------------- Task.surface

#[test]
fn a_task_carries_the_surface_its_execution_was_submitted_from() {
    let mut script = Script::new();
    script.register(capability("search", SideEffect::Read));
    let mut submit = submission("e1", "search", "{}");
    submit.surface = "agent:refunds".to_string();
    execution_of(script.apply(Command::Submit(submit)));
    assert_eq!(script.lease("w1", "search").surface, "agent:refunds");
}

// ---------------------------------------------------------------- RecordEvent

#[test]
fn a_recorded_event_is_appended_with_its_fields_and_the_recording_principal() {
    let (mut script, app) = secured_with_app();
    let cursor = script.state.next_cursor();
    let command = RecordEvent {
        actor: app.principal.as_actor(),
        execution_id: Some("e-77".to_string()),
        approval_id: Some("apr-1".to_string()),
        correlation_id: Some("corr-1".to_string()),
        capability_id: Some("orders.refund".to_string()),
        payload_json: Some(r#"{ "rule": "max-amount", "limit": 100 }"#.to_string()),
        attributes: attributes(&[("policy", "refunds")]),
        ..record("policy.denied")
    };
    let event = event_of(script.apply_by(&app, Command::RecordEvent(command)));

    assert_eq!(event.cursor, cursor);
    assert_eq!(event.kind.event_type(), "policy.denied");
    assert_eq!(
        event.kind,
        EventKind::Recorded {
            event_type: "policy.denied".to_string(),
            payload_json: Some(r#"{"limit":100,"rule":"max-amount"}"#.to_string()),
            attributes: attributes(&[("policy", "refunds")]),
        },
        "the payload is stored as canonical JSON"
    );
    assert_eq!(event.principal.as_ref(), Some(&app.principal));
    assert_eq!(event.actor, app.principal.as_actor());
    assert_eq!(event.timestamp_ms, script.now_ms);
    assert_eq!(
        (event.execution_id.as_deref(), event.approval_id.as_deref(), event.correlation_id.as_deref()),
        (Some("e-77"), Some("apr-1"), Some("corr-1"))
    );
    assert_eq!(event.capability_id.as_deref(), Some("orders.refund"));
    assert_eq!(event.input_hash, None);
    // The trail holds the same event, found by cursor, in order, and by execution.
    assert_eq!(script.state.event(cursor), Some(event.clone()));
    assert_eq!(script.state.events_after(cursor - 1, 10), vec![event.clone()]);
    assert_eq!(script.state.execution_events("e-77", 0, 10), vec![event.clone()]);
}

#[test]
fn recording_needs_the_submitter_grant_and_act_for_to_name_another_actor() {
    let (mut script, app) = secured_with_app();
    let auditor = principal(PrincipalKind::User, "auditor");
    grant(&mut script, &auditor, GrantName::Auditor);
    let nobody = Caller::of(principal(PrincipalKind::User, "nobody"));
    let before = script.state.state_hash();

    let as_itself = |caller: &Caller| {
        Command::RecordEvent(RecordEvent { actor: caller.principal.as_actor(), ..record("policy.denied") })
    };
    let refusal = refused(
        script.apply_by(&Caller::of(auditor.clone()), as_itself(&Caller::of(auditor))),
        ErrorCode::PermissionDenied,
    );
    assert!(
        refusal.message.contains("may not record audit events: it needs the submitter grant"),
        "{}",
        refusal.message
    );
    refused(script.apply_by(&nobody, as_itself(&nobody)), ErrorCode::PermissionDenied);
    // Naming another actor (alice) needs act-for.
    let refusal =
        refused(script.apply_by(&app, Command::RecordEvent(record("policy.denied"))), ErrorCode::PermissionDenied);
    assert!(refusal.message.contains("act-for"), "{}", refusal.message);
    assert_eq!(script.state.state_hash(), before, "refusals record nothing");

    grant(&mut script, &app.principal, GrantName::ActFor);
    let event = event_of(script.apply_by(&app, Command::RecordEvent(record("policy.denied"))));
    assert_eq!(event.actor, alice());
    assert_eq!(event.principal.as_ref(), Some(&app.principal), "the recording principal is kept");
}

#[test]
fn gavel_event_types_and_ill_formed_types_are_refused() {
    let (mut script, before) = settled_script();
    let too_long = format!("a{}", "b".repeat(APP_EVENT_TYPE_BYTES_MAX));
    let mut bad: Vec<&str> = GAVEL_EVENT_TYPES.to_vec();
    bad.extend(["", "Policy.denied", "1policy", ".policy", "policy denied", "policy/denied", "políticа", &too_long]);
    for event_type in bad {
        refused_alike(&mut script, Command::RecordEvent(record(event_type)), ErrorCode::InvalidArgument);
    }
    assert_eq!(script.state.state_hash(), before);
    let longest = "a".repeat(APP_EVENT_TYPE_BYTES_MAX);
    for good in ["policy.denied", "capability.discovered", "a", "x-1_2.y", longest.as_str()] {
        assert_eq!(event_of(script.apply(Command::RecordEvent(record(good)))).kind.event_type(), good);
    }
}

#[test]
fn every_event_type_gavel_writes_is_reserved() {
    // Every kind but `Recorded`, one of each: a new kind must be listed in
    // GAVEL_EVENT_TYPES, or an application could forge it.
    let principal = Principal::node(1);
    let kinds = [
        EventKind::CapabilityRegistered { version: 1 },
        EventKind::Requested,
        EventKind::ApprovalRequested,
        EventKind::Approved { terms_hash: "0".repeat(64) },
        EventKind::Rejected { terms_hash: "0".repeat(64) },
        EventKind::ApprovalCancelled,
        EventKind::ApprovalConsumed,
        EventKind::Started { attempt: 1, lease_id: 1, worker_id: "w".to_string() },
        EventKind::Retried { attempt: 2, previous_error_code: "X".to_string(), backoff_ms: 1 },
        EventKind::LeaseExpired { lease_id: 1, attempt: 1, code: "TIMEOUT".to_string() },
        EventKind::Completed { duration_ms: 1, attempts: 1 },
        EventKind::Failed { code: "X".to_string(), retryable: false, attempts: 1, executed_before_failure: None },
        EventKind::Cancelled { code: gavel_core::CancelCode::Cancelled, duration_ms: 1 },
        EventKind::LateReportRejected { lease_id: 1, attempt: 1 },
        EventKind::AccessGranted { principal: principal.clone(), grant: GrantName::Admin },
        EventKind::AccessRevoked { principal: principal.clone(), grant: GrantName::Admin },
        EventKind::QuotaSet {
            principal: principal.clone(),
            pending_approvals_max: 1,
            active_executions_max: 1,
            writes_per_second: 1,
            write_burst: 1,
        },
        EventKind::PolicySet { name: "p".to_string(), version: 1, voided: 0, non_retroactive: false },
        EventKind::PolicyDeleted { name: "p".to_string(), version: 1, voided: 0, non_retroactive: false },
        EventKind::VoteCast {
            policy_version: 1,
            approve: true,
            factor: None,
            self_approval: false,
            terms_hash: "0".repeat(64),
        },
        EventKind::VoteWithdrawn,
        EventKind::VoteRemoved { voter: principal },
        EventKind::ApprovalVoided { policy: "p".to_string(), policy_version: 1 },
        EventKind::StandingUseSpent { used: 1, uses_max: 2 },
    ];
    let names: Vec<&str> = kinds.iter().map(EventKind::event_type).collect();
    assert_eq!(names, GAVEL_EVENT_TYPES.to_vec());
}

#[test]
fn bad_payloads_ids_and_attributes_of_an_event_are_refused() {
    let (mut script, before) = settled_script();
    let oversized = format!("\"{}\"", "x".repeat(APP_EVENT_PAYLOAD_BYTES_MAX));
    let too_many: BTreeMap<String, String> =
        (0..=ATTRIBUTES_MAX).map(|index| (format!("k{index}"), String::new())).collect();
    let cases = [
        RecordEvent { payload_json: Some("{not json".to_string()), ..record("policy.denied") },
        RecordEvent { payload_json: Some(oversized), ..record("policy.denied") },
        RecordEvent { execution_id: Some("e\u{7}".to_string()), ..record("policy.denied") },
        RecordEvent { approval_id: Some("a".repeat(129)), ..record("policy.denied") },
        RecordEvent { correlation_id: Some(String::new()), ..record("policy.denied") },
        RecordEvent { attributes: too_many, ..record("policy.denied") },
        RecordEvent {
            attributes: attributes(&[("k", &"v".repeat(ATTRIBUTE_VALUE_BYTES_MAX + 1))]),
            ..record("policy.denied")
        },
    ];
    for case in cases {
        refused_alike(&mut script, Command::RecordEvent(case), ErrorCode::InvalidArgument);
    }
    let no_actor = RecordEvent { actor: Actor { id: String::new(), ..alice() }, ..record("policy.denied") };
    refused(script.apply(Command::RecordEvent(no_actor)), ErrorCode::InvalidArgument);
    assert_eq!(script.state.state_hash(), before);
    let largest = format!("\"{}\"", "x".repeat(APP_EVENT_PAYLOAD_BYTES_MAX - 2));
    let event =
        event_of(script.apply(Command::RecordEvent(RecordEvent { payload_json: Some(largest), ..record("big") })));
    assert_eq!(event.kind.event_type(), "big");
}

#[test]
fn a_retried_record_gets_the_first_event_back_and_appends_nothing() {
    let (mut script, app) = secured_with_app();
    let command =
        Command::RecordEvent(RecordEvent { actor: app.principal.as_actor(), ..record("capability.discovered") });
    let first = event_of(script.apply_by_as("req-1", &app, command.clone()));
    let next_cursor = script.state.next_cursor();
    script.advance(1_000);
    let again = event_of(script.apply_by_as("req-1", &app, command.clone()));
    assert_eq!(again, first);
    assert_eq!(script.state.next_cursor(), next_cursor, "no second event");
    assert_eq!(script.state.replay_for("req-1", Some(&app), &command), Some(Reply::Event(first)));
}

#[test]
fn an_event_without_a_caller_is_recorded_without_a_principal() {
    let mut script = Script::new();
    let event = event_of(script.apply(Command::RecordEvent(record("policy.denied"))));
    assert_eq!(event.principal, None);
    assert_eq!(event.actor, alice());
}

// ---------------------------------------------------------------- refusal details

fn refused_with(reply: Reply) -> (String, Option<RefusedApproval>) {
    let refusal = refused(reply, ErrorCode::FailedPrecondition);
    (refusal.message, refusal.approval)
}

#[test]
fn a_refused_decide_or_cancel_says_the_approval_status() {
    let mut script = Script::new();
    script.create_approval(approval_request("a1"));
    approval_of(script.decide("a1", ApprovalStatus::Approved, bob()));

    let (message, approval) = refused_with(script.decide("a1", ApprovalStatus::Rejected, bob()));
    assert_eq!(message, "approval a1 is not pending (status: approved)");
    assert_eq!(approval, Some(RefusedApproval { status: ApprovalStatus::Approved, consumed_by_execution_id: None }));

    let cancel = Command::CancelApproval { approval_id: "a1".to_string(), caller_now_ms: None };
    let (_, approval) = refused_with(script.apply(cancel));
    assert_eq!(approval.map(|approval| approval.status), Some(ApprovalStatus::Approved));

    // Expiry is lazy and counts: a pending record past its expiry reads expired.
    let mut request = approval_request("a2");
    request.expires_in_ms = Some(1_000);
    script.create_approval(request);
    script.advance(1_001);
    let (message, approval) = refused_with(script.decide("a2", ApprovalStatus::Approved, bob()));
    assert_eq!(message, "approval a2 is not pending (status: expired)");
    assert_eq!(approval, Some(RefusedApproval { status: ApprovalStatus::Expired, consumed_by_execution_id: None }));
}

#[test]
fn a_refused_consume_says_the_status_and_who_consumed_it() {
    let mut script = Script::new();
    script.create_approval(approval_request("a1"));
    let (message, approval) = refused_with(script.consume("a1", "e1"));
    assert_eq!(message, "approval a1 cannot be consumed (status: pending)");
    assert_eq!(approval, Some(RefusedApproval { status: ApprovalStatus::Pending, consumed_by_execution_id: None }));

    approval_of(script.decide("a1", ApprovalStatus::Approved, bob()));
    approval_of(script.consume("a1", "e1"));
    let (message, approval) = refused_with(script.consume("a1", "e2"));
    assert_eq!(message, "approval a1 cannot be consumed (status: consumed, consumed by e1)");
    assert_eq!(
        approval,
        Some(RefusedApproval { status: ApprovalStatus::Consumed, consumed_by_execution_id: Some("e1".to_string()) })
    );

    script.create_approval(approval_request("a3"));
    approval_of(script.decide("a3", ApprovalStatus::Rejected, bob()));
    let (_, approval) = refused_with(script.consume("a3", "e3"));
    assert_eq!(approval.map(|approval| approval.status), Some(ApprovalStatus::Rejected));
}

#[test]
fn refusals_not_about_the_approval_state_carry_no_approval_detail() {
    let mut script = Script::new();
    let unknown = refused(script.consume("missing", "e1"), ErrorCode::NotFound);
    assert_eq!(unknown.approval, None);
    script.create_approval(approval_request("a1"));
    let own = refused(script.decide("a1", ApprovalStatus::Approved, alice()), ErrorCode::ApprovalSelfApproval);
    assert_eq!(own.approval, None);
    let bad = Actor { kind: ActorKind::User, id: String::new(), ..bob() };
    assert_eq!(refused(script.decide("a1", ApprovalStatus::Approved, bad), ErrorCode::InvalidArgument).approval, None);
}
