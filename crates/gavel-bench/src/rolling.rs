//! Rolling-restart mode (`--rolling-restart`): restart the local cluster's
//! nodes one at a time under load, as an operator upgrading it would.
//!
//! After a steady second, for each node, followers first (in id order) and
//! the leader last: SIGTERM and wait for the process to exit, wait
//! [`DOWN`], start it again on its data, wait until it answers `Status`
//! naming a leader and has applied what the leader had applied when it came
//! back (caught up), then let [`SETTLE`] pass before the next node. The
//! closed-loop SDK clients (following the leader, retrying) run the whole
//! time; the run is ok when no lifecycle failed and every node caught up.
//! Each node's downtime is reported: SIGTERM until caught up, split into
//! stopping, down, starting (until `Status` answers) and catching up.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::cluster::{Dial, LocalCluster};
use crate::fault;
use crate::workload::{self, ConfigReport, LoadSpec};
use crate::{BenchError, Printer};

/// How long a stopped node stays down before it is started again.
pub const DOWN: Duration = Duration::from_secs(1);
/// Calm time after a node caught up, before the next one is stopped.
pub const SETTLE: Duration = Duration::from_secs(2);
/// How long a SIGTERMed node gets to exit before it is SIGKILLed.
pub const STOP_GRACE: Duration = Duration::from_secs(10);
/// How long a restarted node gets to answer and catch up.
pub const CATCH_UP_LIMIT: Duration = Duration::from_secs(60);
/// Deadline of one `Status` call while waiting for a restarted node.
const STATUS_CALL: Duration = Duration::from_secs(2);
/// Pause between two `Status` rounds.
const POLL: Duration = Duration::from_millis(50);
/// Calm time before the first restart.
const STEADY: Duration = Duration::from_secs(1);

/// One node's restart, in seconds.
#[derive(Debug, Clone, Serialize)]
pub struct NodeRestart {
    /// The node.
    pub node: u64,
    /// Whether it led when it was stopped.
    pub was_leader: bool,
    /// When SIGTERM was sent, from the measured window's start.
    pub at_s: f64,
    /// SIGTERM until the process exited.
    pub stop_s: f64,
    /// The node a stopping leader handed leadership to (its log's "handed
    /// leadership to node N"); `None` for a follower, or when the hand-over
    /// did not finish and the others had to elect.
    pub handed_over_to: Option<u64>,
    /// Exited until started again.
    pub down_s: f64,
    /// Started until `Status` answered naming a leader.
    pub start_s: f64,
    /// Answered until it had applied what the leader had then.
    pub catch_up_s: f64,
    /// SIGTERM until caught up: the node's downtime.
    pub downtime_s: f64,
    /// What went wrong, if the node did not come back.
    pub failure: Option<String>,
}

/// The figures of a rolling restart.
#[derive(Debug, Clone, Serialize)]
pub struct RollingReport {
    /// Every node's restart, in the order they were restarted.
    pub nodes: Vec<NodeRestart>,
    /// Ok lifecycles per one-second bin of the measured window.
    pub bins: Vec<u64>,
    /// The load's own figures; `config.errors` counts failed lifecycles.
    pub config: ConfigReport,
    /// Every node came back and caught up, no lifecycle failed.
    pub ok: bool,
}

/// The node named by the last "handed leadership to node N" in a node's log.
fn handed_over_to(log: &str) -> Option<u64> {
    const SAID: &str = "handed leadership to node ";
    let at = log.rfind(SAID)? + SAID.len();
    let digits: String = log[at..].chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// Runs a rolling restart of `local` under load.
pub(crate) async fn run(
    spec: &LoadSpec,
    local: &LocalCluster,
    dial: &Dial,
    tag: &str,
    printer: &mut Printer<'_>,
) -> Result<RollingReport, BenchError> {
    let endpoints = local.cluster.addrs();
    printer.human(&format!(
        "rolling restart: {} clients ({}), {:.1} s measured; each node SIGTERM, {:.1} s down, start, catch up, \
         {:.1} s calm",
        spec.clients,
        spec.workload.name(),
        spec.duration.as_secs_f64(),
        DOWN.as_secs_f64(),
        SETTLE.as_secs_f64()
    ))?;
    let measured =
        workload::run_disrupted(dial, &endpoints, spec, tag, |window_start| restart_all(local, dial, window_start))
            .await?;
    let nodes = measured.disruption;
    let bins = fault::bins(&measured.finished, spec.duration.as_secs());
    let window_end = spec.duration.as_secs_f64();
    let mut config = measured.report;
    let late = nodes.last().is_some_and(|last| last.at_s + last.downtime_s > window_end);
    if late {
        config.ok = false;
        config
            .error_samples
            .push(format!("the restarts outlasted the {window_end:.0} s window: give a longer --duration"));
    }
    let ok = config.ok && nodes.len() == local.cluster.ids().len() && nodes.iter().all(|node| node.failure.is_none());
    let report = RollingReport { nodes, bins, config, ok };
    printer.human(&rolling_table(&report))?;
    Ok(report)
}

/// Restarts every node in turn, followers first; stops at the first node
/// that does not come back.
async fn restart_all(local: &LocalCluster, dial: &Dial, window_start: Instant) -> Vec<NodeRestart> {
    tokio::time::sleep_until(tokio::time::Instant::from_std(window_start + STEADY)).await;
    let cluster = &local.cluster;
    let leader = cluster.leader().await;
    let mut order: Vec<u64> = cluster.ids().into_iter().filter(|id| Some(*id) != leader).collect();
    order.extend(leader);
    let mut restarts = Vec::new();
    for node in order {
        let restart = restart_one(local, dial, node, Some(node) == leader, window_start).await;
        let failed = restart.failure.is_some();
        restarts.push(restart);
        if failed {
            break;
        }
        tokio::time::sleep(SETTLE).await;
    }
    restarts
}

async fn restart_one(
    local: &LocalCluster,
    dial: &Dial,
    node: u64,
    was_leader: bool,
    window_start: Instant,
) -> NodeRestart {
    let cluster = &local.cluster;
    let term_sent = Instant::now();
    let mut restart = NodeRestart {
        node,
        was_leader,
        at_s: term_sent.saturating_duration_since(window_start).as_secs_f64(),
        stop_s: 0.0,
        handed_over_to: None,
        down_s: 0.0,
        start_s: 0.0,
        catch_up_s: 0.0,
        downtime_s: 0.0,
        failure: None,
    };
    // The kit's stop waits for the exit in a blocking loop.
    let stopped = tokio::task::block_in_place(|| cluster.stop(node, STOP_GRACE));
    let exited = Instant::now();
    restart.stop_s = (exited - term_sent).as_secs_f64();
    if let Err(error) = stopped {
        restart.failure = Some(format!("stopping node {node}: {error}"));
        return restart;
    }
    restart.handed_over_to =
        cluster.log_path(node).and_then(|path| std::fs::read_to_string(path).ok()).and_then(|log| handed_over_to(&log));
    tokio::time::sleep(DOWN).await;
    let started = Instant::now();
    restart.down_s = (started - exited).as_secs_f64();
    if let Err(error) = cluster.start_node(node) {
        restart.failure = Some(format!("starting node {node}: {error}"));
        return restart;
    }
    let Some(addr) = cluster.addr(node).map(str::to_string) else {
        restart.failure = Some(format!("node {node} has no address"));
        return restart;
    };
    let deadline = started + CATCH_UP_LIMIT;
    let tls = dial.tls.as_ref();
    // Until it answers naming a leader; then what that leader has applied.
    let (answered, target) = loop {
        if Instant::now() >= deadline {
            restart.failure = Some(format!("node {node} did not answer naming a leader within {CATCH_UP_LIMIT:?}"));
            return restart;
        }
        if let Ok(status) = gavel_testkit::status_with(&addr, STATUS_CALL, tls).await {
            if let Some(leader_addr) = status.leader_addr.clone().filter(|_| status.leader_id.is_some()) {
                let answered = Instant::now();
                let leader_status = if leader_addr == addr {
                    Ok(status)
                } else {
                    gavel_testkit::status_with(&leader_addr, STATUS_CALL, tls).await
                };
                if let Ok(leader_status) = leader_status {
                    break (answered, leader_status.last_applied_index);
                }
            }
        }
        tokio::time::sleep(POLL).await;
    };
    restart.start_s = (answered - started).as_secs_f64();
    loop {
        match gavel_testkit::status_with(&addr, STATUS_CALL, tls).await {
            Ok(status) if status.last_applied_index >= target => break,
            _ if Instant::now() >= deadline => {
                restart.failure =
                    Some(format!("node {node} did not catch up to index {target} within {CATCH_UP_LIMIT:?}"));
                return restart;
            }
            _ => tokio::time::sleep(POLL).await,
        }
    }
    let caught_up = Instant::now();
    restart.catch_up_s = (caught_up - answered).as_secs_f64();
    restart.downtime_s = (caught_up - term_sent).as_secs_f64();
    restart
}

/// The human-readable table of a rolling restart.
pub(crate) fn rolling_table(report: &RollingReport) -> String {
    let mut out = String::new();
    let config = &report.config;
    let _ = writeln!(
        out,
        "== rolling restart | {} clients | {} lifecycles ({:.1}/s), {} failed, {} retries ==",
        config.clients, config.lifecycles, config.lifecycles_per_s, config.errors, config.retries
    );
    let _ = writeln!(
        out,
        "  {:>4} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9} {:>10}",
        "node", "role", "at s", "stop s", "down s", "start s", "catch-up", "downtime s"
    );
    for node in &report.nodes {
        let _ = writeln!(
            out,
            "  {:>4} {:>8} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>9.2} {:>10.2}{}",
            node.node,
            if node.was_leader { "leader" } else { "follower" },
            node.at_s,
            node.stop_s,
            node.down_s,
            node.start_s,
            node.catch_up_s,
            node.downtime_s,
            node.handed_over_to.map_or(String::new(), |to| format!("  handed leadership to node {to}"))
                + &node.failure.as_ref().map_or(String::new(), |failure| format!("  FAILED: {failure}"))
        );
    }
    let bins: Vec<String> = report.bins.iter().map(u64::to_string).collect();
    let _ = writeln!(out, "  ok lifecycles per second: {}", bins.join(" "));
    for sample in &config.error_samples {
        let _ = writeln!(out, "  error: {sample}");
    }
    let downtimes: Vec<String> =
        report.nodes.iter().map(|node| format!("node {} {:.2} s", node.node, node.downtime_s)).collect();
    let _ =
        write!(out, "rolling restart summary: {} failed lifecycles; downtime {}", config.errors, downtimes.join(", "));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hand_over_is_read_from_the_last_line_that_says_it() {
        let log = "INFO node 1 runs 2 runtime worker thread(s)\n\
                   INFO handed leadership to node 2 in 40 ms\n\
                   INFO handed leadership to node 3 in 35 ms leader=3\n";
        assert_eq!(handed_over_to(log), Some(3));
        assert_eq!(handed_over_to("INFO shutting down\n"), None);
        assert_eq!(handed_over_to("handed leadership to node "), None);
    }
}
