//! The bounds a node puts on the work it accepts at once, each with its
//! reason. [`crate::overload`] enforces them at the routing layer, before a
//! handler runs and so before anything reaches the Raft log; `gavel node`
//! can change each one (`--proposals-in-flight-max`, `--long-polls-max`,
//! `--reads-in-flight-max`). The connection bounds below are enforced even
//! earlier, by [`crate::connections`]: at accept, before the TLS handshake
//! allocates anything, and on each open connection (`--auth-deadline-ms`,
//! `--idle-timeout-ms`, `--connections-max`, `--unauthenticated-connections-max`,
//! `--connections-per-source-max`, `--connections-per-prefix-max`).

use std::time::Duration;

/// Public calls that propose a command, served or forwarded by this node at
/// once. Past it a call is refused `RESOURCE_EXHAUSTED` at once rather than
/// queued: openraft's proposal queue is unbounded, and every waiting
/// proposal holds its request, its future and its share of the next batch,
/// so a queue without a bound is memory and latency without a bound. The
/// leader batches what is waiting into one append, and its throughput stops
/// growing at a few dozen concurrent proposals; past that, more in flight is
/// only more waiting. 64 keeps batches of up to 64 commands per append
/// while an admitted proposal waits behind no more than 64 busy clients
/// cause (`tests/overload.rs` measures both).
pub const PROPOSALS_IN_FLIGHT_MAX: usize = 64;

/// How much of [`PROPOSALS_IN_FLIGHT_MAX`], in percent, may be taken
/// before a principal that holds its fair share of it (the bound divided
/// among the principals with proposals in flight) is refused
/// (`crate::overload::shed`). The rest, a quarter, stays for principals
/// within their share, so that a light principal's writes are admitted
/// while a heavy one floods.
pub const PROPOSALS_CONTENDED_PERCENT: usize = 75;

/// How much of [`PROPOSALS_IN_FLIGHT_MAX`], in percent (rounded up, at
/// least one slot of a bound above one), a principal alone with proposals
/// in flight leaves free: the door a second principal comes in by. Once it
/// is in, two principals share the bound and the first is shed past
/// [`PROPOSALS_CONTENDED_PERCENT`]. Counting a lone principal as one of two
/// (decision 0095 as first built) kept a quarter of the bound from an app
/// backend that is the only caller, the setup the READMEs recommend: its
/// 64 concurrent calls were refused past 48 (about 1,400 SDK retries per
/// 10 s run of `gavel-lab bench --clients 64`, docs/performance.md).
pub const PROPOSALS_KEPT_FOR_NEWCOMERS_PERCENT: usize = 6;

/// Long-polls (`WorkerService/Poll` and `ReportAndPoll`,
/// `ExecutionService/WaitExecution` and `ResumeAndWait`,
/// `ApprovalService/WaitApproval`) waiting on this node at once. A long-poll costs little while it waits (a
/// parked task and a watch receiver), but each holds an HTTP/2 stream for up
/// to `WAIT_MS_MAX`, so the bound is larger than the proposals' and still
/// finite.
pub const LONG_POLLS_MAX: usize = 1024;

/// Linearizable reads (`Get*`, `List*`, `WhoAmI`) served or forwarded by
/// this node at once. Each waits for a read barrier (a heartbeat round) and
/// then holds the state lock to copy its answer; a list can copy a page of
/// records, so reads get their own bound instead of sharing the proposals'.
pub const READS_IN_FLIGHT_MAX: usize = 512;

/// The most `--proposals-in-flight-max`, `--long-polls-max` and
/// `--reads-in-flight-max` accept. Each bound is a semaphore, which holds at
/// most 2^61 permits: a larger flag made the node panic as it started
/// (found 2026-12-07), and the shedding rule multiplies the bound by a
/// percentage. A million calls in flight on one node is far past what it
/// serves; the flag is refused as a usage error above it.
pub const IN_FLIGHT_FLAG_MAX: u64 = 1_000_000;

/// The shortest `retry_after_ms` an overload refusal carries. The hint is
/// steered towards one refusal per admission (`crate::overload`), never
/// below the recent time a call of that kind held its slot (a slot frees
/// when one batch commits, so that is about when a retry can get in) nor
/// below this; the SDK adds jitter and backs off further on repeated
/// refusals.
pub const OVERLOAD_RETRY_AFTER_MS_MIN: u64 = 50;

/// The longest `retry_after_ms` an overload refusal carries. The hint grows
/// while more attempts are refused than admitted, so it reaches this only
/// when some hundred callers wait for every slot held 100 ms (2,000
/// callers against 64 slots are about thirty, asked back after about 3 s):
/// then each waiting caller must come back rarely, or their retries cost
/// more CPU than the calls admitted (`tests/overload.rs`). 10 s keeps a
/// refused SDK call within its default 20 s retry budget for one more try,
/// and a long-poll's hold time (its whole wait) is no measure of when a
/// slot frees.
pub const OVERLOAD_RETRY_AFTER_MS_MAX: u64 = 10_000;

/// How long, at most, a follower refuses calls of one kind itself after the
/// leader refused one it forwarded (`crate::overload`): half the leader's
/// `retry_after_ms`, never more than this. Without it a follower would carry
/// every retry to an overloaded leader and back, the most expensive way to
/// be refused; with it the leader hears again from the follower's callers
/// within a second.
pub const LEADER_PUSHBACK_MS_MAX: u64 = 1_000;

/// How long a new connection has to authenticate, counted from its accept:
/// its TLS handshake must finish within it, and a connection whose client
/// certificate names no principal must carry a call the node authenticated
/// (a bearer token; on an insecure node, any public call) within it too, or
/// the node closes it (`GOAWAY`, then the socket). Before it authenticates, a
/// connection is someone the node does not know holding a socket, a TLS
/// session and an HTTP/2 connection; 10 s is long enough for a handshake
/// and a first call over a slow link (an SDK sends its first call right
/// after connecting) and short enough that an attacker must keep opening
/// connections to keep holding any.
pub const AUTH_DEADLINE: Duration = Duration::from_secs(10);

/// How long an authenticated connection may carry no call (no HTTP/2 stream
/// in flight: a unary call, a long-poll, a `WatchEvents` or `WaitExecution`
/// stream, a Raft message) before the node closes it with `GOAWAY`. Every
/// open connection costs the node memory and a descriptor; a client that
/// went quiet reconnects on its next call (tonic channels and the SDKs do
/// so by themselves). Raft peers never reach it: the leader's heartbeats
/// (every 100 ms by default) keep its connections busy, and a follower's
/// forwarding connection that went quiet is re-opened on the next forward.
/// 5 minutes keeps a client that calls every few minutes on one connection.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// The longest authentication deadline or idle timeout `gavel node`
/// accepts (`--auth-deadline-ms`, `--idle-timeout-ms`): one day. A longer
/// one is as good as none (the caps still bound the connections), and a
/// flag that large is more likely a mistake in units.
pub const CONNECTION_TIMEOUT_MAX: Duration = Duration::from_secs(24 * 60 * 60);

/// Connections open on one node at once, from anyone, counting those still
/// in their TLS handshake. Past it a new connection is closed at accept,
/// before its handshake. Each connection holds a file descriptor, and an
/// idle one about 39 KiB once handshaken, 12 KiB before (docs/limits.md
/// measures it), so 10,000 is at most about 400 MB and under the
/// descriptors a node raises its limit to; the node also keeps it
/// [`DESCRIPTORS_RESERVED`] under its
/// descriptor limit whatever is configured, so that its own files (the log,
/// the cold store, snapshots) and its outgoing peer connections always find a
/// descriptor.
pub const CONNECTIONS_MAX: usize = 10_000;

/// Unauthenticated connections open on one node at once from one IPv4
/// address (`--connections-per-source-max`): a new one past it evicts that
/// address's oldest unauthenticated connection (`crate::connections`). A
/// legitimate client's connection is unauthenticated only for its TLS
/// handshake and first call, milliseconds; 256 lets a few hundred clients
/// behind one NAT address reconnect at once, and keeps one address from
/// taking more than a quarter of its /24's share.
pub const CONNECTIONS_PER_SOURCE_MAX: usize = 256;

/// Unauthenticated connections open on one node at once from one IPv4 /24
/// or one IPv6 /64 (`--connections-per-prefix-max`); a new one past it
/// evicts the prefix's oldest unauthenticated connection. Counting exact
/// addresses let ten addresses of one /24 fill the whole node, and one /64
/// is as many addresses as its holder likes: the prefix is the unit an
/// attacker cannot multiply cheaply. Half of
/// [`UNAUTHENTICATED_CONNECTIONS_MAX`], so that two prefixes are needed to
/// fill the pool.
pub const CONNECTIONS_PER_PREFIX_MAX: usize = 1_024;

/// Unauthenticated connections (accepted, not yet authenticated) open on
/// one node at once (`--unauthenticated-connections-max`; at most half of
/// [`CONNECTIONS_MAX`]). A new one past it evicts the oldest in the pool.
/// The rest of [`CONNECTIONS_MAX`] is kept for connections that
/// authenticated (a principal's, a peer's), so filling this pool refuses no
/// Raft peer and no client with a valid certificate or token. An idle
/// unauthenticated connection takes 12 KiB before its handshake and 39 KiB
/// after (docs/limits.md): at most about 80 MB.
pub const UNAUTHENTICATED_CONNECTIONS_MAX: usize = 2_048;

/// Connections of cluster members (a node certificate, or a Raft call on an
/// insecure node) open on one node at once, kept apart from the principals'
/// (at most an eighth of [`CONNECTIONS_MAX`]). A peer opens a few
/// connections to each node (Raft, forwarding, snapshots); 256 is a cluster
/// of dozens of nodes with room for connections a restarted peer left behind.
pub const PEER_CONNECTIONS_MAX: usize = 256;

/// Connections the kernel holds for the node between their TCP handshake
/// and the node's accept (the `listen` backlog; Linux caps it at
/// `net.core.somaxconn`, 4096 by default since 5.4). Past it the kernel
/// drops new handshakes and clients retry them a second or more later: the
/// 1,024 the standard library and tokio ask for overflowed under a burst of
/// 2,500 connections a second, which delayed legitimate clients' connects
/// past their timeouts (`tests/connections.rs`).
pub const LISTEN_BACKLOG: u32 = 4_096;

/// File descriptors a node keeps for itself below its `RLIMIT_NOFILE`: the
/// cap on connections is lowered to leave them (or, under a limit this low,
/// half of it): the WAL segments, `cold.redb`, snapshot files being built,
/// streamed or installed, outgoing connections to peers, the metrics
/// listener's connections and the runtime's own.
pub const DESCRIPTORS_RESERVED: u64 = 1_024;

/// How long after `GOAWAY` a closed connection may stay open with no call
/// in flight before the node cuts it: a client that does not answer the
/// `GOAWAY` (or never finished its HTTP/2 preface) holds its socket no
/// longer. A call still in flight on an authenticated connection is never
/// cut; the connection is cut once it ends. A connection closed by the
/// authentication deadline is cut whatever it carries: only health and
/// reflection calls can be in flight on it, and they must not hold it open.
pub const CLOSE_GRACE: Duration = Duration::from_secs(1);
