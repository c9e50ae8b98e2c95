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
        "chaos",
        "bench",
    ] {
        assert!(help.contains(command), "`{command}` missing from:\n{help}");
    }
}
