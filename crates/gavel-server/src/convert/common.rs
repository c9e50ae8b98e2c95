//! Actors, shared enums and timestamps.

use gavel_core::limits::{LIST_PAGE_DEFAULT, LIST_PAGE_MAX, TIMESTAMP_MS_MAX};
use gavel_core::{Actor, ActorKind, ApprovalStatus, Caller, DomainError, ErrorCode, Risk, SideEffect};
use gavel_proto::v1 as pb;

/// Decodes an optional caller timestamp (Unix ms).
pub fn timestamp_in(field: &str, value: Option<i64>) -> Result<Option<u64>, DomainError> {
    match value {
        None => Ok(None),
        Some(value) if value < 0 => Err(DomainError::invalid(format!("{field} must not be negative"))),
        Some(value) if value as u64 > TIMESTAMP_MS_MAX => {
            Err(DomainError::invalid(format!("{field} {value} is not a Unix time in milliseconds")))
        }
        Some(value) => Ok(Some(value as u64)),
    }
}

/// Decodes a list's page size (issue #40): 0 is the default
/// ([`LIST_PAGE_DEFAULT`]), above [`LIST_PAGE_MAX`] is refused with
/// `PAGE_SIZE_INVALID` here, before the read.
pub fn page_size_in(limit: u32) -> Result<usize, DomainError> {
    match limit {
        0 => Ok(LIST_PAGE_DEFAULT as usize),
        limit if limit > LIST_PAGE_MAX => Err(DomainError::new(
            ErrorCode::PageSizeInvalid,
            format!("page size {limit} is above the limit of {LIST_PAGE_MAX} records per page; ask for fewer"),
        )),
        limit => Ok(limit as usize),
    }
}

/// Decodes a page token of a list ordered by (time, id): the `time:id` of
/// the last record a page looked at; empty for the first page. Anything else
/// is `PAGE_TOKEN_INVALID`.
pub fn time_page_token_in(token: &str) -> Result<Option<(u64, String)>, DomainError> {
    if token.is_empty() {
        return Ok(None);
    }
    let malformed = || {
        DomainError::new(
            ErrorCode::PageTokenInvalid,
            format!("page token {token:?} is not one this list handed out; start again without it"),
        )
    };
    let (time, id) = token.split_once(':').ok_or_else(malformed)?;
    let time = time.parse().map_err(|_| malformed())?;
    Ok(Some((time, id.to_string())))
}

/// Encodes where the next page of a (time, id) list continues; empty when
/// nothing is left.
pub fn time_page_token_out(next: Option<&(u64, String)>) -> String {
    next.map(|(time, id)| format!("{time}:{id}")).unwrap_or_default()
}

/// Encodes a timestamp; core timestamps are bounded far below `i64::MAX`.
pub fn timestamp_out(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// Decodes a required actor: a missing actor is `UNAUTHENTICATED` (nobody is
/// named, and on a node without credentials nobody else says who calls); an
/// unknown kind is `INVALID_ARGUMENT`, like every ill-formed actor
/// ([`gavel_core::validate::check_actor`]).
pub fn actor_in(field: &str, actor: Option<&pb::Actor>) -> Result<Actor, DomainError> {
    let actor = actor.ok_or_else(|| DomainError::new(ErrorCode::Unauthenticated, format!("{field} is required")))?;
    let kind = match pb::ActorKind::try_from(actor.kind) {
        Ok(pb::ActorKind::User) => ActorKind::User,
        Ok(pb::ActorKind::Service) => ActorKind::Service,
        Ok(pb::ActorKind::Automation) => ActorKind::Automation,
        Ok(pb::ActorKind::Anonymous) => ActorKind::Anonymous,
        Ok(pb::ActorKind::Unspecified) | Err(_) => {
            return Err(DomainError::invalid(format!(
                "{field}.kind must be user, service, automation or anonymous, not {}",
                actor.kind
            )))
        }
    };
    Ok(Actor {
        id: actor.id.clone(),
        kind,
        display_name: actor.display_name.clone(),
        attributes: actor.attributes.clone(),
    })
}

/// Decodes an actor that defaults to the authenticated caller: a missing
/// actor is the caller's principal as an actor
/// ([`gavel_core::Principal::as_actor`]). Naming another actor is
/// decided by the state machine (it needs a grant). Without a caller (an
/// insecure node) the actor is required, as before authentication existed.
pub fn actor_or_caller(field: &str, actor: Option<&pb::Actor>, caller: Option<&Caller>) -> Result<Actor, DomainError> {
    match (actor, caller) {
        (None, Some(caller)) => Ok(caller.principal.as_actor()),
        (actor, _) => actor_in(field, actor),
    }
}

/// A worker id that defaults to the authenticated caller's principal id.
pub fn worker_id_or_caller(worker_id: &str, caller: Option<&Caller>) -> String {
    match caller {
        Some(caller) if worker_id.is_empty() => caller.principal.id.clone(),
        _ => worker_id.to_string(),
    }
}

/// Encodes an actor.
pub fn actor_out(actor: &Actor) -> pb::Actor {
    let kind = match actor.kind {
        ActorKind::User => pb::ActorKind::User,
        ActorKind::Service => pb::ActorKind::Service,
        ActorKind::Automation => pb::ActorKind::Automation,
        ActorKind::Anonymous => pb::ActorKind::Anonymous,
    };
    pb::Actor {
        id: actor.id.clone(),
        kind: kind as i32,
        display_name: actor.display_name.clone(),
        attributes: actor.attributes.clone(),
    }
}

/// The error detail of a domain refusal: its code, message and problems,
/// and, for a refusal by an approval's state, that status and its consumer.
pub fn error_detail_out(error: DomainError) -> pb::ErrorDetail {
    let (approval_status, consumed_by_execution_id) = match error.approval {
        Some(approval) => (Some(status_out(approval.status)), approval.consumed_by_execution_id),
        None => (None, None),
    };
    pb::ErrorDetail {
        code: error.code.as_str().to_string(),
        message: error.message,
        problems: error.problems,
        approval_status,
        consumed_by_execution_id,
        retry_after_ms: error.quota.and_then(|quota| quota.retry_after_ms),
        quota_kind: error.quota.map(|quota| quota.kind.as_str().to_string()),
        ..pb::ErrorDetail::default()
    }
}

/// Decodes a side effect; `None` for unspecified.
pub fn side_effect_in(value: i32) -> Result<Option<SideEffect>, DomainError> {
    Ok(match pb::SideEffect::try_from(value) {
        Ok(pb::SideEffect::Unspecified) => None,
        Ok(pb::SideEffect::None) => Some(SideEffect::None),
        Ok(pb::SideEffect::Read) => Some(SideEffect::Read),
        Ok(pb::SideEffect::Write) => Some(SideEffect::Write),
        Ok(pb::SideEffect::Destructive) => Some(SideEffect::Destructive),
        Ok(pb::SideEffect::External) => Some(SideEffect::External),
        Err(_) => return Err(DomainError::invalid(format!("sideEffect {value} is not a known value"))),
    })
}

/// Encodes a side effect.
pub fn side_effect_out(value: SideEffect) -> i32 {
    (match value {
        SideEffect::None => pb::SideEffect::None,
        SideEffect::Read => pb::SideEffect::Read,
        SideEffect::Write => pb::SideEffect::Write,
        SideEffect::Destructive => pb::SideEffect::Destructive,
        SideEffect::External => pb::SideEffect::External,
    }) as i32
}

/// Decodes a risk; `None` for unspecified.
pub fn risk_in(value: i32) -> Result<Option<Risk>, DomainError> {
    Ok(match pb::Risk::try_from(value) {
        Ok(pb::Risk::Unspecified) => None,
        Ok(pb::Risk::Low) => Some(Risk::Low),
        Ok(pb::Risk::Medium) => Some(Risk::Medium),
        Ok(pb::Risk::High) => Some(Risk::High),
        Ok(pb::Risk::Critical) => Some(Risk::Critical),
        Err(_) => return Err(DomainError::invalid(format!("risk {value} is not a known value"))),
    })
}

/// Encodes a risk.
pub fn risk_out(value: Risk) -> i32 {
    (match value {
        Risk::Low => pb::Risk::Low,
        Risk::Medium => pb::Risk::Medium,
        Risk::High => pb::Risk::High,
        Risk::Critical => pb::Risk::Critical,
    }) as i32
}

/// Empty string means "none" for optional proto3 strings that are not marked optional.
pub fn non_empty(value: &str) -> Option<String> {
    (!value.is_empty()).then(|| value.to_string())
}

/// Encodes an approval status.
pub fn status_out(value: ApprovalStatus) -> i32 {
    (match value {
        ApprovalStatus::Pending => pb::ApprovalStatus::Pending,
        ApprovalStatus::Approved => pb::ApprovalStatus::Approved,
        ApprovalStatus::Rejected => pb::ApprovalStatus::Rejected,
        ApprovalStatus::Cancelled => pb::ApprovalStatus::Cancelled,
        ApprovalStatus::Expired => pb::ApprovalStatus::Expired,
        ApprovalStatus::Consumed => pb::ApprovalStatus::Consumed,
        ApprovalStatus::Voided => pb::ApprovalStatus::Voided,
    }) as i32
}

#[cfg(test)]
mod tests {
    use gavel_core::limits::{LIST_PAGE_DEFAULT, LIST_PAGE_MAX};
    use gavel_core::ErrorCode;

    use super::{page_size_in, time_page_token_in, time_page_token_out};

    #[test]
    fn a_page_size_above_the_limit_is_refused_with_its_own_code_and_zero_is_the_default() {
        assert_eq!(page_size_in(0), Ok(LIST_PAGE_DEFAULT as usize));
        assert_eq!(page_size_in(LIST_PAGE_MAX), Ok(LIST_PAGE_MAX as usize));
        let refused = page_size_in(LIST_PAGE_MAX + 1).expect_err("above the limit");
        assert_eq!(refused.code, ErrorCode::PageSizeInvalid);
        assert!(refused.message.contains("1000"), "{}", refused.message);
    }

    #[test]
    fn page_tokens_read_back_what_a_page_wrote_and_refuse_anything_else() {
        let next = (1_748_768_460_000, "apr_ex-2".to_string());
        assert_eq!(time_page_token_in(&time_page_token_out(Some(&next))), Ok(Some(next)));
        assert_eq!(time_page_token_in(""), Ok(None));
        assert_eq!(time_page_token_out(None), "");
        for token in ["apr_ex-2", "soon:apr_ex-2", "-1:x"] {
            let refused = time_page_token_in(token).expect_err(token);
            assert_eq!(refused.code, ErrorCode::PageTokenInvalid, "{token}");
        }
    }
}
