//! The IO a node is given from outside: how it dials its peers, which disk
//! its log is on, and whether blocking work runs on threads or inline.
//!
//! Production uses [`RaftIo::default`]: real TCP (tonic's own connector),
//! the real file system, a log writer thread, an fsync thread and tokio's
//! blocking pool. The simulator (`gavel-sim`) uses `RaftIo::simulated`:
//! its own connector (turmoil's TCP), a `SimDisk` for the log and the
//! vote, and every blocking step inline on the caller's thread. Inline is
//! what keeps a simulation deterministic: a write completed by another OS
//! thread would wake the simulated node at a moment the OS chose, and the
//! same seed would not replay the same run.
//!
//! What stays real in the simulator: sled (the committed pointer and the
//! snapshot's meta, in the node's data directory on disk; its reads and
//! writes answer synchronously, so its own threads do not reorder what the
//! node sees) and snapshot files.
//!
//! The simulator's side (`RaftIo::simulated`, `SimDisk`, `CrashPoint`,
//! `SnapshotCounts`) compiles only with the cargo feature `sim`, which
//! gavel-sim turns on and the product binary never does: without it a node
//! can only be given the production IO.

use std::sync::Arc;

use tonic::transport::{Channel, Endpoint};

use crate::limits::WAL_SEGMENT_BYTES;
#[cfg(feature = "sim")]
use crate::storage::wal::SimFs;
use crate::storage::wal::{FileSystem, RealFs, Threading};

/// Makes the channel to a peer from its endpoint (address, timeouts and
/// keep-alive already set): production connects lazily over TCP, the
/// simulator over its own network.
pub type Dial = Arc<dyn Fn(Endpoint) -> Channel + Send + Sync>;

/// The segment size of a simulated log: small, so a simulated run rotates
/// segments (and a crash can tear one) without holding megabytes of zeros
/// per node in memory.
#[cfg(feature = "sim")]
const SIM_WAL_SEGMENT_BYTES: u64 = 256 * 1024;

/// The IO one node runs on. Cheap to clone.
#[derive(Clone, Default)]
pub struct RaftIo {
    #[cfg(feature = "sim")]
    dial: Option<Dial>,
    #[cfg(feature = "sim")]
    disk: Option<SimDisk>,
    #[cfg(feature = "sim")]
    snapshots: Option<SnapshotCounts>,
}

#[cfg(feature = "sim")]
impl RaftIo {
    /// Simulated IO: peers dialled through `dial`, the log on `disk`, and
    /// every write, fsync and blocking step done inline by its caller.
    pub fn simulated(dial: Dial, disk: SimDisk) -> RaftIo {
        RaftIo { dial: Some(dial), disk: Some(disk), snapshots: None }
    }

    /// The same IO, counting the snapshots the node builds and installs
    /// into `counts` (which outlives the node: a simulator keeps one per
    /// node across its restarts).
    pub fn counting_snapshots(self, counts: SnapshotCounts) -> RaftIo {
        RaftIo { snapshots: Some(counts), ..self }
    }

    /// Where this node counts its snapshots, if anywhere.
    pub(crate) fn snapshot_counts(&self) -> Option<SnapshotCounts> {
        self.snapshots.clone()
    }

    /// The simulated disk whose latency the log store waits for, if any.
    pub(crate) fn slow_disk(&self) -> Option<SimDisk> {
        self.disk.clone()
    }
}

impl RaftIo {
    /// The channel to a peer at `endpoint`.
    pub(crate) fn channel(&self, endpoint: Endpoint) -> Channel {
        #[cfg(feature = "sim")]
        if let Some(dial) = &self.dial {
            return dial(endpoint);
        }
        endpoint.connect_lazy()
    }

    /// The file system of the log and the vote, and its segment size.
    pub(crate) fn log_disk(&self) -> (Arc<dyn FileSystem>, u64) {
        #[cfg(feature = "sim")]
        if let Some(disk) = &self.disk {
            return (disk.0.clone(), SIM_WAL_SEGMENT_BYTES);
        }
        (Arc::new(RealFs), WAL_SEGMENT_BYTES)
    }

    /// Whether blocking work runs inline on its caller's thread (simulated
    /// IO): then the application should start no thread of its own either.
    pub fn blocking_inline(&self) -> bool {
        self.threading().is_inline()
    }

    /// Who runs blocking work and the log's writes.
    pub(crate) fn threading(&self) -> Threading {
        #[cfg(feature = "sim")]
        if self.disk.is_some() {
            return Threading::Inline;
        }
        Threading::Writer
    }
}

/// A simulated disk for one node's Raft log and vote, kept by the simulator
/// across the node's crashes and restarts. It knows which bytes were
/// synced: [`SimDisk::crash`] loses the rest, but for a torn prefix.
#[cfg(feature = "sim")]
#[derive(Clone, Default)]
pub struct SimDisk(pub(crate) Arc<SimFs>);

#[cfg(feature = "sim")]
impl SimDisk {
    /// Waits the latency [`SimDisk::set_latency`] set, in the runtime's time.
    pub(crate) async fn wait_latency(&self) {
        let latency = self.0.latency();
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
    }

    /// An empty disk.
    pub fn new() -> SimDisk {
        SimDisk::default()
    }

    /// A power cut: every file loses the writes made since its last sync,
    /// except that one file, chosen by `torn`, keeps a prefix of them that
    /// may end inside a write (a torn tail). Call it while no node runs on
    /// the disk. Returns how many unsynced writes were dropped, whole or in
    /// part.
    pub fn crash(&self, torn: u64) -> usize {
        self.0.crash(torn)
    }

    /// Arms a power cut after `operations` more writes, syncs, creations,
    /// renames or removals: from then on each of them fails (the node's log
    /// stops, and openraft stops the node) until [`SimDisk::crash`]. This is
    /// how a crash lands inside a write that was never synced.
    pub fn cut_power_after(&self, operations: u64) {
        self.0.cut_power_after(operations);
    }

    /// Arms a power cut at the `nth` time (0: the next) the state machine
    /// reaches `point` of its apply, checkpoint and snapshot sequence: the
    /// power is cut there, the state machine stops at that point, and the
    /// simulator crashes the node as it finds the power cut. This is how a
    /// kill lands between two steps of that sequence.
    pub fn cut_power_at(&self, point: CrashPoint, nth: u64) {
        self.0.cut_power_at(point, nth);
    }

    /// Whether reaching `point` cuts the power now (see [`SimDisk::cut_power_at`]).
    pub(crate) fn reached(&self, point: CrashPoint) -> bool {
        self.0.reached(point)
    }

    /// Disarms a power cut that has not happened yet (a simulation that
    /// heals every fault before it ends).
    pub fn disarm_power_cut(&self) {
        self.0.disarm_power_cut();
    }

    /// Whether an armed power cut has happened.
    pub fn power_is_cut(&self) -> bool {
        self.0.power_is_cut()
    }

    /// Fills the disk (`true`): every log write, segment creation and vote
    /// write fails with `std::io::ErrorKind::StorageFull` and changes
    /// nothing (openraft stops the node on the error) until the disk is
    /// emptied (`false`).
    pub fn set_full(&self, full: bool) {
        self.0.set_full(full);
    }

    /// How many writes the full disk refused since the last call.
    pub fn take_refused_full(&self) -> u64 {
        self.0.take_refused_full()
    }

    /// Makes the disk slow: each log append, truncation and vote write
    /// first waits `latency` of the runtime's (simulated) time;
    /// [`Duration::ZERO`](std::time::Duration::ZERO) makes it fast again.
    pub fn set_latency(&self, latency: std::time::Duration) {
        self.0.set_latency(latency);
    }

    /// How many writes a crash now would lose.
    pub fn unsynced_writes(&self) -> usize {
        self.0.unsynced_writes()
    }
}

/// A point of the state machine's apply, checkpoint and snapshot sequence
/// where a simulated power cut can land ([`SimDisk::cut_power_at`]).
#[cfg(feature = "sim")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashPoint {
    /// Entries were appended to the log (written, not yet synced): the
    /// power goes at the log's next disk operation, so the entries are
    /// lost while openraft may already have sent them to its followers.
    LogAppended,
    /// An entry was applied, before its reply is sent.
    Applied,
    /// The application wrote its changes into its own store without a
    /// checkpoint (not durable).
    ChangesWritten,
    /// A snapshot build's durable checkpoint was written, and its meta not
    /// stored yet.
    CheckpointWritten,
    /// A built snapshot's meta was stored, before openraft learns of it.
    SnapshotStored,
    /// A received snapshot's file was stored, before it is restored.
    InstallStored,
    /// A received snapshot was restored into the application.
    InstallRestored,
}

#[cfg(feature = "sim")]
impl CrashPoint {
    /// Every point, in the order of the sequence.
    pub const ALL: [CrashPoint; 7] = [
        CrashPoint::LogAppended,
        CrashPoint::Applied,
        CrashPoint::ChangesWritten,
        CrashPoint::CheckpointWritten,
        CrashPoint::SnapshotStored,
        CrashPoint::InstallStored,
        CrashPoint::InstallRestored,
    ];
}

/// How many snapshots a node stored: built from its own state, and
/// installed from a leader's. Cheap to clone (the clones share the counts).
#[cfg(feature = "sim")]
#[derive(Clone, Default, Debug)]
pub struct SnapshotCounts(Arc<[std::sync::atomic::AtomicU64; 2]>);

#[cfg(feature = "sim")]
impl SnapshotCounts {
    /// Snapshots built and stored (a build skipped for a newer stored
    /// snapshot is not counted).
    pub fn built(&self) -> u64 {
        self.0[0].load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Snapshots received from a leader and installed.
    pub fn installed(&self) -> u64 {
        self.0[1].load(std::sync::atomic::Ordering::Relaxed)
    }

    pub(crate) fn count_built(&self) {
        self.0[0].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    pub(crate) fn count_installed(&self) {
        self.0[1].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Why blocking work did not finish.
#[derive(Debug, thiserror::Error)]
#[error("blocking work failed: {0}")]
pub(crate) struct BlockingFailed(String);

impl Threading {
    /// Runs `work` on tokio's blocking pool, or inline.
    pub(crate) async fn run<T, F>(self, work: F) -> Result<T, BlockingFailed>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        match self {
            Threading::Writer => tokio::task::spawn_blocking(work).await.map_err(|e| BlockingFailed(e.to_string())),
            #[cfg(feature = "sim")]
            Threading::Inline => Ok(work()),
        }
    }
}
