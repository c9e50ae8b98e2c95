//! Cold records: the part of the replicated state that no decision needs
//! often (finalized executions, the lease records of their attempts, closed
//! approvals and the audit trail),
//! kept behind the synchronous [`ColdStore`] interface so that a node can hold
//! it on disk while the hot set stays in memory.
//!
//! The core never does IO of its own. `apply` writes cold records into an
//! in-memory overlay (`ColdRecords`), which is part of the state until the
//! shell flushes it into its store at a checkpoint ([`crate::State::flush_cold`]);
//! reads look in the overlay first, then in the store. The store is only read
//! during apply, never written, so a replica may flush whenever it likes.
//!
//! **Determinism.** Replicas flush at different points, so neither the overlay
//! nor the store is hashed. Instead every part carries a rolling SHA-256
//! digest of every cold mutation it made, in apply order (table, key, value or
//! deletion): two replicas that applied the same commands have the same
//! digests, whichever store they run and whenever they flushed, and the digest
//! is in the hot state, hence in the state hash and in snapshots.
//!
//! **Encoding.** Values are bincode with variable-length integers
//! (`cold_encoding`), hashes are bytes in them (`model::hash_hex`), and the
//! parts leave out what the key already says (an execution's id, an event's
//! cursor): the hot state keeps bincode's fixed-width default.
//!
//! [`MemoryColdStore`] is the implementation for tests and for a state that is
//! never flushed; the server implements the trait over an embedded store.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::io::Read;
use std::sync::{Arc, RwLock};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Why a snapshot could not be restored.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// The bytes are not a snapshot of this state machine's format.
    #[error("snapshot is not decodable: {0}")]
    Decode(String),
    /// The bytes are a snapshot of another format (another build's).
    #[error("snapshot is of another format: {0}")]
    Format(String),
}

/// The tables of the cold store. The discriminant is the table's stable tag
/// on disk and in the digest: never renumber.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ColdTable {
    /// Finalized executions by id.
    Executions = 1,
    /// The finalized index: finalized-at (big-endian) then id, no value.
    Finalized = 2,
    /// Lease records of finalized executions, by lease id (big-endian).
    Leases = 3,
    /// Audit events by cursor (big-endian).
    Events = 4,
    /// The per-execution event index: id length, id, cursor; no value.
    ExecutionEvents = 5,
    /// Closed approvals (rejected, consumed, cancelled) by id.
    Approvals = 6,
    /// The closed approvals' listing index: requested-at (big-endian) then
    /// id, no value.
    ApprovalsByTime = 7,
    /// The closed approvals' retention index: closed-at (big-endian) then
    /// id, no value.
    ApprovalsClosed = 8,
    /// Full tiles of the audit trail's Merkle tree (`audit_tree.rs`): tile
    /// level (one byte), then tile index (big-endian); the value is 256
    /// hashes. Never compacted.
    AuditTiles = 9,
    /// Every retained execution, non-final or finalized, by submitted-at
    /// (big-endian) then id, no value: the listing index of
    /// `ListExecutions` (issue #40), written at submission and dropped with
    /// the execution by retention.
    ExecutionsBySubmission = 10,
}

impl ColdTable {
    /// Every table, in tag order.
    pub const ALL: [ColdTable; 10] = [
        ColdTable::Executions,
        ColdTable::Finalized,
        ColdTable::Leases,
        ColdTable::Events,
        ColdTable::ExecutionEvents,
        ColdTable::Approvals,
        ColdTable::ApprovalsByTime,
        ColdTable::ApprovalsClosed,
        ColdTable::AuditTiles,
        ColdTable::ExecutionsBySubmission,
    ];

    /// The table's stable tag.
    pub fn tag(self) -> u8 {
        self as u8
    }

    /// The table with this tag.
    pub fn from_tag(tag: u8) -> Option<ColdTable> {
        ColdTable::ALL.into_iter().find(|table| table.tag() == tag)
    }
}

/// One write to a cold table: `value: None` deletes the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColdMutation {
    /// The table written.
    pub table: ColdTable,
    /// The key.
    pub key: Vec<u8>,
    /// The new value, or `None` for a deletion.
    pub value: Option<Vec<u8>>,
}

/// Why a cold store could not be written.
#[derive(Debug, thiserror::Error)]
pub enum ColdStoreError {
    /// The store's backend failed.
    #[error("cold store write failed: {0}")]
    Write(String),
}

/// What the state machine sees of a cold store: point reads, ordered seeks and
/// atomic batch writes. Reads are infallible for the core: a store that cannot
/// read its own data is a broken invariant and the implementation panics
/// (the node crashes and recovers from its last checkpoint), since apply
/// cannot make a deterministic decision without the record.
pub trait ColdStore: Send + Sync + 'static {
    /// The value at `key`.
    fn get(&self, table: ColdTable, key: &[u8]) -> Option<Vec<u8>>;
    /// The first entry whose key is at or after `from`.
    fn seek(&self, table: ColdTable, from: &[u8]) -> Option<(Vec<u8>, Vec<u8>)>;
    /// The last entry whose key is before `before` (newest-first listings).
    fn seek_before(&self, table: ColdTable, before: &[u8]) -> Option<(Vec<u8>, Vec<u8>)>;
    /// Applies the mutations atomically, in order.
    fn write(&self, mutations: &[ColdMutation]) -> Result<(), ColdStoreError>;
    /// Up to `limit` entries in key order from `from` on. The default seeks
    /// entry by entry; a store with cursors reads them in one go (a
    /// whole-state export reads every record through it).
    fn range(&self, table: ColdTable, from: &[u8], limit: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut entries = Vec::new();
        let mut cursor = from.to_vec();
        while entries.len() < limit {
            let Some((key, value)) = self.seek(table, &cursor) else { break };
            cursor = key.clone();
            cursor.push(0);
            entries.push((key, value));
        }
        entries
    }
}

/// Entries per [`ColdStore::range`] call of a whole-state export.
const EXPORT_BATCH: usize = 4_096;

/// Every entry of a memory store, by table then key.
type MemoryTables = BTreeMap<(ColdTable, Vec<u8>), Vec<u8>>;

/// A cold store in memory: ordered maps behind a lock.
#[derive(Debug, Default)]
pub struct MemoryColdStore {
    tables: RwLock<MemoryTables>,
}

impl MemoryColdStore {
    /// An empty store.
    pub fn new() -> Arc<MemoryColdStore> {
        Arc::new(MemoryColdStore::default())
    }

    /// How many entries the store holds, over all tables.
    pub fn len(&self) -> usize {
        self.tables.read().expect("memory cold store lock").len()
    }

    /// Whether the store holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl ColdStore for MemoryColdStore {
    fn get(&self, table: ColdTable, key: &[u8]) -> Option<Vec<u8>> {
        self.tables.read().expect("memory cold store lock").get(&(table, key.to_vec())).cloned()
    }

    fn seek(&self, table: ColdTable, from: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
        let tables = self.tables.read().expect("memory cold store lock");
        let ((found, key), value) = tables.range((table, from.to_vec())..).next()?;
        (*found == table).then(|| (key.clone(), value.clone()))
    }

    fn seek_before(&self, table: ColdTable, before: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
        let tables = self.tables.read().expect("memory cold store lock");
        let ((_, key), value) = tables.range((table, Vec::new())..(table, before.to_vec())).next_back()?;
        Some((key.clone(), value.clone()))
    }

    fn write(&self, mutations: &[ColdMutation]) -> Result<(), ColdStoreError> {
        let mut tables = self.tables.write().expect("memory cold store lock");
        for mutation in mutations {
            let key = (mutation.table, mutation.key.clone());
            match &mutation.value {
                Some(value) => tables.insert(key, value.clone()),
                None => tables.remove(&key),
            };
        }
        Ok(())
    }
}

/// The store a state part reads its flushed cold records from.
#[derive(Clone)]
pub(crate) struct StoreHandle(Arc<dyn ColdStore>);

impl Default for StoreHandle {
    /// A fresh, empty in-memory store.
    fn default() -> Self {
        StoreHandle(MemoryColdStore::new())
    }
}

/// The cold records of one table of one state part: the rolling digest (hot,
/// serialized, hashed), the unflushed overlay and the store behind it (both
/// skipped by serde: a snapshot exports them explicitly, see
/// [`crate::State::snapshot`]).
#[derive(Clone, Serialize, Deserialize)]
pub(crate) struct ColdRecords {
    table: ColdTable,
    digest: [u8; 32],
    /// Written since the last flush: `None` marks a deletion of a key the
    /// store holds (a deletion of a key only the overlay held just drops it).
    #[serde(skip)]
    overlay: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    #[serde(skip)]
    store: StoreHandle,
    /// Whether the store may hold records of this table (one was attached,
    /// or the overlay was flushed): only then does a deletion need a
    /// tombstone. A fresh state's own store is empty, so a state that is
    /// never flushed keeps no tombstones.
    #[serde(skip)]
    store_may_hold: bool,
}

impl std::fmt::Debug for ColdRecords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ColdRecords")
            .field("table", &self.table)
            .field("digest", &hex::encode(self.digest))
            .field("unflushed", &self.overlay.len())
            .finish_non_exhaustive()
    }
}

/// Equal digests mean the same mutations in the same order, hence the same
/// records, wherever they are kept.
impl PartialEq for ColdRecords {
    fn eq(&self, other: &Self) -> bool {
        self.table == other.table && self.digest == other.digest
    }
}

impl Eq for ColdRecords {}

impl ColdRecords {
    /// No records yet, in `table`.
    pub(crate) fn new(table: ColdTable) -> ColdRecords {
        ColdRecords {
            table,
            digest: [0; 32],
            overlay: BTreeMap::new(),
            store: StoreHandle::default(),
            store_may_hold: false,
        }
    }

    /// The table these records are in.
    pub(crate) fn table(&self) -> ColdTable {
        self.table
    }

    /// The encoded value at `key`.
    pub(crate) fn get_raw(&self, key: &[u8]) -> Option<Cow<'_, [u8]>> {
        match self.overlay.get(key) {
            Some(Some(value)) => Some(Cow::Borrowed(value)),
            Some(None) => None,
            None => self.store.0.get(self.table, key).map(Cow::Owned),
        }
    }

    /// The decoded value at `key`.
    pub(crate) fn get<T: DeserializeOwned>(&self, key: &[u8]) -> Option<T> {
        self.get_raw(key).map(|bytes| decode(&bytes))
    }

    /// Whether `key` is present.
    pub(crate) fn contains(&self, key: &[u8]) -> bool {
        match self.overlay.get(key) {
            Some(value) => value.is_some(),
            None => self.store.0.get(self.table, key).is_some(),
        }
    }

    /// Stores `value` at `key`.
    pub(crate) fn put<T: Serialize>(&mut self, key: Vec<u8>, value: &T) {
        let bytes = encode(value);
        self.mix(&key, Some(&bytes));
        self.overlay.insert(key, Some(bytes));
    }

    /// Deletes `key` (present or not: the digest records the deletion either
    /// way). It reads nothing: with a store that may hold the key the
    /// deletion is a tombstone (deleting a missing key at flush is harmless).
    pub(crate) fn delete(&mut self, key: &[u8]) {
        self.mix(key, None);
        if self.store_may_hold {
            self.overlay.insert(key.to_vec(), None);
        } else {
            self.overlay.remove(key);
        }
    }

    /// The first present entry whose key is at or after `from`.
    pub(crate) fn seek(&self, from: &[u8]) -> Option<(Vec<u8>, Cow<'_, [u8]>)> {
        let mut cursor = from.to_vec();
        let stored = loop {
            match self.store.0.seek(self.table, &cursor) {
                None => break None,
                Some((key, value)) if !self.overlay.contains_key(&key) => break Some((key, value)),
                // The overlay decides this key: look past it in the store.
                Some((mut key, _)) => {
                    key.push(0);
                    cursor = key;
                }
            }
        };
        let overlaid =
            self.overlay.range(from.to_vec()..).find_map(|(key, value)| value.as_ref().map(|value| (key, value)));
        match (stored, overlaid) {
            (Some((stored_key, _)), Some((key, value))) if *key <= stored_key => {
                Some((key.clone(), Cow::Borrowed(value.as_slice())))
            }
            (Some((key, value)), _) => Some((key, Cow::Owned(value))),
            (None, Some((key, value))) => Some((key.clone(), Cow::Borrowed(value.as_slice()))),
            (None, None) => None,
        }
    }

    /// The last present entry whose key is before `before`: the store's,
    /// unless the overlay decides that key or holds a later one.
    pub(crate) fn seek_before(&self, before: &[u8]) -> Option<(Vec<u8>, Cow<'_, [u8]>)> {
        let mut cursor = before.to_vec();
        let stored = loop {
            match self.store.0.seek_before(self.table, &cursor) {
                None => break None,
                Some((key, value)) if !self.overlay.contains_key(&key) => break Some((key, value)),
                // The overlay decides this key: look before it in the store.
                Some((key, _)) => cursor = key,
            }
        };
        let overlaid = self
            .overlay
            .range(..before.to_vec())
            .rev()
            .find_map(|(key, value)| value.as_ref().map(|value| (key, value)));
        match (stored, overlaid) {
            (Some((stored_key, _)), Some((key, value))) if *key >= stored_key => {
                Some((key.clone(), Cow::Borrowed(value.as_slice())))
            }
            (Some((key, value)), _) => Some((key, Cow::Owned(value))),
            (None, Some((key, value))) => Some((key.clone(), Cow::Borrowed(value.as_slice()))),
            (None, None) => None,
        }
    }

    /// Every present entry, in key order (for a whole-state export): the
    /// store read in batches, overridden by the overlay.
    pub(crate) fn entries(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut merged = BTreeMap::new();
        let mut from = Vec::new();
        loop {
            let batch = self.store.0.range(self.table, &from, EXPORT_BATCH);
            let full = batch.len() == EXPORT_BATCH;
            if let Some((last, _)) = batch.last() {
                from = last.clone();
                from.push(0);
            }
            merged.extend(batch.into_iter().filter(|(key, _)| !self.overlay.contains_key(key)));
            if !full {
                break;
            }
        }
        merged.extend(self.overlay.iter().filter_map(|(key, value)| value.clone().map(|value| (key.clone(), value))));
        merged.into_iter().collect()
    }

    /// Loads an exported entry without touching the digest (the digest came
    /// with the export).
    pub(crate) fn load(&mut self, key: Vec<u8>, value: Vec<u8>) {
        self.overlay.insert(key, Some(value));
    }

    /// Moves the unflushed writes, in key order, to the end of `into`,
    /// leaving the overlay empty until [`ColdRecords::restore_pending`] or
    /// [`ColdRecords::clear_pending`].
    pub(crate) fn take_pending(&mut self, into: &mut Vec<ColdMutation>) {
        let table = self.table;
        into.extend(std::mem::take(&mut self.overlay).into_iter().map(|(key, value)| ColdMutation {
            table,
            key,
            value,
        }));
    }

    /// Moves this table's writes out of `taken` back into the overlay (a
    /// flush failed), leaving the other tables' writes in `taken`.
    pub(crate) fn restore_pending(&mut self, taken: &mut Vec<ColdMutation>) {
        let table = self.table;
        let (mine, others): (Vec<ColdMutation>, Vec<ColdMutation>) =
            std::mem::take(taken).into_iter().partition(|mutation| mutation.table == table);
        self.overlay.extend(mine.into_iter().map(|mutation| (mutation.key, mutation.value)));
        *taken = others;
    }

    /// How many writes are unflushed.
    pub(crate) fn pending_count(&self) -> usize {
        self.overlay.len()
    }

    /// Forgets the unflushed writes once the store holds them.
    pub(crate) fn clear_pending(&mut self) {
        self.overlay.clear();
        self.store_may_hold = true;
    }

    /// Reads flushed records from `store` from now on.
    pub(crate) fn attach(&mut self, store: Arc<dyn ColdStore>) {
        self.store = StoreHandle(store);
        self.store_may_hold = true;
    }

    fn mix(&mut self, key: &[u8], value: Option<&[u8]>) {
        let mut hasher = Sha256::new();
        hasher.update(self.digest);
        hasher.update([self.table.tag()]);
        hasher.update((key.len() as u64).to_be_bytes());
        hasher.update(key);
        match value {
            Some(value) => {
                hasher.update([1]);
                hasher.update(value);
            }
            None => hasher.update([0]),
        }
        self.digest = hasher.finalize().into();
    }
}

/// The first bytes of every snapshot and backup ([`SnapshotWriter`]).
pub const SNAPSHOT_MAGIC: &[u8; 8] = b"GAVELSNP";

/// The snapshot format this build writes and reads: the hot state's and the
/// cold records' encodings. Bump it whenever either changes. Format 2: cold
/// values in varint bincode, input hashes as bytes, events by reference,
/// closed approvals cold (format 1, never named in the bytes, was before).
/// Format 3: the audit trail's Merkle tree (frontier and tile tails in the
/// hot state, full tiles in the `AuditTiles` table), approval policies in
/// the hot state, and an approval's quorum and standing terms on its record.
/// Format 4: the executions' listing index (the `ExecutionsBySubmission`
/// table). Format 5: no new encoding here, but the log a `cold.redb`
/// checkpoint is resumed with may hold `Command::Handoff` entries, which a
/// format-4 build cannot decode (decision 0107): it must not open the data.
/// Format 6: likewise for `Command::DecideThenResume` (decision 0108).
pub const SNAPSHOT_FORMAT: u32 = 6;

/// Reads and checks the snapshot header ([`SNAPSHOT_MAGIC`],
/// [`SNAPSHOT_FORMAT`]) at the start of `reader`.
pub(crate) fn read_snapshot_header(reader: &mut impl std::io::Read) -> Result<(), SnapshotError> {
    let mut header = [0u8; 12];
    reader
        .read_exact(&mut header)
        .map_err(|_| SnapshotError::Decode("shorter than a snapshot header: not a Gavel snapshot".to_string()))?;
    if &header[..8] != SNAPSHOT_MAGIC {
        return Err(SnapshotError::Format(
            "it does not start with the snapshot header (a snapshot or backup written before format 2, or not a \
             Gavel snapshot)"
                .to_string(),
        ));
    }
    let format = u32::from_le_bytes(header[8..].try_into().expect("four bytes"));
    if format != SNAPSHOT_FORMAT {
        return Err(SnapshotError::Format(format!(
            "it is in snapshot format {format}; this build reads format {SNAPSHOT_FORMAT}"
        )));
    }
    Ok(())
}

/// Writes the whole-state snapshot format ([`crate::State::snapshot`]) to
/// `out` record by record, so a shell can stream the cold records out of
/// its store (a point-in-time view) without holding them in memory.
///
/// The first bytes name the format ([`SNAPSHOT_MAGIC`], then
/// [`SNAPSHOT_FORMAT`] as a u32, little-endian), so a snapshot or backup
/// written by a build with another record encoding is refused by name
/// instead of being misread. Then bincode 1's encoding of `(State, Vec<(u8, Vec<u8>,
/// Vec<u8>)>)`: the hot state ([`crate::State::hot_snapshot`]), the record
/// count (u64, little-endian), then per record its table tag, its key and
/// its value, each byte string prefixed by its length (u64, little-endian).
/// The count comes first, so the writer is told it up front and
/// [`SnapshotWriter::finish`] checks that exactly that many were written.
pub struct SnapshotWriter<W: std::io::Write> {
    out: W,
    records_left: u64,
}

impl<W: std::io::Write> SnapshotWriter<W> {
    /// Writes the hot state and the count of the `records` that follow.
    pub fn start(mut out: W, hot: &[u8], records: u64) -> std::io::Result<SnapshotWriter<W>> {
        out.write_all(SNAPSHOT_MAGIC)?;
        out.write_all(&SNAPSHOT_FORMAT.to_le_bytes())?;
        out.write_all(hot)?;
        out.write_all(&records.to_le_bytes())?;
        Ok(SnapshotWriter { out, records_left: records })
    }

    /// Writes one cold record (present: cold snapshots hold no deletions).
    pub fn record(&mut self, table: ColdTable, key: &[u8], value: &[u8]) -> std::io::Result<()> {
        self.records_left = self.records_left.checked_sub(1).ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "more cold records than the snapshot announced")
        })?;
        self.out.write_all(&[table.tag()])?;
        for bytes in [key, value] {
            self.out.write_all(&(bytes.len() as u64).to_le_bytes())?;
            self.out.write_all(bytes)?;
        }
        Ok(())
    }

    /// Checks that every announced record was written and hands `out` back.
    pub fn finish(self) -> std::io::Result<W> {
        if self.records_left != 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{} announced cold records were not written", self.records_left),
            ));
        }
        Ok(self.out)
    }
}

/// Reads the cold records of a [`SnapshotWriter`] stream one by one, after
/// [`crate::State::read_snapshot_hot`] decoded its hot state. Every length
/// is checked against the bytes the stream has left before anything is
/// allocated, so a corrupt snapshot is an error, never a huge allocation.
pub struct SnapshotRecords<R: std::io::Read> {
    reader: std::io::Take<R>,
    records_left: u64,
}

/// The smallest encoded record: a tag and two empty byte strings.
const RECORD_BYTES_MIN: u64 = 1 + 8 + 8;

impl<R: std::io::Read> SnapshotRecords<R> {
    /// Reads the record count; `reader` is positioned after the hot state
    /// and limited to the bytes the snapshot has left.
    pub(crate) fn start(mut reader: std::io::Take<R>) -> Result<SnapshotRecords<R>, SnapshotError> {
        let records_left = read_u64(&mut reader)?;
        if records_left.saturating_mul(RECORD_BYTES_MIN) > reader.limit() {
            return Err(truncated(format!("{records_left} cold records cannot fit in {} bytes", reader.limit())));
        }
        Ok(SnapshotRecords { reader, records_left })
    }

    /// How many records are still to be read.
    pub fn remaining(&self) -> u64 {
        self.records_left
    }

    /// The next record (always with a value), or `None` after the last.
    pub fn next_record(&mut self) -> Result<Option<ColdMutation>, SnapshotError> {
        let mut key = Vec::new();
        let Some(record) = self.next_record_into(&mut key)? else { return Ok(None) };
        let value = key.split_off(record.key_len);
        Ok(Some(ColdMutation { table: record.table, key, value: Some(value) }))
    }

    /// Appends the next record's key, then its value, to `bytes` and says
    /// where they are, or returns `None` after the last record: the records
    /// of [`SnapshotRecords::next_record`] without an allocation per record,
    /// for a shell that writes them in batches.
    pub fn next_record_into(&mut self, bytes: &mut Vec<u8>) -> Result<Option<RecordPlace>, SnapshotError> {
        if self.records_left == 0 {
            return Ok(None);
        }
        self.records_left -= 1;
        let mut tag = [0u8];
        read_exact(&mut self.reader, &mut tag)?;
        let table = ColdTable::from_tag(tag[0])
            .ok_or_else(|| SnapshotError::Decode(format!("unknown cold table tag {}", tag[0])))?;
        let key_len = read_bytes_into(&mut self.reader, bytes)?;
        let value_len = read_bytes_into(&mut self.reader, bytes)?;
        Ok(Some(RecordPlace { table, key_len, value_len }))
    }
}

/// Where [`SnapshotRecords::next_record_into`] put a record: its table, and
/// the lengths of its key and of its value, appended in that order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordPlace {
    /// The record's table.
    pub table: ColdTable,
    /// The key's length, in bytes.
    pub key_len: usize,
    /// The value's length, in bytes.
    pub value_len: usize,
}

fn truncated(what: String) -> SnapshotError {
    SnapshotError::Decode(format!("snapshot is truncated or corrupt: {what}"))
}

fn read_exact<R: std::io::Read>(reader: &mut std::io::Take<R>, buffer: &mut [u8]) -> Result<(), SnapshotError> {
    reader.read_exact(buffer).map_err(|error| truncated(error.to_string()))
}

fn read_u64<R: std::io::Read>(reader: &mut std::io::Take<R>) -> Result<u64, SnapshotError> {
    let mut bytes = [0u8; 8];
    read_exact(reader, &mut bytes)?;
    Ok(u64::from_le_bytes(bytes))
}

/// Reads a length-prefixed byte string onto the end of `bytes` and returns
/// its length; a length longer than what the stream has left is an error
/// before anything is allocated.
fn read_bytes_into<R: std::io::Read>(
    reader: &mut std::io::Take<R>,
    bytes: &mut Vec<u8>,
) -> Result<usize, SnapshotError> {
    let length = read_u64(reader)?;
    if length > reader.limit() {
        return Err(truncated(format!("a record of {length} bytes with {} bytes left", reader.limit())));
    }
    let start = bytes.len();
    bytes.resize(start + length as usize, 0);
    read_exact(reader, &mut bytes[start..])?;
    Ok(length as usize)
}

/// The encoding of cold record values: bincode with variable-length
/// integers, so lengths, counts, enum tags and small numbers take one byte
/// instead of eight or four (the hot state keeps bincode's fixed-width
/// default). Hashes are bytes in it ([`crate::model`]'s `hash_hex`).
fn cold_encoding() -> impl bincode::Options {
    bincode::DefaultOptions::new()
}

/// Encodes a cold record value.
fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    use bincode::Options;
    cold_encoding().serialize(value).expect("cold records serialize: plain data")
}

/// Decodes a cold record this state machine wrote; anything else is a corrupt
/// store, a broken invariant.
fn decode<T: DeserializeOwned>(bytes: &[u8]) -> T {
    use bincode::Options;
    cold_encoding().deserialize(bytes).expect("cold records decode: the state machine wrote them")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_merge_the_overlay_over_the_store_and_deletions_hide_stored_keys() {
        let store = MemoryColdStore::new();
        let mut records = ColdRecords::new(ColdTable::Leases);
        records.attach(store.clone());
        for key in [1u8, 2, 3] {
            records.put(vec![key], &u32::from(key));
        }
        let mut flushed = Vec::new();
        records.take_pending(&mut flushed);
        store.write(&flushed).expect("memory write");
        records.clear_pending();
        records.delete(&[2]);
        records.put(vec![4], &4u32);
        records.delete(&[9]);
        assert_eq!(records.pending_count(), 3, "with a store attached, deletions are tombstones");
        let mut unattached = ColdRecords::new(ColdTable::Leases);
        unattached.put(vec![1], &1u32);
        unattached.delete(&[1]);
        assert_eq!(unattached.pending_count(), 0, "a never flushed state keeps no tombstones");
        let keys: Vec<u8> = records.entries().into_iter().map(|(key, _)| key[0]).collect();
        assert_eq!(keys, vec![1, 3, 4]);
        assert_eq!(records.get::<u32>(&[3]), Some(3));
        assert!(!records.contains(&[2]));
        assert_eq!(records.seek(&[2]).map(|(key, _)| key), Some(vec![3]));
        assert_eq!(store.range(ColdTable::Leases, &[2], 5).len(), 2, "keys 2 and 3 are stored");
    }

    #[test]
    fn the_digest_depends_on_the_mutations_not_on_when_they_were_flushed() {
        let mut flushed = ColdRecords::new(ColdTable::Executions);
        let store = MemoryColdStore::new();
        flushed.attach(store.clone());
        let mut unflushed = ColdRecords::new(ColdTable::Executions);
        for key in 0u8..5 {
            flushed.put(vec![key], &"x");
            unflushed.put(vec![key], &"x");
            if key == 2 {
                let mut taken = Vec::new();
                flushed.take_pending(&mut taken);
                store.write(&taken).expect("memory write");
                flushed.clear_pending();
            }
        }
        flushed.delete(&[1]);
        unflushed.delete(&[1]);
        assert_eq!(flushed, unflushed);
        assert_eq!(flushed.entries(), unflushed.entries());
        unflushed.put(vec![7], &"y");
        assert_ne!(flushed, unflushed);
    }

    #[test]
    fn taken_writes_move_out_in_key_order_and_back_untouched() {
        let mut leases = ColdRecords::new(ColdTable::Leases);
        let mut events = ColdRecords::new(ColdTable::Events);
        leases.attach(MemoryColdStore::new());
        for key in [3u8, 1, 2] {
            leases.put(vec![key], &u32::from(key));
        }
        leases.delete(&[9]);
        events.put(vec![5], &"e");
        let before = (leases.entries(), leases.pending_count(), events.entries());

        let mut taken = Vec::new();
        leases.take_pending(&mut taken);
        events.take_pending(&mut taken);
        let order: Vec<(ColdTable, Vec<u8>, bool)> =
            taken.iter().map(|m| (m.table, m.key.clone(), m.value.is_some())).collect();
        assert_eq!(
            order,
            vec![
                (ColdTable::Leases, vec![1], true),
                (ColdTable::Leases, vec![2], true),
                (ColdTable::Leases, vec![3], true),
                (ColdTable::Leases, vec![9], false),
                (ColdTable::Events, vec![5], true),
            ]
        );
        assert_eq!((leases.pending_count(), events.pending_count()), (0, 0), "taken, not copied");

        // A failed write: every table takes its own writes back.
        leases.restore_pending(&mut taken);
        assert_eq!(taken.len(), 1, "the other table's write stays in the batch");
        events.restore_pending(&mut taken);
        assert!(taken.is_empty());
        assert_eq!((leases.entries(), leases.pending_count(), events.entries()), before);
    }
}
