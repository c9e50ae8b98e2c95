//! The lab binary answers for the test lab's three commands (and, being an
//! integration test of this package, makes `cargo test --workspace` build
//! `gavel-lab` beside `gavel`, where the process-level tests look for it).

use std::process::Command;

#[test]
fn gavel_lab_runs_chaos_sim_and_bench() {
    let output = Command::new(env!("CARGO_BIN_EXE_gavel-lab")).arg("--help").output().expect("run gavel-lab --help");
    assert!(output.status.success(), "{output:?}");
    let help = String::from_utf8_lossy(&output.stdout);
    for command in ["chaos", "sim", "bench"] {
        assert!(help.lines().any(|line| line.trim_start().starts_with(command)), "`{command}` missing from:\n{help}");
    }
    let refused = Command::new(env!("CARGO_BIN_EXE_gavel-lab")).arg("node").output().expect("run gavel-lab node");
    assert_eq!(refused.status.code(), Some(2), "the product's commands are not the lab's: {refused:?}");
}
