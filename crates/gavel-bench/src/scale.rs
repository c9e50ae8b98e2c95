//! Scale mode: fill the cluster with many finalized executions, measure the
//! throughput with that much state retained, the nodes' memory and disk
//! footprint, the snapshots' size and build and install times, and how long
//! a follower takes to restart and catch up.
//!
//! One run, for N retained (`--scale N`):
//! 1. the nodes' resident sets before the fill (the baseline);
//! 2. fill to the checkpoint (10,000 by default), run the 64-client
//!    executions workload, take every node's footprint (VmRSS, VmHWM, each
//!    part of its data directory); then the same at N;
//! 3. in each measured window, the `snapshot built` lines of every node's
//!    log (their end and `took=`) give the build windows; lifecycles and
//!    calls that overlap one are "inside", the rest "outside", and their
//!    p99s are compared;
//! 4. the leader's last build (size, time) and its stored file;
//! 5. SIGKILL of a follower, restart on its data: until it serves, until
//!    it has caught up;
//! 6. a fourth node joins as a learner and must install the leader's
//!    snapshot (the log behind it is purged): install time and rate from its
//!    `snapshot installed` line, its peak resident set.
//!
//! The watchdog ([`crate::watchdog`]) runs beside all of it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use gavel_client::{pb, ClientConfig};
use gavel_proto::v1::execution_service_client::ExecutionServiceClient;
use serde::Serialize;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

use crate::cluster::{self, Dial, LocalCluster, SnapshotEvent};
use crate::stats::{self, Latency};
use crate::workload::{self, ConfigReport, ConfigSpec, SHARED_CAPABILITY, SHARED_QUEUE};
use crate::{procfs, watchdog, BenchError, Printer, Workload};

/// Fill workers; each polls up to [`POLL_TASKS`] tasks and reports them
/// concurrently, then polls again. A worker's round is a poll's commit plus
/// its reports' commits, so the workers bound the fill at about
/// `FILL_WORKERS * POLL_TASKS` per round: with 4 the fill ran at 820–840/s
/// with the machine's CPU not all used, with 16 at 1,130–1,230/s and
/// CPU-bound (2026-12-02, `--scale 100000`).
const FILL_WORKERS: usize = 16;
/// Tasks per fill poll (the server's maximum).
const POLL_TASKS: u32 = 64;
/// Submitted but not yet finalized executions the fill allows: the fill
/// workers' next 4 polls each (4,096), so they never wait for submissions, yet the
/// queue (hot state, in memory and in every snapshot) stays a few thousand
/// executions whatever N. Without a bound the submitters ran far ahead of the
/// workers: at 1M the queue reached about 100,000 executions, the snapshots
/// and the nodes' memory grew with it, and the fill fell to about 110/s. A
/// bound of 2 polls per worker with 4 workers (512) held the fill at about
/// 620/s instead of 1,500–2,200/s.
const FILL_BACKLOG_MAX: u64 = 4 * FILL_WORKERS as u64 * POLL_TASKS as u64;
/// How long a submitter waits when the backlog is full.
const BACKLOG_WAIT: Duration = Duration::from_millis(2);
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
/// Attempts of one fill report: the SDK retries what it knows to be
/// transient, but under a fill's load a stream can also fail with an h2
/// protocol error (seen as RESOURCE_EXHAUSTED) the SDK does not retry, and
/// an unreported lease would hold its execution for the capability's whole
/// attempt deadline. A report with the same request id is idempotent.
const FILL_REPORT_ATTEMPTS: u32 = 5;
/// Pause between two of those attempts.
const FILL_REPORT_PAUSE: Duration = Duration::from_millis(200);

/// [`gavel_client::Client::report`], retried up to [`FILL_REPORT_ATTEMPTS`] times.
async fn report_with_retries(
    client: &gavel_client::Client,
    request: pb::ReportRequest,
) -> Result<pb::ReportResponse, gavel_client::Error> {
    let mut attempt = 1;
    loop {
        match client.report(request.clone()).await {
            Err(error) if attempt < FILL_REPORT_ATTEMPTS => {
                tracing::debug!("fill: report attempt {attempt} failed: {error}");
                attempt += 1;
                tokio::time::sleep(FILL_REPORT_PAUSE).await;
            }
            result => return result,
        }
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
    /// Peak resident memory over the process's life (VmHWM).
    pub peak_rss_bytes: Option<u64>,
    /// Bytes of the files in the node's data directory (local cluster only).
    pub data_dir_bytes: Option<u64>,
    /// Bytes allocated on disk for them.
    pub data_dir_allocated_bytes: Option<u64>,
    /// Bytes allocated on disk per top-level entry of the data directory
    /// (`cold.redb`, `raft-log`, `raft`, `raft-snapshot`, ...).
    pub disk_parts: BTreeMap<String, u64>,
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
    /// Bytes per retained execution, per node.
    pub per_execution: Vec<PerExecution>,
    /// The executions workload measured at this count.
    pub measurement: ConfigReport,
    /// Its latencies inside and outside snapshot builds.
    pub builds: BuildWindows,
    /// The machine's load averages (1, 5, 15 min) after the measurement.
    pub load_average: Option<[f64; 3]>,
    /// The machine's available memory after the measurement.
    pub mem_available_bytes: Option<u64>,
    /// Free space under the data directory after the measurement (local cluster).
    pub disk_free_bytes: Option<u64>,
}

/// Bytes per retained execution on one node.
#[derive(Debug, Clone, Serialize)]
pub struct PerExecution {
    /// The node.
    pub node: u64,
    /// Resident-set growth over the node's baseline (before the fill),
    /// divided by the executions retained.
    pub memory_bytes: Option<f64>,
    /// Resident-set growth since the previous checkpoint divided by the
    /// executions added since (the marginal cost; at the first checkpoint,
    /// the same as `memory_bytes`).
    pub marginal_memory_bytes: Option<f64>,
    /// Bytes allocated on disk (whole data directory) per execution retained.
    pub disk_bytes: Option<f64>,
    /// The same, per part of the data directory.
    pub disk_parts: BTreeMap<String, f64>,
}

/// The measured window sorted by snapshot builds: every lifecycle (and
/// call) that overlapped a build of any node's is inside, the rest outside.
#[derive(Debug, Clone, Serialize, Default)]
pub struct BuildWindows {
    /// Builds (all nodes) that overlapped the measured window.
    pub builds: usize,
    /// Of them, the leader's.
    pub leader_builds: usize,
    /// Share of the window in which some node was building.
    pub building_share: f64,
    /// Longest of those builds (seconds).
    pub longest_build_s: Option<f64>,
    /// Execution lifecycles that overlapped a build.
    pub lifecycles_inside: Option<Latency>,
    /// Execution lifecycles that overlapped no build.
    pub lifecycles_outside: Option<Latency>,
    /// Calls (submit, poll, report) that overlapped a build.
    pub calls_inside: Option<Latency>,
    /// Calls that overlapped no build.
    pub calls_outside: Option<Latency>,
    /// Lifecycle p99 inside builds divided by p99 outside them.
    pub p99_ratio: Option<f64>,
}

/// The leader's last snapshot build.
#[derive(Debug, Clone, Serialize)]
pub struct SnapshotFigure {
    /// The leader.
    pub node: u64,
    /// Bytes of the snapshot (its `snapshot built` line).
    pub bytes: u64,
    /// Build time (source → fsynced file → stored), seconds.
    pub build_s: f64,
    /// Bytes per second of that build, in MB/s.
    pub build_mb_per_s: f64,
    /// Size of the snapshot file stored in its `raft-snapshot/`.
    pub stored_file_bytes: Option<u64>,
    /// Builds the leader logged since it started.
    pub builds: usize,
    /// The longest of them (seconds).
    pub longest_build_s: f64,
}

/// A fourth node joining by snapshot.
#[derive(Debug, Clone, Serialize)]
pub struct InstallReport {
    /// The new node's id.
    pub node: u64,
    /// The leader's snapshot index it had to install (at least).
    pub leader_snapshot_index: Option<u64>,
    /// It caught up by installing a snapshot (its log has a `snapshot
    /// installed` line); otherwise the leader still had the log it needed.
    pub by_snapshot: bool,
    /// Bytes of the snapshot it installed (its `snapshot installed` line).
    pub snapshot_bytes: Option<u64>,
    /// Install time on the new node (decode the spooled file, rewrite the cold store), seconds.
    pub install_s: Option<f64>,
    /// `snapshot_bytes / install_s`, in MB/s.
    pub install_mb_per_s: Option<f64>,
    /// The snapshot the leader sent, written out from its cold store's
    /// checkpoint (its last `snapshot ready to send` line): bytes.
    pub sent_bytes: Option<u64>,
    /// How long the leader took to write it out, seconds.
    pub sent_write_s: Option<f64>,
    /// Spawn until its Status showed the snapshot installed, milliseconds.
    pub installed_ms: f64,
    /// Spawn until it applied the leader's index, milliseconds.
    pub caught_up_ms: f64,
    /// Its peak resident set over its whole life (VmHWM).
    pub peak_rss_bytes: Option<u64>,
    /// Its resident set once caught up.
    pub rss_bytes: Option<u64>,
    /// A linearizable read of the last filled execution through it succeeded.
    pub read_ok: bool,
    /// Why that read failed.
    pub read_error: Option<String>,
    /// The machine's load averages when it was done.
    pub load_average: Option<[f64; 3]>,
}

/// The measurement at N against the one at the checkpoint.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// Retained at the checkpoint's measurement.
    pub checkpoint_retained: u64,
    /// Retained at the last measurement.
    pub retained: u64,
    /// Lifecycles/s at N divided by lifecycles/s at the checkpoint.
    pub throughput_ratio: f64,
    /// Lifecycle p99 at N divided by the one at the checkpoint.
    pub p99_ratio: Option<f64>,
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
    /// The machine's load averages when it had caught up.
    pub load_average: Option<[f64; 3]>,
}

/// Everything scale mode measured.
#[derive(Debug, Clone, Serialize)]
pub struct ScaleReport {
    /// Finalized executions to fill.
    pub target: u64,
    /// Every node's footprint before the fill (the memory baseline).
    pub baseline: Vec<NodeFootprint>,
    /// One entry per checkpoint (the checkpoint count, then the target).
    pub checkpoints: Vec<Checkpoint>,
    /// The measurement at N against the one at the checkpoint.
    pub comparison: Option<Comparison>,
    /// The leader's last snapshot build (local cluster).
    pub snapshot: Option<SnapshotFigure>,
    /// The follower restart, when the bench runs the cluster.
    pub restart: Option<RestartReport>,
    /// The fourth node's install, when the bench runs the cluster.
    pub install: Option<InstallReport>,
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
    /// Disk each node needs per retained execution, for the check before the fill.
    pub disk_per_execution: u64,
    /// The watchdog's disk floor, which the check keeps free.
    pub disk_free_min: u64,
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
        let (client, next, finalized, prefix) =
            (dial.client_with(endpoints, leader, fill_timings())?, next.clone(), finalized.clone(), prefix.to_string());
        tasks.spawn(async move {
            loop {
                // `next - from` counts submissions started, finished or not.
                while next.load(Ordering::Relaxed).saturating_sub(from)
                    >= finalized.load(Ordering::Relaxed) + FILL_BACKLOG_MAX
                    && next.load(Ordering::Relaxed) < end
                {
                    tokio::time::sleep(BACKLOG_WAIT).await;
                }
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
                    async move { report_with_retries(&client, request).await }
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
        nodes.push(node_footprint(id, pids.get(position).copied(), status.as_ref(), local));
    }
    nodes
}

/// Footprint of node `id` (process `pid`, its last `status`).
fn node_footprint(
    id: u64,
    pid: Option<u32>,
    status: Option<&pb::StatusResponse>,
    local: Option<&LocalCluster>,
) -> NodeFootprint {
    let dir = local.and_then(|local| local.cluster.data_dir(id));
    let (data_dir_bytes, data_dir_allocated_bytes) = dir
        .and_then(|dir| cluster::dir_bytes(dir).ok())
        .map_or((None, None), |(apparent, allocated)| (Some(apparent), Some(allocated)));
    let disk_parts = dir
        .and_then(|dir| cluster::dir_parts(dir).ok())
        .map(|parts| parts.into_iter().map(|(name, (_, allocated))| (name, allocated)).collect())
        .unwrap_or_default();
    let snapshots = local.and_then(|local| local.snapshot_lines(id).ok());
    NodeFootprint {
        node: id,
        rss_bytes: pid.and_then(|pid| procfs::resident_bytes(pid).ok()),
        peak_rss_bytes: pid.and_then(|pid| procfs::peak_resident_bytes(pid).ok()),
        data_dir_bytes,
        data_dir_allocated_bytes,
        disk_parts,
        snapshot_bytes: snapshots.and_then(|lines| lines.last_bytes),
        snapshots_stored: snapshots.map(|lines| lines.stored),
        snapshot_index: status.and_then(|status| status.snapshot_index),
        last_applied_index: status.map(|status| status.last_applied_index),
    }
}

/// Bytes per retained execution of every node in `nodes`, against its
/// `baseline` and the `previous` checkpoint's footprint (`previous_retained`).
fn per_execution(
    nodes: &[NodeFootprint],
    baseline: &[NodeFootprint],
    previous: Option<(&[NodeFootprint], u64)>,
    retained: u64,
) -> Vec<PerExecution> {
    let rss_of = |footprints: &[NodeFootprint], id: u64| {
        footprints.iter().find(|node| node.node == id).and_then(|node| node.rss_bytes)
    };
    let per = |bytes: f64, count: u64| (count > 0).then(|| bytes / count as f64);
    nodes
        .iter()
        .map(|node| {
            let growth = |since: Option<u64>| Some(node.rss_bytes? as f64 - since? as f64);
            let memory_bytes = growth(rss_of(baseline, node.node)).and_then(|growth| per(growth, retained));
            let marginal_memory_bytes = match previous {
                Some((previous, previous_retained)) => growth(rss_of(previous, node.node))
                    .and_then(|growth| per(growth, retained.saturating_sub(previous_retained))),
                None => memory_bytes,
            };
            PerExecution {
                node: node.node,
                memory_bytes,
                marginal_memory_bytes,
                disk_bytes: node.data_dir_allocated_bytes.and_then(|bytes| per(bytes as f64, retained)),
                disk_parts: node
                    .disk_parts
                    .iter()
                    .filter_map(|(name, bytes)| Some((name.clone(), per(*bytes as f64, retained)?)))
                    .collect(),
            }
        })
        .collect()
}

/// Microseconds since the Unix epoch of `at`, given one instant `reference`
/// known to be `reference_unix_us`.
fn unix_us(at: Instant, reference: Instant, reference_unix_us: i64) -> i64 {
    if at >= reference {
        reference_unix_us + (at - reference).as_micros() as i64
    } else {
        reference_unix_us - (reference - at).as_micros() as i64
    }
}

/// Now, in microseconds since the Unix epoch.
fn now_unix_us() -> i64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |since| since.as_micros() as i64)
}

/// The latencies of `spans` (start, end in µs) that overlap one of `builds`
/// (start, end in µs) and of those that overlap none.
fn split_by_builds(spans: &[(i64, i64)], builds: &[(i64, i64)]) -> (Option<Latency>, Option<Latency>) {
    let (mut inside, mut outside) = (stats::new_histogram(), stats::new_histogram());
    for &(start, end) in spans {
        let overlaps = builds.iter().any(|&(build_start, build_end)| start < build_end && end > build_start);
        let histogram = if overlaps { &mut inside } else { &mut outside };
        histogram.saturating_record(((end - start).max(1)) as u64);
    }
    let latency = |histogram: &hdrhistogram::Histogram<u64>| (!histogram.is_empty()).then(|| Latency::of(histogram));
    (latency(&inside), latency(&outside))
}

/// Share of `[window_start, window_end)` covered by the union of `builds`.
fn covered_share(builds: &[(i64, i64)], window_start: i64, window_end: i64) -> f64 {
    let mut clipped: Vec<(i64, i64)> = builds
        .iter()
        .map(|&(start, end)| (start.max(window_start), end.min(window_end)))
        .filter(|(start, end)| start < end)
        .collect();
    clipped.sort_unstable();
    let (mut covered, mut reach) = (0i64, window_start);
    for (start, end) in clipped {
        let start = start.max(reach);
        if end > start {
            covered += end - start;
            reach = end;
        }
    }
    if window_end > window_start {
        covered as f64 / (window_end - window_start) as f64
    } else {
        0.0
    }
}

/// Sorts a measurement's lifecycles and calls by the snapshot builds of
/// `builders` (node ids; `leader` among them) that overlapped its window.
#[allow(clippy::too_many_arguments)]
fn build_windows(
    local: &LocalCluster,
    builders: &[u64],
    leader: u64,
    window: (i64, i64),
    lifecycles: &[(i64, i64)],
    calls: &[(i64, i64)],
) -> BuildWindows {
    let mut builds = Vec::new();
    let mut leader_builds = 0;
    let mut longest: Option<f64> = None;
    for &id in builders {
        for event in local.snapshot_events(id, cluster::BUILT_LINE).unwrap_or_default() {
            let (start, end) = (event.start_unix_us(), event.end_unix_us);
            if start < window.1 && end > window.0 {
                builds.push((start, end));
                leader_builds += usize::from(id == leader);
                longest = Some(longest.map_or(event.took_s, |longest| longest.max(event.took_s)));
            }
        }
    }
    let (lifecycles_inside, lifecycles_outside) = split_by_builds(lifecycles, &builds);
    let (calls_inside, calls_outside) = split_by_builds(calls, &builds);
    let p99_ratio = match (&lifecycles_inside, &lifecycles_outside) {
        (Some(inside), Some(outside)) if outside.p99_ms > 0.0 => Some(inside.p99_ms / outside.p99_ms),
        _ => None,
    };
    BuildWindows {
        builds: builds.len(),
        leader_builds,
        building_share: covered_share(&builds, window.0, window.1),
        longest_build_s: longest,
        lifecycles_inside,
        lifecycles_outside,
        calls_inside,
        calls_outside,
        p99_ratio,
    }
}

/// The executions workload at `retained`, and, on the local cluster, its
/// latencies inside and outside the snapshot builds of the window.
#[allow(clippy::too_many_arguments)]
async fn measure_at(
    dial: &Dial,
    endpoints: &[String],
    leader: usize,
    pids: &[u32],
    local: Option<&LocalCluster>,
    spec: &ScaleSpec,
    retained: u64,
    prefix: &str,
) -> Result<(ConfigReport, BuildWindows), BenchError> {
    let measure = ConfigSpec {
        workload: Workload::Executions,
        clients: spec.clients,
        warmup: spec.warmup,
        duration: spec.duration,
        leader_only: spec.leader_only,
        verify_samples: spec.verify_samples,
        retained: Some(retained),
        cost: false,
        tool_runs: None,
    };
    let clocks = |window_start: Instant| async move { (window_start, Instant::now(), now_unix_us()) };
    let measured = workload::run_config_during(dial, endpoints, leader, pids, &measure, prefix, clocks).await?;
    let Some(local) = local else { return Ok((measured.report, BuildWindows::default())) };
    let (window_start, reference, reference_us) = measured.disruption;
    let to_us = |at: Instant| unix_us(at, reference, reference_us);
    let window = (to_us(window_start), to_us(window_start + spec.duration));
    let spans = |spans: &[(Instant, Instant)]| -> Vec<(i64, i64)> {
        spans.iter().map(|&(start, end)| (to_us(start), to_us(end))).collect()
    };
    let builders: Vec<u64> = (1..=endpoints.len() as u64).collect();
    let leader_id = leader as u64 + 1;
    let windows = build_windows(
        local,
        &builders,
        leader_id,
        window,
        &spans(&measured.lifecycle_spans),
        &spans(&measured.operation_spans),
    );
    Ok((measured.report, windows))
}

/// Waits until every endpoint has applied the leader's current index.
async fn wait_converged(dial: &Dial, endpoints: &[String], leader: usize) -> Result<(), BenchError> {
    let target = dial.status(&endpoints[leader]).await?.last_applied_index;
    let tls = dial.tls.as_ref();
    Ok(gavel_testkit::wait_applied_with(endpoints, target, cluster::STATUS_TIMEOUT, cluster::WAIT, tls).await?)
}

/// Deadline of one health check or read of a restart.
const RESTART_CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest wait for a new node to install the snapshot and catch up (a
/// snapshot of a million executions is about a gigabyte).
const INSTALL_WAIT: Duration = Duration::from_secs(600);

/// Reads `execution_id` through `channel` until it answers COMPLETED or
/// `bound` has passed since `since`: when it succeeded, or why not.
async fn read_through(
    channel: &tonic::transport::Channel,
    execution_id: &str,
    node: u64,
    since: Instant,
    bound: Duration,
) -> Result<Duration, String> {
    let mut last_refusal = String::new();
    loop {
        if since.elapsed() > bound {
            return Err(format!("no read of {execution_id} through node {node} succeeded: {last_refusal}"));
        }
        let mut request = tonic::Request::new(pb::GetExecutionRequest { execution_id: execution_id.to_string() });
        request.set_timeout(RESTART_CALL_TIMEOUT);
        match ExecutionServiceClient::new(channel.clone()).get_execution(request).await {
            Ok(response) => match response.into_inner() {
                pb::GetExecutionResponse { execution: Some(execution) }
                    if execution.state == pb::ExecutionState::Completed as i32 =>
                {
                    return Ok(since.elapsed());
                }
                other => return Err(format!("read {execution_id} through node {node}: {other:?}")),
            },
            Err(status) => {
                last_refusal = status.message().to_string();
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

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
    let read = read_through(&channel, last_filled, follower, spawned, cluster::WAIT).await;
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
        read_ms: read.as_ref().ok().map(|read| read.as_secs_f64() * 1e3),
        caught_up_ms: caught_up.as_secs_f64() * 1e3,
        snapshot_index_after: status.snapshot_index,
        entries_replayed: status.snapshot_index.map(|index| target.saturating_sub(index)),
        restored_from_snapshot,
        read_ok: read.is_ok(),
        read_error: read.err(),
        load_average: procfs::load_average().ok(),
    })
}

/// The leader's last `snapshot built` line and its stored snapshot file.
fn snapshot_figure(local: &LocalCluster, leader: u64) -> Result<Option<SnapshotFigure>, BenchError> {
    let events: Vec<SnapshotEvent> = local.snapshot_events(leader, cluster::BUILT_LINE)?;
    let Some(last) = events.last() else { return Ok(None) };
    let stored_file_bytes = local.cluster.data_dir(leader).and_then(|dir| {
        let listing = std::fs::read_dir(dir.join("raft-snapshot")).ok()?;
        listing
            .filter_map(Result::ok)
            .filter(|entry| entry.file_name().to_string_lossy().ends_with(".snap"))
            .filter_map(|entry| entry.metadata().ok().map(|metadata| metadata.len()))
            .max()
    });
    Ok(Some(SnapshotFigure {
        node: leader,
        bytes: last.bytes,
        build_s: last.took_s,
        build_mb_per_s: last.bytes as f64 / 1e6 / last.took_s.max(1e-6),
        stored_file_bytes,
        builds: events.len(),
        longest_build_s: events.iter().map(|event| event.took_s).fold(0.0, f64::max),
    }))
}

/// Adds a fourth node as a learner: the leader's log behind its snapshot is
/// purged, so the node must install the snapshot. Times the install (from
/// the node's log) and the catch-up, and reads `last_filled` through it.
async fn install(local: &mut LocalCluster, last_filled: &str) -> Result<InstallReport, BenchError> {
    let dial = local.dial();
    let leader = local.cluster.wait_for_leader(cluster::WAIT).await?;
    let leader_addr = local.cluster.addr(leader).ok_or(gavel_testkit::Error::UnknownNode(leader))?.to_string();
    let leader_status = dial.status(&leader_addr).await?;
    let node = local.cluster.add_node()?;
    let addr = local.cluster.addr(node).ok_or(gavel_testkit::Error::UnknownNode(node))?.to_string();
    let spawned = Instant::now();
    local.cluster.start_node(node)?;
    let admin = dial.client(std::slice::from_ref(&leader_addr), 0)?;
    admin
        .add_learner(pb::AddLearnerRequest {
            request_id: String::new(),
            node_id: node,
            addr: addr.clone(),
            wait_caught_up: false,
        })
        .await
        .map_err(BenchError::client(format!("adding node {node} as a learner")))?;
    let too_late = |what: &str| BenchError::Timeout(format!("node {node} did not {what} within {INSTALL_WAIT:?}"));
    let wanted_snapshot = leader_status.snapshot_index;
    let installed = loop {
        local.cluster.check_alive()?;
        if spawned.elapsed() > INSTALL_WAIT {
            return Err(too_late(&format!("install the snapshot at {wanted_snapshot:?}")));
        }
        if let Ok(status) = dial.status(&addr).await {
            // A snapshot from whichever node leads now (one elected since
            // `wanted_snapshot` was read sends its own, maybe at a lower index).
            let installed = status.snapshot_index.is_some() || wanted_snapshot.is_none();
            if installed && status.last_applied_index > 0 {
                break spawned.elapsed();
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let target = dial.status(&leader_addr).await?.last_applied_index;
    loop {
        local.cluster.check_alive()?;
        if spawned.elapsed() > INSTALL_WAIT {
            return Err(too_late(&format!("apply index {target}")));
        }
        if dial.status(&addr).await.is_ok_and(|status| status.last_applied_index >= target) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let caught_up = spawned.elapsed();
    let event = local.snapshot_events(node, cluster::INSTALLED_LINE)?.last().copied();
    let sent = local.snapshot_events(leader, cluster::SENT_LINE)?.last().copied();
    let pid = local.cluster.pid(node);
    let channel = local.cluster.channel(node, RESTART_CALL_TIMEOUT)?;
    let read = read_through(&channel, last_filled, node, Instant::now(), cluster::WAIT).await;
    Ok(InstallReport {
        node,
        leader_snapshot_index: wanted_snapshot,
        by_snapshot: event.is_some(),
        snapshot_bytes: event.map(|event| event.bytes),
        install_s: event.map(|event| event.took_s),
        install_mb_per_s: event.map(|event| event.bytes as f64 / 1e6 / event.took_s.max(1e-6)),
        sent_bytes: sent.map(|sent| sent.bytes),
        sent_write_s: sent.map(|sent| sent.took_s),
        installed_ms: installed.as_secs_f64() * 1e3,
        caught_up_ms: caught_up.as_secs_f64() * 1e3,
        peak_rss_bytes: pid.and_then(|pid| procfs::peak_resident_bytes(pid).ok()),
        rss_bytes: pid.and_then(|pid| procfs::resident_bytes(pid).ok()),
        read_ok: read.is_ok(),
        read_error: read.err(),
        load_average: procfs::load_average().ok(),
    })
}

/// Refuses a run whose data would not fit on the disk under `dir`: three
/// nodes and the one that joins, `disk_per_execution` each per execution,
/// must leave the watchdog's floor free.
fn check_fits(spec: &ScaleSpec, dir: &std::path::Path) -> Result<(), BenchError> {
    fits(spec, dir, watchdog::disk_free_bytes(dir)?)
}

/// [`check_fits`] with the free space given.
fn fits(spec: &ScaleSpec, dir: &std::path::Path, free: u64) -> Result<(), BenchError> {
    let need = spec.target.saturating_mul(spec.disk_per_execution).saturating_mul(4);
    if free < need.saturating_add(spec.disk_free_min) {
        return Err(BenchError::WouldNotFit(format!(
            "--scale {} needs about {:.1} GB under {} (4 nodes × {} executions × {} bytes, \
             --scale-disk-per-execution) plus the watchdog's floor of {:.1} GB (--watchdog-disk-min), \
             but {:.1} GB are free; not started",
            spec.target,
            need as f64 / 1e9,
            dir.display(),
            spec.target,
            spec.disk_per_execution,
            spec.disk_free_min as f64 / 1e9,
            free as f64 / 1e9
        )));
    }
    Ok(())
}

/// Runs scale mode.
pub(crate) async fn run(
    dial: &Dial,
    endpoints: &[String],
    pids: &[u32],
    local: Option<&mut LocalCluster>,
    spec: &ScaleSpec,
    prefix: &str,
    printer: &mut Printer<'_>,
) -> Result<ScaleReport, BenchError> {
    if let Some(local) = local.as_deref() {
        check_fits(spec, local.dir())?;
    }
    let leader = dial.find_leader(endpoints).await?;
    let registrar = dial.client(endpoints, leader)?;
    workload::register_capabilities(&registrar, spec.clients).await?;
    let baseline_pids = local.as_deref().map_or_else(|| pids.to_vec(), |local| local.cluster.pids());
    let baseline = footprint(dial, endpoints, &baseline_pids, local.as_deref()).await;
    printer.human("scale: footprint before the fill (the baseline):")?;
    for node in &baseline {
        printer.human(&crate::report::footprint_line(node))?;
    }
    let mut stops = vec![spec.checkpoint.min(spec.target), spec.target];
    stops.dedup();
    stops.retain(|stop| *stop > 0);
    let mut checkpoints: Vec<Checkpoint> = Vec::new();
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
        let current_pids = local.as_deref().map_or_else(|| pids.to_vec(), |local| local.cluster.pids());
        let (measurement, builds) = measure_at(
            dial,
            endpoints,
            leader,
            &current_pids,
            local.as_deref(),
            spec,
            retained,
            &format!("{prefix}-m{phase}"),
        )
        .await?;
        printer.config(&measurement)?;
        printer.human(&crate::report::builds_line(&builds))?;
        let measured_at = retained;
        retained += measurement.completed_lifecycles;
        // The footprint once every node has applied everything, the measurement included.
        wait_converged(dial, endpoints, leader).await?;
        let nodes = footprint(dial, endpoints, &current_pids, local.as_deref()).await;
        let previous = checkpoints.last().map(|last| (last.nodes.as_slice(), last.retained_after));
        let per_execution = per_execution(&nodes, &baseline, previous, retained);
        printer.human(&format!("scale: footprint with {retained} finalized executions retained:"))?;
        for (node, per) in nodes.iter().zip(&per_execution) {
            printer.human(&crate::report::footprint_line(node))?;
            printer.human(&crate::report::per_execution_line(per))?;
        }
        checkpoints.push(Checkpoint {
            retained: measured_at,
            retained_after: retained,
            fill,
            nodes,
            per_execution,
            measurement,
            builds,
            load_average: procfs::load_average().ok(),
            mem_available_bytes: procfs::mem_available_bytes().ok(),
            disk_free_bytes: local.as_deref().and_then(|local| watchdog::disk_free_bytes(local.dir()).ok()),
        });
    }
    let comparison = match (checkpoints.first(), checkpoints.last()) {
        (Some(first), Some(last)) if checkpoints.len() > 1 && first.measurement.lifecycles_per_s > 0.0 => {
            let p99 = |checkpoint: &Checkpoint| {
                checkpoint.measurement.lifecycle_latency.get("execution").map(|latency| latency.p99_ms)
            };
            Some(Comparison {
                checkpoint_retained: first.retained,
                retained: last.retained,
                throughput_ratio: last.measurement.lifecycles_per_s / first.measurement.lifecycles_per_s,
                p99_ratio: match (p99(first), p99(last)) {
                    (Some(first), Some(last)) if first > 0.0 => Some(last / first),
                    _ => None,
                },
            })
        }
        _ => None,
    };
    let last_filled = format!("{prefix}-fill-{}", filled.saturating_sub(1));
    let (mut snapshot, mut restart_report, mut install_report) = (None, None, None);
    match local {
        Some(local) if filled > 0 => {
            let leader = local.cluster.wait_for_leader(cluster::WAIT).await?;
            snapshot = snapshot_figure(local, leader)?;
            printer.human(&crate::report::snapshot_line(snapshot.as_ref()))?;
            printer.human("scale: SIGKILL of a follower, restart on its data...")?;
            let report = restart(local, &last_filled).await?;
            printer.human(&crate::report::restart_line(&report))?;
            restart_report = Some(report);
            printer.human("scale: a fourth node joins as a learner and installs the leader's snapshot...")?;
            let report = install(local, &last_filled).await?;
            printer.human(&crate::report::install_line(&report))?;
            install_report = Some(report);
        }
        _ => {
            printer.human("scale: restart and install not measured (the bench did not start the cluster)")?;
        }
    }
    let ok = checkpoints.iter().all(|checkpoint| checkpoint.measurement.ok)
        && restart_report.as_ref().is_none_or(|restart| restart.read_ok)
        && install_report.as_ref().is_none_or(|install| install.read_ok);
    Ok(ScaleReport {
        target: spec.target,
        baseline,
        checkpoints,
        comparison,
        snapshot,
        restart: restart_report,
        install: install_report,
        ok,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_are_inside_when_they_overlap_a_build() {
        let builds = [(100, 200), (500, 600)];
        let spans = [(0, 50), (90, 110), (150, 160), (199, 300), (200, 300), (450, 800), (700, 750)];
        let (inside, outside) = split_by_builds(&spans, &builds);
        assert_eq!(inside.expect("some inside").count, 4);
        assert_eq!(outside.expect("some outside").count, 3);
        let (inside, outside) = split_by_builds(&spans, &[]);
        assert!(inside.is_none());
        assert_eq!(outside.expect("all outside").count, spans.len() as u64);
    }

    #[test]
    fn the_building_share_is_the_union_clipped_to_the_window() {
        assert_eq!(covered_share(&[], 0, 1000), 0.0);
        assert_eq!(covered_share(&[(-500, 250)], 0, 1000), 0.25);
        // Overlapping builds of two nodes count once.
        assert_eq!(covered_share(&[(100, 400), (300, 600), (900, 2000)], 0, 1000), 0.6);
        assert_eq!(covered_share(&[(0, 1000)], 0, 1000), 1.0);
    }

    #[test]
    fn instants_map_to_unix_time_both_ways() {
        let reference = Instant::now();
        let later = reference + Duration::from_millis(1500);
        assert_eq!(unix_us(later, reference, 1_000_000_000), 1_001_500_000);
        assert_eq!(unix_us(reference, later, 1_000_000_000), 998_500_000);
    }

    fn node(id: u64, rss: u64, disk: u64) -> NodeFootprint {
        NodeFootprint {
            node: id,
            rss_bytes: Some(rss),
            peak_rss_bytes: Some(rss),
            data_dir_bytes: Some(disk),
            data_dir_allocated_bytes: Some(disk),
            disk_parts: BTreeMap::from([("cold.redb".to_string(), disk / 2), ("raft-log".to_string(), disk / 2)]),
            snapshot_bytes: None,
            snapshots_stored: None,
            snapshot_index: None,
            last_applied_index: None,
        }
    }

    #[test]
    fn bytes_per_execution_against_the_baseline_and_the_last_checkpoint() {
        let baseline = [node(1, 80_000_000, 1_000_000)];
        let at_10k = [node(1, 90_000_000, 21_000_000)];
        let at_100k = [node(1, 180_000_000, 201_000_000)];
        let first = per_execution(&at_10k, &baseline, None, 10_000);
        assert_eq!(first[0].memory_bytes, Some(1000.0));
        assert_eq!(first[0].marginal_memory_bytes, Some(1000.0));
        assert_eq!(first[0].disk_bytes, Some(2100.0));
        assert_eq!(first[0].disk_parts["cold.redb"], 1050.0);
        let second = per_execution(&at_100k, &baseline, Some((&at_10k, 10_000)), 100_000);
        assert_eq!(second[0].memory_bytes, Some(1000.0));
        assert_eq!(second[0].marginal_memory_bytes, Some(1000.0));
        assert_eq!(second[0].disk_bytes, Some(2010.0));
        assert!(per_execution(&at_10k, &baseline, None, 0)[0].memory_bytes.is_none());
    }

    #[test]
    fn a_run_that_would_not_fit_is_refused() {
        let spec = |target: u64| ScaleSpec {
            target,
            checkpoint: 10,
            clients: 1,
            warmup: Duration::ZERO,
            duration: Duration::from_secs(1),
            leader_only: false,
            verify_samples: 1,
            disk_per_execution: 1_000_000,
            disk_free_min: watchdog::DISK_FREE_MIN_BYTES,
        };
        // Decided on the free space given, not on this machine's: 4 nodes ×
        // 1,000 executions × 1 MB is 4 GB, plus the 4 GB floor.
        let dir = std::path::Path::new("/data");
        assert!(fits(&spec(1000), dir, 8_000_000_000).is_ok());
        let error = fits(&spec(1000), dir, 7_999_999_999).expect_err("a byte short");
        let text = error.to_string();
        assert!(text.contains("needs about 4.0 GB under /data") && text.contains("8.0 GB are free"), "{text}");
        assert!(text.contains("not started") && text.contains("--watchdog-disk-min"), "{text}");
        assert!(fits(&spec(u64::MAX), dir, u64::MAX - 1).is_err(), "the need saturates instead of wrapping");
        // The check reads the disk under the directory it is given.
        assert!(check_fits(&spec(1_000_000_000), &std::env::temp_dir()).is_err(), "a petabyte does not fit");
    }
}
