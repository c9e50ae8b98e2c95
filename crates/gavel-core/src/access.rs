//! Who may do what: authenticated principals, the grants bound to them, and
//! the authorization decision.
//!
//! The edge (the node's routing layer) authenticates every call and stamps
//! the [`Caller`] into the command's [`crate::Envelope`]. [`State::apply`]
//! decides authorization at the command's position in the log, against the
//! replicated bindings, so a revocation is linearizable: once a `Revoke` is
//! applied, no command ordered after it succeeds for that principal.
//!
//! A command whose envelope carries no caller comes from a node started with
//! `--insecure`: identity is then self-declared, as before authentication
//! existed, and no grant is checked.
//!
//! [`State::apply`]: crate::State::apply

use std::collections::BTreeSet;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::model::{Actor, ActorKind};
pub use crate::model::{Principal, PrincipalKind};

impl PrincipalKind {
    /// Every kind, in order.
    pub const ALL: [PrincipalKind; 4] =
        [PrincipalKind::User, PrincipalKind::Service, PrincipalKind::Worker, PrincipalKind::Node];

    /// The wire name: `user`, `service`, `worker` or `node`.
    pub fn as_str(self) -> &'static str {
        match self {
            PrincipalKind::User => "user",
            PrincipalKind::Service => "service",
            PrincipalKind::Worker => "worker",
            PrincipalKind::Node => "node",
        }
    }

    /// The kind named `name`, if any.
    pub fn parse(name: &str) -> Option<PrincipalKind> {
        PrincipalKind::ALL.into_iter().find(|kind| kind.as_str() == name)
    }

    /// The kind of the actor a principal of this kind is when it names no
    /// other ([`Principal::as_actor`]): a user is a user, a worker is
    /// automation, a service or node is a service.
    pub fn actor_kind(self) -> ActorKind {
        match self {
            PrincipalKind::User => ActorKind::User,
            PrincipalKind::Service | PrincipalKind::Node => ActorKind::Service,
            PrincipalKind::Worker => ActorKind::Automation,
        }
    }
}

/// Longest principal id.
pub const PRINCIPAL_ID_CHARS_MAX: usize = 128;

/// The URI scheme of a principal in a certificate's SAN.
pub const PRINCIPAL_URI_SCHEME: &str = "gavel://";

impl Principal {
    /// A principal of `kind` named `id`, if `id` is well formed.
    pub fn new(kind: PrincipalKind, id: &str) -> Result<Principal, String> {
        let well_formed = !id.is_empty()
            && id.chars().count() <= PRINCIPAL_ID_CHARS_MAX
            && id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '@' | '-'));
        if !well_formed {
            return Err(format!(
                "principal id {id:?} must be 1 to {PRINCIPAL_ID_CHARS_MAX} characters of letters, digits and . _ @ -"
            ));
        }
        Ok(Principal { kind, id: id.to_string() })
    }

    /// Parses `kind:id`, e.g. `user:bob`.
    pub fn parse(text: &str) -> Result<Principal, String> {
        let (kind, id) =
            text.split_once(':').ok_or_else(|| format!("principal {text:?} must be written kind:id, e.g. user:bob"))?;
        let kind = PrincipalKind::parse(kind)
            .ok_or_else(|| format!("principal kind {kind:?} must be one of user, service, worker, node"))?;
        Principal::new(kind, id)
    }

    /// Parses the certificate form `gavel://kind/id`.
    pub fn from_uri(uri: &str) -> Result<Principal, String> {
        let rest = uri
            .strip_prefix(PRINCIPAL_URI_SCHEME)
            .ok_or_else(|| format!("principal URI {uri:?} must start with {PRINCIPAL_URI_SCHEME}"))?;
        let (kind, id) =
            rest.split_once('/').ok_or_else(|| format!("principal URI {uri:?} must be gavel://kind/id"))?;
        let kind = PrincipalKind::parse(kind)
            .ok_or_else(|| format!("principal kind {kind:?} must be one of user, service, worker, node"))?;
        Principal::new(kind, id)
    }

    /// The certificate form `gavel://kind/id`.
    pub fn to_uri(&self) -> String {
        format!("{PRINCIPAL_URI_SCHEME}{}/{}", self.kind.as_str(), self.id)
    }

    /// The principal of node `id`.
    pub fn node(id: u64) -> Principal {
        Principal { kind: PrincipalKind::Node, id: id.to_string() }
    }

    /// The actor this principal is when it names no other: a user is a
    /// user, a worker is automation, a service or node is a service; the id
    /// is the principal's id.
    pub fn as_actor(&self) -> Actor {
        Actor::new(&self.id, self.actor_kind())
    }

    /// The kind of [`Principal::as_actor`].
    fn actor_kind(&self) -> ActorKind {
        self.kind.actor_kind()
    }

    /// Whether `actor` is this principal: the same id and the kind of
    /// [`Principal::as_actor`]. The display name is the caller's to choose.
    /// Naming any other actor needs the `act-for` grant (or, for a
    /// decision's approver, `delegate-decide`).
    pub fn is_actor(&self, actor: &Actor) -> bool {
        actor.id == self.id && actor.kind == self.actor_kind()
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.kind.as_str(), self.id)
    }
}

/// A permission a principal can be granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum GrantName {
    /// Submit, resume and cancel executions; create and cancel approvals;
    /// read executions and approvals.
    Submitter,
    /// List, read and decide approvals, optionally only of the approval
    /// types in the grant's scope.
    Approver,
    /// Poll, heartbeat and report, on the queues in the grant's scope only.
    Worker,
    /// Read the audit trail.
    Auditor,
    /// Register capabilities, change membership and grants, take backups.
    Admin,
    /// Decide approvals naming another approver (an app backend that logs its
    /// own users in). The audit records both.
    DelegateDecide,
    /// Name another actor as the requester of an execution or approval. The
    /// audit records both.
    ActFor,
    /// Send `caller_now_ms`, within the grant's skew bound of cluster time.
    Clock,
    /// Create approvals that opt out of the self-approval check.
    SelfApproval,
}

impl GrantName {
    /// Every grant, in order.
    pub const ALL: [GrantName; 9] = [
        GrantName::Submitter,
        GrantName::Approver,
        GrantName::Worker,
        GrantName::Auditor,
        GrantName::Admin,
        GrantName::DelegateDecide,
        GrantName::ActFor,
        GrantName::Clock,
        GrantName::SelfApproval,
    ];

    /// The wire name, e.g. `submitter`, `delegate-decide`.
    pub fn as_str(self) -> &'static str {
        match self {
            GrantName::Submitter => "submitter",
            GrantName::Approver => "approver",
            GrantName::Worker => "worker",
            GrantName::Auditor => "auditor",
            GrantName::Admin => "admin",
            GrantName::DelegateDecide => "delegate-decide",
            GrantName::ActFor => "act-for",
            GrantName::Clock => "clock",
            GrantName::SelfApproval => "self-approval",
        }
    }

    /// The grant named `name`, if any.
    pub fn parse(name: &str) -> Option<GrantName> {
        GrantName::ALL.into_iter().find(|grant| grant.as_str() == name)
    }
}

/// One grant bound to a principal.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Grant {
    /// What is granted.
    pub name: GrantName,
    /// For `approver`: the approval types it may decide; for `worker`: the
    /// queues it may poll. Empty means all. Ignored by other grants.
    pub scope: BTreeSet<String>,
    /// For `clock`: how far `caller_now_ms` may be from cluster time.
    pub skew_ms_max: Option<u64>,
}

impl Grant {
    /// `name` with no scope and no skew bound.
    pub fn of(name: GrantName) -> Grant {
        Grant { name, scope: BTreeSet::new(), skew_ms_max: None }
    }

    /// `name` limited to `scope` (approval types or queues).
    pub fn scoped<S: Into<String>>(name: GrantName, scope: impl IntoIterator<Item = S>) -> Grant {
        Grant { name, scope: scope.into_iter().map(Into::into).collect(), skew_ms_max: None }
    }

    /// Whether the grant's scope allows every one of `items` (queues). An
    /// empty scope allows everything.
    pub fn covers_all<'a>(&self, items: impl IntoIterator<Item = &'a String>) -> bool {
        self.scope.is_empty() || items.into_iter().all(|item| self.scope.contains(item))
    }

    /// Whether an approver grant's scope allows an approval of `types`: an
    /// empty scope allows every approval; a scoped one only approvals that
    /// have at least one type, all of them in the scope (an approval that
    /// also needs a `legal` approver is not a `finance` approver's alone).
    pub fn covers_types(&self, types: &[String]) -> bool {
        self.scope.is_empty() || scope_covers_types(&self.scope, types)
    }
}

/// Whether a non-empty approver scope allows an approval of `types`: the
/// approval has at least one type, and every one is in the scope.
pub fn scope_covers_types(scope: &BTreeSet<String>, types: &[String]) -> bool {
    !types.is_empty() && types.iter().all(|item| scope.contains(item))
}

/// The authenticated caller of one command, stamped into its envelope by
/// the node that authenticated it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Caller {
    /// Who authenticated.
    pub principal: Principal,
    /// A token that lists roles down-scopes its bearer to those grants: the
    /// caller may use only grants that are both bound to it and named here.
    /// `None` (a certificate, or a token without roles) uses every grant.
    pub scope: Option<BTreeSet<GrantName>>,
}

impl Caller {
    /// A caller with every grant bound to `principal`.
    pub fn of(principal: Principal) -> Caller {
        Caller { principal, scope: None }
    }
}

/// Something a caller does outside the log that must be authorized against
/// the replicated grants: reads, and the operations that are not commands.
/// Commands are admitted by `State::admit`, inside `apply` and, before
/// proposing, at the edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Read approvals (`GetApproval`, `ListApprovals`): the grant is checked
    /// here, and which records the caller sees by
    /// [`crate::State::visible_approval`] (one record) and
    /// [`crate::State::approval_view`] (a listing).
    ReadApprovals,
    /// Read executions (`GetExecution`, `WaitExecution`,
    /// `ListExecutionEvents`): the grant is checked here, and which records
    /// the caller sees by [`crate::State::visible_execution`] (one record)
    /// and [`crate::State::may_read_event`] (their events).
    ReadExecution,
    /// Watch the events of the records the caller may read (`WatchEvents`;
    /// an auditor watches every event, see [`crate::State::may_read_event`]).
    WatchEvents,
    /// Read capabilities.
    ReadCapability,
    /// Read the whole audit trail (`ListEvents`, `GetEvent`).
    ReadAudit,
    /// List grants.
    ReadAccess,
    /// Change the Raft membership.
    ChangeMembership,
    /// Take a backup.
    Backup,
    /// Read the cluster status (`ClusterService.Status`).
    ReadClusterStatus,
    /// Read one's own principal and grants (`AccessService.WhoAmI`).
    ReadOwnAccess,
    /// Read approval policies (`PolicyService.GetPolicy`, `ListPolicies`):
    /// any authenticated caller; they say who may approve what, not what
    /// is pending.
    ReadPolicies,
}

impl Action {
    /// What the action does, for refusal messages.
    pub fn describe(&self) -> String {
        match self {
            Action::ReadApprovals => "read approvals".to_string(),
            Action::WatchEvents => "watch events".to_string(),
            Action::ReadExecution => "read executions".to_string(),
            Action::ReadCapability => "read capabilities".to_string(),
            Action::ReadAudit => "read the audit trail".to_string(),
            Action::ReadAccess => "list grants".to_string(),
            Action::ChangeMembership => "change the cluster membership".to_string(),
            Action::Backup => "take a backup".to_string(),
            Action::ReadClusterStatus => "read the cluster status".to_string(),
            Action::ReadOwnAccess => "read its own grants".to_string(),
            Action::ReadPolicies => "read approval policies".to_string(),
        }
    }
}
