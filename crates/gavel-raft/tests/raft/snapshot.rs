//! Snapshots across the cluster: building, purging, catching up a new node
//! through install-snapshot, and restarting from a snapshot.
//!
//! Writes and membership changes go to the leader of the moment
//! ([`Cluster::in_one_term`]): these tests run for seconds, and on a loaded
//! machine the leader can move meanwhile.

use std::time::Duration;

use crate::common::{self, test_timings, wait_status, Cluster, TestNode};
use gavel_raft::RaftTimings;

fn small_snapshot_timings() -> RaftTimings {
    RaftTimings { snapshot_logs_since_last: 20, logs_to_keep: 5, ..test_timings() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_new_learner_catches_up_through_a_snapshot_and_is_promoted_to_voter() {
    let timings = small_snapshot_timings();
    let mut cluster = Cluster::start(3, timings.clone()).await;
    // 100 values of 30 KiB: a 3 MiB snapshot, streamed in several chunks.
    for i in 0..100 {
        let value = format!("{i:0>30720}");
        cluster.put_on_leader(&format!("key-{i}"), &value).await;
    }
    // The leader snapshotted and purged, so the log alone cannot catch up a new node.
    let leader = cluster.leader().await;
    let status = wait_status(&leader.node, "a purged log behind a snapshot", |s| {
        s.purged_index.is_some_and(|purged| purged > 50)
    })
    .await;
    assert!(status.snapshot_index >= status.purged_index);

    let learner = TestNode::start(4, None, &cluster.root.path().join("node-4"), timings.clone()).await;
    // Adding a learner again, or promoting a voter, succeeds at once: a try
    // whose change committed under a leader that then moved is harmless.
    let learner_addr = &learner.addr;
    let leader_last = cluster
        .in_one_term("adding node 4 as a learner", |leader, _| async move {
            tokio::time::timeout(common::WAIT, leader.node.add_learner(4, learner_addr.clone()))
                .await
                .expect("add_learner answers in time")
                .map_err(|error| format!("add learner: {error:?}"))?;
            Ok(leader.node.status().last_log_index.expect("log"))
        })
        .await;
    let learner_status =
        wait_status(&learner.node, "the learner catching up", |s| s.last_applied_index >= Some(leader_last)).await;
    assert!(learner.app.restores() >= 1, "the learner installed a snapshot");
    assert!(learner_status.snapshot_index.is_some());

    let status = cluster
        .in_one_term("promoting node 4", |leader, _| async move {
            tokio::time::timeout(common::WAIT, leader.node.promote(4, Duration::from_secs(20)))
                .await
                .expect("promote answers in time")
                .map_err(|error| format!("promote the learner: {error:?}"))?;
            Ok(wait_status(&leader.node, "node 4 as a voter", |s| s.members.iter().any(|m| m.node_id == 4 && m.voter))
                .await)
        })
        .await;
    assert_eq!(status.members.iter().filter(|m| m.voter).count(), 4);

    cluster.put_on_leader("after-promotion", "yes").await;
    cluster.nodes.push(learner);
    let last = cluster.leader().await.node.status().last_log_index.expect("log");
    let state = cluster.converged_state(last).await;
    assert_eq!(state.entries.len(), 101);
    assert_eq!(cluster.node(4).app.state(), state);
    cluster.stop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restarted_node_restores_its_snapshot_and_replays_only_the_log_suffix() {
    let timings = small_snapshot_timings();
    let mut cluster = Cluster::start(3, timings.clone()).await;
    let leader_id = cluster.leader().await.id;
    let restarted_id = cluster.follower_of(leader_id).id;
    for i in 0..50 {
        cluster.put_on_leader(&format!("key-{i}"), "v").await;
    }
    let last = cluster.leader().await.node.status().last_log_index.expect("log");
    cluster.converged_state(last).await;
    let restarted = cluster.node_mut(restarted_id);
    let applied = restarted.node.status().last_applied_index;
    restarted.node.trigger_snapshot().await.expect("snapshot on the follower");
    let snapshot_index = restarted.node.status().snapshot_index;
    assert!(snapshot_index >= applied);

    // Ten more writes after the snapshot: the log suffix.
    for i in 50..60 {
        cluster.put_on_leader(&format!("key-{i}"), "v").await;
    }
    let last = cluster.leader().await.node.status().last_log_index.expect("log");
    cluster.converged_state(last).await;

    let restarted = cluster.node_mut(restarted_id);
    restarted.restart(timings).await;
    let state = cluster.converged_state(last).await;
    assert_eq!(state.entries.len(), 60);
    let restarted = cluster.node(restarted_id);
    assert_eq!(restarted.app.restores(), 1, "the application state came from the snapshot");
    // Ten entries, one write each, unless the leader moved: then its
    // successor's first entry (no command) and a write made again count too.
    let suffix = last - snapshot_index.expect("the follower's snapshot");
    assert!(
        restarted.app.applies() <= suffix,
        "only the suffix after the snapshot ({suffix} entries) is replayed, not the history ({} applies)",
        restarted.app.applies()
    );
    cluster.stop_all().await;
}
