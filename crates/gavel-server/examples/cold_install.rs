//! How fast a snapshot's records are rewritten into an empty `cold.redb`
//! (the install path of `CoreApp::restore_stream`), without a cluster.
//!
//! `cargo run --release -p gavel-server --example cold_install -- [LIFECYCLES] [DIR]`
//!
//! Writes LIFECYCLES (default 200,000) synthetic finalized lifecycles, table
//! by table in key order as a snapshot streams them, in transactions of
//! `COLD_RESTORE_BATCH_BYTES`, then the durable commit; prints records/s,
//! MB/s and the time per record.

use gavel_core::{ColdMutation, ColdStore, ColdTable};
use gavel_server::app::COLD_RESTORE_BATCH_BYTES;
use gavel_server::cold_store::RedbColdStore;

/// Per lifecycle: (table, records, value bytes); roughly a fill's lifecycle.
const SHAPE: [(ColdTable, u64, usize); 5] = [
    (ColdTable::Executions, 1, 220),
    (ColdTable::Finalized, 1, 0),
    (ColdTable::Leases, 1, 70),
    (ColdTable::Events, 4, 60),
    (ColdTable::ExecutionEvents, 4, 0),
];

fn key(table: ColdTable, lifecycle: u64, n: u64) -> Vec<u8> {
    match table {
        ColdTable::Executions => format!("bench-fill-{lifecycle:012}").into_bytes(),
        ColdTable::Finalized => {
            let mut key = (1_700_000_000_000u64 + lifecycle).to_be_bytes().to_vec();
            key.extend_from_slice(format!("bench-fill-{lifecycle:012}").as_bytes());
            key
        }
        ColdTable::Leases => lifecycle.to_be_bytes().to_vec(),
        ColdTable::Events => (lifecycle * 4 + n).to_be_bytes().to_vec(),
        _ => {
            let id = format!("bench-fill-{lifecycle:012}");
            let mut key = vec![id.len() as u8];
            key.extend_from_slice(id.as_bytes());
            key.extend_from_slice(&(lifecycle * 4 + n).to_be_bytes());
            key
        }
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let lifecycles: u64 = args.next().map_or(200_000, |arg| arg.parse().expect("LIFECYCLES is a number"));
    let dir = args.next().map(std::path::PathBuf::from).unwrap_or_else(std::env::temp_dir);
    let path = dir.join(format!("cold-install-{}.redb", std::process::id()));
    let store = RedbColdStore::open(&path).expect("open the store");
    let write_behind = store.write_behind();
    let started = std::time::Instant::now();
    let (mut records, mut bytes) = (0u64, 0u64);
    let (mut batch, mut batch_bytes) = (Vec::new(), 0usize);
    for (table, per, value_len) in SHAPE {
        for lifecycle in 0..lifecycles {
            for n in 0..per {
                let key = key(table, lifecycle, n);
                let value = vec![(lifecycle % 251) as u8; value_len];
                batch_bytes += key.len() + value.len();
                batch.push(ColdMutation { table, key, value: Some(value) });
                if batch_bytes >= COLD_RESTORE_BATCH_BYTES {
                    store.write_eventually(&batch).expect("write a batch");
                    records += batch.len() as u64;
                    bytes += batch_bytes as u64;
                    (batch, batch_bytes) = (Vec::new(), 0);
                }
            }
        }
    }
    let written = started.elapsed();
    drop(write_behind);
    records += batch.len() as u64;
    bytes += batch_bytes as u64;
    store.write(&batch).expect("the last, durable batch");
    let total = started.elapsed();
    let file = std::fs::metadata(&path).map_or(0, |meta| meta.len());
    println!(
        "{lifecycles} lifecycles, {records} records, {:.1} MB of keys and values: records {:.2} s, durable {:.2} s; \
         {:.0} records/s, {:.2} us/record, {:.1} MB/s of records; file {:.1} MB",
        bytes as f64 / 1e6,
        written.as_secs_f64(),
        (total - written).as_secs_f64(),
        records as f64 / total.as_secs_f64(),
        total.as_secs_f64() * 1e6 / records as f64,
        bytes as f64 / 1e6 / total.as_secs_f64(),
        file as f64 / 1e6
    );
    drop(store);
    let _ = std::fs::remove_file(&path);
}
