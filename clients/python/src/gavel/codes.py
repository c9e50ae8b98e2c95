"""Gavel's stable codes: every code a node, the console, the notifier, the
``gavel`` CLI or an SDK refuses with, the gRPC status class it belongs to and
one line saying when it happens. ``GavelError.code`` is one of them (or a code
newer than this package: act on the gRPC status code then).

Generated from the catalogue in crates/gavel-core/src/error.rs by
crates/gavel-core/tests/error_catalogue.rs; do not edit. After changing
the catalogue, write it again with
``GAVEL_WRITE_CODES=1 cargo test --offline --manifest-path crates/gavel-core/Cargo.toml --test error_catalogue``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Literal, NamedTuple

#: Every code of the catalogue.
GavelCode = Literal[
    "INVALID_ARGUMENT",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "FAILED_PRECONDITION",
    "CAPABILITY_NOT_FOUND",
    "CAPABILITY_INVALID",
    "INPUT_INVALID",
    "UNAUTHENTICATED",
    "PERMISSION_DENIED",
    "APPROVAL_SELF_APPROVAL",
    "APPROVAL_PENDING",
    "APPROVAL_REJECTED",
    "APPROVAL_CANCELLED",
    "APPROVAL_EXPIRED",
    "APPROVAL_CONSUMED",
    "APPROVAL_INPUT_MISMATCH",
    "LEASE_LOST",
    "EXECUTION_FINAL",
    "REQUEST_ID_REUSED",
    "QUOTA_EXCEEDED",
    "APPROVAL_VOIDED",
    "APPROVAL_DECIDED",
    "VOTE_DUPLICATE",
    "POLICY_CONFLICT",
    "APPROVAL_TERMS_CHANGED",
    "APPROVAL_STANDING_FORBIDDEN",
    "UNAVAILABLE",
    "OUT_OF_RANGE",
    "RESOURCE_EXHAUSTED",
    "INTERNAL",
    "LAST_VOTER",
    "BACKUP_RUNNING",
    "SNAPSHOT_TOO_LARGE",
    "CONFIG",
    "SESSION_REQUIRED",
    "CSRF_TOKEN_INVALID",
    "ORIGIN_REFUSED",
    "APPROVAL_ID_MISMATCH",
    "DEV_SIGN_IN_DISABLED",
    "OIDC_SIGN_IN_DISABLED",
    "OIDC_STATE_INVALID",
    "OIDC_SIGN_IN_REFUSED",
    "OIDC_PRINCIPAL_MISMATCH",
    "OIDC_TOKEN_MALFORMED",
    "OIDC_ALGORITHM_REFUSED",
    "OIDC_UNKNOWN_KEY",
    "OIDC_KEY_MISMATCH",
    "OIDC_BAD_SIGNATURE",
    "OIDC_WRONG_ISSUER",
    "OIDC_WRONG_AUDIENCE",
    "OIDC_TOKEN_EXPIRED",
    "OIDC_TOKEN_NOT_YET_VALID",
    "OIDC_TOKEN_ISSUED_IN_FUTURE",
    "OIDC_TOKEN_LIFETIME_TOO_LONG",
    "OIDC_CLAIM_MISSING",
    "OIDC_NONCE_MISMATCH",
    "OIDC_EMAIL_NOT_VERIFIED",
    "OIDC_BAD_PRINCIPAL",
    "OIDC_PROVIDER_UNAVAILABLE",
    "OIDC_SETTINGS",
    "NOTIFY_CONFIG",
    "NOTIFY_STATE_IO",
    "NOTIFY_STATE_CORRUPT",
    "NOTIFY_STATE_LOCKED",
    "NOTIFY_LISTING_TOO_LARGE",
    "NOTIFY_CURSOR_DROPPED",
    "NOTIFY_POST_REFUSED",
    "NOTIFY_POST_ABANDONED",
    "NOT_A_MEMBER",
    "BACKUP_CORRUPT",
    "DATA_DIR_NOT_EMPTY",
    "AUDIT_VERIFICATION_FAILED",
    "NOTIFY_QUEUE_FULL",
    "PAGE_SIZE_INVALID",
    "PAGE_TOKEN_INVALID",
    "AUDIT_EXPORT_FORMAT_UNKNOWN",
    "AUDIT_CHECKPOINT_UNSIGNED",
]


class CodeInfo(NamedTuple):
    """What a code means."""

    #: The gRPC status code (its canonical name) a refusal with the code carries, or would.
    grpc_class: str
    #: When a refusal carries the code, for a person.
    description: str


INVALID_ARGUMENT: Final = "INVALID_ARGUMENT"
NOT_FOUND: Final = "NOT_FOUND"
ALREADY_EXISTS: Final = "ALREADY_EXISTS"
FAILED_PRECONDITION: Final = "FAILED_PRECONDITION"
CAPABILITY_NOT_FOUND: Final = "CAPABILITY_NOT_FOUND"
CAPABILITY_INVALID: Final = "CAPABILITY_INVALID"
INPUT_INVALID: Final = "INPUT_INVALID"
UNAUTHENTICATED: Final = "UNAUTHENTICATED"
PERMISSION_DENIED: Final = "PERMISSION_DENIED"
APPROVAL_SELF_APPROVAL: Final = "APPROVAL_SELF_APPROVAL"
APPROVAL_PENDING: Final = "APPROVAL_PENDING"
APPROVAL_REJECTED: Final = "APPROVAL_REJECTED"
APPROVAL_CANCELLED: Final = "APPROVAL_CANCELLED"
APPROVAL_EXPIRED: Final = "APPROVAL_EXPIRED"
APPROVAL_CONSUMED: Final = "APPROVAL_CONSUMED"
APPROVAL_INPUT_MISMATCH: Final = "APPROVAL_INPUT_MISMATCH"
LEASE_LOST: Final = "LEASE_LOST"
EXECUTION_FINAL: Final = "EXECUTION_FINAL"
REQUEST_ID_REUSED: Final = "REQUEST_ID_REUSED"
QUOTA_EXCEEDED: Final = "QUOTA_EXCEEDED"
APPROVAL_VOIDED: Final = "APPROVAL_VOIDED"
APPROVAL_DECIDED: Final = "APPROVAL_DECIDED"
VOTE_DUPLICATE: Final = "VOTE_DUPLICATE"
POLICY_CONFLICT: Final = "POLICY_CONFLICT"
APPROVAL_TERMS_CHANGED: Final = "APPROVAL_TERMS_CHANGED"
APPROVAL_STANDING_FORBIDDEN: Final = "APPROVAL_STANDING_FORBIDDEN"
UNAVAILABLE: Final = "UNAVAILABLE"
OUT_OF_RANGE: Final = "OUT_OF_RANGE"
RESOURCE_EXHAUSTED: Final = "RESOURCE_EXHAUSTED"
INTERNAL: Final = "INTERNAL"
LAST_VOTER: Final = "LAST_VOTER"
BACKUP_RUNNING: Final = "BACKUP_RUNNING"
SNAPSHOT_TOO_LARGE: Final = "SNAPSHOT_TOO_LARGE"
CONFIG: Final = "CONFIG"
SESSION_REQUIRED: Final = "SESSION_REQUIRED"
CSRF_TOKEN_INVALID: Final = "CSRF_TOKEN_INVALID"
ORIGIN_REFUSED: Final = "ORIGIN_REFUSED"
APPROVAL_ID_MISMATCH: Final = "APPROVAL_ID_MISMATCH"
DEV_SIGN_IN_DISABLED: Final = "DEV_SIGN_IN_DISABLED"
OIDC_SIGN_IN_DISABLED: Final = "OIDC_SIGN_IN_DISABLED"
OIDC_STATE_INVALID: Final = "OIDC_STATE_INVALID"
OIDC_SIGN_IN_REFUSED: Final = "OIDC_SIGN_IN_REFUSED"
OIDC_PRINCIPAL_MISMATCH: Final = "OIDC_PRINCIPAL_MISMATCH"
OIDC_TOKEN_MALFORMED: Final = "OIDC_TOKEN_MALFORMED"
OIDC_ALGORITHM_REFUSED: Final = "OIDC_ALGORITHM_REFUSED"
OIDC_UNKNOWN_KEY: Final = "OIDC_UNKNOWN_KEY"
OIDC_KEY_MISMATCH: Final = "OIDC_KEY_MISMATCH"
OIDC_BAD_SIGNATURE: Final = "OIDC_BAD_SIGNATURE"
OIDC_WRONG_ISSUER: Final = "OIDC_WRONG_ISSUER"
OIDC_WRONG_AUDIENCE: Final = "OIDC_WRONG_AUDIENCE"
OIDC_TOKEN_EXPIRED: Final = "OIDC_TOKEN_EXPIRED"
OIDC_TOKEN_NOT_YET_VALID: Final = "OIDC_TOKEN_NOT_YET_VALID"
OIDC_TOKEN_ISSUED_IN_FUTURE: Final = "OIDC_TOKEN_ISSUED_IN_FUTURE"
OIDC_TOKEN_LIFETIME_TOO_LONG: Final = "OIDC_TOKEN_LIFETIME_TOO_LONG"
OIDC_CLAIM_MISSING: Final = "OIDC_CLAIM_MISSING"
OIDC_NONCE_MISMATCH: Final = "OIDC_NONCE_MISMATCH"
OIDC_EMAIL_NOT_VERIFIED: Final = "OIDC_EMAIL_NOT_VERIFIED"
OIDC_BAD_PRINCIPAL: Final = "OIDC_BAD_PRINCIPAL"
OIDC_PROVIDER_UNAVAILABLE: Final = "OIDC_PROVIDER_UNAVAILABLE"
OIDC_SETTINGS: Final = "OIDC_SETTINGS"
NOTIFY_CONFIG: Final = "NOTIFY_CONFIG"
NOTIFY_STATE_IO: Final = "NOTIFY_STATE_IO"
NOTIFY_STATE_CORRUPT: Final = "NOTIFY_STATE_CORRUPT"
NOTIFY_STATE_LOCKED: Final = "NOTIFY_STATE_LOCKED"
NOTIFY_LISTING_TOO_LARGE: Final = "NOTIFY_LISTING_TOO_LARGE"
NOTIFY_CURSOR_DROPPED: Final = "NOTIFY_CURSOR_DROPPED"
NOTIFY_POST_REFUSED: Final = "NOTIFY_POST_REFUSED"
NOTIFY_POST_ABANDONED: Final = "NOTIFY_POST_ABANDONED"
NOT_A_MEMBER: Final = "NOT_A_MEMBER"
BACKUP_CORRUPT: Final = "BACKUP_CORRUPT"
DATA_DIR_NOT_EMPTY: Final = "DATA_DIR_NOT_EMPTY"
AUDIT_VERIFICATION_FAILED: Final = "AUDIT_VERIFICATION_FAILED"
NOTIFY_QUEUE_FULL: Final = "NOTIFY_QUEUE_FULL"
PAGE_SIZE_INVALID: Final = "PAGE_SIZE_INVALID"
PAGE_TOKEN_INVALID: Final = "PAGE_TOKEN_INVALID"
AUDIT_EXPORT_FORMAT_UNKNOWN: Final = "AUDIT_EXPORT_FORMAT_UNKNOWN"
AUDIT_CHECKPOINT_UNSIGNED: Final = "AUDIT_CHECKPOINT_UNSIGNED"

#: Every code with its class and description, in the catalogue's order.
CODES: Final[Mapping[GavelCode, CodeInfo]] = {
    INVALID_ARGUMENT: CodeInfo(
        "INVALID_ARGUMENT",
        "a field is missing, malformed, out of range or over a size limit",
    ),
    NOT_FOUND: CodeInfo(
        "NOT_FOUND",
        "the record acted on does not exist, or is not the caller's to read",
    ),
    ALREADY_EXISTS: CodeInfo(
        "ALREADY_EXISTS",
        "a record with this id already exists with different content",
    ),
    FAILED_PRECONDITION: CodeInfo(
        "FAILED_PRECONDITION",
        "the record is not in a state that allows this transition",
    ),
    CAPABILITY_NOT_FOUND: CodeInfo(
        "NOT_FOUND",
        "the capability named by a submit or an approval is not registered",
    ),
    CAPABILITY_INVALID: CodeInfo(
        "INVALID_ARGUMENT",
        "a capability registration failed validation; every problem is listed",
    ),
    INPUT_INVALID: CodeInfo(
        "INVALID_ARGUMENT",
        "an execution input is not I-JSON or is over the size limit",
    ),
    UNAUTHENTICATED: CodeInfo(
        "UNAUTHENTICATED",
        "no credential, or a refused one (on an --insecure node: no actor)",
    ),
    PERMISSION_DENIED: CodeInfo(
        "PERMISSION_DENIED",
        "the caller holds no grant that allows this",
    ),
    APPROVAL_SELF_APPROVAL: CodeInfo(
        "PERMISSION_DENIED",
        "the approver is the requester and the request did not opt out",
    ),
    APPROVAL_PENDING: CodeInfo(
        "FAILED_PRECONDITION",
        "resume found the approval still pending",
    ),
    APPROVAL_REJECTED: CodeInfo(
        "FAILED_PRECONDITION",
        "resume found the approval rejected",
    ),
    APPROVAL_CANCELLED: CodeInfo(
        "FAILED_PRECONDITION",
        "resume found the approval cancelled by the application",
    ),
    APPROVAL_EXPIRED: CodeInfo(
        "FAILED_PRECONDITION",
        "the approval, or its validity after approval, has expired",
    ),
    APPROVAL_CONSUMED: CodeInfo(
        "FAILED_PRECONDITION",
        "the approval was already consumed",
    ),
    APPROVAL_INPUT_MISMATCH: CodeInfo(
        "FAILED_PRECONDITION",
        "the input no longer hashes to the approved input hash",
    ),
    LEASE_LOST: CodeInfo(
        "FAILED_PRECONDITION",
        "a report or heartbeat named a lease that is not current",
    ),
    EXECUTION_FINAL: CodeInfo(
        "FAILED_PRECONDITION",
        "the execution already has its final result",
    ),
    REQUEST_ID_REUSED: CodeInfo(
        "INVALID_ARGUMENT",
        "a request id was reused for a different command",
    ),
    QUOTA_EXCEEDED: CodeInfo(
        "RESOURCE_EXHAUSTED",
        "the caller's principal is over one of its quotas (quota_kind says which)",
    ),
    APPROVAL_VOIDED: CodeInfo(
        "FAILED_PRECONDITION",
        "the policy the approval was created under changed or was deleted",
    ),
    APPROVAL_DECIDED: CodeInfo(
        "FAILED_PRECONDITION",
        "a vote or withdrawal on an approval that is no longer pending",
    ),
    VOTE_DUPLICATE: CodeInfo(
        "FAILED_PRECONDITION",
        "the principal already has a vote on this approval; withdraw it first",
    ),
    POLICY_CONFLICT: CodeInfo(
        "FAILED_PRECONDITION",
        "a policy names an approval type or capability another policy governs",
    ),
    APPROVAL_TERMS_CHANGED: CodeInfo(
        "FAILED_PRECONDITION",
        "a decision or vote named terms that are not the approval's",
    ),
    APPROVAL_STANDING_FORBIDDEN: CodeInfo(
        "FAILED_PRECONDITION",
        "a standing approval for a capability whose policy forbids them",
    ),
    UNAVAILABLE: CodeInfo(
        "UNAVAILABLE",
        "no leader or no quorum, or no node answered; retry after retry_after_ms",
    ),
    OUT_OF_RANGE: CodeInfo(
        "OUT_OF_RANGE",
        "an audit cursor, leaf or tree size outside what the trail holds",
    ),
    RESOURCE_EXHAUSTED: CodeInfo(
        "RESOURCE_EXHAUSTED",
        "the node (or console) is at its bound for this kind of call; retry later",
    ),
    INTERNAL: CodeInfo(
        "INTERNAL",
        "a bug: an answer of a shape that cannot be, or a page that failed to render",
    ),
    LAST_VOTER: CodeInfo(
        "FAILED_PRECONDITION",
        "removing the last voter would leave a cluster that cannot elect a leader",
    ),
    BACKUP_RUNNING: CodeInfo(
        "RESOURCE_EXHAUSTED",
        "the node is taking another backup; retry after retry_after_ms",
    ),
    SNAPSHOT_TOO_LARGE: CodeInfo(
        "FAILED_PRECONDITION",
        "a backup of a state over SNAPSHOT_BYTES_MAX",
    ),
    CONFIG: CodeInfo(
        "INVALID_ARGUMENT",
        "a client SDK refused its own settings before any call",
    ),
    SESSION_REQUIRED: CodeInfo(
        "UNAUTHENTICATED",
        "console: sign in first (no session, or an expired one)",
    ),
    CSRF_TOKEN_INVALID: CodeInfo(
        "PERMISSION_DENIED",
        "console: the form's CSRF token is missing or wrong",
    ),
    ORIGIN_REFUSED: CodeInfo(
        "PERMISSION_DENIED",
        "console: the request came from another origin",
    ),
    APPROVAL_ID_MISMATCH: CodeInfo(
        "INVALID_ARGUMENT",
        "console: a form for one approval was posted to another's address",
    ),
    DEV_SIGN_IN_DISABLED: CodeInfo(
        "PERMISSION_DENIED",
        "console: this console has no development sign-in",
    ),
    OIDC_SIGN_IN_DISABLED: CodeInfo(
        "PERMISSION_DENIED",
        "console: this console has no OpenID Connect sign-in",
    ),
    OIDC_STATE_INVALID: CodeInfo(
        "INVALID_ARGUMENT",
        "console: the sign-in expired, was used, or began in another browser",
    ),
    OIDC_SIGN_IN_REFUSED: CodeInfo(
        "UNAUTHENTICATED",
        "console: the identity provider did not sign the person in",
    ),
    OIDC_PRINCIPAL_MISMATCH: CodeInfo(
        "FAILED_PRECONDITION",
        "console and cluster make different principals from the ID token",
    ),
    OIDC_TOKEN_MALFORMED: CodeInfo(
        "UNAUTHENTICATED",
        "the ID token is not a JWT, or is too large",
    ),
    OIDC_ALGORITHM_REFUSED: CodeInfo(
        "UNAUTHENTICATED",
        "the ID token's algorithm is not RS256, ES256 or EdDSA",
    ),
    OIDC_UNKNOWN_KEY: CodeInfo(
        "UNAUTHENTICATED",
        "the provider publishes no signing key with the ID token's kid",
    ),
    OIDC_KEY_MISMATCH: CodeInfo(
        "UNAUTHENTICATED",
        "the key the ID token's kid names cannot verify its algorithm",
    ),
    OIDC_BAD_SIGNATURE: CodeInfo(
        "UNAUTHENTICATED",
        "the ID token's signature does not verify",
    ),
    OIDC_WRONG_ISSUER: CodeInfo(
        "UNAUTHENTICATED",
        "the ID token's iss is not the configured issuer",
    ),
    OIDC_WRONG_AUDIENCE: CodeInfo(
        "UNAUTHENTICATED",
        "the ID token's aud does not name the configured audience",
    ),
    OIDC_TOKEN_EXPIRED: CodeInfo(
        "UNAUTHENTICATED",
        "the ID token has expired",
    ),
    OIDC_TOKEN_NOT_YET_VALID: CodeInfo(
        "UNAUTHENTICATED",
        "the ID token is not valid yet (nbf)",
    ),
    OIDC_TOKEN_ISSUED_IN_FUTURE: CodeInfo(
        "UNAUTHENTICATED",
        "the ID token claims to be issued in the future (iat)",
    ),
    OIDC_TOKEN_LIFETIME_TOO_LONG: CodeInfo(
        "UNAUTHENTICATED",
        "the ID token lives longer than the token lifetime cap",
    ),
    OIDC_CLAIM_MISSING: CodeInfo(
        "UNAUTHENTICATED",
        "a required ID token claim is missing or malformed",
    ),
    OIDC_NONCE_MISMATCH: CodeInfo(
        "UNAUTHENTICATED",
        "the ID token's nonce is not the sign-in's",
    ),
    OIDC_EMAIL_NOT_VERIFIED: CodeInfo(
        "UNAUTHENTICATED",
        "the provider does not say the ID token's email is verified",
    ),
    OIDC_BAD_PRINCIPAL: CodeInfo(
        "UNAUTHENTICATED",
        "the ID token's principal claim does not make a valid principal",
    ),
    OIDC_PROVIDER_UNAVAILABLE: CodeInfo(
        "UNAVAILABLE",
        "the OpenID provider could not be reached or answered garbage",
    ),
    OIDC_SETTINGS: CodeInfo(
        "INVALID_ARGUMENT",
        "the OpenID Connect settings cannot be used",
    ),
    NOTIFY_CONFIG: CodeInfo(
        "INVALID_ARGUMENT",
        "notifier: a wrong flag (webhook, URL or HMAC secret)",
    ),
    NOTIFY_STATE_IO: CodeInfo(
        "UNAVAILABLE",
        "notifier: the state file could not be read or written",
    ),
    NOTIFY_STATE_CORRUPT: CodeInfo(
        "DATA_LOSS",
        "notifier: the state file is not one it wrote; refused, not reset",
    ),
    NOTIFY_STATE_LOCKED: CodeInfo(
        "FAILED_PRECONDITION",
        "notifier: another notifier holds the state directory",
    ),
    NOTIFY_LISTING_TOO_LARGE: CodeInfo(
        "FAILED_PRECONDITION",
        "notifier: too many pending approvals to list; narrow its grant",
    ),
    NOTIFY_CURSOR_DROPPED: CodeInfo(
        "OUT_OF_RANGE",
        "notifier log: the cursor left the trail; pending approvals re-posted",
    ),
    NOTIFY_POST_REFUSED: CodeInfo(
        "FAILED_PRECONDITION",
        "notifier log: a webhook refused a post for good; it was skipped",
    ),
    NOTIFY_POST_ABANDONED: CodeInfo(
        "UNAVAILABLE",
        "notifier log: a post kept failing past its retry limits; skipped",
    ),
    NOT_A_MEMBER: CodeInfo(
        "NOT_FOUND",
        "CLI: the node to remove is not a member of the cluster",
    ),
    BACKUP_CORRUPT: CodeInfo(
        "DATA_LOSS",
        "CLI: the backup file or stream is not a complete, intact backup",
    ),
    DATA_DIR_NOT_EMPTY: CodeInfo(
        "FAILED_PRECONDITION",
        "CLI: a backup is restored only into an empty data directory",
    ),
    AUDIT_VERIFICATION_FAILED: CodeInfo(
        "DATA_LOSS",
        "CLI: the audit export or proof does not verify",
    ),
    NOTIFY_QUEUE_FULL: CodeInfo(
        "RESOURCE_EXHAUSTED",
        "notifier log: its queues are full; it reads no events until they drain",
    ),
    PAGE_SIZE_INVALID: CodeInfo(
        "INVALID_ARGUMENT",
        "a list's page size is above its limit (1000)",
    ),
    PAGE_TOKEN_INVALID: CodeInfo(
        "INVALID_ARGUMENT",
        "a list's page token is not one that list handed out",
    ),
    AUDIT_EXPORT_FORMAT_UNKNOWN: CodeInfo(
        "INVALID_ARGUMENT",
        "CLI: the file is not an audit export in a format this gavel reads",
    ),
    AUDIT_CHECKPOINT_UNSIGNED: CodeInfo(
        "UNAVAILABLE",
        "CLI: no checkpoint the nodes cosigned covers it yet; try again shortly",
    ),
}

#: Every code of the catalogue, to test a ``GavelError.code`` against.
ALL_CODES: Final[frozenset[GavelCode]] = frozenset(CODES)
