//! `gavel-oidc`: OpenID Connect for Gavel, in one place for the nodes
//! (which accept a provider's ID tokens as bearer tokens) and the console
//! (which signs people in with the provider and sends their ID token to
//! the cluster).
//!
//! [`verify`] is the pure half: a JWKS as a [`KeySet`], and
//! [`verify_with_keys`], every rule an ID token must meet at a given time
//! (RS256, ES256 or EdDSA only; `kid`; `iss`; `aud`; `exp`, `nbf` and `iat`
//! within the caller's clock skew; a lifetime `exp − iat` within the
//! caller's maximum; `nonce`; a principal claim holding an email address,
//! verified when it is `email`, so that no ID token names a local principal).
//! [`Provider`] is the IO half: discovery and the JWKS over [`HttpClient`]
//! (hyper and rustls), cached and refreshed on an unknown `kid` at most once
//! per [`limits::JWKS_REFRESH_INTERVAL_MIN`].
//!
//! It depends on none of Gavel's crates: the caller checks the principal
//! against the cluster's rules (the node with `gavel_core::Principal`), so
//! the console can use it without the core.

mod error;
pub mod http;
pub mod limits;
mod provider;
pub mod verify;

pub use error::OidcError;
pub use http::HttpClient;
pub use provider::{refresh_allowed, Discovery, JwksSource, Provider, ProviderSettings};
pub use verify::{
    check_email_address, unverified_issuer, verify_with_keys, Identity, KeySet, TokenRules, ALLOWED_ALGORITHMS,
};

/// Seconds since the Unix epoch, now: the `now` a shell passes to [`Provider::verify`].
pub fn unix_seconds() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |elapsed| elapsed.as_secs())
}

#[cfg(test)]
mod tests;
