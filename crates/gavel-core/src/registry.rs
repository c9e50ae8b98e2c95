//! The capability registry: validation (every problem at once) and versioning.

use crate::audit::EventKind;
use crate::command::CapabilitySpec;
use crate::error::{DomainError, ErrorCode};
use crate::limits::{APPROVAL_EXPIRES_IN_MS_MAX, BACKOFF_MS_MAX, RETRY_ATTEMPTS_MAX, TIMEOUT_MS_MAX};
use crate::machine::{EventSubject, State};
use crate::model::{Actor, ApprovalPolicy, Capability, RetryConfig};
use crate::validate::Problems;

/// Default per-attempt timeout (SPEC §2).
pub const DEFAULT_TIMEOUT_MS: u64 = 30_000;
/// Default base backoff (SPEC §2).
pub const DEFAULT_BACKOFF_MS: u64 = 250;
/// Default approval validity (SPEC §2): 15 minutes.
pub const DEFAULT_APPROVAL_EXPIRES_IN_MS: u64 = 900_000;

/// Validates a declaration and resolves its defaults, reporting every problem at once.
pub fn resolve_capability(
    spec: &CapabilitySpec,
    version: u64,
    registered_at_ms: u64,
) -> Result<Capability, DomainError> {
    let mut problems = Problems::new();
    problems.id("id", &spec.id);
    if spec.side_effect.is_none() {
        problems.push("sideEffect is required (none, read, write, destructive or external)".to_string());
    }
    if spec.risk.is_none() {
        problems.push("risk is required (low, medium, high or critical)".to_string());
    }
    check_duration(&mut problems, "timeoutMs", spec.timeout_ms, TIMEOUT_MS_MAX);
    check_duration(&mut problems, "heartbeatTimeoutMs", spec.heartbeat_timeout_ms, TIMEOUT_MS_MAX);
    if let Some(retry) = &spec.retry {
        if retry.attempts_max > RETRY_ATTEMPTS_MAX {
            problems
                .push(format!("retry.maxAttempts {} is over the limit of {RETRY_ATTEMPTS_MAX}", retry.attempts_max));
        }
        if retry.backoff_ms.is_some_and(|backoff| backoff > BACKOFF_MS_MAX) {
            problems.push(format!("retry.backoffMs is over the limit of {BACKOFF_MS_MAX}"));
        }
        problems.list("retry.nonRetryableCodes", &retry.non_retryable_codes);
        if spec.side_effect.is_some_and(|effect| effect.is_write_like()) && !spec.idempotent {
            problems.push("retry on a write, destructive or external capability requires idempotent: true".to_string());
        }
    }
    if let Some(approval) = &spec.approval {
        check_duration(&mut problems, "approval.expiresInMs", approval.expires_in_ms, APPROVAL_EXPIRES_IN_MS_MAX);
        problems.text("approval.type", approval.approval_type.as_deref());
    }
    if let Some(queue) = &spec.queue {
        problems.id("queue", queue);
    }
    problems.list("tags", &spec.tags);
    problems.into_result(ErrorCode::CapabilityInvalid, &format!("capability \"{}\" is invalid", spec.id))?;
    let (Some(side_effect), Some(risk)) = (spec.side_effect, spec.risk) else {
        unreachable!("missing side effect or risk was reported as a problem above");
    };
    Ok(Capability {
        id: spec.id.clone(),
        version,
        registered_at_ms,
        side_effect,
        risk,
        idempotent: spec.idempotent,
        retry: spec.retry.as_ref().map(|retry| RetryConfig {
            attempts_max: retry.attempts_max,
            backoff_ms: retry.backoff_ms.unwrap_or(DEFAULT_BACKOFF_MS),
            non_retryable_codes: retry.non_retryable_codes.clone(),
        }),
        timeout_ms: spec.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS),
        heartbeat_timeout_ms: spec.heartbeat_timeout_ms,
        approval: spec.approval.as_ref().map(|approval| ApprovalPolicy {
            required: approval.required,
            approval_type: approval.approval_type.clone(),
            expires_in_ms: approval.expires_in_ms.unwrap_or(DEFAULT_APPROVAL_EXPIRES_IN_MS),
        }),
        queue: spec.queue.clone().unwrap_or_else(|| spec.id.clone()),
        tags: spec.tags.clone(),
    })
}

fn check_duration(problems: &mut Problems, field: &str, value: Option<u64>, max: u64) {
    match value {
        Some(0) => problems.push(format!("{field} must be positive")),
        Some(value) if value > max => problems.push(format!("{field} {value} is over the limit of {max}")),
        _ => {}
    }
}

/// True when two capabilities declare the same thing (ignoring version and time).
fn same_declaration(a: &Capability, b: &Capability) -> bool {
    Capability { version: 0, registered_at_ms: 0, ..a.clone() }
        == Capability { version: 0, registered_at_ms: 0, ..b.clone() }
}

impl State {
    /// Registers a capability. Re-registering an identical declaration returns
    /// the existing version (so applications can register at every start);
    /// a changed declaration becomes the next version.
    pub(crate) fn register_capability(&mut self, spec: &CapabilitySpec) -> Result<Capability, DomainError> {
        let latest = self.capability(&spec.id, None).cloned();
        let version = latest.as_ref().map_or(1, |latest| latest.version + 1);
        let capability = resolve_capability(spec, version, self.clock_ms)?;
        if let Some(latest) = latest.filter(|latest| same_declaration(latest, &capability)) {
            return Ok(latest);
        }
        self.capabilities.entry(capability.id.clone()).or_default().insert(version, capability.clone());
        self.capability_latest.insert(capability.id.clone(), version);
        let subject = EventSubject { capability_id: Some(&capability.id), ..EventSubject::default() };
        self.emit(EventKind::CapabilityRegistered { version }, &Actor::system(), subject);
        Ok(capability)
    }
}
