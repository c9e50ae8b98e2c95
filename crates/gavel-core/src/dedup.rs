//! Request-id deduplication: a bounded, expiring table so that a client that
//! retries after an ambiguous failure gets its first reply back instead of a
//! second effect.
//!
//! Replies are remembered compactly, as the ids of the records they returned,
//! and rebuilt from current state on a repeat: the table stays small in memory
//! and in snapshots however large the records are. A repeat therefore sees the
//! record as it is now (a repeated decide returns success with the record,
//! even if it has since been consumed), which is what a retrying client needs.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use crate::command::{Command, Reply, Task};
use crate::error::{DomainError, ErrorCode};
use crate::limits::{DEDUP_ENTRIES_MAX, DEDUP_TTL_MS};
use crate::machine::State;
use crate::model::Lease;

/// The bounded table of remembered request ids.
///
/// Entries are keyed by [`RequestKey`], a 128-bit digest of the request id,
/// not by the id itself: with up to [`DEDUP_ENTRIES_MAX`] random ids (UUIDs),
/// comparing string keys meant a cache miss per comparison, and the table's
/// lookups were a third of the cost of a command. Two distinct request ids
/// share a key with probability about 2^-128 per pair, far below the odds of
/// two clients drawing the same UUID.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub(crate) struct DedupTable {
    entries: BTreeMap<RequestKey, Remembered>,
    /// Keys by expiry; expiry grows with the cluster clock, so this is sorted.
    order: VecDeque<(u64, RequestKey)>,
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

/// One remembered request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Remembered {
    pub(crate) fingerprint: u64,
    pub(crate) expires_at_ms: u64,
    pub(crate) reply: RememberedReply,
}

impl DedupTable {
    /// Drops entries whose time has passed.
    pub(crate) fn forget_expired(&mut self, now_ms: u64) {
        while let Some((expires_at_ms, _)) = self.order.front() {
            if *expires_at_ms > now_ms {
                break;
            }
            if let Some((_, key)) = self.order.pop_front() {
                self.entries.remove(&key);
            }
        }
    }

    /// The remembered reply for a request id's key.
    pub(crate) fn recall(&self, key: RequestKey) -> Option<&Remembered> {
        self.entries.get(&key)
    }

    /// Remembers a reply, forgetting the oldest entry when full.
    pub(crate) fn remember(&mut self, key: RequestKey, fingerprint: u64, reply: RememberedReply, now_ms: u64) {
        while self.entries.len() >= DEDUP_ENTRIES_MAX {
            match self.order.pop_front() {
                Some((_, oldest)) => {
                    self.entries.remove(&oldest);
                }
                None => break,
            }
        }
        let expires_at_ms = now_ms.saturating_add(DEDUP_TTL_MS);
        self.entries.insert(key, Remembered { fingerprint, expires_at_ms, reply });
        self.order.push_back((expires_at_ms, key));
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
        }
    }

    /// Rebuilds the full reply from current state. A record dropped by retention
    /// since the first reply yields `NOT_FOUND`.
    pub(crate) fn rebuild(&self, state: &State, command: &Command) -> Reply {
        let gone = |what: &str, id: &str| {
            Reply::Error(DomainError::new(ErrorCode::NotFound, format!("{what} {id} was not found")))
        };
        match self {
            RememberedReply::Error(error) => Reply::Error(error.clone()),
            RememberedReply::Capability { id, version } => match state.capability(id, Some(*version)) {
                Some(capability) => Reply::Capability(capability.clone()),
                None => gone("capability", id),
            },
            RememberedReply::Approval { id } | RememberedReply::ApprovalRequired { id } => match state.approval(id) {
                Some(approval) => {
                    let now_ms = caller_now(command).unwrap_or(state.clock_ms());
                    let status = approval.status_at(now_ms);
                    let approval = approval.clone();
                    if matches!(self, RememberedReply::ApprovalRequired { .. }) {
                        Reply::ApprovalRequired { approval, status }
                    } else {
                        Reply::Approval { approval, status }
                    }
                }
                None => gone("approval", id),
            },
            RememberedReply::Execution { id, created } => match state.execution(id) {
                Some(execution) => Reply::Execution { execution: execution.clone(), created: *created },
                None => gone("execution", id),
            },
            RememberedReply::Tasks(leases) => {
                Reply::Tasks(leases.iter().filter_map(|lease| state.task_for_lease(lease)).collect::<Vec<Task>>())
            }
            RememberedReply::Heartbeat { cancel_requested, deadline_ms } => {
                Reply::Heartbeat { cancel_requested: *cancel_requested, deadline_ms: *deadline_ms }
            }
            RememberedReply::Reported { execution_id, retry_scheduled } => match state.execution(execution_id) {
                Some(execution) => Reply::Reported { execution: execution.clone(), retry_scheduled: *retry_scheduled },
                None => gone("execution", execution_id),
            },
            RememberedReply::Ticked { leases_expired, backoffs_ended, records_compacted } => Reply::Ticked {
                leases_expired: *leases_expired,
                backoffs_ended: *backoffs_ended,
                records_compacted: *records_compacted,
            },
        }
    }
}

fn caller_now(command: &Command) -> Option<u64> {
    match command {
        Command::CreateApproval(request) => request.caller_now_ms,
        Command::DecideApproval { caller_now_ms, .. }
        | Command::ConsumeApproval { caller_now_ms, .. }
        | Command::CancelApproval { caller_now_ms, .. } => *caller_now_ms,
        _ => None,
    }
}
