//! `gavel-lab bench`: closed-loop load against a durable three-node cluster.
//!
//! [`run`] drives closed-loop clients (each runs one lifecycle after another)
//! against given endpoints or, by default, a local three-node cluster of
//! `gavel node` processes it starts on loopback (full durability, fsync on)
//! and kills at the end. For each `--clients` configuration it reports
//! lifecycles and operations per second, per-operation latency (HDR
//! histograms, microsecond precision) and CPU seconds per operation of the
//! nodes and of the load generator, read from `/proc`. Every answer is
//! checked; any unexpected error makes the outcome not ok. On the local
//! cluster (each node started with `--metrics-listen`) it also prints where
//! one command's time went, per stage (see `stages`).
//!
//! Workloads:
//! - `approvals`: CreateApproval (actor A), DecideApproval approve (actor B),
//!   ConsumeApproval with a fresh execution id;
//! - `executions`: Submit to the client's own capability and queue, Poll
//!   (the client's own raw worker leases it), Report completed;
//! - `mixed`: even clients run approvals, odd clients executions;
//! - `governed`: the governed tool call of issue 42 (see [`governed`]):
//!   Submit of a capability that needs a human approval, WaitApproval while
//!   another actor's DecideApproval approves, ResumeAndWait; an in-process
//!   `gavel_client::Worker` as its own principal leases, runs the tool once
//!   and reports. Every tool run is counted; a run twice fails the run.
//!
//! `--scale N` runs scale mode instead (see `scale`): fill N finalized
//! executions, measure the executions workload after a checkpoint (10 000)
//! and after N (also split into calls inside and outside snapshot builds),
//! report node memory (VmRSS, VmHWM, bytes per execution), each part of the
//! data directories, the leader's snapshot size and build time, time a
//! follower's restart after SIGKILL and a fourth node's snapshot install,
//! and print the targets table. A watchdog (see `watchdog`) stops the run,
//! killing its nodes, when the machine's available memory or the disk under
//! the data directory falls below a floor, or the run passes its deadline;
//! a run that would not fit on the disk is not started.
//!
//! `--figures failover,lifecycle,cancel,idle-worker,restart` runs figures mode
//! instead (see [`figures`]): leader failover, sequential lifecycle latency,
//! cancellation latency, an idle worker's load and a follower's restart with
//! many executions, each the median and spread of `--figure-runs` runs.
//!
//! `--fault kill-follower|partition-follower|pause-follower|kill-leader`
//! runs fault mode instead (see [`fault`]): the workload with the largest
//! `--clients` count while one fault is injected in the middle of the
//! measured window; it prints ok lifecycles per one-second bin and how far
//! and how long the rate fell. `--rolling-restart` (see [`rolling`])
//! restarts the nodes one at a time under the same load and reports each
//! node's downtime and every failed lifecycle.
//!
//! The local cluster is a [`gavel_testkit::Cluster`], secure by default:
//! its nodes serve mutual TLS and the bench authenticates as one principal,
//! `service:bench` (the cluster's first admin, granting itself what the
//! workloads need); `--insecure` runs the nodes plaintext for comparison.
//! Against `--endpoints` the bench takes its credentials from the `GAVEL_CA`,
//! `GAVEL_CERT`, `GAVEL_KEY`, `GAVEL_TOKEN` and `GAVEL_INSECURE` variables,
//! as the CLI does. The crate must not
//! depend on the node's internals (`gavel-core`, `gavel-raft`,
//! `gavel-server`): it measures real `gavel node` processes through the SDK
//! and the public gRPC API. Errors are [`BenchError`].
//!
//! With `--json`, standard output carries one JSON object per configuration
//! and a last line `{"summary": {..., "ok": bool}}`; the human-readable
//! tables go to standard error.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

mod cluster;
pub mod cost;
mod error;
pub mod fault;
pub mod figures;
pub mod governed;
pub mod procfs;
mod report;
pub mod rolling;
mod scale;
mod stages;
mod stats;
pub mod watchdog;
mod workload;

pub use cost::{CostReport, NodeCost};
pub use error::BenchError;
pub use fault::{Fault, FaultReport, Injection};
pub use figures::{Figure, FiguresReport};
pub use rolling::{NodeRestart, RollingReport};
pub use scale::{
    BuildWindows, Checkpoint, Comparison, FillReport, InstallReport, NodeFootprint, PerExecution, RestartReport,
    ScaleReport, SnapshotFigure,
};
pub use stats::Latency;
pub use workload::{ConfigReport, CpuReport};

/// What each closed-loop client runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Workload {
    /// Create, decide (approve by another actor), consume.
    Approvals,
    /// Submit, poll (lease), report completed.
    Executions,
    /// Half the clients run approvals, half executions.
    Mixed,
    /// The governed tool call: submit (approval required), then resume on
    /// the decision and wait for the result while another actor approves
    /// (`ResumeAndWait` with `await_decision`, decision 0108); an
    /// in-process SDK worker produces the result (see `governed`).
    Governed,
    /// The governed tool call as decision 0103 has it: wait for the
    /// decision while another actor approves, then resume and wait.
    #[value(name = "governed-wait")]
    GovernedWait,
}

impl Workload {
    /// The workload's name as given on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Approvals => "approvals",
            Workload::Executions => "executions",
            Workload::Mixed => "mixed",
            Workload::Governed => "governed",
            Workload::GovernedWait => "governed-wait",
        }
    }

    /// Either governed workload: an in-process worker runs the tool.
    pub fn is_governed(self) -> bool {
        matches!(self, Workload::Governed | Workload::GovernedWait)
    }
}

/// Parses a duration such as `10s`, `500ms`, `2m` or `1.5s` (a bare number
/// is seconds).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number.parse().map_err(|_| format!("{text:?} is not a duration such as 10s or 500ms"))?;
    let seconds = match unit.trim() {
        "" | "s" => value,
        "ms" => value / 1e3,
        "m" | "min" => value * 60.0,
        "h" => value * 3600.0,
        other => return Err(format!("unknown unit {other:?} in {text:?} (use ms, s, m or h)")),
    };
    if !seconds.is_finite() || seconds < 0.0 {
        return Err(format!("{text:?} is not a valid duration"));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// `gavel-lab bench`: closed-loop throughput, latency and CPU per operation of a
/// durable three-node cluster.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// Lifecycle each client runs: approvals (create, decide, consume), executions (submit, poll, report),
    /// mixed (half each), governed (submit needing approval, then resume on the decision and wait while another
    /// actor decides; an in-process worker runs the tool) or governed-wait (the same, waiting for the decision
    /// before resuming).
    #[arg(long, value_enum, default_value = "approvals")]
    pub workload: Workload,
    /// Closed-loop client counts; each configuration runs in turn on the same cluster.
    #[arg(long, value_delimiter = ',', default_value = "1,16,64")]
    pub clients: Vec<usize>,
    /// Measured time per configuration (e.g. 10s, 500ms).
    #[arg(long, value_parser = parse_duration, default_value = "10s")]
    pub duration: Duration,
    /// Unmeasured time before each measurement.
    #[arg(long, value_parser = parse_duration, default_value = "2s")]
    pub warmup: Duration,
    /// Benchmark these nodes (host:port,...) instead of starting a local three-node cluster.
    #[arg(long, value_delimiter = ',')]
    pub endpoints: Vec<String>,
    /// Pids of the nodes behind --endpoints (same order), to measure their CPU and memory.
    #[arg(long, value_delimiter = ',', requires = "endpoints")]
    pub node_pids: Vec<u32>,
    /// Point every client at the leader instead of spreading them round-robin over the nodes.
    #[arg(long)]
    pub leader_only: bool,
    /// The gavel binary for the local cluster (default: $GAVEL_BIN, else this executable when it is gavel, else
    /// gavel in the cargo target directory next to it).
    #[arg(long, conflicts_with = "endpoints")]
    pub gavel_binary: Option<PathBuf>,
    /// Extra flag for every local `gavel node`, repeatable (e.g. --node-flag=--heartbeat-ms=100).
    #[arg(long, allow_hyphen_values = true, conflicts_with = "endpoints")]
    pub node_flag: Vec<String>,
    /// Parent directory of the local cluster's data (default: the system temp dir).
    #[arg(long, conflicts_with = "endpoints")]
    pub data_dir: Option<PathBuf>,
    /// Keep the local cluster's data directories and node logs after the run (a failed run keeps them anyway).
    #[arg(long, conflicts_with = "endpoints")]
    pub keep_data: bool,
    /// Print one JSON object per configuration and a final summary line on stdout (tables go to stderr).
    #[arg(long)]
    pub json: bool,
    /// Lifecycles per configuration re-read at the end to verify their final state.
    #[arg(long, default_value_t = 8)]
    pub verify_samples: usize,
    /// Scale mode: fill the cluster with this many finalized executions (instead of the workloads).
    #[arg(long)]
    pub scale: Option<u64>,
    /// Scale mode: also measure at this many retained executions.
    #[arg(long, default_value_t = 10_000, requires = "scale")]
    pub scale_checkpoint: u64,
    /// Scale mode: concurrent submitters of the fill and clients of each measurement.
    #[arg(long, default_value_t = 64, requires = "scale")]
    pub scale_clients: usize,
    /// Scale mode: disk each node needs per retained execution (measured: about 6 KB); a run whose four nodes
    /// would not fit above --watchdog-disk-min is not started.
    #[arg(long, value_parser = watchdog::parse_bytes, default_value = "6K", requires = "scale")]
    pub scale_disk_per_execution: u64,
    /// Scale mode: the whole run's deadline; past it the watchdog stops the run.
    #[arg(long, value_parser = parse_duration, default_value = "25m", requires = "scale")]
    pub scale_deadline: Duration,
    /// Scale mode: stop the run (killing its nodes) when the machine's MemAvailable falls below this.
    #[arg(long, value_parser = watchdog::parse_bytes, default_value = "2.5G", requires = "scale")]
    pub watchdog_mem_min: u64,
    /// Scale mode: stop the run (killing its nodes) when the free space under the data directory falls below
    /// this.
    #[arg(long, value_parser = watchdog::parse_bytes, default_value = "4G", requires = "scale")]
    pub watchdog_disk_min: u64,
    /// Figures mode: measure these figures instead of the workloads, comma-separated: failover, lifecycle,
    /// cancel, idle-worker, restart (on the local cluster).
    #[arg(long, value_enum, value_delimiter = ',', conflicts_with_all = ["endpoints", "scale"])]
    pub figures: Vec<Figure>,
    /// Figures mode: runs per figure, reported as median and spread.
    #[arg(long, default_value_t = 3, requires = "figures")]
    pub figure_runs: usize,
    /// Figures mode, lifecycle: sequential approval lifecycles per run.
    #[arg(long, default_value_t = 300, requires = "figures")]
    pub figure_lifecycles: usize,
    /// Figures mode, restart: finalized executions the cluster holds when a follower restarts.
    #[arg(long, default_value_t = 100_000, requires = "figures")]
    pub figure_executions: u64,
    /// Figures mode, cancel: cancellations per heartbeat interval (500 ms and 100 ms).
    #[arg(long, default_value_t = 100, requires = "figures")]
    pub figure_cancels: usize,
    /// Figures mode, idle-worker: how long the idle worker is watched.
    #[arg(long, value_parser = parse_duration, default_value = "30s", requires = "figures")]
    pub figure_idle: Duration,
    /// Run the local cluster `--insecure` (plaintext, no authentication), to
    /// compare with the default, TLS.
    #[arg(long, conflicts_with = "endpoints")]
    pub insecure: bool,
    /// Fault mode: inject this fault into one node in the middle of the measured window (on the local cluster,
    /// with the largest --clients count) and report ok lifecycles per second.
    #[arg(long, value_enum, conflicts_with_all = ["endpoints", "scale", "figures"])]
    pub fault: Option<Fault>,
    /// Fault mode: how long the fault is held before the node is started again, resumed or reconnected.
    #[arg(long, value_parser = parse_duration, default_value = "3s", requires = "fault")]
    pub fault_hold: Duration,
    /// Also print what one operation costs each node: CPU time, context switches, system calls (with `perf`),
    /// read and write calls, bytes written to disk and in all (see docs/performance.md).
    #[arg(long, conflicts_with_all = ["scale", "figures", "fault", "rolling_restart"])]
    pub cost: bool,
    /// Rolling-restart mode: restart the local cluster's nodes one at a time (SIGTERM, start, catch up) under
    /// the load of the largest --clients count; report each node's downtime and every failed lifecycle.
    #[arg(long, conflicts_with_all = ["endpoints", "scale", "figures", "fault"])]
    pub rolling_restart: bool,
}

/// What a run produced. The caller exits non-zero unless `ok`.
#[derive(Debug, Clone)]
pub struct BenchOutcome {
    /// No error, every self-check passed.
    pub ok: bool,
    /// One report per `--clients` configuration (empty in scale and figures mode).
    pub configs: Vec<ConfigReport>,
    /// Scale mode's figures.
    pub scale: Option<ScaleReport>,
    /// Figures mode's figures.
    pub figures: Option<FiguresReport>,
    /// Fault mode's figures.
    pub fault: Option<FaultReport>,
    /// Rolling-restart mode's figures.
    pub rolling: Option<RollingReport>,
    /// The summary object printed last with `--json` (without the `summary` wrapper).
    pub summary: serde_json::Value,
}

/// Where output goes: tables to `out`, or with JSON, tables to stderr and
/// JSON lines to `out`.
pub(crate) struct Printer<'a> {
    out: &'a mut (dyn Write + Send),
    json: bool,
}

impl Printer<'_> {
    /// A human-readable line (or block).
    pub(crate) fn human(&mut self, text: &str) -> Result<(), BenchError> {
        let text = text.trim_end_matches('\n');
        if self.json {
            eprintln!("{text}");
        } else {
            writeln!(self.out, "{text}")?;
            self.out.flush()?;
        }
        Ok(())
    }

    /// A JSON line (only with `--json`).
    fn json_line(&mut self, value: &serde_json::Value) -> Result<(), BenchError> {
        if self.json {
            writeln!(self.out, "{value}")?;
            self.out.flush()?;
        }
        Ok(())
    }

    /// A finished configuration: its table, and its JSON object.
    pub(crate) fn config(&mut self, config: &ConfigReport) -> Result<(), BenchError> {
        self.human(&report::config_table(config))?;
        self.json_line(&serde_json::to_value(config)?)
    }
}

/// Runs the benchmark, printing to standard output.
pub async fn run(args: BenchArgs) -> Result<BenchOutcome, BenchError> {
    let mut stdout = std::io::stdout();
    run_to(args, &mut stdout).await
}

/// Runs the benchmark, printing to `out` (see [`BenchArgs::json`]). An error
/// is returned for a run that could not be carried out (after a final
/// summary line with `"ok": false` in JSON mode); failed self-checks give an
/// outcome that is not ok.
pub async fn run_to(args: BenchArgs, out: &mut (dyn Write + Send)) -> Result<BenchOutcome, BenchError> {
    let mut printer = Printer { out, json: args.json };
    let result = tokio::select! {
        result = run_inner(&args, &mut printer) => result,
        _ = tokio::signal::ctrl_c() => Err(BenchError::Interrupted),
    };
    match result {
        Ok(outcome) => Ok(outcome),
        Err(error) => {
            let summary = serde_json::json!({ "ok": false, "error": error.to_string() });
            let _ = printer.json_line(&serde_json::json!({ "summary": summary }));
            Err(error)
        }
    }
}

fn validate(args: &BenchArgs) -> Result<(), BenchError> {
    let invalid = |message: &str| Err(BenchError::Invalid(message.to_string()));
    let measures_workloads = args.scale.is_none() && args.figures.is_empty();
    if args.fault.is_some() && args.fault_hold.is_zero() {
        return invalid("--fault-hold must be positive");
    }
    if measures_workloads && (args.clients.is_empty() || args.clients.contains(&0)) {
        return invalid("--clients needs one or more counts, each at least 1");
    }
    if args.duration.is_zero() {
        return invalid("--duration must be positive");
    }
    if args.scale == Some(0) || args.scale.is_some() && args.scale_clients == 0 {
        return invalid("--scale and --scale-clients must be positive");
    }
    if args.workload.is_governed() && (args.scale.is_some() || args.fault.is_some() || args.rolling_restart) {
        return invalid(
            "--workload governed runs in the workload mode only (no --scale, --fault or --rolling-restart)",
        );
    }
    if args.scale.is_some() && args.scale_deadline.is_zero() {
        return invalid("--scale-deadline must be positive");
    }
    if args.cost && !args.endpoints.is_empty() && args.node_pids.is_empty() {
        return invalid("--cost with --endpoints needs --node-pids (one pid per endpoint)");
    }
    if !args.node_pids.is_empty() && args.node_pids.len() != args.endpoints.len() {
        return invalid("--node-pids needs one pid per endpoint, in the same order");
    }
    let figure_counts = [args.figure_runs, args.figure_lifecycles, args.figure_cancels];
    if figure_counts.contains(&0) || args.figure_executions == 0 || args.figure_idle.is_zero() {
        return invalid("--figure-runs, --figure-lifecycles, --figure-executions, --figure-cancels and --figure-idle must be positive");
    }
    Ok(())
}

/// A short tag that keeps ids of this run apart from earlier runs on the same cluster.
fn run_tag() -> String {
    let millis = gavel_testkit::wall_clock_ms();
    format!("b{:x}{:x}", millis % (1 << 40), std::process::id() % 4096)
}

async fn run_inner(args: &BenchArgs, printer: &mut Printer<'_>) -> Result<BenchOutcome, BenchError> {
    validate(args)?;
    let tag = run_tag();
    let mut local = None;
    let (endpoints, binary, dial) = if args.endpoints.is_empty() {
        let binary = gavel_testkit::resolve_gavel_binary(args.gavel_binary.as_deref())?;
        printer.human(&format!(
            "starting a local three-node cluster of {} ({})",
            binary.display(),
            if args.insecure { "--insecure: plaintext" } else { "TLS, as service:bench" }
        ))?;
        let started = std::time::Instant::now();
        let namespaces = args.fault.is_some_and(Fault::needs_namespaces);
        let cluster = cluster::LocalCluster::start_in(
            binary.clone(),
            args.data_dir.as_deref(),
            &args.node_flag,
            args.insecure,
            namespaces,
        )
        .await?;
        printer.human(&format!(
            "cluster {} elected a leader after {:.1} s; data and logs in {}",
            cluster.cluster.addrs().join(","),
            started.elapsed().as_secs_f64(),
            cluster.dir().display()
        ))?;
        let endpoints = cluster.cluster.addrs();
        let dial = cluster.dial();
        local = Some(cluster);
        (endpoints, Some(binary), dial)
    } else {
        let config = gavel_client::Credentials::from_env()
            .apply(gavel_client::ClientConfig::default())
            .map_err(BenchError::client("reading the GAVEL_* credentials"))?;
        (args.endpoints.clone(), None, cluster::Dial::of(&config))
    };
    let result = match (args.scale, local.as_ref().map(|local| local.dir().to_path_buf())) {
        (Some(_), Some(dir)) => {
            let limits = watchdog::Limits {
                mem_available_min: args.watchdog_mem_min,
                disk_free_min: args.watchdog_disk_min,
                deadline: args.scale_deadline,
                dir,
            };
            // Dropping the run when the watchdog trips drops nothing of the
            // cluster yet; the cluster is dropped (its nodes killed by PID) below.
            tokio::select! {
                result = measure(args, printer, &dial, &endpoints, local.as_mut(), binary.as_ref(), &tag) => result,
                tripped = watchdog::watch(limits, std::time::Instant::now()) => Err(tripped),
            }
        }
        _ => measure(args, printer, &dial, &endpoints, local.as_mut(), binary.as_ref(), &tag).await,
    };
    if let Some(mut cluster) = local {
        // A failed run keeps its nodes' data and logs: the error names them.
        if args.keep_data || result.is_err() {
            if let Some(dir) = cluster.keep_data() {
                printer.human(&format!("kept node data and logs in {}", dir.display()))?;
            }
        }
        drop(cluster);
    }
    let Measured { configs, scale, figures, fault, rolling } = result?;
    let errors: u64 = configs.iter().map(|config| config.errors).sum::<u64>()
        + fault.iter().map(|fault| fault.config.errors).sum::<u64>()
        + rolling.iter().map(|rolling| rolling.config.errors).sum::<u64>()
        + scale
            .iter()
            .flat_map(|scale| &scale.checkpoints)
            .map(|checkpoint| checkpoint.measurement.errors)
            .sum::<u64>();
    let ok = configs.iter().all(|config| config.ok)
        && scale.as_ref().is_none_or(|scale| scale.ok)
        && figures.as_ref().is_none_or(|figures| figures.ok)
        && fault.as_ref().is_none_or(|fault| fault.ok)
        && rolling.as_ref().is_none_or(|rolling| rolling.ok);
    if !configs.is_empty() {
        printer.human(&format!("summary:\n{}", report::summary_table(&configs)))?;
    }
    if let Some(scale) = &scale {
        printer.human(&report::scale_summary(scale))?;
    }
    printer.human(if ok { "gavel-lab bench: ok" } else { "gavel-lab bench: FAILED (see the errors above)" })?;
    let summary = serde_json::json!({
        "cluster": if args.endpoints.is_empty() { "local" } else { "endpoints" },
        "endpoints": endpoints,
        "tls": dial.is_secure(),
        "gavel_binary": binary.map(|binary| binary.display().to_string()),
        "workload": if scale.is_some() || figures.is_some() { None } else { Some(args.workload) },
        "configs": configs,
        "scale": scale,
        "figures": figures,
        "fault": fault,
        "rolling_restart": rolling,
        "errors": errors,
        "ok": ok,
    });
    printer.json_line(&serde_json::json!({ "summary": summary }))?;
    Ok(BenchOutcome { ok, configs, scale, figures, fault, rolling, summary })
}

/// What one mode measured.
#[derive(Default)]
struct Measured {
    configs: Vec<ConfigReport>,
    scale: Option<ScaleReport>,
    figures: Option<FiguresReport>,
    fault: Option<FaultReport>,
    rolling: Option<RollingReport>,
}

async fn measure(
    args: &BenchArgs,
    printer: &mut Printer<'_>,
    dial: &cluster::Dial,
    endpoints: &[String],
    local_mut: Option<&mut cluster::LocalCluster>,
    binary: Option<&PathBuf>,
    tag: &str,
) -> Result<Measured, BenchError> {
    if let Some(target) = args.scale {
        let spec = scale::ScaleSpec {
            target,
            checkpoint: args.scale_checkpoint,
            clients: args.scale_clients,
            warmup: args.warmup,
            duration: args.duration,
            leader_only: args.leader_only,
            verify_samples: args.verify_samples,
            disk_per_execution: args.scale_disk_per_execution,
            disk_free_min: args.watchdog_disk_min,
        };
        let current = match local_mut.as_deref() {
            Some(local) => local.cluster.pids(),
            None => args.node_pids.clone(),
        };
        let report = scale::run(dial, endpoints, &current, local_mut, &spec, tag, printer).await?;
        return Ok(Measured { scale: Some(report), ..Measured::default() });
    }
    let local = local_mut.as_deref();
    let given_pids = args.node_pids.clone();
    let pids = |local: Option<&cluster::LocalCluster>| match local {
        Some(local) => local.cluster.pids(),
        None => given_pids.clone(),
    };
    if !args.figures.is_empty() {
        let (Some(local), Some(binary)) = (local, binary) else {
            return Err(BenchError::Invalid("--figures needs the local cluster (no --endpoints)".to_string()));
        };
        let spec = figures::FiguresSpec {
            figures: args.figures.clone(),
            runs: args.figure_runs,
            lifecycles: args.figure_lifecycles,
            executions: args.figure_executions,
            cancels: args.figure_cancels,
            idle: args.figure_idle,
            binary: binary.clone(),
            data_dir: args.data_dir.clone(),
            node_flags: args.node_flag.clone(),
            insecure: args.insecure,
        };
        let report = figures::run(&spec, local, tag, printer).await?;
        return Ok(Measured { figures: Some(report), ..Measured::default() });
    }
    // The fault and rolling-restart modes' load: the largest --clients count.
    let load = || workload::LoadSpec {
        workload: args.workload,
        clients: args.clients.iter().copied().max().unwrap_or(1),
        warmup: args.warmup,
        duration: args.duration,
        verify_samples: args.verify_samples,
    };
    if let Some(fault) = args.fault {
        let Some(local) = local else {
            return Err(BenchError::Invalid("--fault needs the local cluster (no --endpoints)".to_string()));
        };
        let spec = fault::FaultSpec { fault, load: load(), hold: args.fault_hold };
        let report = fault::run(&spec, local, dial, tag, printer).await?;
        printer.json_line(&serde_json::to_value(&report)?)?;
        return Ok(Measured { fault: Some(report), ..Measured::default() });
    }
    if args.rolling_restart {
        let Some(local) = local else {
            return Err(BenchError::Invalid("--rolling-restart needs the local cluster (no --endpoints)".to_string()));
        };
        let report = rolling::run(&load(), local, dial, tag, printer).await?;
        printer.json_line(&serde_json::to_value(&report)?)?;
        return Ok(Measured { rolling: Some(report), ..Measured::default() });
    }
    let leader = dial.find_leader(endpoints).await?;
    let clients_max = args.clients.iter().copied().max().unwrap_or(1);
    let mut worker = None;
    if args.workload.is_governed() {
        governed::register_capability(&dial.client(endpoints, leader)?).await?;
        let started = start_governed_worker(dial, endpoints, local, clients_max, tag).await?;
        printer.human(&format!(
            "governed: capability {} (human approval required), an in-process worker with {} slots on queue {}",
            governed::CAPABILITY,
            started.concurrency,
            governed::QUEUE
        ))?;
        worker = Some(started);
    } else if args.workload != Workload::Approvals {
        workload::register_capabilities(&dial.client(endpoints, leader)?, clients_max).await?;
    }
    let mut configs = Vec::new();
    for (position, clients) in args.clients.iter().enumerate() {
        if let Some(local) = local {
            local.cluster.check_alive()?;
        }
        let leader = dial.find_leader(endpoints).await?;
        let spec = workload::ConfigSpec {
            workload: args.workload,
            clients: *clients,
            warmup: args.warmup,
            duration: args.duration,
            leader_only: args.leader_only,
            verify_samples: args.verify_samples,
            retained: None,
            cost: args.cost,
            tool_runs: worker.as_ref().map(|worker| worker.runs.clone()),
        };
        let metrics_addrs = local.map(|local| local.metrics_addrs.clone()).unwrap_or_default();
        let stages_before = stages::scrape_all(&metrics_addrs).await?;
        let mut report =
            workload::run_config(dial, endpoints, leader, &pids(local), &spec, &format!("{tag}-{position}")).await?;
        let stages_after = stages::scrape_all(&metrics_addrs).await?;
        report.term_rise = stages_after.term_rise(&stages_before);
        report.counters_rise = stages_after.counters_rise(&stages_before);
        printer.config(&report)?;
        if let Some(cost) = &report.cost {
            printer.human(&cost::table(cost))?;
        }
        if !metrics_addrs.is_empty() {
            printer.human(&stages::table(&stages_after.since(&stages_before)))?;
            if let Some(rise) = report.term_rise {
                printer
                    .human(&format!("raft term: the highest rose by {rise} (each leader change takes a new term)\n"))?;
            }
            for (name, rise) in &report.counters_rise {
                printer.human(&format!("{name}: rose by {rise}\n"))?;
            }
        }
        configs.push(report);
    }
    if let Some(worker) = worker {
        // Once the worker stopped no tool runs any more: check every configuration's runs again.
        let runs = worker.stop().await?;
        for (position, config) in configs.iter_mut().enumerate() {
            let check = runs.check(&format!("{tag}-{position}-"), config.completed_lifecycles);
            if !check.ok && config.exactly_once.as_ref().is_some_and(|before| before.ok) {
                printer.human(&format!("exactly once, after the worker stopped: FAILED: {:?}", check.problems))?;
                config.errors += check.problems.len().max(1) as u64;
                config.error_samples.extend(check.problems.iter().map(|problem| format!("exactly once: {problem}")));
                config.ok = false;
            }
            config.exactly_once = Some(check);
        }
    }
    Ok(Measured { configs, ..Measured::default() })
}

/// Starts the governed workload's in-process worker with a slot per client
/// (at least [`governed::WORKER_CONCURRENCY_MIN`]). On the secure local
/// cluster it runs as its own principal, `worker:bench-governed`, holding
/// only the worker grant; otherwise with the bench's credentials.
async fn start_governed_worker(
    dial: &cluster::Dial,
    endpoints: &[String],
    local: Option<&cluster::LocalCluster>,
    clients: usize,
    tag: &str,
) -> Result<governed::GovernedWorker, BenchError> {
    let config = match local {
        Some(local) if local.cluster.is_secure() => {
            let principal = gavel_pki::Principal::new(gavel_pki::PrincipalKind::Worker, governed::WORKER_PRINCIPAL)
                .expect("a valid principal id");
            local.cluster.grant(&principal, &[gavel_pki::GrantName::Worker], cluster::WAIT).await?;
            local.cluster.client_config_as(&principal)?
        }
        _ => dial.config(),
    };
    let concurrency = clients.max(governed::WORKER_CONCURRENCY_MIN);
    governed::GovernedWorker::start(endpoints, config, concurrency, &format!("{tag}-governed-worker"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        bench: BenchArgs,
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        assert!(parse_duration("ten").is_err());
        assert!(parse_duration("10 parsecs").is_err());
    }

    #[test]
    fn flags_and_defaults() {
        let cli = Cli::try_parse_from(["bench"]).expect("defaults parse");
        assert_eq!(cli.bench.workload, Workload::Approvals);
        assert_eq!(cli.bench.clients, vec![1, 16, 64]);
        assert_eq!((cli.bench.duration, cli.bench.warmup), (Duration::from_secs(10), Duration::from_secs(2)));
        assert!(cli.bench.endpoints.is_empty() && cli.bench.scale.is_none());

        let cli = Cli::try_parse_from([
            "bench",
            "--workload",
            "mixed",
            "--clients",
            "1,4",
            "--duration",
            "2s",
            "--warmup",
            "0s",
            "--node-flag=--heartbeat-ms=100",
            "--node-flag",
            "--logs-to-keep=500",
            "--json",
        ])
        .expect("flags parse");
        assert_eq!(cli.bench.workload, Workload::Mixed);
        assert_eq!(cli.bench.clients, vec![1, 4]);
        assert_eq!(cli.bench.node_flag, vec!["--heartbeat-ms=100", "--logs-to-keep=500"]);
        assert!(cli.bench.json);

        let cli = Cli::try_parse_from(["bench", "--endpoints", "a:1,b:2", "--node-pids", "10,11", "--leader-only"])
            .expect("endpoints parse");
        assert_eq!(cli.bench.endpoints, vec!["a:1", "b:2"]);
        assert_eq!(cli.bench.node_pids, vec![10, 11]);
        assert!(Cli::try_parse_from(["bench", "--node-pids", "10"]).is_err());
        assert!(Cli::try_parse_from(["bench", "--endpoints", "a:1", "--keep-data"]).is_err());
        assert!(Cli::try_parse_from(["bench", "--scale-clients", "8"]).is_err());
        assert!(Cli::try_parse_from(["bench", "--watchdog-mem-min", "3G"]).is_err(), "watchdog flags need --scale");
        let cli = Cli::try_parse_from(["bench", "--scale", "10"]).expect("parses");
        assert_eq!((cli.bench.watchdog_mem_min, cli.bench.watchdog_disk_min), (2_500_000_000, 4_000_000_000));
        assert_eq!((cli.bench.scale_deadline, cli.bench.scale_disk_per_execution), (Duration::from_secs(1500), 6000));
        let cli =
            Cli::try_parse_from(["bench", "--scale", "10", "--watchdog-mem-min", "1Gi", "--scale-deadline", "5m"])
                .expect("parses");
        assert_eq!((cli.bench.watchdog_mem_min, cli.bench.scale_deadline), (1 << 30, Duration::from_secs(300)));
        assert!(!Cli::try_parse_from(["bench"]).expect("defaults parse").bench.insecure, "TLS by default");
        assert!(Cli::try_parse_from(["bench", "--insecure"]).expect("--insecure parses").bench.insecure);
        assert!(Cli::try_parse_from(["bench", "--endpoints", "a:1", "--insecure"]).is_err());
    }

    #[test]
    fn fault_and_rolling_restart_flags() {
        let cli = Cli::try_parse_from(["bench", "--fault", "kill-leader", "--fault-hold", "2s"]).expect("parses");
        assert_eq!((cli.bench.fault, cli.bench.fault_hold), (Some(Fault::KillLeader), Duration::from_secs(2)));
        let cli = Cli::try_parse_from(["bench", "--fault", "partition-follower"]).expect("parses");
        assert_eq!(cli.bench.fault_hold, Duration::from_secs(3), "held 3 s by default");
        assert!(Cli::try_parse_from(["bench", "--fault", "kill-everyone"]).is_err());
        assert!(Cli::try_parse_from(["bench", "--fault-hold", "2s"]).is_err(), "--fault-hold needs --fault");
        assert!(Cli::try_parse_from(["bench", "--fault", "kill-leader", "--endpoints", "a:1"]).is_err());
        assert!(Cli::try_parse_from(["bench", "--fault", "kill-leader", "--scale", "10"]).is_err());
        assert!(Cli::try_parse_from(["bench", "--rolling-restart"]).expect("parses").bench.rolling_restart);
        assert!(Cli::try_parse_from(["bench", "--rolling-restart", "--fault", "kill-leader"]).is_err());
        let parse = |args: &[&str]| Cli::try_parse_from(args).expect("parses").bench;
        assert!(validate(&parse(&["bench", "--fault", "kill-follower", "--fault-hold", "0s"])).is_err());
        assert!(validate(&parse(&["bench", "--fault", "kill-follower"])).is_ok());
    }

    #[test]
    fn validation() {
        let parse = |args: &[&str]| Cli::try_parse_from(args).expect("parses").bench;
        assert!(validate(&parse(&["bench", "--clients", "0"])).is_err());
        assert!(validate(&parse(&["bench", "--duration", "0s"])).is_err());
        assert!(validate(&parse(&["bench", "--endpoints", "a:1,b:2", "--node-pids", "1"])).is_err());
        assert!(validate(&parse(&["bench", "--scale", "1000"])).is_ok());
        assert!(validate(&parse(&["bench", "--scale", "1000", "--scale-deadline", "0s"])).is_err());
        assert!(validate(&parse(&["bench"])).is_ok());
        assert!(validate(&parse(&["bench", "--cost"])).is_ok());
        assert!(validate(&parse(&["bench", "--cost", "--endpoints", "a:1"])).is_err(), "--cost needs the pids");
        assert!(validate(&parse(&["bench", "--cost", "--endpoints", "a:1", "--node-pids", "7"])).is_ok());
        assert!(Cli::try_parse_from(["bench", "--cost", "--scale", "10"]).is_err());
        assert!(validate(&parse(&["bench", "--figures", "failover", "--figure-runs", "0"])).is_err());
        assert!(validate(&parse(&["bench", "--figures", "idle-worker", "--figure-idle", "0s"])).is_err());
        assert!(validate(&parse(&["bench", "--figures", "restart", "--figure-executions", "0"])).is_err());
        assert!(validate(&parse(&["bench", "--workload", "governed", "--clients", "1,64", "--cost"])).is_ok());
        assert!(validate(&parse(&["bench", "--workload", "governed", "--scale", "10"])).is_err());
        assert!(validate(&parse(&["bench", "--workload", "governed", "--fault", "kill-leader"])).is_err());
        assert!(validate(&parse(&["bench", "--workload", "governed", "--rolling-restart"])).is_err());
        // Figures mode measures no --clients configurations.
        assert!(validate(&parse(&["bench", "--figures", "cancel", "--clients", "0"])).is_ok());
    }
}
