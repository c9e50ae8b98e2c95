//! `gavel witness`: a minimal C2SP `tlog-witness` over plain HTTP/1.1, for
//! an operator who wants a witness of a Gavel audit log (or any C2SP log
//! signing with Ed25519) that does not share the cluster's fate.
//!
//! It has its own Ed25519 key (`witness.key` in its data directory, made at
//! first start, mode 0600) and cosigns as C2SP `tlog-cosignature/v1` (type
//! 0x04) under `--name`. It trusts the log keys `--logs` lists (plain
//! Ed25519 verifier keys named as the origin; `gavel audit keys` prints
//! them, and the other lines are ignored), read again at each request so a
//! log is added or its keys changed without a restart. Per origin it keeps the size and
//! root it last cosigned in `witness-state.json`, written durably before it
//! answers, under one lock with the check, as the spec asks. The decisions
//! (200, 400, 403, 404, 409, 422) are `gavel_core::witness`'s.
//!
//! `POST /add-checkpoint` cosigns; `GET /<hex SHA-256 of origin>/checkpoint`
//! serves the latest checkpoint it cosigned, with the log's signature and
//! its own.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use axum::extract::{Path as UrlPath, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine as _;
use clap::Args;
use gavel_core::note::{self, KeyKind, VerifierKey};
use gavel_core::witness::{WitnessAnswer, WitnessLogs};
use ring::signature::{Ed25519KeyPair, KeyPair};
use serde::{Deserialize, Serialize};
use sha2::Digest as _;
use tokio::sync::Mutex;

/// The witness's key file in its data directory.
const KEY_FILE: &str = "witness.key";
/// The witness's state file in its data directory.
const STATE_FILE: &str = "witness-state.json";
/// The largest request body read (63 proof lines and a checkpoint with 16 signatures fit well).
const REQUEST_BYTES_MAX: usize = 64 * 1024;

/// `gavel witness`.
#[derive(Debug, Args)]
pub struct WitnessArgs {
    /// Where to listen (plain HTTP); port 0 picks a free one (printed).
    #[arg(long, default_value = "127.0.0.1:7380")]
    pub listen: SocketAddr,
    /// Its key and state live here (made if missing).
    #[arg(long, value_name = "DIR")]
    pub data_dir: PathBuf,
    /// Its key name, a schema-less URL such as witness.example.com/w1.
    #[arg(long)]
    pub name: String,
    /// The logs it witnesses: verifier keys, one a line (the output of
    /// `gavel audit keys`); only plain Ed25519 keys (type 0x01), named as
    /// their log's origin, are used.
    #[arg(long, value_name = "FILE")]
    pub logs: PathBuf,
}

/// What the witness persists.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Persisted {
    /// The latest size and root cosigned, per origin.
    logs: WitnessLogs,
    /// The latest checkpoint cosigned, per origin, with the log's and this witness's signatures.
    checkpoints: BTreeMap<String, String>,
}

struct Witness {
    name: String,
    key: Ed25519KeyPair,
    logs_path: PathBuf,
    state_path: PathBuf,
    state: Mutex<Persisted>,
}

/// Runs the witness until Ctrl-C or SIGTERM.
pub async fn run(args: WitnessArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.data_dir).with_context(|| format!("creating {}", args.data_dir.display()))?;
    if args.name.is_empty() || args.name.contains(char::is_whitespace) || args.name.contains('+') {
        anyhow::bail!("--name {:?}: a key name is not empty and holds no space or '+'", args.name);
    }
    let key = gavel_server::checkpointer::load_or_create_key_file(&args.data_dir.join(KEY_FILE))?;
    let log_keys = read_log_keys(&args.logs)?;
    if log_keys.is_empty() {
        eprintln!(
            "gavel witness: {} lists no log key yet; every checkpoint is refused until it does",
            args.logs.display()
        );
    }
    let state_path = args.data_dir.join(STATE_FILE);
    let state = match std::fs::read_to_string(&state_path) {
        Ok(text) => serde_json::from_str(&text).with_context(|| format!("reading {}", state_path.display()))?,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Persisted::default(),
        Err(error) => return Err(error).with_context(|| format!("reading {}", state_path.display())),
    };
    let vkey = note::verifier_key_of(KeyKind::Cosignature, &args.name, key.public_key().as_ref());
    let witness =
        Arc::new(Witness { name: args.name, key, logs_path: args.logs, state_path, state: Mutex::new(state) });
    let listener =
        tokio::net::TcpListener::bind(args.listen).await.with_context(|| format!("listening on {}", args.listen))?;
    let origins: Vec<&str> = log_keys.iter().map(|key| key.name.as_str()).collect();
    println!("gavel witness: key {vkey}");
    println!("gavel witness: witnessing {origins:?}; listening on http://{}", listener.local_addr()?);
    let app = axum::Router::new()
        .route("/add-checkpoint", post(add_checkpoint))
        .route("/{origin_hash}/checkpoint", get(latest_checkpoint))
        .layer(axum::extract::DefaultBodyLimit::max(REQUEST_BYTES_MAX))
        .with_state(witness);
    axum::serve(listener, app).with_graceful_shutdown(stopped()).await.context("serving")?;
    Ok(())
}

/// Resolves at the first Ctrl-C or SIGTERM.
async fn stopped() {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut terminate) = signal(SignalKind::terminate()) else { return };
    tokio::select! {
        _ = terminate.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

/// The plain Ed25519 keys of `path`'s verifier keys (none when it does not exist).
fn read_log_keys(path: &Path) -> anyhow::Result<Vec<VerifierKey>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(error) => return Err(error).with_context(|| format!("reading {}", path.display())),
    };
    let mut keys = Vec::new();
    for line in text.lines().map(str::trim).filter(|line| !line.is_empty() && !line.starts_with('#')) {
        let key = note::parse_verifier_key(line).map_err(|problem| anyhow::anyhow!("{}: {problem}", path.display()))?;
        if key.kind == KeyKind::Ed25519 {
            keys.push(key);
        }
    }
    Ok(keys)
}

fn ed25519(key: &[u8], message: &[u8], signature: &[u8]) -> bool {
    ring::signature::UnparsedPublicKey::new(&ring::signature::ED25519, key).verify(message, signature).is_ok()
}

/// Writes `bytes` to `path` durably: a temporary file, fsynced, renamed over it.
fn write_durably(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let temporary = path.with_extension("tmp");
    let mut file = std::fs::File::create(&temporary)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&temporary, path)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// `POST /add-checkpoint`.
async fn add_checkpoint(State(witness): State<Arc<Witness>>, body: String) -> Response {
    // One lock over the check, the write and the answer: two requests for
    // one origin cannot roll its size back (the spec's race).
    let mut state = witness.state.lock().await;
    let log_keys = match read_log_keys(&witness.logs_path) {
        Ok(keys) => keys,
        Err(error) => return (StatusCode::SERVICE_UNAVAILABLE, format!("{error:#}\n")).into_response(),
    };
    let answer = state.logs.add_checkpoint(&log_keys, &body, ed25519);
    let text = match answer {
        WitnessAnswer::Cosign { body: text } => text,
        WitnessAnswer::Conflict { size } => {
            return (StatusCode::CONFLICT, [(header::CONTENT_TYPE, "text/x.tlog.size")], format!("{size}\n"))
                .into_response();
        }
        refused => {
            let status = StatusCode::from_u16(refused.status()).unwrap_or(StatusCode::BAD_REQUEST);
            let message = match refused {
                WitnessAnswer::BadRequest(problem)
                | WitnessAnswer::Forbidden(problem)
                | WitnessAnswer::UnknownLog(problem)
                | WitnessAnswer::Unprocessable(problem) => problem,
                WitnessAnswer::Cosign { .. } | WitnessAnswer::Conflict { .. } => unreachable!("answered above"),
            };
            tracing::warn!(%status, %message, "refused a checkpoint");
            return (status, format!("{message}\n")).into_response();
        }
    };
    let timestamp_s =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |since| since.as_secs());
    let signature = witness.key.sign(note::cosigned_message(&text, timestamp_s).as_bytes());
    let public_key = witness.key.public_key().as_ref();
    let mut bytes = note::key_id_of(KeyKind::Cosignature, &witness.name, public_key).to_vec();
    bytes.extend_from_slice(&note::timestamped_signature(timestamp_s, signature.as_ref()));
    let line = format!("\u{2014} {} {}\n", witness.name, base64::engine::general_purpose::STANDARD.encode(bytes));
    // The checkpoint it now holds: the body, the log's signature lines, its own.
    let origin = text.lines().next().unwrap_or_default().to_string();
    let request_note = body.split_once("\n\n").map_or("", |(_, note)| note);
    let log_lines: String = request_note
        .lines()
        .filter(|line| line.starts_with(&format!("\u{2014} {origin} ")))
        .map(|line| format!("{line}\n"))
        .collect();
    state.checkpoints.insert(origin, format!("{text}\n{log_lines}{line}"));
    let persisted = serde_json::to_vec_pretty(&*state).expect("the state serializes");
    if let Err(error) = write_durably(&witness.state_path, &persisted) {
        // Not persisted: no cosignature, and the state in memory is read back from the file.
        tracing::error!(%error, "writing the witness state");
        if let Ok(text) = std::fs::read_to_string(&witness.state_path) {
            if let Ok(on_disk) = serde_json::from_str(&text) {
                *state = on_disk;
            }
        }
        return (StatusCode::SERVICE_UNAVAILABLE, "the witness could not persist its state\n").into_response();
    }
    (StatusCode::OK, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], line).into_response()
}

/// `GET /<origin hash>/checkpoint`.
async fn latest_checkpoint(State(witness): State<Arc<Witness>>, UrlPath(origin_hash): UrlPath<String>) -> Response {
    let state = witness.state.lock().await;
    let found = state
        .checkpoints
        .iter()
        .find(|(origin, _)| hex::encode(sha2::Sha256::digest(origin.as_bytes())) == origin_hash)
        .map(|(_, checkpoint)| checkpoint.clone());
    match found {
        Some(checkpoint) => (StatusCode::OK, checkpoint).into_response(),
        None => (StatusCode::NOT_FOUND, "no checkpoint of that log was cosigned here\n").into_response(),
    }
}
