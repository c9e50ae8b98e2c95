//! Snapshots that do not stop apply, through real node processes: a
//! three-node cluster is filled with large finalized executions past the
//! command-count snapshot threshold several times, so every node builds
//! snapshots (durable checkpoints of its cold store, no file) of a state far
//! larger than the memory bounds below while it goes on applying; a fourth
//! node then joins by snapshot: the leader writes a view of its store's
//! checkpoint to a file and streams it, and the new node installs it by
//! streaming it to disk and into its cold store, and serves the old
//! executions.
//!
//! Memory is measured from outside, from `/proc/<pid>/status`. The nodes
//! run with glibc's mmap threshold fixed (`MALLOC_MMAP_THRESHOLD_`), so
//! every large buffer is its own mapping, counted in the resident set while
//! it lives and returned when freed: a snapshot held whole cannot hide in
//! heap memory freed earlier. After the fill (whose replication of large
//! entries has its own, unrelated peaks) the peak of each node is reset
//! (`clear_refs`), then a few small commands make every node build a
//! snapshot of the whole history again, and the leader sends one to the new
//! node. Each builder's peak may exceed its resident set at the reset by at
//! most [`BUILD_GROWTH_BYTES_MAX`], and the installer's peak over its whole
//! life is at most [`INSTALL_PEAK_BYTES_MAX`]; the snapshot is several times
//! both. No node keeps a snapshot file. The test prints the snapshot's
//! size, the leader's build time (a checkpoint), the time to write the
//! snapshot it sent, and the install rate, read from the nodes' logs.

mod support;

use std::future::Future;
use std::time::{Duration, Instant};

use futures::StreamExt;
use gavel_proto::v1 as pb;
use support::{register, Cluster};

/// The whole test, bounded.
const TEST_BOUND: Duration = Duration::from_secs(900);
/// Finalized executions written. Each carries [`INPUT_BYTES`] of input and
/// [`OUTPUT_BYTES`] of output (about 480 KB per lifecycle in the snapshot,
/// with its events and lease), so the snapshot is about 290 MB.
const LIFECYCLES: usize = 600;
/// Lifecycles run at once (each is three proposals).
const CONCURRENT: usize = 8;
/// Input per execution: just under the input limit (64 KiB).
const INPUT_BYTES: usize = 60 * 1024;
/// Output per execution: just under the output limit (256 KiB).
const OUTPUT_BYTES: usize = 250 * 1024;
/// Commands between two snapshots: every 100 lifecycles, so the cluster
/// snapshots six times while it is filled.
const SNAPSHOT_COMMANDS: u64 = 300;
/// Small lifecycles that make every node snapshot once more: just over one
/// snapshot interval.
const SMALL_LIFECYCLES: usize = 110;
/// How far a builder's resident set may grow over its value at the reset
/// while it builds a snapshot of the whole history and sends it: the
/// stream's buffers, one chunk in flight, what the view reads into redb's
/// bounded cache (`COLD_CACHE_BYTES`) and ordinary work. (Measured with the
/// 64 MiB cache: at most 20 MiB.)
const BUILD_GROWTH_BYTES_MAX: u64 = 64 * 1024 * 1024;
/// Peak resident set of the node that joins and installs the snapshot
/// (a debug build: code, runtime, redb's cache, `COLD_CACHE_BYTES` of
/// 64 MiB, which the rewrite fills, and one restore batch). Measured: 88-89
/// MiB with the 16 MiB cache, 136.5 MiB with 64 MiB; the snapshot is over
/// twice this.
const INSTALL_PEAK_BYTES_MAX: u64 = 160 * 1024 * 1024;
/// glibc's mmap threshold for the nodes: allocations from 128 KiB up are
/// mappings of their own (glibc's default, without its dynamic raise).
const MMAP_THRESHOLD: (&str, &str) = ("MALLOC_MMAP_THRESHOLD_", "131072");

async fn bounded<F: Future<Output = ()>>(body: F) {
    tokio::time::timeout(TEST_BOUND, body).await.expect("the test did not finish within its bound");
}

/// A JSON object of about `bytes` bytes.
fn padded_json(bytes: usize, tag: &str) -> String {
    format!("{{\"tag\":\"{tag}\",\"pad\":\"{}\"}}", "x".repeat(bytes))
}

/// One lifecycle with a large input and a large output.
async fn run_lifecycle(cluster: &Cluster, via: u64, execution_id: &str) {
    let (input_json, output_json) = (padded_json(INPUT_BYTES, execution_id), padded_json(OUTPUT_BYTES, "output"));
    support::run_lifecycle(cluster, via, execution_id, input_json, output_json).await;
}

/// A `/proc/<pid>/status` figure (`VmHWM`, `VmRSS`) of process `pid`, in bytes.
fn memory_bytes(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the node's /proc status");
    let line = status.lines().find(|line| line.starts_with(field)).unwrap_or_else(|| panic!("a {field} line"));
    let kib: u64 = line.split_whitespace().nth(1).and_then(|value| value.parse().ok()).expect("a figure in kB");
    kib * 1024
}

/// Resets the peak resident set of process `pid` to its current one.
fn reset_peak(pid: u32) {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").expect("the peak resident set resets (clear_refs)");
}

/// What node `id` logged.
fn node_log(cluster: &Cluster, id: u64) -> String {
    std::fs::read_to_string(cluster.dir.path().join(format!("n{id}.log"))).unwrap_or_default()
}

/// The value of `field=` on a log line, without ANSI colouring.
fn log_field<'a>(line: &'a str, field: &str) -> Option<&'a str> {
    let start = line.find(&format!("{field}="))? + field.len() + 1;
    let rest = &line[start..];
    let end = rest.find(|c: char| c.is_whitespace() || c == '\u{1b}').unwrap_or(rest.len());
    Some(&rest[..end])
}

/// The last line of node `id`'s log that contains `message`, as (bytes,
/// seconds); bytes 0 where the line names none.
fn last_logged(cluster: &Cluster, id: u64, message: &str) -> Option<(u64, f64)> {
    let log = node_log(cluster, id);
    let line = log.lines().rev().find(|line| line.contains(message))?;
    let bytes = log_field(line, "bytes").map_or(Some(0), |bytes| bytes.parse().ok())?;
    Some((bytes, gavel_testkit::debug_seconds(log_field(line, "took")?)?))
}

/// The snapshot files (`*.snap`) in node `id`'s data directory: none, for a
/// node whose snapshots are checkpoints of its cold store.
fn stored_snapshot_files(cluster: &Cluster, id: u64) -> Vec<String> {
    let node = cluster.nodes.iter().find(|node| node.id == id).expect("a placed node");
    let dir = node.data_dir.join("raft-snapshot");
    std::fs::read_dir(&dir)
        .expect("the snapshot directory")
        .filter_map(Result::ok)
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".snap"))
        .collect()
}

/// Runs [`SMALL_LIFECYCLES`] small lifecycles (just over one snapshot
/// interval), then waits until every running node built one more snapshot
/// and stored it; returns the converged state hash.
async fn snapshot_everywhere(cluster: &Cluster, leader: u64, prefix: &str) -> String {
    let builders = cluster.running();
    let built_before: Vec<usize> =
        builders.iter().map(|&id| node_log(cluster, id).matches("snapshot stored").count()).collect();
    for index in 0..SMALL_LIFECYCLES {
        let execution_id = format!("{prefix}-{index}");
        support::run_lifecycle(cluster, leader, &execution_id, "{}".to_string(), "{}".to_string()).await;
    }
    let hash = cluster.wait_converged().await;
    let waiting = Instant::now();
    for (&id, before) in builders.iter().zip(built_before) {
        while node_log(cluster, id).matches("snapshot stored").count() <= before {
            assert!(waiting.elapsed() < Duration::from_secs(120), "node {id} stored no new snapshot");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    hash
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn snapshots_far_larger_than_memory_are_built_and_installed_within_a_fixed_memory_bound() {
    bounded(async {
        let commands = format!("--snapshot-commands-since-last={SNAPSHOT_COMMANDS}");
        let flags = ["--snapshot-logs-since-last=100000", commands.as_str(), "--logs-to-keep=5"];
        let mut cluster = Cluster::start_with_env(3, &flags, &[MMAP_THRESHOLD]).await;
        let leader = cluster.wait_for_leader().await;
        register(&cluster, leader, support::capability("docs.read", pb::SideEffect::Read)).await;

        let filling = Instant::now();
        futures::stream::iter(0..LIFECYCLES)
            .for_each_concurrent(CONCURRENT, |index| {
                let cluster = &cluster;
                async move { run_lifecycle(cluster, leader, &format!("ex-{index}")).await }
            })
            .await;
        let fill_seconds = filling.elapsed().as_secs_f64();
        cluster.wait_converged().await;
        let builds = node_log(&cluster, leader).matches("snapshot built").count();
        assert!(builds >= 3, "the leader built a snapshot several times while it was filled: {builds}");

        // One more snapshot everywhere flushes the large cold writes still in
        // memory since the last one (the apply path's overlay, not the
        // snapshot's). Then reset the peaks and make every node build the
        // whole history once more.
        let builders = cluster.running();
        snapshot_everywhere(&cluster, leader, "flush").await;
        let mut at_reset = Vec::new();
        for &id in &builders {
            let pid = cluster.pid(id).expect("a running node has a pid");
            reset_peak(pid);
            at_reset.push((id, pid, memory_bytes(pid, "VmRSS:")));
        }
        let hash = snapshot_everywhere(&cluster, leader, "small").await;
        let snapshot_index = cluster.status(leader).await.expect("leader status").snapshot_index;
        let snapshot_index = snapshot_index.expect("the leader built snapshots by command count");
        for &id in &builders {
            assert_eq!(stored_snapshot_files(&cluster, id), Vec::<String>::new(), "node {id} keeps no snapshot file");
        }
        let (_, build_seconds) =
            last_logged(&cluster, leader, "snapshot built as a checkpoint").expect("the leader logged its last build");

        // A fourth node joins by snapshot: the log before it is purged.
        let new_node = cluster.join_learner_by_snapshot(leader).await;
        let waiting = Instant::now();
        loop {
            // Installed, from whichever node leads now: a leader elected
            // since `snapshot_index` was read sends its own snapshot, whose
            // index may be lower.
            if node_log(&cluster, new_node).contains("snapshot installed") {
                break;
            }
            if waiting.elapsed() > Duration::from_secs(300) {
                let snapshot_lines = |id: u64| -> String {
                    let log = node_log(&cluster, id);
                    let lines: Vec<&str> = log
                        .lines()
                        .filter(|line| line.contains("snapshot") || line.contains("WARN") || line.contains("ERROR"))
                        .collect();
                    lines[lines.len().saturating_sub(20)..].join("\n")
                };
                panic!(
                    "node {new_node} installed no snapshot; the leader logged:\n{}\nnode {new_node} logged:\n{}",
                    snapshot_lines(leader),
                    snapshot_lines(new_node)
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        // Every node, the new one included, at the same applied index with
        // the same state hash (ticks may have moved it since `hash`).
        let converged = cluster.wait_converged().await;
        assert!(!converged.is_empty() && !hash.is_empty(), "state hashes are reported");
        // The node that sent it: the leader, unless leadership moved.
        let sent = builders.iter().filter_map(|&id| last_logged(&cluster, id, "snapshot ready to send")).next();
        let (snapshot_bytes, write_seconds) = sent.unwrap_or_else(|| {
            let lines: Vec<String> = builders
                .iter()
                .flat_map(|&id| {
                    node_log(&cluster, id)
                        .lines()
                        .filter(|l| l.contains("snapshot"))
                        .map(String::from)
                        .collect::<Vec<_>>()
                })
                .collect();
            panic!(
                "no node logged the snapshot it sent; snapshot lines:\n{}",
                lines[lines.len().saturating_sub(30)..].join("\n")
            )
        });
        assert!(
            snapshot_bytes >= (2 * INSTALL_PEAK_BYTES_MAX).max(4 * BUILD_GROWTH_BYTES_MAX),
            "the snapshot ({snapshot_bytes} bytes) is several times each memory bound"
        );
        let (installed_bytes, install_seconds) =
            last_logged(&cluster, new_node, "snapshot installed").expect("the new node logged its install");
        assert_eq!(installed_bytes, snapshot_bytes, "the new node installed the snapshot the leader sent");
        // The installed snapshot's file is kept until the node's next build
        // replaces it with a checkpoint: a crash mid-install restores from it.
        assert_eq!(stored_snapshot_files(&cluster, new_node).len(), 1, "the installed snapshot's file");

        // Old executions, with their large results and their audit trails,
        // are served by the new node.
        for index in [0, 1, LIFECYCLES / 2, LIFECYCLES - 1] {
            let execution_id = format!("ex-{index}");
            let execution = cluster.get_execution(new_node, &execution_id).await.expect("the new node serves it");
            assert_eq!(execution.state, pb::ExecutionState::Completed as i32, "{execution_id}");
            let Some(pb::result_envelope::Outcome::Completed(completed)) =
                execution.result.and_then(|result| result.outcome)
            else {
                panic!("{execution_id} carries its completed result");
            };
            assert!(completed.output_json.len() > OUTPUT_BYTES, "{execution_id}'s output came whole");
            assert_eq!(
                cluster.execution_events(new_node, &execution_id).await,
                cluster.execution_events(leader, &execution_id).await,
                "{execution_id}'s audit trail came with the snapshot"
            );
        }

        let mib = |bytes: u64| bytes as f64 / (1024.0 * 1024.0);
        println!(
            "snapshot_stream: {LIFECYCLES} lifecycles in {fill_seconds:.1} s; leader's last build (a checkpoint) \
             at index {snapshot_index} in {build_seconds:.3} s; snapshot sent {:.1} MiB, written in \
             {write_seconds:.2} s; install {:.1} MiB in {install_seconds:.2} s = {:.1} MB/s",
            mib(snapshot_bytes),
            mib(installed_bytes),
            installed_bytes as f64 / 1e6 / install_seconds.max(1e-3),
        );
        let installer_peak = memory_bytes(cluster.pid(new_node).expect("the new node runs"), "VmHWM:");
        println!("snapshot_stream: node {new_node} (installer) peak RSS {:.1} MiB", mib(installer_peak));
        let mut growths = Vec::new();
        for (id, pid, rss) in at_reset {
            let peak = memory_bytes(pid, "VmHWM:");
            let role = if id == leader { "builder, sender" } else { "builder" };
            println!(
                "snapshot_stream: node {id} ({role}) RSS {:.1} MiB at the reset, peak {:.1} MiB after it",
                mib(rss),
                mib(peak)
            );
            growths.push((id, peak.saturating_sub(rss)));
        }
        assert!(
            installer_peak <= INSTALL_PEAK_BYTES_MAX,
            "the installer's peak RSS {:.1} MiB is over {:.1} MiB (snapshot {:.1} MiB)",
            mib(installer_peak),
            mib(INSTALL_PEAK_BYTES_MAX),
            mib(snapshot_bytes)
        );
        for (id, growth) in growths {
            assert!(
                growth <= BUILD_GROWTH_BYTES_MAX,
                "node {id}'s RSS grew {:.1} MiB while building (bound {:.1} MiB, snapshot {:.1} MiB)",
                mib(growth),
                mib(BUILD_GROWTH_BYTES_MAX),
                mib(snapshot_bytes)
            );
        }
    })
    .await;
}
