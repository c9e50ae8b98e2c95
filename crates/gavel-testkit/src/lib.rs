//! The one process-cluster kit of Gavel: every harness that runs real `gavel
//! node` processes (the chaos harness, the benchmark, `gavel dev` and the
//! process-level tests) starts and drives them through this crate.
//!
//! - [`ClusterSpec`]: what to start (node count, binary, data root, flags and
//!   environment for every node or one, [`RaftTimings`], [`SnapshotPolicy`]).
//! - [`Launcher`]: where a node listens and how its process is started.
//!   [`Loopback`] (127.0.0.1, free or consecutive ports) lives here; the
//!   network-namespace launcher lives in `gavel-chaos` and implements the
//!   same trait.
//! - [`Cluster`]: spawn, SIGKILL, SIGSTOP/SIGCONT, SIGTERM, restart on the
//!   same data, `ClusterService.Status` over gRPC, wait for a leader, wait
//!   for convergence. Dropping it kills every process it started.
//! - [`resolve_gavel_binary`], [`free_port`], [`wall_clock_ms`], and
//!   [`eventually`] for bounded polling.
//!
//! - Security: a [`ClusterSpec`] runs its nodes `--insecure` (the default)
//!   or, with [`Security::Secure`], over TLS with a CA, node certificates
//!   (naming each node's address), an admin certificate and a token key that
//!   the kit creates with `gavel-pki` in `data_root/certs`. Tests then build
//!   clients as the admin or as any principal: [`Cluster::credentials`]
//!   issues a client certificate on demand, [`Cluster::token`] a token, and
//!   [`Cluster::client_config`] puts either into a `gavel_client::ClientConfig`.
//!
//! It must not depend on the node's internals (`gavel-raft`, `gavel-server`,
//! the state machine of `gavel-core`; only `gavel-pki` brings in
//! `gavel_core::Principal`): it talks to nodes only through their command
//! line and the public gRPC API of `gavel-proto`. It never runs `cargo`.

mod binary;
mod cluster;
mod error;
mod launcher;
mod spec;
mod status;

pub use binary::{resolve_gavel_binary, GAVEL_BIN};
pub use cluster::{Cluster, Converged};
pub use error::Error;
pub use launcher::{Launcher, Loopback};
pub use spec::{ClusterSpec, RaftTimings, SecureSpec, Security, SnapshotPolicy};
pub use status::{
    channel, channel_with, find_leader, find_leader_with, leader_of, status, status_with, wait_applied,
    wait_applied_with,
};

/// Milliseconds since the Unix epoch on this machine's clock (0 before 1970).
pub fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX))
}

/// A free loopback port: bound to `127.0.0.1:0`, then released for a node to
/// take. Another process may grab it in between; that race is accepted.
pub fn free_port() -> Result<u16, Error> {
    let listener =
        std::net::TcpListener::bind("127.0.0.1:0").map_err(|source| Error::io("binding a free port", source))?;
    let addr = listener.local_addr().map_err(|source| Error::io("reading a free port", source))?;
    Ok(addr.port())
}

/// Calls `check` every `interval` until it yields a value, for at most
/// `limit`; `None` when it never did.
pub async fn eventually<T, F, Fut>(limit: std::time::Duration, interval: std::time::Duration, mut check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let started = std::time::Instant::now();
    loop {
        if let Some(value) = check().await {
            return Some(value);
        }
        if started.elapsed() >= limit {
            return None;
        }
        tokio::time::sleep(interval).await;
    }
}
