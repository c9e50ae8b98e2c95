//! The on-disk [`ColdStore`]: the state machine's cold records (finalized
//! executions, their finalized index, their lease records, the audit events
//! and their per-execution index, closed approvals and their listing and
//! retention indexes) in a redb file,
//! one redb table per [`ColdTable`].
//!
//! redb gives MVCC read transactions (a reader sees one committed version
//! while writes go on) and atomic, fsynced write transactions. The state
//! machine reads it during apply and writes it only when the application
//! flushes its overlay ([`gavel_core::State::flush_cold`]).
//!
//! A `checkpoint` table holds, next to the cold tables, the hot state and the
//! log position they were flushed at, written in the same transaction
//! ([`RedbColdStore::write_checkpoint`]: durable at a snapshot, without
//! waiting for the disk between snapshots), so the file always holds the
//! whole state at one position. A write without a checkpoint (while a
//! snapshot is restored into the store) marks it stale in the same
//! transaction, so a checkpoint that [`RedbColdStore::checkpoint`] returns
//! always matches the tables. Durable writes save redb's allocator state
//! (quick repair), so opening the file after a crash does not walk it.
//!
//! [`RedbColdStore::checkpoint_view`] opens a read transaction as a
//! [`ColdSnapshot`]: the latest checkpoint and the cold tables as they were
//! when it was opened, which a snapshot sent to a follower streams out
//! record by record on another thread while writes go on.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use gavel_core::{ColdMutation, ColdStore, ColdStoreError, ColdTable};
use redb::{Database, Durability, ReadableTable, ReadableTableMetadata, TableDefinition, TableError};

/// The redb table that holds `table`.
fn definition(table: ColdTable) -> TableDefinition<'static, &'static [u8], &'static [u8]> {
    match table {
        ColdTable::Executions => TableDefinition::new("executions"),
        ColdTable::Finalized => TableDefinition::new("finalized"),
        ColdTable::Leases => TableDefinition::new("leases"),
        ColdTable::Events => TableDefinition::new("events"),
        ColdTable::ExecutionEvents => TableDefinition::new("execution_events"),
        ColdTable::Approvals => TableDefinition::new("approvals"),
        ColdTable::ApprovalsByTime => TableDefinition::new("approvals_by_time"),
        ColdTable::ApprovalsClosed => TableDefinition::new("approvals_closed"),
        ColdTable::AuditTiles => TableDefinition::new("audit_tiles"),
        ColdTable::ExecutionsBySubmission => TableDefinition::new("executions_by_submission"),
    }
}

/// redb's page cache for the cold store. redb's default (1 GiB) would let a
/// snapshot build or install, which reads or writes every cold record once,
/// fill a gigabyte of cache per node. The state machine reads a cold record
/// rarely (a late report, a repeated submit, a read of history), but every
/// write of changes inserts its cold writes at keys spread over the tables,
/// and an install rewrites them all: the cache must hold the B-trees' branch
/// pages (about 10 MB at a million retained executions) and the pages a
/// transaction dirties, which 16 MiB did not (1M retained: install 32.1
/// MB/s, throughput 0.80x the 10k figure).
pub const COLD_CACHE_BYTES: usize = 64 * 1024 * 1024;

/// The format table: the record encoding the file was written in, under
/// [`FORMAT_KEY`] ([`gavel_core::SNAPSHOT_FORMAT`], the same number as the
/// snapshots': both carry the same records).
const FORMAT: TableDefinition<'static, &'static str, &'static [u8]> = TableDefinition::new("format");
/// Format key: the format, a u32, little-endian.
const FORMAT_KEY: &str = "format";

/// The checkpoint table: the hot state and the snapshot position the cold
/// tables are at ([`RedbColdStore::write_checkpoint`]).
const CHECKPOINT: TableDefinition<'static, &'static str, &'static [u8]> = TableDefinition::new("checkpoint");
/// Checkpoint key: the snapshot position (opaque, from the Raft layer).
const POSITION_KEY: &str = "position";
/// Checkpoint key: `State::hot_snapshot` bytes at that position.
const HOT_KEY: &str = "hot";
/// Checkpoint key: how many records each cold table held when the
/// checkpoint was written (u64s, little-endian, in [`ColdTable::ALL`]'s
/// order), so that a start can tell tables that are not at the checkpoint.
const COUNTS_KEY: &str = "counts";
/// Checkpoint key, present once cold writes past the checkpoint were
/// committed ([`RedbColdStore::write_eventually`]): the tables are no longer
/// at the checkpoint's position.
const DIRTY_KEY: &str = "dirty";

/// How often [`RedbColdStore::write_behind`] writes the file's dirty pages
/// back: a few hundred MB at the rate a snapshot's records are rewritten.
const WRITE_BEHIND_EVERY: std::time::Duration = std::time::Duration::from_millis(500);

/// A running [`RedbColdStore::write_behind`]; dropping it stops the thread
/// and waits for it.
pub struct WriteBehind {
    stop: Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for WriteBehind {
    fn drop(&mut self) {
        let (lock, wake) = &*self.stop;
        *lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = true;
        wake.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A checkpoint: the snapshot position and the hot state the cold tables
/// complete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// The snapshot position (opaque bytes from the Raft layer).
    pub position: Vec<u8>,
    /// `State::hot_snapshot` bytes at that position.
    pub hot: Vec<u8>,
    /// The records each cold table held when it was written
    /// ([`ColdTable::ALL`]'s order); `None` in a store written before they
    /// were recorded.
    pub counts: Option<Vec<u64>>,
}

/// Keys [`Absent`] remembers at most; past it, it forgets them all and
/// starts again. The keys a node looks up and does not find are mostly the
/// ids of records being created, each looked up a few times in a few
/// milliseconds (at the edge, then in apply), so a short memory holds them.
const ABSENT_KEYS_MAX: usize = 4_096;

/// Keys point reads found absent since the last write ended, so that the
/// lookups of a record being created (its id checked at the edge and again
/// in apply, by several checks each) cost one read transaction instead of
/// one each. A write clears it when it has committed, and bumps the
/// generation: a read that overlapped a write (its generation changed while
/// it read) remembers nothing, so once a write returns, no key it wrote is
/// remembered as absent.
#[derive(Default)]
struct Absent {
    generation: u64,
    /// By table (indexed by its tag).
    keys: Vec<std::collections::HashSet<Vec<u8>>>,
    len: usize,
}

impl Absent {
    fn knows(&self, table: ColdTable, key: &[u8]) -> bool {
        self.keys.get(table as usize).is_some_and(|keys| keys.contains(key))
    }

    fn remember(&mut self, table: ColdTable, key: &[u8]) {
        if self.len >= ABSENT_KEYS_MAX {
            self.keys.iter_mut().for_each(std::collections::HashSet::clear);
            self.len = 0;
        }
        let index = table as usize;
        if self.keys.len() <= index {
            self.keys.resize_with(index + 1, Default::default);
        }
        if self.keys[index].insert(key.to_vec()) {
            self.len += 1;
        }
    }

    /// A write committed: nothing read before it is known any more.
    fn forget(&mut self) {
        self.generation = self.generation.wrapping_add(1);
        self.keys.iter_mut().for_each(std::collections::HashSet::clear);
        self.len = 0;
    }
}

/// Cold records in a redb file, with the checkpoint of the hot state they
/// belong to.
pub struct RedbColdStore {
    database: Database,
    path: PathBuf,
    /// Records written (inserted or removed) since the store was opened.
    writes: AtomicU64,
    /// Keys found absent since the last write.
    absent: std::sync::Mutex<Absent>,
}

impl std::fmt::Debug for RedbColdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedbColdStore").field("path", &self.path).finish_non_exhaustive()
    }
}

fn write_error(error: impl std::fmt::Display) -> ColdStoreError {
    ColdStoreError::Write(error.to_string())
}

/// Checks that `database` is in this build's format
/// ([`gavel_core::SNAPSHOT_FORMAT`]), writing it into a file that holds
/// nothing yet.
fn check_format(database: &Database, path: &Path) -> Result<(), ColdStoreError> {
    let expected = gavel_core::SNAPSHOT_FORMAT;
    let refuse = |what: String| {
        ColdStoreError::Write(format!(
            "{} {what}; this build reads format {expected}: start the node with an empty data directory (it \
             catches up from the cluster by snapshot) or run the build that wrote it",
            path.display()
        ))
    };
    let transaction = database.begin_read().map_err(write_error)?;
    match transaction.open_table(FORMAT) {
        Ok(table) => {
            let stored = table.get(FORMAT_KEY).map_err(write_error)?.map(|value| value.value().to_vec());
            return match stored.as_deref().and_then(|bytes| <[u8; 4]>::try_from(bytes).ok()) {
                Some(bytes) if u32::from_le_bytes(bytes) == expected => Ok(()),
                Some(bytes) => Err(refuse(format!("is in cold-record format {}", u32::from_le_bytes(bytes)))),
                None => Err(refuse("has an unreadable format record".to_string())),
            };
        }
        Err(TableError::TableDoesNotExist(_)) => {}
        Err(error) => return Err(write_error(error)),
    }
    let written_before = transaction.list_tables().map_err(write_error)?.next().is_some();
    drop(transaction);
    if written_before {
        return Err(refuse("was written before cold-record format 2".to_string()));
    }
    let transaction = database.begin_write().map_err(write_error)?;
    transaction
        .open_table(FORMAT)
        .map_err(write_error)?
        .insert(FORMAT_KEY, &expected.to_le_bytes()[..])
        .map_err(write_error)?;
    transaction.commit().map_err(write_error)
}

impl RedbColdStore {
    /// Opens (or creates) the store file at `path`. A file written in
    /// another record format (by another build) is refused, never misread.
    pub fn open(path: &Path) -> Result<Arc<RedbColdStore>, ColdStoreError> {
        let database = Database::builder().set_cache_size(COLD_CACHE_BYTES).create(path).map_err(write_error)?;
        check_format(&database, path)?;
        Ok(Arc::new(RedbColdStore {
            database,
            path: path.to_path_buf(),
            writes: AtomicU64::new(0),
            absent: std::sync::Mutex::new(Absent::default()),
        }))
    }

    /// The store file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Starts writing the file's dirty pages back to the disk in the
    /// background while a long run of non-durable transactions writes it
    /// (a snapshot's records rewritten into the store), so that the durable
    /// commit at its end has little left to wait for, as RocksDB's
    /// `bytes_per_sync` does. It makes nothing durable that redb relies on:
    /// only its header commits. Stops when the guard is dropped.
    pub fn write_behind(&self) -> WriteBehind {
        let stop = Arc::new((std::sync::Mutex::new(false), std::sync::Condvar::new()));
        let path = self.path.clone();
        let stopped = stop.clone();
        let thread = std::thread::Builder::new().name("cold-write-behind".into()).spawn(move || {
            let (lock, wake) = &*stopped;
            loop {
                let done = lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                let (done, _) = wake
                    .wait_timeout_while(done, WRITE_BEHIND_EVERY, |done| !*done)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if *done {
                    return;
                }
                drop(done);
                // A failure here is not the restore's: the durable commit
                // at its end reports any write error.
                let _ = std::fs::File::open(&path).and_then(|file| file.sync_data());
            }
        });
        WriteBehind { stop, thread: thread.ok() }
    }

    /// How many records were written (inserted or removed) through this
    /// handle since it was opened.
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::Relaxed)
    }

    /// Deletes every record and the checkpoint, in one durable transaction.
    pub fn clear(&self) -> Result<(), ColdStoreError> {
        let mut transaction = self.database.begin_write().map_err(write_error)?;
        transaction.set_quick_repair(true);
        for table in ColdTable::ALL {
            transaction.delete_table(definition(table)).map_err(write_error)?;
        }
        transaction.delete_table(CHECKPOINT).map_err(write_error)?;
        let committed = transaction.commit().map_err(write_error);
        self.forget_absent();
        committed
    }

    /// Forgets the keys found absent: called after every commit (and after
    /// a failed one, which may have written some of its pages).
    fn forget_absent(&self) {
        self.absent.lock().unwrap_or_else(std::sync::PoisonError::into_inner).forget();
    }

    /// The checkpoint the cold tables are at: the snapshot position and the
    /// hot state written with them by [`RedbColdStore::write_checkpoint`].
    /// `None` if there is none, or if cold writes were committed after it.
    pub fn checkpoint(&self) -> Result<Option<Checkpoint>, ColdStoreError> {
        read_checkpoint(&self.database.begin_read().map_err(write_error)?)
    }
}

/// The checkpoint `transaction` sees, unless it is missing or stale.
fn read_checkpoint(transaction: &redb::ReadTransaction) -> Result<Option<Checkpoint>, ColdStoreError> {
    let opened = match transaction.open_table(CHECKPOINT) {
        Ok(opened) => opened,
        Err(TableError::TableDoesNotExist(_)) => return Ok(None),
        Err(error) => return Err(write_error(error)),
    };
    let read = |key: &str| opened.get(key).map(|value| value.map(|value| value.value().to_vec()));
    if read(DIRTY_KEY).map_err(write_error)?.is_some() {
        return Ok(None);
    }
    let counts = read(COUNTS_KEY).map_err(write_error)?.map(|bytes| {
        bytes.chunks_exact(8).map(|chunk| u64::from_le_bytes(chunk.try_into().expect("chunks of 8"))).collect()
    });
    match (read(POSITION_KEY).map_err(write_error)?, read(HOT_KEY).map_err(write_error)?) {
        (Some(position), Some(hot)) => Ok(Some(Checkpoint { position, hot, counts })),
        _ => Ok(None),
    }
}

/// How many records each cold table holds in `transaction`'s view.
fn table_counts(transaction: &redb::ReadTransaction) -> Result<Vec<u64>, ColdStoreError> {
    ColdTable::ALL
        .iter()
        .map(|table| match transaction.open_table(definition(*table)) {
            Ok(opened) => opened.len().map_err(write_error),
            Err(TableError::TableDoesNotExist(_)) => Ok(0),
            Err(error) => Err(write_error(error)),
        })
        .collect()
}

impl RedbColdStore {
    /// Checks that the cold tables are at `checkpoint`: each holds the
    /// number of records it held when the checkpoint was written. A store
    /// whose tables moved past (or fell behind) its checkpoint without the
    /// checkpoint being marked stale would hand a node a hot state over
    /// records of another point of the log, and the node would serve a
    /// state no replica has: the error names the first table that differs.
    /// A checkpoint written before the counts were recorded passes.
    pub fn verify(&self, checkpoint: &Checkpoint) -> Result<(), ColdStoreError> {
        let Some(recorded) = &checkpoint.counts else { return Ok(()) };
        let held = table_counts(&self.database.begin_read().map_err(write_error)?)?;
        for ((table, recorded), held) in ColdTable::ALL.iter().zip(recorded).zip(&held) {
            if recorded != held {
                return Err(ColdStoreError::Write(format!(
                    "the cold store is not at its checkpoint: table {table:?} holds {held} records, and the \
                     checkpoint recorded {recorded}"
                )));
            }
        }
        Ok(())
    }
}

impl RedbColdStore {
    /// Writes the mutations, the log `position` and the `hot` state they
    /// complete in one transaction, `durable` or without waiting for the
    /// disk (a crash may then lose it, and the file is at the checkpoint
    /// before): afterwards the file holds the whole state at `position`
    /// ([`RedbColdStore::checkpoint`]).
    pub fn write_checkpoint(
        &self,
        mutations: &[ColdMutation],
        position: &[u8],
        hot: &[u8],
        durable: bool,
    ) -> Result<(), ColdStoreError> {
        let durability = if durable { Durability::Immediate } else { Durability::None };
        self.write_with(as_records(mutations), durability, |checkpoint, counts| {
            set_checkpoint(checkpoint, position, hot, counts)
        })
        .map(drop)
    }

    /// How many records the store holds, over all tables.
    pub fn len(&self) -> usize {
        let transaction = self.database.begin_read().expect("the cold store can begin a read transaction");
        ColdTable::ALL
            .into_iter()
            .map(|table| match transaction.open_table(definition(table)) {
                Ok(opened) => usize::try_from(opened.len().expect("the cold store reads its tables")).unwrap_or(0),
                Err(TableError::TableDoesNotExist(_)) => 0,
                Err(error) => panic!("the cold store cannot open table {table:?}: {error}"),
            })
            .sum()
    }

    /// A point-in-time view of the latest checkpoint: its position, and the
    /// source of a snapshot of the whole state there (its hot state and the
    /// cold tables in the same read transaction), which the Raft layer
    /// writes out later, on another thread, while this store is written.
    /// `None` if there is no checkpoint, or a stale one.
    pub fn checkpoint_view(&self) -> Result<Option<(Vec<u8>, ColdSnapshot)>, ColdStoreError> {
        let transaction = self.database.begin_read().map_err(write_error)?;
        let Some(checkpoint) = read_checkpoint(&transaction)? else { return Ok(None) };
        Ok(Some((checkpoint.position, ColdSnapshot { hot: checkpoint.hot, transaction })))
    }

    /// Whether the store holds no record.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A read failure means the file is unreadable: the state machine cannot
/// decide without the record, so the node stops (see [`ColdStore`]).
impl ColdStore for RedbColdStore {
    /// A key found absent since the last write is answered from memory
    /// ([`Absent`]).
    fn get(&self, table: ColdTable, key: &[u8]) -> Option<Vec<u8>> {
        let read_at = self.generation_unless_absent(table, key)?;
        let found = self.read(table, key);
        if found.is_none() {
            self.remember_absent(table, key, read_at);
        }
        found
    }

    fn seek(&self, table: ColdTable, from: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
        let transaction = self.database.begin_read().expect("the cold store can begin a read transaction");
        let opened = match transaction.open_table(definition(table)) {
            Ok(opened) => opened,
            Err(TableError::TableDoesNotExist(_)) => return None,
            Err(error) => panic!("the cold store cannot open table {table:?}: {error}"),
        };
        let mut range = opened.range(from..).expect("the cold store ranges over its records");
        let (key, value) = range.next()?.expect("the cold store reads its records");
        Some((key.value().to_vec(), value.value().to_vec()))
    }

    fn seek_before(&self, table: ColdTable, before: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
        let transaction = self.database.begin_read().expect("the cold store can begin a read transaction");
        let opened = match transaction.open_table(definition(table)) {
            Ok(opened) => opened,
            Err(TableError::TableDoesNotExist(_)) => return None,
            Err(error) => panic!("the cold store cannot open table {table:?}: {error}"),
        };
        let mut range = opened.range(..before).expect("the cold store ranges over its records");
        let (key, value) = range.next_back()?.expect("the cold store reads its records");
        Some((key.value().to_vec(), value.value().to_vec()))
    }

    /// Durable; the tables move past any checkpoint, which is dropped.
    fn write(&self, mutations: &[ColdMutation]) -> Result<(), ColdStoreError> {
        self.write_with(as_records(mutations), Durability::Immediate, drop_checkpoint).map(drop)
    }

    /// One read transaction for the whole batch.
    fn range(&self, table: ColdTable, from: &[u8], limit: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
        let transaction = self.database.begin_read().expect("the cold store can begin a read transaction");
        let opened = match transaction.open_table(definition(table)) {
            Ok(opened) => opened,
            Err(TableError::TableDoesNotExist(_)) => return Vec::new(),
            Err(error) => panic!("the cold store cannot open table {table:?}: {error}"),
        };
        let range = opened.range(from..).expect("the cold store ranges over its records");
        range
            .take(limit)
            .map(|entry| {
                let (key, value) = entry.expect("the cold store reads its records");
                (key.value().to_vec(), value.value().to_vec())
            })
            .collect()
    }
}

impl RedbColdStore {
    /// `None` if `key` is known absent; otherwise the writes' generation
    /// a read of it starts at.
    fn generation_unless_absent(&self, table: ColdTable, key: &[u8]) -> Option<u64> {
        let absent = self.absent.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        (!absent.knows(table, key)).then_some(absent.generation)
    }

    /// Remembers that a read started at generation `read_at` found `key`
    /// absent, unless a write committed since: it may have written the key.
    fn remember_absent(&self, table: ColdTable, key: &[u8], read_at: u64) {
        let mut absent = self.absent.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if absent.generation == read_at {
            absent.remember(table, key);
        }
    }

    /// The value at `key`, read from the file.
    fn read(&self, table: ColdTable, key: &[u8]) -> Option<Vec<u8>> {
        let transaction = self.database.begin_read().expect("the cold store can begin a read transaction");
        let opened = match transaction.open_table(definition(table)) {
            Ok(opened) => opened,
            Err(TableError::TableDoesNotExist(_)) => return None,
            Err(error) => panic!("the cold store cannot open table {table:?}: {error}"),
        };
        opened.get(key).expect("the cold store reads its records").map(|value| value.value().to_vec())
    }
}

impl RedbColdStore {
    /// Writes the mutations in one transaction without waiting for the disk
    /// and without a checkpoint (a snapshot being restored into the store):
    /// a crash may lose them (the file stays consistent). The same
    /// transaction marks the checkpoint stale, so if they survive a crash the
    /// application does not resume from it. Pages they free are reclaimed at
    /// the next durable write.
    pub fn write_eventually(&self, mutations: &[ColdMutation]) -> Result<(), ColdStoreError> {
        self.write_with(as_records(mutations), Durability::None, mark_stale).map(drop)
    }

    /// Writes a snapshot's records into the store, one transaction per
    /// batch without waiting for the disk and marking the checkpoint stale
    /// (as [`RedbColdStore::write_eventually`]), then the checkpoint
    /// (`position` and `hot`; none given: the checkpoint is dropped) in a
    /// durable transaction, which makes the batches durable too: the install
    /// of a received snapshot. The batches come from `batches`, which another
    /// thread fills as it decodes the snapshot; an `Err` batch (the snapshot
    /// turned out corrupt, or ended early) stops the writes and is returned,
    /// leaving the checkpoint stale. Returns the number of records written.
    ///
    /// A batch should dirty fewer pages than redb's write cache holds (a
    /// tenth of [`COLD_CACHE_BYTES`]): a transaction that dirties
    /// more spills pages to the file, and its commit reads each spilled page
    /// back to checksum it and writes it a second time.
    pub fn write_records(
        &self,
        batches: impl Iterator<Item = Result<RecordBatch, String>>,
        checkpoint: Option<(&[u8], &[u8])>,
    ) -> Result<u64, ColdStoreError> {
        let mut written = 0u64;
        for batch in batches {
            let batch = batch.map_err(ColdStoreError::Write)?;
            let records = batch.records().map(|(table, key, value)| (table, key, Some(value)));
            written += self.write_with(records, Durability::None, mark_stale)?;
        }
        match checkpoint {
            Some((position, hot)) => self.write_with(std::iter::empty(), Durability::Immediate, |opened, counts| {
                set_checkpoint(opened, position, hot, counts)
            })?,
            None => self.write_with(std::iter::empty(), Durability::Immediate, drop_checkpoint)?,
        };
        Ok(written)
    }

    /// One transaction: the mutations (a value, or `None` to delete), then
    /// `checkpoint` on the checkpoint table; returns how many it wrote.
    fn write_with<'a>(
        &self,
        mutations: impl Iterator<Item = (ColdTable, &'a [u8], Option<&'a [u8]>)>,
        durability: Durability,
        checkpoint: impl FnOnce(&mut redb::Table<'_, &'static str, &'static [u8]>, &[u64]) -> Result<(), redb::StorageError>,
    ) -> Result<u64, ColdStoreError> {
        let mut transaction = self.database.begin_write().map_err(write_error)?;
        transaction.set_quick_repair(matches!(durability, Durability::Immediate));
        transaction.set_durability(durability);
        let mut written = 0u64;
        let counts = {
            let mut tables = Vec::new();
            for table in ColdTable::ALL {
                tables.push((table, transaction.open_table(definition(table)).map_err(write_error)?));
            }
            // A snapshot's records come table by table: remember the last one.
            let mut current = 0;
            for (table, key, value) in mutations {
                if tables[current].0 != table {
                    current = tables.iter().position(|(opened, _)| *opened == table).expect("every table is open");
                }
                match value {
                    Some(value) => tables[current].1.insert(key, value).map(drop),
                    None => tables[current].1.remove(key).map(drop),
                }
                .map_err(write_error)?;
                written += 1;
            }
            tables.iter().map(|(_, opened)| opened.len().map_err(write_error)).collect::<Result<Vec<u64>, _>>()?
        };
        {
            let mut opened = transaction.open_table(CHECKPOINT).map_err(write_error)?;
            checkpoint(&mut opened, &counts).map_err(write_error)?;
        }
        let committed = transaction.commit().map_err(write_error);
        self.forget_absent();
        committed?;
        self.writes.fetch_add(written, Ordering::Relaxed);
        Ok(written)
    }
}

/// Cold records decoded from a snapshot, in one buffer
/// ([`gavel_core::SnapshotRecords::next_record_into`] appends each key and
/// value to it) with their places, so that a batch costs two allocations
/// however many records it holds. [`RedbColdStore::write_records`] writes it.
#[derive(Debug, Default)]
pub struct RecordBatch {
    bytes: Vec<u8>,
    places: Vec<gavel_core::RecordPlace>,
}

impl RecordBatch {
    /// Reads the next record of `records` into the batch; `false` after the
    /// last record.
    pub fn read_from<R: std::io::Read>(
        &mut self,
        records: &mut gavel_core::SnapshotRecords<R>,
    ) -> Result<bool, gavel_core::SnapshotError> {
        match records.next_record_into(&mut self.bytes)? {
            Some(place) => {
                self.places.push(place);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// The bytes of keys and values the batch holds.
    pub fn bytes(&self) -> usize {
        self.bytes.len()
    }

    /// How many records the batch holds.
    pub fn len(&self) -> usize {
        self.places.len()
    }

    /// Whether the batch holds no record.
    pub fn is_empty(&self) -> bool {
        self.places.is_empty()
    }

    /// The records, in the order they were read: table, key, value.
    pub fn records(&self) -> impl Iterator<Item = (ColdTable, &[u8], &[u8])> + '_ {
        let mut start = 0;
        self.places.iter().map(move |place| {
            let key = &self.bytes[start..start + place.key_len];
            let value = &self.bytes[start + place.key_len..start + place.key_len + place.value_len];
            start += place.key_len + place.value_len;
            (place.table, key, value)
        })
    }
}

/// A snapshot taken from the store ([`RedbColdStore::snapshot_view`]): the
/// hot state and a redb read transaction. It writes the whole-state format
/// of [`gavel_core::SnapshotWriter`], reading each table in key order
/// straight from the view into the writer, so it holds one record at a time
/// whatever the number of records. While it is alive redb keeps the pages
/// it sees, so the file may grow by the writes made meanwhile.
pub struct ColdSnapshot {
    hot: Vec<u8>,
    transaction: redb::ReadTransaction,
}

impl gavel_raft::SnapshotSource for ColdSnapshot {
    fn write_to(self: Box<Self>, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        let read_error = |error: redb::Error| match error {
            redb::Error::Io(error) => error,
            other => std::io::Error::other(format!("cannot read the cold store for a snapshot: {other}")),
        };
        let mut tables = Vec::new();
        for table in ColdTable::ALL {
            match self.transaction.open_table(definition(table)) {
                Ok(opened) => tables.push((table, opened)),
                Err(TableError::TableDoesNotExist(_)) => {}
                Err(error) => return Err(read_error(error.into())),
            }
        }
        let mut count = 0;
        for (_, opened) in &tables {
            count += opened.len().map_err(|error| read_error(error.into()))?;
        }
        let mut writer = gavel_core::SnapshotWriter::start(out, &self.hot, count)?;
        for (table, opened) in &tables {
            for entry in opened.iter().map_err(|error| read_error(error.into()))? {
                let (key, value) = entry.map_err(|error| read_error(error.into()))?;
                writer.record(*table, key.value(), value.value())?;
            }
        }
        writer.finish().map(drop)
    }
}

/// The mutations as [`RedbColdStore::write_with`] takes them.
fn as_records(mutations: &[ColdMutation]) -> impl Iterator<Item = (ColdTable, &[u8], Option<&[u8]>)> {
    mutations.iter().map(|mutation| (mutation.table, mutation.key.as_slice(), mutation.value.as_deref()))
}

/// The tables are at `position`, with the `hot` state.
fn set_checkpoint(
    checkpoint: &mut redb::Table<'_, &'static str, &'static [u8]>,
    position: &[u8],
    hot: &[u8],
    counts: &[u64],
) -> Result<(), redb::StorageError> {
    let counts: Vec<u8> = counts.iter().flat_map(|count| count.to_le_bytes()).collect();
    checkpoint.insert(POSITION_KEY, position)?;
    checkpoint.insert(HOT_KEY, hot)?;
    checkpoint.insert(COUNTS_KEY, counts.as_slice())?;
    checkpoint.remove(DIRTY_KEY)?;
    Ok(())
}

/// A write without a checkpoint: the checkpoint no longer matches the tables.
fn mark_stale(
    checkpoint: &mut redb::Table<'_, &'static str, &'static [u8]>,
    _counts: &[u64],
) -> Result<(), redb::StorageError> {
    checkpoint.insert(DIRTY_KEY, &[][..])?;
    Ok(())
}

/// A plain write moves the tables past the checkpoint: forget it.
fn drop_checkpoint(
    checkpoint: &mut redb::Table<'_, &'static str, &'static [u8]>,
    _counts: &[u64],
) -> Result<(), redb::StorageError> {
    checkpoint.remove(POSITION_KEY)?;
    checkpoint.remove(HOT_KEY)?;
    checkpoint.remove(COUNTS_KEY)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use gavel_core::MemoryColdStore;

    use super::*;

    fn put(table: ColdTable, key: &[u8], value: &[u8]) -> ColdMutation {
        ColdMutation { table, key: key.to_vec(), value: Some(value.to_vec()) }
    }

    /// Applies one command at `now_ms`, without a caller (an `--insecure` node).
    fn apply(state: &mut gavel_core::State, now_ms: u64, command: gavel_core::Command) -> gavel_core::Reply {
        state.apply(&gavel_core::Envelope { request_id: None, now_ms, caller: None, command })
    }

    #[test]
    fn a_file_of_another_cold_record_format_is_refused_by_name() {
        let directory = tempfile::tempdir().expect("temp dir");
        let fresh = directory.path().join("fresh.redb");
        let store = RedbColdStore::open(&fresh).expect("a new file takes this build's format");
        store.write(&[put(ColdTable::Executions, b"e1", b"v")]).expect("write");
        drop(store);
        let store = RedbColdStore::open(&fresh).expect("and opens again");
        assert_eq!(store.get(ColdTable::Executions, b"e1"), Some(b"v".to_vec()));
        drop(store);

        // A file an older build wrote: cold tables, no format record.
        let older = directory.path().join("older.redb");
        let database = Database::create(&older).expect("create");
        let transaction = database.begin_write().expect("write");
        transaction
            .open_table(definition(ColdTable::Executions))
            .expect("table")
            .insert(&b"e1"[..], &b"v"[..])
            .expect("insert");
        transaction.commit().expect("commit");
        drop(database);
        let refused = RedbColdStore::open(&older).expect_err("an older file is refused");
        assert!(refused.to_string().contains("written before cold-record format 2"), "{refused}");
        assert!(refused.to_string().contains("empty data directory"), "{refused}");

        // A file of a later format.
        let later = directory.path().join("later.redb");
        let database = Database::create(&later).expect("create");
        let transaction = database.begin_write().expect("write");
        let next = (gavel_core::SNAPSHOT_FORMAT + 1).to_le_bytes();
        transaction.open_table(FORMAT).expect("table").insert(FORMAT_KEY, &next[..]).expect("insert");
        transaction.commit().expect("commit");
        drop(database);
        let refused = RedbColdStore::open(&later).expect_err("a later format is refused");
        let expected = format!("is in cold-record format {}", gavel_core::SNAPSHOT_FORMAT + 1);
        assert!(refused.to_string().contains(&expected), "{refused}");
    }

    /// The lifecycles a disk measurement runs.
    const MEASURED_LIFECYCLES: u64 = 20_000;
    /// Lifecycles between two flushes, as a node flushes its overlay in batches.
    const LIFECYCLES_PER_FLUSH: u64 = 250;
    /// The bounds the measurement asserts, per retained finalized execution:
    /// the file's size (with the pages freed by batches written without
    /// fsync, which redb reuses only after the next durable write) and the
    /// pages the tables use (with the allocator state a durable write saves
    /// for quick repair: about 290 B per execution more, in the same file).
    /// The audit tree's tiles add about 250 B of pages per execution (three
    /// leaves; a whole tile's 8 KiB value spans three 4 KiB pages): 1,654 B
    /// measured with them. The executions' listing index (decision 0096)
    /// adds about 100 B of pages: 1,753 B. The file grows in steps (redb
    /// doubles it when its regions are full): 1,711 B per execution without
    /// the index, 3,395 B with it, whose extra pages crossed a step at
    /// 20,000 executions; the bound allows one step.
    const DISK_FILE_BYTES_PER_EXECUTION_MAX: u64 = 3_600;
    const DISK_PAGE_BYTES_PER_EXECUTION_MAX: u64 = 1_850;

    /// What a retained finalized execution (submit, lease, complete, with its
    /// three audit events and their index entries) costs on disk: the cold
    /// mutations of real lifecycles, written through the redb store the way a
    /// node writes them (batches without fsync, then a durable checkpoint),
    /// measured as the file's size and as the pages the tables use.
    #[test]
    fn a_finalized_execution_takes_a_bounded_number_of_bytes_on_disk() {
        use gavel_core::{Actor, CapabilitySpec, Command, Reply, ReportOutcome, Risk, SideEffect, State, Submit};
        let directory = tempfile::tempdir().expect("temp dir");
        let path = directory.path().join("cold.redb");
        let disk = RedbColdStore::open(&path).expect("open");
        let mut state = State::new();
        state.attach_cold_store(disk.clone());
        let mut now_ms = 1_000_000;
        let spec = CapabilitySpec {
            id: "docs.read".to_string(),
            side_effect: Some(SideEffect::Read),
            risk: Some(Risk::Low),
            ..CapabilitySpec::default()
        };
        assert!(matches!(apply(&mut state, now_ms, Command::RegisterCapability(spec)), Reply::Capability(_)));
        for index in 0..MEASURED_LIFECYCLES {
            let submit = Submit {
                execution_id: format!("exec-{index:06}"),
                capability_id: "docs.read".to_string(),
                input_json: format!(r#"{{"query":"raft","page":{index}}}"#),
                actor: Actor::user("alice"),
                surface: "api".to_string(),
                correlation_id: None,
            };
            assert!(matches!(apply(&mut state, now_ms, Command::Submit(submit)), Reply::Execution { .. }));
            let poll = Command::Poll {
                worker_id: "worker-1".to_string(),
                queues: vec!["docs.read".to_string()],
                tasks_max: 1,
            };
            let Reply::Tasks(tasks) = apply(&mut state, now_ms, poll) else { panic!("a poll answers tasks") };
            let report = Command::Report {
                lease_id: tasks[0].lease.lease_id,
                worker_id: "worker-1".to_string(),
                outcome: ReportOutcome::Completed { output_json: r#"{"hits":3}"#.to_string() },
            };
            assert!(matches!(apply(&mut state, now_ms, report), Reply::Reported { .. }));
            now_ms += 10;
            if (index + 1) % LIFECYCLES_PER_FLUSH == 0 {
                state.flush_cold(|mutations| disk.write_eventually(mutations)).expect("a batch write");
            }
        }
        let hot = state.hot_snapshot();
        disk.write_checkpoint(&[], b"position", &hot, true).expect("a durable checkpoint");
        assert_eq!(state.execution_count() as u64, MEASURED_LIFECYCLES);
        // The audit tree's records (whole tiles, and a partial tile's single hashes) are counted apart.
        let tiles = disk.range(ColdTable::AuditTiles, &[], usize::MAX).len() as u64;
        let leaves = 3 * MEASURED_LIFECYCLES + 1;
        let expected_tiles =
            (0..3).map(|level| (leaves >> (8 * level)) / 256 + (leaves >> (8 * level)) % 256).sum::<u64>();
        assert_eq!(tiles, expected_tiles, "a whole tile per 256 hashes of a level, single records for the rest");
        assert_eq!(
            disk.len() as u64 - tiles,
            10 * MEASURED_LIFECYCLES + 1,
            "ten cold records per lifecycle (the submission index among them), and the registration event"
        );
        drop(state);
        let written = std::fs::metadata(&path).expect("the file").len() / MEASURED_LIFECYCLES;
        drop(disk);
        let database = Database::create(&path).expect("reopen");
        let stats = database.begin_write().expect("a write transaction").stats().expect("stats");
        let allocated = stats.allocated_pages() * stats.page_size() as u64 / MEASURED_LIFECYCLES;
        eprintln!(
            "cold.redb: {written} B per execution in the file, {allocated} B in the pages the tables use; \
             {} B stored, {} B metadata per execution ({} leaf pages, {} branch; {MEASURED_LIFECYCLES} executions, \
             {} B of hot state)",
            stats.stored_bytes() / MEASURED_LIFECYCLES,
            stats.metadata_bytes() / MEASURED_LIFECYCLES,
            stats.leaf_pages(),
            stats.branch_pages(),
            hot.len()
        );
        assert!(written <= DISK_FILE_BYTES_PER_EXECUTION_MAX, "{written} B per execution in the file");
        assert!(allocated <= DISK_PAGE_BYTES_PER_EXECUTION_MAX, "{allocated} B per execution in pages");
    }

    /// A batch read back from a snapshot stream of `records`, as an install decodes one.
    fn batch_of(records: &[(ColdTable, &[u8], &[u8])]) -> RecordBatch {
        let hot = gavel_core::State::new().hot_snapshot();
        let mut writer = gavel_core::SnapshotWriter::start(Vec::new(), &hot, records.len() as u64).expect("start");
        for (table, key, value) in records {
            writer.record(*table, key, value).expect("a record");
        }
        let bytes = writer.finish().expect("every record written");
        let (_, mut stream) = gavel_core::State::read_snapshot_hot(&bytes[..], bytes.len() as u64).expect("decodes");
        let mut batch = RecordBatch::default();
        while batch.read_from(&mut stream).expect("a record decodes") {}
        batch
    }

    #[test]
    fn a_store_whose_tables_moved_past_its_checkpoint_is_refused_by_name() {
        let directory = tempfile::tempdir().expect("temp dir");
        let store = RedbColdStore::open(&directory.path().join("cold.redb")).expect("open");
        let first = [put(ColdTable::Executions, b"e1", b"v"), put(ColdTable::Leases, b"l1", b"v")];
        store.write_checkpoint(&first, b"p1", b"hot1", true).expect("checkpoint");
        let checkpoint = store.checkpoint().expect("reads").expect("a checkpoint");
        assert_eq!(checkpoint.counts.as_deref().map(|counts| counts.iter().sum::<u64>()), Some(2));
        store.verify(&checkpoint).expect("the tables are at their checkpoint");

        // A write that neither marks the checkpoint stale nor moves it (no
        // path in the store does that; a crash that kept half of a
        // transaction would): the next start is refused, naming the table.
        store
            .write_with(as_records(&[put(ColdTable::Leases, b"l2", b"v")]), Durability::Immediate, |_, _| Ok(()))
            .expect("a raw write");
        let checkpoint = store.checkpoint().expect("reads").expect("the checkpoint still reads");
        let refused = store.verify(&checkpoint).expect_err("the tables are past the checkpoint").to_string();
        assert!(
            refused.contains("Leases") && refused.contains("holds 2") && refused.contains("recorded 1"),
            "{refused}"
        );

        // The next checkpoint records the tables as they are.
        store.write_checkpoint(&[], b"p2", b"hot2", true).expect("checkpoint");
        store.verify(&store.checkpoint().expect("reads").expect("a checkpoint")).expect("at the new checkpoint");
    }

    #[test]
    fn records_of_an_install_count_only_with_the_checkpoint_written_after_them() {
        let directory = tempfile::tempdir().expect("temp dir");
        let path = directory.path().join("cold.redb");
        let store = RedbColdStore::open(&path).expect("open");
        store.write_checkpoint(&[put(ColdTable::Executions, b"old", b"0")], b"p1", b"hot1", true).expect("checkpoint");
        let records: [(ColdTable, &[u8], &[u8]); 4] = [
            (ColdTable::Executions, b"a", b"1"),
            (ColdTable::Executions, b"b", b""),
            (ColdTable::Events, b"\0\0\0\0\0\0\0\x01", b"event"),
            (ColdTable::Leases, b"l", &[7u8; 5000]),
        ];
        let batch = batch_of(&records);
        assert_eq!(batch.len(), 4);
        assert_eq!(batch.records().collect::<Vec<_>>(), records, "a batch gives back the records it decoded");

        // A batch that fails (a corrupt snapshot) stops the install: the
        // store no longer claims any checkpoint, so a restart does not
        // resume from a half-written store.
        let failed = store.write_records(
            [Ok(batch_of(&records[..2])), Err("snapshot is truncated".to_string())].into_iter(),
            Some((&b"p2"[..], &b"hot2"[..])),
        );
        assert!(failed.expect_err("the failure is returned").to_string().contains("snapshot is truncated"));
        assert_eq!(store.checkpoint().expect("reads"), None, "the old checkpoint is stale, the new one not written");

        // Split over batches, the records land with the new checkpoint, durably.
        let written = store
            .write_records(
                [Ok(batch_of(&records[..1])), Ok(batch_of(&records[1..])), Ok(RecordBatch::default())].into_iter(),
                Some((&b"p2"[..], &b"hot2"[..])),
            )
            .expect("an install");
        assert_eq!(written, 4);
        drop(store);
        let store = RedbColdStore::open(&path).expect("reopen");
        for (table, key, value) in records {
            assert_eq!(store.get(table, key), Some(value.to_vec()), "{table:?} {key:?}");
        }
        let after = store.checkpoint().expect("reads").expect("the install's checkpoint");
        assert_eq!((after.position.as_slice(), after.hot.as_slice()), (&b"p2"[..], &b"hot2"[..]));

        // Without a position (a restore with no log position) the checkpoint is dropped.
        store.write_records([Ok(batch_of(&records[..1]))].into_iter(), None).expect("a restore");
        assert_eq!(store.checkpoint().expect("reads"), None);
    }

    #[test]
    fn reads_writes_and_seeks_like_the_memory_store_and_survive_a_reopen() {
        let directory = tempfile::tempdir().expect("temp dir");
        let path = directory.path().join("cold.redb");
        let memory = MemoryColdStore::new();
        let batches = [
            vec![put(ColdTable::Executions, b"b", b"2"), put(ColdTable::Executions, b"a", b"1")],
            vec![
                put(ColdTable::Leases, b"a", b"x"),
                ColdMutation { table: ColdTable::Executions, key: b"a".to_vec(), value: None },
            ],
        ];
        {
            let disk = RedbColdStore::open(&path).expect("open");
            for batch in &batches {
                disk.write(batch).expect("disk write");
                memory.write(batch).expect("memory write");
            }
        }
        let disk = RedbColdStore::open(&path).expect("reopen");
        for table in ColdTable::ALL {
            for key in [&b""[..], b"a", b"b", b"c"] {
                assert_eq!(disk.get(table, key), memory.get(table, key), "{table:?} {key:?}");
                assert_eq!(disk.seek(table, key), memory.seek(table, key), "seek {table:?} {key:?}");
                let before = (disk.seek_before(table, key), memory.seek_before(table, key));
                assert_eq!(before.0, before.1, "seek_before {table:?} {key:?}");
                assert_eq!(disk.range(table, key, 2), memory.range(table, key, 2), "range {table:?} {key:?}");
            }
        }
        assert_eq!(disk.seek_before(ColdTable::Executions, b"c"), Some((b"b".to_vec(), b"2".to_vec())));
        assert_eq!(disk.seek_before(ColdTable::Executions, b"b"), None, "a was deleted");
        assert_eq!(disk.len(), 2);
        disk.clear().expect("clear");
        assert!(disk.is_empty());
        assert_eq!(disk.seek(ColdTable::Executions, b""), None);
    }

    #[test]
    fn a_key_found_absent_is_remembered_until_a_write_of_any_kind_commits() {
        let directory = tempfile::tempdir().expect("temp dir");
        let disk = RedbColdStore::open(&directory.path().join("cold.redb")).expect("open");
        let key = |n: u8| vec![b'k', n];
        let remembered =
            |disk: &RedbColdStore, n: u8| disk.absent.lock().expect("lock").knows(ColdTable::Executions, &key(n));
        // Each kind of write in turn writes key n after it was found absent.
        type Write<'a> = Box<dyn Fn(&RedbColdStore, u8) + 'a>;
        let writes: [(&str, Write<'_>); 4] = [
            ("write", Box::new(|disk, n| disk.write(&[put(ColdTable::Executions, &key(n), b"v")]).expect("write"))),
            (
                "write_eventually",
                Box::new(|disk, n| disk.write_eventually(&[put(ColdTable::Executions, &key(n), b"v")]).expect("write")),
            ),
            (
                "write_checkpoint",
                Box::new(|disk, n| {
                    disk.write_checkpoint(&[put(ColdTable::Executions, &key(n), b"v")], b"p", b"h", false)
                        .expect("write")
                }),
            ),
            (
                "write_records",
                Box::new(|disk, n| {
                    let records = [(ColdTable::Executions, &key(n)[..], &b"v"[..])];
                    disk.write_records([Ok(batch_of(&records))].into_iter(), None).expect("write");
                }),
            ),
        ];
        for (n, (kind, write)) in (0u8..).zip(&writes) {
            assert_eq!(disk.get(ColdTable::Executions, &key(n)), None);
            assert!(remembered(&disk, n), "{kind}: an absent key is remembered");
            assert_eq!(disk.get(ColdTable::Executions, &key(n)), None, "{kind}: and answered from memory");
            write(&disk, n);
            assert!(!remembered(&disk, n), "{kind}: a write forgets it");
            assert_eq!(disk.get(ColdTable::Executions, &key(n)), Some(b"v".to_vec()), "{kind}");
        }
        // A delete, and clearing the store, are writes too.
        disk.write(&[ColdMutation { table: ColdTable::Executions, key: key(0), value: None }]).expect("delete");
        assert_eq!(disk.get(ColdTable::Executions, &key(0)), None);
        assert_eq!(disk.get(ColdTable::Leases, &key(1)), None);
        assert!(disk.absent.lock().expect("lock").knows(ColdTable::Leases, &key(1)));
        assert!(!remembered(&disk, 1), "by table: key 1 is in Executions");
        disk.clear().expect("clear");
        assert!(!disk.absent.lock().expect("lock").knows(ColdTable::Leases, &key(1)));
        assert_eq!(disk.get(ColdTable::Executions, &key(1)), None, "cleared");
        // The memory is bounded: past its size it starts again.
        for n in 0..=ABSENT_KEYS_MAX as u32 {
            assert_eq!(disk.get(ColdTable::Events, &n.to_be_bytes()), None);
        }
        assert!(disk.absent.lock().expect("lock").len <= ABSENT_KEYS_MAX);
    }

    /// A read that found a key absent while a write of it committed (the
    /// read's view was from before the commit) is not remembered: once the
    /// write has returned, the key is found.
    #[test]
    fn a_read_overlapping_a_write_is_not_remembered() {
        let directory = tempfile::tempdir().expect("temp dir");
        let disk = RedbColdStore::open(&directory.path().join("cold.redb")).expect("open");
        let read_at = disk.generation_unless_absent(ColdTable::Executions, b"k").expect("not known absent yet");
        assert_eq!(disk.read(ColdTable::Executions, b"k"), None, "the read, before the write");
        disk.write(&[put(ColdTable::Executions, b"k", b"v")]).expect("the write commits");
        disk.remember_absent(ColdTable::Executions, b"k", read_at);
        assert_eq!(disk.get(ColdTable::Executions, b"k"), Some(b"v".to_vec()));
        // A read after the write, of a key it did not write, is remembered.
        let read_at = disk.generation_unless_absent(ColdTable::Executions, b"j").expect("not known absent yet");
        disk.remember_absent(ColdTable::Executions, b"j", read_at);
        assert_eq!(disk.generation_unless_absent(ColdTable::Executions, b"j"), None);
    }
}
