//! Leader-side time survives a leader change: a lease granted under one
//! leader is expired by the next one, through the log.

mod support;

use gavel_proto::v1 as pb;
use support::{capability, eventually, register, retry, user, Cluster};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_new_leader_expires_the_leases_its_predecessor_granted() {
    let mut cluster = Cluster::start(3).await;
    let spec = pb::CapabilitySpec { timeout_ms: Some(3_000), ..capability("ticker.write", pb::SideEffect::Write) };
    register(&cluster, 1, spec).await;
    let leader = cluster.wait_for_leader().await;
    let follower = cluster.follower().await;
    retry(|| {
        let mut client = cluster.executions(follower);
        let request = pb::SubmitRequest {
            request_id: "ticker-submit".to_string(),
            execution_id: Some("ex-ticker".to_string()),
            capability_id: "ticker.write".to_string(),
            input_json: "{}".to_string(),
            actor: Some(user("alice")),
            surface: "test".to_string(),
            ..pb::SubmitRequest::default()
        };
        async move { client.submit(request).await }
    })
    .await
    .expect("submit");
    let tasks = retry(|| {
        let mut client = cluster.workers(leader);
        let request = pb::PollRequest {
            request_id: "ticker-poll".to_string(),
            worker_id: "w-1".to_string(),
            queues: vec!["ticker.write".to_string()],
            max_tasks: 1,
            wait_ms: 5_000,
        };
        async move { client.poll(request).await }
    })
    .await
    .expect("poll")
    .into_inner()
    .tasks;
    assert_eq!(tasks.len(), 1, "the execution is leased");

    // The leader that armed the deadline dies; the worker never reports.
    cluster.kill(leader);
    let survivor = cluster.wait_for_leader().await;
    assert_ne!(survivor, leader);

    // A write without idempotent + retry that timed out is final as
    // cancelled{TIMEOUT}, and never leased again.
    let execution = eventually("the new leader expires the lease", || {
        let mut client = cluster.executions(survivor);
        async move {
            let request = pb::GetExecutionRequest { execution_id: "ex-ticker".to_string() };
            let execution = client.get_execution(request).await.ok()?.into_inner().execution?;
            (execution.state == pb::ExecutionState::Cancelled as i32).then_some(execution)
        }
    })
    .await;
    let Some(pb::result_envelope::Outcome::Cancelled(cancelled)) = execution.result.and_then(|result| result.outcome)
    else {
        panic!("a timed-out write finalizes as cancelled")
    };
    assert_eq!(cancelled.code, pb::CancelCode::Timeout as i32);
    assert_eq!(cancelled.attempts, 1, "never re-run");
}
