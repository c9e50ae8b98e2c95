//! The server side of the Raft transport: hands peer RPCs to the local openraft.

use openraft::error::RaftError;
use openraft::raft::{AppendEntriesRequest, VoteRequest};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tonic::{Request, Response, Status, Streaming};

use crate::network::SnapshotHeaderBody;
use crate::pb::raft_service_server::RaftService;
use crate::pb::{snapshot_chunk, RaftBytes, SnapshotChunk};
use crate::typ::{NodeId, Raft, Snapshot, TypeConfig};

/// The internal Raft gRPC service of one node. Obtain it with
/// [`crate::RaftNode::service`] and mount it on the node's tonic server.
#[derive(Clone)]
pub struct RaftGrpcService {
    raft: Raft,
}

impl RaftGrpcService {
    pub(crate) fn new(raft: Raft) -> Self {
        Self { raft }
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

fn raft_failure(e: RaftError<NodeId>) -> Status {
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

    async fn vote(&self, request: Request<RaftBytes>) -> Result<Response<RaftBytes>, Status> {
        let rpc: VoteRequest<NodeId> = decode(&request.into_inner().payload, "vote")?;
        let response = self.raft.vote(rpc).await.map_err(raft_failure)?;
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
        let (vote, meta): SnapshotHeaderBody = decode(&header.vote_and_meta, "snapshot header")?;
        let total_bytes = usize::try_from(header.total_bytes)
            .map_err(|_| Status::invalid_argument("snapshot too large for this node"))?;
        let mut data = Vec::with_capacity(total_bytes);
        while let Some(chunk) = chunks.message().await? {
            match chunk.kind {
                Some(snapshot_chunk::Kind::Data(bytes)) => {
                    if data.len() + bytes.len() > total_bytes {
                        return Err(Status::invalid_argument("snapshot stream carries more bytes than announced"));
                    }
                    data.extend_from_slice(&bytes);
                }
                _ => return Err(Status::invalid_argument("only data chunks may follow the snapshot header")),
            }
        }
        // Never install a partial snapshot.
        if data.len() != total_bytes {
            return Err(Status::invalid_argument(format!(
                "snapshot stream ended after {} of {} bytes",
                data.len(),
                total_bytes
            )));
        }
        let snapshot = Snapshot { meta, snapshot: Box::new(data) };
        let response = self.raft.install_full_snapshot(vote, snapshot).await.map_err(stopped)?;
        encode(&response)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use futures::stream;
    use tokio::net::TcpListener;
    use tonic::transport::server::TcpIncoming;
    use tonic::transport::Server;

    use crate::pb::raft_service_client::RaftServiceClient;
    use crate::pb::{snapshot_chunk, SnapshotChunk, SnapshotHeader};
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

    #[tokio::test]
    async fn malformed_or_truncated_snapshot_streams_are_refused_before_install() {
        let dir = tempfile::tempdir().expect("tempdir");
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let node = RaftNode::start(
            NodeConfig {
                node_id: 1,
                addr: addr.clone(),
                data_dir: dir.path().to_path_buf(),
                timings: RaftTimings::default(),
                plant_early_ack: false,
            },
            Arc::new(Inert),
        )
        .await
        .expect("start");
        let server = tokio::spawn(
            Server::builder()
                .add_service(node.service())
                .serve_with_incoming(TcpIncoming::from(listener).with_nodelay(Some(true))),
        );
        let mut client = RaftServiceClient::connect(format!("http://{addr}")).await.expect("connect");

        let cases = [
            ("no header", vec![data(b"abc")]),
            ("empty stream", vec![]),
            ("truncated", vec![header(10), data(b"12345")]),
            ("too long", vec![header(3), data(b"12345")]),
            ("second header", vec![header(3), header(3)]),
        ];
        for (case, messages) in cases {
            let status = tokio::time::timeout(Duration::from_secs(10), client.install_snapshot(stream::iter(messages)))
                .await
                .expect("answered in time")
                .expect_err(case);
            assert_eq!(status.code(), tonic::Code::InvalidArgument, "{case}: {status:?}");
        }
        node.shutdown().await.expect("shutdown");
        server.abort();
    }
}
