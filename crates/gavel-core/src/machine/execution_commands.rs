//! The execution commands (SPEC §4): submission, resume, leasing, heartbeats,
//! reports, timeouts and cancellation. Each spans parts: the registry for the
//! capability, the executions part for the record and where it waits, the
//! leases part for fencing tokens and deadlines, and the audit log.

use crate::access::Principal;
use crate::approvals::not_found as approval_not_found;
use crate::audit::{EventKind, EventSubject};
use crate::command::{Reply, Submit, Task};
use crate::error::{DomainError, ErrorCode};
use crate::executions::not_found as execution_not_found;
use crate::ids::{approval_id_for, idempotency_key};
use crate::limits::INPUT_BYTES_MAX;
use crate::machine::State;
use crate::model::{
    AcceptedReport, Actor, Approval, ApprovalStatus, CancelCode, Capability, ExecutedBeforeFailure, Execution,
    ExecutionState, Lease, ReportOutcome, ResultEnvelope, StoredApprovalStatus,
};
#[cfg(feature = "mutants")]
use crate::mutants::Mutant;
use crate::retry::{retry_after_ms, AttemptFailure, WORKER_LOST_CODE};
use crate::validate::check_json;

fn lease_lost(lease_id: u64, why: &str) -> DomainError {
    DomainError::new(ErrorCode::LeaseLost, format!("lease {lease_id} is not current: {why}"))
}

fn already_exists(execution_id: &str) -> DomainError {
    DomainError::new(
        ErrorCode::AlreadyExists,
        format!("execution \"{execution_id}\" already exists with a different input or capability"),
    )
}

/// The earlier of the attempt deadline and, with a heartbeat timeout, the heartbeat deadline.
fn effective_deadline(capability: &Capability, deadline_ms: u64, heartbeat_at_ms: u64) -> u64 {
    match capability.heartbeat_timeout_ms {
        Some(timeout) => deadline_ms.min(heartbeat_at_ms.saturating_add(timeout)),
        None => deadline_ms,
    }
}

/// The task handed to a worker for `lease` of `execution`.
fn task(execution: &Execution, capability: &Capability, lease: Lease) -> Task {
    Task {
        lease,
        idempotency_key: execution.idempotency_key.clone(),
        capability: capability.clone(),
        input_json: execution.input_json.clone(),
        actor: execution.actor.clone(),
        approver: execution.approver.clone(),
        correlation_id: execution.correlation_id.clone(),
        approval_id: execution.approval_id.clone(),
        surface: execution.surface.clone(),
    }
}

struct NewExecution<'a> {
    execution_id: String,
    capability_id: &'a str,
    capability_version: u64,
    input_json: String,
    input_hash: String,
    actor: Actor,
    requester_principal: Option<Principal>,
    surface: String,
    correlation_id: Option<String>,
    approval_id: Option<String>,
    approver: Option<Actor>,
}

impl State {
    /// Records an event about a stored execution; the actor defaults to its submitter.
    fn record_execution_event(&mut self, id: &str, kind: EventKind, actor: Option<&Actor>) {
        let execution = self.executions.get(id).expect("events are recorded for stored executions");
        let actor = actor.unwrap_or(&execution.actor);
        self.audit.record(kind, actor, EventSubject::of_execution(&execution), self.clock_ms);
    }

    /// Submits an execution for `principal` (recorded on the approval when
    /// the capability needs one); `input` is its canonical input and input
    /// hash, as admission checked them.
    pub(super) fn submit(
        &mut self,
        submit: &Submit,
        (input_json, input_hash): (String, String),
        principal: Option<&Principal>,
    ) -> Result<Reply, DomainError> {
        let capability = self.registry.get(&submit.capability_id, None).ok_or_else(|| {
            DomainError::new(
                ErrorCode::CapabilityNotFound,
                format!("capability {} is not registered", submit.capability_id),
            )
        })?;
        if let Some(existing) = self.executions.get(&submit.execution_id) {
            return if existing.input_hash == input_hash && existing.capability_id == submit.capability_id {
                Ok(Reply::Execution { execution: existing.into_owned(), created: false })
            } else {
                Err(already_exists(&submit.execution_id))
            };
        }
        if capability.requires_approval() {
            return self.request_approval(submit, input_json, input_hash, principal);
        }
        let capability_version = capability.version;
        let execution = self
            .create_execution(NewExecution {
                execution_id: submit.execution_id.clone(),
                capability_id: &submit.capability_id,
                capability_version,
                input_json,
                input_hash,
                actor: submit.actor.clone(),
                requester_principal: principal.cloned(),
                surface: submit.surface.clone(),
                correlation_id: submit.correlation_id.clone(),
                approval_id: None,
                approver: None,
            })
            .clone();
        let subject = EventSubject::of_execution(&execution);
        self.audit.record(EventKind::Requested, &submit.actor, subject, self.clock_ms);
        Ok(Reply::Execution { execution, created: true })
    }

    /// Submit of a capability that needs approval: store a pending approval
    /// (idempotently) and answer approval-required. No execution exists yet.
    fn request_approval(
        &mut self,
        submit: &Submit,
        input_json: String,
        input_hash: String,
        principal: Option<&Principal>,
    ) -> Result<Reply, DomainError> {
        let capability = self.registry.get(&submit.capability_id, None).expect("submit found the capability");
        let approval_id = approval_id_for(&submit.execution_id);
        if let Some(existing) = self.approvals.get(&approval_id) {
            if existing.input_hash != input_hash || existing.capability_id != capability.id {
                return Err(already_exists(&submit.execution_id));
            }
            let status = existing.status_at(self.clock_ms);
            return Ok(Reply::ApprovalRequired { approval: existing.into_owned(), status });
        }
        let policy = capability.approval.as_ref().expect("requires_approval implies a policy");
        let expires_at_ms = self.clock_ms.saturating_add(policy.expires_in_ms);
        // As for an approval created on its own (`precheck::validity_window`):
        // an expiry past the last Unix time Gavel accepts is refused, and
        // before anything is recorded.
        if expires_at_ms > crate::limits::TIMESTAMP_MS_MAX {
            return Err(DomainError::invalid(format!(
                "the approval would expire at {expires_at_ms}, past the last Unix time in milliseconds Gavel \
                 accepts ({}): is the cluster clock at {} right?",
                crate::limits::TIMESTAMP_MS_MAX,
                self.clock_ms
            )));
        }
        let subject = EventSubject {
            execution_id: Some(&submit.execution_id),
            capability_id: Some(&capability.id),
            approval_id: Some(&approval_id),
            correlation_id: submit.correlation_id.as_deref(),
            input_hash: Some(&input_hash),
            of_execution: false,
        };
        self.audit.record(EventKind::Requested, &submit.actor, subject, self.clock_ms);
        let approval = Approval {
            id: approval_id,
            capability_id: capability.id.clone(),
            surface: submit.surface.clone(),
            actor: submit.actor.clone(),
            input_json,
            input_hash,
            reasons: vec![format!("capability {} requires approval", capability.id)],
            types: vec![policy.approval_type.clone().unwrap_or_else(|| "human".to_string())],
            risk: capability.risk,
            side_effect: capability.side_effect,
            requested_at_ms: self.clock_ms,
            expires_at_ms,
            allow_self_approval: false,
            requester_principal: principal.cloned(),
            status: StoredApprovalStatus::Pending,
            decision: None,
            consumed_by_execution_id: None,
            execution_id: Some(submit.execution_id.clone()),
            capability_version: Some(capability.version),
            correlation_id: submit.correlation_id.clone(),
            closed_at_ms: None,
            quorum: None,
            standing: None,
            registered: None,
            terms_hash: String::new(),
        };
        let now_ms = self.clock_ms;
        let approval = self.store_approval(approval);
        let status = approval.status_at(now_ms);
        Ok(Reply::ApprovalRequired { approval: approval.clone(), status })
    }

    /// Verifies the approval, consumes it and creates the execution: one
    /// command, recorded as `principal` when there is one. `given` is the
    /// canonical input and input hash the request gave, if any, as admission
    /// checked them.
    pub(super) fn resume(
        &mut self,
        approval_id: &str,
        execution_id: &str,
        given: Option<(String, String)>,
        principal: Option<&Principal>,
    ) -> Result<Reply, DomainError> {
        let given_hash = given.as_ref().map(|(_, hash)| hash.clone());
        let approval = self.approvals.get(approval_id).ok_or_else(|| approval_not_found(approval_id))?.into_owned();
        let now_ms = self.clock_ms;
        let refuse = |code: ErrorCode, message: String| Err(DomainError::new(code, message));
        match approval.status_at(now_ms) {
            ApprovalStatus::Pending => {
                return refuse(ErrorCode::ApprovalPending, format!("approval {approval_id} is still pending"))
            }
            ApprovalStatus::Expired => {
                return refuse(ErrorCode::ApprovalExpired, format!("approval {approval_id} expired before a decision"))
            }
            ApprovalStatus::Rejected => {
                return refuse(ErrorCode::ApprovalRejected, format!("approval {approval_id} was rejected"))
            }
            ApprovalStatus::Cancelled => {
                return refuse(ErrorCode::ApprovalCancelled, format!("approval {approval_id} was cancelled"))
            }
            ApprovalStatus::Consumed => {
                let by = approval.consumed_by_execution_id.as_deref().unwrap_or("another execution");
                return refuse(
                    ErrorCode::ApprovalConsumed,
                    format!("approval {approval_id} was already consumed by {by}"),
                );
            }
            ApprovalStatus::Voided => {
                return refuse(
                    ErrorCode::ApprovalVoided,
                    format!("approval {approval_id} was voided by a change of the policy it was created under"),
                )
            }
            ApprovalStatus::Approved => {}
        }
        if now_ms > approval.expires_at_ms {
            return refuse(
                ErrorCode::ApprovalExpired,
                format!("approval {approval_id} expired at {}", approval.expires_at_ms),
            );
        }
        let stored_hash =
            check_json("approval input", &approval.input_json, INPUT_BYTES_MAX, ErrorCode::ApprovalInputMismatch)?.1;
        // A standing approval bound to JSON pointers runs each use's own
        // input, equal to the approved one at those pointers; any other
        // approval runs exactly the approved input.
        let pointer_bound = approval.standing.as_ref().filter(|standing| !standing.spec.bound_pointers.is_empty());
        let hash_differs = given_hash.as_ref().is_some_and(|hash| *hash != approval.input_hash);
        if stored_hash != approval.input_hash || (hash_differs && pointer_bound.is_none()) {
            return refuse(
                ErrorCode::ApprovalInputMismatch,
                format!("the input no longer matches the input approved by {approval_id}"),
            );
        }
        let (run_input_json, run_input_hash) = match (pointer_bound, given) {
            (Some(standing), Some((canonical, hash))) => {
                crate::standing::check_binding(standing, &approval.input_json, &canonical)?;
                (canonical, hash)
            }
            (Some(_), None) => {
                return Err(DomainError::invalid(format!(
                    "approval {approval_id} is a standing approval bound to JSON pointers: each resume gives its input"
                )))
            }
            (None, _) => (approval.input_json.clone(), approval.input_hash.clone()),
        };
        let approver = approval.decision.as_ref().map(|decision| decision.approver.clone());
        if approver.as_ref().is_some_and(|approver| approver.id == approval.actor.id) && !approval.allow_self_approval {
            return refuse(
                ErrorCode::ApprovalSelfApproval,
                format!("approval {approval_id} was decided by its requester {}", approval.actor),
            );
        }
        let capability_version = self
            .registry
            .get(&approval.capability_id, approval.capability_version)
            .map(|capability| capability.version)
            .ok_or_else(|| {
                DomainError::new(
                    ErrorCode::CapabilityNotFound,
                    format!("capability {} is not registered", approval.capability_id),
                )
            })?;
        let execution_id = approval.execution_id.clone().unwrap_or_else(|| execution_id.to_string());
        if self.executions.contains(&execution_id) {
            return Err(already_exists(&execution_id));
        }
        if approval.standing.is_some() {
            self.spend_standing_use(approval_id, &execution_id, now_ms, principal)?;
        } else {
            self.mark_consumed(approval_id, &execution_id, now_ms, principal)?;
        }
        let execution = self.create_execution(NewExecution {
            execution_id,
            capability_id: &approval.capability_id,
            capability_version,
            input_json: run_input_json,
            input_hash: run_input_hash,
            actor: approval.actor.clone(),
            requester_principal: approval.requester_principal.clone(),
            surface: approval.surface.clone(),
            correlation_id: approval.correlation_id.clone(),
            approval_id: Some(approval_id.to_string()),
            approver,
        });
        Ok(Reply::Execution { execution: execution.clone(), created: true })
    }

    /// Spends one use of the standing approval `approval_id` on
    /// `execution_id` and records `approval.standing_use_spent`; the last
    /// use also consumes it (`approval.consumed`), which closes it.
    fn spend_standing_use(
        &mut self,
        approval_id: &str,
        execution_id: &str,
        now_ms: u64,
        principal: Option<&Principal>,
    ) -> Result<(), DomainError> {
        let (used, uses_max) = self.approvals.spend_use(approval_id, execution_id);
        let approval = self.approvals.get(approval_id).expect("still open").into_owned();
        let actor = principal.map_or_else(|| approval.actor.clone(), Principal::as_actor);
        let subject = EventSubject { execution_id: Some(execution_id), ..EventSubject::of_approval(&approval) };
        self.audit.record(EventKind::StandingUseSpent { used, uses_max }, &actor, subject, self.clock_ms);
        if used == uses_max {
            self.mark_consumed(approval_id, execution_id, now_ms, principal)?;
        }
        Ok(())
    }

    /// Stores a new execution at the back of its capability's queue.
    fn create_execution(&mut self, new: NewExecution<'_>) -> &Execution {
        let queue = self
            .registry
            .get(new.capability_id, Some(new.capability_version))
            .map(|capability| capability.queue.as_str())
            .expect("callers resolved the capability version");
        let execution = Execution {
            idempotency_key: idempotency_key(&new.execution_id),
            execution_id: new.execution_id,
            capability_id: new.capability_id.to_string(),
            capability_version: new.capability_version,
            input_json: new.input_json,
            input_hash: new.input_hash,
            actor: new.actor,
            requester_principal: new.requester_principal,
            surface: new.surface,
            correlation_id: new.correlation_id,
            approval_id: new.approval_id,
            approver: new.approver,
            state: ExecutionState::Queued,
            attempts: 0,
            result: None,
            submitted_at_ms: self.clock_ms,
            finalized_at_ms: None,
            lease: None,
            backoff_until_ms: None,
            cancel_requested: false,
            revoked_lease_id: None,
            accepted_report: None,
            queue_position: 0,
            lease_ids: Vec::new(),
        };
        if let Some(requester) = &execution.requester_principal {
            self.quotas.execution_opened(requester);
        }
        self.executions.insert(execution, queue)
    }

    /// Moves executions whose backoff has ended back into their queues, oldest end first.
    pub(super) fn release_due_backoffs(&mut self) -> u32 {
        let mut released = 0;
        while let Some(id) = self.executions.pop_due_backoff(self.clock_ms) {
            let execution = self.executions.get(&id).expect("backoffs point at retained executions");
            let queue = &self.registry.of_execution(&execution).queue;
            self.executions.enqueue(&id, queue);
            released += 1;
        }
        released
    }

    /// The queue `command` would put a new execution in if it were applied
    /// now: a `Submit` of a capability that needs no approval, of an
    /// execution not yet stored, a `Resume` of an approved approval, or a
    /// decision carrying a resume of a pending one (decision 0108).
    /// The leader asks it to pick a waiting poll to hand that work to
    /// (decision 0107); it is a guess made before the command's position
    /// in the log, and apply decides (a hand-off whose command created
    /// nothing grants nothing).
    pub fn queue_readied_by(&self, command: &crate::command::Command) -> Option<&str> {
        use crate::command::Command;
        let capability = match command {
            Command::Submit(submit) => {
                let capability = self.registry.get(&submit.capability_id, None)?;
                if capability.requires_approval() || self.executions.contains(&submit.execution_id) {
                    return None;
                }
                capability
            }
            Command::Resume { approval_id, .. } => {
                let approval = self.approvals.get(approval_id)?;
                if approval.status_at(self.clock_ms) != ApprovalStatus::Approved {
                    return None;
                }
                self.registry.get(&approval.capability_id, approval.capability_version)?
            }
            // The decision has not applied yet: guess it approves.
            Command::DecideThenResume(chained) => {
                let approval = self.approvals.get(chained.approval_id()?)?;
                if approval.status_at(self.clock_ms) != ApprovalStatus::Pending {
                    return None;
                }
                self.registry.get(&approval.capability_id, approval.capability_version)?
            }
            _ => return None,
        };
        Some(capability.queue.as_str())
    }

    /// Leases up to `tasks_max` tasks to `worker_id`, bound to `principal`.
    pub(super) fn poll(
        &mut self,
        worker_id: &str,
        queues: &[String],
        tasks_max: u32,
        principal: Option<&Principal>,
    ) -> Result<Reply, DomainError> {
        self.release_due_backoffs();
        let mut tasks = Vec::new();
        let mut seen: Vec<&String> = Vec::new();
        for queue in queues {
            if seen.contains(&queue) {
                continue;
            }
            seen.push(queue);
            while tasks.len() < tasks_max as usize {
                let Some(id) = self.executions.pop_ready(queue) else { break };
                tasks.push(self.grant_lease(&id, worker_id, principal));
            }
        }
        Ok(Reply::Tasks(tasks))
    }

    /// Leases the next attempt of a queued execution (just taken from its
    /// queue) to `worker_id`, bound to `principal`.
    fn grant_lease(&mut self, id: &str, worker_id: &str, principal: Option<&Principal>) -> Task {
        let now_ms = self.clock_ms;
        let execution = self.executions.get(id).expect("queued executions are retained");
        let capability = self.registry.of_execution(&execution);
        let attempt = execution.attempts + 1;
        let deadline_ms = now_ms.saturating_add(capability.timeout_ms);
        let lease_id = self.leases.grant(id, attempt, effective_deadline(capability, deadline_ms, now_ms), principal);
        let lease = Lease {
            lease_id,
            execution_id: id.to_string(),
            attempt,
            worker_id: worker_id.to_string(),
            granted_at_ms: now_ms,
            deadline_ms,
            heartbeat_at_ms: now_ms,
        };
        let execution = self.executions.start_attempt(lease.clone());
        let task = task(execution, capability, lease);
        let kind = EventKind::Started { attempt, lease_id, worker_id: worker_id.to_string() };
        self.audit.record(kind, &execution.actor, EventSubject::of_execution(execution), now_ms);
        task
    }

    /// The task a worker receives for a lease, rebuilt from current state.
    /// The task of a remembered lease grant, while that lease is still the
    /// execution's current one and its deadline has not passed: a replayed
    /// grant must never hand a worker a lease it could not report under
    /// (the attempt was expired, retried or finalized meanwhile).
    pub(super) fn task_for_lease(&self, lease: &Lease) -> Option<Task> {
        let execution = self.executions.get(&lease.execution_id)?;
        let current = execution.lease.as_ref().is_some_and(|held| held.lease_id == lease.lease_id);
        if !current || self.leases.deadline_ms(lease.lease_id) <= self.clock_ms {
            return None;
        }
        Some(task(&execution, self.registry.of_execution(&execution), lease.clone()))
    }

    /// The current lease with this id, if it is still valid at the cluster clock.
    /// A lease past its effective deadline is expired on the spot (the clock
    /// comes from the command, so every replica does the same).
    fn current_lease(&mut self, lease_id: u64, worker_id: &str) -> Result<String, DomainError> {
        let record = self.leases.get(lease_id).ok_or_else(|| lease_lost(lease_id, "unknown lease"))?;
        let execution = self.executions.get(&record.execution_id).expect("leases are kept for retained executions");
        let Some(lease) = execution.lease.as_ref().filter(|lease| lease.lease_id == lease_id) else {
            return Err(lease_lost(lease_id, "it was expired, revoked or superseded"));
        };
        if lease.worker_id != worker_id {
            return Err(lease_lost(lease_id, "it is held by another worker"));
        }
        let past_deadline = self.leases.deadline_ms(lease_id) <= self.clock_ms;
        // Planted bug `no-fencing`: a report under an expired lease is taken.
        #[cfg(feature = "mutants")]
        let past_deadline = past_deadline && !self.planted(Mutant::NoFencing);
        if past_deadline {
            self.expire_lease(lease_id);
            return Err(lease_lost(lease_id, "its deadline has passed"));
        }
        Ok(record.execution_id.clone())
    }

    pub(super) fn heartbeat(&mut self, lease_id: u64, worker_id: &str) -> Result<Reply, DomainError> {
        if let Some(record) = self.leases.get(lease_id) {
            let execution = self.executions.get(&record.execution_id).expect("leases are kept for retained executions");
            if execution.cancel_requested && execution.revoked_lease_id == Some(lease_id) {
                return Ok(Reply::Heartbeat { cancel_requested: true, deadline_ms: self.clock_ms });
            }
        }
        let id = self.current_lease(lease_id, worker_id)?;
        let execution = self.executions.heartbeat(&id, self.clock_ms);
        let lease = execution.lease.as_ref().expect("current_lease checked the lease");
        let capability = self.registry.of_execution(execution);
        self.leases.reschedule(lease_id, effective_deadline(capability, lease.deadline_ms, lease.heartbeat_at_ms));
        Ok(Reply::Heartbeat { cancel_requested: false, deadline_ms: lease.deadline_ms })
    }

    /// A worker's report under `lease_id`; `output_json` is a completed
    /// attempt's canonical output, as admission checked it.
    pub(super) fn report(
        &mut self,
        lease_id: u64,
        worker_id: &str,
        outcome: &ReportOutcome,
        output_json: Option<String>,
    ) -> Result<Reply, DomainError> {
        let outcome = match outcome {
            ReportOutcome::Completed { .. } => ReportOutcome::Completed {
                output_json: output_json.expect("a checked completed report has its canonical output"),
            },
            failed => failed.clone(),
        };
        let Some(record) = self.leases.get(lease_id) else {
            return Err(lease_lost(lease_id, "unknown lease"));
        };
        let execution = self.executions.get(&record.execution_id).expect("leases are kept for retained executions");
        let accepted = execution
            .accepted_report
            .as_ref()
            .filter(|accepted| accepted.lease_id == lease_id)
            .map(|accepted| (&accepted.outcome, accepted.retry_scheduled))
            .or(record.accepted_failure.as_ref().map(|(outcome, retry_scheduled)| (outcome, *retry_scheduled)));
        if let Some((accepted_outcome, retry_scheduled)) = accepted {
            if *accepted_outcome == outcome {
                return Ok(Reply::Reported { execution: execution.into_owned(), retry_scheduled });
            }
        }
        let attempt = record.attempt;
        let id = match self.current_lease(lease_id, worker_id) {
            Ok(id) => id,
            Err(error) => {
                let execution_id =
                    self.leases.get(lease_id).expect("the lease record was read above").execution_id.clone();
                let kind = EventKind::LateReportRejected { lease_id, attempt };
                self.record_execution_event(&execution_id, kind, Some(&Actor::system()));
                return Err(error);
            }
        };
        self.leases.release(lease_id);
        self.executions.end_lease(&id);
        let retry_scheduled = match &outcome {
            ReportOutcome::Completed { output_json } => {
                let execution = self.executions.get(&id).expect("current_lease found the execution");
                let result = ResultEnvelope::Completed {
                    output_json: output_json.clone(),
                    attempts: execution.attempts,
                    duration_ms: self.clock_ms.saturating_sub(execution.submitted_at_ms),
                };
                self.finalize(&id, result, None);
                false
            }
            ReportOutcome::Failed { code, message, retryable } => self.after_failed_attempt(
                &id,
                AttemptFailure::Reported { code: code.clone(), message: message.clone(), retryable: *retryable },
            ),
        };
        if matches!(outcome, ReportOutcome::Failed { .. }) {
            self.leases.record_accepted_failure(lease_id, outcome.clone(), retry_scheduled);
        }
        let execution = self.executions.accept_report(&id, AcceptedReport { lease_id, outcome, retry_scheduled });
        Ok(Reply::Reported { execution: execution.into_owned(), retry_scheduled })
    }

    /// Revokes a lease whose deadline passed and applies the retry rule.
    pub(super) fn expire_lease(&mut self, lease_id: u64) {
        let execution_id = self.leases.get(lease_id).expect("only recorded leases expire").execution_id.clone();
        let deadline_ms = self.leases.release(lease_id);
        let lease = self.executions.end_lease(&execution_id);
        assert_eq!(lease.lease_id, lease_id, "only current leases expire");
        // Classify by the deadline missed first, not by when the expiry is
        // applied: a worker lost before its attempt deadline stays lost even
        // when the tick (or a late report) arrives after that deadline too.
        let failure =
            if deadline_ms >= lease.deadline_ms { AttemptFailure::Timeout } else { AttemptFailure::WorkerLost };
        let kind = EventKind::LeaseExpired { lease_id, attempt: lease.attempt, code: failure.code().to_string() };
        self.record_execution_event(&execution_id, kind, Some(&Actor::system()));
        self.after_failed_attempt(&execution_id, failure);
    }

    /// Applies the SI-11 retry rule ([`crate::retry`]) to a failed attempt.
    /// Returns true when a retry was scheduled; otherwise the execution is finalized.
    fn after_failed_attempt(&mut self, id: &str, failure: AttemptFailure) -> bool {
        let execution = self.executions.get(id).expect("failed attempts belong to retained executions");
        let capability = self.registry.of_execution(&execution);
        let attempts = execution.attempts;
        let wait_ms = retry_after_ms(capability, attempts, &failure);
        // Planted bug `retry-non-idempotent`: retried once anyway.
        #[cfg(feature = "mutants")]
        let wait_ms = wait_ms.or_else(|| {
            self.planted(Mutant::RetryNonIdempotent)
                .then(|| crate::mutants::retry_non_idempotent_ms(capability, attempts, &failure))
                .flatten()
        });
        if let Some(wait_ms) = wait_ms {
            let kind = EventKind::Retried {
                attempt: attempts + 1,
                previous_error_code: failure.code().to_string(),
                backoff_ms: wait_ms,
            };
            self.audit.record(kind, &Actor::system(), EventSubject::of_execution(&execution), self.clock_ms);
            if wait_ms == 0 {
                self.executions.enqueue(id, &capability.queue);
            } else {
                self.executions.start_backoff(id, self.clock_ms.saturating_add(wait_ms));
            }
            return true;
        }
        let duration_ms = self.clock_ms.saturating_sub(execution.submitted_at_ms);
        let result = match failure {
            AttemptFailure::Reported { code, message, retryable } => {
                ResultEnvelope::Failed { code, message, retryable, attempts, executed_before_failure: None }
            }
            AttemptFailure::Timeout => ResultEnvelope::Cancelled { code: CancelCode::Timeout, attempts, duration_ms },
            AttemptFailure::WorkerLost => ResultEnvelope::Failed {
                code: WORKER_LOST_CODE.to_string(),
                message: "the worker stopped heartbeating; the attempt may or may not have run".to_string(),
                retryable: true,
                attempts,
                executed_before_failure: Some(ExecutedBeforeFailure::Unknown),
            },
        };
        self.finalize(id, result, Some(&Actor::system()));
        false
    }

    /// Records the one final result and its event; the actor defaults to the submitter.
    fn finalize(&mut self, id: &str, result: ResultEnvelope, actor: Option<&Actor>) {
        let kind = EventKind::finalized(&result);
        let execution = self.executions.finalize(id, result, self.clock_ms);
        if let Some(requester) = &execution.requester_principal {
            self.quotas.execution_finalized(requester);
        }
        self.leases.retire(&execution.lease_ids);
        let actor = actor.unwrap_or(&execution.actor);
        self.audit.record(kind, actor, EventSubject::of_execution(&execution), self.clock_ms);
    }

    /// Cancels an execution, recorded as `actor` when named, else as the
    /// principal (else, `--insecure`, as its submitter).
    pub(super) fn cancel_execution(
        &mut self,
        id: &str,
        actor: Option<&Actor>,
        principal: Option<&Principal>,
    ) -> Result<Reply, DomainError> {
        let execution = self.executions.get(id).ok_or_else(|| execution_not_found(id))?;
        if execution.state.is_final() {
            return Err(DomainError::new(ErrorCode::ExecutionFinal, format!("execution {id} is already final")));
        }
        let result = ResultEnvelope::Cancelled {
            code: CancelCode::Cancelled,
            attempts: execution.attempts,
            duration_ms: self.clock_ms.saturating_sub(execution.submitted_at_ms),
        };
        let queue = &self.registry.of_execution(&execution).queue;
        if let Some(revoked_lease_id) = self.executions.withdraw(id, queue) {
            self.leases.release(revoked_lease_id);
        }
        let principal_actor = principal.map(Principal::as_actor);
        self.finalize(id, result, actor.or(principal_actor.as_ref()));
        let execution = self.executions.get(id).expect("a finalized execution is retained");
        Ok(Reply::Execution { execution: execution.into_owned(), created: false })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Risk, SideEffect};

    #[test]
    fn the_effective_deadline_is_the_earlier_of_attempt_and_heartbeat_deadlines() {
        let mut capability = Capability {
            id: "cap".to_string(),
            version: 1,
            registered_at_ms: 0,
            side_effect: SideEffect::Read,
            risk: Risk::Low,
            idempotent: false,
            retry: None,
            timeout_ms: 1_000,
            heartbeat_timeout_ms: None,
            approval: None,
            queue: "cap".to_string(),
            tags: Vec::new(),
        };
        assert_eq!(effective_deadline(&capability, 1_000, 0), 1_000);
        capability.heartbeat_timeout_ms = Some(300);
        assert_eq!(effective_deadline(&capability, 1_000, 0), 300);
        assert_eq!(effective_deadline(&capability, 1_000, 900), 1_000);
        assert_eq!(crate::retry::TIMEOUT_CODE, AttemptFailure::Timeout.code());
    }
}
