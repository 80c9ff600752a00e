//! KServe v2 / Open Inference Protocol over HTTP: health, metadata and inference.

use super::body::{read_limited, reject_unread};
use super::codec::{self, HEADER_LENGTH};
use crate::auth::Scope;
use crate::error::{ApiError, ApiResult};
use crate::pipeline::Pipeline;
use crate::state::{model_key, parse_version, AppState};
use crate::store::models::ModelRecord;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::response::Response;
use axum::Json;
use http::{HeaderMap, HeaderValue, StatusCode};
use infergate_engine::{InferOptions, ModelState, TensorSpec};
use serde_json::{json, Value};
use std::sync::Arc;

type S = State<Arc<AppState>>;

pub const SERVER_NAME: &str = "infergate";

pub async fn server_metadata(State(state): S, headers: HeaderMap) -> ApiResult<Json<Value>> {
    state.authorize(&headers, Scope::Infer)?;
    // Where native ops run, and why not on a GPU when they don't.
    let device = match state.ops.gpu() {
        Some(gpu) => json!({"kind": "cuda", "name": gpu.name(), "arch": gpu.arch()}),
        None => json!({"kind": "cpu", "requested": state.config.engine.device}),
    };
    Ok(Json(json!({
        "name": SERVER_NAME,
        "device": device,
        "version": env!("CARGO_PKG_VERSION"),
        // Triton's extensions, then ours (clients such as the dashboard discover features here
        // instead of probing routes).
        "extensions": [
            "binary_tensor_data", "model_configuration", "model_repository", "statistics",
            "infergate_pipelines", "infergate_websocket_stream", "infergate_events", "openai",
        ],
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

fn served_outputs(state: &AppState, record: &ModelRecord) -> Vec<TensorSpec> {
    state
        .engine
        .model_config(&model_key(record))
        .served_outputs(&record.signature)
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
        // The model's outputs and those its configured post-ops add.
        "outputs": tensor_metadata(&served_outputs(state, record)),
        // Where a loaded version runs (ORT execution providers) and, when it fell back to the
        // CPU, why; null until it loads.
        "execution": state.engine.execution(&model_key(record)),
    })
}

/// A pipeline's metadata: the model's inputs when no pre-plugin reshapes them (and outputs
/// when no post-plugin does); otherwise what the plugins describe is in `/api/pipelines`.
fn pipeline_metadata(state: &AppState, pipeline: &Pipeline) -> Value {
    let spec = &pipeline.spec;
    let model = state.catalog.resolve(&spec.model, spec.model_version).ok();
    let inputs = match &model {
        Some(m) if spec.pre.is_empty() => tensor_metadata(&m.signature.inputs),
        _ => Vec::new(),
    };
    let outputs = match &model {
        Some(m) if spec.post.is_empty() => tensor_metadata(&served_outputs(state, m)),
        _ => Vec::new(),
    };
    json!({
        "name": pipeline.record.name,
        "versions": ["1"],
        "platform": "infergate_pipeline",
        "inputs": inputs,
        "outputs": outputs,
    })
}

async fn describe(
    state: &AppState,
    headers: &HeaderMap,
    name: &str,
    version: Option<&str>,
) -> ApiResult<Json<Value>> {
    state.authorize(headers, Scope::Infer)?;
    let version = version.map(parse_version).transpose()?;
    Ok(Json(match target(state, name, version)? {
        Target::Model(record) => metadata(state, &record),
        Target::Pipeline(pipeline) => pipeline_metadata(state, &pipeline),
    }))
}

pub async fn model_metadata(
    State(state): S,
    Path(model): Path<String>,
    headers: HeaderMap,
) -> ApiResult<Json<Value>> {
    describe(&state, &headers, &model, None).await
}

pub async fn model_version_metadata(
    State(state): S,
    Path((model, version)): Path<(String, String)>,
    headers: HeaderMap,
) -> ApiResult<Json<Value>> {
    describe(&state, &headers, &model, Some(&version)).await
}

/// A registered version is ready unless its last load failed: it loads on first request. A
/// pipeline is ready when its plugins resolve and its model is ready.
fn readiness(state: &AppState, target: Target) -> ApiResult<StatusCode> {
    let record = match target {
        Target::Model(record) => record,
        Target::Pipeline(pipeline) => {
            crate::pipeline::run::check(state, &pipeline.spec).map_err(|e| {
                ApiError::unavailable(format!(
                    "pipeline '{}' is not ready: {}",
                    pipeline.record.name, e.message
                ))
            })?;
            state
                .catalog
                .resolve(&pipeline.spec.model, pipeline.spec.model_version)?
        }
    };
    match state.engine.state(&model_key(&record)) {
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
    readiness(&state, target(&state, &model, None)?)
}

pub async fn model_version_ready(
    State(state): S,
    Path((model, version)): Path<(String, String)>,
    headers: HeaderMap,
) -> ApiResult<StatusCode> {
    state.authorize(&headers, Scope::Infer)?;
    readiness(
        &state,
        target(&state, &model, Some(parse_version(&version)?))?,
    )
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

/// What a `/v2/models/{name}` route addresses: a model version or a pipeline. Models win;
/// the two share one namespace (saving a pipeline under a model's name is refused).
pub enum Target {
    Model(Arc<ModelRecord>),
    Pipeline(Arc<Pipeline>),
}

pub fn target(state: &AppState, name: &str, version: Option<u64>) -> ApiResult<Target> {
    match state.catalog.resolve(name, version) {
        Ok(record) => Ok(Target::Model(record)),
        Err(e) if e.status == StatusCode::NOT_FOUND && matches!(version, None | Some(1)) => {
            state.pipelines.get(name).map(Target::Pipeline).ok_or(e)
        }
        Err(e) => Err(e),
    }
}

/// An inference answer: JSON, or JSON header + binary tensors.
pub fn tensor_response(bytes: Vec<u8>, json_len: Option<usize>) -> Response {
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
    response
}

/// Triton's request parameters `priority` (1 = highest) and `timeout` (microseconds in the
/// queue).
fn infer_options(request: &codec::InferRequest) -> ApiResult<InferOptions> {
    let number = |name: &str| -> ApiResult<Option<u64>> {
        match request.parameters.get(name) {
            None => Ok(None),
            Some(v) => v.as_u64().map(Some).ok_or_else(|| {
                ApiError::bad_request(format!(
                    "request parameter '{name}' must be a non-negative integer, got {v}"
                ))
            }),
        }
    };
    let priority = number("priority")?.unwrap_or(0);
    Ok(InferOptions {
        priority: u32::try_from(priority).map_err(|_| {
            ApiError::bad_request(format!(
                "request parameter 'priority' {priority} is too large"
            ))
        })?,
        timeout: number("timeout")?
            .filter(|&us| us > 0)
            .map(std::time::Duration::from_micros),
    })
}

async fn run_infer(
    state: Arc<AppState>,
    model: &str,
    version: Option<u64>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    let target = match state
        .authorize(&headers, Scope::Infer)
        .and_then(|_| target(&state, model, version))
    {
        Ok(target) => target,
        Err(e) => return Err(reject_unread(e, &headers, body).await),
    };
    let body = read_limited(&headers, body, state.config.limits.max_request_bytes).await?;
    let (json_part, binary_part) = codec::split_body(&body, header_length(&headers)?)?;
    let request = codec::parse_request(json_part)?;
    let inputs = codec::decode_inputs(&request, binary_part)?;
    let record = match target {
        Target::Model(record) => record,
        Target::Pipeline(pipeline) => {
            return super::pipelines::kserve_infer(&state, &pipeline, request, inputs).await
        }
    };
    let outputs: Vec<String> = request.outputs.iter().map(|o| o.name.clone()).collect();
    let options = infer_options(&request)?;
    let results = state
        .engine
        .infer_with(
            &model_key(&record),
            &state.model_path(&record),
            inputs,
            outputs,
            options,
        )
        .await?;
    let (bytes, json_len) =
        codec::encode_response(&request, &record.name, record.version, &results)?;
    let mut response = tensor_response(bytes, json_len);
    response.extensions_mut().insert(crate::metrics::Served {
        model: record.name.clone(),
        version: record.version,
    });
    Ok(response)
}
