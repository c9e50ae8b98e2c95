//! Every bound Gavel enforces, one constant per bound, each with its reason.
//!
//! The gRPC edge checks these before a request becomes a command, and the
//! state machine checks them again so that a malformed command can never
//! corrupt state even if an edge forgot a check.

/// The JSON bounds live with the parser that enforces them (`gavel-json`,
/// which the client SDK shares, each with its reason there) and are named
/// here too, so that every bound is in this module: nesting depth, the
/// integer range a double holds exactly (I-JSON), and how much of a refused
/// number's literal and JSON Pointer a refusal quotes.
pub use gavel_json::{JSON_DEPTH_MAX, LITERAL_QUOTED_CHARS_MAX, POINTER_QUOTED_CHARS_MAX, SAFE_INTEGER_MAX};

/// Longest id (approval, execution, capability, worker, actor, request id), in bytes.
/// Ids are keys of ordered maps and appear in every audit event; 128 bytes fits
/// UUIDs, ULIDs and dotted capability names with room to spare.
pub const ID_BYTES_MAX: usize = 128;

/// Largest JSON input of an execution or approval, in bytes. Inputs are stored
/// in the replicated log and in every snapshot; 64 KiB keeps one log entry small
/// while fitting any realistic tool-call argument object.
pub const INPUT_BYTES_MAX: usize = 64 * 1024;

/// Largest JSON output a worker may report, in bytes. Outputs are kept until
/// retention drops the execution, so they are bounded like inputs, with more
/// room because tool results are often larger than their arguments.
pub const OUTPUT_BYTES_MAX: usize = 256 * 1024;

/// Longest free-text field (error message, comment, surface, display name), in bytes.
pub const TEXT_BYTES_MAX: usize = 4 * 1024;

/// Most items in any list carried by a command (reasons, types, tags, queues,
/// non-retryable codes). Lists are copied into records and scanned on apply.
pub const LIST_ITEMS_MAX: usize = 64;

/// Most entries in an attributes map (an actor's, or an application event's).
/// Attributes are copied into every record that names the actor and into
/// every snapshot; 32 fits a tenant, a role, a session and the like with room
/// to spare, while keeping the worst case (32 × ([`ATTRIBUTE_KEY_BYTES_MAX`] +
/// [`ATTRIBUTE_VALUE_BYTES_MAX`]), about 36 KiB) below one input.
pub const ATTRIBUTES_MAX: usize = 32;

/// Longest attribute key, in bytes. Keys are names, like ids.
pub const ATTRIBUTE_KEY_BYTES_MAX: usize = 128;

/// Longest attribute value, in bytes. Values are short labels or ids, not
/// documents; a document belongs in the input.
pub const ATTRIBUTE_VALUE_BYTES_MAX: usize = 1024;

/// Longest type of an application event (`RecordEvent`), in bytes. Types are
/// dotted names such as `policy.denied`, like Gavel's own.
pub const APP_EVENT_TYPE_BYTES_MAX: usize = 64;

/// Largest JSON payload of an application event, in bytes. Events live in
/// the replicated trail until retention drops them and are streamed to every
/// watcher; 16 KiB fits a policy decision or a capability description, and
/// keeps the trail's per-event cost a quarter of an input's.
pub const APP_EVENT_PAYLOAD_BYTES_MAX: usize = 16 * 1024;

/// Most tasks one poll may lease. Bounds the size of one replicated command's reply.
pub const POLL_TASKS_MAX: u32 = 64;

/// Longest long-poll wait (poll, report-and-poll, wait-for-result,
/// resume-and-wait, wait-for-decision), in milliseconds. Longer waits
/// tie up a connection without telling the caller anything new.
pub const WAIT_MS_MAX: u64 = 60_000;

/// How many lease-grant attempts of one long-poll a retried poll looks back
/// for. A poll that waits its whole [`WAIT_MS_MAX`] proposes a grant only when
/// work is ready and returns on the first non-empty grant, so few attempts
/// exist per poll; looking back further only costs lookups.
pub const REPLAYED_GRANTS_MAX: u32 = 8;

/// Longest per-attempt timeout or heartbeat timeout, in milliseconds (one day).
/// Longer bounds are almost always a unit mistake.
pub const TIMEOUT_MS_MAX: u64 = 24 * 60 * 60 * 1000;

/// Largest retry budget (additional attempts after the first).
pub const RETRY_ATTEMPTS_MAX: u32 = 100;

/// Largest base backoff, in milliseconds (one hour). The exponential backoff is
/// additionally capped by [`BACKOFF_MS_CAP`].
pub const BACKOFF_MS_MAX: u64 = 60 * 60 * 1000;

/// Cap on one computed backoff (`backoffMs × 2^(n-1)`), in milliseconds (one day),
/// so that large attempt numbers never overflow.
pub const BACKOFF_MS_CAP: u64 = 24 * 60 * 60 * 1000;

/// Longest approval validity, in milliseconds (30 days).
pub const APPROVAL_EXPIRES_IN_MS_MAX: u64 = 30 * 24 * 60 * 60 * 1000;

/// Most request ids remembered for deduplication. The table is bounded so a
/// client that never reuses ids cannot grow state without limit; the oldest
/// entries are forgotten first.
pub const DEDUP_ENTRIES_MAX: usize = 100_000;

/// How long a request id is remembered, in milliseconds (10 minutes). Client
/// retries after an ambiguous failure happen within seconds; ten minutes covers
/// a leader election and a client backoff with a wide margin.
pub const DEDUP_TTL_MS: u64 = 10 * 60 * 1000;

/// Records a list page returns when the caller names no page size
/// (`ListApprovals`, `ListExecutions`, `ListEvents`, and `gavel approval
/// list`, `gavel exec list`, `gavel audit tail`): a screenful a person can
/// read, small enough that a list costs one small read (issue #40).
pub const LIST_PAGE_DEFAULT: u32 = 50;

/// Most records one list page returns: a page size above it is refused
/// with `PAGE_SIZE_INVALID` at the edge. A page is copied under the state
/// lock and sent in one message; 1,000 records of at most 64 KiB of input
/// each stay well under the gRPC message bound.
pub const LIST_PAGE_MAX: u32 = 1_000;

/// Most events one audit page returns.
pub const EVENTS_PAGE_MAX: u32 = LIST_PAGE_MAX;

/// Most approvals one list page returns.
pub const APPROVALS_PAGE_MAX: u32 = LIST_PAGE_MAX;

/// Most records one `ListExecutions` page looks at, matching its filters
/// or not: a filter that matches few of the retained executions would
/// otherwise read all of them, from the cold store, for one page. The page
/// then ends early, with a token to continue.
pub const LIST_SCANNED_MAX: usize = 10_000;

/// Largest timestamp accepted from a caller (year 9999 in Unix milliseconds).
/// Anything larger is a unit mistake (micro- or nanoseconds).
pub const TIMESTAMP_MS_MAX: u64 = 253_402_300_799_999;

/// Most principals that hold grants. Bindings live in every replica's memory
/// and every snapshot, and an admin (or a leaked admin credential) must not
/// be able to grow them without limit; ten thousand covers every user,
/// service and worker of a large fleet.
pub const PRINCIPALS_WITH_GRANTS_MAX: usize = 10_000;

/// Most items (approval types or queues) in one grant's scope. Scopes are
/// scanned on every authorized command, so they stay short; a worker
/// serving more queues than this holds an unscoped grant.
pub const GRANT_SCOPE_ITEMS_MAX: usize = 64;

/// Largest skew a `clock` grant may allow between a caller's clock and
/// cluster time, in milliseconds (one day). A wider bound is no bound: it
/// lets a caller move an approval's expiry by more than its whole validity.
pub const CLOCK_SKEW_MS_MAX: u64 = 24 * 60 * 60 * 1000;

/// Default most pending approvals one principal may have requested (its
/// own `CreateApproval`s and the approvals its `Submit`s of an
/// approval-requiring capability created), counted until each is decided,
/// cancelled or dropped by retention. Open approvals are hot: they live in
/// every replica's memory. An attacker once created 300,000 in 110 s and
/// grew every node to 530 MB; ten thousand is far above what a person can
/// decide in an approval's validity, and an admin raises it per principal
/// (`gavel access quota set`).
pub const PENDING_APPROVALS_PER_PRINCIPAL_DEFAULT: u64 = 10_000;

/// Default most non-final executions one principal may own (those it
/// submitted, or resumed from an approval it requested). Non-final
/// executions are hot like pending approvals, but a healthy fleet keeps a
/// backlog of queued work, so the bound is ten times higher.
pub const ACTIVE_EXECUTIONS_PER_PRINCIPAL_DEFAULT: u64 = 100_000;

/// Default sustained write rate of one principal, in commands per second
/// of cluster time (the token bucket's refill). Every write costs a log
/// entry on a majority's disk; this is about half of what this project's
/// three-node cluster sustains on two cores (docs/performance.md), so one
/// principal cannot take the whole cluster by default.
pub const WRITES_PER_SECOND_DEFAULT: u64 = 1_000;

/// Default token-bucket size of one principal's writes: how many it may
/// send at once after being idle (two seconds of its rate).
pub const WRITE_BURST_DEFAULT: u64 = 2_000;

/// Largest count quota (pending approvals, non-final executions) an admin
/// may set. Above this a quota no longer bounds memory; ten million pending
/// approvals would be gigabytes per replica.
pub const QUOTA_COUNT_MAX: u64 = 10_000_000;

/// Largest write rate an admin may set, in commands per second: far above
/// what any cluster applies, so it means "unthrottled" without overflowing
/// the bucket's arithmetic (milli-tokens in a u64).
pub const QUOTA_WRITES_PER_SECOND_MAX: u64 = 1_000_000;

/// Largest write burst an admin may set (tokens in the bucket).
pub const QUOTA_WRITE_BURST_MAX: u64 = 10_000_000;

/// Most principals with a quota override. Overrides live in every replica
/// and snapshot; like [`PRINCIPALS_WITH_GRANTS_MAX`], enough for every
/// principal of a large fleet.
pub const QUOTA_OVERRIDES_MAX: usize = 10_000;

/// Hashes in one tile of the audit trail's Merkle tree (C2SP `tlog-tiles`
/// width). It bounds the tree's hot memory: per tile level, fewer than this
/// many hashes of the tile being filled (8 KiB), the full tiles being cold;
/// three levels cover 16 million events. A proof reads one tile per level
/// and rehashes at most half a tile per node.
pub const AUDIT_TILE_WIDTH: u64 = 256;

/// Most leaves one `ListLeaves` page returns. A leaf carries its event's
/// canonical bytes (a few hundred bytes, up to an application event's
/// payload), so a page is bounded like an events page.
pub const AUDIT_LEAVES_PAGE_MAX: u32 = 1_000;

/// Most nodes with a registered note key. Keys live in every replica and
/// snapshot; a cluster has 3 or 5 voters, and replaced nodes keep theirs
/// (old checkpoints name them), so 32 leaves room for years of replacements.
pub const NOTE_KEYS_MAX: usize = 32;

/// Most external witness cosignatures kept on a checkpoint. Each is a line
/// of every served checkpoint; C2SP verifiers must accept 16 signatures in
/// all, and a policy of more than a dozen witnesses is not one a log needs.
pub const WITNESS_COSIGNATURES_MAX: usize = 12;

/// Longest witness key name, in bytes (a schema-less URL such as
/// `witness.example.com/w1`).
pub const WITNESS_NAME_BYTES_MAX: usize = 256;

/// Events after which the leader proposes a new audit checkpoint (it also
/// does after [`AUDIT_CHECKPOINT_INTERVAL_MS`]). Each checkpoint costs one
/// log entry per voter (its cosignature); one per thousand events is a
/// tenth of a percent of the log.
pub const AUDIT_CHECKPOINT_EVENTS: u64 = 1_000;

/// Longest time, in ms, a new event waits for a checkpoint that covers it
/// when fewer than [`AUDIT_CHECKPOINT_EVENTS`] arrive: an auditor sees a
/// cosigned head at most this much (plus a round trip) behind.
pub const AUDIT_CHECKPOINT_INTERVAL_MS: u64 = 1_000;
/// Most approval policies (`SetPolicy`). Policies live in every replica's
/// memory and every snapshot, and each approval created looks up the one
/// that governs it; a few hundred covers every approval type and
/// capability of a large deployment.
pub const POLICIES_MAX: usize = 256;

/// Most factors in one policy. The vote assignment tries every subset of
/// factors (largest first) to meet the most of them, so the count is small:
/// 2^4 subsets; "finance AND legal AND security AND on-call" is four.
pub const POLICY_FACTORS_MAX: usize = 4;

/// Largest `k` of one factor (distinct principals it needs). Larger
/// quorums are organisational votes, not approvals; 10 keeps the vote list
/// of an approval short.
pub const FACTOR_K_MAX: u32 = 10;

/// Most principals named in one factor's group. Groups are copied into
/// the policy and scanned for each vote.
pub const FACTOR_GROUP_MAX: usize = 64;

/// Most votes (approving and denying, withdrawn ones not counted) one
/// approval holds. Votes are stored on the approval and the assignment is
/// recomputed over them on each vote; this bounds both. It is at least
/// [`POLICY_FACTORS_MAX`] × [`FACTOR_K_MAX`], so a quorum always fits.
pub const VOTES_PER_APPROVAL_MAX: usize = 48;

/// Most approval types plus capabilities one policy governs. Each is a key
/// the policy claims; an approval's lookup scans its own types only.
pub const POLICY_GOVERNS_MAX: usize = 64;

/// Most uses one standing approval covers. A standing approval trades one
/// decision for several executions; a hundred covers a batch of refunds
/// or a day of a routine job, and past it a person should look again.
pub const STANDING_USES_MAX: u32 = 100;

/// Longest window of a standing approval after its decision, in
/// milliseconds (7 days): the standing "yes" is bounded in time as well as
/// in uses, so no decision approves for ever.
pub const STANDING_WINDOW_MS_MAX: u64 = 7 * 24 * 60 * 60 * 1000;

/// Most JSON pointers a standing approval binds. Each is compared on every
/// use; a handful (an order id, a customer id, an amount) is what a person
/// can review.
pub const STANDING_POINTERS_MAX: usize = 8;
