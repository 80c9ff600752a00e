//! Model management: upload versions (raw body or multipart), list, inspect, delete.

use super::authorized::{Authorized, Infer, Upload};
use super::body::{read_limited, stream_limited};
use axum::body::Body;
use axum::extract::{FromRequest, Multipart, Path, Request, State};
use axum::response::IntoResponse;
use axum::Json;
use http::{HeaderMap, StatusCode};
use infergate_api_types::history::VersionState;
use infergate_api_types::models::{
    ModelDeleted, ModelList, ModelVersion, ModelVersions, TensorSpec, VersionDeleted,
};
use infergate_kserve::http_error::HttpResult;
use infergate_service::catalog::model_key;
use infergate_service::error::{ApiError, ApiResult};
use infergate_service::history::state_name;
use infergate_service::model_repository::ParsedConfig;
use infergate_service::names::{parse_version, validate_name};
use infergate_service::state::AppState;
use infergate_store::files::BlobWriter;
use infergate_store::models::ModelRecord;
use std::sync::Arc;

type S = State<Arc<AppState>>;

/// A GGUF version in the model API's shape: no tensors; its description, load state and the
/// sequences it is serving.
fn llm_view(state: &AppState, r: &ModelRecord) -> ModelVersion {
    let key = model_key(r);
    let loaded = state.llm().is_loaded(&key);
    ModelVersion {
        format: Some(infergate_service::chat_models::GGUF.to_owned()),
        metadata: Some(r.signature.metadata.clone()),
        state: if loaded {
            VersionState::Loaded
        } else {
            VersionState::Unloaded
        },
        in_flight: state.llm().in_flight(&key),
        ..record_view(r)
    }
}

/// One version as the model routes answer it.
pub fn view(state: &AppState, r: &ModelRecord) -> ModelVersion {
    let key = model_key(r);
    if infergate_service::chat_models::is_gguf(r) {
        return llm_view(state, r);
    }
    let (st, reason) = state_name(&state.engine().state(&key));
    ModelVersion {
        inputs: tensor_specs(&r.signature.inputs),
        outputs: tensor_specs(&r.signature.outputs),
        metadata_keys: Some(r.signature.metadata.keys().cloned().collect()),
        state: st,
        reason,
        in_flight: state.engine().in_flight(&key) as u64,
        // Execution providers of the loaded version and why not the requested ones.
        execution: Some(serde_json::to_value(state.engine().execution(&key)).unwrap_or_default()),
        ..record_view(r)
    }
}

/// What the catalog record says of a version, whatever its format: no tensors, unloaded.
pub fn record_view(r: &ModelRecord) -> ModelVersion {
    ModelVersion {
        name: r.name.clone(),
        version: r.version,
        sha256: r.sha256.clone(),
        size_bytes: r.size_bytes,
        created_at: r.created_at,
        format: None,
        inputs: Vec::new(),
        outputs: Vec::new(),
        metadata_keys: None,
        metadata: None,
        config: r.config.clone(),
        state: VersionState::Unloaded,
        reason: None,
        in_flight: 0,
        execution: None,
    }
}

/// A signature's tensors as the API shows them.
pub(super) fn tensor_specs(specs: &[infergate_engine::TensorSpec]) -> Vec<TensorSpec> {
    specs
        .iter()
        .map(|t| TensorSpec {
            name: t.name.clone(),
            datatype: t.datatype.name().to_owned(),
            shape: t.shape.clone(),
        })
        .collect()
}

pub async fn list(_: Authorized<Infer>, State(state): S) -> HttpResult<Json<ModelList>> {
    let models = state
        .catalog()
        .all()
        .iter()
        .map(|r| view(&state, r))
        .collect();
    Ok(Json(ModelList { models }))
}

pub async fn get(
    _: Authorized<Infer>,
    State(state): S,
    Path(model): Path<String>,
) -> HttpResult<Json<ModelVersions>> {
    state.catalog().resolve(&model, None)?;
    let versions = state
        .catalog()
        .versions(&model)
        .iter()
        .map(|r| view(&state, r))
        .collect();
    Ok(Json(ModelVersions {
        name: model,
        versions,
    }))
}

pub async fn get_version(
    _: Authorized<Infer>,
    State(state): S,
    Path((model, version)): Path<(String, String)>,
) -> HttpResult<Json<ModelVersion>> {
    let record = state
        .catalog()
        .resolve(&model, Some(parse_version(&version)?))?;
    Ok(Json(view(&state, &record)))
}

/// `POST /api/models/{name}/versions`: the body is the `.onnx` file, or multipart/form-data
/// with a `file` part and an optional `config` part (JSON).
pub async fn upload(
    _: Authorized<Upload>,
    State(state): S,
    Path(model): Path<String>,
    request: Request,
) -> HttpResult<impl IntoResponse> {
    let headers = request.headers().clone();
    if let Err(e) = validate_name("model", &model).and_then(|_| match state.pipelines().get(&model) {
            Some(_) => Err(ApiError::conflict(format!(
                "'{model}' is already a pipeline name; pipelines and models share the /v2/models namespace"
            ))),
            None => Ok(()),
        })
    {
        return Err(e.before_body().into());
    }
    let limit = state.config().limits.max_upload_bytes;
    let mut writer =
        BlobWriter::new(state.store().dir()).map_err(|e| ApiError::internal(e.to_string()))?;
    let mut config = ParsedConfig::empty();
    let is_multipart = headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("multipart/form-data"));
    if is_multipart {
        super::body::check_declared_length(&headers, limit)?;
        let mut multipart = Multipart::from_request(request, &())
            .await
            .map_err(|e| ApiError::bad_request(format!("invalid multipart body: {e}")))?;
        let mut saw_file = false;
        while let Some(mut field) = multipart
            .next_field()
            .await
            .map_err(|e| ApiError::bad_request(format!("invalid multipart body: {e}")))?
        {
            match field.name() {
                Some("file") => {
                    saw_file = true;
                    while let Some(chunk) = field.chunk().await.map_err(|e| {
                        ApiError::bad_request(format!("reading multipart file: {e}"))
                    })? {
                        if writer.len() + chunk.len() as u64 > limit as u64 {
                            return Err(ApiError::too_large(format!(
                                "upload exceeds the {limit}-byte limit"
                            ))
                            .into());
                        }
                        writer
                            .write(&chunk)
                            .map_err(|e| ApiError::internal(e.to_string()))?;
                    }
                }
                Some("config") => {
                    let text = field
                        .text()
                        .await
                        .map_err(|e| ApiError::bad_request(format!("reading config part: {e}")))?;
                    config = ParsedConfig::parse(&text)?;
                }
                _ => {}
            }
        }
        if !saw_file {
            return Err(ApiError::bad_request("multipart upload needs a 'file' part").into());
        }
    } else {
        stream_limited(&headers, request.into_body(), limit, |chunk| {
            writer
                .write(chunk)
                .map_err(|e| ApiError::internal(e.to_string()))
        })
        .await?;
    }
    let models = state.models();
    let (record, config) = {
        let models = models.clone();
        tokio::task::spawn_blocking(move || {
            models
                .register(&model, writer, &config)
                .map(|record| (record, config))
        })
        .await
        .map_err(|e| ApiError::internal(format!("upload task failed: {e}")))??
    };
    tracing::info!(model = %record.name, version = record.version, sha256 = %record.sha256, "model version registered");
    models.serve(&record, &config).await?;
    state.catalog().insert(record.clone());
    Ok((StatusCode::CREATED, Json(view(&state, &record))))
}

/// `PUT /api/models/{name}/config` (newest version) and
/// `PUT /api/models/{name}/versions/{v}/config`: replaces a version's configuration; new
/// batches use it at once, requests in flight are not failed.
async fn put_config(
    state: &AppState,
    name: &str,
    version: Option<u64>,
    headers: &HeaderMap,
    body: Body,
) -> ApiResult<Json<ModelVersion>> {
    let record = match state.catalog().resolve(name, version) {
        Ok(record) => record,
        Err(e) => return Err(e.before_body()),
    };
    let bytes = read_limited(headers, body, 1 << 20).await?;
    let text = std::str::from_utf8(&bytes)
        .map_err(|_| ApiError::bad_request("config must be UTF-8 JSON"))?;
    let updated = state
        .models()
        .set_config(&record, ParsedConfig::parse(text)?)
        .await?;
    state.catalog().insert(updated.clone());
    state.version_reconfigured(&updated.name, updated.version);
    Ok(Json(view(state, &updated)))
}

pub async fn put_latest_config(
    _: Authorized<Upload>,
    State(state): S,
    Path(model): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> HttpResult<Json<ModelVersion>> {
    Ok(put_config(&state, &model, None, &headers, body).await?)
}

pub async fn put_version_config(
    _: Authorized<Upload>,
    State(state): S,
    Path((model, version)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> HttpResult<Json<ModelVersion>> {
    let version = parse_version(&version)?;
    Ok(put_config(&state, &model, Some(version), &headers, body).await?)
}

/// Refuses to delete what a pipeline runs: `version` when a pipeline pins it or when it is the
/// model's last version (an unpinned pipeline runs the newest one left); every version when
/// `version` is `None`. Plugins in use are refused the same way.
fn refuse_if_used_by_pipelines(
    state: &AppState,
    name: &str,
    version: Option<u64>,
) -> ApiResult<()> {
    let last_left = state.catalog().versions(name).len() <= 1;
    let mut users: Vec<String> = state
        .pipelines()
        .all()
        .iter()
        .filter(|p| {
            let runs_main = p.spec.model == name
                && match (version, p.spec.model_version) {
                    (None, _) => true,
                    (Some(v), Some(pinned)) => v == pinned,
                    (Some(_), None) => last_left,
                };
            // Detection stages run the newest version left.
            let runs_stage =
                (version.is_none() || last_left) && p.spec.stage_models().any(|m| m == name);
            runs_main || runs_stage
        })
        .map(|p| p.record.name.clone())
        .collect();
    if users.is_empty() {
        return Ok(());
    }
    users.sort();
    let what = match version {
        Some(v) => format!("model '{name}' version {v}"),
        None => format!("model '{name}'"),
    };
    Err(ApiError::conflict(format!(
        "{what} is used by pipeline(s) {}: change or delete them first",
        users.join(", ")
    )))
}

async fn delete_one(state: &AppState, name: &str, version: u64) -> ApiResult<VersionDeleted> {
    let record = state.catalog().resolve(name, Some(version))?;
    refuse_if_used_by_pipelines(state, name, Some(version))?;
    let key = model_key(&record);
    let busy = state.engine().in_flight(&key) as u64 + state.llm().in_flight(&key);
    if busy > 0 {
        return Err(ApiError::conflict(format!(
            "model '{name}' version {version} is in use by {busy} request(s); retry when idle"
        )));
    }
    let deleted = state.models().delete(&record).await?;
    state.catalog().remove(name, version);
    state.version_deleted(name, version);
    state.llm().unload(&key);
    if !deleted {
        return Err(ApiError::not_found(format!(
            "model '{name}' version {version} was deleted meanwhile"
        )));
    }
    Ok(VersionDeleted {
        name: name.to_owned(),
        version,
        deleted: true,
    })
}

pub async fn delete_version(
    _: Authorized<Upload>,
    State(state): S,
    Path((model, version)): Path<(String, String)>,
) -> HttpResult<Json<VersionDeleted>> {
    let version = parse_version(&version)?;
    Ok(Json(delete_one(&state, &model, version).await?))
}

pub async fn delete_all(
    _: Authorized<Upload>,
    State(state): S,
    Path(model): Path<String>,
) -> HttpResult<Json<ModelDeleted>> {
    state.catalog().resolve(&model, None)?;
    refuse_if_used_by_pipelines(&state, &model, None)?;
    let versions = state.catalog().versions(&model);
    for r in &versions {
        let busy =
            state.engine().in_flight(&model_key(r)) as u64 + state.llm().in_flight(&model_key(r));
        if busy > 0 {
            return Err(ApiError::conflict(format!(
                "model '{model}' version {} is in use by {busy} request(s); retry when idle",
                r.version
            ))
            .into());
        }
    }
    let mut deleted = Vec::new();
    for r in versions {
        delete_one(&state, &model, r.version).await?;
        deleted.push(r.version);
    }
    Ok(Json(ModelDeleted {
        name: model,
        deleted_versions: deleted,
    }))
}
