//! How fast an install rewrites a snapshot's records into an empty
//! `cold.redb`, without a cluster: it runs the node's own install path
//! (`CoreApp::restore_at`, the call the Raft layer makes with a received
//! snapshot file) on a synthetic snapshot.
//!
//! `cargo run --release -p gavel-store --example cold_install -- [LIFECYCLES] [DIR] [RUNS]`
//!
//! Writes a snapshot file of LIFECYCLES (default 200,000) synthetic finalized
//! lifecycles in the whole-state format (`gavel_core::SnapshotWriter`: an
//! empty hot state, then the records table by table in key order), then
//! restores it RUNS times (default 3) into a new `cold.redb` under DIR, each
//! run into its own empty data directory. Per run it prints records/s, the
//! time per record, the snapshot's MB/s (the unit of `gavel-lab bench --scale`'s
//! install rate), the CPU time the process used (all threads), the size of
//! the `cold.redb` it wrote and the process's peak RSS during that run (`VmHWM`, reset
//! before each run through `/proc/self/clear_refs`); then the median and the
//! spread (lowest–highest) of the runs.

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
    let runs: usize = args.next().map_or(3, |arg| arg.parse().expect("RUNS is a number"));
    assert!(runs > 0, "RUNS is at least 1");
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

    let mut runs_measured = Vec::new();
    for run in 1..=runs {
        let node = work.join(format!("node-{run}"));
        let app = CoreApp::open(&node).expect("open the application");
        app.resume(None, &|_| false).expect("start empty");
        let mut reader = BufReader::new(std::fs::File::open(&snapshot_path).expect("open the snapshot"));
        // Resets VmHWM to the current RSS, so each run's peak is its own.
        let _ = std::fs::write("/proc/self/clear_refs", "5");
        let (started, cpu_before) = (std::time::Instant::now(), cpu_seconds());
        app.restore_at(b"cold_install", &mut reader, bytes).expect("restore the snapshot");
        let took = started.elapsed().as_secs_f64();
        let cpu = cpu_seconds().zip(cpu_before).map_or(f64::NAN, |(after, before)| after - before);
        let file_mb = std::fs::metadata(node.join(gavel_store::app::COLD_STORE_FILE))
            .map_or(f64::NAN, |metadata| metadata.len() as f64 / 1e6);
        let peak_mib = peak_rss_kib().map_or(f64::NAN, |kib| kib as f64 / 1024.0);
        let measured = (bytes as f64 / 1e6 / took, records as f64 / took);
        println!(
            "run {run}: {lifecycles} lifecycles, {records} records, snapshot {:.1} MB: installed in {took:.2} s; \
             {:.0} records/s, {:.2} us/record, {:.1} MB/s; CPU {cpu:.2} s ({:.2} us/record), peak RSS {peak_mib:.1} MiB, cold.redb {file_mb:.1} MB",
            bytes as f64 / 1e6,
            measured.1,
            took * 1e6 / records as f64,
            measured.0,
            cpu * 1e6 / records as f64,
        );
        runs_measured.push(measured);
        drop(app);
        let _ = std::fs::remove_dir_all(&node);
    }
    let (megabytes, records_per_second): (Vec<f64>, Vec<f64>) = runs_measured.into_iter().unzip();
    let (megabytes, records_per_second) = (median_and_spread(megabytes), median_and_spread(records_per_second));
    println!(
        "median of {runs}: {:.1} MB/s ({:.1}-{:.1}), {:.0} records/s ({:.0}-{:.0})",
        megabytes.0, megabytes.1, megabytes.2, records_per_second.0, records_per_second.1, records_per_second.2
    );
    let _ = std::fs::remove_dir_all(&work);
}

/// The median, lowest and highest of `values` (not empty).
fn median_and_spread(mut values: Vec<f64>) -> (f64, f64, f64) {
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    let median = if values.len() % 2 == 1 { values[middle] } else { (values[middle - 1] + values[middle]) / 2.0 };
    (median, values[0], values[values.len() - 1])
}

/// CPU time this process used so far, all threads, user and system
/// (`/proc/self/stat`, in clock ticks of 10 ms): on a shared machine the
/// CPU per record moves less than the wall-clock rate.
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The fields after the command name, which is in parentheses.
    let mut fields = stat.rsplit_once(')')?.1.split_whitespace();
    let user: u64 = fields.nth(11)?.parse().ok()?;
    let system: u64 = fields.next()?.parse().ok()?;
    Some((user + system) as f64 / 100.0)
}

/// This process's peak resident set (`VmHWM` in `/proc/self/status`), KiB.
fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}
