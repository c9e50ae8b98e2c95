//! Tracing and logs of real `gavel node` processes: a secure three-node
//! cluster started with `--otlp-endpoint` pointed at an OTLP/gRPC trace
//! receiver run by this test, and `--log-format json`.
//!
//! A call with a known W3C `traceparent` is sent to a follower, which
//! forwards it to the leader. Asserted: the leader exports a `gavel.rpc`
//! span and a `gavel.propose` span in that trace, the follower exports its
//! `gavel.rpc` span in it too, and the leader's `gavel.rpc` span is the
//! child of the follower's (the forward carried the context). Every line a
//! node wrote to its log is a JSON object, and the leader's log has the
//! proposal's event with the trace id among its spans' fields.

mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gavel_core::Principal;
use gavel_proto::v1 as pb;
use gavel_proto::v1::capability_service_client::CapabilityServiceClient;
use gavel_testkit::{Cluster, ClusterSpec, Security};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{TraceService, TraceServiceServer};
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::any_value::Value;

/// The trace the test's call belongs to.
const TRACE_ID: &str = "5c0ffee5c0ffee5c0ffee5c0ffee5c0f";

/// The caller's span, the parent of the follower's.
const CALLER_SPAN_ID: &str = "00f067aa0ba902b7";

/// A span as the receiver got it, with the node that exported it.
#[derive(Debug, Clone)]
struct Received {
    node: String,
    name: String,
    trace_id: String,
    span_id: String,
    parent_span_id: String,
}

/// An OTLP/gRPC trace receiver that keeps every span.
#[derive(Clone, Default)]
struct Receiver {
    spans: Arc<Mutex<Vec<Received>>>,
}

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut spans = self.spans.lock().expect("receiver lock");
        for resource_spans in request.into_inner().resource_spans {
            let node = resource_spans
                .resource
                .iter()
                .flat_map(|resource| &resource.attributes)
                .find(|attribute| attribute.key == "service.instance.id")
                .and_then(|attribute| attribute.value.as_ref()?.value.as_ref())
                .map(|value| match value {
                    Value::StringValue(text) => text.clone(),
                    other => format!("{other:?}"),
                })
                .unwrap_or_default();
            for span in resource_spans.scope_spans.into_iter().flat_map(|scope| scope.spans) {
                spans.push(Received {
                    node: node.clone(),
                    name: span.name,
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                });
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse { partial_success: None }))
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_traceparent_sent_to_a_follower_reaches_the_leaders_proposal_and_logs_are_json() {
    let receiver = Receiver::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the receiver");
    let receiver_addr = listener.local_addr().expect("receiver address");
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    let serving = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(receiver.clone()))
            .serve_with_incoming(incoming),
    );

    let dir = tempfile::tempdir().expect("temp dir");
    let mut spec = ClusterSpec::new(support::gavel_binary(), dir.path());
    spec.security = Security::secure(Principal::parse("user:admin").expect("a principal"));
    spec.start_timeout = support::WAIT;
    spec.args = vec![format!("--otlp-endpoint=http://{receiver_addr}"), "--log-format=json".to_string()];
    // Export batches quickly, and log the proposal's debug event.
    spec.env = vec![
        ("OTEL_BSP_SCHEDULE_DELAY".to_string(), "200".to_string()),
        ("GAVEL_LOG".to_string(), "info,openraft=warn,gavel_server::node=debug".to_string()),
    ];
    let cluster = Cluster::start(spec).await.unwrap_or_else(|error| panic!("the secure cluster starts: {error}"));
    let leader = cluster.wait_for_leader(support::WAIT).await.unwrap_or_else(|error| panic!("{error}"));
    let follower = cluster.ids().into_iter().find(|id| *id != leader).expect("a follower");

    // The admin (the kit's channel) registers a capability through the follower.
    let capabilities = CapabilityServiceClient::new(cluster.channel(follower, support::WAIT).expect("a channel"));
    let mut request = tonic::Request::new(pb::RegisterCapabilityRequest {
        request_id: format!("traced-{}", uuid::Uuid::new_v4()),
        spec: Some(support::capability("traced.read", pb::SideEffect::Read)),
    });
    let traceparent = format!("00-{TRACE_ID}-{CALLER_SPAN_ID}-01");
    request.metadata_mut().insert("traceparent", traceparent.parse().expect("a header value"));
    let answer = gavel_testkit::eventually(support::WAIT, Duration::from_millis(200), || {
        let mut capabilities = capabilities.clone();
        let request =
            tonic::Request::from_parts(request.metadata().clone(), Default::default(), request.get_ref().clone());
        async move { capabilities.register_capability(request).await.ok() }
    })
    .await
    .expect("the capability is registered through the follower");
    assert_eq!(
        answer.metadata().get(gavel_proto::metadata::LEADER).and_then(|value| value.to_str().ok()),
        cluster.addr(leader),
        "the follower forwarded the call to the leader"
    );

    let (leader_name, follower_name) = (leader.to_string(), follower.to_string());
    // The call may have been sent more than once (the eventually above, say
    // while a new leader waits for its lease), and each node exports its
    // spans in its own batches: wait for one whole chain, from a proposal
    // on the leader up through the leader's rpc span to the follower's, not
    // for one span of each kind (the follower's span of the first attempt
    // and the leader's of the second once passed that check, and the second
    // attempt's follower span had not arrived: a flaky run, 2026-12-07).
    let chain = |spans: &[Received]| {
        let parent_of = |child: &Received, node: &str| {
            spans.iter().find(|span| span.node == node && span.span_id == child.parent_span_id).cloned()
        };
        spans.iter().filter(|span| span.node == leader_name && span.name == "gavel.propose").find_map(|propose| {
            let leader_rpc = parent_of(propose, &leader_name)?;
            let follower_rpc = parent_of(&leader_rpc, &follower_name)?;
            Some((leader_rpc, follower_rpc))
        })
    };
    let (spans, (leader_rpc, follower_rpc)) =
        gavel_testkit::eventually(support::WAIT, Duration::from_millis(200), || {
            let spans: Vec<Received> = receiver
                .spans
                .lock()
                .expect("receiver lock")
                .iter()
                .filter(|span| span.trace_id == TRACE_ID)
                .cloned()
                .collect();
            let found = chain(&spans).map(|links| (spans, links));
            async move { found }
        })
        .await
        .unwrap_or_else(|| {
            let all = receiver.spans.lock().expect("receiver lock").clone();
            panic!("no proposal of trace {TRACE_ID} chained to the follower's span arrived; the receiver got {all:#?}")
        });
    assert!(
        leader_rpc.name.ends_with("RegisterCapability"),
        "the proposal runs in the leader's rpc span: {leader_rpc:?}"
    );
    assert!(
        follower_rpc.name.ends_with("RegisterCapability"),
        "the leader's span is the child of the follower's: {follower_rpc:?}"
    );
    assert_eq!(follower_rpc.parent_span_id, CALLER_SPAN_ID, "the follower's span continues the caller's");
    eprintln!("tracing test: trace {TRACE_ID}: {spans:#?}");

    // Every log line of every node is JSON; the leader's has the trace id.
    let mut lines_by_node = BTreeMap::new();
    let mut traced_on_leader = false;
    for id in cluster.ids() {
        let path = cluster.log_path(id).expect("a log path");
        let log = std::fs::read_to_string(path).expect("the node log");
        let lines: Vec<&str> =
            log.lines().filter(|line| !line.trim().is_empty() && !line.starts_with("=====")).collect();
        assert!(!lines.is_empty(), "node {id} logged something");
        for line in &lines {
            let value: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|error| panic!("node {id} wrote a non-JSON line {line:?}: {error}"));
            assert!(value.get("timestamp").is_some() && value.get("level").is_some(), "{line}");
            if id == leader && line.contains(TRACE_ID) && line.contains("proposal committed") {
                traced_on_leader = true;
            }
        }
        lines_by_node.insert(id, lines.len());
    }
    assert!(traced_on_leader, "the leader logged the proposal with trace id {TRACE_ID}");
    eprintln!("tracing test: JSON log lines per node {lines_by_node:?}");
    cluster.shutdown();
    serving.abort();
}
