//! `precheck`: every refusal that is a pure function of the command is made
//! before the command can reach the log, and `apply` refuses the same
//! commands the same way on its own (it never trusts its input).

mod support;

use gavel_core::canonical_json::input_hash;
use gavel_core::command::{Command, CreateApproval};
use gavel_core::limits::{APPROVAL_EXPIRES_IN_MS_MAX, TIMESTAMP_MS_MAX};
use gavel_core::precheck::{approval_validity, precheck};
use gavel_core::{ErrorCode, RecordEvent, ReportOutcome};
use support::{approval_request, capability, submission, Script, START_MS};

const DAY_MS: u64 = 24 * 60 * 60 * 1000;

/// The refusal precheck gives `command`, checking its code.
#[track_caller]
fn refusal(command: &Command, code: ErrorCode) -> String {
    match precheck(command) {
        Ok(()) => panic!("precheck accepted {command:?}"),
        Err(error) => {
            assert_eq!(error.code, code, "{command:?}: {error:?}");
            error.message
        }
    }
}

/// Asserts that `apply` refuses `command` with `code` and leaves the state as it was.
#[track_caller]
fn apply_refuses(command: Command, code: ErrorCode) {
    let mut script = Script::new();
    script.register(capability("docs.read", gavel_core::SideEffect::Read));
    let before = script.state.state_hash();
    support::refused(script.apply(command), code);
    assert_eq!(script.state.state_hash(), before, "a refused command changes nothing");
}

fn create(request: CreateApproval) -> Command {
    Command::CreateApproval(request)
}

fn requested_at(expires_at_ms: u64) -> CreateApproval {
    CreateApproval { requested_at_ms: Some(START_MS), expires_at_ms: Some(expires_at_ms), ..approval_request("apr-1") }
}

// ---------------------------------------------------------------- input hash

#[test]
fn a_wrong_input_hash_is_refused_before_the_log() {
    let wrong = CreateApproval { input_hash: Some("0".repeat(64)), ..approval_request("apr-1") };
    let message = refusal(&create(wrong.clone()), ErrorCode::InvalidArgument);
    let (_, right_hash) = input_hash(&wrong.input_json).expect("valid input");
    assert!(message.contains("does not match the input") && message.contains(&right_hash), "{message}");
    apply_refuses(create(wrong), ErrorCode::InvalidArgument);

    let right = CreateApproval { input_hash: Some(right_hash), ..approval_request("apr-1") };
    assert_eq!(precheck(&create(right)), Ok(()));
}

// ---------------------------------------------------------------- expiry

#[test]
fn an_expiry_before_requested_at_is_refused_before_the_log() {
    let message = refusal(&create(requested_at(START_MS - 1)), ErrorCode::InvalidArgument);
    assert!(message.contains("before requestedAt"), "{message}");
    apply_refuses(create(requested_at(START_MS - 1)), ErrorCode::InvalidArgument);
    // requestedAt defaults to the caller's clock when the caller gives one.
    let by_caller_clock =
        CreateApproval { caller_now_ms: Some(START_MS), expires_at_ms: Some(START_MS - 1), ..approval_request("a") };
    refusal(&create(by_caller_clock), ErrorCode::InvalidArgument);
    // An approval that expires the moment it is requested is allowed, as before.
    assert_eq!(precheck(&create(requested_at(START_MS))), Ok(()));
}

#[test]
fn an_absolute_expiry_past_30_days_is_refused_like_a_relative_one() {
    // Year 9999.
    let message = refusal(&create(requested_at(TIMESTAMP_MS_MAX)), ErrorCode::InvalidArgument);
    assert!(message.contains("over the limit"), "{message}");
    apply_refuses(create(requested_at(TIMESTAMP_MS_MAX)), ErrorCode::InvalidArgument);
    refusal(&create(requested_at(START_MS + APPROVAL_EXPIRES_IN_MS_MAX + 1)), ErrorCode::InvalidArgument);
    assert_eq!(precheck(&create(requested_at(START_MS + APPROVAL_EXPIRES_IN_MS_MAX))), Ok(()), "exactly 30 days");
    let by_caller_clock = CreateApproval {
        caller_now_ms: Some(START_MS),
        expires_at_ms: Some(START_MS + 31 * DAY_MS),
        ..approval_request("apr-1")
    };
    refusal(&create(by_caller_clock), ErrorCode::InvalidArgument);

    // The relative form, for comparison: the same cap.
    let relative = |expires_in_ms| CreateApproval { expires_in_ms: Some(expires_in_ms), ..approval_request("apr-1") };
    refusal(&create(relative(APPROVAL_EXPIRES_IN_MS_MAX + 1)), ErrorCode::InvalidArgument);
    refusal(&create(relative(0)), ErrorCode::InvalidArgument);
    assert_eq!(precheck(&create(relative(APPROVAL_EXPIRES_IN_MS_MAX))), Ok(()));
    apply_refuses(create(relative(APPROVAL_EXPIRES_IN_MS_MAX + 1)), ErrorCode::InvalidArgument);
    let both = CreateApproval { expires_in_ms: Some(1_000), ..requested_at(START_MS + 1_000) };
    let message = refusal(&create(both.clone()), ErrorCode::InvalidArgument);
    assert!(message.contains("not both"), "{message}");
    apply_refuses(create(both), ErrorCode::InvalidArgument);
}

#[test]
fn approval_validity_resolves_defaults_and_caps_against_the_command_time() {
    // No requestedAt: it is the time the command compares against.
    let unset = approval_request("apr-1");
    assert_eq!(approval_validity(&unset, START_MS), Ok((START_MS, START_MS + 900_000)), "15 minutes by default");
    let relative = CreateApproval { expires_in_ms: Some(60_000), ..approval_request("apr-1") };
    assert_eq!(approval_validity(&relative, START_MS), Ok((START_MS, START_MS + 60_000)));
    let absolute = CreateApproval { expires_at_ms: Some(START_MS + DAY_MS), ..approval_request("apr-1") };
    assert_eq!(approval_validity(&absolute, START_MS), Ok((START_MS, START_MS + DAY_MS)));
    // A requestedAt of its own wins over the command time.
    assert_eq!(approval_validity(&requested_at(START_MS + 5), START_MS + 99), Ok((START_MS, START_MS + 5)));

    // Year 9999 without requestedAt is over the cap measured from the command time.
    let far = CreateApproval { expires_at_ms: Some(TIMESTAMP_MS_MAX), ..approval_request("apr-1") };
    let error = approval_validity(&far, START_MS).expect_err("year 9999 is past 30 days");
    assert_eq!(error.code, ErrorCode::InvalidArgument);
    let past = CreateApproval { expires_at_ms: Some(START_MS - 1), ..approval_request("apr-1") };
    assert!(approval_validity(&past, START_MS).is_err(), "before the command time");
}

// ---------------------------------------------------------------- JSON numbers

/// Texts that are not I-JSON, with the JSON Pointer and the words their
/// refusal must name: numbers a double cannot hold exactly, a duplicated
/// key, a lone surrogate.
fn not_i_json() -> Vec<(String, &'static str, &'static str)> {
    vec![
        (r#"{"order_id":1234567890123456789}"#.to_string(), "/order_id", "would become 1234567890123456800"),
        (r#"{"a":[0,9007199254740993]}"#.to_string(), "/a/1", "would become 9007199254740992"),
        (r#"{"a":-9007199254740992}"#.to_string(), "/a", "beyond ±9007199254740991"),
        (r#"{"tiny":1e-400}"#.to_string(), "/tiny", "would become 0"),
        (r#"{"amount":1e400}"#.to_string(), "/amount", "beyond the range of a double"),
        (r#"[-1e400]"#.to_string(), "/0", "beyond the range of a double"),
        (format!(r#"{{"n":{}}}"#, "1".repeat(400)), "/n", "beyond the range of a double"),
        (r#"{"x":0.10000000000000000001}"#.to_string(), "/x", "would become 0.1"),
        (r#"{"order":{"lines":[{},{"qty":1,"qty":2}]}}"#.to_string(), "/order/lines/1/qty", "duplicate key"),
        (r#"{"a~b/c":"\ud800"}"#.to_string(), "/a~0b~1c", "lone surrogate"),
    ]
}

#[test]
fn json_that_is_not_i_json_is_refused_naming_the_pointer_wherever_json_is_taken() {
    for (input, pointer, words) in not_i_json() {
        let check = |message: String| {
            assert!(message.contains(&format!(" at {pointer}")), "{input}: {message}");
            assert!(message.contains(words), "{input}: {message}");
            assert!(message.contains("not I-JSON (RFC 7493)"), "{input}: {message}");
        };
        let submit = Command::Submit(submission("ex-1", "docs.read", &input));
        check(refusal(&submit, ErrorCode::InputInvalid));
        apply_refuses(submit, ErrorCode::InputInvalid);

        let resume = Command::Resume {
            approval_id: "apr-1".to_string(),
            execution_id: "ex-1".to_string(),
            input_json: Some(input.clone()),
        };
        check(refusal(&resume, ErrorCode::InputInvalid));

        let approval = CreateApproval { input_json: input.clone(), ..approval_request("apr-1") };
        check(refusal(&create(approval.clone()), ErrorCode::InvalidArgument));
        apply_refuses(create(approval), ErrorCode::InvalidArgument);

        let report = Command::Report {
            lease_id: 1,
            worker_id: "worker-1".to_string(),
            outcome: ReportOutcome::Completed { output_json: input.clone() },
        };
        check(refusal(&report, ErrorCode::InvalidArgument));

        let event = Command::RecordEvent(RecordEvent {
            event_type: "policy.denied".to_string(),
            actor: gavel_core::Actor::user("alice"),
            execution_id: None,
            approval_id: None,
            correlation_id: None,
            capability_id: None,
            payload_json: Some(input.clone()),
            attributes: Default::default(),
        });
        check(refusal(&event, ErrorCode::InvalidArgument));
        apply_refuses(event, ErrorCode::InvalidArgument);
    }
}

#[test]
fn numbers_a_double_holds_exactly_are_accepted_and_stored_as_written() {
    for (input, canonical) in [
        (r#"{"amount":1e308}"#, r#"{"amount":1e+308}"#),
        (r#"{"id":9007199254740991}"#, r#"{"id":9007199254740991}"#),
        (r#"{"id":-9007199254740991}"#, r#"{"id":-9007199254740991}"#),
        (r#"{"amount":-1.7976931348623157e308}"#, r#"{"amount":-1.7976931348623157e+308}"#),
        (r#"{"big":1.5e300,"price":0.1,"zero":-0}"#, r#"{"big":1.5e+300,"price":0.1,"zero":0}"#),
    ] {
        assert_eq!(precheck(&Command::Submit(submission("ex-1", "docs.read", input))), Ok(()), "{input}");
        let mut script = Script::new();
        script.register(capability("docs.read", gavel_core::SideEffect::Read));
        script.submit_ok("ex-1", "docs.read", input);
        let stored = script.state.execution("ex-1").map(|execution| execution.input_json.clone());
        assert_eq!(stored.as_deref(), Some(canonical), "{input}");
    }
}

#[test]
fn an_actor_id_that_already_names_a_kind_is_refused_saying_how_to_write_it() {
    use gavel_core::validate::check_actor_id;
    use gavel_core::{Actor, ActorKind, ApprovalStatus};

    let prefixed = Actor::user("user:ts-alice");
    let expected = r#"actor id "user:ts-alice" already names a kind; pass id "ts-alice" with kind user"#;
    let commands = [
        create(CreateApproval { actor: prefixed.clone(), ..support::approval_request("apr-1") }),
        Command::Submit(gavel_core::Submit { actor: prefixed.clone(), ..submission("ex-1", "docs.read", "{}") }),
    ];
    for command in commands {
        assert_eq!(refusal(&command, ErrorCode::InvalidArgument), expected);
        apply_refuses(command, ErrorCode::InvalidArgument);
    }
    let decide = Command::DecideApproval {
        approval_id: "apr-1".to_string(),
        status: ApprovalStatus::Approved,
        approver: Actor::new("service:billing", ActorKind::Service),
        comment: None,
        caller_now_ms: None,
        terms_hash: None,
    };
    assert_eq!(
        refusal(&decide, ErrorCode::InvalidArgument),
        r#"approver id "service:billing" already names a kind; pass id "billing" with kind service"#
    );

    // A principal kind names the actor kind that principal acts as.
    assert_eq!(
        check_actor_id("actor", "worker:refunds-1"),
        Err(r#"actor id "worker:refunds-1" already names a kind; pass id "refunds-1" with kind automation"#.into())
    );
    assert!(check_actor_id("actor", "node:2").is_err());
    // Colons elsewhere, or after a word that is no kind, are the id's own.
    for id in ["alice", "tenant:alice", "alice@example.com", "urn:example:alice", "User:alice"] {
        assert_eq!(check_actor_id("actor", id), Ok(()), "{id}");
    }
}
