//! Latency histograms and counters of one client, merged per configuration.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::Serialize;

/// Highest latency a histogram tracks, in microseconds (one hour).
const HIGHEST_US: u64 = 3_600_000_000;
/// Error messages kept per configuration, as examples.
pub const ERROR_SAMPLES: usize = 10;

/// A microsecond-precision latency histogram (3 significant digits).
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HIGHEST_US, 3).expect("1 µs to 1 h with 3 significant digits is a valid histogram")
}

/// Latency figures of one operation kind, in milliseconds.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Latency {
    /// Operations measured.
    pub count: u64,
    /// Median.
    pub p50_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// 99.9th percentile.
    pub p999_ms: f64,
    /// Largest.
    pub max_ms: f64,
    /// Mean.
    pub mean_ms: f64,
}

impl Latency {
    /// Summarizes a histogram of microseconds.
    pub fn of(histogram: &Histogram<u64>) -> Latency {
        let ms = |us: u64| us as f64 / 1000.0;
        Latency {
            count: histogram.len(),
            p50_ms: ms(histogram.value_at_quantile(0.5)),
            p99_ms: ms(histogram.value_at_quantile(0.99)),
            p999_ms: ms(histogram.value_at_quantile(0.999)),
            max_ms: ms(histogram.max()),
            mean_ms: histogram.mean() / 1000.0,
        }
    }
}

/// What one client measured. Operations and lifecycles count only when they
/// finish inside the measured window; errors count whenever they happen.
pub struct ClientStats {
    window: (Instant, Instant),
    /// Latency per operation name.
    pub operations: BTreeMap<&'static str, Histogram<u64>>,
    /// Latency per lifecycle kind (`approval`, `execution`, `governed`).
    pub lifecycles: BTreeMap<&'static str, Histogram<u64>>,
    /// Latency per stage of a lifecycle that is not one RPC of the client's
    /// (the governed workload's `decision_seen`, `lease_granted`, ...); not
    /// counted as operations.
    pub stages: BTreeMap<&'static str, Histogram<u64>>,
    /// Lifecycles completed and checked, measured or not.
    pub completed: u64,
    /// Unexpected errors and failed checks.
    pub errors: u64,
    /// The first few error messages.
    pub error_samples: Vec<String>,
    /// Polls that returned no task and were repeated.
    pub empty_polls: u64,
    /// Logical calls made (each may be several RPC attempts).
    pub calls: u64,
    /// When each lifecycle measured in the window finished, as offsets from
    /// the window's start (the fault mode bins them per second).
    pub finished: Vec<Duration>,
    /// When each lifecycle measured in the window started and finished
    /// (scale mode sorts them into inside and outside snapshot builds).
    pub lifecycle_spans: Vec<(Instant, Instant)>,
    /// When each operation measured in the window started and finished.
    pub operation_spans: Vec<(Instant, Instant)>,
}

impl ClientStats {
    /// Empty statistics for the window `[start, end)`.
    pub fn new(start: Instant, end: Instant) -> ClientStats {
        ClientStats {
            window: (start, end),
            operations: BTreeMap::new(),
            lifecycles: BTreeMap::new(),
            stages: BTreeMap::new(),
            completed: 0,
            errors: 0,
            error_samples: Vec::new(),
            empty_polls: 0,
            calls: 0,
            finished: Vec::new(),
            lifecycle_spans: Vec::new(),
            operation_spans: Vec::new(),
        }
    }

    fn in_window(&self, finished: Instant) -> bool {
        finished >= self.window.0 && finished < self.window.1
    }

    /// Records an operation that ran from `started` until now.
    pub fn operation(&mut self, name: &'static str, started: Instant) {
        self.operation_between(name, started, Instant::now());
    }

    /// Records an operation that ran from `started` until `finished`.
    pub fn operation_between(&mut self, name: &'static str, started: Instant, finished: Instant) {
        if self.in_window(finished) {
            record(self.operations.entry(name).or_insert_with(new_histogram), finished - started);
            self.operation_spans.push((started, finished));
        }
    }

    /// Records a completed lifecycle that ran from `started` until now.
    pub fn lifecycle(&mut self, kind: &'static str, started: Instant) {
        let finished = Instant::now();
        self.completed += 1;
        if self.in_window(finished) {
            record(self.lifecycles.entry(kind).or_insert_with(new_histogram), finished - started);
            self.finished.push(finished - self.window.0);
            self.lifecycle_spans.push((started, finished));
        }
    }

    /// Records a stage that ran from `started` until `finished` (not an operation).
    pub fn stage(&mut self, name: &'static str, started: Instant, finished: Instant) {
        if self.in_window(finished) {
            record(self.stages.entry(name).or_insert_with(new_histogram), finished.saturating_duration_since(started));
        }
    }

    /// Counts an unexpected error.
    pub fn error(&mut self, message: String) {
        self.errors += 1;
        if self.error_samples.len() < ERROR_SAMPLES {
            self.error_samples.push(message);
        }
    }

    /// Adds another client's statistics.
    pub fn merge(&mut self, other: &ClientStats) {
        for (name, histogram) in &other.operations {
            // Same bounds on both sides, so adding cannot fail.
            let _ = self.operations.entry(name).or_insert_with(new_histogram).add(histogram);
        }
        for (kind, histogram) in &other.lifecycles {
            let _ = self.lifecycles.entry(kind).or_insert_with(new_histogram).add(histogram);
        }
        for (name, histogram) in &other.stages {
            let _ = self.stages.entry(name).or_insert_with(new_histogram).add(histogram);
        }
        self.completed += other.completed;
        self.errors += other.errors;
        for sample in &other.error_samples {
            if self.error_samples.len() < ERROR_SAMPLES {
                self.error_samples.push(sample.clone());
            }
        }
        self.empty_polls += other.empty_polls;
        self.calls += other.calls;
        self.finished.extend_from_slice(&other.finished);
        self.lifecycle_spans.extend_from_slice(&other.lifecycle_spans);
        self.operation_spans.extend_from_slice(&other.operation_spans);
    }

    /// Operations measured in the window.
    pub fn measured_operations(&self) -> u64 {
        self.operations.values().map(Histogram::len).sum()
    }

    /// Lifecycles measured in the window.
    pub fn measured_lifecycles(&self) -> u64 {
        self.lifecycles.values().map(Histogram::len).sum()
    }
}

fn record(histogram: &mut Histogram<u64>, elapsed: Duration) {
    histogram.saturating_record((elapsed.as_micros() as u64).max(1));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_operations_finishing_in_the_window_count() {
        let now = Instant::now();
        let mut stats = ClientStats::new(now + Duration::from_secs(3600), now + Duration::from_secs(7200));
        stats.operation("create", now);
        stats.lifecycle("approval", now);
        assert_eq!((stats.measured_operations(), stats.measured_lifecycles(), stats.completed), (0, 0, 1));

        let mut open = ClientStats::new(now, now + Duration::from_secs(3600));
        open.operation("create", now);
        open.lifecycle("approval", now);
        open.error("boom".to_string());
        stats.merge(&open);
        assert_eq!((stats.measured_operations(), stats.measured_lifecycles(), stats.completed), (1, 1, 2));
        assert_eq!(stats.errors, 1);
        assert_eq!(stats.error_samples, vec!["boom".to_string()]);
        assert_eq!((stats.lifecycle_spans.len(), stats.operation_spans.len()), (1, 1), "only measured ones have spans");

        // A stage is a histogram of its own, never an operation.
        let mut staged = ClientStats::new(now, now + Duration::from_secs(3600));
        staged.stage("lease_granted", now, now + Duration::from_millis(2));
        staged.stage("late", now, now + Duration::from_secs(7200));
        stats.merge(&staged);
        assert_eq!(stats.measured_operations(), 1);
        assert_eq!(stats.stages.keys().copied().collect::<Vec<_>>(), vec!["lease_granted"]);
        assert_eq!(stats.stages["lease_granted"].max(), 2000, "microseconds");
    }

    #[test]
    fn latency_percentiles_are_ordered_and_in_milliseconds() {
        let mut histogram = new_histogram();
        for us in 1..=10_000u64 {
            histogram.record(us).expect("in range");
        }
        let latency = Latency::of(&histogram);
        assert_eq!(latency.count, 10_000);
        assert!((latency.p50_ms - 5.0).abs() < 0.01, "{latency:?}");
        assert!((latency.p99_ms - 9.9).abs() < 0.01, "{latency:?}");
        assert!(latency.p50_ms <= latency.p99_ms && latency.p99_ms <= latency.p999_ms);
        assert!(latency.p999_ms <= latency.max_ms);
        assert!((latency.max_ms - 10.0).abs() < 0.01, "{latency:?}");
    }
}
