//! Scale mode: fill the cluster with many finalized executions, measure the
//! throughput with that much state retained, the nodes' memory and disk
//! footprint, and how long a follower takes to restart and catch up.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gavel_client::{pb, ClientConfig};
use gavel_proto::v1::execution_service_client::ExecutionServiceClient;
use serde::Serialize;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

use crate::cluster::{self, Dial, LocalCluster};
use crate::workload::{self, ConfigReport, ConfigSpec, SHARED_CAPABILITY, SHARED_QUEUE};
use crate::{procfs, BenchError, Printer, Workload};

/// Fill workers; each polls up to [`POLL_TASKS`] tasks and reports them concurrently.
const FILL_WORKERS: usize = 4;
/// Tasks per fill poll (the server's maximum).
const POLL_TASKS: u32 = 64;
/// Fill calls ride out long pauses (snapshots of a large state) instead of
/// failing the fill; the measurements keep the SDK's default timings.
fn fill_timings() -> ClientConfig {
    ClientConfig {
        call_timeout: Duration::from_secs(30),
        retry_budget: Duration::from_secs(300),
        connect_timeout: Duration::from_secs(1),
        ..ClientConfig::default()
    }
}
/// The window of the "recent" fill rate.
const RECENT: Duration = Duration::from_secs(10);

/// How one fill phase went.
#[derive(Debug, Clone, Serialize)]
pub struct FillReport {
    /// Finalized executions added in this phase.
    pub executions: u64,
    /// Duration of the phase (seconds).
    pub seconds: f64,
    /// Average rate of the phase (executions finalized per second).
    pub per_s: f64,
    /// Rate over the last 10 s of the phase, when it lasted that long.
    pub recent_per_s: Option<f64>,
}

/// Footprint of one node.
#[derive(Debug, Clone, Serialize)]
pub struct NodeFootprint {
    /// Raft node id (or the endpoint's position, for given endpoints).
    pub node: u64,
    /// Resident memory (VmRSS), when the pid is known.
    pub rss_bytes: Option<u64>,
    /// Bytes of the files in the node's data directory (local cluster only).
    pub data_dir_bytes: Option<u64>,
    /// Bytes allocated on disk for them.
    pub data_dir_allocated_bytes: Option<u64>,
    /// Size of the latest snapshot the node stored, from its log (local cluster only).
    pub snapshot_bytes: Option<u64>,
    /// Snapshots it stored since it started.
    pub snapshots_stored: Option<usize>,
    /// Log index covered by its latest snapshot.
    pub snapshot_index: Option<u64>,
    /// Its applied index.
    pub last_applied_index: Option<u64>,
}

/// Figures after reaching one retained count.
#[derive(Debug, Clone, Serialize)]
pub struct Checkpoint {
    /// Finalized executions retained when the measurement started (fill plus
    /// earlier measurements).
    pub retained: u64,
    /// Finalized executions retained after the measurement, when the footprint was taken.
    pub retained_after: u64,
    /// The fill phase that reached this count.
    pub fill: FillReport,
    /// Footprint of every node after the measurement.
    pub nodes: Vec<NodeFootprint>,
    /// The executions workload measured at this count.
    pub measurement: ConfigReport,
}

/// Restart of one follower after a SIGKILL.
#[derive(Debug, Clone, Serialize)]
pub struct RestartReport {
    /// The follower that was killed and restarted.
    pub node: u64,
    /// The leader's applied index it had to reach.
    pub leader_applied_index: u64,
    /// Its snapshot index before the kill.
    pub snapshot_index_before: Option<u64>,
    /// Spawn until its gRPC health service answered SERVING, which it does
    /// only once storage is open and the snapshot restored.
    pub serving_ms: f64,
    /// Spawn until a linearizable read of the last filled execution through
    /// it succeeded (it knows the leader again and forwards the read).
    pub read_ms: Option<f64>,
    /// Spawn until its Status showed the leader's applied index. (A Status
    /// after an apply hashes the whole state, so this includes one such hash.)
    pub caught_up_ms: f64,
    /// Its snapshot index once caught up.
    pub snapshot_index_after: Option<u64>,
    /// Log entries re-applied on top of the snapshot.
    pub entries_replayed: Option<u64>,
    /// Its log shows it restored the state from its stored snapshot at this start.
    pub restored_from_snapshot: bool,
    /// The linearizable read through it succeeded.
    pub read_ok: bool,
    /// Why that read failed.
    pub read_error: Option<String>,
}

/// Everything scale mode measured.
#[derive(Debug, Clone, Serialize)]
pub struct ScaleReport {
    /// Finalized executions to fill.
    pub target: u64,
    /// One entry per checkpoint (the checkpoint count, then the target).
    pub checkpoints: Vec<Checkpoint>,
    /// The follower restart, when the bench runs the cluster.
    pub restart: Option<RestartReport>,
    /// Every measurement passed its checks.
    pub ok: bool,
}

/// Scale-mode settings.
pub(crate) struct ScaleSpec {
    pub target: u64,
    pub checkpoint: u64,
    pub clients: usize,
    pub warmup: Duration,
    pub duration: Duration,
    pub leader_only: bool,
    pub verify_samples: usize,
}

/// Adds `count` finalized executions, numbered from `from`, as fast as
/// possible: `submitters` concurrent submitters and [`FILL_WORKERS`] workers
/// leasing batches, every connection its own, all pointed at the leader.
pub(crate) async fn fill(
    dial: &Dial,
    endpoints: &[String],
    leader: usize,
    from: u64,
    count: u64,
    submitters: usize,
    prefix: &str,
) -> Result<FillReport, BenchError> {
    let started = Instant::now();
    let end = from + count;
    let next = Arc::new(AtomicU64::new(from));
    let finalized = Arc::new(AtomicU64::new(0));
    let progress: Arc<Mutex<Vec<(Instant, u64)>>> = Arc::new(Mutex::new(vec![(started, 0)]));
    let mut tasks = tokio::task::JoinSet::new();
    for submitter in 0..submitters.max(1) {
        let (client, next, prefix) =
            (dial.client_with(endpoints, leader, fill_timings())?, next.clone(), prefix.to_string());
        tasks.spawn(async move {
            loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                if index >= end {
                    return Ok::<_, BenchError>(());
                }
                let execution_id = format!("{prefix}-fill-{index}");
                let submitted = client
                    .submit(pb::SubmitRequest {
                        request_id: format!("{execution_id}-submit"),
                        execution_id: Some(execution_id.clone()),
                        capability_id: SHARED_CAPABILITY.to_string(),
                        input_json: format!(r#"{{"index":{index}}}"#),
                        actor: Some(workload::agent(submitter)),
                        surface: "gavel-bench".to_string(),
                        correlation_id: None,
                    })
                    .await
                    .map_err(BenchError::client(format!("fill: submit {execution_id}")))?;
                if !matches!(submitted.outcome, Some(pb::submit_response::Outcome::Execution(_))) || !submitted.created
                {
                    let answer = format!("fill: submit {execution_id} answered {:?}", submitted.outcome);
                    return Err(BenchError::Unexpected(answer));
                }
            }
        });
    }
    for worker in 0..FILL_WORKERS {
        let (client, finalized, progress) =
            (dial.client_with(endpoints, leader, fill_timings())?, finalized.clone(), progress.clone());
        let worker_id = format!("{prefix}-f{from}-w{worker}");
        tasks.spawn(async move {
            let mut polls = 0u64;
            while finalized.load(Ordering::Relaxed) < count {
                polls += 1;
                let polled = client
                    .poll(pb::PollRequest {
                        request_id: format!("{worker_id}-poll-{polls}"),
                        worker_id: worker_id.clone(),
                        queues: vec![SHARED_QUEUE.to_string()],
                        max_tasks: POLL_TASKS,
                        wait_ms: 200,
                    })
                    .await
                    .map_err(BenchError::client("fill: poll"))?;
                let reports = polled.tasks.iter().map(|task| {
                    let lease_id = task.lease.as_ref().map_or(0, |lease| lease.lease_id);
                    let request = pb::ReportRequest {
                        request_id: format!("{}-report-{lease_id}", task.execution_id),
                        lease_id,
                        worker_id: worker_id.clone(),
                        outcome: Some(pb::report_request::Outcome::Completed(pb::ReportCompleted {
                            output_json: r#"{"ok":true}"#.to_string(),
                        })),
                    };
                    let client = client.clone();
                    async move { client.report(request).await }
                });
                for (task, reported) in polled.tasks.iter().zip(futures::future::join_all(reports).await) {
                    let execution = reported
                        .map_err(BenchError::client(format!("fill: report {}", task.execution_id)))?
                        .execution
                        .ok_or_else(|| BenchError::Unexpected("fill: a report reply without the execution".into()))?;
                    if execution.state != pb::ExecutionState::Completed as i32 {
                        return Err(BenchError::Unexpected(format!(
                            "fill: {} is in state {} after its report",
                            execution.execution_id, execution.state
                        )));
                    }
                }
                let done =
                    finalized.fetch_add(polled.tasks.len() as u64, Ordering::Relaxed) + polled.tasks.len() as u64;
                if !polled.tasks.is_empty() {
                    if let Ok(mut progress) = progress.lock() {
                        progress.push((Instant::now(), done));
                    }
                }
            }
            Ok(())
        });
    }
    let mut reported_at = Instant::now();
    loop {
        tokio::select! {
            joined = tasks.join_next() => match joined {
                None => break,
                Some(Ok(Ok(()))) => {}
                Some(Ok(Err(error))) => return Err(error),
                Some(Err(error)) => return Err(error.into()),
            },
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
        if reported_at.elapsed() >= Duration::from_secs(10) {
            reported_at = Instant::now();
            let done = finalized.load(Ordering::Relaxed);
            eprintln!(
                "  fill: {} of {count} finalized after {:.0} s ({:.0}/s)",
                done,
                started.elapsed().as_secs_f64(),
                done as f64 / started.elapsed().as_secs_f64()
            );
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let recent_per_s = progress.lock().ok().and_then(|progress| {
        let (last_at, last) = *progress.last()?;
        if last_at.duration_since(started) < RECENT {
            return None;
        }
        let (first_at, first) = *progress.iter().find(|(at, _)| last_at.duration_since(*at) <= RECENT)?;
        let span = last_at.duration_since(first_at).as_secs_f64();
        (span > 0.0).then(|| (last - first) as f64 / span)
    });
    Ok(FillReport { executions: count, seconds, per_s: count as f64 / seconds, recent_per_s })
}

/// Footprint of every node: memory from the pids, disk and snapshots from
/// the local cluster's directories and logs, indexes from Status.
async fn footprint(
    dial: &Dial,
    endpoints: &[String],
    pids: &[u32],
    local: Option<&LocalCluster>,
) -> Vec<NodeFootprint> {
    let mut nodes = Vec::new();
    for (position, endpoint) in endpoints.iter().enumerate() {
        let status = dial.status(endpoint).await.ok();
        // The local cluster's node ids are the endpoints' positions plus one.
        let id = position as u64 + 1;
        let (data_dir_bytes, data_dir_allocated_bytes) = local
            .and_then(|local| local.cluster.data_dir(id))
            .and_then(|dir| cluster::dir_bytes(dir).ok())
            .map_or((None, None), |(apparent, allocated)| (Some(apparent), Some(allocated)));
        let snapshots = local.and_then(|local| local.snapshot_lines(id).ok());
        nodes.push(NodeFootprint {
            node: id,
            rss_bytes: pids.get(position).and_then(|pid| procfs::resident_bytes(*pid).ok()),
            data_dir_bytes,
            data_dir_allocated_bytes,
            snapshot_bytes: snapshots.and_then(|lines| lines.last_bytes),
            snapshots_stored: snapshots.map(|lines| lines.stored),
            snapshot_index: status.as_ref().and_then(|status| status.snapshot_index),
            last_applied_index: status.as_ref().map(|status| status.last_applied_index),
        });
    }
    nodes
}

/// Waits until every endpoint has applied the leader's current index.
async fn wait_converged(dial: &Dial, endpoints: &[String], leader: usize) -> Result<(), BenchError> {
    let target = dial.status(&endpoints[leader]).await?.last_applied_index;
    let tls = dial.tls.as_ref();
    Ok(gavel_testkit::wait_applied_with(endpoints, target, cluster::STATUS_TIMEOUT, cluster::WAIT, tls).await?)
}

/// Deadline of one health check or read of a restart.
const RESTART_CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// SIGKILLs a follower, restarts it on its data, and times how long it takes
/// to serve gRPC, to serve a linearizable read of `last_filled` and to catch
/// up with the leader's applied index.
pub(crate) async fn restart(local: &LocalCluster, last_filled: &str) -> Result<RestartReport, BenchError> {
    let cluster = &local.cluster;
    let dial = local.dial();
    let leader = cluster.wait_for_leader(cluster::WAIT).await?;
    let leader_addr = cluster.addr(leader).ok_or(gavel_testkit::Error::UnknownNode(leader))?.to_string();
    let target = dial.status(&leader_addr).await?.last_applied_index;
    let follower = cluster
        .running()
        .into_iter()
        .find(|id| *id != leader)
        .ok_or_else(|| BenchError::Unexpected("no follower is running".to_string()))?;
    let follower_addr = cluster.addr(follower).ok_or(gavel_testkit::Error::UnknownNode(follower))?.to_string();
    let before = dial.status(&follower_addr).await?;
    let restores_before = local.snapshot_lines(follower)?.restored;
    let channel = cluster.channel(follower, RESTART_CALL_TIMEOUT)?;
    cluster.kill(follower)?;
    let spawned = Instant::now();
    cluster.start_node(follower)?;
    let too_late = |what: &str| {
        BenchError::Timeout(format!("node {follower} did not {what} within {:?} of its restart", cluster::WAIT))
    };
    loop {
        cluster.check_alive()?;
        if spawned.elapsed() > cluster::WAIT {
            return Err(too_late("answer a health check"));
        }
        let mut check = tonic::Request::new(HealthCheckRequest { service: String::new() });
        check.set_timeout(RESTART_CALL_TIMEOUT);
        match HealthClient::new(channel.clone()).check(check).await {
            Ok(response) if response.get_ref().status == ServingStatus::Serving as i32 => break,
            _ => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
    let serving = spawned.elapsed();
    let (mut read, mut read_error, mut last_refusal) = (None, None, String::new());
    while read.is_none() && read_error.is_none() {
        if spawned.elapsed() > cluster::WAIT {
            read_error = Some(format!("no read of {last_filled} through node {follower} succeeded: {last_refusal}"));
            break;
        }
        let mut request = tonic::Request::new(pb::GetExecutionRequest { execution_id: last_filled.to_string() });
        request.set_timeout(RESTART_CALL_TIMEOUT);
        match ExecutionServiceClient::new(channel.clone()).get_execution(request).await {
            Ok(response) => match response.into_inner() {
                pb::GetExecutionResponse { execution: Some(execution) }
                    if execution.state == pb::ExecutionState::Completed as i32 =>
                {
                    read = Some(spawned.elapsed());
                }
                other => read_error = Some(format!("read {last_filled} through node {follower}: {other:?}")),
            },
            Err(status) => {
                last_refusal = status.message().to_string();
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
    let status = loop {
        if spawned.elapsed() > cluster::WAIT {
            return Err(too_late(&format!("apply index {target}")));
        }
        cluster.check_alive()?;
        if let Ok(status) = dial.status(&follower_addr).await {
            if status.last_applied_index >= target {
                break status;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let caught_up = spawned.elapsed();
    let restored_from_snapshot = local.snapshot_lines(follower)?.restored > restores_before;
    Ok(RestartReport {
        node: follower,
        leader_applied_index: target,
        snapshot_index_before: before.snapshot_index,
        serving_ms: serving.as_secs_f64() * 1e3,
        read_ms: read.map(|read| read.as_secs_f64() * 1e3),
        caught_up_ms: caught_up.as_secs_f64() * 1e3,
        snapshot_index_after: status.snapshot_index,
        entries_replayed: status.snapshot_index.map(|index| target.saturating_sub(index)),
        restored_from_snapshot,
        read_ok: read_error.is_none(),
        read_error,
    })
}

/// Runs scale mode.
pub(crate) async fn run(
    dial: &Dial,
    endpoints: &[String],
    pids: &[u32],
    local: Option<&LocalCluster>,
    spec: &ScaleSpec,
    prefix: &str,
    printer: &mut Printer<'_>,
) -> Result<ScaleReport, BenchError> {
    let leader = dial.find_leader(endpoints).await?;
    let registrar = dial.client(endpoints, leader)?;
    workload::register_capabilities(&registrar, spec.clients).await?;
    let mut stops = vec![spec.checkpoint.min(spec.target), spec.target];
    stops.dedup();
    stops.retain(|stop| *stop > 0);
    let mut checkpoints = Vec::new();
    let (mut filled, mut retained) = (0u64, 0u64);
    for (phase, stop) in stops.iter().enumerate() {
        let count = stop - filled;
        printer.human(&format!("scale: filling {count} finalized executions (to {stop})..."))?;
        let leader = dial.find_leader(endpoints).await?;
        let fill = fill(dial, endpoints, leader, filled, count, spec.clients, prefix).await?;
        filled = *stop;
        retained += count;
        printer.human(&format!(
            "scale: {retained} retained; fill {} executions in {:.1} s = {:.0}/s (last 10 s: {})",
            fill.executions,
            fill.seconds,
            fill.per_s,
            fill.recent_per_s.map_or("-".to_string(), |rate| format!("{rate:.0}/s"))
        ))?;
        let current_pids = local.map_or_else(|| pids.to_vec(), |local| local.cluster.pids());
        let measure = ConfigSpec {
            workload: Workload::Executions,
            clients: spec.clients,
            warmup: spec.warmup,
            duration: spec.duration,
            leader_only: spec.leader_only,
            verify_samples: spec.verify_samples,
            retained: Some(retained),
        };
        let measurement =
            workload::run_config(dial, endpoints, leader, &current_pids, &measure, &format!("{prefix}-m{phase}"))
                .await?;
        printer.config(&measurement)?;
        let measured_at = retained;
        retained += measurement.completed_lifecycles;
        // The footprint once every node has applied everything, the measurement included.
        wait_converged(dial, endpoints, leader).await?;
        let nodes = footprint(dial, endpoints, &current_pids, local).await;
        printer.human(&format!("scale: footprint with {retained} finalized executions retained:"))?;
        for node in &nodes {
            printer.human(&crate::report::footprint_line(node))?;
        }
        checkpoints.push(Checkpoint { retained: measured_at, retained_after: retained, fill, nodes, measurement });
    }
    let restart = match local {
        Some(local) if filled > 0 => {
            printer.human("scale: SIGKILL of a follower, restart on its data...")?;
            let report = restart(local, &format!("{prefix}-fill-{}", filled - 1)).await?;
            printer.human(&crate::report::restart_line(&report))?;
            Some(report)
        }
        _ => {
            printer.human("scale: restart not measured (the bench did not start the cluster)")?;
            None
        }
    };
    let ok = checkpoints.iter().all(|checkpoint| checkpoint.measurement.ok)
        && restart.as_ref().is_none_or(|restart| restart.read_ok);
    Ok(ScaleReport { target: spec.target, checkpoints, restart, ok })
}
