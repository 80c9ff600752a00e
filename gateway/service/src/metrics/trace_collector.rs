//! The exported spans' fate, read at scrape time from the exporter's counts
//! (`infergate_telemetry::span_counts`): `infergate_trace_spans_total{outcome}` (`sent`,
//! `failed`: the collector refused or did not answer, `dropped`: the queue was full) and
//! `infergate_trace_spans_queued`. Present only while traces are exported.

use infergate_telemetry::span_counts::SPANS;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use std::sync::atomic::Ordering;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

#[derive(Debug)]
pub struct SpanSnapshot {
    outcomes: [(&'static str, u64); 3],
    queued: u64,
}

impl SpanSnapshot {
    /// `None` while traces are not exported: no series then.
    pub fn read() -> Option<SpanSnapshot> {
        infergate_telemetry::exporting().then(|| SpanSnapshot {
            outcomes: [
                ("sent", SPANS.sent.load(Ordering::Relaxed)),
                ("failed", SPANS.failed.load(Ordering::Relaxed)),
                ("dropped", SPANS.dropped.load(Ordering::Relaxed)),
            ],
            queued: SPANS.queued(),
        })
    }
}

impl prometheus_client::collector::Collector for SpanSnapshot {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut family = encoder.encode_descriptor(
            "trace_spans",
            "Recorded spans by outcome: sent to the collector, failed (refused or not answered \
             in time), dropped (the export queue was full)",
            None,
            ConstCounter::new(0u64).metric_type(),
        )?;
        for (outcome, count) in self.outcomes {
            ConstCounter::new(count).encode(family.encode_family(&OutcomeLabels { outcome })?)?;
        }
        let queued = ConstGauge::new(i64::try_from(self.queued).unwrap_or(i64::MAX));
        queued.encode(encoder.encode_descriptor(
            "trace_spans_queued",
            "Recorded spans waiting to be sent",
            None,
            queued.metric_type(),
        )?)?;
        Ok(())
    }
}
