//! Approval policies (SPEC §10, issue #25), a part of [`crate::State`]:
//! replicated, versioned rules that an approval needs "k distinct eligible
//! principals" for every one of its factors, and a deny threshold.
//!
//! This file holds the policies themselves, the votes an approval records
//! and the pure vote assignment ([`assign_votes`]); who may vote, the
//! audit events, and voiding approvals when a policy changes are the
//! orchestrator's (`machine/policy_commands.rs`).
//!
//! A policy governs approval types and/or capability ids (its *keys*);
//! each key belongs to at most one policy, so the policy of an approval is
//! a lookup, not a choice: its capability's policy if any, else the policy
//! of the approval type the capability's registration declares, else the
//! policy of the requester's first type that has one ([`Policies::governing`]).
//!
//! Versions are one counter for all policies: every `SetPolicy` gets the
//! next number, so a version names one policy text for good, even after a
//! deletion and re-creation under the same name.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::access::Principal;
use crate::error::{DomainError, ErrorCode};
use crate::limits::{
    FACTOR_GROUP_MAX, FACTOR_K_MAX, POLICIES_MAX, POLICY_FACTORS_MAX, POLICY_GOVERNS_MAX, VOTES_PER_APPROVAL_MAX,
};
pub use crate::model::{Quorum, Vote};
use crate::model::{Risk, SideEffect};
use crate::terms::{risk_name, side_effect_name, RegisteredCapability};
use crate::validate::{check_id, invalid_if_any, Problems};

/// Who may count for a factor.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Approvers {
    /// Principals whose approver grant names this scope explicitly (an
    /// unscoped approver grant does not count: "finance" means someone an
    /// admin put in finance, not anyone who may approve anything).
    Scope(String),
    /// These principals, each while it holds an approver grant.
    Group(BTreeSet<Principal>),
}

/// One factor: `k` distinct principals from `approvers`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Factor {
    /// The factor's name within its policy (`finance`), unique there.
    pub name: String,
    /// How many distinct eligible principals it needs, 1 to [`FACTOR_K_MAX`].
    pub k: u32,
    /// Who is eligible.
    pub approvers: Approvers,
}

/// A policy as an admin writes it (`SetPolicy`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicySpec {
    /// Policy name: an id.
    pub name: String,
    /// Approval types it governs.
    pub approval_types: BTreeSet<String>,
    /// Capability ids it governs.
    pub capability_ids: BTreeSet<String>,
    /// Capability risks it governs, as registered.
    #[serde(default)]
    pub risks: BTreeSet<Risk>,
    /// Capability side effects it governs, as registered.
    #[serde(default)]
    pub side_effects: BTreeSet<SideEffect>,
    /// Every factor must be met; 1 to [`POLICY_FACTORS_MAX`].
    pub factors: Vec<Factor>,
    /// How many distinct eligible principals' denials reject (default 1).
    pub deny_threshold: Option<u32>,
    /// This change leaves approved-but-unconsumed approvals of the old
    /// version standing (pending ones are voided regardless).
    pub non_retroactive: bool,
    /// Refuse standing approvals this policy governs: every "yes" covers
    /// exactly one use.
    #[serde(default)]
    pub forbid_standing: bool,
}

/// A stored policy version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    /// Policy name.
    pub name: String,
    /// Its version: unique across all policies, growing with each change.
    pub version: u64,
    /// Approval types it governs.
    pub approval_types: BTreeSet<String>,
    /// Capability ids it governs.
    pub capability_ids: BTreeSet<String>,
    /// Capability risks it governs, as registered.
    #[serde(default)]
    pub risks: BTreeSet<Risk>,
    /// Capability side effects it governs, as registered.
    #[serde(default)]
    pub side_effects: BTreeSet<SideEffect>,
    /// Its factors, all required.
    pub factors: Vec<Factor>,
    /// Distinct eligible denials that reject.
    pub deny_threshold: u32,
    /// Cluster time of this version.
    pub set_at_ms: u64,
    /// Standing approvals it governs are refused at creation.
    #[serde(default)]
    pub forbid_standing: bool,
}

impl Quorum {
    /// How many votes count for each factor in the current assignment.
    pub fn counted(&self) -> Vec<u32> {
        let mut counted = vec![0u32; self.factors.len()];
        for index in self.votes.iter().filter_map(|vote| vote.factor) {
            counted[index as usize] += 1;
        }
        counted
    }

    /// Whether every factor is met.
    pub fn met(&self) -> bool {
        self.counted().iter().zip(&self.factors).all(|(counted, (_, k))| counted >= k)
    }

    /// Distinct eligible denials.
    pub fn denials(&self) -> u32 {
        u32::try_from(self.votes.iter().filter(|vote| !vote.approve && !vote.eligible.is_empty()).count())
            .expect("votes are bounded")
    }

    /// Recomputes which factor each approving vote counts for.
    pub(crate) fn reassign(&mut self) {
        let ks: Vec<u32> = self.factors.iter().map(|(_, k)| *k).collect();
        let eligible: Vec<BTreeSet<u32>> =
            self.votes.iter().map(|vote| if vote.approve { vote.eligible.clone() } else { BTreeSet::new() }).collect();
        let assignment = assign_votes(&ks, &eligible);
        for (vote, factor) in self.votes.iter_mut().zip(assignment) {
            vote.factor = factor;
        }
    }
}

/// The deterministic vote assignment: which factor (index) each voter
/// counts for, given each factor's `k` and the factors each voter is
/// eligible for (in cast order). Each voter counts for at most one factor
/// and each factor takes at most `k`.
///
/// It meets the most factors: it tries the subsets of factors from the
/// largest down (equal sizes in increasing bit order of their members'
/// indices, so lower-indexed factors win ties) and takes the first one
/// whose factors can all be filled at once, found by augmenting paths
/// (Kuhn's bipartite matching with capacities), voters in cast order. The
/// voters left over then go, in cast order, to the first factor they are
/// eligible for that still has room, so progress on unmet factors shows.
/// The subsets number 2^[`POLICY_FACTORS_MAX`]; each matching is at most
/// [`VOTES_PER_APPROVAL_MAX`] augmentations over as many voters.
pub fn assign_votes(ks: &[u32], eligible: &[BTreeSet<u32>]) -> Vec<Option<u32>> {
    let factors = ks.len();
    assert!(factors <= POLICY_FACTORS_MAX, "policies are validated");
    let mut subsets: Vec<u32> = (0..(1u32 << factors)).collect();
    subsets.sort_by_key(|subset| (std::cmp::Reverse(subset.count_ones()), *subset));
    for subset in subsets {
        if let Some(mut assignment) = fill(ks, eligible, subset) {
            let mut room: Vec<u32> = ks.to_vec();
            for factor in assignment.iter().flatten() {
                room[*factor as usize] -= 1;
            }
            for (voter, slot) in assignment.iter_mut().enumerate() {
                if slot.is_none() {
                    if let Some(factor) = eligible[voter].iter().find(|factor| room[**factor as usize] > 0) {
                        room[*factor as usize] -= 1;
                        *slot = Some(*factor);
                    }
                }
            }
            return assignment;
        }
    }
    unreachable!("the empty subset is always filled")
}

/// An assignment that fills every factor in `subset` to its `k` using only
/// those factors, if there is one.
fn fill(ks: &[u32], eligible: &[BTreeSet<u32>], subset: u32) -> Option<Vec<Option<u32>>> {
    let in_subset = |factor: u32| subset & (1 << factor) != 0;
    let mut assignment: Vec<Option<u32>> = vec![None; eligible.len()];
    let mut holders: Vec<Vec<usize>> = vec![Vec::new(); ks.len()];
    for voter in 0..eligible.len() {
        let mut visited = vec![false; ks.len()];
        augment(voter, ks, eligible, &in_subset, &mut assignment, &mut holders, &mut visited);
    }
    let filled = (0..ks.len()).all(|factor| !in_subset(factor as u32) || holders[factor].len() >= ks[factor] as usize);
    filled.then_some(assignment)
}

/// One augmenting path from `voter`: a factor with room, or one whose
/// holder can move elsewhere.
fn augment(
    voter: usize,
    ks: &[u32],
    eligible: &[BTreeSet<u32>],
    in_subset: &impl Fn(u32) -> bool,
    assignment: &mut [Option<u32>],
    holders: &mut [Vec<usize>],
    visited: &mut [bool],
) -> bool {
    for &factor in &eligible[voter] {
        let index = factor as usize;
        if !in_subset(factor) || visited[index] {
            continue;
        }
        visited[index] = true;
        if holders[index].len() < ks[index] as usize {
            holders[index].push(voter);
            assignment[voter] = Some(factor);
            return true;
        }
        for position in 0..holders[index].len() {
            let holder = holders[index][position];
            if augment(holder, ks, eligible, in_subset, assignment, holders, visited) {
                holders[index][position] = voter;
                assignment[voter] = Some(factor);
                return true;
            }
        }
    }
    false
}

/// Every policy, by name, and the version counter.
///
/// Invariants: at most [`POLICIES_MAX`] policies; each approval type and
/// each capability id is governed by at most one policy; every version is
/// at most `last_version`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub(crate) struct Policies {
    by_name: BTreeMap<String, Policy>,
    last_version: u64,
}

impl Policies {
    /// The policy `name`, if any.
    pub(crate) fn get(&self, name: &str) -> Option<&Policy> {
        self.by_name.get(name)
    }

    /// Every policy, by name.
    pub(crate) fn all(&self) -> impl Iterator<Item = &Policy> {
        self.by_name.values()
    }

    /// The policy that governs an approval of `capability_id` (SPEC §10):
    /// the capability's; else, from what its registration declares
    /// (`registered`), the policy on its approval type, then on its risk,
    /// then on its side effect; else the first of the requester's own
    /// `types` that has one. What the cluster knows comes first, so a
    /// requester's labels can only add a policy where none governs, never
    /// remove one: an approval naming no or other types is governed all
    /// the same.
    pub(crate) fn governing(
        &self,
        capability_id: &str,
        registered: Option<&RegisteredCapability>,
        types: &[String],
    ) -> Option<&Policy> {
        let find = |matches: &dyn Fn(&Policy) -> bool| self.by_name.values().find(|policy| matches(policy));
        let of_type = |approval_type: &str| find(&|policy| policy.approval_types.contains(approval_type));
        find(&|policy| policy.capability_ids.contains(capability_id))
            .or_else(|| registered.and_then(|registered| registered.approval_type.as_deref()).and_then(of_type))
            .or_else(|| registered.and_then(|registered| find(&|policy| policy.risks.contains(&registered.risk))))
            .or_else(|| {
                registered.and_then(|registered| find(&|policy| policy.side_effects.contains(&registered.side_effect)))
            })
            .or_else(|| types.iter().find_map(|approval_type| of_type(approval_type)))
    }

    /// Stores a new version of `spec` (already checked by [`check_spec`])
    /// at `now_ms`; refuses a key another policy governs, and a new policy
    /// past [`POLICIES_MAX`].
    pub(crate) fn set(&mut self, spec: &PolicySpec, now_ms: u64) -> Result<&Policy, DomainError> {
        if !self.by_name.contains_key(&spec.name) && self.by_name.len() >= POLICIES_MAX {
            return Err(DomainError::new(
                ErrorCode::FailedPrecondition,
                format!("there are already {POLICIES_MAX} policies, the limit; delete one first"),
            ));
        }
        for other in self.by_name.values().filter(|other| other.name != spec.name) {
            let types = other.approval_types.intersection(&spec.approval_types).map(|kind| format!("type {kind}"));
            let capabilities =
                other.capability_ids.intersection(&spec.capability_ids).map(|id| format!("capability {id}"));
            let risks = other.risks.intersection(&spec.risks).map(|risk| format!("risk {}", risk_name(*risk)));
            let side_effects = other
                .side_effects
                .intersection(&spec.side_effects)
                .map(|side_effect| format!("side effect {}", side_effect_name(*side_effect)));
            if let Some(key) = types.chain(capabilities).chain(risks).chain(side_effects).next() {
                return Err(DomainError::new(
                    ErrorCode::PolicyConflict,
                    format!(
                        "{key} is already governed by policy {}; one policy per approval type or capability",
                        other.name
                    ),
                ));
            }
        }
        self.last_version += 1;
        let policy = Policy {
            name: spec.name.clone(),
            version: self.last_version,
            approval_types: spec.approval_types.clone(),
            capability_ids: spec.capability_ids.clone(),
            risks: spec.risks.clone(),
            side_effects: spec.side_effects.clone(),
            factors: spec.factors.clone(),
            deny_threshold: spec.deny_threshold.unwrap_or(1),
            set_at_ms: now_ms,
            forbid_standing: spec.forbid_standing,
        };
        self.by_name.insert(spec.name.clone(), policy);
        Ok(&self.by_name[&spec.name])
    }

    /// Removes the policy `name`, returning it.
    pub(crate) fn delete(&mut self, name: &str) -> Result<Policy, DomainError> {
        self.by_name.remove(name).ok_or_else(|| not_found(name))
    }
}

/// `NOT_FOUND` for a policy name.
pub(crate) fn not_found(name: &str) -> DomainError {
    DomainError::new(ErrorCode::NotFound, format!("policy {name} was not found"))
}

/// Checks a policy without state (the edge and `apply` both run it): an id
/// for a name, at least one key and at most [`POLICY_GOVERNS_MAX`], 1 to
/// [`POLICY_FACTORS_MAX`] factors with unique names, each `k` from 1 to
/// [`FACTOR_K_MAX`], a non-empty scope or a group of 1 to
/// [`FACTOR_GROUP_MAX`] principals holding at least `k`, and a deny
/// threshold from 1 to [`VOTES_PER_APPROVAL_MAX`]. Every problem is listed.
pub fn check_spec(spec: &PolicySpec) -> Result<(), DomainError> {
    let mut problems = Problems::new();
    problems.id("name", &spec.name);
    let governs = spec.approval_types.len() + spec.capability_ids.len() + spec.risks.len() + spec.side_effects.len();
    if governs == 0 {
        problems.push("a policy must govern at least one approval type, capability, risk or side effect".to_string());
    } else if governs > POLICY_GOVERNS_MAX {
        problems
            .push(format!("a policy governs {governs} types and capabilities, over the limit of {POLICY_GOVERNS_MAX}"));
    }
    for key in spec.approval_types.iter().chain(&spec.capability_ids) {
        problems.id("governed type or capability", key);
    }
    if spec.factors.is_empty() || spec.factors.len() > POLICY_FACTORS_MAX {
        problems.push(format!("a policy has 1 to {POLICY_FACTORS_MAX} factors, not {}", spec.factors.len()));
    }
    let mut names = BTreeSet::new();
    for factor in &spec.factors {
        problems.id("factor name", &factor.name);
        if !names.insert(&factor.name) {
            problems.push(format!("factor name {:?} is used twice", factor.name));
        }
        if factor.k == 0 || factor.k > FACTOR_K_MAX {
            problems.push(format!("factor {:?} needs k from 1 to {FACTOR_K_MAX}, not {}", factor.name, factor.k));
        }
        match &factor.approvers {
            Approvers::Scope(scope) => problems.id(&format!("factor {:?} scope", factor.name), scope),
            Approvers::Group(group) => {
                if group.len() > FACTOR_GROUP_MAX {
                    problems.push(format!(
                        "factor {:?} names {} principals, over the limit of {FACTOR_GROUP_MAX}",
                        factor.name,
                        group.len()
                    ));
                } else if (group.len() as u64) < u64::from(factor.k) {
                    problems.push(format!(
                        "factor {:?} needs {} distinct principals but its group names only {}",
                        factor.name,
                        factor.k,
                        group.len()
                    ));
                }
            }
        }
    }
    if let Some(threshold) = spec.deny_threshold {
        if threshold == 0 || threshold as usize > VOTES_PER_APPROVAL_MAX {
            problems.push(format!("denyThreshold must be from 1 to {VOTES_PER_APPROVAL_MAX}, not {threshold}"));
        }
    }
    invalid_if_any(problems, "invalid policy")
}

/// Checks a policy name (`GetPolicy`, `DeletePolicy`).
pub fn check_name(name: &str) -> Result<(), DomainError> {
    check_id("name", name).map_err(|problem| DomainError::invalid(format!("invalid policy name: {problem}")))
}
