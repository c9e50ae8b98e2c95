//! [`RaftNode`]: one running Raft member, driven through plain types.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use openraft::async_runtime::WatchReceiver;
use openraft::errors::{
    ChangeMembershipError, ClientWriteError, InitializeError, LinearizableReadError, RaftError as OpenraftError,
};
use openraft::type_config::alias::WatchReceiverOf;
use openraft::{BasicNode, ChangeMembers, ReadPolicy, ServerState, SnapshotPolicy};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::application::Application;
use crate::batch::{self, client_write_error, forward_to_leader, Batcher};
use crate::io::RaftIo;
use crate::limits::{APPEND_ENTRIES_BYTES_MAX, PROMOTE_LAG_ENTRIES_MAX, STORAGE_CLOSE_TIMEOUT};
use crate::network::NetworkFactory;
use crate::pb::raft_service_server::RaftServiceServer;
use crate::service::RaftGrpcService;
use crate::storage::Raft;
use crate::storage::{self, ThreadExited};
use crate::typ::{Node, NodeId, RaftMetrics, TypeConfig};
use crate::{LeaderRoute, Member, NodeConfig, RaftError, RaftStatus, RaftTimings, Role, WriteError};

/// How far a member was when [`RaftNode::wait_caught_up`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CatchUp {
    /// A learner within [`PROMOTE_LAG_ENTRIES_MAX`] entries of the leader.
    Learner,
    /// Already a voter.
    Voter,
}

/// One running Raft member. Cheap to clone: clones drive the same node.
#[derive(Clone)]
pub struct RaftNode {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for RaftNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RaftNode").field("node_id", &self.inner.node_id).finish_non_exhaustive()
    }
}

struct Inner {
    node_id: NodeId,
    raft: Raft,
    /// Groups concurrent writes into one log entry.
    batcher: Batcher,
    timings: RaftTimings,
    status: watch::Receiver<RaftStatus>,
    /// Where incoming snapshot streams are spooled.
    incoming_dir: std::path::PathBuf,
    /// Who writes them ([`RaftIo`]'s threading).
    threading: storage::wal::Threading,
    /// Where the service announces snapshot installs to the log store.
    install_fence: Arc<storage::InstallFence>,
    /// Taken by the first `shutdown`; resolves when the storage is closed.
    storage_closed: tokio::sync::Mutex<Option<ThreadExited>>,
    /// One backup at a time ([`crate::backup`]).
    backups: Arc<tokio::sync::Semaphore>,
}

impl RaftNode {
    /// Opens the node's storage in `config.data_dir` (restoring the
    /// application from the last snapshot) and starts Raft. The node serves
    /// peers once [`RaftNode::service`] is mounted on a gRPC server listening
    /// on `config.addr`.
    pub async fn start(config: NodeConfig, app: Arc<dyn Application>) -> Result<RaftNode, RaftError> {
        RaftNode::start_with_io(config, app, RaftIo::default()).await
    }

    /// [`RaftNode::start`] on the IO `io` gives ([`RaftIo`]): production
    /// passes the default, the simulator its own network and disk.
    pub async fn start_with_io(
        config: NodeConfig,
        app: Arc<dyn Application>,
        io: RaftIo,
    ) -> Result<RaftNode, RaftError> {
        config.timings.validate()?;
        let raft_config = Arc::new(openraft_config(
            &config.timings,
            #[cfg(feature = "mutants")]
            config.planted,
        )?);
        let data_dir = config.data_dir.clone();
        #[cfg(feature = "mutants")]
        let planted = config.planted;
        let incoming_dir = crate::service::incoming_dir(&config.data_dir);
        let spool_dir = incoming_dir.clone();
        // Opening the storage replays the WAL's segments and opens sled: blocking work.
        let storage_io = io.clone();
        let threading = io.threading();
        let mut storage = io
            .threading()
            .run(move || {
                crate::service::clear_incoming(&spool_dir).map_err(|e| {
                    RaftError::Storage(format!("cannot prepare the snapshot spool {}: {e}", spool_dir.display()))
                })?;
                storage::open_with(
                    &data_dir,
                    app,
                    #[cfg(feature = "mutants")]
                    planted,
                    &storage_io,
                )
            })
            .await
            .map_err(|e| RaftError::Storage(format!("storage open task failed: {e}")))??;
        let peer_tls = config.peer_tls.as_ref().map(crate::PeerTls::client_config);
        let network = NetworkFactory::new(config.node_id, config.timings.clone(), peer_tls).with_io(io);
        let snapshots_due = storage.state_machine.snapshot_after_commands(config.timings.snapshot_commands_since_last);
        let install_fence = storage.log_store.install_fence();
        let raft = Raft::new(config.node_id, raft_config, network, storage.log_store, storage.state_machine)
            .await
            .map_err(|e| RaftError::Storage(e.to_string()))?;
        tokio::spawn(storage::request_snapshots(snapshots_due, raft.clone()));
        let metrics = raft.metrics();
        let (status_tx, status) = watch::channel(status_from_metrics(&metrics.borrow_watched()));
        tokio::spawn(publish_status(metrics, status_tx));
        tracing::info!(node_id = config.node_id, addr = %config.addr, "raft node started");
        Ok(RaftNode {
            inner: Arc::new(Inner {
                node_id: config.node_id,
                batcher: Batcher::new(raft.clone()),
                raft,
                timings: config.timings,
                status,
                incoming_dir,
                threading,
                install_fence,
                storage_closed: tokio::sync::Mutex::new(Some(storage.closed)),
                backups: crate::backup::permits(),
            }),
        })
    }

    /// This node's id.
    pub fn node_id(&self) -> u64 {
        self.inner.node_id
    }

    /// The internal Raft gRPC service; mount it on the node's tonic server
    /// next to the public services.
    pub fn service(&self) -> RaftServiceServer<RaftGrpcService> {
        let service =
            RaftGrpcService::new(self.inner.raft.clone(), self.inner.incoming_dir.clone(), self.inner.threading);
        RaftServiceServer::new(service.fenced(self.inner.install_fence.clone()))
            .max_decoding_message_size(APPEND_ENTRIES_BYTES_MAX)
            .max_encoding_message_size(APPEND_ENTRIES_BYTES_MAX)
    }

    /// Forms a new cluster of `members` (node id → gRPC address), which must
    /// include this node. Succeeds without effect if this node is already
    /// initialized (has a log or a vote), so every member may call it.
    pub async fn initialize(&self, members: BTreeMap<u64, String>) -> Result<(), RaftError> {
        let nodes: BTreeMap<NodeId, Node> =
            members.into_iter().map(|(node_id, addr)| (node_id, BasicNode { addr })).collect();
        match self.inner.raft.initialize(nodes).await {
            Ok(()) => Ok(()),
            Err(OpenraftError::APIError(InitializeError::NotAllowed(_))) => Ok(()),
            Err(OpenraftError::APIError(e @ InitializeError::NotInMembers(_))) => {
                Err(RaftError::Initialize(e.to_string()))
            }
            Err(OpenraftError::Fatal(_)) => Err(RaftError::Shutdown),
        }
    }

    /// Appends `command` to the replicated log through this node (which must
    /// be the leader), possibly in one entry with other concurrent writes,
    /// waits until it is committed by a majority and applied here, and
    /// returns the application's reply.
    ///
    /// There is no deadline: bound it with `tokio::time::timeout` if needed.
    /// A timed-out write is ambiguous (it may still commit), which is why
    /// commands should carry a request id the application deduplicates on.
    pub async fn write(&self, command: Vec<u8>) -> Result<Vec<u8>, WriteError> {
        // Concurrent writes share one log entry (see `batch`); each caller
        // still gets its own command's reply.
        self.inner.batcher.write(command).await
    }

    /// Read-index: confirms with a quorum that this node is still the leader
    /// and waits until everything committed before the call is applied here.
    /// A read of the application after it returns is linearizable.
    pub async fn ensure_linearizable(&self) -> Result<(), WriteError> {
        // Read-index (a quorum round), as under openraft 0.9; openraft 0.10
        // also offers lease reads, which trust the clocks.
        match self.inner.raft.ensure_linearizable(ReadPolicy::ReadIndex).await {
            Ok(_) => Ok(()),
            Err(OpenraftError::APIError(LinearizableReadError::ForwardToLeader(forward))) => {
                Err(forward_to_leader(forward))
            }
            Err(OpenraftError::APIError(LinearizableReadError::QuorumNotEnough(e))) => {
                Err(WriteError::Unavailable(e.to_string()))
            }
            Err(OpenraftError::Fatal(fatal)) => Err(WriteError::Unavailable(format!("raft is not running: {fatal}"))),
        }
    }

    /// Adds `node_id` at `addr` as a learner (non-voting replica) and returns
    /// once that membership change is committed. The learner catches up in
    /// the background; see [`RaftNode::promote`].
    pub async fn add_learner(&self, node_id: u64, addr: String) -> Result<(), WriteError> {
        self.refuse_if_stepping_down()?;
        let node = BasicNode { addr };
        self.change_membership_patiently(|| self.inner.raft.add_learner(node_id, node.clone(), false)).await
    }

    /// Makes learner `node_id` a voter once its log is within a few entries
    /// of the leader's, waiting at most `catch_up_timeout` for that. Succeeds
    /// at once if the node already votes.
    pub async fn promote(&self, node_id: u64, catch_up_timeout: Duration) -> Result<(), WriteError> {
        if self.wait_caught_up(node_id, catch_up_timeout).await? == CatchUp::Voter {
            return Ok(());
        }
        self.refuse_if_stepping_down()?;
        let voters = BTreeSet::from([node_id]);
        self.change_membership_patiently(|| {
            self.inner.raft.change_membership(ChangeMembers::AddVoterIds(voters.clone()), false)
        })
        .await
    }

    /// Waits (on the leader) until member `node_id` has replicated the log
    /// to within [`PROMOTE_LAG_ENTRIES_MAX`] entries of the leader's last
    /// one, at most `catch_up_timeout`; at once if it already votes. Fails
    /// if `node_id` is not a member.
    pub async fn wait_caught_up(&self, node_id: u64, catch_up_timeout: Duration) -> Result<CatchUp, WriteError> {
        let deadline = Instant::now() + catch_up_timeout;
        let mut metrics = self.inner.raft.metrics();
        loop {
            let caught_up = {
                let m = metrics.borrow_and_update();
                if m.state != ServerState::Leader {
                    return Err(forward_from_metrics(&m));
                }
                let membership = m.membership_config.membership();
                if membership.voter_ids().any(|voter| voter == node_id) {
                    return Ok(CatchUp::Voter);
                }
                if membership.get_node(&node_id).is_none() {
                    return Err(WriteError::Invalid(format!(
                        "node {node_id} is not a learner of this cluster; add it first"
                    )));
                }
                let leader_last = m.last_log_index.unwrap_or(0);
                let matched = m
                    .replication
                    .as_ref()
                    .and_then(|replication| replication.get(&node_id).copied().flatten())
                    .map(|log_id| log_id.index);
                match matched {
                    Some(matched) if matched + PROMOTE_LAG_ENTRIES_MAX >= leader_last => Ok(()),
                    _ => Err((matched, leader_last)),
                }
            };
            match caught_up {
                Ok(()) => return Ok(CatchUp::Learner),
                Err((matched, leader_last)) => {
                    if tokio::time::timeout_at(deadline, metrics.changed()).await.is_err() {
                        return Err(WriteError::Unavailable(format!(
                            "learner {node_id} did not catch up within {catch_up_timeout:?} \
                             (replicated up to {matched:?}, leader at {leader_last})"
                        )));
                    }
                }
            }
        }
    }

    /// Removes `node_id` from the cluster, whether voter or learner. Succeeds
    /// at once if it is not a member.
    pub async fn remove_node(&self, node_id: u64) -> Result<(), WriteError> {
        let (is_voter, is_member) = {
            let metrics = self.inner.raft.metrics();
            let m = metrics.borrow_watched();
            let membership = m.membership_config.membership();
            let is_voter = membership.voter_ids().any(|voter| voter == node_id);
            (is_voter, membership.get_node(&node_id).is_some())
        };
        if !is_member {
            return Ok(());
        }
        self.refuse_if_stepping_down()?;
        let ids = BTreeSet::from([node_id]);
        let change = if is_voter {
            // `retain: false` drops the removed voter from the node list too.
            ChangeMembers::RemoveVoters(ids)
        } else {
            ChangeMembers::RemoveNodes(ids)
        };
        self.change_membership_patiently(|| self.inner.raft.change_membership(change.clone(), false)).await
    }

    /// Proposes the membership change `propose` makes, and again while
    /// openraft refuses it for a reason that clears by itself
    /// ([`batch::propose_patiently`]): a leader whose lease no quorum has
    /// confirmed yet, or a membership change still in progress, which
    /// includes a new leader's last membership until an entry of its own
    /// term commits.
    async fn change_membership_patiently<F, Fut>(&self, propose: F) -> Result<(), WriteError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = batch::Proposed>,
    {
        let patience = Duration::from_millis(self.inner.timings.election_timeout_max_ms);
        let passing = |refusal: &ClientWriteError<TypeConfig>| {
            batch::lease_pending(refusal)
                || matches!(refusal, ClientWriteError::ChangeMembershipError(ChangeMembershipError::InProgress(_)))
        };
        batch::propose_patiently(patience, propose, passing).await.map(|_| ()).map_err(client_write_error)
    }

    /// Asks this node, if it leads, to hand leadership to voter `node_id`:
    /// the leader stops accepting writes and tells `node_id` to campaign at
    /// once (its vote request then passes the voters' leader lease), instead
    /// of the cluster waiting out an election timeout. Returns once the
    /// request is handed to Raft, not when `node_id` leads: watch
    /// [`RaftNode::subscribe_status`] for that. A node that does not lead
    /// ignores the request, and so does the target if its log is behind.
    pub async fn transfer_leader(&self, node_id: u64) -> Result<(), WriteError> {
        let is_voter = {
            let metrics = self.inner.raft.metrics();
            let m = metrics.borrow_watched();
            if m.state != ServerState::Leader {
                return Err(forward_from_metrics(&m));
            }
            let is_voter = m.membership_config.membership().voter_ids().any(|voter| voter == node_id);
            is_voter
        };
        if !is_voter {
            return Err(WriteError::Invalid(format!("node {node_id} is not a voter; leadership goes to voters only")));
        }
        self.inner
            .raft
            .trigger()
            .transfer_leader(node_id)
            .await
            .map_err(|fatal| WriteError::Unavailable(format!("raft is not running: {fatal}")))
    }

    /// Before this node stops: if it leads, hands leadership to the voter
    /// whose log is furthest along (the target campaigns at once, past the
    /// voters' leader lease) and waits up to the longest election timeout
    /// (by then the others would have elected anyway) for this node to stop
    /// leading, so a rolling restart costs no election timeout. Returns the
    /// new leader when one took over in time; `None` when this node did not
    /// lead, had no other voter, or the hand-over did not finish (the
    /// cluster then elects as after a crash).
    pub async fn hand_over_leadership(&self) -> Option<u64> {
        let wait = Duration::from_millis(self.inner.timings.election_timeout_max_ms);
        let target = {
            let metrics = self.inner.raft.metrics();
            let m = metrics.borrow_watched();
            if m.running_state.is_err() || m.state != ServerState::Leader {
                return None;
            }
            let membership = m.membership_config.membership();
            let matched =
                |voter: u64| m.replication.as_ref().and_then(|replication| replication.get(&voter).copied().flatten());
            membership
                .voter_ids()
                .filter(|voter| *voter != self.inner.node_id)
                .max_by_key(|voter| (matched(*voter), std::cmp::Reverse(*voter)))?
        };
        if let Err(error) = self.transfer_leader(target).await {
            tracing::warn!(target, %error, "could not hand leadership over before stopping");
            return None;
        }
        let mut metrics = self.inner.raft.metrics();
        let handed = tokio::time::timeout(wait, async {
            loop {
                {
                    // Stepping down comes first; the new leader is known
                    // once it has won its election.
                    let m = metrics.borrow_watched();
                    let other = m.current_leader.filter(|leader| *leader != self.inner.node_id);
                    if m.state != ServerState::Leader && other.is_some() {
                        return other;
                    }
                }
                if metrics.changed().await.is_err() {
                    return None;
                }
            }
        })
        .await;
        handed.ok().flatten()
    }

    /// Refuses a membership change on a leader whose own membership no
    /// longer holds it: a leader removed from the cluster keeps leading
    /// until its next tick after the removal is applied (openraft lets it
    /// replicate that the removal committed; 0.10 then hands leadership over
    /// itself, `removed_leader_step_down`), and a membership change
    /// it accepted in between would be appended by a leader outside the
    /// configuration (openraft asserts against it: the simulation found it,
    /// an add-back sent to the removed leader). The caller retries; by then
    /// a leader among the remaining voters answers.
    fn refuse_if_stepping_down(&self) -> Result<(), WriteError> {
        let metrics = self.inner.raft.metrics();
        let m = metrics.borrow_watched();
        let removed = m.state == ServerState::Leader && m.membership_config.membership().get_node(&m.id).is_none();
        if removed {
            return Err(WriteError::Unavailable(format!(
                "node {} was removed from the cluster and is stepping down as leader; retry on another node",
                m.id
            )));
        }
        Ok(())
    }

    /// This node's current view of the cluster.
    pub fn status(&self) -> RaftStatus {
        status_from_metrics(&self.inner.raft.metrics().borrow_watched())
    }

    /// The vote this node has saved and acts on: openraft reports a vote
    /// only once the log store has made it durable (a node grants or
    /// follows nothing on a vote it has not saved), so a crash must never
    /// bring back an older one. The simulation checks that.
    pub fn saved_vote(&self) -> crate::VoteMark {
        crate::typ::vote_mark(&self.inner.raft.metrics().borrow_watched().vote)
    }

    /// The leader's view of replication, for monitoring; `None` unless this
    /// node is the leader. Read from the metrics on demand, not part of
    /// [`RaftStatus`], whose watchers would otherwise wake on every heartbeat.
    pub fn leader_progress(&self) -> Option<crate::LeaderProgress> {
        let metrics = self.inner.raft.metrics();
        let m = metrics.borrow_watched();
        if m.running_state.is_err() || m.state != ServerState::Leader {
            return None;
        }
        let matched_index = m
            .replication
            .iter()
            .flatten()
            .map(|(node_id, matched)| (*node_id, matched.map(|log_id| log_id.index)))
            .collect();
        // Deprecated in openraft 0.10 for an instant (`last_quorum_acked`),
        // but still filled in, and a duration is what the monitoring shows.
        #[allow(deprecated)]
        let millis_since_quorum_ack = m.millis_since_quorum_ack;
        Some(crate::LeaderProgress { millis_since_quorum_ack, matched_index })
    }

    /// Whether this node leads, and otherwise where the leader is: read from
    /// the metrics without building a whole [`RaftStatus`] (no membership
    /// copy), because the server asks on every request.
    pub fn leader_route(&self) -> LeaderRoute {
        let metrics = self.inner.raft.metrics();
        let m = metrics.borrow_watched();
        if m.running_state.is_ok() && m.state == ServerState::Leader {
            return LeaderRoute::Here;
        }
        let leader = m.current_leader.and_then(|leader| m.membership_config.membership().get_node(&leader));
        match (m.current_leader, leader) {
            (Some(leader_id), Some(node)) => LeaderRoute::At { leader_id, leader_addr: node.addr.clone() },
            _ => LeaderRoute::Unknown,
        }
    }

    /// Whether node `node_id` may send this node Raft messages: it is in the
    /// current membership (voter or learner), or this node knows no
    /// membership yet (a fresh learner, which first hears from the leader).
    /// Read from the metrics without copying the membership, because the
    /// server asks on every peer call.
    pub fn admits_peer(&self, node_id: u64) -> bool {
        let metrics = self.inner.raft.metrics();
        let m = metrics.borrow_watched();
        let membership = m.membership_config.membership();
        membership.get_node(&node_id).is_some() || membership.nodes().next().is_none()
    }

    /// A channel that always holds the latest [`RaftStatus`] and wakes on every
    /// change (role, leader, term, log progress, membership).
    pub fn subscribe_status(&self) -> watch::Receiver<RaftStatus> {
        self.inner.status.clone()
    }

    /// Waits until this node knows a leader and returns its id.
    pub async fn wait_for_leader(&self, timeout: Duration) -> Result<u64, RaftError> {
        let metrics = self
            .inner
            .raft
            .wait(Some(timeout))
            .metrics(|m| m.current_leader.is_some(), "a leader is known")
            .await
            .map_err(wait_error)?;
        metrics.current_leader.ok_or_else(|| RaftError::Timeout("leader vanished".into()))
    }

    /// Builds a snapshot of everything applied so far and returns once it is
    /// stored (the log before it may then be purged).
    pub async fn trigger_snapshot(&self) -> Result<(), RaftError> {
        let timeout = Duration::from_millis(self.inner.timings.snapshot_timeout_ms);
        let deadline = Instant::now() + timeout;
        let Some(applied) = self.status().last_applied_index else {
            return Ok(());
        };
        let mut metrics = self.inner.raft.metrics();
        loop {
            // Re-triggering is harmless: openraft ignores a trigger while a
            // build runs, and that build may be older than `applied`.
            self.inner.raft.trigger().snapshot().await.map_err(|_| RaftError::Shutdown)?;
            let round_end = deadline.min(Instant::now() + Duration::from_millis(self.inner.timings.heartbeat_ms * 4));
            loop {
                if metrics.borrow_and_update().snapshot.map(|s| s.index) >= Some(applied) {
                    return Ok(());
                }
                match tokio::time::timeout_at(round_end, metrics.changed()).await {
                    Ok(Ok(())) => continue,
                    Ok(Err(_)) => return Err(RaftError::Shutdown),
                    Err(_) => break,
                }
            }
            if Instant::now() >= deadline {
                return Err(RaftError::Timeout(format!("no snapshot up to index {applied} within {timeout:?}")));
            }
        }
    }

    /// A consistent export of the application's state at the current
    /// applied index, for a backup (see [`crate::backup`]). Call it on the
    /// leader after [`RaftNode::ensure_linearizable`]: every write
    /// acknowledged before then is in it.
    pub async fn backup(&self) -> Result<crate::Backup, crate::BackupError> {
        crate::backup::take(&self.inner.raft, &self.inner.backups, || self.trigger_snapshot()).await
    }

    /// Stops Raft and closes the storage. Later calls return at once; the
    /// node answers every request with an error afterwards.
    pub async fn shutdown(&self) -> Result<(), RaftError> {
        let Some(closed) = self.inner.storage_closed.lock().await.take() else {
            return Ok(());
        };
        self.inner.raft.shutdown().await.map_err(|e| RaftError::Storage(format!("the raft task failed: {e}")))?;
        // Wait until openraft dropped every storage handle and the fsync
        // thread exited, so the data directory can be reopened at once.
        match tokio::time::timeout(STORAGE_CLOSE_TIMEOUT, closed).await {
            Ok(_) => {
                tracing::info!(node_id = self.inner.node_id, "raft node shut down");
                Ok(())
            }
            Err(_) => Err(RaftError::Timeout(format!("storage still in use {STORAGE_CLOSE_TIMEOUT:?} after shutdown"))),
        }
    }
}

/// openraft's configuration from Gavel's timings.
fn openraft_config(
    timings: &RaftTimings,
    #[cfg(feature = "mutants")] planted: crate::PlantedLogBugs,
) -> Result<openraft::Config, RaftError> {
    // The planted bug `leader-restore` turns leader restore back on (below).
    #[cfg(feature = "mutants")]
    let leader_restore = planted.leader_restore;
    #[cfg(not(feature = "mutants"))]
    let leader_restore = false;
    let config = openraft::Config {
        cluster_name: "gavel".into(),
        heartbeat_interval: timings.heartbeat_ms,
        election_timeout_min: timings.election_timeout_min_ms,
        election_timeout_max: timings.election_timeout_max_ms,
        install_snapshot_timeout: timings.snapshot_timeout_ms,
        snapshot_policy: SnapshotPolicy::LogsSinceLast(timings.snapshot_logs_since_last),
        max_in_snapshot_log_to_keep: timings.logs_to_keep,
        enable_pre_vote: Some(timings.pre_vote),
        // Safety rule: a restarted leader must win a new term before it
        // leads again. openraft 0.10 restores a leader in its old term by
        // default; but a leader replicates entries while its own fdatasync
        // runs, so a kill can take from its log entries its followers
        // hold. Restored in the same term, it appended new entries at
        // those indexes under the same log ids, which the followers took
        // for the ones they had: replicas at one applied index with
        // different states (docs/decisions.md, "A restarted leader
        // campaigns").
        enable_leader_restore: Some(leader_restore),
        ..Default::default()
    };
    config.validate().map_err(|e| RaftError::Config(e.to_string()))
}

/// Republishes openraft's metrics as [`RaftStatus`] until Raft stops.
async fn publish_status(mut metrics: WatchReceiverOf<TypeConfig, RaftMetrics>, status: watch::Sender<RaftStatus>) {
    loop {
        let next = status_from_metrics(&metrics.borrow_and_update());
        status.send_if_modified(|current| {
            let changed = *current != next;
            *current = next;
            changed
        });
        if metrics.changed().await.is_err() {
            status.send_modify(|current| current.role = Role::Shutdown);
            return;
        }
    }
}

fn status_from_metrics(m: &RaftMetrics) -> RaftStatus {
    let membership = m.membership_config.membership();
    let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
    let members = membership
        .nodes()
        .map(|(node_id, node)| Member { node_id: *node_id, addr: node.addr.clone(), voter: voters.contains(node_id) })
        .collect();
    let role = if m.running_state.is_err() {
        Role::Shutdown
    } else {
        match m.state {
            ServerState::Leader => Role::Leader,
            ServerState::Follower => Role::Follower,
            ServerState::Candidate => Role::Candidate,
            ServerState::Learner => Role::Learner,
            ServerState::Shutdown => Role::Shutdown,
        }
    };
    RaftStatus {
        node_id: m.id,
        role,
        term: m.current_term,
        leader_id: m.current_leader,
        leader_addr: m.current_leader.and_then(|leader| membership.get_node(&leader)).map(|node| node.addr.clone()),
        last_applied_index: m.last_applied.map(|log_id| log_id.index),
        last_log_index: m.last_log_index,
        snapshot_index: m.snapshot.map(|log_id| log_id.index),
        purged_index: m.purged.map(|log_id| log_id.index),
        members,
    }
}

fn forward_from_metrics(m: &RaftMetrics) -> WriteError {
    WriteError::ForwardToLeader {
        leader_id: m.current_leader,
        leader_addr: m
            .current_leader
            .and_then(|leader| m.membership_config.membership().get_node(&leader))
            .map(|node| node.addr.clone()),
    }
}

fn wait_error(e: openraft::metrics::WaitError) -> RaftError {
    match e {
        openraft::metrics::WaitError::Timeout(after, what) => RaftError::Timeout(format!("{what} after {after:?}")),
        openraft::metrics::WaitError::ShuttingDown => RaftError::Shutdown,
    }
}
