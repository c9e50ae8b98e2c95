//! Planted bug `early-ack` (feature `mutants`, switched on by
//! `NodeConfig::plant_early_ack`, which the shell sets from `GAVEL_MUTANT`):
//! log appends are acknowledged at once and written to sled only
//! [`WRITE_DELAY`] later, like a write-back cache that acknowledges before
//! the data is stable. Until then the entries live in this overlay, which
//! every log read consults, so the node behaves normally unless it is killed:
//! then the acknowledged entries of the last [`WRITE_DELAY`] are gone.

use std::collections::BTreeMap;
use std::ops::RangeBounds;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::typ::Entry;

/// How long an acknowledged entry stays only in memory.
const WRITE_DELAY: Duration = Duration::from_millis(1_500);

/// Appended entries not yet written to sled.
#[derive(Default)]
pub(crate) struct Overlay {
    entries: Mutex<BTreeMap<u64, Entry>>,
}

impl Overlay {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Entry>> {
        self.entries.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Keeps `entries` in memory and writes them to `log` after the delay,
    /// unless they were truncated or purged meanwhile.
    pub(crate) fn append(self: &Arc<Self>, log: sled::Tree, entries: Vec<Entry>) {
        let indexes: Vec<u64> = entries.iter().map(|entry| entry.log_id.index).collect();
        {
            let mut overlay = self.lock();
            for entry in entries {
                overlay.insert(entry.log_id.index, entry);
            }
        }
        let overlay = self.clone();
        std::thread::spawn(move || {
            std::thread::sleep(WRITE_DELAY);
            // Hold the lock while writing, so a truncation cannot interleave.
            let mut pending = overlay.lock();
            let mut batch = sled::Batch::default();
            for index in indexes {
                if let Some(entry) = pending.remove(&index) {
                    if let Ok(bytes) = super::encode(&entry) {
                        batch.insert(&super::index_key(index), bytes);
                    }
                }
            }
            let _ = log.apply_batch(batch);
        });
    }

    /// The overlay's entries in `range`, to merge over what sled returned.
    pub(crate) fn range<RB: RangeBounds<u64>>(&self, range: &RB) -> Vec<Entry> {
        self.lock().iter().filter(|(index, _)| range.contains(*index)).map(|(_, entry)| entry.clone()).collect()
    }

    /// The last entry held only in memory.
    pub(crate) fn last(&self) -> Option<Entry> {
        self.lock().values().next_back().cloned()
    }

    /// Drops entries at `from` and after (a truncation), before sled's are removed.
    pub(crate) fn truncate(&self, from: u64) {
        self.lock().retain(|index, _| *index < from);
    }

    /// Drops entries up to and including `upto` (a purge).
    pub(crate) fn purge(&self, upto: u64) {
        self.lock().retain(|index, _| *index > upto);
    }
}
