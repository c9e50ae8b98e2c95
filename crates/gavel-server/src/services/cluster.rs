//! `ClusterService`: status, online membership changes and backups.

use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use gavel_core::{Action, ErrorCode};
use gavel_proto::v1 as pb;
use gavel_proto::v1::cluster_service_server::ClusterService;
use gavel_raft::limits::SNAPSHOT_CHUNK_BYTES;
use gavel_raft::{Backup, BackupError, Role, WriteError};
use tonic::{Request, Response, Status};

use crate::node::{refusal_status, unavailable, write_error_status, Node};
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
    let state_hash = if with_state_hash { node.reads.state_hash() } else { String::new() };
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

/// A refused membership change for a reason the leader sees before asking
/// Raft: removing the last voter would leave a cluster that can never
/// elect a leader again.
fn refuse_removing_last_voter(node: &Node, node_id: u64) -> Result<(), Status> {
    let members = node.raft.status().members;
    let voters: Vec<u64> = members.iter().filter(|member| member.voter).map(|member| member.node_id).collect();
    if voters == [node_id] {
        return Err(refusal_status(
            ErrorCode::LastVoter,
            &format!("node {node_id} is the last voter; add and promote another node before removing it"),
            None,
            None,
        ));
    }
    Ok(())
}

/// The stream of a backup: the header, then the data chunks.
type BackupStream = Pin<Box<dyn Stream<Item = Result<pb::BackupChunk, Status>> + Send>>;

/// How far a backup stream is.
enum BackupProgress {
    /// Nothing sent yet: the snapshot is taken when the first message is asked for.
    Start(Arc<Node>),
    /// The header is sent; `offset` bytes of the body too.
    Body { backup: Backup, offset: usize },
    /// Everything (or an error) is sent.
    Done,
}

/// A refused or failed backup as a status.
fn backup_status(error: BackupError) -> Status {
    let (code, retry_after_ms) = match &error {
        BackupError::Busy => (ErrorCode::BackupRunning, Some(1000)),
        BackupError::TooLarge { .. } => (ErrorCode::SnapshotTooLarge, None),
        BackupError::Empty => (ErrorCode::FailedPrecondition, None),
        _ => (ErrorCode::Unavailable, Some(crate::node::RETRY_AFTER_MS)),
    };
    refusal_status(code, &format!("backup: {error}"), retry_after_ms, None)
}

/// The header of `backup`, taken by `node`.
fn backup_header(node: &Node, backup: &Backup) -> Result<pb::BackupHeader, Status> {
    let body_sha256 = gavel_core::canonical_json::sha256_hex(&backup.bytes);
    // The state hash covers the hot state (and the cold records through
    // their running digest), not the snapshot's bytes; the bytes start with
    // the hot state, so only that part is decoded.
    let state_hash = gavel_core::State::snapshot_state_hash(&backup.bytes)
        .map_err(|error| Status::internal(format!("backup: the snapshot taken does not decode: {error}")))?;
    Ok(pb::BackupHeader {
        applied_index: backup.position.index,
        applied_term: backup.position.term,
        applied_leader_id: backup.position.leader_id,
        state_hash,
        body_bytes: backup.bytes.len() as u64,
        body_sha256,
        taken_by_node_id: node.id,
        taken_at_ms: node.wall_clock_ms(),
        members: backup
            .members
            .iter()
            .map(|(node_id, (addr, voter))| pb::Member { node_id: *node_id, addr: addr.clone(), voter: *voter })
            .collect(),
    })
}

/// The next message of a backup stream. The snapshot is taken lazily, so
/// the call's headers go out at once (a forwarding follower's deadline
/// covers only them); the body is sent from the one copy of the bytes in
/// chunks of at most [`SNAPSHOT_CHUNK_BYTES`], each made when the
/// transport asks for it.
async fn next_backup_message(progress: BackupProgress) -> Option<(Result<pb::BackupChunk, Status>, BackupProgress)> {
    match progress {
        BackupProgress::Start(node) => match node.raft.backup().await {
            Ok(backup) => match backup_header(&node, &backup) {
                Ok(header) => {
                    let chunk = pb::BackupChunk { part: Some(pb::backup_chunk::Part::Header(header)) };
                    Some((Ok(chunk), BackupProgress::Body { backup, offset: 0 }))
                }
                Err(status) => Some((Err(status), BackupProgress::Done)),
            },
            Err(error) => Some((Err(backup_status(error)), BackupProgress::Done)),
        },
        BackupProgress::Body { backup, offset } if offset < backup.bytes.len() => {
            let end = backup.bytes.len().min(offset + SNAPSHOT_CHUNK_BYTES);
            let data = backup.bytes[offset..end].to_vec();
            let chunk = pb::BackupChunk { part: Some(pb::backup_chunk::Part::Data(data)) };
            Some((Ok(chunk), BackupProgress::Body { backup, offset: end }))
        }
        BackupProgress::Body { .. } | BackupProgress::Done => None,
    }
}

#[tonic::async_trait]
impl ClusterService for Cluster {
    type BackupStream = BackupStream;

    async fn status(&self, request: Request<pb::StatusRequest>) -> Result<Response<pb::StatusResponse>, Status> {
        // This node's own view, served by every node: authorized against
        // its own replica's grants, without a barrier.
        let caller = super::caller(request.extensions())?;
        self.node
            .reads
            .read(|state| state.authorize(caller.as_ref(), Action::ReadClusterStatus))
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
        let node_id = message.node_id;
        self.node.raft.add_learner(node_id, message.addr).await.map_err(membership_error)?;
        if message.wait_caught_up {
            self.node.raft.wait_caught_up(node_id, MEMBERSHIP_CHANGE_WAIT).await.map_err(membership_error)?;
        }
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
        refuse_removing_last_voter(&self.node, node_id)?;
        self.node.raft.remove_node(node_id).await.map_err(membership_error)?;
        Ok(Response::new(status_of(&self.node)))
    }

    async fn backup(&self, request: Request<pb::BackupRequest>) -> Result<Response<BackupStream>, Status> {
        let (_, extensions, _) = request.into_parts();
        // Admin only, decided on the leader after a read barrier: the
        // snapshot taken next holds every write acknowledged before it.
        let caller = super::caller(&extensions)?;
        self.node.read(caller.as_ref(), Action::Backup, |_| ()).await?;
        let stream = futures::stream::unfold(BackupProgress::Start(self.node.clone()), next_backup_message);
        Ok(Response::new(Box::pin(stream)))
    }
}
