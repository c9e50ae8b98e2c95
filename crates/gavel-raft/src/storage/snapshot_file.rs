//! Snapshots as files: the stored snapshot lives in `raft-snapshot/`, and
//! what openraft hands between the state machine, the network and backups
//! ([`SnapshotFile`]) is an open handle to one, never the bytes.

use std::fs::File;
use std::io::{BufWriter, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::application::SnapshotSource;
use crate::limits::SNAPSHOT_STREAM_BUFFER_BYTES;

/// A snapshot's bytes in a file, read from its start. Cheap to move: a file
/// handle and a length. A handle keeps its file readable even after the
/// stored snapshot is replaced and the file unlinked.
pub(crate) struct SnapshotFile {
    file: File,
    bytes: u64,
    /// A file this handle owns (built here or received from the leader,
    /// not yet stored): removed when the handle is dropped, unless the
    /// store adopted it ([`SnapshotFile::adopt`]).
    owned: Option<PathBuf>,
}

impl std::fmt::Debug for SnapshotFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotFile").field("bytes", &self.bytes).field("owned", &self.owned).finish()
    }
}

/// What openraft hands around as a snapshot's data: the bytes in a file, or,
/// for an application that keeps its own state
/// ([`crate::Application::keeps_own_state`]), a view of its store written
/// to a file only when the snapshot is sent or backed up.
pub(crate) enum SnapshotData {
    /// The snapshot's bytes in a file.
    File(SnapshotFile),
    /// A point-in-time view of the application's store, not yet written.
    View(SnapshotView),
    /// A snapshot built as a checkpoint into the application's store: what
    /// a build hands back to openraft, which keeps only its meta. Its
    /// bytes are read through the current snapshot (a [`SnapshotData::View`]).
    Checkpointed,
}

/// A view of the application's store and the directory to write it in.
pub(crate) struct SnapshotView {
    source: Box<dyn SnapshotSource>,
    dir: PathBuf,
}

impl std::fmt::Debug for SnapshotData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SnapshotData::File(file) => file.fmt(f),
            SnapshotData::View(view) => f.debug_struct("SnapshotView").field("dir", &view.dir).finish(),
            SnapshotData::Checkpointed => f.write_str("Checkpointed"),
        }
    }
}

impl SnapshotData {
    /// A view of the application's store, to be written in `dir`.
    pub(crate) fn view(source: Box<dyn SnapshotSource>, dir: PathBuf) -> SnapshotData {
        SnapshotData::View(SnapshotView { source, dir })
    }

    /// The snapshot in a file: the file itself, or the view written to a new
    /// owned, fsynced file in its directory (removed when the handle is
    /// dropped). Blocking: for a view, as long as writing the whole state.
    pub(crate) fn into_file(self) -> std::io::Result<SnapshotFile> {
        match self {
            SnapshotData::File(file) => Ok(file),
            SnapshotData::View(view) => SnapshotFile::write(temporary_path(&view.dir, "view"), view.source),
            SnapshotData::Checkpointed => Err(std::io::Error::other(
                "a snapshot built into the application's store is read through the current snapshot",
            )),
        }
    }
}

/// Names temporary snapshot files uniquely within the process.
static TEMPORARY_SEQUENCE: AtomicU64 = AtomicU64::new(0);

/// A new name for a temporary file in `dir` (`<n>.<what>.tmp`); the store
/// removes such files on start.
pub(crate) fn temporary_path(dir: &Path, what: &str) -> PathBuf {
    let sequence = TEMPORARY_SEQUENCE.fetch_add(1, Ordering::Relaxed);
    dir.join(format!("{sequence:016x}.{what}.tmp"))
}

impl SnapshotFile {
    /// Opens a stored snapshot file for reading (not owned).
    pub(crate) fn open(path: &Path) -> std::io::Result<SnapshotFile> {
        let file = File::open(path)?;
        let bytes = file.metadata()?.len();
        Ok(SnapshotFile { file, bytes, owned: None })
    }

    /// A complete file at `path` that this handle owns: removed on drop
    /// unless adopted.
    pub(crate) fn owning(path: PathBuf) -> std::io::Result<SnapshotFile> {
        let mut opened = SnapshotFile::open(&path)?;
        opened.owned = Some(path);
        Ok(opened)
    }

    /// Writes `source` into a new owned file at `path`, through a buffer of
    /// [`SNAPSHOT_STREAM_BUFFER_BYTES`], and fsyncs it. Blocking.
    pub(crate) fn write(path: PathBuf, source: Box<dyn SnapshotSource>) -> std::io::Result<SnapshotFile> {
        // Owned from the start: a failed write removes what it wrote.
        let guard = Removal(Some(path.clone()));
        let file = File::create(&path)?;
        let mut out = BufWriter::with_capacity(SNAPSHOT_STREAM_BUFFER_BYTES, file);
        source.write_to(&mut out)?;
        let file = out.into_inner().map_err(|error| error.into_error())?;
        file.sync_all()?;
        drop(file);
        let opened = SnapshotFile::owning(path)?;
        std::mem::forget(guard);
        Ok(opened)
    }

    /// The snapshot's size.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The owned file's path, which from now on the caller is responsible
    /// for (it was renamed into the store); `None` for a stored snapshot.
    pub(crate) fn adopt(&mut self) -> Option<PathBuf> {
        self.owned.take()
    }

    /// A reader from the start of the file, independent of any other reader
    /// (positional reads, no shared offset).
    pub(crate) fn reader(&self) -> SnapshotReader<'_> {
        SnapshotReader { file: &self.file, offset: 0, end: self.bytes }
    }

    /// Reads up to `limit` bytes at `offset` (fewer only at the end).
    pub(crate) fn read_chunk(&self, offset: u64, limit: usize) -> std::io::Result<Vec<u8>> {
        let length = (self.bytes.saturating_sub(offset)).min(limit as u64) as usize;
        let mut chunk = vec![0u8; length];
        self.file.read_exact_at(&mut chunk, offset)?;
        Ok(chunk)
    }

    /// Another handle to the same file, not owning it.
    pub(crate) fn duplicate(&self) -> std::io::Result<SnapshotFile> {
        Ok(SnapshotFile { file: self.file.try_clone()?, bytes: self.bytes, owned: None })
    }

    /// Copies the snapshot into a new owned, fsynced file at `path`, through
    /// a buffer of [`SNAPSHOT_STREAM_BUFFER_BYTES`]. Blocking.
    pub(crate) fn copy_to(&self, path: PathBuf) -> std::io::Result<SnapshotFile> {
        let duplicate = self.duplicate()?;
        SnapshotFile::write(path, Box::new(OwnedCopy(duplicate)))
    }

    /// Reads the whole snapshot into memory (backups only).
    pub(crate) fn read_all(&self) -> std::io::Result<Vec<u8>> {
        let mut bytes = Vec::with_capacity(usize::try_from(self.bytes).unwrap_or(0));
        self.reader().read_to_end(&mut bytes)?;
        Ok(bytes)
    }
}

impl Drop for SnapshotFile {
    fn drop(&mut self) {
        if let Some(path) = self.owned.take() {
            // Best effort: leftovers are removed on the next start.
            let _ = std::fs::remove_file(path);
        }
    }
}

/// A snapshot file as the source of a copy ([`SnapshotFile::copy_to`]).
struct OwnedCopy(SnapshotFile);

impl SnapshotSource for OwnedCopy {
    fn write_to(self: Box<Self>, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        let mut reader = std::io::BufReader::with_capacity(SNAPSHOT_STREAM_BUFFER_BYTES, self.0.reader());
        std::io::copy(&mut reader, out).map(drop)
    }
}

/// Removes a half-written file unless forgotten.
struct Removal(Option<PathBuf>);

impl Drop for Removal {
    fn drop(&mut self) {
        if let Some(path) = self.0.take() {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Reads a [`SnapshotFile`] from its start.
pub(crate) struct SnapshotReader<'a> {
    file: &'a File,
    offset: u64,
    end: u64,
}

impl Read for SnapshotReader<'_> {
    fn read(&mut self, buffer: &mut [u8]) -> std::io::Result<usize> {
        let left = self.end.saturating_sub(self.offset);
        let wanted = (buffer.len() as u64).min(left) as usize;
        if wanted == 0 {
            return Ok(0);
        }
        let read = self.file.read_at(&mut buffer[..wanted], self.offset)?;
        self.offset += read as u64;
        Ok(read)
    }
}

/// Copies `bytes` into a new owned, fsynced file at `path` (a backup seed).
pub(crate) fn write_bytes(path: PathBuf, bytes: Vec<u8>) -> std::io::Result<SnapshotFile> {
    SnapshotFile::write(path, Box::new(bytes))
}

/// Fsyncs the directory `dir`, making a rename or removal in it durable.
pub(crate) fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    #[test]
    fn an_owned_file_is_removed_on_drop_unless_adopted_and_reads_are_positional() {
        let dir = tempfile::tempdir().expect("tempdir");
        let bytes: Vec<u8> = (0..=255u8).cycle().take(3 * 1000 + 7).collect();
        let written = SnapshotFile::write(dir.path().join("a.tmp"), Box::new(bytes.clone())).expect("write");
        assert_eq!(written.bytes(), bytes.len() as u64);
        // Two readers at once do not share an offset.
        let (mut first, mut second) = (written.reader(), written.reader());
        let mut head = [0u8; 10];
        first.read_exact(&mut head).expect("read");
        let mut whole = Vec::new();
        second.read_to_end(&mut whole).expect("read");
        assert_eq!((&head[..], whole.as_slice()), (&bytes[..10], bytes.as_slice()));
        assert_eq!(written.read_chunk(3000, 1000).expect("chunk"), bytes[3000..]);
        let copy = written.copy_to(dir.path().join("b.tmp")).expect("copy");
        assert_eq!(copy.read_all().expect("read"), bytes);
        drop((written, copy));
        assert_eq!(std::fs::read_dir(dir.path()).expect("dir").count(), 0, "owned files are removed on drop");

        let mut kept = write_bytes(dir.path().join("c.tmp"), bytes.clone()).expect("write");
        let path = kept.adopt().expect("owned");
        drop(kept);
        assert_eq!(std::fs::read(&path).expect("still there"), bytes, "an adopted file stays");
    }
}
