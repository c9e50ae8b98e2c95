//! Every node serves gRPC health and server reflection (v1 and v1alpha).

mod support;

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
        let mut health = HealthClient::new(cluster.channel(id));
        for service in ["gavel.v1.ApprovalService", "gavel.v1.WorkerService", "gavel.v1.ClusterService"] {
            let status = health
                .check(HealthCheckRequest { service: service.to_string() })
                .await
                .expect("health check")
                .into_inner()
                .status;
            assert_eq!(status, ServingStatus::Serving as i32, "node {id} {service}");
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
