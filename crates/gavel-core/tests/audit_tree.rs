//! The audit trail's Merkle tree as the state machine keeps it: every event
//! is a leaf in the same apply (principal stamped), the root is in the state
//! hash and survives snapshots, and retention drops event bodies but never
//! their hashes, so the events it keeps still prove their inclusion.

mod support;

use gavel_core::command::{Command, Retention};
use gavel_core::merkle::{self, MemoryTree};
use gavel_core::{Caller, Principal, PrincipalKind, SideEffect, State};
use support::*;

/// The tree an auditor rebuilds from the events the state serves.
fn rebuilt(state: &State) -> MemoryTree {
    let mut tree = MemoryTree::new();
    let mut after = 0;
    loop {
        let page = state.events_after(after, 500);
        let Some(last) = page.last() else { break };
        after = last.cursor;
        page.iter().for_each(|event| tree.push(merkle::event_leaf_hash(event)));
    }
    tree
}

fn ready() -> Script {
    let mut script = Script::new();
    script.register(capability("docs.read", SideEffect::Read));
    script
}

#[test]
fn every_event_is_a_leaf_at_its_cursor_and_the_root_is_the_one_an_auditor_rebuilds() {
    let mut script = ready();
    lifecycles_and_approvals(&mut script, 40);
    let state = &script.state;
    assert_eq!(state.audit_tree_size(), state.next_cursor() - 1);
    let tree = rebuilt(state);
    assert_eq!(tree.size(), state.audit_tree_size());
    assert_eq!(state.audit_tree_root(), tree.root_at(tree.size()));
    for event in script.events().iter().step_by(7) {
        let index = event.cursor - 1;
        assert_eq!(state.audit_leaf_hash(index), Some(merkle::event_leaf_hash(event)));
        for size in [event.cursor, state.audit_tree_size()] {
            let proof = state.audit_inclusion_proof(index, size).expect("a sealed event");
            let root = state.audit_tree_root_at(size).expect("a reached size");
            assert_eq!(merkle::verify_inclusion(&merkle::event_leaf_hash(event), index, size, &proof, &root), Ok(()));
        }
    }
    // Gavel's events have ASCII keys and small integers: their canonical bytes are RFC 8785's.
    for event in script.events() {
        let json = serde_json::to_string(&event).expect("JSON");
        let jcs = gavel_core::canonical_json::canonicalize(&json).expect("JCS");
        assert_eq!(merkle::event_canonical_bytes(&event), jcs.into_bytes(), "event {}", event.cursor);
    }
    let old = state.audit_tree_size() / 3;
    let proof = state.audit_consistency_proof(old, state.audit_tree_size()).expect("ordered");
    let (old_root, new_root) = (tree.root_at(old), state.audit_tree_root());
    assert_eq!(merkle::verify_consistency(old, state.audit_tree_size(), &old_root, &new_root, &proof), Ok(()));
}

#[test]
fn tiles_are_the_tree_and_bundles_its_events_and_retention_drops_bundles_not_tiles() {
    let mut script = ready();
    lifecycles_and_approvals(&mut script, 50);
    let state = &script.state;
    let size = state.audit_tree_size();
    assert!((257..512).contains(&size), "one full level-0 tile and a partial one: {size}");
    let leaves = |range: std::ops::Range<u64>| -> Vec<u8> {
        range.flat_map(|index| state.audit_leaf_hash(index).expect("sealed")).collect()
    };
    assert_eq!(state.audit_tile(0, 0, 256), Some(leaves(0..256)));
    assert_eq!(state.audit_tile(0, 1, size - 256), Some(leaves(256..size)));
    assert_eq!(state.audit_tile(0, 1, size - 255), None, "past the tree");
    let tree = rebuilt(state);
    assert_eq!(state.audit_tile(1, 0, 1), Some(merkle::NodeSource::node(&tree, 8, 0).to_vec()));
    // A bundle: each entry a big-endian u16 length and an event's canonical bytes, hashing to its leaf.
    let bundle = state.audit_entry_bundle(1, size - 256).expect("retained");
    let mut rest = bundle.as_slice();
    for index in 256..size {
        let length = usize::from(u16::from_be_bytes([rest[0], rest[1]]));
        assert_eq!(Some(merkle::leaf_hash(&rest[2..2 + length])), state.audit_leaf_hash(index), "entry {index}");
        rest = &rest[2 + length..];
    }
    assert!(rest.is_empty());
    assert_eq!(state.audit_entry_bundle(2, 1), Err(gavel_core::tlog_tiles::BundleError::NotReached { size }));
    // Retention drops the old events: their bundle goes, their tiles stay.
    let tile = state.audit_tile(0, 0, 256);
    script.advance(10_000_000);
    script.tick_with(Retention { records_ms: 1_000, events_ms: 1_000 });
    let state = &script.state;
    let first_retained_index = state.audit_first_retained_index();
    assert!(first_retained_index >= 256, "the old events are dropped: {first_retained_index}");
    assert_eq!(state.audit_tile(0, 0, 256), tile);
    assert_eq!(
        state.audit_entry_bundle(0, 256),
        Err(gavel_core::tlog_tiles::BundleError::Pruned { first_retained_index })
    );
}

#[test]
fn a_leaf_is_the_event_with_its_principal_stamped() {
    let mut script = Script::new();
    let node = Caller::of(Principal::node(1));
    let root = Principal::new(PrincipalKind::User, "root").expect("a well-formed id");
    script.apply_by(&node, Command::BootstrapAdmin { admin: root.clone() });
    script.apply_by(&Caller::of(root.clone()), Command::RegisterCapability(capability("cap", SideEffect::Read)));
    let events = script.events();
    let registered = events.last().expect("the registration's event");
    assert_eq!(registered.principal.as_ref(), Some(&root));
    assert_eq!(script.state.audit_leaf_hash(registered.cursor - 1), Some(merkle::event_leaf_hash(registered)));
    let unstamped = gavel_core::Event { principal: None, ..registered.clone() };
    assert_ne!(script.state.audit_leaf_hash(registered.cursor - 1), Some(merkle::event_leaf_hash(&unstamped)));
}

#[test]
fn the_root_is_in_the_state_hash_and_survives_a_snapshot() {
    let mut script = ready();
    lifecycles_and_approvals(&mut script, 10);
    let restored = State::restore(&script.state.snapshot()).expect("a snapshot of this build");
    assert_eq!(restored.state_hash(), script.state.state_hash());
    assert_eq!(restored.audit_tree_root(), script.state.audit_tree_root());
    let size = restored.audit_tree_size();
    assert_eq!(restored.audit_inclusion_proof(3, size), script.state.audit_inclusion_proof(3, size));
    // One more event changes the root, and with it the state hash.
    let before = (script.state.audit_tree_root(), script.state.state_hash());
    script.submit_ok("one-more", "docs.read", "{}");
    assert_ne!(script.state.audit_tree_root(), before.0);
    assert_ne!(script.state.state_hash(), before.1);
}

#[test]
fn retention_drops_event_bodies_but_never_their_hashes_and_kept_events_still_prove_inclusion() {
    let mut script = ready();
    lifecycles_and_approvals(&mut script, 20);
    let before = rebuilt(&script.state);
    let size_before = before.size();
    script.advance(10_000_000);
    let retention = Retention { records_ms: 1_000, events_ms: 1_000 };
    script.tick_with(retention);
    // Events recorded after retention ran are kept; the old ones are gone.
    lifecycles_and_approvals(&mut script, 3);
    let kept = script.events();
    assert!(kept.first().expect("recent events are kept").cursor > size_before, "old bodies were dropped");
    let state = &script.state;
    assert_eq!(state.audit_tree_size(), state.next_cursor() - 1);
    // The dropped events' hashes are still leaves: the old root is a prefix.
    for index in [0, size_before / 2, size_before - 1] {
        assert_eq!(state.audit_leaf_hash(index), before.leaf(index));
    }
    let size = state.audit_tree_size();
    let proof = state.audit_consistency_proof(size_before, size).expect("ordered");
    let root = state.audit_tree_root();
    assert_eq!(merkle::verify_consistency(size_before, size, &before.root_at(size_before), &root, &proof), Ok(()));
    for event in &kept {
        let index = event.cursor - 1;
        let proof = state.audit_inclusion_proof(index, size).expect("sealed");
        assert_eq!(merkle::verify_inclusion(&merkle::event_leaf_hash(event), index, size, &proof, &root), Ok(()));
    }
}

#[test]
fn an_event_a_tick_records_is_sealed_even_when_retention_in_that_tick_would_drop_it_at_once() {
    let mut script = ready();
    script.apply(Command::RegisterCapability(retrying("slow.read", SideEffect::Read, 0, 10)));
    script.submit_ok("exec-1", "slow.read", "{}");
    let task = script.lease("worker-1", "slow.read");
    script.advance(10_000_000);
    // Zero retention: the tick's own lease.expired and final events are at the horizon.
    script.tick_with(Retention { records_ms: 0, events_ms: 0 });
    let state = &script.state;
    assert_eq!(state.audit_tree_size(), state.next_cursor() - 1, "every event, lease {} too", task.lease.lease_id);
    script.advance(70_000);
    script.tick_with(Retention { records_ms: 0, events_ms: 0 });
    assert_eq!(script.state.audit_tree_size(), script.state.next_cursor() - 1);
}

#[test]
fn replicas_applying_the_same_commands_have_the_same_root() {
    let mut first = ready();
    let mut second = ready();
    lifecycles_and_approvals(&mut first, 15);
    lifecycles_and_approvals(&mut second, 15);
    assert_eq!(first.state.audit_tree_root(), second.state.audit_tree_root());
    assert_eq!(first.state.state_hash(), second.state.state_hash());
}

fn node(id: u64) -> Caller {
    Caller::of(Principal::node(id))
}

fn cosign(script: &mut Script, id: u64, size: u64) -> gavel_core::Reply {
    // The first signer (the leader) also signs as the log.
    let log_signature = (id == 1).then(|| vec![9; 64]);
    let command = Command::CosignCheckpoint {
        node_id: id,
        size,
        timestamp_s: 1_700_000_000,
        signature: vec![id as u8; 64],
        log_signature,
    };
    script.apply_by(&node(id), command)
}

#[test]
fn a_checkpoint_is_published_once_a_majority_of_the_registered_keys_cosigned_it() {
    let mut script = ready();
    lifecycles_and_approvals(&mut script, 3);
    for id in 1..=3 {
        let reply =
            script.apply_by(&node(id), Command::RegisterNoteKey { node_id: id, public_key: vec![id as u8; 32] });
        assert!(matches!(reply, gavel_core::Reply::Cosigned { .. }), "{reply:?}");
    }
    let size = script.state.audit_tree_size();
    assert!(matches!(cosign(&mut script, 1, size - 2), gavel_core::Reply::Cosigned { published: false, .. }));
    // The leader moves on to a larger size before the first was published: the older one is dropped.
    assert!(matches!(cosign(&mut script, 1, size), gavel_core::Reply::Cosigned { published: false, .. }));
    assert!(matches!(cosign(&mut script, 2, size - 2), gavel_core::Reply::Cosigned { published: false, .. }));
    assert_eq!(script.state.pending_checkpoint().map(|pending| pending.signatures.len()), Some(1));
    assert!(matches!(cosign(&mut script, 3, size), gavel_core::Reply::Cosigned { published: true, .. }));
    let published = script.state.published_checkpoint().expect("published");
    assert_eq!((published.size, published.signatures.len()), (size, 2));
    assert!(script.state.pending_checkpoint().is_none());
    // The signed note names the two signers' keys over the body of that size.
    let note = script.state.signed_checkpoint().expect("a signed note");
    let body = script.state.checkpoint_body_at(size).expect("reached");
    assert!(
        note.starts_with(&format!("{body}\n\u{2014} {} ", script.state.audit_origin())),
        "the log's line first: {note}"
    );
    assert_eq!(note.lines().filter(|line| line.starts_with('\u{2014}')).count(), 3, "{note}");
    // Each node's key twice: as a log key and as its cosigner key.
    assert_eq!(script.state.note_verifier_keys().len(), 6);
    // A witness's cosignature joins the published checkpoint; one for another size does not.
    let witness = |size: u64| Command::AddWitnessCosignature {
        node_id: 1,
        size,
        witness: "witness.example/w1".to_string(),
        signature: vec![4; 76],
    };
    script.apply_by(&node(1), witness(size - 2));
    assert!(script.state.published_checkpoint().expect("published").witness_signatures.is_empty());
    script.apply_by(&node(1), witness(size));
    let note = script.state.signed_checkpoint().expect("a signed note");
    let last = note.lines().last().expect("lines");
    assert!(last.starts_with("\u{2014} witness.example/w1 BAQEBAQE") && last.ends_with("BA=="), "{note}");
    let as_user =
        script.apply_by(&Caller::of(Principal::new(PrincipalKind::User, "mallory").expect("an id")), witness(size));
    refused(as_user, gavel_core::ErrorCode::PermissionDenied);
}

#[test]
fn checkpoint_commands_are_refused_from_another_node_for_an_unknown_key_or_past_the_tree() {
    let mut script = ready();
    lifecycles_and_approvals(&mut script, 1);
    let size = script.state.audit_tree_size();
    let forged = script.apply_by(&node(2), Command::RegisterNoteKey { node_id: 1, public_key: vec![0; 32] });
    assert!(refused(forged, gavel_core::ErrorCode::PermissionDenied).message.contains("only that node"));
    let short = script.apply_by(&node(1), Command::RegisterNoteKey { node_id: 1, public_key: vec![0; 31] });
    refused(short, gavel_core::ErrorCode::InvalidArgument);
    refused(cosign(&mut script, 1, size), gavel_core::ErrorCode::FailedPrecondition);
    script.apply_by(&node(1), Command::RegisterNoteKey { node_id: 1, public_key: vec![1; 32] });
    refused(cosign(&mut script, 1, size + 1), gavel_core::ErrorCode::FailedPrecondition);
    refused(cosign(&mut script, 1, 0), gavel_core::ErrorCode::FailedPrecondition);
    let user = Caller::of(Principal::new(PrincipalKind::User, "mallory").expect("an id"));
    let as_user = script.apply_by(
        &user,
        Command::CosignCheckpoint { node_id: 1, size, timestamp_s: 1, signature: vec![0; 64], log_signature: None },
    );
    refused(as_user, gavel_core::ErrorCode::PermissionDenied);
    // One key of one registered: a quorum of one publishes at once.
    assert!(matches!(cosign(&mut script, 1, size), gavel_core::Reply::Cosigned { published: true, .. }));
}
