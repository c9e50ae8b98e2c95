//! [`Client`]: typed calls that follow the leader and retry safely.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use gavel_proto::error_detail::read_error_detail;
use gavel_proto::v1 as pb;
use gavel_proto::v1::access_service_client::AccessServiceClient;
use gavel_proto::v1::approval_service_client::ApprovalServiceClient;
use gavel_proto::v1::audit_service_client::AuditServiceClient;
use gavel_proto::v1::capability_service_client::CapabilityServiceClient;
use gavel_proto::v1::cluster_service_client::ClusterServiceClient;
use gavel_proto::v1::execution_service_client::ExecutionServiceClient;
use gavel_proto::v1::policy_service_client::PolicyServiceClient;
use gavel_proto::v1::worker_service_client::WorkerServiceClient;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};

use crate::actors;
use crate::credentials::{Authorization, ClientTls};
use crate::error::Error;
use crate::json;
use crate::reach::Reachability;

/// A channel that stamps the bearer token on every call.
type Transport = InterceptedService<Channel, Authorization>;

/// Client timings and credentials.
#[derive(Clone)]
pub struct ClientConfig {
    /// Deadline of one attempt of one call (long-polls add their wait).
    pub call_timeout: Duration,
    /// How long a call keeps retrying `UNAVAILABLE` and broken connections.
    pub retry_budget: Duration,
    /// Deadline for opening a connection.
    pub connect_timeout: Duration,
    /// Send later calls straight to the leader once a follower's answer
    /// names it (the `gavel-leader` response header). Off, every call goes
    /// to the preferred endpoint first and is forwarded from there.
    pub follow_leader: bool,
    /// TLS towards the nodes: endpoints are dialled over `https` and the
    /// node's certificate must chain to the CA. `None` dials plaintext, which
    /// only a node started `--insecure` answers.
    pub tls: Option<ClientTls>,
    /// A bearer token (JWT) sent as `authorization: Bearer <token>` on every
    /// call; it takes precedence over the client certificate's principal.
    pub token: Option<String>,
    /// How a channel to a node connects: `None` over real TCP (tonic's own
    /// connector); a simulator passes one that dials its simulated network.
    pub dial: Option<Dial>,
    /// The seed of the retry jitter and of generated request ids: `None`
    /// draws them from the OS; a simulator sets one so that a seed replays
    /// the same retries and the same commands.
    pub jitter_seed: Option<u64>,
}

/// Makes the channel to a node from its endpoint (address, TLS and
/// timeouts already set).
pub type Dial = Arc<dyn Fn(Endpoint) -> Channel + Send + Sync>;

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            call_timeout: Duration::from_secs(5),
            retry_budget: Duration::from_secs(20),
            connect_timeout: Duration::from_secs(1),
            follow_leader: true,
            tls: None,
            token: None,
            dial: None,
            jitter_seed: None,
        }
    }
}

impl std::fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The token and the private key stay out of logs.
        f.debug_struct("ClientConfig")
            .field("call_timeout", &self.call_timeout)
            .field("retry_budget", &self.retry_budget)
            .field("connect_timeout", &self.connect_timeout)
            .field("follow_leader", &self.follow_leader)
            .field("tls", &self.tls)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("dial", &self.dial.as_ref().map(|_| "<injected>"))
            .field("jitter_seed", &self.jitter_seed)
            .finish()
    }
}

/// A handle to a Gavel cluster. Cheap to clone.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    endpoints: Vec<String>,
    channels: Vec<Channel>,
    /// The bearer token header every call carries, if any.
    authorization: Authorization,
    /// Index of the endpoint to try first: the last known leader.
    preferred: AtomicUsize,
    /// RPC attempts sent, for measuring a client's load on the cluster.
    attempts: std::sync::atomic::AtomicU64,
    /// The seeded sequence of retry jitter, request ids and trace ids, when
    /// the config seeds it.
    jitter: Option<Arc<crate::backoff::SeededJitter>>,
    /// Per endpoint: whether a plaintext client already asked the node
    /// whether it speaks TLS ([`crate::tls_probe`]); once is enough.
    tls_probed: Vec<std::sync::atomic::AtomicBool>,
    config: ClientConfig,
}

/// A fresh request id for one logical call; every retry of the call reuses it.
pub fn new_request_id() -> String {
    format!("cli-{}", uuid::Uuid::new_v4())
}

fn timed<T>(message: T, timeout: Duration) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.set_timeout(timeout);
    request
}

/// Whether a failed attempt may be retried with the same request id: the
/// cluster said `UNAVAILABLE` or shed load (`RESOURCE_EXHAUSTED` with a
/// retry hint, [`crate::backoff`]), or the transport broke before a Gavel
/// answer (an HTTP/2 reset included, [`crate::backoff::is_transport_reset`]).
/// A failed TLS handshake is not retried: a certificate does not become
/// valid by asking again.
fn retryable(status: &Status) -> bool {
    if crate::credentials::tls_failure(status).is_some() {
        return false;
    }
    match status.code() {
        Code::Unavailable => true,
        Code::ResourceExhausted => crate::backoff::is_overload(status) || crate::backoff::is_transport_reset(status),
        Code::Unknown | Code::Cancelled | Code::DeadlineExceeded | Code::Internal => {
            read_error_detail(status).is_none()
        }
        _ => false,
    }
}

impl Client {
    /// A client for these node addresses (`host:port` or `http://host:port`).
    pub fn new(endpoints: &[String]) -> Result<Client, Error> {
        Client::with_config(endpoints, ClientConfig::default())
    }

    /// A client with explicit timings.
    pub fn with_config(endpoints: &[String], config: ClientConfig) -> Result<Client, Error> {
        if endpoints.is_empty() {
            return Err(Error::Config("at least one endpoint is required".to_string()));
        }
        let jitter = config.jitter_seed.map(|seed| Arc::new(crate::backoff::SeededJitter::new(seed)));
        let authorization = Authorization::bearer(config.token.as_deref())?.with_trace_ids(jitter.clone());
        let tls = config.tls.as_ref().map(ClientTls::tonic_config);
        let mut channels = Vec::new();
        let mut normalized = Vec::new();
        for endpoint in endpoints {
            check_endpoint(endpoint)?;
            let uri = endpoint_uri(endpoint, tls.is_some())?;
            let mut builder = Endpoint::from_shared(uri.clone())
                .map_err(|error| Error::Config(format!("endpoint {endpoint}: {error}")))?;
            if let Some(tls) = &tls {
                builder = builder
                    .tls_config(tls.clone())
                    .map_err(|error| Error::Config(format!("TLS for endpoint {endpoint}: {error}")))?;
            }
            let builder = builder
                .connect_timeout(config.connect_timeout)
                .tcp_nodelay(true)
                .http2_keep_alive_interval(Duration::from_secs(10))
                .keep_alive_while_idle(true);
            let channel = match &config.dial {
                Some(dial) => dial(builder),
                None => builder.connect_lazy(),
            };
            channels.push(channel);
            normalized.push(uri.trim_start_matches("http://").trim_start_matches("https://").to_string());
        }
        Ok(Client {
            inner: Arc::new(Inner {
                tls_probed: normalized.iter().map(|_| std::sync::atomic::AtomicBool::new(false)).collect(),
                endpoints: normalized,
                channels,
                authorization,
                preferred: AtomicUsize::new(0),
                attempts: std::sync::atomic::AtomicU64::new(0),
                jitter,
                config,
            }),
        })
    }

    /// A request id for one logical call: random, or from the seeded
    /// sequence of a client a simulator replays ([`ClientConfig::jitter_seed`]).
    /// A seeded id has the random one's shape (`cli-` and hex digits from
    /// the fifth character on), so whatever the server derives from an id's
    /// first characters behaves in the simulation as in production.
    fn fresh_request_id(&self) -> String {
        match &self.inner.jitter {
            Some(sequence) => format!("cli-{:08x}{:08x}", sequence.next(), sequence.next()),
            None => new_request_id(),
        }
    }

    /// The configured endpoints.
    pub fn endpoints(&self) -> &[String] {
        &self.inner.endpoints
    }

    /// The channel to endpoint `index`, stamping the token on each call.
    fn transport(&self, index: usize) -> Transport {
        let channel = self.inner.channels[index % self.inner.channels.len()].clone();
        InterceptedService::new(channel, self.inner.authorization.clone())
    }

    /// RPC attempts this client (and its clones) has sent, retries included.
    pub fn attempts(&self) -> u64 {
        self.inner.attempts.load(Ordering::Relaxed)
    }

    /// Runs one logical call: attempts on the preferred endpoint, follows a
    /// leader hint or rotates on retryable failures, and gives up after the
    /// retry budget. `extra` extends each attempt's deadline (long-polls).
    pub(crate) async fn call<T, F, Fut>(&self, extra: Duration, mut attempt: F) -> Result<T, Error>
    where
        F: FnMut(Transport, Duration) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        let started = Instant::now();
        let mut pause = Duration::from_millis(50);
        let deadline = self.inner.config.call_timeout + extra;
        loop {
            let index = self.inner.preferred.load(Ordering::Relaxed) % self.inner.channels.len();
            let channel = self.transport(index);
            self.inner.attempts.fetch_add(1, Ordering::Relaxed);
            let failure = match tokio::time::timeout(deadline + Duration::from_millis(200), attempt(channel, deadline))
                .await
            {
                Ok(Ok(response)) => {
                    // A follower forwarded the call and names the leader: go
                    // there directly next time (one hop instead of two).
                    if self.inner.config.follow_leader {
                        let leader = response
                            .metadata()
                            .get(gavel_proto::metadata::LEADER)
                            .and_then(|value| value.to_str().ok());
                        if let Some(position) = leader
                            .and_then(|leader| self.inner.endpoints.iter().position(|endpoint| endpoint == leader))
                        {
                            self.inner.preferred.store(position, Ordering::Relaxed);
                        }
                    }
                    return Ok(response.into_inner());
                }
                Ok(Err(status)) if retryable(&status) => {
                    let detail = read_error_detail(&status);
                    // A transport break of a plaintext call may be a node that
                    // speaks TLS: no retry would change that.
                    if detail.is_none() && self.node_speaks_tls(index).await {
                        return Err(crate::tls_probe::tls_without_ca(&self.inner.endpoints[index]));
                    }
                    let hinted = detail
                        .as_ref()
                        .and_then(|detail| detail.leader_hint.as_ref())
                        .and_then(|hint| self.inner.endpoints.iter().position(|endpoint| endpoint == hint));
                    let next = hinted.unwrap_or((index + 1) % self.inner.channels.len());
                    let _ = self.inner.preferred.compare_exchange(index, next, Ordering::Relaxed, Ordering::Relaxed);
                    if let Some(retry_after_ms) = detail.and_then(|detail| detail.retry_after_ms) {
                        pause = pause.max(Duration::from_millis(retry_after_ms));
                    }
                    format!("{}: {}", self.inner.endpoints[index], status.message())
                }
                Ok(Err(status)) => return Err(Error::from_attempt(&status, &self.inner.endpoints[index])),
                Err(_) => {
                    let next = (index + 1) % self.inner.channels.len();
                    let _ = self.inner.preferred.compare_exchange(index, next, Ordering::Relaxed, Ordering::Relaxed);
                    format!("no answer from {} within {deadline:?}", self.inner.endpoints[index])
                }
            };
            if started.elapsed() + pause > self.inner.config.retry_budget {
                return Err(self.gave_up(&failure).await);
            }
            let pause_jittered = match &self.inner.jitter {
                Some(jitter) => crate::backoff::jittered_by(pause, jitter.next()),
                None => crate::backoff::jittered(pause),
            };
            tokio::time::sleep(pause_jittered).await;
            pause = (pause * 2).min(Duration::from_secs(1));
        }
    }
}

impl Client {
    /// Whether node `index` speaks TLS to this client that has none: asked
    /// once per endpoint ([`crate::tls_probe`]), and only by a client that
    /// dials real TCP without TLS (a simulated network has no TLS to find).
    async fn node_speaks_tls(&self, index: usize) -> bool {
        if self.inner.config.tls.is_some() || self.inner.config.dial.is_some() {
            return false;
        }
        if self.inner.tls_probed[index].load(Ordering::Relaxed) {
            return false;
        }
        match crate::tls_probe::probe(&self.inner.endpoints[index]).await {
            crate::tls_probe::Probe::Tls => true,
            crate::tls_probe::Probe::NotTls => {
                self.inner.tls_probed[index].store(true, Ordering::Relaxed);
                false
            }
            // Nothing listens yet: the node may start, so ask again next time.
            crate::tls_probe::Probe::Refused => false,
        }
    }
}

/// The URI of `endpoint`: `https://` when TLS is configured, `http://`
/// otherwise; a scheme that contradicts the configuration is refused rather
/// than silently changed.
fn endpoint_uri(endpoint: &str, tls: bool) -> Result<String, Error> {
    let scheme = if tls { "https" } else { "http" };
    match endpoint.split_once("://") {
        None => Ok(format!("{scheme}://{endpoint}")),
        Some((given, _)) if given == scheme => Ok(endpoint.to_string()),
        Some(_) if tls => Err(Error::Config(format!(
            "endpoint {endpoint:?} is plaintext but TLS is configured (--ca); write it as host:port or https://"
        ))),
        Some(_) => {
            Err(Error::Config(format!("endpoint {endpoint:?} needs TLS: give the cluster CA (--ca or GAVEL_CA)")))
        }
    }
}

/// Deadline of one status call of the survey a failed call ends with.
const SURVEY_TIMEOUT: Duration = Duration::from_secs(1);

/// Checks that `endpoint` is `host:port`, optionally after `http://` or
/// `https://`, with a port number: a typo fails at once instead of after the
/// retry budget.
fn check_endpoint(endpoint: &str) -> Result<(), Error> {
    let bare = endpoint.split_once("://").map_or(endpoint, |(scheme, rest)| match scheme {
        "http" | "https" => rest,
        _ => "",
    });
    let bare = bare.strip_suffix('/').unwrap_or(bare);
    let valid = match bare.rsplit_once(':') {
        Some((host, port)) => {
            !host.is_empty() && !host.contains('/') && port.parse::<u16>().is_ok_and(|port| port != 0)
        }
        None => false,
    };
    if valid {
        Ok(())
    } else {
        Err(Error::Config(format!("endpoint {endpoint:?} is not host:port (as in 127.0.0.1:7401)")))
    }
}

impl Client {
    /// Asks every endpoint for its status once, concurrently, within
    /// [`SURVEY_TIMEOUT`], and says how many voters answer.
    pub async fn reachability(&self) -> Reachability {
        let calls = (0..self.inner.channels.len()).map(|index| {
            let mut client = ClusterServiceClient::new(self.transport(index));
            async move {
                let call = client.status(timed(pb::StatusRequest { without_state_hash: true }, SURVEY_TIMEOUT));
                match tokio::time::timeout(SURVEY_TIMEOUT + Duration::from_millis(200), call).await {
                    Ok(Ok(response)) => Some(response.into_inner()),
                    _ => None,
                }
            }
        });
        let answers: Vec<pb::StatusResponse> = futures::future::join_all(calls).await.into_iter().flatten().collect();
        Reachability::of(&answers, self.inner.endpoints.len())
    }

    /// The error of a call that ran out of retry budget: why (from a survey of
    /// the endpoints), the last failure, and the endpoints tried.
    async fn gave_up(&self, failure: &str) -> Error {
        let reach = self.reachability().await;
        Error::Unavailable(format!(
            "{}; last error: {failure}; endpoints tried: {}",
            reach.describe(),
            self.inner.endpoints.join(", ")
        ))
    }
}

/// Generates one typed method per RPC. Mutating calls get a request id when
/// the caller left it empty, and keep it across retries.
/// A mutating call `checking` functions runs them on the request first and
/// sends nothing when one refuses.
macro_rules! rpc {
    ($(#[$doc:meta])* mutating $name:ident $(checking [$($check:path),+])?, $client:ident, $request:ty, $response:ty) => {
        $(#[$doc])*
        pub async fn $name(&self, mut request: $request) -> Result<$response, Error> {
            $($($check(&request)?;)+)?
            if request.request_id.is_empty() {
                request.request_id = self.fresh_request_id();
            }
            self.call(Duration::ZERO, move |channel, timeout| {
                let request = request.clone();
                async move { $client::new(channel).$name(timed(request, timeout)).await }
            })
            .await
        }
    };
    ($(#[$doc:meta])* read $name:ident, $client:ident, $request:ty, $response:ty) => {
        rpc!($(#[$doc])* read $name = $name, $client, $request, $response);
    };
    ($(#[$doc:meta])* read $name:ident = $rpc:ident, $client:ident, $request:ty, $response:ty) => {
        $(#[$doc])*
        pub async fn $name(&self, request: $request) -> Result<$response, Error> {
            self.call(Duration::ZERO, move |channel, timeout| {
                let request = request.clone();
                async move { $client::new(channel).$rpc(timed(request, timeout)).await }
            })
            .await
        }
    };
}

impl Client {
    rpc!(/// Stores a pending approval. Its input is refused before sending when
        /// the cluster would refuse it as not JSON or not I-JSON (`json::check`),
        /// and so is an actor id that names a kind (`actors::check`).
        mutating create_approval checking [json::check, actors::check], ApprovalServiceClient, pb::CreateApprovalRequest, pb::CreateApprovalResponse);
    rpc!(/// Reads an approval; `NOT_FOUND` when there is none the caller may read.
        read get_approval, ApprovalServiceClient, pb::GetApprovalRequest, pb::GetApprovalResponse);
    rpc!(/// Approves or rejects a pending approval. An approver id that names a
        /// kind is refused before sending (`actors::check`).
        mutating decide_approval checking [actors::check], ApprovalServiceClient, pb::DecideApprovalRequest, pb::DecideApprovalResponse);
    rpc!(/// Spends an approved approval on one execution.
        mutating consume_approval, ApprovalServiceClient, pb::ConsumeApprovalRequest, pb::ConsumeApprovalResponse);
    rpc!(/// Lists approvals a page at a time: newest first unless the request
        /// sets `oldest_first`; `limit` is the page size (0: 50, at most
        /// 1000) and `page_token` continues from a response's
        /// `next_page_token`.
        read list_approvals, ApprovalServiceClient, pb::ListApprovalsRequest, pb::ListApprovalsResponse);
    rpc!(/// Withdraws a pending approval.
        mutating cancel_approval, ApprovalServiceClient, pb::CancelApprovalRequest, pb::CancelApprovalResponse);
    rpc!(/// Registers a capability version.
        mutating register_capability, CapabilityServiceClient, pb::RegisterCapabilityRequest, pb::RegisterCapabilityResponse);
    rpc!(/// Reads a capability.
        read get_capability, CapabilityServiceClient, pb::GetCapabilityRequest, pb::GetCapabilityResponse);
    rpc!(/// Lists capabilities.
        read list_capabilities, CapabilityServiceClient, pb::ListCapabilitiesRequest, pb::ListCapabilitiesResponse);
    rpc!(/// Submits an execution (or gets approval-required). Its input is checked
        /// before sending, as `create_approval`'s is, and so is its actor.
        mutating submit checking [json::check, actors::check], ExecutionServiceClient, pb::SubmitRequest, pb::SubmitResponse);
    rpc!(/// Consumes an approval and creates its execution. Its input, if any, is
        /// checked before sending, as `create_approval`'s is.
        mutating resume checking [json::check], ExecutionServiceClient, pb::ResumeRequest, pb::ResumeResponse);
    rpc!(/// Reads an execution; `NOT_FOUND` when there is none the caller may read.
        read get_execution, ExecutionServiceClient, pb::GetExecutionRequest, pb::GetExecutionResponse);
    rpc!(/// Cancels an execution (terminal). Its actor is checked before
        /// sending, as `create_approval`'s is.
        mutating cancel_execution checking [actors::check], ExecutionServiceClient, pb::CancelExecutionRequest, pb::CancelExecutionResponse);
    rpc!(/// Lists the executions the caller may read a page at a time: newest
        /// first unless the request sets `oldest_first`, filtered by state,
        /// capability and requester; `limit` is the page size (0: 50, at
        /// most 1000) and `page_token` continues from a response's
        /// `next_page_token`.
        read list_executions, ExecutionServiceClient, pb::ListExecutionsRequest, pb::ListExecutionsResponse);
    rpc!(/// Lists one execution's audit events.
        read list_execution_events, ExecutionServiceClient, pb::ListExecutionEventsRequest, pb::ListExecutionEventsResponse);
    rpc!(/// Heartbeats a lease.
        mutating heartbeat, WorkerServiceClient, pb::HeartbeatRequest, pb::HeartbeatResponse);
    rpc!(/// Reports an attempt's outcome. A completed attempt's output is checked
        /// before sending, as `create_approval`'s input is.
        mutating report checking [json::check], WorkerServiceClient, pb::ReportRequest, pb::ReportResponse);
    rpc!(/// Lists audit events after a cursor, in cursor order, or newest first
        /// (`newest_first`, continued with `page_token`).
        read list_events, AuditServiceClient, pb::ListEventsRequest, pb::ListEventsResponse);
    rpc!(/// Reads the audit event at one cursor.
        read get_event, AuditServiceClient, pb::GetEventRequest, pb::GetEventResponse);
    rpc!(/// The audit tree's head: size, root and tlog-checkpoint body (auditor).
        read get_checkpoint, AuditServiceClient, pb::GetCheckpointRequest, pb::GetCheckpointResponse);
    rpc!(/// Proves one audit event's inclusion in the audit tree (auditor).
        read get_inclusion_proof, AuditServiceClient, pb::GetInclusionProofRequest, pb::GetInclusionProofResponse);
    rpc!(/// Proves that an older audit tree is a prefix of a newer one (auditor).
        read get_consistency_proof, AuditServiceClient, pb::GetConsistencyProofRequest, pb::GetConsistencyProofResponse);
    rpc!(/// One page of the audit tree's leaves, with their events' canonical bytes (auditor).
        read list_leaves, AuditServiceClient, pb::ListLeavesRequest, pb::ListLeavesResponse);
    rpc!(/// Appends an application event (`policy.denied`, ...) to the audit trail (submitter).
        /// Its payload is checked before sending, as `create_approval`'s input is.
        mutating record_event checking [json::check, actors::check], AuditServiceClient, pb::RecordEventRequest, pb::RecordEventResponse);
    rpc!(/// One node's view of the cluster (the preferred node's).
        read status, ClusterServiceClient, pb::StatusRequest, pb::StatusResponse);
    rpc!(/// Adds a learner.
        mutating add_learner, ClusterServiceClient, pb::AddLearnerRequest, pb::StatusResponse);
    rpc!(/// Promotes a caught-up learner to voter.
        mutating promote, ClusterServiceClient, pb::PromoteRequest, pb::StatusResponse);
    rpc!(/// Removes a node from the membership.
        mutating remove_node, ClusterServiceClient, pb::RemoveNodeRequest, pb::StatusResponse);
    rpc!(/// Binds a grant to a principal (admin).
        mutating grant, AccessServiceClient, pb::GrantRequest, pb::GrantResponse);
    rpc!(/// Removes a grant from a principal (admin).
        mutating revoke, AccessServiceClient, pb::RevokeRequest, pb::RevokeResponse);
    rpc!(/// Lists grants, of one principal or of all (admin).
        read list_grants = list, AccessServiceClient, pb::ListGrantsRequest, pb::ListGrantsResponse);
    rpc!(/// Who the cluster authenticates this client as, and its grants.
        read who_am_i, AccessServiceClient, pb::WhoAmIRequest, pb::WhoAmIResponse);
    rpc!(/// Changes a principal's quotas (admin).
        mutating set_quota, AccessServiceClient, pb::SetQuotaRequest, pb::SetQuotaResponse);
    rpc!(/// One principal's quota and usage (one's own, or any as admin).
        read get_quota, AccessServiceClient, pb::GetQuotaRequest, pb::GetQuotaResponse);
    rpc!(/// Every principal with a quota override or usage (admin).
        read list_quotas, AccessServiceClient, pb::ListQuotasRequest, pb::ListQuotasResponse);
    rpc!(/// Creates or changes an approval policy (admin); the reply says how
        /// many open approvals the change voided.
        mutating set_policy, PolicyServiceClient, pb::SetPolicyRequest, pb::SetPolicyResponse);
    rpc!(/// Reads an approval policy (absent when unknown).
        read get_policy, PolicyServiceClient, pb::GetPolicyRequest, pb::GetPolicyResponse);
    rpc!(/// Lists every approval policy.
        read list_policies, PolicyServiceClient, pb::ListPoliciesRequest, pb::ListPoliciesResponse);
    rpc!(/// Deletes an approval policy (admin), voiding its open approvals.
        mutating delete_policy, PolicyServiceClient, pb::DeletePolicyRequest, pb::DeletePolicyResponse);
    rpc!(/// Casts one vote on an approval a policy governs, bound to the input
        /// hash the voter saw; the reply carries the quorum progress. Its
        /// approver is checked before sending, as `decide_approval`'s is.
        mutating cast_vote checking [actors::check], PolicyServiceClient, pb::CastVoteRequest, pb::CastVoteResponse);
    rpc!(/// Withdraws the caller's vote from a pending approval. Its approver
        /// is checked before sending, as `decide_approval`'s is.
        mutating withdraw_vote checking [actors::check], PolicyServiceClient, pb::WithdrawVoteRequest, pb::WithdrawVoteResponse);
    rpc!(/// An approval's policy, version, per-factor progress and votes.
        read list_votes, PolicyServiceClient, pb::ListVotesRequest, pb::ListVotesResponse);

    /// Long-polls until the execution is final or `timeout_ms` passes.
    pub async fn wait_execution(&self, request: pb::WaitExecutionRequest) -> Result<pb::WaitExecutionResponse, Error> {
        let wait = Duration::from_millis(request.timeout_ms);
        self.call(wait, move |channel, timeout| {
            let request = request.clone();
            async move { ExecutionServiceClient::new(channel).wait_execution(timed(request, timeout)).await }
        })
        .await
    }

    /// Long-polls until the approval is no longer pending (decided,
    /// cancelled, voided or expired) or `wait_ms` passes; `NOT_FOUND` when
    /// there is none the caller may read.
    pub async fn wait_approval(&self, request: pb::WaitApprovalRequest) -> Result<pb::WaitApprovalResponse, Error> {
        let wait = Duration::from_millis(request.wait_ms);
        self.call(wait, move |channel, timeout| {
            let request = request.clone();
            async move { ApprovalServiceClient::new(channel).wait_approval(timed(request, timeout)).await }
        })
        .await
    }

    /// Resumes an approved approval and long-polls until the execution is
    /// final or `wait_ms` passes, in one call. The resume keeps one request
    /// id across retries, so a retry after a failed wait gets the same
    /// execution back. With `await_decision`, a pending approval is waited
    /// for within `wait_ms` and resumed by its decision, in the decision's
    /// own log entry (decision 0108).
    pub async fn resume_and_wait(
        &self,
        mut request: pb::ResumeAndWaitRequest,
    ) -> Result<pb::ResumeAndWaitResponse, Error> {
        let resume = request.resume.get_or_insert_with(pb::ResumeRequest::default);
        json::check(&*resume)?;
        if resume.request_id.is_empty() {
            resume.request_id = self.fresh_request_id();
        }
        let wait = Duration::from_millis(request.wait_ms);
        self.call(wait, move |channel, timeout| {
            let request = request.clone();
            async move { ExecutionServiceClient::new(channel).resume_and_wait(timed(request, timeout)).await }
        })
        .await
    }

    /// Reports an attempt's outcome and long-polls for the next tasks, in
    /// one call. An accepted report is never lost to the poll: a poll that
    /// failed after it sets `poll_failure` in the answer.
    pub async fn report_and_poll(
        &self,
        mut request: pb::ReportAndPollRequest,
    ) -> Result<pb::ReportAndPollResponse, Error> {
        let report = request.report.get_or_insert_with(pb::ReportRequest::default);
        json::check(&*report)?;
        if report.request_id.is_empty() {
            report.request_id = self.fresh_request_id();
        }
        let wait = Duration::from_millis(request.wait_ms);
        self.call(wait, move |channel, timeout| {
            let request = request.clone();
            async move { WorkerServiceClient::new(channel).report_and_poll(timed(request, timeout)).await }
        })
        .await
    }

    /// Long-polls for up to `max_tasks` tasks.
    pub async fn poll(&self, mut request: pb::PollRequest) -> Result<pb::PollResponse, Error> {
        if request.request_id.is_empty() {
            request.request_id = self.fresh_request_id();
        }
        let wait = Duration::from_millis(request.wait_ms);
        self.call(wait, move |channel, timeout| {
            let request = request.clone();
            async move { WorkerServiceClient::new(channel).poll(timed(request, timeout)).await }
        })
        .await
    }

    /// Follows the audit trail from `after_cursor`, reconnecting (to any node)
    /// and resuming from the last delivered cursor when a stream breaks. The
    /// receiver yields events in order, each at least once; it ends with an
    /// error when the cluster stays unreachable past the retry budget or the
    /// cursor was dropped by retention.
    pub fn watch_events(
        &self,
        after_cursor: u64,
        execution_id: Option<String>,
    ) -> tokio::sync::mpsc::Receiver<Result<pb::Event, Error>> {
        let (sender, receiver) = tokio::sync::mpsc::channel(256);
        let client = self.clone();
        tokio::spawn(async move {
            let mut cursor = after_cursor;
            let mut broken_since: Option<Instant> = None;
            let mut index = client.inner.preferred.load(Ordering::Relaxed);
            loop {
                let channel = client.transport(index);
                let request = pb::WatchEventsRequest { after_cursor: cursor, execution_id: execution_id.clone() };
                match AuditServiceClient::new(channel).watch_events(request).await {
                    Ok(response) => {
                        let mut stream = response.into_inner();
                        loop {
                            match stream.message().await {
                                Ok(Some(event)) => {
                                    broken_since = None;
                                    cursor = event.cursor;
                                    if sender.send(Ok(event)).await.is_err() {
                                        return;
                                    }
                                }
                                Ok(None) => break,
                                Err(status) if !retryable(&status) => {
                                    let endpoint = &client.inner.endpoints[index % client.inner.endpoints.len()];
                                    let _ = sender.send(Err(Error::from_attempt(&status, endpoint))).await;
                                    return;
                                }
                                Err(_) => break,
                            }
                        }
                    }
                    Err(status) if !retryable(&status) => {
                        let endpoint = &client.inner.endpoints[index % client.inner.endpoints.len()];
                        let _ = sender.send(Err(Error::from_attempt(&status, endpoint))).await;
                        return;
                    }
                    Err(_) => {}
                }
                let since = *broken_since.get_or_insert_with(Instant::now);
                if since.elapsed() > client.inner.config.retry_budget {
                    let _ = sender.send(Err(Error::Unavailable("audit stream could not reconnect".to_string()))).await;
                    return;
                }
                if sender.is_closed() {
                    return;
                }
                index += 1;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
        receiver
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_must_be_host_and_port() {
        for good in ["127.0.0.1:7401", "http://localhost:7401", "https://gavel.example:443/", "[::1]:7401"] {
            assert!(check_endpoint(good).is_ok(), "{good}");
        }
        for bad in ["garbage", "127.0.0.1", "host:port", ":7401", "host:0", "ftp://host:1", "host:70000", "a/b:1"] {
            assert!(matches!(check_endpoint(bad), Err(Error::Config(_))), "{bad}");
        }
    }

    #[test]
    fn endpoints_take_the_scheme_of_the_configuration() {
        assert_eq!(endpoint_uri("127.0.0.1:7401", false).ok().as_deref(), Some("http://127.0.0.1:7401"));
        assert_eq!(endpoint_uri("127.0.0.1:7401", true).ok().as_deref(), Some("https://127.0.0.1:7401"));
        assert_eq!(endpoint_uri("https://n1:7401", true).ok().as_deref(), Some("https://n1:7401"));
        assert!(matches!(endpoint_uri("http://n1:7401", true), Err(Error::Config(_))));
        assert!(matches!(endpoint_uri("https://n1:7401", false), Err(Error::Config(_))));
    }

    #[test]
    fn a_token_that_is_not_a_header_value_is_a_configuration_error() {
        let config = ClientConfig { token: Some("line\nbreak".to_string()), ..ClientConfig::default() };
        assert!(matches!(Client::with_config(&["127.0.0.1:7401".to_string()], config), Err(Error::Config(_))));
    }

    #[test]
    fn an_http2_reset_and_an_overload_refusal_are_retried_a_size_refusal_is_not() {
        let reset =
            Status::resource_exhausted("h2 protocol error: http2 error: connection error received: ENHANCE_YOUR_CALM");
        assert!(retryable(&reset));
        assert!(retryable(&crate::backoff::overload_refusal()));
        assert!(!retryable(&Status::resource_exhausted("Error, decoded message length too large")));
    }

    #[test]
    fn debug_output_hides_the_token() {
        let config = ClientConfig { token: Some("secret-token".to_string()), ..ClientConfig::default() };
        assert!(!format!("{config:?}").contains("secret-token"));
    }
}
