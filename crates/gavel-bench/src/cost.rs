//! `gavel-lab bench --cost`: what one operation costs each node.
//!
//! Around the measured window of each `--clients` configuration the bench
//! reads, for every node process: CPU time (`utime + stime` of
//! `/proc/<pid>/stat`), voluntary and involuntary context switches (summed
//! over the live threads' `/proc/<pid>/task/<tid>/status`), and the I/O
//! counters of `/proc/<pid>/io` (page cache dirtied, bytes and calls of the
//! read and write families, sockets included). During the
//! window it runs `perf stat -e raw_syscalls:sys_enter -p <pid>` per node to
//! count every system call; without `perf` (or without the permission to
//! count another process's tracepoint) that column says why it is empty and
//! the rest is still printed. Each figure is divided by the operations the
//! clients finished in the window (the whole cluster's), so a node's row is
//! what that node spends per operation of the cluster.
//!
//! Limits of the method: `perf stat -p` follows the threads that exist when
//! it starts (tokio's workers and the WAL writer are long-lived; a blocking
//! thread spawned during the window is missed), and context switches of a
//! thread that exits during the window are lost with it. Both undercount;
//! neither can overcount.

use std::process::Stdio;
use std::time::Duration;

use serde::Serialize;

use crate::procfs::{self, ContextSwitches, CpuTicks, IoCounters, ProcfsError};

/// The event `perf stat` counts: every system call entry.
const SYSCALL_EVENT: &str = "raw_syscalls:sys_enter";
/// How much longer than the window a `perf stat` may take to report before
/// its count is given up (it is killed, by its own pid, when dropped).
const PERF_GRACE: Duration = Duration::from_secs(5);

/// One node's counters at one instant.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NodeCounters {
    cpu: CpuTicks,
    switches: ContextSwitches,
    io: IoCounters,
}

/// Every node's counters, in `pids` order.
pub(crate) fn snapshot(pids: &[u32]) -> Result<Vec<NodeCounters>, ProcfsError> {
    pids.iter()
        .map(|pid| {
            Ok(NodeCounters {
                cpu: procfs::cpu_ticks(*pid)?,
                switches: procfs::context_switches(*pid)?,
                io: procfs::io_counters(*pid)?,
            })
        })
        .collect()
}

/// System calls each node made during the window, or why they were not counted.
pub(crate) type SyscallCounts = Result<Vec<u64>, String>;

/// Counts the system calls of every node for `window`, one `perf stat` per
/// node, all at once.
pub(crate) async fn count_syscalls(pids: &[u32], window: Duration) -> SyscallCounts {
    let counts = futures::future::join_all(pids.iter().map(|pid| perf_syscalls(*pid, window))).await;
    counts.into_iter().collect()
}

async fn perf_syscalls(pid: u32, window: Duration) -> Result<u64, String> {
    let seconds = format!("{:.3}", window.as_secs_f64());
    let child = tokio::process::Command::new("perf")
        .args(["stat", "-x", ",", "-e", SYSCALL_EVENT, "-p", &pid.to_string(), "--", "sleep", &seconds])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|error| format!("perf could not be started ({error}); install linux-perf to count system calls"))?;
    let output = tokio::time::timeout(window + PERF_GRACE, child.wait_with_output())
        .await
        .map_err(|_| format!("perf stat did not report within {:?} of the window", PERF_GRACE))?
        .map_err(|error| format!("perf stat failed: {error}"))?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        return Err(format!("perf stat exited with {}: {}", output.status, stderr.trim()));
    }
    parse_perf_count(&stderr, SYSCALL_EVENT)
}

/// The count of `event` in `perf stat -x ,` output (`count,unit,event,...`).
pub(crate) fn parse_perf_count(text: &str, event: &str) -> Result<u64, String> {
    let line = text
        .lines()
        .find(|line| line.split(',').nth(2) == Some(event))
        .ok_or_else(|| format!("perf stat printed no {event} line: {:?}", text.trim()))?;
    let count = line.split(',').next().unwrap_or_default();
    count.parse().map_err(|_| format!("perf stat could not count {event}: {count:?}"))
}

/// What one operation cost one node.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct NodeCost {
    /// The node's position in the cluster (1-based, the endpoint order).
    pub node: usize,
    /// Whether it led when the configuration started.
    pub leader: bool,
    /// Its live threads at the end of the window.
    pub threads: u64,
    /// CPU milliseconds (user + system) per operation.
    pub cpu_ms: f64,
    /// Of which in the kernel (system time), milliseconds per operation.
    pub cpu_system_ms: f64,
    /// Voluntary context switches per operation (a thread blocked).
    pub voluntary_switches: f64,
    /// Involuntary context switches per operation (a thread was preempted).
    pub involuntary_switches: f64,
    /// System calls per operation (`perf stat`), when counted.
    pub syscalls: Option<f64>,
    /// Read-family plus write-family system calls per operation (`/proc/<pid>/io`).
    pub read_write_calls: f64,
    /// Bytes of page cache the node dirtied per operation (`write_bytes` of
    /// `/proc/<pid>/io`). Not bytes that reached the disk: on a kernel
    /// whose page cache holds files in large folios, every write into a
    /// clean folio counts the whole folio (see docs/performance.md).
    pub dirtied_bytes: f64,
    /// Bytes passed to write-family calls (files and sockets) per operation.
    pub written_bytes: f64,
}

/// What one operation cost, node by node.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CostReport {
    /// Operations the clients finished in the window (the divisor; lifecycles when `per` says so).
    pub operations: u64,
    /// What the figures are per: `operation`, or `lifecycle` (the governed workload).
    pub per: String,
    /// One row per node, in endpoint order.
    pub nodes: Vec<NodeCost>,
    /// How system calls were counted, or why they were not.
    pub syscalls_source: String,
}

/// The per-operation costs between two snapshots.
pub(crate) fn report(
    before: &[NodeCounters],
    after: &[NodeCounters],
    syscalls: &SyscallCounts,
    operations: u64,
    leader: usize,
    ticks_per_s: u64,
) -> CostReport {
    let per_op = |value: f64| if operations == 0 { 0.0 } else { value / operations as f64 };
    let delta = |after: u64, before: u64| after.saturating_sub(before) as f64;
    let ms_of = |ticks: f64| ticks * 1e3 / ticks_per_s.max(1) as f64;
    let nodes = before
        .iter()
        .zip(after)
        .enumerate()
        .map(|(index, (before, after))| NodeCost {
            node: index + 1,
            leader: index == leader,
            threads: after.switches.threads,
            cpu_ms: per_op(ms_of(delta(after.cpu.total(), before.cpu.total()))),
            cpu_system_ms: per_op(ms_of(delta(after.cpu.system, before.cpu.system))),
            voluntary_switches: per_op(delta(after.switches.voluntary, before.switches.voluntary)),
            involuntary_switches: per_op(delta(after.switches.involuntary, before.switches.involuntary)),
            syscalls: syscalls.as_ref().ok().and_then(|counts| counts.get(index)).map(|count| per_op(*count as f64)),
            read_write_calls: per_op(delta(after.io.syscr + after.io.syscw, before.io.syscr + before.io.syscw)),
            dirtied_bytes: per_op(delta(after.io.write_bytes, before.io.write_bytes)),
            written_bytes: per_op(delta(after.io.wchar, before.io.wchar)),
        })
        .collect();
    let syscalls_source = match syscalls {
        Ok(_) => format!("perf stat -e {SYSCALL_EVENT}"),
        Err(why) => format!("not counted: {why}"),
    };
    CostReport { operations, nodes, syscalls_source, per: "operation".to_string() }
}

impl CostReport {
    /// The same report, its divisor being lifecycles (the caller passed their count).
    pub(crate) fn per_lifecycle(self) -> CostReport {
        CostReport { per: "lifecycle".to_string(), ..self }
    }
}

/// The human-readable table of one configuration's costs.
pub(crate) fn table(cost: &CostReport) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "cost per {} ({} {}s; system calls: {}):",
        cost.per, cost.operations, cost.per, cost.syscalls_source
    );
    let _ = writeln!(
        out,
        "  {:<12} {:>8} {:>8} {:>8} {:>8} {:>9} {:>9} {:>9} {:>10} {:>7}",
        "node", "CPU ms", "sys ms", "vol cs", "invol cs", "syscalls", "r/w calls", "dirtied B", "written B", "threads"
    );
    let row = |out: &mut String, name: &str, cost: &NodeCost| {
        let syscalls = cost.syscalls.map_or("-".to_string(), |count| format!("{count:.1}"));
        let _ = writeln!(
            out,
            "  {name:<12} {:>8.3} {:>8.3} {:>8.2} {:>8.2} {syscalls:>9} {:>9.1} {:>9.0} {:>10.0} {:>7}",
            cost.cpu_ms,
            cost.cpu_system_ms,
            cost.voluntary_switches,
            cost.involuntary_switches,
            cost.read_write_calls,
            cost.dirtied_bytes,
            cost.written_bytes,
            cost.threads
        );
    };
    for node in &cost.nodes {
        let name = if node.leader { format!("{} (leader)", node.node) } else { node.node.to_string() };
        row(&mut out, &name, node);
    }
    row(&mut out, "all nodes", &total(&cost.nodes));
    out
}

/// The sum of every node's row.
fn total(nodes: &[NodeCost]) -> NodeCost {
    let sum = |field: fn(&NodeCost) -> f64| nodes.iter().map(field).sum::<f64>();
    NodeCost {
        node: 0,
        leader: false,
        threads: nodes.iter().map(|node| node.threads).sum(),
        cpu_ms: sum(|node| node.cpu_ms),
        cpu_system_ms: sum(|node| node.cpu_system_ms),
        voluntary_switches: sum(|node| node.voluntary_switches),
        involuntary_switches: sum(|node| node.involuntary_switches),
        syscalls: nodes.iter().map(|node| node.syscalls).sum(),
        read_write_calls: sum(|node| node.read_write_calls),
        dirtied_bytes: sum(|node| node.dirtied_bytes),
        written_bytes: sum(|node| node.written_bytes),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counters(ticks: u64, system: u64, voluntary: u64, syscr: u64, write_bytes: u64) -> NodeCounters {
        NodeCounters {
            cpu: CpuTicks { user: ticks - system, system },
            switches: ContextSwitches { voluntary, involuntary: voluntary / 10, threads: 9 },
            io: IoCounters { rchar: 0, wchar: write_bytes * 2, syscr, syscw: syscr / 2, write_bytes },
        }
    }

    #[test]
    fn differences_divided_by_the_operations() {
        let before = [counters(100, 40, 1_000, 500, 8_192), counters(50, 10, 200, 100, 0)];
        let after = [counters(300, 140, 3_000, 1_500, 8_192 + 409_600), counters(150, 60, 1_200, 600, 204_800)];
        let cost = report(&before, &after, &Ok(vec![20_000, 9_000]), 100, 0, 100);
        let leader = &cost.nodes[0];
        // 200 ticks at 100/s = 2 s = 2000 ms over 100 operations.
        assert_eq!((leader.node, leader.leader, leader.threads), (1, true, 9));
        assert_eq!((leader.cpu_ms, leader.cpu_system_ms), (20.0, 10.0));
        assert_eq!((leader.voluntary_switches, leader.involuntary_switches), (20.0, 2.0));
        assert_eq!((leader.syscalls, leader.read_write_calls), (Some(200.0), 15.0));
        assert_eq!((leader.dirtied_bytes, leader.written_bytes), (4_096.0, 8_192.0));
        assert!(!cost.nodes[1].leader);
        assert_eq!(cost.nodes[1].syscalls, Some(90.0));
        let table = table(&cost);
        assert!(table.contains("1 (leader)") && table.contains("all nodes"), "{table}");
        assert!(table.contains("perf stat -e raw_syscalls:sys_enter"), "{table}");
        assert_eq!(total(&cost.nodes).syscalls, Some(290.0));
    }

    #[test]
    fn missing_syscall_counts_are_explained_not_invented() {
        let same = [counters(100, 40, 1_000, 500, 0)];
        let cost = report(&same, &same, &Err("perf is not installed".to_string()), 0, 0, 100);
        assert_eq!(cost.nodes[0].syscalls, None);
        assert_eq!(cost.nodes[0].cpu_ms, 0.0, "no operation divides nothing");
        assert!(cost.syscalls_source.contains("perf is not installed"));
        assert!(table(&cost).contains(" - "), "{}", table(&cost));
    }

    #[test]
    fn perf_output_parsing() {
        let text = "138197,,raw_syscalls:sys_enter,413869626,100.00,333.904,K/sec\n";
        assert_eq!(parse_perf_count(text, SYSCALL_EVENT), Ok(138_197));
        assert!(parse_perf_count("<not counted>,,raw_syscalls:sys_enter,0,100.00,,\n", SYSCALL_EVENT).is_err());
        assert!(parse_perf_count("event syntax error", SYSCALL_EVENT).is_err());
    }

    #[tokio::test]
    async fn perf_counts_a_busy_process_or_says_why_not() {
        // This test process makes system calls while perf watches it.
        let busy = tokio::task::spawn_blocking(|| {
            let end = std::time::Instant::now() + Duration::from_millis(400);
            while std::time::Instant::now() < end {
                let _ = std::fs::metadata("/proc/self/stat");
            }
        });
        let counted = count_syscalls(&[std::process::id()], Duration::from_millis(300)).await;
        busy.await.expect("joins");
        match counted {
            Ok(counts) => assert!(counts[0] > 0, "{counts:?}"),
            Err(why) => assert!(why.contains("perf"), "{why}"),
        }
    }
}
