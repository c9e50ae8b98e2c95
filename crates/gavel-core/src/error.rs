//! Stable domain codes and the refusal a command gets instead of an effect.

use serde::{Deserialize, Serialize};

use crate::model::ApprovalStatus;

/// A stable, documented reason for refusing a request. The string form
/// ([`ErrorCode::as_str`]) is the wire contract; never rename a variant's string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ErrorCode {
    /// A field is missing, malformed, out of range or over a size limit.
    InvalidArgument,
    /// The named record does not exist (approval, execution).
    NotFound,
    /// A record with this id already exists with different content.
    AlreadyExists,
    /// The record is not in a state that allows this transition.
    FailedPrecondition,
    /// The capability named by a submit or approval is not registered.
    CapabilityNotFound,
    /// A capability registration failed validation (all problems listed).
    CapabilityInvalid,
    /// An execution input is not JSON or is over the size limit.
    InputInvalid,
    /// The caller is not authenticated: no credential or a refused one, or
    /// (on an `--insecure` node, which has no credentials) no actor at all.
    /// An actor that is present but ill-formed is `InvalidArgument`.
    Unauthenticated,
    /// The authenticated caller holds no grant that allows this.
    PermissionDenied,
    /// The approver is the requester and the request did not opt out.
    ApprovalSelfApproval,
    /// Resume found the approval still pending.
    ApprovalPending,
    /// Resume found the approval rejected.
    ApprovalRejected,
    /// Resume found the approval cancelled by the application.
    ApprovalCancelled,
    /// The approval (or its post-approval validity) has expired.
    ApprovalExpired,
    /// The approval was already consumed.
    ApprovalConsumed,
    /// The input no longer hashes to the approved input hash.
    ApprovalInputMismatch,
    /// A report or heartbeat named a lease that is not current.
    LeaseLost,
    /// The execution already has its final result.
    ExecutionFinal,
    /// A request id was reused for a different command.
    RequestIdReused,
    /// The caller's principal is over one of its quotas (pending approvals,
    /// non-final executions, or its write rate); the refusal says which.
    QuotaExceeded,
    /// Resume found the approval voided: the policy it was created under
    /// changed or was deleted before it was consumed.
    ApprovalVoided,
    /// A vote on an approval that is no longer pending: it was already
    /// decided (approved, rejected), consumed, cancelled or voided.
    ApprovalDecided,
    /// The principal already has a vote on this approval; withdraw it first.
    VoteDuplicate,
    /// A policy names an approval type or capability another policy governs.
    PolicyConflict,
    /// A decision or vote named a terms hash that is not the approval's:
    /// its author was shown other terms (another approval, or a forged page).
    ApprovalTermsChanged,
    /// A standing approval for a capability whose policy forbids them.
    ApprovalStandingForbidden,
}

impl ErrorCode {
    /// The stable wire string of this code.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidArgument => "INVALID_ARGUMENT",
            ErrorCode::NotFound => "NOT_FOUND",
            ErrorCode::AlreadyExists => "ALREADY_EXISTS",
            ErrorCode::FailedPrecondition => "FAILED_PRECONDITION",
            ErrorCode::CapabilityNotFound => "CAPABILITY_NOT_FOUND",
            ErrorCode::CapabilityInvalid => "CAPABILITY_INVALID",
            ErrorCode::InputInvalid => "INPUT_INVALID",
            ErrorCode::Unauthenticated => "UNAUTHENTICATED",
            ErrorCode::PermissionDenied => "PERMISSION_DENIED",
            ErrorCode::ApprovalSelfApproval => "APPROVAL_SELF_APPROVAL",
            ErrorCode::ApprovalPending => "APPROVAL_PENDING",
            ErrorCode::ApprovalRejected => "APPROVAL_REJECTED",
            ErrorCode::ApprovalCancelled => "APPROVAL_CANCELLED",
            ErrorCode::ApprovalExpired => "APPROVAL_EXPIRED",
            ErrorCode::ApprovalConsumed => "APPROVAL_CONSUMED",
            ErrorCode::ApprovalInputMismatch => "APPROVAL_INPUT_MISMATCH",
            ErrorCode::LeaseLost => "LEASE_LOST",
            ErrorCode::ExecutionFinal => "EXECUTION_FINAL",
            ErrorCode::RequestIdReused => "REQUEST_ID_REUSED",
            ErrorCode::QuotaExceeded => "QUOTA_EXCEEDED",
            ErrorCode::ApprovalVoided => "APPROVAL_VOIDED",
            ErrorCode::ApprovalDecided => "APPROVAL_DECIDED",
            ErrorCode::VoteDuplicate => "VOTE_DUPLICATE",
            ErrorCode::PolicyConflict => "POLICY_CONFLICT",
            ErrorCode::ApprovalTermsChanged => "APPROVAL_TERMS_CHANGED",
            ErrorCode::ApprovalStandingForbidden => "APPROVAL_STANDING_FORBIDDEN",
        }
    }

    /// The coarse class of the refusal, which the gRPC edge maps to a status code.
    pub fn class(self) -> ErrorClass {
        match self {
            ErrorCode::InvalidArgument
            | ErrorCode::CapabilityInvalid
            | ErrorCode::InputInvalid
            | ErrorCode::RequestIdReused => ErrorClass::InvalidArgument,
            ErrorCode::NotFound | ErrorCode::CapabilityNotFound => ErrorClass::NotFound,
            ErrorCode::AlreadyExists => ErrorClass::AlreadyExists,
            ErrorCode::Unauthenticated => ErrorClass::Unauthenticated,
            ErrorCode::ApprovalSelfApproval | ErrorCode::PermissionDenied => ErrorClass::PermissionDenied,
            ErrorCode::FailedPrecondition
            | ErrorCode::ApprovalPending
            | ErrorCode::ApprovalRejected
            | ErrorCode::ApprovalCancelled
            | ErrorCode::ApprovalExpired
            | ErrorCode::ApprovalConsumed
            | ErrorCode::ApprovalInputMismatch
            | ErrorCode::LeaseLost
            | ErrorCode::ExecutionFinal
            | ErrorCode::ApprovalVoided
            | ErrorCode::ApprovalDecided
            | ErrorCode::VoteDuplicate
            | ErrorCode::PolicyConflict
            | ErrorCode::ApprovalTermsChanged
            | ErrorCode::ApprovalStandingForbidden => ErrorClass::FailedPrecondition,
            ErrorCode::QuotaExceeded => ErrorClass::ResourceExhausted,
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Coarse classes of refusal, mirroring the gRPC status codes they map to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// Bad input.
    InvalidArgument,
    /// Unknown record.
    NotFound,
    /// Duplicate record.
    AlreadyExists,
    /// Not authenticated.
    Unauthenticated,
    /// Refused for who is asking.
    PermissionDenied,
    /// Wrong state for the transition.
    FailedPrecondition,
    /// Over a quota of the caller's principal.
    ResourceExhausted,
}

/// A refusal: a stable code, a message a person can act on, and, for
/// validation, every problem found at once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{code}: {message}")]
pub struct DomainError {
    /// The stable code.
    pub code: ErrorCode,
    /// What went wrong, for a person.
    pub message: String,
    /// Every validation problem, when there were several.
    pub problems: Vec<String>,
    /// For a decide, cancel or consume refused because of the approval's
    /// state: that state, so a client can say why without a second read.
    pub approval: Option<RefusedApproval>,
    /// For `QUOTA_EXCEEDED`: which quota, and when a retry may pass.
    #[serde(default)]
    pub quota: Option<RefusedQuota>,
}

/// Which quota of a principal refused a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum QuotaKind {
    /// Its pending approvals are at its quota.
    PendingApprovals,
    /// Its non-final executions are at its quota.
    ActiveExecutions,
    /// Its write token bucket is empty.
    WriteRate,
}

impl QuotaKind {
    /// The stable name (metrics label, CLI): `pending_approvals`,
    /// `active_executions`, `write_rate`.
    pub fn as_str(self) -> &'static str {
        match self {
            QuotaKind::PendingApprovals => "pending_approvals",
            QuotaKind::ActiveExecutions => "active_executions",
            QuotaKind::WriteRate => "write_rate",
        }
    }
}

/// The quota a `QUOTA_EXCEEDED` refusal was about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefusedQuota {
    /// Which quota.
    pub kind: QuotaKind,
    /// For the write rate: milliseconds of cluster time until the bucket
    /// holds a token again. `None` for a count, which only finishing or
    /// cancelling records frees.
    pub retry_after_ms: Option<u64>,
}

/// The state of the approval a refusal was about, when it was refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefusedApproval {
    /// Its status at the command's time, lazy expiry included.
    pub status: ApprovalStatus,
    /// The execution that consumed it, once consumed.
    pub consumed_by_execution_id: Option<String>,
}

impl DomainError {
    /// A refusal with one message and no problem list.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        DomainError { code, message: message.into(), problems: Vec::new(), approval: None, quota: None }
    }

    /// A validation refusal listing every problem found.
    pub fn with_problems(code: ErrorCode, message: impl Into<String>, problems: Vec<String>) -> Self {
        DomainError { code, message: message.into(), problems, approval: None, quota: None }
    }

    /// This refusal, saying which state the approval it is about was in.
    pub fn with_approval(self, approval: RefusedApproval) -> Self {
        DomainError { approval: Some(approval), ..self }
    }

    /// `QUOTA_EXCEEDED` for `kind`, with the retry hint of a rate refusal.
    pub fn quota_exceeded(kind: QuotaKind, retry_after_ms: Option<u64>, message: impl Into<String>) -> Self {
        DomainError {
            quota: Some(RefusedQuota { kind, retry_after_ms }),
            ..DomainError::new(ErrorCode::QuotaExceeded, message)
        }
    }

    /// `INVALID_ARGUMENT` with a message.
    pub fn invalid(message: impl Into<String>) -> Self {
        DomainError::new(ErrorCode::InvalidArgument, message)
    }
}
