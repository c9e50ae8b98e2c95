//! Test harness: a real cluster of `gavel node` processes on loopback, with
//! real sled data directories, that tests can SIGKILL and restart. The
//! processes are a [`gavel_testkit::Cluster`]; this module adds what the
//! tests share: panicking calls, typed gRPC clients and a temporary directory.

#![allow(dead_code)]

use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use gavel_proto::v1 as pb;
use gavel_proto::v1::approval_service_client::ApprovalServiceClient;
use gavel_proto::v1::audit_service_client::AuditServiceClient;
use gavel_proto::v1::capability_service_client::CapabilityServiceClient;
use gavel_proto::v1::cluster_service_client::ClusterServiceClient;
use gavel_proto::v1::execution_service_client::ExecutionServiceClient;
use gavel_proto::v1::worker_service_client::WorkerServiceClient;
use gavel_testkit::ClusterSpec;
use gavel_testkit::Converge as _;
use tonic::transport::Channel;

/// The `gavel` binary these tests start: `GAVEL_BIN`, or the one cargo built
/// next to this test executable (`target/<profile>/gavel`).
pub fn gavel_binary() -> PathBuf {
    gavel_testkit::resolve_gavel_binary(None).unwrap_or_else(|error| panic!("{error}"))
}

/// The lab binary, `gavel-lab` (chaos, sim, bench), built beside `gavel`.
pub fn lab_binary() -> PathBuf {
    let lab = gavel_binary().with_file_name("gavel-lab");
    assert!(lab.is_file(), "{} is not built (cargo build --workspace builds it)", lab.display());
    lab
}

/// Runs `gavel ARGS... --endpoints=ENDPOINTS` with `env` set and nothing
/// else from the caller's environment that the CLI reads.
pub async fn run_gavel(endpoints: &str, args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    tokio::process::Command::new(gavel_binary())
        .args(args)
        .arg(format!("--endpoints={endpoints}"))
        .env_remove("GAVEL_ENDPOINTS")
        .env_remove("GAVEL_ACTOR")
        .env_remove("GAVEL_RETRY_BUDGET_MS")
        .env_remove("GAVEL_LOG")
        .envs(env.iter().copied())
        .output()
        .await
        .expect("run the gavel binary")
}

/// Upper bound for any wait in a test.
pub const WAIT: Duration = Duration::from_secs(30);

/// Deadline of one call through [`Cluster::channel`].
const CALL_TIMEOUT: Duration = Duration::from_secs(15);

/// One node: where it listens and the flags of its next start.
pub struct NodeProcess {
    pub id: u64,
    pub addr: String,
    pub data_dir: PathBuf,
    /// The `gavel node` flags [`Cluster::spawn`] passes (a test may change
    /// them before a restart).
    pub extra_flags: Vec<String>,
}

/// A cluster of node processes in a temporary directory; every process is
/// killed on drop.
pub struct Cluster {
    processes: gavel_testkit::Cluster,
    pub nodes: Vec<NodeProcess>,
    pub dir: tempfile::TempDir,
    pub flags: Vec<String>,
}

/// A free loopback port below the ephemeral range ([`gavel_testkit::free_port`]).
pub fn free_port() -> u16 {
    gavel_testkit::free_port().expect("a free port")
}

impl Cluster {
    /// Starts `count` voters with default timings and waits for a leader.
    pub async fn start(count: u64) -> Cluster {
        Cluster::start_with(count, &[]).await
    }

    /// Starts `count` voters with extra `gavel node` flags and waits for a leader.
    pub async fn start_with(count: u64, flags: &[&str]) -> Cluster {
        Cluster::start_with_env(count, flags, &[]).await
    }

    /// [`Cluster::start_with`], with extra environment variables for every
    /// node process (nodes added later get them too).
    pub async fn start_with_env(count: u64, flags: &[&str], env: &[(&str, &str)]) -> Cluster {
        Cluster::start_with_node_flags(count, flags, env, |_| Vec::new()).await
    }

    /// [`Cluster::start_with_env`], with `node_flags(id)` added to node
    /// `id`'s flags (a listen address of its own, say).
    pub async fn start_with_node_flags(
        count: u64,
        flags: &[&str],
        env: &[(&str, &str)],
        node_flags: impl Fn(u64) -> Vec<String>,
    ) -> Cluster {
        let dir = tempfile::tempdir().expect("temp dir");
        let flags: Vec<String> = flags.iter().map(|flag| flag.to_string()).collect();
        let mut spec = ClusterSpec::new(gavel_binary(), dir.path());
        spec.nodes = count;
        // Per node, so that a test can replace one node's flags (clap refuses a flag given twice).
        spec.node_args = (1..=count).map(|id| (id, [flags.clone(), node_flags(id)].concat())).collect();
        spec.start_timeout = WAIT;
        spec.status_timeout = CALL_TIMEOUT;
        spec.env = env.iter().map(|(name, value)| (name.to_string(), value.to_string())).collect();
        let processes = gavel_testkit::Cluster::start(spec).await.unwrap_or_else(|error| panic!("{error}"));
        let nodes = processes
            .ids()
            .into_iter()
            .map(|id| NodeProcess {
                id,
                addr: processes.addr(id).expect("a placed node").to_string(),
                data_dir: processes.data_dir(id).expect("a placed node").to_path_buf(),
                extra_flags: [flags.clone(), node_flags(id)].concat(),
            })
            .collect();
        Cluster { processes, nodes, dir, flags }
    }

    fn node(&self, id: u64) -> &NodeProcess {
        self.nodes.iter().find(|node| node.id == id).expect("no such node")
    }

    /// Starts (or restarts, on the same data) node `id`, with its [`NodeProcess::extra_flags`].
    pub fn spawn(&mut self, id: u64) {
        let flags = self.node(id).extra_flags.clone();
        self.processes.set_node_args(id, flags).expect("a known node");
        self.processes.start_node(id).unwrap_or_else(|error| panic!("spawn node {id}: {error}"));
    }

    /// Adds a node that joins later as a learner (`--join`), not started; it
    /// gets the cluster's flags.
    pub fn add_joining_node(&mut self) -> u64 {
        let id = self.processes.add_node().expect("add a node");
        self.nodes.push(NodeProcess {
            id,
            addr: self.processes.addr(id).expect("a placed node").to_string(),
            data_dir: self.processes.data_dir(id).expect("a placed node").to_path_buf(),
            extra_flags: self.flags.clone(),
        });
        id
    }

    /// SIGKILLs node `id` and reaps it.
    pub fn kill(&mut self, id: u64) {
        self.processes.kill(id).unwrap_or_else(|error| panic!("kill node {id}: {error}"));
    }

    /// SIGTERMs node `id` and waits (up to 10 s) for a clean exit.
    pub fn stop(&mut self, id: u64) {
        self.processes.stop(id, Duration::from_secs(10)).unwrap_or_else(|error| panic!("stop node {id}: {error}"));
    }

    /// SIGSTOPs node `id` (it keeps its sockets but answers nothing).
    pub fn pause(&mut self, id: u64) {
        self.processes.pause(id).unwrap_or_else(|error| panic!("pause node {id}: {error}"));
    }

    /// SIGCONTs a paused node `id`.
    pub fn resume(&mut self, id: u64) {
        self.processes.resume(id).unwrap_or_else(|error| panic!("resume node {id}: {error}"));
    }

    /// The process id of node `id`, while it runs.
    pub fn pid(&self, id: u64) -> Option<u32> {
        self.processes.pid(id)
    }

    /// Ids of running nodes.
    pub fn running(&self) -> Vec<u64> {
        self.processes.running()
    }

    /// The address of node `id`.
    pub fn addr(&self, id: u64) -> String {
        self.node(id).addr.clone()
    }

    /// A lazily connected channel to node `id`.
    pub fn channel(&self, id: u64) -> Channel {
        self.processes.channel(id, CALL_TIMEOUT).expect("a channel")
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
        self.processes.status(id).await
    }

    /// Waits until a running node reports itself leader; returns its id.
    pub async fn wait_for_leader(&self) -> u64 {
        self.processes.wait_for_leader(WAIT).await.unwrap_or_else(|error| panic!("{error}"))
    }

    /// A running node that is not the leader.
    pub async fn follower(&self) -> u64 {
        let leader = self.wait_for_leader().await;
        self.running().into_iter().find(|id| *id != leader).expect("a follower is running")
    }

    /// Starts a fourth node that builds no snapshot of its own (100,000
    /// entries) and keeps 5 log entries, and adds it as a learner through
    /// `leader` without waiting: whatever snapshot it reports, the leader
    /// sent. Returns its id.
    pub async fn join_learner_by_snapshot(&mut self, leader: u64) -> u64 {
        let new_node = self.add_joining_node();
        self.nodes.iter_mut().find(|node| node.id == new_node).expect("new node").extra_flags =
            vec!["--snapshot-logs-since-last=100000".to_string(), "--logs-to-keep=5".to_string()];
        self.spawn(new_node);
        let new_addr = self.addr(new_node);
        retry(|| {
            let mut client = self.cluster(leader);
            let request = pb::AddLearnerRequest {
                request_id: String::new(),
                node_id: new_node,
                addr: new_addr.clone(),
                wait_caught_up: false,
            };
            async move { client.add_learner(request).await }
        })
        .await
        .expect("add learner");
        new_node
    }

    /// The execution `execution_id` (`None` when unknown: `NOT_FOUND`), read through `via`.
    pub async fn get_execution(&self, via: u64, execution_id: &str) -> Option<pb::Execution> {
        let read = retry(|| {
            let mut client = self.executions(via);
            let request = pb::GetExecutionRequest { execution_id: execution_id.to_string() };
            async move { client.get_execution(request).await }
        })
        .await;
        found(read, "execution", execution_id)?.into_inner().execution
    }

    /// The audit trail of `execution_id`, read through `via`.
    pub async fn execution_events(&self, via: u64, execution_id: &str) -> Vec<pb::Event> {
        retry(|| {
            let mut client = self.executions(via);
            let request =
                pb::ListExecutionEventsRequest { execution_id: execution_id.to_string(), after_cursor: 0, limit: 0 };
            async move { client.list_execution_events(request).await }
        })
        .await
        .expect("list execution events")
        .into_inner()
        .events
    }

    /// Waits until every running node has applied the same index and reports
    /// the same state hash; returns that hash.
    pub async fn wait_converged(&self) -> String {
        self.processes.converge(WAIT).await.unwrap_or_else(|error| panic!("{error}")).state_hash
    }
}

/// Starts three secure voters under `dir` with `user:admin` as the
/// bootstrap admin (TLS, certificates from the testkit's CA).
pub async fn start_secure(dir: &std::path::Path) -> gavel_testkit::Cluster {
    let mut spec = ClusterSpec::new(gavel_binary(), dir);
    let admin = gavel_pki::Principal::parse("user:admin").expect("a principal");
    spec.security = gavel_testkit::Security::secure(admin);
    spec.start_timeout = WAIT;
    gavel_testkit::Cluster::start(spec).await.unwrap_or_else(|error| panic!("the secure cluster starts: {error}"))
}

/// A failure of the call's transport, not an answer of the cluster: no
/// node, a broken connection, or (as the SDK also retries) an HTTP/2
/// stream the node reset without answering, such as a forward whose
/// leader was killed mid-request; never one that carries a domain code.
fn transient(status: &tonic::Status) -> bool {
    match status.code() {
        tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled => true,
        tonic::Code::Internal => {
            gavel_proto::error_detail::read_domain_code(status).is_none()
                && status.message().starts_with("h2 protocol error")
        }
        _ => false,
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
            Err(status) if transient(&status) && started.elapsed() < WAIT => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => return other,
        }
    }
}

/// The answer to a read of one record, `None` when the cluster answered
/// `NOT_FOUND` (no `what` has that `id`, or it is outside the caller's view:
/// the same answer, "{what} {id} was not found"); any other refusal panics.
pub fn found<T>(read: Result<T, tonic::Status>, what: &str, id: &str) -> Option<T> {
    match read {
        Ok(answer) => Some(answer),
        Err(status) if status.code() == tonic::Code::NotFound => {
            assert_eq!(domain_code(&status), "NOT_FOUND", "{status:?}");
            assert_eq!(status.message(), format!("{what} {id} was not found"), "{status:?}");
            None
        }
        Err(status) => panic!("read {what} {id}: {status:?}"),
    }
}

/// The domain code of a refusal.
pub fn domain_code(status: &tonic::Status) -> String {
    gavel_proto::error_detail::read_domain_code(status).unwrap_or_else(|| format!("<none: {status:?}>"))
}

pub fn user(id: &str) -> pb::Actor {
    pb::Actor { id: id.to_string(), kind: pb::ActorKind::User as i32, ..pb::Actor::default() }
}

/// A create of approval `id` for `orders.refund` requested by alice, with
/// request id `create-{id}` and `surface` naming the test.
pub fn approval_request(id: &str, surface: &str) -> pb::CreateApprovalRequest {
    pb::CreateApprovalRequest {
        request_id: format!("create-{id}"),
        id: id.to_string(),
        capability_id: "orders.refund".to_string(),
        surface: surface.to_string(),
        actor: Some(user("alice")),
        input_json: format!(r#"{{"order":"{id}","amount":10}}"#),
        risk: pb::Risk::High as i32,
        side_effect: pb::SideEffect::Write as i32,
        ..pb::CreateApprovalRequest::default()
    }
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
    gavel_testkit::wall_clock_ms()
}

/// Calls `check` every 50 ms until it yields a value, up to [`WAIT`]; panics
/// naming `what` otherwise.
pub async fn eventually<T, F, Fut>(what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let found = gavel_testkit::eventually(WAIT, Duration::from_millis(50), check).await;
    found.unwrap_or_else(|| panic!("timed out after {WAIT:?} waiting for {what}"))
}

/// Submits `execution_id` of capability `docs.read` (registered by the
/// caller) with `input_json` through `via`, then leases one queued execution
/// of that queue and completes it with `output_json`. With several
/// lifecycles at once the lease may be another's; every submitted execution
/// is leased once, since each poll follows its own submit.
pub async fn run_lifecycle(cluster: &Cluster, via: u64, execution_id: &str, input_json: String, output_json: String) {
    let request_id = |prefix: &str| format!("{prefix}-{}", uuid::Uuid::new_v4());
    let submit = pb::SubmitRequest {
        request_id: request_id("submit"),
        execution_id: Some(execution_id.to_string()),
        capability_id: "docs.read".to_string(),
        input_json,
        actor: Some(user("alice")),
        surface: "lifecycle-test".to_string(),
        correlation_id: None,
    };
    retry(|| {
        let mut client = cluster.executions(via);
        let request = submit.clone();
        async move { client.submit(request).await }
    })
    .await
    .expect("submit");
    let poll = pb::PollRequest {
        request_id: request_id("poll"),
        worker_id: format!("worker-{execution_id}"),
        queues: vec!["docs.read".to_string()],
        max_tasks: 1,
        wait_ms: 10_000,
    };
    let tasks = retry(|| {
        let mut client = cluster.workers(via);
        let request = poll.clone();
        async move { client.poll(request).await }
    })
    .await
    .expect("poll")
    .into_inner()
    .tasks;
    assert_eq!(tasks.len(), 1, "a queued execution is leased: {tasks:?}");
    let lease = tasks[0].lease.clone().expect("a task carries its lease");
    let report = pb::ReportRequest {
        request_id: request_id("report"),
        lease_id: lease.lease_id,
        worker_id: lease.worker_id,
        outcome: Some(pb::report_request::Outcome::Completed(pb::ReportCompleted { output_json })),
    };
    retry(|| {
        let mut client = cluster.workers(via);
        let request = report.clone();
        async move { client.report(request).await }
    })
    .await
    .expect("report");
}

/// The resident memory of process `pid` now (`VmRSS`), in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the process status");
    let line = status.lines().find(|line| line.starts_with("VmRSS:")).expect("a VmRSS line");
    line.split_whitespace().nth(1).and_then(|kib| kib.parse().ok()).expect("VmRSS in kB")
}

/// `GET /metrics` at `addr`: the sum of the samples named `name` whose
/// line contains `label`.
pub async fn scraped(addr: &str, name: &str, label: &str) -> f64 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap_or_else(|error| panic!("{addr}: {error}"));
    stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: gavel\r\n\r\n").await.expect("write request");
    let mut answer = String::new();
    tokio::time::timeout(WAIT, stream.read_to_string(&mut answer))
        .await
        .expect("the scrape answers")
        .expect("read response");
    answer
        .lines()
        .filter(|line| line.starts_with(name) && line.contains(label))
        .filter_map(|line| line.rsplit_once(' ').and_then(|(_, value)| value.parse::<f64>().ok()))
        .sum()
}

/// A secure three-node cluster's spec (the admin `user:admin`), every node
/// with its metrics on a free loopback port (returned by node id) and the
/// given flags.
pub fn secure_spec(dir: &std::path::Path, flags: &[String]) -> (ClusterSpec, std::collections::BTreeMap<u64, String>) {
    let mut spec = ClusterSpec::new(gavel_binary(), dir);
    spec.security = gavel_testkit::Security::secure(gavel_core::Principal::parse("user:admin").expect("a principal"));
    spec.start_timeout = WAIT;
    spec.status_timeout = Duration::from_secs(10);
    let metrics: std::collections::BTreeMap<u64, String> =
        (1..=3).map(|id| (id, format!("127.0.0.1:{}", free_port()))).collect();
    spec.node_args = metrics
        .iter()
        .map(|(id, addr)| {
            let mut node = vec![format!("--metrics-listen={addr}")];
            node.extend_from_slice(flags);
            (*id, node)
        })
        .collect();
    (spec, metrics)
}
