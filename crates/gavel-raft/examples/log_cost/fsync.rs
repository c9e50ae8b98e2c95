//! Measures what durability costs: latency of one log append until it is
//! durable, with and without the real fsync, and of one replicated write on a
//! single-node cluster.
//!
//! Usage: `cargo run --release -p gavel-raft --example log_cost -- fsync [DIR] [RUNS]`
//! (DIR defaults to a temporary directory under the current directory, so it
//! measures the disk you run it on; RUNS defaults to 500).

use super::common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Prints median and spread of a set of latencies.
fn report(label: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let at = |q: f64| common::micros_at(&samples, q);
    println!(
        "{label:<52} n={:<5} median={:>8.0}µs  p10={:>8.0}µs  p90={:>8.0}µs  p99={:>8.0}µs  min={:>8.0}µs  max={:>8.0}µs",
        samples.len(),
        at(0.5),
        at(0.1),
        at(0.9),
        at(0.99),
        at(0.0),
        at(1.0),
    );
}

/// The same insert sled does for an append, made durable in three ways.
fn raw_sled(dir: &Path, runs: u64, entry_bytes: usize, fsync: bool) -> Vec<Duration> {
    let db = sled::open(dir).expect("open sled");
    let data_file = std::fs::File::open(dir.join("db")).expect("open sled data file");
    let tree = db.open_tree("log").expect("tree");
    (1..=runs)
        .map(|index| {
            let start = Instant::now();
            let mut batch = sled::Batch::default();
            batch.insert(&index.to_be_bytes(), vec![0x5a; entry_bytes]);
            tree.apply_batch(batch).expect("insert");
            db.flush().expect("flush");
            if fsync {
                data_file.sync_data().expect("fsync");
            }
            start.elapsed()
        })
        .collect()
}

async fn single_node_writes(dir: &Path, runs: u64, entry_bytes: usize) -> Vec<Duration> {
    let node = common::single_node(dir).await;
    let mut samples = Vec::new();
    for _ in 0..runs {
        let start = Instant::now();
        node.write(vec![0x5a; entry_bytes]).await.expect("write");
        samples.push(start.elapsed());
    }
    node.shutdown().await.expect("shutdown");
    samples
}

/// Runs the measurement with the arguments after the program's first.
pub async fn run(mut args: impl Iterator<Item = String>) {
    let base: PathBuf = args.next().map(PathBuf::from).unwrap_or_else(|| PathBuf::from("."));
    let runs: u64 = args.next().map(|r| r.parse().expect("RUNS is a number")).unwrap_or(500);
    let root = tempfile::Builder::new().prefix("fsync-cost-").tempdir_in(&base).expect("temporary directory");
    println!("measuring in {} ({runs} runs each)", root.path().display());

    for entry_bytes in [256usize, 16 * 1024] {
        println!("-- entries of {entry_bytes} bytes");
        report(
            "sled insert + flush (sync_file_range only)",
            raw_sled(&root.path().join(format!("raw-{entry_bytes}")), runs, entry_bytes, false),
        );
        report(
            "sled insert + flush + fdatasync(db)",
            raw_sled(&root.path().join(format!("raw-fsync-{entry_bytes}")), runs, entry_bytes, true),
        );
        let latencies = gavel_raft::bench::durable_append_latencies(
            &root.path().join(format!("store-{entry_bytes}")),
            runs,
            entry_bytes,
        )
        .await
        .expect("durable appends");
        report("gavel-raft LogStore::append until IOFlushed", latencies);
        report(
            "gavel-raft single-node RaftNode::write",
            single_node_writes(&root.path().join(format!("node-{entry_bytes}")), runs, entry_bytes).await,
        );
    }
}
