//! The capability registry (a part of [`crate::State`]): validation of a
//! declaration (every problem at once) and its immutable versions.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::command::CapabilitySpec;
use crate::error::{DomainError, ErrorCode};
use crate::limits::{APPROVAL_EXPIRES_IN_MS_MAX, BACKOFF_MS_MAX, RETRY_ATTEMPTS_MAX, TIMEOUT_MS_MAX};
use crate::model::{ApprovalPolicy, Capability, Execution, RetryConfig};
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
    problems.record_id("id", &spec.id);
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

/// Every capability version ever registered, and the latest per id.
///
/// Invariant: `latest[id]` names a version in `versions[id]`. Versions are
/// immutable and never removed (an execution refers to the version it was
/// submitted under), so the registry has no expiry and no compaction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub(crate) struct Registry {
    /// Every capability version, by id and then version. Nested rather than
    /// keyed by (id, version) so that a lookup by `&str` needs no allocated key.
    versions: BTreeMap<String, BTreeMap<u64, Capability>>,
    /// Latest version per capability id.
    latest: BTreeMap<String, u64>,
}

/// What [`Registry::register`] did.
pub(crate) enum Registered<'a> {
    /// The declaration equals the latest version, which is returned unchanged.
    Unchanged(&'a Capability),
    /// The declaration became this new version.
    New(&'a Capability),
}

impl Registry {
    /// Registers a capability. Re-registering an identical declaration returns
    /// the existing version (so applications can register at every start);
    /// a changed declaration becomes the next version.
    pub(crate) fn register(&mut self, spec: &CapabilitySpec, now_ms: u64) -> Result<Registered<'_>, DomainError> {
        let latest = self.get(&spec.id, None);
        let version = latest.map_or(1, |latest| latest.version + 1);
        let capability = resolve_capability(spec, version, now_ms)?;
        if latest.is_some_and(|latest| same_declaration(latest, &capability)) {
            return Ok(Registered::Unchanged(self.get(&spec.id, None).expect("the latest version was just read")));
        }
        let id = capability.id.clone();
        self.latest.insert(id.clone(), version);
        let stored = self.versions.entry(id).or_default().entry(version).or_insert(capability);
        Ok(Registered::New(stored))
    }

    /// A capability's latest version, or a given one.
    pub(crate) fn get(&self, id: &str, version: Option<u64>) -> Option<&Capability> {
        let version = version.or_else(|| self.latest.get(id).copied())?;
        self.versions.get(id)?.get(&version)
    }

    /// The latest version of every capability, by id.
    pub(crate) fn latest_versions(&self) -> Vec<&Capability> {
        self.latest.iter().filter_map(|(id, version)| self.versions.get(id)?.get(version)).collect()
    }

    /// The capability version an execution was submitted under.
    pub(crate) fn of_execution(&self, execution: &Execution) -> &Capability {
        self.versions
            .get(&execution.capability_id)
            .and_then(|versions| versions.get(&execution.capability_version))
            .expect("capability versions are never removed while an execution references them")
    }
}
