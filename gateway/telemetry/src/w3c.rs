//! W3C trace context (`traceparent`, `tracestate`): read from a request's headers into the
//! parent of its span, written into the request a span sends on, and the trace id a response
//! names. A header that is malformed or larger than the standard allows is ignored, never
//! echoed: the trace then starts here.

use http::{HeaderMap, HeaderName, HeaderValue};
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use opentelemetry::Context;
use std::str::FromStr;
use tracing_opentelemetry::OpenTelemetrySpanExt;

pub const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
pub const TRACESTATE: HeaderName = HeaderName::from_static("tracestate");
/// The response header naming the trace a request belongs to (32 lowercase hex digits).
pub const TRACE_ID: HeaderName = HeaderName::from_static("x-trace-id");
/// [`TRACE_ID`] as gRPC metadata's key.
pub const TRACE_ID_METADATA: &str = "x-trace-id";

/// The standard's limit on `tracestate` (32 members of at most 256 characters would be more,
/// but vendors must keep it to 512 characters).
const MAX_TRACESTATE: usize = 512;

/// The remote span context in a `traceparent` value of version 00 (`00-` 32 hex digits `-` 16
/// hex digits `-` 2 hex digits, lowercase, neither id all zeros); `None` for anything else.
pub fn parse_traceparent(value: &[u8]) -> Option<(TraceId, SpanId, TraceFlags)> {
    if value.len() != 55 || &value[..3] != b"00-" || value[35] != b'-' || value[52] != b'-' {
        return None;
    }
    let hex = |range: std::ops::Range<usize>| -> Option<&str> {
        let part = &value[range];
        part.iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
            .then(|| std::str::from_utf8(part).ok())
            .flatten()
    };
    let trace_id = TraceId::from_hex(hex(3..35)?).ok()?;
    let span_id = SpanId::from_hex(hex(36..52)?).ok()?;
    let flags = u8::from_str_radix(hex(53..55)?, 16).ok()?;
    if trace_id == TraceId::INVALID || span_id == SpanId::INVALID {
        return None;
    }
    // Only the sampled bit has a meaning this side of the standard's version 00.
    Some((trace_id, span_id, TraceFlags::new(flags & 1)))
}

/// The parent context a request's headers name, with [`crate::TrustedSampling`] when its
/// sampled flag may decide; `None` without a well-formed `traceparent`. A `tracestate` that
/// is oversized or malformed is dropped and the `traceparent` kept.
pub fn extract(headers: &HeaderMap, trusted: bool) -> Option<Context> {
    let mut parents = headers.get_all(TRACEPARENT).iter();
    let parent = parents.next()?;
    if parents.next().is_some() {
        // Two parents: the standard says to ignore both.
        return None;
    }
    let (trace_id, span_id, flags) = parse_traceparent(parent.as_bytes())?;
    let state = headers
        .get(TRACESTATE)
        .filter(|v| v.len() <= MAX_TRACESTATE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| TraceState::from_str(v).ok())
        .unwrap_or_default();
    let context = SpanContext::new(trace_id, span_id, flags, true, state);
    let cx = Context::new().with_remote_span_context(context);
    Some(if trusted {
        cx.with_value(crate::TrustedSampling)
    } else {
        cx
    })
}

/// Makes `parent` (the caller's context, or none) the parent of `span`, a request's root span
/// whose trace the front door decided to record ([`crate::head`]): the sampler records it
/// without deciding again. Does nothing while traces are not exported.
pub fn continue_decided(span: &tracing::Span, parent: Option<Context>) {
    if !crate::exporting() {
        return;
    }
    let _ = span.set_parent(parent.unwrap_or_default().with_value(crate::head::Decided));
}

/// Makes the trace `headers` name the parent of `span`, which must not have been entered yet,
/// and `model` (the model the request names, when known) the one whose trace settings decide
/// whether a new trace is recorded ([`crate::sampling`]). Does nothing while traces are not
/// exported.
pub fn continue_in(span: &tracing::Span, headers: &HeaderMap, trusted: bool, model: Option<&str>) {
    if !crate::exporting() {
        return;
    }
    let parent = extract(headers, trusted);
    let parent = match model {
        Some(model) => Some(
            parent
                .unwrap_or_default()
                .with_value(crate::sampling::ForModel(model.into())),
        ),
        None => parent,
    };
    if let Some(parent) = parent {
        // Fails only for a span the layer does not see (filtered out): it has no trace.
        let _ = span.set_parent(parent);
    }
}

/// After `span`'s parent was set, in one lookup of its context: fills its `trace_id` and
/// `span_id` fields (it declares them: [`crate::logged_span`], a request's `request` span) when
/// its trace is recorded, so its log lines lead to the trace, and returns its trace id as
/// [`TRACE_ID`]'s value whether recorded or not. `None` while traces are not exported.
pub fn record_ids(span: &tracing::Span) -> Option<HeaderValue> {
    if !crate::exporting() {
        return None;
    }
    let cx = span.context();
    let span_ref = cx.span();
    let context = span_ref.span_context();
    if context.trace_id() == TraceId::INVALID {
        return None;
    }
    let trace = crate::head::hex(context.trace_id());
    if context.is_valid() && context.is_sampled() {
        if let Ok(text) = std::str::from_utf8(&trace) {
            span.record("trace_id", text);
        }
        span.record("span_id", format!("{:016x}", context.span_id()));
    }
    HeaderValue::from_bytes(&trace).ok()
}

/// A span another span links to (a WebSocket message's to its connection's).
pub type Link = SpanContext;

/// The context of `span`, for a link from the spans of a connection's messages to the
/// connection's own; None while traces are not exported or for a span without a trace.
pub fn link_to(span: &tracing::Span) -> Option<SpanContext> {
    if !crate::exporting() {
        return None;
    }
    let context = span.context().span().span_context().clone();
    context.is_valid().then_some(context)
}

/// Makes one message of a long-lived connection (a WebSocket message) its own trace: the
/// message's `traceparent` and `tracestate` fields, read as a request's headers are (and
/// ignored as they would be), become `span`'s parent, `model` (the model or pipeline the
/// message names) the one whose trace settings decide whether a new trace is recorded, and
/// `connection` (the connection's span, [`link_to`]) a link. Does nothing while traces are not
/// exported.
pub fn continue_message(
    span: &tracing::Span,
    traceparent: Option<&str>,
    tracestate: Option<&str>,
    trusted: bool,
    model: Option<&str>,
    connection: Option<&SpanContext>,
) {
    if !crate::exporting() {
        return;
    }
    let mut headers = HeaderMap::new();
    for (name, value) in [(TRACEPARENT, traceparent), (TRACESTATE, tracestate)] {
        if let Some(value) = value.and_then(|v| HeaderValue::from_str(v).ok()) {
            headers.insert(name, value);
        }
    }
    // Carried only while some model's settings differ from the others' (as over HTTP).
    let model = model.filter(|_| crate::sampling::per_model());
    continue_in(span, &headers, trusted, model);
    if let Some(connection) = connection {
        span.add_link(connection.clone());
    }
}

/// Writes `span`'s context into the headers of a request it sends on, so the receiver's spans
/// join its trace. Does nothing while traces are not exported.
pub fn inject(span: &tracing::Span, headers: &mut HeaderMap) {
    if !crate::exporting() {
        return;
    }
    let cx = span.context();
    let mut context = cx.span().span_context().clone();
    if !context.is_valid() {
        // A request whose trace the front door chose not to record: the receiver is told so,
        // under a span id of this hop's own.
        let Some((trace_id, state)) = crate::request_id::unrecorded() else {
            return;
        };
        context = SpanContext::new(
            trace_id,
            SpanId::from(crate::head::random_span_id()),
            TraceFlags::default(),
            false,
            state,
        );
    }
    let parent = format!(
        "00-{:032x}-{:016x}-{:02x}",
        context.trace_id(),
        context.span_id(),
        context.trace_flags().to_u8()
    );
    if let Ok(value) = HeaderValue::from_str(&parent) {
        headers.insert(TRACEPARENT, value);
    }
    let state = context.trace_state().header();
    if !state.is_empty() {
        if let Ok(value) = HeaderValue::from_str(&state) {
            headers.insert(TRACESTATE, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_version_00_traceparent_parses() {
        let (trace, span, flags) = parse_traceparent(GOOD.as_bytes()).expect("well-formed");
        assert_eq!(format!("{trace:032x}"), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(format!("{span:016x}"), "00f067aa0ba902b7");
        assert!(flags.is_sampled());
        let (_, _, flags) =
            parse_traceparent(b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-fe")
                .expect("unknown flags are kept out, not refused");
        assert!(!flags.is_sampled());
    }

    #[test]
    fn malformed_traceparents_are_ignored() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-011",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
            "00-+bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert!(parse_traceparent(bad.as_bytes()).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn trust_decides_whether_the_sampled_flag_counts_and_bad_state_is_dropped() {
        let mut headers = HeaderMap::new();
        headers.insert(TRACEPARENT, HeaderValue::from_static(GOOD));
        headers.insert(
            TRACESTATE,
            HeaderValue::from_str(&"a".repeat(600)).expect("ascii"),
        );
        let cx = extract(&headers, false).expect("a parent");
        assert!(cx.get::<crate::TrustedSampling>().is_none());
        let context = cx.span().span_context().clone();
        assert!(context.is_remote() && context.is_sampled());
        assert_eq!(
            context.trace_state().header(),
            "",
            "oversized state dropped"
        );
        headers.insert(TRACESTATE, HeaderValue::from_static("vendor=abc"));
        let cx = extract(&headers, true).expect("a parent");
        assert!(cx.get::<crate::TrustedSampling>().is_some());
        assert_eq!(
            cx.span().span_context().trace_state().header(),
            "vendor=abc"
        );
        headers.append(TRACEPARENT, HeaderValue::from_static(GOOD));
        assert!(extract(&headers, true).is_none(), "two parents: neither");
    }
}
