//! Fault tests on a real cluster of `gavel node` processes: a leader SIGKILLed
//! under write load, a whole cluster SIGKILLed and restarted from disk, a new
//! node that can only catch up through a snapshot, and a follower that
//! restarts and catches up through the log.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use gavel_proto::v1 as pb;
use gavel_proto::v1::execution_service_client::ExecutionServiceClient;
use support::{approval_request, capability, register, retry, user, Cluster, WAIT};
use tonic::transport::Channel;

/// Upper bound of one whole test, so a hung cluster fails the test instead of
/// hanging it. Each wait inside is bounded by [`WAIT`] as well.
const TEST_BOUND: Duration = Duration::from_secs(240);

/// Runs a test body under [`TEST_BOUND`]; dropping the body on timeout drops
/// its `Cluster`, which kills every node process.
async fn bounded<F: Future<Output = ()>>(body: F) {
    tokio::time::timeout(TEST_BOUND, body).await.expect("the test did not finish within its bound");
}

/// Statuses a client retries with the same request id: no leader yet, or the
/// connection to the node it called broke (the node died mid-call).
fn is_retryable(status: &tonic::Status) -> bool {
    matches!(
        status.code(),
        tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled | tonic::Code::DeadlineExceeded
    )
}

async fn create_approval(cluster: &Cluster, via: u64, id: &str) -> pb::Approval {
    let request = approval_request(id, "faults");
    retry(|| {
        let mut client = cluster.approvals(via);
        let request = request.clone();
        async move { client.create_approval(request).await }
    })
    .await
    .unwrap_or_else(|status| panic!("create approval {id}: {status:?}"))
    .into_inner()
    .approval
    .expect("approval in reply")
}

async fn decide_approval(cluster: &Cluster, via: u64, id: &str, status: pb::ApprovalStatus) -> pb::Approval {
    let request = pb::DecideApprovalRequest {
        request_id: format!("decide-{id}"),
        id: id.to_string(),
        status: status as i32,
        approver: Some(user("bob")),
        ..pb::DecideApprovalRequest::default()
    };
    retry(|| {
        let mut client = cluster.approvals(via);
        let request = request.clone();
        async move { client.decide_approval(request).await }
    })
    .await
    .unwrap_or_else(|status| panic!("decide approval {id}: {status:?}"))
    .into_inner()
    .approval
    .expect("approval in reply")
}

async fn get_approval(cluster: &Cluster, via: u64, id: &str) -> Option<pb::Approval> {
    let read = retry(|| {
        let mut client = cluster.approvals(via);
        let request = pb::GetApprovalRequest { id: id.to_string(), caller_now_ms: None };
        async move { client.get_approval(request).await }
    })
    .await;
    support::found(read, "approval", id)?.into_inner().approval
}

async fn get_execution(cluster: &Cluster, via: u64, id: &str) -> Option<pb::Execution> {
    let read = retry(|| {
        let mut client = cluster.executions(via);
        let request = pb::GetExecutionRequest { execution_id: id.to_string() };
        async move { client.get_execution(request).await }
    })
    .await;
    support::found(read, "execution", id)?.into_inner().execution
}

fn submit_request(capability_id: &str, execution_id: &str, request_id: &str, input_json: String) -> pb::SubmitRequest {
    pb::SubmitRequest {
        request_id: request_id.to_string(),
        execution_id: Some(execution_id.to_string()),
        capability_id: capability_id.to_string(),
        input_json,
        actor: Some(user("writer")),
        surface: "faults".to_string(),
        correlation_id: None,
    }
}

async fn submit(cluster: &Cluster, via: u64, request: pb::SubmitRequest) -> pb::Execution {
    let response = retry(|| {
        let mut client = cluster.executions(via);
        let request = request.clone();
        async move { client.submit(request).await }
    })
    .await
    .unwrap_or_else(|status| panic!("submit {:?}: {status:?}", request.execution_id))
    .into_inner();
    match response.outcome {
        Some(pb::submit_response::Outcome::Execution(execution)) => execution,
        other => panic!("submit {:?} did not create an execution: {other:?}", request.execution_id),
    }
}

/// Every event of the audit trail, paging through ListEvents on node `via`.
async fn all_events(cluster: &Cluster, via: u64) -> Vec<pb::Event> {
    let mut events = Vec::new();
    let mut after_cursor = 0;
    loop {
        let page = retry(|| {
            let mut client = cluster.audit(via);
            let request = pb::ListEventsRequest {
                after_cursor,
                limit: 1000,
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

/// Waits until every running node reports `hash` and the same applied index.
async fn wait_for_hash(cluster: &Cluster, hash: &str) {
    let started = Instant::now();
    let mut last_seen = Vec::new();
    while started.elapsed() < WAIT {
        last_seen.clear();
        for id in cluster.running() {
            last_seen.push((id, cluster.status(id).await.map(|status| (status.state_hash, status.last_applied_index))));
        }
        let applied: BTreeSet<_> = last_seen.iter().map(|(_, seen)| seen.as_ref().map(|(_, index)| *index)).collect();
        if applied.len() == 1 && last_seen.iter().all(|(_, seen)| seen.as_ref().is_some_and(|(seen, _)| seen == hash)) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("nodes did not all reach state hash {hash} within {WAIT:?}: {last_seen:?}");
}

/// One submit the cluster acknowledged.
struct Acknowledged {
    execution_id: String,
    /// When the request was first sent.
    sent_at: Instant,
    /// When the acknowledgement arrived.
    acknowledged_at: Instant,
    /// Whether the first try failed and the submit was sent again.
    retried: bool,
}

/// Sends one submit until it is acknowledged, moving on to the next node after
/// each retryable failure (so a dead node is skipped) and keeping the request
/// and execution ids, so a retry of a submit that did commit is deduplicated.
/// Returns the response and how many tries failed before it.
async fn submit_until_acknowledged(
    clients: &[ExecutionServiceClient<Channel>],
    first_node: usize,
    request: &pb::SubmitRequest,
) -> Result<(pb::SubmitResponse, usize), String> {
    let started = Instant::now();
    let mut attempt = 0;
    loop {
        let mut client = clients[(first_node + attempt) % clients.len()].clone();
        let mut call = tonic::Request::new(request.clone());
        call.set_timeout(Duration::from_secs(5));
        match client.submit(call).await {
            Ok(response) => return Ok((response.into_inner(), attempt)),
            Err(status) if is_retryable(&status) && started.elapsed() < WAIT => {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(status) => return Err(format!("submit {:?} failed for good: {status:?}", request.execution_id)),
        }
    }
}

/// How many submits each writer makes after the leader was killed.
const SUBMITS_AFTER_KILL: usize = 25;
/// A bound on each writer's submits, whatever happens.
const SUBMITS_PER_WRITER_MAX: usize = 500;

/// Submits executions one after another, each through the next node in turn
/// (followers and leader alike), until it has made [`SUBMITS_AFTER_KILL`]
/// submits after `killed_at` was set.
async fn writer(
    writer: usize,
    clients: Vec<ExecutionServiceClient<Channel>>,
    killed_at: Arc<OnceLock<Instant>>,
    acknowledged_total: Arc<AtomicUsize>,
) -> Result<Vec<Acknowledged>, String> {
    let mut acknowledged = Vec::new();
    let mut after_kill = 0;
    for sequence in 0..SUBMITS_PER_WRITER_MAX {
        if after_kill >= SUBMITS_AFTER_KILL {
            return Ok(acknowledged);
        }
        let execution_id = format!("ex-w{writer}-{sequence}");
        let request = submit_request(
            "jobs.noop",
            &execution_id,
            &format!("submit-w{writer}-{sequence}"),
            format!(r#"{{"writer":{writer},"sequence":{sequence}}}"#),
        );
        let sent_at = Instant::now();
        let (response, failed_tries) = submit_until_acknowledged(&clients, writer + sequence, &request).await?;
        let acknowledged_at = Instant::now();
        match response.outcome {
            Some(pb::submit_response::Outcome::Execution(execution)) if execution.execution_id == execution_id => {}
            other => return Err(format!("submit {execution_id} answered {other:?}")),
        }
        acknowledged.push(Acknowledged { execution_id, sent_at, acknowledged_at, retried: failed_tries > 0 });
        acknowledged_total.fetch_add(1, Ordering::SeqCst);
        if killed_at.get().is_some_and(|killed| sent_at > *killed) {
            after_kill += 1;
        }
    }
    Err(format!("writer {writer} made {SUBMITS_PER_WRITER_MAX} submits without the leader being killed"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leader_sigkill_during_submits_loses_no_acknowledged_submit() {
    bounded(async {
        let mut cluster = Cluster::start(3).await;
        register(&cluster, 1, capability("jobs.noop", pb::SideEffect::None)).await;
        let clients: Vec<_> = (1..=3).map(|id| cluster.executions(id)).collect();
        let killed_at = Arc::new(OnceLock::new());
        let acknowledged_total = Arc::new(AtomicUsize::new(0));
        let writers: Vec<_> = (0..4)
            .map(|index| tokio::spawn(writer(index, clients.clone(), killed_at.clone(), acknowledged_total.clone())))
            .collect();

        // Let the writers get going, then SIGKILL the leader under load.
        let started = Instant::now();
        while acknowledged_total.load(Ordering::SeqCst) < 60 {
            assert!(started.elapsed() < WAIT, "the writers made no progress before the kill");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let old_leader = cluster.wait_for_leader().await;
        let kill_instant = Instant::now();
        killed_at.set(kill_instant).expect("killed once");
        cluster.kill(old_leader);

        let mut acknowledged = Vec::new();
        for handle in writers {
            acknowledged.extend(handle.await.expect("writer task").expect("every submit is acknowledged"));
        }
        let new_leader = cluster.wait_for_leader().await;
        assert_ne!(new_leader, old_leader);

        // Every acknowledged submit is there, exactly once.
        let ids: BTreeSet<&str> = acknowledged.iter().map(|ack| ack.execution_id.as_str()).collect();
        assert_eq!(ids.len(), acknowledged.len(), "execution ids are unique");
        for ack in &acknowledged {
            let execution = get_execution(&cluster, new_leader, &ack.execution_id)
                .await
                .unwrap_or_else(|| panic!("acknowledged submit {} is lost", ack.execution_id));
            assert_eq!(execution.execution_id, ack.execution_id);
            assert_eq!(execution.capability_id, "jobs.noop");
        }
        let mut requested: BTreeMap<String, usize> = BTreeMap::new();
        for event in all_events(&cluster, new_leader).await {
            if event.r#type == "capability.requested" {
                *requested.entry(event.execution_id.clone().expect("execution id on the event")).or_default() += 1;
            }
        }
        for ack in &acknowledged {
            assert_eq!(requested.get(&ack.execution_id), Some(&1), "{} requested exactly once", ack.execution_id);
        }
        assert!(requested.values().all(|count| *count == 1), "no execution was created twice: {requested:?}");
        assert_eq!(requested.len(), acknowledged.len(), "no execution exists that was not acknowledged");

        // A submit sent before the kill and answered on its first try was
        // committed by the old leader (its answer was in flight); the first
        // write the new leader made is the first acknowledged one that was
        // sent after the kill or had to be retried.
        let in_flight = acknowledged
            .iter()
            .filter(|ack| ack.acknowledged_at > kill_instant && ack.sent_at <= kill_instant && !ack.retried)
            .count();
        let recovery = acknowledged
            .iter()
            .filter(|ack| ack.acknowledged_at > kill_instant && (ack.sent_at > kill_instant || ack.retried))
            .map(|ack| ack.acknowledged_at - kill_instant)
            .min()
            .expect("submits were acknowledged after the kill");
        println!(
            "leader {old_leader} SIGKILLed after {} acknowledged submits; new leader {new_leader}; first submit \
             acknowledged by the new leader {recovery:?} after the kill ({in_flight} answers of the old leader \
             arrived after the kill); {} submits acknowledged in all",
            acknowledged.iter().filter(|ack| ack.acknowledged_at <= kill_instant).count(),
            acknowledged.len()
        );

        // The killed node rejoins with its data and converges.
        cluster.spawn(old_leader);
        cluster.wait_converged().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn full_restart_from_disk_keeps_the_same_state_hash() {
    bounded(async {
        let mut cluster = Cluster::start(3).await;
        let leader = cluster.wait_for_leader().await;
        let follower = cluster.follower().await;

        // Approvals in every stored status.
        for id in ["apr-approved", "apr-consumed", "apr-rejected", "apr-cancelled", "apr-pending"] {
            create_approval(&cluster, follower, id).await;
        }
        decide_approval(&cluster, leader, "apr-approved", pb::ApprovalStatus::Approved).await;
        decide_approval(&cluster, follower, "apr-consumed", pb::ApprovalStatus::Approved).await;
        decide_approval(&cluster, leader, "apr-rejected", pb::ApprovalStatus::Rejected).await;
        retry(|| {
            let mut client = cluster.approvals(follower);
            let request = pb::ConsumeApprovalRequest {
                request_id: "consume-apr-consumed".to_string(),
                id: "apr-consumed".to_string(),
                execution_id: "ex-paid".to_string(),
                ..pb::ConsumeApprovalRequest::default()
            };
            async move { client.consume_approval(request).await }
        })
        .await
        .expect("consume");
        retry(|| {
            let mut client = cluster.approvals(leader);
            let request = pb::CancelApprovalRequest {
                request_id: "cancel-apr-cancelled".to_string(),
                id: "apr-cancelled".to_string(),
                caller_now_ms: None,
            };
            async move { client.cancel_approval(request).await }
        })
        .await
        .expect("cancel approval");

        // Executions: completed, failed and cancelled ones, all leased once
        // and finalized, and a few still queued (a queued execution has no
        // deadline, so no tick is due after the restart).
        register(&cluster, follower, capability("reports.build", pb::SideEffect::None)).await;
        for index in 0..10 {
            let id = format!("ex-run-{index}");
            submit(
                &cluster,
                follower,
                submit_request("reports.build", &id, &format!("submit-{id}"), format!(r#"{{"report":{index}}}"#)),
            )
            .await;
        }
        let mut tasks = Vec::new();
        let mut polls = 0;
        while tasks.len() < 10 {
            let request = pb::PollRequest {
                request_id: format!("poll-{polls}"),
                worker_id: "worker-1".to_string(),
                queues: vec!["reports.build".to_string()],
                max_tasks: 64,
                wait_ms: 2000,
            };
            polls += 1;
            assert!(polls < 20, "ten queued executions were not leased");
            let response = retry(|| {
                let mut client = cluster.workers(follower);
                let request = request.clone();
                async move { client.poll(request).await }
            })
            .await
            .expect("poll")
            .into_inner();
            tasks.extend(response.tasks);
        }
        assert_eq!(tasks.len(), 10);
        for (index, task) in tasks.iter().enumerate() {
            let lease_id = task.lease.as_ref().expect("lease").lease_id;
            if index == 9 {
                retry(|| {
                    let mut client = cluster.executions(leader);
                    let request = pb::CancelExecutionRequest {
                        request_id: format!("cancel-{}", task.execution_id),
                        execution_id: task.execution_id.clone(),
                        actor: Some(user("alice")),
                    };
                    async move { client.cancel_execution(request).await }
                })
                .await
                .expect("cancel execution");
                continue;
            }
            let outcome = if index == 8 {
                pb::report_request::Outcome::Failed(pb::ReportFailed {
                    code: "BROKEN".to_string(),
                    message: "the report generator broke".to_string(),
                    retryable: false,
                })
            } else {
                pb::report_request::Outcome::Completed(pb::ReportCompleted {
                    output_json: format!(r#"{{"pages":{index}}}"#),
                })
            };
            retry(|| {
                let mut client = cluster.workers(if index % 2 == 0 { leader } else { follower });
                let request = pb::ReportRequest {
                    request_id: format!("report-{lease_id}"),
                    lease_id,
                    worker_id: "worker-1".to_string(),
                    outcome: Some(outcome.clone()),
                };
                async move { client.report(request).await }
            })
            .await
            .expect("report");
        }
        for index in 0..3 {
            let id = format!("ex-queued-{index}");
            submit(
                &cluster,
                leader,
                submit_request("reports.build", &id, &format!("submit-{id}"), format!(r#"{{"later":{index}}}"#)),
            )
            .await;
        }

        // Nothing has a deadline: no lease, no backoff.
        let mut finals = BTreeMap::new();
        for id in (0..10).map(|index| format!("ex-run-{index}")).chain((0..3).map(|index| format!("ex-queued-{index}")))
        {
            let execution = get_execution(&cluster, leader, &id).await.expect("execution exists");
            let state = pb::ExecutionState::try_from(execution.state).expect("known state");
            assert!(
                !matches!(state, pb::ExecutionState::Leased | pb::ExecutionState::Backoff),
                "{id} still has a deadline: {state:?}"
            );
            *finals.entry(format!("{state:?}")).or_insert(0) += 1;
        }
        assert_eq!(
            finals,
            BTreeMap::from([
                ("Completed".to_string(), 8),
                ("Failed".to_string(), 1),
                ("Cancelled".to_string(), 1),
                ("Queued".to_string(), 3),
            ])
        );

        // The only deadline left is the retention run, once a minute of
        // cluster time after the first one (right after the first write); this
        // test finishes well within that minute, so the restarted leader has
        // no tick to propose and the state must come back bit for bit.
        let hash_before = cluster.wait_converged().await;
        for id in 1..=3 {
            cluster.kill(id);
        }
        for id in 1..=3 {
            cluster.spawn(id);
        }
        let leader_after = cluster.wait_for_leader().await;
        wait_for_hash(&cluster, &hash_before).await;

        // The restored state serves reads and takes writes.
        let completed = get_execution(&cluster, leader_after, "ex-run-0").await.expect("ex-run-0 survives");
        assert_eq!(completed.state, pb::ExecutionState::Completed as i32);
        let consumed = get_approval(&cluster, leader_after, "apr-consumed").await.expect("apr-consumed survives");
        assert_eq!(consumed.status, pb::ApprovalStatus::Consumed as i32);
        assert_eq!(consumed.consumed_by_execution_id.as_deref(), Some("ex-paid"));
        create_approval(&cluster, leader_after, "apr-after-restart").await;
        cluster.wait_converged().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lagging_node_catches_up_through_a_snapshot_and_serves_linearizable_reads() {
    bounded(async {
        let mut cluster = Cluster::start_with(3, &["--snapshot-logs-since-last=20", "--logs-to-keep=5"]).await;
        let leader = cluster.wait_for_leader().await;
        for index in 0..100 {
            create_approval(&cluster, leader, &format!("apr-{index}")).await;
        }
        cluster.wait_converged().await;
        let leader_status = cluster.status(leader).await.expect("leader status");
        let leader_snapshot_index = leader_status.snapshot_index.expect("the leader built a snapshot");
        assert!(
            leader_snapshot_index >= 20,
            "the leader's snapshot covers early entries: {leader_snapshot_index}"
        );

        // The new node would build its first snapshot only after 100000
        // entries: if it reports a snapshot, the leader sent it.
        let new_node = cluster.join_learner_by_snapshot(leader).await;
        let promoted = retry(|| {
            let mut client = cluster.cluster(leader);
            let request = pb::PromoteRequest { request_id: String::new(), node_id: new_node };
            async move { client.promote(request).await }
        })
        .await
        .expect("promote")
        .into_inner();
        assert!(
            promoted.members.iter().any(|member| member.node_id == new_node && member.voter),
            "node {new_node} is a voter: {:?}",
            promoted.members
        );
        cluster.wait_converged().await;

        let new_status = cluster.status(new_node).await.expect("new node status");
        let installed = new_status.snapshot_index.expect("the new node received a snapshot");
        assert!(
            installed >= leader_snapshot_index,
            "the installed snapshot ({installed}) is at least the leader's snapshot at join time ({leader_snapshot_index})"
        );
        assert_eq!(new_status.role, "Follower");

        // A write made just before is visible to a read through the new node.
        create_approval(&cluster, leader, "apr-after-join").await;
        let seen = get_approval(&cluster, new_node, "apr-after-join").await.expect("the new node sees the write");
        assert_eq!(seen.status, pb::ApprovalStatus::Pending as i32);
        assert!(get_approval(&cluster, new_node, "apr-0").await.is_some(), "early writes came with the snapshot");
        cluster.wait_converged().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn follower_restart_rejoins_and_catches_up() {
    bounded(async {
        let mut cluster = Cluster::start(3).await;
        let leader = cluster.wait_for_leader().await;
        create_approval(&cluster, leader, "apr-before").await;
        cluster.wait_converged().await;
        let follower = cluster.follower().await;
        let applied_before = cluster.status(follower).await.expect("follower status").last_applied_index;

        cluster.kill(follower);
        for index in 0..30 {
            create_approval(&cluster, leader, &format!("apr-while-down-{index}")).await;
        }
        let hash_while_down = cluster.wait_converged().await;
        let leader_status = cluster.status(leader).await.expect("leader status");
        assert!(leader_status.last_applied_index >= applied_before + 30);

        cluster.spawn(follower);
        wait_for_hash(&cluster, &hash_while_down).await;
        let status = cluster.status(follower).await.expect("restarted follower status");
        assert_eq!(status.role, "Follower");
        // It follows the leader and has applied all it has. On a loaded
        // machine an election may have come meanwhile (a node starved past
        // its election timeout): then that is the leader of the new term,
        // and its first entry counts.
        let leading = cluster.wait_for_leader().await;
        let leading_status = cluster.status(leading).await.expect("leader status");
        assert_eq!(status.leader_id, Some(leading));
        assert_eq!(status.last_applied_index, leading_status.last_applied_index);

        // It keeps following: a later write reaches it too.
        create_approval(&cluster, follower, "apr-after").await;
        cluster.wait_converged().await;
        let status = cluster.status(follower).await.expect("restarted follower status");
        assert!(status.last_applied_index > leader_status.last_applied_index);
    })
    .await;
}
