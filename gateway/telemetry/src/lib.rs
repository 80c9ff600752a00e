//! Traces across hosts: the W3C trace context a request arrives with, continued by its spans
//! and passed on to the worker that runs it, and the spans that exist only for the exported
//! traces.
//!
//! It owns no exporter: the binary installs the OpenTelemetry SDK with OTLP and this crate's
//! [`sampler`] when an endpoint is configured, and then calls [`set_exporting`]. Until then every
//! function here is a relaxed load and a return, so a gateway that exports nothing pays
//! nothing per request.

#![forbid(unsafe_code)]

pub mod head;
pub mod request_id;
pub mod sampler;
pub mod sampling;
pub mod span_counts;
pub mod w3c;

use std::sync::atomic::{AtomicBool, Ordering};

/// The target of the spans that exist only for exported traces: the log output leaves them
/// out (their fields would be formatted into every log line of the request).
pub const TARGET: &str = "infergate::trace";

/// The target of a request's `request` span when its trace is not recorded
/// ([`head`]): in the log output as any `request` span, never seen by the OpenTelemetry layer.
/// Under the target of the recorded one (the server's `request_id` module), so that a log
/// filter written for the server's crate or that module keeps both.
pub const UNTRACED: &str = "infergate_server::request_id::untraced";

/// Whether the OpenTelemetry layer sees a span or event: infergate's own at info and above,
/// whatever the log level, but for a request's span whose trace the front door decided not to
/// record ([`UNTRACED`]).
pub fn exported(metadata: &tracing::Metadata<'_>) -> bool {
    let target = metadata.target();
    *metadata.level() <= tracing::Level::INFO
        && target.starts_with("infergate")
        && !target.starts_with(UNTRACED)
}

static EXPORTING: AtomicBool = AtomicBool::new(false);

/// Whether traces are exported: the OpenTelemetry layer is installed.
pub fn exporting() -> bool {
    EXPORTING.load(Ordering::Relaxed)
}

/// Called once by whoever installs the OpenTelemetry layer, before requests are served.
pub fn set_exporting() {
    EXPORTING.store(true, Ordering::Relaxed);
}

/// A remote parent whose sampled flag the sampler follows (an operator-trusted caller, or the
/// manager on the hop to a worker); a remote parent without it is sampled by ratio, so a
/// caller cannot make the server record its requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrustedSampling;

/// Whether a span opened now on [`TARGET`] could be recorded: traces are exported, and the
/// current span, if there is one, belongs to a recorded trace. Without a current span the new
/// one is a root and the sampler decides. Asking costs a lookup of the current span; opening
/// a span the sampler then drops costs several times that, for each of a request's spans.
pub fn recording() -> bool {
    use opentelemetry::trace::TraceContextExt;
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    if !exporting() {
        return false;
    }
    // Inside a request whose decision the front door took: no span lookup.
    if let Some(recorded) = request_id::recorded() {
        return recorded;
    }
    let current = tracing::Span::current();
    current.is_none() || current.context().span().span_context().is_sampled()
}

/// The trace id (32 lowercase hex digits) of the current span when its trace is recorded: a
/// latency metric's exemplar, a payload log entry's `trace_id`. A relaxed load and None while
/// traces are not exported.
pub fn recorded_trace_id() -> Option<String> {
    use opentelemetry::trace::{TraceContextExt, TraceId};
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    // Inside a request the front door's flag answers for most of them without a lookup.
    if !recording() {
        return None;
    }
    let cx = tracing::Span::current().context();
    let span = cx.span();
    let context = span.span_context();
    (context.is_sampled() && context.trace_id() != TraceId::INVALID)
        .then(|| format!("{:032x}", context.trace_id()))
}

/// Awaits `$fut` inside `$span` while [`recording`], as it is otherwise (the span expression is
/// then not evaluated). The traced branch is boxed: wrapping a large future in `Instrumented`
/// in place makes the caller's own future larger by that future's size, and a request's future
/// is copied whole when the router boxes it, for every request whether traced or not.
#[macro_export]
macro_rules! traced {
    ($fut:expr, $span:expr) => {
        if $crate::recording() {
            ::std::boxed::Box::pin(::tracing::Instrument::instrument($fut, $span)).await
        } else {
            $fut.await
        }
    };
}

/// A span that is both exported and in the log output, while traces are exported
/// ([`Span::none`](tracing::Span::none) otherwise): a call's outermost span, whose log lines
/// then name its trace. It declares `trace_id` and `span_id`, which
/// [`w3c::record_ids`] fills once the span's trace is known (and only when it is recorded).
#[macro_export]
macro_rules! logged_span {
    ($name:literal $(, $($fields:tt)*)?) => {
        if $crate::exporting() {
            ::tracing::info_span!(
                $name,
                $($($fields)*,)?
                trace_id = ::tracing::field::Empty,
                span_id = ::tracing::field::Empty
            )
        } else {
            ::tracing::Span::none()
        }
    };
}

/// The `model run` span around a call into the engine ([`span!`]'s, with `fields` first, each
/// followed by a comma), declaring the engine's figures of the request, which the engine
/// records when its batch ran: microseconds queued and in compute input, infer and output, and
/// the samples and requests of the batch.
#[macro_export]
macro_rules! model_run_span {
    ($($fields:tt)*) => {
        $crate::span!(
            "model run",
            $($fields)*
            queue_us = ::tracing::field::Empty,
            compute_input_us = ::tracing::field::Empty,
            compute_infer_us = ::tracing::field::Empty,
            compute_output_us = ::tracing::field::Empty,
            batch_size = ::tracing::field::Empty,
            batch_requests = ::tracing::field::Empty
        )
    };
}

/// An info-level span on [`TARGET`] while [`recording`], [`tracing::Span::none`] otherwise:
/// `span!("decode", bytes = n)`.
#[macro_export]
macro_rules! span {
    ($name:literal $(, $($fields:tt)*)?) => {
        if $crate::recording() {
            ::tracing::info_span!(target: $crate::TARGET, $name $(, $($fields)*)?)
        } else {
            ::tracing::Span::none()
        }
    };
}
