//! Chat models' speculative decoding in `/metrics`, read at scrape time from each loaded version
//! `{model,version}` (named after vLLM's `spec_decode_*` counters):
//! `infergate_llm_spec_decode_num_draft_tokens_total` (tokens drafted, from a request's
//! `prediction` or n-grams, and verified) and `infergate_llm_spec_decode_num_accepted_tokens_total`
//! (those the model then produced). Their ratio is the acceptance rate.

use crate::chat_models::LlmModels;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VersionLabels {
    model: String,
    version: String,
}

/// The loaded chat models' drafting counters, read once per scrape.
#[derive(Debug)]
pub struct Speculation {
    versions: Vec<(VersionLabels, u64, u64)>,
}

impl Speculation {
    pub fn read(llm: &LlmModels) -> Speculation {
        let mut versions: Vec<_> = llm
            .loaded()
            .into_iter()
            .map(|(key, model)| {
                let s = model.stats();
                let labels = VersionLabels {
                    model: key.name,
                    version: key.version.to_string(),
                };
                (
                    labels,
                    s.speculative_draft_tokens,
                    s.speculative_accepted_tokens,
                )
            })
            .collect();
        versions.sort_by(|a, b| (&a.0.model, &a.0.version).cmp(&(&b.0.model, &b.0.version)));
        Speculation { versions }
    }
}

impl Collector for Speculation {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        type Read = fn(&(VersionLabels, u64, u64)) -> u64;
        let counters: [(&str, &str, Read); 2] = [
            (
                "llm_spec_decode_num_draft_tokens",
                "Chat models: tokens drafted by speculative decoding and verified (vLLM: spec_decode_num_draft_tokens)",
                |v| v.1,
            ),
            (
                "llm_spec_decode_num_accepted_tokens",
                "Chat models: drafted tokens the model produced (vLLM: spec_decode_num_accepted_tokens)",
                |v| v.2,
            ),
        ];
        for (name, help, read) in counters {
            let mut family = encoder.encode_descriptor(
                name,
                help,
                None,
                ConstCounter::new(0u64).metric_type(),
            )?;
            for v in &self.versions {
                ConstCounter::new(read(v)).encode(family.encode_family(&v.0)?)?;
            }
        }
        Ok(())
    }
}
