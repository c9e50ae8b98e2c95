//! `gavel audit record TYPE` against a real one-node cluster started in this
//! process: it appends an application event with its payload, attributes and
//! links and prints it; a type Gavel writes itself is refused with
//! `INVALID_ARGUMENT` (exit 3) and appends nothing.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use gavel_proto::v1 as pb;
use gavel_proto::v1::audit_service_client::AuditServiceClient;
use gavel_server::server::{start, NodeOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_record_appends_an_application_event_and_refuses_gavels_own_types() {
    let data_dir = std::env::temp_dir().join(format!(
        "gavel-audit-record-{}-{}",
        std::process::id(),
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |elapsed| elapsed.as_nanos())
    ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind a loopback port");
    let addr = listener.local_addr().expect("bound").to_string();
    let options = NodeOptions {
        id: 1,
        advertise: addr.clone(),
        peers: BTreeMap::from([(1, addr.clone())]),
        data_dir: data_dir.clone(),
        timings: gavel_raft::RaftTimings::default(),
        bootstrap: true,
        settings: gavel_server::node::ServerSettings::default(),
        security: gavel_server::security::Security::insecure(),
    };
    let running = start(options, listener).await.expect("start a node");
    let started = Instant::now();
    while !running.node.raft.status().is_leader() {
        assert!(started.elapsed() < Duration::from_secs(30), "no leader");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let gavel = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_gavel"))
            .args(["audit", "record"])
            .args(args)
            .args(["--json", "--endpoints", &addr, "--as", "service:agent"])
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

    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}")).expect("endpoint").connect_lazy();
    let mut audit = AuditServiceClient::new(channel);
    let stored = audit.get_event(pb::GetEventRequest { cursor }).await.expect("get event").into_inner();
    let stored = stored.event.expect("the recorded event");
    assert!(stored.recorded_by_application);
    assert_eq!(stored.payload_json.as_deref(), Some(r#"{"rule":"amount-limit"}"#));
    let expected: BTreeMap<String, String> =
        [("note", "a=b"), ("policy", "refunds")].into_iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    assert_eq!(stored.attributes, expected);
    assert_eq!(stored.actor.map(|actor| actor.id), Some("agent".to_string()));

    let forged = gavel(&["capability.completed"]);
    assert_eq!(forged.status.code(), Some(3), "a refusal: {forged:?}");
    assert!(String::from_utf8_lossy(&forged.stderr).contains("INVALID_ARGUMENT"), "{forged:?}");
    let bad_attribute = gavel(&["policy.denied", "--attribute", "no-equals-sign"]);
    assert_eq!(bad_attribute.status.code(), Some(2), "a usage error: {bad_attribute:?}");
    let after = audit
        .list_events(pb::ListEventsRequest { after_cursor: cursor, limit: 10, execution_id: None })
        .await
        .expect("list events")
        .into_inner();
    assert!(after.events.is_empty(), "refusals appended nothing: {:?}", after.events);

    running.stop().await.expect("a clean stop");
    let _ = std::fs::remove_dir_all(&data_dir);
}
