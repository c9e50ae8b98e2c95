//! The audit tree's costs (issue 26's targets), as a benchmark program: STYLE
//! keeps timing claims out of tests.
//!
//! 1. **CPU share of an approval lifecycle** (target at most 5%): runs
//!    approval lifecycles (create, decide, consume) through `State::apply`,
//!    then times what sealing their events costs per event, done the way
//!    `State::seal_events` does it on the whole events the apply kept aside:
//!    their canonical bytes, the leaf hash, the frontier append, and the two cold-record
//!    digest updates a leaf's tile records cost (one SHA-256 each over the
//!    digest, key and value). The share is seal time ÷ lifecycle time; the
//!    lifecycle time already includes the tree (it is always on).
//! 2. **Proof sizes** (target O(log n)): inclusion and consistency proof
//!    lengths for trees of 10^3 … 10^6 leaves (computed on a `MemoryTree`).
//! 3. **`gavel audit verify` of 1 million events** (target at most 30 s):
//!    builds an export of 1,000,000 realistic events in memory (an approval
//!    lifecycle's events, cursors renumbered) and times
//!    `audit_export::verify_export`, which is what the command runs after
//!    reading the file.
//!
//! Run with `cargo bench -p gavel-core --bench audit_tree`;
//! `GAVEL_BENCH_VERIFY_EVENTS` overrides the million.

use std::time::{Duration, Instant};

use gavel_core::audit_export::{self, ExportLine};
use gavel_core::merkle::{self, Frontier, Hash, MemoryTree};
use gavel_core::{
    Actor, ActorKind, ApprovalStatus, Command, CreateApproval, Envelope, Event, Reply, Risk, SideEffect, State,
};
use sha2::{Digest, Sha256};

/// Approval lifecycles timed for the CPU share.
const LIFECYCLES: usize = 50_000;
/// Events in the verification measurement.
const VERIFY_EVENTS: u64 = 1_000_000;
/// A realistic leader clock (Unix milliseconds).
const START_MS: u64 = 1_760_000_000_000;

fn apply(state: &mut State, now_ms: u64, command: Command) -> Reply {
    state.apply(&Envelope { request_id: None, now_ms, caller: None, command })
}

/// Runs `count` approval lifecycles numbered from `first`; returns the time they took.
fn approval_lifecycles(state: &mut State, first: usize, count: usize) -> Duration {
    let requester = Actor::new("user-4821", ActorKind::User);
    let approver = Actor::new("user-1177", ActorKind::User);
    let started = Instant::now();
    for index in first..first + count {
        let id = format!("apr-{index:08}");
        let now_ms = START_MS + index as u64;
        let request = CreateApproval {
            id: id.clone(),
            capability_id: "orders.refund".to_string(),
            surface: "api".to_string(),
            actor: requester.clone(),
            input_json: r#"{"orderId":"ord_8f14e45f","amount":1250,"currency":"EUR"}"#.to_string(),
            input_hash: None,
            reasons: vec!["refund above 1000".to_string()],
            types: vec!["finance".to_string()],
            risk: Risk::High,
            side_effect: SideEffect::Write,
            requested_at_ms: None,
            expires_at_ms: None,
            expires_in_ms: Some(900_000),
            caller_now_ms: None,
            allow_self_approval: false,
        };
        let created = apply(state, now_ms, Command::CreateApproval(request));
        assert!(matches!(created, Reply::Approval { .. }), "create: {created:?}");
        let decide = Command::DecideApproval {
            terms_hash: None,
            approval_id: id.clone(),
            status: ApprovalStatus::Approved,
            approver: approver.clone(),
            comment: None,
            caller_now_ms: None,
        };
        let decided = apply(state, now_ms, decide);
        assert!(matches!(decided, Reply::Approval { .. }), "decide: {decided:?}");
        let consume =
            Command::ConsumeApproval { approval_id: id, execution_id: format!("exe-{index:08}"), caller_now_ms: None };
        let consumed = apply(state, now_ms, consume);
        assert!(matches!(consumed, Reply::Approval { .. }), "consume: {consumed:?}");
    }
    started.elapsed()
}

/// What sealing these events costs, the way `State::seal_events` does it
/// (the events are whole in memory at the end of the apply: no read-back).
fn seal_time(events: &[Event]) -> Duration {
    let mut frontier = Frontier::new();
    let mut digest = [0u8; 32];
    let started = Instant::now();
    for event in events {
        let leaf = merkle::event_leaf_hash(event);
        frontier.push(leaf, |_, _, _| {});
        // A leaf's tile records: its single-hash record, and on average
        // about one more (the deletion when its tile is written whole).
        for _ in 0..2 {
            let mut hasher = Sha256::new();
            hasher.update(digest);
            hasher.update([9u8; 10]);
            hasher.update(leaf);
            digest = hasher.finalize().into();
        }
    }
    std::hint::black_box((frontier.root(), digest));
    started.elapsed()
}

/// Where a seal's time goes: the canonical bytes, the hash.
fn seal_breakdown(events: &[Event]) {
    let count = events.len() as f64;
    let started = Instant::now();
    let canonical: Vec<Vec<u8>> = events.iter().map(merkle::event_canonical_bytes).collect();
    let canonicalized = started.elapsed();
    let started = Instant::now();
    let leaves: Vec<Hash> = canonical.iter().map(|bytes| merkle::leaf_hash(bytes)).collect();
    let hashed = started.elapsed();
    std::hint::black_box(leaves);
    let per = |elapsed: Duration| elapsed.as_secs_f64() * 1e6 / count;
    println!(
        "seal breakdown per event: canonical bytes {:.2} µs, leaf hash {:.2} µs ({:.0} B canonical)",
        per(canonicalized),
        per(hashed),
        canonical.iter().map(Vec::len).sum::<usize>() as f64 / count
    );
}

fn cpu_share() {
    let mut state = State::new();
    // Warm up, then time.
    approval_lifecycles(&mut state, 0, 2_000);
    let first = state.next_cursor();
    let lifecycle_time = approval_lifecycles(&mut state, 2_000, LIFECYCLES);
    let last = state.next_cursor();
    let recorded: Vec<Event> = (first..last).map(|cursor| state.event(cursor).expect("retained")).collect();
    let events = recorded.len();
    let seal = seal_time(&recorded);
    seal_breakdown(&recorded);
    let share = seal.as_secs_f64() / lifecycle_time.as_secs_f64() * 100.0;
    println!(
        "tree CPU share: {LIFECYCLES} approval lifecycles ({events} events) in {:.3} s = {:.1} µs each; \
         sealing their events {:.3} s = {:.2} µs per event, {:.1}% of the lifecycle time (target at most 5%)",
        lifecycle_time.as_secs_f64(),
        lifecycle_time.as_secs_f64() * 1e6 / LIFECYCLES as f64,
        seal.as_secs_f64(),
        seal.as_secs_f64() * 1e6 / events as f64,
        share
    );
}

fn proof_sizes() {
    let mut tree = MemoryTree::new();
    let mut next = 0u64;
    for size in [1_000u64, 10_000, 100_000, 1_000_000] {
        while next < size {
            tree.push(merkle::leaf_hash(&next.to_be_bytes()));
            next += 1;
        }
        let inclusion = merkle::inclusion_proof(&tree, size / 2, size).expect("in range").len();
        let consistency = merkle::consistency_proof(&tree, size / 3, size).expect("ordered").len();
        println!(
            "proof sizes at {size} leaves: inclusion {inclusion} hashes ({} B), consistency from {} leaves {consistency} \
             hashes ({} B); log2(n) = {:.1}",
            inclusion * 32,
            size / 3,
            consistency * 32,
            (size as f64).log2()
        );
    }
}

/// An export of `count` events: the format line, one lifecycle's events
/// repeated, each with its own cursor, then a checkpoint.
fn export_lines(count: u64) -> Vec<String> {
    let mut state = State::new();
    approval_lifecycles(&mut state, 0, 1);
    let templates: Vec<Event> = state.events_after(0, 10);
    let mut lines = Vec::with_capacity(count as usize + 2);
    lines.push(audit_export::format_line());
    let mut frontier = Frontier::new();
    for index in 0..count {
        let template = &templates[(index % templates.len() as u64) as usize];
        let event = Event { cursor: index + 1, ..template.clone() };
        let canonical = String::from_utf8(merkle::event_canonical_bytes(&event)).expect("UTF-8");
        let leaf: Hash = merkle::leaf_hash(canonical.as_bytes());
        frontier.push(leaf, |_, _, _| {});
        lines.push(audit_export::leaf_line(index, &leaf, Some(canonical)));
    }
    let checkpoint = merkle::checkpoint_body("gavel-audit/bench", count, &frontier.root());
    lines.push(audit_export::export_line(&ExportLine::Checkpoint(checkpoint)));
    lines
}

fn verify_time() {
    let count =
        std::env::var("GAVEL_BENCH_VERIFY_EVENTS").ok().and_then(|text| text.parse().ok()).unwrap_or(VERIFY_EVENTS);
    let lines = export_lines(count);
    let bytes: usize = lines.iter().map(|line| line.len() + 1).sum();
    let started = Instant::now();
    let summary = audit_export::verify_export(lines.iter().map(String::as_str), |_| Ok(())).expect("verifies");
    let elapsed = started.elapsed();
    assert_eq!(summary.leaves, count);
    println!(
        "verify: {count} events ({:.0} MB of export) in {:.2} s = {:.2} µs per event (target: 1,000,000 in at most 30 s)",
        bytes as f64 / 1e6,
        elapsed.as_secs_f64(),
        elapsed.as_secs_f64() * 1e6 / count as f64
    );
}

fn main() {
    cpu_share();
    proof_sizes();
    verify_time();
}
