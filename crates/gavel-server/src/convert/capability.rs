//! Capability messages.

use gavel_core::{ApprovalPolicySpec, Capability, CapabilitySpec, RetrySpec};
use gavel_proto::v1 as pb;

use super::common::{risk_in, risk_out, side_effect_in, side_effect_out, timestamp_out};
use gavel_core::DomainError;

/// Decodes a declaration. Unspecified enums stay `None` so the registry reports
/// them together with every other problem.
pub fn spec_in(spec: &pb::CapabilitySpec) -> Result<CapabilitySpec, DomainError> {
    Ok(CapabilitySpec {
        id: spec.id.clone(),
        side_effect: side_effect_in(spec.side_effect)?,
        risk: risk_in(spec.risk)?,
        idempotent: spec.idempotent,
        retry: spec.retry.as_ref().map(|retry| RetrySpec {
            attempts_max: retry.max_attempts,
            backoff_ms: retry.backoff_ms,
            non_retryable_codes: retry.non_retryable_codes.clone(),
        }),
        timeout_ms: spec.timeout_ms,
        heartbeat_timeout_ms: spec.heartbeat_timeout_ms,
        approval: spec.approval.as_ref().map(|approval| ApprovalPolicySpec {
            required: approval.required,
            approval_type: approval.r#type.clone(),
            expires_in_ms: approval.expires_in_ms,
        }),
        queue: spec.queue.clone(),
        tags: spec.tags.clone(),
    })
}

/// Encodes a registered capability with its defaults resolved.
pub fn capability_out(capability: &Capability) -> pb::Capability {
    pb::Capability {
        spec: Some(pb::CapabilitySpec {
            id: capability.id.clone(),
            side_effect: side_effect_out(capability.side_effect),
            risk: risk_out(capability.risk),
            idempotent: capability.idempotent,
            retry: capability.retry.as_ref().map(|retry| pb::RetryConfig {
                max_attempts: retry.attempts_max,
                backoff_ms: Some(retry.backoff_ms),
                non_retryable_codes: retry.non_retryable_codes.clone(),
            }),
            timeout_ms: Some(capability.timeout_ms),
            heartbeat_timeout_ms: capability.heartbeat_timeout_ms,
            approval: capability.approval.as_ref().map(|approval| pb::ApprovalPolicy {
                required: approval.required,
                r#type: approval.approval_type.clone(),
                expires_in_ms: Some(approval.expires_in_ms),
            }),
            queue: Some(capability.queue.clone()),
            tags: capability.tags.clone(),
        }),
        version: capability.version,
        registered_at_ms: timestamp_out(capability.registered_at_ms),
    }
}
