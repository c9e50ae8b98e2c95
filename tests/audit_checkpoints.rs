//! Cosigned audit checkpoints on a real secure three-node cluster (mutual
//! TLS: each node registers its note key and cosigns with its own
//! certificate). Under a bounded writer, the published checkpoint advances,
//! through a SIGKILL of the leader; every checkpoint seen is signed by a
//! majority of the nodes' keys and consistent with every later one. After a
//! backup is restored into new nodes (new note keys), the restored cluster's
//! checkpoints are consistent with the one published before the backup.

mod admin_cli;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use admin_cli::{gavel, gavel_as, principal};
use gavel_client::{pb, Client};
use gavel_core::audit_export::{parse_checkpoint_body, CheckpointBody};
use gavel_core::merkle::{self, Hash};
use gavel_core::note;
use gavel_testkit::{Cluster, ClusterSpec, Security, HARNESS_GRANTS};

const WAIT: Duration = Duration::from_secs(60);
/// The writer's bounds: it stops by itself at whichever comes first. The
/// time is the one that matters: it must still be writing after the leader's
/// kill, or no checkpoint past the last one seen has anything to cover. (With
/// 300 lifecycles it ran out within about 2 s, before the kill, once the test
/// profile built the crates at opt-level 1, and no checkpoint came after it.)
const LIFECYCLES_MAX: u64 = 20_000;
const WRITER_TIME_MAX: Duration = Duration::from_secs(40);
const ADMIN: &str = "user:admin";
const LOADER: &str = "service:loader";
const QUEUE: &str = "checkpoint-q";

fn client_as(cluster: &Cluster, who: &str) -> Client {
    let config = cluster.client_config_as(&principal(who)).expect("credentials");
    Client::with_config(&cluster.addrs(), config).expect("a client")
}

/// One lifecycle: submit, poll, report completed.
async fn lifecycle(client: &Client, n: u64) -> Result<(), gavel_client::Error> {
    client
        .submit(pb::SubmitRequest {
            execution_id: Some(format!("exe-checkpoint-{n}")),
            capability_id: "checkpoint.read".to_string(),
            input_json: format!("{{\"n\":{n}}}"),
            surface: "checkpoint-test".to_string(),
            ..pb::SubmitRequest::default()
        })
        .await?;
    let polled = client
        .poll(pb::PollRequest {
            queues: vec![QUEUE.to_string()],
            max_tasks: 1,
            wait_ms: 1_000,
            ..pb::PollRequest::default()
        })
        .await?;
    for task in polled.tasks {
        let lease_id = task.lease.as_ref().map_or(0, |lease| lease.lease_id);
        let outcome = pb::report_request::Outcome::Completed(pb::ReportCompleted { output_json: "{}".to_string() });
        client
            .report(pb::ReportRequest {
                request_id: String::new(),
                lease_id,
                worker_id: String::new(),
                outcome: Some(outcome),
            })
            .await?;
    }
    Ok(())
}

/// A published checkpoint as read: its body and whole signed note.
#[derive(Debug, Clone)]
struct Seen {
    body: CheckpointBody,
    note: String,
}

/// The published checkpoint now, if any, with the nodes' verifier keys.
async fn published(client: &Client) -> Option<(Seen, Vec<String>)> {
    let head = client.get_checkpoint(pb::GetCheckpointRequest {}).await.ok()?;
    let note = head.signed_checkpoint?;
    Some((Seen { body: parse_checkpoint_body(&note).expect("a checkpoint body"), note }, head.note_keys))
}

/// Checks that one of the log keys in `keys` (verifier keys) signed `note`
/// under its origin and a majority of the node (cosigner) keys cosigned it.
#[track_caller]
fn check_signed(note: &str, keys: &[String]) {
    let listed = keys;
    let keys: Vec<note::VerifierKey> =
        keys.iter().map(|key| note::parse_verifier_key(key).expect("a verifier key")).collect();
    let ed25519 = |key: &[u8], message: &[u8], signature: &[u8]| {
        ring::signature::UnparsedPublicKey::new(&ring::signature::ED25519, key).verify(message, signature).is_ok()
    };
    let (logs, cosigners): (Vec<_>, Vec<_>) = keys.into_iter().partition(|key| key.kind == note::KeyKind::Ed25519);
    note::verify_note(note, &logs, 1, ed25519).unwrap_or_else(|problem| panic!("{problem}: {note} keys {listed:?}"));
    let quorum = cosigners.len() / 2 + 1;
    note::verify_note(note, &cosigners, quorum, ed25519)
        .unwrap_or_else(|problem| panic!("{problem}: {note} keys {listed:?}"));
}

/// Checks that `old` is a prefix of `new` with the cluster's consistency proof.
async fn check_consistent(client: &Client, old: &CheckpointBody, new: &CheckpointBody) {
    let proof = client
        .get_consistency_proof(pb::GetConsistencyProofRequest { old_size: old.size, new_size: new.size })
        .await
        .expect("a consistency proof");
    let hashes: Vec<Hash> = proof.proof.iter().map(|hash| hash.as_slice().try_into().expect("32 bytes")).collect();
    assert_eq!(
        merkle::verify_consistency(old.size, new.size, &old.root, &new.root, &hashes),
        Ok(()),
        "checkpoint {} is a prefix of checkpoint {}",
        old.size,
        new.size
    );
}

/// Adds a checkpoint to those seen when it is past the last, checking its signatures.
fn record(seen: &mut Vec<Seen>, keys_seen: &mut Vec<String>, checkpoint: Option<(Seen, Vec<String>)>) {
    if let Some((checkpoint, keys)) = checkpoint {
        if seen.last().is_none_or(|last| last.body.size < checkpoint.body.size) {
            check_signed(&checkpoint.note, &keys);
            *keys_seen = keys;
            seen.push(checkpoint);
        }
    }
}

async fn secure_cluster(root: &std::path::Path) -> Cluster {
    let mut spec = ClusterSpec::new(gavel_testkit::resolve_gavel_binary(None).expect("gavel binary"), root);
    spec.nodes = 3;
    spec.args.push("--audit-checkpoints=true".to_string());
    spec.security = Security::secure(principal(ADMIN));
    spec.start_timeout = WAIT;
    spec.status_timeout = Duration::from_secs(5);
    Cluster::start(spec).await.unwrap_or_else(|error| panic!("{error}"))
}

/// Waits for a published checkpoint larger than `size`.
async fn published_past(client: &Client, size: u64) -> (Seen, Vec<String>) {
    gavel_testkit::eventually(WAIT, Duration::from_millis(100), || async {
        published(client).await.filter(|(seen, _)| seen.body.size > size)
    })
    .await
    .unwrap_or_else(|| panic!("a checkpoint past size {size} is published"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn checkpoints_advance_under_load_through_a_leader_kill_and_stay_consistent_across_a_backup_restore() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cluster = secure_cluster(dir.path()).await;
    cluster.grant(&principal(LOADER), &HARNESS_GRANTS, WAIT).await.expect("grant the loader");
    let spec = pb::CapabilitySpec {
        id: "checkpoint.read".to_string(),
        side_effect: pb::SideEffect::Read as i32,
        risk: pb::Risk::Low as i32,
        queue: Some(QUEUE.to_string()),
        ..pb::CapabilitySpec::default()
    };
    client_as(&cluster, ADMIN)
        .register_capability(pb::RegisterCapabilityRequest { request_id: String::new(), spec: Some(spec) })
        .await
        .expect("register the capability");
    let auditor = client_as(&cluster, LOADER);

    // A bounded writer, and the checkpoints seen while it runs.
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (client, stop) = (client_as(&cluster, LOADER), stop.clone());
        tokio::spawn(async move {
            let started = Instant::now();
            let mut done = 0;
            for n in 0..LIFECYCLES_MAX {
                if stop.load(Ordering::SeqCst) || started.elapsed() > WRITER_TIME_MAX {
                    break;
                }
                // A lifecycle cut by the leader's death is retried as a new one.
                if lifecycle(&client, n).await.is_ok() {
                    done += 1;
                }
            }
            done
        })
    };
    let mut seen: Vec<Seen> = Vec::new();
    let mut keys_seen = Vec::new();
    let deadline = Instant::now() + WAIT;
    while seen.len() < 3 && Instant::now() < deadline {
        record(&mut seen, &mut keys_seen, published(&auditor).await);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(seen.len() >= 3, "three checkpoints under load: {seen:?}");
    assert_eq!(keys_seen.len(), 6, "one note key per node, as a log key and as a cosigner key");

    // SIGKILL the leader: the others elect a new one, and checkpoints go on.
    let leader = cluster.leader().await.expect("a leader");
    let before_kill = seen.last().expect("seen").body.size;
    cluster.kill(leader).expect("SIGKILL the leader");
    let (after_kill, keys) = published_past(&auditor, before_kill).await;
    check_signed(&after_kill.note, &keys);
    record(&mut seen, &mut keys_seen, Some((after_kill, keys)));
    stop.store(true, Ordering::SeqCst);
    let written = tokio::time::timeout(WAIT, writer).await.expect("the writer stops").expect("no panic");
    assert!(written > 0, "the writer wrote");

    // Every checkpoint is a prefix of every later one.
    for (index, old) in seen.iter().enumerate() {
        for new in &seen[index + 1..] {
            check_consistent(&auditor, &old.body, &new.body).await;
        }
    }

    // A backup, then the checkpoint published before it is the one to keep.
    cluster.start_node(leader).expect("restart the killed node");
    cluster.wait_for_leader(WAIT).await.expect("a leader");
    let (before_backup, _) = published(&auditor).await.expect("a published checkpoint");
    let file = dir.path().join("cluster.gavelbak");
    let saved =
        gavel_as(&cluster, &principal(ADMIN), &["backup", "save", file.to_str().expect("UTF-8"), "--json"]).await;
    saved.succeeded();
    for id in cluster.ids() {
        cluster.kill(id).expect("SIGKILL");
        std::fs::remove_dir_all(cluster.data_dir(id).expect("a data dir")).expect("delete the data dir");
    }
    for id in cluster.ids() {
        let data_dir = cluster.data_dir(id).expect("a data dir").to_str().expect("UTF-8").to_string();
        let args =
            ["backup", "restore", file.to_str().expect("UTF-8"), "--data-dir", &data_dir, "--id", &id.to_string()];
        let restored =
            gavel(args.iter().map(Into::into).chain(["--members".into(), cluster.peers().into()]).collect()).await;
        restored.succeeded();
    }
    for id in cluster.ids() {
        cluster.start_node(id).expect("start a restored node");
    }
    cluster.wait_for_leader(WAIT).await.expect("the restored cluster elects a leader");
    let restored_client = client_as(&cluster, LOADER);
    // The restored tree as the backup holds it (a checkpoint published
    // after `before_backup` may be in the backup, signed by the old keys).
    let restored_size = gavel_testkit::eventually(WAIT, Duration::from_millis(100), || async {
        restored_client.get_checkpoint(pb::GetCheckpointRequest {}).await.ok().map(|head| head.size)
    })
    .await
    .expect("the restored cluster answers");
    lifecycle(&restored_client, LIFECYCLES_MAX + 1).await.expect("a lifecycle on the restored cluster");
    let (after_restore, new_keys) = published_past(&restored_client, restored_size).await;
    // New data directories: new note keys, which sign the new checkpoints.
    assert!(new_keys.iter().all(|key| !keys_seen.contains(key)), "restored nodes have new note keys");
    check_signed(&after_restore.note, &new_keys);
    check_consistent(&restored_client, &before_backup.body, &after_restore.body).await;
    // The old checkpoint's signatures still verify, by the keys it was signed with.
    check_signed(&before_backup.note, &keys_seen);
    println!(
        "checkpoints seen under load: {:?}; after the leader kill: {}; before the backup: {}; after the restore: {}",
        seen.iter().map(|checkpoint| checkpoint.body.size).collect::<Vec<_>>(),
        seen.last().expect("seen").body.size,
        before_backup.body.size,
        after_restore.body.size
    );
    cluster.shutdown();
}
