//! The terms of a decision in the pure core (SPEC §13, issue #37): what a
//! person is shown is hashed by the core alone, every decision and vote
//! that names another terms hash is refused, and ids of new records come
//! from one safe alphabet. A property test changes one field of the terms
//! at random and checks that a decision made on the old terms is refused
//! and one made on the current terms is accepted.

mod support;

use gavel_core::command::{Command, CreateApproval};
use gavel_core::validate::check_record_id;
use gavel_core::{ApprovalStatus, ErrorCode, EventKind, Risk, SideEffect, StandingSpec};
use proptest::prelude::*;
use proptest::test_runner::RngAlgorithm;
use serde_json::Value;
use support::*;

/// One approval request and what the cluster knows around it.
#[derive(Debug, Clone)]
struct Setup {
    id: String,
    capability_id: String,
    /// Register the capability first (its registration is part of the terms).
    registered: Option<(SideEffect, Risk)>,
    actor_id: String,
    display_name: Option<String>,
    amount: u64,
    order: String,
    expires_in_ms: u64,
    /// Standing: (uses, window, bind `/order`).
    standing: Option<(u32, u64, bool)>,
}

impl Setup {
    fn request(&self) -> CreateApproval {
        let mut request = approval_request(&self.id);
        request.capability_id = self.capability_id.clone();
        request.actor.id = self.actor_id.clone();
        request.actor.display_name = self.display_name.clone();
        request.input_json = format!(r#"{{"amount":{},"order":"{}"}}"#, self.amount, self.order);
        request.expires_in_ms = Some(self.expires_in_ms);
        request
    }

    /// A script holding this approval, and its terms hash.
    fn script(&self) -> (Script, String) {
        let mut script = Script::new();
        if let Some((side_effect, risk)) = self.registered {
            let mut spec = capability(&self.capability_id, side_effect);
            spec.risk = Some(risk);
            script.register(spec);
        }
        let command = match self.standing {
            None => Command::CreateApproval(self.request()),
            Some((uses_max, window_ms, bind)) => Command::CreateStandingApproval {
                request: self.request(),
                standing: StandingSpec {
                    uses_max,
                    window_ms,
                    bound_pointers: if bind { vec!["/order".to_string()] } else { Vec::new() },
                },
            },
        };
        let (approval, status) = approval_of(script.apply(command));
        assert_eq!(status, ApprovalStatus::Pending);
        (script, approval.terms_hash)
    }
}

fn decide_with(script: &mut Script, id: &str, terms_hash: Option<String>) -> gavel_core::Reply {
    script.apply(Command::DecideApproval {
        approval_id: id.to_string(),
        status: ApprovalStatus::Approved,
        approver: bob(),
        comment: None,
        caller_now_ms: None,
        terms_hash,
    })
}

fn side_effects() -> impl Strategy<Value = SideEffect> {
    prop_oneof![Just(SideEffect::Read), Just(SideEffect::Write), Just(SideEffect::External)]
}

fn risks() -> impl Strategy<Value = Risk> {
    prop_oneof![Just(Risk::Low), Just(Risk::High), Just(Risk::Critical)]
}

fn setups() -> impl Strategy<Value = Setup> {
    (
        "[a-z][a-z0-9-]{0,8}",
        prop_oneof![Just("orders.refund".to_string()), Just("payments.wire".to_string())],
        proptest::option::of((side_effects(), risks())),
        "agent-[a-z]{1,6}",
        proptest::option::of("[A-Za-z ]{1,8}"),
        0u64..1_000_000,
        "o-[0-9]{1,3}",
        1_000u64..3_600_000,
        proptest::option::of((1u32..=100, 1u64..=86_400_000, any::<bool>())),
    )
        .prop_map(
            |(id, capability_id, registered, actor_id, display_name, amount, order, expires_in_ms, standing)| Setup {
                id,
                capability_id,
                registered,
                actor_id,
                display_name,
                amount,
                order,
                expires_in_ms,
                standing,
            },
        )
}

/// One field of the terms, changed.
#[derive(Debug, Clone)]
enum Change {
    Id,
    Capability,
    Registration(SideEffect, Risk),
    Unregistered,
    Actor,
    DisplayName,
    Amount,
    Order,
    Expiry,
    OneShot,
    Uses,
    Window,
    Binding,
}

fn changes() -> impl Strategy<Value = Change> {
    prop_oneof![
        Just(Change::Id),
        Just(Change::Capability),
        (side_effects(), risks()).prop_map(|(side_effect, risk)| Change::Registration(side_effect, risk)),
        Just(Change::Unregistered),
        Just(Change::Actor),
        Just(Change::DisplayName),
        Just(Change::Amount),
        Just(Change::Order),
        Just(Change::Expiry),
        Just(Change::OneShot),
        Just(Change::Uses),
        Just(Change::Window),
        Just(Change::Binding),
    ]
}

/// `setup` with `change` applied, or `None` when the change is a no-op.
fn changed(setup: &Setup, change: &Change) -> Option<Setup> {
    let mut next = setup.clone();
    match change {
        Change::Id => next.id.push('x'),
        Change::Capability => {
            next.capability_id =
                if setup.capability_id == "orders.refund" { "payments.wire" } else { "orders.refund" }.to_string()
        }
        Change::Registration(side_effect, risk) => next.registered = Some((*side_effect, *risk)),
        Change::Unregistered => next.registered = None,
        Change::Actor => next.actor_id.push('x'),
        Change::DisplayName => {
            next.display_name = Some(setup.display_name.clone().unwrap_or_default() + "x");
        }
        Change::Amount => next.amount += 1,
        Change::Order => next.order.push('9'),
        Change::Expiry => next.expires_in_ms += 1,
        Change::OneShot => next.standing = None,
        Change::Uses => {
            next.standing = Some(setup.standing.map_or((2, 60_000, false), |(uses, window, bind)| {
                (if uses == 100 { 99 } else { uses + 1 }, window, bind)
            }))
        }
        Change::Window => {
            next.standing = Some(setup.standing.map_or((1, 60_000, false), |(uses, window, bind)| {
                (uses, if window == 86_400_000 { window - 1 } else { window + 1 }, bind)
            }))
        }
        Change::Binding => {
            next.standing = Some(setup.standing.map_or((1, 60_000, true), |(uses, window, bind)| (uses, window, !bind)))
        }
    }
    let same = format!("{next:?}") == format!("{setup:?}");
    (!same).then_some(next)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        rng_algorithm: RngAlgorithm::ChaCha,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn a_decision_on_changed_terms_is_refused_and_one_on_the_current_terms_is_accepted(
        setup in setups(),
        change in changes(),
    ) {
        let Some(next) = changed(&setup, &change) else { return Ok(()) };
        let (_, shown) = setup.script();
        let (mut script, current) = next.script();
        prop_assert_ne!(&shown, &current, "{:?} left the terms hash unchanged", change);

        let refused_reply = decide_with(&mut script, &next.id, Some(shown.clone()));
        let refusal = refused(refused_reply, ErrorCode::ApprovalTermsChanged);
        prop_assert!(refusal.message.contains(&shown) && refusal.message.contains(&current), "{}", refusal.message);
        prop_assert_eq!(script.approval(&next.id).status_at(script.now_ms), ApprovalStatus::Pending);

        let (approval, status) = approval_of(decide_with(&mut script, &next.id, Some(current.clone())));
        prop_assert_eq!(status, ApprovalStatus::Approved);
        prop_assert_eq!(approval.terms_hash, current.clone());
        let last = script.events().pop().expect("an event");
        prop_assert_eq!(last.kind, EventKind::Approved { terms_hash: current });
    }
}

#[test]
fn the_terms_name_what_a_person_must_see_and_hash_to_the_recorded_hash() {
    let setup = Setup {
        id: "s-1".to_string(),
        capability_id: "orders.refund".to_string(),
        registered: Some((SideEffect::Write, Risk::Critical)),
        actor_id: "agent-7".to_string(),
        display_name: None,
        amount: 1,
        order: "o-9".to_string(),
        expires_in_ms: 60_000,
        standing: Some((100, 7 * 86_400_000, true)),
    };
    let (script, hash) = setup.script();
    let approval = script.approval("s-1");
    let terms: Value = serde_json::from_str(&gavel_core::terms::terms_json(&approval)).expect("JSON");
    assert_eq!(gavel_core::canonical_json::sha256_hex(gavel_core::terms::terms_json(&approval).as_bytes()), hash);
    assert_eq!(terms["approvalId"], "s-1");
    assert_eq!(terms["capability"]["risk"], "critical", "the registered risk, not the requester's");
    assert_eq!(terms["capability"]["version"], 1);
    assert_eq!(terms["requester"]["subject"]["id"], "agent-7");
    assert_eq!(terms["input"]["amount"], 1);
    assert_eq!(terms["inputHash"], approval.input_hash.as_str());
    assert_eq!(terms["uses"]["max"], 100);
    assert_eq!(terms["uses"]["windowMs"], 7 * 86_400_000u64);
    assert_eq!(terms["uses"]["bound"][0]["pointer"], "/order");
    assert_eq!(terms["uses"]["bound"][0]["value"], "o-9");
    assert_eq!(terms["policy"], Value::Null);
    assert_eq!(terms["expiresAtMs"], START_MS + 60_000);
}

#[test]
fn a_decision_naming_no_terms_hash_is_accepted_and_its_event_carries_the_approvals() {
    let mut script = Script::new();
    let approval = script.create_approval(approval_request("a-1"));
    let (_, status) = approval_of(decide_with(&mut script, "a-1", None));
    assert_eq!(status, ApprovalStatus::Approved);
    assert_eq!(
        script.events().pop().map(|event| event.kind),
        Some(EventKind::Approved { terms_hash: approval.terms_hash })
    );
}

#[test]
fn a_malformed_terms_hash_is_invalid_before_anything_changes() {
    let mut script = Script::new();
    script.create_approval(approval_request("a-1"));
    refused(decide_with(&mut script, "a-1", Some("not-a-hash".to_string())), ErrorCode::InvalidArgument);
    assert_eq!(script.approval("a-1").status_at(script.now_ms), ApprovalStatus::Pending);
}

#[test]
fn new_ids_come_from_one_safe_alphabet() {
    for bad in ["z/../../approvals/hv-e9814d", "a b", "..", ".", "a%2Fb", "a?b", "a#b", "é", "a\u{200b}b", "a\\b"] {
        assert!(check_record_id("id", bad).is_err(), "{bad:?} was accepted");
        let mut script = Script::new();
        refused(script.apply(Command::CreateApproval(approval_request(bad))), ErrorCode::InvalidArgument);
        let mut request = approval_request("ok-1");
        request.capability_id = bad.to_string();
        refused(script.apply(Command::CreateApproval(request)), ErrorCode::InvalidArgument);
        refused(
            script.apply(Command::RegisterCapability(capability(bad, SideEffect::Read))),
            ErrorCode::CapabilityInvalid,
        );
    }
    for good in ["hv-e9814d", "apr_refund-9", "orders.refund", "user:alice@example.com", "a.b", "...", "x=1+2~"] {
        assert!(check_record_id("id", good).is_ok(), "{good:?} was refused");
    }
}

/// An input nested as deep as an input may be (`JSON_DEPTH_MAX` levels)
/// has terms, one-shot and standing with a pointer bound to its deepest
/// container: the terms hold it deeper than the input limit, and building
/// them must not fail inside `apply` (a random command found this: the
/// terms were canonicalized under the input's own limit, and every replica
/// would have panicked on the same entry).
#[test]
fn the_deepest_accepted_input_has_terms_one_shot_and_standing() {
    let depth = gavel_core::canonical_json::JSON_DEPTH_MAX;
    let mut input = String::from("1");
    for _ in 0..depth {
        input = format!(r#"{{"a":{input}}}"#);
    }
    let deepest_pointer = format!("/{}", vec!["a"; depth - 1].join("/"));
    for (id, standing) in [("deep-1", None), ("deep-2", Some(deepest_pointer))] {
        let mut script = Script::new();
        let mut request = approval_request(id);
        request.input_json = input.clone();
        let command = match standing {
            None => Command::CreateApproval(request),
            Some(pointer) => Command::CreateStandingApproval {
                request,
                standing: StandingSpec { uses_max: 2, window_ms: 60_000, bound_pointers: vec![pointer] },
            },
        };
        let (approval, status) = approval_of(script.apply(command));
        assert_eq!(status, ApprovalStatus::Pending, "{id}");
        let terms = gavel_core::terms::terms_json(&approval);
        assert_eq!(gavel_core::canonical_json::sha256_hex(terms.as_bytes()), approval.terms_hash, "{id}");
    }
    // One level deeper is refused as input, before any terms are built.
    let mut script = Script::new();
    let mut request = approval_request("deep-3");
    request.input_json = format!(r#"{{"a":{input}}}"#);
    let refused = script.apply(Command::CreateApproval(request));
    assert!(
        matches!(&refused, gavel_core::Reply::Error(error) if error.code == ErrorCode::InputInvalid || error.code == ErrorCode::InvalidArgument),
        "{refused:?}"
    );
}
