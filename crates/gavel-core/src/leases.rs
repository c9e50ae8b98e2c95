//! Lease records, a part of [`crate::State`]: the fencing tokens handed out,
//! which attempt each one ran, and the deadline of each current lease.
//!
//! A lease is *current* from its grant until it is released (reported,
//! expired or revoked); its record stays while its execution is retained, so
//! a late report can be recognised and recorded. The execution's own record
//! (`Execution::lease`) says which lease is current; this part keeps the
//! deadline index that `Tick` expires from.
//!
//! Records of a non-final execution's leases are hot; when the execution is
//! finalized they move to the cold records ([`crate::cold`]) with it
//! ([`Leases::retire`]).

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::access::Principal;
use crate::cold::{ColdRecords, ColdTable};
use crate::model::ReportOutcome;

/// Which attempt a lease ran, kept for every lease of a retained execution.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct LeaseRecord {
    pub(crate) execution_id: String,
    pub(crate) attempt: u32,
    /// The failure accepted under this lease and whether it scheduled a retry,
    /// so a worker repeating that report after a later attempt was accepted
    /// still gets the same answer. A completed report is always the execution's
    /// last and is kept in `Execution::accepted_report`, so only failures (which
    /// are small) are kept here.
    pub(crate) accepted_failure: Option<(ReportOutcome, bool)>,
    /// The principal whose poll was granted the lease (`None` on a node
    /// started with `--insecure`): only it may heartbeat or report under it.
    pub(crate) principal: Option<Principal>,
    /// The effective deadline while the lease is current: the earlier of the
    /// attempt deadline and the heartbeat deadline. `None` once released.
    deadline_ms: Option<u64>,
}

/// Every lease of a retained execution, and the deadlines of the current ones.
///
/// Invariant: `deadlines` holds exactly `(deadline_ms, lease_id)` of every
/// record whose `deadline_ms` is set, and lease ids are never reused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Leases {
    records: BTreeMap<u64, LeaseRecord>,
    /// Current leases by (effective deadline, lease id).
    deadlines: BTreeSet<(u64, u64)>,
    /// The id the next lease gets: fencing tokens start at 1 and only grow.
    next_id: u64,
    /// Records of the leases of finalized executions, by lease id big-endian (cold).
    retired: ColdRecords,
}

impl Default for Leases {
    fn default() -> Self {
        Leases {
            records: BTreeMap::new(),
            deadlines: BTreeSet::new(),
            next_id: 1,
            retired: ColdRecords::new(ColdTable::Leases),
        }
    }
}

impl Leases {
    /// Grants a new current lease on attempt `attempt` of `execution_id`,
    /// due at `deadline_ms`, to `principal`, and returns its id.
    pub(crate) fn grant(
        &mut self,
        execution_id: &str,
        attempt: u32,
        deadline_ms: u64,
        principal: Option<&Principal>,
    ) -> u64 {
        let lease_id = self.next_id;
        self.next_id += 1;
        let record = LeaseRecord {
            execution_id: execution_id.to_string(),
            attempt,
            accepted_failure: None,
            principal: principal.cloned(),
            deadline_ms: Some(deadline_ms),
        };
        self.records.insert(lease_id, record);
        self.deadlines.insert((deadline_ms, lease_id));
        lease_id
    }

    /// How many leases are current (granted, not yet released or expired).
    pub(crate) fn current_count(&self) -> usize {
        self.deadlines.len()
    }

    /// The record of a lease of a retained execution.
    pub(crate) fn get(&self, lease_id: u64) -> Option<Cow<'_, LeaseRecord>> {
        match self.records.get(&lease_id) {
            Some(record) => Some(Cow::Borrowed(record)),
            None => self.retired.get(&lease_id.to_be_bytes()).map(Cow::Owned),
        }
    }

    /// The cold record set of this part, for flushing and export.
    pub(crate) fn cold_mut(&mut self) -> &mut ColdRecords {
        &mut self.retired
    }

    /// The cold record set of this part, for export.
    pub(crate) fn cold(&self) -> &ColdRecords {
        &self.retired
    }

    /// Moves the records of a just finalized execution's leases to the cold
    /// records. None of them is current any more.
    pub(crate) fn retire(&mut self, lease_ids: &[u64]) {
        for lease_id in lease_ids {
            if let Some(record) = self.records.remove(lease_id) {
                assert!(record.deadline_ms.is_none(), "a finalized execution holds no current lease");
                self.retired.put(lease_id.to_be_bytes().to_vec(), &record);
            }
        }
    }

    /// The effective deadline of a current lease.
    pub(crate) fn deadline_ms(&self, lease_id: u64) -> u64 {
        self.records.get(&lease_id).and_then(|record| record.deadline_ms).expect("only current leases have a deadline")
    }

    /// Moves a current lease's deadline (a heartbeat).
    pub(crate) fn reschedule(&mut self, lease_id: u64, deadline_ms: u64) {
        let record = self.records.get_mut(&lease_id).expect("only recorded leases are rescheduled");
        let old = record.deadline_ms.replace(deadline_ms).expect("only current leases are rescheduled");
        self.deadlines.remove(&(old, lease_id));
        self.deadlines.insert((deadline_ms, lease_id));
    }

    /// Ends a current lease (reported, expired or revoked) and returns the
    /// deadline it had. The record stays, for late reports.
    pub(crate) fn release(&mut self, lease_id: u64) -> u64 {
        let record = self.records.get_mut(&lease_id).expect("only recorded leases are released");
        let deadline_ms = record.deadline_ms.take().expect("a lease is released once");
        self.deadlines.remove(&(deadline_ms, lease_id));
        deadline_ms
    }

    /// Remembers the failure accepted under a lease, for repeated reports.
    /// The failure that finalized an execution is recorded after its leases
    /// were retired, so a retired record is rewritten.
    pub(crate) fn record_accepted_failure(&mut self, lease_id: u64, outcome: ReportOutcome, retry_scheduled: bool) {
        if let Some(record) = self.records.get_mut(&lease_id) {
            record.accepted_failure = Some((outcome, retry_scheduled));
            return;
        }
        let key = lease_id.to_be_bytes();
        let mut record: LeaseRecord = self.retired.get(&key).expect("only recorded leases accept reports");
        record.accepted_failure = Some((outcome, retry_scheduled));
        self.retired.put(key.to_vec(), &record);
    }

    /// The current lease with the earliest deadline, if that deadline plus
    /// `grace_ms` is at or before `now_ms`.
    pub(crate) fn first_due(&self, now_ms: u64, grace_ms: u64) -> Option<u64> {
        let (deadline_ms, lease_id) = self.deadlines.first()?;
        (deadline_ms.saturating_add(grace_ms) <= now_ms).then_some(*lease_id)
    }

    /// The earliest deadline of a current lease.
    pub(crate) fn next_deadline_ms(&self) -> Option<u64> {
        self.deadlines.first().map(|(deadline_ms, _)| *deadline_ms)
    }

    /// Drops the records of an execution that retention dropped. A final
    /// execution holds no current lease.
    pub(crate) fn forget(&mut self, lease_ids: &[u64]) {
        for lease_id in lease_ids {
            if let Some(record) = self.records.remove(lease_id) {
                assert!(record.deadline_ms.is_none(), "a dropped execution holds no current lease");
            }
            self.retired.delete(&lease_id.to_be_bytes());
        }
    }
}
