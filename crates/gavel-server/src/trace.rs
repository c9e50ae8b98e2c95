//! W3C trace context through a node: every public call runs in a
//! `gavel.rpc` span whose parent is the caller's `traceparent` header, a
//! follower forwards the call with its own span as the new parent, and the
//! leader's proposal runs in a `gavel.propose` span below its `gavel.rpc`
//! span ([`crate::node::Node::call`]). So one trace holds the client's call,
//! the follower's forward and the leader's propose-and-apply.
//!
//! The trace context stays out of the Raft log: the proposal span joins the
//! incoming context on the leader, so the replicated commands and the state
//! hash are the same with tracing on or off.
//!
//! This module only parses and writes the header and makes spans; whether
//! they are exported (OTLP) and how logs look is the binary's choice
//! (`gavel node --otlp-endpoint`, `--log-format`). With no OpenTelemetry
//! layer installed the spans are plain `tracing` spans, and the incoming
//! trace id is still recorded in their `trace_id` field, so log lines carry it.

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use tonic::codegen::http::{HeaderMap, HeaderValue};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The W3C trace context header.
pub const TRACEPARENT: &str = "traceparent";

/// The remote span context a `traceparent` value names, if it is a valid
/// version-00 header (`00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>`,
/// neither id all zeros). Anything else is ignored, as the W3C rules say.
pub fn parse_traceparent(value: &str) -> Option<SpanContext> {
    let mut parts = value.trim().split('-');
    let (version, trace_id, parent_id, flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let lower_hex =
        |text: &str, len: usize| text.len() == len && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    if version != "00"
        || parts.next().is_some()
        || !lower_hex(trace_id, 32)
        || !lower_hex(parent_id, 16)
        || !lower_hex(flags, 2)
    {
        return None;
    }
    let trace_id = TraceId::from_hex(trace_id).ok()?;
    let parent_id = SpanId::from_hex(parent_id).ok()?;
    let flags = TraceFlags::new(u8::from_str_radix(flags, 16).ok()? & TraceFlags::SAMPLED.to_u8());
    let context = SpanContext::new(trace_id, parent_id, flags, true, TraceState::default());
    context.is_valid().then_some(context)
}

/// The `traceparent` value naming `context` as the parent.
pub fn format_traceparent(context: &SpanContext) -> String {
    format!("00-{}-{}-{:02x}", context.trace_id(), context.span_id(), context.trace_flags().to_u8())
}

/// The span one public call of `path` runs in on node `node_id`: a child of
/// the caller's `traceparent` when it sent a valid one.
pub fn rpc_span(path: &str, headers: &HeaderMap, node_id: u64) -> tracing::Span {
    let method = path.trim_start_matches('/');
    let span = tracing::info_span!(
        "gavel.rpc",
        otel.name = method,
        otel.kind = "server",
        rpc.method = method,
        node.id = node_id,
        trace_id = tracing::field::Empty,
    );
    let remote = headers.get(TRACEPARENT).and_then(|value| value.to_str().ok()).and_then(parse_traceparent);
    if let Some(remote) = &remote {
        // Fails only when no OpenTelemetry layer is installed; the trace id
        // is recorded for the logs below either way.
        let _ = span.set_parent(opentelemetry::Context::new().with_remote_span_context(remote.clone()));
    }
    let own = span.context().span().span_context().clone();
    let trace_id = if own.is_valid() { Some(own.trace_id()) } else { remote.map(|remote| remote.trace_id()) };
    if let Some(trace_id) = trace_id {
        span.record("trace_id", tracing::field::display(trace_id));
    }
    span
}

/// Names the current span as the parent of a forwarded request, when it
/// belongs to an exported trace. Otherwise the caller's own `traceparent`
/// travels on unchanged (the forward carries every header).
pub fn inject_current(headers: &mut HeaderMap) {
    let context = tracing::Span::current().context().span().span_context().clone();
    if !context.is_valid() {
        return;
    }
    if let Ok(value) = HeaderValue::from_str(&format_traceparent(&context)) {
        headers.insert(TRACEPARENT, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_valid_traceparent_round_trips() {
        let header = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let context = parse_traceparent(header).expect("valid");
        assert_eq!(context.trace_id().to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert!(context.is_sampled() && context.is_remote());
        assert_eq!(format_traceparent(&context), header);
    }

    #[test]
    fn malformed_traceparents_are_ignored() {
        for header in [
            "",
            "garbage",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        ] {
            assert!(parse_traceparent(header).is_none(), "{header:?}");
        }
    }

    #[test]
    fn without_an_exporter_the_span_still_records_the_incoming_trace_id() {
        let mut headers = HeaderMap::new();
        headers
            .insert(TRACEPARENT, HeaderValue::from_static("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
        // No subscriber: the span is disabled, and making it must not fail.
        let span = rpc_span("/gavel.v1.ApprovalService/CreateApproval", &headers, 1);
        drop(span);
        let mut forwarded = headers.clone();
        inject_current(&mut forwarded);
        assert_eq!(forwarded.get(TRACEPARENT), headers.get(TRACEPARENT), "left unchanged");
    }
}
