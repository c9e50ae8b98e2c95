//! The network and process layer of the chaos harness against real `gavel
//! node` processes: namespaces, iptables faults, SIGKILL/SIGSTOP, restarts.
//!
//! The namespace tests need root, `ip netns` and iptables; they print why and
//! return when those are missing. Every test needs the `gavel` binary
//! (`cargo build -p gavel-cli` first, or `GAVEL_BIN`); it is never built from
//! here, since a nested cargo would wait for the lock of the running one.

use std::future::Future;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use gavel_chaos::cluster::{self, Cluster, Namespaces};
use gavel_chaos::net::{cleanup_stale, fresh_prefix, Net, FAMILY};
use gavel_client::pb;
use gavel_testkit::resolve_gavel_binary;

/// Upper bound of one test.
const TEST_LIMIT: Duration = Duration::from_secs(60);

/// The cluster tests run one at a time: the machine has two shared cores and
/// elections must stay within their bounds.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The `gavel` binary next to this test (`target/<profile>/gavel`) or
/// `$GAVEL_BIN`; a missing one fails the test with the command that builds it.
fn gavel_binary() -> PathBuf {
    resolve_gavel_binary(None).unwrap_or_else(|error| panic!("{error}"))
}

/// Whether namespaces work here; prints why not.
fn namespaces_available() -> bool {
    let availability = Net::available();
    if !availability.available {
        eprintln!("SKIP: network namespaces unavailable: {}", availability.reason.unwrap_or_default());
        return false;
    }
    eprintln!("namespaces available, iptables flavour: {:?}", availability.iptables);
    true
}

/// Calls `check` every 100 ms until it yields a value or `limit` passes.
async fn eventually<T, F, Fut>(what: &str, limit: Duration, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let started = Instant::now();
    let found = gavel_testkit::eventually(limit, Duration::from_millis(100), check).await;
    let value = found.unwrap_or_else(|| panic!("timed out after {limit:?} waiting for {what}"));
    eprintln!("{what}: after {:?}", started.elapsed());
    value
}

/// The leader every answering node agrees on, when all `ids` answer and agree.
async fn agreed_leader(cluster: &Cluster, ids: &[u64]) -> Option<u64> {
    let statuses = cluster.statuses().await;
    let leaders: Vec<Option<u64>> = ids.iter().map(|id| statuses.get(id).and_then(|status| status.leader_id)).collect();
    let first = leaders.first().copied().flatten()?;
    leaders.iter().all(|leader| *leader == Some(first)).then_some(first)
}

fn ip_output(args: &[&str]) -> String {
    let output = Command::new("ip").args(args).output().expect("run ip");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn assert_prefix_gone(prefix: &str) {
    let namespaces = ip_output(&["netns", "list"]);
    assert!(!namespaces.lines().any(|line| line.starts_with(prefix)), "namespaces of {prefix} remain: {namespaces}");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        // Veths go away asynchronously with their namespace.
        let links = ip_output(&["-o", "link", "show"]);
        if !links.contains(prefix) {
            break;
        }
        assert!(Instant::now() < deadline, "links of {prefix} remain: {links}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Runs a test body under the serial lock and the time limit.
async fn bounded<F: Future<Output = ()>>(body: F) {
    let _serial = SERIAL.lock().await;
    tokio::time::timeout(TEST_LIMIT, body).await.expect("the test exceeded its 60 s limit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespaces_partitions_and_process_faults() {
    if !namespaces_available() {
        return;
    }
    let binary = gavel_binary();
    bounded(async move {
        let report = cleanup_stale(FAMILY);
        eprintln!("cleanup_stale: {report:?}");
        let prefix = fresh_prefix().expect("fresh prefix");
        let net = Net::setup(3, &prefix).expect("net setup");
        eprintln!("net {prefix}: hub {} subnet 10.213.{}.0/24", net.hub_ip(), net.subnet());
        let dir = tempfile::tempdir().expect("temp dir");
        let launcher = Namespaces { topology: net.topology(), port: 7400 };
        let cluster =
            Cluster::start_with(cluster::spec(&binary, dir.path(), false), launcher).await.expect("cluster start");
        let all = [1, 2, 3];
        for id in all {
            assert_eq!(cluster.addr(id), Some(format!("{}:7400", net.ip(id).expect("ip")).as_str()));
        }
        assert_eq!(cluster.endpoints().len(), 3);

        // `ip netns exec` execs the binary: the child's PID is the node itself,
        // inside its namespace.
        for id in all {
            let pid = cluster.pid(id).expect("pid");
            let exe = std::fs::read_link(format!("/proc/{pid}/exe")).expect("exe link");
            assert!(exe.to_string_lossy().contains("gavel"), "pid {pid} is {}", exe.display());
            let netns = std::fs::metadata(format!("/proc/{pid}/ns/net")).expect("ns").ino();
            let expected =
                std::fs::metadata(format!("/var/run/netns/{}", net.namespace(id).expect("ns"))).expect("ns").ino();
            assert_eq!(netns, expected, "node {id} runs in its namespace");
        }

        let leader =
            eventually("all three agree on a leader", Duration::from_secs(10), || agreed_leader(&cluster, &all)).await;

        // Partition the leader away: the majority elects another one.
        let rules = net.partition(&[vec![leader]]).expect("partition");
        eprintln!("partition rules: {rules:#?}");
        assert_eq!(rules.len(), 4, "{rules:?}");
        let others: Vec<u64> = all.iter().copied().filter(|id| *id != leader).collect();
        let new_leader = eventually("the majority elects a new leader", Duration::from_secs(10), || async {
            let agreed = agreed_leader(&cluster, &others).await?;
            let status = cluster.status(agreed).await?;
            (agreed != leader && status.role == "Leader").then_some((agreed, status.term))
        })
        .await;
        let (new_leader, new_term) = new_leader;
        assert_eq!(cluster.leader().await, Some(new_leader), "the leader of the newest term is the cluster's leader");
        if let Some(old) = cluster.status(leader).await {
            eprintln!("isolated old leader: role {} term {} leader {:?}", old.role, old.term, old.leader_id);
            assert_ne!(old.leader_id, Some(new_leader), "the isolated node cannot hear the new leader");
            assert!(old.role != "Leader" || old.term < new_term, "the isolated node cannot lead in a newer term");
        }

        // Heal: everyone agrees again.
        let healed = net.heal().expect("heal");
        assert_eq!(healed.len(), 3);
        for id in all {
            assert!(net.rules(id).expect("rules").is_empty());
        }
        let agreed =
            eventually("all three agree after healing", Duration::from_secs(20), || agreed_leader(&cluster, &all))
                .await;
        eprintln!("after healing the leader is {agreed}");

        // One-way cut and bridge: rules listed, heal flushes them.
        let (a, b) = (others[0], others[1]);
        let rules = net.cut_one_way(a, b).expect("one-way cut");
        assert_eq!(rules.len(), 1);
        let on_b = net.rules(b).expect("rules");
        assert_eq!(on_b, vec![format!("-A GAVEL-CHAOS -s {}/32 -j DROP", net.ip(a).expect("ip"))]);
        assert!(net.rules(a).expect("rules").is_empty());
        let rules = net.bridge(a, leader).expect("bridge");
        assert_eq!(rules.len(), 2);
        net.heal().expect("heal");
        for id in all {
            assert!(net.rules(id).expect("rules").is_empty());
        }

        // Packet loss: a statistic rule per pair of nodes, none against the hub.
        let rules = net.packet_loss(0.25).expect("packet loss");
        assert_eq!(rules.len(), 6);
        for id in all {
            let listed = net.all_rules(id).expect("iptables -S");
            let lossy: Vec<&String> = listed.iter().filter(|rule| rule.contains("statistic")).collect();
            assert_eq!(lossy.len(), 2, "{listed:#?}");
            assert!(lossy.iter().all(|rule| rule.contains("--probability 0.25")), "{lossy:#?}");
            assert!(!listed.iter().any(|rule| rule.contains(&net.hub_ip().to_string())), "{listed:#?}");
        }
        net.heal().expect("heal");
        for id in all {
            assert!(!net.all_rules(id).expect("iptables -S").iter().any(|rule| rule.contains("statistic")));
        }

        // SIGSTOP / SIGCONT a follower.
        let leader = eventually("a leader", Duration::from_secs(20), || agreed_leader(&cluster, &all)).await;
        let follower = all.iter().copied().find(|id| *id != leader).expect("a follower");
        let pid = cluster.pid(follower).expect("pid");
        cluster.pause(follower).expect("pause");
        assert!(cluster.is_paused(follower) && cluster.is_running(follower));
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
        assert!(stat.contains(") T "), "a stopped process: {stat}");
        assert!(cluster.status(follower).await.is_none(), "a paused node does not answer");
        assert!(cluster.leader().await.is_some(), "the other two keep a leader");
        cluster.resume(follower).expect("resume");
        assert!(!cluster.is_paused(follower));
        eventually("the resumed follower answers", Duration::from_secs(10), || cluster.status(follower)).await;

        // Kill a follower, write while it is down, restart it: it catches up.
        let leader = eventually("a leader", Duration::from_secs(20), || agreed_leader(&cluster, &all)).await;
        let follower = all.iter().copied().find(|id| *id != leader).expect("a follower");
        let old_pid = cluster.pid(follower).expect("pid");
        assert!(cluster.kill(follower).expect("kill"));
        assert!(!cluster.is_running(follower) && cluster.pid(follower).is_none());
        assert!(!cluster.kill(follower).expect("kill again"), "a dead node is not killed twice");
        // The run is secure: the kit's admin (bootstrapped by whichever node
        // led first) writes over TLS to the namespace addresses.
        let client = gavel_client::Client::with_config(&cluster.addrs(), cluster.client_config()).expect("client");
        eventually("the bootstrap admin is applied", Duration::from_secs(10), || async {
            let answer = client.who_am_i(pb::WhoAmIRequest {}).await.ok()?;
            answer.grants.iter().any(|grant| grant.grant == "admin").then_some(())
        })
        .await;
        for n in 0..3 {
            client
                .register_capability(pb::RegisterCapabilityRequest {
                    request_id: String::new(),
                    spec: Some(pb::CapabilitySpec {
                        id: format!("chaos.net.{n}"),
                        side_effect: pb::SideEffect::Write as i32,
                        risk: pb::Risk::Low as i32,
                        ..pb::CapabilitySpec::default()
                    }),
                })
                .await
                .expect("write while a follower is down");
        }
        let target = cluster.status(leader).await.expect("leader status").last_applied_index;
        let new_pid = cluster.restart(follower).expect("restart");
        assert_ne!(new_pid, old_pid);
        let caught_up = eventually("the restarted follower catches up", Duration::from_secs(15), || async {
            let status = cluster.status(follower).await?;
            (status.last_applied_index >= target).then_some(status.last_applied_index)
        })
        .await;
        eprintln!("follower {follower} applied {caught_up} (leader had {target})");

        let log = std::fs::read_to_string(cluster.log_path(follower).expect("log")).expect("read log");
        assert!(log.matches("===== gavel-chaos").count() >= 4, "start markers in the appended log:\n{log}");
        assert!(log.contains("start #2"), "the log is appended across restarts");

        cluster.shutdown();
        for id in all {
            assert!(!cluster.is_running(id));
        }
        net.teardown().expect("teardown");
        net.teardown().expect("teardown is idempotent");
        assert_prefix_gone(&prefix);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cleanup_stale_removes_dead_runs_only() {
    if !namespaces_available() {
        return;
    }
    bounded(async {
        let iptables = Net::available().iptables.expect("iptables flavour");
        // A live run.
        let live_prefix = fresh_prefix().expect("prefix");
        let live = Net::setup(1, &live_prefix).expect("live net");
        // A dead run: a namespace with a veth, a bridge and a root rule, no lock.
        let stale = fresh_prefix().expect("prefix");
        assert_ne!(stale, live_prefix);
        let run = |program: &str, args: &[&str]| {
            let status = Command::new(program).args(args).status().expect("run");
            assert!(status.success(), "{program} {args:?}");
        };
        let namespace = format!("{stale}-n1");
        let bridge = format!("{stale}br");
        let veth = format!("{stale}v1");
        run("ip", &["netns", "add", &namespace]);
        run("ip", &["link", "add", &bridge, "type", "bridge"]);
        run("ip", &["link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &namespace]);
        run("ip", &["link", "set", &veth, "master", &bridge]);
        run(&iptables, &["-w", "5", "-A", "FORWARD", "-i", &bridge, "-o", &bridge, "-j", "ACCEPT"]);

        let report = cleanup_stale(FAMILY);
        eprintln!("{report:?}");
        assert!(report.namespaces.contains(&namespace), "{report:?}");
        assert!(report.rules.iter().any(|rule| rule.contains(&bridge)), "{report:?}");
        assert_prefix_gone(&stale);
        let forward = Command::new(&iptables).args(["-w", "5", "-S", "FORWARD"]).output().expect("iptables");
        assert!(!String::from_utf8_lossy(&forward.stdout).contains(&bridge));

        // The live run is untouched.
        assert!(ip_output(&["netns", "list"]).contains(&format!("{live_prefix}-n1")));
        assert!(ip_output(&["-o", "link", "show"]).contains(&format!("{live_prefix}br")));
        let forward = Command::new(&iptables).args(["-w", "5", "-S", "FORWARD"]).output().expect("iptables");
        assert!(String::from_utf8_lossy(&forward.stdout).contains(&format!("{live_prefix}br")));
        live.teardown().expect("teardown");
        assert_prefix_gone(&live_prefix);
        let forward = Command::new(&iptables).args(["-w", "5", "-S", "FORWARD"]).output().expect("iptables");
        assert!(!String::from_utf8_lossy(&forward.stdout).contains(&live_prefix), "teardown removes its root rule");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loopback_kill_and_restart() {
    let binary = gavel_binary();
    bounded(async move {
        let dir = tempfile::tempdir().expect("temp dir");
        let cluster = Cluster::start(cluster::spec(&binary, dir.path(), true)).await.expect("cluster start");
        let all = [1, 2, 3];
        for endpoint in cluster.endpoints() {
            assert!(endpoint.starts_with("http://127.0.0.1:"), "{endpoint}");
        }
        let leader =
            eventually("all three agree on a leader", Duration::from_secs(10), || agreed_leader(&cluster, &all)).await;
        assert!(cluster.kill(leader).expect("kill"));
        assert!(!cluster.is_running(leader));
        let others: Vec<u64> = all.iter().copied().filter(|id| *id != leader).collect();
        let new_leader = eventually("a new leader", Duration::from_secs(15), || async {
            agreed_leader(&cluster, &others).await.filter(|id| *id != leader)
        })
        .await;
        cluster.restart(leader).expect("restart");
        assert!(cluster.is_running(leader));
        let agreed =
            eventually("the restarted node rejoins", Duration::from_secs(15), || agreed_leader(&cluster, &all)).await;
        eprintln!("old leader {leader}, new leader {new_leader}, agreed {agreed}");
        let pids: Vec<u32> = all.iter().filter_map(|id| cluster.pid(*id)).collect();
        assert_eq!(pids.len(), 3);
        drop(cluster);
        for pid in pids {
            assert!(!PathBuf::from(format!("/proc/{pid}")).exists(), "pid {pid} was killed and reaped on drop");
        }
    })
    .await;
}
