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

impl EngineError {
    /// The message for a client: the full message with absolute file paths cut down to their
    /// file name, so ONNX Runtime's errors ("Load model from /srv/infergate/models/... failed")
    /// do not reveal the server's layout. The full text is for the server's log.
    pub fn client_message(&self) -> String {
        redact_paths(&self.to_string())
    }
}

/// Replaces each absolute path (a `/` at the start of a word, or after a quote, bracket, `=`
/// or `:`, followed by at least one more `/`) with `…/` and its last component.
pub fn redact_paths(text: &str) -> String {
    const OPENERS: &str = "\"'`([{=:,";
    const CLOSERS: &str = "\"'`)]},;";
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(slash) = rest.find('/') {
        let (before, from) = rest.split_at(slash);
        out.push_str(before);
        let at_word_start = before
            .chars()
            .next_back()
            .is_none_or(|c| c.is_whitespace() || OPENERS.contains(c));
        let end = from
            .find(|c: char| c.is_whitespace() || CLOSERS.contains(c))
            .unwrap_or(from.len());
        let word = &from[..end];
        match word.rsplit_once('/') {
            Some((dir, name)) if at_word_start && !dir.is_empty() => {
                out.push_str("…/");
                out.push_str(name);
            }
            _ => out.push_str(word),
        }
        rest = &from[end..];
    }
    out.push_str(rest);
    out
}

/// A tensor whose data does not match its shape: the request's fault.
impl From<infergate_protocol::DecodeError> for EngineError {
    fn from(e: infergate_protocol::DecodeError) -> EngineError {
        EngineError::InvalidInput(e.0)
    }
}

pub type Result<T, E = EngineError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absolute_paths_are_cut_to_their_file_name() {
        let e = EngineError::InvalidModel(
            "Load model from /srv/data/models/ab12.onnx failed:/onnxruntime_src/core/graph/model.cc:180 bad".into(),
        );
        assert_eq!(
            e.client_message(),
            "invalid model: Load model from …/ab12.onnx failed:…/model.cc:180 bad"
        );
        for kept in ["input/output 3/4", "a / b", "shape [1, 3]", "'/'"] {
            assert_eq!(redact_paths(kept), kept);
        }
        assert_eq!(
            redact_paths("path '/x/y' (\"/z/w\")"),
            "path '…/y' (\"…/w\")"
        );
    }
}
