//! The read port: the one way the edge reads replicated state, and the one
//! wake-on-apply.
//!
//! [`ReadPort`] is what `gavel-server` holds instead of the application:
//! every read of the state by a service, a long-poll, the metrics, the
//! ticker or the checkpointer is a closure given to [`ReadPort::read`] (or
//! to [`AppliedWatch::read`]), which holds the state lock for the closure
//! alone. No code outside this crate takes the lock: [`CoreApp::state`] is
//! private to the crate. Whether a read may be served at all (the leader's
//! read barrier, `gavel_raft::RaftNode::ensure_linearizable`) is the edge's
//! decision, taken before it reads through the port.
//!
//! [`AppliedWatch`] is the wake-on-apply, written once: a reader that reads
//! through its watch and then awaits [`AppliedWatch::next_apply`] is woken by
//! the first entry applied (or state restored) after that read, never misses
//! one applied between the read and the wait, and never sleeps in a loop.
//! Long-polls (`Poll`), `WatchEvents`, the ticker and the
//! checkpointer all wait this way. A reader of one execution or approval
//! (`WaitExecution`, `WaitApproval`) waits on [`RecordWatch`] instead,
//! woken only by the entries that change it.

use std::sync::Arc;

use gavel_core::{RecordId, State};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::app::CoreApp;

/// Runs `read` on the state under its lock. A panic in `read` is carried
/// on only after the lock is released normally, so it fails that one call
/// and never poisons the lock: a poisoned lock means apply broke an
/// invariant, and every later read and apply on the node would panic too.
/// A read borrows the state and changes nothing, so what it leaves is
/// whole. (`gavel audit tail --after 18446744073709551615` overflowed in a
/// read on 2026-12-07, and the node stopped serving.)
fn read_locked<T>(app: &CoreApp, read: impl FnOnce(&State) -> T) -> T {
    let state = app.state();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| read(&state)));
    drop(state);
    outcome.unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// The edge's one interface to the replicated state of this replica.
#[derive(Clone)]
pub struct ReadPort {
    app: Arc<CoreApp>,
}

/// What ended a wait for the next apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Woken {
    /// An entry was applied, or the state restored, since the last read.
    Applied,
    /// The deadline passed first.
    DeadlineReached,
}

impl ReadPort {
    /// The read port of `app`.
    pub fn new(app: Arc<CoreApp>) -> ReadPort {
        ReadPort { app }
    }

    /// Runs `read` on the state as this replica has applied it now, under the
    /// state lock. Keep `read` short: apply waits on the lock.
    pub fn read<T>(&self, read: impl FnOnce(&State) -> T) -> T {
        read_locked(&self.app, read)
    }

    /// The index of the last log entry this replica applied (0 before the
    /// first; a restored snapshot leaves it as it was until the next entry).
    pub fn applied_index(&self) -> u64 {
        self.app.applied_index()
    }

    /// The state hash, recomputed only after something was applied.
    pub fn state_hash(&self) -> String {
        self.app.state_hash()
    }

    /// Commands this replica applied whose reply came from the dedup table.
    pub fn dedup_replays(&self) -> u64 {
        self.app.dedup_replays()
    }

    /// A watch of applies, for a reader that reads, waits for the next
    /// apply and reads again. Nothing applied before this call wakes it.
    pub fn watch(&self) -> AppliedWatch {
        let mut applied = self.app.subscribe();
        applied.borrow_and_update();
        AppliedWatch { app: self.app.clone(), applied }
    }

    /// A watch of one execution's changes: like [`ReadPort::watch`], but
    /// woken only by an applied entry whose events name `execution_id` (or
    /// a restore), not by every entry. For a reader that waits for that
    /// execution alone (`WaitExecution`).
    pub fn watch_execution(&self, execution_id: &str) -> RecordWatch {
        self.watch_record(RecordId::Execution(execution_id.to_string()))
    }

    /// A watch of one approval's changes, as [`ReadPort::watch_execution`]
    /// for an approval (`WaitApproval`). Its expiry changes nothing in the
    /// log: a reader of a pending approval also wakes at its expiry.
    pub fn watch_approval(&self, approval_id: &str) -> RecordWatch {
        self.watch_record(RecordId::Approval(approval_id.to_string()))
    }

    fn watch_record(&self, record: RecordId) -> RecordWatch {
        let changed = self.app.watched().subscribe(&record);
        RecordWatch { app: self.app.clone(), record, changed }
    }
}

/// The wake-on-change of one record: [`ReadPort::watch_execution`],
/// [`ReadPort::watch_approval`].
pub struct RecordWatch {
    app: Arc<CoreApp>,
    record: RecordId,
    changed: watch::Receiver<()>,
}

impl RecordWatch {
    /// Runs `read` on the state as applied now, and marks what it saw as
    /// seen, as [`AppliedWatch::read`] does.
    pub fn read<T>(&mut self, read: impl FnOnce(&State) -> T) -> T {
        self.changed.borrow_and_update();
        read_locked(&self.app, read)
    }

    /// Waits until an entry that names the record is applied (or the
    /// state restored) after the last [`RecordWatch::read`], at most until
    /// `deadline`.
    pub async fn next_change(&mut self, deadline: Instant) -> Woken {
        // The registry holds the sender while this receiver lives.
        tokio::select! {
            changed = self.changed.changed() => match changed {
                Ok(()) => Woken::Applied,
                Err(_) => {
                    tokio::time::sleep_until(deadline).await;
                    Woken::DeadlineReached
                }
            },
            () = tokio::time::sleep_until(deadline) => Woken::DeadlineReached,
        }
    }
}

impl Drop for RecordWatch {
    fn drop(&mut self) {
        self.app.watched().unsubscribe(&self.record);
    }
}

/// The wake-on-apply: see the module documentation.
pub struct AppliedWatch {
    app: Arc<CoreApp>,
    applied: watch::Receiver<u64>,
}

impl AppliedWatch {
    /// Runs `read` on the state as applied now, and marks what it saw as
    /// seen: the next [`AppliedWatch::next_apply`] waits for a later apply.
    pub fn read<T>(&mut self, read: impl FnOnce(&State) -> T) -> T {
        // Marked before the lock is taken: an apply that lands between the
        // two is in what `read` sees, and wakes the next wait once more,
        // which costs a read and never loses a wake-up.
        self.applied.borrow_and_update();
        read_locked(&self.app, read)
    }

    /// Waits until an entry is applied (or the state restored) after the
    /// last [`AppliedWatch::read`] (or since the watch was made), at most
    /// until `deadline` if one is given. Returns at once if one already was.
    pub async fn next_apply(&mut self, deadline: Option<Instant>) -> Woken {
        // The watch holds the application, which holds the sender, so the
        // channel never closes under it; were it closed, the wait would
        // still end, at the deadline, rather than spin.
        let applied = async {
            match self.applied.changed().await {
                Ok(()) => Woken::Applied,
                Err(_) => std::future::pending().await,
            }
        };
        let Some(deadline) = deadline else { return applied.await };
        tokio::select! {
            woken = applied => woken,
            () = tokio::time::sleep_until(deadline) => Woken::DeadlineReached,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use gavel_core::{CapabilitySpec, Command, Envelope, Risk, SideEffect};
    use gavel_raft::Application;

    use super::*;

    /// Applies the registration of capability `id` at `log_index`.
    fn register(app: &CoreApp, log_index: u64, id: &str) {
        let capability = CapabilitySpec {
            id: id.to_string(),
            side_effect: Some(SideEffect::Read),
            risk: Some(Risk::Low),
            ..Default::default()
        };
        let command = Command::RegisterCapability(capability);
        let envelope = Envelope { request_id: None, now_ms: 1_000 + log_index, caller: None, command };
        app.apply(log_index, &CoreApp::encode_command(&envelope));
    }

    /// Applies the submission of execution `id` of capability `a` at `log_index`.
    fn submit(app: &CoreApp, log_index: u64, id: &str) {
        let submit = gavel_core::Submit {
            execution_id: id.to_string(),
            capability_id: "a".to_string(),
            input_json: "{}".to_string(),
            actor: gavel_core::Actor::new("alice", gavel_core::ActorKind::User),
            surface: "test".to_string(),
            correlation_id: None,
        };
        let envelope =
            Envelope { request_id: None, now_ms: 1_000 + log_index, caller: None, command: Command::Submit(submit) };
        app.apply(log_index, &CoreApp::encode_command(&envelope));
    }

    fn capabilities(state: &State) -> usize {
        state.capabilities().len()
    }

    #[test]
    fn a_read_that_panics_fails_alone_and_the_node_keeps_reading_and_applying() {
        let app = CoreApp::new();
        let port = ReadPort::new(app.clone());
        register(&app, 1, "a");
        let failed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| port.read(|_| panic!("a read's bug"))));
        assert!(failed.is_err(), "the panic reaches the caller");
        assert_eq!(port.read(capabilities), 1, "the next read is served");
        let mut watch = port.watch();
        let failed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| watch.read(|_| panic!("again"))));
        assert!(failed.is_err());
        register(&app, 2, "b");
        assert_eq!(port.read(capabilities), 2, "apply still takes the lock");
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_ends_at_its_deadline_when_nothing_is_applied() {
        let port = ReadPort::new(CoreApp::new());
        let mut watch = port.watch();
        assert_eq!(watch.read(capabilities), 0);
        let started = Instant::now();
        let woken = watch.next_apply(Some(started + Duration::from_secs(5))).await;
        assert_eq!(woken, Woken::DeadlineReached);
        assert_eq!(started.elapsed(), Duration::from_secs(5), "woken at the deadline, not before");
    }

    #[tokio::test(start_paused = true)]
    async fn an_apply_between_the_read_and_the_wait_is_not_missed() {
        let app = CoreApp::new();
        let port = ReadPort::new(app.clone());
        let mut watch = port.watch();
        assert_eq!(watch.read(capabilities), 0);
        register(&app, 1, "a");
        let deadline = Instant::now() + Duration::from_secs(5);
        assert_eq!(watch.next_apply(Some(deadline)).await, Woken::Applied, "at once: it was applied after the read");
        assert_eq!(Instant::now() + Duration::from_secs(5), deadline, "no time passed");
        assert_eq!(watch.read(capabilities), 1, "the read after the wake sees it");
        assert_eq!((port.read(capabilities), port.applied_index()), (1, 1), "and so does the port, at index 1");
        // Seen: the next wait waits for a later apply.
        assert_eq!(watch.next_apply(Some(deadline)).await, Woken::DeadlineReached);
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_reader_wakes_on_the_next_apply_and_on_a_restore() {
        let app = CoreApp::new();
        let port = ReadPort::new(app.clone());
        let mut watch = port.watch();
        watch.read(capabilities);
        let applier = {
            let app = app.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(1)).await;
                register(&app, 1, "a");
            })
        };
        let started = Instant::now();
        assert_eq!(watch.next_apply(Some(started + Duration::from_secs(60))).await, Woken::Applied);
        assert_eq!(started.elapsed(), Duration::from_secs(1), "woken by the apply, not the deadline");
        applier.await.expect("the applier ran");
        assert_eq!(watch.read(capabilities), 1);

        // A restore replaces the state without an entry: readers wake too.
        let empty = CoreApp::new().snapshot();
        app.restore(&empty).expect("a snapshot restores");
        let woken = tokio::time::timeout(Duration::from_secs(60), watch.next_apply(None)).await;
        assert_eq!(woken, Ok(Woken::Applied), "a wait without a deadline wakes on the restore");
        assert_eq!(watch.read(capabilities), 0, "the restored state");
    }

    #[tokio::test(start_paused = true)]
    async fn an_execution_watch_wakes_only_for_entries_that_name_its_execution_and_on_a_restore() {
        let app = CoreApp::new();
        register(&app, 1, "a");
        let port = ReadPort::new(app.clone());
        let mut watch = port.watch_execution("e1");
        let exists = |state: &State| state.execution("e1").is_some();
        assert!(!watch.read(exists));
        let deadline = Instant::now() + Duration::from_secs(5);
        // Entries that name other records do not wake it.
        register(&app, 2, "b");
        submit(&app, 3, "e2");
        assert_eq!(watch.next_change(deadline).await, Woken::DeadlineReached);
        // An entry naming it, applied between the read and the wait, does.
        let deadline = Instant::now() + Duration::from_secs(5);
        submit(&app, 4, "e1");
        assert_eq!(watch.next_change(deadline).await, Woken::Applied, "at once");
        assert!(watch.read(exists));
        // Another reader of the same execution shares its signal; both go
        // with their last reader.
        let second = port.watch_execution("e1");
        drop(second);
        let empty = CoreApp::new().snapshot();
        app.restore(&empty).expect("a snapshot restores");
        let deadline = Instant::now() + Duration::from_secs(5);
        assert_eq!(watch.next_change(deadline).await, Woken::Applied, "a restore wakes every reader");
        assert!(!watch.read(exists), "the restored state");
        drop(watch);
        assert!(app.watched().is_empty(), "no key outlives its readers");
    }

    #[tokio::test(start_paused = true)]
    async fn a_watch_sees_only_applies_after_it_was_made() {
        let app = CoreApp::new();
        register(&app, 1, "a");
        let mut watch = ReadPort::new(app.clone()).watch();
        let deadline = Instant::now() + Duration::from_secs(1);
        assert_eq!(
            watch.next_apply(Some(deadline)).await,
            Woken::DeadlineReached,
            "an apply before the watch is not news"
        );
        register(&app, 2, "b");
        assert_eq!(watch.next_apply(Some(deadline + Duration::from_secs(1))).await, Woken::Applied);
        assert_eq!(watch.read(capabilities), 2);
    }
}
