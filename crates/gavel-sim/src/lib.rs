//! Deterministic simulation of a whole Gavel cluster: three nodes in one
//! process under turmoil, each the real thing — `gavel-server`'s gRPC edge,
//! `gavel-raft` with its write-ahead log, the core state machine and its
//! cold store — driven by the chaos workload's clients and workers, with
//! faults chosen by one seed. The same seed replays the same run: the same
//! history, the same applied logs, the same [`SimReport::trace_hash`].
//!
//! What is simulated, and how it is handed in (see `docs/testing.md`):
//! - **network**: every channel dials turmoil's TCP ([`net::dial`]); every
//!   node serves the connections turmoil accepts ([`net::incoming`]);
//!   partitions, held (delayed) messages and dropped links are turmoil's;
//! - **faults of clock and disk** ([`clock_disk`]): skew, clock jumps, slow
//!   and full disks;
//! - **disk**: each node's Raft log and vote are on a [`gavel_raft::SimDisk`]
//!   that survives the node's crash but loses its unsynced writes (a torn
//!   tail, after an armed power cut);
//! - **threads**: the log's writes, its fsyncs and every blocking step run
//!   inline ([`gavel_raft::RaftIo::simulated`]);
//! - **clock and randomness**: each node's clock is turmoil's simulated
//!   time plus that node's skew and jumps ([`clock_disk::NodeClock`],
//!   handed in as `InjectedIo::clock`), openraft's election timeouts come
//!   from a generator seeded per run ([`gavel_raft::seed_thread_rng`]), the
//!   workload's choices, request ids and retry jitter from the seed.
//!
//! Key items: [`SimConfig`], [`run_seed`], [`SimReport`], [`replay_command`],
//! [`runner::run_seeds`] (many seeds on several threads) and [`cli`]
//! (`gavel-lab sim`).
//!
//! **Dependency rule:** only tests and the CLI depend on this crate.

pub mod cli;
pub mod clock_disk;
pub mod cluster_faults;
pub mod faults;
pub mod finals;
pub mod net;
pub mod planted;
pub mod runner;

pub use gavel_core::mutants::Mutant;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant, UNIX_EPOCH};

use gavel_chaos::checker::{self, CheckOptions, CheckReport, Verdict};
use gavel_chaos::history::{Entry, Header};
use gavel_chaos::recorder::Recorder;
use gavel_chaos::rng::Rng;
use gavel_chaos::workload::{self, Workload, WorkloadConfig};
use gavel_server::node::{Node, ServerSettings};
use gavel_server::security::Security;
use gavel_server::server::{InjectedIo, NodeOptions, Serving};
use sha2::{Digest, Sha256};

use crate::faults::{Fault, Schedule};

/// The simulated wall clock starts here (2026-01-01T00:00:00Z), whatever
/// the machine's clock says.
const EPOCH_MS: u64 = 1_767_225_600_000;

/// Simulated seconds of workload in a seed unless told otherwise: what the
/// CI seeds and `gavel-lab sim` run (the workers' drain and the settling time
/// come after it, so a seed lasts about 74 simulated seconds).
pub const DEFAULT_WORKLOAD_SECONDS: u64 = 60;

/// How long the cluster gets after the last fault heals for every replica
/// to apply the whole log, before the trace is taken.
const SETTLE: Duration = Duration::from_secs(5);

/// How long workers keep draining after the clients stop.
const DRAIN: Duration = Duration::from_secs(8);

/// After settling, how long the cluster gets at most for every running
/// node to stand at one applied index before the final reads.
const CONVERGE: Duration = Duration::from_secs(10);

/// What one simulated run does besides its seed.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// How long the clients run, in simulated time (faults happen during it).
    pub workload_time: Duration,
    /// Approval clients, submitters and workers.
    pub approval_clients: usize,
    /// Execution submitters.
    pub submitters: usize,
    /// Workers.
    pub workers: usize,
    /// Whether the seed's faults are injected at all.
    pub faults: bool,
    /// How much simulated time one turmoil step advances every host: the
    /// network delivers between steps, so it is also the least latency.
    pub tick: Duration,
    /// The planted bug every node runs with (set only by the planted-bug
    /// test and its replays, see [`planted`]).
    pub planted_bug: Option<Mutant>,
    /// Faults scripted by a test in place of the seed's (the seed still
    /// draws everything else: latencies, elections, the workload).
    pub schedule: Option<Schedule>,
    /// Whether the nodes run Raft with pre-vote ([`gavel_raft::RaftTimings::pre_vote`],
    /// on in production); off only in a test that shows what it prevents.
    pub pre_vote: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            workload_time: Duration::from_secs(DEFAULT_WORKLOAD_SECONDS),
            approval_clients: 2,
            submitters: 2,
            workers: 2,
            faults: true,
            tick: Duration::from_millis(5),
            planted_bug: None,
            schedule: None,
            pre_vote: true,
        }
    }
}

/// Why a simulated run could not finish.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The simulation itself failed: a node's task returned an error or panicked.
    #[error("the simulation failed at {simulated_ms} simulated ms: {message}")]
    Simulation {
        /// When.
        simulated_ms: u64,
        /// turmoil's error.
        message: String,
    },
    /// A node's data directory could not be created.
    #[error("cannot create a node's data directory: {0}")]
    DataDir(#[source] std::io::Error),
    /// The workload did not finish in the simulated time it was given.
    #[error("the workload did not finish within {0:?} of simulated time")]
    Stuck(Duration),
}

/// One node at the end of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeEnd {
    /// Node id.
    pub id: u64,
    /// The last applied log index, if the node is running.
    pub last_applied_index: Option<u64>,
    /// The core state's hash at that index.
    pub state_hash: String,
    /// Whether the node votes in the membership of the most advanced
    /// running node (false for a learner or a node removed and not added back).
    pub voter: bool,
    /// Its Raft term (0 if it is not running); not part of the trace hash.
    pub term: u64,
    /// Whether it is the leader.
    pub leading: bool,
}

/// What a simulated run produced.
#[derive(Debug, Clone)]
pub struct SimReport {
    /// The seed.
    pub seed: u64,
    /// SHA-256 over the history, the faults and every node's applied
    /// position and state hash: equal for two runs of one seed.
    pub trace_hash: String,
    /// Simulated milliseconds the run took.
    pub simulated_ms: u64,
    /// Wall-clock milliseconds the run took.
    pub wall_ms: u64,
    /// The faults injected, in order, with their simulated time.
    pub faults: Vec<String>,
    /// Each node at the end.
    pub nodes: Vec<NodeEnd>,
    /// The chaos checkers' verdicts on the history.
    pub checks: CheckReport,
    /// Operations in the history.
    pub operations: usize,
    /// The history itself (the chaos harness's format).
    pub history: Vec<Entry>,
    /// Replicas at the same applied index whose states differ (a
    /// divergence), membership changes the admin gave up on, voters that
    /// did not catch up by the end, and votes a crash took back: each as a
    /// sentence.
    pub divergences: Vec<String>,
    /// Snapshots the nodes built and stored, over every node and restart.
    pub snapshots_built: u64,
    /// Snapshots the nodes received from a leader and installed.
    pub snapshots_installed: u64,
    /// Membership changes carried out (a removal, or an addition with its
    /// promotion, counts one).
    pub membership_changes: u64,
    /// Worker stalls the start of the drain cut short.
    pub stalls_cut_by_drain: u64,
}

impl SimReport {
    /// Whether the run broke a rule: a checker found the history invalid or
    /// two replicas diverged.
    pub fn failed(&self) -> bool {
        self.checks.verdict == Verdict::Invalid || !self.divergences.is_empty()
    }

    /// The failures, one sentence each.
    pub fn failures(&self) -> Vec<String> {
        let mut failures = self.divergences.clone();
        for result in &self.checks.results {
            if result.verdict == Verdict::Invalid {
                failures.push(format!("{}: {}", result.name, result.details.join("; ")));
            }
        }
        failures
    }
}

/// The command that replays `seed` (with the default workload length), and
/// the same through cargo.
pub fn replay_command(seed: u64) -> String {
    format!(
        "gavel-lab sim --seed {seed}   (or: GAVEL_SIM_SEED={seed} cargo test -p gavel-sim --test seeds -- replay_one_seed --nocapture)"
    )
}

/// The simulated milliseconds since the run started, as the history's clock.
fn simulated_ms() -> f64 {
    turmoil::sim_elapsed().map_or(0.0, |elapsed| elapsed.as_secs_f64() * 1000.0)
}

/// The nodes' wall clock: the simulated epoch plus simulated time (the real
/// clock when no simulation runs on this thread).
pub(crate) fn simulated_wall_clock_ms() -> u64 {
    match turmoil::sim_elapsed() {
        Some(elapsed) => EPOCH_MS + elapsed.as_millis() as u64,
        None => std::time::SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |elapsed| elapsed.as_millis() as u64),
    }
}

thread_local! {
    /// The random numbers of the simulation running on this thread.
    static RANDOM: RefCell<Option<Rng>> = const { RefCell::new(None) };
}

/// The nodes' random numbers ([`gavel_server::node::set_random`]): from the
/// seed of the simulation running on this thread, else from the OS.
fn simulated_random() -> u128 {
    RANDOM.with(|random| {
        let mut random = random.borrow_mut();
        let rng = random.get_or_insert_with(|| {
            use std::hash::{BuildHasher, Hasher};
            Rng::new(std::collections::hash_map::RandomState::new().build_hasher().finish())
        });
        (u128::from(rng.next_u64()) << 64) | u128::from(rng.next_u64())
    })
}

/// Every host of the simulation: the nodes, the workload's client and the
/// admin who changes the membership.
const HOSTS: [&str; 5] = ["n1", "n2", "n3", "workload", ADMIN_HOST];

/// The host that carries out membership changes ([`cluster_faults`]).
const ADMIN_HOST: &str = "admin";

/// Snapshot policy of the simulated nodes: small, so that a seed's run
/// builds several snapshots, purges its log behind them, and a node that
/// was away for a few seconds catches up by a snapshot install (the
/// workload appends roughly 10 to 20 entries a simulated second: the leader
/// batches the commands that arrive together into one entry).
const SNAPSHOT_LOGS_SINCE_LAST: u64 = 20;
/// Build a snapshot after this many commands too (an entry holds up to 512).
const SNAPSHOT_COMMANDS_SINCE_LAST: u64 = 100;
/// How long a node stays down after a power cut, unless its cut says.
const POWER_CUT_DOWN: Duration = Duration::from_millis(800);
/// Cold writes a node holds in memory before it writes them into its cold
/// store between snapshots (not durably): a few times between two builds,
/// so that kills land on a store past its checkpoint.
const CHECKPOINT_COLD_WRITES: usize = 30;
/// Entries kept behind a snapshot: a follower a moment behind still
/// catches up from the log; one away for a few seconds needs the snapshot.
const LOGS_TO_KEEP: u64 = 10;

fn host_name(id: u64) -> String {
    format!("n{id}")
}

/// Raft timings for the simulation: the production defaults, with the
/// small snapshot policy above. A snapshot build is a checkpoint into the
/// node's cold store (redb, a real file in its temporary data directory);
/// a snapshot sent to a follower is written to a real file and streamed
/// over the simulated network; every step runs inline on the simulation's
/// thread ([`gavel_raft::RaftIo::simulated`]), see docs/testing.md.
fn timings(pre_vote: bool) -> gavel_raft::RaftTimings {
    gavel_raft::RaftTimings {
        snapshot_logs_since_last: SNAPSHOT_LOGS_SINCE_LAST,
        snapshot_commands_since_last: SNAPSHOT_COMMANDS_SINCE_LAST,
        logs_to_keep: LOGS_TO_KEEP,
        pre_vote,
        ..gavel_raft::RaftTimings::default()
    }
}

/// Per node: the simulated disk (kept across crashes), the data directory
/// (sled, the cold store), its snapshot counts, and the running node, if any.
struct SimNode {
    id: u64,
    disk: gavel_raft::SimDisk,
    snapshots: gavel_raft::SnapshotCounts,
    data_dir: PathBuf,
    running: Rc<RefCell<Weak<Node>>>,
    /// The node's clock offset (kept across restarts).
    clock: clock_disk::NodeClock,
    /// Whether its disk is full now (a restart waits for space).
    disk_full: std::cell::Cell<bool>,
    /// Votes a crash took back, each as a sentence ([`crash_node`]).
    lost_votes: RefCell<Vec<String>>,
    /// How long it stays down after its next power cut.
    down_after_cut: std::cell::Cell<Duration>,
}

impl SimNode {
    /// Node `id`, with an empty disk and its data directory under `scratch`.
    fn new(id: u64, scratch: &std::path::Path) -> Result<SimNode, SimError> {
        let data_dir = scratch.join(host_name(id));
        std::fs::create_dir_all(&data_dir).map_err(SimError::DataDir)?;
        Ok(SimNode {
            id,
            disk: gavel_raft::SimDisk::new(),
            snapshots: gavel_raft::SnapshotCounts::default(),
            data_dir,
            running: Rc::default(),
            clock: clock_disk::NodeClock::default(),
            disk_full: std::cell::Cell::new(false),
            lost_votes: RefCell::default(),
            down_after_cut: std::cell::Cell::new(POWER_CUT_DOWN),
        })
    }
}

/// Adds `node`'s host to `sim`: a real node (gRPC edge, Raft, WAL, core,
/// cold store) on the node's simulated disk, clock and network, started
/// again from its disk each time the simulator restarts the host.
fn add_node_host(
    sim: &mut turmoil::Sim<'_>,
    node: &SimNode,
    peers: &BTreeMap<u64, String>,
    planted_bug: Option<Mutant>,
    pre_vote: bool,
) {
    let id = node.id;
    let (disk, snapshots, data_dir, running, peers, clock) = (
        node.disk.clone(),
        node.snapshots.clone(),
        node.data_dir.clone(),
        node.running.clone(),
        peers.clone(),
        node.clock.clone(),
    );
    sim.host(host_name(id), move || {
        let (disk, snapshots, data_dir, running, peers) =
            (disk.clone(), snapshots.clone(), data_dir.clone(), running.clone(), peers.clone());
        let clock = clock.clock();
        async move {
            let listener = turmoil::net::TcpListener::bind(("0.0.0.0", net::NODE_PORT)).await?;
            let addr = listener.local_addr()?;
            let options = NodeOptions {
                id,
                advertise: format!("{}:{}", host_name(id), net::NODE_PORT),
                peers,
                data_dir,
                timings: timings(pre_vote),
                bootstrap: id == 1,
                settings: ServerSettings {
                    audit_checkpoints: false,
                    planted_bug,
                    checkpoint_cold_writes: CHECKPOINT_COLD_WRITES,
                    ..ServerSettings::default()
                },
                security: Security::insecure(),
            };
            let io = InjectedIo {
                addr,
                incoming: net::incoming(listener),
                raft: gavel_raft::RaftIo::simulated(net::dial(), disk).counting_snapshots(snapshots),
                dial: net::dial(),
                clock,
            };
            let node = gavel_server::server::start_serving(options, Serving::Injected(io)).await?;
            *running.borrow_mut() = Arc::downgrade(&node.node);
            // Serves until the simulator crashes this host.
            std::future::pending::<()>().await;
            Ok(())
        }
    });
}

/// Runs one seed: builds the cluster and the workload, injects the seed's
/// faults, heals, settles, checks the history and hashes the trace.
pub fn run_seed(seed: u64, config: &SimConfig) -> Result<SimReport, SimError> {
    gavel_server::node::set_random(simulated_random);
    RANDOM.with(|random| *random.borrow_mut() = Some(Rng::new(seed).fork(0x5eed)));
    gavel_raft::seed_thread_rng(seed);
    let started = Instant::now();
    let scratch = tempfile::Builder::new().prefix("gavel-sim-").tempdir().map_err(SimError::DataDir)?;
    let ids = [1u64, 2, 3];
    let peers: BTreeMap<u64, String> =
        ids.iter().map(|id| (*id, format!("{}:{}", host_name(*id), net::NODE_PORT))).collect();
    let schedule = match &config.schedule {
        Some(scripted) => scripted.clone(),
        None => Schedule::from_seed(seed, config.workload_time, &ids, config.faults),
    };

    let mut sim = turmoil::Builder::new()
        .simulation_duration(Duration::from_secs(24 * 3600))
        .tick_duration(config.tick)
        .epoch(UNIX_EPOCH + Duration::from_millis(EPOCH_MS))
        .min_message_latency(config.tick)
        .max_message_latency(config.tick.max(Duration::from_millis(schedule.max_latency_ms)))
        .rng_seed(seed)
        .build();

    let mut nodes = Vec::new();
    for id in ids {
        let node = SimNode::new(id, scratch.path())?;
        add_node_host(&mut sim, &node, &peers, config.planted_bug, config.pre_vote);
        nodes.push(node);
    }

    let recorder = Arc::new(Recorder::in_memory(simulated_ms));
    let node_addrs: Vec<(u64, String)> = peers.iter().map(|(id, addr)| (*id, addr.clone())).collect();
    recorder.write(&Entry::Header(Header {
        seed,
        namespaces: true,
        faults: Vec::new(),
        capabilities: workload::capabilities().into_iter().map(|(_, info)| info).collect(),
        nodes: ids.to_vec(),
        policy: None,
        standing: Vec::new(),
    }));
    let finished = Rc::new(RefCell::new(false));
    // The workload's stall switch, set by the worker-stall fault.
    let stall = Rc::new(RefCell::new(None::<Arc<std::sync::atomic::AtomicBool>>));
    // What the workload touched, for the final reads.
    let touched = Rc::new(RefCell::new(finals::Touched::default()));
    let stalls_cut_by_drain = Rc::new(std::cell::Cell::new(0u64));
    {
        let touched = touched.clone();
        let stalls_cut_by_drain = stalls_cut_by_drain.clone();
        let (recorder, finished, config) = (recorder.clone(), finished.clone(), config.clone());
        let stall = stall.clone();
        let workload_config = WorkloadConfig {
            seed,
            approval_clients: config.approval_clients,
            submitters: config.submitters,
            workers: config.workers,
            // Policies and standing approvals need authenticated voters;
            // the simulated cluster runs without TLS.
            quorum_clients: 0,
            standing_clients: 0,
        };
        sim.client("workload", async move {
            let clock_ms = clock_disk::workload_clock_ms;
            let workload =
                Arc::new(Workload::new_simulated(recorder, node_addrs, workload_config, net::dial(), clock_ms)?);
            workload.register(None).await?;
            *stall.borrow_mut() = Some(workload.stall.clone());
            let (clients, workers) = workload.spawn_actors(&[]);
            tokio::time::sleep(config.workload_time).await;
            workload.stop_clients.cancel();
            workload.draining.store(true, std::sync::atomic::Ordering::Relaxed);
            for client in clients {
                let _ = client.await;
            }
            tokio::time::sleep(DRAIN).await;
            workload.stop_workers.cancel();
            for worker in workers {
                let _ = worker.await;
            }
            stalls_cut_by_drain.set(workload.stalls_cut_by_drain.load(std::sync::atomic::Ordering::Relaxed));
            *touched.borrow_mut() = finals::Touched {
                approvals: workload.approvals.lock().map(|ids| ids.clone()).unwrap_or_default(),
                executions: workload.executions.lock().map(|ids| ids.clone()).unwrap_or_default(),
            };
            *finished.borrow_mut() = true;
            Ok(())
        });
    }

    let admin = cluster_faults::Admin::default();
    admin.start(&mut sim, ADMIN_HOST, peers.values().cloned().collect(), seed);
    let (mut membership_changes, mut stuck_changes) = (0u64, Vec::new());
    let mut record_admin = |faults_log: &mut Vec<String>, now: Duration| {
        for outcome in admin.take_outcomes() {
            if outcome.gave_up {
                stuck_changes.push(format!("a membership change got stuck: {}", outcome.line));
            } else {
                membership_changes += 1;
            }
            faults_log.push(format!("{} ms: {}", now.as_millis(), outcome.line));
        }
    };

    let mut faults_log = Vec::new();
    let mut pending = schedule.events.clone();
    pending.reverse();
    let deadline = config.workload_time + DRAIN + Duration::from_secs(120);
    let mut crashed: Vec<(u64, Duration)> = Vec::new();
    let mut links = Links::default();
    let mut hashes = AppliedHashes::default();
    loop {
        let now = sim.elapsed();
        while pending.last().is_some_and(|event| event.at <= now) {
            let event = pending.pop().expect("checked above");
            if let Fault::WorkerStall { stall: on } = event.fault {
                if let Some(switch) = stall.borrow().as_ref() {
                    switch.store(on, std::sync::atomic::Ordering::Relaxed);
                }
            }
            let note = if admin.queue(&event.fault) {
                None
            } else {
                apply_fault(&mut sim, &nodes, &event.fault, now, &mut crashed, &mut links)
            };
            tracing::info!(simulated_ms = now.as_millis() as u64, "{}", event.fault);
            faults_log.push(format!("{} ms: {}", now.as_millis(), event.fault));
            if let Some(note) = note {
                tracing::info!(simulated_ms = now.as_millis() as u64, "{note}");
                faults_log.push(format!("{} ms: {note}", now.as_millis()));
            }
        }
        // A node whose armed power cut has happened (or whose cut never came
        // within its window) is crashed now and restarted after its downtime.
        for node in &nodes {
            if node.disk.power_is_cut() && !crashed.iter().any(|(id, _)| *id == node.id) {
                let down = node.down_after_cut.replace(POWER_CUT_DOWN);
                let dropped = crash_node(&mut sim, node, now, (seed, down), &mut crashed, &links);
                let what = format!("power cut on n{}: crashed, {dropped} unsynced log writes dropped", node.id);
                tracing::info!(simulated_ms = now.as_millis() as u64, "{what}");
                faults_log.push(format!("{} ms: {what}", now.as_millis()));
            }
        }
        let mut restarted = Vec::new();
        for (id, until) in &crashed {
            let disk_full = nodes.iter().any(|node| node.id == *id && node.disk_full.get());
            if *until <= now && !disk_full {
                sim.bounce(host_name(*id));
                restarted.push(*id);
                tracing::info!(simulated_ms = now.as_millis() as u64, "n{id} restarted");
                faults_log.push(format!("{} ms: n{id} restarted", now.as_millis()));
            }
        }
        crashed.retain(|(id, _)| !restarted.contains(id));
        record_admin(&mut faults_log, now);
        hashes.sample(&nodes);
        match sim.step() {
            Ok(_) => {}
            Err(error) => {
                return Err(SimError::Simulation { simulated_ms: now.as_millis() as u64, message: error.to_string() })
            }
        }
        if *finished.borrow() && pending.is_empty() && crashed.is_empty() && admin.idle() {
            break;
        }
        if now > deadline {
            return Err(SimError::Stuck(deadline));
        }
    }
    // A power cut armed late and not yet hit would stop a node while the
    // cluster settles, with no restart to follow.
    for node in &nodes {
        node.disk.disarm_power_cut();
    }
    heal(&sim, &ids);
    let settle_until = sim.elapsed() + SETTLE;
    while sim.elapsed() < settle_until {
        hashes.sample(&nodes);
        sim.step().map_err(|error| SimError::Simulation {
            simulated_ms: sim.elapsed().as_millis() as u64,
            message: error.to_string(),
        })?;
    }
    // The final reads want every running node at one applied index.
    let converge_until = sim.elapsed() + CONVERGE;
    while sim.elapsed() < converge_until && !converged(&nodes) {
        hashes.sample(&nodes);
        sim.step().map_err(|error| SimError::Simulation {
            simulated_ms: sim.elapsed().as_millis() as u64,
            message: error.to_string(),
        })?;
    }
    for node in &nodes {
        let running = node.running.borrow().upgrade();
        recorder.write(&Entry::Final(finals::final_state(node.id, running.as_deref(), &touched.borrow())));
    }

    // What the admin finished in the last steps.
    record_admin(&mut faults_log, sim.elapsed());
    let ends = node_ends(&nodes);
    let mut divergences = stuck_changes;
    divergences.extend(lagging_voters(&ends));
    for node in &nodes {
        divergences.append(&mut node.lost_votes.borrow_mut());
    }
    hashes.sample(&nodes);
    divergences.extend(hashes.divergences());
    for (i, a) in ends.iter().enumerate() {
        for b in &ends[i + 1..] {
            if a.last_applied_index.is_some()
                && a.last_applied_index == b.last_applied_index
                && a.state_hash != b.state_hash
            {
                divergences.push(format!(
                    "n{} and n{} applied up to index {:?} but their states differ",
                    a.id, b.id, a.last_applied_index
                ));
            }
        }
    }
    let history = recorder.entries();
    let checks = check(&history);
    let trace_hash = trace_hash(&history, &faults_log, &ends);
    let operations = history.iter().filter(|entry| matches!(entry, Entry::Invoke(_))).count();
    let simulated_ms = sim.elapsed().as_millis() as u64;
    let snapshots_built = nodes.iter().map(|node| node.snapshots.built()).sum();
    let snapshots_installed = nodes.iter().map(|node| node.snapshots.installed()).sum();
    drop(sim);
    gavel_raft::unseed_thread_rng();
    RANDOM.with(|random| *random.borrow_mut() = None);
    Ok(SimReport {
        seed,
        trace_hash,
        simulated_ms,
        wall_ms: started.elapsed().as_millis() as u64,
        faults: faults_log,
        nodes: ends,
        checks,
        operations,
        divergences,
        history,
        snapshots_built,
        snapshots_installed,
        membership_changes,
        stalls_cut_by_drain: stalls_cut_by_drain.get(),
    })
}

/// Each node at the end: its applied position and state hash, and whether
/// it votes in the membership of the most advanced running node.
fn node_ends(nodes: &[SimNode]) -> Vec<NodeEnd> {
    let statuses: Vec<Option<(gavel_raft::RaftStatus, String)>> = nodes
        .iter()
        .map(|node| node.running.borrow().upgrade().map(|running| (running.raft.status(), running.reads.state_hash())))
        .collect();
    let most_advanced = statuses.iter().flatten().max_by_key(|(status, _)| status.last_applied_index);
    let voters: Vec<u64> = most_advanced
        .map(|(status, _)| status.members.iter().filter(|member| member.voter).map(|member| member.node_id).collect())
        .unwrap_or_default();
    nodes
        .iter()
        .zip(statuses)
        .map(|(node, status)| match status {
            Some((status, state_hash)) => NodeEnd {
                id: node.id,
                last_applied_index: status.last_applied_index,
                state_hash,
                voter: voters.contains(&node.id),
                term: status.term,
                leading: status.role == gavel_raft::Role::Leader,
            },
            None => NodeEnd {
                id: node.id,
                last_applied_index: None,
                state_hash: String::new(),
                voter: false,
                term: 0,
                leading: false,
            },
        })
        .collect()
}

/// Voters that had not applied the whole log by the end (the cluster had
/// settled for [`SETTLE`] with every fault healed): each as a sentence.
/// A node that is no voter is not expected to keep up.
fn lagging_voters(ends: &[NodeEnd]) -> Vec<String> {
    let newest = ends.iter().filter_map(|end| end.last_applied_index).max();
    ends.iter()
        .filter(|end| end.voter && end.last_applied_index < newest)
        .map(|end| {
            format!(
                "voter n{} applied up to index {:?} only, after the cluster settled at {newest:?}",
                end.id, end.last_applied_index
            )
        })
        .collect()
}

/// The partitions and holds in force between nodes, which a crash must
/// leave in force (it cuts and repairs the crashed host's links).
#[derive(Default)]
struct Links {
    partitioned: std::collections::BTreeSet<(u64, u64)>,
    held: std::collections::BTreeSet<(u64, u64)>,
}

fn pair(a: u64, b: u64) -> (u64, u64) {
    (a.min(b), a.max(b))
}

fn apply_fault(
    sim: &mut turmoil::Sim<'_>,
    nodes: &[SimNode],
    fault: &Fault,
    now: Duration,
    crashed: &mut Vec<(u64, Duration)>,
    links: &mut Links,
) -> Option<String> {
    let mut note = None;
    match fault {
        Fault::Partition { node, others } => {
            for other in others {
                sim.partition(host_name(*node), host_name(*other));
                links.partitioned.insert(pair(*node, *other));
            }
        }
        Fault::Hold { a, b } => {
            sim.hold(host_name(*a), host_name(*b));
            links.held.insert(pair(*a, *b));
        }
        Fault::Release { a, b } => {
            sim.release(host_name(*a), host_name(*b));
            links.held.remove(&pair(*a, *b));
        }
        Fault::LinkLoss { a, b, percent } => {
            sim.set_link_fail_rate(host_name(*a), host_name(*b), f64::from(*percent) / 100.0);
        }
        Fault::Repair { node, others } => {
            for other in others {
                sim.repair(host_name(*node), host_name(*other));
                sim.set_link_fail_rate(host_name(*node), host_name(*other), 0.0);
                links.partitioned.remove(&pair(*node, *other));
            }
        }
        Fault::PowerCut { node, after_operations } => {
            if let Some(target) = nodes.iter().find(|candidate| candidate.id == *node) {
                if !crashed.iter().any(|(id, _)| id == node) {
                    target.disk.cut_power_after(*after_operations);
                }
            }
        }
        Fault::PowerCutAt { node, point, nth, down } => {
            let leading = |candidate: &&SimNode| {
                candidate
                    .running
                    .borrow()
                    .upgrade()
                    .is_some_and(|running| running.raft.status().role == gavel_raft::Role::Leader)
            };
            let target = match *node {
                faults::LEADER => nodes.iter().find(leading),
                node => nodes.iter().find(|candidate| candidate.id == node),
            };
            if let Some(target) = target {
                let node = &target.id;
                if !crashed.iter().any(|(id, _)| id == node) {
                    target.disk.cut_power_at(*point, *nth);
                    target.down_after_cut.set(*down);
                }
            }
        }
        Fault::Crash { node, torn, down } => {
            if let Some(target) = nodes.iter().find(|candidate| candidate.id == *node) {
                crash_node(sim, target, now, (*torn, *down), crashed, links);
            }
        }
        // The workload's switch, flipped by the caller; the admin host's
        // membership changes, queued by the caller.
        Fault::WorkerStall { .. } | Fault::RemoveVoter { .. } | Fault::AddVoter { .. } => {}
        Fault::ClockSkew { node, .. } | Fault::ClockJump { node, .. } | Fault::SlowDisk { node, .. } => {
            if let Some(target) = nodes.iter().find(|candidate| candidate.id == *node) {
                clock_disk::apply(target, fault);
            }
        }
        Fault::FullDisk { node, full } => {
            if let Some(target) = nodes.iter().find(|candidate| candidate.id == *node) {
                target.disk_full.set(*full);
                target.disk.set_full(*full);
                // A node that met the full disk stopped (openraft stops on a
                // storage error): with space back, it restarts.
                let refused = if *full { 0 } else { target.disk.take_refused_full() };
                if refused > 0 {
                    let dropped = crash_node(sim, target, now, (0, clock_disk::FULL_DISK_RESTART), crashed, links);
                    note = Some(format!(
                        "n{node} met the full disk ({refused} writes refused): stopped, restarted from its disk \
                         ({dropped} unsynced log writes dropped)"
                    ));
                }
            }
        }
    }
    note
}

/// Crashes `node`'s host, then its disk (losing unsynced writes but a torn
/// prefix chosen by `torn`); it restarts after `down`. Returns how many
/// unsynced writes the disk dropped, whole or in part.
///
/// It also follows the node's vote across the crash, a state check of the
/// replica rather than of the history: the vote the node had saved and
/// acted on (granted, or followed a leader by) must still be on its disk,
/// or a newer one. A vote taken back lets the node vote twice in one term,
/// which no client may ever see happen; it goes to `lost_votes`.
fn crash_node(
    sim: &mut turmoil::Sim<'_>,
    node: &SimNode,
    now: Duration,
    (torn, down): (u64, Duration),
    crashed: &mut Vec<(u64, Duration)>,
    links: &Links,
) -> usize {
    if crashed.iter().any(|(id, _)| *id == node.id) {
        return 0;
    }
    // A host that loses power sends nothing more. Cut its links while its
    // tasks are dropped: tokio drops them in an order set by process-wide
    // task ids, and each dropped connection would send a FIN that draws
    // its latency from the seeded network generator, so the drop order
    // would leak into the run. Dropped at a cut link, the segments draw
    // nothing. (What the host had in flight is lost with them.)
    let host = host_name(node.id);
    let others: Vec<String> = HOSTS.iter().filter(|other| **other != host).map(|other| other.to_string()).collect();
    for other in &others {
        sim.partition(host.as_str(), other.as_str());
    }
    let saved_vote = node.running.borrow().upgrade().map(|running| running.raft.saved_vote());
    let killed = KilledColdStore::keep(&node.data_dir);
    sim.crash(host.as_str());
    killed.put_back();
    for other in &others {
        sim.repair(host.as_str(), other.as_str());
    }
    // What the schedule cut or held stays so.
    for (a, b) in links.partitioned.iter().filter(|(a, b)| *a == node.id || *b == node.id) {
        sim.partition(host_name(*a), host_name(*b));
    }
    for (a, b) in links.held.iter().filter(|(a, b)| *a == node.id || *b == node.id) {
        sim.hold(host_name(*a), host_name(*b));
    }
    let dropped = node.disk.crash(torn);
    if let Some(saved) = saved_vote {
        let lost = match node.disk.saved_vote(&node.data_dir) {
            Ok(Some(on_disk)) if on_disk >= saved => None,
            Ok(Some(on_disk)) => Some(format!("its disk holds the older vote {on_disk}")),
            Ok(None) => Some("its disk holds no vote".to_string()),
            Err(error) => Some(format!("its vote file does not read back: {error}")),
        };
        if let Some(lost) = lost {
            node.lost_votes.borrow_mut().push(format!(
                "n{} lost its vote in a crash at {} ms: it had saved {saved}, and {lost}",
                node.id,
                now.as_millis()
            ));
        }
    }
    crashed.push((node.id, now + down));
    dropped
}

/// A node's cold store (`cold.redb`) as a SIGKILL leaves it: the file's
/// bytes at the instant of the crash, before the crashed host's tasks are
/// dropped. Dropping them closes the store cleanly (the state machine
/// writes a durable checkpoint at its last applied entry, and redb makes
/// its last commit durable), which no kill or power cut does; the copy
/// taken here is put back over what the drop wrote. redb's header on disk
/// then names its last durable commit, and the non-durable commits after
/// it (written to the file, never named by the header) are rolled back
/// when the node opens the store again, as after a real kill.
struct KilledColdStore {
    path: PathBuf,
    kept: Option<PathBuf>,
}

impl KilledColdStore {
    fn keep(data_dir: &std::path::Path) -> KilledColdStore {
        let path = data_dir.join(gavel_store::app::COLD_STORE_FILE);
        let kept = data_dir.join("cold.redb.killed");
        let kept = std::fs::copy(&path, &kept).ok().map(|_| kept);
        KilledColdStore { path, kept }
    }

    fn put_back(self) {
        if let Some(kept) = self.kept {
            std::fs::rename(&kept, &self.path).expect("the killed cold store is put back in place");
        }
    }
}

/// Every how many applied indexes a replica's state is hashed while a seed
/// runs. Hashing serializes the whole hot state: at every index it was 18%
/// of a seed's CPU (perf, `gavel-lab sim --seed 5`). A divergence is not
/// repaired by later entries (the two states differ at every later index
/// too), so a sample of indexes finds it as surely, a few entries later;
/// the end of the seed compares every replica again.
const HASH_EVERY_INDEXES: u64 = 4;

/// Every replica's state hash at the applied indexes it was seen at (those
/// that are a multiple of [`HASH_EVERY_INDEXES`]): two replicas at one
/// applied index must have one state (SPEC's replicated state machine),
/// whenever that was, so every pair is compared at every sampled index both
/// were seen at, not only at the end.
#[derive(Default)]
struct AppliedHashes {
    /// Per node, applied index -> state hash.
    seen: BTreeMap<u64, BTreeMap<u64, String>>,
}

impl AppliedHashes {
    /// Records each running node's state hash at its applied index, when
    /// the Raft layer and the application agree on that index (after a
    /// restart the application knows its index only from its next apply).
    fn sample(&mut self, nodes: &[SimNode]) {
        for node in nodes {
            let Some(running) = node.running.borrow().upgrade() else { continue };
            let applied = running.reads.applied_index();
            if applied == 0
                || applied % HASH_EVERY_INDEXES != 0
                || running.raft.status().last_applied_index != Some(applied)
            {
                continue;
            }
            self.seen.entry(node.id).or_default().entry(applied).or_insert_with(|| running.reads.state_hash());
        }
    }

    /// The first index at which each pair of replicas was seen with
    /// different states, as sentences.
    fn divergences(&self) -> Vec<String> {
        let mut found = Vec::new();
        let ids: Vec<&u64> = self.seen.keys().collect();
        for (i, a) in ids.iter().enumerate() {
            for b in &ids[i + 1..] {
                let (mine, theirs) = (&self.seen[*a], &self.seen[*b]);
                let first = mine.iter().find(|(index, hash)| theirs.get(*index).is_some_and(|other| other != *hash));
                if let Some((index, hash)) = first {
                    found.push(format!(
                        "n{a} and n{b} both applied up to index {index} with different states ({} and {})",
                        &hash[..12.min(hash.len())],
                        &theirs[index][..12.min(theirs[index].len())]
                    ));
                }
            }
        }
        found
    }
}

/// Whether every running node stands at one applied index.
fn converged(nodes: &[SimNode]) -> bool {
    let applied: std::collections::BTreeSet<Option<u64>> = nodes
        .iter()
        .filter_map(|node| node.running.borrow().upgrade().map(|running| running.raft.status().last_applied_index))
        .collect();
    applied.len() <= 1
}

/// Repairs every link between nodes.
fn heal(sim: &turmoil::Sim<'_>, ids: &[u64]) {
    for a in ids {
        for b in ids {
            if a < b {
                sim.repair(host_name(*a), host_name(*b));
                sim.release(host_name(*a), host_name(*b));
            }
        }
    }
}

/// The chaos checkers that judge a history with the simulation's final
/// reads ([`finals`]) but without the process harness's fault counts and
/// audit trail (coverage and audit proofs need those).
fn check(history: &[Entry]) -> CheckReport {
    let options = CheckOptions::default();
    CheckReport::from_results(vec![
        checker::linearizable_approvals(history, &options),
        checker::at_most_one_consumption(history, &options),
        checker::one_final_result(history, &options),
        checker::fencing(history, &options),
        checker::retry_discipline(history, &options),
        checker::no_lost_writes(history, &options),
        checker::liveness(history, &options),
    ])
}

/// SHA-256 over the history (as JSON lines), the faults and every node's end.
fn trace_hash(history: &[Entry], faults: &[String], nodes: &[NodeEnd]) -> String {
    let mut hasher = Sha256::new();
    for entry in history {
        hasher.update(serde_json::to_vec(entry).unwrap_or_default());
        hasher.update(b"\n");
    }
    for fault in faults {
        hasher.update(fault.as_bytes());
        hasher.update(b"\n");
    }
    for node in nodes {
        hasher.update(
            format!("{} {:?} {} {}\n", node.id, node.last_applied_index, node.state_hash, node.voter).as_bytes(),
        );
    }
    hex::encode(hasher.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A simulated node dates its responses by its own clock (the
    /// simulated wall clock plus its skew), not by the machine's: hyper's
    /// `date` header from the OS clock made the bytes a node sent differ
    /// from run to run (docs/decisions.md, "Peer keepalive 2 s + 3 s, and
    /// a simulated node's date header").
    #[test]
    fn a_simulated_node_dates_its_responses_by_its_own_clock() {
        /// Far from both the simulated epoch and the machine's date.
        const SKEW_MS: i64 = 400 * 24 * 3600 * 1000;
        let scratch = tempfile::tempdir().expect("a scratch directory");
        let mut sim = turmoil::Builder::new()
            .simulation_duration(Duration::from_secs(60))
            .epoch(UNIX_EPOCH + Duration::from_millis(EPOCH_MS))
            .build();
        let node = SimNode::new(1, scratch.path()).expect("a node");
        node.clock.set(SKEW_MS);
        let peers = BTreeMap::from([(1, format!("n1:{}", net::NODE_PORT))]);
        add_node_host(&mut sim, &node, &peers, None, true);
        sim.client("probe", async move {
            let endpoint = tonic::transport::Endpoint::from_shared(format!("http://n1:{}", net::NODE_PORT))?;
            let mut health = tonic_health::pb::health_client::HealthClient::new(net::dial()(endpoint));
            let mut tries = 0;
            let response = loop {
                // The host may not listen yet.
                match health.check(tonic_health::pb::HealthCheckRequest::default()).await {
                    Ok(response) => break response,
                    Err(error) if tries < 50 => {
                        tries += 1;
                        tracing::debug!("not serving yet: {error}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    Err(error) => return Err(error.into()),
                }
            };
            let node_ms = simulated_wall_clock_ms().saturating_add_signed(SKEW_MS);
            let date = response.metadata().get("date").expect("a date header").to_str()?.to_string();
            let dated_ms = httpdate::parse_http_date(&date)?.duration_since(UNIX_EPOCH)?.as_millis() as u64;
            // The header has whole seconds, stamped a tick or two earlier.
            assert!(
                dated_ms <= node_ms && node_ms - dated_ms < 2_000,
                "dated {date} ({dated_ms} ms), the node's clock read {node_ms} ms"
            );
            Ok(())
        });
        sim.run().expect("the probe got a dated response");
    }
}
