//! `gavel chaos`: runs a real three-node cluster in network namespaces, injects
//! faults on a seeded schedule while seeded clients and workers drive
//! approvals and executions, records every operation in a history, and judges
//! the history with checkers.
//!
//! Module map:
//! - [`history`]: the JSONL history format (invokes, completions, nemesis events).
//! - [`checker`]: the checkers (linearizable approvals, one consumption, one
//!   final result, fencing, retry discipline, no lost writes, liveness, coverage).
//! - [`report`]: the summary table and the SVG timeline.
//! - [`net`]: network namespaces, veth links and iptables partitions.
//! - [`cluster`]: the node processes (spawn, SIGKILL, SIGSTOP/SIGCONT, restart).

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
