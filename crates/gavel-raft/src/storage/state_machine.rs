//! The application behind openraft's `RaftStateMachine`, with snapshots in sled.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use openraft::storage::RaftStateMachine;
use openraft::{AnyError, EntryPayload, OptionalSend, RaftSnapshotBuilder, StorageIOError};
use tokio::sync::mpsc;

use super::{encode, Shared, SNAPSHOT_DATA_KEY, SNAPSHOT_META_KEY};
use crate::application::Application;
use crate::batch;
use crate::typ::{
    Command, Entry, LogId, Raft, Reply, Snapshot, SnapshotMeta, StorageError, StoredMembership, TypeConfig,
};
use crate::RaftError;

/// The state machine: the application plus the last applied log id and
/// membership, which are in memory only and restored from the snapshot.
pub(crate) struct StateMachineStore {
    shared: Arc<Shared>,
    app: Arc<dyn Application>,
    last_applied: Option<LogId>,
    membership: StoredMembership,
    commands: CommandCount,
}

/// The command-count snapshot policy: counts the commands applied since the
/// last snapshot (built or installed) and, once they reach the threshold,
/// asks for a snapshot after every entry until one is built. openraft's own
/// policy (`LogsSinceLast`) counts entries, and one entry carries up to 512
/// commands.
#[derive(Default)]
struct CommandCount {
    since_last: u64,
    /// The threshold and where to ask; `None` until
    /// [`StateMachineStore::snapshot_after_commands`] (a store opened without
    /// a running Raft, by backup for example, never asks).
    trigger: Option<(u64, mpsc::Sender<()>)>,
}

impl CommandCount {
    fn applied(&mut self, commands: usize) {
        self.since_last = self.since_last.saturating_add(commands as u64);
        if let Some((threshold, due)) = &self.trigger {
            if self.since_last >= *threshold {
                // Full: a request is already pending, which is enough.
                let _ = due.try_send(());
            }
        }
    }
}

/// Asks Raft for a snapshot whenever the state machine reports one due;
/// returns when the state machine is dropped or Raft stops.
pub(crate) async fn request_snapshots(mut due: mpsc::Receiver<()>, raft: Raft) {
    while due.recv().await.is_some() {
        // openraft ignores the trigger while a snapshot is being built; the
        // state machine asks again after the next entry.
        if raft.trigger().snapshot().await.is_err() {
            return;
        }
    }
}

impl StateMachineStore {
    /// Loads the stored snapshot (if any) into the application, unless the
    /// application resumes from its own checkpoint at the same position
    /// ([`Application::resume`]): then the snapshot's bytes are not read.
    pub(super) fn restore(shared: Arc<Shared>, app: Arc<dyn Application>) -> Result<Self, RaftError> {
        let read_error = |e: &dyn std::fmt::Display| RaftError::Storage(format!("cannot read the snapshot: {e}"));
        let refused = |e: String| RaftError::Storage(format!("the application refused the stored snapshot: {e}"));
        let stored = shared.read_snapshot_meta().map_err(|e| read_error(&e))?;
        let mut store = Self {
            shared,
            app,
            last_applied: None,
            membership: StoredMembership::default(),
            commands: CommandCount::default(),
        };
        let Some(meta) = stored else {
            store.app.resume(None).map_err(refused)?;
            return Ok(store);
        };
        let at = position(&meta.last_log_id, &meta.last_membership);
        if store.app.resume(Some(&at)).map_err(refused)? {
            tracing::info!(snapshot = %meta, "the application resumed from its own checkpoint at the stored snapshot");
        } else {
            let (meta, data) = store.shared.read_snapshot().map_err(|e| read_error(&e))?.ok_or_else(|| {
                RaftError::Storage("the stored snapshot disappeared while the node was starting".into())
            })?;
            store.app.restore_at(&position(&meta.last_log_id, &meta.last_membership), &data).map_err(refused)?;
            tracing::info!(snapshot = %meta, "restored the application from the stored snapshot");
        }
        store.last_applied = meta.last_log_id;
        store.membership = meta.last_membership;
        Ok(store)
    }

    /// Turns on the command-count policy: a snapshot is asked for once
    /// `threshold` commands were applied since the last one. Run
    /// [`request_snapshots`] on the returned receiver with the Raft handle.
    pub(crate) fn snapshot_after_commands(&mut self, threshold: u64) -> mpsc::Receiver<()> {
        let (due, requests) = mpsc::channel(1);
        self.commands.trigger = Some((threshold, due));
        requests
    }
}

/// The position [`Application::snapshot_at`], `restore_at` and `resume`
/// name a snapshot by: its last log id and membership, bincode-encoded (the
/// snapshot id is left out: it differs between nodes and rebuilds of the
/// same state).
fn position(last_applied: &Option<LogId>, membership: &StoredMembership) -> Vec<u8> {
    encode(&(last_applied, membership)).expect("log ids and memberships serialize: plain data")
}

/// Captures the application state at one point of the log; `build_snapshot`
/// then persists it off the state machine's task.
pub(crate) struct SnapshotBuilder {
    shared: Arc<Shared>,
    meta: SnapshotMeta,
    data: Vec<u8>,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot, StorageError> {
        let started = std::time::Instant::now();
        persist_snapshot(&self.shared, &self.meta, &self.data, WriteMode::OnlyIfNewer).await?;
        crate::stats::stats().snapshot_build.observe_duration(started.elapsed());
        // openraft calls this once per builder: hand the bytes over instead of
        // copying them (at a million executions that copy is over a gigabyte).
        Ok(Snapshot { meta: self.meta.clone(), snapshot: Box::new(std::mem::take(&mut self.data)) })
    }
}

/// Whether a snapshot write may replace a newer stored snapshot.
#[derive(PartialEq, Eq)]
enum WriteMode {
    /// A locally built snapshot: skip it if a newer one is already stored.
    OnlyIfNewer,
    /// A snapshot received from the leader: it replaces whatever is stored.
    Replace,
}

/// Writes a snapshot's metadata and data in one atomic sled batch and fsyncs.
///
/// Durability rule: openraft purges the log behind a snapshot as soon as it
/// learns about it, so the snapshot must be on stable storage first.
async fn persist_snapshot(
    shared: &Shared,
    meta: &SnapshotMeta,
    data: &[u8],
    mode: WriteMode,
) -> Result<(), StorageError> {
    let write_error =
        |e: &dyn std::fmt::Display| StorageIOError::write_snapshot(Some(meta.signature()), AnyError::error(e));
    let _serialized = shared.snapshot_write.lock().await;
    if mode == WriteMode::OnlyIfNewer {
        if let Some(stored) = shared.read_snapshot_meta()? {
            if stored.last_log_id >= meta.last_log_id {
                tracing::debug!(stored = %stored, built = %meta, "a newer snapshot is stored already; keeping it");
                return Ok(());
            }
        }
    }
    let meta_bytes = encode(meta).map_err(|e| write_error(&e))?;
    let mut batch = sled::Batch::default();
    batch.insert(SNAPSHOT_META_KEY, meta_bytes);
    batch.insert(SNAPSHOT_DATA_KEY, data);
    shared.snapshot.apply_batch(batch).map_err(|e| write_error(&e))?;
    shared.durability.wait_durable().await.map_err(|e| write_error(&e))?;
    tracing::info!(snapshot = %meta, bytes = data.len(), "snapshot stored");
    crate::stats::stats().count_snapshot(data.len());
    Ok(())
}

/// Applies every command of a batch entry in order and returns the batch of
/// replies. An entry that is not a well-formed batch (written by an
/// incompatible version) is applied as no command on every replica alike, and
/// answered with an empty batch, which the proposer reports as an error.
/// Also returns how many commands it applied.
fn apply_batch(app: &dyn Application, log_index: u64, payload: &[u8]) -> (Vec<u8>, usize) {
    match batch::decode(payload) {
        Ok(commands) => {
            let replies = app.apply_batch(log_index, &commands);
            (batch::encode(&replies), commands.len())
        }
        Err(error) => {
            tracing::error!(log_index, %error, "skipping an undecodable log entry");
            (batch::encode::<Vec<u8>>(&[]), 0)
        }
    }
}

impl RaftStateMachine<TypeConfig> for StateMachineStore {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        Ok((self.last_applied, self.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Reply>, StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let (mut replies, started) = (Vec::new(), std::time::Instant::now());
        for entry in entries {
            self.last_applied = Some(entry.log_id);
            let reply = match entry.payload {
                EntryPayload::Blank => Reply::default(),
                EntryPayload::Normal(Command(payload)) => {
                    let (reply, commands) = apply_batch(&*self.app, entry.log_id.index, &payload);
                    self.commands.applied(commands);
                    Reply(reply)
                }
                EntryPayload::Membership(membership) => {
                    self.membership = StoredMembership::new(Some(entry.log_id), membership);
                    Reply::default()
                }
            };
            replies.push(reply);
        }
        crate::stats::stats().stages.apply.observe_duration(started.elapsed());
        Ok(replies)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        // The application is serialized here, on the state machine's task and
        // between two `apply` calls, so the bytes match `last_applied`
        // exactly. openraft runs `build_snapshot` in a separate task that
        // would otherwise race with later applies.
        let data = self.app.snapshot_at(&position(&self.last_applied, &self.membership));
        self.commands.since_last = 0;
        let seq = self.shared.snapshot_seq.fetch_add(1, Ordering::Relaxed);
        let snapshot_id = match &self.last_applied {
            Some(log_id) => format!("{}-{}-{}", log_id.leader_id.term, log_id.index, seq),
            None => format!("empty-{seq}"),
        };
        SnapshotBuilder {
            shared: self.shared.clone(),
            meta: SnapshotMeta {
                last_log_id: self.last_applied,
                last_membership: self.membership.clone(),
                snapshot_id,
            },
            data,
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Vec<u8>>, StorageError> {
        Ok(Box::default())
    }

    async fn install_snapshot(&mut self, meta: &SnapshotMeta, snapshot: Box<Vec<u8>>) -> Result<(), StorageError> {
        self.app
            .restore_at(&position(&meta.last_log_id, &meta.last_membership), &snapshot)
            .map_err(|e| StorageIOError::read_snapshot(Some(meta.signature()), AnyError::error(e)))?;
        persist_snapshot(&self.shared, meta, &snapshot, WriteMode::Replace).await?;
        self.last_applied = meta.last_log_id;
        self.membership = meta.last_membership.clone();
        self.commands.since_last = 0;
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, StorageError> {
        Ok(self.shared.read_snapshot()?.map(|(meta, data)| Snapshot { meta, snapshot: Box::new(data) }))
    }
}
