//! Per-principal quotas across parts: which commands are writes, which
//! open a record that a count quota bounds, the check admission runs
//! ([`State::check_quota`], part of [`State::admit`]: at the edge before
//! proposing and in `apply` at the command's log position), the token an
//! admitted write takes ([`State::charge_quota`]), the admin's `SetQuota`,
//! and the reads of quotas.
//!
//! Writes are what a client sends to change state: `CreateApproval`,
//! `DecideApproval`, `ConsumeApproval`, `CancelApproval`, `Submit`,
//! `Resume`, `CancelExecution`, `RecordEvent`. A worker's `Poll`,
//! `Heartbeat` and `Report` are not (throttling a report or a heartbeat
//! would lose a result or a lease, which harms correctness; polls are
//! bounded by the node's long-poll bound and lease only ready work), nor
//! are an admin's commands and a node's own (`Tick`, `BootstrapAdmin`).
//! A caller of `None` (`--insecure`) has no principal and no quota.

use std::collections::BTreeMap;

use crate::access::{Action, Caller, Principal};
use crate::audit::{EventKind, EventSubject};
use crate::command::{Command, Reply};
use crate::error::{DomainError, QuotaKind};
use crate::machine::State;
use crate::model::Actor;
use crate::quotas::{QuotaChange, QuotaUsage, QuotaView};

impl State {
    /// Whether `command` is a write that counts against its principal's
    /// rate, and which count quota it would open a record under, if any.
    /// A command that only finds its record already there (a repeated
    /// submit, an approval id that exists) opens none; one that will be
    /// refused for another reason is still counted as the write it is.
    fn quota_cost(&self, command: &Command) -> Option<Option<QuotaKind>> {
        let opens = match command {
            Command::CreateApproval(request) | Command::CreateStandingApproval { request, .. } => {
                (!self.approvals.contains(&request.id)).then_some(QuotaKind::PendingApprovals)
            }
            Command::Submit(submit) => match self.registry.get(&submit.capability_id, None) {
                _ if self.executions.contains(&submit.execution_id) => None,
                Some(capability) if capability.requires_approval() => {
                    let approval_id = crate::ids::approval_id_for(&submit.execution_id);
                    (!self.approvals.contains(&approval_id)).then_some(QuotaKind::PendingApprovals)
                }
                Some(_) => Some(QuotaKind::ActiveExecutions),
                None => None,
            },
            Command::Resume { .. } => Some(QuotaKind::ActiveExecutions),
            Command::DecideApproval { .. }
            | Command::ConsumeApproval { .. }
            | Command::CancelApproval { .. }
            | Command::CancelExecution { .. }
            | Command::RecordEvent(_)
            | Command::CastVote { .. }
            | Command::WithdrawVote { .. } => None,
            Command::Poll { .. }
            | Command::Heartbeat { .. }
            | Command::Report { .. }
            | Command::RegisterCapability(_)
            | Command::Grant { .. }
            | Command::Revoke { .. }
            | Command::SetQuota { .. }
            | Command::SetPolicy(_)
            | Command::DeletePolicy { .. }
            | Command::BootstrapAdmin { .. }
            | Command::RegisterNoteKey { .. }
            | Command::CosignCheckpoint { .. }
            | Command::AddWitnessCosignature { .. }
            | Command::Tick { .. }
            | Command::Handoff(_)
            | Command::DecideThenResume(_) => return None,
        };
        Some(opens)
    }

    /// Whether `caller` may send `command` now under its quotas, stamped
    /// `now_ms`, while `in_flight` of its writes are proposed but not yet
    /// applied (the serving leader's count; 0 at apply). The last step of
    /// [`State::admit`]: the edge asks it before proposing, so a refused
    /// write costs no log entry; `apply` asks it again and that answer counts.
    ///
    /// A count quota is checked first (it is not cured by waiting), then
    /// the write rate. A retry of a request the dedup table remembers is
    /// never refused: it gets its first answer back, as without quotas.
    pub fn check_quota(
        &self,
        caller: Option<&Caller>,
        request_id: Option<&str>,
        command: &Command,
        now_ms: u64,
        in_flight: u64,
    ) -> Result<(), DomainError> {
        let Some(caller) = caller else { return Ok(()) };
        let Some(opens) = self.quota_cost(command) else { return Ok(()) };
        let principal = &caller.principal;
        let verdict = match opens {
            Some(kind) => self.quotas.check_count(principal, kind, in_flight),
            None => Ok(()),
        }
        .and_then(|()| self.quotas.check_rate(principal, self.clock_ms.max(now_ms), in_flight));
        match verdict {
            // Only a refusal pays for the dedup lookup (a hash of the command).
            Err(_) if self.remembers(request_id, principal, command) => Ok(()),
            verdict => verdict,
        }
    }

    /// Whether `command` is a write that counts against its principal's
    /// quotas (the edge counts those it has in flight).
    pub fn counts_against_quota(&self, command: &Command) -> bool {
        self.quota_cost(command).is_some()
    }

    /// Whether the dedup table holds `request_id` for this very command by
    /// `principal`, unexpired: `apply` will answer it from there.
    fn remembers(&self, request_id: Option<&str>, principal: &Principal, command: &Command) -> bool {
        let Some(request_id) = request_id.filter(|id| !id.is_empty()) else { return false };
        self.dedup.recall(crate::dedup::request_key(request_id)).is_some_and(|remembered| {
            remembered.expires_at_ms > self.clock_ms
                && remembered.fingerprint == crate::dedup::fingerprint(command, Some(principal))
        })
    }

    /// Takes one token from the write bucket of the principal of a write
    /// `apply` admitted (a write refused later for another reason still cost
    /// its log entry). A replay the dedup table answers costs nothing.
    pub(super) fn charge_quota(&mut self, caller: Option<&Caller>, request_id: Option<&str>, command: &Command) {
        let Some(caller) = caller else { return };
        if self.quota_cost(command).is_some() && !self.remembers(request_id, &caller.principal, command) {
            self.quotas.charge(&caller.principal, self.clock_ms);
        }
    }

    /// `SetQuota`: changes `subject`'s limits and records `quota.set`, by
    /// the admin `principal`.
    pub(super) fn set_quota(
        &mut self,
        subject: &Principal,
        change: &QuotaChange,
        principal: Option<&Principal>,
    ) -> Result<Reply, DomainError> {
        let limits = self.quotas.set(subject, change)?;
        let kind = EventKind::QuotaSet {
            principal: subject.clone(),
            pending_approvals_max: limits.pending_approvals_max,
            active_executions_max: limits.active_executions_max,
            writes_per_second: limits.writes_per_second,
            write_burst: limits.write_burst,
        };
        let actor = principal.map_or_else(Actor::system, Principal::as_actor);
        self.audit.record(kind, &actor, EventSubject::default(), self.clock_ms);
        Ok(Reply::Quota(self.quota(subject)))
    }

    /// Whether `caller` may read `subject`'s quota (`None`: every quota):
    /// its own, or any with `admin`. `None` (`--insecure`) may.
    pub fn authorize_quota_read(
        &self,
        caller: Option<&Caller>,
        subject: Option<&Principal>,
    ) -> Result<(), DomainError> {
        match (caller, subject) {
            (Some(caller), Some(subject)) if caller.principal == *subject => Ok(()),
            _ => self.authorize(caller, Action::ReadAccess),
        }
    }

    /// `principal`'s limits, usage and write tokens at the cluster clock.
    pub fn quota(&self, principal: &Principal) -> QuotaView {
        self.quotas.view(principal, self.clock_ms)
    }

    /// [`State::quota`] at `now_ms` (or the cluster clock, if later): a read
    /// sees the tokens refilled since the last write.
    pub fn quota_at(&self, principal: &Principal, now_ms: u64) -> QuotaView {
        self.quotas.view(principal, self.clock_ms.max(now_ms))
    }

    /// [`State::quota`] of every principal with an override or usage, in
    /// principal order, at `now_ms` (or the cluster clock, if later).
    pub fn quotas(&self, now_ms: u64) -> Vec<QuotaView> {
        self.quotas.principals().map(|principal| self.quotas.view(principal, self.clock_ms.max(now_ms))).collect()
    }

    /// The usage counters as kept, by principal (only non-zero ones).
    pub fn quota_usage(&self) -> BTreeMap<Principal, QuotaUsage> {
        self.quotas
            .principals()
            .map(|principal| (principal.clone(), self.quotas.usage(principal)))
            .filter(|(_, usage)| *usage != QuotaUsage::default())
            .collect()
    }

    /// The usage counters recounted from the hot records: pending
    /// approvals and non-final executions by requesting principal. Equal to
    /// [`State::quota_usage`] in every reachable state (the property tests
    /// check it); it scans the whole hot set, so it is for checks, not for
    /// the hot path.
    pub fn recount_quota_usage(&self) -> BTreeMap<Principal, QuotaUsage> {
        let mut usage: BTreeMap<Principal, QuotaUsage> = BTreeMap::new();
        for approval in self.approvals.open() {
            if let (crate::model::StoredApprovalStatus::Pending, Some(requester)) =
                (approval.status, &approval.requester_principal)
            {
                usage.entry(requester.clone()).or_default().pending_approvals += 1;
            }
        }
        for execution in self.executions.hot() {
            if let Some(requester) = &execution.requester_principal {
                usage.entry(requester.clone()).or_default().active_executions += 1;
            }
        }
        usage
    }
}
