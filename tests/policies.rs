//! Approval policies on a real secure three-node cluster of `gavel node`
//! processes (TLS, client certificates), driven through the CLI and the
//! public gRPC API (docs/policies.md):
//!
//! - "finance AND legal", run from the CLI: `gavel policy set`, a finance
//!   approval (`gavel approval approve`, which on a governed approval is a
//!   vote) leaves it pending with progress 1/1 and 0/1 (`gavel approval
//!   votes`), the legal one approves it; a policy change voids an open one;
//! - a race: three members of an on-call group (k = 3) each send their vote
//!   twice at once, each through a different node: exactly three votes are
//!   counted, exactly one `capability.approved` is recorded, and every
//!   extra vote is refused (`VOTE_DUPLICATE`, or `APPROVAL_DECIDED` once the
//!   quorum is met);
//! - a bounded standing approval of N uses ("N refunds for one order"),
//!   resumed by 4N concurrent callers through all three nodes: exactly N
//!   executions, N uses spent, the rest refused `APPROVAL_CONSUMED`.

mod admin_cli;

use std::time::Duration;

use admin_cli::{gavel_as, principal, secure_cluster};
use gavel_proto::error_detail::read_error_detail;
use gavel_proto::v1 as pb;
use gavel_proto::v1::approval_service_client::ApprovalServiceClient;
use gavel_proto::v1::audit_service_client::AuditServiceClient;
use gavel_proto::v1::capability_service_client::CapabilityServiceClient;
use gavel_proto::v1::execution_service_client::ExecutionServiceClient;
use gavel_proto::v1::policy_service_client::PolicyServiceClient;
use gavel_testkit::Cluster;
use tonic::transport::Channel;

/// Upper bound of every wait.
const WAIT: Duration = Duration::from_secs(60);

const ADMIN: &str = "user:admin";
const AGENT: &str = "service:agent";
const ON_CALL: [&str; 3] = ["user:oc1", "user:oc2", "user:oc3"];

/// A channel to node `id` as `name`.
fn channel(cluster: &Cluster, id: u64, name: &str) -> Channel {
    let tls = cluster.credentials(&principal(name)).expect("credentials");
    let addr = cluster.addr(id).expect("a node");
    gavel_testkit::channel_with(addr, Duration::from_secs(10), Some(&tls)).expect("a channel")
}

/// Creates approval `id` of `kind` as the agent; its input hash.
async fn create(cluster: &Cluster, id: &str, kind: &str) -> String {
    let request = pb::CreateApprovalRequest {
        id: id.into(),
        capability_id: "policies.cap".into(),
        surface: "policies".into(),
        input_json: format!(r#"{{"approval":"{id}"}}"#),
        types: vec![kind.into()],
        risk: pb::Risk::High as i32,
        side_effect: pb::SideEffect::Write as i32,
        ..pb::CreateApprovalRequest::default()
    };
    let approval = ApprovalServiceClient::new(channel(cluster, 1, AGENT))
        .create_approval(request)
        .await
        .expect("create")
        .into_inner()
        .approval
        .expect("the approval");
    assert!(approval.quorum.is_some(), "a policy governs {id}");
    approval.input_hash
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn quorums_from_the_cli_and_a_vote_race_through_all_three_nodes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cluster = secure_cluster(dir.path(), &principal(ADMIN), WAIT).await;
    let admin = principal(ADMIN);
    cluster.grant(&principal(AGENT), &[gavel_pki::GrantName::Submitter], WAIT).await.expect("grant");
    cluster.grant(&admin, &[gavel_pki::GrantName::Auditor], WAIT).await.expect("grant");
    for (who, scope) in [("user:fin", "finance"), ("user:legal", "legal")] {
        gavel_as(&cluster, &admin, &["access", "grant", who, "approver", "--scope", scope]).await.succeeded();
    }
    for who in ON_CALL {
        gavel_as(&cluster, &admin, &["access", "grant", who, "approver"]).await.succeeded();
    }

    // ----- finance AND legal, from the CLI -----
    let refunds = ["policy", "set", "refunds", "--types", "refund", "--factor", "finance=1/scope/finance", "--factor"];
    let mut set: Vec<&str> = refunds.to_vec();
    set.extend(["legal=1/scope/legal", "--json"]);
    let created = gavel_as(&cluster, &admin, &set).await.json();
    assert_eq!(created["policy"]["version"], 1, "{created}");
    assert_eq!(created["voided"], 0, "{created}");
    let listed = gavel_as(&cluster, &principal(AGENT), &["policy", "list", "--json"]).await.json();
    assert_eq!(listed["policies"][0]["name"], "refunds", "{listed}");
    gavel_as(&cluster, &principal(AGENT), &["policy", "delete", "refunds"]).await.refused(3, "PERMISSION_DENIED");

    create(&cluster, "refund-1", "refund").await;
    let voted = gavel_as(&cluster, &principal("user:fin"), &["approval", "approve", "refund-1", "--json", "--yes"])
        .await
        .json();
    assert_eq!(voted["status"], "pending", "one factor of two: {voted}");
    let votes = gavel_as(&cluster, &principal("user:fin"), &["approval", "votes", "refund-1", "--json"]).await.json();
    assert_eq!(votes["quorum"]["factors"][0]["counted"], 1, "{votes}");
    assert_eq!(votes["quorum"]["factors"][1]["counted"], 0, "{votes}");
    assert_eq!(votes["quorum"]["votes"][0]["principal"], "user:fin", "{votes}");
    let again = gavel_as(&cluster, &principal("user:fin"), &["approval", "approve", "refund-1", "--yes"]).await;
    again.refused(3, "VOTE_DUPLICATE");
    let approved =
        gavel_as(&cluster, &principal("user:legal"), &["approval", "approve", "refund-1", "--json", "--yes"])
            .await
            .json();
    assert_eq!(approved["status"], "approved", "{approved}");

    // A change voids the open approvals of the old version.
    create(&cluster, "refund-2", "refund").await;
    let mut change: Vec<&str> = refunds.to_vec();
    change.extend(["legal=2/group/user:legal,user:oc1", "--json"]);
    let changed = gavel_as(&cluster, &admin, &change).await.json();
    assert_eq!(changed["policy"]["version"], 2, "{changed}");
    assert_eq!(changed["voided"], 2, "the pending refund-2 and the unconsumed refund-1: {changed}");
    let voided = gavel_as(&cluster, &principal(AGENT), &["approval", "get", "refund-2", "--json"]).await.json();
    assert_eq!(voided["status"], "voided", "{voided}");

    // ----- the race: k = 3 of the on-call group, every vote twice, through all three nodes -----
    let group = format!("on-call=3/group/{}", ON_CALL.join(","));
    gavel_as(&cluster, &admin, &["policy", "set", "deploys", "--types", "deploy", "--factor", &group])
        .await
        .succeeded();
    let input_hash = create(&cluster, "deploy-1", "deploy").await;
    let mut calls = Vec::new();
    for (index, voter) in ON_CALL.iter().enumerate() {
        for attempt in 0..2u64 {
            // Each voter's two votes go through two different nodes.
            let node = (index as u64 + attempt) % 3 + 1;
            let mut client = PolicyServiceClient::new(channel(&cluster, node, voter));
            let request = pb::CastVoteRequest {
                approval_id: "deploy-1".into(),
                approve: true,
                input_hash: input_hash.clone(),
                ..pb::CastVoteRequest::default()
            };
            calls.push(tokio::spawn(async move { client.cast_vote(request).await }));
        }
    }
    let mut accepted = 0;
    for call in calls {
        match tokio::time::timeout(WAIT, call).await.expect("a vote answers").expect("a vote") {
            Ok(_) => accepted += 1,
            Err(status) => {
                let code = read_error_detail(&status).map(|detail| detail.code).unwrap_or_default();
                assert!(code == "VOTE_DUPLICATE" || code == "APPROVAL_DECIDED", "{status:?}");
            }
        }
    }
    assert_eq!(accepted, 3, "each voter's vote counted once");
    let approval = ApprovalServiceClient::new(channel(&cluster, 2, ADMIN))
        .get_approval(pb::GetApprovalRequest { id: "deploy-1".into(), caller_now_ms: None })
        .await
        .expect("read")
        .into_inner()
        .approval
        .expect("the approval");
    assert_eq!(approval.status, pb::ApprovalStatus::Approved as i32, "{approval:?}");
    let quorum = approval.quorum.expect("governed");
    let mut voters: Vec<&str> = quorum.votes.iter().map(|vote| vote.principal.as_str()).collect();
    voters.sort();
    assert_eq!(voters, ON_CALL, "three distinct votes, none twice");
    let events = AuditServiceClient::new(channel(&cluster, 3, ADMIN))
        .list_events(pb::ListEventsRequest {
            after_cursor: 0,
            limit: 1_000,
            execution_id: None,
            ..pb::ListEventsRequest::default()
        })
        .await
        .expect("events")
        .into_inner()
        .events;
    let about = |kind: &str| {
        events.iter().filter(|event| event.approval_id.as_deref() == Some("deploy-1") && event.r#type == kind).count()
    };
    assert_eq!(about("capability.approved"), 1, "exactly one transition to approved");
    assert_eq!(about("approval.vote_cast"), 3, "each vote recorded once");
}

/// Uses of the standing approval of the resume race.
const USES: u32 = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_standing_approval_of_n_uses_resumed_by_4n_callers_at_once_runs_exactly_n_executions() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cluster = secure_cluster(dir.path(), &principal(ADMIN), WAIT).await;
    cluster.grant(&principal(AGENT), &[gavel_pki::GrantName::Submitter], WAIT).await.expect("grant");
    cluster.grant(&principal("user:fin"), &[gavel_pki::GrantName::Approver], WAIT).await.expect("grant");
    let spec = pb::CapabilitySpec {
        id: "orders.refund".into(),
        side_effect: pb::SideEffect::Write as i32,
        risk: pb::Risk::High as i32,
        ..pb::CapabilitySpec::default()
    };
    CapabilityServiceClient::new(channel(&cluster, 1, ADMIN))
        .register_capability(pb::RegisterCapabilityRequest { request_id: String::new(), spec: Some(spec) })
        .await
        .expect("register");
    let request = pb::CreateApprovalRequest {
        id: "refunds-o-1".into(),
        capability_id: "orders.refund".into(),
        surface: "policies".into(),
        input_json: r#"{"amount":10,"order_id":"o-1"}"#.into(),
        types: vec!["refund".into()],
        risk: pb::Risk::High as i32,
        side_effect: pb::SideEffect::Write as i32,
        standing: Some(pb::StandingTerms {
            uses_max: USES,
            window_ms: 3_600_000,
            bound_pointers: vec!["/order_id".into()],
        }),
        ..pb::CreateApprovalRequest::default()
    };
    ApprovalServiceClient::new(channel(&cluster, 1, AGENT)).create_approval(request).await.expect("create");
    let decide = pb::DecideApprovalRequest {
        id: "refunds-o-1".into(),
        status: pb::ApprovalStatus::Approved as i32,
        ..pb::DecideApprovalRequest::default()
    };
    ApprovalServiceClient::new(channel(&cluster, 2, "user:fin")).decide_approval(decide).await.expect("approve");

    let callers = 4 * USES as usize;
    let mut calls = Vec::new();
    for index in 0..callers {
        let mut client = ExecutionServiceClient::new(channel(&cluster, index as u64 % 3 + 1, AGENT));
        let request = pb::ResumeRequest {
            approval_id: "refunds-o-1".into(),
            execution_id: Some(format!("refund-{index}")),
            input_json: Some(format!(r#"{{"amount":{},"order_id":"o-1"}}"#, index + 1)),
            ..pb::ResumeRequest::default()
        };
        calls.push(tokio::spawn(async move { client.resume(request).await }));
    }
    let mut executions = Vec::new();
    for call in calls {
        match tokio::time::timeout(WAIT, call).await.expect("a resume answers").expect("a resume") {
            Ok(answer) => executions.push(answer.into_inner()),
            Err(status) => {
                let code = read_error_detail(&status).map(|detail| detail.code).unwrap_or_default();
                assert_eq!(code, "APPROVAL_CONSUMED", "{status:?}");
            }
        }
    }
    assert_eq!(executions.len(), USES as usize, "exactly N of 4N concurrent resumes ran");
    let approval = ApprovalServiceClient::new(channel(&cluster, 3, AGENT))
        .get_approval(pb::GetApprovalRequest { id: "refunds-o-1".into(), caller_now_ms: None })
        .await
        .expect("read")
        .into_inner()
        .approval
        .expect("the approval");
    assert_eq!(approval.status, pb::ApprovalStatus::Consumed as i32, "exhausted, it closed");
    let standing = approval.standing.expect("standing");
    assert_eq!(standing.used_by.len(), USES as usize, "{standing:?}");
}
