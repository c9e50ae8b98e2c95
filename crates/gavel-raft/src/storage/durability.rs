//! Making sled writes durable: flush, then a real fsync, on one dedicated thread.
//!
//! sled holds the snapshot and the committed pointer; the Raft log has its
//! own writer ([`super::wal`]). Only snapshot writes wait on this thread.
//!
//! # Why this exists
//!
//! sled 0.34's `Db::flush()` writes its buffers with `pwrite` and then calls
//! `sync_file_range(WAIT_BEFORE | WRITE | WAIT_AFTER)`. That pushes the pages to
//! the device but is **not** an fsync: it neither flushes the drive's volatile
//! cache nor persists the file-size metadata of a grown file, so an
//! acknowledged write could vanish on power loss. sled's `flush_async` must not
//! be used at all (it deadlocks with ≥ 8 concurrent callers). And sled writes
//! values and tree pages larger than a quarter of a segment (2 MiB with
//! [`crate::limits::SLED_SEGMENT_BYTES`]) to separate `blobs/<lsn>` files,
//! which it never fsyncs.
//!
//! # What it does
//!
//! Every durable request goes to one thread that, for a whole group of
//! pending requests at once (group commit):
//!
//! 1. fsyncs every blob file that appeared since the last round and then the
//!    `blobs` directory — before the data that points at them;
//! 2. calls `Db::flush()` (blocking, off the async runtime);
//! 3. calls `sync_data()` on sled's data file `db`;
//!
//! and only then completes the requests, in the order they were made, never
//! blocking an async worker.
//!
//! The directory entries of `db`, `conf` and `blobs` and the `conf` file
//! itself (which sled writes without syncing) are fsynced once when the store
//! is opened ([`sync_created_files`]).
//!
//! # Why syncing blobs before the flush is enough
//!
//! sled writes a blob file before it reserves the log record pointing to it,
//! and `apply_batch` pushes that record to the file right away. A waiter's
//! writes happen before it queues here, so the directory scan of step 1 sees
//! all of their blobs. A blob created by someone else after the scan belongs
//! to a record that comes after every record this round acknowledges, and
//! the next round syncs it before acknowledging anything after it. After a
//! power loss sled's recovery skips a record whose blob is missing and stops
//! at one whose blob is torn, so at worst it loses unacknowledged writes.

use std::collections::HashSet;
use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::wal::{Threading, WriterThread};

/// One caller (a snapshot write) waiting for its writes to be durable.
struct Waiter(oneshot::Sender<Result<(), String>>);

impl Waiter {
    fn complete(self, result: &Result<(), String>) {
        // The caller may have given up (its future was dropped); the data is
        // durable either way.
        let _ = self.0.send(result.clone());
    }
}

/// Handle to the fsync thread (or, inline, to the sled handle it would
/// own). Cheap to clone; the thread exits (and releases its sled handle)
/// once every handle is dropped.
#[derive(Clone)]
pub(crate) struct Durability {
    syncer: Syncer,
}

#[derive(Clone)]
enum Syncer {
    /// Requests go to the fsync thread, which groups them.
    Thread(mpsc::Sender<Waiter>),
    /// Each request is served by its caller (the simulator: no completion
    /// arrives at a moment the OS scheduler chose).
    Inline(Arc<InlineSyncer>),
}

/// What the fsync thread owns, owned by the handles instead.
struct InlineSyncer {
    /// sled, its data file and the blob syncer; taken when the last handle drops.
    state: Mutex<Option<(sled::Db, File, BlobSyncer)>>,
    exited: Mutex<Option<oneshot::Sender<()>>>,
    wal_writer: Mutex<Option<WriterThread>>,
}

impl Drop for InlineSyncer {
    fn drop(&mut self) {
        // As the thread does on exit: let go of sled, wait until it has
        // unlocked its data file, then signal.
        let Some((db, data_file, _)) = self.state.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner).take()
        else {
            return;
        };
        drop(db);
        if let Some(writer) = self.wal_writer.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner).take() {
            let _ = writer.join();
        }
        wait_for_sled_to_unlock(&data_file);
        if let Some(exited) = self.exited.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner).take() {
            let _ = exited.send(());
        }
    }
}

/// Resolves once the fsync thread has exited and sled has let go of its
/// locked data file (see [`wait_for_sled_to_unlock`]),
/// and the log's writer thread has exited too: every file is closed.
pub(crate) type ThreadExited = oneshot::Receiver<()>;

impl Durability {
    /// Starts the fsync thread for the sled database in `sled_dir` (or,
    /// inline, the simulator's threading, none). Its exit signal also waits for
    /// `wal_writer`, the log's writer thread.
    pub(crate) fn start(
        db: sled::Db,
        sled_dir: &Path,
        wal_writer: WriterThread,
        threading: Threading,
    ) -> io::Result<(Durability, ThreadExited)> {
        let data_file = File::open(sled_dir.join("db"))?;
        let blobs = BlobSyncer::new(sled_dir.join("blobs"));
        let (exited_tx, exited_rx) = oneshot::channel();
        if threading.is_inline() {
            let inline = InlineSyncer {
                state: Mutex::new(Some((db, data_file, blobs))),
                exited: Mutex::new(Some(exited_tx)),
                wal_writer: Mutex::new(Some(wal_writer)),
            };
            return Ok((Durability { syncer: Syncer::Inline(Arc::new(inline)) }, exited_rx));
        }
        let (requests, receiver) = mpsc::channel();
        std::thread::Builder::new().name("gavel-raft-fsync".into()).spawn(move || {
            let data_file = run(db, data_file, blobs, receiver);
            // Both threads exit once the last storage handle is dropped.
            let _ = wal_writer.join();
            wait_for_sled_to_unlock(&data_file);
            let _ = exited_tx.send(());
        })?;
        Ok((Durability { syncer: Syncer::Thread(requests) }, exited_rx))
    }

    /// Returns once every sled write made before the call is on stable storage.
    pub(crate) async fn wait_durable(&self) -> io::Result<()> {
        let requests = match &self.syncer {
            Syncer::Thread(requests) => requests,
            Syncer::Inline(inline) => {
                let mut state = inline.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                let Some((db, data_file, blobs)) = &mut *state else {
                    return Err(io::Error::other("the store is closed"));
                };
                return make_durable(db, data_file, blobs);
            }
        };
        let (reply, done) = oneshot::channel();
        requests.send(Waiter(reply)).map_err(|_| io::Error::other("the fsync thread has stopped"))?;
        match done.await {
            Ok(result) => result.map_err(io::Error::other),
            Err(_) => Err(io::Error::other("the fsync thread stopped before answering")),
        }
    }
}

/// Serves durability requests until every handle is dropped, then drops its
/// sled handle and gives the data file back.
fn run(db: sled::Db, data_file: File, mut blobs: BlobSyncer, receiver: mpsc::Receiver<Waiter>) -> File {
    while let Ok(first) = receiver.recv() {
        // Group commit: everyone who queued up while the previous fsync ran
        // is served by this one.
        let mut group = vec![first];
        group.extend(receiver.try_iter());
        let result = make_durable(&db, &data_file, &mut blobs).map_err(|e| {
            tracing::error!(error = %e, "raft storage fsync failed");
            e.to_string()
        });
        for waiter in group {
            waiter.complete(&result);
        }
    }
    data_file
}

/// How long the exit signal waits for sled's background work to let go of
/// its data file before it is sent anyway (and a reopen may then fail).
const SLED_UNLOCK_WAIT: Duration = Duration::from_secs(10);

/// Waits until sled's exclusive lock on its data file is released.
///
/// Dropping the last `sled::Db` does not close the file at once: sled 0.34
/// hands segment writes to its own thread pool, and a task still running
/// there holds the configuration that owns the locked file. A reopen in the
/// same process before that task ends fails with "could not acquire lock".
/// sled locks with `flock` (through `fs2`), which conflicts between two open
/// descriptions of the same file, so taking the lock on our own descriptor
/// succeeds exactly when sled's is gone. Ours is released on return.
fn wait_for_sled_to_unlock(data_file: &File) {
    use fs2::FileExt;
    let deadline = Instant::now() + SLED_UNLOCK_WAIT;
    loop {
        if data_file.try_lock_exclusive().is_ok() {
            let _ = FileExt::unlock(data_file);
            return;
        }
        if Instant::now() >= deadline {
            tracing::warn!("sled still holds its data file {} s after the store closed", SLED_UNLOCK_WAIT.as_secs());
            return;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn make_durable(db: &sled::Db, data_file: &File, blobs: &mut BlobSyncer) -> io::Result<()> {
    // Blobs first: sled writes a blob file before the log record that points
    // to it, so the pointer must not become durable before the blob.
    blobs.sync_new()?;
    db.flush().map_err(io::Error::other)?;
    // `flush` ended with sync_file_range; this is the real fsync (drive
    // cache flush and file size) that makes the acknowledgement true.
    data_file.sync_data()
}

/// fsyncs sled's blob files, each once, as they appear.
struct BlobSyncer {
    dir: PathBuf,
    synced: HashSet<OsString>,
}

impl BlobSyncer {
    fn new(dir: PathBuf) -> Self {
        Self { dir, synced: HashSet::new() }
    }

    fn sync_new(&mut self) -> io::Result<()> {
        let mut present = HashSet::new();
        let mut synced_any = false;
        for entry in std::fs::read_dir(&self.dir)? {
            let name = entry?.file_name();
            if !self.synced.contains(&name) {
                match File::open(self.dir.join(&name)) {
                    Ok(file) => file.sync_all()?,
                    // sled garbage-collected it in the meantime.
                    Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(e),
                }
                synced_any = true;
            }
            present.insert(name);
        }
        if synced_any {
            sync_dir(&self.dir)?;
        }
        self.synced = present;
        Ok(())
    }
}

/// fsyncs what sled creates without syncing: the `conf` file and the directory
/// entries of `db`, `conf` and `blobs`, plus the chain of parent directories
/// up to `data_dir`. Called on every open (cheap, and covers creation).
pub(crate) fn sync_created_files(data_dir: &Path, sled_dir: &Path) -> io::Result<()> {
    File::open(sled_dir.join("conf"))?.sync_all()?;
    sync_dir(&sled_dir.join("blobs"))?;
    sync_dir(sled_dir)?;
    sync_dir(data_dir)?;
    if let Some(parent) = data_dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        sync_dir(parent)?;
    }
    Ok(())
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}
