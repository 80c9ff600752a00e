//! `/api/models/{model}/guardrails`: a chat model's own chat guardrails (uploaded plugins of
//! the guardrail world), run after the server's `[guardrails]` and the caller's key's on its
//! prompts and answers. `PUT` (scope `upload`) sets them, `GET` (scope `infer`) reads them,
//! `DELETE` (scope `upload`) detaches them. They belong to the model, not a version: they
//! survive new uploads and go with the model, and apply to the next request on every replica.
//!
//! `/api/keys/{id}/guardrails` (scope `admin`): an API key's own, the same way, run after the
//! server's and before the model's on that key's chat requests.

use super::authorized::{Admin, Authorized, Infer, Upload};
use super::body::read_limited;
use super::key_admin::KeyAdmin;
use axum::extract::{Path, State};
use axum::Json;
use http::HeaderMap;
use infergate_api_types::keys::KeyGuardrails;
use infergate_kserve::http_error::HttpResult;
use infergate_service::error::{ApiError, ApiResult};
use infergate_service::guardrails::Attachment;
use infergate_service::model_settings::GUARDRAILS;
use infergate_service::pipelines::spec::PluginRef;
use infergate_service::state::AppState;
use infergate_store::keys::KeyRecord;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::Arc;

type S = State<Arc<AppState>>;

/// The body of `PUT` and the answer of every route.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GuardrailsView {
    #[serde(default)]
    pub model: String,
    pub guardrails: Vec<Attachment>,
}

fn view(state: &AppState, model: &str) -> GuardrailsView {
    GuardrailsView {
        model: model.to_owned(),
        guardrails: state
            .model_settings()
            .get(model)
            .map(|s| s.guardrails.clone())
            .unwrap_or_default(),
    }
}

/// Writes the model's guardrails field (None removes it) and applies it here.
async fn store(state: &AppState, model: &str, value: Option<Value>) -> ApiResult<GuardrailsView> {
    state
        .model_settings()
        .write(state.store(), model, GUARDRAILS, value)
        .await?;
    Ok(view(state, model))
}

/// A `PUT` body: `{"guardrails": [{"plugin": "pii-mask"}, {"plugin": "blocked-terms@1.0.0",
/// "config": {"terms": ["..."]}}]}`, each naming an uploaded guardrail now (400 naming it
/// otherwise), as JSON to store.
async fn checked_body(
    state: &AppState,
    headers: &HeaderMap,
    body: axum::body::Body,
) -> HttpResult<(Vec<Attachment>, Value)> {
    let body = read_limited(headers, body, super::body::MAX_JSON_API_BYTES).await?;
    let body: Value = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("guardrails: the body is not JSON: {e}")))?;
    let list = match body {
        Value::Object(mut fields) if fields.len() == 1 => fields.remove("guardrails"),
        _ => None,
    }
    .ok_or_else(|| ApiError::bad_request("guardrails: {\"guardrails\": [...]} is expected"))?;
    let list = Attachment::list(list).map_err(ApiError::bad_request)?;
    for a in &list {
        let r = PluginRef::parse(&a.plugin).map_err(|e| ApiError::bad_request(e.0))?;
        let loaded = state.plugins().resolve(&r).map_err(|e| {
            ApiError::bad_request(format!("guardrails: {}: {}", a.plugin, e.message))
        })?;
        if loaded.guardrail().is_none() {
            return Err(ApiError::bad_request(format!(
                "guardrails: {} is a {}-plugin, not a chat guardrail",
                a.plugin,
                loaded.kind().as_str()
            ))
            .into());
        }
    }
    let value = serde_json::to_value(&list)
        .map_err(|e| ApiError::internal(format!("encoding the guardrails: {e}")))?;
    Ok((list, value))
}

/// `PUT /api/models/{model}/guardrails`: [`checked_body`]'s body; nothing is stored when one
/// is refused.
pub async fn put(
    _: Authorized<Upload>,
    State(state): S,
    Path(model): Path<String>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> HttpResult<Json<GuardrailsView>> {
    state
        .catalog()
        .known_versions(&model)
        .map_err(ApiError::before_body)?;
    let (list, value) = checked_body(&state, &headers, body).await?;
    let answer = store(&state, &model, Some(value)).await?;
    tracing::info!(model = %model, guardrails = list.len(), "chat guardrails set");
    Ok(Json(answer))
}

/// `GET /api/models/{model}/guardrails`.
pub async fn get(
    _: Authorized<Infer>,
    State(state): S,
    Path(model): Path<String>,
) -> HttpResult<Json<GuardrailsView>> {
    state.catalog().known_versions(&model)?;
    Ok(Json(view(&state, &model)))
}

/// `DELETE /api/models/{model}/guardrails`: the server's guardrails still run.
pub async fn delete(
    _: Authorized<Upload>,
    State(state): S,
    Path(model): Path<String>,
) -> HttpResult<Json<GuardrailsView>> {
    state.catalog().known_versions(&model)?;
    let answer = store(&state, &model, None).await?;
    tracing::info!(model = %model, "chat guardrails removed");
    Ok(Json(answer))
}

fn key_view(key: &KeyRecord) -> KeyGuardrails {
    KeyGuardrails {
        key_id: key.id,
        public_id: key.public_id.clone(),
        guardrails: key.guardrail_list(),
    }
}

/// Writes the key's guardrails (None removes them); its next request runs them, on every
/// replica.
fn store_key(keys: &KeyAdmin, key: &KeyRecord, list: Option<&str>) -> ApiResult<KeyGuardrails> {
    let updated = keys
        .store()
        .set_key_guardrails(&key.id.to_string(), list)?
        .ok_or_else(|| ApiError::not_found(format!("no API key '{}'", key.id)))?;
    Ok(key_view(&updated))
}

/// `PUT /api/keys/{id}/guardrails`: the body of the model route; nothing is stored when one is
/// refused.
pub async fn put_key(
    _: Authorized<Admin>,
    State(state): S,
    State(keys): State<KeyAdmin>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> HttpResult<Json<KeyGuardrails>> {
    let key = keys.find(&id).map_err(ApiError::before_body)?;
    let (list, value) = checked_body(&state, &headers, body).await?;
    let answer = store_key(&keys, &key, Some(&value.to_string()))?;
    tracing::info!(
        key_id = key.id,
        guardrails = list.len(),
        "API key guardrails set"
    );
    Ok(Json(answer))
}

/// `GET /api/keys/{id}/guardrails`.
pub async fn get_key(
    _: Authorized<Admin>,
    State(keys): State<KeyAdmin>,
    Path(id): Path<String>,
) -> HttpResult<Json<KeyGuardrails>> {
    Ok(Json(key_view(&keys.find(&id)?)))
}

/// `DELETE /api/keys/{id}/guardrails`: the server's and the model's still run.
pub async fn delete_key(
    _: Authorized<Admin>,
    State(keys): State<KeyAdmin>,
    Path(id): Path<String>,
) -> HttpResult<Json<KeyGuardrails>> {
    let key = keys.find(&id)?;
    let answer = store_key(&keys, &key, None)?;
    tracing::info!(key_id = key.id, "API key guardrails removed");
    Ok(Json(answer))
}
