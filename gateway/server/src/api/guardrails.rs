//! `/api/models/{model}/guardrails`: a chat model's own chat guardrails (uploaded plugins of
//! the guardrail world), run after the server's `[guardrails]` on its prompts and answers.
//! `PUT` (scope `upload`) sets them, `GET` (scope `infer`) reads them, `DELETE` (scope
//! `upload`) detaches them. They belong to the model, not a version: they survive new uploads
//! and go with the model, and apply to the next request on every replica.

use super::authorized::{Authorized, Infer, Upload};
use super::body::read_limited;
use axum::extract::{Path, State};
use axum::Json;
use http::HeaderMap;
use infergate_kserve::http_error::HttpResult;
use infergate_service::error::{ApiError, ApiResult};
use infergate_service::guardrails::Attachment;
use infergate_service::model_settings::GUARDRAILS;
use infergate_service::pipelines::spec::PluginRef;
use infergate_service::state::AppState;
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

/// `PUT /api/models/{model}/guardrails`: `{"guardrails": [{"plugin": "pii-mask"},
/// {"plugin": "blocked-terms@1.0.0", "config": {"terms": ["..."]}}]}`. Each must name an
/// uploaded guardrail now (400 naming it otherwise; nothing is stored then).
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
    let body = read_limited(&headers, body, super::body::MAX_JSON_API_BYTES).await?;
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
