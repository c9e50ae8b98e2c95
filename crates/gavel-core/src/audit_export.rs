//! The files an auditor checks with no cluster: the export of the audit
//! trail (`gavel audit export`, format `gavel-audit-export/1`) and the proof
//! that one event is in the log (`gavel audit proof`, a C2SP `tlog-proof`
//! with the event's canonical bytes). Both are parsed and verified here,
//! from their text alone.
//!
//! An export is JSON lines, each one object with one key:
//!
//! - `{"leaf": {"index": i, "hash": hex, "event": canonical JSON or null}}`,
//!   leaves in index order from 0; `event` is null for an event retention
//!   dropped (its hash stays a leaf);
//! - `{"checkpoint": body}`, a C2SP `tlog-checkpoint` body (origin, size,
//!   base64 root), or a signed note whose body it is;
//! - `{"consistency": {"oldSize": a, "newSize": b, "proof": [hex, ...]}}`,
//!   between two checkpoints of the file.
//!
//! [`verify_export`] recomputes the tree from the leaves, checks that each
//! event hashes to its leaf and names its own cursor (`index + 1`), that
//! every checkpoint's root is the recomputed root at its size, and every
//! consistency proof; a finding names the leaf index or the checkpoint size.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::merkle::{self, Frontier, Hash};

/// The first line of a C2SP `tlog-proof`.
pub const TLOG_PROOF_HEADER: &str = "c2sp.org/tlog-proof@v1";

/// One line of an export.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub enum ExportLine {
    /// A leaf of the tree.
    Leaf(ExportLeaf),
    /// A checkpoint body (or signed note).
    Checkpoint(String),
    /// A consistency proof between two checkpoints of the file.
    Consistency(ExportConsistency),
}

/// A leaf of an export.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportLeaf {
    /// Its index: the event at cursor `index + 1`.
    pub index: u64,
    /// The leaf hash, lower-case hex.
    pub hash: String,
    /// The event's canonical bytes; `None` when retention dropped it.
    pub event: Option<String>,
}

/// A consistency proof of an export.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExportConsistency {
    /// The older checkpoint's size.
    pub old_size: u64,
    /// The newer checkpoint's size.
    pub new_size: u64,
    /// The proof's hashes, lower-case hex.
    pub proof: Vec<String>,
}

/// A checkpoint body parsed: origin, size and root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointBody {
    /// The log's origin line.
    pub origin: String,
    /// The tree size.
    pub size: u64,
    /// The root hash.
    pub root: Hash,
}

/// Parses the body of a `tlog-checkpoint` (the text before a signed note's
/// blank line, if any): origin, decimal size, base64 root.
pub fn parse_checkpoint_body(text: &str) -> Result<CheckpointBody, String> {
    let body = text.split("\n\n").next().unwrap_or(text);
    let mut lines = body.lines();
    let origin = lines.next().filter(|line| !line.is_empty()).ok_or("the checkpoint has no origin line")?;
    let size = lines
        .next()
        .and_then(|line| line.parse::<u64>().ok())
        .ok_or("the checkpoint's second line is not a tree size")?;
    let root =
        lines.next().and_then(decode_base64_hash).ok_or("the checkpoint's third line is not a base64 root hash")?;
    Ok(CheckpointBody { origin: origin.to_string(), size, root })
}

fn decode_base64_hash(text: &str) -> Option<Hash> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.decode(text).ok()?.try_into().ok()
}

fn encode_base64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn decode_hex_hash(text: &str) -> Option<Hash> {
    hex::decode(text).ok()?.try_into().ok()
}

/// What a verification found wrong, each naming where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Finding {
    /// A line is not one of the export's line forms.
    #[error("line {line}: {problem}")]
    Malformed {
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        problem: String,
    },
    /// The leaf at this index is missing: the next leaf in the file has another index.
    #[error("leaf {index} (cursor {cursor}) is missing or out of order: the file has leaf {found} there", cursor = index + 1)]
    LeafOutOfOrder {
        /// The index expected.
        index: u64,
        /// The index found in its place.
        found: u64,
    },
    /// The event at this index does not hash to its leaf.
    #[error("the event at leaf {index} (cursor {cursor}) was changed: it does not hash to its leaf", cursor = index + 1)]
    EventChanged {
        /// The leaf index.
        index: u64,
    },
    /// The event at this index names another cursor.
    #[error("the event at leaf {index} names cursor {named}, not {cursor}: events were reordered", cursor = index + 1)]
    EventMisplaced {
        /// The leaf index.
        index: u64,
        /// The cursor the event names.
        named: u64,
    },
    /// A checkpoint's root is not the root of the leaves the file holds.
    #[error("the checkpoint of size {size} does not match the tree the file's leaves make (a fork, or leaves changed before it)")]
    CheckpointMismatch {
        /// The checkpoint's size.
        size: u64,
    },
    /// A checkpoint is past the leaves the file holds.
    #[error("the checkpoint of size {size} is past the file's {leaves} leaves (leaves dropped from the end)")]
    CheckpointPastLeaves {
        /// The checkpoint's size.
        size: u64,
        /// How many leaves the file holds.
        leaves: u64,
    },
    /// A consistency proof between two checkpoints does not verify.
    #[error("the consistency proof from size {old_size} to {new_size} does not verify: {problem}")]
    Inconsistent {
        /// The older size.
        old_size: u64,
        /// The newer size.
        new_size: u64,
        /// Why.
        problem: String,
    },
    /// The file has no checkpoint to check the leaves against.
    #[error("the file has no checkpoint: nothing vouches for its leaves")]
    NoCheckpoint,
}

/// What a successful verification checked.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExportSummary {
    /// Leaves recomputed.
    pub leaves: u64,
    /// Leaves whose event the file holds (and that hash to their leaf).
    pub events: u64,
    /// Checkpoints matched, by size.
    pub checkpoints: Vec<CheckpointBody>,
    /// Consistency proofs verified.
    pub consistency_proofs: u64,
}

/// Verifies an export's lines (see the module doc). `check_checkpoint` is
/// asked about each checkpoint's whole text (a signed note's signatures);
/// an error it returns is a finding about that checkpoint. Returns what was
/// checked, or every finding, in file order.
pub fn verify_export<'a>(
    lines: impl IntoIterator<Item = &'a str>,
    mut check_checkpoint: impl FnMut(&str) -> Result<(), String>,
) -> Result<ExportSummary, Vec<Finding>> {
    let mut findings = Vec::new();
    let mut frontier = Frontier::new();
    let mut summary = ExportSummary::default();
    // Roots the recomputation reached, at the checkpoints' sizes.
    let mut checkpoints: Vec<(usize, CheckpointBody)> = Vec::new();
    let mut consistency: Vec<(usize, ExportConsistency)> = Vec::new();
    let mut leaves: Vec<(usize, ExportLeaf)> = Vec::new();
    for (number, line) in lines.into_iter().enumerate().map(|(at, line)| (at + 1, line)) {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<ExportLine>(line) {
            Ok(ExportLine::Leaf(leaf)) => leaves.push((number, leaf)),
            Ok(ExportLine::Checkpoint(text)) => {
                if let Err(problem) = check_checkpoint(&text) {
                    findings.push(Finding::Malformed { line: number, problem });
                }
                match parse_checkpoint_body(&text) {
                    Ok(body) => checkpoints.push((number, body)),
                    Err(problem) => findings.push(Finding::Malformed { line: number, problem }),
                }
            }
            Ok(ExportLine::Consistency(proof)) => consistency.push((number, proof)),
            Err(error) => findings.push(Finding::Malformed { line: number, problem: error.to_string() }),
        }
    }
    checkpoints.sort_by_key(|(_, body)| body.size);
    let mut roots: BTreeMap<u64, Hash> = BTreeMap::new();
    roots.insert(0, merkle::empty_root());
    let wanted: std::collections::BTreeSet<u64> = checkpoints.iter().map(|(_, body)| body.size).collect();
    for (number, leaf) in &leaves {
        let expected = frontier.size();
        if leaf.index != expected {
            findings.push(Finding::LeafOutOfOrder { index: expected, found: leaf.index });
        }
        let Some(hash) = decode_hex_hash(&leaf.hash) else {
            findings.push(Finding::Malformed { line: *number, problem: "the leaf hash is not 64 hex digits".into() });
            continue;
        };
        if let Some(event) = &leaf.event {
            if merkle::leaf_hash(event.as_bytes()) != hash {
                findings.push(Finding::EventChanged { index: expected });
            } else {
                summary.events += 1;
            }
            let named = serde_json::from_str::<serde_json::Value>(event)
                .ok()
                .and_then(|value| value.get("cursor").and_then(serde_json::Value::as_u64));
            if named != Some(expected + 1) {
                findings.push(Finding::EventMisplaced { index: expected, named: named.unwrap_or(0) });
            }
        }
        frontier.push(hash, |_, _, _| {});
        if wanted.contains(&frontier.size()) {
            roots.insert(frontier.size(), frontier.root());
        }
    }
    summary.leaves = frontier.size();
    if checkpoints.is_empty() {
        findings.push(Finding::NoCheckpoint);
    }
    for (_, body) in &checkpoints {
        match roots.get(&body.size) {
            None => findings.push(Finding::CheckpointPastLeaves { size: body.size, leaves: summary.leaves }),
            Some(root) if *root != body.root => findings.push(Finding::CheckpointMismatch { size: body.size }),
            Some(_) => summary.checkpoints.push(body.clone()),
        }
    }
    for (number, proof) in &consistency {
        let root_of = |size: u64| checkpoints.iter().find(|(_, body)| body.size == size).map(|(_, body)| body.root);
        let (Some(old_root), Some(new_root)) = (root_of(proof.old_size), root_of(proof.new_size)) else {
            let problem = "a consistency proof names a size no checkpoint of the file has".to_string();
            findings.push(Finding::Malformed { line: *number, problem });
            continue;
        };
        let Some(hashes) = proof.proof.iter().map(|hash| decode_hex_hash(hash)).collect::<Option<Vec<Hash>>>() else {
            findings.push(Finding::Malformed { line: *number, problem: "a proof hash is not 64 hex digits".into() });
            continue;
        };
        match merkle::verify_consistency(proof.old_size, proof.new_size, &old_root, &new_root, &hashes) {
            Ok(()) => summary.consistency_proofs += 1,
            Err(error) => findings.push(Finding::Inconsistent {
                old_size: proof.old_size,
                new_size: proof.new_size,
                problem: error.to_string(),
            }),
        }
    }
    if findings.is_empty() {
        Ok(summary)
    } else {
        Err(findings)
    }
}

/// Writes one export line (no newline).
pub fn export_line(line: &ExportLine) -> String {
    serde_json::to_string(line).expect("export lines serialize")
}

/// The leaf line of an export.
pub fn leaf_line(index: u64, hash: &Hash, event: Option<String>) -> String {
    export_line(&ExportLine::Leaf(ExportLeaf { index, hash: hex::encode(hash), event }))
}

/// The proof that one event is in the log: a C2SP `tlog-proof` (header,
/// `index N`, the audit path in base64, a blank line, the checkpoint) and
/// the event's canonical bytes, which the `tlog-proof` itself does not carry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EventProof {
    /// The `tlog-proof` text.
    pub tlog_proof: String,
    /// The event's canonical bytes (RFC 8785 JSON).
    pub event: String,
}

/// The `tlog-proof` text of leaf `index` with `proof` under `checkpoint`
/// (a checkpoint body or signed note, ending in a newline).
pub fn tlog_proof(index: u64, proof: &[Hash], checkpoint: &str) -> String {
    let mut text = format!("{TLOG_PROOF_HEADER}\nindex {index}\n");
    for hash in proof {
        text.push_str(&encode_base64(hash));
        text.push('\n');
    }
    text.push('\n');
    text.push_str(checkpoint);
    text
}

/// What an event proof proved: the event at leaf `index` is in the tree of
/// the checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProvenEvent {
    /// The leaf index.
    pub index: u64,
    /// The checkpoint it is proven against.
    pub checkpoint: CheckpointBody,
    /// The checkpoint's whole text (body and signatures, if signed).
    pub checkpoint_text: String,
}

/// Verifies an [`EventProof`] on its own: the event hashes to a leaf whose
/// audit path leads to the checkpoint's root, and it names cursor `index + 1`.
/// The caller then checks the checkpoint's signatures (`checkpoint_text`).
pub fn verify_event_proof(proof: &EventProof) -> Result<ProvenEvent, String> {
    let text = proof.tlog_proof.as_str();
    let rest = text
        .strip_prefix(TLOG_PROOF_HEADER)
        .and_then(|rest| rest.strip_prefix('\n'))
        .ok_or_else(|| format!("the proof does not start with {TLOG_PROOF_HEADER}"))?;
    let (head, checkpoint_text) = rest.split_once("\n\n").ok_or("the proof has no blank line before its checkpoint")?;
    let mut lines = head.lines();
    let index = lines
        .next()
        .and_then(|line| line.strip_prefix("index "))
        .and_then(|index| index.parse::<u64>().ok())
        .ok_or("the proof's second line is not \"index N\"")?;
    let path = lines
        .map(|line| decode_base64_hash(line).ok_or_else(|| format!("{line:?} is not a base64 hash")))
        .collect::<Result<Vec<Hash>, String>>()?;
    let checkpoint = parse_checkpoint_body(checkpoint_text)?;
    let leaf = merkle::leaf_hash(proof.event.as_bytes());
    merkle::verify_inclusion(&leaf, index, checkpoint.size, &path, &checkpoint.root)
        .map_err(|error| format!("the event is not proven in the checkpoint: {error}"))?;
    let named = serde_json::from_str::<serde_json::Value>(&proof.event)
        .ok()
        .and_then(|value| value.get("cursor").and_then(serde_json::Value::as_u64));
    if named != Some(index + 1) {
        return Err(format!("the event names cursor {}, not {}", named.unwrap_or(0), index + 1));
    }
    Ok(ProvenEvent { index, checkpoint, checkpoint_text: checkpoint_text.to_string() })
}
