//! How the operator commands print: aligned tables for people, stable JSON for
//! scripts.
//!
//! The JSON is built by hand from the protobuf messages (prost types have no
//! serde) with one rule everywhere: camelCase keys, every key always present
//! (`null` when the field is absent), enums as lower-case strings
//! (`"pending"`, `"completed"`, `"write"`), times as Unix epoch milliseconds
//! in keys ending in `Ms`, and JSON payloads (inputs, outputs) embedded as
//! JSON values rather than strings. Codes stay upper case (`"TIMEOUT"`,
//! `"APPROVAL_CONSUMED"`), as the SPEC writes them.

use std::io::Write;

use gavel_client::pb;
use serde_json::{json, Value};

use super::CommandError;

/// A table printed with its columns aligned, two spaces apart.
#[derive(Debug, Default)]
pub struct Table {
    headers: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column headers.
    pub fn new(headers: &[&str]) -> Table {
        Table { headers: headers.iter().map(|header| header.to_string()).collect(), rows: Vec::new() }
    }

    /// Appends a row; it should have one cell per header.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table as text, one line per row after the header line. The last
    /// column is not padded, so lines carry no trailing spaces.
    pub fn render(&self) -> String {
        let columns = self.headers.len().max(self.rows.iter().map(Vec::len).max().unwrap_or(0));
        let mut widths = vec![0; columns];
        for line in std::iter::once(&self.headers).chain(&self.rows) {
            for (index, cell) in line.iter().enumerate() {
                widths[index] = widths[index].max(cell.chars().count());
            }
        }
        let mut text = String::new();
        for line in std::iter::once(&self.headers).chain(&self.rows) {
            let mut rendered = String::new();
            for (index, cell) in line.iter().enumerate() {
                if index > 0 {
                    rendered.push_str("  ");
                }
                rendered.push_str(cell);
                if index + 1 < line.len() {
                    rendered.extend(std::iter::repeat_n(' ', widths[index] - cell.chars().count()));
                }
            }
            text.push_str(rendered.trim_end());
            text.push('\n');
        }
        text
    }
}

/// Label/value pairs printed as two aligned columns, for one record.
pub fn key_values(pairs: &[(&str, String)]) -> String {
    let width = pairs.iter().map(|(key, _)| key.chars().count()).max().unwrap_or(0);
    let mut text = String::new();
    for (key, value) in pairs {
        let line = format!("{key:<width$}  {value}");
        text.push_str(line.trim_end());
        text.push('\n');
    }
    text
}

/// Writes text to standard output as is.
pub fn print(text: &str) -> Result<(), CommandError> {
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes())?;
    stdout.flush()?;
    Ok(())
}

/// Writes one JSON document, pretty-printed, to standard output.
pub fn print_json(value: &Value) -> Result<(), CommandError> {
    print(&format!("{}\n", serde_json::to_string_pretty(value).map_err(anyhow::Error::from)?))
}

/// Writes one JSON document on a single line (JSON Lines), for streams.
pub fn print_json_line(value: &Value) -> Result<(), CommandError> {
    print(&format!("{value}\n"))
}

// ----- enums -----

/// The lower-case name of a protobuf enum value: `APPROVAL_STATUS_PENDING`
/// with prefix `APPROVAL_STATUS_` becomes `pending`.
fn enum_name(full_name: Option<&str>, prefix: &str) -> String {
    match full_name {
        Some(name) => name.strip_prefix(prefix).unwrap_or(name).to_ascii_lowercase(),
        None => "unknown".to_string(),
    }
}

/// `pending`, `approved`, ... for an [`pb::ApprovalStatus`] value.
pub fn approval_status(value: i32) -> String {
    enum_name(pb::ApprovalStatus::try_from(value).ok().map(|value| value.as_str_name()), "APPROVAL_STATUS_")
}

/// `none`, `read`, `write`, `destructive` or `external`.
pub fn side_effect(value: i32) -> String {
    enum_name(pb::SideEffect::try_from(value).ok().map(|value| value.as_str_name()), "SIDE_EFFECT_")
}

/// `low`, `medium`, `high` or `critical`.
pub fn risk(value: i32) -> String {
    enum_name(pb::Risk::try_from(value).ok().map(|value| value.as_str_name()), "RISK_")
}

/// `user`, `service`, `automation` or `anonymous`.
pub fn actor_kind(value: i32) -> String {
    enum_name(pb::ActorKind::try_from(value).ok().map(|value| value.as_str_name()), "ACTOR_KIND_")
}

/// `queued`, `leased`, `backoff`, `completed`, `failed` or `cancelled`.
pub fn execution_state(value: i32) -> String {
    enum_name(pb::ExecutionState::try_from(value).ok().map(|value| value.as_str_name()), "EXECUTION_STATE_")
}

/// `TIMEOUT` or `CANCELLED`: a code, so upper case like failure codes.
pub fn cancel_code(value: i32) -> String {
    enum_name(pb::CancelCode::try_from(value).ok().map(|value| value.as_str_name()), "CANCEL_CODE_").to_uppercase()
}

/// `no` or `unknown`; `None` when the report did not say.
pub fn executed_before_failure(value: i32) -> Option<String> {
    match pb::ExecutedBeforeFailure::try_from(value) {
        Ok(pb::ExecutedBeforeFailure::Unspecified) => None,
        other => Some(enum_name(other.ok().map(|value| value.as_str_name()), "EXECUTED_BEFORE_FAILURE_")),
    }
}

// ----- plain-text helpers -----

/// `kind:id`, the form `--as` takes and every surface writes
/// ([`gavel_client::actor_text`]); `-` when absent.
pub fn actor_text(actor: Option<&pb::Actor>) -> String {
    actor.map_or_else(|| "-".to_string(), gavel_client::actor_text)
}

/// An optional value, or `-`.
pub fn or_dash<T: ToString>(value: Option<T>) -> String {
    value.map_or_else(|| "-".to_string(), |value| value.to_string())
}

/// Unix epoch milliseconds as RFC 3339 UTC (`2025-01-31T09:05:00.123Z`).
pub fn time(ms: i64) -> String {
    let seconds = ms.div_euclid(1000);
    let millis = ms.rem_euclid(1000);
    let days = seconds.div_euclid(86_400);
    let of_day = seconds.rem_euclid(86_400);
    let (year, month, day) = gavel_client::calendar::civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        of_day / 3600,
        (of_day % 3600) / 60,
        of_day % 60
    )
}

/// A JSON text compacted on one line (or as received when it does not parse).
pub fn compact_json(text: &str) -> String {
    serde_json::from_str::<Value>(text).map_or_else(|_| text.to_string(), |value| value.to_string())
}

/// A JSON text as a JSON value; a text that does not parse stays a string.
fn embedded_json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string()))
}

// ----- JSON documents -----

/// `{id, kind, displayName}`, or `null`.
pub fn actor_json(actor: Option<&pb::Actor>) -> Value {
    match actor {
        Some(actor) => json!({
            "id": actor.id,
            "kind": actor_kind(actor.kind),
            "displayName": actor.display_name,
        }),
        None => Value::Null,
    }
}

/// An approval record.
pub fn approval_json(approval: &pb::Approval) -> Value {
    let decision = approval.decision.as_ref().map_or(Value::Null, |decision| {
        json!({
            "status": approval_status(decision.status),
            "approver": actor_json(decision.approver.as_ref()),
            "comment": decision.comment,
            "decidedAtMs": decision.decided_at_ms,
        })
    });
    let mut document = json!({
        "id": approval.id,
        "status": approval_status(approval.status),
        "capabilityId": approval.capability_id,
        "capabilityVersion": approval.capability_version,
        "executionId": approval.execution_id,
        "surface": approval.surface,
        "actor": actor_json(approval.actor.as_ref()),
        "input": embedded_json(&approval.input_json),
        "inputHash": approval.input_hash,
        "reasons": approval.reasons,
        "types": approval.types,
        "risk": risk(approval.risk),
        "sideEffect": side_effect(approval.side_effect),
        "requestedAtMs": approval.requested_at_ms,
        "expiresAtMs": approval.expires_at_ms,
        "allowSelfApproval": approval.allow_self_approval,
        "decision": decision,
        "consumedByExecutionId": approval.consumed_by_execution_id,
        // SPEC §13: what a decision binds (`--terms-hash` takes termsHash).
        "terms": if approval.terms_json.is_empty() { Value::Null } else { embedded_json(&approval.terms_json) },
        "termsHash": if approval.terms_hash.is_empty() { None } else { Some(&approval.terms_hash) },
    });
    // Only on a governed or a standing approval, so the documents of the
    // others keep their keys.
    if let Some(quorum) = &approval.quorum {
        document["quorum"] = super::policy::quorum_json(quorum);
    }
    if let Some(standing) = &approval.standing {
        let terms = standing.terms.clone().unwrap_or_default();
        document["standing"] = json!({
            "usesMax": terms.uses_max,
            "windowMs": terms.window_ms,
            "boundPointers": terms.bound_pointers,
            "usedBy": standing.used_by,
        });
    }
    document
}

/// A registered capability version: its spec with the keys of the capability
/// file format, plus `version` and `registeredAtMs`.
pub fn capability_json(capability: &pb::Capability) -> Value {
    let spec = capability.spec.clone().unwrap_or_default();
    let retry = spec.retry.as_ref().map_or(Value::Null, |retry| {
        json!({
            "maxAttempts": retry.max_attempts,
            "backoffMs": retry.backoff_ms,
            "nonRetryableCodes": retry.non_retryable_codes,
        })
    });
    let approval = spec.approval.as_ref().map_or(Value::Null, |approval| {
        json!({
            "required": approval.required,
            "type": approval.r#type,
            "expiresInMs": approval.expires_in_ms,
        })
    });
    json!({
        "id": spec.id,
        "version": capability.version,
        "registeredAtMs": capability.registered_at_ms,
        "sideEffect": side_effect(spec.side_effect),
        "risk": risk(spec.risk),
        "idempotent": spec.idempotent,
        "retry": retry,
        "timeoutMs": spec.timeout_ms,
        "heartbeatTimeoutMs": spec.heartbeat_timeout_ms,
        "approval": approval,
        "queue": spec.queue,
        "tags": spec.tags,
    })
}

/// The final result of an execution, tagged by `outcome`.
fn result_json(result: Option<&pb::ResultEnvelope>) -> Value {
    use pb::result_envelope::Outcome;
    match result.and_then(|result| result.outcome.as_ref()) {
        None => Value::Null,
        Some(Outcome::Completed(completed)) => json!({
            "outcome": "completed",
            "output": embedded_json(&completed.output_json),
            "attempts": completed.attempts,
            "durationMs": completed.duration_ms,
        }),
        Some(Outcome::Failed(failed)) => json!({
            "outcome": "failed",
            "code": failed.code,
            "message": failed.message,
            "retryable": failed.retryable,
            "attempts": failed.attempts,
            "executedBeforeFailure": executed_before_failure(failed.executed_before_failure),
        }),
        Some(Outcome::Cancelled(cancelled)) => json!({
            "outcome": "cancelled",
            "code": cancel_code(cancelled.code),
            "attempts": cancelled.attempts,
            "durationMs": cancelled.duration_ms,
        }),
    }
}

/// An execution record.
pub fn execution_json(execution: &pb::Execution) -> Value {
    let lease = execution.current_lease.as_ref().map_or(Value::Null, |lease| {
        json!({
            "leaseId": lease.lease_id,
            "attempt": lease.attempt,
            "workerId": lease.worker_id,
            "grantedAtMs": lease.granted_at_ms,
            "deadlineMs": lease.deadline_ms,
        })
    });
    json!({
        "executionId": execution.execution_id,
        "state": execution_state(execution.state),
        "capabilityId": execution.capability_id,
        "capabilityVersion": execution.capability_version,
        "input": embedded_json(&execution.input_json),
        "inputHash": execution.input_hash,
        "actor": actor_json(execution.actor.as_ref()),
        "surface": execution.surface,
        "correlationId": execution.correlation_id,
        "approvalId": execution.approval_id,
        "approver": actor_json(execution.approver.as_ref()),
        "idempotencyKey": execution.idempotency_key,
        "attempts": execution.attempts,
        "submittedAtMs": execution.submitted_at_ms,
        "finalizedAtMs": execution.finalized_at_ms,
        "currentLease": lease,
        "backoffUntilMs": execution.backoff_until_ms,
        "cancelRequested": execution.cancel_requested,
        "result": result_json(execution.result.as_ref()),
    })
}

/// An audit event: the envelope, who caused it (`principal`, the
/// authenticated caller; `null` for system events and on `--insecure`
/// nodes), whether an application recorded it (`recordedByApplication`, with
/// its `payload` and `attributes`), and every type-specific field (`null`
/// when the event type does not define it).
pub fn event_json(event: &pb::Event) -> Value {
    json!({
        "cursor": event.cursor,
        "type": event.r#type,
        "recordedByApplication": event.recorded_by_application,
        "timestampMs": event.timestamp_ms,
        "actor": actor_json(event.actor.as_ref()),
        "principal": event.principal,
        "subjectPrincipal": event.subject_principal,
        "grant": event.grant,
        "executionId": event.execution_id,
        "capabilityId": event.capability_id,
        "approvalId": event.approval_id,
        "correlationId": event.correlation_id,
        "inputHash": event.input_hash,
        "attempt": event.attempt,
        "leaseId": event.lease_id,
        "workerId": event.worker_id,
        "code": event.code,
        "retryable": event.retryable,
        "durationMs": event.duration_ms,
        "attempts": event.attempts,
        "previousErrorCode": event.previous_error_code,
        "executedBeforeFailure": event.executed_before_failure.and_then(executed_before_failure),
        "payload": event.payload_json.as_deref().map_or(Value::Null, embedded_json),
        "attributes": event.attributes,
    })
}

/// The type-specific fields of an event as `key=value` words, for tables:
/// the subject and grant of an access change, an application event's
/// payload and attributes (compact JSON), and the lifecycle fields.
pub fn event_details(event: &pb::Event) -> String {
    let mut words = Vec::new();
    if let Some(subject) = &event.subject_principal {
        words.push(format!("subject={subject}"));
    }
    if let Some(grant) = &event.grant {
        words.push(format!("grant={grant}"));
    }
    if let Some(approval_id) = &event.approval_id {
        words.push(format!("approval={approval_id}"));
    }
    if let Some(attempt) = event.attempt {
        words.push(format!("attempt={attempt}"));
    }
    if let Some(lease_id) = event.lease_id {
        words.push(format!("lease={lease_id}"));
    }
    if let Some(worker_id) = &event.worker_id {
        words.push(format!("worker={worker_id}"));
    }
    if let Some(code) = &event.code {
        words.push(format!("code={code}"));
    }
    if let Some(retryable) = event.retryable {
        words.push(format!("retryable={retryable}"));
    }
    if let Some(previous) = &event.previous_error_code {
        words.push(format!("previous={previous}"));
    }
    if let Some(attempts) = event.attempts {
        words.push(format!("attempts={attempts}"));
    }
    if let Some(duration_ms) = event.duration_ms {
        words.push(format!("duration={duration_ms}ms"));
    }
    if let Some(executed) = event.executed_before_failure.and_then(executed_before_failure) {
        words.push(format!("executedBeforeFailure={executed}"));
    }
    if let Some(payload) = &event.payload_json {
        words.push(format!("payload={}", compact_json(payload)));
    }
    if !event.attributes.is_empty() {
        words.push(format!("attributes={}", json!(event.attributes)));
    }
    words.join(" ")
}

/// The column headers of [`event_row`].
pub const EVENT_HEADERS: [&str; 8] = ["CURSOR", "TIME", "SOURCE", "TYPE", "ACTOR", "PRINCIPAL", "EXECUTION", "DETAILS"];

/// The SOURCE of an event an application recorded (`RecordEvent`): its type
/// is the application's choice, so a table marks it rather than let it pass
/// for one of Gavel's own (`capability.approved.by-cfo` is not an approval).
pub const SOURCE_APPLICATION: &str = "app";

/// The SOURCE of an event Gavel's state machine wrote.
pub const SOURCE_GAVEL: &str = "gavel";

/// One event as a table row.
pub fn event_row(event: &pb::Event) -> Vec<String> {
    let source = if event.recorded_by_application { SOURCE_APPLICATION } else { SOURCE_GAVEL };
    vec![
        event.cursor.to_string(),
        time(event.timestamp_ms),
        source.to_string(),
        event.r#type.clone(),
        actor_text(event.actor.as_ref()),
        or_dash(event.principal.as_deref()),
        or_dash(event.execution_id.as_deref()),
        event_details(event),
    ]
}

/// A node's status: its own view, with the membership it knows.
pub fn status_json(status: &pb::StatusResponse) -> Value {
    json!({
        "nodeId": status.node_id,
        "role": status.role.to_ascii_lowercase(),
        "term": status.term,
        "lastAppliedIndex": status.last_applied_index,
        "lastLogIndex": status.last_log_index,
        "snapshotIndex": status.snapshot_index,
        "stateHash": status.state_hash,
        "leaderId": status.leader_id,
        "leaderAddr": status.leader_addr,
        "members": status.members.iter().map(|member| json!({
            "nodeId": member.node_id,
            "addr": member.addr,
            "voter": member.voter,
        })).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_aligns_columns_without_trailing_spaces() {
        let mut table = Table::new(&["ID", "STATUS", "NOTE"]);
        table.row(vec!["a".into(), "pending".into(), "".into()]);
        table.row(vec!["long-id".into(), "ok".into(), "x".into()]);
        assert_eq!(table.render(), "ID       STATUS   NOTE\na        pending\nlong-id  ok       x\n");
    }

    #[test]
    fn time_prints_rfc3339_utc_with_milliseconds() {
        assert_eq!(time(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(time(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(time(1_735_689_599_999), "2024-12-31T23:59:59.999Z");
    }

    #[test]
    fn an_application_event_is_marked_and_shows_who_recorded_it_and_its_payload() {
        let recorded = pb::Event {
            cursor: 7,
            r#type: "capability.approved.by-cfo".to_string(),
            actor: Some(pb::Actor {
                id: "mallory".to_string(),
                kind: pb::ActorKind::User as i32,
                ..Default::default()
            }),
            execution_id: Some("victim-1".to_string()),
            principal: Some("user:mallory".to_string()),
            recorded_by_application: true,
            payload_json: Some(r#"{"ok":true}"#.to_string()),
            attributes: [("tenant".to_string(), "t1".to_string())].into(),
            ..pb::Event::default()
        };
        let row = event_row(&recorded);
        assert_eq!(row.len(), EVENT_HEADERS.len());
        assert_eq!(&row[2..7], ["app", "capability.approved.by-cfo", "user:mallory", "user:mallory", "victim-1"]);
        assert_eq!(row[7], r#"payload={"ok":true} attributes={"tenant":"t1"}"#);
        let document = event_json(&recorded);
        assert_eq!(document["recordedByApplication"], true);
        assert_eq!(document["principal"], "user:mallory");
        assert_eq!(document["payload"], json!({ "ok": true }));
        assert_eq!(document["attributes"], json!({ "tenant": "t1" }));

        let granted = pb::Event {
            r#type: "access.granted".to_string(),
            principal: Some("user:admin".to_string()),
            subject_principal: Some("user:bob".to_string()),
            grant: Some("approver".to_string()),
            ..pb::Event::default()
        };
        let row = event_row(&granted);
        assert_eq!((row[2].as_str(), row[5].as_str()), ("gavel", "user:admin"));
        assert_eq!(row[7], "subject=user:bob grant=approver");
        let document = event_json(&granted);
        assert_eq!(document["recordedByApplication"], false);
        assert_eq!((&document["subjectPrincipal"], &document["grant"]), (&json!("user:bob"), &json!("approver")));
        assert_eq!(document["payload"], Value::Null);
    }

    #[test]
    fn enum_values_print_as_lower_case_words() {
        assert_eq!(approval_status(pb::ApprovalStatus::Consumed as i32), "consumed");
        assert_eq!(execution_state(pb::ExecutionState::Completed as i32), "completed");
        assert_eq!(side_effect(pb::SideEffect::Destructive as i32), "destructive");
        assert_eq!(cancel_code(pb::CancelCode::Timeout as i32), "TIMEOUT");
        assert_eq!(executed_before_failure(0), None);
        assert_eq!(approval_status(99), "unknown");
    }
}
