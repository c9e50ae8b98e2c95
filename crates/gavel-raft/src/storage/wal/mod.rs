//! Gavel's Raft log: an append-only, segmented write-ahead log with one
//! writer thread (after etcd's `wal` and TiKV's `raft-engine`).
//!
//! # On disk
//!
//! `<data_dir>/raft-log/` holds numbered segment files `<seq:016x>.wal` and
//! the vote file `vote` (see [`vote`]). A segment is [`crate::limits::WAL_SEGMENT_BYTES`]
//! of zeros, written before use (the next one is prepared as
//! `<seq:016x>.wal.tmp` off the writer thread and renamed into place), and
//! holds framed records ([`record`]): a segment
//! header first, then entries, truncate markers and purge markers in the
//! order they were written. When the next record does not fit, the writer
//! fdatasyncs the segment and starts the next one, so every segment but the
//! last is complete and durable. A record larger than a segment gets a
//! segment of its own, which grows past the zero-filled size.
//!
//! Nothing is rewritten: a truncation appends a marker that removes the
//! entries at and after an index; a purge appends a marker with the purged
//! log id, and once it is durable the writer deletes the segments whose live
//! entries are all purged. Opening the log replays every segment in order to
//! rebuild the in-memory index (log index → segment and offset).
//!
//! # Durability
//!
//! Callers hand records to the writer thread through a channel; it takes
//! everything queued, writes it with one `pwrite` per segment, fdatasyncs
//! once, and only then completes the callers, in order (group commit). An
//! append is never written by its caller, even when the writer is idle:
//! openraft 0.10 does not wait for an append, so the leader sends an entry
//! to its followers while the writer fdatasyncs it (Raft thesis §10.2.1);
//! writing it on openraft's core task instead held that task for one
//! fdatasync and measured 9% slower at one client (docs/performance.md,
//! "openraft 0.10 against 0.9").
//! A vote is saved only after every operation queued before it is durable
//! ([`Wal::save_vote`]). An
//! appended entry is readable at once (from memory until it is written).
//! The first failed write or fdatasync stops the log for good: every later
//! write fails, and the caller (openraft) stops the node. It is not retried,
//! because after a failed fsync the kernel may have dropped the dirty pages
//! and a retry that succeeds would acknowledge data that is not there.
//!
//! # Recovery
//!
//! A record that is cut short or fails a checksum at the end of the last
//! segment, with nothing valid after it, is a torn write that was never
//! acknowledged: it is dropped and zeroed. Damage followed by any valid
//! record, or damage in an earlier segment, is in data that was durable, and
//! [`Wal::open_threaded`] refuses with [`WalError::Corrupt`] instead of guessing.

// Nothing here knows openraft's `StorageError`: log_store.rs converts.
mod file;
mod record;
mod recovery;
#[cfg(feature = "sim")]
mod sim_fs;
mod vote;
mod writer;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, VecDeque};
use std::ops::{Bound, RangeBounds};
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Mutex, MutexGuard};

pub(crate) use file::{FileSystem, RealFs, WalFile};
#[cfg(feature = "sim")]
pub(crate) use sim_fs::SimFs;

use crate::typ::{Entry, LogId, Vote};
use writer::{Op, PendingRecord};

/// Why the log failed.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub(crate) enum WalError {
    /// A file operation failed. When it was a write or an fsync, the log has
    /// stopped (see [`WalError::Stopped`]).
    #[error("{context}: {message}")]
    Io {
        /// What the log was doing.
        context: &'static str,
        /// The operating system's error.
        message: String,
    },
    /// Records that were durable are damaged; the log refuses to open rather
    /// than drop them.
    #[error(
        "the raft log is corrupt in {file} at byte {offset}: {detail}; refusing to start (restore this node's \
         data directory from a replica, or remove it to rejoin as a new member)"
    )]
    Corrupt {
        /// The damaged file.
        file: String,
        /// Where in it.
        offset: u64,
        /// What is wrong.
        detail: String,
    },
    /// An earlier write or fsync failed, so this log accepts no more writes.
    #[error("the raft log stopped after a failed write: {0}")]
    Stopped(String),
    /// An append did not continue the log (a caller's bug).
    #[error("an append at index {got} does not continue the log (expected {expected})")]
    OutOfOrder {
        /// The index the log expected next.
        expected: u64,
        /// The first index of the append.
        got: u64,
    },
    /// An entry or the vote could not be encoded, or a record is larger than
    /// the 4 GiB a record header can describe.
    #[error("cannot encode a log record: {0}")]
    Codec(String),
}

impl WalError {
    fn io(context: &'static str, error: &std::io::Error) -> WalError {
        WalError::Io { context, message: error.to_string() }
    }
}

/// Called once when an operation is durable, or with the error that stopped it.
pub(crate) type Done = Box<dyn FnOnce(Result<(), WalError>) + Send>;

/// Where one live entry is.
#[derive(Clone)]
enum Place {
    /// Queued for the writer: the encoded entry, and the record number that
    /// tells the writer whether this slot still holds it once written.
    Pending { record: u64, bytes: Arc<Vec<u8>> },
    /// Written: the payload's segment, offset and length.
    Written { segment: u64, offset: u64, length: u32 },
}

#[derive(Clone)]
struct Slot {
    log_id: LogId,
    place: Place,
}

/// The in-memory index of the log, shared by the callers and the writer.
#[derive(Default)]
struct Index {
    /// Live entries in index order, from `slots[0]` at `first_index`.
    slots: VecDeque<Slot>,
    first_index: u64,
    last_purged: Option<LogId>,
    /// Open segment files by number, for reads (the writer adds and removes).
    segments: BTreeMap<u64, Arc<dyn WalFile>>,
    /// The first fatal error; set once, never cleared.
    stopped: Option<String>,
    next_record: u64,
    /// Operations sent to the writer thread and not yet completed. While
    /// there are any, an append queues behind them (order is the index's).
    queued_ops: usize,
}

impl Index {
    fn last_index(&self) -> Option<u64> {
        (!self.slots.is_empty()).then(|| self.first_index + self.slots.len() as u64 - 1)
    }

    fn last_log_id(&self) -> Option<LogId> {
        self.slots.back().map(|slot| slot.log_id).or(self.last_purged)
    }

    /// Whether an entry at `index` may be added next.
    fn check_continues(&self, index: u64) -> Result<(), WalError> {
        let expected = match (self.last_index(), self.last_purged) {
            (Some(last), _) => last + 1,
            (None, Some(purged)) => purged.index + 1,
            (None, None) => return Ok(()),
        };
        if index == expected {
            Ok(())
        } else {
            Err(WalError::OutOfOrder { expected, got: index })
        }
    }

    /// The log id of the live entry at `index`, if there is one.
    fn log_id_at(&self, index: u64) -> Option<LogId> {
        let position = index.checked_sub(self.first_index)?;
        self.slots.get(usize::try_from(position).ok()?).map(|slot| slot.log_id)
    }

    /// Which of `log_ids` (consecutive) an append must add, and whether it
    /// first truncates a conflicting suffix at the first of them. Entries
    /// already purged or already present with the same log id are skipped;
    /// the first one that differs from the entry at its index replaces it and
    /// everything after it (Raft's append rule).
    fn plan_append(&self, log_ids: &[LogId]) -> Result<(usize, Option<u64>), WalError> {
        for pair in log_ids.windows(2) {
            if pair[1].index != pair[0].index + 1 {
                return Err(WalError::OutOfOrder { expected: pair[0].index + 1, got: pair[1].index });
            }
        }
        let purged_up_to = self.last_purged.map(|purged| purged.index);
        let skip = log_ids
            .iter()
            .take_while(|log_id| {
                purged_up_to.is_some_and(|purged| log_id.index <= purged)
                    || self.log_id_at(log_id.index) == Some(**log_id)
            })
            .count();
        let Some(first) = log_ids.get(skip) else { return Ok((skip, None)) };
        if self.log_id_at(first.index).is_some() {
            return Ok((skip, Some(first.index)));
        }
        self.check_continues(first.index)?;
        Ok((skip, None))
    }

    fn push(&mut self, log_id: LogId, place: Place) {
        if self.slots.is_empty() {
            self.first_index = log_id.index;
        }
        self.slots.push_back(Slot { log_id, place });
    }

    /// Drops the entries at and after `index`.
    fn truncate(&mut self, index: u64) {
        let keep = index.saturating_sub(self.first_index).min(self.slots.len() as u64);
        self.slots.truncate(keep as usize);
    }

    /// Drops the entries up to and including `log_id` and records it.
    fn purge(&mut self, log_id: LogId) {
        let drop = (log_id.index + 1).saturating_sub(self.first_index).min(self.slots.len() as u64);
        self.slots.drain(..drop as usize);
        self.first_index = self.first_index.max(log_id.index + 1);
        if self.last_purged < Some(log_id) {
            self.last_purged = Some(log_id);
        }
    }
}

struct WalShared {
    dir: PathBuf,
    fs: Arc<dyn FileSystem>,
    index: Mutex<Index>,
    /// Serializes vote writes (they share one temporary file).
    vote: Mutex<()>,
    /// The log's planted bugs, set once after opening ([`Wal::plant`]).
    #[cfg(feature = "mutants")]
    planted: std::sync::OnceLock<crate::config::PlantedLogBugs>,
}

impl WalShared {
    /// The log's planted bugs (none until [`Wal::plant`]).
    #[cfg(feature = "mutants")]
    fn planted(&self) -> crate::config::PlantedLogBugs {
        self.planted.get().copied().unwrap_or_default()
    }

    fn lock(&self) -> MutexGuard<'_, Index> {
        // A panic while holding the lock leaves the index as it was between
        // two operations: every mutation is a few infallible steps.
        self.index.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn segment_path(&self, segment: u64) -> PathBuf {
        self.dir.join(segment_file_name(segment))
    }
}

fn segment_file_name(segment: u64) -> String {
    format!("{segment:016x}.wal")
}

fn parse_segment_file_name(name: &str) -> Option<u64> {
    let hex = name.strip_suffix(".wal")?;
    (hex.len() == 16).then(|| u64::from_str_radix(hex, 16).ok()).flatten()
}

/// The write-ahead log. Clones share it; the writer thread exits when the
/// last clone is dropped.
#[derive(Clone)]
pub(crate) struct Wal {
    shared: Arc<WalShared>,
    /// To the writer thread; `None` when the log writes inline (the
    /// simulator's `Threading::Inline`).
    ops: Option<mpsc::Sender<Op>>,
    /// The one writer: the writer thread's, or the caller's inline (the
    /// simulator's `Threading::Inline`).
    writer: Arc<Mutex<writer::Writer>>,
}

/// Joined to learn that the writer thread has exited and closed its files
/// (nothing to wait for when the log writes inline).
pub(crate) struct WriterThread(Option<std::thread::JoinHandle<()>>);

impl WriterThread {
    /// Waits for the writer thread to exit.
    pub(crate) fn join(self) -> std::thread::Result<()> {
        self.0.map_or(Ok(()), std::thread::JoinHandle::join)
    }
}

/// How long after an inline append its deferred fdatasync runs
/// ([`Wal::defer_append_syncs`]): an fdatasync of a loaded disk, longer
/// than a message takes to a peer, so a leader's followers hold entries it
/// has not synced yet, as on real machines.
const DEFERRED_SYNC: std::time::Duration = std::time::Duration::from_millis(10);

/// Who writes the log: a writer thread (production), or the caller itself,
/// inline, so that a simulation on one thread stays deterministic: no write
/// completes at a moment the OS scheduler chose.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Threading {
    /// A writer thread groups what is queued while it writes (group commit).
    #[default]
    Writer,
    /// Every operation is written and synced by its caller before it returns
    /// (the simulator's IO only, cargo feature `sim`).
    #[cfg(feature = "sim")]
    Inline,
}

impl Threading {
    /// Whether operations run inline on their caller's thread (never
    /// without the feature `sim`).
    pub(crate) fn is_inline(self) -> bool {
        match self {
            Threading::Writer => false,
            #[cfg(feature = "sim")]
            Threading::Inline => true,
        }
    }
}

impl Wal {
    /// Opens the log through `fs`, with segments of `segment_bytes`, and a
    /// writer thread.
    #[cfg(test)]
    pub(crate) fn open_with(
        dir: &Path,
        fs: Arc<dyn FileSystem>,
        segment_bytes: u64,
    ) -> Result<(Wal, WriterThread), WalError> {
        Self::open_threaded(dir, fs, segment_bytes, Threading::Writer)
    }

    /// Opens (or creates) the log in `dir` through `fs`, with segments of
    /// `segment_bytes`, written as `threading` says. Blocking: replays every
    /// segment.
    pub(crate) fn open_threaded(
        dir: &Path,
        fs: Arc<dyn FileSystem>,
        segment_bytes: u64,
        threading: Threading,
    ) -> Result<(Wal, WriterThread), WalError> {
        let recovered = recovery::recover(&*fs, dir, segment_bytes)?;
        let shared = Arc::new(WalShared {
            dir: dir.to_path_buf(),
            fs,
            index: Mutex::new(recovered.index),
            vote: Mutex::new(()),
            #[cfg(feature = "mutants")]
            planted: std::sync::OnceLock::new(),
        });
        let inline = threading.is_inline();
        let writer = Arc::new(Mutex::new(writer::Writer::new(shared.clone(), recovered.tail, segment_bytes, inline)));
        if inline {
            return Ok((Wal { shared, ops: None, writer }, WriterThread(None)));
        }
        let (ops, receiver) = mpsc::channel();
        let thread_writer = writer.clone();
        let thread = std::thread::Builder::new()
            .name("gavel-raft-wal".into())
            .spawn(move || writer::run(&thread_writer, receiver))
            .map_err(|e| WalError::io("cannot start the log writer thread", &e))?;
        Ok((Wal { shared, ops: Some(ops), writer }, WriterThread(Some(thread))))
    }

    /// Appends `entries` (consecutive, continuing the log or replacing a
    /// conflicting suffix, see `Index::plan_append`). They are readable
    /// when this returns; `done` fires once they are durable. On an error,
    /// `done` has fired with it too.
    ///
    /// The entries always queue for the writer thread, which writes them
    /// with whatever else is queued: openraft 0.10 goes on while they are
    /// written, so the leader replicates an entry while its own fdatasync
    /// runs (see the module doc).
    pub(crate) fn append(&self, entries: Vec<Entry>, done: Option<Done>) -> Result<(), WalError> {
        let fail = |error: WalError, done: Option<Done>| {
            if let Some(done) = done {
                done(Err(error.clone()));
            }
            Err(error)
        };
        let mut encoded = Vec::with_capacity(entries.len());
        for entry in &entries {
            match bincode::serialize(entry) {
                Ok(bytes) if u32::try_from(bytes.len()).is_ok() => encoded.push((entry.log_id, Arc::new(bytes))),
                Ok(bytes) => return fail(WalError::Codec(format!("an entry of {} bytes", bytes.len())), done),
                Err(e) => return fail(WalError::Codec(e.to_string()), done),
            }
        }
        let mut index = self.shared.lock();
        if let Some(stopped) = &index.stopped {
            let error = WalError::Stopped(stopped.clone());
            drop(index);
            return fail(error, done);
        }
        let log_ids: Vec<LogId> = encoded.iter().map(|(log_id, _)| *log_id).collect();
        let (skip, truncate_from) = match index.plan_append(&log_ids) {
            Ok(plan) => plan,
            Err(error) => {
                drop(index);
                return fail(error, done);
            }
        };
        if let Some(from) = truncate_from {
            index.truncate(from);
        }
        let mut records = Vec::with_capacity(encoded.len() - skip);
        for (log_id, bytes) in encoded.into_iter().skip(skip) {
            let record = index.next_record;
            index.next_record += 1;
            index.push(log_id, Place::Pending { record, bytes: bytes.clone() });
            records.push(PendingRecord { record, index: log_id.index, bytes });
        }
        let op = Op::Append { truncate_from, records, done };
        // Sent under the lock, so the writer sees operations in the order
        // the index changed.
        self.send(op, index)
    }

    /// Writes appends at once and syncs them [`DEFERRED_SYNC`] later
    /// (inline only: the simulator's model of the writer thread, whose
    /// fdatasync runs while openraft replicates what it wrote).
    pub(crate) fn defer_append_syncs(&self) {
        if self.ops.is_none() {
            self.writer.lock().unwrap_or_else(std::sync::PoisonError::into_inner).defer_appends();
        }
    }

    /// Removes the entries at and after `index`; `done` fires once the
    /// truncation is durable.
    pub(crate) fn truncate(&self, index_from: u64, done: Option<Done>) -> Result<(), WalError> {
        let mut index = self.shared.lock();
        index.truncate(index_from);
        self.send(Op::Truncate { index: index_from, done }, index)
    }

    /// Removes the entries up to and including `log_id`. The writer records
    /// the purge point and then deletes the segments it made obsolete.
    pub(crate) fn purge(&self, log_id: LogId) -> Result<(), WalError> {
        let mut index = self.shared.lock();
        index.purge(log_id);
        self.send(Op::Purge { log_id }, index)
    }

    /// Hands `op` to the writer thread while `index` is still locked, or,
    /// inline, writes it here once the lock is released (the writer takes it).
    fn send(&self, op: Op, mut index: MutexGuard<'_, Index>) -> Result<(), WalError> {
        let stopped = index.stopped.clone();
        let Some(ops) = &self.ops else {
            drop(index);
            if let Some(reason) = stopped {
                op.complete(Err(WalError::Stopped(reason.clone())));
                return Err(WalError::Stopped(reason));
            }
            let mut writer = self.writer.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            writer.serve(vec![op]);
            if writer.has_deferred() {
                // The fdatasync ends a little later, as the writer
                // thread's would: openraft goes on meanwhile.
                let writer = self.writer.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(DEFERRED_SYNC).await;
                    writer.lock().unwrap_or_else(std::sync::PoisonError::into_inner).sync_deferred();
                });
            }
            drop(writer);
            return match self.shared.lock().stopped.clone() {
                Some(reason) => Err(WalError::Stopped(reason)),
                None => Ok(()),
            };
        };
        match stopped {
            Some(reason) => {
                op.complete(Err(WalError::Stopped(reason.clone())));
                Err(WalError::Stopped(reason))
            }
            None => match ops.send(op) {
                Ok(()) => {
                    index.queued_ops += 1;
                    Ok(())
                }
                Err(mpsc::SendError(op)) => {
                    let error = WalError::Stopped("the log writer thread has exited".into());
                    op.complete(Err(error.clone()));
                    Err(error)
                }
            },
        }
    }

    /// The last purged log id and the last log id (which is the last purged
    /// one when the log holds no entries).
    pub(crate) fn log_state(&self) -> (Option<LogId>, Option<LogId>) {
        let index = self.shared.lock();
        (index.last_purged, index.last_log_id())
    }

    /// The live entries in `range`.
    pub(crate) fn entries<RB: RangeBounds<u64>>(&self, range: &RB) -> Result<Vec<Entry>, WalError> {
        let places: Vec<(Place, Option<Arc<dyn WalFile>>)> = {
            let index = self.shared.lock();
            let Some(last) = index.last_index() else { return Ok(Vec::new()) };
            let start = match range.start_bound() {
                Bound::Included(start) => *start,
                Bound::Excluded(start) => start.saturating_add(1),
                Bound::Unbounded => 0,
            }
            .max(index.first_index);
            let end = match range.end_bound() {
                Bound::Included(end) => *end,
                Bound::Excluded(0) => return Ok(Vec::new()),
                Bound::Excluded(end) => end - 1,
                Bound::Unbounded => last,
            }
            .min(last);
            if start > end {
                return Ok(Vec::new());
            }
            let from = (start - index.first_index) as usize;
            let to = (end - index.first_index) as usize;
            index
                .slots
                .range(from..=to)
                .map(|slot| {
                    let file = match &slot.place {
                        Place::Written { segment, .. } => index.segments.get(segment).cloned(),
                        Place::Pending { .. } => None,
                    };
                    (slot.place.clone(), file)
                })
                .collect()
        };
        // Read outside the lock: a purge may delete a segment meanwhile, but
        // an open file stays readable after it is unlinked.
        let mut entries = Vec::with_capacity(places.len());
        for (place, file) in places {
            let bytes = match (&place, file) {
                (Place::Pending { bytes, .. }, _) => bytes.to_vec(),
                (Place::Written { offset, length, .. }, Some(file)) => {
                    let mut bytes = vec![0; *length as usize];
                    file.read_exact_at(&mut bytes, *offset).map_err(|e| WalError::io("cannot read a log entry", &e))?;
                    bytes
                }
                (Place::Written { segment, .. }, None) => {
                    return Err(WalError::Stopped(format!("segment {segment} of a live entry is not open")));
                }
            };
            let entry: Entry = bincode::deserialize(&bytes).map_err(|e| WalError::Corrupt {
                file: self.shared.dir.display().to_string(),
                offset: 0,
                detail: format!("a written entry no longer decodes: {e}"),
            })?;
            entries.push(entry);
        }
        Ok(entries)
    }

    /// Plants the log's bugs `planted` (the first call wins).
    #[cfg(feature = "mutants")]
    pub(crate) fn plant(&self, planted: crate::config::PlantedLogBugs) {
        let _ = self.shared.planted.set(planted);
    }

    /// Makes `vote` durable, after every operation handed to the log before
    /// this call is durable. Blocking (the wait, then two fsyncs and a rename).
    ///
    /// openraft 0.10 does not wait for an append to be durable before its
    /// next command, and it takes a saved vote as proof that every log write
    /// submitted before it is durable too (its IO ids order by vote first),
    /// so a vote that overtook a queued append would let the node
    /// acknowledge entries that a crash can still lose.
    pub(crate) fn save_vote(&self, vote: &Vote) -> Result<(), WalError> {
        let _one_at_a_time = self.shared.vote.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        self.wait_for_pending_writes()?;
        #[cfg(feature = "mutants")]
        if self.shared.planted().unsynced_vote && vote::overwrite_unsynced(&*self.shared.fs, &self.shared.dir, vote)? {
            // Planted bug: the vote is granted before it is durable.
            return Ok(());
        }
        vote::save(&*self.shared.fs, &self.shared.dir, vote)
    }

    /// Returns once every entry handed to the log before this call is
    /// durable, or with the error that stopped the log. Blocking.
    pub(crate) fn sync_pending(&self) -> Result<(), WalError> {
        self.wait_for_pending_writes()
    }

    /// Returns once every operation handed to the log before this call is
    /// durable, or with the error that stopped the log. Blocking.
    fn wait_for_pending_writes(&self) -> Result<(), WalError> {
        let mut index = self.shared.lock();
        if let Some(reason) = &index.stopped {
            return Err(WalError::Stopped(reason.clone()));
        }
        let Some(ops) = &self.ops else {
            // Inline: every operation was durable when its call returned,
            // but for appends whose sync is deferred: synced now.
            drop(index);
            self.writer.lock().unwrap_or_else(std::sync::PoisonError::into_inner).sync_deferred();
            return match self.shared.lock().stopped.clone() {
                Some(reason) => Err(WalError::Stopped(reason)),
                None => Ok(()),
            };
        };
        if index.queued_ops == 0 {
            // Nothing queued. If no one holds the writer either, nothing is
            // being written: every earlier operation is durable.
            if self.writer.try_lock().is_ok() {
                return Ok(());
            }
        }
        let (reply, durable) = mpsc::channel();
        let done: Done = Box::new(move |result| {
            let _ = reply.send(result);
        });
        // Sent under the lock, like every operation, so it queues behind
        // everything already handed to the log.
        if ops.send(Op::Barrier { done }).is_err() {
            return Err(WalError::Stopped("the log writer thread has exited".into()));
        }
        index.queued_ops += 1;
        drop(index);
        durable.recv().unwrap_or_else(|_| Err(WalError::Stopped("the log writer thread has exited".into())))
    }

    /// The saved vote, if any.
    pub(crate) fn read_vote(&self) -> Result<Option<Vote>, WalError> {
        vote::read(&*self.shared.fs, &self.shared.dir)
    }
}

/// The vote saved in the log directory `dir` of `fs`, if any, read without
/// opening the log (a simulator reads a crashed node's disk).
#[cfg(feature = "sim")]
pub(crate) fn read_saved_vote(fs: &dyn FileSystem, dir: &Path) -> Result<Option<Vote>, WalError> {
    vote::read(fs, dir)
}
