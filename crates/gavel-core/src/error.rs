//! Stable domain codes and the refusal a command gets instead of an effect.

use serde::{Deserialize, Serialize};

use crate::model::ApprovalStatus;

/// A stable, documented reason for refusing a request: Gavel's one catalogue
/// of codes (docs/decisions.md, "One error catalogue"). It holds the state
/// machine's refusals and every other code a node, the console, the
/// notifier, the `gavel` CLI or an SDK shows a client or a person; the
/// TypeScript and Python lists and `gavel codes` are made from
/// [`ErrorCode::ALL`]. The string form ([`ErrorCode::as_str`]) is the wire
/// contract; never rename a variant's string.
///
/// Stored replies serialize this enum with bincode, by variant index: a new
/// code is appended at the end and no variant ever moves
/// (`tests/error_catalogue.rs` pins every index).
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
    /// No leader is elected, quorum is lost, or this node is not the leader
    /// (the `leader_hint` says which is); retry after `retry_after_ms`. An
    /// SDK gives it too when no node answered within its retry budget.
    /// `UNAVAILABLE`, class `Unavailable`.
    Unavailable,
    /// An audit cursor older than the retained events or past the last one,
    /// or a proof about a leaf or a size the audit tree has not reached.
    /// `OUT_OF_RANGE`, class `OutOfRange`.
    OutOfRange,
    /// The node is at its bound for this kind of call (proposals, long-polls,
    /// reads), or the console at its bound of sessions or live streams;
    /// retry after `retry_after_ms`. `RESOURCE_EXHAUSTED`, class `ResourceExhausted`.
    ResourceExhausted,
    /// A bug: an answer of a shape that cannot be (a reply without its
    /// record, a proof hash that is not 32 bytes), or a console page that
    /// failed to render. `INTERNAL`, class `Internal`.
    Internal,
    /// Removing the cluster's only voter, which would leave a cluster that
    /// can never elect a leader again. `LAST_VOTER`, class `FailedPrecondition`.
    LastVoter,
    /// A backup asked of a node that is taking one already; retry after
    /// `retry_after_ms`. `BACKUP_RUNNING`, class `ResourceExhausted`.
    BackupRunning,
    /// A backup of a state over `SNAPSHOT_BYTES_MAX`.
    /// `SNAPSHOT_TOO_LARGE`, class `FailedPrecondition`.
    SnapshotTooLarge,
    /// A client SDK refused its own settings before any call: no endpoint,
    /// an endpoint that is not `host:port`, a token a header cannot carry,
    /// unreadable TLS files. `CONFIG`, class `InvalidArgument`.
    Config,
    /// The console: no session cookie, or an unknown or expired session.
    /// `SESSION_REQUIRED`, class `Unauthenticated`.
    SessionRequired,
    /// The console: a form without the session's CSRF token, or with
    /// another. `CSRF_TOKEN_INVALID`, class `PermissionDenied`.
    CsrfTokenInvalid,
    /// The console: a state-changing request whose `Origin` (or
    /// `Sec-Fetch-Site`) is not the console's. `ORIGIN_REFUSED`, class `PermissionDenied`.
    OriginRefused,
    /// The console: a decision or withdrawal form for one approval posted to
    /// another approval's address; nothing was decided.
    /// `APPROVAL_ID_MISMATCH`, class `InvalidArgument`.
    ApprovalIdMismatch,
    /// The console: development sign-in asked of a console started without
    /// it. `DEV_SIGN_IN_DISABLED`, class `PermissionDenied`.
    DevSignInDisabled,
    /// The console: OpenID Connect sign-in asked of a console started
    /// without `--oidc-issuer`. `OIDC_SIGN_IN_DISABLED`, class `PermissionDenied`.
    OidcSignInDisabled,
    /// The console: a sign-in callback whose `state` is unknown, used,
    /// expired or from another browser. `OIDC_STATE_INVALID`, class `InvalidArgument`.
    OidcStateInvalid,
    /// The console: the identity provider sent the person back with an
    /// error instead of signing them in. `OIDC_SIGN_IN_REFUSED`, class `Unauthenticated`.
    OidcSignInRefused,
    /// The console makes another principal from the ID token than the
    /// cluster does: their principal claim settings differ.
    /// `OIDC_PRINCIPAL_MISMATCH`, class `FailedPrecondition`.
    OidcPrincipalMismatch,
    /// An ID token that is not a JWT, or is over `ID_TOKEN_BYTES_MAX`.
    /// `OIDC_TOKEN_MALFORMED`, class `Unauthenticated`.
    OidcTokenMalformed,
    /// An ID token signed with an algorithm other than RS256, ES256 or
    /// EdDSA. `OIDC_ALGORITHM_REFUSED`, class `Unauthenticated`.
    OidcAlgorithmRefused,
    /// An ID token whose `kid` the provider publishes no key for, even after
    /// a refresh. `OIDC_UNKNOWN_KEY`, class `Unauthenticated`.
    OidcUnknownKey,
    /// An ID token whose `kid` names a key of another kind than its `alg`
    /// needs. `OIDC_KEY_MISMATCH`, class `Unauthenticated`.
    OidcKeyMismatch,
    /// An ID token whose signature no provider key verifies.
    /// `OIDC_BAD_SIGNATURE`, class `Unauthenticated`.
    OidcBadSignature,
    /// An ID token whose `iss` is not the configured issuer.
    /// `OIDC_WRONG_ISSUER`, class `Unauthenticated`.
    OidcWrongIssuer,
    /// An ID token whose `aud` does not name the configured audience.
    /// `OIDC_WRONG_AUDIENCE`, class `Unauthenticated`.
    OidcWrongAudience,
    /// An ID token past its `exp`, beyond the clock skew.
    /// `OIDC_TOKEN_EXPIRED`, class `Unauthenticated`.
    OidcTokenExpired,
    /// An ID token whose `nbf` is further ahead than the clock skew.
    /// `OIDC_TOKEN_NOT_YET_VALID`, class `Unauthenticated`.
    OidcTokenNotYetValid,
    /// An ID token whose `iat` is further ahead than the clock skew.
    /// `OIDC_TOKEN_ISSUED_IN_FUTURE`, class `Unauthenticated`.
    OidcTokenIssuedInFuture,
    /// An ID token valid for longer (`exp - iat`) than the token lifetime
    /// cap. `OIDC_TOKEN_LIFETIME_TOO_LONG`, class `Unauthenticated`.
    OidcTokenLifetimeTooLong,
    /// An ID token without a required claim, or with one not of its type.
    /// `OIDC_CLAIM_MISSING`, class `Unauthenticated`.
    OidcClaimMissing,
    /// An ID token whose `nonce` is not the one the sign-in sent.
    /// `OIDC_NONCE_MISMATCH`, class `Unauthenticated`.
    OidcNonceMismatch,
    /// An ID token whose email the provider does not say is verified.
    /// `OIDC_EMAIL_NOT_VERIFIED`, class `Unauthenticated`.
    OidcEmailNotVerified,
    /// An ID token whose principal claim does not make a valid principal.
    /// `OIDC_BAD_PRINCIPAL`, class `Unauthenticated`.
    OidcBadPrincipal,
    /// The OpenID provider could not be reached or answered something
    /// unusable. `OIDC_PROVIDER_UNAVAILABLE`, class `Unavailable`.
    OidcProviderUnavailable,
    /// OpenID Connect settings that cannot be used (an `http` issuer off
    /// loopback, a bad URL, a bad principal prefix). `OIDC_SETTINGS`, class `InvalidArgument`.
    OidcSettings,
    /// The notifier: a wrong flag (a webhook that is not `slack=URL` or
    /// `generic=URL`, a short HMAC secret). `NOTIFY_CONFIG`, class `InvalidArgument`.
    NotifyConfig,
    /// The notifier: its state file could not be read or written.
    /// `NOTIFY_STATE_IO`, class `Unavailable`.
    NotifyStateIo,
    /// The notifier: a state file it did not write (torn, edited, another
    /// version), refused rather than reset. `NOTIFY_STATE_CORRUPT`, class `DataLoss`.
    NotifyStateCorrupt,
    /// The notifier: another notifier holds the state directory.
    /// `NOTIFY_STATE_LOCKED`, class `FailedPrecondition`.
    NotifyStateLocked,
    /// The notifier: more pending approvals in its principal's view than a
    /// listing posts. `NOTIFY_LISTING_TOO_LARGE`, class `FailedPrecondition`.
    NotifyListingTooLarge,
    /// The notifier (a log line): its stored cursor is not in the audit
    /// trail, so it lists the pending approvals again and posts each as a
    /// redelivery. `NOTIFY_CURSOR_DROPPED`, class `OutOfRange`.
    NotifyCursorDropped,
    /// The notifier (a log line): a webhook refused a post for good; it was
    /// skipped. `NOTIFY_POST_REFUSED`, class `FailedPrecondition`.
    NotifyPostRefused,
    /// The notifier (a log line): a post kept failing past its retry limits;
    /// it was skipped. `NOTIFY_POST_ABANDONED`, class `Unavailable`.
    NotifyPostAbandoned,
    /// `gavel cluster remove-node` of a node that is not a member.
    /// `NOT_A_MEMBER`, class `NotFound`.
    NotAMember,
    /// `gavel backup` of a file (`restore`, `inspect`) or a stream (`save`)
    /// that is not a complete, intact backup. `BACKUP_CORRUPT`, class `DataLoss`.
    BackupCorrupt,
    /// `gavel backup restore` into a data directory that holds data.
    /// `DATA_DIR_NOT_EMPTY`, class `FailedPrecondition`.
    DataDirNotEmpty,
    /// `gavel audit verify` or `verify-proof` of evidence that does not
    /// verify. `AUDIT_VERIFICATION_FAILED`, class `DataLoss`.
    AuditVerificationFailed,
    /// The notifier (a log line): its queues hold `QUEUED_APPROVALS_MAX`
    /// approvals, so it reads no further events until they drain (none is
    /// dropped: they wait in the trail). `NOTIFY_QUEUE_FULL`, class `ResourceExhausted`.
    NotifyQueueFull,
    /// A list call asked for more records per page than `LIST_PAGE_MAX`
    /// (`ListApprovals`, `ListExecutions`, `ListEvents`). `PAGE_SIZE_INVALID`,
    /// class `InvalidArgument`.
    PageSizeInvalid,
    /// A list call's page token is not one a page of that list handed out.
    /// `PAGE_TOKEN_INVALID`, class `InvalidArgument`.
    PageTokenInvalid,
    /// `gavel audit verify` of a file whose first line names no export
    /// format, or one this build does not read. `AUDIT_EXPORT_FORMAT_UNKNOWN`,
    /// class `InvalidArgument`.
    AuditExportFormatUnknown,
    /// `gavel audit checkpoint`, `proof` or `export` while no checkpoint the
    /// nodes cosigned covers what was asked (before the first is published,
    /// or an event newer than the last; one comes within about a second).
    /// `AUDIT_CHECKPOINT_UNSIGNED`, class `Unavailable`.
    AuditCheckpointUnsigned,
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
            ErrorCode::Unavailable => "UNAVAILABLE",
            ErrorCode::OutOfRange => "OUT_OF_RANGE",
            ErrorCode::ResourceExhausted => "RESOURCE_EXHAUSTED",
            ErrorCode::Internal => "INTERNAL",
            ErrorCode::LastVoter => "LAST_VOTER",
            ErrorCode::BackupRunning => "BACKUP_RUNNING",
            ErrorCode::SnapshotTooLarge => "SNAPSHOT_TOO_LARGE",
            ErrorCode::Config => "CONFIG",
            ErrorCode::SessionRequired => "SESSION_REQUIRED",
            ErrorCode::CsrfTokenInvalid => "CSRF_TOKEN_INVALID",
            ErrorCode::OriginRefused => "ORIGIN_REFUSED",
            ErrorCode::ApprovalIdMismatch => "APPROVAL_ID_MISMATCH",
            ErrorCode::DevSignInDisabled => "DEV_SIGN_IN_DISABLED",
            ErrorCode::OidcSignInDisabled => "OIDC_SIGN_IN_DISABLED",
            ErrorCode::OidcStateInvalid => "OIDC_STATE_INVALID",
            ErrorCode::OidcSignInRefused => "OIDC_SIGN_IN_REFUSED",
            ErrorCode::OidcPrincipalMismatch => "OIDC_PRINCIPAL_MISMATCH",
            ErrorCode::OidcTokenMalformed => "OIDC_TOKEN_MALFORMED",
            ErrorCode::OidcAlgorithmRefused => "OIDC_ALGORITHM_REFUSED",
            ErrorCode::OidcUnknownKey => "OIDC_UNKNOWN_KEY",
            ErrorCode::OidcKeyMismatch => "OIDC_KEY_MISMATCH",
            ErrorCode::OidcBadSignature => "OIDC_BAD_SIGNATURE",
            ErrorCode::OidcWrongIssuer => "OIDC_WRONG_ISSUER",
            ErrorCode::OidcWrongAudience => "OIDC_WRONG_AUDIENCE",
            ErrorCode::OidcTokenExpired => "OIDC_TOKEN_EXPIRED",
            ErrorCode::OidcTokenNotYetValid => "OIDC_TOKEN_NOT_YET_VALID",
            ErrorCode::OidcTokenIssuedInFuture => "OIDC_TOKEN_ISSUED_IN_FUTURE",
            ErrorCode::OidcTokenLifetimeTooLong => "OIDC_TOKEN_LIFETIME_TOO_LONG",
            ErrorCode::OidcClaimMissing => "OIDC_CLAIM_MISSING",
            ErrorCode::OidcNonceMismatch => "OIDC_NONCE_MISMATCH",
            ErrorCode::OidcEmailNotVerified => "OIDC_EMAIL_NOT_VERIFIED",
            ErrorCode::OidcBadPrincipal => "OIDC_BAD_PRINCIPAL",
            ErrorCode::OidcProviderUnavailable => "OIDC_PROVIDER_UNAVAILABLE",
            ErrorCode::OidcSettings => "OIDC_SETTINGS",
            ErrorCode::NotifyConfig => "NOTIFY_CONFIG",
            ErrorCode::NotifyStateIo => "NOTIFY_STATE_IO",
            ErrorCode::NotifyStateCorrupt => "NOTIFY_STATE_CORRUPT",
            ErrorCode::NotifyStateLocked => "NOTIFY_STATE_LOCKED",
            ErrorCode::NotifyListingTooLarge => "NOTIFY_LISTING_TOO_LARGE",
            ErrorCode::NotifyCursorDropped => "NOTIFY_CURSOR_DROPPED",
            ErrorCode::NotifyPostRefused => "NOTIFY_POST_REFUSED",
            ErrorCode::NotifyPostAbandoned => "NOTIFY_POST_ABANDONED",
            ErrorCode::NotAMember => "NOT_A_MEMBER",
            ErrorCode::BackupCorrupt => "BACKUP_CORRUPT",
            ErrorCode::DataDirNotEmpty => "DATA_DIR_NOT_EMPTY",
            ErrorCode::AuditVerificationFailed => "AUDIT_VERIFICATION_FAILED",
            ErrorCode::NotifyQueueFull => "NOTIFY_QUEUE_FULL",
            ErrorCode::PageSizeInvalid => "PAGE_SIZE_INVALID",
            ErrorCode::PageTokenInvalid => "PAGE_TOKEN_INVALID",
            ErrorCode::AuditExportFormatUnknown => "AUDIT_EXPORT_FORMAT_UNKNOWN",
            ErrorCode::AuditCheckpointUnsigned => "AUDIT_CHECKPOINT_UNSIGNED",
        }
    }

    /// The code whose wire string is `code` (`"LEASE_LOST"`), if it is one
    /// of the catalogue's.
    pub fn from_wire(code: &str) -> Option<ErrorCode> {
        ErrorCode::ALL.iter().copied().find(|known| known.as_str() == code)
    }

    /// The coarse class of the refusal, which the gRPC edge maps to a status code.
    pub fn class(self) -> ErrorClass {
        match self {
            ErrorCode::InvalidArgument
            | ErrorCode::CapabilityInvalid
            | ErrorCode::InputInvalid
            | ErrorCode::RequestIdReused
            | ErrorCode::Config
            | ErrorCode::ApprovalIdMismatch
            | ErrorCode::OidcStateInvalid
            | ErrorCode::OidcSettings
            | ErrorCode::NotifyConfig
            | ErrorCode::PageSizeInvalid
            | ErrorCode::PageTokenInvalid
            | ErrorCode::AuditExportFormatUnknown => ErrorClass::InvalidArgument,
            ErrorCode::NotFound | ErrorCode::CapabilityNotFound | ErrorCode::NotAMember => ErrorClass::NotFound,
            ErrorCode::AlreadyExists => ErrorClass::AlreadyExists,
            ErrorCode::Unauthenticated
            | ErrorCode::SessionRequired
            | ErrorCode::OidcSignInRefused
            | ErrorCode::OidcTokenMalformed
            | ErrorCode::OidcAlgorithmRefused
            | ErrorCode::OidcUnknownKey
            | ErrorCode::OidcKeyMismatch
            | ErrorCode::OidcBadSignature
            | ErrorCode::OidcWrongIssuer
            | ErrorCode::OidcWrongAudience
            | ErrorCode::OidcTokenExpired
            | ErrorCode::OidcTokenNotYetValid
            | ErrorCode::OidcTokenIssuedInFuture
            | ErrorCode::OidcTokenLifetimeTooLong
            | ErrorCode::OidcClaimMissing
            | ErrorCode::OidcNonceMismatch
            | ErrorCode::OidcEmailNotVerified
            | ErrorCode::OidcBadPrincipal => ErrorClass::Unauthenticated,
            ErrorCode::ApprovalSelfApproval
            | ErrorCode::PermissionDenied
            | ErrorCode::CsrfTokenInvalid
            | ErrorCode::OriginRefused
            | ErrorCode::DevSignInDisabled
            | ErrorCode::OidcSignInDisabled => ErrorClass::PermissionDenied,
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
            | ErrorCode::ApprovalStandingForbidden
            | ErrorCode::LastVoter
            | ErrorCode::SnapshotTooLarge
            | ErrorCode::OidcPrincipalMismatch
            | ErrorCode::NotifyStateLocked
            | ErrorCode::NotifyListingTooLarge
            | ErrorCode::NotifyPostRefused
            | ErrorCode::DataDirNotEmpty => ErrorClass::FailedPrecondition,
            ErrorCode::QuotaExceeded
            | ErrorCode::ResourceExhausted
            | ErrorCode::BackupRunning
            | ErrorCode::NotifyQueueFull => ErrorClass::ResourceExhausted,
            ErrorCode::OutOfRange | ErrorCode::NotifyCursorDropped => ErrorClass::OutOfRange,
            ErrorCode::Unavailable
            | ErrorCode::OidcProviderUnavailable
            | ErrorCode::NotifyStateIo
            | ErrorCode::NotifyPostAbandoned
            | ErrorCode::AuditCheckpointUnsigned => ErrorClass::Unavailable,
            ErrorCode::Internal => ErrorClass::Internal,
            ErrorCode::NotifyStateCorrupt | ErrorCode::BackupCorrupt | ErrorCode::AuditVerificationFailed => {
                ErrorClass::DataLoss
            }
        }
    }

    /// One line for a person: when a refusal carries this code. The
    /// TypeScript and Python lists, `gavel codes` and docs/api.md show it.
    pub fn description(self) -> &'static str {
        match self {
            ErrorCode::InvalidArgument => "a field is missing, malformed, out of range or over a size limit",
            ErrorCode::NotFound => "the record acted on does not exist, or is not the caller's to read",
            ErrorCode::AlreadyExists => "a record with this id already exists with different content",
            ErrorCode::FailedPrecondition => "the record is not in a state that allows this transition",
            ErrorCode::CapabilityNotFound => "the capability named by a submit or an approval is not registered",
            ErrorCode::CapabilityInvalid => "a capability registration failed validation; every problem is listed",
            ErrorCode::InputInvalid => "an execution input is not I-JSON or is over the size limit",
            ErrorCode::Unauthenticated => "no credential, or a refused one (on an --insecure node: no actor)",
            ErrorCode::PermissionDenied => "the caller holds no grant that allows this",
            ErrorCode::ApprovalSelfApproval => "the approver is the requester and the request did not opt out",
            ErrorCode::ApprovalPending => "resume found the approval still pending",
            ErrorCode::ApprovalRejected => "resume found the approval rejected",
            ErrorCode::ApprovalCancelled => "resume found the approval cancelled by the application",
            ErrorCode::ApprovalExpired => "the approval, or its validity after approval, has expired",
            ErrorCode::ApprovalConsumed => "the approval was already consumed",
            ErrorCode::ApprovalInputMismatch => "the input no longer hashes to the approved input hash",
            ErrorCode::LeaseLost => "a report or heartbeat named a lease that is not current",
            ErrorCode::ExecutionFinal => "the execution already has its final result",
            ErrorCode::RequestIdReused => "a request id was reused for a different command",
            ErrorCode::QuotaExceeded => "the caller's principal is over one of its quotas (quota_kind says which)",
            ErrorCode::ApprovalVoided => "the policy the approval was created under changed or was deleted",
            ErrorCode::ApprovalDecided => "a vote or withdrawal on an approval that is no longer pending",
            ErrorCode::VoteDuplicate => "the principal already has a vote on this approval; withdraw it first",
            ErrorCode::PolicyConflict => "a policy names an approval type or capability another policy governs",
            ErrorCode::ApprovalTermsChanged => "a decision or vote named terms that are not the approval's",
            ErrorCode::ApprovalStandingForbidden => "a standing approval for a capability whose policy forbids them",
            ErrorCode::Unavailable => "no leader or no quorum, or no node answered; retry after retry_after_ms",
            ErrorCode::OutOfRange => "an audit cursor, leaf or tree size outside what the trail holds",
            ErrorCode::ResourceExhausted => "the node (or console) is at its bound for this kind of call; retry later",
            ErrorCode::Internal => "a bug: an answer of a shape that cannot be, or a page that failed to render",
            ErrorCode::LastVoter => "removing the last voter would leave a cluster that cannot elect a leader",
            ErrorCode::BackupRunning => "the node is taking another backup; retry after retry_after_ms",
            ErrorCode::SnapshotTooLarge => "a backup of a state over SNAPSHOT_BYTES_MAX",
            ErrorCode::Config => "a client SDK refused its own settings before any call",
            ErrorCode::SessionRequired => "console: sign in first (no session, or an expired one)",
            ErrorCode::CsrfTokenInvalid => "console: the form's CSRF token is missing or wrong",
            ErrorCode::OriginRefused => "console: the request came from another origin",
            ErrorCode::ApprovalIdMismatch => "console: a form for one approval was posted to another's address",
            ErrorCode::DevSignInDisabled => "console: this console has no development sign-in",
            ErrorCode::OidcSignInDisabled => "console: this console has no OpenID Connect sign-in",
            ErrorCode::OidcStateInvalid => "console: the sign-in expired, was used, or began in another browser",
            ErrorCode::OidcSignInRefused => "console: the identity provider did not sign the person in",
            ErrorCode::OidcPrincipalMismatch => "console and cluster make different principals from the ID token",
            ErrorCode::OidcTokenMalformed => "the ID token is not a JWT, or is too large",
            ErrorCode::OidcAlgorithmRefused => "the ID token's algorithm is not RS256, ES256 or EdDSA",
            ErrorCode::OidcUnknownKey => "the provider publishes no signing key with the ID token's kid",
            ErrorCode::OidcKeyMismatch => "the key the ID token's kid names cannot verify its algorithm",
            ErrorCode::OidcBadSignature => "the ID token's signature does not verify",
            ErrorCode::OidcWrongIssuer => "the ID token's iss is not the configured issuer",
            ErrorCode::OidcWrongAudience => "the ID token's aud does not name the configured audience",
            ErrorCode::OidcTokenExpired => "the ID token has expired",
            ErrorCode::OidcTokenNotYetValid => "the ID token is not valid yet (nbf)",
            ErrorCode::OidcTokenIssuedInFuture => "the ID token claims to be issued in the future (iat)",
            ErrorCode::OidcTokenLifetimeTooLong => "the ID token lives longer than the token lifetime cap",
            ErrorCode::OidcClaimMissing => "a required ID token claim is missing or malformed",
            ErrorCode::OidcNonceMismatch => "the ID token's nonce is not the sign-in's",
            ErrorCode::OidcEmailNotVerified => "the provider does not say the ID token's email is verified",
            ErrorCode::OidcBadPrincipal => "the ID token's principal claim does not make a valid principal",
            ErrorCode::OidcProviderUnavailable => "the OpenID provider could not be reached or answered garbage",
            ErrorCode::OidcSettings => "the OpenID Connect settings cannot be used",
            ErrorCode::NotifyConfig => "notifier: a wrong flag (webhook, URL or HMAC secret)",
            ErrorCode::NotifyStateIo => "notifier: the state file could not be read or written",
            ErrorCode::NotifyStateCorrupt => "notifier: the state file is not one it wrote; refused, not reset",
            ErrorCode::NotifyStateLocked => "notifier: another notifier holds the state directory",
            ErrorCode::NotifyListingTooLarge => "notifier: too many pending approvals to list; narrow its grant",
            ErrorCode::NotifyCursorDropped => "notifier log: the cursor left the trail; pending approvals re-posted",
            ErrorCode::NotifyPostRefused => "notifier log: a webhook refused a post for good; it was skipped",
            ErrorCode::NotifyPostAbandoned => "notifier log: a post kept failing past its retry limits; skipped",
            ErrorCode::NotAMember => "CLI: the node to remove is not a member of the cluster",
            ErrorCode::BackupCorrupt => "CLI: the backup file or stream is not a complete, intact backup",
            ErrorCode::DataDirNotEmpty => "CLI: a backup is restored only into an empty data directory",
            ErrorCode::AuditVerificationFailed => "CLI: the audit export or proof does not verify",
            ErrorCode::NotifyQueueFull => "notifier log: its queues are full; it reads no events until they drain",
            ErrorCode::PageSizeInvalid => "a list's page size is above its limit (1000)",
            ErrorCode::PageTokenInvalid => "a list's page token is not one that list handed out",
            ErrorCode::AuditExportFormatUnknown => "CLI: the file is not an audit export in a format this gavel reads",
            ErrorCode::AuditCheckpointUnsigned => {
                "CLI: no checkpoint the nodes cosigned covers it yet; try again shortly"
            }
        }
    }

    /// Every code, in declaration order (which is also bincode's order).
    pub const ALL: &'static [ErrorCode] = &[
        ErrorCode::InvalidArgument,
        ErrorCode::NotFound,
        ErrorCode::AlreadyExists,
        ErrorCode::FailedPrecondition,
        ErrorCode::CapabilityNotFound,
        ErrorCode::CapabilityInvalid,
        ErrorCode::InputInvalid,
        ErrorCode::Unauthenticated,
        ErrorCode::PermissionDenied,
        ErrorCode::ApprovalSelfApproval,
        ErrorCode::ApprovalPending,
        ErrorCode::ApprovalRejected,
        ErrorCode::ApprovalCancelled,
        ErrorCode::ApprovalExpired,
        ErrorCode::ApprovalConsumed,
        ErrorCode::ApprovalInputMismatch,
        ErrorCode::LeaseLost,
        ErrorCode::ExecutionFinal,
        ErrorCode::RequestIdReused,
        ErrorCode::QuotaExceeded,
        ErrorCode::ApprovalVoided,
        ErrorCode::ApprovalDecided,
        ErrorCode::VoteDuplicate,
        ErrorCode::PolicyConflict,
        ErrorCode::ApprovalTermsChanged,
        ErrorCode::ApprovalStandingForbidden,
        ErrorCode::Unavailable,
        ErrorCode::OutOfRange,
        ErrorCode::ResourceExhausted,
        ErrorCode::Internal,
        ErrorCode::LastVoter,
        ErrorCode::BackupRunning,
        ErrorCode::SnapshotTooLarge,
        ErrorCode::Config,
        ErrorCode::SessionRequired,
        ErrorCode::CsrfTokenInvalid,
        ErrorCode::OriginRefused,
        ErrorCode::ApprovalIdMismatch,
        ErrorCode::DevSignInDisabled,
        ErrorCode::OidcSignInDisabled,
        ErrorCode::OidcStateInvalid,
        ErrorCode::OidcSignInRefused,
        ErrorCode::OidcPrincipalMismatch,
        ErrorCode::OidcTokenMalformed,
        ErrorCode::OidcAlgorithmRefused,
        ErrorCode::OidcUnknownKey,
        ErrorCode::OidcKeyMismatch,
        ErrorCode::OidcBadSignature,
        ErrorCode::OidcWrongIssuer,
        ErrorCode::OidcWrongAudience,
        ErrorCode::OidcTokenExpired,
        ErrorCode::OidcTokenNotYetValid,
        ErrorCode::OidcTokenIssuedInFuture,
        ErrorCode::OidcTokenLifetimeTooLong,
        ErrorCode::OidcClaimMissing,
        ErrorCode::OidcNonceMismatch,
        ErrorCode::OidcEmailNotVerified,
        ErrorCode::OidcBadPrincipal,
        ErrorCode::OidcProviderUnavailable,
        ErrorCode::OidcSettings,
        ErrorCode::NotifyConfig,
        ErrorCode::NotifyStateIo,
        ErrorCode::NotifyStateCorrupt,
        ErrorCode::NotifyStateLocked,
        ErrorCode::NotifyListingTooLarge,
        ErrorCode::NotifyCursorDropped,
        ErrorCode::NotifyPostRefused,
        ErrorCode::NotifyPostAbandoned,
        ErrorCode::NotAMember,
        ErrorCode::BackupCorrupt,
        ErrorCode::DataDirNotEmpty,
        ErrorCode::AuditVerificationFailed,
        ErrorCode::NotifyQueueFull,
        ErrorCode::PageSizeInvalid,
        ErrorCode::PageTokenInvalid,
        ErrorCode::AuditExportFormatUnknown,
        ErrorCode::AuditCheckpointUnsigned,
    ];
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Coarse classes of refusal, mirroring the gRPC status codes they map to.
/// A code that never travels as a gRPC status (the console's, the CLI's,
/// the notifier's) has the class of the status it would be.
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
    /// Over a quota of the caller's principal, or a bound of the node.
    ResourceExhausted,
    /// Outside the range a record holds (an audit cursor, a tree size).
    OutOfRange,
    /// Not now: no leader, no quorum, an unreachable dependency; retrying may pass.
    Unavailable,
    /// A bug.
    Internal,
    /// Data that is corrupt or does not verify.
    DataLoss,
}

impl ErrorClass {
    /// The canonical name of the gRPC status code (`FAILED_PRECONDITION`).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::InvalidArgument => "INVALID_ARGUMENT",
            ErrorClass::NotFound => "NOT_FOUND",
            ErrorClass::AlreadyExists => "ALREADY_EXISTS",
            ErrorClass::Unauthenticated => "UNAUTHENTICATED",
            ErrorClass::PermissionDenied => "PERMISSION_DENIED",
            ErrorClass::FailedPrecondition => "FAILED_PRECONDITION",
            ErrorClass::ResourceExhausted => "RESOURCE_EXHAUSTED",
            ErrorClass::OutOfRange => "OUT_OF_RANGE",
            ErrorClass::Unavailable => "UNAVAILABLE",
            ErrorClass::Internal => "INTERNAL",
            ErrorClass::DataLoss => "DATA_LOSS",
        }
    }
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
