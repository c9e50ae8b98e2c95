//! The leader's waiting worker polls (decision 0107): who waits on which
//! queue, oldest first. Two things use it.
//!
//! - **The hand-off.** A command that will create an execution (a `Submit`
//!   needing no approval, a `Resume`) claims the oldest poll waiting on its
//!   queue ([`Waiters::hand_off`]) and is proposed wrapped in a
//!   `Command::Handoff` naming that poll's next grant attempt, so the apply
//!   that creates the execution leases it to the poll's worker, remembered
//!   under the poll's own grant request id. The claimed poll waits for the
//!   command's answer and reads its grant like a retry would
//!   (`State::replay_for`): no second proposal, no poll interval.
//! - **Waking.** After each apply, one pump task per node (running while
//!   polls wait) wakes only as many polls as there are executions ready in
//!   their queues, not every poll on every apply.
//!
//! Nothing here is replicated; losing it (a restart, a leader change) costs
//! only latency, never a lease: a claimed poll finds a committed grant by
//! its request id, and a poll's own grants are as before.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use gavel_core::{Caller, Command, Handoff};
use gavel_store::reads::ReadPort;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::Notify;
use tokio::time::Instant;

/// How long past its own deadline a claimed poll waits for the answer of
/// the command that claimed it: longer than a proposal may take
/// ([`crate::node::RAFT_WAIT`]), so it is the answer, not this, that ends
/// the wait; the bound only keeps a poll from waiting forever on a bug.
const CLAIM_ANSWER_WAIT: Duration = Duration::from_secs(12);

/// The registry of this node's waiting polls. Cheap to clone.
#[derive(Clone)]
pub struct Waiters {
    shared: Arc<Shared>,
}

struct Shared {
    registry: Mutex<Registry>,
    reads: ReadPort,
    /// `gavel_polls_waiting`: the polls registered now.
    registered: Gauge,
    /// Wakes the pump when the last poll leaves, so that it stops.
    idle: Notify,
}

#[derive(Default)]
struct Registry {
    next_id: u64,
    /// Every registered poll, by id.
    polls: BTreeMap<u64, Entry>,
    /// The ids of the polls waiting (claimable, wakeable) on each queue,
    /// oldest first; a poll of several queues is in each of their lists.
    waiting: BTreeMap<String, VecDeque<u64>>,
    /// Tasks asked for by polls woken for a queue that have not yet come
    /// back: the ready executions the pump counts as spoken for.
    woken_tasks: BTreeMap<String, usize>,
    pump_running: bool,
}

struct Entry {
    poll: WaitingPoll,
    phase: Phase,
    /// The next grant attempt this poll has not used.
    next_attempt: u32,
    /// The queue the pump woke this poll for, and the tasks it counted.
    woken_for: Option<(String, usize)>,
    signal: Arc<Notify>,
}

/// Where a registered poll is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting: in its queues' lists, claimable and wakeable.
    Waiting,
    /// Woken by the pump: ready work is in one of its queues.
    Woken,
    /// Acting on its own (reading, proposing a grant).
    Busy,
    /// Claimed by a hand-off of this grant attempt, whose command is in flight.
    Claimed(u32),
    /// The command of the hand-off of this attempt was answered (or given up).
    Answered(u32),
}

/// A poll as it waits: what a hand-off to it needs.
#[derive(Debug, Clone)]
pub struct WaitingPoll {
    /// Who sent it, as this node authenticated it.
    pub caller: Option<Caller>,
    /// Its request id (the grant attempts' ids derive from it).
    pub request_id: String,
    /// The polling worker.
    pub worker_id: String,
    /// Its queues, in order.
    pub queues: Vec<String>,
    /// At most this many tasks.
    pub tasks_max: u32,
    /// When it gives up, by this node's wall clock.
    pub deadline_ms: u64,
}

/// What ended a registered poll's wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// Work is ready in one of its queues (or it may be: read and see).
    Ready,
    /// A hand-off of this grant attempt was answered: read its grant.
    HandedOff(u32),
    /// Its deadline passed with no hand-off in flight; it is no longer
    /// claimable.
    Deadline,
}

/// What a poll about to propose a grant of its own may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Turn {
    /// Propose grant attempt this.
    Grant(u32),
    /// A hand-off claimed it first: wait for its answer.
    Claimed,
}

impl Waiters {
    /// An empty registry over this node's read port, counting the polls
    /// it holds in `registered`.
    pub fn new(reads: ReadPort, registered: Gauge) -> Waiters {
        let shared = Shared { registry: Mutex::new(Registry::default()), reads, registered, idle: Notify::new() };
        Waiters { shared: Arc::new(shared) }
    }

    fn registry(&self) -> MutexGuard<'_, Registry> {
        self.shared.registry.lock().expect("the waiters' lock is never held across a panic")
    }

    /// Registers a poll as waiting on its queues (claimable at once); it
    /// leaves the registry when the returned registration drops.
    pub fn register(&self, poll: WaitingPoll) -> Registration {
        let signal = Arc::new(Notify::new());
        let mut registry = self.registry();
        let id = registry.next_id;
        registry.next_id += 1;
        let queues = poll.queues.clone();
        let entry = Entry { poll, phase: Phase::Waiting, next_attempt: 0, woken_for: None, signal: signal.clone() };
        registry.polls.insert(id, entry);
        registry.enlist(id, &queues);
        self.shared.registered.set(registry.polls.len() as i64);
        if !registry.pump_running {
            registry.pump_running = true;
            tokio::spawn(pump(self.clone()));
        }
        Registration { waiters: self.clone(), id, signal }
    }

    /// Wraps `command` in a hand-off to the oldest poll waiting on the queue
    /// it will put a new execution in (`State::queue_readied_by`), if one
    /// waits there past `now_ms`; that poll is claimed until the returned
    /// claim drops, which the caller does once the command is answered (or
    /// given up). Otherwise `command` comes back as it was.
    pub fn hand_off(&self, command: Command, now_ms: u64) -> (Command, Option<Claim>) {
        // Most commands create nothing: they take neither lock.
        let creates = matches!(command, Command::Submit(_) | Command::Resume { .. } | Command::DecideThenResume(_));
        if !creates || self.registry().waiting.is_empty() {
            return (command, None);
        }
        let Some(queue) = self.shared.reads.read(|state| state.queue_readied_by(&command).map(str::to_string)) else {
            return (command, None);
        };
        let mut registry = self.registry();
        let Some((id, attempt, poll)) = registry.claim(&queue, now_ms) else { return (command, None) };
        let handoff = Handoff {
            command,
            grant_request_id: gavel_core::ids::grant_request_id(&poll.request_id, attempt),
            worker: poll.caller,
            worker_id: poll.worker_id,
            queues: poll.queues,
            tasks_max: poll.tasks_max,
            poll_deadline_ms: poll.deadline_ms,
        };
        (Command::Handoff(Box::new(handoff)), Some(Claim { waiters: self.clone(), id }))
    }

    /// Wakes, for each queue polls wait on, as many of its oldest waiting
    /// polls as the executions ready there (less those already woken for)
    /// call for. Returns false once no poll is registered at all.
    fn wake_ready(&self) -> bool {
        let queues: Vec<String> = {
            let registry = self.registry();
            if registry.polls.is_empty() {
                return false;
            }
            registry.waiting.keys().cloned().collect()
        };
        if queues.is_empty() {
            return true;
        }
        let ready: Vec<usize> =
            self.shared.reads.read(|state| queues.iter().map(|queue| state.ready_count(queue)).collect());
        let mut registry = self.registry();
        for (queue, ready) in queues.iter().zip(ready) {
            let mut unclaimed = ready.saturating_sub(registry.woken_tasks.get(queue).copied().unwrap_or(0));
            while unclaimed > 0 {
                let Some(id) = registry.waiting.get(queue).and_then(|ids| ids.front().copied()) else { break };
                let asked = registry.polls[&id].poll.tasks_max.max(1) as usize;
                registry.delist(id);
                *registry.woken_tasks.entry(queue.clone()).or_default() += asked;
                let entry = registry.polls.get_mut(&id).expect("a listed poll is registered");
                entry.phase = Phase::Woken;
                entry.woken_for = Some((queue.clone(), asked));
                entry.signal.notify_one();
                unclaimed = unclaimed.saturating_sub(asked);
            }
        }
        true
    }
}

impl Registry {
    /// Lists poll `id` as waiting on each of `queues`.
    fn enlist(&mut self, id: u64, queues: &[String]) {
        for queue in queues {
            let ids = self.waiting.entry(queue.clone()).or_default();
            if !ids.contains(&id) {
                ids.push_back(id);
            }
        }
    }

    /// Takes poll `id` off every list it waits in.
    fn delist(&mut self, id: u64) {
        let Some(entry) = self.polls.get(&id) else { return };
        for queue in &entry.poll.queues {
            if let Some(ids) = self.waiting.get_mut(queue) {
                ids.retain(|listed| *listed != id);
                if ids.is_empty() {
                    self.waiting.remove(queue);
                }
            }
        }
    }

    /// Forgets what the pump counted for poll `id`'s wake-up.
    fn settle_wake(&mut self, id: u64) {
        let Some((queue, asked)) = self.polls.get_mut(&id).and_then(|entry| entry.woken_for.take()) else { return };
        if let Some(count) = self.woken_tasks.get_mut(&queue) {
            *count = count.saturating_sub(asked);
            if *count == 0 {
                self.woken_tasks.remove(&queue);
            }
        }
    }

    /// Claims the oldest poll waiting on `queue` whose deadline is after
    /// `now_ms`, for its next grant attempt.
    fn claim(&mut self, queue: &str, now_ms: u64) -> Option<(u64, u32, WaitingPoll)> {
        let ids: Vec<u64> = self.waiting.get(queue)?.iter().copied().collect();
        let id = ids.into_iter().find(|id| self.polls[id].poll.deadline_ms > now_ms)?;
        self.delist(id);
        let entry = self.polls.get_mut(&id).expect("a listed poll is registered");
        entry.phase = Phase::Claimed(entry.next_attempt);
        Some((id, entry.next_attempt, entry.poll.clone()))
    }
}

/// A poll's place in the registry; it leaves when this drops (a poll that
/// returns, fails or whose caller went away).
pub struct Registration {
    waiters: Waiters,
    id: u64,
    signal: Arc<Notify>,
}

impl Registration {
    fn with_entry<T>(&self, change: impl FnOnce(&mut Registry, u64) -> T) -> T {
        change(&mut self.waiters.registry(), self.id)
    }

    /// Before proposing a grant of its own: the attempt to propose, unless
    /// a hand-off claimed the poll first. Either way it is no longer
    /// claimable until it waits again ([`Registration::wait`]).
    pub fn begin_grant(&self) -> Turn {
        self.with_entry(|registry, id| {
            let entry = registry.polls.get_mut(&id).expect("a registration's poll is registered");
            if let Phase::Claimed(_) | Phase::Answered(_) = entry.phase {
                return Turn::Claimed;
            }
            entry.phase = Phase::Busy;
            let attempt = entry.next_attempt;
            entry.next_attempt += 1;
            registry.delist(id);
            registry.settle_wake(id);
            Turn::Grant(attempt)
        })
    }

    /// Grant attempt `attempt` is remembered by the cluster (it was handed
    /// off, with or without tasks): later attempts come after it.
    pub fn used(&self, attempt: u32) {
        self.with_entry(|registry, id| {
            let entry = registry.polls.get_mut(&id).expect("a registration's poll is registered");
            entry.next_attempt = entry.next_attempt.max(attempt + 1);
        });
    }

    /// Waits (claimable, wakeable, at the back of its queues if it was
    /// acting) to be woken, handed work, or for `deadline`. A poll claimed
    /// by a hand-off waits past its deadline for the hand-off's answer (at
    /// most [`CLAIM_ANSWER_WAIT`] more), so that a lease granted to it is
    /// not left behind.
    pub async fn wait(&self, deadline: Instant) -> Wake {
        loop {
            let claimed = self.with_entry(|registry, id| {
                let entry = registry.polls.get_mut(&id).expect("a registration's poll is registered");
                match entry.phase {
                    Phase::Answered(attempt) => {
                        entry.phase = Phase::Busy;
                        Err(Wake::HandedOff(attempt))
                    }
                    Phase::Woken => {
                        entry.phase = Phase::Busy;
                        Err(Wake::Ready)
                    }
                    Phase::Claimed(_) => Ok(true),
                    Phase::Waiting => Ok(false),
                    Phase::Busy => {
                        entry.phase = Phase::Waiting;
                        let queues = entry.poll.queues.clone();
                        registry.settle_wake(id);
                        registry.enlist(id, &queues);
                        Ok(false)
                    }
                }
            });
            let claimed = match claimed {
                Ok(claimed) => claimed,
                Err(wake) => return wake,
            };
            let until = if claimed { deadline + CLAIM_ANSWER_WAIT } else { deadline };
            tokio::select! {
                () = self.signal.notified() => continue,
                () = tokio::time::sleep_until(until) => {}
            }
            let timed_out = self.with_entry(|registry, id| {
                let entry = registry.polls.get_mut(&id).expect("a registration's poll is registered");
                match entry.phase {
                    Phase::Claimed(_) if !claimed => false,
                    Phase::Answered(_) | Phase::Woken => false,
                    _ => {
                        entry.phase = Phase::Busy;
                        registry.delist(id);
                        true
                    }
                }
            });
            if timed_out {
                return Wake::Deadline;
            }
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut registry = self.waiters.registry();
        registry.delist(self.id);
        registry.settle_wake(self.id);
        registry.polls.remove(&self.id);
        self.waiters.shared.registered.set(registry.polls.len() as i64);
        if registry.polls.is_empty() {
            self.waiters.shared.idle.notify_one();
        }
    }
}

/// A poll claimed by a hand-off in flight; dropping it (the command was
/// answered, refused or given up) tells the poll to read its grant.
pub struct Claim {
    waiters: Waiters,
    id: u64,
}

impl Drop for Claim {
    fn drop(&mut self) {
        let mut registry = self.waiters.registry();
        // A poll whose caller went away is no longer registered: a grant
        // the command made is found by a retry of the poll, or expires.
        if let Some(entry) = registry.polls.get_mut(&self.id) {
            if let Phase::Claimed(attempt) = entry.phase {
                entry.phase = Phase::Answered(attempt);
                entry.signal.notify_one();
            }
        }
    }
}

/// Wakes polls after each apply while any is registered, then stops (a
/// later poll starts it again), so an idle node keeps no task and holds no
/// watch of its state.
async fn pump(waiters: Waiters) {
    let mut applied = waiters.shared.reads.watch();
    loop {
        if !waiters.wake_ready() {
            let mut registry = waiters.registry();
            // Registered again between the check and this lock: go on.
            if registry.polls.is_empty() {
                registry.pump_running = false;
                return;
            }
            continue;
        }
        // `next_apply` marks what it saw as seen when it returns, before
        // the next pass reads: an apply during a pass wakes one more pass.
        tokio::select! {
            _ = applied.next_apply(None) => {}
            () = waiters.shared.idle.notified() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn poll(request_id: &str, queues: &[&str], deadline_ms: u64) -> WaitingPoll {
        WaitingPoll {
            caller: None,
            request_id: request_id.to_string(),
            worker_id: "w1".to_string(),
            queues: queues.iter().map(|queue| queue.to_string()).collect(),
            tasks_max: 1,
            deadline_ms,
        }
    }

    fn registered(registry: &mut Registry, waiting: WaitingPoll) -> u64 {
        let id = registry.next_id;
        registry.next_id += 1;
        let queues = waiting.queues.clone();
        let entry = Entry {
            poll: waiting,
            phase: Phase::Waiting,
            next_attempt: 0,
            woken_for: None,
            signal: Default::default(),
        };
        registry.polls.insert(id, entry);
        registry.enlist(id, &queues);
        id
    }

    #[test]
    fn a_claim_takes_the_oldest_poll_still_waiting_on_the_queue_and_only_once() {
        let mut registry = Registry::default();
        let gone = registered(&mut registry, poll("p-gone", &["a"], 100));
        let first = registered(&mut registry, poll("p-1", &["b", "a"], 1_000));
        let second = registered(&mut registry, poll("p-2", &["a"], 1_000));

        // The poll past its deadline is skipped, not claimed.
        let (id, attempt, claimed) = registry.claim("a", 500).expect("a live poll waits on a");
        assert_eq!((id, attempt, claimed.request_id.as_str()), (first, 0, "p-1"));
        assert_eq!(registry.polls[&first].phase, Phase::Claimed(0));
        // Claimed, it waits in none of its queues: no second claim, no wake-up.
        assert!(registry.claim("b", 500).is_none());
        assert_eq!(registry.claim("a", 500).map(|(id, ..)| id), Some(second));
        assert_eq!(registry.claim("a", 500).map(|(id, ..)| id), None);
        assert_eq!(registry.polls[&gone].phase, Phase::Waiting);
    }

    #[test]
    fn a_claim_names_the_next_grant_attempt_the_poll_has_not_used() {
        let mut registry = Registry::default();
        let id = registered(&mut registry, poll("p-1", &["a"], 1_000));
        registry.polls.get_mut(&id).expect("registered").next_attempt = 3;
        assert_eq!(registry.claim("a", 0).map(|(_, attempt, _)| attempt), Some(3));
    }
}
