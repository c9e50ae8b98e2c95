//! Webhooks: what a post carries (Slack-compatible or signed generic JSON),
//! how it is signed, how one post is delivered with retries at its
//! webhook's pace ([`crate::pace`]), and how a webhook URL is shown in logs
//! and error messages ([`redacted_url`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use gavel_client::links::duration_text;
use gavel_client::pb;
use http_body_util::{BodyExt, Full};
use hyper::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE, HOST, RETRY_AFTER, USER_AGENT};
use hyper::{Method, Request, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::error::NotifyError;
use crate::limits::{
    BACKOFF_BASE, BACKOFF_MAX, BOUND_SHOWN_MAX, FIELD_CHARS_MAX, HMAC_SECRET_BYTES_MAX, HMAC_SECRET_BYTES_MIN,
    POST_AGE_MAX, POST_ATTEMPTS_MAX, POST_TIMEOUT, REASONS_SHOWN_MAX, RESPONSE_BYTES_MAX, RETRY_AFTER_MAX,
    URL_BYTES_MAX,
};
use crate::pace::Pace;

/// The header naming the delivery: the approval id, the same on every
/// attempt and on a redelivery, so a receiver dedupes by it.
pub const DELIVERY_HEADER: &str = "gavel-delivery";
/// The header present (`1`) on a redelivery: the post in flight when the
/// notifier died, sent again because nobody can know whether it arrived.
pub const REDELIVERY_HEADER: &str = "gavel-redelivery";
/// The generic webhook's signature header: `t=<unix seconds>,v1=<hex>`.
pub const SIGNATURE_HEADER: &str = "gavel-signature";

/// The two payload shapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WebhookKind {
    /// Slack's incoming-webhook JSON: `text` and `blocks`.
    Slack,
    /// Gavel's own JSON, signed with HMAC-SHA256.
    Generic,
}

impl WebhookKind {
    /// Its name on the command line and in logs.
    pub fn name(self) -> &'static str {
        match self {
            WebhookKind::Slack => "slack",
            WebhookKind::Generic => "generic",
        }
    }
}

/// One configured webhook.
#[derive(Clone)]
pub struct Webhook {
    /// Its payload shape.
    pub kind: WebhookKind,
    uri: Uri,
    /// The generic webhook's HMAC key.
    secret: Option<Arc<[u8]>>,
}

impl std::fmt::Debug for Webhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // A webhook URL may itself be a secret: it is shown redacted.
        f.debug_struct("Webhook").field("kind", &self.kind).field("url", &self.redacted_url()).finish()
    }
}

/// What replaces the parts of a URL a log or an error message leaves out.
pub const REDACTED: &str = "[redacted]";

/// A URL as every log line and error message of the notifier shows it: its
/// scheme, host and port, then `/[redacted]` in place of everything else
/// when there was anything else. Each other part may hold a credential:
/// the user-info (`user:password@`), the path (a Slack webhook's path after
/// `/services/` is its secret, as are Discord's and Teams' webhook paths)
/// and the query (`?token=`, `key=`, `sig=`, or any other name a receiver
/// chose), and a log is read by more people than the configuration.
pub fn redacted_url(uri: &Uri) -> String {
    let scheme = uri.scheme_str().unwrap_or("unknown");
    let host = uri.host().unwrap_or_default();
    let port = uri.port_u16().map(|port| format!(":{port}")).unwrap_or_default();
    let user_info = uri.authority().is_some_and(|authority| authority.as_str().contains('@'));
    let more = uri.path_and_query().is_some_and(|rest| !matches!(rest.as_str(), "" | "/"));
    let hidden = if user_info || more { format!("/{REDACTED}") } else { String::new() };
    format!("{scheme}://{host}{port}{hidden}")
}

/// Parses an http(s) URL with a host, within [`URL_BYTES_MAX`].
pub fn parse_url(what: &str, text: &str) -> Result<Uri, NotifyError> {
    if text.len() > URL_BYTES_MAX {
        return Err(NotifyError::Config(format!("{what} is {} bytes, more than {URL_BYTES_MAX}", text.len())));
    }
    let uri: Uri = text.parse().map_err(|error| NotifyError::Config(format!("{what} is not a URL: {error}")))?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        _ => return Err(NotifyError::Config(format!("{what} must start with http:// or https://"))),
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(NotifyError::Config(format!("{what} names no host")));
    }
    Ok(uri)
}

impl Webhook {
    /// A webhook from `slack=URL` or `generic=URL`; a generic one needs the
    /// HMAC secret.
    pub fn parse(text: &str, secret: Option<&Arc<[u8]>>) -> Result<Webhook, NotifyError> {
        let (kind, url) = text
            .split_once('=')
            .ok_or_else(|| NotifyError::Config("a webhook is slack=URL or generic=URL".to_string()))?;
        let kind = match kind {
            "slack" => WebhookKind::Slack,
            "generic" => WebhookKind::Generic,
            // A word is named back; anything else may be a URL given without
            // its kind (`https://user:password@host/?token=`), never echoed.
            other
                if !other.is_empty() && other.len() <= 16 && other.bytes().all(|byte| byte.is_ascii_alphanumeric()) =>
            {
                return Err(NotifyError::Config(format!(
                    "unknown webhook kind {other:?}: use slack=URL or generic=URL"
                )))
            }
            _ => {
                return Err(NotifyError::Config(
                    "a webhook is slack=URL or generic=URL (the text before the first = is not a kind)".to_string(),
                ))
            }
        };
        let uri = parse_url("the webhook URL", url)?;
        let secret = match kind {
            WebhookKind::Slack => None,
            WebhookKind::Generic => Some(
                secret
                    .cloned()
                    .ok_or_else(|| NotifyError::Config("a generic webhook needs --hmac-secret-file".to_string()))?,
            ),
        };
        Ok(Webhook { kind, uri, secret })
    }

    /// The URL as logs show it ([`redacted_url`]).
    pub fn redacted_url(&self) -> String {
        redacted_url(&self.uri)
    }

    /// The URL's identity for pacing: webhooks of one URL share one rate limit.
    pub fn url(&self) -> String {
        self.uri.to_string()
    }
}

/// Reads an HMAC secret file: its bytes with trailing line breaks removed,
/// between [`HMAC_SECRET_BYTES_MIN`] and [`HMAC_SECRET_BYTES_MAX`].
pub fn read_secret(path: &std::path::Path) -> Result<Arc<[u8]>, NotifyError> {
    let bytes = std::fs::read(path)
        .map_err(|error| NotifyError::Config(format!("reading the HMAC secret {}: {error}", path.display())))?;
    let mut secret = bytes.as_slice();
    while let [rest @ .., b'\n' | b'\r'] = secret {
        secret = rest;
    }
    if secret.len() < HMAC_SECRET_BYTES_MIN || secret.len() > HMAC_SECRET_BYTES_MAX {
        return Err(NotifyError::Config(format!(
            "the HMAC secret {} holds {} bytes; it must hold {HMAC_SECRET_BYTES_MIN} to {HMAC_SECRET_BYTES_MAX}",
            path.display(),
            secret.len()
        )));
    }
    Ok(Arc::from(secret))
}

/// HMAC-SHA256 (RFC 2104) of `message` under `key`.
pub fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    const BLOCK: usize = 64;
    let mut block = [0u8; BLOCK];
    if key.len() > BLOCK {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let inner_pad: Vec<u8> = block.iter().map(|byte| byte ^ 0x36).collect();
    let outer_pad: Vec<u8> = block.iter().map(|byte| byte ^ 0x5c).collect();
    let inner = Sha256::new().chain_update(&inner_pad).chain_update(message).finalize();
    Sha256::new().chain_update(&outer_pad).chain_update(inner).finalize().into()
}

/// The `Gavel-Signature` value of `body` sent at `unix_seconds`:
/// `t=<unix>,v1=<hex of HMAC-SHA256(secret, "<unix>." + body)>`.
pub fn signature(secret: &[u8], unix_seconds: u64, body: &[u8]) -> String {
    let mut signed = format!("{unix_seconds}.").into_bytes();
    signed.extend_from_slice(body);
    format!("t={unix_seconds},v1={}", hex::encode(hmac_sha256(secret, &signed)))
}

/// The console page of an approval: `<console>/approvals/<id>`, the id
/// percent-encoded as one path segment (every byte outside RFC 3986's
/// unreserved characters), so no `/`, `%`, `?` or `#` of an id moves the
/// link elsewhere. An id made only of dots, which a browser reads as a dot
/// segment however it is encoded, goes in the query instead:
/// `<console>/approvals?id=..` (the console serves both; docs/console.md).
pub fn approval_link(console_url: &str, approval_id: &str) -> String {
    format!("{}{}", console_url.trim_end_matches('/'), gavel_client::links::record_url("approvals", approval_id))
}

/// What a "yes" covers, from the approval's terms (SPEC §13): one use, or a
/// standing approval's uses, window and bound JSON pointers with their
/// values. Read from the cluster's canonical terms (`terms_json`), or from
/// the approval's standing progress where an older cluster sent none.
#[derive(Debug, Clone, PartialEq)]
pub struct Uses {
    /// Whether one decision covers several uses.
    pub standing: bool,
    /// Most uses.
    pub max: u64,
    /// Uses spent so far.
    pub spent: u64,
    /// How long after the decision uses are allowed (standing only).
    pub window_ms: Option<u64>,
    /// Each bound JSON pointer and its value (canonical JSON text).
    pub bound: Vec<(String, String)>,
}

impl Uses {
    /// The uses of `approval`.
    pub fn of(approval: &pb::Approval) -> Uses {
        let terms: Value = serde_json::from_str(&approval.terms_json).unwrap_or(Value::Null);
        let uses = &terms["uses"];
        let standing = approval.standing.as_ref();
        let spec = standing.and_then(|standing| standing.terms.as_ref());
        let bound = match uses["bound"].as_array() {
            Some(bound) => bound
                .iter()
                .map(|entry| (entry["pointer"].as_str().unwrap_or_default().to_string(), entry["value"].to_string()))
                .collect(),
            None => {
                let input: Value = serde_json::from_str(&approval.input_json).unwrap_or(Value::Null);
                spec.map(|spec| spec.bound_pointers.as_slice())
                    .unwrap_or_default()
                    .iter()
                    .map(|pointer| {
                        (pointer.clone(), input.pointer(pointer).cloned().unwrap_or(Value::Null).to_string())
                    })
                    .collect()
            }
        };
        Uses {
            standing: uses.get("windowMs").is_some() || standing.is_some(),
            max: uses["max"].as_u64().or(spec.map(|spec| u64::from(spec.uses_max))).unwrap_or(1),
            spent: standing.map_or(0, |standing| u64::try_from(standing.used_by.len()).unwrap_or(u64::MAX)),
            window_ms: uses["windowMs"].as_u64().or(spec.map(|spec| spec.window_ms)),
            bound,
        }
    }

    /// The generic payload's `uses` object.
    fn json(&self) -> Value {
        if !self.standing {
            return json!({ "standing": false, "max": self.max });
        }
        let bound: Vec<Value> = self
            .bound
            .iter()
            .map(|(pointer, value)| {
                json!({ "pointer": pointer, "value": serde_json::from_str::<Value>(value).unwrap_or(Value::Null) })
            })
            .collect();
        json!({
            "standing": true, "max": self.max, "spent": self.spent, "windowMs": self.window_ms, "bound": bound,
        })
    }

    /// One line for a person: `one use`, or `standing approval: 100 uses
    /// within 7 days, bound on /order_id = "o-9"` (Slack-escaped, each
    /// value clipped).
    fn slack_text(&self) -> String {
        if !self.standing {
            return "one use".to_string();
        }
        let mut text = format!(
            "standing approval: {} uses within {}",
            self.max,
            duration_text(self.window_ms.unwrap_or_default())
        );
        if self.bound.is_empty() {
            text.push_str(", each with exactly the approved input");
        } else {
            let mut bound: Vec<String> = self
                .bound
                .iter()
                .take(BOUND_SHOWN_MAX)
                .map(|(pointer, value)| format!("{} = {}", slack_escaped(pointer), slack_escaped(value)))
                .collect();
            if self.bound.len() > BOUND_SHOWN_MAX {
                bound.push(format!("and {} more pointers", self.bound.len() - BOUND_SHOWN_MAX));
            }
            text.push_str(&format!(", bound on {}", bound.join(", ")));
        }
        if self.spent > 0 {
            text.push_str(&format!(" ({} spent)", self.spent));
        }
        text
    }
}

/// `text` cut to [`FIELD_CHARS_MAX`] characters.
fn clipped(text: &str) -> String {
    match text.char_indices().nth(FIELD_CHARS_MAX) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_string(),
    }
}

/// Text for Slack's mrkdwn: `&`, `<` and `>` escaped as Slack asks, so a
/// requester's name cannot forge a link or a mention.
fn slack_escaped(text: &str) -> String {
    clipped(text).replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

fn requester(approval: &pb::Approval) -> String {
    actor_name(approval.actor.as_ref())
}

/// An actor as `kind:id` (`user:alice`).
pub fn actor_name(actor: Option<&pb::Actor>) -> String {
    let actor = actor.cloned().unwrap_or_default();
    let kind = pb::ActorKind::try_from(actor.kind).map_or("unknown", |kind| match kind {
        pb::ActorKind::User => "user",
        pb::ActorKind::Service => "service",
        pb::ActorKind::Automation => "automation",
        pb::ActorKind::Anonymous => "anonymous",
        _ => "unknown",
    });
    format!("{kind}:{}", actor.id)
}

fn enum_name(name: Option<&str>, prefix: &str) -> String {
    name.map(|name| name.trim_start_matches(prefix).to_ascii_lowercase()).unwrap_or_else(|| "unknown".to_string())
}

fn risk(approval: &pb::Approval) -> String {
    enum_name(pb::Risk::try_from(approval.risk).ok().map(|risk| risk.as_str_name()), "RISK_")
}

fn side_effect(approval: &pb::Approval) -> String {
    enum_name(pb::SideEffect::try_from(approval.side_effect).ok().map(|effect| effect.as_str_name()), "SIDE_EFFECT_")
}

/// The generic webhook's JSON body. It carries the input's hash, never the
/// input itself: a webhook receiver is outside the cluster's access rules.
/// It carries the terms hash and what a "yes" covers (`uses`): for a
/// standing approval its uses, window and the values of its bound JSON
/// pointers, the only parts of the input posted (they are its terms).
pub fn generic_body(approval: &pb::Approval, link: &str, redelivery: bool) -> Value {
    json!({
        "type": "approval.pending",
        "deliveryId": approval.id,
        "redelivery": redelivery,
        "url": link,
        "approval": {
            "id": approval.id,
            "capabilityId": approval.capability_id,
            "surface": approval.surface,
            "requester": requester(approval),
            "risk": risk(approval),
            "sideEffect": side_effect(approval),
            "types": approval.types,
            "reasons": approval.reasons,
            "inputHash": approval.input_hash,
            "termsHash": approval.terms_hash,
            "uses": Uses::of(approval).json(),
            "requestedAtMs": approval.requested_at_ms,
            "expiresAtMs": approval.expires_at_ms,
        },
    })
}

/// `unix_ms` as `YYYY-MM-DD HH:MM UTC`: the text a Slack client shows when
/// it cannot render the date in the reader's time zone.
pub fn utc_minute(unix_ms: i64) -> String {
    let minutes = unix_ms.div_euclid(60_000);
    let (days, minute_of_day) = (minutes.div_euclid(1_440), minutes.rem_euclid(1_440));
    let (year, month, day) = gavel_client::calendar::civil_from_days(days);
    format!("{year:04}-{month:02}-{day:02} {:02}:{:02} UTC", minute_of_day / 60, minute_of_day % 60)
}

/// `text` with its first letter upper-case.
fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    chars.next().map_or_else(String::new, |first| first.to_uppercase().chain(chars).collect())
}

/// The Slack incoming-webhook body: a plain `text` (what notifications
/// show) and `blocks` (a section and a button to the console).
pub fn slack_body(approval: &pb::Approval, link: &str) -> Value {
    let capability = slack_escaped(&approval.capability_id);
    let who = slack_escaped(&requester(approval));
    let uses = Uses::of(approval).slack_text();
    let mut details = format!(
        "*Approval waiting*: `{capability}`\nRequested by {who}\n*{}*\nRisk: {} · Side effect: {}",
        capitalized(&uses),
        risk(approval),
        side_effect(approval),
    );
    if approval.expires_at_ms > 0 {
        details.push_str(&format!(
            " · Expires <!date^{}^{{date_short_pretty}} {{time}}|{}>",
            approval.expires_at_ms.div_euclid(1000),
            utc_minute(approval.expires_at_ms)
        ));
    }
    for reason in approval.reasons.iter().take(REASONS_SHOWN_MAX) {
        details.push_str(&format!("\n• {}", slack_escaped(reason)));
    }
    if !approval.terms_hash.is_empty() {
        details.push_str(&format!("\nTerms hash: `{}`", slack_escaped(&approval.terms_hash)));
    }
    json!({
        "text": format!("Approval waiting: {capability} requested by {who} ({uses}): {link}"),
        "blocks": [
            { "type": "section", "text": { "type": "mrkdwn", "text": details } },
            { "type": "actions", "elements": [
                { "type": "button", "text": { "type": "plain_text", "text": "Open in the console" }, "url": link }
            ] },
        ],
    })
}

/// How one post to one webhook ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A 2xx answer.
    Delivered,
    /// Refused for good: a 4xx other than 408 and 429 (or a 1xx/3xx).
    Refused(u16),
    /// Still failing after the policy's attempts or age ([`POST_ATTEMPTS_MAX`], [`POST_AGE_MAX`]).
    Abandoned(String),
}

/// What one attempt got.
enum Attempt {
    Answered { status: StatusCode, retry_after: Option<Duration> },
    Failed(String),
}

/// The bounds of one post's retries; [`RetryPolicy::default`] is the
/// named limits of [`crate::limits`]. A test hands in shorter ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// [`POST_ATTEMPTS_MAX`].
    pub attempts_max: u32,
    /// [`POST_AGE_MAX`].
    pub age_max: Duration,
    /// [`POST_TIMEOUT`].
    pub timeout: Duration,
    /// [`BACKOFF_BASE`].
    pub backoff_base: Duration,
    /// [`BACKOFF_MAX`].
    pub backoff_max: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            attempts_max: POST_ATTEMPTS_MAX,
            age_max: POST_AGE_MAX,
            timeout: POST_TIMEOUT,
            backoff_base: BACKOFF_BASE,
            backoff_max: BACKOFF_MAX,
        }
    }
}

/// Sends posts over HTTP/1.1, plain or TLS (the web PKI's roots).
#[derive(Clone)]
pub struct Poster {
    tls: tokio_rustls::TlsConnector,
    policy: RetryPolicy,
}

impl Poster {
    /// A poster trusting the web PKI roots (Mozilla's, built in).
    pub fn new() -> Result<Poster, NotifyError> {
        Poster::with_roots(None)
    }

    /// A poster trusting the web PKI roots and, when given, the
    /// certificates of `extra_roots_pem` (a private receiver's CA).
    pub fn with_roots(extra_roots_pem: Option<&str>) -> Result<Poster, NotifyError> {
        use rustls::pki_types::pem::PemObject;
        let mut roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
        if let Some(pem) = extra_roots_pem {
            let mut added = 0;
            for certificate in rustls::pki_types::CertificateDer::pem_slice_iter(pem.as_bytes()) {
                let certificate = certificate
                    .map_err(|error| NotifyError::Config(format!("the webhook CA is not PEM certificates: {error}")))?;
                roots
                    .add(certificate)
                    .map_err(|error| NotifyError::Config(format!("the webhook CA holds a bad certificate: {error}")))?;
                added += 1;
            }
            if added == 0 {
                return Err(NotifyError::Config("the webhook CA file holds no certificate".to_string()));
            }
        }
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|error| NotifyError::Config(format!("TLS for webhooks: {error}")))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Poster { tls: tokio_rustls::TlsConnector::from(Arc::new(config)), policy: RetryPolicy::default() })
    }

    /// The same poster with other retry bounds.
    pub fn with_policy(self, policy: RetryPolicy) -> Poster {
        Poster { policy, ..self }
    }

    /// Posts `approval` to `webhook`, retrying network errors, 5xx, 408 and
    /// 429 with exponential backoff and jitter (and at least `Retry-After`),
    /// at no rate limit.
    pub async fn deliver(&self, webhook: &Webhook, approval: &pb::Approval, link: &str, redelivery: bool) -> Outcome {
        self.deliver_paced(&Pace::unlimited(), false, webhook, approval, link, redelivery).await
    }

    /// [`Poster::deliver`] at `pace`: each attempt takes one of its tokens
    /// (the first attempt's was taken already when `token_taken`) and one of
    /// its places for a request outstanding; a 429's `Retry-After` pauses
    /// the pace, so every post to that webhook waits it out.
    pub async fn deliver_paced(
        &self,
        pace: &Pace,
        token_taken: bool,
        webhook: &Webhook,
        approval: &pb::Approval,
        link: &str,
        redelivery: bool,
    ) -> Outcome {
        let body = match webhook.kind {
            WebhookKind::Slack => slack_body(approval, link),
            WebhookKind::Generic => generic_body(approval, link, redelivery),
        };
        let body = Bytes::from(body.to_string());
        let policy = self.policy;
        let first = Instant::now();
        let mut attempts = 0;
        loop {
            attempts += 1;
            if attempts > 1 || !token_taken {
                pace.token().await;
            }
            let request = pace.request().await;
            let attempt = match tokio::time::timeout(
                policy.timeout,
                self.attempt(webhook, &approval.id, &body, redelivery),
            )
            .await
            {
                Ok(attempt) => attempt,
                Err(_) => Attempt::Failed(format!("no answer within {} ms", policy.timeout.as_millis())),
            };
            drop(request);
            if let Attempt::Answered { status: StatusCode::TOO_MANY_REQUESTS, retry_after: Some(asked) } = &attempt {
                pace.pause((*asked).min(RETRY_AFTER_MAX));
            }
            let (why, retry_after) = match attempt {
                Attempt::Answered { status, .. } if status.is_success() => return Outcome::Delivered,
                Attempt::Answered { status, retry_after }
                    if status.is_server_error()
                        || status == StatusCode::REQUEST_TIMEOUT
                        || status == StatusCode::TOO_MANY_REQUESTS =>
                {
                    (format!("HTTP {}", status.as_u16()), retry_after)
                }
                Attempt::Answered { status, .. } => return Outcome::Refused(status.as_u16()),
                Attempt::Failed(why) => (why, None),
            };
            let pause = retry_pause(&policy, attempts, retry_after);
            if attempts >= policy.attempts_max || first.elapsed() + pause > policy.age_max {
                let noun = if attempts == 1 { "attempt" } else { "attempts" };
                return Outcome::Abandoned(format!("{why} after {attempts} {noun}"));
            }
            tracing::info!(
                webhook = webhook.kind.name(), url = %webhook.redacted_url(), approval = %approval.id, attempts,
                pause_ms = pause.as_millis() as u64, "post failed ({why}); retrying"
            );
            tokio::time::sleep(pause).await;
        }
    }

    async fn attempt(&self, webhook: &Webhook, delivery_id: &str, body: &Bytes, redelivery: bool) -> Attempt {
        let uri = &webhook.uri;
        let host = uri.host().unwrap_or_default().trim_start_matches('[').trim_end_matches(']').to_string();
        let https = uri.scheme_str() == Some("https");
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        // The Host header names the host and port only: the user-info of a
        // URL is sent as HTTP Basic credentials (RFC 7617), never as a host.
        let host_header = match uri.port_u16() {
            Some(port) => format!("{}:{port}", uri.host().unwrap_or_default()),
            None => uri.host().unwrap_or_default().to_string(),
        };
        let mut request = Request::builder()
            .method(Method::POST)
            .uri(uri.path_and_query().map_or("/", |path| path.as_str()))
            .header(HOST, host_header)
            .header(CONTENT_TYPE, "application/json")
            .header(USER_AGENT, concat!("gavel-notify/", env!("CARGO_PKG_VERSION")));
        if let Some(credentials) = basic_credentials(uri) {
            match HeaderValue::from_str(&credentials) {
                Ok(mut value) => {
                    value.set_sensitive(true);
                    request = request.header(AUTHORIZATION, value);
                }
                Err(_) => return Attempt::Failed("the URL's user-info is not a header value".to_string()),
            }
        }
        match HeaderValue::from_str(delivery_id) {
            Ok(value) => request = request.header(DELIVERY_HEADER, value),
            Err(error) => return Attempt::Failed(format!("delivery id is not a header value: {error}")),
        }
        if redelivery {
            request = request.header(REDELIVERY_HEADER, "1");
        }
        if let Some(secret) = &webhook.secret {
            let now =
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |since| since.as_secs());
            request = request.header(SIGNATURE_HEADER, signature(secret, now, body));
        }
        let request = match request.body(Full::new(body.clone())) {
            Ok(request) => request,
            Err(error) => return Attempt::Failed(format!("building the request: {error}")),
        };
        let stream = match tokio::net::TcpStream::connect((host.as_str(), port)).await {
            Ok(stream) => stream,
            Err(error) => return Attempt::Failed(format!("connecting to {host}:{port}: {error}")),
        };
        let answer = if https {
            let name = match rustls::pki_types::ServerName::try_from(host.clone()) {
                Ok(name) => name,
                Err(error) => return Attempt::Failed(format!("TLS name {host}: {error}")),
            };
            match self.tls.connect(name, stream).await {
                Ok(stream) => send(TokioIo::new(stream), request).await,
                Err(error) => return Attempt::Failed(format!("TLS with {host}: {error}")),
            }
        } else {
            send(TokioIo::new(stream), request).await
        };
        match answer {
            Ok(answer) => answer,
            Err(error) => Attempt::Failed(error),
        }
    }
}

/// The `Authorization` value for a URL with user-info: `Basic` and the
/// base64 of `user:password`, percent-decoded (RFC 3986 §3.2.1, RFC 7617).
fn basic_credentials(uri: &Uri) -> Option<String> {
    use base64::Engine as _;
    let (user_info, _) = uri.authority()?.as_str().rsplit_once('@')?;
    let raw = user_info.as_bytes();
    let mut decoded = Vec::with_capacity(raw.len());
    let mut index = 0;
    while index < raw.len() {
        let escaped = raw
            .get(index + 1..index + 3)
            .filter(|pair| raw[index] == b'%' && pair.iter().all(u8::is_ascii_hexdigit))
            .and_then(|pair| u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok());
        match escaped {
            Some(value) => {
                decoded.push(value);
                index += 3;
            }
            None => {
                decoded.push(raw[index]);
                index += 1;
            }
        }
    }
    Some(format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(decoded)))
}

/// One request on a fresh HTTP/1.1 connection; the answer's status and
/// `Retry-After` (in seconds; an HTTP date is not honoured, the backoff is).
async fn send<I>(io: I, request: Request<Full<Bytes>>) -> Result<Attempt, String>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(io).await.map_err(|error| format!("HTTP handshake: {error}"))?;
    let driver = tokio::spawn(connection);
    let response = sender.send_request(request).await.map_err(|error| format!("HTTP: {error}"));
    let attempt = match response {
        Ok(response) => {
            let retry_after = response
                .headers()
                .get(RETRY_AFTER)
                .and_then(|value| value.to_str().ok())
                .and_then(|value| value.trim().parse::<u64>().ok())
                .map(Duration::from_secs);
            let status = response.status();
            // The body is read (and dropped) so the receiver sees a clean
            // end, up to a bound: a receiver cannot make the notifier buffer
            // an endless answer.
            let _ = http_body_util::Limited::new(response.into_body(), RESPONSE_BYTES_MAX).collect().await;
            Ok(Attempt::Answered { status, retry_after })
        }
        Err(error) => Err(error),
    };
    driver.abort();
    attempt
}

/// The pause after failed attempt number `attempts` (1-based): the backoff
/// `backoff_base * 2^(attempts-1)` capped at `backoff_max`, with jitter in
/// its upper half, and never less than the receiver's `Retry-After` (capped
/// at [`RETRY_AFTER_MAX`]).
pub fn retry_pause(policy: &RetryPolicy, attempts: u32, retry_after: Option<Duration>) -> Duration {
    let doubled = policy.backoff_base.saturating_mul(1u32 << attempts.saturating_sub(1).min(16));
    let backoff = doubled.min(policy.backoff_max);
    let half = backoff / 2;
    let jittered = half + half.mul_f64(fastrand::f64());
    jittered.max(retry_after.map_or(Duration::ZERO, |asked| asked.min(RETRY_AFTER_MAX)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_matches_rfc_4231_test_cases() {
        // Test case 2 (a short key) and 6 (a key longer than a block).
        assert_eq!(
            hex::encode(hmac_sha256(b"Jefe", b"what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        assert_eq!(
            hex::encode(hmac_sha256(&[0xaa; 131], b"Test Using Larger Than Block-Size Key - Hash Key First")),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
    }

    #[test]
    fn the_signature_covers_the_timestamp_and_the_body() {
        let secret = b"0123456789abcdef";
        let signed = signature(secret, 1_700_000_000, b"{}");
        assert_eq!(signed, format!("t=1700000000,v1={}", hex::encode(hmac_sha256(secret, b"1700000000.{}"))));
        assert_ne!(signed, signature(secret, 1_700_000_001, b"{}"));
        assert_ne!(signed, signature(secret, 1_700_000_000, b"{ }"));
    }

    #[test]
    fn the_backoff_doubles_with_jitter_is_capped_and_honours_retry_after() {
        for attempts in 1..=20 {
            let backoff = BACKOFF_BASE.saturating_mul(1u32 << (attempts - 1).min(16)).min(BACKOFF_MAX);
            let pause = retry_pause(&RetryPolicy::default(), attempts, None);
            assert!(pause >= backoff / 2 && pause <= backoff, "attempt {attempts}: {pause:?}");
        }
        let policy = RetryPolicy::default();
        assert!(retry_pause(&policy, 1, Some(Duration::from_secs(7))) >= Duration::from_secs(7));
        assert_eq!(retry_pause(&policy, 1, Some(Duration::from_secs(86_400))), RETRY_AFTER_MAX);
    }

    #[test]
    fn webhooks_parse_and_bad_ones_are_refused_with_reasons() {
        let secret: Arc<[u8]> = Arc::from(&b"0123456789abcdef"[..]);
        assert_eq!(
            Webhook::parse("slack=https://hooks.slack.com/services/T/B/x", None).map(|w| w.kind).ok(),
            Some(WebhookKind::Slack)
        );
        assert_eq!(
            Webhook::parse("generic=http://127.0.0.1:9/hook", Some(&secret)).map(|w| w.kind).ok(),
            Some(WebhookKind::Generic)
        );
        for (bad, needle) in [
            ("https://x", "slack=URL or generic=URL"),
            ("teams=https://x", "unknown webhook kind"),
            ("slack=ftp://x/y", "http:// or https://"),
            ("slack=not a url", "not a URL"),
            ("generic=http://127.0.0.1:9/", "--hmac-secret-file"),
        ] {
            let error = Webhook::parse(bad, None).expect_err(bad);
            assert!(error.to_string().contains(needle), "{bad}: {error}");
            assert_eq!(error.code(), "NOTIFY_CONFIG");
        }
        let long = format!("slack=https://x/{}", "a".repeat(URL_BYTES_MAX));
        assert!(Webhook::parse(&long, None).is_err());
    }

    #[test]
    fn the_debug_form_hides_the_webhook_path() {
        let webhook = Webhook::parse("slack=https://hooks.slack.com/services/T/B/secret", None).expect("parse");
        assert!(!format!("{webhook:?}").contains("secret"));
    }

    #[test]
    fn a_redacted_url_keeps_scheme_host_and_port_and_hides_every_part_that_may_hold_a_credential() {
        for (url, shown) in [
            ("https://hooks.slack.com/services/T0001/B0002/XXXXsecretXXXX", "https://hooks.slack.com/[redacted]"),
            ("https://user:s3cretpw@hooks.example.com/gavel", "https://hooks.example.com/[redacted]"),
            ("http://user:s3cretpw@127.0.0.1:9000", "http://127.0.0.1:9000/[redacted]"),
            ("http://127.0.0.1:9000/?token=s3cret", "http://127.0.0.1:9000/[redacted]"),
            ("https://h.example/hook?key=s3cret&sig=s3cret", "https://h.example/[redacted]"),
            ("https://discord.com/api/webhooks/123/s3cret", "https://discord.com/[redacted]"),
            ("http://[::1]:8080/hook", "http://[::1]:8080/[redacted]"),
            ("https://hooks.example.com", "https://hooks.example.com"),
            ("https://hooks.example.com/", "https://hooks.example.com"),
        ] {
            let uri: Uri = url.parse().expect(url);
            let redacted = redacted_url(&uri);
            assert_eq!(redacted, shown, "{url}");
            assert!(!redacted.contains("s3cret") && !redacted.contains("user"), "{url}: {redacted}");
        }
        // The webhook's own forms use it.
        let webhook = Webhook::parse("slack=https://u:s3cretpw@hooks.example.com/x?token=s3cret", None).expect("parse");
        assert_eq!(webhook.redacted_url(), "https://hooks.example.com/[redacted]");
        assert!(!format!("{webhook:?}").contains("s3cret"));
    }

    #[test]
    fn a_refused_webhook_flag_never_echoes_what_may_be_a_url() {
        let error = Webhook::parse("https://user:s3cretpw@hooks.example.com/?token=s3cret", None).expect_err("no kind");
        assert!(!error.to_string().contains("s3cret") && !error.to_string().contains("user"), "{error}");
        let error = Webhook::parse("teams=https://hooks.example.com/?token=s3cret", None).expect_err("unknown kind");
        assert!(error.to_string().contains("\"teams\"") && !error.to_string().contains("s3cret"), "{error}");
    }

    #[test]
    fn user_info_becomes_basic_credentials_percent_decoded() {
        let uri: Uri = "https://alice:p%40ss%3Aword@hooks.example.com/x".parse().expect("a URL");
        // base64("alice:p@ss:word")
        assert_eq!(basic_credentials(&uri).as_deref(), Some("Basic YWxpY2U6cEBzczp3b3Jk"));
        let uri: Uri = "https://hooks.example.com/x".parse().expect("a URL");
        assert_eq!(basic_credentials(&uri), None);
        let uri: Uri = "https://a:b%zz@h/x".parse().expect("a URL");
        // base64("a:b%zz"): a bad escape is kept as it is.
        assert_eq!(basic_credentials(&uri).as_deref(), Some("Basic YTpiJXp6"));
    }

    #[test]
    fn utc_dates_match_known_instants() {
        assert_eq!(utc_minute(0), "1970-01-01 00:00 UTC");
        assert_eq!(utc_minute(951_782_400_000), "2000-02-29 00:00 UTC");
        assert_eq!(utc_minute(1_764_770_400_000), "2025-12-03 14:00 UTC");
        assert_eq!(utc_minute(-60_000), "1969-12-31 23:59 UTC");
    }

    #[test]
    fn links_percent_encode_the_id() {
        assert_eq!(approval_link("http://c:7500/", "apr_1"), "http://c:7500/approvals/apr_1");
        assert_eq!(approval_link("http://c", "a/b?c"), "http://c/approvals/a%2Fb%3Fc");
        // Issue #37's decoy: its link stays on its own page.
        assert_eq!(
            approval_link("http://c", "z/../../approvals/hv-e9814d"),
            "http://c/approvals/z%2F..%2F..%2Fapprovals%2Fhv-e9814d"
        );
        assert_eq!(approval_link("http://c", "a#b%c d"), "http://c/approvals/a%23b%25c%20d");
        assert_eq!(approval_link("http://c", ".."), "http://c/approvals?id=..");
        assert_eq!(approval_link("http://c", "."), "http://c/approvals?id=.");
    }

    /// A standing approval as the cluster answers it: 100 uses within 7
    /// days, bound only at `/order_id`, two uses spent.
    fn standing() -> pb::Approval {
        let terms = json!({
            "approvalId": "apr-s", "inputHash": "ab".repeat(32), "policy": null, "expiresAtMs": 1,
            "uses": { "max": 100, "windowMs": 604_800_000u64, "bound": [{ "pointer": "/order_id", "value": "o-9" }] },
        });
        pb::Approval {
            id: "apr-s".into(),
            capability_id: "orders.refund".into(),
            input_json: r#"{"amount_cents":1,"order_id":"o-9","secret":"card"}"#.into(),
            input_hash: "ab".repeat(32),
            terms_json: terms.to_string(),
            terms_hash: "cd".repeat(32),
            standing: Some(pb::StandingProgress {
                terms: Some(pb::StandingTerms {
                    uses_max: 100,
                    window_ms: 604_800_000,
                    bound_pointers: vec!["/order_id".into()],
                }),
                used_by: vec!["ex-1".into(), "ex-2".into()],
            }),
            ..pb::Approval::default()
        }
    }

    #[test]
    fn a_standing_approval_says_so_in_both_payloads_and_a_one_shot_says_one_use() {
        let approval = standing();
        let generic = generic_body(&approval, "l", false);
        assert_eq!(generic["approval"]["termsHash"], "cd".repeat(32));
        assert_eq!(
            generic["approval"]["uses"],
            json!({ "standing": true, "max": 100, "spent": 2, "windowMs": 604_800_000u64,
                    "bound": [{ "pointer": "/order_id", "value": "o-9" }] })
        );
        let slack = slack_body(&approval, "l");
        let text = slack["text"].as_str().unwrap_or_default();
        assert!(
            text.contains(r#"(standing approval: 100 uses within 7 days, bound on /order_id = "o-9" (2 spent))"#),
            "{text}"
        );
        let details = slack["blocks"][0]["text"]["text"].as_str().unwrap_or_default();
        assert!(details.contains("*Standing approval: 100 uses within 7 days"), "{details}");
        assert!(details.contains(&format!("Terms hash: `{}`", "cd".repeat(32))), "{details}");
        // An older cluster's answer, without terms: the standing progress says the same.
        let bare = pb::Approval { terms_json: String::new(), ..standing() };
        assert_eq!(generic_body(&bare, "l", false)["approval"]["uses"], generic["approval"]["uses"]);
        let one = pb::Approval { terms_json: r#"{"uses":{"max":1}}"#.into(), ..hostile() };
        assert_eq!(generic_body(&one, "l", false)["approval"]["uses"], json!({ "standing": false, "max": 1 }));
        assert!(slack_body(&one, "l")["text"].as_str().unwrap_or_default().contains("(one use)"));
    }

    #[test]
    fn a_bound_value_is_escaped_and_clipped_for_slack() {
        let mut approval = standing();
        let long = format!("<!channel>{}", "x".repeat(1_000));
        approval.terms_json =
            json!({ "uses": { "max": 2, "windowMs": 1_000, "bound": [{ "pointer": "/a", "value": long }] } })
                .to_string();
        let text = slack_body(&approval, "l")["text"].as_str().unwrap_or_default().to_string();
        assert!(
            !text.contains("<!channel>") && text.contains("&lt;!channel&gt;") && text.chars().count() < 600,
            "{text}"
        );
    }

    fn hostile() -> pb::Approval {
        pb::Approval {
            id: "apr_1".into(),
            capability_id: "refund<@U123>&".into(),
            actor: Some(pb::Actor {
                id: "<!channel>".into(),
                kind: pb::ActorKind::User as i32,
                ..pb::Actor::default()
            }),
            reasons: vec!["<https://evil|click>".into(), "x".repeat(1_000)],
            input_json: r#"{"secret":"card"}"#.into(),
            input_hash: "ab".repeat(32),
            risk: pb::Risk::High as i32,
            ..pb::Approval::default()
        }
    }

    #[test]
    fn slack_text_escapes_mentions_and_links_and_carries_the_console_link() {
        let body = slack_body(&hostile(), "http://c/approvals/apr_1");
        let text = body.to_string();
        assert!(!text.contains("<@U123>") && !text.contains("<!channel>") && !text.contains("<https://evil"), "{text}");
        assert!(text.contains("&lt;!channel&gt;"));
        assert_eq!(body["blocks"][1]["elements"][0]["url"], "http://c/approvals/apr_1");
        assert!(body["text"].as_str().is_some_and(|text| text.ends_with("http://c/approvals/apr_1")));
        let details = body["blocks"][0]["text"]["text"].as_str().unwrap_or_default();
        assert!(details.chars().count() < 3_000);
        assert!(!details.contains("Expires"), "no expiry, no date: {details}");
        let expiring = pb::Approval { expires_at_ms: 1_764_770_400_000, ..hostile() };
        let details = slack_body(&expiring, "l")["blocks"][0]["text"]["text"].to_string();
        assert!(details.contains("<!date^1764770400^{date_short_pretty} {time}|2025-12-03 14:00 UTC>"), "{details}");
    }

    #[test]
    fn no_payload_carries_the_input_only_its_hash() {
        let approval = hostile();
        for body in [generic_body(&approval, "http://c/approvals/apr_1", false), slack_body(&approval, "l")] {
            assert!(!body.to_string().contains("card"), "{body}");
        }
        // Of a standing approval, the bound values are posted (they are its
        // terms), and nothing else of its input.
        for body in [generic_body(&standing(), "l", false), slack_body(&standing(), "l")] {
            assert!(body.to_string().contains("o-9") && !body.to_string().contains("card"), "{body}");
        }
        let generic = generic_body(&approval, "http://c/approvals/apr_1", true);
        assert_eq!(generic["approval"]["inputHash"], approval.input_hash);
        assert_eq!((generic["deliveryId"].as_str(), generic["redelivery"].as_bool()), (Some("apr_1"), Some(true)));
        assert_eq!(generic["approval"]["risk"], "high");
    }
}
