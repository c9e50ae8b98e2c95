//! The SI-11 retry rule, as one pure function: may a failed attempt run
//! again, and after how long? It reads only the capability, the attempts made
//! and why the attempt failed, so every rule of SPEC §4 is tested here without
//! a state machine.

use crate::limits::BACKOFF_MS_CAP;
use crate::model::Capability;

/// Error code of an attempt whose lease passed its deadline.
pub const TIMEOUT_CODE: &str = "TIMEOUT";
/// Error code of an attempt whose worker stopped heartbeating.
pub const WORKER_LOST_CODE: &str = "WORKER_LOST";

/// Why an attempt ended without a result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttemptFailure {
    /// The worker reported a failure.
    Reported {
        /// The worker's error code.
        code: String,
        /// The worker's message.
        message: String,
        /// Whether the worker considers it retryable.
        retryable: bool,
    },
    /// The per-attempt deadline passed.
    Timeout,
    /// The worker missed its heartbeats.
    WorkerLost,
}

impl AttemptFailure {
    /// The error code the failure is known by (`TIMEOUT` and `WORKER_LOST`
    /// for the two the state machine detects itself).
    pub fn code(&self) -> &str {
        match self {
            AttemptFailure::Reported { code, .. } => code,
            AttemptFailure::Timeout => TIMEOUT_CODE,
            AttemptFailure::WorkerLost => WORKER_LOST_CODE,
        }
    }
}

/// `backoffMs × 2^(n-1)` before attempt n+1, capped so it never overflows.
pub fn backoff_ms(base_ms: u64, attempts_so_far: u32) -> u64 {
    let exponent = attempts_so_far.saturating_sub(1).min(40);
    base_ms.saturating_mul(1u64 << exponent).min(BACKOFF_MS_CAP)
}

/// The SI-11 rule: `Some(backoff)` when the attempt that failed (the
/// `attempts`-th) may be retried after `backoff` ms, `None` when the
/// execution must be finalized. A retry needs all of:
///
/// - a retryable error: a reported failure the worker marked retryable, or a
///   timeout or lost worker, and in either case a code the capability does
///   not list as non-retryable;
/// - budget left: a retry config with `attempts_max > 0` and no more attempts
///   made than it allows;
/// - the side-effect clause: a write-like capability only when it is
///   idempotent (registration already refuses a retry config otherwise).
pub fn retry_after_ms(capability: &Capability, attempts: u32, failure: &AttemptFailure) -> Option<u64> {
    let retry = capability.retry.as_ref();
    let budget_left = retry.is_some_and(|retry| retry.attempts_max > 0 && attempts <= retry.attempts_max);
    let eligible = budget_left && error_retryable(capability, failure) && capability.retry_allowed_by_side_effect();
    eligible.then(|| backoff_ms(retry.map_or(0, |retry| retry.backoff_ms), attempts))
}

/// Whether `failure` is an error the capability may be retried after: a
/// reported failure the worker marked retryable, or a timeout or lost
/// worker, and in either case a code the capability does not list as
/// non-retryable.
pub(crate) fn error_retryable(capability: &Capability, failure: &AttemptFailure) -> bool {
    let retry = capability.retry.as_ref();
    let non_retryable = |code: &str| retry.is_some_and(|retry| retry.non_retryable_codes.iter().any(|c| c == code));
    match failure {
        AttemptFailure::Reported { retryable, code, .. } => *retryable && !non_retryable(code),
        AttemptFailure::Timeout | AttemptFailure::WorkerLost => !non_retryable(failure.code()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{RetryConfig, Risk, SideEffect};

    fn capability(side_effect: SideEffect, idempotent: bool, retry: Option<RetryConfig>) -> Capability {
        Capability {
            id: "cap".to_string(),
            version: 1,
            registered_at_ms: 0,
            side_effect,
            risk: Risk::Low,
            idempotent,
            retry,
            timeout_ms: 1_000,
            heartbeat_timeout_ms: None,
            approval: None,
            queue: "cap".to_string(),
            tags: Vec::new(),
        }
    }

    fn retry(attempts_max: u32, backoff_ms: u64, non_retryable: &[&str]) -> Option<RetryConfig> {
        Some(RetryConfig {
            attempts_max,
            backoff_ms,
            non_retryable_codes: non_retryable.iter().map(|code| code.to_string()).collect(),
        })
    }

    fn reported(code: &str, retryable: bool) -> AttemptFailure {
        AttemptFailure::Reported { code: code.to_string(), message: "m".to_string(), retryable }
    }

    #[test]
    fn a_retryable_failure_within_budget_is_retried_with_exponential_backoff() {
        let read = capability(SideEffect::Read, false, retry(3, 100, &[]));
        assert_eq!(retry_after_ms(&read, 1, &reported("E", true)), Some(100));
        assert_eq!(retry_after_ms(&read, 2, &reported("E", true)), Some(200));
        assert_eq!(retry_after_ms(&read, 3, &reported("E", true)), Some(400));
        assert_eq!(retry_after_ms(&read, 4, &reported("E", true)), None, "the budget is spent");
    }

    #[test]
    fn a_failure_the_worker_marks_non_retryable_or_the_capability_lists_is_final() {
        let read = capability(SideEffect::Read, false, retry(3, 100, &["BAD", TIMEOUT_CODE]));
        assert_eq!(retry_after_ms(&read, 1, &reported("E", false)), None);
        assert_eq!(retry_after_ms(&read, 1, &reported("BAD", true)), None);
        assert_eq!(retry_after_ms(&read, 1, &AttemptFailure::Timeout), None);
        assert_eq!(retry_after_ms(&read, 1, &AttemptFailure::WorkerLost), Some(100));
    }

    #[test]
    fn without_a_retry_config_or_with_zero_attempts_nothing_is_retried() {
        let none = capability(SideEffect::Read, false, None);
        assert_eq!(retry_after_ms(&none, 1, &reported("E", true)), None);
        let zero = capability(SideEffect::Read, false, retry(0, 100, &[]));
        assert_eq!(retry_after_ms(&zero, 1, &AttemptFailure::Timeout), None);
    }

    #[test]
    fn a_write_is_retried_only_when_idempotent() {
        for side_effect in [SideEffect::Write, SideEffect::Destructive, SideEffect::External] {
            let unsafe_write = capability(side_effect, false, retry(3, 0, &[]));
            assert_eq!(retry_after_ms(&unsafe_write, 1, &reported("E", true)), None, "{side_effect:?}");
            let idempotent = capability(side_effect, true, retry(3, 0, &[]));
            assert_eq!(retry_after_ms(&idempotent, 1, &reported("E", true)), Some(0), "{side_effect:?}");
        }
    }

    #[cfg(feature = "mutants")]
    #[test]
    fn the_planted_bug_retries_a_write_without_retry_config_once() {
        use crate::mutants::retry_non_idempotent_ms;
        let write = capability(SideEffect::Write, false, None);
        assert_eq!(retry_after_ms(&write, 1, &reported("E", true)), None, "the rule itself refuses");
        assert_eq!(retry_non_idempotent_ms(&write, 1, &reported("E", true)), Some(0));
        assert_eq!(retry_non_idempotent_ms(&write, 2, &reported("E", true)), None, "only once");
        assert_eq!(retry_non_idempotent_ms(&write, 1, &reported("E", false)), None);
    }

    #[test]
    fn backoff_is_capped_and_never_overflows() {
        assert_eq!(backoff_ms(0, 5), 0);
        assert_eq!(backoff_ms(250, 0), 250);
        assert_eq!(backoff_ms(250, 1), 250);
        assert_eq!(backoff_ms(250, 3), 1_000);
        assert_eq!(backoff_ms(u64::MAX, 100), BACKOFF_MS_CAP);
    }
}
