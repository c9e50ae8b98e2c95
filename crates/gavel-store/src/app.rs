//! The bridge between the Raft layer's opaque commands and `gavel-core`.
//!
//! Log entries carry a bincode-encoded [`Envelope`]; replies travel back as a
//! bincode-encoded [`Reply`]. Readers share the same [`State`] behind a mutex
//! and are woken through a watch channel each time a command is applied, so
//! long-polls never sleep in loops. The planted bug the node runs with (chaos
//! harness only) is set on every [`State`] the application creates or
//! restores, since it is configuration, not replicated state.
//!
//! With a cold store ([`CoreApp::with_cold_store`]) the state's cold records
//! (finalized executions, their lease records, the audit trail, closed
//! approvals) live on disk, and the store is the node's durable copy of the
//! whole state, as etcd's bbolt file is
//! ([`gavel_raft::Application::keeps_own_state`]). Cold writes collect in
//! an overlay in memory; once it holds [`COLD_PENDING_MAX`] writes the Raft
//! layer has them written into the store after the entry
//! ([`gavel_raft::Application::write_changes`]: the changes alone, not
//! waiting for the disk, marking the checkpoint stale). A *checkpoint* is
//! the overlay, the hot state and the entry's log position in one
//! transaction: a snapshot the Raft layer builds is one, durable (its cost
//! is the writes since the last one plus the hot state, never the retained
//! history, and no snapshot file is written), and the Raft layer writes one
//! before it sends a view of a stale store and when it closes. So memory
//! holds the hot set plus at most [`COLD_PENDING_MAX`] cold writes, and
//! after a crash the file holds the whole state at its last durable
//! checkpoint.
//!
//! On start ([`gavel_raft::Application::resume`]) the application reads
//! the hot state of the store's checkpoint alone and keeps the cold tables,
//! if the checkpoint is at the stored snapshot's position, or past it where
//! the Raft layer can replay its log from there; otherwise it clears the
//! store (a data directory of an older version, whose snapshot file is then
//! restored).
//!
//! **Snapshots that do not stop apply.** A snapshot sent to a follower or
//! backed up is a view of the latest checkpoint
//! ([`gavel_raft::Application::checkpoint_view`]): a redb read
//! transaction, which is a point-in-time view (redb is MVCC), so the Raft
//! layer streams the hot state and the cold records out of it into a file
//! on another thread while later commands apply and checkpoint
//! (`cold_store::ColdSnapshot`). An install decodes the received file as it
//! reads it ([`gavel_raft::Application::restore_at`]): the hot state first,
//! then the cold records, decoded in batches of [`COLD_RESTORE_BATCH_BYTES`]
//! on one thread and written on another, a transaction per batch, the
//! checkpoint last and durable. Memory
//! for a snapshot is the hot state plus fixed buffers, whatever the number
//! of retained records; redb's own cache is bounded by [`COLD_CACHE_BYTES`].

use std::io::Read;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

#[cfg(feature = "mutants")]
use gavel_core::mutants::Mutant;
use gavel_core::{DomainError, Envelope, RecordId, Reply, State};
use tokio::sync::watch;

use crate::cold_store::{RecordBatch, RedbColdStore, COLD_CACHE_BYTES};

/// How many unflushed cold writes the application lets the overlay hold
/// before it asks for them to be written into the cold store (without the
/// hot state, without waiting for the disk) instead of waiting for a
/// snapshot. One entry carries up to 512 commands, so a snapshot policy
/// alone would let the overlay (memory) grow with the load; at about 8 cold
/// writes per lifecycle this is a few thousand lifecycles, a few MB, and one
/// non-durable redb transaction.
pub const COLD_PENDING_MAX: usize = 20_000;

/// Bytes of cold records (keys and values) per batch while a snapshot is
/// restored: the decoding thread hands batches ([`RecordBatch`]) to the
/// writing thread, which writes each in one redb transaction that does not
/// wait for the disk. A batch's records are in memory together, so this and
/// [`COLD_RESTORE_BATCHES_QUEUED`] bound an install's memory for records
/// whatever the snapshot's size. And a batch's transaction must dirty
/// fewer pages than redb's write cache holds (a tenth of
/// [`COLD_CACHE_BYTES`], 6.4 MiB): records inserted in key order fill
/// leaves about half, so a batch dirties about 2.2 times its bytes, and a
/// transaction that dirties more than the cache spills pages to the file,
/// then reads every spilled page back at its commit to checksum it and
/// writes it again (8 MiB batches did: 81,000 reads and every page written
/// twice for a 188 MB snapshot).
pub const COLD_RESTORE_BATCH_BYTES: usize = 2 * 1024 * 1024;

// A batch's dirty pages, with room for the B-trees' right edges, fit in redb's write cache.
const _: () = assert!(3 * COLD_RESTORE_BATCH_BYTES <= COLD_CACHE_BYTES / 10);

/// Full batches that may wait for the writing thread while a snapshot is
/// restored, so that decoding goes on while redb writes: at most this many
/// plus the one being filled and the one being written are in memory, about
/// 6 MiB with [`COLD_RESTORE_BATCH_BYTES`].
pub const COLD_RESTORE_BATCHES_QUEUED: usize = 1;

/// The cold records of a snapshot, decoded from `records` in batches of
/// [`COLD_RESTORE_BATCH_BYTES`] as the store asks for them.
fn next_batches<R: Read>(
    records: &mut gavel_core::SnapshotRecords<R>,
) -> impl Iterator<Item = Result<RecordBatch, String>> + '_ {
    let mut ended = false;
    std::iter::from_fn(move || {
        if ended {
            return None;
        }
        let mut batch = RecordBatch::default();
        loop {
            match batch.read_from(records) {
                Ok(true) if batch.bytes() < COLD_RESTORE_BATCH_BYTES => {}
                Ok(true) => return Some(Ok(batch)),
                Ok(false) => {
                    ended = true;
                    return (!batch.is_empty()).then_some(Ok(batch));
                }
                Err(error) => {
                    ended = true;
                    return Some(Err(error.to_string()));
                }
            }
        }
    })
}

/// The cold store's file in a node's data directory.
pub const COLD_STORE_FILE: &str = "cold.redb";

/// The replicated application: the core state machine plus change notification.
pub struct CoreApp {
    state: Mutex<State>,
    /// Where cold records are flushed to; `None` keeps them in memory.
    cold_store: Option<Arc<RedbColdStore>>,
    /// Unflushed cold writes that make a checkpoint due after an entry
    /// ([`COLD_PENDING_MAX`] unless set).
    cold_pending_max: AtomicUsize,
    /// Whether the overlay reached `cold_pending_max` at the last apply.
    checkpoint_due: AtomicBool,
    /// The planted bug ([`CoreApp::plant`]), set again on every restored state.
    #[cfg(feature = "mutants")]
    planted_bug: std::sync::OnceLock<Mutant>,
    applied: watch::Sender<u64>,
    /// Readers waiting on one record, woken by the applies that name it.
    watched: crate::watched::Watched,
    /// The state hash at an applied index: hashing serializes the whole state,
    /// so status calls reuse it until the next apply.
    hash_cache: Mutex<Option<(u64, String)>>,
    /// Commands the dedup table answered with a remembered reply (retries
    /// whose first attempt had committed), counted for the metrics.
    dedup_replays: AtomicU64,
    /// Whether a snapshot restore runs on its caller's thread alone (the
    /// simulator, whose blocking work is inline), instead of decoding and
    /// writing on two threads with a third writing dirty pages back.
    restore_on_one_thread: AtomicBool,
}

impl CoreApp {
    /// An empty application.
    pub fn new() -> Arc<CoreApp> {
        CoreApp::over(None)
    }

    /// An empty application whose cold records go to `<data_dir>/cold.redb`
    /// (created, with `data_dir`, if missing; resumed from or cleared on
    /// start, see [`CoreApp::with_cold_store`]).
    pub fn open(data_dir: &std::path::Path) -> Result<Arc<CoreApp>, gavel_core::ColdStoreError> {
        std::fs::create_dir_all(data_dir).map_err(|error| {
            gavel_core::ColdStoreError::Write(format!("cannot create {}: {error}", data_dir.display()))
        })?;
        CoreApp::with_cold_store(RedbColdStore::open(&data_dir.join(COLD_STORE_FILE))?)
    }

    /// An empty application whose cold records go to `store`. The store is
    /// left as it is until the Raft layer calls
    /// [`gavel_raft::Application::resume`] on start, which resumes from its
    /// checkpoint or clears it; an application used without Raft calls it
    /// (with `None` to start empty).
    pub fn with_cold_store(store: Arc<RedbColdStore>) -> Result<Arc<CoreApp>, gavel_core::ColdStoreError> {
        Ok(CoreApp::over(Some(store)))
    }

    /// Plants `planted_bug` in the state machine, now and in every state
    /// restored later (chaos harness and simulation only: the feature
    /// `mutants`). Call it before Raft starts; the first bug planted stays.
    #[cfg(feature = "mutants")]
    pub fn plant(&self, planted_bug: Option<Mutant>) {
        if let Some(planted_bug) = planted_bug {
            let _ = self.planted_bug.set(planted_bug);
        }
        let mut state = self.state();
        let current = std::mem::take(&mut *state);
        *state = self.replanted(current);
    }

    /// `state` with this application's planted bug, for a state that
    /// replaces the current one (restored, resumed or emptied).
    #[cfg(feature = "mutants")]
    fn replanted(&self, mut state: State) -> State {
        state.set_planted_bug(self.planted_bug.get().copied());
        state
    }

    /// An empty application over `cold_store` (or keeping its cold records
    /// in memory without one).
    fn over(cold_store: Option<Arc<RedbColdStore>>) -> Arc<CoreApp> {
        let (applied, _) = watch::channel(0);
        let mut state = State::new();
        if let Some(store) = &cold_store {
            state.attach_cold_store(store.clone());
        }
        Arc::new(CoreApp {
            state: Mutex::new(state),
            cold_store,
            cold_pending_max: AtomicUsize::new(COLD_PENDING_MAX),
            checkpoint_due: AtomicBool::new(false),
            #[cfg(feature = "mutants")]
            planted_bug: std::sync::OnceLock::new(),
            applied,
            watched: Default::default(),
            hash_cache: Mutex::new(None),
            dedup_replays: AtomicU64::new(0),
            restore_on_one_thread: AtomicBool::new(false),
        })
    }

    /// Restores snapshots on the calling thread alone: no thread is
    /// started, so a simulation that runs blocking work inline stays on
    /// one thread. Slower for a large snapshot (decoding waits for each
    /// batch's write).
    pub fn restore_on_one_thread(&self) {
        self.restore_on_one_thread.store(true, Ordering::Relaxed);
    }

    /// Commands this node applied whose reply came from the dedup table.
    pub fn dedup_replays(&self) -> u64 {
        self.dedup_replays.load(Ordering::Relaxed)
    }

    /// Sets how many unflushed cold writes make a checkpoint due (tests use
    /// small values to checkpoint often).
    pub fn set_cold_pending_max(&self, writes: usize) {
        self.cold_pending_max.store(writes, Ordering::Relaxed);
    }

    /// Locks the state. Hold it briefly: apply waits on it. Readers
    /// outside this crate go through [`crate::reads::ReadPort`].
    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock means apply hit a broken invariant;
        // the process is already crashing, so poisoning is not recoverable.
        self.state.lock().expect("state lock poisoned by a failed invariant")
    }

    /// A receiver that changes each time a command is applied (its value is
    /// the log index) or the state is restored; waiters use
    /// [`crate::reads::AppliedWatch`].
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.applied.subscribe()
    }

    /// The readers waiting on one record ([`crate::reads::RecordWatch`]).
    pub(crate) fn watched(&self) -> &crate::watched::Watched {
        &self.watched
    }

    /// The index of the last log entry applied (0 before the first).
    pub fn applied_index(&self) -> u64 {
        *self.applied.borrow()
    }

    /// The state hash, recomputed only after something was applied.
    pub fn state_hash(&self) -> String {
        let index = *self.applied.borrow();
        let mut cache = self.hash_cache.lock().expect("hash cache lock poisoned");
        if let Some((cached_index, hash)) = cache.as_ref() {
            if *cached_index == index {
                return hash.clone();
            }
        }
        let hash = self.state().state_hash();
        *cache = Some((index, hash.clone()));
        hash
    }

    /// Notes whether the overlay is full enough for a checkpoint.
    fn note_pending(&self, state: &State) {
        if self.cold_store.is_some() {
            let due = state.cold_pending_count() >= self.cold_pending_max.load(Ordering::Relaxed);
            self.checkpoint_due.store(due, Ordering::Relaxed);
        }
    }

    /// Encodes a command for the log.
    pub fn encode_command(envelope: &Envelope) -> Vec<u8> {
        bincode::serialize(envelope).expect("envelopes serialize: plain data")
    }

    /// Decodes a reply from the log.
    pub fn decode_reply(bytes: &[u8]) -> Reply {
        bincode::deserialize(bytes).unwrap_or_else(|error| {
            Reply::Error(DomainError::invalid(format!("undecodable reply from the state machine: {error}")))
        })
    }
}

/// Applies one encoded command to the locked state and encodes its reply;
/// adds the watched records its events named to `named`.
fn apply_one(app: &CoreApp, state: &mut State, command: &[u8], named: &mut Vec<RecordId>) -> Vec<u8> {
    let reply = match bincode::deserialize::<Envelope>(command) {
        Ok(envelope) => {
            let (reply, replayed) = state.apply_noting_replay(&envelope);
            if replayed {
                app.dedup_replays.fetch_add(1, Ordering::Relaxed);
            }
            app.watched.note_named(state, named);
            reply
        }
        // Only nodes of this cluster propose; an undecodable entry comes from an
        // incompatible version. Every replica answers it alike and changes nothing.
        Err(error) => Reply::Error(DomainError::invalid(format!("undecodable command: {error}"))),
    };
    bincode::serialize(&reply).expect("replies serialize: plain data")
}

impl gavel_raft::Application for CoreApp {
    fn apply(&self, log_index: u64, command: &[u8]) -> Vec<u8> {
        let mut named = Vec::new();
        let reply = {
            let mut state = self.state();
            let reply = apply_one(self, &mut state, command, &mut named);
            self.note_pending(&state);
            reply
        };
        self.applied.send_replace(log_index);
        self.watched.wake(&named);
        reply
    }

    /// One lock and one wake-up of the long-polls per log entry: readers see
    /// the whole entry applied or none of it; the readers of one execution
    /// wake only when the entry's events name it. With a cold store, an overlay
    /// past [`COLD_PENDING_MAX`] writes makes a checkpoint due.
    fn apply_batch(&self, log_index: u64, commands: &[&[u8]]) -> Vec<Vec<u8>> {
        let mut named = Vec::new();
        let replies = {
            let mut state = self.state();
            let replies = commands.iter().map(|command| apply_one(self, &mut state, command, &mut named)).collect();
            self.note_pending(&state);
            replies
        };
        self.applied.send_replace(log_index);
        self.watched.wake(&named);
        replies
    }

    /// The whole state, cold records flushed or not, in memory (a backup
    /// seed, and the snapshot of an application without a cold store).
    fn snapshot(&self) -> Vec<u8> {
        self.state().snapshot()
    }

    fn keeps_own_state(&self) -> bool {
        self.cold_store.is_some()
    }

    fn checkpoint_due(&self) -> bool {
        self.checkpoint_due.load(Ordering::Relaxed)
    }

    /// Writes the overlay, the hot state and `position` into the cold store
    /// in one transaction, under the state lock, and returns the store
    /// file's size. A failed write keeps the overlay: nothing is lost, and
    /// the next checkpoint tries again.
    fn checkpoint(&self, position: &[u8], durable: bool) -> Result<u64, String> {
        let store = self.own_store()?;
        let mut state = self.state();
        let hot = state.hot_snapshot();
        state
            .flush_cold(|mutations| store.write_checkpoint(mutations, position, &hot, durable))
            .map_err(|error| error.to_string())?;
        self.checkpoint_due.store(false, Ordering::Relaxed);
        Ok(std::fs::metadata(store.path()).map_or(0, |metadata| metadata.len()))
    }

    /// Writes the overlay into the cold store without the hot state or a
    /// position, not waiting for the disk, and marks the store's checkpoint
    /// stale in the same transaction ([`RedbColdStore::write_eventually`]).
    /// A failed write keeps the overlay.
    fn write_changes(&self) -> Result<(), String> {
        let store = self.own_store()?;
        self.state().flush_cold(|mutations| store.write_eventually(mutations)).map_err(|error| error.to_string())?;
        self.checkpoint_due.store(false, Ordering::Relaxed);
        Ok(())
    }

    /// The cold store's latest checkpoint as a read transaction (no state
    /// lock: the store always holds a whole state at its checkpoint).
    fn checkpoint_view(&self) -> Result<Option<(Vec<u8>, Box<dyn gavel_raft::SnapshotSource>)>, String> {
        let Some(store) = &self.cold_store else { return Ok(None) };
        let view = store.checkpoint_view().map_err(|error| error.to_string())?;
        Ok(view.map(|(position, source)| (position, Box::new(source) as Box<dyn gavel_raft::SnapshotSource>)))
    }

    /// With a cold store, the store is rewritten from the snapshot's cold
    /// records before the restored state replaces the current one.
    fn restore(&self, bytes: &[u8]) -> Result<(), String> {
        self.restore_stream(&mut &bytes[..], bytes.len() as u64, None)
    }

    /// [`CoreApp::restore`] as the snapshot is read, and the rewrite writes
    /// the checkpoint at `position`.
    fn restore_at(&self, position: &[u8], snapshot: &mut dyn Read, bytes: u64) -> Result<(), String> {
        self.restore_stream(snapshot, bytes, Some(position))
    }

    /// Resumes from the cold store's checkpoint if it is at `position`, or
    /// past it where `later` accepts it (reading only the hot state; the
    /// cold tables stay); otherwise resumes nothing (and, with no stored
    /// snapshot, clears the store).
    fn resume(&self, position: Option<&[u8]>, later: &dyn Fn(&[u8]) -> bool) -> Result<Option<Vec<u8>>, String> {
        let Some(store) = &self.cold_store else { return Ok(None) };
        let checkpoint = store.checkpoint().map_err(|error| error.to_string())?;
        match checkpoint {
            Some(checkpoint) if Some(checkpoint.position.as_slice()) == position || later(&checkpoint.position) => {
                // A store whose tables are not at its checkpoint is refused
                // by name: the node stops rather than serve a state that
                // is neither the checkpoint's nor the log's.
                store.verify(&checkpoint).map_err(|error| {
                    format!(
                        "{error}; this node refuses to start on it: move its data directory aside and start it \
                         empty (it catches up from the cluster by snapshot)"
                    )
                })?;
                let resumed =
                    State::from_hot_snapshot(&checkpoint.hot, store.clone()).map_err(|error| error.to_string())?;
                #[cfg(feature = "mutants")]
                let resumed = self.replanted(resumed);
                *self.state() = resumed;
                self.state_replaced();
                Ok(Some(checkpoint.position))
            }
            // Nothing stored to restore: start empty, over an empty store.
            _ if position.is_none() => {
                store.clear().map_err(|error| error.to_string())?;
                Ok(None)
            }
            // The stored snapshot's file, if there is one, rewrites the
            // store; if there is none the Raft layer refuses to start, and
            // the store is left as it is for whoever investigates.
            _ => Ok(None),
        }
    }
}

impl CoreApp {
    /// The cold store the checkpoints and writes of changes go to.
    fn own_store(&self) -> Result<&Arc<RedbColdStore>, String> {
        self.cold_store.as_ref().ok_or_else(|| "this application has no cold store".to_string())
    }

    /// Restores a snapshot of `bytes` bytes as `snapshot` reads it. With a
    /// cold store: decodes the hot state first (a snapshot that is not one
    /// is refused before anything changes), then clears the store and
    /// writes the cold records into it, decoding them on this thread in
    /// batches of [`COLD_RESTORE_BATCH_BYTES`] while another thread writes
    /// each batch in a transaction that does not wait for the disk, then
    /// the checkpoint at `position`, if given, durably
    /// ([`RedbColdStore::write_records`]). A crash in between leaves a store
    /// without a checkpoint, which the Raft layer rebuilds from its stored
    /// snapshot on restart. All under the state lock: no
    /// read sees the store half rewritten. A snapshot found corrupt after
    /// the store was cleared leaves an empty state over an empty store and
    /// an error; the Raft layer then stops, and on restart rebuilds the
    /// store from the snapshot it has stored.
    fn restore_stream(&self, snapshot: &mut dyn Read, bytes: u64, position: Option<&[u8]>) -> Result<(), String> {
        let Some(store) = &self.cold_store else {
            let restored = State::restore_from(snapshot, bytes).map_err(|error| error.to_string())?;
            #[cfg(feature = "mutants")]
            let restored = self.replanted(restored);
            *self.state() = restored;
            self.state_replaced();
            return Ok(());
        };
        let (restored, mut records) = State::read_snapshot_hot(snapshot, bytes).map_err(|error| error.to_string())?;
        #[cfg(feature = "mutants")]
        let restored = self.replanted(restored);
        let hot = restored.hot_snapshot();
        let state = self.state();
        let started = std::time::Instant::now();
        store.clear().map_err(|error| error.to_string())?;
        if self.restore_on_one_thread.load(Ordering::Relaxed) {
            let checkpoint = position.map(|position| (position, hot.as_slice()));
            let rewritten =
                store.write_records(next_batches(&mut records), checkpoint).map_err(|error| error.to_string());
            return self.finish_restore(state, restored, rewritten, started);
        }
        let write_behind = store.write_behind();
        // This thread decodes (the snapshot's reader is not `Send`), a
        // second one writes into redb: the writes are most of the cost, and
        // the decoding runs beside them instead of before each batch.
        let rewritten = std::thread::scope(|scope| -> Result<u64, String> {
            let (send, receive) = std::sync::mpsc::sync_channel::<Option<RecordBatch>>(COLD_RESTORE_BATCHES_QUEUED);
            let writer = std::thread::Builder::new()
                .name("cold-restore".into())
                .spawn_scoped(scope, move || {
                    // `None` is the decoder's "that was the last batch"; a
                    // channel closed without it (the snapshot turned out
                    // corrupt) stops the writes before the checkpoint.
                    let batches = std::iter::from_fn(|| match receive.recv() {
                        Ok(Some(batch)) => Some(Ok(batch)),
                        Ok(None) => None,
                        Err(_) => Some(Err("the snapshot's records stopped before their end".to_string())),
                    });
                    store.write_records(batches, position.map(|position| (position, hot.as_slice())))
                })
                .map_err(|error| format!("cannot start the thread that rewrites the cold store: {error}"))?;
            let decoded = (|| -> Result<(), String> {
                let mut batch = RecordBatch::default();
                while batch.read_from(&mut records).map_err(|error| error.to_string())? {
                    if batch.bytes() >= COLD_RESTORE_BATCH_BYTES && send.send(Some(std::mem::take(&mut batch))).is_err()
                    {
                        // The writer stopped: its error says why.
                        return Ok(());
                    }
                }
                // A send fails only if the writer stopped: its error says why.
                if !batch.is_empty() {
                    let _ = send.send(Some(batch));
                }
                let _ = send.send(None);
                Ok(())
            })();
            drop(send);
            let written = writer.join().map_err(|_| "the thread that rewrites the cold store panicked".to_string())?;
            decoded?;
            drop(write_behind);
            written.map_err(|error| error.to_string())
        });
        self.finish_restore(state, restored, rewritten, started)
    }

    /// Puts `restored` in place once its cold records were `rewritten` into
    /// the store; or, if that failed, an empty state over an emptied store
    /// and the error.
    fn finish_restore(
        &self,
        mut state: MutexGuard<'_, State>,
        mut restored: State,
        rewritten: Result<u64, String>,
        started: std::time::Instant,
    ) -> Result<(), String> {
        let store = self.own_store()?;
        let records = match rewritten {
            Ok(records) => records,
            Err(error) => {
                let cleared = store.clear();
                let mut empty = State::new();
                empty.attach_cold_store(store.clone());
                #[cfg(feature = "mutants")]
                let empty = self.replanted(empty);
                *state = empty;
                drop(state);
                self.state_replaced();
                return Err(match cleared {
                    Ok(()) => error,
                    Err(clear_error) => format!("{error}; clearing the cold store failed too: {clear_error}"),
                });
            }
        };
        restored.attach_cold_store(store.clone());
        tracing::info!(records, took = ?started.elapsed(), "cold store rewritten from a snapshot");
        *state = restored;
        drop(state);
        self.state_replaced();
        Ok(())
    }

    /// After the state was replaced: forgets the cached hash and wakes the readers.
    fn state_replaced(&self) {
        *self.hash_cache.lock().expect("hash cache lock poisoned") = None;
        self.applied.send_modify(|_| {});
        self.watched.wake_all();
    }
}

#[cfg(test)]
mod tests {
    use gavel_raft::Application;

    use super::*;

    #[cfg(feature = "mutants")]
    #[test]
    fn the_planted_bug_is_set_on_the_new_state_and_again_on_every_restored_one() {
        let app = CoreApp::new();
        app.plant(Some(Mutant::NoFencing));
        assert_eq!(app.state().planted_bug(), Some(Mutant::NoFencing));
        let snapshot = gavel_raft::Application::snapshot(&*app);
        app.restore(&snapshot).expect("a snapshot of this state machine restores");
        assert_eq!(app.state().planted_bug(), Some(Mutant::NoFencing));
        assert_eq!(CoreApp::new().state().planted_bug(), None);
    }

    /// Two applications fed the same commands, one keeping its cold records
    /// in memory and one checkpointing them into redb whenever a checkpoint
    /// is due and at every snapshot, and restarting from a snapshot on a
    /// fresh store, give the same replies
    /// (reads of finalized executions, late reports, repeated submits,
    /// retention included) and the same state hash.
    #[test]
    fn an_application_with_a_redb_cold_store_answers_and_hashes_like_one_in_memory() {
        use gavel_core::{Command, Retention, SideEffect};

        let directory = tempfile::tempdir().expect("temp dir");
        let store = |name: &str| RedbColdStore::open(&directory.path().join(name)).expect("open the cold store");
        let memory = CoreApp::new();
        let mut disk = CoreApp::with_cold_store(store("first.redb")).expect("a cold store app");
        // Checkpoints between snapshots too.
        disk.set_cold_pending_max(25);
        let mut now_ms = 1_000;
        let mut log_index = 0;
        let mut apply = |memory: &CoreApp, disk: &CoreApp, now_ms: u64, command: Command| {
            log_index += 1;
            let envelope = Envelope { request_id: None, now_ms, caller: None, command };
            let bytes = CoreApp::encode_command(&envelope);
            let (in_memory, on_disk) = (memory.apply(log_index, &bytes), disk.apply(log_index, &bytes));
            assert_eq!(in_memory, on_disk, "same reply to {:?}", envelope.command);
            if disk.checkpoint_due() {
                // What the Raft layer does after an entry.
                disk.checkpoint(&log_index.to_le_bytes(), false).expect("a checkpoint");
            }
            CoreApp::decode_reply(&in_memory)
        };
        let capability = gavel_core::CapabilitySpec {
            id: "cap".to_string(),
            side_effect: Some(SideEffect::Read),
            risk: Some(gavel_core::Risk::Low),
            ..Default::default()
        };
        let registered = apply(&memory, &disk, now_ms, Command::RegisterCapability(capability));
        assert!(matches!(registered, Reply::Capability(_)), "registered: {registered:?}");
        let mut leases = Vec::new();
        for round in 0..60u32 {
            now_ms += 3_000;
            let submit = gavel_core::Submit {
                execution_id: format!("exec-{round}"),
                capability_id: "cap".to_string(),
                input_json: format!("{{\"round\":{round}}}"),
                actor: gavel_core::Actor::system(),
                surface: "test".to_string(),
                correlation_id: None,
            };
            let submitted = apply(&memory, &disk, now_ms, Command::Submit(submit.clone()));
            assert!(matches!(submitted, Reply::Execution { created: true, .. }), "submitted: {submitted:?}");
            let poll = Command::Poll { worker_id: "w".to_string(), queues: vec!["cap".to_string()], tasks_max: 4 };
            let Reply::Tasks(tasks) = apply(&memory, &disk, now_ms, poll) else { panic!("a poll leases") };
            assert_eq!(tasks.len(), 1, "the one queued execution is leased");
            for task in tasks {
                let outcome = gavel_core::ReportOutcome::Completed { output_json: "{}".to_string() };
                let report = Command::Report { lease_id: task.lease.lease_id, worker_id: "w".to_string(), outcome };
                apply(&memory, &disk, now_ms, report.clone());
                leases.push(report);
            }
            // A repeated submit and a late report on finalized executions read them back.
            apply(&memory, &disk, now_ms, Command::Submit(submit));
            if let Some(late) = leases.get(leases.len().saturating_sub(5)) {
                apply(&memory, &disk, now_ms, late.clone());
            }
            if round % 10 == 9 {
                let retention = Retention { records_ms: 40_000, events_ms: 40_000 };
                apply(&memory, &disk, now_ms, Command::Tick { retention });
            }
            if round % 7 == 6 {
                disk.checkpoint(b"snapshot", true).expect("a snapshot is a durable checkpoint");
                assert_eq!(disk.state().cold_pending_count(), 0, "a snapshot flushes the cold overlay");
                let bytes = disk.snapshot();
                if round == 34 {
                    // A restart: a new application on a new store, from the snapshot.
                    disk = CoreApp::with_cold_store(store("second.redb")).expect("a cold store app");
                    disk.set_cold_pending_max(25);
                    disk.restore(&bytes).expect("the snapshot restores");
                }
            }
        }
        assert_eq!(disk.state_hash(), memory.state_hash(), "the same state hash");
        assert!(disk.state().cold_pending_count() < 25 + 20, "the overlay stays bounded between snapshots");
        assert_eq!(disk.state().events_after(0, 1_000), memory.state().events_after(0, 1_000), "the same events");
        let retained = memory.state().execution_count();
        assert!(retained > 10 && retained < 60, "retention dropped the oldest: {retained} retained");
        assert_eq!(disk.state().execution_count(), retained);
        for round in 0..60u32 {
            let id = format!("exec-{round}");
            let in_memory = memory.state().execution(&id).map(std::borrow::Cow::into_owned);
            assert_eq!(disk.state().execution(&id).map(std::borrow::Cow::into_owned), in_memory, "{id} reads the same");
        }
        disk.checkpoint(b"last", true).expect("a durable checkpoint");
        let store = disk.cold_store.clone().expect("a cold store");
        assert!(store.len() > retained, "the finalized executions and their leases are on disk");
        assert_eq!(disk.state().cold_pending_count(), 0, "and none is in memory");
    }

    /// The bytes a snapshot source writes.
    fn written(source: Box<dyn gavel_raft::SnapshotSource>) -> Vec<u8> {
        let mut bytes = Vec::new();
        source.write_to(&mut bytes).expect("a snapshot writes into memory");
        bytes
    }

    /// A snapshot as the Raft layer builds one (a durable checkpoint at
    /// `position`) and sends it (a view of the latest checkpoint): the
    /// view, which must be at `position`.
    fn snapshot_at(app: &CoreApp, position: &[u8]) -> Box<dyn gavel_raft::SnapshotSource> {
        app.checkpoint(position, true).expect("a durable checkpoint");
        let (at, view) = app.checkpoint_view().expect("a view").expect("a checkpoint");
        assert_eq!(at, position, "the view is at the latest checkpoint");
        view
    }

    /// A corrupt snapshot is refused: before anything changes if its hot
    /// state does not decode, and with an empty state over an emptied store
    /// (never a mix) if its cold records are cut short.
    #[test]
    fn a_corrupt_snapshot_is_refused_and_never_leaves_a_mixed_state() {
        let directory = tempfile::tempdir().expect("temp dir");
        let store = RedbColdStore::open(&directory.path().join(COLD_STORE_FILE)).expect("open");
        let app = CoreApp::with_cold_store(store.clone()).expect("a cold store app");
        app.resume(None, &|_| false).expect("start empty");
        let mut log_index = 0;
        lifecycles(&app, &mut log_index, 0..20);
        let whole = written(snapshot_at(&app, b"p"));
        let (hash, records) = (app.state_hash(), store.len());
        let garbage = [0xff; 64];
        assert!(app.restore_at(b"q", &mut &garbage[..], 64).is_err());
        assert_eq!((app.state_hash(), store.len()), (hash.clone(), records), "nothing changed");
        let cut = &whole[..whole.len() - 10];
        let error = app.restore_at(b"q", &mut &cut[..], cut.len() as u64).expect_err("truncated");
        assert!(error.contains("truncated"), "{error}");
        assert_eq!(app.state_hash(), State::new().state_hash(), "an empty state");
        assert!(store.is_empty(), "over an empty store");
        app.restore_at(b"p", &mut &whole[..], whole.len() as u64).expect("the intact snapshot restores");
        assert_eq!((app.state_hash(), store.len()), (hash, records));
    }

    /// A restore on the caller's thread alone (the simulator's) ends in the
    /// same state and store as the threaded one, and refuses a snapshot cut
    /// short the same way: an empty state over an emptied store.
    #[test]
    fn a_restore_on_one_thread_ends_like_the_threaded_one() {
        let directory = tempfile::tempdir().expect("temp dir");
        let open = |name: &str| {
            let store = RedbColdStore::open(&directory.path().join(name)).expect("open the cold store");
            let app = CoreApp::with_cold_store(store.clone()).expect("a cold store app");
            app.resume(None, &|_| false).expect("start empty");
            (app, store)
        };
        let (source, _) = open("source.redb");
        let mut log_index = 0;
        lifecycles(&source, &mut log_index, 0..100);
        let whole = written(snapshot_at(&source, b"p"));
        let (threaded, threaded_store) = open("threaded.redb");
        threaded.restore_at(b"p", &mut &whole[..], whole.len() as u64).expect("restores on two threads");
        let (inline, inline_store) = open("inline.redb");
        inline.restore_on_one_thread();
        inline.restore_at(b"p", &mut &whole[..], whole.len() as u64).expect("restores on one thread");
        assert_eq!(threaded.state_hash(), source.state_hash());
        assert_eq!(inline.state_hash(), source.state_hash());
        assert!(!inline_store.is_empty(), "the cold records were written");
        assert_eq!(inline_store.len(), threaded_store.len());
        let cut = &whole[..whole.len() - 10];
        let error = inline.restore_at(b"q", &mut &cut[..], cut.len() as u64).expect_err("truncated");
        assert!(error.contains("truncated"), "{error}");
        assert_eq!(inline.state_hash(), State::new().state_hash(), "an empty state");
        assert!(inline_store.is_empty(), "over an empty store");
    }

    /// Applies `rounds` lifecycles (submit, lease, complete) of a registered
    /// capability to `app`, from log index `*log_index + 1`.
    fn lifecycles(app: &CoreApp, log_index: &mut u64, rounds: std::ops::Range<u32>) {
        use gavel_core::{Command, SideEffect};
        let mut apply = |command: Command| {
            *log_index += 1;
            let now_ms = 1_000 + *log_index;
            let envelope = Envelope { request_id: None, now_ms, caller: None, command };
            CoreApp::decode_reply(&app.apply(*log_index, &CoreApp::encode_command(&envelope)))
        };
        let capability = gavel_core::CapabilitySpec {
            id: "cap".to_string(),
            side_effect: Some(SideEffect::Read),
            risk: Some(gavel_core::Risk::Low),
            ..Default::default()
        };
        apply(Command::RegisterCapability(capability));
        for round in rounds {
            let submit = gavel_core::Submit {
                execution_id: format!("exec-{round}"),
                capability_id: "cap".to_string(),
                input_json: "{}".to_string(),
                actor: gavel_core::Actor::system(),
                surface: "test".to_string(),
                correlation_id: None,
            };
            apply(Command::Submit(submit));
            let poll = Command::Poll { worker_id: "w".to_string(), queues: vec!["cap".to_string()], tasks_max: 1 };
            let Reply::Tasks(tasks) = apply(poll) else { panic!("a poll leases") };
            for task in tasks {
                let outcome = gavel_core::ReportOutcome::Completed { output_json: "{}".to_string() };
                apply(Command::Report { lease_id: task.lease.lease_id, worker_id: "w".to_string(), outcome });
            }
        }
    }

    /// A restart at the checkpoint's position reads the hot state alone and
    /// writes no cold record, and so does one from a later checkpoint the
    /// Raft layer accepts; a view of a checkpoint is a point-in-time
    /// snapshot whatever is applied and checkpointed after it; a refused
    /// checkpoint is left alone, and rewritten by a restore.
    #[test]
    fn a_restart_at_the_checkpoint_resumes_without_rewriting_the_cold_records() {
        let directory = tempfile::tempdir().expect("temp dir");
        let path = directory.path().join(COLD_STORE_FILE);
        let open = || {
            let store = RedbColdStore::open(&path).expect("open the cold store");
            (CoreApp::with_cold_store(store.clone()).expect("a cold store app"), store)
        };
        let (app, store) = open();
        assert_eq!(app.resume(None, &|_| false).expect("resume"), None, "nothing to resume from");
        assert!(app.keeps_own_state(), "a cold store is the application's own durable state");
        let mut log_index = 0;
        lifecycles(&app, &mut log_index, 0..200);
        assert!(!app.checkpoint_due(), "200 lifecycles stay below the overlay's bound");
        let source = snapshot_at(&app, b"position-1");
        let (hash, records) = (app.state_hash(), store.len());
        // The audit tree's records (tiles, and a partial tile's single
        // hashes) come and go as leaves are added: counted apart.
        let tiles = |store: &RedbColdStore| {
            gavel_core::ColdStore::range(store, gavel_core::ColdTable::AuditTiles, &[], usize::MAX).len()
        };
        let records_besides_tiles = records - tiles(&store);
        // The view is a point-in-time snapshot: commands applied and
        // checkpointed after it was taken are not in what it writes.
        app.set_cold_pending_max(1);
        lifecycles(&app, &mut log_index, 200..205);
        assert!(app.checkpoint_due(), "past the bound, a checkpoint is due");
        app.checkpoint(b"position-1b", false).expect("a checkpoint between snapshots");
        assert!(!app.checkpoint_due());
        assert_eq!(app.state().cold_pending_count(), 0, "the overlay is in the store");
        assert_ne!(app.state_hash(), hash);
        let whole = written(source);
        assert_eq!(State::snapshot_state_hash(&whole).expect("decodes"), hash, "the snapshot is at position-1");
        assert_eq!(State::restore(&whole).expect("restores").execution("exec-200"), None);
        let later_hash = app.state_hash();
        drop((app, store));

        // A checkpoint written between snapshots, past the stored
        // snapshot, which the Raft layer accepts: resumed there.
        let (app, store) = open();
        let resumed = app.resume(Some(b"position-1"), &|later| later == b"position-1b").expect("resume");
        assert_eq!(resumed, Some(b"position-1b".to_vec()), "resumed from the later checkpoint");
        assert_eq!(store.writes(), 0, "resuming writes no cold record");
        assert_eq!(app.state_hash(), later_hash, "the state at position-1b");
        drop((app, store));

        // A restore (an install) rewrites the store at its position.
        let (app, store) = open();
        app.resume(None, &|_| false).expect("start empty");
        assert!(store.is_empty(), "with nothing stored, the store is cleared");
        app.restore_at(b"position-1", &mut &whole[..], whole.len() as u64).expect("restore");
        assert_eq!(store.len(), records, "the store holds the records at position-1");
        assert_eq!(
            store.checkpoint().expect("read").map(|checkpoint| checkpoint.position),
            Some(b"position-1".to_vec())
        );
        // A snapshot at a position holds every cold record once.
        let again = written(app.checkpoint_view().expect("a view").expect("a checkpoint").1);
        assert_eq!(again, whole, "a snapshot of the restored state is the same bytes");
        assert!(records >= 200 * 8, "the finalized lifecycles are on disk: {records} records");
        let memory = CoreApp::new();
        memory.restore(&whole).expect("the whole-state snapshot restores");
        assert_eq!(memory.state_hash(), hash);
        let from_bytes = State::snapshot_state_hash(&whole).expect("the snapshot decodes");
        assert_eq!(from_bytes, hash, "the hash read from the snapshot's hot part");
        drop((app, store));

        let (app, store) = open();
        assert_eq!(
            app.resume(Some(b"position-1"), &|_| panic!("not asked: at the stored position")).expect("resume"),
            Some(b"position-1".to_vec()),
            "resumed from the checkpoint"
        );
        assert_eq!(store.writes(), 0, "resuming writes no cold record");
        assert_eq!(store.len(), records);
        assert_eq!(app.state_hash(), hash, "the state hash of the snapshot");
        for id in ["exec-0", "exec-199"] {
            let expected = memory.state().execution(id).map(std::borrow::Cow::into_owned);
            assert!(expected.is_some());
            assert_eq!(app.state().execution(id).map(std::borrow::Cow::into_owned), expected, "{id} reads the same");
        }
        // Both go on alike from there.
        let mut memory_index = log_index;
        lifecycles(&app, &mut log_index, 200..210);
        lifecycles(&memory, &mut memory_index, 200..210);
        assert_eq!(app.state_hash(), memory.state_hash());
        drop(snapshot_at(&app, b"position-2"));
        drop((app, store));

        // The stored snapshot is older than the checkpoint and the Raft
        // layer refuses the checkpoint: nothing is resumed, and the store is
        // left for the stored snapshot's restore to rewrite.
        let (app, store) = open();
        assert_eq!(app.resume(Some(b"position-1"), &|_| false).expect("resume"), None, "another position, refused");
        assert_eq!(store.len() - tiles(&store), records_besides_tiles + 10 * 10, "left as it was");
        app.restore_at(b"position-1", &mut &whole[..], whole.len() as u64).expect("restore");
        assert_eq!(app.state_hash(), hash);
        assert_eq!(store.len(), records, "rewritten");
        assert_eq!(store.writes(), records as u64);
    }
}
