//! Smoke runs of `gavel-lab bench` against local clusters of the debug `gavel`
//! binary (found as `gavel_testkit::resolve_gavel_binary` finds it: run
//! `cargo build -p gavel-cli` first, or set `GAVEL_BIN`). The runs are
//! serialized so their timings do not disturb each other.

use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};

use clap::Parser;
use gavel_bench::{BenchArgs, BenchError, BenchOutcome, ConfigReport};

static SERIAL: Mutex<()> = Mutex::new(());

#[derive(Debug, Parser)]
struct Cli {
    #[command(flatten)]
    bench: BenchArgs,
}

/// The binary next to this test; never built from here (a nested cargo
/// would wait for the lock of the running one).
fn gavel_binary() -> PathBuf {
    gavel_testkit::resolve_gavel_binary(None).unwrap_or_else(|error| panic!("{error}"))
}

/// Runs the bench with these flags (plus `--json` and the debug binary);
/// returns the outcome and the JSON lines it printed.
fn bench(flags: &[&str]) -> (Result<BenchOutcome, BenchError>, Vec<serde_json::Value>) {
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    let binary = gavel_binary();
    let mut argv = vec!["bench", "--json", "--gavel-binary", binary.to_str().expect("utf-8 path")];
    argv.extend_from_slice(flags);
    let args = Cli::try_parse_from(argv).expect("flags parse").bench;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    let mut out = Vec::new();
    let outcome = runtime.block_on(gavel_bench::run_to(args, &mut out));
    let text = String::from_utf8(out).expect("utf-8 output");
    let lines = text
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|error| panic!("not JSON ({error}): {line}")))
        .collect();
    (outcome, lines)
}

fn check_config(config: &ConfigReport, operations: &[&str]) {
    assert!(config.ok, "{config:#?}");
    assert_eq!(config.errors, 0, "{:?}", config.error_samples);
    assert!(config.lifecycles > 0 && config.lifecycles_per_s > 0.0, "{config:#?}");
    assert!(config.operations >= config.lifecycles * 3, "{config:#?}");
    assert!(config.verified > 0, "{config:#?}");
    for operation in operations {
        let latency = config.latency.get(*operation).unwrap_or_else(|| panic!("no {operation} latency: {config:#?}"));
        assert!(latency.count > 0);
        assert!(0.0 < latency.p50_ms && latency.p50_ms <= latency.p99_ms, "{operation}: {latency:?}");
        assert!(latency.p99_ms <= latency.max_ms, "{operation}: {latency:?}");
    }
    for latency in config.lifecycle_latency.values() {
        assert!(latency.p50_ms <= latency.p99_ms && latency.p99_ms <= latency.max_ms, "{latency:?}");
    }
    let node_cpu = config.cpu.node_cpu_s.as_ref().expect("node CPU is measured for a local cluster");
    assert_eq!(node_cpu.len(), 3);
    assert!(config.cpu.node_cpu_s_per_op.is_some_and(|per_op| per_op > 0.0), "{:?}", config.cpu);
}

/// Every node spent CPU, blocked, called read and write and wrote to its
/// peers during the window; exactly one row is the leader's.
fn check_cost(cost: &gavel_bench::CostReport, operations: u64) {
    assert_eq!(cost.operations, operations);
    assert_eq!(cost.nodes.len(), 3, "{cost:#?}");
    assert_eq!(cost.nodes.iter().filter(|node| node.leader).count(), 1, "{cost:#?}");
    for node in &cost.nodes {
        assert!(node.cpu_ms > 0.0 && node.cpu_system_ms <= node.cpu_ms, "{node:?}");
        assert!(node.voluntary_switches > 0.0 && node.read_write_calls > 0.0, "{node:?}");
        assert!(node.written_bytes > 0.0 && node.threads > 1, "{node:?}");
        // With perf every node made system calls; without it the report says why.
        match node.syscalls {
            Some(syscalls) => assert!(syscalls > 0.0, "{node:?}"),
            None => assert!(cost.syscalls_source.starts_with("not counted"), "{cost:#?}"),
        }
    }
}

fn check_json(lines: &[serde_json::Value], configs: usize) {
    assert_eq!(lines.len(), configs + 1, "one line per configuration and the summary: {lines:#?}");
    for (line, clients) in lines.iter().zip([1, 4]) {
        assert_eq!(line["clients"], clients);
        assert_eq!(line["ok"], true);
    }
    let summary = &lines.last().expect("a summary line")["summary"];
    assert_eq!(summary["ok"], true, "{summary:#}");
    assert_eq!(summary["errors"], 0);
}

fn smoke(workload: &str, operations: &[&str]) {
    smoke_with(workload, operations, &[]);
}

/// [`smoke`] with extra flags; the cluster is secure unless they say `--insecure`.
fn smoke_with(workload: &str, operations: &[&str], extra: &[&str]) {
    let mut flags = vec!["--workload", workload, "--clients", "1,4", "--duration", "2s", "--warmup", "0s"];
    flags.extend_from_slice(extra);
    let (outcome, lines) = bench(&flags);
    let outcome = outcome.expect("the bench runs");
    assert_eq!(outcome.summary["tls"], !extra.contains(&"--insecure"), "{:#}", outcome.summary);
    assert!(outcome.ok);
    assert_eq!(outcome.configs.iter().map(|config| config.clients).collect::<Vec<_>>(), vec![1, 4]);
    for config in &outcome.configs {
        assert_eq!(config.workload, workload);
        check_config(config, if config.clients == 1 { &operations[..3] } else { operations });
        assert!(config.term_rise.is_some(), "the local nodes' terms are read: {config:#?}");
        match (&config.cost, extra.contains(&"--cost")) {
            (Some(cost), true) => check_cost(cost, config.operations),
            (None, false) => {}
            (cost, asked) => panic!("--cost given: {asked}, cost report: {cost:?}"),
        }
    }
    check_json(&lines, 2);
    assert_eq!(outcome.summary["ok"], true);
}

#[test]
fn approvals_smoke_with_cost() {
    smoke_with("approvals", &["create", "decide", "consume"], &["--cost"]);
}

#[test]
fn approvals_smoke_insecure() {
    smoke_with("approvals", &["create", "decide", "consume"], &["--insecure"]);
}

#[test]
fn executions_smoke() {
    smoke("executions", &["submit", "poll", "report"]);
}

/// The governed tool call: every lifecycle's tool ran once for a caller that
/// got its result, each stage was measured, and `--cost` is per lifecycle.
#[test]
fn governed_smoke_with_cost() {
    let (outcome, lines) =
        bench(&["--workload", "governed", "--clients", "1,4", "--duration", "2s", "--warmup", "0s", "--cost"]);
    let outcome = outcome.expect("the bench runs");
    assert!(outcome.ok, "{:#}", outcome.summary);
    for config in &outcome.configs {
        assert_eq!(config.workload, "governed");
        // The caller resumes on the decision (decision 0108): no WaitApproval.
        check_config(config, &["submit", "decide", "resume_and_wait"]);
        assert!(!config.latency.contains_key("wait_approval"), "{config:#?}");
        let check = config.exactly_once.as_ref().expect("the governed workload counts its tool runs");
        assert!(check.ok, "{check:?}");
        assert_eq!((check.executions, check.tool_runs), (config.completed_lifecycles, config.completed_lifecycles));
        assert_eq!(check.ran_once_and_seen, config.completed_lifecycles);
        // `decision_seen` is the flow of `governed-wait` only.
        for stage in gavel_bench::governed::STAGE_ORDER.into_iter().filter(|stage| *stage != "decision_seen") {
            let latency = config.lifecycle_stages.get(stage).unwrap_or_else(|| panic!("no {stage}: {config:#?}"));
            // A stage counts when it ends in the window, so a lifecycle that ended
            // just after the window may have stages inside it.
            let lifecycles = config.lifecycles..=config.lifecycles + config.clients as u64;
            assert!(lifecycles.contains(&latency.count), "{stage}: {latency:?} for {lifecycles:?}");
        }
        let cost = config.cost.as_ref().expect("--cost given");
        assert_eq!(cost.per, "lifecycle");
        check_cost(cost, config.lifecycles);
        let each = config.cpu.node_cpu_s_per_lifecycle_each.as_ref().expect("per node");
        assert_eq!(each.len(), 3);
    }
    // The decisions carried the waiting resumes (the rise of the leader's
    // counter; a decision that beat a resume's registration is not carried).
    let carried: u64 =
        outcome.configs.iter().filter_map(|config| config.counters_rise.get("gavel_resumes_carried_total")).sum();
    assert!(carried > 0, "no resume was carried by its decision: {:#?}", outcome.configs[0].counters_rise);
    check_json(&lines, 2);
    assert!(lines[0]["lifecycle_stages"]["lease_granted"]["count"].as_u64().is_some_and(|count| count > 0));
    assert_eq!(lines[0]["exactly_once"]["ok"], true);
}

#[test]
fn mixed_smoke() {
    // One client runs approvals; with four, two run each.
    smoke("mixed", &["create", "decide", "consume", "submit", "poll", "report"]);
}

#[test]
fn scale_smoke() {
    let (outcome, lines) = bench(&[
        "--scale",
        "2000",
        "--scale-checkpoint",
        "1000",
        "--scale-clients",
        "8",
        "--duration",
        "1s",
        "--warmup",
        "0s",
        // The floor for runs of millions (4 GB) would refuse this one on a
        // busy disk; its data is about 50 MB.
        "--watchdog-disk-min",
        "500M",
        // Snapshots often and a short log behind them, so that builds fall
        // in the measured windows and the fourth node must install one.
        "--node-flag=--snapshot-commands-since-last=500",
        "--node-flag=--logs-to-keep=5",
    ]);
    let outcome = outcome.expect("the bench runs");
    assert!(outcome.ok);
    let scale = outcome.scale.expect("scale figures");
    assert_eq!(scale.baseline.len(), 3);
    assert!(scale.baseline.iter().all(|node| node.rss_bytes.is_some_and(|bytes| bytes > 0)), "{:?}", scale.baseline);
    assert_eq!(scale.checkpoints.iter().map(|checkpoint| checkpoint.fill.executions).sum::<u64>(), 2000);
    assert_eq!(scale.checkpoints.len(), 2);
    for checkpoint in &scale.checkpoints {
        check_config(&checkpoint.measurement, &["submit", "poll", "report"]);
        assert!(checkpoint.fill.per_s > 0.0);
        assert_eq!(checkpoint.nodes.len(), 3);
        for node in &checkpoint.nodes {
            assert!(node.rss_bytes.is_some_and(|bytes| bytes > 0), "{node:?}");
            assert!(node.peak_rss_bytes >= node.rss_bytes, "{node:?}");
            assert!(node.data_dir_bytes.is_some_and(|bytes| bytes > 0), "{node:?}");
            for part in ["cold.redb", "raft-log"] {
                assert!(node.disk_parts.get(part).is_some_and(|bytes| *bytes > 0), "{part}: {node:?}");
            }
            // Snapshots are checkpoints of cold.redb: no snapshot file.
            assert_eq!(node.disk_parts.get("raft-snapshot"), Some(&0), "{node:?}");
        }
        assert_eq!(checkpoint.per_execution.len(), 3);
        for per in &checkpoint.per_execution {
            assert!(per.memory_bytes.is_some() && per.disk_bytes.is_some_and(|bytes| bytes > 0.0), "{per:?}");
        }
        let builds = &checkpoint.builds;
        assert!(builds.building_share >= 0.0 && builds.building_share <= 1.0, "{builds:?}");
        let sorted = [&builds.lifecycles_inside, &builds.lifecycles_outside];
        let sorted: u64 = sorted.iter().filter_map(|latency| latency.as_ref()).map(|latency| latency.count).sum();
        assert_eq!(sorted, checkpoint.measurement.lifecycles, "every measured lifecycle is inside or outside");
        assert!(checkpoint.load_average.is_some() && checkpoint.disk_free_bytes.is_some());
    }
    assert!(scale.checkpoints[1].retained > 2000);
    let comparison = scale.comparison.as_ref().expect("two measurements are compared");
    assert!(comparison.throughput_ratio > 0.0, "{comparison:?}");
    let snapshot = scale.snapshot.as_ref().expect("the leader built snapshots");
    // A build is a durable checkpoint: timed, with no size and no file.
    assert!(snapshot.bytes == 0 && snapshot.build_s > 0.0 && snapshot.builds > 1, "{snapshot:?}");
    assert_eq!(snapshot.stored_file_bytes, None, "{snapshot:?}");
    let restart = scale.restart.expect("the restart is measured on a local cluster");
    assert!(restart.read_ok, "{restart:?}");
    assert!(restart.serving_ms > 0.0 && restart.serving_ms <= restart.caught_up_ms, "{restart:?}");
    let install = scale.install.expect("the install is measured on a local cluster");
    assert!(install.read_ok && install.by_snapshot, "the fourth node installed a snapshot: {install:?}");
    assert!(install.install_mb_per_s.is_some_and(|rate| rate > 0.0), "{install:?}");
    // (None when leadership moved before the send: another node sent it.)
    if install.sent_bytes.is_some() {
        assert_eq!(install.sent_bytes, install.snapshot_bytes, "the leader sent what the node installed: {install:?}");
    }
    assert!(install.installed_ms <= install.caught_up_ms, "{install:?}");
    // Two measurements and the summary.
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[2]["summary"]["ok"], true);
    assert_eq!(lines[2]["summary"]["scale"]["target"], 2000);
}

#[test]
fn a_missing_binary_fails_with_a_summary() {
    let args = Cli::try_parse_from(["bench", "--json", "--gavel-binary", "/nonexistent/gavel"]).expect("flags parse");
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let mut out = Vec::new();
    assert!(runtime.block_on(gavel_bench::run_to(args.bench, &mut out)).is_err());
    let text = String::from_utf8(out).expect("utf-8 output");
    let last: serde_json::Value = serde_json::from_str(text.lines().last().expect("a line")).expect("JSON");
    assert_eq!(last["summary"]["ok"], false);
}

#[test]
fn figures_smoke() {
    let (outcome, lines) = bench(&[
        "--figures",
        "restart,failover,lifecycle,cancel,idle-worker",
        "--figure-runs",
        "1",
        "--figure-lifecycles",
        "5",
        "--figure-executions",
        "300",
        "--figure-cancels",
        "2",
        "--figure-idle",
        "1s",
    ]);
    let outcome = outcome.expect("the bench runs");
    assert!(outcome.ok);
    assert!(outcome.configs.is_empty() && outcome.scale.is_none());
    let figures = outcome.figures.expect("figures");
    // Failover with the cluster's timings, then with election timeout 800–1600 ms.
    assert_eq!(figures.failover.len(), 2);
    for failover in &figures.failover {
        assert_eq!(failover.write_after_kill.runs_ms.len(), 1);
        // A new leader needs at least one election timeout.
        assert!(failover.write_after_kill.median_ms > 100.0, "{failover:?}");
    }
    assert_eq!(
        figures.lifecycle.iter().map(|figure| figure.through.as_str()).collect::<Vec<_>>(),
        ["follower", "leader"]
    );
    for lifecycle in &figures.lifecycle {
        assert!(0.0 < lifecycle.p50.median_ms && lifecycle.p50.median_ms <= lifecycle.p99.median_ms, "{lifecycle:?}");
    }
    assert_eq!(figures.cancel.iter().map(|figure| figure.heartbeat_ms).collect::<Vec<_>>(), [500, 100]);
    for cancel in &figures.cancel {
        assert_eq!(cancel.cancels, 2);
        assert!(0.0 < cancel.p50_ms && cancel.p50_ms <= cancel.max_ms, "{cancel:?}");
    }
    let idle = figures.idle_worker.expect("the idle worker");
    assert_eq!(idle.raft_log_entries, 0, "an idle worker proposes nothing: {idle:?}");
    assert!(idle.requests_per_s < 20.0, "{idle:?}");
    let restart = figures.restart.expect("the restart figure");
    assert_eq!(restart.fill.executions, 300);
    assert_eq!(restart.runs.len(), 1);
    let run = &restart.runs[0];
    assert!(run.read_ok, "{run:?}");
    let read_ms = run.read_ms.expect("the read was timed");
    assert!(0.0 < run.serving_ms && run.serving_ms <= read_ms && run.serving_ms <= run.caught_up_ms, "{run:?}");
    let summary = &lines.last().expect("a summary line")["summary"];
    assert_eq!(summary["ok"], true, "{summary:#}");
    assert_eq!(summary["figures"]["cancel"][1]["heartbeat_ms"], 100);
}

#[test]
fn figures_need_the_local_cluster() {
    assert!(Cli::try_parse_from(["bench", "--figures", "failover", "--endpoints", "a:1"]).is_err());
    assert!(Cli::try_parse_from(["bench", "--figures", "failover", "--scale", "10"]).is_err());
    assert!(Cli::try_parse_from(["bench", "--figures", "no-such-figure"]).is_err());
    assert!(Cli::try_parse_from(["bench", "--figure-runs", "2"]).is_err(), "figure flags need --figures");
    let parsed = Cli::try_parse_from(["bench", "--figures", "idle-worker,cancel"]).expect("parses").bench;
    assert_eq!(parsed.figures, vec![gavel_bench::Figure::IdleWorker, gavel_bench::Figure::Cancel]);
}
