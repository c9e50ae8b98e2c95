//! The worked example of docs/policies.md, end to end from the CLI, on a
//! real secure three-node cluster of `gavel node` processes (TLS, client
//! certificates; every step is the real `gavel` binary, as the principal
//! whose certificate the kit issues):
//!
//! - "finance AND legal": an admin sets the policy with `gavel policy set`;
//!   an agent submits a refund whose capability needs approval (a governed
//!   approval); the finance approver's vote leaves it pending and
//!   `gavel approval get` shows 1 of 2 factors; the requester's own vote is
//!   refused `APPROVAL_SELF_APPROVAL`; the legal approver's vote approves it
//!   in the same command (the decision carries the vote's timestamp);
//!   `gavel approval votes` lists both votes;
//! - a standing approval of 3 uses created with `gavel approval standing
//!   create`, approved once, resumed 3 times with `gavel exec resume` and
//!   refused `APPROVAL_CONSUMED` the 4th time;
//! - a standing approval bound to `/order_id`: a resume with another
//!   order's input is refused `APPROVAL_INPUT_MISMATCH`; one with the same
//!   order (`--input`, `--execution-id`) runs its own input.
//!
//! Each command and its output are printed (`cargo test -p gavel-tests
//! --test policy_cli -- --nocapture`): docs/policies.md shows one run.

mod admin_cli;

use std::time::Duration;

use admin_cli::{gavel_as, principal, secure_cluster, Run};
use gavel_testkit::Cluster;

/// Upper bound of every wait.
const WAIT: Duration = Duration::from_secs(60);

const ADMIN: &str = "user:admin";
/// The agent: it submits (so it is the requester), and it also holds an
/// approver grant in finance, so its own vote is refused for being the
/// requester's, not for want of a grant.
const AGENT: &str = "service:agent";

/// The capability of the example, as `gavel capability register` reads it.
const CAPABILITY: &str = r#"
id = "orders.refund"
sideEffect = "write"
risk = "high"
idempotent = true
queue = "refunds"

[approval]
required = true
type = "refund"
"#;

/// Runs `gavel ARGS` as `who`, printing the command and what it wrote.
async fn gavel(cluster: &Cluster, who: &str, args: &[&str]) -> Run {
    let run = gavel_as(cluster, &principal(who), args).await;
    // Quoted as a shell needs them, so the transcript can be run as shown.
    let shown: Vec<String> =
        args.iter().map(|arg| if arg.contains('{') { format!("'{arg}'") } else { arg.to_string() }).collect();
    eprintln!("$ gavel {}    # as {who}\n{}{}", shown.join(" "), run.stdout, run.stderr);
    run
}

/// `gavel ARGS --json` as `who`, not printed: the numbers behind a step.
async fn read_json(cluster: &Cluster, who: &str, args: &[&str]) -> serde_json::Value {
    gavel_as(cluster, &principal(who), &[args, &["--json"]].concat()).await.json()
}

/// The value of one `key  value` line of a record the CLI printed.
fn field(run: &Run, key: &str) -> String {
    run.stdout
        .lines()
        .find_map(|line| line.strip_prefix(key).filter(|rest| rest.starts_with("  ")).map(str::trim))
        .unwrap_or_else(|| panic!("no {key} line in {run:#?}"))
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finance_and_legal_and_a_standing_approval_of_three_uses_run_end_to_end_from_the_cli() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cluster = secure_cluster(dir.path(), &principal(ADMIN), WAIT).await;
    // The kit's grant waits until the bootstrap admin is in place.
    cluster.grant(&principal(AGENT), &[gavel_pki::GrantName::Submitter], WAIT).await.expect("grant");
    for grant in [
        vec!["access", "grant", "user:fin", "approver", "--scope", "finance"],
        vec!["access", "grant", "user:legal", "approver", "--scope", "legal"],
        vec!["access", "grant", "user:oc1", "approver"],
        vec!["access", "grant", AGENT, "approver", "--scope", "finance"],
    ] {
        gavel(&cluster, ADMIN, &grant).await.succeeded();
    }
    let file = dir.path().join("refund.toml");
    std::fs::write(&file, CAPABILITY).expect("write the capability file");
    gavel(&cluster, ADMIN, &["capability", "register", file.to_str().expect("a UTF-8 path")]).await.succeeded();

    // ----- finance AND legal -----
    let policy = ["policy", "set", "refunds", "--types", "refund"];
    let factors = ["--factor", "finance=1/scope/finance", "--factor", "legal=1/scope/legal"];
    gavel(&cluster, ADMIN, &[&policy[..], &factors[..]].concat()).await.succeeded();
    let input = r#"{"amount":12000,"order_id":"o-1"}"#;
    let submitted =
        gavel(&cluster, AGENT, &["exec", "submit", "orders.refund", "--input", input, "--id", "refund-1"]).await;
    submitted.succeeded();
    let approval = "apr_refund-1";
    assert!(submitted.stdout.contains(approval), "{submitted:#?}");
    let governed = read_json(&cluster, AGENT, &["approval", "get", approval]).await;
    assert_eq!(governed["quorum"]["policy"], "refunds", "governed: {governed}");

    let voted = gavel(&cluster, "user:fin", &["approval", "approve", approval, "--yes"]).await;
    assert_eq!(field(&voted, "status"), "pending", "one factor of two: {voted:#?}");
    let shown = gavel(&cluster, AGENT, &["approval", "get", approval]).await;
    assert_eq!(field(&shown, "policy"), "refunds (version 1)", "{shown:#?}");
    let progress = "finance 1/1, legal 0/1 (1 of 2 factors met, all required); denials 0/1";
    assert_eq!(field(&shown, "quorum"), progress, "{shown:#?}");

    // The requester's own vote: refused, nothing counted.
    gavel(&cluster, AGENT, &["approval", "approve", approval, "--yes"]).await.refused(3, "APPROVAL_SELF_APPROVAL");

    let approved = gavel(&cluster, "user:legal", &["approval", "approve", approval, "--yes"]).await;
    assert_eq!(field(&approved, "status"), "approved", "{approved:#?}");
    assert!(field(&approved, "decision").starts_with("approved by user:legal"), "{approved:#?}");
    let listed = gavel(&cluster, AGENT, &["approval", "votes", approval]).await;
    assert_eq!(field(&listed, "factors"), "finance 1/1, legal 1/1", "{listed:#?}");
    let votes = read_json(&cluster, AGENT, &["approval", "votes", approval]).await;
    let cast: Vec<(&str, &str)> = votes["quorum"]["votes"]
        .as_array()
        .expect("votes")
        .iter()
        .map(|vote| (vote["principal"].as_str().unwrap_or(""), vote["factor"].as_str().unwrap_or("")))
        .collect();
    assert_eq!(cast, [("user:fin", "finance"), ("user:legal", "legal")], "{votes}");
    // One command: the decision is stamped with the completing vote's time.
    let decided = read_json(&cluster, AGENT, &["approval", "get", approval]).await;
    assert_eq!(decided["decision"]["decidedAtMs"], votes["quorum"]["votes"][1]["castAtMs"], "{decided} {votes}");

    // ----- a standing approval of 3 uses -----
    let standing = [
        "approval",
        "standing",
        "create",
        "--id",
        "standing-o-2",
        "--capability",
        "orders.refund",
        "--uses",
        "3",
        "--window",
        "1h",
        "--input",
        r#"{"amount":10,"order_id":"o-2"}"#,
    ];
    let created = gavel(&cluster, AGENT, &standing).await;
    created.succeeded();
    assert!(created.stdout.contains("0 of 3 uses spent; window 1h after the decision"), "{created:#?}");
    // Governed like a one-shot (issue #37): the standing request names no
    // types, and the policy on the type orders.refund's registration
    // declares governs it all the same: one finance and one legal vote.
    let governed = read_json(&cluster, AGENT, &["approval", "get", "standing-o-2"]).await;
    assert_eq!(governed["quorum"]["policy"], "refunds", "{governed}");
    let voted = gavel(&cluster, "user:fin", &["approval", "approve", "standing-o-2", "--yes"]).await;
    assert_eq!(field(&voted, "status"), "pending", "one factor of two: {voted:#?}");
    gavel(&cluster, "user:legal", &["approval", "approve", "standing-o-2", "--yes"]).await.succeeded();
    for use_number in 1..=3 {
        let resumed = gavel(&cluster, AGENT, &["exec", "resume", "standing-o-2"]).await;
        assert_eq!(field(&resumed, "approval"), "standing-o-2", "use {use_number}: {resumed:#?}");
    }
    gavel(&cluster, AGENT, &["exec", "resume", "standing-o-2"]).await.refused(3, "APPROVAL_CONSUMED");
    let spent = read_json(&cluster, AGENT, &["approval", "get", "standing-o-2"]).await;
    assert_eq!(spent["status"], "consumed", "{spent}");
    assert_eq!(spent["standing"]["usedBy"].as_array().map(Vec::len), Some(3), "{spent}");
    let spent = gavel(&cluster, AGENT, &["approval", "get", "standing-o-2"]).await;
    assert!(spent.stdout.contains("3 of 3 uses spent"), "{spent:#?}");

    // ----- bound to /order_id: each use brings its own input -----
    let bound = [
        "approval",
        "standing",
        "create",
        "--id",
        "standing-o-3",
        "--capability",
        "orders.refund",
        "--uses",
        "2",
        "--window",
        "1h",
        "--input",
        r#"{"amount":10,"order_id":"o-3"}"#,
        "--bind",
        "/order_id",
    ];
    gavel(&cluster, AGENT, &bound).await.succeeded();
    gavel(&cluster, "user:fin", &["approval", "approve", "standing-o-3", "--yes"]).await.succeeded();
    gavel(&cluster, "user:legal", &["approval", "approve", "standing-o-3", "--yes"]).await.succeeded();
    let other_order = ["exec", "resume", "standing-o-3", "--input", r#"{"amount":10,"order_id":"o-4"}"#];
    gavel(&cluster, AGENT, &other_order).await.refused(3, "APPROVAL_INPUT_MISMATCH");
    let same_order =
        ["exec", "resume", "standing-o-3", "--input", r#"{"amount":25,"order_id":"o-3"}"#, "--execution-id", "o-3-a"];
    let resumed = gavel(&cluster, AGENT, &same_order).await;
    assert_eq!(field(&resumed, "execution"), "o-3-a", "{resumed:#?}");
    assert_eq!(field(&resumed, "input"), r#"{"amount":25,"order_id":"o-3"}"#, "the use runs its own input");
    let bound_spent = read_json(&cluster, AGENT, &["approval", "get", "standing-o-3"]).await;
    assert_eq!(bound_spent["standing"]["usedBy"].as_array().map(Vec::len), Some(1), "{bound_spent}");
}
