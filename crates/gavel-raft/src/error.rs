//! Errors of the Raft layer.

/// Why the Raft node could not start, answer or stop.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum RaftError {
    /// The timings or the node configuration are not usable.
    #[error("invalid raft configuration: {0}")]
    Config(String),
    /// The on-disk state could not be opened, read or written.
    #[error("raft storage failed: {0}")]
    Storage(String),
    /// The cluster could not be initialized with the given members.
    #[error("cannot initialize the cluster: {0}")]
    Initialize(String),
    /// A wait (for a leader, for a snapshot) ran out of time.
    #[error("timed out: {0}")]
    Timeout(String),
    /// The Raft node has stopped (shut down or failed).
    #[error("raft node is shut down")]
    Shutdown,
}

/// Why a write or a linearizable read could not be served here.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum WriteError {
    /// This node is not the leader; retry on the leader (if known).
    #[error("not the leader; leader is {leader_id:?} at {leader_addr:?}")]
    ForwardToLeader {
        /// The leader this node knows of, if any.
        leader_id: Option<u64>,
        /// The leader's gRPC address (`host:port`), if known.
        leader_addr: Option<String>,
    },
    /// No quorum, election in progress, or node shutting down: retryable.
    #[error("raft unavailable: {0}")]
    Unavailable(String),
    /// The request is refused as such (for example a membership change that
    /// is not allowed); retrying it unchanged will fail again.
    #[error("invalid raft request: {0}")]
    Invalid(String),
}
