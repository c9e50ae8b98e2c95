//! The Raft log under SIGKILL: nodes of a real three-node cluster are killed
//! while they append under write load and restarted on the same data, five
//! times. Every restart must recover its log (no refusal: a SIGKILL tears at
//! most the last write, which was never acknowledged), catch up, and end
//! with the same state hash and applied index as the others; no write that
//! was acknowledged may be missing.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gavel_proto::v1 as pb;
use support::{approval_request, Cluster, WAIT};

/// How many kills, and the bound of the whole test.
const KILLS: u64 = 5;
const TEST_BOUND: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nodes_killed_while_appending_recover_their_log_and_converge() {
    tokio::time::timeout(TEST_BOUND, run()).await.expect("the test finishes within its bound");
}

async fn run() {
    let mut cluster = Cluster::start(3).await;
    let clients: Vec<_> = (1..=3).map(|id| cluster.approvals(id)).collect();
    let stop = Arc::new(AtomicBool::new(false));
    // Writers create approvals one after another until told to stop, each
    // through the next node in turn (a retry goes to the next node, so a dead
    // one is skipped, and keeps the request id, so it is deduplicated).
    let writers: Vec<_> = (0..4usize)
        .map(|writer| {
            let clients = clients.clone();
            let stop = stop.clone();
            tokio::spawn(async move {
                let mut acknowledged = Vec::new();
                for sequence in 0.. {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let id = format!("apr-w{writer}-{sequence}");
                    let request = approval_request(&id, "wal-kill");
                    let mut attempt = writer + sequence;
                    support::retry(|| {
                        let mut client = clients[attempt % clients.len()].clone();
                        attempt += 1;
                        let request = request.clone();
                        async move { client.create_approval(request).await }
                    })
                    .await
                    .unwrap_or_else(|status| panic!("create {id} failed for good: {status:?}"));
                    acknowledged.push(id);
                }
                acknowledged
            })
        })
        .collect();

    for kill in 0..KILLS {
        // Let the load run, then kill a node mid-append: followers and the
        // leader in turn.
        tokio::time::sleep(Duration::from_millis(300 + 150 * kill)).await;
        let victim = kill % 3 + 1;
        let applied_before = cluster.status(victim).await.map(|status| status.last_applied_index);
        cluster.kill(victim);
        tokio::time::sleep(Duration::from_millis(200)).await;
        cluster.spawn(victim);
        // The restarted node opens its log (a refusal would keep it from
        // ever answering) and catches up past where it was.
        let started = Instant::now();
        loop {
            let status = cluster.status(victim).await;
            if let (Some(status), Some(before)) = (&status, applied_before) {
                if status.last_applied_index >= before {
                    break;
                }
            } else if status.is_some() && applied_before.is_none() {
                break;
            }
            assert!(
                started.elapsed() < WAIT,
                "node {victim} did not come back after kill {kill}; logs in {}",
                cluster.dir.path().display()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    stop.store(true, Ordering::SeqCst);
    let mut acknowledged = Vec::new();
    for writer in writers {
        acknowledged.extend(writer.await.expect("writer task"));
    }
    assert!(acknowledged.len() > 20, "the writers made progress under the kills: {}", acknowledged.len());

    // Every node ends at the same applied index with the same state.
    let hash = cluster.wait_converged().await;
    assert!(!hash.is_empty());
    // And every acknowledged write is there, read through each node.
    for id in 1..=3 {
        let client = cluster.approvals(id);
        for approval_id in &acknowledged {
            let found = support::retry(|| {
                let mut client = client.clone();
                let request = pb::GetApprovalRequest { id: approval_id.clone(), caller_now_ms: None };
                async move { client.get_approval(request).await }
            })
            .await
            .unwrap_or_else(|status| panic!("get {approval_id} through node {id}: {status:?}"))
            .into_inner()
            .approval;
            assert!(found.is_some(), "acknowledged approval {approval_id} is missing on node {id}");
        }
    }
}
