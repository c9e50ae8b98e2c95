//! `gavel-lab sim`: runs seeds of the simulation from the command line: one seed
//! in detail (`--seed S`, what a failing seed's replay command says), or a
//! long run of many (`--seeds N`), some of them twice to check determinism.
//!
//! Key items: [`SimArgs`], [`run`].

use std::time::Duration;

use crate::runner::{run_seeds, summary};
use crate::{run_seed, SimConfig};

/// `gavel-lab sim`: a whole cluster in one process under simulated time and
/// network, faults chosen by the seed; exit 0 when every seed kept every
/// rule, 1 when one did not, 2 on a bad command line.
#[derive(Debug, clap::Args)]
pub struct SimArgs {
    /// Replay this one seed and print its faults, verdicts and trace hash.
    #[arg(long, conflicts_with = "seeds")]
    pub seed: Option<u64>,
    /// Run this many seeds (from `--first` on) and print one line per
    /// failing seed with the command that replays it.
    #[arg(long)]
    pub seeds: Option<u64>,
    /// The first seed of `--seeds`.
    #[arg(long, default_value_t = 1)]
    pub first: u64,
    /// Simulated seconds of workload per seed (faults happen during it; the
    /// workers' drain and the settling time come after).
    #[arg(long, default_value_t = crate::DEFAULT_WORKLOAD_SECONDS)]
    pub seconds: u64,
    /// Simulations at a time (one per thread; default: the machine's cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Run every Nth seed of `--seeds` twice and compare the trace hashes
    /// (0: none).
    #[arg(long, default_value_t = 20)]
    pub rerun_every: usize,
    /// Print a progress line every this many seeds (0: none).
    #[arg(long, default_value_t = 100)]
    pub progress_every: usize,
    /// With `--seed`: write the history as JSON lines to this file.
    #[arg(long)]
    pub history: Option<std::path::PathBuf>,
}

/// The longest run `--seeds` accepts, so that a typo cannot start a run of
/// years.
pub const MAX_SEEDS: u64 = 1_000_000;

/// The longest workload `--seconds` accepts: one simulated hour.
pub const MAX_WORKLOAD_SECONDS: u64 = 3_600;

/// Runs `gavel-lab sim`; returns the process exit code.
pub fn run(args: SimArgs) -> i32 {
    if args.seconds == 0 || args.seconds > MAX_WORKLOAD_SECONDS {
        eprintln!("gavel-lab sim: --seconds must be 1..={MAX_WORKLOAD_SECONDS} (SIM_SECONDS_OUT_OF_RANGE)");
        return 2;
    }
    let config = SimConfig { workload_time: Duration::from_secs(args.seconds), ..SimConfig::default() };
    match (args.seed, args.seeds) {
        (Some(seed), _) => replay(seed, &config, args.history.as_deref()),
        (None, Some(count)) if (1..=MAX_SEEDS).contains(&count) => many(&args, count, &config),
        (None, Some(_)) => {
            eprintln!("gavel-lab sim: --seeds must be 1..={MAX_SEEDS} (SIM_SEEDS_OUT_OF_RANGE)");
            2
        }
        (None, None) => {
            eprintln!("gavel-lab sim: give --seed S (one seed) or --seeds N (a run of N seeds) (SIM_NO_SEEDS)");
            2
        }
    }
}

fn replay(seed: u64, config: &SimConfig, history: Option<&std::path::Path>) -> i32 {
    let report = match run_seed(seed, config) {
        Ok(report) => report,
        Err(error) => {
            eprintln!("seed {seed}: {error}");
            return 1;
        }
    };
    println!("{}", summary(&report));
    for fault in &report.faults {
        println!("  {fault}");
    }
    for result in &report.checks.results {
        println!("  {}: {:?} {}", result.name, result.verdict, result.details.first().map_or("", String::as_str));
    }
    for node in &report.nodes {
        println!("  n{}: applied {:?}, state {}", node.id, node.last_applied_index, node.state_hash);
    }
    if let Some(path) = history {
        let lines: Vec<String> = report.history.iter().filter_map(|entry| serde_json::to_string(entry).ok()).collect();
        if let Err(error) = std::fs::write(path, lines.join("\n") + "\n") {
            eprintln!("gavel-lab sim: cannot write {}: {error}", path.display());
            return 1;
        }
    }
    println!("trace {}", report.trace_hash);
    if report.failed() {
        for failure in report.failures() {
            println!("FAILED: {failure}");
        }
        return 1;
    }
    0
}

fn many(args: &SimArgs, count: u64, config: &SimConfig) -> i32 {
    let last = args.first.saturating_add(count - 1);
    let seeds: Vec<u64> = (args.first..=last).collect();
    let threads = args.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from)).max(1);
    println!(
        "gavel-lab sim: seeds {}..={last}, {} s of workload each, {threads} at a time, every {} run twice",
        args.first,
        args.seconds,
        if args.rerun_every == 0 { "none".to_string() } else { format!("{}th", args.rerun_every) }
    );
    let started = std::time::Instant::now();
    let mut done = 0usize;
    let mut failed = 0usize;
    let totals = run_seeds(&seeds, config, threads, args.rerun_every, |outcome| {
        done += 1;
        let failures = outcome.failures();
        if !failures.is_empty() {
            failed += 1;
            println!("seed {} FAILED: {}", outcome.seed, failures.join("; "));
            println!("  replay: gavel-lab sim --seed {} --seconds {}", outcome.seed, args.seconds);
        }
        if args.progress_every > 0 && done.is_multiple_of(args.progress_every) {
            println!("  {done}/{count} seeds, {failed} failed, {:.0} s", started.elapsed().as_secs_f64());
        }
    });
    println!(
        "{} seeds, {} failed; {} run twice, {} with the same trace; {:.0} simulated s in {:.1} wall s ({:.1}x on {threads} threads); {} operations, {} fault events",
        totals.seeds,
        totals.failed,
        totals.reruns,
        totals.reruns_equal,
        totals.simulated_ms as f64 / 1000.0,
        totals.wall_ms as f64 / 1000.0,
        totals.speedup(),
        totals.operations,
        totals.fault_events
    );
    i32::from(totals.failed > 0 || totals.seeds != seeds.len())
}
