//! The lease hand-off (decision 0107): a command that creates an execution,
//! carrying a waiting poll, leases that execution's first attempt to the
//! poll's worker in the same apply, under the poll's own grant request id.
//! And a decision carrying the requester's waiting resume (decision 0108):
//! the resume runs in the decision's apply, under its own request id.

mod support;

use std::collections::BTreeSet;

use gavel_core::command::{Command, DecideThenResume, Handoff, Reply};
use gavel_core::ids::grant_request_id;
use gavel_core::{
    ApprovalStatus, Approvers, Caller, ErrorCode, ExecutionState, Factor, Grant, GrantName, PolicySpec, Principal,
    PrincipalKind, SideEffect, Task,
};
use support::*;

fn principal(kind: PrincipalKind, id: &str) -> Principal {
    Principal::new(kind, id).expect("a well-formed id")
}

fn root() -> Caller {
    Caller::of(principal(PrincipalKind::User, "root"))
}

/// A secured cluster's state: admin `user:root`, capabilities `cap` (no
/// approval) and `gated` (needs approval), submitter `service:app`,
/// approver `user:bob` and worker `worker:w1`.
struct Cluster {
    script: Script,
    app: Caller,
    bob: Caller,
    w1: Caller,
}

fn cluster() -> Cluster {
    let mut script = Script::new();
    let reply = script.apply_by(&Caller::of(Principal::node(1)), Command::BootstrapAdmin { admin: root().principal });
    assert!(matches!(reply, Reply::Grants { .. }), "bootstrap refused: {reply:?}");
    for spec in [capability("cap", SideEffect::Read), gated("gated", SideEffect::Write, 60_000)] {
        let reply = script.apply_by(&root(), Command::RegisterCapability(spec));
        assert!(matches!(reply, Reply::Capability(_)), "registration refused: {reply:?}");
    }
    let mut holder = |kind, id, name| {
        let principal = principal(kind, id);
        let reply = script.apply_by(&root(), Command::Grant { principal: principal.clone(), grant: Grant::of(name) });
        assert!(matches!(reply, Reply::Grants { .. }), "grant refused: {reply:?}");
        Caller::of(principal)
    };
    let app = holder(PrincipalKind::Service, "app", GrantName::Submitter);
    let bob = holder(PrincipalKind::User, "bob", GrantName::Approver);
    let w1 = holder(PrincipalKind::Worker, "w1", GrantName::Worker);
    Cluster { script, app, bob, w1 }
}

/// The waiting poll of worker `w1` on `queue`, as its long-poll proposes it.
fn poll_of(queue: &str) -> Command {
    Command::Poll { worker_id: "w1".to_string(), queues: vec![queue.to_string()], tasks_max: 1 }
}

/// `command` handing its work to `w1`'s poll `poll_request_id` (grant attempt 0).
fn handing_off(cluster: &Cluster, command: Command, poll_request_id: &str, queue: &str) -> Command {
    Command::Handoff(Box::new(Handoff {
        command,
        grant_request_id: grant_request_id(poll_request_id, 0),
        worker: Some(cluster.w1.clone()),
        worker_id: "w1".to_string(),
        queues: vec![queue.to_string()],
        tasks_max: 1,
        poll_deadline_ms: cluster.script.now_ms + 30_000,
    }))
}

/// Submits `gated` as execution `execution_id` and has bob approve it;
/// returns the resume that creates the execution.
fn approved_resume(cluster: &mut Cluster, execution_id: &str) -> Command {
    let (decide, resume) = pending_decision(cluster, execution_id, ApprovalStatus::Approved);
    let reply = cluster.script.apply_by(&cluster.bob, decide);
    assert!(matches!(reply, Reply::Approval { status: ApprovalStatus::Approved, .. }), "decision refused: {reply:?}");
    resume
}

fn replayed(cluster: &Cluster, poll_request_id: &str, queue: &str) -> Option<Vec<Task>> {
    cluster.script.state.replayed_grants_for(poll_request_id, Some(&cluster.w1), &poll_of(queue))
}

#[test]
fn a_resume_handed_to_a_waiting_poll_leases_its_execution_in_the_same_apply() {
    let mut cluster = cluster();
    let resume = approved_resume(&mut cluster, "e1");
    assert_eq!(cluster.script.state.queue_readied_by(&resume), Some("gated"));
    let cursor_before = cluster.script.state.next_cursor();
    cluster.script.advance(5);
    let command = handing_off(&cluster, resume, "poll-1", "gated");
    let (execution, created) = execution_of(cluster.script.apply_by_as("resume-1", &cluster.app, command));
    assert!(created);

    // The resumer's answer is the resume's; the execution is leased already.
    let stored = cluster.script.execution("e1");
    assert_eq!(stored.state, ExecutionState::Leased);
    let tasks = replayed(&cluster, "poll-1", "gated").expect("the poll's grant is remembered under its id");
    assert_eq!(tasks.len(), 1);
    let lease = &tasks[0].lease;
    assert_eq!((lease.execution_id.as_str(), lease.attempt, lease.worker_id.as_str()), ("e1", 1, "w1"));
    assert_eq!(lease.granted_at_ms, execution.submitted_at_ms, "granted at the creating command's time");
    assert_eq!(stored.lease.as_ref().map(|held| held.lease_id), Some(lease.lease_id));

    // One apply recorded both transitions: the consumption by the resumer,
    // then the start by the worker, each under its own principal.
    let events = cluster.script.state.events_after(cursor_before - 1, 100);
    let kinds: Vec<_> = events.iter().map(|event| event.kind.type_name()).collect();
    assert_eq!(kinds, ["approval.consumed", "capability.started"]);
    assert_eq!(events[0].principal.as_ref(), Some(&cluster.app.principal));
    assert_eq!(events[1].principal.as_ref(), Some(&cluster.w1.principal));
    assert_eq!(events[0].timestamp_ms, events[1].timestamp_ms);
}

#[test]
fn a_retried_poll_gets_the_handed_off_lease_again_and_nothing_new() {
    let mut cluster = cluster();
    let resume = approved_resume(&mut cluster, "e1");
    let command = handing_off(&cluster, resume.clone(), "poll-1", "gated");
    execution_of(cluster.script.apply_by_as("resume-1", &cluster.app, command));
    let handed = replayed(&cluster, "poll-1", "gated").expect("granted");

    // The waiting poll's own grant attempt 0, proposed after all (a leader
    // that did not see the outcome), is the same request: the same lease.
    let again = cluster.script.apply_by_as(&grant_request_id("poll-1", 0), &cluster.w1, poll_of("gated"));
    assert_eq!(again, Reply::Tasks(handed.clone()));
    assert_eq!(replayed(&cluster, "poll-1", "gated"), Some(handed.clone()));

    // The resumer's retry, with or without the hand-off, is its first answer
    // and hands nothing off again.
    let retry = handing_off(&cluster, resume.clone(), "poll-2", "gated");
    execution_of(cluster.script.apply_by_as("resume-1", &cluster.app, retry));
    let plain = cluster.script.apply_by_as("resume-1", &cluster.app, resume);
    assert!(matches!(plain, Reply::Execution { .. }), "the retry without the hand-off is the same request: {plain:?}");
    assert_eq!(replayed(&cluster, "poll-2", "gated"), None, "a replayed resume hands nothing off");
    assert_eq!(cluster.script.execution("e1").lease_ids.len(), 1, "one lease in all");
}

#[test]
fn a_hand_off_to_a_poll_that_has_gone_or_lost_its_grant_leaves_the_execution_queued() {
    let mut cluster = cluster();
    // The poll's deadline passed before the command's position in the log.
    let resume = approved_resume(&mut cluster, "e1");
    let Command::Handoff(mut handoff) = handing_off(&cluster, resume, "poll-1", "gated") else { unreachable!() };
    handoff.poll_deadline_ms = cluster.script.now_ms - 1;
    execution_of(cluster.script.apply_by_as("resume-1", &cluster.app, Command::Handoff(handoff)));
    assert_eq!(cluster.script.execution("e1").state, ExecutionState::Queued);
    assert_eq!(replayed(&cluster, "poll-1", "gated"), None);

    // The worker's grant was revoked between the claim and the apply.
    let resume = approved_resume(&mut cluster, "e2");
    let command = handing_off(&cluster, resume, "poll-2", "gated");
    let revoke = Command::Revoke { principal: cluster.w1.principal.clone(), name: GrantName::Worker };
    assert!(matches!(cluster.script.apply_by(&root(), revoke), Reply::Grants { .. }));
    execution_of(cluster.script.apply_by_as("resume-2", &cluster.app, command));
    assert_eq!(cluster.script.execution("e2").state, ExecutionState::Queued);
    assert!(cluster.script.state.has_ready_work(&["gated".to_string()], cluster.script.now_ms));
}

#[test]
fn without_a_waiting_poll_or_a_created_execution_nothing_is_handed_off() {
    let mut cluster = cluster();
    // No waiting poll: the execution is queued, as it always was.
    let resume = approved_resume(&mut cluster, "e1");
    execution_of(cluster.script.apply_by_as("resume-1", &cluster.app, resume));
    assert_eq!(cluster.script.execution("e1").state, ExecutionState::Queued);

    // A submit that only asks for approval creates no execution: the
    // poll's attempt id stays unused, so its later grants still replay.
    let mut submit = submission("e2", "gated", r#"{"n":2}"#);
    submit.actor = cluster.app.principal.as_actor();
    assert_eq!(cluster.script.state.queue_readied_by(&Command::Submit(submit.clone())), None);
    let command = handing_off(&cluster, Command::Submit(submit), "poll-1", "gated");
    let reply = cluster.script.apply_by_as("submit-2", &cluster.app, command);
    assert!(matches!(reply, Reply::ApprovalRequired { .. }), "{reply:?}");
    assert_eq!(replayed(&cluster, "poll-1", "gated"), None);
    assert_eq!(cluster.script.execution("e1").state, ExecutionState::Queued, "the hand-off took nothing else");

    // A submit that needs no approval is handed off too.
    let mut submit = submission("e3", "cap", r#"{"n":3}"#);
    submit.actor = cluster.app.principal.as_actor();
    assert_eq!(cluster.script.state.queue_readied_by(&Command::Submit(submit.clone())), Some("cap"));
    let command = handing_off(&cluster, Command::Submit(submit), "poll-3", "cap");
    execution_of(cluster.script.apply_by_as("submit-3", &cluster.app, command));
    assert_eq!(cluster.script.execution("e3").state, ExecutionState::Leased);
}

#[test]
fn a_hand_off_is_never_taken_from_a_client_nor_nested() {
    let mut cluster = cluster();
    let resume = approved_resume(&mut cluster, "e1");
    let inner = handing_off(&cluster, resume, "poll-1", "gated");
    let nested = handing_off(&cluster, inner.clone(), "poll-2", "gated");
    let reply = cluster.script.apply_by_as("resume-1", &cluster.app, nested);
    refused(reply, ErrorCode::InvalidArgument);
    assert!(gavel_core::precheck::check(&inner).is_err(), "the edge's judge refuses a hand-off");
    assert_eq!(cluster.script.approval("apr_e1").status, gavel_core::model::StoredApprovalStatus::Approved);
}

#[test]
fn replicas_applying_the_same_hand_offs_agree_on_the_state_hash() {
    let mut first = cluster();
    let mut second = cluster();
    for cluster in [&mut first, &mut second] {
        let resume = approved_resume(cluster, "e1");
        let command = handing_off(cluster, resume, "poll-1", "gated");
        execution_of(cluster.script.apply_by_as("resume-1", &cluster.app.clone(), command));
    }
    assert_eq!(first.script.state.state_hash(), second.script.state.state_hash());
    let restored = gavel_core::State::restore(&first.script.state.snapshot()).expect("a snapshot restores");
    assert_eq!(restored.state_hash(), first.script.state.state_hash());
}

/// Submits `gated` as execution `execution_id`, still pending; returns bob's
/// decision and the requester's resume of it.
fn pending_decision(cluster: &mut Cluster, execution_id: &str, status: ApprovalStatus) -> (Command, Command) {
    let mut submit = submission(execution_id, "gated", r#"{"n":1}"#);
    submit.actor = cluster.app.principal.as_actor();
    let reply = cluster.script.apply_by(&cluster.app, Command::Submit(submit));
    let Reply::ApprovalRequired { approval, .. } = reply else { panic!("expected approval-required: {reply:?}") };
    let decide = Command::DecideApproval {
        approval_id: approval.id.clone(),
        status,
        approver: cluster.bob.principal.as_actor(),
        comment: None,
        caller_now_ms: None,
        terms_hash: None,
    };
    (decide, Command::Resume { approval_id: approval.id, execution_id: execution_id.to_string(), input_json: None })
}

fn carrying(cluster: &Cluster, decide: Command, resume: Command, resume_request_id: &str) -> Command {
    Command::DecideThenResume(Box::new(DecideThenResume {
        decide,
        resume,
        resume_request_id: resume_request_id.to_string(),
        resumer: Some(cluster.app.clone()),
    }))
}

#[test]
fn a_decision_carrying_the_waiting_resume_creates_and_leases_the_execution_in_its_apply() {
    let mut cluster = cluster();
    let (decide, resume) = pending_decision(&mut cluster, "e1", ApprovalStatus::Approved);
    let chained = carrying(&cluster, decide.clone(), resume.clone(), "resume-1");
    assert_eq!(cluster.script.state.queue_readied_by(&chained), Some("gated"), "the leader guesses it approves");
    let cursor_before = cluster.script.state.next_cursor();
    let command = handing_off(&cluster, chained, "poll-1", "gated");
    let reply = cluster.script.apply_by_as("decide-1", &cluster.bob, command);
    // The approver's answer is the decision's: approved (then spent).
    assert!(matches!(reply, Reply::Approval { .. }), "the decision's own answer: {reply:?}");

    // The resume's answer is remembered under its own id, for its caller only.
    let answer = cluster.script.state.replay_for("resume-1", Some(&cluster.app), &resume);
    let Some(Reply::Execution { execution, created: true }) = answer else { panic!("resume not run: {answer:?}") };
    assert_eq!(execution.execution_id, "e1");
    assert_eq!(cluster.script.state.replay_for("resume-1", Some(&cluster.bob), &resume), None);
    assert_eq!(cluster.script.execution("e1").state, ExecutionState::Leased);
    assert_eq!(replayed(&cluster, "poll-1", "gated").map(|tasks| tasks.len()), Some(1));

    // One apply: the decision by bob, the consumption by the requester, the
    // start by the worker, each under its own principal.
    let events = cluster.script.state.events_after(cursor_before - 1, 100);
    let kinds: Vec<_> = events.iter().map(|event| event.kind.type_name()).collect();
    assert_eq!(kinds, ["capability.approved", "approval.consumed", "capability.started"]);
    let principals: Vec<_> = events.iter().map(|event| event.principal.clone()).collect();
    let expected = [&cluster.bob, &cluster.app, &cluster.w1].map(|caller| Some(caller.principal.clone()));
    assert_eq!(principals, expected);

    // Retries: the decision alone replays its answer and runs nothing; the
    // resume alone replays the execution; one lease in all.
    let again = cluster.script.apply_by_as("decide-1", &cluster.bob, decide);
    assert!(matches!(again, Reply::Approval { .. }), "{again:?}");
    let again = cluster.script.apply_by_as("resume-1", &cluster.app, resume);
    assert!(matches!(again, Reply::Execution { .. }), "{again:?}");
    assert_eq!(cluster.script.execution("e1").lease_ids.len(), 1);
}

#[test]
fn a_rejection_answers_the_waiting_resume_with_its_refusal_and_creates_nothing() {
    let mut cluster = cluster();
    let (decide, resume) = pending_decision(&mut cluster, "e1", ApprovalStatus::Rejected);
    let command = handing_off(&cluster, carrying(&cluster, decide, resume.clone(), "resume-1"), "poll-1", "gated");
    let reply = cluster.script.apply_by_as("decide-1", &cluster.bob, command);
    assert!(matches!(reply, Reply::Approval { status: ApprovalStatus::Rejected, .. }), "{reply:?}");
    let answer = cluster.script.state.replay_for("resume-1", Some(&cluster.app), &resume);
    let Some(Reply::Error(error)) = answer else { panic!("the resume's refusal is remembered: {answer:?}") };
    assert_eq!(error.code, ErrorCode::ApprovalRejected);
    assert_eq!(replayed(&cluster, "poll-1", "gated"), None, "nothing to hand off");
    assert!(cluster.script.state.execution("e1").is_none());
}

#[test]
fn a_refused_decision_runs_no_resume_and_a_client_may_not_send_a_chain() {
    let mut cluster = cluster();
    // The requester may not decide its own request: the decision is refused
    // and the resume it carried never runs (its id stays unused).
    let (decide, resume) = pending_decision(&mut cluster, "e1", ApprovalStatus::Approved);
    let Command::DecideApproval { approval_id, status, comment, caller_now_ms, terms_hash, .. } = decide.clone() else {
        unreachable!()
    };
    let own = Command::DecideApproval {
        approval_id,
        status,
        approver: cluster.app.principal.as_actor(),
        comment,
        caller_now_ms,
        terms_hash,
    };
    let reply =
        cluster.script.apply_by_as("decide-0", &cluster.app, carrying(&cluster, own, resume.clone(), "resume-1"));
    assert!(matches!(reply, Reply::Error(_)), "self-decision refused: {reply:?}");
    assert_eq!(cluster.script.state.replay_for("resume-1", Some(&cluster.app), &resume), None);

    // Sent by a client, or nested, a chain is refused before anything runs.
    let chained = carrying(&cluster, decide.clone(), resume.clone(), "resume-1");
    assert!(gavel_core::precheck::check(&chained).is_err(), "the edge's judge refuses a chain");
    let nested = carrying(&cluster, chained, resume, "resume-2");
    refused(cluster.script.apply_by_as("decide-2", &cluster.bob, nested), ErrorCode::InvalidArgument);
    assert_eq!(cluster.script.approval("apr_e1").status, gavel_core::model::StoredApprovalStatus::Pending);
}

#[test]
fn a_vote_that_leaves_a_quorum_open_runs_no_resume_and_the_closing_vote_carries_it() {
    // Decision 0108: a `CastVote` carrying the waiting resume runs it only
    // when that vote closes the approval; the leader re-arms the resume,
    // and the vote that closes the quorum carries it again.
    let mut cluster = cluster();
    let carol = principal(PrincipalKind::User, "carol");
    let reply = cluster
        .script
        .apply_by(&root(), Command::Grant { principal: carol.clone(), grant: Grant::of(GrantName::Approver) });
    assert!(matches!(reply, Reply::Grants { .. }), "grant refused: {reply:?}");
    let carol = Caller::of(carol);
    let two_of = Factor {
        name: "pair".to_string(),
        k: 2,
        approvers: Approvers::Group(BTreeSet::from([cluster.bob.principal.clone(), carol.principal.clone()])),
    };
    let policy = PolicySpec {
        name: "two".to_string(),
        approval_types: BTreeSet::new(),
        capability_ids: BTreeSet::from(["gated".to_string()]),
        risks: BTreeSet::new(),
        side_effects: BTreeSet::new(),
        factors: vec![two_of],
        deny_threshold: None,
        non_retroactive: false,
        forbid_standing: false,
    };
    let reply = cluster.script.apply_by(&root(), Command::SetPolicy(policy));
    assert!(matches!(reply, Reply::Policy { .. }), "policy refused: {reply:?}");

    let (decide, resume) = pending_decision(&mut cluster, "e1", ApprovalStatus::Approved);
    let Command::DecideApproval { approval_id, .. } = decide else { unreachable!() };
    let vote = |cluster: &Cluster, voter: &Caller| Command::CastVote {
        terms_hash: None,
        approval_id: approval_id.clone(),
        approve: true,
        input_hash: cluster.script.approval(&approval_id).input_hash,
        approver: voter.principal.as_actor(),
        comment: None,
    };

    // Bob's vote carries the resume but leaves the quorum open: it is
    // recorded, and the resume runs nothing (its request id stays unused).
    let first = carrying(&cluster, vote(&cluster, &cluster.bob), resume.clone(), "resume-1");
    let reply = cluster.script.apply_by_as("vote-1", &cluster.bob, first);
    assert!(matches!(reply, Reply::Approval { status: ApprovalStatus::Pending, .. }), "{reply:?}");
    assert_eq!(cluster.script.state.replay_for("resume-1", Some(&cluster.app), &resume), None);
    assert!(cluster.script.state.execution("e1").is_none());

    // Carol's vote closes it and carries the same resume: it runs now, once.
    let second = carrying(&cluster, vote(&cluster, &carol), resume.clone(), "resume-1");
    let reply = cluster.script.apply_by_as("vote-2", &carol, second);
    assert!(matches!(reply, Reply::Approval { status: ApprovalStatus::Approved, .. }), "{reply:?}");
    let answer = cluster.script.state.replay_for("resume-1", Some(&cluster.app), &resume);
    assert!(matches!(answer, Some(Reply::Execution { created: true, .. })), "resume not run: {answer:?}");
    assert_eq!(cluster.script.execution("e1").state, ExecutionState::Queued);
}

/// The records an apply's events name, as a reader waiting on one record
/// is woken by them (decision 0109): the same ids a read of those events
/// gives, kept until the next apply, and none for an apply that recorded
/// nothing about an execution or an approval.
#[test]
fn an_apply_names_the_records_its_events_name_until_the_next_apply() {
    use gavel_core::RecordId;
    let mut cluster = cluster();
    let named_by_events = |cluster: &Cluster, cursor_before: u64| -> Vec<RecordId> {
        let events = cluster.script.state.events_after(cursor_before - 1, 100);
        events
            .into_iter()
            .flat_map(|event| {
                event.execution_id.map(RecordId::Execution).into_iter().chain(event.approval_id.map(RecordId::Approval))
            })
            .collect()
    };

    // A submit that needs approval names its approval (and its execution id).
    let cursor_before = cluster.script.state.next_cursor();
    let (decide, resume) = pending_decision(&mut cluster, "e1", ApprovalStatus::Approved);
    let Command::DecideApproval { approval_id, .. } = &decide else { unreachable!() };
    let approval_id = approval_id.clone();
    let named = cluster.script.state.last_apply_named().to_vec();
    assert!(named.contains(&RecordId::Approval(approval_id.clone())), "{named:?}");
    assert_eq!(named, named_by_events(&cluster, cursor_before));

    // A decision carrying the resume and a hand-off: the approval, then the
    // execution it created and leased, in the order of the events.
    let cursor_before = cluster.script.state.next_cursor();
    let chained = carrying(&cluster, decide.clone(), resume, "resume-1");
    let command = handing_off(&cluster, chained, "poll-1", "gated");
    cluster.script.apply_by_as("decide-1", &cluster.bob, command);
    let named = cluster.script.state.last_apply_named().to_vec();
    assert!(named.contains(&RecordId::Approval(approval_id.clone())), "{named:?}");
    assert!(named.contains(&RecordId::Execution("e1".to_string())), "{named:?}");
    assert_eq!(named, named_by_events(&cluster, cursor_before));

    // A decision refused (already decided, under a new request id) records
    // nothing, so names nothing; nor does a capability's registration.
    let refused = cluster.script.apply_by_as("decide-2", &cluster.bob, decide);
    assert!(matches!(refused, Reply::Error(_)), "{refused:?}");
    assert_eq!(cluster.script.state.last_apply_named(), &[] as &[RecordId]);
    cluster.script.apply_by(&root(), Command::RegisterCapability(capability("other", SideEffect::Read)));
    assert_eq!(cluster.script.state.last_apply_named(), &[] as &[RecordId]);
}
