"""RFC 8785 (JCS) canonical JSON and the input hash, equal to the server's.

The server (crates/gavel-core/src/canonical_json.rs) and the TypeScript
client hash the canonical UTF-8 text of an input with SHA-256. This module
writes a Python value in exactly that form: object keys sorted by UTF-16 code
units, no whitespace, strings escaped as ECMAScript ``JSON.stringify``
escapes them, and numbers written as ECMAScript writes a double.

A value JSON cannot carry exactly, or that is not I-JSON (RFC 7493, as the
server refuses it), is refused with the JSON path of the offending part
(``input.items[3].amount``): NaN and infinities, integers beyond 2**53 - 1
(and floats whose canonical text would be one), lone surrogates in strings
and keys, non-string object keys, cycles, nesting deeper than 64 levels and
any type other than dict, list, tuple, str, int, float, bool and None.
"""

from __future__ import annotations

import hashlib
import json
import math
from decimal import Decimal
from typing import Any

from gavel.limits import EXPONENT_FORM_MIN, JSON_DEPTH_MAX, SAFE_INTEGER_MAX

# JSON.stringify's short escapes; every other control character is \u00xx.
_SHORT_ESCAPES = {0x22: '\\"', 0x5C: "\\\\", 0x08: "\\b", 0x0C: "\\f", 0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t"}


class UnserializableInputError(ValueError):
    """A value that has no canonical JSON form; ``path`` names the part."""

    code = "INPUT_INVALID"

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path} {reason}")
        self.path = path
        self.reason = reason


def _utf16_units(text: str) -> list[int]:
    data = text.encode("utf-16-be", "surrogatepass")
    return [(data[i] << 8) | data[i + 1] for i in range(0, len(data), 2)]


def _has_lone_surrogate(text: str) -> bool:
    # Two surrogate code points that form a pair read as one character (as
    # the JSON text "\ud83d\ude00" does); a surrogate alone is not text.
    units = _utf16_units(text) if any(0xD800 <= ord(char) <= 0xDFFF for char in text) else []
    i = 0
    while i < len(units):
        unit = units[i]
        if 0xD800 <= unit <= 0xDBFF and i + 1 < len(units) and 0xDC00 <= units[i + 1] <= 0xDFFF:
            i += 2
            continue
        if 0xD800 <= unit <= 0xDFFF:
            return True
        i += 1
    return False


def _check_text(text: str, path: str, what: str) -> None:
    # I-JSON: a string is Unicode text; a lone surrogate is not.
    if _has_lone_surrogate(text):
        raise UnserializableInputError(path, f"has {what} holding a lone surrogate, which is not unicode text")


def _write_string(text: str, out: list[str]) -> None:
    # Fast path: nothing to escape and no surrogates.
    if text.isprintable() and '"' not in text and "\\" not in text and text.isascii():
        out.append('"' + text + '"')
        return
    units = _utf16_units(text)
    parts = ['"']
    i = 0
    while i < len(units):
        unit = units[i]
        if unit in _SHORT_ESCAPES:
            parts.append(_SHORT_ESCAPES[unit])
        elif unit < 0x20:
            parts.append(f"\\u{unit:04x}")
        elif 0xD800 <= unit <= 0xDBFF and i + 1 < len(units) and 0xDC00 <= units[i + 1] <= 0xDFFF:
            # A well-formed pair is one character, written as itself.
            parts.append(chr(0x10000 + ((unit - 0xD800) << 10) + (units[i + 1] - 0xDC00)))
            i += 1
        elif 0xD800 <= unit <= 0xDFFF:
            # A lone surrogate: well-formed JSON.stringify writes it escaped.
            parts.append(f"\\u{unit:04x}")
        else:
            parts.append(chr(unit))
        i += 1
    parts.append('"')
    out.append("".join(parts))


def ecmascript_number(value: float) -> str:
    """The text ECMAScript's Number::toString gives a finite double."""
    if value == 0:
        return "0"  # -0 too, as JSON.stringify writes it
    # repr() is the shortest text that reads back as the same double, as
    # ECMAScript requires; only the layout differs.
    sign, digit_tuple, exponent = Decimal(repr(value)).as_tuple()
    digits = "".join(map(str, digit_tuple)).rstrip("0") or "0"
    assert isinstance(exponent, int)
    # value = 0.digits * 10**point
    point = exponent + len(digit_tuple)
    count = len(digits)
    prefix = "-" if sign else ""
    if count <= point <= 21:
        return prefix + digits + "0" * (point - count)
    if 0 < point <= 21:
        return prefix + digits[:point] + "." + digits[point:]
    if -6 < point <= 0:
        return prefix + "0." + "0" * (-point) + digits
    mantissa = digits[0] + ("." + digits[1:] if count > 1 else "")
    power = point - 1
    return f"{prefix}{mantissa}e{'+' if power > 0 else '-'}{abs(power)}"


def _write(value: Any, path: str, depth: int, active: set[int], out: list[str]) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, str):
        _check_text(value, path, "a string")
        _write_string(value, out)
    elif isinstance(value, int):
        if abs(value) > SAFE_INTEGER_MAX:
            raise UnserializableInputError(
                path, f"is {value}, beyond 2**53 - 1: a double cannot hold it exactly (pass it as a string)"
            )
        out.append(str(int(value)))
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise UnserializableInputError(path, f"is {value}, which JSON cannot represent")
        if value.is_integer() and SAFE_INTEGER_MAX < abs(value) < EXPONENT_FORM_MIN:
            raise UnserializableInputError(
                path, f"is {value}, an integer beyond 2**53 - 1: a double cannot hold it exactly (pass it as a string)"
            )
        out.append(ecmascript_number(value))
    elif isinstance(value, (dict, list, tuple)):
        if depth >= JSON_DEPTH_MAX:
            raise UnserializableInputError(path, f"nests deeper than {JSON_DEPTH_MAX} levels")
        if id(value) in active:
            raise UnserializableInputError(path, "is a cycle")
        active.add(id(value))
        try:
            if isinstance(value, dict):
                for key in value:
                    if not isinstance(key, str):
                        raise UnserializableInputError(path, f"has a key {key!r} that is not a string")
                    _check_text(key, path, "a key")
                keys = sorted(value, key=lambda key: key.encode("utf-16-be", "surrogatepass"))
                out.append("{")
                for index, key in enumerate(keys):
                    if index:
                        out.append(",")
                    _write_string(key, out)
                    out.append(":")
                    _write(value[key], f"{path}.{key}", depth + 1, active, out)
                out.append("}")
            else:
                out.append("[")
                for index, item in enumerate(value):
                    if index:
                        out.append(",")
                    _write(item, f"{path}[{index}]", depth + 1, active, out)
                out.append("]")
        finally:
            active.discard(id(value))
    else:
        raise UnserializableInputError(path, f"is a {type(value).__name__}, which JSON cannot represent")


def canonical_json(value: Any, *, path: str = "input") -> str:
    """The RFC 8785 canonical JSON text of ``value``.

    Raises UnserializableInputError, naming the path, for what JSON cannot
    hold exactly.
    """
    out: list[str] = []
    _write(value, path, 0, set(), out)
    return "".join(out)


def input_hash(value: Any) -> str:
    """SHA-256 (lower-case hex) of the canonical JSON of ``value``: the server's inputHash."""
    return hashlib.sha256(canonical_json(value).encode("utf-8", "surrogatepass")).hexdigest()


def parse_json(text: str) -> Any:
    """Parses JSON text from the cluster (an input or an output)."""
    return json.loads(text)
