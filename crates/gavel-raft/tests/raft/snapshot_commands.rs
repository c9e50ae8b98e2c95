//! The command-count snapshot policy: a node snapshots once enough commands
//! were applied, however few log entries carried them.
//!
//! The concurrent writes are a round on one leader ([`Cluster::in_one_term`]):
//! if the leader moves under them (a loaded machine), some are refused and
//! the round is tried again, with keys of its own, on the next leader.

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

    // Below the threshold: no snapshot anywhere.
    for i in 0..THRESHOLD / 2 {
        cluster.put_on_leader(&format!("below-{i}"), "v").await;
    }
    let applied = cluster.leader().await.node.status().last_applied_index.expect("applied");
    cluster.converged_state(applied).await;
    for node in &cluster.nodes {
        assert_eq!(node.node.status().snapshot_index, None, "node {} snapshotted below the threshold", node.id);
    }

    // Many commands at once: the batcher carries them in few entries.
    let (prefix, before, after) = cluster
        .in_one_term("concurrent writes", |leader, attempt| async move {
            let leader = leader.node.clone();
            let prefix = format!("batched-{attempt}-");
            let before = leader.status().last_log_index.expect("log");
            let mut writes = tokio::task::JoinSet::new();
            for i in 0..CONCURRENT_WRITES {
                let (leader, key) = (leader.clone(), format!("{prefix}{i}"));
                writes.spawn(async move { put(&leader, &key, "v").await.map(|_| ()) });
            }
            let mut refused = Vec::new();
            while let Some(written) = writes.join_next().await {
                if let Err(error) = written.expect("write task") {
                    refused.push(error);
                }
            }
            if let Some(first) = refused.first() {
                return Err(format!("{} of the writes were refused, the first: {first:?}", refused.len()));
            }
            Ok((prefix, before, leader.status().last_log_index.expect("log")))
        })
        .await;
    let entries = after - before;
    assert!(
        entries * 4 <= CONCURRENT_WRITES as u64,
        "{CONCURRENT_WRITES} concurrent writes took {entries} entries: not batched enough for this test"
    );

    // Every node counted the commands and snapshotted, far below the entry
    // threshold. (A try the leader moved under may have snapshotted already,
    // below `before`: the snapshot awaited is one that covers the batched
    // commands.)
    for node in &cluster.nodes {
        wait_status(&node.node, "a snapshot by command count covering the batched commands", |s| {
            s.snapshot_index > Some(before)
        })
        .await;
    }
    let state = cluster.converged_state(after).await;
    let written = |prefix: &str| state.entries.keys().filter(|key| key.starts_with(prefix)).count();
    assert_eq!((written("below-"), written(&prefix)), (THRESHOLD as usize / 2, CONCURRENT_WRITES));
    cluster.stop_all().await;
}
