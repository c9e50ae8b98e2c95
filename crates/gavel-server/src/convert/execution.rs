//! Execution, lease, task and audit event messages.

use gavel_core::{
    Caller, CancelCode, Command, DomainError, Event, EventKind, ExecutedBeforeFailure, Execution, ExecutionFilter,
    ExecutionState, Lease, ListOrder, ReportOutcome, ResultEnvelope, Submit, Task,
};
use gavel_proto::v1 as pb;

use super::approval::approval_reply_out;
use super::capability::capability_out;
use super::common::{
    actor_in, actor_or_caller, actor_out, page_size_in, time_page_token_in, time_page_token_out, timestamp_out,
    worker_id_or_caller,
};
use crate::replies::SubmitReply;

/// A decoded `ListExecutions` request.
#[derive(Debug)]
pub struct ExecutionsQuery {
    /// Which executions.
    pub filter: ExecutionFilter,
    /// Continue past this `(submittedAtMs, id)`.
    pub after: Option<(u64, String)>,
    /// Newest or oldest first.
    pub order: ListOrder,
    /// Page size.
    pub limit: usize,
}

/// Decodes a `ListExecutions` request: the page size and token are checked
/// here, at the edge, before the read.
pub fn list_executions_in(request: &pb::ListExecutionsRequest) -> Result<ExecutionsQuery, DomainError> {
    let state = match request.state.map(pb::ExecutionState::try_from) {
        None => None,
        Some(Ok(pb::ExecutionState::Queued)) => Some(ExecutionState::Queued),
        Some(Ok(pb::ExecutionState::Leased)) => Some(ExecutionState::Leased),
        Some(Ok(pb::ExecutionState::Backoff)) => Some(ExecutionState::Backoff),
        Some(Ok(pb::ExecutionState::Completed)) => Some(ExecutionState::Completed),
        Some(Ok(pb::ExecutionState::Failed)) => Some(ExecutionState::Failed),
        Some(Ok(pb::ExecutionState::Cancelled)) => Some(ExecutionState::Cancelled),
        Some(Ok(pb::ExecutionState::Unspecified) | Err(_)) => {
            let value = request.state.unwrap_or_default();
            return Err(DomainError::invalid(format!("state filter {value} is not a known execution state")));
        }
    };
    Ok(ExecutionsQuery {
        filter: ExecutionFilter {
            state,
            capability_id: request.capability_id.clone(),
            requester: request.requester.clone(),
        },
        after: time_page_token_in(&request.page_token)?,
        order: if request.oldest_first { ListOrder::OldestFirst } else { ListOrder::NewestFirst },
        limit: page_size_in(request.limit)?,
    })
}

/// Encodes one page of executions and the token of the next.
pub fn executions_page_out(page: &gavel_core::Page<std::borrow::Cow<'_, Execution>>) -> pb::ListExecutionsResponse {
    pb::ListExecutionsResponse {
        executions: page.records.iter().map(|execution| execution_out(execution)).collect(),
        next_page_token: time_page_token_out(page.next.as_ref()),
    }
}

/// The execution id a submit or resume names, or the one derived from its
/// request id, so that every retry of the call names the same execution.
fn execution_id_or_derived(execution_id: Option<&str>, request_id: &str) -> String {
    match execution_id {
        Some(id) if !id.is_empty() => id.to_string(),
        _ => gavel_core::ids::execution_id_for(request_id),
    }
}

/// Decodes a submit request made under `request_id`.
pub fn submit_in(
    request: &pb::SubmitRequest,
    request_id: &str,
    caller: Option<&Caller>,
) -> Result<Command, DomainError> {
    Ok(Command::Submit(Submit {
        execution_id: execution_id_or_derived(request.execution_id.as_deref(), request_id),
        capability_id: request.capability_id.clone(),
        input_json: request.input_json.clone(),
        actor: actor_or_caller("actor", request.actor.as_ref(), caller)?,
        surface: request.surface.clone(),
        correlation_id: request.correlation_id.clone().filter(|id| !id.is_empty()),
    }))
}

/// Encodes what a submit did.
pub fn submit_out(reply: &SubmitReply) -> pb::SubmitResponse {
    use pb::submit_response::Outcome;
    let (outcome, created) = match reply {
        SubmitReply::Execution { execution, created } => (Outcome::Execution(execution_out(execution)), *created),
        SubmitReply::ApprovalRequired(approval) => (Outcome::ApprovalRequired(approval_reply_out(approval)), true),
    };
    pb::SubmitResponse { outcome: Some(outcome), created }
}

/// Decodes a resume request made under `request_id`.
pub fn resume_in(request: &pb::ResumeRequest, request_id: &str) -> Command {
    Command::Resume {
        approval_id: request.approval_id.clone(),
        execution_id: execution_id_or_derived(request.execution_id.as_deref(), request_id),
        input_json: request.input_json.clone(),
    }
}

/// Decodes a cancel request; the actor is optional here.
pub fn cancel_execution_in(request: &pb::CancelExecutionRequest) -> Result<Command, DomainError> {
    let actor = match request.actor.as_ref() {
        Some(actor) => Some(actor_in("actor", Some(actor))?),
        None => None,
    };
    Ok(Command::CancelExecution { execution_id: request.execution_id.clone(), actor })
}

/// Decodes a poll request.
pub fn poll_in(request: &pb::PollRequest, caller: Option<&Caller>) -> Command {
    Command::Poll {
        worker_id: worker_id_or_caller(&request.worker_id, caller),
        queues: request.queues.clone(),
        tasks_max: request.max_tasks,
    }
}

/// Decodes a heartbeat request.
pub fn heartbeat_in(request: &pb::HeartbeatRequest, caller: Option<&Caller>) -> Command {
    Command::Heartbeat { lease_id: request.lease_id, worker_id: worker_id_or_caller(&request.worker_id, caller) }
}

/// Decodes a report request; it must carry an outcome.
pub fn report_in(request: &pb::ReportRequest, caller: Option<&Caller>) -> Result<Command, DomainError> {
    let outcome = match &request.outcome {
        Some(pb::report_request::Outcome::Completed(completed)) => {
            ReportOutcome::Completed { output_json: completed.output_json.clone() }
        }
        Some(pb::report_request::Outcome::Failed(failed)) => ReportOutcome::Failed {
            code: failed.code.clone(),
            message: failed.message.clone(),
            retryable: failed.retryable,
        },
        None => return Err(DomainError::invalid("outcome is required (completed or failed)")),
    };
    let worker_id = worker_id_or_caller(&request.worker_id, caller);
    Ok(Command::Report { lease_id: request.lease_id, worker_id, outcome })
}

fn executed_before_failure_out(value: Option<ExecutedBeforeFailure>) -> i32 {
    (match value {
        None => pb::ExecutedBeforeFailure::Unspecified,
        Some(ExecutedBeforeFailure::No) => pb::ExecutedBeforeFailure::No,
        Some(ExecutedBeforeFailure::Unknown) => pb::ExecutedBeforeFailure::Unknown,
    }) as i32
}

fn cancel_code_out(code: CancelCode) -> i32 {
    (match code {
        CancelCode::Timeout => pb::CancelCode::Timeout,
        CancelCode::Cancelled => pb::CancelCode::Cancelled,
    }) as i32
}

/// Encodes a lease.
pub fn lease_out(lease: &Lease) -> pb::Lease {
    pb::Lease {
        lease_id: lease.lease_id,
        execution_id: lease.execution_id.clone(),
        attempt: lease.attempt,
        worker_id: lease.worker_id.clone(),
        granted_at_ms: timestamp_out(lease.granted_at_ms),
        deadline_ms: timestamp_out(lease.deadline_ms),
    }
}

/// Encodes a result envelope.
pub fn result_out(result: &ResultEnvelope) -> pb::ResultEnvelope {
    use pb::result_envelope::{Cancelled, Completed, Failed, Outcome};
    let outcome = match result {
        ResultEnvelope::Completed { output_json, attempts, duration_ms } => Outcome::Completed(Completed {
            output_json: output_json.clone(),
            attempts: *attempts,
            duration_ms: *duration_ms,
        }),
        ResultEnvelope::Failed { code, message, retryable, attempts, executed_before_failure } => {
            Outcome::Failed(Failed {
                code: code.clone(),
                message: message.clone(),
                retryable: *retryable,
                attempts: *attempts,
                executed_before_failure: executed_before_failure_out(*executed_before_failure),
            })
        }
        ResultEnvelope::Cancelled { code, attempts, duration_ms } => Outcome::Cancelled(Cancelled {
            code: cancel_code_out(*code),
            attempts: *attempts,
            duration_ms: *duration_ms,
        }),
    };
    pb::ResultEnvelope { outcome: Some(outcome) }
}

/// Encodes an execution.
pub fn execution_out(execution: &Execution) -> pb::Execution {
    let state = match execution.state {
        ExecutionState::Queued => pb::ExecutionState::Queued,
        ExecutionState::Leased => pb::ExecutionState::Leased,
        ExecutionState::Backoff => pb::ExecutionState::Backoff,
        ExecutionState::Completed => pb::ExecutionState::Completed,
        ExecutionState::Failed => pb::ExecutionState::Failed,
        ExecutionState::Cancelled => pb::ExecutionState::Cancelled,
    };
    pb::Execution {
        execution_id: execution.execution_id.clone(),
        capability_id: execution.capability_id.clone(),
        capability_version: execution.capability_version,
        input_json: execution.input_json.clone(),
        input_hash: execution.input_hash.clone(),
        actor: Some(actor_out(&execution.actor)),
        surface: execution.surface.clone(),
        correlation_id: execution.correlation_id.clone(),
        approval_id: execution.approval_id.clone(),
        approver: execution.approver.as_ref().map(actor_out),
        idempotency_key: execution.idempotency_key.clone(),
        state: state as i32,
        attempts: execution.attempts,
        result: execution.result.as_ref().map(result_out),
        submitted_at_ms: timestamp_out(execution.submitted_at_ms),
        finalized_at_ms: execution.finalized_at_ms.map(timestamp_out),
        current_lease: execution.lease.as_ref().map(lease_out),
        backoff_until_ms: execution.backoff_until_ms.map(timestamp_out),
        cancel_requested: execution.cancel_requested,
    }
}

/// Encodes a leased task.
pub fn task_out(task: &Task) -> pb::Task {
    pb::Task {
        lease: Some(lease_out(&task.lease)),
        execution_id: task.lease.execution_id.clone(),
        attempt: task.lease.attempt,
        idempotency_key: task.idempotency_key.clone(),
        capability: Some(capability_out(&task.capability)),
        input_json: task.input_json.clone(),
        actor: Some(actor_out(&task.actor)),
        approver: task.approver.as_ref().map(actor_out),
        correlation_id: task.correlation_id.clone(),
        approval_id: task.approval_id.clone(),
        surface: task.surface.clone(),
    }
}

/// Encodes an audit event: ids, hashes and codes for Gavel's own events (no
/// input or output exists in them to leak); an application's event also
/// carries the payload and attributes the application recorded.
pub fn event_out(event: &Event) -> pb::Event {
    let mut out = pb::Event {
        cursor: event.cursor,
        r#type: event.kind.event_type().to_string(),
        timestamp_ms: timestamp_out(event.timestamp_ms),
        actor: Some(actor_out(&event.actor)),
        execution_id: event.execution_id.clone(),
        capability_id: event.capability_id.clone(),
        approval_id: event.approval_id.clone(),
        correlation_id: event.correlation_id.clone(),
        input_hash: event.input_hash.clone(),
        principal: event.principal.as_ref().map(ToString::to_string),
        ..pb::Event::default()
    };
    match &event.kind {
        EventKind::Started { attempt, lease_id, worker_id } => {
            out.attempt = Some(*attempt);
            out.lease_id = Some(*lease_id);
            out.worker_id = Some(worker_id.clone());
        }
        EventKind::Retried { attempt, previous_error_code, backoff_ms } => {
            out.attempt = Some(*attempt);
            out.previous_error_code = Some(previous_error_code.clone());
            out.duration_ms = Some(*backoff_ms);
        }
        EventKind::LeaseExpired { lease_id, attempt, code } => {
            out.lease_id = Some(*lease_id);
            out.attempt = Some(*attempt);
            out.code = Some(code.clone());
        }
        EventKind::Completed { duration_ms, attempts } => {
            out.duration_ms = Some(*duration_ms);
            out.attempts = Some(*attempts);
        }
        EventKind::Failed { code, retryable, attempts, executed_before_failure } => {
            out.code = Some(code.clone());
            out.retryable = Some(*retryable);
            out.attempts = Some(*attempts);
            out.executed_before_failure = executed_before_failure.map(|value| executed_before_failure_out(Some(value)));
        }
        EventKind::Cancelled { code, duration_ms } => {
            out.code = Some(code.as_str().to_string());
            out.duration_ms = Some(*duration_ms);
        }
        EventKind::LateReportRejected { lease_id, attempt } => {
            out.lease_id = Some(*lease_id);
            out.attempt = Some(*attempt);
        }
        EventKind::CapabilityRegistered { version } => {
            out.attempt = None;
            out.code = Some(format!("v{version}"));
        }
        EventKind::AccessGranted { principal, grant } | EventKind::AccessRevoked { principal, grant } => {
            out.subject_principal = Some(principal.to_string());
            out.grant = Some(grant.as_str().to_string());
        }
        EventKind::QuotaSet {
            principal,
            pending_approvals_max,
            active_executions_max,
            writes_per_second,
            write_burst,
        } => {
            // The new limits travel as attributes (this is Gavel's event, not
            // an application's: recorded_by_application stays false).
            out.subject_principal = Some(principal.to_string());
            out.attributes = [
                ("pending_approvals_max", pending_approvals_max),
                ("active_executions_max", active_executions_max),
                ("writes_per_second", writes_per_second),
                ("write_burst", write_burst),
            ]
            .into_iter()
            .map(|(key, value)| (key.to_string(), value.to_string()))
            .collect();
        }
        EventKind::PolicySet { name, version, voided, non_retroactive }
        | EventKind::PolicyDeleted { name, version, voided, non_retroactive } => {
            out.attributes = [
                ("policy", name.clone()),
                ("policy_version", version.to_string()),
                ("voided", voided.to_string()),
                ("non_retroactive", non_retroactive.to_string()),
            ]
            .into_iter()
            .map(|(key, value)| (key.to_string(), value))
            .collect();
        }
        EventKind::VoteCast { policy_version, approve, factor, self_approval, terms_hash } => {
            let mut attributes = vec![
                ("policy_version", policy_version.to_string()),
                ("vote", if *approve { "approve" } else { "deny" }.to_string()),
                ("self_approval", self_approval.to_string()),
                ("terms_hash", terms_hash.clone()),
            ];
            if let Some(factor) = factor {
                attributes.push(("factor", factor.clone()));
            }
            out.attributes = attributes.into_iter().map(|(key, value)| (key.to_string(), value)).collect();
        }
        EventKind::VoteRemoved { voter } => out.subject_principal = Some(voter.to_string()),
        EventKind::StandingUseSpent { used, uses_max } => {
            out.attributes = [("used", used.to_string()), ("uses_max", uses_max.to_string())]
                .into_iter()
                .map(|(key, value)| (key.to_string(), value))
                .collect();
        }
        EventKind::ApprovalVoided { policy, policy_version } => {
            out.attributes = [("policy", policy.clone()), ("policy_version", policy_version.to_string())]
                .into_iter()
                .map(|(key, value)| (key.to_string(), value))
                .collect();
        }
        EventKind::Recorded { payload_json, attributes, .. } => {
            out.recorded_by_application = true;
            out.payload_json = payload_json.clone();
            out.attributes = attributes.clone();
        }
        EventKind::Approved { terms_hash } | EventKind::Rejected { terms_hash } => {
            out.attributes = [("terms_hash".to_string(), terms_hash.clone())].into_iter().collect();
        }
        EventKind::Requested
        | EventKind::ApprovalRequested
        | EventKind::ApprovalCancelled
        | EventKind::ApprovalConsumed
        | EventKind::VoteWithdrawn => {}
    }
    out
}
