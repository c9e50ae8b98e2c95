//! Clock and disk faults replay exactly: seeds whose schedules jump a
//! node's clock, slow a node's disk and fill one (stopping the node, which
//! restarts once space is back) give the same trace hash twice, and keep
//! every rule.

#![cfg(tokio_unstable)]

use std::time::Duration;

use gavel_sim::{replay_command, run_seed, SimConfig, SimReport};

/// Seed 45 jumps n-clocks (both ways) and stops a node on a full disk;
/// seed 1 slows n1's disk and stops n3 on a full disk. Both skew every
/// node's clock from the start. (Chosen from the first 64 seeds at 15 s.)
const SEEDS: [u64; 2] = [45, 1];

/// The workload length the seeds were chosen at (the CI sample's today).
const WORKLOAD_SECONDS: u64 = 15;

fn run(seed: u64) -> SimReport {
    let config = SimConfig { workload_time: Duration::from_secs(WORKLOAD_SECONDS), ..SimConfig::default() };
    run_seed(seed, &config).unwrap_or_else(|error| panic!("seed {seed}: {error}\n  replay: {}", replay_command(seed)))
}

fn has(report: &SimReport, what: &str) -> bool {
    report.faults.iter().any(|fault| fault.contains(what))
}

#[test]
fn seeds_with_clock_jumps_slow_and_full_disks_replay_to_the_same_trace_hash_and_keep_every_rule() {
    let mut seen = [false; 4];
    for seed in SEEDS {
        let (first, second) = (run(seed), run(seed));
        assert_eq!(
            first.trace_hash,
            second.trace_hash,
            "seed {seed} gave two traces\n  replay: {}",
            replay_command(seed)
        );
        assert!(!first.failed(), "seed {seed} failed: {:?}\n  replay: {}", first.failures(), replay_command(seed));
        assert!(first.operations > 0, "seed {seed} ran no operation");
        for (slot, what) in ["clock skewed", "clock jumps", "disk slow", "met the full disk"].iter().enumerate() {
            seen[slot] |= has(&first, what);
        }
    }
    assert_eq!(seen, [true; 4], "the seeds no longer skew, jump, slow and fill (skew, jump, slow, full)");
}
