//! SPEC §7 through gRPC: malformed requests are refused with INVALID_ARGUMENT
//! and a stable domain code, on the leader and on a follower, and none of
//! them reaches the replicated log. An ill-formed actor (kind 99, an id over
//! the limit) is INVALID_ARGUMENT too, not UNAUTHENTICATED (issue #23,
//! docs/decisions.md).

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
        watch.refused(&on("actor kind 99"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;

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
            terms_hash: None,
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
        watch.refused(&on("long actor id"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;
        let submit =
            pb::SubmitRequest { actor: Some(user(&"x".repeat(10 * 1024))), ..submit_request("docs.read", "{}") };
        let result = call!(cluster, via, executions, submit, submit);
        watch.refused(&on("10 KB actor id"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;
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
            terms_hash: None,
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

// ------------------------------------------------------------------------
// Every stateless check `gavel_core::precheck` makes, one case per check,
// refused before the log (issue 10, item 6). Kept apart from the tests above:
// a check that fires only at apply shows up here as a log entry. The cases
// the first test already sends (oversized and malformed input, long ids of
// executions, workers and queues, poll bounds, reasons, comments, six
// registration problems) are not repeated.

/// Year 9999 in Unix milliseconds (`gavel_core::limits::TIMESTAMP_MS_MAX`).
const YEAR_9999_MS: i64 = 253_402_300_799_999;
/// Longest approval validity (`gavel_core::limits::APPROVAL_EXPIRES_IN_MS_MAX`).
const APPROVAL_VALIDITY_MS_MAX: i64 = 30 * 24 * 60 * 60 * 1000;
/// Longest free text (`gavel_core::limits::TEXT_BYTES_MAX`).
const TEXT_BYTES_MAX: usize = 4 * 1024;
/// A fixed requested-at time for the approval cases.
const REQUESTED_AT_MS: i64 = 1_700_000_000_000;

/// JSON that is not I-JSON (RFC 7493), with the JSON Pointer its refusal
/// must name: numbers a double cannot hold exactly (each would otherwise be
/// stored, shown and run as another number, or as `null`), a duplicated key,
/// a lone surrogate.
fn not_i_json() -> Vec<(String, &'static str)> {
    vec![
        (r#"{"order_id":1234567890123456789}"#.to_string(), "/order_id"),
        (r#"{"order":{"lines":[{},{},{},{"qty":9007199254740993}]}}"#.to_string(), "/order/lines/3/qty"),
        (r#"{"n":-9007199254740992}"#.to_string(), "/n"),
        (r#"{"tiny":1e-400}"#.to_string(), "/tiny"),
        (r#"{"amount":1e400}"#.to_string(), "/amount"),
        (format!(r#"{{"n":[{}]}}"#, "9".repeat(400)), "/n/0"),
        (r#"{"a/b":{"c~d":1,"c~d":2}}"#.to_string(), "/a~1b/c~0d"),
        (r#"{"s":["\ud800"]}"#.to_string(), "/s/0"),
    ]
}

/// Asserts that a refusal's message says the JSON is not I-JSON and names `pointer`.
#[track_caller]
fn names_pointer(what: &str, message: &str, pointer: &str) {
    assert!(message.contains("not I-JSON (RFC 7493)"), "{what}: {message}");
    assert!(message.contains(&format!(" at {pointer}")), "{what}: {pointer} is not named in {message:?}");
}

fn record_event_request(payload_json: &str) -> pb::RecordEventRequest {
    pb::RecordEventRequest {
        request_id: request_id("event"),
        r#type: "policy.checked".to_string(),
        actor: Some(user("alice")),
        payload_json: Some(payload_json.to_string()),
        ..pb::RecordEventRequest::default()
    }
}

fn failed(code: String, message: String) -> Option<pb::report_request::Outcome> {
    Some(pb::report_request::Outcome::Failed(pb::ReportFailed { code, message, retryable: false }))
}

/// An approval request with a fixed requested-at and the given expiry.
fn expiring_at(id: &str, expires_at_ms: i64) -> pb::CreateApprovalRequest {
    pb::CreateApprovalRequest {
        requested_at_ms: Some(REQUESTED_AT_MS),
        expires_at_ms: Some(expires_at_ms),
        ..create_approval_request(id)
    }
}

async fn every_precheck_refusal_is_made_before_the_log(cluster: &Cluster, leader: u64, follower: u64) {
    let watch = LogWatch::start(cluster, leader).await;
    let applied_before = watch.before.last_applied_index;
    let long_text = "t".repeat(TEXT_BYTES_MAX + 1);
    let many: Vec<String> = (0..65).map(|i| format!("item-{i}")).collect();

    for via in [leader, follower] {
        let on = |what: &str| format!("{what} (through node {via})");

        // JSON that is not I-JSON, wherever a client sends JSON: refused
        // with the field's code, naming the JSON Pointer.
        for (input, pointer) in not_i_json() {
            let what = on(&format!("submit input {input:.60}"));
            let result = call!(cluster, via, executions, submit, submit_request("docs.read", &input));
            let status = watch.refused(&what, result, Code::InvalidArgument, "INPUT_INVALID").await;
            names_pointer(&what, status.message(), pointer);
            let resume = pb::ResumeRequest {
                request_id: request_id("resume"),
                approval_id: "apr-1".to_string(),
                execution_id: None,
                input_json: Some(input.clone()),
            };
            let result = call!(cluster, via, executions, resume, resume);
            let what = on(&format!("resume input {input:.60}"));
            let status = watch.refused(&what, result, Code::InvalidArgument, "INPUT_INVALID").await;
            names_pointer(&what, status.message(), pointer);
            let approval = pb::CreateApprovalRequest { input_json: input.clone(), ..create_approval_request("apr-nf") };
            let result = call!(cluster, via, approvals, create_approval, approval);
            let what = on(&format!("approval input {input:.60}"));
            let status = watch.refused(&what, result, Code::InvalidArgument, "INVALID_ARGUMENT").await;
            names_pointer(&what, status.message(), pointer);
            let result = call!(cluster, via, workers, report, report_request(completed(input.clone())));
            let what = on(&format!("reported output {input:.60}"));
            let status = watch.refused(&what, result, Code::InvalidArgument, "INVALID_ARGUMENT").await;
            names_pointer(&what, status.message(), pointer);
            let result = call!(cluster, via, audit, record_event, record_event_request(&input));
            let what = on(&format!("event payload {input:.60}"));
            let status = watch.refused(&what, result, Code::InvalidArgument, "INVALID_ARGUMENT").await;
            names_pointer(&what, status.message(), pointer);
        }

        // Approvals: a wrong input hash and the validity window.
        let approval = pb::CreateApprovalRequest { input_hash: Some("0".repeat(64)), ..create_approval_request("h") };
        let result = call!(cluster, via, approvals, create_approval, approval);
        let status = watch.refused(&on("wrong inputHash"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;
        assert!(status.message().contains("does not match"), "{}", status.message());
        let result = call!(cluster, via, approvals, create_approval, expiring_at("apr-early", REQUESTED_AT_MS - 1));
        let status =
            watch.refused(&on("expiresAt before requestedAt"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;
        assert!(status.message().contains("before requestedAt"), "{}", status.message());
        let result = call!(cluster, via, approvals, create_approval, expiring_at("apr-9999", YEAR_9999_MS));
        let status = watch.refused(&on("expiresAt in 9999"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;
        assert!(status.message().contains("over the limit"), "{}", status.message());
        let approval = pb::CreateApprovalRequest {
            caller_now_ms: Some(REQUESTED_AT_MS),
            expires_at_ms: Some(REQUESTED_AT_MS + APPROVAL_VALIDITY_MS_MAX + 1),
            ..create_approval_request("apr-31-days")
        };
        let result = call!(cluster, via, approvals, create_approval, approval);
        watch
            .refused(&on("expiresAt 30 days + 1 ms after callerNow"), result, Code::InvalidArgument, "INVALID_ARGUMENT")
            .await;
        for expires_in_ms in [0, APPROVAL_VALIDITY_MS_MAX as u64 + 1] {
            let approval =
                pb::CreateApprovalRequest { expires_in_ms: Some(expires_in_ms), ..create_approval_request("apr-in") };
            let result = call!(cluster, via, approvals, create_approval, approval);
            let what = on(&format!("expiresInMs {expires_in_ms}"));
            watch.refused(&what, result, Code::InvalidArgument, "INVALID_ARGUMENT").await;
        }

        // Approvals: the other fields.
        let approval = pb::CreateApprovalRequest { capability_id: long_id(), ..create_approval_request("apr-cap") };
        let result = call!(cluster, via, approvals, create_approval, approval);
        watch.refused(&on("long approval capability id"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;
        let approval = pb::CreateApprovalRequest { surface: long_text.clone(), ..create_approval_request("apr-s") };
        let result = call!(cluster, via, approvals, create_approval, approval);
        watch.refused(&on("long approval surface"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;
        let approval = pb::CreateApprovalRequest { types: many.clone(), ..create_approval_request("apr-types") };
        let result = call!(cluster, via, approvals, create_approval, approval);
        watch.refused(&on("65 types"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;
        let approval = pb::CreateApprovalRequest { actor: Some(user(&long_id())), ..create_approval_request("apr-a") };
        let result = call!(cluster, via, approvals, create_approval, approval);
        watch.refused(&on("long requester id"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;
        let approval = pb::CreateApprovalRequest { input_json: "{oops".to_string(), ..create_approval_request("a") };
        let result = call!(cluster, via, approvals, create_approval, approval);
        watch.refused(&on("malformed approval input"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;
        let decide = pb::DecideApprovalRequest {
            request_id: request_id("decide"),
            id: long_id(),
            status: pb::ApprovalStatus::Approved as i32,
            approver: Some(user("bob")),
            ..pb::DecideApprovalRequest::default()
        };
        let result = call!(cluster, via, approvals, decide_approval, decide.clone());
        watch.refused(&on("long decided approval id"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;
        let decide = pb::DecideApprovalRequest { id: "apr-1".to_string(), approver: Some(user(&long_id())), ..decide };
        let result = call!(cluster, via, approvals, decide_approval, decide);
        watch.refused(&on("long approver id"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;
        let consume = pb::ConsumeApprovalRequest {
            request_id: request_id("consume"),
            caller_now_ms: None,
            id: long_id(),
            execution_id: "ex-1".to_string(),
        };
        let result = call!(cluster, via, approvals, consume_approval, consume);
        watch.refused(&on("long consumed approval id"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;
        let cancel = pb::CancelApprovalRequest { request_id: request_id("cancel"), caller_now_ms: None, id: long_id() };
        let result = call!(cluster, via, approvals, cancel_approval, cancel);
        watch.refused(&on("long cancelled approval id"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;

        // Executions.
        let submit = pb::SubmitRequest { surface: long_text.clone(), ..submit_request("docs.read", "{}") };
        let result = call!(cluster, via, executions, submit, submit);
        watch.refused(&on("long submit surface"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;
        let resume = pb::ResumeRequest {
            request_id: request_id("resume"),
            approval_id: "apr-1".to_string(),
            execution_id: Some(long_id()),
            input_json: None,
        };
        let result = call!(cluster, via, executions, resume, resume);
        watch.refused(&on("long resumed execution id"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;
        let resume = pb::ResumeRequest {
            request_id: request_id("resume"),
            approval_id: "apr-1".to_string(),
            execution_id: None,
            input_json: Some("[1,".to_string()),
        };
        let result = call!(cluster, via, executions, resume, resume);
        watch.refused(&on("malformed resume input"), result, Code::InvalidArgument, "INPUT_INVALID").await;
        let cancel = pb::CancelExecutionRequest {
            request_id: request_id("cancel"),
            execution_id: "ex-1".to_string(),
            actor: Some(user(&long_id())),
        };
        let result = call!(cluster, via, executions, cancel_execution, cancel);
        watch.refused(&on("long canceller id"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;

        // Reports of a failure.
        let result = call!(cluster, via, workers, report, report_request(failed(long_id(), "m".to_string())));
        watch.refused(&on("long error code"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;
        let result = call!(cluster, via, workers, report, report_request(failed("E".to_string(), long_text.clone())));
        watch.refused(&on("long error message"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;

        // Registrations: the bounds the six-problem case does not reach.
        let read = || capability_spec("docs.read", pb::SideEffect::Read);
        let retry = |max_attempts, backoff_ms, non_retryable_codes| {
            Some(pb::RetryConfig { max_attempts, backoff_ms, non_retryable_codes })
        };
        let specs = [
            ("retry.maxAttempts 101", pb::CapabilitySpec { retry: retry(101, None, Vec::new()), ..read() }),
            (
                "retry.backoffMs over an hour",
                pb::CapabilitySpec { retry: retry(1, Some(3_600_001), Vec::new()), ..read() },
            ),
            ("65 non-retryable codes", pb::CapabilitySpec { retry: retry(1, None, many.clone()), ..read() }),
            ("timeoutMs over a day", pb::CapabilitySpec { timeout_ms: Some(24 * 60 * 60 * 1000 + 1), ..read() }),
            (
                "long approval type",
                pb::CapabilitySpec {
                    approval: Some(pb::ApprovalPolicy {
                        required: true,
                        r#type: Some(long_text.clone()),
                        expires_in_ms: None,
                    }),
                    ..read()
                },
            ),
            ("long queue id", pb::CapabilitySpec { queue: Some(long_id()), ..read() }),
            ("65 tags", pb::CapabilitySpec { tags: many.clone(), ..read() }),
            ("no side effect", pb::CapabilitySpec { side_effect: pb::SideEffect::Unspecified as i32, ..read() }),
        ];
        for (what, spec) in specs {
            let result = call!(cluster, via, capabilities, register_capability, register_request(spec));
            watch.refused(&on(what), result, Code::InvalidArgument, "CAPABILITY_INVALID").await;
        }
    }

    let after = cluster.status(leader).await.expect("leader status");
    assert_eq!(after.term, watch.before.term, "no election during the batch");
    assert_eq!(after.last_applied_index, applied_before, "no refused request was applied");
    assert_eq!(after.state_hash, watch.before.state_hash, "the state machine saw none of them");
}

/// The same fields at their limits, and numbers a double holds exactly, are accepted.
async fn the_precheck_limits_accept_what_they_should(cluster: &Cluster, leader: u64, follower: u64) {
    register(cluster, follower, capability_spec("docs.read", pb::SideEffect::Read)).await;
    for (index, input) in
        [r#"{"amount":1e308}"#, r#"{"amount":9007199254740991}"#, "-1.7976931348623157e308"].into_iter().enumerate()
    {
        let submit =
            pb::SubmitRequest { execution_id: Some(format!("ex-big-{index}")), ..submit_request("docs.read", input) };
        let response =
            call!(cluster, leader, executions, submit, submit).unwrap_or_else(|status| panic!("{input}: {status:?}"));
        assert!(response.created, "{input}");
    }
    let exactly_30_days = expiring_at("apr-30-days", REQUESTED_AT_MS + APPROVAL_VALIDITY_MS_MAX);
    let (_, hash) = gavel_core::canonical_json::input_hash(&exactly_30_days.input_json).expect("valid input");
    let approval = pb::CreateApprovalRequest { input_hash: Some(hash), ..exactly_30_days };
    let response = call!(cluster, follower, approvals, create_approval, approval).expect("30 days and the right hash");
    let approval = response.approval.expect("the approval");
    assert_eq!(approval.expires_at_ms, REQUESTED_AT_MS + APPROVAL_VALIDITY_MS_MAX);
    let approval = pb::CreateApprovalRequest {
        expires_in_ms: Some(APPROVAL_VALIDITY_MS_MAX as u64),
        ..create_approval_request("apr-in-30-days")
    };
    call!(cluster, leader, approvals, create_approval, approval).expect("expiresInMs of exactly 30 days");
}

/// Runs `gavel ARGS...` against the cluster; returns the exit code and standard error.
async fn gavel_cli(cluster: &Cluster, args: &[&str]) -> (i32, String) {
    let endpoints = cluster.running().into_iter().map(|id| cluster.addr(id)).collect::<Vec<_>>().join(",");
    let output = support::run_gavel(&endpoints, args, &[]).await;
    (output.status.code().unwrap_or(-1), String::from_utf8_lossy(&output.stderr).into_owned())
}

/// The Rust SDK and the CLI refuse JSON that is not I-JSON before sending,
/// with the cluster's code and message; numbers at the edge of the safe
/// range reach the worker as written, and so does the output it reports.
async fn json_the_sdk_and_the_cli_refuse_and_exact_numbers_reach_the_worker(
    cluster: &Cluster,
    leader: u64,
    follower: u64,
) {
    let endpoints: Vec<String> = cluster.running().into_iter().map(|id| cluster.addr(id)).collect();
    let client = gavel_client::Client::new(&endpoints).expect("client");
    register(cluster, leader, capability_spec("numbers.read", pb::SideEffect::Read)).await;
    let watch = LogWatch::start(cluster, cluster.wait_for_leader().await).await;

    // The SDK refuses what the cluster refuses, with its code and the very
    // same message, and sends nothing (the log does not grow).
    for (input, pointer) in not_i_json() {
        let submit = submit_request("numbers.read", &input);
        let server = call!(cluster, follower, executions, submit, submit.clone()).expect_err("the cluster refuses");
        let sdk = client.submit(submit).await.expect_err("the SDK refuses");
        assert_eq!((sdk.code(), sdk.to_string()), ("INPUT_INVALID", format!("INPUT_INVALID: {}", server.message())));
        names_pointer("sdk submit", &sdk.to_string(), pointer);
        let approval = pb::CreateApprovalRequest { input_json: input.clone(), ..create_approval_request("apr-sdk") };
        let sdk = client.create_approval(approval).await.expect_err("the SDK refuses");
        assert_eq!(sdk.code(), "INVALID_ARGUMENT", "{sdk}");
        names_pointer("sdk approval", &sdk.to_string(), pointer);
        let sdk = client.record_event(record_event_request(&input)).await.expect_err("the SDK refuses");
        assert_eq!(sdk.code(), "INVALID_ARGUMENT", "{sdk}");
        names_pointer("sdk event", &sdk.to_string(), pointer);
    }
    let now = cluster.status(watch.leader).await.expect("leader status");
    assert_eq!(now.last_log_index, watch.before.last_log_index, "a refused request reached the log");

    // The CLI goes through the SDK: exit 3 (refused), the code and the pointer.
    let nested = r#"{"order":{"lines":[{},{},{},{"qty":9007199254740993}]}}"#;
    let (code, stderr) =
        gavel_cli(cluster, &["exec", "submit", "numbers.read", "--input", nested, "--as", "alice"]).await;
    assert_eq!(code, 3, "{stderr}");
    assert!(stderr.contains("INPUT_INVALID: input is not I-JSON (RFC 7493)"), "{stderr}");
    names_pointer("cli submit", &stderr, "/order/lines/3/qty");
    let (code, stderr) =
        gavel_cli(cluster, &["audit", "record", "policy.checked", "--payload", r#"{"limit":1e400}"#]).await;
    assert_eq!(code, 3, "{stderr}");
    assert!(stderr.contains("INVALID_ARGUMENT: payload is not I-JSON (RFC 7493)"), "{stderr}");
    names_pointer("cli payload", &stderr, "/limit");

    // The edge of the safe range, submitted with the CLI, reaches the
    // worker unchanged; so does the output it reports.
    let edge = r#"{"id":9007199254740991,"low":-9007199254740991,"price":0.1,"big":1.5e300,"zero":-0}"#;
    let args = ["exec", "submit", "numbers.read", "--input", edge, "--id", "ex-edge", "--as", "alice"];
    let (code, stderr) = gavel_cli(cluster, &args).await;
    assert_eq!(code, 0, "{stderr}");
    let poll = pb::PollRequest { wait_ms: 10_000, ..poll_request(vec!["numbers.read".to_string()], 1) };
    let tasks = client.poll(poll).await.expect("poll").tasks;
    assert_eq!(tasks.len(), 1, "{tasks:?}");
    let task = &tasks[0];
    assert_eq!(task.execution_id, "ex-edge");
    assert_eq!(
        task.input_json,
        r#"{"big":1.5e+300,"id":9007199254740991,"low":-9007199254740991,"price":0.1,"zero":0}"#
    );
    let input: serde_json::Value = serde_json::from_str(&task.input_json).expect("JSON");
    assert_eq!(input["id"].as_u64(), Some(9_007_199_254_740_991));
    let lease = task.lease.clone().expect("a lease");
    let report = |output_json: &str| pb::ReportRequest {
        request_id: request_id("report"),
        lease_id: lease.lease_id,
        worker_id: lease.worker_id.clone(),
        outcome: completed(output_json.to_string()),
    };
    let refused = client.report(report(r#"{"total":18446744073709551615}"#)).await.expect_err("the SDK refuses");
    assert_eq!(refused.code(), "INVALID_ARGUMENT", "{refused}");
    names_pointer("sdk output", &refused.to_string(), "/total");
    client.report(report(r#"{"total":9007199254740991}"#)).await.expect("the exact output is reported");
    let execution = cluster.get_execution(follower, "ex-edge").await.expect("the execution");
    let output = match execution.result.and_then(|result| result.outcome) {
        Some(pb::result_envelope::Outcome::Completed(completed)) => completed.output_json,
        other => panic!("not completed: {other:?}"),
    };
    assert_eq!(output, r#"{"total":9007199254740991}"#);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_stateless_precheck_refusal_leaves_the_log_as_it_was() {
    let cluster = Cluster::start(3).await;
    let leader = cluster.wait_for_leader().await;
    let follower = cluster.follower().await;
    every_precheck_refusal_is_made_before_the_log(&cluster, leader, follower).await;
    the_precheck_limits_accept_what_they_should(&cluster, leader, follower).await;
    json_the_sdk_and_the_cli_refuse_and_exact_numbers_reach_the_worker(&cluster, leader, follower).await;
    cluster.wait_converged().await;
}

// ===== Transport-level bad input and audit cursors (the gRPC shell) =====
//
// Refusals tonic makes before any handler runs, and cursors that name events
// which do not exist. Each is refused with a domain code and leaves the log
// as it was.

/// A `SubmitRequest` whose string fields are raw bytes, so a test can send
/// what no well-behaved client would: invalid UTF-8 in a string field.
#[derive(Clone, PartialEq, prost::Message)]
struct RawSubmitRequest {
    #[prost(string, tag = "1")]
    request_id: String,
    #[prost(string, tag = "3")]
    capability_id: String,
    #[prost(bytes = "vec", tag = "4")]
    input_json: Vec<u8>,
    #[prost(message, optional, tag = "5")]
    actor: Option<pb::Actor>,
}

/// A gRPC codec that sends a message already encoded (any bytes at all)
/// and decodes the answer as `pb::SubmitResponse`.
#[derive(Default)]
struct RawCodec;

impl tonic::codec::Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = pb::SubmitResponse;
    type Encoder = RawCodec;
    type Decoder = RawCodec;

    fn encoder(&mut self) -> RawCodec {
        RawCodec
    }

    fn decoder(&mut self) -> RawCodec {
        RawCodec
    }
}

impl tonic::codec::Encoder for RawCodec {
    type Item = Vec<u8>;
    type Error = Status;

    fn encode(&mut self, item: Vec<u8>, dst: &mut tonic::codec::EncodeBuf<'_>) -> Result<(), Status> {
        prost::bytes::BufMut::put_slice(dst, &item);
        Ok(())
    }
}

impl tonic::codec::Decoder for RawCodec {
    type Item = pb::SubmitResponse;
    type Error = Status;

    fn decode(&mut self, src: &mut tonic::codec::DecodeBuf<'_>) -> Result<Option<pb::SubmitResponse>, Status> {
        prost::Message::decode(src).map(Some).map_err(|error| Status::internal(error.to_string()))
    }
}

/// Sends a raw submit to node `via`, as a hand-rolled gRPC client would.
async fn raw_submit(cluster: &Cluster, via: u64, request: RawSubmitRequest) -> Result<pb::SubmitResponse, Status> {
    let encoded = prost::Message::encode_to_vec(&request);
    retry(|| {
        let mut grpc = tonic::client::Grpc::new(cluster.channel(via));
        let encoded = encoded.clone();
        async move {
            grpc.ready().await.map_err(|error| Status::unavailable(error.to_string()))?;
            let path = tonic::codegen::http::uri::PathAndQuery::from_static("/gavel.v1.ExecutionService/Submit");
            grpc.unary(tonic::Request::new(encoded), path, RawCodec).await
        }
    })
    .await
    .map(tonic::Response::into_inner)
}

/// Largest request message a node decodes (`gavel_server::routing::REQUEST_BYTES_MAX`).
const REQUEST_BYTES_MAX: usize = 4 * 1024 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn undecodable_and_oversized_messages_are_bad_input_with_a_domain_code() {
    let cluster = Cluster::start(3).await;
    let leader = cluster.wait_for_leader().await;
    let follower = cluster.follower().await;
    let watch = LogWatch::start(&cluster, leader).await;

    for via in [leader, follower] {
        let on = |what: &str| format!("{what} (through node {via})");

        let raw = RawSubmitRequest {
            request_id: request_id("raw"),
            capability_id: "docs.read".to_string(),
            input_json: b"{\"note\":\"\xff\xfe\"}".to_vec(),
            actor: Some(user("alice")),
        };
        let result = raw_submit(&cluster, via, raw).await;
        let status =
            watch.refused(&on("invalid UTF-8 in inputJson"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;
        assert!(status.message().contains("UTF-8"), "the refusal says what is wrong: {}", status.message());

        let oversized = json_of_size(REQUEST_BYTES_MAX + 1024);
        let result = call!(cluster, via, executions, submit, submit_request("docs.read", &oversized));
        let status =
            watch.refused(&on("a message over 4 MiB"), result, Code::InvalidArgument, "INVALID_ARGUMENT").await;
        assert!(
            status.message().contains(&REQUEST_BYTES_MAX.to_string()),
            "the refusal names the limit: {}",
            status.message()
        );
    }
    let after = cluster.status(leader).await.expect("leader status");
    assert_eq!(after.last_applied_index, watch.before.last_applied_index, "no refused request was applied");
    cluster.wait_converged().await;
}

/// The next event of a stream, within [`support::WAIT`].
async fn next_event(stream: &mut tonic::Streaming<pb::Event>) -> pb::Event {
    let next = tokio::time::timeout(support::WAIT, stream.message()).await.expect("an event in time");
    next.expect("the stream is healthy").expect("the stream delivers the next event")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cursors_past_the_head_are_refused_naming_it_and_one_past_reads_from_now_on() {
    let cluster = Cluster::start(3).await;
    let leader = cluster.wait_for_leader().await;
    let follower = cluster.follower().await;
    for index in 0..3 {
        register(&cluster, leader, capability_spec(&format!("docs.read.{index}"), pb::SideEffect::Read)).await;
    }
    // The first events start the retention clock: let its first tick commit
    // before watching the log (the next one is a minute away).
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    cluster.wait_converged().await;
    let page = call!(cluster, leader, audit, list_events, pb::ListEventsRequest::default()).expect("list events");
    let head = page.last_cursor;
    assert_eq!(page.events.len(), 3, "one event per registration: {page:?}");
    assert_eq!(page.events.last().map(|event| event.cursor), Some(head));

    let watch = LogWatch::start(&cluster, leader).await;
    for via in [leader, follower] {
        let on = |what: &str| format!("{what} (through node {via})");
        for cursor in [head + 2, 999_999, u64::MAX] {
            let list = pb::ListEventsRequest { after_cursor: cursor, ..pb::ListEventsRequest::default() };
            let result = call!(cluster, via, audit, list_events, list);
            let what = on(&format!("ListEvents after {cursor}"));
            let status = watch.refused(&what, result, Code::OutOfRange, "OUT_OF_RANGE").await;
            assert!(status.message().contains(&format!("last event is cursor {head}")), "{what}: {}", status.message());
            assert!(!status.message().contains("retention"), "{what}: {}", status.message());

            let list = pb::ListExecutionEventsRequest {
                execution_id: "ex-none".to_string(),
                after_cursor: cursor,
                ..pb::ListExecutionEventsRequest::default()
            };
            let result = call!(cluster, via, executions, list_execution_events, list);
            let what = on(&format!("ListExecutionEvents after {cursor}"));
            let status = watch.refused(&what, result, Code::OutOfRange, "OUT_OF_RANGE").await;
            assert!(status.message().contains(&format!("last event is cursor {head}")), "{what}: {}", status.message());

            let request = pb::WatchEventsRequest { after_cursor: cursor, execution_id: None };
            let result = call!(cluster, via, audit, watch_events, request);
            let what = on(&format!("WatchEvents after {cursor}"));
            let status = watch.refused(&what, result, Code::OutOfRange, "OUT_OF_RANGE").await;
            assert!(status.message().contains(&format!("last event is cursor {head}")), "{what}: {}", status.message());
        }

        // The head and one past it (the next event's cursor) are "from now on",
        // and the cursor to follow never skips the next event.
        for cursor in [head, head + 1] {
            let list = pb::ListEventsRequest { after_cursor: cursor, ..pb::ListEventsRequest::default() };
            let page = call!(cluster, via, audit, list_events, list).expect("a cursor up to one past the head");
            assert!(page.events.is_empty(), "{page:?}");
            assert_eq!(page.last_cursor, head, "{}", on(&format!("lastCursor after {cursor}")));
        }
    }
    let after = cluster.status(leader).await.expect("leader status");
    assert_eq!(after.last_applied_index, watch.before.last_applied_index, "no refused cursor was applied");

    // A stream from one past the head, on a follower, starts with the next event.
    let request = pb::WatchEventsRequest { after_cursor: head + 1, execution_id: None };
    let mut stream = call!(cluster, follower, audit, watch_events, request).expect("watch from now on");
    register(&cluster, leader, capability_spec("docs.read.next", pb::SideEffect::Read)).await;
    let next = next_event(&mut stream).await;
    assert_eq!(next.cursor, head + 1, "nothing is skipped: {next:?}");
    cluster.wait_converged().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lagging_follower_does_not_refuse_a_cursor_the_leader_handed_out() {
    let mut cluster = Cluster::start(3).await;
    let leader = cluster.wait_for_leader().await;
    let follower = cluster.follower().await;
    register(&cluster, leader, capability_spec("docs.read.0", pb::SideEffect::Read)).await;
    cluster.wait_converged().await;

    // The follower misses events while it is stopped; the leader hands out
    // their cursors meanwhile.
    cluster.pause(follower);
    for index in 1..4 {
        register(&cluster, leader, capability_spec(&format!("docs.read.{index}"), pb::SideEffect::Read)).await;
    }
    let page = call!(cluster, leader, audit, list_events, pb::ListEventsRequest::default()).expect("list events");
    let head = page.last_cursor;

    // Ask the stopped follower for the leader's head, then let it run: the
    // request and its catch-up race, and the answer must not be a refusal.
    let request = pb::WatchEventsRequest { after_cursor: head, execution_id: None };
    let mut client = cluster.audit(follower);
    let watching = tokio::spawn(async move { client.watch_events(request).await });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    cluster.resume(follower);
    let mut stream =
        watching.await.expect("the watch task").expect("the follower accepts the leader's cursor").into_inner();

    register(&cluster, leader, capability_spec("docs.read.next", pb::SideEffect::Read)).await;
    let next = next_event(&mut stream).await;
    assert_eq!(next.cursor, head + 1, "{next:?}");
    cluster.wait_converged().await;
}
