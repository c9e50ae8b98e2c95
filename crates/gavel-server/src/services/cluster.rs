//! `ClusterService`: status and online membership changes.

use std::sync::Arc;

use gavel_core::Action;
use gavel_proto::v1 as pb;
use gavel_proto::v1::cluster_service_server::ClusterService;
use gavel_raft::{Role, WriteError};
use tonic::{Request, Response, Status};

use crate::node::{unavailable, write_error_status, Node};
use crate::routing::MEMBERSHIP_CHANGE_WAIT;

/// Serves cluster status and membership.
pub struct Cluster {
    /// The node.
    pub node: Arc<Node>,
}

/// This node's view of the cluster.
pub fn status_of(node: &Node) -> pb::StatusResponse {
    status_with(node, true)
}

/// This node's view, with or without the state hash (which serializes the
/// whole state, under the state lock, when the state changed since the last one).
fn status_with(node: &Node, with_state_hash: bool) -> pb::StatusResponse {
    let status = node.raft.status();
    let state_hash = if with_state_hash { node.app.state_hash() } else { String::new() };
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

/// A refused membership change as a status.
fn membership_error(error: WriteError) -> Status {
    match error {
        WriteError::Invalid(reason) => Status::failed_precondition(reason),
        WriteError::Unavailable(reason) => unavailable(&reason, None),
        forward @ WriteError::ForwardToLeader { .. } => write_error_status(forward),
    }
}

/// Membership changes need `admin`, decided by the leader after a read
/// barrier (they are not commands of the state machine).
async fn authorize_membership(node: &Node, extensions: &tonic::Extensions) -> Result<(), Status> {
    let caller = super::caller(extensions)?;
    node.read(caller.as_ref(), Action::ChangeMembership, |_| ()).await
}

#[tonic::async_trait]
impl ClusterService for Cluster {
    async fn status(&self, request: Request<pb::StatusRequest>) -> Result<Response<pb::StatusResponse>, Status> {
        // This node's own view, served by every node: authorized against
        // its own replica's grants, without a barrier.
        let caller = super::caller(request.extensions())?;
        self.node
            .app
            .state()
            .authorize(caller.as_ref(), Action::ReadClusterStatus)
            .map_err(crate::node::domain_status)?;
        Ok(Response::new(status_with(&self.node, !request.get_ref().without_state_hash)))
    }

    async fn add_learner(
        &self,
        request: Request<pb::AddLearnerRequest>,
    ) -> Result<Response<pb::StatusResponse>, Status> {
        let (_, extensions, message) = request.into_parts();
        authorize_membership(&self.node, &extensions).await?;
        if message.node_id == 0 || message.addr.is_empty() {
            return Err(Status::invalid_argument("nodeId and addr are required"));
        }
        self.node.raft.add_learner(message.node_id, message.addr).await.map_err(membership_error)?;
        Ok(Response::new(status_of(&self.node)))
    }

    async fn promote(&self, request: Request<pb::PromoteRequest>) -> Result<Response<pb::StatusResponse>, Status> {
        let (_, extensions, message) = request.into_parts();
        authorize_membership(&self.node, &extensions).await?;
        let node_id = message.node_id;
        self.node.raft.promote(node_id, MEMBERSHIP_CHANGE_WAIT).await.map_err(membership_error)?;
        Ok(Response::new(status_of(&self.node)))
    }

    async fn remove_node(
        &self,
        request: Request<pb::RemoveNodeRequest>,
    ) -> Result<Response<pb::StatusResponse>, Status> {
        let (_, extensions, message) = request.into_parts();
        authorize_membership(&self.node, &extensions).await?;
        let node_id = message.node_id;
        self.node.raft.remove_node(node_id).await.map_err(membership_error)?;
        Ok(Response::new(status_of(&self.node)))
    }
}
