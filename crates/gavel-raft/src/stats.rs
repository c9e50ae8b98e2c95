//! Lock-free counters and histograms of the Raft and storage hot path,
//! recorded where things happen (the WAL writer thread, the batcher, the
//! state machine) and read by the server's metrics at scrape time, so this
//! crate needs no metrics library.
//!
//! There is one set per process ([`stats`]): a `gavel node` process runs one
//! node. (An in-process test cluster's nodes share it.) Recording is a few
//! relaxed atomic additions; nothing allocates or locks.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

/// Buckets of every histogram: `first`, `2 × first`, … (`BUCKETS` of
/// them), then `+Inf`.
pub const BUCKETS: usize = 18;

/// A histogram of `u64` observations in fixed, doubling buckets.
#[derive(Debug)]
pub struct Histogram {
    /// Upper bound of the first bucket, in observation units.
    first: u64,
    /// Observation units per second (or per item), for reporting.
    units: f64,
    /// Observations per bucket (not cumulative); the last is `+Inf`.
    buckets: [AtomicU64; BUCKETS + 1],
    sum: AtomicU64,
    count: AtomicU64,
}

/// A histogram read at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramSnapshot {
    /// `(upper bound, observations in this bucket)`, not cumulative; the last
    /// bound is `f64::MAX` (`+Inf`).
    pub buckets: Vec<(f64, u64)>,
    /// Sum of the observations, in seconds (or items).
    pub sum: f64,
    /// Number of observations.
    pub count: u64,
}

impl Histogram {
    /// Durations in microseconds, first bucket 25 µs (the last finite one
    /// is about 3.3 s).
    pub const fn seconds() -> Histogram {
        Histogram::new(25, 1e6)
    }

    /// Counts of items, buckets 1, 2, 4, … 131,072.
    pub const fn items() -> Histogram {
        Histogram::new(1, 1.0)
    }

    const fn new(first: u64, units: f64) -> Histogram {
        Histogram {
            first,
            units,
            buckets: [const { AtomicU64::new(0) }; BUCKETS + 1],
            sum: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }

    /// Records one observation of `value` units.
    pub fn observe(&self, value: u64) {
        let mut bound = self.first;
        let mut bucket = 0;
        while bucket < BUCKETS && value > bound {
            bound = bound.saturating_mul(2);
            bucket += 1;
        }
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum.fetch_add(value, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    /// Records one duration (for a histogram of durations).
    pub fn observe_duration(&self, elapsed: Duration) {
        self.observe(u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX));
    }

    /// The histogram now, in seconds (or items).
    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut bound = self.first;
        let mut buckets = Vec::with_capacity(BUCKETS + 1);
        for (bucket, count) in self.buckets.iter().enumerate() {
            let upper = if bucket == BUCKETS { f64::MAX } else { bound as f64 / self.units };
            buckets.push((upper, count.load(Ordering::Relaxed)));
            bound = bound.saturating_mul(2);
        }
        HistogramSnapshot {
            buckets,
            sum: self.sum.load(Ordering::Relaxed) as f64 / self.units,
            count: self.count.load(Ordering::Relaxed),
        }
    }
}

/// The stages of one proposed command inside this crate, in order
/// (`gavel_command_stage_seconds{stage}`); the server adds `edge`.
#[derive(Debug)]
pub struct Stages {
    /// Handed to the batcher → its entry handed to openraft.
    pub batcher: Histogram,
    /// Entry handed to openraft → applied and answered by openraft: the
    /// leader's append and fsync, replication to a quorum, commit and the
    /// apply (which `apply` shows alone).
    pub commit: Histogram,
    /// One apply call of the state machine (the entries committed together).
    pub apply: Histogram,
    /// Reply decoded from the applied entry → received by the caller.
    pub reply: Histogram,
}

/// The process's Raft and storage figures.
#[derive(Debug)]
pub struct RaftStats {
    /// The last commit index openraft reported to the log store.
    pub committed_index: AtomicU64,
    /// One WAL group's `write` of all its records (before the fdatasync).
    pub wal_append: Histogram,
    /// One WAL group's fdatasync.
    pub wal_fsync: Histogram,
    /// Entries written per WAL group (one fdatasync each).
    pub wal_group_entries: Histogram,
    /// Commands per log entry proposed by this node's batcher.
    pub entry_commands: Histogram,
    /// Snapshots built or installed on this node and stored.
    pub snapshots: AtomicU64,
    /// Bytes of the last snapshot stored.
    pub snapshot_bytes: AtomicU64,
    /// Time to capture and store one snapshot built here.
    pub snapshot_build: Histogram,
    /// Where one command's time goes.
    pub stages: Stages,
}

impl RaftStats {
    const fn new() -> RaftStats {
        RaftStats {
            committed_index: AtomicU64::new(0),
            wal_append: Histogram::seconds(),
            wal_fsync: Histogram::seconds(),
            wal_group_entries: Histogram::items(),
            entry_commands: Histogram::items(),
            snapshots: AtomicU64::new(0),
            snapshot_bytes: AtomicU64::new(0),
            snapshot_build: Histogram::seconds(),
            stages: Stages {
                batcher: Histogram::seconds(),
                commit: Histogram::seconds(),
                apply: Histogram::seconds(),
                reply: Histogram::seconds(),
            },
        }
    }

    /// Records the commit index openraft saved.
    pub(crate) fn set_committed(&self, index: u64) {
        self.committed_index.store(index, Ordering::Relaxed);
    }

    /// Counts one snapshot of `bytes` stored.
    pub(crate) fn count_snapshot(&self, bytes: usize) {
        self.snapshots.fetch_add(1, Ordering::Relaxed);
        self.snapshot_bytes.store(bytes as u64, Ordering::Relaxed);
    }
}

/// This process's figures.
pub fn stats() -> &'static RaftStats {
    static STATS: OnceLock<RaftStats> = OnceLock::new();
    STATS.get_or_init(RaftStats::new)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_doubling_buckets_and_past_the_last_in_inf() {
        let histogram = Histogram::items();
        for value in [0, 1, 2, 3, 4, 5, u64::MAX / 2] {
            histogram.observe(value);
        }
        let snapshot = histogram.snapshot();
        assert_eq!(snapshot.count, 7);
        assert_eq!(snapshot.buckets[0], (1.0, 2)); // 0 and 1
        assert_eq!(snapshot.buckets[1], (2.0, 1));
        assert_eq!(snapshot.buckets[2], (4.0, 2)); // 3 and 4
        assert_eq!(snapshot.buckets[3], (8.0, 1));
        assert_eq!(snapshot.buckets[BUCKETS], (f64::MAX, 1));
        let durations = Histogram::seconds();
        durations.observe_duration(Duration::from_micros(30));
        let snapshot = durations.snapshot();
        assert_eq!(snapshot.buckets[1].1, 1);
        assert!((snapshot.buckets[1].0 - 50e-6).abs() < 1e-12);
        assert!((snapshot.sum - 30e-6).abs() < 1e-12);
    }
}
