//! Stateless validation of a command: everything that can be checked without
//! reading state. It is the first step of admission ([`check`], then
//! [`State::admit`](crate::State::admit)): the gRPC edge admits a command
//! before proposing, so nothing malformed reaches the log, and `apply` admits
//! it again because the state machine must never trust its input. What
//! checking computes (canonical input, its hash, a validity window) travels
//! on in [`Checked`], so no command handler validates anything again.
//!
//! Architecture invariant: every refusal that is a pure function of the
//! command is made here, so a refused request costs no log entry. That
//! includes an approval's `inputHash` (it must be the hash of its input) and
//! its validity window when its requested-at time is known from the request
//! ([`approval_validity`]); only refusals that read state, or the cluster
//! clock, are left to `apply`.

use crate::access::{Grant, GrantName, Principal, PrincipalKind};
use crate::audit::GAVEL_EVENT_TYPES;
use crate::command::{CapabilitySpec, Command, CreateApproval, RecordEvent, Submit};
use crate::error::{DomainError, ErrorCode};
use crate::limits::{
    APPROVAL_EXPIRES_IN_MS_MAX, APP_EVENT_PAYLOAD_BYTES_MAX, APP_EVENT_TYPE_BYTES_MAX, CLOCK_SKEW_MS_MAX,
    GRANT_SCOPE_ITEMS_MAX, INPUT_BYTES_MAX, OUTPUT_BYTES_MAX, POLL_TASKS_MAX, TIMESTAMP_MS_MAX,
};
use crate::model::{Actor, ApprovalStatus, ReportOutcome};
use crate::registry::{resolve_capability, DEFAULT_APPROVAL_EXPIRES_IN_MS};
use crate::validate::{check_actor, check_json, invalid_if_any, Problems};

/// A canonical JSON input and its input hash.
pub(crate) type CanonicalInput = (String, String);

/// An approval's validity window: `(requested_at_ms, expires_at_ms)`.
pub(crate) type ValidityWindow = (u64, u64);

/// A command that passed [`check`], with what checking it computed that its
/// transition uses. Only [`check`] makes one, so admission
/// ([`State::admit`](crate::State::admit)) and `apply` only ever see a
/// command whose validation ran, and `apply` takes these values instead of
/// validating the command again.
#[derive(Debug)]
pub struct Checked<'a> {
    command: &'a Command,
    /// The canonical input and its hash: an approval request's, a
    /// submission's, a resume's when it gives one.
    pub(crate) input: Option<CanonicalInput>,
    /// An approval request's validity window, when the request fixes its
    /// requested-at time ([`approval_validity`]); otherwise it is judged
    /// against the cluster clock at apply ([`validity_window`]).
    pub(crate) validity: Option<ValidityWindow>,
    /// An application event's canonical payload.
    pub(crate) payload_json: Option<String>,
    /// A completed report's canonical output.
    pub(crate) output_json: Option<String>,
}

impl<'a> Checked<'a> {
    /// The command that was checked.
    pub fn command(&self) -> &'a Command {
        self.command
    }
}

/// Checks a command without state. `Ok` means only state-dependent refusals remain possible.
pub fn precheck(command: &Command) -> Result<(), DomainError> {
    check(command).map(drop)
}

/// [`precheck`], keeping what checking computed: the first step of
/// admission, and the only way to a [`Checked`] command.
pub fn check(command: &Command) -> Result<Checked<'_>, DomainError> {
    let mut checked = Checked { command, input: None, validity: None, payload_json: None, output_json: None };
    let verdict = match command {
        Command::RegisterCapability(spec) => register(spec),
        Command::CreateApproval(request) => create_approval(request).map(|(input, validity)| {
            checked.input = Some(input);
            checked.validity = validity;
        }),
        Command::CreateStandingApproval { request, standing } => {
            let (input, validity) = create_approval(request)?;
            crate::standing::check_spec(standing, &input.0)?;
            checked.input = Some(input);
            checked.validity = validity;
            Ok(())
        }
        Command::DecideApproval { approval_id, status, approver, comment, caller_now_ms, terms_hash } => {
            if !matches!(status, ApprovalStatus::Approved | ApprovalStatus::Rejected) {
                return Err(DomainError::invalid("invalid decision status"));
            }
            check_actor("approver", approver)
                .map_err(|error| DomainError { code: ErrorCode::InvalidArgument, ..error })?;
            let mut problems = Problems::new();
            problems.id("approvalId", approval_id);
            problems.text("comment", comment.as_deref());
            problems.timestamp("now", *caller_now_ms);
            if let Err(problem) = crate::terms::check_terms_hash_form(terms_hash.as_deref()) {
                problems.push(problem);
            }
            invalid_if_any(problems, "invalid decision")
        }
        Command::ConsumeApproval { approval_id, execution_id, caller_now_ms } => {
            let mut problems = Problems::new();
            problems.id("approvalId", approval_id);
            problems.id("executionId", execution_id);
            problems.timestamp("now", *caller_now_ms);
            invalid_if_any(problems, "invalid consume request")
        }
        Command::CancelApproval { approval_id, caller_now_ms } => {
            let mut problems = Problems::new();
            problems.id("approvalId", approval_id);
            problems.timestamp("now", *caller_now_ms);
            invalid_if_any(problems, "invalid cancel request")
        }
        Command::Submit(submit) => self::submit(submit).map(|input| checked.input = Some(input)),
        Command::Grant { principal, grant } => self::grant(principal, grant),
        Command::Revoke { principal, .. } => self::principal("principal", principal),
        Command::BootstrapAdmin { admin } => self::grant(admin, &Grant::of(GrantName::Admin)),
        Command::Resume { approval_id, execution_id, input_json } => {
            let mut problems = Problems::new();
            problems.id("approvalId", approval_id);
            problems.record_id("executionId", execution_id);
            invalid_if_any(problems, "invalid resume request")?;
            if let Some(text) = input_json {
                checked.input = Some(check_json("input", text, INPUT_BYTES_MAX, ErrorCode::InputInvalid)?);
            }
            Ok(())
        }
        Command::Poll { worker_id, queues, tasks_max } => poll(worker_id, queues, *tasks_max),
        Command::Heartbeat { worker_id, .. } => {
            let mut problems = Problems::new();
            problems.id("workerId", worker_id);
            invalid_if_any(problems, "invalid heartbeat")
        }
        Command::Report { worker_id, outcome, .. } => {
            let mut problems = Problems::new();
            problems.id("workerId", worker_id);
            if let ReportOutcome::Failed { code, message, .. } = outcome {
                problems.id("error.code", code);
                problems.text("error.message", Some(message));
            }
            invalid_if_any(problems, "invalid report")?;
            if let ReportOutcome::Completed { output_json } = outcome {
                let (output_json, _) = check_json("output", output_json, OUTPUT_BYTES_MAX, ErrorCode::InvalidArgument)?;
                checked.output_json = Some(output_json);
            }
            Ok(())
        }
        Command::CancelExecution { execution_id, actor } => {
            let mut problems = Problems::new();
            problems.id("executionId", execution_id);
            invalid_if_any(problems, "invalid cancel request")?;
            match actor {
                Some(actor) => check_actor("actor", actor),
                None => Ok(()),
            }
        }
        Command::RecordEvent(event) => record_event(event).map(|payload_json| checked.payload_json = payload_json),
        Command::Tick { .. } => Ok(()),
        // Apply unwraps a hand-off before admitting what it carries, so a
        // hand-off reaches the judge only nested in another, or sent as a command.
        Command::Handoff(_) => Err(DomainError::invalid(
            "a lease hand-off is built by the leader around one command; it is never sent or nested",
        )),
        Command::DecideThenResume(_) => Err(DomainError::invalid(
            "a decision carrying a waiting resume is built by the leader; it is never sent or nested",
        )),
        Command::RegisterNoteKey { public_key, .. } => check_note_key(public_key),
        Command::CosignCheckpoint { signature, log_signature, .. } => {
            check_signature(signature)?;
            log_signature.as_deref().map_or(Ok(()), check_signature)
        }
        Command::AddWitnessCosignature { witness, signature, .. } => check_witness_cosignature(witness, signature),
        Command::SetQuota { principal, change } => set_quota(principal, change),
        Command::SetPolicy(spec) => crate::policies::check_spec(spec),
        Command::DeletePolicy { name, .. } => crate::policies::check_name(name),
        Command::CastVote { approval_id, input_hash, approver, comment, terms_hash, .. } => {
            check_vote(approval_id, Some(input_hash), approver, comment.as_deref())?;
            crate::terms::check_terms_hash_form(terms_hash.as_deref())
                .map_err(|problem| DomainError::invalid(format!("invalid vote: {problem}")))
        }
        Command::WithdrawVote { approval_id, approver } => check_vote(approval_id, None, approver, None),
    };
    verdict.map(|()| checked)
}

/// Checks a quota change: a valid principal that is not a node (a node's
/// own commands are never counted), and limits within the bounds of
/// [`crate::limits`].
fn set_quota(principal: &Principal, change: &crate::quotas::QuotaChange) -> Result<(), DomainError> {
    self::principal("principal", principal)?;
    if principal.kind == crate::access::PrincipalKind::Node {
        return Err(DomainError::invalid(format!("{principal} is a node: nodes have no quotas")));
    }
    crate::quotas::check_change(change)
}

/// Checks an application event; returns its canonical payload. The type is
/// 1 to [`APP_EVENT_TYPE_BYTES_MAX`] bytes of `[a-z0-9._-]` starting with a
/// letter and not one of Gavel's own ([`GAVEL_EVENT_TYPES`]); the ids are
/// checked like ids, the attributes like an actor's, the payload is JSON of
/// at most [`APP_EVENT_PAYLOAD_BYTES_MAX`] bytes. All `INVALID_ARGUMENT`,
/// an ill-formed actor included.
fn record_event(event: &RecordEvent) -> Result<Option<String>, DomainError> {
    let mut problems = Problems::new();
    let event_type = &event.event_type;
    let well_formed = event_type.starts_with(|c: char| c.is_ascii_lowercase())
        && event_type.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-'));
    if event_type.len() > APP_EVENT_TYPE_BYTES_MAX {
        problems.push(format!("type is {} bytes, over the limit of {APP_EVENT_TYPE_BYTES_MAX}", event_type.len()));
    } else if !well_formed {
        problems.push(format!(
            "type {event_type:?} must start with a lower-case letter and hold only lower-case letters, digits and . _ -"
        ));
    } else if GAVEL_EVENT_TYPES.contains(&event_type.as_str()) {
        problems.push(format!("type {event_type:?} is one of Gavel's own event types; choose another"));
    }
    for (field, id) in [
        ("executionId", &event.execution_id),
        ("approvalId", &event.approval_id),
        ("correlationId", &event.correlation_id),
        ("capabilityId", &event.capability_id),
    ] {
        if let Some(id) = id {
            problems.id(field, id);
        }
    }
    problems.attributes("attributes", &event.attributes);
    invalid_if_any(problems, "invalid event")?;
    check_actor("actor", &event.actor)?;
    match &event.payload_json {
        Some(text) => check_json("payload", text, APP_EVENT_PAYLOAD_BYTES_MAX, ErrorCode::InvalidArgument)
            .map(|(json, _)| Some(json)),
        None => Ok(None),
    }
}

fn register(spec: &CapabilitySpec) -> Result<(), DomainError> {
    resolve_capability(spec, 1, 0).map(|_| ())
}

/// Checks an approval request; returns its canonical input and input hash,
/// and its validity window when the request fixes it.
///
/// Besides the shape of every field, refuses an `inputHash` that is not the
/// hash of the input, and checks the validity window against the requested-at
/// time whenever the request fixes it (its `requestedAtMs`, else its
/// `callerNowMs`, which requested-at defaults to); without either, requested-at
/// is the cluster clock, known only at apply ([`validity_window`]).
fn create_approval(request: &CreateApproval) -> Result<(CanonicalInput, Option<ValidityWindow>), DomainError> {
    let mut problems = Problems::new();
    problems.record_id("id", &request.id);
    problems.record_id("capabilityId", &request.capability_id);
    problems.text("surface", Some(&request.surface));
    problems.list("reasons", &request.reasons);
    problems.list("types", &request.types);
    problems.timestamp("requestedAt", request.requested_at_ms);
    problems.timestamp("expiresAt", request.expires_at_ms);
    problems.timestamp("now", request.caller_now_ms);
    invalid_if_any(problems, "invalid approval request")?;
    check_actor("actor", &request.actor)?;
    let (input_json, input_hash) =
        check_json("input", &request.input_json, INPUT_BYTES_MAX, ErrorCode::InvalidArgument)?;
    if let Some(given) = &request.input_hash {
        if *given != input_hash {
            return Err(DomainError::invalid(format!(
                "inputHash {given} does not match the input (its canonical hash is {input_hash})"
            )));
        }
    }
    let validity = match request.requested_at_ms.or(request.caller_now_ms) {
        Some(requested_at_ms) => Some(approval_validity(request, requested_at_ms)?),
        None => {
            validity_fields(request)?;
            None
        }
    };
    Ok(((input_json, input_hash), validity))
}

/// An approval's validity window: `(requested_at_ms, expires_at_ms)`, where
/// requested-at is the request's own or else `now_ms` (the time the command
/// compares against: its `callerNowMs`, else the cluster clock), and
/// expires-at is the request's own or else requested-at plus `expiresInMs`
/// (default 15 minutes).
///
/// Refuses both `expiresAtMs` and `expiresInMs`, an `expiresInMs` of zero or
/// over [`APPROVAL_EXPIRES_IN_MS_MAX`], an expiry before requested-at, and an
/// absolute expiry more than [`APPROVAL_EXPIRES_IN_MS_MAX`] after
/// requested-at: the same 30-day cap, however the expiry is written.
pub fn approval_validity(request: &CreateApproval, now_ms: u64) -> Result<(u64, u64), DomainError> {
    validity_fields(request)?;
    validity_window(request, now_ms)
}

/// The part of [`approval_validity`] that depends on the requested-at time:
/// `apply` judges it alone, against the cluster clock, for a request that
/// names no time (its fields were checked by [`check`]).
pub(crate) fn validity_window(request: &CreateApproval, now_ms: u64) -> Result<(u64, u64), DomainError> {
    let requested_at_ms = request.requested_at_ms.unwrap_or(now_ms);
    let Some(expires_at_ms) = request.expires_at_ms else {
        let expires_in_ms = request.expires_in_ms.unwrap_or(DEFAULT_APPROVAL_EXPIRES_IN_MS);
        let expires_at_ms = requested_at_ms.saturating_add(expires_in_ms);
        // The clock a request without a time is judged against is a node's:
        // an expiry past the last Unix time Gavel accepts (which the terms
        // could not even write as an exact JSON number) is refused, not kept.
        if expires_at_ms > TIMESTAMP_MS_MAX {
            return Err(DomainError::invalid(format!(
                "the approval would expire at {expires_at_ms}, past the last Unix time in milliseconds Gavel \
                 accepts ({TIMESTAMP_MS_MAX}): is the clock at {requested_at_ms} right?"
            )));
        }
        return Ok((requested_at_ms, expires_at_ms));
    };
    if expires_at_ms < requested_at_ms {
        return Err(DomainError::invalid("expiresAt must not be before requestedAt"));
    }
    if expires_at_ms - requested_at_ms > APPROVAL_EXPIRES_IN_MS_MAX {
        return Err(DomainError::invalid(format!(
            "expiresAt {expires_at_ms} is {} ms after requestedAt {requested_at_ms}, over the limit of \
             {APPROVAL_EXPIRES_IN_MS_MAX} ms (30 days)",
            expires_at_ms - requested_at_ms
        )));
    }
    Ok((requested_at_ms, expires_at_ms))
}

/// The validity fields on their own: at most one of `expiresAtMs` and
/// `expiresInMs`, and `expiresInMs` positive and at most 30 days.
fn validity_fields(request: &CreateApproval) -> Result<(), DomainError> {
    if let Some(expires_in_ms) = request.expires_in_ms {
        if request.expires_at_ms.is_some() {
            return Err(DomainError::invalid("set expiresAtMs or expiresInMs, not both"));
        }
        if expires_in_ms == 0 || expires_in_ms > APPROVAL_EXPIRES_IN_MS_MAX {
            return Err(DomainError::invalid(format!(
                "expiresInMs must be positive and at most {APPROVAL_EXPIRES_IN_MS_MAX} (30 days), not {expires_in_ms}"
            )));
        }
    }
    Ok(())
}

/// Checks a submission; returns its canonical input and input hash.
fn submit(submit: &Submit) -> Result<(String, String), DomainError> {
    let mut problems = Problems::new();
    problems.record_id("executionId", &submit.execution_id);
    problems.record_id("capabilityId", &submit.capability_id);
    problems.text("surface", Some(&submit.surface));
    if let Some(correlation_id) = &submit.correlation_id {
        problems.id("correlationId", correlation_id);
    }
    invalid_if_any(problems, "invalid submission")?;
    check_actor("actor", &submit.actor)?;
    check_json("input", &submit.input_json, INPUT_BYTES_MAX, ErrorCode::InputInvalid)
}

/// Checks a poll: a worker id, one to [`crate::limits::LIST_ITEMS_MAX`] queue ids, and a task count in range.
fn poll(worker_id: &str, queues: &[String], tasks_max: u32) -> Result<(), DomainError> {
    let mut problems = Problems::new();
    problems.id("workerId", worker_id);
    if queues.is_empty() {
        problems.push("queues must name at least one queue".to_string());
    }
    problems.list("queues", queues);
    for queue in queues {
        problems.id("queue", queue);
    }
    if tasks_max == 0 || tasks_max > POLL_TASKS_MAX {
        problems.push(format!("maxTasks must be between 1 and {POLL_TASKS_MAX}"));
    }
    invalid_if_any(problems, "invalid poll")
}

/// Checks a principal named by a command: a well-formed `kind:id`.
fn principal(field: &str, principal: &Principal) -> Result<(), DomainError> {
    Principal::new(principal.kind, &principal.id)
        .map(drop)
        .map_err(|problem| DomainError::invalid(format!("{field}: {problem}")))
}

/// Checks a grant for `principal`: not a node (a node principal holds no
/// grants: it forwards for others), a scope only on `approver` and `worker`,
/// of at most [`GRANT_SCOPE_ITEMS_MAX`] items each checked like an id, and a
/// skew bound only on `clock`, at most [`CLOCK_SKEW_MS_MAX`].
fn grant(principal: &Principal, grant: &Grant) -> Result<(), DomainError> {
    self::principal("principal", principal)?;
    let mut problems = Problems::new();
    if principal.kind == PrincipalKind::Node {
        problems.push(format!("{principal} is a node; nodes hold no grants"));
    }
    let name = grant.name.as_str();
    if !grant.scope.is_empty() && !matches!(grant.name, GrantName::Approver | GrantName::Worker) {
        problems.push(format!("the {name} grant takes no scope (only approver and worker do)"));
    }
    if grant.scope.len() > GRANT_SCOPE_ITEMS_MAX {
        problems.push(format!("scope has {} items, over the limit of {GRANT_SCOPE_ITEMS_MAX}", grant.scope.len()));
    }
    for item in &grant.scope {
        problems.id("scope item", item);
    }
    match grant.skew_ms_max {
        Some(_) if grant.name != GrantName::Clock => {
            problems.push(format!("the {name} grant takes no skew bound (only clock does)"));
        }
        Some(skew_ms_max) if skew_ms_max > CLOCK_SKEW_MS_MAX => {
            problems.push(format!("skewMsMax {skew_ms_max} is over the limit of {CLOCK_SKEW_MS_MAX} (one day)"));
        }
        _ => {}
    }
    invalid_if_any(problems, "invalid grant")
}

/// Length of an Ed25519 public key.
const PUBLIC_KEY_BYTES: usize = 32;
/// Length of an Ed25519 signature.
const SIGNATURE_BYTES: usize = 64;

/// Checks that `bytes`, a `what` of Ed25519, has `expected` bytes.
fn check_length(what: &str, bytes: &[u8], expected: usize) -> Result<(), DomainError> {
    if bytes.len() != expected {
        return Err(DomainError::invalid(format!("{what} has {expected} bytes, not {}", bytes.len())));
    }
    Ok(())
}

/// Checks a note key's length (in admission).
pub(crate) fn check_note_key(public_key: &[u8]) -> Result<(), DomainError> {
    check_length("a note key (an Ed25519 public key)", public_key, PUBLIC_KEY_BYTES)
}

/// Checks a cosignature's length (in admission).
pub(crate) fn check_signature(signature: &[u8]) -> Result<(), DomainError> {
    check_length("a cosignature (an Ed25519 signature)", signature, SIGNATURE_BYTES)
}

/// Checks a witness cosignature's form: a key name of at most
/// [`crate::limits::WITNESS_NAME_BYTES_MAX`] bytes with no space or `+`,
/// and key id, timestamp and signature (4 + 8 + 64 bytes).
pub(crate) fn check_witness_cosignature(witness: &str, signature: &[u8]) -> Result<(), DomainError> {
    let bad_name = witness.is_empty()
        || witness.len() > crate::limits::WITNESS_NAME_BYTES_MAX
        || witness.chars().any(|c| c.is_whitespace() || c.is_control() || c == '+');
    if bad_name {
        return Err(DomainError::invalid(format!(
            "a witness name has 1 to {} bytes and no space or '+'",
            crate::limits::WITNESS_NAME_BYTES_MAX
        )));
    }
    check_length("a witness cosignature (key id, timestamp, signature)", signature, 4 + 8 + SIGNATURE_BYTES)
}

/// Checks a vote's fields without state (in admission).
pub(crate) fn check_vote(
    approval_id: &str,
    input_hash: Option<&str>,
    approver: &Actor,
    comment: Option<&str>,
) -> Result<(), DomainError> {
    crate::validate::check_actor("approver", approver)
        .map_err(|error| DomainError { code: ErrorCode::InvalidArgument, ..error })?;
    let mut problems = Problems::new();
    problems.id("approvalId", approval_id);
    problems.text("comment", comment);
    if let Some(hash) = input_hash {
        if hash.len() != 64 || !hash.bytes().all(|byte| matches!(byte, b'0'..=b'9' | b'a'..=b'f')) {
            problems.push("inputHash must be 64 lower-case hex digits (SHA-256)".to_string());
        }
    }
    invalid_if_any(problems, "invalid vote")
}
