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
    /// A required claim is absent or not of its type.
    #[error("the ID token's claim {0:?} is missing or malformed")]
    MissingClaim(String),
    /// The `nonce` is not the one the sign-in sent.
    #[error("the ID token's nonce does not match the sign-in")]
    NonceMismatch,
    /// The principal made from the claim is not a valid principal.
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
            OidcError::MissingClaim(_) => "OIDC_CLAIM_MISSING",
            OidcError::NonceMismatch => "OIDC_NONCE_MISMATCH",
            OidcError::BadPrincipal { .. } => "OIDC_BAD_PRINCIPAL",
            OidcError::Provider(_) => "OIDC_PROVIDER_UNAVAILABLE",
            OidcError::Settings(_) => "OIDC_SETTINGS",
        }
    }
}
