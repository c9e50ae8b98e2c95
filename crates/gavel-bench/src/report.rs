//! Human-readable tables of the figures.

use std::fmt::Write as _;

use crate::scale::{NodeFootprint, RestartReport, ScaleReport};
use crate::stats::Latency;
use crate::workload::ConfigReport;

/// Operation rows in lifecycle order.
const OPERATION_ORDER: [&str; 6] = ["create", "decide", "consume", "submit", "poll", "report"];

fn ms(value: f64) -> String {
    format!("{value:.2}")
}

fn latency_row(out: &mut String, name: &str, latency: &Latency) {
    let _ = writeln!(
        out,
        "  {name:<22} {:>9} {:>9} {:>9} {:>9} {:>9}",
        latency.count,
        ms(latency.p50_ms),
        ms(latency.p99_ms),
        ms(latency.p999_ms),
        ms(latency.max_ms)
    );
}

/// Bytes as MB with one decimal.
pub(crate) fn megabytes(bytes: Option<u64>) -> String {
    bytes.map_or("-".to_string(), |bytes| format!("{:.1} MB", bytes as f64 / 1e6))
}

/// CPU seconds per operation, shown in milliseconds.
fn cpu_ms(seconds: Option<f64>) -> String {
    seconds.map_or("-".to_string(), |seconds| format!("{:.3} ms", seconds * 1e3))
}

/// The table of one configuration.
pub(crate) fn config_table(report: &ConfigReport) -> String {
    let mut out = String::new();
    let spread = if report.leader_only {
        "all on the leader".to_string()
    } else {
        format!("round-robin over {} node(s)", report.nodes)
    };
    let retained = report.retained.map_or(String::new(), |retained| format!(", {retained} executions retained"));
    let _ = writeln!(
        out,
        "== {} | {} client(s), {spread}{retained} | {:.1} s warmup + {:.1} s measured ==",
        report.workload, report.clients, report.warmup_s, report.measured_s
    );
    let _ = writeln!(
        out,
        "  lifecycles {} ({:.1}/s)   operations {} ({:.1}/s)   errors {}   retries {}   empty polls {}",
        report.lifecycles,
        report.lifecycles_per_s,
        report.operations,
        report.operations_per_s,
        report.errors,
        report.retries,
        report.empty_polls
    );
    let _ = writeln!(
        out,
        "  {:<22} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "operation (ms)", "count", "p50", "p99", "p99.9", "max"
    );
    for name in OPERATION_ORDER {
        if let Some(latency) = report.latency.get(name) {
            latency_row(&mut out, name, latency);
        }
    }
    for (kind, latency) in &report.lifecycle_latency {
        latency_row(&mut out, &format!("{kind} lifecycle"), latency);
    }
    let cpu = &report.cpu;
    let nodes = match (&cpu.node_cpu_s, cpu.node_cores) {
        (Some(each), Some(cores)) => format!(
            "nodes {} per op, {} per lifecycle ({} s = {cores:.2} cores)",
            cpu_ms(cpu.node_cpu_s_per_op),
            cpu_ms(cpu.node_cpu_s_per_lifecycle),
            each.iter().map(|seconds| format!("{seconds:.2}")).collect::<Vec<_>>().join(" + "),
        ),
        _ => "nodes unknown (pass --node-pids)".to_string(),
    };
    let _ = writeln!(
        out,
        "  CPU: {nodes}; bench {} per op ({:.2} s = {:.2} cores)",
        cpu_ms(cpu.bench_cpu_s_per_op),
        cpu.bench_cpu_s,
        cpu.bench_cores
    );
    if report.ok {
        let _ = writeln!(
            out,
            "  self-check: ok ({} lifecycles checked, {} re-read at the end)",
            report.completed_lifecycles, report.verified
        );
    } else {
        let _ = writeln!(out, "  self-check: FAILED with {} error(s):", report.errors);
        for sample in &report.error_samples {
            let _ = writeln!(out, "    {sample}");
        }
    }
    out
}

/// The closing summary, one row per configuration.
pub(crate) fn summary_table(configs: &[ConfigReport]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<11} {:>7} {:>9} {:>12} {:>10} {:>10} {:>10} {:>12} {:>12} {:>6}",
        "workload",
        "clients",
        "retained",
        "lifecycles/s",
        "ops/s",
        "lc p50 ms",
        "lc p99 ms",
        "node CPU/op",
        "bench CPU/op",
        "errors"
    );
    for report in configs {
        let lifecycle = |pick: fn(&Latency) -> f64| {
            let values: Vec<String> = report.lifecycle_latency.values().map(|latency| ms(pick(latency))).collect();
            if values.is_empty() {
                "-".to_string()
            } else {
                values.join("/")
            }
        };
        let _ = writeln!(
            out,
            "{:<11} {:>7} {:>9} {:>12.1} {:>10.1} {:>10} {:>10} {:>12} {:>12} {:>6}",
            report.workload,
            report.clients,
            report.retained.map_or("-".to_string(), |retained| retained.to_string()),
            report.lifecycles_per_s,
            report.operations_per_s,
            lifecycle(|latency| latency.p50_ms),
            lifecycle(|latency| latency.p99_ms),
            cpu_ms(report.cpu.node_cpu_s_per_op),
            cpu_ms(report.cpu.bench_cpu_s_per_op),
            report.errors
        );
    }
    out
}

/// One node's footprint.
pub(crate) fn footprint_line(node: &NodeFootprint) -> String {
    format!(
        "  node {}: RSS {}, data dir {} ({} allocated), latest snapshot {} at index {} ({} stored), applied {}",
        node.node,
        megabytes(node.rss_bytes),
        megabytes(node.data_dir_bytes),
        megabytes(node.data_dir_allocated_bytes),
        megabytes(node.snapshot_bytes),
        node.snapshot_index.map_or("-".to_string(), |index| index.to_string()),
        node.snapshots_stored.map_or("-".to_string(), |count| count.to_string()),
        node.last_applied_index.map_or("-".to_string(), |index| index.to_string()),
    )
}

/// The restart figures.
pub(crate) fn restart_line(restart: &RestartReport) -> String {
    format!(
        "  restart of follower {}: serving (health SERVING) after {:.1} ms, a linearizable read through it after {} \
         ms, applied the leader's index {} after {:.1} ms; snapshot index {} before, {} after ({} entries \
         re-applied; restored from its snapshot: {}); read through it: {}",
        restart.node,
        restart.serving_ms,
        restart.read_ms.map_or("-".to_string(), |read| format!("{read:.1}")),
        restart.leader_applied_index,
        restart.caught_up_ms,
        restart.snapshot_index_before.map_or("-".to_string(), |index| index.to_string()),
        restart.snapshot_index_after.map_or("-".to_string(), |index| index.to_string()),
        restart.entries_replayed.map_or("-".to_string(), |entries| entries.to_string()),
        if restart.restored_from_snapshot { "yes" } else { "no" },
        restart.read_error.as_deref().unwrap_or("ok"),
    )
}

/// The scale-mode summary.
pub(crate) fn scale_summary(scale: &ScaleReport) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "scale mode, target {} finalized executions:", scale.target);
    for checkpoint in &scale.checkpoints {
        let rss: Vec<String> = checkpoint.nodes.iter().map(|node| megabytes(node.rss_bytes)).collect();
        let disk: Vec<String> = checkpoint.nodes.iter().map(|node| megabytes(node.data_dir_bytes)).collect();
        let snapshot = checkpoint.nodes.iter().filter_map(|node| node.snapshot_bytes).max();
        let _ = writeln!(
            out,
            "  at {:>9} retained: fill {:.0}/s (last 10 s {}), executions workload {:.1} lifecycles/s at {} clients \
             (p50 {} ms, p99 {} ms); RSS {}; data dirs {}; snapshot {}",
            checkpoint.retained,
            checkpoint.fill.per_s,
            checkpoint.fill.recent_per_s.map_or("-".to_string(), |rate| format!("{rate:.0}/s")),
            checkpoint.measurement.lifecycles_per_s,
            checkpoint.measurement.clients,
            checkpoint.measurement.lifecycle_latency.get("execution").map_or("-".to_string(), |l| ms(l.p50_ms)),
            checkpoint.measurement.lifecycle_latency.get("execution").map_or("-".to_string(), |l| ms(l.p99_ms)),
            rss.join(" / "),
            disk.join(" / "),
            megabytes(snapshot),
        );
    }
    if let Some(restart) = &scale.restart {
        let _ = writeln!(out, "{}", restart_line(restart));
    }
    out
}
