//! Opening the log: scan every segment, keep what is valid, drop a torn
//! tail, refuse damaged durable data, and rebuild the in-memory index.

use std::path::Path;

use super::file::FileSystem;
use super::record::{self, Found, Kind};
use super::writer::{create_segment, segment_header_payload, Tail};
use super::{parse_segment_file_name, segment_file_name, Index, Place, WalError};
use crate::typ::{Entry, LogId};

pub(super) struct Recovered {
    pub(super) index: Index,
    pub(super) tail: Tail,
}

/// The valid records of one segment and where its valid data ends.
struct Scan {
    /// Kind, payload offset and payload length of each record, in order.
    records: Vec<(Kind, usize, usize)>,
    /// Where the next record goes.
    end: usize,
    /// One past the last non-zero byte of a torn tail to zero out, if any.
    torn_until: Option<usize>,
}

/// Recovers the log in `dir`, creating it if it does not exist.
pub(super) fn recover(fs: &dyn FileSystem, dir: &Path, segment_bytes: u64) -> Result<Recovered, WalError> {
    fs.create_dir_all(dir).map_err(|e| WalError::io("cannot create the log directory", &e))?;
    let names = fs.list(dir).map_err(|e| WalError::io("cannot list the log directory", &e))?;
    // A segment the writer was preparing holds nothing yet.
    for name in names.iter().filter(|name| name.ends_with(".wal.tmp")) {
        fs.remove(&dir.join(name)).map_err(|e| WalError::io("cannot remove a prepared log segment", &e))?;
    }
    let mut segments: Vec<u64> = names.iter().filter_map(|name| parse_segment_file_name(name)).collect();
    segments.sort_unstable();
    for pair in segments.windows(2) {
        if pair[1] != pair[0] + 1 {
            return Err(WalError::Corrupt {
                file: dir.join(segment_file_name(pair[0] + 1)).display().to_string(),
                offset: 0,
                detail: "this segment is missing between two others".into(),
            });
        }
    }

    let mut index = Index::default();
    // The last index of the gap the surviving segments start after, if any
    // (see `replay`); a purge marker must cover it.
    let mut gap_until: Option<u64> = None;
    let mut tail = None;
    let count = segments.len();
    for (position, segment) in segments.into_iter().enumerate() {
        let is_last = position + 1 == count;
        let path = dir.join(segment_file_name(segment));
        let file = fs.open(&path).map_err(|e| WalError::io("cannot open a log segment", &e))?;
        let length = file.len().map_err(|e| WalError::io("cannot read a log segment's size", &e))?;
        let mut bytes = vec![0; usize::try_from(length).map_err(|e| WalError::Codec(e.to_string()))?];
        file.read_exact_at(&mut bytes, 0).map_err(|e| WalError::io("cannot read a log segment", &e))?;
        let corrupt = |offset: usize, detail: String| WalError::Corrupt {
            file: path.display().to_string(),
            offset: offset as u64,
            detail,
        };
        let scan = scan(&bytes, is_last).map_err(|(offset, detail)| corrupt(offset, detail))?;

        if scan.records.first().is_some_and(|(kind, _, _)| *kind != Kind::SegmentHeader) {
            return Err(corrupt(0, "the segment does not start with a segment header".into()));
        }
        if scan.records.is_empty() && !is_last {
            return Err(corrupt(0, "a segment before the last one is empty".into()));
        }
        if scan.records.is_empty() {
            // Only the last segment can be empty: the writer crashed while
            // creating it, before anything in it was acknowledged.
            fs.remove(&path).map_err(|e| WalError::io("cannot remove an empty log segment", &e))?;
            fs.sync_dir(dir).map_err(|e| WalError::io("cannot fsync the log directory", &e))?;
            tracing::warn!(segment = %path.display(), "removed a log segment that was created but never written");
            break;
        }
        if let Some(torn_until) = scan.torn_until {
            // Zero the torn bytes, so that the records written next are not
            // followed by leftovers that would look like damage.
            let zeros = vec![0; torn_until - scan.end];
            file.write_all_at(&zeros, scan.end as u64)
                .and_then(|()| file.sync_data())
                .map_err(|e| WalError::io("cannot zero the torn tail of the log", &e))?;
            tracing::warn!(
                segment = %path.display(),
                offset = scan.end,
                bytes = torn_until - scan.end,
                "dropped a torn write at the end of the log (it was never acknowledged)"
            );
        }
        for (kind, offset, length) in &scan.records {
            let payload = &bytes[*offset..*offset + *length];
            replay(&mut index, &mut gap_until, segment, *kind, *offset, payload)
                .map_err(|detail| corrupt(*offset, detail))?;
        }
        index.segments.insert(segment, file.clone());
        tail = Some(Tail { segment, file, position: scan.end as u64 });
    }
    if let Some(gap_until) = gap_until {
        if index.last_purged.is_none_or(|purged| purged.index < gap_until) {
            return Err(WalError::Corrupt {
                file: dir.display().to_string(),
                offset: 0,
                detail: format!(
                    "the entries up to index {gap_until} are missing and no purge marker covers them (the last \
                     purges up to {})",
                    index.last_purged.map_or_else(|| "nothing".to_string(), |purged| purged.index.to_string())
                ),
            });
        }
    }
    if let Some(purged) = index.last_purged {
        if !index.slots.is_empty() && index.first_index != purged.index + 1 {
            return Err(WalError::Corrupt {
                file: dir.display().to_string(),
                offset: 0,
                detail: format!(
                    "the log resumes at index {} after purging up to {}: entries are missing",
                    index.first_index, purged.index
                ),
            });
        }
    }
    let tail = match tail {
        Some(tail) => tail,
        None => {
            let segment = index.segments.keys().next_back().map_or(1, |last| last + 1);
            let (file, position) = create_segment(fs, dir, segment, segment_bytes)?;
            index.segments.insert(segment, file.clone());
            Tail { segment, file, position }
        }
    };
    Ok(Recovered { index, tail })
}

/// Finds the valid records of one segment. Damage with nothing valid after
/// it in the last segment is a torn tail; any other damage is an error.
fn scan(bytes: &[u8], is_last: bool) -> Result<Scan, (usize, String)> {
    let mut records = Vec::new();
    let mut offset = 0;
    let damage = loop {
        match record::decode_at(bytes, offset) {
            Found::Record { kind, payload, next } => {
                records.push((kind, offset + record::HEADER_BYTES, payload.len()));
                offset = next;
            }
            Found::ZeroHeader if bytes[offset..].iter().all(|byte| *byte == 0) => {
                return Ok(Scan { records, end: offset, torn_until: None });
            }
            Found::ZeroHeader => break "zero bytes where a record should start",
            Found::Damaged(reason) => break reason,
        }
    };
    if let Some(valid) = record::next_valid_record_after(bytes, offset) {
        return Err((offset, format!("{damage}, and a valid record follows at byte {valid}")));
    }
    if !is_last {
        return Err((offset, format!("{damage} in a segment that was complete and durable")));
    }
    let torn_until = bytes.iter().rposition(|byte| *byte != 0).map_or(offset, |last| last + 1);
    Ok(Scan { records, end: offset, torn_until: Some(torn_until) })
}

/// Applies one record to the index being rebuilt.
///
/// An entry that does not continue an empty index starts it anew, and
/// `gap_until` remembers the gap for [`recover`] to check once every record
/// is replayed. Such a gap is how a legitimately purged log can look: the
/// writer deletes the segments a purge made obsolete once its marker is
/// durable, and the segment that remains can hold an older, smaller marker
/// before the entries that followed the deleted ones, and the marker that
/// covers them only after (found by the simulation, seed 141).
fn replay(
    index: &mut Index,
    gap_until: &mut Option<u64>,
    segment: u64,
    kind: Kind,
    offset: usize,
    payload: &[u8],
) -> Result<(), String> {
    match kind {
        Kind::SegmentHeader => {
            if offset != record::HEADER_BYTES || payload != segment_header_payload(segment).as_slice() {
                return Err("an unexpected segment header (wrong position, segment number or version)".into());
            }
        }
        Kind::Entry => {
            let entry: Entry = bincode::deserialize(payload).map_err(|e| format!("an entry does not decode: {e}"))?;
            match index.check_continues(entry.log_id.index) {
                Ok(()) => {}
                Err(WalError::OutOfOrder { expected, got }) if index.slots.is_empty() && got > expected => {
                    *gap_until = Some(got - 1);
                }
                Err(error) => return Err(error.to_string()),
            }
            let length = u32::try_from(payload.len()).map_err(|e| e.to_string())?;
            index.push(entry.log_id, Place::Written { segment, offset: offset as u64, length });
        }
        Kind::Truncate => {
            let bytes: [u8; 8] = payload.try_into().map_err(|_| "a truncate marker of the wrong size".to_string())?;
            index.truncate(u64::from_le_bytes(bytes));
        }
        Kind::Purge => {
            let log_id: LogId =
                bincode::deserialize(payload).map_err(|e| format!("a purge marker does not decode: {e}"))?;
            index.purge(log_id);
        }
    }
    Ok(())
}
