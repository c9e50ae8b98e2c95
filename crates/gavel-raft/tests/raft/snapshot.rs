//! Snapshots across the cluster: building, purging, catching up a new node
//! through install-snapshot, and restarting from a snapshot.

use std::time::Duration;

use crate::common::{self, put, test_timings, wait_status, Cluster, TestNode};
use gavel_raft::RaftTimings;

fn small_snapshot_timings() -> RaftTimings {
    RaftTimings { snapshot_logs_since_last: 20, logs_to_keep: 5, ..test_timings() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_new_learner_catches_up_through_a_snapshot_and_is_promoted_to_voter() {
    let timings = small_snapshot_timings();
    let mut cluster = Cluster::start(3, timings.clone()).await;
    let leader = cluster.leader().await;
    // 100 values of 30 KiB: a 3 MiB snapshot, streamed in several chunks.
    for i in 0..100 {
        let value = format!("{i:0>30720}");
        put(&leader.node, &format!("key-{i}"), &value).await.expect("write");
    }
    // The leader snapshotted and purged, so the log alone cannot catch up a new node.
    let status = wait_status(&leader.node, "a purged log behind a snapshot", |s| {
        s.purged_index.is_some_and(|purged| purged > 50)
    })
    .await;
    assert!(status.snapshot_index >= status.purged_index);

    let learner = TestNode::start(4, None, &cluster.root.path().join("node-4"), timings.clone()).await;
    tokio::time::timeout(common::WAIT, leader.node.add_learner(4, learner.addr.clone()))
        .await
        .expect("add_learner answers in time")
        .expect("add learner");
    let leader_last = leader.node.status().last_log_index.expect("log");
    let learner_status =
        wait_status(&learner.node, "the learner catching up", |s| s.last_applied_index >= Some(leader_last)).await;
    assert!(learner.app.restores() >= 1, "the learner installed a snapshot");
    assert!(learner_status.snapshot_index.is_some());

    tokio::time::timeout(common::WAIT, leader.node.promote(4, Duration::from_secs(20)))
        .await
        .expect("promote answers in time")
        .expect("promote the learner");
    let status =
        wait_status(&leader.node, "node 4 as a voter", |s| s.members.iter().any(|m| m.node_id == 4 && m.voter)).await;
    assert_eq!(status.members.iter().filter(|m| m.voter).count(), 4);

    put(&leader.node, "after-promotion", "yes").await.expect("write with four voters");
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
        put(&cluster.leader().await.node, &format!("key-{i}"), "v").await.expect("write");
    }
    let last = cluster.leader().await.node.status().last_log_index.expect("log");
    cluster.converged_state(last).await;
    let restarted = cluster.node_mut(restarted_id);
    let applied = restarted.node.status().last_applied_index;
    restarted.node.trigger_snapshot().await.expect("snapshot on the follower");
    assert!(restarted.node.status().snapshot_index >= applied);

    // Ten more writes after the snapshot: the log suffix.
    for i in 50..60 {
        put(&cluster.leader().await.node, &format!("key-{i}"), "v").await.expect("write");
    }
    let last = cluster.leader().await.node.status().last_log_index.expect("log");
    cluster.converged_state(last).await;

    let restarted = cluster.node_mut(restarted_id);
    restarted.restart(timings).await;
    let state = cluster.converged_state(last).await;
    assert_eq!(state.entries.len(), 60);
    let restarted = cluster.node(restarted_id);
    assert_eq!(restarted.app.restores(), 1, "the application state came from the snapshot");
    assert!(
        restarted.app.applies() <= 10,
        "only the suffix after the snapshot is replayed, not the history ({} applies)",
        restarted.app.applies()
    );
    cluster.stop_all().await;
}
