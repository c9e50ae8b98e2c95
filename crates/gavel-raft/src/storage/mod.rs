//! Durable Raft storage: the log and the vote in Gavel's own write-ahead log
//! ([`wal`]), the committed pointer and the latest snapshot in sled.
//!
//! Layout under `data_dir`:
//!
//! | where                         | what                                              |
//! |-------------------------------|---------------------------------------------------|
//! | `raft-log/<seq:016x>.wal`     | log segments: entries, truncate and purge markers |
//! | `raft-log/vote`               | the vote, replaced atomically                     |
//! | `raft/` sled tree `meta`      | `committed`: bincode `Option<LogId>`              |
//! | `raft/` sled tree `snapshot`  | `meta`: bincode `SnapshotMeta`; `file`: the name of its file in `raft-snapshot/` (none for an application that keeps its own state) |
//! | `raft-snapshot/<name>.snap`   | the stored snapshot: the application's snapshot bytes |
//! | `raft-snapshot/<n>.<what>.tmp`| a snapshot being built, seeded or sent (a view written out); removed on start |
//! | `raft-incoming/<n>.part`      | a snapshot being received from the leader (`service`); emptied on start |
//!
//! The application state itself is persisted through snapshots: on start
//! the last snapshot is restored into the application and openraft
//! re-applies the committed log suffix. Restart cost is therefore the
//! snapshot plus the suffix, never the whole history.
//!
//! An application that keeps its own state (`Application::keeps_own_state`,
//! Gavel's cold store) is its own snapshot, as etcd's bbolt file is: a
//! snapshot build is a durable checkpoint of the application's store at the
//! applied position (`Application::checkpoint`) and only its meta goes to
//! sled, with no file; between snapshots the application asks for
//! checkpoints that do not wait for the disk (`Application::checkpoint_due`);
//! the current snapshot, which openraft sends to a follower that needs one,
//! is a view of the latest checkpoint (`Application::checkpoint_view`),
//! written to a temporary file only then ([`SnapshotData::View`]); an
//! install rewrites the store and keeps no file; and on start the
//! application resumes from its checkpoint (`Application::resume`), at the
//! stored snapshot's position or a later one the log can replay from (made
//! durable before openraft starts). A store that lost its checkpoint stops
//! the node with an error naming the way out (an empty data directory).
//!
//! Snapshot policy: openraft's `LogsSinceLast` (entries, the backstop that
//! bounds the log) and the state machine's own command count
//! (`RaftTimings::snapshot_commands_since_last`, `state_machine`), which asks
//! Raft for a snapshot once enough commands were applied, however few
//! entries carried them.
//!
//! Durability rules (enforced where noted):
//! - a log append is acknowledged to openraft (`IOFlushed`) only after the
//!   WAL's writer fdatasynced it (`wal::Wal::append`);
//! - `save_vote` returns only after every log write queued before it is
//!   durable (openraft 0.10 does not wait for appends, and reads a saved
//!   vote as "every earlier write is durable") and the vote file is renamed
//!   into place and its directory fsynced (`wal::Wal::save_vote`, `wal::vote`);
//! - a failed write or fdatasync of the log stops it for good, and openraft
//!   stops the node (`wal::writer`);
//! - a snapshot is fsynced before openraft learns it exists, so the log can be
//!   purged behind it (`state_machine::persist_snapshot`, [`durability`]):
//!   its file is fsynced and renamed into `raft-snapshot/`, the directory
//!   fsynced, then its meta and file name written to sled and waited for;
//!   only then is the previous snapshot's file removed;
//! - the log's purge marker never runs ahead of the stored snapshot: while a
//!   snapshot received from the leader is installed, openraft 0.9 asked for
//!   the purge before the install was stored, and that purge waits for it
//!   ([`InstallFence`]; without it a SIGKILL mid-install left a node that
//!   could never start again).
//!
//! Snapshots never pass through memory whole: a build writes the
//! application's [`crate::SnapshotSource`] to a file on a blocking thread
//! while apply goes on (or is a checkpoint), an install decodes the
//! received file through a reader, and what openraft moves around is a
//! [`SnapshotData`]: a [`SnapshotFile`] handle or a view not yet written
//! ([`snapshot_file`]).

// Kept from openraft 0.9, whose `StorageError` (a large type) these helpers
// returned; under 0.10 they return `io::Error`. Remove once clippy agrees.
#![allow(clippy::result_large_err)]

mod durability;
#[cfg(feature = "mutants")]
mod early_ack;
mod log_store;
pub(crate) mod snapshot_file;
mod state_machine;
pub(crate) mod wal;

#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::Serialize;

pub(crate) use durability::ThreadExited;
pub(crate) use log_store::LogStore;
pub(crate) use snapshot_file::{SnapshotData, SnapshotFile};
pub(crate) use state_machine::{request_snapshots, StateMachineStore};

use crate::application::Application;
use crate::limits::{SLED_CACHE_BYTES, SLED_SEGMENT_BYTES};
use crate::typ::{LeaderId, LogId, Node, NodeId, SnapshotMeta, TypeConfig};
use crate::RaftError;
use durability::Durability;
use wal::Wal;

/// The running Raft instance, with its state machine type.
pub(crate) type Raft = openraft::Raft<TypeConfig, StateMachineStore>;
/// A snapshot: metadata plus a handle to the file of the application's bytes.
pub(crate) type Snapshot = openraft::Snapshot<LeaderId, NodeId, Node, SnapshotData>;

const COMMITTED_KEY: &[u8] = b"committed";
const SNAPSHOT_META_KEY: &[u8] = b"meta";
/// The stored snapshot's file name in `raft-snapshot/`.
const SNAPSHOT_FILE_KEY: &[u8] = b"file";
/// Where a version before snapshot files kept the snapshot's bytes; moved
/// into a file on open.
const SNAPSHOT_LEGACY_DATA_KEY: &[u8] = b"data";

/// State shared by the log store, its readers, the state machine and the
/// snapshot builders. When the last holder drops it, the log's writer and
/// the fsync thread exit and every file is closed.
pub(crate) struct Shared {
    wal: Wal,
    meta: sled::Tree,
    snapshot: sled::Tree,
    /// `raft-snapshot/`: the stored snapshot's file and temporary ones.
    snapshot_dir: PathBuf,
    durability: Durability,
    /// Serializes snapshot writes so an older snapshot finishing late never
    /// replaces a newer one (openraft builds snapshots in a spawned task that
    /// can race with an install).
    snapshot_write: tokio::sync::Mutex<()>,
    /// Distinguishes snapshot ids built in this process.
    snapshot_seq: AtomicU64,
    /// Holds purges behind the stored snapshot while one is installed.
    install_fence: Arc<InstallFence>,
    /// Where blocking work runs: tokio's blocking pool, or inline in the
    /// simulator ([`crate::io`]).
    threading: wal::Threading,
    /// The simulated disk, whose latency appends, truncations and vote
    /// writes wait for (`None` when simulated IO left it out).
    #[cfg(feature = "sim")]
    sim_disk: Option<crate::io::SimDisk>,
    /// Where snapshots built and installed are counted, if anywhere
    /// ([`crate::RaftIo::counting_snapshots`]).
    #[cfg(feature = "sim")]
    snapshot_counts: Option<crate::io::SnapshotCounts>,
    /// The planted bug `early-ack`, when planted: entries acknowledged but
    /// not yet written.
    #[cfg(feature = "mutants")]
    early_ack: Option<Arc<early_ack::Overlay>>,
}

/// Keeps the log's purge marker behind the stored snapshot while a snapshot
/// received from the leader is installed. openraft 0.9 purged the log up to
/// a received snapshot as soon as it hands the snapshot to the state
/// machine, before the install is stored: a SIGKILL in between leaves a
/// purge marker ahead of the state machine and the committed pointer, and
/// openraft refuses every later start (`purge_upto <= committed`). The
/// service announces each install ([`InstallFence::begin`]) before handing
/// it to openraft; a purge beyond the stored snapshot meanwhile is deferred
/// until `persist_snapshot` stores a snapshot that covers it.
#[derive(Default)]
pub(crate) struct InstallFence(std::sync::Mutex<Fence>);

#[derive(Default)]
struct Fence {
    /// Installs announced and not finished.
    installs: usize,
    /// The highest purge deferred.
    deferred: Option<LogId>,
}

/// An announced install; dropping it ends the announcement.
pub(crate) struct InstallAnnounced(Arc<InstallFence>);

impl InstallFence {
    fn fence(&self) -> std::sync::MutexGuard<'_, Fence> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Announces an install until the returned value is dropped.
    pub(crate) fn begin(self: &Arc<Self>) -> InstallAnnounced {
        self.fence().installs += 1;
        InstallAnnounced(self.clone())
    }

    /// Whether a purge up to `upto` must wait (and is recorded): an install
    /// is announced and the stored snapshot (last log id `stored`) does not
    /// cover it.
    fn defer(&self, upto: LogId, stored: Option<LogId>) -> bool {
        let mut fence = self.fence();
        if fence.installs == 0 || stored >= Some(upto) {
            return false;
        }
        fence.deferred = fence.deferred.max(Some(upto));
        true
    }

    /// The deferred purge, once a stored snapshot at `stored` covers it.
    fn take_covered(&self, stored: Option<LogId>) -> Option<LogId> {
        let mut fence = self.fence();
        if fence.deferred.is_some() && fence.deferred <= stored {
            fence.deferred.take()
        } else {
            None
        }
    }
}

impl Drop for InstallAnnounced {
    fn drop(&mut self) {
        self.0.fence().installs -= 1;
    }
}

/// An opened store: the two halves openraft drives, and a signal for when
/// both (and every reader) are gone and the files are closed.
pub(crate) struct OpenedStorage {
    pub(crate) log_store: LogStore,
    pub(crate) state_machine: StateMachineStore,
    pub(crate) closed: ThreadExited,
}

/// Where the Raft layer keeps its sled database inside `data_dir`.
pub(crate) fn sled_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("raft")
}

/// Where the stored snapshot's file lives inside `data_dir`.
pub(crate) fn snapshot_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("raft-snapshot")
}

/// Where the Raft log (the WAL) and the vote live inside `data_dir`.
pub(crate) fn wal_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("raft-log")
}

/// Opens (or creates) the store in `data_dir` and restores the application
/// from the last snapshot. Blocking: call from a blocking context.
pub(crate) fn open(data_dir: &Path, app: Arc<dyn Application>) -> Result<OpenedStorage, RaftError> {
    open_with(
        data_dir,
        app,
        #[cfg(feature = "mutants")]
        crate::config::PlantedLogBugs::default(),
        &crate::io::RaftIo::default(),
    )
}

/// [`open`] on the IO `io` gives: the log's disk and who writes it (with
/// the feature `mutants`, with the log's `planted` bugs).
pub(crate) fn open_with(
    data_dir: &Path,
    app: Arc<dyn Application>,
    #[cfg(feature = "mutants")] planted: crate::config::PlantedLogBugs,
    io: &crate::io::RaftIo,
) -> Result<OpenedStorage, RaftError> {
    let storage_error =
        |what: &str, e: &dyn std::fmt::Display| RaftError::Storage(format!("{what} in {}: {e}", data_dir.display()));
    let sled_dir = sled_dir(data_dir);
    std::fs::create_dir_all(&sled_dir).map_err(|e| storage_error("cannot create the data directory", &e))?;
    let config = sled::Config::new().path(&sled_dir).cache_capacity(SLED_CACHE_BYTES).segment_size(SLED_SEGMENT_BYTES);
    let db = config.open().map_err(|e| storage_error("cannot open the sled database", &e))?;
    let log_exists = wal_dir(data_dir).exists();
    if !log_exists && db.tree_names().iter().any(|name| name.as_ref() == b"log") {
        // Data written before the WAL: its log and vote are in sled, and
        // starting without them would silently forget acknowledged entries.
        let old_log = db.open_tree("log").map_err(|e| storage_error("cannot open a sled tree", &e))?;
        if !old_log.is_empty() {
            return Err(storage_error(
                "this data directory holds a Raft log in the old sled format, which this version does not read",
                &"remove the directory and let the node rejoin, or run the previous version",
            ));
        }
    }
    let open_tree = |name: &str| db.open_tree(name).map_err(|e| storage_error("cannot open a sled tree", &e));
    let meta = open_tree("meta")?;
    let snapshot = open_tree("snapshot")?;
    let snapshot_dir = snapshot_dir(data_dir);
    std::fs::create_dir_all(&snapshot_dir).map_err(|e| storage_error("cannot create the snapshot directory", &e))?;
    // sled's lock on its `db` file, taken above, also keeps a second process
    // from opening this log.
    let (log_fs, segment_bytes) = io.log_disk();
    let threading = io.threading();
    let (wal, wal_writer) = Wal::open_threaded(&wal_dir(data_dir), log_fs, segment_bytes, threading)
        .map_err(|e| RaftError::Storage(e.to_string()))?;
    #[cfg(feature = "mutants")]
    wal.plant(planted);
    if threading.is_inline() {
        // The simulator: appends are synced a moment after they are
        // written, as by the writer thread, so that a crash can lose an
        // entry the node already sent.
        wal.defer_append_syncs();
    }
    durability::sync_created_files(data_dir, &sled_dir)
        .map_err(|e| storage_error("cannot fsync the new database files", &e))?;
    let (durability, closed) = Durability::start(db, &sled_dir, wal_writer, threading)
        .map_err(|e| storage_error("cannot start the fsync thread", &e))?;
    let shared = Arc::new(Shared {
        wal,
        meta,
        snapshot,
        snapshot_dir,
        durability,
        snapshot_write: tokio::sync::Mutex::new(()),
        snapshot_seq: AtomicU64::new(0),
        install_fence: Arc::default(),
        threading,
        #[cfg(feature = "sim")]
        sim_disk: io.slow_disk(),
        #[cfg(feature = "sim")]
        snapshot_counts: io.snapshot_counts(),
        #[cfg(feature = "mutants")]
        early_ack: planted.early_ack.then(Arc::default),
    });
    shared.tidy_snapshot_dir().map_err(|e| storage_error("cannot prepare the snapshot directory", &e))?;
    let state_machine = StateMachineStore::restore(shared.clone(), app)?;
    Ok(OpenedStorage { log_store: LogStore::new(shared), state_machine, closed })
}

impl Shared {
    /// Waits the simulated disk's latency, if it is slow (the feature
    /// `sim` only).
    #[cfg(feature = "sim")]
    async fn wait_for_disk(&self) {
        if let Some(disk) = &self.sim_disk {
            disk.wait_latency().await;
        }
    }

    /// Stops here for good when a simulated power cut is armed at `point`
    /// and this is its turn ([`crate::SimDisk::cut_power_at`]): the
    /// simulator then crashes the node. The feature `sim` only.
    #[cfg(feature = "sim")]
    async fn crash_point(&self, point: crate::io::CrashPoint) {
        if self.sim_disk.as_ref().is_some_and(|disk| disk.reached(point)) {
            std::future::pending::<()>().await;
        }
    }

    /// Opens the stored snapshot, if any: its meta and a handle to its file
    /// (`None`: the snapshot is a checkpoint in the application's own store).
    fn read_snapshot(&self) -> Result<Option<(SnapshotMeta, Option<SnapshotFile>)>, std::io::Error> {
        let read = |e: &dyn std::error::Error| std::io::Error::other(format!("cannot read the stored snapshot: {e}"));
        let Some(meta) = self.read_snapshot_meta()? else { return Ok(None) };
        let Some(name) = self.snapshot.get(SNAPSHOT_FILE_KEY).map_err(|e| read(&e))? else {
            return Ok(Some((meta, None)));
        };
        let path = self.snapshot_dir.join(String::from_utf8_lossy(&name).as_ref());
        let file = SnapshotFile::open(&path).map_err(|e| read(&e))?;
        Ok(Some((meta, Some(file))))
    }

    fn read_snapshot_meta(&self) -> Result<Option<SnapshotMeta>, std::io::Error> {
        let read = |e: &dyn std::error::Error| std::io::Error::other(format!("cannot read the stored snapshot: {e}"));
        match self.snapshot.get(SNAPSHOT_META_KEY).map_err(|e| read(&e))? {
            Some(bytes) => Ok(Some(decode(&bytes).map_err(|e| read(&*e))?)),
            None => Ok(None),
        }
    }

    /// On open: moves a snapshot stored in sled by an older version into a
    /// file, and removes every file of `raft-snapshot/` but the stored
    /// snapshot's (builds, seeds and replaced snapshots a crash left).
    fn tidy_snapshot_dir(&self) -> Result<(), Box<dyn std::error::Error>> {
        if let Some(data) = self.snapshot.get(SNAPSHOT_LEGACY_DATA_KEY)? {
            let name = "legacy.snap";
            let path = self.snapshot_dir.join(name);
            let mut file = snapshot_file::write_bytes(path, data.to_vec())?;
            file.adopt();
            snapshot_file::sync_dir(&self.snapshot_dir)?;
            let mut batch = sled::Batch::default();
            batch.insert(SNAPSHOT_FILE_KEY, name.as_bytes());
            batch.remove(SNAPSHOT_LEGACY_DATA_KEY);
            self.snapshot.apply_batch(batch)?;
            self.snapshot.flush()?;
        }
        let stored = self.snapshot.get(SNAPSHOT_FILE_KEY)?;
        for entry in std::fs::read_dir(&self.snapshot_dir)? {
            let entry = entry?;
            if stored.as_deref() != Some(entry.file_name().as_encoded_bytes()) {
                std::fs::remove_file(entry.path())?;
            }
        }
        Ok(())
    }
}

fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, bincode::Error> {
    bincode::serialize(value)
}

fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, bincode::Error> {
    bincode::deserialize(bytes)
}

/// What a restart would read of a simulated disk (the simulator's checks).
#[cfg(feature = "sim")]
impl crate::io::SimDisk {
    /// The vote saved on this disk by the node whose data directory is
    /// `data_dir`, if any (read as a restart would read it; call it while
    /// no node runs on the disk, after [`SimDisk::crash`](crate::io::SimDisk::crash)).
    /// An error is a vote file that does not check out, a sentence.
    pub fn saved_vote(&self, data_dir: &Path) -> Result<Option<crate::VoteMark>, String> {
        let dir = wal_dir(data_dir);
        wal::read_saved_vote(&*self.0, &dir)
            .map(|vote| vote.as_ref().map(crate::typ::vote_mark))
            .map_err(|error| error.to_string())
    }
}
