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
use std::sync::Mutex;

use gavel_core::State;
use tokio::sync::watch;

/// A record a reader waits on.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Record {
    /// An execution, by id.
    Execution(String),
    /// An approval, by id.
    Approval(String),
}

/// The records some reader waits on, with one change signal each.
#[derive(Default)]
pub(crate) struct Watched {
    keys: Mutex<HashMap<Record, Key>>,
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
        key.changed.subscribe()
    }

    /// One reader of `record` fewer; the last one's key goes.
    pub(crate) fn unsubscribe(&self, record: &Record) {
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

    /// The watched records the events at cursors `from..` of `state` name
    /// (none, without reading an event, when nothing is watched).
    pub(crate) fn named_since(&self, state: &State, from: u64) -> Vec<Record> {
        if self.is_empty() {
            return Vec::new();
        }
        let mut named = Vec::new();
        let mut after = from.saturating_sub(1);
        loop {
            let events = state.events_after(after, gavel_core::limits::EVENTS_PAGE_MAX);
            let Some(last) = events.last() else { break };
            after = last.cursor;
            for event in events {
                named.extend(event.execution_id.map(Record::Execution));
                named.extend(event.approval_id.map(Record::Approval));
            }
        }
        let keys = self.keys();
        named.retain(|record| keys.contains_key(record));
        named
    }

    /// Wakes the readers of `records` (after the state that changed them
    /// is unlocked).
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
