//! Linearizability of the approval registers: a Wing & Gong search with
//! Lowe's just-in-time linearization and memoization, run per approval id
//! (approvals are independent registers, so checking each alone is enough).
//!
//! The model of one approval: `absent --create--> pending --decide(approve)-->
//! approved --consume(e)--> consumed by e`, `pending --decide(reject)-->
//! rejected`. Operations and their outcomes:
//!
//! - `ok` create/decide/consume (and `ok` `ExecResume`, which consumes its
//!   approval for its execution) take effect exactly once between invoke and
//!   completion; their precondition must hold there (create: absent, decide:
//!   pending, consume: approved) and the returned state (and `consumed_by`),
//!   when the result is an approval view, must equal the model's state after.
//! - `ok` get: the returned state and `consumed_by` must equal the model's
//!   state at some point between invoke and completion. A `consumed` view
//!   without `consumed_by` matches any consumer (the consumption checker
//!   flags it). `cancelled` and `expired` never match (the workload neither
//!   cancels approvals nor lets them expire).
//! - `fail` create/decide/consume: no effect, but an observation that the
//!   precondition did NOT hold at some point between invoke and completion.
//!   A `fail` whose code is in [`CheckOptions::stateless_fail_codes`] (bad
//!   input, self-approval, ...) says nothing about the state and is dropped,
//!   as are failed resumes (a resume can fail for reasons the register does
//!   not model, e.g. an input mismatch) and failed or info gets.
//! - `info` create/decide/consume/resume: may take effect at any point after
//!   its invoke, or never (its completion is +infinity).
//!
//! A standing approval the header lists is left out: it is spent up to N
//! times by design, and `policy_quorum` bounds its uses.
//!
//! An approval id with no create operation in the history at all was created
//! and decided outside the recorded operations (a submit of a capability that
//! requires approval creates it; the workload decides it unrecorded before
//! the recorded resume): it gets an implicit `info` create, approve and
//! reject, each invoked at −infinity, so any unrecorded lifecycle is allowed
//! and only the recorded operations are constrained.
//!
//! The search: the operations' call and return events are put in a
//! time-ordered doubly linked list (at equal times calls come first, so
//! touching operations count as concurrent: this can only accept more). The
//! search repeatedly linearizes a call that precedes the first pending
//! return — the pruning that every operation completed before another's
//! invoke must precede it is implicit in this order — and backtracks when it
//! reaches a return of an operation it has not linearized. A configuration
//! (set of linearized operations as a bitset, model state) already explored
//! is never explored again. The search succeeds when every `ok` and `fail`
//! operation is linearized (`info` operations may stay out). Each id has a
//! step budget ([`CheckOptions::max_search_steps_per_key`]); exhausting it
//! makes that id `unknown`, never a hang.

use std::collections::{BTreeMap, HashSet};

use super::{describe, op_label, CheckOptions, CheckResult, Findings, Operation};
use crate::history::{ApprovalState, Entry, Op, OpResult, Outcome};

/// The approval register's state. Consumers are interned per approval id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Model {
    Absent,
    Pending,
    Approved,
    Rejected,
    Consumed(u32),
}

impl Model {
    /// A compact code for the memo table.
    fn encode(self) -> u64 {
        match self {
            Model::Absent => 0,
            Model::Pending => 1,
            Model::Approved => 2,
            Model::Rejected => 3,
            Model::Consumed(by) => 4 + u64::from(by),
        }
    }

    fn name(self, consumers: &[String]) -> String {
        match self {
            Model::Absent => "absent".to_string(),
            Model::Pending => "pending".to_string(),
            Model::Approved => "approved".to_string(),
            Model::Rejected => "rejected".to_string(),
            Model::Consumed(by) => {
                format!("consumed by {}", consumers.get(by as usize).map_or("?", String::as_str))
            }
        }
    }
}

/// A state-changing action.
#[derive(Debug, Clone, Copy)]
enum Action {
    Create,
    Decide { approve: bool },
    Consume { by: u32 },
}

impl Action {
    /// Whether the action's precondition holds in this state.
    fn allowed(self, state: Model) -> bool {
        match self {
            Action::Create => state == Model::Absent,
            Action::Decide { .. } => state == Model::Pending,
            Action::Consume { .. } => state == Model::Approved,
        }
    }

    /// The state after the action (its precondition holding).
    fn after(self) -> Model {
        match self {
            Action::Create => Model::Pending,
            Action::Decide { approve: true } => Model::Approved,
            Action::Decide { approve: false } => Model::Rejected,
            Action::Consume { by } => Model::Consumed(by),
        }
    }
}

/// What a returned approval view says the state is.
#[derive(Debug, Clone, Copy)]
enum Expect {
    Is(Model),
    ConsumedByAnyone,
    Impossible,
}

impl Expect {
    fn matches(self, state: Model) -> bool {
        match self {
            Expect::Is(expected) => expected == state,
            Expect::ConsumedByAnyone => matches!(state, Model::Consumed(_)),
            Expect::Impossible => false,
        }
    }
}

/// How an operation constrains the model.
#[derive(Debug, Clone, Copy)]
enum Kind {
    /// `ok` (must take effect) or `info` (may): precondition holds, then the action.
    Effect { action: Action, expect: Option<Expect> },
    /// `fail`: the precondition did not hold; no effect.
    Refused { action: Action },
    /// `ok` get: the state equals the view.
    Read { expect: Expect },
}

/// One operation of one approval id, as the search sees it.
#[derive(Debug, Clone)]
struct LinOp {
    kind: Kind,
    invoke_ms: f64,
    /// Completion, or +infinity for `info` (no return event).
    deadline_ms: f64,
    /// Index in the operations list; `None` for the implicit create.
    source: Option<usize>,
}

impl LinOp {
    /// The state after linearizing this operation in `state`, if it can be.
    fn step(&self, state: Model) -> Option<Model> {
        match self.kind {
            Kind::Effect { action, expect } => {
                if !action.allowed(state) {
                    return None;
                }
                let after = action.after();
                expect.is_none_or(|expect| expect.matches(after)).then_some(after)
            }
            Kind::Refused { action } => (!action.allowed(state)).then_some(state),
            Kind::Read { expect } => expect.matches(state).then_some(state),
        }
    }

    fn has_return(&self) -> bool {
        self.deadline_ms.is_finite()
    }
}

/// The deepest point a failed search reached, for the explanation.
#[derive(Debug, Clone)]
struct Deepest {
    order: Vec<usize>,
    state: Model,
    blocked: usize,
}

/// How the search of one approval id ended.
enum Search {
    Linearizable { steps: u64 },
    Violation { steps: u64, deepest: Option<Deepest> },
    GaveUp { steps: u64, reason: &'static str },
}

/// Checks that, per approval id, the history's approval operations are
/// linearizable against the approval register (the exact ok/fail/info
/// semantics and the search are in the [module documentation](mod@self)). `invalid` names the approval id, the
/// longest consistent order found and the operation that cannot be placed;
/// an id whose search exceeds the step budget is `unknown`.
pub fn linearizable_approvals(history: &[Entry], options: &CheckOptions) -> CheckResult {
    let mut findings = Findings::new("linearizable_approvals", options);
    let operations = super::operations(history);
    let standing = super::standing_ids(history);
    let mut by_key: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (index, operation) in operations.iter().enumerate() {
        let key = match operation.op {
            Op::ExecResume { approval_id, .. } => Some(approval_id.as_str()),
            op => op.approval_id(),
        };
        // A standing approval is spent up to N times: not this register.
        if let Some(key) = key.filter(|key| !standing.contains(key)) {
            by_key.entry(key).or_default().push(index);
        }
    }
    let (mut steps_total, mut steps_max, mut dropped, mut implicit, mut considered) = (0u64, 0u64, 0u64, 0u64, 0u64);
    let (mut keys_valid, mut keys_invalid, mut keys_unknown) = (0u64, 0u64, 0u64);
    for (key, indices) in &by_key {
        let (ops, consumers, dropped_here, implicit_create) = build_key(&operations, indices, options);
        dropped += dropped_here;
        implicit += u64::from(implicit_create);
        considered += ops.len() as u64;
        let outcome = search(&ops, options.max_search_steps_per_key);
        let steps = match &outcome {
            Search::Linearizable { steps } | Search::Violation { steps, .. } | Search::GaveUp { steps, .. } => *steps,
        };
        steps_total += steps;
        steps_max = steps_max.max(steps);
        match outcome {
            Search::Linearizable { .. } => keys_valid += 1,
            Search::Violation { deepest, .. } => {
                keys_invalid += 1;
                findings.invalid(explain(key, &ops, &consumers, &operations, deepest.as_ref()));
            }
            Search::GaveUp { reason, .. } => {
                keys_unknown += 1;
                findings.unknown(format!(
                    "approval {key}: {reason} after {steps} steps on {} operations; cannot tell whether it is linearizable",
                    ops.len()
                ));
            }
        }
    }
    findings.set("keys", by_key.len() as u64);
    findings.set("keys_linearizable", keys_valid);
    findings.set("keys_invalid", keys_invalid);
    findings.set("keys_unknown", keys_unknown);
    findings.set("ops", considered);
    findings.set("ops_dropped", dropped);
    findings.set("implicit_creates", implicit);
    findings.set("search_steps", steps_total);
    findings.set("search_steps_max_per_key", steps_max);
    findings.finish()
}

/// The search's operations for one approval id, its consumer names, how many
/// operations were dropped, and whether an implicit create was added.
fn build_key(
    operations: &[Operation<'_>],
    indices: &[usize],
    options: &CheckOptions,
) -> (Vec<LinOp>, Vec<String>, u64, bool) {
    let mut consumers: Vec<String> = Vec::new();
    let mut intern = |name: &str| -> u32 {
        let position = consumers.iter().position(|known| known == name).unwrap_or_else(|| {
            consumers.push(name.to_string());
            consumers.len() - 1
        });
        u32::try_from(position).expect("fewer than 2^32 consumers of one approval")
    };
    let mut ops = Vec::new();
    let mut dropped = 0;
    let mut has_create = false;
    for &index in indices {
        let operation = &operations[index];
        let action = match operation.op {
            Op::ApprovalCreate { .. } => {
                has_create = true;
                Some(Action::Create)
            }
            Op::ApprovalDecide { approve, .. } => Some(Action::Decide { approve: *approve }),
            Op::ApprovalConsume { execution_id, .. } | Op::ExecResume { execution_id, .. } => {
                Some(Action::Consume { by: intern(execution_id) })
            }
            _ => None,
        };
        let expect = match operation.result {
            Some(OpResult::Approval { state, consumed_by }) => Some(match (state, consumed_by) {
                (ApprovalState::Absent, _) => Expect::Is(Model::Absent),
                (ApprovalState::Pending, _) => Expect::Is(Model::Pending),
                (ApprovalState::Approved, _) => Expect::Is(Model::Approved),
                (ApprovalState::Rejected, _) => Expect::Is(Model::Rejected),
                (ApprovalState::Consumed, Some(by)) => Expect::Is(Model::Consumed(intern(by))),
                (ApprovalState::Consumed, None) => Expect::ConsumedByAnyone,
                (ApprovalState::Cancelled | ApprovalState::Expired | ApprovalState::Voided, _) => Expect::Impossible,
            }),
            _ => None,
        };
        let is_resume = matches!(operation.op, Op::ExecResume { .. });
        let stateless_fail = operation.error_code().is_some_and(|code| options.stateless_fail_codes.contains(code));
        let kind = match (action, operation.outcome) {
            (Some(action), Outcome::Ok) => Kind::Effect { action, expect: if is_resume { None } else { expect } },
            (Some(action), Outcome::Info) => Kind::Effect { action, expect: None },
            (Some(action), Outcome::Fail) if !is_resume && !stateless_fail => Kind::Refused { action },
            (None, Outcome::Ok) => match expect {
                Some(expect) => Kind::Read { expect },
                None => {
                    dropped += 1;
                    continue;
                }
            },
            _ => {
                dropped += 1;
                continue;
            }
        };
        ops.push(LinOp {
            kind,
            invoke_ms: operation.invoke_ms,
            deadline_ms: operation.effect_deadline_ms(),
            source: Some(index),
        });
    }
    if !has_create {
        for action in [Action::Create, Action::Decide { approve: true }, Action::Decide { approve: false }] {
            ops.push(LinOp {
                kind: Kind::Effect { action, expect: None },
                invoke_ms: f64::NEG_INFINITY,
                deadline_ms: f64::INFINITY,
                source: None,
            });
        }
    }
    (ops, consumers, dropped, !has_create)
}

/// The search of one approval id (see the module doc).
fn search(ops: &[LinOp], max_steps: u64) -> Search {
    // Events: (time, is_return, op). Calls sort before returns at equal times.
    let mut events: Vec<(f64, bool, usize)> = Vec::with_capacity(ops.len() * 2);
    for (index, op) in ops.iter().enumerate() {
        events.push((op.invoke_ms, false, index));
        if op.has_return() {
            events.push((op.deadline_ms.max(op.invoke_ms), true, index));
        }
    }
    events.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    // A doubly linked list over nodes 0 (head), 1..=m (events), m + 1 (tail).
    let count = events.len();
    let tail = count + 1;
    let mut next: Vec<usize> = (1..=count + 1).chain(std::iter::once(tail)).collect();
    let mut previous: Vec<usize> = std::iter::once(0).chain(0..=count).collect();
    let mut node_op = vec![0usize; count + 2];
    let mut node_is_return = vec![false; count + 2];
    let mut call_node = vec![0usize; ops.len()];
    let mut return_node: Vec<Option<usize>> = vec![None; ops.len()];
    for (position, &(_, is_return, op)) in events.iter().enumerate() {
        let node = position + 1;
        node_op[node] = op;
        node_is_return[node] = is_return;
        if is_return {
            return_node[op] = Some(node);
        } else {
            call_node[op] = node;
        }
    }
    let unlink = |next: &mut Vec<usize>, previous: &mut Vec<usize>, node: usize| {
        next[previous[node]] = next[node];
        previous[next[node]] = previous[node];
    };
    let relink = |next: &mut Vec<usize>, previous: &mut Vec<usize>, node: usize| {
        next[previous[node]] = node;
        previous[next[node]] = node;
    };

    let words = ops.len().div_ceil(64);
    // The memo key: the linearized set's bits, then the model state's code.
    let mut key = vec![0u64; words + 1];
    let mut memo: HashSet<Vec<u64>> = HashSet::new();
    let mut stack: Vec<(usize, Model)> = Vec::new();
    let mut state = Model::Absent;
    let mut remaining_returns = return_node.iter().filter(|node| node.is_some()).count();
    let mut entry = next[0];
    let mut steps = 0u64;
    let mut deepest: Option<Deepest> = None;
    loop {
        if remaining_returns == 0 {
            return Search::Linearizable { steps };
        }
        steps += 1;
        if steps > max_steps {
            return Search::GaveUp { steps: steps - 1, reason: "search budget exhausted" };
        }
        if entry == tail {
            // Unreachable: a pending return always stops the scan first.
            return Search::GaveUp { steps, reason: "internal error: the scan passed every pending return" };
        }
        let op = node_op[entry];
        if !node_is_return[entry] {
            let Some(after) = ops[op].step(state) else {
                entry = next[entry];
                continue;
            };
            key[op / 64] |= 1 << (op % 64);
            key[words] = after.encode();
            if memo.contains(key.as_slice()) {
                key[op / 64] &= !(1 << (op % 64));
                entry = next[entry];
                continue;
            }
            memo.insert(key.clone());
            stack.push((op, state));
            state = after;
            unlink(&mut next, &mut previous, call_node[op]);
            if let Some(node) = return_node[op] {
                unlink(&mut next, &mut previous, node);
                remaining_returns -= 1;
            }
            entry = next[0];
        } else {
            if deepest.as_ref().is_none_or(|deepest| stack.len() > deepest.order.len()) {
                deepest = Some(Deepest { order: stack.iter().map(|&(op, _)| op).collect(), state, blocked: op });
            }
            let Some((undone, before)) = stack.pop() else {
                return Search::Violation { steps, deepest };
            };
            state = before;
            key[undone / 64] &= !(1 << (undone % 64));
            if let Some(node) = return_node[undone] {
                relink(&mut next, &mut previous, node);
                remaining_returns += 1;
            }
            relink(&mut next, &mut previous, call_node[undone]);
            entry = next[call_node[undone]];
        }
    }
}

/// The explanation of a non-linearizable approval id.
fn explain(
    key: &str,
    ops: &[LinOp],
    consumers: &[String],
    operations: &[Operation<'_>],
    deepest: Option<&Deepest>,
) -> String {
    let implicit = |op: usize| match ops[op].kind {
        Kind::Effect { action: Action::Create, .. } => "implicit create",
        Kind::Effect { action: Action::Decide { approve: true }, .. } => "implicit approve",
        Kind::Effect { action: Action::Decide { approve: false }, .. } => "implicit reject",
        _ => "implicit operation",
    };
    let label = |op: usize| match ops[op].source {
        Some(index) => format!("op {} {}", operations[index].op_id, op_label(operations[index].op)),
        None => implicit(op).to_string(),
    };
    let full = |op: usize| match ops[op].source {
        Some(index) => describe(&operations[index]),
        None => format!("{} (info, from −∞)", implicit(op)),
    };
    let mut text = format!("approval {key}: its {} operations admit no linearization", ops.len());
    if let Some(deepest) = deepest {
        let order: Vec<String> = deepest.order.iter().map(|&op| label(op)).collect();
        text.push_str(&format!(
            "; the longest consistent order applies [{}] reaching state {}, after which {} cannot be placed before it completed",
            order.join(", "),
            deepest.state.name(consumers),
            full(deepest.blocked)
        ));
    }
    const SHOWN: usize = 12;
    let mut sorted: Vec<usize> = (0..ops.len()).collect();
    sorted.sort_by(|a, b| ops[*a].invoke_ms.total_cmp(&ops[*b].invoke_ms));
    let listed: Vec<String> = sorted.iter().take(SHOWN).map(|&op| full(op)).collect();
    text.push_str(&format!("; operations: {}", listed.join("; ")));
    if ops.len() > SHOWN {
        text.push_str(&format!("; … and {} more", ops.len() - SHOWN));
    }
    text
}
