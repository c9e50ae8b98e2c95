//! `ExecutionService`.

use std::sync::Arc;
use std::time::Duration;

use gavel_core::limits::WAIT_MS_MAX;
use gavel_core::{Action, ApprovalStatus, Caller, Command, DomainError, ErrorCode, Execution};
use gavel_proto::v1 as pb;
use gavel_proto::v1::execution_service_server::ExecutionService;
use tokio::time::Instant;
use tonic::{Request, Response, Status};

use super::{caller, request_id};
use gavel_store::reads::Woken;

use crate::convert::execution::{
    cancel_execution_in, execution_out, executions_page_out, list_executions_in, resume_in, submit_in, submit_out,
};
use crate::node::{domain_status, Node};
use crate::replies::{ExecutionReply, SubmitReply};
use crate::resumes::{Stage, WaitingResume};

/// Serves executions.
pub struct Executions {
    /// The node.
    pub node: Arc<Node>,
}

/// Events per page when the caller asks for the server's default.
const EVENTS_PAGE_DEFAULT: u32 = 100;

#[tonic::async_trait]
impl ExecutionService for Executions {
    async fn submit(&self, request: Request<pb::SubmitRequest>) -> Result<Response<pb::SubmitResponse>, Status> {
        let (metadata, extensions, message) = request.into_parts();
        let (caller, request_id) = (caller(&extensions)?, request_id(&metadata, &message.request_id)?);
        let command = submit_in(&message, &request_id, caller.as_ref()).map_err(domain_status)?;
        let reply: SubmitReply = self.node.call(caller.as_ref(), &request_id, command).await?;
        Ok(Response::new(submit_out(&reply)))
    }

    async fn resume(&self, request: Request<pb::ResumeRequest>) -> Result<Response<pb::ResumeResponse>, Status> {
        let (metadata, extensions, message) = request.into_parts();
        let (caller, request_id) = (caller(&extensions)?, request_id(&metadata, &message.request_id)?);
        let reply: ExecutionReply =
            self.node.call(caller.as_ref(), &request_id, resume_in(&message, &request_id)).await?;
        Ok(Response::new(pb::ResumeResponse { execution: Some(execution_out(&reply.execution)) }))
    }

    async fn resume_and_wait(
        &self,
        request: Request<pb::ResumeAndWaitRequest>,
    ) -> Result<Response<pb::ResumeAndWaitResponse>, Status> {
        let (metadata, extensions, message) = request.into_parts();
        let resume = message.resume.unwrap_or_default();
        let (caller, request_id) = (caller(&extensions)?, request_id(&metadata, &resume.request_id)?);
        // A caller that may resume but not read executions is refused before
        // the resume, not after it consumed the approval; the wait checks
        // again at its linearizable read.
        self.node.reads.read(|state| state.authorize(caller.as_ref(), Action::ReadExecution)).map_err(domain_status)?;
        let wait = Duration::from_millis(message.wait_ms.min(WAIT_MS_MAX));
        let command = resume_in(&resume, &request_id);
        let (reply, wait): (ExecutionReply, Duration) = if message.await_decision {
            // One budget: what the decision took is not waited again.
            let deadline = Instant::now() + wait;
            let reply =
                resume_on_decision(&self.node, caller.as_ref(), &request_id, &resume.approval_id, command, deadline)
                    .await?;
            (reply, deadline.saturating_duration_since(Instant::now()))
        } else {
            (self.node.call(caller.as_ref(), &request_id, command).await?, wait)
        };
        // A wait that fails after the resume (a leader change) is the call's
        // error; a retry with the same request id gets the same execution back.
        // No read barrier: the resume's answer came from this leader's applied
        // state, which holds it, and the caller may read executions (above).
        let execution_id = &reply.execution.execution_id;
        let answer = match wait_final(&self.node, caller.as_ref(), execution_id, wait, Barrier::AfterOwnWrite).await {
            Ok((execution, timed_out)) => {
                pb::ResumeAndWaitResponse { execution: Some(execution_out(&execution)), timed_out, wait_refused: false }
            }
            // The resume answered with the execution; a caller outside its
            // view (an admin acting without act-for) gets that answer, and no
            // later state of it.
            Err(status) if status.code() == tonic::Code::NotFound => pb::ResumeAndWaitResponse {
                execution: Some(execution_out(&reply.execution)),
                timed_out: false,
                wait_refused: true,
            },
            Err(status) => return Err(status),
        };
        Ok(Response::new(answer))
    }

    async fn get_execution(
        &self,
        request: Request<pb::GetExecutionRequest>,
    ) -> Result<Response<pb::GetExecutionResponse>, Status> {
        let (_, extensions, message) = request.into_parts();
        let caller = caller(&extensions)?;
        let execution = self
            .node
            .read(caller.as_ref(), Action::ReadExecution, |state| {
                // An execution outside the caller's view reads as an unknown one: NOT_FOUND.
                state
                    .visible_execution(caller.as_ref(), &message.execution_id)
                    .map(|execution| execution_out(&execution))
            })
            .await?
            .map_err(domain_status)?;
        Ok(Response::new(pb::GetExecutionResponse { execution: Some(execution) }))
    }

    async fn list_executions(
        &self,
        request: Request<pb::ListExecutionsRequest>,
    ) -> Result<Response<pb::ListExecutionsResponse>, Status> {
        let (_, extensions, message) = request.into_parts();
        let caller = caller(&extensions)?;
        let query = list_executions_in(&message).map_err(domain_status)?;
        let page = self
            .node
            .read(caller.as_ref(), Action::ReadExecution, |state| {
                // The core's read judge filters before paging: an execution
                // outside the caller's view is absent, as from GetExecution.
                let page = state.list_executions(
                    caller.as_ref(),
                    &query.filter,
                    query.after.as_ref(),
                    query.limit,
                    query.order,
                );
                executions_page_out(&page)
            })
            .await?;
        Ok(Response::new(page))
    }

    async fn wait_execution(
        &self,
        request: Request<pb::WaitExecutionRequest>,
    ) -> Result<Response<pb::WaitExecutionResponse>, Status> {
        let (_, extensions, message) = request.into_parts();
        let caller = caller(&extensions)?;
        let wait = Duration::from_millis(message.timeout_ms.min(WAIT_MS_MAX));
        let (execution, timed_out) =
            wait_final(&self.node, caller.as_ref(), &message.execution_id, wait, Barrier::Linearizable).await?;
        Ok(Response::new(pb::WaitExecutionResponse { execution: Some(execution_out(&execution)), timed_out }))
    }

    async fn cancel_execution(
        &self,
        request: Request<pb::CancelExecutionRequest>,
    ) -> Result<Response<pb::CancelExecutionResponse>, Status> {
        let (metadata, extensions, message) = request.into_parts();
        let (caller, request_id) = (caller(&extensions)?, request_id(&metadata, &message.request_id)?);
        let command = cancel_execution_in(&message).map_err(domain_status)?;
        let reply: ExecutionReply = self.node.call(caller.as_ref(), &request_id, command).await?;
        Ok(Response::new(pb::CancelExecutionResponse { execution: Some(execution_out(&reply.execution)) }))
    }

    async fn list_execution_events(
        &self,
        request: Request<pb::ListExecutionEventsRequest>,
    ) -> Result<Response<pb::ListExecutionEventsResponse>, Status> {
        let (_, extensions, message) = request.into_parts();
        let caller = caller(&extensions)?;
        let limit = if message.limit == 0 { EVENTS_PAGE_DEFAULT } else { message.limit };
        let (events, _) = self
            .node
            .read(caller.as_ref(), Action::ReadExecution, |state| {
                // The events of an execution outside the caller's view read
                // as those of an unknown one: none.
                let visible = |event: &gavel_core::Event| state.may_read_event(caller.as_ref(), event);
                super::audit::page(state, message.after_cursor, limit, Some(&message.execution_id), &visible)
            })
            .await?
            .map_err(|refusal| refusal.status())?;
        Ok(Response::new(pb::ListExecutionEventsResponse { events }))
    }
}

/// Waits up to `wait` for an execution to become final; returns it as it is
/// then, and whether the wait ran out first.
/// The resume of `approval_id` once it is decided (decision 0108): while
/// the approval is pending, the resume waits in the node's registry, where
/// a decision proposed here carries it into its own log entry; the answer
/// is then read by request id. A resume no decision carried (decided
/// elsewhere, before it registered, or by a vote that left it pending)
/// proposes itself once the approval is no longer pending, as `Resume`
/// does. Still pending at `deadline`: `APPROVAL_PENDING`, nothing spent.
async fn resume_on_decision(
    node: &Node,
    caller: Option<&Caller>,
    request_id: &str,
    approval_id: &str,
    command: Command,
    deadline: Instant,
) -> Result<ExecutionReply, Status> {
    // What the edge refuses is refused before any wait.
    gavel_core::precheck::check(&command).map_err(domain_status)?;
    // Woken by the entries that change the approval, and at its expiry.
    let mut applied = node.reads.watch_approval(approval_id);
    let waiting =
        WaitingResume { caller: caller.cloned(), request_id: request_id.to_string(), command: command.clone() };
    let registration = node.resumes.register(approval_id, waiting);
    // Once a decision carried it, a resume may still run in that entry
    // later (a proposal given up is not a proposal withdrawn), so only a
    // resume no decision ever carried answers APPROVAL_PENDING without
    // going through the log.
    let mut carried = false;
    loop {
        match registration.stage() {
            Stage::Answered => {
                carried = true;
                let remembered = node.reads.read(|state| state.replay_for(request_id, caller, &command));
                if let Some(reply) = remembered {
                    node.metrics.count_resume_carried();
                    return node.answer(reply);
                }
                // The decision was refused, lost with a leader, or a vote
                // left the approval pending: wait on, claimable again.
                registration.rearm();
            }
            Stage::Carried => {
                // The decision's proposal is bounded (`RAFT_WAIT`); the claim
                // drops when it returns, answered or not.
                let _ = tokio::time::timeout(CARRIED_ANSWER_WAIT, registration.changed()).await;
            }
            Stage::Waiting => {
                // While pending: how long until it expires (read lazily,
                // so no entry marks it).
                let until_expiry_ms = applied.read(|state| {
                    let now_ms = node.read_time_ms(state, None);
                    let approval = state.visible_approval(caller, approval_id).ok()?;
                    (approval.status_at(now_ms) == ApprovalStatus::Pending)
                        .then(|| approval.expires_at_ms.saturating_sub(now_ms) + 1)
                });
                let pending = until_expiry_ms.is_some();
                let now = Instant::now();
                if !pending || now >= deadline {
                    if !registration.leave() {
                        continue; // a decision carried it meanwhile: read its answer
                    }
                    drop(registration);
                    if pending && !carried {
                        let message = format!("approval {approval_id} is still pending: nothing was spent");
                        return Err(domain_status(DomainError::new(ErrorCode::ApprovalPending, message)));
                    }
                    // Decided, out of view, or once carried: the resume's own
                    // answer, ordered in the log after any entry carrying it.
                    return node.call(caller, request_id, command).await;
                }
                let wake = until_expiry_ms.map_or(deadline, |ms| deadline.min(now + Duration::from_millis(ms)));
                tokio::select! {
                    () = registration.changed() => {}
                    _ = applied.next_change(wake) => {}
                }
            }
        }
    }
}

/// How long a resume a decision carries waits for that decision's answer:
/// more than a proposal may take ([`crate::node`]'s `RAFT_WAIT`), so the
/// answer ends the wait, not this.
const CARRIED_ANSWER_WAIT: Duration = Duration::from_secs(12);

/// Where a wait's first read stands.
enum Barrier {
    /// A linearizable read first (a read barrier on the leader), which
    /// also authorizes the caller.
    Linearizable,
    /// Right after this node answered the caller's own write from its
    /// applied state, the caller authorized already: every state read from
    /// here on holds that write, so no barrier is needed (decision 0108).
    AfterOwnWrite,
}

async fn wait_final(
    node: &Node,
    caller: Option<&Caller>,
    execution_id: &str,
    wait: Duration,
    barrier: Barrier,
) -> Result<(Execution, bool), Status> {
    let deadline = tokio::time::Instant::now() + wait;
    // Woken by the entries that change this execution, not by every entry.
    let mut applied = node.reads.watch_execution(execution_id);
    // One linearizable read, on the leader; afterwards the leader's own
    // applied state only moves forward, so re-reading it stays linearizable.
    // The caller is authorized once, at that read.
    if let Barrier::Linearizable = barrier {
        node.read(caller, Action::ReadExecution, |_| ()).await?;
    }
    loop {
        // An execution outside the caller's view reads as an unknown one: NOT_FOUND.
        let execution = applied
            .read(|state| state.visible_execution(caller, execution_id).map(std::borrow::Cow::into_owned))
            .map_err(domain_status)?;
        if execution.state.is_final() {
            return Ok((execution, false));
        }
        if applied.next_change(deadline).await == Woken::DeadlineReached {
            return Ok((execution, true));
        }
    }
}
