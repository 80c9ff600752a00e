//! The crate's one error type: what went wrong, and whose fault it is.

use std::fmt;

/// Which plugin an error is about: its name and version as it describes itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginId {
    pub name: String,
    pub version: String,
}

impl fmt::Display for PluginId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.name, self.version)
    }
}

/// Whose fault a [`PluginError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PluginFault {
    /// The uploaded file is not a valid plugin: the uploader's.
    Invalid,
    /// The plugin refused the request's data: the caller's.
    BadInput,
    /// The plugin misbehaved (trap, timeout, memory, bad output): its author's.
    Plugin,
    /// Every instance or the compiler is busy: retry later.
    Busy,
    /// The host itself failed.
    Internal,
}

/// How a plugin misbehaved. Every fault fails only the call that hit it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultKind {
    /// The plugin trapped (panic, `unreachable`, out-of-bounds access...).
    Trap,
    /// The call ran past its wall-clock deadline.
    Timeout,
    /// The plugin tried to grow its memory (or tables) past the cap.
    Memory,
    /// The plugin overflowed its wasm stack.
    StackOverflow,
    /// The plugin returned more bytes than the output cap allows.
    OutputTooLarge,
    /// The plugin returned tensors whose data does not match datatype and shape.
    InvalidOutput,
    /// The plugin reported that it failed (`plugin-error::failure`).
    Reported,
}

impl FaultKind {
    pub const ALL: [FaultKind; 7] = [
        FaultKind::Trap,
        FaultKind::Timeout,
        FaultKind::Memory,
        FaultKind::StackOverflow,
        FaultKind::OutputTooLarge,
        FaultKind::InvalidOutput,
        FaultKind::Reported,
    ];

    /// Stable snake_case name, for JSON errors and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            FaultKind::Trap => "trap",
            FaultKind::Timeout => "timeout",
            FaultKind::Memory => "memory",
            FaultKind::StackOverflow => "stack_overflow",
            FaultKind::OutputTooLarge => "output_too_large",
            FaultKind::InvalidOutput => "invalid_output",
            FaultKind::Reported => "failure",
        }
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Errors of the plugin host, each with the party at fault.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// The uploaded bytes are not a usable plugin (the uploader's fault: HTTP 400).
    #[error("invalid plugin: {reason}")]
    Invalid { reason: String },

    /// The plugin rejected its input (the client's fault: HTTP 422).
    #[error("plugin {plugin} rejected the input: {message}")]
    BadInput { plugin: PluginId, message: String },

    /// The plugin misbehaved (the plugin's fault: HTTP 500).
    #[error("plugin {plugin} failed ({kind}): {detail}")]
    Fault {
        plugin: PluginId,
        kind: FaultKind,
        detail: String,
    },

    /// Every instance slot is in use (nobody's fault, retry: HTTP 503).
    #[error("plugin {plugin} is at its concurrency limit; retry later")]
    Busy { plugin: PluginId },

    /// Every compile slot stayed taken for the whole wait (nobody's fault, retry: HTTP 503).
    #[error("the plugin compiler is busy ({limit} compile(s) running; waited {waited:?} for a slot); retry later")]
    CompilerBusy {
        limit: usize,
        waited: std::time::Duration,
    },

    /// The host itself failed: engine setup, cache I/O (HTTP 500).
    #[error("plugin host error: {0}")]
    Internal(String),
}

impl PluginError {
    /// Whose fault the error is; the one place that decides it (a server maps it to its
    /// status: 400 invalid, 422 bad input, 500 plugin or internal, 503 busy).
    pub fn fault(&self) -> PluginFault {
        match self {
            PluginError::Invalid { .. } => PluginFault::Invalid,
            PluginError::BadInput { .. } => PluginFault::BadInput,
            PluginError::Fault { .. } => PluginFault::Plugin,
            PluginError::Internal(_) => PluginFault::Internal,
            PluginError::Busy { .. } | PluginError::CompilerBusy { .. } => PluginFault::Busy,
        }
    }

    /// The plugin concerned, when the error is about one.
    pub fn plugin(&self) -> Option<&PluginId> {
        match self {
            PluginError::BadInput { plugin, .. }
            | PluginError::Fault { plugin, .. }
            | PluginError::Busy { plugin } => Some(plugin),
            PluginError::Invalid { .. }
            | PluginError::CompilerBusy { .. }
            | PluginError::Internal(_) => None,
        }
    }

    pub(crate) fn invalid(reason: impl Into<String>) -> Self {
        PluginError::Invalid {
            reason: reason.into(),
        }
    }
}
