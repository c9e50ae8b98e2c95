//! Golden tests of the operator CLI: the real `gavel` binary against a real
//! three-node cluster of `gavel node` processes.
//!
//! `--json` output is compared with `golden/*.json` after
//! [`normalize`] replaces the values that change from run to run. To accept
//! new output after an intended change, run
//! `GAVEL_BLESS=1 cargo test -p gavel-tests --test cli` and review the diff of
//! the golden files.

mod support;

use std::path::{Path, PathBuf};

use gavel_proto::v1 as pb;
use serde_json::{json, Value};
use support::{free_port, retry, Cluster};

/// What one run of the binary produced.
#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    /// The standard output parsed as one JSON document; panics with the run otherwise.
    #[track_caller]
    fn json(&self) -> Value {
        assert_eq!(self.code, 0, "expected success: {self:#?}");
        serde_json::from_str(&self.stdout).unwrap_or_else(|error| panic!("stdout is not JSON ({error}): {self:#?}"))
    }

    /// The standard output parsed as JSON Lines.
    #[track_caller]
    fn json_lines(&self) -> Vec<Value> {
        assert_eq!(self.code, 0, "expected success: {self:#?}");
        self.stdout
            .lines()
            .map(|line| serde_json::from_str(line).unwrap_or_else(|error| panic!("line {line:?}: {error}")))
            .collect()
    }
}

/// Runs `gavel ARGS...` with `--endpoints` and nothing from the caller's
/// environment that the CLI reads.
async fn gavel(endpoints: &str, args: &[&str]) -> Run {
    let output = support::run_gavel(endpoints, args, &[("USER", "cli-test")]).await;
    Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Replaces the values of a `--json` document that differ between runs by
/// fixed placeholders, so the rest can be compared byte for byte:
///
/// - times: a non-null value of a key ending in `AtMs`, or of `timestampMs`,
///   `deadlineMs` or `backoffUntilMs`, becomes `"<time>"`; of `durationMs`,
///   `"<duration>"`;
/// - log positions: `leaseId` (a Raft log index) becomes `"<lease-id>"`,
///   `cursor` and `lastCursor` become `"<cursor>"` (ordering is asserted by
///   the tests instead);
/// - cluster views: `addr` → `"<addr>"`, `term` → `"<term>"`,
///   `lastAppliedIndex`/`lastLogIndex`/`snapshotIndex` → `"<index>"`,
///   `stateHash` → `"<state-hash>"`, `leaderId` → `"<node-id>"` and `role` →
///   `"<role>"` (which node wins the election varies; the tests assert one
///   leader that every node agrees on);
/// - an approval's `termsHash`, and the `terms_hash` attribute of a
///   decision's audit event, → `"<terms-hash>"`: the terms include the
///   expiry (their `expiresAtMs` is a time, above).
///
/// Nothing else varies: the test chooses every execution id (`--id`), and the
/// ids derived from it (the approval id, the idempotency key), the input
/// hashes and the capability versions of a fresh cluster are deterministic, so
/// they stay as they are and are checked too.
fn normalize(value: &Value) -> Value {
    match value {
        Value::Object(object) => Value::Object(
            object
                .iter()
                .map(|(key, value)| {
                    let normalized = match placeholder(key) {
                        Some(placeholder) if !value.is_null() => Value::String(placeholder.to_string()),
                        _ => normalize(value),
                    };
                    (key.clone(), normalized)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(normalize).collect()),
        other => other.clone(),
    }
}

/// The placeholder of a volatile key (see [`normalize`]).
fn placeholder(key: &str) -> Option<&'static str> {
    Some(match key {
        _ if key.ends_with("AtMs") => "<time>",
        "timestampMs" | "deadlineMs" | "backoffUntilMs" => "<time>",
        "durationMs" => "<duration>",
        "leaseId" => "<lease-id>",
        "cursor" | "lastCursor" => "<cursor>",
        "addr" => "<addr>",
        "term" => "<term>",
        "lastAppliedIndex" | "lastLogIndex" | "snapshotIndex" => "<index>",
        "stateHash" => "<state-hash>",
        "leaderId" => "<node-id>",
        "role" => "<role>",
        "termsHash" | "terms_hash" => "<terms-hash>",
        _ => return None,
    })
}

fn golden_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("golden").join(format!("{name}.json"))
}

/// Compares a normalized document with `tests/golden/NAME.json`, or writes
/// the file when `GAVEL_BLESS=1`.
#[track_caller]
fn check_golden(name: &str, actual: &Value) {
    let path = golden_path(name);
    let rendered = format!("{}\n", serde_json::to_string_pretty(actual).expect("render JSON"));
    if std::env::var("GAVEL_BLESS").is_ok_and(|bless| bless == "1") {
        std::fs::create_dir_all(path.parent().expect("golden dir")).expect("create golden dir");
        std::fs::write(&path, rendered).expect("write golden file");
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|error| {
        panic!("{}: {error}; create it with GAVEL_BLESS=1. Actual output:\n{rendered}", path.display())
    });
    let expected_value: Value = serde_json::from_str(&expected).expect("golden file is JSON");
    assert!(
        expected_value == *actual,
        "{name}: output differs from {} (rerun with GAVEL_BLESS=1 to accept it)\n--- expected\n{expected}\n--- actual\n{rendered}",
        path.display()
    );
}

const REFUND_TOML: &str = r#"
id = "payments.refund"
sideEffect = "external"
risk = "high"
idempotent = true
timeoutMs = 30000
queue = "payments"
tags = ["finance"]

[retry]
maxAttempts = 3
backoffMs = 250
nonRetryableCodes = ["CARD_DECLINED"]

[approval]
required = true
type = "finance"
"#;

const LOOKUP_JSON: &str = r#"{
  "id": "orders.lookup",
  "sideEffect": "read",
  "risk": "low",
  "retry": {"maxAttempts": 2},
  "tags": ["orders"]
}"#;

/// Leases the next task of `queue` as `worker-1` and reports it completed.
async fn complete_next_task(cluster: &Cluster, queue: &str, output_json: &str) -> String {
    let leader = cluster.wait_for_leader().await;
    let poll_id = format!("poll-{}", uuid::Uuid::new_v4());
    let tasks = retry(|| {
        let mut workers = cluster.workers(leader);
        let request = pb::PollRequest {
            request_id: poll_id.clone(),
            worker_id: "worker-1".to_string(),
            queues: vec![queue.to_string()],
            max_tasks: 1,
            wait_ms: 5_000,
        };
        async move { workers.poll(request).await }
    })
    .await
    .expect("poll")
    .into_inner()
    .tasks;
    let task = tasks.into_iter().next().expect("a task was leased");
    let lease_id = task.lease.as_ref().expect("task lease").lease_id;
    let report_id = format!("report-{}", uuid::Uuid::new_v4());
    retry(|| {
        let mut workers = cluster.workers(leader);
        let request = pb::ReportRequest {
            request_id: report_id.clone(),
            lease_id,
            worker_id: "worker-1".to_string(),
            outcome: Some(pb::report_request::Outcome::Completed(pb::ReportCompleted {
                output_json: output_json.to_string(),
            })),
        };
        async move { workers.report(request).await }
    })
    .await
    .expect("report");
    task.execution_id
}

#[tokio::test(flavor = "multi_thread")]
async fn approval_flow_through_the_cli_matches_the_golden_files() {
    let cluster = Cluster::start(3).await;
    let endpoints = cluster.nodes.iter().map(|node| node.addr.clone()).collect::<Vec<_>>().join(",");
    let endpoints = endpoints.as_str();
    let files = tempfile::tempdir().expect("temp dir");
    let refund_file = files.path().join("refund.toml");
    std::fs::write(&refund_file, REFUND_TOML).expect("write capability file");
    let lookup_file = files.path().join("lookup.json");
    std::fs::write(&lookup_file, LOOKUP_JSON).expect("write capability file");
    let refund_file = refund_file.to_str().expect("utf-8 path");
    let lookup_file = lookup_file.to_str().expect("utf-8 path");

    // The registry: TOML and JSON files, get, get by version, list.
    let registered = gavel(endpoints, &["capability", "register", refund_file, "--json"]).await.json();
    check_golden("capability_register", &normalize(&registered));
    gavel(endpoints, &["capability", "register", lookup_file, "--json"]).await.json();
    let fetched = gavel(endpoints, &["capability", "get", "payments.refund", "--version", "1", "--json"]).await.json();
    assert_eq!(fetched, registered, "get --version 1 returns the registered version");
    let listed = gavel(endpoints, &["capability", "list", "--json"]).await.json();
    check_golden("capability_list", &normalize(&listed));

    // Submit of an approval-required capability creates a pending approval.
    let submitted = gavel(
        endpoints,
        &[
            "exec",
            "submit",
            "payments.refund",
            "--input",
            r#"{"order":"o-1","amount":10}"#,
            "--id",
            "ex-refund-1",
            "--correlation-id",
            "ticket-42",
            "--as",
            "user:alice",
            "--json",
        ],
    )
    .await
    .json();
    check_golden("exec_submit_approval_required", &normalize(&submitted));
    let approval_id = submitted["approval"]["id"].as_str().expect("approval id").to_string();
    assert_eq!(approval_id, "apr_ex-refund-1");

    let pending = gavel(endpoints, &["approval", "list", "--status", "pending", "--json"]).await.json();
    check_golden("approval_list_pending", &normalize(&pending));
    let table = gavel(endpoints, &["approval", "list"]).await;
    assert_eq!(table.code, 0, "{table:#?}");
    assert!(table.stdout.starts_with("ID "), "a table with a header: {table:#?}");
    assert!(table.stdout.contains("apr_ex-refund-1  pending"), "{table:#?}");
    let got = gavel(endpoints, &["approval", "get", &approval_id, "--json"]).await.json();
    check_golden("approval_get_pending", &normalize(&got));

    // Resuming before a decision, and approving one's own request, are refused.
    let early = gavel(endpoints, &["exec", "resume", &approval_id]).await;
    assert_eq!(early.code, 3, "{early:#?}");
    assert!(early.stderr.starts_with("error: APPROVAL_PENDING: "), "{early:#?}");
    let own = gavel(endpoints, &["approval", "approve", &approval_id, "--as", "user:alice", "--yes"]).await;
    assert_eq!(own.code, 3, "{own:#?}");
    // The terms are shown first (standard error), then the refusal.
    assert!(own.stderr.starts_with("the terms of approval apr_ex-refund-1:\n"), "{own:#?}");
    assert!(own.stderr.contains("\nerror: APPROVAL_SELF_APPROVAL: "), "{own:#?}");
    assert!(own.stdout.is_empty(), "{own:#?}");

    // Another actor approves, on the terms hash `approval get` showed;
    // resume consumes the approval and queues the execution.
    let terms_hash = got["termsHash"].as_str().expect("the approval's terms hash");
    let approved = gavel(
        endpoints,
        &[
            "approval",
            "approve",
            &approval_id,
            "--as",
            "user:bob",
            "--comment",
            "refund is legitimate",
            "--terms-hash",
            terms_hash,
            "--json",
        ],
    )
    .await
    .json();
    assert_eq!(approved["termsHash"], terms_hash, "{approved:#}");
    check_golden("approval_approve", &normalize(&approved));
    let resumed = gavel(endpoints, &["exec", "resume", &approval_id, "--json"]).await.json();
    check_golden("exec_resume", &normalize(&resumed));
    // With --wait the resume and the wait are one call (ResumeAndWait),
    // refused as the resume is.
    let again = gavel(endpoints, &["exec", "resume", &approval_id, "--wait", "100"]).await;
    assert_eq!(again.code, 3, "{again:#?}");
    assert!(again.stderr.starts_with("error: APPROVAL_CONSUMED: "), "{again:#?}");

    // A worker completes it; wait, get and events show the result and the trail.
    let executed = complete_next_task(&cluster, "payments", r#"{"refundId":"r-9"}"#).await;
    assert_eq!(executed, "ex-refund-1");
    let waited = gavel(endpoints, &["exec", "wait", "ex-refund-1", "--timeout-ms", "10000", "--json"]).await.json();
    check_golden("exec_wait_completed", &normalize(&waited));
    let got = gavel(endpoints, &["exec", "get", "ex-refund-1", "--json"]).await.json();
    assert_eq!(got, waited, "get shows what wait returned");
    let events = gavel(endpoints, &["exec", "events", "ex-refund-1", "--json"]).await.json();
    let cursors: Vec<u64> = events["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|event| event["cursor"].as_u64().expect("cursor"))
        .collect();
    assert!(cursors.windows(2).all(|pair| pair[0] < pair[1]), "cursors increase: {cursors:?}");
    check_golden("exec_events", &normalize(&events));

    // A wait that times out exits 1 and still prints the execution.
    let queued = gavel(
        endpoints,
        &["exec", "submit", "orders.lookup", "--input", r#"{"order":"o-1"}"#, "--id", "ex-lookup-1", "--as", "bob"],
    )
    .await;
    assert_eq!(queued.code, 0, "{queued:#?}");
    let timed_out = gavel(endpoints, &["exec", "wait", "ex-lookup-1", "--timeout-ms", "200", "--json"]).await;
    assert_eq!(timed_out.code, 1, "{timed_out:#?}");
    assert_eq!(serde_json::from_str::<Value>(&timed_out.stdout).expect("execution JSON")["state"], "queued");
    assert!(timed_out.stderr.contains("still queued"), "{timed_out:#?}");

    // Executions, newest first, a page at a time (issue #40).
    let listed = gavel(endpoints, &["exec", "list", "--json"]).await.json();
    let ids: Vec<&str> =
        listed["executions"].as_array().expect("executions").iter().filter_map(|e| e["executionId"].as_str()).collect();
    assert_eq!(ids, ["ex-lookup-1", "ex-refund-1"], "{listed:#}");
    assert_eq!(listed["nextPageToken"], Value::Null);
    let first = gavel(endpoints, &["exec", "list", "--limit", "1"]).await;
    assert!(first.stdout.contains("ex-lookup-1") && !first.stdout.contains("ex-refund-1"), "{first:#?}");
    let footer = first.stdout.lines().last().expect("a footer");
    let token = footer.strip_prefix("more: --page-token ").expect("the footer names the next page");
    let second = gavel(endpoints, &["exec", "list", "--json", "--limit", "1", "--page-token", token]).await.json();
    assert_eq!(second["executions"][0]["executionId"], "ex-refund-1", "{second:#}");
    let completed =
        gavel(endpoints, &["exec", "list", "--json", "--status", "completed", "--principal", "alice"]).await;
    assert_eq!(completed.json()["executions"][0]["executionId"], "ex-refund-1");
    let too_many = gavel(endpoints, &["exec", "list", "--limit", "1001"]).await;
    assert!(too_many.stderr.contains("PAGE_SIZE_INVALID"), "{too_many:#?}");

    // The audit trail: newest first, then from the printed cursor on.
    let lines = gavel(endpoints, &["audit", "tail", "--json"]).await.json_lines();
    let (last, events) = lines.split_last().expect("at least the cursor line");
    let last_cursor = last["lastCursor"].as_u64().expect("the last line carries lastCursor");
    assert_eq!(events.first().and_then(|event| event["cursor"].as_u64()), Some(last_cursor));
    assert_eq!(last["nextPageToken"], Value::Null, "fewer events than a page");
    check_golden("audit_tail", &normalize(&Value::Array(lines.clone())));
    let after = last_cursor.to_string();
    let resumed_tail = gavel(endpoints, &["audit", "tail", "--json", "--after", &after]).await.json_lines();
    let nothing_new = json!({ "lastCursor": last_cursor, "nextPageToken": null });
    assert_eq!(resumed_tail, vec![nothing_new], "nothing new after the last cursor");
    let middle = events[1]["cursor"].as_u64().expect("cursor").to_string();
    let tail_end = gavel(endpoints, &["audit", "tail", "--json", "--after", &middle]).await.json_lines();
    assert_eq!(tail_end.len(), 2, "one event and the cursor line: {tail_end:#?}");
    assert_eq!(tail_end[0], events[0]);
    // Pages of three, newest first, continue with the token to the oldest.
    let mut paged = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let mut args = vec!["audit", "tail", "--json", "--limit", "3"];
        if let Some(token) = &token {
            args.extend(["--page-token", token.as_str()]);
        }
        let mut page = gavel(endpoints, &args).await.json_lines();
        let footer = page.pop().expect("the cursor line");
        paged.extend(page);
        match footer["nextPageToken"].as_str() {
            Some(next) => token = Some(next.to_string()),
            None => break,
        }
    }
    assert_eq!(paged, events, "pages of three are the one page of every event");

    // Cluster status: one row per node, one leader that every node names, and
    // (once replication has caught up) one state hash.
    cluster.wait_converged().await;
    let status = support::eventually("a cluster status with one leader and one state hash", || async {
        let status = gavel(endpoints, &["cluster", "status", "--json"]).await.json();
        let nodes = status["nodes"].as_array().expect("nodes").clone();
        let leaders: Vec<&Value> = nodes.iter().filter(|node| node["role"] == "leader").collect();
        let agreed = nodes.len() == 3
            && leaders.len() == 1
            && nodes.iter().all(|node| node["leaderId"] == leaders[0]["nodeId"])
            && nodes.iter().all(|node| node["stateHash"] == nodes[0]["stateHash"]);
        agreed.then_some(status)
    })
    .await;
    check_golden("cluster_status", &normalize(&status));
}

/// Reads JSON lines from a running `audit tail --follow --json` until `count`
/// events have arrived, up to [`support::WAIT`].
async fn read_events<R>(lines: &mut tokio::io::Lines<R>, count: usize) -> Vec<Value>
where
    R: tokio::io::AsyncBufRead + Unpin,
{
    let mut events = Vec::new();
    while events.len() < count {
        let line = tokio::time::timeout(support::WAIT, lines.next_line())
            .await
            .expect("an event within the wait")
            .expect("read the follower's output")
            .expect("the follower is still running");
        events.push(serde_json::from_str::<Value>(&line).expect("a JSON line"));
    }
    events
}

#[tokio::test(flavor = "multi_thread")]
async fn audit_tail_follow_resumes_after_the_node_it_reads_from_dies() {
    use tokio::io::AsyncBufReadExt;

    let mut cluster = Cluster::start(3).await;
    let endpoints = cluster.nodes.iter().map(|node| node.addr.clone()).collect::<Vec<_>>().join(",");
    let files = tempfile::tempdir().expect("temp dir");
    let lookup_file = files.path().join("lookup.json");
    std::fs::write(&lookup_file, LOOKUP_JSON).expect("write capability file");
    let registered = gavel(&endpoints, &["capability", "register", lookup_file.to_str().expect("utf-8 path")]).await;
    assert_eq!(registered.code, 0, "{registered:#?}");

    // The follower reads from the first endpoint, node 1, until it dies.
    let mut follower = tokio::process::Command::new(support::gavel_binary())
        .args(["audit", "tail", "--follow", "--json"])
        .arg(format!("--endpoints={endpoints}"))
        .env_remove("GAVEL_LOG")
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start the follower");
    let mut lines = tokio::io::BufReader::new(follower.stdout.take().expect("piped stdout")).lines();
    let mut events = read_events(&mut lines, 1).await;
    assert_eq!(events[0]["type"], "capability.registered");

    cluster.kill(1);
    for index in 1..=3 {
        let id = format!("ex-follow-{index}");
        let submitted = gavel(
            &endpoints,
            &["exec", "submit", "orders.lookup", "--input", r#"{"order":"o-1"}"#, "--id", &id, "--as", "bob"],
        )
        .await;
        assert_eq!(submitted.code, 0, "{submitted:#?}");
    }
    events.extend(read_events(&mut lines, 3).await);
    follower.start_kill().expect("stop the follower");

    let cursors: Vec<u64> = events.iter().map(|event| event["cursor"].as_u64().expect("cursor")).collect();
    assert_eq!(cursors, vec![1, 2, 3, 4], "every event once, in order, across the reconnect");
    let executions: Vec<&str> = events[1..].iter().map(|event| event["executionId"].as_str().expect("id")).collect();
    assert_eq!(executions, ["ex-follow-1", "ex-follow-2", "ex-follow-3"]);
}

#[tokio::test]
async fn unreachable_cluster_exits_4() {
    let closed = format!("127.0.0.1:{}", free_port());
    let listed = gavel(&closed, &["approval", "list", "--retry-budget-ms", "300"]).await;
    assert_eq!(listed.code, 4, "{listed:#?}");
    assert!(listed.stderr.starts_with("error: cluster unreachable: "), "{listed:#?}");
    let status = gavel(&closed, &["cluster", "status", "--json"]).await;
    assert_eq!(status.code, 4, "{status:#?}");
    assert!(status.stdout.is_empty(), "{status:#?}");
}

#[tokio::test]
async fn bad_usage_exits_2() {
    let closed = format!("127.0.0.1:{}", free_port());
    for args in [
        &["approval", "lisst"][..],
        &["approval", "list", "--status", "maybe"],
        &["exec", "submit"],
        &["exec", "get", "ex-1", "--as", "robot:r2"],
        &["cluster", "promote", "not-a-number"],
        &["capability", "register", "capability.yaml"],
    ] {
        let run = gavel(&closed, args).await;
        assert_eq!(run.code, 2, "{args:?}: {run:#?}");
        assert!(run.stderr.starts_with("error: "), "{args:?}: {run:#?}");
    }
}

#[tokio::test]
async fn capability_file_problems_are_reported_together_with_exit_3() {
    let files = tempfile::tempdir().expect("temp dir");
    let file = files.path().join("broken.toml");
    std::fs::write(
        &file,
        "id = 7\nsideEffect = \"writes\"\ntimeoutMs = -1\ncolour = \"red\"\n[retry]\nmaxAtempts = 1\n",
    )
    .expect("write file");
    // The file is checked before any node is contacted.
    let closed = format!("127.0.0.1:{}", free_port());
    let run = gavel(&closed, &["capability", "register", file.to_str().expect("utf-8 path")]).await;
    assert_eq!(run.code, 3, "{run:#?}");
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert!(lines[0].starts_with("error: CAPABILITY_INVALID: capability file "), "{run:#?}");
    assert!(lines[0].ends_with(": 5 problems"), "{run:#?}");
    assert_eq!(
        &lines[1..],
        [
            "  - colour is not a capability field (known: id, sideEffect, risk, idempotent, retry, timeoutMs, heartbeatTimeoutMs, approval, queue, tags)",
            "  - id must be a string",
            "  - sideEffect \"writes\" is not one of none, read, write, destructive, external",
            "  - timeoutMs must be a non-negative integer",
            "  - retry.maxAtempts is not a capability field (known: maxAttempts, backoffMs, nonRetryableCodes)",
        ]
    );
}

/// Runs `gavel ARGS...` (with `--endpoints`, as [`gavel`] does) under
/// `script`, so its standard input and error are a terminal, typing
/// `typed`; returns what the terminal showed. `None` where `script`
/// (util-linux) is not installed.
async fn gavel_at_a_terminal(endpoints: &str, args: &[&str], typed: &str) -> Option<Run> {
    use tokio::io::AsyncWriteExt;

    let script = ["/usr/bin/script", "/bin/script"].into_iter().find(|path| Path::new(path).is_file())?;
    // Every argument here is a plain word (ids, flags, host:port).
    let command = format!("{} {} --endpoints={endpoints}", support::gavel_binary().display(), args.join(" "));
    let mut child = tokio::process::Command::new(script)
        .args(["-q", "-e", "-c", &command, "/dev/null"])
        .env_remove("GAVEL_ENDPOINTS")
        .env_remove("GAVEL_ACTOR")
        .env_remove("GAVEL_RETRY_BUDGET_MS")
        .env_remove("GAVEL_LOG")
        .env("USER", "cli-test")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start script");
    let mut stdin = child.stdin.take().expect("piped stdin");
    stdin.write_all(typed.as_bytes()).await.expect("type the answer");
    drop(stdin);
    let output = tokio::time::timeout(support::WAIT, child.wait_with_output())
        .await
        .expect("the command ends within the wait")
        .expect("run script");
    Some(Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    })
}

/// The line of `text` starting with `label`, without it.
#[track_caller]
fn line_after<'a>(text: &'a str, label: &str) -> &'a str {
    text.lines().find_map(|line| line.strip_prefix(label)).unwrap_or_else(|| panic!("no {label:?} line in {text}"))
}

/// SPEC §13 from the CLI: `approval approve` shows the terms and decides
/// only on a confirmation (a terminal's yes, `--yes` or `--terms-hash`),
/// sending the hash confirmed; a stale hash is refused; a standing
/// approval's terms say so loudly; a vote can be withdrawn; and
/// `--unsafe-ids` finds no id on a cluster that stores only safe ones.
#[tokio::test(flavor = "multi_thread")]
async fn approving_from_the_cli_binds_the_terms_the_person_was_shown() {
    let cluster = Cluster::start(1).await;
    let endpoints = cluster.nodes.iter().map(|node| node.addr.clone()).collect::<Vec<_>>().join(",");
    let endpoints = endpoints.as_str();
    let files = tempfile::tempdir().expect("temp dir");
    let refund_file = files.path().join("refund.toml");
    std::fs::write(&refund_file, REFUND_TOML).expect("write capability file");
    let registered = gavel(endpoints, &["capability", "register", refund_file.to_str().expect("utf-8 path")]).await;
    assert_eq!(registered.code, 0, "{registered:#?}");

    // The submit hint names who may decide and the command they run.
    let input = r#"{"order":"o-2","amount":20}"#;
    let submitted = gavel(
        endpoints,
        &["exec", "submit", "payments.refund", "--input", input, "--id", "ex-2", "--as", "user:alice"],
    )
    .await;
    assert_eq!(submitted.code, 0, "{submitted:#?}");
    let out = &submitted.stdout;
    assert_eq!(line_after(out, "who may decide:    "), "an approver other than user:alice (the requester)", "{out}");
    let printed = line_after(out, "an approver runs:  ");
    assert_eq!(printed, "gavel approval approve apr_ex-2", "{out}");
    let shown = gavel(endpoints, &["approval", "get", "apr_ex-2", "--json"]).await.json();
    let terms_hash = shown["termsHash"].as_str().expect("a terms hash").to_string();
    assert_eq!(terms_hash.len(), 64, "{shown:#}");
    assert_eq!(shown["terms"]["approvalId"], "apr_ex-2", "{shown:#}");

    // Without a terminal and without --yes or --terms-hash, nothing is
    // decided: the terms are shown and the message says what to do.
    let unconfirmed = gavel(endpoints, &["approval", "approve", "apr_ex-2", "--as", "user:bob"]).await;
    assert_eq!(unconfirmed.code, 2, "{unconfirmed:#?}");
    assert!(unconfirmed.stdout.is_empty(), "{unconfirmed:#?}");
    let stderr = &unconfirmed.stderr;
    assert!(stderr.starts_with("the terms of approval apr_ex-2:\n"), "{unconfirmed:#?}");
    assert!(stderr.contains(r#"  input       {"amount":20,"order":"o-2"}"#), "{unconfirmed:#?}");
    assert!(stderr.contains("  uses        one use\n"), "{unconfirmed:#?}");
    assert!(stderr.contains(&format!("  terms hash  {terms_hash}\n")), "{unconfirmed:#?}");
    assert!(stderr.contains("there is no terminal to ask on"), "{unconfirmed:#?}");
    assert!(stderr.contains(&format!("--terms-hash {terms_hash}")) && stderr.contains("--yes"), "{unconfirmed:#?}");

    // A hash of other terms is refused by the cluster, and a malformed one
    // by the CLI before anything is sent.
    let stale = "0".repeat(64);
    let refused =
        gavel(endpoints, &["approval", "approve", "apr_ex-2", "--as", "user:bob", "--terms-hash", &stale]).await;
    assert_eq!(refused.code, 3, "{refused:#?}");
    assert!(refused.stderr.contains("error: APPROVAL_TERMS_CHANGED: "), "{refused:#?}");
    let malformed =
        gavel(endpoints, &["approval", "approve", "apr_ex-2", "--as", "user:bob", "--terms-hash", "abc"]).await;
    assert_eq!(malformed.code, 2, "{malformed:#?}");
    let still = gavel(endpoints, &["approval", "get", "apr_ex-2", "--json"]).await.json();
    assert_eq!(still["status"], "pending", "{still:#}");

    // The printed command works as printed at a terminal: it asks, and a
    // "no" decides nothing while a "yes" approves.
    let pasted: Vec<&str> = printed.split_whitespace().skip(1).chain(["--as", "user:bob"]).collect();
    if let Some(declined) = gavel_at_a_terminal(endpoints, &pasted, "n\n").await {
        assert_eq!(declined.code, 1, "{declined:#?}");
        assert!(declined.stdout.contains("approve these terms? [y/N]"), "{declined:#?}");
        assert!(declined.stdout.contains("nothing decided"), "{declined:#?}");
        let accepted = gavel_at_a_terminal(endpoints, &pasted, "y\n").await.expect("script ran once");
        assert_eq!(accepted.code, 0, "{accepted:#?}");
        assert!(accepted.stdout.contains("approved by user:bob"), "{accepted:#?}");
    } else {
        eprintln!("no `script` here: the terminal prompt is not exercised; approving with --yes instead");
        let approved = gavel(endpoints, &["approval", "approve", "apr_ex-2", "--as", "user:bob", "--yes"]).await;
        assert_eq!(approved.code, 0, "{approved:#?}");
    }
    let decided = gavel(endpoints, &["approval", "get", "apr_ex-2", "--json"]).await.json();
    assert_eq!(decided["status"], "approved", "{decided:#}");

    // A standing approval's terms say so before anything else.
    let standing = gavel(
        endpoints,
        &[
            "approval",
            "standing",
            "create",
            "--id",
            "standing-2",
            "--capability",
            "payments.refund",
            "--uses",
            "3",
            "--window",
            "1h",
            "--bind",
            "/order",
            "--input",
            input,
            "--as",
            "user:alice",
        ],
    )
    .await;
    assert_eq!(standing.code, 0, "{standing:#?}");
    let shown = gavel(endpoints, &["approval", "reject", "standing-2", "--as", "user:bob"]).await;
    assert_eq!(shown.code, 2, "{shown:#?}");
    assert!(
        shown
            .stderr
            .starts_with("the terms of approval standing-2 (a STANDING approval: one \"yes\" covers up to 3 uses):\n"),
        "{shown:#?}"
    );
    let uses = "  uses        STANDING: up to 3 uses within 1h of the decision; bound: /order = \"o-2\"; \
                other fields may differ per use\n";
    assert!(shown.stderr.contains(uses), "{shown:#?}");

    // A vote can be withdrawn, and cast again.
    let policy =
        ["policy", "set", "pair", "--capabilities", "payments.refund", "--factor", "two=2/group/user:bob,user:carol"];
    assert_eq!(gavel(endpoints, &policy).await.code, 0);
    let governed = gavel(
        endpoints,
        &["exec", "submit", "payments.refund", "--input", input, "--id", "ex-3", "--as", "user:alice"],
    )
    .await;
    assert_eq!(governed.code, 0, "{governed:#?}");
    let vote = ["approval", "approve", "apr_ex-3", "--as", "user:bob", "--yes", "--json"];
    let voted = gavel(endpoints, &vote).await.json();
    assert_eq!(voted["quorum"]["votes"].as_array().map(Vec::len), Some(1), "{voted:#}");
    let twice = gavel(endpoints, &vote).await;
    assert_eq!(twice.code, 3, "{twice:#?}");
    assert!(twice.stderr.contains("VOTE_DUPLICATE"), "{twice:#?}");
    let withdrawn = gavel(endpoints, &["approval", "withdraw", "apr_ex-3", "--as", "user:bob", "--json"]).await.json();
    assert_eq!(withdrawn["status"], "pending", "{withdrawn:#}");
    assert_eq!(withdrawn["quorum"]["votes"], json!([]), "{withdrawn:#}");
    let again = gavel(endpoints, &vote).await.json();
    assert_eq!(again["quorum"]["votes"].as_array().map(Vec::len), Some(1), "{again:#}");

    // Every id this cluster stored is safe: --unsafe-ids lists none.
    let listed = gavel(endpoints, &["approval", "list", "--unsafe-ids", "--json"]).await.json();
    assert_eq!(listed, json!({ "approvals": [], "nextPageToken": null }));
    let table = gavel(endpoints, &["approval", "list", "--unsafe-ids"]).await;
    assert_eq!(table.code, 0, "{table:#?}");
    assert!(table.stdout.is_empty() && table.stderr.contains("no approval id breaks the id rule"), "{table:#?}");
}
