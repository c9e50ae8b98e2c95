//! A local cluster of real `gavel node` processes: `gavel dev` runs one, and
//! every harness that runs real nodes (the chaos harness, the benchmark and
//! the process-level tests, through `gavel-testkit`) starts and drives them
//! through this crate. It is the one part of the lab the product binary
//! links: it holds no fault injection and no checker.
//!
//! - [`ClusterSpec`]: what to start (node count, binary, data root, flags and
//!   environment for every node or one, [`RaftTimings`], [`SnapshotPolicy`]).
//! - [`Launcher`]: where a node listens and how its process is started.
//!   [`Loopback`] (127.0.0.1, free or consecutive ports) lives here; the
//!   network-namespace launcher lives in `gavel-chaos` and implements the
//!   same trait.
//! - [`Cluster`]: spawn, SIGKILL, SIGSTOP/SIGCONT, SIGTERM, restart on the
//!   same data, `ClusterService.Status` over gRPC, wait for a leader.
//!   Dropping it kills every process it started. (Waiting for the replicas
//!   to converge, a check of the lab's, is `gavel-testkit`'s.)
//! - [`resolve_gavel_binary`], [`free_port`], [`wall_clock_ms`], [`HARNESS_GRANTS`] and
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
pub use cluster::Cluster;
pub use error::Error;
pub use launcher::{Launcher, Loopback};
pub use spec::{ClusterSpec, RaftTimings, SecureSpec, Security, SnapshotPolicy};
pub use status::{
    channel, channel_with, find_leader, find_leader_with, leader_of, status, status_with, wait_applied,
    wait_applied_with,
};

/// The quota change that lifts `principal` to the largest quotas an admin
/// may set (`gavel_core::limits::QUOTA_COUNT_MAX`,
/// `QUOTA_WRITES_PER_SECOND_MAX`, `QUOTA_WRITE_BURST_MAX`; the kit does not
/// depend on the core, and `tests/quotas.rs` checks the numbers agree): what
/// a load generator writing as one principal needs ([`Cluster::set_quota`]).
pub fn unthrottled(principal: &gavel_pki::Principal) -> gavel_proto::v1::SetQuotaRequest {
    gavel_proto::v1::SetQuotaRequest {
        principal: principal.to_string(),
        pending_approvals_max: Some(10_000_000),
        active_executions_max: Some(10_000_000),
        writes_per_second: Some(1_000_000),
        write_burst: Some(10_000_000),
        ..Default::default()
    }
}

/// What a load harness's one principal (the chaos workload, the bench) is
/// granted on a secure cluster to drive every operation: it submits and
/// creates approvals naming its actors, decides them naming its approvers,
/// polls and reports as every worker, and reads the audit trail. No
/// `clock` (no caller clocks are sent), no `self-approval`, no `admin`.
pub const HARNESS_GRANTS: [gavel_pki::GrantName; 6] = [
    gavel_pki::GrantName::Submitter,
    gavel_pki::GrantName::ActFor,
    gavel_pki::GrantName::Approver,
    gavel_pki::GrantName::DelegateDecide,
    gavel_pki::GrantName::Worker,
    gavel_pki::GrantName::Auditor,
];

/// A `Debug`-printed duration (`1.234567s`, `850.1ms`, `12µs`, `5ns`), as
/// the nodes log `took=`, in seconds.
pub fn debug_seconds(printed: &str) -> Option<f64> {
    let (number, scale) = if let Some(value) = printed.strip_suffix("ms") {
        (value, 1e-3)
    } else if let Some(value) = printed.strip_suffix("µs") {
        (value, 1e-6)
    } else if let Some(value) = printed.strip_suffix("ns") {
        (value, 1e-9)
    } else {
        (printed.strip_suffix('s')?, 1.0)
    };
    number.parse::<f64>().ok().map(|value| value * scale)
}

/// Milliseconds since the Unix epoch on this machine's clock (0 before 1970).
pub fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX))
}

/// Where [`free_port`] looks for ports: below Linux's default ephemeral
/// range (`net.ipv4.ip_local_port_range`, 32768–60999), so that no
/// outgoing connection of this or another process is handed the port
/// between the check and the node's bind. A port the kernel hands out for
/// `bind(0)` is from that range, and with thousands of client connections
/// open in parallel tests, one of them took a node's port now and then.
const FREE_PORTS: std::ops::Range<u16> = 20_000..32_000;

/// A free loopback port for a node to take: the next port of
/// [`FREE_PORTS`] (from a start that differs between processes, each
/// port handed out once per process) that can be bound on `127.0.0.1` now.
/// Another process may bind it in between; outgoing connections cannot.
pub fn free_port() -> Result<u16, Error> {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let span = u32::from(FREE_PORTS.end - FREE_PORTS.start);
    let _ = NEXT.compare_exchange(
        u32::MAX,
        std::process::id().wrapping_mul(7_919) % span,
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
    let mut last_error = None;
    for _ in 0..span {
        let offset = NEXT.fetch_add(1, Ordering::Relaxed) % span;
        let port = FREE_PORTS.start + u16::try_from(offset).unwrap_or(0);
        match std::net::TcpListener::bind(("127.0.0.1", port)) {
            Ok(_) => return Ok(port),
            Err(error) => last_error = Some(error),
        }
    }
    Err(Error::io(
        "finding a free port below the ephemeral range",
        last_error.unwrap_or_else(|| std::io::Error::other("no port tried")),
    ))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_ports_are_below_the_ephemeral_range_and_never_handed_out_twice() {
        let ports: Vec<u16> = (0..200).map(|_| free_port().expect("a free port")).collect();
        assert!(ports.iter().all(|port| FREE_PORTS.contains(port)), "{ports:?}");
        let distinct: std::collections::BTreeSet<&u16> = ports.iter().collect();
        assert_eq!(distinct.len(), ports.len(), "a port was handed out twice");
    }
}
