//! `WorkerService`: long-poll leasing, heartbeats and reports.

use std::sync::Arc;
use std::time::Duration;

use gavel_core::limits::WAIT_MS_MAX;
use gavel_core::{Caller, Command, Task};
use gavel_proto::v1 as pb;
use gavel_proto::v1::worker_service_server::WorkerService;
use tonic::{Request, Response, Status};

use super::{caller, request_id};
use crate::convert::common::timestamp_out;
use crate::convert::execution::{execution_out, heartbeat_in, poll_in, report_in, task_out};
use gavel_store::reads::Woken;

use crate::node::{domain_status, Node};
use crate::replies::{HeartbeatReply, ReportReply, TasksReply};

/// Serves workers.
pub struct Workers {
    /// The node.
    pub node: Arc<Node>,
}

#[tonic::async_trait]
impl WorkerService for Workers {
    async fn poll(&self, request: Request<pb::PollRequest>) -> Result<Response<pb::PollResponse>, Status> {
        let (metadata, extensions, message) = request.into_parts();
        let (caller, request_id) = (caller(&extensions)?, request_id(&metadata, &message.request_id)?);
        let wait = Duration::from_millis(message.wait_ms.min(WAIT_MS_MAX));
        let tasks = long_poll(
            &self.node,
            caller.as_ref(),
            &request_id,
            poll_in(&message, caller.as_ref()),
            &message.queues,
            wait,
        )
        .await?;
        Ok(Response::new(pb::PollResponse { tasks: tasks.iter().map(task_out).collect() }))
    }

    async fn heartbeat(
        &self,
        request: Request<pb::HeartbeatRequest>,
    ) -> Result<Response<pb::HeartbeatResponse>, Status> {
        let (metadata, extensions, message) = request.into_parts();
        let (caller, request_id) = (caller(&extensions)?, request_id(&metadata, &message.request_id)?);
        let reply: HeartbeatReply =
            self.node.call(caller.as_ref(), &request_id, heartbeat_in(&message, caller.as_ref())).await?;
        let deadline_ms = timestamp_out(reply.deadline_ms);
        Ok(Response::new(pb::HeartbeatResponse { cancel_requested: reply.cancel_requested, deadline_ms }))
    }

    async fn report(&self, request: Request<pb::ReportRequest>) -> Result<Response<pb::ReportResponse>, Status> {
        let (metadata, extensions, message) = request.into_parts();
        let (caller, request_id) = (caller(&extensions)?, request_id(&metadata, &message.request_id)?);
        let reply: ReportReply = self
            .node
            .call(caller.as_ref(), &request_id, report_in(&message, caller.as_ref()).map_err(domain_status)?)
            .await?;
        let execution = Some(execution_out(&reply.execution));
        Ok(Response::new(pb::ReportResponse { execution, retry_scheduled: reply.retry_scheduled }))
    }
}

/// Leases tasks for one poll, waiting up to `wait` for work to be ready.
/// Only the leader grants leases. Each grant attempt is its own command,
/// under an id derived from the poll's, so a client retry of a poll whose
/// grant already committed (its caller timed out waiting) gets that lease
/// again instead of leaving it to expire unused.
async fn long_poll(
    node: &Node,
    caller: Option<&Caller>,
    request_id: &str,
    poll: Command,
    queues: &[String],
    wait: Duration,
) -> Result<Vec<Task>, Status> {
    node.ensure_leader()?;
    // Before waiting: a malformed poll, or a worker polling a queue it was
    // not granted, is refused whether or not work is ready there (a poll
    // counts against no quota: no place is held for it).
    node.admit(caller, request_id, &poll).map_err(domain_status)?;
    let deadline = tokio::time::Instant::now() + wait;
    let mut applied = node.reads.watch();
    if let Some(tasks) = applied.read(|state| state.replayed_grants_for(request_id, caller, &poll)) {
        node.metrics.count_poll_replay();
        return Ok(tasks);
    }
    let mut attempt = 0u32;
    loop {
        let ready = applied.read(|state| state.has_ready_work(queues, node.wall_clock_ms()));
        if ready {
            let grant_request_id = gavel_core::ids::grant_request_id(request_id, attempt);
            attempt += 1;
            let reply: TasksReply = node.call(caller, &grant_request_id, poll.clone()).await?;
            if !reply.tasks.is_empty() {
                return Ok(reply.tasks);
            }
        }
        if applied.next_apply(Some(deadline)).await == Woken::DeadlineReached {
            return Ok(Vec::new());
        }
    }
}
