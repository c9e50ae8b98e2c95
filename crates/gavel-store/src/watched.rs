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

use std::collections::BTreeMap;
use std::sync::Mutex;

use gavel_core::{RecordId, State};
use tokio::sync::watch;

/// The records some reader waits on, with one change signal each. Ordered:
/// `wake_all` wakes in key order, not in a hash seed's (which differs with
/// what ran before on the thread, so a simulated run could replay
/// differently; docs/testing.md).
#[derive(Default)]
pub(crate) struct Watched {
    keys: Mutex<BTreeMap<RecordId, Key>>,
}

struct Key {
    changed: watch::Sender<()>,
    readers: usize,
}

impl Watched {
    fn keys(&self) -> std::sync::MutexGuard<'_, BTreeMap<RecordId, Key>> {
        self.keys.lock().expect("the watched records' lock is never held across a panic")
    }

    /// A receiver of `record`'s changes from now on; pair with
    /// [`Watched::unsubscribe`].
    pub(crate) fn subscribe(&self, record: &RecordId) -> watch::Receiver<()> {
        let mut keys = self.keys();
        let key = keys.entry(record.clone()).or_insert_with(|| Key { changed: watch::channel(()).0, readers: 0 });
        key.readers += 1;
        key.changed.subscribe()
    }

    /// One reader of `record` fewer; the last one's key goes.
    pub(crate) fn unsubscribe(&self, record: &RecordId) {
        let mut keys = self.keys();
        if let Some(key) = keys.get_mut(record) {
            key.readers -= 1;
            if key.readers == 0 {
                keys.remove(record);
            }
        }
    }

    /// True when no reader waits on any record.
    pub(crate) fn is_empty(&self) -> bool {
        self.keys().is_empty()
    }

    /// Adds to `named` the records the last apply of `state` named (none,
    /// without copying an id, when nothing is watched). Called with the
    /// state locked, right after the apply: a reader subscribes before it
    /// reads the state, and reads under the same lock, so one that
    /// subscribed too late to be seen here reads the state this apply left.
    pub(crate) fn note_named(&self, state: &State, named: &mut Vec<RecordId>) {
        if !self.is_empty() {
            named.extend_from_slice(state.last_apply_named());
        }
    }

    /// Wakes the readers of `records` (after the state that changed them
    /// is unlocked): one lock of the registry.
    pub(crate) fn wake(&self, records: &[RecordId]) {
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
