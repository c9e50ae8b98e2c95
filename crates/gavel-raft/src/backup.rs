//! Backups: exporting the application's state at one log position, and
//! seeding a new node's data directory from such an export.
//!
//! Both ends work on the [`Application`]'s snapshot bytes
//! ([`Application::snapshot`] / [`Application::restore`]), never on this
//! crate's storage layout, so a backup outlives a change of the storage.
//!
//! **Export** ([`crate::RaftNode::backup`]): on the leader, after the
//! caller's linearizable-read barrier. It asks openraft to build a snapshot
//! of everything applied so far (the application is serialized on the state
//! machine's task, between two applies, as for any snapshot) and reads that
//! stored snapshot's file back whole (the one place a snapshot is held in
//! memory): a [`Backup`] holds the application's bytes, the log
//! position (index, term, leader) they stand for, and the membership at that
//! position. Every write acknowledged before the call is in it. One backup
//! runs per node at a time (a second is refused with
//! [`BackupError::Busy`]), so a node holds the snapshot's bytes at most once
//! for backups; a snapshot over [`SNAPSHOT_BYTES_MAX`] is refused
//! ([`BackupError::TooLarge`]), since no node could install it.
//!
//! **Seed** ([`seed_from_snapshot`]), for `gavel backup restore`: the
//! contract is
//! - `data_dir` must not exist or be an empty directory; anything else is
//!   refused ([`BackupError::DataDirNotEmpty`]) and left untouched;
//! - the application bytes are restored into `app` first (through
//!   [`Application::restore`], so bytes the application does not accept are
//!   refused before anything is written);
//! - the storage is built in a sibling temporary directory and renamed to
//!   `data_dir` only when complete and fsynced: on any failure nothing is
//!   left at `data_dir`;
//! - the result is a node whose state machine holds the bytes as a snapshot
//!   at `position` with `members` as its membership (all voters), whose log
//!   is empty behind that snapshot, and whose vote is at `position.term`, so
//!   the new cluster's first election is at a later term than every entry
//!   it holds. A node started on it with `--peers` does not initialize again
//!   (it is initialized), and elects a leader once a majority of `members`
//!   runs.
//!
//! Every node of the new cluster is seeded from the same backup with the same
//! `members`, each with its own `node_id`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use openraft::storage::{RaftLogStorage, RaftStateMachine};
use openraft::{BasicNode, Membership};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::application::Application;
use crate::limits::SNAPSHOT_BYTES_MAX;
use crate::storage;
use crate::storage::Raft;
use crate::typ::{LeaderId, LogId, SnapshotMeta, StoredMembership, Vote};

/// The log position a backup stands for: its last included entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackupPosition {
    /// Index of the last entry applied into the backup.
    pub index: u64,
    /// Term of that entry.
    pub term: u64,
    /// Id of the leader that wrote that entry (part of its log id).
    pub leader_id: u64,
}

/// A consistent export of the application's state, from [`crate::RaftNode::backup`].
pub struct Backup {
    /// Where in the log the bytes stand.
    pub position: BackupPosition,
    /// The membership at that position: node id → (address, voter).
    pub members: BTreeMap<u64, (String, bool)>,
    /// The application's snapshot bytes ([`Application::snapshot`]).
    pub bytes: Vec<u8>,
    /// Held while the backup is alive: one backup per node at a time.
    _running: OwnedSemaphorePermit,
}

impl std::fmt::Debug for Backup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backup")
            .field("position", &self.position)
            .field("members", &self.members)
            .field("bytes", &self.bytes.len())
            .finish()
    }
}

/// Why a backup could not be taken or seeded.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum BackupError {
    /// Another backup is running on this node.
    #[error("another backup is running on this node; retry when it is done")]
    Busy,
    /// The snapshot is larger than any node would install.
    #[error("the snapshot is {bytes} bytes, over the limit of {limit} bytes (SNAPSHOT_BYTES_MAX)")]
    TooLarge {
        /// The snapshot's size.
        bytes: u64,
        /// [`SNAPSHOT_BYTES_MAX`].
        limit: u64,
    },
    /// Nothing has been applied yet, so there is nothing to back up.
    #[error("nothing has been applied yet; there is nothing to back up")]
    Empty,
    /// The Raft layer could not build or read the snapshot (shutdown, timeout, storage).
    #[error("{0}")]
    Raft(#[from] crate::RaftError),
    /// The data directory to seed exists and holds something.
    #[error("the data directory {0} is not empty; restore only into a new or empty directory")]
    DataDirNotEmpty(PathBuf),
    /// The membership to seed is unusable (empty, without this node, a zero id).
    #[error("invalid membership: {0}")]
    Members(String),
    /// The application refused the backup's bytes.
    #[error("the application refused the backup's state: {0}")]
    Refused(String),
    /// Reading or writing the data directory failed.
    #[error("{0}")]
    Io(String),
}

/// Limits backups to one at a time on a node.
pub(crate) fn permits() -> Arc<Semaphore> {
    Arc::new(Semaphore::new(1))
}

/// Takes a backup on `raft` (see the module doc); `trigger` builds a
/// snapshot of everything applied so far and returns once it is stored.
pub(crate) async fn take<F, Fut>(raft: &Raft, running: &Arc<Semaphore>, trigger: F) -> Result<Backup, BackupError>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<(), crate::RaftError>>,
{
    let permit = running.clone().try_acquire_owned().map_err(|_| BackupError::Busy)?;
    trigger().await?;
    let snapshot = raft
        .get_snapshot()
        .await
        .map_err(|e| crate::RaftError::Storage(format!("cannot read the snapshot: {e}")))?
        .ok_or(BackupError::Empty)?;
    let log_id = snapshot.meta.last_log_id.ok_or(BackupError::Empty)?;
    // The stored snapshot's file (or the application store's view, written
    // to a file first), read whole: a backup is the one place the
    // snapshot's bytes are held in memory (one backup per node at a time).
    let data = snapshot.snapshot;
    let read = tokio::task::spawn_blocking(move || -> std::io::Result<Result<Vec<u8>, u64>> {
        let file = data.into_file()?;
        if file.bytes() > SNAPSHOT_BYTES_MAX {
            return Ok(Err(file.bytes()));
        }
        file.read_all().map(Ok)
    });
    let bytes = read
        .await
        .map_err(|e| crate::RaftError::Storage(format!("cannot read the snapshot: {e}")))?
        .map_err(|e| crate::RaftError::Storage(format!("cannot read the snapshot: {e}")))?
        .map_err(|bytes| BackupError::TooLarge { bytes, limit: SNAPSHOT_BYTES_MAX })?;
    let size = bytes.len() as u64;
    let membership = snapshot.meta.last_membership.membership();
    let voters: BTreeSet<u64> = membership.voter_ids().collect();
    let members =
        membership.nodes().map(|(node_id, node)| (*node_id, (node.addr.clone(), voters.contains(node_id)))).collect();
    let position =
        BackupPosition { index: log_id.index, term: log_id.leader_id.term, leader_id: log_id.leader_id.node_id };
    tracing::info!(index = position.index, term = position.term, bytes = size, "backup taken");
    Ok(Backup { position, members, bytes, _running: permit })
}

/// Seeds a new node's `data_dir` so that it starts with `bytes` as its
/// state at `position` and `members` (node id → address, all voters) as
/// the cluster; `app` is the application the node will run (it restores
/// the bytes first, to refuse ones it cannot read). See the module doc for
/// the whole contract.
pub async fn seed_from_snapshot(
    data_dir: &Path,
    node_id: u64,
    members: &BTreeMap<u64, String>,
    position: BackupPosition,
    app: Arc<dyn Application>,
    bytes: Vec<u8>,
) -> Result<(), BackupError> {
    if members.is_empty() {
        return Err(BackupError::Members("no members given".into()));
    }
    if members.contains_key(&0) {
        return Err(BackupError::Members("node ids must be non-zero".into()));
    }
    if !members.contains_key(&node_id) {
        let ids: Vec<String> = members.keys().map(u64::to_string).collect();
        return Err(BackupError::Members(format!("node {node_id} is not one of the members ({})", ids.join(", "))));
    }
    if bytes.len() as u64 > SNAPSHOT_BYTES_MAX {
        return Err(BackupError::TooLarge { bytes: bytes.len() as u64, limit: SNAPSHOT_BYTES_MAX });
    }
    check_empty(data_dir)?;
    // Refuses bytes the application cannot read before anything is created.
    app.restore(&bytes).map_err(BackupError::Refused)?;

    let staging = staging_dir(data_dir)?;
    let io = |what: &str, e: &dyn std::fmt::Display| BackupError::Io(format!("{what}: {e}"));
    if staging.exists() {
        // Left by an interrupted restore: it was never renamed into place.
        std::fs::remove_dir_all(&staging).map_err(|e| io(&format!("removing {}", staging.display()), &e))?;
    }
    let log_id = LogId::new(LeaderId { term: position.term, node_id: position.leader_id }, position.index);
    let voters: BTreeSet<u64> = members.keys().copied().collect();
    let nodes: BTreeMap<u64, BasicNode> =
        members.iter().map(|(id, addr)| (*id, BasicNode { addr: addr.clone() })).collect();
    let membership = Membership::new(vec![voters], nodes).map_err(|e| BackupError::Members(e.to_string()))?;
    let meta =
        SnapshotMeta { last_log_id: Some(log_id), last_membership: StoredMembership::new(Some(log_id), membership) };
    // A vote at the backup's term: the new cluster's first election is at a
    // later term than the entries it holds, as Raft requires.
    let vote = Vote::new(position.term, node_id);
    let seeded = seed_storage(&staging, &meta, vote, app, bytes).await;
    let placed = seeded.and_then(|()| {
        // rename(2) replaces an empty directory, and fsyncing the parent makes the new name durable.
        std::fs::rename(&staging, data_dir)
            .map_err(|e| io(&format!("moving {} to {}", staging.display(), data_dir.display()), &e))?;
        sync_dir(parent_of(data_dir)).map_err(|e| io("fsyncing the parent directory", &e))
    });
    if placed.is_err() {
        let _ = std::fs::remove_dir_all(&staging);
    }
    placed
}

/// Writes the storage into `dir` (new) through the storage's own openraft
/// interfaces: `bytes` as the snapshot `meta` describes, `vote`, and the
/// committed pointer at the snapshot; then closes it.
async fn seed_storage(
    dir: &Path,
    meta: &SnapshotMeta,
    vote: Vote,
    app: Arc<dyn Application>,
    bytes: Vec<u8>,
) -> Result<(), BackupError> {
    let storage_error = |e: &dyn std::fmt::Display| BackupError::Io(format!("writing the raft storage: {e}"));
    let owned = dir.to_path_buf();
    let opened =
        tokio::task::spawn_blocking(move || storage::open(&owned, app)).await.map_err(|e| storage_error(&e))??;
    let storage::OpenedStorage { mut log_store, mut state_machine, closed } = opened;
    // Installing restores the application again (cheap next to the write)
    // and stores the snapshot durably, as a snapshot from a leader would be.
    let path = storage::snapshot_file::temporary_path(&storage::snapshot_dir(dir), "seed");
    let file = tokio::task::spawn_blocking(move || storage::snapshot_file::write_bytes(path, bytes))
        .await
        .map_err(|e| storage_error(&e))?
        .map_err(|e| storage_error(&e))?;
    state_machine.install_snapshot(meta, storage::SnapshotData::File(file)).await.map_err(|e| storage_error(&e))?;
    log_store.save_vote(&vote).await.map_err(|e| storage_error(&e))?;
    log_store.save_committed(meta.last_log_id).await.map_err(|e| storage_error(&e))?;
    drop(log_store);
    drop(state_machine);
    let _ = closed.await;
    sync_dir(dir).map_err(|e| storage_error(&e))?;
    Ok(())
}

/// Refuses a `data_dir` that exists and is not an empty directory.
fn check_empty(data_dir: &Path) -> Result<(), BackupError> {
    match std::fs::read_dir(data_dir) {
        Ok(mut entries) => match entries.next() {
            None => Ok(()),
            Some(_) => Err(BackupError::DataDirNotEmpty(data_dir.to_path_buf())),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => {
            Err(BackupError::DataDirNotEmpty(data_dir.to_path_buf()))
        }
        Err(e) => Err(BackupError::Io(format!("reading {}: {e}", data_dir.display()))),
    }
}

/// The directory a restore builds in before renaming it to `data_dir`.
fn staging_dir(data_dir: &Path) -> Result<PathBuf, BackupError> {
    let name =
        data_dir.file_name().ok_or_else(|| BackupError::Io(format!("{} names no directory", data_dir.display())))?;
    let parent = parent_of(data_dir);
    std::fs::create_dir_all(parent).map_err(|e| BackupError::Io(format!("creating {}: {e}", parent.display())))?;
    Ok(parent.join(format!(".{}.restoring", name.to_string_lossy())))
}

fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    }
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use super::*;
    use crate::{NodeConfig, RaftNode, RaftTimings, Role};

    const WAIT: Duration = Duration::from_secs(20);

    /// Keeps every applied command; its snapshot is their concatenation,
    /// and it refuses to restore bytes starting with `!`.
    #[derive(Default)]
    struct Journal(Mutex<Vec<u8>>);

    impl Application for Journal {
        fn apply(&self, _: u64, command: &[u8]) -> Vec<u8> {
            self.0.lock().expect("lock").extend_from_slice(command);
            Vec::new()
        }
        fn snapshot(&self) -> Vec<u8> {
            self.0.lock().expect("lock").clone()
        }
        fn restore(&self, bytes: &[u8]) -> Result<(), String> {
            if bytes.first() == Some(&b'!') {
                return Err("not a journal".into());
            }
            *self.0.lock().expect("lock") = bytes.to_vec();
            Ok(())
        }
    }

    async fn single_node(node_id: u64, dir: &Path, app: Arc<Journal>) -> RaftNode {
        let config = NodeConfig {
            node_id,
            addr: format!("127.0.0.1:{}", 20_000 + node_id),
            data_dir: dir.to_path_buf(),
            timings: RaftTimings::default(),
            #[cfg(feature = "mutants")]
            planted: Default::default(),
            peer_tls: None,
        };
        RaftNode::start(config, app).await.expect("start")
    }

    async fn lead(node: &RaftNode) {
        let deadline = tokio::time::Instant::now() + WAIT;
        while node.status().role != Role::Leader {
            assert!(tokio::time::Instant::now() < deadline, "no leader: {:?}", node.status());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test]
    async fn a_backup_seeds_a_node_of_a_new_membership_that_starts_at_the_backup_and_takes_writes() {
        let root = tempfile::tempdir().expect("temp dir");
        let old_app = Arc::new(Journal::default());
        let old = single_node(1, &root.path().join("old"), old_app.clone()).await;
        old.initialize(BTreeMap::from([(1, "127.0.0.1:20001".to_string())])).await.expect("initialize");
        lead(&old).await;
        for command in [b"a".as_slice(), b"b", b"c"] {
            old.write(command.to_vec()).await.expect("write");
        }
        let backup = old.backup().await.expect("a backup");
        assert_eq!(old.backup().await.map(|_| ()), Err(BackupError::Busy), "one backup at a time");
        assert_eq!(backup.bytes, b"abc");
        assert_eq!(Some(backup.position.index), old.status().last_applied_index);
        assert_eq!(backup.members.keys().copied().collect::<Vec<_>>(), vec![1]);
        let (position, bytes) = (backup.position, backup.bytes.clone());
        drop(backup);
        old.shutdown().await.expect("shutdown");

        // Refusals leave nothing behind.
        let occupied = root.path().join("occupied");
        std::fs::create_dir_all(occupied.join("x")).expect("mkdir");
        let members = BTreeMap::from([(5, "127.0.0.1:20005".to_string())]);
        let seed = |dir: PathBuf, bytes: Vec<u8>| {
            let members = members.clone();
            async move { seed_from_snapshot(&dir, 5, &members, position, Arc::new(Journal::default()), bytes).await }
        };
        let refused = seed(occupied.clone(), bytes.clone()).await;
        assert!(matches!(refused, Err(BackupError::DataDirNotEmpty(_))), "{refused:?}");
        let unreadable = root.path().join("unreadable");
        let refused = seed(unreadable.clone(), b"!bad".to_vec()).await;
        assert!(matches!(refused, Err(BackupError::Refused(_))), "{refused:?}");
        assert!(!unreadable.exists(), "nothing written for refused bytes");
        let wrong_id = seed_from_snapshot(&root.path().join("w"), 6, &members, position, old_app, bytes.clone()).await;
        assert!(matches!(wrong_id, Err(BackupError::Members(_))), "{wrong_id:?}");

        // Node 5, alone in its new membership, starts at the backup.
        let new_dir = root.path().join("new");
        seed(new_dir.clone(), bytes).await.expect("seed");
        assert!(!root.path().join(".new.restoring").exists(), "the staging directory was renamed");
        let new_app = Arc::new(Journal::default());
        let new = single_node(5, &new_dir, new_app.clone()).await;
        assert_eq!(new_app.snapshot(), b"abc", "restored before anything is applied");
        new.initialize(members.clone()).await.expect("an initialized node ignores initialize");
        lead(&new).await;
        let status = new.status();
        assert!(status.term > position.term, "the new cluster's term is later: {status:?}");
        assert_eq!(status.members.iter().map(|member| member.node_id).collect::<Vec<_>>(), vec![5]);
        assert!(status.last_applied_index >= Some(position.index));
        new.write(b"d".to_vec()).await.expect("a write after the restore");
        assert_eq!(new_app.snapshot(), b"abcd");
        new.shutdown().await.expect("shutdown");
    }
}
