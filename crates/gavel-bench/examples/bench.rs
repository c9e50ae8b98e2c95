//! `gavel-lab bench` as a standalone example, for trying the load generator
//! before it is mounted in the `gavel` binary:
//!
//! ```text
//! cargo build --release -p gavel-cli
//! cargo run --release -p gavel-bench --example bench -- --workload approvals --clients 1,16,64
//! ```
//!
//! The local cluster runs `target/release/gavel` (next to this example's
//! directory) unless `--gavel-binary` or `GAVEL_BIN` says otherwise. Exits 1 unless every
//! configuration passed its self-check.

use std::process::ExitCode;

use clap::Parser;
use gavel_bench::BenchArgs;

/// Closed-loop throughput, latency and CPU per operation of a durable three-node cluster.
#[derive(Debug, Parser)]
#[command(name = "bench")]
struct Cli {
    #[command(flatten)]
    bench: BenchArgs,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match gavel_bench::run(cli.bench).await {
        Ok(outcome) if outcome.ok => ExitCode::SUCCESS,
        Ok(_) => ExitCode::FAILURE,
        Err(error) => {
            eprintln!("gavel-lab bench: {error}");
            ExitCode::FAILURE
        }
    }
}
