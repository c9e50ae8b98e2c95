//! Approvals (SPEC §3): create, decide, consume, cancel. Compatible with
//! orpc-agent's `ApprovalCoordinator`, with every transition a compare-and-set
//! inside one replicated command.

use crate::audit::EventKind;
use crate::command::{CreateApproval, Reply};
use crate::error::{DomainError, ErrorCode};
use crate::machine::{EventSubject, State};
use crate::model::{Actor, Approval, ApprovalStatus, StoredApprovalStatus};
use crate::registry::DEFAULT_APPROVAL_EXPIRES_IN_MS;
use crate::validate::{check_actor, invalid_if_any, Problems};

/// Only a pending, unexpired approval may be decided or cancelled.
fn require_pending(approval: &Approval, now_ms: u64) -> Result<(), DomainError> {
    let current = approval.status_at(now_ms);
    if current == ApprovalStatus::Pending {
        return Ok(());
    }
    Err(DomainError::new(
        ErrorCode::FailedPrecondition,
        format!("approval {} is not pending (status: {})", approval.id, current.as_str()),
    ))
}

pub(crate) fn not_found(id: &str) -> DomainError {
    DomainError::new(ErrorCode::NotFound, format!("approval {id} was not found"))
}

impl State {
    /// The time an approval command compares against: the caller's clock when
    /// given (orpc-agent injects a clock into its coordinators), else the cluster's.
    fn approval_now(&self, caller_now_ms: Option<u64>) -> u64 {
        caller_now_ms.unwrap_or(self.clock_ms)
    }

    fn approval_reply(&self, id: &str, now_ms: u64) -> Reply {
        let approval = self.approvals.get(id).expect("the approval was just written").clone();
        let status = approval.status_at(now_ms);
        Reply::Approval { approval, status }
    }

    pub(crate) fn create_approval(&mut self, request: &CreateApproval) -> Result<Reply, DomainError> {
        let (input_json, input_hash) = crate::precheck::create_approval(request)?;
        if let Some(given) = &request.input_hash {
            if *given != input_hash {
                return Err(DomainError::invalid(format!(
                    "inputHash {given} does not match the input (its canonical hash is {input_hash})"
                )));
            }
        }
        let now_ms = self.approval_now(request.caller_now_ms);
        let requested_at_ms = request.requested_at_ms.unwrap_or(now_ms);
        let expires_in_ms = request.expires_in_ms.unwrap_or(DEFAULT_APPROVAL_EXPIRES_IN_MS);
        let expires_at_ms = request.expires_at_ms.unwrap_or(requested_at_ms.saturating_add(expires_in_ms));
        if expires_at_ms < requested_at_ms {
            return Err(DomainError::invalid("expiresAt must not be before requestedAt"));
        }
        if self.approvals.contains_key(&request.id) {
            return Err(DomainError::new(
                ErrorCode::AlreadyExists,
                format!("approval \"{}\" already exists", request.id),
            ));
        }
        let approval = Approval {
            id: request.id.clone(),
            capability_id: request.capability_id.clone(),
            surface: request.surface.clone(),
            actor: request.actor.clone(),
            input_json,
            input_hash,
            reasons: request.reasons.clone(),
            types: request.types.clone(),
            risk: request.risk,
            side_effect: request.side_effect,
            requested_at_ms,
            expires_at_ms,
            allow_self_approval: request.allow_self_approval,
            status: StoredApprovalStatus::Pending,
            decision: None,
            consumed_by_execution_id: None,
            execution_id: None,
            capability_version: None,
            correlation_id: None,
            closed_at_ms: None,
        };
        self.store_approval(approval);
        Ok(self.approval_reply(&request.id, now_ms))
    }

    /// Stores a new approval and records `capability.approval_requested`.
    pub(crate) fn store_approval(&mut self, approval: Approval) {
        assert!(!self.approvals.contains_key(&approval.id), "approval ids are checked for duplicates before insert");
        self.approvals_by_time.insert((approval.requested_at_ms, approval.id.clone()));
        let id = approval.id.clone();
        self.approvals.insert(id.clone(), approval);
        self.emit_approval_event(&id, EventKind::ApprovalRequested, None);
    }

    /// Records an approval event; the actor defaults to the requester.
    fn emit_approval_event(&mut self, id: &str, kind: EventKind, actor: Option<&Actor>) {
        let approval = self.approvals.get(id).expect("events are emitted for stored approvals");
        let event = self.next_event(kind, actor.unwrap_or(&approval.actor), EventSubject::of_approval(approval));
        self.push_event(event);
    }

    pub(crate) fn decide_approval(
        &mut self,
        id: &str,
        status: ApprovalStatus,
        approver: &Actor,
        comment: Option<&str>,
        caller_now_ms: Option<u64>,
    ) -> Result<Reply, DomainError> {
        if !matches!(status, ApprovalStatus::Approved | ApprovalStatus::Rejected) {
            return Err(DomainError::invalid("invalid decision status"));
        }
        check_actor("approver", approver).map_err(|error| DomainError { code: ErrorCode::InvalidArgument, ..error })?;
        let mut problems = Problems::new();
        problems.text("comment", comment);
        problems.timestamp("now", caller_now_ms);
        invalid_if_any(problems, "invalid decision")?;
        let now_ms = self.approval_now(caller_now_ms);
        let approval = self.approvals.get_mut(id).ok_or_else(|| not_found(id))?;
        require_pending(approval, now_ms)?;
        if approver.id == approval.actor.id && !approval.allow_self_approval {
            return Err(DomainError::new(
                ErrorCode::ApprovalSelfApproval,
                format!("approver {} requested approval {id} and cannot decide it", approver.id),
            ));
        }
        approval.status = match status {
            ApprovalStatus::Approved => StoredApprovalStatus::Approved,
            _ => StoredApprovalStatus::Rejected,
        };
        if status == ApprovalStatus::Rejected {
            approval.closed_at_ms = Some(now_ms);
        }
        approval.decision = Some(crate::model::Decision {
            status,
            approver: approver.clone(),
            comment: comment.map(str::to_string),
            decided_at_ms: now_ms,
        });
        let kind = if status == ApprovalStatus::Approved { EventKind::Approved } else { EventKind::Rejected };
        self.emit_approval_event(id, kind, Some(approver));
        Ok(self.approval_reply(id, now_ms))
    }

    pub(crate) fn consume_approval(
        &mut self,
        id: &str,
        execution_id: &str,
        caller_now_ms: Option<u64>,
    ) -> Result<Reply, DomainError> {
        let mut problems = Problems::new();
        problems.id("executionId", execution_id);
        problems.timestamp("now", caller_now_ms);
        invalid_if_any(problems, "invalid consume request")?;
        let now_ms = self.approval_now(caller_now_ms);
        self.mark_consumed(id, execution_id, now_ms)?;
        Ok(self.approval_reply(id, now_ms))
    }

    /// The atomic compare-and-set: only an approved, unconsumed record becomes consumed.
    pub(crate) fn mark_consumed(&mut self, id: &str, execution_id: &str, now_ms: u64) -> Result<(), DomainError> {
        let approval = self.approvals.get_mut(id).ok_or_else(|| not_found(id))?;
        if approval.status != StoredApprovalStatus::Approved {
            let status = approval.status_at(now_ms).as_str();
            let by =
                approval.consumed_by_execution_id.as_ref().map(|by| format!(", consumed by {by}")).unwrap_or_default();
            return Err(DomainError::new(
                ErrorCode::FailedPrecondition,
                format!("approval {id} cannot be consumed (status: {status}{by})"),
            ));
        }
        approval.status = StoredApprovalStatus::Consumed;
        approval.consumed_by_execution_id = Some(execution_id.to_string());
        approval.closed_at_ms = Some(now_ms);
        let approver = approval.decision.as_ref().map(|decision| decision.approver.clone());
        self.emit_approval_event(id, EventKind::ApprovalConsumed, approver.as_ref());
        Ok(())
    }

    pub(crate) fn cancel_approval(&mut self, id: &str, caller_now_ms: Option<u64>) -> Result<Reply, DomainError> {
        let mut problems = Problems::new();
        problems.timestamp("now", caller_now_ms);
        invalid_if_any(problems, "invalid cancel request")?;
        let now_ms = self.approval_now(caller_now_ms);
        let approval = self.approvals.get_mut(id).ok_or_else(|| not_found(id))?;
        require_pending(approval, now_ms)?;
        approval.status = StoredApprovalStatus::Cancelled;
        approval.closed_at_ms = Some(now_ms);
        self.emit_approval_event(id, EventKind::ApprovalCancelled, None);
        Ok(self.approval_reply(id, now_ms))
    }
}
