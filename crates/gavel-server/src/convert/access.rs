//! Access messages: grants and principals.

use gavel_core::{DomainError, Grant, GrantName, Principal, QuotaChange, QuotaView};
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

/// Decodes a quota change and whose it is.
pub fn quota_change_in(message: &pb::SetQuotaRequest) -> Result<(Principal, QuotaChange), DomainError> {
    let principal = principal_in("principal", &message.principal)?;
    let change = QuotaChange {
        pending_approvals_max: message.pending_approvals_max,
        active_executions_max: message.active_executions_max,
        writes_per_second: message.writes_per_second,
        write_burst: message.write_burst,
        reset: message.reset,
    };
    Ok((principal, change))
}

/// Encodes a principal's quota.
pub fn quota_out(view: &QuotaView) -> pb::Quota {
    pb::Quota {
        principal: view.principal.to_string(),
        pending_approvals_max: view.limits.pending_approvals_max,
        active_executions_max: view.limits.active_executions_max,
        writes_per_second: view.limits.writes_per_second,
        write_burst: view.limits.write_burst,
        overridden: view.overridden,
        pending_approvals: view.usage.pending_approvals,
        active_executions: view.usage.active_executions,
        write_tokens: view.write_tokens,
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
