//! The audit tree's verbs of `gavel audit`: `checkpoint`, `proof` and
//! `export` read the cluster (auditor grant); `verify` and `verify-proof`
//! check the files they wrote with no cluster at all (the formats and the
//! checks are `gavel_core::audit_export`'s).

use std::io::{BufRead, BufWriter, Write};
use std::path::{Path, PathBuf};

use gavel_client::{pb, Client};
use gavel_core::audit_export::{self, EventProof, ExportConsistency, ExportLine};
use gavel_core::merkle::Hash;
use serde_json::json;

use super::output;
use super::CommandError;

/// Leaves asked for per page of an export.
const LEAVES_PAGE: u32 = 1_000;

/// The refusal code of a file that does not verify.
const VERIFICATION_FAILED: &str = "AUDIT_VERIFICATION_FAILED";

fn hashes(proof: &[Vec<u8>]) -> Result<Vec<Hash>, CommandError> {
    proof
        .iter()
        .map(|hash| {
            hash.as_slice()
                .try_into()
                .map_err(|_| CommandError::refused("INTERNAL", "the cluster sent a proof hash that is not 32 bytes"))
        })
        .collect()
}

/// Prints the tree head's checkpoint body.
pub async fn checkpoint(client: &Client, json: bool) -> Result<(), CommandError> {
    let head = client.get_checkpoint(pb::GetCheckpointRequest {}).await?;
    if json {
        return output::print_json_line(&json!({
            "origin": head.origin, "size": head.size, "root": hex::encode(&head.root), "checkpoint": head.checkpoint,
        }));
    }
    output::print(&head.checkpoint)
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
    let proof = client.get_inclusion_proof(pb::GetInclusionProofRequest { index, size }).await?;
    let event = proof.canonical_event.clone().ok_or_else(|| {
        CommandError::refused(
            "NOT_FOUND",
            format!("retention dropped the event at cursor {cursor}: its hash is in the tree, its bytes are not"),
        )
    })?;
    // The checkpoint of the proof's size, as the cluster writes it.
    let origin = client.get_checkpoint(pb::GetCheckpointRequest {}).await?.origin;
    let root: Hash = proof.root.as_slice().try_into().map_err(|_| CommandError::refused("INTERNAL", "bad root"))?;
    let checkpoint = gavel_core::merkle::checkpoint_body(&origin, proof.size, &root);
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
    let head = client.get_checkpoint(pb::GetCheckpointRequest {}).await?;
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
            return Err(CommandError::refused("INTERNAL", format!("the cluster returned no leaf at index {index}")));
        }
        for leaf in page.leaves.into_iter().take_while(|leaf| leaf.index < head.size) {
            let hash: Hash = leaf.leaf_hash.as_slice().try_into().map_err(|_| {
                CommandError::refused("INTERNAL", format!("the leaf hash at index {} is not 32 bytes", leaf.index))
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
    writeln!(out, "{}", audit_export::export_line(&ExportLine::Checkpoint(head.checkpoint.clone())))?;
    out.flush()?;
    if json {
        return output::print_json_line(&json!({ "file": file, "size": head.size, "checkpoint": head.checkpoint }));
    }
    output::print(&format!("exported {} events to {}\n", head.size, file.display()))
}

/// Verifies an export; every finding is printed, and the command is
/// refused with [`VERIFICATION_FAILED`] naming the first.
pub fn verify(file: &Path, json: bool) -> Result<(), CommandError> {
    let reader = std::io::BufReader::new(std::fs::File::open(file)?);
    let lines = reader.lines().collect::<Result<Vec<String>, _>>()?;
    match audit_export::verify_export(lines.iter().map(String::as_str), |_| Ok(())) {
        Ok(summary) => {
            let sizes: Vec<u64> = summary.checkpoints.iter().map(|checkpoint| checkpoint.size).collect();
            if json {
                return output::print_json_line(&json!({
                    "verified": true, "leaves": summary.leaves, "events": summary.events,
                    "checkpoints": sizes, "consistencyProofs": summary.consistency_proofs,
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
pub fn verify_proof(file: &Path, json: bool) -> Result<(), CommandError> {
    let text = std::fs::read_to_string(file)?;
    let bundle: EventProof = serde_json::from_str(&text).map_err(|error| {
        CommandError::refused(VERIFICATION_FAILED, format!("{}: not an event proof: {error}", file.display()))
    })?;
    let proven = audit_export::verify_event_proof(&bundle)
        .map_err(|problem| CommandError::refused(VERIFICATION_FAILED, format!("{}: {problem}", file.display())))?;
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
