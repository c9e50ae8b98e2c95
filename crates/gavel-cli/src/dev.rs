//! `gavel dev`: a local three-node cluster as three OS processes on
//! 127.0.0.1, on consecutive ports from `--base-port`: a
//! [`gavel_testkit::Cluster`] of this very binary, stopped with SIGTERM on
//! Ctrl-C or SIGTERM. The data is kept.

use std::time::Duration;

use anyhow::Context;
use gavel_testkit::{resolve_gavel_binary, Cluster, ClusterSpec, Loopback};

use crate::cli::DevArgs;

/// How long `gavel dev` waits for a leader before giving up.
const LEADER_WAIT: Duration = Duration::from_secs(30);
/// How long children get to stop after SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// Runs the local cluster until Ctrl-C or SIGTERM.
pub async fn run(args: DevArgs) -> anyhow::Result<()> {
    let data_dir = match &args.data_dir {
        Some(dir) => dir.clone(),
        None => std::env::temp_dir().join(format!("gavel-dev-{}", std::process::id())),
    };
    println!("gavel dev: data in {}", data_dir.display());
    let mut spec = ClusterSpec::new(resolve_gavel_binary(None)?, &data_dir);
    spec.args = args.timings.to_flags();
    spec.start_timeout = LEADER_WAIT;
    let cluster = Cluster::start_with(spec, Loopback::from_base_port(args.base_port))
        .await
        .context("starting the local cluster")?;
    let outcome = async {
        let leader = cluster.wait_for_leader(LEADER_WAIT).await?;
        println!("gavel dev: leader is node {leader}; endpoints:");
        for endpoint in cluster.endpoints() {
            println!("  {endpoint}");
        }
        println!("gavel dev: logs in {}/n*.log; Ctrl-C stops the cluster", data_dir.display());
        wait_for_signal().await
    }
    .await;
    // Waiting for the children to exit blocks; nothing else runs by now.
    let stopped = tokio::task::block_in_place(|| cluster.stop_all(STOP_GRACE));
    println!("gavel dev: stopped; data kept in {}", data_dir.display());
    outcome.and(stopped.context("stopping the nodes"))
}

async fn wait_for_signal() -> anyhow::Result<()> {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        result = tokio::signal::ctrl_c() => result.context("waiting for Ctrl-C")?,
        _ = terminate.recv() => {}
    }
    Ok(())
}
