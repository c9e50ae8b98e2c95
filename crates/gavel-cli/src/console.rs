//! `gavel console`: the approver's desk ([`gavel_console`]) as its own
//! process, and the development sign-in `gavel dev` gives it: tokens for a
//! picked persona, signed with the dev cluster's token key.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use gavel_client::ClientTls;
use gavel_console::{ConsoleConfig, DevSignIn, OidcSignIn};
use gavel_pki::{Principal, TokenClaims, TokenKey, DEFAULT_AUDIENCE};

/// `gavel console`.
#[derive(Debug, Clone, Args)]
pub struct ConsoleArgs {
    /// Where to serve HTTP.
    #[arg(long, env = "GAVEL_CONSOLE_LISTEN", default_value = "127.0.0.1:7500")]
    pub listen: SocketAddr,
    /// The URL people reach the console at (its origin), when it is not
    /// `http://<listen>` (behind a TLS-terminating proxy).
    #[arg(long, env = "GAVEL_CONSOLE_PUBLIC_URL")]
    pub public_url: Option<String>,
    /// Cluster nodes, comma-separated `host:port`.
    #[arg(long, env = "GAVEL_ENDPOINTS", default_value = "127.0.0.1:7401,127.0.0.1:7402,127.0.0.1:7403")]
    pub endpoints: String,
    /// The cluster CA certificate (PEM); people's tokens travel only over TLS.
    #[arg(long, env = "GAVEL_CA", value_name = "FILE")]
    pub ca: PathBuf,
    /// DEVELOPMENT ONLY: sign people in as any principal they type, with
    /// tokens signed by this token key (Ed25519 PKCS#8 PEM). Anyone who
    /// reaches the console can then act as anyone; `gavel dev` uses it.
    #[arg(long, value_name = "FILE")]
    pub dev_sign_in_key: Option<PathBuf>,
    /// Personas offered by the development sign-in, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "user:bob-finance,user:carol,user:alice")]
    pub dev_personas: Vec<String>,
    /// Sign people in with this OpenID Provider (its exact issuer; https,
    /// or http on loopback only): authorization code with PKCE. Give the
    /// nodes the same issuer with `--oidc-audience` = the client id.
    #[arg(
        long,
        env = "GAVEL_OIDC_ISSUER",
        value_name = "URL",
        requires = "oidc_client_id",
        conflicts_with = "dev_sign_in_key"
    )]
    pub oidc_issuer: Option<String>,
    /// The console's OAuth client id at the provider.
    #[arg(long, env = "GAVEL_OIDC_CLIENT_ID", value_name = "ID", requires = "oidc_issuer")]
    pub oidc_client_id: Option<String>,
    /// A file holding the client secret, for a confidential client; without
    /// it the console is a public client (PKCE only).
    #[arg(long, env = "GAVEL_OIDC_CLIENT_SECRET_FILE", value_name = "FILE", requires = "oidc_issuer")]
    pub oidc_client_secret_file: Option<PathBuf>,
    /// The provider's CA, principal claim and prefix (the nodes' own).
    #[command(flatten)]
    pub oidc: crate::cli::OidcPrincipalArgs,
}

/// The OpenID Connect sign-in of `--oidc-*`, when given.
fn oidc_sign_in(args: &ConsoleArgs) -> anyhow::Result<Option<OidcSignIn>> {
    let (Some(issuer), Some(client_id)) = (&args.oidc_issuer, &args.oidc_client_id) else {
        return Ok(None);
    };
    let client_secret = match &args.oidc_client_secret_file {
        None => None,
        Some(path) => {
            let secret = std::fs::read_to_string(path)
                .with_context(|| format!("reading the client secret {}", path.display()))?;
            Some(secret.trim_end().to_string()).filter(|secret| !secret.is_empty())
        }
    };
    let settings = args.oidc.provider_settings(issuer, client_id, gavel_oidc::JwksSource::Discovery);
    let provider = gavel_oidc::Provider::new(settings).context("--oidc-issuer")?;
    Ok(Some(OidcSignIn { provider: Arc::new(provider), client_id: client_id.clone(), client_secret }))
}

/// A development sign-in that mints tokens with the key at `key_path`.
pub fn dev_sign_in(key_path: &Path, personas: Vec<String>) -> anyhow::Result<DevSignIn> {
    let key = TokenKey::load_file(key_path)
        .with_context(|| format!("loading the token key {} for the development sign-in", key_path.display()))?;
    let key = Arc::new(key);
    let mint = move |principal: &str, ttl: Duration| -> Result<String, String> {
        let principal = Principal::parse(principal)?;
        key.issue(&TokenClaims::new(&principal, DEFAULT_AUDIENCE, ttl)).map_err(|error| error.to_string())
    };
    Ok(DevSignIn { personas, mint: Arc::new(mint) })
}

/// The console's settings from its flags.
pub fn config(args: &ConsoleArgs, listen: SocketAddr) -> anyhow::Result<ConsoleConfig> {
    let ca_pem = std::fs::read_to_string(&args.ca).with_context(|| format!("reading the CA {}", args.ca.display()))?;
    let dev_sign_in = match &args.dev_sign_in_key {
        Some(path) => Some(dev_sign_in(path, args.dev_personas.clone())?),
        None => None,
    };
    Ok(ConsoleConfig {
        endpoints: args.endpoints.split(',').map(str::trim).filter(|e| !e.is_empty()).map(String::from).collect(),
        tls: Some(ClientTls { ca_pem, identity: None }),
        origin: args.public_url.clone().unwrap_or_else(|| format!("http://{listen}")).trim_end_matches('/').to_string(),
        dev_sign_in,
        oidc: oidc_sign_in(args)?,
    })
}

/// Runs `gavel console` until Ctrl-C or SIGTERM.
pub async fn run(args: ConsoleArgs) -> anyhow::Result<()> {
    let listener =
        tokio::net::TcpListener::bind(args.listen).await.with_context(|| format!("listening on {}", args.listen))?;
    let listen = listener.local_addr()?;
    let config = config(&args, listen)?;
    if config.dev_sign_in.is_some() {
        println!("gavel console: DEVELOPMENT sign-in is on: anyone who reaches it may sign in as anyone");
    }
    if let Some(oidc) = &config.oidc {
        println!(
            "gavel console: sign-in with {} as client {}; register the redirect URI {}{}",
            oidc.provider.rules().issuer,
            oidc.client_id,
            config.origin,
            gavel_console::CALLBACK_PATH
        );
    }
    println!("gavel console: {}", config.origin);
    gavel_console::serve(listener, config, shutdown_signal()).await.context("serving the console")
}

/// Resolves on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
}
