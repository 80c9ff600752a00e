//! The OpenTelemetry export of `serve` and `worker`: an SDK tracer provider with a bounded batch
//! queue and the OTLP exporter (HTTP/protobuf, or gRPC: [`super::otlp_grpc`]), the sampler that
//! decides whose sampled flag counts and applies the run-time trace settings
//! ([`infergate_telemetry::sampler`]), and the span counts (`/metrics`, and a warning at exit when
//! spans were lost). Installed only when an endpoint is configured.

use super::otlp_grpc;
use infergate_service::config::OtlpProtocol;
use infergate_telemetry::sampling;
use infergate_telemetry::span_counts::{SpanCounts, SPANS};
use opentelemetry::trace::TracerProvider;
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracer, SdkTracerProvider, SpanData, SpanExporter,
    SpanProcessor,
};
use opentelemetry_sdk::Resource;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// What the export needs from `serve`'s configuration or `worker`'s flags.
pub struct Settings {
    pub endpoint: String,
    pub protocol: OtlpProtocol,
    pub service_name: String,
    /// `server`, `manager` or `worker`: the `infergate.role` resource attribute.
    pub role: &'static str,
    pub sample_ratio: f64,
    pub max_queued_spans: usize,
}

/// The running export: shut it down at exit so queued spans are sent.
pub struct Export {
    provider: SdkTracerProvider,
}

/// Longest wait for one batch to reach the collector: a collector that is down or slow costs
/// the export thread this much per batch, never a request.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);

/// Starts the export and returns its tracer (for the `tracing` layer).
pub fn start(settings: &Settings) -> anyhow::Result<(Export, SdkTracer)> {
    let unbuilt = |e: &dyn std::fmt::Display| {
        anyhow::anyhow!(
            "the OTLP exporter to {} cannot be built: {e}",
            settings.endpoint
        )
    };
    let batch = match settings.protocol {
        OtlpProtocol::HttpProtobuf => batch(
            opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(Protocol::HttpBinary)
                .with_endpoint(settings.endpoint.clone())
                .with_timeout(EXPORT_TIMEOUT)
                .build()
                .map_err(|e| unbuilt(&e))?,
            settings,
        ),
        OtlpProtocol::Grpc => batch(
            otlp_grpc::exporter(&settings.endpoint, EXPORT_TIMEOUT).map_err(|e| unbuilt(&e))?,
            settings,
        ),
    };
    let resource = Resource::builder_empty()
        .with_service_name(settings.service_name.clone())
        .with_attributes([
            KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
            KeyValue::new("host.name", host_name()),
            KeyValue::new("infergate.role", settings.role),
        ])
        .build();
    let provider = SdkTracerProvider::builder()
        .with_span_processor(Ending {
            inner: batch,
            counts: &SPANS,
            capacity: settings.max_queued_spans as u64,
        })
        .with_sampler(infergate_telemetry::sampler::Sampler)
        .with_resource(resource)
        .build();
    sampling::start(settings.sample_ratio);
    let tracer = provider.tracer("infergate");
    Ok((Export { provider }, tracer))
}

/// The batch processor over `exporter`, counting what it sends and what fails.
fn batch<E: SpanExporter + 'static>(exporter: E, settings: &Settings) -> BatchSpanProcessor {
    BatchSpanProcessor::builder(Counted {
        inner: exporter,
        counts: &SPANS,
    })
    .with_batch_config(
        BatchConfigBuilder::default()
            .with_max_queue_size(settings.max_queued_spans)
            .with_scheduled_delay(Duration::from_secs(1))
            .build(),
    )
    .build()
}

impl Export {
    /// Sends what is queued (bounded by the export timeout) and says how many spans were lost.
    pub fn shutdown(self) {
        if let Err(e) = self.provider.shutdown() {
            tracing::warn!("traces: the export did not shut down cleanly: {e}");
        }
        let ended = SPANS.ended.load(Ordering::Relaxed);
        let sent = SPANS.sent.load(Ordering::Relaxed);
        let failed = SPANS.failed.load(Ordering::Relaxed);
        // Spans still queued after the shutdown's flush are lost too.
        let dropped = ended.saturating_sub(sent + failed);
        if failed > 0 || dropped > 0 {
            tracing::warn!(
                ended,
                sent,
                failed,
                dropped,
                "traces: spans lost (failed: the collector refused or did not answer; dropped: \
                 the queue was full)"
            );
        }
    }
}

/// `/proc/sys/kernel/hostname` (Linux), else `HOSTNAME`.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_owned())
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "unknown".into())
}

/// The batch processor, counting the sampled spans handed to it and dropping (counted) those
/// that find `capacity` spans waiting: the batch processor's own queue, as large, then never
/// fills, and its drops need no count of their own.
#[derive(Debug)]
struct Ending {
    inner: BatchSpanProcessor,
    counts: &'static SpanCounts,
    capacity: u64,
}

impl SpanProcessor for Ending {
    fn on_start(&self, span: &mut opentelemetry_sdk::trace::Span, cx: &Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        if self.counts.queued() >= self.capacity {
            self.counts.ended.fetch_add(1, Ordering::Relaxed);
            self.counts.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.counts.ended.fetch_add(1, Ordering::Relaxed);
        self.inner.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// The OTLP exporter, counting the spans it sent and those it could not.
#[derive(Debug)]
struct Counted<E> {
    inner: E,
    counts: &'static SpanCounts,
}

impl<E: SpanExporter> SpanExporter for Counted<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let spans = batch.len() as u64;
        let result = self.inner.export(batch).await;
        let count = if result.is_ok() {
            &self.counts.sent
        } else {
            &self.counts.failed
        };
        count.fetch_add(spans, Ordering::Relaxed);
        result
    }

    fn shutdown_with_timeout(&mut self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&mut self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}
