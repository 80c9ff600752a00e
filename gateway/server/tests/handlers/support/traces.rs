//! Exported spans in process: the OpenTelemetry layer as `serve` installs it with an endpoint (the
//! same rule for which spans it sees, the same sampler), ending spans into memory instead of OTLP.
//! Installed for the whole test binary on first use: from then on traces are exported for every
//! test in it. The server-wide trace settings start at level `OFF` (nothing here starts them as
//! `serve` does), so mostly what a model's own settings or a trusted caller record is kept; tests
//! find their spans by trace id.

use opentelemetry::trace::TracerProvider;
use opentelemetry::Context;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, Span, SpanData, SpanProcessor};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

/// The span id of the caller's span that [`traceparent`] names.
pub const CALLER_SPAN: &str = "00f067aa0ba902b7";

/// A sampled `traceparent` continuing `trace` (32 hex digits) from [`CALLER_SPAN`].
pub fn traceparent(trace: &str) -> String {
    format!("00-{trace}-{CALLER_SPAN}-01")
}

/// `POST path` with `key` and the JSON `body`, sent with `traceparent` if given.
pub fn post(
    path: &str,
    key: &str,
    body: &serde_json::Value,
    traceparent: Option<&str>,
) -> http::Request<axum::body::Body> {
    let mut request = http::Request::builder()
        .method(http::Method::POST)
        .uri(path)
        .header(http::header::AUTHORIZATION, format!("Bearer {key}"))
        .header(http::header::CONTENT_TYPE, "application/json");
    if let Some(parent) = traceparent {
        request = request.header("traceparent", parent);
    }
    request
        .body(axum::body::Body::from(body.to_string()))
        .expect("request")
}

/// Spans kept at most: other tests' recorded requests end here too.
const KEPT: usize = 100_000;

static ENDED: Mutex<Vec<SpanData>> = Mutex::new(Vec::new());

/// Installs the layer once (traces exported from then on).
pub fn install() {
    static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();
    PROVIDER.get_or_init(|| {
        use tracing_subscriber::layer::SubscriberExt;
        use tracing_subscriber::Layer;
        let provider = SdkTracerProvider::builder()
            .with_span_processor(Memory)
            .with_sampler(infergate_telemetry::sampler::Sampler)
            .build();
        // `serve`'s rule: a request whose trace is not recorded has its span where this
        // layer does not look.
        let only_traced = tracing_subscriber::filter::filter_fn(infergate_telemetry::exported);
        let spans = tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("handler-tests"))
            .with_context_activation(false)
            .with_filter(only_traced);
        tracing::subscriber::set_global_default(tracing_subscriber::registry().with(spans))
            .expect("no other subscriber in the handler tests");
        infergate_telemetry::set_exporting();
        provider
    });
}

/// The ended spans of trace `trace` (32 hex digits).
pub fn of(trace: &str) -> Vec<SpanData> {
    ENDED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .filter(|s| format!("{:032x}", s.span_context.trace_id()) == trace)
        .cloned()
        .collect()
}

/// The spans of `trace` once `done` holds for them, `what` naming the wait in the failure
/// (after 30 s): spans end on other tasks, after the answer.
pub async fn until(trace: &str, what: &str, done: impl Fn(&[SpanData]) -> bool) -> Vec<SpanData> {
    let started = std::time::Instant::now();
    loop {
        let spans = of(trace);
        if done(&spans) {
            return spans;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "trace {trace} never had {what}: it has {:?}",
            names(&spans)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The names of `spans`, sorted.
pub fn names(spans: &[SpanData]) -> Vec<String> {
    let mut names: Vec<String> = spans.iter().map(|s| s.name.to_string()).collect();
    names.sort();
    names
}

/// A string attribute of `span`.
pub fn attribute(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.to_string())
}

#[derive(Debug)]
struct Memory;

impl SpanProcessor for Memory {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        let mut ended = ENDED.lock().unwrap_or_else(PoisonError::into_inner);
        if ended.len() < KEPT {
            ended.push(span);
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }
}
