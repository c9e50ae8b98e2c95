//! Storage tests on real files (the WAL and sled) in temporary directories: openraft's
//! conformance suite, and crash-and-reopen behaviour.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command as Process, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use openraft::storage::{RaftLogStorage, RaftLogStorageExt, RaftStateMachine};
use openraft::testing::log::{StoreBuilder, Suite};
use openraft::{EntryPayload, Membership, RaftLogReader, RaftSnapshotBuilder, StorageHelper, StoredMembership};
use tempfile::TempDir;

use super::{open, LogStore, OpenedStorage, SnapshotData, StateMachineStore};
use crate::application::Application;
use crate::typ::{Command, Entry, LeaderId, LogId, SnapshotMeta, TypeConfig, Vote};

/// A test application that records every applied command in order.
#[derive(Default)]
struct RecordingApp {
    applied: Mutex<Vec<(u64, Vec<u8>)>>,
}

impl RecordingApp {
    fn applied(&self) -> Vec<(u64, Vec<u8>)> {
        self.applied.lock().expect("lock").clone()
    }
}

impl Application for RecordingApp {
    fn apply(&self, log_index: u64, command: &[u8]) -> Vec<u8> {
        let mut applied = self.applied.lock().expect("lock");
        applied.push((log_index, command.to_vec()));
        (applied.len() as u64).to_be_bytes().to_vec()
    }

    fn snapshot(&self) -> Vec<u8> {
        bincode::serialize(&*self.applied.lock().expect("lock")).expect("encode")
    }

    fn restore(&self, bytes: &[u8]) -> Result<(), String> {
        let restored = bincode::deserialize(bytes).map_err(|e| e.to_string())?;
        *self.applied.lock().expect("lock") = restored;
        Ok(())
    }
}

/// An application that keeps its own state, as the node's cold store does:
/// its whole state is the bytes of the last snapshot it restored.
/// `fail_restore`: a restore fails once it has read the snapshot, as one
/// that crashed while rewriting its store would.
#[derive(Default)]
struct OwnStateApp {
    state: Mutex<Vec<u8>>,
    fail_restore: bool,
}

impl Application for OwnStateApp {
    fn apply(&self, _log_index: u64, _command: &[u8]) -> Vec<u8> {
        Vec::new()
    }

    fn snapshot(&self) -> Vec<u8> {
        self.state.lock().expect("lock").clone()
    }

    fn restore(&self, bytes: &[u8]) -> Result<(), String> {
        if self.fail_restore {
            return Err("the store failed while it was being rewritten".to_string());
        }
        *self.state.lock().expect("lock") = bytes.to_vec();
        Ok(())
    }

    fn keeps_own_state(&self) -> bool {
        true
    }

    fn checkpoint(&self, _position: &[u8], _durable: bool) -> Result<u64, String> {
        Ok(0)
    }
}

fn log_id(term: u64, index: u64) -> LogId {
    LogId::new(LeaderId { term, node_id: 1 }, index)
}

fn command_entry(term: u64, index: u64) -> Entry {
    Entry {
        log_id: log_id(term, index),
        payload: EntryPayload::Normal(Command(crate::batch::encode(&[format!("command {index}").into_bytes()]))),
    }
}

fn membership_entry(term: u64, index: u64) -> Entry {
    Entry {
        log_id: log_id(term, index),
        payload: EntryPayload::Membership(Membership::new_with_defaults(vec![BTreeSet::from([1, 2, 3])], [])),
    }
}

/// `entries` as openraft 0.10 hands committed entries to the state
/// machine, with no client waiting on any of them.
fn without_responders(
    entries: Vec<Entry>,
) -> impl futures::Stream<Item = Result<openraft::storage::EntryResponder<TypeConfig>, std::io::Error>> + Unpin + Send {
    futures::stream::iter(entries.into_iter().map(|entry| Ok((entry, None))))
}

fn open_with(dir: &Path, app: Arc<RecordingApp>) -> OpenedStorage {
    open(dir, app).expect("open storage")
}

/// Drops both halves of the store and waits until sled's files are closed,
/// as a process exit would (without any clean-shutdown step of ours).
async fn close(log_store: LogStore, state_machine: StateMachineStore, closed: super::ThreadExited) {
    drop(log_store);
    drop(state_machine);
    tokio::time::timeout(Duration::from_secs(10), closed)
        .await
        .expect("storage closes within 10 s")
        .expect("fsync thread signals its exit");
}

struct WalStoreBuilder;

impl StoreBuilder<TypeConfig, LogStore, StateMachineStore, TempDir> for WalStoreBuilder {
    async fn build(&self) -> Result<(TempDir, LogStore, StateMachineStore), openraft::StorageError<TypeConfig>> {
        let dir = tempfile::tempdir().expect("tempdir");
        let opened = open_with(dir.path(), Arc::new(RecordingApp::default()));
        Ok((dir, opened.log_store, opened.state_machine))
    }
}

#[tokio::test]
async fn wal_log_and_sled_state_machine_pass_the_openraft_conformance_suite() {
    Suite::test_all(WalStoreBuilder).await.expect("conformance suite");
}

#[tokio::test]
async fn acknowledged_entries_vote_and_committed_survive_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let vote = Vote::new(7, 2);
    {
        let OpenedStorage { mut log_store, state_machine, closed } = open_with(dir.path(), Arc::default());
        log_store.save_vote(&vote).await.expect("save vote");
        log_store.blocking_append([membership_entry(7, 1)]).await.expect("append");
        for index in 2..=100 {
            log_store.blocking_append([command_entry(7, index)]).await.expect("append");
        }
        log_store.save_committed(Some(log_id(7, 60))).await.expect("save committed");
        close(log_store, state_machine, closed).await;
    }

    let OpenedStorage { mut log_store, .. } = open_with(dir.path(), Arc::default());
    assert_eq!(log_store.read_vote().await.expect("read vote"), Some(vote));
    assert_eq!(log_store.read_committed().await.expect("read committed"), Some(log_id(7, 60)));
    let state = log_store.get_log_state().await.expect("log state");
    assert_eq!(state.last_log_id, Some(log_id(7, 100)));
    assert_eq!(state.last_purged_log_id, None);
    let entries = log_store.try_get_log_entries(2..=100).await.expect("read entries");
    let expected: Vec<Entry> = (2..=100).map(|index| command_entry(7, index)).collect();
    assert_eq!(entries, expected);
}

#[tokio::test]
async fn snapshot_then_purge_then_reopen_restores_the_app_and_reapplies_the_committed_suffix() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let app = Arc::new(RecordingApp::default());
        let OpenedStorage { mut log_store, mut state_machine, closed } = open_with(dir.path(), app.clone());
        let mut entries = vec![membership_entry(1, 1)];
        entries.extend((2..=30).map(|index| command_entry(1, index)));
        log_store.blocking_append(entries.clone()).await.expect("append");

        state_machine.apply(without_responders(entries[..20].to_vec())).await.expect("apply up to 20");
        let snapshot = state_machine.get_snapshot_builder().await.build_snapshot().await.expect("build snapshot");
        assert_eq!(snapshot.meta.last_log_id, Some(log_id(1, 20)));
        state_machine.apply(without_responders(entries[20..].to_vec())).await.expect("apply the rest");
        log_store.purge(log_id(1, 20)).await.expect("purge");
        log_store.save_committed(Some(log_id(1, 30))).await.expect("save committed");
        assert_eq!(app.applied().len(), 29);
        close(log_store, state_machine, closed).await;
    }

    let app = Arc::new(RecordingApp::default());
    let OpenedStorage { mut log_store, mut state_machine, .. } = open_with(dir.path(), app.clone());

    // The application holds exactly what the snapshot covered.
    let restored = app.applied();
    let expected: Vec<u64> = (2..=20).collect();
    assert_eq!(restored.iter().map(|(index, _)| *index).collect::<Vec<_>>(), expected);
    let (applied, membership) = state_machine.applied_state().await.expect("applied state");
    assert_eq!(applied, Some(log_id(1, 20)));
    assert_eq!(membership.log_id(), &Some(log_id(1, 1)));

    // The log kept the suffix after the purge point.
    let state = log_store.get_log_state().await.expect("log state");
    assert_eq!(state.last_purged_log_id, Some(log_id(1, 20)));
    assert_eq!(state.last_log_id, Some(log_id(1, 30)));
    let suffix = log_store.try_get_log_entries(21..=30).await.expect("suffix");
    assert_eq!(suffix.len(), 10);
    assert!(log_store.try_get_log_entries(1..=20).await.expect("purged range").is_empty());
    // Replication asks from a start: a range whose head was purged gives
    // nothing, never entries that do not begin at that start.
    assert!(log_store.limited_get_log_entries(15, 25).await.expect("head purged").is_empty());
    let from_start = log_store.limited_get_log_entries(21, 25).await.expect("present range");
    assert_eq!(from_start.iter().map(|entry| entry.log_id.index).collect::<Vec<_>>(), vec![21, 22, 23, 24]);

    // What openraft does at start-up: re-apply up to the saved committed index.
    // openraft 0.10 needs the node id to make up a vote when none is saved.
    StorageHelper::new(&mut log_store, &mut state_machine).with_id(1).get_initial_state().await.expect("initial state");
    let reapplied: Vec<u64> = app.applied().iter().map(|(index, _)| *index).collect();
    assert_eq!(reapplied, (2..=30).collect::<Vec<_>>());
}

#[tokio::test]
async fn an_older_snapshot_built_late_does_not_replace_a_newer_installed_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let OpenedStorage { mut state_machine, .. } = open_with(dir.path(), Arc::default());
    let entries: Vec<Entry> =
        std::iter::once(membership_entry(1, 1)).chain((2..=10).map(|index| command_entry(1, index))).collect();
    state_machine.apply(without_responders(entries[..5].to_vec())).await.expect("apply");
    let mut old_builder = state_machine.get_snapshot_builder().await;
    state_machine.apply(without_responders(entries[5..].to_vec())).await.expect("apply");
    let newer = state_machine.get_snapshot_builder().await.build_snapshot().await.expect("build newer");
    old_builder.build_snapshot().await.expect("build older");
    let current = state_machine.get_current_snapshot().await.expect("read snapshot").expect("a snapshot is stored");
    assert_eq!(current.meta, newer.meta);
}

const CRASH_CHILD_DIR_ENV: &str = "GAVEL_RAFT_CRASH_CHILD_DIR";
const CRASH_TEST_NAME: &str = "storage::tests::acknowledged_appends_survive_kill_9_of_the_writing_process";
const CRASH_VOTE: (u64, u64) = (3, 1);
const CRASH_ACKS_BEFORE_KILL: u64 = 300;

/// Child mode: appends entries forever, printing `acked N` after each one
/// the store reported durable. The parent kills it with SIGKILL.
fn run_crash_child(dir: &Path) -> ! {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let OpenedStorage { mut log_store, .. } = open_with(dir, Arc::default());
        log_store.save_vote(&Vote::new(CRASH_VOTE.0, CRASH_VOTE.1)).await.expect("save vote");
        println!("vote saved");
        for index in 1.. {
            log_store.blocking_append([command_entry(CRASH_VOTE.0, index)]).await.expect("append");
            println!("acked {index}");
        }
    });
    unreachable!("the writer loops until killed")
}

#[test]
fn acknowledged_appends_survive_kill_9_of_the_writing_process() {
    if let Some(dir) = std::env::var_os(CRASH_CHILD_DIR_ENV) {
        run_crash_child(Path::new(&dir));
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = Process::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", CRASH_TEST_NAME, "--nocapture", "--test-threads=1"])
        .env(CRASH_CHILD_DIR_ENV, dir.path())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the writer process");
    let stdout = child.stdout.take().expect("child stdout");
    let (lines_tx, lines) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });

    let mut vote_saved = false;
    let mut last_acked = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while last_acked < CRASH_ACKS_BEFORE_KILL {
        let remaining = deadline.saturating_duration_since(std::time::Instant::now());
        let line = lines.recv_timeout(remaining).expect("the writer acknowledges appends in time");
        // libtest prints "test <name> ... " before the test's first line.
        vote_saved |= line.ends_with("vote saved");
        if let Some(index) = line.strip_prefix("acked ") {
            last_acked = index.parse().expect("acked index");
        }
    }
    // SIGKILL: no destructor, no sled flush-on-drop, no clean shutdown.
    child.kill().expect("kill the writer");
    child.wait().expect("reap the writer");
    // Acknowledgements printed before the kill still count.
    reader.join().expect("reader thread");
    for line in lines.try_iter() {
        if let Some(index) = line.strip_prefix("acked ") {
            last_acked = index.parse().expect("acked index");
        }
    }
    assert!(vote_saved);

    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let OpenedStorage { mut log_store, .. } = open_with(dir.path(), Arc::default());
        assert_eq!(log_store.read_vote().await.expect("read vote"), Some(Vote::new(CRASH_VOTE.0, CRASH_VOTE.1)));
        let entries = log_store.try_get_log_entries(1..=last_acked).await.expect("read entries");
        let expected: Vec<Entry> = (1..=last_acked).map(|index| command_entry(CRASH_VOTE.0, index)).collect();
        assert_eq!(entries.len() as u64, last_acked, "every acknowledged entry is there");
        assert_eq!(entries, expected);
    });
}

#[tokio::test]
async fn a_corrupt_log_makes_the_store_refuse_to_open_with_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let OpenedStorage { mut log_store, state_machine, closed } = open_with(dir.path(), Arc::default());
        log_store.blocking_append((1..=20).map(|index| command_entry(1, index))).await.expect("append");
        close(log_store, state_machine, closed).await;
    }
    let segment = super::wal_dir(dir.path()).join("0000000000000001.wal");
    let mut bytes = std::fs::read(&segment).expect("read the segment");
    // A byte in the middle of the entries: durable data, not a torn tail.
    bytes[200] ^= 0x40;
    std::fs::write(&segment, &bytes).expect("write the segment");
    match open(dir.path(), Arc::new(RecordingApp::default())) {
        Err(crate::RaftError::Storage(message)) => {
            assert!(message.contains("corrupt") && message.contains("refusing to start"), "{message}");
        }
        Err(other) => panic!("refused for the wrong reason: {other}"),
        Ok(_) => panic!("a corrupt log was opened"),
    }
}

#[tokio::test]
async fn a_data_directory_with_a_log_in_the_old_sled_format_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let db = sled::Config::new()
            .path(super::sled_dir(dir.path()))
            .segment_size(crate::limits::SLED_SEGMENT_BYTES)
            .open()
            .expect("open sled");
        db.open_tree("log").expect("log tree").insert(1u64.to_be_bytes(), b"an old entry".to_vec()).expect("insert");
        db.flush().expect("flush");
    }
    match open(dir.path(), Arc::new(RecordingApp::default())) {
        Err(crate::RaftError::Storage(message)) => assert!(message.contains("old sled format"), "{message}"),
        Err(other) => panic!("refused for the wrong reason: {other}"),
        Ok(_) => panic!("a log in the old format was ignored"),
    }
}

/// A snapshot a version before snapshot files kept in sled (`data`) is moved
/// into a file on open and restored from it; files a crash left in
/// `raft-snapshot/` (a build in progress) are removed.
#[tokio::test]
async fn a_snapshot_stored_in_sled_is_moved_into_a_file_and_leftovers_are_removed_on_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    let entries: Vec<Entry> =
        std::iter::once(membership_entry(1, 1)).chain((2..=10).map(|index| command_entry(1, index))).collect();
    let built = {
        let app = Arc::new(RecordingApp::default());
        let OpenedStorage { log_store, mut state_machine, closed } = open_with(dir.path(), app);
        state_machine.apply(without_responders(entries.clone())).await.expect("apply");
        let built = state_machine.get_snapshot_builder().await.build_snapshot().await.expect("build");
        close(log_store, state_machine, closed).await;
        built.meta
    };
    let snapshot_dir = super::snapshot_dir(dir.path());
    let stored: Vec<_> =
        std::fs::read_dir(&snapshot_dir).expect("snapshot dir").map(|e| e.expect("entry").path()).collect();
    assert_eq!(stored.len(), 1, "one stored snapshot file: {stored:?}");
    let bytes = std::fs::read(&stored[0]).expect("read the snapshot file");
    // What an older version left: the bytes in sled, no file; and a partial build.
    {
        let config =
            sled::Config::new().path(super::sled_dir(dir.path())).segment_size(crate::limits::SLED_SEGMENT_BYTES);
        // sled releases its file lock from its own threads, shortly after
        // the last handle is dropped.
        let mut db = config.open();
        for _ in 0..100 {
            if db.is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
            db = config.open();
        }
        let db = db.expect("open sled");
        let tree = db.open_tree("snapshot").expect("snapshot tree");
        tree.remove(super::SNAPSHOT_FILE_KEY).expect("remove file key");
        tree.insert(super::SNAPSHOT_LEGACY_DATA_KEY, bytes.as_slice()).expect("insert data");
        db.flush().expect("flush");
    }
    std::fs::remove_file(&stored[0]).expect("remove the file");
    std::fs::write(snapshot_dir.join("0000000000000007.build.tmp"), b"partial").expect("a leftover");

    let app = Arc::new(RecordingApp::default());
    let OpenedStorage { mut state_machine, .. } = open_with(dir.path(), app.clone());
    let expected: Vec<u64> = (2..=10).collect();
    assert_eq!(app.applied().iter().map(|(index, _)| *index).collect::<Vec<_>>(), expected, "restored from it");
    let names: Vec<String> = std::fs::read_dir(&snapshot_dir)
        .expect("snapshot dir")
        .map(|entry| entry.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, vec!["legacy.snap".to_string()], "the leftover is gone, the bytes are a file");
    let current = state_machine.get_current_snapshot().await.expect("read").expect("a snapshot is stored");
    assert_eq!(current.meta, built);
    assert_eq!(current.snapshot.into_file().expect("a file").read_all().expect("read the file"), bytes);
}

/// For an application that keeps its own state, an install stores the
/// received file before the application rewrites its store (which until
/// then held the only copy of the previous state): a restore that fails
/// half-way, as a crash while `cold.redb` is rewritten, leaves the file
/// stored, and the next start restores the new snapshot from it. Were the
/// file stored after the restore, nothing would be left to start from.
#[tokio::test]
async fn an_install_stores_the_file_before_an_application_with_its_own_state_rewrites_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bytes = b"the leader's whole state at index 50".to_vec();
    let membership = Membership::new_with_defaults(vec![BTreeSet::from([1, 2, 3])], []);
    let meta = SnapshotMeta {
        last_log_id: Some(log_id(3, 50)),
        last_membership: StoredMembership::new(Some(log_id(1, 1)), membership),
    };
    {
        let failing = Arc::new(OwnStateApp { fail_restore: true, ..OwnStateApp::default() });
        let OpenedStorage { log_store, mut state_machine, closed } =
            open(dir.path(), failing.clone()).expect("open storage");
        let spool = super::snapshot_file::temporary_path(&super::snapshot_dir(dir.path()), "receive");
        let received = super::snapshot_file::write_bytes(spool, bytes.clone()).expect("the received file");
        let installed = state_machine.install_snapshot(&meta, SnapshotData::File(received)).await;
        assert!(installed.is_err(), "the restore failed, so the install did");
        assert!(failing.snapshot().is_empty(), "the failing application holds nothing");
        close(log_store, state_machine, closed).await;
    }
    let app = Arc::new(OwnStateApp::default());
    let OpenedStorage { mut state_machine, .. } = open(dir.path(), app.clone()).expect("reopen storage");
    assert_eq!(app.snapshot(), bytes, "the start restored the received snapshot from its stored file");
    let (applied, _) = state_machine.applied_state().await.expect("applied state");
    assert_eq!(applied, meta.last_log_id);
}

/// Opens storage in `dir` with its log on the simulated `disk` (inline IO).
fn open_on_sim_disk(dir: &Path, disk: &crate::io::SimDisk) -> OpenedStorage {
    let dial: crate::io::Dial = Arc::new(|endpoint: tonic::transport::Endpoint| endpoint.connect_lazy());
    super::open_with(
        dir,
        Arc::new(RecordingApp::default()),
        #[cfg(feature = "mutants")]
        crate::config::PlantedLogBugs::default(),
        &crate::io::RaftIo::simulated(dial, disk.clone()),
    )
    .expect("open storage on the simulated disk")
}

#[tokio::test]
async fn a_full_disk_refuses_the_append_with_storage_full_and_loses_no_acknowledged_entry() {
    let dir = tempfile::tempdir().expect("tempdir");
    let disk = crate::io::SimDisk::new();
    {
        let OpenedStorage { mut log_store, state_machine, closed } = open_on_sim_disk(dir.path(), &disk);
        log_store.save_vote(&Vote::new(3, 1)).await.expect("save vote");
        log_store.blocking_append([membership_entry(3, 1)]).await.expect("append");
        for index in 2..=20 {
            log_store.blocking_append([command_entry(3, index)]).await.expect("append");
        }
        disk.set_full(true);
        let refused = log_store.blocking_append([command_entry(3, 21)]).await.expect_err("the disk is full");
        assert!(refused.to_string().contains("no space left"), "the error names the cause: {refused}");
        // The vote is refused too: the failed append stopped the log, and a
        // vote is saved only behind every earlier write (which cannot be
        // confirmed any more), so it does not even reach the disk.
        assert!(log_store.save_vote(&Vote::new(4, 1)).await.is_err(), "no vote after the log stopped");
        assert!(disk.take_refused_full() >= 1);
        disk.set_full(false);
        // The log stops for good after a failed write (openraft stops the node).
        assert!(log_store.blocking_append([command_entry(3, 21)]).await.is_err(), "a stopped log stays stopped");
        close(log_store, state_machine, closed).await;
    }
    // The node restarts on what the disk kept (losing unsynced writes too).
    disk.crash(0);
    let OpenedStorage { mut log_store, .. } = open_on_sim_disk(dir.path(), &disk);
    assert_eq!(log_store.read_vote().await.expect("read vote"), Some(Vote::new(3, 1)));
    assert_eq!(log_store.get_log_state().await.expect("log state").last_log_id, Some(log_id(3, 20)));
    let entries = log_store.try_get_log_entries(2..=20).await.expect("read entries");
    assert_eq!(entries, (2..=20).map(|index| command_entry(3, index)).collect::<Vec<_>>());
    log_store.blocking_append([command_entry(3, 21)]).await.expect("room again: the append succeeds");
    assert_eq!(log_store.get_log_state().await.expect("log state").last_log_id, Some(log_id(3, 21)));
}

#[tokio::test]
async fn a_slow_disk_acknowledges_an_append_only_after_its_latency() {
    let dir = tempfile::tempdir().expect("tempdir");
    let disk = crate::io::SimDisk::new();
    let OpenedStorage { mut log_store, .. } = open_on_sim_disk(dir.path(), &disk);
    log_store.blocking_append([membership_entry(1, 1)]).await.expect("append");
    disk.set_latency(Duration::from_millis(40));
    let started = tokio::time::Instant::now();
    log_store.blocking_append([command_entry(1, 2)]).await.expect("append");
    // A lower bound only: a sleep never ends early.
    assert!(started.elapsed() >= Duration::from_millis(40), "acknowledged after {:?}", started.elapsed());
    disk.set_latency(Duration::ZERO);
    log_store.blocking_append([command_entry(1, 3)]).await.expect("append on a fast disk again");
    assert_eq!(log_store.get_log_state().await.expect("log state").last_log_id, Some(log_id(1, 3)));
}
