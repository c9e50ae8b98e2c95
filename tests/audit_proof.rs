//! The audit tree through real nodes and the real CLI: a three-node cluster
//! serves checkpoints and proofs from any node; `gavel audit export` writes
//! a file that `gavel audit verify` checks with no cluster (and refuses,
//! naming the leaf, once one byte of an event is changed); an earlier
//! checkpoint is proven a prefix of the later tree; `gavel audit proof`
//! writes a tlog-proof that `gavel audit verify-proof` checks on its own.

mod support;

use gavel_proto::v1 as pb;
use serde_json::Value;
use support::Cluster;

/// What one run of the binary produced.
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

async fn gavel(endpoints: &str, args: &[&str]) -> Run {
    let output = support::run_gavel(endpoints, args, &[("USER", "audit-test")]).await;
    Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

fn json(run: &Run) -> Value {
    assert_eq!(run.code, 0, "expected success: stdout {} stderr {}", run.stdout, run.stderr);
    serde_json::from_str(&run.stdout).unwrap_or_else(|error| panic!("not JSON ({error}): {}", run.stdout))
}

/// Waits until the last cosigned checkpoint covers the whole tree (the
/// leader starts one within `AUDIT_CHECKPOINT_INTERVAL_MS` of new events).
async fn cosigned_at_head(endpoints: &str) {
    support::eventually("a checkpoint cosigned at the tree's head", || async {
        let head = json(&gavel(endpoints, &["audit", "checkpoint", "--json"]).await);
        let signed = head["signedCheckpoint"].as_str()?.to_string();
        (signed.lines().nth(1)?.parse::<u64>().ok()? == head["size"].as_u64()?).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_export_verifies_offline_and_names_a_changed_event_and_proofs_verify_on_their_own() {
    let cluster = Cluster::start_with(3, &["--audit-checkpoints=true"]).await;
    let leader = cluster.wait_for_leader().await;
    support::register(&cluster, leader, support::capability("docs.read", pb::SideEffect::Read)).await;
    for round in 0..4 {
        support::run_lifecycle(&cluster, leader, &format!("exec-{round}"), "{}".into(), "{}".into()).await;
    }
    let endpoints = cluster.nodes.iter().map(|node| node.addr.clone()).collect::<Vec<_>>().join(",");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = |name: &str| dir.path().join(name).to_str().expect("a UTF-8 path").to_string();

    // An early checkpoint, cosigned by a quorum, saved as an auditor would.
    cosigned_at_head(&endpoints).await;
    let early = gavel(&endpoints, &["audit", "checkpoint"]).await;
    assert!(early.stdout.contains("\n\n\u{2014} "), "a signed note: {}", early.stdout);
    assert_eq!(early.code, 0, "{}", early.stderr);
    std::fs::write(path("early.checkpoint"), &early.stdout).expect("write the checkpoint");
    let early_size: u64 = early.stdout.lines().nth(1).and_then(|line| line.parse().ok()).expect("a size line");
    for round in 4..7 {
        support::run_lifecycle(&cluster, leader, &format!("exec-{round}"), "{}".into(), "{}".into()).await;
    }

    // Every node serves the same tree once converged.
    cosigned_at_head(&endpoints).await;
    cluster.wait_converged().await;
    let keys = gavel(&endpoints, &["audit", "keys"]).await;
    assert_eq!(keys.stdout.lines().count(), 3, "one note key per node: {}", keys.stdout);
    std::fs::write(path("keys.txt"), &keys.stdout).expect("write the keys");
    let mut heads = Vec::new();
    for node in &cluster.nodes {
        let head = json(&gavel(&node.addr, &["audit", "checkpoint", "--json"]).await);
        heads.push((head["size"].clone(), head["root"].clone()));
    }
    assert!(heads.windows(2).all(|pair| pair[0] == pair[1]), "{heads:?}");
    assert!(heads[0].0.as_u64().expect("a size") > early_size);

    // Export with the early checkpoint, then verify with no cluster (no --endpoints reachable).
    let export =
        gavel(&endpoints, &["audit", "export", &path("trail.jsonl"), "--checkpoint", &path("early.checkpoint")]).await;
    assert_eq!(export.code, 0, "{}", export.stderr);
    let verified = json(
        &gavel("127.0.0.1:1", &["audit", "verify", &path("trail.jsonl"), "--keys", &path("keys.txt"), "--json"]).await,
    );
    assert_eq!(verified["verified"], true);
    assert_eq!(verified["signaturesChecked"], true);
    // A key the checkpoints were not signed with vouches for nothing.
    let foreign = gavel_core::note::verifier_key("someone-else", &[1; 32]);
    std::fs::write(path("foreign-key.txt"), &foreign).expect("write a foreign key");
    let unvouched =
        gavel("127.0.0.1:1", &["audit", "verify", &path("trail.jsonl"), "--keys", &path("foreign-key.txt")]).await;
    assert_eq!(unvouched.code, 3, "{}", unvouched.stderr);
    assert!(
        unvouched.stderr.contains("0 of the listed keys signed the checkpoint, fewer than 1"),
        "{}",
        unvouched.stderr
    );
    std::fs::write(path("one-key.txt"), keys.stdout.lines().next().expect("a key")).expect("write one key");
    let impossible = gavel(
        "127.0.0.1:1",
        &["audit", "verify", &path("trail.jsonl"), "--keys", &path("one-key.txt"), "--quorum", "2"],
    )
    .await;
    assert_eq!(impossible.code, 2, "a quorum above the keys listed is a usage error: {}", impossible.stderr);
    assert_eq!(verified["consistencyProofs"], 1);
    assert_eq!(verified["leaves"], heads[0].0);

    // One byte of one event changed: refused, naming the leaf.
    let text = std::fs::read_to_string(path("trail.jsonl")).expect("read the export");
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    lines[5] = lines[5].replacen("alice", "alicf", 1);
    assert_ne!(lines[5], text.lines().nth(5).expect("line 6"), "the event changed");
    std::fs::write(path("tampered.jsonl"), lines.join("\n")).expect("write the tampered export");
    let refused = gavel("127.0.0.1:1", &["audit", "verify", &path("tampered.jsonl")]).await;
    assert_eq!(refused.code, 3, "refused: {} {}", refused.stdout, refused.stderr);
    assert!(refused.stderr.contains("AUDIT_VERIFICATION_FAILED"), "{}", refused.stderr);
    assert!(refused.stderr.contains("the event at leaf 5 (cursor 6) was changed"), "{}", refused.stderr);

    // One event's proof, from a follower, verified on its own.
    let follower = cluster.follower().await;
    let proved = gavel(&cluster.addr(follower), &["audit", "proof", "3", "--out", &path("event.proof")]).await;
    assert_eq!(proved.code, 0, "{}", proved.stderr);
    let checked = json(
        &gavel("127.0.0.1:1", &["audit", "verify-proof", &path("event.proof"), "--keys", &path("keys.txt"), "--json"])
            .await,
    );
    assert_eq!(checked["cursor"], 3);
    let proof_text = std::fs::read_to_string(path("event.proof")).expect("read the proof");
    assert!(proof_text.contains("c2sp.org/tlog-proof@v1"), "{proof_text}");
    std::fs::write(path("bent.proof"), proof_text.replacen("index 2", "index 1", 1)).expect("write");
    let bent = gavel("127.0.0.1:1", &["audit", "verify-proof", &path("bent.proof")]).await;
    assert_eq!(bent.code, 3, "{}", bent.stderr);

    // A proof past the tree is OUT_OF_RANGE over gRPC.
    let mut audit = cluster.audit(leader);
    let past = audit
        .get_inclusion_proof(pb::GetInclusionProofRequest { index: 1_000_000, size: 0 })
        .await
        .expect_err("past the tree");
    assert_eq!(support::domain_code(&past), "OUT_OF_RANGE");
}
