//! The workers' Prometheus metrics, read from the live registry at each scrape: per worker
//! `up`, heartbeat age, in-flight (as reported) and outstanding (as the manager counts), and the
//! routing counters (retries on another worker, 503s for want of a worker, direct tokens issued).

use infergate_cluster::registry::WorkerView;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Unit;
use std::sync::atomic::{AtomicU64, Ordering};

/// The manager's routing counters.
#[derive(Debug, Default)]
pub struct RoutingCounters {
    pub retries: AtomicU64,
    /// Retries of requests that had reached their first worker (which may have run them).
    pub retries_sent: AtomicU64,
    /// Requests ended because their worker was declared lost or removed while they were there.
    pub cut: AtomicU64,
    pub no_worker: AtomicU64,
    pub direct_tokens: AtomicU64,
    /// Request body bytes sent to workers (tensors and their description).
    pub sent_bytes: AtomicU64,
}

impl RoutingCounters {
    pub fn count(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WorkerLabels {
    worker: String,
    address: String,
}

#[derive(Debug)]
pub struct Snapshot {
    workers: Vec<WorkerView>,
    counters: [u64; 6],
}

impl Snapshot {
    /// The metrics of `workers` (the registry's view) and the routing `counters`.
    pub fn read(workers: Vec<WorkerView>, counters: &RoutingCounters) -> Snapshot {
        let c = counters;
        Snapshot {
            workers,
            counters: [
                &c.retries,
                &c.retries_sent,
                &c.cut,
                &c.no_worker,
                &c.direct_tokens,
                &c.sent_bytes,
            ]
            .map(|a| a.load(Ordering::Relaxed)),
        }
    }
}

impl prometheus_client::collector::Collector for Snapshot {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        type Read = fn(&WorkerView) -> f64;
        let gauges: [(&str, &str, Option<Unit>, Read); 4] = [
            (
                "worker_up",
                "1 while the worker is ready for requests (not draining, not lost)",
                None,
                |w| f64::from(u8::from(w.state.routable())),
            ),
            (
                "worker_heartbeat_age",
                "Time since the worker's last heartbeat, by the manager's clock",
                Some(Unit::Seconds),
                |w| w.last_seen_ms as f64 / 1000.0,
            ),
            (
                "worker_in_flight",
                "Requests running or queued on the worker, as it last reported",
                None,
                |w| f64::from(w.report.in_flight),
            ),
            (
                "worker_outstanding",
                "Requests the manager has sent to the worker and not yet seen answered",
                None,
                |w| f64::from(w.outstanding),
            ),
        ];
        for (name, help, unit, read) in gauges {
            let mut family = encoder.encode_descriptor(
                name,
                help,
                unit.as_ref(),
                ConstGauge::new(0.0f64).metric_type(),
            )?;
            for w in &self.workers {
                let labels = WorkerLabels {
                    worker: w.info.id.clone(),
                    address: w.info.advertise.clone(),
                };
                ConstGauge::new(read(w)).encode(family.encode_family(&labels)?)?;
            }
        }
        let counters = [
            (
                "worker_retries",
                "Requests retried on another worker after theirs failed before answering",
            ),
            (
                "worker_retries_sent",
                "Retries of requests that had reached their first worker, which may have run them too",
            ),
            (
                "worker_requests_cut",
                "Requests ended because their worker was declared lost or removed while they were there",
            ),
            (
                "worker_unavailable",
                "Requests answered 503 because no worker could serve their model",
            ),
            (
                "direct_tokens_issued",
                "Direct-mode tokens issued (POST /v2/models/{m}/assign)",
            ),
            (
                "worker_request_bytes",
                "Request body bytes the manager sent to workers (a retry counts again)",
            ),
        ];
        for ((name, help), value) in counters.into_iter().zip(self.counters) {
            let metric = ConstCounter::new(value);
            metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)?;
        }
        Ok(())
    }
}
