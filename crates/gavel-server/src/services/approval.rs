//! `ApprovalService`.

use std::sync::Arc;
use std::time::Duration;

use gavel_core::limits::WAIT_MS_MAX;
#[cfg(feature = "mutants")]
use gavel_core::mutants::Mutant;
use gavel_core::{Action, Approval, ApprovalFilter, ApprovalStatus, Caller, State};
use gavel_proto::v1 as pb;
use gavel_proto::v1::approval_service_server::ApprovalService;
use gavel_store::reads::Woken;
use tonic::{Request, Response, Status};

use super::{caller, request_id};
use crate::convert::approval::{
    approval_read_out, approval_reply_out, approvals_page_out, cancel_in, consume_in, create_in, decide_in, list_in,
};
use crate::convert::common::timestamp_in;
use crate::node::{domain_status, Node};
use crate::replies::ApprovalReply;

/// Serves approvals.
pub struct Approvals {
    /// The node.
    pub node: Arc<Node>,
}

#[tonic::async_trait]
impl ApprovalService for Approvals {
    async fn create_approval(
        &self,
        request: Request<pb::CreateApprovalRequest>,
    ) -> Result<Response<pb::CreateApprovalResponse>, Status> {
        let (metadata, extensions, message) = request.into_parts();
        let (caller, request_id) = (caller(&extensions)?, request_id(&metadata, &message.request_id)?);
        let command = create_in(&message, caller.as_ref()).map_err(domain_status)?;
        let reply: ApprovalReply = self.node.call(caller.as_ref(), &request_id, command).await?;
        Ok(Response::new(pb::CreateApprovalResponse { approval: Some(approval_reply_out(&reply)) }))
    }

    async fn get_approval(
        &self,
        request: Request<pb::GetApprovalRequest>,
    ) -> Result<Response<pb::GetApprovalResponse>, Status> {
        let (_, extensions, message) = request.into_parts();
        let caller = caller(&extensions)?;
        let caller_now_ms = timestamp_in("callerNowMs", message.caller_now_ms).map_err(domain_status)?;
        // An approval outside the caller's view reads as an unknown one: NOT_FOUND.
        let read = |state: &State| {
            let now_ms = self.node.read_time_ms(state, caller_now_ms);
            state
                .visible_approval(caller.as_ref(), &message.id)
                .map(|approval| approval_read_out(state, caller.as_ref(), &approval, now_ms))
                .map_err(domain_status)
        };
        #[cfg(feature = "mutants")]
        if self.node.plants(Mutant::StaleRead) {
            // Planted bug: the routing layer let this call through on any
            // node, and it answers from local state without a read barrier.
            return Ok(Response::new(pb::GetApprovalResponse { approval: Some(self.node.reads.read(read)?) }));
        }
        let approval = self.node.read(caller.as_ref(), Action::ReadApprovals, read).await??;
        Ok(Response::new(pb::GetApprovalResponse { approval: Some(approval) }))
    }

    async fn wait_approval(
        &self,
        request: Request<pb::WaitApprovalRequest>,
    ) -> Result<Response<pb::WaitApprovalResponse>, Status> {
        let (_, extensions, message) = request.into_parts();
        let caller = caller(&extensions)?;
        let wait = Duration::from_millis(message.wait_ms.min(WAIT_MS_MAX));
        let (approval, timed_out) = wait_settled(&self.node, caller.as_ref(), &message.id, wait).await?;
        Ok(Response::new(pb::WaitApprovalResponse { approval: Some(approval), timed_out }))
    }

    async fn decide_approval(
        &self,
        request: Request<pb::DecideApprovalRequest>,
    ) -> Result<Response<pb::DecideApprovalResponse>, Status> {
        let (metadata, extensions, message) = request.into_parts();
        let (caller, request_id) = (caller(&extensions)?, request_id(&metadata, &message.request_id)?);
        let command = decide_in(&message, caller.as_ref()).map_err(domain_status)?;
        let reply: ApprovalReply = self.node.call(caller.as_ref(), &request_id, command).await?;
        Ok(Response::new(pb::DecideApprovalResponse { approval: Some(approval_reply_out(&reply)) }))
    }

    async fn consume_approval(
        &self,
        request: Request<pb::ConsumeApprovalRequest>,
    ) -> Result<Response<pb::ConsumeApprovalResponse>, Status> {
        let (metadata, extensions, message) = request.into_parts();
        let (caller, request_id) = (caller(&extensions)?, request_id(&metadata, &message.request_id)?);
        let command = consume_in(&message).map_err(domain_status)?;
        let reply: ApprovalReply = self.node.call(caller.as_ref(), &request_id, command).await?;
        Ok(Response::new(pb::ConsumeApprovalResponse { approval: Some(approval_reply_out(&reply)) }))
    }

    async fn list_approvals(
        &self,
        request: Request<pb::ListApprovalsRequest>,
    ) -> Result<Response<pb::ListApprovalsResponse>, Status> {
        let caller = caller(request.extensions())?;
        let query = list_in(request.get_ref()).map_err(domain_status)?;
        let page = self
            .node
            .read(caller.as_ref(), Action::ReadApprovals, |state| {
                let now_ms = self.node.read_time_ms(state, query.caller_now_ms);
                // The caller's view filters before paging, so a page, its
                // cursor and its length hold only approvals it may read.
                let filter = ApprovalFilter { readable_by: state.approval_view(caller.as_ref()), ..query.filter };
                // Closed approvals are read back from the cold records, so the page owns them.
                let page = state.list_approvals(&filter, now_ms, query.after.as_ref(), query.limit, query.order);
                let page: Vec<&Approval> = page.iter().map(AsRef::as_ref).collect();
                approvals_page_out(state, caller.as_ref(), &page, query.limit, now_ms)
            })
            .await?;
        Ok(Response::new(page))
    }

    async fn cancel_approval(
        &self,
        request: Request<pb::CancelApprovalRequest>,
    ) -> Result<Response<pb::CancelApprovalResponse>, Status> {
        let (metadata, extensions, message) = request.into_parts();
        let (caller, request_id) = (caller(&extensions)?, request_id(&metadata, &message.request_id)?);
        let command = cancel_in(&message).map_err(domain_status)?;
        let reply: ApprovalReply = self.node.call(caller.as_ref(), &request_id, command).await?;
        Ok(Response::new(pb::CancelApprovalResponse { approval: Some(approval_reply_out(&reply)) }))
    }
}

/// Waits up to `wait` for an approval to leave `PENDING`; returns it as it
/// is then, and whether the wait ran out first. Like `WaitExecution`'s wait
/// it only reads: it wakes on each entry that changes the approval
/// (decision 0109), and also when a pending approval's `expires_at_ms`
/// passes, since expiry is computed on read and no apply marks it.
async fn wait_settled(
    node: &Node,
    caller: Option<&Caller>,
    approval_id: &str,
    wait: Duration,
) -> Result<(pb::Approval, bool), Status> {
    let deadline = tokio::time::Instant::now() + wait;
    let mut applied = node.reads.watch_approval(approval_id);
    // One linearizable read, on the leader; afterwards the leader's own
    // applied state only moves forward, so re-reading it stays linearizable.
    // The caller is authorized once, at that read, as for GetApproval.
    node.read(caller, Action::ReadApprovals, |_| ()).await?;
    loop {
        // An approval outside the caller's view reads as an unknown one: NOT_FOUND.
        let (approval, until_expiry_ms) = applied
            .read(|state| {
                let now_ms = node.read_time_ms(state, None);
                state.visible_approval(caller, approval_id).map(|approval| {
                    let pending = approval.status_at(now_ms) == ApprovalStatus::Pending;
                    let until_expiry_ms = pending.then(|| approval.expires_at_ms.saturating_sub(now_ms) + 1);
                    (approval_read_out(state, caller, &approval, now_ms), until_expiry_ms)
                })
            })
            .map_err(domain_status)?;
        let Some(until_expiry_ms) = until_expiry_ms else {
            return Ok((approval, false));
        };
        let now = tokio::time::Instant::now();
        if now >= deadline {
            return Ok((approval, true));
        }
        let wake = deadline.min(now + Duration::from_millis(until_expiry_ms));
        // Either way the loop reads again: an apply may have settled it, and
        // at its expiry it reads as EXPIRED.
        let _: Woken = applied.next_change(wake).await;
    }
}
