//! `gavel mcp`: the MCP gateway ([`gavel_mcp`]) as a process, and `gavel
//! mcp check`, which validates its configuration against the upstream tools
//! and the cluster (docs/mcp.md).
//!
//! Two identities meet here. The global options are the gateway's own
//! credentials, a principal with the `worker` grant: it runs the governed
//! tools' attempts. Agents bring their own Gavel tokens (the HTTP bearer
//! token, or `--agent-token-file` for the one stdio client), which the
//! gateway forwards to the cluster: an agent's calls are its own.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, Subcommand};
use gavel_client::{CancellationToken, Client, ClientConfig};
use gavel_mcp::{ClusterAccess, Config, Options, Serve};

use crate::commands::GlobalArgs;
use crate::node_security::NodeUsageError;

/// `gavel mcp`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct McpArgs {
    /// `check`; without one, run the gateway.
    #[command(subcommand)]
    pub command: Option<McpCommand>,
    /// The gateway's configuration (TOML: upstream servers and governed tools).
    #[arg(long, env = "GAVEL_MCP_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Serve streamable HTTP at `http://ADDR/mcp` instead of stdio; agents
    /// send their Gavel token as `Authorization: Bearer <token>`.
    #[arg(long, env = "GAVEL_MCP_HTTP", value_name = "ADDR")]
    pub http: Option<SocketAddr>,
    /// A `Host` header to accept besides loopback names (repeat), for a
    /// gateway behind a proxy.
    #[arg(long = "allow-host", value_name = "HOST")]
    pub allow_hosts: Vec<String>,
    /// Serve HTTP on a non-loopback address without TLS (bearer tokens
    /// would cross the network in plaintext; put a TLS proxy in front).
    #[arg(long)]
    pub insecure_http: bool,
    /// The stdio client's Gavel token (a file); without it, governed tools
    /// refuse over stdio.
    #[arg(long, env = "GAVEL_MCP_AGENT_TOKEN_FILE", value_name = "FILE")]
    pub agent_token_file: Option<PathBuf>,
    /// Run no worker: another gateway instance runs the governed tools.
    #[arg(long)]
    pub no_worker: bool,
    /// The worker id its leases record (default: `gavel-mcp-<random>`).
    #[arg(long, env = "GAVEL_MCP_WORKER_ID", value_name = "ID")]
    pub worker_id: Option<String>,
    /// The cluster and the gateway's own credentials (the worker's).
    #[command(flatten, next_help_heading = "Global options")]
    pub global: GlobalArgs,
}

/// `gavel mcp` verbs.
#[derive(Debug, Subcommand)]
pub enum McpCommand {
    /// Check a configuration against the upstream tools and, with
    /// credentials, the cluster's capabilities and policies.
    Check(CheckArgs),
}

/// `gavel mcp check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The configuration file.
    pub config: PathBuf,
    /// Register each governed capability the cluster lacks or holds with
    /// other terms (needs the admin grant).
    #[arg(long)]
    pub register: bool,
    /// Check the upstreams only; do not ask the cluster.
    #[arg(long)]
    pub offline: bool,
    /// The cluster and your credentials.
    #[command(flatten, next_help_heading = "Global options")]
    pub global: GlobalArgs,
}

fn read_config(path: &Path) -> anyhow::Result<Config> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Config::parse(&text).map_err(|error| NodeUsageError(format!("{}: {error}", path.display())).into())
}

/// Runs `gavel mcp` (the gateway, until Ctrl-C, SIGTERM or the stdio client
/// leaves) or `gavel mcp check`.
pub async fn run(args: McpArgs) -> anyhow::Result<()> {
    if let Some(McpCommand::Check(check)) = args.command {
        return run_check(check).await;
    }
    let Some(path) = &args.config else {
        return Err(NodeUsageError("gavel mcp needs --config FILE (or GAVEL_MCP_CONFIG)".to_string()).into());
    };
    let config = read_config(path)?;
    let endpoints = args.global.endpoint_list();
    let worker = args.global.client_config().map_err(|error| NodeUsageError(error.to_string()))?;
    // Agents reach the cluster over the same TLS, as themselves: the
    // gateway's own certificate and token stay out of their calls.
    let agent_tls = worker.tls.clone().map(|tls| gavel_client::ClientTls { identity: None, ..tls });
    let cluster = ClusterAccess { endpoints, config: ClientConfig { tls: agent_tls, token: None, ..worker.clone() } };
    let serve = match args.http {
        Some(listen) => {
            if !listen.ip().is_loopback() && !args.insecure_http {
                return Err(NodeUsageError(format!(
                    "--http {listen} is not a loopback address: agents' tokens would cross the network in \
                     plaintext; serve on loopback behind a TLS proxy, or pass --insecure-http"
                ))
                .into());
            }
            Serve::Http { listen, allowed_hosts: args.allow_hosts }
        }
        None => {
            let token = match &args.agent_token_file {
                Some(file) => Some(
                    std::fs::read_to_string(file)
                        .with_context(|| format!("reading {}", file.display()))?
                        .trim()
                        .to_string(),
                ),
                None => None,
            };
            Serve::Stdio { token }
        }
    };
    let worker_id = args.worker_id.unwrap_or_else(|| format!("gavel-mcp-{}", &uuid_like()));
    let options = Options { config, cluster, worker: (!args.no_worker).then_some(worker), worker_id, serve };
    let shutdown = CancellationToken::new();
    let signalled = shutdown.clone();
    tokio::spawn(async move {
        crate::console::shutdown_signal().await;
        signalled.cancel();
    });
    gavel_mcp::run(options, shutdown).await.map_err(reported)
}

/// A gateway error as the binary reports it: a configuration that does not
/// parse or does not match the upstreams or the cluster exits 2, like every
/// usage error.
fn reported(error: gavel_mcp::McpError) -> anyhow::Error {
    match error {
        gavel_mcp::McpError::Config(_) | gavel_mcp::McpError::Check(_) => NodeUsageError(error.to_string()).into(),
        other => anyhow::anyhow!(other),
    }
}

async fn run_check(args: CheckArgs) -> anyhow::Result<()> {
    let config = read_config(&args.config)?;
    let client: Option<Client> = if args.offline {
        None
    } else {
        Some(args.global.client().map_err(|error| NodeUsageError(error.to_string()))?)
    };
    let lines = gavel_mcp::check(&config, client.as_ref(), args.register).await.map_err(reported)?;
    for line in lines {
        println!("{line}");
    }
    println!("gavel mcp check: {} governed tool(s), configuration OK", config.tools.len());
    Ok(())
}

/// A short random suffix for the default worker id.
fn uuid_like() -> String {
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |elapsed| elapsed.as_nanos());
    format!("{:x}-{}", nanos & 0xffff_ffff, std::process::id())
}
