//! The routing layer: one tower layer in front of every service, so that
//! handlers run only where they may and contain no routing.
//!
//! At the HTTP level, for each request:
//!
//! - Services outside the public API pass straight through: health and
//!   reflection need no credentials (probes), and on a secured node a Raft
//!   call is refused unless its connection's client certificate is a member
//!   node's (`PERMISSION_DENIED`, or `UNAUTHENTICATED` without a
//!   certificate), before openraft sees a byte.
//! - Every public call is authenticated ([`crate::security`]): on a secured
//!   node by its bearer token, else its client certificate, else it is
//!   refused `UNAUTHENTICATED`. A call authenticated (and an admitted Raft
//!   call) marks its connection authenticated, which lifts the
//!   authentication deadline from it ([`crate::connections`]). A forwarded call (`gavel-forwarded`,
//!   `gavel-forwarded-for`) is honoured only from a member node's
//!   certificate and refused `PERMISSION_DENIED` from anyone else. The
//!   caller (`Option<Caller>`, `None` on an insecure node) goes into the
//!   request's extensions for the handler ([`crate::services::caller`]).
//! - Calls this node serves from its own replica are served here:
//!   `ClusterService/Status` (this node's own view), `AuditService/WatchEvents`
//!   (streamed from the local replica), and, under the planted bug
//!   `stale-read` (the feature `mutants`), `ApprovalService/GetApproval`.
//! - Every other call first gets a request id in the [`metadata::REQUEST_ID`]
//!   header when it carries none, so the leader and every retry of a forward
//!   see the same id; a handler takes the message's request id, else that one.
//! - The leader serves it. A follower proxies the whole HTTP/2 request
//!   (headers and body, nothing decoded) to the leader, marked
//!   [`metadata::FORWARDED`] and, on a secured node, with the caller in
//!   [`metadata::FORWARDED_FOR`] (over mutual TLS with the node's
//!   certificate), and marks the answer with [`metadata::LEADER`].
//!   The request carries the follower's `gavel.rpc` span as its
//!   `traceparent` ([`crate::trace`]). A forwarded request is never forwarded again, and with no known leader
//!   the caller gets `UNAVAILABLE` with a retry hint.
//!
//! - Before any of that, a call counts against its node's bound for its
//!   kind ([`crate::overload`]); past it, it is refused `RESOURCE_EXHAUSTED`
//!   with a retry hint at once. A follower that just had a forward refused
//!   so by the leader refuses calls of that kind itself for a while.
//!
//! The layer also gives a domain code to the two refusals tonic makes before
//! any handler runs: an undecodable message (invalid UTF-8 in a string, say),
//! which tonic reports as `INTERNAL`, and a message over
//! [`REQUEST_BYTES_MAX`], which it reports as `OUT_OF_RANGE`. Both are bad
//! input: `INVALID_ARGUMENT` with the domain code `INVALID_ARGUMENT`.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use gavel_core::limits::WAIT_MS_MAX;
#[cfg(feature = "mutants")]
use gavel_core::mutants::Mutant;
use gavel_core::{Caller, Principal};
use gavel_proto::metadata;
use gavel_raft::LeaderRoute;
use tonic::body::Body;
use tonic::codegen::http::{HeaderValue, Request, Response};
use tonic::codegen::Service;
use tonic::{Code, Status};
use tracing::Instrument;

use crate::connections::peer_of;
use crate::node::{unavailable, Node};
use crate::overload::CallKind;
use crate::peer::Peer;
use crate::security::{forwarded_for, parse_forwarded_for, permission_denied, unauthenticated};

/// Largest request message a node decodes: tonic's default, set explicitly
/// on every service so that the refusal below names the limit in force. A
/// forwarding follower does not decode, so the leader enforces it.
pub const REQUEST_BYTES_MAX: usize = 4 * 1024 * 1024;

/// How long a forwarded membership change may take beyond the forward
/// timeout: a promotion waits for the learner to catch up.
pub const MEMBERSHIP_CHANGE_WAIT: Duration = Duration::from_secs(60);

/// Path prefix of the public API; calls outside it are never routed.
const PUBLIC_API: &str = "/gavel.v1.";

/// Path prefix of the peer-to-peer Raft service (`proto/gavel/internal/raft.proto`).
const RAFT_SERVICE: &str = "/gavel.internal.v1.RaftService/";

/// Calls of the public API every node answers from its own replica.
const SERVED_BY_EVERY_NODE: [&str; 2] = ["/gavel.v1.ClusterService/Status", "/gavel.v1.AuditService/WatchEvents"];

/// The read the planted bug [`Mutant::StaleRead`] answers from local state.
#[cfg(feature = "mutants")]
const STALE_READ: &str = "/gavel.v1.ApprovalService/GetApproval";

/// How long a forwarded call may wait for the leader beyond the forward
/// timeout: long-polls carry their wait (at most [`WAIT_MS_MAX`]), and
/// membership changes wait for replication. The caller's own deadline
/// (`grpc-timeout`) still ends the call earlier.
fn extra_wait(path: &str) -> Duration {
    match path {
        "/gavel.v1.WorkerService/Poll"
        | "/gavel.v1.WorkerService/ReportAndPoll"
        | "/gavel.v1.ExecutionService/WaitExecution"
        | "/gavel.v1.ExecutionService/ResumeAndWait"
        | "/gavel.v1.ApprovalService/WaitApproval" => Duration::from_millis(WAIT_MS_MAX),
        "/gavel.v1.ClusterService/AddLearner" | "/gavel.v1.ClusterService/Promote" => MEMBERSHIP_CHANGE_WAIT,
        _ => Duration::ZERO,
    }
}

/// The layer, added with `Server::builder().layer(..)`.
#[derive(Clone)]
pub struct RoutingLayer {
    node: Arc<Node>,
}

impl RoutingLayer {
    /// Routes for `node`.
    pub fn new(node: Arc<Node>) -> RoutingLayer {
        RoutingLayer { node }
    }
}

impl<S> tower_layer::Layer<S> for RoutingLayer {
    type Service = Routing<S>;

    fn layer(&self, inner: S) -> Routing<S> {
        Routing { inner, node: self.node.clone() }
    }
}

/// The routing service around all of a node's services.
#[derive(Clone)]
pub struct Routing<S> {
    inner: S,
    node: Arc<Node>,
}

impl<S> Service<Request<Body>> for Routing<S>
where
    S: Service<Request<Body>, Response = Response<Body>, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn poll_ready(&mut self, context: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(context)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        // Call the service that was polled ready, and leave a fresh clone in
        // its place for the next request.
        let ready = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, ready);
        let node = self.node.clone();
        Box::pin(async move {
            let mut response = route(&node, inner, request).await;
            stamp_date(&node, &mut response);
            Ok(response)
        })
    }
}

/// On a node with a simulator's clock, stamps each response's `date` header
/// from that clock. hyper stamps the OS clock's otherwise (it keeps a `date`
/// already there), so the wall time leaked into the bytes a simulated node
/// sends: two runs of seed 1 sent different `date` values at 32.3 s (their
/// histories did not differ for it; docs/decisions.md, "Peer keepalive").
/// On the OS clock, hyper's cached header stays.
fn stamp_date(node: &Node, response: &mut Response<Body>) {
    let Some(now_ms) = node.clock.injected_now_ms() else { return };
    let now = std::time::UNIX_EPOCH + Duration::from_millis(now_ms);
    if let Ok(value) = HeaderValue::from_str(&httpdate::fmt_http_date(now)) {
        response.headers_mut().insert(tonic::codegen::http::header::DATE, value);
    }
}

/// Serves, forwards or refuses one request, and counts it in the node's
/// metrics when it is a public call ([`crate::metrics`]): every refusal made
/// here or by the handler, every forward, with the latency the caller saw.
async fn route<S>(node: &Node, inner: S, request: Request<Body>) -> Response<Body>
where
    S: Service<Request<Body>, Response = Response<Body>, Error = Infallible>,
{
    if !request.uri().path().starts_with(PUBLIC_API) {
        return route_call(node, inner, request).await;
    }
    let started = std::time::Instant::now();
    let path = request.uri().path().to_string();
    let span = crate::trace::rpc_span(&path, request.headers(), node.id);
    let call = crate::metrics::with_call_started(started, route_call(node, inner, request));
    let response = call.instrument(span).await;
    node.metrics.observe(&path, started, response)
}

/// Serves, forwards or refuses one request.
async fn route_call<S>(node: &Node, mut inner: S, mut request: Request<Body>) -> Response<Body>
where
    S: Service<Request<Body>, Response = Response<Body>, Error = Infallible>,
{
    let path = request.uri().path().to_string();
    let path = path.as_str();
    if !path.starts_with(PUBLIC_API) {
        if path.starts_with(RAFT_SERVICE) {
            if node.secured.is_some() {
                if let Err(refusal) = admit_peer(node, &peer_of(request.extensions())) {
                    return refusal.into_http();
                }
            }
            // A peer's connection: no authentication deadline for it, and
            // the peers' pool. Health and reflection calls, open to anyone,
            // authenticate nothing.
            crate::connections::mark_authenticated(request.extensions(), crate::connections::Pool::Peer);
        }
        // Raft, health, reflection: their refusals are not the public API's,
        // and a peer must see tonic's own `OUT_OF_RANGE` for an oversized
        // append (it halves the batch on it).
        return match inner.call(request).await {
            Ok(response) => response,
            Err(never) => match never {},
        };
    }
    // Shed load before anything costs: the permit is held until the call
    // has answered here or at the leader. A proposal takes its permit once
    // its principal is known, so that the principals holding their fair
    // share are shed first (`crate::overload::shed`); a full bound refuses
    // it here already.
    let kind = CallKind::of(path);
    let admitted = match kind {
        Some(CallKind::Proposal) => node.admission.refuse_if_full(CallKind::Proposal).map(|()| None),
        Some(kind) => node.admission.admit(kind).map(Some),
        None => Ok(None),
    };
    let mut admitted = match (kind, admitted) {
        (Some(kind), Err(refusal)) => {
            node.metrics.count_overload_refusal(kind.as_str());
            return refusal.into_http();
        }
        (_, admitted) => admitted.unwrap_or_default(),
    };
    let caller = match authenticate(node, &mut request).await {
        Ok(caller) => caller,
        Err(refusal) => return refusal.into_http(),
    };
    crate::connections::mark_authenticated(request.extensions(), crate::connections::Pool::Authenticated);
    if kind == Some(CallKind::Proposal) {
        // An insecure node knows no principal: its callers are one.
        let principal = caller.as_ref().map(|caller| caller.principal.to_string()).unwrap_or_default();
        match node.admission.admit_as(&principal) {
            Ok(permit) => admitted = Some(permit),
            Err((refusal, shed)) => {
                node.metrics.count_overload_refusal(CallKind::Proposal.as_str());
                if shed.is_some() {
                    node.metrics.count_overload_shed(&principal);
                }
                return refusal.into_http();
            }
        }
    }
    let _admitted = admitted;
    request.extensions_mut().insert(caller.clone());
    let served_here = SERVED_BY_EVERY_NODE.contains(&path);
    #[cfg(feature = "mutants")]
    let served_here = served_here || (path == STALE_READ && node.plants(Mutant::StaleRead));
    if served_here {
        return serve(inner, request).await;
    }
    if !request.headers().contains_key(metadata::REQUEST_ID) {
        let assigned = format!("srv-{}", uuid::Uuid::from_u128(crate::node::random_u128()));
        let value = HeaderValue::from_str(&assigned).expect("a uuid is a valid header value");
        request.headers_mut().insert(metadata::REQUEST_ID, value);
    }
    let leader_addr = match node.raft.leader_route() {
        LeaderRoute::Here => return serve(inner, request).await,
        LeaderRoute::At { leader_addr, .. } => leader_addr,
        LeaderRoute::Unknown => return unavailable("no leader is elected yet; retry shortly", None).into_http(),
    };
    if request.headers().contains_key(metadata::FORWARDED) {
        return unavailable("leadership is changing; retry shortly", Some(leader_addr)).into_http();
    }
    if let Some(caller) = &caller {
        // The leader takes the caller from this header, which it honours
        // only because this node's certificate carries the call; the token
        // itself goes no further.
        match HeaderValue::from_str(&forwarded_for(caller)) {
            Ok(value) => request.headers_mut().insert(metadata::FORWARDED_FOR, value),
            Err(_) => return Status::internal("the caller cannot be written as a header").into_http(),
        };
        request.headers_mut().remove(metadata::AUTHORIZATION);
    }
    if let Some(kind) = kind {
        if let Err(refusal) = node.admission.leader_pushback(kind) {
            node.metrics.count_overload_refusal(kind.as_str());
            return refusal.into_http();
        }
    }
    let response = forward(node, &leader_addr, request).await;
    if let Some(kind) = kind {
        node.admission.learn_from_leader(kind, response.headers());
    }
    response
}

/// Admits a Raft call only from a member node's certificate (or any node
/// certificate while this node knows no membership: a fresh learner), so
/// that nothing else reaches openraft.
fn admit_peer(node: &Node, peer: &Peer) -> Result<(), Status> {
    match (peer.node_id(), peer) {
        (Some(node_id), _) if node.raft.admits_peer(node_id) => Ok(()),
        (Some(node_id), _) => Err(permission_denied(&format!("node {node_id} is not a member of this cluster"))),
        (None, Peer::Anonymous) => Err(unauthenticated("Raft calls need the certificate of a member node")),
        (None, _) => Err(permission_denied("Raft calls are accepted only from member node certificates")),
    }
}

/// The caller of a public call: `None` on an insecure node (identity is
/// self-declared, and a `gavel-forwarded-for` header means nothing, so it
/// is dropped). On a secured node a forwarded call (`gavel-forwarded` or
/// `gavel-forwarded-for`) must come from a member node's certificate and
/// is made by the principal the header names (the node itself when it names
/// none); any other call is authenticated by its token or certificate.
async fn authenticate(node: &Node, request: &mut Request<Body>) -> Result<Option<Caller>, Status> {
    let Some(secured) = &node.secured else {
        request.headers_mut().remove(metadata::FORWARDED_FOR);
        return Ok(None);
    };
    let peer = peer_of(request.extensions());
    let headers = request.headers();
    if !headers.contains_key(metadata::FORWARDED) && !headers.contains_key(metadata::FORWARDED_FOR) {
        return secured.authenticate(headers, &peer).await.map(Some);
    }
    let Some(node_id) = peer.node_id().filter(|node_id| node.raft.admits_peer(*node_id)) else {
        return Err(permission_denied(&format!(
            "only a member node may forward calls ({} or {} headers)",
            metadata::FORWARDED,
            metadata::FORWARDED_FOR
        )));
    };
    match headers.get(metadata::FORWARDED_FOR) {
        None => Ok(Some(Caller::of(Principal::node(node_id)))),
        Some(value) => {
            let text = value.to_str().map_err(|_| unauthenticated("the forwarded caller is not printable ASCII"))?;
            parse_forwarded_for(text)
                .map(Some)
                .map_err(|problem| unauthenticated(&format!("the forwarded caller {text:?} is not valid: {problem}")))
        }
    }
}

/// Serves a request on this node.
async fn serve<S>(mut inner: S, request: Request<Body>) -> Response<Body>
where
    S: Service<Request<Body>, Response = Response<Body>, Error = Infallible>,
{
    let response = match inner.call(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    };
    with_domain_code(response)
}

/// Proxies a request to the leader at `addr`, once, within the forward
/// timeout (plus the call's own wait), and names the leader in the answer.
async fn forward(node: &Node, addr: &str, mut request: Request<Body>) -> Response<Body> {
    let deadline = node.settings.forward_timeout + extra_wait(request.uri().path());
    request.headers_mut().insert(metadata::FORWARDED, HeaderValue::from_static("1"));
    crate::trace::inject_current(request.headers_mut());
    let mut channel = match node.channel(addr) {
        Ok(channel) => channel,
        Err(status) => return status.into_http(),
    };
    let call = async {
        std::future::poll_fn(|context| channel.poll_ready(context)).await?;
        channel.call(request).await
    };
    let mut response = match tokio::time::timeout(deadline, call).await {
        Ok(Ok(response)) => response,
        Ok(Err(error)) => {
            let message = format!("the leader at {addr} could not be reached: {}", error_chain(&error));
            return unavailable(&message, None).into_http();
        }
        Err(_) => {
            let message = format!("the leader at {addr} did not answer within {deadline:?}");
            return unavailable(&message, None).into_http();
        }
    };
    if let Ok(value) = HeaderValue::from_str(addr) {
        response.headers_mut().insert(metadata::LEADER, value);
    }
    response
}

/// An error and its sources, for a message a person can act on.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Replaces a refusal tonic made before any handler ran (it carries no
/// error detail) with the same refusal as bad input with a domain code.
fn with_domain_code(response: Response<Body>) -> Response<Body> {
    if response.headers().contains_key("grpc-status-details-bin") {
        return response;
    }
    match Status::from_header_map(response.headers()).and_then(|status| transport_refusal(&status)) {
        Some(refusal) => refusal.into_http(),
        None => response,
    }
}

/// The bad-input refusal for a status tonic's codec produced, if it is one.
fn transport_refusal(status: &Status) -> Option<Status> {
    let message = status.message();
    let refusal = match status.code() {
        Code::Internal if message.starts_with("failed to decode Protobuf message") => {
            format!("the request is not a valid protobuf message ({message})")
        }
        Code::OutOfRange if message.contains("decoded message length too large") => {
            let found = message.split("found ").nth(1).and_then(|rest| rest.split(' ').next());
            let size = found.map_or_else(String::new, |bytes| format!(" of {bytes} bytes"));
            format!("the request message{size} is over the limit of {REQUEST_BYTES_MAX} bytes (4 MiB) for one message")
        }
        _ => return None,
    };
    Some(gavel_proto::error_detail::domain_status(
        Code::InvalidArgument,
        gavel_core::ErrorCode::InvalidArgument.as_str(),
        &refusal,
        Vec::new(),
        None,
        None,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gavel_proto::error_detail::read_error_detail;

    #[test]
    fn an_undecodable_message_becomes_invalid_argument_with_a_domain_code() {
        let status = Status::internal(
            "failed to decode Protobuf message: CreateApprovalRequest.id: invalid string value: data is not UTF-8 encoded",
        );
        let refusal = transport_refusal(&status).expect("a bad-input refusal");
        assert_eq!(refusal.code(), Code::InvalidArgument);
        assert!(refusal.message().contains("CreateApprovalRequest.id"), "{}", refusal.message());
        let detail = read_error_detail(&refusal).expect("an error detail");
        assert_eq!(detail.code, "INVALID_ARGUMENT");
    }

    #[test]
    fn an_oversized_message_names_its_size_and_the_limit() {
        let status = Status::out_of_range(
            "Error, decoded message length too large: found 5242893 bytes, the limit is: 4194304 bytes",
        );
        let refusal = transport_refusal(&status).expect("a bad-input refusal");
        assert_eq!(refusal.code(), Code::InvalidArgument);
        assert!(refusal.message().contains("5242893 bytes"), "{}", refusal.message());
        assert!(refusal.message().contains("4194304"), "{}", refusal.message());
    }

    #[test]
    fn other_statuses_are_left_alone() {
        for status in [
            Status::internal("the state machine broke"),
            Status::out_of_range("events up to cursor 4 were dropped by retention"),
            Status::unavailable("no leader"),
        ] {
            assert!(transport_refusal(&status).is_none(), "{status:?}");
        }
    }

    #[test]
    fn only_long_calls_get_extra_time_when_forwarded() {
        assert_eq!(extra_wait("/gavel.v1.WorkerService/Poll"), Duration::from_millis(WAIT_MS_MAX));
        assert_eq!(extra_wait("/gavel.v1.WorkerService/ReportAndPoll"), Duration::from_millis(WAIT_MS_MAX));
        assert_eq!(extra_wait("/gavel.v1.ExecutionService/ResumeAndWait"), Duration::from_millis(WAIT_MS_MAX));
        assert_eq!(extra_wait("/gavel.v1.ApprovalService/WaitApproval"), Duration::from_millis(WAIT_MS_MAX));
        assert_eq!(extra_wait("/gavel.v1.ClusterService/Promote"), MEMBERSHIP_CHANGE_WAIT);
        assert_eq!(extra_wait("/gavel.v1.ApprovalService/CreateApproval"), Duration::ZERO);
    }
}
