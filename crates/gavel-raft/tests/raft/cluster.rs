//! Three in-process nodes on loopback over real gRPC, with real sled storage.
//!
//! What a test asks of one leader runs in a round
//! ([`Cluster::in_one_term`]): on a loaded machine the leader can move at
//! any time, and a round it moved under is tried again with the next one.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common::{put, same, test_timings, wait_status, Cluster, WAIT};
use gavel_raft::{LeaderRoute, Role, WriteError};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writes_through_the_leader_are_applied_on_all_three_nodes() {
    let mut cluster = Cluster::start(3, test_timings()).await;
    // Each try writes keys of its own: a write refused by a leader that was
    // moving may still have been committed.
    let (prefix, last) = cluster
        .in_one_term("twenty writes and an overwrite", |leader, attempt| async move {
            let prefix = format!("try-{attempt}-");
            for i in 0..20 {
                let previous = put(&leader.node, &format!("{prefix}key-{i}"), "first").await;
                let previous = previous.map_err(|error| format!("write {i} was refused: {error:?}"))?;
                assert_eq!(previous, None);
            }
            let previous = put(&leader.node, &format!("{prefix}key-0"), "second").await;
            let previous = previous.map_err(|error| format!("the overwrite was refused: {error:?}"))?;
            assert_eq!(previous.as_deref(), Some("first"), "the reply is the application's answer");
            Ok((prefix, leader.node.status().last_log_index.expect("leader has a log")))
        })
        .await;

    let state = cluster.converged_state(last).await;
    assert_eq!(state.entries.keys().filter(|key| key.starts_with(&prefix)).count(), 20);
    assert_eq!(state.entries[&format!("{prefix}key-0")], "second");
    cluster.stop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_write_on_a_follower_returns_forward_to_leader_with_the_leader_address() {
    let mut cluster = Cluster::start(3, test_timings()).await;
    let cluster_ref = &cluster;
    cluster_ref
        .in_one_term("a write on a follower", |leader, _| async move {
            let follower = cluster_ref.follower_of(leader.id);
            let error = match put(&follower.node, "k", "v").await {
                Ok(reply) => return Err(format!("node {} accepted the write: {reply:?}", follower.id)),
                Err(error) => error,
            };
            let to_leader =
                WriteError::ForwardToLeader { leader_id: Some(leader.id), leader_addr: Some(leader.addr.clone()) };
            same("the follower's refusal", error, to_leader)?;
            let status = follower.node.status();
            same("the follower's leader", status.leader_id, Some(leader.id))?;
            same("the follower's leader address", status.leader_addr.as_deref(), Some(leader.addr.as_str()))?;
            // The cheap per-request lookup agrees with the full status on both sides.
            let route = LeaderRoute::At { leader_id: leader.id, leader_addr: leader.addr.clone() };
            same("the follower's route", follower.node.leader_route(), route)?;
            same("the leader's route", leader.node.leader_route(), LeaderRoute::Here)
        })
        .await;
    cluster.stop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn linearizable_read_succeeds_on_the_leader_and_forwards_on_a_follower() {
    let mut cluster = Cluster::start(3, test_timings()).await;
    let cluster_ref = &cluster;
    cluster_ref
        .in_one_term("a read barrier on the leader and on a follower", |leader, _| async move {
            put(&leader.node, "k", "v").await.map_err(|error| format!("the write was refused: {error:?}"))?;
            tokio::time::timeout(WAIT, leader.node.ensure_linearizable())
                .await
                .expect("read barrier answers in time")
                .map_err(|error| format!("the leader did not confirm its leadership: {error:?}"))?;
            // After the barrier, the leader's application has every acknowledged write.
            assert_eq!(leader.app.state().entries.get("k").map(String::as_str), Some("v"));

            let follower = cluster_ref.follower_of(leader.id);
            let barrier = tokio::time::timeout(WAIT, follower.node.ensure_linearizable()).await;
            let error = match barrier.expect("read barrier answers in time") {
                Ok(()) => return Err(format!("node {} served a linearizable read", follower.id)),
                Err(error) => error,
            };
            let to_leader =
                WriteError::ForwardToLeader { leader_id: Some(leader.id), leader_addr: Some(leader.addr.clone()) };
            same("the follower's refusal", error, to_leader)
        })
        .await;
    cluster.stop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn after_the_leader_shuts_down_a_new_leader_is_elected_and_writes_continue() {
    let mut cluster = Cluster::start(3, test_timings()).await;
    cluster.put_on_leader("before", "1").await;
    let old_leader_id = cluster.leader().await.id;

    cluster.node_mut(old_leader_id).stop().await;
    assert_eq!(cluster.node(old_leader_id).node.status().role, Role::Shutdown);

    let new_leader = cluster.leader().await;
    assert_ne!(new_leader.id, old_leader_id);
    cluster.put_on_leader("after", "2").await;
    let last = cluster.leader().await.node.status().last_log_index.expect("log");
    let state = cluster.converged_state(last).await;
    assert_eq!(state.entries.get("before").map(String::as_str), Some("1"));
    assert_eq!(state.entries.get("after").map(String::as_str), Some("2"));

    // The old leader comes back from its data directory as a follower.
    let timings = cluster.timings.clone();
    cluster.node_mut(old_leader_id).restart(timings).await;
    let leader_id = cluster.leader().await.id;
    assert_ne!(leader_id, old_leader_id, "the running leader keeps its term");
    cluster.converged_state(last).await;
    cluster.stop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_restarted_from_its_data_dir_rejoins_with_every_write() {
    let mut cluster = Cluster::start(3, test_timings()).await;
    let leader_id = cluster.leader().await.id;
    let restarted_id = cluster.follower_of(leader_id).id;
    for i in 0..10 {
        cluster.put_on_leader(&format!("early-{i}"), "x").await;
    }
    cluster.node_mut(restarted_id).stop().await;
    // Writes made while it is down still commit on the remaining majority.
    for i in 0..10 {
        cluster.put_on_leader(&format!("late-{i}"), "y").await;
    }
    let timings = cluster.timings.clone();
    let restarted = cluster.node_mut(restarted_id);
    restarted.restart(timings).await;

    let last = cluster.leader().await.node.status().last_log_index.expect("log");
    let state = cluster.converged_state(last).await;
    assert_eq!(state.entries.len(), 20);
    assert_eq!(cluster.node(restarted_id).app.state(), state);
    cluster.stop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn initialize_again_is_a_no_op_and_a_removed_voter_leaves_the_membership() {
    let mut cluster = Cluster::start(3, test_timings()).await;
    let leader = cluster.leader().await;
    let members: BTreeMap<u64, String> = cluster.nodes.iter().map(|n| (n.id, n.addr.clone())).collect();
    for test_node in &cluster.nodes {
        test_node.node.initialize(members.clone()).await.expect("re-initialize is accepted");
    }

    let removed = cluster.follower_of(leader.id).id;
    tokio::time::timeout(WAIT, leader.node.remove_node(removed))
        .await
        .expect("membership change answers in time")
        .expect("remove a voter");
    let status = wait_status(&leader.node, "membership without the removed node", |s| {
        s.members.iter().all(|m| m.node_id != removed)
    })
    .await;
    assert_eq!(status.members.iter().filter(|m| m.voter).count(), 2);
    put(&leader.node, "k", "v").await.expect("two voters still commit");

    let error = leader
        .node
        .promote(removed, Duration::from_secs(1))
        .await
        .expect_err("a node that is not a learner cannot be promoted");
    assert!(matches!(error, WriteError::Invalid(_)), "{error:?}");
    cluster.stop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leader_hands_leadership_to_the_voter_it_names_and_writes_continue_there() {
    let mut cluster = Cluster::start(3, test_timings()).await;
    let leader = cluster.leader().await;
    let (old_id, term) = (leader.id, leader.node.status().term);
    put(&leader.node, "before", "1").await.expect("write");
    let target = cluster.follower_of(old_id);
    let target_id = target.id;

    // Only the leader hands over, and only to a voter.
    let refused = target.node.transfer_leader(old_id).await.expect_err("a follower does not lead");
    assert!(matches!(refused, WriteError::ForwardToLeader { leader_id: Some(id), .. } if id == old_id), "{refused:?}");
    let refused = leader.node.transfer_leader(42).await.expect_err("node 42 is not a member");
    assert!(matches!(refused, WriteError::Invalid(_)), "{refused:?}");

    leader.node.transfer_leader(target_id).await.expect("the transfer is handed to raft");
    let status = wait_status(&target.node, "the named voter leads", |status| status.role == Role::Leader).await;
    assert!(status.term > term, "the new leader was elected in a later term");
    let new_leader = cluster.leader().await;
    assert_eq!(new_leader.id, target_id);
    put(&new_leader.node, "after", "2").await.expect("write on the new leader");
    let last = new_leader.node.status().last_log_index.expect("log");
    let state = cluster.converged_state(last).await;
    assert_eq!(state.entries.get("before").map(String::as_str), Some("1"));
    assert_eq!(state.entries.get("after").map(String::as_str), Some("2"));
    cluster.stop_all().await;
}

/// A new leader refuses a membership change until a quorum has answered
/// it (its lease) and until an entry of its own term has committed (before
/// that, the last membership counts as still in progress); both clear
/// within a round trip, and the change waits for them rather than failing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_membership_change_on_a_leader_elected_a_moment_ago_waits_for_its_first_commit() {
    let mut cluster = Cluster::start(3, test_timings()).await;
    let old = cluster.leader().await.id;
    let handed = cluster.node(old).node.hand_over_leadership().await.expect("the leader hands over in time");
    let new_leader = &cluster.node(handed).node;
    tokio::time::timeout(WAIT, new_leader.remove_node(old))
        .await
        .expect("membership change answers in time")
        .expect("the old leader is removed by the new one at once");
    let status =
        wait_status(new_leader, "membership without the old leader", |s| s.members.iter().all(|m| m.node_id != old))
            .await;
    assert_eq!(status.members.iter().filter(|m| m.voter).count(), 2);
    put(new_leader, "k", "v").await.expect("two voters commit");
    cluster.stop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stopping_leader_hands_over_to_a_caught_up_voter_and_a_follower_hands_nothing() {
    let mut cluster = Cluster::start(3, test_timings()).await;
    let leader = cluster.leader().await;
    let (old_id, term) = (leader.id, leader.node.status().term);
    put(&leader.node, "before", "1").await.expect("write");
    let follower = cluster.follower_of(old_id);
    assert_eq!(follower.node.hand_over_leadership().await, None, "a follower has nothing to hand over");

    let handed = leader.node.hand_over_leadership().await.expect("the leader hands over in time");
    assert_ne!(handed, old_id);
    assert_ne!(leader.node.status().role, Role::Leader, "the old leader no longer leads");
    // At once: the old leader has heard from the new one, whose followers
    // may not have answered it yet. openraft 0.10 refuses writes on a
    // leader no quorum has acknowledged (its lease); the write waits for
    // the acknowledgement instead of failing as "no leader".
    put(&cluster.node(handed).node, "after", "2").await.expect("write on the new leader at once");
    let new_leader = cluster.leader().await;
    assert_eq!(new_leader.id, handed);
    assert!(new_leader.node.status().term > term, "the new leader was elected in a later term");
    cluster.stop_all().await;
}
