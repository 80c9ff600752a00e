//! Prometheus metrics (OpenMetrics text, encoded by the `prometheus-client` crate).
//!
//! Recorded by the gateway as requests pass:
//! - `infergate_http_requests_total{method,route,status}`: every HTTP request, by route template.
//! - `infergate_inference_requests_total` and `infergate_request_duration_seconds` (histogram)
//!   `{model,version,protocol,status}`: inference requests of every protocol (`kserve_http`,
//!   `openai`, `websocket`, `grpc`, and `pipeline` for raw-body pipeline runs), end to end as
//!   the gateway sees them; `status` is the HTTP status the outcome maps to (4xx and 5xx
//!   alike: a client error is an answer the client did not want either).
//! - `infergate_rate_limited_requests_total{key_id,reason}`: refusals by the per-key limiter
//!   (`key_id` is `anonymous` for callers without a key, limited per client address).
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
//!
//! Chat guardrails: `infergate_guardrail_calls_total`, `infergate_guardrail_verdicts_total`,
//! `infergate_guardrail_failures_total` and `infergate_guardrail_call_duration_seconds`
//! `{guardrail,phase}` (`guardrails`).
//!
//! While traces are exported, an observation of a recorded request in a latency histogram
//! (request duration, plugin calls, time to first token, inter-token latency, guardrail calls)
//! carries its trace id as the bucket's exemplar (`traced_histogram`).
//! While traces are exported: `infergate_trace_spans_total{outcome}` (`sent`, `failed`,
//! `dropped`) and `infergate_trace_spans_queued` (`trace_collector`).
//!
//! This file holds the families the gateway records into ([`Metrics`]); the scrape-time
//! readers are `engine_collector` (engine, host memory, GPU pools) and `llm_collector` (chat
//! models); the workers' series are `crate::manager::metrics`.

mod engine_collector;
pub mod guardrails;
mod labels;
mod llm_collector;
mod trace_collector;
mod traced_histogram;

pub use labels::{
    HttpLabels, InferenceLabels, LimitLabels, LlmLabels, PluginLabels, TokenLabels, TraceExemplar,
};
pub use traced_histogram::{current_exemplar, TracedHistogram};

use crate::catalog::Catalog;
use crate::chat_models::LlmModels;
use crate::latency::LatencyHistograms;
use engine_collector::EngineSnapshot;
use infergate_engine::Engine;
use llm_collector::LlmSnapshot;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::time::Duration;

/// OpenMetrics' content type, which Prometheus negotiates.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Latency buckets from 0.5 ms to 60 s.
const LATENCY_BUCKETS: [f64; 16] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];

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
    request_duration: Family<InferenceLabels, TracedHistogram>,
    rate_limited: Family<LimitLabels, Counter>,
    tokens: Family<TokenLabels, Counter>,
    plugin_calls: Family<PluginLabels, TracedHistogram>,
    websocket_connections: Gauge,
    generations: Gauge,
    llm_ttft: Family<LlmLabels, TracedHistogram>,
    llm_itl: Family<LlmLabels, TracedHistogram>,
    /// Successful inference latencies and answer statuses per model version, for
    /// `/v2/events` and the history.
    pub latency: LatencyHistograms,
    /// Requests and last use per API key (`/api/keys`, the history's per-key traffic).
    pub keys: std::sync::Arc<crate::key_activity::KeyActivity>,
    /// Splits, mirrors, tokens per key, the response cache (`traffic_metrics`).
    pub traffic: crate::traffic_metrics::TrafficMetrics,
    /// Chat guardrails' calls, verdicts, failures and latency (`guardrails`).
    pub guardrails: guardrails::GuardrailMetrics,
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
        let request_duration =
            Family::<InferenceLabels, TracedHistogram>::new_with_constructor(|| {
                TracedHistogram::new(LATENCY_BUCKETS)
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
        let plugin_calls = Family::<PluginLabels, TracedHistogram>::new_with_constructor(|| {
            TracedHistogram::new(LATENCY_BUCKETS)
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
        let llm_ttft = Family::<LlmLabels, TracedHistogram>::new_with_constructor(|| {
            TracedHistogram::new(LATENCY_BUCKETS)
        });
        registry.register(
            "llm_time_to_first_token_seconds",
            "Chat models: time from a request's arrival to its first token (vLLM: time_to_first_token_seconds)",
            llm_ttft.clone(),
        );
        let llm_itl = Family::<LlmLabels, TracedHistogram>::new_with_constructor(|| {
            TracedHistogram::new(LATENCY_BUCKETS)
        });
        registry.register(
            "llm_inter_token_latency_seconds",
            "Chat models: time between two tokens of a sequence (vLLM: inter_token_latency_seconds)",
            llm_itl.clone(),
        );
        let traffic = crate::traffic_metrics::TrafficMetrics::register(&mut registry);
        let guardrails = guardrails::GuardrailMetrics::register(&mut registry);
        Metrics {
            traffic,
            guardrails,
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

    /// One inference request, observed in its own task (its trace's exemplar is looked up).
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
        self.inference_traced(labels, elapsed, current_exemplar());
    }

    /// One inference request, with the exemplar its task looked up ([`current_exemplar`]).
    pub fn inference_traced(
        &self,
        labels: InferenceLabels,
        elapsed: Duration,
        exemplar: Option<TraceExemplar>,
    ) {
        self.inference_requests.get_or_create(&labels).inc();
        self.latency
            .record(&labels.model, &labels.version, labels.status, elapsed);
        self.request_duration
            .get_or_create(&labels)
            .observe(elapsed, exemplar);
    }

    /// One plugin call, observed in its request's task; faults are told apart by `outcome`.
    pub fn plugin_call(&self, labels: PluginLabels, elapsed: Duration) {
        self.plugin_calls
            .get_or_create(&labels)
            .observe(elapsed, current_exemplar());
    }

    /// A refusal of `caller`'s request: its key id, or `anonymous` (`Caller::label`).
    pub fn rate_limited(&self, caller: &str, reason: &'static str) {
        self.rate_limited
            .get_or_create(&LimitLabels {
                key_id: caller.to_string(),
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
    pub fn llm_time_to_first_token(&self, model: &str) -> TracedHistogram {
        self.llm_ttft
            .get_or_create(&LlmLabels {
                model: model.to_string(),
            })
            .clone()
    }

    /// A chat model's inter-token latency histogram, looked up once per request.
    pub fn llm_inter_token_latency(&self, model: &str) -> TracedHistogram {
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
        if let Some(spans) = trace_collector::SpanSnapshot::read() {
            scraped.register_collector(Box::new(spans));
        }
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
