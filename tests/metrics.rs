//! Prometheus metrics over real HTTP: a three-node cluster of `gavel node`
//! processes, each with `--metrics-listen` on a free port, scraped after a
//! few approvals, two queued executions and one refused call. The text format is parsed, and the
//! figures are checked against what the test did and what `Status` says.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use gavel_proto::v1 as pb;
use gavel_proto::v1::approval_service_client::ApprovalServiceClient;
use gavel_proto::v1::capability_service_client::CapabilityServiceClient;
use gavel_proto::v1::cluster_service_client::ClusterServiceClient;
use gavel_proto::v1::execution_service_client::ExecutionServiceClient;
use gavel_proto::v1::worker_service_client::WorkerServiceClient;
use gavel_testkit::ClusterSpec;
use gavel_testkit::Converge as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One sample of the text format: name, labels, value.
#[derive(Debug, Clone)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// Parses the samples of the Prometheus / OpenMetrics text format (comments
/// and `# EOF` skipped). Label values here never hold `,` `"` or `}`.
fn parse(text: &str) -> Vec<Sample> {
    let mut samples = Vec::new();
    for line in text.lines().filter(|line| !line.is_empty() && !line.starts_with('#')) {
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("no value in {line:?}"));
        let value: f64 = value.parse().unwrap_or_else(|_| panic!("bad value in {line:?}"));
        let (name, labels) = match series.split_once('{') {
            None => (series.to_string(), BTreeMap::new()),
            Some((name, rest)) => {
                let body = rest.strip_suffix('}').unwrap_or_else(|| panic!("unclosed labels in {line:?}"));
                let labels = body
                    .split(',')
                    .filter(|pair| !pair.is_empty())
                    .map(|pair| {
                        let (key, value) = pair.split_once('=').unwrap_or_else(|| panic!("bad label in {line:?}"));
                        (key.to_string(), value.trim_matches('"').to_string())
                    })
                    .collect();
                (name.to_string(), labels)
            }
        };
        samples.push(Sample { name, labels, value });
    }
    samples
}

/// `GET /metrics` at `addr` over plain HTTP/1.1; panics unless it is a 200.
async fn scrape(addr: &str) -> Vec<Sample> {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap_or_else(|error| panic!("{addr}: {error}"));
    stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: gavel\r\nAccept: */*\r\n\r\n").await.expect("write request");
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer))
        .await
        .expect("the scrape answers within 10 s")
        .expect("read response");
    let answer = String::from_utf8(answer).expect("a UTF-8 response");
    let (head, body) = answer.split_once("\r\n\r\n").expect("an HTTP response");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.to_ascii_lowercase().contains("content-type: application/openmetrics-text"), "{head}");
    assert!(body.trim_end().ends_with("# EOF"), "{body}");
    parse(body)
}

/// The value of the one sample named `name` whose labels include `labels`, or 0.
fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|sample| sample.name == name)
        .filter(|sample| labels.iter().all(|(key, value)| sample.labels.get(*key).map(String::as_str) == Some(*value)))
        .map(|sample| sample.value)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn metrics_count_calls_refusals_raft_indexes_and_approvals_without_ids() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut spec = ClusterSpec::new(support::gavel_binary(), dir.path());
    let metrics_addrs: BTreeMap<u64, String> =
        (1..=3).map(|id| (id, format!("127.0.0.1:{}", support::free_port()))).collect();
    spec.node_args = metrics_addrs.iter().map(|(id, addr)| (*id, vec![format!("--metrics-listen={addr}")])).collect();
    spec.start_timeout = support::WAIT;
    let cluster = gavel_testkit::Cluster::start(spec).await.unwrap_or_else(|error| panic!("{error}"));
    let leader = cluster.wait_for_leader(support::WAIT).await.unwrap_or_else(|error| panic!("{error}"));
    let channel = cluster.channel(leader, Duration::from_secs(10)).expect("a channel");
    let create_ok = [("method", "ApprovalService/CreateApproval"), ("code", "OK")];

    let before = scrape(&metrics_addrs[&leader]).await;
    let created_before = value(&before, "gavel_rpc_calls_total", &create_ok);

    let run = uuid::Uuid::new_v4().simple().to_string();
    let ids: Vec<String> = (0..5).map(|n| format!("apr-metrics-{run}-{n}")).collect();
    let mut approvals = ApprovalServiceClient::new(channel.clone());
    for id in &ids {
        approvals.create_approval(support::approval_request(id, "metrics-test")).await.expect("create approval");
    }
    // A refused call: no input at all is bad input, refused before the log.
    let refused = pb::CreateApprovalRequest {
        request_id: format!("refused-{run}"),
        id: format!("apr-metrics-{run}-refused"),
        ..pb::CreateApprovalRequest::default()
    };
    let refusal = approvals.create_approval(refused).await.expect_err("an empty create is refused");
    assert_eq!(refusal.code(), tonic::Code::InvalidArgument, "{refusal:?}");
    // A decision on terms other than the approval's: refused, and counted
    // by its reason (and logged as one line naming the approval).
    let steered = pb::DecideApprovalRequest {
        id: ids[0].clone(),
        status: pb::ApprovalStatus::Approved as i32,
        approver: Some(support::user("bob")),
        terms_hash: Some("0".repeat(64)),
        ..pb::DecideApprovalRequest::default()
    };
    let refusal = approvals.decide_approval(steered).await.expect_err("other terms are refused");
    assert_eq!(refusal.code(), tonic::Code::FailedPrecondition, "{refusal:?}");

    // Two executions waiting in one queue.
    let capability = pb::CapabilitySpec {
        queue: Some("metrics-queue".to_string()),
        ..support::capability("metrics.read", pb::SideEffect::Read)
    };
    let mut capabilities = CapabilityServiceClient::new(channel.clone());
    let registered = pb::RegisterCapabilityRequest { request_id: format!("reg-{run}"), spec: Some(capability) };
    capabilities.register_capability(registered).await.expect("register capability");
    let mut executions = ExecutionServiceClient::new(channel.clone());
    for n in 0..2 {
        let submit = pb::SubmitRequest {
            request_id: format!("submit-{run}-{n}"),
            execution_id: Some(format!("ex-metrics-{run}-{n}")),
            capability_id: "metrics.read".to_string(),
            input_json: format!(r#"{{"n":{n}}}"#),
            actor: Some(support::user("alice")),
            surface: "metrics-test".to_string(),
            correlation_id: None,
        };
        executions.submit(submit).await.expect("submit");
    }

    let converged = cluster.converge(support::WAIT).await.unwrap_or_else(|error| panic!("{error}"));
    let status =
        ClusterServiceClient::new(channel).status(pb::StatusRequest::default()).await.expect("status").into_inner();
    let after = scrape(&metrics_addrs[&leader]).await;

    // Calls: every create counted once as OK, the refusal by its codes.
    let created = value(&after, "gavel_rpc_calls_total", &create_ok) - created_before;
    assert_eq!(created, ids.len() as f64, "CreateApproval OK calls counted on the leader");
    let refused = value(
        &after,
        "gavel_rpc_calls_total",
        &[("method", "ApprovalService/CreateApproval"), ("code", "INVALID_ARGUMENT")],
    );
    assert!(refused >= 1.0, "the refused call is counted: {after:#?}");
    let steered = value(&after, "gavel_decisions_refused_total", &[("reason", "APPROVAL_TERMS_CHANGED")]);
    assert_eq!(steered, 1.0, "the refused decision is counted by reason: {after:#?}");
    let latencies = value(&after, "gavel_rpc_duration_seconds_count", &[("method", "ApprovalService/CreateApproval")]);
    assert!(latencies >= (ids.len() + 1) as f64, "every create has a latency: {latencies}");

    // Raft: the leader's gauges agree with its Status.
    assert_eq!(value(&after, "gavel_raft_is_leader", &[]), 1.0);
    assert_eq!(value(&after, "gavel_raft_leader_id", &[]), leader as f64);
    assert!(value(&after, "gavel_raft_term", &[]) >= status.term as f64);
    let lags: Vec<&Sample> = after.iter().filter(|sample| sample.name == "gavel_raft_follower_lag_entries").collect();
    assert_eq!(lags.len(), 2, "the leader reports each follower's lag: {lags:?}");
    assert!(lags.iter().all(|lag| lag.labels["node"] != leader.to_string()), "{lags:?}");
    assert!(value(&after, "gavel_raft_applied_index", &[]) >= status.last_applied_index as f64);
    assert!(
        status.last_applied_index >= converged.applied_index,
        "status {status:?} vs converged {}",
        converged.applied_index
    );

    // Domain: every node's replica holds the approvals created, pending.
    for (id, addr) in &metrics_addrs {
        let samples = scrape(addr).await;
        assert_eq!(value(&samples, "gavel_approvals", &[("status", "pending")]), ids.len() as f64, "node {id}");
        assert_eq!(value(&samples, "gavel_executions", &[("state", "queued")]), 2.0, "node {id}");
        assert_eq!(value(&samples, "gavel_queue_ready", &[("queue", "metrics-queue")]), 2.0, "node {id}");
        assert_eq!(value(&samples, "gavel_leases_current", &[]), 0.0, "node {id}");
        assert_eq!(value(&samples, "gavel_raft_members", &[]), 3.0, "node {id}");
        assert_eq!(value(&samples, "gavel_raft_is_leader", &[]), if *id == leader { 1.0 } else { 0.0 });
        let lag_series = samples.iter().filter(|sample| sample.name == "gavel_raft_follower_lag_entries").count();
        assert_eq!(lag_series, if *id == leader { 2 } else { 0 }, "node {id}");
        assert!(value(&samples, "gavel_raft_applied_index", &[]) >= converged.applied_index as f64, "node {id}");
        // Names follow the conventions, and no label names anything the test created.
        for sample in &samples {
            let name_ok = sample.name.starts_with("gavel_")
                && sample.name.bytes().all(|byte| byte.is_ascii_lowercase() || byte == b'_');
            assert!(name_ok, "metric name {:?} on node {id}", sample.name);
            for label in sample.labels.values() {
                assert!(!label.contains(&run), "label value {label:?} names an id of this test: {sample:?}");
                assert!(!label.starts_with("apr-") && !label.starts_with("srv-"), "id-like label {sample:?}");
            }
        }
    }

    // The Grafana dashboard only charts metrics a node exports.
    let dashboard = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/grafana/gavel.json"))
        .expect("deploy/grafana/gavel.json");
    let dashboard: serde_json::Value = serde_json::from_str(&dashboard).expect("the dashboard is JSON");
    let panels = dashboard["panels"].as_array().expect("dashboard panels");
    let exported: Vec<&str> = after.iter().map(|sample| sample.name.as_str()).collect();
    for expr in panels.iter().flat_map(|panel| panel["targets"].as_array().into_iter().flatten()) {
        let expr = expr["expr"].as_str().expect("a query");
        for name in expr.split(|c: char| !(c.is_ascii_lowercase() || c == '_')).filter(|w| w.starts_with("gavel_")) {
            assert!(exported.contains(&name), "the dashboard charts {name}, which no node exports ({expr})");
        }
    }

    // Only /metrics is served.
    let mut stream = tokio::net::TcpStream::connect(&metrics_addrs[&leader]).await.expect("connect");
    stream.write_all(b"GET /other HTTP/1.1\r\nHost: gavel\r\n\r\n").await.expect("write");
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.expect("read");
    assert!(String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 404"), "{answer:?}");
    cluster.stop_all(Duration::from_secs(10)).expect("stop the cluster");
}

/// The value of `name` on `after` minus on `before` (labels as in [`value`]).
fn grew(before: &[Sample], after: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    value(after, name, labels) - value(before, name, labels)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hot_path_histograms_snapshots_stages_and_late_reports_move_when_their_events_happen() {
    const PROPOSALS: usize = 30;
    let dir = tempfile::tempdir().expect("temp dir");
    let mut spec = ClusterSpec::new(support::gavel_binary(), dir.path());
    let metrics_addrs: BTreeMap<u64, String> =
        (1..=3).map(|id| (id, format!("127.0.0.1:{}", support::free_port()))).collect();
    spec.node_args = metrics_addrs.iter().map(|(id, addr)| (*id, vec![format!("--metrics-listen={addr}")])).collect();
    // A low threshold, so that the proposals below make every node snapshot.
    spec.args = vec!["--snapshot-logs-since-last=20".to_string()];
    spec.start_timeout = support::WAIT;
    let cluster = gavel_testkit::Cluster::start(spec).await.unwrap_or_else(|error| panic!("{error}"));
    let leader = cluster.wait_for_leader(support::WAIT).await.unwrap_or_else(|error| panic!("{error}"));
    let channel = cluster.channel(leader, Duration::from_secs(10)).expect("a channel");
    let before = scrape(&metrics_addrs[&leader]).await;
    for name in [
        "gavel_raft_committed_index",
        "gavel_raft_wal_append_seconds_count",
        "gavel_raft_wal_fsync_seconds_count",
        "gavel_raft_wal_group_entries_count",
        "gavel_raft_entry_commands_count",
        "gavel_raft_snapshots_total",
        "gavel_raft_snapshot_bytes",
        "gavel_raft_snapshot_build_seconds_count",
        "gavel_late_reports_total",
        "gavel_dedup_replays_total",
        "gavel_tick_lag_seconds_count",
    ] {
        assert!(before.iter().any(|sample| sample.name == name), "{name} is exported: {before:#?}");
    }

    let run = uuid::Uuid::new_v4().simple().to_string();
    let mut approvals = ApprovalServiceClient::new(channel.clone());
    for n in 0..PROPOSALS {
        let request = support::approval_request(&format!("apr-hot-{run}-{n}"), "metrics-test");
        approvals.create_approval(request).await.expect("create approval");
    }

    // A report after the lease ended: the task completes, then a second,
    // different report for the same lease is refused LEASE_LOST.
    let capability = pb::CapabilitySpec {
        queue: Some("late-queue".to_string()),
        ..support::capability("late.read", pb::SideEffect::Read)
    };
    let registered = pb::RegisterCapabilityRequest { request_id: format!("reg-{run}"), spec: Some(capability) };
    CapabilityServiceClient::new(channel.clone()).register_capability(registered).await.expect("register");
    let submit = pb::SubmitRequest {
        request_id: format!("submit-{run}"),
        execution_id: Some(format!("ex-late-{run}")),
        capability_id: "late.read".to_string(),
        input_json: "{}".to_string(),
        actor: Some(support::user("alice")),
        surface: "metrics-test".to_string(),
        correlation_id: None,
    };
    ExecutionServiceClient::new(channel.clone()).submit(submit).await.expect("submit");
    let mut workers = WorkerServiceClient::new(channel.clone());
    let poll = pb::PollRequest {
        request_id: format!("poll-{run}"),
        worker_id: "worker-late".to_string(),
        queues: vec!["late-queue".to_string()],
        max_tasks: 1,
        wait_ms: 5_000,
    };
    let tasks = workers.poll(poll.clone()).await.expect("poll").into_inner().tasks;
    // The same poll again (a retry): answered at the edge with the same grant.
    let again = workers.poll(poll).await.expect("the retried poll").into_inner().tasks;
    assert_eq!(again, tasks, "a retried poll gets the tasks its first attempt was granted");
    let lease = tasks.first().and_then(|task| task.lease.clone()).unwrap_or_else(|| panic!("a leased task: {tasks:?}"));
    let report = |n: u32| pb::ReportRequest {
        request_id: format!("report-{run}-{n}"),
        lease_id: lease.lease_id,
        worker_id: lease.worker_id.clone(),
        outcome: Some(pb::report_request::Outcome::Completed(pb::ReportCompleted { output_json: format!("{n}") })),
    };
    workers.report(report(1)).await.expect("the first report");
    // The same report again (a retry): applied again, answered from the dedup table.
    workers.report(report(1)).await.expect("the retried report gets the first answer");
    let late = workers.report(report(2)).await.expect_err("a report after the lease ended is refused");
    assert_eq!(support::domain_code(&late), "LEASE_LOST", "{late:?}");

    // Every node snapshots past the threshold; wait for the leader's.
    let mut after = Vec::new();
    let deadline = tokio::time::Instant::now() + support::WAIT;
    while tokio::time::Instant::now() < deadline {
        after = scrape(&metrics_addrs[&leader]).await;
        if value(&after, "gavel_raft_snapshots_total", &[]) >= 1.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(grew(&before, &after, "gavel_raft_snapshots_total", &[]) >= 1.0, "a snapshot is counted: {after:#?}");
    assert!(value(&after, "gavel_raft_snapshot_bytes", &[]) > 0.0);
    assert!(grew(&before, &after, "gavel_raft_snapshot_build_seconds_count", &[]) >= 1.0);

    let proposals = PROPOSALS as f64;
    assert_eq!(grew(&before, &after, "gavel_late_reports_total", &[]), 1.0, "the late report is counted once");
    assert_eq!(grew(&before, &after, "gavel_dedup_replays_total", &[("at", "poll")]), 1.0, "the retried poll");
    assert_eq!(grew(&before, &after, "gavel_dedup_replays_total", &[("at", "apply")]), 1.0, "the retried report");
    assert!(grew(&before, &after, "gavel_raft_committed_index", &[]) >= proposals);
    assert!(value(&after, "gavel_raft_committed_index", &[]) >= value(&after, "gavel_raft_applied_index", &[]));
    // Each create is one command in some entry, each entry one WAL record in some fsync group.
    assert!(grew(&before, &after, "gavel_raft_entry_commands_sum", &[]) >= proposals);
    let entries = grew(&before, &after, "gavel_raft_entry_commands_count", &[]);
    assert!(entries >= 1.0 && entries <= grew(&before, &after, "gavel_raft_wal_group_entries_sum", &[]));
    let fsyncs = grew(&before, &after, "gavel_raft_wal_fsync_seconds_count", &[]);
    assert!(fsyncs >= 1.0, "the WAL fsynced");
    // Both are recorded per group (a group may land between the two reads).
    assert!((fsyncs - grew(&before, &after, "gavel_raft_wal_append_seconds_count", &[])).abs() <= 1.0);
    assert!(grew(&before, &after, "gavel_raft_wal_fsync_seconds_sum", &[]) > 0.0);
    for stage in ["edge", "batcher", "commit", "reply"] {
        let counted = grew(&before, &after, "gavel_command_stage_seconds_count", &[("stage", stage)]);
        assert!(counted >= proposals, "stage {stage}: {counted} observations for {PROPOSALS} creates");
        let inf = grew(&before, &after, "gavel_command_stage_seconds_bucket", &[("stage", stage), ("le", "+Inf")]);
        assert_eq!(inf, counted, "stage {stage}: the +Inf bucket holds every observation");
    }
    assert!(grew(&before, &after, "gavel_command_stage_seconds_count", &[("stage", "apply")]) >= 1.0);
    cluster.stop_all(Duration::from_secs(10)).expect("stop the cluster");
}
