//! The one script helper the rule tests share: a [`State`] driven by commands
//! stamped with a clock the test sets, plus small builders and reply matchers.
//! Each test file uses a different subset, so unused helpers are expected.
#![allow(dead_code)]

use gavel_core::command::{ApprovalPolicySpec, CapabilitySpec, Command, CreateApproval, Envelope, Reply, RetrySpec};
use gavel_core::command::{Retention, Submit, Task};
use gavel_core::{
    Actor, Approval, ApprovalStatus, Caller, Capability, DomainError, ErrorCode, Event, Execution, ReportOutcome, Risk,
    SideEffect,
};

/// Where every script's clock starts: far from zero, so "before" is expressible.
pub const START_MS: u64 = 1_000_000;

/// A state machine plus the clock the next command is stamped with.
pub struct Script {
    /// The state under test.
    pub state: State,
    /// `now_ms` of the next command.
    pub now_ms: u64,
}

pub use gavel_core::State;

impl Script {
    /// An empty state with the clock at [`START_MS`].
    pub fn new() -> Script {
        Script { state: State::new(), now_ms: START_MS }
    }

    /// Moves the clock forward.
    pub fn advance(&mut self, ms: u64) {
        self.now_ms += ms;
    }

    /// Sets the clock.
    pub fn at(&mut self, now_ms: u64) {
        self.now_ms = now_ms;
    }

    /// Applies a command without a request id.
    pub fn apply(&mut self, command: Command) -> Reply {
        self.state.apply(&Envelope { request_id: None, now_ms: self.now_ms, caller: None, command })
    }

    /// Applies a command under a request id.
    pub fn apply_as(&mut self, request_id: &str, command: Command) -> Reply {
        self.state.apply(&Envelope {
            request_id: Some(request_id.to_string()),
            now_ms: self.now_ms,
            caller: None,
            command,
        })
    }

    /// Applies a command sent by an authenticated caller, without a request id.
    pub fn apply_by(&mut self, caller: &Caller, command: Command) -> Reply {
        self.state.apply(&Envelope { request_id: None, now_ms: self.now_ms, caller: Some(caller.clone()), command })
    }

    /// Applies a command sent by an authenticated caller, under a request id.
    pub fn apply_by_as(&mut self, request_id: &str, caller: &Caller, command: Command) -> Reply {
        self.state.apply(&Envelope {
            request_id: Some(request_id.to_string()),
            now_ms: self.now_ms,
            caller: Some(caller.clone()),
            command,
        })
    }

    /// Registers a capability, failing the test if it is refused.
    pub fn register(&mut self, spec: CapabilitySpec) -> Capability {
        match self.apply(Command::RegisterCapability(spec)) {
            Reply::Capability(capability) => capability,
            other => panic!("registration refused: {other:?}"),
        }
    }

    /// Submits `input_json` to `capability_id` as execution `execution_id`, by user `alice`.
    pub fn submit(&mut self, execution_id: &str, capability_id: &str, input_json: &str) -> Reply {
        self.apply(Command::Submit(submission(execution_id, capability_id, input_json)))
    }

    /// Submits and expects a newly created execution.
    pub fn submit_ok(&mut self, execution_id: &str, capability_id: &str, input_json: &str) -> Execution {
        let (execution, created) = execution_of(self.submit(execution_id, capability_id, input_json));
        assert!(created, "submit of {execution_id} should create it");
        execution
    }

    /// Polls one queue for at most `tasks_max` tasks.
    pub fn poll_many(&mut self, worker_id: &str, queue: &str, tasks_max: u32) -> Vec<Task> {
        let command = Command::Poll { worker_id: worker_id.to_string(), queues: vec![queue.to_string()], tasks_max };
        match self.apply(command) {
            Reply::Tasks(tasks) => tasks,
            other => panic!("poll refused: {other:?}"),
        }
    }

    /// Polls one queue for at most one task.
    pub fn poll(&mut self, worker_id: &str, queue: &str) -> Option<Task> {
        let mut tasks = self.poll_many(worker_id, queue, 1);
        assert!(tasks.len() <= 1, "asked for one task, got {}", tasks.len());
        tasks.pop()
    }

    /// Polls one queue and expects a task.
    pub fn lease(&mut self, worker_id: &str, queue: &str) -> Task {
        self.poll(worker_id, queue).unwrap_or_else(|| panic!("no task on queue {queue} at {}", self.now_ms))
    }

    /// A heartbeat for a lease.
    pub fn heartbeat(&mut self, lease_id: u64, worker_id: &str) -> Reply {
        self.apply(Command::Heartbeat { lease_id, worker_id: worker_id.to_string() })
    }

    /// Reports any outcome for a lease.
    pub fn report(&mut self, lease_id: u64, worker_id: &str, outcome: ReportOutcome) -> Reply {
        self.apply(Command::Report { lease_id, worker_id: worker_id.to_string(), outcome })
    }

    /// Reports a completed attempt.
    pub fn report_ok(&mut self, lease_id: u64, worker_id: &str, output_json: &str) -> Reply {
        self.report(lease_id, worker_id, ReportOutcome::Completed { output_json: output_json.to_string() })
    }

    /// Reports a failed attempt.
    pub fn report_err(&mut self, lease_id: u64, worker_id: &str, code: &str, retryable: bool) -> Reply {
        let outcome = ReportOutcome::Failed { code: code.to_string(), message: format!("{code} happened"), retryable };
        self.report(lease_id, worker_id, outcome)
    }

    /// The caller cancels an execution.
    pub fn cancel(&mut self, execution_id: &str) -> Reply {
        self.apply(Command::CancelExecution { execution_id: execution_id.to_string(), actor: Some(alice()) })
    }

    /// A tick with the default retention.
    pub fn tick(&mut self) -> Reply {
        self.apply(Command::Tick { retention: Retention::default() })
    }

    /// A tick with a given retention.
    pub fn tick_with(&mut self, retention: Retention) -> Reply {
        self.apply(Command::Tick { retention })
    }

    /// Creates an approval from a request, expecting success.
    pub fn create_approval(&mut self, request: CreateApproval) -> Approval {
        approval_of(self.apply(Command::CreateApproval(request))).0
    }

    /// Decides an approval with the cluster clock.
    pub fn decide(&mut self, approval_id: &str, status: ApprovalStatus, approver: Actor) -> Reply {
        self.apply(Command::DecideApproval {
            terms_hash: None,
            approval_id: approval_id.to_string(),
            status,
            approver,
            comment: None,
            caller_now_ms: None,
        })
    }

    /// Consumes an approval with the cluster clock.
    pub fn consume(&mut self, approval_id: &str, execution_id: &str) -> Reply {
        self.apply(consume_command(approval_id, execution_id))
    }

    /// Resumes an approval-required submission.
    pub fn resume(&mut self, approval_id: &str, input_json: Option<&str>) -> Reply {
        self.apply(Command::Resume {
            approval_id: approval_id.to_string(),
            execution_id: format!("exec-of-{approval_id}"),
            input_json: input_json.map(str::to_string),
        })
    }

    /// The stored execution.
    pub fn execution(&self, execution_id: &str) -> Execution {
        self.state.execution(execution_id).unwrap_or_else(|| panic!("no execution {execution_id}")).into_owned()
    }

    /// The stored approval.
    pub fn approval(&self, approval_id: &str) -> Approval {
        self.state.approval(approval_id).unwrap_or_else(|| panic!("no approval {approval_id}")).into_owned()
    }

    /// Every retained event, oldest first.
    pub fn events(&self) -> Vec<Event> {
        self.state.events_after(0, 1000)
    }

    /// The type names of every retained event about one execution, oldest first.
    pub fn event_types(&self, execution_id: &str) -> Vec<&'static str> {
        self.events()
            .iter()
            .filter(|event| event.execution_id.as_deref() == Some(execution_id))
            .map(|event| event.kind.type_name())
            .collect()
    }
}

/// User `alice`, the default requester.
pub fn alice() -> Actor {
    Actor::user("alice")
}

/// User `bob`, the default approver.
pub fn bob() -> Actor {
    Actor::user("bob")
}

/// A minimal valid declaration: the given side effect, low risk, no retry.
pub fn capability(id: &str, side_effect: SideEffect) -> CapabilitySpec {
    CapabilitySpec { id: id.to_string(), side_effect: Some(side_effect), risk: Some(Risk::Low), ..Default::default() }
}

/// A declaration with a retry configuration; write-like classes are declared idempotent.
pub fn retrying(id: &str, side_effect: SideEffect, attempts_max: u32, backoff_ms: u64) -> CapabilitySpec {
    CapabilitySpec {
        idempotent: side_effect.is_write_like(),
        retry: Some(RetrySpec { attempts_max, backoff_ms: Some(backoff_ms), non_retryable_codes: Vec::new() }),
        ..capability(id, side_effect)
    }
}

/// A declaration whose executions need approval first.
pub fn gated(id: &str, side_effect: SideEffect, expires_in_ms: u64) -> CapabilitySpec {
    CapabilitySpec {
        approval: Some(ApprovalPolicySpec { required: true, approval_type: None, expires_in_ms: Some(expires_in_ms) }),
        ..capability(id, side_effect)
    }
}

/// A submission by `alice` from surface `test`.
pub fn submission(execution_id: &str, capability_id: &str, input_json: &str) -> Submit {
    Submit {
        execution_id: execution_id.to_string(),
        capability_id: capability_id.to_string(),
        input_json: input_json.to_string(),
        actor: alice(),
        surface: "test".to_string(),
        correlation_id: None,
    }
}

/// An approval request by `alice`, with every optional field left to its default.
pub fn approval_request(id: &str) -> CreateApproval {
    CreateApproval {
        id: id.to_string(),
        capability_id: "orders.refund".to_string(),
        surface: "mcp".to_string(),
        actor: alice(),
        input_json: r#"{"amount":100,"order":"o-1"}"#.to_string(),
        input_hash: None,
        reasons: vec!["refunds need a human".to_string()],
        types: vec!["human".to_string()],
        risk: Risk::High,
        side_effect: SideEffect::Write,
        requested_at_ms: None,
        expires_at_ms: None,
        expires_in_ms: None,
        allow_self_approval: false,
        caller_now_ms: None,
    }
}

/// `markConsumed` as a command, with the cluster clock.
pub fn consume_command(approval_id: &str, execution_id: &str) -> Command {
    Command::ConsumeApproval {
        approval_id: approval_id.to_string(),
        execution_id: execution_id.to_string(),
        caller_now_ms: None,
    }
}

/// The refusal in a reply, checking its code.
pub fn refused(reply: Reply, code: ErrorCode) -> DomainError {
    match reply {
        Reply::Error(error) => {
            assert_eq!(error.code, code, "refused with {error:?}, expected {code}");
            error
        }
        other => panic!("expected a {code} refusal, got {other:?}"),
    }
}

/// The execution in a reply and whether the command created it.
pub fn execution_of(reply: Reply) -> (Execution, bool) {
    match reply {
        Reply::Execution { execution, created } => (execution, created),
        other => panic!("expected an execution, got {other:?}"),
    }
}

/// The approval in a reply and its status as seen by the command.
pub fn approval_of(reply: Reply) -> (Approval, ApprovalStatus) {
    match reply {
        Reply::Approval { approval, status } => (approval, status),
        other => panic!("expected an approval, got {other:?}"),
    }
}

/// The execution after an accepted report, and whether a retry was scheduled.
pub fn reported(reply: Reply) -> (Execution, bool) {
    match reply {
        Reply::Reported { execution, retry_scheduled } => (execution, retry_scheduled),
        other => panic!("expected an accepted report, got {other:?}"),
    }
}

/// Runs `rounds` rounds of history on a script with `docs.read` registered:
/// a lifecycle (submitted, leased, completed) and an approval (created,
/// approved, consumed), then 100 ms.
pub fn lifecycles_and_approvals(script: &mut Script, rounds: usize) {
    for round in 0..rounds {
        let id = format!("exec-{round}");
        script.submit_ok(&id, "docs.read", r#"{"query":"raft"}"#);
        let task = script.lease("worker-1", "docs.read");
        script.report_ok(task.lease.lease_id, "worker-1", r#"{"hits":3}"#);
        let approval = format!("apr-{round}");
        script.create_approval(approval_request(&approval));
        script.decide(&approval, ApprovalStatus::Approved, bob());
        script.consume(&approval, &format!("consumer-{round}"));
        script.advance(100);
    }
}
