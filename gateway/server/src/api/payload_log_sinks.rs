//! `/api/payload-log/sinks` (scope `admin`): the sinks payload log settings may name, changed
//! at run time. `PUT /api/payload-log/sinks/{name}` defines or replaces one with the JSON shape
//! of the configuration file's `[payload_log.sinks.NAME]`; `DELETE` removes one no setting
//! names (409 naming a setting otherwise). A change is stored first and then applied, so the
//! next start and, on PostgreSQL, every other replica have it too (`payload_log::stored`: a
//! stored definition or removal wins over the configuration file's sink of that name).

use super::authorized::{Admin, Authorized};
use super::body::read_limited;
use axum::extract::{Path, State};
use axum::Json;
use http::HeaderMap;
use infergate_kserve::http_error::HttpResult;
use infergate_service::error::{ApiError, ApiResult};
use infergate_service::model_settings::PAYLOAD_LOG;
use infergate_service::payload_log::config::{check_sink_name, SinkConfig};
use infergate_service::payload_log::setting::LogSetting;
use infergate_service::payload_log::sink::Sink;
use infergate_service::state::AppState;
use serde::Serialize;
use std::sync::atomic::Ordering;
use std::sync::Arc;

type S = State<Arc<AppState>>;

/// One sink as the routes show it.
#[derive(Serialize)]
pub struct SinkView {
    pub name: String,
    /// `file` or `http`.
    pub kind: &'static str,
    /// The file's path or the endpoint's URL.
    pub target: String,
    /// `config` (the server's configuration file) or `api` (defined at run time).
    pub origin: &'static str,
    /// The sink as `PUT` takes it.
    pub config: SinkConfig,
    pub written: u64,
    pub dropped: u64,
    pub failed: u64,
}

fn view(name: String, sink: &Sink) -> SinkView {
    SinkView {
        kind: sink.config.kind(),
        target: sink.config.target(),
        origin: sink.origin,
        config: sink.config.clone(),
        written: sink.counts.written.load(Ordering::Relaxed),
        dropped: sink.counts.dropped.load(Ordering::Relaxed),
        failed: sink.counts.failed.load(Ordering::Relaxed),
        name,
    }
}

#[derive(Serialize)]
pub struct SinkList {
    pub sinks: Vec<SinkView>,
}

#[derive(Serialize)]
pub struct SinkDeleted {
    pub deleted: String,
}

/// `GET /api/payload-log/sinks`.
pub async fn list(_: Authorized<Admin>, State(state): S) -> Json<SinkList> {
    let sinks = state
        .payload_logs()
        .sinks()
        .into_iter()
        .map(|(name, sink)| view(name, &sink))
        .collect();
    Json(SinkList { sinks })
}

/// `PUT /api/payload-log/sinks/{name}`: `{"file": {"path": "...", "max_bytes": ..., "keep":
/// ..., "queue": ...}}` or `{"http": {"url": "...", ...}}`. A bad field is 400 naming it; a
/// file another sink writes is 409. Replacing a sink keeps its counts, and its old writer
/// writes what it had queued.
pub async fn put(
    _: Authorized<Admin>,
    State(state): S,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> HttpResult<Json<SinkView>> {
    let body = read_limited(&headers, body, super::body::MAX_JSON_API_BYTES).await?;
    let config = SinkConfig::parse(&body)
        .map_err(|e| ApiError::bad_request(format!("payload log sink: {e}")))?;
    check_sink_name(&name).map_err(|e| ApiError::bad_request(format!("payload log sink: {e}")))?;
    let text = serde_json::to_string(&config)
        .map_err(|e| ApiError::internal(format!("payload log sink: {e}")))?;
    let defining = state.clone();
    let key = name.clone();
    // Blocking: the store, and a file sink replacing one on the same file waits for the old
    // writer.
    tokio::task::spawn_blocking(move || {
        let store = defining.store();
        let before = store
            .list_payload_log_sinks()?
            .into_iter()
            .find(|(n, _)| *n == key)
            .map(|(_, config)| config);
        store.set_payload_log_sink(&key, Some(&text))?;
        defining.payload_logs().define(&key, config).inspect_err(|_| {
            // Refused here (a file another sink writes, or one that cannot be opened): the
            // store goes back to what it had, so no replica tries it.
            let restored = match &before {
                Some(old) => store.set_payload_log_sink(&key, old.as_deref()),
                None => store.delete_payload_log_sink(&key),
            };
            if let Err(e) = restored {
                tracing::error!(sink = %key, error = %e, "could not take back a refused payload log sink from the store; other replicas may try it");
            }
        })
    })
    .await
    .map_err(|e| ApiError::internal(format!("defining the sink: {e}")))?
    .map_err(|mut e| {
        e.message = format!("payload log sink: {}", e.message);
        e
    })?;
    let sink = state
        .payload_logs()
        .sinks()
        .into_iter()
        .find(|(n, _)| *n == name)
        .ok_or_else(|| ApiError::conflict(format!("sink '{name}' was removed meanwhile")))?;
    Ok(Json(view(sink.0, &sink.1)))
}

/// A setting that names `sink`: a model's, a pipeline's or a key's (revoked keys aside).
fn user_of(state: &AppState, sink: &str) -> ApiResult<Option<String>> {
    let names = |v: Option<&serde_json::Value>| {
        v.and_then(|v| LogSetting::from_stored(v).ok())
            .is_some_and(|s| s.sink == sink)
    };
    for (name, raw) in state.model_settings().all() {
        if names(raw.get(PAYLOAD_LOG)) {
            let what = match state.pipelines().get(&name) {
                Some(_) => "pipeline",
                None => "model",
            };
            return Ok(Some(format!("{what} '{name}'")));
        }
    }
    for key in state.store().list_keys()? {
        let setting = key
            .payload_log
            .as_deref()
            .and_then(|t| serde_json::from_str(t).ok());
        if key.revoked_at.is_none() && names(setting.as_ref()) {
            return Ok(Some(format!("API key {} ('{}')", key.id, key.name)));
        }
    }
    Ok(None)
}

/// `DELETE /api/payload-log/sinks/{name}`: 409 naming a setting that still names it.
pub async fn delete(
    _: Authorized<Admin>,
    State(state): S,
    Path(name): Path<String>,
) -> HttpResult<Json<SinkDeleted>> {
    if !state.payload_logs().sink_names().contains(&name) {
        return Err(ApiError::not_found(format!("no payload log sink '{name}'")).into());
    }
    if let Some(user) = user_of(&state, &name)? {
        return Err(ApiError::conflict(format!(
            "payload log sink '{name}' is named by the payload log of {user}: remove that first"
        ))
        .into());
    }
    let store = state.store().clone();
    let key = name.clone();
    tokio::task::spawn_blocking(move || store.set_payload_log_sink(&key, None))
        .await
        .map_err(|e| ApiError::internal(format!("removing the sink: {e}")))??;
    // Gone already when this process's follower of the store applied the removal first.
    state.payload_logs().remove(&name);
    Ok(Json(SinkDeleted { deleted: name }))
}
