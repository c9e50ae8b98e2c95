//! The checkers on hand-built histories: each checker judges a history that
//! keeps its guarantee valid and one that breaks it invalid (or, for
//! coverage, unknown); a large random history built from a sequential model
//! is linearizable and a single corrupted read in it is caught; the report's
//! table and SVG are well formed.

use std::collections::{BTreeSet, HashMap};

use gavel_chaos::checker::lost_writes::HashObservations;
use gavel_chaos::checker::{
    at_most_one_consumption, audit_proofs, check_all, coverage, fencing, linearizable_approvals, liveness,
    no_lost_writes, one_final_result, policy_quorum, retry_discipline, CheckOptions, CheckResult, Verdict,
    CHECKER_NAMES,
};
use gavel_chaos::history::{
    read_history, ApprovalState, AuditEvent, AuditProofs, CapabilityInfo, CheckpointSeen, Complete, ConsistencyRecord,
    Entry, ExecutionView, FaultKind, FinalState, Header, HistoryWriter, InclusionRecord, Invoke, LeaseGrant,
    NemesisEvent, Op, OpResult, Outcome, Phase, PolicyInfo, StandingInfo, TreeHead,
};
use gavel_chaos::report::{fault_windows, run_stats, summary_table, svg_timeline};
use gavel_core::merkle::{self, MemoryTree};

// ---------------------------------------------------------------- helpers

fn capability(id: &str, side_effect: &str, idempotent: bool, max_attempts: Option<u32>) -> CapabilityInfo {
    CapabilityInfo {
        id: id.to_string(),
        side_effect: side_effect.to_string(),
        idempotent,
        max_attempts,
        requires_approval: false,
    }
}

fn header(faults: Vec<FaultKind>) -> Header {
    Header {
        seed: 7,
        namespaces: true,
        faults,
        capabilities: vec![
            capability("pay", "write", false, None),
            capability("fetch", "read", false, Some(2)),
            capability("upsert", "write", true, Some(1)),
        ],
        nodes: vec![1, 2, 3],
        policy: None,
        standing: Vec::new(),
    }
}

/// Builds a history operation by operation.
#[derive(Clone)]
struct History {
    entries: Vec<Entry>,
    next_op: u64,
    processes: HashMap<u64, u64>,
}

impl History {
    fn new() -> History {
        History::with_header(header(Vec::new()))
    }

    fn with_header(header: Header) -> History {
        History { entries: vec![Entry::Header(header)], next_op: 1, processes: HashMap::new() }
    }

    fn invoke(&mut self, process: u64, time_ms: f64, op: Op) -> u64 {
        let op_id = self.next_op;
        self.next_op += 1;
        self.processes.insert(op_id, process);
        self.entries.push(Entry::Invoke(Invoke { op_id, time_ms, process, node: 1, op }));
        op_id
    }

    fn complete(&mut self, op_id: u64, time_ms: f64, outcome: Outcome, result: Option<OpResult>, error: Option<&str>) {
        let process = *self.processes.get(&op_id).expect("complete an invoked op");
        self.entries.push(Entry::Complete(Complete {
            op_id,
            time_ms,
            process,
            outcome,
            result,
            error: error.map(str::to_string),
        }));
    }

    fn ok(&mut self, process: u64, invoke_ms: f64, complete_ms: f64, op: Op, result: Option<OpResult>) -> u64 {
        let op_id = self.invoke(process, invoke_ms, op);
        self.complete(op_id, complete_ms, Outcome::Ok, result, None);
        op_id
    }

    fn fail(&mut self, process: u64, invoke_ms: f64, complete_ms: f64, op: Op, code: &str) -> u64 {
        let op_id = self.invoke(process, invoke_ms, op);
        self.complete(op_id, complete_ms, Outcome::Fail, None, Some(code));
        op_id
    }

    fn info(&mut self, process: u64, invoke_ms: f64, complete_ms: f64, op: Op) -> u64 {
        let op_id = self.invoke(process, invoke_ms, op);
        self.complete(op_id, complete_ms, Outcome::Info, None, Some("deadline exceeded"));
        op_id
    }

    fn nemesis(&mut self, time_ms: f64, fault: FaultKind, phase: Phase, nodes: Vec<u64>, injected: bool) {
        self.entries.push(Entry::Nemesis(NemesisEvent {
            time_ms,
            fault,
            phase,
            nodes,
            injected,
            detail: String::new(),
        }));
    }

    fn fault(&mut self, start_ms: f64, stop_ms: f64, fault: FaultKind, nodes: Vec<u64>) {
        self.nemesis(start_ms, fault, Phase::Start, nodes.clone(), true);
        self.nemesis(stop_ms, fault, Phase::Stop, nodes, true);
    }

    fn finals(&mut self, states: Vec<FinalState>) {
        self.entries.extend(states.into_iter().map(Entry::Final));
    }
}

fn create(id: &str) -> Op {
    Op::ApprovalCreate { id: id.to_string() }
}

fn decide(id: &str, approve: bool) -> Op {
    Op::ApprovalDecide { id: id.to_string(), approve }
}

fn consume(id: &str, execution: &str) -> Op {
    Op::ApprovalConsume { id: id.to_string(), execution_id: execution.to_string() }
}

fn get(id: &str) -> Op {
    Op::ApprovalGet { id: id.to_string() }
}

fn exec_get(execution: &str) -> Op {
    Op::ExecGet { execution_id: execution.to_string() }
}

fn submit(execution: &str, capability: &str) -> Op {
    Op::ExecSubmit { execution_id: execution.to_string(), capability: capability.to_string() }
}

fn report(execution: &str, attempt: u32, lease_id: u64, outcome: &str, late: bool) -> Op {
    Op::WorkerReport { execution_id: execution.to_string(), attempt, lease_id, report: outcome.to_string(), late }
}

fn poll(worker: &str) -> Op {
    Op::WorkerPoll { worker_id: worker.to_string() }
}

fn seen(state: ApprovalState, by: Option<&str>) -> Option<OpResult> {
    Some(OpResult::Approval { state, consumed_by: by.map(str::to_string) })
}

fn view(execution: &str, status: &str, attempts: u32, digest: Option<&str>) -> ExecutionView {
    ExecutionView {
        execution_id: execution.to_string(),
        status: status.to_string(),
        attempts,
        final_digest: digest.map(str::to_string),
    }
}

fn grant(execution: &str, capability: &str, attempt: u32, lease_id: u64) -> Option<OpResult> {
    Some(OpResult::Lease(Some(LeaseGrant {
        execution_id: execution.to_string(),
        capability: capability.to_string(),
        attempt,
        lease_id,
        deadline_ms: 0,
    })))
}

fn event(cursor: u64, event_type: &str, execution: &str, attempt: Option<u32>, lease_id: Option<u64>) -> AuditEvent {
    AuditEvent {
        cursor,
        event_type: event_type.to_string(),
        execution_id: Some(execution.to_string()),
        approval_id: None,
        attempt,
        lease_id,
        code: None,
        principal: None,
        vote: None,
    }
}

fn node_state(
    node: u64,
    approvals: &[(&str, ApprovalState, Option<&str>)],
    executions: Vec<ExecutionView>,
    audit: Vec<AuditEvent>,
) -> FinalState {
    FinalState {
        node,
        state_hash: Some("hash".to_string()),
        applied_index: Some(100),
        leader: Some(1),
        approvals: approvals.iter().map(|(id, state, by)| (id.to_string(), *state, by.map(str::to_string))).collect(),
        executions,
        audit,
        leader_changes: 0,
    }
}

fn three_nodes(
    approvals: &[(&str, ApprovalState, Option<&str>)],
    executions: Vec<ExecutionView>,
    audit: Vec<AuditEvent>,
) -> Vec<FinalState> {
    (1..=3).map(|node| node_state(node, approvals, executions.clone(), audit.clone())).collect()
}

fn options() -> CheckOptions {
    CheckOptions::default()
}

#[track_caller]
fn assert_verdict(result: &CheckResult, expected: Verdict) {
    assert_eq!(result.verdict, expected, "{} judged {}: {:#?}", result.name, result.verdict, result.details);
}

/// create, approve, consume by `e1`: the common prefix of many tests.
fn approved(history: &mut History, id: &str) {
    history.ok(1, 0.0, 10.0, create(id), seen(ApprovalState::Pending, None));
    history.ok(2, 11.0, 20.0, decide(id, true), seen(ApprovalState::Approved, None));
}

// ---------------------------------------------------------------- linearizable_approvals

#[test]
fn concurrent_create_decide_racing_consumes_and_gets_are_linearizable() {
    let mut history = History::new();
    history.ok(1, 0.0, 10.0, create("a1"), seen(ApprovalState::Pending, None));
    // The decide overlaps the create: it linearizes after it.
    history.ok(2, 5.0, 20.0, decide("a1", true), seen(ApprovalState::Approved, None));
    // Two racing consumes: one wins, the other is refused.
    history.ok(3, 25.0, 40.0, consume("a1", "e1"), seen(ApprovalState::Consumed, Some("e1")));
    history.fail(4, 24.0, 45.0, consume("a1", "e2"), "FAILED_PRECONDITION");
    // A get overlapping the winning consume sees it not yet applied; a later one sees it.
    history.ok(5, 22.0, 35.0, get("a1"), seen(ApprovalState::Approved, None));
    history.ok(6, 41.0, 50.0, get("a1"), seen(ApprovalState::Consumed, Some("e1")));
    // A create of the same id while it exists is refused.
    history.fail(7, 30.0, 33.0, create("a1"), "ALREADY_EXISTS");
    let result = linearizable_approvals(&history.entries, &options());
    assert_verdict(&result, Verdict::Valid);
    assert_eq!(result.stat("keys"), 1);
    assert_eq!(result.stat("ops"), 7);
    assert_verdict(&at_most_one_consumption(&history.entries, &options()), Verdict::Valid);
}

#[test]
fn two_acknowledged_consumes_by_different_executions_are_invalid() {
    let mut history = History::new();
    approved(&mut history, "a1");
    history.ok(3, 30.0, 40.0, consume("a1", "e1"), seen(ApprovalState::Consumed, Some("e1")));
    history.ok(4, 35.0, 45.0, consume("a1", "e2"), seen(ApprovalState::Consumed, Some("e2")));
    let result = linearizable_approvals(&history.entries, &options());
    assert_verdict(&result, Verdict::Invalid);
    assert!(result.details[0].contains("approval a1"), "{}", result.details[0]);
    assert!(result.details[0].contains("consume(a1, by e2)"), "{}", result.details[0]);
    let result = at_most_one_consumption(&history.entries, &options());
    assert_verdict(&result, Verdict::Invalid);
    assert!(result.details[0].contains("consumed by 2 executions"), "{}", result.details[0]);
}

#[test]
fn a_get_after_a_completed_consume_that_misses_it_is_a_stale_read() {
    for stale in [ApprovalState::Approved, ApprovalState::Pending] {
        let mut history = History::new();
        approved(&mut history, "a1");
        history.ok(3, 30.0, 40.0, consume("a1", "e1"), seen(ApprovalState::Consumed, Some("e1")));
        history.ok(4, 50.0, 60.0, get("a1"), seen(stale, None));
        let result = linearizable_approvals(&history.entries, &options());
        assert_verdict(&result, Verdict::Invalid);
        assert!(result.details[0].contains("get(a1)"), "{}", result.details[0]);
    }
    // The same read overlapping the consume may precede it.
    let mut history = History::new();
    approved(&mut history, "a1");
    history.ok(3, 30.0, 40.0, consume("a1", "e1"), seen(ApprovalState::Consumed, Some("e1")));
    history.ok(4, 35.0, 60.0, get("a1"), seen(ApprovalState::Approved, None));
    assert_verdict(&linearizable_approvals(&history.entries, &options()), Verdict::Valid);
}

#[test]
fn an_info_consume_may_take_effect_to_explain_a_later_get() {
    let build = |with_info_consume: bool| {
        let mut history = History::new();
        approved(&mut history, "a1");
        if with_info_consume {
            history.info(3, 30.0, 5_000.0, consume("a1", "e1"));
        }
        history.ok(4, 100.0, 110.0, get("a1"), seen(ApprovalState::Consumed, Some("e1")));
        history
    };
    assert_verdict(&linearizable_approvals(&build(true).entries, &options()), Verdict::Valid);
    // Without the info consume nothing explains the read.
    assert_verdict(&linearizable_approvals(&build(false).entries, &options()), Verdict::Invalid);

    // An info consume may also never take effect.
    let mut history = History::new();
    approved(&mut history, "a1");
    let op = history.invoke(3, 30.0, consume("a1", "e1")); // never completed
    history.ok(4, 100.0, 110.0, get("a1"), seen(ApprovalState::Approved, None));
    assert!(op > 0);
    assert_verdict(&linearizable_approvals(&history.entries, &options()), Verdict::Valid);
}

#[test]
fn a_refused_consume_while_approved_with_nothing_concurrent_is_invalid() {
    let mut history = History::new();
    approved(&mut history, "a1");
    history.fail(3, 50.0, 60.0, consume("a1", "e1"), "FAILED_PRECONDITION");
    let result = linearizable_approvals(&history.entries, &options());
    assert_verdict(&result, Verdict::Invalid);
    assert!(result.details[0].contains("fail(FAILED_PRECONDITION)"), "{}", result.details[0]);

    // With a concurrent winning consume the refusal is explained.
    history.ok(4, 45.0, 65.0, consume("a1", "e2"), seen(ApprovalState::Consumed, Some("e2")));
    assert_verdict(&linearizable_approvals(&history.entries, &options()), Verdict::Valid);
}

#[test]
fn a_refused_decide_observes_the_state_unless_its_code_is_stateless() {
    let build = |code: &str| {
        let mut history = History::new();
        history.ok(1, 0.0, 10.0, create("a1"), seen(ApprovalState::Pending, None));
        history.fail(2, 20.0, 30.0, decide("a1", true), code);
        history
    };
    // Refused as "not pending" while it was pending: impossible.
    assert_verdict(&linearizable_approvals(&build("FAILED_PRECONDITION").entries, &options()), Verdict::Invalid);
    // Refused for self-approval: says nothing about the state.
    let history = build("APPROVAL_SELF_APPROVAL: approver equals requester");
    let result = linearizable_approvals(&history.entries, &options());
    assert_verdict(&result, Verdict::Valid);
    assert_eq!(result.stat("ops_dropped"), 1);
}

#[test]
fn an_approval_created_and_decided_unrecorded_is_checked_through_its_recorded_ops() {
    // Created by a submit of a capability that requires approval and approved
    // by an unrecorded decide: only the resume and the reads are recorded.
    let resume =
        |execution: &str| Op::ExecResume { execution_id: execution.to_string(), approval_id: "a1".to_string() };
    let mut history = History::new();
    history.ok(1, 30.0, 40.0, resume("e1"), Some(OpResult::Execution(view("e1", "queued", 0, None))));
    history.ok(3, 50.0, 60.0, get("a1"), seen(ApprovalState::Consumed, Some("e1")));
    let result = linearizable_approvals(&history.entries, &options());
    assert_verdict(&result, Verdict::Valid);
    assert_eq!(result.stat("implicit_creates"), 1);
    // A read that misses the completed resume is still a stale read.
    let mut stale = history.clone();
    stale.ok(4, 70.0, 80.0, get("a1"), seen(ApprovalState::Approved, None));
    assert_verdict(&linearizable_approvals(&stale.entries, &options()), Verdict::Invalid);
    // The resume consumed it: a later acknowledged consume by another execution is impossible.
    history.ok(4, 70.0, 80.0, consume("a1", "e2"), seen(ApprovalState::Consumed, Some("e2")));
    let result = linearizable_approvals(&history.entries, &options());
    assert_verdict(&result, Verdict::Invalid);
    assert!(result.details[0].contains("implicit"), "{}", result.details[0]);
    assert_verdict(&at_most_one_consumption(&history.entries, &options()), Verdict::Invalid);
}

#[test]
fn exhausting_the_search_budget_is_unknown_not_invalid() {
    let mut history = History::new();
    history.ok(1, 0.0, 10.0, create("a1"), seen(ApprovalState::Pending, None));
    for process in 2..12 {
        history.info(process, 5.0, 1_000.0, decide("a1", process % 2 == 0));
    }
    history.ok(20, 500.0, 510.0, get("a1"), seen(ApprovalState::Rejected, None));
    let tight = CheckOptions { max_search_steps_per_key: 3, ..CheckOptions::default() };
    let result = linearizable_approvals(&history.entries, &tight);
    assert_verdict(&result, Verdict::Unknown);
    assert!(result.details[0].contains("budget"), "{}", result.details[0]);
    assert_eq!(result.stat("keys_unknown"), 1);
    assert_verdict(&linearizable_approvals(&history.entries, &options()), Verdict::Valid);
}

/// A deterministic generator (splitmix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// A history built by running a sequential model of each approval at
/// increasing linearization points and giving each operation an interval
/// around its point, so intervals overlap; outcomes follow the model (ok
/// when the precondition holds, fail when not, sometimes info with or
/// without effect). Valid by construction.
fn random_valid_history(keys: usize, seed: u64) -> History {
    let mut rng = Rng(seed);
    let mut history = History::new();
    let mut process = 100;
    let mut final_approvals: Vec<(String, ApprovalState, Option<String>)> = Vec::new();
    for key in 0..keys {
        let id = format!("a{key}");
        let mut state = ApprovalState::Absent;
        let mut consumed_by: Option<String> = None;
        let mut point = rng.below(1_000) as f64;
        let operations = 5 + rng.below(11);
        for index in 0..operations {
            point += 1.0 + rng.below(15) as f64;
            let invoke_ms = point - rng.below(30) as f64;
            let complete_ms = point + rng.below(30) as f64;
            process += 1;
            let roll = rng.below(100);
            let op = if index == 0 || roll < 8 {
                create(&id)
            } else if roll < 35 {
                decide(&id, rng.chance(70))
            } else if roll < 65 {
                consume(&id, &format!("e{key}-{index}"))
            } else {
                get(&id)
            };
            if matches!(op, Op::ApprovalGet { .. }) {
                if rng.chance(5) {
                    history.info(process, invoke_ms, complete_ms, op);
                } else {
                    let result = seen(state, consumed_by.as_deref());
                    history.ok(process, invoke_ms, complete_ms, op, result);
                }
                continue;
            }
            let (allowed, after, by) = match &op {
                Op::ApprovalCreate { .. } => (state == ApprovalState::Absent, ApprovalState::Pending, None),
                Op::ApprovalDecide { approve, .. } => (
                    state == ApprovalState::Pending,
                    if *approve { ApprovalState::Approved } else { ApprovalState::Rejected },
                    None,
                ),
                Op::ApprovalConsume { execution_id, .. } => {
                    (state == ApprovalState::Approved, ApprovalState::Consumed, Some(execution_id.clone()))
                }
                _ => unreachable!("approval mutations only"),
            };
            if rng.chance(10) {
                if allowed && rng.chance(50) {
                    state = after;
                    consumed_by = by;
                }
                history.info(process, invoke_ms, complete_ms, op);
            } else if allowed {
                state = after;
                consumed_by = by;
                let result = seen(state, consumed_by.as_deref());
                history.ok(process, invoke_ms, complete_ms, op, result);
            } else {
                history.fail(process, invoke_ms, complete_ms, op, "FAILED_PRECONDITION");
            }
        }
        final_approvals.push((id, state, consumed_by));
    }
    let approvals: Vec<(&str, ApprovalState, Option<&str>)> =
        final_approvals.iter().map(|(id, state, by)| (id.as_str(), *state, by.as_deref())).collect();
    history.finals(three_nodes(&approvals, Vec::new(), Vec::new()));
    history
}

#[test]
fn a_large_random_valid_history_is_linearizable_and_one_corrupted_read_is_caught() {
    let keys = 2_500;
    let mut history = random_valid_history(keys, 42);
    let started = std::time::Instant::now();
    let result = linearizable_approvals(&history.entries, &options());
    eprintln!(
        "{} history entries on {keys} keys checked in {:?}: {:?}",
        history.entries.len(),
        started.elapsed(),
        result.stats
    );
    assert_verdict(&result, Verdict::Valid);
    assert_eq!(result.stat("keys"), keys as u64);
    assert_eq!(result.stat("keys_unknown"), 0);
    // The search stays near-linear on such histories: far below the per-key budget.
    assert!(result.stat("search_steps_max_per_key") < 5_000, "{:?}", result.stats);
    assert_verdict(&at_most_one_consumption(&history.entries, &options()), Verdict::Valid);
    assert_verdict(&no_lost_writes(&history.entries, &options()), Verdict::Valid);

    // Corrupt one read: it names a consumer that never consumed.
    let reads: BTreeSet<(u64, String)> = history
        .entries
        .iter()
        .filter_map(|entry| match entry {
            Entry::Invoke(Invoke { op_id, op: Op::ApprovalGet { id }, .. }) => Some((*op_id, id.clone())),
            _ => None,
        })
        .collect();
    let key = history
        .entries
        .iter_mut()
        .rev()
        .find_map(|entry| match entry {
            Entry::Complete(Complete {
                result: Some(OpResult::Approval { state: ApprovalState::Consumed, consumed_by }),
                op_id,
                ..
            }) => {
                let (_, key) = reads.iter().find(|(read, _)| read == op_id)?;
                *consumed_by = Some("intruder".to_string());
                Some(key.clone())
            }
            _ => None,
        })
        .expect("the random history has a read of a consumed approval");
    let result = linearizable_approvals(&history.entries, &options());
    assert_verdict(&result, Verdict::Invalid);
    assert_eq!(result.stat("keys_invalid"), 1);
    assert!(result.details[0].starts_with(&format!("approval {key}:")), "{key}: {}", result.details[0]);
}

// ---------------------------------------------------------------- at_most_one_consumption

#[test]
fn views_of_a_consumed_approval_must_name_its_one_consumer() {
    let build = |read_by: &str, node_3_by: &str| {
        let mut history = History::new();
        approved(&mut history, "a1");
        history.ok(3, 30.0, 40.0, consume("a1", "e1"), seen(ApprovalState::Consumed, Some("e1")));
        history.fail(4, 31.0, 41.0, consume("a1", "e2"), "FAILED_PRECONDITION");
        history.ok(5, 50.0, 60.0, get("a1"), seen(ApprovalState::Consumed, Some(read_by)));
        let mut finals = three_nodes(&[("a1", ApprovalState::Consumed, Some("e1"))], Vec::new(), Vec::new());
        finals[2].approvals[0].2 = Some(node_3_by.to_string());
        history.finals(finals);
        history
    };
    assert_verdict(&at_most_one_consumption(&build("e1", "e1").entries, &options()), Verdict::Valid);
    let result = at_most_one_consumption(&build("e2", "e1").entries, &options());
    assert_verdict(&result, Verdict::Invalid);
    assert!(result.details.iter().any(|detail| detail.contains("name e2")), "{:?}", result.details);
    // A node that disagrees with the others.
    let result = at_most_one_consumption(&build("e1", "e2").entries, &options());
    assert_verdict(&result, Verdict::Invalid);
    assert!(result.details.iter().any(|detail| detail.contains("disagree")), "{:?}", result.details);
    // A node whose list lacks the approval (not read) is no evidence either way.
    let mut unread = build("e1", "e1");
    if let Some(Entry::Final(state)) = unread.entries.last_mut() {
        state.approvals.clear();
        state.approvals.push(("a0".to_string(), ApprovalState::Pending, None));
    }
    let result = at_most_one_consumption(&unread.entries, &options());
    assert_verdict(&result, Verdict::Unknown);
    assert!(
        result.details.iter().any(|detail| detail.contains("approval a1 was not read on nodes [3]")),
        "{:?}",
        result.details
    );
}

// ---------------------------------------------------------------- one_final_result

#[test]
fn one_final_digest_per_execution_that_never_goes_back() {
    let mut history = History::new();
    history.ok(1, 0.0, 10.0, submit("e1", "pay"), Some(OpResult::Execution(view("e1", "queued", 0, None))));
    history.ok(1, 100.0, 110.0, exec_get("e1"), Some(OpResult::Execution(view("e1", "completed", 1, Some("d1")))));
    history.ok(2, 105.0, 120.0, exec_get("e1"), Some(OpResult::Execution(view("e1", "running", 1, None))));
    history.finals(three_nodes(&[], vec![view("e1", "completed", 1, Some("d1"))], Vec::new()));
    let result = one_final_result(&history.entries, &options());
    assert_verdict(&result, Verdict::Valid);
    assert_eq!(result.stat("executions_final"), 1);

    // Another digest on one node.
    let mut two_digests = history.clone();
    if let Some(Entry::Final(state)) = two_digests.entries.last_mut() {
        state.executions[0].final_digest = Some("d2".to_string());
    }
    let result = one_final_result(&two_digests.entries, &options());
    assert_verdict(&result, Verdict::Invalid);
    assert!(result.details[0].contains("2 different final results"), "{}", result.details[0]);

    // The same process reads it final, then not final.
    history.ok(1, 200.0, 210.0, exec_get("e1"), Some(OpResult::Execution(view("e1", "running", 1, None))));
    let result = one_final_result(&history.entries, &options());
    assert_verdict(&result, Verdict::Invalid);
    assert!(result.details[0].contains("process 1 saw it final"), "{}", result.details[0]);

    // Another process reads it non-final after a final read completed.
    let mut stale = History::new();
    stale.ok(1, 100.0, 110.0, exec_get("e1"), Some(OpResult::Execution(view("e1", "failed", 1, Some("d1")))));
    stale.ok(2, 120.0, 130.0, exec_get("e1"), Some(OpResult::Execution(view("e1", "queued", 1, None))));
    let result = one_final_result(&stale.entries, &options());
    assert_verdict(&result, Verdict::Invalid);
    assert!(result.details[0].contains("stale read"), "{}", result.details[0]);
}

// ---------------------------------------------------------------- fencing

#[test]
fn a_late_report_accepted_after_its_lease_expired_is_invalid() {
    let audit = vec![
        event(1, "capability.requested", "e1", None, None),
        event(2, "capability.started", "e1", Some(1), Some(10)),
        event(3, "lease.expired", "e1", Some(1), Some(10)),
        event(4, "capability.retried", "e1", Some(2), None),
        event(5, "capability.started", "e1", Some(2), Some(11)),
        event(6, "capability.completed", "e1", None, None),
    ];
    let build = |late_outcome: Outcome| {
        let mut history = History::new();
        history.ok(1, 0.0, 5.0, submit("e1", "fetch"), Some(OpResult::Execution(view("e1", "queued", 0, None))));
        history.ok(50, 10.0, 20.0, poll("w1"), grant("e1", "fetch", 1, 10));
        history.ok(51, 300.0, 310.0, poll("w2"), grant("e1", "fetch", 2, 11));
        history.ok(51, 320.0, 330.0, report("e1", 2, 11, "ok", false), Some(OpResult::Reported));
        // The stalled first worker reports late; its invoke preceded the second grant.
        match late_outcome {
            Outcome::Ok => history.ok(50, 250.0, 340.0, report("e1", 1, 10, "ok", true), Some(OpResult::Reported)),
            _ => history.fail(50, 250.0, 340.0, report("e1", 1, 10, "ok", true), "LEASE_LOST"),
        };
        history.finals(three_nodes(&[], vec![view("e1", "completed", 2, Some("d"))], audit.clone()));
        history
    };
    let result = fencing(&build(Outcome::Fail).entries, &options());
    assert_verdict(&result, Verdict::Valid);
    assert_eq!(result.stat("late_reports"), 1);
    assert_eq!(result.stat("late_rejected"), 1);
    assert_eq!(result.stat("reports_checked"), 1);

    let result = fencing(&build(Outcome::Ok).entries, &options());
    assert_verdict(&result, Verdict::Invalid);
    assert_eq!(result.stat("late_accepted"), 1);
    assert!(result.details[0].contains("lease 10 expired"), "{}", result.details[0]);
}

#[test]
fn a_report_accepted_after_a_newer_grant_is_invalid_even_without_audit() {
    let mut history = History::new();
    history.ok(50, 10.0, 20.0, poll("w1"), grant("e1", "fetch", 1, 10));
    history.ok(51, 100.0, 110.0, poll("w2"), grant("e1", "fetch", 2, 11));
    history.ok(50, 200.0, 210.0, report("e1", 1, 10, "ok", true), Some(OpResult::Reported));
    let result = fencing(&history.entries, &options());
    assert_verdict(&result, Verdict::Invalid);
    assert!(result.details[0].contains("newer lease 11"), "{}", result.details[0]);

    // An identical re-report of a report sent before the newer grant is the
    // idempotent answer, not a fencing failure (still unknown: no audit).
    let mut history = History::new();
    history.ok(50, 10.0, 20.0, poll("w1"), grant("e1", "fetch", 1, 10));
    history.info(50, 30.0, 90.0, report("e1", 1, 10, "retryable", false));
    history.ok(51, 100.0, 110.0, poll("w2"), grant("e1", "fetch", 2, 11));
    history.ok(50, 200.0, 210.0, report("e1", 1, 10, "retryable", false), Some(OpResult::Reported));
    assert_verdict(&fencing(&history.entries, &options()), Verdict::Unknown);
}

#[test]
fn audit_trails_that_differ_between_nodes_are_flagged() {
    let trail = vec![
        event(1, "capability.started", "e1", Some(1), Some(10)),
        event(2, "capability.completed", "e1", None, None),
    ];
    let mut history = History::new();
    let mut finals = three_nodes(&[], Vec::new(), trail.clone());
    finals[1].audit[1].event_type = "capability.failed".to_string();
    history.finals(finals);
    let result = fencing(&history.entries, &options());
    assert_verdict(&result, Verdict::Invalid);
    assert!(result.details[0].contains("diverge"), "{}", result.details[0]);

    let mut history = History::new();
    let mut finals = three_nodes(&[], Vec::new(), trail);
    finals[2].audit.truncate(1);
    history.finals(finals);
    let result = fencing(&history.entries, &options());
    assert_verdict(&result, Verdict::Unknown);
    assert!(result.details[0].contains("lags"), "{}", result.details[0]);
}

// ---------------------------------------------------------------- retry_discipline

#[test]
fn a_non_idempotent_write_started_twice_is_invalid() {
    let build = |pay_starts: u32, fetch_starts: u32| {
        let mut history = History::new();
        history.ok(1, 0.0, 5.0, submit("e1", "pay"), Some(OpResult::Execution(view("e1", "queued", 0, None))));
        history.ok(1, 6.0, 9.0, submit("e2", "fetch"), Some(OpResult::Execution(view("e2", "queued", 0, None))));
        history.ok(1, 10.0, 15.0, submit("e3", "upsert"), Some(OpResult::Execution(view("e3", "queued", 0, None))));
        let mut audit = Vec::new();
        let mut lease = 10;
        for (execution, starts) in [("e1", pay_starts), ("e2", fetch_starts), ("e3", 2)] {
            for attempt in 1..=starts {
                lease += 1;
                let cursor = audit.len() as u64 + 1;
                audit.push(event(cursor, "capability.started", execution, Some(attempt), Some(lease)));
            }
        }
        history.finals(three_nodes(&[], Vec::new(), audit));
        history
    };
    // A write once, a read three times (max_attempts 2), an idempotent write twice (max_attempts 1).
    let result = retry_discipline(&build(1, 3).entries, &options());
    assert_verdict(&result, Verdict::Valid);
    assert_eq!(result.stat("executions_judged"), 3);

    let result = retry_discipline(&build(2, 3).entries, &options());
    assert_verdict(&result, Verdict::Invalid);
    assert!(result.details[0].contains("execution e1 was started 2 times"), "{}", result.details[0]);
    assert!(result.details[0].contains("must never be re-run"), "{}", result.details[0]);

    let result = retry_discipline(&build(1, 4).entries, &options());
    assert_verdict(&result, Verdict::Invalid);
    assert!(result.details[0].contains("e2"), "{}", result.details[0]);
}

#[test]
fn a_second_lease_granted_for_a_non_retryable_write_is_invalid() {
    let mut history = History::new();
    history.ok(50, 10.0, 20.0, poll("w1"), grant("e1", "pay", 1, 10));
    history.ok(51, 100.0, 110.0, poll("w2"), grant("e1", "pay", 2, 11));
    let result = retry_discipline(&history.entries, &options());
    assert_verdict(&result, Verdict::Invalid);
    assert!(result.details[0].contains("granted leases"), "{}", result.details[0]);
}

// ---------------------------------------------------------------- no_lost_writes

#[test]
fn an_acknowledged_create_read_absent_on_a_node_is_a_lost_write() {
    let build = |a2_on_node_2: Option<ApprovalState>| {
        let mut history = History::new();
        history.ok(1, 0.0, 10.0, create("a1"), seen(ApprovalState::Pending, None));
        history.ok(1, 20.0, 30.0, create("a2"), seen(ApprovalState::Pending, None));
        let mut finals =
            three_nodes(&[("a1", ApprovalState::Pending, None), ("a2", ApprovalState::Pending, None)], vec![], vec![]);
        match a2_on_node_2 {
            Some(state) => finals[1].approvals[1].1 = state,
            None => finals[1].approvals.truncate(1),
        }
        history.finals(finals);
        history
    };
    let result = no_lost_writes(&build(Some(ApprovalState::Pending)).entries, &options());
    assert_verdict(&result, Verdict::Valid);
    assert_eq!(result.stat("write_checks"), 6);
    // Read and absent: lost.
    let result = no_lost_writes(&build(Some(ApprovalState::Absent)).entries, &options());
    assert_verdict(&result, Verdict::Invalid);
    assert_eq!(result.stat("lost_writes"), 1);
    assert!(result.details[0].contains("on node 2 approval a2 is absent"), "{}", result.details[0]);
    // Not in node 2's list at all: the harness may have failed to read it.
    let result = no_lost_writes(&build(None).entries, &options());
    assert_verdict(&result, Verdict::Unknown);
    assert_eq!(result.stat("not_read"), 1);

    // Differing or missing state hashes.
    let mut history = build(Some(ApprovalState::Pending));
    if let Some(Entry::Final(state)) = history.entries.last_mut() {
        state.state_hash = None;
    }
    let result = no_lost_writes(&history.entries, &options());
    assert_verdict(&result, Verdict::Invalid);
    assert!(result.details[0].contains("could not be read"), "{}", result.details[0]);
}

#[test]
fn an_acknowledged_submit_no_node_holds_is_a_lost_write() {
    let mut history = History::new();
    history.ok(1, 0.0, 5.0, submit("e1", "pay"), Some(OpResult::Execution(view("e1", "queued", 0, None))));
    history.ok(1, 6.0, 9.0, submit("e2", "pay"), Some(OpResult::Execution(view("e2", "queued", 0, None))));
    history.ok(50, 10.0, 20.0, poll("w1"), grant("e2", "pay", 1, 10));
    history.ok(50, 30.0, 40.0, report("e2", 1, 10, "ok", false), Some(OpResult::Reported));
    let mut finals =
        three_nodes(&[], vec![view("e1", "queued", 0, None), view("e2", "completed", 1, Some("d"))], vec![]);
    history.finals(finals.clone());
    assert_verdict(&no_lost_writes(&history.entries, &options()), Verdict::Valid);

    // The accepted ok report left the execution unfinished on node 3.
    let mut wrong = history.clone();
    if let Some(Entry::Final(state)) = wrong.entries.last_mut() {
        state.executions[1] = view("e2", "queued", 1, None);
    }
    let result = no_lost_writes(&wrong.entries, &options());
    assert_verdict(&result, Verdict::Invalid);
    assert!(result.details[0].contains("on node 3 execution e2 is queued, not completed"), "{}", result.details[0]);

    // e1 gone from every node.
    let mut gone = History::new();
    gone.entries = history.entries.iter().filter(|entry| !matches!(entry, Entry::Final(_))).cloned().collect();
    for state in &mut finals {
        state.executions.remove(0);
    }
    gone.finals(finals);
    let result = no_lost_writes(&gone.entries, &options());
    assert_verdict(&result, Verdict::Invalid);
    assert!(result.details[0].contains("no node holds the execution"), "{}", result.details[0]);
}

/// A history with one acknowledged create whose final states hold `pairs`
/// of (applied index, state hash), one per node.
fn with_hashes(pairs: &[(u64, &str)]) -> History {
    let mut history = History::new();
    history.ok(1, 0.0, 10.0, create("a1"), seen(ApprovalState::Pending, None));
    let mut finals = three_nodes(&[("a1", ApprovalState::Pending, None)], vec![], vec![]);
    for (state, (applied_index, state_hash)) in finals.iter_mut().zip(pairs) {
        state.applied_index = Some(*applied_index);
        state.state_hash = Some(state_hash.to_string());
    }
    history.finals(finals);
    history
}

/// `no_lost_writes` on [`with_hashes`].
fn judge_hashes(pairs: &[(u64, &str)]) -> CheckResult {
    no_lost_writes(&with_hashes(pairs).entries, &options())
}

#[test]
fn equal_state_hashes_at_one_applied_index_are_valid() {
    let result = judge_hashes(&[(8588, "h"), (8588, "h"), (8588, "h")]);
    assert_verdict(&result, Verdict::Valid);
}

#[test]
fn different_state_hashes_at_one_applied_index_are_a_divergence() {
    let result = judge_hashes(&[(8588, "h"), (8588, "h"), (8588, "other")]);
    assert_verdict(&result, Verdict::Invalid);
    assert!(result.details[0].contains("differ at applied index 8588"), "{}", result.details[0]);
    assert!(result.details[0].contains("node 3: other"), "{}", result.details[0]);
    // Still a divergence when another node was read at another index.
    let result = judge_hashes(&[(8587, "g"), (8588, "h"), (8588, "other")]);
    assert_verdict(&result, Verdict::Invalid);
}

#[test]
fn state_hashes_read_at_different_applied_indexes_are_unknown_not_invalid() {
    // Seed 4242: the ticker appended one entry between the reads of node 1 and the others.
    let result = judge_hashes(&[(8587, "g"), (8588, "h"), (8588, "h")]);
    assert_verdict(&result, Verdict::Unknown);
    assert!(result.details[0].contains("node 1 at 8587; nodes 2, 3 at 8588"), "{}", result.details[0]);
}

#[test]
fn hash_observations_pick_an_applied_index_every_node_reached() {
    // The ticker appends between reads: node 1 is read behind, then catches up.
    let mut observations = HashObservations::new(&[1, 2, 3]);
    observations.record(1, 8587, "g");
    observations.record(2, 8588, "h");
    observations.record(3, 8588, "h");
    assert_eq!(observations.agreed(), None, "no index was seen on every node yet");
    // The next round: 1 and 2 at 8589, 3 already one further.
    observations.record(1, 8589, "i");
    observations.record(2, 8589, "i");
    observations.record(3, 8590, "j");
    assert_eq!(observations.agreed(), None);
    // 1 and 2 reach 8590 too: every node was seen there, with one hash.
    observations.record(1, 8590, "j");
    observations.record(2, 8590, "j");
    assert_eq!(observations.agreed(), Some(8590));
    // An older index seen on every node later does not replace the highest.
    observations.record(1, 8588, "h");
    assert_eq!(observations.agreed(), Some(8590));
    let chosen = observations.chosen();
    assert_eq!(chosen.len(), 3);
    assert!(chosen.values().all(|pair| *pair == (8590, "j".to_string())), "{chosen:?}");
}

#[test]
fn hash_observations_report_a_divergence_at_a_common_index_or_else_the_last_reads() {
    let mut diverged = HashObservations::new(&[1, 2, 3]);
    diverged.record(1, 10, "a");
    diverged.record(2, 10, "a");
    diverged.record(3, 10, "b");
    diverged.record(3, 11, "c");
    assert_eq!(diverged.agreed(), None);
    let chosen = diverged.chosen();
    assert_eq!(chosen.get(&3), Some(&(10, "b".to_string())), "the divergence at 10 is what gets recorded");
    assert_eq!(chosen.get(&1), Some(&(10, "a".to_string())));

    let mut apart = HashObservations::new(&[1, 2, 3]);
    apart.record(1, 10, "a");
    apart.record(2, 11, "b");
    apart.record(3, 12, "c");
    apart.record(1, 13, "d");
    let chosen = apart.chosen();
    assert_eq!(chosen.get(&1), Some(&(13, "d".to_string())), "no common index: each node's last read");
    assert_eq!(chosen.get(&3), Some(&(12, "c".to_string())));
}

// ---------------------------------------------------------------- liveness

#[test]
fn an_unfinished_execution_fails_liveness_unless_allowed() {
    let mut history = History::new();
    history.finals(three_nodes(
        &[],
        vec![
            view("e1", "completed", 1, Some("d")),
            view("e2", "queued", 0, None),
            view("e3", "pending_approval", 0, None),
        ],
        vec![],
    ));
    let result = liveness(&history.entries, &options());
    assert_verdict(&result, Verdict::Invalid);
    assert_eq!(result.anomalies, 1);
    assert!(result.details[0].contains("execution e2 never finished"), "{}", result.details[0]);
    let allowing = CheckOptions { allowed_unfinished: BTreeSet::from(["e2".to_string()]), ..CheckOptions::default() };
    assert_verdict(&liveness(&history.entries, &allowing), Verdict::Valid);

    // Nodes disagreeing on the leader.
    if let Some(Entry::Final(state)) = history.entries.last_mut() {
        state.leader = Some(2);
    }
    let result = liveness(&history.entries, &allowing);
    assert_verdict(&result, Verdict::Invalid);
    assert!(result.details[0].contains("do not agree on a leader"), "{}", result.details[0]);
}

// ---------------------------------------------------------------- coverage

#[test]
fn missing_coverage_is_unknown_never_invalid() {
    let build = |pauses: usize, late_reports: usize| {
        let mut history = History::with_header(header(vec![FaultKind::KillLeader, FaultKind::Pause]));
        history.fault(100.0, 200.0, FaultKind::KillLeader, vec![1]);
        history.fault(300.0, 400.0, FaultKind::KillLeader, vec![2]);
        for index in 0..pauses {
            let start = 500.0 + index as f64 * 200.0;
            history.fault(start, start + 100.0, FaultKind::Pause, vec![3]);
        }
        for index in 0..late_reports {
            let time = 1_000.0 + index as f64;
            history.fail(60, time, time + 0.5, report("e1", 1, 10, "ok", true), "LEASE_LOST");
        }
        let mut finals = three_nodes(&[], vec![], vec![]);
        finals[0].leader_changes = 3;
        history.finals(finals);
        history
    };
    let lenient = CheckOptions { min_late_reports: 2, ..CheckOptions::default() };
    let result = coverage(&build(2, 2).entries, &lenient);
    assert_verdict(&result, Verdict::Valid);
    assert_eq!(result.stat("injected.kill_leader"), 2);
    assert_eq!(result.stat("leader_changes"), 3);

    let result = coverage(&build(1, 2).entries, &lenient);
    assert_verdict(&result, Verdict::Unknown);
    assert!(result.details[0].contains("pause was injected 1 times"), "{}", result.details[0]);

    let result = coverage(&build(2, 1).entries, &lenient);
    assert_verdict(&result, Verdict::Unknown);
    assert!(result.details[0].contains("1 late reports"), "{}", result.details[0]);

    let mut history = build(2, 2);
    history.nemesis(2_000.0, FaultKind::PartitionLeader, Phase::Start, vec![1], false);
    let result = coverage(&history.entries, &lenient);
    assert_verdict(&result, Verdict::Unknown);
    assert_eq!(result.stat("not_injected"), 1);

    // Leader changes counted by the harness below the minimum.
    let mut history = build(2, 2);
    for entry in &mut history.entries {
        if let Entry::Final(state) = entry {
            state.leader_changes = 1;
        }
    }
    assert_verdict(&coverage(&history.entries, &lenient), Verdict::Unknown);
    let counted = CheckOptions { leader_changes: 2, ..lenient };
    assert_verdict(&coverage(&history.entries, &counted), Verdict::Valid);
}

// ---------------------------------------------------------------- check_all and the report

/// A small complete run: faults, approvals, one execution with a late report.
fn small_run() -> History {
    let mut history = History::with_header(header(vec![FaultKind::KillLeader]));
    approved(&mut history, "a1");
    history.ok(3, 30.0, 40.0, consume("a1", "e1"), seen(ApprovalState::Consumed, Some("e1")));
    history.ok(1, 50.0, 60.0, submit("e1", "fetch"), Some(OpResult::Execution(view("e1", "queued", 0, None))));
    history.ok(50, 70.0, 80.0, poll("w1"), grant("e1", "fetch", 1, 10));
    history.fail(50, 1_500.0, 1_510.0, report("e1", 1, 10, "ok", true), "LEASE_LOST");
    history.ok(51, 1_600.0, 1_610.0, poll("w2"), grant("e1", "fetch", 2, 11));
    history.ok(51, 1_700.0, 1_710.0, report("e1", 2, 11, "ok", false), Some(OpResult::Reported));
    history.ok(1, 1_800.0, 1_810.0, exec_get("e1"), Some(OpResult::Execution(view("e1", "completed", 2, Some("d")))));
    history.info(4, 2_000.0, 4_000.0, get("a1"));
    history.fault(500.0, 1_200.0, FaultKind::KillLeader, vec![1]);
    history.fault(2_500.0, 3_100.0, FaultKind::KillLeader, vec![2]);
    history.nemesis(3_300.0, FaultKind::WorkerStall, Phase::Start, vec![], true);
    let audit = vec![
        event(1, "capability.requested", "e1", None, None),
        event(2, "capability.started", "e1", Some(1), Some(10)),
        event(3, "lease.expired", "e1", Some(1), Some(10)),
        event(4, "capability.retried", "e1", Some(2), None),
        event(5, "lease.late_report_rejected", "e1", Some(1), Some(10)),
        event(6, "capability.started", "e1", Some(2), Some(11)),
        event(7, "capability.completed", "e1", None, None),
    ];
    let mut finals =
        three_nodes(&[("a1", ApprovalState::Consumed, Some("e1"))], vec![view("e1", "completed", 2, Some("d"))], audit);
    finals[0].leader_changes = 2;
    let trail = finals[0].audit.clone();
    history.finals(finals);
    history.entries.extend(audit_evidence(&trail, &[0, 2, 5, 7]));
    history
}

#[test]
fn check_all_runs_every_checker_and_invalid_dominates() {
    let lenient = CheckOptions { min_late_reports: 1, min_fault_count: 1, ..CheckOptions::default() };
    let history = small_run();
    let report = check_all(&history.entries, &lenient);
    let names: Vec<&str> = report.results.iter().map(|result| result.name.as_str()).collect();
    assert_eq!(names, CHECKER_NAMES.to_vec());
    assert_eq!(report.verdict, Verdict::Valid, "{report:#?}");

    // Coverage short: unknown overall.
    let report = check_all(&history.entries, &CheckOptions::default());
    assert_eq!(report.result("coverage").map(|result| result.verdict), Some(Verdict::Unknown));
    assert_eq!(report.verdict, Verdict::Unknown);

    // A second acknowledged consume: invalid dominates the unknown coverage.
    let mut broken = small_run();
    broken.ok(5, 45.0, 48.0, consume("a1", "e9"), seen(ApprovalState::Consumed, Some("e9")));
    let report = check_all(&broken.entries, &CheckOptions::default());
    assert_eq!(report.verdict, Verdict::Invalid);
    assert_eq!(report.result("coverage").map(|result| result.verdict), Some(Verdict::Unknown));
    assert_eq!(Verdict::Unknown.combine(Verdict::Invalid), Verdict::Invalid);
    assert_eq!(Verdict::Valid.combine(Verdict::Unknown), Verdict::Unknown);
}

#[test]
fn a_history_read_back_from_jsonl_checks_the_same() {
    let history = small_run();
    let directory = tempfile::tempdir().expect("temporary directory");
    let path = directory.path().join("history.jsonl");
    let mut writer = HistoryWriter::create(&path).expect("create the history file");
    for entry in &history.entries {
        writer.write(entry).expect("write an entry");
    }
    drop(writer);
    let read = read_history(&path).expect("read the history back");
    assert_eq!(read, history.entries);
    assert_eq!(check_all(&read, &options()), check_all(&history.entries, &options()));
}

#[test]
fn run_stats_count_outcomes_faults_and_late_reports() {
    let history = small_run();
    let stats = run_stats(&history.entries);
    assert_eq!(stats.operations, 10);
    assert_eq!((stats.ok, stats.fail, stats.info), (8, 1, 1));
    assert_eq!(stats.faults_injected.get(&FaultKind::KillLeader), Some(&2));
    assert_eq!(stats.faults_injected.get(&FaultKind::WorkerStall), Some(&1));
    assert_eq!((stats.late_reports, stats.late_rejected, stats.late_accepted), (1, 1, 0));
    assert_eq!(stats.leader_changes, 2);
    assert_eq!(stats.duration_ms, 4_000.0);
    assert_eq!(stats.by_op.get("worker_report"), Some(&2));
    // The figures serialize (fault kinds as map keys) and read back.
    let json = serde_json::to_string(&stats).expect("serialize the run figures");
    assert!(json.contains(r#""kill_leader":2"#), "{json}");
    let read: gavel_chaos::report::RunStats = serde_json::from_str(&json).expect("read the run figures back");
    assert_eq!(read, stats);
}

#[test]
fn the_summary_table_lists_every_checker_and_the_run_figures() {
    let mut history = small_run();
    history.ok(5, 45.0, 48.0, consume("a1", "e9"), seen(ApprovalState::Consumed, Some("e9")));
    let report = check_all(&history.entries, &CheckOptions::default());
    let table = summary_table(&report, &run_stats(&history.entries));
    eprintln!("{table}");
    for name in CHECKER_NAMES {
        assert!(table.lines().any(|line| line.starts_with(name)), "{name} missing from\n{table}");
    }
    assert!(table.lines().any(|line| line.starts_with("OVERALL") && line.ends_with("INVALID")), "{table}");
    assert!(table.contains("late reports: 1 sent: rejected 1, accepted 0"), "{table}");
    assert!(table.contains("faults injected: kill_leader 2, worker_stall 1"), "{table}");
    assert!(table.contains("consumed by 2 executions"), "{table}");
}

/// Checks tags nest (a small XML well-formedness check: the SVG has no
/// comments, CDATA or processing instructions).
fn assert_well_formed(svg: &str) {
    let mut open: Vec<String> = Vec::new();
    let mut rest = svg;
    while let Some(start) = rest.find('<') {
        let end = rest[start..].find('>').expect("every tag closes") + start;
        let tag = &rest[start + 1..end];
        if let Some(name) = tag.strip_prefix('/') {
            assert_eq!(open.pop().as_deref(), Some(name.trim()), "mismatched </{name}>");
        } else if !tag.ends_with('/') {
            let name = tag.split_whitespace().next().expect("a tag name");
            open.push(name.to_string());
        }
        assert!(!rest[..start].contains('>'), "stray '>' in text");
        rest = &rest[end + 1..];
    }
    assert!(open.is_empty(), "unclosed tags: {open:?}");
}

#[test]
fn the_svg_timeline_is_well_formed_and_shades_every_fault_window() {
    let history = small_run();
    let windows = fault_windows(&history.entries);
    assert_eq!(windows.len(), 3);
    assert!(windows[0].healed && windows[1].healed && !windows[2].healed);
    assert_eq!(windows[2].stop_ms, 4_000.0);
    let svg = svg_timeline(&history.entries, 900, 500);
    if let Ok(path) = std::env::var("GAVEL_CHAOS_SVG_OUT") {
        std::fs::write(path, &svg).expect("write the SVG for a look");
    }
    assert!(svg.starts_with("<svg"), "{svg}");
    assert!(svg.trim_end().ends_with("</svg>"));
    assert_well_formed(&svg);
    assert_eq!(svg.matches(r#"<rect class="fault-window""#).count(), windows.len());
    assert!(svg.contains("kill_leader") && svg.contains("worker_stall"), "legend names the faults");
    assert!(svg.contains("time (s)") && svg.contains("latency (ms, log)"));
    assert!(svg.contains(r#"data-series="ok ops/s""#));
    // An empty history still draws axes.
    let empty = svg_timeline(&[], 400, 300);
    assert_well_formed(&empty);
    assert_eq!(empty.matches("fault-window\"").count(), 0);
}

#[test]
fn a_report_sent_after_the_lease_deadline_must_not_be_accepted() {
    use gavel_chaos::history::*;
    let header = Entry::Header(Header {
        seed: 1,
        namespaces: false,
        faults: vec![],
        capabilities: vec![],
        nodes: vec![1],
        policy: None,
        standing: Vec::new(),
    });
    let report = |late: bool, outcome: Outcome| {
        vec![
            Entry::Invoke(Invoke {
                op_id: 1,
                time_ms: 0.0,
                process: 1,
                node: 1,
                op: Op::WorkerReport {
                    execution_id: "e".to_string(),
                    attempt: 1,
                    lease_id: 1,
                    report: "ok".to_string(),
                    late,
                },
            }),
            Entry::Complete(Complete {
                op_id: 1,
                time_ms: 1.0,
                process: 1,
                outcome,
                result: (outcome == Outcome::Ok).then_some(OpResult::Reported),
                error: (outcome == Outcome::Fail).then(|| "LEASE_LOST".to_string()),
            }),
        ]
    };
    let options = gavel_chaos::checker::CheckOptions::default();
    let judge = |entries: Vec<Entry>| {
        let mut history = vec![header.clone()];
        history.extend(entries);
        gavel_chaos::checker::fencing(&history, &options).verdict
    };
    assert_eq!(judge(report(true, Outcome::Ok)), gavel_chaos::checker::Verdict::Invalid);
    assert_ne!(judge(report(true, Outcome::Fail)), gavel_chaos::checker::Verdict::Invalid);
}

// ---------------------------------------------------------------- audit proofs

/// The canonical bytes the tests give the event (what the checker reads:
/// cursor, execution and approval).
fn canonical(event: &AuditEvent) -> String {
    serde_json::json!({
        "cursor": event.cursor,
        "kind": event.event_type,
        "execution_id": event.execution_id,
        "approval_id": event.approval_id,
    })
    .to_string()
}

fn tree_head(tree: &MemoryTree, size: u64) -> TreeHead {
    TreeHead { size, root: hex::encode(tree.root_at(size)) }
}

fn hexes(hashes: &[merkle::Hash]) -> Vec<String> {
    hashes.iter().map(hex::encode).collect()
}

/// What a faithful run records over `trail`: a checkpoint at each of
/// `seen_sizes` during the run, then the final head over the whole trail,
/// a consistency proof from each checkpoint and an inclusion proof of each
/// event, all from a real RFC 6962 tree.
fn audit_evidence(trail: &[AuditEvent], seen_sizes: &[u64]) -> Vec<Entry> {
    let mut tree = MemoryTree::new();
    for event in trail {
        tree.push(merkle::leaf_hash(canonical(event).as_bytes()));
    }
    let size = tree.size();
    let head = tree_head(&tree, size);
    let mut entries: Vec<Entry> = seen_sizes
        .iter()
        .enumerate()
        .map(|(step, &seen)| {
            let TreeHead { size, root } = tree_head(&tree, seen);
            Entry::Checkpoint(CheckpointSeen { time_ms: 100.0 * step as f64, node: 1 + step as u64 % 3, size, root })
        })
        .collect();
    let consistency = seen_sizes
        .iter()
        .map(|&seen| ConsistencyRecord {
            old: tree_head(&tree, seen),
            proof: hexes(&merkle::consistency_proof(&tree, seen, size).expect("a consistency proof")),
            new: Some(head.clone()),
            error: None,
        })
        .collect();
    let inclusion = trail
        .iter()
        .map(|event| InclusionRecord {
            cursor: event.cursor,
            leaf_hash: hex::encode(tree.leaf(event.cursor - 1).expect("the leaf")),
            proof: hexes(&merkle::inclusion_proof(&tree, event.cursor - 1, size).expect("an inclusion proof")),
            head: Some(head.clone()),
            canonical_event: Some(canonical(event)),
            error: None,
        })
        .collect();
    entries.push(Entry::AuditProofs(AuditProofs { node: 1, head: Some(head), consistency, inclusion }));
    entries
}

/// A small run's finals followed by faithful audit evidence.
fn audited(seen_sizes: &[u64]) -> Vec<Entry> {
    let trail: Vec<AuditEvent> =
        (1..=9).map(|cursor| event(cursor, "capability.started", &format!("e{}", cursor % 4), Some(1), None)).collect();
    let mut history = History::new();
    history.finals(three_nodes(&[], Vec::new(), trail.clone()));
    history.entries.extend(audit_evidence(&trail, seen_sizes));
    history.entries
}

fn proofs_of(entries: &mut [Entry]) -> &mut AuditProofs {
    entries
        .iter_mut()
        .find_map(|entry| match entry {
            Entry::AuditProofs(proofs) => Some(proofs),
            _ => None,
        })
        .expect("the history has audit proofs")
}

#[test]
fn audit_proofs_of_a_faithful_tree_are_valid() {
    let entries = audited(&[0, 1, 3, 4, 8, 9]);
    let result = audit_proofs(&entries, &options());
    assert_verdict(&result, Verdict::Valid);
    assert_eq!(result.stat("consistency_verified"), 6);
    assert_eq!(result.stat("inclusion_verified"), 9);
    assert_eq!(result.stat("final_size"), 9);
}

#[test]
fn a_forked_checkpoint_is_invalid() {
    let mut entries = audited(&[3, 5]);
    // A second head of size 5 whose root is not the tree's.
    entries.push(Entry::Checkpoint(CheckpointSeen { time_ms: 1.0, node: 2, size: 5, root: hex::encode([7u8; 32]) }));
    let result = audit_proofs(&entries, &options());
    assert_verdict(&result, Verdict::Invalid);
    assert!(result.details.iter().any(|detail| detail.contains("fork")), "{result:#?}");
}

#[test]
fn a_checkpoint_that_is_not_a_prefix_of_the_final_tree_is_invalid() {
    let mut entries = audited(&[3, 6]);
    // The run saw size 6 with another root (the leaves before it were rewritten).
    let forged = hex::encode([9u8; 32]);
    for entry in entries.iter_mut() {
        if let Entry::Checkpoint(checkpoint) = entry {
            if checkpoint.size == 6 {
                checkpoint.root = forged.clone();
            }
        }
    }
    let proofs = proofs_of(&mut entries);
    proofs.consistency[1].old.root = forged;
    let result = audit_proofs(&entries, &options());
    assert_verdict(&result, Verdict::Invalid);
    assert!(result.details.iter().any(|detail| detail.contains("not a prefix")), "{result:#?}");
}

#[test]
fn a_tree_that_shrank_is_invalid() {
    let mut entries = audited(&[4]);
    entries.push(Entry::Checkpoint(CheckpointSeen { time_ms: 2.0, node: 3, size: 12, root: hex::encode([1u8; 32]) }));
    let result = audit_proofs(&entries, &options());
    assert_verdict(&result, Verdict::Invalid);
    assert!(result.details.iter().any(|detail| detail.contains("shrank")), "{result:#?}");
}

#[test]
fn an_event_missing_from_the_tree_or_with_a_bad_path_is_invalid() {
    // A bad audit path.
    let mut entries = audited(&[4]);
    proofs_of(&mut entries).inclusion[2].proof[0] = hex::encode([3u8; 32]);
    let result = audit_proofs(&entries, &options());
    assert_verdict(&result, Verdict::Invalid);
    assert!(result.details.iter().any(|detail| detail.contains("event 3 is not in the final tree")), "{result:#?}");

    // An acknowledged event past the final size.
    let mut entries = audited(&[4]);
    proofs_of(&mut entries).inclusion[0].cursor = 40;
    assert_verdict(&audit_proofs(&entries, &options()), Verdict::Invalid);

    // A tree whose leaf 5 names another execution than the trail read there.
    let trail: Vec<AuditEvent> =
        (1..=6).map(|cursor| event(cursor, "capability.started", "e1", Some(1), None)).collect();
    let mut forged = trail.clone();
    forged[4].execution_id = Some("e-other".to_string());
    let mut history = History::new();
    history.finals(three_nodes(&[], Vec::new(), trail));
    history.entries.extend(audit_evidence(&forged, &[2]));
    let result = audit_proofs(&history.entries, &options());
    assert_verdict(&result, Verdict::Invalid);
    assert!(result.details.iter().any(|detail| detail.contains("name execution")), "{result:#?}");

    // Canonical bytes that are not the leaf's.
    let mut entries = audited(&[4]);
    proofs_of(&mut entries).inclusion[1].canonical_event = Some("{}".to_string());
    let result = audit_proofs(&entries, &options());
    assert_verdict(&result, Verdict::Invalid);
    assert!(result.details.iter().any(|detail| detail.contains("canonical bytes")), "{result:#?}");
}

#[test]
fn missing_audit_evidence_is_unknown() {
    // No checkpoint seen, no proofs.
    let mut history = History::new();
    history.finals(three_nodes(&[], Vec::new(), vec![event(1, "capability.started", "e1", Some(1), None)]));
    assert_verdict(&audit_proofs(&history.entries, &options()), Verdict::Unknown);

    // A proof that could not be read.
    let mut entries = audited(&[2, 4]);
    let record = &mut proofs_of(&mut entries).consistency[0];
    record.error = Some("unavailable".to_string());
    record.proof.clear();
    assert_verdict(&audit_proofs(&entries, &options()), Verdict::Unknown);

    // A checkpoint seen without a consistency proof.
    let mut entries = audited(&[2, 4]);
    proofs_of(&mut entries).consistency.pop();
    assert_verdict(&audit_proofs(&entries, &options()), Verdict::Unknown);

    // No final head.
    let mut entries = audited(&[2]);
    proofs_of(&mut entries).head = None;
    assert_verdict(&audit_proofs(&entries, &options()), Verdict::Unknown);
}

// ---------------------------------------------------------------- policy_quorum

/// An audit event about an approval (`vote`: approve or deny for a vote).
fn approval_event(
    cursor: u64,
    event_type: &str,
    approval: &str,
    principal: Option<&str>,
    vote: Option<&str>,
) -> AuditEvent {
    AuditEvent {
        approval_id: Some(approval.to_string()),
        execution_id: None,
        principal: principal.map(str::to_string),
        vote: vote.map(str::to_string),
        ..event(cursor, event_type, "", None, None)
    }
}

/// A policy of 2 of {alice, bob, carol} over `q-*`, a standing approval
/// `s1` of 2 uses; `trail` is every node's final audit trail and
/// `resumes` the ok resumes (approval, execution).
fn policy_run(trail: Vec<AuditEvent>, resumes: &[(&str, &str)]) -> Vec<Entry> {
    let mut header = header(Vec::new());
    header.policy = Some(PolicyInfo {
        approval_id_prefix: "q-".to_string(),
        k: 2,
        eligible: ["user:alice", "user:bob", "user:carol"].iter().map(|name| name.to_string()).collect(),
    });
    header.standing = vec![StandingInfo { approval_id: "s1".to_string(), uses_max: 2 }];
    let mut history = History::with_header(header);
    for (step, (approval, execution)) in resumes.iter().enumerate() {
        let op = Op::ExecResume { execution_id: execution.to_string(), approval_id: approval.to_string() };
        history.ok(1, 100.0 * step as f64, 100.0 * step as f64 + 5.0, op, None);
    }
    history.finals(three_nodes(&[], Vec::new(), trail));
    history.entries
}

fn quorum_trail(voters: &[&str]) -> Vec<AuditEvent> {
    let mut trail: Vec<AuditEvent> = voters
        .iter()
        .enumerate()
        .map(|(step, voter)| approval_event(step as u64 + 1, "approval.vote_cast", "q-1", Some(voter), Some("approve")))
        .collect();
    trail.push(approval_event(voters.len() as u64 + 1, "capability.approved", "q-1", None, None));
    trail
}

#[test]
fn a_quorum_met_and_a_standing_approval_within_its_uses_are_valid() {
    let mut trail = quorum_trail(&["user:alice", "user:bob"]);
    trail.push(AuditEvent {
        approval_id: Some("s1".to_string()),
        ..event(4, "approval.standing_use_spent", "x1", None, None)
    });
    let entries = policy_run(trail, &[("q-1", "e1"), ("s1", "x1"), ("s1", "x2")]);
    let result = policy_quorum(&entries, &options());
    assert_verdict(&result, Verdict::Valid);
    assert_eq!(result.stat("governed_approvals_consumed"), 1);
}

#[test]
fn an_approval_consumed_without_its_quorum_is_invalid() {
    // One eligible voter twice, one outsider, one deny: 1 of 2.
    let mut trail = quorum_trail(&["user:alice", "user:alice", "user:mallory"]);
    trail.insert(0, approval_event(10, "approval.vote_cast", "q-1", Some("user:bob"), Some("deny")));
    trail.sort_by_key(|event| event.cursor);
    let result = policy_quorum(&policy_run(trail, &[("q-1", "e1")]), &options());
    assert_verdict(&result, Verdict::Invalid);
    assert!(result.details[0].contains("1 distinct eligible approving votes"), "{result:#?}");

    // Votes after the approval do not count.
    let mut trail = quorum_trail(&["user:alice"]);
    trail.push(approval_event(9, "approval.vote_cast", "q-1", Some("user:bob"), Some("approve")));
    assert_verdict(&policy_quorum(&policy_run(trail, &[("q-1", "e1")]), &options()), Verdict::Invalid);

    // Consumed with no approval in the trail at all.
    let trail = vec![approval_event(1, "approval.vote_cast", "q-1", Some("user:alice"), Some("approve"))];
    assert_verdict(&policy_quorum(&policy_run(trail, &[("q-1", "e1")]), &options()), Verdict::Invalid);
}

#[test]
fn a_standing_approval_spent_beyond_its_uses_is_invalid() {
    let trail = quorum_trail(&["user:alice", "user:carol"]);
    let entries = policy_run(trail.clone(), &[("q-1", "e1"), ("s1", "x1"), ("s1", "x2"), ("s1", "x3")]);
    let result = policy_quorum(&entries, &options());
    assert_verdict(&result, Verdict::Invalid);
    assert_eq!(result.stat("standing_overspent"), 1);

    // The third use seen only in the trail counts too.
    let mut trail = trail;
    trail.push(AuditEvent {
        approval_id: Some("s1".to_string()),
        ..event(5, "approval.standing_use_spent", "x3", None, None)
    });
    let entries = policy_run(trail, &[("q-1", "e1"), ("s1", "x1"), ("s1", "x2")]);
    assert_verdict(&policy_quorum(&entries, &options()), Verdict::Invalid);
}

#[test]
fn a_policy_never_exercised_or_a_vote_removed_by_a_grant_change_is_unknown() {
    assert_verdict(&policy_quorum(&policy_run(Vec::new(), &[]), &options()), Verdict::Unknown);
    let mut trail = quorum_trail(&["user:alice", "user:bob"]);
    trail.insert(1, approval_event(0, "approval.vote_removed", "q-1", None, None));
    assert_verdict(&policy_quorum(&policy_run(trail, &[("q-1", "e1")]), &options()), Verdict::Unknown);
}

#[test]
fn a_withdrawn_vote_does_not_count_unless_cast_again() {
    let vote = |cursor, voter| approval_event(cursor, "approval.vote_cast", "q-1", Some(voter), Some("approve"));
    let withdrawn = |cursor, voter| approval_event(cursor, "approval.vote_withdrawn", "q-1", Some(voter), None);
    let approved = |cursor| approval_event(cursor, "capability.approved", "q-1", None, None);
    // alice votes, withdraws; bob approves: 1 standing vote of 2.
    let trail = vec![vote(1, "user:alice"), withdrawn(2, "user:alice"), vote(3, "user:bob"), approved(4)];
    let result = policy_quorum(&policy_run(trail, &[("q-1", "e1")]), &options());
    assert_verdict(&result, Verdict::Invalid);
    assert!(result.details[0].contains("1 distinct eligible approving votes"), "{result:#?}");

    // alice votes again before bob: 2 of 2.
    let trail = vec![
        vote(1, "user:alice"),
        withdrawn(2, "user:alice"),
        vote(3, "user:alice"),
        vote(4, "user:bob"),
        approved(5),
    ];
    assert_verdict(&policy_quorum(&policy_run(trail, &[("q-1", "e1")]), &options()), Verdict::Valid);
}

#[test]
fn the_requesters_vote_never_counts_towards_the_quorum() {
    // The workload principal created q-1 and is not in the header's eligible
    // list: a node that counted its vote approved with 1 eligible vote.
    let trail = quorum_trail(&["service:chaos-workload", "user:carol"]);
    let result = policy_quorum(&policy_run(trail, &[("q-1", "e1")]), &options());
    assert_verdict(&result, Verdict::Invalid);
}

#[test]
fn a_standing_approval_spent_within_its_uses_is_not_a_double_consumption() {
    let trail = quorum_trail(&["user:alice", "user:bob"]);
    let entries = policy_run(trail, &[("q-1", "e1"), ("s1", "x1"), ("s1", "x2")]);
    assert_verdict(&at_most_one_consumption(&entries, &options()), Verdict::Valid);
    assert_verdict(&linearizable_approvals(&entries, &options()), Verdict::Valid);
    assert_verdict(&policy_quorum(&entries, &options()), Verdict::Valid);

    // The same two resumes of a one-use approval are a double consumption.
    let trail = quorum_trail(&["user:alice", "user:bob"]);
    let entries = policy_run(trail, &[("q-1", "e1"), ("q-1", "e2")]);
    assert_verdict(&at_most_one_consumption(&entries, &options()), Verdict::Invalid);
    assert_verdict(&linearizable_approvals(&entries, &options()), Verdict::Invalid);
}
