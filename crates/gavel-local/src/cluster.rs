//! [`Cluster`]: the `gavel node` processes of one cluster.
//!
//! Each node's standard output and error are appended to its log file, with
//! a marker line (`===== <label> [<ms>]: ...`) written by the kit at every
//! start, signal and exit, so one file tells a node's whole story across
//! restarts. Only processes this cluster spawned are ever signalled, always
//! by the PID of a child that has not been reaped yet (so the PID cannot
//! have been reused).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use gavel_client::{ClientConfig, ClientTls};
use gavel_pki::{
    create_dev_material, node_hosts, Authority, CertsDir, DevNode, GrantName, Principal, TokenClaims, TokenKey,
    Validity, DEFAULT_AUDIENCE,
};
use gavel_proto::v1::StatusResponse;
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use tonic::transport::Channel;

use crate::status::{self, leader_of};
use crate::{ClusterSpec, Error, Launcher, Loopback, Security};

/// How long the tokens [`Cluster::token`] issues are valid.
const TOKEN_TTL: Duration = Duration::from_secs(3600);

/// How long a pause or resume waits for the kernel to report the new state.
const SIGNAL_SETTLE: Duration = Duration::from_secs(1);
/// Pause between two rounds of a wait.
const POLL_INTERVAL: Duration = Duration::from_millis(50);
/// How often a node's address is asked for again when another node has it.
const PLACE_ATTEMPTS: usize = 8;

impl<L: Launcher + ?Sized> Launcher for Box<L> {
    fn address(&self, id: u64) -> Result<String, Error> {
        (**self).address(id)
    }

    fn command(&self, id: u64, binary: &Path) -> Result<std::process::Command, Error> {
        (**self).command(id, binary)
    }
}

/// One node: fixed coordinates and its current process.
struct Node {
    addr: String,
    data_dir: PathBuf,
    log_path: PathBuf,
    /// A node added later: started with `--join`, not with `--peers`.
    joins: bool,
    process: Mutex<Process>,
}

#[derive(Default)]
struct Process {
    child: Option<Child>,
    paused: bool,
    starts: u32,
    /// How the last process ended when it exited by itself.
    exited: Option<String>,
}

/// A cluster of `gavel node` processes. Process control takes `&self` (each
/// process sits behind its own lock), so one `Arc<Cluster>` can be shared by a
/// fault injector and observers; the blocking calls (kill, pause, resume,
/// restart, stop) are quick, except [`Cluster::stop`], which waits for the
/// exit. Dropping the cluster SIGKILLs and reaps every process it started;
/// the data is kept.
pub struct Cluster {
    spec: ClusterSpec,
    launcher: Box<dyn Launcher>,
    peers: String,
    nodes: BTreeMap<u64, Node>,
    /// The TLS material of a [`Security::Secure`] cluster.
    pki: Option<Pki>,
}

/// What a secure cluster's credentials are made from.
struct Pki {
    certs: CertsDir,
    authority: Authority,
    token_key: TokenKey,
    admin: Principal,
    /// The admin's client TLS: what the kit's own status calls use.
    admin_tls: ClientTls,
    /// Extra SANs of every node certificate.
    hosts: Vec<String>,
}

impl Pki {
    /// Creates (or, on a data root that has them, keeps) the CA and token
    /// key, and issues a certificate to every node and to the admin.
    fn create(root: &Path, admin: &Principal, hosts: &[String], nodes: &BTreeMap<u64, Node>) -> Result<Pki, Error> {
        let dev_nodes: Vec<DevNode> =
            nodes.iter().map(|(id, node)| DevNode { id: *id, hosts: Pki::hosts_of(&node.addr, hosts) }).collect();
        let material = create_dev_material(&root.join("certs"), &dev_nodes, admin)?;
        let read = |path: PathBuf| {
            std::fs::read_to_string(&path).map_err(|source| Error::io(format!("reading {}", path.display()), source))
        };
        let admin_tls = ClientTls {
            ca_pem: material.authority.cert_pem().to_string(),
            identity: Some((read(material.dir.cert(admin))?, read(material.dir.key(admin))?)),
        };
        Ok(Pki {
            certs: material.dir,
            authority: material.authority,
            token_key: material.token_key,
            admin: admin.clone(),
            admin_tls,
            hosts: hosts.to_vec(),
        })
    }

    /// The SANs of a node at `addr`: its host plus the spec's extra hosts.
    fn hosts_of(addr: &str, hosts: &[String]) -> Vec<String> {
        let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let mut all = vec![host.to_string()];
        all.extend(hosts.iter().cloned());
        all
    }

    /// Issues node `id`'s certificate (a node added after the start).
    fn issue_node(&self, id: u64, addr: &str) -> Result<(), Error> {
        let principal = Principal::node(id);
        let issued = self.authority.issue(
            &principal,
            &node_hosts(&Pki::hosts_of(addr, &self.hosts)),
            Validity::leaf_default(),
        )?;
        self.certs.write_certificate(&principal, &issued)?;
        Ok(())
    }
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("peers", &self.peers)
            .field("data_root", &self.spec.data_root)
            .field("launcher", &self.launcher)
            .finish()
    }
}

/// Appends a marker line to a node log.
fn mark(log_path: &Path, label: &str, text: &str) {
    // One write of the whole line: the node appends to the same file, and
    // `writeln!` on a `File` writes each formatted piece with its own call,
    // between which a node's line could land.
    let line = format!("===== {label} [{}]: {text}\n", crate::wall_clock_ms());
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log_path)
        .and_then(|mut log| log.write_all(line.as_bytes()));
    if let Err(error) = written {
        tracing::warn!("cannot write to {}: {error}", log_path.display());
    }
}

fn pid_of(pid: u32) -> Pid {
    Pid::from_raw(i32::try_from(pid).unwrap_or(i32::MAX))
}

impl Cluster {
    /// Starts the spec's nodes on loopback, each on a free port, and waits for
    /// a leader (see [`Cluster::start_with`]).
    pub async fn start(spec: ClusterSpec) -> Result<Cluster, Error> {
        Cluster::start_with(spec, Loopback::free_ports()).await
    }

    /// Places the spec's nodes with `launcher`, spawns them and waits (up to
    /// [`ClusterSpec::start_timeout`]) for a leader. On failure every spawned
    /// process is killed; the error names the log directory.
    pub async fn start_with(spec: ClusterSpec, launcher: impl Launcher + 'static) -> Result<Cluster, Error> {
        let cluster = Cluster::create(spec, Box::new(launcher))?;
        for id in cluster.ids() {
            if let Err(error) = cluster.start_node(id) {
                cluster.shutdown();
                return Err(error);
            }
        }
        if let Err(error) = cluster.wait_for_leader(cluster.spec.start_timeout).await {
            cluster.shutdown();
            return Err(error);
        }
        Ok(cluster)
    }

    /// Places the spec's nodes with `launcher` and spawns them, without
    /// waiting for a leader: for a caller that watches the start itself (as
    /// `gavel dev` does, to fail as soon as a node exits). On failure every
    /// spawned process is killed.
    pub fn spawn_with(spec: ClusterSpec, launcher: impl Launcher + 'static) -> Result<Cluster, Error> {
        let cluster = Cluster::create(spec, Box::new(launcher))?;
        for id in cluster.ids() {
            if let Err(error) = cluster.start_node(id) {
                cluster.shutdown();
                return Err(error);
            }
        }
        Ok(cluster)
    }

    /// The nodes placed, none started.
    fn create(spec: ClusterSpec, launcher: Box<dyn Launcher>) -> Result<Cluster, Error> {
        if spec.nodes == 0 {
            return Err(Error::NoNodes);
        }
        if !spec.binary.is_file() {
            return Err(Error::BinaryNotFound { looked_at: spec.binary.display().to_string() });
        }
        std::fs::create_dir_all(&spec.data_root)
            .map_err(|source| Error::io(format!("creating {}", spec.data_root.display()), source))?;
        let mut nodes = BTreeMap::new();
        for id in 1..=spec.nodes {
            let node = Cluster::place(&spec, launcher.as_ref(), id, false, &nodes)?;
            nodes.insert(id, node);
        }
        let peers = nodes.iter().map(|(id, node)| format!("{id}={}", node.addr)).collect::<Vec<_>>().join(",");
        let pki = match &spec.security {
            Security::Insecure => None,
            Security::Secure(secure) => Some(Pki::create(&spec.data_root, &secure.admin, &secure.hosts, &nodes)?),
        };
        Ok(Cluster { spec, launcher, peers, nodes, pki })
    }

    /// Node `id`'s coordinates. A free port can be handed out twice (it is
    /// released before the node binds it), so an address another node has is
    /// asked for again, a few times.
    fn place(
        spec: &ClusterSpec,
        launcher: &dyn Launcher,
        id: u64,
        joins: bool,
        placed: &BTreeMap<u64, Node>,
    ) -> Result<Node, Error> {
        let taken = |addr: &str| placed.values().any(|node| node.addr == addr);
        let mut addr = launcher.address(id)?;
        for _ in 0..PLACE_ATTEMPTS {
            if !taken(&addr) {
                break;
            }
            addr = launcher.address(id)?;
        }
        if taken(&addr) {
            return Err(Error::Launch { id, detail: format!("{addr} is already another node's address") });
        }
        Ok(Node {
            addr,
            data_dir: spec.data_root.join(format!("n{id}")),
            log_path: spec.data_root.join(format!("n{id}.log")),
            joins,
            process: Mutex::new(Process::default()),
        })
    }

    fn node(&self, id: u64) -> Result<&Node, Error> {
        self.nodes.get(&id).ok_or(Error::UnknownNode(id))
    }

    fn process(node: &Node) -> MutexGuard<'_, Process> {
        node.process.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Reaps the child if it exited by itself (noting it in the log); returns
    /// whether it still runs.
    fn refresh(&self, node: &Node, process: &mut Process) -> bool {
        let Some(child) = process.child.as_mut() else { return false };
        match child.try_wait() {
            Ok(None) => true,
            Ok(Some(status)) => {
                mark(
                    &node.log_path,
                    &self.spec.log_label,
                    &format!("process {} exited by itself: {status}", child.id()),
                );
                process.exited = Some(status.to_string());
                process.child = None;
                process.paused = false;
                false
            }
            Err(error) => {
                tracing::warn!("cannot poll node process {}: {error}", child.id());
                true
            }
        }
    }

    /// Adds a node that is not an initial voter: it gets the next id, an
    /// address from the launcher and `--join` instead of `--peers`. It is not
    /// started (see [`Cluster::start_node`]); making it a member is the
    /// caller's business (`AddLearner`, `Promote`).
    pub fn add_node(&mut self) -> Result<u64, Error> {
        let id = self.nodes.keys().next_back().copied().unwrap_or(0) + 1;
        let node = Cluster::place(&self.spec, self.launcher.as_ref(), id, true, &self.nodes)?;
        if let Some(pki) = &self.pki {
            pki.issue_node(id, &node.addr)?;
        }
        self.nodes.insert(id, node);
        Ok(id)
    }

    /// Replaces node `id`'s own extra flags ([`ClusterSpec::node_args`]) for its next starts.
    pub fn set_node_args(&mut self, id: u64, args: Vec<String>) -> Result<(), Error> {
        self.node(id)?;
        self.spec.node_args.insert(id, args);
        Ok(())
    }

    /// The spec the cluster runs with.
    pub fn spec(&self) -> &ClusterSpec {
        &self.spec
    }

    /// The node ids, in order.
    pub fn ids(&self) -> Vec<u64> {
        self.nodes.keys().copied().collect()
    }

    /// The ids of nodes whose process runs (paused ones included).
    pub fn running(&self) -> Vec<u64> {
        self.nodes
            .iter()
            .filter(|(_, node)| self.refresh(node, &mut Cluster::process(node)))
            .map(|(id, _)| *id)
            .collect()
    }

    /// The ids of nodes that run and are not paused: the ones that can answer.
    pub fn answering(&self) -> Vec<u64> {
        self.nodes
            .iter()
            .filter(|(_, node)| {
                let mut process = Cluster::process(node);
                self.refresh(node, &mut process) && !process.paused
            })
            .map(|(id, _)| *id)
            .collect()
    }

    /// The `--peers` value the initial voters get.
    pub fn peers(&self) -> &str {
        &self.peers
    }

    /// The `host:port` node `id` listens on.
    pub fn addr(&self, id: u64) -> Option<&str> {
        self.nodes.get(&id).map(|node| node.addr.as_str())
    }

    /// Every node's `host:port`, in id order.
    pub fn addrs(&self) -> Vec<String> {
        self.nodes.values().map(|node| node.addr.clone()).collect()
    }

    /// Every node as `http://host:port` (`https://` when secure), in id order.
    pub fn endpoints(&self) -> Vec<String> {
        let scheme = if self.pki.is_some() { "https" } else { "http" };
        self.nodes.values().map(|node| format!("{scheme}://{}", node.addr)).collect()
    }

    /// Node `id`'s data directory.
    pub fn data_dir(&self, id: u64) -> Option<&Path> {
        self.nodes.get(&id).map(|node| node.data_dir.as_path())
    }

    /// Node `id`'s log file.
    pub fn log_path(&self, id: u64) -> Option<&Path> {
        self.nodes.get(&id).map(|node| node.log_path.as_path())
    }

    /// A lazily connected channel to node `id` whose calls time out after
    /// `call_timeout`; over TLS as the admin when the cluster is secure.
    pub fn channel(&self, id: u64, call_timeout: Duration) -> Result<Channel, Error> {
        status::channel_with(&self.node(id)?.addr, call_timeout, self.kit_tls())
    }

    /// The TLS the kit's own calls use: the admin's, when secure.
    fn kit_tls(&self) -> Option<&ClientTls> {
        self.pki.as_ref().map(|pki| &pki.admin_tls)
    }

    fn pki(&self) -> Result<&Pki, Error> {
        self.pki.as_ref().ok_or(Error::Insecure)
    }

    /// Whether the nodes run over TLS with kit-made material.
    pub fn is_secure(&self) -> bool {
        self.pki.is_some()
    }

    /// The certificate directory of a secure cluster (`data_root/certs`).
    pub fn certs(&self) -> Option<&CertsDir> {
        self.pki.as_ref().map(|pki| &pki.certs)
    }

    /// The CA of a secure cluster, to issue unusual certificates (expired,
    /// with other hosts) in a test.
    pub fn authority(&self) -> Option<&Authority> {
        self.pki.as_ref().map(|pki| &pki.authority)
    }

    /// The token signing key of a secure cluster.
    pub fn token_key(&self) -> Option<&TokenKey> {
        self.pki.as_ref().map(|pki| &pki.token_key)
    }

    /// The first admin of a secure cluster.
    pub fn admin(&self) -> Option<&Principal> {
        self.pki.as_ref().map(|pki| &pki.admin)
    }

    /// Client TLS as `principal`: a client certificate issued on demand
    /// (and written to the certificate directory) plus the CA.
    pub fn credentials(&self, principal: &Principal) -> Result<ClientTls, Error> {
        let pki = self.pki()?;
        if *principal == pki.admin {
            return Ok(pki.admin_tls.clone());
        }
        let issued = pki.authority.issue(principal, &[], Validity::leaf_default())?;
        pki.certs.write_certificate(principal, &issued)?;
        Ok(ClientTls {
            ca_pem: pki.authority.cert_pem().to_string(),
            identity: Some((issued.cert_pem, issued.key_pem)),
        })
    }

    /// Client TLS with the CA only, no certificate: for a client that
    /// authenticates with a token.
    pub fn ca_only(&self) -> Result<ClientTls, Error> {
        Ok(ClientTls { ca_pem: self.pki()?.authority.cert_pem().to_string(), identity: None })
    }

    /// A token for `principal`, valid for an hour, for the default audience;
    /// `roles` (when given) down-scopes it.
    pub fn token(&self, principal: &Principal, roles: Option<&[GrantName]>) -> Result<String, Error> {
        let mut claims = TokenClaims::new(principal, DEFAULT_AUDIENCE, TOKEN_TTL);
        if let Some(roles) = roles {
            claims = claims.with_roles(roles);
        }
        Ok(self.pki()?.token_key.issue(&claims)?)
    }

    /// The client configuration of the kit's own calls: plaintext when the
    /// cluster is insecure, TLS as the admin when secure.
    pub fn client_config(&self) -> ClientConfig {
        ClientConfig { tls: self.kit_tls().cloned(), ..ClientConfig::default() }
    }

    /// A client configuration authenticated by `principal`'s certificate.
    pub fn client_config_as(&self, principal: &Principal) -> Result<ClientConfig, Error> {
        Ok(ClientConfig { tls: Some(self.credentials(principal)?), ..ClientConfig::default() })
    }

    /// A client configuration authenticated by a token for `principal`
    /// (down-scoped to `roles` when given), without a client certificate.
    pub fn client_config_with_token(
        &self,
        principal: &Principal,
        roles: Option<&[GrantName]>,
    ) -> Result<ClientConfig, Error> {
        Ok(ClientConfig {
            tls: Some(self.ca_only()?),
            token: Some(self.token(principal, roles)?),
            ..ClientConfig::default()
        })
    }

    /// The security flags node `id` starts with.
    fn security_flags(&self) -> Vec<String> {
        match (&self.spec.security, &self.pki) {
            (Security::Secure(secure), Some(pki)) => vec![
                format!("--certs-dir={}", pki.certs.root().display()),
                format!("--bootstrap-admin={}", secure.admin),
            ],
            _ => vec!["--insecure".to_string()],
        }
    }

    /// Starts node `id` on its existing data, if any. Returns its PID.
    pub fn start_node(&self, id: u64) -> Result<u32, Error> {
        let node = self.node(id)?;
        let mut process = Cluster::process(node);
        if self.refresh(node, &mut process) {
            return Err(Error::AlreadyRunning(id));
        }
        let mut command = self.launcher.command(id, &self.spec.binary)?;
        command
            .arg("node")
            .arg(format!("--id={id}"))
            .arg(format!("--listen={}", node.addr))
            .arg(if node.joins { "--join".to_string() } else { format!("--peers={}", self.peers) })
            .arg(format!("--data-dir={}", node.data_dir.display()))
            .args(self.security_flags())
            .args(self.spec.flags_of(id))
            .envs(self.spec.env_of(id));
        let line = format!(
            "{} {}",
            command.get_program().to_string_lossy(),
            command.get_args().map(|arg| arg.to_string_lossy()).collect::<Vec<_>>().join(" ")
        );
        process.starts += 1;
        mark(&node.log_path, &self.spec.log_label, &format!("start #{} of node {id}: {line}", process.starts));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&node.log_path)
            .map_err(|source| Error::io(format!("opening {}", node.log_path.display()), source))?;
        let stdout = log.try_clone().map_err(|source| Error::io("duplicating the log handle", source))?;
        let child = command
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(log)
            .spawn()
            .map_err(|source| Error::io(format!("spawning `{line}`"), source))?;
        let pid = child.id();
        mark(&node.log_path, &self.spec.log_label, &format!("node {id} has pid {pid}"));
        process.child = Some(child);
        process.paused = false;
        process.exited = None;
        Ok(pid)
    }

    /// SIGKILLs node `id` and reaps it. Returns whether it was running.
    pub fn kill(&self, id: u64) -> Result<bool, Error> {
        let node = self.node(id)?;
        let mut process = Cluster::process(node);
        if !self.refresh(node, &mut process) {
            return Ok(false);
        }
        if let Some(mut child) = process.child.take() {
            let pid = child.id();
            // SIGKILL also ends a stopped process.
            child.kill().map_err(|source| Error::io(format!("SIGKILL to node {id} (pid {pid})"), source))?;
            let status = child.wait().map_err(|source| Error::io(format!("reaping node {id} (pid {pid})"), source))?;
            mark(&node.log_path, &self.spec.log_label, &format!("node {id} (pid {pid}) SIGKILLed: {status}"));
        }
        process.paused = false;
        Ok(true)
    }

    /// Kills node `id` if it runs, then starts it again on the same data.
    /// Returns the new PID.
    pub fn restart(&self, id: u64) -> Result<u32, Error> {
        self.kill(id)?;
        self.start_node(id)
    }

    /// SIGTERMs node `id` (resuming it first if paused) and waits up to
    /// `grace` for it to exit, then SIGKILLs it. Returns whether it was running.
    pub fn stop(&self, id: u64, grace: Duration) -> Result<bool, Error> {
        self.stop_nodes(&[id], grace).map(|stopped| !stopped.is_empty())
    }

    /// [`Cluster::stop`] for every node at once: all get SIGTERM, then all
    /// get `grace` together.
    pub fn stop_all(&self, grace: Duration) -> Result<(), Error> {
        self.stop_nodes(&self.ids(), grace).map(|_| ())
    }

    fn stop_nodes(&self, ids: &[u64], grace: Duration) -> Result<Vec<u64>, Error> {
        let mut stopping = Vec::new();
        for id in ids {
            let node = self.node(*id)?;
            let mut process = Cluster::process(node);
            if !self.refresh(node, &mut process) {
                continue;
            }
            if let Some(child) = process.child.as_ref() {
                let pid = child.id();
                // A stopped process would not act on SIGTERM before SIGCONT.
                let _ = nix::sys::signal::kill(pid_of(pid), Signal::SIGCONT);
                nix::sys::signal::kill(pid_of(pid), Signal::SIGTERM).map_err(|source| Error::Signal {
                    id: *id,
                    pid,
                    signal: Signal::SIGTERM.to_string(),
                    source,
                })?;
                process.paused = false;
                mark(&node.log_path, &self.spec.log_label, &format!("node {id} (pid {pid}) sent SIGTERM"));
                stopping.push(*id);
            }
        }
        let deadline = Instant::now() + grace;
        for id in &stopping {
            let node = self.node(*id)?;
            let mut process = Cluster::process(node);
            let Some(mut child) = process.child.take() else { continue };
            let pid = child.id();
            let status = loop {
                match child.try_wait() {
                    Ok(Some(status)) => break status.to_string(),
                    Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
                    _ => {
                        let _ = child.kill();
                        break format!("SIGKILLed after {grace:?}: {:?}", child.wait());
                    }
                }
            };
            mark(&node.log_path, &self.spec.log_label, &format!("node {id} (pid {pid}) stopped: {status}"));
        }
        Ok(stopping)
    }

    fn signal(&self, id: u64, signal: Signal) -> Result<(), Error> {
        let node = self.node(id)?;
        let mut process = Cluster::process(node);
        if !self.refresh(node, &mut process) {
            return Err(Error::NotRunning(id));
        }
        let pid = process.child.as_ref().map(Child::id).ok_or(Error::NotRunning(id))?;
        // The child is not reaped, so the PID is still ours.
        nix::sys::signal::kill(pid_of(pid), signal).map_err(|source| Error::Signal {
            id,
            pid,
            signal: signal.to_string(),
            source,
        })?;
        process.paused = signal == Signal::SIGSTOP;
        mark(&node.log_path, &self.spec.log_label, &format!("node {id} (pid {pid}) sent {signal}"));
        Ok(())
    }

    /// SIGSTOPs node `id` and waits (up to a second) until the kernel reports
    /// it stopped: signal delivery to a multithreaded process is asynchronous.
    pub fn pause(&self, id: u64) -> Result<(), Error> {
        self.signal(id, Signal::SIGSTOP)?;
        self.await_state(id, true);
        Ok(())
    }

    /// SIGCONTs node `id` and waits (up to a second) until it runs again.
    pub fn resume(&self, id: u64) -> Result<(), Error> {
        self.signal(id, Signal::SIGCONT)?;
        self.await_state(id, false);
        Ok(())
    }

    /// Polls `/proc/<pid>/stat` until the process is (or is no longer) in the
    /// stopped state `T`, for at most [`SIGNAL_SETTLE`]; logs when it never gets there.
    fn await_state(&self, id: u64, stopped: bool) {
        let Some(pid) = self.pid(id) else { return };
        let deadline = Instant::now() + SIGNAL_SETTLE;
        loop {
            let state = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| stat.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next()));
            match state {
                Some(state) if (state == 'T') == stopped => return,
                None => return,
                _ if Instant::now() >= deadline => {
                    tracing::warn!("node {id} (pid {pid}) is in state {state:?} {SIGNAL_SETTLE:?} after the signal");
                    return;
                }
                _ => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    }

    /// Whether node `id`'s process runs (a paused process runs).
    pub fn is_running(&self, id: u64) -> bool {
        self.nodes.get(&id).is_some_and(|node| self.refresh(node, &mut Cluster::process(node)))
    }

    /// Whether node `id` is paused (SIGSTOPped and not resumed).
    pub fn is_paused(&self, id: u64) -> bool {
        self.nodes.get(&id).is_some_and(|node| {
            let mut process = Cluster::process(node);
            self.refresh(node, &mut process) && process.paused
        })
    }

    /// The PID of node `id`'s process, while it runs.
    pub fn pid(&self, id: u64) -> Option<u32> {
        let node = self.nodes.get(&id)?;
        let mut process = Cluster::process(node);
        if self.refresh(node, &mut process) {
            process.child.as_ref().map(Child::id)
        } else {
            None
        }
    }

    /// The PIDs of the running nodes, in id order.
    pub fn pids(&self) -> Vec<u32> {
        self.ids().into_iter().filter_map(|id| self.pid(id)).collect()
    }

    /// Fails with [`Error::NodeExited`] when a node's process exited although
    /// nobody stopped it (a crash, a refused flag, a port in use).
    pub fn check_alive(&self) -> Result<(), Error> {
        for (id, node) in &self.nodes {
            let mut process = Cluster::process(node);
            self.refresh(node, &mut process);
            if let Some(status) = process.exited.clone() {
                return Err(Error::NodeExited { id: *id, status, log: node.log_path.clone() });
            }
        }
        Ok(())
    }

    /// Node `id`'s `ClusterService.Status`, or `None` when it does not answer
    /// within [`ClusterSpec::status_timeout`].
    pub async fn status(&self, id: u64) -> Option<StatusResponse> {
        let addr = self.addr(id)?;
        status::status_with(addr, self.spec.status_timeout, self.kit_tls()).await.ok()
    }

    /// The status of every node that runs, is not paused and answers, asked concurrently.
    pub async fn statuses(&self) -> BTreeMap<u64, StatusResponse> {
        let ids = self.answering();
        let addrs: Vec<String> = ids.iter().filter_map(|id| self.addr(*id).map(str::to_string)).collect();
        let answers = status::answers(&addrs, self.spec.status_timeout, self.kit_tls()).await;
        ids.into_iter().zip(answers).filter_map(|(id, (_, status))| Some((id, status.ok()?))).collect()
    }

    /// The node that reports itself leader at the highest term (see
    /// [`crate::leader_of`]), or `None` when no answering node does.
    pub async fn leader(&self) -> Option<u64> {
        let statuses = self.statuses().await;
        leader_of(statuses.iter().map(|(id, status)| (*id, status)))
    }

    /// Polls [`Cluster::leader`] until it names a leader, up to `timeout`.
    /// Fails early when no node runs any more.
    pub async fn wait_for_leader(&self, timeout: Duration) -> Result<u64, Error> {
        let started = Instant::now();
        loop {
            if let Some(leader) = self.leader().await {
                return Ok(leader);
            }
            if self.running().is_empty() {
                self.check_alive()?;
                return Err(Error::NoLeader {
                    timeout,
                    logs: format!("{} (no node runs)", self.spec.data_root.display()),
                });
            }
            if started.elapsed() >= timeout {
                return Err(Error::NoLeader { timeout, logs: self.spec.data_root.display().to_string() });
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    /// Grants `principal` each of `grants` (unscoped) as the kit's admin,
    /// through any node. The first leader proposes the bootstrap admin only
    /// once it leads, so refusals and unavailability are retried up to
    /// `timeout`.
    pub async fn grant(&self, principal: &Principal, grants: &[GrantName], timeout: Duration) -> Result<(), Error> {
        self.pki()?;
        let client = gavel_client::Client::with_config(&self.addrs(), self.client_config())
            .map_err(|error| Error::Status { addr: self.addrs().join(","), detail: error.to_string() })?;
        let deadline = Instant::now() + timeout;
        for grant in grants {
            let request = gavel_proto::v1::GrantRequest {
                grant: Some(gavel_proto::v1::AccessGrant {
                    principal: principal.to_string(),
                    grant: grant.as_str().to_string(),
                    scope: Vec::new(),
                    skew_ms_max: None,
                }),
                ..gavel_proto::v1::GrantRequest::default()
            };
            loop {
                match client.grant(request.clone()).await {
                    Ok(_) => break,
                    Err(error) if Instant::now() < deadline => {
                        tracing::debug!("granting {grant:?} to {principal}: {error}; retrying");
                        tokio::time::sleep(POLL_INTERVAL).await;
                    }
                    Err(error) => {
                        return Err(Error::Grant {
                            principal: principal.to_string(),
                            grant: grant.as_str().to_string(),
                            detail: error.to_string(),
                        })
                    }
                }
            }
        }
        Ok(())
    }

    /// Sets a principal's quotas as the kit's admin (`AccessService.SetQuota`),
    /// once a leader and the admin exist (after [`Cluster::grant`]); the SDK
    /// retries an election within its budget. A harness that writes faster
    /// than the default quotas (`gavel-lab bench`, the overload test) raises its
    /// own principal's this way.
    pub async fn set_quota(&self, request: gavel_proto::v1::SetQuotaRequest) -> Result<gavel_proto::v1::Quota, Error> {
        self.pki()?;
        let status_error = |detail: String| Error::Status { addr: self.addrs().join(","), detail };
        let client = gavel_client::Client::with_config(&self.addrs(), self.client_config())
            .map_err(|error| status_error(error.to_string()))?;
        let answer = client.set_quota(request).await.map_err(|error| status_error(error.to_string()))?;
        answer.quota.ok_or_else(|| status_error("SetQuota answered no quota".to_string()))
    }

    /// Waits until every node that runs and is not paused has applied at
    /// least `index`, up to `timeout`.
    pub async fn wait_applied(&self, index: u64, timeout: Duration) -> Result<(), Error> {
        let addrs: Vec<String> = self.answering().iter().filter_map(|id| self.addr(*id).map(str::to_string)).collect();
        status::wait_applied_with(&addrs, index, self.spec.status_timeout, timeout, self.kit_tls()).await
    }

    /// SIGCONTs then SIGKILLs every process this cluster started, and reaps
    /// them. Idempotent; the data is kept.
    pub fn shutdown(&self) {
        for (id, node) in &self.nodes {
            let mut process = Cluster::process(node);
            if let Some(mut child) = process.child.take() {
                let pid = child.id();
                if !matches!(child.try_wait(), Ok(Some(_))) {
                    let _ = nix::sys::signal::kill(pid_of(pid), Signal::SIGCONT);
                    let _ = child.kill();
                }
                let status = child.wait();
                mark(&node.log_path, &self.spec.log_label, &format!("node {id} (pid {pid}) shut down: {status:?}"));
            }
            process.paused = false;
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.shutdown();
    }
}

#[cfg(test)]
mod tests {
    use gavel_pki::{principal_from_certificate, PrincipalKind, TokenVerifier, TokenVerifierSettings};

    use super::*;

    fn placed(security: Security) -> (tempfile::TempDir, Cluster) {
        let root = tempfile::tempdir().expect("a temp dir");
        let mut spec = ClusterSpec::new("/bin/sh", root.path());
        spec.security = security;
        let cluster = Cluster::create(spec, Box::new(Loopback::free_ports())).expect("placed");
        (root, cluster)
    }

    fn der(pem: &str) -> Vec<u8> {
        use rustls_pki_types::pem::PemObject;
        rustls_pki_types::CertificateDer::from_pem_slice(pem.as_bytes()).expect("a certificate PEM").to_vec()
    }

    #[test]
    fn an_insecure_cluster_passes_insecure_and_has_no_credentials() {
        let (_root, cluster) = placed(Security::Insecure);
        assert_eq!(cluster.security_flags(), vec!["--insecure".to_string()]);
        assert!(!cluster.is_secure());
        assert!(cluster.endpoints().iter().all(|endpoint| endpoint.starts_with("http://")));
        assert!(matches!(cluster.credentials(&Principal::node(1)), Err(Error::Insecure)));
        assert!(cluster.client_config().tls.is_none());
    }

    #[test]
    fn a_secure_cluster_makes_its_material_and_issues_credentials_on_demand() {
        let admin = Principal::new(PrincipalKind::User, "admin").expect("a principal");
        let (root, mut cluster) = placed(Security::secure(admin.clone()));
        let certs = root.path().join("certs");
        assert_eq!(
            cluster.security_flags(),
            vec![format!("--certs-dir={}", certs.display()), "--bootstrap-admin=user:admin".to_string()]
        );
        for id in cluster.ids() {
            assert!(certs.join(format!("node-{id}.pem")).is_file() && certs.join(format!("node-{id}.key")).is_file());
        }
        assert!(certs.join("ca.pem").is_file() && certs.join("token.pub").is_file());
        assert!(cluster.endpoints().iter().all(|endpoint| endpoint.starts_with("https://127.0.0.1:")));

        let bob = Principal::new(PrincipalKind::User, "bob").expect("a principal");
        let tls = cluster.credentials(&bob).expect("issued");
        let (cert_pem, _) = tls.identity.expect("an identity");
        assert_eq!(principal_from_certificate(&der(&cert_pem)), Ok(bob.clone()));
        assert!(certs.join("client-user-bob.pem").is_file());
        let admin_tls = cluster.client_config().tls.expect("TLS");
        let (admin_pem, _) = admin_tls.identity.expect("the admin's identity");
        assert_eq!(principal_from_certificate(&der(&admin_pem)), Ok(admin));

        let token = cluster.token(&bob, Some(&[GrantName::Approver])).expect("a token");
        let settings = TokenVerifierSettings::from_files(DEFAULT_AUDIENCE, &[certs.join("token.pub")], None)
            .expect("the public key");
        let caller = TokenVerifier::new(&settings).expect("a verifier").verify(&token).expect("valid");
        assert_eq!(caller.principal, bob);

        let joined = cluster.add_node().expect("a node added");
        assert!(certs.join(format!("node-{joined}.pem")).is_file());
    }

    #[test]
    fn node_certificates_name_the_launcher_host() {
        assert_eq!(
            Pki::hosts_of("10.77.0.2:7401", &["gavel.internal".to_string()]),
            vec!["10.77.0.2", "gavel.internal"]
        );
        assert_eq!(Pki::hosts_of("[::1]:7401", &[]), vec!["::1"]);
    }
}
