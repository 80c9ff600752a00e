//! Where a model version runs. Every inference reaches a model through [`run_model`]: KServe
//! on a model, a pipeline's model stage, text generation. Today that is the engine in this
//! process; the remote workers of issue 14 are chosen here, so every protocol gains them at
//! once.

use crate::error::ApiResult;
use crate::state::{model_key, AppState};
use crate::store::models::ModelRecord;
use infergate_engine::{InferOptions, Tensor};

/// Runs `inputs` through one model version, answering `outputs` (all when empty), queued at
/// the options' priority and timeout. Dropping the future takes the request out of the queue.
pub async fn run_model(
    state: &AppState,
    record: &ModelRecord,
    inputs: Vec<Tensor>,
    outputs: Vec<String>,
    options: InferOptions,
) -> ApiResult<Vec<Tensor>> {
    Ok(state
        .engine
        .infer_with(
            &model_key(record),
            &state.model_path(record),
            inputs,
            outputs,
            options,
        )
        .await?)
}
