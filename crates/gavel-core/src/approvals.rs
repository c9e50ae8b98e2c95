//! Approval records (SPEC §3), a part of [`crate::State`]: created, decided,
//! consumed, cancelled. Compatible with orpc-agent's `ApprovalCoordinator`,
//! with every transition a compare-and-set on the stored status. Validation
//! of the command and the audit event are the orchestrator's
//! (`machine/approval_commands.rs`); this part keeps the records and their
//! time index consistent and decides which transitions are allowed.
//!
//! Open approvals (pending or approved, expired or not) are hot: decisions
//! need them. A closed one (rejected, consumed, cancelled) admits no
//! transition any more and moves to the cold records ([`crate::cold`]) with
//! its listing and retention index entries, and is read back from there.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

use serde::{Deserialize, Serialize};

use crate::access::{scope_covers_types, Principal};
use crate::cold::{ColdRecords, ColdTable};
use crate::error::{DomainError, ErrorCode};
use crate::listing::{key_time, time_key, ListOrder, AFTER_EVERY_TIME_KEY};
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
    /// Only the approvals one caller may read ([`crate::State::approval_view`]).
    /// `None` filters nothing.
    pub readable_by: Option<ApprovalView>,
}

/// What one caller may see of the approvals, as data a listing filters by
/// (built by [`crate::State::approval_view`], the ownership rules of
/// docs/security.md).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApprovalView {
    /// The approvals this principal created, or that name it as the requester.
    pub owner: Option<Principal>,
    /// With an approver grant, the approvals its scope covers (an empty
    /// scope covers every approval).
    pub approver_scope: Option<BTreeSet<String>>,
    /// With an approver grant, the approvals this principal decided or
    /// voted on.
    pub decider: Option<Principal>,
    /// With an approver grant, the policies it is eligible to vote under:
    /// the approvals they govern.
    pub votable_policies: BTreeSet<String>,
}

impl ApprovalView {
    /// Whether the view holds `approval`.
    pub fn admits(&self, approval: &Approval) -> bool {
        let owns = self.owner.as_ref().is_some_and(|owner| {
            approval.requester_principal.as_ref() == Some(owner) || owner.is_actor(&approval.actor)
        });
        let covered = self
            .approver_scope
            .as_ref()
            .is_some_and(|scope| scope.is_empty() || scope_covers_types(scope, &approval.types));
        let decided = self.decider.as_ref().is_some_and(|decider| {
            approval.decision.as_ref().is_some_and(|decision| decider.is_actor(&decision.approver))
                || approval.quorum.as_ref().is_some_and(|quorum| quorum.votes.iter().any(|v| &v.principal == decider))
        });
        let votable = approval.quorum.as_ref().is_some_and(|quorum| self.votable_policies.contains(&quorum.policy));
        owns || covered || decided || votable
    }
}

impl ApprovalFilter {
    fn admits(&self, approval: &Approval, now_ms: u64) -> bool {
        self.status.is_none_or(|status| approval.status_at(now_ms) == status)
            && self.capability_id.as_deref().is_none_or(|id| approval.capability_id == id)
            && self.actor_id.as_deref().is_none_or(|id| approval.actor.id == id)
            && self.readable_by.as_ref().is_none_or(|view| view.admits(approval))
    }
}

/// Every retained approval and its listing order.
///
/// Invariants:
/// - open (pending or approved): in `records` (hot), with `(requested_at_ms,
///   id)` in `by_time`;
/// - closed (rejected, consumed, cancelled): in `closed_records` (cold), with
///   [`time_key`]`(requested_at_ms, id)` in `closed_by_time` and
///   [`time_key`]`(closed_at_ms, id)` in `closed_index`, counted once in
///   `closed_counts`; never in `records`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Approvals {
    records: BTreeMap<String, Approval>,
    /// Open approvals ordered by (requested_at_ms, id) for listing.
    by_time: BTreeSet<(u64, String)>,
    /// Closed approvals by id (cold).
    closed_records: ColdRecords,
    /// Closed approvals by [`time_key`] of (requested_at, id), for listing
    /// (cold; the value is empty).
    closed_by_time: ColdRecords,
    /// Closed approvals by [`time_key`] of (closed_at, id), for retention
    /// (cold; the value is empty).
    closed_index: ColdRecords,
    /// How many retained closed approvals are in each status.
    closed_counts: BTreeMap<ApprovalStatus, u64>,
}

impl Default for Approvals {
    fn default() -> Self {
        Approvals {
            records: BTreeMap::new(),
            by_time: BTreeSet::new(),
            closed_records: ColdRecords::new(ColdTable::Approvals),
            closed_by_time: ColdRecords::new(ColdTable::ApprovalsByTime),
            closed_index: ColdRecords::new(ColdTable::ApprovalsClosed),
            closed_counts: BTreeMap::new(),
        }
    }
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

/// Only an approved, unconsumed approval may be consumed.
fn require_approved(approval: &Approval, now_ms: u64) -> Result<(), DomainError> {
    if approval.status == StoredApprovalStatus::Approved {
        return Ok(());
    }
    let status = approval.status_at(now_ms).as_str();
    let by = approval.consumed_by_execution_id.as_ref().map(|by| format!(", consumed by {by}")).unwrap_or_default();
    Err(DomainError::new(
        ErrorCode::FailedPrecondition,
        format!("approval {} cannot be consumed (status: {status}{by})", approval.id),
    ))
}

/// The status of a closed approval, which no clock changes.
fn closed_status(approval: &Approval) -> ApprovalStatus {
    match approval.status {
        StoredApprovalStatus::Rejected => ApprovalStatus::Rejected,
        StoredApprovalStatus::Consumed => ApprovalStatus::Consumed,
        StoredApprovalStatus::Cancelled => ApprovalStatus::Cancelled,
        StoredApprovalStatus::Voided => ApprovalStatus::Voided,
        StoredApprovalStatus::Pending | StoredApprovalStatus::Approved => {
            unreachable!("only a closed approval moves to the cold records")
        }
    }
}

impl Approvals {
    /// Every open approval, by id.
    pub(crate) fn open(&self) -> impl Iterator<Item = &Approval> {
        self.records.values()
    }

    /// How many retained closed approvals are in each status.
    pub(crate) fn closed_counts(&self) -> impl Iterator<Item = (ApprovalStatus, u64)> + '_ {
        self.closed_counts.iter().map(|(status, count)| (*status, *count))
    }

    /// The cold record sets of this part, for flushing and export.
    pub(crate) fn cold_mut(&mut self) -> [&mut ColdRecords; 3] {
        [&mut self.closed_records, &mut self.closed_by_time, &mut self.closed_index]
    }

    /// The cold record sets of this part, for export.
    pub(crate) fn cold(&self) -> [&ColdRecords; 3] {
        [&self.closed_records, &self.closed_by_time, &self.closed_index]
    }

    /// An approval record: an open one borrowed, a closed one read back.
    pub(crate) fn get(&self, id: &str) -> Option<Cow<'_, Approval>> {
        match self.records.get(id) {
            Some(approval) => Some(Cow::Borrowed(approval)),
            None => self.closed_records.get(id.as_bytes()).map(Cow::Owned),
        }
    }

    /// Whether an approval with this id is retained.
    pub(crate) fn contains(&self, id: &str) -> bool {
        self.records.contains_key(id) || self.closed_records.contains(id.as_bytes())
    }

    /// The open record `id` if `allowed` admits the transition; the refusal
    /// of `allowed` for a closed one (which admits none), `NOT_FOUND` for
    /// an unknown one.
    fn open_for(
        &mut self,
        id: &str,
        allowed: impl Fn(&Approval) -> Result<(), DomainError>,
    ) -> Result<&mut Approval, DomainError> {
        let Some(approval) = self.records.get_mut(id) else {
            let closed: Approval = self.closed_records.get(id.as_bytes()).ok_or_else(|| not_found(id))?;
            return Err(allowed(&closed).expect_err("a closed approval admits no transition"));
        };
        allowed(approval)?;
        Ok(approval)
    }

    /// Moves the open record `id`, just closed, to the cold records.
    fn close(&mut self, id: &str) -> Approval {
        let approval = self.records.remove(id).expect("callers pass the id of an open approval");
        let closed_at_ms = approval.closed_at_ms.expect("a closed approval has its closing time");
        let status = closed_status(&approval);
        self.by_time.remove(&(approval.requested_at_ms, approval.id.clone()));
        self.closed_records.put(id.as_bytes().to_vec(), &approval);
        self.closed_by_time.put(time_key(approval.requested_at_ms, id), &());
        self.closed_index.put(time_key(closed_at_ms, id), &());
        *self.closed_counts.entry(status).or_default() += 1;
        approval
    }

    /// Stores a new approval. Its id must be new: callers check first.
    pub(crate) fn insert(&mut self, approval: Approval) -> &Approval {
        assert!(!self.contains(&approval.id), "approval ids are checked for duplicates before insert");
        assert_eq!(approval.status, StoredApprovalStatus::Pending, "a new approval starts pending");
        self.by_time.insert((approval.requested_at_ms, approval.id.clone()));
        let id = approval.id.clone();
        self.records.entry(id).or_insert(approval)
    }

    /// Decides a pending approval: approved or rejected by `approver`, who
    /// must not be its requester unless self-approval is allowed. `decider`
    /// is the authenticated principal deciding as itself (not on another's
    /// behalf), if any: it must not be the principal that requested it either.
    /// A rejected approval is closed.
    pub(crate) fn decide(
        &mut self,
        id: &str,
        status: ApprovalStatus,
        approver: &Actor,
        comment: Option<&str>,
        now_ms: u64,
        decider: Option<&Principal>,
    ) -> Result<Cow<'_, Approval>, DomainError> {
        assert!(matches!(status, ApprovalStatus::Approved | ApprovalStatus::Rejected), "callers check the decision");
        let approval = self.open_for(id, |approval| require_pending(approval, now_ms))?;
        check_self_decision(approval, approver, decider)?;
        Ok(self.settle(id, status, approver, comment, now_ms))
    }

    /// Records the decision on the open approval `id` (checked pending):
    /// approved, or rejected and closed.
    fn settle(
        &mut self,
        id: &str,
        status: ApprovalStatus,
        approver: &Actor,
        comment: Option<&str>,
        now_ms: u64,
    ) -> Cow<'_, Approval> {
        let approval = self.open_mut(id);
        approval.status = match status {
            ApprovalStatus::Approved => StoredApprovalStatus::Approved,
            _ => StoredApprovalStatus::Rejected,
        };
        approval.decision = Some(Decision {
            status,
            approver: approver.clone(),
            comment: comment.map(str::to_string),
            decided_at_ms: now_ms,
        });
        if let Some(standing) = &approval.standing {
            // A standing approval's uses are allowed for its window from the
            // decision: its post-approval expiry, which resume checks and
            // retention counts from.
            approval.expires_at_ms = now_ms.saturating_add(standing.spec.window_ms);
        }
        if status == ApprovalStatus::Rejected {
            approval.closed_at_ms = Some(now_ms);
            return Cow::Owned(self.close(id));
        }
        Cow::Borrowed(&self.records[id])
    }

    /// The atomic compare-and-set: only an approved, unconsumed record becomes
    /// consumed, by `execution_id`, and is closed.
    pub(crate) fn consume(&mut self, id: &str, execution_id: &str, now_ms: u64) -> Result<Approval, DomainError> {
        let approval = self.open_for(id, |approval| require_approved(approval, now_ms))?;
        approval.status = StoredApprovalStatus::Consumed;
        approval.consumed_by_execution_id = Some(execution_id.to_string());
        approval.closed_at_ms = Some(now_ms);
        Ok(self.close(id))
    }

    /// Withdraws a pending approval, which is closed.
    pub(crate) fn cancel(&mut self, id: &str, now_ms: u64) -> Result<Approval, DomainError> {
        let approval = self.open_for(id, |approval| require_pending(approval, now_ms))?;
        approval.status = StoredApprovalStatus::Cancelled;
        approval.closed_at_ms = Some(now_ms);
        Ok(self.close(id))
    }

    /// The open, pending and unexpired approval `id`, for a vote: an
    /// approval no longer pending is `APPROVAL_DECIDED`, an expired one
    /// `APPROVAL_EXPIRED`, an unknown one `NOT_FOUND`.
    pub(crate) fn pending_for_vote(&mut self, id: &str, now_ms: u64) -> Result<&mut Approval, DomainError> {
        let refuse = |approval: &Approval| match approval.status_at(now_ms) {
            ApprovalStatus::Pending => Ok(()),
            ApprovalStatus::Expired => Err(DomainError::new(
                ErrorCode::ApprovalExpired,
                format!("approval {} expired before its quorum was reached", approval.id),
            )),
            status => Err(DomainError::new(
                ErrorCode::ApprovalDecided,
                format!(
                    "approval {} is no longer pending (status: {}); votes are closed",
                    approval.id,
                    status.as_str()
                ),
            )),
        };
        self.open_for(id, refuse)
    }

    /// Every open approval governed by policy `name`, by id.
    pub(crate) fn open_governed_by(&self, name: &str) -> Vec<String> {
        self.records
            .values()
            .filter(|approval| approval.quorum.as_ref().is_some_and(|quorum| quorum.policy == name))
            .map(|approval| approval.id.clone())
            .collect()
    }

    /// Every open pending approval with a vote by `principal`, by id.
    pub(crate) fn pending_voted_by(&self, principal: &Principal) -> Vec<String> {
        self.records
            .values()
            .filter(|approval| approval.status == StoredApprovalStatus::Pending)
            .filter(|approval| {
                approval.quorum.as_ref().is_some_and(|quorum| quorum.votes.iter().any(|v| &v.principal == principal))
            })
            .map(|approval| approval.id.clone())
            .collect()
    }

    /// The open approval `id` (callers found it open).
    pub(crate) fn open_mut(&mut self, id: &str) -> &mut Approval {
        self.records.get_mut(id).expect("callers pass the id of an open approval")
    }

    /// Decides the pending approval `id` by the vote of `approver` that
    /// met its quorum (`Approved`) or reached its deny threshold
    /// (`Rejected`, which closes it). Returns the record after.
    pub(crate) fn decide_by_quorum(
        &mut self,
        id: &str,
        status: ApprovalStatus,
        approver: &Actor,
        comment: Option<&str>,
        now_ms: u64,
    ) -> Approval {
        let approval = self.open_mut(id);
        assert_eq!(approval.status, StoredApprovalStatus::Pending, "only a pending approval is decided by votes");
        self.settle(id, status, approver, comment, now_ms).into_owned()
    }

    /// Spends one use of the approved standing approval `id` on
    /// `execution_id`; returns (uses spent, uses allowed). The caller
    /// consumes it when that was the last.
    pub(crate) fn spend_use(&mut self, id: &str, execution_id: &str) -> (u32, u32) {
        let approval = self.open_mut(id);
        assert_eq!(approval.status, StoredApprovalStatus::Approved, "only an approved standing approval is spent");
        let standing = approval.standing.as_mut().expect("callers spend standing approvals only");
        assert!(standing.uses_left() > 0, "an exhausted standing approval is consumed, never open");
        standing.used_by.push(execution_id.to_string());
        (u32::try_from(standing.used_by.len()).expect("uses are bounded"), standing.spec.uses_max)
    }

    /// Voids the open (pending or approved) approval `id` and closes it.
    pub(crate) fn void(&mut self, id: &str, now_ms: u64) -> Approval {
        let approval = self.open_mut(id);
        approval.status = StoredApprovalStatus::Voided;
        approval.closed_at_ms = Some(now_ms);
        self.close(id)
    }

    /// Approvals ordered by (requested_at, id), filtered, starting after `after`:
    /// the open ones and the closed ones merged in that order; newest first,
    /// in the reverse order, starting before `after`. The
    /// status filter sees lazily computed expiry at `now_ms`.
    pub(crate) fn list(
        &self,
        filter: &ApprovalFilter,
        now_ms: u64,
        after: Option<&(u64, String)>,
        limit: usize,
        order: ListOrder,
    ) -> Vec<Cow<'_, Approval>> {
        let newest_first = order == ListOrder::NewestFirst;
        let bounds = match (after, newest_first) {
            (None, _) => (Bound::Unbounded, Bound::Unbounded),
            (Some(after), false) => (Bound::Excluded(after.clone()), Bound::Unbounded),
            (Some(after), true) => (Bound::Unbounded, Bound::Excluded(after.clone())),
        };
        let open = self.by_time.range(bounds);
        let open: Box<dyn Iterator<Item = &(u64, String)>> =
            if newest_first { Box::new(open.rev()) } else { Box::new(open) };
        let mut open = open.peekable();
        // The closed cursor: at or after it going forward, before it going back.
        let mut closed_cursor = match (after, newest_first) {
            (Some((time, id)), false) => {
                let mut key = time_key(*time, id);
                key.push(0);
                key
            }
            (Some((time, id)), true) => time_key(*time, id),
            (None, false) => Vec::new(),
            (None, true) => AFTER_EVERY_TIME_KEY.to_vec(),
        };
        let closed_at = |cursor: &[u8]| {
            let found =
                if newest_first { self.closed_by_time.seek_before(cursor) } else { self.closed_by_time.seek(cursor) };
            found.map(|(key, _)| key)
        };
        let mut closed_next = closed_at(&closed_cursor);
        let mut listed = Vec::new();
        while listed.len() < limit {
            let open_key = open.peek().map(|(time, id)| time_key(*time, id));
            // Keys never tie: an id is either open or closed.
            let open_comes_first = |open_key: &Vec<u8>, closed_key: &Vec<u8>| {
                if newest_first {
                    open_key > closed_key
                } else {
                    open_key < closed_key
                }
            };
            let approval = match (open_key, &closed_next) {
                (None, None) => break,
                (Some(open_key), Some(closed_key)) if open_comes_first(&open_key, closed_key) => {
                    self.next_open(&mut open)
                }
                (Some(_), None) => self.next_open(&mut open),
                (_, Some(closed_key)) => {
                    let approval: Approval = self
                        .closed_records
                        .get(&closed_key[8..])
                        .expect("the closed listing index points at retained approvals");
                    closed_cursor.clone_from(closed_key);
                    if !newest_first {
                        closed_cursor.push(0);
                    }
                    closed_next = closed_at(&closed_cursor);
                    Cow::Owned(approval)
                }
            };
            if filter.admits(&approval, now_ms) {
                listed.push(approval);
            }
        }
        listed
    }

    fn next_open<'a>(&'a self, open: &mut impl Iterator<Item = &'a (u64, String)>) -> Cow<'a, Approval> {
        let (_, id) = open.next().expect("callers peeked an entry");
        Cow::Borrowed(&self.records[id])
    }

    /// Drops approvals closed at or before `horizon` (`None`: the clock has
    /// not yet run past the retention window, so nothing is old enough), and
    /// open ones whose expiry is: a pending record expires at `expires_at`,
    /// an approved one can no longer be resumed after it either, so
    /// retention counts from there for both (they stay hot until then).
    /// Returns how many were dropped; `pending_dropped` is told the
    /// requesting principal of every dropped pending one.
    pub(crate) fn compact(&mut self, horizon: Option<u64>, mut pending_dropped: impl FnMut(&Principal)) -> u32 {
        let Some(horizon) = horizon else { return 0 };
        let expired: Vec<(u64, String)> = self
            .records
            .values()
            .filter(|approval| approval.expires_at_ms <= horizon)
            .map(|approval| (approval.requested_at_ms, approval.id.clone()))
            .collect();
        for key in &expired {
            let approval = self.records.remove(&key.1).expect("the key was just read from the records");
            if let (StoredApprovalStatus::Pending, Some(requester)) = (approval.status, &approval.requester_principal) {
                pending_dropped(requester);
            }
            self.by_time.remove(key);
        }
        let mut dropped = expired.len();
        // Deleted keys are behind the cursor, so each seek skips none of them.
        let mut cursor = Vec::new();
        while let Some((key, _)) = self.closed_index.seek(&cursor) {
            if key_time(&key) > horizon {
                break;
            }
            let id = &key[8..];
            let approval: Approval =
                self.closed_records.get(id).expect("the retention index points at retained approvals");
            self.closed_records.delete(id);
            self.closed_by_time.delete(&time_key(approval.requested_at_ms, &approval.id));
            self.closed_index.delete(&key);
            let status = closed_status(&approval);
            let count = self.closed_counts.get_mut(&status).expect("closed approvals are counted");
            *count -= 1;
            if *count == 0 {
                self.closed_counts.remove(&status);
            }
            dropped += 1;
            cursor = key;
            cursor.push(0);
        }
        u32::try_from(dropped).unwrap_or(u32::MAX)
    }
}

/// `APPROVAL_SELF_APPROVAL` when `approver` (or the principal `decider`
/// deciding as itself) requested `approval` and it did not opt out of the
/// check: the one rule the decide command and the edge's admission ask.
pub(crate) fn check_self_decision(
    approval: &Approval,
    approver: &Actor,
    decider: Option<&Principal>,
) -> Result<(), DomainError> {
    if approval.allow_self_approval {
        return Ok(());
    }
    let id = &approval.id;
    if approver.id == approval.actor.id {
        return Err(DomainError::new(
            ErrorCode::ApprovalSelfApproval,
            format!("approver {approver} requested approval {id} and cannot decide it"),
        ));
    }
    if let Some(decider) = decider.filter(|decider| approval.requester_principal.as_ref() == Some(*decider)) {
        return Err(DomainError::new(
            ErrorCode::ApprovalSelfApproval,
            format!("{decider} requested approval {id} (as {}) and cannot decide it", approval.actor),
        ));
    }
    Ok(())
}
