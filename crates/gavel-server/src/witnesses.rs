//! Submits the published audit checkpoint to external witnesses over C2SP
//! `tlog-witness` `add-checkpoint` (plain HTTP/1.1), and stores each
//! witness's cosignature through the log (`AddWitnessCosignature`) once it
//! verifies with that witness's key (docs/decisions/0100).
//!
//! Only the leader submits. For each witness it remembers the size the
//! witness last cosigned (0 at first: a witness that holds more answers
//! 409 with its size, and the next request starts from there), and sends the
//! consistency proof from that size. A witness that fails or refuses is
//! retried after a backoff; the checkpoint is published without waiting:
//! witnesses add to it, a verifier's policy decides how many it needs.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use gavel_core::note::{self, KeyKind};
use gavel_core::witness::{add_checkpoint_request, PolicyWitness};
use gavel_core::{Caller, Command, Principal};
use gavel_proto::v1 as pb;
use http_body_util::{BodyExt, Full};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::node::Node;

/// How often the leader looks for a checkpoint a witness has not cosigned.
const CHECK_INTERVAL: Duration = Duration::from_millis(250);
/// The longest an `add-checkpoint` call may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// The first pause after a witness failed or refused; it doubles up to [`BACKOFF_MAX`].
const BACKOFF_FIRST: Duration = Duration::from_millis(250);
/// The longest pause between attempts at one witness.
const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// The most bytes read of a witness's answer (a few signature lines).
const ANSWER_BYTES_MAX: usize = 16 * 1024;

/// What this leader knows of one witness.
#[derive(Default)]
struct WitnessView {
    /// The size the witness last cosigned, as far as this leader knows.
    held_size: u64,
    /// Failures in a row, and when to try again.
    failures: u32,
    retry_at: Option<Instant>,
}

/// Runs until `shutdown` becomes true.
pub async fn run(node: Arc<Node>, witnesses: Vec<PolicyWitness>, mut shutdown: watch::Receiver<bool>) {
    let caller = node.secured.is_some().then(|| Caller::of(Principal::node(node.id)));
    let mut views: HashMap<String, WitnessView> = HashMap::new();
    loop {
        if *shutdown.borrow() {
            return;
        }
        if node.raft.status().is_leader() {
            for witness in witnesses.iter().filter(|witness| witness.url.is_some()) {
                let view = views.entry(witness.name.clone()).or_default();
                if view.retry_at.is_some_and(|at| Instant::now() < at) {
                    continue;
                }
                match submit(&node, caller.as_ref(), witness, view).await {
                    Ok(()) => {
                        view.failures = 0;
                        view.retry_at = None;
                    }
                    Err(problem) => {
                        view.failures += 1;
                        let pause = BACKOFF_FIRST.saturating_mul(1 << (view.failures - 1).min(8)).min(BACKOFF_MAX);
                        view.retry_at = Some(Instant::now() + pause);
                        tracing::warn!(witness = %witness.name, %problem, "audit witness did not cosign; retrying later");
                    }
                }
            }
        }
        tokio::select! {
            () = tokio::time::sleep(CHECK_INTERVAL) => {}
            _ = shutdown.changed() => {}
        }
    }
}

/// Submits the published checkpoint to `witness` unless it already cosigned it.
async fn submit(
    node: &Node,
    caller: Option<&Caller>,
    witness: &PolicyWitness,
    view: &mut WitnessView,
) -> Result<(), String> {
    let prepared = node.reads.read(|state| {
        let published = state.published_checkpoint()?;
        if published.witness_signatures.contains_key(&witness.key.name) || published.log_signature.is_none() {
            return None;
        }
        let size = published.size;
        let note = state.signed_checkpoint()?;
        let body = state.checkpoint_body_at(size).ok()?;
        let held = view.held_size.min(size);
        let proof =
            if held == 0 || held == size { Vec::new() } else { state.audit_consistency_proof(held, size).ok()? };
        Some((size, held, note, body, proof))
    });
    let Some((size, held, checkpoint, body, proof)) = prepared else { return Ok(()) };
    // A witness's view of the log is the log's signature and its own: the
    // nodes' and other witnesses' lines are stripped from what is sent.
    let request = add_checkpoint_request(held, &proof, &log_signed_only(&checkpoint, &body));
    let url = witness.url.as_deref().expect("only witnesses with a URL are submitted to");
    let (status, answer) = tokio::time::timeout(REQUEST_TIMEOUT, post(&format!("{url}/add-checkpoint"), request))
        .await
        .map_err(|_| format!("no answer within {REQUEST_TIMEOUT:?}"))??;
    match status {
        200 => {}
        409 => {
            let size = answer.trim().parse::<u64>().map_err(|_| format!("a 409 without a size: {answer:?}"))?;
            view.held_size = size;
            return Err(format!("409: the witness holds size {size}; sending again from there"));
        }
        other => return Err(format!("{other}: {}", answer.trim())),
    }
    // The answer's lines, appended to the body, must verify as the witness's cosignature.
    let note_text = format!("{body}\n{answer}");
    let (_, signers) = note::verified_signers(&note_text, std::slice::from_ref(&witness.key), ring_verify)?;
    if signers.is_empty() {
        return Err("the answer carries no cosignature by the witness's key".to_string());
    }
    let (_, lines) = note::parse_signed_note(&note_text)?;
    let line = lines
        .into_iter()
        .find(|line| {
            line.name == witness.key.name && line.id == witness.key.id && witness.key.kind == KeyKind::Cosignature
        })
        .ok_or("the answer carries no cosignature line by the witness's key")?;
    view.held_size = size;
    let mut signature = line.id.to_vec();
    signature.extend_from_slice(&line.signature);
    let command = Command::AddWitnessCosignature { node_id: node.id, size, witness: line.name, signature };
    node.call::<pb::CosignResponse>(caller, "", command).await.map_err(|status| status.message().to_string())?;
    Ok(())
}

/// The checkpoint with the log's signature line only.
fn log_signed_only(checkpoint: &str, body: &str) -> String {
    let origin = body.lines().next().unwrap_or_default();
    let prefix = format!("\u{2014} {origin} ");
    let lines: String =
        checkpoint.lines().filter(|line| line.starts_with(&prefix)).map(|line| format!("{line}\n")).collect();
    format!("{body}\n{lines}")
}

fn ring_verify(key: &[u8], message: &[u8], signature: &[u8]) -> bool {
    ring::signature::UnparsedPublicKey::new(&ring::signature::ED25519, key).verify(message, signature).is_ok()
}

/// One HTTP/1.1 POST of `body` to an `http://` URL: the status and the answer's text.
async fn post(url: &str, body: String) -> Result<(u16, String), String> {
    let uri: hyper::Uri = url.parse().map_err(|error| format!("{url}: {error}"))?;
    if uri.scheme_str() != Some("http") {
        return Err(format!("{url}: only http:// witness URLs are supported"));
    }
    let host = uri.host().ok_or_else(|| format!("{url}: no host"))?.to_string();
    let port = uri.port_u16().unwrap_or(80);
    let stream =
        tokio::net::TcpStream::connect((host.as_str(), port)).await.map_err(|error| format!("{url}: {error}"))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
        .await
        .map_err(|error| format!("HTTP handshake: {error}"))?;
    let driver = tokio::spawn(connection);
    let request = hyper::Request::post(uri.path())
        .header(hyper::header::HOST, format!("{host}:{port}"))
        .header(hyper::header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .body(Full::new(Bytes::from(body)))
        .map_err(|error| error.to_string())?;
    let answer = async {
        let response = sender.send_request(request).await.map_err(|error| format!("HTTP: {error}"))?;
        let status = response.status().as_u16();
        let bytes = http_body_util::Limited::new(response.into_body(), ANSWER_BYTES_MAX)
            .collect()
            .await
            .map_err(|error| format!("reading the answer: {error}"))?
            .to_bytes();
        Ok((status, String::from_utf8_lossy(&bytes).into_owned()))
    }
    .await;
    driver.abort();
    answer
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_witness_is_sent_the_checkpoint_with_the_log_s_line_only() {
        let body = "gavel-audit/ab\n3\nAAAA\n";
        let checkpoint = format!(
            "{body}\n\u{2014} gavel-audit/ab AQ==\n\u{2014} gavel-audit/ab/node-1 Ag==\n\u{2014} w.example/1 Aw==\n"
        );
        assert_eq!(log_signed_only(&checkpoint, body), format!("{body}\n\u{2014} gavel-audit/ab AQ==\n"));
    }
}
