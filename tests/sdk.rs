//! The client and worker SDK against a real cluster of `gavel node` processes.

mod support;

use std::time::{Duration, Instant};

use gavel_client::{CancellationToken, Client, DecideOptions, HandlerError, Worker};
use gavel_proto::v1 as pb;
use support::{capability, register, user, Cluster};
use tokio::sync::mpsc;

fn endpoints(cluster: &Cluster) -> Vec<String> {
    cluster.running().into_iter().map(|id| cluster.addr(id)).collect()
}

async fn submit(client: &Client, capability_id: &str, execution_id: &str, input: &str) -> pb::SubmitResponse {
    client
        .submit(pb::SubmitRequest {
            execution_id: Some(execution_id.to_string()),
            capability_id: capability_id.to_string(),
            input_json: input.to_string(),
            actor: Some(user("alice")),
            surface: "test".to_string(),
            ..pb::SubmitRequest::default()
        })
        .await
        .expect("submit")
}

async fn wait_final(client: &Client, execution_id: &str) -> pb::Execution {
    let started = Instant::now();
    loop {
        let response = client
            .wait_execution(pb::WaitExecutionRequest { execution_id: execution_id.to_string(), timeout_ms: 5_000 })
            .await
            .expect("wait");
        if !response.timed_out {
            return response.execution.expect("execution");
        }
        assert!(started.elapsed() < Duration::from_secs(60), "{execution_id} never finalized");
    }
}

/// A worker whose handler announces each start and waits for its token.
fn blocking_worker(
    endpoints: &[String],
    queue: &str,
) -> (Worker, mpsc::UnboundedReceiver<(String, Instant, CancellationToken)>) {
    let (started, receiver) = mpsc::unbounded_channel();
    let worker = Worker::builder(endpoints)
        .queue(queue)
        .concurrency(2)
        .heartbeat_interval(Duration::from_millis(200))
        .poll_wait(Duration::from_secs(2))
        .handler(move |context| {
            let started = started.clone();
            async move {
                let _ = started.send((context.execution_id.clone(), Instant::now(), context.cancel.clone()));
                context.cancel.cancelled().await;
                Err(HandlerError::retryable("CANCELLED", "stopped by its token"))
            }
        })
        .build()
        .expect("worker");
    (worker, receiver)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn caller_cancel_reaches_the_running_handlers_token() {
    let cluster = Cluster::start(3).await;
    register(
        &cluster,
        1,
        pb::CapabilitySpec { timeout_ms: Some(60_000), ..capability("slow.read", pb::SideEffect::Read) },
    )
    .await;
    let client = Client::new(&endpoints(&cluster)).expect("client");
    let (worker, mut started) = blocking_worker(&endpoints(&cluster), "slow.read");
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(worker.run(shutdown.clone()));

    submit(&client, "slow.read", "ex-cancel", r#"{"q":1}"#).await;
    let (execution_id, _, token) =
        tokio::time::timeout(Duration::from_secs(20), started.recv()).await.expect("handler starts").expect("start");
    assert_eq!(execution_id, "ex-cancel");
    assert!(!token.is_cancelled());
    let cancelled = client
        .cancel_execution(pb::CancelExecutionRequest { execution_id: "ex-cancel".to_string(), ..Default::default() })
        .await
        .expect("cancel")
        .execution
        .expect("execution");
    assert_eq!(cancelled.state, pb::ExecutionState::Cancelled as i32);
    tokio::time::timeout(Duration::from_secs(10), token.cancelled())
        .await
        .expect("the cancel reaches the handler's token");
    shutdown.cancel();
    running.await.expect("worker task").expect("worker run");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn worker_aborts_its_handler_at_the_deadline_when_the_cluster_is_gone() {
    let mut cluster = Cluster::start(3).await;
    register(
        &cluster,
        1,
        pb::CapabilitySpec { timeout_ms: Some(3_000), ..capability("bounded.read", pb::SideEffect::Read) },
    )
    .await;
    let client = Client::new(&endpoints(&cluster)).expect("client");
    let (worker, mut started) = blocking_worker(&endpoints(&cluster), "bounded.read");
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(worker.run(shutdown.clone()));
    submit(&client, "bounded.read", "ex-deadline", "{}").await;
    let (_, started_at, token) =
        tokio::time::timeout(Duration::from_secs(20), started.recv()).await.expect("handler starts").expect("start");
    for id in cluster.running() {
        cluster.kill(id);
    }
    tokio::time::timeout(Duration::from_secs(10), token.cancelled())
        .await
        .expect("the local deadline fires without a cluster");
    let elapsed = started_at.elapsed();
    assert!(elapsed >= Duration::from_millis(2_500), "the token fired at {elapsed:?}, before the 3 s deadline");
    shutdown.cancel();
    running.await.expect("worker task").expect("worker run");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn workers_keep_going_after_the_leader_is_killed_and_finalize_each_execution_once() {
    assert_eq!(gavel_client::POLL_TASKS_MAX, gavel_core::limits::POLL_TASKS_MAX, "the SDK's copy of the limit");
    let mut cluster = Cluster::start(3).await;
    let spec = pb::CapabilitySpec {
        timeout_ms: Some(3_000),
        retry: Some(pb::RetryConfig { max_attempts: 3, backoff_ms: Some(100), non_retryable_codes: Vec::new() }),
        ..capability("echo.read", pb::SideEffect::Read)
    };
    register(&cluster, 1, spec).await;
    let all = endpoints(&cluster);
    let client = Client::new(&all).expect("client");
    let shutdown = CancellationToken::new();
    let mut workers = Vec::new();
    for i in 0..2 {
        let worker = Worker::builder(&all)
            .queue("echo.read")
            .worker_id(&format!("echo-{i}"))
            // Above the cluster's 64 tasks per poll: the SDK asks for at most
            // that many (#42: a worker of concurrency 100 never took work).
            .concurrency(100)
            .poll_wait(Duration::from_secs(1))
            .handler(|context| async move {
                tokio::time::sleep(Duration::from_millis(20)).await;
                Ok(serde_json::json!({ "echo": context.input_json }))
            })
            .build()
            .expect("worker");
        workers.push(tokio::spawn(worker.run(shutdown.clone())));
    }
    let ids: Vec<String> = (0..30).map(|i| format!("ex-echo-{i}")).collect();
    for id in &ids[..15] {
        submit(&client, "echo.read", id, r#"{"n":1}"#).await;
    }
    let leader = cluster.wait_for_leader().await;
    cluster.kill(leader);
    for id in &ids[15..] {
        submit(&client, "echo.read", id, r#"{"n":2}"#).await;
    }
    for id in &ids {
        let execution = wait_final(&client, id).await;
        assert_eq!(execution.state, pb::ExecutionState::Completed as i32, "{id}: {execution:?}");
        let events = client
            .list_execution_events(pb::ListExecutionEventsRequest {
                execution_id: id.clone(),
                after_cursor: 0,
                limit: 1000,
            })
            .await
            .expect("events")
            .events;
        let finals = events
            .iter()
            .filter(|event| {
                matches!(event.r#type.as_str(), "capability.completed" | "capability.failed" | "capability.cancelled")
            })
            .count();
        assert_eq!(finals, 1, "{id} finalized exactly once: {events:?}");
    }
    shutdown.cancel();
    for worker in workers {
        worker.await.expect("worker task").expect("worker run");
    }
}

/// A loopback proxy that forwards to `target` but, on its first connection,
/// closes the client side at the moment the server's answer arrives: the
/// answer is recognised by `marker`, bytes that only the response body
/// carries. The request took effect and the client never hears about it.
async fn ambiguous_proxy(
    target: String,
    marker: &'static [u8],
) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
    let addr = listener.local_addr().expect("proxy addr").to_string();
    let cut = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let cuts = cut.clone();
    tokio::spawn(async move {
        let mut first = true;
        while let Ok((mut inbound, _)) = listener.accept().await {
            let target = target.clone();
            let drop_response = std::mem::replace(&mut first, false);
            let cuts = cuts.clone();
            tokio::spawn(async move {
                let Ok(mut outbound) = tokio::net::TcpStream::connect(&target).await else { return };
                if !drop_response {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    return;
                }
                let (mut in_read, mut in_write) = inbound.split();
                let (mut out_read, mut out_write) = outbound.split();
                let upstream = tokio::io::copy(&mut in_read, &mut out_write);
                let downstream = async {
                    use tokio::io::{AsyncReadExt, AsyncWriteExt};
                    let mut buffer = vec![0u8; 64 * 1024];
                    loop {
                        let Ok(read) = out_read.read(&mut buffer).await else { return };
                        if read == 0 {
                            return;
                        }
                        if buffer[..read].windows(marker.len()).any(|window| window == marker) {
                            cuts.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                            return;
                        }
                        if in_write.write_all(&buffer[..read]).await.is_err() {
                            return;
                        }
                    }
                };
                tokio::select! { _ = upstream => {}, _ = downstream => {} }
            });
        }
    });
    (addr, cut)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_submit_retried_after_an_ambiguous_failure_creates_one_execution() {
    let cluster = Cluster::start(3).await;
    register(&cluster, 1, capability("once.read", pb::SideEffect::Read)).await;
    let leader = cluster.wait_for_leader().await;
    let (proxy, cut) = ambiguous_proxy(cluster.addr(leader), b"once.read").await;
    let client = Client::new(&[proxy]).expect("client");
    // No execution id: the node assigns one, so only the request id can make the retry safe.
    let response = client
        .submit(pb::SubmitRequest {
            request_id: "submit-once".to_string(),
            capability_id: "once.read".to_string(),
            input_json: r#"{"k":"v"}"#.to_string(),
            actor: Some(user("alice")),
            surface: "test".to_string(),
            ..pb::SubmitRequest::default()
        })
        .await
        .expect("the retried submit succeeds");
    let Some(pb::submit_response::Outcome::Execution(execution)) = response.outcome else {
        panic!("execution expected")
    };
    assert_eq!(
        cut.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the first answer was produced (so the submit took effect) and cut before the client saw it"
    );
    let direct = Client::new(&endpoints(&cluster)).expect("client");
    let events = direct
        .list_events(pb::ListEventsRequest {
            after_cursor: 0,
            limit: 1000,
            execution_id: None,
            ..pb::ListEventsRequest::default()
        })
        .await
        .expect("events")
        .events;
    let requested: Vec<_> = events.iter().filter(|event| event.r#type == "capability.requested").collect();
    assert_eq!(requested.len(), 1, "one execution was created: {requested:?}");
    assert_eq!(requested[0].execution_id.as_deref(), Some(execution.execution_id.as_str()));
}

/// Lists approvals through `client` and returns how many RPC attempts it took.
async fn attempts_of_one_call(client: &Client) -> u64 {
    let before = client.attempts();
    client.list_approvals(pb::ListApprovalsRequest::default()).await.expect("list approvals");
    client.attempts() - before
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_client_goes_straight_to_the_leader_once_a_forwarded_answer_names_it() {
    let mut cluster = Cluster::start(3).await;
    let leader = cluster.wait_for_leader().await;
    let follower = cluster.follower().await;
    let endpoints = vec![cluster.addr(follower), cluster.addr(leader)];
    let following = Client::new(&endpoints).expect("client");
    let config = gavel_client::ClientConfig { follow_leader: false, ..gavel_client::ClientConfig::default() };
    let pinned = Client::with_config(&endpoints, config).expect("client");
    // Both first reach the follower, which forwards to the leader.
    assert_eq!(attempts_of_one_call(&following).await, 1);
    assert_eq!(attempts_of_one_call(&pinned).await, 1);
    // With the follower gone, the client that learned the leader needs one
    // attempt; the pinned one first tries the dead follower.
    cluster.kill(follower);
    assert_eq!(attempts_of_one_call(&following).await, 1, "the next call went to the leader directly");
    assert!(attempts_of_one_call(&pinned).await >= 2, "the pinned client tried the follower first");
}

/// Found by `gavel-lab bench --scale`: a long-poll whose lease grant committed
/// while its answer was lost used to leave the lease to expire unused (the
/// retry found no queued work); the retry now gets the same lease back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_poll_retried_after_its_answer_was_lost_gets_the_lease_it_was_granted() {
    let cluster = Cluster::start(3).await;
    let mut spec = capability("lost.poll", pb::SideEffect::Read);
    spec.queue = Some("lost-poll".to_string());
    register(&cluster, 1, spec).await;
    let leader = cluster.wait_for_leader().await;
    let direct = Client::new(&endpoints(&cluster)).expect("client");
    submit(&direct, "lost.poll", "ex-lost-poll", r#"{"k":1}"#).await;
    let (proxy, cut) = ambiguous_proxy(cluster.addr(leader), b"lost.poll").await;
    let worker = Client::new(&[proxy]).expect("client");
    let polled = worker
        .poll(pb::PollRequest {
            request_id: "poll-lost-answer".to_string(),
            worker_id: "w-lost".to_string(),
            queues: vec!["lost-poll".to_string()],
            max_tasks: 1,
            wait_ms: 1_000,
        })
        .await
        .expect("the retried poll answers");
    assert_eq!(cut.load(std::sync::atomic::Ordering::SeqCst), 1, "the first answer (with the task) was cut");
    let task = polled.tasks.first().expect("the retry delivers the task granted to the first attempt");
    assert_eq!(task.execution_id, "ex-lost-poll");
    let execution = direct
        .get_execution(pb::GetExecutionRequest { execution_id: "ex-lost-poll".to_string() })
        .await
        .expect("get")
        .execution
        .expect("execution");
    assert_eq!(execution.attempts, 1, "one lease was granted, not two");
    assert_eq!(execution.current_lease.map(|lease| lease.lease_id), task.lease.as_ref().map(|lease| lease.lease_id));
}

/// SPEC §13 through the SDK: a decision or vote names the terms hash its
/// author was shown; a stale one is refused `APPROVAL_TERMS_CHANGED` and
/// decides nothing, the current one decides, and `decide` sends the hash
/// of the terms it reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_on_a_stale_terms_hash_is_refused_and_one_on_the_shown_hash_decides() {
    let cluster = Cluster::start(1).await;
    let client = Client::new(&endpoints(&cluster)).expect("client");
    let bob = DecideOptions { approver: Some(user("bob")), comment: None };
    let stale = "0".repeat(64);

    client.create_approval(support::approval_request("apr-terms-1", "sdk-test")).await.expect("create");
    let shown = client.approval_terms("apr-terms-1").await.expect("read the terms");
    assert_eq!(shown.terms_hash.len(), 64, "{shown:?}");
    assert!(shown.terms_json.contains(r#""approvalId":"apr-terms-1""#), "{}", shown.terms_json);
    let refused = client
        .decide_with_terms("apr-terms-1", pb::ApprovalStatus::Approved, &stale, bob.clone())
        .await
        .expect_err("a stale terms hash");
    assert_eq!(refused.code(), "APPROVAL_TERMS_CHANGED", "{refused}");
    let unchanged = client.approval_terms("apr-terms-1").await.expect("read again");
    assert_eq!(unchanged.status, pb::ApprovalStatus::Pending as i32, "nothing decided");
    let approved = client
        .decide_with_terms("apr-terms-1", pb::ApprovalStatus::Approved, &shown.terms_hash, bob.clone())
        .await
        .expect("the shown terms hash decides");
    assert_eq!(approved.status, pb::ApprovalStatus::Approved as i32);

    client.create_approval(support::approval_request("apr-terms-2", "sdk-test")).await.expect("create");
    let rejected =
        client.decide("apr-terms-2", pb::ApprovalStatus::Rejected, bob.clone()).await.expect("decide on what it read");
    assert_eq!(rejected.status, pb::ApprovalStatus::Rejected as i32);

    // A vote on a governed approval is bound the same way.
    let factor = pb::PolicyFactor {
        name: "pair".to_string(),
        k: 2,
        scope: None,
        group: vec!["user:bob".to_string(), "user:carol".to_string()],
    };
    client
        .set_policy(pb::SetPolicyRequest {
            name: "pair".to_string(),
            capability_ids: vec!["orders.refund".to_string()],
            factors: vec![factor],
            ..pb::SetPolicyRequest::default()
        })
        .await
        .expect("set the policy");
    client.create_approval(support::approval_request("apr-terms-3", "sdk-test")).await.expect("create");
    let governed = client.approval_terms("apr-terms-3").await.expect("read the terms");
    assert!(governed.quorum.is_some(), "governed: {governed:?}");
    let refused = client
        .vote_with_terms("apr-terms-3", true, &governed.input_hash, &stale, bob.clone())
        .await
        .expect_err("a stale terms hash");
    assert_eq!(refused.code(), "APPROVAL_TERMS_CHANGED", "{refused}");
    let voted = client
        .vote_with_terms("apr-terms-3", true, &governed.input_hash, &governed.terms_hash, bob)
        .await
        .expect("the shown terms hash counts");
    let votes = voted.quorum.map(|quorum| quorum.votes.len());
    assert_eq!(votes, Some(1), "one vote counted");
}
