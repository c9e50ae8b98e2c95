//! `AuditTree`, the part of [`crate::State`] that keeps the RFC 6962 tree
//! over the audit trail ([`crate::merkle`]): leaf `i` is the event at cursor
//! `i + 1`, appended at the end of the apply that recorded it.
//!
//! Hot, in the state hash and in snapshots: the compact frontier alone (one
//! hash per bit of the size, at most 64). Cold, in the `AuditTiles` table
//! next to the events: every full tile, written once and never deleted
//! (retention drops event bodies, never their hashes), and the entries of
//! each level's tile being filled, one record per hash, deleted when their
//! tile is written whole.
//!
//! Tiles follow C2SP `tlog-tiles`: a tile of level `L` holds up to 256
//! consecutive hashes of the tree's nodes at height `8 L`; tile `N` of level
//! `L` starts at node index `256 N`. A node at a height between two tile
//! levels is recomputed from at most 128 entries of the tile below it, so
//! any proof reads O(log n) tiles and memory stays bounded whatever the size.

use serde::{Deserialize, Serialize};

use crate::cold::{ColdRecords, ColdTable};
use crate::limits::AUDIT_TILE_WIDTH;
use crate::merkle::{self, Frontier, Hash, NodeSource, ProofError};

/// The height of a tile: a tile holds `2^TILE_HEIGHT` hashes.
const TILE_HEIGHT: u32 = AUDIT_TILE_WIDTH.trailing_zeros();

/// The tree over the audit trail. Invariant: the frontier's size is the
/// number of events sealed; of the `size >> (8 L)` hashes at height `8 L`,
/// those of full tiles are in [`tile_key`] records and the rest (fewer than
/// 256) in [`entry_key`] records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct AuditTree {
    frontier: Frontier,
    /// Full tiles (the 256 hashes concatenated) and partial tiles' entries.
    tiles: ColdRecords,
}

impl Default for AuditTree {
    fn default() -> Self {
        AuditTree { frontier: Frontier::new(), tiles: ColdRecords::new(ColdTable::AuditTiles) }
    }
}

/// The prefix of full tiles' keys.
const TILE_PREFIX: u8 = b'T';
/// The prefix of partial tiles' entries' keys.
const ENTRY_PREFIX: u8 = b'E';

/// `prefix`, the level, then `index` big-endian.
fn key(prefix: u8, level: u32, index: u64) -> Vec<u8> {
    let mut key = Vec::with_capacity(10);
    key.push(prefix);
    key.push(u8::try_from(level).expect("at most 8 tile levels cover 2^64 leaves"));
    key.extend_from_slice(&index.to_be_bytes());
    key
}

/// The key of full tile `index` of `level`.
fn tile_key(level: u32, index: u64) -> Vec<u8> {
    key(TILE_PREFIX, level, index)
}

/// The key of the hash at `index` of `level` while its tile is partial.
fn entry_key(level: u32, index: u64) -> Vec<u8> {
    key(ENTRY_PREFIX, level, index)
}

impl AuditTree {
    /// How many leaves (sealed events) the tree has.
    pub(crate) fn size(&self) -> u64 {
        self.frontier.size()
    }

    /// The tree's root now.
    pub(crate) fn root(&self) -> Hash {
        self.frontier.root()
    }

    /// Appends the leaf hash of the next event.
    pub(crate) fn append(&mut self, leaf: Hash) {
        let tiles = &mut self.tiles;
        self.frontier.push(leaf, |height, index, hash| {
            if height % TILE_HEIGHT != 0 {
                return;
            }
            let level = height / TILE_HEIGHT;
            if (index + 1) % AUDIT_TILE_WIDTH != 0 {
                tiles.put(entry_key(level, index), hash);
                return;
            }
            // The tile is full: written whole, its entries' records go.
            let first = index + 1 - AUDIT_TILE_WIDTH;
            let mut tile = Vec::with_capacity(32 * AUDIT_TILE_WIDTH as usize);
            for entry in first..index {
                let key = entry_key(level, entry);
                let stored: Hash = tiles.get(&key).expect("a partial tile's entries are stored");
                tile.extend_from_slice(&stored);
                tiles.delete(&key);
            }
            tile.extend_from_slice(hash);
            tiles.put(tile_key(level, index / AUDIT_TILE_WIDTH), &tile);
        });
    }

    /// The root of the tree's first `size` leaves.
    pub(crate) fn root_at(&self, size: u64) -> Result<Hash, ProofError> {
        self.check_reached(size)?;
        Ok(merkle::root_at(self, size))
    }

    /// The hash of leaf `index`, if sealed.
    pub(crate) fn leaf(&self, index: u64) -> Option<Hash> {
        (index < self.size()).then(|| self.node(0, index))
    }

    /// The inclusion proof of leaf `index` in the first `size` leaves.
    pub(crate) fn inclusion_proof(&self, index: u64, size: u64) -> Result<Vec<Hash>, ProofError> {
        self.check_reached(size)?;
        merkle::inclusion_proof(self, index, size)
    }

    /// The consistency proof between the first `old` and first `new` leaves.
    pub(crate) fn consistency_proof(&self, old: u64, new: u64) -> Result<Vec<Hash>, ProofError> {
        self.check_reached(new)?;
        merkle::consistency_proof(self, old, new)
    }

    fn check_reached(&self, size: u64) -> Result<(), ProofError> {
        if size > self.size() {
            return Err(ProofError::SizeNotReached { size, current: self.size() });
        }
        Ok(())
    }

    /// The cold records of this part, for flushing and export.
    pub(crate) fn cold_mut(&mut self) -> &mut ColdRecords {
        &mut self.tiles
    }

    /// The cold records of this part, for export.
    pub(crate) fn cold(&self) -> &ColdRecords {
        &self.tiles
    }

    /// The first `width` hashes of tile `index` of `level`, concatenated, as
    /// C2SP `tlog-tiles` serves them; `None` when the tree has fewer hashes
    /// there (or `width` is not 1 to 256). Full tiles are never deleted, so
    /// every tile the tree reached is here whatever retention dropped.
    pub(crate) fn tile(&self, level: u32, index: u64, width: u64) -> Option<Vec<u8>> {
        if !(1..=AUDIT_TILE_WIDTH).contains(&width) {
            return None;
        }
        let entries_at_level = self.size().checked_shr(level.checked_mul(TILE_HEIGHT)?).unwrap_or(0);
        let first = index.checked_mul(AUDIT_TILE_WIDTH)?;
        if first.checked_add(width)? > entries_at_level {
            return None;
        }
        Some(self.entries(level, first, width).concat())
    }

    /// Entries `first..first + count` of tile level `level` (all within one tile).
    fn entries(&self, level: u32, first: u64, count: u64) -> Vec<Hash> {
        let tile_index = first / AUDIT_TILE_WIDTH;
        let offset = (first % AUDIT_TILE_WIDTH) as usize;
        let count = count as usize;
        let entries_at_level = self.size() >> (level * TILE_HEIGHT);
        if (tile_index + 1) * AUDIT_TILE_WIDTH <= entries_at_level {
            let tile: Vec<u8> =
                self.tiles.get(&tile_key(level, tile_index)).expect("every full tile of the tree is stored");
            tile.chunks_exact(32)
                .skip(offset)
                .take(count)
                .map(|chunk| chunk.try_into().expect("chunks are 32 bytes"))
                .collect()
        } else {
            (first..first + count as u64)
                .map(|entry| self.tiles.get(&entry_key(level, entry)).expect("a partial tile's entries are stored"))
                .collect()
        }
    }
}

impl NodeSource for AuditTree {
    fn node(&self, height: u32, index: u64) -> Hash {
        let level = height / TILE_HEIGHT;
        let below = height % TILE_HEIGHT;
        let mut hashes = self.entries(level, index << below, 1 << below);
        while hashes.len() > 1 {
            hashes = hashes.chunks_exact(2).map(|pair| merkle::node_hash(&pair[0], &pair[1])).collect();
        }
        hashes[0]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cold::MemoryColdStore;
    use crate::merkle::MemoryTree;

    #[test]
    fn tiled_tree_answers_the_same_nodes_roots_and_proofs_as_a_tree_in_memory() {
        let mut tiled = AuditTree::default();
        let mut memory = MemoryTree::new();
        let store = MemoryColdStore::new();
        tiled.tiles.attach(store.clone());
        // Past two full levels of tiles (256² leaves) and a partial third.
        let size: u64 = 256 * 256 + 300;
        for i in 0..size {
            let leaf = merkle::leaf_hash(&i.to_le_bytes());
            tiled.append(leaf);
            memory.push(leaf);
            if i % 5_000 == 0 {
                // Flush now and then, as a node does: reads go to the store.
                let mut pending = Vec::new();
                tiled.tiles.take_pending(&mut pending);
                crate::cold::ColdStore::write(&*store, &pending).expect("memory store writes");
                tiled.tiles.clear_pending();
            }
        }
        assert_eq!(tiled.root(), memory.root_at(size));
        for probe in [1, 2, 255, 256, 257, 65_535, 65_536, 65_537, size - 1, size] {
            assert_eq!(tiled.root_at(probe), Ok(memory.root_at(probe)), "root at {probe}");
            let index = probe / 2;
            assert_eq!(tiled.inclusion_proof(index, probe), merkle::inclusion_proof(&memory, index, probe));
            assert_eq!(tiled.consistency_proof(probe / 3, probe), merkle::consistency_proof(&memory, probe / 3, probe));
        }
        assert_eq!(tiled.leaf(size - 1), memory.leaf(size - 1));
        // The tiles as tlog-tiles serves them: the nodes at heights 0, 8, 16.
        let nodes = |height: u32, indices: std::ops::Range<u64>| -> Vec<u8> {
            indices.flat_map(|index| memory.node(height, index)).collect()
        };
        assert_eq!(tiled.tile(0, 3, 256), Some(nodes(0, 768..1024)));
        assert_eq!(tiled.tile(0, 256, 44), Some(nodes(0, 65_536..65_580)), "a partial tile's prefix");
        assert_eq!(tiled.tile(1, 0, 256), Some(nodes(8, 0..256)));
        assert_eq!(tiled.tile(1, 1, 1), Some(nodes(8, 256..257)));
        assert_eq!(tiled.tile(2, 0, 1), Some(nodes(16, 0..1)));
        for (level, index, width) in [(0, 257, 45), (1, 1, 2), (2, 0, 2), (3, 0, 1), (0, 0, 0), (0, 0, 257), (63, 0, 1)]
        {
            assert_eq!(tiled.tile(level, index, width), None, "tile {level}/{index}.p/{width} is past the tree");
        }
        assert_eq!(tiled.tile(0, u64::MAX, 1), None);
        assert_eq!(tiled.leaf(size), None);
        assert_eq!(tiled.root_at(size + 1), Err(ProofError::SizeNotReached { size: size + 1, current: size }));
        // The hot part is the frontier: one hash per bit set in the size.
        assert_eq!(tiled.frontier, {
            let mut frontier = Frontier::new();
            (0..size).for_each(|i| frontier.push(merkle::leaf_hash(&i.to_le_bytes()), |_, _, _| {}));
            frontier
        });
        let mut pending = Vec::new();
        tiled.tiles.take_pending(&mut pending);
        crate::cold::ColdStore::write(&*store, &pending).expect("memory store writes");
        let stored = crate::cold::ColdStore::range(&*store, ColdTable::AuditTiles, &[], 10_000);
        let partial = stored.iter().filter(|(key, _)| key[0] == ENTRY_PREFIX).count() as u64;
        let full = stored.iter().filter(|(key, _)| key[0] == TILE_PREFIX).count() as u64;
        // Fewer than 256 entries per level are single records; the rest are whole tiles.
        assert_eq!(partial, (0..3).map(|level| (size >> (8 * level)) % 256).sum::<u64>());
        assert_eq!(full, (0..3).map(|level| (size >> (8 * level)) / 256).sum::<u64>());
    }
}
