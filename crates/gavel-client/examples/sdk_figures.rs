//! SDK figures (a benchmark program, not a test): latency from
//! `CancelExecution` to the handler's token firing, and the load an idle
//! worker puts on the cluster.
//!
//! It starts `gavel dev` from the release build (build it first with
//! `cargo build --release -p gavel-server`; `GAVEL_BIN` overrides the path),
//! runs against it, and stops it. Run:
//!
//! ```sh
//! cargo run --release -p gavel-client --example sdk_figures [-- --runs 100 --idle-secs 30]
//! ```

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use gavel_client::{pb, CancellationToken, Client, HandlerError, Worker};

struct Dev {
    child: std::process::Child,
    _dir: tempfile::TempDir,
}

impl Drop for Dev {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let _ = self.child.wait();
    }
}

fn gavel_binary() -> anyhow::Result<PathBuf> {
    if let Ok(path) = std::env::var("GAVEL_BIN") {
        return Ok(PathBuf::from(path));
    }
    let exe = std::env::current_exe()?;
    let release = exe.ancestors().nth(2).context("target/release")?.join("gavel");
    anyhow::ensure!(release.exists(), "{} not found: run cargo build --release -p gavel-server", release.display());
    Ok(release)
}

fn start_dev(base_port: u16) -> anyhow::Result<Dev> {
    let dir = tempfile::tempdir()?;
    let child = std::process::Command::new(gavel_binary()?)
        .args(["dev", &format!("--base-port={base_port}"), &format!("--data-dir={}", dir.path().display())])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    Ok(Dev { child, _dir: dir })
}

fn percentile(sorted: &[Duration], quantile: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * quantile).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

async fn cancel_latencies(endpoints: &[String], runs: usize, heartbeat: Duration) -> anyhow::Result<Vec<Duration>> {
    let client = Client::new(endpoints)?;
    let (started_sender, mut started) = tokio::sync::mpsc::unbounded_channel::<(String, CancellationToken)>();
    let worker = Worker::builder(endpoints)
        .queue("bench.cancel")
        .concurrency(1)
        .heartbeat_interval(heartbeat)
        .handler(move |context| {
            let started_sender = started_sender.clone();
            async move {
                let _ = started_sender.send((context.execution_id.clone(), context.cancel.clone()));
                context.cancel.cancelled().await;
                Err(HandlerError::retryable("CANCELLED", "token fired"))
            }
        })
        .build()?;
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(worker.run(shutdown.clone()));
    let mut latencies = Vec::with_capacity(runs);
    let prefix = format!("cancel-{}-{}", heartbeat.as_millis(), std::process::id());
    for run in 0..runs {
        let execution_id = format!("{prefix}-{run}");
        client
            .submit(pb::SubmitRequest {
                execution_id: Some(execution_id.clone()),
                capability_id: "bench.cancel".to_string(),
                input_json: "{}".to_string(),
                actor: Some(pb::Actor {
                    id: "bench".to_string(),
                    kind: pb::ActorKind::Service as i32,
                    display_name: None,
                }),
                surface: "bench".to_string(),
                ..Default::default()
            })
            .await?;
        let (started_id, token) =
            tokio::time::timeout(Duration::from_secs(30), started.recv()).await?.context("worker stopped")?;
        anyhow::ensure!(started_id == execution_id, "unexpected task {started_id}");
        let cancelled_at = Instant::now();
        client.cancel_execution(pb::CancelExecutionRequest { execution_id, ..Default::default() }).await?;
        tokio::time::timeout(Duration::from_secs(30), token.cancelled()).await?;
        latencies.push(cancelled_at.elapsed());
    }
    shutdown.cancel();
    running.await??;
    Ok(latencies)
}

async fn idle_load(endpoints: &[String], idle: Duration) -> anyhow::Result<(f64, u64)> {
    let client = Client::new(endpoints)?;
    let worker = Worker::builder(endpoints)
        .queue("bench.idle")
        .concurrency(8)
        .handler(|_context| async move { Ok(serde_json::json!({})) })
        .build()?;
    let attempts = worker.attempts_counter();
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(worker.run(shutdown.clone()));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let log_before = client.status(pb::StatusRequest {}).await?.last_log_index;
    let before = attempts();
    tokio::time::sleep(idle).await;
    let requests = attempts() - before;
    let log_after = client.status(pb::StatusRequest {}).await?.last_log_index;
    shutdown.cancel();
    running.await??;
    Ok((requests as f64 / idle.as_secs_f64(), log_after.saturating_sub(log_before)))
}

fn argument(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|arg| arg == name)
        .and_then(|index| args.get(index + 1))
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let runs = argument("--runs", 100) as usize;
    let idle = Duration::from_secs(argument("--idle-secs", 30));
    let base_port = 17_801;
    let _dev = start_dev(base_port as u16)?;
    let endpoints: Vec<String> = (0..3).map(|i| format!("127.0.0.1:{}", base_port + i)).collect();
    let client = Client::new(&endpoints)?;
    for id in ["bench.cancel", "bench.idle"] {
        let spec = pb::CapabilitySpec {
            id: id.to_string(),
            side_effect: pb::SideEffect::Read as i32,
            risk: pb::Risk::Low as i32,
            timeout_ms: Some(120_000),
            ..Default::default()
        };
        client.register_capability(pb::RegisterCapabilityRequest { spec: Some(spec), ..Default::default() }).await?;
    }
    println!("figure,heartbeat_ms,runs,p50_ms,p99_ms,max_ms");
    for heartbeat_ms in [500u64, 100] {
        let mut latencies = cancel_latencies(&endpoints, runs, Duration::from_millis(heartbeat_ms)).await?;
        latencies.sort();
        println!(
            "cancel_to_token,{heartbeat_ms},{runs},{:.1},{:.1},{:.1}",
            percentile(&latencies, 0.5).as_secs_f64() * 1e3,
            percentile(&latencies, 0.99).as_secs_f64() * 1e3,
            latencies.last().map_or(0.0, |max| max.as_secs_f64() * 1e3)
        );
    }
    let (requests_per_second, log_entries) = idle_load(&endpoints, idle).await?;
    println!(
        "idle_worker,requests_per_second={requests_per_second:.2},raft_log_entries_while_idle={log_entries},seconds={}",
        idle.as_secs()
    );
    Ok(())
}
