//! Figures mode (`gavel-lab bench --figures ...`): the cluster and SDK figures of
//! `docs/performance.md`, measured on the local cluster the bench starts,
//! each printed as the median and spread (min–max) of `--figure-runs` runs:
//!
//! - `failover`: SIGKILL of the leader until a write succeeds again, with the
//!   cluster's timings and, for comparison, on a second cluster with election
//!   timeout 800–1600 ms;
//! - `lifecycle`: latency (p50, p99) of sequential approval lifecycles
//!   (create, decide, consume) through a follower and through the leader;
//! - `cancel`: `CancelExecution` until the handler's cancellation token
//!   fires, with a heartbeat every 500 ms and every 100 ms;
//! - `idle-worker`: requests per second an idle worker sends and the Raft log
//!   entries it causes;
//! - `restart`: fill the cluster with finalized executions (scale mode's
//!   fill), then SIGKILL and restart a follower in each run (scale mode's
//!   restart): spawn until it serves gRPC, serves a linearizable read, and
//!   has caught up.
//!
//! The figures run in that order whatever order they are asked in: restart
//! comes last because its fill makes the state large.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use gavel_client::{pb, CancellationToken, HandlerError, Worker};
use gavel_proto::v1::approval_service_client::ApprovalServiceClient;
use serde::Serialize;
use tonic::transport::Channel;

use crate::cluster::{self, Dial, LocalCluster};
use crate::scale::{self, FillReport, RestartReport};
use crate::{workload, BenchError, Printer};

/// Deadline of one call of a figure (the SDK's own timings apply to its calls).
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Deadline of one write attempt after the leader was killed.
const FAILOVER_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);
/// Pause between two write attempts after the leader was killed.
const FAILOVER_RETRY: Duration = Duration::from_millis(5);
/// The election timeouts of the failover comparison (the earlier default).
const SLOW_ELECTION_FLAGS: [&str; 2] = ["--election-timeout-min-ms=800", "--election-timeout-max-ms=1600"];
/// Concurrent submitters of the restart figure's fill.
const FILL_SUBMITTERS: usize = 48;
/// Heartbeat intervals of the cancel figure: the SDK's default and a short one.
const CANCEL_HEARTBEATS_MS: [u64; 2] = [500, 100];
/// Longest wait for a task to start or a token to fire in the cancel figure.
const CANCEL_WAIT: Duration = Duration::from_secs(30);
/// Slots of the idle worker (each long-polls).
const IDLE_CONCURRENCY: usize = 8;
/// Time the idle worker gets to settle into its long-polls before counting.
const IDLE_SETTLE: Duration = Duration::from_secs(2);
/// Attempt deadline of the SDK figures' capabilities.
const SDK_CAPABILITY_TIMEOUT_MS: u64 = 120_000;

/// One figure of figures mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Figure {
    /// Leader SIGKILL until the next successful write.
    Failover,
    /// Sequential approval lifecycles through a follower and the leader.
    Lifecycle,
    /// CancelExecution until the handler's token fires.
    Cancel,
    /// Load of an idle worker.
    IdleWorker,
    /// Restart of a follower holding many finalized executions.
    Restart,
}

/// Figures-mode settings.
pub(crate) struct FiguresSpec {
    pub figures: Vec<Figure>,
    pub runs: usize,
    pub lifecycles: usize,
    pub executions: u64,
    pub cancels: usize,
    pub idle: Duration,
    /// For the failover comparison's second cluster.
    pub binary: PathBuf,
    pub data_dir: Option<PathBuf>,
    pub node_flags: Vec<String>,
    /// Whether the failover comparison's second cluster runs `--insecure`
    /// (as the first one does).
    pub insecure: bool,
}

/// A figure's runs: their median and spread, in milliseconds.
#[derive(Debug, Clone, Serialize)]
pub struct Spread {
    /// The median run.
    pub median_ms: f64,
    /// The fastest run.
    pub min_ms: f64,
    /// The slowest run.
    pub max_ms: f64,
    /// Every run, in order.
    pub runs_ms: Vec<f64>,
}

/// Leader SIGKILL until the next successful write.
#[derive(Debug, Clone, Serialize)]
pub struct FailoverFigure {
    /// The timings of the cluster.
    pub timings: String,
    /// Kill until a write through a survivor succeeded.
    pub write_after_kill: Spread,
}

/// Sequential approval lifecycles through one node.
#[derive(Debug, Clone, Serialize)]
pub struct LifecycleFigure {
    /// `follower` or `leader`.
    pub through: String,
    /// Lifecycles per run.
    pub lifecycles: usize,
    /// The runs' median latencies.
    pub p50: Spread,
    /// The runs' 99th-percentile latencies.
    pub p99: Spread,
}

/// CancelExecution until the handler's token fires.
#[derive(Debug, Clone, Serialize)]
pub struct CancelFigure {
    /// The worker's heartbeat interval.
    pub heartbeat_ms: u64,
    /// Cancellations measured.
    pub cancels: usize,
    /// Median latency.
    pub p50_ms: f64,
    /// 99th-percentile latency.
    pub p99_ms: f64,
    /// Slowest cancellation.
    pub max_ms: f64,
}

/// What an idle worker costs.
#[derive(Debug, Clone, Serialize)]
pub struct IdleWorkerFigure {
    /// How long it was watched.
    pub seconds: f64,
    /// Requests it sent per second.
    pub requests_per_s: f64,
    /// Raft log entries added meanwhile.
    pub raft_log_entries: u64,
}

/// Restart of a follower holding many finalized executions.
#[derive(Debug, Clone, Serialize)]
pub struct RestartFigure {
    /// Finalized executions the cluster held.
    pub executions: u64,
    /// The fill that put them there.
    pub fill: FillReport,
    /// Every restart.
    pub runs: Vec<RestartReport>,
    /// Spawn until it served gRPC.
    pub serving: Spread,
    /// Spawn until a linearizable read through it succeeded.
    pub read: Option<Spread>,
    /// Spawn until it reported the leader's applied index.
    pub caught_up: Spread,
    /// The largest snapshot a node stored, from the node logs.
    pub largest_snapshot_bytes: Option<u64>,
}

/// Everything figures mode measured.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FiguresReport {
    /// One per cluster timing.
    pub failover: Vec<FailoverFigure>,
    /// Through the follower, then through the leader.
    pub lifecycle: Vec<LifecycleFigure>,
    /// One per heartbeat interval.
    pub cancel: Vec<CancelFigure>,
    /// The idle worker.
    pub idle_worker: Option<IdleWorkerFigure>,
    /// The restarts.
    pub restart: Option<RestartFigure>,
    /// Every restart's read succeeded.
    pub ok: bool,
}

/// The `quantile` of sorted samples, nearest rank.
fn percentile(sorted: &[Duration], quantile: f64) -> Duration {
    let rank = ((sorted.len() as f64) * quantile).ceil() as usize;
    sorted.get(rank.clamp(1, sorted.len().max(1)) - 1).copied().unwrap_or_default()
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

fn spread(runs: &[Duration]) -> Spread {
    let mut sorted = runs.to_vec();
    sorted.sort();
    Spread {
        median_ms: ms(percentile(&sorted, 0.5)),
        min_ms: sorted.first().copied().map_or(0.0, ms),
        max_ms: sorted.last().copied().map_or(0.0, ms),
        runs_ms: runs.iter().copied().map(ms).collect(),
    }
}

/// "median X ms, spread A–B ms (runs: ...)".
fn summary(spread: &Spread) -> String {
    let listed = spread.runs_ms.iter().map(|run| format!("{run:.1}")).collect::<Vec<_>>().join(", ");
    format!("median {:.1} ms, spread {:.1}–{:.1} ms (runs: {listed})", spread.median_ms, spread.min_ms, spread.max_ms)
}

fn user(id: &str) -> pb::Actor {
    pb::Actor { id: id.to_string(), kind: pb::ActorKind::User as i32, ..pb::Actor::default() }
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
async fn lifecycle(channel: Channel, id: &str) -> Result<(), BenchError> {
    let mut approvals = ApprovalServiceClient::new(channel);
    approvals.create_approval(create_request(id)).await.map_err(BenchError::rpc(format!("create {id}")))?;
    approvals
        .decide_approval(pb::DecideApprovalRequest {
            request_id: format!("decide-{id}"),
            id: id.to_string(),
            status: pb::ApprovalStatus::Approved as i32,
            approver: Some(user("bob")),
            ..pb::DecideApprovalRequest::default()
        })
        .await
        .map_err(BenchError::rpc(format!("decide {id}")))?;
    approvals
        .consume_approval(pb::ConsumeApprovalRequest {
            request_id: format!("consume-{id}"),
            id: id.to_string(),
            execution_id: format!("ex-{id}"),
            ..pb::ConsumeApprovalRequest::default()
        })
        .await
        .map_err(BenchError::rpc(format!("consume {id}")))?;
    Ok(())
}

/// Runs the figures asked for on `local` (and, for the failover comparison,
/// on a second cluster it starts and stops).
pub(crate) async fn run(
    spec: &FiguresSpec,
    local: &LocalCluster,
    tag: &str,
    printer: &mut Printer<'_>,
) -> Result<FiguresReport, BenchError> {
    let mut figures = spec.figures.clone();
    figures.sort();
    figures.dedup();
    printer.human(&format!("figures {figures:?}, {} runs each", spec.runs))?;
    let mut report = FiguresReport { ok: true, ..FiguresReport::default() };
    for figure in figures {
        let prefix = format!("{tag}-{}", serde_json::to_value(figure)?.as_str().unwrap_or("figure"));
        match figure {
            Figure::Failover => {
                let timings = if spec.node_flags.is_empty() {
                    "default timings".to_string()
                } else {
                    format!("node flags {}", spec.node_flags.join(" "))
                };
                report.failover.push(failover(local, spec.runs, &timings, &prefix, printer).await?);
                // openraft 0.9 lets a follower that knew a leader campaign only after the leader lease (the
                // maximum election timeout) plus a random election timeout: failover scales with both bounds.
                let mut flags: Vec<String> =
                    spec.node_flags.iter().filter(|flag| !flag.starts_with("--election-timeout-")).cloned().collect();
                flags.extend(SLOW_ELECTION_FLAGS.iter().map(|flag| flag.to_string()));
                let slow =
                    LocalCluster::start(spec.binary.clone(), spec.data_dir.as_deref(), &flags, spec.insecure).await?;
                let label = "election timeout 800–1600 ms";
                report.failover.push(failover(&slow, spec.runs, label, &format!("{prefix}-slow"), printer).await?);
            }
            Figure::Lifecycle => report.lifecycle = lifecycles(local, spec, &prefix, printer).await?,
            Figure::Cancel => {
                register_sdk_capabilities(&local.dial(), &local.cluster.addrs()).await?;
                for heartbeat_ms in CANCEL_HEARTBEATS_MS {
                    let heartbeat = Duration::from_millis(heartbeat_ms);
                    let mut latencies =
                        cancel_latencies(&local.dial(), &local.cluster.addrs(), spec.cancels, heartbeat, &prefix)
                            .await?;
                    latencies.sort();
                    let figure = CancelFigure {
                        heartbeat_ms,
                        cancels: latencies.len(),
                        p50_ms: ms(percentile(&latencies, 0.5)),
                        p99_ms: ms(percentile(&latencies, 0.99)),
                        max_ms: latencies.last().copied().map_or(0.0, ms),
                    };
                    printer.human(&format!(
                        "(d) CancelExecution → handler token fires, heartbeat every {heartbeat_ms} ms, {} cancels: \
                         p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
                        figure.cancels, figure.p50_ms, figure.p99_ms, figure.max_ms
                    ))?;
                    report.cancel.push(figure);
                }
            }
            Figure::IdleWorker => {
                register_sdk_capabilities(&local.dial(), &local.cluster.addrs()).await?;
                let figure = idle_load(&local.dial(), &local.cluster.addrs(), spec.idle).await?;
                printer.human(&format!(
                    "(e) idle worker ({IDLE_CONCURRENCY} slots): {:.2} requests/s, {} Raft log entries over {:.0} s",
                    figure.requests_per_s, figure.raft_log_entries, figure.seconds
                ))?;
                report.idle_worker = Some(figure);
            }
            Figure::Restart => {
                let figure = restarts(local, spec, &prefix, printer).await?;
                report.ok &= figure.runs.iter().all(|run| run.read_ok);
                report.restart = Some(figure);
            }
        }
    }
    Ok(report)
}

/// (a) SIGKILL the leader, then write through the survivors (alternating,
/// retrying every 5 ms with the same request id) until one write succeeds;
/// restart the old leader and let it catch up before the next run.
async fn failover(
    local: &LocalCluster,
    runs: usize,
    timings: &str,
    prefix: &str,
    printer: &mut Printer<'_>,
) -> Result<FailoverFigure, BenchError> {
    let cluster = &local.cluster;
    let mut samples = Vec::new();
    for run in 0..runs {
        let leader = cluster.wait_for_leader(cluster::WAIT).await?;
        let survivors: Vec<u64> = cluster.running().into_iter().filter(|id| *id != leader).collect();
        let channels = survivors.iter().map(|id| cluster.channel(*id, CALL_TIMEOUT)).collect::<Result<Vec<_>, _>>()?;
        if channels.is_empty() {
            return Err(BenchError::Unexpected("failover needs a follower".to_string()));
        }
        // Warm the survivors' connections (client → node, node → leader).
        for (index, channel) in channels.iter().enumerate() {
            lifecycle(channel.clone(), &format!("{prefix}-warm-{run}-{index}")).await?;
        }
        let request = create_request(&format!("{prefix}-after-kill-{run}"));
        let killed = Instant::now();
        cluster.kill(leader)?;
        let mut attempt = 0;
        let recovered = loop {
            let mut client = ApprovalServiceClient::new(channels[attempt % channels.len()].clone());
            let mut call = tonic::Request::new(request.clone());
            call.set_timeout(FAILOVER_ATTEMPT_TIMEOUT);
            match client.create_approval(call).await {
                Ok(_) => break killed.elapsed(),
                Err(status) if is_retryable(&status) && killed.elapsed() < cluster::WAIT => {
                    attempt += 1;
                    tokio::time::sleep(FAILOVER_RETRY).await;
                }
                Err(status) => return Err(BenchError::rpc("the write after the kill")(status)),
            }
        };
        let new_leader = cluster.wait_for_leader(cluster::WAIT).await?;
        printer.human(&format!(
            "  run {}: leader {leader} killed, new leader {new_leader}, write succeeded after {:.1} ms",
            run + 1,
            ms(recovered)
        ))?;
        samples.push(recovered);
        cluster.start_node(leader)?;
        let applied = cluster.status(new_leader).await.map(|status| status.last_applied_index).unwrap_or(0);
        cluster.wait_applied(applied, cluster::WAIT).await?;
    }
    let figure = FailoverFigure { timings: timings.to_string(), write_after_kill: spread(&samples) };
    printer.human(&format!(
        "(a) leader SIGKILL → next successful write, {timings}: {}",
        summary(&figure.write_after_kill)
    ))?;
    Ok(figure)
}

/// (b) Sequential lifecycles through a follower, then through the leader.
async fn lifecycles(
    local: &LocalCluster,
    spec: &FiguresSpec,
    prefix: &str,
    printer: &mut Printer<'_>,
) -> Result<Vec<LifecycleFigure>, BenchError> {
    let cluster = &local.cluster;
    let leader = cluster.wait_for_leader(cluster::WAIT).await?;
    let follower = cluster
        .running()
        .into_iter()
        .find(|id| *id != leader)
        .ok_or_else(|| BenchError::Unexpected("the lifecycle figure needs a follower".to_string()))?;
    let mut figures = Vec::new();
    for (through, node) in [("follower", follower), ("leader", leader)] {
        let channel = cluster.channel(node, CALL_TIMEOUT)?;
        lifecycle(channel.clone(), &format!("{prefix}-warm-{through}")).await?;
        let (mut p50s, mut p99s) = (Vec::new(), Vec::new());
        for run in 0..spec.runs {
            let mut samples = Vec::with_capacity(spec.lifecycles);
            for index in 0..spec.lifecycles {
                let started = Instant::now();
                lifecycle(channel.clone(), &format!("{prefix}-{through}-{run}-{index}")).await?;
                samples.push(started.elapsed());
            }
            samples.sort();
            let (p50, p99) = (percentile(&samples, 0.5), percentile(&samples, 0.99));
            printer.human(&format!(
                "  run {}: {} lifecycles through the {through}: p50 {:.2} ms, p99 {:.2} ms",
                run + 1,
                spec.lifecycles,
                ms(p50),
                ms(p99)
            ))?;
            p50s.push(p50);
            p99s.push(p99);
        }
        let figure = LifecycleFigure {
            through: through.to_string(),
            lifecycles: spec.lifecycles,
            p50: spread(&p50s),
            p99: spread(&p99s),
        };
        printer.human(&format!(
            "(b) approval lifecycle (create, decide, consume) through the {through}, {} per run:\n    p50: {}\n    p99: {}",
            spec.lifecycles,
            summary(&figure.p50),
            summary(&figure.p99)
        ))?;
        figures.push(figure);
    }
    Ok(figures)
}

/// Registers the capabilities of the SDK figures (again is harmless).
async fn register_sdk_capabilities(dial: &Dial, endpoints: &[String]) -> Result<(), BenchError> {
    let client = dial.client(endpoints, 0)?;
    for id in ["bench.cancel", "bench.idle"] {
        let spec = pb::CapabilitySpec {
            id: id.to_string(),
            side_effect: pb::SideEffect::Read as i32,
            risk: pb::Risk::Low as i32,
            timeout_ms: Some(SDK_CAPABILITY_TIMEOUT_MS),
            ..Default::default()
        };
        client
            .register_capability(pb::RegisterCapabilityRequest { spec: Some(spec), ..Default::default() })
            .await
            .map_err(BenchError::client(format!("registering capability {id}")))?;
    }
    Ok(())
}

/// (d) Submits `runs` executions one at a time; as soon as the worker's
/// handler holds one, cancels it and times until the handler's token fires.
async fn cancel_latencies(
    dial: &Dial,
    endpoints: &[String],
    runs: usize,
    heartbeat: Duration,
    prefix: &str,
) -> Result<Vec<Duration>, BenchError> {
    let client = dial.client(endpoints, 0)?;
    let (started_sender, mut started) = tokio::sync::mpsc::unbounded_channel::<(String, CancellationToken)>();
    let worker = Worker::builder(endpoints)
        .client_config(dial.config())
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
        .build()
        .map_err(BenchError::client("building the worker"))?;
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(worker.run(shutdown.clone()));
    let mut latencies = Vec::with_capacity(runs);
    let outcome = async {
        for run in 0..runs {
            let execution_id = format!("{prefix}-{}-{run}", heartbeat.as_millis());
            client
                .submit(pb::SubmitRequest {
                    execution_id: Some(execution_id.clone()),
                    capability_id: "bench.cancel".to_string(),
                    input_json: "{}".to_string(),
                    actor: Some(pb::Actor {
                        id: "bench".to_string(),
                        kind: pb::ActorKind::Service as i32,
                        ..pb::Actor::default()
                    }),
                    surface: "bench".to_string(),
                    ..Default::default()
                })
                .await
                .map_err(BenchError::client(format!("submit {execution_id}")))?;
            let (started_id, token) = tokio::time::timeout(CANCEL_WAIT, started.recv())
                .await
                .map_err(|_| BenchError::Timeout(format!("{execution_id} did not start within {CANCEL_WAIT:?}")))?
                .ok_or_else(|| BenchError::Unexpected("the worker stopped".to_string()))?;
            if started_id != execution_id {
                return Err(BenchError::Unexpected(format!("the worker ran {started_id}, not {execution_id}")));
            }
            let cancelled_at = Instant::now();
            client
                .cancel_execution(pb::CancelExecutionRequest {
                    execution_id: execution_id.clone(),
                    ..Default::default()
                })
                .await
                .map_err(BenchError::client(format!("cancel {execution_id}")))?;
            tokio::time::timeout(CANCEL_WAIT, token.cancelled()).await.map_err(|_| {
                BenchError::Timeout(format!("the token of {execution_id} did not fire within {CANCEL_WAIT:?}"))
            })?;
            latencies.push(cancelled_at.elapsed());
        }
        Ok(())
    }
    .await;
    shutdown.cancel();
    running.await?.map_err(BenchError::client("the cancel figure's worker"))?;
    outcome.map(|()| latencies)
}

/// (e) Watches an idle worker for `idle`: the requests it sends and the Raft
/// log entries the cluster adds meanwhile.
async fn idle_load(dial: &Dial, endpoints: &[String], idle: Duration) -> Result<IdleWorkerFigure, BenchError> {
    let client = dial.client(endpoints, 0)?;
    let worker = Worker::builder(endpoints)
        .client_config(dial.config())
        .queue("bench.idle")
        .concurrency(IDLE_CONCURRENCY)
        .handler(|_context| async move { Ok(serde_json::json!({})) })
        .build()
        .map_err(BenchError::client("building the worker"))?;
    let attempts = worker.attempts_counter();
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(worker.run(shutdown.clone()));
    let measured = async {
        tokio::time::sleep(IDLE_SETTLE).await;
        let log_before = client
            .status(pb::StatusRequest { without_state_hash: true })
            .await
            .map_err(BenchError::client("status"))?
            .last_log_index;
        let before = attempts();
        tokio::time::sleep(idle).await;
        let requests = attempts() - before;
        let log_after = client
            .status(pb::StatusRequest { without_state_hash: true })
            .await
            .map_err(BenchError::client("status"))?
            .last_log_index;
        Ok::<_, BenchError>(IdleWorkerFigure {
            seconds: idle.as_secs_f64(),
            requests_per_s: requests as f64 / idle.as_secs_f64(),
            raft_log_entries: log_after.saturating_sub(log_before),
        })
    }
    .await;
    shutdown.cancel();
    running.await?.map_err(BenchError::client("the idle worker"))?;
    measured
}

/// (c) Fills the cluster, then restarts a follower `runs` times.
async fn restarts(
    local: &LocalCluster,
    spec: &FiguresSpec,
    prefix: &str,
    printer: &mut Printer<'_>,
) -> Result<RestartFigure, BenchError> {
    let endpoints = local.cluster.addrs();
    let dial = local.dial();
    let leader = dial.find_leader(&endpoints).await?;
    let registrar = dial.client(&endpoints, leader)?;
    workload::register_capabilities(&registrar, 0).await?;
    printer.human(&format!("restart: filling {} finalized executions...", spec.executions))?;
    let fill = scale::fill(&dial, &endpoints, leader, 0, spec.executions, FILL_SUBMITTERS, prefix).await?;
    let leader_index = dial.status(&endpoints[leader]).await?.last_applied_index;
    printer.human(&format!(
        "  filled {} finalized executions in {:.1} s ({:.0} executions/s; leader applied index {leader_index})",
        fill.executions, fill.seconds, fill.per_s
    ))?;
    local.cluster.wait_applied(leader_index, cluster::WAIT).await?;
    let last_filled = format!("{prefix}-fill-{}", spec.executions.saturating_sub(1));
    let mut runs = Vec::new();
    for run in 0..spec.runs {
        let restart = scale::restart(local, &last_filled).await?;
        printer.human(&format!("  run {}: {}", run + 1, crate::report::restart_line(&restart).trim_start()))?;
        runs.push(restart);
    }
    let millis = |value: f64| Duration::from_secs_f64(value / 1e3);
    let serving = spread(&runs.iter().map(|run| millis(run.serving_ms)).collect::<Vec<_>>());
    let reads: Option<Vec<Duration>> = runs.iter().map(|run| run.read_ms.map(millis)).collect();
    let caught_up = spread(&runs.iter().map(|run| millis(run.caught_up_ms)).collect::<Vec<_>>());
    let largest_snapshot_bytes =
        local.cluster.ids().into_iter().filter_map(|id| local.snapshot_lines(id).ok()?.last_bytes).max();
    let restored = runs.iter().filter(|run| run.restored_from_snapshot).count();
    printer.human(&format!(
        "(c) restart of a node holding {} finalized executions (largest snapshot {}; {restored} of {} restarts restored \
         the state from a stored snapshot):",
        spec.executions,
        crate::report::megabytes(largest_snapshot_bytes),
        runs.len()
    ))?;
    printer.human(&format!("    spawn → serves gRPC (storage open, snapshot restored): {}", summary(&serving)))?;
    let read = reads.as_deref().map(spread);
    printer.human(&format!(
        "    spawn → serves a linearizable read (forwarded to the leader): {}",
        read.as_ref().map_or("a read failed (see the runs)".to_string(), summary)
    ))?;
    printer.human(&format!("    spawn → Status reports the leader's applied index: {}", summary(&caught_up)))?;
    Ok(RestartFigure { executions: spec.executions, fill, runs, serving, read, caught_up, largest_snapshot_bytes })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spreads_take_the_nearest_rank_median() {
        let runs = [Duration::from_millis(30), Duration::from_millis(10), Duration::from_millis(20)];
        let figure = spread(&runs);
        assert_eq!((figure.median_ms, figure.min_ms, figure.max_ms), (20.0, 10.0, 30.0));
        assert_eq!(figure.runs_ms, vec![30.0, 10.0, 20.0]);
        assert!(summary(&figure).starts_with("median 20.0 ms, spread 10.0–30.0 ms"), "{}", summary(&figure));
        assert_eq!(percentile(&[], 0.5), Duration::ZERO);
    }

    #[test]
    fn figure_names_are_kebab_case() {
        assert_eq!(serde_json::to_value(Figure::IdleWorker).expect("json"), "idle-worker");
        let parsed = <Figure as clap::ValueEnum>::from_str("idle-worker", false).expect("parses");
        assert_eq!(parsed, Figure::IdleWorker);
    }
}
