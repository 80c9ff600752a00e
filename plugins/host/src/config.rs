//! Host-wide settings and per-plugin limits, with safe defaults.

use std::path::PathBuf;
use std::time::Duration;

/// Limits applied to every call of one plugin. [`Limits::default`] is safe for
/// untrusted plugins; a plugin may get other limits through
/// [`crate::Plugin::with_limits`], capped by the host's [`HostConfig`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Wall-clock deadline for one call, enforced by epoch interruption.
    pub deadline: Duration,
    /// Linear memory a call may use, in bytes.
    pub memory_bytes: usize,
    /// Elements a table may grow to.
    pub table_elements: usize,
    /// Core instances, tables and memories one instantiation may create.
    pub instances: usize,
    pub tables: usize,
    pub memories: usize,
    /// Bytes a call may return (tensor data, names, shapes, JSON, bytes),
    /// checked while the output is read, before the host allocates it.
    pub output_bytes: usize,
    /// Log records a call may emit; more are dropped.
    pub log_records: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            deadline: Duration::from_secs(2),
            memory_bytes: 256 << 20,
            table_elements: 10_000,
            instances: 16,
            tables: 8,
            memories: 2,
            output_bytes: 64 << 20,
            log_records: 32,
        }
    }
}

/// Settings of a [`crate::PluginHost`].
#[derive(Debug, Clone)]
pub struct HostConfig {
    /// Where compiled plugins are cached; `None` compiles every time.
    pub cache_dir: Option<PathBuf>,
    /// Pre-allocate instance slots (the pooling allocator): instantiation
    /// costs microseconds instead of mmap/munmap per call.
    pub pooling: bool,
    /// Calls that may run at once across all plugins (pool slots). A call
    /// beyond it fails with [`crate::PluginError::Busy`].
    pub max_concurrent_calls: u32,
    /// Upper bound of [`Limits::memory_bytes`] for any plugin; the pool
    /// reserves address space for it per slot.
    pub max_memory_bytes: usize,
    /// Granularity of deadlines: how often the epoch ticker thread ticks.
    pub epoch_tick: Duration,
    /// Wasm stack per call; deeper recursion is a stack-overflow fault.
    pub max_wasm_stack: usize,
    /// Linear memory a pool slot keeps mapped between calls (dirty pages are
    /// reset in place, not unmapped and faulted in again): covers the
    /// stack, data and a typical payload of most plugins.
    pub keep_resident_bytes: usize,
    /// Limits for plugins that get none of their own.
    pub default_limits: Limits,
    /// Cranelift compiles (cache misses) that may run at once; each takes
    /// every core and, for a large component, hundreds of MB.
    pub max_concurrent_compiles: usize,
    /// How long a compile waits for a slot before it fails with
    /// [`crate::PluginError::CompilerBusy`].
    pub compile_wait: Duration,
}

impl Default for HostConfig {
    fn default() -> Self {
        HostConfig {
            cache_dir: None,
            pooling: true,
            max_concurrent_calls: 256,
            max_memory_bytes: 1 << 30,
            epoch_tick: Duration::from_millis(5),
            max_wasm_stack: 512 << 10,
            keep_resident_bytes: 4 << 20,
            default_limits: Limits::default(),
            max_concurrent_compiles: 2,
            compile_wait: Duration::from_secs(30),
        }
    }
}

impl HostConfig {
    /// The default settings, caching compiled plugins in `dir`.
    pub fn with_cache_dir(dir: impl Into<PathBuf>) -> Self {
        HostConfig {
            cache_dir: Some(dir.into()),
            ..HostConfig::default()
        }
    }

    /// `limits` with every field capped by what this host can enforce.
    pub(crate) fn clamp(&self, limits: &Limits) -> Limits {
        let max = &self.default_limits;
        Limits {
            memory_bytes: limits.memory_bytes.min(self.max_memory_bytes),
            instances: limits.instances.max(1),
            tables: limits.tables.max(1),
            memories: limits.memories.max(1),
            deadline: limits.deadline.max(self.epoch_tick),
            ..limits.clone()
        }
        .min_structural(max)
    }
}

impl Limits {
    /// Structural caps that the pool's slot layout fixes for every plugin.
    fn min_structural(mut self, pool: &Limits) -> Limits {
        self.instances = self.instances.min(pool.instances);
        self.tables = self.tables.min(pool.tables);
        self.memories = self.memories.min(pool.memories);
        self.table_elements = self.table_elements.min(pool.table_elements);
        self
    }
}
