// Gavel's stable codes: every code a node, the console, the notifier, the
// `gavel` CLI or an SDK refuses with, the gRPC status class it belongs to and
// one line saying when it happens. `GavelError.code` is one of them (or a code
// newer than this package: act on the gRPC status code then).
//
// Generated from the catalogue in crates/gavel-core/src/error.rs by
// crates/gavel-core/tests/error_catalogue.rs; do not edit. After changing
// the catalogue, write it again with
// `GAVEL_WRITE_CODES=1 cargo test --offline --manifest-path crates/gavel-core/Cargo.toml --test error_catalogue`.

/** Every code of the catalogue. */
export type GavelCode =
  | "INVALID_ARGUMENT"
  | "NOT_FOUND"
  | "ALREADY_EXISTS"
  | "FAILED_PRECONDITION"
  | "CAPABILITY_NOT_FOUND"
  | "CAPABILITY_INVALID"
  | "INPUT_INVALID"
  | "UNAUTHENTICATED"
  | "PERMISSION_DENIED"
  | "APPROVAL_SELF_APPROVAL"
  | "APPROVAL_PENDING"
  | "APPROVAL_REJECTED"
  | "APPROVAL_CANCELLED"
  | "APPROVAL_EXPIRED"
  | "APPROVAL_CONSUMED"
  | "APPROVAL_INPUT_MISMATCH"
  | "LEASE_LOST"
  | "EXECUTION_FINAL"
  | "REQUEST_ID_REUSED"
  | "QUOTA_EXCEEDED"
  | "APPROVAL_VOIDED"
  | "APPROVAL_DECIDED"
  | "VOTE_DUPLICATE"
  | "POLICY_CONFLICT"
  | "APPROVAL_TERMS_CHANGED"
  | "APPROVAL_STANDING_FORBIDDEN"
  | "UNAVAILABLE"
  | "OUT_OF_RANGE"
  | "RESOURCE_EXHAUSTED"
  | "INTERNAL"
  | "LAST_VOTER"
  | "BACKUP_RUNNING"
  | "SNAPSHOT_TOO_LARGE"
  | "CONFIG"
  | "SESSION_REQUIRED"
  | "CSRF_TOKEN_INVALID"
  | "ORIGIN_REFUSED"
  | "APPROVAL_ID_MISMATCH"
  | "DEV_SIGN_IN_DISABLED"
  | "OIDC_SIGN_IN_DISABLED"
  | "OIDC_STATE_INVALID"
  | "OIDC_SIGN_IN_REFUSED"
  | "OIDC_PRINCIPAL_MISMATCH"
  | "OIDC_TOKEN_MALFORMED"
  | "OIDC_ALGORITHM_REFUSED"
  | "OIDC_UNKNOWN_KEY"
  | "OIDC_KEY_MISMATCH"
  | "OIDC_BAD_SIGNATURE"
  | "OIDC_WRONG_ISSUER"
  | "OIDC_WRONG_AUDIENCE"
  | "OIDC_TOKEN_EXPIRED"
  | "OIDC_TOKEN_NOT_YET_VALID"
  | "OIDC_TOKEN_ISSUED_IN_FUTURE"
  | "OIDC_TOKEN_LIFETIME_TOO_LONG"
  | "OIDC_CLAIM_MISSING"
  | "OIDC_NONCE_MISMATCH"
  | "OIDC_EMAIL_NOT_VERIFIED"
  | "OIDC_BAD_PRINCIPAL"
  | "OIDC_PROVIDER_UNAVAILABLE"
  | "OIDC_SETTINGS"
  | "NOTIFY_CONFIG"
  | "NOTIFY_STATE_IO"
  | "NOTIFY_STATE_CORRUPT"
  | "NOTIFY_STATE_LOCKED"
  | "NOTIFY_LISTING_TOO_LARGE"
  | "NOTIFY_CURSOR_DROPPED"
  | "NOTIFY_POST_REFUSED"
  | "NOTIFY_POST_ABANDONED"
  | "NOT_A_MEMBER"
  | "BACKUP_CORRUPT"
  | "DATA_DIR_NOT_EMPTY"
  | "AUDIT_VERIFICATION_FAILED"
  | "NOTIFY_QUEUE_FULL"
  | "PAGE_SIZE_INVALID"
  | "PAGE_TOKEN_INVALID"
  | "AUDIT_EXPORT_FORMAT_UNKNOWN"
  | "AUDIT_CHECKPOINT_UNSIGNED";

/** The gRPC status code (its canonical name) a refusal with a code carries, or would. */
export type GavelCodeClass =
  | "INVALID_ARGUMENT"
  | "NOT_FOUND"
  | "ALREADY_EXISTS"
  | "FAILED_PRECONDITION"
  | "UNAUTHENTICATED"
  | "PERMISSION_DENIED"
  | "RESOURCE_EXHAUSTED"
  | "UNAVAILABLE"
  | "OUT_OF_RANGE"
  | "INTERNAL"
  | "DATA_LOSS";

/** What a code means. */
export interface GavelCodeInfo {
  /** The gRPC status class of the code. */
  readonly class: GavelCodeClass;
  /** When a refusal carries the code, for a person. */
  readonly description: string;
}

/** Every code with its class and description, in the catalogue's order. */
export const GAVEL_CODES: { readonly [code in GavelCode]: GavelCodeInfo } = {
  INVALID_ARGUMENT: { class: "INVALID_ARGUMENT", description: "a field is missing, malformed, out of range or over a size limit" },
  NOT_FOUND: { class: "NOT_FOUND", description: "the record acted on does not exist, or is not the caller's to read" },
  ALREADY_EXISTS: { class: "ALREADY_EXISTS", description: "a record with this id already exists with different content" },
  FAILED_PRECONDITION: { class: "FAILED_PRECONDITION", description: "the record is not in a state that allows this transition" },
  CAPABILITY_NOT_FOUND: { class: "NOT_FOUND", description: "the capability named by a submit or an approval is not registered" },
  CAPABILITY_INVALID: { class: "INVALID_ARGUMENT", description: "a capability registration failed validation; every problem is listed" },
  INPUT_INVALID: { class: "INVALID_ARGUMENT", description: "an execution input is not I-JSON or is over the size limit" },
  UNAUTHENTICATED: { class: "UNAUTHENTICATED", description: "no credential, or a refused one (on an --insecure node: no actor)" },
  PERMISSION_DENIED: { class: "PERMISSION_DENIED", description: "the caller holds no grant that allows this" },
  APPROVAL_SELF_APPROVAL: { class: "PERMISSION_DENIED", description: "the approver is the requester and the request did not opt out" },
  APPROVAL_PENDING: { class: "FAILED_PRECONDITION", description: "resume found the approval still pending" },
  APPROVAL_REJECTED: { class: "FAILED_PRECONDITION", description: "resume found the approval rejected" },
  APPROVAL_CANCELLED: { class: "FAILED_PRECONDITION", description: "resume found the approval cancelled by the application" },
  APPROVAL_EXPIRED: { class: "FAILED_PRECONDITION", description: "the approval, or its validity after approval, has expired" },
  APPROVAL_CONSUMED: { class: "FAILED_PRECONDITION", description: "the approval was already consumed" },
  APPROVAL_INPUT_MISMATCH: { class: "FAILED_PRECONDITION", description: "the input no longer hashes to the approved input hash" },
  LEASE_LOST: { class: "FAILED_PRECONDITION", description: "a report or heartbeat named a lease that is not current" },
  EXECUTION_FINAL: { class: "FAILED_PRECONDITION", description: "the execution already has its final result" },
  REQUEST_ID_REUSED: { class: "INVALID_ARGUMENT", description: "a request id was reused for a different command" },
  QUOTA_EXCEEDED: { class: "RESOURCE_EXHAUSTED", description: "the caller's principal is over one of its quotas (quota_kind says which)" },
  APPROVAL_VOIDED: { class: "FAILED_PRECONDITION", description: "the policy the approval was created under changed or was deleted" },
  APPROVAL_DECIDED: { class: "FAILED_PRECONDITION", description: "a vote or withdrawal on an approval that is no longer pending" },
  VOTE_DUPLICATE: { class: "FAILED_PRECONDITION", description: "the principal already has a vote on this approval; withdraw it first" },
  POLICY_CONFLICT: { class: "FAILED_PRECONDITION", description: "a policy names an approval type or capability another policy governs" },
  APPROVAL_TERMS_CHANGED: { class: "FAILED_PRECONDITION", description: "a decision or vote named terms that are not the approval's" },
  APPROVAL_STANDING_FORBIDDEN: { class: "FAILED_PRECONDITION", description: "a standing approval for a capability whose policy forbids them" },
  UNAVAILABLE: { class: "UNAVAILABLE", description: "no leader or no quorum, or no node answered; retry after retry_after_ms" },
  OUT_OF_RANGE: { class: "OUT_OF_RANGE", description: "an audit cursor, leaf or tree size outside what the trail holds" },
  RESOURCE_EXHAUSTED: { class: "RESOURCE_EXHAUSTED", description: "the node (or console) is at its bound for this kind of call; retry later" },
  INTERNAL: { class: "INTERNAL", description: "a bug: an answer of a shape that cannot be, or a page that failed to render" },
  LAST_VOTER: { class: "FAILED_PRECONDITION", description: "removing the last voter would leave a cluster that cannot elect a leader" },
  BACKUP_RUNNING: { class: "RESOURCE_EXHAUSTED", description: "the node is taking another backup; retry after retry_after_ms" },
  SNAPSHOT_TOO_LARGE: { class: "FAILED_PRECONDITION", description: "a backup of a state over SNAPSHOT_BYTES_MAX" },
  CONFIG: { class: "INVALID_ARGUMENT", description: "a client SDK refused its own settings before any call" },
  SESSION_REQUIRED: { class: "UNAUTHENTICATED", description: "console: sign in first (no session, or an expired one)" },
  CSRF_TOKEN_INVALID: { class: "PERMISSION_DENIED", description: "console: the form's CSRF token is missing or wrong" },
  ORIGIN_REFUSED: { class: "PERMISSION_DENIED", description: "console: the request came from another origin" },
  APPROVAL_ID_MISMATCH: { class: "INVALID_ARGUMENT", description: "console: a form for one approval was posted to another's address" },
  DEV_SIGN_IN_DISABLED: { class: "PERMISSION_DENIED", description: "console: this console has no development sign-in" },
  OIDC_SIGN_IN_DISABLED: { class: "PERMISSION_DENIED", description: "console: this console has no OpenID Connect sign-in" },
  OIDC_STATE_INVALID: { class: "INVALID_ARGUMENT", description: "console: the sign-in expired, was used, or began in another browser" },
  OIDC_SIGN_IN_REFUSED: { class: "UNAUTHENTICATED", description: "console: the identity provider did not sign the person in" },
  OIDC_PRINCIPAL_MISMATCH: { class: "FAILED_PRECONDITION", description: "console and cluster make different principals from the ID token" },
  OIDC_TOKEN_MALFORMED: { class: "UNAUTHENTICATED", description: "the ID token is not a JWT, or is too large" },
  OIDC_ALGORITHM_REFUSED: { class: "UNAUTHENTICATED", description: "the ID token's algorithm is not RS256, ES256 or EdDSA" },
  OIDC_UNKNOWN_KEY: { class: "UNAUTHENTICATED", description: "the provider publishes no signing key with the ID token's kid" },
  OIDC_KEY_MISMATCH: { class: "UNAUTHENTICATED", description: "the key the ID token's kid names cannot verify its algorithm" },
  OIDC_BAD_SIGNATURE: { class: "UNAUTHENTICATED", description: "the ID token's signature does not verify" },
  OIDC_WRONG_ISSUER: { class: "UNAUTHENTICATED", description: "the ID token's iss is not the configured issuer" },
  OIDC_WRONG_AUDIENCE: { class: "UNAUTHENTICATED", description: "the ID token's aud does not name the configured audience" },
  OIDC_TOKEN_EXPIRED: { class: "UNAUTHENTICATED", description: "the ID token has expired" },
  OIDC_TOKEN_NOT_YET_VALID: { class: "UNAUTHENTICATED", description: "the ID token is not valid yet (nbf)" },
  OIDC_TOKEN_ISSUED_IN_FUTURE: { class: "UNAUTHENTICATED", description: "the ID token claims to be issued in the future (iat)" },
  OIDC_TOKEN_LIFETIME_TOO_LONG: { class: "UNAUTHENTICATED", description: "the ID token lives longer than the token lifetime cap" },
  OIDC_CLAIM_MISSING: { class: "UNAUTHENTICATED", description: "a required ID token claim is missing or malformed" },
  OIDC_NONCE_MISMATCH: { class: "UNAUTHENTICATED", description: "the ID token's nonce is not the sign-in's" },
  OIDC_EMAIL_NOT_VERIFIED: { class: "UNAUTHENTICATED", description: "the provider does not say the ID token's email is verified" },
  OIDC_BAD_PRINCIPAL: { class: "UNAUTHENTICATED", description: "the ID token's principal claim does not make a valid principal" },
  OIDC_PROVIDER_UNAVAILABLE: { class: "UNAVAILABLE", description: "the OpenID provider could not be reached or answered garbage" },
  OIDC_SETTINGS: { class: "INVALID_ARGUMENT", description: "the OpenID Connect settings cannot be used" },
  NOTIFY_CONFIG: { class: "INVALID_ARGUMENT", description: "notifier: a wrong flag (webhook, URL or HMAC secret)" },
  NOTIFY_STATE_IO: { class: "UNAVAILABLE", description: "notifier: the state file could not be read or written" },
  NOTIFY_STATE_CORRUPT: { class: "DATA_LOSS", description: "notifier: the state file is not one it wrote; refused, not reset" },
  NOTIFY_STATE_LOCKED: { class: "FAILED_PRECONDITION", description: "notifier: another notifier holds the state directory" },
  NOTIFY_LISTING_TOO_LARGE: { class: "FAILED_PRECONDITION", description: "notifier: too many pending approvals to list; narrow its grant" },
  NOTIFY_CURSOR_DROPPED: { class: "OUT_OF_RANGE", description: "notifier log: the cursor left the trail; pending approvals re-posted" },
  NOTIFY_POST_REFUSED: { class: "FAILED_PRECONDITION", description: "notifier log: a webhook refused a post for good; it was skipped" },
  NOTIFY_POST_ABANDONED: { class: "UNAVAILABLE", description: "notifier log: a post kept failing past its retry limits; skipped" },
  NOT_A_MEMBER: { class: "NOT_FOUND", description: "CLI: the node to remove is not a member of the cluster" },
  BACKUP_CORRUPT: { class: "DATA_LOSS", description: "CLI: the backup file or stream is not a complete, intact backup" },
  DATA_DIR_NOT_EMPTY: { class: "FAILED_PRECONDITION", description: "CLI: a backup is restored only into an empty data directory" },
  AUDIT_VERIFICATION_FAILED: { class: "DATA_LOSS", description: "CLI: the audit export or proof does not verify" },
  NOTIFY_QUEUE_FULL: { class: "RESOURCE_EXHAUSTED", description: "notifier log: its queues are full; it reads no events until they drain" },
  PAGE_SIZE_INVALID: { class: "INVALID_ARGUMENT", description: "a list's page size is above its limit (1000)" },
  PAGE_TOKEN_INVALID: { class: "INVALID_ARGUMENT", description: "a list's page token is not one that list handed out" },
  AUDIT_EXPORT_FORMAT_UNKNOWN: { class: "INVALID_ARGUMENT", description: "CLI: the file is not an audit export in a format this gavel reads" },
  AUDIT_CHECKPOINT_UNSIGNED: { class: "UNAVAILABLE", description: "CLI: no checkpoint the nodes cosigned covers it yet; try again shortly" },
};

/** Whether `code` (a `GavelError.code`, say) is one of the catalogue's. */
export function isGavelCode(code: string): code is GavelCode {
  return Object.prototype.hasOwnProperty.call(GAVEL_CODES, code);
}
