//! Listing records a page at a time (issue #40): the order a listing runs
//! through (created_at, id), the page a listing returns, and the time keys
//! the cold listing indexes sort by. A page continues from the key of the
//! last record it looked at, never from an offset, so records created while
//! a caller pages through are neither skipped nor repeated.

/// Which way a listing runs through (created_at, id).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ListOrder {
    /// Newest first; a page continues before the cursor. Every list's
    /// default (issue #40: a person looks at what just happened).
    #[default]
    NewestFirst,
    /// Oldest first; a page continues after the cursor.
    OldestFirst,
}

/// One page of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page<T> {
    /// The records, in the listing's order.
    pub records: Vec<T>,
    /// The (created_at, id) key the next page continues from (exclusive);
    /// `None` when nothing is left. A page cut short by its scan bound
    /// holds fewer records than asked for and still names one.
    pub next: Option<(u64, String)>,
}

/// A listing key: the time big-endian (so keys sort by time), then the id.
pub(crate) fn time_key(time_ms: u64, id: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(8 + id.len());
    key.extend_from_slice(&time_ms.to_be_bytes());
    key.extend_from_slice(id.as_bytes());
    key
}

/// A key after every [`time_key`]: where a newest-first listing starts (no
/// record is created at `u64::MAX` ms).
pub(crate) const AFTER_EVERY_TIME_KEY: [u8; 9] = [0xff; 9];

/// The time at the start of a [`time_key`].
pub(crate) fn key_time(key: &[u8]) -> u64 {
    u64::from_be_bytes(key[..8].try_into().expect("a time key starts with 8 bytes of time"))
}

/// The (time, id) a [`time_key`] was made of.
pub(crate) fn key_parts(key: &[u8]) -> (u64, &str) {
    (key_time(key), std::str::from_utf8(&key[8..]).expect("listing keys end in a text id"))
}
