//! The auditor's files, verified with no cluster: an export of the audit
//! trail verifies untouched, and each tampering (one byte of an event
//! changed, an event dropped, two swapped, a forked checkpoint, leaves cut
//! from the end, an event kept by retention replaced by null) fails and
//! names the leaf index or checkpoint size, once per stretch of leaves; a
//! file in another format is refused. An event's `tlog-proof` verifies on
//! its own.

mod support;

use gavel_core::audit_export::{self, EventProof, ExportConsistency, ExportLine, Finding, RetentionStatement};
use gavel_core::command::Retention;
use gavel_core::merkle;
use gavel_core::{SideEffect, State};
use support::*;

fn checkpoint_of(state: &State, size: u64) -> String {
    let root = state.audit_tree_root_at(size).expect("reached");
    merkle::checkpoint_body(&merkle::origin(state.audit_leaf_hash(0).as_ref()), size, &root)
}

/// The lines before the leaves in [`export`]: the format line, the
/// checkpoints, the consistency proofs and the retention statement.
const HEAD_LINES: usize = 1 + 3 + 2 + 1;

/// What `gavel audit export` writes: the format line, checkpoints at
/// `sizes` (the last is the export's head) with the consistency proofs
/// between consecutive ones, the retention statement, then the leaves.
fn export(state: &State, sizes: &[u64]) -> Vec<String> {
    let mut lines = vec![audit_export::format_line()];
    for size in sizes {
        lines.push(audit_export::export_line(&ExportLine::Checkpoint(checkpoint_of(state, *size))));
    }
    for pair in sizes.windows(2) {
        let proof = state.audit_consistency_proof(pair[0], pair[1]).expect("ordered");
        let consistency =
            ExportConsistency { old_size: pair[0], new_size: pair[1], proof: proof.iter().map(hex::encode).collect() };
        lines.push(audit_export::export_line(&ExportLine::Consistency(consistency)));
    }
    let statement = RetentionStatement {
        dropped_below: state.audit_first_retained_index(),
        events_retention_ms: 1_000,
        checkpoint_size: *sizes.last().expect("a head"),
    };
    lines.push(audit_export::export_line(&ExportLine::Retention(statement)));
    lines.extend((0..state.audit_tree_size()).map(|index| {
        let hash = state.audit_leaf_hash(index).expect("sealed");
        let event = state
            .event(index + 1)
            .map(|event| String::from_utf8(merkle::event_canonical_bytes(&event)).expect("canonical JSON is UTF-8"));
        audit_export::leaf_line(index, &hash, event)
    }));
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
    let line = &lines[HEAD_LINES + 20];
    let at = line.find("timestampMs").or_else(|| line.find("timestamp_ms")).expect("events carry their time");
    let digit = at + line[at..].find(|c: char| c.is_ascii_digit()).expect("a digit");
    let mut bytes = line.clone().into_bytes();
    bytes[digit] = if bytes[digit] == b'9' { b'8' } else { bytes[digit] + 1 };
    lines[HEAD_LINES + 20] = String::from_utf8(bytes).expect("still UTF-8");
    let findings = verify(&lines).expect_err("a changed event fails");
    assert_eq!(findings, vec![Finding::EventChanged { index: 20 }]);
    assert!(findings[0].to_string().contains("leaf 20 (cursor 21)"), "{}", findings[0]);
}

#[test]
fn a_dropped_event_is_one_finding_and_the_check_goes_on_from_the_next_leaf() {
    let (state, mut lines) = exported();
    let size = state.audit_tree_size();
    lines.remove(HEAD_LINES + 17);
    let findings = verify(&lines).expect_err("a dropped event fails");
    // Once for the leaf; then each checkpoint past it cannot be recomputed.
    // Leaves after it are checked against their own index, and pass.
    assert_eq!(
        findings,
        vec![
            Finding::LeavesMissing { first: 17, next: 18 },
            Finding::CheckpointUnchecked { size: size / 3, from: 17 },
            Finding::CheckpointUnchecked { size: size / 2, from: 17 },
            Finding::CheckpointUnchecked { size, from: 17 },
        ]
    );
    assert!(findings[0].to_string().starts_with("leaf 17 (cursor 18) is missing or out of order"), "{}", findings[0]);
}

#[test]
fn a_dropped_event_with_the_later_leaves_renumbered_is_one_finding_for_the_stretch() {
    let (state, mut lines) = exported();
    let size = state.audit_tree_size();
    lines.remove(HEAD_LINES + 17);
    for (at, line) in lines.iter_mut().enumerate().skip(HEAD_LINES + 17) {
        let index = (at - HEAD_LINES) as u64;
        *line = line.replace(&format!("\"index\":{},", index + 1), &format!("\"index\":{index},"));
    }
    let findings = verify(&lines).expect_err("a renumbered export fails");
    let misplaced: Vec<&Finding> =
        findings.iter().filter(|finding| matches!(finding, Finding::EventsMisplaced { .. })).collect();
    assert_eq!(misplaced, vec![&Finding::EventsMisplaced { first: 17, last: size - 2, offset: 1 }]);
    assert!(findings.contains(&Finding::CheckpointPastLeaves { size, leaves: size - 1 }), "{findings:?}");
    assert!(findings.len() <= 4, "one finding per stretch and per checkpoint: {findings:?}");
}

#[test]
fn two_swapped_events_fail_naming_both_indices_once() {
    let (_, mut lines) = exported();
    lines.swap(HEAD_LINES + 8, HEAD_LINES + 9);
    let findings = verify(&lines).expect_err("swapped events fail");
    assert_eq!(findings[0], Finding::LeavesMissing { first: 8, next: 9 });
    assert_eq!(findings[1], Finding::LeafOutOfOrder { index: 8, after: 9 });
    assert!(findings[2..].iter().all(|finding| matches!(finding, Finding::CheckpointUnchecked { from: 8, .. })));
    // Swapped with their index fields rewritten to look in order: the
    // events name their own cursors, and the tree no longer matches.
    let (_, mut lines) = exported();
    lines.swap(HEAD_LINES + 8, HEAD_LINES + 9);
    lines[HEAD_LINES + 8] = lines[HEAD_LINES + 8].replace("\"index\":9,", "\"index\":8,");
    lines[HEAD_LINES + 9] = lines[HEAD_LINES + 9].replace("\"index\":8,", "\"index\":9,");
    let findings = verify(&lines).expect_err("swapped events fail");
    assert_eq!(findings[0], Finding::EventsMisplaced { first: 8, last: 8, offset: 1 });
    assert_eq!(findings[1], Finding::EventsMisplaced { first: 9, last: 9, offset: -1 });
    assert!(findings[0].to_string().contains("the event at leaf 8 names cursor 10, not 9"), "{}", findings[0]);
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
    lines.pop();
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
    let dropped_below = script.state.audit_first_retained_index();
    assert_eq!(summary.dropped_by_retention, dropped_below);
    assert_eq!(summary.retention.as_ref().map(|statement| statement.dropped_below), Some(dropped_below));

    // A kept event replaced by null is withheld, not dropped: just past the
    // dropped ones, and further on (each a finding of its own stretch).
    let mut withheld = lines.clone();
    for index in [dropped_below, dropped_below + 1, dropped_below + 5] {
        let at = 3 + index as usize; // the format line, one checkpoint, the statement
        let leaf = match serde_json::from_str(&withheld[at]).expect("a line") {
            ExportLine::Leaf(leaf) => leaf,
            other => panic!("not a leaf: {other:?}"),
        };
        let hash = hex::decode(&leaf.hash).expect("hex").try_into().expect("32 bytes");
        withheld[at] = audit_export::leaf_line(index, &hash, None);
    }
    let findings = verify(&withheld).expect_err("withheld events fail");
    let expected = |first, last| Finding::EventsWithheld { first, last, dropped_below: Some(dropped_below) };
    assert_eq!(
        findings,
        vec![expected(dropped_below, dropped_below + 1), expected(dropped_below + 5, dropped_below + 5)]
    );
    assert!(findings[0].to_string().contains("withheld, not dropped by retention"), "{}", findings[0]);

    // Moving the statement's bound to cover them needs a checkpoint that
    // holds it; without a statement every null is withheld.
    let unstated: Vec<String> = lines.iter().filter(|line| !line.starts_with("{\"retention\"")).cloned().collect();
    let findings = verify(&unstated).expect_err("nulls without a statement fail");
    assert_eq!(findings, vec![Finding::EventsWithheld { first: 0, last: dropped_below - 1, dropped_below: None }]);
}

#[test]
fn a_file_in_another_format_or_in_none_is_refused_before_anything_is_checked() {
    let (_, mut lines) = exported();
    lines[0] = r#"{"format":"gavel-audit-export/2"}"#.to_string();
    let findings = verify(&lines).expect_err("an unknown format is refused");
    assert_eq!(findings, vec![Finding::UnknownFormat { found: "gavel-audit-export/2".to_string() }]);
    assert!(findings[0].is_format());
    assert!(findings[0].to_string().contains("this gavel reads gavel-audit-export/1 only"), "{}", findings[0]);
    lines.remove(0);
    assert_eq!(verify(&lines).expect_err("no format line"), vec![Finding::NoFormat]);
    assert_eq!(verify(&[]).expect_err("an empty file"), vec![Finding::NoFormat]);
}

/// An export of `count` made-up events (`{"cursor":N}`), the checkpoint
/// of all of them first.
fn synthetic_export(count: u64) -> Vec<String> {
    let mut frontier = merkle::Frontier::new();
    let mut leaves = Vec::with_capacity(count as usize);
    for index in 0..count {
        let event = format!("{{\"cursor\":{}}}", index + 1);
        let hash = merkle::leaf_hash(event.as_bytes());
        frontier.push(hash, |_, _, _| {});
        leaves.push(audit_export::leaf_line(index, &hash, Some(event)));
    }
    let checkpoint = merkle::checkpoint_body("gavel-audit/synthetic", count, &frontier.root());
    let mut lines = vec![audit_export::format_line(), audit_export::export_line(&ExportLine::Checkpoint(checkpoint))];
    lines.extend(leaves);
    lines
}

#[test]
fn one_early_leaf_deleted_from_twenty_thousand_is_two_findings_not_one_per_later_leaf() {
    let mut lines = synthetic_export(20_000);
    lines.remove(2 + 3);
    let findings = verify(&lines).expect_err("a deleted leaf fails");
    assert_eq!(
        findings,
        vec![Finding::LeavesMissing { first: 3, next: 4 }, Finding::CheckpointUnchecked { size: 20_000, from: 3 }]
    );
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
