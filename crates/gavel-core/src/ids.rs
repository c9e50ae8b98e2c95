//! Every id Gavel derives from another id, in one place. Each is a pure
//! function of its input, so every node, every retry and every client that
//! knows the input derives the same id; none reads a clock or randomness.
//!
//! A derived id always passes [`crate::validate::check_id`]: where prefixing
//! would exceed [`ID_BYTES_MAX`], the input is replaced by its digest.

use crate::canonical_json::{lower_hex, sha256_hex};
use crate::limits::ID_BYTES_MAX;

/// The idempotency key handed to handlers: stable across retries of one
/// execution, distinct across executions, and derivable by anyone from the id.
pub fn idempotency_key(execution_id: &str) -> String {
    // `idk_` and the first 32 hex digits of SHA-256 over
    // `gavel/idempotency-key/{execution_id}`, built without intermediate strings.
    let mut hasher = <sha2::Sha256 as sha2::Digest>::new();
    sha2::Digest::update(&mut hasher, b"gavel/idempotency-key/");
    sha2::Digest::update(&mut hasher, execution_id.as_bytes());
    let digest = sha2::Digest::finalize(hasher);
    let mut key = String::with_capacity(36);
    key.push_str("idk_");
    key.push_str(&lower_hex(&digest[..16]));
    key
}

/// The id of the approval a submit creates for an execution that needs one.
/// An execution id too long to prefix is replaced by its digest, so the
/// approval id always passes the id checks that decide and resume apply.
pub fn approval_id_for(execution_id: &str) -> String {
    let approval_id = format!("apr_{execution_id}");
    if approval_id.len() <= ID_BYTES_MAX {
        return approval_id;
    }
    format!("apr_{}", sha256_hex(execution_id.as_bytes()))
}

/// The execution id assigned when a submit (or resume) names none: derived
/// from the request id, so every retry of the call (same request id, any
/// node, before or after forwarding) names the same execution and is the
/// same command.
pub fn execution_id_for(request_id: &str) -> String {
    format!("ex-{}", &sha256_hex(request_id.as_bytes())[..32])
}

/// The request id of the poll part of a `ReportAndPoll` that names none:
/// the report's own id with `/next`, so a client retry of the call (same
/// request id) replays the same grants. When that would exceed the id
/// limit, the report's id is replaced by its digest.
pub fn next_poll_request_id(report_request_id: &str) -> String {
    let derived = format!("{report_request_id}/next");
    if derived.len() <= ID_BYTES_MAX {
        return derived;
    }
    let digest = sha256_hex(report_request_id.as_bytes());
    format!("report-{}/next", &digest[..32])
}

/// The request id of one grant attempt of a long-poll: the poll's own id and
/// the attempt number, so a client retry of the poll replays the same grants
/// (see [`crate::State::replayed_grants`]). When that would exceed the id
/// limit, the poll's id is replaced by its digest.
pub fn grant_request_id(poll_request_id: &str, attempt: u32) -> String {
    let derived = format!("{poll_request_id}/{attempt}");
    if derived.len() <= ID_BYTES_MAX {
        return derived;
    }
    let digest = sha256_hex(poll_request_id.as_bytes());
    format!("poll-{}/{attempt}", &digest[..32])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate::check_id;

    #[test]
    fn idempotency_keys_are_stable_and_distinct() {
        assert_eq!(idempotency_key("ex-1"), idempotency_key("ex-1"));
        assert_ne!(idempotency_key("ex-1"), idempotency_key("ex-2"));
        assert!(idempotency_key("ex-1").starts_with("idk_"));
        assert_eq!(idempotency_key("ex-1").len(), 36);
    }

    #[test]
    fn derived_ids_of_the_longest_input_still_pass_the_id_check() {
        let longest = "x".repeat(ID_BYTES_MAX);
        for derived in [
            approval_id_for(&longest),
            execution_id_for(&longest),
            grant_request_id(&longest, u32::MAX),
            grant_request_id(&next_poll_request_id(&longest), u32::MAX),
            idempotency_key(&longest),
        ] {
            assert!(derived.len() <= ID_BYTES_MAX, "{derived}");
            assert!(check_id("id", &derived).is_ok(), "{derived}");
        }
    }

    #[test]
    fn short_inputs_keep_their_readable_form() {
        assert_eq!(approval_id_for("refund-1"), "apr_refund-1");
        assert_eq!(grant_request_id("poll-7", 2), "poll-7/2");
        assert_eq!(next_poll_request_id("report-7"), "report-7/next");
        assert_ne!(execution_id_for("req-1"), execution_id_for("req-2"));
        assert_eq!(execution_id_for("req-1"), execution_id_for("req-1"));
    }
}
