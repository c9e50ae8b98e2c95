//! The refund example end to end on a real cluster: approval, resume, a flaky
//! gateway retried under the same idempotency key, cancellation of a slow
//! charge, and self-approval refused.

mod support;

use std::time::Duration;

use gavel_client::{CancellationToken, Client};
use gavel_proto::v1 as pb;
use refund_worker::{worker, Gateway, GatewayBehaviour};
use support::{user, Cluster};

/// `examples/refund-worker/capability.toml`, as the CLI would register it.
fn refund_capability() -> pb::CapabilitySpec {
    pb::CapabilitySpec {
        id: "orders.refund".to_string(),
        side_effect: pb::SideEffect::Write as i32,
        risk: pb::Risk::High as i32,
        idempotent: true,
        retry: Some(pb::RetryConfig { max_attempts: 1, backoff_ms: Some(200), non_retryable_codes: Vec::new() }),
        timeout_ms: Some(10_000),
        heartbeat_timeout_ms: Some(3_000),
        approval: Some(pb::ApprovalPolicy {
            required: true,
            r#type: Some("human".to_string()),
            expires_in_ms: Some(900_000),
        }),
        ..pb::CapabilitySpec::default()
    }
}

async fn approved_execution(client: &Client, execution_id: &str) -> pb::Execution {
    let submitted = client
        .submit(pb::SubmitRequest {
            execution_id: Some(execution_id.to_string()),
            capability_id: "orders.refund".to_string(),
            input_json: r#"{"order_id":"o-42","amount_cents":1250}"#.to_string(),
            actor: Some(user("agent-alice")),
            surface: "mcp".to_string(),
            ..pb::SubmitRequest::default()
        })
        .await
        .expect("submit");
    let Some(pb::submit_response::Outcome::ApprovalRequired(approval)) = submitted.outcome else {
        panic!("orders.refund requires approval: {submitted:?}")
    };
    assert_eq!(approval.status, pb::ApprovalStatus::Pending as i32);
    let self_approval = client
        .decide_approval(pb::DecideApprovalRequest {
            id: approval.id.clone(),
            status: pb::ApprovalStatus::Approved as i32,
            approver: Some(user("agent-alice")),
            ..pb::DecideApprovalRequest::default()
        })
        .await
        .expect_err("the requester cannot approve");
    assert_eq!(self_approval.code(), "APPROVAL_SELF_APPROVAL");
    client
        .decide_approval(pb::DecideApprovalRequest {
            id: approval.id.clone(),
            status: pb::ApprovalStatus::Approved as i32,
            approver: Some(user("bob-finance")),
            comment: Some("customer verified".to_string()),
            ..pb::DecideApprovalRequest::default()
        })
        .await
        .expect("approve as another actor");
    client
        .resume(pb::ResumeRequest { approval_id: approval.id, ..pb::ResumeRequest::default() })
        .await
        .expect("resume")
        .execution
        .expect("execution")
}

async fn wait_final(client: &Client, execution_id: &str) -> pb::Execution {
    for _ in 0..12 {
        let waited = client
            .wait_execution(pb::WaitExecutionRequest { execution_id: execution_id.to_string(), timeout_ms: 5_000 })
            .await
            .expect("wait");
        if !waited.timed_out {
            return waited.execution.expect("execution");
        }
    }
    panic!("{execution_id} did not finalize within a minute");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn refund_runs_once_through_approval_and_a_flaky_gateway_and_stops_on_cancel() {
    let cluster = Cluster::start(3).await;
    let endpoints: Vec<String> = cluster.running().into_iter().map(|id| cluster.addr(id)).collect();
    let client = Client::new(&endpoints).expect("client");
    client
        .register_capability(pb::RegisterCapabilityRequest { spec: Some(refund_capability()), ..Default::default() })
        .await
        .expect("register");

    // 1. The gateway charges, then loses its first response: a runtime retry with
    //    the same idempotency key must find the charge instead of making another.
    let ledger = cluster.dir.path().join("ledger.jsonl");
    let behaviour =
        GatewayBehaviour { lose_response_on_calls: vec![1], latency: Duration::from_millis(20), ..Default::default() };
    let gateway = Gateway::open(ledger.clone(), behaviour).expect("gateway");
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(worker(&endpoints, gateway.clone(), 4).expect("worker").run(shutdown.clone()));

    let execution = approved_execution(&client, "refund-1").await;
    let finished = wait_final(&client, &execution.execution_id).await;
    assert_eq!(finished.state, pb::ExecutionState::Completed as i32, "{finished:?}");
    assert_eq!(finished.attempts, 2, "one runtime retry");
    assert_eq!(finished.approver.as_ref().map(|actor| actor.id.as_str()), Some("bob-finance"));
    let charges = gateway.charges().expect("ledger");
    assert_eq!(charges.len(), 1, "exactly one charge: {charges:?}");
    assert_eq!(charges[0].idempotency_key, finished.idempotency_key);
    let events = client
        .list_execution_events(pb::ListExecutionEventsRequest {
            execution_id: "refund-1".to_string(),
            after_cursor: 0,
            limit: 100,
        })
        .await
        .expect("events")
        .events;
    let retried = events.iter().find(|event| event.r#type == "capability.retried").expect("a capability.retried event");
    assert_eq!(retried.previous_error_code.as_deref(), Some("GATEWAY_TIMEOUT"));
    shutdown.cancel();
    running.await.expect("worker task").expect("worker");

    // 2. A slow charge is cancelled by the caller: the handler stops before charging.
    let slow = Gateway::open(
        cluster.dir.path().join("slow-ledger.jsonl"),
        GatewayBehaviour { latency: Duration::from_secs(30), ..Default::default() },
    )
    .expect("gateway");
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(worker(&endpoints, slow.clone(), 1).expect("worker").run(shutdown.clone()));
    let execution = approved_execution(&client, "refund-slow").await;
    let mut started = false;
    for _ in 0..100 {
        let current = client
            .get_execution(pb::GetExecutionRequest { execution_id: execution.execution_id.clone() })
            .await
            .expect("get")
            .execution
            .expect("execution");
        if current.state == pb::ExecutionState::Leased as i32 {
            started = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(started, "the slow refund was leased");
    let cancelled = client
        .cancel_execution(pb::CancelExecutionRequest {
            execution_id: execution.execution_id.clone(),
            ..Default::default()
        })
        .await
        .expect("cancel")
        .execution
        .expect("execution");
    assert_eq!(cancelled.state, pb::ExecutionState::Cancelled as i32);
    // The worker stops the handler at its next heartbeat; shutting down with a
    // short grace would hide a handler that ignores its token, so wait for the
    // worker to go idle on its own first.
    tokio::time::sleep(Duration::from_secs(2)).await;
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(5), running)
        .await
        .expect("worker stops promptly")
        .expect("task")
        .expect("worker");
    assert!(slow.charges().expect("ledger").is_empty(), "the cancelled refund never charged");
}
