"""RFC 8785 canonical JSON in Python: the vectors the server's tests use, and
the refusals that name the JSON path. No cluster needed."""

from __future__ import annotations

import math
import struct

import pytest

import gavel
from gavel.canonical import canonical_json, ecmascript_number


@pytest.mark.parametrize(
    ("bits", "text"),
    [
        # RFC 8785 appendix B: IEEE-754 bit patterns and their ECMAScript text.
        (0x0000000000000000, "0"),
        (0x8000000000000000, "0"),
        (0x0000000000000001, "5e-324"),
        (0x8000000000000001, "-5e-324"),
        (0x7FEFFFFFFFFFFFFF, "1.7976931348623157e+308"),
        (0xFFEFFFFFFFFFFFFF, "-1.7976931348623157e+308"),
        (0x4340000000000000, "9007199254740992"),
        (0xC340000000000000, "-9007199254740992"),
        (0x4430000000000000, "295147905179352830000"),
        (0x44B52D02C7E14AF5, "9.999999999999997e+22"),
        (0x44B52D02C7E14AF6, "1e+23"),
        (0x44B52D02C7E14AF7, "1.0000000000000001e+23"),
        (0x444B1AE4D6E2EF4E, "999999999999999700000"),
        (0x444B1AE4D6E2EF4F, "999999999999999900000"),
        (0x444B1AE4D6E2EF50, "1e+21"),
        (0x3EB0C6F7A0B5ED8C, "9.999999999999997e-7"),
        (0x3EB0C6F7A0B5ED8D, "0.000001"),
        (0x41B3DE4355555553, "333333333.3333332"),
        (0x41B3DE4355555554, "333333333.33333325"),
        (0x41B3DE4355555555, "333333333.3333333"),
        (0x41B3DE4355555556, "333333333.3333334"),
        (0x41B3DE4355555557, "333333333.33333343"),
        (0xBECBF647612F3696, "-0.0000033333333333333333"),
        (0x43143FF3C1CB0959, "1424953923781206.2"),
    ],
)
def test_numbers_are_written_as_ecmascript_writes_them(bits: int, text: str) -> None:
    (value,) = struct.unpack(">d", bits.to_bytes(8, "big"))
    assert ecmascript_number(value) == text


def test_strings_are_escaped_as_json_stringify_escapes_them() -> None:
    assert canonical_json('\u20ac$\u000f\nA\'B"\\\\"/') == '"€$\\u000f\\nA\'B\\"\\\\\\\\\\"/"'
    assert canonical_json("\b\f\r\t\x7f\u2028😀") == '"\\b\\f\\r\\t\x7f\u2028😀"'
    # A pair (as two code points) is one character; a lone surrogate is refused (I-JSON).
    assert canonical_json("\ud83d\ude00") == '"😀"'


def test_keys_sort_by_utf16_code_units() -> None:
    value = {"\ue000": 1, "\U00010000": 2, "b": 3, "a": 4, "": 5, "é": 6}
    assert canonical_json(value) == '{"":5,"a":4,"b":3,"é":6,"𐀀":2,"\ue000":1}'


def test_the_rfc_8785_example_object_canonicalizes_exactly() -> None:
    value = {
        "numbers": [333333333.33333329, 1e30, 4.50, 2e-3, 0.000000000000000000000000001],
        "string": "\u20ac$\u000f\u000aA'\u0042\u0022\u005c\u005c\u0022\u002f",
        "literals": [None, True, False],
    }
    assert canonical_json(value) == (
        '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
        '"string":"€$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'
    )


def test_integers_and_floats_of_equal_value_hash_alike() -> None:
    assert gavel.input_hash({"a": 1}) == gavel.input_hash({"a": 1.0})
    assert (
        canonical_json([2**53 - 1, -(2**53 - 1), 1e21, 1e-7, 123.0])
        == "[9007199254740991,-9007199254740991,1e+21,1e-7,123]"
    )


@pytest.mark.parametrize(
    ("value", "path", "reason"),
    [
        ({"order": {"ids": [1, 2**53 + 1]}}, "input.order.ids[1]", "beyond 2**53"),
        ({"order": {"ids": [2**53]}}, "input.order.ids[0]", "beyond 2**53"),
        ({"n": 1.2e19}, "input.n", "beyond 2**53"),
        ({"s": "a\udfffb"}, "input.s", "lone surrogate"),
        ({"\ud800": 1}, "input", "lone surrogate"),
        ([-(2**64)], "input[0]", "beyond 2**53"),
        ({"x": math.nan}, "input.x", "which JSON cannot represent"),
        ({"x": [math.inf]}, "input.x[0]", "which JSON cannot represent"),
        ({"x": {1: "a"}}, "input.x", "not a string"),
        ({"x": {1, 2}}, "input.x", "set"),
        ({"x": b"bytes"}, "input.x", "bytes"),
    ],
)
def test_values_json_cannot_hold_exactly_are_refused_naming_their_path(value: object, path: str, reason: str) -> None:
    with pytest.raises(gavel.UnserializableInputError) as caught:
        canonical_json(value)
    assert caught.value.path == path and reason in str(caught.value)


def test_cycles_and_deep_nesting_are_refused() -> None:
    cycle: list[object] = []
    cycle.append(cycle)
    with pytest.raises(gavel.UnserializableInputError, match="cycle"):
        canonical_json(cycle)
    deep: list[object] = []
    for _ in range(64):
        deep = [deep]
    with pytest.raises(gavel.UnserializableInputError, match="deeper than 64"):
        canonical_json(deep)
    assert canonical_json(deep[0]).count("[") == 64
