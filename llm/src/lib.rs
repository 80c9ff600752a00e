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
//! - [`event`]: what a generation sends back (text, then how it ended, or an error).
//! - [`backend`]: llama.cpp's process-wide initialisation.
//! - [`error`]: the crate's error and whose fault it is.

#![forbid(unsafe_code)]

pub mod backend;
pub mod embedding;
pub mod error;
pub mod event;
pub mod gguf;
pub mod model;
pub mod output;
pub mod params;
mod scheduler;
pub mod speculative;
pub mod stats;
pub mod template;
pub mod tools;

pub use backend::backend;
pub use embedding::{EmbedInput, Embedder, EmbeddingConfig, Embeddings, Pooling};
pub use error::{Fault, LlmError};
pub use event::{Done, Event, Finish, TokenLogprob, TopLogprob};
pub use gguf::GgufInfo;
pub use model::{validate, Generation, LlmConfig, LlmModel, ModelOverrides};
pub use params::{Constraint, SamplingParams};
pub use speculative::{Speculation, SpeculationParams};
pub use stats::StatsSnapshot;
pub use template::ChatMessage;
pub use tools::{Message, Parsed, StreamEvent, ToolCall, ToolChoice, ToolDef, ToolStream, Tools};
