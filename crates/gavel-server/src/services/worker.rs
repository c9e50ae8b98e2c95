//! `WorkerService`: long-poll leasing, heartbeats and reports.

use std::sync::Arc;
use std::time::Duration;

use gavel_core::limits::WAIT_MS_MAX;
use gavel_core::{Command, Reply, ReportOutcome};
use gavel_proto::v1 as pb;
use gavel_proto::v1::worker_service_client::WorkerServiceClient;
use gavel_proto::v1::worker_service_server::WorkerService;
use tonic::{Request, Response, Status};

use super::{assign_request_id, is_forwarded, prechecked, refused};
use crate::convert::common::timestamp_out;
use crate::convert::execution::{execution_out, task_out};
use crate::node::{domain_status, unavailable, unexpected, wall_clock_ms, Node, Routed};
use crate::serve;

/// Serves workers.
pub struct Workers {
    /// The node.
    pub node: Arc<Node>,
}

const NO_WAIT: Duration = Duration::ZERO;

#[tonic::async_trait]
impl WorkerService for Workers {
    async fn poll(&self, request: Request<pb::PollRequest>) -> Result<Response<pb::PollResponse>, Status> {
        let forwarded = is_forwarded(&request);
        let mut message = request.into_inner();
        assign_request_id(&mut message.request_id)?;
        let wait = Duration::from_millis(message.wait_ms.min(WAIT_MS_MAX));
        serve!(
            self.node,
            forwarded,
            message,
            wait,
            WorkerServiceClient,
            poll,
            async {
                let command = prechecked(Command::Poll {
                    worker_id: message.worker_id.clone(),
                    queues: message.queues.clone(),
                    tasks_max: message.max_tasks,
                })?;
                // Only the leader grants leases, so a follower forwards the whole long-poll.
                let status = self.node.raft.status();
                if !status.is_leader() {
                    return Err(match status.leader_addr {
                        Some(addr) => Routed::Forward(addr),
                        None => Routed::Fail(unavailable("no leader is elected yet; retry shortly", None)),
                    });
                }
                let deadline = tokio::time::Instant::now() + wait;
                let mut applied = self.node.app.subscribe();
                let mut proposals = 0u32;
                // A retry of a poll whose lease grant already committed (its
                // caller timed out waiting) gets that lease again instead of
                // leaving it to expire unused.
                if let Some(tasks) = self.node.app.state().replayed_grants(&message.request_id, &command) {
                    return Ok(pb::PollResponse { tasks: tasks.iter().map(task_out).collect() });
                }
                loop {
                    applied.borrow_and_update();
                    let ready = self.node.app.state().has_ready_work(&message.queues, wall_clock_ms());
                    if ready {
                        // Each grant attempt of one long-poll is its own command; a client
                        // retry of the whole poll replays them under the same derived ids.
                        let request_id = gavel_core::ids::grant_request_id(&message.request_id, proposals);
                        proposals += 1;
                        match refused(self.node.propose(&request_id, command.clone()).await?)? {
                            Reply::Tasks(tasks) if !tasks.is_empty() => {
                                return Ok(pb::PollResponse { tasks: tasks.iter().map(task_out).collect() });
                            }
                            Reply::Tasks(_) => {}
                            other => return Err(Routed::Fail(unexpected(&other))),
                        }
                    }
                    tokio::select! {
                        changed = applied.changed() => {
                            if changed.is_err() {
                                return Err(Routed::Fail(Status::unavailable("node is shutting down")));
                            }
                        }
                        _ = tokio::time::sleep_until(deadline) => return Ok(pb::PollResponse { tasks: Vec::new() }),
                    }
                }
            }
            .await
        )
    }

    async fn heartbeat(
        &self,
        request: Request<pb::HeartbeatRequest>,
    ) -> Result<Response<pb::HeartbeatResponse>, Status> {
        let forwarded = is_forwarded(&request);
        let mut message = request.into_inner();
        assign_request_id(&mut message.request_id)?;
        serve!(
            self.node,
            forwarded,
            message,
            NO_WAIT,
            WorkerServiceClient,
            heartbeat,
            async {
                let command = prechecked(Command::Heartbeat {
                    lease_id: message.lease_id,
                    worker_id: message.worker_id.clone(),
                })?;
                match refused(self.node.propose(&message.request_id, command).await?)? {
                    Reply::Heartbeat { cancel_requested, deadline_ms } => Ok::<_, Routed>(pb::HeartbeatResponse {
                        cancel_requested,
                        deadline_ms: timestamp_out(deadline_ms),
                    }),
                    other => Err(Routed::Fail(unexpected(&other))),
                }
            }
            .await
        )
    }

    async fn report(&self, request: Request<pb::ReportRequest>) -> Result<Response<pb::ReportResponse>, Status> {
        let forwarded = is_forwarded(&request);
        let mut message = request.into_inner();
        assign_request_id(&mut message.request_id)?;
        serve!(
            self.node,
            forwarded,
            message,
            NO_WAIT,
            WorkerServiceClient,
            report,
            async {
                let outcome = match &message.outcome {
                    Some(pb::report_request::Outcome::Completed(completed)) => {
                        ReportOutcome::Completed { output_json: completed.output_json.clone() }
                    }
                    Some(pb::report_request::Outcome::Failed(failed)) => ReportOutcome::Failed {
                        code: failed.code.clone(),
                        message: failed.message.clone(),
                        retryable: failed.retryable,
                    },
                    None => {
                        return Err(Routed::Fail(domain_status(gavel_core::DomainError::invalid(
                            "outcome is required (completed or failed)",
                        ))))
                    }
                };
                let command = prechecked(Command::Report {
                    lease_id: message.lease_id,
                    worker_id: message.worker_id.clone(),
                    outcome,
                })?;
                match refused(self.node.propose(&message.request_id, command).await?)? {
                    Reply::Reported { execution, retry_scheduled } => Ok::<_, Routed>(pb::ReportResponse {
                        execution: Some(execution_out(&execution)),
                        retry_scheduled,
                    }),
                    other => Err(Routed::Fail(unexpected(&other))),
                }
            }
            .await
        )
    }
}
