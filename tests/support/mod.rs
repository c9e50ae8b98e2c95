//! Test harness: a real cluster of `gavel node` processes on loopback, with
//! real sled data directories, that tests can SIGKILL and restart.

#![allow(dead_code)]

use std::future::Future;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use gavel_proto::v1 as pb;
use gavel_proto::v1::approval_service_client::ApprovalServiceClient;
use gavel_proto::v1::audit_service_client::AuditServiceClient;
use gavel_proto::v1::capability_service_client::CapabilityServiceClient;
use gavel_proto::v1::cluster_service_client::ClusterServiceClient;
use gavel_proto::v1::execution_service_client::ExecutionServiceClient;
use gavel_proto::v1::worker_service_client::WorkerServiceClient;
use tonic::transport::{Channel, Endpoint};

/// The `gavel` binary these tests start: `GAVEL_BIN`, or the one cargo built
/// next to this test executable (`target/<profile>/gavel`).
pub fn gavel_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("GAVEL_BIN") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("locating the test executable");
    let found = exe.ancestors().skip(1).map(|dir| dir.join("gavel")).find(|candidate| candidate.is_file());
    found.expect("no gavel binary next to the test executable: run `cargo build -p gavel-cli` or set GAVEL_BIN")
}

/// Upper bound for any wait in a test.
pub const WAIT: Duration = Duration::from_secs(30);

/// One node process.
pub struct NodeProcess {
    pub id: u64,
    pub addr: String,
    pub data_dir: PathBuf,
    pub child: Option<Child>,
    pub extra_flags: Vec<String>,
    pub join: bool,
}

/// A cluster of node processes; every process is killed on drop.
pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub nodes: Vec<NodeProcess>,
    pub peers: String,
    pub flags: Vec<String>,
}

/// A free loopback port (bound, then released for the child to take).
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    listener.local_addr().expect("local addr").port()
}

impl Cluster {
    /// Starts `count` voters with default timings and waits for a leader.
    pub async fn start(count: u64) -> Cluster {
        Cluster::start_with(count, &[]).await
    }

    /// Starts `count` voters with extra `gavel node` flags and waits for a leader.
    pub async fn start_with(count: u64, flags: &[&str]) -> Cluster {
        let dir = tempfile::tempdir().expect("temp dir");
        let addrs: Vec<String> = (0..count).map(|_| format!("127.0.0.1:{}", free_port())).collect();
        let peers = addrs.iter().enumerate().map(|(i, addr)| format!("{}={addr}", i + 1)).collect::<Vec<_>>().join(",");
        let flags: Vec<String> = flags.iter().map(|flag| flag.to_string()).collect();
        let nodes = addrs
            .iter()
            .enumerate()
            .map(|(i, addr)| NodeProcess {
                id: i as u64 + 1,
                addr: addr.clone(),
                data_dir: dir.path().join(format!("n{}", i + 1)),
                child: None,
                extra_flags: flags.clone(),
                join: false,
            })
            .collect();
        let mut cluster = Cluster { dir, nodes, peers, flags };
        for id in 1..=count {
            cluster.spawn(id);
        }
        cluster.wait_for_leader().await;
        cluster
    }

    fn node(&self, id: u64) -> &NodeProcess {
        self.nodes.iter().find(|node| node.id == id).expect("no such node")
    }

    fn node_mut(&mut self, id: u64) -> &mut NodeProcess {
        self.nodes.iter_mut().find(|node| node.id == id).expect("no such node")
    }

    /// Starts (or restarts, on the same data) node `id`.
    pub fn spawn(&mut self, id: u64) {
        let peers = self.peers.clone();
        let log_path = self.dir.path().join(format!("n{id}.log"));
        let node = self.node_mut(id);
        assert!(node.child.is_none(), "node {id} is already running");
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&log_path).expect("log file");
        let mut command = Command::new(gavel_binary());
        command
            .arg("node")
            .arg(format!("--id={id}"))
            .arg(format!("--listen={}", node.addr))
            .arg(format!("--data-dir={}", node.data_dir.display()))
            .args(&node.extra_flags)
            .env("GAVEL_LOG", "info,openraft=warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log clone"))
            .stderr(log);
        if node.join {
            command.arg("--join");
        } else {
            command.arg(format!("--peers={peers}"));
        }
        node.child = Some(command.spawn().expect("spawn gavel node"));
    }

    /// Adds a process for a new node that joins later as a learner (not started).
    pub fn add_joining_node(&mut self) -> u64 {
        let id = self.nodes.iter().map(|node| node.id).max().unwrap_or(0) + 1;
        let addr = format!("127.0.0.1:{}", free_port());
        self.nodes.push(NodeProcess {
            id,
            addr,
            data_dir: self.dir.path().join(format!("n{id}")),
            child: None,
            extra_flags: self.flags.clone(),
            join: true,
        });
        id
    }

    /// SIGKILLs node `id` and reaps it.
    pub fn kill(&mut self, id: u64) {
        if let Some(mut child) = self.node_mut(id).child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERMs node `id` and waits for a clean exit.
    pub fn stop(&mut self, id: u64) {
        if let Some(mut child) = self.node_mut(id).child.take() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(child.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            let started = Instant::now();
            while started.elapsed() < Duration::from_secs(10) {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Ids of running nodes.
    pub fn running(&self) -> Vec<u64> {
        self.nodes.iter().filter(|node| node.child.is_some()).map(|node| node.id).collect()
    }

    /// The address of node `id`.
    pub fn addr(&self, id: u64) -> String {
        self.node(id).addr.clone()
    }

    /// A lazily connected channel to node `id`.
    pub fn channel(&self, id: u64) -> Channel {
        Endpoint::from_shared(format!("http://{}", self.addr(id)))
            .expect("endpoint")
            .connect_timeout(Duration::from_secs(1))
            .timeout(Duration::from_secs(15))
            .connect_lazy()
    }

    pub fn approvals(&self, id: u64) -> ApprovalServiceClient<Channel> {
        ApprovalServiceClient::new(self.channel(id))
    }
    pub fn capabilities(&self, id: u64) -> CapabilityServiceClient<Channel> {
        CapabilityServiceClient::new(self.channel(id))
    }
    pub fn executions(&self, id: u64) -> ExecutionServiceClient<Channel> {
        ExecutionServiceClient::new(self.channel(id))
    }
    pub fn workers(&self, id: u64) -> WorkerServiceClient<Channel> {
        WorkerServiceClient::new(self.channel(id))
    }
    pub fn audit(&self, id: u64) -> AuditServiceClient<Channel> {
        AuditServiceClient::new(self.channel(id))
    }
    pub fn cluster(&self, id: u64) -> ClusterServiceClient<Channel> {
        ClusterServiceClient::new(self.channel(id))
    }

    /// Status of node `id`, if it answers.
    pub async fn status(&self, id: u64) -> Option<pb::StatusResponse> {
        self.cluster(id).status(pb::StatusRequest {}).await.ok().map(|response| response.into_inner())
    }

    /// Waits until a running node reports itself leader; returns its id.
    pub async fn wait_for_leader(&self) -> u64 {
        let started = Instant::now();
        while started.elapsed() < WAIT {
            for id in self.running() {
                if let Some(status) = self.status(id).await {
                    if status.role == "Leader" {
                        return id;
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("no leader within {WAIT:?}; logs in {}", self.dir.path().display());
    }

    /// A running node that is not the leader.
    pub async fn follower(&self) -> u64 {
        let leader = self.wait_for_leader().await;
        self.running().into_iter().find(|id| *id != leader).expect("a follower is running")
    }

    /// Waits until every running node has applied the same index and reports
    /// the same state hash; returns that hash.
    pub async fn wait_converged(&self) -> String {
        let started = Instant::now();
        while started.elapsed() < WAIT {
            let mut statuses = Vec::new();
            for id in self.running() {
                statuses.extend(self.status(id).await);
            }
            if statuses.len() == self.running().len()
                && statuses.windows(2).all(|pair| {
                    pair[0].state_hash == pair[1].state_hash && pair[0].last_applied_index == pair[1].last_applied_index
                })
            {
                return statuses[0].state_hash.clone();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("nodes did not converge within {WAIT:?}");
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(mut child) = node.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// Retries a call while the cluster answers UNAVAILABLE (elections) or the
/// connection breaks, up to [`WAIT`]. The call must carry its own request id so
/// a retry is deduplicated.
pub async fn retry<T, F, Fut>(mut call: F) -> Result<T, tonic::Status>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, tonic::Status>>,
{
    let started = Instant::now();
    loop {
        match call().await {
            Err(status)
                if matches!(
                    status.code(),
                    tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled
                ) && started.elapsed() < WAIT =>
            {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => return other,
        }
    }
}

/// The domain code of a refusal.
pub fn domain_code(status: &tonic::Status) -> String {
    gavel_proto::error_detail::read_domain_code(status).unwrap_or_else(|| format!("<none: {status:?}>"))
}

pub fn user(id: &str) -> pb::Actor {
    pb::Actor { id: id.to_string(), kind: pb::ActorKind::User as i32, display_name: None }
}

/// A capability declaration with the given side effect.
pub fn capability(id: &str, side_effect: pb::SideEffect) -> pb::CapabilitySpec {
    pb::CapabilitySpec {
        id: id.to_string(),
        side_effect: side_effect as i32,
        risk: pb::Risk::Low as i32,
        ..pb::CapabilitySpec::default()
    }
}

/// Registers a capability through node `id`.
pub async fn register(cluster: &Cluster, id: u64, spec: pb::CapabilitySpec) -> pb::Capability {
    let request_id = format!("reg-{}-{}", spec.id, uuid::Uuid::new_v4());
    retry(|| {
        let mut client = cluster.capabilities(id);
        let request = pb::RegisterCapabilityRequest { request_id: request_id.clone(), spec: Some(spec.clone()) };
        async move { client.register_capability(request).await }
    })
    .await
    .expect("register capability")
    .into_inner()
    .capability
    .expect("capability in reply")
}

// ----- helpers shared by the contract tests -----

/// Asserts that a call was refused with this gRPC code and domain code, and
/// returns the status for further checks.
#[track_caller]
pub fn expect_refusal<T: std::fmt::Debug>(
    result: Result<T, tonic::Status>,
    code: tonic::Code,
    domain: &str,
) -> tonic::Status {
    match result {
        Ok(value) => panic!("expected {code:?}/{domain}, got a success: {value:?}"),
        Err(status) => {
            assert_eq!(status.code(), code, "gRPC code of {status:?}");
            assert_eq!(domain_code(&status), domain, "domain code of {status:?}");
            status
        }
    }
}

/// Milliseconds since the Unix epoch on the test's clock.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock after 1970").as_millis() as i64
}

/// Calls `check` every 50 ms until it yields a value, up to [`WAIT`]; panics
/// naming `what` otherwise.
pub async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let started = Instant::now();
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(started.elapsed() < WAIT, "timed out after {WAIT:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
