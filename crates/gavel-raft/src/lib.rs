//! Gavel's Raft layer: replicates an opaque, deterministic application over a
//! cluster of nodes.
//!
//! The application plugs in through [`Application`]: it applies committed
//! commands (byte strings) and returns replies (byte strings), and it
//! writes its state at one point of the log as a [`SnapshotSource`] (while
//! later commands apply) and restores it from a reader. This crate knows
//! nothing about what the bytes mean.
//!
//! Key types: [`RaftNode`] (start, write, linearizable-read barrier,
//! membership, status, backup, shutdown), [`seed_from_snapshot`] (a new
//! node's data directory from a [`Backup`]'s bytes, see `backup`), [`NodeConfig`], [`RaftTimings`] and
//! [`PeerTls`] (mutual TLS towards peers),
//! [`RaftStatus`], [`stats`] (lock-free hot-path histograms the server's
//! metrics read at scrape time), and the errors [`RaftError`] and [`WriteError`]. The
//! node's peer-to-peer gRPC service ([`RaftNode::service`]) is mounted by the
//! server next to its public services.
//!
//! Inside, it is openraft 0.10 (`RaftNetworkV2`, snapshot data chosen by the
//! state machine) with
//! its own write-ahead log for the Raft log and vote (`storage/wal/`), the
//! snapshot as a file (`raft-snapshot/`, named in sled) or, for an
//! application that keeps its own state, as a durable checkpoint of the
//! application's store ([`Application::keeps_own_state`]), sled for the
//! committed pointer, and a tonic transport whose messages are bincode in
//! `bytes` fields (`proto/gavel/internal/raft.proto`). A snapshot is never
//! whole in memory: it is built into a file (or is the application's
//! store, written to a file from a point-in-time view when it is sent),
//! sent from it in chunks, spooled to a file on the receiver and decoded
//! from there (`SNAPSHOT_STREAM_BUFFER_BYTES`, `SNAPSHOT_CHUNK_BYTES`).
//!
//! **Dependency rule:** this crate must not depend on `gavel-core` or
//! `gavel-server`; they depend on it. No openraft type appears in its public
//! API: openraft is confined to the private modules `typ`, `storage`,
//! `network`, `service` and `node`, so the server never needs openraft.
//!
//! **Durability rules** (each enforced, and commented, where it happens):
//! - a log entry counts as appended (openraft's `IOFlushed` fires, exactly
//!   once) only after the WAL's writer fdatasynced the group holding it;
//! - a failed write or fdatasync stops the log for good (never retried);
//! - a vote is fsynced (its own file, replaced atomically) before `save_vote`
//!   returns, and only after every log write queued before it is durable
//!   (openraft 0.10 does not wait for appends and reads a saved vote as
//!   "every earlier write is durable");
//! - a snapshot (a file, or the application's checkpoint) is fsynced
//!   before openraft may purge the log behind it;
//! - the committed index is saved (without fsync) so a restarted node
//!   re-applies the committed suffix on its own.
//!
//! **Peer messages are bounded** ([`limits`]): an append-entries message over
//! `APPEND_ENTRIES_BYTES_MAX` is refused from its length prefix, and a
//! snapshot stream whose announced size is over `SNAPSHOT_BYTES_MAX` before
//! anything is created; snapshot chunks are spooled to disk as they arrive.
//! Who may send Raft messages at all is the server's decision (it admits
//! member node certificates only, using [`RaftNode::admits_peer`]).
//!
//! **IO comes in from outside** ([`io`]): [`RaftNode::start_with_io`] takes a
//! [`RaftIo`] (how peers are dialled, which disk the log is on, threads or
//! inline); production passes the default, the simulator (`gavel-sim`)
//! `RaftIo::simulated` with a `SimDisk`. openraft's runtime is ours
//! (`runtime.rs`) so that `seed_thread_rng` can seed election timeouts.
//!
//! **Features.** `sim`: the simulator's seams (`SimDisk`, `CrashPoint`,
//! `SnapshotCounts`, `RaftIo::simulated`, `seed_thread_rng`); `mutants`: the
//! planted bugs of the log (`PlantedLogBugs`, `storage/early_ack.rs`).
//! Neither is on in the product binary: without them this API has no
//! simulation type and no planted bug (crates/gavel-server/tests/dependencies.rs).
//!
//! Reads: call [`RaftNode::ensure_linearizable`] on the leader before reading
//! the application. Writes: openraft does not forward; a follower answers
//! [`WriteError::ForwardToLeader`] with the leader's id and address.

mod append_stream;
mod application;
mod backup;
mod batch;
mod config;
mod error;
pub mod io;
pub mod limits;
mod network;
mod node;
mod runtime;
mod service;
pub mod stats;
mod status;
mod storage;
mod typ;

/// Generated code of `proto/gavel/internal/raft.proto` (package
/// `gavel.internal.v1`): the peer-to-peer Raft service.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod pb {
    tonic::include_proto!("gavel.internal.v1");
}

pub use application::{Application, SnapshotSource};
pub use backup::{seed_from_snapshot, Backup, BackupError, BackupPosition};
#[cfg(feature = "mutants")]
pub use config::PlantedLogBugs;
pub use config::{NodeConfig, PeerTls, RaftTimings};
pub use error::{RaftError, WriteError};
#[cfg(feature = "sim")]
pub use io::{CrashPoint, SimDisk, SnapshotCounts};
pub use io::{Dial, RaftIo};
pub use node::{CatchUp, RaftNode};
pub use pb::raft_service_server::RaftServiceServer;
#[cfg(feature = "sim")]
pub use runtime::{seed_thread_rng, unseed_thread_rng};
pub use service::RaftGrpcService;
pub use status::{LeaderProgress, LeaderRoute, Member, RaftStatus, Role, VoteMark};

/// Measurement hooks for `examples/log_cost/fsync.rs`; not part of the API.
#[doc(hidden)]
pub mod bench {
    use std::path::Path;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use openraft::storage::RaftLogStorageExt;
    use openraft::{EntryPayload, LogId};

    use crate::typ::{Command, Entry, LeaderId};
    use crate::{Application, RaftError};

    struct NoApplication;

    impl Application for NoApplication {
        fn apply(&self, _: u64, _: &[u8]) -> Vec<u8> {
            Vec::new()
        }
        fn snapshot(&self) -> Vec<u8> {
            Vec::new()
        }
        fn restore(&self, _: &[u8]) -> Result<(), String> {
            Ok(())
        }
    }

    /// Appends `runs` entries of `entry_bytes` bytes, one at a time, to a new
    /// Raft log store in `dir`, and returns how long each took until the
    /// store reported it durable (the WAL's group fdatasync).
    pub async fn durable_append_latencies(
        dir: &Path,
        runs: u64,
        entry_bytes: usize,
    ) -> Result<Vec<Duration>, RaftError> {
        let opened = crate::storage::open(dir, Arc::new(NoApplication))?;
        let mut log_store = opened.log_store;
        let mut latencies = Vec::new();
        for index in 1..=runs {
            let entry = Entry {
                log_id: LogId::new(LeaderId { term: 1, node_id: 1 }, index),
                payload: EntryPayload::Normal(Command(vec![0x5a; entry_bytes])),
            };
            let start = Instant::now();
            log_store.blocking_append([entry]).await.map_err(|e| RaftError::Storage(e.to_string()))?;
            latencies.push(start.elapsed());
        }
        Ok(latencies)
    }
}
