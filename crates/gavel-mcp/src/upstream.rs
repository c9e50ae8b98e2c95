//! The upstream MCP servers: started (a stdio command) or reached (a
//! streamable-HTTP URL) and listed once, then called by the gateway
//! (ungoverned calls) and by its worker (governed ones).

use std::sync::Arc;

use rmcp::model::{CallToolRequestParams, CallToolResponse, Tool};
use rmcp::service::{RunningService, ServiceError};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{RoleClient, ServiceExt};
use tokio::process::{Child, Command};

use crate::config::ServerConfig;
use crate::error::McpError;

/// One connected upstream server and the tools it listed.
pub struct Upstream {
    /// Its configured name.
    pub name: String,
    /// Its tools, as it listed them at start.
    pub tools: Vec<Tool>,
    service: RunningService<RoleClient, ()>,
    /// The child process of a command server; killed when the gateway
    /// drops it. `None` for a URL server.
    _child: Option<Child>,
}

impl Upstream {
    /// Starts the server's command, or reaches its URL, initializes an MCP
    /// session and lists its tools.
    pub async fn connect(config: &ServerConfig) -> Result<Upstream, McpError> {
        let failed = |message: String| McpError::Upstream { server: config.name.clone(), message };
        let (service, child) = match &config.url {
            Some(url) => (connect_http(url).await.map_err(failed)?, None),
            None => {
                let (service, child) = start_command(config).await.map_err(failed)?;
                (service, Some(child))
            }
        };
        let tools = service.peer().list_all_tools().await.map_err(|error| failed(format!("listing tools: {error}")))?;
        Ok(Upstream { name: config.name.clone(), tools, service, _child: child })
    }

    /// The tool named `name`, if this server listed it.
    pub fn tool(&self, name: &str) -> Option<&Tool> {
        self.tools.iter().find(|tool| tool.name == name)
    }

    /// Calls one of its tools once, as given.
    pub async fn call(&self, params: CallToolRequestParams) -> Result<CallToolResponse, ServiceError> {
        self.service.peer().call_tool_once(params).await
    }
}

/// Starts a command server and initializes an MCP session over its stdio.
async fn start_command(config: &ServerConfig) -> Result<(RunningService<RoleClient, ()>, Child), String> {
    let Some((program, arguments)) = config.command.split_first() else {
        return Err("no command".to_string());
    };
    let mut child = Command::new(program)
        .args(arguments)
        .envs(&config.env)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .map_err(|error| format!("starting {program:?}: {error}"))?;
    let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
        return Err("the command's stdio is not piped".to_string());
    };
    let service = ().serve((stdout, stdin)).await.map_err(|error| format!("initializing: {error}"))?;
    Ok((service, child))
}

/// Initializes an MCP session with a streamable-HTTP server. TLS is rustls
/// with ring and the Mozilla roots (webpki-roots), as the rest of Gavel's
/// outbound HTTPS: no OpenSSL, and no dependence on the host's store.
async fn connect_http(url: &str) -> Result<RunningService<RoleClient, ()>, String> {
    let roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|error| format!("TLS: {error}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let client = reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .build()
        .map_err(|error| format!("building the HTTP client: {error}"))?;
    let transport =
        StreamableHttpClientTransport::with_client(client, StreamableHttpClientTransportConfig::with_uri(url));
    ().serve(transport).await.map_err(|error| format!("initializing at {url}: {error}"))
}

/// Connects every configured server, in order.
pub async fn connect_all(servers: &[ServerConfig]) -> Result<Vec<Upstream>, McpError> {
    let mut upstreams = Vec::new();
    for server in servers {
        upstreams.push(Upstream::connect(server).await?);
    }
    Ok(upstreams)
}
