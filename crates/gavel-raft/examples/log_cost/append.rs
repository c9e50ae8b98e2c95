//! Measures the Raft log: latency of one durable append (until openraft's
//! `IOFlushed` fires) and appends per second, one at a time; then
//! replicated writes per second on a single-node cluster with 1 and 32
//! concurrent writers. Built against an older gavel-raft it measures that
//! version's log the same way (the sled log before the WAL, for example).
//!
//! Usage: `cargo run --release -p gavel-raft --example log_cost -- append [DIR] [APPENDS] [SECONDS]`
//! (DIR defaults to the current directory, so it measures the disk you run
//! it on; APPENDS defaults to 2000, SECONDS of each concurrent run to 3).

use super::common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Prints p50/p99 of `samples` and the rate they were taken at.
fn report(label: &str, mut samples: Vec<Duration>, elapsed: Duration) {
    samples.sort();
    let at = |q: f64| common::micros_at(&samples, q);
    println!(
        "{label:<44} n={:<6} p50={:>7.0}µs  p99={:>8.0}µs  rate={:>8.0}/s",
        samples.len(),
        at(0.5),
        at(0.99),
        samples.len() as f64 / elapsed.as_secs_f64(),
    );
}

/// `writers` tasks write 256-byte commands for `duration`; returns each
/// write's latency and the time taken.
async fn concurrent_writes(dir: &Path, writers: usize, duration: Duration) -> (Vec<Duration>, Duration) {
    let node = common::single_node(dir).await;
    let start = Instant::now();
    let deadline = start + duration;
    let tasks: Vec<_> = (0..writers)
        .map(|_| {
            let node = node.clone();
            tokio::spawn(async move {
                let mut samples = Vec::new();
                while Instant::now() < deadline {
                    let began = Instant::now();
                    node.write(vec![0x5a; 256]).await.expect("write");
                    samples.push(began.elapsed());
                }
                samples
            })
        })
        .collect();
    let mut samples = Vec::new();
    for task in tasks {
        samples.extend(task.await.expect("writer task"));
    }
    let elapsed = start.elapsed();
    node.shutdown().await.expect("shutdown");
    (samples, elapsed)
}

/// Runs the measurement with the arguments after the program's first.
pub async fn run(mut args: impl Iterator<Item = String>) {
    let base: PathBuf = args.next().map(PathBuf::from).unwrap_or_else(|| PathBuf::from("."));
    let appends: u64 = args.next().map(|n| n.parse().expect("APPENDS is a number")).unwrap_or(2000);
    let seconds: u64 = args.next().map(|n| n.parse().expect("SECONDS is a number")).unwrap_or(3);
    let root = tempfile::Builder::new().prefix("wal-append-").tempdir_in(&base).expect("temporary directory");
    println!("measuring in {}", root.path().display());
    for entry_bytes in [256usize, 16 * 1024] {
        let start = Instant::now();
        let latencies = gavel_raft::bench::durable_append_latencies(
            &root.path().join(format!("log-{entry_bytes}")),
            appends,
            entry_bytes,
        )
        .await
        .expect("durable appends");
        report(&format!("log append until durable, {entry_bytes} B"), latencies, start.elapsed());
    }
    for writers in [1usize, 32] {
        let (samples, elapsed) =
            concurrent_writes(&root.path().join(format!("node-{writers}")), writers, Duration::from_secs(seconds))
                .await;
        report(&format!("single-node RaftNode::write, {writers} writers"), samples, elapsed);
    }
}
