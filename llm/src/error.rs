//! The crate's one error type; [`LlmError::fault`] says whose fault each error is.

/// Who caused an error, which decides the HTTP status the gateway answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The request: bad parameters, messages, a prompt too long (400).
    Client,
    /// The model file (refused upload: 400; at load: 500).
    Model,
    /// Full queue or a stopped model: retry later (503 with Retry-After).
    Unavailable,
    /// llama.cpp failed.
    Internal,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum LlmError {
    #[error("invalid model file: {0}")]
    InvalidModel(String),
    #[error("{0}")]
    InvalidParam(String),
    #[error("{0}")]
    InvalidMessages(String),
    /// OpenAI's wording, with the counts.
    #[error("This model's maximum context length is {limit} tokens. However, you requested {} tokens ({prompt} in the prompt, {completion} for the completion). Please reduce the prompt or max_tokens.", prompt + completion)]
    ContextLength {
        limit: u32,
        prompt: u32,
        completion: u32,
    },
    #[error("the model is overloaded: {waiting} requests are waiting; retry in {retry_after_s} s")]
    Overloaded { waiting: usize, retry_after_s: u64 },
    #[error("the model is not running: {0}")]
    Stopped(String),
    #[error("llama.cpp: {0}")]
    Internal(String),
}

impl LlmError {
    pub fn fault(&self) -> Fault {
        match self {
            LlmError::InvalidModel(_) => Fault::Model,
            LlmError::InvalidParam(_)
            | LlmError::InvalidMessages(_)
            | LlmError::ContextLength { .. } => Fault::Client,
            LlmError::Overloaded { .. } | LlmError::Stopped(_) => Fault::Unavailable,
            LlmError::Internal(_) => Fault::Internal,
        }
    }

    /// Seconds a client should wait before retrying, for errors that say so.
    pub fn retry_after(&self) -> Option<u64> {
        match self {
            LlmError::Overloaded { retry_after_s, .. } => Some(*retry_after_s),
            LlmError::Stopped(_) => Some(1),
            _ => None,
        }
    }
}
