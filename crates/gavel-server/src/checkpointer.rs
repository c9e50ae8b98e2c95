//! Cosigned audit checkpoints, the node's side (the rules are the core's,
//! `machine/checkpoints.rs`).
//!
//! Every node has its own Ed25519 note key, generated in its data directory
//! at first start (`audit-note.key`, PKCS#8, mode 0600), and registers its
//! public key through the log (`RegisterNoteKey`). The leader starts a
//! checkpoint every [`AUDIT_CHECKPOINT_EVENTS`] events or
//! [`AUDIT_CHECKPOINT_INTERVAL_MS`] when the tree grew, by cosigning the
//! tree's size (its signature as the log, under the origin's name, goes
//! with it: docs/decisions/0099); every node (the leader too) cosigns the
//! checkpoint being cosigned once its own tree reaches that size, signing
//! the body its own replica computes as a C2SP `tlog-cosignature/v1`: a
//! witness's check. A quorum of registered keys
//! publishes it. A node sends its commands to the leader over the public
//! `AuditService` with its own certificate, so the leader proposes them as
//! that node's.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use gavel_core::limits::{AUDIT_CHECKPOINT_EVENTS, AUDIT_CHECKPOINT_INTERVAL_MS};
use gavel_core::{Caller, Command, Principal, State};
use gavel_proto::v1 as pb;
use gavel_proto::v1::audit_service_client::AuditServiceClient;
use gavel_raft::LeaderRoute;
use ring::signature::{Ed25519KeyPair, KeyPair};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::node::Node;

/// The note key's file in the data directory.
pub const NOTE_KEY_FILE: &str = "audit-note.key";

/// Longest sleep between checks.
const IDLE_CHECK: Duration = Duration::from_millis(250);
/// Pause after a refused or failed call (an election, a lagging replica).
const RETRY_PAUSE: Duration = Duration::from_millis(200);

/// Why the note key could not be loaded or made.
#[derive(Debug, thiserror::Error)]
pub enum NoteKeyError {
    /// The file could not be read or written.
    #[error("note key {path}: {error}")]
    Io {
        /// The file.
        path: String,
        /// What failed.
        error: std::io::Error,
    },
    /// The file is not an Ed25519 PKCS#8 key.
    #[error("note key {0} is not an Ed25519 PKCS#8 key")]
    Malformed(String),
}

/// Loads this node's note key from `data_dir`, generating it at first start.
pub fn load_or_create_note_key(data_dir: &Path) -> Result<Ed25519KeyPair, NoteKeyError> {
    load_or_create_key_file(&data_dir.join(NOTE_KEY_FILE))
}

/// Loads an Ed25519 PKCS#8 key from `path`, generating it (mode 0600) when
/// the file does not exist (a node's note key, a `gavel witness`'s key).
pub fn load_or_create_key_file(path: &Path) -> Result<Ed25519KeyPair, NoteKeyError> {
    let path = path.to_path_buf();
    let shown = path.display().to_string();
    let io = |error| NoteKeyError::Io { path: shown.clone(), error };
    let pkcs8 = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            let generated = Ed25519KeyPair::generate_pkcs8(&ring::rand::SystemRandom::new())
                .map_err(|_| NoteKeyError::Malformed(shown.clone()))?;
            write_private(&path, generated.as_ref()).map_err(io)?;
            generated.as_ref().to_vec()
        }
        Err(error) => return Err(io(error)),
    };
    Ed25519KeyPair::from_pkcs8(&pkcs8).map_err(|_| NoteKeyError::Malformed(shown))
}

/// Writes a new file readable by its owner only, durably.
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

/// What this node should send next, if anything: its key if the state does
/// not hold it, its cosignature of the checkpoint being cosigned, or (the
/// leader) a new checkpoint.
fn next_command(
    state: &State,
    node_id: u64,
    key: &Ed25519KeyPair,
    leader: bool,
    interval_passed: bool,
    now_s: u64,
) -> Option<Command> {
    let public_key = key.public_key().as_ref();
    if !state.has_note_key(node_id, public_key) {
        return Some(Command::RegisterNoteKey { node_id, public_key: public_key.to_vec() });
    }
    let size = state.audit_tree_size();
    // A C2SP tlog-cosignature/v1 of the body this replica computes; the
    // node that starts a checkpoint also signs the bare body as the log.
    let sign = |size: u64, as_log: bool| {
        let body = state.checkpoint_body_at(size).expect("a size the tree reached");
        let timestamp_s = now_s;
        let message = gavel_core::note::cosigned_message(&body, timestamp_s);
        Some(Command::CosignCheckpoint {
            node_id,
            size,
            timestamp_s,
            signature: key.sign(message.as_bytes()).as_ref().to_vec(),
            log_signature: as_log.then(|| key.sign(body.as_bytes()).as_ref().to_vec()),
        })
    };
    let pending = state.pending_checkpoint();
    if let Some(pending) = pending {
        if !pending.signatures.contains_key(&node_id) && pending.size <= size {
            return sign(pending.size, pending.log_signature.is_none());
        }
    }
    if !leader {
        return None;
    }
    let covered = pending.map(|pending| pending.size).or(state.published_checkpoint().map(|published| published.size));
    let covered = covered.unwrap_or(0);
    let grown = size.saturating_sub(covered);
    (grown >= AUDIT_CHECKPOINT_EVENTS || (grown > 0 && interval_passed)).then(|| sign(size, true)).flatten()
}

/// Sends `command` to the leader: proposed here when this node leads, else
/// over the leader's `AuditService` with this node's certificate.
async fn send(node: &Node, caller: Option<&Caller>, command: Command) -> Result<(), tonic::Status> {
    let leader_addr = match node.raft.leader_route() {
        LeaderRoute::Here => return node.call::<pb::CosignResponse>(caller, "", command).await.map(drop),
        LeaderRoute::At { leader_addr, .. } => leader_addr,
        LeaderRoute::Unknown => return Err(tonic::Status::unavailable("no leader yet")),
    };
    let mut client = AuditServiceClient::new(node.channel(&leader_addr)?);
    match command {
        Command::RegisterNoteKey { node_id, public_key } => {
            client.register_note_key(pb::RegisterNoteKeyRequest { node_id, public_key }).await.map(drop)
        }
        Command::CosignCheckpoint { node_id, size, timestamp_s, signature, log_signature } => client
            .cosign_checkpoint(pb::CosignCheckpointRequest {
                node_id,
                size,
                signature,
                timestamp: timestamp_s,
                log_signature,
            })
            .await
            .map(drop),
        other => Err(tonic::Status::internal(format!("the checkpointer does not send {other:?}"))),
    }
}

/// Runs until `shutdown` becomes true.
pub async fn run(node: Arc<Node>, key: Ed25519KeyPair, mut shutdown: watch::Receiver<bool>) {
    let caller = node.secured.is_some().then(|| Caller::of(Principal::node(node.id)));
    let interval = Duration::from_millis(AUDIT_CHECKPOINT_INTERVAL_MS);
    let mut applied = node.reads.watch();
    let mut last_started = Instant::now();
    loop {
        if *shutdown.borrow() {
            return;
        }
        let leader = node.raft.status().is_leader();
        // The cosignature's timestamp is this node's clock: it is a
        // statement of when this node saw the tree, not a replicated fact.
        let now_s = node.clock.now_ms() / 1_000;
        let command =
            applied.read(|state| next_command(state, node.id, &key, leader, last_started.elapsed() >= interval, now_s));
        let wait = match command {
            Some(command) => {
                let starts = matches!(&command, Command::CosignCheckpoint { size, .. }
                    if node.reads.read(|state| state.pending_checkpoint().is_none_or(|pending| pending.size < *size)));
                match send(&node, caller.as_ref(), command).await {
                    // Wait for this replica to apply it before deciding again.
                    Ok(()) => {
                        if starts {
                            last_started = Instant::now();
                        }
                        IDLE_CHECK
                    }
                    Err(status) => {
                        tracing::debug!(%status, "checkpoint command not taken; retrying");
                        RETRY_PAUSE
                    }
                }
            }
            None => IDLE_CHECK,
        };
        tokio::select! {
            _ = applied.next_apply(Some(Instant::now() + wait)) => {}
            _ = shutdown.changed() => {}
        }
    }
}
