//! What a cluster is made of: [`ClusterSpec`], [`RaftTimings`],
//! [`SnapshotPolicy`], [`Security`].

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use gavel_pki::Principal;

/// How the nodes secure their port.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Security {
    /// Every node gets `--insecure`: plaintext, no authentication, identity
    /// self-declared (what every test ran with before nodes required TLS).
    #[default]
    Insecure,
    /// The kit creates a CA, node certificates, an admin client certificate
    /// and a token key pair with `gavel-pki` in `data_root/certs`, and starts
    /// every node with `--certs-dir` and `--bootstrap-admin`.
    Secure(SecureSpec),
}

impl Security {
    /// TLS with `admin` as the first admin, and no extra SAN hosts.
    pub fn secure(admin: Principal) -> Security {
        Security::Secure(SecureSpec { admin, hosts: Vec::new() })
    }
}

/// The material of a secure cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecureSpec {
    /// The first admin (`--bootstrap-admin`). The kit's own status calls
    /// authenticate with its client certificate.
    pub admin: Principal,
    /// Extra DNS or IP SANs of every node certificate. Each node's
    /// certificate already names `localhost`, `127.0.0.1` and the host of
    /// the address its launcher gave it (a namespace IP such as 10.x for the
    /// chaos harness).
    pub hosts: Vec<String>,
}

/// Raft timings passed to every node; `None` keeps the node's default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RaftTimings {
    /// `--heartbeat-ms`.
    pub heartbeat_ms: Option<u64>,
    /// `--election-timeout-min-ms`.
    pub election_timeout_min_ms: Option<u64>,
    /// `--election-timeout-max-ms`.
    pub election_timeout_max_ms: Option<u64>,
    /// `--rpc-timeout-ms`.
    pub rpc_timeout_ms: Option<u64>,
    /// `--snapshot-timeout-ms`.
    pub snapshot_timeout_ms: Option<u64>,
}

impl RaftTimings {
    /// The timings as `gavel node` flags (only the ones that are set).
    pub fn to_flags(&self) -> Vec<String> {
        [
            ("heartbeat-ms", self.heartbeat_ms),
            ("election-timeout-min-ms", self.election_timeout_min_ms),
            ("election-timeout-max-ms", self.election_timeout_max_ms),
            ("rpc-timeout-ms", self.rpc_timeout_ms),
            ("snapshot-timeout-ms", self.snapshot_timeout_ms),
        ]
        .into_iter()
        .filter_map(|(flag, value)| Some(format!("--{flag}={}", value?)))
        .collect()
    }
}

/// When nodes build snapshots and how much log they keep behind one; `None`
/// keeps the node's default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SnapshotPolicy {
    /// `--snapshot-logs-since-last`: build a snapshot after this many entries.
    pub logs_since_last: Option<u64>,
    /// `--snapshot-commands-since-last`: build a snapshot after this many
    /// applied commands (an entry carries up to 512 of them).
    pub commands_since_last: Option<u64>,
    /// `--logs-to-keep`: entries kept behind a snapshot.
    pub logs_to_keep: Option<u64>,
}

impl SnapshotPolicy {
    /// The policy as `gavel node` flags (only the ones that are set).
    pub fn to_flags(&self) -> Vec<String> {
        [
            ("snapshot-logs-since-last", self.logs_since_last),
            ("snapshot-commands-since-last", self.commands_since_last),
            ("logs-to-keep", self.logs_to_keep),
        ]
        .into_iter()
        .filter_map(|(flag, value)| Some(format!("--{flag}={}", value?)))
        .collect()
    }
}

/// What to start: the initial voters have ids `1..=nodes`; node `i` keeps its
/// data in `data_root/n<i>` and appends its standard output and error to
/// `data_root/n<i>.log`.
#[derive(Debug, Clone)]
pub struct ClusterSpec {
    /// Number of initial voters.
    pub nodes: u64,
    /// The `gavel` binary (see [`crate::resolve_gavel_binary`]).
    pub binary: PathBuf,
    /// The directory holding every node's data directory and log. The kit
    /// never deletes it.
    pub data_root: PathBuf,
    /// Raft timings of every node.
    pub timings: RaftTimings,
    /// Snapshot policy of every node.
    pub snapshots: SnapshotPolicy,
    /// Extra `gavel node` flags of every node, after the timings.
    pub args: Vec<String>,
    /// Extra flags of one node, after [`ClusterSpec::args`].
    pub node_args: BTreeMap<u64, Vec<String>>,
    /// Environment of every node. `GAVEL_LOG` is `info,openraft=warn` unless set here.
    pub env: Vec<(String, String)>,
    /// Environment of one node, after [`ClusterSpec::env`].
    pub node_env: BTreeMap<u64, Vec<(String, String)>>,
    /// How long [`crate::Cluster::start`] waits for a leader.
    pub start_timeout: Duration,
    /// Deadline of one `ClusterService.Status` call, connection included. A
    /// Status after new applies hashes the whole state, which takes seconds
    /// with a million records: a benchmark needs a generous one.
    pub status_timeout: Duration,
    /// The word in the marker lines the kit appends to node logs at every
    /// start, signal and exit (`===== <label> [<ms>]: ...`).
    pub log_label: String,
    /// Plaintext (`--insecure`, the default) or TLS with kit-made material.
    pub security: Security,
}

impl ClusterSpec {
    /// Three nodes with the node's default timings and snapshot policy, a 30 s
    /// start timeout and a 1 s status timeout.
    pub fn new(binary: impl Into<PathBuf>, data_root: impl Into<PathBuf>) -> ClusterSpec {
        ClusterSpec {
            nodes: 3,
            binary: binary.into(),
            data_root: data_root.into(),
            timings: RaftTimings::default(),
            snapshots: SnapshotPolicy::default(),
            args: Vec::new(),
            node_args: BTreeMap::new(),
            env: Vec::new(),
            node_env: BTreeMap::new(),
            start_timeout: Duration::from_secs(30),
            status_timeout: Duration::from_secs(1),
            log_label: "gavel-testkit".to_string(),
            security: Security::Insecure,
        }
    }

    /// Every flag node `id` gets after its identity flags: timings, snapshot
    /// policy, [`ClusterSpec::args`], then its own [`ClusterSpec::node_args`].
    ///
    /// A kit cluster's nodes cosign no audit checkpoints
    /// (`--audit-checkpoints=false`) unless the args set the flag: a
    /// checkpoint is log entries proposed up to a second after the last
    /// write, and the kit's users compare applied indexes and state hashes
    /// across quiet windows. A test of checkpoints turns them on.
    pub fn flags_of(&self, id: u64) -> Vec<String> {
        let mut flags = self.timings.to_flags();
        flags.extend(self.snapshots.to_flags());
        let own = self.node_args.get(&id).into_iter().flatten();
        if !self.args.iter().chain(own).any(|flag| flag.starts_with("--audit-checkpoints")) {
            flags.push("--audit-checkpoints=false".to_string());
        }
        flags.extend(self.args.iter().cloned());
        flags.extend(self.node_args.get(&id).into_iter().flatten().cloned());
        flags
    }

    /// The environment node `id` gets: `GAVEL_LOG` by default, then
    /// [`ClusterSpec::env`], then its own [`ClusterSpec::node_env`].
    pub fn env_of(&self, id: u64) -> Vec<(String, String)> {
        let own = self.node_env.get(&id).into_iter().flatten();
        let mut env = Vec::new();
        if !self.env.iter().chain(own.clone()).any(|(key, _)| key == "GAVEL_LOG") {
            env.push(("GAVEL_LOG".to_string(), "info,openraft=warn".to_string()));
        }
        env.extend(self.env.iter().cloned());
        env.extend(own.cloned());
        env
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_come_in_order_and_only_when_set() {
        let mut spec = ClusterSpec::new("/bin/gavel", "/tmp/x");
        assert_eq!(spec.flags_of(1), vec!["--audit-checkpoints=false"], "quiet by default");
        spec.timings.heartbeat_ms = Some(100);
        spec.snapshots.logs_to_keep = Some(5);
        spec.args.push("--retention-ms=1000".to_string());
        spec.node_args.insert(2, vec!["--join".to_string()]);
        assert_eq!(
            spec.flags_of(1),
            vec!["--heartbeat-ms=100", "--logs-to-keep=5", "--audit-checkpoints=false", "--retention-ms=1000"]
        );
        spec.node_args.insert(3, vec!["--audit-checkpoints=true".to_string()]);
        assert_eq!(spec.flags_of(3).iter().filter(|flag| flag.starts_with("--audit-checkpoints")).count(), 1);
        spec.snapshots.commands_since_last = Some(200);
        assert_eq!(spec.flags_of(1)[1..3], ["--snapshot-commands-since-last=200", "--logs-to-keep=5"]);
        assert_eq!(spec.flags_of(2).last().map(String::as_str), Some("--join"));
    }

    #[test]
    fn gavel_log_has_a_default_that_the_spec_overrides() {
        let mut spec = ClusterSpec::new("/bin/gavel", "/tmp/x");
        assert_eq!(spec.env_of(1), vec![("GAVEL_LOG".to_string(), "info,openraft=warn".to_string())]);
        spec.node_env.insert(1, vec![("GAVEL_LOG".to_string(), "debug".to_string())]);
        assert_eq!(spec.env_of(1), vec![("GAVEL_LOG".to_string(), "debug".to_string())]);
        spec.env.push(("GAVEL_MUTANT".to_string(), "x".to_string()));
        assert_eq!(spec.env_of(2).len(), 2);
    }
}
