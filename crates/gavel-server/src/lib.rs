//! `gavel-server`: one Gavel node. It serves the public gRPC API
//! (`gavel.v1`), forwards what it cannot serve to the leader, runs the
//! leader-side ticker. The `gavel` binary that runs it lives in `gavel-cli`.
//!
//! It depends on `gavel-core` (the state machine), `gavel-proto` (the API),
//! `gavel-raft` (consensus and the log) and `gavel-store` (the state
//! machine's storage: `CoreApp`, the cold store in `<data-dir>/cold.redb`,
//! and the read port every read of state goes through); openraft's types
//! stay inside `gavel-raft`. Key types: [`node::Node`], [`server::start`],
//! [`metrics`] (Prometheus metrics; [`scrape`] serves them on `GET /metrics`),
//! [`overload`] (bounds on calls taken at once, [`limits`]), [`quota`]
//! (per-principal quotas checked before proposing, with writes in flight), [`trace`]
//! (W3C `traceparent` in, through forwarding, to the leader's proposal),
//! [`connections`] (accept, the connection caps, the authentication deadline
//! and the idle timeout), [`routing::RoutingLayer`] (authentication, peer gating, leader forwarding
//! and request ids, in front of every service), [`security`] (TLS material,
//! token verification, who a call is made by; [`peer`] what a client certificate
//! names), [`status`] (refusals as gRPC statuses), [`tls`] (the TLS acceptor: bounded
//! concurrent handshakes, refusals closed so the client reads the alert), [`health`] (gRPC health that
//! follows leader and quorum), [`waiters`] (the leader's waiting worker
//! polls: lease hand-offs and wake-ups) and [`replies::FromReply`] (typed
//! state-machine replies).
//!
//! A secured node (TLS material in [`security::Security`]) serves TLS only,
//! authenticates every public call (bearer token, else client certificate)
//! and stamps the caller into each command's envelope; the state machine
//! authorizes commands at their log position, and handlers authorize reads
//! after the read barrier. An insecure node (`--insecure`) serves plaintext
//! with `caller = None`, exactly as before authentication existed.

pub mod audit_tiles;
pub mod checkpointer;
pub mod connections;
pub mod convert;
pub mod health;
pub mod limits;
pub mod metrics;
pub mod node;
pub mod overload;
pub mod peer;
pub mod quota;
pub mod replies;
pub mod resumes;
pub mod routing;
pub mod scrape;
pub mod security;
pub mod server;
pub mod services;
pub mod status;
pub mod ticker;
pub mod tls;
pub mod trace;
pub mod waiters;
pub mod witnesses;
