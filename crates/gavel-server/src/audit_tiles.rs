//! The audit tree's C2SP `tlog-tiles` read API over HTTP, on the metrics
//! listener (`gavel node --metrics-listen ADDR --audit-tiles hashes|entries`),
//! under the prefix `/audit/`: `GET /audit/checkpoint`,
//! `/audit/tile/<L>/<N>[.p/<W>]` and `/audit/tile/entries/<N>[.p/<W>]`.
//! Read-only, from this node's own replica: every node serves the same
//! immutable tiles, and the checkpoint its replica has published.
//!
//! Who may read: the listener has no authentication, so whoever reaches it
//! reads what the operator opted into (docs/decisions/0101). `hashes`
//! serves the checkpoint and the hash tiles: the tree's shape, no event.
//! `entries` adds the entry bundles, whose events gRPC shows the auditor
//! grant only; an operator who chooses it makes the audit trail readable by
//! whoever reaches the address (a private network, or a proxy that checks
//! callers). Off by default.
//!
//! Retention drops events, never hashes: every tile the tree reached is
//! served; an entry bundle only while all its events are retained (below
//! the oldest retained event, `404`: the tlog-tiles pruning rule).

use gavel_core::tlog_tiles::{parse_tile_path, BundleError, TileResource};

use crate::node::Node;

/// What the metrics listener serves of the audit tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AuditTiles {
    /// Nothing.
    #[default]
    Off,
    /// The checkpoint and the hash tiles.
    Hashes,
    /// The checkpoint, the hash tiles and the entry bundles (the events).
    Entries,
}

impl std::str::FromStr for AuditTiles {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "off" => Ok(AuditTiles::Off),
            "hashes" => Ok(AuditTiles::Hashes),
            "entries" => Ok(AuditTiles::Entries),
            other => Err(format!("{other:?} is not off, hashes or entries")),
        }
    }
}

/// The path prefix of the tlog-tiles resources on the listener.
pub const PREFIX: &str = "/audit/";

/// One HTTP answer: status, content type, caching, body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TileReply {
    /// The HTTP status.
    pub status: u16,
    /// The `content-type`.
    pub content_type: &'static str,
    /// The `cache-control`, if any.
    pub cache_control: Option<&'static str>,
    /// The body.
    pub body: Vec<u8>,
}

/// Immutable resources: tiles and bundles never change once served.
const IMMUTABLE: &str = "public, max-age=31536000, immutable";
/// The checkpoint moves: clients read it again (tlog-tiles: no caching beyond a few seconds).
const MUTABLE: &str = "no-cache";

fn text(status: u16, message: String) -> TileReply {
    TileReply { status, content_type: "text/plain; charset=utf-8", cache_control: None, body: message.into_bytes() }
}

fn bytes(body: Vec<u8>) -> TileReply {
    TileReply { status: 200, content_type: "application/octet-stream", cache_control: Some(IMMUTABLE), body }
}

/// Answers `GET path` (which starts with [`PREFIX`]) for `node`.
pub fn answer(node: &Node, tiles: AuditTiles, path: &str) -> TileReply {
    if tiles == AuditTiles::Off {
        let message = "this node does not serve its audit tiles: start it with --audit-tiles=hashes or entries\n";
        return text(404, message.to_string());
    }
    let relative = path.strip_prefix(PREFIX).unwrap_or(path);
    let resource = match parse_tile_path(relative) {
        Ok(resource) => resource,
        Err(problem) => return text(404, format!("{problem}\n")),
    };
    match resource {
        TileResource::Checkpoint => {
            let head = node.reads.read(crate::services::audit_proof::checkpoint);
            match head.signed_checkpoint {
                Some(note) => TileReply {
                    status: 200,
                    content_type: "text/plain; charset=utf-8",
                    cache_control: Some(MUTABLE),
                    body: note.into_bytes(),
                },
                None => text(404, "no checkpoint is cosigned yet\n".to_string()),
            }
        }
        TileResource::Tile { level, index, width } => {
            match node.reads.read(|state| state.audit_tile(level, index, width)) {
                Some(tile) => bytes(tile),
                None => text(404, "the tree has not reached this tile\n".to_string()),
            }
        }
        TileResource::Entries { .. } if tiles != AuditTiles::Entries => text(
            403,
            "entry bundles carry the events: this node serves them only with --audit-tiles=entries\n".to_string(),
        ),
        TileResource::Entries { index, width } => {
            match node.reads.read(|state| state.audit_entry_bundle(index, width)) {
                Ok(bundle) => bytes(bundle),
                Err(error @ (BundleError::NotReached { .. } | BundleError::Pruned { .. })) => {
                    text(404, format!("{error}\n"))
                }
                Err(error @ BundleError::EntryTooLong { .. }) => text(500, format!("{error}\n")),
            }
        }
    }
}
