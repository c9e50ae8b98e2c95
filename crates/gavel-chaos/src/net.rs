//! Network namespaces, veth links and iptables faults.
//!
//! # Layout
//!
//! A [`Net`] for `n` nodes with the run prefix `P` (for example `gvc3fa`) is:
//!
//! - a bridge `Pbr` in the root namespace with the address `10.213.K.254/24`
//!   (the *hub*: the harness and its clients run in the root namespace and reach
//!   every node through the bridge);
//! - for node `i` (1-based) a namespace `P-n<i>` holding `lo` and a veth `eth0`
//!   with `10.213.K.<i>/24`, whose peer end `Pv<i>` is a port of the bridge.
//!
//! `K` is derived from the prefix and moved on until no address of the root
//! namespace is in `10.213.K.0/24`. Because bridged frames traverse the root
//! namespace's iptables `FORWARD` chain when `br_netfilter` is loaded, setup
//! inserts an `ACCEPT` rule for traffic within the bridge there and teardown
//! removes it.
//!
//! # Faults
//!
//! Faults are iptables rules in the `filter` table of the node namespaces, in a
//! dedicated chain [`CHAIN`] jumped to from `INPUT`; healing flushes that chain
//! on every node. Faults are additive: a new fault adds rules next to the ones
//! already there until [`Net::heal`]. Faults only ever match packets from other
//! nodes' addresses, never from the hub, so clients keep reaching every node
//! (a partition is between nodes, not between clients and nodes).
//!
//! # Concurrent runs and stale state
//!
//! Every prefix in use is held by an exclusive `flock` on
//! `/run/gavel-chaos/<prefix>.lock` for the life of the [`Net`].
//! [`cleanup_stale`] only removes namespaces, links and root rules whose prefix
//! is not locked, so it never disturbs a concurrent live run (in this process or
//! another one), while everything left by a crashed run is removed.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use gavel_testkit::Launcher;
use nix::fcntl::{Flock, FlockArg};

/// The family every run prefix starts with; [`cleanup_stale`] is called with it.
pub const FAMILY: &str = "gvc";

/// The iptables chain holding the faults in every node namespace.
pub const CHAIN: &str = "GAVEL-CHAOS";

/// The first two octets of every node address.
const SUBNET_BASE: (u8, u8) = (10, 213);

/// The last octet of the hub (bridge) address.
const HUB_OCTET: u8 = 254;

/// Where the prefix locks live.
const LOCK_DIR: &str = "/run/gavel-chaos";

/// Deadline of one `ip` or `iptables` command.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(20);

/// Deadline of installing iptables with apt-get.
const INSTALL_TIMEOUT: Duration = Duration::from_secs(300);

/// What the network layer can fail at.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    /// A command could not be started or waited for.
    #[error("cannot run `{line}`: {source}")]
    Spawn {
        /// The command line.
        line: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A command exited with a failure status.
    #[error("`{line}` failed ({status}): {stderr}")]
    Failed {
        /// The command line.
        line: String,
        /// Its exit status.
        status: String,
        /// Its standard error, trimmed.
        stderr: String,
    },
    /// A command ran past its deadline and was killed.
    #[error("`{line}` did not finish within {timeout:?}")]
    TimedOut {
        /// The command line.
        line: String,
        /// The deadline.
        timeout: Duration,
    },
    /// A lock file or directory could not be created or opened.
    #[error("{action}: {source}")]
    Io {
        /// What was being done.
        action: String,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    /// Another live run holds the prefix.
    #[error("prefix {prefix} is in use by a live run ({errno})")]
    PrefixInUse {
        /// The prefix asked for.
        prefix: String,
        /// The error of `flock(2)`.
        errno: nix::errno::Errno,
    },
    /// Namespaces or iptables cannot be used on this machine.
    #[error("network namespaces are unavailable: {0}")]
    Unavailable(String),
    /// An argument out of range: a node count, a prefix, a probability, partition groups.
    #[error("{0}")]
    Invalid(String),
    /// A node id the network does not have.
    #[error("no node {id} in the network {prefix}")]
    UnknownNode {
        /// The id asked for.
        id: u64,
        /// The network's prefix.
        prefix: String,
    },
    /// Setting a network up failed (what was created is removed again).
    #[error("setting up the network {prefix}: {source}")]
    Setup {
        /// The network's prefix.
        prefix: String,
        /// The step that failed.
        #[source]
        source: Box<NetError>,
    },
    /// The bridge does not carry traffic between the hub and a node, or between nodes.
    #[error("{0}")]
    Unreachable(String),
    /// No unused prefix or subnet is left.
    #[error("{0}")]
    Exhausted(String),
    /// Teardown failed for some resources (the others were removed).
    #[error("teardown of {prefix}: {failures}")]
    Teardown {
        /// The network's prefix.
        prefix: String,
        /// Every failure, `; `-separated.
        failures: String,
    },
}

/// The network layer's results.
pub type Result<T> = std::result::Result<T, NetError>;

/// Whether network namespaces and iptables can be used here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Availability {
    /// True when namespaces and iptables (with the `statistic` match) work.
    pub available: bool,
    /// Why they cannot be used, when `available` is false.
    pub reason: Option<String>,
    /// The iptables command that works inside a namespace (`iptables` or
    /// `iptables-legacy`), when one does.
    pub iptables: Option<String>,
}

/// What [`cleanup_stale`] removed (and what it found but left alone).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StaleReport {
    /// Namespaces deleted.
    pub namespaces: Vec<String>,
    /// Root-namespace links (bridges, veths) deleted.
    pub links: Vec<String>,
    /// Root-namespace iptables rules deleted (as `iptables -S` printed them).
    pub rules: Vec<String>,
    /// Lock files of dead runs removed.
    pub lock_files: Vec<PathBuf>,
    /// Processes that were still running inside stale namespaces. They are
    /// not killed (they were started by another, dead process); their
    /// namespaces are deleted all the same, which cuts them off.
    pub orphan_pids: Vec<u32>,
}

/// The addresses of a [`Net`], cheap to clone: what a cluster needs to start
/// its nodes inside the namespaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    /// The run prefix.
    pub prefix: String,
    /// The hub (bridge) address in the root namespace.
    pub hub: Ipv4Addr,
    /// Node id to (namespace name, node address).
    pub nodes: BTreeMap<u64, (String, Ipv4Addr)>,
}

impl Topology {
    /// The namespace of node `id`.
    pub fn namespace(&self, id: u64) -> Option<&str> {
        self.nodes.get(&id).map(|(namespace, _)| namespace.as_str())
    }

    /// The address of node `id`.
    pub fn ip(&self, id: u64) -> Option<Ipv4Addr> {
        self.nodes.get(&id).map(|(_, ip)| *ip)
    }
}

/// The [`Launcher`] of a run in namespaces: node `i` runs inside its
/// namespace of the [`Topology`] as `ip netns exec <ns> <binary> node ...`
/// and listens on its address and one port shared by every node. `ip netns
/// exec` execs the binary in place, so the child's PID is the gavel process
/// itself and signals sent to it hit the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Namespaces {
    /// Where the nodes run.
    pub topology: Topology,
    /// The port every node listens on.
    pub port: u16,
}

impl Namespaces {
    fn namespace(&self, id: u64) -> std::result::Result<&str, gavel_testkit::Error> {
        self.topology.namespace(id).ok_or_else(|| gavel_testkit::Error::Launch {
            id,
            detail: format!("the network {} has no node {id}", self.topology.prefix),
        })
    }
}

impl Launcher for Namespaces {
    fn address(&self, id: u64) -> std::result::Result<String, gavel_testkit::Error> {
        self.namespace(id)?;
        let ip = self.topology.ip(id).ok_or(gavel_testkit::Error::UnknownNode(id))?;
        Ok(format!("{ip}:{}", self.port))
    }

    fn command(&self, id: u64, binary: &Path) -> std::result::Result<Command, gavel_testkit::Error> {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", self.namespace(id)?]).arg(binary);
        Ok(command)
    }
}

/// An exclusive flock on `/run/gavel-chaos/<prefix>.lock`, held while the
/// prefix is in use.
struct PrefixLock {
    path: PathBuf,
    lock: Flock<File>,
}

impl PrefixLock {
    fn path(prefix: &str) -> PathBuf {
        Path::new(LOCK_DIR).join(format!("{prefix}.lock"))
    }

    /// Takes the lock of `prefix`; fails when another live holder has it.
    fn acquire(prefix: &str) -> Result<PrefixLock> {
        std::fs::create_dir_all(LOCK_DIR)
            .map_err(|source| NetError::Io { action: format!("creating {LOCK_DIR}"), source })?;
        let path = PrefixLock::path(prefix);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|source| NetError::Io { action: format!("opening {}", path.display()), source })?;
        let lock = Flock::lock(file, FlockArg::LockExclusiveNonblock)
            .map_err(|(_, errno)| NetError::PrefixInUse { prefix: prefix.to_string(), errno })?;
        std::fs::write(&path, format!("{}\n", std::process::id())).ok();
        Ok(PrefixLock { path, lock })
    }

    /// Whether a live run holds the lock of `prefix`.
    fn is_live(prefix: &str) -> bool {
        let path = PrefixLock::path(prefix);
        let Ok(file) = std::fs::OpenOptions::new().write(true).open(&path) else {
            return false;
        };
        Flock::lock(file, FlockArg::LockExclusiveNonblock).is_err()
    }

    fn release(self) {
        let _ = std::fs::remove_file(&self.path);
        drop(self.lock);
    }
}

/// One run's namespaces, bridge and veths. Torn down on drop.
pub struct Net {
    topology: Topology,
    subnet: u8,
    iptables: String,
    bridge: String,
    state: Mutex<NetState>,
}

struct NetState {
    torn_down: bool,
    /// Root-namespace rules to delete at teardown: (iptables command, rule args after `-A`/`-I` chain).
    root_rules: Vec<(String, Vec<String>)>,
    lock: Option<PrefixLock>,
}

impl std::fmt::Debug for Net {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Net").field("topology", &self.topology).field("iptables", &self.iptables).finish()
    }
}

/// The output of a successful command.
fn run(program: &str, args: &[&str]) -> Result<String> {
    run_with_timeout(program, args, COMMAND_TIMEOUT)
}

/// Runs a command to completion (killing it after `timeout`), failing with the
/// command line and its stderr when it does not exit 0.
fn run_with_timeout(program: &str, args: &[&str], timeout: Duration) -> Result<String> {
    let line = format!("{program} {}", args.join(" "));
    let child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| NetError::Spawn { line: line.clone(), source })?;
    let pid = child.id();
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = sender.send(child.wait_with_output());
    });
    let output = match receiver.recv_timeout(timeout) {
        Ok(output) => output.map_err(|source| NetError::Spawn { line: line.clone(), source })?,
        Err(_) => {
            if let Ok(output) = receiver.try_recv() {
                output.map_err(|source| NetError::Spawn { line: line.clone(), source })?
            } else {
                // Our own child, not reaped yet (the thread is still waiting for it).
                let _ =
                    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGKILL);
                return Err(NetError::TimedOut { line, timeout });
            }
        }
    };
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr).trim().to_string();
        return Err(NetError::Failed { line, status: output.status.to_string(), stderr });
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Whether `program` can be executed (`<program> --version` succeeds).
fn has_program(program: &str) -> bool {
    run_with_timeout(program, &["--version"], Duration::from_secs(10)).is_ok()
}

/// Installs iptables with apt-get when neither `iptables` nor
/// `iptables-legacy` exists; logs apt-get's output. Done at most once.
fn ensure_iptables_installed() -> Result<()> {
    static INSTALL: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    INSTALL
        .get_or_init(|| {
            if has_program("iptables") || has_program("iptables-legacy") {
                return Ok(());
            }
            tracing::info!("iptables is missing; installing it with apt-get");
            let install = || {
                let result = run_with_timeout(
                    "env",
                    // Waits for the dpkg lock (the suite may be installing
                    // chromium beside it, scripts/test) instead of failing.
                    &[
                        "DEBIAN_FRONTEND=noninteractive",
                        "apt-get",
                        "-o",
                        "DPkg::Lock::Timeout=240",
                        "install",
                        "-y",
                        "iptables",
                    ],
                    INSTALL_TIMEOUT,
                );
                match &result {
                    Ok(stdout) => tracing::info!("apt-get install -y iptables:\n{stdout}"),
                    Err(error) => tracing::warn!("{error}"),
                }
                result
            };
            let mut outcome = install();
            if outcome.is_err() {
                let update = run_with_timeout("apt-get", &["-o", "DPkg::Lock::Timeout=240", "update"], INSTALL_TIMEOUT);
                tracing::info!("apt-get update: {:?}", update.as_ref().map(|_| "ok"));
                outcome = install();
            }
            if has_program("iptables") || has_program("iptables-legacy") {
                Ok(())
            } else {
                Err(format!(
                    "iptables is missing and apt-get install failed: {}",
                    outcome.err().map_or_else(|| "no error".to_string(), |error| error.to_string())
                ))
            }
        })
        .clone()
        .map_err(NetError::Unavailable)
}

/// Whether we run as root.
fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Probes, once per process, which iptables flavour works inside a fresh
/// namespace (creating a chain and a `statistic` rule).
fn probe_iptables() -> std::result::Result<String, String> {
    static PROBE: OnceLock<std::result::Result<String, String>> = OnceLock::new();
    PROBE
        .get_or_init(|| {
            if !is_root() {
                return Err("not running as root".to_string());
            }
            run("ip", &["netns", "list"]).map_err(|error| format!("`ip netns` does not work: {error}"))?;
            ensure_iptables_installed().map_err(|error| error.to_string())?;
            let prefix = fresh_prefix().map_err(|error| error.to_string())?;
            let lock = PrefixLock::acquire(&prefix).map_err(|error| error.to_string())?;
            let namespace = format!("{prefix}-probe");
            let result = (|| {
                run("ip", &["netns", "add", &namespace])
                    .map_err(|error| format!("cannot create a network namespace: {error}"))?;
                let mut failures = Vec::new();
                for flavour in ["iptables", "iptables-legacy"] {
                    let attempt = (|| -> Result<()> {
                        let ipt = |args: &[&str]| -> Result<String> {
                            let mut full = vec!["netns", "exec", namespace.as_str(), flavour, "-w", "5"];
                            full.extend_from_slice(args);
                            run("ip", &full)
                        };
                        ipt(&["-N", CHAIN])?;
                        ipt(&["-A", "INPUT", "-j", CHAIN])?;
                        ipt(&[
                            "-A",
                            CHAIN,
                            "-s",
                            "10.213.0.1",
                            "-m",
                            "statistic",
                            "--mode",
                            "random",
                            "--probability",
                            "0.5",
                            "-j",
                            "DROP",
                        ])?;
                        let listed = ipt(&["-S", CHAIN])?;
                        if !listed.contains("statistic") {
                            return Err(NetError::Invalid(format!("the rule is not listed: {listed}")));
                        }
                        ipt(&["-F", CHAIN])?;
                        ipt(&["-D", "INPUT", "-j", CHAIN])?;
                        ipt(&["-X", CHAIN])?;
                        Ok(())
                    })();
                    match attempt {
                        Ok(()) => return Ok(flavour.to_string()),
                        Err(error) => failures.push(format!("{flavour}: {error}")),
                    }
                }
                Err(format!("no iptables works inside a namespace: {}", failures.join("; ")))
            })();
            let _ = run("ip", &["netns", "del", &namespace]);
            lock.release();
            result
        })
        .clone()
}

/// A fresh run prefix: [`FAMILY`] and three hex digits, not used by any
/// namespace, link or lock file.
pub fn fresh_prefix() -> Result<String> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let namespaces = list_namespaces().unwrap_or_default();
    let links = list_links().unwrap_or_default();
    for _ in 0..64 {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|elapsed| elapsed.subsec_nanos() as u64)
            .unwrap_or(0);
        let seed = nanos ^ (u64::from(std::process::id()) << 7) ^ COUNTER.fetch_add(0x9e37, Ordering::Relaxed);
        let mixed = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 52;
        let prefix = format!("{FAMILY}{:03x}", mixed & 0xfff);
        let taken = namespaces.iter().chain(links.iter()).any(|name| name.starts_with(&prefix))
            || PrefixLock::path(&prefix).exists();
        if !taken {
            return Ok(prefix);
        }
    }
    Err(NetError::Exhausted(format!("could not find an unused {FAMILY} prefix")))
}

/// Names of the network namespaces (`ip netns list`).
fn list_namespaces() -> Result<Vec<String>> {
    Ok(run("ip", &["netns", "list"])?
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_string)
        .collect())
}

/// Names of the root namespace's links (`ip -o link show`), without `@peer`.
fn list_links() -> Result<Vec<String>> {
    Ok(run("ip", &["-o", "link", "show"])?
        .lines()
        .filter_map(|line| line.split(':').nth(1))
        .map(|name| name.trim().split('@').next().unwrap_or("").to_string())
        .filter(|name| !name.is_empty())
        .collect())
}

/// The run prefix a resource name belongs to: the name without its
/// `br`, `v<i>`, `-n<i>` or `-probe` suffix.
fn prefix_of(name: &str) -> &str {
    if let Some(stripped) = name.strip_suffix("-probe") {
        return stripped;
    }
    if let Some(stripped) = name.strip_suffix("br") {
        return stripped;
    }
    let digits = name.trim_end_matches(|c: char| c.is_ascii_digit());
    if digits.len() < name.len() {
        if let Some(stripped) = digits.strip_suffix("-n") {
            return stripped;
        }
        if let Some(stripped) = digits.strip_suffix('v') {
            return stripped;
        }
    }
    name
}

/// Removes every namespace, root link, root `FORWARD` rule and lock file left
/// by dead runs whose prefix starts with `prefix_family` (normally
/// [`FAMILY`]). Resources of live runs (whose prefix lock is held, in this
/// process or another) are left alone. Best effort: failures are logged.
pub fn cleanup_stale(prefix_family: &str) -> StaleReport {
    let mut report = StaleReport::default();
    if prefix_family.is_empty() || !is_root() {
        return report;
    }
    let mut liveness: BTreeMap<String, bool> = BTreeMap::new();
    let mut is_stale =
        |prefix: &str| !*liveness.entry(prefix.to_string()).or_insert_with(|| PrefixLock::is_live(prefix));

    // Namespaces first: deleting one destroys its veth pair.
    for namespace in list_namespaces().unwrap_or_default() {
        if !namespace.starts_with(prefix_family) || !is_stale(prefix_of(&namespace)) {
            continue;
        }
        if let Ok(pids) = run("ip", &["netns", "pids", &namespace]) {
            report.orphan_pids.extend(pids.split_whitespace().filter_map(|pid| pid.parse::<u32>().ok()));
        }
        match run("ip", &["netns", "del", &namespace]) {
            Ok(_) => report.namespaces.push(namespace),
            Err(error) => tracing::warn!("cleanup: {error}"),
        }
    }
    if !report.orphan_pids.is_empty() {
        tracing::warn!(
            "cleanup: processes {:?} still ran in stale namespaces; they were not killed",
            report.orphan_pids
        );
    }
    // Veths (whose namespaces are gone) and bridges.
    for link in list_links().unwrap_or_default() {
        if !link.starts_with(prefix_family) || !is_stale(prefix_of(&link)) {
            continue;
        }
        match run("ip", &["link", "del", &link]) {
            Ok(_) => report.links.push(link),
            // A veth may vanish by itself once its namespace is destroyed.
            Err(error) => tracing::debug!("cleanup: {error}"),
        }
    }
    // Root FORWARD rules naming a stale bridge.
    if let Ok(iptables) = probe_iptables() {
        for flavour in root_flavours(&iptables) {
            let Ok(listed) = run(&flavour, &["-w", "5", "-S", "FORWARD"]) else { continue };
            for rule in listed.lines() {
                let words: Vec<&str> = rule.split_whitespace().collect();
                let stale = words.windows(2).any(|pair| {
                    matches!(pair[0], "-i" | "-o") && pair[1].starts_with(prefix_family) && is_stale(prefix_of(pair[1]))
                });
                if !stale || words.first() != Some(&"-A") {
                    continue;
                }
                let mut args = vec!["-w", "5", "-D"];
                args.extend_from_slice(&words[1..]);
                match run(&flavour, &args) {
                    Ok(_) => report.rules.push(rule.to_string()),
                    Err(error) => tracing::warn!("cleanup: {error}"),
                }
            }
        }
    }
    // Lock files of dead runs.
    if let Ok(entries) = std::fs::read_dir(LOCK_DIR) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(prefix) = name.strip_suffix(".lock") else { continue };
            if !prefix.starts_with(prefix_family) || !is_stale(prefix) {
                continue;
            }
            if std::fs::remove_file(entry.path()).is_ok() {
                report.lock_files.push(entry.path());
            }
        }
    }
    if report != StaleReport::default() {
        tracing::info!("cleanup of stale {prefix_family}* state: {report:?}");
    }
    report
}

/// The iptables flavours whose root-namespace FORWARD chain matters: the one
/// in use, plus `iptables-legacy` when the root namespace already has legacy
/// filter tables (both sets of hooks filter bridged frames). Never creates
/// legacy tables where there are none.
fn root_flavours(primary: &str) -> Vec<String> {
    let mut flavours = vec![primary.to_string()];
    let legacy_in_use = std::fs::read_to_string("/proc/net/ip_tables_names")
        .map(|names| names.lines().any(|name| name.trim() == "filter"))
        .unwrap_or(false);
    if legacy_in_use && primary != "iptables-legacy" && has_program("iptables-legacy") {
        flavours.push("iptables-legacy".to_string());
    }
    flavours
}

/// Whether `ip` (from a root namespace address) answers on TCP: a refused
/// connection proves the path works as well as an accepted one.
fn tcp_reachable(ip: Ipv4Addr, timeout: Duration) -> bool {
    match TcpStream::connect_timeout(&SocketAddr::from((ip, 1)), timeout) {
        Ok(_) => true,
        Err(error) => error.kind() == std::io::ErrorKind::ConnectionRefused,
    }
}

impl Net {
    /// Whether namespaces and iptables can be used here: we are root, `ip
    /// netns` works and an iptables flavour (installed with apt-get when
    /// missing) can create a chain with a `statistic` rule inside a namespace.
    pub fn available() -> Availability {
        match probe_iptables() {
            Ok(iptables) => Availability { available: true, reason: None, iptables: Some(iptables) },
            Err(reason) => Availability { available: false, reason: Some(reason), iptables: None },
        }
    }

    /// Creates the bridge, the namespaces and the veths for `nodes` nodes
    /// (ids `1..=nodes`) under `prefix` (which must start with [`FAMILY`]
    /// and be at most 10 characters; see [`fresh_prefix`]), and checks that
    /// the hub reaches every node and node 1 reaches the others. On failure
    /// everything created so far is removed.
    pub fn setup(nodes: u64, prefix: &str) -> Result<Net> {
        if nodes == 0 || nodes > 200 {
            return Err(NetError::Invalid(format!("a net needs between 1 and 200 nodes, not {nodes}")));
        }
        let longest = format!("{prefix}v{nodes}");
        if !prefix.starts_with(FAMILY)
            || longest.len() > 15
            || !prefix.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        {
            return Err(NetError::Invalid(format!(
                "prefix {prefix:?} must start with {FAMILY:?}, be lowercase alphanumeric and keep {longest:?} within 15 characters"
            )));
        }
        let iptables = probe_iptables().map_err(NetError::Unavailable)?;
        let lock = PrefixLock::acquire(prefix)?;
        let subnet = pick_subnet(prefix)?;
        let (a, b) = SUBNET_BASE;
        let hub = Ipv4Addr::new(a, b, subnet, HUB_OCTET);
        let topology = Topology {
            prefix: prefix.to_string(),
            hub,
            nodes: (1..=nodes)
                .map(|id| (id, (format!("{prefix}-n{id}"), Ipv4Addr::new(a, b, subnet, id as u8))))
                .collect(),
        };
        let net = Net {
            topology,
            subnet,
            iptables,
            bridge: format!("{prefix}br"),
            state: Mutex::new(NetState { torn_down: false, root_rules: Vec::new(), lock: Some(lock) }),
        };
        // On error `net` is dropped, which tears down what exists.
        net.build().map_err(|source| NetError::Setup { prefix: prefix.to_string(), source: Box::new(source) })?;
        Ok(net)
    }

    fn build(&self) -> Result<()> {
        let bridge = self.bridge.as_str();
        let hub_cidr = format!("{}/24", self.topology.hub);
        run("ip", &["link", "add", bridge, "type", "bridge"])?;
        run("ip", &["addr", "add", &hub_cidr, "dev", bridge])?;
        run("ip", &["link", "set", bridge, "up"])?;
        self.allow_bridge_forwarding()?;
        for (id, (namespace, ip)) in &self.topology.nodes {
            let veth = format!("{}v{id}", self.topology.prefix);
            let cidr = format!("{ip}/24");
            run("ip", &["netns", "add", namespace])?;
            run("ip", &["link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", namespace])?;
            run("ip", &["link", "set", &veth, "master", bridge])?;
            run("ip", &["link", "set", &veth, "up"])?;
            run("ip", &["-n", namespace, "link", "set", "lo", "up"])?;
            run("ip", &["-n", namespace, "addr", "add", &cidr, "dev", "eth0"])?;
            run("ip", &["-n", namespace, "link", "set", "eth0", "up"])?;
            self.iptables_in(*id, &["-N", CHAIN])?;
            self.iptables_in(*id, &["-A", "INPUT", "-j", CHAIN])?;
        }
        self.check_reachability()
    }

    /// Inserts `-i <bridge> -o <bridge> -j ACCEPT` at the top of the root
    /// namespace's FORWARD chain: with `br_netfilter` loaded
    /// (`/proc/sys/net/bridge/bridge-nf-call-iptables` = 1) bridged frames
    /// between nodes traverse that chain and a DROP policy would cut them.
    /// Also done in the legacy tables when the root namespace uses them.
    fn allow_bridge_forwarding(&self) -> Result<()> {
        let bridge = self.bridge.clone();
        let rule: Vec<String> = ["-i", &bridge, "-o", &bridge, "-j", "ACCEPT"].iter().map(|s| s.to_string()).collect();
        let flavours = root_flavours(&self.iptables);
        let bridged = std::fs::read_to_string("/proc/sys/net/bridge/bridge-nf-call-iptables")
            .map(|value| value.trim() == "1")
            .unwrap_or(false);
        for flavour in flavours {
            let mut args = vec!["-w", "5", "-I", "FORWARD", "1"];
            args.extend(rule.iter().map(String::as_str));
            match run(&flavour, &args) {
                Ok(_) => self.lock_state().root_rules.push((flavour, rule.clone())),
                Err(error) if !bridged => {
                    tracing::debug!("root FORWARD rule not added (bridged frames bypass iptables): {error}")
                }
                Err(error) => return Err(error),
            }
        }
        Ok(())
    }

    /// Checks that the hub reaches every node and node 1 reaches the others
    /// (over TCP: a refused connection counts), retrying for a few seconds.
    fn check_reachability(&self) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(10);
        for (id, (_, ip)) in &self.topology.nodes {
            while !tcp_reachable(*ip, Duration::from_millis(500)) {
                if Instant::now() > deadline {
                    return Err(NetError::Unreachable(format!(
                        "the hub {} cannot reach node {id} at {ip}",
                        self.topology.hub
                    )));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        if !has_program("bash") {
            tracing::warn!("bash is missing: node-to-node reachability is not checked");
            return Ok(());
        }
        let Some((first, (namespace, _))) = self.topology.nodes.iter().next() else { return Ok(()) };
        for (id, (_, ip)) in self.topology.nodes.iter().skip(1) {
            let script = format!("exec 3<>/dev/tcp/{ip}/1");
            loop {
                let attempt = run("ip", &["netns", "exec", namespace, "timeout", "2", "bash", "-c", &script]);
                match attempt {
                    Ok(_) => break,
                    Err(error) if error.to_string().contains("Connection refused") => break,
                    Err(error) => {
                        if Instant::now() > deadline {
                            return Err(NetError::Unreachable(format!(
                                "node {first} cannot reach node {id} at {ip} through the bridge: {error}"
                            )));
                        }
                        std::thread::sleep(Duration::from_millis(100));
                    }
                }
            }
        }
        Ok(())
    }

    fn lock_state(&self) -> std::sync::MutexGuard<'_, NetState> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs the iptables flavour inside node `id`'s namespace; returns its
    /// stdout.
    fn iptables_in(&self, id: u64, args: &[&str]) -> Result<String> {
        let namespace = self.namespace(id)?;
        let mut full = vec!["netns", "exec", namespace, self.iptables.as_str(), "-w", "5"];
        full.extend_from_slice(args);
        run("ip", &full)
    }

    /// Appends `args` (a rule of [`CHAIN`]) on node `id`; returns the rule as
    /// logged: `<namespace>: iptables -A GAVEL-CHAOS ...`.
    fn add_rule(&self, id: u64, args: &[&str]) -> Result<String> {
        let mut full = vec!["-A", CHAIN];
        full.extend_from_slice(args);
        self.iptables_in(id, &full)?;
        Ok(format!("{}: {} {}", self.namespace(id)?, self.iptables, full.join(" ")))
    }

    fn unknown(&self, id: u64) -> NetError {
        NetError::UnknownNode { id, prefix: self.topology.prefix.clone() }
    }

    fn known(&self, id: u64) -> Result<()> {
        if self.topology.nodes.contains_key(&id) {
            Ok(())
        } else {
            Err(self.unknown(id))
        }
    }

    /// The run prefix.
    pub fn prefix(&self) -> &str {
        &self.topology.prefix
    }

    /// The node ids, `1..=nodes`.
    pub fn node_ids(&self) -> Vec<u64> {
        self.topology.nodes.keys().copied().collect()
    }

    /// The addresses, to start a cluster in the namespaces.
    pub fn topology(&self) -> Topology {
        self.topology.clone()
    }

    /// The hub address (the bridge, in the root namespace).
    pub fn hub_ip(&self) -> Ipv4Addr {
        self.topology.hub
    }

    /// The third octet of the run's `10.213.K.0/24` subnet.
    pub fn subnet(&self) -> u8 {
        self.subnet
    }

    /// The address of node `id`.
    pub fn ip(&self, id: u64) -> Result<Ipv4Addr> {
        self.topology.ip(id).ok_or_else(|| self.unknown(id))
    }

    /// The namespace of node `id`.
    pub fn namespace(&self, id: u64) -> Result<&str> {
        self.topology.namespace(id).ok_or_else(|| self.unknown(id))
    }

    /// The iptables flavour in use (`iptables` or `iptables-legacy`).
    pub fn iptables(&self) -> &str {
        &self.iptables
    }

    /// The rules currently in node `id`'s [`CHAIN`] (`iptables -S CHAIN`,
    /// without the chain's own `-N` line).
    pub fn rules(&self, id: u64) -> Result<Vec<String>> {
        Ok(self
            .iptables_in(id, &["-S", CHAIN])?
            .lines()
            .filter(|line| line.starts_with("-A "))
            .map(str::to_string)
            .collect())
    }

    /// Every rule of node `id`'s filter table (`iptables -S`).
    pub fn all_rules(&self, id: u64) -> Result<Vec<String>> {
        Ok(self.iptables_in(id, &["-S"])?.lines().map(str::to_string).collect())
    }

    /// Splits the nodes into groups that cannot talk to each other: for every
    /// pair of nodes in different groups, each drops the other's packets.
    /// Nodes listed in no group form one more group together (so
    /// `partition(&[vec![1]])` isolates node 1 from all the others). The hub
    /// is never cut. Returns the rules applied.
    pub fn partition(&self, groups: &[Vec<u64>]) -> Result<Vec<String>> {
        let mut group_of: BTreeMap<u64, usize> = BTreeMap::new();
        for (index, group) in groups.iter().enumerate() {
            for id in group {
                self.known(*id)?;
                if group_of.insert(*id, index).is_some() {
                    return Err(NetError::Invalid(format!("node {id} appears in two partition groups")));
                }
            }
        }
        for id in self.topology.nodes.keys() {
            group_of.entry(*id).or_insert(groups.len());
        }
        let mut applied = Vec::new();
        for (a, group_a) in &group_of {
            for (b, group_b) in &group_of {
                if group_a != group_b {
                    let source = self.ip(*b)?.to_string();
                    applied.push(self.add_rule(*a, &["-s", &source, "-j", "DROP"])?);
                }
            }
        }
        Ok(applied)
    }

    /// Drops the packets `from` sends to `to` (a rule on `to`'s INPUT); `to`
    /// still reaches `from`, but TCP needs both directions, so in effect
    /// every connection between them breaks, whichever side opened it.
    /// Returns the rule applied.
    pub fn cut_one_way(&self, from: u64, to: u64) -> Result<Vec<String>> {
        self.known(from)?;
        self.known(to)?;
        if from == to {
            return Err(NetError::Invalid(format!("cannot cut node {from} from itself")));
        }
        let source = self.ip(from)?.to_string();
        Ok(vec![self.add_rule(to, &["-s", &source, "-j", "DROP"])?])
    }

    /// Cuts `a` and `b` from each other (both directions) while every other
    /// node still talks to both: the "bridge" topology when the others sit
    /// between them. Returns the rules applied.
    pub fn bridge(&self, a: u64, b: u64) -> Result<Vec<String>> {
        let mut applied = self.cut_one_way(a, b)?;
        applied.extend(self.cut_one_way(b, a)?);
        Ok(applied)
    }

    /// Drops each packet from another node with `probability` (0 < p ≤ 1) on
    /// every node's INPUT. Packets from the hub are not dropped: the cluster's
    /// replication and elections suffer, and clients see that as slow or
    /// timed-out calls, not as their own lost packets. Returns the rules
    /// applied.
    pub fn packet_loss(&self, probability: f64) -> Result<Vec<String>> {
        if !(probability > 0.0 && probability <= 1.0) {
            return Err(NetError::Invalid(format!("packet loss probability {probability} is not in (0, 1]")));
        }
        let probability = format!("{probability}");
        let mut applied = Vec::new();
        for to in self.topology.nodes.keys() {
            for (from, (_, ip)) in &self.topology.nodes {
                if from == to {
                    continue;
                }
                let source = ip.to_string();
                applied.push(self.add_rule(
                    *to,
                    &[
                        "-s",
                        &source,
                        "-m",
                        "statistic",
                        "--mode",
                        "random",
                        "--probability",
                        &probability,
                        "-j",
                        "DROP",
                    ],
                )?);
            }
        }
        Ok(applied)
    }

    /// Removes every fault: flushes [`CHAIN`] on every node. Returns the
    /// commands run.
    pub fn heal(&self) -> Result<Vec<String>> {
        let mut applied = Vec::new();
        for id in self.topology.nodes.keys() {
            self.iptables_in(*id, &["-F", CHAIN])?;
            applied.push(format!("{}: {} -F {CHAIN}", self.namespace(*id)?, self.iptables));
        }
        Ok(applied)
    }

    /// Deletes the namespaces, veths, bridge and root rules of this run and
    /// releases its prefix. Idempotent; keeps going after a failure and
    /// reports the failures at the end. Processes still running in the
    /// namespaces are not killed (the [`gavel_testkit::Cluster`] does that).
    pub fn teardown(&self) -> Result<()> {
        let mut state = self.lock_state();
        if state.torn_down {
            return Ok(());
        }
        state.torn_down = true;
        let mut failures = Vec::new();
        for (flavour, rule) in state.root_rules.drain(..) {
            let mut args = vec!["-w", "5", "-D", "FORWARD"];
            args.extend(rule.iter().map(String::as_str));
            if let Err(error) = run(&flavour, &args) {
                failures.push(error.to_string());
            }
        }
        let namespaces: BTreeSet<String> = list_namespaces().unwrap_or_default().into_iter().collect();
        let links: BTreeSet<String> = list_links().unwrap_or_default().into_iter().collect();
        for (id, (namespace, _)) in &self.topology.nodes {
            let veth = format!("{}v{id}", self.topology.prefix);
            if links.contains(&veth) {
                // Deleting one end deletes the pair; ignore a pair already gone.
                let _ = run("ip", &["link", "del", &veth]);
            }
            if namespaces.contains(namespace) {
                if let Err(error) = run("ip", &["netns", "del", namespace]) {
                    failures.push(error.to_string());
                }
            }
        }
        if links.contains(&self.bridge) {
            if let Err(error) = run("ip", &["link", "del", &self.bridge]) {
                failures.push(error.to_string());
            }
        }
        if let Some(lock) = state.lock.take() {
            lock.release();
        }
        if failures.is_empty() {
            Ok(())
        } else {
            Err(NetError::Teardown { prefix: self.topology.prefix.clone(), failures: failures.join("; ") })
        }
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        if let Err(error) = self.teardown() {
            tracing::warn!("{error}");
        }
    }
}

/// Picks the third octet K of `10.213.K.0/24`: derived from the prefix, then
/// moved on until no root-namespace address is in that subnet.
fn pick_subnet(prefix: &str) -> Result<u8> {
    let used: BTreeSet<u8> = run("ip", &["-4", "-o", "addr", "show"])?
        .lines()
        .filter_map(|line| {
            let cidr = line.split_whitespace().skip_while(|word| *word != "inet").nth(1)?;
            let ip: Ipv4Addr = cidr.split('/').next()?.parse().ok()?;
            let [a, b, c, _] = ip.octets();
            (a == SUBNET_BASE.0 && b == SUBNET_BASE.1).then_some(c)
        })
        .collect();
    let mut hash: u32 = 0x811c_9dc5;
    for byte in prefix.bytes() {
        hash = (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193);
    }
    let start = (hash % 250) as u8 + 1;
    (0..250u8)
        .map(|offset| ((start as u16 - 1 + offset as u16) % 250) as u8 + 1)
        .find(|candidate| !used.contains(candidate))
        .ok_or_else(|| NetError::Exhausted("every 10.213.K.0/24 subnet is in use".to_string()))
}
