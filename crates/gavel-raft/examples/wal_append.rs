//! Measures the Raft log: latency of one durable append (until openraft's
//! `LogFlushed` fires) and appends per second, one at a time; then
//! replicated writes per second on a single-node cluster with 1 and 32
//! concurrent writers. Built against an older gavel-raft it measures that
//! version's log the same way (the sled log before the WAL, for example).
//!
//! Usage: `cargo run --release -p gavel-raft --example wal_append [DIR] [APPENDS] [SECONDS]`
//! (DIR defaults to the current directory, so it measures the disk you run
//! it on; APPENDS defaults to 2000, SECONDS of each concurrent run to 3).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gavel_raft::{Application, NodeConfig, RaftNode, RaftTimings};

/// Prints p50/p99 of `samples` and the rate they were taken at.
fn report(label: &str, mut samples: Vec<Duration>, elapsed: Duration) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    let micros = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "{label:<44} n={:<6} p50={:>7.0}µs  p99={:>8.0}µs  rate={:>8.0}/s",
        samples.len(),
        micros(at(0.5)),
        micros(at(0.99)),
        samples.len() as f64 / elapsed.as_secs_f64(),
    );
}

#[derive(Default)]
struct Counter {
    applied: Mutex<u64>,
}

impl Application for Counter {
    fn apply(&self, _log_index: u64, _command: &[u8]) -> Vec<u8> {
        let mut applied = self.applied.lock().expect("lock");
        *applied += 1;
        applied.to_be_bytes().to_vec()
    }
    fn snapshot(&self) -> Vec<u8> {
        self.applied.lock().expect("lock").to_be_bytes().to_vec()
    }
    fn restore(&self, bytes: &[u8]) -> Result<(), String> {
        let bytes: [u8; 8] = bytes.try_into().map_err(|_| "bad snapshot".to_string())?;
        *self.applied.lock().expect("lock") = u64::from_be_bytes(bytes);
        Ok(())
    }
}

/// `writers` tasks write `entry_bytes` commands for `duration`; returns each
/// write's latency and the time taken.
async fn concurrent_writes(dir: &Path, writers: usize, duration: Duration) -> (Vec<Duration>, Duration) {
    let node = RaftNode::start(
        NodeConfig {
            node_id: 1,
            addr: "127.0.0.1:1".into(),
            data_dir: dir.to_path_buf(),
            timings: RaftTimings::default(),
        },
        Arc::new(Counter::default()),
    )
    .await
    .expect("start node");
    node.initialize([(1, "127.0.0.1:1".to_string())].into()).await.expect("initialize");
    node.wait_for_leader(Duration::from_secs(10)).await.expect("leader");
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

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
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
