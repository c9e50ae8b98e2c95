//! The batcher's turn on three in-process nodes: a write that found nothing
//! in flight proposes alone from its own task, and cancelling it mid-flight
//! must not strand the writes that queued behind it.
//!
//! The scenario is a precondition, checked: the proposing write must still
//! be in flight after its first poll, and so must the writes queued behind
//! it. A write answered at its first poll (refused at once because
//! leadership moved on a starved machine, or already answered) sets up no
//! scenario, and the round is tried again (at most [`ATTEMPTS`] times,
//! each reason printed). What the batcher promises is then asserted: every
//! queued write is proposed and answered with success once the proposing
//! one is dropped; a queued write that fails does so only if the leader's
//! term moved (the round is tried again), and fails the test otherwise.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use gavel_raft::RaftNode;

use crate::common::{test_timings, Cluster, WAIT};

/// Rounds of one cancelled write with writes queued behind it.
const ROUNDS: usize = 20;
/// Writes queued behind the cancelled one in each round.
const QUEUED: usize = 8;
/// Tries of one round whose scenario could not be set up, or whose leader
/// moved, before the test fails.
const ATTEMPTS: usize = 5;

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

/// How one round ended.
enum Round {
    /// Every queued write was proposed and answered with success.
    Answered,
    /// The scenario was not set up, or the leader's term moved during the
    /// round (the reason): try again.
    Again(String),
}

/// One round on `leader` (leading in `term`): a write that takes the turn,
/// `QUEUED` writes behind it, the first one dropped; the queued ones must be
/// answered. A write answered at its first poll sets up no scenario (try
/// again); a queued write that fails is a failure of the test unless the
/// leader's term moved meanwhile.
async fn round(leader: &RaftNode, term: u64, round: usize, attempt: usize) -> Round {
    let not_set_up = |what: &str, answer: &dyn std::fmt::Debug| -> Round {
        let status = leader.status();
        Round::Again(format!("{what} ({answer:?}); the leader's term went from {term} to {}", status.term))
    };
    // Let the previous round's last entry give the turn up: this write
    // then takes it and hands its command to openraft at the first poll.
    tokio::time::sleep(Duration::from_millis(10)).await;
    let mut alone = Box::pin(leader.write(command(&format!("cancelled-{round}-{attempt}"))));
    if let Some(answer) = poll_once(&mut alone).await {
        return not_set_up("the proposing write was answered at its first poll", &answer);
    }
    let mut queued: Vec<_> =
        (0..QUEUED).map(|n| Box::pin(leader.write(command(&format!("queued-{round}-{n}"))))).collect();
    for write in &mut queued {
        if let Some(answer) = poll_once(write).await {
            return not_set_up("a write behind one in flight was answered at its first poll", &answer);
        }
    }
    // The proposing call gives up (a client hung up): the queue moves on.
    drop(alone);
    for (n, write) in queued.into_iter().enumerate() {
        let reply = tokio::time::timeout(WAIT, write).await;
        let reply = reply.unwrap_or_else(|_| panic!("round {round}: queued write {n} was stranded"));
        if let Err(error) = reply {
            let now = leader.status().term;
            assert_ne!(now, term, "round {round}: queued write {n} failed with the leader's term unchanged: {error}");
            return Round::Again(format!(
                "queued write {n} failed ({error}): the leader's term went from {term} to {now}"
            ));
        }
    }
    Round::Answered
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writes_queued_behind_a_cancelled_write_are_still_proposed_and_answered() {
    let mut cluster = Cluster::start(3, test_timings()).await;
    for number in 0..ROUNDS {
        let mut moves = Vec::new();
        loop {
            let leader = cluster.leader().await.node.clone();
            let term = leader.status().term;
            match round(&leader, term, number, moves.len()).await {
                Round::Answered => break,
                Round::Again(reason) => {
                    println!("round {number}: retried: {reason}");
                    moves.push(reason);
                    assert!(moves.len() < ATTEMPTS, "round {number}: no try set the scenario up: {moves:?}");
                }
            }
        }
    }
    let leader = cluster.leader().await.node.clone();
    let last = leader.status().last_log_index.expect("the leader has a log");
    let state = cluster.converged_state(last).await;
    for round in 0..ROUNDS {
        for n in 0..QUEUED {
            assert!(state.entries.contains_key(&format!("queued-{round}-{n}")), "queued-{round}-{n} was not applied");
        }
    }
    cluster.stop_all().await;
}
