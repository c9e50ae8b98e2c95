//! The leader's resumes waiting for a decision (decision 0108).
//!
//! A `ResumeAndWait` with `await_decision`, on an approval still pending,
//! registers here. A decision of that approval (`DecideApproval`,
//! `CastVote`) proposed on this node claims the oldest waiting resume of it
//! ([`Resumes::carry`]) and is proposed as one `Command::DecideThenResume`:
//! the apply that decides also runs the resume, under its own request id
//! and caller, and the claimed resume reads its answer by request id when
//! the decision is answered. A governed call then spends no log entry of
//! its own between the person's "yes" and the tool's lease.
//!
//! Nothing here is replicated: a resume that was not carried (a decision
//! proposed elsewhere, or before the resume registered, or a leader change)
//! sees the decision applied and proposes itself, as without this.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use gavel_core::{Caller, Command, DecideThenResume};
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::Notify;

/// This node's waiting resumes, by approval. Cheap to clone.
#[derive(Clone, Default)]
pub struct Resumes {
    registry: Arc<Mutex<Registry>>,
    /// `gavel_resumes_waiting`: the resumes registered now.
    registered: Gauge,
}

#[derive(Default)]
struct Registry {
    next_id: u64,
    entries: BTreeMap<u64, Entry>,
    /// Unclaimed resumes per approval id, oldest first.
    waiting: BTreeMap<String, VecDeque<u64>>,
}

struct Entry {
    approval_id: String,
    resume: WaitingResume,
    phase: Phase,
    signal: Arc<Notify>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Claimable.
    Waiting,
    /// Carried by a decision in flight.
    Claimed,
    /// That decision was answered (or given up): read the resume's answer.
    Answered,
}

/// A resume as it waits: what carrying it needs.
#[derive(Debug, Clone)]
pub struct WaitingResume {
    /// Who sent it, as this node authenticated it.
    pub caller: Option<Caller>,
    /// Its request id: the carried resume is remembered under it.
    pub request_id: String,
    /// The `Resume` it would propose itself.
    pub command: Command,
}

/// Where a registered resume's wait stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Claimable; nothing carried it yet.
    Waiting,
    /// A decision carries it; its answer is not in yet.
    Carried,
    /// The decision that carried it was answered: read the answer.
    Answered,
}

impl Resumes {
    /// An empty registry counting the resumes it holds in `registered`.
    pub fn new(registered: Gauge) -> Resumes {
        Resumes { registry: Arc::default(), registered }
    }

    fn registry(&self) -> MutexGuard<'_, Registry> {
        self.registry.lock().expect("the resumes' lock is never held across a panic")
    }

    /// Registers `resume` as waiting for a decision of `approval_id`
    /// (claimable at once); it leaves when the registration drops.
    pub fn register(&self, approval_id: &str, resume: WaitingResume) -> Registration {
        let signal = Arc::new(Notify::new());
        let mut registry = self.registry();
        let id = registry.next_id;
        registry.next_id += 1;
        let entry =
            Entry { approval_id: approval_id.to_string(), resume, phase: Phase::Waiting, signal: signal.clone() };
        registry.entries.insert(id, entry);
        registry.waiting.entry(approval_id.to_string()).or_default().push_back(id);
        self.registered.set(registry.entries.len() as i64);
        Registration { resumes: self.clone(), id, signal }
    }

    /// Wraps a decision of an approval some resume waits for in a
    /// `DecideThenResume` carrying the oldest of them, which stays claimed
    /// until the returned claim drops (once the decision is answered or
    /// given up). Any other command comes back as it was.
    pub fn carry(&self, command: Command) -> (Command, Option<Claim>) {
        let approval_id = match &command {
            Command::DecideApproval { approval_id, .. } | Command::CastVote { approval_id, .. } => approval_id,
            _ => return (command, None),
        };
        let mut registry = self.registry();
        let Some(id) = registry.claim(approval_id) else { return (command, None) };
        let resume = registry.entries[&id].resume.clone();
        drop(registry);
        let chained = DecideThenResume {
            decide: command,
            resume: resume.command,
            resume_request_id: resume.request_id,
            resumer: resume.caller,
        };
        (Command::DecideThenResume(Box::new(chained)), Some(Claim { resumes: self.clone(), id }))
    }

    /// Resumes registered now (for a test's or an operator's eye).
    pub fn len(&self) -> usize {
        self.registry().entries.len()
    }

    /// True when none is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Registry {
    fn claim(&mut self, approval_id: &str) -> Option<u64> {
        let ids = self.waiting.get_mut(approval_id)?;
        let id = ids.pop_front()?;
        if ids.is_empty() {
            self.waiting.remove(approval_id);
        }
        self.entries.get_mut(&id).expect("a listed resume is registered").phase = Phase::Claimed;
        Some(id)
    }

    fn delist(&mut self, id: u64) {
        let Some(entry) = self.entries.get(&id) else { return };
        if let Some(ids) = self.waiting.get_mut(&entry.approval_id) {
            ids.retain(|listed| *listed != id);
            if ids.is_empty() {
                self.waiting.remove(&entry.approval_id);
            }
        }
    }
}

/// A resume's place in the registry; it leaves when this drops.
pub struct Registration {
    resumes: Resumes,
    id: u64,
    signal: Arc<Notify>,
}

impl Registration {
    /// Where the wait stands now.
    pub fn stage(&self) -> Stage {
        match self.resumes.registry().entries[&self.id].phase {
            Phase::Waiting => Stage::Waiting,
            Phase::Claimed => Stage::Carried,
            Phase::Answered => Stage::Answered,
        }
    }

    /// Stops being claimable (off the lists, so no decision can claim it).
    /// True when nothing carried it; false when a decision already did
    /// (then wait for [`Stage::Answered`]).
    pub fn leave(&self) -> bool {
        let mut registry = self.resumes.registry();
        match registry.entries[&self.id].phase {
            Phase::Waiting => {
                registry.delist(self.id);
                true
            }
            Phase::Claimed | Phase::Answered => false,
        }
    }

    /// Claimable again, after a decision that carried it ran no resume
    /// (refused, lost, or a vote that left the approval pending).
    pub fn rearm(&self) {
        let mut registry = self.resumes.registry();
        let entry = registry.entries.get_mut(&self.id).expect("registered");
        entry.phase = Phase::Waiting;
        let approval_id = entry.approval_id.clone();
        registry.waiting.entry(approval_id).or_default().push_back(self.id);
    }

    /// Returns once something may have changed for this resume: it was
    /// claimed or answered. Pair with the applied-state watch.
    pub async fn changed(&self) {
        self.signal.notified().await;
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut registry = self.resumes.registry();
        registry.delist(self.id);
        registry.entries.remove(&self.id);
        self.resumes.registered.set(registry.entries.len() as i64);
    }
}

/// A resume carried by a decision in flight; dropping it (the decision
/// was answered, refused or given up) tells the resume to read its answer.
pub struct Claim {
    resumes: Resumes,
    id: u64,
}

impl Drop for Claim {
    fn drop(&mut self) {
        let mut registry = self.resumes.registry();
        if let Some(entry) = registry.entries.get_mut(&self.id) {
            entry.phase = Phase::Answered;
            entry.signal.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gavel_core::ApprovalStatus;

    fn resume(request_id: &str) -> WaitingResume {
        let command =
            Command::Resume { approval_id: "apr_e1".to_string(), execution_id: "e1".to_string(), input_json: None };
        WaitingResume { caller: None, request_id: request_id.to_string(), command }
    }

    fn decide(approval_id: &str) -> Command {
        Command::DecideApproval {
            approval_id: approval_id.to_string(),
            status: ApprovalStatus::Approved,
            approver: gavel_core::Actor::new("bob", gavel_core::ActorKind::User),
            comment: None,
            caller_now_ms: None,
            terms_hash: None,
        }
    }

    #[test]
    fn a_decision_carries_the_oldest_resume_of_its_approval_once() {
        let resumes = Resumes::default();
        let first = resumes.register("apr_e1", resume("r-1"));
        let second = resumes.register("apr_e1", resume("r-2"));
        let (other, claim) = resumes.carry(decide("apr_other"));
        assert!(matches!(other, Command::DecideApproval { .. }) && claim.is_none());

        let (command, claim) = resumes.carry(decide("apr_e1"));
        let Command::DecideThenResume(chained) = command else { panic!("not carried: {command:?}") };
        assert_eq!(chained.resume_request_id, "r-1");
        assert_eq!((first.stage(), second.stage()), (Stage::Carried, Stage::Waiting));
        assert!(!first.leave(), "a carried resume waits for the answer");
        drop(claim);
        assert_eq!(first.stage(), Stage::Answered);

        // The second left on its own: no decision carries it any more.
        assert!(second.leave());
        let (command, claim) = resumes.carry(decide("apr_e1"));
        assert!(matches!(command, Command::DecideApproval { .. }) && claim.is_none());
        drop((first, second));
        assert!(resumes.is_empty());
    }
}
