//! Execution records (SPEC §4), a part of [`crate::State`]: the records, the
//! ready queues, the backoffs and the finalized index, kept consistent with
//! each record's lifecycle state. The flows that also touch leases, the
//! registry and the audit log (submit, poll, report, expiry, cancel) are the
//! orchestrator's (`machine/execution_commands.rs`).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::model::{AcceptedReport, Execution, ExecutionState, Lease, ResultEnvelope};

/// Every retained execution, and where each non-final one waits.
///
/// Invariants, for every record:
/// - `Queued`: exactly one entry `queue_position → id` in one ready queue;
/// - `Backoff`: exactly one entry `(backoff_until_ms, id)` in `backoffs`;
/// - `Leased`: a current `lease`, in no queue and no backoff;
/// - final: a `result`, no lease, and exactly one entry
///   `(finalized_at_ms, id)` in `finalized`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub(crate) struct Executions {
    records: BTreeMap<String, Execution>,
    /// Ready executions per queue, by FIFO position.
    queues: BTreeMap<String, BTreeMap<u64, String>>,
    /// Executions waiting out a backoff, by (end, id).
    backoffs: BTreeSet<(u64, String)>,
    /// Finalized executions by (finalized_at, id), for retention.
    finalized: BTreeSet<(u64, String)>,
    next_queue_position: u64,
}

impl Executions {
    /// An execution record.
    pub(crate) fn get(&self, id: &str) -> Option<&Execution> {
        self.records.get(id)
    }

    /// Every retained execution, by id.
    pub(crate) fn all(&self) -> impl Iterator<Item = &Execution> {
        self.records.values()
    }

    /// How many executions wait ready in each queue (queues never used are absent).
    pub(crate) fn ready_depths(&self) -> impl Iterator<Item = (&str, usize)> {
        self.queues.iter().map(|(queue, ready)| (queue.as_str(), ready.len()))
    }

    /// Number of retained executions.
    pub(crate) fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether an execution is retained.
    pub(crate) fn contains(&self, id: &str) -> bool {
        self.records.contains_key(id)
    }

    fn record_mut(&mut self, id: &str) -> &mut Execution {
        self.records.get_mut(id).expect("callers pass the id of a retained execution")
    }

    /// Stores a new execution (its id must be new: callers check first) and
    /// puts it at the back of `queue`.
    pub(crate) fn insert(&mut self, execution: Execution, queue: &str) -> &Execution {
        assert!(!self.records.contains_key(&execution.execution_id), "execution ids are checked before create");
        assert_eq!(execution.state, ExecutionState::Queued, "a new execution starts queued");
        let id = execution.execution_id.clone();
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

    /// Records the report accepted under a lease, for repeated reports.
    pub(crate) fn accept_report(&mut self, id: &str, report: AcceptedReport) -> &Execution {
        let execution = self.record_mut(id);
        execution.accepted_report = Some(report);
        execution
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

    /// Records the one final result. Asserts it is the first and that the
    /// execution waits nowhere any more.
    pub(crate) fn finalize(&mut self, id: &str, result: ResultEnvelope, now_ms: u64) -> &Execution {
        let execution = self.records.get_mut(id).expect("callers pass the id of a retained execution");
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
        self.finalized.insert((now_ms, id.to_string()));
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
        !self.finalized.is_empty()
    }

    /// Drops executions finalized at or before `horizon` (`None`: nothing is
    /// old enough yet) and returns them, oldest first, so the caller can drop
    /// what refers to them. Never drops a non-final execution.
    pub(crate) fn compact(&mut self, horizon: Option<u64>) -> Vec<Execution> {
        let mut dropped = Vec::new();
        let Some(horizon) = horizon else { return dropped };
        while let Some((finalized_at, _)) = self.finalized.first() {
            if *finalized_at > horizon {
                break;
            }
            let (_, id) = self.finalized.pop_first().expect("the first entry was just read");
            let execution = self.records.remove(&id).expect("finalized index points at retained executions");
            assert!(execution.state.is_final(), "compaction never drops a non-final execution");
            dropped.push(execution);
        }
        dropped
    }
}
