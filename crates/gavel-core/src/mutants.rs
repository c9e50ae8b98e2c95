//! Planted bugs for the chaos harness (cargo feature `mutants`).
//!
//! A node built with `--features mutants` switches on the bug named by the
//! `GAVEL_MUTANT` environment variable; the chaos harness then has to catch
//! it. The shell reads the variable and passes the bug in as a value
//! ([`crate::State::set_planted_bug`]); the state machine checks that value
//! with [`is_planted`] and reads no environment. Without the feature every
//! check is a constant `false` and the code behind it is compiled out. Release and test builds never enable it; the
//! planted-bug test builds its own binary (see `docs/testing.md`).

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
}

impl Mutant {
    /// Every planted bug.
    pub const ALL: [Mutant; 7] = [
        Mutant::StaleRead,
        Mutant::EarlyAck,
        Mutant::NoFencing,
        Mutant::DedupWrongKey,
        Mutant::RetryNonIdempotent,
        Mutant::UnsyncedAppend,
        Mutant::UnsyncedVote,
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
        }
    }

    /// The planted bug `name` names (as [`Mutant::name`] spells it), if any.
    pub fn from_name(name: &str) -> Option<Mutant> {
        Mutant::ALL.into_iter().find(|mutant| mutant.name() == name)
    }
}

/// Whether `mutant` is `planted`, the planted bug the shell passed in
/// (always false without the `mutants` feature, so the code behind the
/// check is compiled out).
#[inline]
pub fn is_planted(planted: Option<Mutant>, mutant: Mutant) -> bool {
    #[cfg(feature = "mutants")]
    {
        planted == Some(mutant)
    }
    #[cfg(not(feature = "mutants"))]
    {
        let _ = (planted, mutant);
        false
    }
}
