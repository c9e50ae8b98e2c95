//! The command-count snapshot policy: a node snapshots once enough commands
//! were applied, however few log entries carried them.

use crate::common::{put, test_timings, wait_status, Cluster};
use gavel_raft::RaftTimings;

/// Commands per snapshot in this test.
const THRESHOLD: u64 = 300;
/// Commands written at once, so the batcher packs them into few entries.
const CONCURRENT_WRITES: usize = 1200;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nodes_snapshot_after_a_number_of_commands_carried_by_few_entries() {
    // The entry policy alone would not snapshot before a million entries.
    let timings = RaftTimings {
        snapshot_logs_since_last: 1_000_000,
        snapshot_commands_since_last: THRESHOLD,
        logs_to_keep: 5,
        ..test_timings()
    };
    let mut cluster = Cluster::start(3, timings).await;
    let leader = cluster.leader().await.node.clone();

    // Below the threshold: no snapshot anywhere.
    for i in 0..THRESHOLD / 2 {
        put(&leader, &format!("below-{i}"), "v").await.expect("write");
    }
    let applied = leader.status().last_applied_index.expect("applied");
    cluster.converged_state(applied).await;
    for node in &cluster.nodes {
        assert_eq!(node.node.status().snapshot_index, None, "node {} snapshotted below the threshold", node.id);
    }

    // Many commands at once: the batcher carries them in few entries.
    let before = leader.status().last_log_index.expect("log");
    let mut writes = tokio::task::JoinSet::new();
    for i in 0..CONCURRENT_WRITES {
        let leader = leader.clone();
        writes.spawn(async move { put(&leader, &format!("batched-{i}"), "v").await.map(|_| ()) });
    }
    while let Some(written) = writes.join_next().await {
        written.expect("write task").expect("write");
    }
    let after = leader.status().last_log_index.expect("log");
    let entries = after - before;
    assert!(
        entries * 4 <= CONCURRENT_WRITES as u64,
        "{CONCURRENT_WRITES} concurrent writes took {entries} entries: not batched enough for this test"
    );

    // Every node counted the commands and snapshotted, far below the entry threshold.
    for node in &cluster.nodes {
        let status = wait_status(&node.node, "a snapshot by command count", |s| s.snapshot_index.is_some()).await;
        let snapshot_index = status.snapshot_index.expect("snapshot");
        assert!(snapshot_index > before, "node {}: the snapshot covers the batched commands", node.id);
    }
    let state = cluster.converged_state(after).await;
    assert_eq!(state.entries.len(), THRESHOLD as usize / 2 + CONCURRENT_WRITES);
    cluster.stop_all().await;
}
