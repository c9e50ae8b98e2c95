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
use crate::waiters::{Turn, WaitingPoll, Wake};

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

    async fn report_and_poll(
        &self,
        request: Request<pb::ReportAndPollRequest>,
    ) -> Result<Response<pb::ReportAndPollResponse>, Status> {
        let (metadata, extensions, message) = request.into_parts();
        let report = message.report.unwrap_or_default();
        let (caller, request_id) = (caller(&extensions)?, request_id(&metadata, &report.request_id)?);
        let poll_request_id = if message.poll_request_id.is_empty() {
            gavel_core::ids::next_poll_request_id(&request_id)
        } else {
            super::request_id(&metadata, &message.poll_request_id)?
        };
        let poll_request = pb::PollRequest {
            request_id: poll_request_id.clone(),
            worker_id: report.worker_id.clone(),
            queues: message.queues,
            max_tasks: message.max_tasks,
            wait_ms: message.wait_ms,
        };
        let poll = poll_in(&poll_request, caller.as_ref());
        // A malformed poll part, or one for a queue the worker may not take
        // from, is refused before the report is proposed: a refused call
        // then always means the report was not taken.
        self.node.admit(caller.as_ref(), &poll_request_id, &poll).map_err(domain_status)?;
        let reply: ReportReply = self
            .node
            .call(caller.as_ref(), &request_id, report_in(&report, caller.as_ref()).map_err(domain_status)?)
            .await?;
        let report = Some(pb::ReportResponse {
            execution: Some(execution_out(&reply.execution)),
            retry_scheduled: reply.retry_scheduled,
        });
        // From here on the report is accepted: a failed poll is part of the
        // answer, never the call's error.
        let wait = Duration::from_millis(poll_request.wait_ms.min(WAIT_MS_MAX));
        let polled = long_poll(&self.node, caller.as_ref(), &poll_request_id, poll, &poll_request.queues, wait).await;
        let (tasks, poll_failure) = match polled {
            Ok(tasks) => (tasks.iter().map(task_out).collect(), None),
            Err(status) => (Vec::new(), Some(poll_failure_out(&status))),
        };
        Ok(Response::new(pb::ReportAndPollResponse { report, tasks, poll_failure }))
    }
}

/// A poll part's failure as the answer carries it.
fn poll_failure_out(status: &Status) -> pb::PollFailure {
    let detail = gavel_proto::error_detail::read_error_detail(status)
        .unwrap_or_else(|| pb::ErrorDetail { message: status.message().to_string(), ..pb::ErrorDetail::default() });
    pb::PollFailure { status_code: status.code() as i32, detail: Some(detail) }
}

/// Leases tasks for one poll, waiting up to `wait` for work to be ready.
/// Only the leader grants leases. Each grant attempt is its own command,
/// under an id derived from the poll's, so a client retry of a poll whose
/// grant already committed (its caller timed out waiting) gets that lease
/// again instead of leaving it to expire unused.
///
/// While it waits, the poll is registered with the leader's waiting polls
/// ([`crate::waiters`]): a command that creates an execution in one of its
/// queues may hand that execution to it in the apply that creates it (a
/// grant attempt of this poll, read back like a retry's), and the pump
/// wakes it only when work is ready in one of its queues.
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
    let replayed = |state: &gavel_core::State| state.replayed_grants_for(request_id, caller, &poll);
    if let Some(tasks) = node.reads.read(replayed) {
        node.metrics.count_poll_replay();
        return Ok(tasks);
    }
    let Command::Poll { worker_id, tasks_max, .. } = &poll else {
        return Err(Status::internal("a long-poll carries a poll command"));
    };
    let registration = node.waiters.register(WaitingPoll {
        caller: caller.cloned(),
        request_id: request_id.to_string(),
        worker_id: worker_id.clone(),
        queues: queues.to_vec(),
        tasks_max: *tasks_max,
        deadline_ms: node.wall_clock_ms().saturating_add(wait.as_millis() as u64),
    });
    loop {
        // Registered first, read second: work made ready after this read
        // wakes the poll through the pump.
        let ready = node.reads.read(|state| state.has_ready_work(queues, node.wall_clock_ms()));
        if ready {
            if let Turn::Grant(attempt) = registration.begin_grant() {
                let grant_request_id = gavel_core::ids::grant_request_id(request_id, attempt);
                let reply: TasksReply = node.call(caller, &grant_request_id, poll.clone()).await?;
                if !reply.tasks.is_empty() {
                    return Ok(reply.tasks);
                }
            }
        }
        match registration.wait(deadline).await {
            Wake::Ready => {}
            Wake::HandedOff(attempt) => {
                let grant_request_id = gavel_core::ids::grant_request_id(request_id, attempt);
                let granted = node.reads.read(|state| state.replay_for(&grant_request_id, caller, &poll));
                // Remembered (with tasks or none): the attempt is used. Not
                // remembered: the command created nothing, or was given up
                // in flight; the attempt is free, and should that command
                // still land, this poll's own grant of it is the same request.
                if let Some(gavel_core::Reply::Tasks(tasks)) = granted {
                    registration.used(attempt);
                    if !tasks.is_empty() {
                        node.metrics.count_lease_handoff();
                        return Ok(tasks);
                    }
                }
            }
            // A hand-off given up in flight may have landed since.
            Wake::Deadline => return Ok(node.reads.read(replayed).unwrap_or_default()),
        }
    }
}
