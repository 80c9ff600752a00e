//! The native inference engine: knows models, tensors and devices, nothing of HTTP, keys or
//! plugins.
//!
//! - [`tensor`]: the datatypes and tensors that cross the engine boundary.
//! - [`signature`]: a model's inputs and outputs, read by loading it into ONNX Runtime.
//! - [`config`]: per-model configuration in Triton's names (batching, instances, versions,
//!   idle unload, warm-up), and Triton's config JSON.
//! - [`preprocess`]: the native resize/normalize pre-op (pipelines and model configs).
//! - [`postprocess`]: native post-ops a config names (softmax top-k, NMS), adding outputs.
//! - [`optimization`]: Triton's `optimization` block (TensorRT, CUDA accelerators), checked.
//! - [`providers`]: ORT execution providers per model (CUDA, TensorRT) with CPU fallback.
//! - [`runtime`]: the one ONNX Runtime environment of the process.
//! - [`heap`]: freed memory back to the operating system after sessions are dropped.
//! - [`session`]: running one ORT session on engine tensors.
//! - `strings`: ORT string tensors filled and read as bytes (BYTES elements with any bytes).
//! - `pool`: a version's executors (loaded sessions) and the pool idle ones wait in.
//! - `queue`: the bounded priority queue of a model version.
//! - `batcher`: which queued requests run together; joining and splitting their tensors.
//! - [`sizing`]: how many instances and intra-op threads a version gets by default.
//! - `instance`: execution instances, each a thread that owns its session and runs batches.
//! - `warmup`: the config's warm-up requests, run before a version reports ready.
//! - `lifecycle`: the host-memory budget and the reaper that unloads idle versions.
//! - [`sequence_config`]: Triton's `sequence_batching` block (strategies, control inputs,
//!   implicit state), checked.
//! - `sequence_slots`: a stateful version's sequences, slots, backlog and batch formation.
//! - `sequence_rows`: a sequence batch as the model's tensors (controls, state) and back.
//! - `sequences`: the sequencer that runs sequence batches on the version's executors.
//! - [`engine`]: the registry of model versions and the request entry point.
//! - [`stats`]: per-model counters in the shape Triton reports them.
//! - [`error`]: the engine's error type, saying whose fault a failure is.

mod batch_clock;
mod batcher;
pub mod config;
pub mod engine;
pub mod error;
pub mod heap;
mod idle_spin;
mod instance;
mod lifecycle;
mod lone_run;
pub mod optimization;
mod pool;
pub mod postprocess;
pub mod preprocess;
pub mod providers;
mod queue;
pub mod runtime;
pub mod sequence_config;
mod sequence_rows;
mod sequence_slots;
mod sequences;
pub mod session;
pub mod signature;
pub mod sizing;
pub mod stats;
mod strings;
pub mod tensor;
pub mod timerfd;
mod warmup;

/// Native ops (resize/normalize, softmax top-k, NMS) on the GPU or their CPU twins.
pub use infergate_kernels as kernels;

pub use config::{Extensions, ModelConfig, ServableVersions, VersionPolicy};
pub use engine::{Engine, EngineConfig, InferOptions, ModelInfo, ModelKey, ModelState};
pub use error::{EngineError, Fault};
pub use providers::ExecutionReport;
pub use sequence_config::SequenceBatching;
pub use sequence_slots::{CorrelationId, SequenceFlags, SequenceInfo};
pub use signature::{ModelSignature, TensorSpec};
pub use stats::{BatchStats, ModelStats};
pub use tensor::{DataType, Tensor, TensorData};
