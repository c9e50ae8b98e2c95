//! `gavel audit get CURSOR` against a real one-node cluster started in this
//! process: it prints the event at the cursor, and refuses a cursor no
//! retained event has with `NOT_FOUND` (exit 3).

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use gavel_proto::v1 as pb;
use gavel_proto::v1::capability_service_client::CapabilityServiceClient;
use gavel_server::server::{start, NodeOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_get_prints_the_event_at_a_cursor_and_refuses_a_missing_one() {
    let data_dir = std::env::temp_dir().join(format!(
        "gavel-audit-get-{}-{}",
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
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}")).expect("endpoint").connect_lazy();
    let spec = pb::CapabilitySpec {
        id: "docs.read".to_string(),
        side_effect: pb::SideEffect::Read as i32,
        risk: pb::Risk::Low as i32,
        ..pb::CapabilitySpec::default()
    };
    CapabilityServiceClient::new(channel)
        .register_capability(pb::RegisterCapabilityRequest { request_id: "register-1".to_string(), spec: Some(spec) })
        .await
        .expect("register a capability (event 1)");

    let gavel = |cursor: &str| {
        Command::new(env!("CARGO_BIN_EXE_gavel"))
            .args(["audit", "get", cursor, "--json", "--endpoints", &addr])
            .output()
            .expect("run gavel audit get")
    };
    let found = gavel("1");
    assert!(found.status.success(), "{found:?}");
    let event: serde_json::Value = serde_json::from_slice(&found.stdout).expect("one JSON document");
    assert_eq!(event["cursor"], 1, "{event}");
    assert_eq!(event["type"], "capability.registered", "{event}");
    assert_eq!(event["capabilityId"], "docs.read", "{event}");

    let missing = gavel("2");
    assert_eq!(missing.status.code(), Some(3), "a refusal: {missing:?}");
    assert!(String::from_utf8_lossy(&missing.stderr).contains("NOT_FOUND"), "{missing:?}");

    running.stop().await.expect("a clean stop");
    let _ = std::fs::remove_dir_all(&data_dir);
}
