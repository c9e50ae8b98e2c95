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

use crate::canonical_json::{
    canonicalize_within, push_canonical_integer, push_canonical_string, sha256_hex, JSON_DEPTH_MAX,
};
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
    if approval.standing.is_some() {
        // A standing approval's bound values are parts of the input, found
        // by pointer: written through serde_json's values.
        return terms_json_through_values(approval);
    }
    // The members in RFC 8785's order (keys by UTF-16 code units; every key
    // here is ASCII), each value written canonically. The stored input is
    // canonical already (`input_hash`), and canonical JSON is its own
    // canonical form, so it is copied as it is. Equal, byte for byte, to
    // `terms_json_through_values` (tests below).
    let mut out = String::with_capacity(approval.input_json.len() + 512);
    out.push_str("{\"approvalId\":");
    push_canonical_string(&mut out, &approval.id);
    out.push_str(",\"capability\":{\"id\":");
    push_canonical_string(&mut out, &approval.capability_id);
    match &approval.registered {
        Some(registered) => {
            out.push_str(if registered.idempotent { ",\"idempotent\":true" } else { ",\"idempotent\":false" });
            out.push_str(",\"registered\":true,\"risk\":");
            push_canonical_string(&mut out, risk_name(registered.risk));
            out.push_str(",\"sideEffect\":");
            push_canonical_string(&mut out, side_effect_name(registered.side_effect));
            out.push_str(",\"version\":");
            push_canonical_integer(&mut out, registered.version);
        }
        None => out.push_str(",\"registered\":false"),
    }
    out.push_str("},\"expiresAtMs\":");
    push_canonical_integer(&mut out, approval.expires_at_ms);
    out.push_str(",\"input\":");
    out.push_str(&approval.input_json);
    out.push_str(",\"inputHash\":");
    push_canonical_string(&mut out, &approval.input_hash);
    out.push_str(",\"policy\":");
    match &approval.quorum {
        None => out.push_str("null"),
        Some(quorum) => {
            out.push_str("{\"denyThreshold\":");
            push_canonical_integer(&mut out, u64::from(quorum.deny_threshold));
            out.push_str(",\"factors\":[");
            for (index, (name, k)) in quorum.factors.iter().enumerate() {
                out.push_str(if index == 0 { "{\"k\":" } else { ",{\"k\":" });
                push_canonical_integer(&mut out, u64::from(*k));
                out.push_str(",\"name\":");
                push_canonical_string(&mut out, name);
                out.push('}');
            }
            out.push_str("],\"name\":");
            push_canonical_string(&mut out, &quorum.policy);
            out.push_str(",\"version\":");
            push_canonical_integer(&mut out, quorum.policy_version);
            out.push('}');
        }
    }
    out.push_str(",\"requester\":{\"principal\":");
    match &approval.requester_principal {
        None => out.push_str("null"),
        Some(principal) => push_canonical_string(&mut out, &principal.to_string()),
    }
    out.push_str(",\"subject\":{");
    if let Some(display_name) = &approval.actor.display_name {
        out.push_str("\"displayName\":");
        push_canonical_string(&mut out, display_name);
        out.push(',');
    }
    out.push_str("\"id\":");
    push_canonical_string(&mut out, &approval.actor.id);
    out.push_str(",\"kind\":");
    push_canonical_string(&mut out, actor_kind_name(approval.actor.kind));
    out.push_str("}},\"uses\":{\"max\":1}}");
    out
}

/// [`terms_json`] through serde_json's values, canonicalized at the end:
/// the way every approval's terms were written until 2026-12-07, kept for
/// standing approvals and as the reference the direct writer is tested
/// against.
fn terms_json_through_values(approval: &Approval) -> String {
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

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::Value;

    use super::{terms_json, terms_json_through_values};
    use crate::canonical_json::{canonicalize, SAFE_INTEGER_MAX};
    use crate::model::{
        Actor, ActorKind, Approval, Principal, PrincipalKind, Quorum, RegisteredCapability, Risk, SideEffect,
        StoredApprovalStatus,
    };

    /// Any JSON value the core accepts as an input, nested a little, with
    /// every kind of number and string; stored as its canonical text, as
    /// the core stores an input.
    fn any_input() -> impl Strategy<Value = String> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            // I-JSON: an integer a double holds exactly (the core refuses others).
            (-(1i64 << 53)..=(1i64 << 53)).prop_map(Value::from),
            // Decimals, large and tiny (written with exponents), within 2^53.
            (-9.0e15..9.0e15).prop_map(Value::from),
            (-1.0e-6..1.0e-6).prop_map(Value::from),
            ".*".prop_map(Value::String),
        ];
        let value = leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map(".*", inner, 0..4)
                    .prop_map(|members| Value::Object(members.into_iter().collect())),
            ]
        });
        value.prop_map(|value| canonicalize(&value.to_string()).expect("serde_json writes I-JSON here"))
    }

    fn any_approval() -> impl Strategy<Value = Approval> {
        let registered = prop::option::of((0..=SAFE_INTEGER_MAX, 0..5u8, 0..4u8, any::<bool>()).prop_map(
            |(version, side_effect, risk, idempotent)| RegisteredCapability {
                version,
                side_effect: [
                    SideEffect::None,
                    SideEffect::Read,
                    SideEffect::Write,
                    SideEffect::Destructive,
                    SideEffect::External,
                ][usize::from(side_effect)],
                risk: [Risk::Low, Risk::Medium, Risk::High, Risk::Critical][usize::from(risk)],
                idempotent,
                approval_type: None,
            },
        ));
        let quorum = prop::option::of(
            (".*", 0..=SAFE_INTEGER_MAX, prop::collection::vec((".*", any::<u32>()), 0..3), any::<u32>()).prop_map(
                |(policy, policy_version, factors, deny_threshold)| Quorum {
                    policy,
                    policy_version,
                    factors,
                    deny_threshold,
                    votes: Vec::new(),
                },
            ),
        );
        let actor = (".*", 0..4u8, prop::option::of(".*")).prop_map(|(id, kind, display_name)| {
            let kind =
                [ActorKind::User, ActorKind::Service, ActorKind::Automation, ActorKind::Anonymous][usize::from(kind)];
            Actor { display_name, ..Actor::new(&id, kind) }
        });
        let principal = prop::option::of("[A-Za-z0-9._@-]{1,16}")
            .prop_map(|id| id.map(|id| Principal { kind: PrincipalKind::Service, id }));
        (".*", ".*", any_input(), "[0-9a-f]{64}", 0..=SAFE_INTEGER_MAX, registered, quorum, actor, principal).prop_map(
            |(id, capability_id, input_json, input_hash, expires_at_ms, registered, quorum, actor, principal)| {
                Approval {
                    id,
                    capability_id,
                    surface: "test".to_string(),
                    actor,
                    input_json,
                    input_hash,
                    reasons: Vec::new(),
                    types: Vec::new(),
                    risk: Risk::Low,
                    side_effect: SideEffect::Write,
                    requested_at_ms: 0,
                    expires_at_ms,
                    allow_self_approval: false,
                    requester_principal: principal,
                    status: StoredApprovalStatus::Pending,
                    decision: None,
                    consumed_by_execution_id: None,
                    execution_id: None,
                    capability_version: None,
                    correlation_id: None,
                    closed_at_ms: None,
                    quorum,
                    standing: None,
                    registered,
                    terms_hash: String::new(),
                }
            },
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        /// The direct writer and the values' writer give the same bytes
        /// (so the same terms hash) for any one-use approval: strings with
        /// quotes, controls and any Unicode, integers up to 2^53 - 1 (the
        /// limits keep every number of the terms there), inputs of every
        /// JSON kind.
        #[test]
        fn the_direct_writer_writes_the_terms_the_values_writer_does(approval in any_approval()) {
            prop_assert_eq!(terms_json(&approval), terms_json_through_values(&approval));
        }
    }
}
