//! Audit events (SPEC §5): written by the same command as the transition they
//! record, ordered by a monotonic cursor, and never carrying raw inputs or outputs.

use serde::{Deserialize, Serialize};

use crate::model::{Actor, CancelCode, ExecutedBeforeFailure};

/// One audit event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// Position in the trail; strictly increasing, never reused.
    pub cursor: u64,
    /// What happened, with its type-specific fields.
    pub kind: EventKind,
    /// The state machine's clock when it happened.
    pub timestamp_ms: u64,
    /// Who caused it (the system actor for expiry and retries).
    pub actor: Actor,
    /// Execution concerned.
    pub execution_id: Option<String>,
    /// Capability concerned.
    pub capability_id: Option<String>,
    /// Approval concerned.
    pub approval_id: Option<String>,
    /// Caller's correlation id.
    pub correlation_id: Option<String>,
    /// Hash of the input concerned.
    pub input_hash: Option<String>,
}

/// Event types and their fields.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventKind {
    /// A capability version was registered.
    CapabilityRegistered {
        /// The new version.
        version: u64,
    },
    /// An execution was submitted.
    Requested,
    /// An approval was requested.
    ApprovalRequested,
    /// An approval was approved.
    Approved,
    /// An approval was rejected.
    Rejected,
    /// An approval was withdrawn.
    ApprovalCancelled,
    /// An approval was spent.
    ApprovalConsumed,
    /// An attempt started under a lease.
    Started {
        /// Attempt number.
        attempt: u32,
        /// Fencing token.
        lease_id: u64,
        /// Worker.
        worker_id: String,
    },
    /// A failed attempt will be retried.
    Retried {
        /// The attempt that will run next.
        attempt: u32,
        /// Why the previous attempt failed.
        previous_error_code: String,
        /// How long the backoff is.
        backoff_ms: u64,
    },
    /// A lease was revoked by timeout or missed heartbeats.
    LeaseExpired {
        /// The lease.
        lease_id: u64,
        /// Its attempt.
        attempt: u32,
        /// `TIMEOUT` or `WORKER_LOST`.
        code: String,
    },
    /// Final: completed.
    Completed {
        /// From submission to finalization.
        duration_ms: u64,
        /// Attempts made.
        attempts: u32,
    },
    /// Final: failed.
    Failed {
        /// Error code.
        code: String,
        /// Whether the error was retryable.
        retryable: bool,
        /// Attempts made.
        attempts: u32,
        /// Whether the effect may have happened.
        executed_before_failure: Option<ExecutedBeforeFailure>,
    },
    /// Final: cancelled.
    Cancelled {
        /// Timeout or caller cancel.
        code: CancelCode,
        /// From submission to finalization.
        duration_ms: u64,
    },
    /// A report under a lease that is not current was refused.
    LateReportRejected {
        /// The stale lease.
        lease_id: u64,
        /// Its attempt.
        attempt: u32,
    },
}

impl EventKind {
    /// The dotted type name of SPEC §5 (`capability.started`, ...).
    pub fn type_name(&self) -> &'static str {
        match self {
            EventKind::CapabilityRegistered { .. } => "capability.registered",
            EventKind::Requested => "capability.requested",
            EventKind::ApprovalRequested => "capability.approval_requested",
            EventKind::Approved => "capability.approved",
            EventKind::Rejected => "capability.rejected",
            EventKind::ApprovalCancelled => "approval.cancelled",
            EventKind::ApprovalConsumed => "approval.consumed",
            EventKind::Started { .. } => "capability.started",
            EventKind::Retried { .. } => "capability.retried",
            EventKind::LeaseExpired { .. } => "lease.expired",
            EventKind::Completed { .. } => "capability.completed",
            EventKind::Failed { .. } => "capability.failed",
            EventKind::Cancelled { .. } => "capability.cancelled",
            EventKind::LateReportRejected { .. } => "lease.late_report_rejected",
        }
    }
}
