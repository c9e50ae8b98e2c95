//! `gavel dev`: a local three-node cluster as three OS processes on
//! 127.0.0.1, on consecutive ports from `--base-port`: a
//! [`gavel_local::Cluster`] of this very binary, stopped with SIGTERM on
//! Ctrl-C or SIGTERM. The data is kept.
//!
//! It fails loudly, with a non-zero exit: when one of its ports is already in
//! use (checked before any node starts), when the leader that answers on its
//! ports is not one of its own processes, and when one of its nodes exits,
//! during start or later (naming the node, its exit status and its log).
//!
//! Each node serves Prometheus metrics on plain HTTP at its gRPC port + 100
//! (`--metrics-listen`), printed with the node. Its nodes cosign the audit
//! checkpoints (`--audit-checkpoints=true`), as a production cluster's do.
//!
//! The cluster is secure: the kit writes a development CA, node
//! certificates, an admin client certificate (`user:admin`, the cluster's
//! first admin) and a token key pair to `<data dir>/certs`, and the nodes run
//! with `--certs-dir` and `--bootstrap-admin`. Once the cluster runs it prints
//! one `export GAVEL_ENDPOINTS=... GAVEL_CA=... GAVEL_CERT=... GAVEL_KEY=...`
//! line that points the CLI, the SDK and `refund-worker` at it as the admin.
//! In a dev cluster the admin also holds the testkit's `HARNESS_GRANTS`
//! (submitter, act-for, approver, delegate-decide, worker, auditor), so one
//! identity plays agent, approver and worker, naming the persona with
//! `--as`, as an app backend that logs its own users in does. It does not
//! hold `clock` or `self-approval`: nothing in the quick start sends a
//! caller's clock, and a dev admin that could opt approvals out of the
//! self-approval check would hide the refusal the quick start shows. The
//! export line names exactly the grants it holds ([`held_grants`]).

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::time::Duration;

use anyhow::Context;
use gavel_local::{resolve_gavel_binary, Cluster, ClusterSpec, Loopback, Security, HARNESS_GRANTS};
use gavel_pki::{GrantName, Principal, PrincipalKind};

use crate::cli::DevArgs;

/// The grants the dev admin holds, as printed: `admin` (bootstrap) and the
/// harness grants, in that order, comma-separated.
fn held_grants() -> String {
    std::iter::once(GrantName::Admin).chain(HARNESS_GRANTS).map(GrantName::as_str).collect::<Vec<_>>().join(", ")
}

/// How long `gavel dev` waits for a leader before giving up.
const LEADER_WAIT: Duration = Duration::from_secs(30);
/// How long children get to stop after SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(10);
/// How often a running `gavel dev` checks that its nodes still run.
const LIVENESS_INTERVAL: Duration = Duration::from_millis(500);
/// The nodes of a dev cluster.
const NODES: u16 = 3;
/// How far above its gRPC port each dev node serves metrics.
const METRICS_PORT_OFFSET: u16 = 100;
/// How far above --base-port the dev console listens (7401 → 7500).
const CONSOLE_PORT_OFFSET: u16 = 99;
/// The personas of the development sign-in and what the dev cluster grants
/// them: an approver scoped to `finance` approvals, an unscoped approver,
/// and a requester.
const PERSONAS: [(&str, &str, &[&str]); 3] =
    [("bob-finance", "approver", &["finance"]), ("carol", "approver", &[]), ("alice", "submitter", &[])];
/// A persona of the development sign-in holding the approver grant, other
/// than `requester` (`kind:id`): how the dev admin, which holds
/// delegate-decide, approves what it requested for another persona
/// (`gavel exec submit`'s hint names it).
pub fn approver_persona(requester: &str) -> Option<String> {
    PERSONAS
        .iter()
        .filter(|(_, grant, _)| *grant == "approver")
        .map(|(id, _, _)| format!("user:{id}"))
        .find(|persona| persona != requester)
}

/// The id of the dev cluster's first admin, `user:admin`.
const ADMIN_ID: &str = "admin";

/// Runs the local cluster until Ctrl-C, SIGTERM or a node's exit.
pub async fn run(args: DevArgs) -> anyhow::Result<()> {
    let ports = ports_from(args.base_port)?;
    check_ports_free(&ports)?;
    let metrics_ports: Vec<u16> = ports.iter().map(|port| metrics_port(*port)).collect();
    check_ports_free(&metrics_ports)?;
    let console_port = match args.console_port {
        Some(port) => port,
        None => args
            .base_port
            .checked_add(CONSOLE_PORT_OFFSET)
            .context("--base-port leaves no room for the console port")?,
    };
    check_ports_free(&[console_port])?;
    let data_dir = match &args.data_dir {
        Some(dir) => dir.clone(),
        None => std::env::temp_dir().join(format!("gavel-dev-{}", std::process::id())),
    };
    println!("gavel dev: data in {}", data_dir.display());
    let admin = Principal::new(PrincipalKind::User, ADMIN_ID).map_err(anyhow::Error::msg)?;
    let mut spec = ClusterSpec::new(resolve_gavel_binary(None)?, &data_dir);
    spec.args = args.timings.to_flags();
    // A dev cluster signs like a production one (SPEC §11): each node keeps
    // a note key and cosigns the audit checkpoints, so `gavel audit keys`,
    // `checkpoint` and `verify --keys` work as docs/audit.md shows. (The
    // kit's clusters default to off, to keep their logs quiet.)
    spec.args.push("--audit-checkpoints=true".to_string());
    if args.log_format == crate::cli::LogFormat::Json {
        spec.args.push("--log-format=json".to_string());
    }
    for (id, port) in (1u64..).zip(&ports) {
        spec.node_args.insert(id, vec![format!("--metrics-listen=127.0.0.1:{}", metrics_port(*port))]);
    }
    spec.security = Security::secure(admin.clone());
    spec.start_timeout = LEADER_WAIT;
    // The signals are taken before the first node starts: a SIGTERM or
    // Ctrl-C that arrives while the cluster starts (a harness that read the
    // `export` line and stops at once) must stop the nodes too, not kill
    // this process by the default action and leave them running.
    let mut stop = Stop::new()?;
    let cluster = Cluster::spawn_with(spec, Loopback::from_base_port(args.base_port))
        .with_context(|| format!("starting the local cluster (node logs in {}/n*.log)", data_dir.display()))?;
    let outcome = async {
        let leader = tokio::select! {
            leader = wait_for_leader(&cluster) => leader?,
            () = stop.requested() => return Ok(()),
        };
        check_own_leader(&cluster, leader)?;
        for id in cluster.ids() {
            let pid = cluster.pid(id).map_or_else(|| "-".to_string(), |pid| pid.to_string());
            let addr = cluster.addr(id).unwrap_or("-");
            let log = cluster.log_path(id).map(|path| path.display().to_string()).unwrap_or_default();
            let metrics = metrics_addr_of(addr);
            println!("gavel dev: node {id} pid {pid} on {addr}, metrics http://{metrics}/metrics, log {log}");
        }
        // One identity plays every role of the quick start (agent, approver,
        // worker), naming the persona with `--as`: the dev admin also holds
        // the harness grants, act-for and delegate-decide included. A
        // production cluster gives each role its own principal.
        cluster
            .grant(&admin, &HARNESS_GRANTS, LEADER_WAIT)
            .await
            .with_context(|| format!("granting {admin} the developer grants"))?;
        let certs = cluster.certs().context("the dev cluster has its certificate directory")?;
        println!(
            "gavel dev: leader is node {leader}. Point the CLI, the SDK and refund-worker at this cluster, \
             as {admin} over TLS (it holds {}; not clock or self-approval; it names personas with --as), with:",
            held_grants()
        );
        println!(
            "export GAVEL_ENDPOINTS={} GAVEL_CA={} GAVEL_CERT={} GAVEL_KEY={}",
            cluster.addrs().join(","),
            certs.ca_cert().display(),
            certs.cert(&admin).display(),
            certs.key(&admin).display()
        );
        println!(
            "gavel dev: grant others with `gavel access grant user:alice submitter`; a token for them: \
             `gavel token issue --certs-dir {} --sub user:alice`; grpcurl: \
             `grpcurl -cacert $GAVEL_CA -cert $GAVEL_CERT -key $GAVEL_KEY {} list`",
            certs.root().display(),
            cluster.addr(leader).unwrap_or("127.0.0.1:7401")
        );
        let console = start_console(&cluster, certs, console_port).await?;
        println!("gavel dev: console {console} (DEVELOPMENT sign-in: pick user:bob-finance, user:carol or user:alice)");
        if !args.notify.is_empty() {
            crate::notify::start_dev(&cluster, &args.notify, &console, &data_dir).await?;
        }
        println!("gavel dev: Ctrl-C stops the cluster");
        watch(&cluster, &mut stop).await
    }
    .await;
    // Waiting for the children to exit blocks; nothing else runs by now.
    let stopped = tokio::task::block_in_place(|| cluster.stop_all(STOP_GRACE));
    println!("gavel dev: stopped; data kept in {}", data_dir.display());
    outcome.and(stopped.context("stopping the nodes"))
}

/// Grants the personas their roles and serves the console on 127.0.0.1 in
/// this process, with a development sign-in signing tokens with the dev
/// cluster's token key; returns its URL.
async fn start_console(cluster: &Cluster, certs: &gavel_pki::CertsDir, port: u16) -> anyhow::Result<String> {
    let client = gavel_client::Client::with_config(&cluster.addrs(), cluster.client_config())?;
    for (id, grant, scope) in PERSONAS {
        let request = gavel_client::pb::GrantRequest {
            grant: Some(gavel_client::pb::AccessGrant {
                principal: format!("user:{id}"),
                grant: grant.to_string(),
                scope: scope.iter().map(|item| (*item).to_string()).collect(),
                skew_ms_max: None,
            }),
            request_id: String::new(),
        };
        client.grant(request).await.with_context(|| format!("granting user:{id} {grant}"))?;
    }
    let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, port))
        .await
        .with_context(|| format!("listening for the console on 127.0.0.1:{port}"))?;
    let origin = format!("http://{}", listener.local_addr()?);
    let personas = PERSONAS.iter().map(|(id, _, _)| format!("user:{id}")).collect();
    let config = gavel_console::ConsoleConfig {
        endpoints: cluster.addrs(),
        tls: Some(gavel_client::ClientTls { ca_pem: std::fs::read_to_string(certs.ca_cert())?, identity: None }),
        origin: origin.clone(),
        dev_sign_in: Some(crate::console::dev_sign_in(&certs.token_key(), personas)?),
        oidc: None,
    };
    tokio::spawn(async move {
        if let Err(error) = gavel_console::serve(listener, config, std::future::pending()).await {
            tracing::error!("the console stopped: {error}");
        }
    });
    Ok(origin)
}

/// Waits up to [`LEADER_WAIT`] for a leader while every node still runs; a
/// node that exits meanwhile (a bad flag, a data directory in use) ends the
/// wait at once with its exit status and log.
async fn wait_for_leader(cluster: &Cluster) -> anyhow::Result<u64> {
    let started = std::time::Instant::now();
    loop {
        cluster.check_alive().context("a node of the local cluster exited during start")?;
        if let Some(leader) = cluster.leader().await {
            cluster.check_alive().context("a node of the local cluster exited during start")?;
            return Ok(leader);
        }
        if started.elapsed() >= LEADER_WAIT {
            anyhow::bail!(
                "no leader within {LEADER_WAIT:?}; see the node logs in {}/n*.log",
                cluster.spec().data_root.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The metrics port of the node on `port`: [`METRICS_PORT_OFFSET`] above it
/// (7501 for 7401), wrapping into the range below for the highest ports.
fn metrics_port(port: u16) -> u16 {
    port.checked_add(METRICS_PORT_OFFSET).unwrap_or(port - METRICS_PORT_OFFSET)
}

/// The metrics address of the node at `addr` (`host:port`).
fn metrics_addr_of(addr: &str) -> String {
    match addr.rsplit_once(':').and_then(|(host, port)| Some((host, port.parse::<u16>().ok()?))) {
        Some((host, port)) => format!("{host}:{}", metrics_port(port)),
        None => "-".to_string(),
    }
}

/// The ports of the three nodes.
fn ports_from(base_port: u16) -> anyhow::Result<Vec<u16>> {
    if base_port == 0 || base_port > u16::MAX - (NODES - 1) {
        anyhow::bail!(
            "--base-port {base_port}: the three nodes need ports {base_port}..{base_port}+2 within 1..=65535"
        );
    }
    Ok((0..NODES).map(|offset| base_port + offset).collect())
}

/// Fails, naming the port, when another process listens on one of `ports`
/// (another `gavel dev` or cluster, say): its nodes would otherwise exit with
/// "Address already in use", or worse, answer for the other cluster.
fn check_ports_free(ports: &[u16]) -> anyhow::Result<()> {
    for port in ports {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, *port));
        if let Err(error) = TcpListener::bind(addr) {
            anyhow::bail!(
                "port {port} ({addr}) is already in use ({error}); another `gavel dev` or cluster may run there. \
                 Stop it, or pick free ports with --base-port"
            );
        }
    }
    Ok(())
}

/// Fails when the leader's port is held by a process that is not this
/// cluster's node (another cluster started on the same ports in between).
fn check_own_leader(cluster: &Cluster, leader: u64) -> anyhow::Result<()> {
    let (Some(pid), Some(addr)) = (cluster.pid(leader), cluster.addr(leader)) else {
        anyhow::bail!("the leader, node {leader}, is not a running node of this cluster");
    };
    let port = addr.rsplit_once(':').and_then(|(_, port)| port.parse::<u16>().ok());
    if let Some(false) = port.and_then(|port| listens_on(pid, port)) {
        anyhow::bail!(
            "the leader answering on {addr} is not this cluster's node {leader} (pid {pid}): another cluster holds \
             that port. Stop it, or pick free ports with --base-port"
        );
    }
    Ok(())
}

/// Whether process `pid` holds the socket listening on TCP `port`, from
/// `/proc`; `None` when that cannot be told (no `/proc`, no such listener).
fn listens_on(pid: u32, port: u16) -> Option<bool> {
    let mut inodes = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else { continue };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // local_address is HEXIP:HEXPORT, state 0A is LISTEN, inode is field 9.
            let (Some(local), Some(state), Some(inode)) = (fields.get(1), fields.get(3), fields.get(9)) else {
                continue;
            };
            let local_port = local.rsplit_once(':').and_then(|(_, hex)| u16::from_str_radix(hex, 16).ok());
            if local_port == Some(port) && *state == "0A" {
                inodes.push(format!("socket:[{inode}]"));
            }
        }
    }
    if inodes.is_empty() {
        return None;
    }
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
    let holds = fds.flatten().filter_map(|fd| std::fs::read_link(fd.path()).ok()).any(|target| {
        let target = target.to_string_lossy();
        inodes.iter().any(|inode| *inode == target)
    });
    Some(holds)
}

/// Waits for Ctrl-C or SIGTERM (a normal stop) or for a node to exit by
/// itself (an error naming the node, its exit status and its log).
async fn watch(cluster: &Cluster, stop: &mut Stop) -> anyhow::Result<()> {
    let mut liveness = tokio::time::interval(LIVENESS_INTERVAL);
    loop {
        tokio::select! {
            () = stop.requested() => return Ok(()),
            _ = liveness.tick() => cluster.check_alive().context("a node of the local cluster stopped")?,
        }
    }
}

/// SIGTERM and SIGINT (Ctrl-C), taken from their default action (ending the
/// process at once) so that `gavel dev` stops its nodes first.
struct Stop {
    terminate: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
}

impl Stop {
    fn new() -> anyhow::Result<Stop> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Stop {
            terminate: signal(SignalKind::terminate()).context("taking SIGTERM")?,
            interrupt: signal(SignalKind::interrupt()).context("taking SIGINT")?,
        })
    }

    /// Resolves at the first SIGTERM or SIGINT since this was made.
    async fn requested(&mut self) {
        tokio::select! {
            _ = self.terminate.recv() => {}
            _ = self.interrupt.recv() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_in_use_is_named() {
        let held = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("a free port");
        let port = held.local_addr().expect("its address").port();
        let error = check_ports_free(&[port]).expect_err("the port is taken");
        assert!(error.to_string().contains(&format!("port {port}")), "{error}");
        assert!(ports_from(u16::MAX).is_err());
        assert_eq!(ports_from(7401).expect("valid"), vec![7401, 7402, 7403]);
    }

    #[test]
    fn the_listener_of_this_process_is_found_in_proc() {
        let held = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("a free port");
        let port = held.local_addr().expect("its address").port();
        if std::path::Path::new("/proc/net/tcp").exists() {
            assert_eq!(listens_on(std::process::id(), port), Some(true));
        }
    }
}
