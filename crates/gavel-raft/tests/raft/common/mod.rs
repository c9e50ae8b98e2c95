//! Test fixture: a tiny deterministic key-value application and a cluster of
//! in-process nodes serving real gRPC on loopback, with real sled storage in
//! temporary directories.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gavel_raft::{Application, NodeConfig, RaftNode, RaftStatus, RaftTimings, Role, WriteError};
use serde::{Deserialize, Serialize};
use tempfile::TempDir;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::transport::server::TcpIncoming;
use tonic::transport::Server;

/// Upper bound for any single wait in these tests.
pub const WAIT: Duration = Duration::from_secs(30);

/// Tries of a round whose leader moved before the round is given up
/// ([`Cluster::in_one_term`]).
pub const ATTEMPTS: usize = 5;

/// The key-value application's whole state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvState {
    /// Current values.
    pub entries: BTreeMap<String, String>,
    /// Log index of the last applied command.
    pub last_index: u64,
}

/// A deterministic key-value store: command = bincode `(key, value)`,
/// reply = bincode `Option<String>` (the previous value).
#[derive(Default)]
pub struct KvApp {
    state: Mutex<KvState>,
    restores: AtomicU64,
    applies: AtomicU64,
}

impl KvApp {
    pub fn state(&self) -> KvState {
        self.state.lock().expect("lock").clone()
    }

    /// How many times a snapshot was restored into this application.
    pub fn restores(&self) -> u64 {
        self.restores.load(Ordering::SeqCst)
    }

    /// How many commands this application instance applied.
    pub fn applies(&self) -> u64 {
        self.applies.load(Ordering::SeqCst)
    }
}

impl Application for KvApp {
    fn apply(&self, log_index: u64, command: &[u8]) -> Vec<u8> {
        let (key, value): (String, String) = bincode::deserialize(command).expect("test commands are well-formed");
        let mut state = self.state.lock().expect("lock");
        self.applies.fetch_add(1, Ordering::SeqCst);
        state.last_index = log_index;
        let previous = state.entries.insert(key, value);
        bincode::serialize(&previous).expect("encode reply")
    }

    fn snapshot(&self) -> Vec<u8> {
        bincode::serialize(&*self.state.lock().expect("lock")).expect("encode snapshot")
    }

    fn restore(&self, bytes: &[u8]) -> Result<(), String> {
        let state: KvState = bincode::deserialize(bytes).map_err(|e| e.to_string())?;
        *self.state.lock().expect("lock") = state;
        self.restores.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

/// Writes `key = value` through `node`; returns the previous value.
pub async fn put(node: &RaftNode, key: &str, value: &str) -> Result<Option<String>, WriteError> {
    let command = bincode::serialize(&(key, value)).expect("encode command");
    let reply = tokio::time::timeout(WAIT, node.write(command)).await.expect("write answers in time")?;
    Ok(bincode::deserialize(&reply).expect("decode reply"))
}

/// `Ok` if `actual` is `expected`, else `Err` naming `what`: a check in a
/// round that a leader change can fail ([`Cluster::in_one_term`]).
pub fn same<T: PartialEq + std::fmt::Debug>(what: &str, actual: T, expected: T) -> Result<(), String> {
    if actual == expected {
        Ok(())
    } else {
        Err(format!("{what}: {actual:?}, not {expected:?}"))
    }
}

/// Timings fast enough for tests, with the production heartbeat floor.
pub fn test_timings() -> RaftTimings {
    RaftTimings {
        heartbeat_ms: 100,
        election_timeout_min_ms: 500,
        election_timeout_max_ms: 1000,
        rpc_timeout_ms: 1000,
        snapshot_timeout_ms: 10_000,
        ..RaftTimings::default()
    }
}

/// Polls `check` every 20 ms until it yields a value or `WAIT` passes.
pub async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut tick = tokio::time::interval(Duration::from_millis(20));
    loop {
        tick.tick().await;
        if let Some(value) = check().await {
            return value;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out after {WAIT:?} waiting for {what}");
    }
}

/// Waits until `node`'s status satisfies `predicate`, woken by status changes.
pub async fn wait_status(node: &RaftNode, what: &str, predicate: impl Fn(&RaftStatus) -> bool) -> RaftStatus {
    let mut status = node.subscribe_status();
    let waited = tokio::time::timeout(WAIT, async {
        loop {
            {
                let current = status.borrow_and_update();
                if predicate(&current) {
                    return current.clone();
                }
            }
            if status.changed().await.is_err() {
                panic!("node stopped while waiting for {what}");
            }
        }
    })
    .await;
    waited.unwrap_or_else(|_| panic!("timed out after {WAIT:?} waiting for {what}: {:?}", node.status()))
}

/// One in-process node: Raft plus its gRPC server on loopback.
pub struct TestNode {
    pub id: u64,
    pub addr: String,
    pub dir: PathBuf,
    pub node: RaftNode,
    pub app: Arc<KvApp>,
    server_stop: Option<oneshot::Sender<()>>,
    server: Option<JoinHandle<()>>,
}

impl TestNode {
    /// Starts node `id` with its data in `dir`, listening on `addr` (or a
    /// free port when `None`), with a fresh application.
    pub async fn start(id: u64, addr: Option<&str>, dir: &Path, timings: RaftTimings) -> TestNode {
        init_logging();
        let listener = bind(addr).await;
        let addr = listener.local_addr().expect("local addr").to_string();
        let app = Arc::new(KvApp::default());
        let node = RaftNode::start(
            NodeConfig {
                node_id: id,
                addr: addr.clone(),
                data_dir: dir.to_path_buf(),
                timings,
                #[cfg(feature = "mutants")]
                planted: Default::default(),
                peer_tls: None,
            },
            app.clone(),
        )
        .await
        .expect("start raft node");
        let (server_stop, stopped) = oneshot::channel::<()>();
        let service = node.service();
        let server = tokio::spawn(async move {
            let result = Server::builder()
                .add_service(service)
                .serve_with_incoming_shutdown(TcpIncoming::from(listener), async {
                    let _ = stopped.await;
                })
                .await;
            if let Err(e) = result {
                eprintln!("test server stopped with an error: {e}");
            }
        });
        TestNode { id, addr, dir: dir.to_path_buf(), node, app, server_stop: Some(server_stop), server: Some(server) }
    }

    /// Stops Raft and the gRPC server, as a process exit would (the data
    /// directory stays).
    pub async fn stop(&mut self) {
        self.node.shutdown().await.expect("raft shuts down");
        if let Some(stop) = self.server_stop.take() {
            let _ = stop.send(());
        }
        if let Some(server) = self.server.take() {
            let abort = server.abort_handle();
            if tokio::time::timeout(Duration::from_secs(5), server).await.is_err() {
                abort.abort();
            }
        }
    }

    /// Restarts this node from its data directory on the same address.
    pub async fn restart(&mut self, timings: RaftTimings) {
        self.stop().await;
        *self = TestNode::start(self.id, Some(&self.addr.clone()), &self.dir.clone(), timings).await;
    }
}

/// Logs to the test output when `RUST_LOG` is set (e.g. `RUST_LOG=gavel_raft=debug`).
pub fn init_logging() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

/// Binds `addr` (or a free loopback port), retrying while the address is
/// still held by a server that is shutting down.
async fn bind(addr: Option<&str>) -> TcpListener {
    let target = addr.unwrap_or("127.0.0.1:0");
    eventually(&format!("binding {target}"), || async move { TcpListener::bind(target).await.ok() }).await
}

/// A cluster of in-process nodes with ids 1..=n.
pub struct Cluster {
    pub nodes: Vec<TestNode>,
    pub timings: RaftTimings,
    pub root: TempDir,
}

impl Cluster {
    /// Starts `n` nodes, initializes the cluster with all of them as voters
    /// and waits for a leader.
    pub async fn start(n: u64, timings: RaftTimings) -> Cluster {
        let root = tempfile::tempdir().expect("tempdir");
        let mut nodes = Vec::new();
        for id in 1..=n {
            nodes.push(TestNode::start(id, None, &root.path().join(format!("node-{id}")), timings.clone()).await);
        }
        let members: BTreeMap<u64, String> = nodes.iter().map(|n| (n.id, n.addr.clone())).collect();
        nodes[0].node.initialize(members).await.expect("initialize");
        let cluster = Cluster { nodes, timings, root };
        cluster.leader().await;
        cluster
    }

    pub fn node(&self, id: u64) -> &TestNode {
        self.nodes.iter().find(|n| n.id == id).expect("node exists")
    }

    pub fn node_mut(&mut self, id: u64) -> &mut TestNode {
        self.nodes.iter_mut().find(|n| n.id == id).expect("node exists")
    }

    /// Waits until one running node is leader and every running voter
    /// follows it, and returns the leader.
    pub async fn leader(&self) -> &TestNode {
        let leader_id = eventually("a leader all running voters agree on", || async {
            let running: Vec<RaftStatus> =
                self.nodes.iter().map(|n| n.node.status()).filter(|s| s.role != Role::Shutdown).collect();
            let leader = running.iter().find(|s| s.role == Role::Leader)?;
            let voters: Vec<&RaftStatus> =
                running.iter().filter(|s| leader.members.iter().any(|m| m.node_id == s.node_id && m.voter)).collect();
            voters
                .iter()
                .all(|s| s.leader_id == Some(leader.node_id) && s.term == leader.term)
                .then_some(leader.node_id)
        })
        .await;
        self.node(leader_id)
    }

    /// Any running node other than `leader_id`.
    pub fn follower_of(&self, leader_id: u64) -> &TestNode {
        self.nodes
            .iter()
            .find(|n| n.id != leader_id && n.node.status().role != Role::Shutdown)
            .expect("a running follower")
    }

    /// Waits until every running node applied at least `index`, then
    /// returns their application states (all equal, or it panics).
    pub async fn converged_state(&self, index: u64) -> KvState {
        let mut states = Vec::new();
        for test_node in self.nodes.iter().filter(|n| n.node.status().role != Role::Shutdown) {
            wait_status(&test_node.node, &format!("node {} applying index {index}", test_node.id), |s| {
                s.last_applied_index >= Some(index)
            })
            .await;
            states.push((test_node.id, test_node.app.state()));
        }
        // A status is published a moment after its apply, and the index a
        // caller passes may be a moment old: a node can show `index` while
        // another one has applied a later entry too. Equal states decide,
        // given time; still unequal after `WAIT`, the difference is shown.
        let deadline = tokio::time::Instant::now() + WAIT;
        while tokio::time::Instant::now() < deadline && states.iter().any(|(_, state)| *state != states[0].1) {
            tokio::time::sleep(Duration::from_millis(20)).await;
            for (id, state) in &mut states {
                *state = self.node(*id).app.state();
            }
        }
        let (_, first) = states.first().cloned().expect("at least one running node");
        for (id, state) in &states {
            assert_eq!(state, &first, "node {id} diverged");
        }
        first
    }

    /// The highest term any running node knows of.
    pub fn highest_term(&self) -> u64 {
        self.nodes
            .iter()
            .map(|n| n.node.status())
            .filter(|s| s.role != Role::Shutdown)
            .map(|s| s.term)
            .max()
            .unwrap_or(0)
    }

    /// Runs `round` on the current leader (with the try's number) until a
    /// try ends with `Ok`, and returns its value.
    ///
    /// A round needs one leader for its length, and on a loaded machine an
    /// election can come at any time (a follower starved past its election
    /// timeout campaigns). So a round returns `Err(what happened)` for an
    /// outcome a leader change explains (a refused write, a node naming
    /// another leader); the round is tried again with the new leader only
    /// if the term moved meanwhile. With the term unchanged the outcome is
    /// a failure of the test, and this panics with it.
    pub async fn in_one_term<'a, T, F, Fut>(&'a self, what: &str, mut round: F) -> T
    where
        F: FnMut(&'a TestNode, usize) -> Fut,
        Fut: Future<Output = Result<T, String>>,
    {
        let mut moves = Vec::new();
        loop {
            let leader = self.leader().await;
            let term = leader.node.status().term;
            let unexpected = match round(leader, moves.len()).await {
                Ok(value) => return value,
                Err(unexpected) => unexpected,
            };
            let now = self.highest_term();
            assert!(now != term, "{what}: {unexpected}, with the term unchanged at {term} (leader {})", leader.id);
            let reason = format!("{unexpected}: the term went from {term} to {now}");
            println!("{what}: retried: {reason}");
            moves.push(reason);
            assert!(moves.len() < ATTEMPTS, "{what}: the leader moved in every try: {moves:?}");
        }
    }

    /// [`put`] through the current leader, again through the next one if
    /// the write was refused because the leader moved
    /// ([`Cluster::in_one_term`]). A write refused by a leader that lost
    /// its leadership may still have been committed by its successor, so
    /// the reply is not returned: a caller that checks it writes in a round
    /// of its own.
    pub async fn put_on_leader(&self, key: &str, value: &str) {
        self.in_one_term(&format!("writing {key}"), |leader, _| async move {
            put(&leader.node, key, value).await.map(|_| ()).map_err(|error| format!("the write was refused: {error:?}"))
        })
        .await
    }

    pub async fn stop_all(&mut self) {
        for node in &mut self.nodes {
            if node.server.is_some() {
                node.stop().await;
            }
        }
    }
}
