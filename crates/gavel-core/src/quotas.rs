//! Per-principal quotas, a part of [`crate::State`]: the admin's overrides,
//! each principal's usage counters (pending approvals, non-final
//! executions) and its write token bucket. What counts as a write, when a
//! record opens and closes, and who may change a quota are the
//! orchestrator's (`machine/quota_commands.rs`); this part keeps the
//! numbers and decides whether one more fits.
//!
//! Deterministic: the bucket refills by cluster time only, the `now_ms` the
//! orchestrator passes in (the envelope's, never a clock). Every map is a
//! `BTreeMap`, so the part serializes identically on every replica and is
//! in the snapshot and the state hash like the other parts; the counters
//! are carried by the snapshot, not rebuilt.
//!
//! Invariants:
//! - `usage` holds a principal only while one of its counters is non-zero;
//! - `overrides` holds a principal only while an admin set limits for it
//!   (at most [`QUOTA_OVERRIDES_MAX`]);
//! - a bucket never holds more than its burst, in milli-tokens.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::access::Principal;
use crate::error::{DomainError, ErrorCode, QuotaKind};
use crate::limits::{
    ACTIVE_EXECUTIONS_PER_PRINCIPAL_DEFAULT, PENDING_APPROVALS_PER_PRINCIPAL_DEFAULT, QUOTA_COUNT_MAX,
    QUOTA_OVERRIDES_MAX, QUOTA_WRITES_PER_SECOND_MAX, QUOTA_WRITE_BURST_MAX, WRITES_PER_SECOND_DEFAULT,
    WRITE_BURST_DEFAULT,
};

/// One write costs one token; the bucket counts thousandths of a token, so
/// a rate of R tokens per second refills exactly R milli-tokens per
/// millisecond, with no rounding.
const MILLI: u64 = 1_000;

/// A principal's limits: the defaults of [`crate::limits`] unless an admin
/// overrode them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuotaLimits {
    /// Most pending approvals it may have requested.
    pub pending_approvals_max: u64,
    /// Most non-final executions it may own.
    pub active_executions_max: u64,
    /// Its bucket's refill, in writes per second of cluster time.
    pub writes_per_second: u64,
    /// Its bucket's size: writes it may send at once after being idle.
    pub write_burst: u64,
}

impl Default for QuotaLimits {
    fn default() -> Self {
        QuotaLimits {
            pending_approvals_max: PENDING_APPROVALS_PER_PRINCIPAL_DEFAULT,
            active_executions_max: ACTIVE_EXECUTIONS_PER_PRINCIPAL_DEFAULT,
            writes_per_second: WRITES_PER_SECOND_DEFAULT,
            write_burst: WRITE_BURST_DEFAULT,
        }
    }
}

/// An admin's change to one principal's limits (`Command::SetQuota`): each
/// field given replaces that limit, the others keep their current value;
/// `reset` drops the override first (back to the defaults).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuotaChange {
    /// New pending approvals quota.
    pub pending_approvals_max: Option<u64>,
    /// New non-final executions quota.
    pub active_executions_max: Option<u64>,
    /// New write rate.
    pub writes_per_second: Option<u64>,
    /// New write burst.
    pub write_burst: Option<u64>,
    /// Start from the defaults rather than the current override.
    pub reset: bool,
}

/// What a principal holds against its count quotas.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuotaUsage {
    /// Approvals it requested that are still pending (expired ones too,
    /// until retention drops them).
    pub pending_approvals: u64,
    /// Executions it owns that are not final.
    pub active_executions: u64,
}

/// One principal's quota as a read shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuotaView {
    /// Whose.
    pub principal: Principal,
    /// Its effective limits.
    pub limits: QuotaLimits,
    /// Whether an admin overrode the defaults.
    pub overridden: bool,
    /// Its current usage.
    pub usage: QuotaUsage,
    /// Whole tokens in its write bucket at the read's time.
    pub write_tokens: u64,
}

/// A token bucket, refilled lazily when read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Bucket {
    /// Milli-tokens at `updated_ms`.
    tokens_milli: u64,
    /// Cluster time of the last charge.
    updated_ms: u64,
}

impl Bucket {
    /// Milli-tokens at `now_ms` under `limits` (never more than the burst).
    fn tokens_at(&self, limits: &QuotaLimits, now_ms: u64) -> u64 {
        let elapsed_ms = now_ms.saturating_sub(self.updated_ms);
        let refill = elapsed_ms.saturating_mul(limits.writes_per_second);
        self.tokens_milli.saturating_add(refill).min(limits.write_burst.saturating_mul(MILLI))
    }
}

/// Every principal's overrides, usage and write bucket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub(crate) struct Quotas {
    overrides: BTreeMap<Principal, QuotaLimits>,
    usage: BTreeMap<Principal, QuotaUsage>,
    buckets: BTreeMap<Principal, Bucket>,
}

impl Quotas {
    /// `principal`'s effective limits.
    pub(crate) fn limits(&self, principal: &Principal) -> QuotaLimits {
        self.overrides.get(principal).copied().unwrap_or_default()
    }

    /// `principal`'s usage.
    pub(crate) fn usage(&self, principal: &Principal) -> QuotaUsage {
        self.usage.get(principal).copied().unwrap_or_default()
    }

    /// Every principal with an override or usage, in order.
    pub(crate) fn principals(&self) -> impl Iterator<Item = &Principal> {
        let mut all: Vec<&Principal> = self.overrides.keys().chain(self.usage.keys()).collect();
        all.sort();
        all.dedup();
        all.into_iter()
    }

    /// What a read shows of `principal` at `now_ms`.
    pub(crate) fn view(&self, principal: &Principal, now_ms: u64) -> QuotaView {
        QuotaView {
            principal: principal.clone(),
            limits: self.limits(principal),
            overridden: self.overrides.contains_key(principal),
            usage: self.usage(principal),
            write_tokens: self.tokens_milli(principal, now_ms) / MILLI,
        }
    }

    /// Applies an admin's change; refuses limits outside the bounds of
    /// [`crate::limits`] and a new override past [`QUOTA_OVERRIDES_MAX`].
    pub(crate) fn set(&mut self, principal: &Principal, change: &QuotaChange) -> Result<QuotaLimits, DomainError> {
        check_change(change)?;
        let current = if change.reset { QuotaLimits::default() } else { self.limits(principal) };
        let limits = QuotaLimits {
            pending_approvals_max: change.pending_approvals_max.unwrap_or(current.pending_approvals_max),
            active_executions_max: change.active_executions_max.unwrap_or(current.active_executions_max),
            writes_per_second: change.writes_per_second.unwrap_or(current.writes_per_second),
            write_burst: change.write_burst.unwrap_or(current.write_burst),
        };
        if limits == QuotaLimits::default() {
            self.overrides.remove(principal);
        } else {
            if !self.overrides.contains_key(principal) && self.overrides.len() >= QUOTA_OVERRIDES_MAX {
                return Err(DomainError::new(
                    ErrorCode::FailedPrecondition,
                    format!(
                        "{principal} cannot get a quota override: {QUOTA_OVERRIDES_MAX} principals have one, the limit"
                    ),
                ));
            }
            self.overrides.insert(principal.clone(), limits);
        }
        // A smaller burst takes effect at once.
        if let Some(bucket) = self.buckets.get_mut(principal) {
            bucket.tokens_milli = bucket.tokens_milli.min(limits.write_burst.saturating_mul(MILLI));
        }
        Ok(limits)
    }

    /// Milli-tokens in `principal`'s bucket at `now_ms` (a principal that
    /// never wrote has a full one).
    fn tokens_milli(&self, principal: &Principal, now_ms: u64) -> u64 {
        let limits = self.limits(principal);
        match self.buckets.get(principal) {
            Some(bucket) => bucket.tokens_at(&limits, now_ms),
            None => limits.write_burst.saturating_mul(MILLI),
        }
    }

    /// Whether `principal` may send one more write at `now_ms` while
    /// `in_flight` of its writes are on their way to being charged (the
    /// edge's count of proposals not yet applied; 0 at apply). The refusal
    /// carries the milliseconds until enough tokens are back.
    pub(crate) fn check_rate(&self, principal: &Principal, now_ms: u64, in_flight: u64) -> Result<(), DomainError> {
        let limits = self.limits(principal);
        let needed = in_flight.saturating_add(1).saturating_mul(MILLI);
        let tokens = self.tokens_milli(principal, now_ms);
        if tokens >= needed {
            return Ok(());
        }
        // The rate is at least 1 (check_change), so this divides.
        let retry_after_ms = (needed - tokens).div_ceil(limits.writes_per_second.max(1));
        Err(DomainError::quota_exceeded(
            QuotaKind::WriteRate,
            Some(retry_after_ms),
            format!(
                "{principal} is over its write rate of {} per second (burst {}); retry in {retry_after_ms} ms",
                limits.writes_per_second, limits.write_burst
            ),
        ))
    }

    /// Takes one token from `principal`'s bucket at `now_ms`; the caller
    /// checked [`Quotas::check_rate`] first.
    pub(crate) fn charge(&mut self, principal: &Principal, now_ms: u64) {
        let tokens = self.tokens_milli(principal, now_ms);
        assert!(tokens >= MILLI, "a write is charged only after its rate check");
        self.buckets.insert(principal.clone(), Bucket { tokens_milli: tokens - MILLI, updated_ms: now_ms });
    }

    /// Whether `principal` may open one more record of `kind` (a count
    /// quota) while `in_flight` of its writes are not yet applied (each
    /// counted as if it opened one).
    pub(crate) fn check_count(
        &self,
        principal: &Principal,
        kind: QuotaKind,
        in_flight: u64,
    ) -> Result<(), DomainError> {
        let limits = self.limits(principal);
        let usage = self.usage(principal);
        let (used, max, what) = match kind {
            QuotaKind::PendingApprovals => (usage.pending_approvals, limits.pending_approvals_max, "pending approvals"),
            QuotaKind::ActiveExecutions => {
                (usage.active_executions, limits.active_executions_max, "non-final executions")
            }
            QuotaKind::WriteRate => unreachable!("the write rate is not a count"),
        };
        if used.saturating_add(in_flight) < max {
            return Ok(());
        }
        Err(DomainError::quota_exceeded(
            kind,
            None,
            format!("{principal} has {used} {what}, its quota is {max}: finish or cancel some first"),
        ))
    }

    /// `principal` requested a pending approval.
    pub(crate) fn approval_opened(&mut self, principal: &Principal) {
        self.usage.entry(principal.clone()).or_default().pending_approvals += 1;
    }

    /// A pending approval `principal` requested was decided, cancelled or
    /// dropped by retention.
    pub(crate) fn approval_closed(&mut self, principal: &Principal) {
        self.decrement(principal, |usage| &mut usage.pending_approvals);
    }

    /// `principal` owns a new non-final execution.
    pub(crate) fn execution_opened(&mut self, principal: &Principal) {
        self.usage.entry(principal.clone()).or_default().active_executions += 1;
    }

    /// An execution `principal` owns was finalized.
    pub(crate) fn execution_finalized(&mut self, principal: &Principal) {
        self.decrement(principal, |usage| &mut usage.active_executions);
    }

    fn decrement(&mut self, principal: &Principal, counter: impl Fn(&mut QuotaUsage) -> &mut u64) {
        let usage = self.usage.get_mut(principal).expect("a closing record was counted when it opened");
        let count = counter(usage);
        assert!(*count > 0, "a closing record was counted when it opened");
        *count -= 1;
        if *usage == QuotaUsage::default() {
            self.usage.remove(principal);
        }
    }

    /// Drops the buckets that have refilled to their burst by `now_ms`: a
    /// missing bucket is a full one, so nothing changes but the state's
    /// size, which then holds only principals that wrote recently.
    pub(crate) fn forget_full_buckets(&mut self, now_ms: u64) {
        let overrides = &self.overrides;
        self.buckets.retain(|principal, bucket| {
            let limits = overrides.get(principal).copied().unwrap_or_default();
            bucket.tokens_at(&limits, now_ms) < limits.write_burst.saturating_mul(MILLI)
        });
    }
}

/// Refuses a change outside the bounds of [`crate::limits`], listing every problem.
pub(crate) fn check_change(change: &QuotaChange) -> Result<(), DomainError> {
    let mut problems = Vec::new();
    let mut bound = |field: &str, value: Option<u64>, min: u64, max: u64| {
        if let Some(value) = value.filter(|value| !(min..=max).contains(value)) {
            problems.push(format!("{field} {value} is outside {min}..={max}"));
        }
    };
    bound("pendingApprovals", change.pending_approvals_max, 0, QUOTA_COUNT_MAX);
    bound("activeExecutions", change.active_executions_max, 0, QUOTA_COUNT_MAX);
    bound("writesPerSecond", change.writes_per_second, 1, QUOTA_WRITES_PER_SECOND_MAX);
    bound("writeBurst", change.write_burst, 1, QUOTA_WRITE_BURST_MAX);
    if problems.is_empty() {
        return Ok(());
    }
    Err(DomainError::with_problems(
        ErrorCode::InvalidArgument,
        format!("invalid quota: {}", problems.join("; ")),
        problems,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bob() -> Principal {
        Principal::parse("user:bob").expect("a principal")
    }

    fn slow(quotas: &mut Quotas) {
        let change = QuotaChange { writes_per_second: Some(10), write_burst: Some(3), ..QuotaChange::default() };
        quotas.set(&bob(), &change).expect("a valid change");
    }

    #[test]
    fn the_bucket_empties_by_writes_and_refills_by_cluster_time() {
        let mut quotas = Quotas::default();
        slow(&mut quotas);
        for _ in 0..3 {
            quotas.check_rate(&bob(), 1_000, 0).expect("within the burst");
            quotas.charge(&bob(), 1_000);
        }
        let refused = quotas.check_rate(&bob(), 1_000, 0).expect_err("the burst is spent");
        let quota = refused.quota.expect("a quota refusal");
        assert_eq!(
            (refused.code, quota.kind, quota.retry_after_ms),
            (ErrorCode::QuotaExceeded, QuotaKind::WriteRate, Some(100))
        );
        // 10 per second: one token every 100 ms of cluster time, not before.
        assert!(quotas.check_rate(&bob(), 1_099, 0).is_err());
        quotas.check_rate(&bob(), 1_100, 0).expect("one token refilled");
        assert_eq!(quotas.view(&bob(), 1_100).write_tokens, 1);
        // Refill stops at the burst.
        assert_eq!(quotas.view(&bob(), 60_000).write_tokens, 3);
        // In-flight writes count against the bucket.
        assert_eq!(
            quotas.check_rate(&bob(), 1_100, 1).expect_err("one in flight").quota.and_then(|q| q.retry_after_ms),
            Some(100)
        );
    }

    #[test]
    fn full_buckets_are_forgotten_and_read_as_full() {
        let mut quotas = Quotas::default();
        slow(&mut quotas);
        quotas.charge(&bob(), 0);
        quotas.forget_full_buckets(50);
        assert_eq!(quotas.buckets.len(), 1, "not yet refilled");
        quotas.forget_full_buckets(100);
        assert!(quotas.buckets.is_empty());
        assert_eq!(quotas.view(&bob(), 100).write_tokens, 3);
    }

    #[test]
    fn counts_refuse_at_the_quota_and_say_how_to_get_below_it() {
        let mut quotas = Quotas::default();
        quotas.set(&bob(), &QuotaChange { pending_approvals_max: Some(2), ..QuotaChange::default() }).expect("valid");
        quotas.approval_opened(&bob());
        quotas.check_count(&bob(), QuotaKind::PendingApprovals, 0).expect("1 of 2");
        assert!(quotas.check_count(&bob(), QuotaKind::PendingApprovals, 1).is_err(), "one in flight fills it");
        quotas.approval_opened(&bob());
        let refused = quotas.check_count(&bob(), QuotaKind::PendingApprovals, 0).expect_err("2 of 2");
        assert!(refused.message.contains("finish or cancel"), "{}", refused.message);
        assert_eq!(refused.quota.and_then(|quota| quota.retry_after_ms), None, "a count has no retry time");
        quotas.approval_closed(&bob());
        quotas.approval_closed(&bob());
        assert!(quotas.usage.is_empty(), "a principal with no usage is not kept");
    }

    #[test]
    fn a_change_keeps_unnamed_limits_and_a_reset_returns_to_the_defaults() {
        let mut quotas = Quotas::default();
        slow(&mut quotas);
        let limits = quotas
            .set(&bob(), &QuotaChange { active_executions_max: Some(5), ..QuotaChange::default() })
            .expect("valid");
        assert_eq!((limits.writes_per_second, limits.write_burst, limits.active_executions_max), (10, 3, 5));
        quotas.set(&bob(), &QuotaChange { reset: true, ..QuotaChange::default() }).expect("valid");
        assert!(quotas.overrides.is_empty(), "the defaults are no override");
        let refused = quotas
            .set(
                &bob(),
                &QuotaChange {
                    writes_per_second: Some(0),
                    write_burst: Some(QUOTA_WRITE_BURST_MAX + 1),
                    ..QuotaChange::default()
                },
            )
            .expect_err("out of bounds");
        assert_eq!((refused.code, refused.problems.len()), (ErrorCode::InvalidArgument, 2));
    }
}
