//! The CLI and the SDK say what went wrong and what to do: a malformed
//! `--endpoints` is a usage error at once (exit 2), an unreachable cluster
//! names the endpoints tried, a lost quorum is named as such (exit 4) even
//! by `cluster status` while the lone node still calls itself leader,
//! `refund-worker` pointed at nothing says so, and a terminal without the
//! CA pointed at a TLS cluster is told so at once.

mod support;

use std::time::{Duration, Instant};

use support::{free_port, Cluster};

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    took: Duration,
}

impl std::fmt::Debug for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "exit {:?} after {:?}\nstdout: {}\nstderr: {}", self.code, self.took, self.stdout, self.stderr)
    }
}

/// Runs `gavel ARGS... --endpoints=ENDPOINTS` with nothing from the caller's
/// environment that the CLI reads.
async fn gavel(endpoints: &str, args: &[&str]) -> Run {
    let started = Instant::now();
    let output = support::run_gavel(endpoints, args, &[]).await;
    Run {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        took: started.elapsed(),
    }
}

#[tokio::test]
async fn malformed_endpoints_exit_2_at_once() {
    for endpoints in ["garbage", "127.0.0.1", "127.0.0.1:7401,host:port"] {
        for args in [&["approval", "list"][..], &["cluster", "status"]] {
            let run = gavel(endpoints, args).await;
            assert_eq!(run.code, Some(2), "{endpoints} {args:?}: {run:?}");
            assert!(run.stderr.contains("is not host:port"), "{endpoints} {args:?}: {run:?}");
            assert!(run.took < Duration::from_secs(2), "{endpoints} {args:?}: {run:?}");
        }
    }
}

#[tokio::test]
async fn an_unreachable_cluster_names_the_endpoints_tried_and_what_to_do() {
    let closed = format!("127.0.0.1:{}", free_port());
    let run = gavel(&closed, &["approval", "list", "--retry-budget-ms", "300"]).await;
    assert_eq!(run.code, Some(4), "{run:?}");
    assert!(run.stderr.contains("no node reachable"), "{run:?}");
    assert!(run.stderr.contains(&format!("endpoints tried: {closed}")), "{run:?}");
    assert!(run.stderr.contains("GAVEL_ENDPOINTS"), "{run:?}");

    let error = refund_worker::check_cluster(std::slice::from_ref(&closed), Duration::from_millis(300))
        .await
        .expect_err("nothing listens there");
    let message = error.to_string();
    assert!(message.contains("no node reachable") && message.contains(&closed), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_quorum_lost_the_cli_says_so_and_cluster_status_does_not_claim_a_leader() {
    let mut cluster = Cluster::start(3).await;
    let leader = cluster.wait_for_leader().await;
    let endpoints: Vec<String> = cluster.running().into_iter().map(|id| cluster.addr(id)).collect();
    let endpoints = endpoints.join(",");
    let healthy = gavel(&endpoints, &["cluster", "status"]).await;
    assert_eq!(healthy.code, Some(0), "{healthy:?}");

    // The leader alone: it still reports itself leader.
    for id in cluster.running().into_iter().filter(|id| *id != leader) {
        cluster.kill(id);
    }
    let status = gavel(&endpoints, &["cluster", "status"]).await;
    assert_eq!(status.code, Some(4), "{status:?}");
    assert!(status.stderr.contains("no leader: quorum lost (1 of 3 nodes reachable)"), "{status:?}");
    assert!(status.stdout.contains("unreachable"), "the table is still printed: {status:?}");

    let read = gavel(&endpoints, &["approval", "list", "--retry-budget-ms", "1000"]).await;
    assert_eq!(read.code, Some(4), "{read:?}");
    assert!(read.stderr.contains("no leader: quorum lost (1 of 3 nodes reachable)"), "{read:?}");
    for endpoint in endpoints.split(',') {
        assert!(read.stderr.contains(endpoint), "names {endpoint}: {read:?}");
    }

    let listed: Vec<String> = endpoints.split(',').map(String::from).collect();
    let error = refund_worker::check_cluster(&listed, Duration::from_millis(500)).await.expect_err("no quorum");
    assert!(error.to_string().contains("quorum lost (1 of 3 nodes reachable)"), "{error}");
}

/// The most a CLI call may take to say that a TLS cluster needs the CA: its
/// first attempt fails at once, and one probe of the node takes at most a
/// second (`gavel_client`'s `tls_probe`), far below the 10 s retry budget it
/// used to wait out.
const TLS_HINT_WITHIN: Duration = Duration::from_secs(3);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tls_cluster_called_without_a_ca_is_named_at_once_with_the_export_line() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cluster = support::start_secure(dir.path()).await;
    let endpoints = cluster.addrs().join(",");
    for args in [&["approval", "list"][..], &["cluster", "status"]] {
        let started = Instant::now();
        // A terminal that never ran the export line: no credential at all.
        let output = tokio::process::Command::new(support::gavel_binary())
            .args(args)
            .arg(format!("--endpoints={endpoints}"))
            .env_remove("GAVEL_ENDPOINTS")
            .env_remove("GAVEL_RETRY_BUDGET_MS")
            .env_remove("GAVEL_ACTOR")
            .env_remove("GAVEL_LOG")
            .env_remove(gavel_client::env::CA)
            .env_remove(gavel_client::env::CERT)
            .env_remove(gavel_client::env::KEY)
            .env_remove(gavel_client::env::TOKEN)
            .env_remove(gavel_client::env::TOKEN_FILE)
            .env_remove(gavel_client::env::INSECURE)
            .output()
            .await
            .expect("run the gavel binary");
        let run = Run {
            code: output.status.code(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            took: started.elapsed(),
        };
        assert_eq!(run.code, Some(2), "a configuration problem, like a bad --endpoints: {args:?} {run:?}");
        assert!(run.stderr.contains("answers with TLS, but no CA is configured"), "{args:?} {run:?}");
        assert!(run.stderr.contains("--ca or GAVEL_CA"), "{args:?} {run:?}");
        assert!(run.stderr.contains("export GAVEL_ENDPOINTS=... GAVEL_CA=..."), "{args:?} {run:?}");
        assert!(!run.stderr.contains("no node reachable"), "{args:?} {run:?}");
        assert!(run.took < TLS_HINT_WITHIN, "{args:?} {run:?}");
    }
}
