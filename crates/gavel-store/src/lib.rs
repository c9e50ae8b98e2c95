//! `gavel-store`: the state machine's storage, apart from the gRPC edge.
//!
//! [`app::CoreApp`] is the replicated application the Raft layer applies
//! entries to (`gavel_raft::Application`): the core `State`, its snapshots
//! and restores, and the wake-up of readers on every apply.
//! [`cold_store::RedbColdStore`] keeps the cold records and the checkpoints
//! in `<data-dir>/cold.redb`. [`reads::ReadPort`] is the one way the edge
//! reads the state, and [`reads::AppliedWatch`] the one wait for the next
//! apply. [`restore::seed_data_dir`] seeds a new node's
//! data directory from a backup's state.
//!
//! It depends on `gavel-core` (the state machine) and `gavel-raft` (the
//! `Application` trait it implements), never on `gavel-server` or the API
//! (tonic comes only with `gavel-raft`'s transport): the edge reads through it, and `gavel backup restore` seeds a
//! data directory with it without linking the edge.

pub mod app;
pub mod cold_store;
pub mod reads;
pub mod restore;
mod watched;
