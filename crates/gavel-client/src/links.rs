//! Every URL built from a record id, for the tools on the SDK that link to
//! records (the console's pages and forms, the notifier's links), and how
//! they word a duration. An id is data, never
//! structure: it is percent-encoded as exactly one path segment, so that
//! no `/`, `%`, `?`, `#` or dot segment of an id can move a link or a form
//! to another address (issue #37: a decoy approval `z/../../approvals/X`
//! had its Approve button post to approval X). New ids come from a safe
//! alphabet (SPEC §13), but records stored before it may hold any id.
//!
//! A browser reads a path segment `.` or `..` (and `%2e`, `.%2E`, ...) as a
//! dot segment however it is encoded, so an id made only of dots is put in
//! the query instead: `/approvals?id=..`, which the same handlers serve.

/// The bytes left as they are: RFC 3986's unreserved characters.
fn unreserved(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~')
}

/// `text` with every byte outside the unreserved characters percent-encoded.
pub fn percent_encoded(text: &str) -> String {
    let mut encoded = String::with_capacity(text.len());
    for byte in text.bytes() {
        if unreserved(byte) {
            encoded.push(char::from(byte));
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

/// Whether a browser would take `id` as a path segment for a dot segment
/// (or for no segment at all) whatever its encoding.
fn needs_query(id: &str) -> bool {
    id.bytes().all(|byte| byte == b'.')
}

/// The page of record `id` of `kind` (`approvals`, `executions`).
pub fn record_url(kind: &str, id: &str) -> String {
    if needs_query(id) {
        format!("/{kind}?id={}", percent_encoded(id))
    } else {
        format!("/{kind}/{}", percent_encoded(id))
    }
}

/// The address a form of approval `id` posts `action` (`decide`,
/// `withdraw`) to.
pub fn approval_action_url(id: &str, action: &str) -> String {
    if needs_query(id) {
        format!("/approvals?id={}&action={action}", percent_encoded(id))
    } else {
        format!("/approvals/{}/{action}", percent_encoded(id))
    }
}

/// `ms` for a person: `7 days`, `2 h 30 min`, `45 s`, `250 ms`.
pub fn duration_text(ms: u64) -> String {
    if ms < 1_000 {
        return format!("{ms} ms");
    }
    let seconds = ms / 1_000;
    let parts =
        [(seconds / 86_400, "day"), (seconds / 3_600 % 24, "h"), (seconds / 60 % 60, "min"), (seconds % 60, "s")];
    let text: Vec<String> = parts
        .iter()
        .filter(|(count, _)| *count > 0)
        .map(|(count, unit)| match *unit {
            "day" if *count != 1 => format!("{count} days"),
            unit => format!("{count} {unit}"),
        })
        .collect();
    text.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_is_one_encoded_segment_whatever_it_holds() {
        assert_eq!(record_url("approvals", "apr_1.x-y~z"), "/approvals/apr_1.x-y~z");
        assert_eq!(
            approval_action_url("z/../../approvals/hv-e9814d", "decide"),
            "/approvals/z%2F..%2F..%2Fapprovals%2Fhv-e9814d/decide"
        );
        assert_eq!(record_url("executions", "a?b#c%d e"), "/executions/a%3Fb%23c%25d%20e");
        assert_eq!(record_url("approvals", "é:@+="), "/approvals/%C3%A9%3A%40%2B%3D");
        for id in ["", ".", "..", "..."] {
            let url = record_url("approvals", id);
            assert!(url.starts_with("/approvals?id="), "{url}");
            let action = approval_action_url(id, "withdraw");
            assert!(action.starts_with("/approvals?id=") && action.ends_with("&action=withdraw"), "{action}");
        }
        // Whatever the id, its URL has exactly the console's own segments,
        // none of them a dot segment, and no query or fragment.
        for id in ["a/b", "../x", "%2e%2e", "a/../../b", "?x=1", "#top", "a\\b", ".%2e"] {
            let url = approval_action_url(id, "decide");
            let segments: Vec<&str> = url.split('/').collect();
            assert_eq!(segments.len(), 4, "{url}");
            let dot = |segment: &str| {
                let lower = segment.to_ascii_lowercase().replace("%2e", ".");
                lower == "." || lower == ".."
            };
            assert!(!segments.iter().any(|segment| dot(segment)), "{url}");
            assert!(!url.contains('#') && !url.contains('?') && !url.contains('\\'), "{url}");
        }
    }

    #[test]
    fn durations_read_as_a_person_says_them() {
        assert_eq!(duration_text(604_800_000), "7 days");
        assert_eq!(duration_text(86_400_000), "1 day");
        assert_eq!(duration_text(9_000_000), "2 h 30 min");
        assert_eq!(duration_text(45_000), "45 s");
        assert_eq!(duration_text(250), "250 ms");
    }
}
