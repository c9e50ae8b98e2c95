//! What a person reads after a run: a plain-text summary table of the
//! checkers' verdicts and the run's figures ([`summary_table`]), and a
//! self-contained SVG timeline of throughput and latency with the fault
//! windows shaded ([`svg_timeline`]). Both are computed from the history
//! alone; the SVG is written by hand (no plotting dependency).

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::checker::{fault_name, operations, CheckReport};
use crate::history::{Entry, FaultKind, Op, Outcome, Phase};

/// The run's figures, computed from the history by [`run_stats`].
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct RunStats {
    /// Operations invoked.
    pub operations: u64,
    /// Operations that completed `ok`.
    pub ok: u64,
    /// Operations that completed `fail`.
    pub fail: u64,
    /// Operations whose outcome is unknown (`info`, including never completed).
    pub info: u64,
    /// Operations with no completion at all (counted in `info` too).
    pub never_completed: u64,
    /// Operations invoked, per operation kind (`approval_create`, ..., `worker_report`).
    pub by_op: BTreeMap<String, u64>,
    /// Nemesis starts really injected, per fault.
    pub faults_injected: BTreeMap<FaultKind, u64>,
    /// Nemesis events that could not be injected.
    pub faults_not_injected: u64,
    /// Late reports sent (`Op::WorkerReport { late: true }`).
    pub late_reports: u64,
    /// Late reports the cluster rejected (`fail`).
    pub late_rejected: u64,
    /// Late reports the cluster accepted (`ok`).
    pub late_accepted: u64,
    /// Late reports with an unknown outcome (`info`).
    pub late_unknown: u64,
    /// The largest leader-change count any node's final state reports.
    pub leader_changes: u64,
    /// Time of the last timed entry (ms since the run started).
    pub duration_ms: f64,
}

/// The time of the last timed entry (invoke, completion or nemesis event).
fn last_time_ms(history: &[Entry]) -> f64 {
    history
        .iter()
        .filter_map(|entry| match entry {
            Entry::Invoke(invoke) => Some(invoke.time_ms),
            Entry::Complete(complete) => Some(complete.time_ms),
            Entry::Nemesis(event) => Some(event.time_ms),
            _ => None,
        })
        .filter(|time| time.is_finite())
        .fold(0.0, f64::max)
}

/// Computes the run's figures from the history.
pub fn run_stats(history: &[Entry]) -> RunStats {
    let mut stats = RunStats { duration_ms: last_time_ms(history), ..RunStats::default() };
    for operation in operations(history) {
        stats.operations += 1;
        *stats.by_op.entry(operation.op.kind().to_string()).or_insert(0) += 1;
        match operation.outcome {
            Outcome::Ok => stats.ok += 1,
            Outcome::Fail => stats.fail += 1,
            Outcome::Info => stats.info += 1,
        }
        if operation.complete_ms.is_none() {
            stats.never_completed += 1;
        }
        if matches!(operation.op, Op::WorkerReport { late: true, .. }) {
            stats.late_reports += 1;
            match operation.outcome {
                Outcome::Ok => stats.late_accepted += 1,
                Outcome::Fail => stats.late_rejected += 1,
                Outcome::Info => stats.late_unknown += 1,
            }
        }
    }
    for entry in history {
        match entry {
            Entry::Nemesis(event) if !event.injected => stats.faults_not_injected += 1,
            Entry::Nemesis(event) if event.phase == Phase::Start => {
                *stats.faults_injected.entry(event.fault).or_insert(0) += 1;
            }
            Entry::Final(state) => stats.leader_changes = stats.leader_changes.max(state.leader_changes),
            _ => {}
        }
    }
    stats
}

/// The counters shown in the table for each checker, most telling first.
fn key_stats(name: &str) -> &'static [&'static str] {
    match name {
        "linearizable_approvals" => &["keys", "ops", "keys_invalid", "keys_unknown", "search_steps_max_per_key"],
        "at_most_one_consumption" => &["approvals_consumed", "ok_consumes", "approvals_multiply_consumed"],
        "one_final_result" => &["executions", "executions_final", "views"],
        "fencing" => &["reports_accepted", "reports_rejected", "late_rejected", "late_accepted"],
        "retry_discipline" => &["executions_judged", "executions_retried", "audit_starts"],
        "no_lost_writes" => &["write_checks", "lost_writes", "nodes_readable"],
        "liveness" => &["executions", "unfinished", "leader"],
        "coverage" => &["leader_changes", "late_reports", "not_injected"],
        _ => &[],
    }
}

/// Cuts a line to at most `limit` characters, marking the cut.
fn shorten(text: &str, limit: usize) -> String {
    if text.chars().count() <= limit {
        return text.to_string();
    }
    let mut short: String = text.chars().take(limit.saturating_sub(1)).collect();
    short.push('…');
    short
}

/// A plain-text table of the checkers (name, verdict, anomaly count, key
/// counters), the overall verdict, the run's figures (operations by outcome
/// and kind, faults by kind, leader changes, late reports, duration) and the
/// first anomalies of every checker that is not valid.
pub fn summary_table(report: &CheckReport, stats: &RunStats) -> String {
    let mut out = String::new();
    let name_width = report.results.iter().map(|result| result.name.len()).max().unwrap_or(0).max(7);
    let _ = writeln!(out, "{:<name_width$}  {:<7}  {:>9}  KEY STATS", "CHECKER", "VERDICT", "ANOMALIES");
    for result in &report.results {
        let mut shown: Vec<String> = key_stats(&result.name)
            .iter()
            .filter_map(|key| result.stats.get(*key).map(|value| format!("{key}={value}")))
            .collect();
        if shown.is_empty() {
            shown = result.stats.iter().take(5).map(|(key, value)| format!("{key}={value}")).collect();
        }
        let _ = writeln!(
            out,
            "{:<name_width$}  {:<7}  {:>9}  {}",
            result.name,
            result.verdict.as_str(),
            result.anomalies,
            shown.join(" ")
        );
    }
    let _ = writeln!(out, "{:<name_width$}  {}", "OVERALL", report.verdict.as_str().to_uppercase());
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "run: {} operations over {:.1} s: ok {}, fail {}, info {} (never completed {})",
        stats.operations,
        stats.duration_ms / 1000.0,
        stats.ok,
        stats.fail,
        stats.info,
        stats.never_completed
    );
    let by_op: Vec<String> = stats.by_op.iter().map(|(kind, count)| format!("{kind} {count}")).collect();
    let _ =
        writeln!(out, "operations by kind: {}", if by_op.is_empty() { "none".to_string() } else { by_op.join(", ") });
    let faults: Vec<String> =
        stats.faults_injected.iter().map(|(fault, count)| format!("{} {count}", fault_name(*fault))).collect();
    let _ = writeln!(
        out,
        "faults injected: {} (events not injected: {})",
        if faults.is_empty() { "none".to_string() } else { faults.join(", ") },
        stats.faults_not_injected
    );
    let _ = writeln!(out, "leader changes: {}", stats.leader_changes);
    let _ = writeln!(
        out,
        "late reports: {} sent: rejected {}, accepted {}, unknown {}",
        stats.late_reports, stats.late_rejected, stats.late_accepted, stats.late_unknown
    );
    for result in report.results.iter().filter(|result| !result.details.is_empty()) {
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "{} ({}, {} anomalies, first {}):",
            result.name,
            result.verdict.as_str(),
            result.anomalies,
            result.details.len()
        );
        for detail in &result.details {
            let _ = writeln!(out, "  - {}", shorten(detail, 600));
        }
    }
    out
}

/// One fault, from its start to its stop.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultWindow {
    /// Which fault.
    pub fault: FaultKind,
    /// The nodes it hit.
    pub nodes: Vec<u64>,
    /// When it started (ms since the run started).
    pub start_ms: f64,
    /// When it stopped; the end of the run when it never did.
    pub stop_ms: f64,
    /// Whether its start was really injected.
    pub injected: bool,
    /// Whether a stop was recorded.
    pub healed: bool,
}

/// Pairs every nemesis start with the next stop of the same fault on the
/// same nodes (first in, first out). A start never stopped lasts until the
/// run's last timed entry; a stop without a start is ignored.
pub fn fault_windows(history: &[Entry]) -> Vec<FaultWindow> {
    let end_ms = last_time_ms(history);
    let mut open: BTreeMap<(FaultKind, Vec<u64>), VecDeque<usize>> = BTreeMap::new();
    let mut windows: Vec<FaultWindow> = Vec::new();
    for entry in history {
        let Entry::Nemesis(event) = entry else { continue };
        let mut nodes = event.nodes.clone();
        nodes.sort_unstable();
        let key = (event.fault, nodes.clone());
        match event.phase {
            Phase::Start => {
                open.entry(key).or_default().push_back(windows.len());
                windows.push(FaultWindow {
                    fault: event.fault,
                    nodes,
                    start_ms: event.time_ms,
                    stop_ms: end_ms.max(event.time_ms),
                    injected: event.injected,
                    healed: false,
                });
            }
            Phase::Stop => {
                if let Some(index) = open.get_mut(&key).and_then(VecDeque::pop_front) {
                    windows[index].stop_ms = event.time_ms.max(windows[index].start_ms);
                    windows[index].healed = true;
                }
            }
        }
    }
    windows
}

/// The colour of a fault's shading.
fn fault_colour(fault: FaultKind) -> &'static str {
    match fault {
        FaultKind::KillLeader => "#d62728",
        FaultKind::KillFollower => "#ff7f0e",
        FaultKind::KillAll => "#8c564b",
        FaultKind::Pause => "#9467bd",
        FaultKind::PartitionLeader => "#2ca02c",
        FaultKind::PartitionFollower => "#17becf",
        FaultKind::PartitionBridge => "#bcbd22",
        FaultKind::PartitionOneWay => "#e377c2",
        FaultKind::PacketLoss => "#7f7f7f",
        FaultKind::WorkerStall => "#1f77b4",
    }
}

/// A ` stroke-dasharray="…"` attribute, or nothing for a solid line.
fn dash_attribute(dash: &str) -> String {
    if dash.is_empty() {
        String::new()
    } else {
        format!(r#" stroke-dasharray="{dash}""#)
    }
}

/// Escapes text for XML.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// The smallest of 1, 2, 5 × 10^k that is at least `value` (1 for non-positive values).
fn nice_ceiling(value: f64) -> f64 {
    if value <= 1.0 {
        return 1.0;
    }
    let magnitude = 10f64.powf(value.log10().floor());
    [1.0, 2.0, 5.0, 10.0].iter().map(|factor| factor * magnitude).find(|nice| *nice >= value).unwrap_or(value)
}

/// The p-quantile (0..=1) of sorted values.
fn quantile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

/// Runs of consecutive buckets with a value, as polyline point lists.
fn segments(points: &[(f64, Option<f64>)]) -> Vec<String> {
    let mut segments = Vec::new();
    let mut current: Vec<String> = Vec::new();
    for (x, y) in points {
        match y {
            Some(y) => current.push(format!("{x:.1},{y:.1}")),
            None if !current.is_empty() => segments.push(std::mem::take(&mut current).join(" ")),
            None => {}
        }
    }
    if !current.is_empty() {
        segments.push(current.join(" "));
    }
    segments
}

/// A self-contained SVG timeline of the run, `width` × `height` pixels:
///
/// - top panel: `ok` operations per second (1 s buckets by completion time)
///   and, dashed, `fail`/`info` completions per second, on a linear axis;
/// - bottom panel: the p50 and maximum latency of the `ok` operations that
///   completed in each second, in ms on a logarithmic axis;
/// - every fault window (nemesis start → stop, see [`fault_windows`]) shaded
///   across both panels in its fault's colour, one `<rect
///   class="fault-window">` each with a `<title>` tooltip, outlined dashed
///   when it was not injected;
/// - a time axis in seconds and a legend of the faults present and the lines.
pub fn svg_timeline(history: &[Entry], width: u32, height: u32) -> String {
    let width = f64::from(width.max(320));
    let height = f64::from(height.max(240));
    let operations = operations(history);
    let buckets = ((last_time_ms(history) / 1000.0).ceil() as usize).max(1);
    let span_ms = buckets as f64 * 1000.0;
    let bucket_of = |time_ms: f64| ((time_ms.max(0.0) / 1000.0).floor() as usize).min(buckets - 1);
    let mut ok_counts = vec![0u64; buckets];
    let mut other_counts = vec![0u64; buckets];
    let mut latencies: Vec<Vec<f64>> = vec![Vec::new(); buckets];
    for operation in &operations {
        let Some(complete_ms) = operation.complete_ms else { continue };
        let bucket = bucket_of(complete_ms);
        if operation.is_ok() {
            ok_counts[bucket] += 1;
            latencies[bucket].push(operation.latency_ms().unwrap_or(0.0));
        } else {
            other_counts[bucket] += 1;
        }
    }
    for bucket in &mut latencies {
        bucket.sort_by(f64::total_cmp);
    }
    let windows = fault_windows(history);

    // Legend entries: the faults present, then the lines.
    let faults_present: Vec<FaultKind> =
        FaultKind::ALL.iter().copied().filter(|fault| windows.iter().any(|window| window.fault == *fault)).collect();
    let lines = [
        ("ok ops/s", "#1f3b73", ""),
        ("fail+info ops/s", "#888888", "4 3"),
        ("p50 latency", "#2a7f2a", ""),
        ("max latency", "#c0392b", "4 3"),
    ];
    let legend_items = faults_present.len() + lines.len();
    let (left, right, top, gap) = (70.0, 20.0, 36.0, 40.0);
    let item_width = 160.0;
    let per_row = (((width - left - right) / item_width).floor() as usize).max(1);
    let legend_rows = legend_items.div_ceil(per_row);
    let bottom = 58.0 + legend_rows as f64 * 18.0;
    let panel_height = ((height - top - bottom - gap) / 2.0).max(40.0);
    let plot_width = width - left - right;
    let x_of = |time_ms: f64| left + (time_ms / span_ms).clamp(0.0, 1.0) * plot_width;
    let throughput_top = top;
    let throughput_bottom = top + panel_height;
    let latency_top = throughput_bottom + gap;
    let latency_bottom = latency_top + panel_height;

    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="sans-serif" font-size="11">"#
    );
    let _ =
        writeln!(svg, r#"<rect class="background" x="0" y="0" width="{width:.0}" height="{height:.0}" fill="white"/>"#);
    let _ = writeln!(
        svg,
        r#"<text x="{left:.1}" y="20" font-size="13" font-weight="bold">gavel-lab chaos run: {} operations over {:.1} s; shaded: faults</text>"#,
        operations.len(),
        last_time_ms(history) / 1000.0
    );

    // Fault windows, under everything else.
    let _ = writeln!(svg, r#"<g class="fault-windows">"#);
    for window in &windows {
        let x = x_of(window.start_ms);
        let shaded_width = (x_of(window.stop_ms) - x).max(1.5);
        let dash = if window.injected { "" } else { r#" stroke-dasharray="3 2""# };
        let title = format!(
            "{} on nodes {:?}: {:.1}–{:.1} s{}{}",
            fault_name(window.fault),
            window.nodes,
            window.start_ms / 1000.0,
            window.stop_ms / 1000.0,
            if window.healed { "" } else { " (never stopped)" },
            if window.injected { "" } else { " (NOT injected)" }
        );
        let _ = writeln!(
            svg,
            r#"<rect class="fault-window" x="{x:.1}" y="{throughput_top:.1}" width="{shaded_width:.1}" height="{:.1}" fill="{colour}" fill-opacity="0.22" stroke="{colour}" stroke-opacity="0.5"{dash}><title>{}</title></rect>"#,
            latency_bottom - throughput_top,
            escape(&title),
            colour = fault_colour(window.fault),
        );
    }
    let _ = writeln!(svg, "</g>");

    // Panel frames.
    for (panel_top, panel_bottom) in [(throughput_top, throughput_bottom), (latency_top, latency_bottom)] {
        let _ = writeln!(
            svg,
            r##"<rect class="panel" x="{left:.1}" y="{panel_top:.1}" width="{plot_width:.1}" height="{:.1}" fill="none" stroke="#444"/>"##,
            panel_bottom - panel_top
        );
    }

    // Time axis: ticks on both panels, labels under the latency panel.
    let seconds = buckets as f64;
    let step = [1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0]
        .into_iter()
        .find(|step| seconds / step <= 10.0)
        .unwrap_or_else(|| nice_ceiling(seconds / 10.0));
    let mut tick = 0.0;
    while tick <= seconds + 1e-9 {
        let x = x_of(tick * 1000.0);
        let _ = writeln!(
            svg,
            r##"<line x1="{x:.1}" y1="{throughput_top:.1}" x2="{x:.1}" y2="{throughput_bottom:.1}" stroke="#ddd"/><line x1="{x:.1}" y1="{latency_top:.1}" x2="{x:.1}" y2="{latency_bottom:.1}" stroke="#ddd"/>"##
        );
        let _ =
            writeln!(svg, r#"<text x="{x:.1}" y="{:.1}" text-anchor="middle">{tick:.0}</text>"#, latency_bottom + 14.0);
        tick += step;
    }
    let _ = writeln!(
        svg,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">time (s)</text>"#,
        left + plot_width / 2.0,
        latency_bottom + 30.0
    );

    // Throughput panel.
    let most = ok_counts.iter().chain(&other_counts).copied().max().unwrap_or(0);
    let ceiling = nice_ceiling(most as f64);
    let y_count = |count: f64| throughput_bottom - (count / ceiling).clamp(0.0, 1.0) * panel_height;
    for fraction in [0.0, 0.5, 1.0] {
        let y = y_count(ceiling * fraction);
        let _ = writeln!(
            svg,
            r##"<line x1="{:.1}" y1="{y:.1}" x2="{left:.1}" y2="{y:.1}" stroke="#444"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            left - 4.0,
            left - 6.0,
            y + 4.0,
            ceiling * fraction
        );
    }
    let _ = writeln!(
        svg,
        r#"<text transform="translate(16 {:.1}) rotate(-90)" text-anchor="middle">ops / s</text>"#,
        (throughput_top + throughput_bottom) / 2.0
    );
    let center = |bucket: usize| x_of((bucket as f64 + 0.5) * 1000.0);
    for (counts, (label, colour, dash)) in [(&ok_counts, lines[0]), (&other_counts, lines[1])] {
        let points: Vec<(f64, Option<f64>)> =
            counts.iter().enumerate().map(|(bucket, count)| (center(bucket), Some(y_count(*count as f64)))).collect();
        for segment in segments(&points) {
            let _ = writeln!(
                svg,
                r#"<polyline class="series" data-series="{label}" points="{segment}" fill="none" stroke="{colour}" stroke-width="1.5"{}/>"#,
                dash_attribute(dash)
            );
        }
    }

    // Latency panel, logarithmic.
    let observed: Vec<f64> = latencies.iter().flatten().copied().filter(|latency| *latency > 0.0).collect();
    let lowest = observed.iter().copied().fold(f64::INFINITY, f64::min);
    let highest = observed.iter().copied().fold(0.0, f64::max);
    let low_decade = if lowest.is_finite() { lowest.max(0.1).log10().floor() } else { 0.0 };
    // One decade of headroom above the largest value's own decade.
    let high_decade = (highest.max(1.0).log10().floor() + 1.0).max(low_decade + 1.0);
    let y_latency = |latency_ms: f64| {
        let position = (latency_ms.max(10f64.powf(low_decade)).log10() - low_decade) / (high_decade - low_decade);
        latency_bottom - position.clamp(0.0, 1.0) * panel_height
    };
    let mut decade = low_decade;
    while decade <= high_decade + 1e-9 {
        let value = 10f64.powf(decade);
        let y = y_latency(value);
        let label = if value >= 1000.0 { format!("{} s", value / 1000.0) } else { format!("{value} ms") };
        let _ = writeln!(
            svg,
            r##"<line x1="{:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{label}</text>"##,
            left,
            left + plot_width,
            left - 6.0,
            y + 4.0
        );
        decade += 1.0;
    }
    let _ = writeln!(
        svg,
        r#"<text transform="translate(16 {:.1}) rotate(-90)" text-anchor="middle">latency (ms, log)</text>"#,
        (latency_top + latency_bottom) / 2.0
    );
    for (quantile_p, (label, colour, dash)) in [(0.5, lines[2]), (1.0, lines[3])] {
        let points: Vec<(f64, Option<f64>)> = latencies
            .iter()
            .enumerate()
            .map(|(bucket, values)| {
                (center(bucket), (!values.is_empty()).then(|| y_latency(quantile(values, quantile_p))))
            })
            .collect();
        for segment in segments(&points) {
            let _ = writeln!(
                svg,
                r#"<polyline class="series" data-series="{label}" points="{segment}" fill="none" stroke="{colour}" stroke-width="1.5"{}/>"#,
                dash_attribute(dash)
            );
        }
    }

    // Legend.
    let legend_top = latency_bottom + 54.0;
    let _ = writeln!(svg, r#"<g class="legend">"#);
    let position =
        |item: usize| (left + (item % per_row) as f64 * item_width, legend_top + (item / per_row) as f64 * 18.0);
    for (item, fault) in faults_present.iter().enumerate() {
        let (x, y) = position(item);
        let _ = writeln!(
            svg,
            r#"<rect class="legend-swatch" x="{x:.1}" y="{:.1}" width="14" height="10" fill="{colour}" fill-opacity="0.35" stroke="{colour}"/><text x="{:.1}" y="{y:.1}">{}</text>"#,
            y - 9.0,
            x + 18.0,
            fault_name(*fault),
            colour = fault_colour(*fault)
        );
    }
    for (offset, (label, colour, dash)) in lines.iter().enumerate() {
        let (x, y) = position(faults_present.len() + offset);
        let _ = writeln!(
            svg,
            r#"<line x1="{x:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{colour}" stroke-width="2"{}/><text x="{:.1}" y="{y:.1}">{label}</text>"#,
            y - 4.0,
            x + 14.0,
            y - 4.0,
            dash_attribute(dash),
            x + 18.0
        );
    }
    let _ = writeln!(svg, "</g>");
    svg.push_str("</svg>\n");
    svg
}
