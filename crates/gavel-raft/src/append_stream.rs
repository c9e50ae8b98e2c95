//! Append-entries over one long-lived gRPC stream per replication session
//! (`RaftService.StreamAppend`): the server half here, the client half in
//! `network.rs` (`open_stream`, beside the peer client it belongs to).
//!
//! openraft 0.10 replicates through `stream_append`: a session's requests
//! come from one stream (the entries as they are appended, and the commit
//! index once it moves), and their results go back in order. Its default
//! sends each request as a unary call and waits for the answer before it
//! takes the next. Here the session is one HTTP/2 stream: no per-call task
//! on either side and no per-call trip through the channel's buffer, and the
//! leader sends the next request while the previous one is still being
//! written to the follower's disk (pipelining; the follower answers in order).
//!
//! - Every request has the same deadline as a unary append (the RPC timeout,
//!   capped by openraft's soft deadline), counted from when it was sent: the
//!   oldest unanswered request that passes it ends the session as a
//!   `Timeout`. An idle stream (nothing unanswered) has no deadline; a dead
//!   connection under it is found by the HTTP/2 keepalive.
//! - A batch that timed out or was refused as too large makes the client
//!   fall back to unary calls of at most half as many entries
//!   (`network::PeerClient::append_entries`), until the limit has doubled
//!   back to a whole batch.
//! - A peer without `StreamAppend` (an older node during a rolling upgrade)
//!   answers `UNIMPLEMENTED` once; that client then uses unary calls.

use std::pin::Pin;
use std::sync::{Arc, Mutex};

use futures::{stream, Stream, StreamExt};
use openraft::raft::AppendEntriesRequest;
use tonic::{Status, Streaming};

use crate::pb::RaftBytes;
use crate::storage::Raft;
use crate::typ::TypeConfig;

/// The server half's answer stream.
pub(crate) type Answers = Pin<Box<dyn Stream<Item = Result<RaftBytes, Status>> + Send + 'static>>;

/// The server half: hands the peer's requests to the local openraft as they
/// arrive and answers each, in order. A request that cannot be decoded, or a
/// broken stream, ends the input there and is the last answer, as a status.
pub(crate) fn serve(raft: &Raft, requests: Streaming<RaftBytes>) -> Answers {
    let broken: Arc<Mutex<Option<Status>>> = Arc::default();
    let input = {
        let broken = broken.clone();
        stream::unfold((requests, broken), |(mut requests, broken)| async move {
            let failure = match requests.message().await {
                Ok(Some(bytes)) => match bincode::deserialize::<AppendEntriesRequest<TypeConfig>>(&bytes.payload) {
                    Ok(request) => return Some((request, (requests, broken))),
                    Err(e) => Status::invalid_argument(format!("cannot decode append-entries: {e}")),
                },
                Ok(None) => return None,
                Err(status) => status,
            };
            *broken.lock().expect("never poisoned") = Some(failure);
            None
        })
    };
    let answers = raft.stream_append(Box::pin(input)).map(|result| match result {
        Ok(result) => bincode::serialize(&result)
            .map(|payload| RaftBytes { payload })
            .map_err(|e| Status::internal(format!("cannot encode the answer: {e}"))),
        Err(fatal) => Err(Status::unavailable(format!("raft is not running on this node: {fatal}"))),
    });
    let last = stream::once(async move { broken.lock().expect("never poisoned").take() })
        .filter_map(|broken| async { broken.map(Err) });
    Box::pin(answers.chain(last))
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use futures::channel::mpsc;
    use futures::{stream, StreamExt};
    use openraft::errors::RPCError;
    use openraft::network::{RPCOption, RaftNetworkFactory};
    use openraft::raft::{AppendEntriesRequest, StreamAppendResult};
    use openraft::{BasicNode, RaftNetworkV2};
    use tonic::{Request, Response, Status, Streaming};

    use crate::network::tests::{append_request, unused};
    use crate::network::NetworkFactory;
    use crate::pb::raft_service_server::{RaftService, RaftServiceServer};
    use crate::pb::{RaftBytes, SnapshotChunk};
    use crate::typ::TypeConfig;
    use crate::RaftTimings;

    /// A peer that records each streamed request's entry count and accepts
    /// it, or never answers at all.
    struct Streamer {
        silent: bool,
        received: Arc<Mutex<Vec<usize>>>,
    }

    #[tonic::async_trait]
    impl RaftService for Streamer {
        type StreamAppendStream = super::Answers;
        async fn stream_append(
            &self,
            request: Request<Streaming<RaftBytes>>,
        ) -> Result<Response<Self::StreamAppendStream>, Status> {
            let (received, silent) = (self.received.clone(), self.silent);
            let answers = request.into_inner().filter_map(move |message| {
                let received = received.clone();
                async move {
                    let request: AppendEntriesRequest<TypeConfig> =
                        bincode::deserialize(&message.expect("a message").payload).expect("a request");
                    received.lock().expect("lock").push(request.entries.len());
                    let answer: StreamAppendResult<TypeConfig> = Ok(request.entries.last().map(|entry| entry.log_id));
                    (!silent).then(|| Ok(RaftBytes { payload: bincode::serialize(&answer).expect("encode") }))
                }
            });
            Ok(Response::new(Box::pin(answers.chain(stream::pending()))))
        }
        async fn append_entries(&self, _: Request<RaftBytes>) -> Result<Response<RaftBytes>, Status> {
            unused()
        }
        async fn vote(&self, _: Request<RaftBytes>) -> Result<Response<RaftBytes>, Status> {
            unused()
        }
        async fn pre_vote(&self, _: Request<RaftBytes>) -> Result<Response<RaftBytes>, Status> {
            unused()
        }
        async fn transfer_leader(&self, _: Request<RaftBytes>) -> Result<Response<RaftBytes>, Status> {
            unused()
        }
        async fn install_snapshot(&self, _: Request<Streaming<SnapshotChunk>>) -> Result<Response<RaftBytes>, Status> {
            unused()
        }
    }

    async fn serve(silent: bool) -> (String, Arc<Mutex<Vec<usize>>>, tokio::task::JoinHandle<()>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let received = Arc::new(Mutex::new(Vec::new()));
        let peer = Streamer { silent, received: received.clone() };
        let server = tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(RaftServiceServer::new(peer))
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener))
                .await;
        });
        (addr, received, server)
    }

    fn log_id(index: u64) -> crate::typ::LogId {
        crate::typ::LogId::new(crate::typ::LeaderId { term: 1, node_id: 1 }, index)
    }

    /// Requests go out as they come, before the previous answer; answers
    /// come back in order; a stream with nothing unanswered waits past the
    /// deadline without an error.
    #[tokio::test]
    async fn streamed_requests_are_answered_in_order_and_an_idle_stream_has_no_deadline() {
        let (addr, received, server) = serve(false).await;
        let mut factory = NetworkFactory::new(1, RaftTimings::default(), None);
        let mut client = factory.new_client(2, &BasicNode { addr }).await;
        let (requests, input) = mpsc::unbounded();
        let deadline = Duration::from_millis(400);
        requests.unbounded_send(append_request(1..=2)).expect("send");
        requests.unbounded_send(append_request(3..=5)).expect("send");
        let mut results = client.stream_append(input, RPCOption::new(deadline)).await.expect("the stream opens");
        let first = results.next().await.expect("an answer").expect("no error");
        let second = results.next().await.expect("an answer").expect("no error");
        assert_eq!((first, second), (Ok(Some(log_id(2))), Ok(Some(log_id(5)))));
        // Idle for longer than a request may stay unanswered.
        tokio::time::sleep(deadline * 2).await;
        requests.unbounded_send(append_request(6..=6)).expect("send");
        let third = tokio::time::timeout(Duration::from_secs(10), results.next()).await.expect("answered");
        assert_eq!(third.expect("an answer").expect("no error"), Ok(Some(log_id(6))));
        assert_eq!(*received.lock().expect("lock"), vec![2, 3, 1]);
        server.abort();
    }

    /// The first request is taken before the peer is dialled (openraft's
    /// backoff is a sleep in the request stream): a session with nothing to
    /// send dials no one, even a peer that refuses connections.
    #[tokio::test]
    async fn a_session_takes_its_first_request_before_it_dials() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        drop(listener);
        let mut factory = NetworkFactory::new(1, RaftTimings::default(), None);
        let mut client = factory.new_client(2, &BasicNode { addr }).await;
        let option = || RPCOption::new(Duration::from_secs(5));
        let results = client.stream_append(stream::empty(), option()).await.expect("nothing to send, nothing dialled");
        assert_eq!(results.count().await, 0);
        let refused = client.stream_append(stream::iter([append_request(1..=1)]), option()).await.err();
        assert!(matches!(refused, Some(RPCError::Unreachable(_))), "{refused:?}");
    }

    /// Dropping a session's results ends its request stream at once:
    /// openraft's request stream shares state with the next session, so it
    /// must not live on in the transport.
    #[tokio::test]
    async fn dropping_the_results_ends_the_request_stream() {
        let (addr, received, server) = serve(true).await;
        let mut factory = NetworkFactory::new(1, RaftTimings::default(), None);
        let mut client = factory.new_client(2, &BasicNode { addr }).await;
        let (requests, input) = mpsc::unbounded();
        requests.unbounded_send(append_request(1..=1)).expect("send");
        let results = client.stream_append(input, RPCOption::new(Duration::from_secs(5))).await.expect("opens");
        // Sent but never answered: the session is still open.
        while received.lock().expect("lock").is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(!requests.is_closed(), "the session's request stream is alive while its results are");
        drop(results);
        // The request stream is dropped before anything else is polled.
        tokio::task::yield_now().await;
        let mut waited = Duration::ZERO;
        while !requests.is_closed() && waited < Duration::from_secs(5) {
            tokio::time::sleep(Duration::from_millis(1)).await;
            waited += Duration::from_millis(1);
        }
        assert!(requests.is_closed(), "the request stream outlived the session's results");
        server.abort();
    }

    /// A request left unanswered past its deadline ends the session as a
    /// timeout, and the client sends half as many entries per call from
    /// then on.
    #[tokio::test]
    async fn an_unanswered_request_times_out_and_later_batches_are_halved() {
        let (addr, received, server) = serve(true).await;
        let mut factory = NetworkFactory::new(1, RaftTimings::default(), None);
        let mut client = factory.new_client(2, &BasicNode { addr }).await;
        let started = tokio::time::Instant::now();
        let option = RPCOption::new(Duration::from_millis(400));
        let mut results = client
            .stream_append(stream::iter([append_request(1..=8)]).chain(stream::pending()), option)
            .await
            .expect("opens");
        let error = tokio::time::timeout(Duration::from_secs(10), results.next())
            .await
            .expect("answered in time")
            .expect("an item")
            .expect_err("timed out");
        assert!(matches!(error, RPCError::Timeout(_)), "{error:?}");
        assert!(results.next().await.is_none(), "nothing follows the error");
        drop(results);
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(300) && waited < Duration::from_secs(5), "{waited:?}");
        assert_eq!(*received.lock().expect("lock"), vec![8]);
        assert_eq!(client.entries_max, Some(4), "the next batches are halved");
        server.abort();
    }
}
