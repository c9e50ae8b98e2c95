//! The audit tree through real nodes and the real CLI: a three-node cluster
//! serves checkpoints and proofs from any node; `gavel audit export` writes
//! a file that `gavel audit verify` checks with no cluster (and refuses,
//! naming the leaf, once one byte of an event is changed); an earlier
//! checkpoint is proven a prefix of the later tree; `gavel audit proof`
//! writes a tlog-proof that `gavel audit verify-proof` checks on its own.
//! The nodes serve the tree as C2SP tlog-tiles over HTTP, and a client
//! written here from the tlog-tiles spec (not from Gavel's code) computes
//! from the tiles the root `gavel audit checkpoint` prints.

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

/// A tlog-tiles client written from the C2SP spec and RFC 6962 alone: the
/// resource paths, the tiles' layout and the Merkle Tree Hash.
mod tlog_client {
    use sha2::{Digest, Sha256};

    pub type Hash = [u8; 32];

    /// RFC 6962 §2.1: a leaf is `SHA-256(0x00 || entry)`.
    pub fn leaf_hash(entry: &[u8]) -> Hash {
        Sha256::new().chain_update([0u8]).chain_update(entry).finalize().into()
    }

    /// RFC 6962 §2.1: an interior node is `SHA-256(0x01 || left || right)`.
    fn node_hash(left: &Hash, right: &Hash) -> Hash {
        Sha256::new().chain_update([1u8]).chain_update(left).chain_update(right).finalize().into()
    }

    /// MTH over a list of hashes (RFC 6962 §2.1: split at the largest power of two below n).
    fn mth(hashes: &[Hash]) -> Hash {
        match hashes.len() {
            0 => Sha256::digest([]).into(),
            1 => hashes[0],
            n => {
                let mut k = 1;
                while k * 2 < n {
                    k *= 2;
                }
                node_hash(&mth(&hashes[..k]), &mth(&hashes[k..]))
            }
        }
    }

    /// `<N>`: zero-padded 3-digit path elements, all but the last prefixed `x`.
    fn index_path(mut n: u64) -> String {
        let mut elements = vec![format!("{:03}", n % 1000)];
        n /= 1000;
        while n > 0 {
            elements.push(format!("x{:03}", n % 1000));
            n /= 1000;
        }
        elements.reverse();
        elements.join("/")
    }

    /// `tile/<L>/<N>[.p/<W>]`, or `tile/entries/<N>[.p/<W>]` for `level` None.
    pub fn path(level: Option<u32>, n: u64, width: u64) -> String {
        let level = level.map_or("entries".to_string(), |level| level.to_string());
        let partial = if width == 256 { String::new() } else { format!(".p/{width}") };
        format!("tile/{level}/{}{partial}", index_path(n))
    }

    /// The width of tile `n` of `level` in a tree of `size`: 256, or the
    /// partial tile's `floor(size / 256^level) mod 256`.
    pub fn width(level: u32, n: u64, size: u64) -> u64 {
        let at_level = size >> (8 * level);
        if (n + 1) * 256 <= at_level {
            256
        } else {
            at_level - n * 256
        }
    }

    /// The root of the tree of `size` leaves, from its tiles: the hash of
    /// each maximal complete subtree (left to right) from the tile level
    /// holding its height, folded as MTH splits.
    pub async fn root(mut tile: impl AsyncFnMut(String) -> Vec<u8>, size: u64) -> Hash {
        let mut subtrees = Vec::new();
        let mut start = 0u64;
        for height in (0..64u32).rev().filter(|height| size & (1 << height) != 0) {
            // The node at `height` is MTH of 2^(height mod 8) hashes of tile level height / 8.
            let (level, below) = (height / 8, height % 8);
            let first = start >> (8 * level);
            let n = first / 256;
            let bytes = tile(path(Some(level), n, width(level, n, size))).await;
            let hashes: Vec<Hash> = bytes.chunks_exact(32).map(|chunk| chunk.try_into().expect("32 bytes")).collect();
            let offset = (first % 256) as usize;
            subtrees.push(mth(&hashes[offset..offset + (1 << below)]));
            start += 1 << height;
        }
        let mut root: Option<Hash> = None;
        for subtree in subtrees.iter().rev() {
            root = Some(root.map_or(*subtree, |right| node_hash(subtree, &right)));
        }
        root.unwrap_or_else(|| mth(&[]))
    }

    /// The entries of a bundle: each a big-endian u16 length, then its bytes.
    pub fn entries(bundle: &[u8]) -> Vec<&[u8]> {
        let mut entries = Vec::new();
        let mut rest = bundle;
        while rest.len() >= 2 {
            let length = u16::from_be_bytes([rest[0], rest[1]]) as usize;
            entries.push(&rest[2..2 + length]);
            rest = &rest[2 + length..];
        }
        assert!(rest.is_empty(), "a bundle is whole entries");
        entries
    }
}

/// One HTTP/1.1 GET: the status and the body.
async fn http_get(addr: &str, path: &str) -> (u16, Vec<u8>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect to the metrics listener");
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.expect("read");
    let split = response.windows(4).position(|window| window == b"\r\n\r\n").expect("a response head");
    let head = String::from_utf8_lossy(&response[..split]).into_owned();
    let status = head.split_whitespace().nth(1).and_then(|status| status.parse().ok()).expect("a status");
    (status, response[split + 4..].to_vec())
}

/// Size and root of a checkpoint's text (origin, size, base64 root).
fn size_and_root(checkpoint: &str) -> (u64, Vec<u8>) {
    use base64::Engine as _;
    let mut lines = checkpoint.lines().skip(1);
    let size = lines.next().and_then(|line| line.parse().ok()).expect("a size line");
    let root = base64::engine::general_purpose::STANDARD.decode(lines.next().expect("a root line")).expect("base64");
    (size, root)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_export_verifies_offline_and_names_a_changed_event_and_proofs_verify_on_their_own() {
    // Every node serves tlog-tiles on its metrics listener: nodes 1 and 2
    // the events too, node 3 the hashes only.
    let metrics: Vec<String> = (0..3).map(|_| format!("127.0.0.1:{}", support::free_port())).collect();
    let tiles_flags = |id: u64| {
        let what = if id == 3 { "hashes" } else { "entries" };
        vec![format!("--metrics-listen={}", metrics[id as usize - 1]), format!("--audit-tiles={what}")]
    };
    let cluster = Cluster::start_with_node_flags(3, &["--audit-checkpoints=true"], &[], tiles_flags).await;
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
    assert_eq!(
        keys.stdout.lines().filter(|key| key.contains("/node-")).count(),
        3,
        "one key per node: {}",
        keys.stdout
    );
    std::fs::write(path("keys.txt"), &keys.stdout).expect("write the keys");
    let mut heads = Vec::new();
    for node in &cluster.nodes {
        let head = json(&gavel(&node.addr, &["audit", "checkpoint", "--json"]).await);
        heads.push((head["size"].clone(), head["root"].clone()));
    }
    assert!(heads.windows(2).all(|pair| pair[0] == pair[1]), "{heads:?}");
    assert!(heads[0].0.as_u64().expect("a size") > early_size);

    // The tiles, read from node 3 (hashes only) by the client above, give
    // the root `gavel audit checkpoint` prints, at the size of the
    // checkpoint every node serves.
    let printed = gavel(&endpoints, &["audit", "checkpoint"]).await;
    let (size, root) = size_and_root(&printed.stdout);
    for addr in &metrics {
        let (status, body) = http_get(addr, "/audit/checkpoint").await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        let served = String::from_utf8(body).expect("a checkpoint is text");
        assert_eq!(size_and_root(&served), (size, root.clone()), "node at {addr} serves {served}");
        assert!(served.contains("\n\n\u{2014} "), "a signed note: {served}");
    }
    let tile = |path: String| {
        let addr = metrics[2].clone();
        async move {
            let (status, body) = http_get(&addr, &format!("/audit/{path}")).await;
            assert_eq!(status, 200, "{path}: {}", String::from_utf8_lossy(&body));
            body
        }
    };
    assert_eq!(tlog_client::root(tile, size).await.to_vec(), root, "the root from the tiles at size {size}");
    // Each entry of a bundle (node 1) hashes to the leaf hash of the level-0 tile (node 3).
    for n in 0..size.div_ceil(256) {
        let width = tlog_client::width(0, n, size);
        let (_, hashes) = http_get(&metrics[2], &format!("/audit/{}", tlog_client::path(Some(0), n, width))).await;
        let (status, bundle) = http_get(&metrics[0], &format!("/audit/{}", tlog_client::path(None, n, width))).await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&bundle));
        let entries = tlog_client::entries(&bundle);
        assert_eq!(entries.len() as u64, width);
        for (at, entry) in entries.iter().enumerate() {
            assert_eq!(tlog_client::leaf_hash(entry).as_slice(), &hashes[at * 32..at * 32 + 32], "leaf {at}");
            let event: Value = serde_json::from_slice(entry).expect("an entry is the event's JSON");
            assert_eq!(event["cursor"], n * 256 + at as u64 + 1);
        }
        // Node 3 serves no events; nobody serves a tile the tree has not reached.
        let (forbidden, _) = http_get(&metrics[2], &format!("/audit/{}", tlog_client::path(None, n, width))).await;
        assert_eq!(forbidden, 403);
    }
    let (missing, _) = http_get(&metrics[0], &format!("/audit/{}", tlog_client::path(Some(0), 1_000, 256))).await;
    assert_eq!(missing, 404);

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
        unvouched.stderr.contains("no listed log key signed the checkpoint under its origin"),
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
    assert_eq!(verified["droppedByRetention"], 0);
    assert_eq!(verified["droppedBelow"], 0, "the export states what retention dropped: nothing yet");
    let text = std::fs::read_to_string(path("trail.jsonl")).expect("read the export");
    assert_eq!(text.lines().next(), Some(r#"{"format":"gavel-audit-export/1"}"#));
    // Another format is refused before anything is checked.
    std::fs::write(path("future.jsonl"), text.replacen("gavel-audit-export/1", "gavel-audit-export/9", 1))
        .expect("write");
    let future = gavel("127.0.0.1:1", &["audit", "verify", &path("future.jsonl")]).await;
    assert_eq!(future.code, 3, "{}", future.stderr);
    assert!(future.stderr.contains("AUDIT_EXPORT_FORMAT_UNKNOWN"), "{}", future.stderr);

    // One byte of one event changed: refused, naming the leaf.
    let text = std::fs::read_to_string(path("trail.jsonl")).expect("read the export");
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    // The format line, the early checkpoint, its proof, the head: leaf 5 is line 10.
    lines[9] = lines[9].replacen("alice", "alicf", 1);
    assert_ne!(lines[9], text.lines().nth(9).expect("line 10"), "the event changed");
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
