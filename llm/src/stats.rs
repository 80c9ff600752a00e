//! Counters and gauges the scheduler keeps for `/metrics` (named after vLLM's by the gateway).

use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, Default)]
pub struct Stats {
    pub(crate) running: AtomicU64,
    pub(crate) waiting: AtomicU64,
    /// Cells of the KV cache held by sequences (running and kept for the prefix cache), in
    /// thousandths of its size. Shared prefixes count once per holder: an upper bound.
    pub(crate) kv_usage_milli: AtomicU64,
    pub(crate) prompt_tokens: AtomicU64,
    pub(crate) generation_tokens: AtomicU64,
    /// Prompt tokens looked up in the prefix cache, and those found there.
    pub(crate) prefix_queries: AtomicU64,
    pub(crate) prefix_hits: AtomicU64,
    /// Sequences freed because their client went away.
    pub(crate) cancelled: AtomicU64,
    /// Tokens drafted for speculative decoding, and those the sampler then produced.
    pub(crate) draft_tokens: AtomicU64,
    pub(crate) draft_accepted: AtomicU64,
}

/// One reading of [`Stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StatsSnapshot {
    pub running: u64,
    pub waiting: u64,
    pub kv_cache_usage: f64,
    pub prompt_tokens: u64,
    pub generation_tokens: u64,
    pub prefix_cache_queries: u64,
    pub prefix_cache_hits: u64,
    pub cancelled: u64,
    /// Drafted tokens verified (vLLM's `spec_decode_num_draft_tokens`), and accepted
    /// (`spec_decode_num_accepted_tokens`).
    pub speculative_draft_tokens: u64,
    pub speculative_accepted_tokens: u64,
}

impl Stats {
    pub fn snapshot(&self) -> StatsSnapshot {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        StatsSnapshot {
            running: get(&self.running),
            waiting: get(&self.waiting),
            kv_cache_usage: get(&self.kv_usage_milli) as f64 / 1000.0,
            prompt_tokens: get(&self.prompt_tokens),
            generation_tokens: get(&self.generation_tokens),
            prefix_cache_queries: get(&self.prefix_queries),
            prefix_cache_hits: get(&self.prefix_hits),
            cancelled: get(&self.cancelled),
            speculative_draft_tokens: get(&self.draft_tokens),
            speculative_accepted_tokens: get(&self.draft_accepted),
        }
    }

    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn set(gauge: &AtomicU64, v: u64) {
        gauge.store(v, Ordering::Relaxed);
    }
}
