//! The auditor's files, verified with no cluster: an export of the audit
//! trail verifies untouched, and each tampering (one byte of an event
//! changed, an event dropped, two swapped, a forked checkpoint, leaves cut
//! from the end) fails and names the leaf index or checkpoint size. An
//! event's `tlog-proof` verifies on its own.

mod support;

use gavel_core::audit_export::{self, EventProof, ExportConsistency, ExportLine, Finding};
use gavel_core::command::Retention;
use gavel_core::merkle;
use gavel_core::{SideEffect, State};
use support::*;

fn checkpoint_of(state: &State, size: u64) -> String {
    let root = state.audit_tree_root_at(size).expect("reached");
    merkle::checkpoint_body(&merkle::origin(state.audit_leaf_hash(0).as_ref()), size, &root)
}

/// What `gavel audit export` writes: the leaves, then checkpoints at
/// `sizes` with the consistency proofs between consecutive ones.
fn export(state: &State, sizes: &[u64]) -> Vec<String> {
    let mut lines: Vec<String> = (0..state.audit_tree_size())
        .map(|index| {
            let hash = state.audit_leaf_hash(index).expect("sealed");
            let event = state.event(index + 1).map(|event| {
                String::from_utf8(merkle::event_canonical_bytes(&event)).expect("canonical JSON is UTF-8")
            });
            audit_export::leaf_line(index, &hash, event)
        })
        .collect();
    for size in sizes {
        lines.push(audit_export::export_line(&ExportLine::Checkpoint(checkpoint_of(state, *size))));
    }
    for pair in sizes.windows(2) {
        let proof = state.audit_consistency_proof(pair[0], pair[1]).expect("ordered");
        let consistency =
            ExportConsistency { old_size: pair[0], new_size: pair[1], proof: proof.iter().map(hex::encode).collect() };
        lines.push(audit_export::export_line(&ExportLine::Consistency(consistency)));
    }
    lines
}

fn verify(lines: &[String]) -> Result<audit_export::ExportSummary, Vec<Finding>> {
    audit_export::verify_export(lines.iter().map(String::as_str), |_| Ok(()))
}

fn exported() -> (State, Vec<String>) {
    let mut script = Script::new();
    script.register(capability("docs.read", SideEffect::Read));
    lifecycles_and_approvals(&mut script, 12);
    let size = script.state.audit_tree_size();
    let lines = export(&script.state, &[size / 3, size / 2, size]);
    (script.state, lines)
}

#[test]
fn an_untouched_export_verifies() {
    let (state, lines) = exported();
    let summary = verify(&lines).expect("an untouched export verifies");
    assert_eq!(summary.leaves, state.audit_tree_size());
    assert_eq!(summary.events, state.audit_tree_size());
    assert_eq!(summary.checkpoints.len(), 3);
    assert_eq!(summary.consistency_proofs, 2);
}

#[test]
fn one_byte_of_an_event_changed_fails_naming_its_index() {
    let (_, mut lines) = exported();
    // Leaf 20: change one byte of the event (a digit of its timestamp).
    let line = &lines[20];
    let at = line.find("timestampMs").or_else(|| line.find("timestamp_ms")).expect("events carry their time");
    let digit = at + line[at..].find(|c: char| c.is_ascii_digit()).expect("a digit");
    let mut bytes = line.clone().into_bytes();
    bytes[digit] = if bytes[digit] == b'9' { b'8' } else { bytes[digit] + 1 };
    lines[20] = String::from_utf8(bytes).expect("still UTF-8");
    let findings = verify(&lines).expect_err("a changed event fails");
    assert_eq!(findings, vec![Finding::EventChanged { index: 20 }]);
    assert!(findings[0].to_string().contains("leaf 20 (cursor 21)"), "{}", findings[0]);
}

#[test]
fn a_dropped_event_fails_naming_its_index() {
    let (_, mut lines) = exported();
    lines.remove(17);
    let findings = verify(&lines).expect_err("a dropped event fails");
    assert_eq!(findings[0], Finding::LeafOutOfOrder { index: 17, found: 18 });
    assert!(findings.iter().any(|finding| matches!(finding, Finding::CheckpointMismatch { .. })));
}

#[test]
fn two_swapped_events_fail_naming_the_first_index() {
    let (_, mut lines) = exported();
    lines.swap(8, 9);
    let findings = verify(&lines).expect_err("swapped events fail");
    assert_eq!(findings[0], Finding::LeafOutOfOrder { index: 8, found: 9 });
    // Swapped with their index fields rewritten to look in order: the
    // events name their own cursors, and the tree no longer matches.
    let (_, mut lines) = exported();
    lines.swap(8, 9);
    lines[8] = lines[8].replace("\"index\":9,", "\"index\":8,");
    lines[9] = lines[9].replace("\"index\":8,", "\"index\":9,");
    let findings = verify(&lines).expect_err("swapped events fail");
    assert_eq!(findings[0], Finding::EventMisplaced { index: 8, named: 10 });
    assert!(findings.iter().any(|finding| matches!(finding, Finding::CheckpointMismatch { size } if *size > 9)));
}

#[test]
fn a_forked_checkpoint_fails_naming_its_size() {
    let (state, mut lines) = exported();
    let size = state.audit_tree_size();
    let forked = merkle::checkpoint_body(&merkle::origin(state.audit_leaf_hash(0).as_ref()), size / 2, &[7; 32]);
    let at = lines.iter().position(|line| line.contains(&format!("\\n{}\\n", size / 2))).expect("the checkpoint");
    lines[at] = audit_export::export_line(&ExportLine::Checkpoint(forked));
    let findings = verify(&lines).expect_err("a forked checkpoint fails");
    assert!(findings.contains(&Finding::CheckpointMismatch { size: size / 2 }), "{findings:?}");
    assert!(findings
        .iter()
        .any(|finding| matches!(finding, Finding::Inconsistent { new_size, .. } if *new_size == size / 2)));
}

#[test]
fn leaves_cut_from_the_end_fail_naming_the_checkpoint_past_them() {
    let (state, mut lines) = exported();
    let size = state.audit_tree_size();
    lines.remove(size as usize - 1);
    let findings = verify(&lines).expect_err("a cut export fails");
    assert_eq!(findings, vec![Finding::CheckpointPastLeaves { size, leaves: size - 1 }]);
}

#[test]
fn an_export_after_retention_verifies_the_kept_events_and_the_dropped_ones_hashes() {
    let mut script = Script::new();
    script.register(capability("docs.read", SideEffect::Read));
    lifecycles_and_approvals(&mut script, 6);
    script.advance(10_000_000);
    script.tick_with(Retention { records_ms: 1_000, events_ms: 1_000 });
    lifecycles_and_approvals(&mut script, 2);
    let size = script.state.audit_tree_size();
    let lines = export(&script.state, &[size]);
    let summary = verify(&lines).expect("verifies");
    assert_eq!(summary.leaves, size);
    assert!(summary.events < size, "dropped events are leaves without bodies");
    assert_eq!(summary.events, script.events().len() as u64);
}

#[test]
fn an_event_proof_verifies_on_its_own_and_not_once_changed() {
    let (state, _) = exported();
    let size = state.audit_tree_size();
    let index = 14;
    let event =
        String::from_utf8(merkle::event_canonical_bytes(&state.event(index + 1).expect("kept"))).expect("UTF-8");
    let proof = state.audit_inclusion_proof(index, size).expect("sealed");
    let bundle = EventProof {
        tlog_proof: audit_export::tlog_proof(index, &proof, &checkpoint_of(&state, size)),
        event: event.clone(),
    };
    let proven = audit_export::verify_event_proof(&bundle).expect("verifies");
    assert_eq!((proven.index, proven.checkpoint.size), (index, size));
    let changed = EventProof { event: event.replacen("\"timestamp_ms\":1", "\"timestamp_ms\":2", 1), ..bundle.clone() };
    assert_ne!(changed.event, event, "one digit of the event's time changed");
    assert!(audit_export::verify_event_proof(&changed).is_err());
    let moved = EventProof { tlog_proof: bundle.tlog_proof.replacen("index 14", "index 15", 1), ..bundle };
    assert!(audit_export::verify_event_proof(&moved).is_err());
}
