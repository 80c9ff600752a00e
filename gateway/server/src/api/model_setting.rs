//! Writing one field of a model's settings (the store's `model_settings`: what belongs to the
//! model, not one of its versions), as the routes that set them do: in the store, then in this
//! replica's view (other replicas follow through PostgreSQL's notifications).

use infergate_service::error::{ApiError, ApiResult};
use infergate_service::state::AppState;
use serde_json::{Map, Value};

/// Writes `value` as `model`'s `field` (None removes it) and applies it here: the model's
/// settings as stored now.
pub async fn store(
    state: &AppState,
    model: &str,
    field: &'static str,
    value: Option<Value>,
) -> ApiResult<Map<String, Value>> {
    let store = state.store().clone();
    let name = model.to_owned();
    let written = tokio::task::spawn_blocking(move || store.set_model_setting(&name, field, value))
        .await
        .map_err(|e| ApiError::internal(format!("settings task failed: {e}")))??;
    let settings = written
        .ok_or_else(|| ApiError::not_found(format!("model '{model}' was deleted meanwhile")))?;
    state.model_settings().set(model, settings.clone());
    Ok(settings)
}
