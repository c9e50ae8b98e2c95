//! Command-line arguments of the `gavel` binary (flags or `GAVEL_*` variables).
//! The operator commands' arguments live next to their code in [`crate::commands`].

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use gavel_raft::RaftTimings;

use crate::commands::access::AccessArgs;
use crate::commands::approval::ApprovalArgs;
use crate::commands::audit::AuditArgs;
use crate::commands::backup::BackupArgs;
use crate::commands::capability::CapabilityArgs;
use crate::commands::cert::CertArgs;
use crate::commands::cluster::ClusterArgs;
use crate::commands::codes::CodesArgs;
use crate::commands::exec::ExecArgs;
use crate::commands::policy::PolicyArgs;
use crate::commands::token::TokenArgs;

/// The version `gavel --version` prints. A build with the planted bugs of
/// the chaos harness says so, so such a binary is never mistaken for a real one.
const VERSION: &str = if cfg!(feature = "mutants") {
    concat!(env!("CARGO_PKG_VERSION"), " (with planted bugs)")
} else {
    env!("CARGO_PKG_VERSION")
};

/// Gavel: a replicated coordinator for governed AI-agent tool calls.
#[derive(Debug, Parser)]
#[command(name = "gavel", version = VERSION, about)]
pub struct Cli {
    /// What to run.
    #[command(subcommand)]
    pub command: TopCommand,
}

/// Top-level commands.
#[derive(Debug, Subcommand)]
pub enum TopCommand {
    /// Run one cluster node.
    Node(Box<NodeArgs>),
    /// Run a local three-node cluster as three processes on 127.0.0.1 (the embedded default).
    Dev(DevArgs),
    /// The approver's desk: a web console that calls the cluster as the signed-in person.
    Console(crate::console::ConsoleArgs),
    /// Post each new pending approval its principal may read to Slack or signed webhooks.
    Notify(crate::notify::NotifyArgs),
    /// An MCP gateway: forwards ungoverned tool calls, turns governed ones into Gavel executions (`check` validates a configuration).
    Mcp(Box<crate::commands::mcp::McpArgs>),
    /// A C2SP tlog-witness of audit logs: cosigns checkpoints consistent with the last it saw, refuses forks.
    Witness(crate::witness::WitnessArgs),
    /// Approvals: list, get, approve, reject, withdraw (a vote), cancel, votes.
    Approval(ApprovalArgs),
    /// The capability registry: register, get, list.
    Capability(CapabilityArgs),
    /// Executions: submit, resume, get, wait, cancel, events.
    Exec(ExecArgs),
    /// The audit trail: tail (and follow) from a cursor.
    Audit(AuditArgs),
    /// Cluster nodes and membership: status, add-node, promote, remove-node.
    Cluster(ClusterArgs),
    /// Backups: save (through the leader), restore (seed a new node), inspect.
    Backup(BackupArgs),
    /// Who may do what: grant, revoke, list, whoami.
    Access(AccessArgs),
    /// Approval policies (quorum): set, get, list, delete.
    Policy(PolicyArgs),
    /// Certificates: create-ca, create-node, create-client.
    Cert(CertArgs),
    /// Bearer tokens: issue.
    Token(TokenArgs),
    /// Every stable error code: its gRPC class and when it happens.
    Codes(CodesArgs),
}

/// Raft timings, every one configurable.
#[derive(Debug, Clone, Args)]
pub struct TimingArgs {
    /// Leader heartbeat interval (ms). Keep at 100 or more: it bounds replication RPCs.
    #[arg(long, env = "GAVEL_HEARTBEAT_MS", default_value_t = RaftTimings::default().heartbeat_ms)]
    pub heartbeat_ms: u64,
    /// Minimum election timeout (ms).
    #[arg(long, env = "GAVEL_ELECTION_TIMEOUT_MIN_MS", default_value_t = RaftTimings::default().election_timeout_min_ms)]
    pub election_timeout_min_ms: u64,
    /// Maximum election timeout (ms).
    #[arg(long, env = "GAVEL_ELECTION_TIMEOUT_MAX_MS", default_value_t = RaftTimings::default().election_timeout_max_ms)]
    pub election_timeout_max_ms: u64,
    /// Deadline of one replication or vote RPC (ms).
    #[arg(long, env = "GAVEL_RPC_TIMEOUT_MS", default_value_t = RaftTimings::default().rpc_timeout_ms)]
    pub rpc_timeout_ms: u64,
    /// Deadline of one snapshot transfer (ms).
    #[arg(long, env = "GAVEL_SNAPSHOT_TIMEOUT_MS", default_value_t = RaftTimings::default().snapshot_timeout_ms)]
    pub snapshot_timeout_ms: u64,
    /// Build a snapshot after this many log entries.
    #[arg(long, env = "GAVEL_SNAPSHOT_LOGS_SINCE_LAST", default_value_t = RaftTimings::default().snapshot_logs_since_last)]
    pub snapshot_logs_since_last: u64,
    /// Build a snapshot after this many applied commands (an entry carries up to 512).
    #[arg(long, env = "GAVEL_SNAPSHOT_COMMANDS_SINCE_LAST", default_value_t = RaftTimings::default().snapshot_commands_since_last)]
    pub snapshot_commands_since_last: u64,
    /// Log entries kept behind a snapshot.
    #[arg(long, env = "GAVEL_LOGS_TO_KEEP", default_value_t = RaftTimings::default().logs_to_keep)]
    pub logs_to_keep: u64,
}

impl TimingArgs {
    /// The timings as the Raft layer takes them.
    pub fn timings(&self) -> RaftTimings {
        RaftTimings {
            heartbeat_ms: self.heartbeat_ms,
            election_timeout_min_ms: self.election_timeout_min_ms,
            election_timeout_max_ms: self.election_timeout_max_ms,
            rpc_timeout_ms: self.rpc_timeout_ms,
            snapshot_timeout_ms: self.snapshot_timeout_ms,
            snapshot_logs_since_last: self.snapshot_logs_since_last,
            snapshot_commands_since_last: self.snapshot_commands_since_last,
            logs_to_keep: self.logs_to_keep,
            // Not a flag (yet): pre-vote is on, as in the Raft layer's defaults.
            pre_vote: RaftTimings::default().pre_vote,
        }
    }

    /// The same timings as flags, to pass on to child processes.
    pub fn to_flags(&self) -> Vec<String> {
        vec![
            format!("--heartbeat-ms={}", self.heartbeat_ms),
            format!("--election-timeout-min-ms={}", self.election_timeout_min_ms),
            format!("--election-timeout-max-ms={}", self.election_timeout_max_ms),
            format!("--rpc-timeout-ms={}", self.rpc_timeout_ms),
            format!("--snapshot-timeout-ms={}", self.snapshot_timeout_ms),
            format!("--snapshot-logs-since-last={}", self.snapshot_logs_since_last),
            format!("--snapshot-commands-since-last={}", self.snapshot_commands_since_last),
            format!("--logs-to-keep={}", self.logs_to_keep),
        ]
    }
}

/// `--auth-deadline-ms` and `--idle-timeout-ms` at most (`CONNECTION_TIMEOUT_MAX`).
const CONNECTION_TIMEOUT_MS_MAX: u64 = gavel_server::limits::CONNECTION_TIMEOUT_MAX.as_secs() * 1000;

/// `--worker-threads` at most.
pub const WORKER_THREADS_MAX: i64 = 256;

/// `--proposals-in-flight-max`, `--long-polls-max` and `--reads-in-flight-max` at most.
const IN_FLIGHT_FLAG_MAX: u64 = gavel_server::limits::IN_FLIGHT_FLAG_MAX;

/// `gavel node`.
#[derive(Debug, Clone, Args)]
pub struct NodeArgs {
    /// This node's id (non-zero).
    #[arg(long, env = "GAVEL_ID")]
    pub id: u64,
    /// Address to listen on, e.g. 127.0.0.1:7401. Also the address peers and clients use.
    #[arg(long, env = "GAVEL_LISTEN")]
    pub listen: String,
    /// Initial voters as `id=host:port,...` (including this node).
    #[arg(long, env = "GAVEL_PEERS", default_value = "")]
    pub peers: String,
    /// Data directory (sled log, votes, snapshots).
    #[arg(long, env = "GAVEL_DATA_DIR")]
    pub data_dir: PathBuf,
    /// Join an existing cluster as a learner later (never bootstrap a new one).
    #[arg(long, env = "GAVEL_JOIN", default_value_t = false)]
    pub join: bool,
    /// Retention of finalized executions and closed approvals (ms).
    #[arg(long, env = "GAVEL_RETENTION_MS", default_value_t = gavel_core::Retention::default().records_ms)]
    pub retention_ms: u64,
    /// Retention of audit events (ms).
    #[arg(long, env = "GAVEL_EVENT_RETENTION_MS", default_value_t = gavel_core::Retention::default().events_ms)]
    pub event_retention_ms: u64,
    /// Serve Prometheus metrics on plain HTTP at ADDR (`GET /metrics`), e.g.
    /// 127.0.0.1:7501. Off unless given. Metrics carry counts, never ids.
    #[arg(long, env = "GAVEL_METRICS_LISTEN", value_name = "ADDR")]
    pub metrics_listen: Option<String>,
    /// Also serve the audit tree as C2SP tlog-tiles on the --metrics-listen
    /// address, under /audit/, to whoever reaches it (no authentication):
    /// `hashes` the checkpoint and hash tiles, `entries` the entry bundles
    /// (the events) too; `off` nothing (docs/audit.md).
    #[arg(long, env = "GAVEL_AUDIT_TILES", value_name = "WHAT", default_value = "off", requires = "metrics_listen")]
    pub audit_tiles: gavel_server::audit_tiles::AuditTiles,
    /// Calls that propose a command this node takes at once; past it a call
    /// is refused RESOURCE_EXHAUSTED with a retry hint (docs/limits.md).
    #[arg(long, env = "GAVEL_PROPOSALS_IN_FLIGHT_MAX", default_value_t = gavel_server::limits::PROPOSALS_IN_FLIGHT_MAX as u64, value_parser = clap::value_parser!(u64).range(1..=IN_FLIGHT_FLAG_MAX))]
    pub proposals_in_flight_max: u64,
    /// Long-polls (Poll, WaitExecution) waiting on this node at once.
    #[arg(long, env = "GAVEL_LONG_POLLS_MAX", default_value_t = gavel_server::limits::LONG_POLLS_MAX as u64, value_parser = clap::value_parser!(u64).range(1..=IN_FLIGHT_FLAG_MAX))]
    pub long_polls_max: u64,
    /// Linearizable reads (Get*, List*, WhoAmI) this node takes at once.
    #[arg(long, env = "GAVEL_READS_IN_FLIGHT_MAX", default_value_t = gavel_server::limits::READS_IN_FLIGHT_MAX as u64, value_parser = clap::value_parser!(u64).range(1..=IN_FLIGHT_FLAG_MAX))]
    pub reads_in_flight_max: u64,
    /// How long a new connection has, from accept, to finish its TLS
    /// handshake and (without a client certificate naming a principal) make
    /// its first authenticated call; past it the node closes it (docs/limits.md).
    #[arg(long, env = "GAVEL_AUTH_DEADLINE_MS", default_value_t = gavel_server::limits::AUTH_DEADLINE.as_millis() as u64, value_parser = clap::value_parser!(u64).range(1..=CONNECTION_TIMEOUT_MS_MAX))]
    pub auth_deadline_ms: u64,
    /// How long a connection may carry no call (no stream in flight) before
    /// the node closes it with GOAWAY; clients reconnect on their next call.
    #[arg(long, env = "GAVEL_IDLE_TIMEOUT_MS", default_value_t = gavel_server::limits::IDLE_TIMEOUT.as_millis() as u64, value_parser = clap::value_parser!(u64).range(1..=CONNECTION_TIMEOUT_MS_MAX))]
    pub idle_timeout_ms: u64,
    /// Worker threads of the node's async runtime (default: one per core).
    /// Fewer threads mean fewer wake-ups per command: with three nodes on
    /// two cores, one thread each measured 13% less CPU and 5% lower latency
    /// per operation at one client, and 12% less CPU at 64 clients with the
    /// same throughput (docs/performance.md).
    #[arg(long, env = "GAVEL_WORKER_THREADS", value_parser = clap::value_parser!(u16).range(1..=WORKER_THREADS_MAX))]
    pub worker_threads: Option<u16>,
    /// Connections open at once; past it new ones are closed at accept,
    /// before their TLS handshake. Lowered to stay under RLIMIT_NOFILE.
    #[arg(long, env = "GAVEL_CONNECTIONS_MAX", default_value_t = gavel_server::limits::CONNECTIONS_MAX as u64, value_parser = clap::value_parser!(u64).range(1..))]
    pub connections_max: u64,
    /// Unauthenticated connections open at once (at most half of
    /// --connections-max); past it a new one evicts the oldest.
    #[arg(long, env = "GAVEL_UNAUTHENTICATED_CONNECTIONS_MAX", default_value_t = gavel_server::limits::UNAUTHENTICATED_CONNECTIONS_MAX as u64, value_parser = clap::value_parser!(u64).range(1..))]
    pub unauthenticated_connections_max: u64,
    /// Unauthenticated connections open at once from one IPv4 address; past
    /// it a new one evicts that address's oldest.
    #[arg(long, env = "GAVEL_CONNECTIONS_PER_SOURCE_MAX", default_value_t = gavel_server::limits::CONNECTIONS_PER_SOURCE_MAX as u64, value_parser = clap::value_parser!(u64).range(1..))]
    pub connections_per_source_max: u64,
    /// Unauthenticated connections open at once from one IPv4 /24 or IPv6
    /// /64; past it a new one evicts that prefix's oldest.
    #[arg(long, env = "GAVEL_CONNECTIONS_PER_PREFIX_MAX", default_value_t = gavel_server::limits::CONNECTIONS_PER_PREFIX_MAX as u64, value_parser = clap::value_parser!(u64).range(1..))]
    pub connections_per_prefix_max: u64,
    /// Cold writes (finalized records and audit events) held in memory
    /// before they are written into `cold.redb` between snapshots.
    /// Lower: less memory and more, smaller writes.
    #[arg(long, env = "GAVEL_CHECKPOINT_COLD_WRITES", default_value_t = gavel_store::app::COLD_PENDING_MAX as u64, value_parser = clap::value_parser!(u64).range(1..))]
    pub checkpoint_cold_writes: u64,
    /// Keep a note key (`audit-note.key` in the data directory) and cosign
    /// the audit trail's checkpoints (docs/audit.md). `false` takes this
    /// node out: it signs nothing, and a majority of the registered keys
    /// must still sign for a checkpoint to be published.
    #[arg(long, env = "GAVEL_AUDIT_CHECKPOINTS", default_value_t = true, action = clap::ArgAction::Set)]
    pub audit_checkpoints: bool,
    /// A C2SP tlog-policy file whose `witness NAME VKEY URL` lines name the
    /// external witnesses (C2SP tlog-witness) the leader submits each
    /// published checkpoint to; their cosignatures join the checkpoint
    /// (docs/audit.md). Witnesses without a URL are not submitted to.
    #[arg(long, env = "GAVEL_AUDIT_WITNESS_POLICY", value_name = "FILE")]
    pub audit_witness_policy: Option<std::path::PathBuf>,
    /// How log lines are written to standard error: `text` for people,
    /// `json` (one object per line, with the span fields such as `trace_id`) for collectors.
    #[arg(long, env = "GAVEL_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Export trace spans over OTLP/gRPC to this collector, e.g.
    /// http://127.0.0.1:4317. Off unless given.
    #[arg(long, env = "GAVEL_OTLP_ENDPOINT", value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    /// Raft timings.
    #[command(flatten)]
    pub timings: TimingArgs,
    /// TLS, tokens and the first admin.
    #[command(flatten, next_help_heading = "Security")]
    pub security: NodeSecurityArgs,
}

/// What `gavel node` and `gavel console` share about an OpenID Provider:
/// how it is trusted and how a principal is made from its ID tokens (the
/// two must agree, or the console refuses the sign-in).
#[derive(Debug, Clone, Default, Args)]
pub struct OidcPrincipalArgs {
    /// CA certificates (PEM) to trust for the provider's https; the system's without.
    #[arg(long, env = "GAVEL_OIDC_CA_FILE", value_name = "FILE")]
    pub oidc_ca_file: Option<PathBuf>,
    /// The ID-token claim whose value names the person.
    #[arg(long, env = "GAVEL_OIDC_PRINCIPAL_CLAIM", default_value = "email")]
    pub oidc_principal_claim: String,
    /// Put before the claim's value to make the principal.
    #[arg(long, env = "GAVEL_OIDC_PRINCIPAL_PREFIX", default_value = "user:")]
    pub oidc_principal_prefix: String,
}

impl OidcPrincipalArgs {
    /// The provider settings for `issuer` and `audience` (the client id),
    /// with the clock skew Gavel's own tokens are checked with.
    pub fn provider_settings(
        &self,
        issuer: &str,
        audience: &str,
        jwks: gavel_oidc::JwksSource,
    ) -> gavel_oidc::ProviderSettings {
        gavel_oidc::ProviderSettings {
            rules: gavel_oidc::TokenRules {
                issuer: issuer.to_string(),
                audience: audience.to_string(),
                principal_claim: self.oidc_principal_claim.clone(),
                principal_prefix: self.oidc_principal_prefix.clone(),
                clock_skew_seconds: gavel_pki::limits::TOKEN_CLOCK_SKEW_SECONDS,
            },
            jwks,
            ca_file: self.oidc_ca_file.clone(),
        }
    }
}

/// How `gavel node` secures its port (docs/security.md).
#[derive(Debug, Clone, Default, Args)]
pub struct NodeSecurityArgs {
    /// A certificate directory (as `gavel cert` and `gavel dev` write it):
    /// DIR/ca.pem, DIR/node-<id>.pem, DIR/node-<id>.key and, if present,
    /// DIR/token.pub as a token key.
    #[arg(long, env = "GAVEL_CERTS_DIR", value_name = "DIR")]
    pub certs_dir: Option<PathBuf>,
    /// The cluster CA certificate (PEM) client and peer certificates must chain to.
    #[arg(long, env = "GAVEL_TLS_CA", value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
    /// This node's certificate (PEM, SAN URI gavel://node/<id>).
    #[arg(long, env = "GAVEL_TLS_CERT", value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// This node's private key (PEM).
    #[arg(long, env = "GAVEL_TLS_KEY", value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// A public key (PEM; Ed25519 for EdDSA or P-256 for ES256) bearer tokens
    /// may be signed with. Repeatable.
    #[arg(long = "token-key", value_name = "FILE")]
    pub token_keys: Vec<PathBuf>,
    /// The `aud` claim tokens must carry.
    #[arg(long, env = "GAVEL_TOKEN_AUDIENCE", default_value = gavel_pki::DEFAULT_AUDIENCE)]
    pub token_audience: String,
    /// A file holding an HS256 shared secret, to accept HS256 tokens too.
    #[arg(long, env = "GAVEL_TOKEN_HS256_SECRET", value_name = "FILE")]
    pub token_hs256_secret: Option<PathBuf>,
    /// The longest lifetime (exp - iat) a bearer token may have: 90s, 30m,
    /// 12h, 7d; default 24h, at most 366d. Longer tokens are refused.
    #[arg(
        long,
        env = "GAVEL_TOKEN_LIFETIME_MAX",
        value_name = "DURATION",
        value_parser = crate::commands::token::parse_lifetime_max
    )]
    pub token_lifetime_max: Option<std::time::Duration>,
    /// Accept ID tokens of this OpenID Provider as bearer tokens (its exact
    /// `iss`; https, or http on loopback only). Its discovery document gives
    /// the JWKS unless --oidc-jwks does.
    #[arg(long, env = "GAVEL_OIDC_ISSUER", value_name = "URL", requires = "oidc_audience")]
    pub oidc_issuer: Option<String>,
    /// The `aud` the provider's ID tokens must carry: the console's OAuth
    /// client id.
    #[arg(long, env = "GAVEL_OIDC_AUDIENCE", value_name = "CLIENT_ID", requires = "oidc_issuer")]
    pub oidc_audience: Option<String>,
    /// The provider's JWKS, a file or an http(s) URL, instead of discovery's `jwks_uri`.
    #[arg(long, env = "GAVEL_OIDC_JWKS", value_name = "FILE_OR_URL", requires = "oidc_issuer")]
    pub oidc_jwks: Option<String>,
    /// The provider's CA, principal claim and prefix.
    #[command(flatten)]
    pub oidc: OidcPrincipalArgs,
    /// The first admin (kind:id, e.g. user:admin), granted once this node
    /// leads a new cluster.
    #[arg(long, env = "GAVEL_BOOTSTRAP_ADMIN", value_name = "PRINCIPAL")]
    pub bootstrap_admin: Option<String>,
    /// Run without TLS: plaintext, no authentication, identity self-declared.
    /// For local experiments only.
    #[arg(long)]
    pub insecure: bool,
}

/// `gavel dev`.
#[derive(Debug, Clone, Args)]
pub struct DevArgs {
    /// First of three consecutive ports.
    #[arg(long, env = "GAVEL_BASE_PORT", default_value_t = 7401)]
    pub base_port: u16,
    /// Data directory (default: a new directory under the system temp dir, printed at start).
    #[arg(long, env = "GAVEL_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// How `gavel dev` and its nodes write log lines: `text` or `json`.
    #[arg(long, env = "GAVEL_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Port of the web console on 127.0.0.1 (default: --base-port + 99, 7500).
    #[arg(long, env = "GAVEL_CONSOLE_PORT")]
    pub console_port: Option<u16>,
    /// Also run a notifier posting new pending approvals to this webhook
    /// (`slack=URL` or `generic=URL`; repeat for several), as
    /// `service:notify`, linking to the dev console (docs/notifications.md).
    #[arg(long = "notify", value_name = "KIND=URL")]
    pub notify: Vec<String>,
    /// Raft timings for the three nodes.
    #[command(flatten)]
    pub timings: TimingArgs,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Parses `id=host:port,...`.
pub fn parse_peers(text: &str) -> anyhow::Result<BTreeMap<u64, String>> {
    let mut peers = BTreeMap::new();
    for item in text.split(',').map(str::trim).filter(|item| !item.is_empty()) {
        let (id, addr) = item.split_once('=').ok_or_else(|| anyhow::anyhow!("peer {item:?} is not id=host:port"))?;
        let id: u64 = id.trim().parse().map_err(|_| anyhow::anyhow!("peer id {id:?} is not a number"))?;
        if id == 0 {
            anyhow::bail!("peer ids must be non-zero");
        }
        if peers.insert(id, addr.trim().to_string()).is_some() {
            anyhow::bail!("peer id {id} appears twice");
        }
    }
    Ok(peers)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::{Cli, IN_FLIGHT_FLAG_MAX};

    /// `gavel node` with one more flag, parsed.
    fn node_with(flag: &str) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(["gavel", "node", "--id=1", "--listen=127.0.0.1:7401", "--data-dir=/tmp/unused", flag])
    }

    #[test]
    fn an_in_flight_bound_past_its_maximum_is_a_usage_error_not_a_panic() {
        // A bound is a semaphore of that many permits; u64::MAX made the node
        // panic as it started.
        for name in ["proposals-in-flight-max", "long-polls-max", "reads-in-flight-max"] {
            for bad in [0, IN_FLIGHT_FLAG_MAX + 1, u64::MAX] {
                let error = node_with(&format!("--{name}={bad}")).expect_err(&format!("--{name}={bad}"));
                assert_eq!(error.kind(), clap::error::ErrorKind::ValueValidation, "--{name}={bad}: {error}");
                assert_eq!(error.exit_code(), 2, "--{name}={bad}");
            }
            node_with(&format!("--{name}={IN_FLIGHT_FLAG_MAX}")).unwrap_or_else(|error| panic!("--{name}: {error}"));
        }
    }
}
