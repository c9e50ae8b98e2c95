//! The `gavel` binary itself: it starts, names its version, and refuses an
//! unknown command with a usage error. Having an integration test here also
//! makes `cargo test --workspace` build the binary that the process-level
//! tests in the root `tests/` package start.

use std::process::Command;

#[test]
fn the_binary_prints_its_version() {
    let output = Command::new(env!("CARGO_BIN_EXE_gavel")).arg("--version").output().expect("run gavel --version");
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(stdout.trim(), format!("gavel {}", env!("CARGO_PKG_VERSION")));
}

/// Only a build with gavel-cli's `mutants` feature reads `GAVEL_MUTANT`
/// (even where a `--workspace` build has the planted bugs' code in the
/// crates below): this one refuses to start a node with it set, before it
/// touches the data directory or the port.
#[test]
fn a_node_of_a_build_without_planted_bugs_refuses_gavel_mutant() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let data_dir = dir.path().join("data");
    let output = Command::new(env!("CARGO_BIN_EXE_gavel"))
        .args(["node", "--id", "1", "--listen", "127.0.0.1:0", "--insecure", "--data-dir"])
        .arg(&data_dir)
        .env("GAVEL_MUTANT", "early-ack")
        .output()
        .expect("run gavel node");
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("GAVEL_MUTANT is set, but this gavel has no planted bugs"), "{stderr}");
    assert!(!data_dir.exists(), "nothing was written");
}

/// `--worker-threads` sizes the node's runtime (the node says how many it
/// runs before it touches its data directory); 0, past the maximum or not a
/// number is a usage error.
#[test]
fn a_node_runs_the_worker_threads_it_is_given() {
    let dir = tempfile::tempdir().expect("temporary directory");
    for bad in ["0", "257", "two"] {
        let output = Command::new(env!("CARGO_BIN_EXE_gavel"))
            .args(["node", "--id", "1", "--listen", "127.0.0.1:0", "--insecure", "--worker-threads", bad])
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .output()
            .expect("run gavel node");
        assert_eq!(output.status.code(), Some(2), "{bad}: {output:?}");
        assert!(String::from_utf8_lossy(&output.stderr).contains("--worker-threads"), "{bad}: {output:?}");
    }
    // A node refused for its peers (they leave it out) has already logged
    // its runtime.
    for threads in ["1", "3"] {
        let output = Command::new(env!("CARGO_BIN_EXE_gavel"))
            .args(["node", "--id", "1", "--listen", "127.0.0.1:0", "--insecure", "--peers", "2=127.0.0.1:1"])
            .args(["--worker-threads", threads, "--data-dir"])
            .arg(dir.path().join("data"))
            .output()
            .expect("run gavel node");
        assert_eq!(output.status.code(), Some(1), "{output:?}");
        let logged = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        assert!(logged.contains(&format!("node 1 runs {threads} runtime worker thread(s)")), "{logged}");
        assert!(logged.contains("--peers must include this node"), "{logged}");
    }
}

#[test]
fn an_unknown_command_is_a_usage_error() {
    let output = Command::new(env!("CARGO_BIN_EXE_gavel")).arg("no-such-command").output().expect("run gavel");
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    assert!(String::from_utf8_lossy(&output.stderr).contains("Usage"), "{output:?}");
}

#[test]
fn every_top_level_command_is_listed_in_the_help() {
    let output = Command::new(env!("CARGO_BIN_EXE_gavel")).arg("--help").output().expect("run gavel --help");
    assert!(output.status.success(), "{output:?}");
    let help = String::from_utf8_lossy(&output.stdout);
    for command in [
        "node",
        "dev",
        "approval",
        "capability",
        "exec",
        "audit",
        "cluster",
        "access",
        "cert",
        "token",
        "notify",
        "codes",
    ] {
        assert!(help.contains(command), "`{command}` missing from:\n{help}");
    }
    // The test lab is the other binary's (crates/gavel-lab).
    for lab in ["chaos ", "bench ", "sim "] {
        assert!(!help.contains(&format!("  {lab}")), "`{lab}` is the product's command:\n{help}");
    }
}

/// `gavel codes` prints the catalogue without a cluster: a table for
/// people, and with `--json` one entry per code with its class and
/// description, in the catalogue's order.
#[test]
fn gavel_codes_prints_every_code_with_its_class_as_a_table_and_as_json() {
    let table = Command::new(env!("CARGO_BIN_EXE_gavel")).arg("codes").output().expect("run gavel codes");
    assert!(table.status.success(), "{table:?}");
    let text = String::from_utf8_lossy(&table.stdout);
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().expect("a header line").split_whitespace().collect();
    assert_eq!(header, ["CODE", "CLASS", "DESCRIPTION"]);
    let last_voter = lines.find(|line| line.starts_with("LAST_VOTER ")).expect("LAST_VOTER is listed");
    assert!(last_voter.contains("FAILED_PRECONDITION") && last_voter.contains("last voter"), "{last_voter}");

    let json = Command::new(env!("CARGO_BIN_EXE_gavel")).args(["codes", "--json"]).output().expect("run gavel codes");
    assert!(json.status.success(), "{json:?}");
    let document: serde_json::Value = serde_json::from_slice(&json.stdout).expect("one JSON document");
    let codes = document["codes"].as_array().expect("a codes array");
    assert_eq!(codes.len(), text.lines().count() - 1, "one entry per table row");
    assert_eq!(
        codes[0],
        serde_json::json!({
            "class": "INVALID_ARGUMENT",
            "code": "INVALID_ARGUMENT",
            "description": "a field is missing, malformed, out of range or over a size limit",
        })
    );
    let classes: Vec<(&str, &str)> = codes
        .iter()
        .map(|entry| (entry["code"].as_str().expect("a code"), entry["class"].as_str().expect("a class")))
        .filter(|(code, _)| ["LEASE_LOST", "BACKUP_RUNNING", "OUT_OF_RANGE", "ORIGIN_REFUSED"].contains(code))
        .collect();
    assert_eq!(
        classes,
        [
            ("LEASE_LOST", "FAILED_PRECONDITION"),
            ("OUT_OF_RANGE", "OUT_OF_RANGE"),
            ("BACKUP_RUNNING", "RESOURCE_EXHAUSTED"),
            ("ORIGIN_REFUSED", "PERMISSION_DENIED"),
        ]
    );
}

#[test]
fn gavel_notify_refuses_bad_webhooks_and_secrets_with_exit_2_before_any_call() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let short = dir.path().join("short.secret");
    std::fs::write(&short, "too short\n").expect("write");
    let state = dir.path().join("state");
    let base = ["notify", "--console-url", "http://127.0.0.1:7500", "--state-dir"];
    for (webhook, secret, needle) in [
        ("teams=https://example.com/x", None, "unknown webhook kind"),
        ("slack=ftp://example.com/x", None, "http:// or https://"),
        ("generic=http://127.0.0.1:9/x", None, "--hmac-secret-file"),
        ("generic=http://127.0.0.1:9/x", Some(&short), "must hold 16 to 4096"),
    ] {
        let mut command = Command::new(env!("CARGO_BIN_EXE_gavel"));
        command.args(base).arg(&state).args(["--webhook", webhook, "--insecure"]);
        command.env_remove("GAVEL_NOTIFY_HMAC_SECRET_FILE");
        if let Some(secret) = secret {
            command.arg("--hmac-secret-file").arg(secret);
        }
        let output = command.output().expect("run gavel notify");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{webhook}: {output:?}");
        assert!(stderr.contains("NOTIFY_CONFIG") && stderr.contains(needle), "{webhook}: {stderr}");
        assert!(!state.exists(), "no state is written for a refused command line");
    }
}
