//! Triton's HTTP extensions that its clients and perf_analyzer call: model configuration,
//! statistics and the model repository (index, load, unload), in Triton's JSON shapes.

use super::authorized::{Authorized, Infer, Upload};
use super::body::read_limited;
use axum::extract::{Path, State};
use axum::Json;
use http::{HeaderMap, StatusCode};
use infergate_api_types::kserve::RepositoryEntry;
use infergate_api_types::stats::{BatchStats, InferenceStats, ModelStats, StatDuration, StatsList};
use infergate_kserve::http_error::HttpResult;
use infergate_service::catalog::model_key;
use infergate_service::error::ApiError;
use infergate_service::infer::describe;
use infergate_service::model_control::{self, LoadParameters};
use infergate_service::names::parse_version;
use infergate_service::state::AppState;
use infergate_store::models::ModelRecord;
use serde_json::Value;
use std::sync::Arc;

type S = State<Arc<AppState>>;

pub async fn model_config(
    _: Authorized<Infer>,
    State(state): S,
    Path(model): Path<String>,
) -> HttpResult<Json<Value>> {
    let record = state.catalog().resolve(&model, None)?;
    Ok(Json(describe::triton_config(&state, &record)))
}

pub async fn model_version_config(
    _: Authorized<Infer>,
    State(state): S,
    Path((model, version)): Path<(String, String)>,
) -> HttpResult<Json<Value>> {
    let record = state
        .catalog()
        .resolve(&model, Some(parse_version(&version)?))?;
    Ok(Json(describe::triton_config(&state, &record)))
}

fn duration(d: infergate_engine::stats::StatDuration) -> StatDuration {
    StatDuration {
        count: d.count,
        ns: d.ns,
    }
}

fn stats_entry(state: &AppState, record: &ModelRecord) -> ModelStats {
    let s = state.engine().stats(&model_key(record)).unwrap_or_default();
    let cache = state.cache().stats(&record.name, record.version);
    let batch_stats = s
        .batch_stats
        .iter()
        .map(|b| BatchStats {
            batch_size: b.batch_size,
            compute_input: duration(b.compute_input),
            compute_infer: duration(b.compute_infer),
            compute_output: duration(b.compute_output),
        })
        .collect();
    ModelStats {
        name: record.name.clone(),
        version: record.version.to_string(),
        last_inference: s.last_inference,
        inference_count: s.inference_count,
        execution_count: s.execution_count,
        inference_stats: InferenceStats {
            success: duration(s.success),
            fail: duration(s.fail),
            queue: duration(s.queue),
            compute_input: duration(s.compute_input),
            compute_infer: duration(s.compute_infer),
            compute_output: duration(s.compute_output),
            // Triton's meaning: a miss's time is the lookup plus storing the answer.
            cache_hit: StatDuration {
                count: cache.hits,
                ns: cache.hit_ns,
            },
            cache_miss: StatDuration {
                count: cache.misses,
                ns: cache.miss_ns + cache.insert_ns,
            },
        },
        response_stats: Default::default(),
        batch_stats,
        memory_usage: Vec::new(),
    }
}

/// The versions a statistics request covers: every model's, one model's (404 if unknown), or
/// one version. Shared by the HTTP and gRPC statistics endpoints.
fn stats_json(state: &AppState, records: &[Arc<ModelRecord>]) -> Json<StatsList> {
    let model_stats = records.iter().map(|r| stats_entry(state, r)).collect();
    Json(StatsList { model_stats })
}

pub async fn all_stats(_: Authorized<Infer>, State(state): S) -> HttpResult<Json<StatsList>> {
    Ok(stats_json(
        &state,
        &describe::stats_records(&state, None, None)?,
    ))
}

pub async fn model_stats(
    _: Authorized<Infer>,
    State(state): S,
    Path(model): Path<String>,
) -> HttpResult<Json<StatsList>> {
    Ok(stats_json(
        &state,
        &describe::stats_records(&state, Some(&model), None)?,
    ))
}

pub async fn model_version_stats(
    _: Authorized<Infer>,
    State(state): S,
    Path((model, version)): Path<(String, String)>,
) -> HttpResult<Json<StatsList>> {
    let version = parse_version(&version)?;
    Ok(stats_json(
        &state,
        &describe::stats_records(&state, Some(&model), Some(version))?,
    ))
}

pub async fn repository_index(
    _: Authorized<Infer>,
    State(state): S,
    headers: HeaderMap,
    body: axum::body::Body,
) -> HttpResult<Json<Vec<RepositoryEntry>>> {
    let limit = super::body::MAX_JSON_API_BYTES;
    let body = read_limited(&headers, body, limit).await?;
    let only_ready = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v.get("ready").and_then(Value::as_bool))
        .unwrap_or(false);
    Ok(Json(model_control::index(&state, only_ready)))
}

/// Loads the newest version now rather than on first request; the body may carry Triton's
/// `{"parameters": {"config": "<model configuration JSON>"}}` override.
pub async fn load(
    _: Authorized<Upload>,
    State(state): S,
    Path(model): Path<String>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> HttpResult<StatusCode> {
    let body = read_limited(&headers, body, super::body::MAX_JSON_API_BYTES).await?;
    let mut parameters = LoadParameters::default();
    if !body.is_empty() {
        let document: Value = serde_json::from_slice(&body)
            .map_err(|e| ApiError::bad_request(format!("load request body is not JSON: {e}")))?;
        if let Some(given) = document.get("parameters").and_then(Value::as_object) {
            for (name, value) in given {
                if name == "config" {
                    let text = value.as_str().ok_or_else(|| {
                        ApiError::bad_request("parameter 'config' must be a string of JSON")
                    })?;
                    parameters.config = Some(text.to_string());
                } else if name.starts_with("file:") {
                    parameters.files.push(name.clone());
                }
            }
        }
    }
    model_control::load(&state, &model, parameters).await?;
    Ok(StatusCode::OK)
}

/// Unloads every loaded version; requests already queued finish.
pub async fn unload(
    _: Authorized<Upload>,
    State(state): S,
    Path(model): Path<String>,
) -> HttpResult<StatusCode> {
    model_control::unload(&state, &model)?;
    Ok(StatusCode::OK)
}
