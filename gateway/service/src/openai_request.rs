//! The OpenAI request bodies the gateway serves itself (completions and chat with the
//! character-level model, embeddings) as parsed and checked before any work: what a body must
//! hold and what the generator cannot honour (refused rather than ignored). Every error is
//! the client's (400).
//!
//! Self-contained (no `crate::` paths): the fuzz target `openai_request` (fuzz/) builds this
//! file without the gateway.

use infergate_protocol::DecodeError;
use serde::Deserialize;
use serde_json::Value;

pub const MAX_STOP_SEQUENCES: usize = 4;
/// Texts one embeddings request may embed.
pub const MAX_EMBEDDING_INPUTS: usize = 256;

fn bad(message: impl Into<String>) -> DecodeError {
    DecodeError(message.into())
}

/// Parses a request body.
pub fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, DecodeError> {
    serde_json::from_slice(body).map_err(|e| bad(format!("invalid request: {e}")))
}

/// `stop` is a string or a list of strings.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Deserialize)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
}

/// The fields both endpoints share; unknown fields are ignored as OpenAI clients send many.
#[derive(Debug, Deserialize)]
pub struct Common {
    pub model: String,
    #[serde(default)]
    max_tokens: Option<u32>,
    #[serde(default)]
    max_completion_tokens: Option<u32>,
    #[serde(default)]
    temperature: Option<f64>,
    #[serde(default)]
    top_p: Option<f64>,
    #[serde(default)]
    seed: Option<u64>,
    #[serde(default)]
    stop: Option<Stop>,
    #[serde(default)]
    n: Option<u32>,
    #[serde(default)]
    pub stream: bool,
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    #[serde(default)]
    presence_penalty: Option<f64>,
    #[serde(default)]
    frequency_penalty: Option<f64>,
    #[serde(default)]
    logprobs: Option<Value>,
    #[serde(default)]
    echo: Option<bool>,
    #[serde(default)]
    best_of: Option<u32>,
}

#[derive(Debug, Deserialize)]
pub struct CompletionRequest {
    #[serde(flatten)]
    pub common: Common,
    prompt: Value,
}

#[derive(Debug, Deserialize)]
struct ChatMessage {
    #[serde(default)]
    content: Option<Value>,
}

#[derive(Debug, Deserialize)]
pub struct ChatRequest {
    #[serde(flatten)]
    pub common: Common,
    messages: Vec<ChatMessage>,
}

/// Sampling parameters, validated.
#[derive(Debug, Clone)]
pub struct Sampling {
    /// 0 = greedy.
    pub temperature: f64,
    pub top_p: f64,
    pub seed: Option<u64>,
    pub max_tokens: u32,
    pub stop: Vec<String>,
}

impl Sampling {
    pub fn validate(&self) -> Result<(), DecodeError> {
        if !(0.0..=2.0).contains(&self.temperature) {
            return Err(bad("temperature must be between 0 and 2"));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(bad("top_p must be in (0, 1]"));
        }
        if self.max_tokens == 0 {
            return Err(bad("max_tokens must be at least 1"));
        }
        if self.stop.len() > MAX_STOP_SEQUENCES || self.stop.iter().any(String::is_empty) {
            return Err(bad(format!(
                "stop: at most {MAX_STOP_SEQUENCES} non-empty sequences"
            )));
        }
        Ok(())
    }
}

impl Common {
    /// Refuses what the generator cannot honour rather than ignoring it.
    pub fn sampling(&self, default_tokens: u32, limit: u32) -> Result<Sampling, DecodeError> {
        if self.n.is_some_and(|n| n != 1) || self.best_of.is_some_and(|n| n != 1) {
            return Err(bad("only n = 1 is supported"));
        }
        if [self.presence_penalty, self.frequency_penalty]
            .iter()
            .any(|p| p.is_some_and(|p| p != 0.0))
        {
            return Err(bad(
                "presence_penalty and frequency_penalty are not supported",
            ));
        }
        if self
            .logprobs
            .as_ref()
            .is_some_and(|v| !v.is_null() && *v != Value::Bool(false))
        {
            return Err(bad("logprobs are not supported"));
        }
        if self.echo == Some(true) {
            return Err(bad("echo is not supported"));
        }
        let max_tokens = self
            .max_completion_tokens
            .or(self.max_tokens)
            .unwrap_or(default_tokens.min(limit));
        if max_tokens > limit {
            return Err(bad(format!("max_tokens is at most {limit} on this server")));
        }
        Ok(Sampling {
            temperature: self.temperature.unwrap_or(1.0),
            top_p: self.top_p.unwrap_or(1.0),
            seed: self.seed,
            max_tokens,
            stop: match &self.stop {
                None => vec![],
                Some(Stop::One(s)) => vec![s.clone()],
                Some(Stop::Many(v)) => v.clone(),
            },
        })
    }
}

impl CompletionRequest {
    /// The one prompt: a string, or a list holding one string.
    pub fn prompt(&self) -> Result<String, DecodeError> {
        match &self.prompt {
            Value::String(s) => Ok(s.clone()),
            Value::Array(items) if items.len() == 1 && items[0].is_string() => {
                Ok(items[0].as_str().unwrap_or_default().to_string())
            }
            _ => Err(bad("prompt must be a string (one prompt per request)")),
        }
    }
}

impl ChatRequest {
    /// The messages' text contents joined by newlines (the character model continues text;
    /// roles mean nothing to it).
    pub fn prompt(&self) -> Result<String, DecodeError> {
        if self.messages.is_empty() {
            return Err(bad("messages must not be empty"));
        }
        let mut parts = Vec::with_capacity(self.messages.len());
        for m in &self.messages {
            match &m.content {
                None | Some(Value::Null) => {}
                Some(Value::String(s)) => parts.push(s.clone()),
                Some(Value::Array(items)) => {
                    for item in items {
                        match (item["type"].as_str(), item["text"].as_str()) {
                            (Some("text"), Some(t)) => parts.push(t.to_string()),
                            _ => return Err(bad("message content parts must be of type 'text'")),
                        }
                    }
                }
                Some(_) => {
                    return Err(bad(
                        "message content must be a string or a list of text parts",
                    ))
                }
            }
        }
        Ok(parts.join("\n"))
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmbeddingRequest {
    pub model: String,
    input: Value,
    #[serde(default)]
    encoding_format: Option<String>,
    /// OpenAI's end-user tag for abuse monitoring; accepted so clients that send it work.
    #[serde(default, rename = "user")]
    _user: Option<String>,
    #[serde(default)]
    dimensions: Option<u32>,
}

impl EmbeddingRequest {
    /// Whether the vectors go back as base64 (little-endian f32) rather than numbers. The
    /// official client asks for base64 unless told otherwise.
    pub fn base64(&self) -> Result<bool, DecodeError> {
        if self.dimensions.is_some() {
            return Err(bad(
                "dimensions is not supported: the pipeline decides the vector size",
            ));
        }
        match self.encoding_format.as_deref() {
            None | Some("float") => Ok(false),
            Some("base64") => Ok(true),
            Some(other) => Err(bad(format!(
                "encoding_format '{other}' is not supported; use \"float\" or \"base64\""
            ))),
        }
    }

    /// The texts to embed: one string or a list of 1 to [`MAX_EMBEDDING_INPUTS`] non-empty ones.
    pub fn texts(&self) -> Result<Vec<String>, DecodeError> {
        let texts: Vec<String> = match &self.input {
            Value::String(s) => vec![s.clone()],
            Value::Array(items) => items
                .iter()
                .map(|i| {
                    i.as_str().map(str::to_string).ok_or_else(|| {
                        bad("input must be a string or a list of strings (token arrays are not accepted)")
                    })
                })
                .collect::<Result<_, _>>()?,
            _ => return Err(bad("input must be a string or a list of strings")),
        };
        if texts.is_empty() || texts.len() > MAX_EMBEDDING_INPUTS {
            return Err(bad(format!(
                "input must hold 1 to {MAX_EMBEDDING_INPUTS} texts, got {}",
                texts.len()
            )));
        }
        if texts.iter().any(|t| t.is_empty()) {
            return Err(bad("input texts must not be empty"));
        }
        Ok(texts)
    }
}
