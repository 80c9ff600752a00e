//! `/api/pipelines`: declare, list, get and delete pipelines, and run one on a raw body (an
//! image, text). Pipelines are also served through the KServe v2 routes under their name
//! (`infergate_service::infer`).

use super::authorized::{Authorized, Infer, Upload};
use super::body::read_limited;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use http::{HeaderMap, HeaderValue};
use infergate_api_types::pipelines::{
    PipelineDeleted, PipelineList, PipelineRun, PipelineView, RunOutput,
};
use infergate_engine::InferOptions;
use infergate_kserve::codec;
use infergate_kserve::http_error::HttpResult;
use infergate_service::error::{ApiError, ApiResult};
use infergate_service::infer::stages::{self, PipelineInput, PipelineOutput};
use infergate_service::names::validate_name;
use infergate_service::pipelines::spec::{PipelineSpec, PipelineSpecExt};
use infergate_service::pipelines::Pipeline;
use infergate_service::state::AppState;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

type S = State<Arc<AppState>>;

fn view(p: &Pipeline) -> PipelineView {
    PipelineView {
        name: p.record.name.clone(),
        spec: p.spec.clone(),
        created_at: p.record.created_at,
        updated_at: p.record.updated_at,
    }
}

/// `PUT /api/pipelines/{name}`: creates or replaces a pipeline. Every plugin must exist in the
/// right position and the model must exist; requests already running finish on the old spec.
pub async fn put(
    _: Authorized<Upload>,
    State(state): S,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> HttpResult<impl IntoResponse> {
    if let Err(e) = validate_name("pipeline", &name) {
        return Err(e.before_body().into());
    }
    let bytes = read_limited(&headers, body, 1 << 20).await?;
    let value: Value = serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::bad_request(format!("invalid pipeline JSON: {e}")))?;
    let spec = PipelineSpec::from_json(&value)?;
    if !state.catalog().versions(&name).is_empty() {
        return Err(ApiError::conflict(format!(
            "'{name}' is already a model name; pipelines and models share the /v2/models namespace"
        ))
        .into());
    }
    stages::check(&state, &spec)?;
    let refs: Vec<(String, Option<String>)> = spec
        .pre_refs()?
        .into_iter()
        .chain(spec.post_refs()?)
        .map(|r| (r.name, r.version))
        .collect();
    let normalized = serde_json::to_value(&spec).map_err(|e| ApiError::internal(e.to_string()))?;
    let (record, created) = state.store().put_pipeline(&name, &normalized, &refs)?;
    let pipeline = state.pipelines().insert(record, spec);
    tracing::info!(pipeline = %name, created, "pipeline saved");
    Ok((super::body::saved_status(created), Json(view(&pipeline))))
}

pub async fn list(_: Authorized<Infer>, State(state): S) -> HttpResult<Json<PipelineList>> {
    let pipelines = state.pipelines().all().iter().map(|p| view(p)).collect();
    Ok(Json(PipelineList { pipelines }))
}

fn find(state: &AppState, name: &str) -> ApiResult<Arc<Pipeline>> {
    state
        .pipelines()
        .get(name)
        .ok_or_else(|| ApiError::not_found(format!("pipeline '{name}' not found")))
}

pub async fn get(
    _: Authorized<Infer>,
    State(state): S,
    Path(name): Path<String>,
) -> HttpResult<Json<PipelineView>> {
    let pipeline = find(&state, &name)?;
    Ok(Json(view(&pipeline)))
}

pub async fn delete(
    _: Authorized<Upload>,
    State(state): S,
    Path(name): Path<String>,
) -> HttpResult<Json<PipelineDeleted>> {
    find(&state, &name)?;
    state.store().delete_pipeline(&name)?;
    state.pipelines().remove(&name);
    state.model_settings().remove(&name);
    Ok(Json(PipelineDeleted { deleted: name }))
}

/// `POST /api/pipelines/{name}/run`: the body goes to the first pre-plugin as raw bytes with
/// its Content-Type; query parameters reach every plugin as metadata. The answer is the last
/// post-plugin's JSON or bytes, or the output tensors as KServe JSON.
pub async fn run_raw(
    _: Authorized<Infer>,
    State(state): S,
    Path(name): Path<String>,
    Query(query): Query<BTreeMap<String, String>>,
    headers: HeaderMap,
    body: Body,
) -> HttpResult<Response> {
    let pipeline = match find(&state, &name) {
        Ok(p) => p,
        Err(e) => return Err(e.before_body().into()),
    };
    let data = read_limited(&headers, body, state.config().limits.max_request_bytes).await?;
    let content_type = headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let stages::Ran { output, times, .. } = stages::run(
        &state,
        &name,
        &pipeline.spec,
        PipelineInput::Bytes {
            data: data.into(),
            content_type,
        },
        query.into_iter().collect(),
        InferOptions::default(),
    )
    .await?;
    let mut response = match output {
        PipelineOutput::Json(text) => {
            let mut r = Response::new(Body::from(text));
            r.headers_mut().insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            r
        }
        PipelineOutput::Bytes(bytes) => {
            let mut r = Response::new(Body::from(bytes));
            r.headers_mut().insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/octet-stream"),
            );
            r
        }
        PipelineOutput::Tensors(tensors) => {
            let outputs = tensors
                .iter()
                .map(|t| RunOutput {
                    name: t.name.clone(),
                    datatype: t.datatype.name().to_string(),
                    shape: t.shape.clone(),
                    data: codec::to_json(t),
                })
                .collect();
            Json(PipelineRun {
                pipeline: name,
                outputs,
            })
            .into_response()
        }
    };
    codec::timing_header(&mut response, &times);
    Ok(response)
}
