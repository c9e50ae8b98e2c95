//! The public gRPC services. Each handler validates its request before
//! anything reaches the log, proposes or reads locally, and when this node is
//! not the leader forwards the call, once, to the leader.

pub mod approval;
pub mod audit;
pub mod capability;
pub mod cluster;
pub mod execution;
pub mod worker;

use std::time::Duration;

use gavel_core::{Command, Reply};
use tonic::Status;

use crate::node::{domain_status, Routed, FORWARDED_METADATA_KEY};

/// True when a follower forwarded this request.
pub fn is_forwarded<T>(request: &tonic::Request<T>) -> bool {
    request.metadata().contains_key(FORWARDED_METADATA_KEY)
}

/// Every mutation carries a request id: the caller's, or one assigned here,
/// before any forwarding, so that the leader's retries of a forwarded call are
/// deduplicated too. A caller's id is checked here like any other id, so an
/// ill-formed one is refused before it can reach the log (SPEC §7).
pub fn assign_request_id(request_id: &mut String) -> Result<(), Status> {
    if request_id.is_empty() {
        *request_id = format!("srv-{}", uuid::Uuid::new_v4());
    }
    gavel_core::validate::check_id("requestId", request_id)
        .map_err(|problem| domain_status(gavel_core::DomainError::invalid(problem)))
}

/// Checks a command before it may reach the log.
pub fn prechecked(command: Command) -> Result<Command, Routed> {
    gavel_core::precheck::precheck(&command).map_err(|error| Routed::Fail(domain_status(error)))?;
    Ok(command)
}

/// Turns a refusal reply into its status.
pub fn refused(reply: Reply) -> Result<Reply, Routed> {
    match reply {
        Reply::Error(error) => Err(Routed::Fail(domain_status(error))),
        reply => Ok(reply),
    }
}

/// Wraps a request for forwarding: marked as forwarded, with a deadline.
pub fn forwarded_request<T>(message: T, timeout: Duration) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.metadata_mut().insert(FORWARDED_METADATA_KEY, tonic::metadata::MetadataValue::from_static("1"));
    request.set_timeout(timeout);
    request
}

/// Response metadata naming the leader that served a forwarded call, so a
/// client can send its next calls there directly (one hop instead of two).
pub const LEADER_METADATA_KEY: &str = "gavel-leader";

/// Marks a forwarded call's response with the leader's address.
pub fn with_leader<T>(mut response: tonic::Response<T>, leader_addr: &str) -> tonic::Response<T> {
    if let Ok(value) = leader_addr.parse() {
        response.metadata_mut().insert(LEADER_METADATA_KEY, value);
    }
    response
}

/// The leader could not be reached: tell the caller to retry.
pub fn forward_failed(status: Status) -> Status {
    match status.code() {
        tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled => {
            if gavel_proto::error_detail::read_error_detail(&status).is_some() {
                status
            } else {
                crate::node::unavailable(&format!("the leader could not be reached: {}", status.message()), None)
            }
        }
        _ => status,
    }
}

/// Runs a handler body; on `Routed::Forward` calls the same RPC on the leader.
#[macro_export]
macro_rules! serve {
    ($node:expr, $forwarded:expr, $message:expr, $extra:expr, $client:ident, $method:ident, $body:expr) => {{
        let outcome: Result<_, $crate::node::Routed> = $body;
        match outcome {
            Ok(response) => Ok(tonic::Response::new(response)),
            Err($crate::node::Routed::Fail(status)) => Err(status),
            Err($crate::node::Routed::Forward(addr)) => {
                if $forwarded {
                    return Err($crate::node::unavailable("leadership is changing; retry shortly", Some(addr)));
                }
                let channel = $node.channel(&addr)?;
                let request = $crate::services::forwarded_request($message, $node.settings.forward_timeout + $extra);
                $client::new(channel)
                    .$method(request)
                    .await
                    .map(|response| $crate::services::with_leader(response, &addr))
                    .map_err($crate::services::forward_failed)
            }
        }
    }};
}
