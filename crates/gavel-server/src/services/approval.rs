//! `ApprovalService`.

use std::sync::Arc;
use std::time::Duration;

use gavel_core::{ApprovalFilter, Command, Reply};
use gavel_proto::v1 as pb;
use gavel_proto::v1::approval_service_client::ApprovalServiceClient;
use gavel_proto::v1::approval_service_server::ApprovalService;
use tonic::{Request, Response, Status};

use super::{assign_request_id, is_forwarded, prechecked, refused};
use crate::convert::approval::{approval_out, create_in, decide_in, status_filter_in};
use crate::convert::common::timestamp_in;
use crate::node::{unexpected, wall_clock_ms, Node, Routed};
use crate::serve;

/// Serves approvals.
pub struct Approvals {
    /// The node.
    pub node: Arc<Node>,
}

fn approval_of(reply: Reply) -> Result<pb::Approval, Routed> {
    match refused(reply)? {
        Reply::Approval { approval, status } => Ok(approval_out(&approval, status)),
        other => Err(Routed::Fail(unexpected(&other))),
    }
}

const NO_WAIT: Duration = Duration::ZERO;

#[tonic::async_trait]
impl ApprovalService for Approvals {
    async fn create_approval(
        &self,
        request: Request<pb::CreateApprovalRequest>,
    ) -> Result<Response<pb::CreateApprovalResponse>, Status> {
        let forwarded = is_forwarded(&request);
        let mut message = request.into_inner();
        assign_request_id(&mut message.request_id)?;
        serve!(
            self.node,
            forwarded,
            message,
            NO_WAIT,
            ApprovalServiceClient,
            create_approval,
            async {
                let command = prechecked(create_in(&message)?)?;
                let reply = self.node.propose(&message.request_id, command).await?;
                Ok::<_, Routed>(pb::CreateApprovalResponse { approval: Some(approval_of(reply)?) })
            }
            .await
        )
    }

    async fn get_approval(
        &self,
        request: Request<pb::GetApprovalRequest>,
    ) -> Result<Response<pb::GetApprovalResponse>, Status> {
        let forwarded = is_forwarded(&request);
        let message = request.into_inner();
        if gavel_core::mutants::active(gavel_core::mutants::Mutant::StaleRead) {
            // Planted bug: answer from this node's local state, no read-index.
            let state = self.node.app.state();
            let now_ms = state.clock_ms().max(wall_clock_ms());
            let approval =
                state.approval(&message.id).map(|approval| approval_out(approval, approval.status_at(now_ms)));
            return Ok(Response::new(pb::GetApprovalResponse { approval }));
        }
        serve!(
            self.node,
            forwarded,
            message,
            NO_WAIT,
            ApprovalServiceClient,
            get_approval,
            async {
                let now_ms = timestamp_in("callerNowMs", message.caller_now_ms)?;
                self.node.linearizable().await?;
                let state = self.node.app.state();
                let now_ms = now_ms.unwrap_or_else(|| state.clock_ms().max(wall_clock_ms()));
                let approval =
                    state.approval(&message.id).map(|approval| approval_out(approval, approval.status_at(now_ms)));
                Ok::<_, Routed>(pb::GetApprovalResponse { approval })
            }
            .await
        )
    }

    async fn decide_approval(
        &self,
        request: Request<pb::DecideApprovalRequest>,
    ) -> Result<Response<pb::DecideApprovalResponse>, Status> {
        let forwarded = is_forwarded(&request);
        let mut message = request.into_inner();
        assign_request_id(&mut message.request_id)?;
        serve!(
            self.node,
            forwarded,
            message,
            NO_WAIT,
            ApprovalServiceClient,
            decide_approval,
            async {
                let command = prechecked(decide_in(&message)?)?;
                let reply = self.node.propose(&message.request_id, command).await?;
                Ok::<_, Routed>(pb::DecideApprovalResponse { approval: Some(approval_of(reply)?) })
            }
            .await
        )
    }

    async fn consume_approval(
        &self,
        request: Request<pb::ConsumeApprovalRequest>,
    ) -> Result<Response<pb::ConsumeApprovalResponse>, Status> {
        let forwarded = is_forwarded(&request);
        let mut message = request.into_inner();
        assign_request_id(&mut message.request_id)?;
        serve!(
            self.node,
            forwarded,
            message,
            NO_WAIT,
            ApprovalServiceClient,
            consume_approval,
            async {
                let caller_now_ms = timestamp_in("callerNowMs", message.caller_now_ms)?;
                let command = prechecked(Command::ConsumeApproval {
                    approval_id: message.id.clone(),
                    execution_id: message.execution_id.clone(),
                    caller_now_ms,
                })?;
                let reply = self.node.propose(&message.request_id, command).await?;
                Ok::<_, Routed>(pb::ConsumeApprovalResponse { approval: Some(approval_of(reply)?) })
            }
            .await
        )
    }

    async fn list_approvals(
        &self,
        request: Request<pb::ListApprovalsRequest>,
    ) -> Result<Response<pb::ListApprovalsResponse>, Status> {
        let forwarded = is_forwarded(&request);
        let message = request.into_inner();
        serve!(
            self.node,
            forwarded,
            message,
            NO_WAIT,
            ApprovalServiceClient,
            list_approvals,
            async {
                let now_ms = timestamp_in("callerNowMs", message.caller_now_ms)?;
                let filter = ApprovalFilter {
                    status: message.status.map(status_filter_in).transpose()?,
                    capability_id: message.capability_id.clone(),
                    actor_id: message.actor_id.clone(),
                };
                let after = decode_page_token(&message.page_token)?;
                let limit = match message.limit {
                    0 => 100,
                    limit => limit.min(gavel_core::limits::APPROVALS_PAGE_MAX),
                } as usize;
                self.node.linearizable().await?;
                let state = self.node.app.state();
                let now_ms = now_ms.unwrap_or_else(|| state.clock_ms().max(wall_clock_ms()));
                let page = state.list_approvals(&filter, now_ms, after.as_ref(), limit);
                let next_page_token = match page.last() {
                    Some(last) if page.len() == limit => format!("{}:{}", last.requested_at_ms, last.id),
                    _ => String::new(),
                };
                let approvals =
                    page.iter().map(|approval| approval_out(approval, approval.status_at(now_ms))).collect();
                Ok::<_, Routed>(pb::ListApprovalsResponse { approvals, next_page_token })
            }
            .await
        )
    }

    async fn cancel_approval(
        &self,
        request: Request<pb::CancelApprovalRequest>,
    ) -> Result<Response<pb::CancelApprovalResponse>, Status> {
        let forwarded = is_forwarded(&request);
        let mut message = request.into_inner();
        assign_request_id(&mut message.request_id)?;
        serve!(
            self.node,
            forwarded,
            message,
            NO_WAIT,
            ApprovalServiceClient,
            cancel_approval,
            async {
                let caller_now_ms = timestamp_in("callerNowMs", message.caller_now_ms)?;
                let command = prechecked(Command::CancelApproval { approval_id: message.id.clone(), caller_now_ms })?;
                let reply = self.node.propose(&message.request_id, command).await?;
                Ok::<_, Routed>(pb::CancelApprovalResponse { approval: Some(approval_of(reply)?) })
            }
            .await
        )
    }
}

/// Page tokens are `requestedAtMs:id` of the last approval returned.
fn decode_page_token(token: &str) -> Result<Option<(u64, String)>, gavel_core::DomainError> {
    if token.is_empty() {
        return Ok(None);
    }
    let (time, id) = token.split_once(':').ok_or_else(|| gavel_core::DomainError::invalid("malformed pageToken"))?;
    let time = time.parse().map_err(|_| gavel_core::DomainError::invalid("malformed pageToken"))?;
    Ok(Some((time, id.to_string())))
}
