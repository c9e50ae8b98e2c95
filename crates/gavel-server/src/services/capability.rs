//! `CapabilityService`.

use std::sync::Arc;

use gavel_core::{Capability, Command, DomainError};
use gavel_proto::v1 as pb;
use gavel_proto::v1::capability_service_server::CapabilityService;
use tonic::{Request, Response, Status};

use super::request_id;
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
        let (metadata, _, message) = request.into_parts();
        let request_id = request_id(&metadata, &message.request_id)?;
        let spec = message.spec.as_ref().ok_or_else(|| DomainError::invalid("spec is required"));
        let spec = spec.and_then(spec_in).map_err(domain_status)?;
        let capability: Capability = self.node.call(&request_id, Command::RegisterCapability(spec)).await?;
        Ok(Response::new(pb::RegisterCapabilityResponse { capability: Some(capability_out(&capability)) }))
    }

    async fn get_capability(
        &self,
        request: Request<pb::GetCapabilityRequest>,
    ) -> Result<Response<pb::GetCapabilityResponse>, Status> {
        let message = request.into_inner();
        let capability =
            self.node.read(|state| state.capability(&message.id, message.version).map(capability_out)).await?;
        Ok(Response::new(pb::GetCapabilityResponse { capability }))
    }

    async fn list_capabilities(
        &self,
        _request: Request<pb::ListCapabilitiesRequest>,
    ) -> Result<Response<pb::ListCapabilitiesResponse>, Status> {
        let capabilities =
            self.node.read(|state| state.capabilities().into_iter().map(capability_out).collect()).await?;
        Ok(Response::new(pb::ListCapabilitiesResponse { capabilities }))
    }
}
