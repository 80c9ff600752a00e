//! The native inference engine: knows models, tensors and devices, nothing of HTTP, keys or
//! plugins.
//!
//! - [`tensor`]: the datatypes and tensors that cross the engine boundary.
//! - [`signature`]: a model's inputs and outputs, read by loading it into ONNX Runtime.
//! - [`runtime`]: the one ONNX Runtime environment of the process.
//! - [`session`]: running one ORT session on engine tensors.
//! - [`instance`]: execution instances, each a thread that owns its session.
//! - [`engine`]: the registry of loaded model versions and the request entry point.
//! - [`stats`]: per-model counters in the shape Triton reports them.
//! - [`error`]: the engine's error type, saying whose fault a failure is.

pub mod engine;
pub mod error;
pub mod instance;
pub mod runtime;
pub mod session;
pub mod signature;
pub mod stats;
pub mod tensor;

pub use engine::{Engine, EngineConfig, ModelKey, ModelState};
pub use error::{EngineError, Fault};
pub use signature::{ModelSignature, TensorSpec};
pub use stats::ModelStats;
pub use tensor::{DataType, Tensor, TensorData};
