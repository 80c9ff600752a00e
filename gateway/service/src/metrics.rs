//! Prometheus metrics (OpenMetrics text, encoded by the `prometheus-client` crate).
//!
//! Recorded by the gateway as requests pass:
//! - `infergate_http_requests_total{method,route,status}`: every HTTP request, by route template.
//! - `infergate_inference_requests_total` and `infergate_request_duration_seconds` (histogram)
//!   `{model,version,protocol,status}`: inference requests of every protocol (`kserve_http`,
//!   `openai`, `websocket`, `grpc`, and `pipeline` for raw-body pipeline runs), end to end as
//!   the gateway sees them; `status` is the HTTP status the outcome maps to (4xx and 5xx
//!   alike: a client error is an answer the client did not want either).
//! - `infergate_rate_limited_requests_total{key_id,reason}`: refusals by the per-key limiter.
//! - `infergate_plugin_call_duration_seconds{plugin,version,stage,outcome}` (histogram): every
//!   WebAssembly plugin call, `outcome` = `ok`, `bad_input`, `busy` or the fault kind.
//! - `infergate_generated_tokens_total{model,protocol}`, `infergate_generations_in_progress`,
//!   `infergate_websocket_connections`.
//!
//! Read from the engine at scrape time, named after Triton's `nv_inference_*` counters:
//! `infergate_inference_request_success_total`, `..._failure_total`, `infergate_inference_count_total`,
//! `infergate_inference_exec_count_total`, `infergate_queue_duration_seconds_total`,
//! `infergate_compute_{input,infer,output}_duration_seconds_total` `{model,version}`, and the
//! gauges `infergate_model_loaded{model,version}`, `infergate_model_in_flight{model,version}`;
//! the histogram `infergate_batch_size{model,version}` (samples per execution); and
//! `infergate_host_memory_reserved_bytes` / `infergate_host_memory_budget_bytes`; on a GPU, the
//! native ops' memory pools: `infergate_gpu_pool_{held,free,limit}_bytes{pool}` and
//! `infergate_gpu_pool_{hits,misses,evictions}_total{pool}` (`pool` = `device` or `pinned`).
//!
//! Chat models (GGUF), named after vLLM's metrics: `infergate_llm_time_to_first_token_seconds`
//! and `infergate_llm_inter_token_latency_seconds` (histograms, `{model}`, recorded as tokens
//! reach the gateway), and read at scrape time from each loaded version `{model,version}`:
//! `infergate_llm_num_requests_running`, `..._waiting`, `infergate_llm_kv_cache_usage_perc`
//! (0–1, shared prefixes counted per holder), `infergate_llm_prompt_tokens_total`,
//! `infergate_llm_generation_tokens_total`, `infergate_llm_prefix_cache_queries_total` and
//! `infergate_llm_prefix_cache_hits_total` (prompt tokens looked up / found in the cache).

use crate::catalog::model_key;
use crate::catalog::Catalog;
use crate::chat_models::LlmModels;
use crate::latency::LatencyHistograms;
use infergate_engine::kernels::device::memory::MemoryStats;
use infergate_engine::kernels::device::pool::PoolStats;
use infergate_engine::Engine;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabelSet, EncodeMetric, MetricEncoder, NoLabelSet,
};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};
use std::time::Duration;

/// OpenMetrics' content type, which Prometheus negotiates.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Latency buckets from 0.5 ms to 60 s.
const LATENCY_BUCKETS: [f64; 16] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];

/// Both labels are `'static` so that counting a request allocates nothing: methods outside the
/// standard ones count as `OTHER`, and routes are the router's own templates (a fixed set, never
/// a client's path; `api::front`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HttpLabels {
    pub method: &'static str,
    pub route: &'static str,
    pub status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct InferenceLabels {
    pub model: String,
    pub version: String,
    pub protocol: &'static str,
    pub status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LimitLabels {
    pub key_id: String,
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TokenLabels {
    pub model: String,
    pub protocol: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginLabels {
    pub plugin: String,
    pub version: String,
    pub stage: &'static str,
    /// `ok`, `bad_input`, `busy`, or the fault kind (`timeout`, `trap`, `memory`, ...).
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LlmLabels {
    pub model: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelLabels {
    model: String,
    version: String,
}

/// The model version that served a request, set by handlers as a response extension so the
/// HTTP middleware can label the request with the resolved version.
#[derive(Debug, Clone)]
pub struct Served {
    pub model: String,
    pub version: u64,
}

pub struct Metrics {
    registry: Registry,
    http_requests: Family<HttpLabels, Counter>,
    inference_requests: Family<InferenceLabels, Counter>,
    request_duration: Family<InferenceLabels, Histogram>,
    rate_limited: Family<LimitLabels, Counter>,
    tokens: Family<TokenLabels, Counter>,
    plugin_calls: Family<PluginLabels, Histogram>,
    websocket_connections: Gauge,
    generations: Gauge,
    llm_ttft: Family<LlmLabels, Histogram>,
    llm_itl: Family<LlmLabels, Histogram>,
    /// Successful inference latencies and answer statuses per model version, for
    /// `/v2/events` and the history.
    pub latency: LatencyHistograms,
    /// Requests and last use per API key (`/api/keys`, the history's per-key traffic).
    pub keys: std::sync::Arc<crate::key_activity::KeyActivity>,
    /// Splits, mirrors, tokens per key, the response cache (`traffic_metrics`).
    pub traffic: crate::traffic_metrics::TrafficMetrics,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("infergate");
        let http_requests = Family::<HttpLabels, Counter>::default();
        registry.register(
            "http_requests",
            "HTTP requests by method, route template and status",
            http_requests.clone(),
        );
        let inference_requests = Family::<InferenceLabels, Counter>::default();
        registry.register(
            "inference_requests",
            "Inference requests by model, version, protocol and status",
            inference_requests.clone(),
        );
        let request_duration = Family::<InferenceLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(LATENCY_BUCKETS)
        });
        registry.register(
            "request_duration_seconds",
            "End-to-end inference request duration as the gateway sees it",
            request_duration.clone(),
        );
        let rate_limited = Family::<LimitLabels, Counter>::default();
        registry.register(
            "rate_limited_requests",
            "Requests refused by the per-key limiter (reason: rate or concurrency)",
            rate_limited.clone(),
        );
        let tokens = Family::<TokenLabels, Counter>::default();
        registry.register(
            "generated_tokens",
            "Tokens generated for clients",
            tokens.clone(),
        );
        let plugin_calls = Family::<PluginLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(LATENCY_BUCKETS)
        });
        registry.register(
            "plugin_call_duration_seconds",
            "WebAssembly plugin calls by plugin, version, stage (pre/post) and outcome",
            plugin_calls.clone(),
        );
        let websocket_connections = Gauge::default();
        registry.register(
            "websocket_connections",
            "Open WebSocket connections",
            websocket_connections.clone(),
        );
        let generations = Gauge::default();
        registry.register(
            "generations_in_progress",
            "Text generations running (streamed or not)",
            generations.clone(),
        );
        let llm_ttft = Family::<LlmLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(LATENCY_BUCKETS)
        });
        registry.register(
            "llm_time_to_first_token_seconds",
            "Chat models: time from a request's arrival to its first token (vLLM: time_to_first_token_seconds)",
            llm_ttft.clone(),
        );
        let llm_itl = Family::<LlmLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(LATENCY_BUCKETS)
        });
        registry.register(
            "llm_inter_token_latency_seconds",
            "Chat models: time between two tokens of a sequence (vLLM: inter_token_latency_seconds)",
            llm_itl.clone(),
        );
        let traffic = crate::traffic_metrics::TrafficMetrics::register(&mut registry);
        Metrics {
            traffic,
            registry,
            generations,
            llm_ttft,
            llm_itl,
            http_requests,
            inference_requests,
            request_duration,
            rate_limited,
            tokens,
            plugin_calls,
            websocket_connections,
            latency: LatencyHistograms::default(),
            keys: Default::default(),
        }
    }

    /// A chat model's time-to-first-token sum (seconds) and count, and the tokens it generated
    /// (every token observes one of the two histograms), since start.
    pub fn llm_totals(&self, model: &str) -> (f64, u64, u64) {
        let ttft = self.llm_time_to_first_token(model);
        let itl = self.llm_inter_token_latency(model);
        (ttft.sum(), ttft.count(), ttft.count() + itl.count())
    }

    /// One HTTP request; `method` is a standard method's name or `OTHER`, `route` a router
    /// template or `unmatched`.
    pub fn http_request(&self, method: &'static str, route: &'static str, status: u16) {
        self.http_requests
            .get_or_create(&HttpLabels {
                method,
                route,
                status,
            })
            .inc();
    }

    pub fn inference(
        &self,
        model: &str,
        version: &str,
        protocol: &'static str,
        status: u16,
        elapsed: Duration,
    ) {
        let labels = InferenceLabels {
            model: model.to_string(),
            version: version.to_string(),
            protocol,
            status,
        };
        self.inference_requests.get_or_create(&labels).inc();
        self.request_duration
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
        self.latency.record(model, version, status, elapsed);
    }

    /// One plugin call; faults are told apart by `outcome`.
    pub fn plugin_call(&self, labels: PluginLabels, elapsed: Duration) {
        self.plugin_calls
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
    }

    pub fn rate_limited(&self, key_id: i64, reason: &'static str) {
        self.rate_limited
            .get_or_create(&LimitLabels {
                key_id: key_id.to_string(),
                reason,
            })
            .inc();
    }

    /// The generated-tokens counter of one model and protocol, looked up once per generation:
    /// counting a token is then one atomic add (no label allocation, no family lock).
    pub fn token_counter(&self, model: &str, protocol: &'static str) -> Counter {
        self.tokens
            .get_or_create(&TokenLabels {
                model: model.to_string(),
                protocol,
            })
            .clone()
    }

    /// A chat model's time-to-first-token histogram, looked up once per request.
    pub fn llm_time_to_first_token(&self, model: &str) -> Histogram {
        self.llm_ttft
            .get_or_create(&LlmLabels {
                model: model.to_string(),
            })
            .clone()
    }

    /// A chat model's inter-token latency histogram, looked up once per request.
    pub fn llm_inter_token_latency(&self, model: &str) -> Histogram {
        self.llm_itl
            .get_or_create(&LlmLabels {
                model: model.to_string(),
            })
            .clone()
    }

    /// Counts an open WebSocket until the guard drops.
    pub fn websocket_opened(&self) -> GaugeGuard {
        self.websocket_connections.inc();
        GaugeGuard(self.websocket_connections.clone())
    }

    /// Counts a text generation in progress until the guard drops.
    pub fn generation_started(&self) -> GaugeGuard {
        self.generations.inc();
        GaugeGuard(self.generations.clone())
    }

    /// The whole exposition: the gateway's metrics, then what is read now: the engine's
    /// versions (the catalog's), the loaded chat models' and the workers'.
    pub fn render(
        &self,
        catalog: &Catalog,
        engine: &Engine,
        llm: &LlmModels,
        workers: &crate::manager::Manager,
    ) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode_registry(&mut out, &self.registry)?;
        let mut scraped = Registry::with_prefix("infergate");
        scraped.register_collector(Box::new(EngineSnapshot::read(catalog, engine)));
        scraped.register_collector(Box::new(LlmSnapshot::read(llm)));
        scraped.register_collector(Box::new(crate::manager::metrics::Snapshot::read(
            workers.view(),
            workers.counters(),
        )));
        prometheus_client::encoding::text::encode_registry(&mut out, &scraped)?;
        prometheus_client::encoding::text::encode_eof(&mut out)?;
        Ok(out)
    }
}

pub struct GaugeGuard(Gauge);

impl Drop for GaugeGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// The engine's per-version state and counters, read once per scrape.
#[derive(Debug)]
struct EngineSnapshot {
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
    fn read(catalog: &Catalog, engine: &Engine) -> EngineSnapshot {
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
                "Host memory budget for loaded model instances (--host-memory-budget)",
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

/// The loaded chat models' scheduler state and counters, read once per scrape.
#[derive(Debug)]
struct LlmSnapshot {
    versions: Vec<(ModelLabels, infergate_llm::StatsSnapshot)>,
}

impl LlmSnapshot {
    fn read(llm: &LlmModels) -> LlmSnapshot {
        let mut versions: Vec<_> = llm
            .loaded()
            .into_iter()
            .map(|(key, model)| {
                let labels = ModelLabels {
                    model: key.name,
                    version: key.version.to_string(),
                };
                (labels, model.stats())
            })
            .collect();
        versions.sort_by(|a, b| (&a.0.model, &a.0.version).cmp(&(&b.0.model, &b.0.version)));
        LlmSnapshot { versions }
    }
}

impl Collector for LlmSnapshot {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        type Read = fn(&infergate_llm::StatsSnapshot) -> f64;
        let gauges: [(&str, &str, Read); 3] = [
            (
                "llm_num_requests_running",
                "Chat models: sequences in the running batch (vLLM: num_requests_running)",
                |s| s.running as f64,
            ),
            (
                "llm_num_requests_waiting",
                "Chat models: requests waiting for a slot (vLLM: num_requests_waiting)",
                |s| s.waiting as f64,
            ),
            (
                "llm_kv_cache_usage_perc",
                "Chat models: fraction of the KV cache held by sequences, 0-1 (vLLM: kv_cache_usage_perc)",
                |s| s.kv_cache_usage,
            ),
        ];
        for (name, help, read) in gauges {
            let mut family = encoder.encode_descriptor(
                name,
                help,
                None,
                ConstGauge::new(0.0f64).metric_type(),
            )?;
            for (labels, stats) in &self.versions {
                ConstGauge::new(read(stats)).encode(family.encode_family(labels)?)?;
            }
        }
        let counters: [(&str, &str, Read); 4] = [
            (
                "llm_prompt_tokens",
                "Chat models: prompt tokens processed (vLLM: prompt_tokens)",
                |s| s.prompt_tokens as f64,
            ),
            (
                "llm_generation_tokens",
                "Chat models: tokens generated (vLLM: generation_tokens)",
                |s| s.generation_tokens as f64,
            ),
            (
                "llm_prefix_cache_queries",
                "Chat models: prompt tokens looked up in the prefix cache (vLLM: prefix_cache_queries)",
                |s| s.prefix_cache_queries as f64,
            ),
            (
                "llm_prefix_cache_hits",
                "Chat models: prompt tokens found in the prefix cache (vLLM: prefix_cache_hits)",
                |s| s.prefix_cache_hits as f64,
            ),
        ];
        for (name, help, read) in counters {
            let mut family = encoder.encode_descriptor(
                name,
                help,
                None,
                ConstCounter::new(0.0f64).metric_type(),
            )?;
            for (labels, stats) in &self.versions {
                ConstCounter::new(read(stats)).encode(family.encode_family(labels)?)?;
            }
        }
        Ok(())
    }
}
