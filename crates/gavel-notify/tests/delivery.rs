//! One post's delivery rules against a real HTTP receiver on loopback: what
//! is retried (5xx, 408, 429 with its `Retry-After`, a refused connection),
//! what is refused for good (another 4xx), what is abandoned (attempts,
//! per-attempt timeout, age, with a short `RetryPolicy`), and the headers
//! every attempt carries; and a post over TLS to a receiver whose private CA
//! is trusted, refused while it is not.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::post;
use gavel_client::pb;
use gavel_notify::webhook::{Outcome, Poster, RetryPolicy, Webhook};

/// The statuses a receiver answers, in order (then 200), and the headers it saw.
#[derive(Default)]
struct Script {
    answers: Vec<(u16, Option<&'static str>)>,
    seen: Vec<HeaderMap>,
}

type Shared = Arc<Mutex<Script>>;

async fn answer(State(shared): State<Shared>, headers: HeaderMap) -> axum::response::Response {
    let mut script = shared.lock().expect("script");
    script.seen.push(headers);
    let (status, retry_after) = if script.answers.is_empty() { (200, None) } else { script.answers.remove(0) };
    let status = StatusCode::from_u16(status).expect("a status");
    match retry_after {
        Some(seconds) => (status, [("retry-after", seconds)]).into_response(),
        None => status.into_response(),
    }
}

/// A receiver answering `answers` in turn; its URL and what it saw.
async fn receiver(answers: Vec<(u16, Option<&'static str>)>) -> (String, Shared) {
    let shared: Shared = Arc::new(Mutex::new(Script { answers, seen: Vec::new() }));
    let app = axum::Router::new().route("/hook", post(answer)).with_state(shared.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}/hook", listener.local_addr().expect("address"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, shared)
}

fn approval() -> pb::Approval {
    pb::Approval { id: "apr-7".into(), capability_id: "payments.refund".into(), ..pb::Approval::default() }
}

async fn deliver_with(poster: Poster, url: &str, redelivery: bool) -> Outcome {
    let secret: Arc<[u8]> = Arc::from(&b"0123456789abcdef"[..]);
    let webhook = Webhook::parse(&format!("generic={url}"), Some(&secret)).expect("webhook");
    poster.deliver(&webhook, &approval(), "http://console/approvals/apr-7", redelivery).await
}

async fn deliver(url: &str, redelivery: bool) -> Outcome {
    deliver_with(Poster::new().expect("poster"), url, redelivery).await
}

/// Retry bounds short enough for a test: 3 attempts, 50 ms backoff. Each
/// attempt may take 30 s: a receiver on loopback answers at once, but on a
/// loaded machine "at once" can take longer than any short timeout, and an
/// attempt timed out there would be retried and change what the test sees.
/// Only the test of a receiver that never answers times attempts out short
/// ([`SILENCE_TIMEOUT`]).
fn short_policy() -> RetryPolicy {
    RetryPolicy {
        attempts_max: 3,
        age_max: Duration::from_secs(10),
        timeout: Duration::from_secs(30),
        backoff_base: Duration::from_millis(50),
        backoff_max: Duration::from_millis(100),
    }
}

/// The per-attempt timeout against a receiver that never answers.
const SILENCE_TIMEOUT: Duration = Duration::from_millis(200);

#[tokio::test]
async fn server_errors_timeouts_and_rate_limits_are_retried_with_the_same_delivery_id() {
    let (url, shared) = receiver(vec![(500, None), (408, None), (429, Some("1"))]).await;
    let started = Instant::now();
    assert_eq!(deliver(&url, false).await, Outcome::Delivered);
    // The 429's Retry-After of one second was honoured.
    assert!(started.elapsed() >= Duration::from_secs(1), "{:?}", started.elapsed());
    let script = shared.lock().expect("script");
    assert_eq!(script.seen.len(), 4);
    for headers in &script.seen {
        assert_eq!(headers.get("gavel-delivery").map(|value| value.as_bytes()), Some(&b"apr-7"[..]));
        assert!(headers.get("gavel-redelivery").is_none());
        assert!(headers.get("gavel-signature").is_some_and(|value| value.as_bytes().starts_with(b"t=")));
    }
}

#[tokio::test]
async fn another_client_error_is_refused_for_good_after_one_attempt() {
    let (url, shared) = receiver(vec![(404, None)]).await;
    assert_eq!(deliver(&url, true).await, Outcome::Refused(404));
    let script = shared.lock().expect("script");
    assert_eq!(script.seen.len(), 1);
    assert_eq!(script.seen[0].get("gavel-redelivery").map(|value| value.as_bytes()), Some(&b"1"[..]));
}

#[tokio::test]
async fn a_refused_connection_is_retried_until_the_receiver_answers() {
    // A port nobody listens on yet: the first attempts fail to connect,
    // then a receiver starts on it.
    let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = probe.local_addr().expect("address");
    drop(probe);
    let url = format!("http://{address}/hook");
    let late = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(400)).await;
        let shared: Shared = Arc::default();
        let app = axum::Router::new().route("/hook", post(answer)).with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind(address).await.expect("bind the late receiver");
        tokio::spawn(async move { axum::serve(listener, app).await });
        shared
    });
    assert_eq!(deliver(&url, false).await, Outcome::Delivered);
    assert_eq!(late.await.expect("receiver").lock().expect("script").seen.len(), 1);
}

#[tokio::test]
async fn a_post_that_keeps_failing_is_abandoned_after_its_attempts() {
    let (url, shared) = receiver(vec![(503, None); 10]).await;
    let outcome = deliver_with(Poster::new().expect("poster").with_policy(short_policy()), &url, false).await;
    assert!(matches!(&outcome, Outcome::Abandoned(why) if why.contains("HTTP 503 after 3 attempts")), "{outcome:?}");
    assert_eq!(shared.lock().expect("script").seen.len(), 3);
}

#[tokio::test]
async fn a_receiver_that_never_answers_times_out_each_attempt_and_is_abandoned() {
    // Accepts connections and reads, never answers.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}/hook", listener.local_addr().expect("address"));
    let silent = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    let started = Instant::now();
    let policy = RetryPolicy { timeout: SILENCE_TIMEOUT, ..short_policy() };
    let outcome = deliver_with(Poster::new().expect("poster").with_policy(policy), &url, false).await;
    assert!(
        matches!(&outcome, Outcome::Abandoned(why) if why.contains("no answer within 200 ms after 3 attempts")),
        "{outcome:?}"
    );
    assert!(started.elapsed() >= Duration::from_millis(600), "three timed-out attempts: {:?}", started.elapsed());
    silent.abort();
}

#[tokio::test]
async fn a_post_is_abandoned_when_its_next_pause_would_pass_its_age() {
    let (url, shared) = receiver(vec![(429, Some("5"))]).await;
    let policy = RetryPolicy { age_max: Duration::from_secs(2), ..short_policy() };
    let outcome = deliver_with(Poster::new().expect("poster").with_policy(policy), &url, false).await;
    assert!(matches!(&outcome, Outcome::Abandoned(why) if why.contains("HTTP 429 after 1 attempt")), "{outcome:?}");
    assert_eq!(shared.lock().expect("script").seen.len(), 1);
}

/// A TLS receiver on 127.0.0.1 with a certificate from a fresh private CA,
/// answering every request 200; the CA (PEM), the URL and the requests'
/// heads.
async fn tls_receiver() -> (String, String, Arc<Mutex<Vec<String>>>) {
    use rustls::pki_types::pem::PemObject;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let authority = gavel_pki::Authority::create("notify test CA", gavel_pki::Validity::days(1)).expect("a CA");
    let node = gavel_pki::Principal::parse("node:1").expect("a principal");
    let issued =
        authority.issue(&node, &["127.0.0.1".to_string()], gavel_pki::Validity::days(1)).expect("a certificate");
    let certificates = rustls::pki_types::CertificateDer::pem_slice_iter(issued.cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .expect("certificate PEM");
    let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(issued.key_pem.as_bytes()).expect("key PEM");
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_no_client_auth()
        .with_single_cert(certificates, key)
        .expect("server TLS");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("https://{}/hook", listener.local_addr().expect("address"));
    let heads: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = heads.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            let seen = seen.clone();
            tokio::spawn(async move {
                // A refused handshake (an untrusted CA on the client side) ends here.
                let Ok(mut stream) = acceptor.accept(stream).await else { return };
                let mut received = Vec::new();
                let mut buffer = [0u8; 4096];
                while let Ok(read) = stream.read(&mut buffer).await {
                    if read == 0 {
                        return;
                    }
                    received.extend_from_slice(&buffer[..read]);
                    let text = String::from_utf8_lossy(&received).to_string();
                    let Some((head, body)) = text.split_once("\r\n\r\n") else { continue };
                    let length: usize = head
                        .to_ascii_lowercase()
                        .lines()
                        .find_map(|line| line.strip_prefix("content-length:").map(|value| value.trim().to_string()))
                        .and_then(|value| value.parse().ok())
                        .unwrap_or(0);
                    if body.len() >= length {
                        seen.lock().expect("heads").push(head.to_string());
                        let _ = stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").await;
                        let _ = stream.shutdown().await;
                        return;
                    }
                }
            });
        }
    });
    (authority.cert_pem().to_string(), url, heads)
}

#[tokio::test]
async fn a_post_over_tls_reaches_a_receiver_whose_private_ca_is_trusted_and_only_then() {
    let (ca_pem, url, heads) = tls_receiver().await;
    let trusting = Poster::with_roots(Some(&ca_pem)).expect("poster").with_policy(short_policy());
    assert_eq!(deliver_with(trusting, &url, false).await, Outcome::Delivered);
    assert!(heads
        .lock()
        .expect("heads")
        .iter()
        .any(|head| head.to_ascii_lowercase().contains("gavel-delivery: apr-7")));
    // The web PKI's roots alone do not trust the private CA: every attempt
    // fails its handshake, and the post is abandoned, never sent in clear.
    let outcome = deliver_with(Poster::new().expect("poster").with_policy(short_policy()), &url, false).await;
    assert!(matches!(&outcome, Outcome::Abandoned(why) if why.contains("TLS")), "{outcome:?}");
    assert_eq!(heads.lock().expect("heads").len(), 1);
    assert!(Poster::with_roots(Some("not a certificate")).is_err());
}

#[tokio::test]
async fn an_endless_answer_is_read_only_up_to_its_bound_and_the_post_counts_as_delivered() {
    // 200 with a body that never ends: headers, then chunks forever.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}/hook", listener.local_addr().expect("address"));
    let endless = tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let Ok((mut stream, _)) = listener.accept().await else { return };
        let mut request = [0u8; 4096];
        let _ = stream.read(&mut request).await;
        let _ = stream.write_all(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n").await;
        let chunk = format!("{:x}\r\n{}\r\n", 8192, "x".repeat(8192));
        while stream.write_all(chunk.as_bytes()).await.is_ok() {}
    });
    let policy = RetryPolicy { timeout: Duration::from_secs(5), ..short_policy() };
    let started = Instant::now();
    assert_eq!(deliver_with(Poster::new().expect("poster").with_policy(policy), &url, false).await, Outcome::Delivered);
    assert!(started.elapsed() < Duration::from_secs(5), "stopped reading at the bound: {:?}", started.elapsed());
    endless.abort();
}

#[tokio::test]
async fn user_info_goes_as_basic_credentials_and_never_into_the_host_header() {
    let (url, shared) = receiver(Vec::new()).await;
    let with_user = url.replacen("http://", "http://hook%2Duser:s3cret@", 1);
    assert_eq!(deliver(&format!("{with_user}?token=s3cret"), false).await, Outcome::Delivered);
    let script = shared.lock().expect("script");
    let headers = &script.seen[0];
    let host = headers.get("host").and_then(|value| value.to_str().ok()).unwrap_or_default();
    assert!(!host.contains('@') && !host.contains("s3cret"), "{host}");
    // base64("hook-user:s3cret")
    assert_eq!(
        headers.get("authorization").map(|value| value.as_bytes()),
        Some(&b"Basic aG9vay11c2VyOnMzY3JldA=="[..])
    );
}

#[tokio::test]
async fn posts_at_a_pace_wait_for_its_tokens_and_a_429_pauses_every_post_to_that_webhook() {
    use gavel_notify::pace::Pace;
    let (url, shared) = receiver(vec![(429, Some("1"))]).await;
    let secret: Arc<[u8]> = Arc::from(&b"0123456789abcdef"[..]);
    let webhook = Webhook::parse(&format!("generic={url}"), Some(&secret)).expect("webhook");
    let poster = Poster::new().expect("poster").with_policy(short_policy());
    // Ten a second, a burst of ten: the first answer is a 429 with
    // Retry-After 1, which pauses the pace for a second and empties it. At
    // most ten posts took their token before; the others and the retry (at
    // least eleven) then go at ten a second: 2.1 s at least, where without
    // the pause it would be 1.1 s.
    let pace = Pace::new(10.0);
    let started = Instant::now();
    let approval = approval();
    let posts = (0..20).map(|_| poster.deliver_paced(&pace, false, &webhook, &approval, "http://console/a", false));
    let outcomes = futures::future::join_all(posts).await;
    assert!(outcomes.iter().all(|outcome| *outcome == Outcome::Delivered), "{outcomes:?}");
    let elapsed = started.elapsed();
    assert!(elapsed >= Duration::from_secs(2), "{elapsed:?}");
    assert_eq!(shared.lock().expect("script").seen.len(), 21);
}
