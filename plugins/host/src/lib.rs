//! Sandboxed WebAssembly plugins for infergate.
//!
//! Plugins are components implementing the `infergate:plugin/plugin@0.1.0`
//! world (`plugins/wit`). They pre-process requests before a model and
//! post-process its results. Chat guardrails implement the
//! `infergate:plugin/guardrail@0.1.0` world of the same package: they read a
//! chat's messages and answer and let them pass, rewrite or refuse them.
//! Each call runs in a fresh instance with a wall-clock deadline, a memory
//! cap, table/instance caps and an output cap; plugins get no WASI and no
//! capability but structured logging.
//!
//! ```text
//! PluginHost::new(HostConfig)        engine, pool, epoch ticker, cache
//!   .compile(&bytes) -> Plugin       validate + compile (or load from cache)
//!   .compile_guardrail(&bytes) -> Guardrail
//!   .load(&bytes) -> Loaded          either world, told apart by its exports
//! Plugin::preprocess / postprocess   one call = fresh Store + instance
//! Guardrail::check_prompt / check_answer / check_stream   the same, per call
//! PluginHost::evict_cached / retain_cached   prune the artifact cache
//! PluginError::fault()               invalid, bad input, plugin, busy, internal
//! PluginHost::metrics()              counters for /metrics
//! ```
//!
//! Calls are synchronous and CPU-bound; async servers should run them on a
//! blocking thread (`tokio::task::spawn_blocking`). No wasmtime type appears
//! in this crate's public API.

// Public surface.
mod config; //   HostConfig, Limits
mod error; //    PluginError, FaultKind, PluginId
mod guardrail; // Guardrail: chat text checks under limits
mod host; //     PluginHost: engine, linker, compile
mod metrics; //  MetricsSnapshot
mod plugin; //   Plugin: calls under limits
mod types; //    Tensor, DataType, PreInput, PostOutput, Description

// Internals.
mod bindings; // generated from plugins/wit
mod cache; //    compiled-artifact cache on disk
mod call; //     a call's store and whose fault a failure was
mod compile_slots; // bound on compiles running at once
mod convert; //  public types <-> plugin-facing types
mod lift; //     output read under a byte budget
mod lower; //    input written, its buffers donated to the output
mod scope; //    per-call thread-local budget and spare buffers
mod shared; //   engine, linker, config, cache, ticker: what a host and its plugins share
mod store; //    per-call store state, limiter, log import
mod ticker; //   epoch ticker, running while calls do
mod validate; // header and description checks

pub use config::{HostConfig, Limits};
pub use error::{FaultKind, PluginError, PluginFault, PluginId};
pub use guardrail::{
    ChatText, Guardrail, GuardrailDescription, PromptVerdict, StreamVerdict, TextVerdict,
};
pub use host::{Loaded, PluginHost};
pub use metrics::MetricsSnapshot;
pub use plugin::Plugin;
pub use types::{DataType, Description, Metadata, PluginKind, PostOutput, PreInput, Tensor};

/// The WIT world plugins implement.
pub const WORLD: &str = "infergate:plugin/plugin@0.1.0";
/// The WIT world chat guardrails implement.
pub const GUARDRAIL_WORLD: &str = "infergate:plugin/guardrail@0.1.0";
