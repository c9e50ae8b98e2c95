//! Node configuration and Raft timings.

use std::path::PathBuf;

use crate::RaftError;

/// Every timing and snapshot knob of the Raft layer. All durations are in
/// milliseconds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RaftTimings {
    /// Interval of the leader's heartbeats.
    ///
    /// openraft (0.9 and 0.10) also uses it as the hard deadline of every append-entries
    /// RPC (heartbeat or replication), and that RPC includes the follower's
    /// fsync: keep it well above the disk's fsync latency.
    pub heartbeat_ms: u64,
    /// Lower bound of the randomized election timeout.
    pub election_timeout_min_ms: u64,
    /// Upper bound of the randomized election timeout.
    pub election_timeout_max_ms: u64,
    /// Deadline of one peer RPC (append-entries, vote) and of connecting to a
    /// peer. openraft additionally cancels an append-entries RPC after
    /// `heartbeat_ms` and a vote after `election_timeout_min_ms`, so the
    /// effective deadline is the smaller of the two.
    pub rpc_timeout_ms: u64,
    /// Deadline for sending and installing a whole snapshot on a peer.
    pub snapshot_timeout_ms: u64,
    /// Build a snapshot once this many entries were applied since the last
    /// one: the backstop that bounds the log's length (an entry carries from
    /// one to 512 commands, the batcher's `BATCH_COMMANDS_MAX`).
    pub snapshot_logs_since_last: u64,
    /// Build a snapshot once this many commands were applied since the last
    /// one, however few entries carried them: what bounds the state a
    /// snapshot and a restart catch up on.
    pub snapshot_commands_since_last: u64,
    /// How many already-snapshotted entries to keep in the log after a snapshot
    /// (lets a slightly lagging follower catch up without a snapshot).
    pub logs_to_keep: u64,
    /// Whether a node whose election timer fires first asks its peers if they
    /// would vote for it (Raft's pre-vote) before it raises its term: a node
    /// that was cut off then rejoins without forcing an election.
    pub pre_vote: bool,
}

impl Default for RaftTimings {
    /// Tuned for fsynced disks on a loopback or LAN cluster. A follower that
    /// knew a leader waits the leader lease (openraft 0.9 and 0.10: the maximum election
    /// timeout) plus a random election timeout before it campaigns, so
    /// 400–800 ms puts failover at about 1.2–1.6 s, while still allowing more
    /// than two missed 150 ms heartbeats before a spurious election.
    fn default() -> Self {
        Self {
            heartbeat_ms: 150,
            election_timeout_min_ms: 400,
            election_timeout_max_ms: 800,
            rpc_timeout_ms: 1000,
            snapshot_timeout_ms: 30_000,
            snapshot_logs_since_last: 5000,
            snapshot_commands_since_last: 10_000,
            logs_to_keep: 1000,
            pre_vote: true,
        }
    }
}

/// The longest any Raft timing may be, in milliseconds: a day. A deadline
/// past it is a typo, not a setting, and openraft multiplies the election
/// timeout (`--election-timeout-max-ms=18446744073709551615` overflowed as
/// the node started; found 2026-12-07).
pub const TIMING_MS_MAX: u64 = 24 * 60 * 60 * 1000;

impl RaftTimings {
    /// Checks that the timings make sense together.
    pub fn validate(&self) -> Result<(), RaftError> {
        let invalid = |reason: String| Err(RaftError::Config(reason));
        let timings = [
            ("heartbeat_ms", self.heartbeat_ms),
            ("election_timeout_min_ms", self.election_timeout_min_ms),
            ("election_timeout_max_ms", self.election_timeout_max_ms),
            ("rpc_timeout_ms", self.rpc_timeout_ms),
            ("snapshot_timeout_ms", self.snapshot_timeout_ms),
        ];
        if let Some((name, ms)) = timings.iter().find(|(_, ms)| *ms > TIMING_MS_MAX) {
            return invalid(format!("{name} ({ms}) must be at most {TIMING_MS_MAX} (a day)"));
        }
        if self.heartbeat_ms == 0 {
            return invalid("heartbeat_ms must be positive".into());
        }
        if self.election_timeout_min_ms >= self.election_timeout_max_ms {
            return invalid(format!(
                "election_timeout_min_ms ({}) must be below election_timeout_max_ms ({})",
                self.election_timeout_min_ms, self.election_timeout_max_ms
            ));
        }
        if self.heartbeat_ms >= self.election_timeout_min_ms {
            return invalid(format!(
                "heartbeat_ms ({}) must be below election_timeout_min_ms ({})",
                self.heartbeat_ms, self.election_timeout_min_ms
            ));
        }
        if self.rpc_timeout_ms == 0 || self.snapshot_timeout_ms == 0 {
            return invalid("rpc_timeout_ms and snapshot_timeout_ms must be positive".into());
        }
        if self.snapshot_logs_since_last == 0 || self.snapshot_commands_since_last == 0 {
            return invalid("snapshot_logs_since_last and snapshot_commands_since_last must be positive".into());
        }
        Ok(())
    }
}

/// How to run one Raft node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeConfig {
    /// This node's id, stable across restarts and unique in the cluster.
    pub node_id: u64,
    /// `host:port` this node's gRPC server listens on; peers dial it.
    pub addr: String,
    /// Directory holding this node's Raft state (created if missing). The Raft
    /// layer owns the `raft` subdirectory.
    pub data_dir: PathBuf,
    /// Timings and snapshot policy.
    pub timings: RaftTimings,
    /// The planted bugs of the Raft log (chaos harness and simulation
    /// only). Only a build with this crate's feature `mutants` has their
    /// code and this field (gavel-server's `mutants` turns it on); the Raft
    /// layer reads no environment for them.
    #[cfg(feature = "mutants")]
    pub planted: PlantedLogBugs,
    /// Mutual TLS towards peers: `None` dials them in plaintext (a node
    /// started `--insecure`).
    pub peer_tls: Option<PeerTls>,
}

/// Planted bugs of the Raft log (see `gavel_core::mutants`): none is set
/// outside the chaos harness (a `gavel` built with the `mutants` feature)
/// and the simulation's planted-bug test. Compiled only with the feature
/// `mutants`.
#[cfg(feature = "mutants")]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PlantedLogBugs {
    /// `early-ack`: log appends are acknowledged at once and written only
    /// 1.5 s later.
    pub early_ack: bool,
    /// `unsynced-append`: log appends are acknowledged after their write,
    /// never fdatasynced.
    pub unsynced_append: bool,
    /// `unsynced-vote`: a vote replacing an earlier one is written in place
    /// without an fsync.
    pub unsynced_vote: bool,
    /// `leader-restore`: a restarted leader leads again in its old term.
    pub leader_restore: bool,
}

/// The TLS material a node dials its peers with: the cluster CA that a
/// peer's server certificate must chain to, and this node's own certificate
/// and key, presented as client certificate so that the peer admits its
/// Raft calls.
#[derive(Clone, PartialEq, Eq)]
pub struct PeerTls {
    /// The cluster CA certificate (PEM).
    pub ca_pem: String,
    /// This node's certificate (PEM, SAN URI `gavel://node/<id>`).
    pub cert_pem: String,
    /// Its private key (PEM).
    pub key_pem: String,
}

// The private key stays out of logs.
impl std::fmt::Debug for PeerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerTls").finish_non_exhaustive()
    }
}

impl PeerTls {
    /// The tonic client configuration for these PEMs.
    pub fn client_config(&self) -> tonic::transport::ClientTlsConfig {
        use tonic::transport::{Certificate, ClientTlsConfig, Identity};
        ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(&self.ca_pem))
            .identity(Identity::from_pem(&self.cert_pem, &self.key_pem))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timing_past_a_day_is_refused_before_openraft_sees_it() {
        RaftTimings::default().validate().expect("the defaults are valid");
        let at_most = RaftTimings {
            election_timeout_max_ms: TIMING_MS_MAX,
            rpc_timeout_ms: TIMING_MS_MAX,
            snapshot_timeout_ms: TIMING_MS_MAX,
            ..RaftTimings::default()
        };
        at_most.validate().expect("a day is allowed");
        for too_long in [
            RaftTimings { election_timeout_max_ms: u64::MAX, ..RaftTimings::default() },
            RaftTimings { rpc_timeout_ms: TIMING_MS_MAX + 1, ..RaftTimings::default() },
            RaftTimings { snapshot_timeout_ms: u64::MAX, ..RaftTimings::default() },
            RaftTimings {
                heartbeat_ms: u64::MAX - 2,
                election_timeout_min_ms: u64::MAX - 1,
                election_timeout_max_ms: u64::MAX,
                ..RaftTimings::default()
            },
        ] {
            let error = too_long.validate().expect_err("refused");
            assert!(error.to_string().contains("must be at most 86400000"), "{error}");
        }
    }
}
