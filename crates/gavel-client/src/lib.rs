//! `gavel-client`: the SDK users meet instead of the proto.
//!
//! - [`Client`]: typed calls to any list of nodes. It follows the leader,
//!   retries `UNAVAILABLE`, overload refusals (`RESOURCE_EXHAUSTED` with
//!   `retry_after_ms`, after that delay plus jitter) and broken connections with the same request id (so
//!   a retry never applies twice), puts a deadline on every call, and surfaces
//!   refusals as [`Error::Domain`] carrying the stable code.
//! - [`Worker`]: polls a queue, heartbeats in the background, hands each task
//!   a [`TaskContext`] with a cancellation token (caller cancel, lease loss,
//!   or the local deadline, which fires even when the cluster is unreachable),
//!   and reports the outcome with retries, taking the next ready task in the
//!   same call ([`Client::report_and_poll`]).
//! - Fewer round trips for an agent: [`Client::wait_approval`] long-polls
//!   until an approval is decided, [`Client::resume_and_wait`] resumes and
//!   waits for the final execution in one call.
//! - Administration ([`Client::backup`], [`BackupDownload`],
//!   [`Client::add_node`]): a streamed backup from the leader, and adding a
//!   node that answers once it has caught up.
//! - Deciding ([`Client::decide_with_terms`], [`Client::vote_with_terms`],
//!   [`Client::decide`]): every decision and vote names the terms hash
//!   (SPEC §13) of the terms the person deciding was shown, and is refused
//!   `APPROVAL_TERMS_CHANGED` when the approval's terms no longer hash to it.
//! - [`Reachability`]: how many voters answer; a call that gives up says why
//!   (`no leader: quorum lost (1 of 3 nodes reachable)`) and names the
//!   endpoints it tried.
//!
//! - Credentials: [`ClientConfig::tls`] dials the nodes over TLS (rustls,
//!   no OpenSSL) with the cluster CA and, optionally, a client certificate
//!   naming the principal; [`ClientConfig::token`] sends a bearer token on
//!   every call. [`Credentials`] reads both from the `--ca --cert --key
//!   --token --token-file --insecure` flags or the `GAVEL_*` variables, the
//!   same way for every binary. `UNAUTHENTICATED` and `PERMISSION_DENIED`
//!   (and a failed TLS handshake) are never retried. A client without TLS
//!   whose call breaks on a node that speaks TLS fails at once with
//!   [`Error::Config`] naming the missing CA, instead of retrying until the
//!   budget is spent.
//!
//! - Tracing: every call carries a W3C `traceparent`, from the current
//!   span's OpenTelemetry context, else the current OpenTelemetry context,
//!   else a fresh trace; the nodes continue it through forwarding to the
//!   leader's proposal.
//!
//! - Actors: [`actor_text`] writes an actor as people read it, `kind:id`
//!   (`user:bob-finance`); a call naming an actor whose id already names a
//!   kind (`user:alice` as a user's id) is refused before sending with the
//!   cluster's `INVALID_ARGUMENT` and message ([`actor_id_problem`]).
//!
//! - JSON: a call that carries the caller's JSON (an input, an output, an
//!   event payload) refuses it before sending when the cluster would: not
//!   JSON, or not I-JSON (a number a double cannot hold exactly, a duplicated
//!   key, a lone surrogate), with the cluster's domain code and message,
//!   which names the JSON Pointer. The check is `gavel-json`, the cluster's.
//!
//! It depends on `gavel-proto`, `gavel-json` (the JSON rules, no runtime) and
//! the OpenTelemetry API (for the trace context) only: never on openraft, sled
//! or the core's state machine.

mod actors;
mod admin;
mod backoff;
pub mod calendar;
mod client;
mod credentials;
mod decide;
mod error;
mod json;
pub mod links;
mod reach;
mod tls_probe;
mod trace_context;
mod worker;

pub use actors::{actor_id_problem, actor_text};
pub use admin::{BackupDownload, ADD_NODE_WAIT, BACKUP_CHUNK_TIMEOUT, BACKUP_TAKE_WAIT};
pub use client::{Client, ClientConfig, Dial};
pub use credentials::{env, ClientTls, Credentials};
pub use decide::DecideOptions;
pub use error::{ApprovalRefusal, Error};
pub use gavel_proto::v1 as pb;
pub use reach::Reachability;
pub use tokio_util::sync::CancellationToken;
pub use worker::{HandlerError, TaskContext, Worker, WorkerBuilder, POLL_TASKS_MAX};
