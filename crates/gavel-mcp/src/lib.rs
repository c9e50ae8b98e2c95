//! `gavel-mcp`: `gavel mcp`, an MCP gateway in front of upstream MCP
//! servers (docs/mcp.md).
//!
//! Agents list and call the upstream tools through it. A tool the
//! configuration ([`Config`]) does not govern is forwarded as it is. A
//! governed call becomes a Gavel execution submitted with the agent's own
//! token ([`Gateway`]); when it needs an approval the call answers with an
//! MCP Tasks-extension task whose id is the execution id ([`tasks`]), and
//! `tasks/get` on any gateway instance answers from the cluster, spending
//! the approval once when it has been given. The gateway is also the
//! worker of its governed tools ([`worker`]): it runs each leased attempt
//! as one upstream call, under the lease, so Gavel's retry rules decide
//! whether a call a crash interrupted may run again.
//!
//! Built on the Rust MCP SDK `rmcp` (protocol 2026-07-28 and earlier, the
//! Tasks extension, stdio and streamable HTTP) and on the Gavel SDK: like
//! the console, it reaches the cluster through `gavel-client` only, and
//! keeps no state of its own.

mod config;
mod error;
mod gateway;
pub mod tasks;
mod upstream;
pub mod worker;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use gavel_client::{pb, CancellationToken, Client, ClientConfig};
use rmcp::ServiceExt;

pub use config::{Config, Governed, RetryRule, ServerConfig, ToolRule};
pub use error::McpError;
pub use gateway::{ClusterAccess, Exposed, Gateway};
pub use upstream::Upstream;

/// How the gateway serves its agents.
#[derive(Debug, Clone)]
pub enum Serve {
    /// One client on stdin/stdout, authenticated by the token given here.
    Stdio {
        /// The client's Gavel token; without it governed tools refuse.
        token: Option<String>,
    },
    /// Streamable HTTP at `/mcp`; each request carries its agent's bearer token.
    Http {
        /// The address to listen on.
        listen: SocketAddr,
        /// Host names (`Host` header) accepted besides loopback ones.
        allowed_hosts: Vec<String>,
    },
}

/// Everything [`run`] needs.
pub struct Options {
    /// The parsed configuration.
    pub config: Config,
    /// The cluster, as agents reach it (TLS, no identity of the gateway's).
    pub cluster: ClusterAccess,
    /// The gateway's own credentials as the worker of its governed tools;
    /// `None` runs no worker (another gateway instance runs them).
    pub worker: Option<ClientConfig>,
    /// The worker id its leases record.
    pub worker_id: String,
    /// How to serve.
    pub serve: Serve,
}

/// Starts the upstreams, the worker and the MCP server, and runs until
/// `shutdown` fires (or the stdio client leaves).
pub async fn run(options: Options, shutdown: CancellationToken) -> Result<(), McpError> {
    let upstreams = Arc::new(upstream::connect_all(&options.config.servers).await?);
    let problems = tool_problems(&options.config, &upstreams);
    if !problems.is_empty() {
        return Err(McpError::Check(problems.join("; ")));
    }
    let stdio_token = match &options.serve {
        Serve::Stdio { token } => token.clone(),
        Serve::Http { .. } => None,
    };
    let gateway = Gateway::new(&options.config, upstreams.clone(), options.cluster.clone(), stdio_token);
    let routes: BTreeMap<String, worker::Route> = gateway
        .exposed()
        .iter()
        .filter_map(|exposed| {
            let governed = exposed.governed.as_ref()?;
            let route = worker::Route {
                upstream: exposed.upstream,
                tool: exposed.upstream_name.clone(),
                idempotency_key_argument: governed.idempotency_key_argument.clone(),
            };
            Some((governed.spec.id.clone(), route))
        })
        .collect();
    let worker = match options.worker {
        Some(config) if !routes.is_empty() => Some(tokio::spawn(worker::run(
            options.cluster.endpoints.clone(),
            config,
            upstreams.clone(),
            Arc::new(routes),
            options.worker_id.clone(),
            shutdown.clone(),
        ))),
        _ => None,
    };
    let served = match options.serve {
        Serve::Stdio { .. } => serve_stdio(gateway, shutdown.clone()).await,
        Serve::Http { listen, allowed_hosts } => serve_http(gateway, listen, allowed_hosts, shutdown.clone()).await,
    };
    shutdown.cancel();
    if let Some(worker) = worker {
        match worker.await {
            Ok(Err(error)) => tracing::warn!(%error, "the gateway's worker stopped"),
            Err(error) => tracing::warn!(%error, "the gateway's worker panicked"),
            Ok(Ok(())) => {}
        }
    }
    served
}

async fn serve_stdio(gateway: Gateway, shutdown: CancellationToken) -> Result<(), McpError> {
    let running = gateway.serve(rmcp::transport::stdio()).await.map_err(|error| McpError::Serve(error.to_string()))?;
    tokio::select! {
        ended = running.waiting() => ended.map(|_| ()).map_err(|error| McpError::Serve(error.to_string())),
        _ = shutdown.cancelled() => Ok(()),
    }
}

async fn serve_http(
    gateway: Gateway,
    listen: SocketAddr,
    allowed_hosts: Vec<String>,
    shutdown: CancellationToken,
) -> Result<(), McpError> {
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
    let mut hosts = vec!["localhost".to_string(), "127.0.0.1".to_string(), "::1".to_string()];
    hosts.extend(allowed_hosts);
    // Sessions only for clients of protocol revisions before 2026-07-28
    // (which declare their capabilities once, at initialize); a session
    // holds nothing the cluster does not, so a client whose gateway died
    // initializes again on another and finds its tasks there.
    let config =
        StreamableHttpServerConfig::default().with_allowed_hosts(hosts).with_cancellation_token(shutdown.child_token());
    let service =
        StreamableHttpService::new(move || Ok(gateway.clone()), Arc::new(LocalSessionManager::default()), config);
    let router = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|error| McpError::Serve(format!("listening on {listen}: {error}")))?;
    let bound = listener.local_addr().map_err(|error| McpError::Serve(error.to_string()))?;
    // A response is written in pieces (headers, then SSE events); with
    // Nagle's algorithm on, a piece can wait for the client's delayed ACK,
    // tens of milliseconds per call.
    let listener = axum::serve::ListenerExt::tap_io(listener, |stream: &mut tokio::net::TcpStream| {
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, "TCP_NODELAY not set on an agent's connection");
        }
    });
    // The line a supervisor or test waits for.
    println!("gavel mcp: serving MCP at http://{bound}/mcp");
    axum::serve(listener, router)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
        .map_err(|error| McpError::Serve(error.to_string()))
}

/// What the configuration names that the upstreams do not list.
fn tool_problems(config: &Config, upstreams: &[Upstream]) -> Vec<String> {
    let mut problems = Vec::new();
    for rule in &config.tools {
        let Some(upstream) = upstreams.iter().find(|upstream| upstream.name == rule.server) else {
            problems.push(format!("server {:?} is not connected", rule.server));
            continue;
        };
        if upstream.tool(&rule.tool).is_none() {
            let listed: Vec<&str> = upstream.tools.iter().map(|tool| tool.name.as_ref()).collect();
            problems.push(format!(
                "server {:?} lists no tool {:?} (it lists {})",
                rule.server,
                rule.tool,
                listed.join(", ")
            ));
        }
    }
    problems
}

/// `gavel mcp check`: connects the upstreams, checks every governed tool
/// exists, and, given a cluster client, that each capability is registered
/// as the configuration and the tool's annotations make it (registering it
/// when `register` is set) and that each named policy exists. Returns one
/// line per governed tool; every problem together as an error.
pub async fn check(config: &Config, cluster: Option<&Client>, register: bool) -> Result<Vec<String>, McpError> {
    let upstreams = upstream::connect_all(&config.servers).await?;
    let mut problems = tool_problems(config, &upstreams);
    let mut lines = Vec::new();
    for rule in &config.tools {
        let Some(tool) = upstreams.iter().find(|u| u.name == rule.server).and_then(|u| u.tool(&rule.tool)) else {
            continue;
        };
        let governed = rule.governed(tool.annotations.as_ref());
        let spec = &governed.spec;
        let side_effect = pb::SideEffect::try_from(spec.side_effect).map_or("?", |side| side.as_str_name());
        lines.push(format!(
            "{}.{} -> {} ({}, idempotent {}, approval {})",
            rule.server,
            rule.tool,
            spec.id,
            side_effect.trim_start_matches("SIDE_EFFECT_").to_lowercase(),
            spec.idempotent,
            if spec.approval.is_some() { "required" } else { "not required" }
        ));
        let Some(client) = cluster else { continue };
        let registered =
            match client.get_capability(pb::GetCapabilityRequest { id: spec.id.clone(), version: None }).await {
                Ok(response) => response.capability.and_then(|capability| capability.spec),
                Err(error) if error.code() == "NOT_FOUND" || error.code() == "CAPABILITY_NOT_FOUND" => None,
                Err(error) => return Err(error.into()),
            };
        let current = registered.as_ref().is_some_and(|registered| same_terms(registered, spec));
        if !current {
            if register {
                let request = pb::RegisterCapabilityRequest { request_id: String::new(), spec: Some(spec.clone()) };
                let registered = client.register_capability(request).await?;
                let version = registered.capability.map_or(0, |capability| capability.version);
                lines.push(format!("  registered {} version {version}", spec.id));
            } else if registered.is_some() {
                problems.push(format!("{} is registered with other terms (run with --register)", spec.id));
            } else {
                problems.push(format!("{} is not registered (run with --register)", spec.id));
            }
        }
        if let Some(policy) = &governed.policy {
            match client.get_policy(pb::GetPolicyRequest { name: policy.clone() }).await {
                Ok(response) if response.policy.is_some() => {}
                Ok(_) => problems.push(format!("{}: policy {policy:?} does not exist", spec.id)),
                Err(error) if error.code() == "NOT_FOUND" => {
                    problems.push(format!("{}: policy {policy:?} does not exist", spec.id))
                }
                Err(error) => return Err(error.into()),
            }
        }
    }
    if problems.is_empty() {
        Ok(lines)
    } else {
        Err(McpError::Check(problems.join("; ")))
    }
}

/// Whether a registered capability has the terms the configuration asks
/// for (what the cluster fills by default is not compared).
fn same_terms(registered: &pb::CapabilitySpec, wanted: &pb::CapabilitySpec) -> bool {
    let retries = |spec: &pb::CapabilitySpec| spec.retry.as_ref().map_or(0, |retry| retry.max_attempts);
    let approval = |spec: &pb::CapabilitySpec| spec.approval.as_ref().is_some_and(|approval| approval.required);
    registered.side_effect == wanted.side_effect
        && registered.risk == wanted.risk
        && registered.idempotent == wanted.idempotent
        && retries(registered) == retries(wanted)
        && approval(registered) == approval(wanted)
        && wanted.timeout_ms.is_none_or(|timeout| registered.timeout_ms == Some(timeout))
}
