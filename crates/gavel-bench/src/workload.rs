//! Closed-loop clients: each runs one lifecycle after another, checks every
//! answer, and records per-operation latencies.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gavel_client::{pb, Client};
use serde::Serialize;

use crate::cluster::Dial;
use crate::cost::{self, CostReport};
use crate::governed::{self, ExactlyOnce, ToolRuns};
use crate::procfs;
use crate::stats::{ClientStats, Latency};
use crate::{BenchError, Workload};

/// Queue of the shared `bench.read` capability (scale fill).
pub(crate) const SHARED_QUEUE: &str = "bench";
/// The shared capability polled in batches by the scale fill.
pub(crate) const SHARED_CAPABILITY: &str = "bench.read";
/// Long-poll wait of a closed-loop worker poll. The task is normally there
/// already: the client's own submit was applied before the poll is sent.
const POLL_WAIT_MS: u64 = 1000;
/// Empty polls in a row after which a lifecycle gives up.
const EMPTY_POLLS_MAX: u32 = 30;
/// Errors in a row after which a client stops (the cluster is down).
const CONSECUTIVE_ERRORS_MAX: u32 = 20;
/// Bench capabilities get a generous attempt deadline so a stalled report
/// never times a lease out in the middle of a measurement.
const CAPABILITY_TIMEOUT_MS: u64 = 600_000;

/// The capability (and its queue) of closed-loop executions client `index`.
pub(crate) fn client_capability(index: usize) -> (String, String) {
    (format!("{SHARED_CAPABILITY}.{index}"), format!("{SHARED_QUEUE}-{index}"))
}

pub(crate) fn agent(index: usize) -> pb::Actor {
    pb::Actor { id: format!("bench-agent-{index}"), kind: pb::ActorKind::Automation as i32, ..pb::Actor::default() }
}

fn approver() -> pb::Actor {
    pb::Actor { id: "bench-approver".to_string(), kind: pb::ActorKind::User as i32, ..pb::Actor::default() }
}

/// Registers a READ capability with a long attempt deadline.
pub(crate) async fn register_capability(client: &Client, id: &str, queue: &str) -> Result<(), BenchError> {
    client
        .register_capability(pb::RegisterCapabilityRequest {
            request_id: String::new(),
            spec: Some(pb::CapabilitySpec {
                id: id.to_string(),
                side_effect: pb::SideEffect::Read as i32,
                risk: pb::Risk::Low as i32,
                timeout_ms: Some(CAPABILITY_TIMEOUT_MS),
                queue: Some(queue.to_string()),
                tags: vec!["gavel-bench".to_string()],
                ..pb::CapabilitySpec::default()
            }),
        })
        .await
        .map_err(BenchError::client(format!("registering capability {id}")))?;
    Ok(())
}

/// Registers the shared capability and one capability (and queue) per
/// closed-loop client, so each client's worker leases exactly its own
/// submissions.
pub(crate) async fn register_capabilities(client: &Client, clients: usize) -> Result<(), BenchError> {
    register_capability(client, SHARED_CAPABILITY, SHARED_QUEUE).await?;
    let registrations = (0..clients).map(|index| {
        let (capability, queue) = client_capability(index);
        async move { register_capability(client, &capability, &queue).await }
    });
    for registration in futures::future::join_all(registrations).await {
        registration?;
    }
    Ok(())
}

/// One configuration to measure.
#[derive(Debug, Clone)]
pub(crate) struct ConfigSpec {
    pub workload: Workload,
    pub clients: usize,
    pub warmup: Duration,
    pub duration: Duration,
    pub leader_only: bool,
    pub verify_samples: usize,
    /// In scale mode: finalized executions retained before this measurement.
    pub retained: Option<u64>,
    /// Also count what one operation costs each node (`--cost`).
    pub cost: bool,
    /// The governed workload's tool runs (its worker runs in this process).
    pub tool_runs: Option<Arc<ToolRuns>>,
}

/// CPU consumed during the measured window.
#[derive(Debug, Clone, Serialize)]
pub struct CpuReport {
    /// Clock ticks per second used to convert `/proc` figures.
    pub clock_ticks_per_s: u64,
    /// CPU seconds of each node process (user + system), when their pids are known.
    pub node_cpu_s: Option<Vec<f64>>,
    /// Node CPU seconds (all nodes) per measured operation.
    pub node_cpu_s_per_op: Option<f64>,
    /// Node CPU seconds (all nodes) per measured lifecycle.
    pub node_cpu_s_per_lifecycle: Option<f64>,
    /// Each node's CPU seconds per measured lifecycle, in endpoint order.
    pub node_cpu_s_per_lifecycle_each: Option<Vec<f64>>,
    /// Average cores the nodes kept busy together.
    pub node_cores: Option<f64>,
    /// CPU seconds of the load generator itself.
    pub bench_cpu_s: f64,
    /// Load generator CPU seconds per measured operation.
    pub bench_cpu_s_per_op: Option<f64>,
    /// Average cores the load generator kept busy.
    pub bench_cores: f64,
}

/// The figures of one configuration.
#[derive(Debug, Clone, Serialize)]
pub struct ConfigReport {
    /// `approvals`, `executions` or `mixed`.
    pub workload: String,
    /// Closed-loop clients.
    pub clients: usize,
    /// Nodes the clients were spread over.
    pub nodes: usize,
    /// Whether every client was pointed at the leader.
    pub leader_only: bool,
    /// In scale mode: finalized executions retained when the measurement started.
    pub retained: Option<u64>,
    /// Warmup, not measured (seconds).
    pub warmup_s: f64,
    /// Measured window (seconds).
    pub measured_s: f64,
    /// Lifecycles finished in the window.
    pub lifecycles: u64,
    /// Lifecycles per second.
    pub lifecycles_per_s: f64,
    /// Operations (RPCs that were part of a lifecycle) finished in the window.
    pub operations: u64,
    /// Operations per second.
    pub operations_per_s: f64,
    /// Latency per operation (`create`, `decide`, `consume`, `submit`, `poll`, `report`).
    pub latency: BTreeMap<String, Latency>,
    /// Latency of whole lifecycles, per kind (`approval`, `execution`, `governed`).
    pub lifecycle_latency: BTreeMap<String, Latency>,
    /// Latency of the stages of a lifecycle that are not one RPC (the
    /// governed workload's `decision_seen`, `lease_granted`, `tool`, `result_seen`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub lifecycle_stages: BTreeMap<String, Latency>,
    /// The governed workload: whether each lifecycle's tool ran exactly once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exactly_once: Option<ExactlyOnce>,
    /// CPU during the window.
    pub cpu: CpuReport,
    /// With `--cost`: what one operation (governed: one lifecycle) cost each node.
    pub cost: Option<CostReport>,
    /// How far the highest Raft term among the local nodes rose over the
    /// configuration, warmup included (each leader change takes a new term,
    /// so this bounds the leader changes from above); `None` without the
    /// nodes' metrics (`--endpoints`).
    pub term_rise: Option<u64>,
    /// How far the nodes' hand-off counters rose over the configuration,
    /// warmup included (`gavel_lease_handoffs_total`,
    /// `gavel_resumes_carried_total`); empty without the nodes' metrics.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub counters_rise: BTreeMap<String, u64>,
    /// Lifecycles completed and checked, window or not.
    pub completed_lifecycles: u64,
    /// Polls that returned no task and were repeated.
    pub empty_polls: u64,
    /// RPC attempts beyond one per call (SDK retries of transient failures).
    pub retries: u64,
    /// Lifecycles re-read at the end to verify their final state.
    pub verified: u64,
    /// Unexpected errors and failed checks.
    pub errors: u64,
    /// The first few error messages.
    pub error_samples: Vec<String>,
    /// No error and every check passed.
    pub ok: bool,
}

/// A completed lifecycle kept for verification by reads at the end.
#[derive(Debug, Clone)]
enum Sample {
    Approval { approval_id: String, execution_id: String },
    Execution { execution_id: String, output_json: String },
}

struct ClientContext {
    client: Client,
    index: usize,
    prefix: String,
    worker_id: String,
    kind: Kind,
    end: Instant,
    keep_samples: usize,
    tool_runs: Option<Arc<ToolRuns>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Approval,
    Execution,
    Governed { await_decision: bool },
}

fn kind_of(workload: Workload, index: usize) -> Kind {
    match workload {
        Workload::Approvals => Kind::Approval,
        Workload::Executions => Kind::Execution,
        // Even clients run approvals, odd clients executions.
        Workload::Mixed => [Kind::Approval, Kind::Execution][index % 2],
        Workload::Governed => Kind::Governed { await_decision: true },
        Workload::GovernedWait => Kind::Governed { await_decision: false },
    }
}

/// Runs one lifecycle after another until `end`, then returns what it saw.
async fn client_loop(context: ClientContext, mut stats: ClientStats) -> (ClientStats, Vec<Sample>, u64) {
    let mut samples = Vec::new();
    let mut sequence = 0u64;
    let mut consecutive_errors = 0u32;
    while Instant::now() < context.end {
        sequence += 1;
        let outcome = match context.kind {
            Kind::Approval => approval_lifecycle(&context, sequence, &mut stats).await,
            Kind::Execution => execution_lifecycle(&context, sequence, &mut stats).await,
            Kind::Governed { await_decision } => {
                governed_lifecycle(&context, sequence, await_decision, &mut stats).await
            }
        };
        match outcome {
            Ok(sample) => {
                consecutive_errors = 0;
                if samples.len() < context.keep_samples {
                    samples.push(sample);
                }
            }
            Err(message) => {
                stats.error(message);
                consecutive_errors += 1;
                if consecutive_errors >= CONSECUTIVE_ERRORS_MAX {
                    stats.error(format!("client {} stopped after {consecutive_errors} errors in a row", context.index));
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    let attempts = context.client.attempts();
    (stats, samples, attempts)
}

/// Create (actor A), decide approve (actor B), consume with a fresh execution id.
async fn approval_lifecycle(context: &ClientContext, sequence: u64, stats: &mut ClientStats) -> Result<Sample, String> {
    let id = format!("{}-a{sequence}", context.prefix);
    let execution_id = format!("{id}-x");
    let started = Instant::now();

    let call = Instant::now();
    stats.calls += 1;
    let created = context
        .client
        .create_approval(pb::CreateApprovalRequest {
            request_id: format!("{id}-create"),
            id: id.clone(),
            capability_id: "bench.refund".to_string(),
            surface: "gavel-bench".to_string(),
            actor: Some(agent(context.index)),
            input_json: format!(r#"{{"order":"{id}","amount":{sequence}}}"#),
            reasons: vec!["benchmark".to_string()],
            risk: pb::Risk::Medium as i32,
            side_effect: pb::SideEffect::Write as i32,
            expires_in_ms: Some(15 * 60 * 1000),
            ..pb::CreateApprovalRequest::default()
        })
        .await
        .map_err(|error| format!("create {id}: {error}"))?;
    stats.operation("create", call);
    let approval = created.approval.ok_or_else(|| format!("create {id}: no approval in the reply"))?;
    if approval.id != id || approval.status != pb::ApprovalStatus::Pending as i32 {
        return Err(format!("create {id}: got {} in status {}", approval.id, status_name(approval.status)));
    }

    let call = Instant::now();
    stats.calls += 1;
    let decided = context
        .client
        .decide_approval(pb::DecideApprovalRequest {
            request_id: format!("{id}-decide"),
            id: id.clone(),
            status: pb::ApprovalStatus::Approved as i32,
            approver: Some(approver()),
            comment: None,
            ..pb::DecideApprovalRequest::default()
        })
        .await
        .map_err(|error| format!("decide {id}: {error}"))?;
    stats.operation("decide", call);
    let approval = decided.approval.ok_or_else(|| format!("decide {id}: no approval in the reply"))?;
    if approval.status != pb::ApprovalStatus::Approved as i32 {
        return Err(format!("decide {id}: status {} instead of APPROVED", status_name(approval.status)));
    }

    let call = Instant::now();
    stats.calls += 1;
    let consumed = context
        .client
        .consume_approval(pb::ConsumeApprovalRequest {
            request_id: format!("{id}-consume"),
            id: id.clone(),
            execution_id: execution_id.clone(),
            ..pb::ConsumeApprovalRequest::default()
        })
        .await
        .map_err(|error| format!("consume {id}: {error}"))?;
    stats.operation("consume", call);
    let approval = consumed.approval.ok_or_else(|| format!("consume {id}: no approval in the reply"))?;
    if approval.status != pb::ApprovalStatus::Consumed as i32
        || approval.consumed_by_execution_id.as_deref() != Some(execution_id.as_str())
    {
        return Err(format!(
            "consume {id}: status {} consumed by {:?} instead of CONSUMED by {execution_id}",
            status_name(approval.status),
            approval.consumed_by_execution_id
        ));
    }
    stats.lifecycle("approval", started);
    Ok(Sample::Approval { approval_id: id, execution_id })
}

/// The governed tool call (see `governed`); verified at the end as an execution.
async fn governed_lifecycle(
    context: &ClientContext,
    sequence: u64,
    await_decision: bool,
    stats: &mut ClientStats,
) -> Result<Sample, String> {
    let Some(runs) = &context.tool_runs else {
        return Err("the governed workload runs without its worker".to_string());
    };
    let execution_id = format!("{}-g{sequence}", context.prefix);
    let output_json =
        governed::lifecycle(&context.client, context.index, &execution_id, runs, await_decision, stats).await?;
    Ok(Sample::Execution { execution_id, output_json })
}

fn status_name(status: i32) -> String {
    pb::ApprovalStatus::try_from(status)
        .map_or_else(|_| format!("#{status}"), |status| status.as_str_name().to_string())
}

fn state_name(state: i32) -> String {
    pb::ExecutionState::try_from(state).map_or_else(|_| format!("#{state}"), |state| state.as_str_name().to_string())
}

fn completed(execution_id: &str, output_json: &str, lease_id: u64, worker_id: &str) -> pb::ReportRequest {
    pb::ReportRequest {
        request_id: format!("{execution_id}-report-{lease_id}"),
        lease_id,
        worker_id: worker_id.to_string(),
        outcome: Some(pb::report_request::Outcome::Completed(pb::ReportCompleted {
            output_json: output_json.to_string(),
        })),
    }
}

/// Submit to the client's own capability, lease it with the client's own
/// worker poll, report it completed.
async fn execution_lifecycle(
    context: &ClientContext,
    sequence: u64,
    stats: &mut ClientStats,
) -> Result<Sample, String> {
    let (capability, queue) = client_capability(context.index);
    let execution_id = format!("{}-e{sequence}", context.prefix);
    let output_json = format!(r#"{{"ok":true,"rows":{sequence}}}"#);
    let started = Instant::now();

    let call = Instant::now();
    stats.calls += 1;
    let submitted = context
        .client
        .submit(pb::SubmitRequest {
            request_id: format!("{execution_id}-submit"),
            execution_id: Some(execution_id.clone()),
            capability_id: capability,
            input_json: format!(r#"{{"query":"{execution_id}"}}"#),
            actor: Some(agent(context.index)),
            surface: "gavel-bench".to_string(),
            correlation_id: None,
        })
        .await
        .map_err(|error| format!("submit {execution_id}: {error}"))?;
    stats.operation("submit", call);
    match submitted.outcome {
        Some(pb::submit_response::Outcome::Execution(execution))
            if execution.execution_id == execution_id
                && execution.state == pb::ExecutionState::Queued as i32
                && submitted.created => {}
        other => return Err(format!("submit {execution_id}: unexpected answer {other:?}")),
    }

    let mut polls = 0u32;
    let lease = loop {
        let call = Instant::now();
        stats.calls += 1;
        let polled = context
            .client
            .poll(pb::PollRequest {
                request_id: format!("{execution_id}-poll-{polls}"),
                worker_id: context.worker_id.clone(),
                queues: vec![queue.clone()],
                max_tasks: 1,
                wait_ms: POLL_WAIT_MS,
            })
            .await
            .map_err(|error| format!("poll for {execution_id}: {error}"))?;
        polls += 1;
        let Some(task) = polled.tasks.into_iter().next() else {
            stats.empty_polls += 1;
            if polls >= EMPTY_POLLS_MAX {
                return Err(format!("poll for {execution_id}: still no task after {polls} polls"));
            }
            continue;
        };
        let lease = task.lease.ok_or_else(|| format!("poll for {execution_id}: a task without a lease"))?;
        if task.execution_id != execution_id {
            // Left over from an earlier failed lifecycle of this client: finish it and
            // report the anomaly (the earlier failure was counted already).
            stats.calls += 1;
            let _ =
                context.client.report(completed(&task.execution_id, "{}", lease.lease_id, &context.worker_id)).await;
            stats.error(format!("poll for {execution_id}: leased stray execution {}", task.execution_id));
            continue;
        }
        stats.operation("poll", call);
        if lease.worker_id != context.worker_id || task.attempt != 1 {
            return Err(format!(
                "poll for {execution_id}: lease for worker {} attempt {}",
                lease.worker_id, task.attempt
            ));
        }
        break lease;
    };

    let call = Instant::now();
    stats.calls += 1;
    let reported = context
        .client
        .report(completed(&execution_id, &output_json, lease.lease_id, &context.worker_id))
        .await
        .map_err(|error| format!("report {execution_id}: {error}"))?;
    stats.operation("report", call);
    let execution = reported.execution.ok_or_else(|| format!("report {execution_id}: no execution in the reply"))?;
    if execution.execution_id != execution_id || execution.state != pb::ExecutionState::Completed as i32 {
        return Err(format!(
            "report {execution_id}: execution {} in state {} instead of COMPLETED",
            execution.execution_id,
            state_name(execution.state)
        ));
    }
    stats.lifecycle("execution", started);
    Ok(Sample::Execution { execution_id, output_json })
}

/// Re-checks sampled lifecycles: an approval must refuse a second consume
/// and still be CONSUMED by our execution; an execution must be COMPLETED
/// after one attempt with our output.
async fn verify(client: &Client, sample: &Sample) -> Result<(), String> {
    match sample {
        Sample::Approval { approval_id, execution_id } => {
            // A second consume by another execution must be refused by state...
            let again = client
                .consume_approval(pb::ConsumeApprovalRequest {
                    request_id: format!("{approval_id}-consume-again"),
                    id: approval_id.clone(),
                    execution_id: format!("{execution_id}-again"),
                    ..pb::ConsumeApprovalRequest::default()
                })
                .await;
            match again {
                Err(gavel_client::Error::Domain { status: tonic::Code::FailedPrecondition, .. }) => {}
                Err(error) => return Err(format!("verify {approval_id}: a second consume failed with {error}")),
                Ok(_) => return Err(format!("verify {approval_id}: a second consume succeeded")),
            }
            // ...and leave the approval consumed by the first one.
            let read = client
                .get_approval(pb::GetApprovalRequest { id: approval_id.clone(), caller_now_ms: None })
                .await
                .map_err(|error| format!("verify {approval_id}: {error}"))?;
            let approval = read.approval.ok_or_else(|| format!("verify {approval_id}: approval missing"))?;
            if approval.status != pb::ApprovalStatus::Consumed as i32
                || approval.consumed_by_execution_id.as_deref() != Some(execution_id.as_str())
            {
                return Err(format!(
                    "verify {approval_id}: status {} consumed by {:?} instead of CONSUMED by {execution_id}",
                    status_name(approval.status),
                    approval.consumed_by_execution_id
                ));
            }
            Ok(())
        }
        Sample::Execution { execution_id, output_json } => {
            let read = client
                .get_execution(pb::GetExecutionRequest { execution_id: execution_id.clone() })
                .await
                .map_err(|error| format!("verify {execution_id}: {error}"))?;
            let execution = read.execution.ok_or_else(|| format!("verify {execution_id}: execution missing"))?;
            let output = match execution.result.and_then(|result| result.outcome) {
                Some(pb::result_envelope::Outcome::Completed(completed)) => completed.output_json,
                other => return Err(format!("verify {execution_id}: result {other:?} instead of completed")),
            };
            let same_output = serde_json::from_str::<serde_json::Value>(&output).ok()
                == serde_json::from_str::<serde_json::Value>(output_json).ok();
            if execution.state != pb::ExecutionState::Completed as i32 || execution.attempts != 1 || !same_output {
                return Err(format!(
                    "verify {execution_id}: state {}, {} attempts, output {output} \
                     (expected COMPLETED, 1, {output_json})",
                    state_name(execution.state),
                    execution.attempts
                ));
            }
            Ok(())
        }
    }
}

/// Node and load-generator CPU ticks at one instant.
struct CpuSnapshot {
    nodes: Option<Vec<procfs::CpuTicks>>,
    bench: Option<procfs::CpuTicks>,
}

fn cpu_snapshot(pids: &[u32]) -> CpuSnapshot {
    let nodes = if pids.is_empty() {
        None
    } else {
        pids.iter().map(|pid| procfs::cpu_ticks(*pid).ok()).collect::<Option<Vec<_>>>()
    };
    CpuSnapshot { nodes, bench: procfs::own_cpu_ticks().ok() }
}

/// Runs one configuration against `endpoints` (index `leader` is the
/// leader), dialled with `dial`; `pids` are the node processes whose CPU is
/// measured.
pub(crate) async fn run_config(
    dial: &Dial,
    endpoints: &[String],
    leader: usize,
    pids: &[u32],
    spec: &ConfigSpec,
    prefix: &str,
) -> Result<ConfigReport, BenchError> {
    let measured = run_config_during(dial, endpoints, leader, pids, spec, prefix, |_| async {}).await?;
    Ok(measured.report)
}

/// The load the fault and rolling-restart modes run while they disrupt the
/// cluster: `clients` closed-loop clients spread round-robin over the nodes.
#[derive(Debug, Clone)]
pub(crate) struct LoadSpec {
    pub workload: Workload,
    pub clients: usize,
    pub warmup: Duration,
    pub duration: Duration,
    pub verify_samples: usize,
}

/// Runs `load` against `endpoints` (registering the executions workload's
/// capabilities first) while `disrupt(window_start)` runs; see
/// [`run_config_during`].
pub(crate) async fn run_disrupted<T, F, Fut>(
    dial: &Dial,
    endpoints: &[String],
    load: &LoadSpec,
    prefix: &str,
    disrupt: F,
) -> Result<DuringReport<T>, BenchError>
where
    F: FnOnce(Instant) -> Fut,
    Fut: std::future::Future<Output = T>,
{
    let leader = dial.find_leader(endpoints).await?;
    if load.workload != Workload::Approvals {
        register_capabilities(&dial.client(endpoints, leader)?, load.clients).await?;
    }
    let config = ConfigSpec {
        workload: load.workload,
        clients: load.clients,
        warmup: load.warmup,
        duration: load.duration,
        leader_only: false,
        verify_samples: load.verify_samples,
        retained: None,
        cost: false,
        tool_runs: None,
    };
    run_config_during(dial, endpoints, leader, &[], &config, prefix, disrupt).await
}

/// What [`run_config_during`] measured: the configuration's report, when
/// each ok lifecycle finished (offsets from the window's start, in order),
/// and what the disruption returned.
pub(crate) struct DuringReport<T> {
    pub report: ConfigReport,
    pub finished: Vec<Duration>,
    /// When each measured lifecycle started and finished.
    pub lifecycle_spans: Vec<(Instant, Instant)>,
    /// When each measured operation started and finished.
    pub operation_spans: Vec<(Instant, Instant)>,
    pub disruption: T,
}

/// [`run_config`] while `disrupt(window_start)` runs next to the clients
/// (from their start until it returns; the clients stop at the window's end
/// regardless). Used by the fault and rolling-restart modes, with no `pids`
/// (nodes restart, so their CPU time is not comparable).
pub(crate) async fn run_config_during<T, F, Fut>(
    dial: &Dial,
    endpoints: &[String],
    leader: usize,
    pids: &[u32],
    spec: &ConfigSpec,
    prefix: &str,
    disrupt: F,
) -> Result<DuringReport<T>, BenchError>
where
    F: FnOnce(Instant) -> Fut,
    Fut: std::future::Future<Output = T>,
{
    let started = Instant::now();
    let window_start = started + spec.warmup;
    let end = window_start + spec.duration;
    let keep_samples = spec.verify_samples.div_ceil(spec.clients.max(1)).max(1);
    let mut tasks = tokio::task::JoinSet::new();
    for index in 0..spec.clients {
        let first = if spec.leader_only { leader } else { index % endpoints.len() };
        let context = ClientContext {
            client: dial.client(endpoints, first)?,
            index,
            prefix: format!("{prefix}-c{index}"),
            worker_id: format!("{prefix}-w{index}"),
            kind: kind_of(spec.workload, index),
            end,
            keep_samples,
            tool_runs: spec.tool_runs.clone(),
        };
        tasks.spawn(client_loop(context, ClientStats::new(window_start, end)));
    }

    let ticks = procfs::clock_ticks_per_second();
    let counts_cost = spec.cost && !pids.is_empty();
    let window = async {
        tokio::time::sleep_until(tokio::time::Instant::from_std(window_start)).await;
        let before = cpu_snapshot(pids);
        let cost_before = counts_cost.then(|| cost::snapshot(pids));
        let syscalls = async {
            if counts_cost {
                Some(cost::count_syscalls(pids, spec.duration).await)
            } else {
                None
            }
        };
        let ((), syscalls) = tokio::join!(tokio::time::sleep_until(tokio::time::Instant::from_std(end)), syscalls);
        let cost_after = counts_cost.then(|| cost::snapshot(pids));
        (before, cpu_snapshot(pids), cost_before.zip(cost_after).zip(syscalls))
    };
    let ((before, after, cost_counters), disruption) = tokio::join!(window, disrupt(window_start));

    let mut total = ClientStats::new(window_start, end);
    let mut samples = Vec::new();
    let mut attempts = 0u64;
    while let Some(joined) = tasks.join_next().await {
        let (stats, client_samples, client_attempts) = joined?;
        total.merge(&stats);
        samples.push(client_samples);
        attempts += client_attempts;
    }

    // Verify an even spread of samples: the first of every client, then the second...
    let verifier = dial.client(endpoints, leader)?;
    let mut verified = 0u64;
    let deepest = samples.iter().map(Vec::len).max().unwrap_or(0);
    'verify: for depth in 0..deepest {
        for client_samples in &samples {
            if verified as usize >= spec.verify_samples {
                break 'verify;
            }
            if let Some(sample) = client_samples.get(depth) {
                match verify(&verifier, sample).await {
                    Ok(()) => verified += 1,
                    Err(message) => total.error(message),
                }
            }
        }
    }
    if total.completed == 0 {
        total.error("no lifecycle completed".to_string());
    }
    // Every governed lifecycle has returned: each tool ran once, for a caller that got its result.
    let exactly_once = spec.tool_runs.as_ref().map(|runs| runs.check(&format!("{prefix}-"), total.completed));
    for problem in exactly_once.iter().flat_map(|check| &check.problems) {
        total.error(format!("exactly once: {problem}"));
    }

    let measured_s = spec.duration.as_secs_f64();
    let lifecycles = total.measured_lifecycles();
    let operations = total.measured_operations();
    let per = |value: f64, count: u64| if count == 0 { None } else { Some(value / count as f64) };
    let node_cpu_s: Option<Vec<f64>> = match (&before.nodes, &after.nodes) {
        (Some(before), Some(after)) => Some(
            before
                .iter()
                .zip(after)
                .map(|(before, after)| after.total().saturating_sub(before.total()) as f64 / ticks as f64)
                .collect(),
        ),
        _ => None,
    };
    if !pids.is_empty() && node_cpu_s.is_none() {
        total.error(format!("could not read the CPU time of node pids {pids:?}"));
    }
    let node_total = node_cpu_s.as_ref().map(|each| each.iter().sum::<f64>());
    let bench_cpu_s = match (before.bench, after.bench) {
        (Some(before), Some(after)) => after.total().saturating_sub(before.total()) as f64 / ticks as f64,
        _ => 0.0,
    };
    if spec.cost && pids.is_empty() {
        total.error("--cost needs the nodes' pids (the local cluster, or --node-pids)".to_string());
    }
    let cost = match cost_counters {
        // A governed lifecycle's RPCs are the caller's and the worker's: its cost is per lifecycle.
        Some(((Ok(before), Ok(after)), syscalls)) if spec.workload.is_governed() => {
            Some(cost::report(&before, &after, &syscalls, lifecycles, leader, ticks).per_lifecycle())
        }
        Some(((Ok(before), Ok(after)), syscalls)) => {
            Some(cost::report(&before, &after, &syscalls, operations, leader, ticks))
        }
        Some(((Err(error), _) | (_, Err(error)), _)) => {
            total.error(format!("--cost could not read the nodes' counters: {error}"));
            None
        }
        None => None,
    };
    let cpu = CpuReport {
        clock_ticks_per_s: ticks,
        node_cpu_s_per_op: node_total.and_then(|total| per(total, operations)),
        node_cpu_s_per_lifecycle: node_total.and_then(|total| per(total, lifecycles)),
        node_cpu_s_per_lifecycle_each: node_cpu_s
            .as_ref()
            .and_then(|each| each.iter().map(|seconds| per(*seconds, lifecycles)).collect()),
        node_cores: node_total.map(|total| total / measured_s),
        node_cpu_s,
        bench_cpu_s,
        bench_cpu_s_per_op: per(bench_cpu_s, operations),
        bench_cores: bench_cpu_s / measured_s,
    };
    let report = ConfigReport {
        workload: spec.workload.name().to_string(),
        clients: spec.clients,
        nodes: if spec.leader_only { 1 } else { endpoints.len().min(spec.clients) },
        leader_only: spec.leader_only,
        retained: spec.retained,
        warmup_s: spec.warmup.as_secs_f64(),
        measured_s,
        lifecycles,
        lifecycles_per_s: lifecycles as f64 / measured_s,
        operations,
        operations_per_s: operations as f64 / measured_s,
        latency: total.operations.iter().map(|(name, histogram)| (name.to_string(), Latency::of(histogram))).collect(),
        lifecycle_latency: total
            .lifecycles
            .iter()
            .map(|(kind, histogram)| (kind.to_string(), Latency::of(histogram)))
            .collect(),
        lifecycle_stages: total
            .stages
            .iter()
            .map(|(name, histogram)| (name.to_string(), Latency::of(histogram)))
            .collect(),
        exactly_once,
        cpu,
        cost,
        term_rise: None,
        counters_rise: BTreeMap::new(),
        completed_lifecycles: total.completed,
        empty_polls: total.empty_polls,
        retries: attempts.saturating_sub(total.calls),
        verified,
        errors: total.errors,
        ok: total.errors == 0,
        error_samples: total.error_samples,
    };
    let mut finished = total.finished;
    finished.sort_unstable();
    Ok(DuringReport {
        report,
        finished,
        lifecycle_spans: total.lifecycle_spans,
        operation_spans: total.operation_spans,
        disruption,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mixed_alternates_kinds() {
        let kinds: Vec<Kind> = (0..4).map(|index| kind_of(Workload::Mixed, index)).collect();
        assert_eq!(kinds, vec![Kind::Approval, Kind::Execution, Kind::Approval, Kind::Execution]);
        assert_eq!(kind_of(Workload::Executions, 0), Kind::Execution);
        assert_eq!(kind_of(Workload::Approvals, 1), Kind::Approval);
    }

    #[tokio::test]
    async fn clients_start_at_their_own_node() {
        let endpoints: Vec<String> = ["a:1", "b:2", "c:3"].iter().map(|s| s.to_string()).collect();
        let client = Dial::default().client(&endpoints, 1).expect("client");
        assert_eq!(client.endpoints(), ["b:2", "c:3", "a:1"]);
    }
}
