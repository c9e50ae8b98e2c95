//! The cluster under load: either given endpoints, or a local three-node
//! cluster of `gavel node` processes this run starts and kills.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use gavel_proto::v1 as pb;
use gavel_proto::v1::cluster_service_client::ClusterServiceClient;
use tonic::transport::Endpoint;

/// Longest wait for a leader or a catch-up.
pub const WAIT: Duration = Duration::from_secs(120);
/// Deadline of one Status call. Generous: a Status after new applies hashes
/// the whole state, which takes seconds with a million records.
pub const STATUS_TIMEOUT: Duration = Duration::from_secs(60);

/// Finds the `gavel` binary: the explicit path, else this executable when it
/// is `gavel`, else `gavel` next to this executable's directory (an example
/// or test lives in `target/<profile>/{examples,deps}`), else
/// `target/release/gavel` under the working directory.
pub fn resolve_binary(explicit: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(path) = explicit {
        if !path.is_file() {
            bail!("--gavel-binary {} is not a file", path.display());
        }
        return Ok(path.to_path_buf());
    }
    let mut candidates = Vec::new();
    if let Ok(exe) = std::env::current_exe() {
        if exe.file_name().is_some_and(|name| name == "gavel") {
            return Ok(exe);
        }
        if let Some(dir) = exe.parent() {
            candidates.push(dir.join("gavel"));
            if let Some(parent) = dir.parent() {
                candidates.push(parent.join("gavel"));
            }
        }
    }
    candidates.push(PathBuf::from("target/release/gavel"));
    match candidates.iter().find(|path| path.is_file()) {
        Some(path) => Ok(path.clone()),
        None => bail!(
            "no gavel binary found (looked at {}): build it with `cargo build --release -p gavel-server --bin gavel` \
             or pass --gavel-binary",
            candidates.iter().map(|path| path.display().to_string()).collect::<Vec<_>>().join(", ")
        ),
    }
}

/// A free loopback port (bound, then released for the node to take).
fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// One `gavel node` process.
#[derive(Debug)]
pub struct NodeProcess {
    /// Raft node id (1, 2 or 3).
    pub id: u64,
    /// `host:port` it listens on.
    pub addr: String,
    /// Its data directory.
    pub data_dir: PathBuf,
    /// Its log file (standard output and error).
    pub log: PathBuf,
    child: Option<Child>,
}

impl NodeProcess {
    /// Process id, while running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }
}

/// Three `gavel node` processes on 127.0.0.1 with full durability; the ones
/// still running are SIGKILLed (by pid) when this is dropped.
pub struct LocalCluster {
    dir: Option<tempfile::TempDir>,
    binary: PathBuf,
    peers: String,
    flags: Vec<String>,
    /// The nodes, ids 1..=3.
    pub nodes: Vec<NodeProcess>,
}

impl LocalCluster {
    /// Starts three nodes in a new temporary directory (under `parent` when
    /// given) with the extra `flags`, and waits for a leader.
    pub async fn start(binary: PathBuf, parent: Option<&Path>, flags: &[String]) -> anyhow::Result<LocalCluster> {
        let dir = match parent {
            Some(parent) => {
                std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
                tempfile::Builder::new().prefix("gavel-bench-").tempdir_in(parent)?
            }
            None => tempfile::Builder::new().prefix("gavel-bench-").tempdir()?,
        };
        let mut nodes = Vec::new();
        for id in 1..=3u64 {
            nodes.push(NodeProcess {
                id,
                addr: format!("127.0.0.1:{}", free_port()?),
                data_dir: dir.path().join(format!("n{id}")),
                log: dir.path().join(format!("n{id}.log")),
                child: None,
            });
        }
        let peers = nodes.iter().map(|node| format!("{}={}", node.id, node.addr)).collect::<Vec<_>>().join(",");
        let mut cluster = LocalCluster { dir: Some(dir), binary, peers, flags: flags.to_vec(), nodes };
        for id in 1..=3 {
            cluster.spawn(id)?;
        }
        cluster.wait_for_leader().await?;
        Ok(cluster)
    }

    /// The directory holding the nodes' data and logs.
    pub fn dir(&self) -> &Path {
        self.dir.as_ref().map_or(Path::new(""), |dir| dir.path())
    }

    /// Keeps the data directory after the run; returns its path.
    pub fn keep_data(&mut self) -> Option<PathBuf> {
        self.dir.take().map(tempfile::TempDir::keep)
    }

    /// The node's address.
    pub fn addrs(&self) -> Vec<String> {
        self.nodes.iter().map(|node| node.addr.clone()).collect()
    }

    /// Pids of the running nodes, in node order.
    pub fn pids(&self) -> Vec<u32> {
        self.nodes.iter().filter_map(NodeProcess::pid).collect()
    }

    fn node_mut(&mut self, id: u64) -> anyhow::Result<&mut NodeProcess> {
        self.nodes.iter_mut().find(|node| node.id == id).with_context(|| format!("no node {id}"))
    }

    /// The node with this id.
    pub fn node(&self, id: u64) -> anyhow::Result<&NodeProcess> {
        self.nodes.iter().find(|node| node.id == id).with_context(|| format!("no node {id}"))
    }

    /// Starts (or restarts, on its existing data) node `id`.
    pub fn spawn(&mut self, id: u64) -> anyhow::Result<()> {
        let (binary, peers, flags) = (self.binary.clone(), self.peers.clone(), self.flags.clone());
        let node = self.node_mut(id)?;
        if node.child.is_some() {
            bail!("node {id} is already running");
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&node.log)
            .with_context(|| format!("opening {}", node.log.display()))?;
        let child = Command::new(&binary)
            .arg("node")
            .arg(format!("--id={id}"))
            .arg(format!("--listen={}", node.addr))
            .arg(format!("--data-dir={}", node.data_dir.display()))
            .arg(format!("--peers={peers}"))
            .args(&flags)
            .env("GAVEL_LOG", "info,openraft=warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("spawning {} node", binary.display()))?;
        node.child = Some(child);
        Ok(())
    }

    /// SIGKILLs node `id` (the process this cluster started) and reaps it.
    pub fn kill(&mut self, id: u64) -> anyhow::Result<()> {
        if let Some(mut child) = self.node_mut(id)?.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        Ok(())
    }

    /// Fails when a node this cluster started has exited on its own.
    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        for node in &mut self.nodes {
            if let Some(child) = node.child.as_mut() {
                if let Some(status) = child.try_wait()? {
                    node.child = None;
                    bail!("node {} exited ({status}); see {}", node.id, node.log.display());
                }
            }
        }
        Ok(())
    }

    /// Ids of the running nodes.
    pub fn running(&self) -> Vec<u64> {
        self.nodes.iter().filter(|node| node.child.is_some()).map(|node| node.id).collect()
    }

    /// Waits until a running node reports itself leader; returns its id.
    pub async fn wait_for_leader(&mut self) -> anyhow::Result<u64> {
        let started = Instant::now();
        while started.elapsed() < WAIT {
            self.check_alive()?;
            for id in self.running() {
                let addr = self.node(id)?.addr.clone();
                if status(&addr, STATUS_TIMEOUT).await.is_ok_and(|status| status.role == "Leader") {
                    return Ok(id);
                }
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        bail!("no leader within {WAIT:?}; node logs in {}", self.dir().display())
    }

    /// Size in bytes of the latest snapshot node `id` stored, from its log
    /// (`snapshot stored ... bytes=N`), and how many it stored in all.
    pub fn stored_snapshots(&self, id: u64) -> anyhow::Result<(Option<u64>, usize)> {
        let node = self.node(id)?;
        let text = std::fs::read_to_string(&node.log).with_context(|| format!("reading {}", node.log.display()))?;
        Ok(parse_snapshot_lines(&text))
    }
}

/// Finds the `snapshot stored` lines of a node log: the byte size of the
/// last one and their count.
pub fn parse_snapshot_lines(log: &str) -> (Option<u64>, usize) {
    let sizes: Vec<Option<u64>> = log
        .lines()
        .filter(|line| line.contains("snapshot stored"))
        .map(|line| {
            line.split_whitespace()
                .find_map(|word| word.strip_prefix("bytes="))
                .and_then(|value| value.trim_matches(|c: char| !c.is_ascii_digit()).parse().ok())
        })
        .collect();
    (sizes.last().copied().flatten(), sizes.len())
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(mut child) = node.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// `ClusterService.Status` of the node at `addr`, with a deadline.
pub async fn status(addr: &str, timeout: Duration) -> anyhow::Result<pb::StatusResponse> {
    let uri = if addr.contains("://") { addr.to_string() } else { format!("http://{addr}") };
    let channel = Endpoint::from_shared(uri)?.connect_timeout(Duration::from_secs(1)).connect_lazy();
    let mut request = tonic::Request::new(pb::StatusRequest {});
    request.set_timeout(timeout);
    let mut client = ClusterServiceClient::new(channel);
    match tokio::time::timeout(timeout + Duration::from_millis(500), client.status(request)).await {
        Ok(Ok(response)) => Ok(response.into_inner()),
        Ok(Err(status)) => bail!("status of {addr}: {}", status.message()),
        Err(_) => bail!("status of {addr}: no answer within {timeout:?}"),
    }
}

/// Index of the endpoint whose node reports itself leader, waiting up to
/// [`WAIT`] for one.
pub async fn find_leader(endpoints: &[String]) -> anyhow::Result<usize> {
    let started = Instant::now();
    let mut last_error = String::from("no endpoint answered");
    while started.elapsed() < WAIT {
        for (index, endpoint) in endpoints.iter().enumerate() {
            match status(endpoint, STATUS_TIMEOUT).await {
                Ok(status) if status.role == "Leader" => return Ok(index),
                Ok(status) => last_error = format!("{endpoint} is {}", status.role),
                Err(error) => last_error = error.to_string(),
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bail!("no endpoint reports itself leader within {WAIT:?} ({last_error})")
}

/// Apparent and allocated sizes, in bytes, of every file under `dir`.
pub fn dir_bytes(dir: &Path) -> anyhow::Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let (mut apparent, mut allocated) = (0u64, 0u64);
    let mut pending = vec![dir.to_path_buf()];
    while let Some(path) = pending.pop() {
        for entry in std::fs::read_dir(&path).with_context(|| format!("listing {}", path.display()))? {
            let entry = entry?;
            let metadata = entry.metadata()?;
            if metadata.is_dir() {
                pending.push(entry.path());
            } else {
                apparent += metadata.len();
                allocated += metadata.blocks() * 512;
            }
        }
    }
    Ok((apparent, allocated))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_sizes_come_from_the_last_stored_line() {
        let log = "2025-01-01T00:00:00Z  INFO gavel_raft::node: raft node started node_id=1\n\
                   2025-01-01T00:00:01Z  INFO state_machine: snapshot stored snapshot=T1-5000 bytes=1234\n\
                   2025-01-01T00:00:02Z  INFO state_machine: snapshot stored snapshot=T1-10000 bytes=5678\n";
        assert_eq!(parse_snapshot_lines(log), (Some(5678), 2));
        assert_eq!(parse_snapshot_lines("nothing here\n"), (None, 0));
    }

    #[test]
    fn dir_bytes_adds_nested_files() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir(dir.path().join("sub")).expect("mkdir");
        std::fs::write(dir.path().join("a"), [0u8; 100]).expect("write");
        std::fs::write(dir.path().join("sub/b"), [0u8; 23]).expect("write");
        assert_eq!(dir_bytes(dir.path()).expect("sizes").0, 123);
    }

    #[test]
    fn an_explicit_missing_binary_is_an_error() {
        assert!(resolve_binary(Some(Path::new("/nonexistent/gavel"))).is_err());
    }
}
