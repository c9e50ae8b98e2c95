//! Planted bug `early-ack` (switched on by `PlantedLogBugs::early_ack`,
//! which a shell built with the `mutants` feature sets from `GAVEL_MUTANT`;
//! compiled only with this crate's feature `mutants`):
//! log appends are acknowledged at once and written to the log only
//! [`WRITE_DELAY`] later, like a write-back cache that acknowledges before
//! the data is stable. Until then the entries live in this overlay, which
//! every log read consults, so the node behaves normally unless it is killed:
//! then the acknowledged entries of the last [`WRITE_DELAY`] are gone.

use std::collections::BTreeMap;
use std::ops::RangeBounds;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::wal::Threading;
use crate::typ::Entry;

/// How long an acknowledged entry stays only in memory.
const WRITE_DELAY: Duration = Duration::from_millis(1_500);

/// Appended entries not yet written to the log.
#[derive(Default)]
pub(crate) struct Overlay {
    entries: Mutex<BTreeMap<u64, Entry>>,
}

impl Overlay {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Entry>> {
        self.entries.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Keeps `entries` in memory and writes them to the log after the
    /// delay, unless they were truncated or purged meanwhile. With the log
    /// written by threads the delay is an OS thread's sleep; written inline
    /// (the simulation) it is a task on the node's runtime sleeping in tokio
    /// time, so the simulator's clock decides when the write lands and a
    /// crash of the node drops the task with its entries.
    pub(crate) fn append(self: &Arc<Self>, wal: super::wal::Wal, entries: Vec<Entry>, threading: Threading) {
        let Some(upto) = entries.last().map(|entry| entry.log_id.index) else { return };
        {
            let mut overlay = self.lock();
            for entry in entries {
                overlay.insert(entry.log_id.index, entry);
            }
        }
        let overlay = self.clone();
        match threading {
            #[cfg(feature = "sim")]
            Threading::Inline => {
                tokio::spawn(async move {
                    tokio::time::sleep(WRITE_DELAY).await;
                    overlay.write_due(&wal, upto);
                });
            }
            Threading::Writer => {
                std::thread::spawn(move || {
                    std::thread::sleep(WRITE_DELAY);
                    overlay.write_due(&wal, upto);
                });
            }
        }
    }

    /// Writes everything held up to `upto` to the log. The lock is held
    /// while writing, so a truncation cannot interleave; the log takes
    /// appends only in index order, so everything held up to this append's
    /// last index is written, oldest first.
    fn write_due(&self, wal: &super::wal::Wal, upto: u64) {
        let mut pending = self.lock();
        let later = pending.split_off(&(upto + 1));
        let due = std::mem::replace(&mut *pending, later);
        let _ = wal.append(due.into_values().collect(), None);
    }

    /// The overlay's entries in `range`, to merge over what the log returned.
    pub(crate) fn range<RB: RangeBounds<u64>>(&self, range: &RB) -> Vec<Entry> {
        self.lock().iter().filter(|(index, _)| range.contains(*index)).map(|(_, entry)| entry.clone()).collect()
    }

    /// The last entry held only in memory.
    pub(crate) fn last(&self) -> Option<Entry> {
        self.lock().values().next_back().cloned()
    }

    /// Drops entries at `from` and after (a truncation), before the log's are removed.
    pub(crate) fn truncate(&self, from: u64) {
        self.lock().retain(|index, _| *index < from);
    }

    /// Drops entries up to and including `upto` (a purge).
    pub(crate) fn purge(&self, upto: u64) {
        self.lock().retain(|index, _| *index > upto);
    }
}
