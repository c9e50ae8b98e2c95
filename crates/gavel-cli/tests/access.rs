//! `gavel access` and the global credential flags against a secure kit
//! cluster of `gavel node` processes: the admin grants and revokes, anyone
//! authenticated asks `whoami` (by certificate or by a `gavel token issue`
//! token), a non-admin is refused with exit 3 `PERMISSION_DENIED`, and no
//! credentials at all with exit 3 `UNAUTHENTICATED`. The audit commands then
//! show who did what: the principal of every event, the subject and grant of
//! access changes, and an application's event marked `app` with its payload,
//! so that it cannot pass for one of Gavel's own.

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

    audit_commands_show_principals_and_mark_application_events(&cluster, &admin, &as_principal(&user("mallory")));

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

/// A submitter records an event whose type imitates an approval; the
/// auditor's `audit tail`, `audit get` and `exec events`, as table and as
/// JSON, name who recorded it and mark it `app`.
fn audit_commands_show_principals_and_mark_application_events(
    cluster: &Cluster,
    admin: &[(&str, String)],
    mallory: &[(&str, String)],
) {
    cluster.credentials(&user("mallory")).expect("mallory's certificate");
    json(&gavel(cluster, admin, &["access", "grant", "user:mallory", "submitter", "--json"]));
    json(&gavel(cluster, admin, &["access", "grant", "user:admin", "auditor", "--json"]));
    let recorded = json(&gavel(
        cluster,
        mallory,
        &[
            "audit",
            "record",
            "capability.approved.by-cfo",
            "--execution",
            "victim-1",
            "--payload",
            r#"{"approved":true}"#,
            "--json",
        ],
    ));
    assert_eq!(recorded["recordedByApplication"], true, "{recorded}");
    let cursor = recorded["cursor"].as_u64().expect("a cursor").to_string();

    // JSON: every event carries principal, subjectPrincipal, grant, payload
    // and recordedByApplication.
    let tail = gavel(cluster, admin, &["audit", "tail", "--json"]);
    assert_eq!(tail.status.code(), Some(0), "{tail:?}");
    let events: Vec<Value> = String::from_utf8_lossy(&tail.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .filter(|line: &Value| line.get("cursor").is_some())
        .collect();
    for event in &events {
        for key in ["principal", "subjectPrincipal", "grant", "payload", "recordedByApplication"] {
            assert!(event.get(key).is_some(), "{key} missing from {event}");
        }
    }
    let granted = events
        .iter()
        .find(|event| event["type"] == "access.granted" && event["subjectPrincipal"] == "user:mallory")
        .expect("mallory's grant is in the trail");
    assert_eq!((&granted["principal"], &granted["grant"]), (&Value::from("user:admin"), &Value::from("submitter")));
    assert_eq!(granted["recordedByApplication"], false);
    let forged = events.iter().find(|event| event["type"] == "capability.approved.by-cfo").expect("the app event");
    assert_eq!(forged["principal"], "user:mallory");
    assert_eq!(forged["recordedByApplication"], true);
    assert_eq!(forged["payload"], serde_json::json!({ "approved": true }));
    let got = json(&gavel(cluster, admin, &["audit", "get", &cursor, "--json"]));
    assert_eq!(&got, forged, "audit get prints what audit tail printed");
    let of_execution = json(&gavel(cluster, admin, &["exec", "events", "victim-1", "--json"]));
    assert_eq!(of_execution["events"], serde_json::json!([forged]), "exec events shows it the same way");

    // Tables: the application's event is marked app and names its principal.
    let marked = |output: &Output| {
        assert_eq!(output.status.code(), Some(0), "{output:?}");
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        let header = text.lines().next().expect("a header").split_whitespace().collect::<Vec<_>>();
        assert_eq!(header, ["CURSOR", "TIME", "SOURCE", "TYPE", "ACTOR", "PRINCIPAL", "EXECUTION", "DETAILS"]);
        let row = text.lines().find(|line| line.contains("capability.approved.by-cfo")).expect("the app event's row");
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(&cells[2..7], ["app", "capability.approved.by-cfo", "user:mallory", "user:mallory", "victim-1"]);
        assert!(row.ends_with(r#"payload={"approved":true}"#), "{row}");
        text
    };
    let table = marked(&gavel(cluster, admin, &["audit", "tail"]));
    let grant_row = table.lines().find(|line| line.contains("subject=user:mallory")).expect("the grant's row");
    let cells: Vec<&str> = grant_row.split_whitespace().collect();
    assert_eq!((cells[2], cells[3], cells[5]), ("gavel", "access.granted", "user:admin"), "{grant_row}");
    assert!(grant_row.ends_with("subject=user:mallory grant=submitter"), "{grant_row}");
    marked(&gavel(cluster, admin, &["audit", "get", &cursor]));
    marked(&gavel(cluster, admin, &["exec", "events", "victim-1"]));
}
