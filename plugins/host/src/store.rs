//! Per-call store state: resource limits that remember what they refused,
//! and the host side of the plugin's one import, structured logging.

use crate::bindings::infergate::plugin::log::{Host as LogHost, Level};
use crate::config::Limits;
use crate::error::PluginId;
use crate::ticker::TickHold;
use std::sync::Arc;
use wasmtime::{ResourceLimiter, StoreLimits, StoreLimitsBuilder};

/// Longest log message or field value kept; longer ones are cut.
const MAX_LOG_TEXT: usize = 1024;
/// Most fields kept per log record.
const MAX_LOG_FIELDS: usize = 16;

/// The data of one call's `Store`.
pub(crate) struct CallState {
    limits: StoreLimits,
    /// Set when the plugin asked for more memory or table than allowed.
    pub(crate) refused_growth: bool,
    plugin: Arc<PluginId>,
    logs_left: usize,
    /// Keeps the epoch ticking, and with it this call's deadline, while the store lives.
    _ticking: TickHold,
}

impl CallState {
    pub(crate) fn new(plugin: Arc<PluginId>, limits: &Limits, ticking: TickHold) -> Self {
        CallState {
            limits: StoreLimitsBuilder::new()
                .memory_size(limits.memory_bytes)
                .table_elements(limits.table_elements)
                .instances(limits.instances)
                .tables(limits.tables)
                .memories(limits.memories)
                .build(),
            refused_growth: false,
            plugin,
            logs_left: limits.log_records,
            _ticking: ticking,
        }
    }
}

impl ResourceLimiter for CallState {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let allowed = self.limits.memory_growing(current, desired, maximum)?;
        self.refused_growth |= !allowed;
        Ok(allowed)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let allowed = self.limits.table_growing(current, desired, maximum)?;
        self.refused_growth |= !allowed;
        Ok(allowed)
    }

    fn instances(&self) -> usize {
        self.limits.instances()
    }

    fn tables(&self) -> usize {
        self.limits.tables()
    }

    fn memories(&self) -> usize {
        self.limits.memories()
    }
}

impl LogHost for CallState {
    fn log(&mut self, level: Level, message: String, fields: Vec<(String, String)>) {
        if self.logs_left == 0 {
            return;
        }
        self.logs_left -= 1;
        let message = clip(&message);
        let fields: Vec<(&str, &str)> = fields
            .iter()
            .take(MAX_LOG_FIELDS)
            .map(|(k, v)| (clip(k), clip(v)))
            .collect();
        let plugin = self.plugin.name.as_str();
        let version = self.plugin.version.as_str();
        macro_rules! emit {
            ($level:expr) => {
                tracing::event!(
                    target: "infergate::plugin",
                    $level,
                    plugin,
                    version,
                    fields = ?fields,
                    "{message}"
                )
            };
        }
        match level {
            Level::Trace => emit!(tracing::Level::TRACE),
            Level::Debug => emit!(tracing::Level::DEBUG),
            Level::Info => emit!(tracing::Level::INFO),
            Level::Warn => emit!(tracing::Level::WARN),
            Level::Error => emit!(tracing::Level::ERROR),
        }
    }
}

/// `text` cut to at most `MAX_LOG_TEXT` bytes, on a character boundary.
fn clip(text: &str) -> &str {
    if text.len() <= MAX_LOG_TEXT {
        return text;
    }
    let mut end = MAX_LOG_TEXT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}
