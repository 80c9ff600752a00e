//! KServe v2 / Open Inference Protocol over HTTP: health, metadata and inference. Each handler
//! decodes, calls the inference service (`crate::infer`) and encodes.

use super::authorized::{Authorized, Infer};
use super::body::read_limited;
use super::codec;
use super::models::tensor_specs;
use crate::error::ApiResult;
use crate::infer::backend::{self, Forwarded};
use crate::infer::{self, Description, Target};
use crate::metrics::Served;
use crate::names::parse_version;
use crate::state::AppState;
use axum::extract::{Path, Request, State};
use axum::response::Response;
use axum::Json;
use http::StatusCode;
use infergate_api_types::kserve::{ModelMetadata, ServerDevice, ServerMetadata};
use std::sync::Arc;

type S = State<Arc<AppState>>;

pub const SERVER_NAME: &str = "infergate";

pub async fn server_metadata(
    _: Authorized<Infer>,
    State(state): S,
) -> ApiResult<Json<ServerMetadata>> {
    // Where native ops run, and why not on a GPU when they don't.
    let device = match state.ops().gpu() {
        Some(gpu) => ServerDevice::Cuda {
            name: gpu.name().to_owned(),
            arch: gpu.arch().to_owned(),
        },
        None => ServerDevice::Cpu {
            requested: state.config().engine.device.to_string(),
        },
    };
    Ok(Json(ServerMetadata {
        name: SERVER_NAME.to_owned(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        extensions: EXTENSIONS.iter().map(|e| (*e).to_owned()).collect(),
        device,
    }))
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

fn metadata(d: Description) -> ModelMetadata {
    ModelMetadata {
        name: d.name,
        versions: d.versions,
        platform: d.platform.to_owned(),
        inputs: tensor_specs(&d.inputs),
        outputs: tensor_specs(&d.outputs),
        execution: d.execution,
    }
}

async fn describe(
    state: &AppState,
    name: &str,
    version: Option<&str>,
) -> ApiResult<Json<ModelMetadata>> {
    let version = version.map(parse_version).transpose()?;
    let target = infer::resolve(state, name, version)?;
    Ok(Json(metadata(infer::describe(state, &target))))
}

pub async fn model_metadata(
    _: Authorized<Infer>,
    State(state): S,
    Path(model): Path<String>,
) -> ApiResult<Json<ModelMetadata>> {
    describe(&state, &model, None).await
}

pub async fn model_version_metadata(
    _: Authorized<Infer>,
    State(state): S,
    Path((model, version)): Path<(String, String)>,
) -> ApiResult<Json<ModelMetadata>> {
    describe(&state, &model, Some(&version)).await
}

/// 200 when the target can serve, 503 when not (see [`infer::readiness`]).
async fn readiness(state: &AppState, name: &str, version: Option<&str>) -> ApiResult<StatusCode> {
    let version = version.map(parse_version).transpose()?;
    let target = infer::resolve(state, name, version)?;
    infer::readiness(state, &target).map(|()| StatusCode::OK)
}

pub async fn model_ready(
    _: Authorized<Infer>,
    State(state): S,
    Path(model): Path<String>,
) -> ApiResult<StatusCode> {
    readiness(&state, &model, None).await
}

pub async fn model_version_ready(
    _: Authorized<Infer>,
    State(state): S,
    Path((model, version)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    readiness(&state, &model, Some(&version)).await
}

pub async fn infer(
    _: Authorized<Infer>,
    State(state): S,
    Path(model): Path<String>,
    request: Request,
) -> ApiResult<Response> {
    run_infer(state, &model, None, request).await
}

pub async fn infer_version(
    _: Authorized<Infer>,
    State(state): S,
    Path((model, version)): Path<(String, String)>,
    request: Request,
) -> ApiResult<Response> {
    let version = parse_version(&version)?;
    run_infer(state, &model, Some(version), request).await
}

async fn run_infer(
    state: Arc<AppState>,
    model: &str,
    version: Option<u64>,
    request: Request,
) -> ApiResult<Response> {
    // The request's own headers, not a copy by the `HeaderMap` extractor.
    let (parts, body) = request.into_parts();
    let headers = parts.headers;
    let target = match infer::resolve(&state, model, version) {
        Ok(target) => target,
        Err(e) => return Err(e.before_body()),
    };
    let body = read_limited(&headers, body, state.config().limits.max_request_bytes).await?;
    // A manager that only routes relays a model's request and its answer undecoded.
    if let (Target::Model(record), false) = (&target, state.workers().config.local_engine) {
        let header_len = codec::header_length(&headers)?;
        if let Forwarded::Worker(answer) =
            backend::forward(&state, record, body.clone(), header_len).await?
        {
            let served = Served {
                model: record.name.clone(),
                version: record.version,
            };
            return Ok(codec::relay(answer, served));
        }
    }
    // The body is freed once decoded: only the tensors stay while the model runs.
    let (request, inputs) = codec::decode(&headers, &body)?;
    drop(body);
    let inferred = infer::run(&state, target, infer::Request::kserve(&request, inputs)?).await?;
    codec::respond(&request, inferred)
}
