//! `PolicyService`: approval policies and votes (docs/policies.md).
//!
//! SetPolicy, DeletePolicy, CastVote and WithdrawVote are commands,
//! authorized by the state machine at their position in the log (admin;
//! an eligible approver). GetPolicy and ListPolicies are reads any
//! authenticated caller may make ([`Action::ReadPolicies`]); ListVotes
//! reads an approval's quorum with the approval's own read rule, an
//! approval outside the caller's view reading as an unknown one.

use std::sync::Arc;

use gavel_core::{Action, Command, DomainError};
use gavel_proto::v1 as pb;
use gavel_proto::v1::policy_service_server::PolicyService;
use tonic::{Request, Response, Status};

use super::{caller, request_id};
use crate::convert::approval::{approval_reply_out, quorum_out};
use crate::convert::policy::{policy_out, set_in, vote_in, withdraw_in};
use crate::node::{domain_status, Node};
use crate::replies::{ApprovalReply, PolicyReply};

/// Serves policies and votes.
pub struct Policies {
    /// The node.
    pub node: Arc<Node>,
}

#[tonic::async_trait]
impl PolicyService for Policies {
    async fn set_policy(
        &self,
        request: Request<pb::SetPolicyRequest>,
    ) -> Result<Response<pb::SetPolicyResponse>, Status> {
        let (metadata, extensions, message) = request.into_parts();
        let (caller, request_id) = (caller(&extensions)?, request_id(&metadata, &message.request_id)?);
        let command = set_in(&message).map_err(domain_status)?;
        let reply: PolicyReply = self.node.call(caller.as_ref(), &request_id, command).await?;
        Ok(Response::new(pb::SetPolicyResponse { policy: Some(policy_out(&reply.policy)), voided: reply.voided }))
    }

    async fn get_policy(
        &self,
        request: Request<pb::GetPolicyRequest>,
    ) -> Result<Response<pb::GetPolicyResponse>, Status> {
        let (_, extensions, message) = request.into_parts();
        let caller = caller(&extensions)?;
        gavel_core::policies::check_name(&message.name).map_err(domain_status)?;
        let policy = self
            .node
            .read(caller.as_ref(), Action::ReadPolicies, |state| state.policy(&message.name).map(policy_out))
            .await?;
        Ok(Response::new(pb::GetPolicyResponse { policy }))
    }

    async fn list_policies(
        &self,
        request: Request<pb::ListPoliciesRequest>,
    ) -> Result<Response<pb::ListPoliciesResponse>, Status> {
        let caller = caller(request.extensions())?;
        let policies = self
            .node
            .read(caller.as_ref(), Action::ReadPolicies, |state| state.policies().into_iter().map(policy_out).collect())
            .await?;
        Ok(Response::new(pb::ListPoliciesResponse { policies }))
    }

    async fn delete_policy(
        &self,
        request: Request<pb::DeletePolicyRequest>,
    ) -> Result<Response<pb::DeletePolicyResponse>, Status> {
        let (metadata, extensions, message) = request.into_parts();
        let (caller, request_id) = (caller(&extensions)?, request_id(&metadata, &message.request_id)?);
        let command = Command::DeletePolicy { name: message.name.clone(), non_retroactive: message.non_retroactive };
        let reply: PolicyReply = self.node.call(caller.as_ref(), &request_id, command).await?;
        Ok(Response::new(pb::DeletePolicyResponse { policy: Some(policy_out(&reply.policy)), voided: reply.voided }))
    }

    async fn cast_vote(&self, request: Request<pb::CastVoteRequest>) -> Result<Response<pb::CastVoteResponse>, Status> {
        let (metadata, extensions, message) = request.into_parts();
        let (caller, request_id) = (caller(&extensions)?, request_id(&metadata, &message.request_id)?);
        let command = vote_in(&message, caller.as_ref()).map_err(domain_status)?;
        let reply: ApprovalReply = self.node.call(caller.as_ref(), &request_id, command).await?;
        Ok(Response::new(pb::CastVoteResponse { approval: Some(approval_reply_out(&reply)) }))
    }

    async fn withdraw_vote(
        &self,
        request: Request<pb::WithdrawVoteRequest>,
    ) -> Result<Response<pb::WithdrawVoteResponse>, Status> {
        let (metadata, extensions, message) = request.into_parts();
        let (caller, request_id) = (caller(&extensions)?, request_id(&metadata, &message.request_id)?);
        let command = withdraw_in(&message, caller.as_ref()).map_err(domain_status)?;
        let reply: ApprovalReply = self.node.call(caller.as_ref(), &request_id, command).await?;
        Ok(Response::new(pb::WithdrawVoteResponse { approval: Some(approval_reply_out(&reply)) }))
    }

    async fn list_votes(
        &self,
        request: Request<pb::ListVotesRequest>,
    ) -> Result<Response<pb::ListVotesResponse>, Status> {
        let (_, extensions, message) = request.into_parts();
        let caller = caller(&extensions)?;
        gavel_core::validate::check_id("approvalId", &message.approval_id)
            .map_err(|problem| domain_status(DomainError::invalid(problem)))?;
        let quorum = self
            .node
            .read(caller.as_ref(), Action::ReadApprovals, |state| {
                // Outside the caller's view, as an unknown approval: NOT_FOUND.
                let approval = state.visible_approval(caller.as_ref(), &message.approval_id)?;
                Ok::<_, DomainError>(approval.quorum.as_ref().map(quorum_out))
            })
            .await?
            .map_err(domain_status)?;
        Ok(Response::new(pb::ListVotesResponse { quorum }))
    }
}
