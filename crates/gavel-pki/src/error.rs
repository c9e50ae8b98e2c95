//! The errors of issuing, loading and checking credentials.

use std::path::PathBuf;

use thiserror::Error;

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
    /// The `exp` claim is in the past.
    #[error("the token has expired")]
    Expired,
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
