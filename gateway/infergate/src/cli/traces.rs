//! The OpenTelemetry export of `serve` and `worker`: an SDK tracer provider with a bounded
//! batch queue and the OTLP/HTTP protobuf exporter, the sampler that decides whose sampled
//! flag counts, and the counts of spans lost that are reported at exit. Installed only when an
//! endpoint is configured.

use infergate_telemetry::TrustedSampling;
use opentelemetry::trace::{
    Link, SamplingDecision, SamplingResult, SpanKind, TraceContextExt, TraceId, TracerProvider,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Sampler, SdkTracer, SdkTracerProvider, ShouldSample,
    SpanData, SpanExporter, SpanProcessor,
};
use opentelemetry_sdk::Resource;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What the export needs from `serve`'s configuration or `worker`'s flags.
pub struct Settings {
    pub endpoint: String,
    pub service_name: String,
    /// `server`, `manager` or `worker`: the `infergate.role` resource attribute.
    pub role: &'static str,
    pub sample_ratio: f64,
    pub max_queued_spans: usize,
}

/// The running export: shut it down at exit so queued spans are sent.
pub struct Export {
    provider: SdkTracerProvider,
    counts: Arc<Counts>,
}

#[derive(Default)]
struct Counts {
    ended: AtomicU64,
    sent: AtomicU64,
    failed: AtomicU64,
}

/// Longest wait for one batch to reach the collector: a collector that is down or slow costs
/// the export thread this much per batch, never a request.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);

/// Starts the export and returns its tracer (for the `tracing` layer).
pub fn start(settings: &Settings) -> anyhow::Result<(Export, SdkTracer)> {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(settings.endpoint.clone())
        .with_timeout(EXPORT_TIMEOUT)
        .build()
        .map_err(|e| {
            anyhow::anyhow!(
                "the OTLP exporter to {} cannot be built: {e}",
                settings.endpoint
            )
        })?;
    let counts = Arc::new(Counts::default());
    let batch = BatchSpanProcessor::builder(Counted {
        inner: exporter,
        counts: counts.clone(),
    })
    .with_batch_config(
        BatchConfigBuilder::default()
            .with_max_queue_size(settings.max_queued_spans)
            .with_scheduled_delay(Duration::from_secs(1))
            .build(),
    )
    .build();
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
            counts: counts.clone(),
        })
        .with_sampler(Gate {
            ratio: Sampler::TraceIdRatioBased(settings.sample_ratio),
        })
        .with_resource(resource)
        .build();
    let tracer = provider.tracer("infergate");
    Ok((Export { provider, counts }, tracer))
}

impl Export {
    /// Sends what is queued (bounded by the export timeout) and says how many spans were lost.
    pub fn shutdown(self) {
        if let Err(e) = self.provider.shutdown() {
            tracing::warn!("traces: the export did not shut down cleanly: {e}");
        }
        let ended = self.counts.ended.load(Ordering::Relaxed);
        let sent = self.counts.sent.load(Ordering::Relaxed);
        let failed = self.counts.failed.load(Ordering::Relaxed);
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

/// Parent-based sampling where a remote parent's sampled flag counts only when it is trusted
/// ([`TrustedSampling`]): any other trace, the caller's trace id kept, is sampled by ratio.
#[derive(Debug, Clone)]
struct Gate {
    ratio: Sampler,
}

impl ShouldSample for Gate {
    fn should_sample(
        &self,
        parent: Option<&Context>,
        trace_id: TraceId,
        name: &str,
        kind: &SpanKind,
        attributes: &[KeyValue],
        links: &[Link],
    ) -> SamplingResult {
        if let Some(cx) = parent.filter(|cx| cx.has_active_span()) {
            let span = cx.span();
            let context = span.span_context();
            if context.is_valid() && (!context.is_remote() || cx.get::<TrustedSampling>().is_some())
            {
                return SamplingResult {
                    decision: if context.is_sampled() {
                        SamplingDecision::RecordAndSample
                    } else {
                        SamplingDecision::Drop
                    },
                    attributes: Vec::new(),
                    trace_state: context.trace_state().clone(),
                };
            }
        }
        self.ratio
            .should_sample(parent, trace_id, name, kind, attributes, links)
    }
}

/// The batch processor, counting the sampled spans handed to it.
#[derive(Debug)]
struct Ending {
    inner: BatchSpanProcessor,
    counts: Arc<Counts>,
}

impl std::fmt::Debug for Counts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Counts")
    }
}

impl SpanProcessor for Ending {
    fn on_start(&self, span: &mut opentelemetry_sdk::trace::Span, cx: &Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
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
    counts: Arc<Counts>,
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

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceState};

    fn decide(gate: &Gate, parent: Option<&Context>) -> SamplingDecision {
        let trace_id = TraceId::from_bytes([7; 16]);
        gate.should_sample(parent, trace_id, "request", &SpanKind::Internal, &[], &[])
            .decision
    }

    fn parent(sampled: bool, remote: bool) -> Context {
        let flags = if sampled {
            TraceFlags::SAMPLED
        } else {
            TraceFlags::NOT_SAMPLED
        };
        let context = SpanContext::new(
            TraceId::from_bytes([7; 16]),
            SpanId::from_bytes([1; 8]),
            flags,
            remote,
            TraceState::default(),
        );
        Context::new().with_remote_span_context(context)
    }

    #[test]
    fn only_a_trusted_remote_parent_decides_and_local_parents_are_followed() {
        let never = Gate {
            ratio: Sampler::TraceIdRatioBased(0.0),
        };
        let always = Gate {
            ratio: Sampler::TraceIdRatioBased(1.0),
        };
        let record = SamplingDecision::RecordAndSample;
        assert_eq!(decide(&never, None), SamplingDecision::Drop);
        assert_eq!(decide(&always, None), record);
        // An untrusted caller cannot force recording, nor prevent it.
        assert_eq!(
            decide(&never, Some(&parent(true, true))),
            SamplingDecision::Drop
        );
        assert_eq!(decide(&always, Some(&parent(false, true))), record);
        // A trusted one decides either way.
        let trusted = |sampled| parent(sampled, true).with_value(TrustedSampling);
        assert_eq!(decide(&never, Some(&trusted(true))), record);
        assert_eq!(
            decide(&always, Some(&trusted(false))),
            SamplingDecision::Drop
        );
        // A span inside the process follows its parent.
        assert_eq!(decide(&never, Some(&parent(true, false))), record);
        assert_eq!(
            decide(&always, Some(&parent(false, false))),
            SamplingDecision::Drop
        );
    }
}
