//! The file operations the WAL uses, behind a trait so that tests can inject
//! faults (a torn write, ENOSPC, a failed fdatasync) between the WAL and the
//! disk. [`RealFs`] is the only implementation outside tests.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

/// How much of a new segment is zero-filled per write.
const ZERO_FILL_CHUNK_BYTES: usize = 1024 * 1024;

/// One open segment file.
pub(crate) trait WalFile: Send + Sync {
    /// Reads exactly `buf.len()` bytes at `offset`.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// Writes all of `buf` at `offset`.
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// fdatasync: the written bytes (and the size, if it grew) are durable.
    fn sync_data(&self) -> io::Result<()>;
    /// The file's size in bytes.
    fn len(&self) -> io::Result<u64>;
}

/// The directory operations of the WAL and its vote file.
pub(crate) trait FileSystem: Send + Sync {
    /// Creates `dir` and its parents if missing.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// The names of the files in `dir`.
    fn list(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// Creates a new file (failing if it exists) of `len` zero bytes, written
    /// and durable, so later appends neither grow it nor allocate blocks.
    fn create_preallocated(&self, path: &Path, len: u64) -> io::Result<Arc<dyn WalFile>>;
    /// Opens an existing file for reading and writing.
    fn open(&self, path: &Path) -> io::Result<Arc<dyn WalFile>>;
    /// Replaces `path` with `bytes` and fsyncs it (not its directory).
    fn write_synced(&self, path: &Path, bytes: &[u8]) -> io::Result<()>;
    /// The whole content of `path`, or `None` if it does not exist.
    fn read(&self, path: &Path) -> io::Result<Option<Vec<u8>>>;
    /// Renames `from` to `to`, replacing `to` atomically.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes the file `path`.
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// fsyncs the directory `dir`, making creations, renames and removals in
    /// it durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
}

/// The real file system.
pub(crate) struct RealFs;

struct RealFile(File);

impl WalFile for RealFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.0.read_exact_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.0.write_all_at(buf, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.0.sync_data()
    }
    fn len(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }
}

impl FileSystem for RealFs {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            if let Ok(name) = entry?.file_name().into_string() {
                names.push(name);
            }
        }
        Ok(names)
    }

    fn create_preallocated(&self, path: &Path, len: u64) -> io::Result<Arc<dyn WalFile>> {
        let file = OpenOptions::new().read(true).write(true).create_new(true).open(path)?;
        // Real zeros, not fallocate: ext4 keeps fallocated blocks as
        // "unwritten" extents, and the first write into each one is an
        // extent conversion that makes the next fdatasync wait for a journal
        // commit (3-4 ms here, measured; see docs/decisions.md). Overwriting
        // written blocks in place leaves fdatasync only the data to flush.
        let zeros = vec![0u8; ZERO_FILL_CHUNK_BYTES];
        let mut offset = 0;
        while offset < len {
            let chunk = (len - offset).min(ZERO_FILL_CHUNK_BYTES as u64) as usize;
            file.write_all_at(&zeros[..chunk], offset)?;
            offset += chunk as u64;
        }
        // The size and the blocks are made durable once, here.
        file.sync_all()?;
        Ok(Arc::new(RealFile(file)))
    }

    fn open(&self, path: &Path) -> io::Result<Arc<dyn WalFile>> {
        Ok(Arc::new(RealFile(OpenOptions::new().read(true).write(true).open(path)?)))
    }

    fn write_synced(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        let file = OpenOptions::new().write(true).create(true).truncate(true).open(path)?;
        file.write_all_at(bytes, 0)?;
        file.sync_all()
    }

    fn read(&self, path: &Path) -> io::Result<Option<Vec<u8>>> {
        match std::fs::read(path) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
}
