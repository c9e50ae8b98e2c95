//! The policy part of the workload (issue #25, docs/policies.md): a quorum
//! policy, voters who vote and withdraw, governed approvals resumed by
//! racing callers, and bounded standing approvals spent by more callers
//! than they have uses.
//!
//! - **Setup** (secure runs only, unrecorded): the admin sets the policy
//!   [`QUORUM_POLICY`], "[`QUORUM_K`] distinct principals of the group
//!   [`VOTERS`] plus the workload principal" over the approval type
//!   [`QUORUM_TYPE`]; the workload creates and decides
//!   [`STANDING_APPROVALS`] standing approvals of [`STANDING_USES`] uses.
//!   The workload principal is in the group but creates every governed
//!   approval, so its own vote never counts: the header's eligible list
//!   leaves it out, and the checker would catch a node that counted it.
//! - **Quorum clients** create a governed approval (`q-…`, unrecorded), have
//!   the workload vote on it now and then (refused: the requester), have one
//!   voter vote (sometimes withdraw, sometimes vote again), then the other
//!   two vote at once through different nodes, then 1–3 callers resume it
//!   at once (recorded).
//! - **Standing clients** take the standing approvals in turn and resume
//!   each with [`STANDING_CALLERS`] callers at once through random nodes
//!   (recorded); once every one was taken they start over, and every resume
//!   of a spent one must be refused.

use std::sync::Arc;
use std::time::Duration;

use gavel_client::{ClientTls, Error};
use gavel_pki::{Principal, PrincipalKind};
use gavel_proto::v1 as pb;

use super::{actor, approval_view, Workload, WorkloadError};
use crate::history::{Op, PolicyInfo, StandingInfo};
use crate::rng::Rng;

/// The policy the workload sets.
pub const QUORUM_POLICY: &str = "chaos-quorum";
/// The approval type it governs.
pub const QUORUM_TYPE: &str = "chaos-quorum";
/// The id prefix of every approval the workload creates under it.
pub const QUORUM_PREFIX: &str = "q-";
/// Distinct approving votes its one factor needs.
pub const QUORUM_K: u32 = 2;
/// The voters: `user:<id>`, each granted `approver` and its own certificate.
pub const VOTERS: [&str; 3] = ["chaos-voter-1", "chaos-voter-2", "chaos-voter-3"];
/// The id prefix of the standing approvals.
pub const STANDING_PREFIX: &str = "st-";
/// Standing approvals created at setup: enough that the standing clients
/// spend fresh ones for most of a 60–70 s run.
pub const STANDING_APPROVALS: usize = 40;
/// Uses of each standing approval.
pub const STANDING_USES: u32 = 3;
/// Callers that resume one standing approval at once: more than its uses.
pub const STANDING_CALLERS: u64 = 5;
/// Window of each standing approval: longer than any run.
const STANDING_WINDOW_MS: u64 = 3_600_000;
/// Setup calls are retried this many times (the cluster is healthy then).
const SETUP_TRIES: u32 = 10;

/// `user:<id>` of each of [`VOTERS`].
pub fn voter_principals() -> Vec<Principal> {
    VOTERS.iter().map(|id| Principal::new(PrincipalKind::User, id).expect("a valid principal id")).collect()
}

/// What the header records about the policy: the eligible voters leave out
/// the workload principal, the requester of every governed approval.
pub fn policy_info() -> PolicyInfo {
    PolicyInfo {
        approval_id_prefix: QUORUM_PREFIX.to_string(),
        k: QUORUM_K,
        eligible: voter_principals().iter().map(Principal::to_string).collect(),
    }
}

/// Retries `call` up to [`SETUP_TRIES`] times, half a second apart.
async fn with_retries<T, F, Fut>(what: &str, mut call: F) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, Error>>,
{
    let mut tries = 1;
    loop {
        match call().await {
            Err(error) if tries < SETUP_TRIES => {
                tracing::warn!(%error, "{what} failed; retrying");
                tries += 1;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            outcome => return outcome,
        }
    }
}

impl Workload {
    /// Gives the workload its voters, each with its own certificate.
    pub fn with_voters(mut self, voters: Vec<(Principal, ClientTls)>) -> Workload {
        self.voters = voters.into_iter().map(|(principal, tls)| (principal.to_string(), tls)).collect();
        self
    }

    /// Sets the quorum policy as the admin whose TLS is `admin`; its group
    /// is the voters plus `requester`, the workload principal.
    pub async fn set_policy(&self, admin: Option<ClientTls>, requester: &Principal) -> Result<(), WorkloadError> {
        let client = self.client_with(0, admin);
        let mut group: Vec<String> = self.voters.iter().map(|(principal, _)| principal.clone()).collect();
        group.push(requester.to_string());
        let request = pb::SetPolicyRequest {
            request_id: format!("chaos-policy-{:x}", self.config.seed),
            name: QUORUM_POLICY.to_string(),
            approval_types: vec![QUORUM_TYPE.to_string()],
            factors: vec![pb::PolicyFactor { name: "voters".to_string(), k: QUORUM_K, scope: None, group }],
            ..Default::default()
        };
        with_retries("setting the policy", || client.set_policy(request.clone()))
            .await
            .map_err(|source| WorkloadError::Setup { what: "the quorum policy".to_string(), source })?;
        Ok(())
    }

    /// Creates and approves the standing approvals; the ones it made.
    pub async fn create_standing(&self) -> Vec<StandingInfo> {
        let created = (0..STANDING_APPROVALS).map(|index| async move {
            let id = format!("{STANDING_PREFIX}{:x}-{index}", self.config.seed);
            let client = self.client(index % self.nodes.len());
            let create = pb::CreateApprovalRequest {
                request_id: format!("{id}-create"),
                id: id.clone(),
                capability_id: "chaos.approved".to_string(),
                surface: "chaos".to_string(),
                actor: Some(actor("chaos-requester")),
                input_json: format!("{{\"standing\":{index}}}"),
                risk: pb::Risk::Low as i32,
                side_effect: pb::SideEffect::Write as i32,
                expires_in_ms: Some(STANDING_WINDOW_MS),
                standing: Some(pb::StandingTerms {
                    uses_max: STANDING_USES,
                    window_ms: STANDING_WINDOW_MS,
                    bound_pointers: Vec::new(),
                }),
                ..Default::default()
            };
            let decide = pb::DecideApprovalRequest {
                request_id: format!("{id}-decide"),
                id: id.clone(),
                status: pb::ApprovalStatus::Approved as i32,
                approver: Some(actor("chaos-approver")),
                ..Default::default()
            };
            let made = async {
                with_retries("creating a standing approval", || client.create_approval(create.clone())).await?;
                with_retries("approving a standing approval", || client.decide_approval(decide.clone())).await
            };
            match made.await {
                Ok(_) => Some(StandingInfo { approval_id: id, uses_max: STANDING_USES }),
                Err(error) => {
                    eprintln!("gavel-lab chaos: standing approval {id} left out: {error}");
                    None
                }
            }
        });
        futures::future::join_all(created).await.into_iter().flatten().collect()
    }

    /// One quorum client: create a governed approval, vote (and withdraw),
    /// resume it with racing callers.
    pub async fn quorum_client(self: Arc<Self>, index: usize) {
        if self.voters.is_empty() {
            return;
        }
        let mut rng = Rng::new(self.config.seed).fork(4_000 + index as u64);
        let nodes = self.nodes.len() as u64;
        let mut n = 0u64;
        while !self.stop_clients.is_cancelled() {
            n += 1;
            let id = format!("{QUORUM_PREFIX}{:x}-{index}-{n}", self.config.seed);
            self.approvals.lock().expect("approvals lock").push(id.clone());
            // Created unrecorded, like the approvals a submit creates: the
            // register checker follows the recorded resumes only.
            let request = pb::CreateApprovalRequest {
                id: id.clone(),
                capability_id: "chaos.approved".to_string(),
                surface: "chaos".to_string(),
                actor: Some(actor("chaos-requester")),
                input_json: format!("{{\"quorum\":{n},\"client\":{index}}}"),
                types: vec![QUORUM_TYPE.to_string()],
                risk: pb::Risk::Low as i32,
                side_effect: pb::SideEffect::Write as i32,
                expires_in_ms: Some(3_600_000),
                ..Default::default()
            };
            let created = self.client(rng.below(nodes) as usize).create_approval(request).await;
            let Some(input_hash) =
                created.ok().and_then(|response| response.approval).map(|approval| approval.input_hash)
            else {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            if rng.chance(20) {
                // The requester's own vote: refused, and never counted.
                let workload = self.tls.clone().map(|tls| (crate::cluster::workload_principal().to_string(), tls));
                if let Some(requester) = workload {
                    self.vote(rng.below(nodes) as usize, &id, &requester, Some((true, &input_hash))).await;
                }
            }
            let mut order: Vec<usize> = (0..self.voters.len()).collect();
            rng.shuffle(&mut order);
            let first = self.voters[order[0]].clone();
            self.vote(rng.below(nodes) as usize, &id, &first, Some((true, &input_hash))).await;
            if rng.chance(25) {
                self.vote(rng.below(nodes) as usize, &id, &first, None).await;
                if rng.chance(50) {
                    self.vote(rng.below(nodes) as usize, &id, &first, Some((true, &input_hash))).await;
                }
            }
            let racing = order[1..].iter().map(|&voter| {
                let (node, approve) = (rng.below(nodes) as usize, !rng.chance(4));
                let (this, id, hash, voter) =
                    (self.clone(), id.clone(), input_hash.clone(), self.voters[voter].clone());
                tokio::spawn(async move { this.vote(node, &id, &voter, Some((approve, &hash))).await })
            });
            futures::future::join_all(racing.collect::<Vec<_>>()).await;
            let resumes = (0..rng.between(1, 3)).map(|caller| {
                let (node, this, id) = (rng.below(nodes) as usize, self.clone(), id.clone());
                tokio::spawn(async move { this.resume(node, &format!("{id}-r{caller}"), &id, false).await })
            });
            futures::future::join_all(resumes.collect::<Vec<_>>()).await;
            tokio::time::sleep(Duration::from_millis(rng.between(20, 120))).await;
        }
    }

    /// One standing client: resumes standing approval after standing
    /// approval (of `standing`, starting at its `index`), each with
    /// [`STANDING_CALLERS`] callers at once.
    pub async fn standing_client(self: Arc<Self>, index: usize, standing: Vec<String>) {
        if standing.is_empty() {
            return;
        }
        let mut rng = Rng::new(self.config.seed).fork(5_000 + index as u64);
        let nodes = self.nodes.len() as u64;
        let mut round = 0usize;
        while !self.stop_clients.is_cancelled() {
            let id = standing[(index + round) % standing.len()].clone();
            let callers = (0..STANDING_CALLERS).map(|caller| {
                let (node, this, id) = (rng.below(nodes) as usize, self.clone(), id.clone());
                tokio::spawn(async move { this.resume(node, &format!("{id}-u{round}-{caller}"), &id, false).await })
            });
            futures::future::join_all(callers.collect::<Vec<_>>()).await;
            round += 1;
            tokio::time::sleep(Duration::from_millis(rng.between(100, 400))).await;
        }
    }

    /// Casts `voter`'s vote, `Some((approve, input hash))`, or withdraws it
    /// (`None`), with the voter's own certificate (recorded).
    async fn vote(&self, node: usize, id: &str, voter: &(String, ClientTls), ballot: Option<(bool, &str)>) {
        let (approval_id, voter_name) = (id.to_string(), voter.0.clone());
        let op = match ballot {
            Some((approve, _)) => Op::VoteCast { id: approval_id.clone(), voter: voter_name, approve },
            None => Op::VoteWithdraw { id: approval_id.clone(), voter: voter_name },
        };
        let ballot = ballot.map(|(approve, input_hash)| (approve, input_hash.to_string()));
        let process = self.recorder.process();
        let call = |client: gavel_client::Client| async move {
            match ballot {
                Some((approve, input_hash)) => {
                    let request = pb::CastVoteRequest { approval_id, approve, input_hash, ..Default::default() };
                    client.cast_vote(request).await.map(|response| response.approval)
                }
                None => {
                    let request = pb::WithdrawVoteRequest { approval_id, ..Default::default() };
                    client.withdraw_vote(request).await.map(|response| response.approval)
                }
            }
        };
        let view = |approval: &Option<pb::Approval>| approval_view(approval.as_ref());
        self.mutate_as(process, node, op, Some(voter.1.clone()), call, view).await;
    }
}
