//! Readers waiting on one record, woken by the applies that touch it.
//!
//! A `WaitExecution` (and a `ResumeAndWait` waiting for its result) needs
//! to read its execution again only when an entry changed it; a
//! `WaitApproval` (and a resume waiting for the decision) its approval.
//! Woken by every apply, as [`crate::reads::AppliedWatch`] wakes, each of N
//! waiting callers re-read the state after every entry: N wake-ups, N lock
//! acquisitions and N copies of a record per entry, on the leader, beside
//! the apply that waits for the same lock. Here an apply wakes only the
//! readers of the records its events name: every change of an execution or
//! an approval records an event naming it (the audit trail is complete,
//! SPEC §6), so no change is missed. A restore wakes every reader. What
//! changes with time alone (an approval's expiry, read lazily) is the
//! reader's to wake for, with a deadline.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

pub(crate) use gavel_core::RecordId as Record;
use gavel_core::State;
use tokio::sync::watch;

/// The records some reader waits on, with one change signal each.
#[derive(Default)]
pub(crate) struct Watched {
    keys: Mutex<HashMap<Record, Key>>,
    /// How many records `keys` holds, read without its lock by every apply
    /// (written under it).
    watched: AtomicUsize,
}

struct Key {
    changed: watch::Sender<()>,
    readers: usize,
}

impl Watched {
    fn keys(&self) -> std::sync::MutexGuard<'_, HashMap<Record, Key>> {
        self.keys.lock().expect("the watched records' lock is never held across a panic")
    }

    /// A receiver of `record`'s changes from now on; pair with
    /// [`Watched::unsubscribe`].
    pub(crate) fn subscribe(&self, record: &Record) -> watch::Receiver<()> {
        let mut keys = self.keys();
        let key = keys.entry(record.clone()).or_insert_with(|| Key { changed: watch::channel(()).0, readers: 0 });
        key.readers += 1;
        let changed = key.changed.subscribe();
        self.watched.store(keys.len(), Ordering::Relaxed);
        changed
    }

    /// One reader of `record` fewer; the last one's key goes.
    pub(crate) fn unsubscribe(&self, record: &Record) {
        let mut keys = self.keys();
        if let Some(key) = keys.get_mut(record) {
            key.readers -= 1;
            if key.readers == 0 {
                keys.remove(record);
                self.watched.store(keys.len(), Ordering::Relaxed);
            }
        }
    }

    /// True when no reader waits on any record.
    pub(crate) fn is_empty(&self) -> bool {
        self.watched.load(Ordering::Relaxed) == 0
    }

    /// Adds to `named` the records the last apply of `state` named (none,
    /// without copying an id, when nothing is watched). Called with the
    /// state locked, right after the apply: a reader subscribes before it
    /// reads the state, and reads under the same lock, so one that
    /// subscribed too late to be counted here reads the state this apply
    /// left (the lock orders its count's write before this read otherwise).
    pub(crate) fn note_named(&self, state: &State, named: &mut Vec<Record>) {
        if !self.is_empty() {
            named.extend_from_slice(state.last_apply_named());
        }
    }

    /// Wakes the readers of `records` (after the state that changed them
    /// is unlocked): one lock of the registry.
    pub(crate) fn wake(&self, records: &[Record]) {
        if records.is_empty() {
            return;
        }
        let keys = self.keys();
        for record in records {
            if let Some(key) = keys.get(record) {
                key.changed.send_replace(());
            }
        }
    }

    /// Wakes every reader: the state was replaced.
    pub(crate) fn wake_all(&self) {
        for key in self.keys().values() {
            key.changed.send_replace(());
        }
    }
}
