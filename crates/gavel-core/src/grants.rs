//! Grant bindings, a part of [`crate::State`]: which grants each principal
//! holds. Changed only by `Grant`, `Revoke` and `BootstrapAdmin`; read by
//! every authorization decision. Who may change them, and the audit events,
//! are the orchestrator's (`machine/access_commands.rs`).
//!
//! Invariant: no principal is bound to an empty set of grants (a principal
//! whose last grant is revoked is dropped), so the serialized form, and the
//! state hash, depend only on who holds what.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::access::{Grant, GrantName, Principal};
use crate::error::{DomainError, ErrorCode};
use crate::limits::PRINCIPALS_WITH_GRANTS_MAX;

/// Every principal's grants, ordered by principal, then grant name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub(crate) struct Bindings {
    by_principal: BTreeMap<Principal, BTreeMap<GrantName, Grant>>,
}

impl Bindings {
    /// The grant `name` bound to `principal`, if any.
    pub(crate) fn get(&self, principal: &Principal, name: GrantName) -> Option<&Grant> {
        self.by_principal.get(principal)?.get(&name)
    }

    /// Every grant bound to `principal`, by name.
    pub(crate) fn of(&self, principal: &Principal) -> Vec<Grant> {
        self.by_principal.get(principal).map(|grants| grants.values().cloned().collect()).unwrap_or_default()
    }

    /// Every binding, ordered by principal, then grant name.
    pub(crate) fn all(&self) -> impl Iterator<Item = (&Principal, &Grant)> {
        self.by_principal.iter().flat_map(|(principal, grants)| grants.values().map(move |grant| (principal, grant)))
    }

    /// The principals holding `admin`, in order.
    pub(crate) fn admins(&self) -> impl Iterator<Item = &Principal> {
        self.by_principal.iter().filter(|(_, grants)| grants.contains_key(&GrantName::Admin)).map(|(p, _)| p)
    }

    /// Binds `grant` to `principal`, replacing a grant of the same name.
    /// Returns whether anything changed; refuses a new principal once
    /// [`PRINCIPALS_WITH_GRANTS_MAX`] principals hold grants.
    pub(crate) fn bind(&mut self, principal: &Principal, grant: &Grant) -> Result<bool, DomainError> {
        if !self.by_principal.contains_key(principal) && self.by_principal.len() >= PRINCIPALS_WITH_GRANTS_MAX {
            return Err(DomainError::new(
                ErrorCode::FailedPrecondition,
                format!(
                    "{principal} cannot be granted {}: {PRINCIPALS_WITH_GRANTS_MAX} principals already hold grants, \
                     the limit",
                    grant.name.as_str()
                ),
            ));
        }
        let grants = self.by_principal.entry(principal.clone()).or_default();
        if grants.get(&grant.name) == Some(grant) {
            return Ok(false);
        }
        grants.insert(grant.name, grant.clone());
        Ok(true)
    }

    /// Removes the grant `name` from `principal`; returns whether it was bound.
    pub(crate) fn unbind(&mut self, principal: &Principal, name: GrantName) -> bool {
        let Some(grants) = self.by_principal.get_mut(principal) else { return false };
        let removed = grants.remove(&name).is_some();
        if grants.is_empty() {
            self.by_principal.remove(principal);
        }
        removed
    }
}
