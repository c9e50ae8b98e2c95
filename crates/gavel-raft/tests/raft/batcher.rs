//! The batcher's turn on three in-process nodes: a write that found nothing
//! in flight proposes alone from its own task, and cancelling it mid-flight
//! must not strand the writes that queued behind it.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use crate::common::{test_timings, Cluster, WAIT};

/// Rounds of one cancelled write with writes queued behind it.
const ROUNDS: usize = 20;
/// Writes queued behind the cancelled one in each round.
const QUEUED: usize = 8;

/// Polls `future` once: its output if it is ready at once.
async fn poll_once<F: Future + Unpin>(future: &mut F) -> Option<F::Output> {
    std::future::poll_fn(|cx| {
        Poll::Ready(match Pin::new(&mut *future).poll(cx) {
            Poll::Ready(output) => Some(output),
            Poll::Pending => None,
        })
    })
    .await
}

fn command(key: &str) -> Vec<u8> {
    bincode::serialize(&(key, "v")).expect("encode command")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writes_queued_behind_a_cancelled_write_are_still_proposed_and_answered() {
    let mut cluster = Cluster::start(3, test_timings()).await;
    let leader = cluster.leader().await.node.clone();
    for round in 0..ROUNDS {
        // Let the previous round's last entry give the turn up: this write
        // then takes it and hands its command to openraft at the first poll.
        tokio::time::sleep(Duration::from_millis(10)).await;
        let mut alone = Box::pin(leader.write(command(&format!("cancelled-{round}"))));
        assert!(poll_once(&mut alone).await.is_none(), "a replicated write cannot be answered at its first poll");
        let mut queued: Vec<_> =
            (0..QUEUED).map(|n| Box::pin(leader.write(command(&format!("queued-{round}-{n}"))))).collect();
        for write in &mut queued {
            assert!(poll_once(write).await.is_none(), "a write behind one in flight waits");
        }
        // The proposing call gives up (a client hung up): the queue moves on.
        drop(alone);
        for (n, write) in queued.into_iter().enumerate() {
            let reply = tokio::time::timeout(WAIT, write).await;
            let reply = reply.unwrap_or_else(|_| panic!("round {round}: queued write {n} was stranded"));
            reply.unwrap_or_else(|e| panic!("round {round}: queued write {n} failed: {e}"));
        }
    }
    let last = leader.status().last_log_index.expect("the leader has a log");
    let state = cluster.converged_state(last).await;
    for round in 0..ROUNDS {
        for n in 0..QUEUED {
            assert!(state.entries.contains_key(&format!("queued-{round}-{n}")), "queued-{round}-{n} was not applied");
        }
    }
    cluster.stop_all().await;
}
