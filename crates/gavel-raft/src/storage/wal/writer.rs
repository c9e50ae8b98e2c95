//! The writer thread: group commit of everything queued, one fdatasync per
//! group, segment rotation, and deletion of purged segments.

use std::path::Path;
use std::sync::{mpsc, Arc, Mutex};

use super::file::{FileSystem, WalFile};
use super::record::{self, Kind, HEADER_BYTES};
use super::{segment_file_name, Done, Place, WalError, WalShared};
use crate::typ::LogId;

/// The on-disk format version, in every segment header.
const FORMAT_VERSION: u32 = 1;

/// One operation for the writer, queued in the order the index changed.
pub(super) enum Op {
    /// Entries to write, after a truncate marker if they replace a
    /// conflicting suffix; `done` fires once they are durable.
    Append { truncate_from: Option<u64>, records: Vec<PendingRecord>, done: Option<Done> },
    /// A truncate marker; `done` fires once it is durable.
    Truncate { index: u64, done: Option<Done> },
    /// A purge marker; once durable, the obsolete segments are deleted.
    Purge { log_id: LogId },
    /// Nothing to write: `done` fires once every operation queued before it
    /// is durable (a vote is saved only behind the log's pending writes).
    Barrier { done: Done },
}

impl Op {
    pub(super) fn complete(self, result: Result<(), WalError>) {
        match self {
            Op::Append { done: Some(done), .. } | Op::Truncate { done: Some(done), .. } | Op::Barrier { done } => {
                done(result)
            }
            Op::Append { done: None, .. } | Op::Truncate { done: None, .. } | Op::Purge { .. } => {}
        }
    }
}

/// An encoded entry waiting to be written.
pub(super) struct PendingRecord {
    pub(super) record: u64,
    pub(super) index: u64,
    pub(super) bytes: Arc<Vec<u8>>,
}

/// Where the writer put one entry.
struct Written {
    record: u64,
    index: u64,
    segment: u64,
    offset: u64,
    length: u32,
}

/// The next segment, being zero-filled under a temporary name off the
/// writer thread, so that a rotation only renames it.
type Preparing = std::thread::JoinHandle<std::io::Result<Arc<dyn WalFile>>>;

/// The writer thread: serves queued operations until every `Wal` handle is
/// dropped. An idle-time appender may hold the writer between two groups.
pub(super) fn run(writer: &Mutex<Writer>, receiver: mpsc::Receiver<Op>) {
    while let Ok(first) = receiver.recv() {
        // Group commit: everything queued while the last fdatasync ran
        // is written and synced together.
        let mut group = vec![first];
        group.extend(receiver.try_iter());
        let count = group.len();
        match writer.lock() {
            Ok(mut writer) => {
                writer.serve(group);
                // Still holding the writer: an append that sees no queued
                // operation finds the writer free only once this group is done.
                writer.shared.lock().queued_ops -= count;
            }
            Err(poisoned) => {
                // A write panicked half-way: where the log ends is unknown.
                let writer = poisoned.into_inner();
                let error = WalError::Stopped("a write to the raft log panicked".into());
                writer.stop(&error);
                for op in group {
                    op.complete(Err(error.clone()));
                }
                writer.shared.lock().queued_ops -= count;
            }
        }
    }
    // Every file is closed when the writer's exit is reported.
    writer.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).finish();
}

pub(super) struct Writer {
    shared: Arc<WalShared>,
    segment: u64,
    file: Arc<dyn WalFile>,
    position: u64,
    segment_bytes: u64,
    next: Option<Preparing>,
    /// Writing inline (`super::Threading::Inline`): no thread prepares the
    /// next segment; the rotation does.
    inline: bool,
    /// Appends are written at once and synced later ([`Writer::sync_deferred`]):
    /// the simulator's model of the writer thread, whose fdatasync runs
    /// while openraft already replicates what it writes.
    defer_appends: bool,
    /// Appends written and not yet synced, completed in order once they are.
    deferred: Vec<Op>,
}

/// The temporary name of a segment being prepared.
pub(super) fn prepared_file_name(segment: u64) -> String {
    format!("{}.tmp", segment_file_name(segment))
}

/// Where the writer continues.
pub(super) struct Tail {
    pub(super) segment: u64,
    pub(super) file: Arc<dyn WalFile>,
    pub(super) position: u64,
}

/// The payload of a segment's header record: format version and number.
pub(super) fn segment_header_payload(segment: u64) -> [u8; 12] {
    let mut payload = [0; 12];
    payload[0..4].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    payload[4..12].copy_from_slice(&segment.to_le_bytes());
    payload
}

/// Creates segment `segment` in `dir`, preallocated, with its header
/// written and durable (and the directory entry too). Returns the file and
/// where the first record goes.
pub(super) fn create_segment(
    fs: &dyn FileSystem,
    dir: &Path,
    segment: u64,
    segment_bytes: u64,
) -> Result<(Arc<dyn WalFile>, u64), WalError> {
    let file = fs
        .create_preallocated(&dir.join(segment_file_name(segment)), segment_bytes)
        .map_err(|e| WalError::io("cannot create a log segment", &e))?;
    let position = write_segment_header(fs, dir, &*file, segment)?;
    Ok((file, position))
}

/// Writes a new segment's header and makes it and the directory entry
/// durable. Returns where the first record goes.
fn write_segment_header(fs: &dyn FileSystem, dir: &Path, file: &dyn WalFile, segment: u64) -> Result<u64, WalError> {
    let mut header = Vec::new();
    record::encode(Kind::SegmentHeader, &segment_header_payload(segment), &mut header);
    file.write_all_at(&header, 0).map_err(|e| WalError::io("cannot write a log segment header", &e))?;
    file.sync_data().map_err(|e| WalError::io("cannot fsync a new log segment", &e))?;
    fs.sync_dir(dir).map_err(|e| WalError::io("cannot fsync the log directory", &e))?;
    Ok(header.len() as u64)
}

impl Writer {
    pub(super) fn new(shared: Arc<WalShared>, tail: Tail, segment_bytes: u64, inline: bool) -> Writer {
        let (segment, file, position) = (tail.segment, tail.file, tail.position);
        Writer {
            shared,
            segment,
            file,
            position,
            segment_bytes,
            next: None,
            inline,
            defer_appends: false,
            deferred: Vec::new(),
        }
    }

    /// Writes appends at once and syncs them only at
    /// [`Writer::sync_deferred`] (or with the next operation that is not an
    /// append), as the writer thread's fdatasync runs while openraft goes
    /// on: a crash in between loses appends the leader already sent.
    pub(super) fn defer_appends(&mut self) {
        self.defer_appends = true;
    }

    /// Whether appends wait for [`Writer::sync_deferred`].
    pub(super) fn has_deferred(&self) -> bool {
        !self.deferred.is_empty()
    }

    /// Syncs the appends written since the last sync and completes them,
    /// in order (or with the error that stopped the log).
    pub(super) fn sync_deferred(&mut self) {
        if self.deferred.is_empty() {
            return;
        }
        let deferred = std::mem::take(&mut self.deferred);
        match self.file.sync_data().map_err(|e| WalError::io("fdatasync of the raft log failed", &e)) {
            Ok(()) => deferred.into_iter().for_each(|op| op.complete(Ok(()))),
            Err(error) => {
                self.stop(&error);
                deferred.into_iter().for_each(|op| op.complete(Err(error.clone())));
            }
        }
    }

    /// Starts zero-filling the segment after the current one once this one
    /// is half full (a small log never pays for a second segment). If no
    /// thread can be started, the rotation prepares it itself.
    fn prepare_next_when_due(&mut self) {
        if self.inline || self.next.is_some() || self.position < self.segment_bytes / 2 {
            return;
        }
        let fs = self.shared.fs.clone();
        let path = self.shared.dir.join(prepared_file_name(self.segment + 1));
        let length = self.segment_bytes;
        self.next = std::thread::Builder::new()
            .name("gavel-raft-wal-prepare".into())
            .spawn(move || fs.create_preallocated(&path, length))
            .ok();
    }

    /// Writes and fdatasyncs `group` as one, then completes its operations
    /// in order (or all of them with the error that stopped the log).
    pub(super) fn serve(&mut self, group: Vec<Op>) {
        let stopped = self.shared.lock().stopped.clone();
        let defer = self.defer_appends && group.iter().all(|op| matches!(op, Op::Append { .. }));
        // The planted `unsynced-append` acknowledges after the write alone,
        // deferral or not.
        #[cfg(feature = "mutants")]
        let defer = defer && !self.shared.planted().unsynced_append;
        let result = match stopped {
            Some(reason) => Err(WalError::Stopped(reason)),
            None => self.write_group(&group, !defer),
        };
        if let (true, Ok(written)) = (defer, &result) {
            self.publish(written);
            self.deferred.extend(group);
            return;
        }
        // What this group synced (or failed) covers the deferred appends,
        // written before it: they complete first.
        let deferred = std::mem::take(&mut self.deferred);
        let group: Vec<Op> = deferred.into_iter().chain(group).collect();
        match result {
            Ok(written) => {
                self.publish(&written);
                let purged = group.iter().any(|op| matches!(op, Op::Purge { .. }));
                for op in group {
                    op.complete(Ok(()));
                }
                if purged {
                    if let Err(error) = self.delete_purged_segments() {
                        self.stop(&error);
                    }
                }
            }
            Err(error) => {
                // Durability rule: a failed write or fdatasync is never
                // retried (the kernel may have dropped the pages it could
                // not write); the log stops and so does the node.
                self.stop(&error);
                for op in group {
                    op.complete(Err(error.clone()));
                }
            }
        }
    }

    /// Waits for the segment being prepared, so its file is closed.
    fn finish(&mut self) {
        if let Some(preparing) = self.next.take() {
            let _ = preparing.join();
        }
    }

    fn stop(&self, error: &WalError) {
        let mut index = self.shared.lock();
        if index.stopped.is_none() {
            tracing::error!(%error, "the raft log failed; it accepts no more writes");
            index.stopped = Some(error.to_string());
        }
    }

    fn write_group(&mut self, group: &[Op], sync: bool) -> Result<Vec<Written>, WalError> {
        let mut buffer = Vec::new();
        let mut written = Vec::new();
        for op in group {
            match op {
                Op::Append { truncate_from, records, .. } => {
                    if let Some(from) = truncate_from {
                        self.add(&mut buffer, Kind::Truncate, &from.to_le_bytes())?;
                    }
                    for pending in records {
                        let (segment, offset) = self.add(&mut buffer, Kind::Entry, &pending.bytes)?;
                        written.push(Written {
                            record: pending.record,
                            index: pending.index,
                            segment,
                            offset,
                            length: pending.bytes.len() as u32,
                        });
                    }
                }
                Op::Truncate { index, .. } => {
                    self.add(&mut buffer, Kind::Truncate, &index.to_le_bytes())?;
                }
                Op::Purge { log_id } => {
                    let payload = bincode::serialize(log_id).map_err(|e| WalError::Codec(e.to_string()))?;
                    self.add(&mut buffer, Kind::Purge, &payload)?;
                }
                Op::Barrier { .. } => {}
            }
        }
        if group.iter().all(|op| matches!(op, Op::Barrier { .. })) && self.deferred.is_empty() {
            // Only barriers: every earlier group is durable already (groups
            // complete in order), so there is nothing to write or sync.
            return Ok(written);
        }
        let stats = crate::stats::stats();
        let started = std::time::Instant::now();
        self.write_out(&mut buffer)?;
        let written_at = std::time::Instant::now();
        // Planted bug `unsynced-append`: acknowledged after the write alone.
        #[cfg(feature = "mutants")]
        let sync = sync && !self.shared.planted().unsynced_append;
        if sync {
            self.file.sync_data().map_err(|e| WalError::io("fdatasync of the raft log failed", &e))?;
        }
        stats.wal_append.observe_duration(written_at - started);
        stats.wal_fsync.observe_duration(written_at.elapsed());
        stats.wal_group_entries.observe(written.len() as u64);
        self.prepare_next_when_due();
        Ok(written)
    }

    /// Frames a record into `buffer`, first moving to a new segment if it
    /// does not fit in this one. Returns the payload's segment and offset.
    fn add(&mut self, buffer: &mut Vec<u8>, kind: Kind, payload: &[u8]) -> Result<(u64, u64), WalError> {
        let used = self.position + buffer.len() as u64;
        let segment_header_bytes = record::framed_bytes(segment_header_payload(0).len()) as u64;
        if used + record::framed_bytes(payload.len()) as u64 > self.segment_bytes && used > segment_header_bytes {
            self.rotate(buffer)?;
        }
        let offset = self.position + (buffer.len() + HEADER_BYTES) as u64;
        record::encode(kind, payload, buffer);
        Ok((self.segment, offset))
    }

    fn write_out(&mut self, buffer: &mut Vec<u8>) -> Result<(), WalError> {
        if !buffer.is_empty() {
            self.file
                .write_all_at(buffer, self.position)
                .map_err(|e| WalError::io("write to the raft log failed", &e))?;
            self.position += buffer.len() as u64;
            buffer.clear();
        }
        Ok(())
    }

    /// Completes this segment (written and fdatasynced) and starts the next.
    /// Every segment but the last is therefore durable as a whole, which is
    /// what lets recovery treat damage in it as corruption.
    fn rotate(&mut self, buffer: &mut Vec<u8>) -> Result<(), WalError> {
        self.write_out(buffer)?;
        self.file.sync_data().map_err(|e| WalError::io("fdatasync of the raft log failed", &e))?;
        let next = self.segment + 1;
        let fs = &*self.shared.fs;
        let prepared_path = self.shared.dir.join(prepared_file_name(next));
        let prepared = match self.next.take().map(|preparing| preparing.join()) {
            Some(Ok(result)) => result,
            Some(Err(_)) => Err(std::io::Error::other("the segment preparation thread panicked")),
            None => fs.create_preallocated(&prepared_path, self.segment_bytes),
        };
        let file = prepared.map_err(|e| WalError::io("cannot prepare the next log segment", &e))?;
        fs.rename(&prepared_path, &self.shared.segment_path(next))
            .map_err(|e| WalError::io("cannot rename the next log segment into place", &e))?;
        let position = write_segment_header(fs, &self.shared.dir, &*file, next)?;
        self.shared.lock().segments.insert(next, file.clone());
        self.segment = next;
        self.file = file;
        self.position = position;
        Ok(())
    }

    /// Points the index at the written copies of entries that are still live.
    fn publish(&self, written: &[Written]) {
        let mut index = self.shared.lock();
        for entry in written {
            let Some(position) = entry.index.checked_sub(index.first_index) else { continue };
            let Some(slot) = index.slots.get_mut(position as usize) else { continue };
            if matches!(slot.place, Place::Pending { record, .. } if record == entry.record) {
                slot.place = Place::Written { segment: entry.segment, offset: entry.offset, length: entry.length };
            }
        }
    }

    /// Deletes the segments before the one holding the first live entry
    /// (called once a purge marker is durable).
    fn delete_purged_segments(&self) -> Result<(), WalError> {
        let obsolete: Vec<u64> = {
            let mut index = self.shared.lock();
            let keep_from = match index.slots.front().map(|slot| &slot.place) {
                Some(Place::Written { segment, .. }) => *segment,
                Some(Place::Pending { .. }) | None => self.segment,
            };
            let obsolete: Vec<u64> = index.segments.range(..keep_from).map(|(segment, _)| *segment).collect();
            for segment in &obsolete {
                index.segments.remove(segment);
            }
            obsolete
        };
        // Oldest first, each removal durable before the next, so a crash
        // leaves the remaining segments numbered without a gap.
        for segment in &obsolete {
            self.shared
                .fs
                .remove(&self.shared.segment_path(*segment))
                .map_err(|e| WalError::io("cannot delete a purged log segment", &e))?;
            self.shared
                .fs
                .sync_dir(&self.shared.dir)
                .map_err(|e| WalError::io("cannot fsync the log directory", &e))?;
        }
        Ok(())
    }
}
