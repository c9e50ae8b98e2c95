//! A plain snapshot of the node's Raft state, for routing and monitoring.

use std::collections::BTreeMap;

/// The node's role in the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Accepts writes and serves linearizable reads.
    Leader,
    /// A voter following a leader (or waiting for one).
    Follower,
    /// A voter running an election.
    Candidate,
    /// Replicates the log without voting (also: a node not yet initialized).
    Learner,
    /// The node has stopped.
    Shutdown,
}

/// One node of the current membership.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Member {
    /// The node's id.
    pub node_id: u64,
    /// The node's gRPC address (`host:port`).
    pub addr: String,
    /// Whether the node votes (false for a learner).
    pub voter: bool,
}

/// A vote as Raft keeps it on disk: the term, the node voted for (the
/// leader, once granted), and whether a quorum granted it. Ordered as
/// openraft orders votes: by term, then node, then granted; a node's vote
/// never goes back, across crashes included.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VoteMark {
    /// The term.
    pub term: u64,
    /// The node voted for.
    pub node_id: u64,
    /// Whether a quorum granted the vote (the node leads, or follows the
    /// leader of this term).
    pub committed: bool,
}

impl std::fmt::Display for VoteMark {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let stage = if self.committed { "elected" } else { "a candidate" };
        write!(f, "term {} for n{} ({stage})", self.term, self.node_id)
    }
}

/// What this node currently knows about the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RaftStatus {
    /// This node's id.
    pub node_id: u64,
    /// This node's role.
    pub role: Role,
    /// The current term.
    pub term: u64,
    /// The leader this node knows of, if any.
    pub leader_id: Option<u64>,
    /// The leader's gRPC address, if known.
    pub leader_addr: Option<String>,
    /// Index of the last log entry applied to the application.
    pub last_applied_index: Option<u64>,
    /// Index of the last entry in this node's log.
    pub last_log_index: Option<u64>,
    /// Last log index included in this node's latest snapshot.
    pub snapshot_index: Option<u64>,
    /// Index up to which the log has been purged (everything at or before it
    /// lives only in the snapshot).
    pub purged_index: Option<u64>,
    /// The membership in effect, ordered by node id.
    pub members: Vec<Member>,
}

/// What only a leader knows: how recently a quorum acknowledged it and how
/// far each member's log matches its own ([`crate::RaftNode::leader_progress`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeaderProgress {
    /// Milliseconds since a quorum last acknowledged this leader, if ever.
    pub millis_since_quorum_ack: Option<u64>,
    /// Per member (the leader included), the last log index known to match
    /// the leader's (`None`: nothing replicated yet).
    pub matched_index: BTreeMap<u64, Option<u64>>,
}

impl RaftStatus {
    /// Whether this node is the leader.
    pub fn is_leader(&self) -> bool {
        self.role == Role::Leader
    }
}

/// Where a request that only the leader may serve goes ([`crate::RaftNode::leader_route`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaderRoute {
    /// This node is the leader.
    Here,
    /// Another node leads, at this address.
    At {
        /// The leader's id.
        leader_id: u64,
        /// The leader's gRPC address.
        leader_addr: String,
    },
    /// No leader is known (an election is under way).
    Unknown,
}
