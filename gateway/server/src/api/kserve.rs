//! KServe v2 / Open Inference Protocol over HTTP: health, metadata and inference. Each handler
//! decodes, calls the inference service (`infergate_service::infer`) and encodes.

use super::authorized::{Authorized, Infer};
use super::models::tensor_specs;
use axum::extract::{Path, Request, State};
use axum::response::Response;
use axum::Json;
use http::StatusCode;
use infergate_api_types::kserve::{ModelMetadata, ServerDevice, ServerMetadata};
use infergate_kserve::codec;
use infergate_kserve::http_error::HttpResult;
use infergate_service::caller::Caller;
use infergate_service::error::{ApiError, ApiResult, Kind};
use infergate_service::infer::backend::{self, Forwarded};
use infergate_service::infer::{self, Description, Target};
use infergate_service::metrics::Served;
use infergate_service::names::parse_version;
use infergate_service::shared_memory::{self, RequestRegions};
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

/// What only a decoded request can be routed by: its tensors in shared memory (read and
/// written here, on the client's host), or its place in a sequence (whose worker follows from
/// its correlation id).
const DECODE_FIRST: [&str; 2] = [
    infergate_protocol::kserve::SHARED_MEMORY_REGION,
    infergate_service::infer::request::SEQUENCE_ID,
];

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
        Ok(target) if target.is_decoupled() => {
            return Err(ApiError::new(
                Kind::Unsupported,
                "HTTP end point doesn't support models with decoupled transaction policy: send the request on a KServe gRPC stream (ModelStreamInfer), or use /v1/chat/completions for a chat model",
            )
            .before_body())
        }
        Ok(target) => target,
        Err(e) => return Err(e.before_body()),
    };
    let limit = state.config().limits.max_request_bytes;
    let body = infergate_telemetry::traced!(
        super::compressed::read_body(&headers, body, limit),
        infergate_telemetry::span!("read body")
    )?;
    // A manager that only routes relays a model's request and its answer undecoded.
    if let (Target::Model(record), false) = (&target, state.workers().config.local_engine) {
        let mut relayable = true;
        for word in DECODE_FIRST {
            relayable &= !codec::mentions(&headers, &body, word)?;
        }
        if relayable {
            let header_len = codec::header_length(&headers)?;
            // The model's traffic split applies to relayed requests too (not its mirror nor
            // the response cache, which need the decoded request).
            let record = match version {
                None => {
                    infergate_service::traffic::split(
                        &state,
                        Some(caller),
                        record.clone(),
                        &headers,
                    )
                    .0
                }
                Some(_) => record.clone(),
            };
            let forwarded = infergate_telemetry::traced!(
                backend::forward(&state, &record, body.clone(), header_len),
                infergate_telemetry::span!(
                    "forward",
                    model = %record.name,
                    version = record.version as i64,
                    request_bytes = body.len() as i64
                )
            )?;
            if let Forwarded::Worker(answer) = forwarded {
                let served = Served {
                    model: record.name.clone(),
                    version: record.version,
                };
                let response = codec::relay(answer, served);
                return Ok(super::compressed::respond(&headers, response).await);
            }
        }
    }
    // Shared memory is looked up only when the request uses it.
    let client = crate::client_addr::of(&state, &parts.extensions, &headers);
    let mut regions = RequestRegions::new(&state, caller, client);
    // The body is freed once decoded: only the tensors stay while the model runs.
    let (request, inputs) = infergate_telemetry::span!("decode", request_bytes = body.len() as i64)
        .in_scope(|| {
            codec::decode_with(&headers, &body, &mut |parameters, datatype, count| {
                regions.read_input(parameters, datatype, count)
            })
        })?;
    drop(body);
    let shared_outputs = shared_memory::output_refs(
        request
            .outputs
            .iter()
            .map(|o| (o.name.as_str(), &o.parameters)),
    )?;
    // The headers go with it: a traffic split may be sticky by one of them.
    let request_in = infer::Request::kserve(&request, inputs)?.with_headers(headers.clone());
    let mut inferred = infergate_telemetry::traced!(
        infer::run(&state, caller, target, version, request_in),
        infergate_telemetry::span!("inference", model = %model)
    )?;
    regions.write_outputs(&shared_outputs, &inferred.outputs)?;
    let passage = std::mem::take(&mut inferred.passage);
    let response =
        infergate_telemetry::span!("encode").in_scope(|| codec::respond(&request, inferred))?;
    let response = super::compressed::respond(&headers, response).await;
    Ok(crate::hold_body::until_sent(response, passage))
}
