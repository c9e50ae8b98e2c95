//! The approval commands (SPEC §3): create, decide, consume, cancel. Each
//! runs after admission validated its input (`admission.rs`), asks the
//! approvals part for the transition and records the audit event in the
//! same command.

use crate::access::{Caller, Principal};
use crate::audit::{EventKind, EventSubject};
use crate::command::{CreateApproval, Reply};
use crate::error::{DomainError, ErrorCode, RefusedApproval};
use crate::machine::State;
use crate::model::{Actor, Approval, ApprovalStatus, StoredApprovalStatus};
use crate::standing::{Standing, StandingSpec};

/// The reply to an approval command: the record with its status at `now_ms`.
fn approval_reply(approval: &Approval, now_ms: u64) -> Reply {
    Reply::Approval { approval: approval.clone(), status: approval.status_at(now_ms) }
}

impl State {
    /// `refusal` of a transition on approval `id`, with the approval's state
    /// at `now_ms` attached when it was refused for that state
    /// (`FAILED_PRECONDITION`): what a client needs to say "not pending
    /// (status: …)" or "cannot be consumed (…, consumed by …)" without
    /// reading the record again, when it may have changed.
    fn with_approval_state(&self, refusal: DomainError, id: &str, now_ms: u64) -> DomainError {
        match self.approvals.get(id) {
            Some(approval) if refusal.code == ErrorCode::FailedPrecondition => refusal.with_approval(RefusedApproval {
                status: approval.status_at(now_ms),
                consumed_by_execution_id: approval.consumed_by_execution_id.clone(),
            }),
            _ => refusal,
        }
    }

    /// The time an approval command compares against: the caller's clock when
    /// given (orpc-agent injects a clock into its coordinators), else the cluster's.
    fn approval_now(&self, caller_now_ms: Option<u64>) -> u64 {
        caller_now_ms.unwrap_or(self.clock_ms)
    }

    /// Creates an approval requested by `principal` (who is recorded, for
    /// the self-approval check), of a standing approval when `standing` is
    /// given. `input` is its canonical input and input hash and `validity`
    /// its validity window when the request fixed it, as admission checked
    /// them (`crate::precheck::Checked`).
    pub(super) fn create_approval(
        &mut self,
        request: &CreateApproval,
        (input_json, input_hash): (String, String),
        validity: Option<(u64, u64)>,
        standing: Option<&StandingSpec>,
        principal: Option<&Principal>,
    ) -> Result<Reply, DomainError> {
        let now_ms = self.approval_now(request.caller_now_ms);
        // Admission judged the window whenever the request fixes its
        // requested-at time; only the default (the cluster clock) is known
        // here alone.
        let (requested_at_ms, expires_at_ms) = match validity {
            Some(window) => window,
            None => crate::precheck::validity_window(request, now_ms)?,
        };
        if self.approvals.contains(&request.id) {
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
            requester_principal: principal.cloned(),
            status: StoredApprovalStatus::Pending,
            decision: None,
            consumed_by_execution_id: None,
            execution_id: None,
            capability_version: None,
            correlation_id: None,
            closed_at_ms: None,
            quorum: None,
            standing: standing.map(|spec| Standing { spec: spec.clone(), used_by: Vec::new() }),
            registered: None,
            terms_hash: String::new(),
        };
        let approval = self.governed(approval);
        if approval.standing.is_some() {
            if let Some(policy) = approval.quorum.as_ref().and_then(|quorum| self.policy(&quorum.policy)) {
                if policy.forbid_standing {
                    return Err(DomainError::new(
                        ErrorCode::ApprovalStandingForbidden,
                        format!(
                            "policy {} governs capability {} and forbids standing approvals; request one use at a time",
                            policy.name, approval.capability_id
                        ),
                    ));
                }
            }
        }
        let approval = self.store_approval(approval);
        Ok(approval_reply(approval, now_ms))
    }

    /// `approval` with what the cluster knows about it filled in: its
    /// capability as registered (the version a submit named, else the
    /// latest), the policy that governs it (SPEC §10: by what the
    /// registration declares, the requester's types only adding one) and
    /// the hash of its terms (SPEC §13).
    fn governed(&self, mut approval: Approval) -> Approval {
        approval.registered = self
            .capability(&approval.capability_id, approval.capability_version)
            .map(crate::terms::RegisteredCapability::of);
        approval.quorum = self.quorum_for(&approval.capability_id, approval.registered.as_ref(), &approval.types);
        approval.terms_hash = crate::terms::terms_hash(&approval);
        approval
    }

    /// Stores a new approval (filled in by [`State::governed`] when it was
    /// not yet) and records `capability.approval_requested`.
    pub(super) fn store_approval(&mut self, approval: Approval) -> &Approval {
        let approval = if approval.terms_hash.is_empty() { self.governed(approval) } else { approval };
        if let Some(requester) = &approval.requester_principal {
            self.quotas.approval_opened(requester);
        }
        let approval = self.approvals.insert(approval);
        self.audit.record(
            EventKind::ApprovalRequested,
            &approval.actor,
            EventSubject::of_approval(approval),
            self.clock_ms,
        );
        approval
    }

    /// Decides an approval. `approver` is the effective approver: the
    /// caller's own actor, or another it was allowed to name
    /// (`delegate-decide`, checked by `authorize_command`).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn decide_approval(
        &mut self,
        id: &str,
        status: ApprovalStatus,
        approver: &Actor,
        comment: Option<&str>,
        terms_hash: Option<&str>,
        caller_now_ms: Option<u64>,
        caller: Option<&Caller>,
    ) -> Result<Reply, DomainError> {
        let principal = caller.map(|caller| &caller.principal);
        // A decision on an approval a policy governs is one vote, on the
        // input stored (the decide request names no input hash; docs/policies.md).
        if self.approvals.get(id).is_some_and(|approval| approval.quorum.is_some()) {
            let approve = status == ApprovalStatus::Approved;
            let now_ms = self.approval_now(caller_now_ms);
            let seen = crate::machine::policy_commands::Seen { input_hash: None, terms_hash };
            return self.cast_vote(id, approve, seen, approver, comment, caller, now_ms);
        }
        let now_ms = self.approval_now(caller_now_ms);
        // A principal deciding as itself must not be the one that requested
        // it, whatever actor it named then; one deciding on another's behalf
        // is a backend that logs its own users in, and the actors compare.
        let decider = principal.filter(|principal| principal.is_actor(approver));
        if let Some(approval) = self.approvals.get(id) {
            crate::terms::check_terms_hash(&approval, terms_hash)?;
        }
        let approval = match self.approvals.decide(id, status, approver, comment, now_ms, decider) {
            Ok(approval) => approval,
            Err(refusal) => return Err(self.with_approval_state(refusal, id, now_ms)),
        };
        // Decided, it is no longer pending, approved or rejected.
        if let Some(requester) = &approval.requester_principal {
            self.quotas.approval_closed(requester);
        }
        let terms_hash = approval.terms_hash.clone();
        let kind = if status == ApprovalStatus::Approved {
            EventKind::Approved { terms_hash }
        } else {
            EventKind::Rejected { terms_hash }
        };
        self.audit.record(kind, approver, EventSubject::of_approval(&approval), self.clock_ms);
        Ok(approval_reply(&approval, now_ms))
    }

    pub(super) fn consume_approval(
        &mut self,
        id: &str,
        execution_id: &str,
        caller_now_ms: Option<u64>,
        principal: Option<&Principal>,
    ) -> Result<Reply, DomainError> {
        let now_ms = self.approval_now(caller_now_ms);
        let approval = self.mark_consumed(id, execution_id, now_ms, principal)?;
        Ok(approval_reply(&approval, now_ms))
    }

    /// The atomic compare-and-set, and `approval.consumed`: by the principal
    /// that consumed it, or (`--insecure`, no principal) by its approver.
    pub(super) fn mark_consumed(
        &mut self,
        id: &str,
        execution_id: &str,
        now_ms: u64,
        principal: Option<&Principal>,
    ) -> Result<Approval, DomainError> {
        let approval = match self.approvals.consume(id, execution_id, now_ms) {
            Ok(approval) => approval,
            Err(refusal) => return Err(self.with_approval_state(refusal, id, now_ms)),
        };
        let actor = match principal {
            Some(principal) => principal.as_actor(),
            None => approval.decision.as_ref().map_or(&approval.actor, |decision| &decision.approver).clone(),
        };
        self.audit.record(EventKind::ApprovalConsumed, &actor, EventSubject::of_approval(&approval), self.clock_ms);
        Ok(approval)
    }

    /// Withdraws an approval, recorded as the principal that did (or,
    /// `--insecure`, as its requester).
    pub(super) fn cancel_approval(
        &mut self,
        id: &str,
        caller_now_ms: Option<u64>,
        principal: Option<&Principal>,
    ) -> Result<Reply, DomainError> {
        let now_ms = self.approval_now(caller_now_ms);
        let approval = match self.approvals.cancel(id, now_ms) {
            Ok(approval) => approval,
            Err(refusal) => return Err(self.with_approval_state(refusal, id, now_ms)),
        };
        if let Some(requester) = &approval.requester_principal {
            self.quotas.approval_closed(requester);
        }
        let actor = principal.map_or_else(|| approval.actor.clone(), Principal::as_actor);
        self.audit.record(EventKind::ApprovalCancelled, &actor, EventSubject::of_approval(&approval), self.clock_ms);
        Ok(approval_reply(&approval, now_ms))
    }
}
