//! `AccessService`: grants bound to principals (replicated in the state
//! machine) and the caller's own identity.
//!
//! Grant and Revoke are commands, authorized by the state machine at their
//! position in the log (admin only). List is a read authorized after the
//! read barrier ([`Action::ReadAccess`]); WhoAmI answers any authenticated
//! caller from the leader's state after the barrier. SetQuota is a command
//! (admin only); GetQuota and ListQuotas are reads authorized after the
//! barrier by [`State::authorize_quota_read`] (one's own quota, or admin).

use std::sync::Arc;

use gavel_core::{Action, Command, Principal, QuotaView, State};
use gavel_proto::v1 as pb;
use gavel_proto::v1::access_service_server::AccessService;
use tonic::{Request, Response, Status};

use super::{caller, request_id};
use crate::convert::access::{grant_in, grant_name_in, grant_out, principal_in, quota_change_in, quota_out};
use crate::node::{domain_status, Node};
use crate::replies::GrantsReply;

/// Serves access control.
pub struct Access {
    /// The node.
    pub node: Arc<Node>,
}

/// The grants held by `principal` (every principal's when `None`), ordered
/// by principal, then grant name.
fn grants_in(state: &State, principal: Option<&Principal>) -> Vec<pb::AccessGrant> {
    match principal {
        Some(principal) => state.grants_of(principal).iter().map(|grant| grant_out(principal, grant)).collect(),
        None => state.bindings().into_iter().map(|(principal, grant)| grant_out(principal, grant)).collect(),
    }
}

fn grants_out(reply: &GrantsReply) -> Vec<pb::AccessGrant> {
    reply.grants.iter().map(|grant| grant_out(&reply.principal, grant)).collect()
}

#[tonic::async_trait]
impl AccessService for Access {
    async fn grant(&self, request: Request<pb::GrantRequest>) -> Result<Response<pb::GrantResponse>, Status> {
        let (metadata, extensions, message) = request.into_parts();
        let (caller, request_id) = (caller(&extensions)?, request_id(&metadata, &message.request_id)?);
        let (principal, grant) = grant_in(message.grant.as_ref()).map_err(domain_status)?;
        let reply: GrantsReply =
            self.node.call(caller.as_ref(), &request_id, Command::Grant { principal, grant }).await?;
        Ok(Response::new(pb::GrantResponse { grants: grants_out(&reply) }))
    }

    async fn revoke(&self, request: Request<pb::RevokeRequest>) -> Result<Response<pb::RevokeResponse>, Status> {
        let (metadata, extensions, message) = request.into_parts();
        let (caller, request_id) = (caller(&extensions)?, request_id(&metadata, &message.request_id)?);
        let principal = principal_in("principal", &message.principal).map_err(domain_status)?;
        let name = grant_name_in("grant", &message.grant).map_err(domain_status)?;
        let reply: GrantsReply =
            self.node.call(caller.as_ref(), &request_id, Command::Revoke { principal, name }).await?;
        Ok(Response::new(pb::RevokeResponse { grants: grants_out(&reply) }))
    }

    async fn list(&self, request: Request<pb::ListGrantsRequest>) -> Result<Response<pb::ListGrantsResponse>, Status> {
        let (_, extensions, message) = request.into_parts();
        let caller = caller(&extensions)?;
        let principal = match message.principal.as_deref() {
            Some(text) => Some(principal_in("principal", text).map_err(domain_status)?),
            None => None,
        };
        let grants =
            self.node.read(caller.as_ref(), Action::ReadAccess, |state| grants_in(state, principal.as_ref())).await?;
        Ok(Response::new(pb::ListGrantsResponse { grants }))
    }

    async fn who_am_i(&self, request: Request<pb::WhoAmIRequest>) -> Result<Response<pb::WhoAmIResponse>, Status> {
        let caller = caller(request.extensions())?;
        // Any authenticated caller may ask about itself: the routing layer
        // already refused the unauthenticated.
        let Some(caller) = caller else {
            return Ok(Response::new(pb::WhoAmIResponse::default()));
        };
        let grants = self
            .node
            .read(Some(&caller), Action::ReadOwnAccess, |state| grants_in(state, Some(&caller.principal)))
            .await?;
        let token_scope = caller.scope.iter().flatten().map(|name| name.as_str().to_string()).collect();
        Ok(Response::new(pb::WhoAmIResponse { principal: caller.principal.to_string(), grants, token_scope }))
    }

    async fn set_quota(&self, request: Request<pb::SetQuotaRequest>) -> Result<Response<pb::SetQuotaResponse>, Status> {
        let (metadata, extensions, message) = request.into_parts();
        let (caller, request_id) = (caller(&extensions)?, request_id(&metadata, &message.request_id)?);
        let (principal, change) = quota_change_in(&message).map_err(domain_status)?;
        let view: QuotaView =
            self.node.call(caller.as_ref(), &request_id, Command::SetQuota { principal, change }).await?;
        Ok(Response::new(pb::SetQuotaResponse { quota: Some(quota_out(&view)) }))
    }

    async fn get_quota(&self, request: Request<pb::GetQuotaRequest>) -> Result<Response<pb::GetQuotaResponse>, Status> {
        let (_, extensions, message) = request.into_parts();
        let caller = caller(&extensions)?;
        let principal = match (message.principal.as_str(), &caller) {
            ("", Some(caller)) => caller.principal.clone(),
            ("", None) => return Err(domain_status(gavel_core::DomainError::invalid("principal is required"))),
            (text, _) => principal_in("principal", text).map_err(domain_status)?,
        };
        let quota = self
            .node
            .read_authorizing(|state| {
                state.authorize_quota_read(caller.as_ref(), Some(&principal)).map_err(domain_status)?;
                Ok(quota_out(&state.quota_at(&principal, self.node.read_time_ms(state, None))))
            })
            .await?;
        Ok(Response::new(pb::GetQuotaResponse { quota: Some(quota) }))
    }

    async fn list_quotas(
        &self,
        request: Request<pb::ListQuotasRequest>,
    ) -> Result<Response<pb::ListQuotasResponse>, Status> {
        let caller = caller(request.extensions())?;
        let quotas = self
            .node
            .read_authorizing(|state| {
                state.authorize_quota_read(caller.as_ref(), None).map_err(domain_status)?;
                let now_ms = self.node.read_time_ms(state, None);
                Ok(state.quotas(now_ms).iter().map(quota_out).collect())
            })
            .await?;
        Ok(Response::new(pb::ListQuotasResponse { quotas }))
    }
}
