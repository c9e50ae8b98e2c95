//! Who may act on a record and who may see it: the ownership rules of
//! docs/security.md ("Ownership"), decided here, next to the records, for
//! the commands (`authorize_command` calls [`State::check_may_act_on_approval`]
//! and [`State::check_may_act_on_execution`]) and for the edge's reads: one
//! record through [`State::visible_approval`] and [`State::visible_execution`],
//! listings and streams through [`State::approval_view`],
//! [`State::may_read_approval`], [`State::may_read_execution`] and
//! [`State::may_read_event`].
//!
//! A record's owners are the principal that created it
//! (`requester_principal`) and the subject it was created for (its `actor`,
//! when a principal with `act-for` named it). Grants decide which verbs a
//! caller may use; ownership decides on which records:
//!
//! - acting (resume, consume, cancel, an application event about it): an
//!   owner, a holder of `act-for` (it speaks for the subjects it names), or
//!   an admin;
//! - reading: an owner or `act-for` holder with the `submitter` or `act-for`
//!   grant; an approver, the approvals its scope covers and those it decided,
//!   and the executions it approved; a worker, the executions it holds or
//!   held a lease on; an auditor, everything.
//!
//! A record outside the caller's view is answered exactly as an unknown one:
//! `NOT_FOUND` with the same message, built in one place for each kind
//! (`approvals::not_found`, `executions::not_found`) and reached through the
//! `visible_*` reads, so neither its existence nor its owner leaks (a
//! listing or a stream leaves it out). A record the caller may see but not
//! act on is `PERMISSION_DENIED`, with a message that names no other
//! principal.

use std::borrow::Cow;

use crate::access::{Caller, Grant, GrantName, Principal};
use crate::approvals::{not_found as approval_not_found, ApprovalView};
use crate::audit::Event;
use crate::command::Command;
use crate::error::{DomainError, ErrorCode};
use crate::executions::{not_found as execution_not_found, ExecutionFilter};
use crate::listing::{ListOrder, Page};
use crate::machine::State;
use crate::model::{Actor, Approval, ApprovalStatus, Execution};

/// What a reading caller may do with an approval, as the rules of a
/// decision judge it ([`State::decision_controls`]): a page renders its
/// buttons from this and holds no rule of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecisionControls {
    /// A decision (or, on a governed approval, a vote) by the caller as
    /// itself would be admitted now.
    pub may_decide: bool,
    /// The caller has a vote on this pending governed approval.
    pub may_withdraw: bool,
    /// Why a decision would be refused (`None` when `may_decide`).
    pub refusal: Option<DomainError>,
}

/// Whether `caller` is an owner of a record created by `requester` for `subject`.
fn is_owner(caller: &Caller, requester: Option<&Principal>, subject: &Actor) -> bool {
    requester == Some(&caller.principal) || caller.principal.is_actor(subject)
}

fn not_yours(caller: &Caller, what: &str, record: &str) -> DomainError {
    DomainError::new(
        ErrorCode::PermissionDenied,
        format!("{} may not {what} {record}: it belongs to another principal", caller.principal),
    )
}

impl State {
    fn holds(&self, caller: &Caller, name: GrantName) -> bool {
        self.usable_grant(caller, name).is_some()
    }

    /// Whether `caller` may act on a record created by `requester` for `subject`.
    fn may_act(&self, caller: &Caller, requester: Option<&Principal>, subject: &Actor) -> bool {
        is_owner(caller, requester, subject)
            || self.holds(caller, GrantName::ActFor)
            || self.holds(caller, GrantName::Admin)
    }

    /// The owners' view: an owner (or an `act-for` holder) that still holds
    /// the grant it works with.
    fn may_read_as_owner(&self, caller: &Caller, requester: Option<&Principal>, subject: &Actor) -> bool {
        if self.holds(caller, GrantName::ActFor) {
            return true;
        }
        self.holds(caller, GrantName::Submitter) && is_owner(caller, requester, subject)
    }

    /// What `caller` sees of the approvals: `None` sees them all (an
    /// auditor, an `act-for` holder, or a node started `--insecure`); a view
    /// admits the approvals the caller owns, those its approver scope covers
    /// and those it decided. A listing filters by it, so pages, cursors and
    /// counts hold only what [`State::may_read_approval`] allows.
    pub fn approval_view(&self, caller: Option<&Caller>) -> Option<ApprovalView> {
        let caller = caller?;
        if self.holds(caller, GrantName::Auditor) || self.holds(caller, GrantName::ActFor) {
            return None;
        }
        let approver = self.usable_grant(caller, GrantName::Approver);
        Some(ApprovalView {
            owner: self.holds(caller, GrantName::Submitter).then(|| caller.principal.clone()),
            approver_scope: approver.map(|grant| grant.scope.clone()),
            decider: approver.map(|_| caller.principal.clone()),
            votable_policies: if approver.is_some() { self.votable_policies(caller) } else { Default::default() },
        })
    }

    /// What `caller` may do with `approval` at `now_ms` (SPEC §12: a page
    /// shows what the core answers). A decision is judged by the same
    /// functions a `DecideApproval` by the caller as itself meets at the
    /// edge (`authorize_command`: the approver grant, the scope's cover,
    /// self-approval, a policy's eligibility) after the approval's own
    /// state: pending, and no vote of the caller's yet. Without a caller
    /// (`--insecure`) nothing is checked and anyone may decide.
    pub fn decision_controls(&self, caller: Option<&Caller>, approval: &Approval, now_ms: u64) -> DecisionControls {
        let status = approval.status_at(now_ms);
        let voted = caller.is_some_and(|caller| {
            approval.quorum.as_ref().is_some_and(|quorum| quorum.votes.iter().any(|v| v.principal == caller.principal))
        });
        let refusal = if status != ApprovalStatus::Pending {
            Some(DomainError::new(
                if status == ApprovalStatus::Expired { ErrorCode::ApprovalExpired } else { ErrorCode::ApprovalDecided },
                format!("approval {} is {}: nothing is left to decide", approval.id, status.as_str()),
            ))
        } else if voted {
            Some(DomainError::new(
                ErrorCode::VoteDuplicate,
                format!("you already voted on approval {}; withdraw that vote to vote again", approval.id),
            ))
        } else {
            caller.and_then(|caller| {
                let decide = Command::DecideApproval {
                    approval_id: approval.id.clone(),
                    status: ApprovalStatus::Approved,
                    approver: caller.principal.as_actor(),
                    comment: None,
                    caller_now_ms: None,
                    terms_hash: None,
                };
                self.authorize_command(Some(caller), &decide, now_ms).err()
            })
        };
        DecisionControls {
            may_decide: refusal.is_none(),
            may_withdraw: voted && status == ApprovalStatus::Pending,
            refusal,
        }
    }

    /// Approval `id` as `caller` reads one record (`GetApproval`,
    /// `ListVotes`): `NOT_FOUND` when no approval has the id and, with the
    /// very same refusal, when it is outside the caller's view
    /// ([`State::may_read_approval`]). `None` (`--insecure`) sees every record.
    pub fn visible_approval(&self, caller: Option<&Caller>, id: &str) -> Result<Cow<'_, Approval>, DomainError> {
        self.approvals
            .get(id)
            .filter(|approval| self.may_read_approval(caller, approval))
            .ok_or_else(|| approval_not_found(id))
    }

    /// Execution `id` as `caller` reads one record (`GetExecution`,
    /// `WaitExecution`): `NOT_FOUND` when no execution has the id and, with
    /// the very same refusal, when it is outside the caller's view
    /// ([`State::may_read_execution`]).
    pub fn visible_execution(&self, caller: Option<&Caller>, id: &str) -> Result<Cow<'_, Execution>, DomainError> {
        self.executions
            .get(id)
            .filter(|execution| self.may_read_execution(caller, execution))
            .ok_or_else(|| execution_not_found(id))
    }

    /// One page of the executions `caller` may read (the judge of
    /// [`State::visible_execution`]: one outside its view is simply absent),
    /// in (submitted_at, id) order or its reverse, continuing past `after`:
    /// `ListExecutions` (issue #40). A page looks at no more than
    /// [`crate::limits::LIST_SCANNED_MAX`] records, so a filter that matches
    /// few of them costs a bounded read per page, and the page then ends
    /// early with a token to continue.
    pub fn list_executions(
        &self,
        caller: Option<&Caller>,
        filter: &ExecutionFilter,
        after: Option<&(u64, String)>,
        limit: usize,
        order: ListOrder,
    ) -> Page<Cow<'_, Execution>> {
        let visible = |execution: &Execution| self.may_read_execution(caller, execution);
        self.executions.list(filter, visible, after, limit, order, crate::limits::LIST_SCANNED_MAX)
    }

    /// Whether `caller` may read `approval` (`GetApproval`, a listing, its events).
    pub fn may_read_approval(&self, caller: Option<&Caller>, approval: &Approval) -> bool {
        self.approval_view(caller).is_none_or(|view| view.admits(approval))
    }

    /// Whether `caller` may read `execution` (`GetExecution`,
    /// `WaitExecution`, `ListExecutionEvents`, its events in `WatchEvents`).
    pub fn may_read_execution(&self, caller: Option<&Caller>, execution: &Execution) -> bool {
        let Some(caller) = caller else { return true };
        if self.holds(caller, GrantName::Auditor)
            || self.may_read_as_owner(caller, execution.requester_principal.as_ref(), &execution.actor)
        {
            return true;
        }
        let approved = execution.approver.as_ref().is_some_and(|approver| caller.principal.is_actor(approver));
        if approved && self.holds(caller, GrantName::Approver) {
            return true;
        }
        self.holds(caller, GrantName::Worker)
            && execution.lease_ids.iter().any(|lease_id| {
                self.leases.get(*lease_id).is_some_and(|lease| lease.principal.as_ref() == Some(&caller.principal))
            })
    }

    /// Whether `caller` may read `event` (`WatchEvents`,
    /// `ListExecutionEvents`): an auditor reads every event; anyone else the
    /// events its own commands caused, and the events of executions and
    /// approvals it may read (an execution's, while the execution is
    /// retained; an approval's otherwise). Other events about no record
    /// (grants, capabilities) are the auditor's alone.
    pub fn may_read_event(&self, caller: Option<&Caller>, event: &Event) -> bool {
        let Some(caller) = caller else { return true };
        if self.holds(caller, GrantName::Auditor) || event.principal.as_ref() == Some(&caller.principal) {
            return true;
        }
        if let Some(execution) = event.execution_id.as_deref().and_then(|id| self.executions.get(id)) {
            return self.may_read_execution(Some(caller), &execution);
        }
        event
            .approval_id
            .as_deref()
            .and_then(|id| self.approvals.get(id))
            .is_some_and(|approval| self.may_read_approval(Some(caller), &approval))
    }

    /// Resuming, consuming or cancelling approval `approval_id` (`what`):
    /// allowed to whoever may act on it; one outside the caller's view is
    /// `NOT_FOUND`, exactly as an unknown one (which the command answers).
    pub(super) fn check_may_act_on_approval(
        &self,
        caller: &Caller,
        approval_id: &str,
        what: &str,
    ) -> Result<(), DomainError> {
        let Some(approval) = self.approvals.get(approval_id) else { return Ok(()) };
        if self.may_act(caller, approval.requester_principal.as_ref(), &approval.actor) {
            return Ok(());
        }
        self.visible_approval(Some(caller), approval_id)?;
        Err(not_yours(caller, what, &format!("approval {approval_id}")))
    }

    /// Cancelling execution `execution_id`: the same rule as
    /// [`State::check_may_act_on_approval`].
    pub(super) fn check_may_act_on_execution(&self, caller: &Caller, execution_id: &str) -> Result<(), DomainError> {
        let Some(execution) = self.executions.get(execution_id) else { return Ok(()) };
        if self.may_act(caller, execution.requester_principal.as_ref(), &execution.actor) {
            return Ok(());
        }
        self.visible_execution(Some(caller), execution_id)?;
        Err(not_yours(caller, "cancel", &format!("execution {execution_id}")))
    }

    /// An application event about an execution or approval: allowed about
    /// records the caller may act on, and about ids that name no record (an
    /// application records, say, a policy denial before anything was
    /// submitted). About another principal's record it is
    /// `PERMISSION_DENIED`: an id's existence is not secret (a submit or
    /// create naming it is `ALREADY_EXISTS`), its owner and contents are.
    pub(super) fn check_may_record_about(
        &self,
        caller: &Caller,
        execution_id: Option<&str>,
        approval_id: Option<&str>,
    ) -> Result<(), DomainError> {
        if let Some(execution) = execution_id.and_then(|id| self.executions.get(id)) {
            if !self.may_act(caller, execution.requester_principal.as_ref(), &execution.actor) {
                return Err(not_yours(caller, "record events about", &format!("execution {}", execution.execution_id)));
            }
        }
        if let Some(approval) = approval_id.and_then(|id| self.approvals.get(id)) {
            if !self.may_act(caller, approval.requester_principal.as_ref(), &approval.actor) {
                return Err(not_yours(caller, "record events about", &format!("approval {}", approval.id)));
            }
        }
        Ok(())
    }

    /// A submit naming an execution id that is already taken by a record
    /// the caller may not act on (the execution, or the approval its submit
    /// requested) is `ALREADY_EXISTS` without the record: a repeat returns
    /// the stored record only to those who may act on it.
    pub(super) fn check_submit_id_free(&self, caller: &Caller, execution_id: &str) -> Result<(), DomainError> {
        let taken_by_another = match self.executions.get(execution_id) {
            Some(execution) => !self.may_act(caller, execution.requester_principal.as_ref(), &execution.actor),
            None => self
                .approvals
                .get(&crate::ids::approval_id_for(execution_id))
                .is_some_and(|approval| !self.may_act(caller, approval.requester_principal.as_ref(), &approval.actor)),
        };
        if taken_by_another {
            return Err(DomainError::new(
                ErrorCode::AlreadyExists,
                format!("execution \"{execution_id}\" already exists; choose another execution id"),
            ));
        }
        Ok(())
    }

    /// Deciding approval `approval_id` with the grant `approver`: an
    /// approval the caller may not see is `NOT_FOUND`, exactly as an unknown
    /// one; one it sees (it owns it) but its scope does not cover is
    /// `PERMISSION_DENIED`.
    pub(super) fn check_may_decide(
        &self,
        caller: &Caller,
        approval_id: &str,
        approver: &Grant,
    ) -> Result<(), DomainError> {
        let Some(approval) = self.approvals.get(approval_id) else { return Ok(()) };
        // On a governed approval a decision is a vote: eligibility for the
        // policy's factors decides, in the command.
        if approver.covers_types(&approval.types) || approval.quorum.is_some() {
            return Ok(());
        }
        self.visible_approval(Some(caller), approval_id)?;
        Err(DomainError::new(
            ErrorCode::PermissionDenied,
            format!(
                "{} may not decide approval {approval_id} of types {:?}: its approver grant covers only {:?}",
                caller.principal, approval.types, approver.scope
            ),
        ))
    }
}
