//! How a refusal becomes a gRPC status: the class of its code picks the
//! status code, and the stable domain code, a retry hint and the leader's
//! address travel in the details. A leaf: every layer that refuses a call
//! (overload, quotas, authentication, the node) maps its refusals here.

use gavel_core::{DomainError, ErrorClass, ErrorCode};
use tonic::{Code, Status};

/// How long a caller should wait before retrying during an election.
pub const RETRY_AFTER_MS: u64 = 250;

/// `UNAVAILABLE` with a retry hint and, when known, the leader's address.
pub fn unavailable(message: &str, leader_hint: Option<String>) -> Status {
    refusal_status(ErrorCode::Unavailable, message, Some(RETRY_AFTER_MS), leader_hint)
}

/// A domain refusal as a gRPC status with the stable code in the details.
pub fn domain_status(error: DomainError) -> Status {
    gavel_proto::error_detail::detail_status(
        grpc_code(error.code.class()),
        crate::convert::common::error_detail_out(error),
    )
}

/// A refusal the edge makes itself with a code of the catalogue, for one
/// that carries what a [`DomainError`] does not: a retry hint, the
/// leader's address. Its gRPC status is its code's class, as for every
/// refusal.
pub fn refusal_status(
    code: ErrorCode,
    message: &str,
    retry_after_ms: Option<u64>,
    leader_hint: Option<String>,
) -> Status {
    gavel_proto::error_detail::domain_status(
        grpc_code(code.class()),
        code.as_str(),
        message,
        Vec::new(),
        retry_after_ms,
        leader_hint,
    )
}

/// The gRPC status code of a class of refusal.
fn grpc_code(class: ErrorClass) -> Code {
    match class {
        ErrorClass::InvalidArgument => Code::InvalidArgument,
        ErrorClass::NotFound => Code::NotFound,
        ErrorClass::AlreadyExists => Code::AlreadyExists,
        ErrorClass::Unauthenticated => Code::Unauthenticated,
        ErrorClass::PermissionDenied => Code::PermissionDenied,
        ErrorClass::FailedPrecondition => Code::FailedPrecondition,
        ErrorClass::ResourceExhausted => Code::ResourceExhausted,
        ErrorClass::OutOfRange => Code::OutOfRange,
        ErrorClass::Unavailable => Code::Unavailable,
        ErrorClass::Internal => Code::Internal,
        ErrorClass::DataLoss => Code::DataLoss,
    }
}
