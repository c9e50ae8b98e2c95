//! Faults that reach past the log: a long outage, after which the node
//! catches up from a snapshot the leader sends (the leader built snapshots
//! and purged its log past the node's while it was away), and a change of
//! the voter set carried out through the same membership RPCs the CLI uses
//! (`gavel cluster remove-node`, `add-learner`, `promote`) by an admin host.
//!
//! Both are drawn from a random stream of their own, so the base schedule
//! of [`crate::faults`] stays what it was for every seed; they overlap with
//! its faults (a crash or a partition during a change, of the node being
//! added or of another).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::time::Duration;

use gavel_chaos::rng::Rng;
use gavel_client::{Client, ClientConfig};
use gavel_proto::v1 as pb;

use crate::faults::{Event, Fault};

/// No outage or change starts before the cluster has elected, the workload
/// registered its capabilities and the log has a snapshot or two behind it.
const FIRST_MS: u64 = 4_000;
/// How long a long outage lasts (simulated milliseconds): long enough for
/// the leader to build a snapshot and purge its log past the node's
/// (`crate::SNAPSHOT_LOGS_SINCE_LAST` entries plus `crate::LOGS_TO_KEEP`
/// at the workload's rate of roughly 10 to 20 entries a second).
const OUTAGE_MS: (u64, u64) = (4_000, 7_000);
/// How long a removed voter stays out before the admin adds it back.
const AWAY_MS: (u64, u64) = (2_000, 6_000);
/// Every outage and change is over this long before the workload ends.
const HEALED_BEFORE_END_MS: u64 = 1_000;
/// Tries of one membership change before the admin gives up (each try is
/// one SDK call, which retries within its own budget).
const ADMIN_ATTEMPTS_MAX: u32 = 10;
/// Pause between two tries of a membership change.
const ADMIN_RETRY_PAUSE: Duration = Duration::from_millis(500);
/// How long the admin's SDK calls may take: a promotion waits on the
/// leader for the learner to catch up, possibly by a snapshot install.
const ADMIN_CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// The outage and voter-set change of `seed` (each in about half the
/// seeds), over a workload of `length` on `nodes`.
pub fn events(seed: u64, length: Duration, nodes: &[u64]) -> Vec<Event> {
    let mut rng = Rng::new(seed).fork(0x27);
    let end_ms = (length.as_millis() as u64).saturating_sub(HEALED_BEFORE_END_MS);
    let mut events = Vec::new();
    if rng.below(2) == 0 {
        let node = *rng.pick(nodes);
        let lasts_ms = rng.between(OUTAGE_MS.0, OUTAGE_MS.1);
        if let Some(at_ms) = start_within(&mut rng, end_ms, lasts_ms) {
            let at = Duration::from_millis(at_ms);
            let down = Duration::from_millis(lasts_ms);
            if rng.below(2) == 0 {
                events.push(Event { at, fault: Fault::Crash { node, torn: rng.next_u64(), down } });
            } else {
                let others: Vec<u64> = nodes.iter().copied().filter(|other| *other != node).collect();
                events.push(Event { at, fault: Fault::Partition { node, others: others.clone() } });
                events.push(Event { at: at + down, fault: Fault::Repair { node, others } });
            }
        }
    }
    if rng.below(2) == 0 {
        let node = *rng.pick(nodes);
        let away_ms = rng.between(AWAY_MS.0, AWAY_MS.1);
        if let Some(at_ms) = start_within(&mut rng, end_ms, away_ms) {
            events.push(Event { at: Duration::from_millis(at_ms), fault: Fault::RemoveVoter { node } });
            events.push(Event { at: Duration::from_millis(at_ms + away_ms), fault: Fault::AddVoter { node } });
        }
    }
    events
}

/// A start for something that lasts `lasts_ms` and must be over by `end_ms`.
fn start_within(rng: &mut Rng, end_ms: u64, lasts_ms: u64) -> Option<u64> {
    let latest = end_ms.checked_sub(lasts_ms).filter(|latest| *latest >= FIRST_MS)?;
    Some(rng.between(FIRST_MS, latest))
}

/// One membership change for the admin host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    Remove(u64),
    AddBack(u64),
}

/// The admin host's queue of membership changes and what came of them,
/// shared between the simulation's loop and the host (both on the
/// simulation's thread).
#[derive(Clone, Default)]
pub(crate) struct Admin {
    queue: Rc<RefCell<VecDeque<Change>>>,
    busy: Rc<RefCell<bool>>,
    outcomes: Rc<RefCell<Vec<Outcome>>>,
}

/// What came of one membership change.
pub(crate) struct Outcome {
    /// One line for the fault log (so for the trace hash).
    pub line: String,
    /// Whether the admin gave up on it (a stuck membership change).
    pub gave_up: bool,
}

impl Admin {
    /// Queues the change `fault` asks for; false if it is no membership change.
    pub(crate) fn queue(&self, fault: &Fault) -> bool {
        let change = match fault {
            Fault::RemoveVoter { node } => Change::Remove(*node),
            Fault::AddVoter { node } => Change::AddBack(*node),
            _ => return false,
        };
        self.queue.borrow_mut().push_back(change);
        true
    }

    /// Whether every queued change was carried out or given up.
    pub(crate) fn idle(&self) -> bool {
        self.queue.borrow().is_empty() && !*self.busy.borrow()
    }

    /// The outcomes since the last call.
    pub(crate) fn take_outcomes(&self) -> Vec<Outcome> {
        std::mem::take(&mut *self.outcomes.borrow_mut())
    }

    /// Starts the admin host `name`: it carries out the queued changes one
    /// at a time, through the SDK calls `gavel cluster` makes, against
    /// `nodes` (`host:port`, following the leader).
    pub(crate) fn start(&self, sim: &mut turmoil::Sim<'_>, name: &str, nodes: Vec<String>, seed: u64) {
        let admin = self.clone();
        sim.client(name, async move {
            let config = ClientConfig {
                call_timeout: ADMIN_CALL_TIMEOUT,
                retry_budget: ADMIN_CALL_TIMEOUT * 2,
                connect_timeout: Duration::from_millis(500),
                follow_leader: true,
                tls: None,
                token: None,
                jitter_seed: Some(Rng::new(seed).fork(0xad).next_u64()),
                dial: Some(crate::net::dial()),
            };
            let client = Client::with_config(&nodes, config)?;
            loop {
                let next = {
                    let next = admin.queue.borrow_mut().pop_front();
                    *admin.busy.borrow_mut() = next.is_some();
                    next
                };
                match next {
                    Some(change) => {
                        let outcome = carry_out(&client, &nodes, change).await;
                        admin.outcomes.borrow_mut().push(outcome);
                        *admin.busy.borrow_mut() = false;
                    }
                    None => tokio::time::sleep(Duration::from_millis(20)).await,
                }
            }
        });
    }
}

/// Carries out `change`, trying up to [`ADMIN_ATTEMPTS_MAX`] times.
async fn carry_out(client: &Client, nodes: &[String], change: Change) -> Outcome {
    let mut last_error = String::new();
    for attempt in 1..=ADMIN_ATTEMPTS_MAX {
        let done = match change {
            Change::Remove(node_id) => {
                client.remove_node(pb::RemoveNodeRequest { node_id, ..Default::default() }).await.map(|_| ())
            }
            Change::AddBack(node_id) => {
                let addr = nodes[(node_id - 1) as usize].clone();
                // Already a member (an earlier try got this far) is fine: promote.
                let added = client.add_learner(pb::AddLearnerRequest { node_id, addr, ..Default::default() }).await;
                match client.promote(pb::PromoteRequest { node_id, ..Default::default() }).await {
                    Ok(_) => Ok(()),
                    Err(error) => Err(added.err().unwrap_or(error)),
                }
            }
        };
        match done {
            Ok(()) => return Outcome { line: format!("{change:?} done (try {attempt})"), gave_up: false },
            Err(error) => last_error = error.to_string(),
        }
        tokio::time::sleep(ADMIN_RETRY_PAUSE).await;
    }
    Outcome { line: format!("{change:?} given up after {ADMIN_ATTEMPTS_MAX} tries: {last_error}"), gave_up: true }
}
