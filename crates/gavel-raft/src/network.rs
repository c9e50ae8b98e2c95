//! The client side of the Raft transport: openraft's `RaftNetworkV2` over tonic.
//!
//! - Peers are dialled over mutual TLS when the node has TLS material
//!   ([`crate::PeerTls`]): the peer proves it holds a cluster certificate for
//!   the host dialled, and this node presents its node certificate.
//! - One lazily connected tonic `Channel` per peer address, cached in the
//!   factory and shared by every client openraft creates (openraft asks for a
//!   new client per replication stream, per election and per read-index
//!   round).
//! - Each RPC has a deadline: `rpc_timeout_ms`, but never more than the
//!   deadline openraft itself enforces around the call.
//! - A peer that cannot be connected to is reported as `Unreachable`, which
//!   makes openraft back off exponentially ([`PeerClient::backoff`]) instead of
//!   dialing a dead peer on every heartbeat.
//! - A slow or oversized append-entries batch makes the client send at most
//!   half as many entries next time (answering openraft with a partial
//!   success for the prefix it sent), instead of retrying the same batch
//!   forever; each success doubles the limit back.
//! - Append-entries travel over one stream per replication session,
//!   pipelined ([`open_stream`]; the server half is in `append_stream.rs`);
//!   after a batch that timed out or was too large, and towards a peer
//!   without that RPC, as unary calls.
//! - Pre-vote and leader transfer have RPCs of their own (`PreVote`,
//!   `TransferLeader`): openraft's defaults would grant every pre-vote and
//!   drop every transfer.

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{stream, Stream, StreamExt};
use openraft::base::{BoxFuture, BoxStream};
use openraft::errors::{NetworkError, RPCError, ReplicationClosed, StreamingError, Timeout, Unreachable};
use openraft::network::{stream_append_sequential, Backoff, RPCOption, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, StreamAppendResult, TransferLeaderRequest,
    TransferLeaderResponse, VoteRequest, VoteResponse,
};
use openraft::{RPCTypes, RaftNetworkV2};
use tokio::sync::Notify;
use tokio::time::Instant;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};
use tonic::{Code, Streaming};

use crate::io::RaftIo;
use crate::limits::{
    APPEND_ENTRIES_BYTES_MAX, PEER_KEEPALIVE_INTERVAL, PEER_KEEPALIVE_TIMEOUT, SNAPSHOT_CHUNK_BYTES,
    UNREACHABLE_BACKOFF_MAX,
};
use crate::pb::raft_service_client::RaftServiceClient;
use crate::pb::{snapshot_chunk, RaftBytes, SnapshotChunk, SnapshotHeader};
use crate::storage::wal::Threading;
use crate::storage::Snapshot;
use crate::storage::{SnapshotData, SnapshotFile};
use crate::typ::{Node, NodeId, SnapshotMeta, TypeConfig, Vote};
use crate::RaftTimings;

/// The header of a snapshot stream, bincode-encoded in `SnapshotHeader.vote_and_meta`.
pub(crate) type SnapshotHeaderBody = (Vote, SnapshotMeta);

/// Builds per-peer clients for openraft, reusing one channel per peer.
#[derive(Clone)]
pub(crate) struct NetworkFactory {
    node_id: NodeId,
    timings: RaftTimings,
    /// Mutual TLS towards peers; `None` dials in plaintext.
    tls: Option<ClientTlsConfig>,
    /// Ordered by node: when the node stops, its peer connections close in
    /// node order, so a simulated run sends their FINs in the same order
    /// every time (with a `HashMap` the order was the process's hash seed's,
    /// and a seed gave two traces: docs/testing.md).
    channels: Arc<Mutex<BTreeMap<NodeId, (String, Channel)>>>,
    /// How a channel connects, and where blocking work runs ([`RaftIo`]).
    io: RaftIo,
}

impl NetworkFactory {
    pub(crate) fn new(node_id: NodeId, timings: RaftTimings, tls: Option<ClientTlsConfig>) -> Self {
        Self { node_id, timings, tls, channels: Arc::default(), io: RaftIo::default() }
    }

    /// The same factory, dialling and blocking as `io` says.
    pub(crate) fn with_io(self, io: RaftIo) -> Self {
        Self { io, ..self }
    }

    /// The cached channel to `target` at `addr`, or a new lazily connected one
    /// if the peer is new or moved.
    fn channel(&self, target: NodeId, addr: &str) -> Result<Channel, String> {
        let mut channels = self.channels.lock().map_err(|_| "peer channel cache poisoned".to_string())?;
        if let Some((cached_addr, channel)) = channels.get(&target) {
            if cached_addr == addr {
                return Ok(channel.clone());
            }
        }
        let rpc_timeout = Duration::from_millis(self.timings.rpc_timeout_ms);
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let mut endpoint = Endpoint::from_shared(format!("{scheme}://{addr}"))
            .map_err(|e| format!("invalid peer address {addr:?}: {e}"))?;
        if let Some(tls) = &self.tls {
            // The peer's server certificate must chain to the cluster CA and
            // name the host dialled; ours identifies this node to it.
            endpoint = endpoint.tls_config(tls.clone()).map_err(|e| format!("peer TLS for {addr:?}: {e}"))?;
        }
        let endpoint = endpoint
            .connect_timeout(rpc_timeout)
            .http2_keep_alive_interval(PEER_KEEPALIVE_INTERVAL)
            .keep_alive_timeout(PEER_KEEPALIVE_TIMEOUT)
            .keep_alive_while_idle(true)
            .tcp_nodelay(true);
        let channel = self.io.channel(endpoint);
        channels.insert(target, (addr.to_string(), channel.clone()));
        Ok(channel)
    }
}

impl RaftNetworkFactory<TypeConfig> for NetworkFactory {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &Node) -> PeerClient {
        let client = self.channel(target, &node.addr).map(|channel| {
            RaftServiceClient::new(channel)
                .max_decoding_message_size(APPEND_ENTRIES_BYTES_MAX)
                .max_encoding_message_size(APPEND_ENTRIES_BYTES_MAX)
        });
        let threading = self.io.threading();
        PeerClient {
            node_id: self.node_id,
            target,
            client,
            timings: self.timings.clone(),
            threading,
            entries_max: None,
            streaming: true,
        }
    }
}

/// openraft's view of one peer.
pub(crate) struct PeerClient {
    node_id: NodeId,
    target: NodeId,
    /// `Err` if the peer's address cannot even be parsed: every RPC then
    /// fails as unreachable (and backs off) until the membership fixes it.
    client: Result<RaftServiceClient<Channel>, String>,
    timings: RaftTimings,
    /// Where the blocking reads of a snapshot being sent run.
    threading: Threading,
    /// The most entries one append-entries call sends, after a batch timed
    /// out or was too large; `None`: no limit. While it is set, appends are
    /// unary calls.
    pub(crate) entries_max: Option<usize>,
    /// Appends go over `StreamAppend`; false once the peer answered that it
    /// has no such RPC.
    pub(crate) streaming: bool,
}

/// A limit of entries per call that has doubled back to this many is
/// lifted: openraft's own batches are at most this long (its
/// `max_payload_entries` default, which Gavel keeps).
const ENTRIES_PER_BATCH: usize = 300;

/// How one RPC failed, before it is mapped to the error type of its call.
enum CallFailure {
    /// Could not connect (or the peer's Raft is stopped): back off.
    Unreachable(String),
    /// No answer within the deadline.
    Timeout(Duration),
    /// The message was too large for the peer.
    TooLarge(String),
    /// Anything else: retry at once.
    Network(String),
}

impl CallFailure {
    fn from_status(status: tonic::Status, deadline: Duration) -> Self {
        let message = format!("{}: {}", status.code(), status.message());
        match status.code() {
            Code::Unavailable => CallFailure::Unreachable(message),
            Code::DeadlineExceeded | Code::Cancelled => CallFailure::Timeout(deadline),
            Code::ResourceExhausted | Code::OutOfRange => CallFailure::TooLarge(message),
            _ => CallFailure::Network(message),
        }
    }
}

/// A plain error carrying a message, for openraft's error wrappers.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct TransportError(String);

impl PeerClient {
    fn client(&self) -> Result<RaftServiceClient<Channel>, CallFailure> {
        self.client.clone().map_err(CallFailure::Unreachable)
    }

    /// The deadline of one RPC: the configured one, capped by openraft's.
    fn deadline(&self, option: &RPCOption) -> Duration {
        Duration::from_millis(self.timings.rpc_timeout_ms).min(option.hard_ttl())
    }

    fn timeout_error(&self, action: RPCTypes, timeout: Duration) -> Timeout<TypeConfig> {
        Timeout { action, id: self.node_id, target: self.target, timeout }
    }

    /// After `failure` of a call of `entries` entries: a batch too slow or
    /// too large is sent in halves from now on (unary, partial successes).
    fn halve_after(&mut self, failure: &CallFailure, entries: usize) {
        if matches!(failure, CallFailure::Timeout(_) | CallFailure::TooLarge(_)) && entries > 1 {
            self.entries_max = Some(entries / 2);
        }
    }

    fn rpc_error(&self, failure: CallFailure, action: RPCTypes) -> RPCError<TypeConfig> {
        match failure {
            CallFailure::Unreachable(m) => RPCError::Unreachable(Unreachable::new(&TransportError(m))),
            CallFailure::Timeout(after) => RPCError::Timeout(self.timeout_error(action, after)),
            CallFailure::TooLarge(m) | CallFailure::Network(m) => {
                RPCError::Network(NetworkError::new(&TransportError(m)))
            }
        }
    }

    /// Sends one unary RPC with a deadline and decodes the bincode answer.
    async fn unary<Req, Resp, F, Fut>(&self, request: &Req, deadline: Duration, call: F) -> Result<Resp, CallFailure>
    where
        Req: serde::Serialize,
        Resp: serde::de::DeserializeOwned,
        F: FnOnce(RaftServiceClient<Channel>, tonic::Request<RaftBytes>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<RaftBytes>, tonic::Status>>,
    {
        let payload =
            bincode::serialize(request).map_err(|e| CallFailure::Network(format!("cannot encode request: {e}")))?;
        let mut grpc_request = tonic::Request::new(RaftBytes { payload });
        grpc_request.set_timeout(deadline);
        let response = match tokio::time::timeout(deadline, call(self.client()?, grpc_request)).await {
            Err(_elapsed) => return Err(CallFailure::Timeout(deadline)),
            Ok(Err(status)) => return Err(CallFailure::from_status(status, deadline)),
            Ok(Ok(response)) => response.into_inner(),
        };
        bincode::deserialize(&response.payload)
            .map_err(|e| CallFailure::Network(format!("cannot decode the peer's answer: {e}")))
    }
}

/// A session's result stream, as openraft takes it.
type Results<'s> =
    Pin<Box<dyn Stream<Item = Result<StreamAppendResult<TypeConfig>, RPCError<TypeConfig>>> + Send + 's>>;

/// What the sending half tells the receiving half of one session.
#[derive(Default)]
struct InFlight {
    /// When each unanswered request was sent, and its entry count, oldest
    /// first.
    sent: Mutex<VecDeque<(Instant, usize)>>,
    /// Signalled when a request is sent, so an idle receiver arms the
    /// deadline of the new one.
    more: Notify,
    /// A request that could not be encoded: the sending half ended there.
    unsent: Mutex<Option<String>>,
}

impl InFlight {
    fn sent(&self) -> std::sync::MutexGuard<'_, VecDeque<(Instant, usize)>> {
        self.sent.lock().expect("the in-flight queue's lock is never held across a panic")
    }
}

/// The client half: opens the stream to the peer and returns the results
/// of the requests `input` yields, in order.
async fn open_stream<'s, S>(
    peer: &'s mut PeerClient,
    mut input: S,
    deadline: Duration,
) -> Result<Results<'s>, RPCError<TypeConfig>>
where
    S: Stream<Item = AppendEntriesRequest<TypeConfig>> + Send + Unpin + 'static,
{
    // The first request is taken before the stream opens: openraft's
    // backoff towards a failing peer is a sleep in the request stream, so a
    // session that failed to open would otherwise open the next at once.
    let Some(first) = input.next().await else { return Ok(Box::pin(stream::empty())) };
    let input = stream::once(std::future::ready(first)).chain(input);
    let mut client = peer.client().map_err(|failure| peer.rpc_error(failure, RPCTypes::AppendEntries))?;
    let flight = Arc::new(InFlight::default());
    // openraft's request stream shares its state with the next session's:
    // it must stop when this session's results are dropped, not when the
    // transport gets round to dropping the request body (until then it would
    // take the next session's entries).
    let (session, ended) = futures::channel::oneshot::channel::<()>();
    let requests = stream::unfold((input, flight.clone()), |(mut input, flight)| async move {
        let request = input.next().await?;
        let entries = request.entries.len();
        match bincode::serialize(&request) {
            Ok(payload) => {
                flight.sent().push_back((Instant::now(), entries));
                flight.more.notify_one();
                Some((RaftBytes { payload }, (input, flight)))
            }
            Err(e) => {
                *flight.unsent.lock().expect("never poisoned") = Some(format!("cannot encode request: {e}"));
                None
            }
        }
    })
    .take_until(ended);
    // Only the opening has a deadline here: the stream lives as long as the
    // session, and each request's deadline is the receiver's to keep.
    let opened = tokio::time::timeout(deadline, client.stream_append(tonic::Request::new(requests))).await;
    let responses = match opened {
        Err(_elapsed) => return Err(peer.rpc_error(CallFailure::Timeout(deadline), RPCTypes::AppendEntries)),
        Ok(Err(status)) if status.code() == Code::Unimplemented => {
            tracing::info!(peer = peer.target, "the peer has no StreamAppend; sending unary appends");
            peer.streaming = false;
            return Err(peer.rpc_error(CallFailure::from_status(status, deadline), RPCTypes::AppendEntries));
        }
        Ok(Err(status)) => {
            return Err(peer.rpc_error(CallFailure::from_status(status, deadline), RPCTypes::AppendEntries))
        }
        Ok(Ok(response)) => response.into_inner(),
    };
    let receiver = Receiver { peer, responses, flight, deadline, ended: false, _session: session };
    Ok(Box::pin(stream::unfold(receiver, |mut receiver| async move {
        if receiver.ended {
            return None;
        }
        let item = receiver.next().await?;
        receiver.ended = item.is_err();
        Some((item, receiver))
    })))
}

/// The receiving half of one session.
struct Receiver<'s> {
    peer: &'s mut PeerClient,
    responses: Streaming<RaftBytes>,
    flight: Arc<InFlight>,
    deadline: Duration,
    /// An error was yielded: nothing follows it.
    ended: bool,
    /// Dropped with the results: ends the request stream at once.
    _session: futures::channel::oneshot::Sender<()>,
}

impl Receiver<'_> {
    /// The next result, an error that ends the session, or `None` when the
    /// peer closed the stream after the last answer.
    async fn next(&mut self) -> Option<Result<StreamAppendResult<TypeConfig>, RPCError<TypeConfig>>> {
        let message = loop {
            let oldest = self.flight.sent().front().copied();
            match oldest {
                Some((sent_at, entries)) => {
                    tokio::select! {
                        message = self.responses.message() => break message,
                        () = tokio::time::sleep_until(sent_at + self.deadline) => {
                            return Some(Err(self.failed(CallFailure::Timeout(self.deadline), entries)));
                        }
                    }
                }
                None => {
                    tokio::select! {
                        message = self.responses.message() => break message,
                        () = self.flight.more.notified() => continue,
                    }
                }
            }
        };
        let answered = self.flight.sent().pop_front();
        match message {
            Ok(Some(bytes)) if answered.is_some() => Some(
                bincode::deserialize::<StreamAppendResult<TypeConfig>>(&bytes.payload)
                    .map_err(|e| self.network(format!("cannot decode the peer's answer: {e}"))),
            ),
            Ok(Some(_)) => Some(Err(self.network("the peer answered a request that was not sent".into()))),
            Ok(None) => {
                let unsent = self.flight.unsent.lock().expect("never poisoned").take();
                unsent.map(|message| Err(self.network(message)))
            }
            Err(status) => {
                let entries = answered.map_or(0, |(_, entries)| entries);
                Some(Err(self.failed(CallFailure::from_status(status, self.deadline), entries)))
            }
        }
    }

    /// The session's error for `failure` of a request of `entries` entries;
    /// a batch too slow or too large is sent in halves from now on.
    fn failed(&mut self, failure: CallFailure, entries: usize) -> RPCError<TypeConfig> {
        self.peer.halve_after(&failure, entries);
        self.peer.rpc_error(failure, RPCTypes::AppendEntries)
    }

    /// The session's error for a broken exchange.
    fn network(&self, message: String) -> RPCError<TypeConfig> {
        self.peer.rpc_error(CallFailure::Network(message), RPCTypes::AppendEntries)
    }
}

impl RaftNetworkV2<TypeConfig> for PeerClient {
    type SnapshotData = SnapshotData;

    async fn append_entries(
        &mut self,
        mut rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        // After a batch timed out or did not fit, send only a prefix and
        // report it as a partial success: openraft sends the rest next.
        let limited = self.entries_max.is_some_and(|most| rpc.entries.len() > most);
        if let Some(most) = self.entries_max.filter(|_| limited) {
            rpc.entries.truncate(most);
        }
        let last_sent = rpc.entries.last().map(|entry| entry.log_id);
        let entries = rpc.entries.len();
        // openraft cancels the call after `hard_ttl` (the heartbeat
        // interval); give up at its soft deadline instead, so a timeout can
        // still be followed by a smaller batch.
        let deadline = self.deadline(&option).min(option.soft_ttl());
        let result =
            self.unary(&rpc, deadline, |mut client, request| async move { client.append_entries(request).await }).await;
        match result {
            Ok(response) => {
                // Each success lets the next batch be twice as large again,
                // up to a whole batch: then there is no limit.
                self.entries_max =
                    self.entries_max.and_then(|most| most.checked_mul(2)).filter(|&most| most < ENTRIES_PER_BATCH);
                Ok(match response {
                    AppendEntriesResponse::Success if limited => AppendEntriesResponse::PartialSuccess(last_sent),
                    other => other,
                })
            }
            Err(failure) => {
                // A batch whose transfer plus the follower's fsync exceeds
                // the deadline would otherwise be retried unchanged forever.
                self.halve_after(&failure, entries);
                Err(self.rpc_error(failure, RPCTypes::AppendEntries))
            }
        }
    }

    fn stream_append<'s, S>(
        &'s mut self,
        input: S,
        option: RPCOption,
    ) -> BoxFuture<
        's,
        Result<BoxStream<'s, Result<StreamAppendResult<TypeConfig>, RPCError<TypeConfig>>>, RPCError<TypeConfig>>,
    >
    where
        S: futures::Stream<Item = AppendEntriesRequest<TypeConfig>> + Send + Unpin + 'static,
    {
        if self.entries_max.is_some() || !self.streaming {
            return stream_append_sequential(self, input, option);
        }
        let deadline = self.deadline(&option).min(option.soft_ttl());
        Box::pin(open_stream(self, input, deadline))
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        let deadline = self.deadline(&option);
        self.unary(&rpc, deadline, |mut client, request| async move { client.vote(request).await })
            .await
            .map_err(|failure| self.rpc_error(failure, RPCTypes::Vote))
    }

    /// A peer that cannot be reached is an error, never a grant: otherwise a
    /// node cut off from everyone would grant itself a pre-vote quorum.
    async fn pre_vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        let deadline = self.deadline(&option);
        self.unary(&rpc, deadline, |mut client, request| async move { client.pre_vote(request).await })
            .await
            .map_err(|failure| self.rpc_error(failure, RPCTypes::Vote))
    }

    async fn transfer_leader(
        &mut self,
        request: TransferLeaderRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<TransferLeaderResponse<TypeConfig>, RPCError<TypeConfig>> {
        let deadline = self.deadline(&option);
        self.unary(&request, deadline, |mut client, request| async move { client.transfer_leader(request).await })
            .await
            .map_err(|failure| self.rpc_error(failure, RPCTypes::TransferLeader))
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot,
        cancel: impl Future<Output = ReplicationClosed> + Send + 'static,
        _option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        let deadline = Duration::from_millis(self.timings.snapshot_timeout_ms);
        let unreachable = |m: String| StreamingError::Unreachable(Unreachable::new(&TransportError(m)));
        let network = |m: String| StreamingError::Network(NetworkError::new(&TransportError(m)));

        let mut client = self.client().map_err(|_| unreachable(format!("no client for node {}", self.target)))?;
        // A view of the application's store is written to a file first
        // (removed when the transfer ends): the header gives the size.
        let (data, started) = (snapshot.snapshot, std::time::Instant::now());
        let threading = self.threading;
        let file = threading
            .run(move || data.into_file())
            .await
            .map_err(|e| network(format!("cannot write the snapshot to send: {e}")))?
            .map_err(|e| network(format!("cannot write the snapshot to send: {e}")))?;
        tracing::info!(
            peer = self.target,
            snapshot = %snapshot.meta,
            bytes = file.bytes(),
            took = ?started.elapsed(),
            "snapshot ready to send"
        );
        let file: Arc<SnapshotFile> = Arc::new(file);
        let header_body: SnapshotHeaderBody = (vote, snapshot.meta);
        let header = SnapshotChunk {
            kind: Some(snapshot_chunk::Kind::Header(SnapshotHeader {
                vote_and_meta: bincode::serialize(&header_body)
                    .map_err(|e| network(format!("cannot encode the snapshot header: {e}")))?,
                total_bytes: file.bytes(),
            })),
        };
        // A finite stream: the header, then each chunk exactly once, read
        // from the file when the transport asks for it, so one chunk is in
        // memory at a time whatever the snapshot's size. A read error ends
        // the stream early; the receiver refuses a short stream.
        let chunks = stream::unfold((file, 0u64), move |(file, offset)| async move {
            if offset >= file.bytes() {
                return None;
            }
            let reading = file.clone();
            let read = threading.run(move || reading.read_chunk(offset, SNAPSHOT_CHUNK_BYTES)).await;
            match read {
                Ok(Ok(chunk)) if !chunk.is_empty() => {
                    let next = offset + chunk.len() as u64;
                    Some((SnapshotChunk { kind: Some(snapshot_chunk::Kind::Data(chunk)) }, (file, next)))
                }
                failed => {
                    tracing::error!(?failed, offset, "cannot read the snapshot file being sent; ending the transfer");
                    None
                }
            }
        });
        let messages = stream::once(std::future::ready(header)).chain(chunks);
        let mut request = tonic::Request::new(messages);
        request.set_timeout(deadline);

        // The whole transfer, including the peer's install, has a deadline,
        // and stops at once if openraft cancels the replication stream.
        let call = tokio::time::timeout(deadline, client.install_snapshot(request));
        let response = tokio::select! {
            closed = cancel => return Err(StreamingError::Closed(closed)),
            result = call => result,
        };
        let response = match response {
            Err(_elapsed) => {
                return Err(StreamingError::Timeout(self.timeout_error(RPCTypes::InstallSnapshot, deadline)))
            }
            Ok(Err(status)) => {
                return Err(match CallFailure::from_status(status, deadline) {
                    CallFailure::Unreachable(m) => unreachable(m),
                    CallFailure::Timeout(after) => {
                        StreamingError::Timeout(self.timeout_error(RPCTypes::InstallSnapshot, after))
                    }
                    CallFailure::TooLarge(m) | CallFailure::Network(m) => network(m),
                })
            }
            Ok(Ok(response)) => response.into_inner(),
        };
        bincode::deserialize(&response.payload).map_err(|e| network(format!("cannot decode the peer's answer: {e}")))
    }

    fn backoff(&self) -> Option<Backoff> {
        // Exponential from one heartbeat up to a cap: a dead peer costs one
        // failed dial per backoff step, not one per heartbeat.
        let first = Duration::from_millis(self.timings.heartbeat_ms);
        Some(Backoff::new(
            std::iter::successors(Some(first), |previous| Some(previous.saturating_mul(2)))
                .map(|delay| delay.min(UNREACHABLE_BACKOFF_MAX)),
        ))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use openraft::BasicNode;

    use super::*;

    #[tokio::test]
    async fn a_peer_that_refuses_connections_is_reported_unreachable_so_openraft_backs_off() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        drop(listener);
        let mut factory = NetworkFactory::new(1, RaftTimings::default(), None);
        let mut client = factory.new_client(2, &BasicNode { addr }).await;
        let error = client
            .vote(VoteRequest::new(Vote::new(1, 1), None), RPCOption::new(Duration::from_secs(5)))
            .await
            .expect_err("nobody listens there");
        assert!(matches!(error, RPCError::Unreachable(_)), "{error:?}");
    }

    #[tokio::test]
    async fn a_pre_vote_to_a_peer_that_refuses_connections_is_unreachable_not_a_grant() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        drop(listener);
        let mut factory = NetworkFactory::new(1, RaftTimings::default(), None);
        let mut client = factory.new_client(2, &BasicNode { addr }).await;
        let error = client
            .pre_vote(VoteRequest::new(Vote::new(2, 1), None), RPCOption::new(Duration::from_secs(5)))
            .await
            .expect_err("nobody listens there");
        assert!(matches!(error, RPCError::Unreachable(_)), "{error:?}");
    }

    /// A peer that refuses any append-entries message of more than
    /// `entries_max` entries as too large, and accepts the others.
    struct SmallMessagesOnly {
        entries_max: usize,
        received: Arc<Mutex<Vec<usize>>>,
    }

    pub(crate) fn unused<T>() -> Result<tonic::Response<T>, tonic::Status> {
        Err(tonic::Status::unimplemented("not used by this test"))
    }

    #[tonic::async_trait]
    impl crate::pb::raft_service_server::RaftService for SmallMessagesOnly {
        async fn append_entries(
            &self,
            request: tonic::Request<RaftBytes>,
        ) -> Result<tonic::Response<RaftBytes>, tonic::Status> {
            let rpc: AppendEntriesRequest<TypeConfig> =
                bincode::deserialize(&request.into_inner().payload).expect("an append-entries request");
            self.received.lock().expect("lock").push(rpc.entries.len());
            if rpc.entries.len() > self.entries_max {
                return Err(tonic::Status::out_of_range("message too large"));
            }
            let answer: AppendEntriesResponse<TypeConfig> = AppendEntriesResponse::Success;
            Ok(tonic::Response::new(RaftBytes { payload: bincode::serialize(&answer).expect("encode") }))
        }
        type StreamAppendStream =
            std::pin::Pin<Box<dyn futures::Stream<Item = Result<RaftBytes, tonic::Status>> + Send + 'static>>;
        /// An older peer: appends are unary calls.
        async fn stream_append(
            &self,
            _: tonic::Request<tonic::Streaming<RaftBytes>>,
        ) -> Result<tonic::Response<Self::StreamAppendStream>, tonic::Status> {
            unused()
        }
        async fn vote(&self, _: tonic::Request<RaftBytes>) -> Result<tonic::Response<RaftBytes>, tonic::Status> {
            unused()
        }
        async fn pre_vote(&self, _: tonic::Request<RaftBytes>) -> Result<tonic::Response<RaftBytes>, tonic::Status> {
            unused()
        }
        async fn transfer_leader(
            &self,
            _: tonic::Request<RaftBytes>,
        ) -> Result<tonic::Response<RaftBytes>, tonic::Status> {
            unused()
        }
        async fn install_snapshot(
            &self,
            _: tonic::Request<tonic::Streaming<SnapshotChunk>>,
        ) -> Result<tonic::Response<RaftBytes>, tonic::Status> {
            unused()
        }
    }

    pub(crate) fn entries(indexes: std::ops::RangeInclusive<u64>) -> Vec<crate::typ::Entry> {
        let log_id = |index| crate::typ::LogId::new(crate::typ::LeaderId { term: 1, node_id: 1 }, index);
        indexes
            .map(|index| crate::typ::Entry { log_id: log_id(index), payload: openraft::EntryPayload::Blank })
            .collect()
    }

    pub(crate) fn append_request(indexes: std::ops::RangeInclusive<u64>) -> AppendEntriesRequest<TypeConfig> {
        let prev = (*indexes.start() > 1)
            .then(|| crate::typ::LogId::new(crate::typ::LeaderId { term: 1, node_id: 1 }, indexes.start() - 1));
        AppendEntriesRequest {
            vote: Vote::new_committed(1, 1),
            prev_log_id: prev,
            entries: entries(indexes),
            leader_commit: None,
        }
    }

    /// A client of a [`SmallMessagesOnly`] peer on loopback, what the peer
    /// received, and its server.
    async fn small_messages_peer(
        entries_max: usize,
    ) -> (PeerClient, Arc<Mutex<Vec<usize>>>, tokio::task::JoinHandle<Result<(), tonic::transport::Error>>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let received = Arc::new(Mutex::new(Vec::new()));
        let peer = SmallMessagesOnly { entries_max, received: received.clone() };
        let server = tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(crate::pb::raft_service_server::RaftServiceServer::new(peer))
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
        );
        let mut factory = NetworkFactory::new(1, RaftTimings::default(), None);
        (factory.new_client(2, &BasicNode { addr }).await, received, server)
    }

    /// openraft 0.10 has no `PayloadTooLarge`: a batch the peer refuses as too
    /// large makes the client send half as many entries, and a prefix that
    /// was accepted is reported as a partial success (openraft sends the rest).
    #[tokio::test]
    async fn a_batch_refused_as_too_large_is_sent_again_in_halves_as_partial_successes() {
        let (mut client, received, server) = small_messages_peer(3).await;
        let option = || RPCOption::new(Duration::from_secs(5));

        let error = client.append_entries(append_request(1..=8), option()).await.expect_err("too large");
        assert!(matches!(error, RPCError::Network(_)), "{error:?}");
        let error = client.append_entries(append_request(1..=8), option()).await.expect_err("still too large");
        assert!(matches!(error, RPCError::Network(_)), "{error:?}");
        let answer = client.append_entries(append_request(1..=8), option()).await.expect("two entries fit");
        let last_sent = Some(crate::typ::LogId::new(crate::typ::LeaderId { term: 1, node_id: 1 }, 2));
        assert_eq!(answer, AppendEntriesResponse::PartialSuccess(last_sent));
        // Accepted: the limit doubles back to four, which is still too many.
        let error = client.append_entries(append_request(3..=8), option()).await.expect_err("four is too many");
        assert!(matches!(error, RPCError::Network(_)), "{error:?}");
        let answer = client.append_entries(append_request(3..=4), option()).await.expect("a small batch is whole");
        assert_eq!(answer, AppendEntriesResponse::Success, "a batch within the limit is a plain success");
        assert_eq!(*received.lock().expect("lock"), vec![8, 4, 2, 4, 2]);
        server.abort();
    }

    /// A peer without `StreamAppend` (an older node) is sent the same
    /// requests as unary calls from the next session on.
    #[tokio::test]
    async fn a_peer_without_stream_append_is_sent_unary_appends() {
        let (mut client, received, server) = small_messages_peer(8).await;
        let option = || RPCOption::new(Duration::from_secs(5));

        let refused = client.stream_append(stream::iter([append_request(1..=2)]), option()).await.err();
        assert!(matches!(refused, Some(RPCError::Network(_))), "{refused:?}");
        assert!(!client.streaming, "the client stops asking for the stream");
        let results: Vec<_> = client
            .stream_append(stream::iter([append_request(1..=2), append_request(3..=3)]), option())
            .await
            .expect("unary appends")
            .collect()
            .await;
        let log_id = |index| crate::typ::LogId::new(crate::typ::LeaderId { term: 1, node_id: 1 }, index);
        let acked: Vec<_> = results.into_iter().map(|result| result.expect("sent").expect("accepted")).collect();
        assert_eq!(acked, vec![Some(log_id(2)), Some(log_id(3))]);
        assert_eq!(*received.lock().expect("lock"), vec![2, 1]);
        server.abort();
    }

    #[tokio::test]
    async fn clients_of_the_same_peer_share_one_channel_until_its_address_changes() {
        let factory = NetworkFactory::new(1, RaftTimings::default(), None);
        factory.channel(2, "127.0.0.1:1").expect("channel");
        factory.channel(2, "127.0.0.1:1").expect("channel");
        assert_eq!(factory.channels.lock().expect("lock")[&2].0, "127.0.0.1:1");
        factory.channel(2, "127.0.0.1:2").expect("channel");
        assert_eq!(factory.channels.lock().expect("lock")[&2].0, "127.0.0.1:2");
        assert!(factory.channel(3, "not a uri\n").is_err());
    }

    #[tokio::test]
    async fn backoff_towards_an_unreachable_peer_doubles_from_one_heartbeat_up_to_the_cap() {
        let mut factory = NetworkFactory::new(1, RaftTimings::default(), None);
        let client = factory.new_client(2, &BasicNode { addr: "127.0.0.1:1".into() }).await;
        let delays: Vec<u64> =
            client.backoff().expect("a backoff of its own").take(6).map(|d| d.as_millis() as u64).collect();
        assert_eq!(delays, vec![150, 300, 600, 1200, 2000, 2000]);
    }
}
