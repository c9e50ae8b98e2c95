//! The approval contract of SPEC §3, checked through gRPC on one three-node
//! cluster. Every behaviour is exercised both on the leader and on a follower,
//! which forwards mutations and linearizable reads to the leader.

mod support;

use gavel_proto::v1 as pb;
use support::{expect_refusal, now_ms, retry, Cluster};
use tonic::{Code, Status};

/// SHA-256 of the RFC 8785 form of [`INPUT_JSON`], `{"amount":10,"note":"x","order":"o-1"}`,
/// computed outside Gavel (`printf '%s' ... | sha256sum`).
const INPUT_HASH: &str = "de786db1d59c8e7821e797307686c1723bd2484c83304c37691becc5a66bb2c0";
/// An input whose keys are not in canonical order.
const INPUT_JSON: &str = r#"{"order":"o-1","amount":10,"note":"x"}"#;

/// Minutes in milliseconds, for readable expiry arithmetic.
const MINUTE_MS: i64 = 60_000;

/// The endpoints the checks talk to: the leader and one follower.
struct Nodes {
    leader: u64,
    follower: u64,
}

fn request_id(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4())
}

fn actor(id: &str, kind: pb::ActorKind) -> pb::Actor {
    pb::Actor { id: id.to_string(), kind: kind as i32, ..pb::Actor::default() }
}

fn user(id: &str) -> pb::Actor {
    actor(id, pb::ActorKind::User)
}

/// A minimal valid create request for `id` on `capability_id`, requested by `requester`.
fn create_request(id: &str, capability_id: &str, requester: &str) -> pb::CreateApprovalRequest {
    pb::CreateApprovalRequest {
        request_id: request_id("create"),
        id: id.to_string(),
        capability_id: capability_id.to_string(),
        surface: "contract-test".to_string(),
        actor: Some(user(requester)),
        input_json: r#"{"k":1}"#.to_string(),
        risk: pb::Risk::Medium as i32,
        side_effect: pb::SideEffect::Write as i32,
        ..pb::CreateApprovalRequest::default()
    }
}

fn decide_request(id: &str, status: pb::ApprovalStatus, approver: Option<pb::Actor>) -> pb::DecideApprovalRequest {
    pb::DecideApprovalRequest {
        request_id: request_id("decide"),
        id: id.to_string(),
        status: status as i32,
        approver,
        ..pb::DecideApprovalRequest::default()
    }
}

async fn create(cluster: &Cluster, via: u64, request: pb::CreateApprovalRequest) -> Result<pb::Approval, Status> {
    retry(|| {
        let mut client = cluster.approvals(via);
        let request = request.clone();
        async move { client.create_approval(request).await }
    })
    .await
    .map(|response| response.into_inner().approval.expect("create answers with the approval"))
}

/// The record `id` as a read returns it, without what the read adds for
/// its caller (`controls`, which a write's reply does not carry), so reads
/// and replies compare field for field (the contract test checks `controls` once, through [`read`]).
async fn get(cluster: &Cluster, via: u64, id: &str, caller_now_ms: Option<i64>) -> Option<pb::Approval> {
    read(cluster, via, id, caller_now_ms).await.map(|approval| pb::Approval { controls: None, ..approval })
}

/// `None` when the cluster answers `NOT_FOUND` ([`support::found`]).
async fn read(cluster: &Cluster, via: u64, id: &str, caller_now_ms: Option<i64>) -> Option<pb::Approval> {
    let read = retry(|| {
        let mut client = cluster.approvals(via);
        let request = pb::GetApprovalRequest { id: id.to_string(), caller_now_ms };
        async move { client.get_approval(request).await }
    })
    .await;
    support::found(read, "approval", id)?.into_inner().approval
}

async fn decide(cluster: &Cluster, via: u64, request: pb::DecideApprovalRequest) -> Result<pb::Approval, Status> {
    retry(|| {
        let mut client = cluster.approvals(via);
        let request = request.clone();
        async move { client.decide_approval(request).await }
    })
    .await
    .map(|response| response.into_inner().approval.expect("decide answers with the approval"))
}

async fn consume(
    cluster: &Cluster,
    via: u64,
    request_id: &str,
    id: &str,
    execution_id: &str,
) -> Result<pb::Approval, Status> {
    retry(|| {
        let mut client = cluster.approvals(via);
        let request = pb::ConsumeApprovalRequest {
            request_id: request_id.to_string(),
            id: id.to_string(),
            execution_id: execution_id.to_string(),
            ..pb::ConsumeApprovalRequest::default()
        };
        async move { client.consume_approval(request).await }
    })
    .await
    .map(|response| response.into_inner().approval.expect("consume answers with the approval"))
}

async fn cancel(cluster: &Cluster, via: u64, id: &str) -> Result<pb::Approval, Status> {
    let request_id = request_id("cancel");
    retry(|| {
        let mut client = cluster.approvals(via);
        let request = pb::CancelApprovalRequest {
            request_id: request_id.clone(),
            id: id.to_string(),
            ..pb::CancelApprovalRequest::default()
        };
        async move { client.cancel_approval(request).await }
    })
    .await
    .map(|response| response.into_inner().approval.expect("cancel answers with the approval"))
}

async fn list(cluster: &Cluster, via: u64, request: pb::ListApprovalsRequest) -> pb::ListApprovalsResponse {
    retry(|| {
        let mut client = cluster.approvals(via);
        let request = request.clone();
        async move { client.list_approvals(request).await }
    })
    .await
    .expect("list approvals")
    .into_inner()
}

async fn list_ids(cluster: &Cluster, via: u64, request: pb::ListApprovalsRequest) -> Vec<String> {
    let response = list(cluster, via, request).await;
    response.approvals.into_iter().map(|approval| approval.id).collect()
}

/// Every event of the trail (the test cluster holds a few hundred at most).
async fn all_events(cluster: &Cluster, via: u64) -> Vec<pb::Event> {
    let mut events = Vec::new();
    let mut after_cursor = 0;
    loop {
        let page = retry(|| {
            let mut client = cluster.audit(via);
            let request = pb::ListEventsRequest {
                after_cursor,
                limit: 500,
                execution_id: None,
                ..pb::ListEventsRequest::default()
            };
            async move { client.list_events(request).await }
        })
        .await
        .expect("list events")
        .into_inner();
        if page.events.is_empty() {
            return events;
        }
        after_cursor = page.last_cursor;
        events.extend(page.events);
    }
}

fn status_of(approval: &pb::Approval) -> pb::ApprovalStatus {
    pb::ApprovalStatus::try_from(approval.status).expect("a known status")
}

async fn create_stores_every_field_and_refuses_a_duplicate_id(cluster: &Cluster, nodes: &Nodes) {
    let requested_at_ms = now_ms();
    let request = pb::CreateApprovalRequest {
        request_id: request_id("create-fields"),
        caller_now_ms: None,
        id: "apr-fields".to_string(),
        capability_id: "payments.refund".to_string(),
        surface: "agent:refunds".to_string(),
        actor: Some(pb::Actor {
            id: "alice".to_string(),
            kind: pb::ActorKind::Automation as i32,
            display_name: Some("Alice's agent".to_string()),
            ..pb::Actor::default()
        }),
        input_json: INPUT_JSON.to_string(),
        input_hash: Some(INPUT_HASH.to_string()),
        reasons: vec!["amount over the limit".to_string(), "new payee".to_string()],
        types: vec!["finance".to_string(), "manager".to_string()],
        risk: pb::Risk::High as i32,
        side_effect: pb::SideEffect::External as i32,
        requested_at_ms: Some(requested_at_ms),
        expires_at_ms: Some(requested_at_ms + 10 * MINUTE_MS),
        expires_in_ms: None,
        allow_self_approval: false,
        standing: None,
    };
    let created = create(cluster, nodes.follower, request.clone()).await.expect("create through the follower");
    assert_eq!(created.id, "apr-fields");
    assert_eq!(created.capability_id, "payments.refund");
    assert_eq!(created.surface, "agent:refunds");
    assert_eq!(created.actor, request.actor);
    let stored: serde_json::Value = serde_json::from_str(&created.input_json).expect("stored input is JSON");
    let sent: serde_json::Value = serde_json::from_str(INPUT_JSON).expect("sent input is JSON");
    assert_eq!(stored, sent, "the stored input is the input sent");
    assert_eq!(created.input_hash, INPUT_HASH, "the input hash is SHA-256 of RFC 8785 JSON");
    assert_eq!(created.reasons, request.reasons);
    assert_eq!(created.types, request.types);
    assert_eq!(created.risk, pb::Risk::High as i32);
    assert_eq!(created.side_effect, pb::SideEffect::External as i32);
    assert_eq!(created.requested_at_ms, requested_at_ms);
    assert_eq!(created.expires_at_ms, requested_at_ms + 10 * MINUTE_MS);
    assert!(!created.allow_self_approval);
    assert_eq!(status_of(&created), pb::ApprovalStatus::Pending);
    assert_eq!(created.decision, None);
    assert_eq!(created.consumed_by_execution_id, None);
    assert_eq!(created.execution_id, None, "a direct create belongs to no execution");
    assert_eq!(created.capability_version, None);

    for via in [nodes.leader, nodes.follower] {
        let read = read(cluster, via, "apr-fields", None).await.expect("the approval");
        // A read also says what its caller may do with it (an insecure
        // cluster checks no one); a write's reply does not.
        assert_eq!(created.controls, None);
        let controls = read.controls.clone().expect("a read carries the caller's controls");
        assert!(controls.may_decide && !controls.may_withdraw, "{controls:?}");
        assert_eq!(pb::Approval { controls: None, ..read }, created, "get through node {via}");
    }

    // A retry with the same request id is the same request: it gets the original answer.
    let repeated = create(cluster, nodes.leader, request.clone()).await.expect("a retried create succeeds");
    assert_eq!(repeated, created);

    // A new request with the same approval id is a duplicate.
    for via in [nodes.leader, nodes.follower] {
        let duplicate = pb::CreateApprovalRequest { request_id: request_id("create-dup"), ..request.clone() };
        let status = expect_refusal(create(cluster, via, duplicate).await, Code::AlreadyExists, "ALREADY_EXISTS");
        assert_eq!(status.message(), r#"approval "apr-fields" already exists"#);
    }

    // A caller-computed hash must match the server's.
    let mut wrong_hash = create_request("apr-wrong-hash", "payments.refund", "alice");
    wrong_hash.input_hash = Some("0".repeat(64));
    expect_refusal(create(cluster, nodes.follower, wrong_hash).await, Code::InvalidArgument, "INVALID_ARGUMENT");
    assert_eq!(get(cluster, nodes.leader, "apr-wrong-hash", None).await, None, "a refused create stores nothing");

    // Defaults: requested now (cluster clock), expiring 15 minutes later.
    let before_ms = now_ms();
    let defaulted = create(cluster, nodes.leader, create_request("apr-defaults", "payments.refund", "alice"))
        .await
        .expect("create with defaults");
    let after_ms = now_ms();
    assert!(
        (before_ms - 1_000..=after_ms + 1_000).contains(&defaulted.requested_at_ms),
        "requested_at_ms {} defaults to the cluster clock (test clock {before_ms}..{after_ms})",
        defaulted.requested_at_ms
    );
    assert_eq!(defaulted.expires_at_ms, defaulted.requested_at_ms + 15 * MINUTE_MS);
}

async fn get_of_an_unknown_id_answers_without_an_approval(cluster: &Cluster, nodes: &Nodes) {
    for via in [nodes.leader, nodes.follower] {
        assert_eq!(get(cluster, via, "apr-never-created", None).await, None, "through node {via}");
    }
}

async fn expiry_is_computed_at_read_time_and_never_written_back(cluster: &Cluster, nodes: &Nodes) {
    let start_ms = now_ms();
    let mut request = create_request("apr-expiring", "expiry.cap", "alice");
    request.caller_now_ms = Some(start_ms);
    request.expires_in_ms = Some(10 * MINUTE_MS as u64);
    let created = create(cluster, nodes.follower, request).await.expect("create with the caller's clock");
    assert_eq!(created.requested_at_ms, start_ms, "requested_at defaults to the caller's now");
    assert_eq!(created.expires_at_ms, start_ms + 10 * MINUTE_MS);

    let expires_at_ms = created.expires_at_ms;
    let later_ms = expires_at_ms + 1;
    for via in [nodes.leader, nodes.follower] {
        let at_expiry = get(cluster, via, "apr-expiring", Some(expires_at_ms)).await.expect("approval");
        assert_eq!(status_of(&at_expiry), pb::ApprovalStatus::Pending, "not expired at expires_at itself");
        let after = get(cluster, via, "apr-expiring", Some(later_ms)).await.expect("approval");
        assert_eq!(status_of(&after), pb::ApprovalStatus::Expired, "expired after expires_at, by the caller's clock");
        let now = get(cluster, via, "apr-expiring", None).await.expect("approval");
        assert_eq!(status_of(&now), pb::ApprovalStatus::Pending, "still pending by the cluster's clock");
    }

    let filtered = |status: pb::ApprovalStatus, caller_now_ms: Option<i64>| pb::ListApprovalsRequest {
        status: Some(status as i32),
        capability_id: Some("expiry.cap".to_string()),
        caller_now_ms,
        ..pb::ListApprovalsRequest::default()
    };
    let expired_later = list_ids(cluster, nodes.follower, filtered(pb::ApprovalStatus::Expired, Some(later_ms))).await;
    assert_eq!(expired_later, ["apr-expiring"], "the status filter sees lazy expiry");
    let listed = list(cluster, nodes.leader, filtered(pb::ApprovalStatus::Expired, Some(later_ms))).await;
    assert_eq!(status_of(&listed.approvals[0]), pb::ApprovalStatus::Expired);
    let pending_later = list_ids(cluster, nodes.leader, filtered(pb::ApprovalStatus::Pending, Some(later_ms))).await;
    assert!(pending_later.is_empty(), "{pending_later:?}");
    let expired_now = list_ids(cluster, nodes.leader, filtered(pb::ApprovalStatus::Expired, None)).await;
    assert!(expired_now.is_empty(), "not expired by the cluster clock: {expired_now:?}");
    let pending_now = list_ids(cluster, nodes.follower, filtered(pb::ApprovalStatus::Pending, None)).await;
    assert_eq!(pending_now, ["apr-expiring"]);

    // Deciding with a clock past expiry is refused, and changes nothing.
    let mut late = decide_request("apr-expiring", pb::ApprovalStatus::Approved, Some(user("bob")));
    late.caller_now_ms = Some(later_ms);
    let status =
        expect_refusal(decide(cluster, nodes.follower, late).await, Code::FailedPrecondition, "FAILED_PRECONDITION");
    assert_eq!(status.message(), "approval apr-expiring is not pending (status: expired)");
    let unchanged = get(cluster, nodes.leader, "apr-expiring", None).await.expect("approval");
    assert_eq!(status_of(&unchanged), pb::ApprovalStatus::Pending, "expiry is never written back");

    // By the cluster clock it is still pending, so it can be decided.
    let approved =
        decide(cluster, nodes.leader, decide_request("apr-expiring", pb::ApprovalStatus::Approved, Some(user("bob"))))
            .await
            .expect("decide before expiry by the cluster clock");
    assert_eq!(status_of(&approved), pb::ApprovalStatus::Approved);
}

async fn decide_validates_before_any_state_change(cluster: &Cluster, nodes: &Nodes) {
    create(cluster, nodes.leader, create_request("apr-validate", "decide.cap", "alice")).await.expect("create");
    for via in [nodes.leader, nodes.follower] {
        for bad_status in [pb::ApprovalStatus::Unspecified, pb::ApprovalStatus::Expired, pb::ApprovalStatus::Consumed] {
            let request = decide_request("apr-validate", bad_status, Some(user("bob")));
            let status = expect_refusal(decide(cluster, via, request).await, Code::InvalidArgument, "INVALID_ARGUMENT");
            assert!(status.message().contains("invalid decision status"), "{bad_status:?}: {}", status.message());
        }
        let mut unknown_status = decide_request("apr-validate", pb::ApprovalStatus::Approved, Some(user("bob")));
        unknown_status.status = 42;
        let status =
            expect_refusal(decide(cluster, via, unknown_status).await, Code::InvalidArgument, "INVALID_ARGUMENT");
        assert!(status.message().contains("invalid decision status"), "{}", status.message());

        let bad_approvers = [
            None,
            Some(user("")),
            Some(actor("bob", pb::ActorKind::Unspecified)),
            Some(pb::Actor { kind: 17, ..user("bob") }),
        ];
        for approver in bad_approvers {
            let request = decide_request("apr-validate", pb::ApprovalStatus::Approved, approver.clone());
            let status = expect_refusal(decide(cluster, via, request).await, Code::InvalidArgument, "INVALID_ARGUMENT");
            assert!(status.message().contains("approver"), "{approver:?}: {}", status.message());
        }
        // Validation comes first: an invalid decision on an unknown id is INVALID_ARGUMENT, not NOT_FOUND.
        let request = decide_request("apr-unknown", pb::ApprovalStatus::Unspecified, Some(user("bob")));
        expect_refusal(decide(cluster, via, request).await, Code::InvalidArgument, "INVALID_ARGUMENT");
    }
    let untouched = get(cluster, nodes.leader, "apr-validate", None).await.expect("approval");
    assert_eq!(status_of(&untouched), pb::ApprovalStatus::Pending);
    assert_eq!(untouched.decision, None, "refused decisions leave no trace");
}

async fn decide_transitions_only_a_pending_approval_once(cluster: &Cluster, nodes: &Nodes) {
    let mut request = decide_request("apr-validate", pb::ApprovalStatus::Approved, Some(user("bob")));
    request.comment = Some("looks right".to_string());
    let before_ms = now_ms();
    let approved = decide(cluster, nodes.follower, request.clone()).await.expect("approve through the follower");
    assert_eq!(status_of(&approved), pb::ApprovalStatus::Approved);
    let decision = approved.decision.clone().expect("a decision is recorded");
    assert_eq!(decision.status, pb::ApprovalStatus::Approved as i32);
    assert_eq!(decision.approver, Some(user("bob")));
    assert_eq!(decision.comment.as_deref(), Some("looks right"));
    assert!(
        decision.decided_at_ms >= before_ms - 1_000,
        "decided_at_ms {} is the cluster clock",
        decision.decided_at_ms
    );
    assert_eq!(get(cluster, nodes.leader, "apr-validate", None).await, Some(approved.clone()));

    // The same request again (a client retry) gets the original answer, not a refusal.
    let repeated = decide(cluster, nodes.leader, request).await.expect("a retried decide succeeds");
    assert_eq!(repeated.decision, approved.decision);

    for (via, status) in [(nodes.leader, pb::ApprovalStatus::Rejected), (nodes.follower, pb::ApprovalStatus::Approved)]
    {
        let again = decide_request("apr-validate", status, Some(user("carol")));
        let refusal =
            expect_refusal(decide(cluster, via, again).await, Code::FailedPrecondition, "FAILED_PRECONDITION");
        assert_eq!(refusal.message(), "approval apr-validate is not pending (status: approved)");
    }

    create(cluster, nodes.leader, create_request("apr-rejected", "decide.cap", "alice")).await.expect("create");
    let rejected =
        decide(cluster, nodes.leader, decide_request("apr-rejected", pb::ApprovalStatus::Rejected, Some(user("bob"))))
            .await
            .expect("reject");
    assert_eq!(status_of(&rejected), pb::ApprovalStatus::Rejected);
    assert_eq!(rejected.decision.as_ref().map(|decision| decision.status), Some(pb::ApprovalStatus::Rejected as i32));
    let again = decide_request("apr-rejected", pb::ApprovalStatus::Approved, Some(user("bob")));
    let refusal =
        expect_refusal(decide(cluster, nodes.follower, again).await, Code::FailedPrecondition, "FAILED_PRECONDITION");
    assert_eq!(refusal.message(), "approval apr-rejected is not pending (status: rejected)");

    for via in [nodes.leader, nodes.follower] {
        let unknown = decide_request("apr-nowhere", pb::ApprovalStatus::Approved, Some(user("bob")));
        let refusal = expect_refusal(decide(cluster, via, unknown).await, Code::NotFound, "NOT_FOUND");
        assert_eq!(refusal.message(), "approval apr-nowhere was not found");
    }
}

async fn the_requester_cannot_approve_unless_the_request_opted_out(cluster: &Cluster, nodes: &Nodes) {
    create(cluster, nodes.leader, create_request("apr-self", "self.cap", "alice")).await.expect("create");
    for via in [nodes.leader, nodes.follower] {
        for status in [pb::ApprovalStatus::Approved, pb::ApprovalStatus::Rejected] {
            let request = decide_request("apr-self", status, Some(user("alice")));
            expect_refusal(decide(cluster, via, request).await, Code::PermissionDenied, "APPROVAL_SELF_APPROVAL");
        }
    }
    let untouched = get(cluster, nodes.leader, "apr-self", None).await.expect("approval");
    assert_eq!(status_of(&untouched), pb::ApprovalStatus::Pending);

    let mut opted_out = create_request("apr-self-allowed", "self.cap", "alice");
    opted_out.allow_self_approval = true;
    let created = create(cluster, nodes.follower, opted_out).await.expect("create");
    assert!(created.allow_self_approval);
    let approved = decide(
        cluster,
        nodes.follower,
        decide_request("apr-self-allowed", pb::ApprovalStatus::Approved, Some(user("alice"))),
    )
    .await
    .expect("self-approval after opting out");
    assert_eq!(status_of(&approved), pb::ApprovalStatus::Approved);
    assert_eq!(approved.decision.and_then(|decision| decision.approver), Some(user("alice")));
}

async fn consume_spends_an_approval_once_and_a_retry_gets_the_first_answer(cluster: &Cluster, nodes: &Nodes) {
    create(cluster, nodes.leader, create_request("apr-consume", "consume.cap", "alice")).await.expect("create");

    let pending = consume(cluster, nodes.follower, &request_id("consume"), "apr-consume", "ex-early").await;
    let refusal = expect_refusal(pending, Code::FailedPrecondition, "FAILED_PRECONDITION");
    assert_eq!(refusal.message(), "approval apr-consume cannot be consumed (status: pending)");

    decide(cluster, nodes.leader, decide_request("apr-consume", pb::ApprovalStatus::Approved, Some(user("bob"))))
        .await
        .expect("approve");

    let consume_id = request_id("consume-once");
    let first = consume(cluster, nodes.follower, &consume_id, "apr-consume", "ex-1").await.expect("first consume");
    assert_eq!(status_of(&first), pb::ApprovalStatus::Consumed);
    assert_eq!(first.consumed_by_execution_id.as_deref(), Some("ex-1"));
    assert_eq!(first.decision.as_ref().and_then(|decision| decision.approver.clone()), Some(user("bob")));

    // The same request id, through another node: the original answer, no second effect.
    let repeated = consume(cluster, nodes.leader, &consume_id, "apr-consume", "ex-1").await.expect("retried consume");
    assert_eq!(repeated, first);

    for via in [nodes.leader, nodes.follower] {
        let second = consume(cluster, via, &request_id("consume-twice"), "apr-consume", "ex-2").await;
        let refusal = expect_refusal(second, Code::FailedPrecondition, "FAILED_PRECONDITION");
        assert_eq!(refusal.message(), "approval apr-consume cannot be consumed (status: consumed, consumed by ex-1)");
    }
    let stored = get(cluster, nodes.follower, "apr-consume", None).await.expect("approval");
    assert_eq!(stored.consumed_by_execution_id.as_deref(), Some("ex-1"), "the winner stays recorded");

    let consumed_events: Vec<pb::Event> = all_events(cluster, nodes.follower)
        .await
        .into_iter()
        .filter(|event| event.approval_id.as_deref() == Some("apr-consume") && event.r#type == "approval.consumed")
        .collect();
    assert_eq!(consumed_events.len(), 1, "one consumption, one event: {consumed_events:?}");

    // A request id reused for a different request is refused, not replayed.
    let reused = consume(cluster, nodes.leader, &consume_id, "apr-consume", "ex-3").await;
    expect_refusal(reused, Code::InvalidArgument, "REQUEST_ID_REUSED");

    let unknown = consume(cluster, nodes.follower, &request_id("consume"), "apr-missing", "ex-1").await;
    let refusal = expect_refusal(unknown, Code::NotFound, "NOT_FOUND");
    assert_eq!(refusal.message(), "approval apr-missing was not found");
}

async fn list_filters_compose_and_pages_follow_requested_at_then_id(cluster: &Cluster, nodes: &Nodes) {
    let base_ms = now_ms();
    let records = [
        ("lst-b", "list.cap", "alice", base_ms + 1_000),
        ("lst-a", "list.cap", "bob", base_ms + 1_000),
        ("lst-d", "list.cap", "alice", base_ms + 2_000),
        ("lst-c", "list.cap", "alice", base_ms + 500),
        ("lst-e", "list.other", "carol", base_ms + 100),
    ];
    for (id, capability_id, requester, requested_at_ms) in records {
        let mut request = create_request(id, capability_id, requester);
        request.requested_at_ms = Some(requested_at_ms);
        create(cluster, nodes.leader, request).await.expect("create for listing");
    }
    decide(cluster, nodes.follower, decide_request("lst-d", pb::ApprovalStatus::Rejected, Some(user("bob"))))
        .await
        .expect("reject lst-d");

    // SPEC §3's order, (requested_at, id), is the oldest-first listing; a
    // listing that asks for no order is newest first (issue #40).
    let newest_by_default =
        pb::ListApprovalsRequest { capability_id: Some("list.cap".to_string()), ..pb::ListApprovalsRequest::default() };
    assert_eq!(list_ids(cluster, nodes.follower, newest_by_default).await, ["lst-d", "lst-b", "lst-a", "lst-c"]);
    let query = |status: Option<pb::ApprovalStatus>, capability_id: Option<&str>, actor_id: Option<&str>| {
        pb::ListApprovalsRequest {
            status: status.map(|status| status as i32),
            capability_id: capability_id.map(str::to_string),
            actor_id: actor_id.map(str::to_string),
            oldest_first: true,
            ..pb::ListApprovalsRequest::default()
        }
    };
    use pb::ApprovalStatus::{Pending, Rejected};
    let cases: [(pb::ListApprovalsRequest, &[&str]); 8] = [
        (query(None, Some("list.cap"), None), &["lst-c", "lst-a", "lst-b", "lst-d"]),
        (query(Some(Pending), Some("list.cap"), None), &["lst-c", "lst-a", "lst-b"]),
        (query(Some(Rejected), Some("list.cap"), None), &["lst-d"]),
        (query(None, Some("list.cap"), Some("alice")), &["lst-c", "lst-b", "lst-d"]),
        (query(Some(Pending), Some("list.cap"), Some("alice")), &["lst-c", "lst-b"]),
        (query(None, None, Some("carol")), &["lst-e"]),
        (query(None, Some("list.cap"), Some("carol")), &[]),
        (query(Some(Rejected), Some("list.other"), None), &[]),
    ];
    for (request, expected) in cases {
        for via in [nodes.leader, nodes.follower] {
            assert_eq!(list_ids(cluster, via, request.clone()).await, expected, "{request:?} through node {via}");
        }
    }

    // Pages of two, through the follower, concatenate to the whole ordered list.
    let mut pages = Vec::new();
    let mut page_token = String::new();
    loop {
        let request = pb::ListApprovalsRequest {
            limit: 2,
            page_token: page_token.clone(),
            ..query(None, Some("list.cap"), None)
        };
        let page = list(cluster, nodes.follower, request).await;
        assert!(page.approvals.len() <= 2, "a page honours the limit");
        pages.push(page.approvals.iter().map(|approval| approval.id.clone()).collect::<Vec<_>>());
        if page.next_page_token.is_empty() {
            break;
        }
        assert!(pages.len() < 10, "pagination terminates");
        page_token = page.next_page_token;
    }
    assert_eq!(pages.concat(), ["lst-c", "lst-a", "lst-b", "lst-d"], "pages: {pages:?}");
    assert_eq!(pages[0], ["lst-c", "lst-a"]);
    assert_eq!(pages[1], ["lst-b", "lst-d"]);

    // Newest first, in pages of three through the follower: the same list reversed.
    let mut newest = Vec::new();
    let mut page_token = String::new();
    loop {
        let request = pb::ListApprovalsRequest {
            limit: 3,
            oldest_first: false,
            page_token: page_token.clone(),
            ..query(None, Some("list.cap"), None)
        };
        let page = list(cluster, nodes.follower, request).await;
        newest.push(page.approvals.iter().map(|approval| approval.id.clone()).collect::<Vec<_>>());
        if page.next_page_token.is_empty() {
            break;
        }
        assert!(newest.len() < 10, "pagination terminates");
        page_token = page.next_page_token;
    }
    assert_eq!(newest, [vec!["lst-d", "lst-b", "lst-a"], vec!["lst-c"]]);
}

async fn cancel_withdraws_only_a_pending_approval(cluster: &Cluster, nodes: &Nodes) {
    create(cluster, nodes.leader, create_request("apr-cancel", "cancel.cap", "alice")).await.expect("create");
    let cancelled = cancel(cluster, nodes.follower, "apr-cancel").await.expect("cancel through the follower");
    assert_eq!(status_of(&cancelled), pb::ApprovalStatus::Cancelled);
    assert_eq!(cancelled.decision, None);
    let stored = get(cluster, nodes.leader, "apr-cancel", None).await.expect("approval");
    assert_eq!(status_of(&stored), pb::ApprovalStatus::Cancelled);

    let again = expect_refusal(
        cancel(cluster, nodes.leader, "apr-cancel").await,
        Code::FailedPrecondition,
        "FAILED_PRECONDITION",
    );
    assert_eq!(again.message(), "approval apr-cancel is not pending (status: cancelled)");
    let decided =
        decide(cluster, nodes.follower, decide_request("apr-cancel", pb::ApprovalStatus::Approved, Some(user("bob"))))
            .await;
    let refusal = expect_refusal(decided, Code::FailedPrecondition, "FAILED_PRECONDITION");
    assert_eq!(refusal.message(), "approval apr-cancel is not pending (status: cancelled)");
    let consumed = consume(cluster, nodes.leader, &request_id("consume"), "apr-cancel", "ex-1").await;
    let refusal = expect_refusal(consumed, Code::FailedPrecondition, "FAILED_PRECONDITION");
    assert_eq!(refusal.message(), "approval apr-cancel cannot be consumed (status: cancelled)");

    // An approved approval is no longer the application's to withdraw.
    let approved = expect_refusal(
        cancel(cluster, nodes.follower, "apr-validate").await,
        Code::FailedPrecondition,
        "FAILED_PRECONDITION",
    );
    assert_eq!(approved.message(), "approval apr-validate is not pending (status: approved)");

    let unknown = expect_refusal(cancel(cluster, nodes.follower, "apr-absent").await, Code::NotFound, "NOT_FOUND");
    assert_eq!(unknown.message(), "approval apr-absent was not found");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn approvals_follow_the_contract_through_leader_and_follower() {
    let cluster = Cluster::start(3).await;
    let nodes = Nodes { leader: cluster.wait_for_leader().await, follower: cluster.follower().await };

    create_stores_every_field_and_refuses_a_duplicate_id(&cluster, &nodes).await;
    get_of_an_unknown_id_answers_without_an_approval(&cluster, &nodes).await;
    expiry_is_computed_at_read_time_and_never_written_back(&cluster, &nodes).await;
    decide_validates_before_any_state_change(&cluster, &nodes).await;
    decide_transitions_only_a_pending_approval_once(&cluster, &nodes).await;
    the_requester_cannot_approve_unless_the_request_opted_out(&cluster, &nodes).await;
    consume_spends_an_approval_once_and_a_retry_gets_the_first_answer(&cluster, &nodes).await;
    list_filters_compose_and_pages_follow_requested_at_then_id(&cluster, &nodes).await;
    cancel_withdraws_only_a_pending_approval(&cluster, &nodes).await;

    cluster.wait_converged().await;
}

/// Found by `gavel-lab chaos`: a create with `expires_in_ms`, retried with the same
/// request id later and through another node (what the SDK does after an
/// ambiguous failure), must get the first answer, not REQUEST_ID_REUSED.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_relative_expiry_create_retried_later_through_another_node_gets_the_first_answer() {
    let cluster = Cluster::start(3).await;
    let leader = cluster.wait_for_leader().await;
    let follower = cluster.follower().await;
    let request = pb::CreateApprovalRequest {
        expires_in_ms: Some(60_000),
        ..create_request("apr-retried", "orders.refund", "alice")
    };
    let first = create(&cluster, follower, request.clone()).await.expect("first attempt");
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    let retried = create(&cluster, leader, request).await.expect("the retry is the same request");
    assert_eq!(retried, first);
    assert_eq!(first.expires_at_ms, first.requested_at_ms + 60_000);
}
