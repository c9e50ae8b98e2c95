//! The execution contract of SPEC §4 and the audit trail of SPEC §5, checked
//! through gRPC on one three-node cluster: submission, approval and resume,
//! long-poll leasing, heartbeats, reports, lease expiry with retry and
//! fencing, cancellation, and a resumable event stream. Requests go to the
//! leader and to a follower, which forwards them.

mod support;

use std::time::{Duration, Instant};

use gavel_proto::v1 as pb;
use support::{eventually, expect_refusal, register, retry, user, Cluster, WAIT};
use tonic::{Code, Status};

/// The endpoints the checks talk to: the leader and one follower.
struct Nodes {
    leader: u64,
    follower: u64,
}

fn request_id(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4())
}

fn spec(id: &str, side_effect: pb::SideEffect) -> pb::CapabilitySpec {
    pb::CapabilitySpec {
        id: id.to_string(),
        side_effect: side_effect as i32,
        risk: pb::Risk::Low as i32,
        ..pb::CapabilitySpec::default()
    }
}

fn submit_request(execution_id: &str, capability_id: &str, input_json: &str) -> pb::SubmitRequest {
    pb::SubmitRequest {
        request_id: request_id("submit"),
        execution_id: Some(execution_id.to_string()),
        capability_id: capability_id.to_string(),
        input_json: input_json.to_string(),
        actor: Some(user("alice")),
        surface: "contract-test".to_string(),
        correlation_id: None,
    }
}

async fn submit(cluster: &Cluster, via: u64, request: pb::SubmitRequest) -> Result<pb::SubmitResponse, Status> {
    retry(|| {
        let mut client = cluster.executions(via);
        let request = request.clone();
        async move { client.submit(request).await }
    })
    .await
    .map(tonic::Response::into_inner)
}

/// Submits a capability that needs no approval and returns the queued execution.
async fn submit_queued(cluster: &Cluster, via: u64, request: pb::SubmitRequest) -> pb::Execution {
    match submit(cluster, via, request).await.expect("submit").outcome {
        Some(pb::submit_response::Outcome::Execution(execution)) => execution,
        other => panic!("expected an execution, got {other:?}"),
    }
}

async fn resume(
    cluster: &Cluster,
    via: u64,
    approval_id: &str,
    input_json: Option<&str>,
) -> Result<pb::Execution, Status> {
    let request = pb::ResumeRequest {
        request_id: request_id("resume"),
        approval_id: approval_id.to_string(),
        execution_id: None,
        input_json: input_json.map(str::to_string),
    };
    retry(|| {
        let mut client = cluster.executions(via);
        let request = request.clone();
        async move { client.resume(request).await }
    })
    .await
    .map(|response| response.into_inner().execution.expect("resume answers with the execution"))
}

async fn wait_execution(
    cluster: &Cluster,
    via: u64,
    execution_id: &str,
    timeout_ms: u64,
) -> Result<pb::WaitExecutionResponse, Status> {
    retry(|| {
        let mut client = cluster.executions(via);
        let request = pb::WaitExecutionRequest { execution_id: execution_id.to_string(), timeout_ms };
        async move { client.wait_execution(request).await }
    })
    .await
    .map(tonic::Response::into_inner)
}

async fn cancel_execution(cluster: &Cluster, via: u64, execution_id: &str) -> Result<pb::Execution, Status> {
    let request = pb::CancelExecutionRequest {
        request_id: request_id("cancel"),
        execution_id: execution_id.to_string(),
        actor: Some(user("carol")),
    };
    retry(|| {
        let mut client = cluster.executions(via);
        let request = request.clone();
        async move { client.cancel_execution(request).await }
    })
    .await
    .map(|response| response.into_inner().execution.expect("cancel answers with the execution"))
}

async fn decide(cluster: &Cluster, via: u64, approval_id: &str, status: pb::ApprovalStatus, approver: &str) {
    let request = pb::DecideApprovalRequest {
        request_id: request_id("decide"),
        id: approval_id.to_string(),
        status: status as i32,
        approver: Some(user(approver)),
        ..pb::DecideApprovalRequest::default()
    };
    retry(|| {
        let mut client = cluster.approvals(via);
        let request = request.clone();
        async move { client.decide_approval(request).await }
    })
    .await
    .expect("decide approval");
}

async fn poll(
    cluster: &Cluster,
    via: u64,
    worker_id: &str,
    queue: &str,
    wait_ms: u64,
) -> Result<Vec<pb::Task>, Status> {
    let request = pb::PollRequest {
        request_id: request_id("poll"),
        worker_id: worker_id.to_string(),
        queues: vec![queue.to_string()],
        max_tasks: 1,
        wait_ms,
    };
    retry(|| {
        let mut client = cluster.workers(via);
        let request = request.clone();
        async move { client.poll(request).await }
    })
    .await
    .map(|response| response.into_inner().tasks)
}

/// Polls until exactly one task arrives on `queue`.
async fn lease_one(cluster: &Cluster, via: u64, worker_id: &str, queue: &str) -> pb::Task {
    let mut tasks = poll(cluster, via, worker_id, queue, 5_000).await.expect("poll");
    assert_eq!(tasks.len(), 1, "one task on {queue}: {tasks:?}");
    tasks.remove(0)
}

async fn heartbeat(cluster: &Cluster, via: u64, task: &pb::Task) -> Result<pb::HeartbeatResponse, Status> {
    let request = pb::HeartbeatRequest {
        request_id: request_id("heartbeat"),
        lease_id: lease_id(task),
        worker_id: worker_of(task),
    };
    retry(|| {
        let mut client = cluster.workers(via);
        let request = request.clone();
        async move { client.heartbeat(request).await }
    })
    .await
    .map(tonic::Response::into_inner)
}

async fn report(cluster: &Cluster, via: u64, request: pb::ReportRequest) -> Result<pb::ReportResponse, Status> {
    retry(|| {
        let mut client = cluster.workers(via);
        let request = request.clone();
        async move { client.report(request).await }
    })
    .await
    .map(tonic::Response::into_inner)
}

fn completed_report(task: &pb::Task, output_json: &str) -> pb::ReportRequest {
    pb::ReportRequest {
        request_id: request_id("report"),
        lease_id: lease_id(task),
        worker_id: worker_of(task),
        outcome: Some(pb::report_request::Outcome::Completed(pb::ReportCompleted {
            output_json: output_json.to_string(),
        })),
    }
}

fn lease_id(task: &pb::Task) -> u64 {
    task.lease.as_ref().expect("a task carries its lease").lease_id
}

fn worker_of(task: &pb::Task) -> String {
    task.lease.as_ref().expect("a task carries its lease").worker_id.clone()
}

fn state_of(execution: &pb::Execution) -> pb::ExecutionState {
    pb::ExecutionState::try_from(execution.state).expect("a known state")
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).expect("valid JSON")
}

async fn list_events(cluster: &Cluster, via: u64, after_cursor: u64, execution_id: Option<&str>) -> Vec<pb::Event> {
    let mut events = Vec::new();
    let mut after_cursor = after_cursor;
    loop {
        let page = retry(|| {
            let mut client = cluster.audit(via);
            let request = pb::ListEventsRequest {
                after_cursor,
                limit: 50,
                execution_id: execution_id.map(str::to_string),
                ..pb::ListEventsRequest::default()
            };
            async move { client.list_events(request).await }
        })
        .await
        .expect("list events")
        .into_inner();
        if page.events.is_empty() {
            assert_eq!(page.last_cursor, after_cursor, "an empty page keeps the cursor");
            return events;
        }
        assert_eq!(page.last_cursor, page.events.last().map_or(0, |event| event.cursor));
        after_cursor = page.last_cursor;
        events.extend(page.events);
    }
}

fn types(events: &[pb::Event]) -> Vec<&str> {
    events.iter().map(|event| event.r#type.as_str()).collect()
}

async fn capabilities_register_with_defaults_resolved(cluster: &Cluster, nodes: &Nodes) {
    let docs = register(cluster, nodes.follower, spec("docs.read", pb::SideEffect::Read)).await;
    assert_eq!(docs.version, 1);
    let docs_spec = docs.spec.expect("spec");
    assert_eq!(docs_spec.timeout_ms, Some(30_000), "default timeout");
    assert_eq!(docs_spec.queue.as_deref(), Some("docs.read"), "the queue defaults to the capability id");

    let refund = pb::CapabilitySpec {
        risk: pb::Risk::High as i32,
        approval: Some(pb::ApprovalPolicy { required: true, r#type: Some("finance".to_string()), expires_in_ms: None }),
        ..spec("payments.refund", pb::SideEffect::External)
    };
    let refund = register(cluster, nodes.leader, refund).await;
    let policy = refund.spec.and_then(|spec| spec.approval).expect("approval policy");
    assert_eq!(policy.expires_in_ms, Some(900_000), "default approval validity");

    let flaky = pb::CapabilitySpec {
        timeout_ms: Some(500),
        retry: Some(pb::RetryConfig { max_attempts: 2, backoff_ms: Some(50), non_retryable_codes: Vec::new() }),
        ..spec("search.flaky", pb::SideEffect::Read)
    };
    register(cluster, nodes.follower, flaky).await;
    register(cluster, nodes.follower, spec("jobs.long", pb::SideEffect::Write)).await;
    register(cluster, nodes.leader, spec("wake.up", pb::SideEffect::None)).await;

    // Registering the same declaration again keeps its version.
    let again = register(cluster, nodes.leader, spec("docs.read", pb::SideEffect::Read)).await;
    assert_eq!(again.version, 1);
}

async fn submit_is_idempotent_by_execution_id(cluster: &Cluster, nodes: &Nodes) {
    let mut request = submit_request("ex-docs", "docs.read", r#"{"query":"raft","limit":3}"#);
    request.correlation_id = Some("corr-42".to_string());
    let response = submit(cluster, nodes.follower, request.clone()).await.expect("submit through the follower");
    assert!(response.created);
    let Some(pb::submit_response::Outcome::Execution(execution)) = response.outcome else {
        panic!("expected an execution: {response:?}");
    };
    assert_eq!(execution.execution_id, "ex-docs");
    assert_eq!(execution.capability_id, "docs.read");
    assert_eq!(execution.capability_version, 1);
    assert_eq!(state_of(&execution), pb::ExecutionState::Queued);
    assert_eq!(json(&execution.input_json), json(&request.input_json));
    assert_eq!(execution.input_hash.len(), 64);
    assert_eq!(execution.actor, Some(user("alice")));
    assert_eq!(execution.surface, "contract-test");
    assert_eq!(execution.correlation_id.as_deref(), Some("corr-42"));
    assert!(!execution.idempotency_key.is_empty());
    assert_eq!(execution.attempts, 0);
    assert_eq!(execution.result, None);

    // Same id, same input (keys in another order: the same canonical JSON), new request id.
    let same = pb::SubmitRequest {
        request_id: request_id("submit-again"),
        input_json: r#"{ "limit": 3, "query": "raft" }"#.to_string(),
        ..request.clone()
    };
    let repeated = submit(cluster, nodes.leader, same).await.expect("a repeated submit succeeds");
    assert!(!repeated.created, "the existing execution is returned");
    let Some(pb::submit_response::Outcome::Execution(existing)) = repeated.outcome else {
        panic!("expected an execution: {repeated:?}");
    };
    assert_eq!(existing.execution_id, "ex-docs");
    assert_eq!(existing.idempotency_key, execution.idempotency_key);

    for via in [nodes.leader, nodes.follower] {
        let different = pb::SubmitRequest {
            request_id: request_id("submit-different"),
            input_json: r#"{"query":"paxos","limit":3}"#.to_string(),
            ..request.clone()
        };
        expect_refusal(submit(cluster, via, different).await, Code::AlreadyExists, "ALREADY_EXISTS");
    }

    for via in [nodes.leader, nodes.follower] {
        let unknown = submit_request(&format!("ex-unknown-{via}"), "no.such.capability", "{}");
        expect_refusal(submit(cluster, via, unknown).await, Code::NotFound, "CAPABILITY_NOT_FOUND");
        let anonymous = pb::SubmitRequest { actor: None, ..submit_request("ex-anonymous", "docs.read", "{}") };
        expect_refusal(submit(cluster, via, anonymous).await, Code::Unauthenticated, "UNAUTHENTICATED");
    }
    assert_eq!(cluster.get_execution(nodes.leader, "ex-unknown-1").await, None);
    assert_eq!(cluster.get_execution(nodes.follower, "ex-anonymous").await, None);
}

async fn a_leased_task_carries_everything_a_worker_needs(cluster: &Cluster, nodes: &Nodes) {
    let execution = cluster.get_execution(nodes.leader, "ex-docs").await.expect("ex-docs exists");
    let task = lease_one(cluster, nodes.follower, "worker-docs", "docs.read").await;
    let lease = task.lease.clone().expect("lease");
    assert!(lease.lease_id > 0);
    assert_eq!(lease.execution_id, "ex-docs");
    assert_eq!(lease.attempt, 1);
    assert_eq!(lease.worker_id, "worker-docs");
    assert_eq!(lease.deadline_ms, lease.granted_at_ms + 30_000, "deadline = grant + timeout");
    assert_eq!(task.execution_id, "ex-docs");
    assert_eq!(task.attempt, 1);
    assert_eq!(task.idempotency_key, execution.idempotency_key);
    let capability = task.capability.clone().expect("capability snapshot");
    assert_eq!(capability.version, 1);
    assert_eq!(capability.spec.as_ref().map(|spec| spec.id.as_str()), Some("docs.read"));
    assert_eq!(json(&task.input_json), json(&execution.input_json));
    assert_eq!(task.actor, Some(user("alice")));
    assert_eq!(task.approver, None);
    assert_eq!(task.correlation_id.as_deref(), Some("corr-42"));

    let leased = cluster.get_execution(nodes.follower, "ex-docs").await.expect("execution");
    assert_eq!(state_of(&leased), pb::ExecutionState::Leased);
    assert_eq!(leased.current_lease, Some(lease.clone()));

    for via in [nodes.follower, nodes.leader] {
        let beat = heartbeat(cluster, via, &task).await.expect("heartbeat");
        assert!(!beat.cancel_requested);
        assert_eq!(beat.deadline_ms, lease.deadline_ms, "heartbeats do not move the deadline");
    }

    // Not final yet: the wait times out and says so.
    let started = Instant::now();
    let waited = wait_execution(cluster, nodes.follower, "ex-docs", 300).await.expect("wait");
    assert!(waited.timed_out);
    assert_eq!(waited.execution.as_ref().map(state_of), Some(pb::ExecutionState::Leased));
    assert!(started.elapsed() >= Duration::from_millis(250), "the wait lasted {:?}", started.elapsed());
    expect_refusal(wait_execution(cluster, nodes.leader, "ex-nowhere", 100).await, Code::NotFound, "NOT_FOUND");

    // A long wait returns as soon as the report finalizes the execution.
    let waiter = {
        let mut client = cluster.executions(nodes.follower);
        tokio::spawn(async move {
            let request = pb::WaitExecutionRequest { execution_id: "ex-docs".to_string(), timeout_ms: 20_000 };
            (client.wait_execution(request).await, Instant::now())
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await; // let the wait start first (not an assertion)
    let report_request = completed_report(&task, r#"{"hits":3}"#);
    let reported = report(cluster, nodes.leader, report_request.clone()).await.expect("report");
    let reported_at = Instant::now();
    assert!(!reported.retry_scheduled);
    let final_execution = reported.execution.expect("execution");
    assert_eq!(state_of(&final_execution), pb::ExecutionState::Completed);
    let Some(pb::result_envelope::Outcome::Completed(completed)) =
        final_execution.result.as_ref().and_then(|result| result.outcome.clone())
    else {
        panic!("expected a completed result: {final_execution:?}");
    };
    assert_eq!(json(&completed.output_json), json(r#"{"hits":3}"#));
    assert_eq!(completed.attempts, 1);
    assert_eq!(final_execution.current_lease, None);

    let (waited, returned_at) = tokio::time::timeout(WAIT, waiter).await.expect("the wait returns").expect("task");
    let waited = waited.expect("wait").into_inner();
    assert!(!waited.timed_out, "the execution became final during the wait");
    assert_eq!(waited.execution.as_ref().map(state_of), Some(pb::ExecutionState::Completed));
    assert!(
        returned_at.duration_since(reported_at) < Duration::from_secs(10),
        "the wait returned on finalization, not on its 20 s timeout"
    );
    let immediate = wait_execution(cluster, nodes.leader, "ex-docs", 10_000).await.expect("wait on a final execution");
    assert!(!immediate.timed_out);

    // The same report again (a worker retry) gets the same answer; another outcome is refused.
    let again = report(cluster, nodes.follower, report_request.clone()).await.expect("repeated report");
    assert_eq!(again.execution.as_ref().map(state_of), Some(pb::ExecutionState::Completed));
    let other_outcome = completed_report(&task, r#"{"hits":4}"#);
    expect_refusal(report(cluster, nodes.leader, other_outcome).await, Code::FailedPrecondition, "LEASE_LOST");
    let stored = cluster.get_execution(nodes.leader, "ex-docs").await.expect("execution");
    assert_eq!(stored.result, final_execution.result, "the final result never changes");
}

async fn approval_required_submit_then_resume(cluster: &Cluster, nodes: &Nodes) {
    let input = r#"{"order":"o-9","amount":25}"#;
    let response = submit(cluster, nodes.follower, submit_request("ex-refund", "payments.refund", input))
        .await
        .expect("submit needing approval");
    assert!(response.created);
    let Some(pb::submit_response::Outcome::ApprovalRequired(approval)) = response.outcome else {
        panic!("expected approval-required: {response:?}");
    };
    assert_eq!(approval.status, pb::ApprovalStatus::Pending as i32);
    assert_eq!(approval.capability_id, "payments.refund");
    assert_eq!(approval.execution_id.as_deref(), Some("ex-refund"));
    assert_eq!(approval.capability_version, Some(1));
    assert_eq!(approval.actor, Some(user("alice")));
    assert_eq!(approval.types, ["finance"]);
    assert_eq!(approval.risk, pb::Risk::High as i32);
    assert_eq!(approval.side_effect, pb::SideEffect::External as i32);
    assert_eq!(json(&approval.input_json), json(input));
    assert_eq!(cluster.get_execution(nodes.leader, "ex-refund").await, None, "no execution before approval");

    expect_refusal(
        resume(cluster, nodes.leader, &approval.id, None).await,
        Code::FailedPrecondition,
        "APPROVAL_PENDING",
    );
    decide(cluster, nodes.follower, &approval.id, pb::ApprovalStatus::Approved, "bob").await;

    let changed = Some(r#"{"order":"o-9","amount":2500}"#);
    let mismatch = resume(cluster, nodes.follower, &approval.id, changed).await;
    expect_refusal(mismatch, Code::FailedPrecondition, "APPROVAL_INPUT_MISMATCH");

    let reordered = Some(r#"{"amount":25,"order":"o-9"}"#);
    let execution = resume(cluster, nodes.follower, &approval.id, reordered).await.expect("resume");
    assert_eq!(execution.execution_id, "ex-refund");
    assert_eq!(execution.approval_id.as_deref(), Some(approval.id.as_str()));
    assert_eq!(execution.approver, Some(user("bob")));
    assert_eq!(execution.actor, Some(user("alice")));
    assert_eq!(execution.input_hash, approval.input_hash);
    assert_eq!(state_of(&execution), pb::ExecutionState::Queued);

    for via in [nodes.leader, nodes.follower] {
        let again = resume(cluster, via, &approval.id, None).await;
        expect_refusal(again, Code::FailedPrecondition, "APPROVAL_CONSUMED");
    }

    let task = lease_one(cluster, nodes.leader, "worker-refund", "payments.refund").await;
    assert_eq!(task.execution_id, "ex-refund");
    assert_eq!(task.approver, Some(user("bob")));
    assert_eq!(task.approval_id.as_deref(), Some(approval.id.as_str()));
    report(cluster, nodes.follower, completed_report(&task, r#"{"refunded":true}"#)).await.expect("report");

    // A rejected approval cannot be resumed.
    let response = submit(cluster, nodes.leader, submit_request("ex-refund-2", "payments.refund", input))
        .await
        .expect("second submit");
    let Some(pb::submit_response::Outcome::ApprovalRequired(rejected)) = response.outcome else {
        panic!("expected approval-required: {response:?}");
    };
    decide(cluster, nodes.leader, &rejected.id, pb::ApprovalStatus::Rejected, "bob").await;
    let refused = resume(cluster, nodes.follower, &rejected.id, None).await;
    expect_refusal(refused, Code::FailedPrecondition, "APPROVAL_REJECTED");
    assert_eq!(cluster.get_execution(nodes.follower, "ex-refund-2").await, None);
}

/// Issue #42: waiting for a decision, resume-and-wait and report-and-poll
/// are single calls, through a follower as through the leader.
async fn fewer_round_trips_wait_for_decisions_resume_and_wait_and_report_and_poll(cluster: &Cluster, nodes: &Nodes) {
    let input = r#"{"order":"o-42","amount":7}"#;
    let response =
        submit(cluster, nodes.leader, submit_request("ex-rt", "payments.refund", input)).await.expect("submit");
    let Some(pb::submit_response::Outcome::ApprovalRequired(approval)) = response.outcome else {
        panic!("expected approval-required: {response:?}");
    };
    let wait_approval = |via: u64, id: String, wait_ms: u64| {
        let mut client = cluster.approvals(via);
        async move { client.wait_approval(pb::WaitApprovalRequest { id, wait_ms }).await.map(tonic::Response::into_inner) }
    };

    // A pending approval at the deadline comes back as it is, timed out.
    let pending = wait_approval(nodes.leader, approval.id.clone(), 100).await.expect("wait on a pending approval");
    assert!(pending.timed_out);
    assert_eq!(pending.approval.expect("the approval").status, pb::ApprovalStatus::Pending as i32);
    expect_refusal(wait_approval(nodes.leader, "apr-nowhere".into(), 100).await, Code::NotFound, "NOT_FOUND");

    // A waiter wakes when the decision is applied, long before its wait_ms.
    let waiter = tokio::spawn(wait_approval(nodes.follower, approval.id.clone(), 20_000));
    tokio::time::sleep(Duration::from_millis(300)).await; // let the wait start (not an assertion)
    let started = Instant::now();
    decide(cluster, nodes.leader, &approval.id, pb::ApprovalStatus::Approved, "bob").await;
    let decided = tokio::time::timeout(WAIT, waiter).await.expect("the wait returns").expect("task").expect("wait");
    assert!(!decided.timed_out, "{decided:?}");
    assert_eq!(decided.approval.expect("the approval").status, pb::ApprovalStatus::Approved as i32);
    assert!(started.elapsed() < Duration::from_secs(10), "the wait woke on the decision");

    // A pending approval that expires during the wait reads EXPIRED then: no
    // apply marks an expiry, so the wait wakes at expires_at_ms itself.
    let create = pb::CreateApprovalRequest {
        request_id: request_id("create"),
        id: "apr-rt-expiring".into(),
        capability_id: "payments.refund".into(),
        actor: Some(user("alice")),
        input_json: "{}".into(),
        expires_in_ms: Some(300),
        risk: pb::Risk::Low as i32,
        side_effect: pb::SideEffect::External as i32,
        ..pb::CreateApprovalRequest::default()
    };
    retry(|| {
        let mut client = cluster.approvals(nodes.leader);
        let create = create.clone();
        async move { client.create_approval(create).await }
    })
    .await
    .expect("create an expiring approval");
    let expired = wait_approval(nodes.leader, "apr-rt-expiring".into(), 20_000).await.expect("wait for expiry");
    assert!(!expired.timed_out, "{expired:?}");
    assert_eq!(expired.approval.expect("the approval").status, pb::ApprovalStatus::Expired as i32);

    // Resume and wait in one call; the worker reports and polls in one call.
    let resume = pb::ResumeRequest {
        request_id: request_id("resume-wait"),
        approval_id: approval.id.clone(),
        ..pb::ResumeRequest::default()
    };
    let resumer = {
        let mut client = cluster.executions(nodes.follower);
        let request = pb::ResumeAndWaitRequest { resume: Some(resume), wait_ms: 20_000, ..Default::default() };
        tokio::spawn(async move { client.resume_and_wait(request).await })
    };
    let task = lease_one(cluster, nodes.leader, "worker-rt", "payments.refund").await;
    assert_eq!(task.execution_id, "ex-rt");
    // A poll part the cluster refuses (no queue) refuses the call before
    // the report is taken: the lease is still open afterwards.
    let report_and_poll = |report: pb::ReportRequest, queues: Vec<String>| {
        let mut client = cluster.workers(nodes.follower);
        let request = pb::ReportAndPollRequest { report: Some(report), queues, max_tasks: 1, ..Default::default() };
        async move { client.report_and_poll(request).await.map(tonic::Response::into_inner) }
    };
    let refused = report_and_poll(completed_report(&task, r#"{"refunded":true}"#), Vec::new()).await;
    expect_refusal(refused, Code::InvalidArgument, "INVALID_ARGUMENT");
    heartbeat(cluster, nodes.leader, &task).await.expect("the lease survived the refused call");
    let answer = report_and_poll(completed_report(&task, r#"{"refunded":true}"#), vec!["payments.refund".into()])
        .await
        .expect("report and poll");
    assert_eq!(answer.poll_failure, None);
    assert!(answer.tasks.is_empty(), "no other refund is queued: {:?}", answer.tasks);
    let reported = answer.report.expect("the report's answer").execution.expect("the execution");
    assert_eq!(state_of(&reported), pb::ExecutionState::Completed);
    let resumed = tokio::time::timeout(WAIT, resumer).await.expect("resume-and-wait returns").expect("task");
    let resumed = resumed.expect("resume and wait").into_inner();
    assert!(!resumed.timed_out && !resumed.wait_refused, "{resumed:?}");
    let execution = resumed.execution.expect("the execution");
    assert_eq!(state_of(&execution), pb::ExecutionState::Completed);
    let Some(pb::result_envelope::Outcome::Completed(completed)) = execution.result.and_then(|result| result.outcome)
    else {
        panic!("expected a completed result");
    };
    assert_eq!(json(&completed.output_json), json(r#"{"refunded":true}"#));

    // A busy worker takes its next task with the report of the last one.
    for n in 1..=2 {
        submit_queued(cluster, nodes.leader, submit_request(&format!("ex-rt-next-{n}"), "wake.up", "{}")).await;
    }
    let first = lease_one(cluster, nodes.leader, "worker-rt", "wake.up").await;
    let answer =
        report_and_poll(completed_report(&first, "null"), vec!["wake.up".into()]).await.expect("report and poll");
    assert_eq!(answer.poll_failure, None);
    assert_eq!(answer.tasks.iter().map(|task| task.execution_id.as_str()).collect::<Vec<_>>(), ["ex-rt-next-2"]);
    report(cluster, nodes.leader, completed_report(&answer.tasks[0], "null")).await.expect("report");
}

async fn poll_waits_for_work_and_wakes_when_it_arrives(cluster: &Cluster, nodes: &Nodes) {
    for via in [nodes.leader, nodes.follower] {
        let started = Instant::now();
        let tasks = poll(cluster, via, "worker-idle", "queue.empty", 400).await.expect("poll");
        let elapsed = started.elapsed();
        assert!(tasks.is_empty(), "{tasks:?}");
        assert!(elapsed >= Duration::from_millis(350), "an empty poll waits about wait_ms, not {elapsed:?}");
        assert!(elapsed < Duration::from_secs(10), "an empty poll returns after wait_ms, not {elapsed:?}");
    }

    let wait_ms = 15_000;
    let started = Instant::now();
    let poller = {
        let mut client = cluster.workers(nodes.follower);
        tokio::spawn(async move {
            let request = pb::PollRequest {
                request_id: request_id("poll-wake"),
                worker_id: "worker-wake".to_string(),
                queues: vec!["wake.up".to_string()],
                max_tasks: 1,
                wait_ms,
            };
            client.poll(request).await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await; // let the poll start waiting (not an assertion)
    submit_queued(cluster, nodes.leader, submit_request("ex-wake", "wake.up", r#"{"n":1}"#)).await;
    let tasks = tokio::time::timeout(WAIT, poller)
        .await
        .expect("the poll returns")
        .expect("task")
        .expect("poll")
        .into_inner()
        .tasks;
    let elapsed = started.elapsed();
    assert_eq!(tasks.iter().map(|task| task.execution_id.as_str()).collect::<Vec<_>>(), ["ex-wake"]);
    assert!(
        elapsed < Duration::from_millis(wait_ms / 2),
        "the poll woke up when work arrived instead of waiting {wait_ms} ms (took {elapsed:?})"
    );
    report(cluster, nodes.leader, completed_report(&tasks[0], "null")).await.expect("report");
}

async fn a_late_report_is_refused_and_the_attempt_is_retried(cluster: &Cluster, nodes: &Nodes) {
    let marker = "raw-input-marker-7f3a";
    let input = format!(r#"{{"query":"{marker}"}}"#);
    let submitted = submit_queued(cluster, nodes.follower, submit_request("ex-flaky", "search.flaky", &input)).await;

    let first = lease_one(cluster, nodes.leader, "worker-slow", "search.flaky").await;
    assert_eq!(first.attempt, 1);
    let first_lease = lease_id(&first);

    // The worker never reports in time: the leader's ticker expires the lease and schedules a retry.
    let after_expiry = eventually("the lease of attempt 1 to expire", || async {
        let execution = cluster.get_execution(nodes.follower, "ex-flaky").await.expect("execution");
        (state_of(&execution) != pb::ExecutionState::Leased).then_some(execution)
    })
    .await;
    assert!(
        matches!(state_of(&after_expiry), pb::ExecutionState::Backoff | pb::ExecutionState::Queued),
        "a timed-out read with retries left is retried: {after_expiry:?}"
    );
    assert_eq!(after_expiry.current_lease, None);
    assert_eq!(after_expiry.result, None);

    let late = report(cluster, nodes.follower, completed_report(&first, r#"{"late":true}"#)).await;
    let refusal = expect_refusal(late, Code::FailedPrecondition, "LEASE_LOST");
    assert!(refusal.message().contains(&first_lease.to_string()), "{}", refusal.message());
    let heartbeat_refusal = heartbeat(cluster, nodes.leader, &first).await;
    expect_refusal(heartbeat_refusal, Code::FailedPrecondition, "LEASE_LOST");

    let second = lease_one(cluster, nodes.follower, "worker-fast", "search.flaky").await;
    assert_eq!(second.execution_id, "ex-flaky", "the retry keeps the execution id");
    assert_eq!(second.idempotency_key, submitted.idempotency_key, "the retry keeps the idempotency key");
    assert_eq!(second.attempt, 2);
    assert!(lease_id(&second) > first_lease, "fencing tokens increase");
    let done = report(cluster, nodes.leader, completed_report(&second, r#"{"hits":1}"#)).await.expect("report");
    let done = done.execution.expect("execution");
    assert_eq!(state_of(&done), pb::ExecutionState::Completed);
    assert_eq!(done.attempts, 2);
    let Some(pb::result_envelope::Outcome::Completed(completed)) =
        done.result.as_ref().and_then(|result| result.outcome.clone())
    else {
        panic!("expected a completed result: {done:?}");
    };
    assert_eq!(json(&completed.output_json), json(r#"{"hits":1}"#), "the late output was never used");

    // The audit trail tells the whole story, in order, without the raw input.
    let events = cluster.execution_events(nodes.follower, "ex-flaky").await;
    assert_eq!(
        types(&events),
        [
            "capability.requested",
            "capability.started",
            "lease.expired",
            "capability.retried",
            "lease.late_report_rejected",
            "capability.started",
            "capability.completed",
        ],
        "{events:#?}"
    );
    assert!(events.windows(2).all(|pair| pair[0].cursor < pair[1].cursor), "cursors increase");
    let started_first = &events[1];
    assert_eq!(started_first.attempt, Some(1));
    assert_eq!(started_first.lease_id, Some(first_lease));
    assert_eq!(started_first.worker_id.as_deref(), Some("worker-slow"));
    let expired = &events[2];
    assert_eq!(expired.lease_id, Some(first_lease));
    assert_eq!(expired.attempt, Some(1));
    assert_eq!(expired.code.as_deref(), Some("TIMEOUT"));
    let retried = &events[3];
    assert_eq!(retried.attempt, Some(2));
    assert_eq!(retried.previous_error_code.as_deref(), Some("TIMEOUT"));
    assert_eq!(retried.duration_ms, Some(50), "the first backoff is backoff_ms");
    let late_event = &events[4];
    assert_eq!(late_event.lease_id, Some(first_lease));
    assert_eq!(late_event.attempt, Some(1));
    let started_second = &events[5];
    assert_eq!(started_second.attempt, Some(2));
    assert_eq!(started_second.lease_id, Some(lease_id(&second)));
    let completed_event = &events[6];
    assert_eq!(completed_event.attempts, Some(2));
    assert!(completed_event.duration_ms.is_some());
    for event in &events {
        assert_eq!(event.execution_id.as_deref(), Some("ex-flaky"));
        assert_eq!(event.capability_id.as_deref(), Some("search.flaky"));
        assert_eq!(event.input_hash.as_deref(), Some(submitted.input_hash.as_str()));
    }

    let listed = list_events(cluster, nodes.leader, 0, Some("ex-flaky")).await;
    assert_eq!(listed, events, "ListEvents with an execution filter shows the same trail");
    let everything = list_events(cluster, nodes.follower, 0, None).await;
    assert!(!format!("{everything:?}").contains(marker), "no event carries the raw input");
}

async fn cancellation_revokes_the_lease_and_reaches_the_worker(cluster: &Cluster, nodes: &Nodes) {
    submit_queued(cluster, nodes.leader, submit_request("ex-cancel", "jobs.long", r#"{"job":1}"#)).await;
    let task = lease_one(cluster, nodes.leader, "worker-long", "jobs.long").await;
    let beat = heartbeat(cluster, nodes.leader, &task).await.expect("heartbeat before cancel");
    assert!(!beat.cancel_requested);

    let cancelled = cancel_execution(cluster, nodes.follower, "ex-cancel").await.expect("cancel through the follower");
    assert_eq!(state_of(&cancelled), pb::ExecutionState::Cancelled);
    assert!(cancelled.cancel_requested);
    assert_eq!(cancelled.current_lease, None, "the lease is revoked");
    let Some(pb::result_envelope::Outcome::Cancelled(result)) =
        cancelled.result.as_ref().and_then(|result| result.outcome.clone())
    else {
        panic!("expected a cancelled result: {cancelled:?}");
    };
    assert_eq!(result.code, pb::CancelCode::Cancelled as i32);
    assert_eq!(result.attempts, 1);

    let beat = heartbeat(cluster, nodes.leader, &task).await.expect("the holder's next heartbeat");
    assert!(beat.cancel_requested, "the worker learns of the cancellation from its heartbeat");
    let stored = cluster.get_execution(nodes.leader, "ex-cancel").await.expect("execution");
    assert_eq!(state_of(&stored), pb::ExecutionState::Cancelled);
    let late = report(cluster, nodes.follower, completed_report(&task, r#"{"done":true}"#)).await;
    expect_refusal(late, Code::FailedPrecondition, "LEASE_LOST");
    let again = cancel_execution(cluster, nodes.leader, "ex-cancel").await;
    expect_refusal(again, Code::FailedPrecondition, "EXECUTION_FINAL");
    expect_refusal(cancel_execution(cluster, nodes.follower, "ex-absent").await, Code::NotFound, "NOT_FOUND");

    let events = cluster.execution_events(nodes.leader, "ex-cancel").await;
    let cancelled_event = events.iter().find(|event| event.r#type == "capability.cancelled").expect("cancel event");
    assert_eq!(cancelled_event.code.as_deref(), Some("CANCELLED"));
    assert_eq!(cancelled_event.actor, Some(user("carol")), "the canceller is recorded");
    assert!(types(&events).contains(&"lease.late_report_rejected"), "{events:#?}");
    assert!(!types(&events).contains(&"capability.retried"), "cancellation is never retried");

    // A queued execution is cancelled before any worker sees it.
    submit_queued(cluster, nodes.follower, submit_request("ex-cancel-queued", "jobs.long", r#"{"job":2}"#)).await;
    let cancelled = cancel_execution(cluster, nodes.leader, "ex-cancel-queued").await.expect("cancel");
    assert_eq!(state_of(&cancelled), pb::ExecutionState::Cancelled);
    assert_eq!(cancelled.attempts, 0);
    let tasks = poll(cluster, nodes.follower, "worker-long", "jobs.long", 200).await.expect("poll");
    assert!(tasks.is_empty(), "a cancelled execution is never leased: {tasks:?}");
}

/// Reads `count` events from a stream, failing if one takes longer than [`WAIT`].
async fn next_events(stream: &mut tonic::Streaming<pb::Event>, count: usize) -> Vec<pb::Event> {
    let mut events = Vec::new();
    while events.len() < count {
        let next = tokio::time::timeout(WAIT, stream.message()).await.expect("an event within the wait");
        events.push(next.expect("stream healthy").expect("stream open"));
    }
    events
}

async fn watch(
    cluster: &Cluster,
    via: u64,
    after_cursor: u64,
    execution_id: Option<&str>,
) -> tonic::Streaming<pb::Event> {
    retry(|| {
        let mut client = cluster.audit(via);
        let request = pb::WatchEventsRequest { after_cursor, execution_id: execution_id.map(str::to_string) };
        async move { client.watch_events(request).await }
    })
    .await
    .expect("watch events")
    .into_inner()
}

async fn watch_resumes_from_a_cursor_without_gaps_or_duplicates(cluster: &Cluster, nodes: &Nodes) {
    let all = list_events(cluster, nodes.leader, 0, None).await;
    assert!(all.len() > 20, "earlier checks wrote a trail: {} events", all.len());
    let cursors: Vec<u64> = all.iter().map(|event| event.cursor).collect();
    assert_eq!(cursors, (1..=all.len() as u64).collect::<Vec<_>>(), "cursors start at 1 and have no gaps");

    // Read part of the trail from a follower, disconnect, and resume from the last cursor seen.
    let mut first = watch(cluster, nodes.follower, 0, None).await;
    let head = next_events(&mut first, 7).await;
    drop(first);
    let last_seen = head.last().expect("events").cursor;
    let mut resumed = watch(cluster, nodes.follower, last_seen, None).await;
    let tail = next_events(&mut resumed, all.len() - head.len()).await;
    let streamed: Vec<pb::Event> = head.into_iter().chain(tail).collect();
    assert_eq!(streamed, all, "the stream delivers the same events as ListEvents, in order, once each");

    // The open stream follows new events as they are written.
    let submitted = submit_queued(cluster, nodes.leader, submit_request("ex-watched", "wake.up", "{}")).await;
    let live = next_events(&mut resumed, 1).await;
    assert_eq!(live[0].cursor, all.len() as u64 + 1, "the next event follows without a gap");
    assert_eq!(live[0].r#type, "capability.requested");
    assert_eq!(live[0].execution_id.as_deref(), Some(submitted.execution_id.as_str()));

    // A filtered watch from the middle of one execution's trail continues from there.
    let flaky = cluster.execution_events(nodes.leader, "ex-flaky").await;
    let mut filtered = watch(cluster, nodes.leader, flaky[2].cursor, Some("ex-flaky")).await;
    let rest = next_events(&mut filtered, flaky.len() - 3).await;
    assert_eq!(rest, flaky[3..], "a filtered watch resumes after its cursor");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn executions_follow_the_contract_through_leader_and_follower() {
    let cluster = Cluster::start(3).await;
    let nodes = Nodes { leader: cluster.wait_for_leader().await, follower: cluster.follower().await };

    capabilities_register_with_defaults_resolved(&cluster, &nodes).await;
    submit_is_idempotent_by_execution_id(&cluster, &nodes).await;
    a_leased_task_carries_everything_a_worker_needs(&cluster, &nodes).await;
    approval_required_submit_then_resume(&cluster, &nodes).await;
    fewer_round_trips_wait_for_decisions_resume_and_wait_and_report_and_poll(&cluster, &nodes).await;
    poll_waits_for_work_and_wakes_when_it_arrives(&cluster, &nodes).await;
    a_late_report_is_refused_and_the_attempt_is_retried(&cluster, &nodes).await;
    cancellation_revokes_the_lease_and_reaches_the_worker(&cluster, &nodes).await;
    watch_resumes_from_a_cursor_without_gaps_or_duplicates(&cluster, &nodes).await;

    cluster.wait_converged().await;
}
