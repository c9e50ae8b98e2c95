//! Gavel records as MCP Tasks-extension tasks (SEP-2663). Pure: the
//! gateway reads the approval or execution from the cluster and this module
//! says what `tasks/get` answers. The task id is the execution id, so every
//! gateway instance answers the same from the cluster.
//!
//! | Gavel                                   | task                                  |
//! |-----------------------------------------|---------------------------------------|
//! | approval pending                        | `working`, message names the console  |
//! | approval approved (not yet resumed)     | `working` (the gateway resumes it)    |
//! | approval rejected, expired, voided      | `failed`, error names the reason      |
//! | approval cancelled                      | `cancelled`                           |
//! | execution queued, leased, in backoff    | `working`                             |
//! | execution completed                     | `completed`, the upstream tool result |
//! | execution failed, timed out             | `failed`, error names the Gavel code  |
//! | execution cancelled                     | `cancelled`                           |
//!
//! `input_required` is not used: it asks the *client* for input
//! (`inputRequests`), and an approval is asked of a person elsewhere.

use gavel_client::pb;
use rmcp::model::{DetailedTask, JsonObject, Task, TaskPayload, TaskStatus};
use serde_json::json;

/// How often a client should poll `tasks/get` (ms).
pub const POLL_INTERVAL_MS: u64 = 1_000;

/// The JSON-RPC error code of a task that failed for a Gavel reason (the
/// implementation-defined server error range).
const GAVEL_ERROR: i64 = -32_000;

/// The approval id of the execution a governed call submits: the cluster
/// names an approval created by submit `apr_<execution id>` for the short
/// ids the gateway chooses (`gavel_core::ids::approval_id_for`).
pub fn approval_id(task_id: &str) -> String {
    format!("apr_{task_id}")
}

/// Whether `task_id` is one the gateway could have chosen: `mcp-` and a
/// UUID's 32 hex digits. Anything else is answered as unknown without asking
/// the cluster.
pub fn is_task_id(task_id: &str) -> bool {
    task_id.strip_prefix("mcp-").is_some_and(|rest| rest.len() == 32 && rest.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// A fresh task id (and execution id).
pub fn new_task_id() -> String {
    format!("mcp-{}", uuid::Uuid::new_v4().simple())
}

/// The task a pending, refused or withdrawn approval stands for.
pub fn approval_task(approval: &pb::Approval, console_url: Option<&str>, task_id: &str) -> DetailedTask {
    let status = pb::ApprovalStatus::try_from(approval.status).unwrap_or(pb::ApprovalStatus::Unspecified);
    let created = iso8601(approval.requested_at_ms);
    let updated = approval.decision.as_ref().map_or(approval.requested_at_ms, |decision| decision.decided_at_ms);
    let task = Task::new(task_id, TaskStatus::Working, created, iso8601(updated));
    let decision_text = || match &approval.decision {
        Some(decision) => {
            let approver = decision.approver.as_ref().map(gavel_client::actor_text).unwrap_or_default();
            match &decision.comment {
                Some(comment) => format!("{approver}: {comment}"),
                None => approver,
            }
        }
        None => String::new(),
    };
    match status {
        pb::ApprovalStatus::Pending => DetailedTask::new(
            task.with_status_message(pending_message(&approval.id, console_url))
                .with_poll_interval_ms(POLL_INTERVAL_MS),
            TaskPayload::Working,
        ),
        pb::ApprovalStatus::Approved | pb::ApprovalStatus::Consumed => DetailedTask::new(
            task.with_status_message(format!("approved by {}; running", decision_text()))
                .with_poll_interval_ms(POLL_INTERVAL_MS),
            TaskPayload::Working,
        ),
        pb::ApprovalStatus::Cancelled => {
            DetailedTask::new(task.with_status_message("the approval request was withdrawn"), TaskPayload::Cancelled)
        }
        pb::ApprovalStatus::Rejected => {
            let message = format!("rejected by {}; the tool was not called", decision_text());
            failed(task, "APPROVAL_REJECTED", &message, false)
        }
        pb::ApprovalStatus::Expired => {
            failed(task, "APPROVAL_EXPIRED", "the approval request expired undecided; the tool was not called", false)
        }
        pb::ApprovalStatus::Voided | pb::ApprovalStatus::Unspecified => failed(
            task,
            "APPROVAL_VOIDED",
            "the approval request was voided (its policy changed); the tool was not called",
            false,
        ),
    }
}

/// The task of an approved call the cluster refused to start (`code` is
/// its refusal: `APPROVAL_EXPIRED` after the decision, ...): it never runs.
pub fn refused_task(approval: &pb::Approval, task_id: &str, code: &str, message: &str) -> DetailedTask {
    let updated = approval.decision.as_ref().map_or(approval.requested_at_ms, |decision| decision.decided_at_ms);
    let task = Task::new(task_id, TaskStatus::Working, iso8601(approval.requested_at_ms), iso8601(updated));
    failed(task, code, &format!("approved, but Gavel refused to run it: {message}"), false)
}

/// The message of a task waiting for a person's decision.
pub fn pending_message(approval_id: &str, console_url: Option<&str>) -> String {
    match console_url {
        Some(base) => format!(
            "waiting for approval {approval_id}: {}{}",
            base.trim_end_matches('/'),
            gavel_client::links::record_url("approvals", approval_id)
        ),
        None => format!("waiting for approval {approval_id} (gavel approval approve {approval_id})"),
    }
}

/// The task an execution stands for.
pub fn execution_task(execution: &pb::Execution) -> DetailedTask {
    let created = iso8601(execution.submitted_at_ms);
    let updated = iso8601(execution.finalized_at_ms.unwrap_or(execution.submitted_at_ms));
    let task = Task::new(execution.execution_id.clone(), TaskStatus::Working, created, updated);
    let outcome = execution.result.as_ref().and_then(|result| result.outcome.as_ref());
    match outcome {
        None => DetailedTask::new(
            task.with_status_message(format!("running (attempt {})", execution.attempts.max(1)))
                .with_poll_interval_ms(POLL_INTERVAL_MS),
            TaskPayload::Working,
        ),
        Some(pb::result_envelope::Outcome::Completed(completed)) => {
            match serde_json::from_str::<JsonObject>(&completed.output_json) {
                Ok(result) => DetailedTask::new(task, TaskPayload::Completed { result }),
                Err(_) => failed(task, "OUTPUT_INVALID", "the recorded result is not a tool result", false),
            }
        }
        Some(pb::result_envelope::Outcome::Failed(failure)) => {
            let unknown = failure.executed_before_failure == pb::ExecutedBeforeFailure::Unknown as i32;
            let message = if unknown {
                format!("{} (the tool may have run; it was not run again)", failure.message)
            } else {
                failure.message.clone()
            };
            failed(task, &failure.code, &message, unknown)
        }
        Some(pb::result_envelope::Outcome::Cancelled(cancelled)) => {
            if cancelled.code == pb::CancelCode::Timeout as i32 {
                failed(
                    task,
                    "TIMEOUT",
                    "the attempt ran past its deadline or its gateway was lost; the tool may have run, and its \
                     retry rules do not allow running it again",
                    true,
                )
            } else {
                DetailedTask::new(task.with_status_message("cancelled"), TaskPayload::Cancelled)
            }
        }
    }
}

fn failed(task: Task, code: &str, message: &str, may_have_run: bool) -> DetailedTask {
    let error = json!({
        "code": GAVEL_ERROR,
        "message": message,
        "data": {"gavelCode": code, "mayHaveRun": may_have_run},
    });
    let error = match error {
        serde_json::Value::Object(error) => error,
        _ => JsonObject::new(),
    };
    DetailedTask::new(task.with_status_message(message.to_string()), TaskPayload::Failed { error })
}

/// Unix ms as ISO 8601 UTC with milliseconds.
pub fn iso8601(ms: i64) -> String {
    let days = ms.div_euclid(86_400_000);
    let in_day = ms.rem_euclid(86_400_000);
    let (year, month, day) = gavel_client::calendar::civil_from_days(days);
    let (hours, minutes) = (in_day / 3_600_000, in_day / 60_000 % 60);
    let (seconds, millis) = (in_day / 1000 % 60, in_day % 1000);
    format!("{year:04}-{month:02}-{day:02}T{hours:02}:{minutes:02}:{seconds:02}.{millis:03}Z")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn approval(status: pb::ApprovalStatus) -> pb::Approval {
        pb::Approval { id: approval_id("mcp-1"), status: status as i32, requested_at_ms: 1_000, ..Default::default() }
    }

    #[test]
    fn a_pending_approval_is_a_working_task_naming_the_console_page() {
        let task = approval_task(&approval(pb::ApprovalStatus::Pending), Some("http://127.0.0.1:7400/"), "mcp-1");
        assert_eq!(task.status(), TaskStatus::Working);
        assert_eq!(
            task.task.status_message.as_deref(),
            Some("waiting for approval apr_mcp-1: http://127.0.0.1:7400/approvals/apr_mcp-1")
        );
    }

    #[test]
    fn refused_approvals_end_the_task_with_their_reason() {
        let rejected = approval_task(&approval(pb::ApprovalStatus::Rejected), None, "mcp-1");
        assert_eq!(rejected.status(), TaskStatus::Failed);
        let TaskPayload::Failed { error } = &rejected.payload else { panic!("{rejected:?}") };
        assert_eq!(error["data"]["gavelCode"], "APPROVAL_REJECTED");
        let withdrawn = approval_task(&approval(pb::ApprovalStatus::Cancelled), None, "mcp-1");
        assert_eq!(withdrawn.status(), TaskStatus::Cancelled);
    }

    #[test]
    fn a_timed_out_write_fails_saying_it_may_have_run() {
        let execution = pb::Execution {
            execution_id: "mcp-1".to_string(),
            result: Some(pb::ResultEnvelope {
                outcome: Some(pb::result_envelope::Outcome::Cancelled(pb::result_envelope::Cancelled {
                    code: pb::CancelCode::Timeout as i32,
                    attempts: 1,
                    duration_ms: 5,
                })),
            }),
            ..Default::default()
        };
        let task = execution_task(&execution);
        let TaskPayload::Failed { error } = &task.payload else { panic!("{task:?}") };
        assert_eq!(
            (error["data"]["gavelCode"].as_str(), error["data"]["mayHaveRun"].as_bool()),
            (Some("TIMEOUT"), Some(true))
        );
    }

    #[test]
    fn task_ids_are_only_those_the_gateway_makes() {
        assert!(is_task_id(&new_task_id()));
        for other in ["", "mcp-", "refund-1", "mcp-../x", "mcp-0123456789abcdef0123456789abcdeg"] {
            assert!(!is_task_id(other), "{other}");
        }
    }

    #[test]
    fn times_are_iso_8601_utc() {
        assert_eq!(iso8601(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso8601(1_764_000_000_123), "2025-11-24T16:00:00.123Z");
    }
}
