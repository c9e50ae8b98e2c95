//! The audit tree as C2SP `tlog-tiles` resources ([`crate::tlog_tiles`]):
//! hash tiles from the tree's cold tiles, entry bundles from the retained
//! events. Retention drops events, never hashes: every tile of the tree is
//! served, and an entry bundle only while all its events are retained.

use crate::merkle;
use crate::tlog_tiles::{self, BundleError};
use crate::State;

impl State {
    /// The first `width` hashes (1 to 256) of hash tile `index` of `level`,
    /// concatenated; `None` when the tree has not reached them.
    pub fn audit_tile(&self, level: u32, index: u64, width: u64) -> Option<Vec<u8>> {
        self.audit_tree.tile(level, index, width)
    }

    /// The leaf index of the oldest retained event: retention dropped the
    /// events of every leaf below it (their hashes stay), and no other.
    pub fn audit_first_retained_index(&self) -> u64 {
        self.audit.first_cursor() - 1
    }

    /// Entry bundle `index` of `width` entries (1 to 256): each retained
    /// event's canonical bytes with a big-endian `u16` length before them.
    pub fn audit_entry_bundle(&self, index: u64, width: u64) -> Result<Vec<u8>, BundleError> {
        let size = self.audit_tree_size();
        let first = index.checked_mul(crate::limits::AUDIT_TILE_WIDTH).ok_or(BundleError::NotReached { size })?;
        let end = first.checked_add(width).filter(|end| *end <= size).ok_or(BundleError::NotReached { size })?;
        let first_retained_index = self.audit_first_retained_index();
        if first < first_retained_index {
            return Err(BundleError::Pruned { first_retained_index });
        }
        let mut bundle = Vec::new();
        for leaf in first..end {
            let event = self.event(leaf + 1).ok_or(BundleError::Pruned { first_retained_index })?;
            tlog_tiles::push_entry(&mut bundle, leaf, &merkle::event_canonical_bytes(&event))?;
        }
        Ok(bundle)
    }
}
