//! Whether a target can serve now.

use super::Target;
use crate::catalog::model_key;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use infergate_engine::ModelState;

/// A registered version is ready unless its last load failed (503): it loads on first
/// request. A pipeline is ready when its plugins resolve and its model is ready.
pub fn readiness(state: &AppState, target: &Target) -> ApiResult<()> {
    let record = match target {
        Target::Model(record) => record.clone(),
        Target::Pipeline(pipeline) => {
            super::stages::check(state, &pipeline.spec).map_err(|e| {
                ApiError::unavailable(format!(
                    "pipeline '{}' is not ready: {}",
                    pipeline.record.name, e.message
                ))
            })?;
            state
                .catalog()
                .resolve(&pipeline.spec.model, pipeline.spec.model_version)?
        }
    };
    match state.engine().state(&model_key(&record)) {
        // Triton's words first, then why.
        ModelState::Failed(reason) => Err(ApiError::unavailable(format!(
            "Request for unknown model: '{}' version {} is not at ready state: its load failed: {reason}",
            record.name, record.version
        ))),
        _ => Ok(()),
    }
}
