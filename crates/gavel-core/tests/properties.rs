//! Property tests: random command sequences applied to the pure state machine,
//! with SPEC's invariants checked after every step.
//!
//! Sequences use a small fixed set of ids so that commands collide often: three
//! capabilities (a read with retries and a heartbeat timeout; a write without
//! `idempotent`; an idempotent write with retries whose versions alternate
//! between approval-required and not), a handful of approvals, executions and
//! workers, and a few pooled request ids. Time advances between commands by
//! small steps with occasional large jumps (past lease deadlines, approval
//! expiry, backoffs, the dedup window and retention), and now and then a
//! leader's clock runs behind.
//!
//! Commands are generated abstractly ("the most recent lease", "the lease of
//! e2") and resolved against what the run has seen, and the concrete envelopes
//! are kept, so the replay check applies exactly the same log to a fresh state.
//!
//! The last test throws garbage (empty, huge and control-character ids,
//! invalid JSON, zero and huge numbers) at `apply` and checks it never panics.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use gavel_core::canonical_json::{canonicalize, input_hash};
use gavel_core::ids::{approval_id_for, idempotency_key};
use gavel_core::limits::{DEDUP_TTL_MS, TIMESTAMP_MS_MAX};
use gavel_core::{
    Actor, ActorKind, Approval, ApprovalFilter, ApprovalPolicySpec, ApprovalStatus, CancelCode, CapabilitySpec,
    Command, CreateApproval, Envelope, ErrorCode, Event, EventKind, Execution, ExecutionState, Lease, ListOrder, Reply,
    ReportOutcome, ResultEnvelope, Retention, RetrySpec, Risk, SideEffect, State, StoredApprovalStatus, Submit,
};
use proptest::prelude::*;
use proptest::test_runner::{RngAlgorithm, TestCaseError};

// ---------------------------------------------------------------- fixed ids

const CAP_READ: &str = "cap.read";
const CAP_WRITE: &str = "cap.write";
const CAP_PAY: &str = "cap.pay";
/// Queue shared by the write and pay capabilities, so FIFO spans capabilities.
const SHARED_QUEUE: &str = "work";
/// e1..e4 are submitted; x1 and x2 are the executions that consuming or
/// resuming the free-standing approvals a1 and a2 name.
const EXECUTION_IDS: [&str; 6] = ["e1", "e2", "e3", "e4", "x1", "x2"];
const SUBMITTED_EXECUTIONS: usize = 4;
const ACTORS: [&str; 3] = ["alice", "bob", "carol"];
const WORKERS: [&str; 2] = ["w1", "w2"];
/// Marker that must never appear in an audit event (no raw inputs or outputs).
const SECRET: &str = "SECRET";
/// The first two inputs have the same canonical form, so the same hash.
const INPUTS: [&str; 5] = [
    r#"{"amount":5,"tag":"SECRET_INPUT"}"#,
    r#"{ "tag" : "SECRET_INPUT", "amount" : 5.0 }"#,
    r#"{"amount":7,"tag":"SECRET_INPUT"}"#,
    r#"["SECRET_INPUT",1,2]"#,
    r#"{"amount":"#,
];
const OUTPUTS: [&str; 3] =
    [r#"{"ok":true,"tag":"SECRET_OUTPUT"}"#, r#"{ "tag":"SECRET_OUTPUT", "ok":false }"#, "{oops"];

/// Approval ids: two free-standing ones, then those submit creates for e1..e4.
fn approval_ids() -> Vec<String> {
    let mut ids = vec!["a1".to_string(), "a2".to_string()];
    ids.extend(EXECUTION_IDS[..SUBMITTED_EXECUTIONS].iter().map(|id| approval_id_for(id)));
    ids
}

fn actor(index: usize) -> Actor {
    let kind = if index == 2 { ActorKind::Service } else { ActorKind::User };
    Actor::new(ACTORS[index % ACTORS.len()], kind)
}

/// Capability declarations. 0–2 are registered first; 3 and 4 are new
/// versions of pay and read; 5 is invalid (retry on a write without
/// `idempotent`) and must be refused.
fn capability_spec(variant: u8) -> CapabilitySpec {
    let read = CapabilitySpec {
        id: CAP_READ.to_string(),
        side_effect: Some(SideEffect::Read),
        risk: Some(Risk::Low),
        idempotent: false,
        retry: Some(RetrySpec { attempts_max: 2, backoff_ms: Some(100), non_retryable_codes: Vec::new() }),
        timeout_ms: Some(1_000),
        heartbeat_timeout_ms: Some(300),
        approval: None,
        queue: None,
        tags: vec!["search".to_string()],
    };
    let write = CapabilitySpec {
        id: CAP_WRITE.to_string(),
        side_effect: Some(SideEffect::Write),
        risk: Some(Risk::Medium),
        idempotent: false,
        retry: None,
        timeout_ms: Some(1_000),
        heartbeat_timeout_ms: None,
        approval: None,
        queue: Some(SHARED_QUEUE.to_string()),
        tags: Vec::new(),
    };
    let pay = CapabilitySpec {
        id: CAP_PAY.to_string(),
        side_effect: Some(SideEffect::Write),
        risk: Some(Risk::High),
        idempotent: true,
        retry: Some(RetrySpec {
            attempts_max: 3,
            backoff_ms: Some(50),
            non_retryable_codes: vec!["DECLINED".to_string()],
        }),
        timeout_ms: Some(800),
        heartbeat_timeout_ms: Some(400),
        approval: Some(ApprovalPolicySpec {
            required: true,
            approval_type: Some("finance".to_string()),
            expires_in_ms: Some(5_000),
        }),
        queue: Some(SHARED_QUEUE.to_string()),
        tags: Vec::new(),
    };
    match variant % 6 {
        0 => read,
        1 => write,
        2 => pay,
        3 => CapabilitySpec {
            approval: Some(ApprovalPolicySpec { required: false, approval_type: None, expires_in_ms: None }),
            ..pay
        },
        4 => CapabilitySpec {
            timeout_ms: Some(400),
            heartbeat_timeout_ms: None,
            retry: Some(RetrySpec { attempts_max: 1, backoff_ms: None, non_retryable_codes: Vec::new() }),
            ..read
        },
        _ => CapabilitySpec {
            retry: Some(RetrySpec { attempts_max: 2, backoff_ms: None, non_retryable_codes: Vec::new() }),
            ..write
        },
    }
}

fn retention(choice: u8) -> Retention {
    // Events are always kept at least 1 ms, so the events a step writes can be
    // read back and checked; records may be dropped as soon as they close.
    match choice % 4 {
        0 => Retention::default(),
        1 => Retention { records_ms: 3_000, events_ms: 1 },
        2 => Retention { records_ms: 0, events_ms: 1 },
        _ => Retention { records_ms: 60_000, events_ms: 60_000 },
    }
}

fn queues(choice: u8) -> Vec<String> {
    let names: &[&str] = match choice % 5 {
        0 => &[CAP_READ],
        1 => &[SHARED_QUEUE],
        2 => &[CAP_READ, SHARED_QUEUE],
        3 => &[SHARED_QUEUE, SHARED_QUEUE],
        _ => &["nobody.polls.this"],
    };
    names.iter().map(|name| name.to_string()).collect()
}

// ---------------------------------------------------------------- abstract operations

/// Which lease a heartbeat or report names.
#[derive(Debug, Clone, Copy)]
enum LeaseRef {
    /// The current lease of the k-th leased execution (else the latest lease).
    Live(u8),
    /// The k-th most recently granted lease.
    Recent(u8),
    /// The current lease of an execution (else the latest lease).
    OfExecution(u8),
    /// A lease id that was never granted (0, u64::MAX, the next id to be granted).
    Bogus(u8),
}

#[derive(Debug, Clone, Copy)]
enum Outcome {
    Completed(u8),
    Failed {
        retryable: bool,
    },
    /// A retryable code listed in pay's `nonRetryableCodes`.
    Declined,
}

#[derive(Debug, Clone)]
enum Op {
    Register(u8),
    CreateApproval {
        approval: u8,
        capability: u8,
        requester: u8,
        input: u8,
        expires_in_ms: Option<u64>,
        allow_self: bool,
        caller_behind_ms: Option<u64>,
    },
    Decide {
        approval: u8,
        approve: bool,
        approver: u8,
        caller_behind_ms: Option<u64>,
    },
    Consume {
        approval: u8,
        execution: u8,
    },
    /// Two or three contenders (consume or resume) for one approval at the same instant.
    Race {
        approval: u8,
        contenders: Vec<(bool, u8)>,
    },
    CancelApproval {
        approval: u8,
    },
    Submit {
        execution: u8,
        capability: u8,
        input: u8,
        requester: u8,
        correlated: bool,
    },
    Resume {
        approval: u8,
        execution: u8,
        input: Option<u8>,
    },
    Poll {
        worker: u8,
        queues: u8,
        tasks_max: u32,
    },
    Heartbeat {
        lease: LeaseRef,
        other_worker: Option<u8>,
    },
    Report {
        lease: LeaseRef,
        other_worker: Option<u8>,
        outcome: Outcome,
    },
    Cancel {
        execution: u8,
        with_actor: bool,
    },
    Tick {
        retention: u8,
    },
    /// Re-send one of the last few envelopes exactly (a client retry).
    Repeat(u8),
}

#[derive(Debug, Clone, Copy)]
enum RequestChoice {
    None,
    Fresh,
    /// One of three shared ids: reused for the same or a different command.
    Pooled(u8),
}

#[derive(Debug, Clone, Copy)]
enum Advance {
    By(u64),
    /// This command's leader clock is behind the previous one.
    Behind(u64),
}

#[derive(Debug, Clone)]
struct Step {
    advance: Advance,
    request: RequestChoice,
    op: Op,
}

/// Relative weights of the operations in a suite.
#[derive(Debug, Clone, Copy)]
struct Mix {
    register: u32,
    create: u32,
    decide: u32,
    consume: u32,
    race: u32,
    cancel_approval: u32,
    submit: u32,
    resume: u32,
    poll: u32,
    heartbeat: u32,
    report: u32,
    cancel: u32,
    tick: u32,
    repeat: u32,
}

const MIXED: Mix = Mix {
    register: 2,
    create: 3,
    decide: 5,
    consume: 3,
    race: 2,
    cancel_approval: 1,
    submit: 10,
    resume: 4,
    poll: 10,
    heartbeat: 4,
    report: 8,
    cancel: 2,
    tick: 5,
    repeat: 3,
};

const APPROVAL_HEAVY: Mix = Mix {
    register: 1,
    create: 6,
    decide: 8,
    consume: 6,
    race: 6,
    cancel_approval: 2,
    submit: 6,
    resume: 6,
    poll: 3,
    heartbeat: 1,
    report: 3,
    cancel: 1,
    tick: 3,
    repeat: 3,
};

const LEASE_HEAVY: Mix = Mix {
    register: 1,
    create: 1,
    decide: 2,
    consume: 1,
    race: 1,
    cancel_approval: 1,
    submit: 12,
    resume: 2,
    poll: 10,
    heartbeat: 4,
    report: 8,
    cancel: 2,
    tick: 7,
    repeat: 3,
};

fn behind_strategy() -> impl Strategy<Value = Option<u64>> {
    prop_oneof![6 => Just(None), 1 => (0u64..10_000).prop_map(Some)]
}

fn lease_ref_strategy() -> impl Strategy<Value = LeaseRef> {
    prop_oneof![
        6 => (0u8..3).prop_map(LeaseRef::Live),
        3 => (0u8..3).prop_map(LeaseRef::Recent),
        2 => (0u8..6).prop_map(LeaseRef::OfExecution),
        1 => (0u8..3).prop_map(LeaseRef::Bogus),
    ]
}

fn other_worker_strategy() -> impl Strategy<Value = Option<u8>> {
    prop_oneof![8 => Just(None), 1 => (0u8..2).prop_map(Some)]
}

fn outcome_strategy() -> impl Strategy<Value = Outcome> {
    prop_oneof![
        6 => (0u8..3).prop_map(Outcome::Completed),
        3 => any::<bool>().prop_map(|retryable| Outcome::Failed { retryable }),
        1 => Just(Outcome::Declined),
    ]
}

fn op_strategy(mix: Mix) -> impl Strategy<Value = Op> {
    prop_oneof![
        mix.register => (0u8..6).prop_map(Op::Register),
        mix.create => (
            0u8..6,
            0u8..3,
            0u8..3,
            0u8..5,
            prop_oneof![2 => Just(None), 1 => (0u64..20_000).prop_map(Some)],
            prop::bool::weighted(0.2),
            behind_strategy(),
        )
            .prop_map(|(approval, capability, requester, input, expires_in_ms, allow_self, caller_behind_ms)| {
                Op::CreateApproval { approval, capability, requester, input, expires_in_ms, allow_self, caller_behind_ms }
            }),
        mix.decide => (0u8..9, prop::bool::weighted(0.8), 0u8..3, behind_strategy())
            .prop_map(|(approval, approve, approver, caller_behind_ms)| Op::Decide { approval, approve, approver, caller_behind_ms }),
        mix.consume => (0u8..9, 0u8..6).prop_map(|(approval, execution)| Op::Consume { approval, execution }),
        mix.race => (0u8..9, prop::collection::vec((prop::bool::weighted(0.4), 0u8..6), 2..=3))
            .prop_map(|(approval, contenders)| Op::Race { approval, contenders }),
        mix.cancel_approval => (0u8..9).prop_map(|approval| Op::CancelApproval { approval }),
        mix.submit => (0u8..4, prop_oneof![9 => 0u8..3, 1 => Just(3u8)], prop_oneof![9 => 0u8..4, 1 => Just(4u8)], 0u8..3, any::<bool>())
            .prop_map(|(execution, capability, input, requester, correlated)| Op::Submit { execution, capability, input, requester, correlated }),
        mix.resume => (0u8..9, 0u8..6, prop_oneof![3 => Just(None), 1 => (0u8..5).prop_map(Some)])
            .prop_map(|(approval, execution, input)| Op::Resume { approval, execution, input }),
        mix.poll => (0u8..2, prop_oneof![4 => Just(2u8), 4 => 0u8..5], prop_oneof![6 => 1u32..3, 1 => Just(0u32), 1 => Just(64u32)])
            .prop_map(|(worker, queues, tasks_max)| Op::Poll { worker, queues, tasks_max }),
        mix.heartbeat => (lease_ref_strategy(), other_worker_strategy())
            .prop_map(|(lease, other_worker)| Op::Heartbeat { lease, other_worker }),
        mix.report => (lease_ref_strategy(), other_worker_strategy(), outcome_strategy())
            .prop_map(|(lease, other_worker, outcome)| Op::Report { lease, other_worker, outcome }),
        mix.cancel => (0u8..6, any::<bool>()).prop_map(|(execution, with_actor)| Op::Cancel { execution, with_actor }),
        mix.tick => (0u8..4).prop_map(|retention| Op::Tick { retention }),
        mix.repeat => (0u8..4).prop_map(Op::Repeat),
    ]
}

fn advance_strategy() -> impl Strategy<Value = Advance> {
    prop_oneof![
        40 => (0u64..60).prop_map(Advance::By),
        8 => (60u64..1_500).prop_map(Advance::By),
        3 => (1_500u64..20_000).prop_map(Advance::By),
        // Past the dedup window, approval validity and retention windows.
        1 => (100_000u64..2_000_000).prop_map(Advance::By),
        1 => (1u64..2_000).prop_map(Advance::Behind),
    ]
}

fn request_strategy() -> impl Strategy<Value = RequestChoice> {
    prop_oneof![
        6 => Just(RequestChoice::None),
        3 => Just(RequestChoice::Fresh),
        1 => (0u8..3).prop_map(RequestChoice::Pooled),
    ]
}

fn steps_strategy(mix: Mix, length: std::ops::Range<usize>) -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(
        (advance_strategy(), request_strategy(), op_strategy(mix)).prop_map(|(advance, request, op)| Step {
            advance,
            request,
            op,
        }),
        length,
    )
}

// ---------------------------------------------------------------- the checked run

/// What the checks need of the state before a step: the records of the fixed
/// ids, the clock and the event cursor (cheaper than cloning the whole state).
/// Capabilities are read from the state after the step: versions are immutable
/// and never dropped.
struct Before {
    clock_ms: u64,
    next_cursor: u64,
    executions: BTreeMap<&'static str, Execution>,
    approvals: BTreeMap<String, Approval>,
    /// (cursor, timestamp) of every retained event, taken before a tick only.
    event_stamps: Vec<(u64, u64)>,
}

impl Before {
    fn of(state: &State, approval_ids: &[String], command: &Command) -> Before {
        let event_stamps = match command {
            Command::Tick { .. } => {
                state.events_after(0, u32::MAX).into_iter().map(|event| (event.cursor, event.timestamp_ms)).collect()
            }
            _ => Vec::new(),
        };
        Before {
            event_stamps,
            clock_ms: state.clock_ms(),
            next_cursor: state.next_cursor(),
            executions: EXECUTION_IDS
                .iter()
                .filter_map(|id| state.execution(id).map(|execution| (*id, execution.into_owned())))
                .collect(),
            approvals: approval_ids
                .iter()
                .filter_map(|id| state.approval(id).map(|approval| (id.clone(), approval.into_owned())))
                .collect(),
        }
    }

    fn clock_ms(&self) -> u64 {
        self.clock_ms
    }

    fn next_cursor(&self) -> u64 {
        self.next_cursor
    }

    fn execution(&self, id: &str) -> Option<&Execution> {
        self.executions.get(id)
    }

    fn approval(&self, id: &str) -> Option<&Approval> {
        self.approvals.get(id)
    }
}

/// How the dedup table treats an envelope, predicted from the request ids seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dedup {
    /// No request id: applied as is.
    Untracked,
    /// A new (or expired) request id: applied and remembered.
    New,
    /// The same command under a remembered request id: the first answer, no second effect.
    Repeat { first: usize },
    /// A different command under a remembered request id: refused.
    Conflict,
}

/// What a failed check prints: the step, its envelope and its reply.
struct Context<'a> {
    index: usize,
    envelope: &'a Envelope,
    reply: &'a Reply,
}

impl fmt::Display for Context<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at step {}: {:?}\n  reply: {:?}", self.index, self.envelope, self.reply)
    }
}

macro_rules! ensure {
    ($context:expr, $condition:expr, $($message:tt)+) => {
        if !$condition {
            return Err(TestCaseError::fail(format!("{}\n  {}", format!($($message)+), $context)));
        }
    };
}

/// `tiered` answers every approval read as `reference` does: each record,
/// the counts, and `list_approvals` under every filter, whole and paged,
/// which must also be the records `approval` gives, in (requested_at, id)
/// order (open ones from memory merged with closed ones from the cold
/// records).
fn check_approval_reads(tiered: &State, reference: &State, ids: &[String], context: &str) -> Result<(), TestCaseError> {
    let now_ms = reference.clock_ms();
    let mut retained = Vec::new();
    for id in ids {
        let approval = tiered.approval(id).map(Cow::into_owned);
        ensure!(context, approval.as_ref() == reference.approval(id).as_deref(), "approval {id} reads the same");
        retained.extend(approval);
    }
    retained.sort_by(|a, b| (a.requested_at_ms, &a.id).cmp(&(b.requested_at_ms, &b.id)));
    ensure!(context, tiered.counts(now_ms) == reference.counts(now_ms), "the same counts");
    let statuses = [
        ApprovalStatus::Pending,
        ApprovalStatus::Approved,
        ApprovalStatus::Rejected,
        ApprovalStatus::Expired,
        ApprovalStatus::Cancelled,
        ApprovalStatus::Consumed,
    ];
    let mut filters = vec![ApprovalFilter::default()];
    filters.extend(statuses.map(|status| ApprovalFilter { status: Some(status), ..ApprovalFilter::default() }));
    filters.extend(
        retained.iter().map(|a| ApprovalFilter { capability_id: Some(a.capability_id.clone()), ..Default::default() }),
    );
    filters.extend(ACTORS.map(|actor| ApprovalFilter { actor_id: Some(actor.to_string()), ..Default::default() }));
    for filter in &filters {
        let listed = |state: &State, after: Option<&(u64, String)>, limit: usize, order: ListOrder| -> Vec<Approval> {
            state.list_approvals(filter, now_ms, after, limit, order).into_iter().map(Cow::into_owned).collect()
        };
        let list = |state: &State, after: Option<&(u64, String)>, limit: usize| {
            listed(state, after, limit, ListOrder::OldestFirst)
        };
        let whole = list(tiered, None, 100);
        ensure!(context, whole == list(reference, None, 100), "the same listing under {filter:?}");
        let expected: Vec<&Approval> = retained
            .iter()
            .filter(|a| filter.status.is_none_or(|status| a.status_at(now_ms) == status))
            .filter(|a| filter.capability_id.as_ref().is_none_or(|id| a.capability_id == *id))
            .filter(|a| filter.actor_id.as_ref().is_none_or(|id| a.actor.id == *id))
            .collect();
        ensure!(context, whole.iter().eq(expected), "the listing under {filter:?} is in (requested_at, id) order");
        let mut paged = Vec::new();
        let mut after = None;
        loop {
            let page = list(tiered, after.as_ref(), 2);
            let Some(last) = page.last() else { break };
            after = Some((last.requested_at_ms, last.id.clone()));
            paged.extend(page);
        }
        ensure!(context, paged == whole, "pages of two under {filter:?} make the whole listing");
        // Newest first: the same approvals in reverse, in pages of two
        // across the open ones and the cold ones (flushed or in the overlay).
        let mut newest_first = Vec::new();
        let mut before = None;
        loop {
            let page = listed(tiered, before.as_ref(), 2, ListOrder::NewestFirst);
            let Some(last) = page.last() else { break };
            before = Some((last.requested_at_ms, last.id.clone()));
            newest_first.extend(page);
        }
        ensure!(
            context,
            newest_first.iter().eq(whole.iter().rev()),
            "pages of two newest first under {filter:?} are the whole listing reversed"
        );
    }
    Ok(())
}

/// A remembered request id: its command, when it expires, and the step that set it.
struct RememberedRequest {
    command: Command,
    expires_at_ms: u64,
    first: usize,
}

/// Snapshot → restore is checked every this many steps (and at the end of
/// every sequence); every third such check continues on the restored copy.
const SNAPSHOT_EVERY_STEPS: usize = 5;
/// How often the tiered replay flushes its cold records and checkpoints.
const CHECKPOINT_EVERY_STEPS: usize = 7;
/// How often the tiered replay crashes back to its last checkpoint (once per index).
const CRASH_EVERY_STEPS: usize = 11;

/// One sequence: the state, everything applied so far, and what the checks track.
struct Run {
    state: State,
    leader_now_ms: u64,
    envelopes: Vec<Envelope>,
    replies: Vec<Reply>,
    approval_ids: Vec<String>,
    fresh_requests: u64,
    remembered: BTreeMap<String, RememberedRequest>,
    /// Every lease granted: id → (execution, worker), and the grant order.
    leases: BTreeMap<u64, (String, String)>,
    lease_order: Vec<u64>,
    /// Successful consumptions per approval (per incarnation: reset when retention drops it).
    consumptions: BTreeMap<String, u32>,
    /// First final result seen per execution (per incarnation).
    final_results: BTreeMap<String, ResultEnvelope>,
    /// Accepted reports: lease → (canonical outcome, whether it scheduled a retry).
    accepted_reports: BTreeMap<u64, (ReportOutcome, bool)>,
    /// Closed approvals (rejected, cancelled, consumed) as first seen.
    closed_approvals: BTreeMap<String, Approval>,
}

fn is_final_event(kind: &EventKind) -> bool {
    matches!(kind, EventKind::Completed { .. } | EventKind::Failed { .. } | EventKind::Cancelled { .. })
}

fn effective_deadline(state: &State, execution: &Execution, lease: &Lease) -> u64 {
    let capability = state
        .capability(&execution.capability_id, Some(execution.capability_version))
        .expect("checked: every execution's capability version is retained");
    match capability.heartbeat_timeout_ms {
        Some(timeout) => lease.deadline_ms.min(lease.heartbeat_at_ms.saturating_add(timeout)),
        None => lease.deadline_ms,
    }
}

/// True when `lease_id` held by `worker_id` was the live current lease of a
/// non-final execution before the step, at the step's clock.
fn was_current(pre: &Before, post: &State, execution_id: &str, lease_id: u64, worker_id: &str, clock_ms: u64) -> bool {
    let Some(execution) = pre.execution(execution_id) else { return false };
    let Some(lease) = execution.lease.as_ref() else { return false };
    !execution.state.is_final()
        && lease.lease_id == lease_id
        && lease.worker_id == worker_id
        && effective_deadline(post, execution, lease) > clock_ms
}

fn canonical_outcome(outcome: &ReportOutcome) -> Option<ReportOutcome> {
    match outcome {
        ReportOutcome::Completed { output_json } => {
            Some(ReportOutcome::Completed { output_json: canonicalize(output_json).ok()? })
        }
        failed => Some(failed.clone()),
    }
}

fn result_matches_event(result: &ResultEnvelope, kind: &EventKind) -> bool {
    match (result, kind) {
        (
            ResultEnvelope::Completed { attempts, duration_ms, .. },
            EventKind::Completed { attempts: event_attempts, duration_ms: event_duration },
        ) => attempts == event_attempts && duration_ms == event_duration,
        (
            ResultEnvelope::Failed { code, attempts, retryable, executed_before_failure, .. },
            EventKind::Failed {
                code: event_code,
                attempts: event_attempts,
                retryable: event_retryable,
                executed_before_failure: event_executed,
            },
        ) => {
            code == event_code
                && attempts == event_attempts
                && retryable == event_retryable
                && executed_before_failure == event_executed
        }
        (
            ResultEnvelope::Cancelled { code, duration_ms, .. },
            EventKind::Cancelled { code: event_code, duration_ms: event_duration },
        ) => code == event_code && duration_ms == event_duration,
        _ => false,
    }
}

impl Run {
    fn new() -> Run {
        Run {
            state: State::new(),
            leader_now_ms: 1_000,
            envelopes: Vec::new(),
            replies: Vec::new(),
            approval_ids: approval_ids(),
            fresh_requests: 0,
            remembered: BTreeMap::new(),
            leases: BTreeMap::new(),
            lease_order: Vec::new(),
            consumptions: BTreeMap::new(),
            final_results: BTreeMap::new(),
            accepted_reports: BTreeMap::new(),
            closed_approvals: BTreeMap::new(),
        }
    }

    /// Registers the three base capabilities.
    fn register_base(&mut self) -> Result<(), TestCaseError> {
        for variant in 0..3 {
            let envelope = Envelope {
                request_id: None,
                now_ms: self.leader_now_ms,
                caller: None,
                command: Command::RegisterCapability(capability_spec(variant)),
            };
            self.step(envelope)?;
        }
        Ok(())
    }

    /// Runs a whole generated sequence, then checks replay.
    fn run(steps: &[Step]) -> Result<(), TestCaseError> {
        let mut run = Run::new();
        run.register_base()?;
        for step in steps {
            let now_ms = match step.advance {
                Advance::By(delta) => {
                    run.leader_now_ms += delta;
                    run.leader_now_ms
                }
                Advance::Behind(delta) => run.leader_now_ms.saturating_sub(delta),
            };
            if let Op::Repeat(back) = step.op {
                let Some(earlier) = run.envelopes.iter().rev().nth(back as usize) else { continue };
                let envelope = Envelope { now_ms, ..earlier.clone() };
                run.step(envelope)?;
                continue;
            }
            let racing = matches!(step.op, Op::Race { .. });
            let approved_before = match &step.op {
                Op::Race { approval, .. } => run
                    .state
                    .approval(&run.approval_id(*approval))
                    .is_some_and(|record| record.status == StoredApprovalStatus::Approved),
                _ => false,
            };
            let mut consumed = 0;
            for command in run.resolve(&step.op) {
                let request_id = run.request_id(step.request, racing);
                consumed += run.step(Envelope { request_id, now_ms, caller: None, command })?;
            }
            if let Op::Race { contenders, .. } = &step.op {
                let context = format!("race {:?}, last reply {:?}", step.op, run.replies.last());
                ensure!(context, consumed <= 1, "of racing consumers of one approval at most one succeeds");
                if approved_before && contenders.iter().all(|(resume, _)| !resume) {
                    ensure!(context, consumed == 1, "of racing consumes of an approved approval exactly one succeeds");
                }
            }
        }
        let last = run.envelopes.len().saturating_sub(1);
        if let (Some(envelope), Some(reply)) = (run.envelopes.last().cloned(), run.replies.last().cloned()) {
            run.check_snapshot(last, &envelope, &reply)?;
        }
        run.check_replay()?;
        run.check_tiered_replay()
    }

    fn request_id(&mut self, choice: RequestChoice, racing: bool) -> Option<String> {
        match choice {
            RequestChoice::None => None,
            // Racing clients are distinct clients: a pooled id would make them one.
            RequestChoice::Fresh | RequestChoice::Pooled(_) if racing => {
                self.fresh_requests += 1;
                Some(format!("race-{}", self.fresh_requests))
            }
            RequestChoice::Fresh => {
                self.fresh_requests += 1;
                Some(format!("req-{}", self.fresh_requests))
            }
            RequestChoice::Pooled(index) => Some(format!("pooled-{index}")),
        }
    }

    /// An approval id for a command on an approval: indexes below the number
    /// of fixed ids prefer the approvals that exist (so decisions and
    /// consumptions meet records), higher ones name any fixed id.
    fn approval_id(&self, index: u8) -> String {
        let index = index as usize;
        if index < self.approval_ids.len() {
            let existing: Vec<&String> =
                self.approval_ids.iter().filter(|id| self.state.approval(id).is_some()).collect();
            if let Some(id) = existing.get(index % existing.len().max(1)) {
                return (*id).clone();
            }
        }
        self.approval_ids[index % self.approval_ids.len()].clone()
    }

    /// An approval id for a create: any fixed id.
    fn new_approval_id(&self, index: u8) -> String {
        self.approval_ids[index as usize % self.approval_ids.len()].clone()
    }

    fn resolve_lease(&self, lease: LeaseRef) -> u64 {
        let latest = || self.lease_order.last().copied().unwrap_or(0);
        match lease {
            LeaseRef::Live(index) => {
                let live: Vec<u64> = EXECUTION_IDS
                    .iter()
                    .filter_map(|id| self.state.execution(id)?.lease.as_ref().map(|lease| lease.lease_id))
                    .collect();
                live.get(index as usize % live.len().max(1)).copied().unwrap_or_else(latest)
            }
            LeaseRef::Recent(back) => self.lease_order.iter().rev().nth(back as usize).copied().unwrap_or(0),
            LeaseRef::OfExecution(index) => self
                .state
                .execution(EXECUTION_IDS[index as usize % EXECUTION_IDS.len()])
                .and_then(|execution| execution.lease.as_ref().map(|lease| lease.lease_id))
                .unwrap_or_else(latest),
            LeaseRef::Bogus(0) => 0,
            LeaseRef::Bogus(1) => u64::MAX,
            LeaseRef::Bogus(_) => self.lease_order.last().map_or(1, |latest| latest + 1),
        }
    }

    fn resolve_worker(&self, lease_id: u64, other_worker: Option<u8>) -> String {
        match other_worker {
            Some(index) => WORKERS[index as usize % WORKERS.len()].to_string(),
            None => self.leases.get(&lease_id).map_or_else(|| WORKERS[0].to_string(), |(_, worker)| worker.clone()),
        }
    }

    /// Turns an abstract operation into concrete commands, given what the run has seen.
    fn resolve(&self, op: &Op) -> Vec<Command> {
        let caller_now = |behind: Option<u64>| behind.map(|behind| self.leader_now_ms.saturating_sub(behind));
        match op {
            Op::Register(variant) => vec![Command::RegisterCapability(capability_spec(*variant))],
            Op::CreateApproval {
                approval,
                capability,
                requester,
                input,
                expires_in_ms,
                allow_self,
                caller_behind_ms,
            } => {
                let caller_now_ms = caller_now(*caller_behind_ms);
                let base_ms = caller_now_ms.unwrap_or(self.leader_now_ms.max(self.state.clock_ms()));
                vec![Command::CreateApproval(CreateApproval {
                    id: self.new_approval_id(*approval),
                    capability_id: [CAP_PAY, CAP_READ, "cap.unknown"][*capability as usize % 3].to_string(),
                    surface: "mcp".to_string(),
                    actor: actor(*requester as usize),
                    input_json: INPUTS[*input as usize % INPUTS.len()].to_string(),
                    input_hash: None,
                    reasons: vec!["high risk".to_string()],
                    types: vec!["human".to_string()],
                    risk: Risk::High,
                    side_effect: SideEffect::Write,
                    requested_at_ms: None,
                    expires_at_ms: expires_in_ms.map(|validity| base_ms + validity),
                    expires_in_ms: None,
                    allow_self_approval: *allow_self,
                    caller_now_ms,
                })]
            }
            Op::Decide { approval, approve, approver, caller_behind_ms } => vec![Command::DecideApproval {
                terms_hash: None,
                approval_id: self.approval_id(*approval),
                status: if *approve { ApprovalStatus::Approved } else { ApprovalStatus::Rejected },
                approver: actor(*approver as usize),
                comment: approve.then(|| "ok".to_string()),
                caller_now_ms: caller_now(*caller_behind_ms),
            }],
            Op::Consume { approval, execution } => vec![Command::ConsumeApproval {
                approval_id: self.approval_id(*approval),
                execution_id: EXECUTION_IDS[*execution as usize % EXECUTION_IDS.len()].to_string(),
                caller_now_ms: None,
            }],
            Op::Race { approval, contenders } => contenders
                .iter()
                .map(|(resume, execution)| {
                    let approval_id = self.approval_id(*approval);
                    let execution_id = EXECUTION_IDS[*execution as usize % EXECUTION_IDS.len()].to_string();
                    if *resume {
                        Command::Resume { approval_id, execution_id, input_json: None }
                    } else {
                        Command::ConsumeApproval { approval_id, execution_id, caller_now_ms: None }
                    }
                })
                .collect(),
            Op::CancelApproval { approval } => {
                vec![Command::CancelApproval { approval_id: self.approval_id(*approval), caller_now_ms: None }]
            }
            Op::Submit { execution, capability, input, requester, correlated } => vec![Command::Submit(Submit {
                execution_id: EXECUTION_IDS[*execution as usize % SUBMITTED_EXECUTIONS].to_string(),
                capability_id: [CAP_READ, CAP_WRITE, CAP_PAY, "cap.unknown"][*capability as usize % 4].to_string(),
                input_json: INPUTS[*input as usize % INPUTS.len()].to_string(),
                actor: actor(*requester as usize),
                surface: "mcp".to_string(),
                correlation_id: correlated.then(|| "corr-1".to_string()),
            })],
            Op::Resume { approval, execution, input } => vec![Command::Resume {
                approval_id: self.approval_id(*approval),
                execution_id: EXECUTION_IDS[*execution as usize % EXECUTION_IDS.len()].to_string(),
                input_json: input.map(|input| INPUTS[input as usize % INPUTS.len()].to_string()),
            }],
            Op::Poll { worker, queues: choice, tasks_max } => vec![Command::Poll {
                worker_id: WORKERS[*worker as usize % WORKERS.len()].to_string(),
                queues: queues(*choice),
                tasks_max: *tasks_max,
            }],
            Op::Heartbeat { lease, other_worker } => {
                let lease_id = self.resolve_lease(*lease);
                vec![Command::Heartbeat { lease_id, worker_id: self.resolve_worker(lease_id, *other_worker) }]
            }
            Op::Report { lease, other_worker, outcome } => {
                let lease_id = self.resolve_lease(*lease);
                let outcome = match outcome {
                    Outcome::Completed(index) => {
                        ReportOutcome::Completed { output_json: OUTPUTS[*index as usize % OUTPUTS.len()].to_string() }
                    }
                    Outcome::Failed { retryable } => ReportOutcome::Failed {
                        code: "UPSTREAM_ERROR".to_string(),
                        message: "the upstream service said no".to_string(),
                        retryable: *retryable,
                    },
                    Outcome::Declined => ReportOutcome::Failed {
                        code: "DECLINED".to_string(),
                        message: "card declined".to_string(),
                        retryable: true,
                    },
                };
                vec![Command::Report { lease_id, worker_id: self.resolve_worker(lease_id, *other_worker), outcome }]
            }
            Op::Cancel { execution, with_actor } => vec![Command::CancelExecution {
                execution_id: EXECUTION_IDS[*execution as usize % EXECUTION_IDS.len()].to_string(),
                actor: with_actor.then(|| actor(0)),
            }],
            Op::Tick { retention: choice } => vec![Command::Tick { retention: retention(*choice) }],
            Op::Repeat(_) => Vec::new(),
        }
    }

    /// Predicts how the dedup table treats the envelope, and remembers new ids.
    fn classify(&mut self, envelope: &Envelope, clock_ms: u64) -> Dedup {
        let Some(request_id) = envelope.request_id.as_deref().filter(|id| !id.is_empty()) else {
            return Dedup::Untracked;
        };
        // Admission comes before the dedup table: a command it refuses as
        // malformed (one the edge would never propose) is answered as it is,
        // and its request id is not remembered.
        if gavel_core::precheck::precheck(&envelope.command).is_err() {
            return Dedup::Untracked;
        }
        if let Some(remembered) = self.remembered.get(request_id).filter(|entry| entry.expires_at_ms > clock_ms) {
            return if remembered.command == envelope.command {
                Dedup::Repeat { first: remembered.first }
            } else {
                Dedup::Conflict
            };
        }
        let entry = RememberedRequest {
            command: envelope.command.clone(),
            expires_at_ms: clock_ms + DEDUP_TTL_MS,
            first: self.envelopes.len(),
        };
        self.remembered.insert(request_id.to_string(), entry);
        Dedup::New
    }

    /// Applies one envelope and checks every invariant. Returns 1 when the step
    /// consumed an approval.
    fn step(&mut self, envelope: Envelope) -> Result<u32, TestCaseError> {
        let pre = Before::of(&self.state, &self.approval_ids, &envelope.command);
        let clock_ms = pre.clock_ms().max(envelope.now_ms);
        let dedup = self.classify(&envelope, clock_ms);
        let reply = self.state.apply(&envelope);
        let index = self.envelopes.len();
        let consumed = self.check(&pre, &envelope, &reply, dedup, index)?;
        if index % SNAPSHOT_EVERY_STEPS == SNAPSHOT_EVERY_STEPS - 1 {
            self.check_snapshot(index, &envelope, &reply)?;
        }
        self.envelopes.push(envelope);
        self.replies.push(reply);
        Ok(consumed)
    }

    /// Snapshot then restore gives the same state; every few steps the run
    /// continues on the restored copy, so replay also covers restored states.
    fn check_snapshot(&mut self, index: usize, envelope: &Envelope, reply: &Reply) -> Result<(), TestCaseError> {
        let context = Context { index, envelope, reply };
        let bytes = self.state.snapshot();
        let restored = State::restore(&bytes);
        ensure!(context, restored.is_ok(), "a snapshot restores: {:?}", restored.as_ref().err());
        let restored = restored.map_err(|error| TestCaseError::fail(error.to_string()))?;
        ensure!(context, restored == self.state, "snapshot then restore gives the same state");
        if index % (3 * SNAPSHOT_EVERY_STEPS) == 3 * SNAPSHOT_EVERY_STEPS - 1 {
            // The state hash is SHA-256 over these bytes: equal bytes, equal
            // hash (hashing itself is slow in debug builds, so it is compared
            // once per sequence, in the replay check).
            ensure!(context, restored.snapshot() == bytes, "the restored state serializes to the same bytes");
            self.state = restored;
        }
        Ok(())
    }

    /// Replaying the same envelopes on a fresh state gives the same replies and hash.
    fn check_replay(&self) -> Result<(), TestCaseError> {
        let mut fresh = State::new();
        for (index, (envelope, reply)) in self.envelopes.iter().zip(&self.replies).enumerate() {
            let again = fresh.apply(envelope);
            let context = Context { index, envelope, reply };
            ensure!(context, again == *reply, "replay gives the same reply, got {again:?}");
        }
        ensure!(
            format!("after {} envelopes", self.envelopes.len()),
            fresh.state_hash() == self.state.state_hash(),
            "replaying the same commands on a fresh state gives the same state hash"
        );
        Ok(())
    }

    /// The same envelopes on a state whose cold records go into a store at
    /// checkpoints, and which crashes now and then (losing everything since
    /// its last checkpoint and applying the suffix again, as a node replays
    /// its log), give the same replies, records and state hash as the run
    /// that never flushed.
    fn check_tiered_replay(&self) -> Result<(), TestCaseError> {
        let store = gavel_core::MemoryColdStore::new();
        let mut tiered = State::new();
        tiered.attach_cold_store(store.clone());
        let mut checkpoint = (0, tiered.hot_snapshot());
        let mut crashed_at = BTreeSet::new();
        let mut index = 0;
        while index < self.envelopes.len() {
            let (envelope, reply) = (&self.envelopes[index], &self.replies[index]);
            let again = tiered.apply(envelope);
            let context = Context { index, envelope, reply };
            ensure!(context, again == *reply, "the tiered state gives the same reply, got {again:?}");
            index += 1;
            if index % CHECKPOINT_EVERY_STEPS == 3 {
                tiered
                    .flush_cold(|mutations| gavel_core::ColdStore::write(&*store, mutations))
                    .map_err(|error| TestCaseError::fail(error.to_string()))?;
                ensure!(context, tiered.cold_pending_count() == 0, "a flush leaves nothing pending");
                checkpoint = (index, tiered.hot_snapshot());
            }
            if index % CRASH_EVERY_STEPS == 5 && crashed_at.insert(index) {
                tiered = State::from_hot_snapshot(&checkpoint.1, store.clone())
                    .map_err(|error| TestCaseError::fail(error.to_string()))?;
                index = checkpoint.0;
            }
        }
        let context = format!("after {} envelopes, {} crashes", self.envelopes.len(), crashed_at.len());
        for id in EXECUTION_IDS {
            ensure!(context, tiered.execution(id) == self.state.execution(id), "execution {id} reads the same");
        }
        ensure!(context, tiered.execution_count() == self.state.execution_count(), "the same number retained");
        check_approval_reads(&tiered, &self.state, &self.approval_ids, &context)?;
        ensure!(context, tiered.state_hash() == self.state.state_hash(), "the tiered state has the same state hash");
        let whole = State::restore(&tiered.snapshot()).map_err(|error| TestCaseError::fail(error.to_string()))?;
        ensure!(
            context,
            whole.state_hash() == self.state.state_hash(),
            "its whole-state export restores the same hash"
        );
        Ok(())
    }

    fn records_unchanged(&self, pre: &Before, context: &Context<'_>) -> Result<(), TestCaseError> {
        let post = &self.state;
        ensure!(context, post.next_cursor() == pre.next_cursor(), "no event without an effect");
        for id in EXECUTION_IDS {
            ensure!(context, pre.execution(id) == post.execution(id).as_deref(), "execution {id} unchanged");
        }
        for id in &self.approval_ids {
            ensure!(context, pre.approval(id) == post.approval(id).as_deref(), "approval {id} unchanged");
        }
        Ok(())
    }

    #[allow(clippy::too_many_lines)]
    fn check(
        &mut self,
        pre: &Before,
        envelope: &Envelope,
        reply: &Reply,
        dedup: Dedup,
        index: usize,
    ) -> Result<u32, TestCaseError> {
        let context = Context { index, envelope, reply };
        let command = &envelope.command;
        let clock_ms = pre.clock_ms().max(envelope.now_ms);
        ensure!(context, self.state.clock_ms() == clock_ms, "the clock is the largest command time seen");

        // ----- request-id deduplication: a repeat or a conflict has no effect.
        match dedup {
            Dedup::Conflict => {
                ensure!(
                    context,
                    reply.error().is_some_and(|error| error.code == ErrorCode::RequestIdReused),
                    "a request id reused for another command is refused"
                );
                self.records_unchanged(pre, &context)?;
                return Ok(0);
            }
            Dedup::Repeat { first } => {
                self.records_unchanged(pre, &context)?;
                if let Reply::Error(_) = &self.replies[first] {
                    ensure!(context, *reply == self.replies[first], "a repeated request gets its first refusal back");
                }
                if let Reply::Tasks(tasks) = reply {
                    for task in tasks {
                        ensure!(context, self.leases.contains_key(&task.lease.lease_id), "a repeat grants no lease");
                    }
                }
                return Ok(0);
            }
            Dedup::Untracked | Dedup::New => {}
        }

        let post = &self.state;
        let first_cursor = pre.next_cursor();
        let new_events: Vec<Event> = post.events_after(first_cursor - 1, u32::MAX);
        ensure!(
            context,
            new_events.len() as u64 == post.next_cursor() - first_cursor,
            "every event a step writes is retained and readable ({} of {})",
            new_events.len(),
            post.next_cursor() - first_cursor
        );
        if let Command::Tick { retention } = command {
            let first_retained = post.events_after(0, 1).first().map_or(u64::MAX, |event| event.cursor);
            for (cursor, timestamp_ms) in &pre.event_stamps {
                ensure!(
                    context,
                    *cursor >= first_retained || timestamp_ms.saturating_add(retention.events_ms) <= clock_ms,
                    "compaction never drops an event newer than the retention window (cursor {cursor})"
                );
            }
        }
        for (offset, event) in new_events.iter().enumerate() {
            ensure!(context, event.cursor == first_cursor + offset as u64, "cursors are consecutive");
            ensure!(context, event.timestamp_ms == clock_ms, "events are stamped with the cluster clock");
            ensure!(context, !format!("{event:?}").contains(SECRET), "no raw input or output in events: {event:?}");
            // The leaf's bytes, written directly, are the value tree's JSON (their definition).
            let through_values =
                serde_json::to_vec(&serde_json::to_value(event).expect("an event is a value")).expect("a value writes");
            ensure!(
                context,
                gavel_core::merkle::event_canonical_bytes(event) == through_values,
                "an event's canonical bytes are its value tree's JSON: {event:?}"
            );
        }

        // ----- leases: fresh ids only grow, each grant has its started event.
        let granted: Vec<&Lease> = match reply {
            Reply::Tasks(tasks) => tasks.iter().map(|task| &task.lease).collect(),
            _ => Vec::new(),
        };
        let poll_worker = match command {
            Command::Poll { worker_id, .. } => Some(worker_id.as_str()),
            _ => None,
        };
        ensure!(context, poll_worker.is_some() || granted.is_empty(), "only a poll grants leases");
        let started: Vec<(&str, u64, u32, &str)> = new_events
            .iter()
            .filter_map(|event| match &event.kind {
                EventKind::Started { attempt, lease_id, worker_id } => {
                    Some((event.execution_id.as_deref().unwrap_or(""), *lease_id, *attempt, worker_id.as_str()))
                }
                _ => None,
            })
            .collect();
        ensure!(context, started.len() == granted.len(), "each granted lease has exactly one capability.started");
        let mut leased_now = BTreeSet::new();
        for lease in &granted {
            let previous = self.lease_order.last().copied().unwrap_or(0);
            ensure!(context, lease.lease_id > previous, "lease ids only grow: {} after {previous}", lease.lease_id);
            ensure!(context, leased_now.insert(lease.execution_id.clone()), "one lease per execution per poll");
            ensure!(context, Some(lease.worker_id.as_str()) == poll_worker, "the lease goes to the polling worker");
            let before = pre.execution(&lease.execution_id);
            ensure!(
                context,
                before.is_some_and(|before| matches!(before.state, ExecutionState::Queued | ExecutionState::Backoff)),
                "only a queued (or due) execution is leased"
            );
            ensure!(
                context,
                before.is_some_and(|before| lease.attempt == before.attempts + 1),
                "a lease starts the next attempt"
            );
            let after = post.execution(&lease.execution_id);
            ensure!(
                context,
                after.is_some_and(|after| after.lease.as_ref() == Some(*lease)),
                "the granted lease is the execution's current lease"
            );
            ensure!(
                context,
                started.contains(&(
                    lease.execution_id.as_str(),
                    lease.lease_id,
                    lease.attempt,
                    lease.worker_id.as_str()
                )),
                "lease {} has its capability.started event",
                lease.lease_id
            );
            self.lease_order.push(lease.lease_id);
            self.leases.insert(lease.lease_id, (lease.execution_id.clone(), lease.worker_id.clone()));
        }
        for event in &new_events {
            if let EventKind::LeaseExpired { lease_id, .. } = &event.kind {
                let execution_id = event.execution_id.as_deref().unwrap_or("");
                ensure!(
                    context,
                    pre.execution(execution_id)
                        .and_then(|before| before.lease.as_ref())
                        .is_some_and(|lease| lease.lease_id == *lease_id),
                    "only a current lease expires"
                );
            }
        }

        // ----- reports and heartbeats: only for the current lease.
        let mut accepted_report: Option<(u64, ReportOutcome)> = None;
        if let Command::Report { lease_id, worker_id, outcome } = command {
            // SPEC §4: reporting the same outcome for the same lease twice
            // returns the same answer, also after a later attempt reported.
            let first_answer = canonical_outcome(outcome).and_then(|canonical| {
                let (accepted, retry_scheduled) = self.accepted_reports.get(lease_id)?;
                let (execution_id, holder) = self.leases.get(lease_id)?;
                let retained =
                    pre.execution(execution_id).is_some_and(|execution| execution.lease_ids.contains(lease_id));
                (*accepted == canonical && holder == worker_id && retained).then_some(*retry_scheduled)
            });
            if let Some(first_retry_scheduled) = first_answer {
                ensure!(
                    context,
                    matches!(reply, Reply::Reported { retry_scheduled, .. } if *retry_scheduled == first_retry_scheduled),
                    "reporting the same outcome for the same lease again returns the same answer"
                );
            }
            match reply {
                Reply::Reported { execution, retry_scheduled } => {
                    let holder = self.leases.get(lease_id).map(|(execution_id, _)| execution_id.clone());
                    ensure!(context, holder.is_some(), "a report is accepted only for a granted lease");
                    let execution_id = holder.unwrap_or_default();
                    let canonical = canonical_outcome(outcome);
                    let current = was_current(pre, post, &execution_id, *lease_id, worker_id, clock_ms);
                    let repeat = canonical.is_some()
                        && self.accepted_reports.get(lease_id).map(|(accepted, _)| accepted) == canonical.as_ref();
                    ensure!(
                        context,
                        current || repeat,
                        "a report is accepted only under the current lease (or repeats an accepted report)"
                    );
                    if current {
                        let canonical = canonical.unwrap_or_else(|| outcome.clone());
                        self.accepted_reports.insert(*lease_id, (canonical.clone(), *retry_scheduled));
                        accepted_report = Some((*lease_id, canonical));
                    } else {
                        ensure!(context, new_events.is_empty(), "a repeated report has no second effect");
                    }
                    ensure!(
                        context,
                        post.execution(&execution_id).as_deref() == Some(execution),
                        "the report's reply shows the execution"
                    );
                }
                Reply::Error(error) if error.code == ErrorCode::LeaseLost => {
                    if let Some((execution_id, _)) = self.leases.get(lease_id) {
                        // Only while the lease's execution is retained (not a
                        // later execution that reuses a dropped one's id).
                        let retained =
                            pre.execution(execution_id).is_some_and(|execution| execution.lease_ids.contains(lease_id));
                        if retained {
                            ensure!(
                                context,
                                new_events.iter().any(|event| matches!(
                                    event.kind,
                                    EventKind::LateReportRejected { lease_id: rejected, .. } if rejected == *lease_id
                                )),
                                "a refused report of a known lease records lease.late_report_rejected"
                            );
                        }
                    }
                }
                _ => {}
            }
        }
        if let (Command::Heartbeat { lease_id, worker_id }, Reply::Heartbeat { cancel_requested, deadline_ms }) =
            (command, reply)
        {
            let holder = self.leases.get(lease_id).map(|(execution_id, _)| execution_id.clone());
            ensure!(context, holder.is_some(), "a heartbeat is answered only for a granted lease");
            let execution_id = holder.unwrap_or_default();
            let before = pre.execution(&execution_id);
            if *cancel_requested {
                ensure!(
                    context,
                    before.is_some_and(|before| before.cancel_requested && before.revoked_lease_id == Some(*lease_id)),
                    "cancelRequested only for the lease a cancel revoked"
                );
            } else {
                ensure!(
                    context,
                    was_current(pre, post, &execution_id, *lease_id, worker_id, clock_ms),
                    "a heartbeat is accepted only for the current lease"
                );
                let lease_deadline = before.and_then(|before| before.lease.as_ref()).map(|lease| lease.deadline_ms);
                ensure!(context, lease_deadline == Some(*deadline_ms), "heartbeats do not extend the deadline");
                ensure!(context, new_events.is_empty(), "a heartbeat writes no event");
            }
        }

        // ----- executions: one final result, the retry rule, audit for every transition.
        let cancelled_here = match (command, reply) {
            (Command::CancelExecution { execution_id, .. }, Reply::Execution { .. }) => Some(execution_id.as_str()),
            _ => None,
        };
        for id in EXECUTION_IDS {
            let before = pre.execution(id);
            let after_record = post.execution(id);
            let after = after_record.as_deref();
            let events_of = |wanted: fn(&EventKind) -> bool| {
                new_events
                    .iter()
                    .filter(|event| event.execution_id.as_deref() == Some(id) && wanted(&event.kind))
                    .collect::<Vec<_>>()
            };
            let final_events = events_of(is_final_event);
            let retried_events = events_of(|kind| matches!(kind, EventKind::Retried { .. }));
            let was_final = before.is_some_and(|before| before.state.is_final());

            if let (Some(before), None) = (before, after) {
                let Command::Tick { retention } = command else {
                    return Err(TestCaseError::fail(format!("only retention drops an execution\n  {context}")));
                };
                let finalized_at_ms = before.finalized_at_ms.unwrap_or(clock_ms);
                ensure!(
                    context,
                    finalized_at_ms.saturating_add(retention.records_ms) <= clock_ms,
                    "retention drops an execution only after the retention window"
                );
                ensure!(context, was_final || final_events.len() == 1, "compaction never drops a non-final execution");
                ensure!(
                    context,
                    before.lease.is_none() || final_events.len() == 1,
                    "a leased execution is not dropped"
                );
                // A later submit with this id is a new execution.
                self.final_results.remove(id);
            }
            if was_final {
                ensure!(context, final_events.is_empty(), "a final execution is never finalized again");
            } else if after.is_some_and(|after| after.state.is_final()) || (before.is_some() && after.is_none()) {
                ensure!(context, final_events.len() == 1, "each finalization has exactly one final event");
            } else {
                ensure!(context, final_events.is_empty(), "no final event without a finalization");
            }

            let Some(after) = after else { continue };
            ensure!(context, after.execution_id == id, "the record is keyed by its id");
            ensure!(
                context,
                after.idempotency_key == idempotency_key(id),
                "the idempotency key is derived from the id"
            );
            ensure!(
                context,
                (after.state == ExecutionState::Leased) == after.lease.is_some(),
                "an execution holds a lease exactly while leased"
            );
            ensure!(
                context,
                after.state.is_final() == after.result.is_some()
                    && after.result.is_some() == after.finalized_at_ms.is_some(),
                "an execution has a result exactly when final"
            );
            ensure!(
                context,
                (after.state == ExecutionState::Backoff) == after.backoff_until_ms.is_some(),
                "a backoff has an end exactly while backing off"
            );
            ensure!(context, after.attempts as usize == after.lease_ids.len(), "one lease per attempt");
            if let Some(lease) = &after.lease {
                ensure!(
                    context,
                    after.lease_ids.last() == Some(&lease.lease_id)
                        && lease.attempt == after.attempts
                        && lease.execution_id == id
                        && self.leases.get(&lease.lease_id).is_some_and(|(holder, _)| holder == id),
                    "the current lease is the latest one granted to this execution"
                );
            }

            // The SI-11 side-effect rule and the retry budget.
            let capability = post.capability(&after.capability_id, Some(after.capability_version));
            ensure!(context, capability.is_some(), "an execution's capability version is retained");
            let Some(capability) = capability else { continue };
            let budget = capability.retry.as_ref().map_or(0, |retry| retry.attempts_max);
            ensure!(context, after.attempts <= 1 + budget, "attempts never exceed 1 + maxAttempts");
            if !capability.retry_allowed_by_side_effect() {
                ensure!(
                    context,
                    after.attempts <= 1
                        && after.state != ExecutionState::Backoff
                        && !(after.state == ExecutionState::Queued && after.attempts > 0),
                    "no retry of a write-like capability without idempotent and a retry config"
                );
            }

            // One final result; once final it never changes.
            if let Some(result) = &after.result {
                match self.final_results.get(id) {
                    Some(first) => ensure!(context, first == result, "a final result never changes"),
                    None => {
                        self.final_results.insert(id.to_string(), result.clone());
                    }
                }
                if let Some(event) = final_events.first() {
                    ensure!(context, result_matches_event(result, &event.kind), "the final event matches the result");
                }
            } else {
                ensure!(context, !self.final_results.contains_key(id), "a final execution stays final");
            }

            let Some(before) = before else {
                // Created by this step: submit or resume.
                ensure!(
                    context,
                    matches!(command, Command::Submit(_) | Command::Resume { .. }),
                    "only submit and resume create executions"
                );
                ensure!(
                    context,
                    after.state == ExecutionState::Queued && after.attempts == 0,
                    "a new execution is queued"
                );
                if matches!(command, Command::Submit(_)) {
                    ensure!(
                        context,
                        new_events.iter().any(
                            |event| event.kind == EventKind::Requested && event.execution_id.as_deref() == Some(id)
                        ),
                        "a submission records capability.requested"
                    );
                }
                continue;
            };
            ensure!(
                context,
                after.attempts >= before.attempts
                    && after.lease_ids.starts_with(&before.lease_ids)
                    && after.input_hash == before.input_hash
                    && after.capability_version == before.capability_version
                    && after.submitted_at_ms == before.submitted_at_ms,
                "an execution keeps its identity across steps"
            );
            if was_final {
                ensure!(
                    context,
                    after.state == before.state && after.result == before.result && after.attempts == before.attempts,
                    "a final execution never changes"
                );
            }

            // A lease that is no longer current was reported, revoked by a cancel, or expired.
            if let Some(lease) = &before.lease {
                if after.lease.as_ref().map(|current| current.lease_id) != Some(lease.lease_id) {
                    let reported = accepted_report.as_ref().is_some_and(|(reported, _)| *reported == lease.lease_id);
                    let cancelled = cancelled_here == Some(id);
                    let expired = new_events.iter().any(|event| {
                        matches!(event.kind, EventKind::LeaseExpired { lease_id, .. } if lease_id == lease.lease_id)
                    });
                    ensure!(
                        context,
                        [reported, cancelled, expired].iter().filter(|happened| **happened).count() == 1,
                        "a lease ends by exactly one of: accepted report, cancel, lease.expired \
                         (reported {reported}, cancelled {cancelled}, expired {expired})"
                    );
                }
            }
            // A retry records capability.retried with the next attempt.
            let retried = before.state == ExecutionState::Leased
                && matches!(after.state, ExecutionState::Queued | ExecutionState::Backoff);
            if retried {
                ensure!(
                    context,
                    retried_events.len() == 1
                        && matches!(retried_events[0].kind, EventKind::Retried { attempt, .. } if attempt == after.attempts + 1),
                    "a retry records capability.retried with the next attempt"
                );
            } else {
                ensure!(context, retried_events.is_empty(), "no capability.retried without a retry");
            }
            // A completed result is the output of an accepted report under the current lease.
            if !was_final {
                if let Some(ResultEnvelope::Completed { output_json, .. }) = &after.result {
                    let from_report = accepted_report.as_ref().is_some_and(|(lease_id, outcome)| {
                        before.lease.as_ref().is_some_and(|lease| lease.lease_id == *lease_id)
                            && matches!(outcome, ReportOutcome::Completed { output_json: reported } if reported == output_json)
                    });
                    ensure!(
                        context,
                        from_report,
                        "a completed result comes from an accepted report under the current lease"
                    );
                }
            }
            if cancelled_here == Some(id) {
                ensure!(
                    context,
                    matches!(after.result, Some(ResultEnvelope::Cancelled { code: CancelCode::Cancelled, .. }))
                        && after.cancel_requested,
                    "a caller cancel finalizes as cancelled{{CANCELLED}}"
                );
            }
        }

        // ----- approvals: decided once, consumed at most once, closed records never change.
        let consumed_by_command = match (command, reply) {
            (Command::ConsumeApproval { approval_id, .. }, Reply::Approval { .. })
            | (Command::Resume { approval_id, .. }, Reply::Execution { created: true, .. }) => {
                Some(approval_id.as_str())
            }
            _ => None,
        };
        let decided = match (command, reply) {
            (Command::DecideApproval { approval_id, caller_now_ms, approver, .. }, Reply::Approval { .. }) => {
                Some((approval_id.as_str(), caller_now_ms.unwrap_or(clock_ms), approver))
            }
            _ => None,
        };
        let mut consumed = 0;
        for id in self.approval_ids.clone() {
            let before = pre.approval(&id);
            let after = post.approval(&id).map(Cow::into_owned);
            let after = after.as_ref();
            let consumed_events = new_events
                .iter()
                .filter(|event| event.kind == EventKind::ApprovalConsumed && event.approval_id.as_deref() == Some(&id))
                .count();
            if let (Some(dropped), None) = (before, after) {
                let Command::Tick { retention } = command else {
                    return Err(TestCaseError::fail(format!("only retention drops an approval\n  {context}")));
                };
                // Retention counts from when the record closed; an open
                // record (pending, or approved but unconsumed) is useless
                // after its expiry, so it counts from there.
                let closed_at_ms = match dropped.status {
                    StoredApprovalStatus::Pending | StoredApprovalStatus::Approved => Some(dropped.expires_at_ms),
                    _ => dropped.closed_at_ms,
                };
                ensure!(
                    context,
                    closed_at_ms
                        .is_some_and(|closed_at_ms| closed_at_ms.saturating_add(retention.records_ms) <= clock_ms),
                    "retention drops an approval only after it closed (or expired) plus the retention window"
                );
                // A later create with this id is a new approval.
                self.consumptions.remove(&id);
                self.closed_approvals.remove(&id);
            }
            if consumed_by_command == Some(id.as_str()) {
                consumed += 1;
                let count = self.consumptions.entry(id.clone()).or_insert(0);
                *count += 1;
                ensure!(context, *count <= 1, "an approval is consumed at most once");
                ensure!(context, consumed_events == 1, "each consumption records approval.consumed");
                ensure!(
                    context,
                    before.is_some_and(|before| before.status == StoredApprovalStatus::Approved),
                    "only an approved approval is consumed"
                );
                ensure!(
                    context,
                    after.is_some_and(|after| after.status == StoredApprovalStatus::Consumed
                        && after.consumed_by_execution_id.is_some()),
                    "a consumed approval names its execution"
                );
            } else {
                ensure!(context, consumed_events == 0, "no approval.consumed without a consumption");
                if let (Some(before), Some(after)) = (before, after) {
                    ensure!(
                        context,
                        before.status == StoredApprovalStatus::Consumed
                            || after.status != StoredApprovalStatus::Consumed,
                        "an approval becomes consumed only by a successful consume or resume"
                    );
                }
            }
            if let Some((decided_id, decision_now_ms, approver)) = decided {
                if decided_id == id {
                    let before = before.expect("a decided approval existed");
                    ensure!(
                        context,
                        before.status_at(decision_now_ms) == ApprovalStatus::Pending,
                        "only a pending, unexpired approval is decided"
                    );
                    ensure!(
                        context,
                        approver.id != before.actor.id || before.allow_self_approval,
                        "the requester cannot decide their own approval"
                    );
                }
            }
            let Some(after) = after else { continue };
            if let Some(before) = before {
                let allowed = before.status == after.status
                    || (before.status == StoredApprovalStatus::Pending
                        && matches!(
                            after.status,
                            StoredApprovalStatus::Approved
                                | StoredApprovalStatus::Rejected
                                | StoredApprovalStatus::Cancelled
                        ))
                    || (before.status == StoredApprovalStatus::Approved
                        && after.status == StoredApprovalStatus::Consumed);
                ensure!(context, allowed, "approval moves {:?} -> {:?}", before.status, after.status);
            }
            match self.closed_approvals.get(&id) {
                Some(closed) => ensure!(context, closed == after, "a closed approval never changes"),
                None => {
                    if matches!(
                        after.status,
                        StoredApprovalStatus::Rejected
                            | StoredApprovalStatus::Cancelled
                            | StoredApprovalStatus::Consumed
                    ) {
                        self.closed_approvals.insert(id.clone(), after.clone());
                    }
                }
            }
        }
        if let (Command::Resume { approval_id, .. }, Reply::Execution { execution, created: true }) = (command, reply) {
            let approval = pre.approval(approval_id).expect("a resumed approval existed");
            let approver = approval.decision.as_ref().map(|decision| &decision.approver);
            ensure!(
                context,
                execution.approval_id.as_deref() == Some(approval_id.as_str())
                    && execution.input_hash == approval.input_hash
                    && execution.approver.as_ref() == approver
                    && (approver.is_some_and(|approver| approver.id != approval.actor.id)
                        || approval.allow_self_approval)
                    && clock_ms <= approval.expires_at_ms,
                "resume creates the execution from a valid approval"
            );
        }
        if let (Command::Submit(submit), Reply::Execution { execution, created }) = (command, reply) {
            let hash = input_hash(&submit.input_json).map(|(_, hash)| hash).ok();
            ensure!(context, hash.as_ref() == Some(&execution.input_hash), "submit stores the canonical input hash");
            if !created {
                ensure!(context, new_events.is_empty(), "a repeated submit has no second effect");
            }
        }
        if let (Command::Submit(submit), Reply::ApprovalRequired { approval, .. }) = (command, reply) {
            ensure!(
                context,
                post.execution(&submit.execution_id).as_deref() == pre.execution(&submit.execution_id),
                "submit of a gated capability creates no execution"
            );
            ensure!(
                context,
                approval.id == approval_id_for(&submit.execution_id),
                "the approval is named after the execution"
            );
        }
        if let (Command::RegisterCapability(spec), Reply::Capability(capability)) = (command, reply) {
            ensure!(
                context,
                !(spec.retry.is_some() && capability.side_effect.is_write_like() && !capability.idempotent),
                "the registry refuses a retry config on a write-like capability without idempotent"
            );
        }
        Ok(consumed)
    }
}

// ---------------------------------------------------------------- the suites

/// Sequences per suite; together with the garbage suite well over 10,000 per run.
const MIXED_CASES: u32 = 5_000;
const APPROVAL_CASES: u32 = 2_500;
const LEASE_CASES: u32 = 2_500;
const GARBAGE_CASES: u32 = 1_000;

/// XorShift instead of the default ChaCha: generating values dominated the
/// run time in debug builds, and these tests need variety, not crypto.
fn config(cases: u32) -> ProptestConfig {
    ProptestConfig { cases, rng_algorithm: RngAlgorithm::XorShift, ..ProptestConfig::default() }
}

proptest! {
    #![proptest_config(config(MIXED_CASES))]

    #[test]
    fn mixed_command_sequences_keep_every_invariant(steps in steps_strategy(MIXED, 10..40)) {
        Run::run(&steps)?;
    }
}

proptest! {
    #![proptest_config(config(APPROVAL_CASES))]

    #[test]
    fn approval_heavy_sequences_consume_each_approval_at_most_once(steps in steps_strategy(APPROVAL_HEAVY, 10..40)) {
        Run::run(&steps)?;
    }
}

proptest! {
    #![proptest_config(config(LEASE_CASES))]

    #[test]
    fn lease_heavy_sequences_finalize_each_execution_once(steps in steps_strategy(LEASE_HEAVY, 10..40)) {
        Run::run(&steps)?;
    }
}

// ---------------------------------------------------------------- garbage never panics

fn garbage_string() -> impl Strategy<Value = String> {
    prop_oneof![
        2 => Just(String::new()),
        4 => prop::sample::select(vec!["e1", "e2", "apr_e1", "a1", "w1", CAP_READ, CAP_PAY, SHARED_QUEUE, "alice"])
            .prop_map(str::to_string),
        3 => "[a-z0-9._-]{1,12}",
        3 => any::<String>(),
        2 => "[\\x00-\\x1f\\x7f\u{80}-\u{9f}]{1,6}",
        1 => (120usize..140).prop_map(|length| "x".repeat(length)),
        1 => Just("y".repeat(100_000)),
        1 => Just("\u{0}e1".to_string()),
        1 => Just("é\u{200b}\u{feff}\u{10ffff}".to_string()),
    ]
}

fn garbage_json() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => garbage_string(),
        2 => prop::sample::select(vec![
            r#"{"a":"#,
            r#"{"a":1,"a":2}"#,
            "1e999999",
            "-1e-400",
            "-0",
            r#""\ud800""#,
            r#"{"\udc00":1,"\ud800\udc00":2}"#,
            "null",
            "",
            "  ",
            "[1,]",
            "01",
            "\"\u{0}\"",
            "true false",
            "1.7976931348623157e309",
            "123456789012345678901234567890",
        ])
        .prop_map(str::to_string),
        1 => (60usize..80).prop_map(|depth| "[".repeat(depth) + &"]".repeat(depth)),
        1 => Just("[".repeat(50_000)),
        1 => Just(format!("\"{}\"", "z".repeat(70_000))),
        1 => Just(format!("\"{}\"", "z".repeat(300_000))),
    ]
}

fn garbage_u64() -> impl Strategy<Value = u64> {
    prop_oneof![
        3 => 0u64..5,
        1 => Just(u64::MAX),
        1 => Just(u64::MAX - 1),
        1 => Just(TIMESTAMP_MS_MAX),
        1 => Just(TIMESTAMP_MS_MAX + 1),
        2 => any::<u64>(),
        2 => 0u64..100_000,
    ]
}

fn garbage_u32() -> impl Strategy<Value = u32> {
    prop_oneof![2 => 0u32..5, 1 => Just(u32::MAX), 1 => any::<u32>(), 1 => 60u32..200]
}

fn garbage_actor() -> impl Strategy<Value = Actor> {
    (
        garbage_string(),
        prop::sample::select(vec![ActorKind::User, ActorKind::Service, ActorKind::Automation, ActorKind::Anonymous]),
        prop::option::of(garbage_string()),
    )
        .prop_map(|(id, kind, display_name)| Actor { display_name, ..Actor::new(&id, kind) })
}

fn garbage_list() -> impl Strategy<Value = Vec<String>> {
    prop_oneof![
        4 => prop::collection::vec(garbage_string(), 0..3),
        1 => (60usize..70).prop_map(|length| vec!["q".to_string(); length]),
    ]
}

fn any_side_effect() -> impl Strategy<Value = SideEffect> {
    prop::sample::select(vec![
        SideEffect::None,
        SideEffect::Read,
        SideEffect::Write,
        SideEffect::Destructive,
        SideEffect::External,
    ])
}

fn any_risk() -> impl Strategy<Value = Risk> {
    prop::sample::select(vec![Risk::Low, Risk::Medium, Risk::High, Risk::Critical])
}

fn any_approval_status() -> impl Strategy<Value = ApprovalStatus> {
    prop::sample::select(vec![
        ApprovalStatus::Pending,
        ApprovalStatus::Approved,
        ApprovalStatus::Rejected,
        ApprovalStatus::Cancelled,
        ApprovalStatus::Expired,
        ApprovalStatus::Consumed,
    ])
}

fn garbage_capability() -> impl Strategy<Value = CapabilitySpec> {
    (
        (garbage_string(), prop::option::of(any_side_effect()), prop::option::of(any_risk()), any::<bool>()),
        prop::option::of((garbage_u32(), prop::option::of(garbage_u64()), garbage_list()).prop_map(
            |(attempts_max, backoff_ms, non_retryable_codes)| RetrySpec {
                attempts_max,
                backoff_ms,
                non_retryable_codes,
            },
        )),
        (prop::option::of(garbage_u64()), prop::option::of(garbage_u64())),
        prop::option::of(
            (any::<bool>(), prop::option::of(garbage_string()), prop::option::of(garbage_u64())).prop_map(
                |(required, approval_type, expires_in_ms)| ApprovalPolicySpec {
                    required,
                    approval_type,
                    expires_in_ms,
                },
            ),
        ),
        (prop::option::of(garbage_string()), garbage_list()),
    )
        .prop_map(
            |(
                (id, side_effect, risk, idempotent),
                retry,
                (timeout_ms, heartbeat_timeout_ms),
                approval,
                (queue, tags),
            )| {
                CapabilitySpec {
                    id,
                    side_effect,
                    risk,
                    idempotent,
                    retry,
                    timeout_ms,
                    heartbeat_timeout_ms,
                    approval,
                    queue,
                    tags,
                }
            },
        )
}

fn garbage_outcome() -> impl Strategy<Value = ReportOutcome> {
    prop_oneof![
        garbage_json().prop_map(|output_json| ReportOutcome::Completed { output_json }),
        (garbage_string(), garbage_string(), any::<bool>())
            .prop_map(|(code, message, retryable)| ReportOutcome::Failed { code, message, retryable }),
    ]
}

fn garbage_command() -> impl Strategy<Value = Command> {
    prop_oneof![
        garbage_capability().prop_map(Command::RegisterCapability),
        (
            (garbage_string(), garbage_string(), garbage_string(), garbage_actor()),
            (garbage_json(), prop::option::of(garbage_string()), garbage_list(), garbage_list()),
            (any_risk(), any_side_effect(), prop::option::of(garbage_u64()), prop::option::of(garbage_u64())),
            (any::<bool>(), prop::option::of(garbage_u64())),
        )
            .prop_map(
                |(
                    (id, capability_id, surface, actor),
                    (input_json, input_hash, reasons, types),
                    (risk, side_effect, requested_at_ms, expires_at_ms),
                    (allow_self_approval, caller_now_ms),
                )| {
                    Command::CreateApproval(CreateApproval {
                        id,
                        capability_id,
                        surface,
                        actor,
                        input_json,
                        input_hash,
                        reasons,
                        types,
                        risk,
                        side_effect,
                        requested_at_ms,
                        expires_at_ms,
                        expires_in_ms: None,
                        allow_self_approval,
                        caller_now_ms,
                    })
                }
            ),
        (
            garbage_string(),
            any_approval_status(),
            garbage_actor(),
            prop::option::of(garbage_string()),
            prop::option::of(garbage_u64())
        )
            .prop_map(|(approval_id, status, approver, comment, caller_now_ms)| Command::DecideApproval {
                terms_hash: None,
                approval_id,
                status,
                approver,
                comment,
                caller_now_ms,
            }),
        (garbage_string(), garbage_string(), prop::option::of(garbage_u64())).prop_map(
            |(approval_id, execution_id, caller_now_ms)| Command::ConsumeApproval {
                approval_id,
                execution_id,
                caller_now_ms
            }
        ),
        (garbage_string(), prop::option::of(garbage_u64()))
            .prop_map(|(approval_id, caller_now_ms)| Command::CancelApproval { approval_id, caller_now_ms }),
        (
            garbage_string(),
            garbage_string(),
            garbage_json(),
            garbage_actor(),
            garbage_string(),
            prop::option::of(garbage_string())
        )
            .prop_map(|(execution_id, capability_id, input_json, actor, surface, correlation_id)| {
                Command::Submit(Submit { execution_id, capability_id, input_json, actor, surface, correlation_id })
            }),
        (garbage_string(), garbage_string(), prop::option::of(garbage_json())).prop_map(
            |(approval_id, execution_id, input_json)| Command::Resume { approval_id, execution_id, input_json }
        ),
        (garbage_string(), garbage_list(), garbage_u32()).prop_map(|(worker_id, queues, tasks_max)| Command::Poll {
            worker_id,
            queues,
            tasks_max
        }),
        (garbage_u64(), garbage_string()).prop_map(|(lease_id, worker_id)| Command::Heartbeat { lease_id, worker_id }),
        (garbage_u64(), garbage_string(), garbage_outcome())
            .prop_map(|(lease_id, worker_id, outcome)| Command::Report { lease_id, worker_id, outcome }),
        (garbage_string(), prop::option::of(garbage_actor()))
            .prop_map(|(execution_id, actor)| Command::CancelExecution { execution_id, actor }),
        (garbage_u64(), garbage_u64())
            .prop_map(|(records_ms, events_ms)| Command::Tick { retention: Retention { records_ms, events_ms } }),
    ]
}

fn garbage_envelope() -> impl Strategy<Value = Envelope> {
    (prop::option::of(garbage_string()), prop_oneof![4 => 0u64..5_000_000, 1 => garbage_u64()], garbage_command())
        .prop_map(|(request_id, now_ms, command)| Envelope { request_id, now_ms, caller: None, command })
}

/// A state with registered capabilities, a leased execution, a queued one and
/// a pending approval, so that garbage can hit real records.
fn seeded_state() -> (State, Vec<Envelope>) {
    let mut envelopes: Vec<Envelope> = (0..3)
        .map(|variant| Envelope {
            request_id: None,
            now_ms: 1_000,
            caller: None,
            command: Command::RegisterCapability(capability_spec(variant)),
        })
        .collect();
    for (execution_id, capability_id) in [("e1", CAP_READ), ("e2", CAP_WRITE), ("e3", CAP_PAY)] {
        envelopes.push(Envelope {
            request_id: Some(format!("seed-{execution_id}")),
            now_ms: 1_000,
            caller: None,
            command: Command::Submit(Submit {
                execution_id: execution_id.to_string(),
                capability_id: capability_id.to_string(),
                input_json: INPUTS[0].to_string(),
                actor: actor(0),
                surface: "mcp".to_string(),
                correlation_id: None,
            }),
        });
    }
    envelopes.push(Envelope {
        request_id: None,
        now_ms: 1_010,
        caller: None,
        command: Command::Poll { worker_id: "w1".to_string(), queues: vec![CAP_READ.to_string()], tasks_max: 1 },
    });
    let mut state = State::new();
    for envelope in &envelopes {
        state.apply(envelope);
    }
    (state, envelopes)
}

proptest! {
    #![proptest_config(config(GARBAGE_CASES))]

    #[test]
    fn garbage_commands_never_panic(garbage in prop::collection::vec(garbage_envelope(), 1..12)) {
        let (mut state, mut envelopes) = seeded_state();
        let mut replies = Vec::new();
        for envelope in garbage {
            replies.push(state.apply(&envelope));
            envelopes.push(envelope);
        }
        let restored = State::restore(&state.snapshot());
        prop_assert!(restored.is_ok());
        prop_assert!(restored.ok().as_ref() == Some(&state), "snapshot then restore gives the same state");
        let mut fresh = State::new();
        let replayed: Vec<Reply> = envelopes.iter().map(|envelope| fresh.apply(envelope)).collect();
        prop_assert_eq!(&replayed[replayed.len() - replies.len()..], &replies[..]);
        prop_assert_eq!(fresh.state_hash(), state.state_hash());
    }
}

/// Regression for a bug the sequences above found: with the cluster clock
/// still below the retention window, the compaction horizon saturated to 0,
/// so a record finalized (or an event written) at time 0 was dropped at once,
/// although it was far younger than the window.
#[test]
fn compaction_keeps_records_and_events_younger_than_the_window_while_the_clock_is_small() {
    let mut state = State::new();
    let mut at =
        |now_ms: u64, command: Command| state.apply(&Envelope { request_id: None, now_ms, caller: None, command });
    at(0, Command::RegisterCapability(capability_spec(1)));
    let submit = Submit {
        execution_id: "e1".to_string(),
        capability_id: CAP_WRITE.to_string(),
        input_json: INPUTS[0].to_string(),
        actor: actor(0),
        surface: "mcp".to_string(),
        correlation_id: None,
    };
    at(0, Command::Submit(submit));
    let queues = vec![SHARED_QUEUE.to_string()];
    let Reply::Tasks(tasks) = at(0, Command::Poll { worker_id: "w1".to_string(), queues, tasks_max: 1 }) else {
        panic!("poll failed");
    };
    let outcome = ReportOutcome::Completed { output_json: OUTPUTS[0].to_string() };
    let report = Command::Report { lease_id: tasks[0].lease.lease_id, worker_id: "w1".to_string(), outcome };
    assert!(matches!(at(0, report), Reply::Reported { .. }));
    let ticked = at(1_000, Command::Tick { retention: Retention::default() });
    assert!(matches!(ticked, Reply::Ticked { records_compacted: 0, .. }), "nothing is compacted: {ticked:?}");
    assert!(state.execution("e1").is_some_and(|execution| execution.state == ExecutionState::Completed));
    assert_eq!(state.execution_events("e1", 0, 100).len(), 3, "requested, started and completed are kept");
}
