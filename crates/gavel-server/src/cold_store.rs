//! The on-disk [`ColdStore`]: the state machine's cold records (finalized
//! executions, their finalized index, their lease records, the audit events
//! and their per-execution index) in a redb file,
//! one redb table per [`ColdTable`].
//!
//! redb gives MVCC read transactions (a reader sees one committed version
//! while writes go on) and atomic, fsynced write transactions. The state
//! machine reads it during apply and writes it only when the application
//! flushes its overlay ([`gavel_core::State::flush_cold`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use gavel_core::{ColdMutation, ColdStore, ColdStoreError, ColdTable};
use redb::{Database, Durability, ReadableTableMetadata, TableDefinition, TableError};

/// The redb table that holds `table`.
fn definition(table: ColdTable) -> TableDefinition<'static, &'static [u8], &'static [u8]> {
    match table {
        ColdTable::Executions => TableDefinition::new("executions"),
        ColdTable::Finalized => TableDefinition::new("finalized"),
        ColdTable::Leases => TableDefinition::new("leases"),
        ColdTable::Events => TableDefinition::new("events"),
        ColdTable::ExecutionEvents => TableDefinition::new("execution_events"),
    }
}

/// Cold records in a redb file.
pub struct RedbColdStore {
    database: Database,
    path: PathBuf,
}

impl std::fmt::Debug for RedbColdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedbColdStore").field("path", &self.path).finish_non_exhaustive()
    }
}

fn write_error(error: impl std::fmt::Display) -> ColdStoreError {
    ColdStoreError::Write(error.to_string())
}

impl RedbColdStore {
    /// Opens (or creates) the store file at `path`.
    pub fn open(path: &Path) -> Result<Arc<RedbColdStore>, ColdStoreError> {
        let database = Database::create(path).map_err(write_error)?;
        Ok(Arc::new(RedbColdStore { database, path: path.to_path_buf() }))
    }

    /// The store file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Deletes every record, in one durable transaction.
    pub fn clear(&self) -> Result<(), ColdStoreError> {
        let transaction = self.database.begin_write().map_err(write_error)?;
        for table in ColdTable::ALL {
            match transaction.delete_table(definition(table)) {
                Ok(_) => {}
                Err(error) => return Err(write_error(error)),
            }
        }
        transaction.commit().map_err(write_error)
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

    /// Whether the store holds no record.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A read failure means the file is unreadable: the state machine cannot
/// decide without the record, so the node stops (see [`ColdStore`]).
impl ColdStore for RedbColdStore {
    fn get(&self, table: ColdTable, key: &[u8]) -> Option<Vec<u8>> {
        let transaction = self.database.begin_read().expect("the cold store can begin a read transaction");
        let opened = match transaction.open_table(definition(table)) {
            Ok(opened) => opened,
            Err(TableError::TableDoesNotExist(_)) => return None,
            Err(error) => panic!("the cold store cannot open table {table:?}: {error}"),
        };
        opened.get(key).expect("the cold store reads its records").map(|value| value.value().to_vec())
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

    fn write(&self, mutations: &[ColdMutation]) -> Result<(), ColdStoreError> {
        self.write_with(mutations, Durability::Immediate)
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
    /// Writes the mutations in one transaction without waiting for the disk:
    /// a crash may lose them (the file stays consistent), which the
    /// application tolerates because it rebuilds the store from a snapshot on
    /// every start. Pages they free are reclaimed at the next durable write.
    pub fn write_eventually(&self, mutations: &[ColdMutation]) -> Result<(), ColdStoreError> {
        self.write_with(mutations, Durability::None)
    }

    fn write_with(&self, mutations: &[ColdMutation], durability: Durability) -> Result<(), ColdStoreError> {
        let mut transaction = self.database.begin_write().map_err(write_error)?;
        transaction.set_durability(durability);
        {
            let mut tables = Vec::new();
            for table in ColdTable::ALL {
                tables.push((table, transaction.open_table(definition(table)).map_err(write_error)?));
            }
            for mutation in mutations {
                let (_, opened) =
                    tables.iter_mut().find(|(table, _)| *table == mutation.table).expect("every table is open");
                match &mutation.value {
                    Some(value) => {
                        opened.insert(mutation.key.as_slice(), value.as_slice()).map_err(write_error)?;
                    }
                    None => {
                        opened.remove(mutation.key.as_slice()).map_err(write_error)?;
                    }
                }
            }
        }
        transaction.commit().map_err(write_error)
    }
}

#[cfg(test)]
mod tests {
    use gavel_core::MemoryColdStore;

    use super::*;

    fn put(table: ColdTable, key: &[u8], value: &[u8]) -> ColdMutation {
        ColdMutation { table, key: key.to_vec(), value: Some(value.to_vec()) }
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
                assert_eq!(disk.range(table, key, 2), memory.range(table, key, 2), "range {table:?} {key:?}");
            }
        }
        assert_eq!(disk.len(), 2);
        disk.clear().expect("clear");
        assert!(disk.is_empty());
        assert_eq!(disk.seek(ColdTable::Executions, b""), None);
    }
}
