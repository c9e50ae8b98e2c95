//! Approval records (SPEC §3), a part of [`crate::State`]: created, decided,
//! consumed, cancelled. Compatible with orpc-agent's `ApprovalCoordinator`,
//! with every transition a compare-and-set on the stored status. Validation
//! of the command and the audit event are the orchestrator's
//! (`machine/approval_commands.rs`); this part keeps the records and their
//! time index consistent and decides which transitions are allowed.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

use serde::{Deserialize, Serialize};

use crate::access::{scope_covers_types, Principal};
use crate::error::{DomainError, ErrorCode};
use crate::model::{Actor, Approval, ApprovalStatus, Decision, StoredApprovalStatus};

/// Filters for [`crate::State::list_approvals`]; they compose.
#[derive(Debug, Clone, Default)]
pub struct ApprovalFilter {
    /// Only this status (with lazy expiry).
    pub status: Option<ApprovalStatus>,
    /// Only this capability.
    pub capability_id: Option<String>,
    /// Only this requester.
    pub actor_id: Option<String>,
    /// Only approvals a scoped approver may read: those with at least one
    /// type, every one of them in this scope (see
    /// [`crate::State::approval_read_scope`]). `None` filters nothing.
    pub readable_by_scope: Option<BTreeSet<String>>,
}

/// Every retained approval and its listing order.
///
/// Invariant: `by_time` holds exactly `(requested_at_ms, id)` of every record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub(crate) struct Approvals {
    records: BTreeMap<String, Approval>,
    /// Approvals ordered by (requested_at_ms, id) for listing.
    by_time: BTreeSet<(u64, String)>,
}

/// `NOT_FOUND` for an approval id.
pub(crate) fn not_found(id: &str) -> DomainError {
    DomainError::new(ErrorCode::NotFound, format!("approval {id} was not found"))
}

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

impl Approvals {
    /// Every retained approval, by id.
    pub(crate) fn all(&self) -> impl Iterator<Item = &Approval> {
        self.records.values()
    }

    /// An approval record.
    pub(crate) fn get(&self, id: &str) -> Option<&Approval> {
        self.records.get(id)
    }

    /// Stores a new approval. Its id must be new: callers check first.
    pub(crate) fn insert(&mut self, approval: Approval) -> &Approval {
        assert!(!self.records.contains_key(&approval.id), "approval ids are checked for duplicates before insert");
        self.by_time.insert((approval.requested_at_ms, approval.id.clone()));
        let id = approval.id.clone();
        self.records.entry(id).or_insert(approval)
    }

    /// Decides a pending approval: approved or rejected by `approver`, who
    /// must not be its requester unless self-approval is allowed. `decider`
    /// is the authenticated principal deciding as itself (not on another's
    /// behalf), if any: it must not be the principal that requested it either.
    pub(crate) fn decide(
        &mut self,
        id: &str,
        status: ApprovalStatus,
        approver: &Actor,
        comment: Option<&str>,
        now_ms: u64,
        decider: Option<&Principal>,
    ) -> Result<&Approval, DomainError> {
        assert!(matches!(status, ApprovalStatus::Approved | ApprovalStatus::Rejected), "callers check the decision");
        let approval = self.records.get_mut(id).ok_or_else(|| not_found(id))?;
        require_pending(approval, now_ms)?;
        if !approval.allow_self_approval {
            if approver.id == approval.actor.id {
                return Err(DomainError::new(
                    ErrorCode::ApprovalSelfApproval,
                    format!("approver {} requested approval {id} and cannot decide it", approver.id),
                ));
            }
            if let Some(decider) = decider.filter(|decider| approval.requester_principal.as_ref() == Some(*decider)) {
                return Err(DomainError::new(
                    ErrorCode::ApprovalSelfApproval,
                    format!("{decider} requested approval {id} (as {}) and cannot decide it", approval.actor.id),
                ));
            }
        }
        approval.status = match status {
            ApprovalStatus::Approved => StoredApprovalStatus::Approved,
            _ => StoredApprovalStatus::Rejected,
        };
        if status == ApprovalStatus::Rejected {
            approval.closed_at_ms = Some(now_ms);
        }
        approval.decision = Some(Decision {
            status,
            approver: approver.clone(),
            comment: comment.map(str::to_string),
            decided_at_ms: now_ms,
        });
        Ok(approval)
    }

    /// The atomic compare-and-set: only an approved, unconsumed record becomes
    /// consumed, by `execution_id`.
    pub(crate) fn consume(&mut self, id: &str, execution_id: &str, now_ms: u64) -> Result<&Approval, DomainError> {
        let approval = self.records.get_mut(id).ok_or_else(|| not_found(id))?;
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
        Ok(approval)
    }

    /// Withdraws a pending approval.
    pub(crate) fn cancel(&mut self, id: &str, now_ms: u64) -> Result<&Approval, DomainError> {
        let approval = self.records.get_mut(id).ok_or_else(|| not_found(id))?;
        require_pending(approval, now_ms)?;
        approval.status = StoredApprovalStatus::Cancelled;
        approval.closed_at_ms = Some(now_ms);
        Ok(approval)
    }

    /// Approvals ordered by (requested_at, id), filtered, starting after `after`.
    /// The status filter sees lazily computed expiry at `now_ms`.
    pub(crate) fn list(
        &self,
        filter: &ApprovalFilter,
        now_ms: u64,
        after: Option<&(u64, String)>,
        limit: usize,
    ) -> Vec<&Approval> {
        let range = match after {
            Some(after) => self.by_time.range((Bound::Excluded(after.clone()), Bound::Unbounded)),
            None => self.by_time.range(..),
        };
        range
            .filter_map(|(_, id)| self.records.get(id))
            .filter(|approval| filter.status.is_none_or(|status| approval.status_at(now_ms) == status))
            .filter(|approval| filter.capability_id.as_deref().is_none_or(|id| approval.capability_id == id))
            .filter(|approval| filter.actor_id.as_deref().is_none_or(|id| approval.actor.id == id))
            .filter(|approval| {
                filter.readable_by_scope.as_ref().is_none_or(|scope| scope_covers_types(scope, &approval.types))
            })
            .take(limit)
            .collect()
    }

    /// Drops approvals closed at or before `horizon` (`None`: the clock has
    /// not yet run past the retention window, so nothing is old enough).
    /// Returns how many were dropped.
    pub(crate) fn compact(&mut self, horizon: Option<u64>) -> u32 {
        let Some(horizon) = horizon else { return 0 };
        let closed: Vec<(u64, String)> = self
            .records
            .values()
            .filter(|approval| {
                let closed_at = match approval.status {
                    // A pending record expires at `expires_at`; an approved one can no longer be
                    // resumed after it either, so retention counts from there for both.
                    StoredApprovalStatus::Pending | StoredApprovalStatus::Approved => Some(approval.expires_at_ms),
                    _ => approval.closed_at_ms,
                };
                closed_at.is_some_and(|closed_at| closed_at <= horizon)
            })
            .map(|approval| (approval.requested_at_ms, approval.id.clone()))
            .collect();
        for key in &closed {
            self.records.remove(&key.1);
            self.by_time.remove(key);
        }
        u32::try_from(closed.len()).unwrap_or(u32::MAX)
    }
}
