//! The `refund-worker` binary started as a user starts it. Pointed at an
//! address where nothing listens, it exits non-zero within its startup wait
//! and says which endpoints it tried and how to start a cluster. (Being an
//! integration test of this package, it also makes `cargo test --workspace`
//! build the binary, which the browser tests run as the console's worker.)

use std::process::Command;
use std::time::{Duration, Instant};

/// The binary's startup wait (`STARTUP_WAIT`, 5 s), plus room for a loaded machine.
const EXIT_WITHIN: Duration = Duration::from_secs(30);

#[test]
fn pointed_at_no_cluster_it_exits_with_a_clear_error() {
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        listener.local_addr().expect("its address").to_string()
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let started = Instant::now();
    let output = Command::new(env!("CARGO_BIN_EXE_refund-worker"))
        .args(["--endpoints", &closed, "--ledger"])
        .arg(dir.path().join("ledger.jsonl"))
        .current_dir(dir.path())
        .env_remove("GAVEL_ENDPOINTS")
        .env_remove("GAVEL_CA")
        .env_remove("GAVEL_CERT")
        .env_remove("GAVEL_KEY")
        .env_remove("GAVEL_TOKEN")
        .env_remove("GAVEL_TOKEN_FILE")
        .env("GAVEL_INSECURE", "1")
        .output()
        .expect("run refund-worker");
    let took = started.elapsed();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "it exits non-zero; stderr: {stderr}");
    assert!(took < EXIT_WITHIN, "it gave up after {took:?}");
    assert!(stderr.contains(&format!("no usable Gavel cluster at {closed}")), "{stderr}");
    assert!(stderr.contains("gavel dev"), "it says how to start a cluster: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}
