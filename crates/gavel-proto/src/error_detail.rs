//! Error statuses that carry Gavel's stable domain code.
//!
//! Every error of the API is a [`tonic::Status`] whose gRPC code gives the
//! family (`INVALID_ARGUMENT`, `FAILED_PRECONDITION`, ...) and whose domain
//! code (`APPROVAL_CONSUMED`, `LEASE_LOST`, ...) says exactly what happened.
//! A client can read the domain code in two ways:
//!
//! 1. From the status details, the bytes gRPC sends in the
//!    `grpc-status-details-bin` trailer: a standard `google.rpc.Status` whose
//!    `details` hold one `google.protobuf.Any` with type URL
//!    [`ERROR_DETAIL_TYPE_URL`] and an encoded [`ErrorDetail`] as value. This
//!    carries everything: code, message, validation problems, retry delay and
//!    leader hint. [`read_error_detail`] decodes it.
//! 2. From the ASCII metadata key [`ERROR_CODE_METADATA_KEY`]
//!    (`gavel-error-code`), which holds the domain code alone, for clients
//!    that only look at trailers.
//!
//! The details are wrapped in `google.rpc.Status` rather than being a bare
//! `ErrorDetail` because gRPC defines `grpc-status-details-bin` to hold a
//! `google.rpc.Status`: grpc-go, and tools built on it such as grpcurl,
//! decode it inside the transport and turn anything else into `INTERNAL`.

use prost::{bytes::Bytes, Message};
use tonic::{
    metadata::{MetadataMap, MetadataValue},
    Code, Status,
};

use crate::v1::ErrorDetail;

/// Metadata key whose value is the domain code of an error status.
pub const ERROR_CODE_METADATA_KEY: &str = "gavel-error-code";

/// Type URL of the `google.protobuf.Any` that holds an [`ErrorDetail`] in the
/// status details.
pub const ERROR_DETAIL_TYPE_URL: &str = "type.googleapis.com/gavel.v1.ErrorDetail";

/// Fully qualified protobuf name of [`ErrorDetail`]; an `Any` type URL names
/// the type by its last `/`-separated segment, whatever the prefix.
const ERROR_DETAIL_TYPE_NAME: &str = "gavel.v1.ErrorDetail";

/// `google.rpc.Status`, the standard envelope of gRPC status details. It is
/// declared here by hand, field for field, so that the crate needs no copy of
/// the googleapis protos.
#[derive(Clone, PartialEq, Message)]
struct RpcStatus {
    /// The gRPC status code; equal to the code of the enclosing status.
    #[prost(int32, tag = "1")]
    code: i32,
    /// The status message; equal to the message of the enclosing status.
    #[prost(string, tag = "2")]
    message: String,
    /// Typed details; Gavel puts exactly one `ErrorDetail` here.
    #[prost(message, repeated, tag = "3")]
    details: Vec<prost_types::Any>,
}

/// Builds an error status carrying a domain code, readable both from the
/// status details (an encoded [`ErrorDetail`], see the module docs) and from
/// the metadata key [`ERROR_CODE_METADATA_KEY`].
///
/// `problems` lists every validation problem when there are several;
/// `retry_after_ms` is meant for `UNAVAILABLE` during elections;
/// `leader_hint` is the leader's address when it is known.
pub fn domain_status(
    code: Code,
    domain_code: &str,
    message: &str,
    problems: Vec<String>,
    retry_after_ms: Option<u64>,
    leader_hint: Option<String>,
) -> Status {
    let detail = ErrorDetail {
        code: domain_code.to_owned(),
        message: message.to_owned(),
        problems,
        retry_after_ms,
        leader_hint,
        ..ErrorDetail::default()
    };
    detail_status(code, detail)
}

/// Builds an error status from a whole [`ErrorDetail`], for refusals that
/// carry more than [`domain_status`] takes (the approval status of a refused
/// decide or consume). The status message is `detail.message`.
pub fn detail_status(code: Code, detail: ErrorDetail) -> Status {
    let envelope = RpcStatus {
        code: i32::from(code),
        message: detail.message.clone(),
        details: vec![prost_types::Any { type_url: ERROR_DETAIL_TYPE_URL.to_owned(), value: detail.encode_to_vec() }],
    };
    let mut metadata = MetadataMap::new();
    // Domain codes are upper snake case ASCII and always make a valid header
    // value; should one ever not, it still travels in the details.
    if let Ok(value) = MetadataValue::try_from(detail.code.as_str()) {
        metadata.insert(ERROR_CODE_METADATA_KEY, value);
    }
    Status::with_details_and_metadata(code, detail.message, Bytes::from(envelope.encode_to_vec()), metadata)
}

/// Reads the [`ErrorDetail`] from a status's details; `None` when the status
/// carries none (for example an error produced by the transport, not by
/// Gavel) or when the details cannot be decoded.
pub fn read_error_detail(status: &Status) -> Option<ErrorDetail> {
    let envelope = RpcStatus::decode(status.details()).ok()?;
    envelope
        .details
        .iter()
        .find(|any| any.type_url.rsplit('/').next() == Some(ERROR_DETAIL_TYPE_NAME))
        .and_then(|any| ErrorDetail::decode(any.value.as_slice()).ok())
}

/// Reads the domain code of a status: from the details when present, else
/// from the metadata key [`ERROR_CODE_METADATA_KEY`]; `None` when neither
/// holds one.
pub fn read_domain_code(status: &Status) -> Option<String> {
    if let Some(detail) = read_error_detail(status) {
        return Some(detail.code);
    }
    status.metadata().get(ERROR_CODE_METADATA_KEY).and_then(|value| value.to_str().ok()).map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sends a status through its HTTP/2 trailer encoding and decodes it the
    /// way a tonic client does.
    fn over_the_wire(status: Status) -> Status {
        let response = status.into_http::<()>();
        Status::from_header_map(response.headers()).expect("the trailers hold a grpc-status")
    }

    #[test]
    fn domain_status_round_trips_every_field_of_the_error_detail() {
        let status = domain_status(
            Code::Unavailable,
            "NOT_LEADER",
            "no leader elected yet",
            vec!["first problem".to_owned(), "second problem".to_owned()],
            Some(150),
            Some("10.0.0.2:7000".to_owned()),
        );

        assert_eq!(status.code(), Code::Unavailable);
        assert_eq!(status.message(), "no leader elected yet");
        assert_eq!(
            read_error_detail(&status),
            Some(ErrorDetail {
                code: "NOT_LEADER".to_owned(),
                message: "no leader elected yet".to_owned(),
                problems: vec!["first problem".to_owned(), "second problem".to_owned()],
                retry_after_ms: Some(150),
                leader_hint: Some("10.0.0.2:7000".to_owned()),
                ..ErrorDetail::default()
            })
        );
    }

    #[test]
    fn the_approval_status_and_consumer_of_a_refusal_survive_the_trailer_encoding() {
        let sent = detail_status(
            Code::FailedPrecondition,
            ErrorDetail {
                code: "FAILED_PRECONDITION".to_owned(),
                message: "approval a1 cannot be consumed (status: consumed, consumed by e1)".to_owned(),
                approval_status: Some(crate::v1::ApprovalStatus::Consumed as i32),
                consumed_by_execution_id: Some("e1".to_owned()),
                ..ErrorDetail::default()
            },
        );

        let received = over_the_wire(sent);

        assert_eq!(received.code(), Code::FailedPrecondition);
        assert_eq!(received.message(), "approval a1 cannot be consumed (status: consumed, consumed by e1)");
        let detail = read_error_detail(&received).expect("details hold an ErrorDetail");
        assert_eq!(detail.approval_status(), crate::v1::ApprovalStatus::Consumed);
        assert_eq!(detail.consumed_by_execution_id.as_deref(), Some("e1"));
        assert_eq!(read_domain_code(&received).as_deref(), Some("FAILED_PRECONDITION"));
    }

    #[test]
    fn domain_code_survives_the_trailer_encoding_in_details_and_metadata() {
        let sent = domain_status(
            Code::FailedPrecondition,
            "APPROVAL_CONSUMED",
            "approval a1 cannot be consumed (status: consumed, consumed by e1)",
            Vec::new(),
            None,
            None,
        );

        let received = over_the_wire(sent);

        assert_eq!(received.code(), Code::FailedPrecondition);
        assert_eq!(received.message(), "approval a1 cannot be consumed (status: consumed, consumed by e1)");
        let detail = read_error_detail(&received).expect("details hold an ErrorDetail");
        assert_eq!(detail.code, "APPROVAL_CONSUMED");
        assert_eq!(detail.retry_after_ms, None);
        assert_eq!(detail.leader_hint, None);
        assert_eq!(
            received.metadata().get(ERROR_CODE_METADATA_KEY).and_then(|value| value.to_str().ok()),
            Some("APPROVAL_CONSUMED")
        );
    }

    #[test]
    fn details_are_a_standard_google_rpc_status_with_the_same_code_and_message() {
        let status = domain_status(
            Code::InvalidArgument,
            "INVALID_ARGUMENT",
            "capability spec is invalid",
            vec!["timeout_ms must be positive".to_owned()],
            None,
            None,
        );

        let envelope = RpcStatus::decode(status.details()).expect("details decode");

        assert_eq!(envelope.code, i32::from(Code::InvalidArgument));
        assert_eq!(envelope.message, "capability spec is invalid");
        assert_eq!(envelope.details.len(), 1);
        assert_eq!(envelope.details[0].type_url, ERROR_DETAIL_TYPE_URL);
    }

    #[test]
    fn read_domain_code_prefers_details_and_falls_back_to_metadata() {
        let full = domain_status(Code::NotFound, "CAPABILITY_NOT_FOUND", "m", vec![], None, None);
        assert_eq!(read_domain_code(&full).as_deref(), Some("CAPABILITY_NOT_FOUND"));

        let mut metadata_only = Status::new(Code::FailedPrecondition, "lease 7 is not current");
        metadata_only.metadata_mut().insert(ERROR_CODE_METADATA_KEY, MetadataValue::from_static("LEASE_LOST"));
        assert_eq!(read_error_detail(&metadata_only), None);
        assert_eq!(read_domain_code(&metadata_only).as_deref(), Some("LEASE_LOST"));
    }

    #[test]
    fn statuses_without_a_gavel_detail_read_as_none() {
        let plain = Status::new(Code::Internal, "transport broke");
        assert_eq!(read_error_detail(&plain), None);
        assert_eq!(read_domain_code(&plain), None);

        let garbage = Status::with_details(Code::Internal, "x", Bytes::from_static(b"\xff\xff"));
        assert_eq!(read_error_detail(&garbage), None);

        let other_detail = RpcStatus {
            code: i32::from(Code::Internal),
            message: "x".to_owned(),
            details: vec![prost_types::Any {
                type_url: "type.googleapis.com/google.rpc.DebugInfo".to_owned(),
                value: Vec::new(),
            }],
        };
        let foreign = Status::with_details(Code::Internal, "x", Bytes::from(other_detail.encode_to_vec()));
        assert_eq!(read_error_detail(&foreign), None);
    }

    #[test]
    fn an_error_detail_under_any_type_url_prefix_is_read() {
        let detail = ErrorDetail { code: "LEASE_LOST".to_owned(), message: "m".to_owned(), ..ErrorDetail::default() };
        let envelope = RpcStatus {
            code: i32::from(Code::FailedPrecondition),
            message: "m".to_owned(),
            details: vec![prost_types::Any {
                type_url: "example.com/types/gavel.v1.ErrorDetail".to_owned(),
                value: detail.encode_to_vec(),
            }],
        };
        let status = Status::with_details(Code::FailedPrecondition, "m", Bytes::from(envelope.encode_to_vec()));

        assert_eq!(read_error_detail(&status), Some(detail));
    }
}
