//! The seeded workload: approval clients, execution submitters and workers,
//! built on the SDK, every operation recorded in the history.
//!
//! - **Approval clients** create an approval, decide it (sometimes two
//!   deciders race), let 2–4 consumers race to spend it through different
//!   nodes, and read it back through random nodes.
//! - **Submitters** submit executions of a `read`, a `write` and a
//!   `write+idempotent` capability (plus one that needs approval: they
//!   approve and resume it), sometimes cancel them, and read them until final.
//! - **Workers** poll, then succeed, fail retryably or fatally, are slow,
//!   crash (never report), or stall past the lease deadline and report late.
//! - **Quorum and standing clients** ([`policy`]) vote on approvals a
//!   policy governs and resume them, and spend standing approvals with more
//!   callers than uses (issue #25).
//!
//! Mutations go through a fresh SDK client whose first endpoint is the node
//! chosen for that operation (followers forward to the leader); reads go to
//! one node only, so a node that answers from stale local state is seen.
//! On a secure cluster both dial TLS with the workload principal's
//! certificate ([`Workload::new`]'s `tls`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gavel_client::{Client, ClientConfig, ClientTls, Error};
use gavel_proto::v1 as pb;
use gavel_proto::v1::approval_service_client::ApprovalServiceClient;
use gavel_proto::v1::execution_service_client::ExecutionServiceClient;
use tokio_util::sync::CancellationToken;
use tonic::transport::{Channel, Endpoint};

use crate::history::{ApprovalState, CapabilityInfo, ExecutionView, LeaseGrant, Op, OpResult, Outcome};
use crate::recorder::Recorder;
use crate::rng::Rng;

pub mod policy;

/// The queue every chaos capability uses.
pub const QUEUE: &str = "chaos";

/// Lease length of every chaos capability: short, so stalls and crashes
/// make leases expire often.
pub const LEASE_TIMEOUT_MS: u64 = 1_000;
/// How long a resume on the decision waits for the decision and the
/// execution together (decision 0108): a decision lost to a fault leaves it
/// `APPROVAL_PENDING` after this.
const RESUME_ON_DECISION_WAIT_MS: u64 = 1_500;

/// What setting up the workload can fail at.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    /// A node address that is not a valid URI.
    #[error("{addr} is not a valid node address: {source}")]
    Address {
        /// The address given.
        addr: String,
        /// The parse error.
        #[source]
        source: tonic::transport::Error,
    },
    /// The cluster kept refusing a setup step (the policy).
    #[error("cannot set up {what}: {source}")]
    Setup {
        /// What was being set up.
        what: String,
        /// The last refusal.
        #[source]
        source: Error,
    },
    /// The cluster kept refusing to register a capability.
    #[error("cannot register capability {capability}: {source}")]
    Register {
        /// The capability's id.
        capability: String,
        /// The last refusal.
        #[source]
        source: Error,
    },
}

/// How many actors of each kind run.
#[derive(Debug, Clone)]
pub struct WorkloadConfig {
    /// Seed of every actor's choices.
    pub seed: u64,
    /// Approval clients.
    pub approval_clients: usize,
    /// Execution submitters.
    pub submitters: usize,
    /// Workers.
    pub workers: usize,
    /// Clients that vote on governed approvals and resume them.
    pub quorum_clients: usize,
    /// Clients that spend standing approvals.
    pub standing_clients: usize,
}

impl Default for WorkloadConfig {
    fn default() -> Self {
        WorkloadConfig {
            seed: 1,
            approval_clients: 3,
            submitters: 3,
            workers: 4,
            quorum_clients: 2,
            standing_clients: 1,
        }
    }
}

/// What every actor shares.
pub struct Workload {
    /// The history.
    pub recorder: Arc<Recorder>,
    /// `(node id, "host:port")` of every node.
    pub nodes: Vec<(u64, String)>,
    /// Raw channels, one per node, for reads that must not follow the leader.
    channels: Vec<Channel>,
    /// Set by the nemesis: workers stall past their lease deadline.
    pub stall: Arc<AtomicBool>,
    /// Stops approval clients and submitters.
    pub stop_clients: CancellationToken,
    /// Stops workers (after draining).
    pub stop_workers: CancellationToken,
    /// Set while draining: workers behave well so every execution finalizes.
    pub draining: Arc<AtomicBool>,
    /// Approval ids created (or attempted).
    pub approvals: Mutex<Vec<String>>,
    /// Execution ids submitted (or attempted).
    pub executions: Mutex<Vec<String>>,
    /// Late reports sent.
    pub late_reports: AtomicU64,
    /// Worker stalls the drain cut short (the stall would have run on past
    /// the start of the drain).
    pub stalls_cut_by_drain: AtomicU64,
    /// The workload principal's TLS (none on an insecure cluster).
    tls: Option<ClientTls>,
    /// The voters (`kind:id`) and their TLS; none on an insecure cluster.
    voters: Vec<(String, ClientTls)>,
    config: WorkloadConfig,
    /// How channels connect: real TCP, or a simulator's network.
    dial: Option<gavel_client::Dial>,
    /// Clients made so far: each gets its own retry-jitter seed, derived
    /// from the workload's seed, when the workload runs in a simulator.
    clients_made: AtomicU64,
    /// The cluster's clock (milliseconds since the Unix epoch): this
    /// machine's, or a simulator's.
    clock_ms: fn() -> i64,
}

/// The capabilities the workload registers.
pub fn capabilities() -> Vec<(pb::CapabilitySpec, CapabilityInfo)> {
    let spec = |id: &str, side_effect: pb::SideEffect, idempotent: bool, retries: Option<u32>, approval: bool| {
        let spec = pb::CapabilitySpec {
            id: id.to_string(),
            side_effect: side_effect as i32,
            risk: pb::Risk::Low as i32,
            idempotent,
            retry: retries.map(|max_attempts| pb::RetryConfig {
                max_attempts,
                backoff_ms: Some(50),
                non_retryable_codes: Vec::new(),
            }),
            timeout_ms: Some(LEASE_TIMEOUT_MS),
            heartbeat_timeout_ms: None,
            approval: approval.then(|| pb::ApprovalPolicy {
                required: true,
                r#type: Some("chaos".to_string()),
                expires_in_ms: Some(3_600_000),
            }),
            queue: Some(QUEUE.to_string()),
            tags: Vec::new(),
        };
        let info = CapabilityInfo {
            id: id.to_string(),
            side_effect: if side_effect == pb::SideEffect::Read { "read" } else { "write" }.to_string(),
            idempotent,
            max_attempts: retries,
            requires_approval: approval,
        };
        (spec, info)
    };
    vec![
        spec("chaos.read", pb::SideEffect::Read, false, Some(2), false),
        spec("chaos.write", pb::SideEffect::Write, false, None, false),
        spec("chaos.write_idem", pb::SideEffect::Write, true, Some(2), false),
        spec("chaos.approved", pb::SideEffect::Write, true, Some(1), true),
    ]
}

fn actor(id: &str) -> pb::Actor {
    pb::Actor { kind: pb::ActorKind::User as i32, id: id.to_string(), ..Default::default() }
}

/// Whether a refusal means the operation definitely did not happen (`fail`)
/// rather than that its fate is unknown (`info`).
fn definite(error: &Error) -> bool {
    match error {
        Error::Domain { status, .. } => matches!(
            status,
            tonic::Code::InvalidArgument
                | tonic::Code::NotFound
                | tonic::Code::AlreadyExists
                | tonic::Code::FailedPrecondition
                | tonic::Code::PermissionDenied
                | tonic::Code::Unauthenticated
                | tonic::Code::OutOfRange
        ),
        Error::Unavailable(_) | Error::Config(_) => false,
    }
}

fn approval_state(status: i32) -> ApprovalState {
    match pb::ApprovalStatus::try_from(status).unwrap_or(pb::ApprovalStatus::Unspecified) {
        pb::ApprovalStatus::Pending => ApprovalState::Pending,
        pb::ApprovalStatus::Approved => ApprovalState::Approved,
        pb::ApprovalStatus::Rejected => ApprovalState::Rejected,
        pb::ApprovalStatus::Cancelled => ApprovalState::Cancelled,
        pb::ApprovalStatus::Expired => ApprovalState::Expired,
        pb::ApprovalStatus::Voided => ApprovalState::Voided,
        pb::ApprovalStatus::Consumed => ApprovalState::Consumed,
        pb::ApprovalStatus::Unspecified => ApprovalState::Absent,
    }
}

/// The register view of an approval (`Absent` when none).
pub fn approval_view(approval: Option<&pb::Approval>) -> OpResult {
    match approval {
        Some(approval) => OpResult::Approval {
            state: approval_state(approval.status),
            consumed_by: approval.consumed_by_execution_id.clone(),
        },
        None => OpResult::Approval { state: ApprovalState::Absent, consumed_by: None },
    }
}

/// The fields of an audit event the checkers use.
pub fn audit_event(event: &pb::Event) -> crate::history::AuditEvent {
    crate::history::AuditEvent {
        cursor: event.cursor,
        event_type: event.r#type.clone(),
        execution_id: event.execution_id.clone(),
        approval_id: event.approval_id.clone(),
        attempt: event.attempt,
        lease_id: event.lease_id,
        code: event.code.clone(),
        principal: event.principal.clone(),
        vote: event.attributes.get("vote").cloned(),
    }
}

/// A client's view of an execution, with a digest of its final result.
pub fn execution_view(execution: &pb::Execution) -> ExecutionView {
    let state = pb::ExecutionState::try_from(execution.state).unwrap_or(pb::ExecutionState::Unspecified);
    let status = match state {
        pb::ExecutionState::Queued => "queued",
        pb::ExecutionState::Leased => "leased",
        pb::ExecutionState::Backoff => "backoff",
        pb::ExecutionState::Completed => "completed",
        pb::ExecutionState::Failed => "failed",
        pb::ExecutionState::Cancelled => "cancelled",
        pb::ExecutionState::Unspecified => "unspecified",
    };
    let final_digest = execution.result.as_ref().and_then(|result| result.outcome.as_ref()).map(|outcome| {
        use pb::result_envelope::Outcome as O;
        match outcome {
            O::Completed(done) => format!("completed/{}/{}", done.attempts, done.output_json),
            O::Failed(failed) => format!("failed/{}/{}/{}", failed.attempts, failed.code, failed.retryable),
            O::Cancelled(cancelled) => format!("cancelled/{}/{}", cancelled.attempts, cancelled.code),
        }
    });
    ExecutionView {
        execution_id: execution.execution_id.clone(),
        status: status.to_string(),
        attempts: execution.attempts,
        final_digest,
    }
}

impl Workload {
    /// A workload against `nodes` recording into `recorder`, dialling TLS
    /// with `tls` when given.
    pub fn new(
        recorder: Arc<Recorder>,
        nodes: Vec<(u64, String)>,
        config: WorkloadConfig,
        tls: Option<ClientTls>,
    ) -> Result<Workload, WorkloadError> {
        Workload::build(recorder, nodes, config, tls, None, gavel_testkit::wall_clock_ms)
    }

    /// A workload inside a simulator: plaintext channels through `dial`
    /// (its network), the cluster's clock read through `clock_ms` (the
    /// nodes' simulated one, to stall past a lease deadline), and its
    /// clients' request ids and retry jitter drawn from the workload's
    /// seed, so a seed replays the same calls.
    pub fn new_simulated(
        recorder: Arc<Recorder>,
        nodes: Vec<(u64, String)>,
        config: WorkloadConfig,
        dial: gavel_client::Dial,
        clock_ms: fn() -> i64,
    ) -> Result<Workload, WorkloadError> {
        Workload::build(recorder, nodes, config, None, Some(dial), clock_ms)
    }

    fn build(
        recorder: Arc<Recorder>,
        nodes: Vec<(u64, String)>,
        config: WorkloadConfig,
        tls: Option<ClientTls>,
        dial: Option<gavel_client::Dial>,
        clock_ms: fn() -> i64,
    ) -> Result<Workload, WorkloadError> {
        let channels = nodes
            .iter()
            .map(|(_, addr)| {
                let address = |source| WorkloadError::Address { addr: addr.clone(), source };
                let scheme = if tls.is_some() { "https" } else { "http" };
                let mut endpoint = Endpoint::from_shared(format!("{scheme}://{addr}")).map_err(address)?;
                if let Some(tls) = &tls {
                    endpoint = endpoint.tls_config(tls.tonic_config()).map_err(address)?;
                }
                let endpoint = endpoint.connect_timeout(Duration::from_millis(500)).tcp_nodelay(true);
                Ok(match &dial {
                    Some(dial) => dial(endpoint),
                    None => endpoint.connect_lazy(),
                })
            })
            .collect::<Result<Vec<_>, WorkloadError>>()?;
        Ok(Workload {
            recorder,
            nodes,
            channels,
            stall: Arc::new(AtomicBool::new(false)),
            stop_clients: CancellationToken::new(),
            stop_workers: CancellationToken::new(),
            draining: Arc::new(AtomicBool::new(false)),
            approvals: Mutex::new(Vec::new()),
            executions: Mutex::new(Vec::new()),
            late_reports: AtomicU64::new(0),
            stalls_cut_by_drain: AtomicU64::new(0),
            tls,
            voters: Vec::new(),
            config,
            dial,
            clients_made: AtomicU64::new(0),
            clock_ms,
        })
    }

    /// Spawns every actor of the config: the approval clients,
    /// submitters, quorum clients and standing clients (spending
    /// `standing_ids`), all stopped by `stop_clients`, then the workers
    /// (stopped by `stop_workers`). Returns their handles in that grouping.
    pub fn spawn_actors(
        self: &Arc<Self>,
        standing_ids: &[String],
    ) -> (Vec<tokio::task::JoinHandle<()>>, Vec<tokio::task::JoinHandle<()>>) {
        let mut clients = Vec::new();
        for index in 0..self.config.approval_clients {
            clients.push(tokio::spawn(self.clone().approval_client(index)));
        }
        for index in 0..self.config.submitters {
            clients.push(tokio::spawn(self.clone().submitter(index)));
        }
        for index in 0..self.config.quorum_clients {
            clients.push(tokio::spawn(self.clone().quorum_client(index)));
        }
        for index in 0..self.config.standing_clients {
            clients.push(tokio::spawn(self.clone().standing_client(index, standing_ids.to_vec())));
        }
        let workers = (0..self.config.workers).map(|index| tokio::spawn(self.clone().worker(index))).collect();
        (clients, workers)
    }

    /// The workload principal's TLS, for the harness's final reads.
    pub fn tls(&self) -> Option<&ClientTls> {
        self.tls.as_ref()
    }

    /// An SDK client whose first endpoint is node index `first`, as the
    /// workload principal.
    pub fn client(&self, first: usize) -> Client {
        self.client_with(first, self.tls.clone())
    }

    /// An SDK client whose first endpoint is node index `first`, dialling
    /// with `tls`.
    fn client_with(&self, first: usize, tls: Option<ClientTls>) -> Client {
        let count = self.nodes.len();
        let endpoints: Vec<String> = (0..count).map(|i| self.nodes[(first + i) % count].1.clone()).collect();
        let config = ClientConfig {
            call_timeout: Duration::from_secs(2),
            retry_budget: Duration::from_secs(6),
            connect_timeout: Duration::from_millis(500),
            // Each operation gets a fresh client anyway; stay on the chosen node.
            follow_leader: false,
            tls,
            token: None,
            jitter_seed: self.dial.as_ref().map(|_| {
                let made = self.clients_made.fetch_add(1, Ordering::Relaxed);
                Rng::new(self.config.seed).fork(made).next_u64()
            }),
            dial: self.dial.clone(),
        };
        Client::with_config(&endpoints, config).expect("endpoints are well-formed host:port addresses")
    }

    /// Registers the capabilities, retrying until the cluster accepts them,
    /// as the admin whose TLS is `admin` (none on an insecure cluster).
    pub async fn register(&self, admin: Option<ClientTls>) -> Result<(), WorkloadError> {
        let client = self.client_with(0, admin);
        for (spec, _) in capabilities() {
            let request = pb::RegisterCapabilityRequest { spec: Some(spec.clone()), ..Default::default() };
            let mut tries = 0;
            loop {
                match client.register_capability(request.clone()).await {
                    Ok(_) => break,
                    Err(error) if tries < 10 => {
                        tracing::warn!(%error, "registering {} failed; retrying", spec.id);
                        tries += 1;
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                    Err(source) => return Err(WorkloadError::Register { capability: spec.id.clone(), source }),
                }
            }
        }
        Ok(())
    }

    /// Runs `call` as one recorded operation of `process` through node index `node`.
    async fn mutate<T, F, Fut>(
        &self,
        process: u64,
        node: usize,
        op: Op,
        call: F,
        view: impl Fn(&T) -> OpResult,
    ) -> Option<T>
    where
        F: FnOnce(Client) -> Fut,
        Fut: std::future::Future<Output = Result<T, Error>>,
    {
        self.mutate_as(process, node, op, self.tls.clone(), call, view).await
    }

    /// [`Workload::mutate`] dialling with `tls` (a voter's certificate).
    async fn mutate_as<T, F, Fut>(
        &self,
        process: u64,
        node: usize,
        op: Op,
        tls: Option<ClientTls>,
        call: F,
        view: impl Fn(&T) -> OpResult,
    ) -> Option<T>
    where
        F: FnOnce(Client) -> Fut,
        Fut: std::future::Future<Output = Result<T, Error>>,
    {
        let op_id = self.recorder.invoke(process, self.nodes[node].0, op);
        match call(self.client_with(node, tls)).await {
            Ok(response) => {
                self.recorder.complete(op_id, process, Outcome::Ok, Some(view(&response)), None);
                Some(response)
            }
            Err(error) => {
                let outcome = if definite(&error) { Outcome::Fail } else { Outcome::Info };
                let detail = match outcome {
                    Outcome::Fail => error.code().to_string(),
                    _ => error.to_string(),
                };
                self.recorder.complete(op_id, process, outcome, None, Some(detail));
                None
            }
        }
    }

    /// Reads an approval through exactly one node (no leader following).
    pub async fn read_approval(&self, process: u64, node: usize, id: &str) {
        let op_id = self.recorder.invoke(process, self.nodes[node].0, Op::ApprovalGet { id: id.to_string() });
        let mut request = tonic::Request::new(pb::GetApprovalRequest { id: id.to_string(), caller_now_ms: None });
        request.set_timeout(Duration::from_secs(2));
        match ApprovalServiceClient::new(self.channels[node].clone()).get_approval(request).await {
            Ok(response) => {
                let view = approval_view(response.get_ref().approval.as_ref());
                self.recorder.complete(op_id, process, Outcome::Ok, Some(view), None);
            }
            // An approval the node does not hold answers NOT_FOUND: a read of it as absent.
            Err(status) if status.code() == tonic::Code::NotFound => {
                self.recorder.complete(op_id, process, Outcome::Ok, Some(approval_view(None)), None);
            }
            // A failed read changes nothing: record it as unknown.
            Err(status) => self.recorder.complete(op_id, process, Outcome::Info, None, Some(status.to_string())),
        }
    }

    /// Reads an execution through exactly one node; returns whether it is final.
    pub async fn read_execution(&self, process: u64, node: usize, id: &str) -> bool {
        let op = Op::ExecGet { execution_id: id.to_string() };
        let op_id = self.recorder.invoke(process, self.nodes[node].0, op);
        let mut request = tonic::Request::new(pb::GetExecutionRequest { execution_id: id.to_string() });
        request.set_timeout(Duration::from_secs(2));
        match ExecutionServiceClient::new(self.channels[node].clone()).get_execution(request).await {
            Ok(response) => match response.get_ref().execution.as_ref() {
                Some(execution) => {
                    let view = execution_view(execution);
                    let done = view.final_digest.is_some();
                    self.recorder.complete(op_id, process, Outcome::Ok, Some(OpResult::Execution(view)), None);
                    done
                }
                None => {
                    self.recorder.complete(op_id, process, Outcome::Fail, None, Some("NOT_FOUND".to_string()));
                    false
                }
            },
            Err(status) => {
                let outcome = if status.code() == tonic::Code::NotFound { Outcome::Fail } else { Outcome::Info };
                self.recorder.complete(op_id, process, outcome, None, Some(status.to_string()));
                false
            }
        }
    }

    /// One approval client: create, decide (sometimes racing), consume (2–4 racing), read.
    pub async fn approval_client(self: Arc<Self>, index: usize) {
        let mut rng = Rng::new(self.config.seed).fork(1_000 + index as u64);
        let nodes = self.nodes.len() as u64;
        let mut n = 0u64;
        while !self.stop_clients.is_cancelled() {
            n += 1;
            let id = format!("ap-{:x}-{index}-{n}", self.config.seed);
            self.approvals.lock().expect("approvals lock").push(id.clone());
            let process = self.recorder.process();
            let request = pb::CreateApprovalRequest {
                id: id.clone(),
                capability_id: "chaos.approved".to_string(),
                surface: "chaos".to_string(),
                actor: Some(actor("chaos-requester")),
                input_json: format!("{{\"n\":{n}}}"),
                risk: pb::Risk::Low as i32,
                side_effect: pb::SideEffect::Write as i32,
                reasons: vec!["chaos".to_string()],
                expires_in_ms: Some(3_600_000),
                ..Default::default()
            };
            let node = rng.below(nodes) as usize;
            self.mutate(
                process,
                node,
                Op::ApprovalCreate { id: id.clone() },
                |client| async move { client.create_approval(request).await },
                |response| approval_view(response.approval.as_ref()),
            )
            .await;

            let deciders = if rng.chance(25) { 2 } else { 1 };
            let mut racing = Vec::new();
            for d in 0..deciders {
                let approve = rng.chance(85);
                let node = rng.below(nodes) as usize;
                let this = self.clone();
                let id = id.clone();
                racing.push(tokio::spawn(async move {
                    let request = pb::DecideApprovalRequest {
                        id: id.clone(),
                        status: if approve { pb::ApprovalStatus::Approved } else { pb::ApprovalStatus::Rejected }
                            as i32,
                        approver: Some(actor(&format!("chaos-approver-{d}"))),
                        ..Default::default()
                    };
                    let process = this.recorder.process();
                    this.mutate(
                        process,
                        node,
                        Op::ApprovalDecide { id, approve },
                        |client| async move { client.decide_approval(request).await },
                        |response| approval_view(response.approval.as_ref()),
                    )
                    .await;
                }));
            }
            futures::future::join_all(racing).await;

            let consumers = rng.between(2, 4);
            let mut racing = Vec::new();
            for c in 0..consumers {
                let node = rng.below(nodes) as usize;
                let this = self.clone();
                let id = id.clone();
                racing.push(tokio::spawn(async move {
                    let execution_id = format!("{id}-c{c}");
                    let request = pb::ConsumeApprovalRequest {
                        id: id.clone(),
                        execution_id: execution_id.clone(),
                        ..Default::default()
                    };
                    let process = this.recorder.process();
                    this.mutate(
                        process,
                        node,
                        Op::ApprovalConsume { id, execution_id },
                        |client| async move { client.consume_approval(request).await },
                        |response| approval_view(response.approval.as_ref()),
                    )
                    .await;
                }));
            }
            // Reads race with the consumers, through other nodes.
            for _ in 0..rng.between(1, 2) {
                let node = rng.below(nodes) as usize;
                let this = self.clone();
                let id = id.clone();
                racing.push(tokio::spawn(async move {
                    let process = this.recorder.process();
                    this.read_approval(process, node, &id).await;
                }));
            }
            futures::future::join_all(racing).await;
            let process = self.recorder.process();
            self.read_approval(process, rng.below(nodes) as usize, &id).await;
            tokio::time::sleep(Duration::from_millis(rng.between(20, 120))).await;
        }
    }

    /// One submitter: submit (approve and resume when needed), maybe cancel, read until final.
    pub async fn submitter(self: Arc<Self>, index: usize) {
        let mut rng = Rng::new(self.config.seed).fork(2_000 + index as u64);
        let nodes = self.nodes.len() as u64;
        let capabilities = capabilities();
        let mut n = 0u64;
        while !self.stop_clients.is_cancelled() {
            n += 1;
            let execution_id = format!("ex-{:x}-{index}-{n}", self.config.seed);
            let capability = rng.pick(&capabilities).1.clone();
            self.executions.lock().expect("executions lock").push(execution_id.clone());
            let process = self.recorder.process();
            let request = pb::SubmitRequest {
                execution_id: Some(execution_id.clone()),
                capability_id: capability.id.clone(),
                input_json: format!("{{\"n\":{n},\"submitter\":{index}}}"),
                actor: Some(actor("chaos-submitter")),
                surface: "chaos".to_string(),
                ..Default::default()
            };
            let node = rng.below(nodes) as usize;
            let submitted = self
                .mutate(
                    process,
                    node,
                    Op::ExecSubmit { execution_id: execution_id.clone(), capability: capability.id.clone() },
                    |client| async move { client.submit(request).await },
                    |response| match &response.outcome {
                        Some(pb::submit_response::Outcome::Execution(execution)) => {
                            OpResult::Execution(execution_view(execution))
                        }
                        Some(pb::submit_response::Outcome::ApprovalRequired(approval)) => approval_view(Some(approval)),
                        None => OpResult::Approval { state: ApprovalState::Absent, consumed_by: None },
                    },
                )
                .await;
            if let Some(pb::SubmitResponse {
                outcome: Some(pb::submit_response::Outcome::ApprovalRequired(approval)),
                ..
            }) = submitted
            {
                self.approve_and_resume(&mut rng, &execution_id, &approval.id).await;
            }
            if rng.chance(10) {
                tokio::time::sleep(Duration::from_millis(rng.between(0, 800))).await;
                let request = pb::CancelExecutionRequest {
                    execution_id: execution_id.clone(),
                    actor: Some(actor("chaos-submitter")),
                    ..Default::default()
                };
                let process = self.recorder.process();
                self.mutate(
                    process,
                    rng.below(nodes) as usize,
                    Op::ExecCancel { execution_id: execution_id.clone() },
                    |client| async move { client.cancel_execution(request).await },
                    |response| match &response.execution {
                        Some(execution) => OpResult::Execution(execution_view(execution)),
                        None => OpResult::Reported,
                    },
                )
                .await;
            }
            // Read it until it is final (a bounded number of times).
            let process = self.recorder.process();
            for _ in 0..20 {
                if self.stop_clients.is_cancelled() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(rng.between(200, 600))).await;
                if self.read_execution(process, rng.below(nodes) as usize, &execution_id).await {
                    break;
                }
            }
        }
    }

    /// Approves the approval a submit asked for (a setup step, not recorded:
    /// the approval register checker only follows approvals the workload
    /// created itself) and resumes the execution (recorded). Half the time
    /// the resume goes first and waits for the decision, which may carry it
    /// into its own log entry (decision 0108).
    async fn approve_and_resume(&self, rng: &mut Rng, execution_id: &str, approval_id: &str) {
        let nodes = self.nodes.len() as u64;
        let decide = pb::DecideApprovalRequest {
            id: approval_id.to_string(),
            status: pb::ApprovalStatus::Approved as i32,
            approver: Some(actor("chaos-approver")),
            ..Default::default()
        };
        let decider = self.client(rng.below(nodes) as usize);
        let resumer = rng.below(nodes) as usize;
        if rng.chance(2) {
            let think = Duration::from_millis(rng.between(0, 30));
            let decide = async move {
                tokio::time::sleep(think).await;
                let _ = decider.decide_approval(decide).await;
            };
            tokio::join!(self.resume(resumer, execution_id, approval_id, true), decide);
            return;
        }
        if decider.decide_approval(decide).await.is_err() {
            return;
        }
        self.resume(resumer, execution_id, approval_id, false).await;
    }

    /// Resumes `execution_id` with `approval_id` through node index `node`
    /// (recorded); `on_decision`: with `ResumeAndWait{await_decision}`,
    /// waiting a bounded time for the decision and the execution. An
    /// execution the resume may have created is added to the ones drained
    /// and read at the end.
    pub(crate) async fn resume(&self, node: usize, execution_id: &str, approval_id: &str, on_decision: bool) {
        let request = pb::ResumeRequest {
            approval_id: approval_id.to_string(),
            execution_id: Some(execution_id.to_string()),
            ..Default::default()
        };
        let process = self.recorder.process();
        let op_id = self.recorder.invoke(
            process,
            self.nodes[node].0,
            Op::ExecResume { execution_id: execution_id.to_string(), approval_id: approval_id.to_string() },
        );
        let answer = if on_decision {
            let request = pb::ResumeAndWaitRequest {
                resume: Some(request),
                wait_ms: RESUME_ON_DECISION_WAIT_MS,
                await_decision: true,
            };
            self.client(node).resume_and_wait(request).await.map(|response| response.execution)
        } else {
            self.client(node).resume(request).await.map(|response| response.execution)
        };
        let (outcome, result, error) = match answer {
            Ok(execution) => {
                let view = match &execution {
                    Some(execution) => OpResult::Execution(execution_view(execution)),
                    None => OpResult::Reported,
                };
                (Outcome::Ok, Some(view), None)
            }
            Err(error) if definite(&error) => (Outcome::Fail, None, Some(error.code().to_string())),
            Err(error) => (Outcome::Info, None, Some(error.to_string())),
        };
        if outcome != Outcome::Fail {
            let mut executions = self.executions.lock().expect("executions lock");
            if !executions.iter().any(|known| known == execution_id) {
                executions.push(execution_id.to_string());
            }
        }
        self.recorder.complete(op_id, process, outcome, result, error);
    }

    /// One worker: poll, behave as the seed says, report.
    pub async fn worker(self: Arc<Self>, index: usize) {
        let mut rng = Rng::new(self.config.seed).fork(3_000 + index as u64);
        let nodes = self.nodes.len() as u64;
        let worker_id = format!("chaos-worker-{index}");
        while !self.stop_workers.is_cancelled() {
            let process = self.recorder.process();
            let request = pb::PollRequest {
                worker_id: worker_id.clone(),
                queues: vec![QUEUE.to_string()],
                max_tasks: 1,
                wait_ms: 500,
                ..Default::default()
            };
            let polled = self
                .mutate(
                    process,
                    rng.below(nodes) as usize,
                    Op::WorkerPoll { worker_id: worker_id.clone() },
                    |client| async move { client.poll(request).await },
                    |response| {
                        OpResult::Lease(response.tasks.first().and_then(|task| {
                            task.lease.as_ref().map(|lease| LeaseGrant {
                                execution_id: task.execution_id.clone(),
                                capability: task
                                    .capability
                                    .as_ref()
                                    .and_then(|c| c.spec.as_ref())
                                    .map(|s| s.id.clone())
                                    .unwrap_or_default(),
                                attempt: task.attempt,
                                lease_id: lease.lease_id,
                                deadline_ms: lease.deadline_ms,
                            })
                        }))
                    },
                )
                .await;
            let Some(task) = polled.and_then(|response| response.tasks.into_iter().next()) else {
                if self.stop_workers.is_cancelled() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            let Some(lease) = task.lease.clone() else { continue };
            self.run_task(&mut rng, process, &worker_id, &task, &lease).await;
        }
    }

    async fn run_task(&self, rng: &mut Rng, process: u64, worker_id: &str, task: &pb::Task, lease: &pb::Lease) {
        let nodes = self.nodes.len() as u64;
        let draining = self.draining.load(Ordering::Relaxed);
        let stall = !draining && (self.stall.load(Ordering::Relaxed) || rng.chance(12));
        let roll = if draining { 0 } else { rng.below(100) };
        if !draining && roll >= 96 {
            // Crash: the worker vanishes without reporting; the lease expires.
            return;
        }
        // Whether this report goes out late: the worker slept until past
        // the lease deadline.
        let mut late = false;
        if stall {
            let now = (self.clock_ms)();
            let past = (lease.deadline_ms - now).max(0) as u64 + rng.between(300, 700);
            // A stall ends when the drain begins, since draining workers
            // behave so that every execution finalizes; its report is then
            // not a late one. The deadline is in the granting leader's clock,
            // which a skewed or jumped clock can put seconds ahead of this
            // one: a stall begun near the end of the workload outlasted the
            // drain, with every worker asleep and a requeued execution left
            // `queued` (the simulation's 10 s seeds 131, 224, 416 and more,
            // judged by `liveness`).
            late = tokio::select! {
                biased;
                () = self.stop_clients.cancelled() => {
                    self.stalls_cut_by_drain.fetch_add(1, Ordering::Relaxed);
                    false
                }
                () = tokio::time::sleep(Duration::from_millis(past)) => true,
            };
        } else if roll >= 80 {
            tokio::time::sleep(Duration::from_millis(rng.between(100, 400))).await;
        }
        let (report, outcome) = match roll {
            0..=85 => (
                "ok",
                pb::report_request::Outcome::Completed(pb::ReportCompleted {
                    output_json: format!("{{\"by\":\"{worker_id}\",\"attempt\":{}}}", task.attempt),
                }),
            ),
            86..=92 => (
                "retryable",
                pb::report_request::Outcome::Failed(pb::ReportFailed {
                    code: "CHAOS_TRANSIENT".to_string(),
                    message: "injected transient failure".to_string(),
                    retryable: true,
                }),
            ),
            _ => (
                "fatal",
                pb::report_request::Outcome::Failed(pb::ReportFailed {
                    code: "CHAOS_FATAL".to_string(),
                    message: "injected fatal failure".to_string(),
                    retryable: false,
                }),
            ),
        };
        if late {
            self.late_reports.fetch_add(1, Ordering::Relaxed);
        }
        let request = pb::ReportRequest {
            lease_id: lease.lease_id,
            worker_id: worker_id.to_string(),
            outcome: Some(outcome),
            ..Default::default()
        };
        let op = Op::WorkerReport {
            execution_id: task.execution_id.clone(),
            attempt: task.attempt,
            lease_id: lease.lease_id,
            report: report.to_string(),
            late,
        };
        self.mutate(
            process,
            rng.below(nodes) as usize,
            op,
            |client| async move { client.report(request).await },
            |_| OpResult::Reported,
        )
        .await;
    }
}
