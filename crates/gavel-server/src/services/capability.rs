//! `CapabilityService`.

use std::sync::Arc;
use std::time::Duration;

use gavel_core::{Command, Reply};
use gavel_proto::v1 as pb;
use gavel_proto::v1::capability_service_client::CapabilityServiceClient;
use gavel_proto::v1::capability_service_server::CapabilityService;
use tonic::{Request, Response, Status};

use super::{assign_request_id, is_forwarded, prechecked, refused};
use crate::convert::capability::{capability_out, spec_in};
use crate::node::{domain_status, unexpected, Node, Routed};
use crate::serve;

/// Serves the capability registry.
pub struct Capabilities {
    /// The node.
    pub node: Arc<Node>,
}

const NO_WAIT: Duration = Duration::ZERO;

#[tonic::async_trait]
impl CapabilityService for Capabilities {
    async fn register_capability(
        &self,
        request: Request<pb::RegisterCapabilityRequest>,
    ) -> Result<Response<pb::RegisterCapabilityResponse>, Status> {
        let forwarded = is_forwarded(&request);
        let mut message = request.into_inner();
        assign_request_id(&mut message.request_id)?;
        serve!(
            self.node,
            forwarded,
            message,
            NO_WAIT,
            CapabilityServiceClient,
            register_capability,
            async {
                let spec = message
                    .spec
                    .as_ref()
                    .ok_or_else(|| Routed::Fail(domain_status(gavel_core::DomainError::invalid("spec is required"))))?;
                let spec = spec_in(spec)?;
                let command = prechecked(Command::RegisterCapability(spec))?;
                match refused(self.node.propose(&message.request_id, command).await?)? {
                    Reply::Capability(capability) => Ok::<_, Routed>(pb::RegisterCapabilityResponse {
                        capability: Some(capability_out(&capability)),
                    }),
                    other => Err(Routed::Fail(unexpected(&other))),
                }
            }
            .await
        )
    }

    async fn get_capability(
        &self,
        request: Request<pb::GetCapabilityRequest>,
    ) -> Result<Response<pb::GetCapabilityResponse>, Status> {
        let forwarded = is_forwarded(&request);
        let message = request.into_inner();
        serve!(
            self.node,
            forwarded,
            message,
            NO_WAIT,
            CapabilityServiceClient,
            get_capability,
            async {
                self.node.linearizable().await?;
                let state = self.node.app.state();
                let capability = state.capability(&message.id, message.version).map(capability_out);
                Ok::<_, Routed>(pb::GetCapabilityResponse { capability })
            }
            .await
        )
    }

    async fn list_capabilities(
        &self,
        request: Request<pb::ListCapabilitiesRequest>,
    ) -> Result<Response<pb::ListCapabilitiesResponse>, Status> {
        let forwarded = is_forwarded(&request);
        let message = request.into_inner();
        serve!(
            self.node,
            forwarded,
            message,
            NO_WAIT,
            CapabilityServiceClient,
            list_capabilities,
            async {
                self.node.linearizable().await?;
                let state = self.node.app.state();
                let capabilities = state.capabilities().into_iter().map(capability_out).collect();
                Ok::<_, Routed>(pb::ListCapabilitiesResponse { capabilities })
            }
            .await
        )
    }
}
