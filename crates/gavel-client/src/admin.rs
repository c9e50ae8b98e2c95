//! Cluster administration through [`Client`]: backups, and adding a node
//! that waits until it has caught up. Both need the `admin` grant.

use std::time::Duration;

use gavel_proto::v1 as pb;
use gavel_proto::v1::cluster_service_client::ClusterServiceClient;

use crate::client::Client;
use crate::error::Error;

/// How long the leader may take to build the snapshot a backup starts
/// with, beyond the call timeout, before the attempt is retried: a
/// snapshot of a large state takes seconds to serialize and fsync.
pub const BACKUP_TAKE_WAIT: Duration = Duration::from_secs(120);

/// How long a backup stream may go without a message before it is given up.
pub const BACKUP_CHUNK_TIMEOUT: Duration = Duration::from_secs(30);

/// How long adding a node may wait for it to catch up, beyond the call
/// timeout (the leader waits up to a minute, then answers `UNAVAILABLE`).
pub const ADD_NODE_WAIT: Duration = Duration::from_secs(65);

/// A backup being received: its header, then its body chunk by chunk.
pub struct BackupDownload {
    header: pb::BackupHeader,
    stream: tonic::Streaming<pb::BackupChunk>,
    received_bytes: u64,
}

impl std::fmt::Debug for BackupDownload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackupDownload")
            .field("header", &self.header)
            .field("received_bytes", &self.received_bytes)
            .finish_non_exhaustive()
    }
}

impl BackupDownload {
    /// What the backup stands for: applied index and term, state hash,
    /// body length and SHA-256, membership.
    pub fn header(&self) -> &pb::BackupHeader {
        &self.header
    }

    /// The next chunk of the body, `None` once all of `header().body_bytes`
    /// arrived. Fails when the stream breaks or goes quiet for
    /// [`BACKUP_CHUNK_TIMEOUT`], ends early, or sends more than announced.
    pub async fn next_chunk(&mut self) -> Result<Option<Vec<u8>>, Error> {
        let expected = self.header.body_bytes;
        let message = tokio::time::timeout(BACKUP_CHUNK_TIMEOUT, self.stream.message())
            .await
            .map_err(|_| Error::Unavailable(format!("the backup stream sent nothing for {BACKUP_CHUNK_TIMEOUT:?}")))?
            .map_err(|status| Error::from_status(&status))?;
        match message.and_then(|chunk| chunk.part) {
            None if self.received_bytes == expected => Ok(None),
            None => Err(Error::Unavailable(format!(
                "the backup stream ended after {} of {expected} bytes",
                self.received_bytes
            ))),
            Some(pb::backup_chunk::Part::Data(data)) => {
                self.received_bytes += data.len() as u64;
                if self.received_bytes > expected {
                    return Err(Error::Unavailable(format!(
                        "the backup stream sent more than the {expected} bytes its header announced"
                    )));
                }
                Ok(Some(data))
            }
            Some(pb::backup_chunk::Part::Header(_)) => {
                Err(Error::Unavailable("the backup stream sent a second header".to_string()))
            }
        }
    }
}

impl Client {
    /// Starts a backup on the leader (admin only) and returns once its
    /// header arrived; read the body with [`BackupDownload::next_chunk`].
    /// Until the header arrives, the call follows the leader and retries
    /// like any other; a break later fails the download (start it again).
    pub async fn backup(&self) -> Result<BackupDownload, Error> {
        let (header, stream) = self
            .call(BACKUP_TAKE_WAIT, |channel, timeout| async move {
                let mut request = tonic::Request::new(pb::BackupRequest {});
                request.set_timeout(timeout);
                let (metadata, mut stream, extensions) =
                    ClusterServiceClient::new(channel).backup(request).await?.into_parts();
                match stream.message().await? {
                    Some(pb::BackupChunk { part: Some(pb::backup_chunk::Part::Header(header)) }) => {
                        Ok(tonic::Response::from_parts(metadata, (header, stream), extensions))
                    }
                    _ => Err(tonic::Status::internal("the backup stream did not start with its header")),
                }
            })
            .await?;
        Ok(BackupDownload { header, stream, received_bytes: 0 })
    }

    /// Adds `node_id` at `addr` as a learner and returns once it has caught
    /// up with the leader (`AddLearner` with `wait_caught_up`), with the
    /// status after the change.
    pub async fn add_node(&self, node_id: u64, addr: &str) -> Result<pb::StatusResponse, Error> {
        let request = pb::AddLearnerRequest {
            request_id: crate::client::new_request_id(),
            node_id,
            addr: addr.to_string(),
            wait_caught_up: true,
        };
        self.call(ADD_NODE_WAIT, move |channel, timeout| {
            let mut request = tonic::Request::new(request.clone());
            request.set_timeout(timeout);
            async move { ClusterServiceClient::new(channel).add_learner(request).await }
        })
        .await
    }
}
