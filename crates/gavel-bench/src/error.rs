//! The benchmark's errors: a run that could not be carried out. (A run that
//! was carried out but failed a self-check is not an error: its outcome is
//! not ok.)

/// Why a benchmark run could not be carried out.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// Flags that contradict each other or are out of range.
    #[error("{0}")]
    Invalid(String),
    /// The local cluster could not be found, started or driven.
    #[error("cluster: {0}")]
    Cluster(#[from] gavel_testkit::Error),
    /// A call the run depends on (a registration, a fill call) failed.
    #[error("{action}: {source}")]
    Client {
        /// What the call was for.
        action: String,
        /// The SDK's error.
        #[source]
        source: gavel_client::Error,
    },
    /// A raw gRPC call of a figure failed.
    #[error("{action}: {status:?}")]
    Rpc {
        /// What the call was for.
        action: String,
        /// The gRPC status.
        status: tonic::Status,
    },
    /// The cluster answered something the run cannot go on from.
    #[error("{0}")]
    Unexpected(String),
    /// A wait ran past its bound.
    #[error("{0}")]
    Timeout(String),
    /// A data directory or node log could not be read or created.
    #[error("{action}: {source}")]
    Io {
        /// What was being done.
        action: String,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    /// Writing the report to the output failed.
    #[error("writing the report: {0}")]
    Output(#[from] std::io::Error),
    /// A figure could not be encoded as JSON.
    #[error("encoding the report: {0}")]
    Json(#[from] serde_json::Error),
    /// A task of the load generator panicked or was cancelled.
    #[error("load generator task: {0}")]
    Task(#[from] tokio::task::JoinError),
    /// `/proc` could not be read or parsed.
    #[error("{0}")]
    Procfs(#[from] crate::procfs::ProcfsError),
    /// The network namespaces of a partition fault could not be set up or driven.
    #[error("network: {0}")]
    Network(#[from] gavel_chaos::net::NetError),
    /// Ctrl-C arrived during the run.
    #[error("interrupted")]
    Interrupted,
    /// The scale run's watchdog stopped it (memory, disk or deadline); its nodes were killed.
    #[error("watchdog: {0}; the run was stopped and its nodes killed")]
    Watchdog(String),
    /// The scale run would not fit: it was not started.
    #[error("{0}")]
    WouldNotFit(String),
}

impl BenchError {
    /// A [`BenchError::Client`] for `action`.
    pub(crate) fn client(action: impl Into<String>) -> impl FnOnce(gavel_client::Error) -> BenchError {
        let action = action.into();
        move |source| BenchError::Client { action, source }
    }

    /// A [`BenchError::Rpc`] for `action`.
    pub(crate) fn rpc(action: impl Into<String>) -> impl FnOnce(tonic::Status) -> BenchError {
        let action = action.into();
        move |status| BenchError::Rpc { action, status }
    }

    /// A [`BenchError::Io`] for `action`.
    pub(crate) fn io(action: impl Into<String>) -> impl FnOnce(std::io::Error) -> BenchError {
        let action = action.into();
        move |source| BenchError::Io { action, source }
    }
}
