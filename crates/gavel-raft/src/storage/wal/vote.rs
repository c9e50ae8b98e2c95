//! The vote, in a small file of its own that is replaced atomically.
//!
//! A vote changes only at elections, and it must survive purges of the log:
//! kept in the WAL, the last vote record would have to be carried forward
//! every time the segment holding it is deleted. A separate file costs two
//! fsyncs and a rename per vote, which elections can afford.
//!
//! Format: payload length (u32 LE), CRC-32 of the payload (u32 LE), then the
//! bincode `Vote`. Written as `vote.tmp`, fsynced, renamed over `vote`, and
//! the directory fsynced: a crash leaves either the old or the new vote.

use std::path::Path;

use super::file::FileSystem;
use super::WalError;
use crate::typ::Vote;

const VOTE_FILE: &str = "vote";
const VOTE_TEMP_FILE: &str = "vote.tmp";

/// Makes `vote` durable in `dir`; returns once it is.
pub(super) fn save(fs: &dyn FileSystem, dir: &Path, vote: &Vote) -> Result<(), WalError> {
    let bytes = encode(vote)?;
    let temp = dir.join(VOTE_TEMP_FILE);
    fs.write_synced(&temp, &bytes).map_err(|e| WalError::io("cannot write the vote file", &e))?;
    fs.rename(&temp, &dir.join(VOTE_FILE)).map_err(|e| WalError::io("cannot rename the vote file", &e))?;
    fs.sync_dir(dir).map_err(|e| WalError::io("cannot fsync the log directory after saving the vote", &e))
}

/// The vote file's bytes: length, CRC-32 of the payload, bincode payload.
fn encode(vote: &Vote) -> Result<Vec<u8>, WalError> {
    let payload = bincode::serialize(vote).map_err(|e| WalError::Codec(e.to_string()))?;
    let length = u32::try_from(payload.len()).map_err(|_| WalError::Codec("the vote is too large".into()))?;
    let mut bytes = Vec::with_capacity(8 + payload.len());
    bytes.extend_from_slice(&length.to_le_bytes());
    bytes.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
    bytes.extend_from_slice(&payload);
    Ok(bytes)
}

/// Planted bug `unsynced-vote`: writes `vote` over the
/// saved one in place, with no fsync, and returns at once; a power cut
/// brings the old vote back. Returns false (nothing written) when there is
/// no saved vote of the same size to write over: the caller saves it the
/// right way.
#[cfg(feature = "mutants")]
pub(super) fn overwrite_unsynced(fs: &dyn FileSystem, dir: &Path, vote: &Vote) -> Result<bool, WalError> {
    let bytes = encode(vote)?;
    let path = dir.join(VOTE_FILE);
    let Ok(file) = fs.open(&path) else { return Ok(false) };
    if file.len().map_err(|e| WalError::io("cannot read the vote file's size", &e))? != bytes.len() as u64 {
        return Ok(false);
    }
    file.write_all_at(&bytes, 0).map_err(|e| WalError::io("cannot write the vote file", &e))?;
    Ok(true)
}

/// The saved vote, if any. A vote file that does not check out is refused:
/// it was written atomically, so it is damaged, not torn.
pub(super) fn read(fs: &dyn FileSystem, dir: &Path) -> Result<Option<Vote>, WalError> {
    let path = dir.join(VOTE_FILE);
    let Some(bytes) = fs.read(&path).map_err(|e| WalError::io("cannot read the vote file", &e))? else {
        return Ok(None);
    };
    let corrupt =
        |detail: &str| WalError::Corrupt { file: path.display().to_string(), offset: 0, detail: detail.into() };
    if bytes.len() < 8 {
        return Err(corrupt("the vote file is shorter than its header"));
    }
    let length = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize;
    let crc = u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
    let payload = &bytes[8..];
    if payload.len() != length || crc32fast::hash(payload) != crc {
        return Err(corrupt("the vote file's length or checksum does not match"));
    }
    bincode::deserialize(payload).map(Some).map_err(|_| corrupt("the vote does not decode"))
}
