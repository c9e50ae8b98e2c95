//! The lab's process-cluster kit: everything of [`gavel_local`] (the local
//! cluster of real `gavel node` processes that `gavel dev` also runs),
//! plus the checks a harness makes of such a cluster ([`Converge`]: every
//! replica at one applied index and state hash, or a divergence named at
//! once). The chaos harness, the benchmark and the process-level tests use
//! this crate; the product binary links only `gavel-local`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

pub use gavel_local::*;

/// How often [`Converge::converge`] reads every node's status.
const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// The first applied index at which two nodes were seen steadily with
/// different state hashes, described; `None` if there is none.
fn diverged(steady: &BTreeMap<u64, BTreeMap<u64, String>>) -> Option<String> {
    let nodes: Vec<(&u64, &BTreeMap<u64, String>)> = steady.iter().collect();
    for (i, (a, mine)) in nodes.iter().enumerate() {
        for (b, theirs) in &nodes[i + 1..] {
            for (index, hash) in mine.iter() {
                if let Some(other) = theirs.get(index).filter(|other| *other != hash) {
                    return Some(format!("node {a} at {index} hash {hash}; node {b} at {index} hash {other}"));
                }
            }
        }
    }
    None
}

/// What every running node reported once the cluster converged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Converged {
    /// The applied index they share.
    pub applied_index: u64,
    /// The state hash they share.
    pub state_hash: String,
}

/// The replicas' agreement, checked from outside through each node's
/// `ClusterService.Status`.
#[allow(async_fn_in_trait)] // the lab's own harnesses call it on a `Cluster`; it is never boxed
pub trait Converge {
    /// Waits until every node that runs and is not paused answers with the
    /// same applied index and state hash, up to `timeout`.
    ///
    /// Two nodes each seen at one applied index with different state hashes
    /// (each read the same on two polls in a row, so that a status read
    /// that raced an apply does not count) have diverged: that is
    /// [`Error::Diverged`], naming the index, at once, never a timeout.
    async fn converge(&self, timeout: Duration) -> Result<Converged, Error>;
}

impl Converge for Cluster {
    async fn converge(&self, timeout: Duration) -> Result<Converged, Error> {
        let started = Instant::now();
        let mut previous: BTreeMap<u64, (u64, String)> = BTreeMap::new();
        let mut steady: BTreeMap<u64, BTreeMap<u64, String>> = BTreeMap::new();
        loop {
            let expected = self.answering();
            let statuses = self.statuses().await;
            let mut views = statuses.values().map(|status| (status.last_applied_index, &status.state_hash));
            if let Some((applied_index, state_hash)) = views.next() {
                if statuses.len() == expected.len() && views.all(|view| view == (applied_index, state_hash)) {
                    return Ok(Converged { applied_index, state_hash: state_hash.clone() });
                }
            }
            for (id, status) in &statuses {
                let view = (status.last_applied_index, status.state_hash.clone());
                if previous.get(id) == Some(&view) {
                    steady.entry(*id).or_default().insert(view.0, view.1.clone());
                }
                previous.insert(*id, view);
            }
            if let Some(detail) = diverged(&steady) {
                return Err(Error::Diverged { detail });
            }
            if started.elapsed() >= timeout {
                let detail = expected
                    .iter()
                    .map(|id| match statuses.get(id) {
                        Some(status) => {
                            format!("node {id} at {} hash {}", status.last_applied_index, status.state_hash)
                        }
                        None => format!("node {id} does not answer"),
                    })
                    .collect::<Vec<_>>()
                    .join("; ");
                return Err(Error::NotConverged { timeout, detail });
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(entries: &[(u64, &str)]) -> BTreeMap<u64, String> {
        entries.iter().map(|(index, hash)| (*index, hash.to_string())).collect()
    }

    #[test]
    fn two_steady_views_at_one_index_with_different_hashes_are_named_as_diverged() {
        let mut steady = BTreeMap::new();
        steady.insert(1, view(&[(10, "aa"), (12, "bb")]));
        steady.insert(2, view(&[(11, "cc"), (12, "dd")]));
        let detail = diverged(&steady).expect("diverged at 12");
        assert_eq!(detail, "node 1 at 12 hash bb; node 2 at 12 hash dd");
    }

    #[test]
    fn steady_views_that_agree_or_never_meet_at_one_index_are_not_diverged() {
        let mut steady = BTreeMap::new();
        steady.insert(1, view(&[(10, "aa"), (12, "bb")]));
        steady.insert(2, view(&[(11, "cc"), (12, "bb")]));
        steady.insert(3, view(&[(13, "ee")]));
        assert_eq!(diverged(&steady), None);
        assert_eq!(diverged(&BTreeMap::new()), None);
    }
}
