//! The node processes of a chaos run: spawn, SIGKILL, SIGSTOP/SIGCONT,
//! restart, and their view of the cluster through `ClusterService.Status`.
//!
//! In [`Mode::Namespaces`] node `i` runs inside its namespace as
//! `ip netns exec <ns> <binary> node ...`: `ip netns exec` execs the binary
//! in place, so the child's PID is the gavel process itself and signals sent
//! to it hit the node. In [`Mode::Loopback`] the nodes listen on
//! `127.0.0.1:<free port>` (no partitions possible, but kills and pauses are).
//!
//! Each node's stdout and stderr are appended to `<data_dir>/n<i>.log`, with a
//! `===== gavel-chaos:` marker line written by the harness at every start,
//! kill, pause and resume. Only processes this module spawned are ever
//! signalled, always by the PID of a child that has not been reaped yet.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use gavel_proto::v1::cluster_service_client::ClusterServiceClient;
use gavel_proto::v1::{StatusRequest, StatusResponse};
use nix::sys::signal::Signal;
use tonic::transport::Endpoint;

use crate::net::Topology;

/// Deadline of one `Status` call, connection included.
const STATUS_TIMEOUT: Duration = Duration::from_millis(1000);

/// Where the nodes run.
#[derive(Debug, Clone)]
pub enum Mode {
    /// Node `i` runs in the namespace of node `i` of this topology and listens
    /// on its address and [`ClusterSpec::port`].
    Namespaces(Topology),
    /// Node `i` runs in the current namespace on `127.0.0.1:<free port>`.
    Loopback,
}

/// What to start.
#[derive(Debug, Clone)]
pub struct ClusterSpec {
    /// The `gavel` binary.
    pub binary: PathBuf,
    /// Node `i` keeps its data in `data_dir/n<i>` and its log in
    /// `data_dir/n<i>.log`.
    pub data_dir: PathBuf,
    /// Number of voters, ids `1..=nodes`.
    pub nodes: u64,
    /// The port every node listens on in [`Mode::Namespaces`] (ignored in
    /// [`Mode::Loopback`], where each node gets a free port).
    pub port: u16,
    /// Flags passed to every `gavel node` (timings, retention...).
    pub extra_flags: Vec<String>,
    /// Where the nodes run.
    pub mode: Mode,
    /// Extra environment of every node. `GAVEL_LOG` defaults to
    /// `info,openraft=warn` unless set here.
    pub env: Vec<(String, String)>,
    /// How long [`Cluster::start`] waits for a leader.
    pub start_timeout: Duration,
}

impl ClusterSpec {
    /// Three nodes on port 7400, no extra flags, a 30 s start timeout.
    pub fn new(binary: impl Into<PathBuf>, data_dir: impl Into<PathBuf>, mode: Mode) -> ClusterSpec {
        ClusterSpec {
            binary: binary.into(),
            data_dir: data_dir.into(),
            nodes: 3,
            port: 7400,
            extra_flags: Vec::new(),
            mode,
            env: Vec::new(),
            start_timeout: Duration::from_secs(30),
        }
    }
}

/// One node: its fixed coordinates and its (current) process.
struct Node {
    addr: String,
    namespace: Option<String>,
    data_dir: PathBuf,
    log_path: PathBuf,
    process: Mutex<Process>,
}

#[derive(Default)]
struct Process {
    child: Option<Child>,
    paused: bool,
    starts: u32,
}

/// A running cluster of `gavel node` processes. Every method takes `&self`
/// (the processes sit behind locks), so one `Arc<Cluster>` can be shared by a
/// nemesis and observers. Dropping it kills every node it started.
pub struct Cluster {
    spec: ClusterSpec,
    peers: String,
    nodes: BTreeMap<u64, Node>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster").field("peers", &self.peers).field("data_dir", &self.spec.data_dir).finish()
    }
}

/// A free loopback port (bound, then released for a node to take).
fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("binding an ephemeral port")?;
    Ok(listener.local_addr().context("reading an ephemeral port")?.port())
}

fn now_ms() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|elapsed| elapsed.as_millis()).unwrap_or(0)
}

/// Appends a harness marker line to a node log.
fn mark(log_path: &Path, text: &str) {
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log_path)
        .and_then(|mut log| writeln!(log, "===== gavel-chaos [{}]: {text}", now_ms()));
    if let Err(error) = written {
        tracing::warn!("cannot write to {}: {error}", log_path.display());
    }
}

impl Cluster {
    /// Spawns every node and waits (up to [`ClusterSpec::start_timeout`])
    /// until a leader is agreed on. On failure every spawned node is killed
    /// and the error names the log directory.
    pub async fn start(spec: ClusterSpec) -> Result<Cluster> {
        if spec.nodes == 0 {
            bail!("a cluster needs at least one node");
        }
        if !spec.binary.is_file() {
            bail!("the gavel binary {} does not exist", spec.binary.display());
        }
        std::fs::create_dir_all(&spec.data_dir)
            .with_context(|| format!("creating the data directory {}", spec.data_dir.display()))?;
        let mut nodes = BTreeMap::new();
        for id in 1..=spec.nodes {
            let (addr, namespace) = match &spec.mode {
                Mode::Namespaces(topology) => {
                    let (namespace, ip) = topology
                        .nodes
                        .get(&id)
                        .ok_or_else(|| anyhow!("the network {} has no node {id}", topology.prefix))?;
                    (format!("{ip}:{}", spec.port), Some(namespace.clone()))
                }
                Mode::Loopback => (format!("127.0.0.1:{}", free_port()?), None),
            };
            nodes.insert(
                id,
                Node {
                    addr,
                    namespace,
                    data_dir: spec.data_dir.join(format!("n{id}")),
                    log_path: spec.data_dir.join(format!("n{id}.log")),
                    process: Mutex::new(Process::default()),
                },
            );
        }
        let peers = nodes.iter().map(|(id, node)| format!("{id}={}", node.addr)).collect::<Vec<_>>().join(",");
        let cluster = Cluster { spec, peers, nodes };
        for id in cluster.ids() {
            cluster.start_node(id)?;
        }
        let timeout = cluster.spec.start_timeout;
        if cluster.wait_for_leader(timeout).await.is_none() {
            cluster.shutdown();
            bail!("no leader within {timeout:?}; node logs in {}", cluster.spec.data_dir.display());
        }
        Ok(cluster)
    }

    fn node(&self, id: u64) -> Result<&Node> {
        self.nodes.get(&id).ok_or_else(|| anyhow!("no node {id} in the cluster"))
    }

    fn process(node: &Node) -> MutexGuard<'_, Process> {
        node.process.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Reaps the child if it exited by itself (noting it in the log); returns
    /// whether it is still running.
    fn refresh(node: &Node, process: &mut Process) -> bool {
        let Some(child) = process.child.as_mut() else { return false };
        match child.try_wait() {
            Ok(None) => true,
            Ok(Some(status)) => {
                mark(&node.log_path, &format!("node process {} exited by itself: {status}", child.id()));
                process.child = None;
                process.paused = false;
                false
            }
            Err(error) => {
                tracing::warn!("cannot poll node process {}: {error}", child.id());
                true
            }
        }
    }

    /// The node ids.
    pub fn ids(&self) -> Vec<u64> {
        self.nodes.keys().copied().collect()
    }

    /// The ids of nodes whose process is running (paused ones included).
    pub fn running(&self) -> Vec<u64> {
        self.nodes
            .iter()
            .filter(|(_, node)| Cluster::refresh(node, &mut Cluster::process(node)))
            .map(|(id, _)| *id)
            .collect()
    }

    /// The `--peers` value every node gets.
    pub fn peers(&self) -> &str {
        &self.peers
    }

    /// The spec the cluster was started with.
    pub fn spec(&self) -> &ClusterSpec {
        &self.spec
    }

    /// The `host:port` node `id` listens on.
    pub fn addr(&self, id: u64) -> Option<&str> {
        self.nodes.get(&id).map(|node| node.addr.as_str())
    }

    /// Every node as `http://host:port`, in id order, as
    /// `gavel_client::Client::new` takes them.
    pub fn endpoints(&self) -> Vec<String> {
        self.nodes.values().map(|node| format!("http://{}", node.addr)).collect()
    }

    /// Node `id`'s data directory.
    pub fn data_dir(&self, id: u64) -> Option<&Path> {
        self.nodes.get(&id).map(|node| node.data_dir.as_path())
    }

    /// Node `id`'s log file.
    pub fn log_path(&self, id: u64) -> Option<&Path> {
        self.nodes.get(&id).map(|node| node.log_path.as_path())
    }

    /// Starts node `id` (on its existing data, if any). Fails if it runs.
    pub fn start_node(&self, id: u64) -> Result<u32> {
        let node = self.node(id)?;
        let mut process = Cluster::process(node);
        if Cluster::refresh(node, &mut process) {
            bail!("node {id} is already running");
        }
        let mut command = match &node.namespace {
            Some(namespace) => {
                let mut command = Command::new("ip");
                command.args(["netns", "exec", namespace.as_str()]).arg(&self.spec.binary);
                command
            }
            None => Command::new(&self.spec.binary),
        };
        command
            .arg("node")
            .arg(format!("--id={id}"))
            .arg(format!("--listen={}", node.addr))
            .arg(format!("--peers={}", self.peers))
            .arg(format!("--data-dir={}", node.data_dir.display()))
            .args(&self.spec.extra_flags);
        if !self.spec.env.iter().any(|(key, _)| key == "GAVEL_LOG") {
            command.env("GAVEL_LOG", "info,openraft=warn");
        }
        command.envs(self.spec.env.iter().map(|(key, value)| (key, value)));
        let line = format!(
            "{} {}",
            command.get_program().to_string_lossy(),
            command.get_args().map(|arg| arg.to_string_lossy()).collect::<Vec<_>>().join(" ")
        );
        process.starts += 1;
        mark(&node.log_path, &format!("start #{} of node {id}: {line}", process.starts));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&node.log_path)
            .with_context(|| format!("opening {}", node.log_path.display()))?;
        let child = command
            .stdin(Stdio::null())
            .stdout(log.try_clone().context("duplicating the log handle")?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("spawning `{line}`"))?;
        let pid = child.id();
        mark(&node.log_path, &format!("node {id} has pid {pid}"));
        process.child = Some(child);
        process.paused = false;
        Ok(pid)
    }

    /// SIGKILLs node `id` and reaps it. Returns whether it was running.
    pub fn kill(&self, id: u64) -> Result<bool> {
        let node = self.node(id)?;
        let mut process = Cluster::process(node);
        if !Cluster::refresh(node, &mut process) {
            return Ok(false);
        }
        if let Some(mut child) = process.child.take() {
            let pid = child.id();
            // Child::kill sends SIGKILL, which also ends a stopped process.
            child.kill().with_context(|| format!("SIGKILL to node {id} (pid {pid})"))?;
            let status = child.wait().with_context(|| format!("reaping node {id} (pid {pid})"))?;
            mark(&node.log_path, &format!("node {id} (pid {pid}) SIGKILLed: {status}"));
        }
        process.paused = false;
        Ok(true)
    }

    /// Kills node `id` if it runs, then starts it again on the same data
    /// directory. Returns the new PID.
    pub fn restart(&self, id: u64) -> Result<u32> {
        self.kill(id)?;
        self.start_node(id)
    }

    fn signal(&self, id: u64, signal: Signal) -> Result<()> {
        let node = self.node(id)?;
        let mut process = Cluster::process(node);
        if !Cluster::refresh(node, &mut process) {
            bail!("node {id} is not running");
        }
        let pid = process.child.as_ref().map(Child::id).ok_or_else(|| anyhow!("node {id} is not running"))?;
        // The child is not reaped, so the PID is still ours.
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), signal)
            .with_context(|| format!("{signal} to node {id} (pid {pid})"))?;
        process.paused = signal == Signal::SIGSTOP;
        mark(&node.log_path, &format!("node {id} (pid {pid}) sent {signal}"));
        Ok(())
    }

    /// SIGSTOPs node `id` and waits (up to a second) until the kernel reports
    /// it stopped: signal delivery to a multithreaded process is asynchronous.
    pub fn pause(&self, id: u64) -> Result<()> {
        self.signal(id, Signal::SIGSTOP)?;
        self.await_state(id, true);
        Ok(())
    }

    /// SIGCONTs node `id` and waits (up to a second) until it runs again.
    pub fn resume(&self, id: u64) -> Result<()> {
        self.signal(id, Signal::SIGCONT)?;
        self.await_state(id, false);
        Ok(())
    }

    /// Polls `/proc/<pid>/stat` until the process is (or is no longer) in the
    /// stopped state `T`, for at most a second; logs when it never gets there.
    fn await_state(&self, id: u64, stopped: bool) {
        let Some(pid) = self.pid(id) else { return };
        let deadline = Instant::now() + Duration::from_secs(1);
        loop {
            let state = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| stat.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next()));
            match state {
                Some(state) if (state == 'T') == stopped => return,
                None => return,
                _ if Instant::now() >= deadline => {
                    tracing::warn!("node {id} (pid {pid}) is in state {state:?} a second after the signal");
                    return;
                }
                _ => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    }

    /// Whether node `id`'s process runs (a paused process runs).
    pub fn is_running(&self, id: u64) -> bool {
        self.nodes.get(&id).is_some_and(|node| Cluster::refresh(node, &mut Cluster::process(node)))
    }

    /// Whether node `id` is paused (SIGSTOPped and not resumed).
    pub fn is_paused(&self, id: u64) -> bool {
        self.nodes.get(&id).is_some_and(|node| {
            let mut process = Cluster::process(node);
            Cluster::refresh(node, &mut process) && process.paused
        })
    }

    /// The PID of node `id`'s process, while it runs.
    pub fn pid(&self, id: u64) -> Option<u32> {
        let node = self.nodes.get(&id)?;
        let mut process = Cluster::process(node);
        if Cluster::refresh(node, &mut process) {
            process.child.as_ref().map(Child::id)
        } else {
            None
        }
    }

    /// Node `id`'s `ClusterService.Status`, if it answers within a second.
    pub async fn status(&self, id: u64) -> Option<StatusResponse> {
        let addr = self.addr(id)?.to_string();
        let call = async move {
            let channel = Endpoint::from_shared(format!("http://{addr}"))
                .ok()?
                .connect_timeout(STATUS_TIMEOUT)
                .timeout(STATUS_TIMEOUT)
                .connect()
                .await
                .ok()?;
            ClusterServiceClient::new(channel).status(StatusRequest {}).await.ok().map(tonic::Response::into_inner)
        };
        tokio::time::timeout(STATUS_TIMEOUT, call).await.ok().flatten()
    }

    /// The status of every node that answers, queried concurrently.
    pub async fn statuses(&self) -> BTreeMap<u64, StatusResponse> {
        let ids = self.ids();
        let answers = futures::future::join_all(ids.iter().map(|id| self.status(*id))).await;
        ids.into_iter().zip(answers).filter_map(|(id, status)| Some((id, status?))).collect()
    }

    /// The leader most answering nodes agree on (ties go to the higher
    /// term), or `None` when no answering node knows a leader.
    pub async fn leader(&self) -> Option<u64> {
        let statuses = self.statuses().await;
        let mut tally: BTreeMap<u64, (usize, u64)> = BTreeMap::new();
        for status in statuses.values() {
            if let Some(leader) = status.leader_id {
                let entry = tally.entry(leader).or_default();
                entry.0 += 1;
                entry.1 = entry.1.max(status.term);
            }
        }
        tally.into_iter().max_by_key(|(_, (votes, term))| (*votes, *term)).map(|(leader, _)| leader)
    }

    /// Polls [`Cluster::leader`] until it names a leader, up to `timeout`.
    pub async fn wait_for_leader(&self, timeout: Duration) -> Option<u64> {
        let started = Instant::now();
        loop {
            if let Some(leader) = self.leader().await {
                return Some(leader);
            }
            if started.elapsed() >= timeout {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// SIGCONTs then SIGKILLs every node process this cluster started, and
    /// reaps them. Idempotent; the data directories are kept.
    pub fn shutdown(&self) {
        for (id, node) in &self.nodes {
            let mut process = Cluster::process(node);
            if let Some(mut child) = process.child.take() {
                let pid = child.id();
                if !matches!(child.try_wait(), Ok(Some(_))) {
                    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), Signal::SIGCONT);
                    let _ = child.kill();
                }
                let status = child.wait();
                mark(&node.log_path, &format!("node {id} (pid {pid}) shut down: {status:?}"));
            }
            process.paused = false;
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.shutdown();
    }
}
