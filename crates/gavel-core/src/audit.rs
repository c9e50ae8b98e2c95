//! Audit events (SPEC §5): written by the same command as the transition they
//! record, ordered by a monotonic cursor, and never carrying raw inputs or outputs.
//! `AuditLog`, a part of [`crate::State`], holds the retained events and
//! their per-execution index, both in cold records ([`crate::cold`]): only
//! the cursors are hot. An event of an execution is stored by reference (no
//! copy of the execution's capability id, approval id, correlation id and
//! input hash); reads take a lookup of retained executions to rebuild it.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::cold::{ColdRecords, ColdTable};

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
    #[serde(with = "crate::model::hash_hex::option")]
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
    Approved {
        /// The terms hash of what was approved (SPEC §13).
        #[serde(with = "crate::model::hash_hex")]
        terms_hash: String,
    },
    /// An approval was rejected.
    Rejected {
        /// The terms hash of what was rejected (SPEC §13).
        #[serde(with = "crate::model::hash_hex")]
        terms_hash: String,
    },
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
    /// An admin changed a principal's quotas; the limits it now has.
    QuotaSet {
        /// Whose quotas.
        principal: Principal,
        /// Its pending approvals quota.
        pending_approvals_max: u64,
        /// Its non-final executions quota.
        active_executions_max: u64,
        /// Its write rate, per second.
        writes_per_second: u64,
        /// Its write burst.
        write_burst: u64,
    },
    /// An admin created or changed an approval policy.
    PolicySet {
        /// The policy.
        name: String,
        /// Its new version.
        version: u64,
        /// Open approvals of older versions this change voided.
        voided: u32,
        /// The change left approved-but-unconsumed approvals standing.
        non_retroactive: bool,
    },
    /// An admin deleted an approval policy.
    PolicyDeleted {
        /// The policy.
        name: String,
        /// The version deleted.
        version: u64,
        /// Open approvals this deletion voided.
        voided: u32,
        /// The deletion left approved-but-unconsumed approvals standing.
        non_retroactive: bool,
    },
    /// A vote on a governed approval (the event's input hash is the one
    /// the voter saw, which is the approval's).
    VoteCast {
        /// The policy version the approval was created under.
        policy_version: u64,
        /// Approve (`true`) or deny.
        approve: bool,
        /// The factor the vote counts for in the assignment after it
        /// (`None`: a denial, or no unmet factor needs it).
        factor: Option<String>,
        /// The voter is the requester and holds the self-approval grant.
        self_approval: bool,
        /// The terms hash of what was voted on (SPEC §13).
        #[serde(with = "crate::model::hash_hex")]
        terms_hash: String,
    },
    /// A voter withdrew its vote from a pending approval.
    VoteWithdrawn,
    /// A vote was removed from a pending approval because its voter lost
    /// the grant that made it eligible.
    VoteRemoved {
        /// The voter.
        voter: Principal,
    },
    /// An approval was voided because the policy it was created under
    /// changed or was deleted.
    ApprovalVoided {
        /// The policy.
        policy: String,
        /// The version the approval was created under.
        policy_version: u64,
    },
    /// One use of a standing approval was spent by a resume (the event's
    /// execution id is the one it created); the last use also consumes it.
    StandingUseSpent {
        /// Uses spent so far, this one included.
        used: u32,
        /// Uses it covers.
        uses_max: u32,
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
pub const GAVEL_EVENT_TYPES: [&str; 24] = [
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
    "quota.set",
    "policy.set",
    "policy.deleted",
    "approval.vote_cast",
    "approval.vote_withdrawn",
    "approval.vote_removed",
    "approval.voided",
    "approval.standing_use_spent",
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
            EventKind::Approved { .. } => "capability.approved",
            EventKind::Rejected { .. } => "capability.rejected",
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
            EventKind::QuotaSet { .. } => "quota.set",
            EventKind::PolicySet { .. } => "policy.set",
            EventKind::PolicyDeleted { .. } => "policy.deleted",
            EventKind::VoteCast { .. } => "approval.vote_cast",
            EventKind::VoteWithdrawn => "approval.vote_withdrawn",
            EventKind::VoteRemoved { .. } => "approval.vote_removed",
            EventKind::ApprovalVoided { .. } => "approval.voided",
            EventKind::StandingUseSpent { .. } => "approval.standing_use_spent",
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
    /// The ids and hash are those of the retained execution `execution_id`
    /// names ([`EventSubject::of_execution`]): the event stores a reference
    /// to them instead of copies.
    pub(crate) of_execution: bool,
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
            of_execution: true,
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
            of_execution: false,
        }
    }
}

/// An event as the cold records hold it: its cursor is the key (the
/// event holds 0 in its place), and an event of an execution
/// (`by_reference`) holds none of the capability id, approval id,
/// correlation id and input hash, which are its execution's and are
/// rebuilt from it on read ([`StoredEvent::resolve`]).
#[derive(Serialize, Deserialize)]
struct StoredEvent {
    event: Event,
    by_reference: bool,
}

impl StoredEvent {
    /// The event at `cursor`, its references filled in from its execution
    /// (`executions` finds a retained one by id).
    fn resolve<'e>(self, cursor: u64, executions: &impl Fn(&str) -> Option<Cow<'e, Execution>>) -> Event {
        let mut event = Event { cursor, ..self.event };
        if self.by_reference {
            let id = event.execution_id.as_deref().expect("an event by reference names its execution");
            let execution = executions(id).expect("an event by reference has a retained execution");
            fill_from(&mut event, &execution);
        }
        event
    }
}

/// Copies the ids and hash an event of `execution` refers to into it.
fn fill_from(event: &mut Event, execution: &Execution) {
    event.capability_id = Some(execution.capability_id.clone());
    event.approval_id.clone_from(&execution.approval_id);
    event.correlation_id.clone_from(&execution.correlation_id);
    event.input_hash = Some(execution.input_hash.clone());
}

/// The retained audit trail.
///
/// Invariants: the retained events are exactly the cursors
/// `first_cursor..next_cursor`, without gaps, in `events` (cold); every entry
/// `(execution id, cursor)` in `by_execution` (cold) names a retained event
/// about that execution. Events are recorded with the cluster clock, which
/// never goes back, so timestamps grow with cursors. An event stored by
/// reference names a retained execution: when retention drops the
/// execution first, [`AuditLog::forget_execution`] writes its remaining
/// events out in full.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct AuditLog {
    /// Events by cursor (big-endian).
    events: ColdRecords,
    /// Each execution's events: [`index_key`] entries, no value.
    by_execution: ColdRecords,
    /// The cursor of the oldest retained event (`next_cursor` when none is).
    first_cursor: u64,
    /// The cursor the next event gets; cursors start at 1.
    next_cursor: u64,
    /// The events the command being applied recorded, whole (references
    /// resolved, principal stamped), for the audit tree to hash at the end
    /// of the apply ([`AuditLog::take_unsealed`]) without reading them back.
    /// Empty between applies, so neither serialized nor compared.
    #[serde(skip)]
    unsealed: Vec<Event>,
    /// The records the events of the last apply named, in cursor order
    /// ([`crate::State::last_apply_named`]): filled as they are sealed,
    /// replaced by the next apply's. Transient, like `unsealed`.
    #[serde(skip)]
    last_named: Vec<RecordId>,
}

/// A record an event names: an execution or an approval, by id. A reader
/// waiting on one record wakes when an applied entry's events name it
/// ([`crate::State::last_apply_named`]).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RecordId {
    /// An execution.
    Execution(String),
    /// An approval.
    Approval(String),
}

/// The unsealed events are transient (empty between applies): equal logs
/// are equal in their records.
impl PartialEq for AuditLog {
    fn eq(&self, other: &Self) -> bool {
        (&self.events, &self.by_execution, self.first_cursor, self.next_cursor)
            == (&other.events, &other.by_execution, other.first_cursor, other.next_cursor)
    }
}

impl Eq for AuditLog {}

impl Default for AuditLog {
    fn default() -> Self {
        AuditLog {
            events: ColdRecords::new(ColdTable::Events),
            by_execution: ColdRecords::new(ColdTable::ExecutionEvents),
            first_cursor: 1,
            next_cursor: 1,
            unsealed: Vec::new(),
            last_named: Vec::new(),
        }
    }
}

/// The prefix of an execution's index entries: the id's length (so no id
/// is a prefix of another's entries), then the id.
fn index_prefix(execution_id: &str) -> Vec<u8> {
    let length = u16::try_from(execution_id.len()).expect("ids are bounded far below 64 KiB");
    let mut prefix = Vec::with_capacity(2 + execution_id.len() + 8);
    prefix.extend_from_slice(&length.to_be_bytes());
    prefix.extend_from_slice(execution_id.as_bytes());
    prefix
}

/// An index entry: the execution's prefix, then the cursor big-endian.
fn index_key(execution_id: &str, cursor: u64) -> Vec<u8> {
    let mut key = index_prefix(execution_id);
    key.extend_from_slice(&cursor.to_be_bytes());
    key
}

impl AuditLog {
    /// Appends an event stamped `now_ms` (the cluster clock) and indexes it by execution.
    pub(crate) fn record(&mut self, kind: EventKind, actor: &Actor, subject: EventSubject<'_>, now_ms: u64) {
        let cursor = self.next_cursor;
        self.next_cursor += 1;
        if let Some(execution_id) = subject.execution_id {
            self.by_execution.put(index_key(execution_id, cursor), &());
        }
        let by_reference = subject.of_execution;
        let copy = |field: Option<&str>| field.map(str::to_string);
        let whole = Event {
            cursor,
            kind,
            timestamp_ms: now_ms,
            // Events name who acted, not the application's attributes of them.
            actor: actor.without_attributes(),
            execution_id: subject.execution_id.map(str::to_string),
            capability_id: copy(subject.capability_id),
            approval_id: copy(subject.approval_id),
            correlation_id: copy(subject.correlation_id),
            input_hash: copy(subject.input_hash),
            principal: None,
        };
        let event = if by_reference {
            Event { capability_id: None, approval_id: None, correlation_id: None, input_hash: None, ..whole.clone() }
        } else {
            whole.clone()
        };
        self.unsealed.push(whole);
        self.store(cursor, StoredEvent { event, by_reference });
    }

    /// The events recorded since the last call, whole, oldest first.
    pub(crate) fn take_unsealed(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.unsealed)
    }

    /// Forgets the records the last apply's events named; the next seal
    /// notes its own with [`AuditLog::note_named`].
    pub(crate) fn clear_named(&mut self) {
        self.last_named.clear();
    }

    /// Notes the records a sealed event names, taking its ids (the event
    /// is done with once its leaf is hashed).
    pub(crate) fn note_named(&mut self, event: Event) {
        self.last_named.extend(event.execution_id.map(RecordId::Execution));
        self.last_named.extend(event.approval_id.map(RecordId::Approval));
    }

    /// The records the events of the last apply named.
    pub(crate) fn last_named(&self) -> &[RecordId] {
        &self.last_named
    }

    /// Writes an event at its cursor (the key: the value holds 0 in its place).
    fn store(&mut self, cursor: u64, mut stored: StoredEvent) {
        stored.event.cursor = 0;
        self.events.put(cursor.to_be_bytes().to_vec(), &stored);
    }

    /// The event at a cursor as stored, if the cold records hold it.
    fn load(&self, cursor: u64) -> Option<StoredEvent> {
        self.events.get(&cursor.to_be_bytes())
    }

    /// Stamps `principal` on every event from cursor `first` on: the events
    /// the command being applied recorded (still in the overlay: nothing is
    /// flushed during an apply).
    pub(crate) fn stamp_principal(&mut self, first: u64, principal: &Principal) {
        for event in self.unsealed.iter_mut().filter(|event| event.cursor >= first) {
            event.principal = Some(principal.clone());
        }
        for cursor in first.max(self.first_cursor)..self.next_cursor {
            let mut stored = self.load(cursor).expect("retained cursors have events");
            stored.event.principal = Some(principal.clone());
            self.store(cursor, stored);
        }
    }

    /// The cursor the next event will get.
    pub(crate) fn next_cursor(&self) -> u64 {
        self.next_cursor
    }

    /// The cursor of the oldest retained event (`next_cursor` when none is):
    /// retention dropped every event before it, and only those.
    pub(crate) fn first_cursor(&self) -> u64 {
        self.first_cursor
    }

    /// True when no event is retained.
    pub(crate) fn is_empty(&self) -> bool {
        self.first_cursor == self.next_cursor
    }

    /// The cold record sets of this part, for flushing and export.
    pub(crate) fn cold_mut(&mut self) -> [&mut ColdRecords; 2] {
        [&mut self.events, &mut self.by_execution]
    }

    /// The cold record sets of this part, for export.
    pub(crate) fn cold(&self) -> [&ColdRecords; 2] {
        [&self.events, &self.by_execution]
    }

    /// The event at a cursor, if retained. `executions` finds a retained
    /// execution by id, for the events that refer to theirs.
    pub(crate) fn event<'e>(
        &self,
        cursor: u64,
        executions: &impl Fn(&str) -> Option<Cow<'e, Execution>>,
    ) -> Option<Event> {
        if cursor < self.first_cursor || cursor >= self.next_cursor {
            return None;
        }
        Some(self.load(cursor)?.resolve(cursor, executions))
    }

    /// Events after `after_cursor`, oldest first, at most `limit` (capped at [`EVENTS_PAGE_MAX`]).
    pub(crate) fn events_after<'e>(
        &self,
        after_cursor: u64,
        limit: u32,
        executions: &impl Fn(&str) -> Option<Cow<'e, Execution>>,
    ) -> Vec<Event> {
        let limit = u64::from(limit.clamp(1, EVENTS_PAGE_MAX));
        let start = after_cursor.saturating_add(1).max(self.first_cursor);
        let end = start.saturating_add(limit).min(self.next_cursor);
        (start..end).filter_map(|cursor| self.event(cursor, executions)).collect()
    }

    /// One execution's events after `after_cursor`, oldest first.
    pub(crate) fn execution_events<'e>(
        &self,
        execution_id: &str,
        after_cursor: u64,
        limit: u32,
        executions: &impl Fn(&str) -> Option<Cow<'e, Execution>>,
    ) -> Vec<Event> {
        let limit = limit.clamp(1, EVENTS_PAGE_MAX) as usize;
        let prefix = index_prefix(execution_id);
        let mut from = index_key(execution_id, after_cursor.saturating_add(1));
        let mut events = Vec::new();
        while events.len() < limit {
            let Some((key, _)) = self.by_execution.seek(&from) else { break };
            let Some(cursor_bytes) = key.strip_prefix(prefix.as_slice()) else { break };
            let cursor = u64::from_be_bytes(cursor_bytes.try_into().expect("index keys end in a cursor"));
            events.extend(self.event(cursor, executions));
            from = index_key(execution_id, cursor.saturating_add(1));
        }
        events
    }

    /// How many execution ids the per-execution index holds. It scans the
    /// index (one seek per id): for tests and diagnostics.
    pub(crate) fn indexed_execution_count(&self) -> usize {
        let mut count = 0;
        let mut from = Vec::new();
        while let Some((key, _)) = self.by_execution.seek(&from) {
            count += 1;
            let length = usize::from(u16::from_be_bytes([key[0], key[1]]));
            // Past every entry of this id: its prefix, then cursor u64::MAX, then more.
            from = key[..2 + length].to_vec();
            from.extend_from_slice(&[0xFF; 9]);
        }
        count
    }

    /// Drops the index of an execution that retention dropped. Its events
    /// stay until they are old enough themselves: those that referred to
    /// the execution are written out in full, since it is gone.
    pub(crate) fn forget_execution(&mut self, execution: &Execution) {
        let prefix = index_prefix(&execution.execution_id);
        let mut from = prefix.clone();
        while let Some((key, _)) = self.by_execution.seek(&from) {
            if !key.starts_with(&prefix) {
                break;
            }
            let cursor = u64::from_be_bytes(key[prefix.len()..].try_into().expect("index keys end in a cursor"));
            let mut stored = self.load(cursor).expect("index entries name retained events");
            if stored.by_reference {
                fill_from(&mut stored.event, execution);
                stored.by_reference = false;
                self.store(cursor, stored);
            }
            self.by_execution.delete(&key);
            from = key;
            from.push(0);
        }
    }

    /// Drops events stamped at or before `horizon` (`None`: nothing is old
    /// enough yet) and below cursor `sealed_below` (the events the audit
    /// tree holds: an event is hashed before it may go) with their index
    /// entries, so an execution's entries go
    /// with the last of its events (or earlier, with [`AuditLog::forget_execution`]).
    /// Returns how many events were dropped. Reads only ever return retained
    /// events, so `_retained` (which executions are still retained) decides
    /// nothing here any more; it is kept for the orchestrator's call.
    pub(crate) fn compact(&mut self, horizon: Option<u64>, sealed_below: u64, _retained: impl Fn(&str) -> bool) -> u32 {
        let Some(horizon) = horizon else { return 0 };
        let mut dropped = 0;
        while self.first_cursor < self.next_cursor.min(sealed_below) {
            let key = self.first_cursor.to_be_bytes();
            let event = self.load(self.first_cursor).expect("retained cursors have events").event;
            if event.timestamp_ms > horizon {
                break;
            }
            if let Some(execution_id) = &event.execution_id {
                self.by_execution.delete(&index_key(execution_id, self.first_cursor));
            }
            self.events.delete(&key);
            self.first_cursor += 1;
            dropped += 1;
        }
        dropped
    }
}
