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

/// Every variable the CLI reads, removed so the caller's environment cannot change a run.
const CLI_VARIABLES: [&str; 10] = [
    "GAVEL_ENDPOINTS",
    "GAVEL_ACTOR",
    "GAVEL_RETRY_BUDGET_MS",
    "GAVEL_LOG",
    "GAVEL_CA",
    "GAVEL_CERT",
    "GAVEL_KEY",
    "GAVEL_TOKEN",
    "GAVEL_TOKEN_FILE",
    "GAVEL_INSECURE",
];

/// Runs `gavel ARGS...` with nothing from the caller's environment that the
/// CLI reads.
pub async fn gavel(args: Vec<OsString>) -> Run {
    let mut command =
        tokio::process::Command::new(gavel_testkit::resolve_gavel_binary(None).expect("the gavel binary"));
    command.args(args);
    for variable in CLI_VARIABLES {
        command.env_remove(variable);
    }
    let output = command.output().await.expect("run the gavel binary");
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

/// Starts a secure three-node cluster of the `gavel` binary in `dir`
/// whose first admin is `admin`, waiting up to `wait` for it.
pub async fn secure_cluster(dir: &std::path::Path, admin: &Principal, wait: std::time::Duration) -> Cluster {
    let binary = gavel_testkit::resolve_gavel_binary(None).expect("gavel binary");
    let mut spec = gavel_testkit::ClusterSpec::new(binary, dir);
    spec.security = gavel_testkit::Security::secure(admin.clone());
    spec.start_timeout = wait;
    spec.status_timeout = std::time::Duration::from_secs(5);
    Cluster::start(spec).await.unwrap_or_else(|error| panic!("{error}"))
}

/// `kind:id` as a principal.
pub fn principal(text: &str) -> Principal {
    Principal::parse(text).expect("a principal")
}
