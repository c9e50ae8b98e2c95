//! gRPC health that means something: a node reports `SERVING` (for the
//! overall `""` service and every `gavel.v1` service) only while it can serve
//! through a leader that is in touch with a quorum, like etcd's `/health`.
//!
//! A small task per node judges its health at start, whenever its role or
//! known leader changes, and at least every [`HEALTH_CHECK_INTERVAL`]:
//!
//! - the leader is healthy when a read-index round (a heartbeat to a quorum)
//!   succeeds within [`HEALTH_PROBE_TIMEOUT`]; a leader cut off from its
//!   majority is not;
//! - a follower or learner is healthy when it knows a leader, that leader
//!   answers `ClusterService/Status` within [`HEALTH_PROBE_TIMEOUT`], and this
//!   node's applied index is at most [`LAG_ENTRIES_MAX`] entries behind the
//!   leader's. That status call (without the state hash) is made at
//!   most every [`LAG_CHECK_INTERVAL`] per follower while the leader stays
//!   the same; in between its last verdict stands;
//! - a node that knows no leader (an election, a lost quorum) is not.
//!
//! Probes (`grpc-health-probe`, Kubernetes gRPC probes, `grpcurl
//! grpc.health.v1.Health/Check`) see the result through the standard
//! `grpc.health.v1.Health` service, whose descriptors are registered in
//! reflection by [`crate::server::start`].

use std::sync::Arc;
use std::time::Duration;

// tokio's clock, which a simulator drives (the OS clock would make a
// simulated run depend on how fast it ran).
use tokio::time::Instant;

use gavel_proto::v1 as pb;
use gavel_proto::v1::approval_service_server::ApprovalServiceServer;
use gavel_proto::v1::audit_service_server::AuditServiceServer;
use gavel_proto::v1::capability_service_server::CapabilityServiceServer;
use gavel_proto::v1::cluster_service_client::ClusterServiceClient;
use gavel_proto::v1::cluster_service_server::ClusterServiceServer;
use gavel_proto::v1::execution_service_server::ExecutionServiceServer;
use gavel_proto::v1::worker_service_server::WorkerServiceServer;
use gavel_raft::{RaftStatus, Role};
use tokio::sync::watch;
use tonic::server::NamedService;
use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;

use crate::node::Node;
use crate::services::{approval::Approvals, audit::Audit, capability::Capabilities, cluster::Cluster};
use crate::services::{execution::Executions, worker::Workers};

/// How often a node re-judges its health when nothing about its role or
/// leader changes. A node turns `NOT_SERVING` at most about this plus
/// [`HEALTH_PROBE_TIMEOUT`] after it lost touch with its quorum.
pub const HEALTH_CHECK_INTERVAL: Duration = Duration::from_millis(500);

/// How long one probe (the leader's read-index round, a follower's status
/// call to its leader) may take before the node counts as unhealthy.
pub const HEALTH_PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// How often a follower asks its leader for the leader's applied index.
pub const LAG_CHECK_INTERVAL: Duration = Duration::from_secs(2);

/// How many log entries a follower's applied index may trail the leader's
/// before it reports `NOT_SERVING` (it is catching up, after a restart or a
/// partition, and its local reads and watches would be stale).
pub const LAG_ENTRIES_MAX: u64 = 1000;

/// The services whose status follows the node's health: the overall `""`
/// service and every public `gavel.v1` service.
const SERVICES: [&str; 7] = [
    "",
    <ApprovalServiceServer<Approvals> as NamedService>::NAME,
    <ExecutionServiceServer<Executions> as NamedService>::NAME,
    <WorkerServiceServer<Workers> as NamedService>::NAME,
    <CapabilityServiceServer<Capabilities> as NamedService>::NAME,
    <AuditServiceServer<Audit> as NamedService>::NAME,
    <ClusterServiceServer<Cluster> as NamedService>::NAME,
];

/// Why a node is not serving, or `None` when it is.
type Verdict = Option<String>;

/// Keeps `reporter` in step with the node's health until `shutdown` turns
/// true. Every service starts `NOT_SERVING` and turns `SERVING` on the first
/// healthy verdict.
pub async fn run(node: Arc<Node>, reporter: HealthReporter, mut shutdown: watch::Receiver<bool>) {
    let mut status = node.raft.subscribe_status();
    let mut reported: Option<Verdict> = None;
    let mut lag = LagCheck::default();
    loop {
        let verdict = judge(&node, &mut lag).await;
        if reported.as_ref() != Some(&verdict) {
            let serving = match &verdict {
                None => {
                    tracing::info!(node_id = node.id, "health: SERVING");
                    ServingStatus::Serving
                }
                Some(reason) => {
                    tracing::warn!(node_id = node.id, %reason, "health: NOT_SERVING");
                    ServingStatus::NotServing
                }
            };
            for service in SERVICES {
                reporter.set_service_status(service, serving).await;
            }
            reported = Some(verdict);
        }
        let seen = shape(&status.borrow_and_update());
        // Once Raft has stopped, its status channel is closed and
        // `wait_for` returns at once: sleep the interval instead, or this
        // loop would spin (found by gavel-sim: a power cut stopped a node's
        // log, and its health task never yielded to the clock again).
        let changed = async {
            if status.wait_for(|now| shape(now) != seen).await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            _ = shutdown.wait_for(|stop| *stop) => return,
            _ = tokio::time::timeout(HEALTH_CHECK_INTERVAL, changed) => {}
        }
    }
}

/// What a health change is likely to follow: the role and the known leader.
fn shape(status: &RaftStatus) -> (Role, Option<u64>) {
    (status.role, status.leader_id)
}

/// A follower's last comparison with its leader.
#[derive(Default)]
struct LagCheck {
    /// The leader asked, when, and the verdict.
    last: Option<(u64, Instant, Verdict)>,
}

/// Judges the node's health now.
async fn judge(node: &Node, lag: &mut LagCheck) -> Verdict {
    let status = node.raft.status();
    match (status.role, status.leader_id, status.leader_addr) {
        (Role::Shutdown, _, _) => Some("raft has stopped".into()),
        (Role::Leader, _, _) => match tokio::time::timeout(HEALTH_PROBE_TIMEOUT, node.raft.ensure_linearizable()).await
        {
            Ok(Ok(())) => None,
            Ok(Err(error)) => Some(format!("the leader cannot reach a quorum: {error}")),
            Err(_) => Some(format!("the leader heard from no quorum within {HEALTH_PROBE_TIMEOUT:?}")),
        },
        (_, Some(leader), Some(addr)) if leader != node.id => {
            if let Some((asked, at, verdict)) = &lag.last {
                if *asked == leader && at.elapsed() < LAG_CHECK_INTERVAL {
                    return verdict.clone();
                }
            }
            let applied = status.last_applied_index.unwrap_or(0);
            let verdict = match leader_applied(node, &addr).await {
                Ok(leader_applied) if applied.saturating_add(LAG_ENTRIES_MAX) >= leader_applied => None,
                Ok(leader_applied) => Some(format!(
                    "applied index {applied} lags leader {leader}'s {leader_applied} by more than {LAG_ENTRIES_MAX}"
                )),
                Err(reason) => Some(format!("leader {leader} at {addr} does not answer: {reason}")),
            };
            lag.last = Some((leader, Instant::now(), verdict.clone()));
            verdict
        }
        _ => Some("no leader is known".into()),
    }
}

/// The leader's applied index, asked over its `ClusterService/Status`.
async fn leader_applied(node: &Node, addr: &str) -> Result<u64, String> {
    let channel = node.channel(addr).map_err(|status| status.message().to_string())?;
    let mut client = ClusterServiceClient::new(channel);
    match tokio::time::timeout(HEALTH_PROBE_TIMEOUT, client.status(pb::StatusRequest { without_state_hash: true }))
        .await
    {
        Ok(Ok(reply)) => Ok(reply.into_inner().last_applied_index),
        Ok(Err(status)) => Err(status.message().to_string()),
        Err(_) => Err(format!("no answer within {HEALTH_PROBE_TIMEOUT:?}")),
    }
}
