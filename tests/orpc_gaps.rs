//! What orpc-agent needs from the server, over the wire: a secure 3-node
//! cluster of real `gavel node` processes (kit-made CA, real TLS), driven
//! through the Rust SDK as the principals an orpc-agent deployment uses.
//!
//! - actor attributes round-trip on approvals, executions and worker tasks,
//!   read back through every node, and over-limit ones are refused;
//! - a task carries its execution's surface;
//! - a refused decide or consume says the approval's status and consumer in
//!   the error detail, also when the call was forwarded by a follower;
//! - `AuditService.RecordEvent` appends an application event that every node
//!   serves (list, get, watch, per-execution), marked with the recording
//!   principal, refused to non-submitters, deduplicated by request id;
//! - `gavel audit record` (against an insecure cluster) appends one and
//!   refuses what the server refuses.
//!
//! Needs the debug binary (`cargo build -p gavel-cli`).

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use gavel_client::{pb, Client, ClientConfig, Error};
use gavel_core::GrantName;
use gavel_pki::Principal;
use gavel_testkit::Cluster;
use tonic::Code;

use support::WAIT;

fn principal(text: &str) -> Principal {
    Principal::parse(text).unwrap_or_else(|error| panic!("{text}: {error}"))
}

fn attributes(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(key, value)| (key.to_string(), value.to_string())).collect()
}

/// Alice, a user of the agent app, with the attributes orpc-agent gives her.
fn alice() -> pb::Actor {
    pb::Actor {
        id: "alice".into(),
        kind: pb::ActorKind::User as i32,
        attributes: attributes(&[("tenant", "acme"), ("plan", "pro")]),
        ..pb::Actor::default()
    }
}

/// A secure cluster with the principals of an orpc-agent deployment:
/// `service:agent` (submitter, act-for), `user:approver` (approver),
/// `worker:w1` (worker) and `user:admin`, the bootstrap admin, also auditor.
struct Deployment {
    cluster: Cluster,
    _dir: tempfile::TempDir,
}

impl Deployment {
    async fn start() -> Deployment {
        let dir = tempfile::tempdir().expect("temp dir");
        let cluster = support::start_secure(dir.path()).await;
        let grants: [(&str, &[GrantName]); 4] = [
            ("user:admin", &[GrantName::Auditor]),
            ("service:agent", &[GrantName::Submitter, GrantName::ActFor]),
            ("user:approver", &[GrantName::Approver]),
            ("worker:w1", &[GrantName::Worker]),
        ];
        for (who, names) in grants {
            cluster.grant(&principal(who), names, WAIT).await.unwrap_or_else(|error| panic!("{who}: {error}"));
        }
        let deployment = Deployment { cluster, _dir: dir };
        let capabilities = [
            pb::CapabilitySpec { id: "orpc.search".into(), ..capability(pb::SideEffect::Read) },
            pb::CapabilitySpec {
                id: "orpc.refund".into(),
                approval: Some(pb::ApprovalPolicy { required: true, ..pb::ApprovalPolicy::default() }),
                ..capability(pb::SideEffect::Write)
            },
        ];
        for spec in capabilities {
            let request =
                pb::RegisterCapabilityRequest { spec: Some(spec), ..pb::RegisterCapabilityRequest::default() };
            deployment.client("user:admin").register_capability(request).await.expect("the admin registers");
        }
        deployment
    }

    /// A client authenticated by a certificate for `who`, following the leader.
    fn client(&self, who: &str) -> Client {
        let config = self.cluster.client_config_as(&principal(who)).expect("a client certificate");
        Client::with_config(&self.cluster.addrs(), config).expect("a client")
    }

    /// A client for `who` that sends every call to node `id` (a follower
    /// forwards writes to the leader and serves nothing stale).
    fn client_through(&self, who: &str, id: u64) -> Client {
        let config = ClientConfig {
            follow_leader: false,
            ..self.cluster.client_config_as(&principal(who)).expect("a client certificate")
        };
        Client::with_config(&[self.cluster.addr(id).expect("a node").to_string()], config).expect("a client")
    }

    async fn follower(&self) -> u64 {
        let leader = self.cluster.wait_for_leader(WAIT).await.expect("a leader");
        self.cluster.ids().into_iter().find(|id| *id != leader).expect("three nodes")
    }
}

fn capability(side_effect: pb::SideEffect) -> pb::CapabilitySpec {
    pb::CapabilitySpec { side_effect: side_effect as i32, risk: pb::Risk::Low as i32, ..pb::CapabilitySpec::default() }
}

fn refused(result: Result<impl std::fmt::Debug, Error>, code: Code, domain_code: &str) -> Error {
    let error = result.expect_err("the call is refused");
    match &error {
        Error::Domain { status, code: got, .. } => {
            assert_eq!((*status, got.as_str()), (code, domain_code), "{error:?}");
        }
        other => panic!("expected a {domain_code} refusal, got {other:?}"),
    }
    error
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn attributes_surface_and_refusal_details_travel_over_the_wire() {
    let deployment = Deployment::start().await;
    let agent = deployment.client("service:agent");
    let follower = deployment.follower().await;

    // An execution submitted for alice keeps her attributes; its task carries them and the surface.
    let submit = pb::SubmitRequest {
        execution_id: Some("exec-attrs".into()),
        capability_id: "orpc.search".into(),
        input_json: r#"{"q":"refund policy"}"#.into(),
        actor: Some(alice()),
        surface: "agent:refunds".into(),
        ..pb::SubmitRequest::default()
    };
    let submitted = match agent.submit(submit).await.expect("submit").outcome {
        Some(pb::submit_response::Outcome::Execution(execution)) => execution,
        other => panic!("expected an execution, got {other:?}"),
    };
    assert_eq!(submitted.actor.expect("an actor").attributes, alice().attributes);
    let read = deployment
        .client_through("service:agent", follower)
        .get_execution(pb::GetExecutionRequest { execution_id: "exec-attrs".into() })
        .await
        .expect("get execution")
        .execution
        .expect("the execution");
    assert_eq!(read.actor.expect("an actor").attributes, alice().attributes);
    let poll =
        pb::PollRequest { queues: vec!["orpc.search".into()], max_tasks: 1, wait_ms: 5_000, ..Default::default() };
    let task = deployment.client("worker:w1").poll(poll).await.expect("poll").tasks.pop().expect("a task");
    assert_eq!(task.execution_id, "exec-attrs");
    assert_eq!(task.surface, "agent:refunds");
    assert_eq!(task.actor.expect("an actor").attributes, alice().attributes);

    // An approval for alice keeps her attributes, read back through a follower.
    let create = pb::CreateApprovalRequest {
        id: "apr-orpc".into(),
        capability_id: "orpc.refund".into(),
        surface: "agent:refunds".into(),
        actor: Some(alice()),
        input_json: r#"{"amount":40,"order":"o-7"}"#.into(),
        risk: pb::Risk::High as i32,
        side_effect: pb::SideEffect::Write as i32,
        ..pb::CreateApprovalRequest::default()
    };
    agent.create_approval(create).await.expect("create approval");
    let read = deployment
        .client_through("service:agent", follower)
        .get_approval(pb::GetApprovalRequest { id: "apr-orpc".into(), caller_now_ms: None })
        .await
        .expect("get approval")
        .approval
        .expect("the approval");
    assert_eq!(read.actor.expect("an actor").attributes, alice().attributes);

    // Deciding twice: the second refusal names the status it found.
    let decide = |status: pb::ApprovalStatus| pb::DecideApprovalRequest {
        id: "apr-orpc".into(),
        status: status as i32,
        ..pb::DecideApprovalRequest::default()
    };
    let approver = deployment.client("user:approver");
    let decided = approver.decide_approval(decide(pb::ApprovalStatus::Approved)).await.expect("decide");
    let decision = decided.approval.and_then(|approval| approval.decision).expect("a decision");
    assert_eq!(decision.approver.map(|actor| actor.id), Some("approver".to_string()));
    let through_follower = deployment.client_through("user:approver", follower);
    let error = refused(
        through_follower.decide_approval(decide(pb::ApprovalStatus::Rejected)).await,
        Code::FailedPrecondition,
        "FAILED_PRECONDITION",
    );
    assert_eq!(error.approval_status(), Some(pb::ApprovalStatus::Approved), "{error:?}");
    assert_eq!(error.consumed_by_execution_id(), None);

    // Consuming twice: the second refusal names the first consumer, also through a follower.
    let consume = |execution_id: &str| pb::ConsumeApprovalRequest {
        id: "apr-orpc".into(),
        execution_id: execution_id.into(),
        ..pb::ConsumeApprovalRequest::default()
    };
    agent.consume_approval(consume("exec-first")).await.expect("the first consume");
    let error = refused(
        deployment.client_through("service:agent", follower).consume_approval(consume("exec-second")).await,
        Code::FailedPrecondition,
        "FAILED_PRECONDITION",
    );
    assert_eq!(error.approval_status(), Some(pb::ApprovalStatus::Consumed), "{error:?}");
    assert_eq!(error.consumed_by_execution_id(), Some("exec-first"));
    assert!(error.to_string().contains("consumed by exec-first"), "{error}");

    // Attributes over their limits are bad input, refused before the log.
    let too_many: BTreeMap<String, String> =
        (0..=gavel_core::limits::ATTRIBUTES_MAX).map(|index| (format!("k{index}"), "v".into())).collect();
    let submit = pb::SubmitRequest {
        execution_id: Some("exec-too-many".into()),
        capability_id: "orpc.search".into(),
        input_json: "{}".into(),
        actor: Some(pb::Actor { attributes: too_many, ..alice() }),
        ..pb::SubmitRequest::default()
    };
    let error = refused(agent.submit(submit).await, Code::InvalidArgument, "INVALID_ARGUMENT");
    assert!(error.to_string().contains("actor has invalid attributes"), "{error}");
    // Nothing was stored: the read answers as for any unknown id.
    let absent = agent.get_execution(pb::GetExecutionRequest { execution_id: "exec-too-many".into() }).await;
    refused(absent, Code::NotFound, "NOT_FOUND");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn recorded_events_are_replicated_role_checked_and_marked_with_their_principal() {
    let deployment = Deployment::start().await;
    let agent = deployment.client("service:agent");
    let auditor = deployment.client("user:admin");

    let request = pb::RecordEventRequest {
        request_id: "record-1".into(),
        r#type: "policy.denied".into(),
        actor: Some(alice()),
        execution_id: Some("exec-denied".into()),
        correlation_id: Some("corr-9".into()),
        capability_id: Some("orpc.refund".into()),
        payload_json: Some(r#"{ "rule": "amount-limit", "limit": 100 }"#.into()),
        attributes: attributes(&[("policy", "refunds")]),
        ..pb::RecordEventRequest::default()
    };
    let recorded = agent.record_event(request.clone()).await.expect("record").event.expect("the event");
    assert_eq!(recorded.r#type, "policy.denied");
    assert!(recorded.recorded_by_application);
    assert_eq!(recorded.principal.as_deref(), Some("service:agent"));
    let actor = recorded.actor.clone().expect("an actor");
    assert_eq!(actor.id, "alice");
    assert!(actor.attributes.is_empty(), "events do not copy actor attributes: {actor:?}");
    assert_eq!(recorded.payload_json.as_deref(), Some(r#"{"limit":100,"rule":"amount-limit"}"#));
    assert_eq!(recorded.attributes, attributes(&[("policy", "refunds")]));
    assert_eq!(recorded.execution_id.as_deref(), Some("exec-denied"));

    // A retry with the same request id gets the same event back; nothing is appended.
    let again = agent.record_event(request).await.expect("the retry").event.expect("the event");
    assert_eq!(again, recorded);

    // Every node serves it: by cursor, in the trail, by execution and on a watch.
    for id in deployment.cluster.ids() {
        let through = deployment.client_through("user:admin", id);
        let got = through.get_event(pb::GetEventRequest { cursor: recorded.cursor }).await.expect("get event");
        assert_eq!(got.event.as_ref(), Some(&recorded), "node {id}");
        let page = through
            .list_events(pb::ListEventsRequest {
                after_cursor: recorded.cursor - 1,
                limit: 10,
                execution_id: None,
                ..pb::ListEventsRequest::default()
            })
            .await
            .expect("list events");
        assert_eq!(page.events, vec![recorded.clone()], "node {id}: exactly one event, the retry appended none");
        let of_execution = through
            .list_execution_events(pb::ListExecutionEventsRequest {
                execution_id: "exec-denied".into(),
                after_cursor: 0,
                limit: 10,
            })
            .await
            .expect("list execution events");
        assert_eq!(of_execution.events, vec![recorded.clone()], "node {id}");
        let mut watch = through.watch_events(recorded.cursor - 1, None);
        let watched = tokio::time::timeout(Duration::from_secs(10), watch.recv()).await.expect("an event in time");
        assert_eq!(watched.expect("the stream is open").expect("no error"), recorded, "node {id}");
    }

    // Who may record: a submitter; the auditor reads only; Gavel's own types are refused.
    let error = refused(
        auditor
            .record_event(pb::RecordEventRequest {
                r#type: "policy.denied".into(),
                ..pb::RecordEventRequest::default()
            })
            .await,
        Code::PermissionDenied,
        "PERMISSION_DENIED",
    );
    assert!(error.to_string().contains("needs the submitter grant"), "{error}");
    let forged = pb::RecordEventRequest { r#type: "capability.completed".into(), ..pb::RecordEventRequest::default() };
    let error = refused(agent.record_event(forged).await, Code::InvalidArgument, "INVALID_ARGUMENT");
    assert!(error.to_string().contains("one of Gavel's own event types"), "{error}");
    let oversized = pb::RecordEventRequest {
        r#type: "capability.discovered".into(),
        payload_json: Some(format!("\"{}\"", "x".repeat(gavel_core::limits::APP_EVENT_PAYLOAD_BYTES_MAX))),
        ..pb::RecordEventRequest::default()
    };
    refused(agent.record_event(oversized).await, Code::InvalidArgument, "INVALID_ARGUMENT");
    let page = auditor
        .list_events(pb::ListEventsRequest {
            after_cursor: recorded.cursor,
            limit: 100,
            execution_id: None,
            ..pb::ListEventsRequest::default()
        })
        .await
        .expect("list events");
    assert!(
        page.events.iter().all(|event| !event.recorded_by_application),
        "refused records appended nothing: {:?}",
        page.events
    );

    // The agent as itself (no actor named) is recorded as its own actor.
    let own = pb::RecordEventRequest { r#type: "capability.discovered".into(), ..pb::RecordEventRequest::default() };
    let event = agent.record_event(own).await.expect("record").event.expect("the event");
    assert_eq!(event.actor.map(|actor| (actor.id, actor.kind)), Some(("agent".into(), pb::ActorKind::Service as i32)));
    assert!(event.cursor > recorded.cursor);
}

/// `gavel audit record` against an insecure 3-node cluster: it appends an
/// application event with its payload, attributes and links and prints it; a
/// type Gavel writes itself is refused (exit 3), a malformed attribute is a
/// usage error (exit 2), and neither appends anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_cli_records_an_application_event_and_refuses_gavels_own_types() {
    let cluster = support::Cluster::start(3).await;
    cluster.wait_for_leader().await;
    let endpoints = cluster.running().into_iter().map(|id| cluster.addr(id)).collect::<Vec<_>>().join(",");
    let gavel = |args: &[&str]| {
        std::process::Command::new(support::gavel_binary())
            .args(["audit", "record"])
            .args(args)
            .args(["--json", "--endpoints", &endpoints, "--as", "service:agent"])
            .output()
            .expect("run gavel audit record")
    };
    let recorded = gavel(&[
        "policy.denied",
        "--execution",
        "exec-1",
        "--payload",
        r#"{"rule": "amount-limit"}"#,
        "--attribute",
        "policy=refunds",
        "--attribute",
        "note=a=b",
    ]);
    assert!(recorded.status.success(), "{recorded:?}");
    let event: serde_json::Value = serde_json::from_slice(&recorded.stdout).expect("one JSON document");
    assert_eq!(event["type"], "policy.denied", "{event}");
    assert_eq!(event["executionId"], "exec-1", "{event}");
    let cursor = event["cursor"].as_u64().expect("a cursor");

    let follower = cluster.follower().await;
    let stored = cluster.audit(follower).get_event(pb::GetEventRequest { cursor }).await.expect("get event");
    let stored = stored.into_inner().event.expect("the recorded event");
    assert!(stored.recorded_by_application);
    assert_eq!(stored.payload_json.as_deref(), Some(r#"{"rule":"amount-limit"}"#));
    assert_eq!(stored.attributes, attributes(&[("note", "a=b"), ("policy", "refunds")]));
    assert_eq!(stored.actor.map(|actor| actor.id), Some("agent".to_string()));

    let forged = gavel(&["capability.completed"]);
    assert_eq!(forged.status.code(), Some(3), "a refusal: {forged:?}");
    assert!(String::from_utf8_lossy(&forged.stderr).contains("INVALID_ARGUMENT"), "{forged:?}");
    let bad_attribute = gavel(&["policy.denied", "--attribute", "no-equals-sign"]);
    assert_eq!(bad_attribute.status.code(), Some(2), "a usage error: {bad_attribute:?}");
    let leader = cluster.wait_for_leader().await;
    let after = cluster
        .audit(leader)
        .list_events(pb::ListEventsRequest {
            after_cursor: cursor,
            limit: 10,
            execution_id: None,
            ..pb::ListEventsRequest::default()
        })
        .await
        .expect("list events")
        .into_inner();
    assert!(after.events.iter().all(|event| !event.recorded_by_application), "refusals appended nothing: {after:?}");
}
