//! Every bound of the notifier, one constant per bound, each with its reason.
//! `docs/limits.md` lists them.

use std::time::Duration;

/// Attempts of one post to one webhook (the first included) before it is
/// abandoned: enough to ride out a receiver's restart or a short outage
/// (the backoff below sums to about two minutes), few enough that one dead
/// receiver does not hold every later approval back for long.
pub const POST_ATTEMPTS_MAX: u32 = 10;

/// Longest time one post to one webhook keeps retrying, counted from its
/// first attempt: a notification that arrives later than this is stale (an
/// approval's typical window is minutes to hours), and meanwhile it holds
/// one of the [`APPROVALS_IN_FLIGHT_MAX`] places.
pub const POST_AGE_MAX: Duration = Duration::from_secs(10 * 60);

/// Deadline of one HTTP attempt, connect and TLS included: Slack answers
/// within a second; a receiver that takes longer is treated as down and the
/// post is retried.
pub const POST_TIMEOUT: Duration = Duration::from_secs(10);

/// The first retry's delay; each later one doubles it. Short, so that a
/// receiver that answered one 5xx is tried again while the approval is new.
pub const BACKOFF_BASE: Duration = Duration::from_millis(250);

/// The longest delay between two attempts (before jitter), so that a
/// receiver back from a long outage is reached within a minute.
pub const BACKOFF_MAX: Duration = Duration::from_secs(60);

/// The longest `Retry-After` honoured; a longer one is cut to this, so a
/// receiver cannot park the notifier for hours with one header.
pub const RETRY_AFTER_MAX: Duration = Duration::from_secs(120);

/// Bytes of a webhook's answer read (and dropped): Slack answers `ok`; a
/// receiver cannot make the notifier buffer more than this.
pub const RESPONSE_BYTES_MAX: usize = 64 * 1024;

/// Webhooks one notifier posts to: each approval is posted to every one,
/// so the count multiplies the posts (and the state kept per post in flight).
pub const WEBHOOKS_MAX: usize = 8;

/// Posts per second to a Slack webhook, the default of
/// `--slack-posts-per-second`: Slack's documented limit for posting
/// messages, incoming webhooks included, is one message per second, with
/// short bursts allowed but not guaranteed; past it Slack answers 429 with
/// a `Retry-After` (<https://api.slack.com/docs/rate-limits>). The notifier
/// keeps to the steady rate and relies on no burst.
pub const SLACK_POSTS_PER_SECOND: f64 = 1.0;

/// Posts per second to a generic webhook, the default of
/// `--generic-posts-per-second`: the receiver is the operator's own
/// service, so the rate is higher than Slack's, yet low enough that a
/// backlog of 10,000 approvals (one principal's default pending quota)
/// reaches a small receiver over about eight minutes rather than at once.
pub const GENERIC_POSTS_PER_SECOND: f64 = 20.0;

/// The highest rate either flag accepts: above it the limit would no
/// longer limit (a post takes about a millisecond of the notifier's CPU).
pub const POSTS_PER_SECOND_MAX: f64 = 1_000.0;

/// The lowest rate either flag accepts: one post an hour; below it one
/// approval would wait longer than most approvals live.
pub const POSTS_PER_SECOND_MIN: f64 = 1.0 / 3_600.0;

/// Seconds of posts a webhook's token bucket holds: a webhook idle for a
/// while gets at most one second's worth of posts at once (at least one
/// post), so the notifier never leans on a receiver's burst allowance.
pub const RATE_BURST_SECONDS: f64 = 1.0;

/// Requests one webhook has outstanding at once (across approvals): enough
/// to keep the rate while each request waits on a round trip (20 posts a
/// second at 200 ms each needs four), few enough that a slow receiver ties
/// up only a handful of connections.
pub const POSTS_IN_FLIGHT_PER_WEBHOOK_MAX: usize = 4;

/// Approvals taken off the queues and not yet answered by every webhook.
/// Each is recorded in the state file while it is in flight, so this also
/// bounds the posts redelivered (marked) after a crash. It is also a term
/// of the fairness bound: an approval taken off the queues waits for its
/// turn at a webhook behind at most the others in flight, and approvals
/// are taken off only when every webhook has a token for them, so while the
/// webhooks answer, the ones in flight are the ones being sent.
pub const APPROVALS_IN_FLIGHT_MAX: usize = 8;

/// Approvals queued (per requester) or in flight at once. Each queued one
/// is its id, its requester and a trail cursor (about 200 bytes: 20,000 are
/// about 4 MB). At the bound the notifier stops reading the trail (and the
/// listing) until the queues drain: backpressure, never a dropped
/// approval; the events wait in the cluster's trail. 20,000 holds two
/// principals' whole default pending quota (10,000 each), so one flooding
/// principal never fills it alone.
pub const QUEUED_APPROVALS_MAX: usize = 20_000;

/// Length of a webhook URL or the console URL: Slack's are about 80 bytes.
pub const URL_BYTES_MAX: usize = 2_048;

/// Shortest HMAC secret accepted: 16 bytes (128 bits), the key length below
/// which HMAC-SHA256's strength is the key's, not the hash's.
pub const HMAC_SECRET_BYTES_MIN: usize = 16;

/// Longest HMAC secret file read: a secret is a few dozen bytes; a larger
/// file is a wrong path.
pub const HMAC_SECRET_BYTES_MAX: usize = 4_096;

/// Largest state file read back: the state holds a cursor, the posts in
/// flight, the ids of the first listing not yet met in the trail (at most
/// [`LISTED_APPROVALS_MAX`]) and of the posts finished past the cursor (at
/// most [`QUEUED_APPROVALS_MAX`]).
pub const STATE_FILE_BYTES_MAX: u64 = 64 * 1024 * 1024;

/// Pending approvals the first listing (and a re-listing after the cursor
/// fell behind retention) posts. Their ids are kept in the state file until
/// the trail shows their creation; more than this many pending approvals in
/// one principal's view is refused with `NOTIFY_LISTING_TOO_LARGE` rather
/// than grown without bound.
pub const LISTED_APPROVALS_MAX: usize = 100_000;

/// Approvals asked for per `ListApprovals` page.
pub const LIST_PAGE_APPROVALS: u32 = 500;

/// Trail events passed over without a post before the cursor is written to
/// the state file anyway: after a crash at most this many events are read
/// again (re-reading one posts nothing: its approval was posted, or was not
/// pending, or was not an approval).
pub const CURSOR_SAVE_EVENTS_MAX: u64 = 256;

/// Reasons shown in one post: an approval may carry more; the rest is
/// behind the console link.
pub const REASONS_SHOWN_MAX: usize = 5;

/// Bound JSON pointers of a standing approval spelled out in a Slack post
/// (each with its value): the rest are counted, and the generic payload
/// and the console show them all.
pub const BOUND_SHOWN_MAX: usize = 3;

/// Characters of any one text field (capability, requester, reason) put in
/// a post: Slack truncates a section at 3,000 characters.
pub const FIELD_CHARS_MAX: usize = 200;

/// Pause before following the cluster again once the SDK gave up on it
/// (after its own retry budget): the notifier outlives a cluster outage
/// without spinning.
pub const RECONNECT_PAUSE: Duration = Duration::from_secs(1);
