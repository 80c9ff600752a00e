//! `/api/plugins`: upload (validated by compiling it against the plugin world before anything
//! is stored), list, get and delete WebAssembly plugins.

use super::authorized::{Authorized, Infer, Upload};
use super::body::read_limited;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::response::IntoResponse;
use axum::Json;
use http::HeaderMap;
use infergate_api_types::plugins::{
    DeletedVersions, EffectiveLimits, PluginDeleted, PluginList, PluginVersions, PluginView,
};
use infergate_kserve::http_error::HttpResult;
use infergate_service::error::{ApiError, ApiResult};
use infergate_service::names::validate_name;
use infergate_service::pipelines::registry::LoadedPlugin;
use infergate_service::state::AppState;
use serde_json::Value;
use std::sync::Arc;

type S = State<Arc<AppState>>;

/// A stored version as the routes answer it. Its description is the compiled plugin's, the
/// same the upload stored (the same bytes describe themselves the same way).
fn view(p: &LoadedPlugin) -> PluginView {
    let r = &p.record;
    let description = p.description();
    let effective = p.effective_limits();
    PluginView {
        name: r.name.clone(),
        version: r.version.clone(),
        kind: description.kind,
        sha256: r.sha256.clone(),
        size_bytes: r.size_bytes,
        description,
        limits: p.limits.clone(),
        effective_limits: EffectiveLimits {
            deadline_ms: effective.deadline.as_millis() as u64,
            memory_mib: (effective.memory_bytes >> 20) as u64,
            max_output_mib: (effective.output_bytes >> 20) as u64,
        },
        created_at: r.created_at,
    }
}

/// `POST /api/plugins`: the body is the component (`.wasm`). Its name and version come from
/// its `describe` export.
pub async fn upload(
    _: Authorized<Upload>,
    State(state): S,
    headers: HeaderMap,
    body: Body,
) -> HttpResult<impl IntoResponse> {
    let bytes = read_limited(&headers, body, state.config().plugins.max_upload_bytes).await?;
    let worker = state.clone();
    let (loaded, created) =
        tokio::task::spawn_blocking(move || worker.plugins().register(worker.store(), &bytes))
            .await
            .map_err(|e| ApiError::internal(format!("plugin registration task failed: {e}")))??;
    Ok((super::body::saved_status(created), Json(view(&loaded))))
}

pub async fn list(_: Authorized<Infer>, State(state): S) -> HttpResult<Json<PluginList>> {
    let plugins = state.plugins().all().iter().map(|p| view(p)).collect();
    Ok(Json(PluginList { plugins }))
}

pub async fn get(
    _: Authorized<Infer>,
    State(state): S,
    Path(name): Path<String>,
) -> HttpResult<Json<PluginVersions>> {
    let versions: Vec<PluginView> = state
        .plugins()
        .versions(&name)
        .iter()
        .map(|p| view(p))
        .collect();
    if versions.is_empty() {
        return Err(ApiError::not_found(format!("plugin '{name}' not found")).into());
    }
    Ok(Json(PluginVersions { name, versions }))
}

async fn delete(
    state: &Arc<AppState>,
    name: &str,
    version: Option<&str>,
) -> ApiResult<Json<PluginDeleted>> {
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
    Ok(Json(PluginDeleted {
        deleted: DeletedVersions {
            name: name.to_string(),
            versions,
        },
    }))
}

pub async fn delete_all(
    _: Authorized<Upload>,
    State(state): S,
    Path(name): Path<String>,
) -> HttpResult<Json<PluginDeleted>> {
    Ok(delete(&state, &name, None).await?)
}

pub async fn delete_version(
    _: Authorized<Upload>,
    State(state): S,
    Path((name, version)): Path<(String, String)>,
) -> HttpResult<Json<PluginDeleted>> {
    Ok(delete(&state, &name, Some(&version)).await?)
}

/// `PUT /api/plugins/{name}/versions/{version}/limits`: `{"deadline_ms", "memory_mib",
/// "max_output_mib"}` (each optional; absent = the server's default), capped by the host.
pub async fn put_limits(
    _: Authorized<Upload>,
    State(state): S,
    Path((name, version)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> HttpResult<Json<PluginView>> {
    let bytes = read_limited(&headers, body, 64 << 10).await?;
    let value: Value = serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::bad_request(format!("invalid plugin limits JSON: {e}")))?;
    let updated = state
        .plugins()
        .set_limits(state.store(), &name, &version, &value)?;
    Ok(Json(view(&updated)))
}
