//! Who may do what, decided against the replicated bindings: the
//! authorization of every command (the second step of admission,
//! `admission.rs`: at its log position, and by the edge before it
//! proposes), of reads ([`State::authorize`]), and the commands
//! that change the bindings (`Grant`, `Revoke`, `BootstrapAdmin`).
//!
//! A caller of `None` is a node started with `--insecure`: nothing is
//! checked, exactly as before authentication existed. docs/security.md
//! copies the table `authorize_command` and `authorize` implement.

use crate::access::{Action, Caller, Grant, GrantName, Principal, PrincipalKind};
use crate::audit::{EventKind, EventSubject};
use crate::command::{Command, Reply};
use crate::error::{DomainError, ErrorCode};
use crate::machine::State;
use crate::model::Actor;

fn denied(message: String) -> DomainError {
    DomainError::new(ErrorCode::PermissionDenied, message)
}

/// The actor recorded for a command by `principal` (the system actor
/// without one).
fn actor_of(principal: Option<&Principal>) -> Actor {
    principal.map_or_else(Actor::system, Principal::as_actor)
}

impl State {
    /// The grant `name` that `caller` may use: bound to its principal and,
    /// when its token lists roles, named there too.
    pub(super) fn usable_grant(&self, caller: &Caller, name: GrantName) -> Option<&Grant> {
        let in_scope = caller.scope.as_ref().is_none_or(|scope| scope.contains(&name));
        self.bindings.get(&caller.principal, name).filter(|_| in_scope)
    }

    /// The grant `name` of `caller`, or `PERMISSION_DENIED` saying that it
    /// may not `what` without it (and whether its token left it out).
    fn require(&self, caller: &Caller, name: GrantName, what: &str) -> Result<&Grant, DomainError> {
        if let Some(grant) = self.usable_grant(caller, name) {
            return Ok(grant);
        }
        let principal = &caller.principal;
        let grant = name.as_str();
        Err(denied(if self.bindings.get(principal, name).is_some() {
            format!("{principal} may not {what}: its token does not carry the {grant} grant")
        } else {
            format!("{principal} may not {what}: it needs the {grant} grant")
        }))
    }

    /// The first of `names` that `caller` may use, or a refusal naming them all.
    fn require_any(&self, caller: &Caller, names: &[GrantName], what: &str) -> Result<&Grant, DomainError> {
        if let Some(grant) = names.iter().find_map(|name| self.usable_grant(caller, *name)) {
            return Ok(grant);
        }
        let names: Vec<&str> = names.iter().map(|name| name.as_str()).collect();
        Err(denied(format!("{} may not {what}: it needs one of the grants {}", caller.principal, names.join(", "))))
    }

    /// Only a node (or the `--insecure` shell) may propose what the cluster
    /// does on its own.
    fn require_node(caller: &Caller, what: &str) -> Result<(), DomainError> {
        if caller.principal.kind == PrincipalKind::Node {
            return Ok(());
        }
        Err(denied(format!("{} may not {what}: only a node may", caller.principal)))
    }

    /// Only node `node_id` itself: a node signs for no other.
    fn require_node_itself(caller: &Caller, node_id: u64, what: &str) -> Result<(), DomainError> {
        if caller.principal == Principal::node(node_id) {
            return Ok(());
        }
        Err(denied(format!("{} may not {what} for node {node_id}: only that node may", caller.principal)))
    }

    /// Naming `actor` as the requester needs `act-for` unless it is the caller itself.
    fn check_acting_as(&self, caller: &Caller, actor: &Actor, what: &str) -> Result<(), DomainError> {
        if caller.principal.is_actor(actor) {
            return Ok(());
        }
        self.require(caller, GrantName::ActFor, &format!("{what} as {actor}")).map(|_| ())
    }

    /// A time claimed by the caller (`field`) needs the `clock` grant, and
    /// must be within the grant's skew bound of cluster time (`cluster_ms`)
    /// when it has one.
    fn check_caller_clock(
        &self,
        caller: &Caller,
        cluster_ms: u64,
        field: &str,
        value: Option<u64>,
    ) -> Result<(), DomainError> {
        let Some(value) = value else { return Ok(()) };
        let grant = self.require(caller, GrantName::Clock, &format!("send {field}"))?;
        if let Some(skew_ms_max) = grant.skew_ms_max {
            let skew_ms = value.abs_diff(cluster_ms);
            if skew_ms > skew_ms_max {
                return Err(denied(format!(
                    "{} may not send {field} {value}: it is {skew_ms} ms from cluster time {}, over its clock \
                     grant's bound of {skew_ms_max} ms",
                    caller.principal, cluster_ms
                )));
            }
        }
        Ok(())
    }

    /// A heartbeat or report: only the principal the lease was granted to,
    /// while its worker grant still covers the lease's queue. An unknown
    /// lease is left to the command (`LEASE_LOST`).
    fn check_lease_holder(&self, caller: &Caller, worker: &Grant, lease_id: u64) -> Result<(), DomainError> {
        let Some(record) = self.leases.get(lease_id) else { return Ok(()) };
        if record.principal.as_ref() != Some(&caller.principal) {
            // Never name the holder: a refusal must not reveal another principal.
            return Err(denied(format!(
                "{} may not use lease {lease_id}: it was granted to another principal",
                caller.principal
            )));
        }
        let Some(execution) = self.executions.get(&record.execution_id) else { return Ok(()) };
        let queue = &self.registry.of_execution(&execution).queue;
        if !worker.covers_all([queue]) {
            return Err(denied(format!(
                "{} may not use lease {lease_id}: its worker grant does not cover queue {queue}",
                caller.principal
            )));
        }
        Ok(())
    }

    /// Whether `caller`'s grants and ownership allow `command`, stamped
    /// `now_ms` (cluster time is the later of it and the state's clock, as
    /// at apply): the authorization step of [`State::admit`], which the
    /// edge asks before proposing and [`State::apply`] at the command's log
    /// position, before anything changes (that answer counts: a `Revoke`
    /// may be ordered in between).
    ///
    /// A record the decision reads (the approval of a decision, the lease of
    /// a heartbeat or report) that does not exist is left to the command,
    /// which answers `NOT_FOUND` or `LEASE_LOST`. `None` (`--insecure`) is
    /// always allowed.
    pub fn authorize_command(
        &self,
        caller: Option<&Caller>,
        command: &Command,
        now_ms: u64,
    ) -> Result<(), DomainError> {
        let Some(caller) = caller else { return Ok(()) };
        let cluster_ms = self.clock_ms.max(now_ms);
        match command {
            Command::Tick { .. } => State::require_node(caller, "advance cluster time"),
            // Validation refuses a hand-off first; this arm only keeps the
            // table whole (apply admits what a hand-off carries, one by one).
            Command::Handoff(_) => Err(denied("a lease hand-off is never sent".to_string())),
            Command::DecideThenResume(_) => Err(denied("a decision carrying a resume is never sent".to_string())),
            Command::BootstrapAdmin { .. } => State::require_node(caller, "bootstrap the first admin"),
            Command::RegisterNoteKey { node_id, .. }
            | Command::CosignCheckpoint { node_id, .. }
            | Command::AddWitnessCosignature { node_id, .. } => {
                State::require_node_itself(caller, *node_id, "sign audit checkpoints")
            }
            Command::RegisterCapability(_) => self.require(caller, GrantName::Admin, "register capabilities").map(drop),
            Command::Grant { .. } => self.require(caller, GrantName::Admin, "grant access").map(drop),
            Command::Revoke { .. } => self.require(caller, GrantName::Admin, "revoke access").map(drop),
            Command::SetQuota { .. } => self.require(caller, GrantName::Admin, "set quotas").map(drop),
            Command::SetPolicy(_) => self.require(caller, GrantName::Admin, "set approval policies").map(drop),
            Command::DeletePolicy { .. } => {
                self.require(caller, GrantName::Admin, "delete approval policies").map(drop)
            }
            // Which approvals a principal may vote on is its eligibility for
            // the factors of their policy, decided by the command.
            Command::CastVote { approval_id, approver, terms_hash, .. } => {
                self.require(caller, GrantName::Approver, "vote on approvals")?;
                self.admit_decision(caller, true, approval_id, approver, terms_hash.as_deref(), cluster_ms)
            }
            Command::WithdrawVote { .. } => self.require(caller, GrantName::Approver, "vote on approvals").map(drop),
            Command::CreateApproval(request) | Command::CreateStandingApproval { request, .. } => {
                self.require(caller, GrantName::Submitter, "create approvals")?;
                self.check_acting_as(caller, &request.actor, "request approvals")?;
                if request.allow_self_approval {
                    self.require(caller, GrantName::SelfApproval, "opt an approval out of the self-approval check")?;
                }
                self.check_caller_clock(caller, cluster_ms, "callerNowMs", request.caller_now_ms)?;
                self.check_caller_clock(caller, cluster_ms, "requestedAtMs", request.requested_at_ms)
            }
            Command::DecideApproval { approval_id, approver, caller_now_ms, terms_hash, .. } => {
                let grant = self.require(caller, GrantName::Approver, "decide approvals")?;
                if !caller.principal.is_actor(approver) {
                    let what = format!("decide as approver {approver}");
                    self.require(caller, GrantName::DelegateDecide, &what)?;
                }
                self.check_may_decide(caller, approval_id, grant)?;
                self.check_caller_clock(caller, cluster_ms, "callerNowMs", *caller_now_ms)?;
                let now_ms = caller_now_ms.unwrap_or(cluster_ms);
                self.admit_decision(caller, false, approval_id, approver, terms_hash.as_deref(), now_ms)
            }
            Command::ConsumeApproval { approval_id, caller_now_ms, .. } => {
                self.require(caller, GrantName::Submitter, "consume approvals")?;
                self.check_may_act_on_approval(caller, approval_id, "consume")?;
                self.check_caller_clock(caller, cluster_ms, "callerNowMs", *caller_now_ms)
            }
            Command::CancelApproval { approval_id, caller_now_ms } => {
                self.require(caller, GrantName::Submitter, "cancel approvals")?;
                self.check_may_act_on_approval(caller, approval_id, "cancel")?;
                self.check_caller_clock(caller, cluster_ms, "callerNowMs", *caller_now_ms)
            }
            Command::Submit(submit) => {
                self.require(caller, GrantName::Submitter, "submit executions")?;
                self.check_acting_as(caller, &submit.actor, "submit executions")?;
                self.check_submit_id_free(caller, &submit.execution_id)
            }
            Command::Resume { approval_id, .. } => {
                self.require(caller, GrantName::Submitter, "resume executions")?;
                self.check_may_act_on_approval(caller, approval_id, "resume")
            }
            // An app records its own events with the grant it submits with;
            // the auditor grant stays read-only.
            Command::RecordEvent(event) => {
                self.require(caller, GrantName::Submitter, "record audit events")?;
                self.check_acting_as(caller, &event.actor, "record audit events")?;
                self.check_may_record_about(caller, event.execution_id.as_deref(), event.approval_id.as_deref())
            }
            Command::CancelExecution { execution_id, actor } => {
                self.require(caller, GrantName::Submitter, "cancel executions")?;
                self.check_may_act_on_execution(caller, execution_id)?;
                match actor {
                    Some(actor) => self.check_acting_as(caller, actor, "cancel executions"),
                    None => Ok(()),
                }
            }
            Command::Poll { queues, .. } => {
                let grant = self.require(caller, GrantName::Worker, "poll for tasks")?;
                match queues.iter().find(|queue| !grant.covers_all([*queue])) {
                    Some(queue) => Err(denied(format!(
                        "{} may not poll queue {queue}: its worker grant covers only {:?}",
                        caller.principal, grant.scope
                    ))),
                    None => Ok(()),
                }
            }
            Command::Heartbeat { lease_id, .. } => {
                let grant = self.require(caller, GrantName::Worker, "heartbeat leases")?;
                self.check_lease_holder(caller, grant, *lease_id)
            }
            Command::Report { lease_id, .. } => {
                let grant = self.require(caller, GrantName::Worker, "report results")?;
                self.check_lease_holder(caller, grant, *lease_id)
            }
        }
    }

    /// Whether `caller` may do `action` now: the reads and operations that
    /// are not commands, decided by the serving leader after its read
    /// barrier. `None` is a node started with `--insecure`: allowed.
    ///
    /// A listing of approvals is allowed to any approver; the records a
    /// scoped approver may see in it are those [`Action::ReadApproval`]
    /// allows, which the edge filters by.
    pub fn authorize(&self, caller: Option<&Caller>, action: Action) -> Result<(), DomainError> {
        let Some(caller) = caller else { return Ok(()) };
        let what = action.describe();
        let grants: &[GrantName] = match action {
            Action::ReadCapability | Action::ReadClusterStatus | Action::ReadOwnAccess | Action::ReadPolicies => {
                return Ok(())
            }
            Action::ReadApprovals => {
                &[GrantName::Submitter, GrantName::ActFor, GrantName::Auditor, GrantName::Approver]
            }
            Action::ReadExecution | Action::WatchEvents => {
                &[GrantName::Submitter, GrantName::ActFor, GrantName::Auditor, GrantName::Approver, GrantName::Worker]
            }
            Action::ReadAudit => &[GrantName::Auditor],
            Action::ReadAccess | Action::ChangeMembership | Action::Backup => &[GrantName::Admin],
        };
        self.require_any(caller, grants, &what).map(drop)
    }

    /// `Grant`: binds `grant` to `subject` and records `access.granted`
    /// when that changed anything.
    pub(super) fn grant(
        &mut self,
        subject: &Principal,
        grant: &Grant,
        principal: Option<&Principal>,
    ) -> Result<Reply, DomainError> {
        if self.bindings.bind(subject, grant)? {
            let kind = EventKind::AccessGranted { principal: subject.clone(), grant: grant.name };
            self.audit.record(kind, &actor_of(principal), EventSubject::default(), self.clock_ms);
            // A narrower approver scope narrows the principal's pending votes.
            self.reconcile_votes(subject, principal);
        }
        Ok(self.grants_reply(subject))
    }

    /// `Revoke`: removes a grant and records `access.revoked`; revoking a
    /// grant that is not bound changes nothing. The last admin's `admin`
    /// grant is not revoked: nobody could change grants again.
    pub(super) fn revoke(
        &mut self,
        subject: &Principal,
        name: GrantName,
        principal: Option<&Principal>,
    ) -> Result<Reply, DomainError> {
        let held = self.bindings.get(subject, name).is_some();
        if held && name == GrantName::Admin && self.bindings.admins().count() == 1 {
            return Err(DomainError::new(
                ErrorCode::FailedPrecondition,
                format!("{subject} is the only admin; grant admin to another principal before revoking it"),
            ));
        }
        if self.bindings.unbind(subject, name) {
            let kind = EventKind::AccessRevoked { principal: subject.clone(), grant: name };
            self.audit.record(kind, &actor_of(principal), EventSubject::default(), self.clock_ms);
            // A revoked approver's pending votes go with its grant.
            self.reconcile_votes(subject, principal);
        }
        Ok(self.grants_reply(subject))
    }

    /// `BootstrapAdmin`: grants `admin` to the first admin while nobody
    /// holds it; naming an admin that already holds it changes nothing, and
    /// naming another once an admin exists is `FAILED_PRECONDITION`.
    pub(super) fn bootstrap_admin(
        &mut self,
        admin: &Principal,
        principal: Option<&Principal>,
    ) -> Result<Reply, DomainError> {
        if self.bindings.get(admin, GrantName::Admin).is_some() {
            return Ok(self.grants_reply(admin));
        }
        if let Some(existing) = self.bindings.admins().next() {
            return Err(DomainError::new(
                ErrorCode::FailedPrecondition,
                format!("the cluster already has an admin ({existing}); {admin} cannot be bootstrapped as another"),
            ));
        }
        self.grant(admin, &Grant::of(GrantName::Admin), principal)
    }

    /// The reply to an access command: every grant `principal` now holds.
    pub(super) fn grants_reply(&self, principal: &Principal) -> Reply {
        Reply::Grants { principal: principal.clone(), grants: self.bindings.of(principal) }
    }
}
