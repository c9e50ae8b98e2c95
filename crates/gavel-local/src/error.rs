//! The kit's errors.

use std::path::PathBuf;
use std::time::Duration;

/// Everything the kit can fail at.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No `gavel` binary was found where the kit looks for one.
    #[error(
        "no gavel binary found (looked at {looked_at}); build it with `cargo build -p gavel-cli` or set GAVEL_BIN"
    )]
    BinaryNotFound {
        /// The paths that were tried, comma-separated.
        looked_at: String,
    },
    /// A spec asked for no nodes.
    #[error("a cluster needs at least one node")]
    NoNodes,
    /// A node id the cluster does not have.
    #[error("no node {0} in the cluster")]
    UnknownNode(u64),
    /// A start of a node whose process still runs.
    #[error("node {0} is already running")]
    AlreadyRunning(u64),
    /// A signal to a node whose process does not run.
    #[error("node {0} is not running")]
    NotRunning(u64),
    /// The launcher could not place or start a node.
    #[error("cannot launch node {id}: {detail}")]
    Launch {
        /// The node.
        id: u64,
        /// Why.
        detail: String,
    },
    /// A file-system or process call failed.
    #[error("{action}: {source}")]
    Io {
        /// What was being done.
        action: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// Sending a signal to a node process failed.
    #[error("{signal} to node {id} (pid {pid}): {source}")]
    Signal {
        /// The node.
        id: u64,
        /// Its process.
        pid: u32,
        /// The signal's name.
        signal: String,
        /// The error of `kill(2)`.
        #[source]
        source: nix::errno::Errno,
    },
    /// A node process exited although nobody stopped it.
    #[error("node {id} exited by itself ({status}); see {log}")]
    NodeExited {
        /// The node.
        id: u64,
        /// Its exit status.
        status: String,
        /// Its log file.
        log: PathBuf,
    },
    /// No node reported itself leader in time.
    #[error("no leader within {timeout:?}; node logs in {logs}")]
    NoLeader {
        /// How long was waited.
        timeout: Duration,
        /// Where the node logs are (or what was asked, for bare endpoints).
        logs: String,
    },
    /// The nodes did not reach one applied index and state hash in time.
    #[error("the nodes did not converge within {timeout:?}: {detail}")]
    NotConverged {
        /// How long was waited.
        timeout: Duration,
        /// What the nodes reported last.
        detail: String,
    },
    /// Two nodes reported one applied index with different state hashes:
    /// their replicated states differ, which no wait repairs.
    #[error("the nodes diverged: two replicas applied the log up to one index and hold different states: {detail}")]
    Diverged {
        /// The index and the two nodes' hashes.
        detail: String,
    },
    /// A `ClusterService.Status` call failed or did not answer in time.
    #[error("status of {addr}: {detail}")]
    Status {
        /// The node's address.
        addr: String,
        /// The gRPC status message, or the timeout.
        detail: String,
    },
    /// An address that is not a valid URI.
    #[error("{addr} is not a valid node address: {source}")]
    Address {
        /// The address given.
        addr: String,
        /// The parse error.
        #[source]
        source: tonic::transport::Error,
    },
    /// Issuing TLS material or a token failed.
    #[error("security material: {0}")]
    Pki(#[from] gavel_pki::PkiError),
    /// The admin's grant was refused until the deadline (no bootstrap admin
    /// applied yet, no leader, or a refusal).
    #[error("granting {grant} to {principal}: {detail}")]
    Grant {
        /// Who was to get it.
        principal: String,
        /// Which grant.
        grant: String,
        /// The last refusal.
        detail: String,
    },
    /// Credentials were asked of a cluster that runs `--insecure`.
    #[error("the cluster runs --insecure: it has no certificates or tokens")]
    Insecure,
}

impl Error {
    /// An [`Error::Io`] saying what was being done.
    pub(crate) fn io(action: impl Into<String>, source: std::io::Error) -> Error {
        Error::Io { action: action.into(), source }
    }
}
