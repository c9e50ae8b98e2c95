//! The files an auditor checks with no cluster: the export of the audit
//! trail (`gavel audit export`, format [`EXPORT_FORMAT`]) and the proof
//! that one event is in the log (`gavel audit proof`, a C2SP `tlog-proof`
//! with the event's canonical bytes). Both are parsed and verified here,
//! from their text alone.
//!
//! An export is JSON lines, each one object with one key. The first line is
//! `{"format": "gavel-audit-export/1"}`; a verifier refuses a file whose
//! first line names another format, or none. Then:
//!
//! - `{"checkpoint": body}`, a C2SP `tlog-checkpoint` body (origin, size,
//!   base64 root), or a signed note whose body it is; before the leaves it
//!   covers (the verifier keeps roots only at sizes it knows of);
//! - `{"consistency": {"oldSize": a, "newSize": b, "proof": [hex, ...]}}`,
//!   between two checkpoints of the file;
//! - `{"leaf": {"index": i, "hash": hex, "event": canonical JSON or null}}`,
//!   leaves in index order from 0; `event` is null for an event retention
//!   dropped (its hash stays a leaf);
//! - `{"retention": {"droppedBelow": n, "eventsRetentionMs": w,
//!   "checkpointSize": s}}`, once, anywhere after the format line (`gavel
//!   audit export` writes it last, read after the leaves): retention
//!   dropped the events of leaves below `n` (events older than `w` ms) and
//!   no others; the checkpoint of size `s` (at least `n`) in the file holds
//!   their hashes. A null event at or past `n` was withheld.
//!
//! [`verify_export`] reads the lines once, in order, keeping the tree's
//! frontier and the checkpoints' roots, not the leaves: memory does not
//! grow with the events (`tests/export_memory.rs` holds it under
//! [`VERIFY_BYTES_PER_EVENT_MAX`]). It checks that each event hashes to its
//! leaf and names its own cursor (`index + 1`), that every checkpoint's root
//! is the recomputed root at its size, every consistency proof, and that
//! every null event is below the retention statement's `droppedBelow`
//! (otherwise it was withheld). A finding names the leaf index or the
//! checkpoint size; a missing, repeated or renumbered stretch of leaves is
//! one finding, after which the check goes on from the leaf the file has.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::merkle::{self, Frontier, Hash};

/// The first line of a C2SP `tlog-proof`.
pub const TLOG_PROOF_HEADER: &str = "c2sp.org/tlog-proof@v1";

/// The format an export's first line names; the only one this verifier reads.
pub const EXPORT_FORMAT: &str = "gavel-audit-export/1";

/// What [`verify_export`] keeps per event of a valid export, at most: it
/// keeps none (the frontier is one hash per bit of the size), so the figure
/// is a bound the memory test holds it to, with room for the allocator's
/// rounding, not a cost.
pub const VERIFY_BYTES_PER_EVENT_MAX: u64 = 8;

/// One line of an export.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub enum ExportLine {
    /// The first line: the file's format, [`EXPORT_FORMAT`].
    Format(String),
    /// A leaf of the tree.
    Leaf(ExportLeaf),
    /// A checkpoint body (or signed note).
    Checkpoint(String),
    /// A consistency proof between two checkpoints of the file.
    Consistency(ExportConsistency),
    /// Which leaves' events retention dropped.
    Retention(RetentionStatement),
}

/// The export's statement of what retention dropped: the events of the
/// leaves below `dropped_below`, and no others.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RetentionStatement {
    /// Every leaf below this index may have a null event (retention dropped
    /// it); every leaf from it on has its event. The cluster's oldest
    /// retained event's leaf when the leaves had been read.
    pub dropped_below: u64,
    /// The cluster's retention window for events (ms) when it was read: an
    /// event goes once it is this much older than the cluster clock.
    pub events_retention_ms: u64,
    /// The size of a checkpoint of the file, at least `dropped_below`,
    /// whose tree holds the dropped events' leaf hashes.
    pub checkpoint_size: u64,
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
    /// The file's first line names no format: not an export, or one from
    /// before exports were versioned.
    #[error("the file does not start with a format line ({{\"format\":\"{EXPORT_FORMAT}\"}}): not a Gavel audit export, or one written before exports had versions; export it again")]
    NoFormat,
    /// The file's first line names a format this verifier does not read.
    #[error("the file's format is {found:?}: this gavel reads {EXPORT_FORMAT} only; verify it with the gavel that wrote it, or a newer one")]
    UnknownFormat {
        /// The format the file names.
        found: String,
    },
    /// A line is not one of the export's line forms.
    #[error("line {line}: {problem}")]
    Malformed {
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        problem: String,
    },
    /// Leaves `first..next` are not where the file says they are: the next
    /// leaf in the file is `next`. Checking goes on from there.
    #[error("{} (cursor {}) {} missing or out of order: the file has leaf {next} there",
        leaf_range(*first, *next - 1), first + 1, if *next - *first == 1 { "is" } else { "are" })]
    LeavesMissing {
        /// The first index expected and not found.
        first: u64,
        /// The index the file has in its place.
        next: u64,
    },
    /// A leaf comes again, or later than its place: after leaf `after`.
    #[error("leaf {index} (cursor {cursor}) is out of order: the file has it after leaf {after}", cursor = index + 1)]
    LeafOutOfOrder {
        /// The leaf's index.
        index: u64,
        /// The leaf before it in the file.
        after: u64,
    },
    /// The event at this index does not hash to its leaf.
    #[error("the event at leaf {index} (cursor {cursor}) was changed: it does not hash to its leaf", cursor = index + 1)]
    EventChanged {
        /// The leaf index.
        index: u64,
    },
    /// The events of leaves `first..=last` name cursors `offset` away from
    /// their own (`index + 1`): moved, or renumbered after one was removed.
    #[error("{}", misplaced(*first, *last, *offset))]
    EventsMisplaced {
        /// The first leaf of the stretch.
        first: u64,
        /// The last leaf of the stretch.
        last: u64,
        /// The cursor each names, less its own.
        offset: i64,
    },
    /// A checkpoint's root is not the root of the leaves the file holds.
    #[error("the checkpoint of size {size} does not match the tree the file's leaves make (a fork, or leaves changed before it)")]
    CheckpointMismatch {
        /// The checkpoint's size.
        size: u64,
    },
    /// A checkpoint covers leaves that are not all in place, so its root cannot be recomputed.
    #[error("the checkpoint of size {size} cannot be checked: leaf {from} and later ones are not all in place")]
    CheckpointUnchecked {
        /// The checkpoint's size.
        size: u64,
        /// The first leaf missing or out of place.
        from: u64,
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
    /// Leaves `first..=last` have no event though retention kept them.
    #[error("{} (cursor {}) {} no event, but {}: withheld, not dropped by retention",
        leaf_range(*first, *last), first + 1, if first == last { "has" } else { "have" },
        match dropped_below {
            Some(below) => format!("the export's retention statement says retention dropped only the events below leaf {below}"),
            None => "the export states no retention".to_string(),
        })]
    EventsWithheld {
        /// The first leaf.
        first: u64,
        /// The last leaf.
        last: u64,
        /// The retention statement's `droppedBelow`, if the file has one.
        dropped_below: Option<u64>,
    },
    /// The retention statement does not stand on a checkpoint of the file.
    #[error("the retention statement (events below leaf {dropped_below} dropped) is not proven: {problem}")]
    RetentionUnproven {
        /// The statement's `droppedBelow`.
        dropped_below: u64,
        /// Why.
        problem: String,
    },
}

impl Finding {
    /// True for a finding about the file's format: nothing else was checked.
    pub fn is_format(&self) -> bool {
        matches!(self, Finding::NoFormat | Finding::UnknownFormat { .. })
    }
}

/// `leaf 7` or `leaves 7 to 9`.
fn leaf_range(first: u64, last: u64) -> String {
    if first == last {
        format!("leaf {first}")
    } else {
        format!("leaves {first} to {last}")
    }
}

fn misplaced(first: u64, last: u64, offset: i64) -> String {
    let named = |index: u64| (i128::from(index) + 1 + i128::from(offset)).max(0);
    if first == last {
        format!("the event at leaf {first} names cursor {}, not {}: events were reordered", named(first), first + 1)
    } else {
        format!(
            "the events at leaves {first} to {last} name cursors {} to {}, not {} to {}: events were moved or renumbered",
            named(first),
            named(last),
            first + 1,
            last + 1
        )
    }
}

/// What a successful verification checked.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExportSummary {
    /// Leaves recomputed.
    pub leaves: u64,
    /// Leaves whose event the file holds (and that hash to their leaf).
    pub events: u64,
    /// Leaves whose event retention dropped, as the retention statement says.
    pub dropped_by_retention: u64,
    /// The retention statement, if the file has one.
    pub retention: Option<RetentionStatement>,
    /// Checkpoints matched, by size.
    pub checkpoints: Vec<CheckpointBody>,
    /// Consistency proofs verified.
    pub consistency_proofs: u64,
}

/// Adds `index` to a list of stretches of consecutive indices.
fn extend_stretch(stretches: &mut Vec<(u64, u64)>, index: u64) {
    match stretches.last_mut() {
        Some((_, last)) if *last + 1 == index => *last = index,
        _ => stretches.push((index, index)),
    }
}

/// The format a first line names: `Ok` for [`EXPORT_FORMAT`].
fn check_format(line: &str) -> Result<(), Finding> {
    let value: Option<serde_json::Value> = serde_json::from_str(line).ok();
    match value.as_ref().and_then(|value| value.get("format")).and_then(serde_json::Value::as_str) {
        Some(EXPORT_FORMAT) => Ok(()),
        Some(found) => Err(Finding::UnknownFormat { found: found.to_string() }),
        None => Err(Finding::NoFormat),
    }
}

/// Verifies an export's lines (see the module doc), reading each once.
/// `check_checkpoint` is asked about each checkpoint's whole text (a signed
/// note's signatures); an error it returns is a finding about that
/// checkpoint. Returns what was checked, or every finding. A file in
/// another format gets that one finding ([`Finding::is_format`]).
pub fn verify_export<S: AsRef<str>>(
    lines: impl IntoIterator<Item = S>,
    mut check_checkpoint: impl FnMut(&str) -> Result<(), String>,
) -> Result<ExportSummary, Vec<Finding>> {
    let mut lines = lines.into_iter().enumerate().map(|(at, line)| (at + 1, line));
    let format_line = lines.by_ref().find(|(_, line)| !line.as_ref().trim().is_empty());
    match format_line {
        None => return Err(vec![Finding::NoFormat]),
        Some((_, line)) => check_format(line.as_ref()).map_err(|finding| vec![finding])?,
    }
    let mut findings = Vec::new();
    let mut summary = ExportSummary::default();
    // The recomputed tree: its frontier while every leaf so far is in place.
    let mut frontier = Frontier::new();
    // The index the next leaf should have, and the first not in place.
    let mut next_index: u64 = 0;
    let mut broken_at: Option<u64> = None;
    // The roots at the checkpoints' sizes, as the frontier reaches them.
    let mut wanted: BTreeSet<u64> = BTreeSet::new();
    let mut roots: BTreeMap<u64, Hash> = BTreeMap::from([(0, merkle::empty_root())]);
    let mut checkpoints: Vec<CheckpointBody> = Vec::new();
    let mut consistency: Vec<(usize, ExportConsistency)> = Vec::new();
    let mut retention: Option<RetentionStatement> = None;
    // Stretches of leaves with no event, and of events naming a cursor off their own.
    let mut nulls: Vec<(u64, u64)> = Vec::new();
    let mut misplaced: Vec<(u64, u64, i64)> = Vec::new();
    for (number, line) in lines {
        let line = line.as_ref();
        if line.trim().is_empty() {
            continue;
        }
        let leaf = match serde_json::from_str::<ExportLine>(line) {
            Ok(ExportLine::Leaf(leaf)) => leaf,
            Ok(ExportLine::Checkpoint(text)) => {
                if let Err(problem) = check_checkpoint(&text) {
                    findings.push(Finding::Malformed { line: number, problem });
                }
                match parse_checkpoint_body(&text) {
                    Ok(body) if body.size < frontier.size() => {
                        let problem = format!(
                            "the checkpoint of size {} comes after its leaves: an export lists its checkpoints first",
                            body.size
                        );
                        findings.push(Finding::Malformed { line: number, problem });
                    }
                    Ok(body) => {
                        if body.size == frontier.size() {
                            roots.insert(body.size, frontier.root());
                        }
                        wanted.insert(body.size);
                        checkpoints.push(body);
                    }
                    Err(problem) => findings.push(Finding::Malformed { line: number, problem }),
                }
                continue;
            }
            Ok(ExportLine::Consistency(proof)) => {
                consistency.push((number, proof));
                continue;
            }
            Ok(ExportLine::Retention(statement)) => {
                if retention.is_some() {
                    let problem = "a second retention statement".to_string();
                    findings.push(Finding::Malformed { line: number, problem });
                } else {
                    retention = Some(statement);
                }
                continue;
            }
            Ok(ExportLine::Format(_)) => {
                let problem = "a format line past the first line".to_string();
                findings.push(Finding::Malformed { line: number, problem });
                continue;
            }
            Err(error) => {
                findings.push(Finding::Malformed { line: number, problem: error.to_string() });
                continue;
            }
        };
        // Where the leaf is: in place, past a gap (resynchronise on it), or
        // again / too late (checked on its own, kept out of the tree).
        let index = leaf.index;
        if index == u64::MAX {
            // No tree has it; and `index + 1`, its cursor, must not overflow.
            findings.push(Finding::Malformed { line: number, problem: "the leaf index is past any tree".into() });
            continue;
        }
        let in_place = match index.cmp(&next_index) {
            std::cmp::Ordering::Equal => true,
            std::cmp::Ordering::Greater => {
                findings.push(Finding::LeavesMissing { first: next_index, next: index });
                broken_at.get_or_insert(next_index);
                next_index = index;
                true
            }
            std::cmp::Ordering::Less => {
                findings.push(Finding::LeafOutOfOrder { index, after: next_index - 1 });
                false
            }
        };
        if in_place {
            next_index = index + 1;
        }
        let Some(hash) = decode_hex_hash(&leaf.hash) else {
            findings.push(Finding::Malformed { line: number, problem: "the leaf hash is not 64 hex digits".into() });
            if in_place {
                broken_at.get_or_insert(index);
            }
            continue;
        };
        match &leaf.event {
            Some(event) => {
                if merkle::leaf_hash(event.as_bytes()) != hash {
                    findings.push(Finding::EventChanged { index });
                } else {
                    summary.events += 1;
                }
                let named = named_cursor(event).unwrap_or(0);
                if named != index + 1 {
                    let offset = i64::try_from(i128::from(named) - i128::from(index) - 1).unwrap_or(i64::MAX);
                    match misplaced.last_mut() {
                        Some((_, last, run_offset)) if *last + 1 == index && *run_offset == offset => *last = index,
                        _ => misplaced.push((index, index, offset)),
                    }
                }
            }
            None => extend_stretch(&mut nulls, index),
        }
        if in_place && broken_at.is_none() {
            frontier.push(hash, |_, _, _| {});
            if wanted.contains(&frontier.size()) {
                roots.insert(frontier.size(), frontier.root());
            }
        }
    }
    summary.leaves = next_index;
    findings.extend(misplaced.into_iter().map(|(first, last, offset)| Finding::EventsMisplaced {
        first,
        last,
        offset,
    }));
    if checkpoints.is_empty() {
        findings.push(Finding::NoCheckpoint);
    }
    checkpoints.sort_by_key(|body| body.size);
    for body in &checkpoints {
        match (roots.get(&body.size), broken_at) {
            _ if body.size > summary.leaves => {
                findings.push(Finding::CheckpointPastLeaves { size: body.size, leaves: summary.leaves })
            }
            (_, Some(from)) if body.size > from => {
                findings.push(Finding::CheckpointUnchecked { size: body.size, from })
            }
            // Came after its leaves: already a finding.
            (None, _) => {}
            (Some(root), _) if *root != body.root => findings.push(Finding::CheckpointMismatch { size: body.size }),
            (Some(_), _) => summary.checkpoints.push(body.clone()),
        }
    }
    for (number, proof) in &consistency {
        let root_of = |size: u64| checkpoints.iter().find(|body| body.size == size).map(|body| body.root);
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
    // A null event is retention's only below the statement's bound.
    let dropped_below = retention.as_ref().map(|statement| statement.dropped_below);
    for (first, last) in nulls {
        let bound = dropped_below.unwrap_or(0);
        if first < bound {
            summary.dropped_by_retention += last.min(bound - 1) - first + 1;
        }
        if last >= bound {
            findings.push(Finding::EventsWithheld { first: first.max(bound), last, dropped_below });
        }
    }
    // The statement stands on a checkpoint of the file (whose own check is
    // a finding of its own when it fails).
    if let Some(statement) = retention.as_ref().filter(|statement| statement.dropped_below > 0) {
        let problem = if statement.checkpoint_size < statement.dropped_below {
            Some(format!("its checkpoint's size {} is below it", statement.checkpoint_size))
        } else if !checkpoints.iter().any(|body| body.size == statement.checkpoint_size) {
            Some(format!("the file has no checkpoint of its size {}", statement.checkpoint_size))
        } else {
            None
        };
        if let Some(problem) = problem {
            findings.push(Finding::RetentionUnproven { dropped_below: statement.dropped_below, problem });
        }
    }
    summary.retention = retention;
    if findings.is_empty() {
        Ok(summary)
    } else {
        Err(findings)
    }
}

/// The cursor an event's canonical bytes name, if any.
fn named_cursor(event: &str) -> Option<u64> {
    serde_json::from_str::<serde_json::Value>(event).ok()?.get("cursor")?.as_u64()
}

/// The first line of an export.
pub fn format_line() -> String {
    export_line(&ExportLine::Format(EXPORT_FORMAT.to_string()))
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
