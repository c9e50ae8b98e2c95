//! Every node serves gRPC health and server reflection (v1 and v1alpha), the
//! health service is itself described by reflection (so `grpcurl` resolves
//! `grpc.health.v1.Health/Check`), and a node cut off from its quorum reports
//! `NOT_SERVING` until it is back in touch.

mod support;

use std::time::{Duration, Instant};

use support::Cluster;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;
use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
use tonic_reflection::pb::v1::ServerReflectionRequest;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_node_reports_serving_health_and_lists_the_gavel_services_by_reflection() {
    let cluster = Cluster::start(3).await;
    for id in cluster.running() {
        // A follower turns SERVING once it has heard from the leader, which
        // may be just after the cluster reports a leader.
        wait_health(&cluster, id, ServingStatus::Serving, SETTLE).await;
        for service in ["", "gavel.v1.ApprovalService", "gavel.v1.WorkerService", "gavel.v1.ClusterService"] {
            assert_eq!(health(&cluster, id, service).await, Some(ServingStatus::Serving), "node {id} {service:?}");
        }

        let mut reflection = ServerReflectionClient::new(cluster.channel(id));
        let request = ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        };
        let mut responses = reflection
            .server_reflection_info(tokio_stream::iter(vec![request]))
            .await
            .expect("reflection")
            .into_inner();
        let response = responses.message().await.expect("reflection reply").expect("one reply");
        let Some(MessageResponse::ListServicesResponse(list)) = response.message_response else {
            panic!("node {id}: not a service list: {response:?}")
        };
        let names: Vec<String> = list.service.into_iter().map(|service| service.name).collect();
        for expected in [
            "gavel.v1.ApprovalService",
            "gavel.v1.CapabilityService",
            "gavel.v1.ExecutionService",
            "gavel.v1.WorkerService",
            "gavel.v1.AuditService",
            "gavel.v1.ClusterService",
        ] {
            assert!(names.iter().any(|name| name == expected), "node {id} lists {expected}: {names:?}");
        }
    }
}

/// How long a healthy node may take to turn SERVING after its cluster has a leader.
const SETTLE: Duration = Duration::from_secs(5);

/// How long a node cut off from its quorum may keep reporting SERVING: an
/// election timeout (for a follower to drop its leader) plus a health
/// interval and a probe timeout, with margin for a loaded machine.
const TURNS_NOT_SERVING: Duration = Duration::from_secs(6);

/// How long a node may take to turn SERVING again once its peers are back
/// (an election may run first).
const TURNS_SERVING: Duration = Duration::from_secs(15);

/// The status node `id` reports for `service`, or `None` if it does not answer.
async fn health(cluster: &Cluster, id: u64, service: &str) -> Option<ServingStatus> {
    let mut client = HealthClient::new(cluster.channel(id));
    let request = HealthCheckRequest { service: service.to_string() };
    let reply = tokio::time::timeout(Duration::from_secs(2), client.check(request)).await.ok()?.ok()?;
    ServingStatus::try_from(reply.into_inner().status).ok()
}

/// Waits until node `id` reports `expected` for the overall service (and then
/// checks a gavel.v1 service agrees); returns how long it took. Panics after `bound`.
async fn wait_health(cluster: &Cluster, id: u64, expected: ServingStatus, bound: Duration) -> Duration {
    let started = Instant::now();
    loop {
        let overall = health(cluster, id, "").await;
        if overall == Some(expected) {
            let api = health(cluster, id, "gavel.v1.ExecutionService").await;
            assert_eq!(api, Some(expected), "node {id}: gavel.v1.ExecutionService disagrees with the overall status");
            return started.elapsed();
        }
        assert!(started.elapsed() < bound, "node {id} still reports {overall:?}, not {expected:?}, after {bound:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reflection_describes_the_health_service_so_grpcurl_can_call_it() {
    let cluster = Cluster::start(1).await;
    let mut reflection = ServerReflectionClient::new(cluster.channel(1));
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::FileContainingSymbol("grpc.health.v1.Health".to_string())),
    };
    let mut responses =
        reflection.server_reflection_info(tokio_stream::iter(vec![request])).await.expect("reflection").into_inner();
    let response = responses.message().await.expect("reflection reply").expect("one reply");
    let Some(MessageResponse::FileDescriptorResponse(files)) = response.message_response else {
        panic!("grpc.health.v1.Health is not described: {response:?}")
    };
    // A serialized FileDescriptorProto holds its package name verbatim.
    let needle = b"grpc.health.v1";
    let described = files.file_descriptor_proto.iter().any(|bytes| bytes.windows(needle.len()).any(|w| w == needle));
    assert!(described, "the reply holds the grpc.health.v1 file");
    wait_health(&cluster, 1, ServingStatus::Serving, SETTLE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_cut_off_from_its_quorum_reports_not_serving_until_it_is_back() {
    let mut cluster = Cluster::start(3).await;
    let leader = cluster.wait_for_leader().await;
    let followers: Vec<u64> = cluster.running().into_iter().filter(|id| *id != leader).collect();
    for id in cluster.running() {
        wait_health(&cluster, id, ServingStatus::Serving, SETTLE).await;
    }

    // The leader alone: it still believes it leads, but no quorum answers.
    for id in &followers {
        cluster.pause(*id);
    }
    let took = wait_health(&cluster, leader, ServingStatus::NotServing, TURNS_NOT_SERVING).await;
    eprintln!("isolated leader {leader} turned NOT_SERVING after {took:?}");
    for id in &followers {
        cluster.resume(*id);
    }
    for id in cluster.running() {
        wait_health(&cluster, id, ServingStatus::Serving, TURNS_SERVING).await;
    }

    // A follower alone: it loses its leader.
    let leader = cluster.wait_for_leader().await;
    let lone = cluster.running().into_iter().find(|id| *id != leader).expect("a follower");
    let others: Vec<u64> = cluster.running().into_iter().filter(|id| *id != lone).collect();
    for id in &others {
        cluster.pause(*id);
    }
    let took = wait_health(&cluster, lone, ServingStatus::NotServing, TURNS_NOT_SERVING).await;
    eprintln!("isolated follower {lone} turned NOT_SERVING after {took:?}");
    for id in &others {
        cluster.resume(*id);
    }
    let took = wait_health(&cluster, lone, ServingStatus::Serving, TURNS_SERVING).await;
    eprintln!("follower {lone} turned SERVING again after {took:?}");
}
