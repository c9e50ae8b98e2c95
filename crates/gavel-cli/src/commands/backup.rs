//! `gavel backup save|restore|inspect`: a consistent backup of the whole
//! state into one file, and new nodes' data directories seeded from it.
//!
//! The file (format version 1, all integers little-endian):
//!
//! | bytes            | what                                                    |
//! |------------------|---------------------------------------------------------|
//! | 8                | magic `GAVELBAK`                                        |
//! | 4                | format version (1)                                      |
//! | 4                | header length N (at most [`HEADER_BYTES_MAX`])          |
//! | N                | header: JSON ([`FileHeader`])                           |
//! | 32               | SHA-256 of everything before it (magic to header)       |
//! | `bodyBytes`      | body: the state machine's snapshot bytes                |
//!
//! and nothing after the body. The header names the applied index and term
//! the body stands for, the state hash at that index, the body's length and
//! SHA-256, and the membership then. `save` writes a temporary file next to
//! FILE, checks the body against the header, fsyncs, renames it to FILE and
//! fsyncs the directory, so FILE is either complete or absent. `restore`
//! and `inspect` check the magic, version, header checksum, length and body
//! checksum (and `restore` the state hash) before anything is written.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use gavel_client::pb;
use gavel_core::ErrorCode;
use gavel_raft::limits::SNAPSHOT_BYTES_MAX;
use gavel_raft::{BackupError, BackupPosition};
use gavel_store::restore::{seed_data_dir, RestoreError};
use serde::{Deserialize, Serialize};
use serde_json::json;
use sha2::{Digest, Sha256};

use super::output;
use super::{CommandError, GlobalArgs};

/// The first bytes of every backup file.
pub const MAGIC: &[u8; 8] = b"GAVELBAK";
/// The format version this binary writes and reads.
pub const FORMAT_VERSION: u32 = 1;
/// Largest header a file may announce: the membership and a few numbers
/// take a few KiB, so anything larger is a corrupt length, refused before
/// it is allocated.
pub const HEADER_BYTES_MAX: u32 = 1024 * 1024;
/// The domain code of a file that is not a complete, intact backup.
const CORRUPT: ErrorCode = ErrorCode::BackupCorrupt;

/// `gavel backup`.
#[derive(Debug, Args)]
pub struct BackupArgs {
    /// Options shared by every command (`save` talks to the cluster).
    #[command(flatten, next_help_heading = "Global options")]
    pub global: GlobalArgs,
    /// What to do.
    #[command(subcommand)]
    pub command: BackupCommand,
}

/// The verbs of `gavel backup`.
#[derive(Debug, Subcommand)]
pub enum BackupCommand {
    /// Take a consistent backup through the leader (admin) and write it to FILE.
    Save {
        /// The file to write; it must not exist.
        file: PathBuf,
    },
    /// Seed a new node's data directory from a backup (offline, like `etcdutl snapshot restore`).
    Restore {
        /// The backup file.
        file: PathBuf,
        /// The new node's data directory; it must not exist or be empty.
        #[arg(long)]
        data_dir: PathBuf,
        /// The new node's id (one of the members).
        #[arg(long)]
        id: u64,
        /// The new cluster's voters, `id=host:port,...`, the same for every
        /// node restored. Default: the voters recorded in the backup.
        #[arg(long)]
        members: Option<String>,
    },
    /// Check a backup file and print its header.
    Inspect {
        /// The backup file.
        file: PathBuf,
    },
}

/// One member as the header records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileMember {
    /// Raft node id.
    pub node_id: u64,
    /// gRPC address.
    pub addr: String,
    /// Voter (true) or learner.
    pub voter: bool,
}

/// The JSON header of a backup file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileHeader {
    /// Index of the last log entry applied into the body.
    pub applied_index: u64,
    /// Term of that entry.
    pub applied_term: u64,
    /// Leader that wrote that entry.
    pub applied_leader_id: u64,
    /// State hash at `applied_index`.
    pub state_hash: String,
    /// Length of the body.
    pub body_bytes: u64,
    /// SHA-256 of the body, lower-case hex.
    pub body_sha256: String,
    /// Node that took the backup.
    pub taken_by_node_id: u64,
    /// When, in ms since the Unix epoch (that node's clock).
    pub taken_at_ms: u64,
    /// Membership at `applied_index`.
    pub members: Vec<FileMember>,
    /// Version of the `gavel` binary that wrote the file.
    pub gavel_version: String,
}

impl FileHeader {
    fn from_proto(header: &pb::BackupHeader) -> FileHeader {
        FileHeader {
            applied_index: header.applied_index,
            applied_term: header.applied_term,
            applied_leader_id: header.applied_leader_id,
            state_hash: header.state_hash.clone(),
            body_bytes: header.body_bytes,
            body_sha256: header.body_sha256.clone(),
            taken_by_node_id: header.taken_by_node_id,
            taken_at_ms: header.taken_at_ms,
            members: header
                .members
                .iter()
                .map(|member| FileMember { node_id: member.node_id, addr: member.addr.clone(), voter: member.voter })
                .collect(),
            gavel_version: env!("CARGO_PKG_VERSION").to_string(),
        }
    }

    /// The bytes from the magic to the header checksum, inclusive.
    fn encode(&self) -> Result<Vec<u8>, CommandError> {
        let json = serde_json::to_vec(self).map_err(|error| CommandError::Other(error.into()))?;
        let length = u32::try_from(json.len()).ok().filter(|length| *length <= HEADER_BYTES_MAX).ok_or_else(|| {
            CommandError::Other(anyhow::anyhow!("the backup header is {} bytes, over {HEADER_BYTES_MAX}", json.len()))
        })?;
        let mut prefix = Vec::with_capacity(16 + json.len() + 32);
        prefix.extend_from_slice(MAGIC);
        prefix.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        prefix.extend_from_slice(&length.to_le_bytes());
        prefix.extend_from_slice(&json);
        let checksum = Sha256::digest(&prefix);
        prefix.extend_from_slice(&checksum);
        Ok(prefix)
    }

    fn summary(&self, file: &Path) -> serde_json::Value {
        json!({
            "file": file.display().to_string(),
            "appliedIndex": self.applied_index,
            "appliedTerm": self.applied_term,
            "stateHash": self.state_hash,
            "bodyBytes": self.body_bytes,
            "bodySha256": self.body_sha256,
            "takenByNodeId": self.taken_by_node_id,
            "takenAtMs": self.taken_at_ms,
            "members": self.members,
        })
    }

    fn print(&self, file: &Path, json: bool, extra: &[(&str, String)]) -> Result<(), CommandError> {
        if json {
            let mut value = self.summary(file);
            for (key, text) in extra {
                value[*key] = json!(text);
            }
            return output::print_json(&value);
        }
        let members: Vec<String> = self
            .members
            .iter()
            .map(|member| format!("{}={}{}", member.node_id, member.addr, if member.voter { "" } else { " (learner)" }))
            .collect();
        let mut pairs = vec![
            ("file", file.display().to_string()),
            ("applied index", self.applied_index.to_string()),
            ("applied term", self.applied_term.to_string()),
            ("state hash", self.state_hash.clone()),
            ("body", format!("{} bytes, sha256 {}", self.body_bytes, self.body_sha256)),
            ("taken by", format!("node {} at {}", self.taken_by_node_id, output::time(self.taken_at_ms as i64))),
            ("members", members.join(",")),
        ];
        pairs.extend(extra.iter().map(|(key, text)| (*key, text.clone())));
        output::print(&output::key_values(&pairs))
    }
}

/// Runs one `gavel backup` command.
pub async fn run(args: BackupArgs) -> Result<(), CommandError> {
    let json = args.global.json;
    match args.command {
        BackupCommand::Save { file } => save(&args.global, &file).await,
        BackupCommand::Restore { file, data_dir, id, members } => {
            restore(&file, &data_dir, id, members.as_deref(), json).await
        }
        BackupCommand::Inspect { file } => {
            let (header, _) = read_backup(&file)?;
            header.print(&file, json, &[])
        }
    }
}

fn io_error(what: String) -> impl FnOnce(std::io::Error) -> CommandError {
    move |error| CommandError::Other(anyhow::Error::new(error).context(what))
}

/// `gavel backup save FILE`.
async fn save(global: &GlobalArgs, file: &Path) -> Result<(), CommandError> {
    if file.exists() {
        return Err(CommandError::Usage(format!("{} exists; name a new file", file.display())));
    }
    let name = file.file_name().ok_or_else(|| CommandError::Usage(format!("{} names no file", file.display())))?;
    let directory = match file.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let client = global.client()?;
    let mut download = client.backup().await?;
    let header = FileHeader::from_proto(download.header());
    if header.body_bytes > SNAPSHOT_BYTES_MAX {
        return Err(CommandError::refused(
            CORRUPT,
            format!("the backup announces {} bytes, over {SNAPSHOT_BYTES_MAX}", header.body_bytes),
        ));
    }
    let partial = directory.join(format!(".{}.partial-{}", name.to_string_lossy(), std::process::id()));
    let written = write_file(&partial, &header, &mut download).await;
    let placed = written.and_then(|()| {
        std::fs::rename(&partial, file).map_err(io_error(format!(
            "renaming {} to {}",
            partial.display(),
            file.display()
        )))?;
        std::fs::File::open(&directory)
            .and_then(|dir| dir.sync_all())
            .map_err(io_error(format!("fsyncing {}", directory.display())))
    });
    if placed.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    placed?;
    header.print(file, global.json, &[])
}

/// Writes the header and the streamed body to `path` (new), checks the body
/// against the header, and fsyncs.
async fn write_file(
    path: &Path,
    header: &FileHeader,
    download: &mut gavel_client::BackupDownload,
) -> Result<(), CommandError> {
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(io_error(format!("creating {}", path.display())))?;
    let writing = io_error(format!("writing {}", path.display()));
    out.write_all(&header.encode()?).map_err(writing)?;
    let mut hasher = Sha256::new();
    let mut received: u64 = 0;
    while let Some(chunk) = download.next_chunk().await? {
        hasher.update(&chunk);
        received += chunk.len() as u64;
        out.write_all(&chunk).map_err(io_error(format!("writing {}", path.display())))?;
    }
    let body_sha256 = hex::encode(hasher.finalize());
    if received != header.body_bytes || body_sha256 != header.body_sha256 {
        return Err(CommandError::Other(anyhow::anyhow!(
            "the received backup does not match its header ({received} bytes with sha256 {body_sha256}, \
             announced {} bytes with sha256 {})",
            header.body_bytes,
            header.body_sha256
        )));
    }
    out.sync_all().map_err(io_error(format!("fsyncing {}", path.display())))
}

fn corrupt(file: &Path, why: impl std::fmt::Display) -> CommandError {
    CommandError::refused(CORRUPT, format!("{} is not an intact Gavel backup: {why}", file.display()))
}

/// Reads and checks a whole backup file: its header and its body.
fn read_backup(file: &Path) -> Result<(FileHeader, Vec<u8>), CommandError> {
    let mut input = std::fs::File::open(file).map_err(io_error(format!("opening {}", file.display())))?;
    let file_bytes = input.metadata().map_err(io_error(format!("reading {}", file.display())))?.len();
    let mut fixed = [0u8; 16];
    input.read_exact(&mut fixed).map_err(|_| corrupt(file, "it is shorter than a backup header"))?;
    if &fixed[..8] != MAGIC {
        return Err(corrupt(file, "it does not start with GAVELBAK"));
    }
    let version = u32::from_le_bytes([fixed[8], fixed[9], fixed[10], fixed[11]]);
    if version != FORMAT_VERSION {
        return Err(corrupt(file, format!("format version {version}; this gavel reads version {FORMAT_VERSION}")));
    }
    let header_bytes = u32::from_le_bytes([fixed[12], fixed[13], fixed[14], fixed[15]]);
    if header_bytes > HEADER_BYTES_MAX || 16 + u64::from(header_bytes) + 32 > file_bytes {
        return Err(corrupt(file, format!("its header length {header_bytes} does not fit the file")));
    }
    let mut rest = vec![0u8; header_bytes as usize + 32];
    input.read_exact(&mut rest).map_err(|_| corrupt(file, "it is truncated inside its header"))?;
    let (json_bytes, checksum) = rest.split_at(header_bytes as usize);
    let mut hasher = Sha256::new();
    hasher.update(fixed);
    hasher.update(json_bytes);
    if hasher.finalize().as_slice() != checksum {
        return Err(corrupt(file, "its header checksum does not match"));
    }
    let header: FileHeader = serde_json::from_slice(json_bytes)
        .map_err(|error| corrupt(file, format!("its header is not valid: {error}")))?;
    if header.body_bytes > SNAPSHOT_BYTES_MAX {
        return Err(corrupt(file, format!("its body of {} bytes is over {SNAPSHOT_BYTES_MAX}", header.body_bytes)));
    }
    let expected_bytes = 16 + u64::from(header_bytes) + 32 + header.body_bytes;
    if file_bytes != expected_bytes {
        let state = if file_bytes < expected_bytes { "truncated" } else { "longer than its header says" };
        return Err(corrupt(file, format!("it is {state}: {file_bytes} bytes, expected {expected_bytes}")));
    }
    let body_length =
        usize::try_from(header.body_bytes).map_err(|_| corrupt(file, "its body does not fit in memory"))?;
    let mut body = vec![0u8; body_length];
    input.read_exact(&mut body).map_err(|_| corrupt(file, "it is truncated inside its body"))?;
    let body_sha256 = hex::encode(Sha256::digest(&body));
    if body_sha256 != header.body_sha256 {
        return Err(corrupt(
            file,
            format!("its body checksum is {body_sha256}, the header says {}", header.body_sha256),
        ));
    }
    Ok((header, body))
}

/// `gavel backup restore FILE --data-dir DIR --id N [--members ...]`.
async fn restore(file: &Path, data_dir: &Path, id: u64, members: Option<&str>, json: bool) -> Result<(), CommandError> {
    let members: BTreeMap<u64, String> = match members {
        Some(text) => {
            crate::cli::parse_peers(text).map_err(|error| CommandError::Usage(format!("--members: {error}")))?
        }
        None => BTreeMap::new(),
    };
    let (header, body) = read_backup(file)?;
    let members = if members.is_empty() {
        header
            .members
            .iter()
            .filter(|member| member.voter)
            .map(|member| (member.node_id, member.addr.clone()))
            .collect()
    } else {
        members
    };
    if !members.contains_key(&id) {
        let ids: Vec<String> = members.keys().map(u64::to_string).collect();
        return Err(CommandError::Usage(format!("--id {id} is not one of the members ({})", ids.join(", "))));
    }
    // The storage crate checks the body (the application the node runs
    // restores it) and its state hash before anything is written.
    let position =
        BackupPosition { index: header.applied_index, term: header.applied_term, leader_id: header.applied_leader_id };
    seed_data_dir(data_dir, id, &members, position, body, &header.state_hash).await.map_err(|error| match error {
        RestoreError::State(_) | RestoreError::StateHash { .. } => corrupt(file, error.to_string()),
        RestoreError::Seed(BackupError::DataDirNotEmpty(_)) => {
            CommandError::refused(ErrorCode::DataDirNotEmpty, error.to_string())
        }
        RestoreError::Seed(BackupError::Members(_)) => CommandError::Usage(error.to_string()),
        RestoreError::Seed(other) => CommandError::Other(other.into()),
    })?;
    let peers: Vec<String> = members.iter().map(|(node_id, addr)| format!("{node_id}={addr}")).collect();
    header.print(
        file,
        json,
        &[("restored", format!("node {id} into {}", data_dir.display())), ("new members", peers.join(","))],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(body: &[u8]) -> FileHeader {
        let sha = hex::encode(Sha256::digest(body));
        FileHeader {
            applied_index: 42,
            applied_term: 3,
            applied_leader_id: 2,
            state_hash: sha.clone(),
            body_bytes: body.len() as u64,
            body_sha256: sha,
            taken_by_node_id: 2,
            taken_at_ms: 1,
            members: vec![FileMember { node_id: 1, addr: "127.0.0.1:7401".into(), voter: true }],
            gavel_version: "test".into(),
        }
    }

    fn written(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, bytes).expect("write");
        path
    }

    fn refusal(result: Result<(FileHeader, Vec<u8>), CommandError>) -> String {
        match result {
            Err(CommandError::Refused { code, message, .. }) if code == CORRUPT.as_str() => message,
            other => panic!("expected {CORRUPT}, got {other:?}"),
        }
    }

    #[test]
    fn a_written_file_reads_back_and_each_kind_of_damage_is_named() {
        let dir = tempfile::tempdir().expect("temp dir");
        let body = b"the state".to_vec();
        let mut file = header(&body).encode().expect("encode");
        file.extend_from_slice(&body);
        let good = written(dir.path(), "good", &file);
        let (read, read_body) = read_backup(&good).expect("an intact file reads");
        assert_eq!((read, read_body), (header(&body), body.clone()));

        let mut longer = file.clone();
        longer.push(0);
        assert!(refusal(read_backup(&written(dir.path(), "longer", &longer))).contains("longer than its header says"));
        let mut magic = file.clone();
        magic[0] = b'X';
        assert!(refusal(read_backup(&written(dir.path(), "magic", &magic))).contains("GAVELBAK"));
        let mut version = file.clone();
        version[8] = 2;
        assert!(refusal(read_backup(&written(dir.path(), "version", &version))).contains("format version 2"));
        let mut huge_header = file.clone();
        huge_header[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(refusal(read_backup(&written(dir.path(), "huge", &huge_header))).contains("header length"));
        assert!(refusal(read_backup(&written(dir.path(), "short", &file[..10]))).contains("shorter"));
    }
}
