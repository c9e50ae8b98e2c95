//! Connections to a node's gRPC port, from accept to close: the pools they
//! count against ([`ConnectionTable`]), the authentication deadline and the
//! idle timeout ([`Activity`]), each bound named in [`crate::limits`].
//!
//! - **At accept**, before the TLS handshake allocates anything, a
//!   connection takes a [`Slot`] in the unauthenticated [`Pool`], counted
//!   by its source's shares (its IPv4 address and /24, or its IPv6 /64).
//!   When a share or the pool is full the oldest unauthenticated connection
//!   of the narrowest full share is evicted to make room
//!   ([`ConnectionTable`] says why not the newcomer); a connection is
//!   refused at accept only when the node holds
//!   [`ConnectionLimits::connections_max`] connections.
//! - **When it authenticates** (a client certificate at the handshake, a
//!   call with a token, a Raft call) it moves to the authenticated or the
//!   peer pool, whose room no unauthenticated connection can take.
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

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::task::AtomicWaker;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{oneshot, watch, Notify};
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tonic::body::Body;
use tonic::codegen::http::{Extensions, Request, Response};
use tonic::codegen::Service;
use tonic::transport::server::Connected;

use crate::limits::{AUTH_DEADLINE, CLOSE_GRACE, CONNECTIONS_MAX, CONNECTIONS_PER_SOURCE_MAX, DESCRIPTORS_RESERVED};
use crate::limits::{CONNECTIONS_PER_PREFIX_MAX, PEER_CONNECTIONS_MAX, UNAUTHENTICATED_CONNECTIONS_MAX};
use crate::limits::{CONNECTION_TIMEOUT_MAX, IDLE_TIMEOUT, LISTEN_BACKLOG};
use crate::metrics::Metrics;
use crate::peer::Peer;

/// The connection bounds of one node ([`crate::limits`] by default; `gavel
/// node --auth-deadline-ms --idle-timeout-ms --connections-max
/// --unauthenticated-connections-max --connections-per-source-max
/// --connections-per-prefix-max`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// From accept to the TLS handshake's end and the first authenticated call.
    pub auth_deadline: Duration,
    /// How long a connection may carry no call.
    pub idle_timeout: Duration,
    /// Connections open at once (lowered under the descriptor limit, [`connections_max_under`]).
    pub connections_max: usize,
    /// Unauthenticated connections at once (at most half of `connections_max`).
    pub unauthenticated_max: usize,
    /// Unauthenticated connections at once from one IPv4 address.
    pub connections_per_source_max: usize,
    /// Unauthenticated connections at once from one IPv4 /24 or IPv6 /64.
    pub connections_per_prefix_max: usize,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            auth_deadline: AUTH_DEADLINE,
            idle_timeout: IDLE_TIMEOUT,
            connections_max: CONNECTIONS_MAX,
            unauthenticated_max: UNAUTHENTICATED_CONNECTIONS_MAX,
            connections_per_source_max: CONNECTIONS_PER_SOURCE_MAX,
            connections_per_prefix_max: CONNECTIONS_PER_PREFIX_MAX,
        }
    }
}

/// Why a connection was closed at accept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The node holds [`ConnectionLimits::connections_max`] connections
    /// (every pool full, or evicted ones not yet gone).
    Overall,
}

impl Refusal {
    /// The `reason` label of `gavel_connections_refused_total`.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::Overall => "overall",
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
    /// It was the oldest unauthenticated connection of a full share, and a new one needed its room.
    Evicted,
    /// It authenticated into a pool that was full.
    PoolFull,
}

impl Closure {
    /// The `reason` label of `gavel_connections_closed_total`.
    pub fn as_str(self) -> &'static str {
        match self {
            Closure::AuthDeadline => "auth_deadline",
            Closure::Idle => "idle",
            Closure::Evicted => "evicted",
            Closure::PoolFull => "pool_full",
        }
    }
}

/// The pool an open connection counts against. Every connection starts
/// unauthenticated and moves out when it authenticates, so that whoever
/// fills the unauthenticated pool takes no room from the cluster or from
/// principals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Pool {
    /// Accepted, not yet authenticated (in its TLS handshake, or waiting for
    /// its first authenticated call).
    Unauthenticated,
    /// Authenticated as a principal (a client certificate, or a call with a token).
    Authenticated,
    /// A cluster member's: a node certificate, or a Raft call.
    Peer,
}

impl Pool {
    const ALL: [Pool; 3] = [Pool::Unauthenticated, Pool::Authenticated, Pool::Peer];

    /// The `pool` label of the `gavel_connections_pool_*` metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Pool::Unauthenticated => "unauthenticated",
            Pool::Authenticated => "authenticated",
            Pool::Peer => "peer",
        }
    }

    fn index(self) -> usize {
        match self {
            Pool::Unauthenticated => 0,
            Pool::Authenticated => 1,
            Pool::Peer => 2,
        }
    }
}

/// Which share of the unauthenticated pool was full when a connection was
/// evicted to make room for a new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Eviction {
    /// The new connection's IPv4 address held [`ConnectionLimits::connections_per_source_max`].
    Address,
    /// Its IPv4 /24 or IPv6 /64 held [`ConnectionLimits::connections_per_prefix_max`].
    Prefix,
    /// The pool held [`ConnectionLimits::unauthenticated_max`].
    Pool,
}

impl Eviction {
    /// The `share` label of `gavel_connections_pool_evicted_total`.
    pub fn as_str(self) -> &'static str {
        match self {
            Eviction::Address => "address",
            Eviction::Prefix => "prefix",
            Eviction::Pool => "pool",
        }
    }
}

/// A source's shares of the unauthenticated pool: an IPv4 address and its
/// /24, or an IPv6 /64 (one host or one network can hold as many addresses
/// as it likes inside a /64, so the /64 is the narrowest share worth counting).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Share {
    Address([u8; 4]),
    Prefix24([u8; 3]),
    Prefix64([u8; 8]),
}

/// The shares `source` counts against: its address share (IPv4 only) and
/// its prefix share. An IPv4-mapped IPv6 address counts as the IPv4 one.
fn shares(source: IpAddr) -> (Option<Share>, Share) {
    match source.to_canonical() {
        IpAddr::V4(address) => {
            let [a, b, c, d] = address.octets();
            (Some(Share::Address([a, b, c, d])), Share::Prefix24([a, b, c]))
        }
        IpAddr::V6(address) => {
            let octets = address.octets();
            let mut prefix = [0u8; 8];
            prefix.copy_from_slice(&octets[..8]);
            (None, Share::Prefix64(prefix))
        }
    }
}

/// The caps of each pool, from [`ConnectionLimits`]: the unauthenticated
/// pool at most half of `connections_max`, the peers' at most
/// [`PEER_CONNECTIONS_MAX`] and an eighth of it, the authenticated pool the
/// rest; every cap at least one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PoolCaps {
    connections_max: usize,
    pools: [usize; 3],
    per_address_max: usize,
    per_prefix_max: usize,
}

impl PoolCaps {
    fn of(limits: &ConnectionLimits) -> PoolCaps {
        let connections_max = limits.connections_max.max(3);
        let unauthenticated = limits.unauthenticated_max.clamp(1, connections_max / 2);
        let peers = PEER_CONNECTIONS_MAX.clamp(1, (connections_max / 8).max(1));
        let authenticated = connections_max - unauthenticated - peers;
        PoolCaps {
            connections_max,
            pools: [unauthenticated, authenticated.max(1), peers],
            per_address_max: limits.connections_per_source_max.max(1),
            per_prefix_max: limits.connections_per_prefix_max.max(1),
        }
    }
}

/// An unauthenticated connection's place in eviction order: one that has
/// not finished its TLS handshake goes before one that has (an attacker's
/// raw connections cost it nothing; a finished handshake cost it CPU), and
/// the older before the newer.
type EvictionKey = (bool, u64);

/// The connections open on a node, in their pools ([`Pool`]); the
/// unauthenticated ones also by source share, in eviction order.
///
/// A new connection is never refused for its share or its pool being full:
/// the oldest unauthenticated connection of the narrowest full share (its
/// IPv4 address, then its /24 or IPv6 /64, then the whole pool) is closed
/// to make room. A legitimate client often shares a prefix with whoever
/// fills it (a NAT, a cloud network, loopback in the tests); refusing the
/// newcomer would refuse it, while evicting the oldest gives it the time
/// the attacker needs to open a whole share of connections to finish its
/// handshake and authenticate, and an attacker holding connections it
/// never authenticates gains nothing by holding them longer.
#[derive(Debug)]
pub struct ConnectionTable {
    caps: PoolCaps,
    pools: Mutex<Pools>,
    metrics: Arc<Metrics>,
    /// Connections closed since the node started.
    closed: AtomicUsize,
}

/// What [`ConnectionTable`] counts under its lock.
#[derive(Debug, Default)]
struct Pools {
    next_id: u64,
    /// Connections with a [`Slot`]: those in the pools and evicted ones not yet gone.
    held: usize,
    /// Connections counted in each pool ([`Pool::index`]).
    open: [usize; 3],
    members: HashMap<u64, Member>,
    /// The unauthenticated connections in eviction order.
    unauthenticated: BTreeSet<EvictionKey>,
    /// The same, by share.
    by_share: HashMap<Share, BTreeSet<EvictionKey>>,
}

/// One connection in a pool.
#[derive(Debug)]
struct Member {
    pool: Pool,
    source: IpAddr,
    handshaken: bool,
    activity: Weak<Activity>,
}

impl Pools {
    fn share_count(&self, share: &Share) -> usize {
        self.by_share.get(share).map_or(0, BTreeSet::len)
    }

    fn oldest_in(&self, share: &Share) -> Option<u64> {
        self.by_share.get(share).and_then(|keys| keys.first()).map(|(_, id)| *id)
    }

    /// Takes an unauthenticated member out of the eviction order.
    fn unlist(&mut self, id: u64, member: &Member) {
        let key = (member.handshaken, id);
        self.unauthenticated.remove(&key);
        let (address, prefix) = shares(member.source);
        for share in address.into_iter().chain([prefix]) {
            if let Some(keys) = self.by_share.get_mut(&share) {
                keys.remove(&key);
                if keys.is_empty() {
                    // Sources come and go: keep only those with connections open.
                    self.by_share.remove(&share);
                }
            }
        }
    }

    /// Puts an unauthenticated member into the eviction order.
    fn list(&mut self, id: u64, member: &Member) {
        let key = (member.handshaken, id);
        self.unauthenticated.insert(key);
        let (address, prefix) = shares(member.source);
        for share in address.into_iter().chain([prefix]) {
            self.by_share.entry(share).or_default().insert(key);
        }
    }

    /// Takes member `id` out of its pool (and the table); its slot stays held.
    fn remove(&mut self, id: u64) -> Option<Member> {
        let member = self.members.remove(&id)?;
        if member.pool == Pool::Unauthenticated {
            self.unlist(id, &member);
        }
        self.open[member.pool.index()] -= 1;
        Some(member)
    }
}

impl ConnectionTable {
    /// A table under `limits` (its caps per pool from them), counting into `metrics`.
    pub fn new(limits: &ConnectionLimits, metrics: Arc<Metrics>) -> Arc<ConnectionTable> {
        let table = Arc::new(ConnectionTable {
            caps: PoolCaps::of(limits),
            pools: Mutex::new(Pools::default()),
            metrics,
            closed: AtomicUsize::new(0),
        });
        for pool in Pool::ALL {
            table.metrics.set_connection_pool_open(pool.as_str(), 0);
        }
        table
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pools> {
        self.pools.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A slot in the unauthenticated pool for `activity`, a connection from
    /// `source`, held until the connection closes; room is made by evicting
    /// the oldest unauthenticated connection of the narrowest full share
    /// ([`ConnectionTable`]). Refused only when the node holds
    /// `connections_max` connections.
    pub fn admit(self: &Arc<Self>, source: IpAddr, activity: &Arc<Activity>) -> Result<Slot, Refusal> {
        let mut pools = self.lock();
        if pools.held >= self.caps.connections_max {
            drop(pools);
            self.metrics.count_connection_pool_refused(Pool::Unauthenticated.as_str());
            return Err(Refusal::Overall);
        }
        let (address, prefix) = shares(source);
        let full = match address {
            Some(address) if pools.share_count(&address) >= self.caps.per_address_max => {
                Some((Eviction::Address, pools.oldest_in(&address)))
            }
            _ if pools.share_count(&prefix) >= self.caps.per_prefix_max => {
                Some((Eviction::Prefix, pools.oldest_in(&prefix)))
            }
            _ if pools.open[Pool::Unauthenticated.index()] >= self.caps.pools[Pool::Unauthenticated.index()] => {
                Some((Eviction::Pool, pools.unauthenticated.first().map(|(_, id)| *id)))
            }
            _ => None,
        };
        // A full share holds at least one connection (every cap is at least one).
        let evicted = full.and_then(|(why, id)| Some((why, pools.remove(id?)?)));
        let id = pools.next_id;
        pools.next_id += 1;
        let member =
            Member { pool: Pool::Unauthenticated, source, handshaken: false, activity: Arc::downgrade(activity) };
        pools.list(id, &member);
        pools.members.insert(id, member);
        pools.open[Pool::Unauthenticated.index()] += 1;
        pools.held += 1;
        let unauthenticated = pools.open[Pool::Unauthenticated.index()];
        drop(pools);
        self.metrics.set_connection_pool_open(Pool::Unauthenticated.as_str(), unauthenticated);
        if let Some((why, victim)) = evicted {
            self.metrics.count_connection_evicted(Pool::Unauthenticated.as_str(), why.as_str());
            self.metrics.count_connection_closed(Closure::Evicted.as_str());
            if let Some(activity) = victim.activity.upgrade() {
                activity.close_now(Closure::Evicted);
            }
        }
        let _ = activity.membership.set((self.clone(), id));
        Ok(Slot { table: self.clone(), id })
    }

    /// Notes that connection `id` finished its TLS handshake: it goes after
    /// those that have not in eviction order.
    fn handshaken(&self, id: u64) {
        let mut pools = self.lock();
        let Some(mut member) = pools.members.remove(&id) else { return };
        if member.pool == Pool::Unauthenticated && !member.handshaken {
            pools.unlist(id, &member);
            member.handshaken = true;
            pools.list(id, &member);
        }
        pools.members.insert(id, member);
    }

    /// Moves connection `id` out of the unauthenticated pool into `pool`;
    /// `false` when `pool` is full (counted) or the connection was evicted.
    fn promote(&self, id: u64, pool: Pool) -> bool {
        let mut pools = self.lock();
        let Some(current) = pools.members.get(&id).map(|member| member.pool) else { return false };
        if current != Pool::Unauthenticated || pool == Pool::Unauthenticated {
            return true;
        }
        if pools.open[pool.index()] >= self.caps.pools[pool.index()] {
            drop(pools);
            self.metrics.count_connection_pool_refused(pool.as_str());
            return false;
        }
        let Some(mut member) = pools.remove(id) else { return false };
        member.pool = pool;
        pools.open[pool.index()] += 1;
        pools.members.insert(id, member);
        let open = pools.open;
        drop(pools);
        self.metrics.set_connection_pool_open(Pool::Unauthenticated.as_str(), open[Pool::Unauthenticated.index()]);
        self.metrics.set_connection_pool_open(pool.as_str(), open[pool.index()]);
        true
    }

    /// Connections open now (handshaking or served), evicted ones not yet gone included.
    pub fn open(&self) -> usize {
        self.lock().held
    }

    /// Connections counted in `pool` now.
    pub fn open_in(&self, pool: Pool) -> usize {
        self.lock().open[pool.index()]
    }

    /// Connections closed since the table was made.
    pub fn closed(&self) -> usize {
        self.closed.load(Ordering::Relaxed)
    }

    fn release(&self, id: u64) {
        self.closed.fetch_add(1, Ordering::Relaxed);
        let mut pools = self.lock();
        pools.held -= 1;
        let Some(member) = pools.remove(id) else { return };
        let open = pools.open[member.pool.index()];
        drop(pools);
        self.metrics.set_connection_pool_open(member.pool.as_str(), open);
    }
}

/// One connection's place in its [`ConnectionTable`], given back on drop.
#[derive(Debug)]
pub struct Slot {
    table: Arc<ConnectionTable>,
    id: u64,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.table.release(self.id);
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
    /// Its table and its id there, once admitted.
    membership: OnceLock<(Arc<ConnectionTable>, u64)>,
    /// Why the table closed it at once, if it did ([`Activity::close_now`]).
    closed_now: OnceLock<Closure>,
    /// Wakes whoever waits on the connection when `closed_now` is set.
    closing_now: Notify,
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
            membership: OnceLock::new(),
            closed_now: OnceLock::new(),
            closing_now: Notify::new(),
        })
    }

    /// Marks the connection authenticated, into `pool`: the authentication
    /// deadline no longer applies, and it leaves the unauthenticated pool.
    /// When `pool` is full the connection is closed instead
    /// ([`Closure::PoolFull`]).
    pub fn authenticate(&self, pool: Pool) {
        if self.is_authenticated() {
            return;
        }
        let admitted = self.membership.get().is_none_or(|(table, id)| table.promote(*id, pool));
        if admitted {
            self.authenticated.store(true, Ordering::Relaxed);
        } else if self.closed_now.get().is_none() {
            if let Some((table, _)) = self.membership.get() {
                table.metrics.count_connection_closed(Closure::PoolFull.as_str());
            }
            self.close_now(Closure::PoolFull);
        }
    }

    /// Closes the connection at once for `closure` (the table evicted it, or
    /// its pool was full): whoever serves it stops waiting.
    fn close_now(&self, closure: Closure) {
        if self.closed_now.set(closure).is_ok() {
            self.closing_now.notify_one();
        }
    }

    /// Waits until the table closes the connection at once.
    async fn closed_now(&self) -> Closure {
        loop {
            if let Some(closure) = self.closed_now.get() {
                return *closure;
            }
            self.closing_now.notified().await;
        }
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
        if let Some(closure) = self.closed_now.get() {
            return Ok(*closure);
        }
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
                Err(next) => tokio::select! {
                    () = tokio::time::sleep_until(next.into()) => {}
                    closure = self.closed_now() => return closure,
                },
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

/// Marks the connection a request came on authenticated into `pool` (the
/// routing layer calls it once it authenticated a call or admitted a Raft
/// call); nothing for a request that came another way (an in-process test).
pub fn mark_authenticated(extensions: &Extensions, pool: Pool) {
    if let Some(info) = extensions.get::<ConnectionInfo>() {
        info.activity.authenticate(pool);
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
        if let Some((table, id)) = activity.membership.get() {
            table.handshaken(*id);
        }
        if matches!(peer, Peer::Certified(_)) {
            // A node certificate is the cluster's; the membership is checked
            // at each Raft call.
            activity.authenticate(if peer.node_id().is_some() { Pool::Peer } else { Pool::Authenticated });
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
        let activity = Activity::new(Instant::now());
        let slot = match acceptor.table.admit(source.ip(), &activity) {
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
    let handshake = tokio::select! {
        handshake = tokio::time::timeout_at(deadline.into(), tls.accept(tcp).into_fallible()) => handshake,
        // Evicted in its handshake: counted by the table, closed here.
        _ = activity.closed_now() => return None,
    };
    match handshake {
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
    if activity.closed_now.get().is_some() {
        // Evicted (or its pool full) before it was served: counted by the table.
        return;
    }
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
        // The table counted those it closed at once.
        if activity.closed_now.get().is_none() {
            acceptor.metrics.count_connection_closed(closure.as_str());
        }
    }
    let _ = close.send(());
    if closure == Some(Closure::Evicted) {
        // Never authenticated: only a health or reflection call can be in
        // flight, and its room is already another connection's.
        activity.cut();
    }
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
                if activity.streams() == 0
                    || closure.is_none_or(|closure| matches!(closure, Closure::AuthDeadline | Closure::Evicted))
                {
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

    fn limits_of(
        connections_max: usize,
        unauthenticated_max: usize,
        per_source: usize,
        per_prefix: usize,
    ) -> ConnectionLimits {
        ConnectionLimits {
            connections_max,
            unauthenticated_max,
            connections_per_source_max: per_source,
            connections_per_prefix_max: per_prefix,
            ..ConnectionLimits::default()
        }
    }

    /// A connection from `source` admitted to `table`, with its activity.
    fn admitted(table: &Arc<ConnectionTable>, source: IpAddr) -> (Slot, Arc<Activity>) {
        let activity = Activity::new(Instant::now());
        let slot = table.admit(source, &activity).expect("admitted");
        (slot, activity)
    }

    fn evicted(activity: &Activity) -> bool {
        activity.closed_now.get() == Some(&Closure::Evicted)
    }

    #[test]
    fn a_full_address_share_evicts_its_oldest_unauthenticated_connection_not_the_newcomer() {
        let table = ConnectionTable::new(&limits_of(100, 50, 2, 10), Arc::new(Metrics::new()));
        let first = admitted(&table, address(2));
        let second = admitted(&table, address(2));
        let third = admitted(&table, address(2));
        assert!(evicted(&first.1), "the oldest of the full address share is evicted");
        assert!(!evicted(&second.1) && !evicted(&third.1));
        assert_eq!(table.open_in(Pool::Unauthenticated), 2);
        // Its slot is held until its connection is gone.
        assert_eq!(table.open(), 3);
        drop(first);
        assert_eq!(table.open(), 2);
        // Another address of the /24 has its own address share.
        let other = admitted(&table, address(3));
        assert!(!evicted(&other.1) && !evicted(&second.1));
    }

    #[test]
    fn a_full_prefix_evicts_its_oldest_and_a_finished_handshake_is_evicted_after_those_without() {
        let table = ConnectionTable::new(&limits_of(100, 50, 10, 4), Arc::new(Metrics::new()));
        let handshaken = admitted(&table, address(2));
        table.handshaken(table_id(&handshaken.1));
        let raw: Vec<_> = (3..6).map(|last| admitted(&table, address(last))).collect();
        // Another /24 counts apart.
        let elsewhere = admitted(&table, IpAddr::from([10, 0, 0, 1]));
        // The /24 holds four: a newcomer from it evicts the oldest raw one,
        // not the older connection that finished its handshake.
        let newcomer = admitted(&table, address(1));
        assert!(evicted(&raw[0].1));
        assert!(!evicted(&handshaken.1) && !evicted(&raw[1].1) && !evicted(&elsewhere.1) && !evicted(&newcomer.1));
        assert_eq!(table.open_in(Pool::Unauthenticated), 5);
    }

    #[test]
    fn a_full_pool_evicts_its_oldest_and_an_ipv6_64_is_one_share() {
        let table = ConnectionTable::new(&limits_of(100, 3, 10, 2), Arc::new(Metrics::new()));
        let v6 = |last: u16| IpAddr::from([0x2001, 0xdb8, 0, 1, 0, 0, 0, last]);
        let first = admitted(&table, v6(1));
        let second = admitted(&table, v6(2));
        let third = admitted(&table, v6(3));
        assert!(evicted(&first.1), "two addresses of one /64 share its share of two");
        let fourth = admitted(&table, address(9));
        assert!(!evicted(&second.1), "the pool holds three");
        let fifth = admitted(&table, address(10));
        assert!(evicted(&second.1), "the pool of three was full: its oldest goes");
        assert!(!evicted(&third.1) && !evicted(&fourth.1) && !evicted(&fifth.1));
        // An IPv4-mapped address is its IPv4 address.
        assert_eq!(shares("::ffff:127.0.0.9".parse().expect("an address")), shares(address(9)));
    }

    fn table_id(activity: &Activity) -> u64 {
        activity.membership.get().expect("admitted").1
    }

    #[test]
    fn authenticated_and_peer_connections_leave_the_unauthenticated_pool_and_are_never_evicted() {
        let table = ConnectionTable::new(&limits_of(100, 2, 2, 2), Arc::new(Metrics::new()));
        let peer = admitted(&table, address(1));
        peer.1.authenticate(Pool::Peer);
        let client = admitted(&table, address(1));
        client.1.authenticate(Pool::Authenticated);
        assert_eq!([Pool::Unauthenticated, Pool::Authenticated, Pool::Peer].map(|pool| table.open_in(pool)), [0, 1, 1]);
        // A fill of the unauthenticated pool from the same address evicts only its own.
        let fill: Vec<_> = (0..10).map(|_| admitted(&table, address(1))).collect();
        assert!(!evicted(&peer.1) && !evicted(&client.1));
        assert_eq!(fill.iter().filter(|(_, activity)| evicted(activity)).count(), 8);
        assert!(peer.1.is_authenticated() && client.1.is_authenticated());
        // An evicted connection authenticates into nothing.
        fill[0].1.authenticate(Pool::Authenticated);
        assert!(!fill[0].1.is_authenticated());
    }

    #[test]
    fn a_full_authenticated_pool_closes_the_connection_that_authenticates_into_it() {
        // 24 connections: 12 unauthenticated, 3 peers, 9 authenticated.
        let table = ConnectionTable::new(&limits_of(24, 100, 100, 100), Arc::new(Metrics::new()));
        let clients: Vec<_> = (0..9)
            .map(|_| {
                let (slot, activity) = admitted(&table, address(1));
                activity.authenticate(Pool::Authenticated);
                (slot, activity)
            })
            .collect();
        assert!(clients.iter().all(|(_, activity)| activity.is_authenticated()));
        let (_slot, late) = admitted(&table, address(1));
        late.authenticate(Pool::Authenticated);
        assert!(!late.is_authenticated());
        assert_eq!(late.closed_now.get(), Some(&Closure::PoolFull));
        // The peers' pool has its own room.
        let (_peer_slot, peer) = admitted(&table, address(1));
        peer.authenticate(Pool::Peer);
        assert!(peer.is_authenticated());
    }

    #[test]
    fn the_node_refuses_at_accept_only_when_it_holds_connections_max() {
        let table = ConnectionTable::new(&limits_of(6, 3, 10, 10), Arc::new(Metrics::new()));
        let mut held: Vec<_> = (0..6).map(|_| admitted(&table, address(2))).collect();
        // Three evicted, not yet gone: six held.
        assert_eq!(table.open(), 6);
        let activity = Activity::new(Instant::now());
        assert_eq!(table.admit(address(3), &activity).map(|_| ()), Err(Refusal::Overall));
        held.retain(|(_, activity)| !evicted(activity));
        admitted(&table, address(3));
    }

    #[test]
    fn shares_whose_connections_all_closed_are_forgotten() {
        let table = ConnectionTable::new(&limits_of(100, 50, 10, 10), Arc::new(Metrics::new()));
        let slots: Vec<_> = (0..4).map(|_| admitted(&table, address(7))).collect();
        drop(slots);
        assert_eq!(table.open(), 0);
        let pools = table.lock();
        assert!(pools.by_share.is_empty() && pools.members.is_empty() && pools.unauthenticated.is_empty());
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
        activity.authenticate(Pool::Authenticated);
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
        activity.authenticate(Pool::Authenticated);
        assert!(activity.closing(&limits(), accepted + Duration::from_secs(10)).is_err());
    }

    #[test]
    fn an_authenticated_connection_closes_only_after_the_idle_timeout_with_no_call_in_flight() {
        let accepted = Instant::now();
        let activity = Activity::new(accepted);
        activity.authenticate(Pool::Authenticated);
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
