//! Prometheus metrics: what a node counts and how it serves them.
//!
//! Two kinds of figure:
//!
//! - **Counted as calls happen**: every public gRPC call, by method, gRPC
//!   status and domain code, and its latency, recorded by the routing layer
//!   ([`crate::routing`]) through [`Metrics::observe`].
//! - **Counted as calls are refused for overload**:
//!   `gavel_overload_refused_total{kind}` ([`Metrics::count_overload_refusal`]).
//! - **Counted as writes are refused for a principal's quota** (at the edge
//!   or at apply): `gavel_quota_refused_total{kind}`, kind
//!   `pending_approvals`, `active_executions` or `write_rate`
//!   ([`Metrics::count_quota_refusal`]); never the principal.
//! - **Connections** ([`crate::connections`]): `gavel_connections_open`,
//!   `gavel_connections_refused_total{reason}` (a cap, at accept) and
//!   `gavel_connections_closed_total{reason}` (the authentication deadline,
//!   the idle timeout, an eviction, a full pool), and per pool
//!   `gavel_connections_pool_open{pool}`, `gavel_connections_pool_refused_total{pool}`
//!   and `gavel_connections_pool_evicted_total{pool,share}`.
//! - `gavel_dedup_replays_total{at}`: retries answered from the dedup table,
//!   at apply (read from `CoreApp::dedup_replays` at scrape time) or at a
//!   long-poll's edge ([`Metrics::count_poll_replay`]).
//! - `gavel_lease_handoffs_total`: waiting polls answered with the tasks
//!   the apply that created them leased to them, and `gavel_polls_waiting`,
//!   the polls waiting now ([`crate::waiters`]).
//! - `gavel_resumes_carried_total`: resumes that waited for a decision and
//!   ran in that decision's apply, and `gavel_resumes_waiting`, the resumes
//!   waiting for a decision now ([`crate::resumes`], decision 0108).
//! - **Read at scrape time**: the Raft status (term, leader, indexes, role)
//!   and the domain state's counts ([`gavel_core::State::counts`]), so they
//!   are never stale and cost nothing between scrapes.
//!
//! - **Recorded on the hot path without locks**: the WAL's append and
//!   fdatasync latency, entries per fsync group, commands per log entry,
//!   snapshots, and the per-stage time of one command
//!   (`gavel_command_stage_seconds{stage}`), read at scrape time from
//!   [`gavel_raft::stats`] by [`HotPath`]; the `edge` stage and the tick lag
//!   are recorded here ([`Metrics::observe_edge`], [`Metrics::observe_tick_lag`]).
//! - **Counted from replies**: late reports (`Report`/`Heartbeat` refused
//!   `LEASE_LOST`), in [`Metrics::record_call`].
//!
//! Labels are bounded: no label ever carries an approval, execution or
//! request id. Method and domain-code labels come from the call path and the
//! `gavel-error-code` header, which a caller can choose freely, so each is
//! capped ([`LabelCap`]): the first values seen keep their name and any
//! further one is counted as `other`. Queue names are capped the same way.
//!
//! This module counts and encodes; it knows no node. [`crate::scrape`]
//! reads a node's figures into [`Metrics::render`] and serves `GET /metrics`
//! on its own listener (`gavel node --metrics-listen`).

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::pin::Pin;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use gavel_core::ErrorCode;
use http_body::Frame;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use tonic::body::Body;
use tonic::codegen::http::{HeaderMap, Response};
use tonic::Status;

/// How many distinct method names keep their own label; the public API has
/// about forty methods, and a caller may send any path.
pub const METHOD_LABELS_MAX: usize = 64;

/// How many distinct domain codes keep their own label (the core has about
/// thirty); a forged `gavel-error-code` cannot grow the label set.
pub const DOMAIN_CODE_LABELS_MAX: usize = 48;

/// How many queues keep their own `queue` label; the rest are summed into
/// `other`. Queue names are chosen by whoever registers capabilities.
pub const QUEUE_LABELS_MAX: usize = 32;

/// How many principals keep their own `principal` label in
/// `gavel_overload_shed_total`; the rest are summed into `other`. Sheds fall
/// on the principals sending the most, few at a time, and a principal is
/// whoever holds a certificate or a token: the label stays bounded.
pub const SHED_PRINCIPAL_LABELS_MAX: usize = 32;

/// The label value a capped label takes past its cap.
pub const OTHER: &str = "other";

/// Latency buckets in seconds: 0.5 ms to about 16 s, doubling.
fn latency_buckets() -> impl Iterator<Item = f64> {
    prometheus_client::metrics::histogram::exponential_buckets(0.0005, 2.0, 16)
}

/// A label whose values are capped: the first `max` distinct values are
/// kept, any later one reads as [`OTHER`].
#[derive(Debug)]
pub struct LabelCap {
    max: usize,
    seen: Mutex<BTreeSet<String>>,
}

impl LabelCap {
    /// A cap of `max` distinct values.
    pub fn new(max: usize) -> LabelCap {
        LabelCap { max, seen: Mutex::new(BTreeSet::new()) }
    }

    /// The label value for `value`.
    pub fn label(&self, value: &str) -> String {
        let mut seen = self.seen.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if seen.contains(value) {
            return value.to_string();
        }
        if seen.len() < self.max {
            seen.insert(value.to_string());
            return value.to_string();
        }
        OTHER.to_string()
    }
}

/// Labels of the per-call counter.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct CallLabels {
    method: String,
    code: String,
    domain_code: String,
}

/// Labels of the per-method latency histogram.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct MethodLabels {
    method: String,
}

/// A `status` label.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct StatusLabels {
    status: String,
}

/// A `state` label.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct StateLabels {
    state: String,
}

/// A `node` label: a member's node id (bounded by the membership).
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct NodeLabels {
    node: String,
}

/// A `kind` label: a call kind ([`crate::overload::CallKind::as_str`], three
/// values) or a quota kind ([`gavel_core::QuotaKind::as_str`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct KindLabels {
    kind: String,
}

/// A `reason` label: the domain code a decision or vote was refused with
/// (a fixed set: [`gavel_core::ErrorCode`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RefusalLabels {
    reason: &'static str,
}

/// A `reason` label: why a connection was refused at accept
/// ([`crate::connections::Refusal::as_str`]) or closed by the node
/// ([`crate::connections::Closure::as_str`]); two values each.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

/// A `pool` label: the connection pool ([`crate::connections::Pool::as_str`], three values).
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct PoolLabels {
    pool: &'static str,
}

/// A `pool` and a `share` label: the pool a connection was evicted from and
/// the share of it that was full ([`crate::connections::Eviction::as_str`],
/// three values).
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct EvictedLabels {
    pool: &'static str,
    share: &'static str,
}

/// A `principal` label: the principal whose write was shed for holding its
/// fair share ([`crate::overload::shed`]), capped at
/// [`SHED_PRINCIPAL_LABELS_MAX`] principals.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ShedLabels {
    principal: String,
}

/// An `at` label: where a retry was answered from the dedup table
/// (`apply`: a command applied again, `poll`: a long-poll retried at the edge).
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct AtLabels {
    at: &'static str,
}

/// A `queue` label (capped).
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct QueueLabels {
    queue: String,
}

/// A node's metrics. Cheap to share: the routing layer holds it through
/// [`crate::node::Node::metrics`].
pub struct Metrics {
    /// Every metric below, for encoding.
    registry: Registry,
    /// `gavel_rpc_calls_total`.
    calls: Family<CallLabels, Counter>,
    /// `gavel_rpc_duration_seconds`.
    call_seconds: Family<MethodLabels, Histogram>,
    /// The `gavel_raft_*` gauges, set at scrape time from the Raft status.
    raft_term: Gauge,
    raft_leader_id: Gauge,
    raft_is_leader: Gauge,
    raft_applied_index: Gauge,
    /// Log progress: last entry, snapshot, purge point.
    raft_last_log_index: Gauge,
    raft_snapshot_index: Gauge,
    raft_purged_index: Gauge,
    /// Membership size, then the leader-only gauges.
    raft_members: Gauge,
    raft_quorum_ack_age: Gauge<f64, AtomicU64>,
    raft_follower_lag: Family<NodeLabels, Gauge>,
    /// The domain gauges, refilled at scrape time from [`gavel_core::State::counts`].
    approvals: Family<StatusLabels, Gauge>,
    executions: Family<StateLabels, Gauge>,
    queue_ready: Family<QueueLabels, Gauge>,
    leases_current: Gauge,
    /// `gavel_policies`: approval policies in the replicated state.
    policies: Gauge,
    /// `gavel_overload_refused_total`: calls refused `RESOURCE_EXHAUSTED`.
    overload_refused: Family<KindLabels, Counter>,
    /// `gavel_quota_refused_total`: writes refused `QUOTA_EXCEEDED`, by quota.
    quota_refused: Family<KindLabels, Counter>,
    /// `gavel_decisions_refused_total{reason}`: decisions and votes refused,
    /// by domain code (issue #37).
    decisions_refused: Family<RefusalLabels, Counter>,
    /// `gavel_connections_open`: connections open on the gRPC port.
    connections_open: Gauge,
    /// `gavel_connections_refused_total{reason}`: connections closed at accept by a cap.
    connections_refused: Family<ReasonLabels, Counter>,
    /// `gavel_connections_closed_total{reason}`: connections the node closed
    /// (authentication deadline, idle timeout, evicted, pool full).
    connections_closed: Family<ReasonLabels, Counter>,
    /// `gavel_connections_pool_open{pool}`: connections counted in each pool.
    connections_pool_open: Family<PoolLabels, Gauge>,
    /// `gavel_connections_pool_refused_total{pool}`: connections a full pool refused.
    connections_pool_refused: Family<PoolLabels, Counter>,
    /// `gavel_connections_pool_evicted_total{pool,share}`: connections evicted
    /// to make room, by the share that was full.
    connections_pool_evicted: Family<EvictedLabels, Counter>,
    /// `gavel_overload_shed_total{principal}`: writes shed for their
    /// principal holding its fair share of the proposals in flight.
    overload_shed: Family<ShedLabels, Counter>,
    /// `gavel_late_reports_total`: reports and heartbeats refused `LEASE_LOST`.
    late_reports: Counter,
    /// `gavel_dedup_replays_total{at}`: retries answered with the reply their
    /// first attempt got (the dedup table), so nothing happened twice.
    dedup_replays: Family<AtLabels, Counter>,
    /// `gavel_lease_handoffs_total`: waiting polls answered with the tasks
    /// the command that created them leased to them (decision 0107).
    lease_handoffs: Counter,
    /// `gavel_polls_waiting`: worker polls waiting on this node now.
    polls_waiting: Gauge,
    /// `gavel_resumes_carried_total`: waiting resumes answered by the
    /// decision that carried them (decision 0108).
    resumes_carried: Counter,
    /// `gavel_resumes_waiting`: resumes waiting for a decision on this node now.
    resumes_waiting: Gauge,
    /// The edge stage and the tick lag (shared with the [`HotPath`] collector).
    edge: Arc<EdgeStats>,
    /// The caps of the labels a caller or a registrant chooses.
    methods: LabelCap,
    domain_codes: LabelCap,
    queues: LabelCap,
    shed_principals: LabelCap,
    /// One scrape at a time: the gauge families are cleared and refilled.
    scrape: Mutex<()>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// Every metric registered, none observed yet.
    pub fn new() -> Metrics {
        let mut registry = Registry::default();
        let calls = Family::<CallLabels, Counter>::default();
        registry.register(
            "gavel_rpc_calls",
            "Public gRPC calls answered by this node, by method, gRPC status and domain code",
            calls.clone(),
        );
        let call_seconds =
            Family::<MethodLabels, Histogram>::new_with_constructor(|| Histogram::new(latency_buckets()) as Histogram);
        registry.register(
            "gavel_rpc_duration_seconds",
            "Latency of public gRPC calls on this node (forwarding included), by method",
            call_seconds.clone(),
        );
        let raft_quorum_ack_age = Gauge::<f64, AtomicU64>::default();
        registry.register(
            "gavel_raft_quorum_ack_age_seconds",
            "On the leader, time since a quorum last acknowledged it (0 elsewhere)",
            raft_quorum_ack_age.clone(),
        );
        let edge = Arc::new(EdgeStats::default());
        registry.register_collector(Box::new(HotPath { edge: edge.clone() }));
        let r = &mut registry;
        Metrics {
            edge,
            late_reports: registered(
                r,
                "gavel_late_reports",
                "Worker reports and heartbeats refused LEASE_LOST: they came after the lease had ended",
            ),
            dedup_replays: registered(
                r,
                "gavel_dedup_replays",
                "Retried requests answered with the reply their first attempt got (at: apply or poll)",
            ),
            lease_handoffs: registered(
                r,
                "gavel_lease_handoffs",
                "Waiting polls answered with tasks leased by the apply that created their executions",
            ),
            polls_waiting: registered(r, "gavel_polls_waiting", "Worker polls waiting on this node (the leader) now"),
            resumes_carried: registered(
                r,
                "gavel_resumes_carried",
                "Resumes waiting for a decision that ran in the apply of the decision that carried them",
            ),
            resumes_waiting: registered(
                r,
                "gavel_resumes_waiting",
                "Resumes waiting for a decision on this node (the leader) now",
            ),
            calls,
            call_seconds,
            raft_quorum_ack_age,
            raft_term: registered(r, "gavel_raft_term", "The Raft term this node is in"),
            raft_leader_id: registered(r, "gavel_raft_leader_id", "The leader this node knows of (0: none)"),
            raft_is_leader: registered(r, "gavel_raft_is_leader", "1 while this node is the leader, else 0"),
            raft_applied_index: registered(r, "gavel_raft_applied_index", "Last log index applied on this node"),
            raft_last_log_index: registered(r, "gavel_raft_last_log_index", "Index of the last entry in this log"),
            raft_snapshot_index: registered(r, "gavel_raft_snapshot_index", "Last index in the latest snapshot"),
            raft_purged_index: registered(r, "gavel_raft_purged_index", "Index up to which the log is purged"),
            raft_members: registered(r, "gavel_raft_members", "Nodes in the membership (voters and learners)"),
            raft_follower_lag: registered(
                r,
                "gavel_raft_follower_lag_entries",
                "On the leader, how many entries each other member's log is behind the leader's",
            ),
            approvals: registered(r, "gavel_approvals", "Retained approvals by status"),
            executions: registered(r, "gavel_executions", "Retained executions by state"),
            queue_ready: registered(
                r,
                "gavel_queue_ready",
                "Executions waiting ready for a worker, by queue (queues past the cap as other)",
            ),
            leases_current: registered(r, "gavel_leases_current", "Leases currently granted to workers"),
            policies: registered(r, "gavel_policies", "Approval policies in the replicated state"),
            overload_refused: registered(
                r,
                "gavel_overload_refused",
                "Public calls this node refused RESOURCE_EXHAUSTED because its bound for their kind was reached",
            ),
            decisions_refused: registered(
                r,
                "gavel_decisions_refused",
                "Decisions and votes this node refused, by reason (the domain code: APPROVAL_SELF_APPROVAL, \
                 PERMISSION_DENIED, APPROVAL_TERMS_CHANGED, ...)",
            ),
            quota_refused: registered(
                r,
                "gavel_quota_refused",
                "Writes refused QUOTA_EXCEEDED because their principal was over a quota, by quota kind",
            ),
            connections_open: registered(
                r,
                "gavel_connections_open",
                "Connections open on the gRPC port, in their TLS handshake or served",
            ),
            connections_refused: registered(
                r,
                "gavel_connections_refused",
                "Connections closed at accept, before their TLS handshake, because a cap was reached (reason: overall or per_source)",
            ),
            connections_closed: registered(
                r,
                "gavel_connections_closed",
                "Connections this node closed (reason: auth_deadline, no handshake or authenticated call in time; idle, no call in flight for the idle timeout; evicted, the oldest unauthenticated connection of a full share; pool_full, authenticated into a full pool)",
            ),
            connections_pool_open: registered(
                r,
                "gavel_connections_pool_open",
                "Connections counted in each pool: unauthenticated (accepted, not yet authenticated), authenticated (a principal), peer (a node certificate or a Raft call)",
            ),
            connections_pool_refused: registered(
                r,
                "gavel_connections_pool_refused",
                "Connections refused because their pool was full (unauthenticated: at accept, the node at --connections-max; authenticated, peer: when they authenticated)",
            ),
            connections_pool_evicted: registered(
                r,
                "gavel_connections_pool_evicted",
                "Unauthenticated connections closed to make room for a new one, the oldest of the share that was full (share: address, an IPv4 address; prefix, an IPv4 /24 or IPv6 /64; pool, the whole pool)",
            ),
            overload_shed: registered(
                r,
                "gavel_overload_shed",
                "Writes shed while this node's proposals in flight were near their bound because their principal held its fair share of it, by principal (the first 32 principals shed keep their name, later ones read other)",
            ),
            methods: LabelCap::new(METHOD_LABELS_MAX),
            domain_codes: LabelCap::new(DOMAIN_CODE_LABELS_MAX),
            queues: LabelCap::new(QUEUE_LABELS_MAX),
            shed_principals: LabelCap::new(SHED_PRINCIPAL_LABELS_MAX),
            scrape: Mutex::new(()),
            registry,
        }
    }

    /// Counts one finished call of `path` with its gRPC status code and
    /// domain code (`""` when the answer carried none).
    pub fn record_call(&self, path: &str, code: tonic::Code, domain_code: &str, elapsed: Duration) {
        let method = self.methods.label(method_of(path));
        let domain_code = if domain_code.is_empty() { String::new() } else { self.domain_codes.label(domain_code) };
        if ErrorCode::from_wire(&domain_code) == Some(ErrorCode::LeaseLost)
            && matches!(
                method.as_str(),
                "WorkerService/Report" | "WorkerService/ReportAndPoll" | "WorkerService/Heartbeat"
            )
        {
            self.late_reports.inc();
        }
        let labels = CallLabels { method: method.clone(), code: code_name(code).to_string(), domain_code };
        self.calls.get_or_create(&labels).inc();
        self.call_seconds.get_or_create(&MethodLabels { method }).observe(elapsed.as_secs_f64());
    }

    /// Counts one call of `kind` refused for overload ([`crate::overload`]:
    /// the label of its `CallKind`).
    pub fn count_overload_refusal(&self, kind: &'static str) {
        self.overload_refused.get_or_create(&KindLabels { kind: kind.to_string() }).inc();
    }

    /// Counts one decision or vote refused with domain code `reason`.
    pub fn count_decision_refused(&self, reason: gavel_core::ErrorCode) {
        self.decisions_refused.get_or_create(&RefusalLabels { reason: reason.as_str() }).inc();
    }

    /// Counts one write refused for its principal's quota `kind`.
    pub fn count_quota_refusal(&self, kind: gavel_core::QuotaKind) {
        self.quota_refused.get_or_create(&KindLabels { kind: kind.as_str().to_string() }).inc();
    }

    /// Counts one connection closed at accept by a cap ([`crate::connections`]:
    /// `reason` is the label of its `Refusal`).
    pub fn count_connection_refused(&self, reason: &'static str) {
        self.connections_refused.get_or_create(&ReasonLabels { reason }).inc();
    }

    /// Counts one connection the node closed ([`crate::connections`]:
    /// `reason` is the label of its `Closure`).
    pub fn count_connection_closed(&self, reason: &'static str) {
        self.connections_closed.get_or_create(&ReasonLabels { reason }).inc();
    }

    /// Sets the gauge of connections counted in `pool` ([`crate::connections::Pool::as_str`]).
    pub fn set_connection_pool_open(&self, pool: &'static str, open: usize) {
        self.connections_pool_open.get_or_create(&PoolLabels { pool }).set(clamp(open as u64));
    }

    /// Counts one connection refused because `pool` was full.
    pub fn count_connection_pool_refused(&self, pool: &'static str) {
        self.connections_pool_refused.get_or_create(&PoolLabels { pool }).inc();
    }

    /// Counts one connection evicted from `pool` because `share` was full.
    pub fn count_connection_evicted(&self, pool: &'static str, share: &'static str) {
        self.connections_pool_evicted.get_or_create(&EvictedLabels { pool, share }).inc();
    }

    /// Counts one write of `principal` shed for holding its fair share of
    /// the proposals in flight ([`crate::overload::shed`]).
    pub fn count_overload_shed(&self, principal: &str) {
        self.overload_shed.get_or_create(&ShedLabels { principal: self.shed_principals.label(principal) }).inc();
    }

    /// Counts one more connection open ([`crate::connections`], at accept).
    pub fn count_connection_opened(&self) {
        self.connections_open.inc();
    }

    /// Counts one connection fewer open ([`crate::connections`], at its end).
    pub fn count_connection_ended(&self) {
        self.connections_open.dec();
    }

    /// Counts one long-poll retry answered at the edge with the tasks its
    /// first attempt was granted.
    pub fn count_poll_replay(&self) {
        self.dedup_replays.get_or_create(&AtLabels { at: "poll" }).inc();
    }

    /// The gauge of polls waiting on this node, which the registry of
    /// waiting polls keeps ([`crate::waiters`]).
    pub fn polls_waiting(&self) -> Gauge {
        self.polls_waiting.clone()
    }

    /// Counts one waiting poll answered with the tasks a hand-off leased it.
    pub fn count_lease_handoff(&self) {
        self.lease_handoffs.inc();
    }

    /// The gauge of resumes waiting for a decision on this node, which the
    /// registry of waiting resumes keeps ([`crate::resumes`]).
    pub fn resumes_waiting(&self) -> Gauge {
        self.resumes_waiting.clone()
    }

    /// Counts one waiting resume answered by the decision that carried it.
    pub fn count_resume_carried(&self) {
        self.resumes_carried.inc();
    }

    /// Records the `edge` stage of one proposed command: from its request
    /// reaching this node to the proposal being handed to Raft.
    pub fn observe_edge(&self, elapsed: Duration) {
        self.edge.edge.observe_duration(elapsed);
    }

    /// Records how late the leader proposed a tick after its deadline.
    pub fn observe_tick_lag(&self, lag: Duration) {
        self.edge.tick_lag.observe_duration(lag);
    }

    /// Wraps the response of a call of `path` started at `started` so that
    /// the call is counted when its status is known: at once for a
    /// trailers-only answer (every refusal), else when the body's trailers
    /// pass (or, if the client goes away first, as `CANCELLED`).
    pub fn observe(self: &Arc<Self>, path: &str, started: Instant, response: Response<Body>) -> Response<Body> {
        if let Some((code, domain_code)) = status_of(response.headers()) {
            self.record_call(path, code, &domain_code, started.elapsed());
            return response;
        }
        let pending = Pending { metrics: self.clone(), path: path.to_string(), started };
        response.map(|body| Body::new(ObservedBody { inner: body, pending: Some(pending) }))
    }

    /// The metrics in the text exposition format, with the scrape-time
    /// figures `read` now (one scrape at a time: `read` runs under the
    /// scrape lock, so the gauges it refills are never mixed from two).
    /// The node's figures are read by [`crate::scrape`].
    pub fn render(&self, read: impl FnOnce() -> Scraped) -> String {
        let _one_scrape = self.scrape.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let Scraped { raft: status, leader_progress, dedup_replays_applied, counts } = read();
        let applied_replays = self.dedup_replays.get_or_create(&AtLabels { at: "apply" });
        applied_replays.inc_by(dedup_replays_applied.saturating_sub(applied_replays.get()));
        drop(applied_replays);
        self.raft_term.set(clamp(status.term));
        self.raft_leader_id.set(clamp(status.leader_id.unwrap_or(0)));
        self.raft_is_leader.set(i64::from(status.is_leader()));
        self.raft_applied_index.set(clamp(status.last_applied_index.unwrap_or(0)));
        self.raft_last_log_index.set(clamp(status.last_log_index.unwrap_or(0)));
        self.raft_snapshot_index.set(clamp(status.snapshot_index.unwrap_or(0)));
        self.raft_purged_index.set(clamp(status.purged_index.unwrap_or(0)));
        self.raft_members.set(clamp(status.members.len() as u64));
        self.raft_follower_lag.clear();
        match leader_progress {
            Some(progress) => {
                let age_ms = progress.millis_since_quorum_ack.unwrap_or(0);
                self.raft_quorum_ack_age.set(Duration::from_millis(age_ms).as_secs_f64());
                let last_log_index = status.last_log_index.unwrap_or(0);
                for (member, matched) in progress.matched_index.iter().filter(|(member, _)| **member != status.node_id)
                {
                    let lag = last_log_index.saturating_sub(matched.unwrap_or(0));
                    self.raft_follower_lag.get_or_create(&NodeLabels { node: member.to_string() }).set(clamp(lag));
                }
            }
            None => {
                self.raft_quorum_ack_age.set(0.0);
            }
        }
        self.approvals.clear();
        for (status, count) in &counts.approvals_by_status {
            self.approvals.get_or_create(&StatusLabels { status: status.to_string() }).set(clamp(*count as u64));
        }
        self.executions.clear();
        for (state, count) in &counts.executions_by_state {
            self.executions.get_or_create(&StateLabels { state: state.to_string() }).set(clamp(*count as u64));
        }
        self.queue_ready.clear();
        for (queue, depth) in &counts.ready_by_queue {
            let queue = self.queues.label(queue);
            self.queue_ready.get_or_create(&QueueLabels { queue }).inc_by(clamp(*depth as u64));
        }
        self.leases_current.set(clamp(counts.current_leases as u64));
        self.policies.set(clamp(counts.policies as u64));
        let mut text = String::new();
        if prometheus_client::encoding::text::encode(&mut text, &self.registry).is_err() {
            // Encoding into a String cannot fail; keep the scrape answerable anyway.
            let _ = writeln!(text, "# EOF");
        }
        text
    }
}

/// The figures a scrape reads from the node at scrape time, so that they
/// are never stale and cost nothing between scrapes.
#[derive(Debug)]
pub struct Scraped {
    /// The Raft status (term, leader, indexes, members).
    pub raft: gavel_raft::RaftStatus,
    /// On the leader, its followers' progress; `None` elsewhere.
    pub leader_progress: Option<gavel_raft::LeaderProgress>,
    /// Retries answered from the dedup table at apply, since the node started.
    pub dedup_replays_applied: u64,
    /// The domain state's counts ([`gavel_core::State::counts`]).
    pub counts: gavel_core::StateCounts,
}

/// The figures recorded here that the [`HotPath`] collector encodes with
/// the Raft crate's, in the same buckets.
#[derive(Debug)]
struct EdgeStats {
    edge: gavel_raft::stats::Histogram,
    tick_lag: gavel_raft::stats::Histogram,
}

impl Default for EdgeStats {
    fn default() -> Self {
        EdgeStats { edge: gavel_raft::stats::Histogram::seconds(), tick_lag: gavel_raft::stats::Histogram::seconds() }
    }
}

/// A `stage` label of `gavel_command_stage_seconds` (five fixed values).
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct StageLabels {
    stage: String,
}

/// Encodes the lock-free hot-path figures ([`gavel_raft::stats`] and
/// [`EdgeStats`]) at scrape time.
#[derive(Debug)]
struct HotPath {
    edge: Arc<EdgeStats>,
}

impl Collector for HotPath {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        use std::sync::atomic::Ordering::Relaxed;
        let raft = gavel_raft::stats::stats();
        let gauge = |encoder: &mut DescriptorEncoder, name: &str, help: &str, value: u64| {
            ConstGauge::new(clamp(value)).encode(encoder.encode_descriptor(name, help, None, MetricType::Gauge)?)
        };
        gauge(&mut encoder, "gavel_raft_committed_index", "Last log index known committed here.", {
            raft.committed_index.load(Relaxed)
        })?;
        let histograms: [(&str, &str, &gavel_raft::stats::Histogram); 6] = [
            ("gavel_raft_wal_append_seconds", "Time to write one WAL group (before its fdatasync).", &raft.wal_append),
            ("gavel_raft_wal_fsync_seconds", "Time of one WAL group's fdatasync.", &raft.wal_fsync),
            (
                "gavel_raft_wal_group_entries",
                "Log entries per WAL group (one fdatasync each).",
                &raft.wal_group_entries,
            ),
            ("gavel_raft_entry_commands", "Commands per log entry proposed by this node.", &raft.entry_commands),
            ("gavel_raft_snapshot_build_seconds", "Time to store one snapshot built here.", &raft.snapshot_build),
            ("gavel_tick_lag_seconds", "How late the leader proposed a tick after its deadline.", &self.edge.tick_lag),
        ];
        for (name, help, histogram) in histograms {
            encode_histogram(encoder.encode_descriptor(name, help, None, MetricType::Histogram)?, histogram)?;
        }
        let snapshots = ConstCounter::new(raft.snapshots.load(Relaxed));
        snapshots.encode(encoder.encode_descriptor(
            "gavel_raft_snapshots",
            "Snapshots built or installed and stored on this node.",
            None,
            MetricType::Counter,
        )?)?;
        gauge(
            &mut encoder,
            "gavel_raft_snapshot_bytes",
            "Size of the last snapshot stored (a checkpoint: the cold store file's size).",
            raft.snapshot_bytes.load(Relaxed),
        )?;
        let mut stages = encoder.encode_descriptor(
            "gavel_command_stage_seconds",
            "Where one proposed command's time goes on the node that proposed it, by stage.",
            None,
            MetricType::Histogram,
        )?;
        let stage_histograms = [
            ("edge", &self.edge.edge),
            ("batcher", &raft.stages.batcher),
            ("commit", &raft.stages.commit),
            ("apply", &raft.stages.apply),
            ("reply", &raft.stages.reply),
        ];
        for (stage, histogram) in stage_histograms {
            encode_histogram(stages.encode_family(&StageLabels { stage: stage.to_string() })?, histogram)?;
        }
        Ok(())
    }
}

/// Encodes one lock-free histogram.
fn encode_histogram(
    mut encoder: prometheus_client::encoding::MetricEncoder<'_>,
    histogram: &gavel_raft::stats::Histogram,
) -> Result<(), std::fmt::Error> {
    let snapshot = histogram.snapshot();
    encoder.encode_histogram::<NoLabelSet>(snapshot.sum, snapshot.count, &snapshot.buckets, None)
}

tokio::task_local! {
    /// When the public call being served reached this node (set by the
    /// routing layer for the call's future; read for the `edge` stage).
    static CALL_STARTED: Instant;
}

/// Runs `call` with its start time known to [`call_started`].
pub async fn with_call_started<F: std::future::Future>(started: Instant, call: F) -> F::Output {
    CALL_STARTED.scope(started, call).await
}

/// When the public call being served reached this node, if in one.
pub fn call_started() -> Option<Instant> {
    CALL_STARTED.try_with(|started| *started).ok()
}

/// A new metric of type `M`, registered under `name`.
fn registered<M>(registry: &mut Registry, name: &str, help: &str) -> M
where
    M: prometheus_client::registry::Metric + Clone + Default,
{
    let metric = M::default();
    registry.register(name, help, metric.clone());
    metric
}

/// A gauge value from a count (gauges are `i64`).
fn clamp(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// `ApprovalService/CreateApproval` from `/gavel.v1.ApprovalService/CreateApproval`.
fn method_of(path: &str) -> &str {
    path.strip_prefix("/gavel.v1.").unwrap_or(path)
}

/// The gRPC status and domain code in `headers` (or trailers), if they
/// carry a status.
fn status_of(headers: &HeaderMap) -> Option<(tonic::Code, String)> {
    let code = headers.get("grpc-status")?.to_str().ok()?.trim().parse::<i32>().ok()?;
    let domain_code = headers
        .get(gavel_proto::error_detail::ERROR_CODE_METADATA_KEY)
        .and_then(|value| value.to_str().ok())
        .filter(|code| is_domain_code(code))
        .unwrap_or("")
        .to_string();
    Some((tonic::Code::from_i32(code), domain_code))
}

/// Whether `text` looks like a domain code (`APPROVAL_CONSUMED`): upper-case
/// letters and underscores, short. Anything else is not counted as one.
fn is_domain_code(text: &str) -> bool {
    !text.is_empty() && text.len() <= 40 && text.bytes().all(|byte| byte.is_ascii_uppercase() || byte == b'_')
}

/// The canonical upper-case name of a gRPC status code.
pub fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code;
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

/// A call whose status is not known yet.
struct Pending {
    metrics: Arc<Metrics>,
    path: String,
    started: Instant,
}

/// A response body that counts its call when the trailers pass.
struct ObservedBody {
    inner: Body,
    pending: Option<Pending>,
}

impl ObservedBody {
    fn finish(&mut self, code: tonic::Code, domain_code: &str) {
        if let Some(pending) = self.pending.take() {
            pending.metrics.record_call(&pending.path, code, domain_code, pending.started.elapsed());
        }
    }
}

impl http_body::Body for ObservedBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(context);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some((code, domain_code)) = frame.trailers_ref().and_then(status_of) {
                    self.finish(code, &domain_code);
                }
            }
            Poll::Ready(Some(Err(status))) => {
                let code = status.code();
                self.finish(code, "");
            }
            // A body that ends without a status is a broken answer.
            Poll::Ready(None) => self.finish(tonic::Code::Unknown, ""),
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for ObservedBody {
    fn drop(&mut self) {
        // The client went away before the status was sent.
        self.finish(tonic::Code::Cancelled, "");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_capped_label_names_the_first_values_and_counts_the_rest_as_other() {
        let cap = LabelCap::new(2);
        assert_eq!(cap.label("a"), "a");
        assert_eq!(cap.label("b"), "b");
        assert_eq!(cap.label("c"), OTHER);
        assert_eq!(cap.label("a"), "a");
    }

    #[test]
    fn overload_refusals_are_counted_by_kind() {
        let metrics = Metrics::new();
        use crate::overload::CallKind;
        metrics.count_overload_refusal(CallKind::Proposal.as_str());
        metrics.count_overload_refusal(CallKind::Proposal.as_str());
        metrics.count_overload_refusal(CallKind::LongPoll.as_str());
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &metrics.registry).expect("encodes");
        assert!(text.contains(r#"gavel_overload_refused_total{kind="proposal"} 2"#), "{text}");
        assert!(text.contains(r#"gavel_overload_refused_total{kind="long_poll"} 1"#), "{text}");
    }

    #[test]
    fn connection_refusals_and_closes_are_counted_by_reason() {
        use crate::connections::{Closure, Eviction, Pool, Refusal};
        let metrics = Metrics::new();
        metrics.count_connection_refused(Refusal::Overall.as_str());
        metrics.count_connection_evicted(Pool::Unauthenticated.as_str(), Eviction::Prefix.as_str());
        metrics.count_connection_evicted(Pool::Unauthenticated.as_str(), Eviction::Prefix.as_str());
        metrics.count_connection_closed(Closure::AuthDeadline.as_str());
        metrics.count_connection_closed(Closure::Idle.as_str());
        for _ in 0..8 {
            metrics.count_connection_opened();
        }
        metrics.count_connection_ended();
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &metrics.registry).expect("encodes");
        assert!(
            text.contains(r#"gavel_connections_pool_evicted_total{pool="unauthenticated",share="prefix"} 2"#),
            "{text}"
        );
        assert!(text.contains(r#"gavel_connections_refused_total{reason="overall"} 1"#), "{text}");
        assert!(text.contains(r#"gavel_connections_closed_total{reason="auth_deadline"} 1"#), "{text}");
        assert!(text.contains(r#"gavel_connections_closed_total{reason="idle"} 1"#), "{text}");
        assert!(text.contains("gavel_connections_open 7"), "{text}");
    }

    #[test]
    fn calls_are_counted_by_method_status_and_domain_code() {
        let metrics = Metrics::new();
        let path = "/gavel.v1.ApprovalService/CreateApproval";
        metrics.record_call(path, tonic::Code::Ok, "", Duration::from_millis(3));
        metrics.record_call(path, tonic::Code::PermissionDenied, "PERMISSION_DENIED", Duration::from_millis(1));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &metrics.registry).expect("encodes");
        assert!(
            text.contains(
                r#"gavel_rpc_calls_total{method="ApprovalService/CreateApproval",code="OK",domain_code=""} 1"#
            ),
            "{text}"
        );
        assert!(text.contains(r#"code="PERMISSION_DENIED",domain_code="PERMISSION_DENIED"} 1"#), "{text}");
        assert!(
            text.contains(r#"gavel_rpc_duration_seconds_count{method="ApprovalService/CreateApproval"} 2"#),
            "{text}"
        );
    }

    #[test]
    fn forged_methods_and_domain_codes_cannot_grow_the_label_set() {
        let metrics = Metrics::new();
        for n in 0..(METHOD_LABELS_MAX + 10) {
            metrics.record_call(&format!("/gavel.v1.Forged/M{n}"), tonic::Code::Unimplemented, "", Duration::ZERO);
        }
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &metrics.registry).expect("encodes");
        assert!(text.contains(r#"method="other""#), "{text}");
        let series = text.lines().filter(|line| line.starts_with("gavel_rpc_calls_total{")).count();
        assert_eq!(series, METHOD_LABELS_MAX + 1);
        assert!(!is_domain_code("approval-123"));
        assert!(is_domain_code("APPROVAL_CONSUMED"));
    }

    #[test]
    fn hot_path_figures_late_reports_and_stages_are_exported() {
        let metrics = Metrics::new();
        metrics.observe_edge(Duration::from_micros(40));
        metrics.observe_tick_lag(Duration::from_millis(3));
        metrics.record_call(
            "/gavel.v1.WorkerService/Report",
            tonic::Code::FailedPrecondition,
            "LEASE_LOST",
            Duration::ZERO,
        );
        metrics.record_call(
            "/gavel.v1.WorkerService/Poll",
            tonic::Code::FailedPrecondition,
            "LEASE_LOST",
            Duration::ZERO,
        );
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &metrics.registry).expect("encodes");
        assert!(text.contains(r#"gavel_command_stage_seconds_count{stage="edge"} 1"#), "{text}");
        assert!(text.contains(r#"gavel_command_stage_seconds_bucket{le="0.00005",stage="edge"} 1"#), "{text}");
        assert!(text.contains("gavel_tick_lag_seconds_count 1"), "{text}");
        assert!(text.contains("gavel_late_reports_total 1"), "{text}");
        for name in [
            "gavel_raft_committed_index ",
            "gavel_raft_wal_fsync_seconds_count ",
            "gavel_raft_wal_append_seconds_count ",
            "gavel_raft_wal_group_entries_count ",
            "gavel_raft_entry_commands_count ",
            "gavel_raft_snapshot_build_seconds_count ",
            "gavel_raft_snapshots_total ",
            "gavel_raft_snapshot_bytes ",
            r#"gavel_command_stage_seconds_count{stage="reply"} "#,
        ] {
            assert!(text.contains(name), "{name} missing from {text}");
        }
    }

    #[test]
    fn a_trailers_only_refusal_is_read_from_the_headers() {
        let mut headers = HeaderMap::new();
        headers.insert("grpc-status", "7".parse().expect("a header value"));
        headers.insert("gavel-error-code", "PERMISSION_DENIED".parse().expect("a header value"));
        let (code, domain_code) = status_of(&headers).expect("a status");
        assert_eq!(code, tonic::Code::PermissionDenied);
        assert_eq!(domain_code, "PERMISSION_DENIED");
        assert!(status_of(&HeaderMap::new()).is_none());
    }
}
