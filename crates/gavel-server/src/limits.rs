//! The bounds a node puts on the work it accepts at once, each with its
//! reason. [`crate::overload`] enforces them at the routing layer, before a
//! handler runs and so before anything reaches the Raft log; `gavel node`
//! can change each one (`--proposals-in-flight-max`, `--long-polls-max`,
//! `--reads-in-flight-max`).

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

/// Long-polls (`WorkerService/Poll`, `ExecutionService/WaitExecution`)
/// waiting on this node at once. A long-poll costs little while it waits (a
/// parked task and a watch receiver), but each holds an HTTP/2 stream for up
/// to `WAIT_MS_MAX`, so the bound is larger than the proposals' and still
/// finite.
pub const LONG_POLLS_MAX: usize = 1024;

/// Linearizable reads (`Get*`, `List*`, `WhoAmI`) served or forwarded by
/// this node at once. Each waits for a read barrier (a heartbeat round) and
/// then holds the state lock to copy its answer; a list can copy a page of
/// records, so reads get their own bound instead of sharing the proposals'.
pub const READS_IN_FLIGHT_MAX: usize = 512;

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
