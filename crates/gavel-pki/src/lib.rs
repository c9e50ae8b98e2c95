//! Gavel's credentials: the cluster CA and the node and client certificates
//! it issues, bearer tokens and how a node verifies them.
//!
//! A principal `kind:id` is named in a certificate by exactly one SAN URI
//! `gavel://kind/id` ([`Authority::issue`], [`principal_from_certificate`]),
//! and in a JWT by its `sub` claim ([`TokenKey::issue`],
//! [`TokenVerifier::verify`]). [`CertsDir`] is the file layout that
//! `gavel cert`, `gavel dev`, `gavel node --certs-dir` and the testkit share;
//! [`create_dev_material`] fills one for a development cluster.
//!
//! This crate depends on `gavel-core` only for [`gavel_core::Principal`] and
//! its grants; it has no tokio, tonic or network code: TLS itself is
//! tonic's (rustls), this crate only makes and reads the material.

mod authority;
mod certificate;
mod dir;
mod error;
pub mod limits;
mod token;
mod validity;

pub use authority::{node_hosts, Authority, IssuedCertificate};
pub use certificate::principal_from_certificate;
pub use dir::{create_dev_material, CertsDir, DevMaterial, DevNode};
pub use error::{CertificateError, PkiError, TokenError};
pub use token::{
    check_claims, unix_seconds, TokenClaims, TokenKey, TokenVerifier, TokenVerifierSettings, DEFAULT_AUDIENCE,
};
pub use validity::Validity;

/// The identity types this crate's certificates and tokens name.
pub use gavel_core::{Caller, GrantName, Principal, PrincipalKind};

#[cfg(test)]
mod tests;
