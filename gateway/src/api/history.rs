//! `GET /api/metrics/history` (scope `infer`): the server's per-second history of every model
//! and pipeline ([`crate::history`]), so a dashboard shows the last hour as soon as it opens.
//!
//! Query: `seconds` (how far back, default and at most 3600), `after_ms` (only samples newer
//! than this server time: what a poller asks each second), `model` (one name). Answer:
//! `{"interval_s": 1, "capacity_s": 3600, "now_ms", "models": [{"name", "kind" (model or
//! pipeline), "t_ms": [...], "requests_per_s": [...], "client_errors_per_s": [...],
//! "server_errors_per_s": [...], "p50_ms": [...], "p99_ms": [...], "avg_queue_ms": [...],
//! "avg_batch": [...], "in_flight": [...], "statuses": [{"200": n, "400": n}, ...]}],
//! "totals": {NAME: {"statuses": {"200": n, ...}, "batch_sizes": [[size, executions], ...]}},
//! "activity": [{"time_ms", "model", "version", "state", "reason"}]}`. Chat models add
//! `"ttft_ms"` (mean time to first token) and `"tokens_per_s"` columns. An admin key also gets
//! `"keys": [{"id", "public_id", "name", "t_ms", "requests_per_s", "refused_per_s"}]`: traffic
//! per API key (keys used within the hour, the 100 most recent). Columns hold one value
//! per second, oldest first; `null` where a second had no value (no successful request, no
//! queued request). Totals count since the server started.

use super::authorized::{Authorized, Infer};
use crate::auth::Scope;
use crate::error::{ApiError, ApiResult};
use crate::history::{now_ms, Sample, CAPACITY};
use crate::state::AppState;
use crate::store::models::model_key;
use axum::extract::{Query, State};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::sync::Arc;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HistoryQuery {
    seconds: Option<u64>,
    after_ms: Option<u64>,
    model: Option<String>,
}

/// Three decimals are plenty for a chart and keep the answer small.
fn round(v: f64) -> Value {
    json!((v * 1000.0).round() / 1000.0)
}

fn column(samples: &[Sample], read: impl Fn(&Sample) -> Option<f64>) -> Value {
    Value::Array(
        samples
            .iter()
            .map(|s| read(s).map_or(Value::Null, round))
            .collect(),
    )
}

fn statuses(counts: impl IntoIterator<Item = (u16, u64)>) -> Value {
    Value::Object(
        counts
            .into_iter()
            .map(|(status, n)| (status.to_string(), json!(n)))
            .collect::<Map<_, _>>(),
    )
}

/// Answers by status and executions by batch size since start, per name.
fn totals(state: &AppState, names: &[String]) -> Value {
    let mut batches: BTreeMap<&str, BTreeMap<u64, u64>> = BTreeMap::new();
    for r in state.catalog().all().iter() {
        let Some(name) = names.iter().find(|n| **n == r.name) else {
            continue;
        };
        let sizes = batches.entry(name.as_str()).or_default();
        if let Some(stats) = state.engine().stats(&model_key(r)) {
            for b in &stats.batch_stats {
                *sizes.entry(b.batch_size).or_default() += b.compute_infer.count;
            }
        }
    }
    let mut out = Map::new();
    for name in names {
        let answered = state
            .metrics()
            .latency
            .model_totals(name)
            .map(|(_, s)| s.nonzero())
            .unwrap_or_default();
        let sizes: Vec<Value> = batches
            .get(name.as_str())
            .into_iter()
            .flatten()
            .filter(|(_, n)| **n > 0)
            .map(|(size, n)| json!([size, n]))
            .collect();
        out.insert(
            name.clone(),
            json!({"statuses": statuses(answered), "batch_sizes": sizes}),
        );
    }
    Value::Object(out)
}

pub async fn history(
    Authorized { key: caller, .. }: Authorized<Infer>,
    State(state): State<Arc<AppState>>,
    Query(query): Query<HistoryQuery>,
) -> ApiResult<Json<Value>> {
    let now = now_ms();
    let seconds = query.seconds.unwrap_or(CAPACITY as u64);
    if seconds == 0 || seconds > CAPACITY as u64 {
        return Err(ApiError::bad_request(format!(
            "seconds must be between 1 and {CAPACITY} (the history kept)"
        )));
    }
    let after = query
        .after_ms
        .unwrap_or(0)
        .max(now.saturating_sub(seconds * 1000));
    let history = state.history();
    let series = history.read(after, query.model.as_deref());
    if let Some(name) = &query.model {
        if series.is_empty() {
            return Err(ApiError::not_found(format!(
                "no model or pipeline '{name}' in the history"
            )));
        }
    }
    let names: Vec<String> = series.iter().map(|s| s.name.clone()).collect();
    let models: Vec<Value> = series
        .into_iter()
        .map(|s| {
            let x = &s.samples;
            json!({
                "name": s.name,
                "kind": s.kind,
                "t_ms": x.iter().map(|s| s.t_ms).collect::<Vec<_>>(),
                "requests_per_s": column(x, |s| Some(s.requests_per_s)),
                "client_errors_per_s": column(x, |s| Some(s.client_errors_per_s)),
                "server_errors_per_s": column(x, |s| Some(s.server_errors_per_s)),
                "p50_ms": column(x, |s| s.p50_ms),
                "p99_ms": column(x, |s| s.p99_ms),
                "avg_queue_ms": column(x, |s| s.avg_queue_ms),
                "avg_batch": column(x, |s| s.avg_batch),
                "in_flight": x.iter().map(|s| s.in_flight).collect::<Vec<_>>(),
                "statuses": x.iter().map(|s| statuses(s.statuses.clone())).collect::<Vec<_>>(),
                "ttft_ms": column(x, |s| s.ttft_ms),
                "tokens_per_s": column(x, |s| s.tokens_per_s),
            })
        })
        .collect();
    let keys = if caller.scopes().allows(Scope::Admin) {
        key_traffic(&state, after)?
    } else {
        Vec::new()
    };
    Ok(Json(json!({
        "interval_s": 1,
        "capacity_s": CAPACITY,
        "now_ms": now,
        "models": models,
        "totals": totals(&state, &names),
        "activity": history.activity(after),
        "keys": keys,
    })))
}

/// Requests per second of each charted key, with its name (admin callers only: key names and
/// traffic are not every application's business).
fn key_traffic(state: &AppState, after: u64) -> ApiResult<Vec<Value>> {
    let series = state.history().read_keys(after);
    if series.is_empty() {
        return Ok(Vec::new());
    }
    let records: BTreeMap<i64, _> = state
        .store()
        .list_keys()?
        .into_iter()
        .map(|k| (k.id, k))
        .collect();
    Ok(series
        .into_iter()
        .filter_map(|(id, samples)| {
            let key = records.get(&id)?;
            Some(json!({
                "id": id,
                "public_id": key.public_id,
                "name": key.name,
                "t_ms": samples.iter().map(|s| s.t_ms).collect::<Vec<_>>(),
                "requests_per_s": samples.iter().map(|s| round(s.requests_per_s)).collect::<Vec<_>>(),
                "refused_per_s": samples.iter().map(|s| round(s.refused_per_s)).collect::<Vec<_>>(),
            }))
        })
        .collect())
}
