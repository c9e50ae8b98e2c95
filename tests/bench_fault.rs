//! `gavel-lab bench --fault`: two fault modes, briefly, against a local secure
//! three-node cluster of the real binary: a follower paused (SIGSTOP) and
//! the leader SIGKILLed. The other modes share their plumbing (the fault
//! report, the heal, the bins) with these; their faults are what the
//! simulation's seeds cover in depth (a crashed follower, a partition), and
//! `tests/chaos.rs` partitions real processes in network namespaces. They
//! ran here too until the suite outgrew its budget (14 s each). Each run must inject its fault
//! into the right node, heal it, see the three nodes converge afterwards,
//! lose no lifecycle (the SDK clients follow the leader and retry) and print
//! the per-second bins and the summary line.
//!
//! The availability targets themselves (≥ 80 % of the steady rate in every
//! bin through a follower fault, back to ≥ 80 % within 2 s after a leader
//! kill) are printed but not asserted: on the loaded two-core machine these
//! tests run on (a debug build, other builds next to it) even the bins
//! before any fault vary by ±50 % and a second with no lifecycle at all was
//! seen without a fault, so a bin-by-bin threshold would fail by chance.
//! What is asserted holds on any machine: no lifecycle fails, the fault hit
//! the intended role, the cluster made progress after the fault and
//! converged after the heal, and the figures add up and are printed.
//! docs/performance.md quotes the measured bins.

mod support;

use std::process::Command;
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use serde_json::Value;

/// The runs share two cores: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// What one `gavel-lab bench --fault` run printed.
struct Run {
    code: i32,
    /// The fault report (the JSON line before the summary).
    fault: Value,
    summary: Value,
    /// The human-readable tables (standard error with `--json`).
    tables: String,
}

fn bench_fault(fault: &str) -> Run {
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    let started = Instant::now();
    let output = Command::new(support::lab_binary())
        .args(["bench", "--json", "--clients=8", "--warmup=2s", "--duration=12s", "--fault-hold=3s"])
        .arg(format!("--fault={fault}"))
        .env("GAVEL_LOG", "warn")
        .output()
        .expect("run gavel-lab bench");
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    let tables = String::from_utf8_lossy(&output.stderr).to_string();
    eprintln!("gavel-lab bench --fault={fault} took {:.0?}\n{tables}", started.elapsed());
    let lines: Vec<Value> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|error| panic!("not JSON ({error}): {line}")))
        .collect();
    assert_eq!(lines.len(), 2, "the fault report and the summary: {stdout}");
    Run {
        code: output.status.code().unwrap_or(-1),
        fault: lines[0].clone(),
        summary: lines[1]["summary"].clone(),
        tables,
    }
}

/// Checks what every mode must show, returns the report.
fn check(run: &Run, fault: &str, hits_leader: bool) -> Value {
    let report = &run.fault;
    assert_eq!(run.code, 0, "exit status; report {report:#}");
    assert_eq!(run.summary["ok"], true, "{:#}", run.summary);
    assert_eq!(run.summary["tls"], true, "secure by default");
    assert_eq!(report["fault"], fault);
    assert_eq!(report["ok"], true, "{report:#}");
    let injection = &report["injection"];
    assert!(injection["failure"].is_null(), "{injection:#}");
    assert!((1..=3).contains(&injection["node"].as_u64().unwrap_or(0)), "{injection:#}");
    assert_eq!(injection["was_leader"], hits_leader, "the fault hit the intended role: {injection:#}");
    let at = injection["at_s"].as_f64().expect("fault time");
    let healed = injection["healed_s"].as_f64().expect("heal time");
    assert!((5.9..6.5).contains(&at), "the fault lands in the middle of the 12 s window: {at}");
    assert!(healed - at >= 2.9, "held for the 3 s hold: {at} .. {healed}");
    assert!(report["converged_index"].as_u64().is_some_and(|index| index > 0), "converged after the heal");
    assert_eq!(report["config"]["errors"], 0, "no failed lifecycle: {:#}", report["config"]["error_samples"]);
    let bins = report["bins"].as_array().expect("bins");
    assert_eq!(bins.len(), 12, "one bin per second of the window");
    assert!(report["steady_per_s"].as_f64().is_some_and(|steady| steady > 0.0), "{report:#}");
    let total: u64 = bins.iter().filter_map(Value::as_u64).sum();
    assert_eq!(total, report["config"]["lifecycles"].as_u64().expect("lifecycles"), "the bins add up");
    assert!(run.tables.contains("ok lifecycles"), "the bins are printed");
    assert!(run.tables.contains(&format!("fault summary: {fault} steady")), "the summary line is printed");
    assert!(run.tables.contains("% of steady"), "the summary gives the min bin as a share of steady");
    report.clone()
}

/// Lifecycles that finished in the bins that end after the heal: the
/// cluster went on.
fn after_heal(report: &Value) -> u64 {
    let healed = report["injection"]["healed_s"].as_f64().unwrap_or(f64::MAX);
    let bins = report["bins"].as_array().expect("bins");
    let ends_after_heal = |second: usize| (second + 1) as f64 > healed;
    bins.iter().enumerate().filter(|(second, _)| ends_after_heal(*second)).filter_map(|(_, count)| count.as_u64()).sum()
}

#[test]
fn pause_follower_loses_nothing() {
    let run = bench_fault("pause-follower");
    let report = check(&run, "pause-follower", false);
    assert!(after_heal(&report) > 0, "progress after the follower was resumed: {report:#}");
}

#[test]
fn kill_leader_elects_a_new_leader_and_goes_on() {
    let run = bench_fault("kill-leader");
    let report = check(&run, "kill-leader", true);
    let injection = &report["injection"];
    let new_leader = injection["new_leader"].as_u64().expect("a new leader was elected during the hold");
    assert_ne!(new_leader, injection["node"].as_u64().unwrap_or(0));
    assert!(after_heal(&report) > 0, "progress after the old leader came back: {report:#}");
    assert!(run.tables.contains("after the kill"), "the recovery time is printed");
}
