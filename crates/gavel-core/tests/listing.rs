//! Listing executions a page at a time (issue #40): newest first by
//! default, key-set pages on (submitted_at, id) that neither skip nor
//! repeat a record that existed when the first page was read, whatever is
//! submitted in between, across hot and finalized (cold, flushed or not)
//! records, and a bounded scan per page.

mod support;

use std::sync::Arc;

use gavel_core::command::Retention;
use gavel_core::{
    ColdStore, ColdTable, ExecutionFilter, ExecutionState, ListOrder, MemoryColdStore, Page, SideEffect, State,
};
use support::*;

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

/// The ids of one page, and where the next continues.
fn page_ids(
    state: &State,
    filter: &ExecutionFilter,
    after: Option<&(u64, String)>,
    limit: usize,
    order: ListOrder,
) -> (Vec<String>, Option<(u64, String)>) {
    let Page { records, next } = state.list_executions(None, filter, after, limit, order);
    (records.iter().map(|execution| execution.execution_id.clone()).collect(), next)
}

/// Every id, page by page.
fn all_ids(state: &State, filter: &ExecutionFilter, limit: usize, order: ListOrder) -> Vec<String> {
    let mut ids = Vec::new();
    let mut after = None;
    loop {
        let (page, next) = page_ids(state, filter, after.as_ref(), limit, order);
        ids.extend(page);
        match next {
            Some(next) => after = Some(next),
            None => return ids,
        }
    }
}

/// Submits `count` executions of `capability` named `prefix-NN`, two per
/// millisecond (so ties on the time are broken by the id), cancelling
/// (finalizing) every third one.
fn submit_batch(script: &mut Script, prefix: &str, capability: &str, count: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for index in 0..count {
        let id = format!("{prefix}-{index:02}");
        script.submit_ok(&id, capability, "{}");
        if index % 3 == 0 {
            execution_of(script.cancel(&id));
        }
        if index % 2 == 1 {
            script.advance(1);
        }
        ids.push(id);
    }
    ids
}

#[test]
fn executions_list_newest_first_by_default_across_hot_and_finalized_records() {
    let (mut script, store) = tiered();
    script.register(capability("docs.read", SideEffect::Read));
    let mut submitted = submit_batch(&mut script, "a", "docs.read", 20);
    flush(&mut script, &store);
    submitted.extend(submit_batch(&mut script, "b", "docs.read", 11));
    let filter = ExecutionFilter::default();
    let newest_first: Vec<String> = submitted.iter().rev().cloned().collect();

    assert_eq!(ListOrder::default(), ListOrder::NewestFirst);
    for limit in [1, 4, 7, 31, 100] {
        assert_eq!(all_ids(&script.state, &filter, limit, ListOrder::NewestFirst), newest_first, "limit {limit}");
        assert_eq!(all_ids(&script.state, &filter, limit, ListOrder::OldestFirst), submitted, "limit {limit}");
    }
    // The last page names no next one; a full page before it does.
    let (page, next) = page_ids(&script.state, &filter, None, 31, ListOrder::NewestFirst);
    assert_eq!((page.len(), next), (31, None));
    let (_, next) = page_ids(&script.state, &filter, None, 30, ListOrder::NewestFirst);
    assert!(next.is_some(), "a page that stops before the end names the next");

    // A restored state (every cold record unflushed) lists the same.
    let restored = State::restore(&script.state.snapshot()).expect("restore");
    assert_eq!(all_ids(&restored, &filter, 6, ListOrder::NewestFirst), newest_first);
}

#[test]
fn a_page_boundary_neither_skips_nor_repeats_records_when_executions_are_submitted_between_pages() {
    let (mut script, store) = tiered();
    script.register(capability("docs.read", SideEffect::Read));
    let existing = submit_batch(&mut script, "old", "docs.read", 24);
    flush(&mut script, &store);
    let filter = ExecutionFilter::default();

    for order in [ListOrder::NewestFirst, ListOrder::OldestFirst] {
        let mut seen = Vec::new();
        let (first, mut next) = page_ids(&script.state, &filter, None, 5, order);
        seen.extend(first);
        let mut round = 0;
        while let Some(after) = next.take() {
            // Between every two pages, more executions arrive: some at the
            // boundary's own millisecond, some later.
            round += 1;
            submit_batch(&mut script, &format!("new-{order:?}-{round}"), "docs.read", 3);
            let (page, following) = page_ids(&script.state, &filter, Some(&after), 5, order);
            seen.extend(page);
            next = following;
        }
        let mut unique = seen.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), seen.len(), "{order:?}: no record is listed twice");
        for id in &existing {
            assert!(seen.contains(id), "{order:?}: {id}, which existed at the first page, is listed");
        }
        // The records that existed keep their relative order.
        let listed_existing: Vec<&String> = seen.iter().filter(|id| existing.contains(id)).collect();
        let expected: Vec<&String> = match order {
            ListOrder::NewestFirst => existing.iter().rev().collect(),
            ListOrder::OldestFirst => existing.iter().collect(),
        };
        assert_eq!(listed_existing, expected, "{order:?}");
    }
}

#[test]
fn execution_filters_compose_on_state_capability_and_requester() {
    let mut script = Script::new();
    script.register(capability("docs.read", SideEffect::Read));
    script.register(capability("docs.write", SideEffect::Read));
    let reads = submit_batch(&mut script, "r", "docs.read", 6);
    let mut bobs = Vec::new();
    for index in 0..4 {
        let mut submit = submission(&format!("w-{index}"), "docs.write", "{}");
        submit.actor = bob();
        execution_of(script.apply(gavel_core::Command::Submit(submit)));
        bobs.push(format!("w-{index}"));
    }
    let newest = |ids: Vec<&String>| ids.into_iter().rev().cloned().collect::<Vec<String>>();
    let cancelled = ExecutionFilter { state: Some(ExecutionState::Cancelled), ..ExecutionFilter::default() };
    assert_eq!(
        all_ids(&script.state, &cancelled, 2, ListOrder::NewestFirst),
        newest(reads.iter().enumerate().filter(|(index, _)| index % 3 == 0).map(|(_, id)| id).collect())
    );
    let writes = ExecutionFilter { capability_id: Some("docs.write".into()), ..ExecutionFilter::default() };
    assert_eq!(all_ids(&script.state, &writes, 3, ListOrder::NewestFirst), newest(bobs.iter().collect()));
    let by_bob = ExecutionFilter { requester: Some(bob().id), ..ExecutionFilter::default() };
    assert_eq!(all_ids(&script.state, &by_bob, 3, ListOrder::NewestFirst), newest(bobs.iter().collect()));
    let queued_reads = ExecutionFilter {
        state: Some(ExecutionState::Queued),
        capability_id: Some("docs.read".into()),
        requester: Some(alice().id),
    };
    assert_eq!(
        all_ids(&script.state, &queued_reads, 10, ListOrder::NewestFirst),
        newest(reads.iter().enumerate().filter(|(index, _)| index % 3 != 0).map(|(_, id)| id).collect())
    );
}

#[test]
fn retention_drops_executions_from_the_listing_and_its_index() {
    let (mut script, store) = tiered();
    script.register(capability("docs.read", SideEffect::Read));
    let submitted = submit_batch(&mut script, "x", "docs.read", 9);
    flush(&mut script, &store);
    script.advance(10_000);
    script.tick_with(Retention { records_ms: 1_000, events_ms: 1_000_000 });
    flush(&mut script, &store);
    // The finalized ones are gone; the non-final ones stay listed.
    let kept: Vec<String> =
        submitted.iter().enumerate().filter(|(index, _)| index % 3 != 0).map(|(_, id)| id.clone()).collect();
    assert_eq!(all_ids(&script.state, &ExecutionFilter::default(), 4, ListOrder::OldestFirst), kept);
    assert_eq!(store.range(ColdTable::ExecutionsBySubmission, &[], usize::MAX).len(), kept.len());
}

#[test]
fn a_page_looks_at_a_bounded_number_of_records_and_ends_early_with_a_token() {
    let mut script = Script::new();
    script.register(capability("docs.read", SideEffect::Read));
    script.register(capability("docs.write", SideEffect::Read));
    script.submit_ok("the-write", "docs.write", "{}");
    script.advance(1);
    for index in 0..gavel_core::limits::LIST_SCANNED_MAX {
        script.submit_ok(&format!("read-{index:05}"), "docs.read", "{}");
    }
    let writes = ExecutionFilter { capability_id: Some("docs.write".into()), ..ExecutionFilter::default() };
    let (page, next) = page_ids(&script.state, &writes, None, 50, ListOrder::NewestFirst);
    assert!(page.is_empty(), "the first page looked at the newest reads only");
    let (_, id) = next.as_ref().expect("a page stopped by its scan bound names the next");
    assert!(id.is_empty(), "it continues past a millisecond and names no execution: {next:?}");
    let (page, next) = page_ids(&script.state, &writes, next.as_ref(), 50, ListOrder::NewestFirst);
    assert_eq!((page, next), (vec!["the-write".to_string()], None));
}
