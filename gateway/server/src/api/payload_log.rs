//! `/api/models/{model}/payload-log`: whether a model's requests and answers are logged, which
//! share of them, and to which of the sinks the operator defined (`[payload_log.sinks]`).
//! `PUT` and `DELETE` take scope `upload`: an uploader turns logging on and off, but can only
//! name a sink the server's configuration defines. `GET` (scope `upload`) also lists those
//! sinks. The setting belongs to the model, survives new uploads, and applies to the next
//! request on every replica.

use super::authorized::{Authorized, Upload};
use super::body::read_limited;
use axum::extract::{Path, State};
use axum::Json;
use http::HeaderMap;
use infergate_kserve::http_error::HttpResult;
use infergate_service::error::ApiError;
use infergate_service::model_settings::PAYLOAD_LOG;
use infergate_service::payload_log::setting::LogSetting;
use infergate_service::state::AppState;
use serde::Serialize;
use serde_json::{Map, Value};
use std::sync::Arc;

type S = State<Arc<AppState>>;

/// The answer of every payload-log route.
#[derive(Serialize)]
pub struct PayloadLogView {
    pub model: String,
    /// The setting; `null`: the model's requests are not logged.
    pub payload_log: Option<LogSetting>,
    /// The sinks this server defines.
    pub sinks: Vec<String>,
}

fn view(state: &AppState, model: &str, settings: Option<&Map<String, Value>>) -> PayloadLogView {
    PayloadLogView {
        model: model.to_owned(),
        payload_log: settings
            .and_then(|s| s.get(PAYLOAD_LOG))
            .and_then(|v| LogSetting::from_stored(v).ok()),
        sinks: state.payload_logs().sink_names().cloned().collect(),
    }
}

/// `PUT /api/models/{model}/payload-log`: `{"mode": "request" | "response" | "all",
/// "sample": 0.1, "sink": "NAME"}`. A bad field or an undefined sink is 400 naming it;
/// nothing is stored then.
pub async fn put(
    _: Authorized<Upload>,
    State(state): S,
    Path(model): Path<String>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> HttpResult<Json<PayloadLogView>> {
    state
        .catalog()
        .known_versions(&model)
        .map_err(ApiError::before_body)?;
    let body = read_limited(&headers, body, super::body::MAX_JSON_API_BYTES).await?;
    let setting = LogSetting::parse(&body, state.payload_logs().sink_names())
        .map_err(|e| ApiError::bad_request(format!("payload log: {e}")))?;
    let value = serde_json::to_value(&setting)
        .map_err(|e| ApiError::internal(format!("encoding the setting: {e}")))?;
    let settings = state
        .model_settings()
        .write(state.store(), &model, PAYLOAD_LOG, Some(value))
        .await?;
    tracing::info!(model = %model, sink = %setting.sink, mode = ?setting.mode,
                   sample = setting.sample, "payload log set");
    Ok(Json(view(&state, &model, Some(&settings))))
}

/// `GET /api/models/{model}/payload-log`.
pub async fn get(
    _: Authorized<Upload>,
    State(state): S,
    Path(model): Path<String>,
) -> HttpResult<Json<PayloadLogView>> {
    state.catalog().known_versions(&model)?;
    let settings = state.model_settings().get(&model);
    Ok(Json(view(
        &state,
        &model,
        settings.as_ref().map(|s| &s.raw),
    )))
}

/// `DELETE /api/models/{model}/payload-log`: the model's requests are not logged any more.
pub async fn delete(
    _: Authorized<Upload>,
    State(state): S,
    Path(model): Path<String>,
) -> HttpResult<Json<PayloadLogView>> {
    state.catalog().known_versions(&model)?;
    let settings = state
        .model_settings()
        .write(state.store(), &model, PAYLOAD_LOG, None)
        .await?;
    tracing::info!(model = %model, "payload log removed");
    Ok(Json(view(&state, &model, Some(&settings))))
}
