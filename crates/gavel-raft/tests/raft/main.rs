//! gavel-raft's integration tests, one test binary: in-process clusters over
//! real gRPC on loopback, with real storage in temporary directories.
//!
//! One binary rather than one per file: every file starts clusters through
//! [`common`], whose tonic server and client stack is generic code compiled
//! into each test binary that names it (about 18 s of compiling per binary on
//! the 2-core CI machine, four times over before they were one).

mod batcher;
mod cluster;
mod common;
mod snapshot;
mod snapshot_commands;
