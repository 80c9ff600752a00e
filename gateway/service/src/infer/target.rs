//! What a `/v2/models/{name}` name addresses: a model version or a pipeline ([`super::resolve`]
//! finds it).

use crate::pipelines::Pipeline;
use infergate_store::models::ModelRecord;
use std::sync::Arc;

pub enum Target {
    Model(Arc<ModelRecord>),
    Pipeline(Arc<Pipeline>),
}

impl Target {
    /// Whether the target answers a request with zero or more responses (Triton's decoupled
    /// transaction policy): a chat model (one response per generated piece of text), or a
    /// pipeline marked `decoupled`. Only a stream can carry its answers.
    pub fn is_decoupled(&self) -> bool {
        match self {
            Target::Model(record) => crate::chat_models::is_gguf(record),
            Target::Pipeline(pipeline) => pipeline.spec.decoupled,
        }
    }
}
