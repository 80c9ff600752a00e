//! Payload log settings: whether the requests of a model, a pipeline or an API key are logged,
//! which share of them, and to which of the sinks the server defines (`[payload_log.sinks]`,
//! or those an admin defined since: `super::payload_log_sinks`).
//!
//! - `/api/models/{model}/payload-log` and `/api/pipelines/{pipeline}/payload-log` (scope
//!   `upload`): an uploader turns logging on and off, but can only name a sink the server
//!   defines. The setting belongs to the model or pipeline (kept with its settings), survives
//!   new uploads, and applies to the next request on every replica.
//! - `/api/keys/{id}/payload-log` (scope `admin`): every request of that key, beside any
//!   model's or pipeline's setting.
//!
//! Every answer also lists the sinks.

use super::authorized::{Admin, Authorized, Upload};
use super::body::read_limited;
use super::key_admin::KeyAdmin;
use axum::extract::{Path, State};
use axum::Json;
use http::HeaderMap;
use infergate_api_types::keys::KeyPayloadLog;
use infergate_kserve::http_error::HttpResult;
use infergate_service::error::{ApiError, ApiResult};
use infergate_service::model_settings::PAYLOAD_LOG;
use infergate_service::payload_log::setting::LogSetting;
use infergate_service::state::AppState;
use infergate_store::keys::KeyRecord;
use serde::Serialize;
use serde_json::{Map, Value};
use std::sync::Arc;

type S = State<Arc<AppState>>;

/// The answer of a model's or pipeline's payload-log route.
#[derive(Serialize)]
pub struct PayloadLogView {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pipeline: Option<String>,
    /// The setting; `null`: its requests are not logged.
    pub payload_log: Option<LogSetting>,
    /// The sinks this server defines.
    pub sinks: Vec<String>,
}

/// What a model or pipeline route addresses; both keep the setting in the settings stored
/// under their name (pipelines share the models' names).
enum Owner {
    Model(String),
    Pipeline(String),
}

impl Owner {
    fn name(&self) -> &str {
        match self {
            Owner::Model(name) | Owner::Pipeline(name) => name,
        }
    }

    /// 404 when there is no such model or pipeline.
    fn check(&self, state: &AppState) -> ApiResult<()> {
        match self {
            Owner::Model(name) => state.catalog().known_versions(name).map(|_| ()),
            Owner::Pipeline(name) => match state.pipelines().get(name) {
                Some(_) => Ok(()),
                None => Err(ApiError::not_found(format!("no pipeline '{name}'"))),
            },
        }
    }

    fn view(&self, state: &AppState, settings: Option<&Map<String, Value>>) -> PayloadLogView {
        let (model, pipeline) = match self {
            Owner::Model(name) => (Some(name.clone()), None),
            Owner::Pipeline(name) => (None, Some(name.clone())),
        };
        PayloadLogView {
            model,
            pipeline,
            payload_log: settings
                .and_then(|s| s.get(PAYLOAD_LOG))
                .and_then(|v| LogSetting::from_stored(v).ok()),
            sinks: state.payload_logs().sink_names(),
        }
    }
}

/// A `PUT` body: `{"mode": "request" | "response" | "all", "sample": 0.1, "sink": "NAME"}`,
/// naming a sink the server defines; a bad field is 400 naming it.
async fn checked_body(
    state: &AppState,
    headers: &HeaderMap,
    body: axum::body::Body,
) -> HttpResult<LogSetting> {
    let body = read_limited(headers, body, super::body::MAX_JSON_API_BYTES).await?;
    let setting = LogSetting::parse(&body, state.payload_logs().sink_names().iter())
        .map_err(|e| ApiError::bad_request(format!("payload log: {e}")))?;
    Ok(setting)
}

fn encoded(setting: &LogSetting) -> ApiResult<Value> {
    serde_json::to_value(setting)
        .map_err(|e| ApiError::internal(format!("encoding the setting: {e}")))
}

async fn put_owned(
    state: &AppState,
    owner: Owner,
    headers: HeaderMap,
    body: axum::body::Body,
) -> HttpResult<Json<PayloadLogView>> {
    owner.check(state).map_err(ApiError::before_body)?;
    let setting = checked_body(state, &headers, body).await?;
    let settings = state
        .model_settings()
        .write(
            state.store(),
            owner.name(),
            PAYLOAD_LOG,
            Some(encoded(&setting)?),
        )
        .await?;
    tracing::info!(name = %owner.name(), sink = %setting.sink, mode = ?setting.mode,
                   sample = setting.sample, "payload log set");
    Ok(Json(owner.view(state, Some(&settings))))
}

fn get_owned(state: &AppState, owner: Owner) -> HttpResult<Json<PayloadLogView>> {
    owner.check(state)?;
    let settings = state.model_settings().get(owner.name());
    Ok(Json(owner.view(state, settings.as_ref().map(|s| &s.raw))))
}

async fn delete_owned(state: &AppState, owner: Owner) -> HttpResult<Json<PayloadLogView>> {
    owner.check(state)?;
    let settings = state
        .model_settings()
        .write(state.store(), owner.name(), PAYLOAD_LOG, None)
        .await?;
    tracing::info!(name = %owner.name(), "payload log removed");
    Ok(Json(owner.view(state, Some(&settings))))
}

/// `PUT /api/models/{model}/payload-log`: [`checked_body`]'s body; nothing is stored when it
/// is refused.
pub async fn put(
    _: Authorized<Upload>,
    State(state): S,
    Path(model): Path<String>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> HttpResult<Json<PayloadLogView>> {
    put_owned(&state, Owner::Model(model), headers, body).await
}

/// `GET /api/models/{model}/payload-log`.
pub async fn get(
    _: Authorized<Upload>,
    State(state): S,
    Path(model): Path<String>,
) -> HttpResult<Json<PayloadLogView>> {
    get_owned(&state, Owner::Model(model))
}

/// `DELETE /api/models/{model}/payload-log`: the model's requests are not logged any more.
pub async fn delete(
    _: Authorized<Upload>,
    State(state): S,
    Path(model): Path<String>,
) -> HttpResult<Json<PayloadLogView>> {
    delete_owned(&state, Owner::Model(model)).await
}

/// `PUT /api/pipelines/{pipeline}/payload-log`: the model route's body; an entry holds the
/// pipeline's inputs and final outputs.
pub async fn put_pipeline(
    _: Authorized<Upload>,
    State(state): S,
    Path(pipeline): Path<String>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> HttpResult<Json<PayloadLogView>> {
    put_owned(&state, Owner::Pipeline(pipeline), headers, body).await
}

/// `GET /api/pipelines/{pipeline}/payload-log`.
pub async fn get_pipeline(
    _: Authorized<Upload>,
    State(state): S,
    Path(pipeline): Path<String>,
) -> HttpResult<Json<PayloadLogView>> {
    get_owned(&state, Owner::Pipeline(pipeline))
}

/// `DELETE /api/pipelines/{pipeline}/payload-log`.
pub async fn delete_pipeline(
    _: Authorized<Upload>,
    State(state): S,
    Path(pipeline): Path<String>,
) -> HttpResult<Json<PayloadLogView>> {
    delete_owned(&state, Owner::Pipeline(pipeline)).await
}

fn key_view(state: &AppState, key: &KeyRecord) -> KeyPayloadLog {
    KeyPayloadLog {
        key_id: key.id,
        public_id: key.public_id.clone(),
        payload_log: key.info().payload_log,
        sinks: state.payload_logs().sink_names(),
    }
}

/// Writes the key's setting (None removes it); its next request follows it, on every replica.
fn store_key(
    state: &AppState,
    keys: &KeyAdmin,
    key: &KeyRecord,
    setting: Option<&str>,
) -> ApiResult<KeyPayloadLog> {
    let updated = keys
        .store()
        .set_key_payload_log(&key.id.to_string(), setting)?
        .ok_or_else(|| ApiError::not_found(format!("no API key '{}'", key.id)))?;
    Ok(key_view(state, &updated))
}

/// `PUT /api/keys/{id}/payload-log`: the model route's body; nothing is stored when it is
/// refused.
pub async fn put_key(
    _: Authorized<Admin>,
    State(state): S,
    State(keys): State<KeyAdmin>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> HttpResult<Json<KeyPayloadLog>> {
    let key = keys.find(&id).map_err(ApiError::before_body)?;
    let setting = checked_body(&state, &headers, body).await?;
    let answer = store_key(&state, &keys, &key, Some(&encoded(&setting)?.to_string()))?;
    tracing::info!(key_id = key.id, sink = %setting.sink, mode = ?setting.mode,
                   sample = setting.sample, "API key payload log set");
    Ok(Json(answer))
}

/// `GET /api/keys/{id}/payload-log`.
pub async fn get_key(
    _: Authorized<Admin>,
    State(state): S,
    State(keys): State<KeyAdmin>,
    Path(id): Path<String>,
) -> HttpResult<Json<KeyPayloadLog>> {
    Ok(Json(key_view(&state, &keys.find(&id)?)))
}

/// `DELETE /api/keys/{id}/payload-log`: models' and pipelines' settings still apply to it.
pub async fn delete_key(
    _: Authorized<Admin>,
    State(state): S,
    State(keys): State<KeyAdmin>,
    Path(id): Path<String>,
) -> HttpResult<Json<KeyPayloadLog>> {
    let key = keys.find(&id)?;
    let answer = store_key(&state, &keys, &key, None)?;
    tracing::info!(key_id = key.id, "API key payload log removed");
    Ok(Json(answer))
}
