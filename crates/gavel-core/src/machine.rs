//! The state machine: all replicated state and the one `apply` function.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde::{Deserialize, Serialize};

use crate::audit::{Event, EventKind};
use crate::canonical_json::sha256_hex;
use crate::command::{Command, Envelope, Reply};
use crate::dedup::{DedupTable, RememberedReply};
use crate::error::{DomainError, ErrorCode};
use crate::limits::EVENTS_PAGE_MAX;
use crate::model::{Actor, Approval, ApprovalStatus, Capability, Execution, ReportOutcome};

/// Why a snapshot could not be restored.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// The bytes are not a snapshot of this state machine's format.
    #[error("snapshot is not decodable: {0}")]
    Decode(String),
}

/// Which attempt a lease ran, kept for every lease of a retained execution so a
/// late report can be recognised and recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct LeaseRecord {
    pub(crate) execution_id: String,
    pub(crate) attempt: u32,
    /// The failure accepted under this lease and whether it scheduled a retry,
    /// so a worker repeating that report after a later attempt was accepted
    /// still gets the same answer. A completed report is always the execution's
    /// last and is kept in `Execution::accepted_report`, so only failures (which
    /// are small) are kept here.
    pub(crate) accepted_failure: Option<(ReportOutcome, bool)>,
}

/// The whole replicated state. Every collection is ordered (`BTreeMap`,
/// `BTreeSet`, `VecDeque`), so iteration order never depends on hashing and the
/// serialized form, and therefore the state hash, is the same on every replica.
/// The one exception, the dedup table's index, is a hash map that is only
/// looked up, never iterated or serialized (see `DedupTable`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct State {
    /// Cluster clock: the largest `now_ms` any command carried.
    pub(crate) clock_ms: u64,
    /// Every capability version, by id and then version. Versions are immutable, so an
    /// execution's snapshot is a reference to one of them. Nested rather than keyed
    /// by (id, version) so that a lookup by `&str` needs no allocated key.
    pub(crate) capabilities: BTreeMap<String, BTreeMap<u64, Capability>>,
    /// Latest version per capability id.
    pub(crate) capability_latest: BTreeMap<String, u64>,
    pub(crate) approvals: BTreeMap<String, Approval>,
    /// Approvals ordered by (requested_at_ms, id) for listing.
    pub(crate) approvals_by_time: BTreeSet<(u64, String)>,
    pub(crate) executions: BTreeMap<String, Execution>,
    /// Ready executions per queue, by FIFO position.
    pub(crate) queues: BTreeMap<String, BTreeMap<u64, String>>,
    /// Executions waiting out a backoff, by (end, id).
    pub(crate) backoffs: BTreeSet<(u64, String)>,
    /// Current leases by (effective deadline, lease id); the effective deadline
    /// is the earlier of the attempt deadline and the heartbeat deadline.
    pub(crate) lease_deadlines: BTreeSet<(u64, u64)>,
    /// Every lease of a retained execution.
    pub(crate) leases: BTreeMap<u64, LeaseRecord>,
    /// Finalized executions by (finalized_at, id), for retention.
    pub(crate) finalized: BTreeSet<(u64, String)>,
    pub(crate) next_lease_id: u64,
    pub(crate) next_queue_position: u64,
    pub(crate) next_cursor: u64,
    pub(crate) events: VecDeque<Event>,
    /// Cursors of each retained execution's events.
    pub(crate) execution_events: BTreeMap<String, Vec<u64>>,
    pub(crate) dedup: DedupTable,
    /// Cluster time at which retention next runs.
    pub(crate) next_compaction_ms: u64,
}

/// How often retention runs, by cluster time. Compaction scans closed approvals,
/// so it runs on a cadence rather than on every tick.
pub(crate) const COMPACTION_INTERVAL_MS: u64 = 60_000;

impl State {
    /// An empty state.
    pub fn new() -> State {
        State { next_lease_id: 1, next_cursor: 1, ..State::default() }
    }

    /// Applies one command. Deterministic: the result depends only on the state
    /// and the envelope. Bad input yields `Reply::Error`; it never panics.
    pub fn apply(&mut self, envelope: &Envelope) -> Reply {
        self.clock_ms = self.clock_ms.max(envelope.now_ms);
        let Some(request_id) = envelope.request_id.as_deref().filter(|id| !id.is_empty()) else {
            return self.dispatch(&envelope.command);
        };
        if let Err(problem) = crate::validate::check_id("requestId", request_id) {
            return DomainError::invalid(problem).into();
        }
        let fingerprint = command_fingerprint(&envelope.command);
        let wrong_key = crate::mutants::active(crate::mutants::Mutant::DedupWrongKey);
        let key = if wrong_key {
            // Planted bug: a truncated key, and no fingerprint check below.
            crate::dedup::request_key(request_id.get(..8).unwrap_or(request_id))
        } else {
            crate::dedup::request_key(request_id)
        };
        self.dedup.forget_expired(self.clock_ms);
        if let Some(remembered) = self.dedup.recall(key) {
            if remembered.fingerprint != fingerprint && !wrong_key {
                return DomainError::new(
                    ErrorCode::RequestIdReused,
                    format!("request id \"{request_id}\" was already used for a different request"),
                )
                .into();
            }
            let reply = remembered.reply.clone();
            return self.recall_reply(&reply, &envelope.command);
        }
        let reply = self.dispatch(&envelope.command);
        self.dedup.remember(key, fingerprint, RememberedReply::from_reply(&reply), self.clock_ms);
        reply
    }

    fn dispatch(&mut self, command: &Command) -> Reply {
        let result = match command {
            Command::RegisterCapability(spec) => self.register_capability(spec).map(Reply::Capability),
            Command::CreateApproval(request) => self.create_approval(request),
            Command::DecideApproval { approval_id, status, approver, comment, caller_now_ms } => {
                self.decide_approval(approval_id, *status, approver, comment.as_deref(), *caller_now_ms)
            }
            Command::ConsumeApproval { approval_id, execution_id, caller_now_ms } => {
                self.consume_approval(approval_id, execution_id, *caller_now_ms)
            }
            Command::CancelApproval { approval_id, caller_now_ms } => self.cancel_approval(approval_id, *caller_now_ms),
            Command::Submit(submit) => self.submit(submit),
            Command::Resume { approval_id, execution_id, input_json } => {
                self.resume(approval_id, execution_id, input_json.as_deref())
            }
            Command::Poll { worker_id, queues, tasks_max } => self.poll(worker_id, queues, *tasks_max),
            Command::Heartbeat { lease_id, worker_id } => self.heartbeat(*lease_id, worker_id),
            Command::Report { lease_id, worker_id, outcome } => self.report(*lease_id, worker_id, outcome),
            Command::CancelExecution { execution_id, actor } => self.cancel_execution(execution_id, actor.as_ref()),
            Command::Tick { retention } => Ok(self.tick(*retention)),
        };
        result.unwrap_or_else(Reply::Error)
    }

    /// Rebuilds a remembered reply from current state.
    /// The reply `command` got when it was applied under `request_id`, rebuilt
    /// from current state, without applying anything; `None` when that
    /// request id is not remembered or was used for a different command.
    /// Lets a node answer a retried request that already took effect (a
    /// retried long-poll whose lease grant committed while its caller had
    /// given up, say) without proposing it again.
    pub fn replay(&self, request_id: &str, command: &Command) -> Option<Reply> {
        let remembered = self.dedup.recall(crate::dedup::request_key(request_id))?;
        if remembered.fingerprint != command_fingerprint(command) || remembered.expires_at_ms <= self.clock_ms {
            return None;
        }
        Some(self.recall_reply(&remembered.reply, command))
    }

    /// The still-current tasks that earlier grant attempts of one long-poll
    /// (request id `poll_request_id`, attempts derived by
    /// [`crate::ids::grant_request_id`]) were granted, if any were. A retry
    /// of a poll whose grant committed while its caller had given up gets
    /// those leases back instead of leaving them to expire unused.
    pub fn replayed_grants(&self, poll_request_id: &str, poll: &Command) -> Option<Vec<crate::command::Task>> {
        let mut tasks = Vec::new();
        for attempt in 0..crate::limits::REPLAYED_GRANTS_MAX {
            match self.replay(&crate::ids::grant_request_id(poll_request_id, attempt), poll) {
                Some(Reply::Tasks(granted)) => tasks.extend(granted),
                _ => break,
            }
        }
        (!tasks.is_empty()).then_some(tasks)
    }

    fn recall_reply(&self, remembered: &RememberedReply, command: &Command) -> Reply {
        remembered.rebuild(self, command)
    }

    /// Appends an audit event stamped with the cluster clock.
    pub(crate) fn emit(&mut self, kind: EventKind, actor: &Actor, subject: EventSubject<'_>) {
        let event = self.next_event(kind, actor, subject);
        self.push_event(event);
    }

    /// Builds the next event without appending it. Split from [`State::push_event`]
    /// so that callers can build it while borrowing the record it is about,
    /// instead of cloning the whole record to satisfy the borrow checker.
    pub(crate) fn next_event(&self, kind: EventKind, actor: &Actor, subject: EventSubject<'_>) -> Event {
        Event {
            cursor: self.next_cursor,
            kind,
            timestamp_ms: self.clock_ms,
            actor: actor.clone(),
            execution_id: subject.execution_id.map(str::to_string),
            capability_id: subject.capability_id.map(str::to_string),
            approval_id: subject.approval_id.map(str::to_string),
            correlation_id: subject.correlation_id.map(str::to_string),
            input_hash: subject.input_hash.map(str::to_string),
        }
    }

    /// Appends an event built by [`State::next_event`] and indexes it by execution.
    pub(crate) fn push_event(&mut self, event: Event) {
        assert_eq!(event.cursor, self.next_cursor, "events are appended in cursor order");
        self.next_cursor += 1;
        if let Some(execution_id) = &event.execution_id {
            // Look up before inserting: the id is only copied for an execution's first event.
            match self.execution_events.get_mut(execution_id) {
                Some(cursors) => cursors.push(event.cursor),
                None => {
                    self.execution_events.insert(execution_id.clone(), vec![event.cursor]);
                }
            }
        }
        self.events.push_back(event);
    }

    // ----- reads -----

    /// The cluster clock (largest command time seen).
    pub fn clock_ms(&self) -> u64 {
        self.clock_ms
    }

    /// An approval record.
    pub fn approval(&self, id: &str) -> Option<&Approval> {
        self.approvals.get(id)
    }

    /// Approvals ordered by (requested_at, id), filtered, starting after `after`.
    /// The status filter sees lazily computed expiry at `now_ms`.
    pub fn list_approvals(
        &self,
        filter: &ApprovalFilter,
        now_ms: u64,
        after: Option<&(u64, String)>,
        limit: usize,
    ) -> Vec<&Approval> {
        let range = match after {
            Some(after) => {
                self.approvals_by_time.range((std::ops::Bound::Excluded(after.clone()), std::ops::Bound::Unbounded))
            }
            None => self.approvals_by_time.range(..),
        };
        range
            .filter_map(|(_, id)| self.approvals.get(id))
            .filter(|approval| filter.status.is_none_or(|status| approval.status_at(now_ms) == status))
            .filter(|approval| filter.capability_id.as_deref().is_none_or(|id| approval.capability_id == id))
            .filter(|approval| filter.actor_id.as_deref().is_none_or(|id| approval.actor.id == id))
            .take(limit)
            .collect()
    }

    /// A capability's latest version, or a given one.
    pub fn capability(&self, id: &str, version: Option<u64>) -> Option<&Capability> {
        let version = version.or_else(|| self.capability_latest.get(id).copied())?;
        self.capabilities.get(id)?.get(&version)
    }

    /// The latest version of every capability, by id.
    pub fn capabilities(&self) -> Vec<&Capability> {
        self.capability_latest.iter().filter_map(|(id, version)| self.capabilities.get(id)?.get(version)).collect()
    }

    /// An execution record.
    pub fn execution(&self, id: &str) -> Option<&Execution> {
        self.executions.get(id)
    }

    /// Number of retained executions.
    pub fn execution_count(&self) -> usize {
        self.executions.len()
    }

    /// Events after `after_cursor`, oldest first, at most `limit` (capped at [`EVENTS_PAGE_MAX`]).
    pub fn events_after(&self, after_cursor: u64, limit: u32) -> Vec<&Event> {
        let limit = limit.clamp(1, EVENTS_PAGE_MAX) as usize;
        let Some(first) = self.events.front().map(|event| event.cursor) else { return Vec::new() };
        let skip = after_cursor.saturating_add(1).saturating_sub(first);
        let skip = usize::try_from(skip).unwrap_or(usize::MAX);
        self.events.iter().skip(skip).take(limit).collect()
    }

    /// How many execution ids the per-execution event index holds (bounded by retention).
    pub fn indexed_execution_count(&self) -> usize {
        self.execution_events.len()
    }

    /// One execution's events after `after_cursor`, oldest first.
    pub fn execution_events(&self, execution_id: &str, after_cursor: u64, limit: u32) -> Vec<&Event> {
        let limit = limit.clamp(1, EVENTS_PAGE_MAX) as usize;
        let Some(cursors) = self.execution_events.get(execution_id) else { return Vec::new() };
        cursors
            .iter()
            .filter(|cursor| **cursor > after_cursor)
            .filter_map(|cursor| self.event(*cursor))
            .take(limit)
            .collect()
    }

    /// The event at a cursor, if retained.
    pub fn event(&self, cursor: u64) -> Option<&Event> {
        let first = self.events.front()?.cursor;
        let index = usize::try_from(cursor.checked_sub(first)?).ok()?;
        self.events.get(index)
    }

    /// The cursor the next event will get.
    pub fn next_cursor(&self) -> u64 {
        self.next_cursor
    }

    /// True when a poll on these queues would lease something at `now_ms`.
    pub fn has_ready_work(&self, queues: &[String], now_ms: u64) -> bool {
        let now_ms = now_ms.max(self.clock_ms);
        let backoff_due = self.backoffs.iter().next().is_some_and(|(until, _)| *until <= now_ms);
        queues.iter().any(|queue| self.queues.get(queue).is_some_and(|ready| !ready.is_empty())) || backoff_due
    }

    /// The earliest cluster time at which a `Tick` has work: a lease deadline, a
    /// backoff end, or a retention run while there is something to compact.
    pub fn next_deadline_ms(&self) -> Option<u64> {
        let lease = self.lease_deadlines.iter().next().map(|(deadline, _)| *deadline);
        let backoff = self.backoffs.iter().next().map(|(until, _)| *until);
        let compaction = (!self.finalized.is_empty() || !self.events.is_empty()).then_some(self.next_compaction_ms);
        [lease, backoff, compaction].into_iter().flatten().min()
    }

    // ----- snapshots -----

    /// Serializes the whole state.
    pub fn snapshot(&self) -> Vec<u8> {
        bincode::serialize(self).expect("state serializes: every field is plain data")
    }

    /// Restores a state from [`State::snapshot`] bytes.
    pub fn restore(bytes: &[u8]) -> Result<State, SnapshotError> {
        bincode::deserialize(bytes).map_err(|error| SnapshotError::Decode(error.to_string()))
    }

    /// SHA-256 over the serialized state, lower-case hex: equal on replicas that
    /// applied the same commands.
    pub fn state_hash(&self) -> String {
        sha256_hex(&self.snapshot())
    }
}

/// Filters for [`State::list_approvals`]; they compose.
#[derive(Debug, Clone, Default)]
pub struct ApprovalFilter {
    /// Only this status (with lazy expiry).
    pub status: Option<ApprovalStatus>,
    /// Only this capability.
    pub capability_id: Option<String>,
    /// Only this requester.
    pub actor_id: Option<String>,
}

/// The ids an event is about.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct EventSubject<'a> {
    pub(crate) execution_id: Option<&'a str>,
    pub(crate) capability_id: Option<&'a str>,
    pub(crate) approval_id: Option<&'a str>,
    pub(crate) correlation_id: Option<&'a str>,
    pub(crate) input_hash: Option<&'a str>,
}

impl<'a> EventSubject<'a> {
    /// The subject of an execution's events.
    pub(crate) fn of_execution(execution: &'a Execution) -> Self {
        EventSubject {
            execution_id: Some(&execution.execution_id),
            capability_id: Some(&execution.capability_id),
            approval_id: execution.approval_id.as_deref(),
            correlation_id: execution.correlation_id.as_deref(),
            input_hash: Some(&execution.input_hash),
        }
    }

    /// The subject of an approval's events.
    pub(crate) fn of_approval(approval: &'a Approval) -> Self {
        EventSubject {
            execution_id: approval.execution_id.as_deref().or(approval.consumed_by_execution_id.as_deref()),
            capability_id: Some(&approval.capability_id),
            approval_id: Some(&approval.id),
            correlation_id: approval.correlation_id.as_deref(),
            input_hash: Some(&approval.input_hash),
        }
    }
}

/// A short digest of a command, to recognise a request id reused for a different command.
fn command_fingerprint(command: &Command) -> u64 {
    // Serialized straight into the hasher: the same digest as hashing
    // `bincode::serialize(command)`, without the intermediate buffer.
    let mut hasher = <sha2::Sha256 as sha2::Digest>::new();
    bincode::serialize_into(&mut hasher, command).expect("commands serialize: every field is plain data");
    let digest = sha2::Digest::finalize(hasher);
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first)
}
