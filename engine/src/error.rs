//! One error type for the engine. Every variant knows whose fault it is, so the gateway can map
//! it to a status code in one place.

use std::time::Duration;
use thiserror::Error;

/// Who caused a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The request was wrong (names, shapes, datatypes, an invalid model file).
    Client,
    /// The model failed while running valid input.
    Model,
    /// The engine is overloaded, out of memory budget or shutting down; retrying later may
    /// work (see [`EngineError::retry_after`]).
    Unavailable,
    /// The request waited in the queue past its timeout and was never executed.
    Timeout,
    /// A bug or an environment problem on our side.
    Internal,
}

#[derive(Debug, Clone, Error)]
pub enum EngineError {
    #[error("{0}")]
    InvalidInput(String),
    #[error("invalid model: {0}")]
    InvalidModel(String),
    #[error("model '{model}' failed: {reason}")]
    ModelFailed { model: String, reason: String },
    #[error("{0}")]
    Unavailable(String),
    #[error("model '{model}' has {queued} requests queued, its limit; retry later")]
    QueueFull {
        model: String,
        queued: usize,
        /// A hint for the client: how long the queue needs to drain.
        retry_after: Duration,
    },
    #[error("request to model '{model}' timed out after waiting {waited_ms} ms in the queue; it was not executed")]
    Timeout { model: String, waited_ms: u64 },
    #[error("loading model '{model}' needs about {needed} bytes of host memory but only {available} of the {budget}-byte budget are free; unload a model or raise the budget")]
    OverMemoryBudget {
        model: String,
        needed: u64,
        available: u64,
        budget: u64,
    },
    #[error("invalid model config: {0}")]
    InvalidConfig(String),
    #[error("model '{0}' is not loaded")]
    NotLoaded(String),
    #[error("ONNX Runtime could not be initialised: {0}")]
    Runtime(String),
    #[error("internal engine error: {0}")]
    Internal(String),
}

impl EngineError {
    pub fn fault(&self) -> Fault {
        match self {
            EngineError::InvalidInput(_)
            | EngineError::InvalidModel(_)
            | EngineError::InvalidConfig(_) => Fault::Client,
            EngineError::ModelFailed { .. } => Fault::Model,
            EngineError::Unavailable(_)
            | EngineError::NotLoaded(_)
            | EngineError::QueueFull { .. }
            | EngineError::OverMemoryBudget { .. } => Fault::Unavailable,
            EngineError::Timeout { .. } => Fault::Timeout,
            EngineError::Runtime(_) | EngineError::Internal(_) => Fault::Internal,
        }
    }

    /// When retrying may succeed and the engine can say how soon (a full queue): the gateway
    /// sends it as `Retry-After`.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            EngineError::QueueFull { retry_after, .. } => Some(*retry_after),
            _ => None,
        }
    }
}

pub type Result<T, E = EngineError> = std::result::Result<T, E>;
