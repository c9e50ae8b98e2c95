//! The scale run's watchdog: a long fill can take the machine's memory or
//! the disk under the data directory past what it can give, and a run that
//! does must stop itself before it hurts everything else on the machine.
//!
//! [`watch`] samples `MemAvailable` (`/proc/meminfo`) and the free space of
//! the file system holding the data directory (`statvfs`) every
//! [`SAMPLE_EVERY`], and returns the reason as soon as either falls below
//! its floor or the run's deadline passes. The caller races it against the
//! run and, when it trips, drops the run, which kills the nodes by PID, and
//! exits non-zero with that reason ([`BenchError::Watchdog`]).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::{procfs, BenchError};

/// Default floor of the machine's available memory.
pub const MEM_AVAILABLE_MIN_BYTES: u64 = 2_500_000_000;
/// Default floor of the free space under the data directory.
pub const DISK_FREE_MIN_BYTES: u64 = 4_000_000_000;
/// Default bound of a whole scale run.
pub const SCALE_DEADLINE: Duration = Duration::from_secs(25 * 60);
/// How often the watchdog samples.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(500);

/// What the watchdog guards.
#[derive(Debug, Clone)]
pub(crate) struct Limits {
    /// Stop when `MemAvailable` falls below this.
    pub mem_available_min: u64,
    /// Stop when the free space under `dir` falls below this.
    pub disk_free_min: u64,
    /// Stop when the run has taken this long.
    pub deadline: Duration,
    /// The directory whose file system is watched.
    pub dir: PathBuf,
}

/// One sample of what the watchdog watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sample {
    pub mem_available: u64,
    pub disk_free: u64,
    pub elapsed: Duration,
}

/// Bytes as GB with two decimals.
fn gb(bytes: u64) -> String {
    format!("{:.2} GB", bytes as f64 / 1e9)
}

/// Why `sample` must stop the run, if it must.
pub(crate) fn verdict(limits: &Limits, sample: &Sample) -> Option<String> {
    if sample.mem_available < limits.mem_available_min {
        return Some(format!(
            "the machine's available memory fell to {} (floor {}) after {:.0} s",
            gb(sample.mem_available),
            gb(limits.mem_available_min),
            sample.elapsed.as_secs_f64()
        ));
    }
    if sample.disk_free < limits.disk_free_min {
        return Some(format!(
            "free disk space under {} fell to {} (floor {}) after {:.0} s",
            limits.dir.display(),
            gb(sample.disk_free),
            gb(limits.disk_free_min),
            sample.elapsed.as_secs_f64()
        ));
    }
    if sample.elapsed > limits.deadline {
        return Some(format!("the run took longer than its deadline of {:.0} s", limits.deadline.as_secs_f64()));
    }
    None
}

/// Free bytes (for an unprivileged user) of the file system holding `path`.
pub(crate) fn disk_free_bytes(path: &Path) -> Result<u64, BenchError> {
    let stats = nix::sys::statvfs::statvfs(path)
        .map_err(|errno| BenchError::io(format!("statvfs {}", path.display()))(errno.into()))?;
    Ok(stats.blocks_available().saturating_mul(stats.fragment_size()))
}

/// One sample now, `started` being the run's start.
pub(crate) fn sample(limits: &Limits, started: Instant) -> Result<Sample, BenchError> {
    Ok(Sample {
        mem_available: procfs::mem_available_bytes()?,
        disk_free: disk_free_bytes(&limits.dir)?,
        elapsed: started.elapsed(),
    })
}

/// Samples until a limit is crossed, then returns why (also when a sample
/// cannot be taken: a watchdog that cannot see must not let the run go on).
pub(crate) async fn watch(limits: Limits, started: Instant) -> BenchError {
    let mut interval = tokio::time::interval(SAMPLE_EVERY);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        match sample(&limits, started) {
            Ok(sample) => {
                if let Some(reason) = verdict(&limits, &sample) {
                    return BenchError::Watchdog(reason);
                }
            }
            Err(error) => return BenchError::Watchdog(format!("cannot sample memory and disk: {error}")),
        }
    }
}

/// Parses a byte size such as `2.5G`, `4GB`, `512M`, `512MiB` or `1000000`
/// (decimal units; `Ki`/`Mi`/`Gi` are binary).
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number.parse().map_err(|_| format!("{text:?} is not a size such as 4G or 512M"))?;
    let scale = match unit.trim().to_ascii_lowercase().trim_end_matches('b') {
        "" => 1.0,
        "k" => 1e3,
        "m" => 1e6,
        "g" => 1e9,
        "t" => 1e12,
        "ki" => 1024.0,
        "mi" => 1024.0 * 1024.0,
        "gi" => 1024.0 * 1024.0 * 1024.0,
        _ => return Err(format!("unknown unit in {text:?} (use K, M, G, T, Ki, Mi or Gi)")),
    };
    let bytes = value * scale;
    if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 {
        return Err(format!("{text:?} is not a valid size"));
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits {
            mem_available_min: MEM_AVAILABLE_MIN_BYTES,
            disk_free_min: DISK_FREE_MIN_BYTES,
            deadline: Duration::from_secs(60),
            dir: PathBuf::from("/data"),
        }
    }

    #[test]
    fn each_floor_and_the_deadline_stop_the_run() {
        let fine = Sample { mem_available: 3_000_000_000, disk_free: 10_000_000_000, elapsed: Duration::from_secs(5) };
        assert_eq!(verdict(&limits(), &fine), None);
        let low_memory = Sample { mem_available: 2_400_000_000, ..fine };
        let reason = verdict(&limits(), &low_memory).expect("stops");
        assert!(reason.contains("available memory fell to 2.40 GB (floor 2.50 GB)"), "{reason}");
        let low_disk = Sample { disk_free: 3_900_000_000, ..fine };
        let reason = verdict(&limits(), &low_disk).expect("stops");
        assert!(reason.contains("under /data fell to 3.90 GB (floor 4.00 GB)"), "{reason}");
        let late = Sample { elapsed: Duration::from_secs(61), ..fine };
        assert!(verdict(&limits(), &late).expect("stops").contains("deadline of 60 s"));
    }

    #[test]
    fn this_machine_can_be_sampled() {
        let limits = Limits { dir: std::env::temp_dir(), ..limits() };
        let sample = sample(&limits, Instant::now()).expect("a sample");
        assert!(sample.mem_available > 0 && sample.disk_free > 0, "{sample:?}");
    }

    #[tokio::test]
    async fn an_impossible_floor_trips_at_the_first_sample() {
        let limits = Limits { mem_available_min: u64::MAX, dir: std::env::temp_dir(), ..limits() };
        let tripped = tokio::time::timeout(Duration::from_secs(5), watch(limits, Instant::now())).await;
        let error = tripped.expect("the watchdog trips at once");
        assert!(error.to_string().contains("available memory"), "{error}");
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_bytes("2.5G"), Ok(2_500_000_000));
        assert_eq!(parse_bytes("4GB"), Ok(4_000_000_000));
        assert_eq!(parse_bytes("512M"), Ok(512_000_000));
        assert_eq!(parse_bytes("1Gi"), Ok(1 << 30));
        assert_eq!(parse_bytes("64MiB"), Ok(64 << 20));
        assert_eq!(parse_bytes("1000"), Ok(1000));
        assert!(parse_bytes("lots").is_err());
        assert!(parse_bytes("3 parsecs").is_err());
    }
}
