//! The SDK's error type.

use gavel_proto::error_detail::read_error_detail;
use gavel_proto::v1 as pb;

/// Why a call failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// The cluster refused the request; `code` is the stable domain code
    /// (`APPROVAL_CONSUMED`, `LEASE_LOST`, `INVALID_ARGUMENT`, ...).
    #[error("{code}: {message}")]
    Domain {
        /// Stable domain code.
        code: String,
        /// What went wrong.
        message: String,
        /// Every validation problem, when there were several.
        problems: Vec<String>,
        /// The gRPC status code it arrived with.
        status: tonic::Code,
        /// For a decide, cancel or consume refused because of the
        /// approval's state: its status then (expiry included).
        approval_status: Option<pb::ApprovalStatus>,
        /// With `approval_status` consumed: the execution that consumed it.
        consumed_by_execution_id: Option<String>,
    },
    /// No node could serve the call within the retry budget (no leader,
    /// every node unreachable). The call may or may not have taken effect;
    /// retrying with the same request id is safe.
    #[error("cluster unreachable: {0}")]
    Unavailable(String),
    /// A configuration problem on the client side (bad endpoint).
    #[error("invalid client configuration: {0}")]
    Config(String),
}

impl Error {
    /// The stable domain code, or `UNAVAILABLE` / `CONFIG` for the other kinds.
    pub fn code(&self) -> &str {
        match self {
            Error::Domain { code, .. } => code,
            Error::Unavailable(_) => "UNAVAILABLE",
            Error::Config(_) => "CONFIG",
        }
    }

    /// The approval's status a refused decide, cancel or consume reported
    /// (why it was refused), if any.
    pub fn approval_status(&self) -> Option<pb::ApprovalStatus> {
        match self {
            Error::Domain { approval_status, .. } => *approval_status,
            _ => None,
        }
    }

    /// The execution that consumed the approval, when a refusal says it was consumed.
    pub fn consumed_by_execution_id(&self) -> Option<&str> {
        match self {
            Error::Domain { consumed_by_execution_id, .. } => consumed_by_execution_id.as_deref(),
            _ => None,
        }
    }

    /// Whether retrying the same call (same request id) may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Unavailable(_))
    }

    /// Whether the cluster refused who the caller is (`UNAUTHENTICATED`: no,
    /// bad or expired credentials) or what it may do (`PERMISSION_DENIED`).
    pub fn is_access_refused(&self) -> bool {
        matches!(self, Error::Domain { status: tonic::Code::Unauthenticated | tonic::Code::PermissionDenied, .. })
    }

    /// The error of a failed attempt on `endpoint`: a TLS failure says so
    /// (as `UNAUTHENTICATED`), anything else is the node's answer.
    pub(crate) fn from_attempt(status: &tonic::Status, endpoint: &str) -> Error {
        match crate::credentials::tls_failure(status) {
            Some(failure) => Error::Domain {
                code: "UNAUTHENTICATED".to_string(),
                message: format!("TLS with {endpoint} failed: {failure}"),
                problems: Vec::new(),
                status: tonic::Code::Unauthenticated,
                approval_status: None,
                consumed_by_execution_id: None,
            },
            None => Error::from_status(status),
        }
    }

    pub(crate) fn from_status(status: &tonic::Status) -> Error {
        match read_error_detail(status) {
            Some(detail) => Error::Domain {
                // An unknown status number (a newer server) reads as none.
                approval_status: detail
                    .approval_status
                    .and_then(|value| pb::ApprovalStatus::try_from(value).ok())
                    .filter(|status| *status != pb::ApprovalStatus::Unspecified),
                consumed_by_execution_id: detail.consumed_by_execution_id,
                code: detail.code,
                message: detail.message,
                problems: detail.problems,
                status: status.code(),
            },
            None => Error::Domain {
                code: fallback_code(status.code()),
                message: status.message().to_string(),
                problems: Vec::new(),
                status: status.code(),
                approval_status: None,
                consumed_by_execution_id: None,
            },
        }
    }
}

/// The domain code of a status that carries no detail (one from a proxy, the
/// transport, or the node's authentication layer).
fn fallback_code(code: tonic::Code) -> String {
    match code {
        tonic::Code::Unauthenticated => "UNAUTHENTICATED".to_string(),
        tonic::Code::PermissionDenied => "PERMISSION_DENIED".to_string(),
        other => format!("{other:?}").to_uppercase(),
    }
}
