//! What the in-process cluster tests share: loopback listeners for a set
//! of nodes, and waiting for a leader that every node knows.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use gavel_server::server::RunningNode;
use tokio::net::TcpListener;

/// Upper bound for any wait in these tests.
pub const WAIT: Duration = Duration::from_secs(30);

/// `count` listeners on loopback ports, and the peer map (id → address)
/// of the nodes that will serve them, ids from 1.
pub async fn loopback_listeners(count: u64) -> (Vec<TcpListener>, BTreeMap<u64, String>) {
    let mut listeners = Vec::new();
    for _ in 0..count {
        listeners.push(TcpListener::bind("127.0.0.1:0").await.expect("bind a loopback port"));
    }
    let peers = listeners
        .iter()
        .enumerate()
        .map(|(index, listener)| (index as u64 + 1, listener.local_addr().expect("bound").to_string()))
        .collect();
    (listeners, peers)
}

/// Waits until one node is the leader and every node knows it; returns
/// (leader, a follower) as indexes into `nodes`.
pub async fn leader_and_follower(nodes: &[RunningNode]) -> (usize, usize) {
    let started = Instant::now();
    while started.elapsed() < WAIT {
        let statuses: Vec<_> = nodes.iter().map(|node| node.node.raft.status()).collect();
        if let Some(leader) = statuses.iter().position(|status| status.is_leader()) {
            let leader_id = statuses[leader].node_id;
            if statuses.iter().all(|status| status.leader_id == Some(leader_id)) {
                return (leader, (leader + 1) % nodes.len());
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no leader known to every node within {WAIT:?}");
}
