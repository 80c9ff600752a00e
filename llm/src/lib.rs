//! Chat models for infergate: GGUF files run by llama.cpp (through `llama-cpp-2`), served to
//! many clients at once. Knows nothing of HTTP.
//!
//! - [`gguf`]: reading and checking a GGUF file's header and metadata (upload validation).
//! - [`template`]: the model's chat template, rendered with minijinja.
//! - [`params`]: per-sequence sampling parameters, grammars for JSON output, the sampler chain.
//! - [`tools`]: tool calling: the prompt with tools, the grammar of a forced call, the calls
//!   recognised in the answer (whole or streamed).
//! - [`model`]: loading a model and queueing generations ([`LlmModel`]).
//! - [`embedding`]: embeddings from a GGUF model's own context ([`Embedder`]).
//! - `scheduler`: the thread per model doing continuous batching, chunked prefill and the
//!   prefix cache.
//! - [`speculative`]: drafting tokens from the prediction and n-grams, and how many to verify.
//! - [`output`]: token bytes to text, stop sequences held back.
//! - [`stats`]: counters and gauges for `/metrics`.
//! - [`error`]: the crate's error and whose fault it is.

#![forbid(unsafe_code)]

pub mod embedding;
pub mod error;
pub mod gguf;
pub mod model;
pub mod output;
pub mod params;
mod scheduler;
pub mod speculative;
pub mod stats;
pub mod template;
pub mod tools;

pub use embedding::{EmbedInput, Embedder, EmbeddingConfig, Embeddings, Pooling};
pub use error::{Fault, LlmError};
pub use gguf::GgufInfo;
pub use model::{validate, Generation, LlmConfig, LlmModel};
pub use params::{Constraint, SamplingParams};
pub use speculative::{Speculation, SpeculationParams};
pub use stats::StatsSnapshot;
pub use template::ChatMessage;
pub use tools::{Message, Parsed, StreamEvent, ToolCall, ToolChoice, ToolDef, ToolStream, Tools};

/// Why a generation ended (OpenAI's `finish_reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// The model ended its answer or a stop sequence appeared.
    Stop,
    /// `max_tokens` reached.
    Length,
}

impl Finish {
    pub fn as_str(self) -> &'static str {
        match self {
            Finish::Stop => "stop",
            Finish::Length => "length",
        }
    }
}

/// An alternative token and its log probability.
#[derive(Debug, Clone, PartialEq)]
pub struct TopLogprob {
    pub token: String,
    pub bytes: Vec<u8>,
    pub logprob: f32,
}

/// The log probability of a generated token (from the model's distribution, before sampling
/// parameters reshape it, as vLLM reports them) and the most likely alternatives.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprob {
    pub token: String,
    pub bytes: Vec<u8>,
    pub logprob: f32,
    pub top: Vec<TopLogprob>,
}

/// The end of a generation, with its token counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Done {
    pub finish: Finish,
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    /// Prompt tokens whose KV came from the prefix cache.
    pub cached_tokens: u32,
    /// Drafted tokens (speculative decoding: from the prediction or n-grams) that the model
    /// produced, and those it did not (OpenAI's `completion_tokens_details`).
    pub accepted_prediction_tokens: u32,
    pub rejected_prediction_tokens: u32,
}

/// What a generation sends, in order: text (one event per generated token that released text
/// or carries a log probability), then `Done` or `Error`.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    Text {
        text: String,
        logprob: Option<TokenLogprob>,
    },
    Done(Done),
    Error(String),
}
