//! Policy messages: policies, their factors, and votes.

use gavel_core::{Approvers, Caller, Command, DomainError, Factor, Policy, PolicySpec};
use gavel_proto::v1 as pb;

use super::access::principal_in;
use super::common::{actor_or_caller, risk_in, risk_out, side_effect_in, side_effect_out, timestamp_out};

/// Decodes one factor: exactly one of a scope and a group.
fn factor_in(index: usize, factor: &pb::PolicyFactor) -> Result<Factor, DomainError> {
    let approvers = match (&factor.scope, factor.group.is_empty()) {
        (Some(scope), true) => Approvers::Scope(scope.clone()),
        (None, false) => Approvers::Group(
            factor
                .group
                .iter()
                .map(|member| principal_in(&format!("factors[{index}].group"), member))
                .collect::<Result<_, _>>()?,
        ),
        _ => {
            return Err(DomainError::invalid(format!(
                "factors[{index}] ({}) must set exactly one of scope and group",
                factor.name
            )))
        }
    };
    Ok(Factor { name: factor.name.clone(), k: factor.k, approvers })
}

/// Encodes one factor.
fn factor_out(factor: &Factor) -> pb::PolicyFactor {
    let (scope, group) = match &factor.approvers {
        Approvers::Scope(scope) => (Some(scope.clone()), Vec::new()),
        Approvers::Group(group) => (None, group.iter().map(ToString::to_string).collect()),
    };
    pb::PolicyFactor { name: factor.name.clone(), k: factor.k, scope, group }
}

/// Decodes a set request.
pub fn set_in(request: &pb::SetPolicyRequest) -> Result<Command, DomainError> {
    let factors =
        request.factors.iter().enumerate().map(|(index, factor)| factor_in(index, factor)).collect::<Result<_, _>>()?;
    Ok(Command::SetPolicy(PolicySpec {
        name: request.name.clone(),
        approval_types: request.approval_types.iter().cloned().collect(),
        capability_ids: request.capability_ids.iter().cloned().collect(),
        risks: request
            .risks
            .iter()
            .map(|risk| risk_in(*risk)?.ok_or_else(|| DomainError::invalid("risks: RISK_UNSPECIFIED is not a risk")))
            .collect::<Result<_, _>>()?,
        side_effects: request
            .side_effects
            .iter()
            .map(|side_effect| {
                side_effect_in(*side_effect)?
                    .ok_or_else(|| DomainError::invalid("sideEffects: SIDE_EFFECT_UNSPECIFIED is not a side effect"))
            })
            .collect::<Result<_, _>>()?,
        factors,
        deny_threshold: request.deny_threshold,
        non_retroactive: request.non_retroactive,
        forbid_standing: request.forbid_standing,
    }))
}

/// Encodes a policy.
pub fn policy_out(policy: &Policy) -> pb::Policy {
    pb::Policy {
        name: policy.name.clone(),
        version: policy.version,
        approval_types: policy.approval_types.iter().cloned().collect(),
        capability_ids: policy.capability_ids.iter().cloned().collect(),
        risks: policy.risks.iter().map(|risk| risk_out(*risk)).collect(),
        side_effects: policy.side_effects.iter().map(|side_effect| side_effect_out(*side_effect)).collect(),
        factors: policy.factors.iter().map(factor_out).collect(),
        deny_threshold: policy.deny_threshold,
        set_at_ms: timestamp_out(policy.set_at_ms),
        forbid_standing: policy.forbid_standing,
    }
}

/// Decodes a vote; the approver defaults to the caller.
pub fn vote_in(request: &pb::CastVoteRequest, caller: Option<&Caller>) -> Result<Command, DomainError> {
    Ok(Command::CastVote {
        approval_id: request.approval_id.clone(),
        approve: request.approve,
        input_hash: request.input_hash.clone(),
        approver: actor_or_caller("approver", request.approver.as_ref(), caller)?,
        comment: request.comment.clone(),
        terms_hash: request.terms_hash.clone(),
    })
}

/// Decodes a withdrawal; the approver defaults to the caller.
pub fn withdraw_in(request: &pb::WithdrawVoteRequest, caller: Option<&Caller>) -> Result<Command, DomainError> {
    Ok(Command::WithdrawVote {
        approval_id: request.approval_id.clone(),
        approver: actor_or_caller("approver", request.approver.as_ref(), caller)?,
    })
}
