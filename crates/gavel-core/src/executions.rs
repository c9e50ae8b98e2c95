//! Execution records (SPEC §4), a part of [`crate::State`]: the records, the
//! ready queues, the backoffs and the finalized index, kept consistent with
//! each record's lifecycle state. The flows that also touch leases, the
//! registry and the audit log (submit, poll, report, expiry, cancel) are the
//! orchestrator's (`machine/execution_commands.rs`).
//!
//! Non-final executions are hot (in memory); a finalized one moves to the
//! cold records ([`crate::cold`]) with its entry in the finalized index, and
//! is read back from there. Every retained execution, hot or finalized, has
//! one entry in the cold listing index by (submitted_at, id), written at
//! submission and dropped by retention with the record: `ListExecutions`
//! pages through it (issue #40) without a hot index that would grow with
//! the retained history.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::cold::{ColdRecords, ColdTable};
use crate::error::{DomainError, ErrorCode};
use crate::listing::{key_parts, time_key, ListOrder, Page, AFTER_EVERY_TIME_KEY};
use crate::model::{AcceptedReport, Execution, ExecutionState, Lease, ResultEnvelope};

/// `NOT_FOUND` for an execution id.
pub(crate) fn not_found(id: &str) -> DomainError {
    DomainError::new(ErrorCode::NotFound, format!("execution {id} was not found"))
}

/// Every retained execution, and where each non-final one waits.
///
/// Invariants, for every record:
/// - `Queued`: exactly one entry `queue_position → id` in one ready queue;
/// - `Backoff`: exactly one entry `(backoff_until_ms, id)` in `backoffs`;
/// - `Leased`: a current `lease`, in no queue and no backoff;
/// - non-final: in `records` (hot), not in `finalized_records`;
/// - final: a `result`, no lease, in `finalized_records` (cold) and not in
///   `records`, exactly one entry `(finalized_at_ms, id)` in
///   `finalized_index`, and counted once in `finalized_counts`;
/// - retained, final or not: exactly one entry
///   [`time_key`]`(submitted_at_ms, id)` in `by_submission`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Executions {
    records: BTreeMap<String, Execution>,
    /// Ready executions per queue, by FIFO position.
    queues: BTreeMap<String, BTreeMap<u64, String>>,
    /// Executions waiting out a backoff, by (end, id).
    backoffs: BTreeSet<(u64, String)>,
    next_queue_position: u64,
    /// Finalized executions by id (cold).
    finalized_records: ColdRecords,
    /// Finalized executions by (finalized_at, id), for retention (cold; the
    /// key is [`finalized_key`], the value empty).
    finalized_index: ColdRecords,
    /// How many retained finalized executions are in each final state.
    finalized_counts: BTreeMap<ExecutionState, u64>,
    /// Every retained execution by [`time_key`] of (submitted_at, id), for
    /// listing (cold; the value is empty).
    by_submission: ColdRecords,
}

impl Default for Executions {
    fn default() -> Self {
        Executions {
            records: BTreeMap::new(),
            queues: BTreeMap::new(),
            backoffs: BTreeSet::new(),
            next_queue_position: 0,
            finalized_records: ColdRecords::new(ColdTable::Executions),
            finalized_index: ColdRecords::new(ColdTable::Finalized),
            finalized_counts: BTreeMap::new(),
            by_submission: ColdRecords::new(ColdTable::ExecutionsBySubmission),
        }
    }
}

/// Filters for [`crate::State::list_executions`]; they compose.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExecutionFilter {
    /// Only executions in this state.
    pub state: Option<ExecutionState>,
    /// Only executions of this capability.
    pub capability_id: Option<String>,
    /// Only executions requested by this principal (written `kind:id`) or
    /// by this actor id (the one name a node started with `--insecure`
    /// records).
    pub requester: Option<String>,
}

impl ExecutionFilter {
    fn admits(&self, execution: &Execution) -> bool {
        self.state.is_none_or(|state| execution.state == state)
            && self.capability_id.as_deref().is_none_or(|id| execution.capability_id == id)
            && self.requester.as_deref().is_none_or(|requester| {
                execution.actor.id == requester
                    || execution.requester_principal.as_ref().is_some_and(|principal| {
                        requester
                            .split_once(':')
                            .is_some_and(|(kind, id)| principal.kind.as_str() == kind && principal.id == id)
                    })
            })
    }
}

/// The finalized index key: finalized-at big-endian (so keys sort by time), then the id.
fn finalized_key(finalized_at_ms: u64, id: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(8 + id.len());
    key.extend_from_slice(&finalized_at_ms.to_be_bytes());
    key.extend_from_slice(id.as_bytes());
    key
}

impl Executions {
    /// An execution record: a hot one borrowed, a finalized one read back.
    pub(crate) fn get(&self, id: &str) -> Option<Cow<'_, Execution>> {
        match self.records.get(id) {
            Some(execution) => Some(Cow::Borrowed(execution)),
            None => self.finalized(id).map(Cow::Owned),
        }
    }

    /// A finalized execution, read back from the cold records.
    fn finalized(&self, id: &str) -> Option<Execution> {
        let execution: Execution = self.finalized_records.get(id.as_bytes())?;
        Some(Execution { idempotency_key: crate::ids::idempotency_key(id), execution_id: id.to_string(), ..execution })
    }

    /// Writes a finalized execution to the cold records, without its id
    /// (the key) and its idempotency key (derived from the id, see
    /// [`crate::ids::idempotency_key`]): [`Executions::finalized`] rebuilds both.
    fn put_finalized(&mut self, execution: &mut Execution) {
        let id = std::mem::take(&mut execution.execution_id);
        let idempotency_key = std::mem::take(&mut execution.idempotency_key);
        self.finalized_records.put(id.as_bytes().to_vec(), &*execution);
        execution.execution_id = id;
        execution.idempotency_key = idempotency_key;
    }

    /// Every non-final execution, by id.
    pub(crate) fn hot(&self) -> impl Iterator<Item = &Execution> {
        self.records.values()
    }

    /// How many retained finalized executions are in each final state.
    pub(crate) fn finalized_counts(&self) -> impl Iterator<Item = (ExecutionState, u64)> + '_ {
        self.finalized_counts.iter().map(|(state, count)| (*state, *count))
    }

    /// The cold record sets of this part, for flushing and export.
    pub(crate) fn cold_mut(&mut self) -> [&mut ColdRecords; 3] {
        [&mut self.finalized_records, &mut self.finalized_index, &mut self.by_submission]
    }

    /// The cold record sets of this part, for export.
    pub(crate) fn cold(&self) -> [&ColdRecords; 3] {
        [&self.finalized_records, &self.finalized_index, &self.by_submission]
    }

    /// How many executions wait ready in each queue (queues never used are absent).
    pub(crate) fn ready_depths(&self) -> impl Iterator<Item = (&str, usize)> {
        self.queues.iter().map(|(queue, ready)| (queue.as_str(), ready.len()))
    }

    /// How many executions wait ready in `queue`.
    pub(crate) fn ready_depth(&self, queue: &str) -> usize {
        self.queues.get(queue).map_or(0, BTreeMap::len)
    }

    /// Number of retained executions.
    pub(crate) fn len(&self) -> usize {
        let finalized: u64 = self.finalized_counts.values().sum();
        self.records.len() + usize::try_from(finalized).expect("retained executions fit in memory's index")
    }

    /// Whether an execution is retained.
    pub(crate) fn contains(&self, id: &str) -> bool {
        self.records.contains_key(id) || self.finalized_records.contains(id.as_bytes())
    }

    fn record_mut(&mut self, id: &str) -> &mut Execution {
        self.records.get_mut(id).expect("callers pass the id of a retained execution")
    }

    /// Stores a new execution (its id must be new: callers check first) and
    /// puts it at the back of `queue`.
    pub(crate) fn insert(&mut self, execution: Execution, queue: &str) -> &Execution {
        assert!(!self.contains(&execution.execution_id), "execution ids are checked before create");
        assert_eq!(execution.state, ExecutionState::Queued, "a new execution starts queued");
        let id = execution.execution_id.clone();
        self.by_submission.put(time_key(execution.submitted_at_ms, &id), &());
        self.records.insert(id.clone(), execution);
        self.enqueue(&id, queue);
        &self.records[&id]
    }

    /// Puts an execution at the back of `queue` (its capability's).
    pub(crate) fn enqueue(&mut self, id: &str, queue: &str) {
        let position = self.next_queue_position;
        self.next_queue_position += 1;
        let execution = self.record_mut(id);
        execution.state = ExecutionState::Queued;
        execution.backoff_until_ms = None;
        execution.queue_position = position;
        // Look up before inserting: the queue name is only copied for a queue's first entry.
        match self.queues.get_mut(queue) {
            Some(ready) => {
                ready.insert(position, id.to_string());
            }
            None => {
                self.queues.insert(queue.to_string(), BTreeMap::from([(position, id.to_string())]));
            }
        }
    }

    /// Takes the oldest ready execution of `queue`.
    pub(crate) fn pop_ready(&mut self, queue: &str) -> Option<String> {
        let ready = self.queues.get_mut(queue)?;
        let (_, id) = ready.pop_first()?;
        if ready.is_empty() {
            self.queues.remove(queue);
        }
        Some(id)
    }

    /// Parks an execution until `until_ms` before its next attempt.
    pub(crate) fn start_backoff(&mut self, id: &str, until_ms: u64) {
        let execution = self.record_mut(id);
        execution.state = ExecutionState::Backoff;
        execution.backoff_until_ms = Some(until_ms);
        self.backoffs.insert((until_ms, id.to_string()));
    }

    /// Takes the execution whose backoff ends first, if it has ended by `now_ms`.
    /// The caller enqueues it.
    pub(crate) fn pop_due_backoff(&mut self, now_ms: u64) -> Option<String> {
        let (until_ms, _) = self.backoffs.first()?;
        if *until_ms > now_ms {
            return None;
        }
        self.backoffs.pop_first().map(|(_, id)| id)
    }

    /// Starts the next attempt of a queued execution (just taken from its
    /// queue) under `lease`.
    pub(crate) fn start_attempt(&mut self, lease: Lease) -> &Execution {
        let execution = self.record_mut(&lease.execution_id);
        assert_eq!(execution.state, ExecutionState::Queued, "only queued executions sit in a queue");
        assert_eq!(execution.attempts + 1, lease.attempt, "a lease runs the next attempt");
        execution.attempts = lease.attempt;
        execution.state = ExecutionState::Leased;
        execution.lease_ids.push(lease.lease_id);
        execution.lease = Some(lease);
        execution
    }

    /// Records a heartbeat on the execution's current lease.
    pub(crate) fn heartbeat(&mut self, id: &str, now_ms: u64) -> &Execution {
        let execution = self.record_mut(id);
        execution.lease.as_mut().expect("callers checked the lease is current").heartbeat_at_ms = now_ms;
        execution
    }

    /// Ends the current lease (reported or expired); the caller decides what
    /// comes next: a retry, a backoff or the final result.
    pub(crate) fn end_lease(&mut self, id: &str) -> Lease {
        self.record_mut(id).lease.take().expect("callers checked the lease is current")
    }

    /// Records the report accepted under a lease, for repeated reports. The
    /// report that finalized an execution is recorded after it moved to the
    /// cold records, so those are rewritten.
    pub(crate) fn accept_report(&mut self, id: &str, report: AcceptedReport) -> Cow<'_, Execution> {
        if self.records.contains_key(id) {
            let execution = self.record_mut(id);
            execution.accepted_report = Some(report);
            return Cow::Borrowed(execution);
        }
        let mut execution = self.finalized(id).expect("callers pass the id of a retained execution");
        execution.accepted_report = Some(report);
        self.put_finalized(&mut execution);
        Cow::Owned(execution)
    }

    /// Withdraws a non-final execution for a caller cancel: out of its queue
    /// (`queue` is its capability's), its backoff or its lease. Returns the
    /// id of the lease revoked, if it was leased; that lease's holder hears
    /// `cancel_requested` on its next heartbeat.
    pub(crate) fn withdraw(&mut self, id: &str, queue: &str) -> Option<u64> {
        let execution = self.records.get_mut(id).expect("callers pass the id of a retained execution");
        execution.cancel_requested = true;
        match execution.state {
            ExecutionState::Leased => {
                let lease = execution.lease.take().expect("a leased execution has a lease");
                execution.revoked_lease_id = Some(lease.lease_id);
                Some(lease.lease_id)
            }
            ExecutionState::Queued => {
                let position = execution.queue_position;
                if let Some(ready) = self.queues.get_mut(queue) {
                    ready.remove(&position);
                    if ready.is_empty() {
                        self.queues.remove(queue);
                    }
                }
                None
            }
            ExecutionState::Backoff => {
                let until = execution.backoff_until_ms.expect("a backoff has an end");
                self.backoffs.remove(&(until, id.to_string()));
                None
            }
            ExecutionState::Completed | ExecutionState::Failed | ExecutionState::Cancelled => {
                unreachable!("callers refuse to withdraw a final execution")
            }
        }
    }

    /// Records the one final result and moves the execution to the cold
    /// records. Asserts it is the first and that the execution waits nowhere
    /// any more.
    pub(crate) fn finalize(&mut self, id: &str, result: ResultEnvelope, now_ms: u64) -> Execution {
        let mut execution = self.records.remove(id).expect("callers pass the id of a non-final execution");
        assert!(execution.result.is_none() && !execution.state.is_final(), "an execution is finalized at most once");
        assert!(execution.lease.is_none(), "the lease is revoked before finalizing");
        execution.state = match &result {
            ResultEnvelope::Completed { .. } => ExecutionState::Completed,
            ResultEnvelope::Failed { .. } => ExecutionState::Failed,
            ResultEnvelope::Cancelled { .. } => ExecutionState::Cancelled,
        };
        execution.finalized_at_ms = Some(now_ms);
        execution.backoff_until_ms = None;
        execution.result = Some(result);
        self.put_finalized(&mut execution);
        self.finalized_index.put(finalized_key(now_ms, id), &());
        *self.finalized_counts.entry(execution.state).or_default() += 1;
        execution
    }

    /// True when a poll on these queues would lease something at `now_ms`
    /// (a ready execution, or a backoff that has ended).
    pub(crate) fn has_ready_work(&self, queues: &[String], now_ms: u64) -> bool {
        let backoff_due = self.backoffs.first().is_some_and(|(until, _)| *until <= now_ms);
        backoff_due || queues.iter().any(|queue| self.queues.get(queue).is_some_and(|ready| !ready.is_empty()))
    }

    /// When the first backoff ends.
    pub(crate) fn next_backoff_end_ms(&self) -> Option<u64> {
        self.backoffs.first().map(|(until, _)| *until)
    }

    /// True when some finalized execution waits for retention.
    pub(crate) fn has_finalized(&self) -> bool {
        self.finalized_counts.values().any(|count| *count > 0)
    }

    /// One page of retained executions in (submitted_at, id) order (newest
    /// first: the reverse), starting past `after`: those the filter and
    /// `visible` (the caller's view, [`crate::State::may_read_execution`])
    /// admit, at most `limit` of them, looking at about `scanned_max` index
    /// entries. A page that stops at either bound while entries are left
    /// names where the next one continues: after its last record when it is
    /// full; when the scan bound stopped it, past the whole millisecond it
    /// reached (its time, with no id: the one it stopped at may be outside
    /// the caller's view, and a token names none of those), so it finishes
    /// that millisecond first.
    pub(crate) fn list(
        &self,
        filter: &ExecutionFilter,
        visible: impl Fn(&Execution) -> bool,
        after: Option<&(u64, String)>,
        limit: usize,
        order: ListOrder,
        scanned_max: usize,
    ) -> Page<Cow<'_, Execution>> {
        let newest_first = order == ListOrder::NewestFirst;
        // Going forward the cursor is the first key to look at; going back,
        // the key every one looked at is before.
        let past = |key: &[u8]| {
            let mut cursor = key.to_vec();
            if !newest_first {
                cursor.push(0);
            }
            cursor
        };
        let mut cursor = match after {
            Some((time, id)) => past(&time_key(*time, id)),
            None if newest_first => AFTER_EVERY_TIME_KEY.to_vec(),
            None => Vec::new(),
        };
        let next_key = |cursor: &[u8]| {
            let found =
                if newest_first { self.by_submission.seek_before(cursor) } else { self.by_submission.seek(cursor) };
            found.map(|(key, _)| key)
        };
        let mut records = Vec::new();
        let mut scanned = 0;
        let mut last = None;
        while let Some(key) = next_key(&cursor) {
            let (time, id) = key_parts(&key);
            if records.len() >= limit {
                return Page { records, next: last };
            }
            match &last {
                Some((last_time, _)) if scanned >= scanned_max && *last_time != time => {
                    // Newest first, before every key of `last_time`; oldest
                    // first, after every one (ids are never empty).
                    let past = if newest_first { *last_time } else { last_time + 1 };
                    return Page { records, next: Some((past, String::new())) };
                }
                _ => {}
            }
            scanned += 1;
            let execution = self.get(id).expect("the listing index points at retained executions");
            if filter.admits(&execution) && visible(&execution) {
                records.push(execution);
            }
            last = Some((time, id.to_string()));
            cursor = past(&key);
        }
        Page { records, next: None }
    }

    /// Drops executions finalized at or before `horizon` (`None`: nothing is
    /// old enough yet) and returns them, oldest first, so the caller can drop
    /// what refers to them. Never drops a non-final execution.
    pub(crate) fn compact(&mut self, horizon: Option<u64>) -> Vec<Execution> {
        let mut dropped = Vec::new();
        let Some(horizon) = horizon else { return dropped };
        // Deleted keys are behind the cursor, so each seek skips none of them.
        let mut cursor = Vec::new();
        while let Some((key, _)) = self.finalized_index.seek(&cursor) {
            let (time, id) = key.split_at(8);
            let finalized_at = u64::from_be_bytes(time.try_into().expect("the key starts with 8 bytes of time"));
            if finalized_at > horizon {
                break;
            }
            let id_text = std::str::from_utf8(id).expect("execution ids are text");
            let execution = self.finalized(id_text).expect("finalized index points at retained executions");
            assert!(execution.state.is_final(), "compaction never drops a non-final execution");
            self.finalized_records.delete(id);
            self.finalized_index.delete(&key);
            self.by_submission.delete(&time_key(execution.submitted_at_ms, id_text));
            let count = self.finalized_counts.get_mut(&execution.state).expect("finalized executions are counted");
            *count -= 1;
            if *count == 0 {
                self.finalized_counts.remove(&execution.state);
            }
            dropped.push(execution);
            cursor = key;
            cursor.push(0);
        }
        dropped
    }
}
