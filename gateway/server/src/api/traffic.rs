//! `/api/models/{model}/traffic`: a model's traffic policy (weighted, sticky and mirrored
//! traffic between its versions). `PUT` (scope `upload`) sets it, `GET` (scope `infer`) reads
//! it, `DELETE` (scope `upload`) returns the model to its version policy. The policy belongs
//! to the model, not a version: it survives new uploads and goes with the model. It applies to
//! the next request, on every replica (PostgreSQL's notifications carry it). Every answer also
//! carries what each version served this replica since it started, the mirrored copies apart,
//! so the dashboard shows a split's effect beside the policy.

use super::authorized::{Authorized, Infer, Upload};
use super::body::read_limited;
use axum::extract::{Path, State};
use axum::Json;
use http::HeaderMap;
use infergate_api_types::traffic::{TrafficFigures, VersionFigures};
use infergate_engine::ModelState;
use infergate_kserve::http_error::HttpResult;
use infergate_service::catalog::model_key;
use infergate_service::error::{ApiError, ApiResult};
use infergate_service::model_settings::TRAFFIC;
use infergate_service::state::AppState;
use infergate_traffic::policy::{KnownVersion, TrafficPolicy};
use serde::Serialize;
use serde_json::{Map, Value};
use std::sync::Arc;

type S = State<Arc<AppState>>;

/// The answer of every traffic route.
#[derive(Serialize)]
pub struct TrafficView {
    pub model: String,
    /// The policy; `null`: the model's version policy chooses the version.
    pub policy: Option<TrafficPolicy>,
    pub figures: TrafficFigures,
}

/// The model's versions as a policy is checked against them: a version whose last load
/// failed is not loadable.
fn known_versions(state: &AppState, model: &str) -> ApiResult<Vec<KnownVersion>> {
    Ok(state
        .catalog()
        .known_versions(model)?
        .iter()
        .map(|r| KnownVersion {
            version: r.version,
            loadable: !matches!(state.engine().state(&model_key(r)), ModelState::Failed(_)),
        })
        .collect())
}

fn view(state: &AppState, model: &str, settings: Option<&Map<String, Value>>) -> TrafficView {
    let policy = settings
        .and_then(|s| s.get(TRAFFIC))
        .and_then(|v| TrafficPolicy::from_json(v.to_string().as_bytes()).ok());
    TrafficView {
        model: model.to_owned(),
        policy,
        figures: figures(state, model),
    }
}

/// Callers' answers per version come from the gateway's own recordings (a mirrored copy never
/// answers a caller, so it is not among them); the copies from the mirror's counters.
fn figures(state: &AppState, model: &str) -> TrafficFigures {
    let metrics = state.metrics();
    let mut versions: Vec<u64> = state
        .catalog()
        .versions(model)
        .iter()
        .map(|r| r.version)
        .collect();
    versions.sort_unstable();
    let served = versions
        .iter()
        .map(|&version| {
            let label = version.to_string();
            let statuses = metrics.latency.statuses(model, &label);
            let latency = metrics.latency.counts(model, &label);
            VersionFigures {
                version,
                split_requests: metrics.traffic.split_count(model, version),
                requests: statuses.as_ref().map_or(0, |s| s.in_range(100..600)),
                errors: statuses.as_ref().map_or(0, |s| s.in_range(400..600)),
                p50_ms: latency.as_ref().and_then(|c| c.quantile_ms(0.5)),
                p99_ms: latency.as_ref().and_then(|c| c.quantile_ms(0.99)),
            }
        })
        .collect();
    let mirror = versions
        .iter()
        .filter_map(|&version| metrics.traffic.mirror_figures(model, version))
        .collect();
    TrafficFigures {
        versions: served,
        mirror,
    }
}

/// Writes `value` as the model's traffic field (None removes it) and applies it here.
async fn store_policy(
    state: &AppState,
    model: &str,
    value: Option<Value>,
) -> ApiResult<TrafficView> {
    let settings = state
        .model_settings()
        .write(state.store(), model, TRAFFIC, value)
        .await?;
    Ok(view(state, model, Some(&settings)))
}

/// `PUT /api/models/{model}/traffic`: `{"split": [{"version": 1, "weight": 90}, ...],
/// "sticky": "key" | "header:NAME", "mirror": {"version": 3, "percent": 100}}`. A policy that
/// does not fit the model's versions is 400 naming the field; nothing is stored then.
pub async fn put(
    _: Authorized<Upload>,
    State(state): S,
    Path(model): Path<String>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> HttpResult<Json<TrafficView>> {
    let versions = known_versions(&state, &model).map_err(ApiError::before_body)?;
    let body = read_limited(&headers, body, super::body::MAX_JSON_API_BYTES).await?;
    let policy = TrafficPolicy::from_json(&body)
        .and_then(|p| p.validate(&versions).map(|()| p))
        .map_err(|e| ApiError::bad_request(format!("traffic policy: {e}")))?;
    let value = serde_json::to_value(&policy)
        .map_err(|e| ApiError::internal(format!("encoding the policy: {e}")))?;
    let answer = store_policy(&state, &model, Some(value)).await?;
    tracing::info!(model = %model, policy = %String::from_utf8_lossy(&body), "traffic policy set");
    Ok(Json(answer))
}

/// `GET /api/models/{model}/traffic`.
pub async fn get(
    _: Authorized<Infer>,
    State(state): S,
    Path(model): Path<String>,
) -> HttpResult<Json<TrafficView>> {
    known_versions(&state, &model)?;
    let settings = state.model_settings().get(&model);
    Ok(Json(view(
        &state,
        &model,
        settings.as_ref().map(|s| &s.raw),
    )))
}

/// `DELETE /api/models/{model}/traffic`: back to the version policy.
pub async fn delete(
    _: Authorized<Upload>,
    State(state): S,
    Path(model): Path<String>,
) -> HttpResult<Json<TrafficView>> {
    known_versions(&state, &model)?;
    let answer = store_policy(&state, &model, None).await?;
    tracing::info!(model = %model, "traffic policy removed");
    Ok(Json(answer))
}
