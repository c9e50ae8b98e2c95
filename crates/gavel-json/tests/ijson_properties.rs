//! Property tests of the I-JSON rules: every safe integer, every literal of
//! at most 15 digits and every double written as its shortest literal
//! round-trips unchanged; every integer
//! beyond ±(2^53 − 1) is refused; a refusal's JSON Pointer names the number
//! wherever it sits, with `~` and `/` in keys escaped.

use gavel_json::{canonicalize, CanonicalJsonError, NumberProblem, SAFE_INTEGER_MAX};
use proptest::prelude::*;

const SAFE: i64 = SAFE_INTEGER_MAX as i64;

/// One step of a path: an object key or an array index.
#[derive(Debug, Clone)]
enum Step {
    Key(String),
    Index(usize),
}

/// Wraps `value` in containers along `path` (outermost first); an index is
/// reached through that many `null`s before it. Returns the text and the
/// JSON Pointer of `value` in it.
fn nest(path: &[Step], value: &str) -> (String, String) {
    let mut text = value.to_string();
    let mut pointer = String::new();
    for step in path.iter().rev() {
        match step {
            Step::Key(key) => {
                let escaped = key.replace('\\', "\\\\").replace('"', "\\\"");
                text = format!("{{\"{escaped}\":{text}}}");
                pointer = format!("/{}{pointer}", key.replace('~', "~0").replace('/', "~1"));
            }
            Step::Index(index) => {
                text = format!("[{}{text}]", "null,".repeat(*index));
                pointer = format!("/{index}{pointer}");
            }
        }
    }
    (text, pointer)
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof!["[a-z~/ \"\\\\é]{0,6}".prop_map(Step::Key), (0usize..4).prop_map(Step::Index),]
}

proptest! {
    #[test]
    fn every_safe_integer_round_trips_unchanged(n in -SAFE..=SAFE) {
        prop_assert_eq!(canonicalize(&n.to_string()), Ok(n.to_string()));
    }

    #[test]
    fn every_integer_beyond_the_safe_range_is_refused_where_it_sits(
        magnitude in (SAFE_INTEGER_MAX + 1)..=u64::MAX,
        negative in any::<bool>(),
        path in proptest::collection::vec(step(), 0..5),
    ) {
        let literal = if negative { format!("-{magnitude}") } else { magnitude.to_string() };
        let (text, pointer) = nest(&path, &literal);
        match canonicalize(&text) {
            Err(CanonicalJsonError::InexactNumber { pointer: found, literal: quoted, problem }) => {
                prop_assert_eq!(found, pointer);
                prop_assert_eq!(quoted, literal);
                let refused_as_inexact = matches!(problem, NumberProblem::Changed { .. } | NumberProblem::UnsafeInteger);
                prop_assert!(refused_as_inexact, "{}", problem);
            }
            other => prop_assert!(false, "{text}: {other:?}"),
        }
    }

    #[test]
    fn a_double_written_as_its_shortest_literal_is_kept_unless_an_unsafe_integer(bits in any::<u64>()) {
        let number = f64::from_bits(bits);
        prop_assume!(number.is_finite());
        // ECMAScript's shortest literal (the closest of the shortest, as
        // RFC 8785 writes numbers). Rust's `{:e}` is shortest but not always
        // the closest at 17 digits, and such a literal is another number
        // (see the test below).
        let literal = ryu_js::Buffer::new().format_finite(number).to_string();
        let unsafe_integer = number.abs() > SAFE_INTEGER_MAX as f64 && number.abs() < 1e21;
        match canonicalize(&literal) {
            Ok(canonical) => {
                prop_assert!(!unsafe_integer, "{literal} was accepted");
                prop_assert_eq!(canonical.parse::<f64>().ok(), Some(number).map(|n| if n == 0.0 { 0.0 } else { n }));
            }
            Err(error) => {
                prop_assert!(unsafe_integer, "{literal}: {error}");
                let expected = CanonicalJsonError::InexactNumber {
                    pointer: String::new(),
                    literal: literal.clone(),
                    problem: NumberProblem::UnsafeInteger,
                };
                prop_assert_eq!(error, expected);
            }
        }
    }

    #[test]
    fn a_literal_of_at_most_15_digits_without_exponent_is_its_own_canonical_form(
        digits in 1u64..1_000_000_000_000_000,
        point in 0usize..16,
        negative in any::<bool>(),
    ) {
        // The fast path accepts such a literal unchecked; the full check
        // (forced by an exponent, `e0`) must agree and give the same form.
        let digits = digits.to_string();
        let point = point.min(digits.len());
        let (integer, fraction) = digits.split_at(digits.len() - point);
        let integer = if integer.is_empty() { "0" } else { integer };
        let sign = if negative { "-" } else { "" };
        let literal = if fraction.is_empty() { format!("{sign}{integer}") } else { format!("{sign}{integer}.{fraction}") };
        let fast = canonicalize(&literal);
        prop_assert!(fast.is_ok(), "{literal}: {fast:?}");
        prop_assert_eq!(canonicalize(&format!("{literal}e0")), fast);
    }

    #[test]
    fn a_small_fraction_of_at_most_15_digits_is_its_own_canonical_form(digits in 1u64..10_000_000, zeros in 0usize..14) {
        // The leading 0, the zeros and the digits: at most 15 digits in all.
        let zeros = zeros.min(14 - digits.to_string().len());
        let literal = format!("0.{}{digits}", "0".repeat(zeros));
        let fast = canonicalize(&literal);
        prop_assert!(fast.is_ok(), "{literal}: {fast:?}");
        prop_assert_eq!(canonicalize(&format!("{literal}e0")), fast);
    }

    #[test]
    fn duplicate_keys_and_lone_surrogates_are_refused_where_they_sit(
        path in proptest::collection::vec(step(), 0..5),
        surrogate in 0xd800u32..=0xdfff,
    ) {
        let (text, pointer) = nest(&path, r#"{"k":1,"k":2}"#);
        prop_assert_eq!(canonicalize(&text), Err(CanonicalJsonError::DuplicateKey { pointer: format!("{pointer}/k") }));
        let (text, pointer) = nest(&path, &format!("\"\\u{surrogate:04X}\""));
        let escape = format!("\\u{surrogate:04x}");
        prop_assert_eq!(canonicalize(&text), Err(CanonicalJsonError::LoneSurrogate { pointer, in_key: false, escape }));
    }
}

/// Found by the property above when it wrote literals with Rust's `{:e}`:
/// this double's 17-digit literal from `{:e}` round-trips to it but is not
/// the closest 17-digit literal, so as a decimal it is another number than
/// the canonical one, and it is refused naming the canonical form.
#[test]
fn a_shortest_literal_that_is_not_the_closest_is_refused_naming_the_canonical_one() {
    let number = f64::from_bits(14_041_200_999_778_482_408);
    let literal = format!("{number:e}");
    assert_eq!(literal, "-1.2475876393776363e14");
    assert_eq!(literal.parse::<f64>().ok(), Some(number), "it round-trips");
    let expected = CanonicalJsonError::InexactNumber {
        pointer: String::new(),
        literal: literal.clone(),
        problem: NumberProblem::Changed { canonical: "-124758763937763.62".to_string() },
    };
    assert_eq!(canonicalize(&literal), Err(expected));
    assert_eq!(canonicalize("-124758763937763.62"), Ok("-124758763937763.62".to_string()));
}
