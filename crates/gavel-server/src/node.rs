//! One Gavel node: the Raft handle, the core application, and the routing
//! every service shares (propose here, read linearizably here, or forward to
//! the leader).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use gavel_core::{Command, DomainError, Envelope, ErrorClass, Reply, Retention};
use gavel_raft::{RaftNode, WriteError};
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};

use crate::app::CoreApp;

/// Metadata key marking a request a follower forwarded to the leader; a
/// forwarded request is never forwarded again, so routing cannot loop.
pub const FORWARDED_METADATA_KEY: &str = "gavel-forwarded";

/// How long a caller should wait before retrying during an election.
pub const RETRY_AFTER_MS: u64 = 250;

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
    /// The planted bug this node runs with (chaos harness only; it takes
    /// effect only in a build with the `mutants` feature). The shell passes
    /// it in; nothing below the shell reads the environment for it.
    pub planted_bug: Option<gavel_core::mutants::Mutant>,
}

impl Default for ServerSettings {
    fn default() -> Self {
        ServerSettings { retention: Retention::default(), forward_timeout: Duration::from_secs(10), planted_bug: None }
    }
}

/// Where a request goes when this node cannot serve it.
#[derive(Debug)]
pub enum Routed {
    /// The leader is at this address: forward there.
    Forward(String),
    /// Answer the caller with this status.
    Fail(Status),
}

impl From<Status> for Routed {
    fn from(status: Status) -> Self {
        Routed::Fail(status)
    }
}

impl From<DomainError> for Routed {
    fn from(error: DomainError) -> Self {
        Routed::Fail(domain_status(error))
    }
}

/// A node's shared handle.
pub struct Node {
    /// This node's id.
    pub id: u64,
    /// The Raft layer.
    pub raft: RaftNode,
    /// The replicated application.
    pub app: Arc<CoreApp>,
    /// Settings.
    pub settings: ServerSettings,
    channels: Mutex<BTreeMap<String, Channel>>,
}

/// Milliseconds since the Unix epoch on this node's clock. Only the leader's
/// reading matters: it is stamped into each command.
pub fn wall_clock_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |elapsed| elapsed.as_millis() as u64)
}

impl Node {
    /// Wraps a started Raft node and its application.
    pub fn new(id: u64, raft: RaftNode, app: Arc<CoreApp>, settings: ServerSettings) -> Arc<Node> {
        Arc::new(Node { id, raft, app, settings, channels: Mutex::new(BTreeMap::new()) })
    }

    /// Proposes a command stamped with this node's clock and waits for its reply.
    pub async fn propose(&self, request_id: &str, command: Command) -> Result<Reply, Routed> {
        let envelope = Envelope {
            request_id: (!request_id.is_empty()).then(|| request_id.to_string()),
            now_ms: wall_clock_ms(),
            command,
        };
        match tokio::time::timeout(RAFT_WAIT, self.raft.write(CoreApp::encode_command(&envelope))).await {
            Ok(Ok(bytes)) => Ok(CoreApp::decode_reply(&bytes)),
            Ok(Err(error)) => Err(route_write_error(error)),
            Err(_) => Err(Routed::Fail(unavailable(
                "the write was not committed in time; retry with the same request id",
                None,
            ))),
        }
    }

    /// Waits until this node may serve a linearizable read (it is the leader
    /// and has applied everything committed before the read began).
    pub async fn linearizable(&self) -> Result<(), Routed> {
        match tokio::time::timeout(RAFT_WAIT, self.raft.ensure_linearizable()).await {
            Ok(result) => result.map_err(route_write_error),
            Err(_) => Err(Routed::Fail(unavailable("the leader could not confirm its leadership in time", None))),
        }
    }

    /// A lazily connected channel to another node's public port.
    pub fn channel(&self, addr: &str) -> Result<Channel, Status> {
        let mut channels = self.channels.lock().expect("channel cache lock poisoned");
        if let Some(channel) = channels.get(addr) {
            return Ok(channel.clone());
        }
        let endpoint = Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|error| Status::internal(format!("bad leader address {addr}: {error}")))?
            .connect_timeout(Duration::from_secs(1))
            .tcp_nodelay(true)
            .http2_keep_alive_interval(Duration::from_secs(10))
            .keep_alive_while_idle(true);
        let channel = endpoint.connect_lazy();
        channels.insert(addr.to_string(), channel.clone());
        Ok(channel)
    }
}

/// Maps a Raft refusal to a route: forward to a known leader, or `UNAVAILABLE`
/// with a retry hint while no leader is known.
fn route_write_error(error: WriteError) -> Routed {
    match error {
        WriteError::ForwardToLeader { leader_addr: Some(addr), .. } => Routed::Forward(addr),
        WriteError::ForwardToLeader { leader_addr: None, .. } => {
            Routed::Fail(unavailable("no leader is elected yet; retry shortly", None))
        }
        WriteError::Unavailable(reason) => Routed::Fail(unavailable(&format!("cluster unavailable: {reason}"), None)),
        WriteError::Invalid(reason) => Routed::Fail(gavel_proto::error_detail::domain_status(
            Code::FailedPrecondition,
            "FAILED_PRECONDITION",
            &reason,
            Vec::new(),
            None,
            None,
        )),
    }
}

/// `UNAVAILABLE` with a retry hint and, when known, the leader's address.
pub fn unavailable(message: &str, leader_hint: Option<String>) -> Status {
    gavel_proto::error_detail::domain_status(
        Code::Unavailable,
        "UNAVAILABLE",
        message,
        Vec::new(),
        Some(RETRY_AFTER_MS),
        leader_hint,
    )
}

/// A domain refusal as a gRPC status with the stable code in the details.
pub fn domain_status(error: DomainError) -> Status {
    let code = match error.code.class() {
        ErrorClass::InvalidArgument => Code::InvalidArgument,
        ErrorClass::NotFound => Code::NotFound,
        ErrorClass::AlreadyExists => Code::AlreadyExists,
        ErrorClass::Unauthenticated => Code::Unauthenticated,
        ErrorClass::PermissionDenied => Code::PermissionDenied,
        ErrorClass::FailedPrecondition => Code::FailedPrecondition,
    };
    gavel_proto::error_detail::domain_status(code, error.code.as_str(), &error.message, error.problems, None, None)
}

/// A reply the service did not expect for its command: a bug, reported as `INTERNAL`.
pub fn unexpected(reply: &Reply) -> Status {
    Status::internal(format!("unexpected reply from the state machine: {reply:?}"))
}
