//! `gavel access` and the global credential flags against a secure kit
//! cluster of `gavel node` processes: the admin grants and revokes, anyone
//! authenticated asks `whoami` (by certificate or by a `gavel token issue`
//! token), a non-admin is refused with exit 3 `PERMISSION_DENIED`, and no
//! credentials at all with exit 3 `UNAUTHENTICATED`.

use std::process::{Command, Output};
use std::time::Duration;

use gavel_pki::{Principal, PrincipalKind};
use gavel_testkit::{eventually, resolve_gavel_binary, Cluster, ClusterSpec, Security};
use serde_json::Value;

fn user(id: &str) -> Principal {
    Principal::new(PrincipalKind::User, id).expect("a principal")
}

/// `gavel ARGS...` against `cluster` with exactly these `GAVEL_*` credentials.
fn gavel(cluster: &Cluster, credentials: &[(&str, String)], args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_gavel"));
    for name in ["GAVEL_CA", "GAVEL_CERT", "GAVEL_KEY", "GAVEL_TOKEN", "GAVEL_TOKEN_FILE", "GAVEL_INSECURE"] {
        command.env_remove(name);
    }
    command
        .args(args)
        .env("GAVEL_ENDPOINTS", cluster.addrs().join(","))
        .env("GAVEL_RETRY_BUDGET_MS", "5000")
        .envs(credentials.iter().map(|(name, value)| (name.to_string(), value.clone())))
        .output()
        .expect("run gavel")
}

fn json(output: &Output) -> Value {
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    serde_json::from_slice(&output.stdout).unwrap_or_else(|error| panic!("{error}: {output:?}"))
}

fn refused(output: &Output, code: &str) {
    assert_eq!(output.status.code(), Some(3), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains(code), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn access_commands_grant_revoke_list_and_whoami_over_tls() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut spec = ClusterSpec::new(resolve_gavel_binary(None).unwrap_or_else(|error| panic!("{error}")), dir.path());
    spec.security = Security::secure(user("admin"));
    let cluster = Cluster::start(spec).await.expect("the secure cluster starts");
    let certs = cluster.certs().expect("a secure cluster").clone();
    let ca = certs.ca_cert().display().to_string();
    let as_principal = |principal: &Principal| {
        vec![
            ("GAVEL_CA", ca.clone()),
            ("GAVEL_CERT", certs.cert(principal).display().to_string()),
            ("GAVEL_KEY", certs.key(principal).display().to_string()),
        ]
    };
    let admin = as_principal(&user("admin"));

    // The bootstrap admin is granted once the first leader has applied it.
    let whoami = eventually(Duration::from_secs(30), Duration::from_millis(200), || {
        let output = gavel(&cluster, &admin, &["access", "whoami", "--json"]);
        let answer = (output.status.code() == Some(0)).then(|| json(&output));
        async move { answer.filter(|answer| answer["grants"].as_array().is_some_and(|grants| !grants.is_empty())) }
    })
    .await
    .expect("the admin holds its grant");
    assert_eq!(whoami["principal"], "user:admin");
    assert_eq!(whoami["grants"][0]["grant"], "admin");

    let granted =
        json(&gavel(&cluster, &admin, &["access", "grant", "user:bob", "approver", "--scope=finance", "--json"]));
    assert_eq!(granted["grants"][0]["scope"], serde_json::json!(["finance"]));
    let listed = json(&gavel(&cluster, &admin, &["access", "list", "--json"]));
    let principals: Vec<&str> =
        listed["grants"].as_array().expect("grants").iter().filter_map(|grant| grant["principal"].as_str()).collect();
    assert_eq!(principals, ["user:admin", "user:bob"]);

    // Bob by certificate: authenticated, an approver, no admin.
    cluster.credentials(&user("bob")).expect("bob's certificate");
    let bob = as_principal(&user("bob"));
    let whoami = json(&gavel(&cluster, &bob, &["access", "whoami", "--json"]));
    assert_eq!(whoami["principal"], "user:bob");
    assert_eq!(whoami["grants"][0]["grant"], "approver");
    refused(&gavel(&cluster, &bob, &["access", "list"]), "PERMISSION_DENIED");

    // Bob by a token from `gavel token issue`, down-scoped.
    let issued = gavel(
        &cluster,
        &[],
        &["token", "issue", "--sub=user:bob", "--roles=approver", &format!("--certs-dir={}", certs.root().display())],
    );
    assert_eq!(issued.status.code(), Some(0), "{issued:?}");
    let token = String::from_utf8_lossy(&issued.stdout).trim().to_string();
    let by_token =
        json(&gavel(&cluster, &[("GAVEL_CA", ca.clone()), ("GAVEL_TOKEN", token)], &["access", "whoami", "--json"]));
    assert_eq!(by_token["principal"], "user:bob");
    assert_eq!(by_token["tokenScope"], serde_json::json!(["approver"]));

    // Revoked, bob holds nothing.
    let revoked = json(&gavel(&cluster, &admin, &["access", "revoke", "user:bob", "approver", "--json"]));
    assert_eq!(revoked["grants"], serde_json::json!([]));
    let whoami = json(&gavel(&cluster, &bob, &["access", "whoami", "--json"]));
    assert_eq!(whoami["grants"], serde_json::json!([]));

    // TLS without any credential, and a garbage token.
    refused(&gavel(&cluster, &[("GAVEL_CA", ca.clone())], &["access", "whoami"]), "UNAUTHENTICATED");
    refused(
        &gavel(&cluster, &[("GAVEL_CA", ca.clone()), ("GAVEL_TOKEN", "garbage".to_string())], &["access", "whoami"]),
        "UNAUTHENTICATED",
    );
    // Contradictory credentials are a usage error before anything is sent.
    let contradictory =
        gavel(&cluster, &[("GAVEL_CA", ca), ("GAVEL_INSECURE", "1".to_string())], &["access", "whoami"]);
    assert_eq!(contradictory.status.code(), Some(2), "{contradictory:?}");
}
