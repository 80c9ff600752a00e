//! `/api/plugins`: upload (validated by compiling it against the plugin world before anything
//! is stored), list, get and delete WebAssembly plugins.

use super::authorized::{Authorized, Infer, Upload};
use super::body::read_limited;
use crate::error::{ApiError, ApiResult};
use crate::names::validate_name;
use crate::pipeline::registry::LoadedPlugin;
use crate::state::AppState;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::response::IntoResponse;
use axum::Json;
use http::HeaderMap;
use serde_json::{json, Value};
use std::sync::Arc;

type S = State<Arc<AppState>>;

fn view(p: &LoadedPlugin) -> Value {
    let r = &p.record;
    json!({
        "name": r.name,
        "version": r.version,
        "kind": r.kind,
        "sha256": r.sha256,
        "size_bytes": r.size_bytes,
        "description": r.description,
        "limits": r.limits,
        "effective_limits": {
            "deadline_ms": p.plugin.limits().deadline.as_millis() as u64,
            "memory_mib": p.plugin.limits().memory_bytes >> 20,
            "max_output_mib": p.plugin.limits().output_bytes >> 20,
        },
        "created_at": r.created_at,
    })
}

/// `POST /api/plugins`: the body is the component (`.wasm`). Its name and version come from
/// its `describe` export.
pub async fn upload(
    _: Authorized<Upload>,
    State(state): S,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<impl IntoResponse> {
    let bytes = read_limited(&headers, body, state.config().plugins.max_upload_bytes).await?;
    let worker = state.clone();
    let (loaded, created) =
        tokio::task::spawn_blocking(move || worker.plugins().register(worker.store(), &bytes))
            .await
            .map_err(|e| ApiError::internal(format!("plugin registration task failed: {e}")))??;
    Ok((super::saved_status(created), Json(view(&loaded))))
}

pub async fn list(_: Authorized<Infer>, State(state): S) -> ApiResult<Json<Value>> {
    let plugins: Vec<Value> = state.plugins().all().iter().map(|p| view(p)).collect();
    Ok(Json(json!({ "plugins": plugins })))
}

pub async fn get(
    _: Authorized<Infer>,
    State(state): S,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    let versions: Vec<Value> = state
        .plugins()
        .versions(&name)
        .iter()
        .map(|p| view(p))
        .collect();
    if versions.is_empty() {
        return Err(ApiError::not_found(format!("plugin '{name}' not found")));
    }
    Ok(Json(json!({ "name": name, "versions": versions })))
}

async fn delete(
    state: &Arc<AppState>,
    name: &str,
    version: Option<&str>,
) -> ApiResult<Json<Value>> {
    validate_name("plugin", name)?;
    let worker = state.clone();
    let (owned_name, owned_version) = (name.to_string(), version.map(str::to_string));
    let deleted = tokio::task::spawn_blocking(move || {
        worker
            .plugins()
            .delete(worker.store(), &owned_name, owned_version.as_deref())
    })
    .await
    .map_err(|e| ApiError::internal(format!("plugin deletion task failed: {e}")))??;
    let versions = match deleted {
        Ok(versions) => versions,
        Err(pipelines) => {
            return Err(ApiError::conflict(format!(
                "plugin '{name}' is used by pipeline(s) {}: change or delete them first",
                pipelines.join(", ")
            )))
        }
    };
    if versions.is_empty() {
        return Err(ApiError::not_found(match version {
            Some(v) => format!("plugin {name}@{v} not found"),
            None => format!("plugin '{name}' not found"),
        }));
    }
    Ok(Json(
        json!({ "deleted": { "name": name, "versions": versions } }),
    ))
}

pub async fn delete_all(
    _: Authorized<Upload>,
    State(state): S,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    delete(&state, &name, None).await
}

pub async fn delete_version(
    _: Authorized<Upload>,
    State(state): S,
    Path((name, version)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    delete(&state, &name, Some(&version)).await
}

/// `PUT /api/plugins/{name}/versions/{version}/limits`: `{"deadline_ms", "memory_mib",
/// "max_output_mib"}` (each optional; absent = the server's default), capped by the host.
pub async fn put_limits(
    _: Authorized<Upload>,
    State(state): S,
    Path((name, version)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Json<Value>> {
    let bytes = read_limited(&headers, body, 64 << 10).await?;
    let value: Value = serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::bad_request(format!("invalid plugin limits JSON: {e}")))?;
    let updated = state
        .plugins()
        .set_limits(state.store(), &name, &version, &value)?;
    Ok(Json(view(&updated)))
}
