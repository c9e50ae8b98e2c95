//! Readers waiting on one execution, woken by the applies that touch it.
//!
//! A `WaitExecution` (and a `ResumeAndWait` waiting for its result) needs
//! to read its execution again only when an entry changed it. Woken by
//! every apply, as [`crate::reads::AppliedWatch`] wakes, each of N waiting
//! callers re-read the state after every entry: N wake-ups, N lock
//! acquisitions and N copies of an execution per entry, on the leader,
//! beside the apply that waits for the same lock. Here an apply wakes only
//! the readers of the executions its events name: every change of an
//! execution records an event naming it (the audit trail is complete,
//! SPEC §6), so no change is missed. A restore wakes every reader.

use std::collections::HashMap;
use std::sync::Mutex;

use gavel_core::State;
use tokio::sync::watch;

/// The executions some reader waits on, with one change signal each.
#[derive(Default)]
pub(crate) struct Watched {
    keys: Mutex<HashMap<String, Key>>,
}

struct Key {
    changed: watch::Sender<()>,
    readers: usize,
}

impl Watched {
    fn keys(&self) -> std::sync::MutexGuard<'_, HashMap<String, Key>> {
        self.keys.lock().expect("the watched executions' lock is never held across a panic")
    }

    /// A receiver of `execution_id`'s changes from now on; pair with
    /// [`Watched::unsubscribe`].
    pub(crate) fn subscribe(&self, execution_id: &str) -> watch::Receiver<()> {
        let mut keys = self.keys();
        let key =
            keys.entry(execution_id.to_string()).or_insert_with(|| Key { changed: watch::channel(()).0, readers: 0 });
        key.readers += 1;
        key.changed.subscribe()
    }

    /// One reader of `execution_id` fewer; the last one's key goes.
    pub(crate) fn unsubscribe(&self, execution_id: &str) {
        let mut keys = self.keys();
        if let Some(key) = keys.get_mut(execution_id) {
            key.readers -= 1;
            if key.readers == 0 {
                keys.remove(execution_id);
            }
        }
    }

    /// True when no reader waits on any execution.
    pub(crate) fn is_empty(&self) -> bool {
        self.keys().is_empty()
    }

    /// The watched executions the events at cursors `from..` of `state`
    /// name (none, without reading an event, when nothing is watched).
    pub(crate) fn named_since(&self, state: &State, from: u64) -> Vec<String> {
        if self.is_empty() {
            return Vec::new();
        }
        let mut named = Vec::new();
        let mut after = from.saturating_sub(1);
        loop {
            let events = state.events_after(after, gavel_core::limits::EVENTS_PAGE_MAX);
            let Some(last) = events.last() else { break };
            after = last.cursor;
            named.extend(events.into_iter().filter_map(|event| event.execution_id));
        }
        named.sort_unstable();
        named.dedup();
        let keys = self.keys();
        named.retain(|execution_id| keys.contains_key(execution_id));
        named
    }

    /// Wakes the readers of `execution_ids` (after the state that changed
    /// them is unlocked).
    pub(crate) fn wake(&self, execution_ids: &[String]) {
        if execution_ids.is_empty() {
            return;
        }
        let keys = self.keys();
        for execution_id in execution_ids {
            if let Some(key) = keys.get(execution_id) {
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
