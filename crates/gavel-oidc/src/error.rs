//! Why an ID token or a provider was refused.

use thiserror::Error;

/// An ID token was refused, or the provider could not be used. On a node
/// every variant is `UNAUTHENTICATED`; [`OidcError::code`] is the stable
/// code a person or a log can search for.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum OidcError {
    /// The token is not a JWT (three base64url parts with a JSON header), or
    /// is over `ID_TOKEN_BYTES_MAX`.
    #[error("the ID token is not a JWT")]
    Malformed,
    /// The header's `alg` is not RS256, ES256 or EdDSA (`none` and HS* are
    /// never accepted).
    #[error("ID token algorithm {0:?} is not accepted (only RS256, ES256 and EdDSA)")]
    AlgorithmRefused(String),
    /// The provider's JWKS has no key with the token's `kid`, even after a
    /// refresh.
    #[error("the provider publishes no signing key with kid {0:?}")]
    UnknownKey(String),
    /// The key the `kid` names is not of the kind the `alg` needs.
    #[error("the provider's key {kid:?} cannot verify {alg} signatures")]
    KeyMismatch {
        /// The key's id.
        kid: String,
        /// The token's algorithm.
        alg: String,
    },
    /// No provider key verifies the signature.
    #[error("the ID token's signature does not verify")]
    BadSignature,
    /// The `iss` claim is not the configured issuer.
    #[error("the ID token's issuer is {found:?}, not {expected:?}")]
    WrongIssuer {
        /// The configured issuer.
        expected: String,
        /// The token's `iss`.
        found: String,
    },
    /// The `aud` claim does not name the configured audience (client id).
    #[error("the ID token is not meant for audience {0:?}")]
    WrongAudience(String),
    /// `exp` is in the past, beyond the clock skew.
    #[error("the ID token has expired")]
    Expired,
    /// `nbf` is further ahead than the clock skew.
    #[error("the ID token is not valid yet (nbf {0}s ahead of this clock)")]
    NotYetValid(u64),
    /// `iat` is further ahead than the clock skew.
    #[error("the ID token claims to be issued {0}s in the future (iat)")]
    IssuedInFuture(u64),
    /// `exp − iat` is over the maximum lifetime the caller allows.
    #[error(
        "the ID token is valid for {} (exp - iat), over the maximum token lifetime of {}; have the provider \
         issue shorter-lived ID tokens",
        duration_text(*lifetime_seconds),
        duration_text(*max_seconds)
    )]
    LifetimeTooLong {
        /// The token's `exp − iat`.
        lifetime_seconds: u64,
        /// The bound it broke.
        max_seconds: u64,
    },
    /// A required claim is absent or not of its type.
    #[error("the ID token's claim {0:?} is missing or malformed")]
    MissingClaim(String),
    /// The `nonce` is not the one the sign-in sent.
    #[error("the ID token's nonce does not match the sign-in")]
    NonceMismatch,
    /// The principal claim is `email` and the token does not say
    /// `email_verified: true`: the provider has not vouched for the address.
    #[error("the ID token's email is not verified by the provider (email_verified is not true)")]
    EmailNotVerified,
    /// The principal claim's value is not an email address, or the
    /// principal made from it is not a valid principal.
    #[error("the ID token's {claim} claim does not make a valid principal: {reason}")]
    BadPrincipal {
        /// The claim's name.
        claim: String,
        /// Why.
        reason: String,
    },
    /// The provider could not be reached or answered something unusable.
    #[error("the OpenID provider: {0}")]
    Provider(String),
    /// The settings cannot be used (an http issuer off loopback, a bad URL).
    #[error("OpenID settings: {0}")]
    Settings(String),
}

impl OidcError {
    /// A stable code for the refusal, `OIDC_…`.
    ///
    /// Every code is one of gavel-core's catalogue (`ErrorCode`); this crate
    /// may not depend on gavel-core, so they are literals, which
    /// `crates/gavel-core/tests/error_catalogue.rs` holds to the catalogue.
    pub fn code(&self) -> &'static str {
        match self {
            OidcError::Malformed => "OIDC_TOKEN_MALFORMED",
            OidcError::AlgorithmRefused(_) => "OIDC_ALGORITHM_REFUSED",
            OidcError::UnknownKey(_) => "OIDC_UNKNOWN_KEY",
            OidcError::KeyMismatch { .. } => "OIDC_KEY_MISMATCH",
            OidcError::BadSignature => "OIDC_BAD_SIGNATURE",
            OidcError::WrongIssuer { .. } => "OIDC_WRONG_ISSUER",
            OidcError::WrongAudience(_) => "OIDC_WRONG_AUDIENCE",
            OidcError::Expired => "OIDC_TOKEN_EXPIRED",
            OidcError::NotYetValid(_) => "OIDC_TOKEN_NOT_YET_VALID",
            OidcError::IssuedInFuture(_) => "OIDC_TOKEN_ISSUED_IN_FUTURE",
            OidcError::LifetimeTooLong { .. } => "OIDC_TOKEN_LIFETIME_TOO_LONG",
            OidcError::MissingClaim(_) => "OIDC_CLAIM_MISSING",
            OidcError::NonceMismatch => "OIDC_NONCE_MISMATCH",
            OidcError::EmailNotVerified => "OIDC_EMAIL_NOT_VERIFIED",
            OidcError::BadPrincipal { .. } => "OIDC_BAD_PRINCIPAL",
            OidcError::Provider(_) => "OIDC_PROVIDER_UNAVAILABLE",
            OidcError::Settings(_) => "OIDC_SETTINGS",
        }
    }
}

/// Seconds in days, hours, minutes and seconds, leaving out zero parts, as
/// Gavel's own token refusals write them: `90s` is `1m30s`, a day `1d`.
fn duration_text(seconds: u64) -> String {
    if seconds == 0 {
        return "0s".to_string();
    }
    let parts =
        [(seconds / 86_400, "d"), (seconds % 86_400 / 3_600, "h"), (seconds % 3_600 / 60, "m"), (seconds % 60, "s")];
    parts.iter().filter(|(count, _)| *count > 0).map(|(count, unit)| format!("{count}{unit}")).collect()
}
