//! KServe v2 / Open Inference Protocol over HTTP: health, metadata and inference. Each handler
//! decodes, calls the inference service (`infergate_service::infer`) and encodes.

use super::authorized::{Authorized, Infer};
use super::body::read_limited;
use super::models::tensor_specs;
use axum::extract::{Path, Request, State};
use axum::response::Response;
use axum::Json;
use http::StatusCode;
use infergate_api_types::kserve::{ModelMetadata, ServerDevice, ServerMetadata};
use infergate_kserve::codec;
use infergate_kserve::http_error::HttpResult;
use infergate_service::caller::Caller;
use infergate_service::error::ApiResult;
use infergate_service::infer::backend::{self, Forwarded};
use infergate_service::infer::{self, Description, Target};
use infergate_service::metrics::Served;
use infergate_service::names::parse_version;
use infergate_service::state::AppState;
use std::sync::Arc;

type S = State<Arc<AppState>>;

pub async fn server_metadata(
    _: Authorized<Infer>,
    State(state): S,
) -> HttpResult<Json<ServerMetadata>> {
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
        name: infergate_kserve::SERVER_NAME.to_owned(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        extensions: infergate_kserve::EXTENSIONS
            .iter()
            .map(|e| (*e).to_owned())
            .collect(),
        device,
    }))
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
) -> HttpResult<Json<ModelMetadata>> {
    Ok(describe(&state, &model, None).await?)
}

pub async fn model_version_metadata(
    _: Authorized<Infer>,
    State(state): S,
    Path((model, version)): Path<(String, String)>,
) -> HttpResult<Json<ModelMetadata>> {
    Ok(describe(&state, &model, Some(&version)).await?)
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
) -> HttpResult<StatusCode> {
    Ok(readiness(&state, &model, None).await?)
}

pub async fn model_version_ready(
    _: Authorized<Infer>,
    State(state): S,
    Path((model, version)): Path<(String, String)>,
) -> HttpResult<StatusCode> {
    Ok(readiness(&state, &model, Some(&version)).await?)
}

pub async fn infer(
    auth: Authorized<Infer>,
    State(state): S,
    Path(model): Path<String>,
    request: Request,
) -> HttpResult<Response> {
    Ok(run_infer(state, &auth.caller, &model, None, request).await?)
}

pub async fn infer_version(
    auth: Authorized<Infer>,
    State(state): S,
    Path((model, version)): Path<(String, String)>,
    request: Request,
) -> HttpResult<Response> {
    let version = parse_version(&version)?;
    Ok(run_infer(state, &auth.caller, &model, Some(version), request).await?)
}

async fn run_infer(
    state: Arc<AppState>,
    caller: &Caller,
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
        // The model's traffic split applies to relayed requests too (not its mirror nor the
        // response cache, which need the decoded request).
        let record = match version {
            None => {
                infergate_service::traffic::split(&state, Some(caller), record.clone(), &headers).0
            }
            Some(_) => record.clone(),
        };
        if let Forwarded::Worker(answer) =
            backend::forward(&state, &record, body.clone(), header_len).await?
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
    // The headers go with it: a traffic split may be sticky by one of them.
    let request_in = infer::Request::kserve(&request, inputs)?.with_headers(headers);
    let mut inferred = infer::run(&state, caller, target, version, request_in).await?;
    let passage = std::mem::take(&mut inferred.passage);
    let response = codec::respond(&request, inferred)?;
    Ok(crate::hold_body::until_sent(response, passage))
}
