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
    /// `gavel-lab chaos` runs them), so that iptables can partition it; the bench
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
            // The bench is one principal writing as fast as the cluster
            // goes: past the default quotas by design (docs/limits.md).
            cluster.set_quota(gavel_testkit::unthrottled(&bench_principal())).await?;
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

impl LocalCluster {
    /// The `snapshot built` (or, with [`INSTALLED_LINE`], `snapshot
    /// installed`) lines of node `id`'s log, in order.
    pub fn snapshot_events(&self, id: u64, message: &str) -> Result<Vec<SnapshotEvent>, BenchError> {
        let log = self.cluster.log_path(id).ok_or(gavel_testkit::Error::UnknownNode(id))?;
        let text = std::fs::read_to_string(log).map_err(BenchError::io(format!("reading {}", log.display())))?;
        Ok(parse_snapshot_events(&text, message))
    }
}

/// The log line of a snapshot built here (`took=`; `bytes=` for a snapshot
/// file; a `gavel node`'s builds are checkpoints of its cold store, with no
/// size of their own).
pub(crate) const BUILT_LINE: &str = "snapshot built";
/// The log line of a snapshot written out to be sent to a follower
/// (`bytes=`, `took=`: for a checkpoint, the view of the cold store written
/// to a file).
pub(crate) const SENT_LINE: &str = "snapshot ready to send";
/// The log line of a snapshot received from the leader and installed (`bytes=`, `took=`).
pub(crate) const INSTALLED_LINE: &str = "snapshot installed";

/// One timed snapshot line of a node log: a build or an install.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct SnapshotEvent {
    /// When the line was written, that is when the build or install ended
    /// (microseconds since the Unix epoch, UTC).
    pub end_unix_us: i64,
    /// Bytes of the snapshot (0 where the line names none: a checkpoint).
    pub bytes: u64,
    /// How long it took (seconds).
    pub took_s: f64,
}

impl SnapshotEvent {
    /// When it started (microseconds since the Unix epoch).
    pub fn start_unix_us(&self) -> i64 {
        self.end_unix_us - (self.took_s * 1e6) as i64
    }
}

/// The lines of `log` containing `message` that carry a timestamp and
/// `took=` (and `bytes=`, or 0).
pub(crate) fn parse_snapshot_events(log: &str, message: &str) -> Vec<SnapshotEvent> {
    log.lines()
        .filter(|line| line.contains(message))
        .filter_map(|line| {
            let line = strip_ansi(line);
            let end_unix_us = parse_rfc3339_us(line.split_whitespace().next()?)?;
            let bytes = match log_field(&line, "bytes") {
                Some(bytes) => bytes.parse().ok()?,
                None => 0,
            };
            let took_s = gavel_testkit::debug_seconds(log_field(&line, "took")?)?;
            Some(SnapshotEvent { end_unix_us, bytes, took_s })
        })
        .collect()
}

/// `line` without ANSI colour sequences (`ESC [ ... m`).
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The value of ` field=` on a log line.
fn log_field<'a>(line: &'a str, field: &str) -> Option<&'a str> {
    let start = line.find(&format!(" {field}="))? + field.len() + 2;
    let rest = &line[start..];
    Some(&rest[..rest.find(char::is_whitespace).unwrap_or(rest.len())])
}

/// An RFC 3339 UTC timestamp as the node logs them
/// (`2026-12-01T21:08:29.370656Z`), in microseconds since the Unix epoch.
pub(crate) fn parse_rfc3339_us(text: &str) -> Option<i64> {
    let text = text.strip_suffix('Z')?;
    let (date, time) = text.split_once('T')?;
    let mut date_parts = date.splitn(3, '-').map(str::parse::<i64>);
    let (year, month, day) = (date_parts.next()?.ok()?, date_parts.next()?.ok()?, date_parts.next()?.ok()?);
    let (clock, fraction) = time.split_once('.').unwrap_or((time, ""));
    let mut clock_parts = clock.splitn(3, ':').map(str::parse::<i64>);
    let (hour, minute, second) = (clock_parts.next()?.ok()?, clock_parts.next()?.ok()?, clock_parts.next()?.ok()?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let micros: i64 = if fraction.is_empty() {
        0
    } else {
        let digits: String = fraction.chars().chain(std::iter::repeat('0')).take(6).collect();
        digits.parse().ok()?
    };
    // Days from the civil date (Howard Hinnant's algorithm).
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    let days = era * 146_097 + day_of_era - 719_468;
    Some(((days * 24 + hour) * 60 + minute) * 60_000_000 + second * 1_000_000 + micros)
}

/// The apparent and allocated bytes of every top-level entry of `dir` (a
/// directory counts everything under it), by name.
pub(crate) fn dir_parts(dir: &Path) -> Result<std::collections::BTreeMap<String, (u64, u64)>, BenchError> {
    use std::os::unix::fs::MetadataExt;
    let mut parts = std::collections::BTreeMap::new();
    let listing = std::fs::read_dir(dir).map_err(BenchError::io(format!("listing {}", dir.display())))?;
    for entry in listing {
        let entry = entry.map_err(BenchError::io(format!("listing {}", dir.display())))?;
        let metadata = entry.metadata().map_err(BenchError::io(format!("reading {}", entry.path().display())))?;
        let sizes =
            if metadata.is_dir() { dir_bytes(&entry.path())? } else { (metadata.len(), metadata.blocks() * 512) };
        parts.insert(entry.file_name().to_string_lossy().into_owned(), sizes);
    }
    Ok(parts)
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
    fn timed_snapshot_lines() {
        let log = "2026-12-01T21:08:29.370622Z  INFO gavel_raft::storage::state_machine: snapshot stored \
                   snapshot={snapshot_id: 1-394-0} bytes=7292169\n\
                   2026-12-01T21:08:29.370656Z  INFO gavel_raft::storage::state_machine: snapshot built \
                   snapshot={snapshot_id: 1-394-0, last_log:T1-N1-394} bytes=7292169 took=98.5ms\n\
                   \u{1b}[2m2026-12-01T21:08:35.5Z\u{1b}[0m \u{1b}[32m INFO\u{1b}[0m snapshot built \
                   \u{1b}[3mbytes\u{1b}[0m\u{1b}[2m=\u{1b}[0m16454157 \u{1b}[3mtook\u{1b}[0m\u{1b}[2m=\u{1b}[0m1.25s\n\
                   2026-12-01T21:09:00.000000Z  INFO snapshot built without figures\n\
                   2026-12-01T21:09:01.000000Z  INFO gavel_raft::storage::state_machine: snapshot built as a \
                   checkpoint snapshot={snapshot_id: 2-500-1} took=1.5ms\n";
        let events = parse_snapshot_events(log, BUILT_LINE);
        assert_eq!(events.len(), 3, "{events:?}");
        assert_eq!((events[2].bytes, events[2].took_s), (0, 0.0015), "a checkpoint has no size of its own");
        assert_eq!(events[0].end_unix_us, 1_796_159_309_370_656);
        assert_eq!(events[0].bytes, 7_292_169);
        assert!((events[0].took_s - 0.0985).abs() < 1e-9, "{events:?}");
        assert_eq!(events[0].start_unix_us(), 1_796_159_309_272_156);
        assert_eq!(
            (events[1].end_unix_us, events[1].bytes, events[1].took_s),
            (1_796_159_315_500_000, 16_454_157, 1.25)
        );
        assert!(parse_snapshot_events(log, INSTALLED_LINE).is_empty());
    }

    #[test]
    fn timestamps_and_durations() {
        assert_eq!(parse_rfc3339_us("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_rfc3339_us("2000-03-01T00:00:01.5Z"), Some(951_868_801_500_000));
        assert_eq!(parse_rfc3339_us("2024-02-29T23:59:59.999999Z"), Some(1_709_251_199_999_999));
        assert_eq!(parse_rfc3339_us("2024-13-01T00:00:00Z"), None);
        assert_eq!(parse_rfc3339_us("2024-01-01 00:00:00"), None);
        assert_eq!(gavel_testkit::debug_seconds("1.5s"), Some(1.5));
        assert_eq!(gavel_testkit::debug_seconds("250ms"), Some(0.25));
        assert_eq!(gavel_testkit::debug_seconds("12µs"), Some(12e-6));
        assert_eq!(gavel_testkit::debug_seconds("forever"), None);
    }

    #[test]
    fn dir_parts_name_the_top_level_entries() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir(dir.path().join("raft-log")).expect("mkdir");
        std::fs::write(dir.path().join("raft-log/segment"), [0u8; 100]).expect("write");
        std::fs::write(dir.path().join("cold.redb"), [0u8; 23]).expect("write");
        let parts = dir_parts(dir.path()).expect("parts");
        assert_eq!(parts.keys().collect::<Vec<_>>(), ["cold.redb", "raft-log"]);
        assert_eq!((parts["cold.redb"].0, parts["raft-log"].0), (23, 100));
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
