//! Crash tests of the snapshot machinery, through real node processes: a
//! secure three-node cluster (mutual TLS, the load authenticated by its
//! certificate) that builds a snapshot every 200 commands holds a few dozen
//! MiB of finalized executions, so that building and installing a snapshot
//! takes a while. Nodes are then SIGKILLed at random points, from a seeded
//! generator whose seed is printed (`GAVEL_CRASH_SEED` replays one):
//!
//! - while they apply under load (any node, the leader included);
//! - around their checkpoints: a node's snapshot builds are durable
//!   checkpoints of its `cold.redb` (a few milliseconds, no file), and with
//!   `--checkpoint-cold-writes` low it also writes its changes between
//!   snapshots without waiting for the disk (the store is then past its
//!   checkpoint until the next build); the kill follows a build by a random
//!   part of the time between two builds, and the node must resume from a
//!   checkpoint of its own (at its stored snapshot or past it), never
//!   restore or rewrite its history;
//! - while a new node, a learner that joined behind the purge point,
//!   installs the leader's snapshot: the kill follows the appearance of the
//!   spooled transfer (`raft-incoming/`) by a random part of a measured
//!   install, and landed inside it when the spool file is still there and
//!   shorter than the snapshot (the transfer) or the node had not logged
//!   the install (the restore into `cold.redb`, after the received file was
//!   stored). The node restarts on what the kill left.
//!
//! After every restart the node must come back, catch up and report the
//! leader's state hash at the same applied index, and it must serve the old
//! finalized executions whole: their results through it, and their audit
//! trails from its own store (`WatchEvents` is served by the replica it
//! asks, without going to the leader), equal to the leader's.

mod support;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use gavel_client::{Client, ClientTls};
use gavel_pki::Principal;
use gavel_proto::v1 as pb;
use gavel_proto::v1::audit_service_client::AuditServiceClient;
use gavel_testkit::Converge as _;
use gavel_testkit::{Cluster, ClusterSpec, Converged, Security, SnapshotPolicy, HARNESS_GRANTS};

/// Each test, bounded.
const TEST_BOUND: Duration = Duration::from_secs(240);
/// SIGKILLs per scenario.
const KILLS: usize = 5;
/// Commands between two snapshots (`--snapshot-commands-since-last`).
const SNAPSHOT_COMMANDS: u64 = 200;
/// An entry threshold never reached: snapshots come from the command count.
const SNAPSHOT_ENTRIES_NEVER: u64 = 1_000_000;
/// Entries kept behind a snapshot: a node that joins later is behind the
/// purge point and gets a snapshot.
const LOGS_TO_KEEP: u64 = 10;
/// Large finalized executions written before the kills. With their
/// [`INPUT_BYTES`] and [`OUTPUT_BYTES`] (about 480 KB each in a snapshot,
/// with events and lease) a snapshot is about 40 MB.
const FILL_LIFECYCLES: usize = 80;
/// Large lifecycles run at once.
const FILL_CONCURRENT: usize = 4;
/// Input per filled execution (the input limit is 64 KiB).
const INPUT_BYTES: usize = 60 * 1024;
/// Output per filled execution (the output limit is 256 KiB).
const OUTPUT_BYTES: usize = 250 * 1024;
/// Small lifecycles run at once as the load during the kills.
const LOAD_WRITERS: usize = 4;
/// The capability every lifecycle runs (its queue has the same name).
const CAPABILITY: &str = "crash.read";
/// Bound of every wait for a condition: a node answering, a build or an
/// install starting, convergence.
const WAIT: Duration = Duration::from_secs(60);
/// How often a condition on a file is polled (an install of the filled
/// state takes a few hundred milliseconds).
const FILE_POLL: Duration = Duration::from_millis(2);
/// Cold writes held before they are written into the store between
/// snapshots (`--checkpoint-cold-writes`): about 9 per lifecycle, so a
/// write every few dozen lifecycles, between the snapshots' checkpoints.
const CHECKPOINT_COLD_WRITES: u64 = 300;
/// Deadline of one status call (it hashes the state).
const STATUS_TIMEOUT: Duration = Duration::from_secs(5);

/// The tests share the machine's two cores: one cluster at a time (an
/// async mutex: it is held across awaits, in each test's own runtime).
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The seeded generator of the kill points (`gavel-chaos`'s SplitMix64):
/// a run's points follow from its printed seed.
struct Rng(gavel_chaos::rng::Rng);

impl Rng {
    /// `GAVEL_CRASH_SEED`, or one from the clock; printed either way, forked
    /// by `stream` so that each test draws its own points.
    fn seeded(test: &str, stream: u64) -> Rng {
        let seed = std::env::var("GAVEL_CRASH_SEED")
            .ok()
            .and_then(|seed| seed.parse().ok())
            .unwrap_or_else(|| gavel_testkit::wall_clock_ms().unsigned_abs() % 1_000_000);
        println!("snapshot_crash {test}: seed {seed} (replay with GAVEL_CRASH_SEED={seed})");
        Rng(gavel_chaos::rng::Rng::new(seed).fork(stream))
    }

    /// A duration in `[low_ms, high_ms]`.
    fn millis(&mut self, low_ms: u64, high_ms: u64) -> Duration {
        Duration::from_millis(self.0.between(low_ms, high_ms))
    }

    /// A duration in `[0, window)`.
    fn within(&mut self, window: Duration) -> Duration {
        Duration::from_micros(self.0.below(u64::try_from(window.as_micros()).unwrap_or(u64::MAX)))
    }

    /// `count` victims among `ids`: seeded shuffles of them, one after the
    /// other, so that every node is killed once in each round of `ids.len()`.
    fn victims(&mut self, ids: &[u64], count: usize) -> Vec<u64> {
        let mut victims = Vec::new();
        while victims.len() < count {
            let mut order = ids.to_vec();
            self.0.shuffle(&mut order);
            victims.extend(order);
        }
        victims.truncate(count);
        victims
    }
}

/// A JSON object of about `bytes` bytes tagged with `tag`.
fn padded_json(bytes: usize, tag: &str) -> String {
    format!("{{\"tag\":\"{tag}\",\"pad\":\"{}\"}}", "x".repeat(bytes))
}

/// A running secure cluster, its load client and its admin client.
struct Harness {
    cluster: Cluster,
    /// The load principal's TLS, for the raw channels of local reads.
    load_tls: ClientTls,
    /// The load principal (harness grants), over every initial node.
    client: Client,
    /// The bootstrap admin, over every initial node.
    admin: Client,
    /// Where the cluster lives; kept (and named) when a test fails.
    _dir: KeptOnPanic,
}

/// A temporary directory that is kept, and its path printed, when the test panics.
struct KeptOnPanic(Option<tempfile::TempDir>);

impl KeptOnPanic {
    fn path(&self) -> &Path {
        self.0.as_ref().expect("the directory lives until drop").path()
    }
}

impl Drop for KeptOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            if let Some(dir) = self.0.take() {
                eprintln!("snapshot_crash: node data and logs kept in {}", dir.keep().display());
            }
        }
    }
}

impl Harness {
    /// Starts three secure voters that snapshot every [`SNAPSHOT_COMMANDS`]
    /// commands, grants the load principal the harness grants and registers
    /// [`CAPABILITY`].
    async fn start() -> Harness {
        let dir = KeptOnPanic(Some(tempfile::Builder::new().prefix("snapshot-crash").tempdir().expect("temp dir")));
        let mut spec = ClusterSpec::new(support::gavel_binary(), dir.path());
        spec.security = Security::secure(Principal::parse("user:admin").expect("a principal"));
        spec.snapshots = SnapshotPolicy {
            logs_since_last: Some(SNAPSHOT_ENTRIES_NEVER),
            commands_since_last: Some(SNAPSHOT_COMMANDS),
            logs_to_keep: Some(LOGS_TO_KEEP),
        };
        spec.args.push(format!("--checkpoint-cold-writes={CHECKPOINT_COLD_WRITES}"));
        spec.start_timeout = WAIT;
        spec.status_timeout = STATUS_TIMEOUT;
        spec.log_label = "snapshot-crash".to_string();
        let cluster = Cluster::start(spec).await.unwrap_or_else(|error| panic!("the cluster starts: {error}"));
        let load = Principal::parse("service:crash-load").expect("a principal");
        cluster.grant(&load, &HARNESS_GRANTS, WAIT).await.expect("the load principal is granted");
        let load_tls = cluster.credentials(&load).expect("load credentials");
        let config = cluster.client_config_as(&load).expect("a load client config");
        let client = Client::with_config(&cluster.addrs(), config).expect("a load client");
        let admin = Client::with_config(&cluster.addrs(), cluster.client_config()).expect("an admin client");
        let capability = support::capability(CAPABILITY, pb::SideEffect::Read);
        let request = pb::RegisterCapabilityRequest { request_id: String::new(), spec: Some(capability) };
        admin.register_capability(request).await.expect("the capability registers");
        Harness { cluster, load_tls, client, admin, _dir: dir }
    }

    /// Writes [`FILL_LIFECYCLES`] large finalized executions `old-<n>`;
    /// returns the ones the checks read back.
    async fn fill(&self) -> Vec<String> {
        let started = Instant::now();
        futures::stream::iter(0..FILL_LIFECYCLES)
            .for_each_concurrent(FILL_CONCURRENT, |index| async move {
                let execution_id = format!("old-{index}");
                let input_json = padded_json(INPUT_BYTES, &execution_id);
                lifecycle(&self.client, &execution_id, input_json, true).await.expect("a fill lifecycle");
            })
            .await;
        let converged = self.converge().await;
        println!(
            "snapshot_crash: {FILL_LIFECYCLES} large lifecycles in {:.1} s; converged at {}",
            started.elapsed().as_secs_f64(),
            converged.applied_index
        );
        [0, FILL_LIFECYCLES / 2, FILL_LIFECYCLES - 1].iter().map(|index| format!("old-{index}")).collect()
    }

    /// Every answering node at one applied index with one state hash.
    async fn converge(&self) -> Converged {
        self.cluster.converge(WAIT).await.unwrap_or_else(|error| panic!("the cluster converges: {error}"))
    }

    async fn leader(&self) -> u64 {
        self.cluster.wait_for_leader(WAIT).await.unwrap_or_else(|error| panic!("a leader: {error}"))
    }

    fn data_dir(&self, id: u64) -> PathBuf {
        self.cluster.data_dir(id).expect("a placed node").to_path_buf()
    }

    fn log(&self, id: u64) -> String {
        let path = self.cluster.log_path(id).expect("a placed node");
        String::from_utf8_lossy(&std::fs::read(path).unwrap_or_default()).into_owned()
    }

    fn kill(&self, id: u64) {
        assert!(self.cluster.kill(id).unwrap_or_else(|error| panic!("SIGKILL node {id}: {error}")), "{id} ran");
    }

    /// What node `id` logged since its last start.
    fn log_of_this_start(&self, id: u64) -> String {
        let log = self.log(id);
        let start = log.rfind("]: start #").unwrap_or(0);
        log[start..].to_string()
    }

    /// Starts node `id` on its data and waits until it answers; its Raft
    /// core must have started without a panic (openraft checks the state it
    /// reads back before the node serves).
    async fn restart(&self, id: u64) {
        self.cluster.start_node(id).unwrap_or_else(|error| panic!("start node {id}: {error}"));
        let answers = gavel_testkit::eventually(WAIT, Duration::from_millis(50), || async {
            self.cluster.status(id).await.map(|_| ())
        })
        .await;
        assert!(answers.is_some(), "node {id} answers within {WAIT:?} of its restart");
        let log = self.log_of_this_start(id);
        if let Some(at) = log.find("panicked at") {
            let panic: String = log[at..].lines().take(2).collect::<Vec<_>>().join(" ");
            panic!("node {id} panicked when it restarted on the data its SIGKILL left: {panic}");
        }
    }

    /// After node `restarted` came back: the cluster converges (so the node
    /// has the leader's state hash at the leader's applied index), at an
    /// index past `applied_before` (it caught up), and the node serves the
    /// old executions whole.
    async fn assert_recovered(&self, restarted: u64, applied_before: u64, old: &[String]) -> Converged {
        let converged = self.converge().await;
        let leader = self.leader().await;
        let statuses = self.cluster.statuses().await;
        let (Some(mine), Some(leaders)) = (statuses.get(&restarted), statuses.get(&leader)) else {
            panic!("node {restarted} and the leader {leader} answer: {statuses:?}");
        };
        // The ticker may have applied one more entry since; then both moved.
        if mine.last_applied_index == leaders.last_applied_index {
            assert_eq!(mine.state_hash, leaders.state_hash, "node {restarted} has the leader's state hash");
        }
        assert!(
            converged.applied_index > applied_before,
            "node {restarted} caught up past {applied_before}: {converged:?}"
        );
        for execution_id in old {
            self.assert_served_whole(restarted, execution_id).await;
        }
        converged
    }

    /// Execution `execution_id` read through node `via` is completed with
    /// its large output, and its audit trail read from `via`'s own store is
    /// the one the leader lists.
    async fn assert_served_whole(&self, via: u64, execution_id: &str) {
        let addr = self.cluster.addr(via).expect("a placed node").to_string();
        let config = gavel_client::ClientConfig { tls: Some(self.load_tls.clone()), ..Default::default() };
        let through = Client::with_config(std::slice::from_ref(&addr), config).expect("a client of one node");
        let request = pb::GetExecutionRequest { execution_id: execution_id.to_string() };
        let execution = through.get_execution(request).await.expect("get execution").execution;
        let execution = execution.unwrap_or_else(|| panic!("node {via} knows {execution_id}"));
        assert_eq!(execution.state, pb::ExecutionState::Completed as i32, "{execution_id} through node {via}");
        let Some(pb::result_envelope::Outcome::Completed(completed)) =
            execution.result.and_then(|result| result.outcome)
        else {
            panic!("{execution_id} carries its completed result through node {via}");
        };
        assert!(
            completed.output_json.len() > OUTPUT_BYTES && completed.output_json.contains(execution_id),
            "{execution_id}'s output came whole through node {via}"
        );
        let request =
            pb::ListExecutionEventsRequest { execution_id: execution_id.to_string(), after_cursor: 0, limit: 0 };
        let reference = self.client.list_execution_events(request).await.expect("list events").events;
        assert!(reference.len() >= 3, "{execution_id}: requested, started, completed: {reference:?}");
        let local = self.watch_local(via, &addr, execution_id, reference.len()).await;
        assert_eq!(local, reference, "{execution_id}'s audit trail in node {via}'s own store");
    }

    /// The first `count` events of `execution_id` that node `via` streams
    /// from its own replica (`WatchEvents` from the start).
    async fn watch_local(&self, via: u64, addr: &str, execution_id: &str, count: usize) -> Vec<pb::Event> {
        let channel = gavel_testkit::channel_with(addr, WAIT, Some(&self.load_tls)).expect("a channel");
        let request = pb::WatchEventsRequest { after_cursor: 0, execution_id: Some(execution_id.to_string()) };
        let watched = async {
            let mut stream = AuditServiceClient::new(channel).watch_events(request).await?.into_inner();
            let mut events = Vec::new();
            while events.len() < count {
                match stream.message().await? {
                    Some(event) => events.push(event),
                    None => break,
                }
            }
            Ok::<_, tonic::Status>(events)
        };
        match tokio::time::timeout(WAIT, watched).await {
            Ok(Ok(events)) => events,
            Ok(Err(status)) => panic!("watching {execution_id} on node {via}: {status:?}"),
            Err(_) => panic!("node {via} streamed fewer than {count} events of {execution_id} within {WAIT:?}"),
        }
    }

    /// The applied index node `id` reports (0 when it does not answer).
    async fn applied(&self, id: u64) -> u64 {
        self.cluster.status(id).await.map_or(0, |status| status.last_applied_index)
    }
}

/// Submits `execution_id`, leases one task of the queue and completes it
/// (with a large output tagged with the leased execution's id when
/// `large`). With several lifecycles at once the lease may be another's.
async fn lifecycle(
    client: &Client,
    execution_id: &str,
    input_json: String,
    large: bool,
) -> Result<(), gavel_client::Error> {
    client
        .submit(pb::SubmitRequest {
            request_id: String::new(),
            execution_id: Some(execution_id.to_string()),
            capability_id: CAPABILITY.to_string(),
            input_json,
            actor: Some(support::user("alice")),
            surface: "snapshot-crash".to_string(),
            correlation_id: None,
        })
        .await?;
    let poll = pb::PollRequest {
        request_id: String::new(),
        worker_id: format!("worker-{execution_id}"),
        queues: vec![CAPABILITY.to_string()],
        max_tasks: 1,
        wait_ms: 5_000,
    };
    for task in client.poll(poll).await?.tasks {
        let lease = task.lease.expect("a task carries its lease");
        let output_json = if large { padded_json(OUTPUT_BYTES, &task.execution_id) } else { "{}".to_string() };
        client
            .report(pb::ReportRequest {
                request_id: String::new(),
                lease_id: lease.lease_id,
                worker_id: lease.worker_id,
                outcome: Some(pb::report_request::Outcome::Completed(pb::ReportCompleted { output_json })),
            })
            .await?;
    }
    Ok(())
}

/// Small lifecycles run by [`LOAD_WRITERS`] tasks until paused.
struct Load {
    stop: Arc<AtomicBool>,
    writers: Vec<tokio::task::JoinHandle<(u64, Vec<String>)>>,
}

impl Load {
    /// Starts the writers; execution ids are `<prefix>-<n>` from `next`.
    fn start(client: &Client, prefix: &str, next: &Arc<AtomicU64>) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let writers = (0..LOAD_WRITERS)
            .map(|_| {
                let (client, stop, next, prefix) = (client.clone(), stop.clone(), next.clone(), prefix.to_string());
                tokio::spawn(async move {
                    let (mut done, mut failures) = (0, Vec::new());
                    while !stop.load(Ordering::SeqCst) {
                        let execution_id = format!("{prefix}-{}", next.fetch_add(1, Ordering::SeqCst));
                        match lifecycle(&client, &execution_id, "{}".to_string(), false).await {
                            Ok(()) => done += 1,
                            Err(error) => failures.push(format!("{execution_id}: {error}")),
                        }
                    }
                    (done, failures)
                })
            })
            .collect();
        Load { stop, writers }
    }

    /// Stops the writers after their current lifecycle; returns how many
    /// lifecycles completed. The cluster keeps a quorum throughout (one node
    /// is down at a time), so no call may fail past the client's retries.
    async fn pause(self) -> u64 {
        self.stop.store(true, Ordering::SeqCst);
        let mut done = 0;
        for writer in self.writers {
            let (completed, failures) = tokio::time::timeout(WAIT, writer)
                .await
                .expect("a load writer stops within its bound")
                .expect("a load writer does not panic");
            assert!(failures.is_empty(), "load calls failed with one node down: {failures:?}");
            done += completed;
        }
        done
    }
}

/// The spooled snapshot transfers in `data_dir` (`raft-incoming/`), with their sizes.
fn incoming_files(data_dir: &Path) -> Vec<(PathBuf, u64)> {
    files(&data_dir.join("raft-incoming"))
        .into_iter()
        .map(|path| {
            let bytes = std::fs::metadata(&path).map_or(0, |metadata| metadata.len());
            (path, bytes)
        })
        .collect()
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    entries.filter_map(Result::ok).map(|entry| entry.path()).collect()
}

/// Polls `found` every [`FILE_POLL`] until it holds, up to [`WAIT`]; panics naming `what`.
async fn poll_files<T>(what: &str, mut found: impl FnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(value) = found() {
            return value;
        }
        assert!(started.elapsed() < WAIT, "timed out after {WAIT:?} waiting for {what}");
        tokio::time::sleep(FILE_POLL).await;
    }
}

/// Kills under load at random points: any node, the leader included, is
/// SIGKILLed while the load runs, stays down for a while as the others go
/// on, and is restarted on its data while the load runs again.
async fn kills_while_applying(harness: &Harness, rng: &mut Rng, old: &[String], next: &Arc<AtomicU64>) {
    let mut report = Vec::new();
    for (round, victim) in (1..).zip(rng.victims(&harness.cluster.running(), KILLS)) {
        let load = Load::start(&harness.client, "apply", next);
        tokio::time::sleep(rng.millis(300, 1500)).await;
        let leader = harness.leader().await;
        let applied_before = harness.applied(victim).await;
        harness.kill(victim);
        tokio::time::sleep(rng.millis(200, 1000)).await;
        harness.restart(victim).await;
        tokio::time::sleep(rng.millis(100, 800)).await;
        let lifecycles = load.pause().await;
        let converged = harness.assert_recovered(victim, applied_before, old).await;
        assert!(lifecycles > 0, "round {round}: the load made progress");
        let role = if victim == leader { "leader" } else { "follower" };
        report.push(format!(
            "node {victim} ({role}) killed at {applied_before}; {lifecycles} lifecycles; converged at {}",
            converged.applied_index
        ));
    }
    println!("snapshot_crash: kills while applying:\n  {}", report.join("\n  "));
}

/// Kills around checkpoints: under load, a random node is SIGKILLed a
/// random part of its time between two snapshot builds after a build (a
/// durable checkpoint of its cold store) was logged; changes are written
/// between snapshots every [`CHECKPOINT_COLD_WRITES`] cold writes, and a
/// kill returns the store to its last durable checkpoint. The node must
/// resume from a checkpoint of its own, at its stored snapshot or past it
/// (a build killed before sled stored its meta, or one written for a
/// view), and replay its log from there: never restore a snapshot file or
/// rewrite its cold store.
async fn kills_around_checkpoints(harness: &Harness, rng: &mut Rng, old: &[String], next: &Arc<AtomicU64>) {
    let (mut past, mut report) = (0, Vec::new());
    for (round, victim) in (1..).zip(rng.victims(&harness.cluster.running(), KILLS)) {
        let load = Load::start(&harness.client, "checkpoint", next);
        let builds = |harness: &Harness| harness.log_of_this_start(victim).matches("snapshot built").count();
        let before = builds(harness);
        let started = Instant::now();
        // The log is read every 50th poll (100 ms), not every 2 ms.
        let mut polls = 0u32;
        poll_files(&format!("node {victim} to build a snapshot"), || {
            polls += 1;
            Some(()).filter(|()| polls.is_multiple_of(50) && builds(harness) > before)
        })
        .await;
        let interval = started.elapsed().max(Duration::from_millis(50));
        let delay = rng.within(interval);
        tokio::time::sleep(delay).await;
        let applied_before = harness.applied(victim).await;
        harness.kill(victim);
        harness.restart(victim).await;
        let log = harness.log_of_this_start(victim);
        let checkpoint_lines = || {
            log.lines()
                .filter(|line| line.contains("snapshot") || line.contains("checkpoint"))
                .collect::<Vec<_>>()
                .join("\n")
        };
        let resumed_past = log.contains("resumed from its own checkpoint past the stored snapshot");
        assert!(
            resumed_past || log.contains("resumed from its own checkpoint at the stored snapshot"),
            "node {victim} resumes from a checkpoint of its own:\n{}",
            checkpoint_lines()
        );
        assert!(
            !log.contains("restored the application from the stored snapshot"),
            "node {victim} restores no snapshot file:\n{}",
            checkpoint_lines()
        );
        past += usize::from(resumed_past);
        let lifecycles = load.pause().await;
        let converged = harness.assert_recovered(victim, applied_before, old).await;
        assert!(lifecycles > 0, "round {round}: the load made progress");
        report.push(format!(
            "node {victim} killed {delay:.0?} after a build (builds {interval:.0?} apart): resumed {}; converged at {}",
            if resumed_past { "past the stored snapshot" } else { "at the stored snapshot" },
            converged.applied_index
        ));
    }
    println!(
        "snapshot_crash: kills around checkpoints ({past} of {KILLS} resumed past the stored snapshot):\n  {}",
        report.join("\n  ")
    );
}

/// One install on a learner, observed through its spool file and its log.
struct Install {
    /// From the spool file's appearance until the node logged the install.
    whole: Duration,
    /// From its appearance until it was first seen whole.
    transfer: Duration,
    /// The snapshot's size (the stored file's).
    bytes: u64,
}

/// Observes the next install on `learner`.
async fn measure_install(harness: &Harness, learner: u64) -> Install {
    let data_dir = harness.data_dir(learner);
    let appeared = poll_files(&format!("node {learner} to receive a snapshot"), || {
        Some(Instant::now()).filter(|_| !incoming_files(&data_dir).is_empty())
    })
    .await;
    let (mut sizes, mut polls) = (Vec::new(), 0u32);
    poll_files(&format!("node {learner} to install the snapshot"), || {
        polls += 1;
        let spooled = incoming_files(&data_dir).first().map(|(_, bytes)| *bytes);
        if let Some(bytes) = spooled {
            sizes.push((appeared.elapsed(), bytes));
        }
        // The log is read once the spool is gone (stored), every 5th poll.
        let done = spooled.is_none() && polls.is_multiple_of(5);
        Some(()).filter(|()| done && harness.log_of_this_start(learner).contains("snapshot installed"))
    })
    .await;
    let whole = appeared.elapsed();
    let stored =
        files(&data_dir.join("raft-snapshot")).into_iter().filter(|path| path.to_string_lossy().ends_with(".snap"));
    let bytes = stored.filter_map(|path| std::fs::metadata(path).ok()).map(|metadata| metadata.len()).max();
    let bytes = bytes.expect("the installed snapshot's file is stored (until the node's next build)");
    let transfer = sizes.iter().find(|(_, size)| *size >= bytes).map_or(whole, |(at, _)| *at);
    Install { whole, transfer, bytes }
}

/// Starts a new node and adds it as a learner through the admin. The
/// initial voters' logs are purged behind their last snapshot, so the
/// leader sends it one.
async fn join_learner(harness: &mut Harness) -> u64 {
    let learner = harness.cluster.add_node().expect("a new node");
    // Once the node answers, its spool directory holds only transfers to it
    // (a node empties it on start).
    harness.restart(learner).await;
    let addr = harness.cluster.addr(learner).expect("a placed node").to_string();
    let request = pb::AddLearnerRequest { request_id: String::new(), node_id: learner, addr, wait_caught_up: false };
    harness.admin.add_learner(request).await.expect("add the learner");
    learner
}

/// Kills while installing a snapshot. A fourth node joins as a learner
/// behind the purge point and its install is measured. Then a fifth joins
/// and is SIGKILLed a random part of that time after each transfer to it
/// begins, and restarted on what the kill left; when a kill came after the
/// install had finished, or after the received file was stored (the node
/// then restores it on restart), the next kills go to a new learner (a node's data
/// is never wiped: the leader would see its log go back). At the end every
/// learner has installed a snapshot, caught up, has the leader's state hash
/// and serves the old executions from its own store.
async fn kills_while_installing(harness: &mut Harness, rng: &mut Rng, old: &[String]) {
    let measured = join_learner(harness).await;
    let Install { whole, transfer, bytes: snapshot_bytes } = measure_install(harness, measured).await;
    let restore = whole.saturating_sub(transfer);
    println!(
        "snapshot_crash: node {measured} installed a {:.1} MiB snapshot in {whole:.2?}: transfer {transfer:.2?}, \
         restore into its store {restore:.2?}",
        snapshot_bytes as f64 / (1024.0 * 1024.0)
    );
    let (mut in_transfer, mut in_restore, mut report) = (0, 0, Vec::new());
    let mut learner = join_learner(harness).await;
    let mut learners = vec![measured, learner];
    // Odd rounds aim at the transfer, even ones at the restore.
    for round in 1..=KILLS {
        let data_dir = harness.data_dir(learner);
        let delay = if round % 2 == 1 { rng.within(transfer) } else { transfer + rng.within(restore) };
        poll_files(&format!("node {learner} to receive a snapshot"), || {
            Some(()).filter(|()| !incoming_files(&data_dir).is_empty())
        })
        .await;
        tokio::time::sleep(delay).await;
        harness.kill(learner);
        // The process is dead: a spool file shorter than the snapshot was
        // being received; otherwise, until the node logged the install, the
        // received file was being stored or restored into its store.
        let installed = harness.log_of_this_start(learner).contains("snapshot installed");
        let landed = match incoming_files(&data_dir).first() {
            Some((_, bytes)) if *bytes < snapshot_bytes => {
                in_transfer += 1;
                format!("in the transfer (spooled {bytes} of {snapshot_bytes} bytes)")
            }
            _ if !installed => {
                in_restore += 1;
                "in the install: storing the received file or restoring it into its store".to_string()
            }
            _ => "after the install had finished".to_string(),
        };
        let finished = landed.starts_with("after");
        harness.restart(learner).await;
        // Killed after the received file was stored: the node restores it
        // (or resumes from the checkpoint the restore finished) on its own,
        // and no new transfer comes.
        let start_log = harness.log_of_this_start(learner);
        let from_stored = start_log.contains("restored the application from the stored snapshot")
            || start_log.contains("resumed from its own checkpoint");
        let restarted = if from_stored { "; restarted from its stored snapshot" } else { "" };
        report.push(format!("node {learner} killed {delay:.0?} after a transfer began: {landed}{restarted}"));
        println!("snapshot_crash: {}", report.last().expect("just pushed"));
        if finished || from_stored {
            learner = join_learner(harness).await;
            learners.push(learner);
        }
    }
    for &id in &learners {
        let installed = gavel_testkit::eventually(WAIT, Duration::from_millis(50), || async {
            harness.cluster.status(id).await.filter(|status| status.snapshot_index.is_some())
        })
        .await;
        assert!(installed.is_some(), "node {id} installed a snapshot after its last restart");
    }
    let converged = harness.assert_recovered(learner, 0, old).await;
    for &id in &learners[..learners.len() - 1] {
        for execution_id in old {
            harness.assert_served_whole(id, execution_id).await;
        }
    }
    println!(
        "snapshot_crash: kills while installing ({in_transfer} in the transfer, {in_restore} in the restore, of \
         {KILLS}); learners {learners:?} converged at {}:\n  {}",
        converged.applied_index,
        report.join("\n  ")
    );
    assert!(in_transfer + in_restore >= 1, "at least one kill landed inside an install: {report:#?}");
}

async fn bounded<F: std::future::Future<Output = ()>>(body: F) {
    tokio::time::timeout(TEST_BOUND, body).await.expect("the test finishes within its bound");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nodes_sigkilled_while_applying_and_while_building_snapshots_come_back_to_the_leaders_state_hash() {
    let _serial = SERIAL.lock().await;
    bounded(async {
        let started = Instant::now();
        let mut rng = Rng::seeded("apply-and-build", 1);
        let harness = Harness::start().await;
        let old = harness.fill().await;
        let next = Arc::new(AtomicU64::new(0));
        kills_while_applying(&harness, &mut rng, &old, &next).await;
        kills_around_checkpoints(&harness, &mut rng, &old, &next).await;
        println!("snapshot_crash: apply-and-build took {:.1} s", started.elapsed().as_secs_f64());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_learner_sigkilled_while_installing_a_snapshot_installs_it_on_restart() {
    let _serial = SERIAL.lock().await;
    bounded(async {
        let started = Instant::now();
        let mut rng = Rng::seeded("install", 2);
        let mut harness = Harness::start().await;
        let old = harness.fill().await;
        kills_while_installing(&mut harness, &mut rng, &old).await;
        println!("snapshot_crash: install took {:.1} s", started.elapsed().as_secs_f64());
    })
    .await;
}
