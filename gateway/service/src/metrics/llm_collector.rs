//! The loaded chat models' scheduler state and counters read at each scrape, named after
//! vLLM's metrics.

use super::labels::ModelLabels;
use crate::chat_models::LlmModels;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// The loaded chat models' scheduler state and counters, read once per scrape.
#[derive(Debug)]
pub(super) struct LlmSnapshot {
    versions: Vec<(ModelLabels, infergate_llm::StatsSnapshot)>,
}

impl LlmSnapshot {
    pub(super) fn read(llm: &LlmModels) -> LlmSnapshot {
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
        let counters: [(&str, &str, Read); 6] = [
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
            (
                "llm_spec_decode_num_draft_tokens",
                "Chat models: tokens drafted by speculative decoding (a request's prediction or n-grams) and verified (vLLM: spec_decode_num_draft_tokens)",
                |s| s.speculative_draft_tokens as f64,
            ),
            (
                "llm_spec_decode_num_accepted_tokens",
                "Chat models: drafted tokens the model produced; over the drafted ones, the acceptance rate (vLLM: spec_decode_num_accepted_tokens)",
                |s| s.speculative_accepted_tokens as f64,
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
