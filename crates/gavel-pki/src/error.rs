//! The errors of issuing, loading and checking credentials.

use std::path::PathBuf;

use thiserror::Error;

use crate::limits::{CERTIFICATE_DAYS_MAX, TOKEN_CLOCK_SKEW_SECONDS};

/// Issuing or loading certificates and keys failed.
#[derive(Debug, Error)]
pub enum PkiError {
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        #[source]
        source: std::io::Error,
    },
    /// Generating or signing a certificate failed, or a CA certificate or key
    /// could not be parsed.
    #[error("certificate: {0}")]
    Certificate(#[from] rcgen::Error),
    /// A key is not a PEM key of the expected kind.
    #[error("{what}: {reason}")]
    Key {
        /// Which key.
        what: String,
        /// Why it was refused.
        reason: String,
    },
    /// A host is neither a DNS name nor an IP address.
    #[error("host {0:?} is not a DNS name or an IP address")]
    Host(String),
    /// A token could not be signed.
    #[error("signing a token: {0}")]
    Sign(#[source] jsonwebtoken::errors::Error),
    /// A certificate validity of 0 days (expired at once) or of more than
    /// [`CERTIFICATE_DAYS_MAX`].
    #[error("a certificate must be valid for 1 to {CERTIFICATE_DAYS_MAX} days, not {0}")]
    Days(u32),
}

/// A certificate names no principal Gavel accepts.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum CertificateError {
    /// The bytes are not a DER X.509 certificate.
    #[error("not an X.509 certificate: {0}")]
    Unparsable(String),
    /// The certificate has no SAN URI.
    #[error("the certificate names no principal (it needs one SAN URI gavel://kind/id)")]
    NoPrincipal,
    /// The certificate has more than one SAN URI.
    #[error("the certificate names {0} URIs; it needs exactly one SAN URI gavel://kind/id")]
    SeveralPrincipals(usize),
    /// The SAN URI is not a well-formed `gavel://kind/id`.
    #[error("{0}")]
    BadPrincipal(String),
}

/// A bearer token was refused. Every variant maps to `UNAUTHENTICATED`.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum TokenError {
    /// The token is not a JWT (three base64url parts with a JSON header).
    #[error("the bearer token is not a JWT")]
    Malformed,
    /// The header's `alg` is `none`, or one this node does not accept (HS256
    /// without a configured secret, RSA, …).
    #[error("token algorithm {0:?} is not accepted")]
    AlgorithmRefused(String),
    /// No configured key verifies the signature (tampered, or signed by
    /// another key).
    #[error("the token's signature does not verify")]
    BadSignature,
    /// The `exp` claim is in the past (beyond the clock skew).
    #[error("the token has expired")]
    Expired,
    /// The `nbf` claim is further ahead of the node's clock than the clock skew.
    #[error(
        "the token is not valid yet: its nbf is {} ahead of this node's clock (at most \
         {TOKEN_CLOCK_SKEW_SECONDS}s of clock skew is allowed); use it once it is valid, or check the issuer's clock",
        duration_text(*seconds_ahead)
    )]
    NotYetValid {
        /// How far `nbf` is ahead of the node's clock.
        seconds_ahead: u64,
    },
    /// The `iat` claim is further ahead of the node's clock than the clock skew.
    #[error(
        "the token claims to be issued {} in the future (iat; at most {TOKEN_CLOCK_SKEW_SECONDS}s of clock skew \
         is allowed); check the issuer's clock",
        duration_text(*seconds_ahead)
    )]
    IssuedInFuture {
        /// How far `iat` is ahead of the node's clock.
        seconds_ahead: u64,
    },
    /// `exp − iat` is over the maximum lifetime.
    #[error(
        "the token is valid for {} (exp - iat), over the maximum token lifetime of {}; issue a shorter-lived \
         token (gavel token issue --ttl)",
        duration_text(*lifetime_seconds),
        duration_text(*max_seconds)
    )]
    LifetimeTooLong {
        /// The token's `exp − iat`.
        lifetime_seconds: u64,
        /// The bound it broke.
        max_seconds: u64,
    },
    /// The `sub` claim names a node.
    #[error("the token's sub {0} is a node: nodes authenticate with their certificate only, never with a token")]
    NodeSubject(String),
    /// The `aud` claim does not name this cluster's audience.
    #[error("the token is not meant for audience {0:?}")]
    WrongAudience(String),
    /// A required claim (`sub`, `aud`, `exp`) is missing or malformed.
    #[error("the token's claims are malformed: {0}")]
    BadClaims(String),
    /// The `sub` claim is not a principal `kind:id`.
    #[error("the token's sub: {0}")]
    BadSubject(String),
    /// A `roles` entry names no grant.
    #[error("the token's roles name an unknown grant {0:?}")]
    UnknownRole(String),
}

/// Seconds in days, hours, minutes and seconds, leaving out zero parts:
/// `90s` is `1m30s`, a day `1d`, `3599s` is `59m59s`.
pub(crate) fn duration_text(seconds: u64) -> String {
    if seconds == 0 {
        return "0s".to_string();
    }
    let parts =
        [(seconds / 86_400, "d"), (seconds % 86_400 / 3_600, "h"), (seconds % 3_600 / 60, "m"), (seconds % 60, "s")];
    parts.iter().filter(|(count, _)| *count > 0).map(|(count, unit)| format!("{count}{unit}")).collect()
}
