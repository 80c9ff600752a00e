//! The plugin host: one wasmtime engine (Cranelift, epoch interruption,
//! optional pooling allocator), a linker that offers only logging, the
//! compiled-artifact cache, and `compile`, which turns uploaded bytes into a
//! [`Plugin`] or says why it cannot.

use crate::bindings::{self, infergate::plugin::log};
use crate::cache::{ArtifactCache, Lookup};
use crate::compile_slots::CompileSlots;
use crate::config::HostConfig;
use crate::error::{PluginError, PluginId};
use crate::guardrail::{self, Guardrail};
use crate::metrics::{Metrics, MetricsSnapshot};
use crate::plugin::{Compiled, Plugin};
use crate::shared::Shared;
use crate::store::CallState;
use crate::ticker::Ticker;
use crate::validate;
use sha2::{Digest, Sha256};
use std::sync::Arc;
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

/// An uploaded component, compiled for the world it implements.
#[derive(Clone)]
pub enum Loaded {
    /// A pipeline plugin (`infergate:plugin/plugin@0.1.0`).
    Pipeline(Plugin),
    /// A chat guardrail (`infergate:plugin/guardrail@0.1.0`).
    Guardrail(Guardrail),
}

/// Compiles and runs plugins. Cheap to clone; plugins keep what they need
/// alive, and the epoch ticker stops when the host and all its plugins are gone.
#[derive(Clone)]
pub struct PluginHost {
    shared: Arc<Shared>,
}

impl PluginHost {
    /// A host with the pooling allocator as configured (on by default). Where the pool's
    /// address space cannot be reserved (a process limit such as `ulimit -v`, a container's
    /// memory map limits, or a tool like valgrind), the host falls back to mapping each
    /// instance's memory on demand and logs why, instead of failing the server's start.
    pub fn new(config: HostConfig) -> Result<Self, PluginError> {
        let engine = match Engine::new(&engine_config(&config)) {
            Ok(engine) => engine,
            Err(e) if config.pooling => {
                tracing::warn!(
                    error = %format!("{e:#}"),
                    "plugin instances' memory pool cannot be reserved: mapping each instance's \
                     memory on demand instead (slower instantiation)"
                );
                return PluginHost::without_pooling(config);
            }
            Err(e) => {
                return Err(PluginError::Internal(format!(
                    "creating the wasm engine: {e}"
                )))
            }
        };
        let mut linker = Linker::new(&engine);
        log::add_to_linker::<CallState, HasSelf<CallState>>(&mut linker, |state| state)
            .map_err(|e| PluginError::Internal(format!("linking the log import: {e}")))?;
        let cache = match &config.cache_dir {
            Some(dir) => Some(ArtifactCache::open(dir, &engine).map_err(|e| {
                PluginError::Internal(format!("opening plugin cache {}: {e}", dir.display()))
            })?),
            None => None,
        };
        let ticker = Ticker::start(&engine, config.epoch_tick)?;
        let compile_slots = CompileSlots::new(config.max_concurrent_compiles, config.compile_wait);
        Ok(PluginHost {
            shared: Arc::new(Shared {
                engine,
                config,
                metrics: Metrics::default(),
                linker,
                cache,
                compile_slots,
                ticker,
            }),
        })
    }

    /// The same host without the pooling allocator: every instantiation maps
    /// fresh memory. For comparison in benchmarks, and for systems that cannot
    /// reserve the pool's address space.
    pub fn without_pooling(config: HostConfig) -> Result<Self, PluginError> {
        PluginHost::new(HostConfig {
            pooling: false,
            ..config
        })
    }

    pub fn config(&self) -> &HostConfig {
        &self.shared.config
    }

    /// Counters since the host started.
    pub fn metrics(&self) -> MetricsSnapshot {
        self.shared.metrics.snapshot()
    }

    /// Validates and compiles an uploaded plugin: the bytes must be a
    /// component that implements `infergate:plugin/plugin@0.1.0`, imports
    /// nothing but the log interface, and answers `describe` within the
    /// default limits. Anything else is [`PluginError::Invalid`] with the reason.
    pub fn compile(&self, bytes: &[u8]) -> Result<Plugin, PluginError> {
        let compiled = self.compile_inner(bytes);
        if matches!(compiled, Err(PluginError::Invalid { .. })) {
            self.shared.metrics.invalid();
        }
        compiled
    }

    /// Validates and compiles an uploaded chat guardrail: a component that implements
    /// `infergate:plugin/guardrail@0.1.0`, imports nothing but the log interface and answers
    /// `describe` within the default limits. Anything else is [`PluginError::Invalid`].
    pub fn compile_guardrail(&self, bytes: &[u8]) -> Result<Guardrail, PluginError> {
        match self.load(bytes)? {
            Loaded::Guardrail(guardrail) => Ok(guardrail),
            Loaded::Pipeline(_) => {
                self.shared.metrics.invalid();
                Err(PluginError::invalid(
                    "is a pipeline plugin (infergate:plugin/plugin@0.1.0), not a chat guardrail \
                     (infergate:plugin/guardrail@0.1.0)",
                ))
            }
        }
    }

    /// Validates and compiles an uploaded component of either world: a chat guardrail when it
    /// exports `check-prompt` (the guardrail world's), else a pipeline plugin. Anything that
    /// is neither is [`PluginError::Invalid`] with the reason.
    pub fn load(&self, bytes: &[u8]) -> Result<Loaded, PluginError> {
        let loaded = validate::check_header(bytes).and_then(|()| {
            let sha256 = hex::encode(Sha256::digest(bytes));
            let component = self.load_or_compile(bytes, &sha256)?;
            if component.get_export_index(None, "check-prompt").is_some() {
                guardrail::load(&self.shared, &component, sha256).map(Loaded::Guardrail)
            } else {
                self.plugin_of(component, sha256).map(Loaded::Pipeline)
            }
        });
        if matches!(loaded, Err(PluginError::Invalid { .. })) {
            self.shared.metrics.invalid();
        }
        loaded
    }

    fn compile_inner(&self, bytes: &[u8]) -> Result<Plugin, PluginError> {
        validate::check_header(bytes)?;
        let sha256 = hex::encode(Sha256::digest(bytes));
        let component = self.load_or_compile(bytes, &sha256)?;
        self.plugin_of(component, sha256)
    }

    fn plugin_of(&self, component: Component, sha256: String) -> Result<Plugin, PluginError> {
        let instance_pre = self
            .shared
            .linker
            .instantiate_pre(&component)
            .map_err(|e| {
                PluginError::invalid(format!(
                    "imports something the host does not provide (plugins get only \
                 infergate:plugin/log; WASI is not available): {e}"
                ))
            })?;
        bindings::PluginPre::new(instance_pre.clone()).map_err(|e| {
            PluginError::invalid(format!(
                "does not implement the world infergate:plugin/plugin@0.1.0: {e}"
            ))
        })?;
        let export = |name: &str| {
            component
                .get_export_index(None, name)
                .ok_or_else(|| PluginError::invalid(format!("has no `{name}` export")))
        };
        let compiled = Compiled {
            preprocess: export("preprocess")?,
            postprocess: export("postprocess")?,
            describe: export("describe")?,
            instance_pre,
            sha256,
            host: Arc::clone(&self.shared),
        };
        let description = compiled
            .describe()
            .map_err(|e| PluginError::invalid(format!("describe() did not complete: {e}")))?;
        validate::check_description(&description)?;
        let id = PluginId {
            name: description.name.clone(),
            version: description.version.clone(),
        };
        Ok(Plugin::new(
            compiled,
            description,
            id,
            self.shared.config.default_limits.clone(),
        ))
    }

    fn load_or_compile(&self, bytes: &[u8], sha256: &str) -> Result<Component, PluginError> {
        if let Some(component) = self.cached(sha256) {
            return Ok(component);
        }
        let shared = &self.shared;
        let slot = shared.compile_slots.acquire()?;
        // Another upload of the same bytes may have compiled them while this one waited.
        if let Some(component) = self.cached(sha256) {
            return Ok(component);
        }
        let component = Component::new(&shared.engine, bytes).map_err(|e| {
            PluginError::invalid(format!("not a valid WebAssembly component: {e:#}"))
        })?;
        shared.metrics.compiled();
        if let Some(cache) = &shared.cache {
            let stored = component
                .serialize()
                .map_err(|e| e.to_string())
                .and_then(|artifact| cache.store(sha256, &artifact).map_err(|e| e.to_string()));
            if let Err(error) = stored {
                tracing::warn!(sha256, error, "cannot cache compiled plugin");
            }
        }
        drop(slot);
        Ok(component)
    }

    fn cached(&self, sha256: &str) -> Option<Component> {
        let shared = &self.shared;
        match shared.cache.as_ref()?.load(&shared.engine, sha256) {
            Lookup::Hit(component) => {
                shared.metrics.cache_hit();
                Some(component)
            }
            Lookup::Miss => None,
            Lookup::Rejected(why) => {
                shared.metrics.cache_rejected();
                tracing::warn!(sha256, why, "recompiling plugin: cached artifact rejected");
                None
            }
        }
    }

    /// Forgets the compiled artifact of a component that is not stored (its upload was
    /// rejected, or it was deleted), so the cache holds only what can be loaded again.
    pub fn evict_cached(&self, component_sha256: &str) {
        if let Some(cache) = &self.shared.cache {
            if let Err(e) = cache.remove(component_sha256) {
                tracing::warn!(
                    sha256 = component_sha256,
                    error = %e,
                    "cannot remove a compiled plugin from the cache"
                );
            }
        }
    }

    /// Removes from the cache everything but the artifacts of the components `keep` accepts
    /// (run at start, when nothing compiles). Returns the files and bytes removed.
    pub fn retain_cached(&self, keep: &dyn Fn(&str) -> bool) -> std::io::Result<(u64, u64)> {
        match &self.shared.cache {
            Some(cache) => cache.retain(keep),
            None => Ok((0, 0)),
        }
    }

    /// Where the compiled artifact of a component with this SHA-256 is cached.
    pub fn cache_path(&self, component_sha256: &str) -> Option<std::path::PathBuf> {
        self.shared.cache.as_ref().map(|c| c.path(component_sha256))
    }
}

fn engine_config(config: &HostConfig) -> Config {
    let mut engine = Config::new();
    engine
        .wasm_component_model(true)
        .epoch_interruption(true)
        .max_wasm_stack(config.max_wasm_stack)
        .parallel_compilation(true)
        .cranelift_opt_level(wasmtime::OptLevel::Speed);
    if config.pooling {
        let limits = &config.default_limits;
        let slots = config.max_concurrent_calls;
        let mut pool = PoolingAllocationConfig::new();
        pool.total_component_instances(slots)
            .total_core_instances(slots.saturating_mul(limits.instances as u32))
            .total_memories(slots.saturating_mul(limits.memories as u32))
            .total_tables(slots.saturating_mul(limits.tables as u32))
            .max_core_instances_per_component(limits.instances as u32)
            .max_memories_per_component(limits.memories as u32)
            .max_tables_per_component(limits.tables as u32)
            .table_elements(limits.table_elements)
            .max_memory_size(config.max_memory_bytes)
            // Reset only the pages a call dirtied (Linux 6.7+ PAGEMAP_SCAN;
            // elsewhere the first `keep_resident_bytes` are reset by memset).
            .pagemap_scan(wasmtime::Enabled::Auto)
            .linear_memory_keep_resident(config.keep_resident_bytes)
            .table_keep_resident(64 << 10);
        engine.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    }
    engine
}
