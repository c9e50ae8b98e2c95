//! Issue #37's three attacks on a person's "yes", replayed as an agent
//! holding only a submitter grant would, against a real secure three-node
//! cluster of `gavel node` processes (TLS, client certificates), through
//! the public gRPC API (SPEC §10, §13; docs/guarantees.md "The terms of a
//! decision"). Each is refused or made harmless:
//!
//! 1. a decoy approval whose id walks back to another (`z/../../approvals/X`)
//!    is refused at creation; a decoy with a safe id and the same input has
//!    other terms, so an approver's "yes" given on the decoy's page (its
//!    terms hash) cannot land on the target, which stays pending;
//! 2. a standing approval shows itself as one in its terms (100 uses within
//!    7 days, bound only at `/order_id` = "o-9"): a "yes" given on a
//!    one-shot's terms does not approve it, and a policy may forbid it;
//! 3. a requester that names no types (or another type) for a capability
//!    whose registration declares `pay2` is governed by the "2 distinct
//!    finance approvers" policy on `pay2` all the same: one unscoped
//!    approver cannot approve it, one finance approver leaves it pending.
//!
//! The console's and the notifier's parts are in tests/browser and
//! tests/notify.rs; the CLI's in tests/cli.rs.

mod admin_cli;

use std::time::Duration;

use admin_cli::{gavel_as, principal, secure_cluster};
use gavel_proto::error_detail::read_error_detail;
use gavel_proto::v1 as pb;
use gavel_proto::v1::approval_service_client::ApprovalServiceClient;
use gavel_proto::v1::capability_service_client::CapabilityServiceClient;
use gavel_testkit::Cluster;
use tonic::transport::Channel;

/// Upper bound of every wait.
const WAIT: Duration = Duration::from_secs(60);

const ADMIN: &str = "user:admin";
const AGENT: &str = "service:agent";
const FIN1: &str = "user:fin1";
const FIN2: &str = "user:fin2";
const ANYONE: &str = "user:anyone";

/// A channel to node `id` as `name`.
fn channel(cluster: &Cluster, id: u64, name: &str) -> Channel {
    let tls = cluster.credentials(&principal(name)).expect("credentials");
    let addr = cluster.addr(id).expect("a node");
    gavel_testkit::channel_with(addr, Duration::from_secs(10), Some(&tls)).expect("a channel")
}

fn approvals(cluster: &Cluster, name: &str) -> ApprovalServiceClient<Channel> {
    ApprovalServiceClient::new(channel(cluster, 1, name))
}

/// The domain code of a refusal.
fn code(status: &tonic::Status) -> String {
    read_error_detail(status).map(|detail| detail.code).unwrap_or_else(|| format!("{:?}", status.code()))
}

fn request(id: &str, capability_id: &str, input_json: &str, types: &[&str]) -> pb::CreateApprovalRequest {
    pb::CreateApprovalRequest {
        id: id.into(),
        capability_id: capability_id.into(),
        surface: "agent".into(),
        input_json: input_json.into(),
        types: types.iter().map(|kind| kind.to_string()).collect(),
        risk: pb::Risk::Low as i32,
        side_effect: pb::SideEffect::Read as i32,
        ..pb::CreateApprovalRequest::default()
    }
}

async fn create(cluster: &Cluster, request: pb::CreateApprovalRequest) -> Result<pb::Approval, tonic::Status> {
    let created = approvals(cluster, AGENT).create_approval(request).await?;
    Ok(created.into_inner().approval.expect("the approval"))
}

async fn get(cluster: &Cluster, id: &str) -> pb::Approval {
    let mut client = approvals(cluster, ADMIN);
    let answer = client.get_approval(pb::GetApprovalRequest { id: id.into(), caller_now_ms: None }).await;
    answer.expect("read").into_inner().approval.expect("the approval exists")
}

/// Approves `id` as `name`, naming the terms hash the approver was shown.
async fn approve(cluster: &Cluster, name: &str, id: &str, terms_hash: &str) -> Result<pb::Approval, tonic::Status> {
    let decide = pb::DecideApprovalRequest {
        id: id.into(),
        status: pb::ApprovalStatus::Approved as i32,
        terms_hash: Some(terms_hash.into()),
        ..pb::DecideApprovalRequest::default()
    };
    Ok(approvals(cluster, name).decide_approval(decide).await?.into_inner().approval.expect("the approval"))
}

async fn register(cluster: &Cluster, id: &str, side_effect: pb::SideEffect, risk: pb::Risk, approval_type: &str) {
    let spec = pb::CapabilitySpec {
        id: id.into(),
        side_effect: side_effect as i32,
        risk: risk as i32,
        approval: Some(pb::ApprovalPolicy { required: true, r#type: Some(approval_type.into()), expires_in_ms: None }),
        ..pb::CapabilitySpec::default()
    };
    CapabilityServiceClient::new(channel(cluster, 1, ADMIN))
        .register_capability(pb::RegisterCapabilityRequest { request_id: String::new(), spec: Some(spec) })
        .await
        .expect("register");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_three_ways_to_steer_a_yes_are_refused_on_a_secure_three_node_cluster() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cluster = secure_cluster(dir.path(), &principal(ADMIN), WAIT).await;
    let admin = principal(ADMIN);
    cluster.grant(&principal(AGENT), &[gavel_pki::GrantName::Submitter], WAIT).await.expect("grant");
    cluster.grant(&admin, &[gavel_pki::GrantName::Auditor], WAIT).await.expect("grant");
    for who in [FIN1, FIN2] {
        gavel_as(&cluster, &admin, &["access", "grant", who, "approver", "--scope", "finance"]).await.succeeded();
    }
    gavel_as(&cluster, &admin, &["access", "grant", ANYONE, "approver"]).await.succeeded();
    register(&cluster, "payments.wire", pb::SideEffect::External, pb::Risk::Critical, "wire").await;
    register(&cluster, "orders.refund", pb::SideEffect::Write, pb::Risk::High, "refund").await;

    // ----- 1. a decoy page cannot decide another approval -----
    let wire = r#"{"amount_cents":100000000,"to":"acct-1"}"#;
    let target = create(&cluster, request("hv-e9814d", "payments.wire", wire, &["wire"])).await.expect("the target");
    let walked = create(&cluster, request("z/../../approvals/hv-e9814d", "orders.refund", wire, &[])).await;
    let refusal = walked.expect_err("an id that walks a path is refused");
    assert_eq!(code(&refusal), "INVALID_ARGUMENT", "{refusal:?}");
    assert!(refusal.message().contains('/'), "the refusal names the character: {refusal:?}");
    let decoy = create(&cluster, request("hv-decoy", "orders.refund", wire, &[])).await.expect("a decoy");
    assert_eq!(decoy.input_hash, target.input_hash, "the same input, as in the attack");
    assert_ne!(decoy.terms_hash, target.terms_hash, "other terms: another id, another capability");
    let steered = approve(&cluster, ANYONE, "hv-e9814d", &decoy.terms_hash).await.expect_err("steered");
    assert_eq!(code(&steered), "APPROVAL_TERMS_CHANGED", "{steered:?}");
    assert_eq!(get(&cluster, "hv-e9814d").await.status, pb::ApprovalStatus::Pending as i32, "the wire stays pending");
    let approved = approve(&cluster, ANYONE, "hv-e9814d", &target.terms_hash).await.expect("on its own terms");
    assert_eq!(approved.status, pb::ApprovalStatus::Approved as i32);

    // ----- 2. a standing approval shows itself as one -----
    let input = r#"{"amount_cents":1,"order_id":"o-9"}"#;
    let mut standing = request("standing-o-9", "orders.refund", input, &[]);
    standing.standing =
        Some(pb::StandingTerms { uses_max: 100, window_ms: 7 * 86_400_000, bound_pointers: vec!["/order_id".into()] });
    let standing = create(&cluster, standing).await.expect("a standing approval");
    let terms: serde_json::Value = serde_json::from_str(&standing.terms_json).expect("terms JSON");
    assert_eq!(terms["uses"]["max"], 100, "{terms}");
    assert_eq!(terms["uses"]["windowMs"], 7 * 86_400_000u64, "{terms}");
    assert_eq!(terms["uses"]["bound"], serde_json::json!([{"pointer": "/order_id", "value": "o-9"}]), "{terms}");
    assert_eq!(terms["capability"]["risk"], "high", "the registered risk, not the requester's `low`: {terms}");
    let one_shot = create(&cluster, request("one-o-9", "orders.refund", input, &[])).await.expect("a one-shot");
    assert_eq!(serde_json::from_str::<serde_json::Value>(&one_shot.terms_json).expect("JSON")["uses"]["max"], 1);
    let mistaken = approve(&cluster, ANYONE, "standing-o-9", &one_shot.terms_hash).await.expect_err("mistaken");
    assert_eq!(code(&mistaken), "APPROVAL_TERMS_CHANGED", "{mistaken:?}");
    assert_eq!(get(&cluster, "standing-o-9").await.status, pb::ApprovalStatus::Pending as i32);
    // A policy may forbid standing approvals for what it governs.
    let forbid = ["policy", "set", "refunds", "--types", "refund", "--factor", "anyone=1/group/user:anyone"];
    gavel_as(&cluster, &admin, &[&forbid[..], &["--forbid-standing"]].concat()).await.succeeded();
    let mut again = request("standing-o-10", "orders.refund", input, &[]);
    again.standing = Some(pb::StandingTerms { uses_max: 2, window_ms: 60_000, bound_pointers: vec![] });
    let forbidden = create(&cluster, again).await.expect_err("forbidden");
    assert_eq!(code(&forbidden), "APPROVAL_STANDING_FORBIDDEN", "{forbidden:?}");

    // ----- 3. the requester does not choose the policy that governs it -----
    let pay2 = ["policy", "set", "pay2", "--types", "wire", "--factor", "finance=2/scope/finance"];
    gavel_as(&cluster, &admin, &pay2).await.succeeded();
    for (id, types) in [("wire-untyped", vec![]), ("wire-other", vec!["chat"])] {
        let created = create(&cluster, request(id, "payments.wire", wire, &types)).await.expect("created");
        let governed = created.quorum.as_ref().map(|quorum| quorum.policy.as_str());
        assert_eq!(governed, Some("pay2"), "{id} is governed by the policy on its registered type");
        let alone = approve(&cluster, ANYONE, id, &created.terms_hash).await.expect_err("one unscoped approver");
        assert_eq!(code(&alone), "PERMISSION_DENIED", "{alone:?}");
        let first = approve(&cluster, FIN1, id, &created.terms_hash).await.expect("a finance vote");
        assert_eq!(first.status, pb::ApprovalStatus::Pending as i32, "one of two finance approvers");
        let second = approve(&cluster, FIN2, id, &created.terms_hash).await.expect("a second finance vote");
        assert_eq!(second.status, pb::ApprovalStatus::Approved as i32);
    }
    // A policy may target the risk the registration declares: the request's
    // own `low` label changes nothing.
    register(&cluster, "treasury.move", pb::SideEffect::External, pb::Risk::Critical, "treasury").await;
    let critical = ["policy", "set", "critical", "--risks", "critical", "--factor", "finance=2/scope/finance"];
    gavel_as(&cluster, &admin, &critical).await.succeeded();
    let moved = create(&cluster, request("move-1", "treasury.move", wire, &[])).await.expect("created");
    assert_eq!(moved.quorum.as_ref().map(|quorum| quorum.policy.as_str()), Some("critical"));
    let listed = gavel_as(&cluster, &admin, &["policy", "get", "critical", "--json"]).await.json();
    assert_eq!(listed["policies"][0]["risks"], serde_json::json!(["critical"]), "{listed}");
}
