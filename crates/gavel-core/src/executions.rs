//! Executions (SPEC §4): submission, resume, leasing, heartbeats, reports,
//! the SI-11 retry rule, timeouts, cancellation and retention.

use crate::audit::EventKind;
use crate::command::{Reply, Retention, Submit, Task};
use crate::error::{DomainError, ErrorCode};
use crate::ids::{approval_id_for, idempotency_key};
use crate::limits::{BACKOFF_MS_CAP, INPUT_BYTES_MAX, OUTPUT_BYTES_MAX};
use crate::machine::{EventSubject, LeaseRecord, State, COMPACTION_INTERVAL_MS};
use crate::model::{
    AcceptedReport, Actor, Approval, ApprovalStatus, CancelCode, Capability, ExecutedBeforeFailure, Execution,
    ExecutionState, Lease, ReportOutcome, ResultEnvelope, StoredApprovalStatus,
};
use crate::validate::{check_actor, check_id, check_json, invalid_if_any, Problems};

/// Error code of an attempt whose lease passed its deadline.
pub const TIMEOUT_CODE: &str = "TIMEOUT";
/// Error code of an attempt whose worker stopped heartbeating.
pub const WORKER_LOST_CODE: &str = "WORKER_LOST";

/// Why an attempt ended without a result.
#[derive(Debug, Clone)]
enum AttemptFailure {
    /// The worker reported a failure.
    Reported { code: String, message: String, retryable: bool },
    /// The per-attempt deadline passed.
    Timeout,
    /// The worker missed its heartbeats.
    WorkerLost,
}

impl AttemptFailure {
    fn code(&self) -> &str {
        match self {
            AttemptFailure::Reported { code, .. } => code,
            AttemptFailure::Timeout => TIMEOUT_CODE,
            AttemptFailure::WorkerLost => WORKER_LOST_CODE,
        }
    }
}

fn execution_not_found(id: &str) -> DomainError {
    DomainError::new(ErrorCode::NotFound, format!("execution {id} was not found"))
}

fn lease_lost(lease_id: u64, why: &str) -> DomainError {
    DomainError::new(ErrorCode::LeaseLost, format!("lease {lease_id} is not current: {why}"))
}

/// `backoffMs × 2^(n-1)` before attempt n+1, capped so it never overflows.
pub fn backoff_ms(base_ms: u64, attempts_so_far: u32) -> u64 {
    let exponent = attempts_so_far.saturating_sub(1).min(40);
    base_ms.saturating_mul(1u64 << exponent).min(BACKOFF_MS_CAP)
}

impl State {
    fn capability_of(&self, execution: &Execution) -> &Capability {
        self.capabilities
            .get(&execution.capability_id)
            .and_then(|versions| versions.get(&execution.capability_version))
            .expect("capability versions are never removed while an execution references them")
    }

    fn execution_mut(&mut self, id: &str) -> &mut Execution {
        self.executions.get_mut(id).expect("caller checked that the execution exists")
    }

    fn emit_execution_event(&mut self, id: &str, kind: EventKind, actor: Option<&Actor>) {
        let execution = self.executions.get(id).expect("events are emitted for stored executions");
        let event = self.next_event(kind, actor.unwrap_or(&execution.actor), EventSubject::of_execution(execution));
        self.push_event(event);
    }

    pub(crate) fn submit(&mut self, submit: &Submit) -> Result<Reply, DomainError> {
        let (input_json, input_hash) = crate::precheck::submit(submit)?;
        let capability = self.capability(&submit.capability_id, None).ok_or_else(|| {
            DomainError::new(
                ErrorCode::CapabilityNotFound,
                format!("capability {} is not registered", submit.capability_id),
            )
        })?;

        if let Some(existing) = self.executions.get(&submit.execution_id) {
            return if existing.input_hash == input_hash && existing.capability_id == submit.capability_id {
                Ok(Reply::Execution { execution: existing.clone(), created: false })
            } else {
                Err(already_exists(&submit.execution_id))
            };
        }
        if capability.requires_approval() {
            let capability = capability.clone();
            return self.request_approval(submit, &capability, input_json, input_hash);
        }
        let capability_version = capability.version;
        let execution_id = submit.execution_id.clone();
        let subject = EventSubject {
            execution_id: Some(&execution_id),
            capability_id: Some(&submit.capability_id),
            approval_id: None,
            correlation_id: submit.correlation_id.as_deref(),
            input_hash: Some(&input_hash),
        };
        self.emit(EventKind::Requested, &submit.actor, subject);
        self.create_execution(NewExecution {
            execution_id,
            capability_id: &submit.capability_id,
            capability_version,
            input_json,
            input_hash,
            actor: submit.actor.clone(),
            surface: submit.surface.clone(),
            correlation_id: submit.correlation_id.clone(),
            approval_id: None,
            approver: None,
        });
        let execution = self.executions[&submit.execution_id].clone();
        Ok(Reply::Execution { execution, created: true })
    }

    /// Submit of a capability that needs approval: store a pending approval
    /// (idempotently) and answer approval-required. No execution exists yet.
    fn request_approval(
        &mut self,
        submit: &Submit,
        capability: &Capability,
        input_json: String,
        input_hash: String,
    ) -> Result<Reply, DomainError> {
        let approval_id = approval_id_for(&submit.execution_id);
        if let Some(existing) = self.approvals.get(&approval_id) {
            if existing.input_hash != input_hash || existing.capability_id != capability.id {
                return Err(already_exists(&submit.execution_id));
            }
            let status = existing.status_at(self.clock_ms);
            return Ok(Reply::ApprovalRequired { approval: existing.clone(), status });
        }
        let policy = capability.approval.as_ref().expect("requires_approval implies a policy");
        let subject = EventSubject {
            execution_id: Some(&submit.execution_id),
            capability_id: Some(&capability.id),
            approval_id: Some(&approval_id),
            correlation_id: submit.correlation_id.as_deref(),
            input_hash: Some(&input_hash),
        };
        self.emit(EventKind::Requested, &submit.actor, subject);
        let approval = Approval {
            id: approval_id.clone(),
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
            expires_at_ms: self.clock_ms.saturating_add(policy.expires_in_ms),
            allow_self_approval: false,
            status: StoredApprovalStatus::Pending,
            decision: None,
            consumed_by_execution_id: None,
            execution_id: Some(submit.execution_id.clone()),
            capability_version: Some(capability.version),
            correlation_id: submit.correlation_id.clone(),
            closed_at_ms: None,
        };
        self.store_approval(approval);
        let approval = self.approvals[&approval_id].clone();
        let status = approval.status_at(self.clock_ms);
        Ok(Reply::ApprovalRequired { approval, status })
    }

    /// Verifies the approval, consumes it and creates the execution: one command.
    pub(crate) fn resume(
        &mut self,
        approval_id: &str,
        execution_id: &str,
        input_json: Option<&str>,
    ) -> Result<Reply, DomainError> {
        let mut problems = Problems::new();
        problems.id("approvalId", approval_id);
        problems.id("executionId", execution_id);
        invalid_if_any(problems, "invalid resume request")?;
        let given_hash = match input_json {
            Some(text) => Some(check_json("input", text, INPUT_BYTES_MAX, ErrorCode::InputInvalid)?.1),
            None => None,
        };
        let approval = self.approvals.get(approval_id).ok_or_else(|| crate::approvals::not_found(approval_id))?.clone();
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
        if stored_hash != approval.input_hash || given_hash.as_ref().is_some_and(|hash| *hash != approval.input_hash) {
            return refuse(
                ErrorCode::ApprovalInputMismatch,
                format!("the input no longer matches the input approved by {approval_id}"),
            );
        }
        let approver = approval.decision.as_ref().map(|decision| decision.approver.clone());
        if approver.as_ref().is_some_and(|approver| approver.id == approval.actor.id) && !approval.allow_self_approval {
            return refuse(
                ErrorCode::ApprovalSelfApproval,
                format!("approval {approval_id} was decided by its requester"),
            );
        }
        let capability_version =
            self.capability(&approval.capability_id, approval.capability_version).map(|capability| capability.version);
        let capability_version = capability_version.ok_or_else(|| {
            DomainError::new(
                ErrorCode::CapabilityNotFound,
                format!("capability {} is not registered", approval.capability_id),
            )
        })?;
        let execution_id = approval.execution_id.clone().unwrap_or_else(|| execution_id.to_string());
        if self.executions.contains_key(&execution_id) {
            return Err(already_exists(&execution_id));
        }
        self.mark_consumed(approval_id, &execution_id, now_ms)?;
        self.create_execution(NewExecution {
            execution_id: execution_id.clone(),
            capability_id: &approval.capability_id,
            capability_version,
            input_json: approval.input_json.clone(),
            input_hash: approval.input_hash.clone(),
            actor: approval.actor.clone(),
            surface: approval.surface.clone(),
            correlation_id: approval.correlation_id.clone(),
            approval_id: Some(approval_id.to_string()),
            approver,
        });
        Ok(Reply::Execution { execution: self.executions[&execution_id].clone(), created: true })
    }

    fn create_execution(&mut self, new: NewExecution<'_>) {
        assert!(!self.executions.contains_key(&new.execution_id), "execution ids are checked before create");
        let execution = Execution {
            idempotency_key: idempotency_key(&new.execution_id),
            execution_id: new.execution_id.clone(),
            capability_id: new.capability_id.to_string(),
            capability_version: new.capability_version,
            input_json: new.input_json,
            input_hash: new.input_hash,
            actor: new.actor,
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
        self.executions.insert(new.execution_id.clone(), execution);
        self.enqueue(&new.execution_id);
    }

    /// Puts an execution at the back of its queue.
    fn enqueue(&mut self, id: &str) {
        let position = self.next_queue_position;
        self.next_queue_position += 1;
        let queue = {
            let execution = &self.executions[id];
            self.capability_of(execution).queue.clone()
        };
        let execution = self.execution_mut(id);
        execution.state = ExecutionState::Queued;
        execution.backoff_until_ms = None;
        execution.queue_position = position;
        self.queues.entry(queue).or_default().insert(position, id.to_string());
    }

    /// Moves executions whose backoff has ended back into their queues, oldest end first.
    fn release_due_backoffs(&mut self) -> u32 {
        let mut released = 0;
        while let Some((until, id)) = self.backoffs.first().cloned() {
            if until > self.clock_ms {
                break;
            }
            self.backoffs.remove(&(until, id.clone()));
            self.enqueue(&id);
            released += 1;
        }
        released
    }

    pub(crate) fn poll(&mut self, worker_id: &str, queues: &[String], tasks_max: u32) -> Result<Reply, DomainError> {
        crate::precheck::poll(worker_id, queues, tasks_max)?;
        self.release_due_backoffs();
        let mut tasks = Vec::new();
        let mut seen: Vec<&String> = Vec::new();
        for queue in queues {
            if seen.contains(&queue) {
                continue;
            }
            seen.push(queue);
            while tasks.len() < tasks_max as usize {
                let Some(ready) = self.queues.get_mut(queue) else { break };
                let Some((_, id)) = ready.pop_first() else { break };
                if ready.is_empty() {
                    self.queues.remove(queue);
                }
                tasks.push(self.grant_lease(&id, worker_id));
            }
        }
        Ok(Reply::Tasks(tasks))
    }

    fn effective_deadline(&self, execution: &Execution, lease: &Lease) -> u64 {
        effective_deadline(self.capability_of(execution), lease)
    }

    fn grant_lease(&mut self, id: &str, worker_id: &str) -> Task {
        let lease_id = self.next_lease_id;
        self.next_lease_id += 1;
        let now_ms = self.clock_ms;
        // One lookup of the execution, and its capability borrowed alongside
        // (disjoint fields), rather than a lookup per step.
        let execution = self.executions.get_mut(id).expect("queued executions are retained");
        let capability = self
            .capabilities
            .get(&execution.capability_id)
            .and_then(|versions| versions.get(&execution.capability_version))
            .expect("capability versions are never removed while an execution references them");
        assert_eq!(execution.state, ExecutionState::Queued, "only queued executions sit in a queue");
        execution.attempts += 1;
        let attempt = execution.attempts;
        let lease = Lease {
            lease_id,
            execution_id: id.to_string(),
            attempt,
            worker_id: worker_id.to_string(),
            granted_at_ms: now_ms,
            deadline_ms: now_ms.saturating_add(capability.timeout_ms),
            heartbeat_at_ms: now_ms,
        };
        let deadline = effective_deadline(capability, &lease);
        execution.state = ExecutionState::Leased;
        execution.lease_ids.push(lease_id);
        execution.lease = Some(lease.clone());
        let task = task(execution, capability, lease);
        self.leases.insert(lease_id, LeaseRecord { execution_id: id.to_string(), attempt, accepted_failure: None });
        self.lease_deadlines.insert((deadline, lease_id));
        self.emit_execution_event(id, EventKind::Started { attempt, lease_id, worker_id: worker_id.to_string() }, None);
        task
    }

    /// The task a worker receives for a lease, rebuilt from current state.
    pub(crate) fn task_for_lease(&self, lease: &Lease) -> Option<Task> {
        let execution = self.executions.get(&lease.execution_id)?;
        Some(task(execution, self.capability_of(execution), lease.clone()))
    }

    /// The current lease with this id, if it is still valid at the cluster clock.
    /// A lease past its effective deadline is expired on the spot (the clock
    /// comes from the command, so every replica does the same).
    fn current_lease(&mut self, lease_id: u64, worker_id: &str) -> Result<String, DomainError> {
        let record = self.leases.get(&lease_id).ok_or_else(|| lease_lost(lease_id, "unknown lease"))?;
        let execution = &self.executions[&record.execution_id];
        let Some(lease) = execution.lease.as_ref().filter(|lease| lease.lease_id == lease_id) else {
            return Err(lease_lost(lease_id, "it was expired, revoked or superseded"));
        };
        if lease.worker_id != worker_id {
            return Err(lease_lost(lease_id, "it is held by another worker"));
        }
        if self.effective_deadline(execution, lease) <= self.clock_ms
            && !crate::mutants::active(crate::mutants::Mutant::NoFencing)
        {
            self.expire_lease(lease_id);
            return Err(lease_lost(lease_id, "its deadline has passed"));
        }
        Ok(record.execution_id.clone())
    }

    pub(crate) fn heartbeat(&mut self, lease_id: u64, worker_id: &str) -> Result<Reply, DomainError> {
        check_id("workerId", worker_id).map_err(DomainError::invalid)?;
        if let Some(record) = self.leases.get(&lease_id) {
            let execution = &self.executions[&record.execution_id];
            if execution.cancel_requested && execution.revoked_lease_id == Some(lease_id) {
                return Ok(Reply::Heartbeat { cancel_requested: true, deadline_ms: self.clock_ms });
            }
        }
        let id = self.current_lease(lease_id, worker_id)?;
        let old_key = {
            let execution = &self.executions[&id];
            let lease = execution.lease.as_ref().expect("current_lease checked the lease");
            (self.effective_deadline(execution, lease), lease_id)
        };
        self.lease_deadlines.remove(&old_key);
        let now_ms = self.clock_ms;
        let execution = self.execution_mut(&id);
        let lease = execution.lease.as_mut().expect("current_lease checked the lease");
        lease.heartbeat_at_ms = now_ms;
        let lease = lease.clone();
        let deadline = self.effective_deadline(&self.executions[&id], &lease);
        self.lease_deadlines.insert((deadline, lease_id));
        Ok(Reply::Heartbeat { cancel_requested: false, deadline_ms: lease.deadline_ms })
    }

    pub(crate) fn report(
        &mut self,
        lease_id: u64,
        worker_id: &str,
        outcome: &ReportOutcome,
    ) -> Result<Reply, DomainError> {
        check_id("workerId", worker_id).map_err(DomainError::invalid)?;
        let outcome = match outcome {
            ReportOutcome::Completed { output_json } => ReportOutcome::Completed {
                output_json: check_json("output", output_json, OUTPUT_BYTES_MAX, ErrorCode::InvalidArgument)?.0,
            },
            ReportOutcome::Failed { code, message, retryable } => {
                let mut problems = Problems::new();
                problems.id("error.code", code);
                problems.text("error.message", Some(message));
                invalid_if_any(problems, "invalid failure report")?;
                ReportOutcome::Failed { code: code.clone(), message: message.clone(), retryable: *retryable }
            }
        };
        let Some(record) = self.leases.get(&lease_id) else {
            return Err(lease_lost(lease_id, "unknown lease"));
        };
        let execution = &self.executions[&record.execution_id];
        let accepted = execution
            .accepted_report
            .as_ref()
            .filter(|accepted| accepted.lease_id == lease_id)
            .map(|accepted| (&accepted.outcome, accepted.retry_scheduled))
            .or(record.accepted_failure.as_ref().map(|(outcome, retry_scheduled)| (outcome, *retry_scheduled)));
        if let Some((accepted_outcome, retry_scheduled)) = accepted {
            if *accepted_outcome == outcome {
                return Ok(Reply::Reported { execution: execution.clone(), retry_scheduled });
            }
        }
        let attempt = record.attempt;
        let id = match self.current_lease(lease_id, worker_id) {
            Ok(id) => id,
            Err(error) => {
                let execution_id = self.leases[&lease_id].execution_id.clone();
                let kind = EventKind::LateReportRejected { lease_id, attempt };
                self.emit_execution_event(&execution_id, kind, Some(&Actor::system()));
                return Err(error);
            }
        };
        // Revoke the lease with one lookup of the execution (its capability is
        // a disjoint field, borrowed alongside).
        let execution = self.executions.get_mut(&id).expect("current_lease found the execution");
        let capability = self
            .capabilities
            .get(&execution.capability_id)
            .and_then(|versions| versions.get(&execution.capability_version))
            .expect("capability versions are never removed while an execution references them");
        let lease = execution.lease.take().expect("current_lease checked the lease");
        self.lease_deadlines.remove(&(effective_deadline(capability, &lease), lease_id));
        let retry_scheduled = match &outcome {
            ReportOutcome::Completed { output_json } => {
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
            let record = self.leases.get_mut(&lease_id).expect("the lease record was read above");
            record.accepted_failure = Some((outcome.clone(), retry_scheduled));
        }
        let execution = self.execution_mut(&id);
        execution.accepted_report = Some(AcceptedReport { lease_id, outcome, retry_scheduled });
        Ok(Reply::Reported { execution: execution.clone(), retry_scheduled })
    }

    /// Revokes a lease whose deadline passed and applies the retry rule.
    fn expire_lease(&mut self, lease_id: u64) {
        let record = self.leases[&lease_id].clone();
        let (key, code, attempt) = {
            let execution = &self.executions[&record.execution_id];
            let lease = execution
                .lease
                .as_ref()
                .filter(|lease| lease.lease_id == lease_id)
                .expect("only current leases expire");
            // Classify by the deadline missed first, not by when the expiry is
            // applied: a worker lost before its attempt deadline stays lost even
            // when the tick (or a late report) arrives after that deadline too.
            let deadline = self.effective_deadline(execution, lease);
            let code = if deadline >= lease.deadline_ms { TIMEOUT_CODE } else { WORKER_LOST_CODE };
            ((deadline, lease_id), code, lease.attempt)
        };
        self.lease_deadlines.remove(&key);
        self.execution_mut(&record.execution_id).lease = None;
        let kind = EventKind::LeaseExpired { lease_id, attempt, code: code.to_string() };
        self.emit_execution_event(&record.execution_id, kind, Some(&Actor::system()));
        let failure = if code == TIMEOUT_CODE { AttemptFailure::Timeout } else { AttemptFailure::WorkerLost };
        self.after_failed_attempt(&record.execution_id, failure);
    }

    /// The SI-11 retry rule. Returns true when a retry was scheduled; otherwise
    /// the execution is finalized.
    fn after_failed_attempt(&mut self, id: &str, failure: AttemptFailure) -> bool {
        let execution = &self.executions[id];
        let capability = self.capability_of(execution);
        let attempts = execution.attempts;
        let non_retryable = |code: &str| {
            capability.retry.as_ref().is_some_and(|retry| retry.non_retryable_codes.iter().any(|listed| listed == code))
        };
        let error_retryable = match &failure {
            AttemptFailure::Reported { retryable, code, .. } => *retryable && !non_retryable(code),
            AttemptFailure::Timeout | AttemptFailure::WorkerLost => !non_retryable(failure.code()),
        };
        let budget_left =
            capability.retry.as_ref().is_some_and(|retry| retry.attempts_max > 0 && attempts <= retry.attempts_max);
        let eligible = budget_left && error_retryable && capability.retry_allowed_by_side_effect();
        // Planted bug: a write without a retry config is retried once anyway.
        let eligible = eligible
            || (crate::mutants::active(crate::mutants::Mutant::RetryNonIdempotent)
                && capability.retry.is_none()
                && attempts <= 1
                && error_retryable);
        if eligible {
            let base_ms = capability.retry.as_ref().map_or(0, |retry| retry.backoff_ms);
            let wait_ms = backoff_ms(base_ms, attempts);
            let kind = EventKind::Retried {
                attempt: attempts + 1,
                previous_error_code: failure.code().to_string(),
                backoff_ms: wait_ms,
            };
            self.emit_execution_event(id, kind, Some(&Actor::system()));
            if wait_ms == 0 {
                self.enqueue(id);
            } else {
                let until = self.clock_ms.saturating_add(wait_ms);
                let execution = self.execution_mut(id);
                execution.state = ExecutionState::Backoff;
                execution.backoff_until_ms = Some(until);
                self.backoffs.insert((until, id.to_string()));
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

    /// Records the one final result. Asserts it is the first.
    fn finalize(&mut self, id: &str, result: ResultEnvelope, actor: Option<&Actor>) {
        let now_ms = self.clock_ms;
        let execution = self.execution_mut(id);
        assert!(execution.result.is_none() && !execution.state.is_final(), "an execution is finalized at most once");
        assert!(execution.lease.is_none(), "the lease is revoked before finalizing");
        execution.state = match &result {
            ResultEnvelope::Completed { .. } => ExecutionState::Completed,
            ResultEnvelope::Failed { .. } => ExecutionState::Failed,
            ResultEnvelope::Cancelled { .. } => ExecutionState::Cancelled,
        };
        execution.finalized_at_ms = Some(now_ms);
        execution.backoff_until_ms = None;
        let kind = match &result {
            ResultEnvelope::Completed { attempts, duration_ms, .. } => {
                EventKind::Completed { duration_ms: *duration_ms, attempts: *attempts }
            }
            ResultEnvelope::Failed { code, retryable, attempts, executed_before_failure, .. } => EventKind::Failed {
                code: code.clone(),
                retryable: *retryable,
                attempts: *attempts,
                executed_before_failure: *executed_before_failure,
            },
            ResultEnvelope::Cancelled { code, duration_ms, .. } => {
                EventKind::Cancelled { code: *code, duration_ms: *duration_ms }
            }
        };
        execution.result = Some(result);
        self.finalized.insert((now_ms, id.to_string()));
        self.emit_execution_event(id, kind, actor);
    }

    pub(crate) fn cancel_execution(&mut self, id: &str, actor: Option<&Actor>) -> Result<Reply, DomainError> {
        check_id("executionId", id).map_err(DomainError::invalid)?;
        if let Some(actor) = actor {
            check_actor("actor", actor)?;
        }
        let execution = self.executions.get(id).ok_or_else(|| execution_not_found(id))?;
        if execution.state.is_final() {
            return Err(DomainError::new(ErrorCode::ExecutionFinal, format!("execution {id} is already final")));
        }
        match execution.state {
            ExecutionState::Leased => {
                let lease = execution.lease.clone().expect("a leased execution has a lease");
                let key = (self.effective_deadline(execution, &lease), lease.lease_id);
                self.lease_deadlines.remove(&key);
                let execution = self.execution_mut(id);
                execution.lease = None;
                execution.revoked_lease_id = Some(lease.lease_id);
            }
            ExecutionState::Queued => {
                let queue = self.capability_of(execution).queue.clone();
                let position = execution.queue_position;
                if let Some(ready) = self.queues.get_mut(&queue) {
                    ready.remove(&position);
                    if ready.is_empty() {
                        self.queues.remove(&queue);
                    }
                }
            }
            ExecutionState::Backoff => {
                let until = execution.backoff_until_ms.expect("a backoff has an end");
                self.backoffs.remove(&(until, id.to_string()));
            }
            ExecutionState::Completed | ExecutionState::Failed | ExecutionState::Cancelled => {
                unreachable!("final executions were refused above")
            }
        }
        let now_ms = self.clock_ms;
        let execution = self.execution_mut(id);
        execution.cancel_requested = true;
        let result = ResultEnvelope::Cancelled {
            code: CancelCode::Cancelled,
            attempts: execution.attempts,
            duration_ms: now_ms.saturating_sub(execution.submitted_at_ms),
        };
        self.finalize(id, result, actor);
        Ok(Reply::Execution { execution: self.executions[id].clone(), created: false })
    }

    /// Expires due leases, ends due backoffs and, on its cadence, compacts.
    pub(crate) fn tick(&mut self, retention: Retention) -> Reply {
        let backoffs_ended = self.release_due_backoffs();
        let mut leases_expired = 0;
        // Planted bug: the fence is lax, leases expire 5 s after their deadline.
        let grace_ms = if crate::mutants::active(crate::mutants::Mutant::NoFencing) { 5_000 } else { 0 };
        while let Some((deadline, lease_id)) = self.lease_deadlines.first().copied() {
            if deadline.saturating_add(grace_ms) > self.clock_ms {
                break;
            }
            self.expire_lease(lease_id);
            leases_expired += 1;
        }
        let backoffs_ended = backoffs_ended + self.release_due_backoffs();
        self.dedup.forget_expired(self.clock_ms);
        let mut records_compacted = 0;
        if self.clock_ms >= self.next_compaction_ms {
            records_compacted = self.compact(retention);
            self.next_compaction_ms = self.clock_ms.saturating_add(COMPACTION_INTERVAL_MS);
        }
        Reply::Ticked { leases_expired, backoffs_ended, records_compacted }
    }

    /// Drops finalized executions, closed approvals and events older than the
    /// retention window. Never drops a non-final execution.
    fn compact(&mut self, retention: Retention) -> u32 {
        let mut compacted = 0;
        // Nothing is older than a window until the clock has run past it; a
        // horizon saturated to 0 would drop records stamped at time 0 at once.
        let horizon = self.clock_ms.checked_sub(retention.records_ms);
        while let Some((finalized_at, id)) = self.finalized.first().cloned() {
            if horizon.is_none_or(|horizon| finalized_at > horizon) {
                break;
            }
            self.finalized.remove(&(finalized_at, id.clone()));
            let execution = self.executions.remove(&id).expect("finalized index points at retained executions");
            assert!(execution.state.is_final(), "compaction never drops a non-final execution");
            for lease_id in &execution.lease_ids {
                self.leases.remove(lease_id);
            }
            self.execution_events.remove(&id);
            compacted += 1;
        }
        let closed: Vec<(u64, String)> = self
            .approvals
            .values()
            .filter(|approval| {
                let closed_at = match approval.status {
                    // A pending record expires at `expires_at`; an approved one can no longer be
                    // resumed after it either, so retention counts from there for both.
                    StoredApprovalStatus::Pending | StoredApprovalStatus::Approved => Some(approval.expires_at_ms),
                    _ => approval.closed_at_ms,
                };
                closed_at.is_some_and(|closed_at| horizon.is_some_and(|horizon| closed_at <= horizon))
            })
            .map(|approval| (approval.requested_at_ms, approval.id.clone()))
            .collect();
        for key in closed {
            self.approvals.remove(&key.1);
            self.approvals_by_time.remove(&key);
            compacted += 1;
        }
        let event_horizon = self.clock_ms.checked_sub(retention.events_ms);
        while self
            .events
            .front()
            .is_some_and(|event| event_horizon.is_some_and(|horizon| event.timestamp_ms <= horizon))
        {
            self.events.pop_front();
            compacted += 1;
        }
        // Events can name an execution that never came to exist (a standalone
        // consume, an approval from submit that was rejected or expired). Their
        // index entries go once every event they point at has been dropped.
        let first_retained = self.events.front().map_or(self.next_cursor, |event| event.cursor);
        let executions = &self.executions;
        self.execution_events.retain(|id, cursors| {
            executions.contains_key(id) || cursors.last().is_some_and(|last| *last >= first_retained)
        });
        compacted
    }
}

/// The earlier of the attempt deadline and, with a heartbeat timeout, the heartbeat deadline.
fn effective_deadline(capability: &Capability, lease: &Lease) -> u64 {
    match capability.heartbeat_timeout_ms {
        Some(timeout) => lease.deadline_ms.min(lease.heartbeat_at_ms.saturating_add(timeout)),
        None => lease.deadline_ms,
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
    }
}

struct NewExecution<'a> {
    execution_id: String,
    capability_id: &'a str,
    capability_version: u64,
    input_json: String,
    input_hash: String,
    actor: Actor,
    surface: String,
    correlation_id: Option<String>,
    approval_id: Option<String>,
    approver: Option<Actor>,
}

fn already_exists(execution_id: &str) -> DomainError {
    DomainError::new(
        ErrorCode::AlreadyExists,
        format!("execution \"{execution_id}\" already exists with a different input or capability"),
    )
}
