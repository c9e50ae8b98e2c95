//! Answers for repeated requests: a reply the dedup table remembered, rebuilt
//! from current state. Lives with the orchestrator because it reads across
//! parts; the table itself (`dedup.rs`) only stores.

use crate::command::{Command, Reply, Task};
use crate::dedup::RememberedReply;
use crate::error::{DomainError, ErrorCode};
use crate::machine::State;

impl State {
    /// Rebuilds the full reply `remembered` stands for from current state. A
    /// record dropped by retention since the first reply yields `NOT_FOUND`.
    pub(super) fn rebuild_reply(&self, remembered: &RememberedReply, command: &Command) -> Reply {
        let gone = |what: &str, id: &str| {
            Reply::Error(DomainError::new(ErrorCode::NotFound, format!("{what} {id} was not found")))
        };
        match remembered {
            RememberedReply::Error(error) => Reply::Error(error.clone()),
            RememberedReply::Capability { id, version } => match self.capability(id, Some(*version)) {
                Some(capability) => Reply::Capability(capability.clone()),
                None => gone("capability", id),
            },
            RememberedReply::Approval { id } | RememberedReply::ApprovalRequired { id } => match self.approval(id) {
                Some(approval) => {
                    let now_ms = caller_now(command).unwrap_or(self.clock_ms());
                    let status = approval.status_at(now_ms);
                    let approval = approval.into_owned();
                    if matches!(remembered, RememberedReply::ApprovalRequired { .. }) {
                        Reply::ApprovalRequired { approval, status }
                    } else {
                        Reply::Approval { approval, status }
                    }
                }
                None => gone("approval", id),
            },
            RememberedReply::Execution { id, created } => match self.execution(id) {
                Some(execution) => Reply::Execution { execution: execution.into_owned(), created: *created },
                None => gone("execution", id),
            },
            RememberedReply::Tasks(leases) => {
                Reply::Tasks(leases.iter().filter_map(|lease| self.task_for_lease(lease)).collect::<Vec<Task>>())
            }
            RememberedReply::Heartbeat { cancel_requested, deadline_ms } => {
                Reply::Heartbeat { cancel_requested: *cancel_requested, deadline_ms: *deadline_ms }
            }
            RememberedReply::Reported { execution_id, retry_scheduled } => match self.execution(execution_id) {
                Some(execution) => {
                    Reply::Reported { execution: execution.into_owned(), retry_scheduled: *retry_scheduled }
                }
                None => gone("execution", execution_id),
            },
            RememberedReply::Ticked { leases_expired, backoffs_ended, records_compacted } => Reply::Ticked {
                leases_expired: *leases_expired,
                backoffs_ended: *backoffs_ended,
                records_compacted: *records_compacted,
            },
            RememberedReply::Cosigned { size, published } => Reply::Cosigned { size: *size, published: *published },
            RememberedReply::Grants { principal } => self.grants_reply(principal),
            RememberedReply::Quota { principal } => Reply::Quota(self.quota(principal)),
            RememberedReply::Policy { policy, voided } => Reply::Policy { policy: policy.clone(), voided: *voided },
            RememberedReply::Event { cursor } => match self.event(*cursor) {
                Some(event) => Reply::Event(event.clone()),
                None => gone("event", &cursor.to_string()),
            },
        }
    }
}

/// The caller's clock an approval command carried, if any.
fn caller_now(command: &Command) -> Option<u64> {
    match command {
        Command::CreateApproval(request) | Command::CreateStandingApproval { request, .. } => request.caller_now_ms,
        Command::DecideApproval { caller_now_ms, .. }
        | Command::ConsumeApproval { caller_now_ms, .. }
        | Command::CancelApproval { caller_now_ms, .. } => *caller_now_ms,
        _ => None,
    }
}
