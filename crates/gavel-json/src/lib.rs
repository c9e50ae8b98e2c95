//! Gavel's JSON rules, shared by the core (`gavel_core::canonical_json`
//! re-exports this crate) and the client SDK, so a client refuses exactly
//! what the cluster refuses, with the same message:
//!
//! * I-JSON (RFC 7493): a number a double cannot hold exactly, a duplicated
//!   object key and a lone surrogate are refused, each naming where it is as
//!   a JSON Pointer (RFC 6901), such as `/order/lines/3/qty`;
//! * RFC 8785 (JSON Canonicalization Scheme, "JCS") canonical JSON and the
//!   SHA-256 input hash computed over it.
//!
//! It depends on nothing of Gavel's and on no runtime: a parser, a writer
//! and a hash. Key items: [`canonicalize`], [`input_hash`],
//! [`CanonicalJsonError`], [`refusal`].
//!
//! The canonical form agrees byte for byte with a TypeScript client that runs
//! ECMAScript `JSON.parse` on the text and then a JCS serializer: object keys
//! sorted by UTF-16 code units, no whitespace, and numbers and strings written
//! exactly as ECMAScript `JSON.stringify` writes them. Both sides then hash the
//! canonical UTF-8 bytes, so the same JSON text yields the same hash.
//!
//! # What is refused, and why
//!
//! What an approver sees must be exactly what the worker runs, so a text
//! whose meaning depends on the reader is refused rather than quietly
//! changed (SPEC §8, RFC 7493):
//!
//! * **numbers a double cannot hold exactly** ([`NumberProblem`]): a number
//!   beyond the range of a double (`1e400`: `JSON.parse` makes it
//!   `Infinity`, which `JSON.stringify` writes as `null`); an integer beyond
//!   ±(2^53 − 1) = ±9007199254740991 (`9007199254740993` would be stored as
//!   `9007199254740992`; 2^53 itself is refused too, as `Number.isSafeInteger`
//!   and RFC 7493 §2.2 refuse it, because a reader cannot tell whether it was
//!   2^53 or 2^53 + 1); and any other number whose canonical form is a
//!   different number than its literal (`1e-400` would become `0`,
//!   `0.10000000000000000001` would become `0.1`). Decimals such as `0.1`
//!   are accepted: a double does not hold 0.1, but the canonical form is the
//!   shortest literal that reads back as the same double, which is `0.1`
//!   again, so every reader sees the number that was written. A number of
//!   2^53 or more is an integer; written from 1e21 on, JCS writes it in
//!   exponent form (`1.5e+300`) that every reader parses as the same double,
//!   so such a number is accepted unless its literal was an integer
//!   (`1000000000000000000000`). `-0` is accepted and written `0`, as
//!   `JSON.stringify` writes it (they are the same number in JSON);
//! * **duplicate object keys** ([`CanonicalJsonError::DuplicateKey`]):
//!   `JSON.parse` keeps the last value, other parsers the first;
//! * **lone surrogates** (`"\ud800"`, [`CanonicalJsonError::LoneSurrogate`]):
//!   not Unicode text, and many languages' strings cannot hold them.
//!
//! # Why a custom parser
//!
//! `serde_json` cannot stand in for `JSON.parse` here: JCS sorts keys by
//! UTF-16 code units, not by code points or UTF-8 bytes (`"\u{e000}"` sorts
//! after `"\u{10000}"`, whose first unit is `0xD800`), so strings are kept as
//! UTF-16 and that order is the natural slice order; numbers must be rounded
//! exactly as `JSON.parse` rounds them and compared with their literal; and
//! the parser must reject hostile input (deep nesting) without overflowing
//! the stack.
//!
//! The parser is a small recursive-descent parser for the strict RFC 8259
//! grammar. All string contents live in one shared UTF-16 buffer, so a parse
//! costs a handful of allocations whatever the number of strings. A refusal's
//! JSON Pointer is built only when something is refused, as the error
//! unwinds through the containers (no cost on a valid text).

use sha2::{Digest, Sha256};

/// Deepest nesting of arrays and objects that [`canonicalize`] accepts.
///
/// The parser and serializer recurse once per nesting level, so without a
/// limit a hostile input such as a megabyte of `[` would overflow the stack
/// and abort the process. 64 levels is far more than any legitimate input
/// needs and keeps the recursion a few kilobytes deep.
pub const JSON_DEPTH_MAX: usize = 64;

/// The largest integer a double holds exactly along with every integer
/// below it, 2^53 − 1 (ECMAScript's `Number.MAX_SAFE_INTEGER`); RFC 7493
/// §2.2 limits I-JSON integers to ±this. Larger integers are refused (see
/// [`NumberProblem::UnsafeInteger`]).
pub const SAFE_INTEGER_MAX: u64 = 9_007_199_254_740_991;

/// Longest prefix of a refused number's literal that a refusal quotes, in
/// characters: a refusal travels in a gRPC status message (a trailer), and a
/// 60,000-digit literal would not fit there; 40 characters show any double.
pub const LITERAL_QUOTED_CHARS_MAX: usize = 40;

/// Longest JSON Pointer a refusal quotes, in characters (object keys are
/// bounded only by the text's size): the same reason as
/// [`LITERAL_QUOTED_CHARS_MAX`].
pub const POINTER_QUOTED_CHARS_MAX: usize = 256;

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
    /// A number that a double cannot hold exactly (I-JSON, RFC 7493 §2.2).
    #[error("number {literal} at {} {problem}", location(pointer))]
    InexactNumber {
        /// JSON Pointer (RFC 6901) of the number; empty for the whole text.
        pointer: String,
        /// The number as written, at most [`LITERAL_QUOTED_CHARS_MAX`]
        /// characters of it (then `…`).
        literal: String,
        /// What a double would make of it.
        problem: NumberProblem,
    },
    /// An object has two members with the same key (I-JSON, RFC 7493 §2.3).
    #[error("duplicate key at {}: an object's keys must be unique", location(pointer))]
    DuplicateKey {
        /// JSON Pointer (RFC 6901) of the duplicated member.
        pointer: String,
    },
    /// A string or an object key holds a `\u` escape of a surrogate that is
    /// not half of a pair, such as `"\ud800"` (I-JSON, RFC 7493 §2.1).
    #[error(
        "{} at {} holds a lone surrogate ({escape}), which is not unicode text",
        if *in_key { "a key of the object" } else { "the string" },
        location(pointer)
    )]
    LoneSurrogate {
        /// JSON Pointer (RFC 6901) of the string, or of the object whose key it is.
        pointer: String,
        /// Whether it is in a key of that object rather than a string value.
        in_key: bool,
        /// The surrogate, as the escape `\udXXX`.
        escape: String,
    },
    /// Arrays and objects are nested more than [`JSON_DEPTH_MAX`] levels deep.
    #[error("json nesting deeper than {depth_max} levels")]
    TooDeep {
        /// The limit that was exceeded, [`JSON_DEPTH_MAX`].
        depth_max: usize,
    },
}

/// What a double would make of a number it cannot hold exactly.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NumberProblem {
    /// Too large in magnitude for a finite double (`1e400`, a 400-digit
    /// integer): `JSON.parse` would make it `Infinity`, written as `null`.
    #[error("is beyond the range of a double")]
    OutOfRange,
    /// The canonical form, the shortest literal of the nearest double, is
    /// a different number: `9007199254740993` would become
    /// `9007199254740992`, `1e-400` would become `0`.
    #[error("cannot be held exactly by a double: it would become {canonical}")]
    Changed {
        /// The canonical form it would be stored and shown as.
        canonical: String,
    },
    /// An integer of magnitude over [`SAFE_INTEGER_MAX`] (2^53 itself
    /// included) whose canonical form is written as an integer (below 1e21,
    /// or written as an integer): a reader cannot tell it from its
    /// neighbours, which the same double stands for.
    #[error("is an integer beyond ±9007199254740991 (2^53 - 1), which a double cannot hold exactly")]
    UnsafeInteger,
}

impl CanonicalJsonError {
    /// The JSON Pointer (RFC 6901) of what an I-JSON refusal names; `None`
    /// for a syntax error (which names a byte offset) and too-deep nesting.
    #[must_use]
    pub fn pointer(&self) -> Option<&str> {
        match self {
            CanonicalJsonError::InexactNumber { pointer, .. }
            | CanonicalJsonError::DuplicateKey { pointer }
            | CanonicalJsonError::LoneSurrogate { pointer, .. } => Some(pointer),
            _ => None,
        }
    }

    /// Prefixes the pointer with one more reference token (an array index
    /// or an escaped key), as the error leaves the container holding it.
    fn within(mut self, token: &str) -> CanonicalJsonError {
        if let CanonicalJsonError::InexactNumber { pointer, .. }
        | CanonicalJsonError::DuplicateKey { pointer }
        | CanonicalJsonError::LoneSurrogate { pointer, .. } = &mut self
        {
            pointer.insert_str(0, token);
            pointer.insert(0, '/');
        }
        self
    }
}

/// The message a refusal of `field` (`input`, `output`, `payload`) carries;
/// the cluster and the client SDK both build it here, so they say the same.
#[must_use]
pub fn refusal(field: &str, error: &CanonicalJsonError) -> String {
    match error.pointer() {
        Some(_) => format!("{field} is not I-JSON (RFC 7493): {error}"),
        None => format!("{field} is not valid JSON: {error}"),
    }
}

/// Where a refusal points: the pointer, shortened to
/// [`POINTER_QUOTED_CHARS_MAX`] characters, or "the top level" for the
/// empty pointer (the whole text).
fn location(pointer: &str) -> String {
    if pointer.is_empty() {
        return "the top level".to_string();
    }
    shortened(pointer, POINTER_QUOTED_CHARS_MAX)
}

/// `text`, or its first `chars_max` characters followed by `…`.
fn shortened(text: &str, chars_max: usize) -> String {
    match text.char_indices().nth(chars_max) {
        Some((end, _)) => format!("{}…", text.get(..end).unwrap_or(text)),
        None => text.to_string(),
    }
}

/// Escapes an object key as a JSON Pointer reference token: `~` as `~0`,
/// `/` as `~1` (RFC 6901 §3).
fn pointer_token(key: &[u16]) -> String {
    String::from_utf16_lossy(key).replace('~', "~0").replace('/', "~1")
}

/// Checks that `text` is I-JSON and returns its RFC 8785 canonical form, the
/// one ECMAScript `JSON.parse` and a JCS serializer would give.
///
/// The text must be one JSON value (any type, including a bare scalar),
/// optionally surrounded by space, tab, LF or CR, nested at most
/// [`JSON_DEPTH_MAX`] levels. The output sorts object keys by UTF-16 code
/// units, has no whitespace, and writes numbers and strings as
/// `JSON.stringify` does; every number in it is the number its literal
/// wrote.
///
/// # Errors
///
/// Returns a [`CanonicalJsonError`] when the text is not strict RFC 8259 JSON
/// (the same texts `JSON.parse` rejects), nests deeper than
/// [`JSON_DEPTH_MAX`], or is not I-JSON: a number a double cannot hold
/// exactly, a duplicated key or a lone surrogate, named by its JSON Pointer.
pub fn canonicalize(text: &str) -> Result<String, CanonicalJsonError> {
    canonicalize_within(text, JSON_DEPTH_MAX)
}

/// [`canonicalize`] with another nesting limit than [`JSON_DEPTH_MAX`]: for
/// a document Gavel builds around a value that was canonicalized within
/// that limit (an approval's terms hold its input a few levels down), so
/// that the document's canonical form exists for every accepted value.
///
/// # Errors
///
/// As [`canonicalize`], with `depth_max` for the nesting limit.
pub fn canonicalize_within(text: &str, depth_max: usize) -> Result<String, CanonicalJsonError> {
    let mut parser = Parser {
        text,
        bytes: text.as_bytes(),
        pos: 0,
        // Every UTF-8 byte of the text yields at most one UTF-16 unit, so
        // this capacity is never exceeded and the buffer never reallocates.
        units: Vec::with_capacity(text.len()),
        depth_max,
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
pub fn lower_hex(bytes: &[u8]) -> String {
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
    /// The deepest nesting accepted.
    depth_max: usize,
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
    /// to the nearest `f64` exactly like `JSON.parse`; refused when a double
    /// cannot hold it exactly ([`exactness`]).
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
        let literal = self.text.get(start..self.pos).unwrap_or_default();
        exactness(literal, number).map_err(|problem| CanonicalJsonError::InexactNumber {
            pointer: String::new(),
            literal: shortened(literal, LITERAL_QUOTED_CHARS_MAX),
            problem,
        })?;
        Ok(Value::Number(number))
    }

    /// Parses string contents after the opening quote into the UTF-16 buffer;
    /// refuses a lone surrogate (only a `\u` escape can write one: the text
    /// itself is UTF-8).
    fn parse_string(&mut self) -> Result<Span, CanonicalJsonError> {
        let start = self.units.len();
        let mut surrogate_escaped = false;
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
                    let span = Span { start, end: self.units.len() };
                    if surrogate_escaped {
                        check_surrogates(span.units(&self.units))?;
                    }
                    return Ok(span);
                }
                Some(b'\\') => {
                    let unit = self.parse_escape()?;
                    surrogate_escaped |= (0xd800..=0xdfff).contains(&unit);
                    self.units.push(unit);
                }
                Some(_) => return Err(self.syntax("unescaped control character in string")),
            }
        }
    }

    /// Parses one escape starting at the backslash. A `\uXXXX` escape yields
    /// one code unit as-is, so surrogate pairs written as two escapes join
    /// up in the buffer, as in `JSON.parse`; [`Parser::parse_string`] then
    /// refuses a surrogate left without its other half.
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
        if depth > self.depth_max {
            return Err(CanonicalJsonError::TooDeep { depth_max: self.depth_max });
        }
        self.pos += 1; // '['
        let mut items = Vec::new();
        self.skip_whitespace();
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(Value::Array(items));
        }
        loop {
            let index = items.len();
            items.push(self.parse_value(depth).map_err(|error| error.within(&index.to_string()))?);
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
        if depth > self.depth_max {
            return Err(CanonicalJsonError::TooDeep { depth_max: self.depth_max });
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
            let key = self.parse_string().map_err(|error| match error {
                CanonicalJsonError::LoneSurrogate { pointer, escape, .. } => {
                    CanonicalJsonError::LoneSurrogate { pointer, in_key: true, escape }
                }
                other => other,
            })?;
            self.skip_whitespace();
            match self.peek() {
                Some(b':') => self.pos += 1,
                None => return Err(self.end()),
                Some(_) => return Err(self.syntax("expected ':' after key")),
            }
            let value =
                self.parse_value(depth).map_err(|error| error.within(&pointer_token(key.units(&self.units))))?;
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
        sort_members(&mut members, &self.units)?;
        Ok(Value::Object(members))
    }
}

/// Sorts members by key in UTF-16 code unit order (what JCS and ECMAScript's
/// default `Array.prototype.sort` use); refuses a key that appears twice,
/// which sorting puts next to each other.
fn sort_members(members: &mut [Member], units: &[u16]) -> Result<(), CanonicalJsonError> {
    members.sort_by(|a, b| a.key.units(units).cmp(b.key.units(units)));
    match members.windows(2).find(|pair| pair[0].key.units(units) == pair[1].key.units(units)) {
        Some(pair) => {
            Err(CanonicalJsonError::DuplicateKey { pointer: format!("/{}", pointer_token(pair[0].key.units(units))) })
        }
        None => Ok(()),
    }
}

/// Refuses a surrogate code unit that is not half of a pair.
fn check_surrogates(units: &[u16]) -> Result<(), CanonicalJsonError> {
    match char::decode_utf16(units.iter().copied()).find_map(Result::err) {
        Some(lone) => Err(CanonicalJsonError::LoneSurrogate {
            pointer: String::new(),
            in_key: false,
            escape: format!("\\u{:04x}", lone.unpaired_surrogate()),
        }),
        None => Ok(()),
    }
}

/// Whether a double holds the number `literal` writes exactly; `number` is
/// the nearest double, as `JSON.parse` rounds it (see the crate's doc for
/// the rule).
fn exactness(literal: &str, number: f64) -> Result<(), NumberProblem> {
    if !number.is_finite() {
        return Err(NumberProblem::OutOfRange);
    }
    let integer_literal = !literal.contains(['.', 'e', 'E']);
    // Fast path for the common case: no exponent and at most 15 digits. Such
    // a literal is far inside the normal range and far below 2^53, and any
    // two numbers of at most 15 significant digits are further apart than
    // two neighbouring doubles (10^15 < 2^53), so the shortest literal of
    // the nearest double is this very number.
    if !literal.contains(['e', 'E']) && literal.bytes().filter(u8::is_ascii_digit).count() <= 15 {
        return Ok(());
    }
    let mut buffer = ryu_js::Buffer::new();
    let canonical = if number == 0.0 { "0" } else { buffer.format_finite(number) };
    if !Decimal::of(literal).same_number(&Decimal::of(canonical)) {
        return Err(NumberProblem::Changed { canonical: canonical.to_string() });
    }
    // Every double over 2^53 - 1 is an integer. From 1e21 on JCS writes it
    // in exponent form, which every reader takes for a double; below, it is
    // a string of digits that a reader with 64-bit integers takes for an
    // integer its neighbours' literals would have written as well.
    let magnitude = number.abs();
    if magnitude > SAFE_INTEGER_MAX as f64 && (integer_literal || magnitude < 1e21) {
        return Err(NumberProblem::UnsafeInteger);
    }
    Ok(())
}

/// The exact value of a JSON number literal (or of a canonical one, which
/// may write `e+`), read in place: `0.DIGITS × 10^point`, where DIGITS are
/// the literal's digits without leading and trailing zeros, so that two
/// literals of the same number compare equal ([`Decimal::same_number`]).
struct Decimal<'a> {
    negative: bool,
    integer: &'a [u8],
    fraction: &'a [u8],
    /// Zeros before the first nonzero digit (of integer and fraction together).
    leading_zeros: usize,
    /// Digits from the first to the last nonzero one; zero for the number 0.
    significant: usize,
    point: i64,
}

impl<'a> Decimal<'a> {
    /// Exponents are clamped far beyond any that a finite, nonzero double
    /// can carry with a text's digits, so the arithmetic cannot overflow.
    const EXPONENT_CLAMP: i64 = 1 << 40;

    fn of(literal: &'a str) -> Decimal<'a> {
        let (negative, unsigned) = match literal.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, literal),
        };
        let (mantissa, exponent) = match unsigned.split_once(['e', 'E']) {
            Some((mantissa, exponent)) => (mantissa, Decimal::exponent(exponent)),
            None => (unsigned, 0),
        };
        let (integer, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        let (integer, fraction) = (integer.as_bytes(), fraction.as_bytes());
        let digits = || integer.iter().chain(fraction);
        let leading_zeros = digits().take_while(|digit| **digit == b'0').count();
        let trailing_zeros = digits().rev().take_while(|digit| **digit == b'0').count();
        let significant = (integer.len() + fraction.len()).saturating_sub(leading_zeros + trailing_zeros);
        let point = i64::try_from(integer.len())
            .unwrap_or(i64::MAX)
            .saturating_sub(i64::try_from(leading_zeros).unwrap_or(i64::MAX))
            .saturating_add(exponent);
        Decimal { negative, integer, fraction, leading_zeros, significant, point }
    }

    /// Whether the two literals write the same number (`-0` is `0`).
    fn same_number(&self, other: &Decimal<'_>) -> bool {
        if self.significant == 0 || other.significant == 0 {
            return self.significant == other.significant;
        }
        self.negative == other.negative
            && self.point == other.point
            && self.significant == other.significant
            && self.digits().eq(other.digits())
    }

    /// The significant digits.
    fn digits(&self) -> impl Iterator<Item = &'a u8> + 'a {
        let (integer, fraction) = (self.integer, self.fraction);
        integer.iter().chain(fraction).skip(self.leading_zeros).take(self.significant)
    }

    /// `[+-]?[0-9]+`, clamped to ±[`Decimal::EXPONENT_CLAMP`].
    fn exponent(text: &str) -> i64 {
        let (negative, digits) = match text.as_bytes().first() {
            Some(b'-') => (true, text.get(1..).unwrap_or_default()),
            Some(b'+') => (false, text.get(1..).unwrap_or_default()),
            _ => (false, text),
        };
        let magnitude = digits
            .bytes()
            .fold(0i64, |value, digit| value.saturating_mul(10).saturating_add(i64::from(digit.wrapping_sub(b'0'))))
            .min(Decimal::EXPONENT_CLAMP);
        if negative {
            -magnitude
        } else {
            magnitude
        }
    }
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
                Ok(c) => push_string_char(out, c),
                // The parser refuses lone surrogates; writing one as an
                // escape, as `JSON.stringify` does, keeps this total.
                Err(lone) => push_unicode_escape(out, lone.unpaired_surrogate()),
            }
        }
        out.push('"');
    }
}

/// Appends `text` as a JSON string the way RFC 8785 writes one
/// (`JSON.stringify`'s escapes): for code that writes canonical JSON
/// without parsing it first, such as the terms of an approval.
pub fn push_canonical_string(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        push_string_char(out, c);
    }
    out.push('"');
}

/// Appends `number` the way RFC 8785 writes it: its digits. Canonical JSON
/// holds no integer above [`SAFE_INTEGER_MAX`] (the parser refuses one), so
/// neither does this: a larger `number` is the caller's bug, and panics.
pub fn push_canonical_integer(out: &mut String, number: u64) {
    assert!(number <= SAFE_INTEGER_MAX, "{number} is past the largest integer canonical JSON holds exactly");
    // Writing to a String cannot fail.
    let _ = std::fmt::Write::write_fmt(out, format_args!("{number}"));
}

/// One character of a string, escaped as `JSON.stringify` escapes it.
fn push_string_char(out: &mut String, c: char) {
    match c {
        '"' => out.push_str("\\\""),
        '\\' => out.push_str("\\\\"),
        '\u{8}' => out.push_str("\\b"),
        '\u{c}' => out.push_str("\\f"),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        c if c < '\u{20}' => push_unicode_escape(out, c as u16),
        c => out.push(c),
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
