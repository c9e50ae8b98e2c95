//! Fault mode (`--fault`): availability through one fault, measured where
//! users feel it.
//!
//! Closed-loop SDK clients (which follow the leader and retry) run the
//! workload on the local cluster; in the middle of the measured window the
//! bench injects one fault into one node, holds it for `--fault-hold`, and
//! heals it:
//!
//! - `kill-follower`, `kill-leader`: SIGKILL, then start the node again on
//!   its data;
//! - `pause-follower`: SIGSTOP, then SIGCONT;
//! - `partition-follower`: the node's namespace drops every packet from the
//!   other nodes (iptables, as `gavel-lab chaos` does with
//!   [`gavel_chaos::net::Net::partition`]), then the rules are flushed. The
//!   clients still reach every node: only node-to-node traffic is cut.
//!
//! It reports the ok lifecycles finished in each one-second bin of the
//! window, the steady rate (mean of the full bins before the fault), the
//! lowest bin from the fault on as a percentage of it and, for a leader
//! kill, how long after the kill the rate is back at ≥ 80 % of the steady
//! rate and stays there until the heal ([`recovery`]); the lowest bin from
//! the heal on is reported apart (a restarted node's catch-up, an election
//! a returning node forces). The fault is injected at a whole second of
//! the window (the middle, rounded down), so the bins after it are the
//! first, second, ... second after the fault. The targets (issue 14): through a
//! follower fault every bin stays at ≥ 80 %; through a leader kill the rate
//! is back to ≥ 80 % within 2 s. A missed target is reported, not an error;
//! a failed lifecycle, a fault that could not be injected or a cluster that
//! does not converge after the heal makes the outcome not ok.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::cluster::{Dial, LocalCluster, WAIT};
use crate::workload::{self, ConfigReport, LoadSpec};
use crate::{BenchError, Printer};
use gavel_testkit::Converge as _;

/// Share of the steady rate the targets hold the throughput to.
pub const TARGET_SHARE: f64 = 0.8;
/// A leader kill's target: back to [`TARGET_SHARE`] within this long.
pub const LEADER_RECOVERY_TARGET: Duration = Duration::from_secs(2);
/// Pause between two looks for a new leader after a leader kill.
const ELECTION_POLL: Duration = Duration::from_millis(50);
/// How long before the fault the leader is looked up (so that the lookup
/// does not delay the fault).
const LEADER_LOOKUP_LEAD: Duration = Duration::from_secs(1);
/// Shortest measured window: two full seconds before the fault and two after.
pub const MIN_WINDOW: Duration = Duration::from_secs(4);
/// How long a new leader is looked for after a leader kill.
const ELECTION_WATCH: Duration = Duration::from_secs(10);

/// The fault `--fault` injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fault {
    /// SIGKILL a follower, start it again after the hold.
    KillFollower,
    /// Cut a follower off from the other nodes (iptables DROP in network namespaces), heal after the hold.
    PartitionFollower,
    /// SIGSTOP a follower, SIGCONT after the hold.
    PauseFollower,
    /// SIGKILL the leader, start it again after the hold.
    KillLeader,
}

impl Fault {
    /// The fault's name as given on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Fault::KillFollower => "kill-follower",
            Fault::PartitionFollower => "partition-follower",
            Fault::PauseFollower => "pause-follower",
            Fault::KillLeader => "kill-leader",
        }
    }

    /// Whether the nodes must run in network namespaces.
    pub fn needs_namespaces(self) -> bool {
        self == Fault::PartitionFollower
    }

    fn hits_leader(self) -> bool {
        self == Fault::KillLeader
    }
}

/// One fault run.
#[derive(Debug, Clone)]
pub(crate) struct FaultSpec {
    pub fault: Fault,
    pub load: LoadSpec,
    pub hold: Duration,
}

/// What was done to the cluster, with offsets from the measured window's start.
#[derive(Debug, Clone, Serialize)]
pub struct Injection {
    /// The node the fault hit.
    pub node: u64,
    /// Whether it led when the fault was injected.
    pub was_leader: bool,
    /// When the fault was injected.
    pub at_s: f64,
    /// When it was healed (node started again, resumed, rules flushed).
    pub healed_s: f64,
    /// After a leader kill: the new leader and how long after the kill the
    /// survivors' `Status` first named it.
    pub new_leader: Option<u64>,
    /// See `new_leader`.
    pub election_s: Option<f64>,
    /// What failed, if the fault could not be injected or healed.
    pub failure: Option<String>,
}

/// The figures of one fault run.
#[derive(Debug, Clone, Serialize)]
pub struct FaultReport {
    /// `kill-follower`, `partition-follower`, `pause-follower` or `kill-leader`.
    pub fault: Fault,
    /// How long the fault was held.
    pub hold_s: f64,
    /// What was done.
    pub injection: Injection,
    /// Ok lifecycles finished in each one-second bin of the measured window.
    pub bins: Vec<u64>,
    /// Mean of the full bins before the fault's bin, lifecycles per second.
    pub steady_per_s: f64,
    /// Lowest bin from the fault's bin to the end.
    pub min_bin: u64,
    /// `min_bin` as a percentage of `steady_per_s`.
    pub min_bin_pct: f64,
    /// Seconds from the fault to the start of the first bin from which every
    /// bin until the heal's bin holds ≥ 80 % of the steady rate (see
    /// [`recovery`]); `None` when none does.
    pub recovery_s: Option<f64>,
    /// Lowest bin from the heal's bin to the end, as a percentage of
    /// `steady_per_s` (the heal's own cost: a restart's catch-up, an
    /// election a returning node forces); `None` when the heal came in the
    /// last bin or later.
    pub after_heal_min_pct: Option<f64>,
    /// Longest time after the fault with no ok lifecycle finishing.
    pub longest_gap_s: f64,
    /// The target this fault is held to, in words.
    pub target: String,
    /// Whether the figures meet it.
    pub meets_target: bool,
    /// Applied index all three nodes agreed on after the heal.
    pub converged_index: Option<u64>,
    /// The load's own figures (throughput, latency, errors).
    pub config: ConfigReport,
    /// No failed lifecycle, the fault was injected and healed, the nodes converged.
    pub ok: bool,
}

/// Runs one fault on `local`.
pub(crate) async fn run(
    spec: &FaultSpec,
    local: &LocalCluster,
    dial: &Dial,
    tag: &str,
    printer: &mut Printer<'_>,
) -> Result<FaultReport, BenchError> {
    let load = &spec.load;
    if load.duration < MIN_WINDOW {
        return Err(BenchError::Invalid(format!(
            "--fault needs a --duration of at least {MIN_WINDOW:?} (steady seconds before the fault and after it)"
        )));
    }
    let endpoints = local.cluster.addrs();
    let inject_at = inject_second(load.duration);
    printer.human(&format!(
        "fault mode: {} clients ({}), {:.1} s warmup, {:.1} s measured, {} at {:.1} s held {:.1} s",
        load.clients,
        load.workload.name(),
        load.warmup.as_secs_f64(),
        load.duration.as_secs_f64(),
        spec.fault.name(),
        inject_at.as_secs_f64(),
        spec.hold.as_secs_f64()
    ))?;
    let measured = workload::run_disrupted(dial, &endpoints, load, tag, |window_start| {
        inject(local, spec.fault, spec.hold, window_start, window_start + inject_at)
    })
    .await?;
    let injection = measured.disruption;
    let converged = local.cluster.converge(WAIT).await;
    let report =
        judge(spec, injection, &measured.finished, measured.report, converged.as_ref().ok().map(|c| c.applied_index));
    printer.human(&fault_table(&report))?;
    if let Err(error) = converged {
        printer.human(&format!("  the nodes did not converge after the heal: {error}"))?;
    }
    Ok(report)
}

/// When the fault is injected: the middle of the window, rounded down to a
/// whole second.
fn inject_second(duration: Duration) -> Duration {
    Duration::from_secs(duration.as_secs() / 2)
}

/// Injects `fault` at `at`, holds it for `hold`, heals it.
async fn inject(local: &LocalCluster, fault: Fault, hold: Duration, window_start: Instant, at: Instant) -> Injection {
    let lookup = at.checked_sub(LEADER_LOOKUP_LEAD).unwrap_or(at).max(window_start);
    tokio::time::sleep_until(tokio::time::Instant::from_std(lookup)).await;
    let cluster = &local.cluster;
    let leader = cluster.leader().await;
    tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await;
    let offset = |instant: Instant| instant.saturating_duration_since(window_start).as_secs_f64();
    let target = if fault.hits_leader() {
        leader
    } else {
        // The lowest id that does not lead.
        cluster.ids().into_iter().find(|id| Some(*id) != leader && leader.is_some())
    };
    let mut injection = Injection {
        node: target.unwrap_or(0),
        was_leader: target.is_some() && target == leader,
        at_s: offset(Instant::now()),
        healed_s: 0.0,
        new_leader: None,
        election_s: None,
        failure: None,
    };
    let Some(node) = target else {
        injection.failure = Some("no leader was known when the fault was due".to_string());
        return injection;
    };
    let injected_at = Instant::now();
    let applied = match fault {
        Fault::KillFollower | Fault::KillLeader => cluster.kill(node).map(|_| ()).map_err(|error| error.to_string()),
        Fault::PauseFollower => cluster.pause(node).map_err(|error| error.to_string()),
        Fault::PartitionFollower => match &local.net {
            Some(net) => net.partition(&[vec![node]]).map(|_| ()).map_err(|error| error.to_string()),
            None => Err("the nodes do not run in network namespaces".to_string()),
        },
    };
    if let Err(error) = applied {
        injection.failure = Some(format!("injecting {} into node {node}: {error}", fault.name()));
        return injection;
    }
    let heal_at = injected_at + hold;
    if fault.hits_leader() {
        let watch_until = injected_at + ELECTION_WATCH.min(hold.max(ELECTION_POLL));
        while Instant::now() < watch_until {
            if let Some(new) = cluster.leader().await.filter(|new| *new != node) {
                injection.new_leader = Some(new);
                injection.election_s = Some(injected_at.elapsed().as_secs_f64());
                break;
            }
            tokio::time::sleep(ELECTION_POLL).await;
        }
    }
    tokio::time::sleep_until(tokio::time::Instant::from_std(heal_at)).await;
    let healed = match fault {
        Fault::KillFollower | Fault::KillLeader => {
            cluster.start_node(node).map(|_| ()).map_err(|error| error.to_string())
        }
        Fault::PauseFollower => cluster.resume(node).map_err(|error| error.to_string()),
        Fault::PartitionFollower => match &local.net {
            Some(net) => net.heal().map(|_| ()).map_err(|error| error.to_string()),
            None => Ok(()),
        },
    };
    injection.healed_s = offset(Instant::now());
    if let Err(error) = healed {
        injection.failure = Some(format!("healing {} of node {node}: {error}", fault.name()));
    }
    injection
}

/// Ok lifecycles per one-second bin: `bins[i]` counts the finishing times
/// in `[i s, (i + 1) s)`; only the `seconds` full bins of the window.
pub fn bins(finished: &[Duration], seconds: u64) -> Vec<u64> {
    let mut bins = vec![0u64; seconds as usize];
    for at in finished {
        if let Some(bin) = bins.get_mut(at.as_secs() as usize) {
            *bin += 1;
        }
    }
    bins
}

/// How long after the fault (at `fault_s` into the window) the rate is back
/// while the fault lasts: from the fault to the start of the first bin at or
/// after the fault's bin from which every bin before `until_bin` (the heal's
/// bin, which a restarting node disturbs on its own) holds at least `share
/// × steady` (0 when the rate never fell below it); `None` when no bin
/// before `until_bin` does. One-second resolution: "within 2 s" means the
/// bins from the third second after the fault until the heal are all at
/// the share.
pub fn recovery(bins: &[u64], fault_s: f64, until_bin: usize, steady: f64, share: f64) -> Option<f64> {
    let needed = share * steady;
    let fault_bin = fault_s.max(0.0) as usize;
    let until = until_bin.min(bins.len());
    let back = (fault_bin..until).find(|bin| bins[*bin..until].iter().all(|count| *count as f64 >= needed))?;
    Some((back as f64 - fault_s).max(0.0))
}

/// The longest stretch after `fault` (until `end`) with no lifecycle finishing.
pub fn longest_gap(finished: &[Duration], fault: Duration, end: Duration) -> Duration {
    let mut previous = fault;
    let mut longest = Duration::ZERO;
    for at in finished.iter().filter(|at| **at >= fault && **at < end) {
        longest = longest.max(*at - previous);
        previous = *at;
    }
    longest.max(end.saturating_sub(previous))
}

fn judge(
    spec: &FaultSpec,
    injection: Injection,
    finished: &[Duration],
    config: ConfigReport,
    converged_index: Option<u64>,
) -> FaultReport {
    let seconds = spec.load.duration.as_secs();
    let bins = bins(finished, seconds);
    let fault_at = Duration::from_secs_f64(injection.at_s);
    let fault_bin = (fault_at.as_secs() as usize).min(bins.len());
    let before = &bins[..fault_bin];
    let steady = if before.is_empty() { 0.0 } else { before.iter().sum::<u64>() as f64 / before.len() as f64 };
    let min_bin = bins[fault_bin..].iter().copied().min().unwrap_or(0);
    let pct = |value: f64| if steady > 0.0 { 100.0 * value / steady } else { 0.0 };
    let end = Duration::from_secs(seconds);
    let healed_bin = (injection.healed_s.max(0.0) as usize).min(bins.len());
    let recovery_s = recovery(&bins, injection.at_s, healed_bin, steady, TARGET_SHARE);
    let after_heal_min = bins[healed_bin..].iter().copied().min();
    let (target, meets_target) = if spec.fault.hits_leader() {
        (
            format!("back to >= {:.0}% within {:?}", TARGET_SHARE * 100.0, LEADER_RECOVERY_TARGET),
            recovery_s.is_some_and(|recovery| recovery <= LEADER_RECOVERY_TARGET.as_secs_f64()),
        )
    } else {
        (format!(">= {:.0}% in every bin", TARGET_SHARE * 100.0), pct(min_bin as f64) >= TARGET_SHARE * 100.0)
    };
    let ok = config.ok && injection.failure.is_none() && converged_index.is_some() && !before.is_empty();
    FaultReport {
        fault: spec.fault,
        hold_s: spec.hold.as_secs_f64(),
        longest_gap_s: longest_gap(finished, fault_at, end).as_secs_f64(),
        injection,
        steady_per_s: steady,
        min_bin,
        min_bin_pct: pct(min_bin as f64),
        after_heal_min_pct: after_heal_min.map(|min| pct(min as f64)),
        recovery_s,
        bins,
        target,
        meets_target,
        converged_index,
        config,
        ok,
    }
}

/// The human-readable bins and summary line of a fault run.
pub(crate) fn fault_table(report: &FaultReport) -> String {
    let mut out = String::new();
    let injection = &report.injection;
    let role = if injection.was_leader { "leader" } else { "follower" };
    let _ = writeln!(
        out,
        "== fault {} | node {} ({role}) at {:.2} s, healed at {:.2} s | {} clients, {} lifecycles, {} errors, {} retries ==",
        report.fault.name(),
        injection.node,
        injection.at_s,
        injection.healed_s,
        report.config.clients,
        report.config.lifecycles,
        report.config.errors,
        report.config.retries
    );
    if let (Some(leader), Some(election)) = (injection.new_leader, injection.election_s) {
        let _ = writeln!(out, "  new leader node {leader}, named by Status {election:.2} s after the kill");
    }
    if let Some(failure) = &injection.failure {
        let _ = writeln!(out, "  FAULT FAILED: {failure}");
    }
    let _ = writeln!(out, "  {:>6}  {:>14}  {:>9}", "second", "ok lifecycles", "of steady");
    let fault_bin = injection.at_s as usize;
    let healed_bin = injection.healed_s as usize;
    for (second, count) in report.bins.iter().enumerate() {
        let mark = match (second == fault_bin, second == healed_bin) {
            (true, true) => "  <- fault, healed",
            (true, false) => "  <- fault",
            (false, true) => "  <- healed",
            _ => "",
        };
        let share = if report.steady_per_s > 0.0 { 100.0 * *count as f64 / report.steady_per_s } else { 0.0 };
        let _ = writeln!(out, "  {second:>6}  {count:>14}  {share:>8.0}%{mark}");
    }
    for sample in &report.config.error_samples {
        let _ = writeln!(out, "  error: {sample}");
    }
    let recovery = match (report.fault.hits_leader(), report.recovery_s) {
        (false, _) => String::new(),
        (true, Some(recovery)) => format!("; back to >= 80% {recovery:.2} s after the kill"),
        (true, None) => "; not back to >= 80% before the heal".to_string(),
    };
    let after_heal = report.after_heal_min_pct.map_or(String::new(), |pct| format!("; after the heal min {pct:.0}%"));
    let _ = write!(
        out,
        "fault summary: {} steady {:.1} lifecycles/s before the fault; min bin {} = {:.0}% of steady{recovery}\
         {after_heal}; longest gap {:.2} s; target {}: {}",
        report.fault.name(),
        report.steady_per_s,
        report.min_bin,
        report.min_bin_pct,
        report.longest_gap_s,
        report.target,
        if report.meets_target { "met" } else { "MISSED" }
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(values: &[u64]) -> Vec<Duration> {
        values.iter().map(|value| Duration::from_millis(*value)).collect()
    }

    #[test]
    fn bins_count_full_seconds_only() {
        assert_eq!(bins(&ms(&[0, 999, 1000, 2500, 2999, 3000]), 3), vec![2, 1, 2]);
        assert_eq!(bins(&[], 2), vec![0, 0]);
    }

    #[test]
    fn recovery_is_the_first_bin_from_which_the_rate_holds_until_the_heal() {
        // Steady 10/s; the fault at 4.0 s, healed at 8.0 s; 0, 5, then back.
        let bins = [10, 10, 10, 10, 0, 5, 9, 10, 3, 10];
        assert_eq!(recovery(&bins, 4.0, 8, 10.0, 0.8), Some(2.0), "the heal's own dip at 8 does not count");
        // A bin at the share followed by one below it does not count.
        assert_eq!(recovery(&[10, 10, 0, 9, 3, 9, 9], 2.0, 6, 10.0, 0.8), Some(3.0));
        // Never below: 0; not back before the heal: None.
        assert_eq!(recovery(&[10, 10, 9, 10], 2.01, 4, 10.0, 0.8), Some(0.0));
        assert_eq!(recovery(&[10, 10, 0, 0, 10], 2.0, 4, 10.0, 0.8), None);
    }

    #[test]
    fn the_longest_gap_runs_from_the_fault_or_to_the_end() {
        let finished = ms(&[1000, 2100, 2200, 3700, 3800]);
        assert_eq!(longest_gap(&finished, Duration::from_secs(2), Duration::from_secs(4)), Duration::from_millis(1500));
        assert_eq!(longest_gap(&[], Duration::from_secs(2), Duration::from_secs(6)), Duration::from_secs(4));
    }

    #[test]
    fn names_match_the_flag() {
        use clap::ValueEnum;
        for fault in Fault::value_variants() {
            let parsed = Fault::from_str(fault.name(), false).expect("the name parses");
            assert_eq!(parsed, *fault);
        }
        assert!(Fault::PartitionFollower.needs_namespaces() && !Fault::KillLeader.needs_namespaces());
    }
}
