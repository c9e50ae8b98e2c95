//! `refund-worker`: runs the refund worker against a Gavel cluster until Ctrl-C.
//! It authenticates with the `GAVEL_CA`, `GAVEL_CERT`, `GAVEL_KEY`,
//! `GAVEL_TOKEN` (or `GAVEL_TOKEN_FILE`) and `GAVEL_INSECURE` variables, as
//! the CLI does (`gavel dev` prints them); its principal needs the `worker`
//! grant.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use refund_worker::{check_cluster_with, worker_with, Gateway, GatewayBehaviour};

/// How long the worker waits for the cluster to answer before it gives up at start.
const STARTUP_WAIT: Duration = Duration::from_secs(5);

/// Runs the orders.refund worker.
#[derive(Debug, Parser)]
struct Args {
    /// Gavel node addresses.
    #[arg(
        long,
        env = "GAVEL_ENDPOINTS",
        default_value = "127.0.0.1:7401,127.0.0.1:7402,127.0.0.1:7403",
        value_delimiter = ','
    )]
    endpoints: Vec<String>,
    /// The stand-in gateway's ledger file.
    #[arg(long, default_value = "refund-ledger.jsonl")]
    ledger: PathBuf,
    /// Fraction of gateway calls whose response is lost after charging (0.0–1.0).
    #[arg(long, default_value_t = 0.0)]
    lose_response_fraction: f64,
    /// Gateway latency per call, in milliseconds.
    #[arg(long, default_value_t = 50)]
    latency_ms: u64,
    /// Handlers running at once.
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt().with_env_filter("info").init();
    let args = Args::parse();
    let behaviour = GatewayBehaviour {
        lose_response_fraction: args.lose_response_fraction,
        lose_response_on_calls: Vec::new(),
        latency: Duration::from_millis(args.latency_ms),
    };
    let gateway = Gateway::open(args.ledger.clone(), behaviour)?;
    let shutdown = gavel_client::CancellationToken::new();
    let stop = shutdown.clone();
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        stop.cancel();
    });
    let config = gavel_client::Credentials::from_env()
        .apply(gavel_client::ClientConfig::default())
        .map_err(|error| anyhow::anyhow!("refund-worker: credentials: {error}"))?;
    if let Err(error) = check_cluster_with(&args.endpoints, config.clone(), STARTUP_WAIT).await {
        anyhow::bail!(
            "refund-worker: no usable Gavel cluster at {}: {error}. Start one with `gavel dev` and run the \
             `export GAVEL_ENDPOINTS=... GAVEL_CA=...` line it prints, or pass --endpoints",
            args.endpoints.join(",")
        );
    }
    println!("refund-worker: polling orders.refund at {}; ledger {}", args.endpoints.join(","), args.ledger.display());
    worker_with(&args.endpoints, config, gateway, args.concurrency)?.run(shutdown).await?;
    Ok(())
}
