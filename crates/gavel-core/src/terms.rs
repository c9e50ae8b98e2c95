//! The terms of a decision (SPEC §13): everything a person must see to
//! decide an approval, and nothing its requester can change afterwards.
//!
//! The terms are fixed when the approval is created: its id, the capability
//! as the registry held it then ([`RegisteredCapability`]), the requester
//! and the subject it acts for, the canonical input and its hash, the uses
//! a "yes" covers (one, or a standing approval's uses, window and bound
//! values), the governing policy and the expiry. [`terms_json`] writes them
//! as RFC 8785 canonical JSON and [`terms_hash`] is its SHA-256; the core
//! alone computes both. A decision or vote that names another hash is
//! refused ([`check_terms_hash`], `APPROVAL_TERMS_CHANGED`), so a "yes"
//! given on one page cannot land on another approval, and the audit event
//! of every decision and vote carries the hash its author saw.
//!
//! Adding a field here changes every approval's hash: the field list is
//! part of the contract (docs/guarantees.md, "The terms of a decision").

use serde_json::{json, Map, Value};

use crate::canonical_json::{canonicalize_within, sha256_hex, JSON_DEPTH_MAX};
use crate::error::{DomainError, ErrorCode};
pub use crate::model::RegisteredCapability;
use crate::model::{ActorKind, Approval, Capability, Risk, SideEffect};

impl RegisteredCapability {
    /// The snapshot of `capability`.
    pub fn of(capability: &Capability) -> Self {
        RegisteredCapability {
            version: capability.version,
            side_effect: capability.side_effect,
            risk: capability.risk,
            idempotent: capability.idempotent,
            approval_type: capability.approval.as_ref().and_then(|approval| approval.approval_type.clone()),
        }
    }
}

/// The lower-case name of a side effect (`write`), as the terms spell it.
pub fn side_effect_name(side_effect: SideEffect) -> &'static str {
    match side_effect {
        SideEffect::None => "none",
        SideEffect::Read => "read",
        SideEffect::Write => "write",
        SideEffect::Destructive => "destructive",
        SideEffect::External => "external",
    }
}

/// The lower-case name of a risk (`critical`), as the terms spell it.
pub fn risk_name(risk: Risk) -> &'static str {
    match risk {
        Risk::Low => "low",
        Risk::Medium => "medium",
        Risk::High => "high",
        Risk::Critical => "critical",
    }
}

fn actor_kind_name(kind: ActorKind) -> &'static str {
    match kind {
        ActorKind::User => "user",
        ActorKind::Service => "service",
        ActorKind::Automation => "automation",
        ActorKind::Anonymous => "anonymous",
    }
}

/// How much deeper than the input the terms nest a value of it: a bound
/// pointer's value sits in `uses` (1), `bound` (2), one entry (3), while the
/// input itself sits one level down; a bound value is a strict part of the
/// input (a pointer starts with `/`), so one level shallower than it.
const TERMS_DEPTH_OVER_INPUT: usize = 3;

/// The terms of `approval` as RFC 8785 canonical JSON. Keys (camelCase):
/// `approvalId`; `capability` {`id`, and as registered `version`,
/// `sideEffect`, `risk`, `idempotent`, or `registered: false`};
/// `requester` {`principal` or null, `subject` {`kind`, `id`,
/// `displayName`}}; `input` (canonical) and `inputHash`; `uses` {`max`: 1}
/// or, standing, {`max`, `windowMs`, `bound` [{`pointer`, `value`}]};
/// `policy` (null, or {`name`, `version`, `factors` [{`name`, `k`}],
/// `denyThreshold`}); `expiresAtMs`.
pub fn terms_json(approval: &Approval) -> String {
    let capability = match &approval.registered {
        Some(registered) => json!({
            "id": approval.capability_id,
            "registered": true,
            "version": registered.version,
            "sideEffect": side_effect_name(registered.side_effect),
            "risk": risk_name(registered.risk),
            "idempotent": registered.idempotent,
        }),
        None => json!({ "id": approval.capability_id, "registered": false }),
    };
    let input: Value = serde_json::from_str(&approval.input_json).expect("a stored input is canonical JSON");
    let uses = match &approval.standing {
        None => json!({ "max": 1 }),
        Some(standing) => {
            let bound: Vec<Value> = standing
                .spec
                .bound_pointers
                .iter()
                .map(|pointer| json!({ "pointer": pointer, "value": input.pointer(pointer).cloned() }))
                .collect();
            json!({ "max": standing.spec.uses_max, "windowMs": standing.spec.window_ms, "bound": bound })
        }
    };
    let policy = approval.quorum.as_ref().map_or(Value::Null, |quorum| {
        let factors: Vec<Value> = quorum.factors.iter().map(|(name, k)| json!({ "name": name, "k": k })).collect();
        json!({
            "name": quorum.policy,
            "version": quorum.policy_version,
            "factors": factors,
            "denyThreshold": quorum.deny_threshold,
        })
    });
    let mut subject = Map::new();
    subject.insert("kind".to_string(), json!(actor_kind_name(approval.actor.kind)));
    subject.insert("id".to_string(), json!(approval.actor.id));
    if let Some(display_name) = &approval.actor.display_name {
        subject.insert("displayName".to_string(), json!(display_name));
    }
    let requester = json!({
        "principal": approval.requester_principal.as_ref().map(ToString::to_string),
        "subject": Value::Object(subject),
    });
    let terms = json!({
        "approvalId": approval.id,
        "capability": capability,
        "requester": requester,
        "input": input,
        "inputHash": approval.input_hash,
        "uses": uses,
        "policy": policy,
        "expiresAtMs": approval.expires_at_ms,
    });
    // The input was canonical already, and serde_json keeps its numbers'
    // text only through this second canonicalization (integers above 2^53
    // and decimals are written as JCS writes them, like the input hash's).
    // The terms hold the input, nested up to JSON_DEPTH_MAX levels, at most
    // TERMS_DEPTH_OVER_INPUT levels further down, so this limit admits
    // the terms of every accepted input.
    canonicalize_within(&terms.to_string(), JSON_DEPTH_MAX + TERMS_DEPTH_OVER_INPUT)
        .expect("the terms are JSON built from canonical parts")
}

/// SHA-256 (lower-case hex) of [`terms_json`].
pub fn terms_hash(approval: &Approval) -> String {
    sha256_hex(terms_json(approval).as_bytes())
}

/// Checks a terms hash a decision or vote names, if any, against the
/// approval's: `APPROVAL_TERMS_CHANGED`, naming both, when they differ.
pub fn check_terms_hash(approval: &Approval, named: Option<&str>) -> Result<(), DomainError> {
    match named {
        Some(named) if named != approval.terms_hash => Err(DomainError::new(
            ErrorCode::ApprovalTermsChanged,
            format!(
                "the terms of approval {} are not the ones this decision was made on (it names terms hash {named}, \
                 the approval's is {}); read the approval again and decide on what it shows",
                approval.id, approval.terms_hash
            ),
        )),
        _ => Ok(()),
    }
}

/// Checks the form of a terms hash a request names: 64 lower-case hex digits.
pub fn check_terms_hash_form(named: Option<&str>) -> Result<(), String> {
    match named {
        Some(hash) if hash.len() != 64 || !hash.bytes().all(|byte| matches!(byte, b'0'..=b'9' | b'a'..=b'f')) => {
            Err("termsHash must be 64 lower-case hex digits (an approval's termsHash)".to_string())
        }
        _ => Ok(()),
    }
}
