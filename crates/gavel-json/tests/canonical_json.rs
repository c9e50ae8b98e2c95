//! RFC 8785 (JCS) canonical JSON vectors and the I-JSON (RFC 7493)
//! refusals. Every expected output was worked out by hand from the ECMAScript rules (`JSON.parse`, then a JCS serializer
//! using `JSON.stringify` for strings and numbers and keys sorted by UTF-16
//! code units); expected hashes were computed independently with Python's
//! `hashlib` and `sha256sum`.

use gavel_json::*;

/// Canonical form of `text`, failing the test with the error if rejected.
fn canon(text: &str) -> String {
    canonicalize(text).unwrap_or_else(|error| panic!("{text:?} was rejected: {error}"))
}

/// Asserts every `(input, expected canonical output)` pair.
fn assert_cases(cases: &[(&str, &str)]) {
    for (input, expected) in cases {
        assert_eq!(canon(input), *expected, "input {input:?}");
    }
}

// ---------------------------------------------------------------- numbers

#[test]
fn negative_zero_serializes_as_zero() {
    assert_cases(&[
        // Number::toString(-0) is "0".
        ("-0", "0"),
        ("-0.0", "0"),
        ("-0.0E+0", "0"),
        ("[-0,0]", "[0,0]"),
    ]);
    // A nonzero literal that underflows to -0 is not the number written.
    assert_refused("-1e-400", "", NumberProblem::Changed { canonical: "0".to_string() });
}

#[test]
fn numbers_from_1e21_use_exponent_form_with_plus_sign() {
    assert_cases(&[
        // Number::toString switches to exponent form once the decimal
        // exponent reaches 21, and always writes the sign of the exponent.
        ("1e21", "1e+21"),
        ("1E21", "1e+21"),
        ("-1e21", "-1e+21"),
        // Below 1e21 an integer would be written out in full; from 2^53 on
        // it is refused (integers_beyond_the_safe_range_are_refused).
        ("1E2", "100"),
        ("1.5e300", "1.5e+300"),
    ]);
}

#[test]
fn numbers_below_1e_minus_6_use_exponent_form() {
    assert_cases(&[
        // Exponent form when the decimal exponent is below -6 ...
        ("1e-7", "1e-7"),
        ("0.0000001", "1e-7"),
        ("1.5e-7", "1.5e-7"),
        // ... fixed notation from 1e-6 upwards.
        ("1e-6", "0.000001"),
        ("0.000001234", "0.000001234"),
        ("2e-3", "0.002"),
    ]);
}

#[test]
fn numbers_use_shortest_round_trip_digits() {
    assert_cases(&[
        // 0.1 + 0.2 as a double; 17 significant digits are needed.
        ("0.30000000000000004", "0.30000000000000004"),
        ("0.1", "0.1"),
        // Trailing zeros and a redundant exponent disappear.
        ("4.50", "4.5"),
        ("100e-2", "1"),
        ("0.1e1", "1"),
        ("0e-0", "0"),
        ("0.000e99999999999999999999", "0"),
    ]);
}

#[test]
fn literals_whose_canonical_form_is_another_number_are_refused() {
    for (literal, canonical) in [
        ("12345678901234567890e-30", "1.2345678901234568e-11"),
        // Exactly halfway between 1 and the next double: ties to even gives 1.
        ("1.00000000000000011102230246251565404236316680908203125", "1"),
        // One digit past halfway rounds up.
        ("1.00000000000000011102230246251565404236316680908203126", "1.0000000000000002"),
        ("0.10000000000000000001", "0.1"),
        ("333333333.33333329", "333333333.3333333"),
        ("123456789012345.678", "123456789012345.67"),
        // Underflow: a nonzero literal that becomes zero.
        ("1e-400", "0"),
        ("0.0000000000000000000000000000000000000000000000000000000000000001e-300", "0"),
        // Below half the smallest subnormal, and between subnormals.
        ("2e-324", "0"),
        ("3e-324", "5e-324"),
    ] {
        assert_refused(literal, "", NumberProblem::Changed { canonical: canonical.to_string() });
    }
}

#[test]
fn smallest_subnormal_is_5e_minus_324() {
    assert_cases(&[("5e-324", "5e-324"), ("-5e-324", "-5e-324")]);
}

/// Asserts that `text` is refused as a number a double cannot hold, at `pointer`.
fn assert_refused(text: &str, pointer: &str, problem: NumberProblem) {
    match canonicalize(text) {
        Err(CanonicalJsonError::InexactNumber { pointer: found, problem: found_problem, .. }) => {
            assert_eq!((found.as_str(), found_problem), (pointer, problem), "input {text:?}");
        }
        other => panic!("{text:?}: expected a refused number at {pointer:?}, got {other:?}"),
    }
    assert!(input_hash(text).is_err(), "input {text:?} gets no hash");
}

#[test]
fn integers_beyond_the_safe_range_are_refused() {
    // 2^53 + 1 would be stored as 2^53: the value changes.
    for (literal, canonical) in [
        ("9007199254740993", "9007199254740992"),
        ("-9007199254740993", "-9007199254740992"),
        ("9007199254740995", "9007199254740996"),
        ("1234567890123456789", "1234567890123456800"),
        ("18446744073709551615", "18446744073709552000"),
        ("123456789012345678901234567890", "1.2345678901234568e+29"),
    ] {
        assert_refused(literal, "", NumberProblem::Changed { canonical: canonical.to_string() });
    }
    // 2^53 and its neighbours' canonical forms are the same digits: a reader
    // cannot tell which integer was meant, so they are refused although the
    // text would not change (RFC 7493 §2.2, Number.isSafeInteger).
    for literal in [
        "9007199254740992",
        "-9007199254740992",
        "9007199254740992.0",
        "9.007199254740992e15",
        "1e20",
        "-1E20",
        "295147905179352830000",
        "1000000000000000000000",
        "1000000000000000000000000000000",
    ] {
        assert_refused(literal, "", NumberProblem::UnsafeInteger);
    }
}

#[test]
fn the_safe_integer_edges_and_large_exponent_numbers_are_accepted() {
    assert_cases(&[
        ("9007199254740991", "9007199254740991"),
        ("-9007199254740991", "-9007199254740991"),
        ("9007199254740991.0", "9007199254740991"),
        ("90071992547409.91e2", "9007199254740991"),
        // From 1e21 on, JCS writes exponent form, which every reader takes
        // for a double: written with an exponent or a fraction, accepted.
        ("1e21", "1e+21"),
        ("1.5e300", "1.5e+300"),
        ("-1.5E300", "-1.5e+300"),
        ("1E30", "1e+30"),
        ("1e308", "1e+308"),
        ("1.7976931348623157e308", "1.7976931348623157e+308"),
        // Non-integers below 2^53 keep their literal.
        ("4503599627370495.5", "4503599627370495.5"),
    ]);
    assert_eq!(SAFE_INTEGER_MAX, (1u64 << 53) - 1);
}

#[test]
fn overflow_to_infinity_is_refused_naming_the_pointer() {
    // JSON.parse would give Infinity, which JSON.stringify writes as "null":
    // these inputs would share the canonical form and hash of `null`. RFC 8785
    // has no canonical form for them, so they are refused.
    let four_hundred_digits = "9".repeat(400);
    let cases = [
        ("1e400".to_string(), ""),
        ("-1e400".to_string(), ""),
        ("[1,1e400]".to_string(), "/1"),
        ("{\"a\":-1e400}".to_string(), "/a"),
        (four_hundred_digits.clone(), ""),
        (format!("{{\"amount\":-{four_hundred_digits}}}"), "/amount"),
        // Just above the largest double plus half an ulp: Infinity.
        ("1.7976931348623159e308".to_string(), ""),
        ("1e99999999999999999999999".to_string(), ""),
    ];
    for (input, pointer) in cases {
        assert_refused(&input, pointer, NumberProblem::OutOfRange);
    }
}

#[test]
fn an_overflowing_input_is_refused_instead_of_sharing_the_hash_of_null() {
    // Before: both canonicalized to {"amount":null}, one hash for two inputs.
    assert!(input_hash(r#"{"amount":null}"#).is_ok());
    let refused = input_hash(r#"{"amount":1e400}"#).expect_err("refused");
    assert_eq!(refused.to_string(), "number 1e400 at /amount is beyond the range of a double");
    // A long literal is quoted shortened, so a refusal fits a status message.
    let digits = format!(r#"{{"amount":{}}}"#, "1".repeat(400));
    let refused = input_hash(&digits).expect_err("refused");
    assert_eq!(
        refused,
        CanonicalJsonError::InexactNumber {
            pointer: "/amount".to_string(),
            literal: format!("{}…", "1".repeat(LITERAL_QUOTED_CHARS_MAX)),
            problem: NumberProblem::OutOfRange,
        }
    );
}

#[test]
fn rfc8785_appendix_b_numbers_serialize_as_listed() {
    // Appendix B of RFC 8785 lists IEEE-754 bit patterns and their canonical
    // text. The inputs are shortest round-trip decimals for those patterns.
    assert_cases(&[
        ("0", "0"),                                              // 0000000000000000
        ("-0", "0"),                                             // 8000000000000000
        ("5e-324", "5e-324"),                                    // 0000000000000001
        ("-5e-324", "-5e-324"),                                  // 8000000000000001
        ("1.7976931348623157e308", "1.7976931348623157e+308"),   // 7fefffffffffffff
        ("-1.7976931348623157e308", "-1.7976931348623157e+308"), // ffefffffffffffff
        ("9.999999999999997e22", "9.999999999999997e+22"),       // 44b52d02c7e14af5
        ("1e23", "1e+23"),                                       // 44b52d02c7e14af6
        ("1.0000000000000001e23", "1.0000000000000001e+23"),     // 44b52d02c7e14af7
        ("1e21", "1e+21"),                                       // 444b1ae4d6e2ef50
        ("9.999999999999997e-7", "9.999999999999997e-7"),        // 3eb0c6f7a0b5ed8c
        ("1e-6", "0.000001"),                                    // 3eb0c6f7a0b5ed8d
        ("333333333.3333332", "333333333.3333332"),              // 41b3de4355555553
        ("333333333.33333325", "333333333.33333325"),            // 41b3de4355555554
        ("333333333.3333333", "333333333.3333333"),              // 41b3de4355555555
        ("333333333.3333334", "333333333.3333334"),              // 41b3de4355555556
        ("333333333.33333343", "333333333.33333343"),            // 41b3de4355555557
        ("-3.3333333333333333e-6", "-0.0000033333333333333333"), // becbf647612f3696
        ("1424953923781206.2", "1424953923781206.2"),            // 43143ff3c1cb0959
    ]);
    // The patterns that are integers of 2^53 or more written as digits
    // (4340000000000000, c340000000000000, 4430000000000000,
    // 444b1ae4d6e2ef4e, 444b1ae4d6e2ef4f) are not I-JSON: refused.
    for literal in [
        "9007199254740992",
        "-9007199254740992",
        "2.9514790517935283e20",
        "9.999999999999997e20",
        "9.999999999999999e20",
    ] {
        assert_refused(literal, "", NumberProblem::UnsafeInteger);
    }
}

// ---------------------------------------------------------------- strings

#[test]
fn control_characters_use_short_or_lowercase_unicode_escapes() {
    // Every code unit below 0x20, written with uppercase \u escapes in the
    // input. JSON.stringify uses the short forms \b \t \n \f \r and
    // lower-case \u00xx for the rest (note \u000b has no short form).
    let input = "\"\\u0000\\u0001\\u0002\\u0003\\u0004\\u0005\\u0006\\u0007\
                 \\u0008\\u0009\\u000A\\u000B\\u000C\\u000D\\u000E\\u000F\
                 \\u0010\\u0011\\u0012\\u0013\\u0014\\u0015\\u0016\\u0017\
                 \\u0018\\u0019\\u001A\\u001B\\u001C\\u001D\\u001E\\u001F\"";
    let expected = "\"\\u0000\\u0001\\u0002\\u0003\\u0004\\u0005\\u0006\\u0007\
                    \\b\\t\\n\\u000b\\f\\r\\u000e\\u000f\
                    \\u0010\\u0011\\u0012\\u0013\\u0014\\u0015\\u0016\\u0017\
                    \\u0018\\u0019\\u001a\\u001b\\u001c\\u001d\\u001e\\u001f\"";
    assert_eq!(canon(input), expected);
}

#[test]
fn short_escapes_are_kept_and_solidus_is_unescaped() {
    assert_cases(&[
        (r#""\b\f\n\r\t""#, r#""\b\f\n\r\t""#),
        (r#""\"\\""#, r#""\"\\""#),
        // "/" is never escaped by JSON.stringify, so "\/" becomes "/".
        (r#""a\/b""#, r#""a/b""#),
        (r#""\u0022\u005c\u002F""#, r#""\"\\/""#),
    ]);
}

#[test]
fn non_ascii_is_written_as_literal_utf8() {
    assert_cases(&[
        (r#""\u20ac""#, "\"\u{20ac}\""),
        (r#""\u00e9\u00E9""#, "\"\u{e9}\u{e9}\""),
        // DEL is not a control character for JSON.stringify.
        (r#""\u007f""#, "\"\u{7f}\""),
        // U+2028 and U+2029 are written literally (JSON is a superset of
        // ECMAScript string syntax since ES2019; no escaping).
        (r#""\u2028\u2029""#, "\"\u{2028}\u{2029}\""),
        // Literal UTF-8 in the input passes through.
        ("\"h\u{e9}llo \u{1f600} \u{fb33}\"", "\"h\u{e9}llo \u{1f600} \u{fb33}\""),
    ]);
}

#[test]
fn lone_surrogates_are_refused_naming_the_pointer() {
    // JSON.parse keeps lone surrogates; I-JSON refuses them: they are not
    // Unicode text, and most languages' strings cannot hold them.
    let cases: &[(&str, &str, &str)] = &[
        (r#""\uD800""#, "", "\\ud800"),
        (r#""\uDBFF""#, "", "\\udbff"),
        (r#""\uDC00""#, "", "\\udc00"),
        (r#""\uDFFF""#, "", "\\udfff"),
        // A high surrogate followed by something other than a low surrogate.
        (r#"["x","\uD800a"]"#, "/1", "\\ud800"),
        (r#"{"k":"x\uD800\u0041"}"#, "/k", "\\ud800"),
        // Low then high is not a pair.
        (r#"{"a":{"b":["\uDC00\uD800"]}}"#, "/a/b/0", "\\udc00"),
        // Two highs then a low: the first is lone.
        (r#""\uD800\uD800\uDC00""#, "", "\\ud800"),
        // A pair then a stray low surrogate; a raw character then one.
        (r#""\uD800\uDC00\uDC00""#, "", "\\udc00"),
        ("\"\u{10000}\\uDC00\"", "", "\\udc00"),
    ];
    for (text, pointer, escape) in cases {
        let expected = CanonicalJsonError::LoneSurrogate {
            pointer: pointer.to_string(),
            in_key: false,
            escape: escape.to_string(),
        };
        assert_eq!(canonicalize(text), Err(expected), "input {text:?}");
    }
}

#[test]
fn a_lone_surrogate_in_a_key_names_the_object() {
    let expected =
        CanonicalJsonError::LoneSurrogate { pointer: "/a/0".to_string(), in_key: true, escape: "\\udabc".to_string() };
    assert_eq!(canonicalize(r#"{"a":[{"\uDABC":1}]}"#), Err(expected.clone()));
    assert_eq!(
        expected.to_string(),
        "a key of the object at /a/0 holds a lone surrogate (\\udabc), which is not unicode text"
    );
}

#[test]
fn surrogate_pair_escape_decodes_to_literal_char() {
    assert_cases(&[
        (r#""\uD83D\uDE00""#, "\"\u{1f600}\""),
        (r#""\ud83d\ude00""#, "\"\u{1f600}\""),
        (r#""\uD800\uDC00""#, "\"\u{10000}\""),
        (r#""\uDBFF\uDFFF""#, "\"\u{10ffff}\""),
    ]);
}

// ---------------------------------------------------------------- objects

#[test]
fn keys_sort_by_utf16_code_units_not_code_points() {
    // U+E000 is a single unit 0xE000; U+10000 is the pair 0xD800 0xDC00.
    // By code point U+E000 comes first, by UTF-16 units U+10000 does.
    assert_eq!(canon("{\"\u{e000}\":1,\"\u{10000}\":2}"), "{\"\u{10000}\":2,\"\u{e000}\":1}");
    // Same with escaped input.
    assert_eq!(canon(r#"{"\ue000":1,"\ud800\udc00":2}"#), "{\"\u{10000}\":2,\"\u{e000}\":1}");
    // U+FF61 (one unit) sorts after U+1F600 (0xD83D 0xDE00).
    assert_eq!(canon("{\"\u{ff61}\":0,\"\u{1f600}\":0}"), "{\"\u{1f600}\":0,\"\u{ff61}\":0}");
}

#[test]
fn keys_sort_by_code_unit_value_and_prefix_first() {
    assert_cases(&[
        // "" < "1" < "10" < "2" < "A" < "B" < "a" < "aa" < "b": plain
        // lexicographic order on code units, no numeric ordering of keys
        // (unlike Object.keys' integer-index ordering, which JCS re-sorts).
        (
            r#"{"b":0,"aa":0,"a":0,"B":0,"A":0,"2":0,"10":0,"1":0,"":0}"#,
            r#"{"":0,"1":0,"10":0,"2":0,"A":0,"B":0,"a":0,"aa":0,"b":0}"#,
        ),
        // U+E000 (0xE000) sorts after U+10000 (0xD800 0xDC00).
        (r#"{"\ue000":0,"\ud800\udc00":1}"#, "{\"\u{10000}\":1,\"\u{e000}\":0}"),
    ]);
}

#[test]
fn rfc8785_sorting_example_orders_keys() {
    // RFC 8785 section 3.2.3.
    let input = r#"{
  "\u20ac": "Euro Sign",
  "\r": "Carriage Return",
  "\ufb33": "Hebrew Letter Dalet With Dagesh",
  "1": "One",
  "\ud83d\ude00": "Emoji: Grinning Face",
  "\u0080": "Control",
  "\u00f6": "Latin Small Letter O With Diaeresis"
}"#;
    let expected = "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u{80}\":\"Control\",\
                    \"\u{f6}\":\"Latin Small Letter O With Diaeresis\",\
                    \"\u{20ac}\":\"Euro Sign\",\"\u{1f600}\":\"Emoji: Grinning Face\",\
                    \"\u{fb33}\":\"Hebrew Letter Dalet With Dagesh\"}";
    assert_eq!(canon(input), expected);
}

#[test]
fn rfc8785_main_example_canonicalizes() {
    // RFC 8785 section 3.2.2, with 333333333.3333333 for the RFC's
    // 333333333.33333329: the same double, but a literal of another number,
    // which I-JSON refuses (literals_whose_canonical_form_is_another_number_are_refused).
    let input = r#"{
  "numbers": [333333333.3333333, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false]
}"#;
    let expected = "{\"literals\":[null,true,false],\
                    \"numbers\":[333333333.3333333,1e+30,4.5,0.002,1e-27],\
                    \"string\":\"\u{20ac}$\\u000f\\nA'B\\\"\\\\\\\\\\\"/\"}";
    assert_eq!(canon(input), expected);
}

#[test]
fn nested_objects_and_arrays_are_sorted_at_every_level() {
    assert_cases(&[
        (
            r#"{"b":[{"d":1,"c":2},[{"z":[],"y":{}}]],"a":{"z":{"y":[],"x":null}}}"#,
            r#"{"a":{"z":{"x":null,"y":[]}},"b":[{"c":2,"d":1},[{"y":{},"z":[]}]]}"#,
        ),
        // Array order is preserved.
        ("[3,1,2]", "[3,1,2]"),
        ("[]", "[]"),
        ("{}", "{}"),
        ("[[],{},[[]]]", "[[],{},[[]]]"),
    ]);
}

#[test]
fn duplicate_keys_are_refused_naming_the_pointer() {
    // JSON.parse keeps the last value, other parsers the first: the approver
    // and the worker could read different inputs. I-JSON refuses them.
    let cases: &[(&str, &str)] = &[
        (r#"{"a":1,"a":2}"#, "/a"),
        (r#"{"a":1,"b":0,"a":{"x":1},"a":3}"#, "/a"),
        // "\u0061" is "a": the same key after unescaping.
        (r#"{"a":1,"\u0061":2}"#, "/a"),
        // Inside a value, in an array: the innermost duplicate.
        (r#"{"k":[0,{"x":1,"x":2}]}"#, "/k/1/x"),
        // Keys needing escapes in a JSON Pointer: ~ is ~0, / is ~1.
        (r#"{"a/b":{"c~d":1,"c~d":2}}"#, "/a~1b/c~0d"),
        (r#"{"":{"":1,"":2}}"#, "//"),
    ];
    for (text, pointer) in cases {
        let expected = CanonicalJsonError::DuplicateKey { pointer: pointer.to_string() };
        assert_eq!(canonicalize(text), Err(expected), "input {text:?}");
    }
    assert_eq!(
        refusal("input", &canonicalize(r#"{"a":1,"a":2}"#).expect_err("refused")),
        "input is not I-JSON (RFC 7493): duplicate key at /a: an object's keys must be unique"
    );
}

#[test]
fn proto_key_is_an_ordinary_key() {
    // JSON.parse defines "__proto__" as an own data property.
    assert_eq!(canon(r#"{"__proto__":{"a":1},"_":0}"#), r#"{"_":0,"__proto__":{"a":1}}"#);
}

// ---------------------------------------------------------------- whitespace and scalars

#[test]
fn insignificant_whitespace_is_removed() {
    assert_cases(&[
        (" \t\r\n{ \"a\" : [ 1 , 2 ] ,\n\t\"b\"\r:\t{ } }\n ", r#"{"a":[1,2],"b":{}}"#),
        ("[ ]", "[]"),
        ("{ }", "{}"),
        // Whitespace inside strings is content.
        ("\" a \\t b \"", "\" a \\t b \""),
    ]);
}

#[test]
fn top_level_scalars_are_accepted() {
    assert_cases(&[
        ("true", "true"),
        ("false", "false"),
        ("null", "null"),
        ("  42  ", "42"),
        ("\"x\"", "\"x\""),
        ("\"\"", "\"\""),
    ]);
}

// ---------------------------------------------------------------- hashes

#[test]
fn sha256_hex_matches_known_digests() {
    assert_eq!(sha256_hex(b""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    assert_eq!(sha256_hex(b"abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

#[test]
fn input_hash_hashes_the_canonical_utf8_bytes() {
    let cases = [
        ("{ \"a\" : 1 }", "{\"a\":1}", "015abd7f5cc57a2dd94b7590f04ad8084273905ee33ec5cebeae62276a97f862"),
        (" {} ", "{}", "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"),
        (
            r#"{"\u20ac":"\ud83d\ude00"}"#,
            "{\"\u{20ac}\":\"\u{1f600}\"}",
            "d6921b1d63c147cc81722cd7fc6b3eb51e1c2251e84990d88e4235a2d09ea021",
        ),
        (
            r#"{"nested":{"y":1e21,"x":null},"approvers":["alice","bob"],"amount":1.0E2}"#,
            r#"{"amount":100,"approvers":["alice","bob"],"nested":{"x":null,"y":1e+21}}"#,
            "2b9c4a07be318974e189f5f7bbb029a6a1779952abee776fda8e5eb49fa2964b",
        ),
    ];
    for (input, canonical, hash) in cases {
        let result = input_hash(input);
        assert_eq!(result, Ok((canonical.to_string(), hash.to_string())), "input {input:?}");
    }
}

#[test]
fn input_hash_of_rfc8785_example_matches_independent_digest() {
    let input = r#"{
  "numbers": [333333333.3333333, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false]
}"#;
    let (_, hash) = input_hash(input).unwrap_or_else(|error| panic!("rejected: {error}"));
    assert_eq!(hash, "2d5e01a318d0f0879ab568c4be289c8b1f64ef8921a53c6277d5e069978baacb");
}

#[test]
fn input_hash_is_the_same_for_equivalent_texts() {
    let a = input_hash(r#"{"b":[1.0,-0],"a":"\u00e9"}"#);
    let b = input_hash("{ \"a\" : \"\u{e9}\" , \"b\" : [ 1 , 0 ] }");
    assert!(a.is_ok());
    assert_eq!(a, b);
}

#[test]
fn input_hash_propagates_rejection() {
    assert!(matches!(input_hash("{"), Err(CanonicalJsonError::UnexpectedEnd { offset: 1 })));
}

// ---------------------------------------------------------------- rejections

#[test]
fn malformed_inputs_are_rejected() {
    let malformed: &[&str] = &[
        "",
        "   ",
        "{",
        "[",
        "}",
        "]",
        "[1,]",
        "{\"a\":1,}",
        "[,1]",
        "[1,,2]",
        "{,}",
        "01",
        "-01",
        "00",
        "[00]",
        "1.",
        ".5",
        "-",
        "+1",
        "1e",
        "1e+",
        "1.e3",
        "0x10",
        "- 1",
        "NaN",
        "Infinity",
        "-Infinity",
        "'a'",
        "{'a':1}",
        "/*c*/1",
        "1 // c",
        "\"a\u{1}b\"",
        "\"a\nb\"",
        "\"\t\"",
        "\"\u{1f}\"",
        "\"abc",
        "\"\\",
        "\"\\\"",
        "\"\\x\"",
        "\"\\'\"",
        "\"\\u12\"",
        "\"\\u12g4\"",
        "\"\\U0041\"",
        "\"\\u{41}\"",
        "[1 2]",
        "{\"a\" 1}",
        "{\"a\":}",
        "{\"a\"}",
        "{a:1}",
        "{1:1}",
        "{\"a\":1 \"b\":2}",
        "tru",
        "True",
        "nul",
        "nulll",
        "undefined",
        "1 2",
        "{}x",
        "[]]",
        "{}}",
        // A byte order mark is not JSON whitespace (JSON.parse rejects it).
        "\u{feff}1",
        // Neither are NBSP, vertical tab, form feed or U+2028.
        "1\u{a0}",
        "\u{b}1",
        "\u{c}1",
        "1\u{2028}",
    ];
    for text in malformed {
        assert!(canonicalize(text).is_err(), "{text:?} was accepted");
    }
}

#[test]
fn rejection_reports_kind_and_byte_offset() {
    use CanonicalJsonError::*;
    let cases: &[(&str, CanonicalJsonError)] = &[
        ("", UnexpectedEnd { offset: 0 }),
        ("[1,", UnexpectedEnd { offset: 3 }),
        ("\"abc", UnexpectedEnd { offset: 4 }),
        ("tr", UnexpectedEnd { offset: 2 }),
        ("[1,]", Syntax { offset: 3, reason: "expected a json value" }),
        ("01", Syntax { offset: 1, reason: "leading zeros are not allowed" }),
        ("\"a\nb\"", Syntax { offset: 2, reason: "unescaped control character in string" }),
        ("{\"a\":1,}", Syntax { offset: 7, reason: "expected a string key" }),
        ("1 2", TrailingCharacters { offset: 2 }),
        ("{} x", TrailingCharacters { offset: 3 }),
    ];
    for (text, expected) in cases {
        assert_eq!(canonicalize(text).as_ref(), Err(expected), "input {text:?}");
    }
}

#[test]
fn error_messages_are_lowercase_without_trailing_period() {
    let errors = [
        CanonicalJsonError::UnexpectedEnd { offset: 3 },
        CanonicalJsonError::Syntax { offset: 1, reason: "leading zeros are not allowed" },
        CanonicalJsonError::TrailingCharacters { offset: 2 },
        CanonicalJsonError::TooDeep { depth_max: JSON_DEPTH_MAX },
        CanonicalJsonError::InexactNumber {
            pointer: "/a".to_string(),
            literal: "1e400".to_string(),
            problem: NumberProblem::OutOfRange,
        },
        CanonicalJsonError::InexactNumber {
            pointer: String::new(),
            literal: "9007199254740993".to_string(),
            problem: NumberProblem::Changed { canonical: "9007199254740992".to_string() },
        },
        CanonicalJsonError::InexactNumber {
            pointer: "/a".to_string(),
            literal: "9007199254740992".to_string(),
            problem: NumberProblem::UnsafeInteger,
        },
        CanonicalJsonError::DuplicateKey { pointer: "/a".to_string() },
        CanonicalJsonError::LoneSurrogate { pointer: "/a".to_string(), in_key: false, escape: "\\ud800".to_string() },
    ];
    for error in errors {
        let message = error.to_string();
        assert!(!message.is_empty());
        assert!(!message.ends_with('.'), "{message:?}");
        assert_eq!(message, message.to_lowercase(), "{message:?}");
    }
    assert_eq!(CanonicalJsonError::TooDeep { depth_max: 64 }.to_string(), "json nesting deeper than 64 levels");
}

// ---------------------------------------------------------------- depth

fn nested_arrays(depth: usize) -> String {
    format!("{}{}", "[".repeat(depth), "]".repeat(depth))
}

fn nested_objects(depth: usize) -> String {
    format!("{}1{}", "{\"a\":".repeat(depth), "}".repeat(depth))
}

#[test]
fn nesting_up_to_the_limit_is_accepted() {
    assert_eq!(JSON_DEPTH_MAX, 64);
    let arrays = nested_arrays(JSON_DEPTH_MAX);
    assert_eq!(canon(&arrays), arrays);
    let objects = nested_objects(JSON_DEPTH_MAX);
    assert_eq!(canon(&objects), objects);
    // Scalars inside the innermost container do not add a level.
    let with_scalar = format!("{}1{}", "[".repeat(JSON_DEPTH_MAX), "]".repeat(JSON_DEPTH_MAX));
    assert_eq!(canon(&with_scalar), with_scalar);
}

#[test]
fn nesting_beyond_the_limit_is_too_deep() {
    let too_deep = CanonicalJsonError::TooDeep { depth_max: JSON_DEPTH_MAX };
    assert_eq!(canonicalize(&nested_arrays(JSON_DEPTH_MAX + 1)), Err(too_deep.clone()));
    assert_eq!(canonicalize(&nested_objects(JSON_DEPTH_MAX + 1)), Err(too_deep.clone()));
    // Alternating arrays and objects count the same.
    let mixed = format!("{}{}", "[{\"k\":".repeat(33), "1}]".repeat(33));
    assert_eq!(canonicalize(&mixed), Err(too_deep));
}

#[test]
fn huge_unclosed_nesting_is_too_deep_not_stack_overflow() {
    let hostile = "[".repeat(1_000_000);
    assert_eq!(canonicalize(&hostile), Err(CanonicalJsonError::TooDeep { depth_max: JSON_DEPTH_MAX }));
    let hostile = "{\"a\":".repeat(1_000_000);
    assert!(matches!(canonicalize(&hostile), Err(CanonicalJsonError::TooDeep { .. })));
}

#[test]
fn unclosed_nesting_within_the_limit_is_unexpected_end() {
    let text = "[".repeat(JSON_DEPTH_MAX);
    assert_eq!(canonicalize(&text), Err(CanonicalJsonError::UnexpectedEnd { offset: JSON_DEPTH_MAX }));
}

// ---------------------------------------------------------------- fuzz

/// Deterministic xorshift64 generator.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

/// Accepted inputs must canonicalize to a fixed point.
fn check_idempotent(text: &str) -> bool {
    match canonicalize(text) {
        Ok(once) => {
            let twice = canonicalize(&once);
            assert_eq!(twice.as_ref(), Ok(&once), "input {text:?}");
            true
        }
        Err(_) => false,
    }
}

const SOUP: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "\"",
    "\\",
    "\\u",
    "d8",
    "00",
    "DC",
    "0",
    "1",
    "9",
    "-",
    "+",
    ".",
    "e",
    "E",
    " ",
    "\t",
    "\n",
    "\r",
    "a",
    "true",
    "false",
    "null",
    "\u{1}",
    "\u{e9}",
    "\u{1f600}",
    "\u{e000}",
    "\u{feff}",
    "/",
    "x",
    "'",
];

#[test]
fn random_token_soup_never_panics_and_accepted_inputs_are_idempotent() {
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    let mut accepted = 0;
    for _ in 0..10_000 {
        let mut text = String::new();
        for _ in 0..rng.below(12) {
            text.push_str(rng.pick(SOUP));
        }
        if check_idempotent(&text) {
            accepted += 1;
        }
    }
    // Make sure the soup reaches the success path, not only the errors.
    assert!(accepted > 100, "only {accepted} inputs accepted");
}

#[test]
fn random_bytes_never_panic() {
    let mut rng = XorShift(0x1234_5678_9abc_def1);
    for _ in 0..4000 {
        let len = rng.below(40);
        let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        let text = String::from_utf8_lossy(&bytes);
        check_idempotent(&text);
    }
}

const NUMBERS: &[&str] = &[
    "0",
    "-0",
    "1",
    "-1",
    "1e21",
    "1e-7",
    "1E+2",
    "0.1",
    "2.5e-3",
    "9007199254740991",
    "-9007199254740991",
    "5e-324",
    "-1e308",
    "1.7976931348623157e308",
    "0.30000000000000004",
    "4.50",
    "1.2345678901234568e+29",
    "333333333.3333333",
];

const STRING_PIECES: &[&str] = &[
    "a",
    "Z",
    "\u{e9}",
    "\u{1f600}",
    "\u{e000}",
    "\u{10000}",
    "\u{7f}",
    " ",
    "/",
    "\\u0000",
    "\\u001F",
    "\\uD83D\\uDE00",
    "\\u2028",
    "\\\"",
    "\\\\",
    "\\/",
    "\\b",
    "\\f",
    "\\n",
    "\\r",
    "\\t",
];

const WHITESPACE: &[&str] = &["", "", "", " ", "\t", "\n", "\r", " \r\n "];

fn random_string(rng: &mut XorShift, out: &mut String) {
    out.push('"');
    for _ in 0..rng.below(5) {
        out.push_str(rng.pick(STRING_PIECES));
    }
    out.push('"');
}

fn random_number(rng: &mut XorShift, out: &mut String) {
    if rng.below(2) == 0 {
        out.push_str(rng.pick(NUMBERS));
        return;
    }
    if rng.below(2) == 0 {
        out.push('-');
    }
    out.push_str(&(rng.next() % 1_000_000).to_string());
    if rng.below(2) == 0 {
        out.push('.');
        out.push_str(&(rng.next() % 100_000).to_string());
    }
    if rng.below(2) == 0 {
        // Exponents keep the number normal (at most 999999.99999e299, at
        // least 0.1e-290), where a double holds any literal of at most 15
        // significant digits: overflow and underflow are refused, not valid
        // documents.
        // Positive exponents stay below 9 or from 22 on: between, the number
        // may be an integer of 2^53 or more written as digits, refused.
        let marker = rng.pick(&["e", "E", "e+", "e-", "E-"]);
        let exponent = match (marker.ends_with('-'), rng.below(2)) {
            (true, _) => rng.next() % 290,
            (false, 0) => rng.next() % 9,
            (false, _) => 22 + rng.next() % 278,
        };
        out.push_str(marker);
        out.push_str(&exponent.to_string());
    }
}

/// Appends a random valid JSON value nested at most `depth` more levels.
fn random_value(rng: &mut XorShift, depth: usize, out: &mut String) {
    let kinds = if depth == 0 { 3 } else { 5 };
    match rng.below(kinds) {
        0 => random_number(rng, out),
        1 => random_string(rng, out),
        2 => out.push_str(rng.pick(&["true", "false", "null"])),
        3 => {
            out.push('[');
            for index in 0..rng.below(4) {
                if index > 0 {
                    out.push(',');
                }
                out.push_str(rng.pick(WHITESPACE));
                random_value(rng, depth - 1, out);
                out.push_str(rng.pick(WHITESPACE));
            }
            out.push(']');
        }
        _ => {
            out.push('{');
            // Keys as they read once unescaped: I-JSON keys are unique.
            let mut keys = std::collections::BTreeSet::new();
            for _ in 0..rng.below(5) {
                let mut key = String::new();
                if rng.below(2) == 0 {
                    // A small key pool, with escaped spellings of the same key.
                    key.push_str(rng.pick(&[
                        "\"a\"",
                        "\"b\"",
                        "\"\\u0061\"",
                        "\"\\ue000\"",
                        "\"\\ud800\\udc00\"",
                        "\"\"",
                        "\"1\"",
                        "\"10\"",
                        "\"2\"",
                    ]));
                } else {
                    random_string(rng, &mut key);
                }
                if !keys.insert(canonicalize(&key).expect("a valid key")) {
                    continue;
                }
                if keys.len() > 1 {
                    out.push(',');
                }
                out.push_str(rng.pick(WHITESPACE));
                out.push_str(&key);
                out.push_str(rng.pick(WHITESPACE));
                out.push(':');
                out.push_str(rng.pick(WHITESPACE));
                random_value(rng, depth - 1, out);
            }
            out.push('}');
        }
    }
}

#[test]
fn random_valid_documents_are_accepted_and_idempotent() {
    let mut rng = XorShift(0xdead_beef_cafe_f00d);
    for _ in 0..3000 {
        let mut text = String::new();
        text.push_str(rng.pick(WHITESPACE));
        random_value(&mut rng, 6, &mut text);
        text.push_str(rng.pick(WHITESPACE));
        assert!(check_idempotent(&text), "valid input {text:?} was rejected");
    }
}

#[test]
fn random_mutations_of_valid_documents_never_panic() {
    let mut rng = XorShift(0x0bad_5eed_1234_4321);
    for _ in 0..3000 {
        let mut text = String::new();
        random_value(&mut rng, 4, &mut text);
        let mut chars: Vec<char> = text.chars().collect();
        for _ in 0..=rng.below(3) {
            let position = rng.below(chars.len() + 1);
            let replacement = rng.pick(SOUP).chars().next().unwrap_or('x');
            match rng.below(3) {
                0 => chars.insert(position, replacement),
                1 if position < chars.len() => {
                    chars.remove(position);
                }
                _ if position < chars.len() => chars[position] = replacement,
                _ => chars.push(replacement),
            }
        }
        let mutated: String = chars.into_iter().collect();
        check_idempotent(&mutated);
    }
}

/// The writers for code that builds canonical JSON without parsing it
/// (an approval's terms): a string comes out as the canonical form of the
/// same string parsed, an integer as its digits up to 2^53 - 1, and an
/// integer past that is refused loudly rather than rounded.
#[test]
fn the_direct_writers_write_what_canonicalization_writes() {
    let cases: [(&str, &str); 6] = [
        ("", r#""""#),
        ("plain", r#""plain""#),
        ("quote \" and \\ back", r#""quote \" and \\ back""#),
        ("\u{8}\u{c}\n\r\t", r#""\b\f\n\r\t""#),
        ("\u{0}\u{1f}\u{7f}", "\"\\u0000\\u001f\u{7f}\""),
        ("é€𝄞\u{2028}\u{feff}", "\"é€𝄞\u{2028}\u{feff}\""),
    ];
    for (text, expected) in cases {
        let mut out = String::new();
        push_canonical_string(&mut out, text);
        assert_eq!(out, expected, "{text:?}");
        assert_eq!(canon(&out), out, "{text:?}: the canonical form of the same string parsed");
    }
    for number in [0, 1, 10, 1_000_000, SAFE_INTEGER_MAX] {
        let mut out = String::new();
        push_canonical_integer(&mut out, number);
        assert_eq!(out, number.to_string());
        assert_eq!(out, canon(&out), "{number} is canonical");
    }
    let past = std::panic::catch_unwind(|| push_canonical_integer(&mut String::new(), SAFE_INTEGER_MAX + 1));
    assert!(past.is_err(), "2^53 is past what canonical JSON holds exactly");
}
