//! The node processes of a chaos run: a [`gavel_testkit::Cluster`], started
//! on loopback ([`Loopback`]: kills and pauses, no partitions) or inside the
//! run's network namespaces ([`Namespaces`]: every fault). The kit spawns,
//! SIGKILLs, SIGSTOPs, SIGCONTs and restarts them and reads their
//! `ClusterService.Status`; this module only says how a chaos run's nodes are
//! set up.
//!
//! A run is secure unless `--insecure`: the kit makes a CA, node
//! certificates naming each node's address (the namespace IPs) and an admin
//! certificate ([`ADMIN`]); the admin grants the workload's one principal
//! ([`WORKLOAD`]) the [`WORKLOAD_GRANTS`], and every workload client and raw
//! channel dials TLS with that principal's certificate.

use std::path::PathBuf;

use gavel_pki::{GrantName, Principal, PrincipalKind};

pub use crate::net::Namespaces;
pub use gavel_testkit::{Cluster, ClusterSpec, Launcher, Loopback, Security};

/// The id of a secure run's first admin, `user:chaos-admin`: the kit's own
/// status calls, the capability registration and the grants use it.
pub const ADMIN: &str = "chaos-admin";

/// The id of the principal every workload actor authenticates as,
/// `service:chaos-workload`.
pub const WORKLOAD: &str = "chaos-workload";

/// What the workload principal is granted: the kit's harness grants
/// (submitter, act-for, approver, delegate-decide, worker, auditor; no
/// `clock`: the workload sends no caller clock).
pub const WORKLOAD_GRANTS: [GrantName; 6] = gavel_testkit::HARNESS_GRANTS;

/// `user:chaos-admin`.
pub fn admin() -> Principal {
    Principal::new(PrincipalKind::User, ADMIN).expect("a valid principal id")
}

/// `service:chaos-workload`.
pub fn workload_principal() -> Principal {
    Principal::new(PrincipalKind::Service, WORKLOAD).expect("a valid principal id")
}

/// The word in the marker lines of chaos node logs (`===== gavel-chaos [<ms>]: ...`).
pub const LOG_LABEL: &str = "gavel-chaos";

/// The port every node listens on inside the namespaces.
pub const NAMESPACE_PORT: u16 = 7400;

/// A spec for a chaos run's three nodes: the kit's defaults, with node logs
/// marked [`LOG_LABEL`], audit checkpoints on, secure with [`admin`] as first admin unless
/// `insecure`. Node `i` keeps its data in `data_root/n<i>` and its log in
/// `data_root/n<i>.log`.
pub fn spec(binary: impl Into<PathBuf>, data_root: impl Into<PathBuf>, insecure: bool) -> ClusterSpec {
    let mut spec = ClusterSpec::new(binary, data_root);
    spec.log_label = LOG_LABEL.to_string();
    // The audit checker reads the cosigned tree heads the run saw.
    spec.args.push("--audit-checkpoints=true".to_string());
    if !insecure {
        spec.security = Security::secure(admin());
    }
    spec
}
