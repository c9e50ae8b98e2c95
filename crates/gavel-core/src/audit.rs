//! Audit events (SPEC §5): written by the same command as the transition they
//! record, ordered by a monotonic cursor, and never carrying raw inputs or outputs.
//! `AuditLog`, a part of [`crate::State`], holds the retained events and
//! their per-execution index.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use crate::access::{GrantName, Principal};
use crate::limits::EVENTS_PAGE_MAX;
use crate::model::{Actor, Approval, CancelCode, ExecutedBeforeFailure, Execution, ResultEnvelope};

/// One audit event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// Position in the trail; strictly increasing, never reused.
    pub cursor: u64,
    /// What happened, with its type-specific fields.
    pub kind: EventKind,
    /// The state machine's clock when it happened.
    pub timestamp_ms: u64,
    /// Who caused it (the system actor for expiry and retries).
    pub actor: Actor,
    /// Execution concerned.
    pub execution_id: Option<String>,
    /// Capability concerned.
    pub capability_id: Option<String>,
    /// Approval concerned.
    pub approval_id: Option<String>,
    /// Caller's correlation id.
    pub correlation_id: Option<String>,
    /// Hash of the input concerned.
    pub input_hash: Option<String>,
    /// The authenticated principal whose command caused the event (`None`
    /// on a node started with `--insecure`, and for the cluster's own ticks).
    /// It differs from `actor` when a grant let the principal name another
    /// actor (`act-for`, `delegate-decide`).
    pub principal: Option<Principal>,
}

/// Event types and their fields.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventKind {
    /// A capability version was registered.
    CapabilityRegistered {
        /// The new version.
        version: u64,
    },
    /// An execution was submitted.
    Requested,
    /// An approval was requested.
    ApprovalRequested,
    /// An approval was approved.
    Approved,
    /// An approval was rejected.
    Rejected,
    /// An approval was withdrawn.
    ApprovalCancelled,
    /// An approval was spent.
    ApprovalConsumed,
    /// An attempt started under a lease.
    Started {
        /// Attempt number.
        attempt: u32,
        /// Fencing token.
        lease_id: u64,
        /// Worker.
        worker_id: String,
    },
    /// A failed attempt will be retried.
    Retried {
        /// The attempt that will run next.
        attempt: u32,
        /// Why the previous attempt failed.
        previous_error_code: String,
        /// How long the backoff is.
        backoff_ms: u64,
    },
    /// A lease was revoked by timeout or missed heartbeats.
    LeaseExpired {
        /// The lease.
        lease_id: u64,
        /// Its attempt.
        attempt: u32,
        /// `TIMEOUT` or `WORKER_LOST`.
        code: String,
    },
    /// Final: completed.
    Completed {
        /// From submission to finalization.
        duration_ms: u64,
        /// Attempts made.
        attempts: u32,
    },
    /// Final: failed.
    Failed {
        /// Error code.
        code: String,
        /// Whether the error was retryable.
        retryable: bool,
        /// Attempts made.
        attempts: u32,
        /// Whether the effect may have happened.
        executed_before_failure: Option<ExecutedBeforeFailure>,
    },
    /// Final: cancelled.
    Cancelled {
        /// Timeout or caller cancel.
        code: CancelCode,
        /// From submission to finalization.
        duration_ms: u64,
    },
    /// A report under a lease that is not current was refused.
    LateReportRejected {
        /// The stale lease.
        lease_id: u64,
        /// Its attempt.
        attempt: u32,
    },
    /// A grant was bound to a principal (or replaced).
    AccessGranted {
        /// Who received it.
        principal: Principal,
        /// What was granted.
        grant: GrantName,
    },
    /// A grant was removed from a principal.
    AccessRevoked {
        /// Whose grant.
        principal: Principal,
        /// Which grant.
        grant: GrantName,
    },
    /// An application's own event, appended with `RecordEvent`: its type,
    /// payload and attributes are the application's; the event's principal
    /// says who recorded it.
    Recorded {
        /// The type the application chose, e.g. `policy.denied`; never one of
        /// [`GAVEL_EVENT_TYPES`].
        event_type: String,
        /// Canonical JSON payload, if any.
        payload_json: Option<String>,
        /// The application's attributes of the event.
        attributes: BTreeMap<String, String>,
    },
}

/// The type name of every event Gavel writes itself: an application may not
/// record an event of one of these types, so a reader can trust them.
pub const GAVEL_EVENT_TYPES: [&str; 16] = [
    "capability.registered",
    "capability.requested",
    "capability.approval_requested",
    "capability.approved",
    "capability.rejected",
    "approval.cancelled",
    "approval.consumed",
    "capability.started",
    "capability.retried",
    "lease.expired",
    "capability.completed",
    "capability.failed",
    "capability.cancelled",
    "lease.late_report_rejected",
    "access.granted",
    "access.revoked",
];

/// What [`EventKind::type_name`] names an application event by; its own
/// type is [`EventKind::event_type`].
pub const APPLICATION_EVENT_TYPE_NAME: &str = "application.recorded";

impl EventKind {
    /// The type a reader sees (`Event.type` on the wire): [`EventKind::type_name`]
    /// for Gavel's events, the application's chosen type for a recorded one.
    pub fn event_type(&self) -> &str {
        match self {
            EventKind::Recorded { event_type, .. } => event_type,
            other => other.type_name(),
        }
    }

    /// The dotted type name of SPEC §5 (`capability.started`, ...); one of
    /// [`GAVEL_EVENT_TYPES`], or [`APPLICATION_EVENT_TYPE_NAME`] for an
    /// application's event.
    pub fn type_name(&self) -> &'static str {
        match self {
            EventKind::CapabilityRegistered { .. } => "capability.registered",
            EventKind::Requested => "capability.requested",
            EventKind::ApprovalRequested => "capability.approval_requested",
            EventKind::Approved => "capability.approved",
            EventKind::Rejected => "capability.rejected",
            EventKind::ApprovalCancelled => "approval.cancelled",
            EventKind::ApprovalConsumed => "approval.consumed",
            EventKind::Started { .. } => "capability.started",
            EventKind::Retried { .. } => "capability.retried",
            EventKind::LeaseExpired { .. } => "lease.expired",
            EventKind::Completed { .. } => "capability.completed",
            EventKind::Failed { .. } => "capability.failed",
            EventKind::Cancelled { .. } => "capability.cancelled",
            EventKind::LateReportRejected { .. } => "lease.late_report_rejected",
            EventKind::AccessGranted { .. } => "access.granted",
            EventKind::AccessRevoked { .. } => "access.revoked",
            EventKind::Recorded { .. } => APPLICATION_EVENT_TYPE_NAME,
        }
    }
}

impl EventKind {
    /// The final event recording `result`.
    pub(crate) fn finalized(result: &ResultEnvelope) -> EventKind {
        match result {
            ResultEnvelope::Completed { attempts, duration_ms, .. } => {
                EventKind::Completed { duration_ms: *duration_ms, attempts: *attempts }
            }
            ResultEnvelope::Failed { code, retryable, attempts, executed_before_failure, .. } => EventKind::Failed {
                code: code.clone(),
                retryable: *retryable,
                attempts: *attempts,
                executed_before_failure: *executed_before_failure,
            },
            ResultEnvelope::Cancelled { code, duration_ms, .. } => {
                EventKind::Cancelled { code: *code, duration_ms: *duration_ms }
            }
        }
    }
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

/// The retained audit trail.
///
/// Invariants: events are in strictly increasing cursor order without gaps,
/// the last one's cursor is `next_cursor - 1`, and every cursor in
/// `by_execution` that is at or after the first retained event names a
/// retained event about that execution.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct AuditLog {
    events: VecDeque<Event>,
    /// Cursors of each retained execution's events.
    by_execution: BTreeMap<String, Vec<u64>>,
    /// The cursor the next event gets; cursors start at 1.
    next_cursor: u64,
}

impl Default for AuditLog {
    fn default() -> Self {
        AuditLog { events: VecDeque::new(), by_execution: BTreeMap::new(), next_cursor: 1 }
    }
}

impl AuditLog {
    /// Appends an event stamped `now_ms` (the cluster clock) and indexes it by execution.
    pub(crate) fn record(&mut self, kind: EventKind, actor: &Actor, subject: EventSubject<'_>, now_ms: u64) {
        let cursor = self.next_cursor;
        self.next_cursor += 1;
        if let Some(execution_id) = subject.execution_id {
            // Look up before inserting: the id is only copied for an execution's first event.
            match self.by_execution.get_mut(execution_id) {
                Some(cursors) => cursors.push(cursor),
                None => {
                    self.by_execution.insert(execution_id.to_string(), vec![cursor]);
                }
            }
        }
        self.events.push_back(Event {
            cursor,
            kind,
            timestamp_ms: now_ms,
            // Events name who acted, not the application's attributes of them.
            actor: actor.without_attributes(),
            execution_id: subject.execution_id.map(str::to_string),
            capability_id: subject.capability_id.map(str::to_string),
            approval_id: subject.approval_id.map(str::to_string),
            correlation_id: subject.correlation_id.map(str::to_string),
            input_hash: subject.input_hash.map(str::to_string),
            principal: None,
        });
    }

    /// Stamps `principal` on every event from cursor `first` on: the events
    /// the command being applied recorded.
    pub(crate) fn stamp_principal(&mut self, first: u64, principal: &Principal) {
        for event in self.events.iter_mut().rev().take_while(|event| event.cursor >= first) {
            event.principal = Some(principal.clone());
        }
    }

    /// The cursor the next event will get.
    pub(crate) fn next_cursor(&self) -> u64 {
        self.next_cursor
    }

    /// True when no event is retained.
    pub(crate) fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// The event at a cursor, if retained.
    pub(crate) fn event(&self, cursor: u64) -> Option<&Event> {
        let first = self.events.front()?.cursor;
        let index = usize::try_from(cursor.checked_sub(first)?).ok()?;
        self.events.get(index)
    }

    /// Events after `after_cursor`, oldest first, at most `limit` (capped at [`EVENTS_PAGE_MAX`]).
    pub(crate) fn events_after(&self, after_cursor: u64, limit: u32) -> Vec<&Event> {
        let limit = limit.clamp(1, EVENTS_PAGE_MAX) as usize;
        let Some(first) = self.events.front().map(|event| event.cursor) else { return Vec::new() };
        let skip = after_cursor.saturating_add(1).saturating_sub(first);
        let skip = usize::try_from(skip).unwrap_or(usize::MAX);
        self.events.iter().skip(skip).take(limit).collect()
    }

    /// One execution's events after `after_cursor`, oldest first.
    pub(crate) fn execution_events(&self, execution_id: &str, after_cursor: u64, limit: u32) -> Vec<&Event> {
        let limit = limit.clamp(1, EVENTS_PAGE_MAX) as usize;
        let Some(cursors) = self.by_execution.get(execution_id) else { return Vec::new() };
        cursors
            .iter()
            .filter(|cursor| **cursor > after_cursor)
            .filter_map(|cursor| self.event(*cursor))
            .take(limit)
            .collect()
    }

    /// How many execution ids the per-execution index holds.
    pub(crate) fn indexed_execution_count(&self) -> usize {
        self.by_execution.len()
    }

    /// Drops the index of an execution that retention dropped. Its events
    /// stay until they are old enough themselves.
    pub(crate) fn forget_execution(&mut self, execution_id: &str) {
        self.by_execution.remove(execution_id);
    }

    /// Drops events stamped at or before `horizon` (`None`: nothing is old
    /// enough yet), and the index entries of ids that `retained` says are
    /// gone once every event they point at has been dropped. Returns how many
    /// events were dropped.
    pub(crate) fn compact(&mut self, horizon: Option<u64>, retained: impl Fn(&str) -> bool) -> u32 {
        let mut dropped = 0;
        while self.events.front().is_some_and(|event| horizon.is_some_and(|horizon| event.timestamp_ms <= horizon)) {
            self.events.pop_front();
            dropped += 1;
        }
        // Events can name an execution that never came to exist (a standalone
        // consume, an approval from submit that was rejected or expired). Their
        // index entries go once every event they point at has been dropped.
        let first_retained = self.events.front().map_or(self.next_cursor, |event| event.cursor);
        self.by_execution
            .retain(|id, cursors| retained(id) || cursors.last().is_some_and(|last| *last >= first_retained));
        dropped
    }
}
