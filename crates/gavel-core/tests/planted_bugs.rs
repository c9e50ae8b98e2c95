//! Planted bugs are a value the shell passes in (`State::set_planted_bug`),
//! not state: they are in neither the snapshot nor the state hash, and each
//! acts only where it is named. (Only a `gavel` built with the `mutants`
//! feature, and the simulation's planted-bug test, ever name one; their
//! code compiles only with this crate's feature `mutants`, which its own
//! tests turn on through a dev-dependency on itself.)

mod support;

use gavel_core::mutants::Mutant;
use gavel_core::{SideEffect, State};
use support::*;

/// A write without retry config, leased once and failed retryably.
fn failed_write(planted_bug: Option<Mutant>) -> (Script, bool) {
    let mut script = Script::new();
    script.state.set_planted_bug(planted_bug);
    script.register(capability("refund", SideEffect::Write));
    script.submit_ok("exec-1", "refund", "{}");
    let task = script.lease("w1", "refund");
    let (_, retry_scheduled) = reported(script.report_err(task.lease.lease_id, "w1", "UPSTREAM_DOWN", true));
    (script, retry_scheduled)
}

/// A script running with `planted_bug` and a registered read capability `search`.
fn search_script(planted_bug: Option<Mutant>) -> Script {
    let mut script = Script::new();
    script.state.set_planted_bug(planted_bug);
    script.register(capability("search", SideEffect::Read));
    script
}

#[test]
fn the_planted_bug_is_in_neither_the_snapshot_nor_the_state_hash() {
    let (planted, _) = failed_write(Some(Mutant::DedupWrongKey));
    let (clean, _) = failed_write(None);
    assert_eq!(planted.state.snapshot(), clean.state.snapshot());
    assert_eq!(planted.state.state_hash(), clean.state.state_hash());
    let restored = State::restore(&planted.state.snapshot()).expect("the snapshot restores");
    assert_eq!(restored, clean.state, "a restored state has no planted bug until the shell sets it again");
}

#[test]
fn without_a_planted_bug_a_write_without_retry_config_is_never_retried() {
    let (_, retry_scheduled) = failed_write(None);
    assert!(!retry_scheduled);
}

#[test]
fn a_planted_bug_acts_only_where_it_is_named() {
    let (_, retry_scheduled) = failed_write(Some(Mutant::NoFencing));
    assert!(!retry_scheduled, "no-fencing does not retry writes");

    let mut script = search_script(Some(Mutant::RetryNonIdempotent));
    script.submit_ok("exec-1", "search", "{}");
    let task = script.lease("w1", "search");
    script.at(task.lease.deadline_ms);
    refused(script.report_ok(task.lease.lease_id, "w1", "{}"), gavel_core::ErrorCode::LeaseLost);
}

#[test]
fn the_planted_retry_bug_retries_a_write_without_retry_config() {
    let (script, retry_scheduled) = failed_write(Some(Mutant::RetryNonIdempotent));
    assert!(retry_scheduled, "the planted bug retries what SI-11 forbids");
    assert_eq!(script.execution("exec-1").state, gavel_core::ExecutionState::Queued);
}

#[test]
fn the_planted_fencing_bug_accepts_a_report_after_the_deadline() {
    let mut script = search_script(Some(Mutant::NoFencing));
    script.submit_ok("exec-1", "search", "{}");
    let task = script.lease("w1", "search");
    script.at(task.lease.deadline_ms + 1);
    let (execution, _) = reported(script.report_ok(task.lease.lease_id, "w1", "{}"));
    assert_eq!(execution.state, gavel_core::ExecutionState::Completed);
}

#[test]
fn the_planted_dedup_bug_recalls_a_reply_for_a_different_request() {
    use gavel_core::{Command, Reply};
    let mut script = search_script(Some(Mutant::DedupWrongKey));
    let first = script.apply_as("request-1-aaaa", Command::Submit(submission("exec-1", "search", "{}")));
    let second = script.apply_as("request-1-bbbb", Command::Submit(submission("exec-2", "search", "{}")));
    let (Reply::Execution { execution: a, .. }, Reply::Execution { execution: b, .. }) = (first, second) else {
        panic!("both submits answer with an execution")
    };
    assert_eq!(a.execution_id, b.execution_id, "the truncated key answers the second request with the first");
    assert!(script.state.execution("exec-2").is_none());
}
