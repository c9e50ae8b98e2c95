//! The server side of the Raft transport: hands peer RPCs to the local openraft.
//!
//! Peer messages are bounded before they cost memory: the service's decoding
//! limit ([`crate::limits::APPEND_ENTRIES_BYTES_MAX`]) refuses an oversized message from its
//! length prefix, and a snapshot stream's announced size is checked against
//! [`SNAPSHOT_BYTES_MAX`] before anything is created. Snapshot chunks are
//! spooled to a file in the node's data directory as they arrive; once the
//! whole announced size arrived, that file itself is handed to openraft
//! and installed (decoded through a reader, then renamed into the store),
//! so a snapshot is never whole in memory on the receiving side.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use openraft::errors::RaftError;
use openraft::raft::{AppendEntriesRequest, TransferLeaderRequest, VoteRequest};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::io::Write;
use tonic::{Request, Response, Status, Streaming};

use crate::limits::SNAPSHOT_BYTES_MAX;
use crate::network::SnapshotHeaderBody;
use crate::pb::raft_service_server::RaftService;
use crate::pb::{snapshot_chunk, RaftBytes, SnapshotChunk};
use crate::storage::wal::Threading;
use crate::storage::{Raft, Snapshot};
use crate::storage::{SnapshotData, SnapshotFile};
use crate::typ::TypeConfig;

/// The internal Raft gRPC service of one node. Obtain it with
/// [`crate::RaftNode::service`] and mount it on the node's tonic server.
#[derive(Clone)]
pub struct RaftGrpcService {
    raft: Raft,
    /// Where incoming snapshot streams are spooled (`<data_dir>/raft-incoming`).
    incoming_dir: PathBuf,
    /// Where installs are announced to the log store.
    install_fence: std::sync::Arc<crate::storage::InstallFence>,
    /// Who writes the spool file: tokio's blocking pool, or the caller in
    /// the simulator ([`crate::io`]), where a write completed by another
    /// thread would wake the node at a moment the OS chose.
    threading: Threading,
}

impl RaftGrpcService {
    pub(crate) fn new(raft: Raft, incoming_dir: PathBuf, threading: Threading) -> Self {
        Self { raft, incoming_dir, install_fence: Default::default(), threading }
    }

    /// Announces installs on `fence` (the node's log store's).
    pub(crate) fn fenced(mut self, fence: std::sync::Arc<crate::storage::InstallFence>) -> Self {
        self.install_fence = fence;
        self
    }
}

/// The directory under a node's data directory where incoming snapshots are
/// spooled. Its files are only ever partial transfers: [`clear_incoming`]
/// empties it on start.
pub(crate) fn incoming_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("raft-incoming")
}

/// Creates the spool directory, removing what a crashed transfer left behind.
pub(crate) fn clear_incoming(dir: &Path) -> std::io::Result<()> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    std::fs::create_dir_all(dir)
}

/// Names spool files uniquely within the process, so concurrent transfers
/// (a leader change mid-transfer) never share a file.
static SPOOL_SEQUENCE: AtomicU64 = AtomicU64::new(0);

/// One incoming snapshot spooled to disk; the file is removed when this is
/// dropped, unless it was complete and handed on ([`Spool::finish`]).
struct Spool {
    path: PathBuf,
    file: Option<std::fs::File>,
    written: u64,
    threading: Threading,
}

impl Spool {
    async fn create(dir: &Path, threading: Threading) -> Result<Spool, Status> {
        let sequence = SPOOL_SEQUENCE.fetch_add(1, Ordering::Relaxed);
        let path = dir.join(format!("{sequence:016x}.part"));
        let creating = path.clone();
        let file = threading
            .run(move || std::fs::File::create(creating))
            .await
            .map_err(|e| std::io::Error::other(e.to_string()))
            .and_then(|created| created)
            .map_err(|e| Status::internal(format!("cannot create the snapshot spool file {}: {e}", path.display())))?;
        Ok(Spool { path, file: Some(file), written: 0, threading })
    }

    /// Appends `bytes` (a chunk, moved to whoever writes it).
    async fn write(&mut self, bytes: Vec<u8>) -> Result<(), Status> {
        let Some(mut file) = self.file.take() else { return Err(Status::internal("the snapshot spool is closed")) };
        let length = bytes.len() as u64;
        let written = self
            .threading
            .run(move || {
                let written = file.write_all(&bytes);
                (file, written)
            })
            .await
            .map_err(|e| self.failed("write", &std::io::Error::other(e.to_string())))?;
        let (file, written) = written;
        self.file = Some(file);
        written.map_err(|e| self.failed("write", &e))?;
        self.written += length;
        Ok(())
    }

    /// The complete spool file as a snapshot for `install_full_snapshot`,
    /// which owns it from here on (and removes it unless it is stored).
    async fn finish(mut self) -> Result<SnapshotFile, Status> {
        if let Some(file) = self.file.take() {
            let synced = self.threading.run(move || file.sync_all()).await;
            synced
                .map_err(|e| std::io::Error::other(e.to_string()))
                .and_then(|synced| synced)
                .map_err(|e| self.failed("fsync", &e))?;
        }
        let path = std::mem::take(&mut self.path);
        SnapshotFile::owning(path.clone()).map_err(|e| {
            let _ = std::fs::remove_file(&path);
            Status::internal(format!("cannot reopen the snapshot spool file {}: {e}", path.display()))
        })
    }

    fn failed(&self, what: &str, e: &std::io::Error) -> Status {
        Status::internal(format!("cannot {what} the snapshot spool file {}: {e}", self.path.display()))
    }
}

impl Drop for Spool {
    fn drop(&mut self) {
        // Best effort: a leftover file is removed on the next start.
        if !self.path.as_os_str().is_empty() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

fn decode<T: DeserializeOwned>(bytes: &[u8], what: &str) -> Result<T, Status> {
    bincode::deserialize(bytes).map_err(|e| Status::invalid_argument(format!("cannot decode {what}: {e}")))
}

fn encode<T: Serialize>(value: &T) -> Result<Response<RaftBytes>, Status> {
    let payload = bincode::serialize(value).map_err(|e| Status::internal(format!("cannot encode the answer: {e}")))?;
    Ok(Response::new(RaftBytes { payload }))
}

/// A stopped Raft answers `UNAVAILABLE`, which the calling peer treats as
/// unreachable and backs off from.
fn stopped(e: impl std::fmt::Display) -> Status {
    Status::unavailable(format!("raft is not running on this node: {e}"))
}

fn raft_failure(e: RaftError<TypeConfig>) -> Status {
    match e {
        RaftError::Fatal(fatal) => stopped(fatal),
        RaftError::APIError(never) => match never {},
    }
}

#[tonic::async_trait]
impl RaftService for RaftGrpcService {
    async fn append_entries(&self, request: Request<RaftBytes>) -> Result<Response<RaftBytes>, Status> {
        let rpc: AppendEntriesRequest<TypeConfig> = decode(&request.into_inner().payload, "append-entries")?;
        let response = self.raft.append_entries(rpc).await.map_err(raft_failure)?;
        encode(&response)
    }

    type StreamAppendStream = crate::append_stream::Answers;

    async fn stream_append(
        &self,
        request: Request<Streaming<RaftBytes>>,
    ) -> Result<Response<Self::StreamAppendStream>, Status> {
        Ok(Response::new(crate::append_stream::serve(&self.raft, request.into_inner())))
    }

    async fn vote(&self, request: Request<RaftBytes>) -> Result<Response<RaftBytes>, Status> {
        let rpc: VoteRequest<TypeConfig> = decode(&request.into_inner().payload, "vote")?;
        let response = self.raft.vote(rpc).await.map_err(raft_failure)?;
        encode(&response)
    }

    async fn pre_vote(&self, request: Request<RaftBytes>) -> Result<Response<RaftBytes>, Status> {
        let rpc: VoteRequest<TypeConfig> = decode(&request.into_inner().payload, "pre-vote")?;
        let response = self.raft.pre_vote(rpc).await.map_err(raft_failure)?;
        encode(&response)
    }

    async fn transfer_leader(&self, request: Request<RaftBytes>) -> Result<Response<RaftBytes>, Status> {
        let rpc: TransferLeaderRequest<TypeConfig> = decode(&request.into_inner().payload, "transfer-leader")?;
        let response = self.raft.handle_transfer_leader(rpc).await.map_err(stopped)?;
        encode(&response)
    }

    async fn install_snapshot(
        &self,
        request: Request<Streaming<SnapshotChunk>>,
    ) -> Result<Response<RaftBytes>, Status> {
        let mut chunks = request.into_inner();
        let header = match chunks.message().await? {
            Some(SnapshotChunk { kind: Some(snapshot_chunk::Kind::Header(header)) }) => header,
            _ => return Err(Status::invalid_argument("a snapshot stream must start with its header")),
        };
        // Checked before anything is created: a forged header must cost nothing.
        if header.total_bytes > SNAPSHOT_BYTES_MAX {
            return Err(Status::resource_exhausted(format!(
                "a snapshot of {} bytes is over this node's limit of {SNAPSHOT_BYTES_MAX} bytes",
                header.total_bytes
            )));
        }
        let total_bytes = header.total_bytes;
        let (vote, meta): SnapshotHeaderBody = decode(&header.vote_and_meta, "snapshot header")?;
        let mut spool = Spool::create(&self.incoming_dir, self.threading).await?;
        while let Some(chunk) = chunks.message().await? {
            match chunk.kind {
                Some(snapshot_chunk::Kind::Data(bytes)) => {
                    if spool.written + bytes.len() as u64 > total_bytes {
                        return Err(Status::invalid_argument("snapshot stream carries more bytes than announced"));
                    }
                    spool.write(bytes).await?;
                }
                _ => return Err(Status::invalid_argument("only data chunks may follow the snapshot header")),
            }
        }
        // Never install a partial snapshot.
        if spool.written != total_bytes {
            return Err(Status::invalid_argument(format!(
                "snapshot stream ended after {} of {} bytes",
                spool.written, total_bytes
            )));
        }
        let snapshot = Snapshot { meta, snapshot: SnapshotData::File(spool.finish().await?) };
        let _announced = self.install_fence.begin();
        let response = self.raft.install_full_snapshot(vote, snapshot).await.map_err(stopped)?;
        encode(&response)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use futures::{stream, StreamExt};
    use tokio::net::TcpListener;
    use tonic::transport::server::TcpIncoming;
    use tonic::transport::Server;

    use crate::limits::{APPEND_ENTRIES_BYTES_MAX, SNAPSHOT_BYTES_MAX};
    use crate::pb::raft_service_client::RaftServiceClient;
    use crate::pb::{snapshot_chunk, RaftBytes, SnapshotChunk, SnapshotHeader};
    use crate::typ::{SnapshotMeta, Vote};
    use crate::{Application, NodeConfig, RaftNode, RaftTimings};

    struct Inert;

    impl Application for Inert {
        fn apply(&self, _: u64, _: &[u8]) -> Vec<u8> {
            Vec::new()
        }
        fn snapshot(&self) -> Vec<u8> {
            Vec::new()
        }
        fn restore(&self, _: &[u8]) -> Result<(), String> {
            panic!("a refused snapshot must never reach the application")
        }
    }

    fn header(total_bytes: u64) -> SnapshotChunk {
        let body = (Vote::new(1, 1), SnapshotMeta::default());
        SnapshotChunk {
            kind: Some(snapshot_chunk::Kind::Header(SnapshotHeader {
                vote_and_meta: bincode::serialize(&body).expect("encode header"),
                total_bytes,
            })),
        }
    }

    fn data(bytes: &[u8]) -> SnapshotChunk {
        SnapshotChunk { kind: Some(snapshot_chunk::Kind::Data(bytes.to_vec())) }
    }

    /// A fresh node with an application that must never be restored,
    /// serving its Raft service on loopback, and a client of it.
    async fn serve_inert_node() -> (
        tempfile::TempDir,
        RaftNode,
        tokio::task::JoinHandle<Result<(), tonic::transport::Error>>,
        RaftServiceClient<tonic::transport::Channel>,
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let config = NodeConfig {
            node_id: 1,
            addr: addr.clone(),
            data_dir: dir.path().to_path_buf(),
            timings: RaftTimings::default(),
            #[cfg(feature = "mutants")]
            planted: Default::default(),
            peer_tls: None,
        };
        let node = RaftNode::start(config, Arc::new(Inert)).await.expect("start");
        let server = tokio::spawn(
            Server::builder()
                .add_service(node.service())
                .serve_with_incoming(TcpIncoming::from(listener).with_nodelay(Some(true))),
        );
        let client = RaftServiceClient::connect(format!("http://{addr}")).await.expect("connect");
        (dir, node, server, client)
    }

    #[tokio::test]
    async fn malformed_or_truncated_snapshot_streams_are_refused_before_install() {
        let (dir, node, server, mut client) = serve_inert_node().await;

        let cases = [
            ("no header", vec![data(b"abc")], tonic::Code::InvalidArgument),
            ("empty stream", vec![], tonic::Code::InvalidArgument),
            ("truncated", vec![header(10), data(b"12345")], tonic::Code::InvalidArgument),
            ("too long", vec![header(3), data(b"12345")], tonic::Code::InvalidArgument),
            ("second header", vec![header(3), header(3)], tonic::Code::InvalidArgument),
            // Would abort the process if the receiver allocated what it announces.
            ("2^62 bytes announced", vec![header(1 << 62), data(b"12345")], tonic::Code::ResourceExhausted),
            ("just over the limit", vec![header(SNAPSHOT_BYTES_MAX + 1)], tonic::Code::ResourceExhausted),
        ];
        for (case, messages, code) in cases {
            let status = tokio::time::timeout(Duration::from_secs(10), client.install_snapshot(stream::iter(messages)))
                .await
                .expect("answered in time")
                .expect_err(case);
            assert_eq!(status.code(), code, "{case}: {status:?}");
        }
        let spooled = std::fs::read_dir(crate::service::incoming_dir(dir.path())).expect("spool dir").count();
        assert_eq!(spooled, 0, "refused transfers leave no spool file behind");
        node.shutdown().await.expect("shutdown");
        server.abort();
    }

    #[tokio::test]
    async fn an_append_entries_message_over_the_limit_is_refused_before_it_is_decoded() {
        let (_dir, node, server, mut client) = serve_inert_node().await;
        // Zeros would decode as garbage anyway; the point is that the size
        // alone is refused (OUT_OF_RANGE, which a leader answers by halving).
        let oversized = RaftBytes { payload: vec![0; APPEND_ENTRIES_BYTES_MAX + 1] };
        let status = tokio::time::timeout(Duration::from_secs(30), client.append_entries(oversized))
            .await
            .expect("answered in time")
            .expect_err("refused");
        assert_eq!(status.code(), tonic::Code::OutOfRange, "{status:?}");
        assert!(status.message().contains("too large"), "{status:?}");
        // The node keeps serving peers: a small (undecodable) message is
        // refused for its content, not its size.
        let status = client.append_entries(RaftBytes { payload: vec![0xff; 16] }).await.expect_err("garbage");
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
        node.shutdown().await.expect("shutdown");
        server.abort();
    }

    /// A streamed message the node cannot decode, or one over the limit,
    /// is the stream's last answer, as a refusal; the node serves on.
    #[tokio::test]
    async fn an_undecodable_or_oversized_streamed_append_ends_its_stream_with_a_refusal() {
        let (_dir, node, server, mut client) = serve_inert_node().await;
        for (case, payload, code) in [
            ("garbage", vec![0xff; 16], tonic::Code::InvalidArgument),
            ("over the limit", vec![0; APPEND_ENTRIES_BYTES_MAX + 1], tonic::Code::OutOfRange),
        ] {
            let messages = stream::iter([RaftBytes { payload }]).chain(stream::pending());
            let mut answers = tokio::time::timeout(Duration::from_secs(30), client.stream_append(messages))
                .await
                .expect("opened in time")
                .expect("the stream opens")
                .into_inner();
            let status = tokio::time::timeout(Duration::from_secs(30), answers.message())
                .await
                .expect("answered in time")
                .expect_err(case);
            assert_eq!(status.code(), code, "{case}: {status:?}");
        }
        node.shutdown().await.expect("shutdown");
        server.abort();
    }
}
