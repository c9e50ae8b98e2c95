//! Crash tests of the WAL on real files: torn writes at every byte of the
//! last record, zeroed tails, flipped bits in durable records, ENOSPC and a
//! failed fdatasync (through a fault-injecting [`FileSystem`]), and
//! truncation and purge across segments. Each must end in a clean refusal
//! or in the log that was acknowledged — never in a different log.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use openraft::EntryPayload;

use super::file::{FileSystem, RealFs, WalFile};
use super::{segment_file_name, Wal, WalError, WriterThread};
use crate::typ::{Command, Entry, LogId, Vote};

/// Small segments, so a few entries span several of them.
const SMALL_SEGMENT_BYTES: u64 = 4096;

fn log_id(term: u64, index: u64) -> LogId {
    LogId::new(crate::typ::LeaderId { term, node_id: 1 }, index)
}

fn entry(term: u64, index: u64) -> Entry {
    Entry {
        log_id: log_id(term, index),
        payload: EntryPayload::Normal(Command(format!("command {index} of term {term}").into_bytes())),
    }
}

fn entries(term: u64, indexes: std::ops::RangeInclusive<u64>) -> Vec<Entry> {
    indexes.map(|index| entry(term, index)).collect()
}

fn open(dir: &Path, fs: Arc<dyn FileSystem>) -> Result<(Wal, WriterThread), WalError> {
    Wal::open_with(dir, fs, SMALL_SEGMENT_BYTES)
}

fn open_real(dir: &Path) -> Result<(Wal, WriterThread), WalError> {
    open(dir, Arc::new(RealFs))
}

/// Appends and waits until the writer reports the entries durable.
fn append_durably(wal: &Wal, batch: Vec<Entry>) -> Result<(), WalError> {
    let (done, durable) = mpsc::channel();
    wal.append(
        batch,
        Some(Box::new(move |result| {
            let _ = done.send(result);
        })),
    )?;
    durable.recv_timeout(Duration::from_secs(10)).expect("the writer answers")
}

/// Drops the log and waits for its writer to exit, as a process exit would.
fn close(wal: Wal, writer: WriterThread) {
    drop(wal);
    writer.join().expect("the writer thread exits cleanly");
}

fn all_entries(wal: &Wal) -> Vec<Entry> {
    wal.entries(&(..)).expect("read the log")
}

/// One past the last non-zero byte: where the records of a segment end
/// (every test entry ends in a non-zero byte).
fn end_of_records(bytes: &[u8]) -> usize {
    bytes.iter().rposition(|byte| *byte != 0).map_or(0, |last| last + 1)
}

fn segment_path(dir: &Path, segment: u64) -> PathBuf {
    dir.join(segment_file_name(segment))
}

fn segment_count(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .expect("list")
        .filter(|entry| entry.as_ref().expect("entry").file_name().to_string_lossy().ends_with(".wal"))
        .count()
}

/// Writes entries 1..=4 of term 1 and then entry 5, and returns the
/// segment's bytes and where the last record (entry 5) starts and ends.
fn log_of_five(dir: &Path) -> (Vec<u8>, usize, usize) {
    let (wal, writer) = open_real(dir).expect("open");
    append_durably(&wal, entries(1, 1..=4)).expect("append 1..=4");
    let before = end_of_records(&std::fs::read(segment_path(dir, 1)).expect("read segment"));
    append_durably(&wal, vec![entry(1, 5)]).expect("append 5");
    close(wal, writer);
    let bytes = std::fs::read(segment_path(dir, 1)).expect("read segment");
    let after = end_of_records(&bytes);
    assert!(after > before);
    (bytes, before, after)
}

#[test]
fn a_torn_last_record_is_dropped_at_every_byte_offset_and_the_log_goes_on() {
    let root = tempfile::tempdir().expect("tempdir");
    let pristine_dir = root.path().join("pristine");
    let (pristine, start, end) = log_of_five(&pristine_dir);
    // Three ways an append can be torn at byte `cut`: the rest of the record
    // never reached the preallocated file (zeros), the file ends there, or
    // the bytes there are garbage (and so the record's checksums fail).
    for cut in start..end {
        for variant in ["zeroed", "cut short", "garbage"] {
            let dir = root.path().join(format!("{variant}-{cut}"));
            std::fs::create_dir_all(&dir).expect("mkdir");
            let mut bytes = pristine.clone();
            match variant {
                "zeroed" => bytes[cut..end].fill(0),
                "cut short" => bytes.truncate(cut),
                _ => bytes[cut] ^= 0xa5,
            }
            std::fs::write(segment_path(&dir, 1), &bytes).expect("write torn segment");

            let (wal, writer) = open_real(&dir).unwrap_or_else(|e| panic!("{variant} at {cut}: open refused: {e}"));
            let survived = if bytes[start..end.min(bytes.len())] == pristine[start..end] { 5 } else { 4 };
            assert_eq!(all_entries(&wal), entries(1, 1..=survived), "{variant} at {cut}");
            // The log continues after the dropped tail, and a reopen sees
            // exactly what was written since (no leftovers of the torn bytes).
            append_durably(&wal, entries(2, survived + 1..=survived + 2)).expect("append after recovery");
            close(wal, writer);
            let (wal, writer) = open_real(&dir).expect("reopen");
            let mut expected = entries(1, 1..=survived);
            expected.extend(entries(2, survived + 1..=survived + 2));
            assert_eq!(all_entries(&wal), expected, "{variant} at {cut}, after reopen");
            close(wal, writer);
        }
    }
}

#[test]
fn a_zeroed_tail_drops_only_the_unacknowledged_records_in_it() {
    let root = tempfile::tempdir().expect("tempdir");
    let (mut bytes, start_of_fifth, _) = log_of_five(root.path());
    // Zero entries 4 and 5: find where entry 4 starts by rebuilding 1..=3.
    let reference = root.path().join("three");
    let (wal, writer) = open_real(&reference).expect("open");
    append_durably(&wal, entries(1, 1..=3)).expect("append");
    close(wal, writer);
    let start_of_fourth = end_of_records(&std::fs::read(segment_path(&reference, 1)).expect("read"));
    assert!(start_of_fourth < start_of_fifth);
    bytes[start_of_fourth..].fill(0);
    std::fs::write(segment_path(root.path(), 1), &bytes).expect("write");
    let (wal, _writer) = open_real(root.path()).expect("open");
    assert_eq!(all_entries(&wal), entries(1, 1..=3));
}

#[test]
fn a_flipped_bit_in_any_durable_record_is_refused_rather_than_dropped() {
    let root = tempfile::tempdir().expect("tempdir");
    let pristine_dir = root.path().join("pristine");
    let (pristine, start_of_last, _) = log_of_five(&pristine_dir);
    // Every byte before the last record: the segment header and entries 1..=4.
    for position in 0..start_of_last {
        let dir = root.path().join(format!("flip-{position}"));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let mut bytes = pristine.clone();
        bytes[position] ^= 0x04;
        std::fs::write(segment_path(&dir, 1), &bytes).expect("write");
        match open_real(&dir) {
            Err(WalError::Corrupt { offset, .. }) => assert!(offset <= position as u64),
            Err(other) => panic!("flip at {position}: refused for the wrong reason: {other}"),
            Ok(_) => panic!("flip at {position}: a damaged durable record was accepted"),
        }
        std::fs::remove_dir_all(&dir).expect("clean up");
    }
}

#[test]
fn damage_in_a_segment_before_the_last_is_refused_even_at_its_end() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (wal, writer) = open_real(dir.path()).expect("open");
    for index in 1..=200 {
        append_durably(&wal, vec![entry(1, index)]).expect("append");
    }
    close(wal, writer);
    assert!(segment_count(dir.path()) >= 3, "small segments rotate");
    // The last record of segment 1 looks exactly like a torn write, but the
    // segment was complete and durable before segment 2 began.
    let path = segment_path(dir.path(), 1);
    let mut bytes = std::fs::read(&path).expect("read");
    let end = end_of_records(&bytes);
    bytes[end - 1] ^= 0x01;
    std::fs::write(&path, &bytes).expect("write");
    assert!(matches!(open_real(dir.path()), Err(WalError::Corrupt { .. })));
}

#[test]
fn a_missing_middle_segment_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (wal, writer) = open_real(dir.path()).expect("open");
    for index in 1..=200 {
        append_durably(&wal, vec![entry(1, index)]).expect("append");
    }
    close(wal, writer);
    std::fs::remove_file(segment_path(dir.path(), 2)).expect("remove segment 2");
    assert!(matches!(open_real(dir.path()), Err(WalError::Corrupt { .. })));
}

#[test]
fn a_segment_created_but_never_written_is_removed_and_the_log_is_intact() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (wal, writer) = open_real(dir.path()).expect("open");
    append_durably(&wal, entries(1, 1..=3)).expect("append");
    close(wal, writer);
    // A crash between creating segment 2 and writing its header.
    std::fs::write(segment_path(dir.path(), 2), vec![0; SMALL_SEGMENT_BYTES as usize]).expect("write");
    let (wal, writer) = open_real(dir.path()).expect("open");
    assert_eq!(all_entries(&wal), entries(1, 1..=3));
    append_durably(&wal, vec![entry(1, 4)]).expect("append");
    close(wal, writer);
    let (wal, _writer) = open_real(dir.path()).expect("reopen");
    assert_eq!(all_entries(&wal), entries(1, 1..=4));
}

/// A file system that can be told to fail writes with ENOSPC (after writing
/// half the buffer, a torn write) or fdatasyncs with EIO.
#[derive(Default)]
struct FaultyFs {
    fail_writes: Arc<AtomicBool>,
    fail_syncs: Arc<AtomicBool>,
}

struct FaultyFile {
    inner: Arc<dyn WalFile>,
    fail_writes: Arc<AtomicBool>,
    fail_syncs: Arc<AtomicBool>,
}

const ENOSPC: i32 = 28;
const EIO: i32 = 5;

impl WalFile for FaultyFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.inner.read_exact_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if self.fail_writes.load(Ordering::SeqCst) {
            self.inner.write_all_at(&buf[..buf.len() / 2], offset)?;
            return Err(io::Error::from_raw_os_error(ENOSPC));
        }
        self.inner.write_all_at(buf, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        if self.fail_syncs.load(Ordering::SeqCst) {
            return Err(io::Error::from_raw_os_error(EIO));
        }
        self.inner.sync_data()
    }
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
}

impl FaultyFs {
    fn wrap(&self, inner: Arc<dyn WalFile>) -> Arc<dyn WalFile> {
        Arc::new(FaultyFile { inner, fail_writes: self.fail_writes.clone(), fail_syncs: self.fail_syncs.clone() })
    }
}

impl FileSystem for FaultyFs {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        RealFs.create_dir_all(dir)
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        RealFs.list(dir)
    }
    fn create_preallocated(&self, path: &Path, len: u64) -> io::Result<Arc<dyn WalFile>> {
        Ok(self.wrap(RealFs.create_preallocated(path, len)?))
    }
    fn open(&self, path: &Path) -> io::Result<Arc<dyn WalFile>> {
        Ok(self.wrap(RealFs.open(path)?))
    }
    fn write_synced(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        if self.fail_syncs.load(Ordering::SeqCst) {
            return Err(io::Error::from_raw_os_error(EIO));
        }
        RealFs.write_synced(path, bytes)
    }
    fn read(&self, path: &Path) -> io::Result<Option<Vec<u8>>> {
        RealFs.read(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        RealFs.rename(from, to)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        RealFs.remove(path)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        RealFs.sync_dir(dir)
    }
}

#[test]
fn enospc_on_write_stops_the_log_and_recovery_keeps_what_was_acknowledged() {
    let dir = tempfile::tempdir().expect("tempdir");
    let faulty = Arc::new(FaultyFs::default());
    let (wal, writer) = open(dir.path(), faulty.clone()).expect("open");
    append_durably(&wal, entries(1, 1..=3)).expect("append before the disk fills");
    faulty.fail_writes.store(true, Ordering::SeqCst);
    let failed = append_durably(&wal, entries(1, 4..=6));
    assert!(matches!(failed, Err(WalError::Io { .. })), "{failed:?}");
    // The disk has room again, but the log stays stopped.
    faulty.fail_writes.store(false, Ordering::SeqCst);
    assert!(matches!(append_durably(&wal, entries(1, 7..=7)), Err(WalError::Stopped(_))));
    assert!(matches!(wal.truncate(2, None), Err(WalError::Stopped(_))));
    close(wal, writer);

    // Half of the failed append reached the file: the complete records of
    // it may survive (they were never acknowledged, but they are a valid
    // continuation), the torn one must not.
    let (wal, writer) = open_real(dir.path()).expect("recover after ENOSPC");
    let recovered = all_entries(&wal);
    let kept = recovered.len() as u64;
    assert!((3..6).contains(&kept), "{recovered:?}");
    assert_eq!(recovered, entries(1, 1..=kept));
    append_durably(&wal, entries(2, kept + 1..=kept + 3)).expect("append after recovery");
    close(wal, writer);
    let (wal, _writer) = open_real(dir.path()).expect("reopen");
    let mut expected = entries(1, 1..=kept);
    expected.extend(entries(2, kept + 1..=kept + 3));
    assert_eq!(all_entries(&wal), expected);
}

#[test]
fn a_failed_fdatasync_stops_the_log_for_good_and_is_never_retried() {
    let dir = tempfile::tempdir().expect("tempdir");
    let faulty = Arc::new(FaultyFs::default());
    let (wal, writer) = open(dir.path(), faulty.clone()).expect("open");
    append_durably(&wal, entries(1, 1..=3)).expect("append");
    faulty.fail_syncs.store(true, Ordering::SeqCst);
    assert!(matches!(append_durably(&wal, entries(1, 4..=4)), Err(WalError::Io { .. })));
    faulty.fail_syncs.store(false, Ordering::SeqCst);
    // A later fdatasync would succeed, and must not be used to claim that
    // entry 4 (or anything after it) is durable.
    assert!(matches!(append_durably(&wal, entries(1, 5..=5)), Err(WalError::Stopped(_))));
    close(wal, writer);

    // Entry 4 was written but its fsync failed: it may or may not be there,
    // and nothing else may be.
    let (wal, _writer) = open_real(dir.path()).expect("recover");
    let recovered = all_entries(&wal);
    assert!(recovered == entries(1, 1..=3) || recovered == entries(1, 1..=4), "{recovered:?}");
}

#[test]
fn truncation_and_purge_write_markers_delete_whole_segments_and_survive_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (wal, writer) = open_real(dir.path()).expect("open");
    for index in 1..=150 {
        append_durably(&wal, vec![entry(1, index)]).expect("append");
    }
    // A new leader replaces 121..=150 with entries of term 2.
    let segments_before = segment_count(dir.path());
    let first_segment_before = std::fs::read(segment_path(dir.path(), 1)).expect("read");
    wal.truncate(121, None).expect("truncate");
    append_durably(&wal, entries(2, 121..=160)).expect("append term 2");
    assert_eq!(
        std::fs::read(segment_path(dir.path(), 1)).expect("read"),
        first_segment_before,
        "truncation rewrites nothing"
    );
    assert!(segment_count(dir.path()) >= segments_before);
    // A snapshot covers 1..=100: segments wholly below 101 go.
    wal.purge(log_id(1, 100)).expect("purge");
    append_durably(&wal, vec![entry(2, 161)]).expect("append after purge");
    // The writer deletes obsolete segments after it has answered the group
    // that made them obsolete.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while segment_path(dir.path(), 1).exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(!segment_path(dir.path(), 1).exists(), "the first segment is deleted");
    let mut expected = entries(1, 101..=120);
    expected.extend(entries(2, 121..=161));
    assert_eq!(all_entries(&wal), expected);
    assert_eq!(wal.log_state(), (Some(log_id(1, 100)), Some(log_id(2, 161))));
    close(wal, writer);

    let (wal, writer) = open_real(dir.path()).expect("reopen");
    assert_eq!(all_entries(&wal), expected);
    assert_eq!(wal.log_state(), (Some(log_id(1, 100)), Some(log_id(2, 161))));
    // A snapshot installed beyond the log purges everything; the log goes on
    // right after it.
    wal.purge(log_id(3, 500)).expect("purge beyond the log");
    append_durably(&wal, vec![entry(3, 501)]).expect("append after the snapshot");
    assert!(matches!(append_durably(&wal, vec![entry(3, 700)]), Err(WalError::OutOfOrder { .. })));
    close(wal, writer);
    let (wal, _writer) = open_real(dir.path()).expect("reopen");
    assert_eq!(all_entries(&wal), vec![entry(3, 501)]);
    assert_eq!(wal.log_state(), (Some(log_id(3, 500)), Some(log_id(3, 501))));
}

/// An entry whose command is `bytes` bytes long.
fn entry_of(term: u64, index: u64, bytes: usize) -> Entry {
    Entry { log_id: log_id(term, index), payload: EntryPayload::Normal(Command(vec![b'x'; bytes])) }
}

/// The bytes `entry` takes in a segment.
fn framed(entry: &Entry) -> u64 {
    super::record::framed_bytes(bincode::serialize(entry).expect("encode").len()) as u64
}

/// Appends entries of term 1 from index 1 on until the first segment is
/// exactly full (the last one's command sized to fit), so that the next
/// record of any size starts segment 2. Returns the last index appended.
fn fill_first_segment_exactly(wal: &Wal, dir: &Path) -> u64 {
    let mut used = super::record::framed_bytes(super::writer::segment_header_payload(1).len()) as u64;
    let mut index = 1;
    while used + 2 * framed(&entry(1, index)) <= SMALL_SEGMENT_BYTES {
        used += framed(&entry(1, index));
        append_durably(wal, vec![entry(1, index)]).expect("append");
        index += 1;
    }
    let remaining = SMALL_SEGMENT_BYTES - used;
    let filler = entry_of(1, index, (remaining - framed(&entry_of(1, index, 0))) as usize);
    assert_eq!(framed(&filler), remaining);
    append_durably(wal, vec![filler]).expect("append the filler");
    assert_eq!(segment_count(dir), 1, "the first segment holds every entry so far");
    index
}

/// Found by the simulation (seed 141): a purge marker below the first
/// segment's last entry starts the second segment, the entries that follow
/// the first segment's come after it there, and a later purge makes the
/// first segment obsolete, so the writer deletes it. What remains is a
/// marker, then a gap, then the marker that covers the gap: it must reopen.
/// A gap that no purge marker covers is still refused.
#[test]
fn a_log_whose_first_segment_a_later_purge_deleted_reopens_past_the_gap() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (wal, writer) = open_real(dir.path()).expect("open");
    let last = fill_first_segment_exactly(&wal, dir.path());
    // A purge below the first segment's last entry: its marker starts
    // segment 2, and segment 1 still holds live entries.
    wal.purge(log_id(1, last - 5)).expect("purge");
    append_durably(&wal, entries(1, last + 1..=last + 10)).expect("append");
    assert_eq!(segment_count(dir.path()), 2, "the purge marker started segment 2");
    // A later purge past segment 1's entries: the writer deletes it.
    wal.purge(log_id(1, last + 2)).expect("purge past segment 1");
    append_durably(&wal, vec![entry(1, last + 11)]).expect("append after the purge");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while segment_path(dir.path(), 1).exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(!segment_path(dir.path(), 1).exists(), "the first segment is deleted");
    let expected = entries(1, last + 3..=last + 11);
    assert_eq!(all_entries(&wal), expected);
    close(wal, writer);
    let (wal, writer) = open_real(dir.path()).expect("reopen after the deletion");
    assert_eq!(all_entries(&wal), expected);
    assert_eq!(wal.log_state(), (Some(log_id(1, last + 2)), Some(log_id(1, last + 11))));
    append_durably(&wal, vec![entry(1, last + 12)]).expect("the log goes on");
    close(wal, writer);

    // Without the covering marker the same gap is damage: segment 1 lost
    // while only the purge below its last entry was durable.
    let lost = tempfile::tempdir().expect("tempdir");
    let (wal, writer) = open_real(lost.path()).expect("open");
    let last = fill_first_segment_exactly(&wal, lost.path());
    wal.purge(log_id(1, last - 5)).expect("purge");
    append_durably(&wal, entries(1, last + 1..=last + 3)).expect("append");
    close(wal, writer);
    std::fs::remove_file(segment_path(lost.path(), 1)).expect("lose segment 1");
    match open_real(lost.path()) {
        Err(WalError::Corrupt { detail, .. }) => {
            assert!(detail.contains(&format!("up to index {last} are missing")), "{detail}");
        }
        Err(other) => panic!("refused for another reason: {other}"),
        Ok(_) => panic!("a log missing entries no purge covers was opened"),
    }
}

#[test]
fn an_append_that_conflicts_replaces_the_suffix_and_a_matching_one_is_skipped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (wal, writer) = open_real(dir.path()).expect("open");
    append_durably(&wal, entries(1, 1..=10)).expect("append");
    append_durably(&wal, entries(1, 5..=10)).expect("re-append the same entries");
    assert_eq!(all_entries(&wal), entries(1, 1..=10));
    let mut replacement = entries(1, 6..=7);
    replacement.extend(entries(2, 8..=9));
    append_durably(&wal, replacement).expect("append a conflicting suffix");
    let mut expected = entries(1, 1..=7);
    expected.extend(entries(2, 8..=9));
    assert_eq!(all_entries(&wal), expected);
    close(wal, writer);
    let (wal, _writer) = open_real(dir.path()).expect("reopen");
    assert_eq!(all_entries(&wal), expected);
}

#[test]
fn the_vote_is_replaced_atomically_and_a_damaged_vote_file_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let faulty = Arc::new(FaultyFs::default());
    let (wal, writer) = open(dir.path(), faulty.clone()).expect("open");
    assert_eq!(wal.read_vote().expect("read"), None);
    wal.save_vote(&Vote::new(3, 1)).expect("save");
    wal.save_vote(&Vote::new(4, 2)).expect("save");
    faulty.fail_syncs.store(true, Ordering::SeqCst);
    assert!(wal.save_vote(&Vote::new(5, 3)).is_err(), "a vote whose fsync failed is not reported saved");
    faulty.fail_syncs.store(false, Ordering::SeqCst);
    assert_eq!(wal.read_vote().expect("read"), Some(Vote::new(4, 2)));
    close(wal, writer);

    let vote_path = dir.path().join("vote");
    let mut bytes = std::fs::read(&vote_path).expect("read vote file");
    let last = bytes.len() - 1;
    bytes[last] ^= 0x01;
    std::fs::write(&vote_path, &bytes).expect("write");
    let (wal, _writer) = open_real(dir.path()).expect("open");
    assert!(matches!(wal.read_vote(), Err(WalError::Corrupt { .. })));
}

#[test]
fn an_append_is_readable_at_once_and_appends_between_purges_keep_their_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (wal, writer) = open_real(dir.path()).expect("open");
    // Even an idle log hands the append to its writer thread (openraft 0.10
    // goes on meanwhile); the entries are readable at once, and `done`
    // fires once they are durable.
    let (durable_tx, durable_rx) = mpsc::channel();
    let done: super::Done = Box::new(move |result| {
        let _ = durable_tx.send(result);
    });
    wal.append(entries(1, 1..=3), Some(done)).expect("append");
    assert_eq!(all_entries(&wal), entries(1, 1..=3), "readable before it is durable");
    durable_rx.recv().expect("done fires").expect("durable");
    // Appends and purges interleave on the writer's queue. Every append
    // must end up in the log, in order, across segments.
    let (done_tx, done_rx) = mpsc::channel();
    for index in 4..=200 {
        let done_tx = done_tx.clone();
        let done: super::Done = Box::new(move |result| {
            let _ = done_tx.send((index, result));
        });
        wal.append(vec![entry(1, index)], Some(done)).expect("append");
        if index % 10 == 0 && index > 20 {
            wal.purge(log_id(1, index - 20)).expect("purge");
        }
    }
    drop(done_tx);
    let completed: Vec<u64> = done_rx
        .iter()
        .map(|(index, result)| {
            result.unwrap_or_else(|e| panic!("append {index}: {e}"));
            index
        })
        .collect();
    assert_eq!(completed, (4..=200).collect::<Vec<_>>(), "every append is completed once, in order");
    close(wal, writer);
    let (wal, writer) = open_real(dir.path()).expect("reopen");
    let (purged, last) = wal.log_state();
    assert_eq!((purged, last), (Some(log_id(1, 180)), Some(log_id(1, 200))));
    assert_eq!(all_entries(&wal), entries(1, 181..=200));
    close(wal, writer);
}

/// The simulator's log: inline writes on the in-memory disk. A power cut
/// after every possible number of operations, followed by a crash that
/// keeps a torn prefix of the unsynced writes, must reopen to a log that
/// holds every acknowledged entry and nothing that is not a prefix of
/// what was appended.
#[test]
fn an_inline_log_on_the_simulated_disk_keeps_every_acknowledged_entry_through_a_torn_power_cut() {
    use super::{SimFs, Threading};
    let dir = Path::new("/sim/raft-log");
    let mut crashes_that_dropped_writes = 0;
    for cut_after in 0..40u64 {
        for torn in [0u64, (1 << 16) | (7 << 32), (3 << 16) | (100 << 32)] {
            let fs = Arc::new(SimFs::default());
            let open_inline = || Wal::open_threaded(dir, fs.clone(), SMALL_SEGMENT_BYTES, Threading::Inline);
            let (wal, writer) = open_inline().expect("open");
            fs.cut_power_after(cut_after);
            let mut acknowledged = 0;
            for index in 1..=30 {
                // Inline, `done` fires before `append` returns.
                let (done, durable) = mpsc::channel();
                // (Its completion, not its return value, is the acknowledgement.)
                let _ = wal.append(
                    vec![entry(1, index)],
                    Some(Box::new(move |result| {
                        let _ = done.send(result);
                    })),
                );
                let acknowledged_now = durable.try_recv().expect("completed inline").is_ok();
                if !acknowledged_now {
                    break;
                }
                acknowledged = index;
            }
            close(wal, writer);
            if fs.crash(torn) > 0 {
                crashes_that_dropped_writes += 1;
            }
            let (wal, writer) = open_inline().expect("a torn tail is recovered, never refused");
            let recovered = all_entries(&wal);
            assert!(recovered.len() as u64 >= acknowledged, "cut after {cut_after}: lost an acknowledged entry");
            assert_eq!(recovered, entries(1, 1..=recovered.len() as u64), "the recovered log is a prefix");
            close(wal, writer);
        }
    }
    // The cut lands between a write and its fdatasync often enough that
    // crashes really drop (or tear) unsynced records.
    assert!(crashes_that_dropped_writes > 10, "only {crashes_that_dropped_writes} crashes dropped a write");
}

/// A disk whose fdatasyncs of log segments block while the gate is closed:
/// a slow disk the test controls.
#[derive(Default)]
struct GatedFs {
    closed: Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>,
}

struct GatedFile {
    inner: Arc<dyn WalFile>,
    closed: Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>,
}

impl GatedFs {
    fn set_closed(&self, closed: bool) {
        let (lock, changed) = &*self.closed;
        *lock.lock().expect("gate") = closed;
        changed.notify_all();
    }
}

impl WalFile for GatedFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.inner.read_exact_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.inner.write_all_at(buf, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        let (lock, changed) = &*self.closed;
        let mut closed = lock.lock().expect("gate");
        while *closed {
            closed = changed.wait(closed).expect("gate");
        }
        drop(closed);
        self.inner.sync_data()
    }
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
}

impl FileSystem for GatedFs {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        RealFs.create_dir_all(dir)
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        RealFs.list(dir)
    }
    fn create_preallocated(&self, path: &Path, len: u64) -> io::Result<Arc<dyn WalFile>> {
        Ok(Arc::new(GatedFile { inner: RealFs.create_preallocated(path, len)?, closed: self.closed.clone() }))
    }
    fn open(&self, path: &Path) -> io::Result<Arc<dyn WalFile>> {
        Ok(Arc::new(GatedFile { inner: RealFs.open(path)?, closed: self.closed.clone() }))
    }
    fn write_synced(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        RealFs.write_synced(path, bytes)
    }
    fn read(&self, path: &Path) -> io::Result<Option<Vec<u8>>> {
        RealFs.read(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        RealFs.rename(from, to)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        RealFs.remove(path)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        RealFs.sync_dir(dir)
    }
}

/// openraft 0.10 takes a saved vote as proof that every log write submitted
/// before it is durable, so a vote must not overtake an append queued behind
/// a slow disk.
#[test]
fn a_vote_is_saved_only_after_an_append_queued_behind_a_slow_disk_is_durable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let gated = Arc::new(GatedFs::default());
    let (wal, writer) = open(dir.path(), gated.clone()).expect("open");
    wal.append(entries(1, 1..=3), None).expect("append while the disk is fast");
    gated.set_closed(true);
    // The purge goes to the writer thread, which blocks in its fdatasync;
    // the append after it queues behind it.
    wal.purge(log_id(1, 1)).expect("purge");
    let append_durable = Arc::new(AtomicBool::new(false));
    let flag = append_durable.clone();
    let done: super::Done = Box::new(move |result| {
        result.expect("durable");
        flag.store(true, Ordering::SeqCst);
    });
    wal.append(vec![entry(1, 4)], Some(done)).expect("append behind the slow disk");
    assert!(!append_durable.load(Ordering::SeqCst), "the append is queued, not written inline");

    let (returned_tx, returned_rx) = mpsc::channel();
    let voter = wal.clone();
    let flag = append_durable.clone();
    let saving = std::thread::spawn(move || {
        let vote = Vote::new(2, 1);
        let result = voter.save_vote(&vote);
        let _ = returned_tx.send((result, flag.load(Ordering::SeqCst)));
    });
    // A blocked save is the behaviour wanted; the sleep only gives a wrong
    // implementation the chance to return early.
    std::thread::sleep(Duration::from_millis(200));
    assert!(returned_rx.try_recv().is_err(), "save_vote returned while an earlier append was not durable");
    gated.set_closed(false);
    let (result, durable_at_return) = returned_rx.recv_timeout(Duration::from_secs(10)).expect("save_vote returns");
    result.expect("vote saved");
    assert!(durable_at_return, "the queued append was durable before save_vote returned");
    saving.join().expect("the voting thread");
    assert_eq!(wal.read_vote().expect("read vote"), Some(Vote::new(2, 1)));
    close(wal, writer);
}
