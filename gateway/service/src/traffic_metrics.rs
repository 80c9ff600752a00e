//! Metrics of the traffic policy at the edge, registered beside the others (`metrics.rs`):
//!
//! - `infergate_split_requests_total{model,version}`: requests a model's traffic split sent
//!   to each version (requests that named a version are not counted here). Their answers are
//!   in `infergate_inference_requests_total` and `infergate_request_duration_seconds` under
//!   the version that served, side by side with the other versions.
//! - `infergate_mirror_requests_total{model,version,outcome}` (`ok`, `error`, `shed`) and
//!   `infergate_mirror_request_duration_seconds{model,version}`: mirrored copies, apart from
//!   the callers' figures (a copy's answer is dropped; `shed`: not run because the server
//!   was busy).
//! - `infergate_key_tokens_total{key_id,model}`: tokens (prompt plus completion) charged to
//!   each key per model, for LLM requests; at most [`MAX_KEY_TOKEN_SERIES`] label sets, the
//!   rest counted under `key_id="other"`.
//! - Read from the response cache at scrape time: `infergate_response_cache_hits_total`,
//!   `..._misses_total`, `..._inserts_total`, `..._evictions_total` `{model}`, and the gauges
//!   `infergate_response_cache_bytes`, `infergate_response_cache_entries`,
//!   `infergate_response_cache_capacity_bytes`.

use crate::response_cache::AnswerCache;
use parking_lot::Mutex;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};
use std::collections::HashSet;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// Most `{key_id, model}` label sets of `infergate_key_tokens_total`: a gateway with many keys
/// must not grow its exposition without bound.
pub const MAX_KEY_TOKEN_SERIES: usize = 1000;

const LATENCY_BUCKETS: [f64; 16] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VersionLabels {
    model: String,
    version: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MirrorLabels {
    model: String,
    version: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KeyTokenLabels {
    key_id: String,
    model: String,
}

/// How a mirrored copy ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MirrorOutcome {
    Ok,
    Error,
    Shed,
}

pub struct TrafficMetrics {
    split: Family<VersionLabels, Counter>,
    mirror: Family<MirrorLabels, Counter>,
    mirror_duration: Family<VersionLabels, Histogram>,
    key_tokens: Family<KeyTokenLabels, Counter>,
    key_token_series: Mutex<HashSet<(i64, String)>>,
    cache: Arc<OnceLock<AnswerCache>>,
}

impl TrafficMetrics {
    /// Registers the traffic metrics in `registry`.
    pub fn register(registry: &mut Registry) -> TrafficMetrics {
        let split = Family::<VersionLabels, Counter>::default();
        registry.register(
            "split_requests",
            "Requests a model's traffic split sent to each version",
            split.clone(),
        );
        let mirror = Family::<MirrorLabels, Counter>::default();
        registry.register(
            "mirror_requests",
            "Mirrored copies of requests by version and outcome (ok, error, shed when busy); their answers are dropped",
            mirror.clone(),
        );
        let mirror_duration = Family::<VersionLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(LATENCY_BUCKETS)
        });
        registry.register(
            "mirror_request_duration_seconds",
            "Time a mirrored copy took on its version",
            mirror_duration.clone(),
        );
        let key_tokens = Family::<KeyTokenLabels, Counter>::default();
        registry.register(
            "key_tokens",
            "Tokens (prompt plus completion) charged to an API key per model, for LLM requests",
            key_tokens.clone(),
        );
        let cache = Arc::new(OnceLock::new());
        registry.register_collector(Box::new(CacheCollector {
            cache: cache.clone(),
        }));
        TrafficMetrics {
            split,
            mirror,
            mirror_duration,
            key_tokens,
            key_token_series: Mutex::new(HashSet::new()),
            cache,
        }
    }

    /// The response cache whose figures the exposition reads (once, at start).
    pub fn attach_cache(&self, cache: AnswerCache) {
        let _ = self.cache.set(cache);
    }

    /// A request the split sent to `version`.
    pub fn split(&self, model: &str, version: u64) {
        self.split
            .get_or_create(&VersionLabels {
                model: model.to_owned(),
                version: version.to_string(),
            })
            .inc();
    }

    /// A mirrored copy's end; `elapsed` when it ran.
    pub fn mirror(
        &self,
        model: &str,
        version: u64,
        outcome: MirrorOutcome,
        elapsed: Option<Duration>,
    ) {
        let version = version.to_string();
        let outcome_label = match outcome {
            MirrorOutcome::Ok => "ok",
            MirrorOutcome::Error => "error",
            MirrorOutcome::Shed => "shed",
        };
        self.mirror
            .get_or_create(&MirrorLabels {
                model: model.to_owned(),
                version: version.clone(),
                outcome: outcome_label,
            })
            .inc();
        if let Some(elapsed) = elapsed {
            self.mirror_duration
                .get_or_create(&VersionLabels {
                    model: model.to_owned(),
                    version,
                })
                .observe(elapsed.as_secs_f64());
        }
    }

    /// `tokens` charged to key `key_id` on `model`.
    pub fn key_tokens(&self, key_id: i64, model: &str, tokens: u64) {
        let key_id = {
            let mut series = self.key_token_series.lock();
            let known = series.contains(&(key_id, model.to_owned()));
            if known || series.len() < MAX_KEY_TOKEN_SERIES {
                if !known {
                    series.insert((key_id, model.to_owned()));
                }
                key_id.to_string()
            } else {
                "other".to_owned()
            }
        };
        self.key_tokens
            .get_or_create(&KeyTokenLabels {
                key_id,
                model: model.to_owned(),
            })
            .inc_by(tokens);
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelLabel {
    model: String,
}

/// The response cache's figures, read at each scrape.
struct CacheCollector {
    cache: Arc<OnceLock<AnswerCache>>,
}

impl std::fmt::Debug for CacheCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CacheCollector")
    }
}

impl Collector for CacheCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(cache) = self.cache.get() else {
            return Ok(());
        };
        let size = cache.size();
        let gauges: [(&str, &str, u64, Option<Unit>); 3] = [
            (
                "response_cache",
                "Bytes the response cache holds (answers, metadata and per-entry overhead)",
                size.bytes,
                Some(Unit::Bytes),
            ),
            (
                "response_cache_entries",
                "Answers the response cache holds",
                size.entries,
                None,
            ),
            (
                "response_cache_capacity",
                "The response cache's budget ([cache] bytes)",
                size.capacity,
                Some(Unit::Bytes),
            ),
        ];
        for (name, help, value, unit) in gauges {
            let gauge = ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX));
            gauge.encode(encoder.encode_descriptor(
                name,
                help,
                unit.as_ref(),
                gauge.metric_type(),
            )?)?;
        }
        let per_model = cache.stats_by_model();
        type Read = fn(&infergate_traffic::cache::CacheStats) -> u64;
        let counters: [(&str, &str, Read); 4] = [
            (
                "response_cache_hits",
                "Requests answered from the response cache",
                |s| s.hits,
            ),
            (
                "response_cache_misses",
                "Cacheable requests the response cache did not hold",
                |s| s.misses,
            ),
            (
                "response_cache_inserts",
                "Answers stored in the response cache",
                |s| s.inserts,
            ),
            (
                "response_cache_evictions",
                "Answers evicted from the response cache to make room",
                |s| s.evictions,
            ),
        ];
        for (name, help, read) in counters {
            let mut family = encoder.encode_descriptor(
                name,
                help,
                None,
                ConstCounter::new(0u64).metric_type(),
            )?;
            for (model, stats) in &per_model {
                ConstCounter::new(read(stats)).encode(family.encode_family(&ModelLabel {
                    model: model.clone(),
                })?)?;
            }
        }
        Ok(())
    }
}
