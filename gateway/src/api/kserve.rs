//! KServe v2 / Open Inference Protocol over HTTP: health, metadata and inference.

use super::body::read_limited;
use super::codec::{self, HEADER_LENGTH};
use crate::auth::Scope;
use crate::error::{ApiError, ApiResult};
use crate::state::{model_key, parse_version, AppState};
use crate::store::models::ModelRecord;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use http::{HeaderMap, HeaderValue, StatusCode};
use infergate_engine::{ModelState, TensorSpec};
use serde_json::{json, Value};
use std::sync::Arc;

type S = State<Arc<AppState>>;

pub const SERVER_NAME: &str = "infergate";

pub async fn server_metadata(State(state): S, headers: HeaderMap) -> ApiResult<Json<Value>> {
    state.authorize(&headers, Scope::Infer)?;
    Ok(Json(json!({
        "name": SERVER_NAME,
        "version": env!("CARGO_PKG_VERSION"),
        "extensions": ["binary_tensor_data", "model_configuration", "model_repository", "statistics"],
    })))
}

/// Liveness needs no key: orchestrators probe it.
pub async fn live() -> StatusCode {
    StatusCode::OK
}

/// Readiness turns false while the server drains on shutdown.
pub async fn ready(State(state): S) -> StatusCode {
    if state.is_ready() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    }
}

fn tensor_metadata(specs: &[TensorSpec]) -> Vec<Value> {
    specs
        .iter()
        .map(|s| json!({"name": s.name, "datatype": s.datatype.name(), "shape": s.shape}))
        .collect()
}

fn metadata(state: &AppState, record: &ModelRecord) -> Value {
    let versions: Vec<String> = state
        .catalog
        .versions(&record.name)
        .iter()
        .map(|r| r.version.to_string())
        .collect();
    json!({
        "name": record.name,
        "versions": versions,
        "platform": "onnxruntime_onnx",
        "inputs": tensor_metadata(&record.signature.inputs),
        "outputs": tensor_metadata(&record.signature.outputs),
    })
}

pub async fn model_metadata(
    State(state): S,
    Path(model): Path<String>,
    headers: HeaderMap,
) -> ApiResult<Json<Value>> {
    state.authorize(&headers, Scope::Infer)?;
    let record = state.catalog.resolve(&model, None)?;
    Ok(Json(metadata(&state, &record)))
}

pub async fn model_version_metadata(
    State(state): S,
    Path((model, version)): Path<(String, String)>,
    headers: HeaderMap,
) -> ApiResult<Json<Value>> {
    state.authorize(&headers, Scope::Infer)?;
    let record = state
        .catalog
        .resolve(&model, Some(parse_version(&version)?))?;
    Ok(Json(metadata(&state, &record)))
}

/// A registered version is ready unless its last load failed: it loads on first request.
fn readiness(state: &AppState, record: &ModelRecord) -> ApiResult<StatusCode> {
    match state.engine.state(&model_key(record)) {
        ModelState::Failed(reason) => Err(ApiError::unavailable(format!(
            "model '{}' version {} failed to load: {reason}",
            record.name, record.version
        ))),
        _ => Ok(StatusCode::OK),
    }
}

pub async fn model_ready(
    State(state): S,
    Path(model): Path<String>,
    headers: HeaderMap,
) -> ApiResult<StatusCode> {
    state.authorize(&headers, Scope::Infer)?;
    let record = state.catalog.resolve(&model, None)?;
    readiness(&state, &record)
}

pub async fn model_version_ready(
    State(state): S,
    Path((model, version)): Path<(String, String)>,
    headers: HeaderMap,
) -> ApiResult<StatusCode> {
    state.authorize(&headers, Scope::Infer)?;
    let record = state
        .catalog
        .resolve(&model, Some(parse_version(&version)?))?;
    readiness(&state, &record)
}

pub async fn infer(
    State(state): S,
    Path(model): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    run_infer(state, &model, None, headers, body).await
}

pub async fn infer_version(
    State(state): S,
    Path((model, version)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    let version = parse_version(&version)?;
    run_infer(state, &model, Some(version), headers, body).await
}

fn header_length(headers: &HeaderMap) -> ApiResult<Option<usize>> {
    headers
        .get(HEADER_LENGTH)
        .map(|v| {
            v.to_str()
                .ok()
                .and_then(|s| s.trim().parse::<usize>().ok())
                .ok_or_else(|| {
                    ApiError::bad_request("Inference-Header-Content-Length must be a byte count")
                })
        })
        .transpose()
}

async fn run_infer(
    state: Arc<AppState>,
    model: &str,
    version: Option<u64>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    state.authorize(&headers, Scope::Infer)?;
    let record = state.catalog.resolve(model, version)?;
    let body = read_limited(&headers, body, state.config.limits.max_request_bytes).await?;
    let (json_part, binary_part) = codec::split_body(&body, header_length(&headers)?)?;
    let request = codec::parse_request(json_part)?;
    let inputs = codec::decode_inputs(&request, binary_part)?;
    let outputs: Vec<String> = request.outputs.iter().map(|o| o.name.clone()).collect();
    let results = state
        .engine
        .infer(
            &model_key(&record),
            &state.model_path(&record),
            inputs,
            outputs,
        )
        .await?;
    let (bytes, json_len) =
        codec::encode_response(&request, &record.name, record.version, &results)?;
    let mut response = Response::new(Body::from(bytes));
    let content_type = if json_len.is_some() {
        "application/octet-stream"
    } else {
        "application/json"
    };
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static(content_type),
    );
    if let Some(len) = json_len {
        response
            .headers_mut()
            .insert(HEADER_LENGTH, HeaderValue::from(len));
    }
    response.extensions_mut().insert(crate::metrics::Served {
        model: record.name.clone(),
        version: record.version,
    });
    Ok(response.into_response())
}
