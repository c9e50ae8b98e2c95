//! Group commit of proposals: many concurrent writes travel as one log entry.
//!
//! At most one log entry from [`crate::RaftNode::write`] is in flight
//! through openraft at a time. While it is, new commands queue up, and the
//! next entry carries all of them (up to [`BATCH_COMMANDS_MAX`] commands or
//! [`BATCH_BYTES_MAX`] bytes). One in flight is classic group commit:
//! measured with `gavel-lab bench` at 64 clients (approvals, 2 cores), 1 in
//! flight gave about 2,100 lifecycles/s at 0.19 ms of node CPU per
//! operation, 2 gave 1,500–1,900 and 8 gave 1,350–1,430 (smaller batches
//! cost more CPU per operation).
//!
//! # No hand-off when idle
//!
//! A write that finds nothing in flight proposes its own command from its
//! own task and takes openraft's answer directly: no queue, no batcher task,
//! no reply channel (one client never waits for a wake-up of another task).
//! Only a write that finds an entry in flight queues. Whoever holds the
//! turn ([`Turn`]) when its entry is answered hands the queued commands to
//! a drain task, which proposes them as one entry and then the next group,
//! until the queue is empty; then the turn is free again. A cancelled
//! caller (its future dropped mid-proposal) hands the queue on just the
//! same, so queued commands never depend on another caller staying around.
//!
//! # Entry format
//!
//! A normal log entry's payload is a batch: the version byte
//! [`BATCH_FORMAT_V1`], a `u32` count, then per command a `u32` length and the
//! bytes (little-endian). A reply entry has the same shape, one reply per
//! command, in order. Every replica decodes and applies the commands of an
//! entry in order, so the application still sees one command at a time.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use openraft::errors::{
    ChangeMembershipError, ClientWriteError, ForwardReason, ForwardToLeader, RaftError as OpenraftError,
};
use openraft::raft::ClientWriteResponse;
use tokio::sync::{oneshot, OwnedSemaphorePermit, Semaphore};
// The runtime's clock, not the machine's: in the simulation it is simulated
// time, so how long a starved thread waited cannot change what happens.
use tokio::time::Instant;

use crate::storage::Raft;
use crate::typ::{Command, TypeConfig};
use crate::WriteError;

/// First byte of a batch payload. A payload with another first byte was
/// written by an incompatible version; every replica refuses it alike.
pub(crate) const BATCH_FORMAT_V1: u8 = 1;

/// Most commands in one log entry.
pub(crate) const BATCH_COMMANDS_MAX: usize = 512;

/// Most command bytes in one log entry (a single larger command still goes
/// alone). Keeps one entry, and the append-entries RPC carrying it, small.
pub(crate) const BATCH_BYTES_MAX: usize = 1024 * 1024;

/// Commands queued behind the entry in flight. Beyond this, `write` waits
/// (backpressure).
const QUEUE_COMMANDS_MAX: usize = 16 * 1024;

/// Encodes commands (or replies) as one batch payload.
pub(crate) fn encode<T: AsRef<[u8]>>(items: &[T]) -> Vec<u8> {
    let size = 5 + items.iter().map(|item| 4 + item.as_ref().len()).sum::<usize>();
    let mut out = Vec::with_capacity(size);
    out.push(BATCH_FORMAT_V1);
    out.extend_from_slice(&(items.len() as u32).to_le_bytes());
    for item in items {
        let bytes = item.as_ref();
        out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        out.extend_from_slice(bytes);
    }
    out
}

/// Decodes a batch payload into its items, borrowing from `payload`.
pub(crate) fn decode(payload: &[u8]) -> Result<Vec<&[u8]>, String> {
    let (&version, mut rest) = payload.split_first().ok_or("empty batch payload")?;
    if version != BATCH_FORMAT_V1 {
        return Err(format!("unknown batch format {version}"));
    }
    let count = take_u32(&mut rest)? as usize;
    // Each item needs at least its 4-byte length: bound the allocation by the input.
    if count > rest.len() / 4 {
        return Err(format!("batch claims {count} items in {} bytes", rest.len()));
    }
    let mut items = Vec::with_capacity(count);
    for _ in 0..count {
        let len = take_u32(&mut rest)? as usize;
        if len > rest.len() {
            return Err(format!("batch item of {len} bytes overruns the payload"));
        }
        let (item, tail) = rest.split_at(len);
        items.push(item);
        rest = tail;
    }
    if !rest.is_empty() {
        return Err(format!("{} trailing bytes after the batch", rest.len()));
    }
    Ok(items)
}

fn take_u32(rest: &mut &[u8]) -> Result<u32, String> {
    if rest.len() < 4 {
        return Err("truncated batch".to_string());
    }
    let (head, tail) = rest.split_at(4);
    *rest = tail;
    Ok(u32::from_le_bytes([head[0], head[1], head[2], head[3]]))
}

/// A command's answer, and when it was sent (for the `reply` stage).
type Answer = (Result<Vec<u8>, WriteError>, Instant);

/// One queued command waiting for its reply.
struct Pending {
    command: Vec<u8>,
    queued: Instant,
    reply: oneshot::Sender<Answer>,
    /// Its place in the queue, given back when a batch takes it.
    _room: OwnedSemaphorePermit,
}

struct State {
    /// An entry is in flight (someone holds the [`Turn`]).
    proposing: bool,
    /// Commands for the next entry; non-empty only while `proposing`.
    queue: VecDeque<Pending>,
}

impl State {
    /// The next batch from the front of the queue, within the entry limits.
    fn take_batch(&mut self) -> Vec<Pending> {
        let mut bytes = 0;
        let mut batch = Vec::new();
        while batch.len() < BATCH_COMMANDS_MAX && (batch.is_empty() || bytes < BATCH_BYTES_MAX) {
            let Some(next) = self.queue.pop_front() else { break };
            bytes += next.command.len();
            batch.push(next);
        }
        batch
    }
}

struct Shared {
    raft: Raft,
    state: Mutex<State>,
    room: Arc<Semaphore>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Every critical section is a few infallible steps: a poisoned lock
        // still holds a consistent state.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The handle `RaftNode::write` uses.
pub(crate) struct Batcher {
    shared: Arc<Shared>,
}

impl Batcher {
    /// A batcher proposing through `raft`.
    pub(crate) fn new(raft: Raft) -> Batcher {
        let state = State { proposing: false, queue: VecDeque::new() };
        let room = Arc::new(Semaphore::new(QUEUE_COMMANDS_MAX));
        Batcher { shared: Arc::new(Shared { raft, state: Mutex::new(state), room }) }
    }

    /// Proposes `command` (alone at once when nothing is in flight, else in
    /// the next batch) and waits for its own reply.
    pub(crate) async fn write(&self, command: Vec<u8>) -> Result<Vec<u8>, WriteError> {
        let queued = Instant::now();
        let mut room = None;
        let route = loop {
            {
                let mut state = self.shared.lock();
                if !state.proposing {
                    state.proposing = true;
                    break Route::Alone(command);
                }
                if let Some(room) = room.take().or_else(|| self.shared.room.clone().try_acquire_owned().ok()) {
                    let (reply, answer) = oneshot::channel();
                    state.queue.push_back(Pending { command, queued, reply, _room: room });
                    break Route::Queued(answer);
                }
            }
            // The queue is full: wait for room outside the lock, then look again.
            let permit = self.shared.room.clone().acquire_owned().await;
            room = Some(permit.map_err(|_| WriteError::Unavailable("the node is shutting down".to_string()))?);
        };
        let stats = crate::stats::stats();
        let answer = match route {
            Route::Queued(answer) => answer,
            Route::Alone(command) => {
                // This call holds the turn: its command goes alone, now.
                let turn = Turn { shared: Some(self.shared.clone()) };
                stats.entry_commands.observe(1);
                stats.stages.batcher.observe_duration(queued.elapsed());
                let result = propose(&self.shared.raft, vec![command]).await;
                let answered = Instant::now();
                // Whoever queued meanwhile is proposed next, by a drain task.
                drop(turn);
                let result = result.and_then(|mut answers| {
                    answers.pop().ok_or_else(|| WriteError::Unavailable("no reply for the command".to_string()))
                });
                stats.stages.reply.observe_duration(answered.elapsed());
                return result;
            }
        };
        let (result, sent) =
            answer.await.map_err(|_| WriteError::Unavailable("the node stopped before answering".to_string()))?;
        stats.stages.reply.observe_duration(sent.elapsed());
        result
    }
}

/// How one write goes: alone (nothing was in flight) or in the queue.
enum Route {
    Alone(Vec<u8>),
    Queued(oneshot::Receiver<Answer>),
}

/// The right to propose the one entry in flight. Dropping it without
/// [`Turn::next_batch`] having given it up (the entry was answered, or the
/// holder's future was dropped) hands the queued commands to a drain task.
struct Turn {
    /// `None` once the turn was given up.
    shared: Option<Arc<Shared>>,
}

impl Turn {
    /// The next batch to propose, or `None` after giving the turn up
    /// because nothing is queued.
    fn next_batch(&mut self) -> Option<Vec<Pending>> {
        let mut state = self.shared.as_ref()?.lock();
        let batch = state.take_batch();
        if batch.is_empty() {
            state.proposing = false;
            drop(state);
            self.shared = None;
            return None;
        }
        Some(batch)
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let Some(batch) = self.next_batch() else { return };
        let Some(shared) = self.shared.take() else { return };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                // The drain task holds the turn from here on, polled or not:
                // dropped unpolled (the runtime is shutting down), it hands on again.
                let turn = Turn { shared: Some(shared) };
                runtime.spawn(drain(turn, batch));
            }
            Err(_) => {
                // No runtime left to propose on: answer everyone queued.
                let mut state = shared.lock();
                state.proposing = false;
                let queued = batch.into_iter().chain(state.queue.drain(..));
                fail_all(
                    queued.map(|pending| pending.reply),
                    WriteError::Unavailable("the node is shutting down".into()),
                );
            }
        }
    }
}

/// Proposes queued batches one after another until the queue is empty.
async fn drain(mut turn: Turn, first: Vec<Pending>) {
    let Some(shared) = turn.shared.clone() else { return };
    let mut batch = first;
    loop {
        propose_batch(&shared.raft, batch).await;
        match turn.next_batch() {
            Some(next) => batch = next,
            None => return,
        }
    }
}

/// Proposes one queued batch and hands each command its reply (or the shared error).
async fn propose_batch(raft: &Raft, batch: Vec<Pending>) {
    let stats = crate::stats::stats();
    stats.entry_commands.observe(batch.len() as u64);
    for pending in &batch {
        stats.stages.batcher.observe_duration(pending.queued.elapsed());
    }
    let (commands, replies): (Vec<Vec<u8>>, Vec<_>) =
        batch.into_iter().map(|pending| (pending.command, pending.reply)).unzip();
    match propose(raft, commands).await {
        Ok(answers) => {
            for (reply, answer) in replies.into_iter().zip(answers) {
                // The caller may have given up waiting; the command is applied either way.
                let _ = reply.send((Ok(answer), Instant::now()));
            }
        }
        Err(error) => fail_all(replies, error),
    }
}

/// Proposes `commands` as one log entry; their replies in order.
async fn propose(raft: &Raft, commands: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>, WriteError> {
    let count = commands.len();
    // The encoded entry is all that travels on; free the separate copies first.
    let payload = encode(&commands);
    drop(commands);
    let proposed = Instant::now();
    // The payload is cloned per proposal so that a refusal can be proposed again.
    let patience = Duration::from_millis(raft.config().election_timeout_max);
    let outcome = propose_patiently(patience, || raft.client_write(Command(payload.clone())), lease_pending).await;
    crate::stats::stats().stages.commit.observe_duration(proposed.elapsed());
    let response = outcome.map_err(client_write_error)?;
    match decode(&response.data.0) {
        Ok(answers) if answers.len() == count => Ok(answers.into_iter().map(<[u8]>::to_vec).collect()),
        Ok(answers) => Err(WriteError::Unavailable(format!("{} replies for {count} commands", answers.len()))),
        Err(error) => Err(WriteError::Unavailable(format!("undecodable batch reply: {error}"))),
    }
}

/// How soon a proposal refused for a reason that clears by itself is made again.
const REFUSAL_RETRY_INTERVAL: Duration = Duration::from_millis(5);

/// What `client_write`, `add_learner` and `change_membership` answer.
pub(crate) type Proposed =
    Result<ClientWriteResponse<TypeConfig>, OpenraftError<TypeConfig, ClientWriteError<TypeConfig>>>;

/// Whether openraft refused a proposal because this leader's lease waits
/// for a quorum (`ForwardReason::LeaseExpired`): openraft 0.10 refuses
/// writes and membership changes on a leader that no quorum has
/// acknowledged within `election_timeout_max`, which is every newly
/// elected leader until a follower's first answer, one round trip after
/// its election, and a leader whose followers answered late.
pub(crate) fn lease_pending(refusal: &ClientWriteError<TypeConfig>) -> bool {
    matches!(refusal, ClientWriteError::ForwardToLeader(forward) if forward.reason == ForwardReason::LeaseExpired)
}

/// Makes the proposal `propose` makes, and again every
/// [`REFUSAL_RETRY_INTERVAL`] while openraft refuses it for a reason that
/// `passing` says clears by itself, for at most `patience`
/// (`election_timeout_max`). Such refusals come before anything is appended,
/// so proposing again is safe. After `patience` the refusal stands: a leader
/// no quorum answers for that long is cut off and steps down, and the caller
/// is told to retry elsewhere. Patience is counted on the runtime's clock
/// (simulated time in the simulation): the machine's clock made a seed's
/// outcome depend on how long its thread was starved.
pub(crate) async fn propose_patiently<F, Fut>(
    patience: Duration,
    propose: F,
    passing: impl Fn(&ClientWriteError<TypeConfig>) -> bool,
) -> Proposed
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Proposed>,
{
    let started = Instant::now();
    loop {
        match propose().await {
            Err(OpenraftError::APIError(refusal)) if passing(&refusal) && started.elapsed() < patience => {
                tokio::time::sleep(REFUSAL_RETRY_INTERVAL).await;
            }
            outcome => return outcome,
        }
    }
}

fn fail_all(replies: impl IntoIterator<Item = oneshot::Sender<Answer>>, error: WriteError) {
    for reply in replies {
        let _ = reply.send((Err(error.clone()), Instant::now()));
    }
}

/// A write refused by a follower: the leader it names, to send it to.
pub(crate) fn forward_to_leader(forward: ForwardToLeader<TypeConfig>) -> WriteError {
    WriteError::ForwardToLeader { leader_id: forward.leader_id, leader_addr: forward.leader_node.map(|node| node.addr) }
}

/// A refused client write (a command or a membership change) as the
/// [`WriteError`] the node's callers see.
pub(crate) fn client_write_error(e: OpenraftError<TypeConfig, ClientWriteError<TypeConfig>>) -> WriteError {
    match e {
        OpenraftError::APIError(ClientWriteError::ForwardToLeader(forward)) => forward_to_leader(forward),
        // The leader changed before the entry committed: it may still commit
        // (or not), like a timed-out write. Retryable, with the request id
        // the application deduplicates on.
        OpenraftError::APIError(ClientWriteError::LogEntryDiscarded(forward)) => WriteError::Unavailable(format!(
            "the leader changed before the write committed; it may or may not take effect (leader now {:?})",
            forward.leader_id
        )),
        // Gavel proposes no conditional writes.
        OpenraftError::APIError(ClientWriteError::PreconditionFailed(e)) => WriteError::Invalid(e.to_string()),
        // Another membership change is still being committed: retry later.
        OpenraftError::APIError(ClientWriteError::ChangeMembershipError(ChangeMembershipError::InProgress(e))) => {
            WriteError::Unavailable(e.to_string())
        }
        OpenraftError::APIError(ClientWriteError::ChangeMembershipError(e)) => WriteError::Invalid(e.to_string()),
        OpenraftError::Fatal(fatal) => WriteError::Unavailable(format!("raft is not running: {fatal}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_round_trips_in_order_including_empty_commands() {
        let commands = vec![b"first".to_vec(), Vec::new(), vec![0xff; 300]];
        let payload = encode(&commands);
        assert_eq!(payload[0], BATCH_FORMAT_V1);
        let decoded = decode(&payload).expect("decode");
        assert_eq!(decoded, commands.iter().map(Vec::as_slice).collect::<Vec<_>>());
        assert_eq!(decode(&encode::<Vec<u8>>(&[])).expect("empty batch"), Vec::<&[u8]>::new());
    }

    #[test]
    fn malformed_batches_are_refused_without_panicking() {
        let good = encode(&[b"abc".to_vec(), b"de".to_vec()]);
        for cut in 0..good.len() {
            assert!(decode(&good[..cut]).is_err(), "a batch cut at {cut} bytes must be refused");
        }
        let mut trailing = good.clone();
        trailing.push(0);
        assert!(decode(&trailing).is_err());
        let mut other_version = good;
        other_version[0] = 2;
        assert!(decode(&other_version).is_err_and(|error| error.contains("unknown batch format")));
        // A huge claimed count must not allocate: refused against the input size.
        let mut huge = vec![BATCH_FORMAT_V1];
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode(&huge).is_err());
    }

    /// A proposal that takes the machine's time but none of the runtime's (a
    /// starved thread in the simulation) does not use up the patience: only
    /// the runtime's clock counts, so a seed's run cannot depend on load.
    /// With `std::time::Instant` it gave up after the third call.
    #[tokio::test(start_paused = true)]
    async fn patience_is_counted_on_the_runtimes_clock_not_the_machines() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let calls = AtomicUsize::new(0);
        let patience = Duration::from_millis(50);
        let outcome = propose_patiently(
            patience,
            || async {
                calls.fetch_add(1, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(20));
                Err(OpenraftError::APIError(ClientWriteError::ForwardToLeader(ForwardToLeader::empty())))
            },
            |_| true,
        )
        .await;
        assert!(outcome.is_err(), "the refusal stands after the patience");
        // 0, 5, ..., 50 ms of runtime time: eleven proposals.
        let expected = (patience.as_millis() / REFUSAL_RETRY_INTERVAL.as_millis()) as usize + 1;
        assert_eq!(calls.load(Ordering::SeqCst), expected);
    }
}
