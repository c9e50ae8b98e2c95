//! Request-id deduplication: a bounded, expiring table so that a client that
//! retries after an ambiguous failure gets its first reply back instead of a
//! second effect.
//!
//! A part of [`crate::State`]. Replies are remembered compactly, as the ids of
//! the records they returned, and rebuilt from current state on a repeat (by
//! the orchestrator, `machine/recall.rs`): the table stays small in memory
//! and in snapshots however large the records are. A repeat therefore sees the
//! record as it is now (a repeated decide returns success with the record,
//! even if it has since been consumed), which is what a retrying client needs.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::access::Principal;
use crate::command::{Command, Reply};
use crate::error::DomainError;
use crate::limits::{DEDUP_ENTRIES_MAX, DEDUP_TTL_MS};
use crate::model::Lease;

/// The bounded table of remembered request ids.
///
/// Entries are keyed by [`RequestKey`], a 128-bit digest of the request id,
/// not by the id itself: two distinct request ids share a key with
/// probability about 2^-128 per pair, far below the odds of two clients
/// drawing the same UUID.
///
/// The entries live in a queue in the order they were remembered, which is
/// also expiry order (expiry grows with the cluster clock), and the queue is
/// the serialized form. Lookups go through `index`, a hash map from key to
/// position. It is the one unordered collection in the state, and that is
/// safe because it is never iterated and never serialized (a restore rebuilds
/// it from the queue), so its order cannot reach a reply, the state or a
/// snapshot. It replaced ordered maps because at high rates the table is full
/// and every command does three lookups of random keys (recall, insert, evict
/// the oldest); in a tree of 100,000 keys each was a chain of cache misses,
/// about a fifth of the cost of a command.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct DedupTable {
    /// Remembered requests, oldest first.
    entries: VecDeque<Remembered>,
    /// Position number of `entries[0]`; entry `n` is at `entries[n - first_position]`.
    first_position: u64,
    /// Key → position number of the entry. Derived from `entries`.
    index: HashMap<RequestKey, u64, BuildHasherDefault<KeyHasher>>,
}

/// The first 128 bits of SHA-256 over a request id: the dedup table's key.
pub(crate) type RequestKey = u128;

/// The dedup table's key for a request id.
pub(crate) fn request_key(request_id: &str) -> RequestKey {
    let digest = <sha2::Sha256 as sha2::Digest>::digest(request_id.as_bytes());
    let mut first = [0u8; 16];
    first.copy_from_slice(&digest[..16]);
    u128::from_be_bytes(first)
}

/// A short digest of a command and the principal that sent it, to recognise
/// a request id reused for a different command, or by another principal
/// (who must not be handed the first caller's reply: its leases, say).
/// Without a principal (`--insecure`) it is the digest of the command alone.
pub(crate) fn fingerprint(command: &Command, principal: Option<&Principal>) -> u64 {
    // Serialized straight into the hasher: the same digest as hashing
    // `bincode::serialize(command)`, without the intermediate buffer.
    let mut hasher = <sha2::Sha256 as sha2::Digest>::new();
    bincode::serialize_into(&mut hasher, command).expect("commands serialize: every field is plain data");
    if let Some(principal) = principal {
        bincode::serialize_into(&mut hasher, principal).expect("principals serialize: plain data");
    }
    let digest = sha2::Digest::finalize(hasher);
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first)
}

/// Hashes a [`RequestKey`]: the key is already a uniformly distributed digest,
/// so its low 64 bits are the hash.
#[derive(Debug, Default)]
pub(crate) struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*byte);
        }
    }

    fn write_u128(&mut self, value: u128) {
        self.0 = value as u64;
    }
}

/// One remembered request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Remembered {
    pub(crate) key: RequestKey,
    pub(crate) fingerprint: u64,
    pub(crate) expires_at_ms: u64,
    pub(crate) reply: RememberedReply,
}

impl Serialize for DedupTable {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        (&self.entries, self.first_position).serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for DedupTable {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let (entries, first_position): (VecDeque<Remembered>, u64) = Deserialize::deserialize(deserializer)?;
        let index = entries.iter().zip(first_position..).map(|(entry, position)| (entry.key, position)).collect();
        Ok(DedupTable { entries, first_position, index })
    }
}

impl DedupTable {
    /// Drops entries whose time has passed.
    pub(crate) fn forget_expired(&mut self, now_ms: u64) {
        while self.entries.front().is_some_and(|oldest| oldest.expires_at_ms <= now_ms) {
            self.forget_oldest();
        }
    }

    fn forget_oldest(&mut self) {
        if let Some(oldest) = self.entries.pop_front() {
            self.index.remove(&oldest.key);
            self.first_position += 1;
        }
    }

    /// The remembered reply for a request id's key.
    pub(crate) fn recall(&self, key: RequestKey) -> Option<&Remembered> {
        let position = self.index.get(&key)?.checked_sub(self.first_position)?;
        self.entries.get(usize::try_from(position).ok()?)
    }

    /// Remembers a reply, forgetting the oldest entry when full.
    pub(crate) fn remember(&mut self, key: RequestKey, fingerprint: u64, reply: RememberedReply, now_ms: u64) {
        while self.entries.len() >= DEDUP_ENTRIES_MAX {
            self.forget_oldest();
        }
        let expires_at_ms = now_ms.saturating_add(DEDUP_TTL_MS);
        let position = self.first_position + self.entries.len() as u64;
        self.entries.push_back(Remembered { key, fingerprint, expires_at_ms, reply });
        self.index.insert(key, position);
    }
}

/// A reply reduced to the ids it returned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum RememberedReply {
    Error(DomainError),
    Capability { id: String, version: u64 },
    Approval { id: String },
    ApprovalRequired { id: String },
    Execution { id: String, created: bool },
    Tasks(Vec<Lease>),
    Heartbeat { cancel_requested: bool, deadline_ms: u64 },
    Reported { execution_id: String, retry_scheduled: bool },
    Ticked { leases_expired: u32, backoffs_ended: u32, records_compacted: u32 },
    Grants { principal: Principal },
    Quota { principal: Principal },
    Event { cursor: u64 },
    Cosigned { size: u64, published: bool },
    Policy { policy: crate::policies::Policy, voided: u32 },
}

impl RememberedReply {
    /// Reduces a reply to what must be remembered.
    pub(crate) fn from_reply(reply: &Reply) -> RememberedReply {
        match reply {
            Reply::Error(error) => RememberedReply::Error(error.clone()),
            Reply::Capability(capability) => {
                RememberedReply::Capability { id: capability.id.clone(), version: capability.version }
            }
            Reply::Approval { approval, .. } => RememberedReply::Approval { id: approval.id.clone() },
            Reply::ApprovalRequired { approval, .. } => RememberedReply::ApprovalRequired { id: approval.id.clone() },
            Reply::Execution { execution, created } => {
                RememberedReply::Execution { id: execution.execution_id.clone(), created: *created }
            }
            Reply::Tasks(tasks) => RememberedReply::Tasks(tasks.iter().map(|task| task.lease.clone()).collect()),
            Reply::Heartbeat { cancel_requested, deadline_ms } => {
                RememberedReply::Heartbeat { cancel_requested: *cancel_requested, deadline_ms: *deadline_ms }
            }
            Reply::Reported { execution, retry_scheduled } => RememberedReply::Reported {
                execution_id: execution.execution_id.clone(),
                retry_scheduled: *retry_scheduled,
            },
            Reply::Ticked { leases_expired, backoffs_ended, records_compacted } => RememberedReply::Ticked {
                leases_expired: *leases_expired,
                backoffs_ended: *backoffs_ended,
                records_compacted: *records_compacted,
            },
            Reply::Grants { principal, .. } => RememberedReply::Grants { principal: principal.clone() },
            Reply::Quota(view) => RememberedReply::Quota { principal: view.principal.clone() },
            Reply::Event(event) => RememberedReply::Event { cursor: event.cursor },
            Reply::Cosigned { size, published } => RememberedReply::Cosigned { size: *size, published: *published },
            Reply::Policy { policy, voided } => RememberedReply::Policy { policy: policy.clone(), voided: *voided },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ticked(n: u32) -> RememberedReply {
        RememberedReply::Ticked { leases_expired: n, backoffs_ended: 0, records_compacted: 0 }
    }

    fn recalled(table: &DedupTable, request_id: &str) -> Option<RememberedReply> {
        table.recall(request_key(request_id)).map(|remembered| remembered.reply.clone())
    }

    #[test]
    fn a_full_table_forgets_its_oldest_entry_first() {
        let mut table = DedupTable::default();
        let ids: Vec<String> = (0..=DEDUP_ENTRIES_MAX).map(|n| format!("request-{n}")).collect();
        for (n, id) in ids.iter().enumerate() {
            table.remember(request_key(id), 7, ticked(n as u32), 1_000);
        }
        assert_eq!(table.entries.len(), DEDUP_ENTRIES_MAX);
        assert_eq!(table.index.len(), DEDUP_ENTRIES_MAX);
        assert_eq!(recalled(&table, &ids[0]), None, "the oldest entry is forgotten");
        assert_eq!(recalled(&table, &ids[1]), Some(ticked(1)));
        assert_eq!(recalled(&table, &ids[DEDUP_ENTRIES_MAX]), Some(ticked(DEDUP_ENTRIES_MAX as u32)));
    }

    #[test]
    fn expired_entries_are_forgotten_and_unexpired_ones_kept() {
        let mut table = DedupTable::default();
        table.remember(request_key("early"), 1, ticked(1), 1_000);
        table.remember(request_key("late"), 2, ticked(2), 2_000);
        table.forget_expired(1_000 + DEDUP_TTL_MS);
        assert_eq!(recalled(&table, "early"), None);
        assert_eq!(recalled(&table, "late"), Some(ticked(2)));
        table.remember(request_key("early"), 3, ticked(3), 2_500);
        assert_eq!(recalled(&table, "early"), Some(ticked(3)), "an expired id can be used again");
    }

    #[test]
    fn a_restored_table_recalls_the_same_entries() {
        let mut table = DedupTable::default();
        for n in 0..10 {
            table.remember(request_key(&format!("request-{n}")), n, ticked(n as u32), 1_000 + n);
        }
        table.forget_expired(1_003 + DEDUP_TTL_MS);
        let bytes = bincode::serialize(&table).expect("the table serializes");
        let restored: DedupTable = bincode::deserialize(&bytes).expect("the table deserializes");
        assert_eq!(restored, table);
        assert_eq!(recalled(&restored, "request-3"), None);
        assert_eq!(recalled(&restored, "request-4"), Some(ticked(4)));
        assert_eq!(bincode::serialize(&restored).expect("the table serializes"), bytes);
    }
}
