//! The SDK's error type.

use gavel_proto::error_detail::read_error_detail;

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

    /// Whether retrying the same call (same request id) may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Unavailable(_))
    }

    pub(crate) fn from_status(status: &tonic::Status) -> Error {
        match read_error_detail(status) {
            Some(detail) => Error::Domain {
                code: detail.code,
                message: detail.message,
                problems: detail.problems,
                status: status.code(),
            },
            None => Error::Domain {
                code: format!("{:?}", status.code()).to_uppercase(),
                message: status.message().to_string(),
                problems: Vec::new(),
                status: status.code(),
            },
        }
    }
}
