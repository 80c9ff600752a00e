//! `GET /api/metrics/history` (scope `infer`): the server's per-second history of every model
//! and pipeline ([`infergate_service::history`]), so a dashboard shows the last hour as soon as it opens.
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
//! `"keys": [{"id", "public_id", "name", "t_ms", "requests_per_s", "refused_per_s",
//! "tokens_per_s"}]`: traffic
//! per API key (keys used within the hour, the 100 most recent). Columns hold one value
//! per second, oldest first; `null` where a second had no value (no successful request, no
//! queued request). Totals count since the server started.

use super::authorized::{Authorized, Infer};
use axum::extract::{Query, State};
use axum::Json;
use infergate_api_types::history::{History, KeyTraffic, Series, Statuses, Totals};
use infergate_kserve::http_error::HttpResult;
use infergate_service::catalog::model_key;
use infergate_service::error::{ApiError, ApiResult};
use infergate_service::history::{now_ms, Sample, CAPACITY};
use infergate_service::state::AppState;
use infergate_store::auth::Scope;
use serde::Deserialize;
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
fn round(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

fn column(samples: &[Sample], read: impl Fn(&Sample) -> f64) -> Vec<f64> {
    samples.iter().map(|s| round(read(s))).collect()
}

fn gappy_column(samples: &[Sample], read: impl Fn(&Sample) -> Option<f64>) -> Vec<Option<f64>> {
    samples.iter().map(|s| read(s).map(round)).collect()
}

/// Answers by status and executions by batch size since start, per name.
fn totals(state: &AppState, names: &[String]) -> BTreeMap<String, Totals> {
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
    names
        .iter()
        .map(|name| {
            let statuses: Statuses = state
                .metrics()
                .latency
                .model_totals(name)
                .map(|(_, s)| s.nonzero())
                .unwrap_or_default()
                .into_iter()
                .collect();
            let batch_sizes = batches
                .get(name.as_str())
                .into_iter()
                .flatten()
                .filter(|(_, n)| **n > 0)
                .map(|(size, n)| (*size, *n))
                .collect();
            let totals = Totals {
                statuses,
                batch_sizes,
            };
            (name.clone(), totals)
        })
        .collect()
}

fn series(s: infergate_service::history::SeriesView) -> Series {
    let x = &s.samples;
    Series {
        t_ms: x.iter().map(|s| s.t_ms).collect(),
        requests_per_s: column(x, |s| s.requests_per_s),
        client_errors_per_s: column(x, |s| s.client_errors_per_s),
        server_errors_per_s: column(x, |s| s.server_errors_per_s),
        p50_ms: gappy_column(x, |s| s.p50_ms),
        p99_ms: gappy_column(x, |s| s.p99_ms),
        avg_queue_ms: gappy_column(x, |s| s.avg_queue_ms),
        avg_batch: gappy_column(x, |s| s.avg_batch),
        in_flight: x.iter().map(|s| s.in_flight).collect(),
        statuses: x.iter().map(|s| s.statuses.clone()).collect(),
        ttft_ms: gappy_column(x, |s| s.ttft_ms),
        tokens_per_s: gappy_column(x, |s| s.tokens_per_s),
        name: s.name,
        kind: s.kind,
    }
}

pub async fn history(
    auth: Authorized<Infer>,
    State(state): State<Arc<AppState>>,
    Query(query): Query<HistoryQuery>,
) -> HttpResult<Json<History>> {
    let caller = &auth.caller;
    let now = now_ms();
    let seconds = query.seconds.unwrap_or(CAPACITY as u64);
    if seconds == 0 || seconds > CAPACITY as u64 {
        return Err(ApiError::bad_request(format!(
            "seconds must be between 1 and {CAPACITY} (the history kept)"
        ))
        .into());
    }
    let after = query
        .after_ms
        .unwrap_or(0)
        .max(now.saturating_sub(seconds * 1000));
    let history = state.history();
    let read = history.read(after, query.model.as_deref());
    if let Some(name) = &query.model {
        if read.is_empty() {
            return Err(ApiError::not_found(format!(
                "no model or pipeline '{name}' in the history"
            ))
            .into());
        }
    }
    let names: Vec<String> = read.iter().map(|s| s.name.clone()).collect();
    let keys = if caller.allows(Scope::Admin) {
        key_traffic(&state, after)?
    } else {
        Vec::new()
    };
    Ok(Json(History {
        interval_s: 1,
        capacity_s: CAPACITY as u64,
        now_ms: now,
        models: read.into_iter().map(series).collect(),
        totals: totals(&state, &names),
        activity: history.activity(after),
        keys,
    }))
}

/// Requests per second of each charted key, with its name (admin callers only: key names and
/// traffic are not every application's business).
fn key_traffic(state: &AppState, after: u64) -> ApiResult<Vec<KeyTraffic>> {
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
            // Anonymous callers are charted together, as a caller of their own.
            let (public_id, name) = match records.get(&id) {
                Some(key) => (key.public_id.clone(), key.name.clone()),
                None if id == infergate_service::caller::ANONYMOUS_ID => (
                    infergate_service::caller::ANONYMOUS_LABEL.to_string(),
                    "anonymous (no key)".to_string(),
                ),
                None => return None,
            };
            Some(KeyTraffic {
                id,
                public_id,
                name,
                t_ms: samples.iter().map(|s| s.t_ms).collect(),
                requests_per_s: samples.iter().map(|s| round(s.requests_per_s)).collect(),
                refused_per_s: samples.iter().map(|s| round(s.refused_per_s)).collect(),
                tokens_per_s: samples.iter().map(|s| round(s.tokens_per_s)).collect(),
            })
        })
        .collect())
}
