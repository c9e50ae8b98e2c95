//! Who may do what: the grant bindings, the authorization of every command
//! at its log position and of every read, and the identity rules
//! (docs/security.md). The RPC table is written once, as data (`table`);
//! the table-driven tests iterate it. A property test at the end drives
//! random grants, revokes and commands by several principals and checks
//! every answer against a model of the bindings.

mod support;

use std::collections::BTreeSet;

use gavel_core::command::{Command, Reply, Retention};
use gavel_core::{
    Action, Actor, ActorKind, ApprovalFilter, ApprovalStatus, Caller, ErrorCode, EventKind, Grant, GrantName,
    Principal, PrincipalKind, ReportOutcome, State,
};
use support::*;

// ---------------------------------------------------------------- helpers

fn user(id: &str) -> Principal {
    Principal::new(PrincipalKind::User, id).expect("a well-formed id")
}

fn service(id: &str) -> Principal {
    Principal::new(PrincipalKind::Service, id).expect("a well-formed id")
}

fn worker(id: &str) -> Principal {
    Principal::new(PrincipalKind::Worker, id).expect("a well-formed id")
}

fn node() -> Caller {
    Caller::of(Principal::node(1))
}

fn root() -> Caller {
    Caller::of(user("root"))
}

/// A script whose first admin is `user:root`, bootstrapped by node 1, with
/// capability `cap` (no approval) and `gated` (needs approval) registered.
fn secured() -> Script {
    let mut script = Script::new();
    let reply = script.apply_by(&node(), Command::BootstrapAdmin { admin: user("root") });
    assert!(matches!(reply, Reply::Grants { .. }), "bootstrap refused: {reply:?}");
    for spec in [capability("cap", gavel_core::SideEffect::Read), gated("gated", gavel_core::SideEffect::Write, 60_000)]
    {
        let reply = script.apply_by(&root(), Command::RegisterCapability(spec));
        assert!(matches!(reply, Reply::Capability(_)), "registration refused: {reply:?}");
    }
    script
}

/// Grants `grant` to `principal` as root, expecting success.
fn give(script: &mut Script, principal: &Principal, grant: Grant) {
    let reply = script.apply_by(&root(), Command::Grant { principal: principal.clone(), grant });
    assert!(matches!(reply, Reply::Grants { .. }), "grant refused: {reply:?}");
}

/// A caller for `principal` after granting it each of `grants` (unscoped).
fn holder(script: &mut Script, principal: Principal, grants: &[GrantName]) -> Caller {
    for name in grants {
        give(script, &principal, Grant::of(*name));
    }
    Caller::of(principal)
}

/// A caller for `principal` after granting it `grant`.
fn scoped_holder(script: &mut Script, principal: Principal, grant: Grant) -> Caller {
    give(script, &principal, grant);
    Caller::of(principal)
}

/// A secured script with execution `e1` of `cap` queued by `service:app`,
/// and two principals holding `worker`: `worker:w1` and `worker:w2`.
fn one_queued_execution() -> (Script, Caller, Caller) {
    let mut script = secured();
    let submitter = holder(&mut script, service("app"), &[GrantName::Submitter]);
    let w1 = holder(&mut script, worker("w1"), &[GrantName::Worker]);
    let w2 = holder(&mut script, worker("w2"), &[GrantName::Worker]);
    execution_of(script.apply_by(&submitter, submit_by("e1", "cap", submitter.principal.as_actor())));
    (script, w1, w2)
}

fn denied(reply: Reply) -> String {
    refused(reply, ErrorCode::PermissionDenied).message
}

fn decide_as(approval_id: &str, approver: Actor) -> Command {
    Command::DecideApproval {
        terms_hash: None,
        approval_id: approval_id.to_string(),
        status: ApprovalStatus::Approved,
        approver,
        comment: None,
        caller_now_ms: None,
    }
}

/// An approval request by `actor`, of the given types.
fn request_by(id: &str, actor: Actor, types: &[&str]) -> Command {
    let mut request = approval_request(id);
    request.actor = actor;
    request.types = types.iter().map(|item| item.to_string()).collect();
    Command::CreateApproval(request)
}

fn submit_by(execution_id: &str, capability_id: &str, actor: Actor) -> Command {
    let mut submit = submission(execution_id, capability_id, r#"{"n":1}"#);
    submit.actor = actor;
    Command::Submit(submit)
}

fn poll_command(worker_id: &str, queue: &str) -> Command {
    Command::Poll { worker_id: worker_id.to_string(), queues: vec![queue.to_string()], tasks_max: 1 }
}

fn tasks_of(reply: Reply) -> Vec<gavel_core::command::Task> {
    match reply {
        Reply::Tasks(tasks) => tasks,
        other => panic!("expected tasks, got {other:?}"),
    }
}

fn grants_of(reply: Reply) -> Vec<Grant> {
    match reply {
        Reply::Grants { grants, .. } => grants,
        other => panic!("expected grants, got {other:?}"),
    }
}

// ---------------------------------------------------------------- the table

/// Who may do an operation.
#[derive(Debug, Clone, Copy)]
enum Allowed {
    /// Any authenticated principal, with or without grants.
    Anyone,
    /// A principal holding one of these grants.
    OneOf(&'static [GrantName]),
    /// Only a node principal (the cluster's own commands).
    Node,
}

/// What is authorized: a command (built for the calling principal, naming
/// no one else, claiming no clock) or a read.
#[derive(Clone, Copy)]
enum Operation {
    Command(fn(&Principal) -> Command),
    Read(Action),
}

const READERS: &[GrantName] = &[GrantName::Submitter, GrantName::ActFor, GrantName::Approver, GrantName::Auditor];
const EXECUTION_READERS: &[GrantName] =
    &[GrantName::Submitter, GrantName::ActFor, GrantName::Approver, GrantName::Auditor, GrantName::Worker];
/// docs/security.md's table, written once. Commands target records that do
/// not exist (an unknown approval, lease or execution), so only the grant
/// decides; the record-dependent rules (ownership, scopes) have their own
/// tests below and in tests/ownership.rs.
fn table() -> Vec<(&'static str, Operation, Allowed)> {
    vec![
        (
            "RegisterCapability",
            Operation::Command(|_| Command::RegisterCapability(capability("new.cap", gavel_core::SideEffect::Read))),
            Allowed::OneOf(&[GrantName::Admin]),
        ),
        (
            "CreateApproval",
            Operation::Command(|principal| request_by("table-approval", principal.as_actor(), &["human"])),
            Allowed::OneOf(&[GrantName::Submitter]),
        ),
        (
            "DecideApproval",
            Operation::Command(|principal| decide_as("missing-approval", principal.as_actor())),
            Allowed::OneOf(&[GrantName::Approver]),
        ),
        (
            "ConsumeApproval",
            Operation::Command(|_| consume_command("missing-approval", "exec-x")),
            Allowed::OneOf(&[GrantName::Submitter]),
        ),
        (
            "CancelApproval",
            Operation::Command(|_| Command::CancelApproval {
                approval_id: "missing-approval".to_string(),
                caller_now_ms: None,
            }),
            Allowed::OneOf(&[GrantName::Submitter]),
        ),
        (
            "Submit",
            Operation::Command(|principal| submit_by("table-exec", "cap", principal.as_actor())),
            Allowed::OneOf(&[GrantName::Submitter]),
        ),
        (
            "Resume",
            Operation::Command(|_| Command::Resume {
                approval_id: "missing-approval".to_string(),
                execution_id: "exec-r".to_string(),
                input_json: None,
            }),
            Allowed::OneOf(&[GrantName::Submitter]),
        ),
        (
            "CancelExecution",
            Operation::Command(|_| Command::CancelExecution { execution_id: "missing-exec".to_string(), actor: None }),
            Allowed::OneOf(&[GrantName::Submitter]),
        ),
        ("Poll", Operation::Command(|_| poll_command("w", "cap")), Allowed::OneOf(&[GrantName::Worker])),
        (
            "Heartbeat",
            Operation::Command(|_| Command::Heartbeat { lease_id: 4_242, worker_id: "w".to_string() }),
            Allowed::OneOf(&[GrantName::Worker]),
        ),
        (
            "Report",
            Operation::Command(|_| Command::Report {
                lease_id: 4_242,
                worker_id: "w".to_string(),
                outcome: ReportOutcome::Completed { output_json: "{}".to_string() },
            }),
            Allowed::OneOf(&[GrantName::Worker]),
        ),
        (
            "Grant",
            Operation::Command(|_| Command::Grant {
                principal: user("newcomer"),
                grant: Grant::of(GrantName::Auditor),
            }),
            Allowed::OneOf(&[GrantName::Admin]),
        ),
        (
            "Revoke",
            Operation::Command(|_| Command::Revoke { principal: user("newcomer"), name: GrantName::Auditor }),
            Allowed::OneOf(&[GrantName::Admin]),
        ),
        (
            "SetQuota",
            Operation::Command(|_| Command::SetQuota {
                principal: user("newcomer"),
                change: gavel_core::QuotaChange { pending_approvals_max: Some(5), ..Default::default() },
            }),
            Allowed::OneOf(&[GrantName::Admin]),
        ),
        (
            "SetPolicy",
            Operation::Command(|_| {
                Command::SetPolicy(gavel_core::PolicySpec {
                    name: "table-policy".to_string(),
                    approval_types: ["table-type".to_string()].into(),
                    capability_ids: Default::default(),
                    risks: Default::default(),
                    side_effects: Default::default(),
                    factors: vec![gavel_core::Factor {
                        name: "any".to_string(),
                        k: 1,
                        approvers: gavel_core::Approvers::Scope("table-type".to_string()),
                    }],
                    deny_threshold: None,
                    non_retroactive: false,
                    forbid_standing: false,
                })
            }),
            Allowed::OneOf(&[GrantName::Admin]),
        ),
        (
            "CreateStandingApproval",
            Operation::Command(|principal| {
                let request = match request_by("table-standing", principal.as_actor(), &["human"]) {
                    Command::CreateApproval(request) => request,
                    other => unreachable!("request_by builds a CreateApproval, not {other:?}"),
                };
                let standing = gavel_core::StandingSpec { uses_max: 2, window_ms: 60_000, bound_pointers: Vec::new() };
                Command::CreateStandingApproval { request, standing }
            }),
            Allowed::OneOf(&[GrantName::Submitter]),
        ),
        (
            "DeletePolicy",
            Operation::Command(|_| Command::DeletePolicy {
                name: "missing-policy".to_string(),
                non_retroactive: false,
            }),
            Allowed::OneOf(&[GrantName::Admin]),
        ),
        (
            "CastVote",
            Operation::Command(|principal| Command::CastVote {
                terms_hash: None,
                approval_id: "missing-approval".to_string(),
                approve: true,
                input_hash: "0".repeat(64),
                approver: principal.as_actor(),
                comment: None,
            }),
            Allowed::OneOf(&[GrantName::Approver]),
        ),
        (
            "WithdrawVote",
            Operation::Command(|principal| Command::WithdrawVote {
                approval_id: "missing-approval".to_string(),
                approver: principal.as_actor(),
            }),
            Allowed::OneOf(&[GrantName::Approver]),
        ),
        (
            "RecordEvent",
            Operation::Command(|principal| {
                Command::RecordEvent(gavel_core::RecordEvent {
                    event_type: "policy.denied".to_string(),
                    actor: principal.as_actor(),
                    execution_id: None,
                    approval_id: None,
                    correlation_id: None,
                    capability_id: None,
                    payload_json: None,
                    attributes: Default::default(),
                })
            }),
            Allowed::OneOf(&[GrantName::Submitter]),
        ),
        ("BootstrapAdmin", Operation::Command(|_| Command::BootstrapAdmin { admin: user("root") }), Allowed::Node),
        ("Tick", Operation::Command(|_| Command::Tick { retention: Retention::default() }), Allowed::Node),
        // Node 1 for itself: the grid's node is node 1 (another node is refused, tests/audit_tree.rs).
        (
            "RegisterNoteKey",
            Operation::Command(|_| Command::RegisterNoteKey { node_id: 1, public_key: vec![1; 32] }),
            Allowed::Node,
        ),
        (
            "CosignCheckpoint",
            Operation::Command(|_| Command::CosignCheckpoint {
                node_id: 1,
                size: 1,
                timestamp_s: 1,
                signature: vec![1; 64],
                log_signature: None,
            }),
            Allowed::Node,
        ),
        (
            "AddWitnessCosignature",
            Operation::Command(|_| Command::AddWitnessCosignature {
                node_id: 1,
                size: 1,
                witness: "w.example/1".to_string(),
                signature: vec![1; 76],
            }),
            Allowed::Node,
        ),
        ("GetApproval/ListApprovals", Operation::Read(Action::ReadApprovals), Allowed::OneOf(READERS)),
        (
            "GetExecution/WaitExecution/ListExecutionEvents",
            Operation::Read(Action::ReadExecution),
            Allowed::OneOf(EXECUTION_READERS),
        ),
        ("AuditService.WatchEvents", Operation::Read(Action::WatchEvents), Allowed::OneOf(EXECUTION_READERS)),
        ("GetCapability/ListCapabilities", Operation::Read(Action::ReadCapability), Allowed::Anyone),
        ("AuditService.ListEvents/GetEvent", Operation::Read(Action::ReadAudit), Allowed::OneOf(&[GrantName::Auditor])),
        ("AccessService.List", Operation::Read(Action::ReadAccess), Allowed::OneOf(&[GrantName::Admin])),
        ("AccessService.WhoAmI", Operation::Read(Action::ReadOwnAccess), Allowed::Anyone),
        ("ClusterService.Status", Operation::Read(Action::ReadClusterStatus), Allowed::Anyone),
        ("PolicyService.GetPolicy/ListPolicies", Operation::Read(Action::ReadPolicies), Allowed::Anyone),
        (
            "ClusterService.AddLearner/Promote/RemoveNode",
            Operation::Read(Action::ChangeMembership),
            Allowed::OneOf(&[GrantName::Admin]),
        ),
        ("Backup", Operation::Read(Action::Backup), Allowed::OneOf(&[GrantName::Admin])),
    ]
}

/// The table's name for a command. Exhaustive without a wildcard: a new
/// command does not compile until it is named here (and then the coverage
/// test asks for its row).
fn row_name(command: &Command) -> &'static str {
    match command {
        Command::RegisterCapability(_) => "RegisterCapability",
        Command::CreateApproval(_) => "CreateApproval",
        Command::DecideApproval { .. } => "DecideApproval",
        Command::ConsumeApproval { .. } => "ConsumeApproval",
        Command::CancelApproval { .. } => "CancelApproval",
        Command::Submit(_) => "Submit",
        Command::Resume { .. } => "Resume",
        Command::Poll { .. } => "Poll",
        Command::Heartbeat { .. } => "Heartbeat",
        Command::Report { .. } => "Report",
        Command::CancelExecution { .. } => "CancelExecution",
        Command::Grant { .. } => "Grant",
        Command::Revoke { .. } => "Revoke",
        Command::BootstrapAdmin { .. } => "BootstrapAdmin",
        Command::Tick { .. } => "Tick",
        Command::RecordEvent(_) => "RecordEvent",
        Command::SetQuota { .. } => "SetQuota",
        Command::RegisterNoteKey { .. } => "RegisterNoteKey",
        Command::CosignCheckpoint { .. } => "CosignCheckpoint",
        Command::AddWitnessCosignature { .. } => "AddWitnessCosignature",
        Command::SetPolicy(_) => "SetPolicy",
        Command::DeletePolicy { .. } => "DeletePolicy",
        Command::CastVote { .. } => "CastVote",
        Command::WithdrawVote { .. } => "WithdrawVote",
        Command::CreateStandingApproval { .. } => "CreateStandingApproval",
        // No row: apply authorizes a hand-off as the command it carries,
        // then its poll as the worker's (`handoff.rs`); sent, it is refused.
        Command::Handoff(_) => "Handoff",
        // The same for a decision carrying a resume: each is authorized as
        // its own caller's at apply.
        Command::DecideThenResume(_) => "DecideThenResume",
    }
}

/// Every principal the grid tries: one per grant holding only that grant,
/// one with no grant, and a node (which holds none).
fn grid_callers(script: &mut Script) -> Vec<(String, Caller, Option<GrantName>)> {
    let mut callers = Vec::new();
    for name in GrantName::ALL {
        let principal = user(&format!("only-{}", name.as_str()));
        callers.push((principal.to_string(), holder(script, principal, &[name]), Some(name)));
    }
    callers.push(("user:nobody".to_string(), Caller::of(user("nobody")), None));
    callers.push(("node:1".to_string(), node(), None));
    callers
}

fn expected(allowed: Allowed, caller: &Caller, grant: Option<GrantName>) -> bool {
    match allowed {
        Allowed::Anyone => true,
        Allowed::OneOf(names) => grant.is_some_and(|grant| names.contains(&grant)),
        Allowed::Node => caller.principal.kind == PrincipalKind::Node,
    }
}

#[test]
fn the_table_names_every_command() {
    let table = table();
    let named: BTreeSet<&str> = table.iter().map(|(name, _, _)| *name).collect();
    let principal = user("anyone");
    for (name, operation, _) in &table {
        if let Operation::Command(build) = operation {
            assert_eq!(row_name(&build(&principal)), *name, "a row builds the command it names");
        }
    }
    let commands = [
        "RegisterCapability",
        "CreateApproval",
        "DecideApproval",
        "ConsumeApproval",
        "CancelApproval",
        "Submit",
        "Resume",
        "Poll",
        "Heartbeat",
        "Report",
        "CancelExecution",
        "Grant",
        "Revoke",
        "BootstrapAdmin",
        "Tick",
        "RegisterNoteKey",
        "CosignCheckpoint",
        "AddWitnessCosignature",
        "SetPolicy",
        "DeletePolicy",
        "CastVote",
        "WithdrawVote",
        "CreateStandingApproval",
    ];
    for command in commands {
        assert!(named.contains(command), "the table has no row for {command}");
    }
}

#[test]
fn every_operation_is_allowed_exactly_for_the_grants_the_table_names() {
    let mut script = secured();
    let callers = grid_callers(&mut script);
    for (row, operation, allowed) in table() {
        for (label, caller, grant) in &callers {
            let want = expected(allowed, caller, *grant);
            let decision = match operation {
                Operation::Command(build) => {
                    script.state.authorize_command(Some(caller), &build(&caller.principal), script.now_ms)
                }
                Operation::Read(action) => script.state.authorize(Some(caller), action),
            };
            match (&decision, want) {
                (Ok(()), true) => {}
                (Err(error), false) => {
                    assert_eq!(error.code, ErrorCode::PermissionDenied, "{row} by {label}: {error:?}");
                    assert!(error.message.contains(&caller.principal.to_string()), "{row}: {}", error.message);
                }
                (decision, want) => panic!("{row} by {label}: expected allowed={want}, got {decision:?}"),
            }
        }
    }
}

#[test]
fn every_command_is_refused_at_apply_exactly_as_the_table_says_and_a_refusal_changes_nothing() {
    let mut base = secured();
    let callers = grid_callers(&mut base);
    for (row, operation, allowed) in table() {
        let Operation::Command(build) = operation else { continue };
        for (label, caller, grant) in &callers {
            let mut script = Script { state: base.state.clone(), now_ms: base.now_ms };
            let before = script.state.state_hash();
            let reply = script.apply_by(caller, build(&caller.principal));
            let refusal = reply.error().filter(|error| error.code == ErrorCode::PermissionDenied);
            if expected(allowed, caller, *grant) {
                assert!(refusal.is_none(), "{row} by {label} was refused: {reply:?}");
            } else {
                let refusal = refusal.unwrap_or_else(|| panic!("{row} by {label} was not refused: {reply:?}"));
                assert!(refusal.message.contains(&caller.principal.to_string()), "{}", refusal.message);
                assert_eq!(script.state.state_hash(), before, "{row} by {label}: a refusal changes nothing");
            }
        }
    }
}

#[test]
fn a_refusal_names_the_principal_and_the_missing_grant() {
    let mut script = secured();
    let message =
        denied(script.apply_by(&Caller::of(user("mallory")), submit_by("e", "cap", user("mallory").as_actor())));
    assert_eq!(message, "user:mallory may not submit executions: it needs the submitter grant");
}

#[test]
fn without_a_caller_nothing_is_checked_even_once_grants_exist() {
    let mut script = secured();
    let execution = script.submit_ok("e1", "cap", "{}");
    assert_eq!(execution.actor, alice());
    let task = script.lease("w1", "cap");
    assert!(matches!(script.heartbeat(task.lease.lease_id, "w1"), Reply::Heartbeat { .. }));
    reported(script.report_ok(task.lease.lease_id, "w1", "{}"));
    assert!(matches!(
        script.apply(Command::Grant { principal: user("x"), grant: Grant::of(GrantName::Admin) }),
        Reply::Grants { .. }
    ));
    let events = script.events();
    let insecure = events.iter().filter(|event| event.execution_id.as_deref() == Some("e1"));
    assert!(insecure.clone().count() > 0);
    assert!(insecure.into_iter().all(|event| event.principal.is_none()), "no caller, no principal");
}

// ---------------------------------------------------------------- tokens and revocation

#[test]
fn a_token_scope_narrows_the_bound_grants_and_never_widens_them() {
    let mut script = secured();
    let bob = holder(&mut script, user("bob"), &[GrantName::Submitter, GrantName::Approver]);
    let approver_only = Caller { principal: bob.principal.clone(), scope: Some(BTreeSet::from([GrantName::Approver])) };
    let message = denied(script.apply_by(&approver_only, submit_by("e1", "cap", bob.principal.as_actor())));
    assert_eq!(message, "user:bob may not submit executions: its token does not carry the submitter grant");
    assert!(script.state.authorize(Some(&approver_only), Action::ReadApprovals).is_ok());
    let widened = Caller { principal: bob.principal.clone(), scope: Some(BTreeSet::from([GrantName::Admin])) };
    let message =
        denied(script.apply_by(&widened, Command::RegisterCapability(capability("x", gavel_core::SideEffect::Read))));
    assert!(message.contains("needs the admin grant"), "{message}");
    let (execution, created) = execution_of(script.apply_by(&bob, submit_by("e1", "cap", bob.principal.as_actor())));
    assert!(created && execution.execution_id == "e1", "the whole binding works without a token scope");
}

#[test]
fn a_command_ordered_after_a_revoke_is_refused_even_a_retry_of_an_earlier_request() {
    let mut script = secured();
    let alice_caller = holder(&mut script, user("alice"), &[GrantName::Submitter]);
    let bob = holder(&mut script, user("bob"), &[GrantName::Approver]);
    for id in ["a1", "a2"] {
        approval_of(script.apply_by(&alice_caller, request_by(id, alice(), &["human"])));
    }
    approval_of(script.apply_by_as("decide-1", &bob, decide_as("a1", bob.principal.as_actor())));
    script.apply_by(&root(), Command::Revoke { principal: bob.principal.clone(), name: GrantName::Approver });
    let before = script.state.state_hash();
    denied(script.apply_by(&bob, decide_as("a2", bob.principal.as_actor())));
    denied(script.apply_by_as("decide-1", &bob, decide_as("a1", bob.principal.as_actor())));
    assert_eq!(script.state.replay_for("decide-1", Some(&bob), &decide_as("a1", bob.principal.as_actor())), None);
    assert_eq!(script.state.state_hash(), before);
    assert_eq!(script.approval("a2").status_at(script.now_ms), ApprovalStatus::Pending);
}

#[test]
fn a_request_id_reused_by_another_principal_returns_nothing_of_the_first_reply() {
    let (mut script, w1, w2) = one_queued_execution();
    let tasks = tasks_of(script.apply_by_as("poll-1", &w1, poll_command("w", "cap")));
    assert_eq!(tasks.len(), 1);
    refused(script.apply_by_as("poll-1", &w2, poll_command("w", "cap")), ErrorCode::RequestIdReused);
    assert_eq!(script.state.replay_for("poll-1", Some(&w2), &poll_command("w", "cap")), None);
    assert_eq!(script.state.replay("poll-1", &poll_command("w", "cap")), None, "nor without a caller");
    let again = tasks_of(script.apply_by_as("poll-1", &w1, poll_command("w", "cap")));
    assert_eq!(again, tasks, "the principal that sent it gets its reply back");
}

// ---------------------------------------------------------------- identity rules

#[test]
fn a_decision_naming_another_approver_is_refused_without_delegate_decide() {
    let mut script = secured();
    let alice_caller = holder(&mut script, user("alice"), &[GrantName::Submitter]);
    let bob = holder(&mut script, user("bob"), &[GrantName::Approver]);
    approval_of(script.apply_by(&alice_caller, request_by("a1", alice(), &["human"])));
    let before = script.state.state_hash();
    let message = denied(script.apply_by(&bob, decide_as("a1", Actor::user("cfo"))));
    assert_eq!(message, "user:bob may not decide as approver user:cfo: it needs the delegate-decide grant");
    assert_eq!(script.state.state_hash(), before);
}

#[test]
fn a_delegated_decision_is_allowed_and_audited_with_both_the_approver_and_the_principal() {
    let mut script = secured();
    let app = holder(&mut script, service("app"), &[GrantName::Submitter, GrantName::ActFor, GrantName::Approver]);
    give(&mut script, &app.principal, Grant::of(GrantName::DelegateDecide));
    approval_of(script.apply_by(&app, request_by("a1", alice(), &["human"])));
    let (approval, status) = approval_of(script.apply_by(&app, decide_as("a1", Actor::user("cfo"))));
    assert_eq!(status, ApprovalStatus::Approved);
    assert_eq!(approval.decision.expect("decided").approver, Actor::user("cfo"));
    let event =
        script.events().into_iter().find(|event| matches!(event.kind, EventKind::Approved { .. })).expect("approved");
    assert_eq!(event.actor, Actor::user("cfo"));
    assert_eq!(event.principal, Some(service("app")));
    let requested =
        script.events().into_iter().find(|event| event.kind == EventKind::ApprovalRequested).expect("requested");
    assert_eq!((requested.actor, requested.principal), (alice(), Some(service("app"))), "act-for records both");
}

#[test]
fn the_self_approval_check_compares_authenticated_identities() {
    let mut script = secured();
    let alice_caller = holder(&mut script, user("alice"), &[GrantName::Submitter, GrantName::Approver]);
    approval_of(script.apply_by(&alice_caller, request_by("a1", alice(), &["human"])));
    refused(script.apply_by(&alice_caller, decide_as("a1", alice())), ErrorCode::ApprovalSelfApproval);

    // A submitter approving its own request under another name: it
    // requested as carol (act-for) and decides as itself.
    let app = holder(&mut script, service("app"), &[GrantName::Submitter, GrantName::ActFor, GrantName::Approver]);
    approval_of(script.apply_by(&app, request_by("a2", Actor::user("carol"), &["human"])));
    let error =
        refused(script.apply_by(&app, decide_as("a2", app.principal.as_actor())), ErrorCode::ApprovalSelfApproval);
    assert!(error.message.contains("service:app requested approval a2"), "{}", error.message);

    // A backend deciding for its users compares the actors it names.
    give(&mut script, &app.principal, Grant::of(GrantName::DelegateDecide));
    refused(script.apply_by(&app, decide_as("a2", Actor::user("carol"))), ErrorCode::ApprovalSelfApproval);
    let (_, status) = approval_of(script.apply_by(&app, decide_as("a2", Actor::user("dave"))));
    assert_eq!(status, ApprovalStatus::Approved);
}

#[test]
fn opting_out_of_the_self_approval_check_needs_the_self_approval_grant() {
    let mut script = secured();
    let alice_caller = holder(&mut script, user("alice"), &[GrantName::Submitter, GrantName::Approver]);
    let mut request = approval_request("a1");
    request.allow_self_approval = true;
    let before = script.state.state_hash();
    let message = denied(script.apply_by(&alice_caller, Command::CreateApproval(request.clone())));
    assert!(message.contains("needs the self-approval grant"), "{message}");
    assert_eq!(script.state.state_hash(), before);
    give(&mut script, &alice_caller.principal, Grant::of(GrantName::SelfApproval));
    approval_of(script.apply_by(&alice_caller, Command::CreateApproval(request)));
    let (_, status) = approval_of(script.apply_by(&alice_caller, decide_as("a1", alice())));
    assert_eq!(status, ApprovalStatus::Approved);
}

#[test]
fn naming_another_requester_needs_act_for() {
    let mut script = secured();
    let app = holder(&mut script, service("app"), &[GrantName::Submitter]);
    let message = denied(script.apply_by(&app, submit_by("e1", "cap", alice())));
    assert_eq!(message, "service:app may not submit executions as user:alice: it needs the act-for grant");
    denied(script.apply_by(&app, request_by("a1", alice(), &["human"])));
    let cancel = Command::CancelExecution { execution_id: "e1".to_string(), actor: Some(alice()) };
    denied(script.apply_by(&app, cancel));
    // The display name is the caller's to choose; the kind is not.
    let named = Actor { display_name: Some("The App".to_string()), ..app.principal.as_actor() };
    execution_of(script.apply_by(&app, submit_by("e1", "cap", named)));
    let as_user = Actor { kind: ActorKind::User, ..app.principal.as_actor() };
    denied(script.apply_by(&app, submit_by("e2", "cap", as_user)));
    give(&mut script, &app.principal, Grant::of(GrantName::ActFor));
    let (execution, _) = execution_of(script.apply_by(&app, submit_by("e3", "cap", alice())));
    assert_eq!(execution.actor, alice());
    let requested: Vec<_> = script.events().into_iter().filter(|event| event.kind == EventKind::Requested).collect();
    let last = requested.last().expect("requested");
    assert_eq!((last.actor.clone(), last.principal.clone()), (alice(), Some(service("app"))));
}

#[test]
fn a_caller_clock_needs_the_clock_grant_and_stays_within_its_skew_bound() {
    let mut script = secured();
    let alice_caller = holder(&mut script, user("alice"), &[GrantName::Submitter]);
    let bob = holder(&mut script, user("bob"), &[GrantName::Approver]);
    // The exploit: a 1 ms approval decided with a clock from its request time.
    let mut request = approval_request("a1");
    request.expires_in_ms = Some(1);
    approval_of(script.apply_by(&alice_caller, Command::CreateApproval(request)));
    let requested_at = script.now_ms;
    script.advance(10_000);
    let with_clock = |now: u64| Command::DecideApproval {
        terms_hash: None,
        approval_id: "a1".to_string(),
        status: ApprovalStatus::Approved,
        approver: Actor::user("bob"),
        comment: None,
        caller_now_ms: Some(now),
    };
    let message = denied(script.apply_by(&bob, with_clock(requested_at)));
    assert_eq!(message, "user:bob may not send callerNowMs: it needs the clock grant");
    give(&mut script, &bob.principal, Grant { skew_ms_max: Some(1_000), ..Grant::of(GrantName::Clock) });
    let message = denied(script.apply_by(&bob, with_clock(requested_at)));
    assert!(message.contains("10000 ms from cluster time"), "{message}");
    assert!(message.contains("bound of 1000 ms"), "{message}");
    refused(script.apply_by(&bob, with_clock(script.now_ms - 500)), ErrorCode::FailedPrecondition);
    assert_eq!(script.approval("a1").status_at(script.now_ms), ApprovalStatus::Expired, "the expiry did not move");

    // A requested-at time is a clock claim too.
    let mut request = approval_request("a2");
    request.requested_at_ms = Some(script.now_ms + 1_000_000);
    let message = denied(script.apply_by(&alice_caller, Command::CreateApproval(request.clone())));
    assert_eq!(message, "user:alice may not send requestedAtMs: it needs the clock grant");

    // Before proposing, the edge checks against the time it would stamp,
    // not the clock of the last command (an idle cluster's is old).
    approval_of(script.apply_by(&alice_caller, request_by("a4", alice(), &["human"])));
    let later = script.now_ms + 60_000;
    let decide = Command::DecideApproval {
        terms_hash: None,
        approval_id: "a4".to_string(),
        status: ApprovalStatus::Approved,
        approver: Actor::user("bob"),
        comment: None,
        caller_now_ms: Some(later),
    };
    assert!(script.state.authorize_command(Some(&bob), &decide, later).is_ok());
    let stale = script.state.authorize_command(Some(&bob), &decide, script.now_ms).expect_err("outside the skew");
    assert_eq!(stale.code, ErrorCode::PermissionDenied);

    // Without a skew bound the grant honours any clock.
    give(&mut script, &bob.principal, Grant::of(GrantName::Clock));
    approval_of(script.apply_by(&alice_caller, request_by("a3", alice(), &["human"])));
    let decide = Command::DecideApproval {
        terms_hash: None,
        approval_id: "a3".to_string(),
        status: ApprovalStatus::Approved,
        approver: Actor::user("bob"),
        comment: None,
        caller_now_ms: Some(script.now_ms + 60_000),
    };
    let (_, status) = approval_of(script.apply_by(&bob, decide));
    assert_eq!(status, ApprovalStatus::Approved);
}

#[test]
fn an_approver_scope_limits_which_approvals_it_reads_and_decides() {
    let mut script = secured();
    let alice_caller = holder(&mut script, user("alice"), &[GrantName::Submitter]);
    let finance = scoped_holder(&mut script, user("fin"), Grant::scoped(GrantName::Approver, ["finance"]));
    approval_of(script.apply_by(&alice_caller, request_by("human-1", alice(), &["human"])));
    approval_of(script.apply_by(&alice_caller, request_by("fin-1", alice(), &["finance"])));
    approval_of(script.apply_by(&alice_caller, request_by("both-1", alice(), &["finance", "legal"])));
    approval_of(script.apply_by(&alice_caller, request_by("none-1", alice(), &[])));
    // What its scope does not cover lies outside its view: deciding it is
    // answered exactly as for an unknown approval.
    for id in ["human-1", "both-1", "none-1"] {
        let refusal =
            refused(script.apply_by(&finance, decide_as(id, finance.principal.as_actor())), ErrorCode::NotFound);
        assert_eq!(refusal.message, format!("approval {id} was not found"));
        assert!(!script.state.may_read_approval(Some(&finance), &script.approval(id)));
    }
    let (_, status) = approval_of(script.apply_by(&finance, decide_as("fin-1", finance.principal.as_actor())));
    assert_eq!(status, ApprovalStatus::Approved);
    assert!(script.state.may_read_approval(Some(&finance), &script.approval("fin-1")));
    assert!(script.state.authorize(Some(&finance), Action::ReadApprovals).is_ok());
    assert!(script.state.may_read_approval(Some(&alice_caller), &script.approval("human-1")));

    // A listing shows a scoped approver only what it may read, and a page
    // counts only those: the first page of one is fin-1, not an empty page
    // cut from the approvals before it.
    let listed = |caller: &Caller, limit: usize| -> Vec<String> {
        let filter =
            ApprovalFilter { readable_by: script.state.approval_view(Some(caller)), ..ApprovalFilter::default() };
        script
            .state
            .list_approvals(&filter, script.now_ms, None, limit, gavel_core::ListOrder::OldestFirst)
            .iter()
            .map(|a| a.id.clone())
            .collect()
    };
    assert_eq!(listed(&finance, 10), ["fin-1"]);
    assert_eq!(listed(&finance, 1), ["fin-1"]);
    assert_eq!(listed(&alice_caller, 10).len(), 4, "alice owns all four");
}

/// The answers about approval `apr-1` and execution `ex-1` that `caller`
/// gets from the one-record reads and from the commands that act on them.
fn answers_about_the_records(script: &mut Script, caller: &Caller) -> Vec<String> {
    let state = &script.state;
    let mut answers = vec![
        format!("{:?}", state.visible_approval(Some(caller), "apr-1").map(drop)),
        format!("{:?}", state.visible_execution(Some(caller), "ex-1").map(drop)),
    ];
    let cancel_execution = Command::CancelExecution { execution_id: "ex-1".to_string(), actor: None };
    for command in [consume_command("apr-1", "ex-2"), cancel_execution] {
        answers.push(format!("{:?}", script.apply_by(caller, command)));
    }
    answers
}

#[test]
fn a_record_outside_the_callers_view_answers_byte_for_byte_as_an_absent_one() {
    let mut script = secured();
    let alice_caller = holder(&mut script, user("alice"), &[GrantName::Submitter]);
    let outsiders = [
        holder(&mut script, user("mallory"), &[GrantName::Submitter]),
        scoped_holder(&mut script, user("fin"), Grant::scoped(GrantName::Approver, ["finance"])),
        holder(&mut script, worker("w2"), &[GrantName::Worker, GrantName::Submitter]),
    ];
    let before: Vec<Vec<String>> =
        outsiders.iter().map(|caller| answers_about_the_records(&mut script, caller)).collect();
    for answers in &before {
        assert!(answers[0].contains("NotFound") && answers[1].contains("NotFound"), "{answers:?}");
    }

    approval_of(script.apply_by(&alice_caller, request_by("apr-1", alice_caller.principal.as_actor(), &["human"])));
    execution_of(script.apply_by(&alice_caller, submit_by("ex-1", "cap", alice_caller.principal.as_actor())));
    assert!(script.state.visible_approval(Some(&alice_caller), "apr-1").is_ok(), "the owner reads its approval");
    assert!(script.state.visible_execution(Some(&alice_caller), "ex-1").is_ok(), "the owner reads its execution");
    assert!(script.state.visible_execution(None, "ex-1").is_ok(), "--insecure reads every record");

    // Each outsider gets exactly the answers it got when the records did
    // not exist: the same code, the same message, the same bytes.
    for (caller, before) in outsiders.iter().zip(&before) {
        let events_before = script.state.next_cursor();
        assert_eq!(&answers_about_the_records(&mut script, caller), before, "as {}", caller.principal);
        assert_eq!(script.state.next_cursor(), events_before, "the refusals recorded nothing");
    }
    let absent = script.state.visible_approval(Some(&outsiders[0]), "apr-1").map(drop).expect_err("not visible");
    assert_eq!((absent.code, absent.message.as_str()), (ErrorCode::NotFound, "approval apr-1 was not found"));
}

#[test]
fn a_lease_is_bound_to_the_principal_that_polled() {
    let (mut script, w1, w2) = one_queued_execution();
    let task = tasks_of(script.apply_by(&w1, poll_command("w1", "cap"))).pop().expect("a task");
    let lease_id = task.lease.lease_id;
    let started = script.events().into_iter().find(|event| event.kind.type_name() == "capability.started");
    assert_eq!(started.expect("started").principal, Some(worker("w1")));

    // Another principal quoting the lease id and worker id is refused, and nothing changes.
    let before = script.state.state_hash();
    let message = denied(script.apply_by(&w2, Command::Heartbeat { lease_id, worker_id: "w1".to_string() }));
    assert_eq!(message, format!("worker:w2 may not use lease {lease_id}: it was granted to another principal"));
    assert!(!message.contains("w1"), "a refusal never names another principal: {message}");
    let forged = ReportOutcome::Completed { output_json: r#"{"forged":true}"#.to_string() };
    let report = |outcome: ReportOutcome| Command::Report { lease_id, worker_id: "w1".to_string(), outcome };
    denied(script.apply_by(&w2, report(forged)));
    assert_eq!(script.state.state_hash(), before);

    // The holder is unaffected.
    assert!(matches!(
        script.apply_by(&w1, Command::Heartbeat { lease_id, worker_id: "w1".to_string() }),
        Reply::Heartbeat { .. }
    ));
    let (execution, _) =
        reported(script.apply_by(&w1, report(ReportOutcome::Completed { output_json: "{}".to_string() })));
    assert!(execution.state.is_final());
    denied(script.apply_by(&w2, report(ReportOutcome::Completed { output_json: "{}".to_string() })));
}

#[test]
fn an_expired_lease_is_still_lease_lost_for_its_holder() {
    let (mut script, w1, _) = one_queued_execution();
    let task = tasks_of(script.apply_by(&w1, poll_command("w1", "cap"))).pop().expect("a task");
    script.advance(task.capability.timeout_ms + 1);
    let reply = script.apply_by(&w1, Command::Heartbeat { lease_id: task.lease.lease_id, worker_id: "w1".to_string() });
    refused(reply, ErrorCode::LeaseLost);
}

#[test]
fn a_worker_scope_limits_its_queues_for_polls_and_reports() {
    let mut script = secured();
    let submitter = holder(&mut script, service("app"), &[GrantName::Submitter]);
    let w1 = scoped_holder(&mut script, worker("w1"), Grant::scoped(GrantName::Worker, ["cap"]));
    let reply = script.apply_by(
        &w1,
        Command::Poll {
            worker_id: "w1".to_string(),
            queues: vec!["cap".to_string(), "gated".to_string()],
            tasks_max: 1,
        },
    );
    let message = denied(reply);
    assert!(message.contains("may not poll queue gated"), "{message}");
    execution_of(script.apply_by(&submitter, submit_by("e1", "cap", submitter.principal.as_actor())));
    let task = tasks_of(script.apply_by(&w1, poll_command("w1", "cap"))).pop().expect("a task");
    give(&mut script, &w1.principal, Grant::scoped(GrantName::Worker, ["other"]));
    let reply = script.apply_by(
        &w1,
        Command::Report {
            lease_id: task.lease.lease_id,
            worker_id: "w1".to_string(),
            outcome: ReportOutcome::Completed { output_json: "{}".to_string() },
        },
    );
    let message = denied(reply);
    assert!(message.contains("does not cover queue cap"), "{message}");
}

#[test]
fn consume_resume_and_cancels_are_recorded_as_the_principal() {
    let mut script = secured();
    let bob = holder(&mut script, user("bob"), &[GrantName::Approver]);
    let app = holder(&mut script, service("app"), &[GrantName::Submitter, GrantName::ActFor]);
    let recorded = |script: &Script, type_name: &str| {
        let event = script.events().into_iter().rev().find(|event| event.kind.type_name() == type_name);
        let event = event.unwrap_or_else(|| panic!("no {type_name} event"));
        (event.actor, event.principal)
    };
    let as_app = (app.principal.as_actor(), Some(app.principal.clone()));

    approval_of(script.apply_by(&app, request_by("a1", alice(), &["human"])));
    approval_of(script.apply_by(&bob, decide_as("a1", bob.principal.as_actor())));
    approval_of(script.apply_by(&app, consume_command("a1", "exec-1")));
    assert_eq!(recorded(&script, "approval.consumed"), as_app);

    approval_of(script.apply_by(&app, request_by("a2", alice(), &["human"])));
    approval_of(script.apply_by(&app, Command::CancelApproval { approval_id: "a2".to_string(), caller_now_ms: None }));
    assert_eq!(recorded(&script, "approval.cancelled"), as_app);

    let Reply::ApprovalRequired { approval, .. } = script.apply_by(&app, submit_by("e1", "gated", alice())) else {
        panic!("gated submit needs approval")
    };
    approval_of(script.apply_by(&bob, decide_as(&approval.id, bob.principal.as_actor())));
    let resume = Command::Resume { approval_id: approval.id.clone(), execution_id: "x".to_string(), input_json: None };
    let (execution, _) = execution_of(script.apply_by(&app, resume));
    assert_eq!(execution.actor, alice(), "the execution stays the requester's");
    assert_eq!(recorded(&script, "approval.consumed"), as_app);

    let cancel = Command::CancelExecution { execution_id: execution.execution_id.clone(), actor: None };
    execution_of(script.apply_by(&app, cancel));
    assert_eq!(recorded(&script, "capability.cancelled"), as_app);
}

// ---------------------------------------------------------------- bindings

#[test]
fn bootstrap_admin_names_the_first_admin_once() {
    let mut script = Script::new();
    let message = denied(script.apply_by(&Caller::of(user("eve")), Command::BootstrapAdmin { admin: user("eve") }));
    assert_eq!(message, "user:eve may not bootstrap the first admin: only a node may");
    let grants = grants_of(script.apply_by(&node(), Command::BootstrapAdmin { admin: user("root") }));
    assert_eq!(grants, vec![Grant::of(GrantName::Admin)]);
    let events = script.events().len();
    let again =
        grants_of(script.apply_by(&Caller::of(Principal::node(2)), Command::BootstrapAdmin { admin: user("root") }));
    assert_eq!(again, grants);
    assert_eq!(script.events().len(), events, "a repeat is a no-op");
    let error = refused(
        script.apply_by(&node(), Command::BootstrapAdmin { admin: user("eve") }),
        ErrorCode::FailedPrecondition,
    );
    assert!(error.message.contains("already has an admin (user:root)"), "{}", error.message);
    refused(script.apply(Command::BootstrapAdmin { admin: user("eve") }), ErrorCode::FailedPrecondition);
    refused(
        script.apply_by(&node(), Command::BootstrapAdmin { admin: Principal::node(3) }),
        ErrorCode::InvalidArgument,
    );

    let mut insecure = Script::new();
    let grants = grants_of(insecure.apply(Command::BootstrapAdmin { admin: user("root") }));
    assert_eq!(grants, vec![Grant::of(GrantName::Admin)], "an insecure node may bootstrap too");
}

#[test]
fn grants_and_revokes_are_audit_events_with_the_subject_and_the_grant() {
    let mut script = secured();
    let auditor = Grant::of(GrantName::Auditor);
    let events = script.events().len();
    let grants = grants_of(script.apply_by(&root(), Command::Grant { principal: user("ann"), grant: auditor.clone() }));
    assert_eq!(grants, vec![auditor.clone()]);
    grants_of(script.apply_by(&root(), Command::Grant { principal: user("ann"), grant: auditor.clone() }));
    let worker_grant = Grant::scoped(GrantName::Worker, ["q1", "q2"]);
    let grants =
        grants_of(script.apply_by(&root(), Command::Grant { principal: user("ann"), grant: worker_grant.clone() }));
    assert_eq!(grants, vec![worker_grant.clone(), auditor.clone()], "ordered by grant name");
    let narrowed = Grant::scoped(GrantName::Worker, ["q1"]);
    grants_of(script.apply_by(&root(), Command::Grant { principal: user("ann"), grant: narrowed.clone() }));
    assert_eq!(script.state.grants_of(&user("ann")), vec![narrowed, auditor]);
    let grants =
        grants_of(script.apply_by(&root(), Command::Revoke { principal: user("ann"), name: GrantName::Worker }));
    assert_eq!(grants, vec![Grant::of(GrantName::Auditor)]);
    grants_of(script.apply_by(&root(), Command::Revoke { principal: user("ann"), name: GrantName::Worker }));
    let new: Vec<_> = script.events().into_iter().skip(events).collect();
    let kinds: Vec<EventKind> = new.iter().map(|event| event.kind.clone()).collect();
    assert_eq!(
        kinds,
        vec![
            EventKind::AccessGranted { principal: user("ann"), grant: GrantName::Auditor },
            EventKind::AccessGranted { principal: user("ann"), grant: GrantName::Worker },
            EventKind::AccessGranted { principal: user("ann"), grant: GrantName::Worker },
            EventKind::AccessRevoked { principal: user("ann"), grant: GrantName::Worker },
        ],
        "an identical grant and a revoke of nothing record nothing"
    );
    assert_eq!(new[0].kind.type_name(), "access.granted");
    assert_eq!(new[3].kind.type_name(), "access.revoked");
    assert!(new.iter().all(|event| event.principal == Some(user("root")) && event.actor == user("root").as_actor()));
    assert_eq!(
        script
            .state
            .bindings()
            .into_iter()
            .map(|(principal, grant)| (principal.to_string(), grant.name))
            .collect::<Vec<_>>(),
        vec![("user:ann".to_string(), GrantName::Auditor), ("user:root".to_string(), GrantName::Admin)]
    );
}

#[test]
fn the_last_admin_cannot_be_revoked() {
    let mut script = secured();
    let error = refused(
        script.apply_by(&root(), Command::Revoke { principal: user("root"), name: GrantName::Admin }),
        ErrorCode::FailedPrecondition,
    );
    assert!(error.message.contains("only admin"), "{}", error.message);
    give(&mut script, &user("second"), Grant::of(GrantName::Admin));
    grants_of(script.apply_by(&root(), Command::Revoke { principal: user("root"), name: GrantName::Admin }));
    denied(script.apply_by(&root(), Command::Grant { principal: user("x"), grant: Grant::of(GrantName::Admin) }));
}

#[test]
fn malformed_grants_are_refused_before_and_at_apply() {
    let mut script = secured();
    let cases = [
        (user("a"), Grant::scoped(GrantName::Admin, ["q"]), "takes no scope"),
        (user("a"), Grant { skew_ms_max: Some(5), ..Grant::of(GrantName::Approver) }, "takes no skew bound"),
        (user("a"), Grant { skew_ms_max: Some(u64::MAX), ..Grant::of(GrantName::Clock) }, "over the limit"),
        (
            user("a"),
            Grant::scoped(GrantName::Worker, (0..=gavel_core::limits::GRANT_SCOPE_ITEMS_MAX).map(|n| format!("q{n}"))),
            "items",
        ),
        (user("a"), Grant::scoped(GrantName::Worker, ["bad\u{7}queue"]), "control characters"),
        (Principal::node(2), Grant::of(GrantName::Auditor), "nodes hold no grants"),
        (
            Principal { kind: PrincipalKind::User, id: "no spaces".to_string() },
            Grant::of(GrantName::Auditor),
            "principal id",
        ),
    ];
    for (principal, grant, problem) in cases {
        let command = Command::Grant { principal, grant };
        let early = gavel_core::precheck::precheck(&command).expect_err("precheck refuses it");
        let late = refused(script.apply_by(&root(), command), ErrorCode::InvalidArgument);
        assert_eq!(early, late);
        let text = format!("{} {:?}", late.message, late.problems);
        assert!(text.contains(problem), "{problem}: {text}");
    }
}

#[test]
fn a_remembered_grant_reply_shows_the_grants_as_they_are_now() {
    let mut script = secured();
    let command = Command::Grant { principal: user("ann"), grant: Grant::of(GrantName::Auditor) };
    grants_of(script.apply_by_as("grant-1", &root(), command.clone()));
    give(&mut script, &user("ann"), Grant::of(GrantName::Submitter));
    let grants = grants_of(script.apply_by_as("grant-1", &root(), command));
    assert_eq!(grants, vec![Grant::of(GrantName::Submitter), Grant::of(GrantName::Auditor)]);
}

// ---------------------------------------------------------------- determinism

/// A script of commands by several principals, including refusals.
fn secured_history() -> Vec<gavel_core::Envelope> {
    let mut envelopes = Vec::new();
    let mut now_ms = START_MS;
    let mut push = |caller: Option<Caller>, command: Command| {
        now_ms += 7;
        envelopes.push(gavel_core::Envelope { request_id: Some(format!("r{now_ms}")), now_ms, caller, command });
    };
    let app = Caller::of(service("app"));
    let bob = Caller::of(user("bob"));
    let w1 = Caller::of(worker("w1"));
    push(Some(node()), Command::BootstrapAdmin { admin: user("root") });
    push(Some(root()), Command::RegisterCapability(capability("cap", gavel_core::SideEffect::Read)));
    push(Some(root()), Command::Grant { principal: app.principal.clone(), grant: Grant::of(GrantName::Submitter) });
    push(Some(root()), Command::Grant { principal: bob.principal.clone(), grant: Grant::of(GrantName::Approver) });
    push(
        Some(root()),
        Command::Grant { principal: w1.principal.clone(), grant: Grant::scoped(GrantName::Worker, ["cap"]) },
    );
    push(Some(app.clone()), request_by("a1", app.principal.as_actor(), &["human"]));
    push(Some(bob.clone()), decide_as("a1", Actor::user("cfo")));
    push(Some(bob.clone()), decide_as("a1", bob.principal.as_actor()));
    push(Some(app.clone()), submit_by("e1", "cap", app.principal.as_actor()));
    push(Some(w1.clone()), poll_command("w1", "cap"));
    push(Some(root()), Command::Revoke { principal: bob.principal.clone(), name: GrantName::Approver });
    push(Some(app.clone()), request_by("a2", app.principal.as_actor(), &["human"]));
    push(Some(bob), decide_as("a2", user("bob").as_actor()));
    push(None, Command::Tick { retention: Retention::default() });
    envelopes
}

#[test]
fn replaying_a_secured_log_gives_the_same_state_hash_and_a_snapshot_keeps_the_grants() {
    let history = secured_history();
    let mut first = State::new();
    let mut second = State::new();
    let replies: Vec<Reply> = history.iter().map(|envelope| first.apply(envelope)).collect();
    let again: Vec<Reply> = history.iter().map(|envelope| second.apply(envelope)).collect();
    assert_eq!(replies, again);
    assert_eq!(first.state_hash(), second.state_hash());
    assert!(replies.iter().any(|reply| reply.error().is_some_and(|error| error.code == ErrorCode::PermissionDenied)));

    let restored = State::restore(&first.snapshot()).expect("the snapshot restores");
    assert_eq!(restored.state_hash(), first.state_hash());
    assert_eq!(restored.bindings(), first.bindings());
    assert_eq!(restored.grants_of(&service("app")), vec![Grant::of(GrantName::Submitter)]);
    assert!(restored.grants_of(&user("bob")).is_empty(), "the revoke survives the snapshot");
    let bob = Caller::of(user("bob"));
    let decide = decide_as("a2", user("bob").as_actor());
    let now_ms = first.clock_ms();
    assert_eq!(
        restored.authorize_command(Some(&bob), &decide, now_ms),
        first.authorize_command(Some(&bob), &decide, now_ms)
    );
    assert!(restored.authorize_command(Some(&bob), &decide, now_ms).is_err());
}

#[test]
fn the_principal_maps_to_an_actor_of_its_kind() {
    let cases = [
        (user("u"), ActorKind::User),
        (service("s"), ActorKind::Service),
        (worker("w"), ActorKind::Automation),
        (Principal::node(4), ActorKind::Service),
    ];
    for (principal, kind) in cases {
        let actor = principal.as_actor();
        assert_eq!((actor.id.as_str(), actor.kind, actor.display_name.clone()), (principal.id.as_str(), kind, None));
        assert!(principal.is_actor(&actor));
        assert!(!principal.is_actor(&Actor { kind: ActorKind::Anonymous, ..actor.clone() }));
        assert!(!principal.is_actor(&Actor { id: format!("{}x", actor.id), ..actor }));
    }
}

// ---------------------------------------------------------------- properties

mod properties {
    use std::collections::{BTreeMap, BTreeSet};

    use gavel_core::command::{Command, Reply};
    use gavel_core::{Actor, Caller, Envelope, ErrorCode, Grant, GrantName, Principal, ReportOutcome, State};
    use proptest::prelude::*;
    use proptest::test_runner::RngAlgorithm;

    use super::{decide_as, node, poll_command, request_by, root, service, submit_by, user, worker};
    use crate::support::{capability, consume_command, START_MS};

    /// The grants the sequences bind and revoke.
    const GRANTS: [GrantName; 6] = [
        GrantName::Submitter,
        GrantName::Approver,
        GrantName::Worker,
        GrantName::ActFor,
        GrantName::DelegateDecide,
        GrantName::Auditor,
    ];

    fn principals() -> [Principal; 4] {
        [user("alice"), user("bob"), service("app"), worker("w1")]
    }

    /// One step: an admin change, or a command by one of the principals.
    #[derive(Debug, Clone)]
    enum Step {
        Grant { principal: usize, grant: usize },
        Revoke { principal: usize, grant: usize },
        Act { principal: usize, token: Option<Vec<usize>>, act: Act },
    }

    /// A command, with indexes into the fixed ids; `actor` names one of the
    /// principals' actors (often the caller's own, sometimes another's).
    #[derive(Debug, Clone)]
    enum Act {
        Submit { execution: usize, actor: usize },
        CreateApproval { approval: usize, actor: usize },
        Decide { approval: usize, approver: usize },
        Consume { approval: usize },
        CancelApproval { approval: usize },
        CancelExecution { execution: usize },
        Poll,
        Heartbeat { lease: usize },
        Report { lease: usize },
    }

    fn act() -> impl Strategy<Value = Act> {
        prop_oneof![
            (0..3usize, 0..4usize).prop_map(|(execution, actor)| Act::Submit { execution, actor }),
            (0..3usize, 0..4usize).prop_map(|(approval, actor)| Act::CreateApproval { approval, actor }),
            (0..3usize, 0..4usize).prop_map(|(approval, approver)| Act::Decide { approval, approver }),
            (0..3usize).prop_map(|approval| Act::Consume { approval }),
            (0..3usize).prop_map(|approval| Act::CancelApproval { approval }),
            (0..3usize).prop_map(|execution| Act::CancelExecution { execution }),
            Just(Act::Poll),
            (0..4usize).prop_map(|lease| Act::Heartbeat { lease }),
            (0..4usize).prop_map(|lease| Act::Report { lease }),
        ]
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            2 => (0..4usize, 0..GRANTS.len()).prop_map(|(principal, grant)| Step::Grant { principal, grant }),
            1 => (0..4usize, 0..GRANTS.len()).prop_map(|(principal, grant)| Step::Revoke { principal, grant }),
            6 => (0..4usize, proptest::option::weighted(0.2, proptest::collection::vec(0..GRANTS.len(), 0..3)), act())
                .prop_map(|(principal, token, act)| Step::Act { principal, token, act }),
        ]
    }

    /// The command an act stands for, sent by `principal`; leases are the
    /// ones granted so far (by index, the most recent first).
    fn command(act: &Act, principal: &Principal, leases: &[u64]) -> Command {
        let actors = principals().map(|principal| principal.as_actor());
        let own = principal.as_actor();
        match act {
            Act::Submit { execution, actor } => submit_by(&format!("e{execution}"), "cap", actors[*actor].clone()),
            Act::CreateApproval { approval, actor } => {
                request_by(&format!("a{approval}"), actors[*actor].clone(), &["human"])
            }
            Act::Decide { approval, approver } => {
                let approver: Actor = if *approver == 0 { own } else { actors[*approver].clone() };
                decide_as(&format!("a{approval}"), approver)
            }
            Act::Consume { approval } => consume_command(&format!("a{approval}"), &format!("x{approval}")),
            Act::CancelApproval { approval } => {
                Command::CancelApproval { approval_id: format!("a{approval}"), caller_now_ms: None }
            }
            Act::CancelExecution { execution } => {
                Command::CancelExecution { execution_id: format!("e{execution}"), actor: None }
            }
            Act::Poll => poll_command("w", "cap"),
            Act::Heartbeat { lease } | Act::Report { lease } => {
                let lease_id = leases.iter().rev().nth(*lease).copied().unwrap_or(9_999);
                match act {
                    Act::Heartbeat { .. } => Command::Heartbeat { lease_id, worker_id: "w".to_string() },
                    _ => Command::Report {
                        lease_id,
                        worker_id: "w".to_string(),
                        outcome: ReportOutcome::Completed { output_json: "{}".to_string() },
                    },
                }
            }
        }
    }

    /// The grant an act needs first, and a second one it needs when it
    /// names someone else.
    fn needs(act: &Act, command: &Command, principal: &Principal) -> (GrantName, Option<GrantName>) {
        let named = |actor: &Actor| (!principal.is_actor(actor)).then_some(());
        match (act, command) {
            (Act::Submit { .. }, Command::Submit(submit)) => {
                (GrantName::Submitter, named(&submit.actor).map(|_| GrantName::ActFor))
            }
            (Act::CreateApproval { .. }, Command::CreateApproval(request)) => {
                (GrantName::Submitter, named(&request.actor).map(|_| GrantName::ActFor))
            }
            (Act::Decide { .. }, Command::DecideApproval { approver, .. }) => {
                (GrantName::Approver, named(approver).map(|_| GrantName::DelegateDecide))
            }
            (Act::Consume { .. } | Act::CancelApproval { .. } | Act::CancelExecution { .. }, _) => {
                (GrantName::Submitter, None)
            }
            _ => (GrantName::Worker, None),
        }
    }

    /// Who owns a record in the model: the principal that created it and
    /// the one it was created for (by index into [`principals`]).
    #[derive(Debug, Clone, Copy)]
    struct Owners {
        creator: usize,
        subject: Option<usize>,
    }

    impl Owners {
        fn include(&self, principal: usize) -> bool {
            self.creator == principal || self.subject == Some(principal)
        }
    }

    /// The read rules of docs/security.md, over the model's bindings.
    struct View<'a> {
        bound: &'a BTreeSet<(usize, GrantName)>,
        principal: usize,
        scope: Option<&'a BTreeSet<GrantName>>,
    }

    impl View<'_> {
        fn holds(&self, name: GrantName) -> bool {
            self.bound.contains(&(self.principal, name)) && self.scope.is_none_or(|scope| scope.contains(&name))
        }

        fn reads_as_owner(&self, owners: &Owners) -> bool {
            self.holds(GrantName::Auditor)
                || self.holds(GrantName::ActFor)
                || (self.holds(GrantName::Submitter) && owners.include(self.principal))
        }

        /// The approvers here are unscoped: they read every approval.
        fn reads_approval(&self, owners: &Owners) -> bool {
            self.reads_as_owner(owners) || self.holds(GrantName::Approver)
        }

        /// Executions submitted directly have no approver: besides owners
        /// and auditors, only a worker that held one of its leases reads one.
        fn reads_execution(
            &self,
            owners: &Owners,
            id: &str,
            holders: &BTreeMap<u64, usize>,
            leased: &BTreeMap<u64, String>,
        ) -> bool {
            let held = leased.iter().any(|(lease, execution)| execution == id && holders[lease] == self.principal);
            self.reads_as_owner(owners) || (self.holds(GrantName::Worker) && held)
        }
    }

    fn act_index(act: &Act) -> usize {
        match act {
            Act::CancelExecution { execution } => *execution,
            _ => unreachable!("only an execution's act has an execution index"),
        }
    }

    fn check(steps: &[Step]) -> Result<(), TestCaseError> {
        let mut state = State::new();
        let mut log = Vec::new();
        let mut now_ms = START_MS;
        let mut apply = |state: &mut State, log: &mut Vec<Envelope>, caller: Caller, command: Command| {
            now_ms += 50;
            let envelope = Envelope { request_id: None, now_ms, caller: Some(caller), command };
            let reply = state.apply(&envelope);
            log.push(envelope);
            reply
        };
        apply(&mut state, &mut log, node(), Command::BootstrapAdmin { admin: user("root") });
        apply(
            &mut state,
            &mut log,
            root(),
            Command::RegisterCapability(capability("cap", gavel_core::SideEffect::Read)),
        );
        // The model: who holds what, whom each lease was granted to, and who
        // created each record, for whom.
        let mut bound: BTreeSet<(usize, GrantName)> = BTreeSet::new();
        let mut leases: Vec<u64> = Vec::new();
        let mut holders: BTreeMap<u64, usize> = BTreeMap::new();
        let mut leased: BTreeMap<u64, String> = BTreeMap::new();
        let mut approvals: BTreeMap<String, Owners> = BTreeMap::new();
        let mut executions: BTreeMap<String, Owners> = BTreeMap::new();
        let everyone = principals();
        for step in steps {
            match step {
                Step::Grant { principal, grant } => {
                    let command =
                        Command::Grant { principal: everyone[*principal].clone(), grant: Grant::of(GRANTS[*grant]) };
                    let reply = apply(&mut state, &mut log, root(), command);
                    prop_assert!(matches!(reply, Reply::Grants { .. }), "{:?}", reply);
                    bound.insert((*principal, GRANTS[*grant]));
                }
                Step::Revoke { principal, grant } => {
                    let command = Command::Revoke { principal: everyone[*principal].clone(), name: GRANTS[*grant] };
                    let reply = apply(&mut state, &mut log, root(), command);
                    prop_assert!(matches!(reply, Reply::Grants { .. }), "{:?}", reply);
                    bound.remove(&(*principal, GRANTS[*grant]));
                }
                Step::Act { principal, token, act } => {
                    let who = &everyone[*principal];
                    let scope: Option<BTreeSet<GrantName>> =
                        token.as_ref().map(|names| names.iter().map(|index| GRANTS[*index]).collect());
                    let usable = |name: GrantName| {
                        bound.contains(&(*principal, name)) && scope.as_ref().is_none_or(|scope| scope.contains(&name))
                    };
                    let command = command(act, who, &leases);
                    let (first, second) = needs(act, &command, who);
                    let lease_holder = match &command {
                        Command::Heartbeat { lease_id, .. } | Command::Report { lease_id, .. } => {
                            holders.get(lease_id).copied()
                        }
                        _ => None,
                    };
                    let allowed = usable(first)
                        && second.is_none_or(usable)
                        && lease_holder.is_none_or(|holder| holder == *principal);
                    // Acting on a record: an owner, or an act-for holder; a
                    // record the caller may not even read is "not found".
                    let target = match act {
                        Act::Consume { approval } | Act::CancelApproval { approval } => {
                            approvals.get(&format!("a{approval}")).map(|owners| (owners, false))
                        }
                        Act::CancelExecution { execution } => {
                            executions.get(&format!("e{execution}")).map(|owners| (owners, true))
                        }
                        _ => None,
                    };
                    let (mut denied, mut hidden) = (!allowed, false);
                    if let Some((owners, is_execution)) = target.filter(|_| allowed) {
                        if !owners.include(*principal) && !usable(GrantName::ActFor) {
                            let caller_view = View { bound: &bound, principal: *principal, scope: scope.as_ref() };
                            let readable = if is_execution {
                                caller_view.reads_execution(owners, &format!("e{}", act_index(act)), &holders, &leased)
                            } else {
                                caller_view.reads_approval(owners)
                            };
                            (denied, hidden) = (readable, !readable);
                        }
                    }
                    let cursor = state.next_cursor();
                    let reply = apply(&mut state, &mut log, Caller { principal: who.clone(), scope }, command.clone());
                    let code = reply.error().map(|error| error.code);
                    prop_assert_eq!(
                        code == Some(ErrorCode::PermissionDenied),
                        denied,
                        "{:?} by {} answered {:?}",
                        act,
                        who,
                        reply
                    );
                    if hidden {
                        prop_assert_eq!(code, Some(ErrorCode::NotFound), "{:?} by {} answered {:?}", act, who, reply);
                    }
                    if denied || hidden {
                        // The grid test checks a refusal leaves the state hash alone; here the
                        // clock moves with every step, so check that it recorded nothing.
                        prop_assert_eq!(state.next_cursor(), cursor, "a refusal records nothing");
                    }
                    for event in state.events_after(cursor - 1, 1_000) {
                        prop_assert_eq!(event.principal.as_ref(), Some(who), "events carry the principal");
                    }
                    let subject_of = |actor: &Actor| everyone.iter().position(|p| p.is_actor(actor));
                    match (&reply, &command) {
                        (Reply::Tasks(tasks), _) => {
                            for task in tasks {
                                leases.push(task.lease.lease_id);
                                holders.insert(task.lease.lease_id, *principal);
                                leased.insert(task.lease.lease_id, task.lease.execution_id.clone());
                            }
                        }
                        (Reply::Approval { .. }, Command::CreateApproval(request)) => {
                            let owners = Owners { creator: *principal, subject: subject_of(&request.actor) };
                            approvals.entry(request.id.clone()).or_insert(owners);
                        }
                        (Reply::Execution { created: true, .. }, Command::Submit(submit)) => {
                            let owners = Owners { creator: *principal, subject: subject_of(&submit.actor) };
                            executions.insert(submit.execution_id.clone(), owners);
                        }
                        _ => {}
                    }
                }
            }
            // Every principal sees exactly what the model says it may read.
            for (index, principal) in everyone.iter().enumerate() {
                let caller = Caller::of(principal.clone());
                let view = View { bound: &bound, principal: index, scope: None };
                for (id, owners) in &approvals {
                    let approval = state.approval(id).expect("the model's approvals are retained");
                    prop_assert_eq!(
                        state.may_read_approval(Some(&caller), &approval),
                        view.reads_approval(owners),
                        "{} reading approval {}",
                        principal,
                        id
                    );
                }
                for (id, owners) in &executions {
                    let execution = state.execution(id).expect("the model's executions are retained");
                    prop_assert_eq!(
                        state.may_read_execution(Some(&caller), &execution),
                        view.reads_execution(owners, id, &holders, &leased),
                        "{} reading execution {}",
                        principal,
                        id
                    );
                }
            }
        }
        let mut replayed = State::new();
        for envelope in &log {
            replayed.apply(envelope);
        }
        prop_assert_eq!(replayed.state_hash(), state.state_hash());
        let restored = State::restore(&state.snapshot()).expect("the snapshot restores");
        prop_assert_eq!(restored.bindings(), state.bindings());
        Ok(())
    }

    use proptest::test_runner::TestCaseError;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, rng_algorithm: RngAlgorithm::XorShift, ..ProptestConfig::default() })]

        /// Every command is refused exactly when its principal lacks (or its
        /// token leaves out) a grant it needs at that point of the log,
        /// quotes another principal's lease, or acts on a record it does not
        /// own (`PERMISSION_DENIED` when it may read the record, `NOT_FOUND`
        /// when it may not); every principal reads exactly the records the
        /// ownership rules give it; a refusal records nothing; every event a
        /// command records carries its principal; replay and a snapshot agree.
        #[test]
        fn authorization_and_ownership_follow_the_model_at_every_log_position(steps in proptest::collection::vec(step(), 1..60)) {
            check(&steps)?;
        }
    }
}

#[test]
fn list_executions_shows_each_caller_only_the_executions_in_its_view() {
    let (mut script, w1, _w2) = one_queued_execution();
    let other = holder(&mut script, service("other"), &[GrantName::Submitter]);
    execution_of(script.apply_by(&other, submit_by("e2", "cap", other.principal.as_actor())));
    let auditor = holder(&mut script, user("audit"), &[GrantName::Auditor]);
    let app = Caller::of(service("app"));
    let listed = |script: &Script, caller: &Caller| -> Vec<String> {
        let filter = gavel_core::ExecutionFilter::default();
        let page = script.state.list_executions(Some(caller), &filter, None, 10, gavel_core::ListOrder::NewestFirst);
        page.records.iter().map(|execution| execution.execution_id.clone()).collect()
    };
    assert_eq!(listed(&script, &app), ["e1"], "the owner sees its own");
    assert_eq!(listed(&script, &other), ["e2"], "another submitter sees only its own");
    assert_eq!(listed(&script, &auditor), ["e2", "e1"], "the auditor sees all, newest first");
    assert!(listed(&script, &w1).is_empty(), "a worker without a lease sees none");
    // The worker that takes the lease then sees that one execution.
    tasks_of(script.apply_by(&w1, poll_command("w1", "cap")));
    assert_eq!(listed(&script, &w1), ["e1"]);
}
