//! The hot state does not grow with history: finalized executions, their
//! lease records and the audit trail live in the cold records, and once the
//! overlay is flushed into a store the hot state (what a node keeps in
//! memory and hashes) stays the same size however many executions are
//! retained.

mod support;

use gavel_core::{ColdStore, MemoryColdStore, SideEffect};
use support::{capability, Script};

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

#[test]
fn once_flushed_the_hot_state_stays_the_same_size_however_much_history_is_retained() {
    let store = MemoryColdStore::new();
    let mut script = Script::new();
    script.state.attach_cold_store(store.clone());
    script.register(capability("docs.read", SideEffect::Read));
    let flush = |script: &mut Script| {
        script.state.flush_cold(|mutations| store.write(mutations)).expect("a memory store write");
    };

    run_lifecycles(&mut script, 0, 100);
    flush(&mut script);
    let hot_at_100 = script.state.hot_snapshot().len();
    let stored_at_100 = store.len();
    run_lifecycles(&mut script, 100, 1_900);
    flush(&mut script);
    let hot_at_2000 = script.state.hot_snapshot().len();
    let whole_at_2000 = script.state.snapshot().len();

    assert_eq!(script.state.execution_count(), 2_000);
    assert_eq!(script.state.cold_pending_count(), 0);
    assert!(
        hot_at_2000 <= hot_at_100 + 64,
        "the hot state does not grow with finalized executions: {hot_at_100} B at 100, {hot_at_2000} B at 2000"
    );
    // Per lifecycle: the execution, its finalized index entry, its lease
    // record, and its three events with their three index entries.
    assert_eq!(store.len() - stored_at_100, 1_900 * 9, "nine cold records per finalized lifecycle");
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
