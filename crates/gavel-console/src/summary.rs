//! What an inbox row shows to tell one request from the next: ten refunds
//! share a capability, a requester, a risk and a countdown, so a row adds
//! the approval's short id, when it was requested, and the leading fields
//! of its canonical input. Plain text only: the templates escape it.

use crate::limits::{
    INPUT_KEY_SHOWN_MAX_CHARS, INPUT_SUMMARY_FIELDS_MAX, INPUT_VALUE_SHOWN_MAX_CHARS, SHORT_ID_MAX_CHARS,
};

/// `text` cut to at most `max` characters, the cut marked with `…`.
pub fn truncated(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// An approval id short enough for a row: the whole id when it fits in
/// [`SHORT_ID_MAX_CHARS`], else its start and its end around `…`. Both ends
/// are kept because ids share a prefix (`apr_`, then often the client's
/// own, `apr_refund-…`) and differ at the end (a counter, a time, a hash).
pub fn short_id(id: &str) -> String {
    let count = id.chars().count();
    if count <= SHORT_ID_MAX_CHARS {
        return id.to_string();
    }
    let tail = SHORT_ID_MAX_CHARS / 3;
    let head = SHORT_ID_MAX_CHARS - tail - 1;
    let start: String = id.chars().take(head).collect();
    let end: String = id.chars().skip(count - tail).collect();
    format!("{start}…{end}")
}

/// Unix epoch milliseconds as `YYYY-MM-DD HH:MM:SS UTC` (seconds: ten
/// requests made in the same minute still read apart) and as RFC 3339 for
/// a `<time datetime>`.
pub fn utc_times(unix_ms: i64) -> (String, String) {
    let seconds = unix_ms.div_euclid(1000);
    let (days, of_day) = (seconds.div_euclid(86_400), seconds.rem_euclid(86_400));
    let (year, month, day) = gavel_client::calendar::civil_from_days(days);
    let (hour, minute, second) = (of_day / 3600, (of_day % 3600) / 60, of_day % 60);
    (
        format!("{year:04}-{month:02}-{day:02} {hour:02}:{minute:02}:{second:02} UTC"),
        format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}Z"),
    )
}

/// One top-level field of an input as a row shows it.
#[derive(Debug, PartialEq, Eq, serde::Serialize)]
pub struct InputField {
    /// The key, cut to [`INPUT_KEY_SHOWN_MAX_CHARS`].
    pub key: String,
    /// The value as compact JSON (a string keeps its quotes), cut to
    /// [`INPUT_VALUE_SHOWN_MAX_CHARS`].
    pub value: String,
}

/// The leading fields of a canonical input (its first
/// [`INPUT_SUMMARY_FIELDS_MAX`] top-level keys in canonical order, which
/// sorts keys) and how many more it has. An input that is not a JSON object
/// is one field with an empty key: the whole value, cut.
pub fn input_fields(input_json: &str) -> (Vec<InputField>, usize) {
    let Ok(input) = serde_json::from_str::<serde_json::Value>(input_json) else {
        let value = truncated(input_json, INPUT_VALUE_SHOWN_MAX_CHARS);
        return (vec![InputField { key: String::new(), value }], 0);
    };
    let Some(object) = input.as_object() else {
        let value = truncated(&input.to_string(), INPUT_VALUE_SHOWN_MAX_CHARS);
        return (vec![InputField { key: String::new(), value }], 0);
    };
    let mut keys: Vec<&String> = object.keys().collect();
    // Canonical JSON sorts keys; sort here too, whatever order the parser kept.
    keys.sort();
    let shown = keys
        .iter()
        .take(INPUT_SUMMARY_FIELDS_MAX)
        .map(|key| InputField {
            key: truncated(key, INPUT_KEY_SHOWN_MAX_CHARS),
            value: truncated(&object[key.as_str()].to_string(), INPUT_VALUE_SHOWN_MAX_CHARS),
        })
        .collect();
    (shown, keys.len().saturating_sub(INPUT_SUMMARY_FIELDS_MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_refunds_differ_in_their_rows_leading_fields() {
        let (first, more) = input_fields(r#"{"amount_cents":1250,"order_id":"o-1"}"#);
        let (second, _) = input_fields(r#"{"amount_cents":990000,"order_id":"o-2"}"#);
        assert_eq!(more, 0);
        assert_eq!(first[0], InputField { key: "amount_cents".into(), value: "1250".into() });
        assert_eq!(first[1], InputField { key: "order_id".into(), value: "\"o-1\"".into() });
        assert_ne!(first, second);
    }

    #[test]
    fn long_and_wide_inputs_are_cut() {
        let keys: Vec<String> = (0..9).map(|index| format!("\"k{index}\":{index}")).collect();
        let (fields, more) = input_fields(&format!("{{{}}}", keys.join(",")));
        assert_eq!(fields.len(), INPUT_SUMMARY_FIELDS_MAX);
        assert_eq!(more, 9 - INPUT_SUMMARY_FIELDS_MAX);
        let long = format!(r#"{{"note":"{}"}}"#, "é".repeat(500));
        let (fields, _) = input_fields(&long);
        assert_eq!(fields[0].value.chars().count(), INPUT_VALUE_SHOWN_MAX_CHARS);
        assert!(fields[0].value.ends_with('…'));
        let (fields, more) = input_fields("[1,2,3]");
        assert_eq!((fields[0].key.as_str(), fields[0].value.as_str(), more), ("", "[1,2,3]", 0));
        let (fields, _) = input_fields("not json");
        assert_eq!(fields[0].value, "not json");
    }

    #[test]
    fn a_long_id_keeps_its_start_and_end() {
        assert_eq!(short_id("apr_refund-1"), "apr_refund-1");
        let long = format!("apr_refund-{}-1733492000123", "x".repeat(40));
        let short = short_id(&long);
        assert_eq!(short.chars().count(), SHORT_ID_MAX_CHARS);
        assert!(short.starts_with("apr_refund-") && short.ends_with("2000123"), "{short}");
    }

    #[test]
    fn request_times_read_in_utc_to_the_second() {
        assert_eq!(
            utc_times(1_764_770_405_123),
            ("2025-12-03 14:00:05 UTC".to_string(), "2025-12-03T14:00:05Z".to_string())
        );
        assert_eq!(utc_times(0).1, "1970-01-01T00:00:00Z");
    }
}
