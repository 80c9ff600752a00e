//! The trace of a request that names its model in its body (the OpenAI routes), while a
//! model's trace settings differ from the others' ([`infergate_telemetry::sampling::per_model`]).
//!
//! The front door ([`crate::request_id`]) decides a request's trace before routing, from the
//! model its path names; these paths name none. So it leaves their trace undecided: the
//! request's span opens where the OpenTelemetry layer does not look, and the caller's parent
//! waits in a task-local ([`scope`]). The handler, once it knows the model, decides with that
//! model's settings ([`for_model`]): a recorded trace gets its `request` span there, which every
//! later span of the request is under and whose trace `X-Trace-Id` names; a trace that is not
//! recorded is passed on, unsampled, to a worker as any other. What ran before the decision
//! (admission, reading the body) has no span in the trace, and a request refused before its
//! model is known is not recorded.
//!
//! Without per-model settings (the common case) nothing here runs: the front door decides at
//! once, as for any other path.

use axum::response::Response;
use http::HeaderValue;
use infergate_telemetry::head::Undecided;
use infergate_telemetry::request_id::Trace;
use std::cell::RefCell;
use std::future::Future;
use tracing::Instrument;

/// A request's trace, left to its handler.
struct Deferred {
    /// Taken by the decision.
    undecided: RefCell<Option<Undecided>>,
    /// The answer's `X-Trace-Id`.
    header: RefCell<Option<HeaderValue>>,
}

tokio::task_local! {
    static DEFERRED: Deferred;
}

/// Whether a request on `path` names its model in its body, where only its handler finds it.
pub(crate) fn names_model_in_body(path: &str) -> bool {
    matches!(
        path,
        "/v1/chat/completions" | "/v1/completions" | "/v1/embeddings"
    )
}

/// Runs `f` (a request's handling) with its trace left undecided, and names in its answer's
/// `X-Trace-Id` the trace that was decided, or `undecided`'s when nothing decided.
pub(crate) async fn scope<F: Future<Output = Response>>(undecided: Undecided, f: F) -> Response {
    let fallback = infergate_telemetry::head::header(undecided.trace_id);
    let deferred = Deferred {
        undecided: RefCell::new(Some(undecided)),
        header: RefCell::new(None),
    };
    let mut scoped = std::pin::pin!(DEFERRED.scope(deferred, f));
    let mut response = scoped.as_mut().await;
    let header = scoped
        .as_mut()
        .take_value()
        .and_then(|d| d.header.into_inner())
        .or(fallback);
    if let Some(header) = header {
        response
            .headers_mut()
            .insert(infergate_telemetry::w3c::TRACE_ID, header);
    }
    response
}

/// Runs `f`, the rest of a request now known to be for `model`, in the trace `model`'s settings
/// decide when the front door left it undecided ([`scope`]); as it is otherwise. Called once a
/// request, after the model is known and before anything else runs for it.
pub(crate) fn for_model<F: Future>(model: &str, f: F) -> impl Future<Output = F::Output> {
    use futures_util::future::Either;
    let undecided = infergate_telemetry::exporting()
        .then(|| {
            DEFERRED
                .try_with(|d| d.undecided.borrow_mut().take())
                .ok()
                .flatten()
        })
        .flatten();
    let Some(undecided) = undecided else {
        return Either::Left(f);
    };
    let head = undecided.decide(Some(model));
    // Boxed: only the requests that were deferred pay for the larger future.
    if head.recorded {
        let span = tracing::info_span!(
            target: "infergate_server::request_id",
            "request",
            model,
            trace_id = tracing::field::Empty,
            span_id = tracing::field::Empty
        );
        infergate_telemetry::w3c::continue_decided(&span, head.parent);
        set_header(infergate_telemetry::w3c::record_ids(&span));
        Either::Right(Either::Left(Box::pin(
            infergate_telemetry::request_id::rescope(Trace::Recorded, f).instrument(span),
        )))
    } else {
        set_header(infergate_telemetry::head::header(head.trace_id));
        Either::Right(Either::Right(Box::pin(
            infergate_telemetry::request_id::rescope(
                Trace::Unrecorded(head.trace_id, head.trace_state),
                f,
            ),
        )))
    }
}

fn set_header(header: Option<HeaderValue>) {
    let _ = DEFERRED.try_with(|d| *d.header.borrow_mut() = header);
}
