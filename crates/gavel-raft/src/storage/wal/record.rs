//! The framing of one WAL record: a 16-byte header with two CRCs, then the
//! payload.
//!
//! ```text
//! offset  size  field
//!      0     4  payload length, u32 little-endian
//!      4     4  CRC-32 of the payload
//!      8     1  kind (see `Kind`)
//!      9     3  zero
//!     12     4  CRC-32 of bytes 0..12 (the header CRC)
//!     16     n  payload
//! ```
//!
//! The header has its own CRC so that recovery can tell, at any byte
//! offset, whether a record starts there without trusting a length field
//! that may itself be damaged: that is how it finds valid records *after* a
//! damaged one, which means the damage is not a torn tail.

/// Bytes of a record header.
pub(super) const HEADER_BYTES: usize = 16;

/// What a record holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// The first record of every segment: format version and segment number.
    SegmentHeader = 1,
    /// One bincode-encoded log entry.
    Entry = 2,
    /// Removes every entry at and after the index in the payload (u64 LE).
    Truncate = 3,
    /// Removes every entry up to and including the bincode `LogId` in the
    /// payload, and records it as the last purged log id.
    Purge = 4,
}

impl Kind {
    fn from_byte(byte: u8) -> Option<Kind> {
        match byte {
            1 => Some(Kind::SegmentHeader),
            2 => Some(Kind::Entry),
            3 => Some(Kind::Truncate),
            4 => Some(Kind::Purge),
            _ => None,
        }
    }
}

/// Appends one framed record to `out`. The caller guarantees (and checks,
/// see `WalError::RecordTooLarge`) that the payload length fits in a u32.
pub(super) fn encode(kind: Kind, payload: &[u8], out: &mut Vec<u8>) {
    let mut header = [0u8; HEADER_BYTES];
    let length = u32::try_from(payload.len()).unwrap_or(u32::MAX);
    header[0..4].copy_from_slice(&length.to_le_bytes());
    header[4..8].copy_from_slice(&crc32fast::hash(payload).to_le_bytes());
    header[8] = kind as u8;
    let header_crc = crc32fast::hash(&header[0..12]);
    header[12..16].copy_from_slice(&header_crc.to_le_bytes());
    out.extend_from_slice(&header);
    out.extend_from_slice(payload);
}

/// The framed size of a record with a payload of `payload_bytes`.
pub(super) fn framed_bytes(payload_bytes: usize) -> usize {
    HEADER_BYTES + payload_bytes
}

/// What is found at one offset of a segment.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Found<'a> {
    /// A complete record with both CRCs correct; the next one starts at `next`.
    Record { kind: Kind, payload: &'a [u8], next: usize },
    /// A header of zero bytes: where the unused, preallocated tail starts,
    /// if everything after it is zero too (the caller checks that once).
    ZeroHeader,
    /// Anything else: a torn write or damage. Recovery decides which.
    Damaged(&'static str),
}

/// Reads the record at `offset` of `segment`.
pub(super) fn decode_at(segment: &[u8], offset: usize) -> Found<'_> {
    let rest = &segment[offset.min(segment.len())..];
    if rest[..rest.len().min(HEADER_BYTES)].iter().all(|byte| *byte == 0) {
        return Found::ZeroHeader;
    }
    if rest.len() < HEADER_BYTES {
        return Found::Damaged("a record header is cut short");
    }
    match header_at(segment, offset) {
        Err(reason) => Found::Damaged(reason),
        Ok((kind, length, payload_crc)) => {
            let start = offset + HEADER_BYTES;
            let Some(end) = start.checked_add(length).filter(|end| *end <= segment.len()) else {
                return Found::Damaged("a record is cut short");
            };
            let payload = &segment[start..end];
            if crc32fast::hash(payload) != payload_crc {
                return Found::Damaged("a record's payload checksum does not match");
            }
            Found::Record { kind, payload, next: end }
        }
    }
}

/// Parses and checks the header at `offset`: kind, payload length, payload CRC.
fn header_at(segment: &[u8], offset: usize) -> Result<(Kind, usize, u32), &'static str> {
    let header = segment.get(offset..offset + HEADER_BYTES).ok_or("a record header is cut short")?;
    let word = |at: usize| u32::from_le_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]]);
    if crc32fast::hash(&header[0..12]) != word(12) {
        return Err("a record header's checksum does not match");
    }
    let kind = Kind::from_byte(header[8]).ok_or("a record has an unknown kind")?;
    if header[9..12] != [0, 0, 0] {
        return Err("a record header has non-zero padding");
    }
    Ok((kind, word(0) as usize, word(4)))
}

/// The offset of the first complete, valid record that starts after
/// `offset`, if any. Recovery calls this after damage at `offset`: a valid
/// record behind it means the damage is inside data that was written (and
/// possibly acknowledged) before, not a torn tail.
pub(super) fn next_valid_record_after(segment: &[u8], offset: usize) -> Option<usize> {
    let last_start = segment.len().checked_sub(HEADER_BYTES)?;
    (offset + 1..=last_start).find(|candidate| {
        header_at(segment, *candidate).is_ok() && matches!(decode_at(segment, *candidate), Found::Record { .. })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips_and_a_flipped_bit_anywhere_is_damage() {
        let mut segment = Vec::new();
        encode(Kind::Entry, b"hello raft", &mut segment);
        assert_eq!(
            decode_at(&segment, 0),
            Found::Record { kind: Kind::Entry, payload: b"hello raft", next: segment.len() }
        );
        for bit in 0..segment.len() * 8 {
            let mut flipped = segment.clone();
            flipped[bit / 8] ^= 1 << (bit % 8);
            assert!(matches!(decode_at(&flipped, 0), Found::Damaged(_)), "bit {bit} went unnoticed");
        }
    }

    #[test]
    fn zeros_are_the_unused_tail_and_a_valid_record_is_found_behind_damage() {
        let mut segment = Vec::new();
        encode(Kind::Entry, b"first", &mut segment);
        let second = segment.len();
        encode(Kind::Truncate, &7u64.to_le_bytes(), &mut segment);
        segment.extend_from_slice(&[0; 64]);
        assert_eq!(decode_at(&segment, segment.len() - 64), Found::ZeroHeader);
        segment[3] ^= 0x10;
        assert!(matches!(decode_at(&segment, 0), Found::Damaged(_)));
        assert_eq!(next_valid_record_after(&segment, 0), Some(second));
        assert_eq!(next_valid_record_after(&segment, second), None);
    }
}
