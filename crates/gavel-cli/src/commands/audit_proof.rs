//! The audit tree's verbs of `gavel audit`: `checkpoint`, `proof` and
//! `export` read the cluster (auditor grant); `verify` and `verify-proof`
//! check the files they wrote with no cluster at all (the formats and the
//! checks are `gavel_core::audit_export`'s).

use std::io::{BufRead, BufWriter, Write};
use std::path::{Path, PathBuf};

use gavel_client::{pb, Client};
use gavel_core::audit_export::{self, EventProof, ExportConsistency, ExportLine, RetentionStatement};
use gavel_core::merkle::Hash;
use gavel_core::note;
use gavel_core::ErrorCode;
use serde_json::json;

use super::output;
use super::CommandError;

/// Leaves asked for per page of an export.
const LEAVES_PAGE: u32 = 1_000;

/// The refusal code of a file that does not verify.
const VERIFICATION_FAILED: ErrorCode = ErrorCode::AuditVerificationFailed;

fn hashes(proof: &[Vec<u8>]) -> Result<Vec<Hash>, CommandError> {
    proof
        .iter()
        .map(|hash| {
            hash.as_slice().try_into().map_err(|_| {
                CommandError::refused(ErrorCode::Internal, "the cluster sent a proof hash that is not 32 bytes")
            })
        })
        .collect()
}

/// The signatures a verification requires, if any: from `--keys`, a
/// signature by one of its log keys (named as the origin, when it lists
/// any) and cosignatures by `quorum` of its node keys; from `--policy`, a
/// C2SP tlog-policy's log keys and witness quorum.
pub struct Signers {
    keys: Vec<note::VerifierKey>,
    quorum: usize,
    policy: Option<gavel_core::witness::Policy>,
}

/// The Ed25519 check the note functions take.
fn ed25519(key: &[u8], message: &[u8], signature: &[u8]) -> bool {
    ring::signature::UnparsedPublicKey::new(&ring::signature::ED25519, key).verify(message, signature).is_ok()
}

impl Signers {
    /// Reads `--keys` (one verifier key a line), `--quorum` (default: a
    /// majority of the node keys listed) and `--policy`.
    pub fn read(
        keys: Option<&Path>,
        quorum: Option<usize>,
        policy: Option<&Path>,
    ) -> Result<Option<Signers>, CommandError> {
        let policy = match policy {
            Some(path) => Some(
                gavel_core::witness::Policy::parse(&std::fs::read_to_string(path)?)
                    .map_err(|problem| CommandError::Usage(format!("{}: {problem}", path.display())))?,
            ),
            None => None,
        };
        let Some(path) = keys else {
            return match (quorum, policy) {
                (Some(_), _) => Err(CommandError::Usage("--quorum needs --keys".to_string())),
                (None, None) => Ok(None),
                (None, policy) => Ok(Some(Signers { keys: Vec::new(), quorum: 0, policy })),
            };
        };
        let text = std::fs::read_to_string(path)?;
        let keys = text
            .lines()
            .filter(|line| !line.trim().is_empty())
            .map(note::parse_verifier_key)
            .collect::<Result<Vec<_>, String>>()
            .map_err(|problem| CommandError::Usage(format!("{}: {problem}", path.display())))?;
        if keys.is_empty() {
            return Err(CommandError::Usage(format!("{} lists no key", path.display())));
        }
        let cosigners = keys.iter().filter(|key| key.kind == note::KeyKind::Cosignature).count();
        let quorum = match quorum {
            Some(quorum) => quorum,
            None if cosigners == 0 => 0,
            None => cosigners / 2 + 1,
        };
        if quorum > cosigners || (quorum == 0 && cosigners > 0) {
            return Err(CommandError::Usage(format!("--quorum must be 1 to {cosigners}, the node keys listed")));
        }
        Ok(Some(Signers { keys, quorum, policy }))
    }

    /// Checks the checkpoint `note` against the keys and the policy.
    fn check(&self, note: &str) -> Result<(), String> {
        if !self.keys.is_empty() {
            let (text, signers) = note::verified_signers(note, &self.keys, ed25519)?;
            let origin = text.lines().next().unwrap_or_default();
            let logs_listed = self.keys.iter().any(|key| key.kind == note::KeyKind::Ed25519);
            let by_log = signers.iter().any(|key| key.kind == note::KeyKind::Ed25519 && key.name == origin);
            if logs_listed && !by_log {
                return Err(format!("no listed log key signed the checkpoint under its origin {origin}"));
            }
            let cosigned = signers.iter().filter(|key| key.kind == note::KeyKind::Cosignature).count();
            if cosigned < self.quorum {
                return Err(format!(
                    "{cosigned} of the listed node keys cosigned the checkpoint, fewer than {}",
                    self.quorum
                ));
            }
        }
        match &self.policy {
            Some(policy) => policy.check(note, ed25519).map_err(|problem| format!("witness policy: {problem}")),
            None => Ok(()),
        }
    }
}

/// The checkpoint a verification stands on: `signers`' check of a signed
/// note, or nothing without `--keys`.
fn check_with(signers: Option<&Signers>) -> impl FnMut(&str) -> Result<(), String> + '_ {
    move |note| signers.map_or(Ok(()), |signers| signers.check(note))
}

/// The last cosigned checkpoint; refused with `AUDIT_CHECKPOINT_UNSIGNED`
/// before one is published: an unsigned tree head is never presented as a
/// checkpoint.
fn head_of(head: &pb::GetCheckpointResponse) -> Result<&str, CommandError> {
    head.signed_checkpoint.as_deref().ok_or_else(|| {
        CommandError::refused(
            ErrorCode::AuditCheckpointUnsigned,
            format!(
                "no checkpoint is cosigned yet (the tree has {} events); the nodes publish one within about a second \
                 of new events: try again",
                head.size
            ),
        )
    })
}

/// Prints the last cosigned checkpoint (refused before one exists; `--json`
/// reports the tree head beside it, marked as unsigned).
pub async fn checkpoint(client: &Client, json: bool) -> Result<(), CommandError> {
    let head = client.get_checkpoint(pb::GetCheckpointRequest {}).await?;
    if json {
        return output::print_json_line(&json!({
            "origin": head.origin, "size": head.size, "root": hex::encode(&head.root),
            "unsignedTreeHead": head.checkpoint, "signedCheckpoint": head.signed_checkpoint,
        }));
    }
    output::print(head_of(&head)?)
}

/// Prints the nodes' verifier keys, one a line.
pub async fn keys(client: &Client, json: bool) -> Result<(), CommandError> {
    let head = client.get_checkpoint(pb::GetCheckpointRequest {}).await?;
    if json {
        return output::print_json_line(&json!({ "keys": head.note_keys }));
    }
    if head.note_keys.is_empty() {
        return Err(CommandError::refused(
            ErrorCode::AuditCheckpointUnsigned,
            "no node has registered a note key: the nodes run with --audit-checkpoints=false",
        ));
    }
    output::print(&head.note_keys.iter().map(|key| format!("{key}\n")).collect::<String>())
}

/// Writes the proof that the event at `cursor` is in the tree of `size` (0: now).
pub async fn proof(
    client: &Client,
    cursor: u64,
    size: u64,
    out: Option<&Path>,
    json: bool,
) -> Result<(), CommandError> {
    let index = cursor
        .checked_sub(1)
        .ok_or_else(|| CommandError::Usage("cursors start at 1: cursor 0 names no event".to_string()))?;
    // The proof is against the last cosigned checkpoint, which must cover
    // the event: an unsigned tree head is never presented as a checkpoint.
    let head = client.get_checkpoint(pb::GetCheckpointRequest {}).await?;
    let note = head_of(&head)?.to_string();
    let signed = audit_export::parse_checkpoint_body(&note).map_err(|problem| {
        CommandError::refused(ErrorCode::Internal, format!("the cluster's checkpoint: {problem}"))
    })?;
    if signed.size <= index {
        return Err(CommandError::refused(
            ErrorCode::AuditCheckpointUnsigned,
            format!(
                "the last cosigned checkpoint (size {}) does not cover cursor {cursor} yet; try again in a second",
                signed.size
            ),
        ));
    }
    if size != 0 && size != signed.size {
        return Err(CommandError::Usage(format!(
            "--size {size}: the last cosigned checkpoint has size {}; a proof is only written against it",
            signed.size
        )));
    }
    let size = signed.size;
    let proof = client.get_inclusion_proof(pb::GetInclusionProofRequest { index, size }).await?;
    let event = proof.canonical_event.clone().ok_or_else(|| {
        CommandError::refused(
            ErrorCode::NotFound,
            format!("retention dropped the event at cursor {cursor}: its hash is in the tree, its bytes are not"),
        )
    })?;
    let root: Hash =
        proof.root.as_slice().try_into().map_err(|_| CommandError::refused(ErrorCode::Internal, "bad root"))?;
    if root != signed.root || proof.size != signed.size {
        return Err(CommandError::refused(ErrorCode::Internal, "the proof's root is not the checkpoint's"));
    }
    let checkpoint = note;
    let bundle = EventProof { tlog_proof: audit_export::tlog_proof(index, &hashes(&proof.proof)?, &checkpoint), event };
    let text = serde_json::to_string_pretty(&bundle).map_err(anyhow::Error::from)? + "\n";
    match out {
        Some(path) => {
            std::fs::write(path, text)?;
            let summary =
                format!("event at cursor {cursor} proven in the tree of {} events: {}", proof.size, path.display());
            if json {
                return output::print_json_line(&json!({ "cursor": cursor, "size": proof.size, "file": path }));
            }
            output::print(&format!("{summary}\n"))
        }
        None => output::print(&text),
    }
}

/// Writes the export (`gavel-audit-export/1`): the format line, each
/// earlier checkpoint given with its consistency proof to the head, the
/// head's checkpoint, every leaf up to the head's size, then the retention
/// statement, read after the leaves so that it covers every event
/// retention dropped while they were read.
pub async fn export(client: &Client, file: &Path, earlier: &[PathBuf], json: bool) -> Result<(), CommandError> {
    let tree_head = client.get_checkpoint(pb::GetCheckpointRequest {}).await?;
    // The export covers the tree up to the last cosigned checkpoint, so that
    // `verify --keys` vouches for every leaf; the unsigned head before one exists.
    let head_text = head_of(&tree_head)?.to_string();
    let head = audit_export::parse_checkpoint_body(&head_text).map_err(|problem| {
        CommandError::refused(ErrorCode::Internal, format!("the cluster's checkpoint: {problem}"))
    })?;
    let mut earlier_bodies = Vec::new();
    for path in earlier {
        let text = std::fs::read_to_string(path)?;
        let body = audit_export::parse_checkpoint_body(&text)
            .map_err(|problem| CommandError::Usage(format!("{}: {problem}", path.display())))?;
        if body.size > head.size {
            return Err(CommandError::Usage(format!(
                "{}: checkpoint of size {} is past the tree's size {}",
                path.display(),
                body.size,
                head.size
            )));
        }
        earlier_bodies.push((text, body));
    }
    let mut out = BufWriter::new(std::fs::File::create(file)?);
    writeln!(out, "{}", audit_export::format_line())?;
    for (text, body) in &earlier_bodies {
        writeln!(out, "{}", audit_export::export_line(&ExportLine::Checkpoint(text.clone())))?;
        let request = pb::GetConsistencyProofRequest { old_size: body.size, new_size: head.size };
        let proof = client.get_consistency_proof(request).await?;
        let consistency = ExportConsistency {
            old_size: body.size,
            new_size: head.size,
            proof: proof.proof.iter().map(hex::encode).collect(),
        };
        writeln!(out, "{}", audit_export::export_line(&ExportLine::Consistency(consistency)))?;
    }
    writeln!(out, "{}", audit_export::export_line(&ExportLine::Checkpoint(head_text.clone())))?;
    let mut index = 0;
    while index < head.size {
        let page = client.list_leaves(pb::ListLeavesRequest { start_index: index, limit: LEAVES_PAGE }).await?;
        if page.leaves.is_empty() {
            return Err(CommandError::refused(
                ErrorCode::Internal,
                format!("the cluster returned no leaf at index {index}"),
            ));
        }
        for leaf in page.leaves.into_iter().take_while(|leaf| leaf.index < head.size) {
            let hash: Hash = leaf.leaf_hash.as_slice().try_into().map_err(|_| {
                CommandError::refused(
                    ErrorCode::Internal,
                    format!("the leaf hash at index {} is not 32 bytes", leaf.index),
                )
            })?;
            writeln!(out, "{}", audit_export::leaf_line(leaf.index, &hash, leaf.canonical_event))?;
            index = leaf.index + 1;
        }
    }
    // Retention only moves forward: read now, its bound covers every null
    // event written above; a null at or past it is the cluster withholding.
    let after = client.get_checkpoint(pb::GetCheckpointRequest {}).await?;
    let statement = RetentionStatement {
        dropped_below: after.first_retained_index.min(head.size),
        events_retention_ms: after.events_retention_ms,
        checkpoint_size: head.size,
    };
    writeln!(out, "{}", audit_export::export_line(&ExportLine::Retention(statement)))?;
    out.flush()?;
    if json {
        return output::print_json_line(&json!({ "file": file, "size": head.size, "checkpoint": head_text }));
    }
    output::print(&format!("exported {} events to {}\n", head.size, file.display()))
}

/// Verifies an export, reading it once (memory does not grow with its
/// events); every finding is printed, and the command is refused with
/// [`VERIFICATION_FAILED`] naming the first, or with
/// `AUDIT_EXPORT_FORMAT_UNKNOWN` for a file in another format.
pub fn verify(file: &Path, signers: &Option<Signers>, json: bool) -> Result<(), CommandError> {
    let reader = std::io::BufReader::new(std::fs::File::open(file)?);
    if signers.is_none() {
        eprintln!("no --keys: the checkpoints' signatures are not checked");
    }
    let mut read_error = None;
    let lines = reader.lines().map_while(|line| line.map_err(|error| read_error = Some(error)).ok());
    let outcome = audit_export::verify_export(lines, check_with(signers.as_ref()));
    if let Some(error) = read_error {
        return Err(error.into());
    }
    match outcome {
        Ok(summary) => {
            let sizes: Vec<u64> = summary.checkpoints.iter().map(|checkpoint| checkpoint.size).collect();
            let retention = summary.retention.as_ref();
            if json {
                return output::print_json_line(&json!({
                    "verified": true, "leaves": summary.leaves, "events": summary.events,
                    "droppedByRetention": summary.dropped_by_retention,
                    "droppedBelow": retention.map(|statement| statement.dropped_below),
                    "eventsRetentionMs": retention.map(|statement| statement.events_retention_ms),
                    "checkpoints": sizes, "consistencyProofs": summary.consistency_proofs,
                    "signaturesChecked": signers.is_some(),
                }));
            }
            let dropped = match retention {
                Some(statement) if summary.dropped_by_retention > 0 => format!(
                    "{} dropped by retention: leaves below {}, events older than {} ms, held by the checkpoint of size {}",
                    summary.dropped_by_retention,
                    statement.dropped_below,
                    statement.events_retention_ms,
                    statement.checkpoint_size
                ),
                _ => "0 dropped by retention".to_string(),
            };
            output::print(&format!(
                "verified: {} leaves ({} events kept, {dropped}), checkpoints at sizes {:?}, {} consistency proofs\n",
                summary.leaves, summary.events, sizes, summary.consistency_proofs
            ))
        }
        Err(findings) if findings.iter().any(audit_export::Finding::is_format) => Err(CommandError::refused(
            ErrorCode::AuditExportFormatUnknown,
            format!("{}: {}", file.display(), findings[0]),
        )),
        Err(findings) => {
            for finding in &findings {
                eprintln!("{finding}");
            }
            Err(CommandError::refused(
                VERIFICATION_FAILED,
                format!(
                    "{} does not verify: {} (and {} more findings)",
                    file.display(),
                    findings[0],
                    findings.len() - 1
                ),
            ))
        }
    }
}

/// Verifies an event proof on its own.
pub fn verify_proof(file: &Path, signers: &Option<Signers>, json: bool) -> Result<(), CommandError> {
    let text = std::fs::read_to_string(file)?;
    let bundle: EventProof = serde_json::from_str(&text).map_err(|error| {
        CommandError::refused(VERIFICATION_FAILED, format!("{}: not an event proof: {error}", file.display()))
    })?;
    let proven = audit_export::verify_event_proof(&bundle)
        .map_err(|problem| CommandError::refused(VERIFICATION_FAILED, format!("{}: {problem}", file.display())))?;
    match signers {
        Some(signers) => signers.check(&proven.checkpoint_text).map_err(|problem| {
            CommandError::refused(VERIFICATION_FAILED, format!("{}: its checkpoint: {problem}", file.display()))
        })?,
        None => eprintln!("no --keys or --policy: the checkpoint's signatures are not checked"),
    }
    if json {
        return output::print_json_line(&json!({
            "verified": true, "cursor": proven.index + 1, "size": proven.checkpoint.size,
            "origin": proven.checkpoint.origin,
        }));
    }
    output::print(&format!(
        "verified: the event at cursor {} is in {}'s tree of {} events\n{}\n",
        proven.index + 1,
        proven.checkpoint.origin,
        proven.checkpoint.size,
        bundle.event
    ))
}

#[cfg(test)]
mod unsigned_head_tests {
    use super::*;

    #[test]
    fn an_unsigned_tree_head_is_refused_as_a_checkpoint() {
        let unsigned = pb::GetCheckpointResponse { size: 4, ..pb::GetCheckpointResponse::default() };
        match head_of(&unsigned) {
            Err(CommandError::Refused { code, .. }) => assert_eq!(code, ErrorCode::AuditCheckpointUnsigned.as_str()),
            other => panic!("refused AUDIT_CHECKPOINT_UNSIGNED, not {other:?}"),
        }
        let signed = pb::GetCheckpointResponse {
            signed_checkpoint: Some("o\n1\nAA==\n\n\u{2014} o AA==\n".to_string()),
            ..unsigned
        };
        assert!(head_of(&signed).is_ok());
    }
}
