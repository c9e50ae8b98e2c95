//! `gavel-console`: the approver's desk, a stateless web process.
//!
//! People sign in with an OpenID Provider (authorization code with PKCE,
//! [`OidcSignIn`]; the person's ID token is their bearer towards the
//! cluster), or, for `gavel dev` only, with a development sign-in (see
//! `docs/console.md`), and every page and form is served by SDK calls
//! ([`gavel_client::Client`]) made with the signed-in person's bearer token:
//! the cluster authorizes the person, never the console, and the console
//! adds no RPC. It holds no cluster data; its sessions live in memory.
//!
//! Key types: [`ConsoleConfig`], [`OidcSignIn`], [`DevSignIn`], [`serve`]. Templates are
//! minijinja with auto-escaping (`templates/`), and the stylesheet and the
//! one script are built into the binary (`assets/`), served under a strict
//! Content-Security-Policy.
//!
//! It depends on `gavel-client` (and its re-exported proto types) and
//! `gavel-oidc` (the ID-token verification the nodes use too) only: never
//! on gavel-server, gavel-raft, gavel-core or gavel-pki.

mod error;
pub mod limits;
mod oidc;
mod pages;
mod security;
mod session;
mod summary;

use std::sync::Arc;
use std::time::Duration;

pub use error::ConsoleError;
use gavel_client::ClientTls;
pub use oidc::{OidcSignIn, CALLBACK_PATH};

/// Mints a bearer token for a principal (`kind:id`) valid for a duration;
/// the development sign-in uses the dev cluster's token key through it.
pub type TokenMinter = Arc<dyn Fn(&str, Duration) -> Result<String, String> + Send + Sync>;

/// The development sign-in of `gavel dev`: pick a persona, get a token.
#[derive(Clone)]
pub struct DevSignIn {
    /// Personas offered on the sign-in page (`kind:id`).
    pub personas: Vec<String>,
    /// Signs the persona's token.
    pub mint: TokenMinter,
}

/// How a console reaches the cluster and how it is reached.
#[derive(Clone)]
pub struct ConsoleConfig {
    /// The nodes' gRPC addresses.
    pub endpoints: Vec<String>,
    /// TLS towards the nodes (the cluster CA); the person's token rides on it.
    pub tls: Option<ClientTls>,
    /// The origin people reach the console at (`http://127.0.0.1:7500`):
    /// state-changing requests must come from it, and cookies are Secure
    /// unless it is plain HTTP on loopback.
    pub origin: String,
    /// Development sign-in; `None` outside `gavel dev`.
    pub dev_sign_in: Option<DevSignIn>,
    /// Sign-in with an OpenID Provider; `None` when not configured.
    pub oidc: Option<OidcSignIn>,
}

impl ConsoleConfig {
    /// Whether session cookies carry `Secure`: always, except plain HTTP on loopback.
    pub fn secure_cookies(&self) -> bool {
        let Some(rest) = self.origin.strip_prefix("http://") else {
            return true;
        };
        let host = rest.rsplit_once(':').map_or(rest, |(host, _)| host);
        !matches!(host, "127.0.0.1" | "localhost" | "[::1]")
    }
}

/// Serves the console on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    config: ConsoleConfig,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let router = pages::router(config)?;
    axum::serve(listener, router).with_graceful_shutdown(shutdown).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(origin: &str) -> ConsoleConfig {
        ConsoleConfig { endpoints: vec![], tls: None, origin: origin.to_string(), dev_sign_in: None, oidc: None }
    }

    #[test]
    fn cookies_are_secure_except_plain_http_on_loopback() {
        assert!(!config("http://127.0.0.1:7500").secure_cookies());
        assert!(!config("http://localhost:7500").secure_cookies());
        assert!(!config("http://[::1]:7500").secure_cookies());
        assert!(config("http://desk.example.com").secure_cookies());
        assert!(config("https://127.0.0.1:7500").secure_cookies());
    }
}
