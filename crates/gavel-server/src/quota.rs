//! Quotas at the edge: the serving leader admits a write before it
//! proposes it ([`gavel_core::State::admit`], whose last step is the quota
//! check), so a write over its principal's quota is refused
//! `RESOURCE_EXHAUSTED` (`QUOTA_EXCEEDED`) without costing a log entry.
//!
//! A write proposed and not yet applied has not taken its token or opened
//! its record yet, so the check also counts each principal's writes in
//! flight here ([`InFlight`]): a burst cannot pass the quota by the depth
//! of the proposal pipeline. What remains: writes in flight on another
//! node that became leader meanwhile are not counted (the state machine's
//! check at apply still refuses them, at the cost of a log entry), and a
//! write in flight is counted as if it opened a record even when it will
//! not, so near a count quota a principal may be refused up to its writes
//! in flight early.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use gavel_core::{Caller, DomainError, ErrorCode, Principal};
use tonic::Status;

use crate::metrics::Metrics;
use crate::status::domain_status;

/// Each principal's writes proposed by this node and not yet answered.
#[derive(Debug, Default)]
pub struct InFlight {
    counts: Arc<Mutex<BTreeMap<Principal, u64>>>,
}

/// One admitted write in flight; dropping it (answered, failed or
/// cancelled) gives its place back.
#[derive(Debug)]
pub struct Admitted {
    counts: Arc<Mutex<BTreeMap<Principal, u64>>>,
    principal: Principal,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut counts = self.counts.lock().expect("in-flight lock poisoned");
        if let Some(count) = counts.get_mut(&self.principal) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&self.principal);
            }
        }
    }
}

impl InFlight {
    /// Runs `admit` (the core's admission, [`crate::node::Node::admit`])
    /// with the count of `caller`'s writes in flight, and holds a place for
    /// the command until the returned guard drops when `admit` says it
    /// counts against the quotas. `None`: not such a write, or no principal
    /// (`--insecure`, admitted with nothing in flight).
    pub fn admit(
        &self,
        caller: Option<&Caller>,
        admit: impl FnOnce(u64) -> Result<bool, DomainError>,
    ) -> Result<Option<Admitted>, DomainError> {
        let Some(caller) = caller else {
            admit(0)?;
            return Ok(None);
        };
        // The lock is held across the check, so two writes of one principal
        // never both pass with the same count.
        let mut counts = self.counts.lock().expect("in-flight lock poisoned");
        let in_flight = counts.get(&caller.principal).copied().unwrap_or(0);
        if !admit(in_flight)? {
            return Ok(None);
        }
        *counts.entry(caller.principal.clone()).or_default() += 1;
        Ok(Some(Admitted { counts: self.counts.clone(), principal: caller.principal.clone() }))
    }

    /// `error` as a status, counted in `gavel_quota_refused_total` when it
    /// is a quota refusal (at the edge or at apply).
    pub fn refused(&self, metrics: &Metrics, error: DomainError) -> Status {
        if let (ErrorCode::QuotaExceeded, Some(quota)) = (error.code, error.quota) {
            metrics.count_quota_refusal(quota.kind);
        }
        domain_status(error)
    }

    /// How many writes of `principal` are in flight here.
    pub fn of(&self, principal: &Principal) -> u64 {
        self.counts.lock().expect("in-flight lock poisoned").get(principal).copied().unwrap_or(0)
    }
}
