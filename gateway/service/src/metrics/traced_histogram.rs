//! Latency histograms whose observations inside a recorded trace carry the trace's id as their
//! bucket's exemplar (OpenMetrics: `# {trace_id="..."} 0.012 1700000000.0`), so that a bucket
//! on a chart leads to a trace of a request that landed in it. While traces are not exported an
//! observation costs what a plain histogram's does, and a relaxed load.

use super::labels::TraceExemplar;
use prometheus_client::encoding::{EncodeMetric, MetricEncoder};
use prometheus_client::metrics::exemplar::HistogramWithExemplars;
use prometheus_client::metrics::{MetricType, TypedMetric};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// The exemplar of an observation made in the current request: its trace's id while that trace
/// is recorded, else `None` (a relaxed load while traces are not exported). Where the
/// observation happens outside the request's task (a blocking thread, a response body's
/// stream), look it up once in the request's task and pass it along.
pub fn current_exemplar() -> Option<TraceExemplar> {
    infergate_telemetry::recorded_trace_id().map(|trace_id| TraceExemplar { trace_id })
}

/// A latency histogram (seconds) with trace exemplars, whose sum and count stay readable
/// (prometheus-client's histogram with exemplars does not expose them).
#[derive(Clone, Debug)]
pub struct TracedHistogram {
    histogram: HistogramWithExemplars<TraceExemplar>,
    totals: Arc<Totals>,
}

#[derive(Debug, Default)]
struct Totals {
    count: AtomicU64,
    nanos: AtomicU64,
}

impl TracedHistogram {
    pub fn new(buckets: impl IntoIterator<Item = f64>) -> TracedHistogram {
        TracedHistogram {
            histogram: HistogramWithExemplars::new(buckets.into_iter()),
            totals: Arc::default(),
        }
    }

    /// Observes `elapsed`; with an exemplar, it becomes its bucket's (stamped now).
    pub fn observe(&self, elapsed: Duration, exemplar: Option<TraceExemplar>) {
        let at = exemplar.is_some().then(SystemTime::now);
        self.histogram.observe(elapsed.as_secs_f64(), exemplar, at);
        self.totals.count.fetch_add(1, Ordering::Relaxed);
        let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        self.totals.nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    /// Seconds observed, in all.
    pub fn sum(&self) -> f64 {
        Duration::from_nanos(self.totals.nanos.load(Ordering::Relaxed)).as_secs_f64()
    }

    /// Observations.
    pub fn count(&self) -> u64 {
        self.totals.count.load(Ordering::Relaxed)
    }
}

impl TypedMetric for TracedHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for TracedHistogram {
    fn encode(&self, encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        self.histogram.encode(encoder)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::registry::Registry;

    #[test]
    fn an_observation_with_an_exemplar_shows_it_on_its_bucket_only() {
        let histogram = TracedHistogram::new([0.01, 0.1]);
        let mut registry = Registry::default();
        registry.register("call_duration_seconds", "Calls", histogram.clone());
        histogram.observe(Duration::from_millis(5), None);
        let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736".to_owned();
        histogram.observe(Duration::from_millis(50), Some(TraceExemplar { trace_id }));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        let line = |prefix: &str| {
            text.lines()
                .find(|l| l.starts_with(prefix))
                .unwrap_or_else(|| panic!("{prefix} in {text}"))
        };
        assert_eq!(
            line("call_duration_seconds_bucket{le=\"0.01\"}"),
            "call_duration_seconds_bucket{le=\"0.01\"} 1"
        );
        assert!(
            line("call_duration_seconds_bucket{le=\"0.1\"}")
                .starts_with("call_duration_seconds_bucket{le=\"0.1\"} 2 # {trace_id=\"4bf92f3577b34da6a3ce929d0e0e4736\"} 0.05 "),
            "{text}"
        );
        assert_eq!(histogram.count(), 2);
        assert!((histogram.sum() - 0.055).abs() < 1e-9);
    }
}
