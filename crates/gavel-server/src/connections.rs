//! Connections to a node's gRPC port, from accept to close: the caps on how
//! many are open ([`ConnectionTable`]), the authentication deadline and the
//! idle timeout ([`Activity`]), each bound named in [`crate::limits`].
//!
//! - **At accept**, before the TLS handshake allocates anything, a
//!   connection takes a [`Slot`] in the [`ConnectionTable`], or is closed at
//!   once when the node already holds [`ConnectionLimits::connections_max`]
//!   connections, or its source address
//!   [`ConnectionLimits::connections_per_source_max`].
//! - **The authentication deadline** runs from accept: the TLS handshake must
//!   finish within it, and so must the connection's first authenticated
//!   call unless its client certificate already named a principal (the
//!   routing layer marks a connection authenticated when it authenticates
//!   one of its calls, [`mark_authenticated`]). Health and reflection calls,
//!   open to anyone, do not authenticate a connection.
//! - **The idle timeout** closes a connection that has carried no call (no
//!   HTTP/2 stream in flight, [`StreamsLayer`] counts them) for that long.
//!
//! Each connection is served by its own tonic server over a one-connection
//! stream, so that the node can close one connection gracefully: `GOAWAY`
//! (what grpc-go's `MaxConnectionIdle` sends), which a tonic channel or an
//! SDK takes as "reconnect for the next call". A connection that has not
//! gone [`CLOSE_GRACE`] later is cut at the socket ([`Connection`] fails its
//! reads and writes) when it has no call in flight, or whatever it carries
//! when the authentication deadline closed it.
//!
//! Memory freed by closed connections is handed back to the system after
//! bursts of closes (`TRIM_AFTER_CLOSES`).

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::task::AtomicWaker;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{oneshot, watch};
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tonic::body::Body;
use tonic::codegen::http::{Extensions, Request, Response};
use tonic::codegen::Service;
use tonic::transport::server::Connected;

use crate::limits::{AUTH_DEADLINE, CLOSE_GRACE, CONNECTIONS_MAX, CONNECTIONS_PER_SOURCE_MAX, DESCRIPTORS_RESERVED};
use crate::limits::{CONNECTION_TIMEOUT_MAX, IDLE_TIMEOUT, LISTEN_BACKLOG};
use crate::metrics::Metrics;
use crate::peer::Peer;

/// The connection bounds of one node ([`crate::limits`] by default; `gavel
/// node --auth-deadline-ms --idle-timeout-ms --connections-max
/// --connections-per-source-max`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// From accept to the TLS handshake's end and the first authenticated call.
    pub auth_deadline: Duration,
    /// How long a connection may carry no call.
    pub idle_timeout: Duration,
    /// Connections open at once (lowered under the descriptor limit, [`connections_max_under`]).
    pub connections_max: usize,
    /// Connections open at once from one source address.
    pub connections_per_source_max: usize,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            auth_deadline: AUTH_DEADLINE,
            idle_timeout: IDLE_TIMEOUT,
            connections_max: CONNECTIONS_MAX,
            connections_per_source_max: CONNECTIONS_PER_SOURCE_MAX,
        }
    }
}

/// Why a connection was closed at accept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The node holds [`ConnectionLimits::connections_max`] connections.
    Overall,
    /// Its source address holds [`ConnectionLimits::connections_per_source_max`].
    PerSource,
}

impl Refusal {
    /// The `reason` label of `gavel_connections_refused_total`.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::Overall => "overall",
            Refusal::PerSource => "per_source",
        }
    }
}

/// Why the node closed an open connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closure {
    /// It did not finish its handshake, or carry an authenticated call, within the deadline.
    AuthDeadline,
    /// It carried no call for the idle timeout.
    Idle,
}

impl Closure {
    /// The `reason` label of `gavel_connections_closed_total`.
    pub fn as_str(self) -> &'static str {
        match self {
            Closure::AuthDeadline => "auth_deadline",
            Closure::Idle => "idle",
        }
    }
}

/// The connections open on a node, overall and by source address.
#[derive(Debug)]
pub struct ConnectionTable {
    connections_max: usize,
    per_source_max: usize,
    open: Mutex<OpenCounts>,
    /// Connections closed since the node started.
    closed: AtomicUsize,
}

/// What [`ConnectionTable`] counts under its lock.
#[derive(Debug, Default)]
struct OpenCounts {
    total: usize,
    by_source: HashMap<IpAddr, usize>,
}

impl ConnectionTable {
    /// A table that admits `connections_max` connections, `per_source_max` from one address.
    pub fn new(connections_max: usize, per_source_max: usize) -> Arc<ConnectionTable> {
        Arc::new(ConnectionTable {
            connections_max,
            per_source_max,
            open: Mutex::new(OpenCounts::default()),
            closed: AtomicUsize::new(0),
        })
    }

    /// A slot for a connection from `source`, held until the connection
    /// closes, or why there is none.
    pub fn admit(self: &Arc<Self>, source: IpAddr) -> Result<Slot, Refusal> {
        let mut open = self.open.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if open.total >= self.connections_max {
            return Err(Refusal::Overall);
        }
        let from_source = open.by_source.entry(source).or_insert(0);
        if *from_source >= self.per_source_max {
            return Err(Refusal::PerSource);
        }
        *from_source += 1;
        open.total += 1;
        Ok(Slot { table: self.clone(), source })
    }

    /// Connections open now (handshaking or served).
    pub fn open(&self) -> usize {
        self.open.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).total
    }

    /// Connections open now from `source`.
    pub fn open_from(&self, source: IpAddr) -> usize {
        let open = self.open.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        open.by_source.get(&source).copied().unwrap_or(0)
    }

    /// Connections closed since the table was made.
    pub fn closed(&self) -> usize {
        self.closed.load(Ordering::Relaxed)
    }

    fn release(&self, source: IpAddr) {
        self.closed.fetch_add(1, Ordering::Relaxed);
        let mut open = self.open.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        open.total -= 1;
        if let Some(from_source) = open.by_source.get_mut(&source) {
            *from_source -= 1;
            if *from_source == 0 {
                // Sources come and go: keep only those with connections open.
                open.by_source.remove(&source);
            }
        }
    }
}

/// One connection's place in its [`ConnectionTable`], given back on drop.
#[derive(Debug)]
pub struct Slot {
    table: Arc<ConnectionTable>,
    source: IpAddr,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.table.release(self.source);
    }
}

/// The cap on connections a node with `descriptors` file descriptors
/// (`RLIMIT_NOFILE`) can keep: `configured`, lowered to leave
/// [`DESCRIPTORS_RESERVED`] descriptors (or half of them, under a limit that
/// low) for the node's own files and outgoing connections.
pub fn connections_max_under(configured: usize, descriptors: u64) -> usize {
    let reserved = DESCRIPTORS_RESERVED.min(descriptors / 2);
    let usable = usize::try_from(descriptors.saturating_sub(reserved)).unwrap_or(usize::MAX);
    configured.min(usable).max(1)
}

/// A listener on `addr` (`host:port`, the first of its addresses that
/// binds) with an accept backlog of [`LISTEN_BACKLOG`].
pub async fn bind(addr: &str) -> io::Result<TcpListener> {
    let mut last_error = None;
    for address in tokio::net::lookup_host(addr).await? {
        let bound = (|| {
            let socket = if address.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
            // As `TcpListener::bind` does: a restarted node rebinds its port at once.
            socket.set_reuseaddr(true)?;
            socket.bind(address)?;
            socket.listen(LISTEN_BACKLOG)
        })();
        match bound {
            Ok(listener) => return Ok(listener),
            Err(error) => last_error = Some(error),
        }
    }
    Err(last_error.unwrap_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("{addr} names no address"))))
}

/// Connections closed, since the last time, after which the node hands the
/// memory they freed back to the system. glibc's allocator keeps freed
/// memory in its per-thread arenas for reuse: after 12,000 idle connections
/// closed, a node kept all of the 167 MB they had taken (docs/limits.md).
/// 256 connections are some 3 to 10 MB.
const TRIM_AFTER_CLOSES: usize = 256;

/// How often the node looks whether connections closed in a burst; a trim
/// walks the allocator's arenas, so it runs at most this often.
const TRIM_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// Hands the memory freed by closed connections back to the system after
/// every burst of [`TRIM_AFTER_CLOSES`] closes, until `shutdown`.
async fn trim_after_bursts(table: Arc<ConnectionTable>, mut shutdown: watch::Receiver<bool>) {
    let mut trimmed_at = table.closed();
    loop {
        tokio::select! {
            () = tokio::time::sleep(TRIM_CHECK_INTERVAL) => {}
            _ = shutdown.wait_for(|stop| *stop) => return,
        }
        let closed = table.closed();
        if closed - trimmed_at >= TRIM_AFTER_CLOSES {
            trimmed_at = closed;
            let _ = tokio::task::spawn_blocking(release_freed_memory).await;
        }
    }
}

/// Returns the allocator's free memory to the system (`malloc_trim(0)`:
/// the free tops of glibc's arenas, and the free pages inside them).
/// Nothing on other C libraries.
#[allow(unsafe_code)]
fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes no pointer and only reorganizes the
    // allocator's free lists under its own locks; it is safe to call from any
    // thread at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// What one connection has been doing, shared by its [`Connection`], the
/// [`StreamsLayer`] that counts its calls, the routing layer that marks it
/// authenticated, and the task that closes it.
#[derive(Debug)]
pub struct Activity {
    accepted: Instant,
    /// HTTP/2 streams (calls) in flight.
    streams: AtomicUsize,
    /// When `streams` last fell to zero, in ms since `accepted`.
    idle_since_ms: AtomicU64,
    authenticated: AtomicBool,
    /// Set to cut the connection: its reads and writes fail from then on.
    cut: AtomicBool,
    reader: AtomicWaker,
}

impl Activity {
    /// A connection accepted at `accepted`, idle and not authenticated.
    pub fn new(accepted: Instant) -> Arc<Activity> {
        Arc::new(Activity {
            accepted,
            streams: AtomicUsize::new(0),
            idle_since_ms: AtomicU64::new(0),
            authenticated: AtomicBool::new(false),
            cut: AtomicBool::new(false),
            reader: AtomicWaker::new(),
        })
    }

    /// Marks the connection authenticated: the authentication deadline no longer applies.
    pub fn authenticate(&self) {
        self.authenticated.store(true, Ordering::Relaxed);
    }

    /// Whether a client certificate or a call authenticated the connection.
    pub fn is_authenticated(&self) -> bool {
        self.authenticated.load(Ordering::Relaxed)
    }

    /// Calls in flight.
    pub fn streams(&self) -> usize {
        self.streams.load(Ordering::Acquire)
    }

    /// Counts a call in flight until the guard drops.
    pub fn stream_started(self: &Arc<Self>) -> StreamGuard {
        self.streams.fetch_add(1, Ordering::AcqRel);
        StreamGuard { activity: self.clone() }
    }

    fn stream_ended(&self) {
        if self.streams.fetch_sub(1, Ordering::AcqRel) == 1 {
            let since = u64::try_from(self.accepted.elapsed().as_millis()).unwrap_or(u64::MAX);
            self.idle_since_ms.store(since, Ordering::Release);
        }
    }

    /// Cuts the connection at the socket: its pending read wakes and fails.
    fn cut(&self) {
        self.cut.store(true, Ordering::Release);
        self.reader.wake();
    }

    fn is_cut(&self) -> bool {
        self.cut.load(Ordering::Acquire)
    }

    /// When the connection must close and why, as of `now`: `Ok` with the
    /// reason once a bound has passed, else `Err` with the instant to look again.
    pub fn closing(&self, limits: &ConnectionLimits, now: Instant) -> Result<Closure, Instant> {
        let mut next = later(now, limits.idle_timeout);
        if !self.is_authenticated() {
            let deadline = later(self.accepted, limits.auth_deadline);
            if now >= deadline {
                return Ok(Closure::AuthDeadline);
            }
            next = next.min(deadline);
        }
        if self.streams() == 0 {
            let idle_since = self.accepted + Duration::from_millis(self.idle_since_ms.load(Ordering::Acquire));
            let idle_until = later(idle_since, limits.idle_timeout);
            // A stream may have started and ended since `streams` was read;
            // then `idle_since` moved on and the next look finds it.
            if now >= idle_until && self.streams() == 0 {
                return Ok(Closure::Idle);
            }
            next = next.min(idle_until);
        }
        Err(next)
    }

    /// Waits until the connection must close, and says why.
    async fn until_closing(&self, limits: &ConnectionLimits) -> Closure {
        loop {
            match self.closing(limits, Instant::now()) {
                Ok(closure) => return closure,
                Err(next) => tokio::time::sleep_until(next.into()).await,
            }
        }
    }
}

/// `instant + duration`, or as far as [`CONNECTION_TIMEOUT_MAX`] past
/// `instant` when that is later than the clock can count (a bound given in
/// process, past what `gavel node` accepts, must not panic).
fn later(instant: Instant, duration: Duration) -> Instant {
    instant.checked_add(duration).unwrap_or(instant + CONNECTION_TIMEOUT_MAX)
}

/// A call in flight on a connection; it ends when the guard drops.
#[derive(Debug)]
pub struct StreamGuard {
    activity: Arc<Activity>,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.activity.stream_ended();
    }
}

/// What tonic puts into the extensions of every request of a connection
/// ([`Connected::connect_info`]): who the client certificate names, and the
/// connection's [`Activity`].
#[derive(Debug, Clone)]
pub struct ConnectionInfo {
    /// The client certificate, read once at the handshake.
    pub peer: Peer,
    /// What the connection has been doing.
    pub activity: Arc<Activity>,
}

/// The client certificate of the connection a request came on, as the node
/// read it at the handshake ([`ConnectionInfo`]); anonymous on a plaintext
/// connection.
pub fn peer_of(extensions: &Extensions) -> Peer {
    extensions.get::<ConnectionInfo>().map_or(Peer::Anonymous, |info| info.peer.clone())
}

/// Marks the connection a request came on authenticated (the routing layer
/// calls it once it authenticated a call); nothing for a request that came
/// another way (an in-process test).
pub fn mark_authenticated(extensions: &Extensions) {
    if let Some(info) = extensions.get::<ConnectionInfo>() {
        info.activity.authenticate();
    }
}

/// The byte stream of one accepted connection: plaintext (an `--insecure`
/// node) or TLS, failing from the moment its [`Activity`] is cut.
pub struct Connection {
    transport: Transport,
    info: ConnectionInfo,
    /// Dropped with the connection: tells [`serve_connection`] that the
    /// server is done with it (tonic's server over a one-connection stream
    /// never ends by itself).
    _served: Option<oneshot::Sender<()>>,
}

enum Transport {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl Connection {
    fn new(transport: Transport, activity: Arc<Activity>) -> Connection {
        let peer = match &transport {
            Transport::Plain(_) => Peer::Anonymous,
            Transport::Tls(stream) => Peer::of_certificates(stream.get_ref().1.peer_certificates()),
        };
        if matches!(peer, Peer::Certified(_)) {
            activity.authenticate();
        }
        Connection { transport, info: ConnectionInfo { peer, activity }, _served: None }
    }

    fn refuse_if_cut(&self) -> Option<io::Error> {
        self.info
            .activity
            .is_cut()
            .then(|| io::Error::new(io::ErrorKind::ConnectionAborted, "the node closed this connection"))
    }
}

impl Connected for Connection {
    type ConnectInfo = ConnectionInfo;

    fn connect_info(&self) -> ConnectionInfo {
        self.info.clone()
    }
}

impl AsyncRead for Connection {
    fn poll_read(self: Pin<&mut Self>, context: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        // The server always has a read pending: registering here is what
        // lets a cut wake it.
        this.info.activity.reader.register(context.waker());
        if let Some(error) = this.refuse_if_cut() {
            return Poll::Ready(Err(error));
        }
        match &mut this.transport {
            Transport::Plain(stream) => Pin::new(stream).poll_read(context, buf),
            Transport::Tls(stream) => Pin::new(stream.as_mut()).poll_read(context, buf),
        }
    }
}

impl AsyncWrite for Connection {
    fn poll_write(self: Pin<&mut Self>, context: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Some(error) = this.refuse_if_cut() {
            return Poll::Ready(Err(error));
        }
        match &mut this.transport {
            Transport::Plain(stream) => Pin::new(stream).poll_write(context, buf),
            Transport::Tls(stream) => Pin::new(stream.as_mut()).poll_write(context, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().transport {
            Transport::Plain(stream) => Pin::new(stream).poll_flush(context),
            Transport::Tls(stream) => Pin::new(stream.as_mut()).poll_flush(context),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().transport {
            Transport::Plain(stream) => Pin::new(stream).poll_shutdown(context),
            Transport::Tls(stream) => Pin::new(stream.as_mut()).poll_shutdown(context),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        context: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Some(error) = this.refuse_if_cut() {
            return Poll::Ready(Err(error));
        }
        match &mut this.transport {
            Transport::Plain(stream) => Pin::new(stream).poll_write_vectored(context, bufs),
            Transport::Tls(stream) => Pin::new(stream.as_mut()).poll_write_vectored(context, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match &self.transport {
            Transport::Plain(stream) => stream.is_write_vectored(),
            Transport::Tls(stream) => stream.is_write_vectored(),
        }
    }
}

/// The tower layer that counts each connection's calls in flight (its
/// [`Activity`]): a call is in flight from its request until its response
/// body ends or is dropped, so a long-poll or a `WatchEvents` stream keeps
/// its connection from being idle.
#[derive(Debug, Clone, Copy, Default)]
pub struct StreamsLayer;

impl<S> tower_layer::Layer<S> for StreamsLayer {
    type Service = Streams<S>;

    fn layer(&self, inner: S) -> Streams<S> {
        Streams { inner }
    }
}

/// The service of [`StreamsLayer`].
#[derive(Debug, Clone)]
pub struct Streams<S> {
    inner: S,
}

impl<S> Service<Request<Body>> for Streams<S>
where
    S: Service<Request<Body>, Response = Response<Body>>,
    S::Future: Send + 'static,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, S::Error>> + Send>>;

    fn poll_ready(&mut self, context: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(context)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let guard = request.extensions().get::<ConnectionInfo>().map(|info| info.activity.stream_started());
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = response.await?;
            Ok(match guard {
                None => response,
                Some(guard) => response.map(|body| Body::new(GuardedBody { inner: body, _guard: guard })),
            })
        })
    }
}

/// A response body that keeps its call counted in flight until it ends or is dropped.
struct GuardedBody {
    inner: Body,
    _guard: StreamGuard,
}

impl http_body::Body for GuardedBody {
    type Data = bytes::Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<bytes::Bytes>, tonic::Status>>> {
        Pin::new(&mut self.inner).poll_frame(context)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// Serves one connection until it closes: the future a tonic server over
/// that one connection returns, which sends `GOAWAY` and drains once its
/// second argument resolves.
pub type ServeOne =
    Arc<dyn Fn(Connection, oneshot::Receiver<()>) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// Everything the accept loop needs.
pub struct Acceptor {
    /// The bounds.
    pub limits: ConnectionLimits,
    /// The open connections (its caps already lowered under the descriptor limit).
    pub table: Arc<ConnectionTable>,
    /// TLS, or `None` for an insecure node.
    pub tls: Option<Arc<ServerConfig>>,
    /// Where refusals and closes are counted.
    pub metrics: Arc<Metrics>,
    /// Serves one connection.
    pub serve_one: ServeOne,
}

/// Accepts connections on `listener` until `shutdown` turns true, then
/// waits for the open ones to close (each is asked to with `GOAWAY`).
pub async fn serve(listener: TcpListener, acceptor: Acceptor, mut shutdown: watch::Receiver<bool>) {
    let acceptor = Arc::new(acceptor);
    let tls = acceptor.tls.clone().map(TlsAcceptor::from);
    tokio::spawn(trim_after_bursts(acceptor.table.clone(), shutdown.clone()));
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = shutdown.wait_for(|stop| *stop) => break,
        };
        let (tcp, source) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                // Out of descriptors and the like: the next accept may work.
                tracing::warn!(%error, "accepting a connection failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let slot = match acceptor.table.admit(source.ip()) {
            Ok(slot) => slot,
            Err(refusal) => {
                acceptor.metrics.count_connection_refused(refusal.as_str());
                // Closed at once: nothing was allocated for it.
                drop(tcp);
                continue;
            }
        };
        acceptor.metrics.count_connection_opened();
        // Without it a response written in two segments waits for the
        // client's delayed ACK (~40 ms).
        let _ = tcp.set_nodelay(true);
        let (acceptor, tls, shutdown) = (acceptor.clone(), tls.clone(), shutdown.clone());
        tokio::spawn(async move {
            let activity = Activity::new(Instant::now());
            if let Some(connection) = open(tcp, tls, &activity, &acceptor).await {
                serve_connection(connection, activity, &acceptor, shutdown).await;
            }
            drop(slot);
            acceptor.metrics.count_connection_ended();
        });
    }
    drop(listener);
    while acceptor.table.open() > 0 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The connection after its TLS handshake (at once for plaintext), or
/// `None` when the handshake failed or missed the authentication deadline.
async fn open(
    tcp: TcpStream,
    tls: Option<TlsAcceptor>,
    activity: &Arc<Activity>,
    acceptor: &Acceptor,
) -> Option<Connection> {
    let Some(tls) = tls else {
        return Some(Connection::new(Transport::Plain(tcp), activity.clone()));
    };
    let deadline = later(activity.accepted, acceptor.limits.auth_deadline);
    match tokio::time::timeout_at(deadline.into(), tls.accept(tcp).into_fallible()).await {
        Ok(Ok(stream)) => Some(Connection::new(Transport::Tls(Box::new(stream)), activity.clone())),
        Ok(Err((error, tcp))) => {
            tracing::debug!(%error, "TLS handshake refused");
            crate::tls::close_refused(tcp).await;
            None
        }
        Err(_) => {
            tracing::debug!("TLS handshake missed the authentication deadline");
            acceptor.metrics.count_connection_closed(Closure::AuthDeadline.as_str());
            None
        }
    }
}

/// Serves one connection until it closes, closing it when it misses the
/// authentication deadline, goes idle, or the node stops.
async fn serve_connection(
    connection: Connection,
    activity: Arc<Activity>,
    acceptor: &Acceptor,
    mut shutdown: watch::Receiver<bool>,
) {
    let (close, closed) = oneshot::channel();
    let (served, mut done) = oneshot::channel::<()>();
    let connection = Connection { _served: Some(served), ..connection };
    let mut serving = (acceptor.serve_one)(connection, closed);
    let closure = tokio::select! {
        () = &mut serving => return,
        // The client went away: the server dropped the connection.
        _ = &mut done => return,
        closure = activity.until_closing(&acceptor.limits) => Some(closure),
        _ = shutdown.wait_for(|stop| *stop) => None,
    };
    if let Some(closure) = closure {
        tracing::debug!(reason = closure.as_str(), "closing a connection");
        acceptor.metrics.count_connection_closed(closure.as_str());
    }
    let _ = close.send(());
    loop {
        tokio::select! {
            () = &mut serving => return,
            _ = &mut done => return,
            () = tokio::time::sleep(CLOSE_GRACE) => {
                // A call in flight on an authenticated connection finishes;
                // one that never authenticated can only be carrying a health
                // or reflection call (every other is refused), which must
                // not keep it open past its deadline: a probe reconnects.
                // At shutdown (no closure) nothing is waited for past the
                // grace either: a stream that never ends (WatchEvents, a
                // long poll) would hold the node's exit, and its client
                // resumes on another node as it does after a crash.
                if activity.streams() == 0 || closure.is_none_or(|closure| closure == Closure::AuthDeadline) {
                    activity.cut();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn address(last: u8) -> IpAddr {
        IpAddr::from([127, 0, 0, last])
    }

    #[test]
    fn the_table_refuses_past_the_per_source_cap_then_past_the_overall_cap() {
        let table = ConnectionTable::new(5, 2);
        let first = table.admit(address(2)).expect("first from .2");
        let _second = table.admit(address(2)).expect("second from .2");
        assert_eq!(table.admit(address(2)).map(|_| ()), Err(Refusal::PerSource));
        let _others: Vec<Slot> = (3..6).map(|last| table.admit(address(last)).expect("another source")).collect();
        assert_eq!(table.open(), 5);
        assert_eq!(table.admit(address(9)).map(|_| ()), Err(Refusal::Overall));
        drop(first);
        assert_eq!(table.open_from(address(2)), 1);
        let _again = table.admit(address(2)).expect("a slot freed");
        assert_eq!(table.open(), 5);
    }

    #[test]
    fn a_source_whose_connections_all_closed_is_forgotten() {
        let table = ConnectionTable::new(10, 10);
        let slots: Vec<Slot> = (0..4).map(|_| table.admit(address(7)).expect("a slot")).collect();
        drop(slots);
        assert_eq!(table.open(), 0);
        assert!(table.open.lock().expect("unpoisoned").by_source.is_empty());
    }

    #[test]
    fn the_cap_stays_under_the_descriptor_limit() {
        assert_eq!(connections_max_under(10_000, 1_048_576), 10_000);
        assert_eq!(connections_max_under(10_000, 8_192), 8_192 - DESCRIPTORS_RESERVED as usize);
        assert_eq!(connections_max_under(10_000, 1_024), 512);
        assert_eq!(connections_max_under(10_000, 0), 1);
    }

    fn limits() -> ConnectionLimits {
        ConnectionLimits {
            auth_deadline: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            ..ConnectionLimits::default()
        }
    }

    #[test]
    fn bounds_past_what_the_clock_can_count_do_not_panic() {
        let accepted = Instant::now();
        let activity = Activity::new(accepted);
        let forever = ConnectionLimits { auth_deadline: Duration::MAX, idle_timeout: Duration::MAX, ..limits() };
        assert!(activity.closing(&forever, accepted).is_err());
        activity.authenticate();
        assert!(activity.closing(&forever, accepted + Duration::from_secs(3600)).is_err());
    }

    #[test]
    fn an_unauthenticated_connection_closes_at_the_deadline_even_with_a_call_in_flight() {
        let accepted = Instant::now();
        let activity = Activity::new(accepted);
        let _health_watch = activity.stream_started();
        assert_eq!(
            activity.closing(&limits(), accepted + Duration::from_secs(3)),
            Err(accepted + limits().auth_deadline)
        );
        assert_eq!(activity.closing(&limits(), accepted + Duration::from_secs(10)), Ok(Closure::AuthDeadline));
        activity.authenticate();
        assert!(activity.closing(&limits(), accepted + Duration::from_secs(10)).is_err());
    }

    #[test]
    fn an_authenticated_connection_closes_only_after_the_idle_timeout_with_no_call_in_flight() {
        let accepted = Instant::now();
        let activity = Activity::new(accepted);
        activity.authenticate();
        let idle = limits().idle_timeout;
        assert_eq!(activity.closing(&limits(), accepted + idle), Ok(Closure::Idle));
        let watch = activity.stream_started();
        // Busy: looked at again an idle timeout later, never closed.
        let later = accepted + idle * 3;
        assert_eq!(activity.closing(&limits(), later), Err(later + idle));
        // Idle from the end of the call: from the drop, which comes after
        // `ended` (stored in whole milliseconds, up to one early). A bound
        // taken after the call instead would count the time in between,
        // however long a loaded machine makes it.
        let ended = Instant::now();
        drop(watch);
        let now = Instant::now();
        let Err(next) = activity.closing(&limits(), now) else { panic!("a call just ended") };
        assert!(next + Duration::from_millis(1) >= ended + idle, "idle counts from the end of the last call");
    }
}
