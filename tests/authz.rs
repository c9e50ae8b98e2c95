//! Who may call what, at process level: docs/security.md's RPC table, written
//! once below as data ([`TABLE`]), checked against a real 3-node secure
//! cluster of `gavel node` processes (kit-made CA, real TLS, tokens signed
//! with the cluster's token key).
//!
//! Every public RPC of every `gavel.v1` service is called as every principal
//! of [`PRINCIPALS`] (one per grant, a second worker that does not hold the
//! lease, one with no grants, and one holding two grants whose token's
//! `roles` keep only one), once with a client certificate and once with a
//! bearer token; the approver also with an OpenID Connect ID token (the nodes
//! run with `--oidc-issuer` and a JWKS file of gavel-oidc's test keys, so no
//! provider process is needed: the token names `user:approver@example.test` by its
//! `email` claim and must get exactly the certificate's verdicts). A call the table allows must not be refused with
//! `PERMISSION_DENIED` / `UNAUTHENTICATED`, and the fixtures make it really
//! succeed; a call it refuses must be `PERMISSION_DENIED`, and a refused
//! mutation must leave no trace: the leader's applied index does not move
//! and no audit event appears. A few rows are repeated through a follower
//! (which forwards to the leader) and must give the same verdicts. Health
//! needs no credentials; a public call without any is `UNAUTHENTICATED`.
//!
//! Every record the calls read or act on belongs to `service:agent`, so the
//! matrix also checks ownership (docs/security.md, "Ownership"): another
//! submitter, a principal with `act-for`, an admin (who also holds
//! `submitter`), an approver in scope (it approved the execution read) and
//! one out of scope, the auditor, the worker holding the lease and another
//! worker. A record outside a caller's view must answer as an unknown one
//! (`NOT_FOUND`, an absent record, an empty list, a silent stream); one it
//! sees but may not act on is `PERMISSION_DENIED`.
//!
//! Every verdict is collected first and printed as a matrix; the test then
//! fails listing every cell that disagrees with the table.

mod support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use gavel_client::ClientTls;
use gavel_core::{GrantName, Principal};
use gavel_proto::metadata;
use gavel_proto::v1 as pb;
use gavel_proto::v1::access_service_client::AccessServiceClient;
use gavel_proto::v1::approval_service_client::ApprovalServiceClient;
use gavel_proto::v1::audit_service_client::AuditServiceClient;
use gavel_proto::v1::capability_service_client::CapabilityServiceClient;
use gavel_proto::v1::cluster_service_client::ClusterServiceClient;
use gavel_proto::v1::execution_service_client::ExecutionServiceClient;
use gavel_proto::v1::policy_service_client::PolicyServiceClient;
use gavel_proto::v1::worker_service_client::WorkerServiceClient;
use gavel_testkit::{ClusterSpec, Security};
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::service::Interceptor;
use tonic::transport::Channel;
use tonic::{Code, Status};
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

use support::{domain_code, gavel_binary, WAIT};

/// Deadline of one call.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Execution and heartbeat timeout of every capability: no lease held in
/// this test expires while it runs, so the leader proposes no tick for one.
const LONG_MS: u64 = 600_000;

/// How long a watcher that may not read the fixed execution's events must
/// hear nothing (one that may gets them at once, from the stored trail).
const WATCH_SILENCE: Duration = Duration::from_secs(3);

/// The admin the cluster bootstraps.
const ADMIN: &str = "user:root";

// ----- the table (docs/security.md, "The table") -----

/// Every public RPC of gavel.v1. `PollIdle` is `WorkerService.Poll` on a
/// queue with no ready work: the table does not depend on the queue's content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rpc {
    RegisterCapability,
    GetCapability,
    ListCapabilities,
    CreateApproval,
    GetApproval,
    /// `WaitApproval` of the fixed approval, with no wait.
    WaitApproval,
    DecideApproval,
    ConsumeApproval,
    ListApprovals,
    CancelApproval,
    Submit,
    Resume,
    /// `ResumeAndWait` with no wait: the resume's rule, then the wait's.
    ResumeAndWait,
    /// `ResumeAndWait` with `await_decision` (decision 0108), no wait: the
    /// same rules; a caller outside the approval's view never waits on it.
    ResumeOnDecision,
    GetExecution,
    WaitExecution,
    CancelExecution,
    /// `ListExecutions`, paged until the completed execution shows up or
    /// the pages end: an execution outside the view is simply absent.
    ListExecutions,
    ListExecutionEvents,
    Poll,
    PollIdle,
    Heartbeat,
    Report,
    /// `ReportAndPoll` polling a queue with no ready work: the report's
    /// rule, then the poll's.
    ReportAndPoll,
    WatchEvents,
    ListEvents,
    GetEvent,
    RecordEvent,
    GetCheckpoint,
    GetInclusionProof,
    GetConsistencyProof,
    ListLeaves,
    RegisterNoteKey,
    CosignCheckpoint,
    Status,
    AddLearner,
    Promote,
    RemoveNode,
    Backup,
    Grant,
    Revoke,
    ListGrants,
    WhoAmI,
    SetQuota,
    /// `GetQuota` of the caller's own quota.
    GetOwnQuota,
    /// `GetQuota` of another principal's quota.
    GetQuota,
    ListQuotas,
    SetPolicy,
    GetPolicy,
    ListPolicies,
    DeletePolicy,
    /// `CastVote` on a fresh approval the fixed policy governs.
    CastVote,
    /// `CastVote` then `WithdrawVote` of it, on a fresh governed approval.
    WithdrawVote,
    /// `ListVotes` of the fixed (ungoverned) approval: its read rule.
    ListVotes,
}

/// Who a row allows, and how it answers the others.
enum Allowed {
    /// Any authenticated principal.
    Anyone,
    /// A principal holding one of these grants.
    AnyOf(&'static [GrantName]),
    /// A worker, and only the principal the lease was granted to.
    LeaseHolder,
    /// Acting on the owner's approval or execution with one of these
    /// grants: the owner, `act-for`, an admin. Anyone else holding the
    /// grant is refused: `PERMISSION_DENIED` when it may read the record,
    /// as unknown when it may not.
    Owner(&'static [GrantName], Record),
    /// An application event about the owner's (queued) execution: the
    /// owner, `act-for`, an admin; `PERMISSION_DENIED` for any other submitter.
    RecordsAbout,
    /// Reading the owner's record: who has one of these grants and the
    /// record in its view; the others with the grant read it as unknown.
    Reads(&'static [GrantName], Record),
    /// Deciding: an approver whose scope covers the approval; out of scope,
    /// as unknown.
    Decides,
}

/// Which of the owner's records a row reads or acts on.
#[derive(Clone, Copy)]
enum Record {
    /// An approval of type `authz`.
    Approval,
    /// The execution `user:approver` approved and `worker:w1` ran.
    Approved,
    /// A queued execution nobody approved or leased.
    Queued,
}

/// A cell's expected answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    Ok,
    Denied,
    Hidden,
}

/// The principal whose records every row reads and acts on.
const OWNER: &str = "service:agent";

/// One row: the RPC, who may call it, whether it changes anything (then a
/// refusal must leave no trace), and whether it is also checked through a
/// follower.
struct Row {
    rpc: Rpc,
    allowed: Allowed,
    mutates: bool,
    via_follower: bool,
}

use GrantName::{ActFor, Admin, Approver, Auditor, Submitter, Worker};

const APPROVAL_READERS: &[GrantName] = &[Submitter, ActFor, Approver, Auditor];
const EXECUTION_READERS: &[GrantName] = &[Submitter, ActFor, Approver, Auditor, Worker];

const fn row(rpc: Rpc, allowed: Allowed, mutates: bool, via_follower: bool) -> Row {
    Row { rpc, allowed, mutates, via_follower }
}

/// docs/security.md's table, one line per RPC.
const TABLE: &[Row] = &[
    row(Rpc::RegisterCapability, Allowed::AnyOf(&[Admin]), true, true),
    row(Rpc::GetCapability, Allowed::Anyone, false, false),
    row(Rpc::ListCapabilities, Allowed::Anyone, false, true),
    row(Rpc::CreateApproval, Allowed::AnyOf(&[Submitter]), true, false),
    row(Rpc::GetApproval, Allowed::Reads(APPROVAL_READERS, Record::Approval), false, true),
    row(Rpc::WaitApproval, Allowed::Reads(APPROVAL_READERS, Record::Approval), false, true),
    row(Rpc::DecideApproval, Allowed::Decides, true, true),
    row(Rpc::ConsumeApproval, Allowed::Owner(&[Submitter], Record::Approval), true, true),
    row(Rpc::ListApprovals, Allowed::Reads(APPROVAL_READERS, Record::Approval), false, true),
    row(Rpc::CancelApproval, Allowed::Owner(&[Submitter], Record::Approval), true, false),
    row(Rpc::Submit, Allowed::AnyOf(&[Submitter]), true, true),
    row(Rpc::Resume, Allowed::Owner(&[Submitter], Record::Approval), true, true),
    // The admin may resume but not read the execution: it gets the resume's
    // answer (wait_refused), not a refusal.
    row(Rpc::ResumeAndWait, Allowed::Owner(&[Submitter], Record::Approval), true, true),
    row(Rpc::ResumeOnDecision, Allowed::Owner(&[Submitter], Record::Approval), true, true),
    row(Rpc::GetExecution, Allowed::Reads(EXECUTION_READERS, Record::Approved), false, true),
    row(Rpc::WaitExecution, Allowed::Reads(EXECUTION_READERS, Record::Approved), false, false),
    row(Rpc::CancelExecution, Allowed::Owner(&[Submitter], Record::Queued), true, true),
    row(Rpc::ListExecutions, Allowed::Reads(EXECUTION_READERS, Record::Approved), false, true),
    row(Rpc::ListExecutionEvents, Allowed::Reads(EXECUTION_READERS, Record::Approved), false, true),
    row(Rpc::Poll, Allowed::AnyOf(&[Worker]), true, true),
    row(Rpc::PollIdle, Allowed::AnyOf(&[Worker]), true, false),
    row(Rpc::Heartbeat, Allowed::LeaseHolder, true, true),
    row(Rpc::Report, Allowed::LeaseHolder, true, false),
    row(Rpc::ReportAndPoll, Allowed::LeaseHolder, true, true),
    row(Rpc::WatchEvents, Allowed::Reads(EXECUTION_READERS, Record::Approved), false, true),
    row(Rpc::ListEvents, Allowed::AnyOf(&[Auditor]), false, true),
    row(Rpc::GetEvent, Allowed::AnyOf(&[Auditor]), false, false),
    row(Rpc::RecordEvent, Allowed::RecordsAbout, true, true),
    row(Rpc::GetCheckpoint, Allowed::AnyOf(&[Auditor]), false, true),
    row(Rpc::GetInclusionProof, Allowed::AnyOf(&[Auditor]), false, false),
    row(Rpc::GetConsistencyProof, Allowed::AnyOf(&[Auditor]), false, false),
    row(Rpc::ListLeaves, Allowed::AnyOf(&[Auditor]), false, true),
    // Only a node, for itself (its certificate): no principal of this table.
    row(Rpc::RegisterNoteKey, Allowed::AnyOf(&[]), true, true),
    row(Rpc::CosignCheckpoint, Allowed::AnyOf(&[]), true, false),
    row(Rpc::Status, Allowed::Anyone, false, true),
    row(Rpc::AddLearner, Allowed::AnyOf(&[Admin]), true, false),
    row(Rpc::Promote, Allowed::AnyOf(&[Admin]), true, false),
    row(Rpc::RemoveNode, Allowed::AnyOf(&[Admin]), true, false),
    row(Rpc::Backup, Allowed::AnyOf(&[Admin]), false, true),
    row(Rpc::Grant, Allowed::AnyOf(&[Admin]), true, true),
    row(Rpc::Revoke, Allowed::AnyOf(&[Admin]), true, false),
    row(Rpc::ListGrants, Allowed::AnyOf(&[Admin]), false, true),
    row(Rpc::WhoAmI, Allowed::Anyone, false, true),
    row(Rpc::SetQuota, Allowed::AnyOf(&[Admin]), true, true),
    row(Rpc::GetOwnQuota, Allowed::Anyone, false, true),
    row(Rpc::GetQuota, Allowed::AnyOf(&[Admin]), false, false),
    row(Rpc::ListQuotas, Allowed::AnyOf(&[Admin]), false, true),
    row(Rpc::SetPolicy, Allowed::AnyOf(&[Admin]), true, true),
    row(Rpc::GetPolicy, Allowed::Anyone, false, true),
    row(Rpc::ListPolicies, Allowed::Anyone, false, false),
    row(Rpc::DeletePolicy, Allowed::AnyOf(&[Admin]), true, false),
    // Both approvers are in the fixed policy's group: eligible.
    row(Rpc::CastVote, Allowed::AnyOf(&[Approver]), true, true),
    row(Rpc::WithdrawVote, Allowed::AnyOf(&[Approver]), true, false),
    row(Rpc::ListVotes, Allowed::Reads(APPROVAL_READERS, Record::Approval), false, true),
];

/// The policy the vote rows vote under: approvals of type [`VOTED_TYPE`]
/// need two of `user:approver` and `user:fin`.
const VOTED_POLICY: &str = "authz-votes";

/// The approval type [`VOTED_POLICY`] governs.
const VOTED_TYPE: &str = "authz-voted";

/// A principal of the test, with the grants the admin binds to it.
struct Who {
    role: &'static str,
    principal: &'static str,
    grants: &'static [GrantName],
    /// Whether the leases of the Heartbeat/Report rows are granted to it.
    lease_holder: bool,
    /// The `roles` of its token, which down-scope the token to those of
    /// its grants; `None`: a token that uses every grant.
    token_roles: Option<&'static [GrantName]>,
    /// The approver scope of its `approver` grant (empty: every approval).
    approver_scope: &'static [&'static str],
    /// Whether it calls with a token too (the ownership callers call with
    /// a certificate only, to keep the matrix short).
    with_token: bool,
    /// Whether it calls with an OpenID Connect ID token too.
    with_oidc: bool,
}

const PRINCIPALS: &[Who] = &[
    // The admin also submits: an admin acts on every record, and reads only
    // what its other grants show it.
    who("admin", ADMIN, &[Admin, Submitter], false, None),
    who("submitter", OWNER, &[Submitter], false, None),
    Who { with_oidc: true, ..who("approver", "user:approver@example.test", &[Approver], false, None) },
    who("worker", "worker:w1", &[Worker], true, None),
    who("worker2", "worker:w2", &[Worker], false, None),
    who("auditor", "user:auditor", &[Auditor], false, None),
    who("none", "user:nobody", &[], false, None),
    // Submitter and auditor by certificate; its token names only auditor.
    who("ops", "service:ops", &[Submitter, Auditor], false, Some(&[Auditor])),
    Who { with_token: false, ..who("other", "service:mallory", &[Submitter], false, None) },
    Who { with_token: false, ..who("act-for", "service:app", &[Submitter, ActFor], false, None) },
    Who { with_token: false, approver_scope: &["finance"], ..who("fin", "user:fin", &[Approver], false, None) },
];

const fn who(
    role: &'static str,
    principal: &'static str,
    grants: &'static [GrantName],
    lease_holder: bool,
    token_roles: Option<&'static [GrantName]>,
) -> Who {
    Who { role, principal, grants, lease_holder, token_roles, approver_scope: &[], with_token: true, with_oidc: false }
}

impl Allowed {
    /// The answer `caller` gets: docs/security.md's table and its ownership
    /// rules, written out for this test's records.
    fn expect(&self, caller: &Caller) -> Expect {
        let any = |grants: &[GrantName]| grants.iter().any(|grant| caller.uses(*grant));
        let verdict = |allowed: bool| if allowed { Expect::Ok } else { Expect::Denied };
        let acts = caller.who.principal == OWNER || caller.uses(ActFor) || caller.uses(Admin);
        match self {
            Allowed::Anyone => Expect::Ok,
            Allowed::AnyOf(grants) => verdict(any(grants)),
            Allowed::LeaseHolder => verdict(caller.uses(Worker) && caller.who.lease_holder),
            Allowed::Owner(grants, record) if any(grants) && !acts => {
                if caller.sees(*record) {
                    Expect::Denied
                } else {
                    Expect::Hidden
                }
            }
            Allowed::Owner(grants, _) => verdict(any(grants)),
            Allowed::RecordsAbout => verdict(caller.uses(Submitter) && acts),
            Allowed::Reads(grants, _) if !any(grants) => Expect::Denied,
            Allowed::Reads(_, record) if caller.sees(*record) => Expect::Ok,
            Allowed::Reads(..) => Expect::Hidden,
            Allowed::Decides if !caller.uses(Approver) => Expect::Denied,
            Allowed::Decides if caller.who.approver_scope.is_empty() => Expect::Ok,
            Allowed::Decides => Expect::Hidden,
        }
    }
}

// ----- callers -----

/// How a caller authenticates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Credential {
    Certificate,
    Token,
    /// An ID token of the test OpenID Provider (it carries no Gavel roles).
    OidcToken,
}

/// Adds `authorization: Bearer <token>` to every call when it has one.
#[derive(Clone)]
struct Bearer(Option<MetadataValue<Ascii>>);

impl Interceptor for Bearer {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, Status> {
        if let Some(value) = &self.0 {
            request.metadata_mut().insert(metadata::AUTHORIZATION, value.clone());
        }
        Ok(request)
    }
}

type Authed = InterceptedService<Channel, Bearer>;

/// A principal with one credential, and a channel to each node it calls.
struct Caller {
    who: &'static Who,
    credential: Credential,
    bearer: Bearer,
    channels: BTreeMap<u64, Channel>,
}

impl Caller {
    fn label(&self) -> String {
        let how = match self.credential {
            Credential::Certificate => "cert",
            Credential::Token => "token",
            Credential::OidcToken => "oidc",
        };
        format!("{}/{how}", self.who.role)
    }

    /// Whether this caller may use `grant`: bound to its principal and, for
    /// a token with roles, named by them.
    fn uses(&self, grant: GrantName) -> bool {
        let scoped_out = match (self.credential, self.who.token_roles) {
            (Credential::Token, Some(roles)) => !roles.contains(&grant),
            _ => false,
        };
        self.who.grants.contains(&grant) && !scoped_out
    }

    /// Whether the owner's `record` is in this caller's view.
    fn sees(&self, record: Record) -> bool {
        let owner = self.uses(Submitter) && self.who.principal == OWNER;
        let everything = self.uses(Auditor) || self.uses(ActFor);
        let approver = self.uses(Approver);
        match record {
            Record::Approval => everything || owner || (approver && self.who.approver_scope.is_empty()),
            Record::Approved => {
                let approved = approver && self.who.principal == "user:approver@example.test";
                everything || owner || approved || (self.uses(Worker) && self.who.lease_holder)
            }
            Record::Queued => everything || owner,
        }
    }

    fn on(&self, node: u64) -> Authed {
        InterceptedService::new(self.channels[&node].clone(), self.bearer.clone())
    }
}

/// The records a call acts on: fixed ones for reads, fresh ones for an
/// allowed mutation that uses its record up.
#[derive(Debug, Clone, Default)]
struct Target {
    approval_id: String,
    execution_id: String,
    lease_id: u64,
    subject: String,
    node: u64,
    addr: String,
}

/// One cell of the matrix.
struct Outcome {
    rpc: Rpc,
    via: &'static str,
    caller: String,
    expect: Expect,
    result: Result<(), Status>,
}

impl Outcome {
    fn short(&self) -> String {
        match &self.result {
            Ok(()) => "ok".to_string(),
            Err(status) if status.code() == Code::PermissionDenied => "DENY".to_string(),
            Err(status) => format!("{:?}", status.code()),
        }
    }

    /// What disagrees with the table, if anything.
    fn mismatch(&self) -> Option<String> {
        let code = self.result.as_ref().err().map(Status::code);
        let refused = matches!(code, Some(Code::PermissionDenied | Code::Unauthenticated));
        let problem = match (&self.result, self.expect) {
            (Ok(()), Expect::Ok) => return None,
            (Err(status), Expect::Denied) if status.code() == Code::PermissionDenied => {
                if domain_code(status) == "PERMISSION_DENIED" {
                    return None;
                }
                format!("refused with domain code {} instead of PERMISSION_DENIED", domain_code(status))
            }
            (Err(status), Expect::Hidden) if status.code() == Code::NotFound => return None,
            (Err(_), Expect::Ok) if refused => "refused, but the table allows it".to_string(),
            (Err(_), Expect::Ok) => "allowed, but did not succeed (fixture problem?)".to_string(),
            (Ok(()), _) => "succeeded, but the table refuses it".to_string(),
            (Err(_), Expect::Denied) => "not refused with PERMISSION_DENIED".to_string(),
            (Err(_), Expect::Hidden) => "not answered as an unknown record (NOT_FOUND)".to_string(),
        };
        let detail = match &self.result {
            Ok(()) => String::new(),
            Err(status) => format!(": {:?} {}", status.code(), status.message()),
        };
        Some(format!("{:?} via {} as {}: {problem}{detail}", self.rpc, self.via, self.caller))
    }
}

/// The cluster, its callers and the records every row shares.
struct World {
    cluster: gavel_testkit::Cluster,
    leader: u64,
    follower: u64,
    callers: Vec<Caller>,
    /// A pending approval (created by the submitter) and a completed
    /// execution: what the reads read.
    approval_id: String,
    execution_id: String,
    serial: AtomicU64,
    audit_head: Mutex<u64>,
    /// The joining node each admin credential adds, promotes and removes.
    joiners: BTreeMap<Credential, (u64, String)>,
}

/// A call's answer reduced to success or its status.
fn done<T>(result: Result<tonic::Response<T>, Status>) -> Result<(), Status> {
    result.map(drop)
}

fn capability(id: &str, queue: &str, gated: bool) -> pb::CapabilitySpec {
    pb::CapabilitySpec {
        id: id.to_string(),
        side_effect: pb::SideEffect::Write as i32,
        risk: pb::Risk::Low as i32,
        idempotent: true,
        retry: Some(pb::RetryConfig { max_attempts: 1, backoff_ms: None, non_retryable_codes: Vec::new() }),
        timeout_ms: Some(LONG_MS),
        heartbeat_timeout_ms: Some(LONG_MS),
        approval: gated.then(|| pb::ApprovalPolicy {
            required: true,
            r#type: Some("authz".into()),
            expires_in_ms: None,
        }),
        queue: Some(queue.to_string()),
        ..pb::CapabilitySpec::default()
    }
}

impl World {
    fn next(&self, prefix: &str) -> String {
        format!("{prefix}-{}", self.serial.fetch_add(1, Ordering::Relaxed))
    }

    /// The certificate caller of `role`: who sets fixtures up.
    fn operator(&self, role: &str) -> &Caller {
        self.callers
            .iter()
            .find(|caller| caller.who.role == role && caller.credential == Credential::Certificate)
            .expect("a caller of every role")
    }

    fn ops(&self, role: &str) -> Authed {
        self.operator(role).on(self.leader)
    }

    // ----- fixtures (set up as the principals whose job they are) -----

    async fn grant(&self, principal: &str, grant: GrantName) {
        self.grant_scoped(principal, grant, &[]).await;
    }

    async fn grant_scoped(&self, principal: &str, grant: GrantName, scope: &[&str]) {
        let request = pb::GrantRequest {
            grant: Some(pb::AccessGrant {
                principal: principal.to_string(),
                grant: grant.as_str().to_string(),
                scope: scope.iter().map(|item| item.to_string()).collect(),
                skew_ms_max: None,
            }),
            request_id: self.next("grant"),
        };
        AccessServiceClient::new(self.ops("admin")).grant(request).await.expect("the admin grants");
    }

    async fn register(&self, spec: pb::CapabilitySpec) {
        let request = pb::RegisterCapabilityRequest { request_id: self.next("register"), spec: Some(spec) };
        CapabilityServiceClient::new(self.ops("admin")).register_capability(request).await.expect("register");
    }

    fn create_request(&self) -> pb::CreateApprovalRequest {
        let id = self.next("approval");
        pb::CreateApprovalRequest {
            request_id: format!("create-{id}"),
            input_json: format!(r#"{{"approval":"{id}"}}"#),
            id,
            capability_id: "authz.gated".into(),
            surface: "authz".into(),
            types: vec!["authz".into()],
            risk: pb::Risk::High as i32,
            side_effect: pb::SideEffect::Write as i32,
            ..pb::CreateApprovalRequest::default()
        }
    }

    /// Sets a policy named `name` governing approval type `kind`, needing
    /// `k` of the two approvers, as the admin.
    async fn set_policy(&self, name: &str, kind: &str, k: u32) {
        PolicyServiceClient::new(self.ops("admin"))
            .set_policy(policy_request(self.next("policy"), name, kind, k))
            .await
            .expect("the admin sets a policy");
    }

    /// A pending approval of [`VOTED_TYPE`] requested by the submitter, and its input hash.
    async fn governed_approval(&self) -> (String, String) {
        let mut request = self.create_request();
        request.types = vec![VOTED_TYPE.into()];
        let created = ApprovalServiceClient::new(self.ops("submitter"))
            .create_approval(request)
            .await
            .expect("create a governed approval")
            .into_inner()
            .approval
            .expect("the approval");
        assert!(created.quorum.is_some(), "the fixed policy governs it");
        (created.id, created.input_hash)
    }

    /// A pending approval requested by the submitter.
    async fn pending_approval(&self) -> String {
        let request = self.create_request();
        let id = request.id.clone();
        ApprovalServiceClient::new(self.ops("submitter")).create_approval(request).await.expect("create an approval");
        id
    }

    async fn approve(&self, id: &str) {
        let request = pb::DecideApprovalRequest {
            request_id: self.next("decide"),
            id: id.to_string(),
            status: pb::ApprovalStatus::Approved as i32,
            ..pb::DecideApprovalRequest::default()
        };
        ApprovalServiceClient::new(self.ops("approver")).decide_approval(request).await.expect("approve");
    }

    /// The terms hash of approval `id`, read as the auditor (who reads every
    /// approval; the admin reads none by itself): what a person deciding it
    /// is shown.
    async fn terms_hash_of(&self, id: &str) -> Option<String> {
        let request = pb::GetApprovalRequest { id: id.to_string(), caller_now_ms: None };
        let answer = ApprovalServiceClient::new(self.ops("auditor")).get_approval(request).await.expect("read");
        answer.into_inner().approval.map(|approval| approval.terms_hash)
    }

    async fn approved_approval(&self) -> String {
        let id = self.pending_approval().await;
        self.approve(&id).await;
        id
    }

    async fn submit(&self, capability_id: &str) -> pb::SubmitResponse {
        let request_id = self.next("submit");
        let request = pb::SubmitRequest {
            input_json: format!(r#"{{"submit":"{request_id}"}}"#),
            request_id,
            capability_id: capability_id.to_string(),
            surface: "authz".into(),
            ..pb::SubmitRequest::default()
        };
        ExecutionServiceClient::new(self.ops("submitter")).submit(request).await.expect("submit").into_inner()
    }

    async fn queued_execution(&self, capability_id: &str) -> String {
        match self.submit(capability_id).await.outcome {
            Some(pb::submit_response::Outcome::Execution(execution)) => execution.execution_id,
            other => panic!("{capability_id} should run without approval: {other:?}"),
        }
    }

    /// An approved approval a submission of a gated capability waits on.
    async fn approval_to_resume(&self) -> String {
        let id = match self.submit("authz.gated").await.outcome {
            Some(pb::submit_response::Outcome::ApprovalRequired(approval)) => approval.id,
            other => panic!("authz.gated needs an approval: {other:?}"),
        };
        self.approve(&id).await;
        id
    }

    /// A lease worker:w1 holds on a fresh execution of `queue`'s capability.
    async fn lease(&self, capability_id: &str, queue: &str) -> (u64, String) {
        let execution_id = self.queued_execution(capability_id).await;
        let request = pb::PollRequest {
            request_id: self.next("poll"),
            queues: vec![queue.to_string()],
            max_tasks: 1,
            wait_ms: 5_000,
            ..pb::PollRequest::default()
        };
        let tasks = WorkerServiceClient::new(self.ops("worker")).poll(request).await.expect("poll").into_inner().tasks;
        let task = tasks.into_iter().next().expect("the worker is granted the task just submitted");
        assert_eq!(task.execution_id, execution_id, "the only ready task of {queue}");
        (task.lease.expect("a task carries its lease").lease_id, execution_id)
    }

    /// The owner's execution that `user:approver` approved and `worker:w1`
    /// completed: what the execution reads read.
    async fn approved_execution(&self) -> String {
        let approval_id = self.approval_to_resume().await;
        let request =
            pb::ResumeRequest { request_id: self.next("resume"), approval_id, ..pb::ResumeRequest::default() };
        let resumed = ExecutionServiceClient::new(self.ops("submitter")).resume(request).await.expect("resume");
        let execution_id = resumed.into_inner().execution.expect("the resumed execution").execution_id;
        let request = pb::PollRequest {
            request_id: self.next("poll"),
            queues: vec!["authz-gated".to_string()],
            max_tasks: 1,
            wait_ms: 5_000,
            ..pb::PollRequest::default()
        };
        let tasks = WorkerServiceClient::new(self.ops("worker")).poll(request).await.expect("poll").into_inner().tasks;
        let task = tasks.into_iter().next().expect("the worker is granted the resumed execution");
        assert_eq!(task.execution_id, execution_id, "the only ready task of authz-gated");
        let report = pb::ReportRequest {
            request_id: self.next("report"),
            lease_id: task.lease.expect("a task carries its lease").lease_id,
            worker_id: String::new(),
            outcome: Some(pb::report_request::Outcome::Completed(pb::ReportCompleted { output_json: "{}".into() })),
        };
        WorkerServiceClient::new(self.ops("worker")).report(report).await.expect("complete the approved execution");
        execution_id
    }

    /// A principal that holds `auditor`, for a revoke to take away.
    async fn bound_subject(&self) -> String {
        let subject = format!("user:{}", self.next("scratch"));
        self.grant(&subject, Auditor).await;
        subject
    }

    /// The records `rpc` acts on. `for_allowed` is the credential of the
    /// allowed caller the record is made for, `None` for the refused ones
    /// (their calls must be refused on a record that exists).
    async fn target(&self, rpc: Rpc, for_allowed: Option<Credential>) -> Target {
        let mut target = Target {
            approval_id: self.approval_id.clone(),
            execution_id: self.execution_id.clone(),
            ..Target::default()
        };
        match rpc {
            Rpc::DecideApproval | Rpc::CancelApproval => target.approval_id = self.pending_approval().await,
            Rpc::ConsumeApproval => target.approval_id = self.approved_approval().await,
            Rpc::Resume | Rpc::ResumeAndWait | Rpc::ResumeOnDecision => {
                target.approval_id = self.approval_to_resume().await;
            }
            // An event a caller records about an execution is its own to
            // read: recording about the fixed one would widen the views the
            // read rows check.
            Rpc::CancelExecution | Rpc::RecordEvent => {
                target.execution_id = self.queued_execution("authz.queued").await;
            }
            Rpc::Poll => target.execution_id = self.queued_execution("authz.poll").await,
            Rpc::Heartbeat | Rpc::Report | Rpc::ReportAndPoll => {
                (target.lease_id, target.execution_id) = self.lease("authz.lease", "authz-lease").await;
            }
            Rpc::Revoke => target.subject = self.bound_subject().await,
            Rpc::CastVote | Rpc::WithdrawVote => {
                (target.approval_id, target.subject) = self.governed_approval().await;
            }
            Rpc::DeletePolicy => {
                let name = self.next("authz-deleted");
                self.set_policy(&name, &name, 1).await;
                target.subject = name;
            }
            Rpc::AddLearner | Rpc::Promote | Rpc::RemoveNode => {
                let (node, addr) = self.joiners[&for_allowed.unwrap_or(Credential::Certificate)].clone();
                (target.node, target.addr) = (node, addr);
            }
            _ => {}
        }
        target
    }

    // ----- the calls -----

    /// Calls `rpc` as `caller` through `node`; Ok when it succeeded.
    async fn call(&self, rpc: Rpc, caller: &Caller, node: u64, target: &Target) -> Result<(), Status> {
        let channel = caller.on(node);
        let request_id = self.next("call");
        match rpc {
            Rpc::RegisterCapability => {
                let spec = capability(&self.next("authz.registered"), "authz-registered", false);
                let request = pb::RegisterCapabilityRequest { request_id, spec: Some(spec) };
                done(CapabilityServiceClient::new(channel).register_capability(request).await)
            }
            Rpc::GetCapability => {
                let request = pb::GetCapabilityRequest { id: "authz.queued".into(), version: None };
                let answer = CapabilityServiceClient::new(channel).get_capability(request).await?;
                found(answer.into_inner().capability, "capability authz.queued")
            }
            Rpc::ListCapabilities => {
                done(CapabilityServiceClient::new(channel).list_capabilities(pb::ListCapabilitiesRequest {}).await)
            }
            Rpc::CreateApproval => {
                done(ApprovalServiceClient::new(channel).create_approval(self.create_request()).await)
            }
            Rpc::GetApproval => {
                let request = pb::GetApprovalRequest { id: target.approval_id.clone(), caller_now_ms: None };
                let answer = ApprovalServiceClient::new(channel).get_approval(request).await?;
                found(answer.into_inner().approval, "the fixed approval")
            }
            Rpc::WaitApproval => {
                let request = pb::WaitApprovalRequest { id: target.approval_id.clone(), wait_ms: 0 };
                let answer = ApprovalServiceClient::new(channel).wait_approval(request).await?;
                found(answer.into_inner().approval, "the fixed approval")
            }
            Rpc::DecideApproval => {
                // A decision names the terms its author was shown (SPEC §13).
                let request = pb::DecideApprovalRequest {
                    request_id,
                    id: target.approval_id.clone(),
                    status: pb::ApprovalStatus::Approved as i32,
                    terms_hash: self.terms_hash_of(&target.approval_id).await,
                    ..pb::DecideApprovalRequest::default()
                };
                done(ApprovalServiceClient::new(channel).decide_approval(request).await)
            }
            Rpc::ConsumeApproval => {
                let request = pb::ConsumeApprovalRequest {
                    request_id,
                    caller_now_ms: None,
                    id: target.approval_id.clone(),
                    execution_id: self.next("consumer"),
                };
                done(ApprovalServiceClient::new(channel).consume_approval(request).await)
            }
            Rpc::ListApprovals => {
                // The fixed approval is the oldest: first in every oldest-first page that may hold it.
                let request =
                    pb::ListApprovalsRequest { limit: 10, oldest_first: true, ..pb::ListApprovalsRequest::default() };
                let page = ApprovalServiceClient::new(channel).list_approvals(request).await?.into_inner();
                let listed = page.approvals.iter().any(|approval| approval.id == target.approval_id);
                found(listed.then_some(()), "the fixed approval in the listing")
            }
            Rpc::CancelApproval => {
                let request =
                    pb::CancelApprovalRequest { request_id, caller_now_ms: None, id: target.approval_id.clone() };
                done(ApprovalServiceClient::new(channel).cancel_approval(request).await)
            }
            Rpc::Submit => {
                let request = pb::SubmitRequest {
                    input_json: format!(r#"{{"submit":"{request_id}"}}"#),
                    request_id,
                    capability_id: "authz.queued".into(),
                    surface: "authz".into(),
                    ..pb::SubmitRequest::default()
                };
                done(ExecutionServiceClient::new(channel).submit(request).await)
            }
            Rpc::Resume => {
                let request = pb::ResumeRequest {
                    request_id,
                    approval_id: target.approval_id.clone(),
                    ..pb::ResumeRequest::default()
                };
                done(ExecutionServiceClient::new(channel).resume(request).await)
            }
            Rpc::ResumeAndWait | Rpc::ResumeOnDecision => {
                let resume = pb::ResumeRequest {
                    request_id,
                    approval_id: target.approval_id.clone(),
                    ..pb::ResumeRequest::default()
                };
                let await_decision = rpc == Rpc::ResumeOnDecision;
                let request = pb::ResumeAndWaitRequest { resume: Some(resume), wait_ms: 0, await_decision };
                let answer = ExecutionServiceClient::new(channel).resume_and_wait(request).await?;
                found(answer.into_inner().execution, "the resumed execution")
            }
            Rpc::GetExecution => {
                let request = pb::GetExecutionRequest { execution_id: target.execution_id.clone() };
                let answer = ExecutionServiceClient::new(channel).get_execution(request).await?;
                found(answer.into_inner().execution, "the completed execution")
            }
            Rpc::WaitExecution => {
                let request = pb::WaitExecutionRequest { execution_id: target.execution_id.clone(), timeout_ms: 1_000 };
                let answer = ExecutionServiceClient::new(channel).wait_execution(request).await?.into_inner();
                if answer.timed_out {
                    return Err(Status::internal("waiting on a completed execution timed out"));
                }
                Ok(())
            }
            Rpc::CancelExecution => {
                let request =
                    pb::CancelExecutionRequest { request_id, execution_id: target.execution_id.clone(), actor: None };
                done(ExecutionServiceClient::new(channel).cancel_execution(request).await)
            }
            Rpc::ListExecutions => {
                let mut request = pb::ListExecutionsRequest { limit: 1_000, ..pb::ListExecutionsRequest::default() };
                let mut listed = false;
                loop {
                    let mut client = ExecutionServiceClient::new(channel.clone());
                    let page = client.list_executions(request.clone()).await?.into_inner();
                    listed |= page.executions.iter().any(|execution| execution.execution_id == target.execution_id);
                    if listed || page.next_page_token.is_empty() {
                        break;
                    }
                    request.page_token = page.next_page_token;
                }
                found(listed.then_some(()), "the completed execution in the listing")
            }
            Rpc::ListExecutionEvents => {
                let request = pb::ListExecutionEventsRequest {
                    execution_id: target.execution_id.clone(),
                    after_cursor: 0,
                    limit: 10,
                };
                let answer = ExecutionServiceClient::new(channel).list_execution_events(request).await?;
                nonempty(answer.into_inner().events.len(), "events of the completed execution")
            }
            Rpc::Poll | Rpc::PollIdle => {
                let queue = if rpc == Rpc::Poll { "authz-poll" } else { "authz-empty" };
                let request = pb::PollRequest {
                    request_id,
                    queues: vec![queue.into()],
                    max_tasks: 1,
                    wait_ms: 0,
                    ..pb::PollRequest::default()
                };
                let tasks = WorkerServiceClient::new(channel).poll(request).await?.into_inner().tasks;
                match rpc {
                    Rpc::Poll => nonempty(tasks.len(), "a task of the queue with ready work"),
                    _ if tasks.is_empty() => Ok(()),
                    _ => Err(Status::internal(format!("{queue} has no ready work, yet the poll leased some"))),
                }
            }
            Rpc::Heartbeat => {
                let request = pb::HeartbeatRequest { request_id, lease_id: target.lease_id, worker_id: String::new() };
                done(WorkerServiceClient::new(channel).heartbeat(request).await)
            }
            Rpc::Report => {
                let request = pb::ReportRequest {
                    request_id,
                    lease_id: target.lease_id,
                    worker_id: String::new(),
                    outcome: Some(pb::report_request::Outcome::Completed(pb::ReportCompleted {
                        output_json: "{}".into(),
                    })),
                };
                done(WorkerServiceClient::new(channel).report(request).await)
            }
            Rpc::ReportAndPoll => {
                let report = pb::ReportRequest {
                    request_id,
                    lease_id: target.lease_id,
                    worker_id: String::new(),
                    outcome: Some(pb::report_request::Outcome::Completed(pb::ReportCompleted {
                        output_json: "{}".into(),
                    })),
                };
                let request = pb::ReportAndPollRequest {
                    report: Some(report),
                    queues: vec!["authz-empty".into()],
                    max_tasks: 1,
                    ..pb::ReportAndPollRequest::default()
                };
                let answer = WorkerServiceClient::new(channel).report_and_poll(request).await?.into_inner();
                match answer.poll_failure {
                    Some(failure) => Err(Status::internal(format!("the poll part failed: {failure:?}"))),
                    None => found(answer.report, "the report's answer"),
                }
            }
            Rpc::WatchEvents => {
                // The fixed execution's events are all written: a watcher that
                // may read them gets the first at once, one that may not
                // hears nothing, as of an unknown execution.
                let request =
                    pb::WatchEventsRequest { after_cursor: 0, execution_id: Some(target.execution_id.clone()) };
                let mut stream = AuditServiceClient::new(channel).watch_events(request).await?.into_inner();
                match tokio::time::timeout(WATCH_SILENCE, stream.message()).await {
                    Ok(Ok(Some(_))) => Ok(()),
                    Ok(Ok(None)) => Err(Status::internal("the event stream ended before its first event")),
                    Ok(Err(status)) => Err(status),
                    Err(_) => Err(Status::not_found("no event of the fixed execution within the silence bound")),
                }
            }
            Rpc::ListEvents => {
                let request = pb::ListEventsRequest {
                    after_cursor: 0,
                    limit: 10,
                    execution_id: None,
                    ..pb::ListEventsRequest::default()
                };
                let answer = AuditServiceClient::new(channel).list_events(request).await?;
                nonempty(answer.into_inner().events.len(), "audit events")
            }
            Rpc::GetEvent => {
                let answer = AuditServiceClient::new(channel).get_event(pb::GetEventRequest { cursor: 1 }).await?;
                found(answer.into_inner().event, "audit event 1")
            }
            Rpc::GetCheckpoint => {
                let answer = AuditServiceClient::new(channel).get_checkpoint(pb::GetCheckpointRequest {}).await?;
                nonempty(answer.into_inner().size as usize, "audit tree leaves")
            }
            Rpc::GetInclusionProof => {
                let request = pb::GetInclusionProofRequest { index: 0, size: 0 };
                let answer = AuditServiceClient::new(channel).get_inclusion_proof(request).await?;
                found(answer.into_inner().canonical_event, "audit event 1's canonical bytes")
            }
            Rpc::GetConsistencyProof => {
                let request = pb::GetConsistencyProofRequest { old_size: 1, new_size: 0 };
                let answer = AuditServiceClient::new(channel).get_consistency_proof(request).await?;
                nonempty(answer.into_inner().new_root.len(), "the newer root")
            }
            Rpc::ListLeaves => {
                let request = pb::ListLeavesRequest { start_index: 0, limit: 10 };
                let answer = AuditServiceClient::new(channel).list_leaves(request).await?;
                nonempty(answer.into_inner().leaves.len(), "audit tree leaves")
            }
            Rpc::RegisterNoteKey => {
                let request = pb::RegisterNoteKeyRequest { node_id: 1, public_key: vec![7; 32] };
                done(AuditServiceClient::new(channel).register_note_key(request).await)
            }
            Rpc::CosignCheckpoint => {
                let request =
                    pb::CosignCheckpointRequest { node_id: 1, size: 1, signature: vec![7; 64], ..Default::default() };
                done(AuditServiceClient::new(channel).cosign_checkpoint(request).await)
            }
            Rpc::RecordEvent => {
                let request = pb::RecordEventRequest {
                    request_id,
                    r#type: "authz.recorded".into(),
                    execution_id: Some(target.execution_id.clone()),
                    ..pb::RecordEventRequest::default()
                };
                done(AuditServiceClient::new(channel).record_event(request).await)
            }
            Rpc::Status => {
                let request = pb::StatusRequest { without_state_hash: true };
                done(ClusterServiceClient::new(channel).status(request).await)
            }
            Rpc::AddLearner => {
                let request = pb::AddLearnerRequest {
                    request_id,
                    node_id: target.node,
                    addr: target.addr.clone(),
                    wait_caught_up: false,
                };
                done(ClusterServiceClient::new(channel).add_learner(request).await)
            }
            Rpc::Promote => {
                let request = pb::PromoteRequest { request_id, node_id: target.node };
                done(ClusterServiceClient::new(channel).promote(request).await)
            }
            Rpc::RemoveNode => {
                let request = pb::RemoveNodeRequest { request_id, node_id: target.node };
                done(ClusterServiceClient::new(channel).remove_node(request).await)
            }
            Rpc::Backup => {
                let mut stream = ClusterServiceClient::new(channel).backup(pb::BackupRequest {}).await?.into_inner();
                match tokio::time::timeout(Duration::from_secs(30), stream.message()).await {
                    Ok(Ok(Some(_))) => Ok(()),
                    Ok(Ok(None)) => Err(Status::internal("the backup stream ended before its header")),
                    Ok(Err(status)) => Err(status),
                    Err(_) => Err(Status::deadline_exceeded("no backup header within 30 s")),
                }
            }
            Rpc::Grant => {
                let grant = pb::AccessGrant {
                    principal: format!("user:{}", self.next("granted")),
                    grant: Auditor.as_str().into(),
                    scope: Vec::new(),
                    skew_ms_max: None,
                };
                done(AccessServiceClient::new(channel).grant(pb::GrantRequest { grant: Some(grant), request_id }).await)
            }
            Rpc::Revoke => {
                let request =
                    pb::RevokeRequest { principal: target.subject.clone(), grant: Auditor.as_str().into(), request_id };
                done(AccessServiceClient::new(channel).revoke(request).await)
            }
            Rpc::ListGrants => {
                let answer = AccessServiceClient::new(channel).list(pb::ListGrantsRequest { principal: None }).await?;
                nonempty(answer.into_inner().grants.len(), "the grants")
            }
            Rpc::SetQuota => {
                // A principal no row calls as: its quota changes nothing here.
                let request = pb::SetQuotaRequest {
                    principal: "user:quota-subject".into(),
                    pending_approvals_max: Some(10),
                    request_id,
                    ..pb::SetQuotaRequest::default()
                };
                done(AccessServiceClient::new(channel).set_quota(request).await)
            }
            Rpc::GetOwnQuota => {
                let request = pb::GetQuotaRequest { principal: String::new() };
                let quota = AccessServiceClient::new(channel).get_quota(request).await?.into_inner().quota;
                match quota {
                    Some(quota) if quota.principal == caller.who.principal => Ok(()),
                    other => Err(Status::internal(format!("GetQuota of its own answered {other:?}"))),
                }
            }
            Rpc::GetQuota => {
                let request = pb::GetQuotaRequest { principal: "user:quota-subject".into() };
                let answer = AccessServiceClient::new(channel).get_quota(request).await?;
                found(answer.into_inner().quota, "another principal's quota")
            }
            Rpc::ListQuotas => {
                let answer = AccessServiceClient::new(channel).list_quotas(pb::ListQuotasRequest {}).await?;
                nonempty(answer.into_inner().quotas.len(), "quotas")
            }
            Rpc::SetPolicy => {
                // Its own approval type: the change voids nothing another row uses.
                let name = self.next("authz-set");
                done(PolicyServiceClient::new(channel).set_policy(policy_request(request_id, &name, &name, 1)).await)
            }
            Rpc::GetPolicy => {
                let request = pb::GetPolicyRequest { name: VOTED_POLICY.into() };
                let answer = PolicyServiceClient::new(channel).get_policy(request).await?;
                found(answer.into_inner().policy, "the fixed policy")
            }
            Rpc::ListPolicies => {
                let answer = PolicyServiceClient::new(channel).list_policies(pb::ListPoliciesRequest {}).await?;
                nonempty(answer.into_inner().policies.len(), "policies")
            }
            Rpc::DeletePolicy => {
                let request =
                    pb::DeletePolicyRequest { request_id, name: target.subject.clone(), non_retroactive: false };
                done(PolicyServiceClient::new(channel).delete_policy(request).await)
            }
            Rpc::CastVote | Rpc::WithdrawVote => {
                let mut client = PolicyServiceClient::new(channel);
                let vote = pb::CastVoteRequest {
                    request_id: format!("{request_id}-vote"),
                    approval_id: target.approval_id.clone(),
                    approve: true,
                    input_hash: target.subject.clone(),
                    terms_hash: self.terms_hash_of(&target.approval_id).await,
                    ..pb::CastVoteRequest::default()
                };
                let approval = client.cast_vote(vote).await?.into_inner().approval;
                let votes = approval.and_then(|approval| approval.quorum).map_or(0, |quorum| quorum.votes.len());
                if votes != 1 {
                    return Err(Status::internal(format!("the vote was recorded {votes} times")));
                }
                if rpc == Rpc::CastVote {
                    return Ok(());
                }
                let request =
                    pb::WithdrawVoteRequest { request_id, approval_id: target.approval_id.clone(), approver: None };
                done(client.withdraw_vote(request).await)
            }
            Rpc::ListVotes => {
                let request = pb::ListVotesRequest { approval_id: target.approval_id.clone() };
                done(PolicyServiceClient::new(channel).list_votes(request).await)
            }
            Rpc::WhoAmI => {
                let answer = AccessServiceClient::new(channel).who_am_i(pb::WhoAmIRequest {}).await?.into_inner();
                if answer.principal != caller.who.principal {
                    return Err(Status::internal(format!("WhoAmI named {}", answer.principal)));
                }
                Ok(())
            }
        }
    }

    // ----- traces -----

    /// The leader's applied index, read as the admin. The leader must not
    /// have changed: every verdict of the leader rows is the leader's.
    async fn leader_applied(&self) -> u64 {
        let request = pb::StatusRequest { without_state_hash: true };
        let status = ClusterServiceClient::new(self.ops("admin"))
            .status(request)
            .await
            .expect("the leader's status")
            .into_inner();
        assert_eq!(status.leader_id, Some(self.leader), "the leader changed during the test");
        status.last_applied_index
    }

    /// The audit events after the last head seen, as the auditor; moves the head.
    async fn new_audit_events(&self) -> Vec<pb::Event> {
        let mut events = Vec::new();
        loop {
            let after_cursor = *self.audit_head.lock().expect("not poisoned");
            let request = pb::ListEventsRequest {
                after_cursor,
                limit: 1_000,
                execution_id: None,
                ..pb::ListEventsRequest::default()
            };
            let page = AuditServiceClient::new(self.ops("auditor"))
                .list_events(request)
                .await
                .expect("the auditor lists events")
                .into_inner();
            if page.events.is_empty() {
                return events;
            }
            *self.audit_head.lock().expect("not poisoned") = page.last_cursor;
            events.extend(page.events);
        }
    }

    /// Calls `rpc` as every refused caller; for a mutation, also checks that
    /// the refusals left no trace. Returns the outcomes and, for a trace,
    /// what was found.
    ///
    /// The trace check: no audit event appears, and the leader's applied
    /// index does not move across the batch. The leader proposes commands of
    /// its own only at a core deadline (lease expiry, backoff end, and the
    /// once-a-minute compaction tick); every lease here outlives the test
    /// and no execution backs off, so only the compaction tick can land in a
    /// batch. A batch whose index moved is therefore repeated (a refusal is
    /// repeatable), up to three times: two ticks are a minute apart, so a
    /// refused call that appends to the log moves the index on every
    /// attempt and fails, while a tick moves it on one at most.
    async fn refused_batch(
        &self,
        row: &Row,
        node: u64,
        callers: &[&Caller],
        target: &Target,
    ) -> (Vec<Result<(), Status>>, Option<String>) {
        const ATTEMPTS: usize = 3;
        let mut results = Vec::new();
        let mut moves = Vec::new();
        for _ in 0..ATTEMPTS {
            let before = if row.mutates {
                // Moves the head past the fixtures' events.
                self.new_audit_events().await;
                Some(self.leader_applied().await)
            } else {
                None
            };
            results.clear();
            for caller in callers {
                results.push(self.call(row.rpc, caller, node, target).await);
            }
            let Some(before) = before else { return (results, None) };
            let after = self.leader_applied().await;
            let events = self.new_audit_events().await;
            if !events.is_empty() {
                let types: Vec<_> = events.iter().map(|event| event.r#type.clone()).collect();
                return (results, Some(format!("refused {:?} calls recorded audit events {types:?}", row.rpc)));
            }
            if after == before {
                return (results, None);
            }
            moves.push(format!("{before} -> {after}"));
        }
        let trace = format!(
            "refused {:?} calls moved the leader's applied index on all {ATTEMPTS} attempts ({})",
            row.rpc,
            moves.join(", ")
        );
        (results, Some(trace))
    }

    /// Runs `row` through `node`: the refused callers first (on a record that
    /// exists), then each allowed caller on a record of its own.
    async fn run_row(&self, row: &Row, node: u64, outcomes: &mut Vec<Outcome>, traces: &mut Vec<String>) {
        let via = if node == self.leader { "leader" } else { "follower" };
        let (allowed, refused): (Vec<&Caller>, Vec<&Caller>) =
            self.callers.iter().partition(|caller| row.allowed.expect(caller) == Expect::Ok);
        if !refused.is_empty() {
            let target = self.target(row.rpc, None).await;
            let (results, trace) = self.refused_batch(row, node, &refused, &target).await;
            traces.extend(trace.map(|trace| format!("via {via}: {trace}")));
            for (caller, result) in refused.iter().zip(results) {
                let expect = row.allowed.expect(caller);
                outcomes.push(Outcome { rpc: row.rpc, via, caller: caller.label(), expect, result });
            }
        }
        for caller in allowed {
            let target = self.target(row.rpc, Some(caller.credential)).await;
            let result = self.call(row.rpc, caller, node, &target).await;
            outcomes.push(Outcome { rpc: row.rpc, via, caller: caller.label(), expect: Expect::Ok, result });
        }
    }
}

/// A SetPolicy request: `name` governs approval type `kind` and needs `k`
/// of the group {`user:approver`, `user:fin`}.
fn policy_request(request_id: String, name: &str, kind: &str, k: u32) -> pb::SetPolicyRequest {
    pb::SetPolicyRequest {
        request_id,
        name: name.into(),
        approval_types: vec![kind.into()],
        factors: vec![pb::PolicyFactor {
            name: "pair".into(),
            k,
            scope: None,
            group: vec!["user:approver@example.test".into(), "user:fin".into()],
        }],
        ..pb::SetPolicyRequest::default()
    }
}

fn found<T>(value: Option<T>, what: &str) -> Result<(), Status> {
    value.map(drop).ok_or_else(|| Status::not_found(format!("{what} is missing from the answer")))
}

fn nonempty(count: usize, what: &str) -> Result<(), Status> {
    if count == 0 {
        return Err(Status::not_found(format!("no {what} in the answer")));
    }
    Ok(())
}

/// Starts the cluster (plus two joining nodes for the membership rows),
/// binds the grants and sets up the shared records.
async fn world(root: &std::path::Path) -> World {
    let mut spec = ClusterSpec::new(gavel_binary(), root);
    spec.security = Security::secure(Principal::parse(ADMIN).expect("a principal"));
    spec.start_timeout = WAIT;
    spec.status_timeout = Duration::from_secs(5);
    spec.args.extend(oidc_node_flags());
    let mut cluster = gavel_testkit::Cluster::start(spec).await.unwrap_or_else(|error| panic!("{error}"));
    let mut joiners = BTreeMap::new();
    for credential in [Credential::Certificate, Credential::Token] {
        let id = cluster.add_node().expect("place a joining node");
        cluster.start_node(id).unwrap_or_else(|error| panic!("start node {id}: {error}"));
        joiners.insert(credential, (id, cluster.addr(id).expect("a placed node").to_string()));
    }
    let leader = cluster.wait_for_leader(WAIT).await.unwrap_or_else(|error| panic!("{error}"));
    let follower = (1..=3).find(|id| *id != leader).expect("three voters");
    let mut callers = Vec::new();
    for who in PRINCIPALS {
        let principal = Principal::parse(who.principal).expect("a principal");
        let mut credentials = vec![Credential::Certificate];
        credentials.extend(who.with_token.then_some(Credential::Token));
        credentials.extend(who.with_oidc.then_some(Credential::OidcToken));
        for credential in credentials {
            let (tls, bearer): (ClientTls, _) = match credential {
                Credential::Certificate => (cluster.credentials(&principal).expect("a client certificate"), None),
                Credential::Token => {
                    let token = cluster.token(&principal, who.token_roles).expect("a token");
                    let value = MetadataValue::try_from(format!("Bearer {token}")).expect("a header value");
                    (cluster.ca_only().expect("the CA"), Some(value))
                }
                Credential::OidcToken => {
                    let value = MetadataValue::try_from(format!("Bearer {}", oidc_id_token(&principal)))
                        .expect("a header value");
                    (cluster.ca_only().expect("the CA"), Some(value))
                }
            };
            let channels = [leader, follower]
                .into_iter()
                .map(|id| {
                    let addr = cluster.addr(id).expect("a node");
                    (id, gavel_testkit::channel_with(addr, CALL_TIMEOUT, Some(&tls)).expect("a channel"))
                })
                .collect();
            callers.push(Caller { who, credential, bearer: Bearer(bearer), channels });
        }
    }
    let mut world = World {
        cluster,
        leader,
        follower,
        callers,
        approval_id: String::new(),
        execution_id: String::new(),
        serial: AtomicU64::new(0),
        audit_head: Mutex::new(0),
        joiners,
    };
    // The bootstrapping node names the admin once it leads.
    let admin = world.ops("admin");
    let bootstrapped = gavel_testkit::eventually(WAIT, Duration::from_millis(50), || {
        let mut client = AccessServiceClient::new(admin.clone());
        async move {
            let answer = client.who_am_i(pb::WhoAmIRequest {}).await.ok()?.into_inner();
            answer.grants.iter().any(|grant| grant.grant == Admin.as_str()).then_some(())
        }
    })
    .await;
    assert!(bootstrapped.is_some(), "{ADMIN} was not bootstrapped as admin within {WAIT:?}");
    for who in PRINCIPALS {
        // The bootstrap bound the admin's admin grant.
        for grant in who.grants.iter().filter(|grant| who.principal != ADMIN || **grant != Admin) {
            world.grant_scoped(who.principal, *grant, who.approver_scope).await;
        }
    }
    for (id, queue, gated) in [
        ("authz.queued", "authz-queued", false),
        ("authz.poll", "authz-poll", false),
        ("authz.lease", "authz-lease", false),
        ("authz.gated", "authz-gated", true),
    ] {
        world.register(capability(id, queue, gated)).await;
    }
    world.approval_id = world.pending_approval().await;
    world.execution_id = world.approved_execution().await;
    world.set_policy(VOTED_POLICY, VOTED_TYPE, 2).await;
    world
}

/// The test OpenID Provider the nodes accept ID tokens of: never reached,
/// its keys are gavel-oidc's fixtures.
const OIDC_ISSUER: &str = "https://id.example.test";
/// The console's client id: the audience of the provider's ID tokens.
const OIDC_AUDIENCE: &str = "gavel-console";
const OIDC_FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../crates/gavel-oidc/tests/fixtures");

fn oidc_node_flags() -> Vec<String> {
    vec![
        format!("--oidc-issuer={OIDC_ISSUER}"),
        format!("--oidc-audience={OIDC_AUDIENCE}"),
        format!("--oidc-jwks={OIDC_FIXTURES}/jwks.json"),
        "--oidc-principal-claim=email".to_string(),
        format!("--oidc-principal-prefix={}:", "user"),
    ]
}

/// An RS256 ID token of the test provider whose `email` claim is the id of
/// `principal` (a `user:`), valid for an hour.
fn oidc_id_token(principal: &Principal) -> String {
    let key = std::fs::read(format!("{OIDC_FIXTURES}/rsa.pem")).expect("the fixture RSA key");
    let key = jsonwebtoken::EncodingKey::from_rsa_pem(&key).expect("an RSA key");
    let now = gavel_pki::unix_seconds();
    let claims = serde_json::json!({"iss": OIDC_ISSUER, "aud": OIDC_AUDIENCE, "sub": principal.id,
        "email": principal.id, "email_verified": true, "iat": now, "exp": now + 3600});
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256);
    header.kid = Some("rsa-1".to_string());
    jsonwebtoken::encode(&header, &claims, &key).expect("sign an ID token")
}

/// Health answers without credentials on every node; a public call without
/// any is `UNAUTHENTICATED`.
async fn check_anonymous(world: &World) -> Vec<String> {
    let mut problems = Vec::new();
    let ca_only = world.cluster.ca_only().expect("the CA");
    for id in [world.leader, world.follower] {
        let addr = world.cluster.addr(id).expect("a node");
        let channel = gavel_testkit::channel_with(addr, CALL_TIMEOUT, Some(&ca_only)).expect("a channel");
        let health = HealthClient::new(channel.clone()).check(HealthCheckRequest { service: String::new() }).await;
        match health {
            Ok(answer)
                if answer.get_ref().status
                    == tonic_health::pb::health_check_response::ServingStatus::Serving as i32 => {}
            other => problems.push(format!("health Check without credentials on node {id}: {other:?}")),
        }
        let whoami = AccessServiceClient::new(channel).who_am_i(pb::WhoAmIRequest {}).await;
        match whoami {
            Err(status) if status.code() == Code::Unauthenticated => {}
            other => problems.push(format!("WhoAmI without credentials on node {id}: {other:?}")),
        }
    }
    problems
}

/// The matrix: one line per row and route, one column per caller.
fn print_matrix(world: &World, outcomes: &[Outcome]) {
    let labels: Vec<String> = world.callers.iter().map(Caller::label).collect();
    let mut text = format!("{:<28}", "rpc (via)");
    for label in &labels {
        text.push_str(&format!(" {label:>15}"));
    }
    text.push('\n');
    for via in ["leader", "follower"] {
        for row in TABLE {
            let cells: Vec<&Outcome> = outcomes.iter().filter(|o| o.rpc == row.rpc && o.via == via).collect();
            if cells.is_empty() {
                continue;
            }
            text.push_str(&format!("{:<28}", format!("{:?} ({via})", row.rpc)));
            for label in &labels {
                let cell = cells.iter().find(|o| &o.caller == label);
                let mark = cell.map_or("-".to_string(), |o| {
                    let expected = if o.expect == Expect::Ok { "" } else { "*" };
                    format!("{}{expected}", o.short())
                });
                text.push_str(&format!(" {mark:>15}"));
            }
            text.push('\n');
        }
    }
    println!("authorization matrix (* = the table refuses this cell):\n{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rpc_as_every_principal_matches_the_security_table() {
    let started = Instant::now();
    let dir = tempfile::tempdir().expect("temp dir");
    let world = world(dir.path()).await;
    let setup = started.elapsed();
    let mut outcomes = Vec::new();
    let mut traces = Vec::new();
    for row in TABLE {
        world.run_row(row, world.leader, &mut outcomes, &mut traces).await;
    }
    for row in TABLE.iter().filter(|row| row.via_follower) {
        world.run_row(row, world.follower, &mut outcomes, &mut traces).await;
    }
    let anonymous = check_anonymous(&world).await;
    print_matrix(&world, &outcomes);
    println!("{} calls in {:?} (setup {setup:?})", outcomes.len(), started.elapsed());

    // Through a follower, the same verdict as through the leader.
    let mut differences = Vec::new();
    for forwarded in outcomes.iter().filter(|o| o.via == "follower") {
        let direct =
            outcomes.iter().find(|o| o.via == "leader" && o.rpc == forwarded.rpc && o.caller == forwarded.caller);
        let direct = direct.expect("every follower row ran through the leader too");
        if direct.short() != forwarded.short() {
            differences.push(format!(
                "{:?} as {}: {} through the leader, {} through the follower",
                forwarded.rpc,
                forwarded.caller,
                direct.short(),
                forwarded.short()
            ));
        }
    }
    let mismatches: Vec<String> = outcomes.iter().filter_map(Outcome::mismatch).collect();
    let all: Vec<&String> = mismatches.iter().chain(&traces).chain(&differences).chain(&anonymous).collect();
    assert!(all.is_empty(), "{} disagreements with docs/security.md:\n{all:#?}", all.len());
    drop(world);
}
