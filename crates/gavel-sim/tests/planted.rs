//! Every planted bug (`gavel_core::mutants::Mutant`) but those listed in
//! [`NOT_CAUGHT_YET`] is caught by the simulation within the first
//! [`CAUGHT_WITHIN`] CI seeds: for each bug the
//! CI seeds run in order, with the CI sample's configuration and seed
//! length, until one is judged invalid or two replicas diverge. The catching
//! seed, the checker and the one command that replays it are printed.
//!
//! Part of every `cargo test --workspace` (gavel-sim turns on the crates'
//! `mutants` features, which the product binary never does); alone:
//! `cargo test -p gavel-sim --test planted`.

use std::time::{Duration, Instant};

use gavel_sim::{planted, run_seed, Mutant, SimConfig, SimReport};

/// The first seeds that must catch each bug (seed 1, 2, …).
const CAUGHT_WITHIN: u64 = 8;

/// Planted bugs the CI seeds do not catch yet, each with why: run by
/// neither the search nor the assertion, listed in the output.
/// (`unsynced-vote`, listed until 2026-12-05, is caught by the vote check
/// across crashes.)
const NOT_CAUGHT_YET: [(Mutant, &str); 2] = [
    (
        Mutant::EarlyAck,
        "since a restarted leader campaigns (2026-12-06, issue #44), a node that loses entries it acknowledged is \
         caught up again by the leader; the loss shows only when a majority loses them, and seeds 1-16 at 15 s do \
         not (seeds 1 and 3 end in openraft's own assertion on a follower's log reversion, which the test counts as \
         no verdict)",
    ),
    (
        Mutant::UnsyncedAppend,
        "the same: seeds 1-16 at 15 s lose acknowledged entries on one node at a time only (it was caught by seed 1 \
         through a restarted leader's old term)",
    ),
];

/// Planted bugs whose catching seed is run a second time, to show that it
/// replays to the same trace hash: the ones whose code path has its own
/// timing in the simulation (`early-ack`'s delayed write is a task sleeping
/// in tokio time) or its own disk behaviour.
const REPLAYED: [Mutant; 3] = [Mutant::EarlyAck, Mutant::UnsyncedAppend, Mutant::UnsyncedVote];

/// Simulated seconds of workload per seed: `tests/seeds.rs`'s
/// `CI_WORKLOAD_SECONDS`, so a catching seed is a CI seed as it runs there.
const CI_WORKLOAD_SECONDS: u64 = 15;

/// Set in a child process: `name:seed`, the one planted run it does.
const CHILD_VAR: &str = "GAVEL_SIM_PLANTED_RUN";

/// The line a child prints with its outcome.
const OUTCOME: &str = "planted-outcome:";

/// How one planted run ended.
enum Outcome {
    /// A checker found the history invalid or two replicas diverged: the
    /// trace hash and the failures.
    Caught(String, String),
    /// Every rule held.
    Clean,
    /// The run did not finish (stuck), or a node panicked (openraft asserts
    /// some of its invariants with a panic, which turmoil turns into a panic
    /// of the whole simulation and tokio into an abort while unwinding):
    /// no checker judged it.
    Broken(String),
}

/// Runs `seed` with `mutant` in a child process of this test binary (a
/// node's panic aborts the process it runs in), and reads its outcome.
fn run_in_child(mutant: Mutant, seed: u64) -> Outcome {
    let output = std::process::Command::new(std::env::current_exe().expect("the test binary"))
        .args(["every_planted_bug_is_caught_within_the_first_ci_seeds", "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_VAR, format!("{}:{seed}", mutant.name()))
        .output()
        .expect("run a child simulation");
    let stdout = String::from_utf8_lossy(&output.stdout);
    // libtest prints the test's name on the same line first.
    match stdout.lines().find_map(|line| line.split_once(OUTCOME).map(|(_, outcome)| outcome)) {
        Some(line) if line.starts_with("caught ") => {
            let (trace, failures) = line["caught ".len()..].split_once(' ').unwrap_or_default();
            Outcome::Caught(trace.to_string(), failures.to_string())
        }
        Some("clean") => Outcome::Clean,
        Some(line) => Outcome::Broken(line.to_string()),
        None => {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let panic = stderr.lines().skip_while(|line| !line.contains("panicked at")).nth(1).unwrap_or("");
            Outcome::Broken(format!("the simulation aborted ({}): {panic}", output.status))
        }
    }
}

/// The child's side: one run, its outcome on stdout.
fn child(spec: &str) {
    let (name, seed) = spec.split_once(':').expect("name:seed");
    let mutant = Mutant::from_name(name).expect("a planted bug");
    let seed: u64 = seed.parse().expect("a seed");
    let config = SimConfig {
        workload_time: Duration::from_secs(CI_WORKLOAD_SECONDS),
        planted_bug: Some(mutant),
        ..SimConfig::default()
    };
    match run_seed(seed, &config) {
        Ok(report) if report.failed() => println!("{OUTCOME}caught {} {}", report.trace_hash, one_line(&report)),
        Ok(_) => println!("{OUTCOME}clean"),
        Err(error) => println!("{OUTCOME}broken {error}"),
    }
}

/// The failures of `report` on one line, cut short.
fn one_line(report: &SimReport) -> String {
    report.failures().join("; ").replace('\n', " ").chars().take(400).collect()
}

/// The first of seeds 1..=[`CAUGHT_WITHIN`] that catches `mutant`, with
/// what caught it, and every seed's line (a [`REPLAYED`] bug's catching
/// seed is run twice and must give one trace hash).
fn first_catch(mutant: Mutant) -> (Option<(u64, String)>, Vec<String>) {
    let mut lines = Vec::new();
    for seed in 1..=CAUGHT_WITHIN {
        match run_in_child(mutant, seed) {
            Outcome::Caught(trace, failures) => {
                if REPLAYED.contains(&mutant) {
                    let again = match run_in_child(mutant, seed) {
                        Outcome::Caught(again, _) => again,
                        _ => "no catch".to_string(),
                    };
                    assert_eq!(trace, again, "{} seed {seed} replayed to another trace", mutant.name());
                    lines.push(format!("seed {seed} replayed to the same trace {}", &trace[..16.min(trace.len())]));
                }
                return (Some((seed, failures)), lines);
            }
            Outcome::Clean => lines.push(format!("seed {seed}: every rule held")),
            Outcome::Broken(why) => lines.push(format!("seed {seed}: no verdict: {why}")),
        }
    }
    (None, lines)
}

#[test]
fn every_planted_bug_is_caught_within_the_first_ci_seeds() {
    if let Ok(spec) = std::env::var(CHILD_VAR) {
        return child(&spec);
    }
    let started = Instant::now();
    // Two threads (one child simulation each), the bugs dealt between them.
    let threads = std::thread::available_parallelism().map_or(1, usize::from).clamp(1, 2);
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            std::thread::spawn(move || {
                Mutant::ALL
                    .into_iter()
                    .filter(|mutant| NOT_CAUGHT_YET.iter().all(|(not_yet, _)| not_yet != mutant))
                    .skip(t)
                    .step_by(threads)
                    .map(|mutant| (mutant, first_catch(mutant)))
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut results: Vec<_> =
        handles.into_iter().flat_map(|handle| handle.join().expect("a thread panicked")).collect();
    results.sort_by_key(|(mutant, _)| Mutant::ALL.iter().position(|m| m == mutant));
    let mut missed = Vec::new();
    for (mutant, (caught, lines)) in results {
        for line in &lines {
            println!("{}: {line}", mutant.name());
        }
        match caught {
            Some((seed, failures)) => println!(
                "{}: caught by seed {seed}: {failures}\n  replay: {}",
                mutant.name(),
                planted::replay_command(seed, Some(mutant))
            ),
            None => {
                println!("{}: not caught in seeds 1..={CAUGHT_WITHIN}", mutant.name());
                missed.push(mutant.name());
            }
        }
    }
    for (mutant, why) in NOT_CAUGHT_YET {
        println!("{}: not searched, not caught by the CI seeds yet: {why}", mutant.name());
    }
    println!(
        "{} planted bugs searched in {:.1} wall s",
        Mutant::ALL.len() - NOT_CAUGHT_YET.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(missed.is_empty(), "planted bugs not caught within {CAUGHT_WITHIN} CI seeds: {missed:?}");
}
