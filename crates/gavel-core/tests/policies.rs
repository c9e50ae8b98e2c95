//! Approval policies in the pure core (issue #25): k of n distinct
//! approvers, AND across factors, the deterministic vote assignment, the
//! requester never counting, votes closed after the decision, withdrawal,
//! a revoked approver's votes removed, and policy changes voiding what they
//! no longer allow. A property test at the end drives random policies,
//! votes, withdrawals, grant changes and policy changes against a model.

mod support;

use std::collections::{BTreeMap, BTreeSet};

use gavel_core::command::{Command, Reply};
use gavel_core::policies::assign_votes;
use gavel_core::{
    Approval, ApprovalStatus, Approvers, Caller, CapabilitySpec, ErrorCode, EventKind, Factor, Grant, GrantName,
    PolicySpec, Principal, PrincipalKind, Risk, SideEffect, State,
};
use proptest::prelude::*;
use proptest::test_runner::RngAlgorithm;
use support::*;

// ---------------------------------------------------------------- helpers

fn user(id: &str) -> Principal {
    Principal::new(PrincipalKind::User, id).expect("a well-formed id")
}

fn service(id: &str) -> Principal {
    Principal::new(PrincipalKind::Service, id).expect("a well-formed id")
}

fn root() -> Caller {
    Caller::of(user("root"))
}

fn app() -> Caller {
    Caller::of(service("app"))
}

fn grant(script: &mut Script, principal: &Principal, grant: Grant) {
    let reply = script.apply_by(&root(), Command::Grant { principal: principal.clone(), grant });
    assert!(matches!(reply, Reply::Grants { .. }), "grant refused: {reply:?}");
}

/// A secured script: admin `user:root`; `service:app` with submitter and
/// act-for; capability `refund` (needs an approval of type `refund`).
fn secured() -> Script {
    let mut script = Script::new();
    let node = Caller::of(Principal::node(1));
    assert!(matches!(script.apply_by(&node, Command::BootstrapAdmin { admin: user("root") }), Reply::Grants { .. }));
    let mut refund = gated("refund", SideEffect::Write, 3_600_000);
    refund.approval.as_mut().expect("gated").approval_type = Some("refund".to_string());
    assert!(matches!(script.apply_by(&root(), Command::RegisterCapability(refund)), Reply::Capability(_)));
    grant(&mut script, &service("app"), Grant::of(GrantName::Submitter));
    grant(&mut script, &service("app"), Grant::of(GrantName::ActFor));
    script
}

/// An approver `user:id` scoped to `scopes`.
fn approver(script: &mut Script, id: &str, scopes: &[&str]) -> Caller {
    grant(script, &user(id), Grant::scoped(GrantName::Approver, scopes.iter().copied()));
    Caller::of(user(id))
}

fn scope_factor(name: &str, k: u32) -> Factor {
    Factor { name: name.to_string(), k, approvers: Approvers::Scope(name.to_string()) }
}

fn group_factor(name: &str, k: u32, members: &[&str]) -> Factor {
    Factor { name: name.to_string(), k, approvers: Approvers::Group(members.iter().map(|id| user(id)).collect()) }
}

fn policy(name: &str, types: &[&str], factors: Vec<Factor>) -> PolicySpec {
    PolicySpec {
        name: name.to_string(),
        approval_types: types.iter().map(|t| t.to_string()).collect(),
        capability_ids: BTreeSet::new(),
        risks: BTreeSet::new(),
        side_effects: BTreeSet::new(),
        factors,
        deny_threshold: None,
        non_retroactive: false,
        forbid_standing: false,
    }
}

fn set_policy(script: &mut Script, spec: PolicySpec) -> (gavel_core::Policy, u32) {
    match script.apply_by(&root(), Command::SetPolicy(spec)) {
        Reply::Policy { policy, voided } => (policy, voided),
        other => panic!("policy refused: {other:?}"),
    }
}

/// Creates approval `id` of type `kind` by `service:app`, for actor `actor`.
fn create(script: &mut Script, id: &str, kind: &str, actor: &str) -> Approval {
    let mut request = approval_request(id);
    request.types = vec![kind.to_string()];
    request.actor = user(actor).as_actor();
    approval_of(script.apply_by(&app(), Command::CreateApproval(request))).0
}

fn vote_command(script: &Script, caller: &Caller, id: &str, approve: bool) -> Command {
    Command::CastVote {
        terms_hash: None,
        approval_id: id.to_string(),
        approve,
        input_hash: script.approval(id).input_hash,
        approver: caller.principal.as_actor(),
        comment: None,
    }
}

fn vote(script: &mut Script, caller: &Caller, id: &str, approve: bool) -> Reply {
    let command = vote_command(script, caller, id, approve);
    script.apply_by(caller, command)
}

fn status(script: &Script, id: &str) -> ApprovalStatus {
    script.approval(id).status_at(script.now_ms)
}

fn progress(script: &Script, id: &str) -> Vec<u32> {
    script.approval(id).quorum.expect("governed").counted()
}

// ---------------------------------------------------------------- scenarios

#[test]
fn finance_and_legal_needs_one_of_each_and_the_completing_vote_approves_in_the_same_command() {
    let mut script = secured();
    set_policy(&mut script, policy("refunds", &["refund"], vec![scope_factor("finance", 1), scope_factor("legal", 1)]));
    let (f1, f2) = (approver(&mut script, "f1", &["finance"]), approver(&mut script, "f2", &["finance"]));
    let legal = approver(&mut script, "l1", &["legal"]);
    let created = create(&mut script, "a1", "refund", "alice");
    let quorum = created.quorum.expect("the policy governs it");
    assert_eq!((quorum.policy.as_str(), quorum.policy_version), ("refunds", 1));

    let (_, after) = approval_of(vote(&mut script, &f1, "a1", true));
    assert_eq!(after, ApprovalStatus::Pending);
    let (_, after) = approval_of(vote(&mut script, &f2, "a1", true));
    assert_eq!(after, ApprovalStatus::Pending, "two finance votes do not make a legal one");
    assert_eq!(progress(&script, "a1"), vec![1, 0]);
    let cursor = script.state.next_cursor();
    let (approval, after) = approval_of(vote(&mut script, &legal, "a1", true));
    assert_eq!(after, ApprovalStatus::Approved);
    assert_eq!(approval.decision.expect("decided").approver.id, "l1");
    let kinds: Vec<&str> = script.state.events_after(cursor - 1, 10).iter().map(|e| e.kind.type_name()).collect();
    assert_eq!(kinds, ["approval.vote_cast", "capability.approved"], "one command: the vote and the approval");
    // Votes are closed once decided.
    let late = approver(&mut script, "l2", &["legal"]);
    refused(vote(&mut script, &late, "a1", true), ErrorCode::ApprovalDecided);
}

#[test]
fn the_assignment_moves_an_earlier_voter_to_meet_both_factors() {
    let mut script = secured();
    set_policy(&mut script, policy("refunds", &["refund"], vec![scope_factor("finance", 1), scope_factor("legal", 1)]));
    let both = approver(&mut script, "both", &["finance", "legal"]);
    let finance = approver(&mut script, "f1", &["finance"]);
    create(&mut script, "a1", "refund", "alice");
    approval_of(vote(&mut script, &both, "a1", true));
    assert_eq!(script.approval("a1").quorum.expect("governed").votes[0].factor, Some(0), "first factor first");
    let (approval, after) = approval_of(vote(&mut script, &finance, "a1", true));
    assert_eq!(after, ApprovalStatus::Approved, "both moves to legal, f1 takes finance");
    let votes = approval.quorum.expect("governed").votes;
    assert_eq!(votes.iter().map(|vote| vote.factor).collect::<Vec<_>>(), [Some(1), Some(0)]);
}

#[test]
fn one_principal_counts_once_even_when_eligible_for_every_factor() {
    let mut script = secured();
    set_policy(&mut script, policy("refunds", &["refund"], vec![scope_factor("finance", 1), scope_factor("legal", 1)]));
    let both = approver(&mut script, "both", &["finance", "legal"]);
    create(&mut script, "a1", "refund", "alice");
    approval_of(vote(&mut script, &both, "a1", true));
    assert_eq!(status(&script, "a1"), ApprovalStatus::Pending);
    refused(vote(&mut script, &both, "a1", true), ErrorCode::VoteDuplicate);
    // A decide is a vote too, and refused the same way.
    let decide = Command::DecideApproval {
        terms_hash: None,
        approval_id: "a1".to_string(),
        status: ApprovalStatus::Approved,
        approver: both.principal.as_actor(),
        comment: None,
        caller_now_ms: None,
    };
    refused(script.apply_by(&both, decide), ErrorCode::VoteDuplicate);
}

#[test]
fn two_of_the_on_call_group_and_the_requester_never_counts_without_the_self_approval_grant() {
    let mut script = secured();
    set_policy(&mut script, policy("deploys", &["deploy"], vec![group_factor("on-call", 2, &["oc1", "oc2", "oc3"])]));
    let oc1 = approver(&mut script, "oc1", &[]);
    let oc2 = approver(&mut script, "oc2", &[]);
    let outsider = approver(&mut script, "outsider", &[]);
    create(&mut script, "d1", "deploy", "oc1");
    refused(vote(&mut script, &oc1, "d1", true), ErrorCode::ApprovalSelfApproval);
    assert!(script.approval("d1").quorum.expect("governed").votes.is_empty(), "a refused vote is not recorded");
    // The app that requested it for oc1 is not eligible either way.
    refused(vote(&mut script, &outsider, "d1", true), ErrorCode::PermissionDenied);
    approval_of(vote(&mut script, &oc2, "d1", true));
    assert_eq!(status(&script, "d1"), ApprovalStatus::Pending);
    // With the self-approval grant the requester's vote counts, and says so.
    grant(&mut script, &user("oc1"), Grant::of(GrantName::SelfApproval));
    let (approval, after) = approval_of(vote(&mut script, &oc1, "d1", true));
    assert_eq!(after, ApprovalStatus::Approved);
    let votes = approval.quorum.expect("governed").votes;
    assert_eq!(votes.iter().map(|vote| vote.self_approval).collect::<Vec<_>>(), [false, true]);
    let cast: Vec<bool> = script
        .events()
        .iter()
        .filter_map(|event| match event.kind {
            EventKind::VoteCast { self_approval, .. } => Some(self_approval),
            _ => None,
        })
        .collect();
    assert_eq!(cast, [false, true], "the audit records the self-approval");
    // And the approval resumes: its decision is the self-approved vote.
    let reply = script.apply_by(&app(), consume_command("d1", "e1"));
    assert_eq!(approval_of(reply).1, ApprovalStatus::Consumed);
}

#[test]
fn a_vote_must_be_bound_to_the_approvals_input_hash_and_be_the_voters_own() {
    let mut script = secured();
    set_policy(&mut script, policy("refunds", &["refund"], vec![scope_factor("finance", 1)]));
    let finance = approver(&mut script, "f1", &["finance"]);
    create(&mut script, "a1", "refund", "alice");
    let mut command = vote_command(&script, &finance, "a1", true);
    if let Command::CastVote { input_hash, .. } = &mut command {
        *input_hash = "0".repeat(64);
    }
    refused(script.apply_by(&finance, command), ErrorCode::ApprovalInputMismatch);
    let mut command = vote_command(&script, &finance, "a1", true);
    if let Command::CastVote { approver, .. } = &mut command {
        *approver = user("someone-else").as_actor();
    }
    refused(script.apply_by(&finance, command), ErrorCode::PermissionDenied);
    let mut command = vote_command(&script, &finance, "a1", true);
    if let Command::CastVote { input_hash, .. } = &mut command {
        *input_hash = "not a hash".to_string();
    }
    refused(script.apply_by(&finance, command), ErrorCode::InvalidArgument);
}

#[test]
fn a_withdrawn_vote_stops_counting_and_only_a_pending_approval_takes_withdrawals() {
    let mut script = secured();
    set_policy(&mut script, policy("refunds", &["refund"], vec![scope_factor("finance", 2)]));
    let (f1, f2) = (approver(&mut script, "f1", &["finance"]), approver(&mut script, "f2", &["finance"]));
    create(&mut script, "a1", "refund", "alice");
    approval_of(vote(&mut script, &f1, "a1", true));
    assert_eq!(progress(&script, "a1"), vec![1]);
    let withdraw = |caller: &Caller| Command::WithdrawVote {
        approval_id: "a1".to_string(),
        approver: caller.principal.as_actor(),
    };
    approval_of(script.apply_by(&f1, withdraw(&f1)));
    assert_eq!(progress(&script, "a1"), vec![0]);
    refused(script.apply_by(&f1, withdraw(&f1)), ErrorCode::NotFound);
    approval_of(vote(&mut script, &f1, "a1", true));
    approval_of(vote(&mut script, &f2, "a1", true));
    assert_eq!(status(&script, "a1"), ApprovalStatus::Approved);
    refused(script.apply_by(&f1, withdraw(&f1)), ErrorCode::ApprovalDecided);
}

#[test]
fn denials_reject_at_the_deny_threshold() {
    let mut script = secured();
    let mut spec = policy("refunds", &["refund"], vec![scope_factor("finance", 3)]);
    spec.deny_threshold = Some(2);
    set_policy(&mut script, spec);
    let (f1, f2) = (approver(&mut script, "f1", &["finance"]), approver(&mut script, "f2", &["finance"]));
    create(&mut script, "a1", "refund", "alice");
    approval_of(vote(&mut script, &f1, "a1", false));
    assert_eq!(status(&script, "a1"), ApprovalStatus::Pending, "one denial of two");
    let (approval, after) = approval_of(vote(&mut script, &f2, "a1", false));
    assert_eq!(after, ApprovalStatus::Rejected);
    assert_eq!(approval.decision.expect("decided").approver.id, "f2");
}

#[test]
fn revoking_an_approvers_grant_removes_its_pending_votes() {
    let mut script = secured();
    set_policy(&mut script, policy("refunds", &["refund"], vec![scope_factor("finance", 2)]));
    let (f1, f2) = (approver(&mut script, "f1", &["finance"]), approver(&mut script, "f2", &["finance"]));
    create(&mut script, "a1", "refund", "alice");
    approval_of(vote(&mut script, &f1, "a1", true));
    let revoke = Command::Revoke { principal: user("f1"), name: GrantName::Approver };
    assert!(matches!(script.apply_by(&root(), revoke), Reply::Grants { .. }));
    assert!(script.approval("a1").quorum.expect("governed").votes.is_empty());
    assert!(script.events().iter().any(|event| event.kind == EventKind::VoteRemoved { voter: user("f1") }));
    approval_of(vote(&mut script, &f2, "a1", true));
    assert_eq!(status(&script, "a1"), ApprovalStatus::Pending, "the removed vote no longer counts");
    // A third finance approver completes it: the quorum is two live votes.
    let f3 = approver(&mut script, "f3", &["finance", "legal"]);
    approval_of(vote(&mut script, &f3, "a1", true));
    assert_eq!(status(&script, "a1"), ApprovalStatus::Approved);
}

#[test]
fn a_policy_change_voids_pending_and_approved_unconsumed_approvals_unless_non_retroactive() {
    let mut script = secured();
    set_policy(&mut script, policy("refunds", &["refund"], vec![scope_factor("finance", 1)]));
    let f1 = approver(&mut script, "f1", &["finance"]);
    create(&mut script, "pending", "refund", "alice");
    create(&mut script, "approved", "refund", "alice");
    create(&mut script, "consumed", "refund", "alice");
    create(&mut script, "other-type", "misc", "alice");
    approval_of(vote(&mut script, &f1, "approved", true));
    approval_of(vote(&mut script, &f1, "consumed", true));
    approval_of(script.apply_by(&app(), consume_command("consumed", "e1")));

    let mut change = policy("refunds", &["refund"], vec![scope_factor("finance", 2)]);
    change.non_retroactive = true;
    let (policy_v2, voided) = set_policy(&mut script, change);
    assert_eq!((policy_v2.version, voided), (2, 1), "non-retroactive: only the pending one");
    assert_eq!(status(&script, "pending"), ApprovalStatus::Voided);
    assert_eq!(status(&script, "approved"), ApprovalStatus::Approved);
    assert_eq!(status(&script, "consumed"), ApprovalStatus::Consumed);
    assert_eq!(status(&script, "other-type"), ApprovalStatus::Pending, "an ungoverned approval is untouched");
    let new = create(&mut script, "new", "refund", "alice");
    assert_eq!(new.quorum.expect("governed").policy_version, 2);

    let (_, voided) = set_policy(&mut script, policy("refunds", &["refund"], vec![scope_factor("finance", 1)]));
    assert_eq!(voided, 2, "retroactive: the approved one of v1 and the pending one of v2");
    assert_eq!(status(&script, "approved"), ApprovalStatus::Voided);
    assert_eq!(status(&script, "new"), ApprovalStatus::Voided);
    refused(script.apply_by(&app(), consume_command("approved", "e2")), ErrorCode::FailedPrecondition);
    refused(vote(&mut script, &f1, "new", true), ErrorCode::ApprovalDecided);
    let voided_events = script.events().iter().filter(|event| event.kind.type_name() == "approval.voided").count();
    assert_eq!(voided_events, 3);
}

#[test]
fn a_new_policy_voids_the_open_approvals_it_now_governs_and_a_deletion_voids_its_own() {
    let mut script = secured();
    create(&mut script, "before", "refund", "alice");
    let (_, voided) = set_policy(&mut script, policy("refunds", &["refund"], vec![scope_factor("finance", 1)]));
    assert_eq!(voided, 1, "an approval created ungoverned would otherwise skip the new quorum");
    assert_eq!(status(&script, "before"), ApprovalStatus::Voided);
    create(&mut script, "governed", "refund", "alice");
    let reply = script.apply_by(&root(), Command::DeletePolicy { name: "refunds".to_string(), non_retroactive: false });
    assert!(matches!(reply, Reply::Policy { voided: 1, .. }), "{reply:?}");
    assert_eq!(status(&script, "governed"), ApprovalStatus::Voided);
    let after = create(&mut script, "after", "refund", "alice");
    assert!(after.quorum.is_none(), "no policy: today's single decision");
    let single = approver(&mut script, "anyone", &[]);
    let decide = Command::DecideApproval {
        terms_hash: None,
        approval_id: "after".to_string(),
        status: ApprovalStatus::Approved,
        approver: single.principal.as_actor(),
        comment: None,
        caller_now_ms: None,
    };
    assert_eq!(approval_of(script.apply_by(&single, decide)).1, ApprovalStatus::Approved);
    let reply = script.apply_by(&root(), Command::DeletePolicy { name: "refunds".to_string(), non_retroactive: false });
    refused(reply, ErrorCode::NotFound);
}

#[test]
fn resume_of_a_voided_approval_is_approval_voided() {
    let mut script = secured();
    set_policy(&mut script, policy("refunds", &["refund"], vec![scope_factor("finance", 1)]));
    let f1 = approver(&mut script, "f1", &["finance"]);
    let reply = script.apply_by(&app(), Command::Submit(submission("e1", "refund", "{}")));
    let approval = match reply {
        Reply::ApprovalRequired { approval, .. } => approval,
        other => panic!("expected approval-required, got {other:?}"),
    };
    assert!(approval.quorum.is_some(), "a submit's approval is governed too");
    approval_of(vote(&mut script, &f1, &approval.id, true));
    set_policy(&mut script, policy("refunds", &["refund"], vec![scope_factor("finance", 2)]));
    let resume = Command::Resume { approval_id: approval.id.clone(), execution_id: "e1".to_string(), input_json: None };
    refused(script.apply_by(&app(), resume), ErrorCode::ApprovalVoided);
}

#[test]
fn bad_policies_are_refused_with_every_problem_and_keys_belong_to_one_policy() {
    let mut script = secured();
    let mut bad = policy("", &[], vec![]);
    bad.deny_threshold = Some(0);
    let error = refused(script.apply_by(&root(), Command::SetPolicy(bad)), ErrorCode::InvalidArgument);
    assert!(error.problems.len() >= 4, "{error:?}");
    let too_many: Vec<Factor> = (0..5).map(|n| scope_factor(&format!("f{n}"), 1)).collect();
    refused(script.apply_by(&root(), Command::SetPolicy(policy("p", &["t"], too_many))), ErrorCode::InvalidArgument);
    let big_k = vec![scope_factor("f", gavel_core::limits::FACTOR_K_MAX + 1)];
    refused(script.apply_by(&root(), Command::SetPolicy(policy("p", &["t"], big_k))), ErrorCode::InvalidArgument);
    let small_group = vec![group_factor("g", 3, &["a", "b"])];
    refused(script.apply_by(&root(), Command::SetPolicy(policy("p", &["t"], small_group))), ErrorCode::InvalidArgument);
    let zero_k = Command::SetPolicy(policy("p", &["t"], vec![scope_factor("f", 0)]));
    assert!(gavel_core::precheck::precheck(&zero_k).is_err(), "the edge refuses it before the log");
    set_policy(&mut script, policy("one", &["refund"], vec![scope_factor("finance", 1)]));
    let reply = script.apply_by(&root(), Command::SetPolicy(policy("two", &["refund"], vec![scope_factor("f", 1)])));
    refused(reply, ErrorCode::PolicyConflict);
}

#[test]
fn a_snapshot_carries_policies_and_votes() {
    let mut script = secured();
    set_policy(&mut script, policy("refunds", &["refund"], vec![scope_factor("finance", 2)]));
    let f1 = approver(&mut script, "f1", &["finance"]);
    create(&mut script, "a1", "refund", "alice");
    approval_of(vote(&mut script, &f1, "a1", true));
    assert_eq!(script.state.counts(script.now_ms).policies, 1, "the gavel_policies gauge counts it");
    let restored = State::restore(&script.state.snapshot()).expect("restores");
    assert_eq!(restored.state_hash(), script.state.state_hash());
    assert_eq!(restored.policy("refunds"), script.state.policy("refunds"));
    assert_eq!(restored.approval("a1").expect("kept").quorum, script.approval("a1").quorum);
}

#[test]
fn a_requester_that_names_no_or_other_types_is_governed_by_the_policy_on_its_capabilitys_registered_type() {
    // Issue #37, attack 3: `refund` is registered with approval type
    // `refund`; a requester naming no types, or another type, used to
    // escape the two-approver policy on that type.
    let mut script = secured();
    set_policy(&mut script, policy("refunds", &["refund"], vec![scope_factor("finance", 2)]));
    set_policy(&mut script, policy("lenient", &["other"], vec![scope_factor("anyone", 1)]));
    let f1 = approver(&mut script, "f1", &["finance"]);
    let unscoped = approver(&mut script, "u1", &[]);
    for (id, types) in [("none", vec![]), ("other", vec!["other".to_string()])] {
        let mut request = approval_request(id);
        request.capability_id = "refund".to_string();
        request.types = types;
        request.actor = user("alice").as_actor();
        let (approval, _) = approval_of(script.apply_by(&app(), Command::CreateApproval(request.clone())));
        assert_eq!(approval.quorum.as_ref().map(|quorum| quorum.policy.as_str()), Some("refunds"), "{id}");
        // The unscoped approver's decision is a vote it is not eligible for.
        let decide = Command::DecideApproval {
            approval_id: id.to_string(),
            status: ApprovalStatus::Approved,
            approver: unscoped.principal.as_actor(),
            comment: None,
            caller_now_ms: None,
            terms_hash: Some(approval.terms_hash.clone()),
        };
        refused(script.apply_by(&unscoped, decide), ErrorCode::PermissionDenied);
        assert_eq!(status(&script, id), ApprovalStatus::Pending);
        assert!(matches!(vote(&mut script, &f1, id, true), Reply::Approval { .. }));
        assert_eq!(status(&script, id), ApprovalStatus::Pending, "one of two finance approvers");
        // A standing approval for it is governed all the same.
        let standing = gavel_core::StandingSpec { uses_max: 100, window_ms: 60_000, bound_pointers: vec![] };
        request.id = format!("{id}-standing");
        let reply = script.apply_by(&app(), Command::CreateStandingApproval { request, standing });
        let (approval, _) = approval_of(reply);
        assert_eq!(approval.quorum.map(|quorum| quorum.policy), Some("refunds".to_string()));
    }
    // The requester's own type still adds a policy where the registry names none.
    let mut request = approval_request("unregistered");
    request.capability_id = "notes.write".to_string();
    request.types = vec!["other".to_string()];
    request.actor = user("alice").as_actor();
    let (approval, _) = approval_of(script.apply_by(&app(), Command::CreateApproval(request)));
    assert_eq!(approval.quorum.map(|quorum| quorum.policy), Some("lenient".to_string()));
}

#[test]
fn a_policy_on_a_risk_or_side_effect_governs_by_the_registration_not_the_requests_labels() {
    let mut script = secured();
    let wire = CapabilitySpec { risk: Some(Risk::Critical), ..capability("payments.wire", SideEffect::External) };
    assert!(matches!(script.apply_by(&root(), Command::RegisterCapability(wire)), Reply::Capability(_)));
    let note = CapabilitySpec { risk: Some(Risk::Low), ..capability("notes.write", SideEffect::Write) };
    assert!(matches!(script.apply_by(&root(), Command::RegisterCapability(note)), Reply::Capability(_)));
    let mut critical = policy("critical", &[], vec![scope_factor("finance", 2)]);
    critical.risks = [Risk::Critical].into();
    set_policy(&mut script, critical);
    let mut writes = policy("writes", &[], vec![scope_factor("ops", 1)]);
    writes.side_effects = [SideEffect::Write].into();
    set_policy(&mut script, writes);
    // The request says "low risk, a read": the registration says critical.
    let mut request = approval_request("wire-1");
    request.capability_id = "payments.wire".to_string();
    request.types = vec![];
    request.risk = Risk::Low;
    request.side_effect = SideEffect::Read;
    request.actor = user("alice").as_actor();
    let (approval, _) = approval_of(script.apply_by(&app(), Command::CreateApproval(request.clone())));
    assert_eq!(approval.quorum.map(|quorum| quorum.policy), Some("critical".to_string()));
    request.id = "note-1".to_string();
    request.capability_id = "notes.write".to_string();
    let (approval, _) = approval_of(script.apply_by(&app(), Command::CreateApproval(request.clone())));
    assert_eq!(approval.quorum.map(|quorum| quorum.policy), Some("writes".to_string()));
    // An unregistered capability has no declared risk: the labels govern nothing.
    request.id = "unknown-1".to_string();
    request.capability_id = "unknown.cap".to_string();
    request.risk = Risk::Critical;
    let (approval, _) = approval_of(script.apply_by(&app(), Command::CreateApproval(request)));
    assert_eq!(approval.quorum, None);
    // A risk belongs to one policy.
    let mut again = policy("again", &[], vec![scope_factor("ops", 1)]);
    again.risks = [Risk::Critical].into();
    refused(script.apply_by(&root(), Command::SetPolicy(again)), ErrorCode::PolicyConflict);
}

#[test]
fn a_policy_may_forbid_standing_approvals_and_a_vote_on_other_terms_is_refused() {
    let mut script = secured();
    let mut spec = policy("refunds", &["refund"], vec![scope_factor("finance", 1)]);
    spec.forbid_standing = true;
    let (stored, _) = set_policy(&mut script, spec);
    assert!(stored.forbid_standing);
    let mut request = approval_request("s1");
    request.capability_id = "refund".to_string();
    request.actor = user("alice").as_actor();
    let standing = gavel_core::StandingSpec { uses_max: 2, window_ms: 60_000, bound_pointers: vec![] };
    let reply = script.apply_by(&app(), Command::CreateStandingApproval { request: request.clone(), standing });
    refused(reply, ErrorCode::ApprovalStandingForbidden);
    let (one_shot, _) = approval_of(script.apply_by(&app(), Command::CreateApproval(request)));
    let f1 = approver(&mut script, "f1", &["finance"]);
    let decoy = create(&mut script, "decoy", "refund", "alice");
    let mut command = vote_command(&script, &f1, "s1", true);
    if let Command::CastVote { terms_hash, .. } = &mut command {
        *terms_hash = Some(decoy.terms_hash.clone());
    }
    refused(script.apply_by(&f1, command), ErrorCode::ApprovalTermsChanged);
    assert_eq!(status(&script, "s1"), ApprovalStatus::Pending);
    let mut command = vote_command(&script, &f1, "s1", true);
    if let Command::CastVote { terms_hash, .. } = &mut command {
        *terms_hash = Some(one_shot.terms_hash.clone());
    }
    assert!(matches!(script.apply_by(&f1, command), Reply::Approval { .. }));
    assert_eq!(status(&script, "s1"), ApprovalStatus::Approved);
    let vote_event = script.events().into_iter().rev().find(|event| matches!(event.kind, EventKind::VoteCast { .. }));
    assert!(
        matches!(vote_event.map(|event| event.kind), Some(EventKind::VoteCast { terms_hash, .. }) if terms_hash == one_shot.terms_hash)
    );
}

#[test]
fn the_decision_controls_a_page_renders_are_what_a_decision_would_meet() {
    // Issue #38, item 2: the console renders `decision_controls` and holds
    // no rule; for each person below, the controls say exactly what a
    // decision by that person, applied now, does.
    let mut script = secured();
    set_policy(&mut script, policy("refunds", &["refund"], vec![scope_factor("finance", 1), scope_factor("legal", 1)]));
    let in_scope = approver(&mut script, "h1", &["human"]);
    let out_of_scope = approver(&mut script, "o1", &["other"]);
    let (f1, f2) = (approver(&mut script, "f1", &["finance"]), approver(&mut script, "f2", &["finance"]));
    let requester = approver(&mut script, "alice", &[]);
    create(&mut script, "one-shot", "human", "alice");
    create(&mut script, "governed", "refund", "alice");
    assert!(matches!(vote(&mut script, &f1, "governed", true), Reply::Approval { .. }));
    let cases = [
        ("the requester", &requester, "one-shot", Some(ErrorCode::ApprovalSelfApproval)),
        ("an approver in scope", &in_scope, "one-shot", None),
        ("an approver out of scope", &out_of_scope, "one-shot", Some(ErrorCode::NotFound)),
        ("an approver who already voted", &f1, "governed", Some(ErrorCode::VoteDuplicate)),
        ("an approver for a factor already met", &f2, "governed", None),
        ("an approver eligible for no factor", &in_scope, "governed", Some(ErrorCode::NotFound)),
    ];
    for (who, caller, id, expected) in cases {
        let approval = script.approval(id);
        let controls = script.state.decision_controls(Some(caller), &approval, script.now_ms);
        assert_eq!(controls.refusal.as_ref().map(|refusal| refusal.code), expected, "{who}: {controls:?}");
        assert_eq!(controls.may_decide, expected.is_none(), "{who}");
        assert_eq!(controls.may_withdraw, who.contains("already voted"), "{who}");
        // What the command does, on a copy of the state.
        let mut trial = Script { state: script.state.clone(), now_ms: script.now_ms };
        let decide = Command::DecideApproval {
            approval_id: id.to_string(),
            status: ApprovalStatus::Approved,
            approver: caller.principal.as_actor(),
            comment: None,
            caller_now_ms: None,
            terms_hash: Some(approval.terms_hash.clone()),
        };
        match (trial.apply_by(caller, decide), expected) {
            (Reply::Error(refusal), Some(code)) => assert_eq!(refusal.code, code, "{who}: {refusal:?}"),
            (Reply::Approval { .. }, None) => {}
            (reply, expected) => panic!("{who}: controls said {expected:?}, the decision got {reply:?}"),
        }
    }
    // Once decided, nobody may decide it; the page says so.
    let legal = approver(&mut script, "l1", &["legal"]);
    assert!(matches!(vote(&mut script, &legal, "governed", true), Reply::Approval { .. }));
    let controls = script.state.decision_controls(Some(&f2), &script.approval("governed"), script.now_ms);
    assert_eq!(controls.refusal.map(|refusal| refusal.code), Some(ErrorCode::ApprovalDecided));
}

#[test]
fn the_assignment_meets_the_most_factors_and_prefers_lower_factors_on_ties() {
    let set = |items: &[u32]| items.iter().copied().collect::<BTreeSet<u32>>();
    // Voter 0 could fill factor 0 or 1; voter 1 only factor 0.
    assert_eq!(assign_votes(&[1, 1], &[set(&[0, 1]), set(&[0])]), [Some(1), Some(0)]);
    // Only one factor can be met: the lower one wins.
    assert_eq!(assign_votes(&[1, 1], &[set(&[0, 1])]), [Some(0)]);
    // A factor needing 2 with one voter stays unmet, but the vote shows as progress.
    assert_eq!(assign_votes(&[2, 1], &[set(&[0, 1])]), [Some(1)]);
    assert_eq!(assign_votes(&[2, 1], &[set(&[0]), set(&[])]), [Some(0), None]);
}

// ---------------------------------------------------------------- model

/// Three scopes, four approvers, one requester-approver.
const SCOPES: [&str; 3] = ["a", "b", "c"];
const APPROVERS: [&str; 4] = ["u0", "u1", "u2", "u3"];

#[derive(Debug, Clone)]
enum FactorGen {
    Scope(usize, u32),
    Group(Vec<usize>, u32),
}

/// Votes, withdrawals and consumptions pick one of the most recent
/// approvals (0: the newest), so they land on open ones.
const RECENT: usize = 3;

#[derive(Debug, Clone)]
enum Step {
    /// Create an approval, of the governed type or not, requested for
    /// approver `actor` (None: for alice).
    Create {
        governed: bool,
        actor: Option<usize>,
    },
    /// `approval` counts back from the newest.
    Vote {
        by: usize,
        approval: usize,
        approve: bool,
    },
    /// `approval` counts back from the newest.
    Withdraw {
        by: usize,
        approval: usize,
    },
    Regrant {
        who: usize,
        scopes: Vec<usize>,
        self_approval: bool,
    },
    Revoke {
        who: usize,
    },
    SetPolicy {
        factors: Vec<FactorGen>,
        deny: u32,
        non_retroactive: bool,
    },
    DeletePolicy {
        non_retroactive: bool,
    },
    /// `approval` counts back from the newest.
    Consume {
        approval: usize,
    },
}

/// The index of the approval `back` steps from the newest, if there is one.
fn recent(model: &Model, back: usize) -> Option<usize> {
    model.approvals.len().checked_sub(back + 1)
}

fn factor_gen() -> impl Strategy<Value = FactorGen> {
    prop_oneof![
        // Factors use two of the three scopes, so a third-scope approver is
        // eligible for none.
        (0..2usize, 1..=2u32).prop_map(|(scope, k)| FactorGen::Scope(scope, k)),
        (prop::collection::vec(0..APPROVERS.len(), 2..=4), 1..=2u32).prop_map(|(group, k)| FactorGen::Group(group, k)),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (prop::bool::weighted(0.8), prop::option::weighted(0.3, 0..APPROVERS.len()))
            .prop_map(|(governed, actor)| Step::Create { governed, actor }),
        24 => (0..APPROVERS.len(), 0..RECENT, prop::bool::weighted(0.8))
            .prop_map(|(by, approval, approve)| Step::Vote { by, approval, approve }),
        3 => (0..APPROVERS.len(), 0..RECENT).prop_map(|(by, approval)| Step::Withdraw { by, approval }),
        4 => (0..APPROVERS.len(), prop::collection::vec(0..SCOPES.len(), 0..=3), prop::bool::weighted(0.3))
            .prop_map(|(who, scopes, self_approval)| Step::Regrant { who, scopes, self_approval }),
        2 => (0..APPROVERS.len()).prop_map(|who| Step::Revoke { who }),
        2 => (prop::collection::vec(factor_gen(), 1..=3), 1..=2u32, any::<bool>())
            .prop_map(|(factors, deny, non_retroactive)| Step::SetPolicy { factors, deny, non_retroactive }),
        1 => any::<bool>().prop_map(|non_retroactive| Step::DeletePolicy { non_retroactive }),
        3 => (0..RECENT).prop_map(|approval| Step::Consume { approval }),
    ]
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ModelStatus {
    Pending,
    Approved,
    Rejected,
    Consumed,
    Voided,
}

#[derive(Debug, Clone)]
struct ModelPolicy {
    version: u64,
    /// Each factor: k and its eligibility.
    factors: Vec<(u32, FactorGen)>,
    deny: u32,
}

#[derive(Debug, Clone)]
struct ModelApproval {
    id: String,
    governed_type: bool,
    requester: Option<usize>,
    status: ModelStatus,
    /// The policy version it was created under.
    version: Option<u64>,
    /// (voter, approve, eligible factors), in cast order.
    votes: Vec<(usize, bool, BTreeSet<u32>)>,
}

#[derive(Debug, Default)]
struct Model {
    /// Each approver's approver scopes (None: no approver grant) and self-approval grant.
    grants: BTreeMap<usize, (Option<BTreeSet<usize>>, bool)>,
    policy: Option<ModelPolicy>,
    next_version: u64,
    approvals: Vec<ModelApproval>,
}

impl Model {
    fn eligible(&self, policy: &ModelPolicy, voter: usize) -> BTreeSet<u32> {
        let Some((Some(scopes), _)) = self.grants.get(&voter) else { return BTreeSet::new() };
        let mut eligible = BTreeSet::new();
        for (index, (_, factor)) in policy.factors.iter().enumerate() {
            let ok = match factor {
                FactorGen::Scope(scope, _) => scopes.contains(scope),
                FactorGen::Group(group, _) => group.contains(&voter),
            };
            if ok {
                eligible.insert(index as u32);
            }
        }
        eligible
    }

    /// The oracle: is there any way to give each approving voter at most
    /// one eligible factor so that every factor has k? (Brute force.)
    fn quorum_met(policy: &ModelPolicy, votes: &[(usize, bool, BTreeSet<u32>)]) -> bool {
        let approvals: Vec<&BTreeSet<u32>> = votes.iter().filter(|vote| vote.1).map(|vote| &vote.2).collect();
        fn search(index: usize, voters: &[&BTreeSet<u32>], need: &mut Vec<i64>) -> bool {
            if need.iter().all(|n| *n <= 0) {
                return true;
            }
            if index == voters.len() {
                return false;
            }
            if search(index + 1, voters, need) {
                return true;
            }
            for factor in voters[index] {
                need[*factor as usize] -= 1;
                let found = search(index + 1, voters, need);
                need[*factor as usize] += 1;
                if found {
                    return true;
                }
            }
            false
        }
        let mut need: Vec<i64> = policy.factors.iter().map(|(k, _)| i64::from(*k)).collect();
        search(0, &approvals, &mut need)
    }
}

fn factor_of(generated: &FactorGen, index: usize) -> Factor {
    match generated {
        FactorGen::Scope(scope, k) => {
            Factor { name: format!("f{index}"), k: *k, approvers: Approvers::Scope(SCOPES[*scope].to_string()) }
        }
        FactorGen::Group(group, k) => {
            let members: BTreeSet<Principal> = group.iter().map(|member| user(APPROVERS[*member])).collect();
            // A group smaller than k is refused by validation: keep k within it.
            let k = (*k).min(members.len() as u32);
            Factor { name: format!("f{index}"), k, approvers: Approvers::Group(members) }
        }
    }
}

fn model_status(status: ApprovalStatus) -> ModelStatus {
    match status {
        ApprovalStatus::Pending => ModelStatus::Pending,
        ApprovalStatus::Approved => ModelStatus::Approved,
        ApprovalStatus::Rejected => ModelStatus::Rejected,
        ApprovalStatus::Consumed => ModelStatus::Consumed,
        ApprovalStatus::Voided => ModelStatus::Voided,
        other => panic!("the model makes no {other:?} approval"),
    }
}

/// Runs `steps` after giving each approver the approver grant with the
/// scopes `initial_scopes` names, checking the state against the model
/// after every step.
fn run(initial_scopes: Vec<BTreeSet<usize>>, steps: Vec<Step>) {
    let mut script = secured();
    let mut model = Model::default();
    for (index, scopes) in initial_scopes.into_iter().enumerate() {
        let names: Vec<&str> = scopes.iter().map(|scope| SCOPES[*scope]).collect();
        approver(&mut script, APPROVERS[index], &names);
        model.grants.insert(index, (Some(scopes), false));
    }
    for step in steps {
        match step {
            Step::Create { governed, actor } => {
                let id = format!("x{}", model.approvals.len());
                let kind = if governed { "refund" } else { "misc" };
                let actor_name = actor.map_or("alice", |index| APPROVERS[index]);
                let created = create(&mut script, &id, kind, actor_name);
                let version = if governed { model.policy.as_ref().map(|policy| policy.version) } else { None };
                assert_eq!(created.quorum.as_ref().map(|quorum| quorum.policy_version), version, "{id}");
                model.approvals.push(ModelApproval {
                    id,
                    governed_type: governed,
                    requester: actor,
                    status: ModelStatus::Pending,
                    version,
                    votes: Vec::new(),
                });
            }
            Step::Vote { by, approval, approve } => {
                let Some(approval) = recent(&model, approval) else { continue };
                let record = model.approvals[approval].clone();
                let caller = Caller::of(user(APPROVERS[by]));
                let reply = vote(&mut script, &caller, &record.id, approve);
                let has_approver = matches!(model.grants.get(&by), Some((Some(_), _)));
                if !has_approver {
                    refused(reply, ErrorCode::PermissionDenied);
                    continue;
                }
                let Some(version) = record.version else {
                    refused(reply, ErrorCode::FailedPrecondition);
                    continue;
                };
                if record.status != ModelStatus::Pending {
                    refused(reply, ErrorCode::ApprovalDecided);
                    continue;
                }
                let policy = model.policy.clone().expect("a pending governed approval's policy is current");
                assert_eq!(policy.version, version, "a policy change voids pending approvals of older versions");
                let eligible = model.eligible(&policy, by);
                if eligible.is_empty() {
                    let error = reply.error().cloned().expect("an ineligible vote is refused");
                    assert!(matches!(error.code, ErrorCode::PermissionDenied | ErrorCode::NotFound), "{error:?}");
                    continue;
                }
                if record.votes.iter().any(|vote| vote.0 == by) {
                    refused(reply, ErrorCode::VoteDuplicate);
                    continue;
                }
                if record.requester == Some(by) && !model.grants[&by].1 {
                    refused(reply, ErrorCode::ApprovalSelfApproval);
                    continue;
                }
                let (_, status) = approval_of(reply);
                let model_record = &mut model.approvals[approval];
                model_record.votes.push((by, approve, eligible));
                let denials = model_record.votes.iter().filter(|vote| !vote.1).count() as u32;
                if approve && Model::quorum_met(&policy, &model_record.votes) {
                    model_record.status = ModelStatus::Approved;
                } else if !approve && denials >= policy.deny {
                    model_record.status = ModelStatus::Rejected;
                }
                assert_eq!(model_status(status), model_record.status, "vote by u{by} on {}", model_record.id);
            }
            Step::Withdraw { by, approval } => {
                let Some(approval) = recent(&model, approval) else { continue };
                let record = model.approvals[approval].clone();
                let caller = Caller::of(user(APPROVERS[by]));
                let command =
                    Command::WithdrawVote { approval_id: record.id.clone(), approver: caller.principal.as_actor() };
                let reply = script.apply_by(&caller, command);
                let has_approver = matches!(model.grants.get(&by), Some((Some(_), _)));
                if !has_approver {
                    refused(reply, ErrorCode::PermissionDenied);
                } else if record.status != ModelStatus::Pending {
                    refused(reply, ErrorCode::ApprovalDecided);
                } else if !record.votes.iter().any(|vote| vote.0 == by) {
                    refused(reply, ErrorCode::NotFound);
                } else {
                    approval_of(reply);
                    model.approvals[approval].votes.retain(|vote| vote.0 != by);
                }
            }
            Step::Regrant { who, scopes, self_approval } => {
                let scopes: BTreeSet<usize> = scopes.into_iter().collect();
                let names: Vec<&str> = scopes.iter().map(|scope| SCOPES[*scope]).collect();
                approver(&mut script, APPROVERS[who], &names);
                if self_approval {
                    grant(&mut script, &user(APPROVERS[who]), Grant::of(GrantName::SelfApproval));
                }
                let had_self = model.grants.get(&who).is_some_and(|grants| grants.1);
                model.grants.insert(who, (Some(scopes), had_self || self_approval));
                narrow(&mut model, who);
            }
            Step::Revoke { who } => {
                let command = Command::Revoke { principal: user(APPROVERS[who]), name: GrantName::Approver };
                assert!(matches!(script.apply_by(&root(), command), Reply::Grants { .. }));
                if let Some(grants) = model.grants.get_mut(&who) {
                    grants.0 = None;
                }
                narrow(&mut model, who);
            }
            Step::SetPolicy { factors, deny, non_retroactive } => {
                let spec_factors: Vec<Factor> =
                    factors.iter().enumerate().map(|(index, factor)| factor_of(factor, index)).collect();
                let mut spec = policy("refunds", &["refund"], spec_factors.clone());
                spec.deny_threshold = Some(deny);
                spec.non_retroactive = non_retroactive;
                let (stored, voided) = set_policy(&mut script, spec);
                model.next_version += 1;
                assert_eq!(stored.version, model.next_version);
                let model_factors = spec_factors
                    .iter()
                    .zip(&factors)
                    .map(|(factor, generated)| (factor.k, generated.clone()))
                    .collect();
                let mut expected_voided = 0;
                for record in model.approvals.iter_mut().filter(|record| record.governed_type) {
                    // Every open approval of the governed type was created
                    // under an older version or none: the new one voids it.
                    let open = matches!(record.status, ModelStatus::Pending | ModelStatus::Approved);
                    if open && !(record.status == ModelStatus::Approved && non_retroactive) {
                        record.status = ModelStatus::Voided;
                        expected_voided += 1;
                    }
                }
                assert_eq!(voided, expected_voided, "a change voids exactly what it no longer allows");
                model.policy = Some(ModelPolicy { version: stored.version, factors: model_factors, deny });
            }
            Step::DeletePolicy { non_retroactive } => {
                let command = Command::DeletePolicy { name: "refunds".to_string(), non_retroactive };
                let reply = script.apply_by(&root(), command);
                let Some(deleted) = model.policy.take() else {
                    refused(reply, ErrorCode::NotFound);
                    continue;
                };
                let mut expected_voided = 0;
                for record in model.approvals.iter_mut().filter(|record| record.version.is_some()) {
                    let open = matches!(record.status, ModelStatus::Pending | ModelStatus::Approved);
                    if open && !(record.status == ModelStatus::Approved && non_retroactive) {
                        record.status = ModelStatus::Voided;
                        expected_voided += 1;
                    }
                }
                assert!(
                    matches!(reply, Reply::Policy { voided, ref policy } if voided == expected_voided && policy.version == deleted.version),
                    "{reply:?}"
                );
            }
            Step::Consume { approval } => {
                let Some(approval) = recent(&model, approval) else { continue };
                let record = model.approvals[approval].clone();
                let reply = script.apply_by(&app(), consume_command(&record.id, &format!("exec-{}", record.id)));
                if record.status == ModelStatus::Approved {
                    approval_of(reply);
                    model.approvals[approval].status = ModelStatus::Consumed;
                } else {
                    refused(reply, ErrorCode::FailedPrecondition);
                }
            }
        }
        check(&script, &model);
    }
}

/// After `who`'s grants changed: its pending votes narrow to what it is
/// still eligible for, and go when that is nothing.
fn narrow(model: &mut Model, who: usize) {
    let Some(policy) = model.policy.clone() else { return };
    let now = model.eligible(&policy, who);
    for record in model.approvals.iter_mut().filter(|record| record.status == ModelStatus::Pending) {
        for vote in record.votes.iter_mut().filter(|vote| vote.0 == who) {
            vote.2 = vote.2.intersection(&now).copied().collect();
        }
        record.votes.retain(|vote| !vote.2.is_empty());
    }
}

/// The state agrees with the model: every status, every vote set; no vote
/// by a requester without self-approval; an approved approval met its quorum.
fn check(script: &Script, model: &Model) {
    for record in &model.approvals {
        let approval = script.approval(&record.id);
        assert_eq!(model_status(approval.status_at(script.now_ms)), record.status, "{}", record.id);
        let Some(quorum) = &approval.quorum else {
            assert!(record.version.is_none(), "{}", record.id);
            continue;
        };
        assert_eq!(Some(quorum.policy_version), record.version, "{}", record.id);
        let votes: Vec<(usize, bool, BTreeSet<u32>)> = quorum
            .votes
            .iter()
            .map(|vote| {
                let voter = APPROVERS.iter().position(|id| *id == vote.principal.id).expect("an approver voted");
                (voter, vote.approve, vote.eligible.clone())
            })
            .collect();
        if record.status == ModelStatus::Pending {
            assert_eq!(votes, record.votes, "{}: the votes that count", record.id);
        }
        for vote in &quorum.votes {
            let voter = APPROVERS.iter().position(|id| *id == vote.principal.id).expect("an approver voted");
            assert_eq!(vote.self_approval, record.requester == Some(voter), "{}", record.id);
            assert!(!vote.eligible.is_empty(), "a vote without an eligible factor counts for nothing");
        }
        if matches!(record.status, ModelStatus::Approved | ModelStatus::Consumed) {
            assert!(quorum.met(), "{}: approved without its quorum", record.id);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, rng_algorithm: RngAlgorithm::XorShift, ..ProptestConfig::default() })]

    #[test]
    fn approvals_follow_the_model_of_factors_votes_grants_and_policy_changes(
        setup in (prop::collection::vec(factor_gen(), 1..=3), 1..=2u32),
        scopes in prop::collection::vec(prop::collection::btree_set(0..SCOPES.len(), 1..=2), APPROVERS.len()),
        steps in prop::collection::vec(step(), 1..120),
    ) {
        let (factors, deny) = setup;
        let mut all = vec![Step::SetPolicy { factors, deny, non_retroactive: false }];
        all.extend(steps);
        run(scopes, all);
    }
}
