//! The routing layer in front of every service, on a real in-process cluster
//! (three nodes, real gRPC on loopback, real sled in temporary directories):
//! a call through a follower is served by the leader and names it, a
//! forwarded call is never forwarded again, the request id assigned before
//! forwarding is the one the leader deduplicates on, an RPC that has no
//! routing code of its own (`AuditService/GetEvent`) is forwarded like any,
//! and without a leader a call is refused with a retry hint.

use std::time::Duration;

use gavel_proto::error_detail::read_error_detail;
use gavel_proto::metadata;
use gavel_proto::v1 as pb;
use gavel_proto::v1::audit_service_client::AuditServiceClient;
use gavel_proto::v1::capability_service_client::CapabilityServiceClient;
use gavel_proto::v1::execution_service_client::ExecutionServiceClient;
use gavel_raft::RaftTimings;
use gavel_server::server::{start, NodeOptions, RunningNode};
use tonic::metadata::MetadataValue;
use tonic::transport::{Channel, Endpoint};
use tonic::Code;

mod support;

/// Nodes started in this process; each is stopped by [`InProcessCluster::stop`].
struct InProcessCluster {
    _dir: tempfile::TempDir,
    nodes: Vec<RunningNode>,
}

impl InProcessCluster {
    /// Starts `count` voters; the first bootstraps the cluster when `bootstrap`.
    async fn start(count: u64, bootstrap: bool) -> InProcessCluster {
        let dir = tempfile::tempdir().expect("temp dir");
        let (listeners, peers) = support::loopback_listeners(count).await;
        let mut nodes = Vec::new();
        for (index, listener) in listeners.into_iter().enumerate() {
            let id = index as u64 + 1;
            let options = NodeOptions {
                id,
                advertise: peers[&id].clone(),
                peers: peers.clone(),
                data_dir: dir.path().join(format!("n{id}")),
                timings: RaftTimings::default(),
                bootstrap: bootstrap && id == 1,
                // No audit checkpoints: each node's checkpointer registers
                // its note key through the log as soon as it sees a leader,
                // at a moment of its own, and the tests here compare the
                // leader's log before and after a call (a forwarded call
                // "reached the log" when a key registration landed meanwhile:
                // the fresh-clone CI of aee651c).
                settings: gavel_server::node::ServerSettings {
                    audit_checkpoints: false,
                    ..gavel_server::node::ServerSettings::default()
                },
                security: gavel_server::security::Security::insecure(),
            };
            nodes.push(start(options, listener).await.expect("start a node"));
        }
        InProcessCluster { _dir: dir, nodes }
    }

    /// Waits until one node leads and every node knows it; returns (leader,
    /// a follower) as indexes into `nodes`.
    async fn leader_and_follower(&self) -> (usize, usize) {
        support::leader_and_follower(&self.nodes).await
    }

    fn addr(&self, index: usize) -> String {
        self.nodes[index].addr.to_string()
    }

    fn channel(&self, index: usize) -> Channel {
        Endpoint::from_shared(format!("http://{}", self.addr(index)))
            .expect("endpoint")
            .timeout(Duration::from_secs(15))
            .connect_lazy()
    }

    /// Registers a capability through node `index`.
    async fn register(&self, index: usize, id: &str) {
        CapabilityServiceClient::new(self.channel(index)).register_capability(register(id)).await.expect("register");
    }

    fn last_log_index(&self, index: usize) -> Option<u64> {
        self.nodes[index].node.raft.status().last_log_index
    }

    async fn stop(self) {
        for node in self.nodes {
            node.stop().await.expect("a clean stop");
        }
    }
}

fn spec(id: &str) -> pb::CapabilitySpec {
    pb::CapabilitySpec {
        id: id.to_string(),
        side_effect: pb::SideEffect::Read as i32,
        risk: pb::Risk::Low as i32,
        ..pb::CapabilitySpec::default()
    }
}

fn register(id: &str) -> pb::RegisterCapabilityRequest {
    pb::RegisterCapabilityRequest { request_id: format!("register-{id}"), spec: Some(spec(id)) }
}

fn submit(request_id: &str) -> pb::SubmitRequest {
    pb::SubmitRequest {
        request_id: request_id.to_string(),
        capability_id: "docs.read".to_string(),
        input_json: "{}".to_string(),
        actor: Some(pb::Actor { id: "alice".to_string(), kind: pb::ActorKind::User as i32, ..pb::Actor::default() }),
        surface: "routing-test".to_string(),
        ..pb::SubmitRequest::default()
    }
}

/// The execution a submit answered with, and whether it created it.
fn submitted(result: Result<tonic::Response<pb::SubmitResponse>, tonic::Status>) -> (pb::Execution, bool) {
    let response = result.expect("submit").into_inner();
    match response.outcome {
        Some(pb::submit_response::Outcome::Execution(execution)) => (execution, response.created),
        other => panic!("an execution: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_call_through_a_follower_is_served_by_the_leader_and_names_it() {
    let cluster = InProcessCluster::start(3, true).await;
    let (leader, follower) = cluster.leader_and_follower().await;

    let response = CapabilityServiceClient::new(cluster.channel(follower))
        .register_capability(register("docs.read"))
        .await
        .expect("a registration through a follower");
    let named = response.metadata().get(metadata::LEADER).and_then(|value| value.to_str().ok());
    assert_eq!(named, Some(cluster.addr(leader).as_str()), "the answer names the leader that served it");
    assert!(
        cluster.nodes[leader].node.reads.read(|state| state.capability("docs.read", None).is_some()),
        "the leader applied the registration"
    );

    let direct = CapabilityServiceClient::new(cluster.channel(leader))
        .register_capability(register("docs.write"))
        .await
        .expect("a registration on the leader");
    assert!(direct.metadata().get(metadata::LEADER).is_none(), "the leader's own answers are not marked forwarded");
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_forwarded_call_is_not_forwarded_again() {
    let cluster = InProcessCluster::start(3, true).await;
    let (leader, follower) = cluster.leader_and_follower().await;
    let log_before = cluster.last_log_index(leader);

    let mut request = tonic::Request::new(register("docs.read"));
    request.metadata_mut().insert(metadata::FORWARDED, MetadataValue::from_static("1"));
    let status = CapabilityServiceClient::new(cluster.channel(follower))
        .register_capability(request)
        .await
        .expect_err("a follower does not forward a forwarded call");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    let detail = read_error_detail(&status).expect("an error detail");
    assert_eq!(detail.code, "UNAVAILABLE");
    assert_eq!(detail.leader_hint.as_deref(), Some(cluster.addr(leader).as_str()), "the refusal names the leader");
    assert!(detail.retry_after_ms.is_some(), "{detail:?}");
    assert_eq!(cluster.last_log_index(leader), log_before, "nothing reached the log");
    assert!(cluster.nodes[leader].node.reads.read(|state| state.capability("docs.read", None).is_none()));
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_request_id_assigned_before_forwarding_is_the_one_the_leader_deduplicates_on() {
    let cluster = InProcessCluster::start(3, true).await;
    let (leader, follower) = cluster.leader_and_follower().await;
    cluster.register(follower, "docs.read").await;
    let mut executions = ExecutionServiceClient::new(cluster.channel(follower));

    // A request id in the header stands in for one the message lacks: the
    // same header twice is one execution, named after that id, and the
    // retry gets the first call's answer again.
    let mut answers = Vec::new();
    for _ in 0..2 {
        let mut request = tonic::Request::new(submit(""));
        request.metadata_mut().insert(metadata::REQUEST_ID, MetadataValue::from_static("header-id-1"));
        let (execution, created) = submitted(executions.submit(request).await);
        assert_eq!(execution.execution_id, gavel_core::ids::execution_id_for("header-id-1"));
        answers.push((execution.execution_id, created));
    }
    assert_eq!(answers[0], answers[1], "the retry is deduplicated");
    assert_eq!(cluster.nodes[leader].node.reads.read(gavel_core::State::execution_count), 1, "one execution");

    // Without any id, the layer assigns a fresh one to each call.
    let mut ids = Vec::new();
    for _ in 0..2 {
        let (execution, created) = submitted(executions.submit(submit("")).await);
        assert!(created);
        ids.push(execution.execution_id);
    }
    assert_ne!(ids[0], ids[1], "two calls without an id are two executions");
    assert_eq!(cluster.nodes[leader].node.reads.read(gavel_core::State::execution_count), 3);

    // The message's id wins over the header's.
    let mut request = tonic::Request::new(submit("message-id-1"));
    request.metadata_mut().insert(metadata::REQUEST_ID, MetadataValue::from_static("header-id-2"));
    let (execution, _) = submitted(executions.submit(request).await);
    assert_eq!(execution.execution_id, gavel_core::ids::execution_id_for("message-id-1"));
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn get_event_reads_one_event_by_cursor_through_any_node() {
    let cluster = InProcessCluster::start(3, true).await;
    let (leader, follower) = cluster.leader_and_follower().await;
    cluster.register(leader, "docs.read").await;

    for via in [leader, follower] {
        let mut audit = AuditServiceClient::new(cluster.channel(via));
        let event = audit.get_event(pb::GetEventRequest { cursor: 1 }).await.expect("get event").into_inner().event;
        let event = event.expect("the first event is retained");
        assert_eq!((event.cursor, event.r#type.as_str()), (1, "capability.registered"));
        assert_eq!(event.capability_id.as_deref(), Some("docs.read"));
        let missing = audit.get_event(pb::GetEventRequest { cursor: 2 }).await.expect("get event").into_inner();
        assert!(missing.event.is_none(), "no event has cursor 2 yet: {missing:?}");
    }
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_a_leader_a_call_is_unavailable_with_a_retry_hint() {
    // Never bootstrapped: no node ever becomes leader.
    let cluster = InProcessCluster::start(1, false).await;
    let status = ExecutionServiceClient::new(cluster.channel(0))
        .submit(submit("no-leader-1"))
        .await
        .expect_err("no leader to serve it");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    let detail = read_error_detail(&status).expect("an error detail");
    assert!(detail.retry_after_ms.is_some_and(|ms| ms > 0), "{detail:?}");
    assert_eq!(detail.leader_hint, None);
    cluster.stop().await;
}
