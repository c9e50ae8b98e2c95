//! The C2SP `tlog-tiles` read API of the audit tree, its pure part: the
//! resource paths (`checkpoint`, `tile/<L>/<N>[.p/<W>]`,
//! `tile/entries/<N>[.p/<W>]`) parsed into a [`TileResource`], and the
//! encoding of an entry bundle. The bytes come from
//! [`crate::State::audit_tile`] and [`crate::State::audit_entry_bundle`];
//! a node serves them over HTTP (`gavel-server`'s `scrape.rs`).
//!
//! `<N>` is written in 3-digit path elements, all but the last prefixed
//! with `x` (`1234067` is `x001/x234/067`); `<L>` is 0 to 63 and `<W>` 1
//! to 255, both without leading zeroes. A path that breaks a rule is not a
//! resource, so one resource has exactly one path (a cache can trust it).

use crate::limits::AUDIT_TILE_WIDTH;

/// One resource of the tlog-tiles API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TileResource {
    /// `checkpoint`: the last published (cosigned) checkpoint.
    Checkpoint,
    /// `tile/<L>/<N>[.p/<W>]`: `width` hashes of tile `index` of `level`.
    Tile {
        /// The level: its hashes are the tree's nodes at height `8 level`.
        level: u32,
        /// The tile's index within its level.
        index: u64,
        /// 256 for a full tile, 1 to 255 for a partial one.
        width: u64,
    },
    /// `tile/entries/<N>[.p/<W>]`: the entries of leaves `256 N ..
    /// 256 N + width`, each a big-endian `u16` length and the event's
    /// canonical bytes.
    Entries {
        /// The bundle's index (the level-0 tile it matches).
        index: u64,
        /// 256 for a full bundle, 1 to 255 for a partial one.
        width: u64,
    },
}

/// Parses a resource path relative to the log's prefix (no leading `/`).
pub fn parse_tile_path(path: &str) -> Result<TileResource, String> {
    if path == "checkpoint" {
        return Ok(TileResource::Checkpoint);
    }
    let rest = path.strip_prefix("tile/").ok_or_else(|| format!("{path:?} is not a tlog-tiles resource"))?;
    let (level, rest) = rest.split_once('/').ok_or_else(|| format!("{path:?} names no tile index"))?;
    let (index_path, width) = match rest.split_once(".p/") {
        Some((index_path, width)) => (index_path, Some(width)),
        None => (rest, None),
    };
    let index = parse_index(index_path).ok_or_else(|| format!("{index_path:?} is not a tile index (x001/x234/067)"))?;
    let width = match width {
        None => AUDIT_TILE_WIDTH,
        Some(width) => parse_plain(width)
            .filter(|width| (1..AUDIT_TILE_WIDTH).contains(width))
            .ok_or_else(|| format!("{width:?} is not a partial tile's width (1 to 255)"))?,
    };
    if level == "entries" {
        return Ok(TileResource::Entries { index, width });
    }
    let level = parse_plain(level)
        .filter(|level| *level <= 63)
        .ok_or_else(|| format!("{level:?} is not a tile level (0 to 63)"))?;
    Ok(TileResource::Tile { level: level as u32, index, width })
}

/// A decimal number without leading zeroes (`0` itself allowed).
fn parse_plain(text: &str) -> Option<u64> {
    let canonical =
        !text.is_empty() && text.bytes().all(|byte| byte.is_ascii_digit()) && (text == "0" || !text.starts_with('0'));
    canonical.then(|| text.parse().ok()).flatten()
}

/// `x001/x234/067`: 3-digit elements, every one but the last prefixed with
/// `x`, the first not `x000` (one spelling per number).
fn parse_index(text: &str) -> Option<u64> {
    let elements: Vec<&str> = text.split('/').collect();
    let (last, leading) = elements.split_last()?;
    let mut index: u64 = 0;
    for (position, element) in leading.iter().enumerate() {
        let digits = element.strip_prefix('x')?;
        if position == 0 && digits == "000" {
            return None;
        }
        index = index.checked_mul(1000)?.checked_add(three_digits(digits)?)?;
    }
    index.checked_mul(1000)?.checked_add(three_digits(last)?)
}

fn three_digits(text: &str) -> Option<u64> {
    (text.len() == 3 && text.bytes().all(|byte| byte.is_ascii_digit())).then(|| text.parse().ok()).flatten()
}

/// The path of tile `index` at `level` (`width` 256: a full tile).
pub fn tile_path(level: u32, index: u64, width: u64) -> String {
    format!("tile/{level}/{}{}", index_path(index), width_suffix(width))
}

/// The path of entry bundle `index` (`width` 256: a full bundle).
pub fn entries_path(index: u64, width: u64) -> String {
    format!("tile/entries/{}{}", index_path(index), width_suffix(width))
}

fn width_suffix(width: u64) -> String {
    if width == AUDIT_TILE_WIDTH {
        String::new()
    } else {
        format!(".p/{width}")
    }
}

fn index_path(mut index: u64) -> String {
    let mut elements = vec![format!("{:03}", index % 1000)];
    index /= 1000;
    while index > 0 {
        elements.push(format!("x{:03}", index % 1000));
        index /= 1000;
    }
    elements.reverse();
    elements.join("/")
}

/// Why an entry bundle cannot be served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BundleError {
    /// The bundle reaches past the tree's leaves.
    #[error("the tree has {size} leaves: the bundle reaches past them")]
    NotReached {
        /// The tree's size.
        size: u64,
    },
    /// Retention dropped an event of the bundle (its leaf hash stays in the tiles).
    #[error("retention dropped the events below leaf {first_retained_index}; their hashes stay in the tiles")]
    Pruned {
        /// The index of the oldest retained event's leaf: the log's minimum index for entries.
        first_retained_index: u64,
    },
    /// An event's canonical bytes are longer than a bundle's `u16` length prefix allows.
    #[error("the event at leaf {index} is {length} bytes, more than an entry bundle's 65535")]
    EntryTooLong {
        /// The leaf.
        index: u64,
        /// Its canonical bytes' length.
        length: usize,
    },
}

/// Appends one entry to a bundle: its length as a big-endian `u16`, then its bytes.
pub(crate) fn push_entry(bundle: &mut Vec<u8>, index: u64, entry: &[u8]) -> Result<(), BundleError> {
    let length = u16::try_from(entry.len()).map_err(|_| BundleError::EntryTooLong { index, length: entry.len() })?;
    bundle.extend_from_slice(&length.to_be_bytes());
    bundle.extend_from_slice(entry);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_parse_as_the_spec_spells_them_and_write_back_the_same() {
        let cases = [
            ("tile/0/000", TileResource::Tile { level: 0, index: 0, width: 256 }),
            ("tile/1/x001/x234/067", TileResource::Tile { level: 1, index: 1_234_067, width: 256 }),
            ("tile/2/005.p/17", TileResource::Tile { level: 2, index: 5, width: 17 }),
            ("tile/entries/x001/000.p/255", TileResource::Entries { index: 1000, width: 255 }),
            ("checkpoint", TileResource::Checkpoint),
        ];
        for (path, resource) in cases {
            assert_eq!(parse_tile_path(path), Ok(resource), "{path}");
            let written = match resource {
                TileResource::Tile { level, index, width } => tile_path(level, index, width),
                TileResource::Entries { index, width } => entries_path(index, width),
                TileResource::Checkpoint => "checkpoint".to_string(),
            };
            assert_eq!(written, path);
        }
    }

    #[test]
    fn a_path_with_a_second_spelling_or_out_of_range_is_not_a_resource() {
        for path in [
            "tile/0/0",
            "tile/0/1000",
            "tile/00/000",
            "tile/64/000",
            "tile/0/x000/001",
            "tile/0/001/002",
            "tile/0/000.p/0",
            "tile/0/000.p/256",
            "tile/0/000.p/07",
            "tile/entries/000.p/",
            "tile/0/x999/x999/x999/x999/x999/x999/x999/999",
            "tiles/0/000",
            "checkpoint/",
        ] {
            assert!(parse_tile_path(path).is_err(), "{path}");
        }
    }
}
