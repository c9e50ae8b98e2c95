//! `ClusterService`: status and online membership changes.

use std::sync::Arc;
use std::time::Duration;

use gavel_proto::v1 as pb;
use gavel_proto::v1::cluster_service_client::ClusterServiceClient;
use gavel_proto::v1::cluster_service_server::ClusterService;
use gavel_raft::{Role, WriteError};
use tonic::{Request, Response, Status};

use super::is_forwarded;
use crate::node::{unavailable, Node, Routed};
use crate::serve;

/// How long a promotion waits for the learner to catch up.
const PROMOTE_CATCH_UP: Duration = Duration::from_secs(60);

/// Serves cluster status and membership.
pub struct Cluster {
    /// The node.
    pub node: Arc<Node>,
}

/// This node's view of the cluster.
pub fn status_of(node: &Node) -> pb::StatusResponse {
    let status = node.raft.status();
    let state_hash = node.app.state_hash();
    let role = match status.role {
        Role::Leader => "Leader",
        Role::Follower => "Follower",
        Role::Candidate => "Candidate",
        Role::Learner => "Learner",
        Role::Shutdown => "Shutdown",
    };
    pb::StatusResponse {
        node_id: status.node_id,
        leader_id: status.leader_id,
        leader_addr: status.leader_addr.clone(),
        term: status.term,
        last_applied_index: status.last_applied_index.unwrap_or(0),
        last_log_index: status.last_log_index.unwrap_or(0),
        snapshot_index: status.snapshot_index,
        state_hash,
        role: role.to_string(),
        members: status
            .members
            .iter()
            .map(|member| pb::Member { node_id: member.node_id, addr: member.addr.clone(), voter: member.voter })
            .collect(),
    }
}

fn membership_error(error: WriteError) -> Routed {
    match error {
        WriteError::ForwardToLeader { leader_addr: Some(addr), .. } => Routed::Forward(addr),
        WriteError::ForwardToLeader { leader_addr: None, .. } => {
            Routed::Fail(unavailable("no leader is elected yet; retry shortly", None))
        }
        WriteError::Unavailable(reason) => Routed::Fail(unavailable(&reason, None)),
        WriteError::Invalid(reason) => Routed::Fail(Status::failed_precondition(reason)),
    }
}

#[tonic::async_trait]
impl ClusterService for Cluster {
    async fn status(&self, _request: Request<pb::StatusRequest>) -> Result<Response<pb::StatusResponse>, Status> {
        Ok(Response::new(status_of(&self.node)))
    }

    async fn add_learner(
        &self,
        request: Request<pb::AddLearnerRequest>,
    ) -> Result<Response<pb::StatusResponse>, Status> {
        let forwarded = is_forwarded(&request);
        let message = request.into_inner();
        serve!(
            self.node,
            forwarded,
            message,
            PROMOTE_CATCH_UP,
            ClusterServiceClient,
            add_learner,
            async {
                if message.node_id == 0 || message.addr.is_empty() {
                    return Err(Routed::Fail(Status::invalid_argument("nodeId and addr are required")));
                }
                self.node.raft.add_learner(message.node_id, message.addr.clone()).await.map_err(membership_error)?;
                Ok(status_of(&self.node))
            }
            .await
        )
    }

    async fn promote(&self, request: Request<pb::PromoteRequest>) -> Result<Response<pb::StatusResponse>, Status> {
        let forwarded = is_forwarded(&request);
        let message = request.into_inner();
        serve!(
            self.node,
            forwarded,
            message,
            PROMOTE_CATCH_UP,
            ClusterServiceClient,
            promote,
            async {
                self.node.raft.promote(message.node_id, PROMOTE_CATCH_UP).await.map_err(membership_error)?;
                Ok(status_of(&self.node))
            }
            .await
        )
    }

    async fn remove_node(
        &self,
        request: Request<pb::RemoveNodeRequest>,
    ) -> Result<Response<pb::StatusResponse>, Status> {
        let forwarded = is_forwarded(&request);
        let message = request.into_inner();
        serve!(
            self.node,
            forwarded,
            message,
            Duration::ZERO,
            ClusterServiceClient,
            remove_node,
            async {
                self.node.raft.remove_node(message.node_id).await.map_err(membership_error)?;
                Ok(status_of(&self.node))
            }
            .await
        )
    }
}
