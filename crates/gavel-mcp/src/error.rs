//! [`McpError`]: why the gateway could not start or check its configuration.

/// A failure of the gateway as a whole (a single call's failure is an MCP
/// error or a tool result instead).
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    /// The configuration file does not parse or contradicts itself.
    #[error("configuration: {0}")]
    Config(String),
    /// An upstream server could not be started, reached or listed.
    #[error("upstream {server}: {message}")]
    Upstream {
        /// The upstream server's configured name.
        server: String,
        /// What went wrong.
        message: String,
    },
    /// The configuration does not match the upstream tools or the cluster.
    #[error("check failed: {0}")]
    Check(String),
    /// A call to the cluster failed.
    #[error("cluster: {0}")]
    Cluster(#[from] gavel_client::Error),
    /// Serving MCP failed (a socket, stdio).
    #[error("serving: {0}")]
    Serve(String),
}
