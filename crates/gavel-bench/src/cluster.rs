//! The cluster under load: bare endpoints, or a local three-node
//! [`gavel_testkit::Cluster`] the bench starts in a temporary directory
//! (full durability, fsync on) and kills at the end; and what the bench reads
//! from the nodes' logs and data directories.
//!
//! The local cluster is secure unless `--insecure`: the kit makes a CA,
//! node certificates and the certificate of the bench's one principal
//! ([`BENCH_PRINCIPAL`], the cluster's first admin), which then grants itself
//! [`BENCH_GRANTS`]. Every SDK client and status call of the bench dials
//! with a [`Dial`] (TLS with that certificate, or plaintext); its raw
//! channels come from [`Cluster::channel`], as the same principal.

use std::path::{Path, PathBuf};
use std::time::Duration;

use gavel_client::{pb, Client, ClientConfig, ClientTls};
use gavel_pki::{GrantName, Principal, PrincipalKind};
use gavel_testkit::{Cluster, ClusterSpec, Security};

use crate::BenchError;

/// The id of the bench's principal, `service:bench`: the local cluster's
/// first admin, which registers the capabilities.
pub const BENCH_PRINCIPAL: &str = "bench";

/// What the bench principal grants itself on the local cluster: the kit's
/// harness grants (it creates and consumes approvals and submits naming its
/// agents, decides naming the bench approver, polls and reports as every
/// worker).
pub const BENCH_GRANTS: [GrantName; 6] = gavel_testkit::HARNESS_GRANTS;

/// How the bench reaches the nodes: the TLS and token every client and raw
/// channel uses (none: plaintext).
#[derive(Debug, Clone, Default)]
pub(crate) struct Dial {
    /// Client TLS (CA and certificate).
    pub tls: Option<ClientTls>,
    /// A bearer token the SDK clients send.
    pub token: Option<String>,
}

impl Dial {
    /// The dial of `config`'s credentials.
    pub fn of(config: &ClientConfig) -> Dial {
        Dial { tls: config.tls.clone(), token: config.token.clone() }
    }

    /// The default client configuration with these credentials.
    pub fn config(&self) -> ClientConfig {
        ClientConfig { tls: self.tls.clone(), token: self.token.clone(), ..ClientConfig::default() }
    }

    /// Whether the nodes are dialled over TLS.
    pub fn is_secure(&self) -> bool {
        self.tls.is_some()
    }

    /// A client whose first endpoint is `endpoints[first]`, then the others.
    pub fn client(&self, endpoints: &[String], first: usize) -> Result<Client, BenchError> {
        self.client_with(endpoints, first, ClientConfig::default())
    }

    /// [`Dial::client`] with the timings of `timings`.
    pub fn client_with(&self, endpoints: &[String], first: usize, timings: ClientConfig) -> Result<Client, BenchError> {
        let ordered: Vec<String> =
            (0..endpoints.len()).map(|offset| endpoints[(first + offset) % endpoints.len()].clone()).collect();
        let config = ClientConfig { tls: self.tls.clone(), token: self.token.clone(), ..timings };
        Client::with_config(&ordered, config).map_err(BenchError::client("creating a client"))
    }

    /// `ClusterService.Status` of the node at `addr`, within [`STATUS_TIMEOUT`].
    pub async fn status(&self, addr: &str) -> Result<pb::StatusResponse, BenchError> {
        Ok(gavel_testkit::status_with(addr, STATUS_TIMEOUT, self.tls.as_ref()).await?)
    }

    /// Index of the endpoint whose node reports itself leader, waiting up to [`WAIT`].
    pub async fn find_leader(&self, endpoints: &[String]) -> Result<usize, BenchError> {
        Ok(gavel_testkit::find_leader_with(endpoints, STATUS_TIMEOUT, WAIT, self.tls.as_ref()).await?)
    }
}

/// `service:bench`.
pub fn bench_principal() -> Principal {
    Principal::new(PrincipalKind::Service, BENCH_PRINCIPAL).expect("a valid principal id")
}

/// Longest wait for a leader or a catch-up.
pub const WAIT: Duration = Duration::from_secs(120);
/// Deadline of one Status call. Generous: a Status after new applies hashes
/// the whole state, which takes seconds with a million records.
pub const STATUS_TIMEOUT: Duration = Duration::from_secs(60);

/// The log line a node writes when it restored its state from the stored
/// snapshot at start.
pub(crate) const RESTORED_LINE: &str = "restored the application from the stored snapshot";

/// A local cluster and the temporary directory holding its data and logs.
pub(crate) struct LocalCluster {
    /// The node processes; ids 1, 2, 3 are the endpoints' positions 0, 1, 2.
    pub cluster: Cluster,
    /// The network namespaces the nodes run in (partition faults), if any.
    /// Declared after `cluster`, so the nodes are killed before it is torn down.
    pub net: Option<gavel_chaos::net::Net>,
    /// Each node's `--metrics-listen` address (none in network namespaces,
    /// where loopback is the node's own).
    pub metrics_addrs: Vec<String>,
    dir: Option<tempfile::TempDir>,
}

impl LocalCluster {
    /// Starts three nodes of `binary` in a new temporary directory (under
    /// `parent` when given) with the extra `flags`, over TLS unless
    /// `insecure`, and waits for a leader (and, secure, for the bench
    /// principal's grants).
    pub async fn start(
        binary: PathBuf,
        parent: Option<&Path>,
        flags: &[String],
        insecure: bool,
    ) -> Result<LocalCluster, BenchError> {
        LocalCluster::start_in(binary, parent, flags, insecure, false).await
    }

    /// [`LocalCluster::start`], with `namespaces`: each node in its own
    /// network namespace of a `gavel_chaos` [`gavel_chaos::net::Net`] (as
    /// `gavel chaos` runs them), so that iptables can partition it; the bench
    /// reaches every node through the bridge.
    pub async fn start_in(
        binary: PathBuf,
        parent: Option<&Path>,
        flags: &[String],
        insecure: bool,
        namespaces: bool,
    ) -> Result<LocalCluster, BenchError> {
        let dir = match parent {
            Some(parent) => {
                std::fs::create_dir_all(parent).map_err(BenchError::io(format!("creating {}", parent.display())))?;
                tempfile::Builder::new().prefix("gavel-bench-").tempdir_in(parent)
            }
            None => tempfile::Builder::new().prefix("gavel-bench-").tempdir(),
        }
        .map_err(BenchError::io("creating the cluster's directory"))?;
        let mut spec = ClusterSpec::new(binary, dir.path());
        spec.args = flags.to_vec();
        let mut metrics_addrs = Vec::new();
        if !namespaces {
            for id in 1..=3 {
                let addr = format!("127.0.0.1:{}", gavel_testkit::free_port()?);
                spec.node_args.entry(id).or_default().push(format!("--metrics-listen={addr}"));
                metrics_addrs.push(addr);
            }
        }
        spec.start_timeout = WAIT;
        spec.status_timeout = STATUS_TIMEOUT;
        if !insecure {
            spec.security = Security::secure(bench_principal());
        }
        let (cluster, net) = if namespaces {
            let net = start_net().await?;
            let launcher =
                gavel_chaos::net::Namespaces { topology: net.topology(), port: gavel_chaos::cluster::NAMESPACE_PORT };
            (Cluster::start_with(spec, launcher).await?, Some(net))
        } else {
            (Cluster::start(spec).await?, None)
        };
        if !insecure {
            cluster.grant(&bench_principal(), &BENCH_GRANTS, WAIT).await?;
        }
        Ok(LocalCluster { cluster, net, metrics_addrs, dir: Some(dir) })
    }

    /// How the bench reaches this cluster: as the bench principal over TLS,
    /// or plaintext.
    pub fn dial(&self) -> Dial {
        Dial::of(&self.cluster.client_config())
    }

    /// The directory holding the nodes' data and logs.
    pub fn dir(&self) -> &Path {
        &self.cluster.spec().data_root
    }

    /// Stops every node and keeps the data directory after the run; returns its path.
    pub fn keep_data(&mut self) -> Option<PathBuf> {
        self.cluster.shutdown();
        self.dir.take().map(tempfile::TempDir::keep)
    }

    /// Size in bytes of the latest snapshot node `id` stored, from its log
    /// (`snapshot stored ... bytes=N`), how many it stored in all, and how
    /// often it restored one at start.
    pub fn snapshot_lines(&self, id: u64) -> Result<SnapshotLines, BenchError> {
        let log = self.cluster.log_path(id).ok_or(gavel_testkit::Error::UnknownNode(id))?;
        let text = std::fs::read_to_string(log).map_err(BenchError::io(format!("reading {}", log.display())))?;
        Ok(parse_snapshot_lines(&text))
    }
}

/// Sets up three network namespaces under a fresh prefix (after removing
/// those of dead runs), or says why they are not available here.
async fn start_net() -> Result<gavel_chaos::net::Net, BenchError> {
    use gavel_chaos::net::{self, Net};
    let setup = tokio::task::spawn_blocking(|| {
        let availability = Net::available();
        if !availability.available {
            return Err(BenchError::Invalid(format!(
                "a partition needs network namespaces and iptables (root): {}",
                availability.reason.unwrap_or_default()
            )));
        }
        net::cleanup_stale(net::FAMILY);
        let prefix = net::fresh_prefix()?;
        Ok(Net::setup(3, &prefix)?)
    });
    setup.await?
}

/// What a node log says about snapshots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct SnapshotLines {
    /// Bytes of the last snapshot stored.
    pub last_bytes: Option<u64>,
    /// Snapshots stored.
    pub stored: usize,
    /// Starts that restored the state from the stored snapshot.
    pub restored: usize,
}

/// Finds the `snapshot stored` lines of a node log (the byte size of the
/// last one and their count) and the restores from a snapshot at start.
pub(crate) fn parse_snapshot_lines(log: &str) -> SnapshotLines {
    let sizes: Vec<Option<u64>> = log
        .lines()
        .filter(|line| line.contains("snapshot stored"))
        .map(|line| {
            line.split_whitespace()
                .find_map(|word| word.strip_prefix("bytes="))
                .and_then(|value| value.trim_matches(|c: char| !c.is_ascii_digit()).parse().ok())
        })
        .collect();
    SnapshotLines {
        last_bytes: sizes.last().copied().flatten(),
        stored: sizes.len(),
        restored: log.lines().filter(|line| line.contains(RESTORED_LINE)).count(),
    }
}

/// Apparent and allocated sizes, in bytes, of every file under `dir`.
pub(crate) fn dir_bytes(dir: &Path) -> Result<(u64, u64), BenchError> {
    use std::os::unix::fs::MetadataExt;
    let (mut apparent, mut allocated) = (0u64, 0u64);
    let mut pending = vec![dir.to_path_buf()];
    while let Some(path) = pending.pop() {
        let listing = std::fs::read_dir(&path).map_err(BenchError::io(format!("listing {}", path.display())))?;
        for entry in listing {
            let entry = entry.map_err(BenchError::io(format!("listing {}", path.display())))?;
            let metadata = entry.metadata().map_err(BenchError::io(format!("reading {}", entry.path().display())))?;
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
                   2025-01-01T00:00:02Z  INFO state_machine: restored the application from the stored snapshot\n\
                   2025-01-01T00:00:03Z  INFO state_machine: snapshot stored snapshot=T1-10000 bytes=5678\n";
        assert_eq!(parse_snapshot_lines(log), SnapshotLines { last_bytes: Some(5678), stored: 2, restored: 1 });
        assert_eq!(parse_snapshot_lines("nothing here\n"), SnapshotLines::default());
    }

    #[test]
    fn dir_bytes_adds_nested_files() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir(dir.path().join("sub")).expect("mkdir");
        std::fs::write(dir.path().join("a"), [0u8; 100]).expect("write");
        std::fs::write(dir.path().join("sub/b"), [0u8; 23]).expect("write");
        assert_eq!(dir_bytes(dir.path()).expect("sizes").0, 123);
    }
}
