//! The public gRPC services. A handler runs where [`crate::routing`] sent
//! it (the leader, for everything but the calls every node serves) and
//! holds conversion plus one call: [`crate::node::Node::call`] for a
//! command, [`crate::node::Node::read`] for a read.

pub mod access;
pub mod approval;
pub mod audit;
pub(crate) mod audit_proof;
pub mod capability;
pub mod cluster;
pub mod execution;
pub mod policy;
pub mod worker;

use gavel_core::Caller;
use tonic::metadata::MetadataMap;
use tonic::{Extensions, Status};

use crate::node::domain_status;

/// The request id of a call: the caller's, from the message, or else the one
/// the routing layer assigned (header [`gavel_proto::metadata::REQUEST_ID`])
/// before any forwarding, so that retries of a forwarded call are
/// deduplicated too. Either is checked like any other id, so an ill-formed
/// one is refused before it can reach the log (SPEC §7).
pub fn request_id(metadata: &MetadataMap, from_message: &str) -> Result<String, Status> {
    let invalid = |problem: String| domain_status(gavel_core::DomainError::invalid(problem));
    let request_id = if from_message.is_empty() {
        let header = gavel_proto::metadata::REQUEST_ID;
        let assigned =
            metadata.get(header).ok_or_else(|| Status::internal("the routing layer assigned no request id"))?;
        assigned.to_str().map_err(|_| invalid(format!("the {header} header is not printable ASCII")))?
    } else {
        from_message
    };
    gavel_core::validate::check_id("requestId", request_id).map_err(invalid)?;
    Ok(request_id.to_string())
}

/// The caller the routing layer authenticated for this call: `Some` on a
/// secured node, `None` on an insecure one. The routing layer puts it into
/// every public call's extensions; its absence is a bug, refused rather than
/// served unauthenticated.
pub fn caller(extensions: &Extensions) -> Result<Option<Caller>, Status> {
    extensions
        .get::<Option<Caller>>()
        .cloned()
        .ok_or_else(|| Status::internal("the routing layer authenticated no caller"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::codegen::http::{HeaderMap, HeaderValue};

    fn with_header(value: &[u8]) -> MetadataMap {
        let mut headers = HeaderMap::new();
        headers.insert(gavel_proto::metadata::REQUEST_ID, HeaderValue::from_bytes(value).expect("a header value"));
        MetadataMap::from_headers(headers)
    }

    #[test]
    fn the_message_id_wins_and_the_header_stands_in_for_a_missing_one() {
        let metadata = with_header(b"from-header");
        assert_eq!(request_id(&metadata, "from-message").expect("valid"), "from-message");
        assert_eq!(request_id(&metadata, "").expect("valid"), "from-header");
    }

    #[test]
    fn an_ill_formed_request_id_is_bad_input_wherever_it_comes_from() {
        for (metadata, from_message) in
            [(with_header(b"\xff\xfe"), ""), (with_header(&[b'h'; 129]), ""), (MetadataMap::new(), &*"m".repeat(129))]
        {
            let status = request_id(&metadata, from_message).expect_err("refused");
            assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
        }
    }
}
