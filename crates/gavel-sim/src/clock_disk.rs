//! Clock and disk faults: each node's own clock (simulated time plus a
//! skew the seed sets and jumps it makes), and a node's disk made slow or
//! full for a window. Their schedule comes from a generator fork of its
//! own, on a timeline of its own, so adding them left the schedule of the
//! other faults of every seed as it was.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use gavel_chaos::rng::Rng;
use gavel_server::node::Clock;

use crate::faults::{Event, Fault};

/// Largest constant skew of a node's clock from simulated time, either way
/// (milliseconds). Two nodes differ by up to twice this: well inside the
/// 30 s the nodes allow a token's times (`TOKEN_CLOCK_SKEW_SECONDS`); the
/// cluster's time is the leader's stamp, kept monotonic by the state
/// machine, so skew between nodes moves no deadline backwards.
pub const MAX_SKEW_MS: u64 = 2_000;
/// How far one jump moves a node's clock, forward or backward
/// (milliseconds); the jump is undone when the fault heals (a clock
/// corrected again, as NTP would).
pub const JUMP_MS: (u64, u64) = (500, 5_000);
/// The extra simulated time a slow disk's appends, truncations and vote
/// writes take (milliseconds).
pub const DISK_LATENCY_MS: (u64, u64) = (5, 200);
/// The furthest a node's clock can be behind simulated time: its skew and
/// one jump (jumps never overlap on the clock and disk timeline).
pub const MAX_NODE_LAG_MS: u64 = MAX_SKEW_MS + JUMP_MS.1;
/// Quiet time between two clock or disk faults (milliseconds).
const CALM_MS: (u64, u64) = (2_000, 6_000);
/// How long a clock or disk fault lasts (milliseconds).
const FAULT_MS: (u64, u64) = (500, 3_000);
/// How long a node whose full disk stopped it stays down once space is
/// back, before it restarts.
pub const FULL_DISK_RESTART: Duration = Duration::from_millis(500);

/// The clock and disk faults of `seed` over `length`: a skew per node at
/// the start, then jumps, slow disks and full disks, each healed before
/// `length`. None when `inject` is false.
pub fn events(seed: u64, length: Duration, nodes: &[u64], inject: bool) -> Vec<Event> {
    let mut events = Vec::new();
    if !inject {
        return events;
    }
    let mut rng = Rng::new(seed).fork(0xc10c);
    for node in nodes {
        let offset_ms = signed(&mut rng, 0, MAX_SKEW_MS);
        events.push(Event { at: Duration::ZERO, fault: Fault::ClockSkew { node: *node, offset_ms } });
    }
    let end_ms = length.as_millis() as u64;
    let mut at_ms = 3_000 + rng.between(CALM_MS.0, CALM_MS.1);
    while at_ms + FAULT_MS.1 < end_ms {
        let lasts_ms = rng.between(FAULT_MS.0, FAULT_MS.1);
        let node = *rng.pick(nodes);
        let (at, healed) = (Duration::from_millis(at_ms), Duration::from_millis(at_ms + lasts_ms));
        match rng.below(3) {
            0 => {
                let by_ms = signed(&mut rng, JUMP_MS.0, JUMP_MS.1);
                events.push(Event { at, fault: Fault::ClockJump { node, by_ms } });
                events.push(Event { at: healed, fault: Fault::ClockJump { node, by_ms: -by_ms } });
            }
            1 => {
                let latency_ms = rng.between(DISK_LATENCY_MS.0, DISK_LATENCY_MS.1);
                events.push(Event { at, fault: Fault::SlowDisk { node, latency_ms } });
                events.push(Event { at: healed, fault: Fault::SlowDisk { node, latency_ms: 0 } });
            }
            _ => {
                events.push(Event { at, fault: Fault::FullDisk { node, full: true } });
                events.push(Event { at: healed, fault: Fault::FullDisk { node, full: false } });
            }
        }
        at_ms += lasts_ms + rng.between(CALM_MS.0, CALM_MS.1);
    }
    events
}

/// Applies a clock fault or a slow disk to `node` (a full disk is the run
/// loop's, which may restart the node).
pub(crate) fn apply(node: &crate::SimNode, fault: &Fault) {
    match fault {
        Fault::ClockSkew { offset_ms, .. } => node.clock.set(*offset_ms),
        Fault::ClockJump { by_ms, .. } => node.clock.jump(*by_ms),
        Fault::SlowDisk { latency_ms, .. } => node.disk.set_latency(Duration::from_millis(*latency_ms)),
        _ => {}
    }
}

/// A magnitude in `low..=high`, either sign.
fn signed(rng: &mut Rng, low: u64, high: u64) -> i64 {
    let magnitude = rng.between(low, high) as i64;
    if rng.chance(50) {
        -magnitude
    } else {
        magnitude
    }
}

/// The workload's clock: simulated time, less the furthest a node's clock
/// can lag it. A stalled worker sleeps until this clock is past its lease
/// deadline (stamped by the leader's clock), so the deadline has passed on
/// every node's clock when it reports: the fencing checker's rule that a
/// late report is never accepted assumes the worker and the cluster read
/// one clock, and with skewed nodes only the slowest clock keeps it true.
pub fn workload_clock_ms() -> i64 {
    crate::simulated_wall_clock_ms() as i64 - MAX_NODE_LAG_MS as i64
}

/// One node's clock offset from simulated time, shared with the clock the
/// node reads; kept across the node's restarts (a machine's clock survives
/// its process).
#[derive(Clone, Default)]
pub struct NodeClock(Arc<AtomicI64>);

impl NodeClock {
    /// The clock the node reads: the simulated wall clock plus the offset.
    pub fn clock(&self) -> Clock {
        let offset = self.0.clone();
        Clock::from_fn(move || skewed(crate::simulated_wall_clock_ms(), offset.load(Ordering::SeqCst)))
    }

    /// Sets the offset (milliseconds).
    pub fn set(&self, offset_ms: i64) {
        self.0.store(offset_ms, Ordering::SeqCst);
    }

    /// Moves the clock by `by_ms`.
    pub fn jump(&self, by_ms: i64) {
        self.0.fetch_add(by_ms, Ordering::SeqCst);
    }

    /// The offset now.
    pub fn offset_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// `now_ms` moved by `offset_ms`, never before the epoch.
fn skewed(now_ms: u64, offset_ms: i64) -> u64 {
    now_ms.saturating_add_signed(offset_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_skewed_clock_reads_simulated_time_plus_its_offset_and_jumps_both_ways() {
        let node = NodeClock::default();
        node.set(-1_500);
        assert_eq!(skewed(10_000, node.offset_ms()), 8_500);
        node.jump(4_000);
        assert_eq!(skewed(10_000, node.offset_ms()), 12_500);
        node.jump(-4_000);
        assert_eq!(node.offset_ms(), -1_500);
        assert_eq!(skewed(1_000, -5_000), 0, "a clock never reads before the epoch");
        // Outside a simulation the clock is the machine's, skewed.
        let machine = crate::simulated_wall_clock_ms();
        let read = node.clock().now_ms();
        assert!(read + 1_500 >= machine && read + 1_500 <= machine + 60_000);
    }

    #[test]
    fn clock_and_disk_faults_come_from_the_seed_are_bounded_and_heal() {
        let length = Duration::from_secs(60);
        let first = events(7, length, &[1, 2, 3], true);
        assert_eq!(first, events(7, length, &[1, 2, 3], true));
        assert!(events(7, length, &[1, 2, 3], false).is_empty());
        let mut offsets = [0i64; 4];
        let mut slow = [0u64; 4];
        let mut full = [false; 4];
        for event in &first {
            assert!(event.at < length);
            match event.fault {
                Fault::ClockSkew { node, offset_ms } => {
                    assert!(offset_ms.unsigned_abs() <= MAX_SKEW_MS);
                    offsets[node as usize] = offset_ms;
                }
                Fault::ClockJump { node, by_ms } => {
                    assert!((JUMP_MS.0..=JUMP_MS.1).contains(&by_ms.unsigned_abs()));
                    offsets[node as usize] += by_ms;
                }
                Fault::SlowDisk { node, latency_ms } => slow[node as usize] = latency_ms,
                Fault::FullDisk { node, full: now } => full[node as usize] = now,
                ref other => panic!("not a clock or disk fault: {other}"),
            }
        }
        assert!(offsets.iter().all(|offset| offset.unsigned_abs() <= MAX_SKEW_MS), "every jump is undone");
        assert_eq!(slow, [0; 4], "every slow disk is fast again");
        assert_eq!(full, [false; 4], "every full disk is emptied");
        let kinds = |seed| {
            let events = events(seed, length, &[1, 2, 3], true);
            [
                events.iter().any(|event| matches!(event.fault, Fault::ClockJump { .. })),
                events.iter().any(|event| matches!(event.fault, Fault::SlowDisk { .. })),
                events.iter().any(|event| matches!(event.fault, Fault::FullDisk { .. })),
            ]
        };
        assert!((1..=8).any(|seed| kinds(seed) == [true, true, true]), "some seed has every kind");
    }
}
