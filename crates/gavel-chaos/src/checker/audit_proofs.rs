//! The audit trail is one append-only Merkle tree (issue #26): every tree
//! head the run saw is a prefix of the final tree, and the final trail's
//! events are in it.

use std::collections::BTreeMap;

use gavel_core::merkle::{self, Hash};

use super::{CheckOptions, CheckResult, Findings};
use crate::history::{AuditProofs, CheckpointSeen, Entry, TreeHead};

/// Checks the audit tree the run saw against the one it ended with:
///
/// - two checkpoints of one size with different roots are a fork (`invalid`);
/// - a checkpoint larger than the final head means the tree lost leaves (`invalid`);
/// - every distinct checkpoint seen has a consistency proof to the final
///   head that verifies (RFC 9162 §2.1.4.2, with `gavel_core::merkle`)
///   against the root the run recorded at the time and the final root; one
///   that does not is `invalid`, one that could not be read (or whose answer
///   names another final head) is `unknown`. Since all are prefixes of one
///   tree, every checkpoint is consistent with every later one;
/// - every sampled event of the final trail has an inclusion proof that
///   verifies against the final head; its leaf hash is the hash of the
///   canonical bytes the node returned, and those bytes name the event's
///   cursor, execution and approval as the trail read them (`invalid`
///   otherwise); an event past the final size is `invalid`;
/// - no checkpoint, or no proofs entry, or no final head, is `unknown`.
///
/// Pairwise consistency follows from the proofs to the final head: two
/// prefixes of one tree are prefixes of each other.
pub fn audit_proofs(history: &[Entry], options: &CheckOptions) -> CheckResult {
    let mut findings = Findings::new("audit_proofs", options);
    let seen: Vec<&CheckpointSeen> = history
        .iter()
        .filter_map(|entry| match entry {
            Entry::Checkpoint(checkpoint) => Some(checkpoint),
            _ => None,
        })
        .collect();
    let proofs: Option<&AuditProofs> = history.iter().find_map(|entry| match entry {
        Entry::AuditProofs(proofs) => Some(proofs),
        _ => None,
    });
    findings.set("checkpoints_seen", seen.len() as u64);

    // One root per size.
    let mut roots: BTreeMap<u64, BTreeMap<&str, Vec<String>>> = BTreeMap::new();
    for checkpoint in &seen {
        let sources = roots.entry(checkpoint.size).or_default().entry(&checkpoint.root).or_default();
        sources.push(format!("node {} at {:.0} ms", checkpoint.node, checkpoint.time_ms));
    }
    for (size, by_root) in roots.iter().filter(|(_, by_root)| by_root.len() > 1) {
        let list: Vec<String> =
            by_root.iter().map(|(root, sources)| format!("{root} ({})", sources.join(", "))).collect();
        findings.invalid(format!(
            "fork: the tree of size {size} was seen with {} roots: {}",
            by_root.len(),
            list.join("; ")
        ));
    }
    findings.set("distinct_checkpoints", roots.values().map(|by_root| by_root.len() as u64).sum());

    if seen.is_empty() {
        findings.unknown("no checkpoint was recorded during the run".to_string());
    }
    let Some(proofs) = proofs else {
        findings.unknown("no audit proofs were read after healing".to_string());
        return findings.finish();
    };
    let Some(head) = &proofs.head else {
        findings.unknown(format!("node {} did not answer the final tree head", proofs.node));
        return findings.finish();
    };
    let Some(final_root) = decode(&head.root) else {
        findings.invalid(format!("the final root {:?} is not a 32-byte hex hash", head.root));
        return findings.finish();
    };
    findings.set("final_size", head.size);
    for (size, by_root) in roots.range(head.size + 1..) {
        for root in by_root.keys() {
            findings.invalid(format!(
                "the tree shrank: a checkpoint of size {size} (root {root}) was seen, the final tree has {} leaves",
                head.size
            ));
        }
    }

    // Consistency of every checkpoint seen with the final head.
    let mut verified = 0u64;
    for record in &proofs.consistency {
        let old = &record.old;
        if old.size > head.size {
            continue; // flagged above
        }
        if let Some(error) = &record.error {
            findings.unknown(format!("no consistency proof from size {} to {}: {error}", old.size, head.size));
            continue;
        }
        if record.new.as_ref() != Some(head) {
            findings.unknown(format!(
                "the consistency proof from size {} was against {:?}, not the final head {head:?}",
                old.size, record.new
            ));
            continue;
        }
        let (Some(old_root), Some(proof)) = (decode(&old.root), decode_all(&record.proof)) else {
            findings
                .invalid(format!("the consistency proof from size {} holds a hash that is not 32 hex bytes", old.size));
            continue;
        };
        match merkle::verify_consistency(old.size, head.size, &old_root, &final_root, &proof) {
            Ok(()) => verified += 1,
            Err(error) => findings.invalid(format!(
                "the checkpoint of size {} (root {}) is not a prefix of the final tree of size {}: {error}",
                old.size, old.root, head.size
            )),
        }
    }
    let proven: std::collections::BTreeSet<&TreeHead> = proofs.consistency.iter().map(|record| &record.old).collect();
    let unproven = roots
        .range(..=head.size)
        .flat_map(|(size, by_root)| by_root.keys().map(move |root| (*size, *root)))
        .filter(|(size, root)| !proven.contains(&TreeHead { size: *size, root: root.to_string() }))
        .count();
    if unproven > 0 {
        findings.unknown(format!("{unproven} checkpoints seen have no consistency proof to the final head"));
    }
    findings.set("consistency_verified", verified);

    // Inclusion of the sampled events of the final trail.
    let finals = super::final_states(history);
    let reference = super::reference_audit(&finals);
    let by_cursor: BTreeMap<u64, _> = reference.events.iter().map(|event| (event.cursor, *event)).collect();
    let mut included = 0u64;
    for record in &proofs.inclusion {
        let cursor = record.cursor;
        if cursor == 0 || cursor > head.size {
            findings
                .invalid(format!("event {cursor} of the final trail is not in the final tree of size {}", head.size));
            continue;
        }
        if let Some(error) = &record.error {
            findings.unknown(format!("no inclusion proof of event {cursor}: {error}"));
            continue;
        }
        if record.head.as_ref() != Some(head) {
            findings.unknown(format!(
                "the inclusion proof of event {cursor} was against {:?}, not the final head",
                record.head
            ));
            continue;
        }
        let (Some(leaf), Some(proof)) = (decode(&record.leaf_hash), decode_all(&record.proof)) else {
            findings.invalid(format!("the inclusion proof of event {cursor} holds a hash that is not 32 hex bytes"));
            continue;
        };
        if let Err(error) = merkle::verify_inclusion(&leaf, cursor - 1, head.size, &proof, &final_root) {
            findings.invalid(format!("event {cursor} is not in the final tree of size {}: {error}", head.size));
            continue;
        }
        if let Some(canonical) = &record.canonical_event {
            if merkle::leaf_hash(canonical.as_bytes()) != leaf {
                findings.invalid(format!("event {cursor}: the leaf hash is not the hash of its canonical bytes"));
                continue;
            }
            if let Some(mismatch) = canonical_mismatch(canonical, cursor, by_cursor.get(&cursor).copied()) {
                findings.invalid(format!("event {cursor}: the leaf's canonical bytes {mismatch}"));
                continue;
            }
        }
        included += 1;
    }
    if proofs.inclusion.is_empty() && !reference.events.is_empty() {
        findings.unknown("no inclusion proof was read".to_string());
    }
    findings.set("inclusion_verified", included);
    findings.finish()
}

/// How the canonical bytes of the leaf at `cursor` differ from the event
/// the trail read there; `None` when they agree.
fn canonical_mismatch(canonical: &str, cursor: u64, event: Option<&crate::history::AuditEvent>) -> Option<String> {
    let Ok(value) = serde_json::from_str::<serde_json::Value>(canonical) else {
        return Some("are not JSON".to_string());
    };
    if value.get("cursor").and_then(serde_json::Value::as_u64) != Some(cursor) {
        return Some(format!("name cursor {:?}", value.get("cursor")));
    }
    let event = event?;
    let field = |name: &str| value.get(name).and_then(serde_json::Value::as_str).map(str::to_string);
    if field("execution_id") != event.execution_id {
        return Some(format!("name execution {:?}, the trail {:?}", field("execution_id"), event.execution_id));
    }
    if field("approval_id") != event.approval_id {
        return Some(format!("name approval {:?}, the trail {:?}", field("approval_id"), event.approval_id));
    }
    None
}

/// A 32-byte hash from lower-case hex.
fn decode(text: &str) -> Option<Hash> {
    hex::decode(text).ok()?.try_into().ok()
}

/// Every hash of a proof, or `None` when one is malformed.
fn decode_all(texts: &[String]) -> Option<Vec<Hash>> {
    texts.iter().map(|text| decode(text)).collect()
}
