//! Seeds of the whole-cluster simulation: a sample of seeds judged by the
//! chaos checkers, a few of them run twice to prove a seed replays exactly,
//! and the replay of one seed named in the environment.
//!
//! A failing seed is printed with the one command that replays it
//! ([`gavel_sim::replay_command`]).

use std::time::Duration;

use gavel_sim::runner::{run_seeds, summary};
use gavel_sim::{replay_command, run_seed, SimConfig, SimReport};

/// Seeds the CI run judges (override with `GAVEL_SIM_SEEDS`).
const CI_SEEDS: u64 = 200;

/// Seeds the simulation failed on that are open bugs, not yet fixed: left
/// out of the sample, which takes the next seeds instead, and named in every
/// run's output with their replay command; fixing one means deleting its
/// line (docs/testing.md). None is open. Fixed since: seed 41 gave two
/// traces (a node's peer connections closed in a `HashMap`'s order,
/// gavel-raft's network), seed 141's log was refused on reopen after a
/// purge deleted its first segment (WAL recovery), and seed 182 stalled
/// replication for 15 s on a peer connection that lost segments in a
/// partition, until the keepalive reset it (now 2 s + 3 s).
const OPEN_FINDINGS: [(u64, &str); 0] = [];

/// Every how many CI seeds one runs twice and must give the same trace
/// hash (the determinism sample: 10 of the 200).
#[cfg(tokio_unstable)]
const CI_RERUN_EVERY: usize = 20;
/// Without `--cfg tokio_unstable` a second run may differ (docs/testing.md).
#[cfg(not(tokio_unstable))]
const CI_RERUN_EVERY: usize = 0;

/// Seeds run twice by the determinism test: seed 1 crashes a node and cuts
/// another's power (dropping an unsynced log write), seed 4 partitions a
/// node and cuts its power; both restart the nodes they crash.
#[cfg(tokio_unstable)]
const TWICE: [u64; 2] = [1, 4];

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|value| value.parse().ok())
}

/// The CI seeds' configuration: [`SimConfig::default`] (60 simulated
/// seconds of workload), changed by `GAVEL_SIM_SECONDS` and friends.
fn config() -> SimConfig {
    let defaults = SimConfig::default();
    SimConfig {
        workload_time: env_u64("GAVEL_SIM_SECONDS").map_or(defaults.workload_time, Duration::from_secs),
        approval_clients: env_u64("GAVEL_SIM_APPROVAL_CLIENTS").map_or(defaults.approval_clients, |n| n as usize),
        submitters: env_u64("GAVEL_SIM_SUBMITTERS").map_or(defaults.submitters, |n| n as usize),
        workers: env_u64("GAVEL_SIM_WORKERS").map_or(defaults.workers, |n| n as usize),
        tick: env_u64("GAVEL_SIM_TICK_MS").map_or(defaults.tick, Duration::from_millis),
        ..defaults
    }
}

fn run(seed: u64, config: &SimConfig) -> Result<SimReport, String> {
    run_seed(seed, config).map_err(|error| format!("seed {seed}: {error}\n  replay: {}", replay_command(seed)))
}

/// Simulations at a time: the machine's cores, at most two.
fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from).clamp(1, 2)
}

/// Runs `seeds` on up to two threads (one simulation per thread), returning
/// the reports or the errors in seed order.
#[cfg(tokio_unstable)]
fn run_all(seeds: &[u64], config: &SimConfig) -> Vec<Result<SimReport, String>> {
    let threads = threads();
    let chunks: Vec<Vec<u64>> =
        (0..threads).map(|t| seeds.iter().copied().skip(t).step_by(threads).collect()).collect();
    let handles: Vec<_> = chunks
        .into_iter()
        .map(|chunk| {
            let config = config.clone();
            std::thread::spawn(move || chunk.into_iter().map(|seed| (seed, run(seed, &config))).collect::<Vec<_>>())
        })
        .collect();
    let mut results: Vec<(u64, Result<SimReport, String>)> =
        handles.into_iter().flat_map(|handle| handle.join().expect("a simulation thread panicked")).collect();
    results.sort_by_key(|(seed, _)| *seed);
    results.into_iter().map(|(_, result)| result).collect()
}

/// Every CI seed runs to the end with no checker finding the history
/// invalid and no two replicas diverging, and every seed of the
/// determinism sample (every [`CI_RERUN_EVERY`]th) gives the same trace
/// hash twice.
#[test]
fn every_ci_seed_keeps_every_rule() {
    let count = env_u64("GAVEL_SIM_SEEDS").unwrap_or(CI_SEEDS);
    for (seed, finding) in OPEN_FINDINGS {
        println!("seed {seed} left out of the sample, an open finding: {finding}\n  replay: {}", replay_command(seed));
    }
    let seeds: Vec<u64> =
        (1..).filter(|seed| !OPEN_FINDINGS.iter().any(|(open, _)| open == seed)).take(count as usize).collect();
    let config = config();
    let mut failures = Vec::new();
    let totals = run_seeds(&seeds, &config, threads(), CI_RERUN_EVERY, |outcome| {
        if let Ok(report) = &outcome.report {
            println!("{}", summary(report));
        }
        let failed = outcome.failures();
        if !failed.is_empty() {
            failures.push(format!(
                "seed {}: {}\n  replay: {}",
                outcome.seed,
                failed.join("; "),
                replay_command(outcome.seed)
            ));
        }
    });
    println!(
        "{} seeds ({} s of workload each), {:.0} simulated s in {:.1} wall s ({:.1}x on {} threads), {} operations, {} fault events; {} run twice, {} with the same trace",
        totals.seeds,
        config.workload_time.as_secs(),
        totals.simulated_ms as f64 / 1000.0,
        totals.wall_ms as f64 / 1000.0,
        totals.speedup(),
        threads(),
        totals.operations,
        totals.fault_events,
        totals.reruns,
        totals.reruns_equal
    );
    assert_eq!(totals.seeds, seeds.len(), "every seed reports");
    assert!(totals.operations > 0, "the workload ran no operation");
    if CI_RERUN_EVERY > 0 {
        assert!(totals.reruns > 0, "the determinism sample ran no seed twice");
    }
    assert!(failures.is_empty(), "failing seeds:\n{}", failures.join("\n"));
}

/// A seed replays exactly: two runs of one seed give the same history, the
/// same faults and the same applied state on every node. Only in a build
/// with `--cfg tokio_unstable`: without it tokio's `select!` and `watch`
/// draw from an unseeded generator, and two runs part after a few seconds
/// (docs/testing.md).
#[cfg(tokio_unstable)]
#[test]
fn a_seed_replays_to_the_same_trace_hash() {
    let config = config();
    // Each seed runs once first and once second on its thread, next to the
    // other seed: what ran before in the process must not matter.
    let seeds = vec![TWICE[0], TWICE[1], TWICE[1], TWICE[0]];
    let reports: Vec<SimReport> =
        run_all(&seeds, &config).into_iter().map(|result| result.unwrap_or_else(|error| panic!("{error}"))).collect();
    for pair in reports.chunks(2) {
        let (first, second) = (&pair[0], &pair[1]);
        println!("{}\n{}", summary(first), summary(second));
        if first.trace_hash != second.trace_hash {
            let diverged = first.history.iter().zip(&second.history).position(|(a, b)| a != b);
            panic!(
                "seed {} gave two traces; first differing history entry {diverged:?}: {:?} / {:?}\n  replay: {}",
                first.seed,
                diverged.map(|at| &first.history[at]),
                diverged.map(|at| &second.history[at]),
                replay_command(first.seed)
            );
        }
        assert!(first.operations > 0, "seed {} ran no operation", first.seed);
    }
}

/// Seeds of 10 s of workload where a worker stalls past its lease as the
/// drain begins, under skewed and jumped clocks: the stall must end with
/// the drain (gavel-chaos's `run_task`), or a worker outsleeps the 8 s drain
/// with a requeued execution left `queued` and `liveness` fails. With the
/// stall made a plain sleep again, these three fail that way (checked on
/// 2026-12-05; 416, 531, 1070 and 1273 of the first long run's failures
/// no longer reach the case and are not here).
const STALL_AT_DRAIN_SEEDS: [u64; 3] = [131, 224, 1292];

#[test]
fn a_stall_at_the_drain_ends_with_the_drain() {
    let config = SimConfig { workload_time: Duration::from_secs(10), ..config() };
    for seed in STALL_AT_DRAIN_SEEDS {
        let report = run(seed, &config).unwrap_or_else(|error| panic!("{error}"));
        // The scenario itself: a stall was under way when the drain began.
        // A seed whose run drifts away from it fails here, not silently.
        assert!(
            report.stalls_cut_by_drain > 0,
            "seed {} no longer has a worker stalled as the drain begins; pick seeds that do\n  replay: {}",
            report.seed,
            replay_command(report.seed)
        );
        assert!(
            !report.failed(),
            "seed {} failed: {:?}\n  replay: {}",
            report.seed,
            report.failures(),
            replay_command(report.seed)
        );
    }
}

/// Log lines stamped with the simulated time (milliseconds since the run
/// started), the same in every run of a seed.
struct SimulatedTime;

impl tracing_subscriber::fmt::time::FormatTime for SimulatedTime {
    fn format_time(&self, out: &mut tracing_subscriber::fmt::format::Writer<'_>) -> std::fmt::Result {
        match turmoil::sim_elapsed() {
            Some(elapsed) => write!(out, "{:>10.3}", elapsed.as_secs_f64() * 1000.0),
            None => write!(out, "{:>10}", "-"),
        }
    }
}

/// Replays `GAVEL_SIM_SEED` (seed 1 when unset) and prints what it did;
/// `GAVEL_SIM_HISTORY=path` writes its history as JSON lines;
/// `GAVEL_SIM_MUTANT=name` plants that bug.
#[test]
fn replay_one_seed() {
    if std::env::var("GAVEL_SIM_LOG").is_ok() {
        // The filter in GAVEL_SIM_LOG; lines stamped with simulated time,
        // not the wall clock's, so that two runs of a seed can be compared
        // line by line.
        let filter = tracing_subscriber::EnvFilter::from_env("GAVEL_SIM_LOG");
        let _ = tracing_subscriber::fmt().with_timer(SimulatedTime).with_ansi(false).with_env_filter(filter).try_init();
    }
    let seed = env_u64("GAVEL_SIM_SEED").unwrap_or(1);
    let planted_bug = gavel_sim::planted::from_env().unwrap_or_else(|error| panic!("{error}"));
    let replay = gavel_sim::planted::replay_command(seed, planted_bug);
    let report = run_seed(seed, &SimConfig { planted_bug, ..config() })
        .unwrap_or_else(|error| panic!("seed {seed}: {error}\n  replay: {replay}"));
    println!("{}", summary(&report));
    if let Ok(path) = std::env::var("GAVEL_SIM_HISTORY") {
        let lines: Vec<String> =
            report.history.iter().map(|entry| serde_json::to_string(entry).expect("an entry serializes")).collect();
        std::fs::write(&path, lines.join("\n")).expect("write the history");
    }
    for fault in &report.faults {
        println!("  {fault}");
    }
    for result in &report.checks.results {
        println!("  {}: {:?} {:?}", result.name, result.verdict, result.details.first());
    }
    assert!(!report.failed(), "seed {seed} failed: {:?}\n  replay: {replay}", report.failures());
}
