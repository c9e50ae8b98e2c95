//! Cluster figures measured on real `gavel node` processes on loopback:
//!
//! - (a) failover: time from SIGKILL of the leader until a write succeeds
//!   again, with default timings;
//! - (b) latency of one sequential approval lifecycle (create, decide,
//!   consume), through a follower and through the leader;
//! - (c) restart of a node holding many finalized executions: time until it
//!   answers again and until it has applied the leader's index, and whether
//!   it recovered from its snapshot plus the log suffix.
//!
//! Each figure is printed as the median and spread (min–max) of 3 runs.
//!
//! Usage: build the node first, then run the example, both in release:
//!
//! ```text
//! cargo build --release -p gavel-server
//! cargo run --release -p gavel-server --example cluster_figures [-- --quick] [--latency-only]
//! ```
//!
//! The node binary is `$GAVEL_BIN`, by default `gavel` in the directory above
//! this example's executable (`target/release/gavel`). `--quick` reduces the
//! counts (100 lifecycles, 10 000 executions) for a fast check. Node logs and
//! data live in a temporary directory that is removed at the end unless
//! `GAVEL_KEEP_DATA=1`.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use gavel_proto::v1 as pb;
use gavel_proto::v1::approval_service_client::ApprovalServiceClient;
use gavel_proto::v1::capability_service_client::CapabilityServiceClient;
use gavel_proto::v1::cluster_service_client::ClusterServiceClient;
use gavel_proto::v1::execution_service_client::ExecutionServiceClient;
use gavel_proto::v1::worker_service_client::WorkerServiceClient;
use tonic::transport::{Channel, Endpoint};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

/// Runs per figure.
const RUNS: usize = 3;
/// Upper bound of any single wait (a leader, a catch-up).
const WAIT: Duration = Duration::from_secs(120);
/// Concurrent submitters while filling the cluster.
const FILL_SUBMITTERS: usize = 48;
/// Concurrent workers while filling; each reports its tasks concurrently.
const FILL_WORKERS: usize = 4;
/// Tasks per poll while filling.
const POLL_TASKS: u32 = 64;

/// Counts for one invocation.
struct Counts {
    lifecycles: usize,
    executions: usize,
}

// ----- a compact process cluster -----

struct NodeProcess {
    id: u64,
    addr: String,
    data_dir: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

/// Three `gavel node` processes with default timings; killed on drop.
struct ProcessCluster {
    dir: tempfile::TempDir,
    binary: PathBuf,
    peers: String,
    /// Extra `gavel node` flags for every node.
    flags: Vec<String>,
    nodes: Vec<NodeProcess>,
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// The node binary: `$GAVEL_BIN`, else `gavel` next to `target/<profile>/examples`.
fn node_binary() -> anyhow::Result<PathBuf> {
    let binary = match std::env::var_os("GAVEL_BIN") {
        Some(path) => PathBuf::from(path),
        None => {
            let example = std::env::current_exe().context("locating this executable")?;
            let profile_dir = example
                .parent()
                .and_then(|examples| examples.parent())
                .context("this executable is not under target/<profile>/examples")?;
            profile_dir.join("gavel")
        }
    };
    if !binary.is_file() {
        bail!("no node binary at {}: run `cargo build --release -p gavel-server` or set GAVEL_BIN", binary.display());
    }
    Ok(binary)
}

impl ProcessCluster {
    async fn start(binary: PathBuf, flags: &[&str]) -> anyhow::Result<ProcessCluster> {
        let dir = tempfile::tempdir()?;
        let mut nodes = Vec::new();
        for id in 1..=3u64 {
            nodes.push(NodeProcess {
                id,
                addr: format!("127.0.0.1:{}", free_port()?),
                data_dir: dir.path().join(format!("n{id}")),
                log: dir.path().join(format!("n{id}.log")),
                child: None,
            });
        }
        let peers = nodes.iter().map(|node| format!("{}={}", node.id, node.addr)).collect::<Vec<_>>().join(",");
        let flags = flags.iter().map(|flag| flag.to_string()).collect();
        let mut cluster = ProcessCluster { dir, binary, peers, flags, nodes };
        for id in 1..=3 {
            cluster.spawn(id)?;
        }
        cluster.wait_for_leader().await?;
        Ok(cluster)
    }

    fn node_mut(&mut self, id: u64) -> &mut NodeProcess {
        self.nodes.iter_mut().find(|node| node.id == id).expect("node ids are 1..=3")
    }

    fn spawn(&mut self, id: u64) -> anyhow::Result<()> {
        let binary = self.binary.clone();
        let peers = self.peers.clone();
        let flags = self.flags.clone();
        let node = self.node_mut(id);
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&node.log)?;
        let child = Command::new(binary)
            .arg("node")
            .arg(format!("--id={id}"))
            .arg(format!("--listen={}", node.addr))
            .arg(format!("--data-dir={}", node.data_dir.display()))
            .arg(format!("--peers={peers}"))
            .args(flags)
            .env("GAVEL_LOG", "info,openraft=warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("spawning gavel node")?;
        node.child = Some(child);
        Ok(())
    }

    /// SIGKILL.
    fn kill(&mut self, id: u64) {
        if let Some(mut child) = self.node_mut(id).child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn running(&self) -> Vec<u64> {
        self.nodes.iter().filter(|node| node.child.is_some()).map(|node| node.id).collect()
    }

    fn channel(&self, id: u64) -> Channel {
        let addr = &self.nodes.iter().find(|node| node.id == id).expect("node ids are 1..=3").addr;
        Endpoint::from_shared(format!("http://{addr}"))
            .expect("a valid address")
            .connect_timeout(Duration::from_secs(1))
            .timeout(Duration::from_secs(30))
            .tcp_nodelay(true)
            .connect_lazy()
    }

    async fn status(&self, id: u64) -> Option<pb::StatusResponse> {
        let mut request = tonic::Request::new(pb::StatusRequest {});
        request.set_timeout(Duration::from_secs(10));
        ClusterServiceClient::new(self.channel(id)).status(request).await.ok().map(|response| response.into_inner())
    }

    async fn wait_for_leader(&self) -> anyhow::Result<u64> {
        let started = Instant::now();
        while started.elapsed() < WAIT {
            for id in self.running() {
                if self.status(id).await.is_some_and(|status| status.role == "Leader") {
                    return Ok(id);
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        bail!("no leader within {WAIT:?}")
    }

    /// Waits until every running node has applied at least `index`.
    async fn wait_applied(&self, index: u64) -> anyhow::Result<()> {
        let started = Instant::now();
        'poll: while started.elapsed() < WAIT {
            for id in self.running() {
                if self.status(id).await.is_none_or(|status| status.last_applied_index < index) {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue 'poll;
                }
            }
            return Ok(());
        }
        bail!("nodes did not apply index {index} within {WAIT:?}")
    }
}

impl Drop for ProcessCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(mut child) = node.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        if std::env::var_os("GAVEL_KEEP_DATA").is_some() {
            let kept = std::mem::replace(&mut self.dir, tempfile::tempdir().expect("temp dir")).keep();
            println!("kept node data and logs in {}", kept.display());
        }
    }
}

// ----- requests -----

fn user(id: &str) -> pb::Actor {
    pb::Actor { id: id.to_string(), kind: pb::ActorKind::User as i32, display_name: None }
}

fn is_retryable(status: &tonic::Status) -> bool {
    matches!(
        status.code(),
        tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled | tonic::Code::DeadlineExceeded
    )
}

fn create_request(id: &str) -> pb::CreateApprovalRequest {
    pb::CreateApprovalRequest {
        request_id: format!("create-{id}"),
        id: id.to_string(),
        capability_id: "orders.refund".to_string(),
        surface: "figures".to_string(),
        actor: Some(user("alice")),
        input_json: format!(r#"{{"order":"{id}","amount":10}}"#),
        risk: pb::Risk::High as i32,
        side_effect: pb::SideEffect::Write as i32,
        ..pb::CreateApprovalRequest::default()
    }
}

/// One approval lifecycle through `channel`; any failure is an error.
async fn lifecycle(channel: Channel, id: &str) -> anyhow::Result<()> {
    let mut approvals = ApprovalServiceClient::new(channel);
    approvals.create_approval(create_request(id)).await?;
    approvals
        .decide_approval(pb::DecideApprovalRequest {
            request_id: format!("decide-{id}"),
            id: id.to_string(),
            status: pb::ApprovalStatus::Approved as i32,
            approver: Some(user("bob")),
            ..pb::DecideApprovalRequest::default()
        })
        .await?;
    approvals
        .consume_approval(pb::ConsumeApprovalRequest {
            request_id: format!("consume-{id}"),
            id: id.to_string(),
            execution_id: format!("ex-{id}"),
            ..pb::ConsumeApprovalRequest::default()
        })
        .await?;
    Ok(())
}

// ----- statistics -----

fn percentile(sorted: &[Duration], quantile: f64) -> Duration {
    let rank = ((sorted.len() as f64) * quantile).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

/// "median X ms, spread A–B ms (runs: ...)".
fn summary(mut runs: Vec<Duration>) -> String {
    let listed = runs.iter().map(|run| format!("{:.1}", ms(*run))).collect::<Vec<_>>().join(", ");
    runs.sort();
    format!(
        "median {:.1} ms, spread {:.1}–{:.1} ms (runs: {listed})",
        ms(percentile(&runs, 0.5)),
        ms(runs[0]),
        ms(runs[runs.len() - 1])
    )
}

// ----- figures -----

/// (a) SIGKILL the leader, then write through the survivors (alternating,
/// retrying every 5 ms with the same request id) until one write succeeds.
async fn failover(cluster: &mut ProcessCluster, label: &str) -> anyhow::Result<()> {
    let mut runs = Vec::new();
    for run in 0..RUNS {
        let leader = cluster.wait_for_leader().await?;
        let survivors: Vec<u64> = cluster.running().into_iter().filter(|id| *id != leader).collect();
        // Warm the survivors' connections (client → node, node → leader).
        for (index, id) in survivors.iter().enumerate() {
            lifecycle(cluster.channel(*id), &format!("warm-{run}-{index}")).await?;
        }
        let channels: Vec<Channel> = survivors.iter().map(|id| cluster.channel(*id)).collect();
        let request = create_request(&format!("after-kill-{run}"));
        let killed = Instant::now();
        cluster.kill(leader);
        let mut attempt = 0;
        let recovered = loop {
            let mut client = ApprovalServiceClient::new(channels[attempt % channels.len()].clone());
            let mut call = tonic::Request::new(request.clone());
            call.set_timeout(Duration::from_secs(5));
            match client.create_approval(call).await {
                Ok(_) => break killed.elapsed(),
                Err(status) if is_retryable(&status) && killed.elapsed() < WAIT => {
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                Err(status) => bail!("write after the kill failed: {status:?}"),
            }
        };
        let new_leader = cluster.wait_for_leader().await?;
        println!(
            "  run {}: leader {leader} killed, new leader {new_leader}, write succeeded after {:.1} ms",
            run + 1,
            ms(recovered)
        );
        runs.push(recovered);
        cluster.spawn(leader)?;
        let applied = cluster.status(new_leader).await.context("leader status")?.last_applied_index;
        cluster.wait_applied(applied).await?;
    }
    println!("(a) leader SIGKILL → next successful write, {label}: {}", summary(runs));
    Ok(())
}

/// (b) Sequential lifecycles through one node; returns (p50, p99).
async fn lifecycle_latencies(channel: Channel, prefix: &str, count: usize) -> anyhow::Result<(Duration, Duration)> {
    let mut samples = Vec::with_capacity(count);
    for index in 0..count {
        let started = Instant::now();
        lifecycle(channel.clone(), &format!("{prefix}-{index}")).await?;
        samples.push(started.elapsed());
    }
    samples.sort();
    Ok((percentile(&samples, 0.5), percentile(&samples, 0.99)))
}

async fn latency(cluster: &ProcessCluster, count: usize) -> anyhow::Result<()> {
    let leader = cluster.wait_for_leader().await?;
    let follower = cluster.running().into_iter().find(|id| *id != leader).context("a follower")?;
    for (label, node) in [("follower", follower), ("leader", leader)] {
        let channel = cluster.channel(node);
        lifecycle(channel.clone(), &format!("warm-{label}")).await?;
        let (mut p50s, mut p99s) = (Vec::new(), Vec::new());
        for run in 0..RUNS {
            let (p50, p99) = lifecycle_latencies(channel.clone(), &format!("lat-{label}-{run}"), count).await?;
            println!(
                "  run {}: {count} lifecycles through the {label}: p50 {:.2} ms, p99 {:.2} ms",
                run + 1,
                ms(p50),
                ms(p99)
            );
            p50s.push(p50);
            p99s.push(p99);
        }
        println!("(b) approval lifecycle (create, decide, consume) through the {label}, {count} per run:");
        println!("    p50: {}", summary(p50s));
        println!("    p99: {}", summary(p99s));
    }
    Ok(())
}

/// Fills the cluster with `count` finalized executions through the leader:
/// concurrent submitters, and workers that poll 64 tasks at a time and report
/// them all completed concurrently.
async fn fill(cluster: &ProcessCluster, count: usize) -> anyhow::Result<Duration> {
    let leader = cluster.wait_for_leader().await?;
    let channel = cluster.channel(leader);
    CapabilityServiceClient::new(channel.clone())
        .register_capability(pb::RegisterCapabilityRequest {
            request_id: "register-bench".to_string(),
            spec: Some(pb::CapabilitySpec {
                id: "bench.noop".to_string(),
                side_effect: pb::SideEffect::None as i32,
                risk: pb::Risk::Low as i32,
                // Generous, so a slow fill never expires a lease.
                timeout_ms: Some(600_000),
                ..pb::CapabilitySpec::default()
            }),
        })
        .await?;
    let started = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let finalized = Arc::new(AtomicUsize::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    // One connection per task: a single shared HTTP/2 connection limits the fill rate.
    for _ in 0..FILL_SUBMITTERS {
        let (channel, next) = (cluster.channel(leader), next.clone());
        tasks.spawn(async move {
            let mut client = ExecutionServiceClient::new(channel);
            loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                if index >= count {
                    return Ok::<_, anyhow::Error>(());
                }
                let request = pb::SubmitRequest {
                    request_id: format!("fill-{index}"),
                    execution_id: Some(format!("fill-{index}")),
                    capability_id: "bench.noop".to_string(),
                    input_json: format!(r#"{{"index":{index}}}"#),
                    actor: Some(user("filler")),
                    surface: "figures".to_string(),
                    correlation_id: None,
                };
                client.submit(request).await.with_context(|| format!("submit fill-{index}"))?;
            }
        });
    }
    for worker in 0..FILL_WORKERS {
        let (channel, finalized) = (cluster.channel(leader), finalized.clone());
        tasks.spawn(async move {
            let mut client = WorkerServiceClient::new(channel);
            let worker_id = format!("filler-{worker}");
            let mut poll = 0u64;
            while finalized.load(Ordering::Relaxed) < count {
                poll += 1;
                let response = client
                    .poll(pb::PollRequest {
                        request_id: format!("{worker_id}-poll-{poll}"),
                        worker_id: worker_id.clone(),
                        queues: vec!["bench.noop".to_string()],
                        max_tasks: POLL_TASKS,
                        wait_ms: 200,
                    })
                    .await
                    .context("poll")?
                    .into_inner();
                let reports = response.tasks.iter().map(|task| {
                    let mut client = client.clone();
                    let lease_id = task.lease.as_ref().map_or(0, |lease| lease.lease_id);
                    let request = pb::ReportRequest {
                        request_id: format!("report-{lease_id}"),
                        lease_id,
                        worker_id: worker_id.clone(),
                        outcome: Some(pb::report_request::Outcome::Completed(pb::ReportCompleted {
                            output_json: r#"{"ok":true}"#.to_string(),
                        })),
                    };
                    async move { client.report(request).await }
                });
                for report in futures::future::join_all(reports).await {
                    report.context("report")?;
                }
                finalized.fetch_add(response.tasks.len(), Ordering::Relaxed);
            }
            Ok(())
        });
    }
    while let Some(joined) = tasks.join_next().await {
        joined??;
    }
    Ok(started.elapsed())
}

/// (c) Restart of a follower holding `count` finalized executions.
async fn restart(cluster: &mut ProcessCluster, count: usize) -> anyhow::Result<()> {
    let fill_time = fill(cluster, count).await?;
    let leader = cluster.wait_for_leader().await?;
    let leader_status = cluster.status(leader).await.context("leader status")?;
    println!(
        "  filled {count} finalized executions in {:.1} s ({:.0} executions/s; leader applied index {})",
        fill_time.as_secs_f64(),
        count as f64 / fill_time.as_secs_f64(),
        leader_status.last_applied_index
    );
    cluster.wait_applied(leader_status.last_applied_index).await?;

    let (mut serving_runs, mut answered_runs, mut caught_up_runs) = (Vec::new(), Vec::new(), Vec::new());
    for run in 0..RUNS {
        let leader = cluster.wait_for_leader().await?;
        let target = cluster.status(leader).await.context("leader status")?.last_applied_index;
        let follower = cluster.running().into_iter().find(|id| *id != leader).context("a follower")?;
        let before = cluster.status(follower).await.context("follower status")?;
        cluster.kill(follower);
        let spawned = Instant::now();
        cluster.spawn(follower)?;
        // Serving: the gRPC server (health service) answers, which it does
        // only once storage is open and the snapshot restored.
        loop {
            if spawned.elapsed() > WAIT {
                bail!("node {follower} did not answer a health check within {WAIT:?}");
            }
            let mut check = tonic::Request::new(HealthCheckRequest { service: String::new() });
            check.set_timeout(Duration::from_secs(5));
            match HealthClient::new(cluster.channel(follower)).check(check).await {
                Ok(response) if response.get_ref().status == ServingStatus::Serving as i32 => break,
                _ => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
        let serving = spawned.elapsed();
        // A linearizable read of a filled execution through the restarted
        // node succeeds: it knows the leader again and forwards the read.
        let last_id = format!("fill-{}", count - 1);
        loop {
            if spawned.elapsed() > WAIT {
                bail!("node {follower} did not serve a read within {WAIT:?}");
            }
            let mut read = tonic::Request::new(pb::GetExecutionRequest { execution_id: last_id.clone() });
            read.set_timeout(Duration::from_secs(5));
            match ExecutionServiceClient::new(cluster.channel(follower)).get_execution(read).await {
                Ok(response) if response.get_ref().execution.is_some() => break,
                Ok(_) => bail!("{last_id} is missing"),
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
        let answered = spawned.elapsed();
        // Caught up: its own applied index reaches the leader's. (A Status
        // call after an apply hashes the whole state, so this figure includes
        // one such hash.)
        let status = loop {
            if spawned.elapsed() > WAIT {
                bail!("node {follower} did not catch up within {WAIT:?}");
            }
            if let Some(status) = cluster.status(follower).await {
                if status.last_applied_index >= target {
                    break status;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let caught_up = spawned.elapsed();
        println!(
            "  run {}: node {follower} served gRPC after {:.1} ms, a linearizable read after {:.1} ms, reported the \
             leader's applied index {target} after {:.1} ms; snapshot index before kill {:?}, after restart {:?} \
             (log suffix re-applied: {} entries)",
            run + 1,
            ms(serving),
            ms(answered),
            ms(caught_up),
            before.snapshot_index,
            status.snapshot_index,
            target - status.snapshot_index.unwrap_or(0),
        );
        serving_runs.push(serving);
        answered_runs.push(answered);
        caught_up_runs.push(caught_up);
    }
    let logs: String =
        cluster.nodes.iter().map(|node| std::fs::read_to_string(&node.log).unwrap_or_default()).collect();
    let restored =
        logs.lines().filter(|line| line.contains("restored the application from the stored snapshot")).count();
    let snapshot_bytes = logs
        .lines()
        .filter(|line| line.contains("snapshot stored"))
        .filter_map(|line| line.split("bytes=").nth(1))
        .filter_map(|rest| rest.split_whitespace().next()?.parse::<u64>().ok())
        .max();
    println!(
        "(c) restart of a node holding {count} finalized executions (largest snapshot {} MB; the node logs show \
         {restored} restore(s) of the application from a stored snapshot at start):",
        snapshot_bytes.map_or("unknown".to_string(), |bytes| format!("{:.1}", bytes as f64 / 1e6)),
    );
    println!("    spawn → serves gRPC (storage open, snapshot restored): {}", summary(serving_runs));
    println!("    spawn → serves a linearizable read (forwarded to the leader): {}", summary(answered_runs));
    println!("    spawn → Status reports the leader's applied index: {}", summary(caught_up_runs));
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let quick = std::env::args().any(|arg| arg == "--quick");
    let counts = if quick {
        Counts { lifecycles: 100, executions: 10_000 }
    } else {
        Counts { lifecycles: 300, executions: 100_000 }
    };
    let binary = node_binary()?;
    println!("node binary {}; {} runs per figure{}", binary.display(), RUNS, if quick { " (quick)" } else { "" });

    let mut cluster = ProcessCluster::start(binary.clone(), &[]).await?;
    if std::env::args().any(|arg| arg == "--latency-only") {
        return latency(&cluster, counts.lifecycles).await;
    }
    failover(&mut cluster, "default timings (election timeout 400–800 ms)").await?;
    latency(&cluster, counts.lifecycles).await?;
    drop(cluster);

    // For comparison: openraft 0.9 lets a follower that knew a leader start an
    // election only after the leader lease (= the maximum election timeout)
    // plus a random election timeout, so failover scales with both bounds.
    let mut cluster =
        ProcessCluster::start(binary.clone(), &["--election-timeout-min-ms=800", "--election-timeout-max-ms=1600"])
            .await?;
    failover(&mut cluster, "election timeout 800–1600 ms").await?;
    drop(cluster);

    let mut cluster = ProcessCluster::start(binary, &[]).await?;
    restart(&mut cluster, counts.executions).await?;
    Ok(())
}
