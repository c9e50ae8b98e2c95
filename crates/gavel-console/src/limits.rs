//! Every bound the console enforces, one constant per bound, each with its
//! reason. The cluster enforces its own limits (gavel-core's `limits.rs`);
//! these keep one console process small and refuse bad input before any
//! call reaches the cluster.

use std::time::Duration;

/// How long a session (and the token minted for it) lives: a working
/// session's length, short enough that a stolen cookie soon stops working.
pub const SESSION_TTL: Duration = Duration::from_secs(8 * 3600);
/// Sessions one console holds at once: each holds a token and a client, so
/// the bound keeps memory flat under a sign-in flood.
pub const SESSIONS_MAX: usize = 10_000;
/// Largest form body accepted: a decision comment and a few fields.
pub const FORM_BODY_MAX_BYTES: usize = 16 * 1024;
/// Longest decision comment, in bytes: a paragraph, not a document.
pub const COMMENT_MAX_BYTES: usize = 4 * 1024;
/// Longest principal typed at the development sign-in (`kind:id`; an id is
/// at most 128 characters on the cluster).
pub const PRINCIPAL_MAX_BYTES: usize = 160;
/// Approvals shown on one inbox or history page.
pub const PAGE_SIZE: usize = 25;
/// Pending approvals one inbox load reads at most (newest first, in pages
/// of [`LIST_PAGE_LIMIT`]) looking for the ones the person may decide: a
/// person whose own requests fill the newest 50,000 is told that older
/// approvals may be missing rather than costing 50 calls more per load.
pub const INBOX_SCAN_MAX: usize = 50_000;
/// Page size of each ListApprovals call the inbox makes (the cluster's own
/// cap, APPROVALS_PAGE_MAX).
pub const LIST_PAGE_LIMIT: u32 = 1_000;
/// Top-level input fields an inbox row shows: enough to tell ten refunds
/// apart by amount and order, few enough that a row stays a few lines.
pub const INPUT_SUMMARY_FIELDS_MAX: usize = 4;
/// Characters of an input key an inbox row shows before cutting it.
pub const INPUT_KEY_SHOWN_MAX_CHARS: usize = 32;
/// Characters of an input value (compact JSON) an inbox row shows before
/// cutting it: an amount, an order id or a short note whole, not a document.
pub const INPUT_VALUE_SHOWN_MAX_CHARS: usize = 48;
/// Characters of an approval id an inbox row shows (its start and end;
/// the whole id is in the link and the tooltip).
pub const SHORT_ID_MAX_CHARS: usize = 24;
/// Events of one execution shown on its page.
pub const EXECUTION_EVENTS_MAX: u32 = 200;
/// Live-update streams one session may hold open; more are refused so one
/// person cannot pin a watch per request. The console's script opens one
/// per browser, whatever the number of tabs (docs/decisions/0091); the
/// rest is room for a stream not yet seen closed and for other clients.
pub const STREAMS_PER_SESSION_MAX: usize = 8;
/// How often an idle live-update stream sends a keep-alive comment.
pub const STREAM_KEEP_ALIVE: Duration = Duration::from_secs(15);
/// Events already in the trail when a session's first stream opens are
/// skipped unless they are at most this old: a fresh stream notifies about
/// what happens from now on, not the whole history.
pub const STREAM_REPLAY_WINDOW: Duration = Duration::from_secs(2);
/// How long a sign-in may stay at the provider (login and consent pages)
/// before its callback is refused: minutes of typing, not a day. It is the
/// sealed sign-in cookie's `Max-Age` and the age the callback accepts; the
/// console keeps nothing per pending sign-in, so their number is unbounded
/// and costs it no memory.
pub const SIGN_IN_PENDING_TTL: Duration = Duration::from_secs(10 * 60);
/// Completed OpenID Connect sign-ins whose `state` the console remembers
/// (each until its cookie would expire) to refuse a replayed callback. Only
/// a sign-in the provider completed adds one, so strangers cannot fill it;
/// past the bound the oldest is forgotten, and no one is refused (a
/// forgotten sign-in's code is spent at the provider anyway).
pub const SIGN_INS_SPENT_MAX: usize = 10_000;
/// Longest page address a person is sent back to after signing in (path
/// and query): an approval's or execution's address with room to spare,
/// and the sealed sign-in cookie stays well under a browser's 4 KiB.
pub const RETURN_PATH_MAX_BYTES: usize = 1024;
