//! Where one command's time went: the nodes' `gavel_command_stage_seconds`
//! histograms, scraped from each local node's `/metrics` before and after a
//! measurement, and the p50 and p99 of each stage from the bucket deltas.
//!
//! The stages, in order: `edge` (request reached the node → proposal handed
//! to Raft), `batcher` (queued → its entry handed to openraft; about zero
//! for a write that found nothing in flight and proposed alone), `commit`
//! (entry handed to openraft → applied and answered: the leader's append and
//! fdatasync, replication, commit and apply), `apply` (one apply call, which
//! `commit` includes), `reply` (answer sent by the batcher → received by the
//! proposing call; no hand-off for a write that proposed alone), and
//! `fsync`, not a stage of its own but every WAL group's fdatasync on any
//! node (`gavel_raft_wal_fsync_seconds`), which `commit` contains twice in
//! series: the leader's, then a follower's. A quantile is interpolated
//! within its bucket, as Prometheus' `histogram_quantile` does, so it is as
//! coarse as the buckets
//! (doubling from 25 µs).

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::error::BenchError;

/// The stage histogram's name in the text format.
const STAGE_BUCKET: &str = "gavel_command_stage_seconds_bucket";

/// The WAL's fdatasync histogram in the text format, shown as `fsync`.
const FSYNC_BUCKET: &str = "gavel_raft_wal_fsync_seconds_bucket";

/// The stages in the order a command passes them, then `fsync`.
pub(crate) const STAGES: [&str; 6] = ["edge", "batcher", "commit", "apply", "reply", "fsync"];

/// How long one scrape may take.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(10);

/// The Raft term gauge in the text format.
const TERM_GAUGE: &str = "gavel_raft_term";

/// Counters summed over the nodes and reported as their rise over a
/// configuration: waiting polls answered by a lease hand-off (decision
/// 0107) and waiting resumes run by the decision that carried them (0108).
pub(crate) const COUNTERS: [&str; 2] = ["gavel_lease_handoffs_total", "gavel_resumes_carried_total"];

/// Cumulative bucket counts per stage: `stage → [(upper bound, count ≤ bound)]`,
/// summed over the nodes scraped, and the highest Raft term among them.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct StageBuckets {
    stages: BTreeMap<String, Vec<(f64, f64)>>,
    term: Option<u64>,
    counters: BTreeMap<String, f64>,
}

/// One stage's figures over a window.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StageFigures {
    pub stage: String,
    pub count: u64,
    pub p50: Option<Duration>,
    pub p99: Option<Duration>,
}

/// Scrapes every address in `addrs` and sums their stage buckets.
pub(crate) async fn scrape_all(addrs: &[String]) -> Result<StageBuckets, BenchError> {
    let mut total = StageBuckets::default();
    for addr in addrs {
        let text = tokio::time::timeout(SCRAPE_TIMEOUT, scrape(addr))
            .await
            .map_err(|_| BenchError::Invalid(format!("scraping {addr}/metrics timed out")))??;
        total.add(&parse(&text));
    }
    Ok(total)
}

/// `GET /metrics` at `addr`: the body.
async fn scrape(addr: &str) -> Result<String, BenchError> {
    let mut stream =
        tokio::net::TcpStream::connect(addr).await.map_err(BenchError::io(format!("connecting to {addr}")))?;
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: gavel\r\n\r\n")
        .await
        .map_err(BenchError::io(format!("asking {addr} for /metrics")))?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.map_err(BenchError::io(format!("reading {addr}/metrics")))?;
    let answer = String::from_utf8_lossy(&answer);
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    if !head.starts_with("HTTP/1.1 200") {
        return Err(BenchError::Invalid(format!("{addr}/metrics answered {}", head.lines().next().unwrap_or(""))));
    }
    Ok(body.to_string())
}

/// The stage buckets in one scrape's text.
pub(crate) fn parse(text: &str) -> StageBuckets {
    let mut stages: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    let mut term = None;
    let mut counters = BTreeMap::new();
    for line in text.lines() {
        if let Some(value) = line.strip_prefix(TERM_GAUGE).and_then(|rest| rest.strip_prefix(' ')) {
            term = value.trim().parse::<f64>().ok().map(|value| value as u64);
            continue;
        }
        if let Some((name, value)) = line.split_once(' ').filter(|(name, _)| COUNTERS.contains(name)) {
            counters.insert(name.to_string(), value.trim().parse::<f64>().unwrap_or(0.0));
            continue;
        }
        let (labels, mut stage) = if let Some(labels) = line.strip_prefix(STAGE_BUCKET) {
            (labels, None)
        } else if let Some(labels) = line.strip_prefix(FSYNC_BUCKET) {
            (labels, Some("fsync".to_string()))
        } else {
            continue;
        };
        let Some((labels, value)) = labels.rsplit_once(' ') else { continue };
        let Ok(value) = value.parse::<f64>() else { continue };
        let labels = labels.trim_start_matches('{').trim_end_matches('}');
        let mut bound = None;
        for pair in labels.split(',') {
            match pair.split_once('=').map(|(key, value)| (key, value.trim_matches('"'))) {
                Some(("stage", value)) => stage = Some(value.to_string()),
                Some(("le", "+Inf")) => bound = Some(f64::INFINITY),
                Some(("le", value)) => bound = value.parse::<f64>().ok(),
                _ => {}
            }
        }
        if let (Some(stage), Some(bound)) = (stage, bound) {
            stages.entry(stage).or_default().push((bound, value));
        }
    }
    for buckets in stages.values_mut() {
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    StageBuckets { stages, term, counters }
}

impl StageBuckets {
    /// Adds another node's buckets (same bounds) to these.
    fn add(&mut self, other: &StageBuckets) {
        self.term = self.term.max(other.term);
        for (name, value) in &other.counters {
            *self.counters.entry(name.clone()).or_default() += value;
        }
        for (stage, buckets) in &other.stages {
            let mine =
                self.stages.entry(stage.clone()).or_insert_with(|| buckets.iter().map(|(b, _)| (*b, 0.0)).collect());
            for ((_, count), (_, more)) in mine.iter_mut().zip(buckets) {
                *count += more;
            }
        }
    }

    /// How far the highest term among the nodes rose from `before` to
    /// `self`. Every change of leader takes a new term, so this bounds the
    /// leader changes in between from above (a term can also pass in an
    /// election nobody won). `None` when either scrape had no term.
    pub(crate) fn term_rise(&self, before: &StageBuckets) -> Option<u64> {
        Some(self.term?.saturating_sub(before.term?))
    }

    /// How far each of [`COUNTERS`] rose from `before` to `self`, summed
    /// over the nodes (those no scrape had are left out).
    pub(crate) fn counters_rise(&self, before: &StageBuckets) -> BTreeMap<String, u64> {
        self.counters
            .iter()
            .map(|(name, after)| {
                let was = before.counters.get(name).copied().unwrap_or(0.0);
                (name.clone(), (after - was).max(0.0) as u64)
            })
            .collect()
    }

    /// The figures of each stage over the window from `before` to `self`.
    pub(crate) fn since(&self, before: &StageBuckets) -> Vec<StageFigures> {
        STAGES
            .iter()
            .map(|stage| {
                let after = self.stages.get(*stage).cloned().unwrap_or_default();
                let earlier = before.stages.get(*stage);
                let delta: Vec<(f64, f64)> = after
                    .iter()
                    .enumerate()
                    .map(|(n, (bound, count))| {
                        let was = earlier.and_then(|buckets| buckets.get(n)).map_or(0.0, |(_, count)| *count);
                        (*bound, (count - was).max(0.0))
                    })
                    .collect();
                let count = delta.last().map_or(0.0, |(_, count)| *count);
                StageFigures {
                    stage: stage.to_string(),
                    count: count as u64,
                    p50: quantile(&delta, 0.5),
                    p99: quantile(&delta, 0.99),
                }
            })
            .collect()
    }
}

/// The `q` quantile of cumulative `buckets`, interpolated linearly within
/// its bucket (`None` without observations; the last finite bound when it
/// falls in `+Inf`).
fn quantile(buckets: &[(f64, f64)], q: f64) -> Option<Duration> {
    let total = buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let (mut lower, mut below) = (0.0, 0.0);
    for (bound, count) in buckets {
        if *count >= rank {
            if bound.is_infinite() {
                return Some(Duration::from_secs_f64(lower));
            }
            let within = if *count > below { (rank - below) / (count - below) } else { 1.0 };
            return Some(Duration::from_secs_f64(lower + (bound - lower) * within));
        }
        (lower, below) = (*bound, *count);
    }
    None
}

/// The breakdown as a table.
pub(crate) fn table(figures: &[StageFigures]) -> String {
    let mut out = String::from(
        "stage breakdown (all nodes' gavel_command_stage_seconds over the run; fsync: every WAL fdatasync):\n",
    );
    out.push_str(&format!("  {:<8} {:>9} {:>10} {:>10}\n", "stage", "count", "p50 ms", "p99 ms"));
    let ms = |value: Option<Duration>| value.map_or("-".to_string(), |d| format!("{:.3}", d.as_secs_f64() * 1000.0));
    for stage in figures {
        out.push_str(&format!("  {:<8} {:>9} {:>10} {:>10}\n", stage.stage, stage.count, ms(stage.p50), ms(stage.p99)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCRAPE: &str = "\
# TYPE gavel_command_stage_seconds histogram
gavel_command_stage_seconds_count{stage=\"edge\"} 4
gavel_command_stage_seconds_bucket{le=\"0.001\",stage=\"edge\"} 2
gavel_command_stage_seconds_bucket{le=\"0.002\",stage=\"edge\"} 4
gavel_command_stage_seconds_bucket{le=\"+Inf\",stage=\"edge\"} 4
gavel_raft_wal_fsync_seconds_bucket{le=\"0.001\"} 3
gavel_raft_wal_fsync_seconds_bucket{le=\"+Inf\"} 3
# TYPE gavel_raft_term gauge
gavel_raft_term 7
gavel_raft_term_unrelated 99
# TYPE gavel_resumes_carried counter
gavel_resumes_carried_total 5
gavel_resumes_carried_created 1.7e9
";

    #[test]
    fn quantiles_come_from_bucket_deltas_interpolated() {
        let before = StageBuckets::default();
        let after = parse(SCRAPE);
        let figures = after.since(&before);
        let edge = &figures[0];
        assert_eq!((edge.stage.as_str(), edge.count), ("edge", 4));
        assert_eq!(edge.p50, Some(Duration::from_millis(1)));
        let p99 = edge.p99.expect("a p99").as_secs_f64();
        assert!((p99 - 0.00198).abs() < 1e-9, "{p99}");
        assert_eq!(figures[1].p50, None, "no batcher observations");
        // The same scrape before and after: nothing happened in between.
        assert_eq!(after.since(&after)[0].count, 0);
        let mut two_nodes = after.clone();
        two_nodes.add(&after);
        assert_eq!(two_nodes.since(&after)[0].count, 4);
        assert!(table(&figures).contains("edge"));
        let fsync = figures.iter().find(|figures| figures.stage == "fsync").expect("an fsync row");
        assert_eq!(fsync.count, 3, "the WAL's fdatasyncs are read as the fsync row");
    }

    #[test]
    fn counters_rise_summed_over_the_nodes() {
        let before = parse(SCRAPE);
        let mut after = parse(&SCRAPE.replace("carried_total 5", "carried_total 8"));
        after.add(&parse(SCRAPE));
        let rise = after.counters_rise(&before);
        assert_eq!(rise.get("gavel_resumes_carried_total"), Some(&8), "3 on one node, 5 more on the other");
        assert_eq!(rise.len(), 1, "only the counters scraped: {rise:?}");
    }

    #[test]
    fn the_term_rise_is_the_highest_terms_difference() {
        let before = parse(SCRAPE);
        let later = parse(&SCRAPE.replace("gavel_raft_term 7", "gavel_raft_term 9"));
        let mut nodes = before.clone();
        nodes.add(&later);
        assert_eq!(nodes.term_rise(&before), Some(2), "the highest of the nodes' terms counts");
        assert_eq!(before.term_rise(&before), Some(0));
        assert_eq!(before.term_rise(&StageBuckets::default()), None, "no term scraped before");
    }
}
