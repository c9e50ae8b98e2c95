//! The one error catalogue ([`ErrorCode`], docs/decisions.md, "One error
//! catalogue"): every variant is in [`ErrorCode::ALL`] at its bincode index,
//! the lists made from it (the TypeScript client's `codes.ts`, the Python
//! client's `codes.py`, the table in docs/api.md) are what it renders now,
//! and the product crates name no code-like string it does not hold.
//!
//! After changing the catalogue, write the lists again with
//! `GAVEL_WRITE_CODES=1 cargo test --offline --manifest-path
//! crates/gavel-core/Cargo.toml --test error_catalogue` and review the diff.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use gavel_core::{ErrorClass, ErrorCode};

/// The repository root (this package is `crates/gavel-core`).
const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

/// The variable that makes the drift check write the lists instead of
/// comparing them.
const WRITE_VARIABLE: &str = "GAVEL_WRITE_CODES";

/// The command that writes the lists again, for the failure messages.
const WRITE_COMMAND: &str =
    "GAVEL_WRITE_CODES=1 cargo test --offline --manifest-path crates/gavel-core/Cargo.toml --test error_catalogue";

/// The variant's declaration index. The match has no wildcard, so a new
/// variant does not compile until it is given the next index here, and the
/// test below then fails until [`ErrorCode::ALL`] lists it there.
fn declared_index(code: ErrorCode) -> usize {
    match code {
        ErrorCode::InvalidArgument => 0,
        ErrorCode::NotFound => 1,
        ErrorCode::AlreadyExists => 2,
        ErrorCode::FailedPrecondition => 3,
        ErrorCode::CapabilityNotFound => 4,
        ErrorCode::CapabilityInvalid => 5,
        ErrorCode::InputInvalid => 6,
        ErrorCode::Unauthenticated => 7,
        ErrorCode::PermissionDenied => 8,
        ErrorCode::ApprovalSelfApproval => 9,
        ErrorCode::ApprovalPending => 10,
        ErrorCode::ApprovalRejected => 11,
        ErrorCode::ApprovalCancelled => 12,
        ErrorCode::ApprovalExpired => 13,
        ErrorCode::ApprovalConsumed => 14,
        ErrorCode::ApprovalInputMismatch => 15,
        ErrorCode::LeaseLost => 16,
        ErrorCode::ExecutionFinal => 17,
        ErrorCode::RequestIdReused => 18,
        ErrorCode::QuotaExceeded => 19,
        ErrorCode::ApprovalVoided => 20,
        ErrorCode::ApprovalDecided => 21,
        ErrorCode::VoteDuplicate => 22,
        ErrorCode::PolicyConflict => 23,
        ErrorCode::ApprovalTermsChanged => 24,
        ErrorCode::ApprovalStandingForbidden => 25,
        ErrorCode::Unavailable => 26,
        ErrorCode::OutOfRange => 27,
        ErrorCode::ResourceExhausted => 28,
        ErrorCode::Internal => 29,
        ErrorCode::LastVoter => 30,
        ErrorCode::BackupRunning => 31,
        ErrorCode::SnapshotTooLarge => 32,
        ErrorCode::Config => 33,
        ErrorCode::SessionRequired => 34,
        ErrorCode::CsrfTokenInvalid => 35,
        ErrorCode::OriginRefused => 36,
        ErrorCode::ApprovalIdMismatch => 37,
        ErrorCode::DevSignInDisabled => 38,
        ErrorCode::OidcSignInDisabled => 39,
        ErrorCode::OidcStateInvalid => 40,
        ErrorCode::OidcSignInRefused => 41,
        ErrorCode::OidcPrincipalMismatch => 42,
        ErrorCode::OidcTokenMalformed => 43,
        ErrorCode::OidcAlgorithmRefused => 44,
        ErrorCode::OidcUnknownKey => 45,
        ErrorCode::OidcKeyMismatch => 46,
        ErrorCode::OidcBadSignature => 47,
        ErrorCode::OidcWrongIssuer => 48,
        ErrorCode::OidcWrongAudience => 49,
        ErrorCode::OidcTokenExpired => 50,
        ErrorCode::OidcTokenNotYetValid => 51,
        ErrorCode::OidcTokenIssuedInFuture => 52,
        ErrorCode::OidcTokenLifetimeTooLong => 53,
        ErrorCode::OidcClaimMissing => 54,
        ErrorCode::OidcNonceMismatch => 55,
        ErrorCode::OidcEmailNotVerified => 56,
        ErrorCode::OidcBadPrincipal => 57,
        ErrorCode::OidcProviderUnavailable => 58,
        ErrorCode::OidcSettings => 59,
        ErrorCode::NotifyConfig => 60,
        ErrorCode::NotifyStateIo => 61,
        ErrorCode::NotifyStateCorrupt => 62,
        ErrorCode::NotifyStateLocked => 63,
        ErrorCode::NotifyListingTooLarge => 64,
        ErrorCode::NotifyCursorDropped => 65,
        ErrorCode::NotifyPostRefused => 66,
        ErrorCode::NotifyPostAbandoned => 67,
        ErrorCode::NotAMember => 68,
        ErrorCode::BackupCorrupt => 69,
        ErrorCode::DataDirNotEmpty => 70,
        ErrorCode::AuditVerificationFailed => 71,
        ErrorCode::NotifyQueueFull => 72,
        ErrorCode::PageSizeInvalid => 73,
        ErrorCode::PageTokenInvalid => 74,
        ErrorCode::AuditExportFormatUnknown => 75,
        ErrorCode::AuditCheckpointUnsigned => 76,
    }
}

/// The highest index [`declared_index`] gives.
const LAST_INDEX: usize = 76;

#[test]
fn every_code_is_listed_in_all_at_its_bincode_index() {
    assert_eq!(ErrorCode::ALL.len(), LAST_INDEX + 1, "ErrorCode::ALL lists every variant once");
    for (index, code) in ErrorCode::ALL.iter().enumerate() {
        assert_eq!(declared_index(*code), index, "{code:?} is listed at {index}");
        // Stored replies carry the variant index: it never moves.
        let stored = bincode::serialize(code).expect("bincode");
        assert_eq!(stored, u32::try_from(index).expect("small").to_le_bytes(), "{code:?}");
        assert_eq!(bincode::deserialize::<ErrorCode>(&stored).expect("bincode back"), *code);
    }
}

#[test]
fn every_wire_string_is_unique_upper_snake_case_and_looks_up_its_code() {
    let mut seen = BTreeSet::new();
    for code in ErrorCode::ALL {
        let wire = code.as_str();
        assert!(seen.insert(wire), "{wire} is the wire string of two codes");
        assert!(is_code_like(wire) || wire.bytes().all(|byte| byte.is_ascii_uppercase()), "{wire}");
        assert_eq!(ErrorCode::from_wire(wire), Some(*code));
        assert_eq!(code.to_string(), wire);
        let description = code.description();
        assert!(!description.is_empty() && !description.ends_with('.'), "{wire}: {description:?}");
        assert!(!description.contains('\n') && description.len() <= 80, "{wire}: one short line: {description:?}");
    }
    assert_eq!(ErrorCode::from_wire("NO_SUCH_CODE"), None);
    assert_eq!(ErrorCode::from_wire("lease_lost"), None);
    // The wire strings the tests of the edge pin, looked up both ways.
    assert_eq!(ErrorCode::from_wire("LEASE_LOST"), Some(ErrorCode::LeaseLost));
    assert_eq!(ErrorCode::LastVoter.class(), ErrorClass::FailedPrecondition);
    assert_eq!(ErrorCode::BackupRunning.class(), ErrorClass::ResourceExhausted);
    assert_eq!(ErrorCode::OutOfRange.class(), ErrorClass::OutOfRange);
    assert_eq!(ErrorCode::Unavailable.class().as_str(), "UNAVAILABLE");
}

/// Whether `text` looks like a code: upper-case words joined by `_`
/// (`LEASE_LOST`); a single word (`CONFIG`) does not.
fn is_code_like(text: &str) -> bool {
    text.starts_with(|character: char| character.is_ascii_uppercase())
        && text.contains('_')
        && text
            .split('_')
            .all(|word| !word.is_empty() && word.bytes().all(|byte| byte.is_ascii_uppercase() || byte.is_ascii_digit()))
}

// ----- the generated lists -----

/// The header every generated list starts with, as comment lines after `prefix`.
fn generated_notice(prefix: &str) -> String {
    [
        "Generated from the catalogue in crates/gavel-core/src/error.rs by",
        "crates/gavel-core/tests/error_catalogue.rs; do not edit. After changing",
        "the catalogue, write it again with",
        &format!("`{WRITE_COMMAND}`."),
    ]
    .iter()
    .map(|line| format!("{prefix}{line}\n"))
    .collect()
}

/// `text` as a double-quoted string literal, valid in TypeScript and Python.
fn quoted(text: &str) -> String {
    serde_json::to_string(text).expect("a string serializes")
}

/// The gRPC classes the codes use, in the order they first appear.
fn classes() -> Vec<&'static str> {
    let mut classes: Vec<&'static str> = Vec::new();
    for code in ErrorCode::ALL {
        if !classes.contains(&code.class().as_str()) {
            classes.push(code.class().as_str());
        }
    }
    classes
}

/// clients/typescript/packages/client/src/codes.ts as the catalogue makes it.
fn typescript() -> String {
    let mut text = String::new();
    text.push_str("// Gavel's stable codes: every code a node, the console, the notifier, the\n");
    text.push_str("// `gavel` CLI or an SDK refuses with, the gRPC status class it belongs to and\n");
    text.push_str("// one line saying when it happens. `GavelError.code` is one of them (or a code\n");
    text.push_str("// newer than this package: act on the gRPC status code then).\n//\n");
    text.push_str(&generated_notice("// "));
    text.push_str("\n/** Every code of the catalogue. */\nexport type GavelCode =\n");
    for code in ErrorCode::ALL {
        text.push_str(&format!("  | {}\n", quoted(code.as_str())));
    }
    text.truncate(text.len() - 1);
    text.push_str(";\n\n/** The gRPC status code (its canonical name) a refusal with a code carries, or would. */\n");
    text.push_str("export type GavelCodeClass =\n");
    for class in classes() {
        text.push_str(&format!("  | {}\n", quoted(class)));
    }
    text.truncate(text.len() - 1);
    text.push_str(";\n\n/** What a code means. */\nexport interface GavelCodeInfo {\n");
    text.push_str("  /** The gRPC status class of the code. */\n  readonly class: GavelCodeClass;\n");
    text.push_str("  /** When a refusal carries the code, for a person. */\n  readonly description: string;\n}\n\n");
    text.push_str("/** Every code with its class and description, in the catalogue's order. */\n");
    text.push_str("export const GAVEL_CODES: { readonly [code in GavelCode]: GavelCodeInfo } = {\n");
    for code in ErrorCode::ALL {
        text.push_str(&format!(
            "  {}: {{ class: {}, description: {} }},\n",
            code.as_str(),
            quoted(code.class().as_str()),
            quoted(code.description())
        ));
    }
    text.push_str("};\n\n/** Whether `code` (a `GavelError.code`, say) is one of the catalogue's. */\n");
    text.push_str("export function isGavelCode(code: string): code is GavelCode {\n");
    text.push_str("  return Object.prototype.hasOwnProperty.call(GAVEL_CODES, code);\n}\n");
    text
}

/// clients/python/src/gavel/codes.py as the catalogue makes it.
fn python() -> String {
    let mut text = String::new();
    text.push_str("\"\"\"Gavel's stable codes: every code a node, the console, the notifier, the\n");
    text.push_str("``gavel`` CLI or an SDK refuses with, the gRPC status class it belongs to and\n");
    text.push_str("one line saying when it happens. ``GavelError.code`` is one of them (or a code\n");
    text.push_str("newer than this package: act on the gRPC status code then).\n\n");
    text.push_str(&generated_notice("").replace('`', "``"));
    text.push_str("\"\"\"\n\nfrom __future__ import annotations\n\n");
    text.push_str("from collections.abc import Mapping\nfrom typing import Final, Literal, NamedTuple\n\n");
    text.push_str("#: Every code of the catalogue.\nGavelCode = Literal[\n");
    for code in ErrorCode::ALL {
        text.push_str(&format!("    {},\n", quoted(code.as_str())));
    }
    text.push_str("]\n\n\nclass CodeInfo(NamedTuple):\n    \"\"\"What a code means.\"\"\"\n\n");
    text.push_str("    #: The gRPC status code (its canonical name) a refusal with the code carries, or would.\n");
    text.push_str(
        "    grpc_class: str\n    #: When a refusal carries the code, for a person.\n    description: str\n\n\n",
    );
    for code in ErrorCode::ALL {
        text.push_str(&format!("{}: Final = {}\n", code.as_str(), quoted(code.as_str())));
    }
    text.push_str("\n#: Every code with its class and description, in the catalogue's order.\n");
    text.push_str("CODES: Final[Mapping[GavelCode, CodeInfo]] = {\n");
    for code in ErrorCode::ALL {
        text.push_str(&format!(
            "    {}: CodeInfo(\n        {},\n        {},\n    ),\n",
            code.as_str(),
            quoted(code.class().as_str()),
            quoted(code.description())
        ));
    }
    text.push_str("}\n\n#: Every code of the catalogue, to test a ``GavelError.code`` against.\n");
    text.push_str("ALL_CODES: Final[frozenset[GavelCode]] = frozenset(CODES)\n");
    text
}

/// The marker lines around the generated table in docs/api.md.
const API_TABLE_BEGIN: &str = "<!-- codes:begin (generated by crates/gavel-core/tests/error_catalogue.rs) -->";
const API_TABLE_END: &str = "<!-- codes:end -->";

/// The table of every code in docs/api.md, between its markers.
fn api_table() -> String {
    let mut text = String::from("| Code | gRPC class | When |\n|---|---|---|\n");
    for code in ErrorCode::ALL {
        text.push_str(&format!("| `{}` | `{}` | {} |\n", code.as_str(), code.class().as_str(), code.description()));
    }
    text
}

/// `document` with the text between its marker lines replaced by `table`.
fn with_api_table(document: &str, table: &str) -> Result<String, String> {
    let begin = document.find(API_TABLE_BEGIN).ok_or("docs/api.md has no codes:begin marker")?;
    let after_begin = begin + API_TABLE_BEGIN.len() + 1;
    let end = document[after_begin..].find(API_TABLE_END).ok_or("docs/api.md has no codes:end marker")? + after_begin;
    Ok(format!("{}{}{}", &document[..after_begin], table, &document[end..]))
}

/// Compares `path` (relative to the root) with `expected`, or writes it
/// when [`WRITE_VARIABLE`] is set; returns the problem found, if any.
fn check_or_write(path: &str, expected: &str) -> Option<String> {
    let file = Path::new(ROOT).join(path);
    if std::env::var(WRITE_VARIABLE).is_ok_and(|value| value == "1") {
        std::fs::write(&file, expected).unwrap_or_else(|error| panic!("write {path}: {error}"));
        return None;
    }
    let committed = std::fs::read_to_string(&file).unwrap_or_default();
    if committed == expected {
        return None;
    }
    let line = committed.lines().zip(expected.lines()).position(|(left, right)| left != right);
    let line = line.unwrap_or_else(|| committed.lines().count().min(expected.lines().count())) + 1;
    Some(format!("{path} differs from the catalogue from line {line} on"))
}

#[test]
fn the_typescript_python_and_docs_lists_are_the_catalogue() {
    let api_path = Path::new(ROOT).join("docs/api.md");
    let api = std::fs::read_to_string(&api_path).expect("read docs/api.md");
    let api_expected = with_api_table(&api, &api_table()).unwrap_or_else(|problem| panic!("{problem}"));
    let problems: Vec<String> = [
        check_or_write("clients/typescript/packages/client/src/codes.ts", &typescript()),
        check_or_write("clients/python/src/gavel/codes.py", &python()),
        check_or_write("docs/api.md", &api_expected),
    ]
    .into_iter()
    .flatten()
    .collect();
    assert!(problems.is_empty(), "{}; write the lists again with `{WRITE_COMMAND}`", problems.join("; "));
}

// ----- the product's sources -----

/// The crates whose sources may only name codes of the catalogue. The
/// console, the notifier, the OpenID verifier and the SDK may not depend on
/// gavel-core (crates/gavel-server/tests/dependencies.rs), so their codes
/// are literals; this scan is what keeps those literals in the catalogue.
const SCANNED_CRATES: &[&str] =
    &["gavel-server", "gavel-console", "gavel-oidc", "gavel-notify", "gavel-cli", "gavel-client"];

/// Code-like strings of those crates that are not codes a refusal carries.
const NOT_CODES: &[(&str, &str)] = &[
    ("DEADLINE_EXCEEDED", "a gRPC status name (the metrics' code label)"),
    ("DATA_LOSS", "a gRPC status name (the metrics' code label)"),
    ("OUT_DIR", "Cargo's build output variable"),
    ("OUTPUT_INVALID", "an attempt's failure code the SDK worker reports: an execution's result, not a refusal"),
];

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|error| panic!("read {}: {error}", dir.display())) {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|extension| extension == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// The string literals of Rust `source` outside comments, each with its
/// 1-based line. A small lexer: line and block comments, `"..."` with
/// escapes, raw strings `r#"..."#`, and char literals (so `'"'` opens no
/// string); lifetimes are told from chars by the quote two characters on.
fn string_literals(source: &str) -> Vec<(usize, String)> {
    let chars: Vec<char> = source.chars().collect();
    let mut literals = Vec::new();
    let mut line = 1;
    let mut index = 0;
    while index < chars.len() {
        let character = chars[index];
        let next = chars.get(index + 1).copied();
        if character == '\n' {
            line += 1;
            index += 1;
        } else if character == '/' && next == Some('/') {
            while index < chars.len() && chars[index] != '\n' {
                index += 1;
            }
        } else if character == '/' && next == Some('*') {
            index += 2;
            while index < chars.len() && !(chars[index] == '*' && chars.get(index + 1) == Some(&'/')) {
                line += usize::from(chars[index] == '\n');
                index += 1;
            }
            index += 2;
        } else if character == '\'' {
            if next == Some('\\') {
                index += 2;
                while index < chars.len() && chars[index] != '\'' {
                    index += 1;
                }
                index += 1;
            } else if chars.get(index + 2) == Some(&'\'') {
                index += 3;
            } else {
                index += 1;
            }
        } else if character == 'r'
            && (next == Some('"') || next == Some('#'))
            && !is_identifier_char(chars.get(index.wrapping_sub(1)))
        {
            let mut hashes = 0;
            let mut cursor = index + 1;
            while chars.get(cursor) == Some(&'#') {
                hashes += 1;
                cursor += 1;
            }
            if chars.get(cursor) != Some(&'"') {
                index += 1;
                continue;
            }
            let start_line = line;
            let mut text = String::new();
            cursor += 1;
            while cursor < chars.len() {
                if chars[cursor] == '"' && (1..=hashes).all(|offset| chars.get(cursor + offset) == Some(&'#')) {
                    break;
                }
                line += usize::from(chars[cursor] == '\n');
                text.push(chars[cursor]);
                cursor += 1;
            }
            literals.push((start_line, text));
            index = cursor + 1 + hashes;
        } else if character == '"' {
            let start_line = line;
            let mut text = String::new();
            index += 1;
            while index < chars.len() && chars[index] != '"' {
                if chars[index] == '\\' {
                    text.push(chars[index]);
                    index += 1;
                }
                if let Some(&escaped) = chars.get(index) {
                    line += usize::from(escaped == '\n');
                    text.push(escaped);
                }
                index += 1;
            }
            literals.push((start_line, text));
            index += 1;
        } else {
            index += 1;
        }
    }
    literals
}

/// Whether `character` can be part of an identifier (so an `r` after it is
/// not a raw string's prefix).
fn is_identifier_char(character: Option<&char>) -> bool {
    character.is_some_and(|character| character.is_alphanumeric() || *character == '_')
}

/// `source` up to its test module: the codes of tests are test data (a
/// made-up code, a peer's answer), which the catalogue need not hold.
fn without_tests(source: &str) -> &str {
    let mut offset = 0;
    let mut lines = source.split_inclusive('\n').peekable();
    while let Some(line) = lines.next() {
        if line.trim() == "#[cfg(test)]" {
            let item = lines.peek().map(|next| next.trim_start()).unwrap_or_default();
            if item.starts_with("mod ") || item.starts_with("pub mod ") || item.starts_with("pub(crate) mod ") {
                return &source[..offset];
            }
        }
        offset += line.len();
    }
    source
}

#[test]
fn the_product_crates_name_no_code_outside_the_catalogue() {
    let known: BTreeSet<&str> = ErrorCode::ALL.iter().map(|code| code.as_str()).collect();
    let mut scanned_files = 0;
    let mut codes_seen = 0;
    let mut strays = Vec::new();
    for crate_name in SCANNED_CRATES {
        let root = Path::new(ROOT).join("crates").join(crate_name);
        for file in rust_files(&root.join("src")) {
            // A module of tests in a file of its own.
            if file.file_name().is_some_and(|name| name == "tests.rs") {
                continue;
            }
            let source = std::fs::read_to_string(&file).expect("read a source file");
            let lines: Vec<&str> = source.lines().collect();
            scanned_files += 1;
            for (line, literal) in string_literals(without_tests(&source)) {
                if !is_code_like(&literal) {
                    continue;
                }
                // Environment variables and the CLI's placeholders and
                // column headers are names, not codes.
                let text = lines.get(line - 1).copied().unwrap_or_default();
                if literal.starts_with("GAVEL_")
                    || literal.starts_with("CARGO_")
                    || text.contains("value_name")
                    || text.contains("Table::new(")
                {
                    continue;
                }
                if known.contains(literal.as_str()) {
                    codes_seen += 1;
                } else if !NOT_CODES.iter().any(|(name, _)| *name == literal) {
                    let relative = file.strip_prefix(ROOT).unwrap_or(&file).display().to_string();
                    strays.push(format!("{relative}:{line}: {literal}"));
                }
            }
        }
    }
    // The scan reads what it claims to: the crates' files and their codes.
    assert!(scanned_files > 50 && codes_seen > 20, "{scanned_files} files, {codes_seen} codes");
    assert!(
        strays.is_empty(),
        "code-like strings that are not in gavel-core's ErrorCode (add the code to the catalogue, or, if it is not \
         a code, to NOT_CODES in this test with the reason):\n  {}",
        strays.join("\n  ")
    );
}

#[test]
fn the_source_scan_finds_literals_and_skips_comments_chars_and_tests() {
    let source = concat!(
        "// \"IN_A_COMMENT\"\n",
        "/* \"IN_A_BLOCK\" */ let quote = '\"';\n",
        "fn code() -> &'static str { \"A_CODE\" }\n",
        "let raw = r#\"RAW_CODE\"#; let escaped = \"say \\\"HI_THERE\\\"\";\n",
        "#[cfg(test)]\nmod tests { const FAKE: &str = \"MADE_UP\"; }\n",
    );
    let found: Vec<(usize, String)> = string_literals(without_tests(source));
    let codes: Vec<(usize, &str)> =
        found.iter().filter(|(_, text)| is_code_like(text)).map(|(line, text)| (*line, text.as_str())).collect();
    assert_eq!(codes, vec![(3, "A_CODE"), (4, "RAW_CODE")]);
    assert!(found.iter().any(|(line, text)| *line == 4 && text.contains("HI_THERE")), "{found:?}");
    assert!(is_code_like("LEASE_LOST") && is_code_like("OIDC_TOKEN_NOT_YET_VALID"));
    assert!(!is_code_like("CONFIG") && !is_code_like("lease_lost") && !is_code_like("_X") && !is_code_like("X__Y"));
}
