//! Input checks shared by every command: ids, text, lists, actors, JSON.
//!
//! The gRPC edge runs the same checks before proposing, so nothing malformed
//! reaches the log; the state machine runs them again because it must never
//! trust its input.

use crate::canonical_json;
use crate::error::{DomainError, ErrorCode};
use std::collections::BTreeMap;

use crate::access::PrincipalKind;
use crate::limits::{
    ATTRIBUTES_MAX, ATTRIBUTE_KEY_BYTES_MAX, ATTRIBUTE_VALUE_BYTES_MAX, ID_BYTES_MAX, LIST_ITEMS_MAX, TEXT_BYTES_MAX,
    TIMESTAMP_MS_MAX,
};
use crate::model::{Actor, ActorKind};

/// Collects every problem found, so a caller learns them all at once.
#[derive(Debug, Default)]
pub struct Problems(Vec<String>);

impl Problems {
    /// An empty collection.
    pub fn new() -> Self {
        Problems(Vec::new())
    }

    /// Records a problem.
    pub fn push(&mut self, problem: String) {
        self.0.push(problem);
    }

    /// Checks a required id: non-empty, at most [`ID_BYTES_MAX`] bytes, no control characters.
    pub fn id(&mut self, field: &str, value: &str) {
        if let Err(problem) = check_id(field, value) {
            self.push(problem);
        }
    }

    /// Checks the id of a new record: [`check_record_id`].
    pub fn record_id(&mut self, field: &str, value: &str) {
        if let Err(problem) = check_record_id(field, value) {
            self.push(problem);
        }
    }

    /// Checks optional free text against [`TEXT_BYTES_MAX`].
    pub fn text(&mut self, field: &str, value: Option<&str>) {
        if let Some(value) = value {
            if value.len() > TEXT_BYTES_MAX {
                self.push(format!("{field} is {} bytes, over the limit of {TEXT_BYTES_MAX}", value.len()));
            }
        }
    }

    /// Checks a list of short strings: at most [`LIST_ITEMS_MAX`] items of at most [`TEXT_BYTES_MAX`] bytes.
    pub fn list(&mut self, field: &str, values: &[String]) {
        if values.len() > LIST_ITEMS_MAX {
            self.push(format!("{field} has {} items, over the limit of {LIST_ITEMS_MAX}", values.len()));
        }
        if values.iter().any(|value| value.len() > TEXT_BYTES_MAX) {
            self.push(format!("{field} has an item over {TEXT_BYTES_MAX} bytes"));
        }
    }

    /// Checks an attributes map: at most [`ATTRIBUTES_MAX`] entries, keys of 1
    /// to [`ATTRIBUTE_KEY_BYTES_MAX`] bytes without control characters, values
    /// of at most [`ATTRIBUTE_VALUE_BYTES_MAX`] bytes. Each bad key is named
    /// once, so a map of many bad entries yields a bounded list.
    pub fn attributes(&mut self, field: &str, attributes: &BTreeMap<String, String>) {
        if attributes.len() > ATTRIBUTES_MAX {
            self.push(format!("{field} has {} entries, over the limit of {ATTRIBUTES_MAX}", attributes.len()));
            return;
        }
        for (key, value) in attributes {
            if key.is_empty() {
                self.push(format!("{field} has an empty key"));
            } else if key.len() > ATTRIBUTE_KEY_BYTES_MAX {
                self.push(format!(
                    "{field} has a key of {} bytes, over the limit of {ATTRIBUTE_KEY_BYTES_MAX}",
                    key.len()
                ));
            } else if key.chars().any(char::is_control) {
                self.push(format!("{field} key {key:?} contains control characters"));
            } else if value.len() > ATTRIBUTE_VALUE_BYTES_MAX {
                self.push(format!(
                    "{field}[{key:?}] is {} bytes, over the limit of {ATTRIBUTE_VALUE_BYTES_MAX}",
                    value.len()
                ));
            }
        }
    }

    /// Checks an optional caller timestamp.
    pub fn timestamp(&mut self, field: &str, value: Option<u64>) {
        if let Some(value) = value {
            if value > TIMESTAMP_MS_MAX {
                self.push(format!("{field} {value} is not a Unix time in milliseconds"));
            }
        }
    }

    /// True when nothing was found.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `Ok` when empty, else one refusal with `code` listing every problem.
    pub fn into_result(self, code: ErrorCode, summary: &str) -> Result<(), DomainError> {
        if self.0.is_empty() {
            return Ok(());
        }
        let message = if self.0.len() == 1 {
            format!("{summary}: {}", self.0[0])
        } else {
            format!("{summary}: {} problems", self.0.len())
        };
        Err(DomainError::with_problems(code, message, self.0))
    }
}

/// Checks one id; the error is the problem text.
pub fn check_id(field: &str, value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Err(format!("{field} must not be empty"));
    }
    if value.len() > ID_BYTES_MAX {
        return Err(format!("{field} is {} bytes, over the limit of {ID_BYTES_MAX}", value.len()));
    }
    if value.chars().any(char::is_control) {
        return Err(format!("{field} must not contain control characters"));
    }
    Ok(())
}

/// The characters a record id may hold besides ASCII letters and digits
/// (SPEC §13, docs/guarantees.md "Ids that cannot be confused").
pub const RECORD_ID_PUNCTUATION: &str = "-_.:@+=~";

/// Checks the id of a new approval, execution or capability: [`check_id`],
/// and only ASCII letters, digits and [`RECORD_ID_PUNCTUATION`], and not `.`
/// or `..`. So an id is one path segment that needs no escaping: no `/`,
/// `%`, `?`, `#`, whitespace, control or look-alike characters, and no
/// segment a URL resolver collapses. Records stored before this rule are
/// still read, decided and cancelled under [`check_id`]
/// (`gavel approval list --unsafe-ids` lists them).
pub fn check_record_id(field: &str, value: &str) -> Result<(), String> {
    check_id(field, value)?;
    if let Some(bad) = value.chars().find(|c| !c.is_ascii_alphanumeric() && !RECORD_ID_PUNCTUATION.contains(*c)) {
        return Err(format!("{field} may hold only ASCII letters, digits and {RECORD_ID_PUNCTUATION:?}, not {bad:?}"));
    }
    if value == "." || value == ".." {
        return Err(format!("{field} must not be {value:?}"));
    }
    Ok(())
}

/// Whether an id stored under the older rule breaks [`check_record_id`].
pub fn is_unsafe_record_id(value: &str) -> bool {
    check_record_id("id", value).is_err()
}

/// Checks that an actor id names no kind of its own: `user:alice` as the id
/// of a user would be read `user:user:alice`, since an actor is written
/// `kind:id` (docs/decisions/0090). An id that starts with an actor kind
/// (`user:`, `service:`, `automation:`, `anonymous:`) or a principal kind
/// (`worker:`, `node:`) is refused, saying how to write it instead. The
/// SDKs run the same rule before sending, with the same message.
pub fn check_actor_id(field: &str, id: &str) -> Result<(), String> {
    let Some((prefix, rest)) = id.split_once(':') else {
        return Ok(());
    };
    let kind = ActorKind::ALL
        .into_iter()
        .find(|kind| kind.as_str() == prefix)
        .or_else(|| PrincipalKind::parse(prefix).map(PrincipalKind::actor_kind));
    match kind {
        Some(kind) => {
            Err(format!("{field} id {id:?} already names a kind; pass id {rest:?} with kind {}", kind.as_str()))
        }
        None => Ok(()),
    }
}

/// Checks an actor (SPEC §2): an ill-formed identity (empty, over-long or
/// control-character id, an id that names a kind ([`check_actor_id`]),
/// over-long display name) or attributes over their limits are
/// `INVALID_ARGUMENT`. An ill-formed actor is bad input, not a
/// failed authentication (issue #23; docs/decisions.md): who calls is the
/// credential's business, and only a request that names nobody on a node
/// without credentials is `UNAUTHENTICATED` (the gRPC edge decides that).
pub fn check_actor(field: &str, actor: &Actor) -> Result<(), DomainError> {
    // A well-formed actor (every command carries one) is accepted without
    // formatting field names; they are only needed to describe problems.
    let display_name_ok = actor.display_name.as_deref().is_none_or(|name| name.len() <= TEXT_BYTES_MAX);
    if check_id(field, &actor.id).is_err() || !display_name_ok {
        let mut problems = Problems::new();
        problems.id(&format!("{field}.id"), &actor.id);
        problems.text(&format!("{field}.displayName"), actor.display_name.as_deref());
        return invalid_if_any(problems, &format!("{field} is not a well-formed actor"));
    }
    check_actor_id(field, &actor.id).map_err(|problem| DomainError::new(ErrorCode::InvalidArgument, problem))?;
    if actor.attributes.is_empty() {
        return Ok(());
    }
    let mut problems = Problems::new();
    problems.attributes(&format!("{field}.attributes"), &actor.attributes);
    invalid_if_any(problems, &format!("{field} has invalid attributes"))
}

/// Canonicalizes JSON text under a size limit, returning (canonical, sha256 hex).
///
/// Refuses with `code` a text over `bytes_max`, one that is not JSON, and
/// one that is not I-JSON (a number a double cannot hold exactly, a
/// duplicated key, a lone surrogate), naming its JSON Pointer; the message
/// is [`canonical_json::refusal`]'s, the one the client SDK gives.
pub fn check_json(field: &str, text: &str, bytes_max: usize, code: ErrorCode) -> Result<(String, String), DomainError> {
    if text.len() > bytes_max {
        return Err(DomainError::new(code, format!("{field} is {} bytes, over the limit of {bytes_max}", text.len())));
    }
    canonical_json::input_hash(text).map_err(|error| DomainError::new(code, canonical_json::refusal(field, &error)))
}

/// Fails with `INVALID_ARGUMENT` listing the problems, if any.
pub fn invalid_if_any(problems: Problems, summary: &str) -> Result<(), DomainError> {
    problems.into_result(ErrorCode::InvalidArgument, summary)
}
