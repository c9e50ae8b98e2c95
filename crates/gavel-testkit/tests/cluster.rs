//! The kit against real `gavel node` processes on loopback (the debug
//! binary, found as `resolve_gavel_binary` finds it: `cargo build -p
//! gavel-cli` first). The tests run one at a time: the machine is small and
//! elections must stay within their bounds.

use std::path::{Path, PathBuf};
use std::time::Duration;

use gavel_proto::v1 as pb;
use gavel_proto::v1::capability_service_client::CapabilityServiceClient;
use gavel_testkit::Converge as _;
use gavel_testkit::{resolve_gavel_binary, Cluster, ClusterSpec, Error};

/// Upper bound of any wait in these tests.
const WAIT: Duration = Duration::from_secs(20);

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn binary() -> PathBuf {
    resolve_gavel_binary(None).unwrap_or_else(|error| panic!("{error}"))
}

/// One replicated write through node `id`, retried while an election runs.
async fn write(cluster: &Cluster, id: u64, name: &str) {
    let started = std::time::Instant::now();
    loop {
        let mut client = CapabilityServiceClient::new(cluster.channel(id, Duration::from_secs(5)).expect("channel"));
        let request = pb::RegisterCapabilityRequest {
            request_id: format!("register-{name}"),
            spec: Some(pb::CapabilitySpec {
                id: name.to_string(),
                side_effect: pb::SideEffect::Read as i32,
                risk: pb::Risk::Low as i32,
                ..pb::CapabilitySpec::default()
            }),
        };
        match client.register_capability(request).await {
            Ok(_) => return,
            Err(status) if started.elapsed() < WAIT => {
                eprintln!("write {name} through node {id}: {status:?}; retrying");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(status) => panic!("write {name} through node {id}: {status:?}"),
        }
    }
}

fn markers(log: &Path) -> String {
    // A node writes a line in more than one call when it is long, so a
    // marker may follow part of a node's line: it is found where it starts.
    std::fs::read_to_string(log)
        .expect("read the log")
        .lines()
        .filter_map(|line| line.find("===== ").map(|start| &line[start..]))
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_pause_resume_and_restart_keep_one_converged_cluster() {
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let mut spec = ClusterSpec::new(binary(), dir.path());
    spec.snapshots.logs_since_last = Some(20);
    spec.log_label = "kit-test".to_string();
    let cluster = Cluster::start(spec).await.expect("the cluster starts");
    assert_eq!(cluster.ids(), vec![1, 2, 3]);
    assert_eq!(cluster.running(), vec![1, 2, 3]);
    assert!(cluster.endpoints().iter().all(|endpoint| endpoint.starts_with("http://127.0.0.1:")));
    let leader = cluster.wait_for_leader(WAIT).await.expect("a leader");
    write(&cluster, leader, "kit.one").await;
    let first = cluster.converge(WAIT).await.expect("the nodes converge");
    assert!(first.applied_index > 0 && !first.state_hash.is_empty(), "{first:?}");

    // A paused follower does not answer; the others keep their leader.
    let follower = cluster.ids().into_iter().find(|id| *id != leader).expect("a follower");
    let pid = cluster.pid(follower).expect("its pid");
    cluster.pause(follower).expect("pause");
    assert!(cluster.is_paused(follower) && cluster.is_running(follower));
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    assert!(stat.contains(") T "), "a stopped process: {stat}");
    assert!(cluster.status(follower).await.is_none(), "a paused node does not answer");
    assert!(!cluster.answering().contains(&follower));
    write(&cluster, leader, "kit.two").await;
    cluster.resume(follower).expect("resume");
    assert!(!cluster.is_paused(follower));
    assert!(matches!(cluster.pause(99), Err(Error::UnknownNode(99))));

    // SIGKILL the leader: the other two elect another one.
    assert!(cluster.kill(leader).expect("kill"));
    assert!(!cluster.kill(leader).expect("kill again"), "a dead node is not killed twice");
    assert!(matches!(cluster.pause(leader), Err(Error::NotRunning(_))));
    let new_leader = cluster.wait_for_leader(WAIT).await.expect("a new leader");
    assert_ne!(new_leader, leader);
    write(&cluster, new_leader, "kit.three").await;

    // Restarted on its data, the old leader catches up: one index, one hash.
    let new_pid = cluster.restart(leader).expect("restart");
    assert_ne!(Some(new_pid), Some(pid));
    assert!(matches!(cluster.start_node(leader), Err(Error::AlreadyRunning(_))));
    let converged = cluster.converge(WAIT).await.expect("the nodes converge after the restart");
    assert!(converged.applied_index > first.applied_index, "{converged:?} after {first:?}");
    assert_eq!(cluster.statuses().await.len(), 3);
    cluster.wait_applied(converged.applied_index, WAIT).await.expect("every node applied it");
    cluster.check_alive().expect("no node exited by itself");

    let log = markers(cluster.log_path(leader).expect("log"));
    assert!(log.contains("kit-test") && log.contains("start #2") && log.contains("SIGKILLed"), "{log}");

    // SIGTERM: a clean stop within the grace period.
    assert!(cluster.stop(follower, Duration::from_secs(10)).expect("stop"));
    assert!(!cluster.is_running(follower));
    assert!(markers(cluster.log_path(follower).expect("log")).contains("sent SIGTERM"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_cluster_kills_and_reaps_every_node() {
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let cluster = Cluster::start(ClusterSpec::new(binary(), dir.path())).await.expect("the cluster starts");
    let follower = cluster.ids().into_iter().last().expect("a node");
    cluster.pause(follower).expect("pause");
    let pids = cluster.pids();
    assert_eq!(pids.len(), 3);
    drop(cluster);
    for pid in pids {
        assert!(!Path::new(&format!("/proc/{pid}")).exists(), "pid {pid} was killed and reaped on drop");
    }
    assert!(dir.path().join("n1").is_dir(), "the data is kept");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_added_node_starts_with_join_and_its_own_flags() {
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let mut spec = ClusterSpec::new(binary(), dir.path());
    spec.nodes = 1;
    let mut cluster = Cluster::start(spec).await.expect("a one-node cluster starts");
    assert_eq!(cluster.wait_for_leader(WAIT).await.expect("a leader"), 1);
    let added = cluster.add_node().expect("add a node");
    assert_eq!(added, 2);
    cluster.set_node_args(added, vec!["--logs-to-keep=7".to_string()]).expect("its flags");
    assert!(!cluster.is_running(added));
    cluster.start_node(added).expect("start it");
    let log = markers(cluster.log_path(added).expect("log"));
    assert!(log.contains("--join") && log.contains("--logs-to-keep=7") && !log.contains("--peers"), "{log}");
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = cluster.status(added).await {
            break status;
        }
        assert!(started.elapsed() < WAIT, "the joining node never answered");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(status.node_id, added);
    assert_ne!(status.role, "Leader", "a joining node never bootstraps");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_exits_at_start_fails_the_start_with_its_log() {
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let mut spec = ClusterSpec::new(binary(), dir.path());
    spec.args.push("--no-such-flag".to_string());
    let started = std::time::Instant::now();
    let error = Cluster::start(spec).await.expect_err("no node can start");
    assert!(matches!(error, Error::NodeExited { .. }), "{error}");
    assert!(error.to_string().contains("n1.log") || error.to_string().contains(".log"), "{error}");
    assert!(started.elapsed() < Duration::from_secs(20), "the failure is reported early, not after the timeout");
}

#[test]
fn a_missing_binary_names_the_build_command() {
    let error = resolve_gavel_binary(Some(Path::new("/nonexistent/gavel"))).expect_err("no such file");
    let message = error.to_string();
    assert!(message.contains("/nonexistent/gavel") && message.contains("cargo build -p gavel-cli"), "{message}");
    let error = ClusterSpec::new("/nonexistent/gavel", "/tmp");
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    assert!(matches!(runtime.block_on(Cluster::start(error)), Err(Error::BinaryNotFound { .. })));
}

#[test]
fn the_binary_next_to_the_test_is_found() {
    // This test runs from target/<profile>/deps; the binary sits in target/<profile>.
    let found = binary();
    assert_eq!(found.file_name().and_then(|name| name.to_str()), Some("gavel"));
}

/// A launcher that places every node on one address.
#[derive(Debug)]
struct OneAddress;

impl gavel_testkit::Launcher for OneAddress {
    fn address(&self, _id: u64) -> Result<String, Error> {
        Ok("127.0.0.1:9".to_string())
    }
}

#[test]
fn two_nodes_never_share_an_address() {
    let dir = tempfile::tempdir().expect("temp dir");
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let spec = ClusterSpec::new("/bin/true", dir.path());
    let error = runtime.block_on(Cluster::start_with(spec, OneAddress)).expect_err("node 2 has no address of its own");
    assert!(matches!(error, Error::Launch { id: 2, .. }), "{error}");
}
