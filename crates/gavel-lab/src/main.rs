//! The `gavel-lab` binary: Gavel's test lab, apart from the product.
//!
//! - `gavel-lab chaos`: a three-node cluster of the product binary in
//!   network namespaces, a seeded nemesis, a recorded history and the
//!   checkers (docs/testing.md);
//! - `gavel-lab sim`: the deterministic simulation, a whole cluster in one
//!   process under simulated time and network (docs/testing.md);
//! - `gavel-lab bench`: closed-loop throughput, latency and CPU per
//!   operation of a durable three-node cluster (docs/performance.md).
//!
//! Chaos and bench run real `gavel node` processes: the product binary
//! `gavel` found beside this one (the same `target/` directory), or the one
//! `GAVEL_BIN` names (a build with `--features mutants` for planted bugs).
//! The product binary links none of this (`crates/gavel-server/tests/
//! dependencies.rs` fails if it does).

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Gavel's test lab: chaos, simulation and benchmarks.
#[derive(Debug, Parser)]
#[command(name = "gavel-lab", version, about)]
struct Lab {
    #[command(subcommand)]
    command: LabCommand,
}

#[derive(Debug, Subcommand)]
enum LabCommand {
    /// Chaos test: a three-node cluster in network namespaces, a seeded
    /// nemesis, a recorded history and the checkers (see docs/testing.md).
    Chaos(gavel_chaos::run::ChaosArgs),
    /// Benchmark: closed-loop throughput, latency and CPU per operation of a
    /// durable three-node cluster (see docs/performance.md).
    Bench(gavel_bench::BenchArgs),
    /// Deterministic simulation: a whole cluster in one process under
    /// simulated time and network, faults chosen by the seed; replays one
    /// seed (`--seed`) or runs many (`--seeds`) (see docs/testing.md).
    Sim(gavel_sim::cli::SimArgs),
}

fn main() -> ExitCode {
    let lab = Lab::parse();
    // A simulation's nodes log every fault they meet; `gavel-lab sim`
    // prints its own report, and `GAVEL_LOG` turns their logs back on.
    let default_filter = match lab.command {
        LabCommand::Chaos(_) => "info,openraft=warn",
        LabCommand::Sim(_) => "off",
        LabCommand::Bench(_) => "warn",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("GAVEL_LOG").unwrap_or_else(|_| default_filter.into());
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("gavel-lab: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match lab.command {
        LabCommand::Chaos(args) => ExitCode::from(runtime.block_on(gavel_chaos::run::run(args)) as u8),
        LabCommand::Sim(args) => ExitCode::from(gavel_sim::cli::run(args) as u8),
        LabCommand::Bench(args) => match runtime.block_on(gavel_bench::run(args)) {
            Ok(outcome) if outcome.ok => ExitCode::SUCCESS,
            Ok(_) => ExitCode::FAILURE,
            Err(error) => {
                eprintln!("gavel-lab bench: {error:#}");
                ExitCode::FAILURE
            }
        },
    }
}
