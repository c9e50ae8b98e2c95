//! `gavel-core`: Gavel's deterministic state machine.
//!
//! Everything Gavel promises is decided here, by [`State::apply`] applied to the
//! replicated log: an approval consumed at most once, one final result per
//! execution, no retry that the side-effect rule forbids, and no late report
//! taking effect. The crate is sans-IO in the manner of `quinn-proto`:
//!
//! - it must not depend on tokio, sled, tonic, openraft, a clock or randomness;
//! - `apply` reads time only from the [`Envelope`] the leader stamped;
//! - every collection that is iterated or serialized is ordered, so replicas
//!   serialize identical bytes and agree on [`State::state_hash`] (the dedup
//!   table's hash index is only looked up, and rebuilt on restore);
//! - bad input returns [`Reply::Error`] with a stable [`ErrorCode`], never a panic;
//!   a broken invariant is a bug and asserts;
//! - it reads no environment: a planted bug (chaos harness and simulation,
//!   compiled only with the cargo feature `mutants`) is a value the shell
//!   passes in (`State::set_planted_bug`).
//!
//! [`State`] is made of parts, each in its own file owning its records, their
//! invariants and their expiry: the capability registry (`registry.rs`),
//! approvals (`approvals.rs`), executions with their queues, backoffs and
//! finalized index (`executions.rs`), leases with their deadlines and
//! the principal each was granted to (`leases.rs`), the audit log
//! (`audit.rs`), the dedup table (`dedup.rs`), the grant bindings
//! (`grants.rs`) and the per-principal quotas (`quotas.rs`). Who may do what is decided in `apply` at the command's
//! log position, against those bindings (`machine/access_commands.rs`;
//! the types are in [`access`]); a command without a caller comes from a
//! node started with `--insecure` and is not checked. `machine.rs` and its children orchestrate `apply` and `Tick`
//! across the parts; the SI-11 retry rule is the pure function
//! [`retry::retry_after_ms`].
//!
//! History is cold ([`cold`]): finalized executions, their lease records,
//! closed approvals and the audit trail are read through the synchronous [`ColdStore`] trait
//! and written into an overlay that the shell flushes
//! ([`State::flush_cold`]); the state hash covers the hot state and a
//! rolling digest of cold mutations, whichever store runs.
//!
//! Key types: [`State`], [`Envelope`], [`Command`], [`Reply`], [`Event`],
//! [`ColdStore`], and the records in [`model`].

pub mod access;
mod approvals;
pub mod audit;
pub mod audit_export;
mod audit_tree;
/// RFC 8785 canonical JSON, the input hash and the I-JSON (RFC 7493) checks:
/// the `gavel-json` crate, which the client SDK shares.
pub use gavel_json as canonical_json;
pub mod cold;
pub mod command;
mod dedup;
pub mod error;
mod executions;
mod grants;
pub mod ids;
mod leases;
pub mod limits;
mod listing;
pub mod machine;
pub mod merkle;
pub mod model;
#[cfg(feature = "mutants")]
pub mod mutants;
pub mod note;
pub mod policies;
pub mod precheck;
mod quotas;
pub mod registry;
pub mod retry;
mod sorted_json;
pub mod standing;
pub mod terms;
pub mod tlog_tiles;
pub mod validate;
pub mod witness;

pub use access::{Action, Caller, Grant, GrantName, Principal, PrincipalKind};
pub use approvals::{ApprovalFilter, ApprovalView};
pub use audit::{Event, EventKind, RecordId};
pub use cold::{
    ColdMutation, ColdStore, ColdStoreError, ColdTable, MemoryColdStore, RecordPlace, SnapshotError, SnapshotRecords,
    SnapshotWriter, SNAPSHOT_FORMAT, SNAPSHOT_MAGIC,
};
pub use command::{
    ApprovalPolicySpec, CapabilitySpec, Command, CreateApproval, DecideThenResume, Envelope, Handoff, RecordEvent,
    Reply, Retention, RetrySpec, Submit, Task,
};
pub use error::{DomainError, ErrorClass, ErrorCode, QuotaKind, RefusedApproval, RefusedQuota};
pub use executions::ExecutionFilter;
pub use listing::{ListOrder, Page};
pub use machine::{DecisionControls, State, StateCounts};
pub use model::*;
pub use policies::{Approvers, Factor, Policy, PolicySpec, Quorum, Vote};
pub use quotas::{QuotaChange, QuotaLimits, QuotaUsage, QuotaView};
pub use standing::{Standing, StandingSpec};
pub use terms::RegisteredCapability;
