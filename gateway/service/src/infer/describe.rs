//! What the metadata endpoints (HTTP and gRPC) say about a model or pipeline.

use super::Target;
use crate::catalog::model_key;
use crate::error::ApiResult;
use crate::pipelines::Pipeline;
use crate::state::AppState;
use infergate_engine::TensorSpec;
use infergate_store::models::ModelRecord;
use serde_json::{json, Value};
use std::sync::Arc;

pub struct Description {
    pub name: String,
    pub versions: Vec<String>,
    pub platform: &'static str,
    pub inputs: Vec<TensorSpec>,
    pub outputs: Vec<TensorSpec>,
    /// Models only: where a loaded version runs (ORT execution providers) and, when it fell
    /// back to the CPU, why; null until it loads. gRPC's metadata message has no field for it.
    pub execution: Option<Value>,
}

pub fn describe(state: &AppState, target: &Target) -> Description {
    match target {
        Target::Model(record) => model(state, record),
        Target::Pipeline(pipeline) => pipeline_description(state, pipeline),
    }
}

/// The model's outputs and those its configured post-ops add.
fn served_outputs(state: &AppState, record: &ModelRecord) -> Vec<TensorSpec> {
    state
        .engine()
        .model_config(&model_key(record))
        .served_outputs(&record.signature)
}

fn model(state: &AppState, record: &ModelRecord) -> Description {
    Description {
        name: record.name.clone(),
        versions: state
            .catalog()
            .versions(&record.name)
            .iter()
            .map(|r| r.version.to_string())
            .collect(),
        platform: "onnxruntime_onnx",
        inputs: record.signature.inputs.clone(),
        outputs: served_outputs(state, record),
        execution: Some(json!(state.engine().execution(&model_key(record)))),
    }
}

/// The model's inputs when no pre-plugin reshapes them (and outputs when no post-plugin does);
/// otherwise what the plugins describe is in `/api/pipelines`.
fn pipeline_description(state: &AppState, pipeline: &Pipeline) -> Description {
    let spec = &pipeline.spec;
    let model = state
        .catalog()
        .resolve(&spec.model, spec.model_version)
        .ok();
    let inputs = match &model {
        Some(m) if spec.pre.is_empty() => m.signature.inputs.clone(),
        _ => Vec::new(),
    };
    let outputs = match &model {
        Some(m) if spec.post.is_empty() => served_outputs(state, m),
        _ => Vec::new(),
    };
    Description {
        name: pipeline.record.name.clone(),
        versions: vec!["1".into()],
        platform: "infergate_pipeline",
        inputs,
        outputs,
        execution: None,
    }
}

/// A model version's configuration in Triton's field names (`/v2/models/{m}/config`, gRPC
/// `ModelConfig`): the version's stored settings over the defaults derived from its signature.
pub fn triton_config(state: &AppState, record: &ModelRecord) -> Value {
    let mut config = state
        .engine()
        .triton_config(&model_key(record), &record.signature);
    // A chat model answers a stream request with one response per piece of text.
    if crate::chat_models::is_gguf(record) {
        config["model_transaction_policy"] = json!({"decoupled": true});
    }
    config
}

/// The versions a statistics request covers: every version, a model's, or one version; an
/// unknown name or version is NotFound.
pub fn stats_records(
    state: &AppState,
    model: Option<&str>,
    version: Option<u64>,
) -> ApiResult<Vec<Arc<ModelRecord>>> {
    match (model, version) {
        (None, _) => Ok(state.catalog().all()),
        (Some(model), None) => {
            state.catalog().resolve(model, None)?;
            Ok(state.catalog().versions(model))
        }
        (Some(model), Some(version)) => Ok(vec![state.catalog().resolve(model, Some(version))?]),
    }
}
