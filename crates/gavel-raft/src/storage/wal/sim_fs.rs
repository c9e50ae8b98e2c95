//! An in-memory [`FileSystem`] for the simulator that knows which bytes were
//! synced, so a simulated crash loses exactly what a power cut could: the
//! writes after each file's last `sync_data`, except a prefix of them that
//! the crash chooses (a torn tail, possibly cut inside one write).
//!
//! Each file keeps its current bytes and an undo log of the writes since its
//! last sync (offset, the bytes they overwrote, the length before). A sync
//! clears the undo log; a crash replays it backwards down to the kept prefix.
//! A power cut can be armed ([`SimFs::cut_power_after`]): after that many
//! more mutating operations every one fails, as if the machine had stopped
//! mid-way, so the crash that follows may tear the log inside a group that
//! was being written (inline, every append is synced before it returns, so
//! without a cut there would never be an unsynced tail to lose).
//! The disk can also be full ([`SimFs::set_full`]): every write and creation
//! fails with `StorageFull` (ENOSPC) and changes nothing, as on a
//! copy-on-write file system, where even a write into preallocated space
//! allocates; syncs, renames and removals still succeed. And it can be slow
//! ([`SimFs::set_latency`]): the log store awaits that much simulated time
//! before each append, truncation and vote write (the file calls themselves
//! stay synchronous, so the wait is in the caller's task, not a thread).
//! Namespace operations (create, rename, remove) count as durable at once:
//! the WAL fsyncs its directory right after each of them, so a crash between
//! the two is not a state the WAL's recovery is asked to handle here.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use super::file::{FileSystem, WalFile};

/// One write not yet synced, with what it replaced.
struct Unsynced {
    offset: u64,
    /// The bytes the write overwrote (within the old length).
    overwritten: Vec<u8>,
    /// The write's length.
    length: usize,
    /// The file's length before the write.
    length_before: u64,
}

#[derive(Default)]
struct FileState {
    bytes: Vec<u8>,
    unsynced: Vec<Unsynced>,
}

impl FileState {
    fn write_at(&mut self, buf: &[u8], offset: u64) {
        let start = offset as usize;
        let end = start + buf.len();
        let length_before = self.bytes.len() as u64;
        let overwritten = self.bytes.get(start..end.min(self.bytes.len())).map(<[u8]>::to_vec).unwrap_or_default();
        if self.bytes.len() < end {
            self.bytes.resize(end, 0);
        }
        self.bytes[start..end].copy_from_slice(buf);
        self.unsynced.push(Unsynced { offset, overwritten, length: buf.len(), length_before });
    }

    /// Undoes the unsynced writes after the first `keep_writes`, and of the
    /// write at `keep_writes` (if any) all but its first `keep_bytes` bytes.
    fn lose_unsynced(&mut self, keep_writes: usize, keep_bytes: usize) {
        while self.unsynced.len() > keep_writes {
            let Some(write) = self.unsynced.pop() else { break };
            let partial = self.unsynced.len() == keep_writes;
            let kept = if partial { keep_bytes.min(write.length) } else { 0 };
            let start = write.offset as usize;
            // Restore what the lost part of the write overwrote, then cut the
            // file back to its old length if the write had grown it.
            for (position, old) in write.overwritten.iter().enumerate().skip(kept) {
                self.bytes[start + position] = *old;
            }
            let lost_from = (start + kept) as u64;
            let new_length = write.length_before.max(lost_from);
            if (self.bytes.len() as u64) > new_length {
                self.bytes.truncate(new_length as usize);
            }
        }
        self.unsynced.clear();
    }
}

type Files = BTreeMap<PathBuf, Arc<Mutex<FileState>>>;

/// Whether the power is on, and how many mutating operations it stays on;
/// whether the disk is full, and how many writes it refused for that.
#[derive(Default)]
struct Power {
    countdown: Mutex<Option<u64>>,
    /// Cuts armed at the `n`th time the state machine reaches a point
    /// ([`crate::io::CrashPoint`]) from now on (each `n` counts down to 0).
    at_point: Mutex<Vec<(crate::io::CrashPoint, u64)>>,
    cut: AtomicBool,
    full: AtomicBool,
    refused_full: AtomicU64,
}

impl Power {
    /// Counts one operation that needs space: fails with `StorageFull`
    /// while the disk is full (after the power check).
    fn spend_space(&self) -> io::Result<()> {
        self.spend()?;
        if self.full.load(Ordering::SeqCst) {
            self.refused_full.fetch_add(1, Ordering::SeqCst);
            return Err(io::Error::new(io::ErrorKind::StorageFull, "simulated full disk: no space left on device"));
        }
        Ok(())
    }

    /// Counts one mutating operation; fails once the power is cut.
    fn spend(&self) -> io::Result<()> {
        if self.cut.load(Ordering::SeqCst) {
            return Err(io::Error::other("simulated power cut"));
        }
        let mut countdown = lock(&self.countdown);
        match countdown.as_mut() {
            Some(0) => {
                self.cut.store(true, Ordering::SeqCst);
                *countdown = None;
                Err(io::Error::other("simulated power cut"))
            }
            Some(left) => {
                *left -= 1;
                Ok(())
            }
            None => Ok(()),
        }
    }
}

/// The simulated disk: files by path, shared by every open handle and kept
/// across a node's simulated crash and restart.
#[derive(Default)]
pub(crate) struct SimFs {
    files: Mutex<Files>,
    power: Arc<Power>,
    /// Simulated milliseconds each append, truncation or vote write waits.
    latency_ms: AtomicU64,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, format!("{} does not exist", path.display()))
}

impl SimFs {
    /// A crash: every file loses its unsynced writes, except that the file
    /// chosen by `torn` keeps a prefix of them (`torn` picks the file, how
    /// many writes and how many bytes of the next one survive).
    /// Returns how many unsynced writes it dropped whole or in part.
    pub(crate) fn crash(&self, torn: u64) -> usize {
        *lock(&self.power.countdown) = None;
        lock(&self.power.at_point).clear();
        self.power.cut.store(false, Ordering::SeqCst);
        let files = lock(&self.files);
        let dirty: Vec<&Arc<Mutex<FileState>>> =
            files.values().filter(|file| !lock(file).unsynced.is_empty()).collect();
        let torn_file = if dirty.is_empty() { usize::MAX } else { (torn % dirty.len() as u64) as usize };
        let mut dropped = 0;
        for (position, file) in dirty.into_iter().enumerate() {
            let mut file = lock(file);
            let writes = file.unsynced.len();
            if position == torn_file {
                let keep_writes = (((torn >> 16) & 0xffff) % (writes as u64 + 1)) as usize;
                let keep_bytes = ((torn >> 32) % 4096) as usize;
                file.lose_unsynced(keep_writes, keep_bytes);
                dropped += writes - keep_writes;
            } else {
                file.lose_unsynced(0, 0);
                dropped += writes;
            }
        }
        dropped
    }

    /// Cuts the power after `operations` more mutating operations: from then
    /// on every write, sync, creation, rename and removal fails until
    /// [`SimFs::crash`].
    pub(crate) fn cut_power_after(&self, operations: u64) {
        *lock(&self.power.countdown) = Some(operations);
    }

    /// Cuts the power the `nth` time (0: the next) the state machine
    /// reaches `point`.
    pub(crate) fn cut_power_at(&self, point: crate::io::CrashPoint, nth: u64) {
        lock(&self.power.at_point).push((point, nth));
    }

    /// Whether reaching `point` now cuts the power (a cut was armed there
    /// and this is its turn): the power is then cut, and every other armed
    /// cut is dropped.
    pub(crate) fn reached(&self, point: crate::io::CrashPoint) -> bool {
        let mut armed = lock(&self.power.at_point);
        let mut cut = false;
        for (_, left) in armed.iter_mut().filter(|(at, _)| *at == point) {
            match left.checked_sub(1) {
                Some(fewer) => *left = fewer,
                None => cut = true,
            }
        }
        if cut && point == crate::io::CrashPoint::LogAppended {
            // The power goes at the next disk operation: the appended
            // entries' fdatasync.
            armed.clear();
            *lock(&self.power.countdown) = Some(0);
            return false;
        }
        if cut {
            armed.clear();
            self.power.cut.store(true, Ordering::SeqCst);
        }
        cut
    }

    /// Disarms a power cut that has not happened yet.
    pub(crate) fn disarm_power_cut(&self) {
        *lock(&self.power.countdown) = None;
        lock(&self.power.at_point).clear();
    }

    /// Whether an armed power cut has happened.
    pub(crate) fn power_is_cut(&self) -> bool {
        self.power.cut.load(Ordering::SeqCst)
    }

    /// Fills the disk (`true`): writes and creations fail with `StorageFull`
    /// until it is emptied again (`false`).
    pub(crate) fn set_full(&self, full: bool) {
        self.power.full.store(full, Ordering::SeqCst);
    }

    /// How many writes and creations the full disk refused since the last
    /// call (and resets the count).
    pub(crate) fn take_refused_full(&self) -> u64 {
        self.power.refused_full.swap(0, Ordering::SeqCst)
    }

    /// Makes each append, truncation and vote write wait `latency` of
    /// simulated time ([`Duration::ZERO`]: a fast disk again).
    pub(crate) fn set_latency(&self, latency: Duration) {
        self.latency_ms.store(latency.as_millis() as u64, Ordering::SeqCst);
    }

    /// The wait [`SimFs::set_latency`] set.
    pub(crate) fn latency(&self) -> Duration {
        Duration::from_millis(self.latency_ms.load(Ordering::SeqCst))
    }

    /// How many writes, over all files, a crash now would lose.
    pub(crate) fn unsynced_writes(&self) -> usize {
        lock(&self.files).values().map(|file| lock(file).unsynced.len()).sum()
    }

    fn file(&self, path: &Path) -> io::Result<Arc<Mutex<FileState>>> {
        lock(&self.files).get(path).cloned().ok_or_else(|| not_found(path))
    }
}

struct SimFile(Arc<Mutex<FileState>>, Arc<Power>);

impl WalFile for SimFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let file = lock(&self.0);
        let start = offset as usize;
        let Some(bytes) = file.bytes.get(start..start + buf.len()) else {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "read past the end of a simulated file"));
        };
        buf.copy_from_slice(bytes);
        Ok(())
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.1.spend_space()?;
        lock(&self.0).write_at(buf, offset);
        Ok(())
    }
    fn sync_data(&self) -> io::Result<()> {
        self.1.spend()?;
        lock(&self.0).unsynced.clear();
        Ok(())
    }
    fn len(&self) -> io::Result<u64> {
        Ok(lock(&self.0).bytes.len() as u64)
    }
}

impl FileSystem for SimFs {
    fn create_dir_all(&self, _dir: &Path) -> io::Result<()> {
        Ok(())
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let files = lock(&self.files);
        let names = files
            .keys()
            .filter(|path| path.parent() == Some(dir))
            .filter_map(|path| path.file_name().and_then(|name| name.to_str()).map(str::to_string))
            .collect();
        Ok(names)
    }

    fn create_preallocated(&self, path: &Path, len: u64) -> io::Result<Arc<dyn WalFile>> {
        self.power.spend_space()?;
        let mut files = lock(&self.files);
        if files.contains_key(path) {
            return Err(io::Error::new(io::ErrorKind::AlreadyExists, format!("{} exists", path.display())));
        }
        let file = Arc::new(Mutex::new(FileState { bytes: vec![0; len as usize], unsynced: Vec::new() }));
        files.insert(path.to_path_buf(), file.clone());
        Ok(Arc::new(SimFile(file, self.power.clone())))
    }

    fn open(&self, path: &Path) -> io::Result<Arc<dyn WalFile>> {
        Ok(Arc::new(SimFile(self.file(path)?, self.power.clone())))
    }

    fn write_synced(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        self.power.spend_space()?;
        let file = Arc::new(Mutex::new(FileState { bytes: bytes.to_vec(), unsynced: Vec::new() }));
        lock(&self.files).insert(path.to_path_buf(), file);
        Ok(())
    }

    fn read(&self, path: &Path) -> io::Result<Option<Vec<u8>>> {
        Ok(lock(&self.files).get(path).map(|file| lock(file).bytes.clone()))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.power.spend()?;
        let mut files = lock(&self.files);
        let file = files.remove(from).ok_or_else(|| not_found(from))?;
        files.insert(to.to_path_buf(), file);
        Ok(())
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        self.power.spend()?;
        lock(&self.files).remove(path).map(drop).ok_or_else(|| not_found(path))
    }

    fn sync_dir(&self, _dir: &Path) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn content(fs: &SimFs, path: &Path) -> Vec<u8> {
        fs.read(path).expect("read").expect("exists")
    }

    #[test]
    fn a_crash_keeps_synced_bytes_and_loses_unsynced_ones() {
        let fs = SimFs::default();
        let path = Path::new("/log/a.wal");
        let file = fs.create_preallocated(path, 8).expect("create");
        file.write_all_at(b"abcd", 0).expect("write");
        file.sync_data().expect("sync");
        file.write_all_at(b"EFGH", 4).expect("write");
        file.write_all_at(b"xyz", 8).expect("grow");
        assert_eq!(fs.unsynced_writes(), 2);
        // The only dirty file keeps no unsynced write.
        assert_eq!(fs.crash(0), 2);
        assert_eq!(content(&fs, path), b"abcd\0\0\0\0");
        assert_eq!(fs.unsynced_writes(), 0);
    }

    #[test]
    fn a_torn_crash_keeps_a_prefix_of_the_unsynced_writes_cut_inside_one() {
        let fs = SimFs::default();
        let path = Path::new("/log/a.wal");
        let file = fs.create_preallocated(path, 4).expect("create");
        file.write_all_at(b"ab", 0).expect("write");
        file.write_all_at(b"cdef", 2).expect("write, growing the file");
        // Keep one whole write and 1 byte of the next.
        assert_eq!(fs.crash((1 << 16) | (1 << 32)), 1);
        assert_eq!(content(&fs, path), b"abc\0");
    }

    #[test]
    fn after_a_power_cut_every_write_fails_until_the_crash() {
        let fs = SimFs::default();
        let file = fs.create_preallocated(Path::new("/log/a.wal"), 4).expect("create");
        fs.cut_power_after(1);
        file.write_all_at(b"a", 0).expect("the last write before the cut");
        assert!(file.sync_data().is_err());
        assert!(fs.power_is_cut());
        assert!(file.write_all_at(b"b", 1).is_err());
        assert_eq!(fs.crash(0), 1);
        assert!(!fs.power_is_cut());
        assert_eq!(content(&fs, Path::new("/log/a.wal")), b"\0\0\0\0");
    }

    #[test]
    fn a_full_disk_refuses_writes_with_storage_full_changing_nothing_and_accepts_them_after() {
        let fs = SimFs::default();
        let path = Path::new("/log/a.wal");
        let file = fs.create_preallocated(path, 4).expect("create");
        file.write_all_at(b"ab", 0).expect("write");
        fs.set_full(true);
        let refused = file.write_all_at(b"cd", 2).expect_err("the disk is full");
        assert_eq!(refused.kind(), io::ErrorKind::StorageFull);
        let refused = fs.create_preallocated(Path::new("/log/b.wal"), 4).err().expect("no room for a segment");
        assert_eq!(refused.kind(), io::ErrorKind::StorageFull);
        assert_eq!(
            fs.write_synced(Path::new("/log/vote"), b"v").expect_err("no room").kind(),
            io::ErrorKind::StorageFull
        );
        // What was written before stays, and can still be synced.
        file.sync_data().expect("a sync needs no space");
        assert_eq!(content(&fs, path), b"ab\0\0");
        assert!(fs.read(Path::new("/log/b.wal")).expect("read").is_none());
        assert_eq!(fs.take_refused_full(), 3);
        assert_eq!(fs.take_refused_full(), 0);
        fs.set_full(false);
        file.write_all_at(b"cd", 2).expect("room again");
        assert_eq!(content(&fs, path), b"abcd");
        assert!(!fs.power_is_cut(), "a full disk is not a power cut");
    }

    #[test]
    fn a_slow_disk_reports_its_latency_until_it_is_fast_again() {
        let fs = SimFs::default();
        assert_eq!(fs.latency(), Duration::ZERO);
        fs.set_latency(Duration::from_millis(120));
        assert_eq!(fs.latency(), Duration::from_millis(120));
        fs.set_latency(Duration::ZERO);
        assert_eq!(fs.latency(), Duration::ZERO);
    }

    #[test]
    fn renames_and_removals_move_the_same_file() {
        let fs = SimFs::default();
        fs.write_synced(Path::new("/log/vote.tmp"), b"v1").expect("write");
        fs.rename(Path::new("/log/vote.tmp"), Path::new("/log/vote")).expect("rename");
        assert_eq!(fs.list(Path::new("/log")).expect("list"), vec!["vote".to_string()]);
        assert_eq!(content(&fs, Path::new("/log/vote")), b"v1");
        fs.remove(Path::new("/log/vote")).expect("remove");
        assert!(fs.read(Path::new("/log/vote")).expect("read").is_none());
        assert!(fs.open(Path::new("/log/vote")).is_err());
    }
}
