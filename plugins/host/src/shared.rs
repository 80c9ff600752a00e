//! What a host and the plugins it compiled share: the wasmtime engine and linker, the
//! configuration, the counters, the artifact cache and the epoch ticker. A plugin keeps it
//! alive after its host is dropped.

use crate::cache::ArtifactCache;
use crate::compile_slots::CompileSlots;
use crate::config::HostConfig;
use crate::metrics::Metrics;
use crate::store::CallState;
use crate::ticker::Ticker;
use wasmtime::component::Linker;
use wasmtime::Engine;

/// The state behind a [`crate::PluginHost`] and its plugins.
pub(crate) struct Shared {
    pub(crate) engine: Engine,
    pub(crate) config: HostConfig,
    pub(crate) metrics: Metrics,
    pub(crate) linker: Linker<CallState>,
    pub(crate) cache: Option<ArtifactCache>,
    pub(crate) compile_slots: CompileSlots,
    /// Advances the epoch while calls run; its `Drop` stops the thread.
    pub(crate) ticker: Ticker,
}

impl Shared {
    /// Epoch ticks that cover `deadline`, plus one for the tick in progress.
    pub(crate) fn deadline_ticks(&self, deadline: std::time::Duration) -> u64 {
        let tick = self.config.epoch_tick.as_nanos().max(1);
        (deadline.as_nanos().div_ceil(tick) as u64).saturating_add(1)
    }
}
