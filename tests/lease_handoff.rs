//! The lease hand-off on a real three-node TLS cluster (decision 0107): a
//! `Resume` while a worker's poll waits on the leader leases the new
//! execution to that poll in the apply that creates it, so the execution is
//! already leased when the resume answers; a retry of the poll with the same
//! request id gets the same lease; a poll that has gone is handed nothing;
//! without a waiting poll the execution waits queued, as before. And a
//! resume waiting for a decision (decision 0108) runs in that decision's
//! apply, which also leases the execution to the waiting poll.
//!
//! "A poll waits" is observed, not slept for: the leader's
//! `gavel_polls_waiting` gauge.

mod support;

use std::collections::BTreeMap;

use gavel_client::{pb, Client};
use gavel_core::GrantName;
use gavel_pki::Principal;
use gavel_testkit::{Cluster, ClusterSpec};

use support::WAIT;

const QUEUE: &str = "handoff.refund";
/// A capability whose approvals expire after [`BRIEF_EXPIRY_MS`].
const BRIEF: &str = "handoff.brief";
const BRIEF_EXPIRY_MS: u64 = 1_500;

struct Deployment {
    cluster: Cluster,
    metrics: BTreeMap<u64, String>,
    _dir: tempfile::TempDir,
}

fn principal(who: &str) -> Principal {
    Principal::parse(who).expect("a principal")
}

impl Deployment {
    /// A secure cluster with `--metrics-listen` on every node, principals
    /// `service:agent` (submitter), `user:approver` and `worker:w1`, and
    /// capability `handoff.refund`, which needs approval.
    async fn start() -> Deployment {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut spec = ClusterSpec::new(support::gavel_binary(), dir.path());
        spec.security = gavel_testkit::Security::secure(principal("user:admin"));
        spec.start_timeout = WAIT;
        let metrics: BTreeMap<u64, String> =
            (1..=3).map(|id| (id, format!("127.0.0.1:{}", support::free_port()))).collect();
        spec.node_args = metrics.iter().map(|(id, addr)| (*id, vec![format!("--metrics-listen={addr}")])).collect();
        let cluster = Cluster::start(spec).await.unwrap_or_else(|error| panic!("the cluster starts: {error}"));
        let grants: [(&str, &[GrantName]); 3] = [
            ("service:agent", &[GrantName::Submitter]),
            ("user:approver", &[GrantName::Approver]),
            ("worker:w1", &[GrantName::Worker]),
        ];
        for (who, names) in grants {
            cluster.grant(&principal(who), names, WAIT).await.unwrap_or_else(|error| panic!("{who}: {error}"));
        }
        let deployment = Deployment { cluster, metrics, _dir: dir };
        let spec = pb::CapabilitySpec {
            id: QUEUE.into(),
            side_effect: pb::SideEffect::Write as i32,
            risk: pb::Risk::Low as i32,
            approval: Some(pb::ApprovalPolicy { required: true, ..pb::ApprovalPolicy::default() }),
            ..pb::CapabilitySpec::default()
        };
        let request = pb::RegisterCapabilityRequest { spec: Some(spec), ..pb::RegisterCapabilityRequest::default() };
        deployment.client("user:admin").register_capability(request).await.expect("the admin registers");
        let spec = pb::CapabilitySpec {
            id: BRIEF.into(),
            side_effect: pb::SideEffect::Write as i32,
            risk: pb::Risk::Low as i32,
            approval: Some(pb::ApprovalPolicy {
                required: true,
                expires_in_ms: Some(BRIEF_EXPIRY_MS),
                ..pb::ApprovalPolicy::default()
            }),
            ..pb::CapabilitySpec::default()
        };
        let request = pb::RegisterCapabilityRequest { spec: Some(spec), ..pb::RegisterCapabilityRequest::default() };
        deployment.client("user:admin").register_capability(request).await.expect("the admin registers");
        deployment
    }

    fn client(&self, who: &str) -> Client {
        let config = self.cluster.client_config_as(&principal(who)).expect("a client certificate");
        Client::with_config(&self.cluster.addrs(), config).expect("a client")
    }

    async fn leader_metric(&self, name: &str) -> f64 {
        let leader = self.cluster.wait_for_leader(WAIT).await.expect("a leader");
        support::scraped(&self.metrics[&leader], name, "").await
    }

    /// Waits until exactly `count` polls wait on the leader.
    async fn polls_waiting(&self, count: f64) {
        support::eventually(&format!("{count} polls waiting on the leader"), || async {
            (self.leader_metric("gavel_polls_waiting").await == count).then_some(())
        })
        .await;
    }

    /// Submits `execution_id` as the agent and has the approver approve it;
    /// returns the approval id.
    async fn approved(&self, execution_id: &str) -> String {
        let approval_id = self.pending(execution_id).await;
        self.decide(&approval_id, pb::ApprovalStatus::Approved).await.expect("the approver decides");
        approval_id
    }

    /// Submits `execution_id` as the agent; returns its pending approval's id.
    async fn pending(&self, execution_id: &str) -> String {
        self.pending_of(QUEUE, execution_id).await
    }

    /// Submits `execution_id` of `capability` as the agent; returns its
    /// pending approval's id.
    async fn pending_of(&self, capability: &str, execution_id: &str) -> String {
        let submit = pb::SubmitRequest {
            execution_id: Some(execution_id.into()),
            capability_id: capability.into(),
            input_json: format!(r#"{{"order":"{execution_id}"}}"#),
            actor: Some(pb::Actor { id: "agent".into(), kind: pb::ActorKind::Service as i32, ..Default::default() }),
            surface: "lease-handoff-test".into(),
            ..pb::SubmitRequest::default()
        };
        let approval = match self.client("service:agent").submit(submit).await.expect("submit").outcome {
            Some(pb::submit_response::Outcome::ApprovalRequired(approval)) => approval,
            other => panic!("expected approval-required, got {other:?}"),
        };
        approval.id
    }

    async fn decide(&self, approval_id: &str, status: pb::ApprovalStatus) -> Result<pb::Approval, gavel_client::Error> {
        let decide = pb::DecideApprovalRequest {
            id: approval_id.into(),
            status: status as i32,
            approver: Some(pb::Actor { id: "approver".into(), kind: pb::ActorKind::User as i32, ..Default::default() }),
            ..pb::DecideApprovalRequest::default()
        };
        let answer = self.client("user:approver").decide_approval(decide).await?;
        Ok(answer.approval.expect("the decided approval"))
    }

    /// The agent's `ResumeAndWait` of `approval_id` awaiting its decision.
    fn resume_on_decision(
        &self,
        approval_id: &str,
        wait_ms: u64,
    ) -> tokio::task::JoinHandle<Result<pb::ResumeAndWaitResponse, gavel_client::Error>> {
        let client = self.client("service:agent");
        let resume = pb::ResumeRequest { approval_id: approval_id.into(), ..pb::ResumeRequest::default() };
        let request = pb::ResumeAndWaitRequest { resume: Some(resume), wait_ms, await_decision: true };
        tokio::spawn(async move { client.resume_and_wait(request).await })
    }

    /// Waits until exactly `count` resumes wait for a decision on the leader.
    async fn resumes_waiting(&self, count: f64) {
        support::eventually(&format!("{count} resumes waiting on the leader"), || async {
            (self.leader_metric("gavel_resumes_waiting").await == count).then_some(())
        })
        .await;
    }

    async fn resume(&self, approval_id: &str) -> pb::Execution {
        let request = pb::ResumeRequest { approval_id: approval_id.into(), ..pb::ResumeRequest::default() };
        self.client("service:agent").resume(request).await.expect("resume").execution.expect("an execution")
    }

    async fn state_of(&self, execution_id: &str) -> pb::ExecutionState {
        let request = pb::GetExecutionRequest { execution_id: execution_id.into() };
        let execution = self.client("service:agent").get_execution(request).await.expect("get").execution;
        execution.expect("an execution").state()
    }
}

fn poll(request_id: &str, wait_ms: u64) -> pb::PollRequest {
    pb::PollRequest {
        request_id: request_id.into(),
        worker_id: "w1".into(),
        queues: vec![QUEUE.into()],
        max_tasks: 1,
        wait_ms,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_resume_leases_its_execution_to_a_waiting_poll_in_the_apply_that_creates_it() {
    let deployment = Deployment::start().await;
    let worker = deployment.client("worker:w1");

    // A poll waits on the leader; the resume hands its execution to it.
    let approval_id = deployment.approved("ex-handoff-1").await;
    let waiting = tokio::spawn({
        let worker = worker.clone();
        async move { worker.poll(poll("poll-handoff-1", 30_000)).await }
    });
    deployment.polls_waiting(1.0).await;
    let handoffs_before = deployment.leader_metric("gavel_lease_handoffs_total").await;
    let resumed = deployment.resume(&approval_id).await;
    assert_eq!(resumed.execution_id, "ex-handoff-1");
    // Leased by the apply that created it: the first read after the resume
    // answered (linearizable, on the leader) sees the lease.
    assert_eq!(deployment.state_of("ex-handoff-1").await, pb::ExecutionState::Leased);
    let tasks = waiting.await.expect("the poll task").expect("the poll").tasks;
    assert_eq!(tasks.len(), 1, "{tasks:?}");
    let lease = tasks[0].lease.clone().expect("a lease");
    assert_eq!((lease.execution_id.as_str(), lease.attempt, lease.worker_id.as_str()), ("ex-handoff-1", 1, "w1"));
    assert_eq!(deployment.leader_metric("gavel_lease_handoffs_total").await, handoffs_before + 1.0);

    // The poll retried with its request id (its answer was lost) gets the
    // very lease again, and nothing new.
    let again = worker.poll(poll("poll-handoff-1", 0)).await.expect("the retried poll").tasks;
    assert_eq!(
        again.iter().map(|task| task.lease.as_ref().map(|lease| lease.lease_id)).collect::<Vec<_>>(),
        [Some(lease.lease_id)]
    );
    let report = pb::ReportRequest {
        lease_id: lease.lease_id,
        worker_id: "w1".into(),
        outcome: Some(pb::report_request::Outcome::Completed(pb::ReportCompleted { output_json: "{}".into() })),
        ..pb::ReportRequest::default()
    };
    worker.report(report).await.expect("the worker reports under the handed-off lease");
    assert_eq!(deployment.state_of("ex-handoff-1").await, pb::ExecutionState::Completed);

    // A poll that has gone (its wait ran out) is handed nothing: the next
    // execution waits queued, as it does with no poll at all.
    let gone = worker.poll(poll("poll-handoff-2", 200)).await.expect("a short poll").tasks;
    assert!(gone.is_empty(), "{gone:?}");
    deployment.polls_waiting(0.0).await;
    let approval_id = deployment.approved("ex-handoff-2").await;
    deployment.resume(&approval_id).await;
    assert_eq!(deployment.state_of("ex-handoff-2").await, pb::ExecutionState::Queued);

    // The next poll takes it with a grant of its own.
    let tasks = worker.poll(poll("poll-handoff-3", 10_000)).await.expect("a poll").tasks;
    let lease = tasks.first().and_then(|task| task.lease.clone()).expect("the queued execution is leased");
    assert_eq!(lease.execution_id, "ex-handoff-2");
    assert_eq!(deployment.leader_metric("gavel_lease_handoffs_total").await, handoffs_before + 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_resume_awaiting_the_decision_is_carried_by_it_and_a_rejection_or_a_silence_spends_nothing() {
    let deployment = Deployment::start().await;
    let worker = deployment.client("worker:w1");

    // The agent resumes on the decision while a worker's poll waits; the
    // approver's decision carries the resume, which hands off the lease.
    let approval_id = deployment.pending("ex-carry-1").await;
    let waiting = tokio::spawn({
        let worker = worker.clone();
        async move { worker.poll(poll("poll-carry-1", 30_000)).await }
    });
    deployment.polls_waiting(1.0).await;
    let resumer = deployment.resume_on_decision(&approval_id, 30_000);
    deployment.resumes_waiting(1.0).await;
    let (carried_before, handoffs_before) = (
        deployment.leader_metric("gavel_resumes_carried_total").await,
        deployment.leader_metric("gavel_lease_handoffs_total").await,
    );
    let decided = deployment.decide(&approval_id, pb::ApprovalStatus::Approved).await.expect("the approver decides");
    // The approver's answer is the decision's; the first read after it sees
    // the execution leased: one apply approved, spent and leased.
    assert_eq!(decided.status(), pb::ApprovalStatus::Approved, "{decided:?}");
    assert_eq!(deployment.state_of("ex-carry-1").await, pb::ExecutionState::Leased);
    let tasks = waiting.await.expect("the poll task").expect("the poll").tasks;
    let lease = tasks.first().and_then(|task| task.lease.clone()).expect("the handed-off lease");
    assert_eq!(lease.execution_id, "ex-carry-1");
    let report = pb::ReportRequest {
        lease_id: lease.lease_id,
        worker_id: "w1".into(),
        outcome: Some(pb::report_request::Outcome::Completed(pb::ReportCompleted { output_json: "{}".into() })),
        ..pb::ReportRequest::default()
    };
    worker.report(report).await.expect("the worker reports");
    let answer = resumer.await.expect("the resumer task").expect("the resume on decision");
    let execution = answer.execution.expect("the execution");
    assert_eq!((execution.execution_id.as_str(), execution.state()), ("ex-carry-1", pb::ExecutionState::Completed));
    assert!(!answer.timed_out);
    assert_eq!(deployment.leader_metric("gavel_resumes_carried_total").await, carried_before + 1.0);
    assert_eq!(deployment.leader_metric("gavel_lease_handoffs_total").await, handoffs_before + 1.0);
    deployment.resumes_waiting(0.0).await;

    // A rejection answers the waiting resume with APPROVAL_REJECTED.
    let approval_id = deployment.pending("ex-carry-2").await;
    let resumer = deployment.resume_on_decision(&approval_id, 30_000);
    deployment.resumes_waiting(1.0).await;
    deployment.decide(&approval_id, pb::ApprovalStatus::Rejected).await.expect("the approver rejects");
    let refused = resumer.await.expect("the resumer task").expect_err("a rejected approval is not resumed");
    assert_eq!(refused.code(), "APPROVAL_REJECTED", "{refused:?}");

    // No decision within the wait: APPROVAL_PENDING, nothing spent, and a
    // later decision and plain resume work as ever.
    let approval_id = deployment.pending("ex-carry-3").await;
    let silent = deployment.resume_on_decision(&approval_id, 300).await.expect("the resumer task");
    assert_eq!(silent.expect_err("still pending").code(), "APPROVAL_PENDING");
    deployment.resumes_waiting(0.0).await;
    let decided = deployment.decide(&approval_id, pb::ApprovalStatus::Approved).await.expect("a later decision");
    assert_eq!(decided.status(), pb::ApprovalStatus::Approved, "nothing carried, nothing spent: {decided:?}");
    assert_eq!(deployment.resume(&approval_id).await.execution_id, "ex-carry-3");
}

/// A pending approval's expiry changes nothing in the log: a wait for its
/// decision wakes by a timer at the expiry (decision 0109), not at its own
/// deadline. Both waits here would answer correctly at their deadline too
/// (the approval reads as expired then), so the check is when they answer:
/// well before a 30 s wait runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_wait_for_the_decision_answers_at_the_approvals_expiry_not_at_its_deadline() {
    let deployment = Deployment::start().await;
    let long_wait = std::time::Duration::from_secs(30);
    let soon = long_wait / 3;

    // WaitApproval on an approval that expires in 1.5 s.
    let approval_id = deployment.pending_of(BRIEF, "ex-brief-1").await;
    let started = std::time::Instant::now();
    let request = pb::WaitApprovalRequest { id: approval_id.clone(), wait_ms: long_wait.as_millis() as u64 };
    let answer = deployment.client("service:agent").wait_approval(request).await.expect("the wait");
    let waited = started.elapsed();
    let approval = answer.approval.expect("the approval");
    assert_eq!((approval.status(), answer.timed_out), (pb::ApprovalStatus::Expired, false), "{approval:?}");
    assert!(waited < soon, "WaitApproval answered {waited:?} after it began, not at the expiry");

    // ResumeAndWait awaiting the decision: refused APPROVAL_EXPIRED at the
    // expiry, through the log, and nothing spent.
    let approval_id = deployment.pending_of(BRIEF, "ex-brief-2").await;
    let started = std::time::Instant::now();
    let resumer = deployment.resume_on_decision(&approval_id, long_wait.as_millis() as u64);
    let refused = resumer.await.expect("the resumer task").expect_err("an expired approval is not resumed");
    let waited = started.elapsed();
    assert_eq!(refused.code(), "APPROVAL_EXPIRED", "{refused:?}");
    assert!(waited < soon, "ResumeAndWait answered {waited:?} after it began, not at the expiry");
    assert!(
        waited >= std::time::Duration::from_millis(BRIEF_EXPIRY_MS) / 2,
        "the resume waited for the expiry: {waited:?}"
    );
    deployment.resumes_waiting(0.0).await;
    let request = pb::GetExecutionRequest { execution_id: "ex-brief-2".into() };
    let missing = deployment.client("service:agent").get_execution(request).await;
    let missing = missing.expect_err("no execution was created");
    assert_eq!(missing.code(), "NOT_FOUND", "{missing:?}");
}
