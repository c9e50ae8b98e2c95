//! One Gavel node: the Raft handle, the read port of its state, and the two things
//! every handler does: [`Node::call`] (check a command, propose it, take its
//! typed reply) and [`Node::read`] (a linearizable read of the state).
//! Forwarding to the leader happens before a handler runs, in
//! [`crate::routing`].

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

#[cfg(feature = "mutants")]
use gavel_core::mutants::Mutant;
use gavel_core::{Action, Caller, Command, DomainError, Envelope, ErrorCode, Reply, Retention, State};
use gavel_raft::{LeaderRoute, RaftNode, WriteError};
use tonic::transport::{Channel, Endpoint};
use tonic::Status;
use tracing::Instrument;

use gavel_store::app::CoreApp;
use gavel_store::reads::ReadPort;

use crate::replies::FromReply;
use crate::security::Secured;
// The status mapping lives in the leaf `status`; the handlers name it here.
pub use crate::status::{domain_status, refusal_status, unavailable, RETRY_AFTER_MS};

/// How long a proposal or a read barrier may wait for the Raft layer. A leader
/// cut off from its majority would otherwise hold the caller forever; after
/// this the caller gets `UNAVAILABLE` and retries with the same request id
/// (the command may or may not have been committed; deduplication covers both).
pub const RAFT_WAIT: Duration = Duration::from_secs(10);

/// Server-side settings shared by every service.
#[derive(Debug, Clone)]
pub struct ServerSettings {
    /// Retention the leader stamps into each tick.
    pub retention: Retention,
    /// Deadline for a forwarded call (plus any long-poll wait it carries).
    pub forward_timeout: Duration,
    /// The planted bug this node runs with (chaos harness and simulation
    /// only: this crate's feature `mutants`, which only a lab build or a
    /// `gavel` built with `--features mutants` turns on). The shell passes
    /// it in; nothing below the shell reads the environment for it.
    #[cfg(feature = "mutants")]
    pub planted_bug: Option<gavel_core::mutants::Mutant>,
    /// How many calls of each kind this node takes at once ([`crate::overload`]).
    pub overload: crate::overload::OverloadLimits,
    /// Cold writes held in memory before they are written into `cold.redb`
    /// ([`gavel_store::app::COLD_PENDING_MAX`] by default).
    pub checkpoint_cold_writes: usize,
    /// The caps, deadline and idle timeout of connections to the gRPC port ([`crate::connections`]).
    pub connections: crate::connections::ConnectionLimits,
    /// Whether this node keeps a note key and cosigns audit checkpoints
    /// ([`crate::checkpointer`]); on by default.
    pub audit_checkpoints: bool,
    /// External witnesses the leader submits each published checkpoint to
    /// (C2SP `tlog-witness`; [`crate::witnesses`]): a policy file's
    /// witnesses that have a URL. Empty: none.
    pub audit_witnesses: Vec<gavel_core::witness::PolicyWitness>,
}

impl Default for ServerSettings {
    fn default() -> Self {
        ServerSettings {
            retention: Retention::default(),
            forward_timeout: Duration::from_secs(10),
            #[cfg(feature = "mutants")]
            planted_bug: None,
            overload: crate::overload::OverloadLimits::default(),
            checkpoint_cold_writes: gavel_store::app::COLD_PENDING_MAX,
            connections: crate::connections::ConnectionLimits::default(),
            audit_checkpoints: true,
            audit_witnesses: Vec::new(),
        }
    }
}

/// A node's shared handle.
pub struct Node {
    /// This node's id.
    pub id: u64,
    /// The Raft layer.
    pub raft: RaftNode,
    /// The one way to read the replicated state ([`gavel_store::reads`]).
    pub reads: ReadPort,
    /// Settings.
    pub settings: ServerSettings,
    /// TLS and token verification; `None` on an insecure node.
    pub secured: Option<Arc<Secured>>,
    /// What this node counts for Prometheus ([`crate::metrics`]).
    pub metrics: Arc<crate::metrics::Metrics>,
    /// The bounds on calls taken at once, enforced by the routing layer.
    pub admission: crate::overload::Admission,
    /// Each principal's writes proposed and not yet answered, for the
    /// quota check before proposing ([`crate::quota`]).
    pub quotas: crate::quota::InFlight,
    /// The worker polls waiting on this node (the leader), for lease
    /// hand-offs and wake-ups ([`crate::waiters`]).
    pub waiters: crate::waiters::Waiters,
    /// The resumes waiting on this node (the leader) for a decision, which
    /// a decision proposed here carries ([`crate::resumes`]).
    pub resumes: crate::resumes::Resumes,
    channels: Mutex<BTreeMap<String, Channel>>,
    /// How a channel to another node connects: `None` over real TCP, the
    /// simulator's network otherwise ([`crate::server::InjectedIo`]).
    dial: Option<gavel_raft::Dial>,
    /// This node's wall clock: the system clock, or the simulator's.
    pub clock: Clock,
}

/// A node's wall clock: the OS clock ([`Clock::system`], production), or
/// one a simulator hands in ([`Clock::from_fn`], through
/// [`crate::server::InjectedIo`]): simulated time plus that node's own skew
/// and jumps. Cheap to clone.
#[derive(Clone, Default)]
pub struct Clock(Option<Arc<dyn Fn() -> u64 + Send + Sync>>);

impl Clock {
    /// The OS clock.
    pub fn system() -> Clock {
        Clock(None)
    }

    /// A clock that reads `now_ms` (milliseconds since the Unix epoch).
    pub fn from_fn(now_ms: impl Fn() -> u64 + Send + Sync + 'static) -> Clock {
        Clock(Some(Arc::new(now_ms)))
    }

    /// Milliseconds since the Unix epoch on a simulator's clock; `None` on
    /// the OS clock.
    pub fn injected_now_ms(&self) -> Option<u64> {
        self.0.as_ref().map(|now_ms| now_ms())
    }

    /// Milliseconds since the Unix epoch on this clock.
    pub fn now_ms(&self) -> u64 {
        match &self.0 {
            Some(now_ms) => now_ms(),
            None => SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |elapsed| elapsed.as_millis() as u64),
        }
    }
}

/// Waits for the next change seen by `receiver`. Once its sender is gone
/// (Raft has stopped) it never returns, so a loop that waits on it next to
/// a timer sleeps instead of spinning.
pub async fn changed_or_never<T>(receiver: &mut tokio::sync::watch::Receiver<T>) {
    if receiver.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// The random numbers of every node in this process, when a simulator set
/// a source.
static RANDOM: std::sync::OnceLock<fn() -> u128> = std::sync::OnceLock::new();

/// Makes [`random_u128`] draw from `source` instead of the OS, for the whole
/// process, from now on; the first call wins (returns whether this one
/// did). For a simulator only (a source seeded per simulation, on the
/// thread that runs it); production never calls it.
pub fn set_random(source: fn() -> u128) -> bool {
    RANDOM.set(source).is_ok()
}

/// 128 random bits: from the OS (a v4 uuid, 122 of them random), or from
/// the simulator's source ([`set_random`]).
pub fn random_u128() -> u128 {
    match RANDOM.get() {
        Some(source) => source(),
        None => uuid::Uuid::new_v4().as_u128(),
    }
}

impl Node {
    /// Milliseconds since the Unix epoch on this node's clock
    /// ([`Node::clock`]). Only the leader's reading decides anything: it is
    /// stamped into each command, and the state machine keeps the largest
    /// stamp as the cluster clock.
    pub fn wall_clock_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// The time a read judges lazy expiry at: the caller's clock when it
    /// gave one, else the later of the cluster clock and this node's.
    pub fn read_time_ms(&self, state: &State, caller_now_ms: Option<u64>) -> u64 {
        caller_now_ms.unwrap_or_else(|| state.clock_ms().max(self.wall_clock_ms()))
    }

    /// Wraps a started Raft node and its application; `secured` is `None`
    /// for an insecure node.
    pub fn new(
        id: u64,
        raft: RaftNode,
        app: Arc<CoreApp>,
        settings: ServerSettings,
        secured: Option<Arc<Secured>>,
    ) -> Arc<Node> {
        Node::with_dial(id, raft, app, settings, secured, None, Clock::system())
    }

    /// [`Node::new`] whose channels to other nodes connect through `dial`
    /// (the simulator's network) when it is given, reading `clock`.
    pub fn with_dial(
        id: u64,
        raft: RaftNode,
        app: Arc<CoreApp>,
        settings: ServerSettings,
        secured: Option<Arc<Secured>>,
        dial: Option<gavel_raft::Dial>,
        clock: Clock,
    ) -> Arc<Node> {
        let metrics = Arc::new(crate::metrics::Metrics::new());
        let admission = crate::overload::Admission::new(settings.overload);
        let quotas = crate::quota::InFlight::default();
        let channels = Mutex::new(BTreeMap::new());
        let reads = ReadPort::new(app);
        let waiters = crate::waiters::Waiters::new(reads.clone(), metrics.polls_waiting());
        let resumes = crate::resumes::Resumes::new(metrics.resumes_waiting());
        Arc::new(Node {
            id,
            raft,
            reads,
            settings,
            secured,
            metrics,
            admission,
            quotas,
            waiters,
            resumes,
            channels,
            dial,
            clock,
        })
    }

    /// Asks the core whether `caller` may send `command` under `request_id`
    /// now ([`State::admit`]), before it is proposed (or, for a long-poll,
    /// before it waits): so refused, a command never reaches the log. The
    /// state machine asks the same judge again at the command's position,
    /// which is what makes a revocation linearizable. Validation runs
    /// before the state lock is taken (it parses the input); a write that
    /// counts against its principal's quotas holds a place among its
    /// writes in flight until the returned guard drops.
    pub fn admit(
        &self,
        caller: Option<&Caller>,
        request_id: &str,
        command: &Command,
    ) -> Result<Option<crate::quota::Admitted>, DomainError> {
        let checked = gavel_core::precheck::check(command)?;
        let request_id = (!request_id.is_empty()).then_some(request_id);
        self.quotas.admit(caller, |in_flight| {
            self.reads.read(|state| {
                state.admit_checked(caller, request_id, &checked, self.wall_clock_ms(), in_flight)?;
                Ok(state.counts_against_quota(command))
            })
        })
    }

    /// Admits a command ([`Node::admit`]), proposes it stamped with this
    /// node's clock and the authenticated `caller` (`None` on an insecure
    /// node, and for the leader's own commands), and returns its reply as
    /// `R`. The state machine admits it again at its position in the log.
    /// A refusal becomes its status; a node that lost leadership since the
    /// routing layer let the call through answers `UNAVAILABLE` with the
    /// leader hint, and the caller retries with the same request id.
    pub async fn call<R: FromReply>(
        &self,
        caller: Option<&Caller>,
        request_id: &str,
        command: Command,
    ) -> Result<R, Status> {
        let approval_id = decision_of(&command).map(str::to_string);
        let refused = |error: DomainError| {
            if let Some(approval_id) = &approval_id {
                self.decision_refused(caller, approval_id, &error);
            }
            self.quotas.refused(&self.metrics, error)
        };
        let _in_flight = self.admit(caller, request_id, &command).map_err(refused)?;
        // A decision carries the requester's resume waiting for it, and a
        // command that creates an execution carries a waiting poll it
        // leases it to, in the same apply; each is told when its claim
        // drops, answered or not.
        let (command, _resume_claim) = self.resumes.carry(command);
        let (command, _claim) = self.waiters.hand_off(command, self.wall_clock_ms());
        match self.propose(caller, request_id, command).await? {
            Reply::Error(error) => Err(refused(error)),
            reply => R::from_reply(reply).map_err(|reply| unexpected(&reply)),
        }
    }

    /// A reply the state machine remembered for a command this node did not
    /// propose itself (a resume a decision carried, decision 0108), as
    /// [`Node::call`] would have answered it.
    pub fn answer<R: FromReply>(&self, reply: Reply) -> Result<R, Status> {
        match reply {
            Reply::Error(error) => Err(self.quotas.refused(&self.metrics, error)),
            reply => R::from_reply(reply).map_err(|reply| unexpected(&reply)),
        }
    }

    /// A refused decision or vote: counted by reason
    /// (`gavel_decisions_refused_total{reason}`) and logged as one line
    /// naming the principal, the approval and the reason, so an operator
    /// sees who tried to decide what and why it was refused (issue #37).
    /// Most are refused before proposing and cost no log entry.
    fn decision_refused(&self, caller: Option<&Caller>, approval_id: &str, error: &DomainError) {
        self.metrics.count_decision_refused(error.code);
        let principal = caller.map_or_else(|| "(insecure)".to_string(), |caller| caller.principal.to_string());
        tracing::warn!(
            target: "gavel::decisions",
            principal = %principal,
            approval = %approval_id,
            reason = error.code.as_str(),
            message = %error.message,
            "decision refused"
        );
    }

    /// Proposes a command as it is and waits for its reply.
    async fn propose(&self, caller: Option<&Caller>, request_id: &str, command: Command) -> Result<Reply, Status> {
        let envelope = Envelope {
            request_id: (!request_id.is_empty()).then(|| request_id.to_string()),
            now_ms: self.wall_clock_ms(),
            caller: caller.cloned(),
            command,
        };
        // The span joins the call's trace (the routing layer's `gavel.rpc`
        // span is the current one); the trace context stays out of the log.
        // The leader's own proposals (ticks) run in no call and get no span,
        // so that they do not start a trace every tick.
        let span = if tracing::Span::current().is_none() {
            tracing::Span::none()
        } else {
            tracing::info_span!("gavel.propose", request_id = %request_id)
        };
        let command = CoreApp::encode_command(&envelope);
        if let Some(started) = crate::metrics::call_started() {
            self.metrics.observe_edge(started.elapsed());
        }
        let written = self.raft.write(command);
        let outcome = tokio::time::timeout(RAFT_WAIT, written).instrument(span.clone()).await;
        if let Ok(Ok(_)) = &outcome {
            tracing::debug!(parent: &span, "proposal committed and applied");
        }
        match outcome {
            Ok(Ok(bytes)) => Ok(CoreApp::decode_reply(&bytes)),
            Ok(Err(error)) => Err(write_error_status(error)),
            Err(_) => Err(unavailable("the write was not committed in time; retry with the same request id", None)),
        }
    }

    /// A linearizable read: waits until this node may serve it (it is the
    /// leader and has applied everything committed before the read began),
    /// checks that `caller` may do `action` against the grants as of then,
    /// and reads the state.
    pub async fn read<T>(
        &self,
        caller: Option<&Caller>,
        action: Action,
        read: impl FnOnce(&State) -> T,
    ) -> Result<T, Status> {
        self.linearizable().await?;
        self.reads.read(|state| {
            state.authorize(caller, action).map_err(domain_status)?;
            Ok(read(state))
        })
    }

    /// A linearizable read that authorizes itself, for a read whose action
    /// depends on what it finds (an approval's types): `read` gets the
    /// state after the barrier and must call [`State::authorize`].
    pub async fn read_authorizing<T>(&self, read: impl FnOnce(&State) -> Result<T, Status>) -> Result<T, Status> {
        self.linearizable().await?;
        self.reads.read(read)
    }

    /// Waits until this node may serve a linearizable read.
    pub async fn linearizable(&self) -> Result<(), Status> {
        match tokio::time::timeout(RAFT_WAIT, self.raft.ensure_linearizable()).await {
            Ok(result) => result.map_err(write_error_status),
            Err(_) => Err(unavailable("the leader could not confirm its leadership in time", None)),
        }
    }

    /// `UNAVAILABLE` with the leader hint unless this node is the leader: for
    /// a long-poll, which only the leader may serve, before it starts waiting.
    pub fn ensure_leader(&self) -> Result<(), Status> {
        let (leader_id, leader_addr) = match self.raft.leader_route() {
            LeaderRoute::Here => return Ok(()),
            LeaderRoute::At { leader_id, leader_addr } => (Some(leader_id), Some(leader_addr)),
            LeaderRoute::Unknown => (None, None),
        };
        Err(write_error_status(WriteError::ForwardToLeader { leader_id, leader_addr }))
    }

    /// Whether this node runs with the planted bug `mutant` (chaos harness
    /// and simulation only).
    #[cfg(feature = "mutants")]
    pub fn plants(&self, mutant: Mutant) -> bool {
        gavel_core::mutants::is_planted(self.settings.planted_bug, mutant)
    }

    /// A lazily connected channel to another node's public port: over
    /// mutual TLS with this node's certificate on a secured node, so that
    /// the leader honours what it forwards.
    pub fn channel(&self, addr: &str) -> Result<Channel, Status> {
        let mut channels = self.channels.lock().expect("channel cache lock poisoned");
        if let Some(channel) = channels.get(addr) {
            return Ok(channel.clone());
        }
        let scheme = if self.secured.is_some() { "https" } else { "http" };
        let mut endpoint = Endpoint::from_shared(format!("{scheme}://{addr}"))
            .map_err(|error| Status::internal(format!("bad leader address {addr}: {error}")))?;
        if let Some(secured) = &self.secured {
            endpoint = endpoint
                .tls_config(secured.peer_tls.client_config())
                .map_err(|error| Status::internal(format!("TLS towards the leader at {addr}: {error}")))?;
        }
        let endpoint = endpoint
            .connect_timeout(Duration::from_secs(1))
            .tcp_nodelay(true)
            .http2_keep_alive_interval(Duration::from_secs(10))
            .keep_alive_while_idle(true);
        let channel = match &self.dial {
            Some(dial) => dial(endpoint),
            None => endpoint.connect_lazy(),
        };
        channels.insert(addr.to_string(), channel.clone());
        Ok(channel)
    }
}

/// A Raft refusal as a status: `UNAVAILABLE` with the leader hint when this
/// node is not (or no longer) the leader, or with a retry hint while no
/// leader is known.
pub fn write_error_status(error: WriteError) -> Status {
    match error {
        WriteError::ForwardToLeader { leader_addr: Some(addr), .. } => {
            unavailable("this node is no longer the leader; retry there", Some(addr))
        }
        WriteError::ForwardToLeader { leader_addr: None, .. } => {
            unavailable("no leader is elected yet; retry shortly", None)
        }
        WriteError::Unavailable(reason) => unavailable(&format!("cluster unavailable: {reason}"), None),
        WriteError::Invalid(reason) => refusal_status(ErrorCode::FailedPrecondition, &reason, None, None),
    }
}

/// A reply of another shape than its command's: a bug, reported as `INTERNAL`.
fn unexpected(reply: &Reply) -> Status {
    Status::internal(format!("unexpected reply from the state machine: {reply:?}"))
}

/// The approval a decision or vote command is about; `None` for any other
/// command.
fn decision_of(command: &Command) -> Option<&str> {
    match command {
        Command::DecideApproval { approval_id, .. } | Command::CastVote { approval_id, .. } => Some(approval_id),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gavel_proto::error_detail::read_error_detail;
    use tonic::Code;

    #[tokio::test]
    async fn a_wait_on_a_closed_watch_never_ends_so_a_loop_sleeps_instead_of_spinning() {
        let (sender, mut receiver) = tokio::sync::watch::channel(0);
        sender.send(1).expect("a receiver is open");
        changed_or_never(&mut receiver).await;
        drop(sender);
        let waited = tokio::time::timeout(Duration::from_millis(50), changed_or_never(&mut receiver)).await;
        assert!(waited.is_err(), "a closed channel ended the wait");
    }

    #[test]
    fn a_node_deposed_before_its_proposal_answers_unavailable_with_the_leader_hint() {
        let deposed = WriteError::ForwardToLeader { leader_id: Some(2), leader_addr: Some("10.0.0.2:7000".into()) };
        let status = write_error_status(deposed);
        assert_eq!(status.code(), Code::Unavailable);
        let detail = read_error_detail(&status).expect("an error detail");
        assert_eq!(detail.leader_hint.as_deref(), Some("10.0.0.2:7000"));
        assert_eq!(detail.retry_after_ms, Some(RETRY_AFTER_MS));

        let electing = write_error_status(WriteError::ForwardToLeader { leader_id: None, leader_addr: None });
        let detail = read_error_detail(&electing).expect("an error detail");
        assert_eq!((detail.leader_hint, detail.retry_after_ms), (None, Some(RETRY_AFTER_MS)));
    }
}
