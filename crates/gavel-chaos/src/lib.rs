//! `gavel-lab chaos`: runs a real three-node cluster in network namespaces, injects
//! faults on a seeded schedule while seeded clients and workers drive
//! approvals and executions, records every operation in a history, and judges
//! the history with checkers.
//!
//! Module map:
//! - [`history`]: the JSONL history format (invokes, completions, nemesis events).
//! - [`checker`]: the checkers (linearizable approvals, one consumption, one
//!   final result, fencing, retry discipline, no lost writes, liveness,
//!   coverage, audit proofs, policy quorum).
//! - [`report`]: the summary table and the SVG timeline.
//! - [`net`]: network namespaces, veth links and iptables partitions, and the
//!   [`net::Namespaces`] launcher that starts nodes inside them.
//! - [`workload`]: the seeded clients and workers (and [`workload::policy`]:
//!   the quorum policy, votes and standing approvals).
//! - [`cluster`]: the node processes, a [`gavel_testkit::Cluster`] (spawn,
//!   SIGKILL, SIGSTOP/SIGCONT, restart, status).
//! - [`run`]: one run from start to verdict.
//!
//! Library errors are `thiserror` enums ([`net::NetError`],
//! [`workload::WorkloadError`], [`run::RunError`]). The crate must not depend
//! on the node's internals (`gavel-raft`, `gavel-server`, and of `gavel-core`
//! only its pure `merkle` verification, which the audit checker uses as any
//! offline verifier would): it drives real `gavel node` processes through
//! `gavel-testkit`, the SDK and the public gRPC API only.

pub mod checker;
pub mod cluster;
pub mod history;
pub mod nemesis;
pub mod net;
pub mod recorder;
pub mod report;
pub mod rng;
pub mod run;
pub mod workload;
