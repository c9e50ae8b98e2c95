//! Overload protection: a node admits at most a bounded number of public
//! calls of each kind at once ([`crate::limits`]), and refuses the next one
//! at once with `RESOURCE_EXHAUSTED` and a `retry_after_ms` in its error
//! detail, instead of queueing it without limit.
//!
//! The hint is how long calls of that kind have recently held their slot,
//! times how many attempts are refused per attempt admitted (both moving
//! averages; the product clamped to
//! [`OVERLOAD_RETRY_AFTER_MS_MIN`]..[`OVERLOAD_RETRY_AFTER_MS_MAX`]). A
//! refusal is cheap but not free: TLS, HTTP/2 and a hop through a follower
//! cost about what serving a read does. Two thousand callers retrying every
//! few hundred milliseconds would spend the CPU the admitted calls need, and
//! the admitted calls would slow down with every caller added. Scaled by the
//! refusal ratio, the retries of many callers spread out until they arrive
//! about as fast as slots free, so the node's goodput and the latency of what
//! it admits stay close to what they are at its bound.
//!
//! A follower that forwards a call and gets the leader's overload refusal
//! back refuses calls of that kind itself for half the leader's hint (at
//! most [`LEADER_PUSHBACK_MS_MAX`]), with what remains of that hint:
//! [`Admission::learn_from_leader`], [`Admission::leader_pushback`].
//!
//! The routing layer ([`crate::routing`]) asks [`Admission::admit`] before
//! it authenticates, serves or forwards a call, and holds the permit until
//! the handler (or the forward) has answered. A follower bounds what it
//! forwards as the leader bounds what it serves, so neither holds an
//! unbounded number of waiting calls. Health, reflection and Raft calls are
//! never asked about (they are not public calls), nor are
//! `ClusterService/Status`, `AuditService/WatchEvents` and membership
//! changes: an operator must be able to look and act while the node sheds
//! load.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, TryAcquireError};
use tonic::{Code, Status};

use crate::limits::{LEADER_PUSHBACK_MS_MAX, OVERLOAD_RETRY_AFTER_MS_MAX, OVERLOAD_RETRY_AFTER_MS_MIN};
use crate::limits::{LONG_POLLS_MAX, PROPOSALS_IN_FLIGHT_MAX, READS_IN_FLIGHT_MAX};
use tonic::codegen::http::HeaderMap;

/// The domain code of an overload refusal.
pub const RESOURCE_EXHAUSTED: &str = "RESOURCE_EXHAUSTED";

/// What a bounded public call is, by the bound it counts against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallKind {
    /// A call whose handler proposes a command.
    Proposal,
    /// A long-poll: `WorkerService/Poll`, `ExecutionService/WaitExecution`.
    LongPoll,
    /// A linearizable read: `Get*`, `List*`, `WhoAmI`.
    Read,
}

impl CallKind {
    /// The kind of the public call at `path` (`/gavel.v1.Service/Method`),
    /// or `None` for a call that is never refused for overload.
    pub fn of(path: &str) -> Option<CallKind> {
        let (service, method) = path.strip_prefix("/gavel.v1.")?.split_once('/')?;
        match (service, method) {
            ("ClusterService", _) | ("AuditService", "WatchEvents") => None,
            ("WorkerService", "Poll") | ("ExecutionService", "WaitExecution") => Some(CallKind::LongPoll),
            (_, "WhoAmI" | "List") => Some(CallKind::Read),
            (_, method) if method.starts_with("Get") || method.starts_with("List") => Some(CallKind::Read),
            _ => Some(CallKind::Proposal),
        }
    }

    /// The `kind` label of `gavel_overload_refused_total`.
    pub fn as_str(self) -> &'static str {
        match self {
            CallKind::Proposal => "proposal",
            CallKind::LongPoll => "long_poll",
            CallKind::Read => "read",
        }
    }
}

/// The bounds in force on one node (`gavel node` flags, defaults from
/// [`crate::limits`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverloadLimits {
    /// Calls that propose a command at once ([`PROPOSALS_IN_FLIGHT_MAX`]).
    pub proposals_in_flight_max: usize,
    /// Long-polls waiting at once ([`LONG_POLLS_MAX`]).
    pub long_polls_max: usize,
    /// Linearizable reads at once ([`READS_IN_FLIGHT_MAX`]).
    pub reads_in_flight_max: usize,
}

impl Default for OverloadLimits {
    fn default() -> Self {
        OverloadLimits {
            proposals_in_flight_max: PROPOSALS_IN_FLIGHT_MAX,
            long_polls_max: LONG_POLLS_MAX,
            reads_in_flight_max: READS_IN_FLIGHT_MAX,
        }
    }
}

/// What a follower learnt from the leader's last overload refusal of one
/// kind: until when it refuses such calls itself, and until when the
/// leader asked callers to wait. Both in milliseconds since the
/// [`Admission`] was made; 0 when nothing was learnt.
#[derive(Debug, Default)]
struct Pushback {
    refuse_until_ms: AtomicU64,
    retry_at_ms: AtomicU64,
}

/// One bound: its slots, how long a slot has recently been held, and how
/// many recent attempts were refused.
#[derive(Debug)]
struct Bound {
    max: usize,
    slots: Arc<Semaphore>,
    held: Arc<HoldTime>,
    refused: RefusedShare,
    pushback: Pushback,
}

impl Bound {
    fn new(max: usize) -> Bound {
        Bound {
            max,
            slots: Arc::new(Semaphore::new(max)),
            held: Arc::new(HoldTime::default()),
            refused: RefusedShare::default(),
            pushback: Pushback::default(),
        }
    }

    /// The retry hint of a refusal now: hold time times refusals per admission.
    fn retry_after_ms(&self) -> u64 {
        let held_ms = self.held.average_micros.load(Ordering::Relaxed) as f64 / 1_000.0;
        let hint = held_ms * self.refused.per_admitted().max(1.0);
        (hint as u64).clamp(OVERLOAD_RETRY_AFTER_MS_MIN, OVERLOAD_RETRY_AFTER_MS_MAX)
    }
}

/// A moving average of the share of attempts refused, in parts per million
/// (weight 1/64 per attempt).
#[derive(Debug, Default)]
struct RefusedShare {
    parts_per_million: AtomicU64,
}

impl RefusedShare {
    /// Folds in one attempt, refused or admitted.
    fn record(&self, refused: bool) {
        let sample = if refused { 1_000_000 } else { 0 };
        let _ = self
            .parts_per_million
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |share| Some(share - share / 64 + sample / 64));
    }

    /// Refused attempts per admitted one (at most 1,000).
    fn per_admitted(&self) -> f64 {
        let share = (self.parts_per_million.load(Ordering::Relaxed) as f64 / 1_000_000.0).min(0.999);
        share / (1.0 - share)
    }
}

/// A moving average of how long admitted calls held their slot, in
/// microseconds (0 until one has finished).
#[derive(Debug, Default)]
struct HoldTime {
    average_micros: AtomicU64,
}

impl HoldTime {
    /// Folds one hold time into the average, with weight 1/8.
    fn record(&self, micros: u64) {
        let _ = self.average_micros.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |average| {
            Some(if average == 0 { micros.max(1) } else { average - average / 8 + micros / 8 })
        });
    }
}

/// An admitted call's slot, given back (and its hold time counted) on drop.
#[derive(Debug)]
pub struct Admitted {
    _slot: OwnedSemaphorePermit,
    since: Instant,
    held: Arc<HoldTime>,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.held.record(u64::try_from(self.since.elapsed().as_micros()).unwrap_or(u64::MAX));
    }
}

/// One node's admission: a semaphore per bound.
#[derive(Debug)]
pub struct Admission {
    limits: OverloadLimits,
    origin: Instant,
    proposals: Bound,
    long_polls: Bound,
    reads: Bound,
}

impl Admission {
    /// Admission under `limits`, nothing admitted yet.
    pub fn new(limits: OverloadLimits) -> Admission {
        Admission {
            limits,
            origin: Instant::now(),
            proposals: Bound::new(limits.proposals_in_flight_max),
            long_polls: Bound::new(limits.long_polls_max),
            reads: Bound::new(limits.reads_in_flight_max),
        }
    }

    /// The bounds in force.
    pub fn limits(&self) -> OverloadLimits {
        self.limits
    }

    /// A permit for one call of `kind`, held until the call has answered,
    /// or the `RESOURCE_EXHAUSTED` refusal when the bound is reached.
    pub fn admit(&self, kind: CallKind) -> Result<Admitted, Status> {
        let bound = self.bound(kind);
        match bound.slots.clone().try_acquire_owned() {
            Ok(slot) => {
                bound.refused.record(false);
                Ok(Admitted { _slot: slot, since: Instant::now(), held: bound.held.clone() })
            }
            Err(TryAcquireError::NoPermits | TryAcquireError::Closed) => {
                bound.refused.record(true);
                Err(refusal(kind, bound.max, bound.retry_after_ms()))
            }
        }
    }
}

impl Admission {
    fn bound(&self, kind: CallKind) -> &Bound {
        match kind {
            CallKind::Proposal => &self.proposals,
            CallKind::LongPoll => &self.long_polls,
            CallKind::Read => &self.reads,
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Notes the leader's answer to a forwarded call of `kind`: when it is
    /// an overload refusal with a retry hint, this node refuses such calls
    /// itself for half that hint (at most [`LEADER_PUSHBACK_MS_MAX`]).
    pub fn learn_from_leader(&self, kind: CallKind, headers: &HeaderMap) {
        if headers.get("grpc-status").map(|value| value.as_bytes()) != Some(b"8") {
            return;
        }
        let retry_after_ms = tonic::Status::from_header_map(headers)
            .and_then(|status| gavel_proto::error_detail::read_error_detail(&status))
            .and_then(|detail| detail.retry_after_ms);
        let Some(retry_after_ms) = retry_after_ms else { return };
        let now_ms = self.now_ms();
        let pushback = &self.bound(kind).pushback;
        pushback.retry_at_ms.store(now_ms + retry_after_ms, Ordering::Relaxed);
        pushback.refuse_until_ms.store(now_ms + (retry_after_ms / 2).min(LEADER_PUSHBACK_MS_MAX), Ordering::Relaxed);
    }

    /// The refusal a follower gives a call of `kind` itself while the
    /// leader's last overload refusal is fresh, with what remains of the
    /// leader's hint.
    pub fn leader_pushback(&self, kind: CallKind) -> Result<(), Status> {
        let now_ms = self.now_ms();
        let pushback = &self.bound(kind).pushback;
        if now_ms >= pushback.refuse_until_ms.load(Ordering::Relaxed) {
            return Ok(());
        }
        let remaining_ms = pushback.retry_at_ms.load(Ordering::Relaxed).saturating_sub(now_ms);
        let retry_after_ms = remaining_ms.clamp(OVERLOAD_RETRY_AFTER_MS_MIN, OVERLOAD_RETRY_AFTER_MS_MAX);
        Err(gavel_proto::error_detail::domain_status(
            Code::ResourceExhausted,
            RESOURCE_EXHAUSTED,
            &format!("the leader is overloaded; retry after {retry_after_ms} ms"),
            Vec::new(),
            Some(retry_after_ms),
            None,
        ))
    }
}

/// `RESOURCE_EXHAUSTED` for a call of `kind` past its bound of `max`, to be
/// retried after `retry_after_ms`.
fn refusal(kind: CallKind, max: usize, retry_after_ms: u64) -> Status {
    let what = match kind {
        CallKind::Proposal => "proposals in flight",
        CallKind::LongPoll => "long-polls waiting",
        CallKind::Read => "reads in flight",
    };
    gavel_proto::error_detail::domain_status(
        Code::ResourceExhausted,
        RESOURCE_EXHAUSTED,
        &format!("this node is overloaded ({max} {what}, its limit); retry after {retry_after_ms} ms"),
        Vec::new(),
        Some(retry_after_ms),
        None,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use gavel_proto::error_detail::read_error_detail;

    #[test]
    fn calls_are_classified_by_path_and_operator_calls_are_never_bounded() {
        let kind = |method: &str| CallKind::of(&format!("/gavel.v1.{method}"));
        assert_eq!(kind("ApprovalService/CreateApproval"), Some(CallKind::Proposal));
        assert_eq!(kind("WorkerService/Heartbeat"), Some(CallKind::Proposal));
        assert_eq!(kind("WorkerService/Poll"), Some(CallKind::LongPoll));
        assert_eq!(kind("ExecutionService/WaitExecution"), Some(CallKind::LongPoll));
        assert_eq!(kind("ApprovalService/GetApproval"), Some(CallKind::Read));
        assert_eq!(kind("AccessService/List"), Some(CallKind::Read));
        assert_eq!(kind("AccessService/WhoAmI"), Some(CallKind::Read));
        assert_eq!(kind("AuditService/ListEvents"), Some(CallKind::Read));
        assert_eq!(kind("AuditService/WatchEvents"), None);
        assert_eq!(kind("ClusterService/Status"), None);
        assert_eq!(kind("ClusterService/Promote"), None);
        assert_eq!(CallKind::of("/grpc.health.v1.Health/Check"), None);
        assert_eq!(CallKind::of("/gavel.internal.v1.RaftService/AppendEntries"), None);
    }

    #[test]
    fn past_its_bound_a_call_is_refused_with_a_retry_hint_until_a_permit_is_returned() {
        let admission = Admission::new(OverloadLimits { proposals_in_flight_max: 2, ..OverloadLimits::default() });
        let first = admission.admit(CallKind::Proposal).expect("first admitted");
        let _second = admission.admit(CallKind::Proposal).expect("second admitted");
        let refused = admission.admit(CallKind::Proposal).expect_err("third refused");
        assert_eq!(refused.code(), Code::ResourceExhausted);
        let detail = read_error_detail(&refused).expect("an error detail");
        assert_eq!(detail.code, RESOURCE_EXHAUSTED);
        // Nothing has finished yet: the shortest hint.
        assert_eq!(detail.retry_after_ms, Some(OVERLOAD_RETRY_AFTER_MS_MIN));
        assert!(detail.message.contains("2 proposals in flight"), "{}", detail.message);
        // Other kinds have their own bounds.
        admission.admit(CallKind::Read).expect("a read is admitted");
        drop(first);
        admission.admit(CallKind::Proposal).expect("admitted once a permit is back");
    }

    #[test]
    fn a_follower_refuses_itself_for_a_while_after_the_leader_refused_a_forward() {
        let admission = Admission::new(OverloadLimits::default());
        admission.leader_pushback(CallKind::Proposal).expect("nothing learnt yet");
        let refusal = refusal(CallKind::Proposal, 64, 400);
        let mut headers = HeaderMap::new();
        refusal.add_header(&mut headers).expect("a status as headers");
        admission.learn_from_leader(CallKind::Proposal, &headers);
        let local = admission.leader_pushback(CallKind::Proposal).expect_err("refused locally");
        assert_eq!(local.code(), Code::ResourceExhausted);
        let hint = read_error_detail(&local).and_then(|detail| detail.retry_after_ms).expect("a hint");
        assert!((300..=400).contains(&hint), "what remains of the leader's hint: {hint}");
        admission.leader_pushback(CallKind::Read).expect("other kinds are not refused");
        // An answer that is not an overload refusal teaches nothing.
        let fresh = Admission::new(OverloadLimits::default());
        let mut ok = HeaderMap::new();
        tonic::Status::unavailable("no leader").add_header(&mut ok).expect("headers");
        fresh.learn_from_leader(CallKind::Proposal, &ok);
        fresh.leader_pushback(CallKind::Proposal).expect("not refused");
    }

    #[test]
    fn the_retry_hint_grows_with_the_hold_time_and_the_refusal_ratio_within_its_clamp() {
        let bound = Bound::new(4);
        assert_eq!(bound.retry_after_ms(), OVERLOAD_RETRY_AFTER_MS_MIN);
        bound.held.record(200_000);
        assert_eq!(bound.retry_after_ms(), 200, "no refusals yet: one hold time");
        // Three refusals per admission, long enough for the average to settle.
        for _ in 0..500 {
            bound.refused.record(false);
            for _ in 0..3 {
                bound.refused.record(true);
            }
        }
        let hint = bound.retry_after_ms();
        assert!((500..=700).contains(&hint), "about three hold times: {hint}");
        for _ in 0..100 {
            bound.held.record(60_000_000);
        }
        assert_eq!(bound.retry_after_ms(), OVERLOAD_RETRY_AFTER_MS_MAX);
        for _ in 0..200 {
            bound.held.record(1_000);
        }
        assert_eq!(bound.retry_after_ms(), OVERLOAD_RETRY_AFTER_MS_MIN);
    }
}
