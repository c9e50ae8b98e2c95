//! The hot state does not grow with history: finalized executions, their
//! lease records, closed approvals and the audit trail live in the cold
//! records, and once the
//! overlay is flushed into a store the hot state (what a node keeps in
//! memory and hashes) stays the same size however many executions are
//! retained.

mod support;

use std::sync::Arc;

use gavel_core::command::{Command, Retention, Submit};
use gavel_core::{
    ApprovalFilter, ApprovalStatus, ColdStore, ColdTable, ErrorCode, ListOrder, MemoryColdStore, SideEffect,
};
use support::*;

/// Runs `count` lifecycles (submit, lease, complete) numbered from `first`.
fn run_lifecycles(script: &mut Script, first: usize, count: usize) {
    for index in first..first + count {
        let id = format!("exec-{index:06}");
        script.submit_ok(&id, "docs.read", r#"{"query":"raft"}"#);
        let task = script.lease("worker-1", "docs.read");
        script.report_ok(task.lease.lease_id, "worker-1", r#"{"hits":3}"#);
        script.advance(10);
    }
}

/// A script whose state keeps its cold records in a memory store.
fn tiered() -> (Script, Arc<MemoryColdStore>) {
    let store = MemoryColdStore::new();
    let mut script = Script::new();
    script.state.attach_cold_store(store.clone());
    (script, store)
}

/// Flushes the script's cold records into `store`.
fn flush(script: &mut Script, store: &MemoryColdStore) {
    script.state.flush_cold(|mutations| store.write(mutations)).expect("a memory store write");
}

#[test]
fn once_flushed_the_hot_state_stays_the_same_size_however_much_history_is_retained() {
    let (mut script, store) = tiered();
    script.register(capability("docs.read", SideEffect::Read));

    run_lifecycles(&mut script, 0, 100);
    flush(&mut script, &store);
    // The audit tree's frontier (one 32-byte hash per bit set in the
    // number of events) is the one hot part that grows with history, as
    // O(log n): it is taken out of the comparison.
    let frontier_bytes = |script: &Script| 32 * script.state.audit_tree_size().count_ones() as usize;
    let hot_at_100 = script.state.hot_snapshot().len() - frontier_bytes(&script);
    let stored_at_100 = store.len();
    let tiles_at_100 = store.range(ColdTable::AuditTiles, &[], usize::MAX).len();
    run_lifecycles(&mut script, 100, 1_900);
    flush(&mut script, &store);
    let hot_at_2000 = script.state.hot_snapshot().len() - frontier_bytes(&script);
    let tiles_at_2000 = store.range(ColdTable::AuditTiles, &[], usize::MAX).len();
    let whole_at_2000 = script.state.snapshot().len();

    assert_eq!(script.state.execution_count(), 2_000);
    assert_eq!(script.state.cold_pending_count(), 0);
    assert!(
        hot_at_2000 <= hot_at_100 + 64,
        "the hot state does not grow with finalized executions: {hot_at_100} B at 100, {hot_at_2000} B at 2000"
    );
    // Per lifecycle: the execution, its finalized index entry, its listing
    // index entry, its lease record, and its three events with their three
    // index entries.
    assert_eq!(
        store.len() - stored_at_100 - (tiles_at_2000 - tiles_at_100),
        1_900 * 10,
        "ten cold records per finalized lifecycle, besides the audit tree's tiles"
    );
    let oldest = script.execution("exec-000000");
    assert!(oldest.result.is_some(), "the oldest execution reads back from the store");
    assert_eq!(
        script.event_types("exec-000000"),
        vec!["capability.requested", "capability.started", "capability.completed"]
    );
    eprintln!(
        "hot state {hot_at_2000} B at 2000 retained; whole export {whole_at_2000} B = {} B per execution",
        whole_at_2000 / 2_000
    );
}

#[test]
fn a_failed_flush_forgets_nothing_and_the_next_one_writes_the_same_records() {
    let (mut script, store) = tiered();
    script.register(capability("docs.read", SideEffect::Read));
    run_lifecycles(&mut script, 0, 50);
    let pending = script.state.cold_pending_count();
    let hash = script.state.state_hash();
    let mut offered = Vec::new();
    let failed = script.state.flush_cold(|mutations| {
        offered = mutations.to_vec();
        Err(gavel_core::ColdStoreError::Write("disk full".to_string()))
    });
    assert!(failed.is_err());
    assert_eq!(offered.len(), pending, "every pending write was offered");
    assert_eq!(script.state.cold_pending_count(), pending, "a failed flush keeps every write");
    assert_eq!(script.state.state_hash(), hash);
    assert!(store.is_empty());
    assert!(script.execution("exec-000000").result.is_some(), "reads still see the overlay");

    let mut written = Vec::new();
    let flushed = script.state.flush_cold(|mutations| {
        written = mutations.to_vec();
        store.write(mutations)
    });
    assert_eq!(flushed.expect("a memory store write"), pending);
    assert_eq!(written, offered, "the retry writes the same records in the same order");
    assert_eq!((script.state.cold_pending_count(), store.len()), (0, pending));
    assert_eq!(script.state.state_hash(), hash);
}

/// Closes `count` approvals numbered from `first`, in turn rejected,
/// consumed and cancelled, and leaves one open (pending) per ten.
fn close_approvals(script: &mut Script, first: usize, count: usize) {
    for index in first..first + count {
        let id = format!("apr-{index:06}");
        script.create_approval(approval_request(&id));
        match index % 10 {
            9 => {}
            n if n % 3 == 0 => drop(approval_of(script.decide(&id, ApprovalStatus::Rejected, bob()))),
            n if n % 3 == 1 => {
                approval_of(script.decide(&id, ApprovalStatus::Approved, bob()));
                approval_of(script.consume(&id, &format!("exec-of-{id}")));
            }
            _ => drop(approval_of(script.apply(Command::CancelApproval { approval_id: id, caller_now_ms: None }))),
        }
        script.advance(10);
    }
}

/// Every approval listed, in pages of `page` under `filter`, oldest first.
fn list_all(script: &Script, filter: &ApprovalFilter, page: usize) -> Vec<String> {
    list_in(script, filter, page, ListOrder::OldestFirst)
}

/// Every approval listed in `order`, in pages of `page` under `filter`.
fn list_in(script: &Script, filter: &ApprovalFilter, page: usize, order: ListOrder) -> Vec<String> {
    let mut ids = Vec::new();
    let mut cursor = None;
    loop {
        let listed = script.state.list_approvals(filter, script.now_ms, cursor.as_ref(), page, order);
        let Some(last) = listed.last() else { return ids };
        cursor = Some((last.requested_at_ms, last.id.clone()));
        ids.extend(listed.iter().map(|approval| approval.id.clone()));
    }
}

#[test]
fn once_flushed_closed_approvals_leave_the_hot_state_and_read_back_the_same() {
    let (mut script, store) = tiered();
    let mut never_flushed = Script::new();

    close_approvals(&mut script, 0, 100);
    close_approvals(&mut never_flushed, 0, 100);
    flush(&mut script, &store);
    let hot_at_100 = script.state.hot_snapshot().len();
    close_approvals(&mut script, 100, 1_000);
    close_approvals(&mut never_flushed, 100, 1_000);
    // Half flushed, half in the overlay: reads merge the two.
    let hot_with_overlay = script.state.hot_snapshot().len();
    flush(&mut script, &store);
    close_approvals(&mut script, 1_100, 20);
    close_approvals(&mut never_flushed, 1_100, 20);
    let hot_at_1120 = script.state.hot_snapshot().len();

    // 112 open approvals at 1120 against 10 at 100 (and 110 at 1100): only
    // the open ones grow the hot state, not the 1010 closed ones.
    let per_open = (hot_with_overlay - hot_at_100) / 100;
    assert!(
        hot_at_1120 <= hot_at_100 + 102 * per_open + 1024,
        "the hot state grows only with open approvals: {hot_at_100} B at 100, {hot_at_1120} B at 1120"
    );
    assert_eq!(script.state.state_hash(), never_flushed.state.state_hash(), "flushing changes no hash");
    let closed_rows: usize = [ColdTable::Approvals, ColdTable::ApprovalsByTime, ColdTable::ApprovalsClosed]
        .into_iter()
        .map(|table| store.range(table, &[], usize::MAX).len())
        .sum();
    assert_eq!(closed_rows, 3 * 990, "three cold rows per flushed closed approval (110 in 1100 are open)");

    for id in ["apr-000000", "apr-000001", "apr-000002", "apr-000009", "apr-001105", "apr-001119"] {
        assert_eq!(script.state.approval(id), never_flushed.state.approval(id), "{id} reads the same");
    }
    let rejected = refused(script.decide("apr-000000", ApprovalStatus::Approved, bob()), ErrorCode::FailedPrecondition);
    assert_eq!(rejected.message, "approval apr-000000 is not pending (status: rejected)");
    let consumed = refused(script.consume("apr-000001", "exec-again"), ErrorCode::FailedPrecondition);
    assert_eq!(
        consumed.message,
        "approval apr-000001 cannot be consumed (status: consumed, consumed by exec-of-apr-000001)"
    );
    let details = consumed.approval.expect("the refusal carries the approval's state");
    assert_eq!(details.consumed_by_execution_id.as_deref(), Some("exec-of-apr-000001"));
    let cancel = Command::CancelApproval { approval_id: "apr-000002".to_string(), caller_now_ms: None };
    let cancelled = refused(script.apply(cancel), ErrorCode::FailedPrecondition);
    assert_eq!(cancelled.message, "approval apr-000002 is not pending (status: cancelled)");

    let counts = script.state.counts(script.now_ms).approvals_by_status;
    assert_eq!(counts, never_flushed.state.counts(never_flushed.now_ms).approvals_by_status);
    assert_eq!(counts.values().sum::<usize>(), 1_120);
    for filter in [
        ApprovalFilter::default(),
        ApprovalFilter { status: Some(ApprovalStatus::Consumed), ..ApprovalFilter::default() },
        ApprovalFilter { status: Some(ApprovalStatus::Pending), ..ApprovalFilter::default() },
    ] {
        let whole = list_all(&script, &filter, 1_200);
        assert_eq!(whole, list_all(&never_flushed, &filter, 1_200), "{filter:?}");
        assert_eq!(whole, list_all(&script, &filter, 7), "pages of 7 make the same list under {filter:?}");
        let mut reversed = whole.clone();
        reversed.reverse();
        assert_eq!(list_in(&script, &filter, 7, ListOrder::NewestFirst), reversed, "newest first under {filter:?}");
        assert_eq!(list_in(&never_flushed, &filter, 1_200, ListOrder::NewestFirst), reversed, "{filter:?}");
    }
    assert_eq!(list_all(&script, &ApprovalFilter::default(), 1_200).len(), 1_120);

    // Retention drops the closed ones (their cold rows too) and keeps the open ones.
    script.advance(10_000);
    never_flushed.advance(10_000);
    let retention = Retention { records_ms: 1_000, events_ms: 1_000 };
    script.tick_with(retention);
    never_flushed.tick_with(retention);
    flush(&mut script, &store);
    assert_eq!(script.state.state_hash(), never_flushed.state.state_hash());
    for table in [ColdTable::Approvals, ColdTable::ApprovalsByTime, ColdTable::ApprovalsClosed] {
        assert_eq!(store.range(table, &[], usize::MAX), Vec::new(), "retention empties {table:?}");
    }
    assert!(script.state.approval("apr-000000").is_none());
    assert_eq!(list_all(&script, &ApprovalFilter::default(), 1_200).len(), 112, "the open ones stay");
}

/// Bytes (keys and values) per table of a memory store.
fn bytes_by_table(store: &MemoryColdStore) -> Vec<(ColdTable, usize)> {
    ColdTable::ALL
        .into_iter()
        .map(|table| {
            let entries = store.range(table, &[], usize::MAX);
            (table, entries.iter().map(|(key, value)| key.len() + value.len()).sum())
        })
        .collect()
}

/// What one retained finalized execution (submit, lease, complete, with
/// its three audit events) costs in the cold records, keys and values, and
/// in the hot state: measured over 1000 lifecycles after 100 that set the
/// baseline (the capability, the first cursors). The bound is the figure
/// this encoding reaches, so a regression of the encoding fails here.
#[test]
fn bytes_per_retained_finalized_execution_stay_within_the_compact_encoding() {
    const MEASURED: usize = 1_000;
    let (mut script, store) = tiered();
    script.register(capability("docs.read", SideEffect::Read));
    run_lifecycles(&mut script, 0, 100);
    flush(&mut script, &store);
    let (hot_before, cold_before) = (script.state.hot_snapshot().len(), bytes_by_table(&store));
    run_lifecycles(&mut script, 100, MEASURED);
    flush(&mut script, &store);
    let (hot_after, cold_after) = (script.state.hot_snapshot().len(), bytes_by_table(&store));

    let mut cold_per_execution = 0.0;
    let mut figures = Vec::new();
    for ((table, before), (_, after)) in cold_before.iter().zip(&cold_after) {
        let per_execution = (after - before) as f64 / MEASURED as f64;
        cold_per_execution += per_execution;
        figures.push(format!("{table:?} {per_execution:.1}"));
    }
    let hot_per_execution = hot_after.saturating_sub(hot_before) as f64 / MEASURED as f64;
    eprintln!(
        "cold records: {cold_per_execution:.1} B per finalized execution ({}); hot state: {hot_per_execution:.2} B",
        figures.join(", ")
    );
    assert!(hot_per_execution < 0.1, "the hot state does not grow per execution: {hot_per_execution} B");
    assert!(cold_per_execution <= COLD_BYTES_PER_EXECUTION_MAX, "{cold_per_execution} B per execution");
}

/// The cold bytes (keys and values) one lifecycle of the test above takes at
/// most: 420 for the records, 19 for the listing index entry (8 bytes of
/// time and the id), and about 75 for the audit tree (three leaf hashes of
/// 32 bytes in whole tiles, and the partial tiles' entries).
const COLD_BYTES_PER_EXECUTION_MAX: f64 = 520.0;

#[test]
fn events_that_outlive_their_execution_keep_its_ids_and_hash_even_when_the_id_is_reused() {
    let (mut script, store) = tiered();
    script.register(capability("docs.read", SideEffect::Read));
    script.register(capability("docs.write", SideEffect::Read));
    let submit = Submit { correlation_id: Some("corr-1".to_string()), ..submission("exec-1", "docs.read", "[1]") };
    execution_of(script.apply(Command::Submit(submit)));
    let task = script.lease("worker-1", "docs.read");
    script.report_ok(task.lease.lease_id, "worker-1", "{}");
    flush(&mut script, &store);
    let events = script.state.execution_events("exec-1", 0, 10);
    assert_eq!(events.len(), 3);
    for event in &events {
        assert_eq!(event.capability_id.as_deref(), Some("docs.read"));
        assert_eq!(event.correlation_id.as_deref(), Some("corr-1"));
        assert_eq!(event.input_hash, Some(script.execution("exec-1").input_hash.clone()));
    }
    let trail = script.state.events_after(0, 100);

    // The execution is dropped, its events are kept: they read the same.
    script.advance(10_000);
    script.tick_with(Retention { records_ms: 1_000, events_ms: 1_000_000 });
    assert!(script.state.execution("exec-1").is_none());
    assert_eq!(script.state.events_after(0, 100), trail);
    // A new execution under the same id does not change the old events.
    script.submit_ok("exec-1", "docs.write", "[2]");
    flush(&mut script, &store);
    assert_eq!(script.state.events_after(0, 100)[..trail.len()], trail[..]);
    let newest = script.state.events_after(0, 100).pop().expect("the new submit's event");
    assert_eq!(newest.capability_id.as_deref(), Some("docs.write"));
    assert_eq!(newest.input_hash, Some(script.execution("exec-1").input_hash.clone()));
    let restored = gavel_core::State::restore(&script.state.snapshot()).expect("restore");
    assert_eq!(restored.events_after(0, 100), script.state.events_after(0, 100));
}
