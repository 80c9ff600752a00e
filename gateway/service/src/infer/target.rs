//! What a `/v2/models/{name}` name addresses: a model version or a pipeline ([`super::resolve`]
//! finds it); and the model versions a pipeline's stages ran.

use crate::pipelines::Pipeline;
use infergate_store::models::ModelRecord;
use std::sync::Arc;

pub enum Target {
    Model(Arc<ModelRecord>),
    Pipeline(Arc<Pipeline>),
}

/// A model version one stage of a pipeline ran: `stage` is `model` (the pipeline's model),
/// `detect` or `angle` (a text detection stage's detector and angle classifier).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageModel {
    pub stage: &'static str,
    pub model: String,
    pub version: u64,
}

impl StageModel {
    pub fn of(stage: &'static str, record: &ModelRecord) -> StageModel {
        StageModel {
            stage,
            model: record.name.clone(),
            version: record.version,
        }
    }
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
