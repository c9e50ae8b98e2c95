//! The Raft log and vote (openraft's `RaftLogStorage`) over the WAL, and the
//! committed pointer in sled.

use std::fmt::Debug;
use std::io;
use std::ops::RangeBounds;
use std::sync::Arc;

use openraft::storage::{IOFlushed, LogState, RaftLogStorage};
use openraft::{OptionalSend, RaftLogReader};

use super::wal::{Done, WalError};
use super::{decode, encode, Shared, COMMITTED_KEY};
use crate::typ::{Entry, LogId, TypeConfig, Vote};

/// The log store. Clones share the log; openraft uses clones as log
/// readers for its replication tasks.
#[derive(Clone)]
pub(crate) struct LogStore {
    shared: Arc<Shared>,
}

impl LogStore {
    pub(super) fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }

    /// The fence the service announces received snapshots' installs on.
    pub(crate) fn install_fence(&self) -> Arc<super::InstallFence> {
        self.shared.install_fence.clone()
    }
}

// openraft 0.10's storage traits take plain `io::Error`s and add what was
// being done (reading logs, writing the vote, ...) themselves.
fn read_error(error: WalError) -> io::Error {
    io::Error::other(error)
}

fn write_error(error: WalError) -> io::Error {
    io::Error::other(error)
}

/// Completes a WAL operation on an async caller's oneshot.
fn reply_when_done() -> (Done, tokio::sync::oneshot::Receiver<Result<(), WalError>>) {
    let (reply, done) = tokio::sync::oneshot::channel();
    (
        Box::new(move |result| {
            // The caller may have given up; the operation is durable anyway.
            let _ = reply.send(result);
        }),
        done,
    )
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, io::Error> {
        let entries = self.shared.wal.entries(&range).map_err(read_error)?;
        #[cfg(feature = "mutants")]
        if let Some(early_ack) = &self.shared.early_ack {
            let mut merged: std::collections::BTreeMap<u64, Entry> =
                entries.into_iter().map(|entry| (entry.log_id.index, entry)).collect();
            for entry in early_ack.range(&range) {
                merged.insert(entry.log_id.index, entry);
            }
            return Ok(merged.into_values().collect());
        }
        Ok(entries)
    }

    /// The entries of `[start, end)`, or none if `start` itself is not in
    /// the log. openraft's replication builds an AppendEntries from
    /// `start` and sends whatever this returns as following `start - 1`:
    /// a result that began later, because the head of the range was purged
    /// (a replication task of a leadership that just ended, still reading
    /// while the node, now a follower, purged behind its new snapshot),
    /// would be sent as consecutive when it is not, and the receiver would
    /// take the wrong entries (a debug build asserts and panics). openraft
    /// 0.10's contract asks for a non-empty result, but its replication
    /// tolerates an empty one: it logs a warning, waits 10 ms (through the
    /// runtime's clock) and reads again.
    async fn limited_get_log_entries(&mut self, start: u64, end: u64) -> Result<Vec<Entry>, io::Error> {
        let entries = self.try_get_log_entries(start..end).await?;
        if entries.first().is_some_and(|entry| entry.log_id.index != start) {
            tracing::warn!(start, end, "the head of a replication range was purged meanwhile; sending nothing");
            return Ok(Vec::new());
        }
        Ok(entries)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, io::Error> {
        self.shared.wal.read_vote().map_err(io::Error::other)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, io::Error> {
        let (last_purged_log_id, last_log_id) = self.shared.wal.log_state();
        #[cfg(feature = "mutants")]
        let last_log_id = match self.shared.early_ack.as_ref().and_then(|early_ack| early_ack.last()) {
            Some(entry) if Some(entry.log_id) > last_log_id => Some(entry.log_id),
            _ => last_log_id,
        };
        Ok(LogState { last_purged_log_id, last_log_id })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), io::Error> {
        // Durability rule: a vote must be on stable storage before it is
        // acted on (granted or used to campaign), or a crash could let this
        // node vote twice in one term. The write blocks on two fsyncs.
        // It also waits for every log write queued before it (the WAL's
        // `save_vote` is a barrier): openraft 0.10 does not wait for appends
        // and takes a saved vote to mean they are durable too.
        let wal = self.shared.wal.clone();
        let vote = *vote;
        #[cfg(feature = "sim")]
        self.shared.wait_for_disk().await;
        self.shared
            .threading
            .run(move || wal.save_vote(&vote))
            .await
            .map_err(|e| io::Error::other(e.to_string()))?
            .map_err(io::Error::other)?;
        Ok(())
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), io::Error> {
        let bytes = encode(&committed).map_err(io::Error::other)?;
        crate::stats::stats().set_committed(committed.map_or(0, |log_id| log_id.index));
        // No fsync: the committed pointer only lets a restarted node re-apply
        // the committed suffix at once instead of waiting for the leader. If
        // it is lost, the node learns the commit index again from the leader.
        // It may survive a crash that the log entries it points at did not
        // (sled and the WAL are synced apart); `read_committed` clamps it.
        self.shared.meta.insert(COMMITTED_KEY, bytes).map_err(io::Error::other)?;
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, io::Error> {
        let committed: Option<Option<LogId>> = match self.shared.meta.get(COMMITTED_KEY) {
            Ok(Some(bytes)) => Some(decode(&bytes).map_err(io::Error::other)?),
            Ok(None) => None,
            Err(e) => return Err(io::Error::other(e)),
        };
        // The log recovers a prefix of what was appended (truncations are
        // durable before they return), so every entry it kept up to the saved
        // pointer is committed: the pointer is cut back to the last of them.
        let (_, last_log_id) = self.shared.wal.log_state();
        Ok(match (committed.flatten(), last_log_id) {
            (Some(committed), Some(last)) if committed.index > last.index => Some(last),
            (Some(_), None) => None,
            (committed, _) => committed,
        })
    }

    async fn append<I>(&mut self, entries: I, callback: IOFlushed<TypeConfig>) -> Result<(), io::Error>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        #[cfg(feature = "mutants")]
        if let Some(early_ack) = &self.shared.early_ack {
            // Planted bug: acknowledge at once, write later (see early_ack.rs).
            early_ack.append(self.shared.wal.clone(), entries.into_iter().collect(), self.shared.threading);
            callback.io_completed(Ok(()));
            return Ok(());
        }
        // Durability rule: openraft counts these entries towards a quorum (and
        // answers clients) once the callback fires, so it fires only after the
        // writer fdatasynced them. They are readable as soon as this returns,
        // as openraft requires. On an error the callback has fired with it.
        // When the log is idle this call writes and fdatasyncs the entries
        // itself (blocking this task's thread for one fdatasync), and the
        // callback has fired when it returns. openraft 0.10 does not await
        // the callback, so that fdatasync now delays its next command (see
        // the WAL's module doc); otherwise the entries queue for the writer.
        let done: Done = Box::new(move |result| callback.io_completed(result.map_err(io::Error::other)));
        // A slow simulated disk: the entries are written (and acknowledged)
        // only after its latency, in simulated time.
        #[cfg(feature = "sim")]
        self.shared.wait_for_disk().await;
        self.shared.wal.append(entries.into_iter().collect(), Some(done)).map_err(write_error)?;
        #[cfg(feature = "sim")]
        self.shared.crash_point(crate::io::CrashPoint::LogAppended).await;
        Ok(())
    }

    async fn truncate_after(&mut self, last_kept: Option<LogId>) -> Result<(), io::Error> {
        // openraft 0.10 names the last entry to keep (none: keep nothing);
        // the WAL removes from an index on.
        let from = last_kept.map_or(0, |log_id| log_id.index + 1);
        #[cfg(feature = "mutants")]
        if let Some(early_ack) = &self.shared.early_ack {
            early_ack.truncate(from);
        }
        // Conflicting entries are removed durably so a crash cannot bring
        // them back next to the entries that replace them. Truncation is rare
        // (only after a leader change), so the wait costs nothing overall.
        let (done, durable) = reply_when_done();
        #[cfg(feature = "sim")]
        self.shared.wait_for_disk().await;
        self.shared.wal.truncate(from, Some(done)).map_err(write_error)?;
        match durable.await {
            Ok(result) => result.map_err(write_error),
            Err(_) => Err(write_error(WalError::Stopped("the log writer exited during a truncation".into()))),
        }
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), io::Error> {
        #[cfg(feature = "mutants")]
        if let Some(early_ack) = &self.shared.early_ack {
            early_ack.purge(log_id.index);
        }
        // During an install, openraft 0.9 purged before the snapshot was
        // stored: that purge waits for it (`InstallFence`). openraft 0.10
        // purges only once a snapshot covers the purged entries, so the fence
        // should never defer; it stays until the crash suite confirms that.
        let stored = self.shared.read_snapshot_meta()?.and_then(|meta| meta.last_log_id);
        if self.shared.install_fence.defer(log_id, stored) {
            tracing::debug!(%log_id, "purge deferred until the snapshot being installed is stored");
            return Ok(());
        }
        // No wait: purged entries are already covered by a durable snapshot,
        // and if the purge marker is lost they are simply purged again. The
        // writer deletes the segments only once the marker is durable.
        self.shared.wal.purge(log_id).map_err(write_error)
    }
}
