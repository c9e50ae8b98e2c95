//! `--workload governed`: the governed tool call of issue 42 as a closed-loop
//! workload.
//!
//! One lifecycle, as an agent and its approver do it: the caller (the bench
//! principal acting for `agent-i`) `Submit`s a call of [`CAPABILITY`]
//! (external side effect, not idempotent, no retry, a human approval
//! required) and gets a pending approval. With `--workload governed`
//! (decision 0108) it then sends `ResumeAndWait` with `await_decision`, and
//! the approver (`approver-i`, a different actor, decided through the same
//! app principal's `delegate-decide`) `DecideApproval`s it once that call
//! is out, after [`APPROVER_THINK`]: the decision carries the resume. The
//! lifecycle's latency leaves the think time out (it is the person's). With `governed-wait` (decision
//! 0103) it `WaitApproval`s while the approver decides, both at once, then
//! `ResumeAndWait` spends the approval and long-polls for the result. A [`gavel_client::Worker`] running in this process, as its own
//! principal on the local cluster (`worker:bench-governed`, the `worker`
//! grant only), leases the execution, runs the tool and reports.
//!
//! Because the worker runs here, the bench reads one clock on both sides and
//! splits the lifecycle into stages ([`STAGE_ORDER`]): the decision seen by
//! the caller (`governed-wait` only, from the decision's send), the lease granted (from the resume's
//! send, or with `governed` from the decision's, to the tool's start), the tool, and the result seen (from the tool's end to the
//! caller's answer, which holds the worker's report).
//!
//! Every tool run is counted per execution in [`ToolRuns`]. A caller
//! accepts its result only when the tool ran exactly once for it; after each
//! configuration and again after the worker stopped, [`check_exactly_once`]
//! fails the run for a tool that ran twice or whose result no caller got.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gavel_client::{pb, CancellationToken, Client, ClientConfig, Worker};
use serde::Serialize;

use crate::stats::ClientStats;
use crate::BenchError;

/// The governed capability: sending an email, as the peer benchmark's.
pub const CAPABILITY: &str = "bench.email.send";
/// Its queue.
pub const QUEUE: &str = "bench-governed";
/// The worker principal's id on the local cluster (`worker:bench-governed`).
pub const WORKER_PRINCIPAL: &str = "bench-governed";
/// Slots of the in-process worker at the least: as many as the peer
/// benchmark's Node worker, the most one poll may lease.
pub const WORKER_CONCURRENCY_MIN: usize = 64;
/// How long one `WaitApproval` or `ResumeAndWait` waits (the server caps
/// both at 60 s); a lifecycle that needs longer fails.
const WAIT_MS: u64 = 30_000;
/// The attempt deadline and heartbeat timeout of the capability: the peer
/// benchmark's `capability.toml`.
const CAPABILITY_TIMEOUT_MS: u64 = 10_000;
const CAPABILITY_HEARTBEAT_TIMEOUT_MS: u64 = 3_000;
/// The approver's think time: it decides this long after the caller's
/// call that waits for the decision is out (`WaitApproval`, or with
/// `governed` the `ResumeAndWait` on the decision), as a person decides
/// long after the request waits. It is the person's time, not the
/// system's: the lifecycle's latency leaves it out, its throughput does
/// not.
pub const APPROVER_THINK: Duration = Duration::from_millis(5);
/// How long the worker's long-poll waits when idle.
const WORKER_POLL_WAIT: Duration = Duration::from_secs(5);
/// How long the worker's running handlers may finish after the bench stops it.
const WORKER_SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// The stages of a governed lifecycle, in order, as printed: names of
/// [`ClientStats::stage`] histograms.
pub const STAGE_ORDER: [&str; 4] = ["decision_seen", "lease_granted", "tool", "result_seen"];

/// Registers [`CAPABILITY`] on [`QUEUE`].
pub(crate) async fn register_capability(client: &Client) -> Result<(), BenchError> {
    client
        .register_capability(pb::RegisterCapabilityRequest {
            request_id: String::new(),
            spec: Some(pb::CapabilitySpec {
                id: CAPABILITY.to_string(),
                side_effect: pb::SideEffect::External as i32,
                risk: pb::Risk::High as i32,
                idempotent: false,
                retry: None,
                timeout_ms: Some(CAPABILITY_TIMEOUT_MS),
                heartbeat_timeout_ms: Some(CAPABILITY_HEARTBEAT_TIMEOUT_MS),
                approval: Some(pb::ApprovalPolicy {
                    required: true,
                    r#type: Some("human".to_string()),
                    expires_in_ms: Some(15 * 60 * 1000),
                }),
                queue: Some(QUEUE.to_string()),
                tags: vec!["gavel-bench".to_string()],
            }),
        })
        .await
        .map_err(BenchError::client(format!("registering capability {CAPABILITY}")))?;
    Ok(())
}

/// What the tool did for one execution.
#[derive(Debug, Clone, Copy)]
pub struct ToolRun {
    /// How often the tool ran for it.
    pub runs: u32,
    /// When its first run started (the lease was granted and handed over).
    pub started: Instant,
    /// When its last run finished.
    pub finished: Instant,
    /// Whether a caller got its result and accepted it.
    pub seen: bool,
}

/// Every tool run of the worker, by execution id.
#[derive(Debug, Default)]
pub struct ToolRuns {
    runs: Mutex<HashMap<String, ToolRun>>,
}

impl ToolRuns {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, ToolRun>> {
        // A panic while holding the lock leaves the counts as they were: keep reading them.
        self.runs.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Counts a run of the tool for `execution_id` that started at `started`; returns the count.
    fn ran(&self, execution_id: &str, started: Instant) -> u32 {
        let finished = Instant::now();
        let mut runs = self.lock();
        let run = runs.entry(execution_id.to_string()).or_insert(ToolRun { runs: 0, started, finished, seen: false });
        run.runs += 1;
        run.finished = finished;
        run.runs
    }

    /// Marks `execution_id`'s result as seen by its caller and returns its
    /// run, or why it may not be accepted.
    fn seen(&self, execution_id: &str) -> Result<ToolRun, String> {
        let mut runs = self.lock();
        let run =
            runs.get_mut(execution_id).ok_or_else(|| format!("{execution_id}: a result, but the tool never ran"))?;
        if run.runs != 1 {
            return Err(format!("{execution_id}: the tool ran {} times", run.runs));
        }
        run.seen = true;
        Ok(*run)
    }

    /// The exactly-once check of the executions whose id starts with `prefix`.
    pub fn check(&self, prefix: &str, completed: u64) -> ExactlyOnce {
        check_exactly_once(&self.lock(), prefix, completed)
    }
}

/// Whether each lifecycle's tool ran exactly once.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ExactlyOnce {
    /// Executions the tool ran for.
    pub executions: u64,
    /// Tool runs in all.
    pub tool_runs: u64,
    /// Executions whose tool ran once and whose caller got the result.
    pub ran_once_and_seen: u64,
    /// Governed lifecycles completed (the clients' count).
    pub completed: u64,
    /// What was wrong, one line each (the first few).
    pub problems: Vec<String>,
    /// No problem, and one seen execution per completed lifecycle.
    pub ok: bool,
}

/// Problems kept as examples.
const PROBLEMS_MAX: usize = 10;

/// Checks the runs of executions whose id starts with `prefix`: each ran
/// exactly once and its caller got the result, and the callers completed
/// as many lifecycles as there are such executions.
pub fn check_exactly_once(runs: &HashMap<String, ToolRun>, prefix: &str, completed: u64) -> ExactlyOnce {
    let mut problems = Vec::new();
    let mut problem_count = 0usize;
    let mut note = |problems: &mut Vec<String>, text: String| {
        problem_count += 1;
        if problems.len() < PROBLEMS_MAX {
            problems.push(text);
        }
    };
    let (mut executions, mut tool_runs, mut good) = (0u64, 0u64, 0u64);
    let mut ids: Vec<&String> = runs.keys().filter(|id| id.starts_with(prefix)).collect();
    ids.sort();
    for id in ids {
        let run = runs[id];
        executions += 1;
        tool_runs += u64::from(run.runs);
        match (run.runs, run.seen) {
            (1, true) => good += 1,
            (1, false) => note(&mut problems, format!("{id}: the tool ran once but no caller got the result")),
            (count, _) => note(&mut problems, format!("{id}: the tool ran {count} times")),
        }
    }
    if good != completed {
        note(&mut problems, format!("{completed} lifecycles completed, {good} tool runs were once and seen"));
    }
    ExactlyOnce { executions, tool_runs, ran_once_and_seen: good, completed, ok: problem_count == 0, problems }
}

/// The in-process worker of the governed workload.
pub(crate) struct GovernedWorker {
    /// The tool's runs.
    pub runs: Arc<ToolRuns>,
    /// Its slots.
    pub concurrency: usize,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), gavel_client::Error>>,
}

impl GovernedWorker {
    /// Starts a worker on [`QUEUE`] with `concurrency` slots, reaching
    /// `endpoints` with `config` (its principal's credentials).
    pub fn start(
        endpoints: &[String],
        config: ClientConfig,
        concurrency: usize,
        worker_id: &str,
    ) -> Result<GovernedWorker, BenchError> {
        let runs = Arc::new(ToolRuns::default());
        let tool_runs = runs.clone();
        let worker = Worker::builder(endpoints)
            .client_config(config)
            .queue(QUEUE)
            .concurrency(concurrency)
            .worker_id(worker_id)
            .poll_wait(WORKER_POLL_WAIT)
            .shutdown_grace(WORKER_SHUTDOWN_GRACE)
            .handler(move |task| {
                let runs = tool_runs.clone();
                async move { Ok(send_email(&runs, &task.execution_id, Instant::now(), &task.input_json)) }
            })
            .build()
            .map_err(BenchError::client("building the governed workload's worker"))?;
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(worker.run(shutdown.clone()));
        Ok(GovernedWorker { runs, concurrency, shutdown, task })
    }

    /// Stops the worker: no more polls, running handlers finish within the grace.
    pub async fn stop(self) -> Result<Arc<ToolRuns>, BenchError> {
        self.shutdown.cancel();
        match self.task.await? {
            Ok(()) => Ok(self.runs),
            Err(error) => Err(BenchError::client("running the governed workload's worker")(error)),
        }
    }
}

/// The tool: counts the run and answers what it did, with the run's count.
fn send_email(runs: &ToolRuns, execution_id: &str, started: Instant, input_json: &str) -> serde_json::Value {
    let count = runs.ran(execution_id, started);
    let subject = serde_json::from_str::<serde_json::Value>(input_json)
        .ok()
        .and_then(|input| input.get("subject").and_then(|subject| subject.as_str().map(str::to_string)))
        .unwrap_or_default();
    serde_json::json!({ "lc": execution_id, "tool": "send_email", "status": "executed", "subject": subject, "execCount": count })
}

/// The requester of client `index`'s calls: an agent acting for the app.
fn agent(index: usize) -> pb::Actor {
    pb::Actor { id: format!("agent-{index}"), kind: pb::ActorKind::Automation as i32, ..pb::Actor::default() }
}

/// The person who approves client `index`'s calls.
fn approver(index: usize) -> pb::Actor {
    pb::Actor { id: format!("approver-{index}"), kind: pb::ActorKind::User as i32, ..pb::Actor::default() }
}

/// One governed lifecycle of client `index` with execution id `id`; returns
/// the execution's output as the caller got it.
pub(crate) async fn lifecycle(
    client: &Client,
    index: usize,
    id: &str,
    runs: &ToolRuns,
    await_decision: bool,
    stats: &mut ClientStats,
) -> Result<String, String> {
    let started = Instant::now();
    stats.calls += 1;
    let submitted = client
        .submit(pb::SubmitRequest {
            request_id: format!("{id}-submit"),
            execution_id: Some(id.to_string()),
            capability_id: CAPABILITY.to_string(),
            input_json: format!(r#"{{"to":"ops@example.com","subject":"{id}","body":"see attached"}}"#),
            actor: Some(agent(index)),
            surface: "gavel-bench".to_string(),
            correlation_id: None,
        })
        .await
        .map_err(|error| format!("submit {id}: {error}"))?;
    let submitted_at = Instant::now();
    stats.operation_between("submit", started, submitted_at);
    let approval_id = match submitted.outcome {
        Some(pb::submit_response::Outcome::ApprovalRequired(approval))
            if approval.status == pb::ApprovalStatus::Pending as i32 && submitted.created =>
        {
            approval.id
        }
        other => return Err(format!("submit {id}: expected a new pending approval, got {other:?}")),
    };

    let decide_request = pb::DecideApprovalRequest {
        request_id: format!("{id}-decide"),
        id: approval_id.clone(),
        status: pb::ApprovalStatus::Approved as i32,
        approver: Some(approver(index)),
        comment: Some("bench".to_string()),
        ..pb::DecideApprovalRequest::default()
    };
    let resume_request = |await_decision| pb::ResumeAndWaitRequest {
        resume: Some(pb::ResumeRequest {
            request_id: format!("{id}-resume"),
            approval_id: approval_id.clone(),
            ..pb::ResumeRequest::default()
        }),
        wait_ms: WAIT_MS,
        await_decision,
    };
    let check_decided = |decided: Result<pb::DecideApprovalResponse, gavel_client::Error>| {
        let decided = decided.map_err(|error| format!("decide {approval_id}: {error}"))?;
        if decided.approval.as_ref().map(|approval| approval.status) == Some(pb::ApprovalStatus::Rejected as i32) {
            return Err(format!("decide {approval_id}: REJECTED: {:?}", decided.approval));
        }
        Ok(())
    };

    // The approver thinks, then decides: its answer, when it sent the
    // decision and when the answer came.
    let decide = || async {
        tokio::time::sleep(APPROVER_THINK).await;
        let decide_sent = Instant::now();
        let answer = client.decide_approval(decide_request.clone()).await;
        (answer, decide_sent, Instant::now())
    };

    let (resumed, lease_from, result_at, think) = if await_decision {
        // The caller resumes on the decision and waits for the result; the
        // approver decides once the caller's call is out (a person decides
        // long after), and the decision carries the waiting resume.
        stats.calls += 2;
        let resume_sent = Instant::now();
        let resume = async {
            let answer = client.resume_and_wait(resume_request(true)).await;
            (answer, Instant::now())
        };
        let ((resumed, result_at), (decided, decide_sent, decided_at)) = tokio::join!(resume, decide());
        check_decided(decided)?;
        stats.operation_between("decide", decide_sent, decided_at);
        stats.operation_between("resume_and_wait", resume_sent, result_at);
        (resumed, decide_sent, result_at, decide_sent - resume_sent)
    } else {
        // The caller waits for the decision while the approver makes it.
        stats.calls += 2;
        let wait = async {
            let answer =
                client.wait_approval(pb::WaitApprovalRequest { id: approval_id.clone(), wait_ms: WAIT_MS }).await;
            (answer, Instant::now())
        };
        let ((waited, seen_at), (decided, decide_sent, decided_at)) = tokio::join!(wait, decide());
        check_decided(decided)?;
        stats.operation_between("decide", decide_sent, decided_at);
        let waited = waited.map_err(|error| format!("wait for {approval_id}: {error}"))?;
        stats.operation_between("wait_approval", submitted_at, seen_at);
        stats.stage("decision_seen", decide_sent, seen_at);
        let seen_status = waited.approval.as_ref().map(|approval| approval.status);
        if waited.timed_out || seen_status != Some(pb::ApprovalStatus::Approved as i32) {
            return Err(format!("wait for {approval_id}: timed out {} in status {seen_status:?}", waited.timed_out));
        }
        let resume_sent = Instant::now();
        stats.calls += 1;
        let resumed = client.resume_and_wait(resume_request(false)).await;
        let result_at = Instant::now();
        stats.operation_between("resume_and_wait", resume_sent, result_at);
        (resumed, resume_sent, result_at, decide_sent - submitted_at)
    };
    let resumed = resumed.map_err(|error| format!("resume and wait {approval_id}: {error}"))?;
    let execution = resumed.execution.ok_or_else(|| format!("resume and wait {id}: no execution in the reply"))?;
    let output_json = match execution.result.and_then(|result| result.outcome) {
        Some(pb::result_envelope::Outcome::Completed(completed))
            if !resumed.timed_out
                && execution.execution_id == id
                && execution.state == pb::ExecutionState::Completed as i32
                && execution.approval_id.as_deref() == Some(approval_id.as_str()) =>
        {
            completed.output_json
        }
        other => {
            return Err(format!(
                "resume and wait {id}: execution {} state {} timed out {}, approval {:?}, result {other:?}",
                execution.execution_id, execution.state, resumed.timed_out, execution.approval_id
            ))
        }
    };
    let output: serde_json::Value =
        serde_json::from_str(&output_json).map_err(|error| format!("{id}: output is not JSON: {error}"))?;
    if output.get("lc").and_then(serde_json::Value::as_str) != Some(id)
        || output.get("execCount").and_then(serde_json::Value::as_u64) != Some(1)
    {
        return Err(format!("{id}: the result is not of one run of its own tool: {output_json}"));
    }
    let run = runs.seen(id)?;
    stats.stage("lease_granted", lease_from, run.started);
    stats.stage("tool", run.started, run.finished);
    stats.stage("result_seen", run.finished, result_at);
    // The approver's think time (as slept) is the person's, not the system's.
    stats.lifecycle("governed", started + think);
    Ok(output_json)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(runs: u32, seen: bool) -> ToolRun {
        let now = Instant::now();
        ToolRun { runs, started: now, finished: now, seen }
    }

    #[test]
    fn once_and_seen_passes_and_only_the_prefix_counts() {
        let runs: HashMap<String, ToolRun> = [
            ("b1-0-c0-g1".to_string(), run(1, true)),
            ("b1-0-c1-g1".to_string(), run(1, true)),
            ("b1-1-c0-g1".to_string(), run(2, false)),
        ]
        .into_iter()
        .collect();
        let check = check_exactly_once(&runs, "b1-0-", 2);
        assert!(check.ok, "{check:?}");
        assert_eq!((check.executions, check.tool_runs, check.ran_once_and_seen), (2, 2, 2));
    }

    #[test]
    fn a_second_run_an_unseen_run_or_a_missing_one_fails() {
        let runs: HashMap<String, ToolRun> =
            [("p-a".to_string(), run(2, true)), ("p-b".to_string(), run(1, false))].into_iter().collect();
        let check = check_exactly_once(&runs, "p-", 1);
        assert!(!check.ok);
        assert_eq!((check.executions, check.tool_runs, check.ran_once_and_seen), (2, 3, 0));
        assert_eq!(
            check.problems,
            vec![
                "p-a: the tool ran 2 times".to_string(),
                "p-b: the tool ran once but no caller got the result".to_string(),
                "1 lifecycles completed, 0 tool runs were once and seen".to_string(),
            ]
        );
        assert!(!check_exactly_once(&HashMap::new(), "p-", 1).ok, "a completed lifecycle whose tool never ran");
        assert!(check_exactly_once(&HashMap::new(), "p-", 0).ok);
    }

    #[test]
    fn the_tool_counts_its_runs_and_a_caller_accepts_only_one() {
        let runs = ToolRuns::default();
        let output = send_email(&runs, "x-1", Instant::now(), r#"{"subject":"hi"}"#);
        assert_eq!(output["execCount"], 1);
        assert_eq!(output["subject"], "hi");
        assert!(runs.seen("x-1").is_ok());
        assert!(runs.seen("x-2").is_err(), "never ran");
        send_email(&runs, "x-1", Instant::now(), "{}");
        assert!(runs.seen("x-1").is_err_and(|why| why.contains("2 times")));
        assert!(!runs.check("x-", 1).ok);
    }
}
