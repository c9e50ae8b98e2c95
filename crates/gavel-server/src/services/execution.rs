//! `ExecutionService`.

use std::sync::Arc;
use std::time::Duration;

use gavel_core::limits::WAIT_MS_MAX;
use gavel_core::{Command, Reply, Submit};
use gavel_proto::v1 as pb;
use gavel_proto::v1::execution_service_client::ExecutionServiceClient;
use gavel_proto::v1::execution_service_server::ExecutionService;
use tonic::{Request, Response, Status};

use super::{assign_request_id, is_forwarded, prechecked, refused};
use crate::convert::approval::approval_out;
use crate::convert::common::actor_in;
use crate::convert::execution::{event_out, execution_out};
use crate::node::{domain_status, unexpected, Node, Routed};
use crate::serve;

/// Serves executions.
pub struct Executions {
    /// The node.
    pub node: Arc<Node>,
}

const NO_WAIT: Duration = Duration::ZERO;

fn execution_of(reply: Reply) -> Result<pb::Execution, Routed> {
    match refused(reply)? {
        Reply::Execution { execution, .. } => Ok(execution_out(&execution)),
        other => Err(Routed::Fail(unexpected(&other))),
    }
}

fn not_found(execution_id: &str) -> Routed {
    Routed::Fail(domain_status(gavel_core::DomainError::new(
        gavel_core::ErrorCode::NotFound,
        format!("execution {execution_id} was not found"),
    )))
}

#[tonic::async_trait]
impl ExecutionService for Executions {
    async fn submit(&self, request: Request<pb::SubmitRequest>) -> Result<Response<pb::SubmitResponse>, Status> {
        let forwarded = is_forwarded(&request);
        let mut message = request.into_inner();
        assign_request_id(&mut message.request_id)?;
        if message.execution_id.as_deref().is_none_or(str::is_empty) {
            message.execution_id = Some(gavel_core::ids::execution_id_for(&message.request_id));
        }
        serve!(
            self.node,
            forwarded,
            message,
            NO_WAIT,
            ExecutionServiceClient,
            submit,
            async {
                let actor = actor_in("actor", message.actor.as_ref())?;
                let command = prechecked(Command::Submit(Submit {
                    execution_id: message.execution_id.clone().unwrap_or_default(),
                    capability_id: message.capability_id.clone(),
                    input_json: message.input_json.clone(),
                    actor,
                    surface: message.surface.clone(),
                    correlation_id: message.correlation_id.clone().filter(|id| !id.is_empty()),
                }))?;
                let outcome = match refused(self.node.propose(&message.request_id, command).await?)? {
                    Reply::Execution { execution, created } => {
                        (pb::submit_response::Outcome::Execution(execution_out(&execution)), created)
                    }
                    Reply::ApprovalRequired { approval, status } => {
                        (pb::submit_response::Outcome::ApprovalRequired(approval_out(&approval, status)), true)
                    }
                    other => return Err(Routed::Fail(unexpected(&other))),
                };
                Ok::<_, Routed>(pb::SubmitResponse { outcome: Some(outcome.0), created: outcome.1 })
            }
            .await
        )
    }

    async fn resume(&self, request: Request<pb::ResumeRequest>) -> Result<Response<pb::ResumeResponse>, Status> {
        let forwarded = is_forwarded(&request);
        let mut message = request.into_inner();
        assign_request_id(&mut message.request_id)?;
        if message.execution_id.as_deref().is_none_or(str::is_empty) {
            message.execution_id = Some(gavel_core::ids::execution_id_for(&message.request_id));
        }
        serve!(
            self.node,
            forwarded,
            message,
            NO_WAIT,
            ExecutionServiceClient,
            resume,
            async {
                let command = prechecked(Command::Resume {
                    approval_id: message.approval_id.clone(),
                    execution_id: message.execution_id.clone().unwrap_or_default(),
                    input_json: message.input_json.clone(),
                })?;
                let execution = execution_of(self.node.propose(&message.request_id, command).await?)?;
                Ok::<_, Routed>(pb::ResumeResponse { execution: Some(execution) })
            }
            .await
        )
    }

    async fn get_execution(
        &self,
        request: Request<pb::GetExecutionRequest>,
    ) -> Result<Response<pb::GetExecutionResponse>, Status> {
        let forwarded = is_forwarded(&request);
        let message = request.into_inner();
        serve!(
            self.node,
            forwarded,
            message,
            NO_WAIT,
            ExecutionServiceClient,
            get_execution,
            async {
                self.node.linearizable().await?;
                let execution = self.node.app.state().execution(&message.execution_id).map(execution_out);
                Ok::<_, Routed>(pb::GetExecutionResponse { execution })
            }
            .await
        )
    }

    async fn wait_execution(
        &self,
        request: Request<pb::WaitExecutionRequest>,
    ) -> Result<Response<pb::WaitExecutionResponse>, Status> {
        let forwarded = is_forwarded(&request);
        let message = request.into_inner();
        let wait = Duration::from_millis(message.timeout_ms.min(WAIT_MS_MAX));
        serve!(self.node, forwarded, message, wait, ExecutionServiceClient, wait_execution, async {
            let deadline = tokio::time::Instant::now() + wait;
            let mut applied = self.node.app.subscribe();
            // One linearizable read, on the leader; afterwards the leader's own
            // applied state only moves forward, so re-reading it stays linearizable.
            self.node.linearizable().await?;
            loop {
                applied.borrow_and_update();
                let execution = {
                    let state = self.node.app.state();
                    state.execution(&message.execution_id).cloned()
                };
                let Some(execution) = execution else { return Err(not_found(&message.execution_id)) };
                if execution.state.is_final() {
                    return Ok(pb::WaitExecutionResponse { execution: Some(execution_out(&execution)), timed_out: false });
                }
                tokio::select! {
                    changed = applied.changed() => {
                        if changed.is_err() {
                            return Err(Routed::Fail(Status::unavailable("node is shutting down")));
                        }
                    }
                    _ = tokio::time::sleep_until(deadline) => {
                        return Ok(pb::WaitExecutionResponse { execution: Some(execution_out(&execution)), timed_out: true });
                    }
                }
            }
        }
        .await)
    }

    async fn cancel_execution(
        &self,
        request: Request<pb::CancelExecutionRequest>,
    ) -> Result<Response<pb::CancelExecutionResponse>, Status> {
        let forwarded = is_forwarded(&request);
        let mut message = request.into_inner();
        assign_request_id(&mut message.request_id)?;
        serve!(
            self.node,
            forwarded,
            message,
            NO_WAIT,
            ExecutionServiceClient,
            cancel_execution,
            async {
                let actor = match message.actor.as_ref() {
                    Some(actor) => Some(actor_in("actor", Some(actor))?),
                    None => None,
                };
                let command =
                    prechecked(Command::CancelExecution { execution_id: message.execution_id.clone(), actor })?;
                let execution = execution_of(self.node.propose(&message.request_id, command).await?)?;
                Ok::<_, Routed>(pb::CancelExecutionResponse { execution: Some(execution) })
            }
            .await
        )
    }

    async fn list_execution_events(
        &self,
        request: Request<pb::ListExecutionEventsRequest>,
    ) -> Result<Response<pb::ListExecutionEventsResponse>, Status> {
        let forwarded = is_forwarded(&request);
        let message = request.into_inner();
        serve!(
            self.node,
            forwarded,
            message,
            NO_WAIT,
            ExecutionServiceClient,
            list_execution_events,
            async {
                self.node.linearizable().await?;
                let state = self.node.app.state();
                let limit = if message.limit == 0 { 100 } else { message.limit };
                let events = state
                    .execution_events(&message.execution_id, message.after_cursor, limit)
                    .into_iter()
                    .map(event_out)
                    .collect();
                Ok::<_, Routed>(pb::ListExecutionEventsResponse { events })
            }
            .await
        )
    }
}
