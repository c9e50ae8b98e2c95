//! Many seeds at once: the CI sample, the long run (`gavel-lab sim --seeds N`)
//! and the determinism sample that runs some of them twice.
//!
//! One simulation runs on one OS thread (turmoil is single-threaded); the
//! runner hands seeds to `threads` threads and reports each finished seed
//! through a callback, in the order they finish. What a seed does never
//! depends on its thread or on what ran before it there.
//!
//! Key items: [`run_seeds`], [`SeedOutcome`], [`Totals`].

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Instant;

use crate::{replay_command, run_seed, SimConfig, SimReport};

/// What became of one seed.
#[derive(Debug)]
pub struct SeedOutcome {
    /// The seed.
    pub seed: u64,
    /// Its report, or why it could not finish (with the replay command).
    pub report: Result<SimReport, String>,
    /// For a seed of the determinism sample: the second run's trace hash,
    /// or why the second run could not finish.
    pub rerun: Option<Result<String, String>>,
}

impl SeedOutcome {
    /// The sentences that make this seed a failure (empty when it passed):
    /// an error, a broken rule, or a second run with another trace.
    pub fn failures(&self) -> Vec<String> {
        let mut failures = Vec::new();
        match &self.report {
            Err(error) => failures.push(error.clone()),
            Ok(report) => {
                failures.extend(report.failures());
                match &self.rerun {
                    Some(Ok(hash)) if *hash != report.trace_hash => failures.push(format!(
                        "ran twice with two traces ({} then {}): not deterministic",
                        &report.trace_hash[..16],
                        &hash[..hash.len().min(16)]
                    )),
                    Some(Err(error)) => failures.push(format!("its second run failed: {error}")),
                    _ => {}
                }
            }
        }
        failures
    }
}

/// What a run of many seeds added up to.
#[derive(Debug, Default, Clone)]
pub struct Totals {
    /// Seeds run.
    pub seeds: usize,
    /// Seeds that failed (see [`SeedOutcome::failures`]).
    pub failed: usize,
    /// Seeds of the determinism sample run twice, and how many of them gave
    /// the same trace both times.
    pub reruns: usize,
    /// Of [`Totals::reruns`], those with equal traces.
    pub reruns_equal: usize,
    /// Simulated milliseconds over every seed (second runs not counted).
    pub simulated_ms: u64,
    /// Operations in every history.
    pub operations: usize,
    /// Fault events over every seed.
    pub fault_events: usize,
    /// Wall-clock milliseconds of the whole run.
    pub wall_ms: u64,
}

impl Totals {
    /// Simulated time over wall time for the whole run (all threads).
    pub fn speedup(&self) -> f64 {
        self.simulated_ms as f64 / self.wall_ms.max(1) as f64
    }
}

/// Runs `seeds` on `threads` threads. Every `rerun_every`-th seed of the
/// list (the 1st, the (1 + k)-th, …; none when 0) runs twice, the second
/// time on the same thread right after the first, and must give the same
/// trace hash. `each` sees every outcome as it finishes.
pub fn run_seeds(
    seeds: &[u64],
    config: &SimConfig,
    threads: usize,
    rerun_every: usize,
    mut each: impl FnMut(&SeedOutcome),
) -> Totals {
    let started = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let seeds: Arc<Vec<u64>> = Arc::new(seeds.to_vec());
    let (sender, receiver) = mpsc::channel::<SeedOutcome>();
    let workers: Vec<_> = (0..threads.max(1))
        .map(|_| {
            let (next, seeds, sender, config) = (next.clone(), seeds.clone(), sender.clone(), config.clone());
            std::thread::spawn(move || loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                let Some(&seed) = seeds.get(index) else { break };
                let report = run_one(seed, &config);
                let twice = rerun_every > 0 && index.is_multiple_of(rerun_every) && report.is_ok();
                let rerun = twice.then(|| run_one(seed, &config).map(|second| second.trace_hash));
                if sender.send(SeedOutcome { seed, report, rerun }).is_err() {
                    break;
                }
            })
        })
        .collect();
    drop(sender);
    let mut totals = Totals::default();
    for outcome in receiver {
        totals.seeds += 1;
        if let Ok(report) = &outcome.report {
            totals.simulated_ms += report.simulated_ms;
            totals.operations += report.operations;
            totals.fault_events += report.faults.len();
        }
        if let Some(rerun) = &outcome.rerun {
            totals.reruns += 1;
            let equal = matches!((rerun, &outcome.report), (Ok(hash), Ok(report)) if *hash == report.trace_hash);
            totals.reruns_equal += usize::from(equal);
        }
        if !outcome.failures().is_empty() {
            totals.failed += 1;
        }
        each(&outcome);
    }
    for worker in workers {
        // Panics are caught per seed in `run_one`.
        let _ = worker.join();
    }
    totals.wall_ms = started.elapsed().as_millis() as u64;
    totals
}

/// One seed, its error (or panic) turned into a sentence with the replay
/// command.
fn run_one(seed: u64, config: &SimConfig) -> Result<SimReport, String> {
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_seed(seed, config)));
    let error = match outcome {
        Ok(Ok(report)) => return Ok(report),
        Ok(Err(error)) => error.to_string(),
        Err(panic) => {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|text| text.to_string()))
                .unwrap_or_default();
            format!("the simulation panicked: {message}")
        }
    };
    Err(format!("seed {seed}: {error}\n  replay: {}", replay_command(seed)))
}

/// One line about a finished seed: operations, faults, simulated and wall
/// time, each node's applied index, the verdict and the trace hash's start.
pub fn summary(report: &SimReport) -> String {
    format!(
        "seed {}: {} ops, {} faults, {} snapshots built, {} installed, {} membership changes, \
         {:.1} simulated s in {:.1} wall s ({:.1}x), applied {:?}, {:?}, trace {}",
        report.seed,
        report.operations,
        report.faults.len(),
        report.snapshots_built,
        report.snapshots_installed,
        report.membership_changes,
        report.simulated_ms as f64 / 1000.0,
        report.wall_ms as f64 / 1000.0,
        report.simulated_ms as f64 / report.wall_ms.max(1) as f64,
        report.nodes.iter().map(|node| node.last_applied_index).collect::<Vec<_>>(),
        report.checks.verdict,
        &report.trace_hash[..16]
    )
}
