//! KServe v2 / Open Inference Protocol over HTTP: health, metadata and inference.

use super::body::{read_limited, reject_unread};
use super::codec::{self, HEADER_LENGTH};
use crate::auth::Scope;
use crate::error::{ApiError, ApiResult};
use crate::pipeline::run::StageTimes;
use crate::pipeline::Pipeline;
use crate::state::{model_key, parse_version, AppState};
use crate::store::models::ModelRecord;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::response::Response;
use axum::Json;
use http::{HeaderMap, HeaderValue, StatusCode};
use infergate_engine::{InferOptions, ModelState, Tensor, TensorSpec};
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
        "extensions": EXTENSIONS,
    })))
}

/// Triton's extensions, then ours (clients such as the dashboard discover features here
/// instead of probing routes). Served by HTTP and gRPC server metadata alike.
pub const EXTENSIONS: &[&str] = &[
    "binary_tensor_data",
    "model_configuration",
    "model_repository",
    "statistics",
    "infergate_pipelines",
    "infergate_websocket_stream",
    "infergate_events",
    "infergate_grpc",
    "openai",
];

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

/// What the metadata endpoints (HTTP and gRPC) say about a model or pipeline.
pub struct Description {
    pub name: String,
    pub versions: Vec<String>,
    pub platform: &'static str,
    pub inputs: Vec<TensorSpec>,
    pub outputs: Vec<TensorSpec>,
    /// Models only: where a loaded version runs (ORT execution providers) and, when it fell
    /// back to the CPU, why; null until it loads. gRPC's metadata message has no field for it.
    pub execution: Option<Value>,
}

impl Description {
    fn to_json(&self) -> Value {
        let mut json = json!({
            "name": self.name,
            "versions": self.versions,
            "platform": self.platform,
            "inputs": tensor_metadata(&self.inputs),
            "outputs": tensor_metadata(&self.outputs),
        });
        if let Some(execution) = &self.execution {
            json["execution"] = execution.clone();
        }
        json
    }
}

fn model_description(state: &AppState, record: &ModelRecord) -> Description {
    Description {
        name: record.name.clone(),
        versions: state
            .catalog
            .versions(&record.name)
            .iter()
            .map(|r| r.version.to_string())
            .collect(),
        platform: "onnxruntime_onnx",
        inputs: record.signature.inputs.clone(),
        // The model's outputs and those its configured post-ops add.
        outputs: served_outputs(state, record),
        execution: Some(json!(state.engine.execution(&model_key(record)))),
    }
}

/// A pipeline's metadata: the model's inputs when no pre-plugin reshapes them (and outputs
/// when no post-plugin does); otherwise what the plugins describe is in `/api/pipelines`.
fn pipeline_description(state: &AppState, pipeline: &Pipeline) -> Description {
    let spec = &pipeline.spec;
    let model = state.catalog.resolve(&spec.model, spec.model_version).ok();
    let inputs = match &model {
        Some(m) if spec.pre.is_empty() => m.signature.inputs.clone(),
        _ => Vec::new(),
    };
    let outputs = match &model {
        Some(m) if spec.post.is_empty() => served_outputs(state, m),
        _ => Vec::new(),
    };
    Description {
        name: pipeline.record.name.clone(),
        versions: vec!["1".into()],
        platform: "infergate_pipeline",
        inputs,
        outputs,
        execution: None,
    }
}

pub fn describe_target(state: &AppState, target: &Target) -> Description {
    match target {
        Target::Model(record) => model_description(state, record),
        Target::Pipeline(pipeline) => pipeline_description(state, pipeline),
    }
}

async fn describe(
    state: &AppState,
    headers: &HeaderMap,
    name: &str,
    version: Option<&str>,
) -> ApiResult<Json<Value>> {
    state.authorize(headers, Scope::Infer)?;
    let version = version.map(parse_version).transpose()?;
    let target = target(state, name, version)?;
    Ok(Json(describe_target(state, &target).to_json()))
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

/// A registered version is ready unless its last load failed (503): it loads on first
/// request. A pipeline is ready when its plugins resolve and its model is ready.
pub fn readiness(state: &AppState, target: Target) -> ApiResult<()> {
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
        _ => Ok(()),
    }
}

pub async fn model_ready(
    State(state): S,
    Path(model): Path<String>,
    headers: HeaderMap,
) -> ApiResult<StatusCode> {
    state.authorize(&headers, Scope::Infer)?;
    readiness(&state, target(&state, &model, None)?).map(|()| StatusCode::OK)
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
    .map(|()| StatusCode::OK)
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

/// The outcome of an inference on a model or pipeline, before any protocol encodes it.
pub struct Inferred {
    pub model: String,
    pub version: u64,
    pub outputs: Vec<Tensor>,
    /// Set for a model (not a pipeline): the version that served, for metrics labels.
    pub served: Option<crate::metrics::Served>,
    /// A pipeline's stage times.
    pub times: Option<StageTimes>,
}

/// Runs decoded inputs through a model version (engine, with the request's priority and
/// timeout) or a pipeline: what every KServe v2 transport (HTTP, gRPC) shares.
pub async fn infer_target(
    state: &AppState,
    target: Target,
    request: &codec::InferRequest,
    inputs: Vec<Tensor>,
) -> ApiResult<Inferred> {
    let record = match target {
        Target::Model(record) => record,
        Target::Pipeline(pipeline) => {
            let (outputs, times) =
                super::pipelines::infer_tensors(state, &pipeline, request, inputs).await?;
            return Ok(Inferred {
                model: pipeline.record.name.clone(),
                version: 1,
                outputs,
                served: None,
                times: Some(times),
            });
        }
    };
    let outputs: Vec<String> = request.outputs.iter().map(|o| o.name.clone()).collect();
    let options = infer_options(request)?;
    let outputs = state
        .engine
        .infer_with(
            &model_key(&record),
            &state.model_path(&record),
            inputs,
            outputs,
            options,
        )
        .await?;
    Ok(Inferred {
        served: Some(crate::metrics::Served {
            model: record.name.clone(),
            version: record.version,
        }),
        model: record.name.clone(),
        version: record.version,
        outputs,
        times: None,
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
    // The body is freed once decoded: only the tensors stay while the model runs.
    let (request, inputs) = {
        let body = read_limited(&headers, body, state.config.limits.max_request_bytes).await?;
        let (json_part, binary_part) = codec::split_body(&body, header_length(&headers)?)?;
        let mut request = codec::parse_request(json_part)?;
        let inputs = codec::decode_inputs(&mut request, binary_part)?;
        (request, inputs)
    };
    let inferred = infer_target(&state, target, &request, inputs).await?;
    let (bytes, json_len) = codec::encode_response(
        &request,
        &inferred.model,
        inferred.version,
        &inferred.outputs,
    )?;
    let mut response = tensor_response(bytes, json_len);
    if let Some(times) = &inferred.times {
        super::pipelines::timing_header(&mut response, times);
    }
    if let Some(served) = inferred.served {
        response.extensions_mut().insert(served);
    }
    Ok(response)
}
