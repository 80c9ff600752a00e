//! Triton's shared-memory extension over HTTP: `/v2/systemsharedmemory[/region/{name}]/status`
//! (GET), `/v2/systemsharedmemory/region/{name}/register` and
//! `/v2/systemsharedmemory[/region/{name}]/unregister` (POST), for loopback callers, each
//! caller seeing its own regions (`infergate_service::shared_memory`). The CUDA routes answer
//! as Triton does on a host without GPUs: no regions, unregister does nothing, register is
//! refused.

use super::authorized::{Authorized, Infer};
use super::body::{read_limited, MAX_JSON_API_BYTES};
use crate::client_addr::Client;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::Json;
use http::{HeaderMap, StatusCode};
use infergate_api_types::kserve::{SharedMemoryRegion as RegionView, SharedMemoryRegister};
use infergate_kserve::http_error::HttpResult;
use infergate_service::error::{ApiError, ApiResult};
use infergate_service::shared_memory;
use infergate_service::state::AppState;
use std::sync::Arc;

type S = State<Arc<AppState>>;

fn status(
    state: &AppState,
    auth: &Authorized<Infer>,
    client: &Client,
    name: Option<&str>,
) -> ApiResult<Json<Vec<RegionView>>> {
    let regions = shared_memory::regions(state, &auth.caller, client.0)?;
    Ok(Json(
        regions
            .status(name)?
            .into_iter()
            .map(|r| RegionView {
                name: r.name,
                key: r.key,
                offset: r.offset,
                byte_size: r.byte_size,
            })
            .collect(),
    ))
}

pub async fn status_all(
    auth: Authorized<Infer>,
    client: Client,
    State(state): S,
) -> HttpResult<Json<Vec<RegionView>>> {
    Ok(status(&state, &auth, &client, None)?)
}

pub async fn status_one(
    auth: Authorized<Infer>,
    client: Client,
    State(state): S,
    Path(name): Path<String>,
) -> HttpResult<Json<Vec<RegionView>>> {
    Ok(status(&state, &auth, &client, Some(&name))?)
}

pub async fn register(
    auth: Authorized<Infer>,
    client: Client,
    State(state): S,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> HttpResult<StatusCode> {
    let regions =
        shared_memory::regions(&state, &auth.caller, client.0).map_err(ApiError::before_body)?;
    let body = read_limited(&headers, body, MAX_JSON_API_BYTES).await?;
    let request: SharedMemoryRegister = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(format!(
            "a register request is {{\"key\": ..., \"offset\": ..., \"byte_size\": ...}}: {e}"
        ))
    })?;
    regions.register(&name, &request.key, request.offset, request.byte_size)?;
    Ok(StatusCode::OK)
}

pub async fn unregister_all(
    auth: Authorized<Infer>,
    client: Client,
    State(state): S,
) -> HttpResult<StatusCode> {
    shared_memory::regions(&state, &auth.caller, client.0)?.unregister(None);
    Ok(StatusCode::OK)
}

pub async fn unregister_one(
    auth: Authorized<Infer>,
    client: Client,
    State(state): S,
    Path(name): Path<String>,
) -> HttpResult<StatusCode> {
    shared_memory::regions(&state, &auth.caller, client.0)?.unregister(Some(&name));
    Ok(StatusCode::OK)
}

/// No CUDA shared memory here: no regions.
pub async fn cuda_status_all(_: Authorized<Infer>) -> HttpResult<Json<Vec<RegionView>>> {
    Ok(Json(Vec::new()))
}

pub async fn cuda_status_one(
    _: Authorized<Infer>,
    Path(name): Path<String>,
) -> HttpResult<Json<Vec<RegionView>>> {
    Err(ApiError::not_found(format!(
        "Unable to find cuda shared memory region: '{name}'"
    ))
    .into())
}

/// Nothing to unregister: no region can have been registered.
pub async fn cuda_unregister(_: Authorized<Infer>) -> HttpResult<StatusCode> {
    Ok(StatusCode::OK)
}

pub async fn cuda_register(
    _: Authorized<Infer>,
    Path(name): Path<String>,
) -> HttpResult<StatusCode> {
    Err(shared_memory::cuda_register_refused(&name)
        .before_body()
        .into())
}
