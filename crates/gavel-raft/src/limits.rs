//! Fixed bounds of the Raft layer, one constant per bound, each with its reason.

use std::time::Duration;

/// Size of one data message of an `InstallSnapshot` stream. Small enough to
/// stay far below the gRPC message limit and to keep per-message memory low,
/// large enough that a 100 MiB snapshot is only 100 messages.
pub const SNAPSHOT_CHUNK_BYTES: usize = 1024 * 1024;

/// Largest message the Raft service accepts (and a peer client sends). An
/// append-entries batch is the largest peer message; tonic checks a
/// message's length prefix against this before it buffers the message, so
/// an oversized one (a forged 250 MiB append, say) is refused with
/// `OUT_OF_RANGE` before anything is allocated or decoded. One log entry is
/// at most one public request (4 MiB) or a batch of `batch::BATCH_BYTES_MAX`
/// (1 MiB), so 64 MiB still carries dozens of full entries; a larger batch
/// (openraft sends up to 300 entries) is refused as too large and the
/// leader halves it (`network::PeerClient::rpc_error`).
///
/// This limit is the tonic decoding limit rather than a size check in the
/// handler: a check after tonic decoded the message would come after the
/// allocation it is meant to prevent.
pub const APPEND_ENTRIES_BYTES_MAX: usize = 64 * 1024 * 1024;

/// Largest snapshot a node accepts from a peer. The receiver checks the
/// stream header's `total_bytes` against it before it creates anything, so a
/// forged header (2^62 bytes) costs nothing. A snapshot is streamed to disk
/// and installed from there, so this bounds the disk a transfer may take
/// (and, for a backup, which is held in memory, that memory), not the
/// memory of an install. 4 GiB is above the largest snapshot measured
/// (about 1.25 GB at a million retained executions, `gavel-lab bench --scale`),
/// so a legitimate follower is never refused its catch-up.
pub const SNAPSHOT_BYTES_MAX: u64 = 4 * 1024 * 1024 * 1024;

/// How far (in log entries) a learner may trail the leader's last log index
/// and still be promoted to voter. Zero would never be reached under a steady
/// write load; a few dozen entries are one replication round trip.
pub const PROMOTE_LAG_ENTRIES_MAX: u64 = 64;

/// Upper bound of the exponential backoff towards an unreachable peer, so a
/// restarted peer is contacted again within this time.
pub const UNREACHABLE_BACKOFF_MAX: Duration = Duration::from_secs(2);

/// Interval of HTTP/2 keepalive pings on peer connections: a ping goes out
/// after this long with nothing received, and detects a dead peer connection
/// (half-open TCP, or one that lost segments) without waiting for the OS.
/// Two seconds is 13 missed heartbeats and past every election timeout: a
/// connection carrying heartbeats is never pinged, an idle one gets a small
/// frame every 2 s. It was 10 s, and a hung connection
/// stalled replication for 15 s (the simulation's seed 182, docs/decisions.md).
pub const PEER_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(2);

/// How long a keepalive ping may stay unanswered before the peer connection
/// is considered dead, dropped, and dialed anew by the next RPC.
pub const PEER_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(3);

/// sled's page cache size. sled's default (1 GiB) is far more than the log
/// suffix and one snapshot need.
pub const SLED_CACHE_BYTES: u64 = 256 * 1024 * 1024;

/// How long `shutdown` waits for every storage handle openraft held to be
/// dropped (and sled's files closed) before giving up.
pub const STORAGE_CLOSE_TIMEOUT: Duration = Duration::from_secs(10);

/// sled's segment (and I/O buffer) size. sled stores any value or tree page
/// larger than a quarter of a segment as a separate blob file, which it never
/// fsyncs and which costs us an extra file and directory fsync. With the
/// default 512 KiB that happens for tree pages of ~16 commands of 8 KiB;
/// 8 MiB keeps pages inline up to 2 MiB. sled refuses to open a database
/// with a different segment size, so this must never change.
pub const SLED_SEGMENT_BYTES: usize = 8 * 1024 * 1024;

/// Size of one Raft log segment file, zero-filled before it is used. A
/// segment is deleted only once every entry in it is purged, so this bounds
/// the disk the log holds beyond the snapshot's purge point (plus one
/// segment prepared ahead). 8 MiB is a few thousand typical entries; the
/// zero fill (one sequential write, off the writer thread) is the price of
/// fdatasyncs that have no file metadata to commit.
pub const WAL_SEGMENT_BYTES: u64 = 8 * 1024 * 1024;

/// Buffer of a snapshot stream: the writer that builds a snapshot file from
/// the application's [`crate::SnapshotSource`], and the reader that an
/// install or a restart decodes it through. With [`SNAPSHOT_CHUNK_BYTES`]
/// per message in flight on the network side, this is the Raft layer's
/// whole memory for one snapshot, whatever its size: the bytes go from the
/// application's store to a file, from the file to the network in chunks,
/// and from the network to a file on the receiver, never whole in memory.
pub const SNAPSHOT_STREAM_BUFFER_BYTES: usize = 1024 * 1024;
