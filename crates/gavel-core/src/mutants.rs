//! Planted bugs for the chaos harness and the simulation.
//!
//! A planted bug is a value passed down from the shell
//! ([`crate::State::set_planted_bug`], the server's and the Raft log's
//! settings); the code checks it with [`is_planted`] and reads no
//! environment. This module, and the code of every bug wherever it acts,
//! compiles only with the cargo feature `mutants` (of this crate, and of
//! gavel-raft, gavel-store and gavel-server for theirs): a release build has
//! neither the bugs nor their names. Only two callers ever name one: a
//! `gavel` built with the `mutants` cargo feature, which reads
//! `GAVEL_MUTANT` (the chaos harness's `--mutant`; a `gavel` built without
//! it refuses to start a node with the variable set), and the simulation's
//! planted-bug test, which plants it in simulated nodes (see
//! docs/decisions/0087-planted-bugs-behind-a-feature.md).

use crate::model::Capability;
use crate::retry::{backoff_ms, AttemptFailure};

/// One planted bug.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mutant {
    /// The server answers `GetApproval` from local state, without read-index
    /// and without forwarding to the leader (stale reads on followers).
    StaleRead,
    /// The Raft log acknowledges an append before it is durable.
    EarlyAck,
    /// Reports under an expired lease are accepted (the deadline fence is skipped).
    NoFencing,
    /// Requests are deduplicated on a truncated key, and a recalled reply is
    /// returned even for a different request.
    DedupWrongKey,
    /// A failed write without `idempotent` + retry config is retried once.
    RetryNonIdempotent,
    /// The Raft log acknowledges an append after its `pwrite` and never
    /// fdatasyncs it (only a segment rotation syncs): a SIGKILL keeps the
    /// page cache, so only a power cut loses the acknowledged entries.
    UnsyncedAppend,
    /// A vote replacing an earlier one is written over it in place without
    /// an fsync before the node grants it: a power cut brings the old vote
    /// back, and the node may vote a second time in the same term.
    UnsyncedVote,
    /// A restarted leader resumes leading in its old term (openraft 0.10's
    /// leader restore): after a kill took from its log entries its
    /// followers hold, it writes other entries under the same log ids.
    LeaderRestore,
}

impl Mutant {
    /// Every planted bug.
    pub const ALL: [Mutant; 8] = [
        Mutant::StaleRead,
        Mutant::EarlyAck,
        Mutant::NoFencing,
        Mutant::DedupWrongKey,
        Mutant::RetryNonIdempotent,
        Mutant::UnsyncedAppend,
        Mutant::UnsyncedVote,
        Mutant::LeaderRestore,
    ];

    /// The name `GAVEL_MUTANT` uses.
    pub fn name(self) -> &'static str {
        match self {
            Mutant::StaleRead => "stale-read",
            Mutant::EarlyAck => "early-ack",
            Mutant::NoFencing => "no-fencing",
            Mutant::DedupWrongKey => "dedup-wrong-key",
            Mutant::RetryNonIdempotent => "retry-non-idempotent",
            Mutant::UnsyncedAppend => "unsynced-append",
            Mutant::UnsyncedVote => "unsynced-vote",
            Mutant::LeaderRestore => "leader-restore",
        }
    }

    /// The planted bug `name` names (as [`Mutant::name`] spells it), if any.
    pub fn from_name(name: &str) -> Option<Mutant> {
        Mutant::ALL.into_iter().find(|mutant| mutant.name() == name)
    }
}

/// Whether `mutant` is `planted`, the planted bug the shell passed in.
#[inline]
pub fn is_planted(planted: Option<Mutant>, mutant: Mutant) -> bool {
    planted == Some(mutant)
}

/// The planted bug `retry-non-idempotent`: the backoff of a retry the SI-11
/// rule ([`crate::retry::retry_after_ms`]) refused, when the capability has
/// no retry config, the first attempt failed and its error is retryable:
/// it is retried once anyway, whatever its side effect.
pub(crate) fn retry_non_idempotent_ms(capability: &Capability, attempts: u32, failure: &AttemptFailure) -> Option<u64> {
    let planted = capability.retry.is_none() && attempts <= 1 && crate::retry::error_retryable(capability, failure);
    planted.then(|| backoff_ms(0, attempts))
}
