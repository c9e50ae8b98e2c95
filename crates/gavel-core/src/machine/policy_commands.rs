//! Approval policies across parts (issue #25): `SetPolicy` and
//! `DeletePolicy` with the approvals they void, the policy an approval is
//! created under, votes (`CastVote`, a `DecideApproval` on a governed
//! approval, `WithdrawVote`), who is eligible for which factor, and the
//! votes a grant change takes away.
//!
//! Rules (docs/policies.md):
//! - a vote is the caller's own: a principal never votes for another, so a
//!   quorum is always that many distinct authenticated principals;
//! - the requester, or a principal acting for it, votes only with the
//!   `self-approval` grant, recorded on the vote;
//! - a principal votes once per approval; its vote counts for at most one
//!   factor, by [`crate::policies::assign_votes`];
//! - the vote that meets every factor approves the approval in the same
//!   command; the one that brings eligible denials to the deny threshold
//!   rejects it;
//! - a change of policy N voids every open approval created under an
//!   older version of N, and every open approval N now governs that was
//!   created under another policy or none: pending ones always, approved
//!   ones unless the change is non-retroactive;
//! - a grant change only ever narrows a pending vote's eligibility, never
//!   widens it (an admin's grant must not complete a quorum); a vote left
//!   eligible for nothing is removed.

use std::collections::BTreeSet;

use crate::access::{Caller, GrantName, Principal, PrincipalKind};
use crate::audit::{EventKind, EventSubject};
use crate::command::Reply;
use crate::error::{DomainError, ErrorCode, RefusedApproval};
use crate::limits::VOTES_PER_APPROVAL_MAX;
use crate::machine::State;
use crate::model::{Actor, ActorKind, Approval, ApprovalStatus, StoredApprovalStatus};
use crate::policies::{Approvers, Policy, PolicySpec, Quorum, Vote};

/// The principal an actor is when no credential says (`--insecure`).
fn principal_of_actor(actor: &Actor) -> Principal {
    let kind = match actor.kind {
        ActorKind::User => PrincipalKind::User,
        ActorKind::Automation => PrincipalKind::Worker,
        ActorKind::Service | ActorKind::Anonymous => PrincipalKind::Service,
    };
    Principal { kind, id: actor.id.clone() }
}

/// The quorum a new approval governed by `policy` starts with.
fn quorum_of(policy: &Policy) -> Quorum {
    Quorum {
        policy: policy.name.clone(),
        policy_version: policy.version,
        factors: policy.factors.iter().map(|factor| (factor.name.clone(), factor.k)).collect(),
        deny_threshold: policy.deny_threshold,
        votes: Vec::new(),
    }
}

/// What a voter says it was shown: the input hash (`CastVote` names one; a
/// `DecideApproval` on a governed approval does not) and the terms hash
/// (SPEC §13), each refused when it is not the approval's.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Seen<'a> {
    /// The input hash the voter saw.
    pub(crate) input_hash: Option<&'a str>,
    /// The terms hash the voter saw.
    pub(crate) terms_hash: Option<&'a str>,
}

impl State {
    /// The policy that governs a new approval, as the quorum it records.
    pub(super) fn quorum_for(
        &self,
        capability_id: &str,
        registered: Option<&crate::terms::RegisteredCapability>,
        types: &[String],
    ) -> Option<Quorum> {
        self.policies.governing(capability_id, registered, types).map(quorum_of)
    }

    /// `SetPolicy`: a new version of `spec`, voiding what it no longer
    /// allows, and `policy.set`, by the admin `principal`.
    pub(super) fn set_policy(
        &mut self,
        spec: &PolicySpec,
        principal: Option<&Principal>,
    ) -> Result<Reply, DomainError> {
        let policy = self.policies.set(spec, self.clock_ms)?.clone();
        let stale: Vec<String> = self
            .approvals
            .open()
            .filter(|approval| {
                let registered = approval.registered.as_ref();
                let governed_now = self.policies.governing(&approval.capability_id, registered, &approval.types);
                let created_under =
                    approval.quorum.as_ref().map(|quorum| (quorum.policy.as_str(), quorum.policy_version));
                let under_old_version =
                    created_under.is_some_and(|(name, version)| name == policy.name && version < policy.version);
                let newly_governed = governed_now.is_some_and(|governing| governing.name == policy.name)
                    && created_under.is_none_or(|(name, _)| name != policy.name);
                under_old_version || newly_governed
            })
            .map(|approval| approval.id.clone())
            .collect();
        let voided = self.void_approvals(&stale, spec.non_retroactive, principal);
        let kind = EventKind::PolicySet {
            name: policy.name.clone(),
            version: policy.version,
            voided,
            non_retroactive: spec.non_retroactive,
        };
        Ok(self.policy_changed(kind, policy, voided, principal))
    }

    /// `DeletePolicy`: removes policy `name`, voiding its open approvals,
    /// and `policy.deleted`, by the admin `principal`.
    pub(super) fn delete_policy(
        &mut self,
        name: &str,
        non_retroactive: bool,
        principal: Option<&Principal>,
    ) -> Result<Reply, DomainError> {
        let policy = self.policies.delete(name)?;
        let governed = self.approvals.open_governed_by(name);
        let voided = self.void_approvals(&governed, non_retroactive, principal);
        let kind =
            EventKind::PolicyDeleted { name: name.to_string(), version: policy.version, voided, non_retroactive };
        Ok(self.policy_changed(kind, policy, voided, principal))
    }

    /// Records `kind` (`policy.set`, `policy.deleted`) by the admin
    /// `principal`, and the reply to the change.
    fn policy_changed(&mut self, kind: EventKind, policy: Policy, voided: u32, principal: Option<&Principal>) -> Reply {
        let actor = principal.map_or_else(Actor::system, Principal::as_actor);
        self.audit.record(kind, &actor, EventSubject::default(), self.clock_ms);
        Reply::Policy { policy, voided }
    }

    /// Voids the open approvals `ids` (pending ones always, approved ones
    /// unless `non_retroactive`), each with `approval.voided`; returns how
    /// many it voided.
    fn void_approvals(&mut self, ids: &[String], non_retroactive: bool, principal: Option<&Principal>) -> u32 {
        let actor = principal.map_or_else(Actor::system, Principal::as_actor);
        let mut voided = 0;
        for id in ids {
            let status = self.approvals.get(id).expect("callers pass open approvals").status;
            if status == StoredApprovalStatus::Approved && non_retroactive {
                continue;
            }
            let approval = self.approvals.void(id, self.clock_ms);
            if let (StoredApprovalStatus::Pending, Some(requester)) = (status, &approval.requester_principal) {
                self.quotas.approval_closed(requester);
            }
            let (policy, policy_version) = approval
                .quorum
                .as_ref()
                .map_or((String::new(), 0), |quorum| (quorum.policy.clone(), quorum.policy_version));
            let kind = EventKind::ApprovalVoided { policy, policy_version };
            self.audit.record(kind, &actor, EventSubject::of_approval(&approval), self.clock_ms);
            voided += 1;
        }
        voided
    }

    /// The factors (indices) of `policy` that `voter` is eligible for:
    /// with a caller, by its usable approver grant; `--insecure` (no
    /// caller, no grants), every scope factor and the groups naming it.
    fn eligible_factors(&self, policy: &Policy, voter: &Principal, caller: Option<&Caller>) -> BTreeSet<u32> {
        let grant = match caller {
            Some(caller) => match self.usable_grant(caller, GrantName::Approver) {
                Some(grant) => Some(grant),
                None => return BTreeSet::new(),
            },
            None => None,
        };
        self.eligible_with(policy, voter, grant.map(|grant| &grant.scope), caller.is_none())
    }

    /// [`State::eligible_factors`] against the bindings alone (a grant
    /// change, which has no caller token to down-scope).
    fn eligible_by_bindings(&self, policy: &Policy, voter: &Principal) -> BTreeSet<u32> {
        match self.bindings.get(voter, GrantName::Approver) {
            Some(grant) => self.eligible_with(policy, voter, Some(&grant.scope), false),
            None => BTreeSet::new(),
        }
    }

    fn eligible_with(
        &self,
        policy: &Policy,
        voter: &Principal,
        approver_scope: Option<&BTreeSet<String>>,
        insecure: bool,
    ) -> BTreeSet<u32> {
        let mut eligible = BTreeSet::new();
        for (index, factor) in policy.factors.iter().enumerate() {
            let ok = match &factor.approvers {
                Approvers::Scope(scope) => insecure || approver_scope.is_some_and(|held| held.contains(scope)),
                Approvers::Group(group) => group.contains(voter) && (insecure || approver_scope.is_some()),
            };
            if ok {
                eligible.insert(u32::try_from(index).expect("factors are bounded"));
            }
        }
        eligible
    }

    /// Whether `principal` (acting as `actor`) is approval `approval`'s
    /// requester or acts for it.
    fn is_requester(approval: &Approval, principal: &Principal, actor: &Actor) -> bool {
        approval.requester_principal.as_ref() == Some(principal)
            || principal.is_actor(&approval.actor)
            || actor.id == approval.actor.id
    }

    /// Whether `voter` (as `approver`) may vote on the pending governed
    /// `approval` on the terms it names: eligible for a factor of its
    /// policy, the terms hash its own, and not its requester unless it
    /// holds the self-approval grant. Returns the factors it is eligible
    /// for and whether it is the requester. The command asks this before
    /// it votes, and the edge before it proposes ([`State::admit_decision`]).
    fn admit_voter(
        &self,
        approval: &Approval,
        quorum: &Quorum,
        voter: &Principal,
        approver: &Actor,
        terms_hash: Option<&str>,
        caller: Option<&Caller>,
    ) -> Result<(BTreeSet<u32>, bool), DomainError> {
        let approval_id = &approval.id;
        let policy = self.policies.get(&quorum.policy).filter(|policy| policy.version == quorum.policy_version);
        let policy = policy.expect("a pending approval's policy version is current: a change voids it");
        let eligible = self.eligible_factors(policy, voter, caller);
        if eligible.is_empty() {
            if caller.is_some_and(|caller| !self.may_read_approval(Some(caller), approval)) {
                return Err(crate::approvals::not_found(approval_id));
            }
            return Err(DomainError::new(
                ErrorCode::PermissionDenied,
                format!(
                    "{voter} is not eligible for any factor of policy {} and may not vote on {approval_id}",
                    policy.name
                ),
            ));
        }
        crate::terms::check_terms_hash(approval, terms_hash)?;
        let self_approval = State::is_requester(approval, voter, approver);
        if self_approval {
            let allowed = match caller {
                Some(caller) => self.usable_grant(caller, GrantName::SelfApproval).is_some(),
                None => approval.allow_self_approval,
            };
            if !allowed {
                return Err(DomainError::new(
                    ErrorCode::ApprovalSelfApproval,
                    format!(
                        "{voter} requested approval {approval_id} (or acts for its requester) and cannot vote on it"
                    ),
                ));
            }
        }
        Ok((eligible, self_approval))
    }

    /// The refusals of a decision or vote by `caller` on approval
    /// `approval_id` that no retry can turn into a success, asked by the
    /// edge before it proposes, so that a refused "yes" costs no log entry
    /// (issue #37): terms that are not the approval's, the requester
    /// deciding its own request, a voter eligible for no factor. Only a
    /// pending approval is judged: any other refusal (unknown, decided,
    /// a duplicate vote) is left to the command, whose reply a retry with
    /// the same request id gets again. The command asks the same
    /// questions again at its log position. `vote`: a `CastVote`, which
    /// only a governed approval takes.
    pub fn admit_decision(
        &self,
        caller: &Caller,
        vote: bool,
        approval_id: &str,
        approver: &Actor,
        terms_hash: Option<&str>,
        now_ms: u64,
    ) -> Result<(), DomainError> {
        let Some(approval) = self.approvals.get(approval_id) else { return Ok(()) };
        if approval.status_at(now_ms) != ApprovalStatus::Pending {
            return Ok(());
        }
        match &approval.quorum {
            Some(quorum) => {
                if !caller.principal.is_actor(approver) {
                    return Ok(()); // refused by the command, which says why
                }
                self.admit_voter(&approval, quorum, &caller.principal, approver, terms_hash, Some(caller)).map(drop)
            }
            None if vote => Ok(()), // refused by the command: decide it instead
            None => {
                crate::terms::check_terms_hash(&approval, terms_hash)?;
                let decider = Some(&caller.principal).filter(|principal| principal.is_actor(approver));
                crate::approvals::check_self_decision(&approval, approver, decider)
            }
        }
    }

    /// A vote on a governed approval (`CastVote`, or `DecideApproval` on
    /// one). `input_hash` is what the voter saw (`None`: a decide, which
    /// names none, votes on the stored input). `now_ms` is the cluster
    /// clock, or a decide's own clock (`callerNowMs`).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn cast_vote(
        &mut self,
        approval_id: &str,
        approve: bool,
        seen: Seen<'_>,
        approver: &Actor,
        comment: Option<&str>,
        caller: Option<&Caller>,
        now_ms: u64,
    ) -> Result<Reply, DomainError> {
        let Seen { input_hash, terms_hash } = seen;
        let approval = self.approvals.get(approval_id).ok_or_else(|| crate::approvals::not_found(approval_id))?;
        let Some(quorum) = approval.quorum.clone() else {
            return Err(DomainError::new(
                ErrorCode::FailedPrecondition,
                format!("approval {approval_id} is not governed by a policy: decide it instead of voting"),
            ));
        };
        let voter = match caller {
            Some(caller) if !caller.principal.is_actor(approver) => {
                return Err(DomainError::new(
                    ErrorCode::PermissionDenied,
                    format!(
                        "{} may not vote as {}: a vote on a governed approval is always the voter's own",
                        caller.principal, approver.id
                    ),
                ))
            }
            Some(caller) => caller.principal.clone(),
            None => principal_of_actor(approver),
        };
        let approval = match self.approvals.pending_for_vote(approval_id, now_ms) {
            Ok(approval) => approval.clone(),
            Err(refusal) => return Err(self.with_state_of(refusal, approval_id, now_ms)),
        };
        if input_hash.is_some_and(|hash| hash != approval.input_hash) {
            return Err(DomainError::new(
                ErrorCode::ApprovalInputMismatch,
                format!("the input hash voted on is not the input hash of approval {approval_id}"),
            ));
        }
        let (eligible, self_approval) = self.admit_voter(&approval, &quorum, &voter, approver, terms_hash, caller)?;
        if quorum.votes.iter().any(|vote| vote.principal == voter) {
            return Err(DomainError::new(
                ErrorCode::VoteDuplicate,
                format!("{voter} already voted on approval {approval_id}; withdraw that vote to vote again"),
            ));
        }
        if quorum.votes.len() >= VOTES_PER_APPROVAL_MAX {
            return Err(DomainError::new(
                ErrorCode::FailedPrecondition,
                format!("approval {approval_id} holds {VOTES_PER_APPROVAL_MAX} votes, the limit"),
            ));
        }
        let record = self.approvals.open_mut(approval_id);
        let quorum = record.quorum.as_mut().expect("checked above");
        quorum.votes.push(Vote {
            principal: voter,
            approver: approver.without_attributes(),
            approve,
            eligible,
            factor: None,
            input_hash: record.input_hash.clone(),
            self_approval,
            comment: comment.map(str::to_string),
            cast_at_ms: now_ms,
        });
        quorum.reassign();
        let factor =
            quorum.votes.last().and_then(|vote| vote.factor).map(|index| quorum.factors[index as usize].0.clone());
        let (met, denied) = (quorum.met(), quorum.denials() >= quorum.deny_threshold);
        if self_approval && met {
            // The vote that completes the quorum is the decision's approver;
            // resume checks a self-decided approval against this flag.
            record.allow_self_approval = true;
        }
        let terms_hash = record.terms_hash.clone();
        let kind = EventKind::VoteCast {
            policy_version: quorum.policy_version,
            approve,
            factor,
            self_approval,
            terms_hash: terms_hash.clone(),
        };
        self.audit.record(kind, approver, EventSubject::of_approval(record), now_ms);
        let decided = match (approve && met, !approve && denied) {
            (true, _) => Some((EventKind::Approved { terms_hash }, ApprovalStatus::Approved)),
            (_, true) => Some((EventKind::Rejected { terms_hash }, ApprovalStatus::Rejected)),
            _ => None,
        };
        let approval = match decided {
            Some((kind, status)) => {
                let approval = self.approvals.decide_by_quorum(approval_id, status, approver, comment, now_ms);
                if let Some(requester) = &approval.requester_principal {
                    self.quotas.approval_closed(requester);
                }
                self.audit.record(kind, approver, EventSubject::of_approval(&approval), now_ms);
                approval
            }
            None => self.approvals.get(approval_id).expect("still open").into_owned(),
        };
        let status = approval.status_at(now_ms);
        Ok(Reply::Approval { approval, status })
    }

    /// `WithdrawVote`: removes the caller's own vote from a pending
    /// approval and records `approval.vote_withdrawn`.
    pub(super) fn withdraw_vote(
        &mut self,
        approval_id: &str,
        approver: &Actor,
        caller: Option<&Caller>,
    ) -> Result<Reply, DomainError> {
        let voter = match caller {
            Some(caller) if !caller.principal.is_actor(approver) => {
                return Err(DomainError::new(
                    ErrorCode::PermissionDenied,
                    format!("{} may not withdraw the vote of {approver}: only its own", caller.principal),
                ))
            }
            Some(caller) => caller.principal.clone(),
            None => principal_of_actor(approver),
        };
        let now_ms = self.clock_ms;
        if let Err(refusal) = self.approvals.pending_for_vote(approval_id, now_ms) {
            return Err(self.with_state_of(refusal, approval_id, now_ms));
        }
        let record = self.approvals.open_mut(approval_id);
        let no_vote =
            || DomainError::new(ErrorCode::NotFound, format!("{voter} has no vote on approval {approval_id}"));
        let quorum = record.quorum.as_mut().ok_or_else(no_vote)?;
        let position = quorum.votes.iter().position(|vote| vote.principal == voter).ok_or_else(no_vote)?;
        quorum.votes.remove(position);
        quorum.reassign();
        self.audit.record(EventKind::VoteWithdrawn, approver, EventSubject::of_approval(record), now_ms);
        let approval = record.clone();
        let status = approval.status_at(now_ms);
        Ok(Reply::Approval { approval, status })
    }

    /// `refusal` of a vote on approval `approval_id` with the approval's
    /// status at `now_ms` attached (and its consumer), as a refused decide
    /// carries it: a client says "not pending (status: …)" without a
    /// second, racy read.
    fn with_state_of(&self, refusal: DomainError, approval_id: &str, now_ms: u64) -> DomainError {
        match self.approvals.get(approval_id) {
            Some(approval) => refusal.with_approval(RefusedApproval {
                status: approval.status_at(now_ms),
                consumed_by_execution_id: approval.consumed_by_execution_id.clone(),
            }),
            None => refusal,
        }
    }

    /// After `subject`'s grants changed: narrows each of its pending votes
    /// to the factors it is still eligible for and removes the votes left
    /// eligible for none, each with `approval.vote_removed`, by `principal`.
    pub(super) fn reconcile_votes(&mut self, subject: &Principal, principal: Option<&Principal>) {
        let actor = principal.map_or_else(Actor::system, Principal::as_actor);
        for id in self.approvals.pending_voted_by(subject) {
            let quorum = self.approvals.get(&id).expect("listed open").quorum.clone().expect("listed governed");
            let policy = self.policies.get(&quorum.policy).filter(|policy| policy.version == quorum.policy_version);
            let policy = policy.expect("a pending approval's policy version is current").clone();
            let now = self.eligible_by_bindings(&policy, subject);
            let record = self.approvals.open_mut(&id);
            let quorum = record.quorum.as_mut().expect("listed governed");
            let vote = quorum.votes.iter_mut().find(|vote| &vote.principal == subject).expect("listed with a vote");
            let narrowed: BTreeSet<u32> = vote.eligible.intersection(&now).copied().collect();
            if narrowed == vote.eligible {
                continue;
            }
            let removed = narrowed.is_empty();
            vote.eligible = narrowed;
            if removed {
                quorum.votes.retain(|vote| &vote.principal != subject);
            }
            quorum.reassign();
            if removed {
                let kind = EventKind::VoteRemoved { voter: subject.clone() };
                self.audit.record(kind, &actor, EventSubject::of_approval(record), self.clock_ms);
            }
        }
    }

    // ----- reads -----

    /// The policy `name`, if any.
    pub fn policy(&self, name: &str) -> Option<&Policy> {
        self.policies.get(name)
    }

    /// Every policy, by name.
    pub fn policies(&self) -> Vec<&Policy> {
        self.policies.all().collect()
    }

    /// The names of the policies `caller` is eligible to vote under (for
    /// the approver's view of approvals).
    pub(super) fn votable_policies(&self, caller: &Caller) -> BTreeSet<String> {
        self.policies
            .all()
            .filter(|policy| !self.eligible_factors(policy, &caller.principal, Some(caller)).is_empty())
            .map(|policy| policy.name.clone())
            .collect()
    }
}
