//! Running the real `gavel` binary against a secure testkit cluster, as a
//! principal whose client certificate the kit issues: shared by the backup
//! and membership tests.

#![allow(dead_code)]

use std::ffi::OsString;

use gavel_pki::Principal;
use gavel_testkit::Cluster;
use serde_json::Value;

/// What one run of the binary produced.
#[derive(Debug)]
pub struct Run {
    /// Exit code (-1 when killed by a signal).
    pub code: i32,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl Run {
    /// The standard output as one JSON document; panics unless the run succeeded.
    #[track_caller]
    pub fn json(&self) -> Value {
        assert_eq!(self.code, 0, "expected success: {self:#?}");
        serde_json::from_str(&self.stdout).unwrap_or_else(|error| panic!("stdout is not JSON ({error}): {self:#?}"))
    }

    /// Asserts that the run succeeded.
    #[track_caller]
    pub fn succeeded(&self) {
        assert_eq!(self.code, 0, "expected success: {self:#?}");
    }

    /// Asserts a failure with `code` whose standard error mentions `needle`.
    #[track_caller]
    pub fn refused(&self, code: i32, needle: &str) {
        assert_eq!(self.code, code, "expected exit {code}: {self:#?}");
        assert!(self.stderr.contains(needle), "expected {needle:?} in stderr: {self:#?}");
    }
}

/// Runs `gavel ARGS...` with nothing from the caller's environment that the
/// CLI reads.
pub async fn gavel(args: Vec<OsString>) -> Run {
    let output = tokio::process::Command::new(gavel_testkit::resolve_gavel_binary(None).expect("the gavel binary"))
        .args(args)
        .env_remove("GAVEL_ENDPOINTS")
        .env_remove("GAVEL_ACTOR")
        .env_remove("GAVEL_RETRY_BUDGET_MS")
        .env_remove("GAVEL_LOG")
        .env_remove("GAVEL_CA")
        .env_remove("GAVEL_CERT")
        .env_remove("GAVEL_KEY")
        .env_remove("GAVEL_TOKEN")
        .env_remove("GAVEL_TOKEN_FILE")
        .env_remove("GAVEL_INSECURE")
        .output()
        .await
        .expect("run the gavel binary");
    Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Runs `gavel ARGS...` against `cluster` (every node as an endpoint) as
/// `principal`, authenticated by a client certificate the kit issues.
pub async fn gavel_as(cluster: &Cluster, principal: &Principal, args: &[&str]) -> Run {
    gavel_via(cluster, &cluster.addrs(), principal, args).await
}

/// [`gavel_as`] with only `endpoints` as the endpoints.
pub async fn gavel_via(cluster: &Cluster, endpoints: &[String], principal: &Principal, args: &[&str]) -> Run {
    cluster.credentials(principal).expect("a secure cluster issues client certificates");
    let certs = cluster.certs().expect("a secure cluster");
    let mut all: Vec<OsString> = args.iter().map(OsString::from).collect();
    all.push(format!("--endpoints={}", endpoints.join(",")).into());
    for (flag, path) in [("--ca", certs.ca_cert()), ("--cert", certs.cert(principal)), ("--key", certs.key(principal))]
    {
        all.push(flag.into());
        all.push(path.into_os_string());
    }
    gavel(all).await
}

/// `kind:id` as a principal.
pub fn principal(text: &str) -> Principal {
    Principal::parse(text).expect("a principal")
}
