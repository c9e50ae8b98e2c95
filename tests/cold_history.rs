//! Retained history on disk, through real node processes: finalized
//! executions go to each node's cold store (`<data-dir>/cold.redb`) at every
//! snapshot; a cluster filled past the snapshot threshold several times
//! serves them from there, a fourth node that joins by snapshot serves them
//! too, and a node SIGKILLed and restarted comes back to the same state hash.

mod support;

use std::future::Future;
use std::time::Duration;

use gavel_proto::v1 as pb;
use support::{register, retry, Cluster};

/// The whole test, bounded.
const TEST_BOUND: Duration = Duration::from_secs(240);
/// Lifecycles run: each is three commands (submit, poll, report), so at 20
/// entries per snapshot the cluster snapshots several times.
const LIFECYCLES: usize = 60;

async fn bounded<F: Future<Output = ()>>(body: F) {
    tokio::time::timeout(TEST_BOUND, body).await.expect("the test did not finish within its bound");
}

/// Submits, leases and completes `execution_id` through `via`.
async fn run_lifecycle(cluster: &Cluster, via: u64, execution_id: &str) {
    let input_json = format!("{{\"id\":\"{execution_id}\"}}");
    support::run_lifecycle(cluster, via, execution_id, input_json, "{}".to_string()).await;
}

async fn assert_completed(cluster: &Cluster, via: u64, execution_id: &str) {
    let execution =
        cluster.get_execution(via, execution_id).await.unwrap_or_else(|| panic!("node {via} serves {execution_id}"));
    assert_eq!(execution.state, pb::ExecutionState::Completed as i32, "{execution_id} through node {via}");
    assert!(execution.result.is_some(), "{execution_id} carries its result");
}

/// Whether node `id` has its cold store file (a redb file preallocates, so
/// its size says little about what it holds; the unit tests of
/// `gavel-server`'s `cold_store` and `app` check the contents).
fn has_cold_store(cluster: &Cluster, id: u64) -> bool {
    let node = cluster.nodes.iter().find(|node| node.id == id).expect("a placed node");
    let path = node.data_dir.join("cold.redb");
    path.is_file()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn finalized_executions_are_served_from_disk_by_old_restarted_and_joining_nodes() {
    bounded(async {
        let flags = ["--snapshot-logs-since-last=20", "--logs-to-keep=5"];
        let mut cluster = Cluster::start_with(3, &flags).await;
        let leader = cluster.wait_for_leader().await;
        register(&cluster, leader, support::capability("docs.read", pb::SideEffect::Read)).await;
        for index in 0..LIFECYCLES {
            run_lifecycle(&cluster, leader, &format!("ex-{index}")).await;
        }
        let hash = cluster.wait_converged().await;
        let leader_status = cluster.status(leader).await.expect("leader status");
        let snapshot_index = leader_status.snapshot_index.expect("the leader built snapshots");
        assert!(
            snapshot_index >= 100,
            "several snapshots were built (each flushes the cold overlay): last at {snapshot_index}"
        );
        for id in 1..=3 {
            assert!(has_cold_store(&cluster, id), "node {id} keeps its cold store");
            for execution_id in ["ex-0", "ex-1", "ex-30"] {
                assert_completed(&cluster, id, execution_id).await;
            }
        }

        // A fourth node joins: the log before the snapshot is purged, so it
        // gets a snapshot, and writes its cold records to its own store.
        let new_node = cluster.join_learner_by_snapshot(leader).await;
        retry(|| {
            let mut client = cluster.cluster(leader);
            let request = pb::PromoteRequest { request_id: String::new(), node_id: new_node };
            async move { client.promote(request).await }
        })
        .await
        .expect("promote");
        cluster.wait_converged().await;
        let installed = cluster.status(new_node).await.expect("new node status").snapshot_index;
        assert!(installed >= Some(snapshot_index), "the new node installed a snapshot: {installed:?}");
        assert!(has_cold_store(&cluster, new_node), "the new node keeps its cold store");
        for execution_id in ["ex-0", "ex-1", "ex-30", "ex-59"] {
            assert_completed(&cluster, new_node, execution_id).await;
            let through_leader = cluster.execution_events(leader, execution_id).await;
            assert!(through_leader.len() >= 3, "{execution_id}: requested, started, completed: {through_leader:?}");
            assert_eq!(
                cluster.execution_events(new_node, execution_id).await,
                through_leader,
                "{execution_id}'s audit trail came with the snapshot"
            );
        }

        // A follower SIGKILLed after more history, and restarted, comes back
        // to the leader's state hash and still serves the old executions.
        let follower = cluster.follower().await;
        cluster.kill(follower);
        for index in LIFECYCLES..LIFECYCLES + 20 {
            run_lifecycle(&cluster, leader, &format!("ex-{index}")).await;
        }
        cluster.spawn(follower);
        let hash_after = cluster.wait_converged().await;
        assert_ne!(hash_after, hash, "the state moved on");
        for execution_id in ["ex-0", "ex-59", "ex-79"] {
            assert_completed(&cluster, follower, execution_id).await;
        }
    })
    .await;
}

/// Crash recovery with history on disk: with a snapshot every three entries,
/// followers and then the leader are SIGKILLed right after a burst of
/// lifecycles (while they apply it and build snapshots of it, flushing their
/// cold stores) and restarted; every node comes back to the same state hash
/// at the same applied index and serves the old executions and their events.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nodes_sigkilled_while_building_snapshots_come_back_to_the_same_state_hash() {
    bounded(async {
        let mut cluster = Cluster::start_with(3, &["--snapshot-logs-since-last=3", "--logs-to-keep=2"]).await;
        let leader = cluster.wait_for_leader().await;
        register(&cluster, leader, support::capability("docs.read", pb::SideEffect::Read)).await;
        let mut next = 0;
        for _ in 0..2 {
            let victim = cluster.follower().await;
            for _ in 0..8 {
                run_lifecycle(&cluster, leader, &format!("ex-{next}")).await;
                next += 1;
            }
            cluster.kill(victim);
            for _ in 0..8 {
                run_lifecycle(&cluster, leader, &format!("ex-{next}")).await;
                next += 1;
            }
            cluster.spawn(victim);
        }
        for _ in 0..8 {
            run_lifecycle(&cluster, leader, &format!("ex-{next}")).await;
            next += 1;
        }
        cluster.kill(leader);
        let successor = cluster.wait_for_leader().await;
        for _ in 0..8 {
            run_lifecycle(&cluster, successor, &format!("ex-{next}")).await;
            next += 1;
        }
        cluster.spawn(leader);
        cluster.wait_converged().await;
        let reference = cluster.execution_events(successor, "ex-0").await;
        assert!(reference.len() >= 3, "ex-0's trail is retained: {reference:?}");
        for id in cluster.running() {
            for execution_id in ["ex-0".to_string(), format!("ex-{}", next / 2), format!("ex-{}", next - 1)] {
                assert_completed(&cluster, id, &execution_id).await;
            }
            assert_eq!(cluster.execution_events(id, "ex-0").await, reference, "node {id} has ex-0's trail");
        }
    })
    .await;
}

/// What node `id` logged, over all its starts.
fn node_log(cluster: &Cluster, id: u64) -> String {
    std::fs::read_to_string(cluster.dir.path().join(format!("n{id}.log"))).unwrap_or_default()
}

/// Three nodes started with `flags` that ran `lifecycles` lifecycles
/// (`ex-0`...) through the leader and converged: the cluster, its leader
/// and their state hash.
async fn start_with_lifecycles(flags: &[&str], lifecycles: usize) -> (Cluster, u64, String) {
    let cluster = Cluster::start_with(3, flags).await;
    let leader = cluster.wait_for_leader().await;
    register(&cluster, leader, support::capability("docs.read", pb::SideEffect::Read)).await;
    for index in 0..lifecycles {
        run_lifecycle(&cluster, leader, &format!("ex-{index}")).await;
    }
    let hash = cluster.wait_converged().await;
    (cluster, leader, hash)
}

/// Logged when a node resumes from the checkpoint in its cold store.
const RESUMED: &str = "the application resumed from its own checkpoint at the stored snapshot";
/// Logged when a node rebuilds its state (and cold store) from the snapshot.
const RESTORED: &str = "restored the application from the stored snapshot";

/// The command-count policy snapshots a cluster whose entry threshold is never
/// reached, and a follower SIGKILLed and restarted with many finalized
/// executions resumes from the checkpoint in its cold store (hot state and
/// position, written with the last snapshot's cold flush) instead of
/// rewriting them from the snapshot, and comes back to the leader's hash.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restarted_node_resumes_from_its_cold_store_checkpoint_without_rewriting_history() {
    bounded(async {
        let flags = ["--snapshot-logs-since-last=100000", "--snapshot-commands-since-last=30", "--logs-to-keep=5"];
        let (mut cluster, leader, hash) = start_with_lifecycles(&flags, 40).await;
        let leader_status = cluster.status(leader).await.expect("leader status");
        let snapshot_index = leader_status.snapshot_index.expect("snapshots by command count");
        assert!(snapshot_index >= 60, "120 commands at 30 per snapshot: last snapshot at {snapshot_index}");

        // Quiet: the follower's last snapshot is built and stored.
        let follower = cluster.follower().await;
        let mut settled = cluster.status(follower).await.expect("follower status").snapshot_index;
        for _ in 0..20 {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let now = cluster.status(follower).await.expect("follower status").snapshot_index;
            if now == settled {
                break;
            }
            settled = now;
        }
        assert!(settled.is_some(), "the follower snapshotted by command count");
        assert!(!node_log(&cluster, follower).contains(RESUMED), "the first start had nothing to resume from");

        cluster.kill(follower);
        cluster.spawn(follower);
        assert_eq!(cluster.wait_converged().await, hash, "the restarted follower has the leader's state hash");
        let log = node_log(&cluster, follower);
        assert_eq!(log.matches(RESUMED).count(), 1, "the restart resumed from the checkpoint");
        assert!(!log.contains(RESTORED), "the restart did not rewrite the cold records from the snapshot");
        for execution_id in ["ex-0", "ex-20", "ex-39"] {
            assert_completed(&cluster, follower, execution_id).await;
            assert_eq!(
                cluster.execution_events(follower, execution_id).await,
                cluster.execution_events(leader, execution_id).await,
                "{execution_id}'s audit trail on the resumed follower"
            );
        }
        // It goes on applying with the others.
        for index in 40..50 {
            run_lifecycle(&cluster, leader, &format!("ex-{index}")).await;
        }
        assert_ne!(cluster.wait_converged().await, hash);
        assert_completed(&cluster, follower, "ex-49").await;
    })
    .await;
}

/// Logged when a node resumes from a checkpoint written after its stored
/// snapshot (the one its state machine wrote as it closed, here).
const RESUMED_PAST: &str = "the application resumed from its own checkpoint past the stored snapshot";

/// Changes written between snapshots (every 10 cold writes, with a snapshot
/// only every 90 commands) leave a node's checkpoint behind its store until
/// the next one. A follower stopped with SIGTERM writes a checkpoint as it
/// closes and resumes from it; one SIGKILLed goes back to its last durable
/// checkpoint and replays the log; a learner that joins while the leader's
/// store is past its checkpoint gets a view of a checkpoint the leader
/// writes for it. Every node comes back to the leader's state hash and
/// serves the old executions with their trails.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn changes_written_between_snapshots_survive_a_stop_a_kill_and_a_join() {
    bounded(async {
        let flags = [
            "--checkpoint-cold-writes=10",
            "--snapshot-commands-since-last=90",
            "--snapshot-logs-since-last=100000",
            "--logs-to-keep=5",
        ];
        // 120 commands: a snapshot near 90, then changes written after it.
        let (mut cluster, leader, hash) = start_with_lifecycles(&flags, 40).await;
        assert!(cluster.status(leader).await.expect("leader status").snapshot_index.is_some(), "a snapshot was built");

        let stopped = cluster.follower().await;
        cluster.stop(stopped);
        let closing = node_log(&cluster, stopped);
        assert!(
            closing.contains("checkpoint written") && closing.contains("durable=true"),
            "the stopped follower wrote a durable checkpoint as it closed"
        );
        cluster.spawn(stopped);
        assert_eq!(cluster.wait_converged().await, hash, "the running nodes are at the leader's hash");
        assert!(cluster.status(stopped).await.is_some(), "the stopped follower runs and answers again");
        let log = node_log(&cluster, stopped);
        assert_eq!(log.matches(RESUMED_PAST).count(), 1, "it resumed from the checkpoint it wrote as it closed");
        assert!(!log.contains(RESTORED), "it did not rewrite its cold records from a snapshot");

        let killed =
            cluster.running().into_iter().find(|id| *id != leader && *id != stopped).expect("another follower");
        cluster.kill(killed);
        for index in 40..45 {
            run_lifecycle(&cluster, leader, &format!("ex-{index}")).await;
        }
        cluster.spawn(killed);
        let hash = cluster.wait_converged().await;

        // 135 commands: the leader's store is past its last snapshot's
        // checkpoint when the learner asks for a snapshot.
        let new_node = cluster.join_learner_by_snapshot(leader).await;
        assert_eq!(cluster.wait_converged().await, hash, "the learner reached the leader's hash");
        let installed = cluster.status(new_node).await.expect("new node status").snapshot_index;
        assert!(installed.is_some(), "the learner installed a snapshot: {installed:?}");
        for id in [stopped, killed, new_node] {
            for execution_id in ["ex-0", "ex-25", "ex-39", "ex-44"] {
                assert_completed(&cluster, id, execution_id).await;
                assert_eq!(
                    cluster.execution_events(id, execution_id).await,
                    cluster.execution_events(leader, execution_id).await,
                    "{execution_id}'s audit trail on node {id}"
                );
            }
        }
    })
    .await;
}
