//! Triton's trace extension over HTTP: `GET|POST /v2[/models/{model}]/trace/setting`, in
//! Triton's JSON (every value a string, `trace_level` a list; `null` clears a setting).
//! Reading needs an `infer` key, changing an `admin` key. A change is stored and reaches every
//! replica (`infergate_service::trace_settings`).

use super::authorized::{Admin, Authorized, Infer};
use super::body::read_limited;
use axum::extract::{Path, State};
use axum::Json;
use http::HeaderMap;
use infergate_api_types::kserve::TraceSettings;
use infergate_kserve::http_error::HttpResult;
use infergate_service::error::{ApiError, ApiResult};
use infergate_service::state::AppState;
use infergate_service::trace_settings::{self, Values};
use serde_json::Value;
use std::sync::Arc;

type S = State<Arc<AppState>>;

pub async fn get(_: Authorized<Infer>, State(state): S) -> HttpResult<Json<TraceSettings>> {
    Ok(Json(answer(trace_settings::read(&state, None)?)))
}

pub async fn model_get(
    _: Authorized<Infer>,
    State(state): S,
    Path(model): Path<String>,
) -> HttpResult<Json<TraceSettings>> {
    Ok(Json(answer(trace_settings::read(&state, Some(&model))?)))
}

pub async fn post(
    _: Authorized<Admin>,
    State(state): S,
    headers: HeaderMap,
    body: axum::body::Body,
) -> HttpResult<Json<TraceSettings>> {
    let settings = settings(&headers, body).await?;
    Ok(Json(answer(
        trace_settings::change(&state, None, &settings).await?,
    )))
}

pub async fn model_post(
    _: Authorized<Admin>,
    State(state): S,
    Path(model): Path<String>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> HttpResult<Json<TraceSettings>> {
    let settings = settings(&headers, body).await?;
    Ok(Json(answer(
        trace_settings::change(&state, Some(&model), &settings).await?,
    )))
}

/// The request's settings, each as its strings; an empty body changes none.
async fn settings(headers: &HeaderMap, body: axum::body::Body) -> ApiResult<Vec<(String, Values)>> {
    let body = read_limited(headers, body, super::body::MAX_JSON_API_BYTES).await?;
    if body.is_empty() {
        return Ok(Vec::new());
    }
    let document: serde_json::Map<String, Value> = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(format!(
            "trace setting request body is not a JSON object: {e}"
        ))
    })?;
    document
        .into_iter()
        .map(|(name, value)| {
            let values = match value {
                Value::Null => None,
                Value::Array(items) => Some(
                    items
                        .into_iter()
                        .map(|item| text(&name, item))
                        .collect::<ApiResult<_>>()?,
                ),
                other => Some(vec![text(&name, other)?]),
            };
            Ok((name, values))
        })
        .collect()
}

/// A setting's value as Triton reads it: a string (a number is taken as its digits).
fn text(name: &str, value: Value) -> ApiResult<String> {
    match value {
        Value::String(text) => Ok(text),
        Value::Number(number) => Ok(number.to_string()),
        _ => Err(ApiError::bad_request(format!(
            "Unable to parse '{name}': expected a string"
        ))),
    }
}

/// The settings as Triton's JSON answer.
fn answer(settings: Vec<(&'static str, Vec<String>)>) -> TraceSettings {
    let mut answer = TraceSettings {
        trace_level: Vec::new(),
        trace_rate: String::new(),
        trace_count: String::new(),
        trace_mode: String::new(),
    };
    for (name, values) in settings {
        let first = values.first().cloned().unwrap_or_default();
        match name {
            "trace_level" => answer.trace_level = values,
            "trace_rate" => answer.trace_rate = first,
            "trace_count" => answer.trace_count = first,
            "trace_mode" => answer.trace_mode = first,
            _ => {}
        }
    }
    answer
}
