//! `gavel notify`: the approver's desk's notifier ([`gavel_notify`]) as its
//! own process, with its own credentials (the global options: a client
//! certificate or a token file).

use std::io::Read;
use std::path::{Path, PathBuf};

use std::time::Duration;

use clap::Args;
use gavel_notify::limits::{GENERIC_POSTS_PER_SECOND, SLACK_POSTS_PER_SECOND};
use gavel_notify::webhook::{read_secret, Webhook};
use gavel_notify::{Notifier, NotifierConfig, NotifyError};

use crate::node_security::NodeUsageError;

use crate::commands::GlobalArgs;

/// `gavel notify`.
#[derive(Debug, Args)]
pub struct NotifyArgs {
    /// Where to post: `slack=URL` (a Slack incoming webhook) or
    /// `generic=URL` (signed JSON); repeat for several.
    #[arg(long = "webhook", value_name = "KIND=URL", required = true)]
    pub webhooks: Vec<String>,
    /// The HMAC-SHA256 key of the generic webhooks (16 to 4,096 bytes; a
    /// trailing line break is ignored).
    #[arg(long, env = "GAVEL_NOTIFY_HMAC_SECRET_FILE", value_name = "FILE")]
    pub hmac_secret_file: Option<PathBuf>,
    /// The console's URL; each post links to `<URL>/approvals/<id>`.
    #[arg(long, env = "GAVEL_CONSOLE_URL", value_name = "URL")]
    pub console_url: String,
    /// Certificates (PEM) to trust for `https` webhooks besides the web
    /// PKI's roots, for a receiver with a private CA.
    #[arg(long, env = "GAVEL_NOTIFY_WEBHOOK_CA", value_name = "FILE")]
    pub webhook_ca: Option<PathBuf>,
    /// The directory of the stored cursor (`notify-state.json`); one
    /// notifier per directory.
    #[arg(long, env = "GAVEL_NOTIFY_STATE_DIR", value_name = "DIR")]
    pub state_dir: PathBuf,
    /// Posts per second to each Slack webhook (Slack's documented limit
    /// for incoming webhooks is about one a second).
    #[arg(
        long,
        env = "GAVEL_NOTIFY_SLACK_POSTS_PER_SECOND",
        value_name = "RATE",
        default_value_t = SLACK_POSTS_PER_SECOND
    )]
    pub slack_posts_per_second: f64,
    /// Posts per second to each generic webhook.
    #[arg(
        long,
        env = "GAVEL_NOTIFY_GENERIC_POSTS_PER_SECOND",
        value_name = "RATE",
        default_value_t = GENERIC_POSTS_PER_SECOND
    )]
    pub generic_posts_per_second: f64,
    /// The cluster and the notifier's credentials: give it a principal with
    /// the `approver` grant (scoped to the approval types it announces) or
    /// `auditor`; it posts what that principal may read.
    #[command(flatten, next_help_heading = "Global options")]
    pub global: GlobalArgs,
}

/// A notifier error as the binary reports it: its stable code first; a bad
/// flag (`NOTIFY_CONFIG`) exits 2 like every usage error.
fn reported(error: NotifyError) -> anyhow::Error {
    let message = format!("{}: {error}", error.code());
    match error {
        NotifyError::Config(_) => NodeUsageError(message).into(),
        _ => anyhow::anyhow!(message),
    }
}

/// Runs `gavel notify` until Ctrl-C or SIGTERM.
pub async fn run(args: NotifyArgs) -> anyhow::Result<()> {
    let secret = args.hmac_secret_file.as_deref().map(read_secret).transpose().map_err(reported)?;
    let webhooks = args
        .webhooks
        .iter()
        .map(|text| Webhook::parse(text, secret.as_ref()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(reported)?;
    let client = args.global.client().map_err(|error| NodeUsageError(error.to_string()))?;
    let webhook_ca_pem = match &args.webhook_ca {
        Some(path) => Some(std::fs::read_to_string(path).map_err(|error| {
            reported(NotifyError::Config(format!("reading the webhook CA {}: {error}", path.display())))
        })?),
        None => None,
    };
    let config = NotifierConfig {
        webhook_ca_pem,
        slack_posts_per_second: args.slack_posts_per_second,
        generic_posts_per_second: args.generic_posts_per_second,
        ..NotifierConfig::new(webhooks, args.console_url, args.state_dir)
    };
    let notifier = Notifier::start(client, config).await.map_err(reported)?;
    println!("gavel notify: following the cluster from cursor {}", notifier.state().cursor);
    let state = notifier.run(crate::console::shutdown_signal()).await.map_err(reported)?;
    let counts = &state.counts;
    println!(
        "gavel notify: stopped at cursor {}: {} delivered ({} redelivered), {} refused, {} abandoned, {} skipped",
        state.cursor, counts.delivered, counts.redelivered, counts.refused, counts.abandoned, counts.skipped
    );
    Ok(())
}

/// The principal of the notifier `gavel dev --notify` runs: an unscoped
/// approver, so it announces every approval of the dev cluster.
const DEV_NOTIFIER: &str = "service:notify";

/// `gavel dev --notify KIND=URL...`: a notifier in the dev process beside
/// the console, authenticated by a client certificate the dev cluster
/// issues to [`DEV_NOTIFIER`]; its state in `<data dir>/notify`, the generic
/// webhooks' HMAC secret (32 random bytes, hex) in
/// `<data dir>/notify-hmac.secret`, printed.
pub async fn start_dev(
    cluster: &gavel_local::Cluster,
    webhooks: &[String],
    console_url: &str,
    data_dir: &Path,
) -> anyhow::Result<()> {
    let principal = gavel_pki::Principal::parse(DEV_NOTIFIER).map_err(anyhow::Error::msg)?;
    cluster.grant(&principal, &[gavel_pki::GrantName::Approver], Duration::from_secs(30)).await?;
    let secret_path = data_dir.join("notify-hmac.secret");
    if !secret_path.exists() {
        let mut random = [0u8; 32];
        std::fs::File::open("/dev/urandom")?.read_exact(&mut random)?;
        std::fs::write(&secret_path, hex::encode(random))?;
    }
    let secret = read_secret(&secret_path).map_err(reported)?;
    let webhooks = webhooks
        .iter()
        .map(|text| Webhook::parse(text, Some(&secret)))
        .collect::<Result<Vec<_>, _>>()
        .map_err(reported)?;
    let config = gavel_client::ClientConfig { tls: Some(cluster.credentials(&principal)?), ..Default::default() };
    let client = gavel_client::Client::with_config(&cluster.addrs(), config)?;
    let config = NotifierConfig::new(webhooks, console_url.to_string(), data_dir.join("notify"));
    let notifier = Notifier::start(client, config).await.map_err(reported)?;
    println!(
        "gavel dev: notifier posting new pending approvals as {DEV_NOTIFIER} (generic webhooks signed with the key in {})",
        secret_path.display()
    );
    tokio::spawn(async move {
        if let Err(error) = notifier.run(std::future::pending()).await {
            tracing::error!(code = error.code(), "the notifier stopped: {error}");
        }
    });
    Ok(())
}
