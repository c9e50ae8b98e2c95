//! Typed replies of the state machine. Each command has one expected reply
//! shape; [`crate::node::Node::call`] extracts it, so no service matches on
//! an untyped [`Reply`], and a shape that does not fit is reported once, in
//! one place, as the bug it is.

use gavel_core::{Approval, ApprovalStatus, Capability, Event, Execution, Grant, Principal, QuotaView, Reply, Task};

/// A reply type that can take itself out of the state machine's [`Reply`].
pub trait FromReply: Sized {
    /// This reply, or the reply given back (boxed: it is large, and only a
    /// bug makes it) when it has another shape.
    fn from_reply(reply: Reply) -> Result<Self, Box<Reply>>;
}

/// Implements [`FromReply`] for a reply type taken out of one [`Reply`]
/// variant; every other variant is given back.
macro_rules! from_reply {
    ($reply:ty, $pattern:pat => $value:expr) => {
        impl FromReply for $reply {
            fn from_reply(reply: Reply) -> Result<Self, Box<Reply>> {
                match reply {
                    $pattern => Ok($value),
                    other => Err(Box::new(other)),
                }
            }
        }
    };
}

/// An approval and its status as seen at the command's time (create, decide,
/// consume, cancel).
#[derive(Debug)]
pub struct ApprovalReply {
    /// The record.
    pub approval: Approval,
    /// Its status, lazy expiry included.
    pub status: ApprovalStatus,
}

from_reply!(ApprovalReply, Reply::Approval { approval, status } => ApprovalReply { approval, status });

/// What a submit did: queued (or found) an execution, or created the
/// approval it waits for.
#[derive(Debug)]
pub enum SubmitReply {
    /// The execution; `created` is false when the submit found it already there.
    Execution {
        /// The record.
        execution: Execution,
        /// Whether this submit created it.
        created: bool,
    },
    /// The capability needs an approval first; this one was created for it.
    ApprovalRequired(ApprovalReply),
}

impl FromReply for SubmitReply {
    fn from_reply(reply: Reply) -> Result<Self, Box<Reply>> {
        match reply {
            Reply::Execution { execution, created } => Ok(SubmitReply::Execution { execution, created }),
            Reply::ApprovalRequired { approval, status } => {
                Ok(SubmitReply::ApprovalRequired(ApprovalReply { approval, status }))
            }
            other => Err(Box::new(other)),
        }
    }
}

/// An execution after a command that acts on it (resume, cancel).
#[derive(Debug)]
pub struct ExecutionReply {
    /// The record.
    pub execution: Execution,
}

from_reply!(ExecutionReply, Reply::Execution { execution, .. } => ExecutionReply { execution });

/// The tasks one poll leased (possibly none).
#[derive(Debug)]
pub struct TasksReply {
    /// The leased tasks.
    pub tasks: Vec<Task>,
}

from_reply!(TasksReply, Reply::Tasks(tasks) => TasksReply { tasks });

/// A heartbeat's answer.
#[derive(Debug)]
pub struct HeartbeatReply {
    /// The caller cancelled the execution: the worker should stop.
    pub cancel_requested: bool,
    /// The attempt's deadline (Unix ms).
    pub deadline_ms: u64,
}

from_reply!(HeartbeatReply, Reply::Heartbeat { cancel_requested, deadline_ms } => HeartbeatReply { cancel_requested, deadline_ms });

/// An accepted report.
#[derive(Debug)]
pub struct ReportReply {
    /// The execution after the report.
    pub execution: Execution,
    /// The failure was retryable and a retry is scheduled.
    pub retry_scheduled: bool,
}

from_reply!(ReportReply, Reply::Reported { execution, retry_scheduled } => ReportReply { execution, retry_scheduled });

/// A principal's grants after a grant, revoke or bootstrap.
#[derive(Debug)]
pub struct GrantsReply {
    /// Whose grants.
    pub principal: Principal,
    /// All of them, after the change.
    pub grants: Vec<Grant>,
}

from_reply!(GrantsReply, Reply::Grants { principal, grants } => GrantsReply { principal, grants });

/// A policy after a SetPolicy (the new version) or a DeletePolicy (the
/// version deleted), and how many approvals the change voided.
#[derive(Debug)]
pub struct PolicyReply {
    /// The policy.
    pub policy: gavel_core::Policy,
    /// Open approvals it voided.
    pub voided: u32,
}

from_reply!(PolicyReply, Reply::Policy { policy, voided } => PolicyReply { policy, voided });

// A principal's quota after a SetQuota.
from_reply!(QuotaView, Reply::Quota(view) => view);

// The event a RecordEvent appended.
from_reply!(Event, Reply::Event(event) => event);

// A registered capability.
from_reply!(Capability, Reply::Capability(capability) => capability);
from_reply!(gavel_proto::v1::CosignResponse, Reply::Cosigned { size, published } => gavel_proto::v1::CosignResponse { size, published });

/// Any reply, untyped: for the ticker, which only needs to know that its
/// tick committed.
impl FromReply for Reply {
    fn from_reply(reply: Reply) -> Result<Self, Box<Reply>> {
        Ok(reply)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_of_another_shape_is_given_back_unchanged() {
        let tasks = Reply::Tasks(Vec::new());
        let given_back = ApprovalReply::from_reply(tasks.clone()).expect_err("tasks are not an approval");
        assert_eq!(format!("{:?}", *given_back), format!("{tasks:?}"));
        assert!(TasksReply::from_reply(tasks).is_ok_and(|reply| reply.tasks.is_empty()));
    }

    #[test]
    fn heartbeat_and_ticks_extract_their_fields() {
        let heartbeat = HeartbeatReply::from_reply(Reply::Heartbeat { cancel_requested: true, deadline_ms: 7 })
            .expect("a heartbeat reply");
        assert!(heartbeat.cancel_requested);
        assert_eq!(heartbeat.deadline_ms, 7);
        let tick = Reply::Ticked { leases_expired: 1, backoffs_ended: 0, records_compacted: 0 };
        assert!(HeartbeatReply::from_reply(tick).is_err());
    }
}
