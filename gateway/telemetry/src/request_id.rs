//! What the task serving an HTTP request knows of it from the front door: its id
//! (`X-Request-Id`), for what records a request outside the log lines such as payload logs, and
//! its trace's decision ([`crate::head`]), which the spans below it follow. Set by the server's
//! request middleware for the request's own task; tasks it spawns do not inherit it.
//!
//! One task-local holds both: each scope wraps the request's whole future, and every poll of
//! the request passes through each of them.

use opentelemetry::trace::{TraceId, TraceState};
use std::future::Future;
use std::sync::Arc;

/// The front door's decision on a request's trace.
#[derive(Debug, Clone)]
pub enum Trace {
    /// Not taken (traces are not exported): spans look the current span up.
    Undecided,
    /// Recorded: every span below the request's is opened.
    Recorded,
    /// Not recorded: no span below the request's is opened, and a hop passes this trace on,
    /// unsampled, so the receiver does not record it either.
    Unrecorded(TraceId, TraceState),
    /// Left to the request's handler, which knows its model ([`rescope`]): until then no span
    /// is opened.
    Deferred,
}

struct Request {
    id: Arc<str>,
    trace: Trace,
}

tokio::task_local! {
    static REQUEST: Request;
}

/// Runs `f` as the request `id`, whose trace the front door decided as `trace`. Not an
/// `async fn`: its future would hold `f` twice over (the argument, and the scope around it),
/// and a request's future is large and moved whole.
pub fn scope<F: Future>(id: Arc<str>, trace: Trace, f: F) -> impl Future<Output = F::Output> {
    REQUEST.scope(Request { id, trace }, f)
}

/// Runs `f`, the rest of the current request, under `trace`, the decision its handler took on a
/// trace the front door left [`Trace::Deferred`].
/// (Outside a request's scope there is no id to keep: the new scope's is empty.)
pub fn rescope<F: Future>(trace: Trace, f: F) -> impl Future<Output = F::Output> {
    let id = current().unwrap_or_else(|| Arc::from(""));
    REQUEST.scope(Request { id, trace }, f)
}

/// The current task's request id, inside [`scope`].
pub fn current() -> Option<Arc<str>> {
    REQUEST.try_with(|r| Arc::clone(&r.id)).ok()
}

/// Whether the current task's request is recorded, when the front door decided it.
pub(crate) fn recorded() -> Option<bool> {
    REQUEST
        .try_with(|r| match r.trace {
            Trace::Undecided => None,
            Trace::Recorded => Some(true),
            Trace::Unrecorded(..) | Trace::Deferred => Some(false),
        })
        .ok()
        .flatten()
}

/// The trace of the current task's request when the front door decided not to record it.
pub(crate) fn unrecorded() -> Option<(TraceId, TraceState)> {
    REQUEST
        .try_with(|r| match &r.trace {
            Trace::Unrecorded(id, state) => Some((*id, state.clone())),
            _ => None,
        })
        .ok()
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_request_is_current_inside_its_scope_only() {
        assert!(current().is_none());
        let seen = scope(Arc::from("req-1"), Trace::Undecided, async {
            (current(), recorded())
        })
        .await;
        assert_eq!(seen.0.as_deref(), Some("req-1"));
        assert_eq!(seen.1, None);
        assert!(current().is_none());
        let trace = TraceId::from(7u128);
        let seen = scope(
            Arc::from("req-2"),
            Trace::Unrecorded(trace, TraceState::default()),
            async { (recorded(), unrecorded().map(|(id, _)| id)) },
        )
        .await;
        assert_eq!(seen, (Some(false), Some(trace)));
        let seen = scope(Arc::from("req-3"), Trace::Recorded, async { recorded() }).await;
        assert_eq!(seen, Some(true));
    }
}
