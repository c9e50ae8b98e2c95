//! The notifier's errors, each with a stable code for logs and exit messages.

use std::path::{Path, PathBuf};

/// Why the notifier stopped or refused its configuration.
#[derive(Debug, thiserror::Error)]
pub enum NotifyError {
    /// A flag is wrong: a webhook that is not `slack=URL` or `generic=URL`,
    /// a URL that is not http(s), a missing or short HMAC secret.
    #[error("{0}")]
    Config(String),
    /// The state file could not be read or written.
    #[error("state file {path}: {action}: {source}")]
    State {
        /// The file or directory.
        path: PathBuf,
        /// What was being done.
        action: &'static str,
        /// The IO error.
        source: std::io::Error,
    },
    /// The state file is not one this notifier wrote (torn, edited, another
    /// version); it is refused rather than reset, which would post again.
    #[error("state file {path} cannot be read back: {reason}")]
    StateCorrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// Another notifier runs on the same state directory.
    #[error("another notifier holds the state directory {0}; run one notifier per state directory")]
    StateLocked(PathBuf),
    /// More pending approvals in the principal's view than a listing posts
    /// ([`crate::limits::LISTED_APPROVALS_MAX`]).
    #[error("more than {0} pending approvals to list; narrow the notifier's grant (an approver scope)")]
    ListingTooLarge(usize),
    /// The cluster refused a call or stayed unreachable.
    #[error(transparent)]
    Cluster(#[from] gavel_client::Error),
}

impl NotifyError {
    /// A state-file IO error.
    pub(crate) fn state(path: &Path, action: &'static str, source: std::io::Error) -> NotifyError {
        NotifyError::State { path: path.to_path_buf(), action, source }
    }

    /// The stable code: `NOTIFY_CONFIG`, `NOTIFY_STATE_IO`,
    /// `NOTIFY_STATE_CORRUPT`, `NOTIFY_STATE_LOCKED`, `NOTIFY_LISTING_TOO_LARGE`, or the cluster's
    /// domain code.
    ///
    /// Every code is one of gavel-core's catalogue (`ErrorCode`); this crate
    /// may not depend on gavel-core, so they are literals, which
    /// `crates/gavel-core/tests/error_catalogue.rs` holds to the catalogue.
    pub fn code(&self) -> &str {
        match self {
            NotifyError::Config(_) => "NOTIFY_CONFIG",
            NotifyError::State { .. } => "NOTIFY_STATE_IO",
            NotifyError::StateCorrupt { .. } => "NOTIFY_STATE_CORRUPT",
            NotifyError::StateLocked(_) => "NOTIFY_STATE_LOCKED",
            NotifyError::ListingTooLarge(_) => "NOTIFY_LISTING_TOO_LARGE",
            NotifyError::Cluster(error) => error.code(),
        }
    }
}
