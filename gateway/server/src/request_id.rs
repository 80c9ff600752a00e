//! One id per request: the client's `X-Request-Id` when it is sane (1–128 characters of
//! `A-Za-z0-9-_.:/+=@`), otherwise a fresh random one. It is returned in `X-Request-Id` on
//! every response, carried by the request's tracing span (so every log line of the request
//! names it), and available to handlers as the [`RequestId`] extension.
//!
//! While traces are exported, the same span continues the caller's W3C `traceparent` (see
//! [`infergate_telemetry::w3c`]) and the response names its trace in `X-Trace-Id`.

use axum::extract::Request;
use axum::response::Response;
use http::{HeaderName, HeaderValue};
use rand::RngCore;
use std::borrow::Cow;
use std::future::Future;
use std::sync::Arc;
use tracing::Instrument;

use infergate_kserve::http_error::Logged;
use infergate_telemetry::request_id::Trace;

pub const HEADER: HeaderName = HeaderName::from_static("x-request-id");
const MAX_LEN: usize = 128;

/// The request's id, as a request extension.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestId(pub Arc<str>);

impl RequestId {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Whether a client-supplied id may be echoed into headers and logs as is.
fn is_sane(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:/+=@".contains(&b))
}

/// 128 random bits in hex.
pub fn generate() -> String {
    let mut bytes = [0u8; 16];
    rand::rng().fill_bytes(&mut bytes);
    // Written out rather than `hex::encode`, which pushes char by char (≈ 1,200 instructions
    // per request, most of this function).
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(32);
    for b in bytes {
        text.push(char::from(DIGITS[usize::from(b >> 4)]));
        text.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    text
}

/// Gives `request` its id and runs `next` with it: outermost (`api::front`), so even refused
/// requests carry their id and are logged. `trusted_sampling` says whether the caller's
/// `traceparent` sampled flag may decide that its trace is recorded.
pub async fn identified<F, Fut>(
    mut request: Request,
    trusted_sampling: impl FnOnce(&Request) -> bool,
    next: F,
) -> Response
where
    F: FnOnce(Request) -> Fut,
    Fut: Future<Output = Response>,
{
    let id = request
        .headers()
        .get(&HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|v| is_sane(v))
        .map(str::to_string)
        .unwrap_or_else(generate);
    let (span, handling, trace_header) = traced(&request, &id, trusted_sampling);
    let method = request.method().clone();
    let uri = request.uri().clone();
    // One allocation serves the extension, the task's scope and the answer's header.
    let id: Arc<str> = Arc::from(id);
    request.extensions_mut().insert(RequestId(id.clone()));
    let started = std::time::Instant::now();
    let mut response = handled(handling, id.clone(), next(request), &span).await;
    let elapsed_ms = started.elapsed().as_secs_f64() * 1000.0;
    let status = response.status().as_u16();
    // Errors are logged here, once, with their causes (the answer carries only the message).
    let error = response.extensions_mut().remove::<Logged>();
    span.in_scope(|| {
        if let Some(Logged(error)) = error {
            error.log_with("http", Some(method.as_str()), Some(uri.path()));
        }
        tracing::debug!(%method, path = uri.path(), status, elapsed_ms, "request finished")
    });
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert(HEADER, value);
    }
    if let Some(trace) = trace_header {
        response
            .headers_mut()
            .insert(infergate_telemetry::w3c::TRACE_ID, trace);
    }
    response
}

/// How a request is handled, by the decision on its trace.
enum Handling {
    /// Decided at the front door (or not at all, while traces are not exported).
    Decided(Trace),
    /// Its handler decides once it knows the model (`crate::model_trace`).
    Deferred(infergate_telemetry::head::Undecided),
}

/// The request's span, how it is handled and the answer's `X-Trace-Id`.
///
/// The span carries the id alone: every field of a span is formatted into text when the span
/// opens, and the method and path with it took ≈ 2,500 of the span's ≈ 4,200 instructions per
/// request. They are named where they are needed, on the request's own lines (both are cheap
/// to keep: the method is an enum, the URI shares the head's buffer). A recorded trace's ids
/// are fields of the span too, so that every log line of the request leads to its trace; they
/// stay empty (never formatted) otherwise.
///
/// While traces are exported the trace is decided first (`infergate_telemetry::head`): a
/// request whose trace is not recorded opens its span where the OpenTelemetry layer does not
/// look, as without traces. A request that names its model in its body is decided by its
/// handler instead, while the model matters.
fn traced(
    request: &Request,
    id: &str,
    trusted_sampling: impl FnOnce(&Request) -> bool,
) -> (tracing::Span, Handling, Option<HeaderValue>) {
    use infergate_telemetry::head::{self, Head};
    /// What the front door knows of the trace.
    enum Front {
        /// Traces are not exported.
        Off,
        Decided(Head),
        /// The request names its model in its body: its handler decides.
        Deferred(head::Undecided),
    }
    let front = if infergate_telemetry::exporting() {
        let trusted = trusted_sampling(request);
        let path = request.uri().path();
        // Only while some model's settings differ from the others' (cheaper otherwise).
        let per_model = infergate_telemetry::sampling::per_model();
        let model = per_model.then(|| inferred_model(path)).flatten();
        let parent = infergate_telemetry::w3c::extract(request.headers(), trusted);
        if per_model && model.is_none() && crate::model_trace::names_model_in_body(path) {
            Front::Deferred(head::undecided(parent))
        } else {
            Front::Decided(head::decide(parent, model.as_deref()))
        }
    } else {
        Front::Off
    };
    let span = match &front {
        Front::Off | Front::Decided(Head { recorded: true, .. }) => tracing::info_span!(
            "request",
            request_id = %id,
            trace_id = tracing::field::Empty,
            span_id = tracing::field::Empty
        ),
        Front::Decided(_) | Front::Deferred(_) => tracing::info_span!(
            target: infergate_telemetry::UNTRACED,
            "request",
            request_id = %id,
            trace_id = tracing::field::Empty,
            span_id = tracing::field::Empty
        ),
    };
    // The answer's `X-Trace-Id`, and for a recorded trace the span's ids in its log lines.
    match front {
        Front::Off => (span, Handling::Decided(Trace::Undecided), None),
        Front::Deferred(undecided) => (span, Handling::Deferred(undecided), None),
        Front::Decided(head) if head.recorded => {
            infergate_telemetry::w3c::continue_decided(&span, head.parent);
            let header = infergate_telemetry::w3c::record_ids(&span);
            let trace = match header {
                Some(_) => Trace::Recorded,
                None => Trace::Undecided,
            };
            (span, Handling::Decided(trace), header)
        }
        Front::Decided(head) => {
            let header = head::header(head.trace_id);
            let trace = Trace::Unrecorded(head.trace_id, head.trace_state);
            (span, Handling::Decided(trace), header)
        }
    }
}

/// Runs `handling` (the request's handling) as the request `id`, inside `span`, as `handling`
/// says. The spans below the request's follow its trace: their sites need not look it up again.
/// Not an `async fn`: its future would hold the handling twice over, and the deferred case is
/// boxed, so that the future of every other request need not hold it.
fn handled<F: Future<Output = Response>>(
    handling: Handling,
    id: Arc<str>,
    next: F,
    span: &tracing::Span,
) -> impl Future<Output = Response> {
    use futures_util::future::Either;
    use infergate_telemetry::request_id::scope;
    let span = span.clone();
    match handling {
        Handling::Decided(trace) => Either::Left(scope(id, trace, next).instrument(span)),
        Handling::Deferred(undecided) => {
            let scoped = crate::model_trace::scope(undecided, scope(id, Trace::Deferred, next));
            Either::Right(Box::pin(scoped.instrument(span)))
        }
    }
}

/// The model a KServe inference path names (`/v2/models/{m}[/versions/{v}]/infer`), decoded as
/// the router decodes it, whose trace settings then decide whether the request's trace is
/// recorded: the sampler decides when the request's span opens, before routing.
fn inferred_model(path: &str) -> Option<Cow<'_, str>> {
    let rest = path.strip_prefix("/v2/models/")?.strip_suffix("/infer")?;
    let model = match rest.split_once('/') {
        None => rest,
        Some((model, version)) => {
            let version = version.strip_prefix("versions/")?;
            if version.is_empty() || version.contains('/') {
                return None;
            }
            model
        }
    };
    if model.is_empty() {
        return None;
    }
    if !model.contains('%') {
        return Some(Cow::Borrowed(model));
    }
    let bytes = model.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            decoded.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            decoded.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(decoded).ok().map(Cow::Owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_of_an_inference_path() {
        let model = |path| inferred_model(path).map(Cow::into_owned);
        assert_eq!(model("/v2/models/mlp/infer").as_deref(), Some("mlp"));
        assert_eq!(
            model("/v2/models/mlp/versions/2/infer").as_deref(),
            Some("mlp")
        );
        assert_eq!(
            model("/v2/models/my%20mlp/infer").as_deref(),
            Some("my mlp")
        );
        for other in [
            "/v2/models/mlp",
            "/v2/models//infer",
            "/v2/models/mlp/versions//infer",
            "/v2/models/mlp/ready/infer",
            "/v2/models/mlp/versions/1/x/infer",
            "/v1/chat/completions",
            "/v2/models/bad%2/infer",
            "/v2/models/bad%ff/infer",
        ] {
            assert_eq!(inferred_model(other), None, "{other}");
        }
    }

    #[test]
    fn sane_ids_are_kept_and_others_replaced() {
        for ok in ["abc", "req-1_2.3:4/5+6=7@8", &"a".repeat(128)] {
            assert!(is_sane(ok), "{ok}");
        }
        for bad in ["", "a b", "a\nb", "ü", "<script>", &"a".repeat(129)] {
            assert!(!is_sane(bad), "{bad:?}");
        }
        let g = generate();
        assert_eq!(g.len(), 32);
        assert!(is_sane(&g));
        assert_ne!(g, generate());
    }
}
