//! RFC 8785 (JSON Canonicalization Scheme, "JCS") canonical JSON and the
//! SHA-256 input hash computed over it.
//!
//! The contract is byte-for-byte agreement with a TypeScript client that runs
//! ECMAScript `JSON.parse` on the text and then a JCS serializer: object keys
//! sorted by UTF-16 code units, no whitespace, and numbers and strings written
//! exactly as ECMAScript `JSON.stringify` writes them. Both sides then hash the
//! canonical UTF-8 bytes, so the same JSON text yields the same hash.
//!
//! # Why a custom parser
//!
//! `serde_json` cannot stand in for `JSON.parse` here:
//!
//! * `JSON.parse` accepts lone surrogate escapes such as `"\uD800"` and keeps
//!   them as UTF-16 code units; `JSON.stringify` writes them back as `\ud800`.
//!   A Rust `String` cannot hold a lone surrogate, so `serde_json` either
//!   rejects such text or would have to alter it, and the hashes would differ.
//! * JCS sorts keys by UTF-16 code units, not by code points or UTF-8 bytes
//!   (`"\u{e000}"` sorts after `"\u{10000}"`, whose first unit is `0xD800`).
//!   Keeping strings as UTF-16 makes that order the natural slice order.
//! * The parser must match `JSON.parse` on the details that change the output:
//!   duplicate keys keep the last value, numbers are rounded to the nearest
//!   `f64`, and it must reject hostile input (deep nesting) without
//!   overflowing the stack.
//!
//! # Where it departs from `JSON.parse`
//!
//! A number too large for a double (`1e400`, a 400-digit integer) is refused
//! ([`CanonicalJsonError::NonFinite`]), as RFC 8785 section 3.2.2.3 and
//! orpc-agent require. `JSON.parse` would make it `Infinity`, which
//! `JSON.stringify` writes as `null`: distinct inputs would then share the
//! canonical form and hash of `null`, and the input hash would no longer bind
//! the input. Numbers that round to a finite double (`1e308`, `2^53 + 1`)
//! are accepted and rounded as `JSON.parse` rounds them.
//!
//! The parser is a small recursive-descent parser for the strict RFC 8259
//! grammar. All string contents live in one shared UTF-16 buffer, so a parse
//! costs a handful of allocations whatever the number of strings.

use sha2::{Digest, Sha256};

/// Deepest nesting of arrays and objects that [`canonicalize`] accepts.
///
/// The parser and serializer recurse once per nesting level, so without a
/// limit a hostile input such as a megabyte of `[` would overflow the stack
/// and abort the process. 64 levels is far more than any legitimate input
/// needs and keeps the recursion a few kilobytes deep.
pub const JSON_DEPTH_MAX: usize = 64;

/// Why the text is not canonical JSON input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CanonicalJsonError {
    /// The text ends before the JSON value (or a string or container in it) is complete.
    #[error("unexpected end of json input at byte {offset}")]
    UnexpectedEnd {
        /// Byte offset of the end of the text.
        offset: usize,
    },
    /// A character at `offset` is not allowed there by the strict JSON grammar.
    #[error("json syntax error at byte {offset}: {reason}")]
    Syntax {
        /// Byte offset of the offending character.
        offset: usize,
        /// What the grammar expected or forbids at that point.
        reason: &'static str,
    },
    /// Something other than whitespace follows the complete top-level value.
    #[error("unexpected trailing characters at byte {offset}")]
    TrailingCharacters {
        /// Byte offset of the first character after the value.
        offset: usize,
    },
    /// A number at `offset` is too large in magnitude to be a finite double
    /// (it would round to infinity); RFC 8785 has no canonical form for it.
    #[error("number at byte {offset} is outside the range of a finite double")]
    NonFinite {
        /// Byte offset of the number.
        offset: usize,
    },
    /// Arrays and objects are nested more than [`JSON_DEPTH_MAX`] levels deep.
    #[error("json nesting deeper than {depth_max} levels")]
    TooDeep {
        /// The limit that was exceeded, [`JSON_DEPTH_MAX`].
        depth_max: usize,
    },
}

/// Parses `text` as ECMAScript `JSON.parse` would and returns its RFC 8785
/// canonical form.
///
/// The text must be one JSON value (any type, including a bare scalar),
/// optionally surrounded by space, tab, LF or CR, nested at most
/// [`JSON_DEPTH_MAX`] levels. The output sorts object keys by UTF-16 code
/// units, keeps the last value of a duplicated key, has no whitespace, and
/// writes numbers and strings as `JSON.stringify` does.
///
/// # Errors
///
/// Returns a [`CanonicalJsonError`] when the text is not strict RFC 8259 JSON
/// (the same texts `JSON.parse` rejects), holds a number that is not a finite
/// double (such as `1e400`), or nests deeper than [`JSON_DEPTH_MAX`].
pub fn canonicalize(text: &str) -> Result<String, CanonicalJsonError> {
    let mut parser = Parser {
        text,
        bytes: text.as_bytes(),
        pos: 0,
        // Every UTF-8 byte of the text yields at most one UTF-16 unit, so
        // this capacity is never exceeded and the buffer never reallocates.
        units: Vec::with_capacity(text.len()),
    };
    let value = parser.parse_value(0)?;
    parser.skip_whitespace();
    if parser.pos < parser.bytes.len() {
        return Err(CanonicalJsonError::TrailingCharacters { offset: parser.pos });
    }
    let mut out = String::with_capacity(text.len() + 2);
    let mut writer = Writer { out: &mut out, units: &parser.units, numbers: ryu_js::Buffer::new() };
    writer.write_value(&value);
    Ok(out)
}

/// Returns the SHA-256 digest of `bytes` as 64 lower-case hex characters.
#[must_use]
pub fn sha256_hex(bytes: &[u8]) -> String {
    lower_hex(&Sha256::digest(bytes))
}

/// Lower-case hex of `bytes`, written directly (three times faster than
/// `hex::encode`'s char iterator; hashes are computed on every submit and report).
pub(crate) fn lower_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(2 * bytes.len());
    for byte in bytes {
        out.push(char::from(DIGITS[usize::from(byte >> 4)]));
        out.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
    out
}

/// Canonicalizes `text` with [`canonicalize`] and hashes the canonical UTF-8
/// bytes with [`sha256_hex`]; returns `(canonical, hash_hex)`.
///
/// # Errors
///
/// Returns the [`CanonicalJsonError`] from [`canonicalize`].
pub fn input_hash(text: &str) -> Result<(String, String), CanonicalJsonError> {
    let canonical = canonicalize(text)?;
    let hash = sha256_hex(canonical.as_bytes());
    Ok((canonical, hash))
}

/// A range of code units in the parser's shared UTF-16 buffer.
#[derive(Clone, Copy)]
struct Span {
    start: usize,
    end: usize,
}

impl Span {
    fn units(self, units: &[u16]) -> &[u16] {
        units.get(self.start..self.end).unwrap_or(&[])
    }
}

/// A parsed JSON value; string contents live in the shared UTF-16 buffer.
enum Value {
    Null,
    Bool(bool),
    Number(f64),
    String(Span),
    Array(Vec<Value>),
    /// Members sorted by key, duplicates already removed.
    Object(Vec<Member>),
}

struct Member {
    key: Span,
    value: Value,
}

struct Parser<'a> {
    text: &'a str,
    bytes: &'a [u8],
    pos: usize,
    units: Vec<u16>,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn syntax(&self, reason: &'static str) -> CanonicalJsonError {
        CanonicalJsonError::Syntax { offset: self.pos, reason }
    }

    fn end(&self) -> CanonicalJsonError {
        CanonicalJsonError::UnexpectedEnd { offset: self.bytes.len() }
    }

    /// JSON whitespace is exactly space, tab, LF and CR (no BOM, no NBSP).
    fn skip_whitespace(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    /// Parses a value whose enclosing containers are `depth` levels deep.
    fn parse_value(&mut self, depth: usize) -> Result<Value, CanonicalJsonError> {
        self.skip_whitespace();
        match self.peek() {
            None => Err(self.end()),
            Some(b'{') => self.parse_object(depth + 1),
            Some(b'[') => self.parse_array(depth + 1),
            Some(b'"') => {
                self.pos += 1;
                Ok(Value::String(self.parse_string()?))
            }
            Some(b't') => self.parse_literal(b"true", Value::Bool(true)),
            Some(b'f') => self.parse_literal(b"false", Value::Bool(false)),
            Some(b'n') => self.parse_literal(b"null", Value::Null),
            Some(b'-' | b'0'..=b'9') => self.parse_number(),
            Some(_) => Err(self.syntax("expected a json value")),
        }
    }

    fn parse_literal(&mut self, literal: &'static [u8], value: Value) -> Result<Value, CanonicalJsonError> {
        let rest = self.bytes.get(self.pos..).unwrap_or(&[]);
        if rest.starts_with(literal) {
            self.pos += literal.len();
            Ok(value)
        } else if literal.starts_with(rest) {
            Err(self.end())
        } else {
            Err(self.syntax("invalid literal"))
        }
    }

    fn skip_digits(&mut self) -> usize {
        let start = self.pos;
        while let Some(b'0'..=b'9') = self.peek() {
            self.pos += 1;
        }
        self.pos - start
    }

    /// Requires at least one digit, as after `.`, `e` or a leading `-`.
    fn expect_digits(&mut self) -> Result<(), CanonicalJsonError> {
        if self.skip_digits() > 0 {
            Ok(())
        } else if self.peek().is_none() {
            Err(self.end())
        } else {
            Err(self.syntax("expected a digit"))
        }
    }

    /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`, then rounded
    /// to the nearest `f64` exactly like `JSON.parse`; refused when that is
    /// an infinity.
    fn parse_number(&mut self) -> Result<Value, CanonicalJsonError> {
        let start = self.pos;
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        if self.peek() == Some(b'0') {
            self.pos += 1;
            if let Some(b'0'..=b'9') = self.peek() {
                return Err(self.syntax("leading zeros are not allowed"));
            }
        } else {
            self.expect_digits()?;
        }
        if self.peek() == Some(b'.') {
            self.pos += 1;
            self.expect_digits()?;
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.pos += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            self.expect_digits()?;
        }
        // The literal is a subset of Rust's float syntax, and Rust's parse is
        // correctly rounded (round half to even) for any number of digits,
        // as ECMAScript requires. Overflow gives ±infinity, underflow ±0.
        let number = self
            .text
            .get(start..self.pos)
            .and_then(|literal| literal.parse::<f64>().ok())
            .ok_or(CanonicalJsonError::Syntax { offset: start, reason: "invalid number" })?;
        if !number.is_finite() {
            return Err(CanonicalJsonError::NonFinite { offset: start });
        }
        Ok(Value::Number(number))
    }

    /// Parses string contents after the opening quote into the UTF-16 buffer.
    fn parse_string(&mut self) -> Result<Span, CanonicalJsonError> {
        let start = self.units.len();
        loop {
            let run_start = self.pos;
            while let Some(byte) = self.peek() {
                if byte == b'"' || byte == b'\\' || byte < 0x20 {
                    break;
                }
                self.pos += 1;
            }
            if self.pos > run_start {
                // The run stops only at ASCII bytes or the end of the text,
                // so both ends are char boundaries.
                let run = self
                    .text
                    .get(run_start..self.pos)
                    .ok_or(CanonicalJsonError::Syntax { offset: run_start, reason: "invalid utf-8 boundary" })?;
                self.units.extend(run.encode_utf16());
            }
            match self.peek() {
                None => return Err(self.end()),
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(Span { start, end: self.units.len() });
                }
                Some(b'\\') => {
                    let unit = self.parse_escape()?;
                    self.units.push(unit);
                }
                Some(_) => return Err(self.syntax("unescaped control character in string")),
            }
        }
    }

    /// Parses one escape starting at the backslash. A `\uXXXX` escape yields
    /// one code unit as-is, so surrogate pairs written as two escapes join
    /// up in the buffer and lone surrogates survive, as in `JSON.parse`.
    fn parse_escape(&mut self) -> Result<u16, CanonicalJsonError> {
        self.pos += 1;
        let unit = match self.peek() {
            None => return Err(self.end()),
            Some(b'"') => 0x22,
            Some(b'\\') => 0x5c,
            Some(b'/') => 0x2f,
            Some(b'b') => 0x08,
            Some(b'f') => 0x0c,
            Some(b'n') => 0x0a,
            Some(b'r') => 0x0d,
            Some(b't') => 0x09,
            Some(b'u') => {
                self.pos += 1;
                let mut unit: u16 = 0;
                for _ in 0..4 {
                    let digit = match self.peek() {
                        None => return Err(self.end()),
                        Some(byte @ b'0'..=b'9') => byte - b'0',
                        Some(byte @ b'a'..=b'f') => byte - b'a' + 10,
                        Some(byte @ b'A'..=b'F') => byte - b'A' + 10,
                        Some(_) => return Err(self.syntax("expected a hex digit in \\u escape")),
                    };
                    unit = (unit << 4) | u16::from(digit);
                    self.pos += 1;
                }
                return Ok(unit);
            }
            Some(_) => return Err(self.syntax("invalid escape")),
        };
        self.pos += 1;
        Ok(unit)
    }

    fn parse_array(&mut self, depth: usize) -> Result<Value, CanonicalJsonError> {
        if depth > JSON_DEPTH_MAX {
            return Err(CanonicalJsonError::TooDeep { depth_max: JSON_DEPTH_MAX });
        }
        self.pos += 1; // '['
        let mut items = Vec::new();
        self.skip_whitespace();
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(Value::Array(items));
        }
        loop {
            items.push(self.parse_value(depth)?);
            self.skip_whitespace();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    return Ok(Value::Array(items));
                }
                None => return Err(self.end()),
                Some(_) => return Err(self.syntax("expected ',' or ']' in array")),
            }
        }
    }

    fn parse_object(&mut self, depth: usize) -> Result<Value, CanonicalJsonError> {
        if depth > JSON_DEPTH_MAX {
            return Err(CanonicalJsonError::TooDeep { depth_max: JSON_DEPTH_MAX });
        }
        self.pos += 1; // '{'
        let mut members = Vec::new();
        self.skip_whitespace();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(Value::Object(members));
        }
        loop {
            self.skip_whitespace();
            match self.peek() {
                Some(b'"') => self.pos += 1,
                None => return Err(self.end()),
                Some(_) => return Err(self.syntax("expected a string key")),
            }
            let key = self.parse_string()?;
            self.skip_whitespace();
            match self.peek() {
                Some(b':') => self.pos += 1,
                None => return Err(self.end()),
                Some(_) => return Err(self.syntax("expected ':' after key")),
            }
            let value = self.parse_value(depth)?;
            members.push(Member { key, value });
            self.skip_whitespace();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    break;
                }
                None => return Err(self.end()),
                Some(_) => return Err(self.syntax("expected ',' or '}' in object")),
            }
        }
        sort_members(&mut members, &self.units);
        Ok(Value::Object(members))
    }
}

/// Sorts members by key in UTF-16 code unit order (what JCS and ECMAScript's
/// default `Array.prototype.sort` use) and drops duplicate keys, keeping the
/// value that came last in the text, as `JSON.parse` does.
fn sort_members(members: &mut Vec<Member>, units: &[u16]) {
    if members.len() < 2 {
        return;
    }
    // Stable, so members with equal keys stay in text order.
    members.sort_by(|a, b| a.key.units(units).cmp(b.key.units(units)));
    // `dedup_by` keeps the earlier member of a run and passes the later one
    // first; swapping values moves the last value into the kept member.
    members.dedup_by(|later, kept| {
        if later.key.units(units) == kept.key.units(units) {
            std::mem::swap(&mut later.value, &mut kept.value);
            true
        } else {
            false
        }
    });
}

struct Writer<'a> {
    out: &'a mut String,
    units: &'a [u16],
    numbers: ryu_js::Buffer,
}

impl Writer<'_> {
    fn write_value(&mut self, value: &Value) {
        match value {
            Value::Null => self.out.push_str("null"),
            Value::Bool(true) => self.out.push_str("true"),
            Value::Bool(false) => self.out.push_str("false"),
            Value::Number(number) => self.write_number(*number),
            Value::String(span) => self.write_string(*span),
            Value::Array(items) => {
                self.out.push('[');
                for (index, item) in items.iter().enumerate() {
                    if index > 0 {
                        self.out.push(',');
                    }
                    self.write_value(item);
                }
                self.out.push(']');
            }
            Value::Object(members) => {
                self.out.push('{');
                for (index, member) in members.iter().enumerate() {
                    if index > 0 {
                        self.out.push(',');
                    }
                    self.write_string(member.key);
                    self.out.push(':');
                    self.write_value(&member.value);
                }
                self.out.push('}');
            }
        }
    }

    /// ECMAScript `JSON.stringify` of a finite number (the parser refuses the
    /// others): `Number::toString`, where `-0` prints as `0`.
    fn write_number(&mut self, number: f64) {
        if number == 0.0 {
            self.out.push('0');
        } else {
            self.out.push_str(self.numbers.format_finite(number));
        }
    }

    /// ECMAScript `JSON.stringify` of a string (ES2019 well-formed variant).
    fn write_string(&mut self, span: Span) {
        let out = &mut *self.out;
        out.push('"');
        for decoded in char::decode_utf16(span.units(self.units).iter().copied()) {
            match decoded {
                Ok('"') => out.push_str("\\\""),
                Ok('\\') => out.push_str("\\\\"),
                Ok('\u{8}') => out.push_str("\\b"),
                Ok('\u{c}') => out.push_str("\\f"),
                Ok('\n') => out.push_str("\\n"),
                Ok('\r') => out.push_str("\\r"),
                Ok('\t') => out.push_str("\\t"),
                Ok(c) if c < '\u{20}' => push_unicode_escape(out, c as u16),
                Ok(c) => out.push(c),
                Err(lone) => push_unicode_escape(out, lone.unpaired_surrogate()),
            }
        }
        out.push('"');
    }
}

/// Writes `\uXXXX` with lower-case hex digits, as `JSON.stringify` does.
fn push_unicode_escape(out: &mut String, unit: u16) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push_str("\\u");
    for shift in [12u16, 8, 4, 0] {
        out.push(char::from(HEX[usize::from((unit >> shift) & 0xf)]));
    }
}
