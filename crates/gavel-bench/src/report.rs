//! Human-readable tables of the figures.

use std::fmt::Write as _;

use crate::scale::{
    BuildWindows, InstallReport, NodeFootprint, PerExecution, RestartReport, ScaleReport, SnapshotFigure,
};
use crate::stats::Latency;
use crate::workload::ConfigReport;

/// Operation rows in lifecycle order.
const OPERATION_ORDER: [&str; 8] =
    ["create", "submit", "decide", "wait_approval", "consume", "resume_and_wait", "poll", "report"];

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
    for name in crate::governed::STAGE_ORDER {
        if let Some(latency) = report.lifecycle_stages.get(name) {
            latency_row(&mut out, &format!("stage {name}"), latency);
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
    if let Some(each) = &cpu.node_cpu_s_per_lifecycle_each {
        let _ = writeln!(
            out,
            "  node CPU per lifecycle: {} (all nodes {})",
            each.iter()
                .enumerate()
                .map(|(index, seconds)| format!("n{} {}", index + 1, cpu_ms(Some(*seconds))))
                .collect::<Vec<_>>()
                .join(", "),
            cpu_ms(cpu.node_cpu_s_per_lifecycle)
        );
    }
    if let Some(check) = &report.exactly_once {
        let _ = writeln!(
            out,
            "  exactly once: {} ({} executions, {} tool runs, {} ran once and were seen, {} lifecycles completed)",
            if check.ok { "ok" } else { "FAILED" },
            check.executions,
            check.tool_runs,
            check.ran_once_and_seen,
            check.completed
        );
    }
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

/// Bytes as MiB with one decimal.
fn mebibytes(bytes: Option<u64>) -> String {
    bytes.map_or("-".to_string(), |bytes| format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0)))
}

/// One node's footprint.
pub(crate) fn footprint_line(node: &NodeFootprint) -> String {
    let parts: Vec<String> =
        node.disk_parts.iter().map(|(name, bytes)| format!("{name} {}", megabytes(Some(*bytes)))).collect();
    format!(
        "  node {}: RSS {} (peak {}), data dir {} ({} allocated: {}), latest snapshot {} at index {} ({} stored), \
         applied {}",
        node.node,
        mebibytes(node.rss_bytes),
        mebibytes(node.peak_rss_bytes),
        megabytes(node.data_dir_bytes),
        megabytes(node.data_dir_allocated_bytes),
        if parts.is_empty() { "-".to_string() } else { parts.join(", ") },
        megabytes(node.snapshot_bytes),
        node.snapshot_index.map_or("-".to_string(), |index| index.to_string()),
        node.snapshots_stored.map_or("-".to_string(), |count| count.to_string()),
        node.last_applied_index.map_or("-".to_string(), |index| index.to_string()),
    )
}

/// Bytes per execution, with no decimals.
fn bytes_each(bytes: Option<f64>) -> String {
    bytes.map_or("-".to_string(), |bytes| format!("{bytes:.0} B"))
}

/// One node's bytes per retained execution.
pub(crate) fn per_execution_line(per: &PerExecution) -> String {
    let parts: Vec<String> =
        per.disk_parts.iter().map(|(name, bytes)| format!("{name} {}", bytes_each(Some(*bytes)))).collect();
    format!(
        "    per execution: memory {} over the baseline ({} since the last checkpoint), disk {} ({})",
        bytes_each(per.memory_bytes),
        bytes_each(per.marginal_memory_bytes),
        bytes_each(per.disk_bytes),
        parts.join(", ")
    )
}

fn latency_p99(latency: Option<&Latency>) -> String {
    latency.map_or("-".to_string(), |latency| format!("p99 {} ms (n={})", ms(latency.p99_ms), latency.count))
}

/// A measurement sorted by snapshot builds.
pub(crate) fn builds_line(builds: &BuildWindows) -> String {
    format!(
        "  snapshot builds in the window: {} ({} by the leader, longest {}), some node building {:.0}% of it; \
         lifecycles inside builds {}, outside {} (ratio {}); calls inside {}, outside {}",
        builds.builds,
        builds.leader_builds,
        builds.longest_build_s.map_or("-".to_string(), |seconds| format!("{seconds:.2} s")),
        builds.building_share * 100.0,
        latency_p99(builds.lifecycles_inside.as_ref()),
        latency_p99(builds.lifecycles_outside.as_ref()),
        builds.p99_ratio.map_or("-".to_string(), |ratio| format!("{ratio:.2}x")),
        latency_p99(builds.calls_inside.as_ref()),
        latency_p99(builds.calls_outside.as_ref()),
    )
}

/// The leader's last snapshot build.
pub(crate) fn snapshot_line(snapshot: Option<&SnapshotFigure>) -> String {
    match snapshot {
        None => "  the leader built no snapshot".to_string(),
        Some(snapshot) if snapshot.bytes == 0 => format!(
            "  leader {}: last snapshot (a durable checkpoint of cold.redb, no file) built in {:.3} s; stored file \
             {}; {} builds, longest {:.3} s",
            snapshot.node,
            snapshot.build_s,
            megabytes(snapshot.stored_file_bytes),
            snapshot.builds,
            snapshot.longest_build_s
        ),
        Some(snapshot) => format!(
            "  leader {}: last snapshot {} built in {:.2} s ({:.0} MB/s), stored file {}; {} builds, longest {:.2} s",
            snapshot.node,
            megabytes(Some(snapshot.bytes)),
            snapshot.build_s,
            snapshot.build_mb_per_s,
            megabytes(snapshot.stored_file_bytes),
            snapshot.builds,
            snapshot.longest_build_s
        ),
    }
}

/// The load averages, `1m/5m/15m`.
fn load(load: Option<[f64; 3]>) -> String {
    load.map_or("-".to_string(), |[one, five, fifteen]| format!("{one:.2}/{five:.2}/{fifteen:.2}"))
}

/// The restart figures.
pub(crate) fn restart_line(restart: &RestartReport) -> String {
    format!(
        "  restart of follower {}: serving (health SERVING) after {:.1} ms, a linearizable read through it after {} \
         ms, applied the leader's index {} after {:.1} ms; snapshot index {} before, {} after ({} entries \
         re-applied; restored from its snapshot: {}); read through it: {}; load {}",
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
        load(restart.load_average),
    )
}

/// The fourth node's install.
pub(crate) fn install_line(install: &InstallReport) -> String {
    format!(
        "  node {} joined {}: the leader wrote {} to send in {}; installed {} in {} ({}), snapshot index reached \
         after {:.1} ms, caught up after {:.1} ms; its RSS {} (peak {}); read through it: {}; load {}",
        install.node,
        if install.by_snapshot { "by snapshot" } else { "by log (the leader had not purged it)" },
        megabytes(install.sent_bytes),
        install.sent_write_s.map_or("-".to_string(), |seconds| format!("{seconds:.2} s")),
        megabytes(install.snapshot_bytes),
        install.install_s.map_or("-".to_string(), |seconds| format!("{seconds:.2} s")),
        install.install_mb_per_s.map_or("-".to_string(), |rate| format!("{rate:.1} MB/s")),
        install.installed_ms,
        install.caught_up_ms,
        mebibytes(install.rss_bytes),
        mebibytes(install.peak_rss_bytes),
        install.read_error.as_deref().unwrap_or("ok"),
        load(install.load_average),
    )
}

/// Targets of issue 12 the scale run measures.
const MIB: f64 = 1024.0 * 1024.0;
/// RSS per node at 1M retained.
const RSS_TARGET_AT_1M_BYTES: f64 = 512.0 * MIB;
/// Retained count the RSS and throughput targets are stated at.
const TARGET_RETAINED: u64 = 1_000_000;
/// Throughput at N over throughput at 10k.
const THROUGHPUT_RATIO_MIN: f64 = 0.9;
/// p99 while a snapshot builds over steady p99.
const BUILD_P99_RATIO_MAX: f64 = 2.0;
/// SIGKILL → serving.
const RESTART_SERVING_MAX_MS: f64 = 5000.0;
/// Snapshot install rate.
const INSTALL_MB_PER_S_MIN: f64 = 50.0;

fn verdict(met: Option<bool>, retained: u64, stated_at_1m: bool) -> &'static str {
    match met {
        None => "not measured",
        Some(_) if stated_at_1m && retained < TARGET_RETAINED => "(target is at 1M)",
        Some(true) => "met",
        Some(false) => "missed",
    }
}

/// The scale-mode summary: one line per checkpoint, then the targets table.
pub(crate) fn scale_summary(scale: &ScaleReport) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "scale mode, target {} finalized executions:", scale.target);
    for checkpoint in &scale.checkpoints {
        let rss: Vec<String> = checkpoint.nodes.iter().map(|node| mebibytes(node.rss_bytes)).collect();
        let disk: Vec<String> = checkpoint.nodes.iter().map(|node| megabytes(node.data_dir_allocated_bytes)).collect();
        let snapshot = checkpoint.nodes.iter().filter_map(|node| node.snapshot_bytes).max();
        let _ = writeln!(
            out,
            "  at {:>9} retained: fill {:.0}/s (last 10 s {}), executions workload {:.1} lifecycles/s at {} clients \
             (p50 {} ms, p99 {} ms); RSS {}; data dirs {}; snapshot {}; load {}",
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
            load(checkpoint.load_average),
        );
    }
    let _ = writeln!(out, "{}", snapshot_line(scale.snapshot.as_ref()));
    if let Some(restart) = &scale.restart {
        let _ = writeln!(out, "{}", restart_line(restart));
    }
    if let Some(install) = &scale.install {
        let _ = writeln!(out, "{}", install_line(install));
    }
    out.push_str(&targets_table(scale));
    out
}

/// `| figure | target | measured | verdict |` for the figures of issue 12,
/// then the other figures of the run (markdown).
pub(crate) fn targets_table(scale: &ScaleReport) -> String {
    let mut out = String::new();
    let last = scale.checkpoints.last();
    let retained = last.map_or(0, |last| last.retained_after);
    let _ = writeln!(out, "\n| figure (at {retained} retained) | target | measured | verdict |");
    let _ = writeln!(out, "|---|---|---|---|");
    let max_rss = last.and_then(|last| last.nodes.iter().filter_map(|node| node.rss_bytes).max());
    let _ = writeln!(
        out,
        "| RSS per node (largest) | ≤ 512 MiB at 1M | {} | {} |",
        mebibytes(max_rss),
        verdict(max_rss.map(|rss| rss as f64 <= RSS_TARGET_AT_1M_BYTES), retained, true)
    );
    let comparison = scale.comparison.as_ref();
    let _ = writeln!(
        out,
        "| lifecycles/s at N vs at {} (64 clients) | ≥ 0.90 | {} | {} |",
        comparison.map_or(0, |comparison| comparison.checkpoint_retained),
        comparison.map_or("-".to_string(), |comparison| {
            let rates: Vec<String> = scale
                .checkpoints
                .iter()
                .map(|checkpoint| format!("{:.0}", checkpoint.measurement.lifecycles_per_s))
                .collect();
            format!("{:.2} ({}/s)", comparison.throughput_ratio, rates.join(" → "))
        }),
        verdict(comparison.map(|comparison| comparison.throughput_ratio >= THROUGHPUT_RATIO_MIN), retained, true)
    );
    let builds = last.map(|last| &last.builds);
    let _ = writeln!(
        out,
        "| p99 while a snapshot builds vs steady p99 (64 clients) | ≤ 2× | {} | {} |",
        builds.map_or("-".to_string(), |builds| match (&builds.lifecycles_inside, &builds.lifecycles_outside) {
            (Some(inside), Some(outside)) => format!(
                "{} ({} ms inside {} builds vs {} ms outside)",
                builds.p99_ratio.map_or("-".to_string(), |ratio| format!("{ratio:.2}×")),
                ms(inside.p99_ms),
                builds.builds,
                ms(outside.p99_ms)
            ),
            (Some(_), None) => format!("no window without a build (building {:.0}%)", builds.building_share * 100.0),
            _ => "no build in the window".to_string(),
        }),
        verdict(builds.and_then(|builds| builds.p99_ratio).map(|ratio| ratio <= BUILD_P99_RATIO_MAX), retained, false)
    );
    let restart = scale.restart.as_ref();
    let _ = writeln!(
        out,
        "| follower restart: SIGKILL → serving | ≤ 5 s | {} | {} |",
        restart.map_or("-".to_string(), |restart| format!(
            "{:.2} s (caught up {:.2} s)",
            restart.serving_ms / 1e3,
            restart.caught_up_ms / 1e3
        )),
        verdict(restart.map(|restart| restart.serving_ms <= RESTART_SERVING_MAX_MS), retained, false)
    );
    let install = scale.install.as_ref();
    let _ = writeln!(
        out,
        "| snapshot install on a new node | ≥ 50 MB/s, memory bounded | {} | {} |",
        install.map_or("-".to_string(), |install| format!(
            "{} in {} = {}, installer peak RSS {}",
            megabytes(install.snapshot_bytes),
            install.install_s.map_or("-".to_string(), |seconds| format!("{seconds:.2} s")),
            install.install_mb_per_s.map_or("-".to_string(), |rate| format!("{rate:.1} MB/s")),
            mebibytes(install.peak_rss_bytes)
        )),
        verdict(
            install.and_then(|install| install.install_mb_per_s).map(|rate| rate >= INSTALL_MB_PER_S_MIN),
            retained,
            false
        )
    );
    let mean = |values: Vec<f64>| (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64);
    if let Some(last) = last {
        let memory = mean(last.per_execution.iter().filter_map(|per| per.memory_bytes).collect());
        let disk = mean(last.per_execution.iter().filter_map(|per| per.disk_bytes).collect());
        let peak = last.nodes.iter().filter_map(|node| node.peak_rss_bytes).max();
        let _ = writeln!(
            out,
            "| bytes per execution in memory (RSS growth / N, mean of nodes) | | {} | |",
            bytes_each(memory)
        );
        let _ =
            writeln!(out, "| bytes per execution on disk (data dir / N, mean of nodes) | | {} | |", bytes_each(disk));
        let _ = writeln!(out, "| peak RSS per node (VmHWM, largest) | | {} | |", mebibytes(peak));
    }
    match &scale.snapshot {
        Some(snapshot) if snapshot.bytes == 0 => {
            let _ = writeln!(
                out,
                "| leader's last snapshot build (a durable checkpoint of cold.redb, no file) | | {:.3} s, longest \
                 of {} {:.3} s | |",
                snapshot.build_s, snapshot.builds, snapshot.longest_build_s
            );
        }
        Some(snapshot) => {
            let _ = writeln!(
                out,
                "| leader's last snapshot: size, build time | | {}, {:.2} s ({:.0} MB/s) | |",
                megabytes(Some(snapshot.bytes)),
                snapshot.build_s,
                snapshot.build_mb_per_s
            );
        }
        None => {}
    }
    if let Some(install) = &scale.install {
        if let Some(sent) = install.sent_bytes {
            let _ = writeln!(
                out,
                "| snapshot sent to the new node (the leader's view of its checkpoint, written out) | | {}, \
                 written in {} | |",
                megabytes(Some(sent)),
                install.sent_write_s.map_or("-".to_string(), |seconds| format!("{seconds:.2} s"))
            );
        }
    }
    let _ = writeln!(
        out,
        "load average (1/5/15 min) at the last measurement: {}",
        load(last.and_then(|last| last.load_average))
    );
    out
}
