//! One error type for the engine. Every variant knows whose fault it is, so the gateway can map
//! it to a status code in one place.

use thiserror::Error;

/// Who caused a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The request was wrong (names, shapes, datatypes, an invalid model file).
    Client,
    /// The model failed while running valid input.
    Model,
    /// The engine is overloaded or shutting down; retrying later may work.
    Unavailable,
    /// A bug or an environment problem on our side.
    Internal,
}

#[derive(Debug, Error)]
pub enum EngineError {
    #[error("{0}")]
    InvalidInput(String),
    #[error("invalid model: {0}")]
    InvalidModel(String),
    #[error("model '{model}' failed: {reason}")]
    ModelFailed { model: String, reason: String },
    #[error("{0}")]
    Unavailable(String),
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
            EngineError::InvalidInput(_) | EngineError::InvalidModel(_) => Fault::Client,
            EngineError::ModelFailed { .. } => Fault::Model,
            EngineError::Unavailable(_) | EngineError::NotLoaded(_) => Fault::Unavailable,
            EngineError::Runtime(_) | EngineError::Internal(_) => Fault::Internal,
        }
    }
}

pub type Result<T, E = EngineError> = std::result::Result<T, E>;
