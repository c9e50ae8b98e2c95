//! `gavel dev` fails loudly and says what to do: it prints the
//! `export GAVEL_ENDPOINTS=... GAVEL_CA=... GAVEL_CERT=... GAVEL_KEY=...`
//! line the CLI then works with (as the admin, over TLS), refuses ports
//! another cluster holds (naming the port), and ends with an error naming
//! the node and its log when one of its nodes exits, during start or later.
//! On a running `gavel dev` it also replays issue #37 from the CLI: a decoy
//! id that walks a path is refused, and a standing approval that names no
//! types shows its 100 uses and is governed by the policy on its
//! capability's registered type (one approver cannot approve it alone).

mod support;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// How long a failing `gavel dev` may take to exit.
const FAILS_WITHIN: Duration = Duration::from_secs(10);
/// How long a healthy `gavel dev` may take to print its endpoints.
const STARTS_WITHIN: Duration = Duration::from_secs(30);

/// Held by each test of this file: they run one at a time, so that one's
/// deliberate port clashes and short-lived clusters never meet the other's.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Three consecutive free loopback ports; returns the first.
fn free_base_port() -> u16 {
    for _ in 0..50 {
        let base = support::free_port();
        if base > u16::MAX - 102 {
            continue;
        }
        // The three gRPC ports, the three metrics ports (`gavel dev` serves
        // metrics at each port + 100) and the console's (+ 99).
        let free = (0..3)
            .flat_map(|offset| [base + offset, base + 100 + offset])
            .chain([base + 99])
            .all(|port| std::net::TcpListener::bind(("127.0.0.1", port)).is_ok());
        if free {
            return base;
        }
    }
    panic!("no three consecutive free ports (and their metrics ports)");
}

/// A running `gavel dev`, SIGTERMed (so it stops its nodes) and reaped on drop.
struct Dev {
    child: Child,
    lines: mpsc::Receiver<String>,
    stderr: std::path::PathBuf,
}

impl Dev {
    fn start(base_port: u16, data_dir: &Path, stderr: std::path::PathBuf) -> Dev {
        Dev::start_with(base_port, data_dir, stderr, &[])
    }

    /// [`Dev::start`] with `extra` flags.
    fn start_with(base_port: u16, data_dir: &Path, stderr: std::path::PathBuf, extra: &[&str]) -> Dev {
        let mut child = Command::new(support::gavel_binary())
            .args(["dev", "--base-port", &base_port.to_string(), "--data-dir"])
            .arg(data_dir)
            .args(extra)
            .env_remove("RUST_BACKTRACE")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).expect("stderr file"))
            .spawn()
            .expect("start gavel dev");
        let stdout = child.stdout.take().expect("piped stdout");
        let (sender, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if sender.send(line).is_err() {
                    return;
                }
            }
        });
        Dev { child, lines, stderr }
    }

    /// The lines printed up to and including the first one starting with `prefix`.
    fn read_until(&self, prefix: &str, within: Duration) -> Vec<String> {
        let deadline = Instant::now() + within;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let done = line.starts_with(prefix);
                    seen.push(line);
                    if done {
                        return seen;
                    }
                }
                Err(_) => panic!("no line starting with {prefix:?} within {within:?}; got {seen:#?}"),
            }
        }
    }

    /// Waits (bounded) for the exit; returns its code and standard error.
    fn wait_exit(&mut self, within: Duration) -> (Option<i32>, String) {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().expect("poll gavel dev") {
                let stderr = std::fs::read_to_string(&self.stderr).unwrap_or_default();
                return (status.code(), stderr);
            }
            assert!(Instant::now() < deadline, "gavel dev still runs after {within:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Dev {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = kill(Pid::from_raw(self.child.id() as i32), Signal::SIGTERM);
            let _ = self.child.wait();
        }
    }
}

/// The `NAME=value` pairs of `gavel dev`'s `export ...` line.
/// The whole answer to a plain HTTP/1.1 GET on loopback.
fn http_get(port: u16, path: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect to the console");
    stream.set_read_timeout(Some(Duration::from_secs(10))).expect("read timeout");
    write!(stream, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").expect("send");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("read the answer");
    answer
}

fn exported(line: &str) -> Vec<(String, String)> {
    line.trim_start_matches("export ")
        .split_whitespace()
        .filter_map(|pair| pair.split_once('='))
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect()
}

/// Runs `gavel ARGS...` with the environment `gavel dev` printed.
fn gavel_with_env(env: &[(String, String)], args: &[&str]) -> Output {
    Command::new(support::gavel_binary())
        .args(args)
        .envs(env.iter().map(|(name, value)| (name.as_str(), value.as_str())))
        .env_remove("GAVEL_RETRY_BUDGET_MS")
        .env_remove("GAVEL_INSECURE")
        .env_remove("GAVEL_TOKEN")
        .env_remove("GAVEL_TOKEN_FILE")
        .output()
        .expect("run gavel")
}

/// Runs `gavel ARGS...` and returns its standard output, asserting exit 0.
fn succeeded(env: &[(String, String)], args: &[&str]) -> String {
    let output = gavel_with_env(env, args);
    assert_eq!(output.status.code(), Some(0), "gavel {args:?}: {output:?}");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// docs/audit.md's "An auditor's walk-through", step by step.
fn audit_walk_through(env: &[(String, String)], dir: &Path) {
    let started = Instant::now();
    let file = |name: &str| dir.join(name).to_str().expect("a UTF-8 path").to_string();
    // 1. The keys (each node's, as a log key and as its cosigner key) and a checkpoint.
    let keys = succeeded(env, &["audit", "keys"]);
    assert_eq!(keys.lines().count(), 6, "{keys}");
    std::fs::write(file("cluster.keys"), &keys).expect("write the keys");
    // The first checkpoint is published within about a second of the first events.
    let by = Instant::now() + STARTS_WITHIN;
    let monday = loop {
        let checkpoint = gavel_with_env(env, &["audit", "checkpoint"]);
        if checkpoint.status.success() || Instant::now() > by {
            break String::from_utf8_lossy(&checkpoint.stdout).into_owned();
        }
        assert!(String::from_utf8_lossy(&checkpoint.stderr).contains("AUDIT_CHECKPOINT_UNSIGNED"), "{checkpoint:?}");
        std::thread::sleep(Duration::from_millis(200));
    };
    let origin = monday.lines().next().expect("an origin line").to_string();
    assert!(monday.contains(&format!("\n\n\u{2014} {origin} ")), "the log's signature: {monday}");
    assert!(
        monday.lines().filter(|line| line.starts_with(&format!("\u{2014} {origin}/node-"))).count() >= 2,
        "{monday}"
    );
    std::fs::write(file("monday.checkpoint"), &monday).expect("write the checkpoint");
    // More events, then a checkpoint past Monday's.
    let record = ["audit", "record", "walk.through", "--payload", "{}"];
    succeeded(env, &record);
    let monday_size: u64 = monday.lines().nth(1).and_then(|size| size.parse().ok()).expect("a size");
    let by = Instant::now() + STARTS_WITHIN;
    while succeeded(env, &["audit", "checkpoint"]).lines().nth(1).and_then(|size| size.parse::<u64>().ok())
        <= Some(monday_size)
    {
        assert!(Instant::now() < by, "no checkpoint past size {monday_size}");
        std::thread::sleep(Duration::from_millis(200));
    }
    // 2. Export with Monday's checkpoint; 3. verify with the keys.
    let exported =
        succeeded(env, &["audit", "export", &file("trail.jsonl"), "--checkpoint", &file("monday.checkpoint")]);
    assert!(exported.starts_with("exported "), "{exported}");
    let verified = succeeded(env, &["audit", "verify", &file("trail.jsonl"), "--keys", &file("cluster.keys")]);
    assert!(verified.starts_with("verified: ") && verified.contains("1 consistency proofs"), "{verified}");
    // 4. Prove one event and verify the proof on its own.
    succeeded(env, &["audit", "proof", "1", "--out", &file("event.proof")]);
    let proven = succeeded(env, &["audit", "verify-proof", &file("event.proof"), "--keys", &file("cluster.keys")]);
    assert!(proven.starts_with(&format!("verified: the event at cursor 1 is in {origin}'s tree of ")), "{proven}");
    println!("the audit walk-through took {:?}", started.elapsed());
}

#[test]
fn gavel_dev_prints_its_endpoints_refuses_taken_ports_and_dies_loudly_with_a_node() {
    let _serial = one_at_a_time();
    let dir = tempfile::tempdir().expect("temp dir");
    let base = free_base_port();
    let mut dev = Dev::start(base, &dir.path().join("dev"), dir.path().join("dev.stderr"));
    let printed = dev.read_until("export GAVEL_ENDPOINTS=", STARTS_WITHIN);
    let export = printed.last().expect("the export line");
    let env = exported(export);
    let names: Vec<&str> = env.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names, ["GAVEL_ENDPOINTS", "GAVEL_CA", "GAVEL_CERT", "GAVEL_KEY"], "{export}");
    assert_eq!(env[0].1, format!("127.0.0.1:{base},127.0.0.1:{},127.0.0.1:{}", base + 1, base + 2));
    for (name, path) in &env[1..] {
        assert!(Path::new(path).is_file(), "{name}={path} names no file");
    }
    // It serves the console at --base-port + 99, with its security headers.
    let console = dev.read_until("gavel dev: console ", STARTS_WITHIN);
    let url = format!("http://127.0.0.1:{}", base + 99);
    assert!(console.last().is_some_and(|line| line.contains(&url)), "{console:#?}");
    let signin = http_get(base + 99, "/signin");
    assert!(signin.starts_with("HTTP/1.1 200"), "{signin}");
    assert!(signin.contains("content-security-policy: default-src 'self'"), "{signin}");
    assert!(signin.contains("Development sign-in"), "{signin}");

    // The CLI works on a non-default base port with just the printed line,
    // over TLS as the cluster's first admin (whichever node bootstrapped it).
    let status = gavel_with_env(&env, &["cluster", "status"]);
    let stdout = String::from_utf8_lossy(&status.stdout);
    assert_eq!(status.status.code(), Some(0), "{status:?}");
    assert!(stdout.contains("leader"), "{stdout}");
    // The node that won the first election proposed the bootstrap admin.
    let admin_by = Instant::now() + STARTS_WITHIN;
    let whoami = loop {
        let whoami = gavel_with_env(&env, &["access", "whoami", "--json"]);
        let answer: serde_json::Value = serde_json::from_slice(&whoami.stdout).unwrap_or_default();
        // `gavel dev` prints its export line after granting the roles, so
        // both are there once the bootstrap admin is.
        let is_admin =
            answer["grants"].as_array().is_some_and(|grants| grants.iter().any(|grant| grant["grant"] == "admin"));
        if (whoami.status.success() && is_admin) || Instant::now() > admin_by {
            break (whoami, answer);
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(whoami.1["principal"], "user:admin", "{:?}", whoami.0);
    // The dev admin holds admin and every role the quick start plays.
    let held: Vec<&str> = whoami.1["grants"]
        .as_array()
        .map(|grants| grants.iter().filter_map(|grant| grant["grant"].as_str()).collect())
        .unwrap_or_default();
    for grant in ["admin", "submitter", "approver", "worker", "auditor", "act-for", "delegate-decide"] {
        assert!(held.contains(&grant), "{grant} missing from {held:?}: {:?}", whoami.0);
    }
    // ... and nothing else: the printed text names exactly what it holds.
    for grant in ["clock", "self-approval"] {
        assert!(!held.contains(&grant), "{grant} held: {held:?}");
    }
    let said = printed
        .iter()
        .find_map(|line| line.split_once("(it holds ").and_then(|(_, rest)| rest.split_once(';')))
        .map(|(grants, _)| grants.split(", ").collect::<Vec<_>>())
        .unwrap_or_else(|| panic!("no \"(it holds ...;\" in {printed:#?}"));
    let (mut said_sorted, mut held_sorted) = (said.clone(), held.clone());
    said_sorted.sort_unstable();
    held_sorted.sort_unstable();
    assert_eq!(said_sorted, held_sorted, "gavel dev printed {said:?}, the admin holds {held:?}");
    // The quick start: the admin submits for a persona, so it is the
    // requester's principal and may not approve as itself; the submit's
    // hint says so and names the command that works from this shell.
    let capability = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/refund-worker/capability.toml");
    let registered = gavel_with_env(&env, &["capability", "register", capability.to_str().expect("a UTF-8 path")]);
    assert_eq!(registered.status.code(), Some(0), "{registered:?}");
    let input = r#"{"order_id":"o-42","amount_cents":1250}"#;
    let submit = ["exec", "submit", "orders.refund", "--id", "refund-1", "--input", input, "--as", "user:agent-alice"];
    let submitted = gavel_with_env(&env, &submit);
    let hint = String::from_utf8_lossy(&submitted.stdout).to_string();
    assert_eq!(submitted.status.code(), Some(0), "{submitted:?}");
    assert!(
        hint.contains("who may decide:    an approver other than user:agent-alice (the requester) and user:admin"),
        "{hint}"
    );
    let as_yourself = ["approval", "approve", "apr_refund-1", "--yes"];
    let refused = gavel_with_env(&env, &as_yourself);
    assert_eq!(refused.status.code(), Some(3), "{refused:?}");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("APPROVAL_SELF_APPROVAL"), "{refused:?}");
    let in_dev = hint
        .lines()
        .find_map(|line| line.strip_prefix("in gavel dev:"))
        .unwrap_or_else(|| panic!("no \"in gavel dev:\" line in {hint}"));
    // As printed; `--yes` stands for the terminal's confirmation.
    let words: Vec<&str> = in_dev.split_whitespace().skip(1).chain(["--yes"]).collect();
    assert_eq!(words[..3], ["approval", "approve", "apr_refund-1"], "{in_dev}");
    let approved = gavel_with_env(&env, &words);
    assert_eq!(approved.status.code(), Some(0), "{approved:?}");
    assert!(String::from_utf8_lossy(&approved.stdout).contains("approved by user:bob-finance"), "{approved:?}");

    // Issue #37 replayed on `gavel dev`. A policy of two finance approvers
    // on the approval type orders.refund's registration declares (`human`).
    let pay2 = ["policy", "set", "pay2", "--types", "human", "--factor", "finance=2/scope/finance"];
    assert_eq!(gavel_with_env(&env, &pay2).status.code(), Some(0));
    // A decoy whose id walks a path is refused at creation.
    let decoy_input = r#"{"order_id":"o-9","amount_cents":1}"#;
    let decoy = [
        "approval",
        "standing",
        "create",
        "--id",
        "z/../../approvals/apr_refund-1",
        "--capability",
        "orders.refund",
        "--uses",
        "1",
        "--window",
        "1h",
        "--input",
        decoy_input,
    ];
    let refused = gavel_with_env(&env, &decoy);
    assert_ne!(refused.status.code(), Some(0), "{refused:?}");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("INVALID_ARGUMENT"), "{refused:?}");
    // A standing approval naming no types: 100 uses in 7 days, bound on
    // /order_id only. Its terms say so, and the policy governs it all the
    // same: carol, an approver of every type, cannot approve it alone.
    let standing = [
        "approval",
        "standing",
        "create",
        "--id",
        "standing-o-9",
        "--capability",
        "orders.refund",
        "--uses",
        "100",
        "--window",
        "7d",
        "--bind",
        "/order_id",
        "--input",
        decoy_input,
        "--json",
    ];
    let created = gavel_with_env(&env, &standing);
    assert_eq!(created.status.code(), Some(0), "{created:?}");
    let created: serde_json::Value = serde_json::from_slice(&created.stdout).expect("JSON");
    assert_eq!(created["quorum"]["policy"], "pay2", "governed by its registered type: {created}");
    let terms = &created["terms"];
    assert_eq!(terms["uses"]["max"], 100, "{created}");
    assert_eq!(terms["uses"]["bound"][0]["pointer"], "/order_id", "{created}");
    let ca = env.iter().find(|(name, _)| name == "GAVEL_CA").map(|(_, value)| value.clone()).expect("GAVEL_CA");
    let certs = Path::new(&ca).parent().expect("the certs directory").to_str().expect("UTF-8").to_string();
    let token = gavel_with_env(&env, &["token", "issue", "--certs-dir", &certs, "--sub", "user:carol"]);
    let token = String::from_utf8_lossy(&token.stdout).trim().to_string();
    let as_carol: Vec<(String, String)> = env
        .iter()
        .filter(|(name, _)| name == "GAVEL_ENDPOINTS" || name == "GAVEL_CA")
        .cloned()
        .chain([("GAVEL_TOKEN".to_string(), token)])
        .collect();
    let alone = Command::new(support::gavel_binary())
        .args(["approval", "approve", "standing-o-9", "--yes"])
        .envs(as_carol.iter().map(|(name, value)| (name.as_str(), value.as_str())))
        .env_remove("GAVEL_CERT")
        .env_remove("GAVEL_KEY")
        .output()
        .expect("run gavel");
    assert_eq!(alone.status.code(), Some(3), "{alone:?}");
    assert!(String::from_utf8_lossy(&alone.stderr).contains("PERMISSION_DENIED"), "{alone:?}");
    let still = gavel_with_env(&env, &["approval", "get", "standing-o-9", "--json"]);
    let still: serde_json::Value = serde_json::from_slice(&still.stdout).expect("JSON");
    assert_eq!(still["status"], "pending", "{still}");

    // docs/audit.md's walk-through, as written, on this cluster: it signs
    // like a production one (issue #41).
    audit_walk_through(&env, dir.path());

    // Without the credentials the same endpoints refuse plaintext.
    let plain = gavel_with_env(&env[..1], &["cluster", "status"]);
    assert_ne!(plain.status.code(), Some(0), "{plain:?}");

    // A second `gavel dev` on the same ports fails at once, naming the port.
    let started = Instant::now();
    let mut second = Dev::start(base, &dir.path().join("second"), dir.path().join("second.stderr"));
    let (code, stderr) = second.wait_exit(FAILS_WITHIN);
    assert_ne!(code, Some(0), "{stderr}");
    assert!(stderr.contains(&format!("port {base}")) && stderr.contains("in use"), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());

    // A `gavel dev` whose nodes exit during start (their data directory is
    // locked by the running cluster) ends with the node and its log.
    let other = free_base_port();
    let mut locked = Dev::start(other, &dir.path().join("dev"), dir.path().join("locked.stderr"));
    let (code, stderr) = locked.wait_exit(FAILS_WITHIN);
    assert_ne!(code, Some(0), "{stderr}");
    assert!(stderr.contains("exited during start") && stderr.contains(".log"), "{stderr}");

    // A node that dies later ends `gavel dev` with its id, status and log.
    let node2 = printed
        .iter()
        .find_map(|line| line.strip_prefix("gavel dev: node 2 pid "))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|pid| pid.parse::<i32>().ok())
        .unwrap_or_else(|| panic!("node 2's pid in {printed:#?}"));
    kill(Pid::from_raw(node2), Signal::SIGKILL).expect("kill node 2");
    let (code, stderr) = dev.wait_exit(FAILS_WITHIN);
    assert_ne!(code, Some(0), "{stderr}");
    assert!(stderr.contains("node 2 exited") && stderr.contains("n2.log"), "{stderr}");
}

/// A SIGTERM that arrives as soon as the `export` line is printed, while
/// `gavel dev` still sets up the console, stops every node: before the
/// signals were taken at start, the default action ended `gavel dev` alone
/// and its nodes ran on, holding their ports, with no parent.
#[test]
fn a_sigterm_right_after_the_export_line_stops_every_node() {
    let _serial = one_at_a_time();
    let dir = tempfile::tempdir().expect("temp dir");
    let mut dev = Dev::start(free_base_port(), &dir.path().join("dev"), dir.path().join("dev.stderr"));
    let printed = dev.read_until("export GAVEL_ENDPOINTS=", STARTS_WITHIN);
    kill(Pid::from_raw(dev.child.id() as i32), Signal::SIGTERM).expect("SIGTERM gavel dev");
    let pids: Vec<i32> = printed
        .iter()
        .filter_map(|line| line.strip_prefix("gavel dev: node "))
        .filter_map(|rest| rest.split(" pid ").nth(1)?.split_whitespace().next()?.parse().ok())
        .collect();
    assert_eq!(pids.len(), 3, "three node pids in {printed:#?}");
    let (code, stderr) = dev.wait_exit(FAILS_WITHIN);
    assert_eq!(code, Some(0), "a SIGTERM is a clean stop: {stderr}");
    for pid in pids {
        // Reaped by gavel dev: gone, or at most a zombie of nobody's.
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = state.rsplit(')').next().and_then(|rest| rest.split_whitespace().next()).unwrap_or("");
        assert!(state.is_empty() || state == "Z", "node pid {pid} still runs (state {state}) after gavel dev exited");
    }
}

/// One HTTP/1.1 POST received on `listener`, answered 200: its head
/// (request line and headers, lower-cased) and body.
fn receive_post(listener: &std::net::TcpListener) -> (String, String) {
    use std::io::{Read, Write};
    let (mut stream, _) = listener.accept().expect("a post");
    stream.set_read_timeout(Some(STARTS_WITHIN)).expect("read timeout");
    let mut received = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        let read = stream.read(&mut buffer).expect("read the post");
        assert!(read > 0, "the post ended early: {}", String::from_utf8_lossy(&received));
        received.extend_from_slice(&buffer[..read]);
        let text = String::from_utf8_lossy(&received).to_string();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let head = head.to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|line| line.strip_prefix("content-length:"))
                .and_then(|value| value.trim().parse().ok())
                .expect("a content-length");
            if body.len() >= length {
                stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n").expect("answer");
                return (head, body.to_string());
            }
        }
    }
}

/// `gavel dev --notify generic=URL` runs a notifier beside the console: an
/// approval created after the start reaches the webhook, signed, with a
/// link to the dev console.
#[test]
fn gavel_dev_notify_posts_a_new_approval_with_a_link_to_its_console() {
    let _serial = one_at_a_time();
    let dir = tempfile::tempdir().expect("temp dir");
    let base = free_base_port();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the receiver");
    let webhook = format!("generic=http://{}/hook", listener.local_addr().expect("address"));
    let dev = Dev::start_with(base, &dir.path().join("dev"), dir.path().join("dev.stderr"), &["--notify", &webhook]);
    let printed = dev.read_until("export GAVEL_ENDPOINTS=", STARTS_WITHIN);
    let env = exported(printed.last().expect("the export line"));
    let notifier = dev.read_until("gavel dev: notifier posting", STARTS_WITHIN);
    let secret_file = notifier.last().and_then(|line| line.rsplit(' ').next()).map(|path| path.trim_end_matches(')'));
    assert!(secret_file.is_some_and(|path| Path::new(path).is_file()), "{notifier:#?}");

    // An approval, created as alice by the dev admin (it holds act-for).
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let value = |name: &str| env.iter().find(|(key, _)| key == name).map(|(_, value)| value.clone());
    let credentials = gavel_client::Credentials {
        ca: value("GAVEL_CA").map(Into::into),
        cert: value("GAVEL_CERT").map(Into::into),
        key: value("GAVEL_KEY").map(Into::into),
        token: None,
        token_file: None,
        insecure: false,
    };
    let config = credentials.apply(gavel_client::ClientConfig::default()).expect("credentials");
    let endpoints: Vec<String> = value("GAVEL_ENDPOINTS").unwrap_or_default().split(',').map(String::from).collect();
    let _in_runtime = runtime.enter();
    let client = gavel_client::Client::with_config(&endpoints, config).expect("client");
    runtime
        .block_on(client.create_approval(gavel_client::pb::CreateApprovalRequest {
            id: "apr-dev-2".into(),
            capability_id: "orders.refund".into(),
            surface: "dev-test".into(),
            input_json: "{}".into(),
            types: vec!["finance".into()],
            risk: gavel_client::pb::Risk::High as i32,
            side_effect: gavel_client::pb::SideEffect::Write as i32,
            actor: Some(gavel_client::pb::Actor {
                id: "alice".into(),
                kind: gavel_client::pb::ActorKind::User as i32,
                ..gavel_client::pb::Actor::default()
            }),
            ..gavel_client::pb::CreateApprovalRequest::default()
        }))
        .expect("create an approval");
    let (head, body) = receive_post(&listener);
    assert!(head.contains("gavel-delivery: apr-dev-2"), "{head}");
    assert!(head.contains("gavel-signature: t="), "{head}");
    let body: serde_json::Value = serde_json::from_str(&body).expect("a JSON body");
    assert_eq!(body["url"], format!("http://127.0.0.1:{}/approvals/apr-dev-2", base + 99));
}
