//! `gavel-server`: one Gavel node. It serves the public gRPC API
//! (`gavel.v1`), forwards what it cannot serve to the leader, runs the
//! leader-side ticker. The `gavel` binary that runs it lives in `gavel-cli`.
//!
//! It depends on `gavel-core` (the state machine), `gavel-proto` (the API) and
//! `gavel-raft` (consensus and storage); openraft's types stay inside
//! `gavel-raft`. Key types: [`node::Node`], [`server::start`], [`app::CoreApp`],
//! [`routing::RoutingLayer`] (leader forwarding and request ids, in front of
//! every service), [`health`] (gRPC health that follows leader and quorum) and [`replies::FromReply`] (typed state-machine replies).

pub mod app;
pub mod convert;
pub mod health;
pub mod node;
pub mod replies;
pub mod routing;
pub mod security;
pub mod server;
pub mod services;
pub mod ticker;
