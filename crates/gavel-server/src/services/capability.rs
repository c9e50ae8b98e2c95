//! `CapabilityService`.

use std::sync::Arc;

use gavel_core::{Action, Capability, Command, DomainError};
use gavel_proto::v1 as pb;
use gavel_proto::v1::capability_service_server::CapabilityService;
use tonic::{Request, Response, Status};

use super::{caller, request_id};
use crate::convert::capability::{capability_out, spec_in};
use crate::node::{domain_status, Node};

/// Serves the capability registry.
pub struct Capabilities {
    /// The node.
    pub node: Arc<Node>,
}

#[tonic::async_trait]
impl CapabilityService for Capabilities {
    async fn register_capability(
        &self,
        request: Request<pb::RegisterCapabilityRequest>,
    ) -> Result<Response<pb::RegisterCapabilityResponse>, Status> {
        let (metadata, extensions, message) = request.into_parts();
        let (caller, request_id) = (caller(&extensions)?, request_id(&metadata, &message.request_id)?);
        let spec = message.spec.as_ref().ok_or_else(|| DomainError::invalid("spec is required"));
        let spec = spec.and_then(spec_in).map_err(domain_status)?;
        let capability: Capability =
            self.node.call(caller.as_ref(), &request_id, Command::RegisterCapability(spec)).await?;
        Ok(Response::new(pb::RegisterCapabilityResponse { capability: Some(capability_out(&capability)) }))
    }

    async fn get_capability(
        &self,
        request: Request<pb::GetCapabilityRequest>,
    ) -> Result<Response<pb::GetCapabilityResponse>, Status> {
        let (_, extensions, message) = request.into_parts();
        let caller = caller(&extensions)?;
        let capability = self
            .node
            .read(caller.as_ref(), Action::ReadCapability, |state| {
                state.capability(&message.id, message.version).map(capability_out)
            })
            .await?;
        Ok(Response::new(pb::GetCapabilityResponse { capability }))
    }

    async fn list_capabilities(
        &self,
        request: Request<pb::ListCapabilitiesRequest>,
    ) -> Result<Response<pb::ListCapabilitiesResponse>, Status> {
        let caller = caller(request.extensions())?;
        let capabilities = self
            .node
            .read(caller.as_ref(), Action::ReadCapability, |state| {
                state.capabilities().into_iter().map(capability_out).collect()
            })
            .await?;
        Ok(Response::new(pb::ListCapabilitiesResponse { capabilities }))
    }
}
