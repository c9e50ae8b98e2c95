//! The W3C `traceparent` header every SDK call carries, so that one trace
//! follows a call from the application through a follower's forward to the
//! leader's proposal.
//!
//! The parent is, in order: the current `tracing` span's OpenTelemetry
//! context (when the application runs `tracing-opentelemetry`), else the
//! current OpenTelemetry context (when it uses the OpenTelemetry API
//! directly), else a fresh random trace, sampled, so that the nodes' spans
//! of one call still share one trace id. Each attempt of a call is stamped
//! when it is sent: retries of a call without an ambient context get fresh
//! trace ids.

use opentelemetry::trace::{SpanContext, TraceContextExt};
use tonic::metadata::{Ascii, MetadataValue};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The W3C trace context header.
pub(crate) const TRACEPARENT: &str = "traceparent";

/// The `traceparent` for a call made now; a fresh trace's ids come from
/// `sequence` when given (a simulator's seeded sequence), else from the OS.
pub(crate) fn traceparent(sequence: Option<&crate::backoff::SeededJitter>) -> MetadataValue<Ascii> {
    let from_span = tracing::Span::current().context().span().span_context().clone();
    let ambient = if from_span.is_valid() {
        Some(from_span)
    } else {
        let current = opentelemetry::Context::current().span().span_context().clone();
        current.is_valid().then_some(current)
    };
    let text = match ambient {
        Some(context) => format_traceparent(&context),
        None => match sequence {
            Some(sequence) => seeded_traceparent(sequence),
            None => fresh_traceparent(),
        },
    };
    text.parse()
        .unwrap_or_else(|_| MetadataValue::from_static("00-00000000000000000000000000000000-0000000000000000-00"))
}

fn format_traceparent(context: &SpanContext) -> String {
    format!("00-{}-{}-{:02x}", context.trace_id(), context.span_id(), context.trace_flags().to_u8())
}

/// A random, sampled trace: 128 random bits of trace id and 64 of parent id
/// (from v4 uuids: 122 random bits each, never all zeros).
fn fresh_traceparent() -> String {
    let trace_id = uuid::Uuid::new_v4().as_u128();
    let parent_id = (uuid::Uuid::new_v4().as_u128() as u64) | 1;
    format!("00-{trace_id:032x}-{parent_id:016x}-01")
}

/// A sampled trace whose ids are drawn from `sequence` (never all zeros:
/// the parent id's low bit is set, and so is the trace id's).
fn seeded_traceparent(sequence: &crate::backoff::SeededJitter) -> String {
    let draw = || u128::from(sequence.next());
    let trace_id = (draw() << 96 | draw() << 64 | draw() << 32 | draw()) | 1;
    let parent_id = ((draw() << 32 | draw()) as u64) | 1;
    format!("00-{trace_id:032x}-{parent_id:016x}-01")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seeded_sequence_gives_the_same_valid_traceparents_again() {
        let draw = |seed| {
            let sequence = crate::backoff::SeededJitter::new(seed);
            [traceparent(Some(&sequence)), traceparent(Some(&sequence))]
        };
        let (first, again) = (draw(5), draw(5));
        assert_eq!(first, again);
        assert_ne!(first[0], first[1]);
        let text = first[0].to_str().expect("ascii");
        let parts: Vec<&str> = text.split('-').collect();
        assert_eq!((parts[0], parts[1].len(), parts[2].len(), parts[3]), ("00", 32, 16, "01"), "{text}");
    }

    #[test]
    fn without_a_context_each_call_gets_a_fresh_valid_traceparent() {
        let first = traceparent(None);
        let second = traceparent(None);
        let text = first.to_str().expect("ascii");
        let parts: Vec<&str> = text.split('-').collect();
        assert_eq!(parts.len(), 4, "{text}");
        assert_eq!((parts[0], parts[1].len(), parts[2].len(), parts[3]), ("00", 32, 16, "01"), "{text}");
        assert_ne!(parts[1], "0".repeat(32));
        assert_ne!(first, second, "fresh trace ids");
    }

    #[test]
    fn an_attached_opentelemetry_context_is_the_parent() {
        use opentelemetry::trace::{SpanId, TraceFlags, TraceId, TraceState};
        let trace_id = TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").expect("hex");
        let span_id = SpanId::from_hex("00f067aa0ba902b7").expect("hex");
        let remote = SpanContext::new(trace_id, span_id, TraceFlags::SAMPLED, true, TraceState::default());
        let _attached = opentelemetry::Context::new().with_remote_span_context(remote).attach();
        assert_eq!(traceparent(None).to_str().ok(), Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
    }
}
