//! The Raft log and vote in sled (openraft's `RaftLogStorage`).

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{AnyError, OptionalSend, RaftLogReader, StorageIOError};

use super::{decode, encode, index_key, Shared, COMMITTED_KEY, LAST_PURGED_KEY, VOTE_KEY};
use crate::typ::{Entry, LogId, StorageError, TypeConfig, Vote};

/// The log store. Clones share the database; openraft uses clones as log
/// readers for its replication tasks.
#[derive(Clone)]
pub(crate) struct LogStore {
    shared: Arc<Shared>,
}

impl LogStore {
    pub(super) fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }

    fn read_meta<T: serde::de::DeserializeOwned>(&self, key: &[u8]) -> Result<Option<T>, AnyError> {
        match self.shared.meta.get(key).map_err(AnyError::error)? {
            Some(bytes) => Ok(Some(decode(&bytes).map_err(AnyError::error)?)),
            None => Ok(None),
        }
    }

    fn last_purged(&self) -> Result<Option<LogId>, StorageError> {
        Ok(self.read_meta(LAST_PURGED_KEY).map_err(StorageIOError::read_logs)?)
    }

    /// Removes every entry in `range` in one atomic sled batch.
    fn remove_range(&self, range: (Bound<[u8; 8]>, Bound<[u8; 8]>)) -> Result<(), sled::Error> {
        let mut batch = sled::Batch::default();
        for key in self.shared.log.range(range).keys() {
            batch.remove(key?);
        }
        self.shared.log.apply_batch(batch)
    }
}

fn key_bounds<RB: RangeBounds<u64>>(range: &RB) -> (Bound<[u8; 8]>, Bound<[u8; 8]>) {
    let map = |bound: Bound<&u64>| match bound {
        Bound::Included(index) => Bound::Included(index_key(*index)),
        Bound::Excluded(index) => Bound::Excluded(index_key(*index)),
        Bound::Unbounded => Bound::Unbounded,
    };
    (map(range.start_bound()), map(range.end_bound()))
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        let mut entries = Vec::new();
        for item in self.shared.log.range(key_bounds(&range)) {
            let (_, bytes) = item.map_err(|e| StorageIOError::read_logs(AnyError::error(e)))?;
            let entry: Entry = decode(&bytes).map_err(|e| StorageIOError::read_logs(AnyError::error(e)))?;
            entries.push(entry);
        }
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
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let last_purged_log_id = self.last_purged()?;
        let last_entry = self.shared.log.last().map_err(|e| StorageIOError::read_logs(AnyError::error(e)))?;
        let last_log_id = match last_entry {
            Some((_, bytes)) => {
                let entry: Entry = decode(&bytes).map_err(|e| StorageIOError::read_logs(AnyError::error(e)))?;
                Some(entry.log_id)
            }
            None => last_purged_log_id,
        };
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

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), StorageError> {
        let bytes = encode(vote).map_err(|e| StorageIOError::write_vote(AnyError::error(e)))?;
        self.shared.meta.insert(VOTE_KEY, bytes).map_err(|e| StorageIOError::write_vote(AnyError::error(e)))?;
        // Durability rule: a vote must be on stable storage before it is
        // acted on (granted or used to campaign), or a crash could let this
        // node vote twice in one term.
        self.shared.durability.wait_durable().await.map_err(|e| StorageIOError::write_vote(AnyError::error(e)))?;
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError> {
        Ok(self.read_meta(VOTE_KEY).map_err(StorageIOError::read_vote)?)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        let bytes = encode(&committed).map_err(|e| StorageIOError::write(AnyError::error(e)))?;
        // No fsync: the committed pointer only lets a restarted node re-apply
        // the committed suffix at once instead of waiting for the leader. If
        // it is lost, the node learns the commit index again from the leader.
        // sled recovers a prefix of its writes, so a pointer that survives a
        // crash never refers past entries that were appended before it.
        self.shared.meta.insert(COMMITTED_KEY, bytes).map_err(|e| StorageIOError::write(AnyError::error(e)))?;
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        let committed: Option<Option<LogId>> = self.read_meta(COMMITTED_KEY).map_err(StorageIOError::read)?;
        Ok(committed.flatten())
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        #[cfg(feature = "mutants")]
        if let Some(early_ack) = &self.shared.early_ack {
            // Planted bug: acknowledge at once, write later (see early_ack.rs).
            early_ack.append(self.shared.log.clone(), entries.into_iter().collect());
            callback.log_io_completed(Ok(()));
            return Ok(());
        }
        let mut batch = sled::Batch::default();
        for entry in entries {
            match encode(&entry) {
                Ok(bytes) => batch.insert(&index_key(entry.log_id.index), bytes),
                Err(e) => {
                    // The callback fires exactly once on every path.
                    callback.log_io_completed(Err(std::io::Error::other(e.to_string())));
                    return Err(StorageIOError::write_logs(AnyError::error(e)).into());
                }
            }
        }
        // One atomic batch: the entries are readable as soon as this returns,
        // as openraft requires.
        if let Err(e) = self.shared.log.apply_batch(batch) {
            callback.log_io_completed(Err(std::io::Error::other(e.to_string())));
            return Err(StorageIOError::write_logs(AnyError::error(e)).into());
        }
        // Durability rule: openraft counts these entries towards a quorum (and
        // answers clients) once the callback fires, so it fires only after the
        // fsync thread made them durable.
        self.shared.durability.complete_when_durable(callback);
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        #[cfg(feature = "mutants")]
        if let Some(early_ack) = &self.shared.early_ack {
            early_ack.truncate(log_id.index);
        }
        self.remove_range((Bound::Included(index_key(log_id.index)), Bound::Unbounded))
            .map_err(|e| StorageIOError::write_logs(AnyError::error(e)))?;
        // Conflicting entries are removed durably so a crash cannot bring
        // them back next to the entries that replace them. Truncation is rare
        // (only after a leader change), so the fsync costs nothing overall.
        self.shared.durability.wait_durable().await.map_err(|e| StorageIOError::write_logs(AnyError::error(e)))?;
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        #[cfg(feature = "mutants")]
        if let Some(early_ack) = &self.shared.early_ack {
            early_ack.purge(log_id.index);
        }
        // Record the purge point before deleting, so the log never looks like
        // it has a hole. No fsync: purged entries are already covered by a
        // durable snapshot, and if the deletion is lost they are simply
        // purged again.
        let bytes = encode(&log_id).map_err(|e| StorageIOError::write_logs(AnyError::error(e)))?;
        self.shared.meta.insert(LAST_PURGED_KEY, bytes).map_err(|e| StorageIOError::write_logs(AnyError::error(e)))?;
        self.remove_range((Bound::Unbounded, Bound::Included(index_key(log_id.index))))
            .map_err(|e| StorageIOError::write_logs(AnyError::error(e)))?;
        Ok(())
    }
}
