//! Backup and restore at process level: a real secure three-node cluster of
//! `gavel node` processes (kit-made CA, mutual TLS), the real `gavel backup`
//! commands, SIGKILL and deleted data directories.
//!
//! The main test saves a backup while a bounded writer runs execution
//! lifecycles, destroys the cluster, restores three new nodes from the file,
//! and checks that the first restored node (alone, so nothing new is
//! applied) holds exactly the state the header names (index and state hash),
//! and that the restored cluster serves every write acknowledged before the
//! save started. The second checks the refusals: a non-admin's save, a
//! corrupt or truncated file, and a non-empty data directory.

mod admin_cli;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use admin_cli::{gavel, gavel_as, gavel_via, principal, Run};
use gavel_client::{pb, Client};
use gavel_testkit::Converge as _;
use gavel_testkit::{Cluster, ClusterSpec, Security, HARNESS_GRANTS};
use serde_json::Value;

/// Upper bound of every wait.
const WAIT: Duration = Duration::from_secs(60);
/// The writer's bound: at most this many lifecycles...
const LIFECYCLES_MAX: u64 = 400;
/// ...and at most this long.
const WRITER_TIME_MAX: Duration = Duration::from_secs(90);
/// Lifecycles finished before the save starts: enough, with
/// [`PAD_BYTES`] of input each, for a body of several stream chunks.
const LIFECYCLES_BEFORE_SAVE: usize = 25;
/// Padding in each execution's input.
const PAD_BYTES: usize = 60 * 1024;
/// The queue of the test's capability.
const QUEUE: &str = "backup-q";

const ADMIN: &str = "user:admin";
const LOADER: &str = "service:loader";

/// What the writer had acknowledged: submitted executions and completed ones.
#[derive(Debug, Default, Clone)]
struct Acknowledged {
    submitted: Vec<String>,
    completed: Vec<String>,
}

async fn secure_cluster(root: &Path, nodes: u64) -> Cluster {
    let mut spec = ClusterSpec::new(gavel_testkit::resolve_gavel_binary(None).expect("gavel binary"), root);
    spec.nodes = nodes;
    spec.security = Security::secure(principal(ADMIN));
    spec.start_timeout = WAIT;
    spec.status_timeout = Duration::from_secs(5);
    Cluster::start(spec).await.unwrap_or_else(|error| panic!("{error}"))
}

fn client_as(cluster: &Cluster, who: &str) -> Client {
    let config = cluster.client_config_as(&principal(who)).expect("credentials");
    Client::with_config(&cluster.addrs(), config).expect("a client")
}

/// Registers the test's capability (admin) and grants the loader what a
/// lifecycle needs.
async fn prepare(cluster: &Cluster) {
    cluster.grant(&principal(LOADER), &HARNESS_GRANTS, WAIT).await.expect("grant the loader");
    let spec = pb::CapabilitySpec {
        id: "backup.read".to_string(),
        side_effect: pb::SideEffect::Read as i32,
        risk: pb::Risk::Low as i32,
        queue: Some(QUEUE.to_string()),
        ..pb::CapabilitySpec::default()
    };
    client_as(cluster, ADMIN)
        .register_capability(pb::RegisterCapabilityRequest { request_id: String::new(), spec: Some(spec) })
        .await
        .expect("register the capability");
}

/// One lifecycle: submit, poll, report completed. Records each step once it is acknowledged.
async fn lifecycle(client: &Client, n: u64, acknowledged: &Mutex<Acknowledged>) -> Result<(), gavel_client::Error> {
    let execution_id = format!("exe-backup-{n}");
    client
        .submit(pb::SubmitRequest {
            execution_id: Some(execution_id.clone()),
            capability_id: "backup.read".to_string(),
            input_json: format!("{{\"n\":{n},\"pad\":\"{}\"}}", "x".repeat(PAD_BYTES)),
            surface: "backup-test".to_string(),
            ..pb::SubmitRequest::default()
        })
        .await?;
    acknowledged.lock().expect("lock").submitted.push(execution_id.clone());
    let polled = client
        .poll(pb::PollRequest {
            queues: vec![QUEUE.to_string()],
            max_tasks: 1,
            wait_ms: 2_000,
            ..pb::PollRequest::default()
        })
        .await?;
    for task in polled.tasks {
        let lease_id = task.lease.as_ref().map_or(0, |lease| lease.lease_id);
        client
            .report(pb::ReportRequest {
                request_id: String::new(),
                lease_id,
                worker_id: String::new(),
                outcome: Some(pb::report_request::Outcome::Completed(pb::ReportCompleted {
                    output_json: "{}".to_string(),
                })),
            })
            .await?;
        acknowledged.lock().expect("lock").completed.push(task.execution_id);
    }
    Ok(())
}

fn file_arg(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 temp path")
}

async fn restore(file: &Path, data_dir: &Path, id: u64, members: &str) -> Run {
    gavel(
        ["backup", "restore", file_arg(file), "--data-dir", file_arg(data_dir), "--id", &id.to_string()]
            .into_iter()
            .chain(["--members", members, "--json"])
            .map(Into::into)
            .collect(),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backup_saved_under_load_restores_a_new_cluster_with_the_saved_state_and_every_acknowledged_write() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cluster = secure_cluster(dir.path(), 3).await;
    prepare(&cluster).await;

    // A bounded writer: lifecycles until told to stop, the count or the time runs out.
    let acknowledged = Arc::new(Mutex::new(Acknowledged::default()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (client, acknowledged, stop) = (client_as(&cluster, LOADER), acknowledged.clone(), stop.clone());
        tokio::spawn(async move {
            let started = Instant::now();
            for n in 0..LIFECYCLES_MAX {
                if stop.load(std::sync::atomic::Ordering::SeqCst) || started.elapsed() > WRITER_TIME_MAX {
                    break;
                }
                lifecycle(&client, n, &acknowledged).await.unwrap_or_else(|error| panic!("lifecycle {n}: {error}"));
            }
        })
    };
    let warmed = gavel_testkit::eventually(WAIT, Duration::from_millis(50), || {
        let done = acknowledged.lock().expect("lock").completed.len();
        async move { (done >= LIFECYCLES_BEFORE_SAVE).then_some(()) }
    })
    .await;
    assert!(warmed.is_some(), "the writer finished {LIFECYCLES_BEFORE_SAVE} lifecycles");

    // The save, with the writer still running.
    let before_save = acknowledged.lock().expect("lock").clone();
    let file = dir.path().join("cluster.gavelbak");
    let saved = gavel_as(&cluster, &principal(ADMIN), &["backup", "save", file_arg(&file), "--json"]).await.json();
    let after_save = acknowledged.lock().expect("lock").submitted.len();
    // Let the writer go on past the save, then stop it.
    let _ = gavel_testkit::eventually(Duration::from_secs(10), Duration::from_millis(50), || {
        let done = acknowledged.lock().expect("lock").submitted.len();
        async move { (done >= after_save + 5).then_some(()) }
    })
    .await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    tokio::time::timeout(WAIT, writer).await.expect("the writer stops").expect("the writer did not panic");
    let total = acknowledged.lock().expect("lock").submitted.len();
    assert!(total > before_save.submitted.len(), "writes went on during and after the save ({total} in all)");

    let applied_index = saved["appliedIndex"].as_u64().expect("appliedIndex");
    let body_bytes = saved["bodyBytes"].as_u64().expect("bodyBytes");
    assert!(body_bytes > gavel_raft::limits::SNAPSHOT_CHUNK_BYTES as u64, "the body took several chunks: {saved}");
    let state_hash = saved["stateHash"].as_str().expect("stateHash").to_string();
    assert_eq!(state_hash.len(), 64, "a SHA-256 state hash: {saved}");
    let inspected = gavel(vec!["backup".into(), "inspect".into(), file.clone().into(), "--json".into()]).await.json();
    assert_eq!(inspected["appliedIndex"], saved["appliedIndex"]);
    assert_eq!(inspected["stateHash"], saved["stateHash"]);
    assert_eq!(inspected["members"].as_array().map(Vec::len), Some(3), "{inspected}");

    // Through a follower alone, the stream is forwarded from the leader.
    let leader = cluster.leader().await.expect("a leader");
    let follower = cluster.ids().into_iter().find(|id| *id != leader).expect("a follower");
    let via = dir.path().join("via-follower.gavelbak");
    let follower_addr = vec![cluster.addr(follower).expect("an address").to_string()];
    let forwarded =
        gavel_via(&cluster, &follower_addr, &principal(ADMIN), &["backup", "save", file_arg(&via), "--json"]).await;
    let forwarded = forwarded.json();
    assert!(forwarded["appliedIndex"].as_u64() >= Some(applied_index), "{forwarded}");
    assert_eq!(forwarded["takenByNodeId"].as_u64(), Some(leader), "the leader took it: {forwarded}");

    // Destroy the cluster: SIGKILL every node and delete its data.
    for id in cluster.ids() {
        cluster.kill(id).expect("SIGKILL");
        std::fs::remove_dir_all(cluster.data_dir(id).expect("a data dir")).expect("delete the data dir");
    }

    // Restore three new nodes from the file.
    for id in cluster.ids() {
        let data_dir = cluster.data_dir(id).expect("a data dir").to_path_buf();
        let restored = restore(&file, &data_dir, id, cluster.peers()).await.json();
        assert_eq!(restored["appliedIndex"].as_u64(), Some(applied_index), "{restored}");
    }

    // The first restored node alone cannot elect a leader, so it applies
    // nothing new: it shows the state at the saved index.
    cluster.start_node(1).expect("start node 1");
    let alone = gavel_testkit::eventually(WAIT, Duration::from_millis(100), || cluster.status(1))
        .await
        .expect("restored node 1 answers");
    assert_eq!(alone.last_applied_index, applied_index, "node 1 starts at the saved index: {alone:?}");
    assert_eq!(alone.state_hash, state_hash, "node 1's state hash at the saved index is the header's");
    assert_eq!(alone.members.iter().filter(|member| member.voter).count(), 3, "{alone:?}");

    cluster.start_node(2).expect("start node 2");
    cluster.start_node(3).expect("start node 3");
    cluster.wait_for_leader(WAIT).await.expect("the restored cluster elects a leader");

    // Every write acknowledged before the save started is there.
    let reader = client_as(&cluster, LOADER);
    for execution_id in &before_save.submitted {
        let execution = reader
            .get_execution(pb::GetExecutionRequest { execution_id: execution_id.clone() })
            .await
            .expect("read an execution")
            .execution
            .unwrap_or_else(|| panic!("{execution_id} was acknowledged before the save and is restored"));
        let completed = before_save.completed.contains(execution_id);
        if completed {
            assert_eq!(execution.state, pb::ExecutionState::Completed as i32, "{execution_id}: {execution:?}");
        }
    }
    assert!(!before_save.completed.is_empty());
    // And the restored cluster takes new writes.
    let more = Mutex::new(Acknowledged::default());
    lifecycle(&reader, LIFECYCLES_MAX + 1, &more).await.expect("a lifecycle on the restored cluster");
    assert_eq!(more.lock().expect("lock").completed.len(), 1);
    let converged = cluster.converge(WAIT).await.expect("the restored nodes converge");
    assert!(converged.applied_index > applied_index);
    println!(
        "backup at index {applied_index}, {} body bytes; lifecycles acknowledged: {} submitted and {} completed \
         before the save, {total} submitted in all; restored cluster converged at {}",
        saved["bodyBytes"],
        before_save.submitted.len(),
        before_save.completed.len(),
        converged.applied_index
    );
    cluster.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_non_admin_save_a_corrupt_or_truncated_file_and_a_non_empty_data_dir_are_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cluster = secure_cluster(dir.path(), 1).await;
    prepare(&cluster).await;

    // The loader holds every harness grant but not admin.
    let refused_file = dir.path().join("refused.gavelbak");
    let refused = gavel_as(&cluster, &principal(LOADER), &["backup", "save", file_arg(&refused_file)]).await;
    refused.refused(3, "PERMISSION_DENIED");
    assert!(!refused_file.exists(), "a refused save writes no file");

    let file = dir.path().join("good.gavelbak");
    gavel_as(&cluster, &principal(ADMIN), &["backup", "save", file_arg(&file), "--json"]).await.json();
    let bytes = std::fs::read(&file).expect("read the backup");
    let members = cluster.peers().to_string();

    // A flipped byte in the body, one in the header, and a cut-off file.
    let last = bytes.len() - 1;
    let mut body_flipped = bytes.clone();
    body_flipped[last] ^= 0x01;
    let mut header_flipped = bytes.clone();
    header_flipped[20] ^= 0x01;
    let truncated = bytes[..bytes.len() - 7].to_vec();
    for (name, content, needle) in [
        ("body-flipped", body_flipped, "body checksum"),
        ("header-flipped", header_flipped, "header checksum"),
        ("truncated", truncated, "truncated"),
    ] {
        let damaged = dir.path().join(format!("{name}.gavelbak"));
        std::fs::write(&damaged, content).expect("write the damaged copy");
        let target = dir.path().join(format!("restore-{name}"));
        let run = restore(&damaged, &target, 1, &members).await;
        run.refused(3, "BACKUP_CORRUPT");
        assert!(run.stderr.contains(needle), "{name}: {run:#?}");
        assert!(!target.exists(), "{name}: nothing is written");
        let inspected = gavel(vec!["backup".into(), "inspect".into(), damaged.into()]).await;
        inspected.refused(3, "BACKUP_CORRUPT");
    }

    // A data directory that holds anything is left alone.
    let occupied = dir.path().join("occupied");
    std::fs::create_dir_all(&occupied).expect("mkdir");
    std::fs::write(occupied.join("keep.txt"), b"mine").expect("write");
    let run = restore(&file, &occupied, 1, &members).await;
    run.refused(3, "DATA_DIR_NOT_EMPTY");
    let left: Vec<_> = std::fs::read_dir(&occupied).expect("read dir").collect();
    assert_eq!(left.len(), 1, "the occupied directory is untouched");

    // An id outside the members is a usage error; the intact file restores
    // into an empty directory.
    restore(&file, &dir.path().join("wrong-id"), 7, &members).await.refused(2, "not one of the members");
    let empty = dir.path().join("empty");
    std::fs::create_dir_all(&empty).expect("mkdir");
    let restored = restore(&file, &empty, 1, &members).await.json();
    assert!(restored["appliedIndex"].as_u64().is_some_and(|index| index > 0), "{restored}");
    assert!(empty.join("raft").is_dir() && empty.join("raft-log").is_dir(), "the storage is in place");
    let value: Value = restored;
    assert_eq!(value["members"].as_array().map(Vec::len), Some(1));
    cluster.shutdown();
}
