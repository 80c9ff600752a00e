//! The log output and the OpenTelemetry layer behind one layer that decides, for each span and
//! event, which of the two sees it: the log what its filter (`INFERGATE_LOG`) keeps, the traces
//! infergate's own spans and events at info and above whatever the log level.
//!
//! tracing-subscriber's per-layer filters would decide the same, but each filtered layer looks
//! a span up in the registry at each of its enters and exits, and a request's span is entered
//! at every poll of the request: that was most of what exporting traces cost a request whose
//! trace is not recorded. Here nothing is looked up on enter or exit. The price: an exported
//! span ends when it closes rather than when it was last exited (for a span around a future,
//! the same moment but for the future's drop), and a log line inside a span only the traces see
//! names that span, without its fields.

use std::any::TypeId;
use std::marker::PhantomData;
use tracing::level_filters::LevelFilter;
use tracing::span;
use tracing::subscriber::Interest;
use tracing::{Event, Metadata, Subscriber};
use tracing_subscriber::filter::EnvFilter;
use tracing_subscriber::fmt::FormattedFields;
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::LookupSpan;

use infergate_telemetry::exported;

/// `log` (a formatting layer whose fields formatter is `N`) filtered by `filter`, beside
/// `traces`, which sees the spans and events [`exported`] says.
pub struct Split<N, L, T> {
    log: L,
    filter: EnvFilter,
    traces: T,
    fields: PhantomData<fn() -> N>,
}

impl<N, L, T> Split<N, L, T> {
    pub fn new(log: L, filter: EnvFilter, traces: T) -> Self {
        Self {
            log,
            filter,
            traces,
            fields: PhantomData,
        }
    }
}

/// How a fields formatter writes a span without fields.
pub trait NoFields {
    const TEXT: &'static str;
}

impl NoFields for tracing_subscriber::fmt::format::DefaultFields {
    const TEXT: &'static str = "";
}

impl NoFields for tracing_subscriber::fmt::format::JsonFields {
    const TEXT: &'static str = "{}";
}

impl<N, L, T> Split<N, L, T> {
    fn logged<S>(&self, metadata: &Metadata<'_>, cx: &Context<'_, S>) -> bool
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        // The spans that exist only for traces, most of a recorded request's, are never logged:
        // said without walking the filter's directives.
        !metadata.target().starts_with(infergate_telemetry::TARGET)
            && <EnvFilter as Layer<S>>::enabled(&self.filter, metadata, cx.clone())
    }
}

impl<S, N, L, T> Layer<S> for Split<N, L, T>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: NoFields + 'static,
    L: Layer<S>,
    T: Layer<S>,
{
    fn on_register_dispatch(&self, subscriber: &tracing::Dispatch) {
        self.log.on_register_dispatch(subscriber);
        self.traces.on_register_dispatch(subscriber);
    }

    fn on_layer(&mut self, subscriber: &mut S) {
        <EnvFilter as Layer<S>>::on_layer(&mut self.filter, subscriber);
        self.log.on_layer(subscriber);
        self.traces.on_layer(subscriber);
    }

    /// A callsite either side always wants is always enabled, one neither wants never: both
    /// filters are static, so most callsites are decided once.
    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        let log = <EnvFilter as Layer<S>>::register_callsite(&self.filter, metadata);
        if log.is_always() || exported(metadata) {
            Interest::always()
        } else if log.is_never() {
            Interest::never()
        } else {
            Interest::sometimes()
        }
    }

    fn enabled(&self, metadata: &Metadata<'_>, cx: Context<'_, S>) -> bool {
        exported(metadata) || self.logged(metadata, &cx)
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        <EnvFilter as Layer<S>>::max_level_hint(&self.filter).map(|log| log.max(LevelFilter::INFO))
    }

    fn on_new_span(&self, attrs: &span::Attributes<'_>, id: &span::Id, cx: Context<'_, S>) {
        <EnvFilter as Layer<S>>::on_new_span(&self.filter, attrs, id, cx.clone());
        let metadata = attrs.metadata();
        if exported(metadata) {
            self.traces.on_new_span(attrs, id, cx.clone());
        }
        if self.logged(metadata, &cx) {
            self.log.on_new_span(attrs, id, cx);
        } else if let Some(span) = cx.span(id) {
            // The log's formatters expect every span in a line's scope to carry its fields.
            span.extensions_mut()
                .insert(FormattedFields::<N>::new(N::TEXT.to_string()));
        }
    }

    fn on_record(&self, id: &span::Id, values: &span::Record<'_>, cx: Context<'_, S>) {
        <EnvFilter as Layer<S>>::on_record(&self.filter, id, values, cx.clone());
        let Some(metadata) = cx.metadata(id) else {
            return;
        };
        if exported(metadata) {
            self.traces.on_record(id, values, cx.clone());
        }
        if self.logged(metadata, &cx) {
            self.log.on_record(id, values, cx);
        }
    }

    fn on_follows_from(&self, id: &span::Id, follows: &span::Id, cx: Context<'_, S>) {
        self.log.on_follows_from(id, follows, cx.clone());
        self.traces.on_follows_from(id, follows, cx);
    }

    fn on_event(&self, event: &Event<'_>, cx: Context<'_, S>) {
        let metadata = event.metadata();
        if exported(metadata) {
            self.traces.on_event(event, cx.clone());
        }
        if self.logged(metadata, &cx) {
            self.log.on_event(event, cx);
        }
    }

    fn on_enter(&self, id: &span::Id, cx: Context<'_, S>) {
        <EnvFilter as Layer<S>>::on_enter(&self.filter, id, cx.clone());
        self.log.on_enter(id, cx.clone());
        self.traces.on_enter(id, cx);
    }

    /// Not passed to the traces: the OpenTelemetry layer would look the span up to note the
    /// time, and ends the span at its close without it.
    fn on_exit(&self, id: &span::Id, cx: Context<'_, S>) {
        <EnvFilter as Layer<S>>::on_exit(&self.filter, id, cx.clone());
        self.log.on_exit(id, cx);
    }

    fn on_close(&self, id: span::Id, cx: Context<'_, S>) {
        <EnvFilter as Layer<S>>::on_close(&self.filter, id.clone(), cx.clone());
        self.log.on_close(id.clone(), cx.clone());
        self.traces.on_close(id, cx);
    }

    fn on_id_change(&self, old: &span::Id, new: &span::Id, cx: Context<'_, S>) {
        self.log.on_id_change(old, new, cx.clone());
        self.traces.on_id_change(old, new, cx);
    }

    /// A pointer to `self` for `Self`'s type id, otherwise what one of the layers it owns
    /// returns for that id: each guarantees its pointer is to a value of that type living as long
    /// as the layer does, and so as long as `self`.
    #[allow(unsafe_code)]
    unsafe fn downcast_raw(&self, id: TypeId) -> Option<*const ()> {
        if id == TypeId::of::<Self>() {
            return Some(self as *const Self as *const ());
        }
        // The OpenTelemetry layer answers for the context that `OpenTelemetrySpanExt` reads.
        // SAFETY: the same contract as this function's, passed on to layers that keep it.
        unsafe {
            self.traces
                .downcast_raw(id)
                .or_else(|| self.log.downcast_raw(id))
                .or_else(|| <EnvFilter as Layer<S>>::downcast_raw(&self.filter, id))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::TracerProvider;
    use opentelemetry_sdk::error::OTelSdkResult;
    use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
    use std::io::Write;
    use std::sync::{Arc, Mutex};
    use tracing_subscriber::layer::SubscriberExt;

    /// The names of the spans exported, in the order they ended.
    #[derive(Debug, Clone, Default)]
    struct Names(Arc<Mutex<Vec<String>>>);

    impl SpanExporter for Names {
        async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
            if let Ok(mut names) = self.0.lock() {
                names.extend(batch.into_iter().map(|s| s.name.into_owned()));
            }
            Ok(())
        }
    }

    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .map_err(|_| std::io::ErrorKind::Other)?
                .extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Runs `f` under a subscriber made as `serve` makes it when it exports, with `log` as the
    /// log filter: the log's text and the exported spans' names.
    fn run(log: &str, json: bool, f: impl FnOnce()) -> (String, Vec<String>) {
        let lines = Lines::default();
        let exporter = Names::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        let traces = tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("test"))
            .with_context_activation(false)
            .with_tracked_inactivity(false);
        let writer = {
            let lines = lines.clone();
            move || lines.clone()
        };
        let filter = EnvFilter::new(format!("{log},{}=off", infergate_telemetry::TARGET));
        let log_layer = tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .with_writer(writer);
        let subscriber = tracing_subscriber::registry();
        if json {
            let split = Split::<tracing_subscriber::fmt::format::JsonFields, _, _>::new(
                log_layer.json(),
                filter,
                traces,
            );
            tracing::subscriber::with_default(subscriber.with(split), f);
        } else {
            let split = Split::<tracing_subscriber::fmt::format::DefaultFields, _, _>::new(
                log_layer, filter, traces,
            );
            tracing::subscriber::with_default(subscriber.with(split), f);
        }
        let _ = provider.force_flush();
        let names = exporter.0.lock().map(|n| n.clone()).unwrap_or_default();
        let text = String::from_utf8(lines.0.lock().map(|l| l.clone()).unwrap_or_default())
            .unwrap_or_default();
        (text, names)
    }

    fn request() {
        let request =
            tracing::info_span!(target: "infergate_server::request_id", "request", id = 7);
        let _entered = request.enter();
        let model =
            tracing::info_span!(target: infergate_telemetry::TARGET, "model run", queue_us = 3);
        let _model = model.enter();
        tracing::warn!(target: "infergate_server::api", "slow");
        tracing::debug!(target: "infergate_server::api", "detail");
    }

    #[test]
    fn each_side_sees_its_own() {
        for json in [false, true] {
            let (text, names) = run("info", json, request);
            assert_eq!(names, ["model run", "request"], "json {json}");
            assert!(text.contains("slow"), "{text}");
            assert!(!text.contains("detail"), "{text}");
            // The log names the request's fields, never the fields of the traces' own spans.
            assert!(text.contains('7'), "{text}");
            assert!(!text.contains("queue_us"), "{text}");
        }
    }

    #[test]
    fn the_traces_keep_infergate_spans_below_the_log_level() {
        let (text, names) = run("error", false, request);
        assert_eq!(names, ["model run", "request"]);
        assert!(!text.contains("slow"), "{text}");
        let (_, names) = run("info", false, || {
            let _s =
                tracing::info_span!(target: infergate_telemetry::UNTRACED, "request").entered();
            let _o = tracing::info_span!(target: "h2::proto", "other").entered();
        });
        assert!(names.is_empty(), "{names:?}");
    }
}
