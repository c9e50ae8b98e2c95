//! The audit tree's verbs of `gavel audit`: `checkpoint`, `proof` and
//! `export` read the cluster (auditor grant); `verify` and `verify-proof`
//! check the files they wrote with no cluster at all (the formats and the
//! checks are `gavel_core::audit_export`'s).

use std::io::{BufRead, BufWriter, Write};
use std::path::{Path, PathBuf};

use gavel_client::{pb, Client};
use gavel_core::audit_export::{self, EventProof, ExportConsistency, ExportLine};
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

/// The keys whose signatures a verification requires, if any.
pub struct Signers {
    keys: Vec<note::VerifierKey>,
    quorum: usize,
}

impl Signers {
    /// Reads `--keys` (one verifier key a line) and `--quorum` (default: a majority).
    pub fn read(keys: Option<&Path>, quorum: Option<usize>) -> Result<Option<Signers>, CommandError> {
        let Some(path) = keys else {
            return match quorum {
                Some(_) => Err(CommandError::Usage("--quorum needs --keys".to_string())),
                None => Ok(None),
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
        let quorum = quorum.unwrap_or(keys.len() / 2 + 1);
        if quorum == 0 || quorum > keys.len() {
            return Err(CommandError::Usage(format!("--quorum must be 1 to {}, the keys listed", keys.len())));
        }
        Ok(Some(Signers { keys, quorum }))
    }

    /// Checks that `quorum` of the keys signed the checkpoint `note`.
    fn check(&self, note: &str) -> Result<(), String> {
        let ed25519 = |key: &[u8], message: &[u8], signature: &[u8]| {
            ring::signature::UnparsedPublicKey::new(&ring::signature::ED25519, key).verify(message, signature).is_ok()
        };
        note::verify_note(note, &self.keys, self.quorum, ed25519).map(drop)
    }
}

/// The checkpoint a verification stands on: `signers`' check of a signed
/// note, or nothing without `--keys`.
fn check_with(signers: Option<&Signers>) -> impl FnMut(&str) -> Result<(), String> + '_ {
    move |note| signers.map_or(Ok(()), |signers| signers.check(note))
}

/// The checkpoint an auditor should keep: the last cosigned one, or the
/// unsigned tree head before any is published.
fn head_of(head: &pb::GetCheckpointResponse) -> &str {
    head.signed_checkpoint.as_deref().unwrap_or(&head.checkpoint)
}

/// Prints the last cosigned checkpoint (the unsigned head before one exists).
pub async fn checkpoint(client: &Client, json: bool) -> Result<(), CommandError> {
    let head = client.get_checkpoint(pb::GetCheckpointRequest {}).await?;
    if json {
        return output::print_json_line(&json!({
            "origin": head.origin, "size": head.size, "root": hex::encode(&head.root), "checkpoint": head.checkpoint,
            "signedCheckpoint": head.signed_checkpoint,
        }));
    }
    if head.signed_checkpoint.is_none() {
        eprintln!("no checkpoint is cosigned yet: this is the unsigned tree head");
    }
    output::print(head_of(&head))
}

/// Prints the nodes' verifier keys, one a line.
pub async fn keys(client: &Client, json: bool) -> Result<(), CommandError> {
    let head = client.get_checkpoint(pb::GetCheckpointRequest {}).await?;
    if json {
        return output::print_json_line(&json!({ "keys": head.note_keys }));
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
    // By default the proof is against the last cosigned checkpoint, which
    // carries the nodes' signatures; an explicit --size gets an unsigned head.
    let head = client.get_checkpoint(pb::GetCheckpointRequest {}).await?;
    let signed = head.signed_checkpoint.as_deref().and_then(|note| audit_export::parse_checkpoint_body(note).ok());
    let size = match (&signed, size) {
        (Some(body), 0) if body.size > index => body.size,
        _ => size,
    };
    let proof = client.get_inclusion_proof(pb::GetInclusionProofRequest { index, size }).await?;
    let event = proof.canonical_event.clone().ok_or_else(|| {
        CommandError::refused(
            ErrorCode::NotFound,
            format!("retention dropped the event at cursor {cursor}: its hash is in the tree, its bytes are not"),
        )
    })?;
    let root: Hash =
        proof.root.as_slice().try_into().map_err(|_| CommandError::refused(ErrorCode::Internal, "bad root"))?;
    let checkpoint = match (&signed, head.signed_checkpoint.as_deref()) {
        (Some(body), Some(note)) if body.size == proof.size => note.to_string(),
        _ => gavel_core::merkle::checkpoint_body(&head.origin, proof.size, &root),
    };
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

/// Writes the export: every leaf up to the head's size, the head's
/// checkpoint, and each earlier checkpoint given with its consistency proof.
pub async fn export(client: &Client, file: &Path, earlier: &[PathBuf], json: bool) -> Result<(), CommandError> {
    let tree_head = client.get_checkpoint(pb::GetCheckpointRequest {}).await?;
    // The export covers the tree up to the last cosigned checkpoint, so that
    // `verify --keys` vouches for every leaf; the unsigned head before one exists.
    let head_text = head_of(&tree_head).to_string();
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
    out.flush()?;
    if json {
        return output::print_json_line(&json!({ "file": file, "size": head.size, "checkpoint": head_text }));
    }
    output::print(&format!("exported {} events to {}\n", head.size, file.display()))
}

/// Verifies an export; every finding is printed, and the command is
/// refused with [`VERIFICATION_FAILED`] naming the first.
pub fn verify(file: &Path, signers: &Option<Signers>, json: bool) -> Result<(), CommandError> {
    let reader = std::io::BufReader::new(std::fs::File::open(file)?);
    let lines = reader.lines().collect::<Result<Vec<String>, _>>()?;
    if signers.is_none() {
        eprintln!("no --keys: the checkpoints' signatures are not checked");
    }
    match audit_export::verify_export(lines.iter().map(String::as_str), check_with(signers.as_ref())) {
        Ok(summary) => {
            let sizes: Vec<u64> = summary.checkpoints.iter().map(|checkpoint| checkpoint.size).collect();
            if json {
                return output::print_json_line(&json!({
                    "verified": true, "leaves": summary.leaves, "events": summary.events,
                    "checkpoints": sizes, "consistencyProofs": summary.consistency_proofs,
                    "signaturesChecked": signers.is_some(),
                }));
            }
            output::print(&format!(
                "verified: {} leaves ({} events kept, {} dropped by retention), checkpoints at sizes {:?}, {} consistency proofs\n",
                summary.leaves,
                summary.events,
                summary.leaves - summary.events,
                sizes,
                summary.consistency_proofs
            ))
        }
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
        None => eprintln!("no --keys: the checkpoint's signatures are not checked"),
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
