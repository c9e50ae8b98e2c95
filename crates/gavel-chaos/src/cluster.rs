//! The node processes of a chaos run: a [`gavel_testkit::Cluster`], started
//! on loopback ([`Loopback`]: kills and pauses, no partitions) or inside the
//! run's network namespaces ([`Namespaces`]: every fault). The kit spawns,
//! SIGKILLs, SIGSTOPs, SIGCONTs and restarts them and reads their
//! `ClusterService.Status`; this module only says how a chaos run's nodes are
//! set up.

use std::path::PathBuf;

pub use crate::net::Namespaces;
pub use gavel_testkit::{Cluster, ClusterSpec, Launcher, Loopback};

/// The word in the marker lines of chaos node logs (`===== gavel-chaos [<ms>]: ...`).
pub const LOG_LABEL: &str = "gavel-chaos";

/// The port every node listens on inside the namespaces.
pub const NAMESPACE_PORT: u16 = 7400;

/// A spec for a chaos run's three nodes: the kit's defaults, with node logs
/// marked [`LOG_LABEL`]. Node `i` keeps its data in `data_root/n<i>` and its
/// log in `data_root/n<i>.log`.
pub fn spec(binary: impl Into<PathBuf>, data_root: impl Into<PathBuf>) -> ClusterSpec {
    let mut spec = ClusterSpec::new(binary, data_root);
    spec.log_label = LOG_LABEL.to_string();
    spec
}
