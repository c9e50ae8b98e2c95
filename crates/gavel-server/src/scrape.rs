//! `GET /metrics`: the listener a node serves its Prometheus metrics on
//! (`gavel node --metrics-listen`), and the scrape that reads a node's
//! figures at scrape time into [`crate::metrics::Metrics::render`]. It sits above
//! [`crate::node`]; [`crate::metrics`] below it only counts and encodes.
//!
//! The listener is deliberately tiny: one request per connection, a bounded
//! request head, a bounded number of connections. Metrics carry counts
//! only, so it is plaintext even on a secured node (docs/security.md). With
//! `--audit-tiles` it also serves the audit tree's C2SP `tlog-tiles` under
//! `/audit/` ([`crate::audit_tiles`], which says who may read what).

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};

use crate::audit_tiles::{self, AuditTiles};
use crate::metrics::Scraped;
use crate::node::Node;

/// The largest HTTP request head the metrics listener reads.
const REQUEST_HEAD_BYTES_MAX: usize = 8 * 1024;

/// How long one metrics connection may take, from accept to the last byte.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(10);

/// How many metrics connections are served at once; others wait in the
/// accept backlog.
const CONNECTIONS_MAX: usize = 8;

/// `node`'s metrics in the text exposition format, with the scrape-time
/// figures (the Raft status, the dedup replays at apply, the leader's
/// progress, the domain state's counts) read from `node` now.
pub fn render(node: &Node) -> String {
    node.metrics.render(|| {
        let raft = node.raft.status();
        let dedup_replays_applied = node.reads.dedup_replays();
        let leader_progress = node.raft.leader_progress();
        // Counting holds the state lock for one scan; it is taken after the
        // Raft status so the two are read as close together as possible.
        let counts = node.reads.read(|state| state.counts(node.read_time_ms(state, None)));
        Scraped { raft, leader_progress, dedup_replays_applied, counts }
    })
}

/// Serves `GET /metrics` for `node` on `listener` until `shutdown` turns
/// true, and the audit tiles under `/audit/` as `tiles` allows. Any other
/// path gets 404, any other method 405.
pub async fn serve(listener: TcpListener, node: Arc<Node>, tiles: AuditTiles, mut shutdown: watch::Receiver<bool>) {
    let connections = Arc::new(Semaphore::new(CONNECTIONS_MAX));
    loop {
        let permit = tokio::select! {
            _ = shutdown.wait_for(|stop| *stop) => return,
            permit = connections.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => return,
            },
        };
        let accepted = tokio::select! {
            _ = shutdown.wait_for(|stop| *stop) => return,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(error) => {
                tracing::debug!(%error, "metrics listener: accept failed");
                // Out of file descriptors, say: do not spin.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let node = node.clone();
        tokio::spawn(async move {
            if tokio::time::timeout(CONNECTION_TIMEOUT, answer(stream, &node, tiles)).await.is_err() {
                tracing::debug!("metrics connection timed out");
            }
            drop(permit);
        });
    }
}

/// Reads one request head and writes one response.
async fn answer(mut stream: TcpStream, node: &Node, tiles: AuditTiles) {
    let mut head = Vec::with_capacity(512);
    let mut buffer = [0u8; 1024];
    while !head.windows(4).any(|window| window == b"\r\n\r\n") {
        if head.len() > REQUEST_HEAD_BYTES_MAX {
            let _ = stream.write_all(&response(431, "text/plain", None, b"request head too large\n")).await;
            return;
        }
        match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(read) => head.extend_from_slice(&buffer[..read]),
        }
    }
    let request_line = head.split(|byte| *byte == b'\n').next().unwrap_or_default();
    let request_line = String::from_utf8_lossy(request_line);
    let mut parts = request_line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    let reply = match (method, path) {
        ("GET", "/metrics") => {
            response(200, "application/openmetrics-text; version=1.0.0; charset=utf-8", None, render(node).as_bytes())
        }
        ("GET", path) if path.starts_with(audit_tiles::PREFIX) => {
            let tile = audit_tiles::answer(node, tiles, path);
            response(tile.status, tile.content_type, tile.cache_control, &tile.body)
        }
        ("GET", _) => response(404, "text/plain", None, b"only /metrics and /audit/ are served here\n"),
        _ => response(405, "text/plain", None, b"only GET is served here\n"),
    };
    let _ = stream.write_all(&reply).await;
    let _ = stream.shutdown().await;
}

/// An HTTP/1.1 response that closes the connection.
fn response(status: u16, content_type: &str, cache_control: Option<&str>, body: &[u8]) -> Vec<u8> {
    let reason = match status {
        200 => "OK",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        _ => "Internal Server Error",
    };
    let cache = cache_control.map(|value| format!("cache-control: {value}\r\n")).unwrap_or_default();
    let mut bytes = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: {content_type}\r\n{cache}content-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    bytes.extend_from_slice(body);
    bytes
}
