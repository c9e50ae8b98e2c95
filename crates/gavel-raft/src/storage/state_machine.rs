//! The application behind openraft's `RaftStateMachine`, with snapshots as
//! files (`raft-snapshot/`) named in sled, or, for an application that keeps
//! its own state (`Application::keeps_own_state`), as checkpoints in its
//! store: then only the meta is in sled, a build is a durable checkpoint and
//! the current snapshot is a view of the store's latest checkpoint.

use std::io::{self, BufReader};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use futures::TryStreamExt;
use openraft::storage::{EntryResponder, RaftStateMachine};
use openraft::{EntryPayload, OptionalSend, RaftSnapshotBuilder};
use tokio::sync::mpsc;

use super::snapshot_file::{self, SnapshotData, SnapshotFile};
use super::{encode, Shared, SNAPSHOT_FILE_KEY, SNAPSHOT_LEGACY_DATA_KEY, SNAPSHOT_META_KEY};
use super::{Raft, Snapshot};
use crate::application::{Application, SnapshotSource};
use crate::batch;
#[cfg(feature = "sim")]
use crate::io::CrashPoint;
use crate::limits::SNAPSHOT_STREAM_BUFFER_BYTES;
use crate::typ::{Command, LogId, Reply, SnapshotMeta, StoredMembership, TypeConfig};
use crate::RaftError;

/// The state machine: the application plus the last applied log id and
/// membership, which are in memory only and restored from the snapshot.
pub(crate) struct StateMachineStore {
    shared: Arc<Shared>,
    app: Arc<dyn Application>,
    last_applied: Option<LogId>,
    membership: StoredMembership,
    commands: CommandCount,
    /// The application keeps its own state ([`Application::keeps_own_state`]).
    own_state: bool,
    /// Changes were written into the application's store after its latest
    /// checkpoint ([`Application::write_changes`]): a view needs a new
    /// checkpoint first, and so does closing (a store left stale would not
    /// start again).
    stale_checkpoint: bool,
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
        let own_state = app.keeps_own_state();
        let mut store = Self {
            shared,
            app,
            last_applied: None,
            membership: StoredMembership::default(),
            commands: CommandCount::default(),
            own_state,
            stale_checkpoint: false,
        };
        let at = stored.as_ref().map(|meta| position(&meta.last_log_id, &meta.last_membership));
        let stored_applied = stored.as_ref().and_then(|meta| meta.last_log_id);
        let later = |candidate: &[u8]| replayable_after(&store.shared.wal, stored_applied, candidate).is_some();
        let resumed = store.app.resume(at.as_deref(), &later).map_err(refused)?;
        if let Some(resumed) = resumed.as_ref().filter(|resumed| Some(*resumed) != at.as_ref()) {
            let (last_applied, membership) = replayable_after(&store.shared.wal, stored_applied, resumed)
                .ok_or_else(|| refused("it resumed at a position the log cannot replay from".to_string()))?;
            tracing::info!(
                checkpoint = ?last_applied,
                snapshot = ?stored_applied,
                "the application resumed from its own checkpoint past the stored snapshot; the log replays the rest"
            );
            if store.own_state {
                // The checkpoint may not be durable yet; openraft takes the
                // current snapshot (a view of it) as where its log may be
                // purged up to, so it must be.
                store.app.checkpoint(resumed, true).map_err(refused)?;
            }
            store.last_applied = last_applied;
            store.membership = membership;
            return Ok(store);
        }
        let Some(meta) = stored else { return Ok(store) };
        if resumed.is_some() {
            tracing::info!(snapshot = %meta, "the application resumed from its own checkpoint at the stored snapshot");
        } else {
            let (meta, file) = store.shared.read_snapshot().map_err(|e| read_error(&e))?.ok_or_else(|| {
                RaftError::Storage("the stored snapshot disappeared while the node was starting".into())
            })?;
            let file = file.ok_or_else(|| {
                RaftError::Storage(format!(
                    "the stored snapshot {meta} is a checkpoint in the application's own store, which no longer \
                     holds it: this node cannot recover its state; start it with an empty data directory (it \
                     catches up from the cluster by snapshot)"
                ))
            })?;
            restore_from_file(&*store.app, &meta, &file).map_err(refused)?;
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

/// The applied log id and membership a checkpoint at `candidate` (a
/// [`position`]) names, if it is past the stored snapshot's `stored` and
/// the log either still holds the very entry it names (then, by Raft's log
/// matching, the log up to it is the one the checkpoint applied, and the
/// entries after it can be replayed onto it) or ends before it. An entry
/// is applied only once committed, so a checkpoint is a committed state,
/// as a snapshot is; a log that ends before it lost an unsynced tail (a
/// follower applies a committed entry its own log has not synced yet), and
/// openraft purges it up to the checkpoint on start and fetches what
/// follows from the leader. A log that holds another entry at that index
/// contradicts the checkpoint: refused.
fn replayable_after(
    wal: &super::wal::Wal,
    stored: Option<LogId>,
    candidate: &[u8],
) -> Option<(Option<LogId>, StoredMembership)> {
    let (applied, membership) = decode_position(candidate).ok()?;
    let at = applied.filter(|applied| Some(*applied) > stored)?;
    let (purged, last) = wal.log_state();
    if last.is_none_or(|last| last.index < at.index) {
        return Some((applied, membership));
    }
    // openraft purges the log up to its current snapshot, which for an
    // application with its own state is a view of this very checkpoint,
    // while the stored snapshot's meta may still name an older one: a log
    // purged exactly to the checkpoint holds what follows it (simulation
    // seed 150 restarted such a node and was refused). A log purged past
    // it cannot replay onto it.
    if let Some(purged) = purged.filter(|purged| purged.index >= at.index) {
        return (purged == at).then_some((applied, membership));
    }
    let entries = wal.entries(&(at.index..=at.index)).ok()?;
    entries.first().filter(|entry| entry.log_id == at).map(|_| (applied, membership))
}

/// The position [`Application::snapshot_at`], `restore_at` and `resume`
/// name a snapshot by: its last log id and membership, bincode-encoded (the
/// snapshot id is left out: it differs between nodes and rebuilds of the
/// same state; openraft 0.10 has no snapshot id any more).
fn position(last_applied: &Option<LogId>, membership: &StoredMembership) -> Vec<u8> {
    encode(&(last_applied, membership)).expect("log ids and memberships serialize: plain data")
}

/// The applied log id and membership a [`position`] names.
fn decode_position(bytes: &[u8]) -> Result<(Option<LogId>, StoredMembership), bincode::Error> {
    super::decode(bytes)
}

/// Restores the application from a snapshot file, read through a buffer of
/// [`SNAPSHOT_STREAM_BUFFER_BYTES`]. Blocking.
fn restore_from_file(app: &dyn Application, meta: &SnapshotMeta, file: &SnapshotFile) -> Result<(), String> {
    let mut reader = BufReader::with_capacity(SNAPSHOT_STREAM_BUFFER_BYTES, file.reader());
    app.restore_at(&position(&meta.last_log_id, &meta.last_membership), &mut reader, file.bytes())
}

/// Captures the application state at one point of the log (a
/// [`SnapshotSource`]); `build_snapshot` then writes it to a file and
/// stores it off the state machine's task, while apply goes on.
pub(crate) struct SnapshotBuilder {
    shared: Arc<Shared>,
    meta: SnapshotMeta,
    /// Taken once by `build_snapshot`; behind a mutex only because openraft
    /// wants the builder `Sync`.
    source: std::sync::Mutex<Option<Captured>>,
}

/// What a snapshot build captured on the state machine's task.
enum Captured {
    /// The application's source, to be written to a file.
    Source(Box<dyn SnapshotSource>),
    /// The outcome of a durable checkpoint into the application's own store:
    /// nothing is left to write.
    Checkpoint(Result<u64, String>),
}

/// A snapshot write failed; openraft adds that it was writing a snapshot.
fn snapshot_write_error(meta: &SnapshotMeta, error: &dyn std::fmt::Display) -> io::Error {
    io::Error::other(format!("snapshot {meta}: {error}"))
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    type SnapshotData = SnapshotData;

    async fn build_snapshot(&mut self) -> Result<Snapshot, io::Error> {
        let started = std::time::Instant::now();
        let meta = self.meta.clone();
        let write_error = |e: &dyn std::fmt::Display| snapshot_write_error(&meta, e);
        let captured = self.source.get_mut().ok().and_then(Option::take);
        let source = match captured.ok_or_else(|| write_error(&"this snapshot was built already"))? {
            Captured::Source(source) => source,
            Captured::Checkpoint(checkpointed) => {
                let store_bytes = checkpointed.map_err(|e| write_error(&e))?;
                #[cfg(feature = "sim")]
                self.shared.crash_point(CrashPoint::CheckpointWritten).await;
                let stored = persist_snapshot(&self.shared, &self.meta, None, WriteMode::OnlyIfNewer).await?;
                #[cfg(feature = "sim")]
                self.shared.crash_point(CrashPoint::SnapshotStored).await;
                crate::stats::stats().snapshot_build.observe_duration(started.elapsed());
                if stored {
                    #[cfg(feature = "sim")]
                    self.shared.snapshot_counts.iter().for_each(crate::io::SnapshotCounts::count_built);
                    crate::stats::stats().count_snapshot(usize::try_from(store_bytes).unwrap_or(usize::MAX));
                    tracing::info!(
                        snapshot = %self.meta,
                        store_bytes,
                        took = ?started.elapsed(),
                        "snapshot built as a checkpoint"
                    );
                }
                return Ok(Snapshot { meta: self.meta.clone(), snapshot: SnapshotData::Checkpointed });
            }
        };
        let path = snapshot_file::temporary_path(&self.shared.snapshot_dir, "build");
        let mut file = self
            .shared
            .threading
            .run(move || SnapshotFile::write(path, source))
            .await
            .map_err(|e| write_error(&e))?
            .map_err(|e| write_error(&e))?;
        let stored = persist_snapshot(&self.shared, &self.meta, Some(&mut file), WriteMode::OnlyIfNewer).await?;
        #[cfg(feature = "sim")]
        self.shared.crash_point(CrashPoint::SnapshotStored).await;
        crate::stats::stats().snapshot_build.observe_duration(started.elapsed());
        if stored {
            #[cfg(feature = "sim")]
            self.shared.snapshot_counts.iter().for_each(crate::io::SnapshotCounts::count_built);
            tracing::info!(snapshot = %self.meta, bytes = file.bytes(), took = ?started.elapsed(), "snapshot built");
        }
        Ok(Snapshot { meta: self.meta.clone(), snapshot: SnapshotData::File(file) })
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

/// Stores `file` (a complete file this process owns) as the snapshot
/// `meta`: fsyncs it, renames it into `raft-snapshot/`, fsyncs the
/// directory, writes its meta and name in one sled batch and waits until
/// that is durable, then removes the previous snapshot's file. Returns
/// whether it stored it: a skipped (older) snapshot stays owned by `file`
/// and is removed with it. Without a file (a snapshot that is a durable
/// checkpoint in the application's own store) only the meta is written,
/// and the previous file, if any, is removed.
///
/// Durability rule: openraft purges the log behind a snapshot as soon as it
/// learns about it, so the snapshot must be on stable storage first.
async fn persist_snapshot(
    shared: &Shared,
    meta: &SnapshotMeta,
    file: Option<&mut SnapshotFile>,
    mode: WriteMode,
) -> Result<bool, io::Error> {
    let write_error = |e: &dyn std::fmt::Display| snapshot_write_error(meta, e);
    let _serialized = shared.snapshot_write.lock().await;
    if mode == WriteMode::OnlyIfNewer {
        if let Some(stored) = shared.read_snapshot_meta()? {
            if stored.last_log_id >= meta.last_log_id {
                tracing::debug!(stored = %stored, built = %meta, "a newer snapshot is stored already; keeping it");
                return Ok(false);
            }
        }
    }
    let previous = shared.snapshot.get(SNAPSHOT_FILE_KEY).map_err(|e| write_error(&e))?;
    let mut batch = sled::Batch::default();
    batch.insert(SNAPSHOT_META_KEY, encode(meta).map_err(|e| write_error(&e))?);
    batch.remove(SNAPSHOT_LEGACY_DATA_KEY);
    let file_given = file.is_some();
    let bytes = match file {
        Some(file) => {
            let name = place_snapshot_file(shared, meta, file).await.map_err(|e| write_error(&e))?;
            batch.insert(SNAPSHOT_FILE_KEY, name.as_bytes());
            file.bytes()
        }
        None => {
            batch.remove(SNAPSHOT_FILE_KEY);
            0
        }
    };
    shared.snapshot.apply_batch(batch).map_err(|e| write_error(&e))?;
    shared.durability.wait_durable().await.map_err(|e| write_error(&e))?;
    if let Some(previous) = previous {
        // A reader holding the old file (a transfer to a follower, a
        // backup) keeps reading it: unlinking does not close handles.
        let _ = std::fs::remove_file(shared.snapshot_dir.join(String::from_utf8_lossy(&previous).as_ref()));
    }
    if let Some(upto) = shared.install_fence.take_covered(meta.last_log_id) {
        shared.wal.purge(upto).map_err(|e| write_error(&e))?;
    }
    tracing::info!(snapshot = %meta, bytes, "snapshot stored");
    // A checkpoint is counted by its build, with its store's size.
    if file_given {
        crate::stats::stats().count_snapshot(usize::try_from(bytes).unwrap_or(usize::MAX));
    }
    Ok(true)
}

/// Fsyncs `file`, renames it into `raft-snapshot/` under a new name and
/// fsyncs the directory; returns the name.
async fn place_snapshot_file(shared: &Shared, meta: &SnapshotMeta, file: &mut SnapshotFile) -> std::io::Result<String> {
    let sequence = shared.snapshot_seq.fetch_add(1, Ordering::Relaxed);
    let index = meta.last_log_id.map_or(0, |log_id| log_id.index);
    let name = format!("{index:020}-{}-{sequence:016x}.snap", std::process::id());
    let owned = file.adopt();
    // A file this node does not own (another store's, in openraft's
    // conformance suite) is copied first: the store renames only its own.
    let other = if owned.is_none() { Some(file.duplicate()?) } else { None };
    let temporary = snapshot_file::temporary_path(&shared.snapshot_dir, "copy");
    let target = shared.snapshot_dir.join(&name);
    let dir = shared.snapshot_dir.clone();
    let placed = shared.threading.run(move || -> std::io::Result<()> {
        let source = match (owned, other) {
            (Some(owned), _) => owned,
            (None, Some(other)) => other.copy_to(temporary)?.adopt().expect("a copy is owned"),
            (None, None) => unreachable!("a file is owned or duplicated"),
        };
        std::fs::File::open(&source)?.sync_all()?;
        std::fs::rename(&source, &target).inspect_err(|_| {
            let _ = std::fs::remove_file(&source);
        })?;
        snapshot_file::sync_dir(&dir)
    });
    placed.await.map_err(std::io::Error::other)??;
    Ok(name)
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
    type SnapshotData = SnapshotData;
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), io::Error> {
        Ok((self.last_applied, self.membership.clone()))
    }

    /// Applies the committed entries openraft streams in, in order, and sends
    /// each reply through the entry's responder (openraft 0.10 passes one
    /// with every entry a client waits for).
    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), io::Error>
    where
        Strm: futures::Stream<Item = Result<EntryResponder<TypeConfig>, io::Error>> + Unpin + OptionalSend,
    {
        // The time spent applying, not the time spent waiting for entries.
        let mut applying = std::time::Duration::ZERO;
        while let Some((entry, responder)) = entries.try_next().await? {
            let started = std::time::Instant::now();
            self.last_applied = Some(entry.log_id);
            let reply = match entry.payload {
                EntryPayload::Blank => Reply::default(),
                EntryPayload::Normal(Command(payload)) => {
                    let (reply, commands) = apply_batch(&*self.app, entry.log_id.index, &payload);
                    self.commands.applied(commands);
                    if self.own_state && self.app.checkpoint_due() {
                        let written_started = std::time::Instant::now();
                        match self.app.write_changes() {
                            Ok(()) => {
                                self.stale_checkpoint = true;
                                #[cfg(feature = "sim")]
                                self.shared.crash_point(CrashPoint::ChangesWritten).await;
                                tracing::debug!(
                                    log_index = entry.log_id.index,
                                    took = ?written_started.elapsed(),
                                    "changes written into the application's store"
                                );
                            }
                            Err(error) => tracing::error!(%error, "cannot write the changes; they stay in memory"),
                        }
                    }
                    Reply(reply)
                }
                EntryPayload::Membership(membership) => {
                    self.membership = StoredMembership::new(Some(entry.log_id), membership);
                    Reply::default()
                }
            };
            #[cfg(feature = "sim")]
            self.shared.crash_point(CrashPoint::Applied).await;
            if let Some(responder) = responder {
                responder.send(reply);
            }
            applying += started.elapsed();
        }
        crate::stats::stats().stages.apply.observe_duration(applying);
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        // The application's source is taken here, on the state machine's
        // task and between two `apply` calls, so it stands for
        // `last_applied` exactly; openraft runs `build_snapshot` in a
        // separate task, which writes it out while later entries apply.
        let captured = if self.own_state {
            // Durability rule: a durable checkpoint at `last_applied` must
            // not outlive the log entries it applied. openraft applies an
            // entry once it is committed, which on a follower may be before
            // this node's own log has synced it; a kill then lost the entry
            // while the store kept the checkpoint past it, and the node
            // could not start again (its log cannot reach the checkpoint).
            // So the log is synced up to here first.
            let wal = self.shared.wal.clone();
            let synced = self.shared.threading.run(move || wal.sync_pending()).await;
            match synced.map_err(|e| e.to_string()).and_then(|synced| synced.map_err(|e| e.to_string())) {
                Ok(()) => Captured::Checkpoint(self.write_checkpoint(true)),
                Err(error) => Captured::Checkpoint(Err(format!("cannot sync the log before a checkpoint: {error}"))),
            }
        } else {
            Captured::Source(self.app.snapshot_at(&position(&self.last_applied, &self.membership)))
        };
        self.commands.since_last = 0;
        SnapshotBuilder {
            shared: self.shared.clone(),
            meta: SnapshotMeta { last_log_id: self.last_applied, last_membership: self.membership.clone() },
            source: std::sync::Mutex::new(Some(captured)),
        }
    }

    /// Decodes the received file into the application on a blocking thread
    /// (the state machine waits: nothing applies during an install), and
    /// stores the file itself as the snapshot. For an application that
    /// keeps its own state the file is stored *first*: restoring rewrites
    /// the application's store, which until then held the only copy of the
    /// previous state, so a crash in the middle must find the new snapshot's
    /// file to restore from (the store's checkpoint then replaces it at the
    /// next build). Otherwise the file is stored once it restored.
    async fn install_snapshot(&mut self, meta: &SnapshotMeta, snapshot: SnapshotData) -> Result<(), io::Error> {
        let refused = |e: &dyn std::fmt::Display| io::Error::other(format!("cannot install snapshot {meta}: {e}"));
        let started = std::time::Instant::now();
        let mut file = self
            .shared
            .threading
            .run(move || snapshot.into_file())
            .await
            .map_err(|e| refused(&e))?
            .map_err(|e| refused(&e))?;
        if self.own_state {
            persist_snapshot(&self.shared, meta, Some(&mut file), WriteMode::Replace).await?;
            #[cfg(feature = "sim")]
            self.shared.crash_point(CrashPoint::InstallStored).await;
        }
        let stored = started.elapsed();
        let (app, owned_meta) = (self.app.clone(), meta.clone());
        let (restored, mut file) = self
            .shared
            .threading
            .run(move || {
                let restored = restore_from_file(&*app, &owned_meta, &file);
                (restored, file)
            })
            .await
            .map_err(|e| refused(&e))?;
        restored.map_err(|e| refused(&e))?;
        #[cfg(feature = "sim")]
        self.shared.crash_point(CrashPoint::InstallRestored).await;
        // `stored`: the received file made durable (and, for an application
        // that keeps its own state, named in sled) before the restore.
        tracing::info!(snapshot = %meta, bytes = file.bytes(), took = ?started.elapsed(), stored = ?stored, "snapshot installed");
        if !self.own_state {
            persist_snapshot(&self.shared, meta, Some(&mut file), WriteMode::Replace).await?;
        }
        self.last_applied = meta.last_log_id;
        self.membership = meta.last_membership.clone();
        self.commands.since_last = 0;
        #[cfg(feature = "sim")]
        self.shared.snapshot_counts.iter().for_each(crate::io::SnapshotCounts::count_installed);
        // The restore ended with a durable checkpoint at the snapshot.
        self.stale_checkpoint = false;
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, io::Error> {
        // Under the write lock: the file named in sled is not replaced
        // between reading its name and opening it.
        let shared = self.shared.clone();
        let _serialized = shared.snapshot_write.lock().await;
        if self.own_state {
            if self.stale_checkpoint {
                // The view must be of a whole state: write one, here on
                // the state machine's task, at `last_applied`.
                self.write_checkpoint(false)
                    .map_err(|e| io::Error::other(format!("cannot write a checkpoint: {e}")))?;
            }
            if let Some(view) = self.checkpoint_view()? {
                return Ok(Some(view));
            }
        }
        match self.shared.read_snapshot()? {
            None => Ok(None),
            Some((meta, Some(file))) => Ok(Some(Snapshot { meta, snapshot: SnapshotData::File(file) })),
            Some((meta, None)) => Err(io::Error::other(format!(
                "the stored snapshot {meta} has no file, and the application's store no checkpoint"
            ))),
        }
    }
}

/// Closing with changes written after the latest checkpoint writes a
/// durable one first: otherwise the store would outlive the node stale
/// (redb makes its last commit durable when it closes), and the node would
/// not start again from it. A crash needs nothing: the store returns to
/// its last durable checkpoint, and the log replays from there.
impl Drop for StateMachineStore {
    fn drop(&mut self) {
        if self.own_state && self.stale_checkpoint && !std::thread::panicking() {
            let _ = self.write_checkpoint(true);
        }
    }
}

impl StateMachineStore {
    /// Writes a checkpoint of the application's state at `last_applied`
    /// (`durable`: on stable storage before it returns), logged with its
    /// duration: it holds apply, and its cost is the hot state plus the
    /// changes since the last write.
    fn write_checkpoint(&mut self, durable: bool) -> Result<u64, String> {
        let at = position(&self.last_applied, &self.membership);
        let started = std::time::Instant::now();
        let written = self.app.checkpoint(&at, durable);
        match &written {
            Ok(bytes) => {
                self.stale_checkpoint = false;
                tracing::info!(last_applied = ?self.last_applied, durable, bytes, took = ?started.elapsed(), "checkpoint written");
            }
            Err(error) => tracing::error!(%error, durable, "cannot write a checkpoint"),
        }
        written
    }

    /// The current snapshot of an application that keeps its own state: a
    /// view of its store's latest checkpoint, at the checkpoint's position
    /// (the stored snapshot's, or a later one: every checkpoint is at an
    /// applied, so committed, entry). Cheap: a read transaction; the state
    /// is written out only when the view is sent or backed up.
    fn checkpoint_view(&self) -> Result<Option<Snapshot>, io::Error> {
        let read_error = |e: &dyn std::fmt::Display| io::Error::other(format!("cannot read a checkpoint view: {e}"));
        let Some((at, source)) = self.app.checkpoint_view().map_err(|e| read_error(&e))? else { return Ok(None) };
        let (last_log_id, last_membership) = decode_position(&at).map_err(|e| read_error(&e))?;
        let meta = SnapshotMeta { last_log_id, last_membership };
        let data = SnapshotData::view(source, self.shared.snapshot_dir.clone());
        Ok(Some(Snapshot { meta, snapshot: data }))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{mpsc, Arc};
    use std::time::Duration;

    use openraft::{EntryPayload, StoredMembership};

    use super::{position, replayable_after};
    use crate::storage::wal::{RealFs, Wal};
    use crate::typ::{Command, Entry, LeaderId, LogId};

    fn log_id(term: u64, index: u64) -> LogId {
        LogId::new(LeaderId { term, node_id: 1 }, index)
    }

    fn append_durably(wal: &Wal, indexes: std::ops::RangeInclusive<u64>) {
        let batch = indexes
            .map(|index| Entry { log_id: log_id(1, index), payload: EntryPayload::Normal(Command(vec![1])) })
            .collect();
        let (done, durable) = mpsc::channel();
        wal.append(
            batch,
            Some(Box::new(move |result| {
                let _ = done.send(result);
            })),
        )
        .expect("append");
        durable.recv_timeout(Duration::from_secs(10)).expect("the writer answers").expect("durable");
    }

    #[test]
    fn a_checkpoint_the_log_was_purged_to_replays_and_one_it_was_purged_past_does_not() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (wal, _writer) = Wal::open_with(dir.path(), Arc::new(RealFs), 4096).expect("open");
        append_durably(&wal, 1..=30);
        let membership = StoredMembership::default();
        let at = |index| position(&Some(log_id(1, index)), &membership);
        let stored = Some(log_id(1, 10));
        // The entry it names is in the log: replayable.
        assert!(replayable_after(&wal, stored, &at(15)).is_some());
        // Purged exactly to the checkpoint (openraft's current snapshot is a
        // view of it): what follows is in the log.
        wal.purge(log_id(1, 20)).expect("purge");
        assert_eq!(replayable_after(&wal, stored, &at(20)).map(|(applied, _)| applied), Some(Some(log_id(1, 20))));
        // Purged past the checkpoint: entries 16..=20 are gone.
        assert!(replayable_after(&wal, stored, &at(15)).is_none());
        // A checkpoint of another term at the purge point contradicts it.
        let other = position(&Some(LogId::new(LeaderId { term: 2, node_id: 1 }, 20)), &membership);
        assert!(replayable_after(&wal, stored, &other).is_none());
    }
}
