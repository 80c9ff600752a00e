//! The engine's state read at each scrape, named after Triton's `nv_inference_*` counters:
//! per version loaded, in flight, request and execution counts, cumulative queue and compute
//! times, the batch size histogram; host memory against its budget; on a GPU, the native ops'
//! memory pools.

use super::labels::ModelLabels;
use crate::catalog::model_key;
use crate::catalog::Catalog;
use infergate_engine::kernels::device::memory::MemoryStats;
use infergate_engine::kernels::device::pool::PoolStats;
use infergate_engine::Engine;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabelSet, EncodeMetric, MetricEncoder, NoLabelSet,
};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Unit;

/// The engine's per-version state and counters, read once per scrape.
#[derive(Debug)]
pub(super) struct EngineSnapshot {
    versions: Vec<VersionSnapshot>,
    /// Reserved bytes and the budget, from [`infergate_engine::Engine::memory`].
    host_memory: (u64, Option<u64>),
    gpu_memory: Option<MemoryStats>,
}

#[derive(Debug)]
struct VersionSnapshot {
    labels: ModelLabels,
    loaded: bool,
    in_flight: u64,
    stats: Option<infergate_engine::ModelStats>,
}

impl EngineSnapshot {
    pub(super) fn read(catalog: &Catalog, engine: &Engine) -> EngineSnapshot {
        let versions = catalog
            .all()
            .iter()
            .map(|record| {
                let key = model_key(record);
                VersionSnapshot {
                    labels: ModelLabels {
                        model: record.name.clone(),
                        version: record.version.to_string(),
                    },
                    loaded: engine.state(&key) == infergate_engine::ModelState::Ready,
                    in_flight: engine.in_flight(&key) as u64,
                    stats: engine.stats(&key),
                }
            })
            .collect();
        EngineSnapshot {
            versions,
            host_memory: engine.memory(),
            gpu_memory: engine.gpu_memory(),
        }
    }
}

fn ns_to_s(ns: u64) -> f64 {
    ns as f64 / 1e9
}

impl Collector for EngineSnapshot {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        type Read = fn(&infergate_engine::ModelStats) -> f64;
        type ReadGauge = fn(&VersionSnapshot) -> i64;
        let gauges: [(&str, &str, ReadGauge); 2] = [
            ("model_loaded", "1 when the model version is loaded", |v| {
                v.loaded as i64
            }),
            (
                "model_in_flight",
                "Requests queued or running on the model version",
                |v| v.in_flight as i64,
            ),
        ];
        for (name, help, read) in gauges {
            let mut family =
                encoder.encode_descriptor(name, help, None, ConstGauge::new(0i64).metric_type())?;
            for v in &self.versions {
                ConstGauge::new(read(v)).encode(family.encode_family(&v.labels)?)?;
            }
        }
        let counters: [(&str, &str, Read); 8] = [
            (
                "inference_request_success",
                "Successful inference requests (Triton: nv_inference_request_success)",
                |s| s.success.count as f64,
            ),
            (
                "inference_request_failure",
                "Failed inference requests (Triton: nv_inference_request_failure)",
                |s| s.fail.count as f64,
            ),
            (
                "inference_count",
                "Inferences performed, counting each sample of a batch (Triton: nv_inference_count)",
                |s| s.inference_count as f64,
            ),
            (
                "inference_exec_count",
                "Model executions, a batch counting once (Triton: nv_inference_exec_count)",
                |s| s.execution_count as f64,
            ),
            (
                "queue_duration_seconds",
                "Cumulative time requests waited in the model's queue (Triton: nv_inference_queue_duration_us)",
                |s| ns_to_s(s.queue.ns),
            ),
            (
                "compute_input_duration_seconds",
                "Cumulative input preparation time (Triton: nv_inference_compute_input_duration_us)",
                |s| ns_to_s(s.compute_input.ns),
            ),
            (
                "compute_infer_duration_seconds",
                "Cumulative model execution time (Triton: nv_inference_compute_infer_duration_us)",
                |s| ns_to_s(s.compute_infer.ns),
            ),
            (
                "compute_output_duration_seconds",
                "Cumulative output extraction time (Triton: nv_inference_compute_output_duration_us)",
                |s| ns_to_s(s.compute_output.ns),
            ),
        ];
        self.encode_batch_sizes(&mut encoder)?;
        self.encode_host_memory(&mut encoder)?;
        self.encode_gpu_pools(&mut encoder)?;
        for (name, help, read) in counters {
            let mut family = encoder.encode_descriptor(
                name,
                help,
                None,
                ConstCounter::new(0.0f64).metric_type(),
            )?;
            for v in &self.versions {
                let value = v.stats.as_ref().map(read).unwrap_or(0.0);
                ConstCounter::new(value).encode(family.encode_family(&v.labels)?)?;
            }
        }
        Ok(())
    }
}

/// Upper bounds of the batch size histogram's buckets; the encoder writes infinity as `+Inf`.
const BATCH_SIZE_BUCKETS: [f64; 10] = [
    1.0,
    2.0,
    4.0,
    8.0,
    16.0,
    32.0,
    64.0,
    128.0,
    256.0,
    f64::INFINITY,
];

impl EngineSnapshot {
    /// `infergate_batch_size{model,version}`: executions by the number of samples they ran,
    /// from the engine's per-batch-size counters (Triton's `batch_stats`).
    fn encode_batch_sizes(&self, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut family = encoder.encode_descriptor(
            "batch_size",
            "Samples per model execution (each execution observed once)",
            None,
            MetricType::Histogram,
        )?;
        for v in &self.versions {
            let batches = v.stats.as_ref().map_or(&[][..], |s| &s.batch_stats[..]);
            BatchSizes::from_stats(batches).encode(family.encode_family(&v.labels)?)?;
        }
        Ok(())
    }

    /// Host memory reserved by loaded model instances, and the configured budget if any.
    fn encode_host_memory(&self, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let (used, budget) = self.host_memory;
        let used_metric = ConstGauge::new(used as i64);
        used_metric.encode(encoder.encode_descriptor(
            "host_memory_reserved",
            "Host memory reserved against the budget by loaded model instances",
            Some(&Unit::Bytes),
            used_metric.metric_type(),
        )?)?;
        if let Some(budget) = budget {
            let budget_metric = ConstGauge::new(budget as i64);
            budget_metric.encode(encoder.encode_descriptor(
                "host_memory_budget",
                "Host memory budget for loaded model instances ([engine] host_memory_budget_bytes)",
                Some(&Unit::Bytes),
                budget_metric.metric_type(),
            )?)?;
        }
        Ok(())
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolLabels {
    /// `device` (GPU memory) or `pinned` (page-locked host staging).
    pool: &'static str,
}

impl EngineSnapshot {
    /// The GPU memory pools of the native ops, when they run on a GPU: bytes held and free,
    /// the limit, and how often a request was served from a free list (hit) or had to allocate
    /// (miss). Absent on CPU-only hosts.
    fn encode_gpu_pools(&self, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(memory) = &self.gpu_memory else {
            return Ok(());
        };
        let pools = [("device", &memory.device), ("pinned", &memory.pinned)];
        type Read = fn(&PoolStats) -> u64;
        let gauges: [(&str, &str, Read); 3] = [
            (
                "gpu_pool_held",
                "Bytes a GPU memory pool holds (lent out + free)",
                |p| p.held_bytes as u64,
            ),
            (
                "gpu_pool_free",
                "Bytes on a GPU memory pool's free lists",
                |p| p.free_bytes as u64,
            ),
            (
                "gpu_pool_limit",
                "Most bytes a GPU memory pool keeps",
                |p| p.limit_bytes as u64,
            ),
        ];
        for (name, help, read) in gauges {
            let mut family = encoder.encode_descriptor(
                name,
                help,
                Some(&Unit::Bytes),
                ConstGauge::new(0i64).metric_type(),
            )?;
            for (pool, stats) in pools {
                ConstGauge::new(read(stats) as i64)
                    .encode(family.encode_family(&PoolLabels { pool })?)?;
            }
        }
        let counters: [(&str, &str, Read); 3] = [
            (
                "gpu_pool_hits",
                "Buffer requests served from a GPU pool's free list",
                |p| p.hits,
            ),
            (
                "gpu_pool_misses",
                "Buffer requests that allocated (cudaMalloc / cudaHostAlloc)",
                |p| p.misses,
            ),
            (
                "gpu_pool_evictions",
                "Free blocks released to stay under a GPU pool's limit",
                |p| p.evictions,
            ),
        ];
        for (name, help, read) in counters {
            let mut family = encoder.encode_descriptor(
                name,
                help,
                None,
                ConstCounter::new(0u64).metric_type(),
            )?;
            for (pool, stats) in pools {
                ConstCounter::new(read(stats))
                    .encode(family.encode_family(&PoolLabels { pool })?)?;
            }
        }
        Ok(())
    }
}

/// A histogram read from counters kept elsewhere (prometheus-client has no constant histogram).
struct BatchSizes {
    sum: f64,
    count: u64,
    /// (upper bound, executions in that bucket alone); the encoder makes them cumulative.
    buckets: Vec<(f64, u64)>,
}

impl BatchSizes {
    fn from_stats(stats: &[infergate_engine::BatchStats]) -> BatchSizes {
        let mut buckets: Vec<(f64, u64)> = BATCH_SIZE_BUCKETS.iter().map(|&b| (b, 0)).collect();
        let (mut sum, mut count) = (0.0, 0);
        for s in stats {
            // Every execution of this size counts once in each of its counters.
            let executions = s.compute_infer.count;
            let size = s.batch_size as f64;
            sum += size * executions as f64;
            count += executions;
            if let Some(bucket) = buckets.iter_mut().find(|(bound, _)| size <= *bound) {
                bucket.1 += executions;
            }
        }
        BatchSizes {
            sum,
            count,
            buckets,
        }
    }
}

impl EncodeMetric for BatchSizes {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        encoder.encode_histogram::<NoLabelSet>(self.sum, self.count, &self.buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}
