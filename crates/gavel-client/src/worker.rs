//! [`Worker`]: the handler author writes only the handler.
//!
//! The worker long-polls its queues, runs up to `concurrency` handlers at
//! once, heartbeats each lease in the background, and cancels a handler's
//! token when the caller cancels (seen in a heartbeat reply), when the lease
//! is lost, or at the attempt's deadline on the worker's own clock, which
//! fires even when no node can be reached. It then reports the outcome,
//! retrying on transport failures with the same request id, and in the same
//! call (`ReportAndPoll`) takes the next task that is ready for the slot it
//! frees, so a busy worker spends one round trip per task; an idle slot goes
//! back to the long-poll.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use gavel_proto::v1 as pb;
use serde::de::DeserializeOwned;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::client::{new_request_id, Client, ClientConfig};

/// The most tasks one poll may ask for (the cluster's `POLL_TASKS_MAX`, which
/// the SDK does not link); a worker with a higher concurrency fills its slots
/// over several polls.
pub const POLL_TASKS_MAX: u32 = 64;
use crate::error::Error;

/// Everything a handler knows about the attempt it runs.
#[derive(Debug, Clone)]
pub struct TaskContext {
    /// The execution; stable across retries.
    pub execution_id: String,
    /// Attempt number, from 1.
    pub attempt: u32,
    /// Stable across retries of this execution, unique across executions:
    /// pass it to the downstream service as its idempotency token.
    pub idempotency_key: String,
    /// Fencing token: strictly increasing across leases; a downstream service
    /// can refuse a call carrying an older one.
    pub lease_id: u64,
    /// When the attempt times out (Unix ms, cluster clock).
    pub deadline_ms: i64,
    /// Who submitted the execution.
    pub actor: Option<pb::Actor>,
    /// Who approved it, when it needed approval.
    pub approver: Option<pb::Actor>,
    /// The capability version it was submitted under.
    pub capability: Option<pb::Capability>,
    /// Canonical JSON input.
    pub input_json: String,
    /// Caller's correlation id.
    pub correlation_id: Option<String>,
    /// Fires on caller cancel, lease loss or the deadline. Forward it downstream.
    pub cancel: CancellationToken,
}

impl TaskContext {
    /// Decodes the input into a type.
    pub fn input<T: DeserializeOwned>(&self) -> Result<T, HandlerError> {
        serde_json::from_str(&self.input_json)
            .map_err(|error| HandlerError::fatal("INPUT_INVALID", format!("input does not decode: {error}")))
    }
}

/// A handler's failure: the code to report and whether a retry may help.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandlerError {
    /// Error code reported to the cluster (`nonRetryableCodes` refer to it).
    pub code: String,
    /// Message for people.
    pub message: String,
    /// Whether the failure is transient. The cluster still applies the retry rule.
    pub retryable: bool,
}

impl HandlerError {
    /// A transient failure.
    pub fn retryable(code: &str, message: impl Into<String>) -> HandlerError {
        HandlerError { code: code.to_string(), message: message.into(), retryable: true }
    }

    /// A failure that retrying will not fix.
    pub fn fatal(code: &str, message: impl Into<String>) -> HandlerError {
        HandlerError { code: code.to_string(), message: message.into(), retryable: false }
    }
}

type HandlerResult = Result<serde_json::Value, HandlerError>;
type Handler = Arc<dyn Fn(TaskContext) -> Pin<Box<dyn Future<Output = HandlerResult> + Send>> + Send + Sync>;

/// Builds a [`Worker`].
pub struct WorkerBuilder {
    endpoints: Vec<String>,
    config: ClientConfig,
    queues: Vec<String>,
    concurrency: usize,
    worker_id: String,
    poll_wait: Duration,
    heartbeat_interval: Duration,
    shutdown_grace: Duration,
    handler: Option<Handler>,
}

/// A running worker's configuration; see [`Worker::builder`].
pub struct Worker {
    client: Client,
    heartbeats: Client,
    queues: Vec<String>,
    concurrency: usize,
    worker_id: String,
    poll_wait: Duration,
    heartbeat_interval: Duration,
    shutdown_grace: Duration,
    handler: Handler,
}

impl Worker {
    /// RPC attempts this worker has sent (polls, heartbeats, reports), retries included.
    pub fn attempts_counter(&self) -> impl Fn() -> u64 + Send + Sync + 'static {
        let (client, heartbeats) = (self.client.clone(), self.heartbeats.clone());
        move || client.attempts() + heartbeats.attempts()
    }

    /// Starts building a worker for these node addresses.
    pub fn builder(endpoints: &[String]) -> WorkerBuilder {
        WorkerBuilder {
            endpoints: endpoints.to_vec(),
            config: ClientConfig::default(),
            queues: Vec::new(),
            concurrency: 1,
            worker_id: format!("worker-{}", uuid::Uuid::new_v4()),
            poll_wait: Duration::from_secs(10),
            heartbeat_interval: Duration::from_millis(500),
            shutdown_grace: Duration::from_secs(10),
            handler: None,
        }
    }
}

impl WorkerBuilder {
    /// The client configuration polls and reports use: timings, TLS and the
    /// token (heartbeats use the same credentials with shorter timings).
    pub fn client_config(mut self, config: ClientConfig) -> Self {
        self.config = config;
        self
    }

    /// Adds a queue to poll.
    pub fn queue(mut self, queue: &str) -> Self {
        self.queues.push(queue.to_string());
        self
    }

    /// How many handlers may run at once.
    pub fn concurrency(mut self, concurrency: usize) -> Self {
        self.concurrency = concurrency.max(1);
        self
    }

    /// The worker's id, recorded on its leases.
    pub fn worker_id(mut self, worker_id: &str) -> Self {
        self.worker_id = worker_id.to_string();
        self
    }

    /// Long-poll wait per poll.
    pub fn poll_wait(mut self, wait: Duration) -> Self {
        self.poll_wait = wait;
        self
    }

    /// Interval between heartbeats of one lease (it also bounds how fast a
    /// caller cancel reaches the handler).
    pub fn heartbeat_interval(mut self, interval: Duration) -> Self {
        self.heartbeat_interval = interval;
        self
    }

    /// How long running handlers may finish after shutdown before their tokens fire.
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.shutdown_grace = grace;
        self
    }

    /// The handler. It returns the output as JSON, or a [`HandlerError`].
    pub fn handler<F, Fut>(mut self, handler: F) -> Self
    where
        F: Fn(TaskContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        self.handler = Some(Arc::new(move |context| Box::pin(handler(context))));
        self
    }

    /// Validates and builds.
    pub fn build(self) -> Result<Worker, Error> {
        let handler = self.handler.ok_or_else(|| Error::Config("a handler is required".to_string()))?;
        if self.queues.is_empty() {
            return Err(Error::Config("at least one queue is required".to_string()));
        }
        let client = Client::with_config(&self.endpoints, self.config.clone())?;
        // Heartbeats retry only briefly: the next one is due soon anyway, and the
        // local deadline, not the heartbeat, is what stops a cut-off worker.
        let heartbeats = Client::with_config(
            &self.endpoints,
            ClientConfig { retry_budget: self.heartbeat_interval, call_timeout: Duration::from_secs(2), ..self.config },
        )?;
        Ok(Worker {
            client,
            heartbeats,
            queues: self.queues,
            concurrency: self.concurrency,
            worker_id: self.worker_id,
            poll_wait: self.poll_wait,
            heartbeat_interval: self.heartbeat_interval,
            shutdown_grace: self.shutdown_grace,
            handler,
        })
    }
}

fn wall_clock_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |elapsed| elapsed.as_millis() as i64)
}

/// Why a handler's token fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    CallerCancelled,
    LeaseLost,
}

impl Worker {
    /// Runs until `shutdown` fires: then stops polling, lets running handlers
    /// finish within the grace period, and cancels the rest.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), Error> {
        let worker = Arc::new(self);
        let permits = Arc::new(Semaphore::new(worker.concurrency));
        let handlers_token = CancellationToken::new();
        let mut running = JoinSet::new();
        'polling: loop {
            let first = tokio::select! {
                permit = permits.clone().acquire_owned() => permit.map_err(|_| Error::Config("worker closed".to_string()))?,
                _ = shutdown.cancelled() => break 'polling,
            };
            // One poll asks for at most the cluster's limit; a higher
            // concurrency fills its slots over several polls.
            let max_tasks = (1 + permits.available_permits() as u32).min(POLL_TASKS_MAX);
            let request = pb::PollRequest {
                request_id: new_request_id(),
                worker_id: worker.worker_id.clone(),
                queues: worker.queues.clone(),
                max_tasks,
                wait_ms: worker.poll_wait.as_millis() as u64,
            };
            let polled = tokio::select! {
                polled = worker.client.poll(request) => polled,
                _ = shutdown.cancelled() => break 'polling,
            };
            while running.try_join_next().is_some() {}
            let tasks = match polled {
                Ok(response) => response.tasks,
                Err(error) => {
                    tracing::warn!(%error, "poll failed; retrying");
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                        _ = shutdown.cancelled() => break 'polling,
                    }
                    continue;
                }
            };
            let mut first = Some(first);
            for task in tasks {
                let permit = match first.take() {
                    Some(permit) => permit,
                    None => match permits.clone().try_acquire_owned() {
                        Ok(permit) => permit,
                        // Cannot happen: only this loop takes permits and it asked for
                        // at most as many tasks as were free. Run it anyway rather than drop a lease.
                        Err(_) => match permits.clone().acquire_owned().await {
                            Ok(permit) => permit,
                            Err(_) => break 'polling,
                        },
                    },
                };
                running.spawn(run_tasks(worker.clone(), task, handlers_token.clone(), shutdown.clone(), permit));
            }
        }
        let drained =
            tokio::time::timeout(worker.shutdown_grace, async { while running.join_next().await.is_some() {} }).await;
        if drained.is_err() {
            handlers_token.cancel();
            while running.join_next().await.is_some() {}
        }
        Ok(())
    }
}

/// Runs `task` and then, while each report brings back a ready task for the
/// slot, the next one, holding the slot's permit throughout.
async fn run_tasks(
    worker: Arc<Worker>,
    task: pb::Task,
    handlers_token: CancellationToken,
    shutdown: CancellationToken,
    _permit: OwnedSemaphorePermit,
) {
    let mut task = Some(task);
    while let Some(next) = task.take() {
        task = run_task(&worker, next, handlers_token.child_token(), &shutdown).await;
    }
}

/// Runs one task and reports its outcome; returns the task the report took
/// for the freed slot, if one was ready (never after shutdown).
async fn run_task(
    worker: &Arc<Worker>,
    task: pb::Task,
    token: CancellationToken,
    shutdown: &CancellationToken,
) -> Option<pb::Task> {
    let lease = task.lease.clone()?;
    let context = TaskContext {
        execution_id: task.execution_id.clone(),
        attempt: task.attempt,
        idempotency_key: task.idempotency_key.clone(),
        lease_id: lease.lease_id,
        deadline_ms: lease.deadline_ms,
        actor: task.actor.clone(),
        approver: task.approver.clone(),
        capability: task.capability.clone(),
        input_json: task.input_json.clone(),
        correlation_id: task.correlation_id.clone(),
        cancel: token.clone(),
    };
    // The deadline on this worker's clock: it fires with no cluster at all.
    let remaining_ms = (lease.deadline_ms - wall_clock_ms()).max(0) as u64;
    let local_deadline = tokio::time::Instant::now() + Duration::from_millis(remaining_ms);
    let (stop_sender, mut stop_receiver) = tokio::sync::watch::channel(None::<Stop>);
    let heartbeat = tokio::spawn(heartbeat_loop(worker.clone(), lease.lease_id, token.clone(), stop_sender));
    let handler = (worker.handler)(context);
    let outcome = tokio::select! {
        outcome = handler => Some(outcome),
        _ = token.cancelled() => None,
        _ = tokio::time::sleep_until(local_deadline) => None,
    };
    token.cancel();
    heartbeat.abort();
    let stop = *stop_receiver.borrow_and_update();
    let Some(outcome) = outcome.filter(|_| stop.is_none()) else {
        // Cancelled, lease lost or timed out: the cluster already decided (or will,
        // at the deadline); a report now would only be refused as LEASE_LOST.
        tracing::info!(execution_id = %task.execution_id, lease_id = lease.lease_id, ?stop, "handler stopped before reporting");
        return None;
    };
    let outcome = match outcome {
        Ok(output) => completed(output.to_string()),
        Err(error) => pb::report_request::Outcome::Failed(pb::ReportFailed {
            code: error.code,
            message: error.message,
            retryable: error.retryable,
        }),
    };
    let request = pb::ReportRequest {
        request_id: new_request_id(),
        lease_id: lease.lease_id,
        worker_id: worker.worker_id.clone(),
        outcome: Some(outcome),
    };
    if shutdown.is_cancelled() {
        if let Err(error) = worker.client.report(request).await {
            tracing::warn!(execution_id = %task.execution_id, %error, "report refused or undeliverable");
        }
        return None;
    }
    // Report and take the next ready task without waiting (wait_ms 0): a
    // long wait here would hold the slot the main loop's long-poll covers.
    let request = pb::ReportAndPollRequest {
        report: Some(request),
        poll_request_id: String::new(),
        queues: worker.queues.clone(),
        max_tasks: 1,
        wait_ms: 0,
    };
    match worker.client.report_and_poll(request).await {
        Ok(answer) => {
            if let Some(failure) = answer.poll_failure {
                let detail = failure.detail.unwrap_or_default();
                tracing::warn!(code = %detail.code, message = %detail.message, "report accepted; its poll failed");
            }
            answer.tasks.into_iter().next()
        }
        Err(error) => {
            tracing::warn!(execution_id = %task.execution_id, %error, "report refused or undeliverable");
            None
        }
    }
}

/// A completed outcome, unless the cluster would refuse the output (not
/// I-JSON: a `u64` over 2^53 - 1, say): then a non-retryable
/// `OUTPUT_INVALID` failure whose message names the JSON Pointer, as the
/// TypeScript worker reports an output that is not JSON. A report of the
/// output itself would be refused, and the attempt would only end at its
/// deadline.
fn completed(output_json: String) -> pb::report_request::Outcome {
    match crate::json::check_output(&output_json) {
        Ok(()) => pb::report_request::Outcome::Completed(pb::ReportCompleted { output_json }),
        Err(refusal) => pb::report_request::Outcome::Failed(pb::ReportFailed {
            code: "OUTPUT_INVALID".to_string(),
            message: refusal.to_string(),
            retryable: false,
        }),
    }
}

async fn heartbeat_loop(
    worker: Arc<Worker>,
    lease_id: u64,
    token: CancellationToken,
    stop: tokio::sync::watch::Sender<Option<Stop>>,
) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(worker.heartbeat_interval) => {}
            _ = token.cancelled() => return,
        }
        let request =
            pb::HeartbeatRequest { request_id: new_request_id(), lease_id, worker_id: worker.worker_id.clone() };
        match worker.heartbeats.heartbeat(request).await {
            Ok(reply) if reply.cancel_requested => {
                stop.send_replace(Some(Stop::CallerCancelled));
                token.cancel();
                return;
            }
            Ok(_) => {}
            Err(error) if error.code() == "LEASE_LOST" => {
                stop.send_replace(Some(Stop::LeaseLost));
                token.cancel();
                return;
            }
            // Unreachable cluster: keep trying; the local deadline still stops the handler.
            Err(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_output_the_cluster_would_refuse_is_reported_as_a_failure_naming_the_pointer() {
        let output = serde_json::json!({"order": {"id": u64::MAX}, "ok": 9_007_199_254_740_991_u64});
        match completed(output.to_string()) {
            pb::report_request::Outcome::Failed(failed) => {
                assert_eq!((failed.code.as_str(), failed.retryable), ("OUTPUT_INVALID", false));
                let expected = "output is not I-JSON (RFC 7493): number 18446744073709551615 at /order/id";
                assert!(failed.message.contains(expected), "{}", failed.message);
            }
            other => panic!("{other:?}"),
        }
        let exact = serde_json::json!({"id": 9_007_199_254_740_991_u64}).to_string();
        assert_eq!(
            completed(exact.clone()),
            pb::report_request::Outcome::Completed(pb::ReportCompleted { output_json: exact })
        );
    }
}
