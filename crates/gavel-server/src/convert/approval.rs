//! Approval messages.

use gavel_core::{Approval, ApprovalFilter, ApprovalStatus, Caller, Command, CreateApproval, DomainError, ListOrder};
use gavel_proto::v1 as pb;

use super::common::{
    actor_or_caller, actor_out, page_size_in, risk_in, risk_out, side_effect_in, side_effect_out, status_out,
    time_page_token_in, time_page_token_out, timestamp_in, timestamp_out,
};
use crate::replies::ApprovalReply;

/// Decodes a decision status; unspecified is refused.
pub fn status_in(value: i32) -> Result<ApprovalStatus, DomainError> {
    status_named(value).ok_or_else(|| DomainError::invalid("invalid decision status"))
}

/// Decodes a status filter of a list request.
pub fn status_filter_in(value: i32) -> Result<ApprovalStatus, DomainError> {
    status_named(value)
        .ok_or_else(|| DomainError::invalid(format!("status filter {value} is not a known approval status")))
}

fn status_named(value: i32) -> Option<ApprovalStatus> {
    match pb::ApprovalStatus::try_from(value) {
        Ok(pb::ApprovalStatus::Pending) => Some(ApprovalStatus::Pending),
        Ok(pb::ApprovalStatus::Approved) => Some(ApprovalStatus::Approved),
        Ok(pb::ApprovalStatus::Rejected) => Some(ApprovalStatus::Rejected),
        Ok(pb::ApprovalStatus::Cancelled) => Some(ApprovalStatus::Cancelled),
        Ok(pb::ApprovalStatus::Expired) => Some(ApprovalStatus::Expired),
        Ok(pb::ApprovalStatus::Consumed) => Some(ApprovalStatus::Consumed),
        Ok(pb::ApprovalStatus::Voided) => Some(ApprovalStatus::Voided),
        Ok(pb::ApprovalStatus::Unspecified) | Err(_) => None,
    }
}

/// Encodes an approval with its status as seen at read time.
pub fn approval_out(approval: &Approval, status: ApprovalStatus) -> pb::Approval {
    pb::Approval {
        id: approval.id.clone(),
        capability_id: approval.capability_id.clone(),
        surface: approval.surface.clone(),
        actor: Some(actor_out(&approval.actor)),
        input_json: approval.input_json.clone(),
        input_hash: approval.input_hash.clone(),
        reasons: approval.reasons.clone(),
        types: approval.types.clone(),
        risk: risk_out(approval.risk),
        side_effect: side_effect_out(approval.side_effect),
        requested_at_ms: timestamp_out(approval.requested_at_ms),
        expires_at_ms: timestamp_out(approval.expires_at_ms),
        allow_self_approval: approval.allow_self_approval,
        status: status_out(status),
        decision: approval.decision.as_ref().map(|decision| pb::Decision {
            status: status_out(decision.status),
            approver: Some(actor_out(&decision.approver)),
            comment: decision.comment.clone(),
            decided_at_ms: timestamp_out(decision.decided_at_ms),
        }),
        consumed_by_execution_id: approval.consumed_by_execution_id.clone(),
        execution_id: approval.execution_id.clone(),
        capability_version: approval.capability_version,
        quorum: approval.quorum.as_ref().map(quorum_out),
        standing: approval.standing.as_ref().map(|standing| pb::StandingProgress {
            terms: Some(pb::StandingTerms {
                uses_max: standing.spec.uses_max,
                window_ms: standing.spec.window_ms,
                bound_pointers: standing.spec.bound_pointers.clone(),
            }),
            used_by: standing.used_by.clone(),
        }),
        terms_json: gavel_core::terms::terms_json(approval),
        terms_hash: approval.terms_hash.clone(),
        controls: None,
    }
}

/// Encodes what a reading caller may do with an approval.
pub fn controls_out(controls: &gavel_core::DecisionControls) -> pb::DecisionControls {
    pb::DecisionControls {
        may_decide: controls.may_decide,
        may_withdraw: controls.may_withdraw,
        refusal_code: controls.refusal.as_ref().map(|refusal| refusal.code.as_str().to_string()).unwrap_or_default(),
        refusal: controls.refusal.as_ref().map(|refusal| refusal.message.clone()).unwrap_or_default(),
    }
}

/// Encodes an approval as `caller` reads it at `now_ms`: with its status
/// then and what the caller may do with it ([`controls_out`]).
pub fn approval_read_out(
    state: &gavel_core::State,
    caller: Option<&Caller>,
    approval: &Approval,
    now_ms: u64,
) -> pb::Approval {
    pb::Approval {
        controls: Some(controls_out(&state.decision_controls(caller, approval, now_ms))),
        ..approval_out(approval, approval.status_at(now_ms))
    }
}

/// Encodes an approval's quorum progress.
pub fn quorum_out(quorum: &gavel_core::Quorum) -> pb::Quorum {
    let counted = quorum.counted();
    let factor_name = |index: u32| quorum.factors[index as usize].0.clone();
    pb::Quorum {
        policy: quorum.policy.clone(),
        policy_version: quorum.policy_version,
        factors: quorum
            .factors
            .iter()
            .zip(counted)
            .map(|((name, k), counted)| pb::FactorProgress { name: name.clone(), k: *k, counted })
            .collect(),
        deny_threshold: quorum.deny_threshold,
        denials: quorum.denials(),
        votes: quorum
            .votes
            .iter()
            .map(|vote| pb::Vote {
                principal: vote.principal.to_string(),
                approver: Some(actor_out(&vote.approver)),
                approve: vote.approve,
                eligible_factors: vote.eligible.iter().map(|index| factor_name(*index)).collect(),
                factor: vote.factor.map(factor_name),
                input_hash: vote.input_hash.clone(),
                self_approval: vote.self_approval,
                comment: vote.comment.clone(),
                cast_at_ms: timestamp_out(vote.cast_at_ms),
            })
            .collect(),
    }
}

/// Decodes a create request. `expires_in_ms` travels as is: the state
/// machine resolves it against requested-at (which defaults to the cluster
/// clock), so the command, and its deduplication fingerprint, do not depend
/// on which node converted it or when.
pub fn create_in(request: &pb::CreateApprovalRequest, caller: Option<&Caller>) -> Result<Command, DomainError> {
    let caller_now_ms = timestamp_in("callerNowMs", request.caller_now_ms)?;
    let requested_at_ms = timestamp_in("requestedAtMs", request.requested_at_ms)?;
    let expires_at_ms = timestamp_in("expiresAtMs", request.expires_at_ms)?;
    let risk = risk_in(request.risk)?.ok_or_else(|| DomainError::invalid("risk is required"))?;
    let side_effect =
        side_effect_in(request.side_effect)?.ok_or_else(|| DomainError::invalid("sideEffect is required"))?;
    let approval = CreateApproval {
        id: request.id.clone(),
        capability_id: request.capability_id.clone(),
        surface: request.surface.clone(),
        actor: actor_or_caller("actor", request.actor.as_ref(), caller)?,
        input_json: request.input_json.clone(),
        input_hash: request.input_hash.clone(),
        reasons: request.reasons.clone(),
        types: request.types.clone(),
        risk,
        side_effect,
        requested_at_ms,
        expires_at_ms,
        expires_in_ms: request.expires_in_ms,
        allow_self_approval: request.allow_self_approval,
        caller_now_ms,
    };
    Ok(match &request.standing {
        Some(terms) => Command::CreateStandingApproval {
            request: approval,
            standing: gavel_core::StandingSpec {
                uses_max: terms.uses_max,
                window_ms: terms.window_ms,
                bound_pointers: terms.bound_pointers.clone(),
            },
        },
        None => Command::CreateApproval(approval),
    })
}

/// Decodes a decide request.
pub fn decide_in(request: &pb::DecideApprovalRequest, caller: Option<&Caller>) -> Result<Command, DomainError> {
    let status = status_in(request.status)?;
    let approver = actor_or_caller("approver", request.approver.as_ref(), caller)
        .map_err(|error| DomainError { code: gavel_core::ErrorCode::InvalidArgument, ..error })?;
    Ok(Command::DecideApproval {
        approval_id: request.id.clone(),
        status,
        approver,
        comment: request.comment.clone(),
        caller_now_ms: timestamp_in("callerNowMs", request.caller_now_ms)?,
        terms_hash: request.terms_hash.clone(),
    })
}

/// Decodes a consume request.
pub fn consume_in(request: &pb::ConsumeApprovalRequest) -> Result<Command, DomainError> {
    Ok(Command::ConsumeApproval {
        approval_id: request.id.clone(),
        execution_id: request.execution_id.clone(),
        caller_now_ms: timestamp_in("callerNowMs", request.caller_now_ms)?,
    })
}

/// Decodes a cancel request.
pub fn cancel_in(request: &pb::CancelApprovalRequest) -> Result<Command, DomainError> {
    Ok(Command::CancelApproval {
        approval_id: request.id.clone(),
        caller_now_ms: timestamp_in("callerNowMs", request.caller_now_ms)?,
    })
}

/// Encodes the approval a command answered with.
pub fn approval_reply_out(reply: &ApprovalReply) -> pb::Approval {
    approval_out(&reply.approval, reply.status)
}

/// A decoded `ListApprovals` request.
#[derive(Debug)]
pub struct ApprovalsQuery {
    /// Which approvals.
    pub filter: ApprovalFilter,
    /// The caller's clock for lazy expiry, if it gave one.
    pub caller_now_ms: Option<u64>,
    /// Start after this `(requestedAtMs, id)` (before it, newest first).
    pub after: Option<(u64, String)>,
    /// Oldest or newest first.
    pub order: ListOrder,
    /// Page size.
    pub limit: usize,
}

/// Decodes a list request: newest first unless it asks for oldest first
/// (`newest_first`, the old way to ask for the default, changes nothing).
pub fn list_in(request: &pb::ListApprovalsRequest) -> Result<ApprovalsQuery, DomainError> {
    let limit = page_size_in(request.limit)?;
    Ok(ApprovalsQuery {
        filter: ApprovalFilter {
            status: request.status.map(status_filter_in).transpose()?,
            capability_id: request.capability_id.clone(),
            actor_id: request.actor_id.clone(),
            // Set by the handler from the caller's grants.
            readable_by: None,
        },
        caller_now_ms: timestamp_in("callerNowMs", request.caller_now_ms)?,
        after: time_page_token_in(&request.page_token)?,
        order: if request.oldest_first { ListOrder::OldestFirst } else { ListOrder::NewestFirst },
        limit,
    })
}

/// Encodes one page of approvals with their status at `now_ms`, and the
/// token of the next page when this one is full.
pub fn approvals_page_out(
    state: &gavel_core::State,
    caller: Option<&Caller>,
    page: &[&Approval],
    limit: usize,
    now_ms: u64,
) -> pb::ListApprovalsResponse {
    let next = page.last().filter(|_| page.len() == limit).map(|last| (last.requested_at_ms, last.id.clone()));
    let next_page_token = time_page_token_out(next.as_ref());
    let approvals = page.iter().map(|approval| approval_read_out(state, caller, approval, now_ms)).collect();
    pb::ListApprovalsResponse { approvals, next_page_token }
}
