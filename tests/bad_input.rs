//! SPEC §7 through gRPC: malformed requests are refused with INVALID_ARGUMENT
//! (or UNAUTHENTICATED for an ill-formed actor) and a stable domain code, on
//! the leader and on a follower, and none of them reaches the replicated log.

mod support;

use gavel_proto::error_detail::read_error_detail;
use gavel_proto::v1 as pb;
use support::{domain_code, expect_refusal, register, retry, user, Cluster};
use tonic::{Code, Status};

/// Largest execution input, in bytes (SPEC §7; `gavel_core::limits::INPUT_BYTES_MAX`).
const INPUT_BYTES_MAX: usize = 64 * 1024;
/// Longest id, in bytes (`gavel_core::limits::ID_BYTES_MAX`).
const ID_BYTES_MAX: usize = 128;

/// Calls one RPC on node `$via`, retrying only through elections.
macro_rules! call {
    ($cluster:expr, $via:expr, $client:ident, $method:ident, $request:expr) => {{
        let request = $request;
        retry(|| {
            let mut client = $cluster.$client($via);
            let request = request.clone();
            async move { client.$method(request).await }
        })
        .await
        .map(tonic::Response::into_inner)
    }};
}

fn request_id(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4())
}

/// A JSON object of exactly `bytes` bytes.
fn json_of_size(bytes: usize) -> String {
    let overhead = r#"{"blob":""}"#.len();
    format!(r#"{{"blob":"{}"}}"#, "x".repeat(bytes - overhead))
}

fn long_id() -> String {
    "i".repeat(ID_BYTES_MAX + 1)
}

fn submit_request(capability_id: &str, input_json: &str) -> pb::SubmitRequest {
    pb::SubmitRequest {
        request_id: request_id("submit"),
        execution_id: None,
        capability_id: capability_id.to_string(),
        input_json: input_json.to_string(),
        actor: Some(user("alice")),
        surface: "bad-input-test".to_string(),
        correlation_id: None,
    }
}

fn create_approval_request(id: &str) -> pb::CreateApprovalRequest {
    pb::CreateApprovalRequest {
        request_id: request_id("create"),
        id: id.to_string(),
        capability_id: "payments.refund".to_string(),
        surface: "bad-input-test".to_string(),
        actor: Some(user("alice")),
        input_json: "{}".to_string(),
        risk: pb::Risk::Low as i32,
        side_effect: pb::SideEffect::Write as i32,
        ..pb::CreateApprovalRequest::default()
    }
}

fn poll_request(queues: Vec<String>, max_tasks: u32) -> pb::PollRequest {
    pb::PollRequest { request_id: request_id("poll"), worker_id: "worker-1".to_string(), queues, max_tasks, wait_ms: 0 }
}

fn report_request(outcome: Option<pb::report_request::Outcome>) -> pb::ReportRequest {
    pb::ReportRequest { request_id: request_id("report"), lease_id: 1, worker_id: "worker-1".to_string(), outcome }
}

fn completed(output_json: String) -> Option<pb::report_request::Outcome> {
    Some(pb::report_request::Outcome::Completed(pb::ReportCompleted { output_json }))
}

fn capability_spec(id: &str, side_effect: pb::SideEffect) -> pb::CapabilitySpec {
    pb::CapabilitySpec {
        id: id.to_string(),
        side_effect: side_effect as i32,
        risk: pb::Risk::Low as i32,
        ..pb::CapabilitySpec::default()
    }
}

fn register_request(spec: pb::CapabilitySpec) -> pb::RegisterCapabilityRequest {
    pb::RegisterCapabilityRequest { request_id: request_id("register"), spec: Some(spec) }
}

/// Tracks the leader's log while bad requests are sent, so a request that
/// reached the log is named at once.
struct LogWatch<'a> {
    cluster: &'a Cluster,
    leader: u64,
    before: pb::StatusResponse,
}

impl<'a> LogWatch<'a> {
    async fn start(cluster: &'a Cluster, leader: u64) -> LogWatch<'a> {
        let before = cluster.status(leader).await.expect("leader status");
        assert_eq!(before.role, "Leader");
        LogWatch { cluster, leader, before }
    }

    /// Asserts that `result` is the refusal expected and that the log did not
    /// grow: a write is answered only after it is in the leader's log, so a
    /// request that reached the log shows up here immediately.
    async fn refused<T: std::fmt::Debug>(
        &self,
        what: &str,
        result: Result<T, Status>,
        code: Code,
        domain: &str,
    ) -> Status {
        let status = match result {
            Ok(value) => panic!("{what}: expected {code:?}/{domain}, got a success: {value:?}"),
            Err(status) => status,
        };
        assert_eq!((status.code(), domain_code(&status).as_str()), (code, domain), "{what}: {status:?}");
        let detail = read_error_detail(&status).unwrap_or_else(|| panic!("{what}: no ErrorDetail in {status:?}"));
        assert_eq!(detail.message, status.message(), "{what}: the detail repeats the message");
        assert!(!status.message().is_empty(), "{what}: a refusal explains itself");
        let now = self.cluster.status(self.leader).await.expect("leader status");
        assert_eq!(
            (now.term, now.last_log_index),
            (self.before.term, self.before.last_log_index),
            "{what}: the refused request reached the log"
        );
        status
    }
}

/// Every refusal below is stateless: the cluster is fresh, with no
/// capability, execution, lease or event, so the ticker has nothing to
/// propose and the leader's log may not grow at all.
async fn malformed_requests_are_refused_before_the_log(cluster: &Cluster, leader: u64, follower: u64) {
    let watch = LogWatch::start(cluster, leader).await;
    let events = call!(cluster, leader, audit, list_events, pb::ListEventsRequest::default()).expect("list events");
    assert!(events.events.is_empty(), "a fresh cluster has no events (so no retention tick): {events:?}");

    for via in [leader, follower] {
        let on = |what: &str| format!("{what} (through node {via})");

        // Inputs: over the size limit, or not JSON.
        let oversized = json_of_size(INPUT_BYTES_MAX + 1);
        let result = call!(cluster, via, executions, submit, submit_request("docs.read", &oversized));
        let status = watch.refused(&on("oversized input"), result, Code::InvalidArgument, "INPUT_INVALID").await;
        assert!(status.message().contains("over the limit"), "{}", status.message());
        for malformed in [r#"{"a":"#, "not json", "{} {}", "", r#"{"a":1,}"#, "[1, 2"] {
            let result = call!(cluster, via, executions, submit, submit_request("docs.read", malformed));
            let what = on(&format!("input {malformed:?}"));
            let status = watch.refused(&what, result, Code::InvalidArgument, "INPUT_INVALID").await;
            assert!(status.message().contains("not valid JSON"), "{what}: {}", status.message());
        }
        let mut approval = create_approval_request("apr-big");
        approval.input_json = oversized.clone();
        let result = call!(cluster, via, approvals, create_approval, approval);
        watch.refused(&on("oversized approval input"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;
        let result = call!(cluster, via, workers, report, report_request(completed(json_of_size(256 * 1024 + 1))));
        watch.refused(&on("oversized output"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;
        let result = call!(cluster, via, workers, report, report_request(completed("{oops".to_string())));
        watch.refused(&on("malformed output"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;
        let result = call!(cluster, via, workers, report, report_request(None));
        watch.refused(&on("report without outcome"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;

        // Unknown enum values.
        let spec = pb::CapabilitySpec { side_effect: 99, ..capability_spec("docs.read", pb::SideEffect::Read) };
        let result = call!(cluster, via, capabilities, register_capability, register_request(spec));
        let status = watch.refused(&on("side_effect 99"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;
        assert!(status.message().contains("99"), "{}", status.message());
        let spec = pb::CapabilitySpec { risk: 7, ..capability_spec("docs.read", pb::SideEffect::Read) };
        let result = call!(cluster, via, capabilities, register_capability, register_request(spec));
        watch.refused(&on("risk 7"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;
        let approval = pb::CreateApprovalRequest { side_effect: 99, ..create_approval_request("apr-enum") };
        let result = call!(cluster, via, approvals, create_approval, approval);
        watch.refused(&on("approval side_effect 99"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;
        let decide = pb::DecideApprovalRequest {
            request_id: request_id("decide"),
            id: "apr-1".to_string(),
            status: 99,
            approver: Some(user("bob")),
            ..pb::DecideApprovalRequest::default()
        };
        let result = call!(cluster, via, approvals, decide_approval, decide);
        watch.refused(&on("decision status 99"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;
        let list = pb::ListApprovalsRequest { status: Some(99), ..pb::ListApprovalsRequest::default() };
        let result = call!(cluster, via, approvals, list_approvals, list);
        watch.refused(&on("list status 99"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;
        let mut submit = submit_request("docs.read", "{}");
        submit.actor = Some(pb::Actor { kind: 99, ..user("alice") });
        let result = call!(cluster, via, executions, submit, submit);
        watch.refused(&on("actor kind 99"), result, Code::Unauthenticated, "UNAUTHENTICATED").await;

        // Timestamps.
        let negative = Some(-1);
        let approval = pb::CreateApprovalRequest { caller_now_ms: negative, ..create_approval_request("apr-neg") };
        let result = call!(cluster, via, approvals, create_approval, approval);
        watch.refused(&on("create callerNowMs -1"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;
        let approval = pb::CreateApprovalRequest { requested_at_ms: negative, ..create_approval_request("apr-neg") };
        let result = call!(cluster, via, approvals, create_approval, approval);
        watch.refused(&on("requestedAtMs -1"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;
        let approval =
            pb::CreateApprovalRequest { expires_at_ms: Some(i64::MIN), ..create_approval_request("apr-neg") };
        let result = call!(cluster, via, approvals, create_approval, approval);
        watch.refused(&on("expiresAtMs i64::MIN"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;
        let approval =
            pb::CreateApprovalRequest { caller_now_ms: Some(i64::MAX), ..create_approval_request("apr-microseconds") };
        let result = call!(cluster, via, approvals, create_approval, approval);
        watch.refused(&on("callerNowMs in nanoseconds"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;
        let decide = pb::DecideApprovalRequest {
            request_id: request_id("decide"),
            caller_now_ms: negative,
            id: "apr-1".to_string(),
            status: pb::ApprovalStatus::Approved as i32,
            approver: Some(user("bob")),
            comment: None,
        };
        let result = call!(cluster, via, approvals, decide_approval, decide);
        watch.refused(&on("decide callerNowMs -1"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;
        let consume = pb::ConsumeApprovalRequest {
            request_id: request_id("consume"),
            caller_now_ms: negative,
            id: "apr-1".to_string(),
            execution_id: "ex-1".to_string(),
        };
        let result = call!(cluster, via, approvals, consume_approval, consume);
        watch.refused(&on("consume callerNowMs -1"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;
        let cancel = pb::CancelApprovalRequest {
            request_id: request_id("cancel"),
            caller_now_ms: negative,
            id: "apr-1".to_string(),
        };
        let result = call!(cluster, via, approvals, cancel_approval, cancel);
        watch.refused(&on("cancel callerNowMs -1"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;
        let get = pb::GetApprovalRequest { id: "apr-1".to_string(), caller_now_ms: negative };
        let result = call!(cluster, via, approvals, get_approval, get);
        watch.refused(&on("get callerNowMs -1"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;
        let list = pb::ListApprovalsRequest { caller_now_ms: negative, ..pb::ListApprovalsRequest::default() };
        let result = call!(cluster, via, approvals, list_approvals, list);
        watch.refused(&on("list callerNowMs -1"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;

        // Ids over 128 bytes, wherever an id is taken.
        let result = call!(cluster, via, approvals, create_approval, create_approval_request(&long_id()));
        watch.refused(&on("long approval id"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;
        let submit = pb::SubmitRequest { execution_id: Some(long_id()), ..submit_request("docs.read", "{}") };
        let result = call!(cluster, via, executions, submit, submit);
        watch.refused(&on("long execution id"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;
        let result = call!(cluster, via, executions, submit, submit_request(&long_id(), "{}"));
        watch.refused(&on("long capability id"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;
        let submit = pb::SubmitRequest { correlation_id: Some(long_id()), ..submit_request("docs.read", "{}") };
        let result = call!(cluster, via, executions, submit, submit);
        watch.refused(&on("long correlation id"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;
        let submit = pb::SubmitRequest { actor: Some(user(&long_id())), ..submit_request("docs.read", "{}") };
        let result = call!(cluster, via, executions, submit, submit);
        watch.refused(&on("long actor id"), result, Code::Unauthenticated, "UNAUTHENTICATED").await;
        let result = call!(
            cluster,
            via,
            capabilities,
            register_capability,
            register_request(capability_spec(&long_id(), pb::SideEffect::Read))
        );
        watch.refused(&on("long capability id on register"), result, Code::InvalidArgument, "CAPABILITY_INVALID").await;
        let consume = pb::ConsumeApprovalRequest {
            request_id: request_id("consume"),
            caller_now_ms: None,
            id: "apr-1".to_string(),
            execution_id: long_id(),
        };
        let result = call!(cluster, via, approvals, consume_approval, consume);
        watch.refused(&on("long consuming execution id"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;
        let resume =
            pb::ResumeRequest { request_id: request_id("resume"), approval_id: long_id(), ..Default::default() };
        let result = call!(cluster, via, executions, resume, resume);
        watch.refused(&on("long resume approval id"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;
        let cancel =
            pb::CancelExecutionRequest { request_id: request_id("cancel"), execution_id: long_id(), actor: None };
        let result = call!(cluster, via, executions, cancel_execution, cancel);
        watch.refused(&on("long cancelled execution id"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;
        let poll = pb::PollRequest { worker_id: long_id(), ..poll_request(vec!["q".to_string()], 1) };
        let result = call!(cluster, via, workers, poll, poll);
        watch.refused(&on("long worker id"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;
        let result = call!(cluster, via, workers, poll, poll_request(vec![long_id()], 1));
        watch.refused(&on("long queue name"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;
        let heartbeat = pb::HeartbeatRequest { request_id: request_id("heartbeat"), lease_id: 1, worker_id: long_id() };
        let result = call!(cluster, via, workers, heartbeat, heartbeat);
        watch.refused(&on("long heartbeat worker id"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;
        let report = pb::ReportRequest { worker_id: long_id(), ..report_request(completed("{}".to_string())) };
        let result = call!(cluster, via, workers, report, report);
        watch.refused(&on("long report worker id"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;
        let approval = pb::CreateApprovalRequest { request_id: long_id(), ..create_approval_request("apr-rid") };
        let result = call!(cluster, via, approvals, create_approval, approval);
        watch.refused(&on("long request id"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;
        let submit = pb::SubmitRequest { request_id: long_id(), ..submit_request("docs.read", "{}") };
        let result = call!(cluster, via, executions, submit, submit);
        watch.refused(&on("long submit request id"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;
        let poll = pb::PollRequest { request_id: long_id(), ..poll_request(vec!["q".to_string()], 1) };
        let result = call!(cluster, via, workers, poll, poll);
        watch.refused(&on("long poll request id"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;

        // Polls: list lengths and task counts.
        let queues: Vec<String> = (0..65).map(|i| format!("queue-{i}")).collect();
        let result = call!(cluster, via, workers, poll, poll_request(queues, 1));
        let status = watch.refused(&on("65 queues"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;
        assert!(status.message().contains("queues"), "{}", status.message());
        let result = call!(cluster, via, workers, poll, poll_request(Vec::new(), 1));
        watch.refused(&on("no queue"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;
        let result = call!(cluster, via, workers, poll, poll_request(vec!["q".to_string()], 0));
        let status = watch.refused(&on("max_tasks 0"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;
        assert!(status.message().contains("maxTasks"), "{}", status.message());
        let result = call!(cluster, via, workers, poll, poll_request(vec!["q".to_string()], 65));
        watch.refused(&on("max_tasks 65"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;
        let poll = pb::PollRequest { worker_id: String::new(), ..poll_request(vec!["q".to_string()], 1) };
        let result = call!(cluster, via, workers, poll, poll);
        watch.refused(&on("empty worker id"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;

        // Other shapes: list lengths, text sizes, conflicting fields.
        let approval = pb::CreateApprovalRequest {
            reasons: (0..65).map(|i| format!("reason {i}")).collect(),
            ..create_approval_request("apr-reasons")
        };
        let result = call!(cluster, via, approvals, create_approval, approval);
        watch.refused(&on("65 reasons"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;
        let approval = pb::CreateApprovalRequest {
            expires_at_ms: Some(1_000),
            expires_in_ms: Some(1_000),
            ..create_approval_request("apr-both")
        };
        let result = call!(cluster, via, approvals, create_approval, approval);
        watch.refused(&on("expiresAt and expiresIn"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;
        let decide = pb::DecideApprovalRequest {
            request_id: request_id("decide"),
            id: "apr-1".to_string(),
            status: pb::ApprovalStatus::Approved as i32,
            approver: Some(user("bob")),
            comment: Some("c".repeat(4 * 1024 + 1)),
            caller_now_ms: None,
        };
        let result = call!(cluster, via, approvals, decide_approval, decide);
        watch.refused(&on("long comment"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;
        let result = call!(
            cluster,
            via,
            capabilities,
            register_capability,
            pb::RegisterCapabilityRequest { request_id: request_id("register"), spec: None }
        );
        watch.refused(&on("register without spec"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;

        // A registration with many problems reports every one of them.
        let spec = pb::CapabilitySpec {
            id: String::new(),
            side_effect: pb::SideEffect::Write as i32,
            risk: pb::Risk::Unspecified as i32,
            idempotent: false,
            retry: Some(pb::RetryConfig { max_attempts: 3, backoff_ms: Some(100), non_retryable_codes: Vec::new() }),
            timeout_ms: Some(0),
            heartbeat_timeout_ms: Some(0),
            approval: Some(pb::ApprovalPolicy { required: true, r#type: None, expires_in_ms: Some(0) }),
            queue: None,
            tags: Vec::new(),
        };
        let result = call!(cluster, via, capabilities, register_capability, register_request(spec));
        let status = watch
            .refused(&on("capability with six problems"), result, Code::InvalidArgument, "CAPABILITY_INVALID")
            .await;
        let detail = read_error_detail(&status).expect("error detail");
        assert_eq!(detail.code, "CAPABILITY_INVALID");
        let expected = ["id", "risk", "timeoutMs", "heartbeatTimeoutMs", "idempotent", "approval.expiresInMs"];
        assert_eq!(detail.problems.len(), expected.len(), "one problem per mistake: {:?}", detail.problems);
        for field in expected {
            assert!(
                detail.problems.iter().any(|problem| problem.contains(field)),
                "a problem names {field}: {:?}",
                detail.problems
            );
        }

        // Retry without idempotent is refused for every write-like side effect.
        for side_effect in [pb::SideEffect::Write, pb::SideEffect::Destructive, pb::SideEffect::External] {
            let spec = pb::CapabilitySpec {
                retry: Some(pb::RetryConfig { max_attempts: 1, backoff_ms: None, non_retryable_codes: Vec::new() }),
                ..capability_spec("orders.write", side_effect)
            };
            let result = call!(cluster, via, capabilities, register_capability, register_request(spec));
            let what = on(&format!("retry on {side_effect:?} without idempotent"));
            let status = watch.refused(&what, result, Code::InvalidArgument, "CAPABILITY_INVALID").await;
            let detail = read_error_detail(&status).expect("error detail");
            assert_eq!(detail.problems.len(), 1, "{what}: {:?}", detail.problems);
            assert!(detail.problems[0].contains("idempotent"), "{what}: {:?}", detail.problems);
        }
    }

    let after = cluster.status(leader).await.expect("leader status");
    assert_eq!(after.term, watch.before.term, "no election during the batch");
    assert_eq!(after.last_log_index, watch.before.last_log_index, "no refused request reached the log");
    assert_eq!(after.state_hash, watch.before.state_hash, "the state machine saw none of them");
}

/// The refusals above are about the values, not about everything being
/// refused: the same requests at the limits are accepted.
async fn the_same_requests_at_the_limits_are_accepted(cluster: &Cluster, leader: u64, follower: u64) {
    register(cluster, follower, capability_spec("docs.read", pb::SideEffect::Read)).await;
    let at_limit = json_of_size(INPUT_BYTES_MAX);
    let submit = pb::SubmitRequest {
        request_id: "r".repeat(ID_BYTES_MAX),
        execution_id: Some("e".repeat(ID_BYTES_MAX)),
        ..submit_request("docs.read", &at_limit)
    };
    let response = call!(cluster, follower, executions, submit, submit).expect("an input of exactly 64 KiB");
    assert!(response.created);

    let approval = pb::CreateApprovalRequest {
        caller_now_ms: Some(0),
        reasons: (0..64).map(|i| format!("reason {i}")).collect(),
        ..create_approval_request(&"a".repeat(ID_BYTES_MAX))
    };
    call!(cluster, leader, approvals, create_approval, approval).expect("64 reasons, a 128-byte id, time 0");

    let queues: Vec<String> = (0..64).map(|i| format!("queue-{i}")).collect();
    let tasks = call!(cluster, follower, workers, poll, poll_request(queues, 64)).expect("64 queues, 64 tasks");
    assert!(tasks.tasks.is_empty());
    // A poll that finds work proposes grants under ids derived from its request id; a
    // request id at the limit must still work.
    let poll =
        pb::PollRequest { request_id: "p".repeat(ID_BYTES_MAX), ..poll_request(vec!["docs.read".to_string()], 1) };
    let tasks = call!(cluster, leader, workers, poll, poll).expect("a poll with a 128-byte request id");
    assert_eq!(tasks.tasks.len(), 1, "the queued execution is leased");

    for side_effect in [pb::SideEffect::Write, pb::SideEffect::Destructive, pb::SideEffect::External] {
        let spec = pb::CapabilitySpec {
            idempotent: true,
            retry: Some(pb::RetryConfig { max_attempts: 1, backoff_ms: None, non_retryable_codes: Vec::new() }),
            ..capability_spec(&format!("orders.write.{}", side_effect as i32), side_effect)
        };
        let capability = register(cluster, leader, spec).await;
        assert!(capability.spec.is_some_and(|spec| spec.idempotent && spec.retry.is_some()));
    }

    // A state-dependent refusal is applied through the log, as it must be.
    let unknown = call!(cluster, leader, executions, submit, submit_request("no.such.capability", "{}"));
    expect_refusal(unknown, Code::NotFound, "CAPABILITY_NOT_FOUND");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn malformed_requests_are_refused_with_a_domain_code_and_never_reach_the_log() {
    let cluster = Cluster::start(3).await;
    let leader = cluster.wait_for_leader().await;
    let follower = cluster.follower().await;
    malformed_requests_are_refused_before_the_log(&cluster, leader, follower).await;
    the_same_requests_at_the_limits_are_accepted(&cluster, leader, follower).await;
    cluster.wait_converged().await;
}
