//! The seed's faults: a schedule of partitions, held (delayed) messages,
//! lossy links, power cuts with a torn log tail, worker stalls past their
//! leases, plain crashes, long outages and voter-set changes
//! ([`crate::cluster_faults`]), each healed before the workload stops; with
//! them the clock and disk faults of [`crate::clock_disk`] (skewed and
//! jumping clocks, slow and full disks). Everything here is a function of
//! the seed alone.

use std::fmt;
use std::time::Duration;

use gavel_chaos::rng::Rng;

/// Quiet time between two faults, in simulated milliseconds.
const CALM_MS: (u64, u64) = (1_000, 4_000);
/// How long a fault lasts before it heals, in simulated milliseconds.
const FAULT_MS: (u64, u64) = (500, 3_000);
/// The simulated network's latency cap ranges over this (milliseconds).
const MAX_LATENCY_MS: (u64, u64) = (2, 25);

/// One fault or its healing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Cut `node` off from `others` (both directions).
    Partition {
        /// The isolated node.
        node: u64,
        /// The nodes it cannot reach.
        others: Vec<u64>,
    },
    /// Hold every message between `a` and `b` (they arrive on release, late).
    Hold {
        /// One end.
        a: u64,
        /// The other end.
        b: u64,
    },
    /// Deliver what [`Fault::Hold`] held.
    Release {
        /// One end.
        a: u64,
        /// The other end.
        b: u64,
    },
    /// Drop this percentage of the messages between `a` and `b` (a dropped
    /// TCP segment breaks its connection).
    LinkLoss {
        /// One end.
        a: u64,
        /// The other end.
        b: u64,
        /// Percent of messages lost.
        percent: u8,
    },
    /// Undo a partition or a lossy link.
    Repair {
        /// The node.
        node: u64,
        /// Its peers.
        others: Vec<u64>,
    },
    /// Cut `node`'s disk after that many more operations: its log stops
    /// mid-write, then the node is crashed with a torn tail and restarted.
    PowerCut {
        /// The node.
        node: u64,
        /// Disk operations before the cut.
        after_operations: u64,
    },
    /// Cut `node`'s power the `nth` time (0: the next) its state machine
    /// reaches `point` of its apply, checkpoint and snapshot sequence: it
    /// stops there, and is crashed as a kill leaves it (its log loses the
    /// unsynced writes, its cold store the commits after its last durable
    /// one) and restarted.
    PowerCutAt {
        /// The node; [`LEADER`]: whichever node leads when the cut is armed.
        node: u64,
        /// Where in the sequence.
        point: gavel_raft::CrashPoint,
        /// How many times the point is passed first.
        nth: u64,
        /// How long the node stays down after the cut (short enough, at
        /// times, for a leader to come back before its followers elect
        /// another one).
        down: Duration,
    },
    /// Workers stall past their lease deadline and report late (`true`), or
    /// behave again (`false`).
    WorkerStall {
        /// Whether they stall from now on.
        stall: bool,
    },
    /// Crash `node` now (losing its unsynced writes, keeping a prefix chosen
    /// by `torn`) and restart it after `down`.
    Crash {
        /// The node.
        node: u64,
        /// Chooses the torn prefix.
        torn: u64,
        /// Downtime.
        down: Duration,
    },
    /// Set `node`'s clock to read simulated time plus `offset_ms`.
    ClockSkew {
        /// The node.
        node: u64,
        /// Its clock's offset, in milliseconds, either way.
        offset_ms: i64,
    },
    /// Move `node`'s clock by `by_ms` (forward or backward).
    ClockJump {
        /// The node.
        node: u64,
        /// How far, in milliseconds.
        by_ms: i64,
    },
    /// Make `node`'s log writes wait `latency_ms` of simulated time each
    /// (0: a fast disk again).
    SlowDisk {
        /// The node.
        node: u64,
        /// The extra time per append, truncation or vote write.
        latency_ms: u64,
    },
    /// Fill `node`'s disk (`full`: its log writes fail with ENOSPC) or give
    /// it space again; a node the full disk stopped restarts then.
    FullDisk {
        /// The node.
        node: u64,
        /// Whether the disk is full from now on.
        full: bool,
    },
    /// Remove voter `node` from the cluster through the membership RPC
    /// (`gavel cluster remove-node`): the cluster goes on with the other two.
    RemoveVoter {
        /// The node.
        node: u64,
    },
    /// Add `node` back: as a learner, then promoted to voter once it caught
    /// up (`gavel cluster add-learner`, `gavel cluster promote`).
    AddVoter {
        /// The node.
        node: u64,
    },
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::Partition { node, others } => write!(f, "partition n{node} from {others:?}"),
            Fault::Hold { a, b } => write!(f, "hold messages n{a}<->n{b}"),
            Fault::Release { a, b } => write!(f, "release messages n{a}<->n{b}"),
            Fault::LinkLoss { a, b, percent } => write!(f, "lose {percent}% of messages n{a}<->n{b}"),
            Fault::Repair { node, others } => write!(f, "repair n{node} to {others:?}"),
            Fault::PowerCut { node, after_operations } => {
                write!(f, "power cut on n{node} after {after_operations} disk operations")
            }
            Fault::PowerCutAt { node: LEADER, point, nth, down } => {
                write!(f, "power cut on the leader at {point:?} after passing it {nth} times, down {down:?}")
            }
            Fault::PowerCutAt { node, point, nth, down } => {
                write!(f, "power cut on n{node} at {point:?} after passing it {nth} times, down {down:?}")
            }
            Fault::WorkerStall { stall: true } => write!(f, "workers stall past their leases"),
            Fault::WorkerStall { stall: false } => write!(f, "workers behave again"),
            Fault::Crash { node, torn, down } => write!(f, "crash n{node} (torn {torn:x}), down {down:?}"),
            Fault::ClockSkew { node, offset_ms } => write!(f, "n{node}'s clock skewed by {offset_ms} ms"),
            Fault::ClockJump { node, by_ms } => write!(f, "n{node}'s clock jumps {by_ms} ms"),
            Fault::SlowDisk { node, latency_ms: 0 } => write!(f, "n{node}'s disk is fast again"),
            Fault::SlowDisk { node, latency_ms } => write!(f, "n{node}'s disk slow: +{latency_ms} ms per write"),
            Fault::FullDisk { node, full: true } => write!(f, "n{node}'s disk full (ENOSPC)"),
            Fault::FullDisk { node, full: false } => write!(f, "n{node}'s disk has space again"),
            Fault::RemoveVoter { node } => write!(f, "remove voter n{node}"),
            Fault::AddVoter { node } => write!(f, "add n{node} as a learner and promote it"),
        }
    }
}

/// A fault at a simulated time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// When, since the simulation started.
    pub at: Duration,
    /// What.
    pub fault: Fault,
}

/// The faults of one seed, in time order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    /// The network's latency cap for the run, in milliseconds.
    pub max_latency_ms: u64,
    /// The faults.
    pub events: Vec<Event>,
}

impl Schedule {
    /// The schedule of `seed` for a workload of `length` over `nodes`; no
    /// events when `inject` is false. Every fault heals before `length`.
    pub fn from_seed(seed: u64, length: Duration, nodes: &[u64], inject: bool) -> Schedule {
        let mut rng = Rng::new(seed).fork(0x51);
        let max_latency_ms = rng.between(MAX_LATENCY_MS.0, MAX_LATENCY_MS.1);
        let mut events = Vec::new();
        // The first fault waits for the cluster to elect and the workload to start.
        let mut at_ms = 3_000 + rng.between(CALM_MS.0, CALM_MS.1);
        let end_ms = length.as_millis() as u64;
        while inject && at_ms + FAULT_MS.1 < end_ms {
            let lasts_ms = rng.between(FAULT_MS.0, FAULT_MS.1);
            let node = *rng.pick(nodes);
            let others: Vec<u64> = nodes.iter().copied().filter(|other| *other != node).collect();
            let peer = *rng.pick(&others);
            let at = Duration::from_millis(at_ms);
            let healed = Duration::from_millis(at_ms + lasts_ms);
            match rng.below(6) {
                0 => {
                    events.push(Event { at, fault: Fault::Partition { node, others: others.clone() } });
                    events.push(Event { at: healed, fault: Fault::Repair { node, others } });
                }
                1 => {
                    events.push(Event { at, fault: Fault::Hold { a: node, b: peer } });
                    events.push(Event { at: healed, fault: Fault::Release { a: node, b: peer } });
                }
                2 => {
                    let percent = rng.between(1, 20) as u8;
                    events.push(Event { at, fault: Fault::LinkLoss { a: node, b: peer, percent } });
                    events.push(Event { at: healed, fault: Fault::Repair { node, others: vec![peer] } });
                }
                3 => {
                    // A follower may do only a few disk operations a second
                    // (one append per replication round): keep the cut near.
                    let after_operations = rng.below(12);
                    events.push(Event { at, fault: Fault::PowerCut { node, after_operations } });
                }
                4 => {
                    events.push(Event { at, fault: Fault::WorkerStall { stall: true } });
                    events.push(Event { at: healed, fault: Fault::WorkerStall { stall: false } });
                }
                _ => {
                    let torn = rng.next_u64();
                    let down = Duration::from_millis(lasts_ms);
                    events.push(Event { at, fault: Fault::Crash { node, torn, down } });
                }
            }
            at_ms += lasts_ms + rng.between(CALM_MS.0, CALM_MS.1);
        }
        events.extend(crate::clock_disk::events(seed, length, nodes, inject));
        if inject {
            // From streams of their own: the faults above stay the seed's.
            events.extend(crate::cluster_faults::events(seed, length, nodes));
            events.extend(state_machine_cuts(seed, length, nodes));
        }
        events.sort_by_key(|event| event.at);
        Schedule { max_latency_ms, events }
    }
}

/// Power cuts inside the state machine's apply, checkpoint and snapshot
/// sequence, [`STATE_MACHINE_CUTS`] a seed, each at a point chosen from
/// every point of the sequence and after a number of passes that reaches
/// it within a few seconds (the frequent points later, the rare ones at
/// their next pass).
fn state_machine_cuts(seed: u64, length: Duration, nodes: &[u64]) -> Vec<Event> {
    let mut rng = Rng::new(seed).fork(0x5c);
    let end_ms = length.as_millis() as u64;
    let mut events = Vec::new();
    if end_ms < 3_000 + FAULT_MS.1 {
        return events;
    }
    for _ in 0..STATE_MACHINE_CUTS {
        let at = Duration::from_millis(rng.between(3_000, end_ms - FAULT_MS.1));
        // Half of them on the leader: a leader that comes back before its
        // followers elect another one is what leader restore is about.
        let node = if rng.below(2) == 0 { LEADER } else { *rng.pick(nodes) };
        let point = *rng.pick(&gavel_raft::CrashPoint::ALL);
        let nth = match point {
            gavel_raft::CrashPoint::LogAppended => rng.below(20),
            gavel_raft::CrashPoint::Applied => rng.below(200),
            gavel_raft::CrashPoint::ChangesWritten
            | gavel_raft::CrashPoint::CheckpointWritten
            | gavel_raft::CrashPoint::SnapshotStored => rng.below(3),
            gavel_raft::CrashPoint::InstallStored | gavel_raft::CrashPoint::InstallRestored => 0,
        };
        let down = Duration::from_millis(rng.between(CUT_DOWN_MS.0, CUT_DOWN_MS.1));
        events.push(Event { at, fault: Fault::PowerCutAt { node, point, nth, down } });
    }
    events
}

/// The node of a [`Fault::PowerCutAt`] that names whichever node leads.
pub const LEADER: u64 = 0;

/// Power cuts inside the state machine's sequence a seed.
const STATE_MACHINE_CUTS: usize = 3;
/// How long a node stays down after such a cut, in simulated
/// milliseconds: from less than an election timeout (400-800 ms) to more.
const CUT_DOWN_MS: (u64, u64) = (50, 1_500);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_always_gives_the_same_schedule_and_every_fault_heals_in_time() {
        let length = Duration::from_secs(60);
        let first = Schedule::from_seed(42, length, &[1, 2, 3], true);
        assert_eq!(first, Schedule::from_seed(42, length, &[1, 2, 3], true));
        assert_ne!(first, Schedule::from_seed(43, length, &[1, 2, 3], true));
        assert!(!first.events.is_empty());
        assert!(first.events.iter().all(|event| event.at < length));
        assert!(Schedule::from_seed(42, length, &[1, 2, 3], false).events.is_empty());
    }
}
