//! External witnesses of the audit log (issue #41, docs/decisions/0100):
//! three `gavel witness` processes with their own keys, a three-node
//! cluster that submits every published checkpoint to them (C2SP
//! `tlog-witness`). Its checkpoints carry the witnesses' cosignatures; a
//! witness refuses a rewritten history signed with the log's own key (409
//! for a stale size, 422 for a fork); `gavel audit verify --policy` (2 of
//! 3 witnesses) accepts the honest export and refuses one whose checkpoint
//! lacks the quorum.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use gavel_core::merkle::{self, MemoryTree};
use gavel_core::note;
use gavel_core::witness::add_checkpoint_request;
use gavel_proto::v1 as pb;
use ring::signature::{Ed25519KeyPair, KeyPair};
use support::Cluster;

/// How long a witness may take to start.
const STARTS_WITHIN: Duration = Duration::from_secs(20);

/// A running `gavel witness`, killed on drop.
struct Witness {
    child: Child,
    vkey: String,
    addr: String,
}

impl Witness {
    fn start(dir: &Path, name: &str, logs: &Path) -> Witness {
        let mut child = Command::new(support::gavel_binary())
            .args(["witness", "--listen", "127.0.0.1:0", "--name", name, "--data-dir"])
            .arg(dir.join(name.replace('/', "_")))
            .arg("--logs")
            .arg(logs)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start gavel witness");
        let mut lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        let started = Instant::now();
        let (mut vkey, mut addr) = (None, None);
        while vkey.is_none() || addr.is_none() {
            assert!(started.elapsed() < STARTS_WITHIN, "gavel witness did not start");
            let line = lines.next().expect("a line").expect("UTF-8");
            if let Some(key) = line.strip_prefix("gavel witness: key ") {
                vkey = Some(key.to_string());
            }
            if let Some((_, url)) = line.split_once("listening on http://") {
                addr = Some(url.to_string());
            }
        }
        Witness { child, vkey: vkey.expect("a key"), addr: addr.expect("an address") }
    }
}

impl Drop for Witness {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One HTTP/1.1 POST on loopback: the status and the body.
fn post(addr: &str, path: &str, body: &str) -> (u16, String) {
    let mut stream = std::net::TcpStream::connect(addr).expect("connect to the witness");
    stream.set_read_timeout(Some(Duration::from_secs(10))).expect("a timeout");
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("send");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("read the answer");
    let status = answer.split(' ').nth(1).and_then(|code| code.parse().ok()).expect("a status line");
    (status, answer.split_once("\r\n\r\n").map(|(_, body)| body.to_string()).unwrap_or_default())
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

async fn gavel(endpoints: &str, args: &[&str]) -> Run {
    let output = support::run_gavel(endpoints, args, &[("USER", "witness-test")]).await;
    Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// The witness lines of a signed checkpoint.
fn witness_lines(checkpoint: &str) -> usize {
    checkpoint.lines().filter(|line| line.starts_with("\u{2014} witness.test/")).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_carry_two_of_three_witnesses_a_witness_refuses_a_fork_and_verify_applies_the_policy() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = |name: &str| dir.path().join(name).to_str().expect("a UTF-8 path").to_string();
    // The witnesses start first, trusting no log yet: the log's keys (the
    // nodes' note keys under its origin) exist once the cluster has run.
    let logs = dir.path().join("logs.keys");
    let witnesses: Vec<Witness> =
        (1..=3).map(|n| Witness::start(dir.path(), &format!("witness.test/w{n}"), &logs)).collect();
    let mut policy = String::new();
    for (n, witness) in (1..).zip(&witnesses) {
        policy.push_str(&format!("witness w{n} {} http://{}\n", witness.vkey, witness.addr));
    }
    policy.push_str("group two-of-three 2 w1 w2 w3\nquorum two-of-three\n");
    std::fs::write(path("witnesses.policy"), &policy).expect("write the policy");
    let flag = format!("--audit-witness-policy={}", path("witnesses.policy"));
    let cluster = Cluster::start_with(3, &["--audit-checkpoints=true", &flag]).await;
    let leader = cluster.wait_for_leader().await;
    support::register(&cluster, leader, support::capability("docs.read", pb::SideEffect::Read)).await;
    support::run_lifecycle(&cluster, leader, "exec-0", "{}".into(), "{}".into()).await;
    let endpoints = cluster.nodes.iter().map(|node| node.addr.clone()).collect::<Vec<_>>().join(",");
    let keys = support::eventually("the nodes' keys under the log's origin", || async {
        let keys = gavel(&endpoints, &["audit", "keys"]).await;
        (keys.code == 0 && keys.stdout.lines().count() == 6 && !keys.stdout.starts_with("gavel-audit/empty"))
            .then_some(keys.stdout)
    })
    .await;
    std::fs::write(&logs, &keys).expect("tell the witnesses the log's keys");

    // Checkpoints now carry the witnesses' cosignatures.
    let checkpoint = support::eventually("a checkpoint cosigned by the three witnesses", || async {
        let checkpoint = gavel(&endpoints, &["audit", "checkpoint"]).await;
        (checkpoint.code == 0 && witness_lines(&checkpoint.stdout) == 3).then_some(checkpoint.stdout)
    })
    .await;
    let origin = checkpoint.lines().next().expect("an origin").to_string();
    let size: u64 = checkpoint.lines().nth(1).and_then(|line| line.parse().ok()).expect("a size");

    // The policy an auditor holds: the log's keys and 2 of the 3 witnesses.
    let log_lines: String =
        keys.lines().filter(|key| key.starts_with(&format!("{origin}+"))).map(|key| format!("log {key}\n")).collect();
    std::fs::write(path("auditor.policy"), format!("{log_lines}{policy}")).expect("write the auditor's policy");
    let export = gavel(&endpoints, &["audit", "export", &path("trail.jsonl")]).await;
    assert_eq!(export.code, 0, "{}", export.stderr);
    let verified = gavel("", &["audit", "verify", &path("trail.jsonl"), "--policy", &path("auditor.policy")]).await;
    assert_eq!(verified.code, 0, "the honest export verifies: {} {}", verified.stdout, verified.stderr);

    // The same export with one witness's cosignature left: below the quorum.
    let trail = std::fs::read_to_string(path("trail.jsonl")).expect("read the export");
    let thinned: String = trail
        .lines()
        .map(|line| {
            let mut value: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
            if let Some(text) = value.get("checkpoint").and_then(serde_json::Value::as_str) {
                let kept: String = text
                    .lines()
                    .filter(|line| {
                        !line.starts_with("\u{2014} witness.test/w2") && !line.starts_with("\u{2014} witness.test/w3")
                    })
                    .map(|line| format!("{line}\n"))
                    .collect();
                value["checkpoint"] = serde_json::Value::String(kept);
            }
            format!("{value}\n")
        })
        .collect();
    std::fs::write(path("thinned.jsonl"), thinned).expect("write the thinned export");
    let refused = gavel("", &["audit", "verify", &path("thinned.jsonl"), "--policy", &path("auditor.policy")]).await;
    assert_eq!(refused.code, 3, "{} {}", refused.stdout, refused.stderr);
    assert!(refused.stderr.contains("quorum two-of-three"), "{}", refused.stderr);

    // A forked history, signed with the log's own key (node 1's note key,
    // which signs under the origin): the witness refuses it.
    let pkcs8 = std::fs::read(cluster.nodes[0].data_dir.join("audit-note.key")).expect("node 1's note key");
    let log_key = Ed25519KeyPair::from_pkcs8(&pkcs8).expect("an Ed25519 key");
    let sign_as_log = |body: &str| {
        let name = origin.clone();
        let id = note::key_id(&name, log_key.public_key().as_ref());
        note::signed_note(
            body,
            &[note::NoteSignature { name, id, signature: log_key.sign(body.as_bytes()).as_ref().to_vec() }],
        )
    };
    let mut forged = MemoryTree::new();
    for leaf in 0..size + 3 {
        forged.push(merkle::leaf_hash(format!("rewritten {leaf}").as_bytes()));
    }
    let w1 = &witnesses[0].addr;
    let witness_size = |answer: &(u16, String)| answer.1.trim().parse::<u64>().ok();
    // Old size 0 is stale: 409 with the size the witness holds.
    let stale = post(
        w1,
        "/add-checkpoint",
        &add_checkpoint_request(0, &[], &sign_as_log(&checkpoint_body(&origin, &forged, size))),
    );
    assert_eq!(stale.0, 409, "{stale:?}");
    let held = witness_size(&stale).expect("the size it holds");
    assert!(held >= size, "{stale:?}");
    for leaf in size + 3..held + 3 {
        forged.push(merkle::leaf_hash(format!("rewritten {leaf}").as_bytes()));
    }
    let proof = merkle::consistency_proof(&forged, held, held + 3).expect("a proof within the forged tree");
    let fork = add_checkpoint_request(held, &proof, &sign_as_log(&checkpoint_body(&origin, &forged, held + 3)));
    let answer = post(w1, "/add-checkpoint", &fork);
    assert_eq!(answer.0, 422, "a fork is refused: {answer:?}");
    let same_size = add_checkpoint_request(held, &[], &sign_as_log(&checkpoint_body(&origin, &forged, held)));
    assert_eq!(post(w1, "/add-checkpoint", &same_size).0, 422, "another root at the size it holds");
    // Its latest checkpoint is still the honest one.
    let digest = hex::encode(ring::digest::digest(&ring::digest::SHA256, origin.as_bytes()));
    let mut stream = std::net::TcpStream::connect(w1.as_str()).expect("connect");
    write!(stream, "GET /{digest}/checkpoint HTTP/1.1\r\nHost: {w1}\r\nConnection: close\r\n\r\n").expect("send");
    let mut latest = String::new();
    stream.read_to_string(&mut latest).expect("read");
    assert!(latest.starts_with("HTTP/1.1 200"), "{latest}");
    assert!(latest.contains(&format!("{origin}\n{held}\n")), "{latest}");
    drop(cluster);
}

fn checkpoint_body(origin: &str, tree: &MemoryTree, size: u64) -> String {
    merkle::checkpoint_body(origin, size, &tree.root_at(size))
}

/// C2SP signed-note's example: its verifier key parses (key id checked)
/// and verifies its example note with real Ed25519; a changed text does not.
#[test]
fn the_signed_note_spec_example_verifies_with_its_verifier_key() {
    let vkey = note::parse_verifier_key("example.com/foo+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k")
        .expect("the spec's verifier key");
    let example = "This is an example message.\n\n\u{2014} example.com/foo Uw2QOkn8srV1yJGh2VYRlL1Tnagv1YEq6TfXppzi2ONncAlTgK7Ztg1ERYNZXsYjOBH3mFXmRKuwHjG1Yu72IneyaQM=\n";
    let ed25519 = |key: &[u8], message: &[u8], signature: &[u8]| {
        ring::signature::UnparsedPublicKey::new(&ring::signature::ED25519, key).verify(message, signature).is_ok()
    };
    let keys = std::slice::from_ref(&vkey);
    assert_eq!(note::verify_note(example, keys, 1, ed25519), Ok("This is an example message.\n".to_string()));
    assert!(note::verify_note(&example.replace("example message", "forged message"), keys, 1, ed25519).is_err());
}
