//! The public gRPC services. A handler runs where [`crate::routing`] sent
//! it (the leader, for everything but the calls every node serves) and
//! holds conversion plus one call: [`crate::node::Node::call`] for a
//! command, [`crate::node::Node::read`] for a read.

pub mod approval;
pub mod audit;
pub mod capability;
pub mod cluster;
pub mod execution;
pub mod worker;

use tonic::metadata::MetadataMap;
use tonic::Status;

use crate::node::domain_status;

/// The request id of a call: the caller's, from the message, or else the one
/// the routing layer assigned (header [`gavel_proto::metadata::REQUEST_ID`])
/// before any forwarding, so that retries of a forwarded call are
/// deduplicated too. Either is checked like any other id, so an ill-formed
/// one is refused before it can reach the log (SPEC §7).
pub fn request_id(metadata: &MetadataMap, from_message: &str) -> Result<String, Status> {
    let request_id = if from_message.is_empty() {
        let assigned = metadata.get(gavel_proto::metadata::REQUEST_ID).and_then(|value| value.to_str().ok());
        assigned.ok_or_else(|| Status::internal("the routing layer assigned no request id"))?
    } else {
        from_message
    };
    gavel_core::validate::check_id("requestId", request_id)
        .map_err(|problem| domain_status(gavel_core::DomainError::invalid(problem)))?;
    Ok(request_id.to_string())
}
