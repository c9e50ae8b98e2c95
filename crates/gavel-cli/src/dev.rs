//! `gavel dev`: a local three-node cluster as three OS processes on 127.0.0.1.

use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context;
use gavel_proto::v1::cluster_service_client::ClusterServiceClient;
use gavel_proto::v1::StatusRequest;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

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
    std::fs::create_dir_all(&data_dir).with_context(|| format!("creating {}", data_dir.display()))?;
    let addrs: Vec<String> = (0..3u16).map(|i| format!("127.0.0.1:{}", args.base_port + i)).collect();
    let peers = addrs.iter().enumerate().map(|(i, addr)| format!("{}={addr}", i + 1)).collect::<Vec<_>>().join(",");
    println!("gavel dev: data in {}", data_dir.display());
    let exe = std::env::current_exe().context("locating the gavel binary")?;
    let mut children = Vec::new();
    for (i, addr) in addrs.iter().enumerate() {
        let node_dir = data_dir.join(format!("n{}", i + 1));
        let log = std::fs::File::create(data_dir.join(format!("n{}.log", i + 1)))?;
        let child = Command::new(&exe)
            .arg("node")
            .arg(format!("--id={}", i + 1))
            .arg(format!("--listen={addr}"))
            .arg(format!("--peers={peers}"))
            .arg(format!("--data-dir={}", node_dir.display()))
            .args(args.timings.to_flags())
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting node {}", i + 1))?;
        children.push(child);
    }
    let outcome = async {
        let leader = wait_for_leader(&addrs).await?;
        println!("gavel dev: leader is node {leader}; endpoints:");
        for addr in &addrs {
            println!("  http://{addr}");
        }
        println!("gavel dev: logs in {}/n*.log; Ctrl-C stops the cluster", data_dir.display());
        wait_for_signal().await
    }
    .await;
    stop_children(&mut children).await;
    println!("gavel dev: stopped; data kept in {}", data_dir.display());
    outcome
}

/// Polls every node's status until one reports a leader that itself answers as leader.
pub async fn wait_for_leader(addrs: &[String]) -> anyhow::Result<u64> {
    let started = Instant::now();
    while started.elapsed() < LEADER_WAIT {
        for addr in addrs {
            let Ok(mut client) = ClusterServiceClient::connect(format!("http://{addr}")).await else { continue };
            if let Ok(status) = client.status(StatusRequest {}).await {
                let status = status.into_inner();
                if status.role == "Leader" {
                    return Ok(status.node_id);
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    anyhow::bail!("no leader within {} s; see the node logs", LEADER_WAIT.as_secs())
}

async fn wait_for_signal() -> anyhow::Result<()> {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        result = tokio::signal::ctrl_c() => result.context("waiting for Ctrl-C")?,
        _ = terminate.recv() => {}
    }
    Ok(())
}

async fn stop_children(children: &mut [Child]) {
    for child in children.iter() {
        if let Some(pid) = child.id() {
            let _ = kill(Pid::from_raw(pid as i32), Signal::SIGTERM);
        }
    }
    for child in children.iter_mut() {
        if tokio::time::timeout(STOP_GRACE, child.wait()).await.is_err() {
            let _ = child.kill().await;
        }
    }
}
