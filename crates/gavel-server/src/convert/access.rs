//! Access messages: grants and principals.

use gavel_core::{DomainError, Grant, GrantName, Principal};
use gavel_proto::v1 as pb;

/// Decodes a principal written `kind:id`.
pub fn principal_in(field: &str, text: &str) -> Result<Principal, DomainError> {
    Principal::parse(text).map_err(|problem| DomainError::invalid(format!("{field}: {problem}")))
}

/// Decodes a grant name.
pub fn grant_name_in(field: &str, text: &str) -> Result<GrantName, DomainError> {
    GrantName::parse(text).ok_or_else(|| {
        let names: Vec<&str> = GrantName::ALL.iter().map(|name| name.as_str()).collect();
        DomainError::invalid(format!("{field} {text:?} must be one of {}", names.join(", ")))
    })
}

/// Decodes a grant and the principal it is for.
pub fn grant_in(grant: Option<&pb::AccessGrant>) -> Result<(Principal, Grant), DomainError> {
    let grant = grant.ok_or_else(|| DomainError::invalid("grant is required"))?;
    let principal = principal_in("grant.principal", &grant.principal)?;
    let name = grant_name_in("grant.grant", &grant.grant)?;
    let scope = grant.scope.iter().cloned().collect();
    Ok((principal, Grant { name, scope, skew_ms_max: grant.skew_ms_max }))
}

/// Encodes one grant of `principal`.
pub fn grant_out(principal: &Principal, grant: &Grant) -> pb::AccessGrant {
    pb::AccessGrant {
        principal: principal.to_string(),
        grant: grant.name.as_str().to_string(),
        scope: grant.scope.iter().cloned().collect(),
        skew_ms_max: grant.skew_ms_max,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grant_round_trips_and_bad_names_are_refused_as_bad_input() {
        let message = pb::AccessGrant {
            principal: "user:bob".into(),
            grant: "approver".into(),
            scope: vec!["finance".into()],
            skew_ms_max: None,
        };
        let (principal, grant) = grant_in(Some(&message)).expect("a valid grant");
        assert_eq!(grant_out(&principal, &grant), message);
        for (principal, grant) in [("bob", "approver"), ("user:bob", "root"), ("robot:x", "admin")] {
            let message = pb::AccessGrant { principal: principal.into(), grant: grant.into(), ..Default::default() };
            let error = grant_in(Some(&message)).expect_err("refused");
            assert_eq!(error.code, gavel_core::ErrorCode::InvalidArgument, "{principal} {grant}");
        }
    }
}
