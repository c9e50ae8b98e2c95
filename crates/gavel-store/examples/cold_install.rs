//! How fast an install rewrites a snapshot's records into an empty
//! `cold.redb`, without a cluster: it runs the node's own install path
//! (`CoreApp::restore_at`, the call the Raft layer makes with a received
//! snapshot file) on a synthetic snapshot.
//!
//! `cargo run --release -p gavel-store --example cold_install -- [LIFECYCLES] [DIR]`
//!
//! Writes a snapshot file of LIFECYCLES (default 200,000) synthetic finalized
//! lifecycles in the whole-state format (`gavel_core::SnapshotWriter`: an
//! empty hot state, then the records table by table in key order), then
//! times its restore into a new `cold.redb` under DIR; prints records/s,
//! the time per record and the snapshot's MB/s (the unit of
//! `gavel bench --scale`'s install rate).

use std::io::BufReader;

use gavel_core::{ColdTable, SnapshotWriter, State};
use gavel_raft::Application;
use gavel_store::app::CoreApp;

/// Per lifecycle: (table, records, value bytes); roughly a fill's lifecycle.
const SHAPE: [(ColdTable, u64, usize); 5] = [
    (ColdTable::Executions, 1, 220),
    (ColdTable::Finalized, 1, 0),
    (ColdTable::Leases, 1, 70),
    (ColdTable::Events, 4, 60),
    (ColdTable::ExecutionEvents, 4, 0),
];

/// The execution id of lifecycle `lifecycle`: zero-padded, so ids sort as
/// the lifecycles do.
fn execution_id(lifecycle: u64) -> String {
    format!("bench-fill-{lifecycle:012}")
}

/// The key of record `n` of `lifecycle` in `table`, in that table's layout.
fn key(table: ColdTable, lifecycle: u64, n: u64) -> Vec<u8> {
    let cursor = (lifecycle * 4 + n).to_be_bytes();
    match table {
        ColdTable::Executions => execution_id(lifecycle).into_bytes(),
        ColdTable::Finalized => {
            [&(1_700_000_000_000u64 + lifecycle).to_be_bytes()[..], execution_id(lifecycle).as_bytes()].concat()
        }
        ColdTable::Leases => lifecycle.to_be_bytes().to_vec(),
        ColdTable::Events => cursor.to_vec(),
        _ => {
            let id = execution_id(lifecycle);
            [&[id.len() as u8][..], id.as_bytes(), &cursor[..]].concat()
        }
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let lifecycles: u64 = args.next().map_or(200_000, |arg| arg.parse().expect("LIFECYCLES is a number"));
    let dir = args.next().map(std::path::PathBuf::from).unwrap_or_else(std::env::temp_dir);
    let work = dir.join(format!("cold-install-{}", std::process::id()));
    std::fs::create_dir_all(&work).expect("create the work directory");
    let snapshot_path = work.join("snapshot");

    let records: u64 = SHAPE.iter().map(|(_, per, _)| per * lifecycles).sum();
    let file = std::io::BufWriter::new(std::fs::File::create(&snapshot_path).expect("create the snapshot file"));
    let mut writer = SnapshotWriter::start(file, &State::new().hot_snapshot(), records).expect("start the snapshot");
    for (table, per, value_len) in SHAPE {
        for lifecycle in 0..lifecycles {
            let value = vec![(lifecycle % 251) as u8; value_len];
            for n in 0..per {
                writer.record(table, &key(table, lifecycle, n), &value).expect("write a record");
            }
        }
    }
    let mut file = writer.finish().expect("finish the snapshot");
    std::io::Write::flush(&mut file).expect("flush the snapshot");
    drop(file);
    let bytes = std::fs::metadata(&snapshot_path).expect("the snapshot's size").len();

    let app = CoreApp::open(None, &work.join("node")).expect("open the application");
    app.resume(None, &|_| false).expect("start empty");
    let mut reader = BufReader::new(std::fs::File::open(&snapshot_path).expect("open the snapshot"));
    let started = std::time::Instant::now();
    app.restore_at(b"cold_install", &mut reader, bytes).expect("restore the snapshot");
    let took = started.elapsed().as_secs_f64();
    println!(
        "{lifecycles} lifecycles, {records} records, snapshot {:.1} MB: installed in {took:.2} s; \
         {:.0} records/s, {:.2} us/record, {:.1} MB/s",
        bytes as f64 / 1e6,
        records as f64 / took,
        took * 1e6 / records as f64,
        bytes as f64 / 1e6 / took,
    );
    drop(app);
    let _ = std::fs::remove_dir_all(&work);
}
