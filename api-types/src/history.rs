//! `GET /api/metrics/history` (scope `infer`): the server's per-second history of every model
//! and pipeline, and of API keys for an admin caller. Columns hold one value per second, oldest
//! first; `null` where a second had no value.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A model version's state as the API names it.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum VersionState {
    Unloaded,
    Loading,
    Loaded,
    Failed,
    /// Activity and events only: the version was just registered.
    Registered,
    /// Activity and events only: the version was just removed.
    Removed,
}

impl VersionState {
    pub fn as_str(self) -> &'static str {
        match self {
            VersionState::Unloaded => "unloaded",
            VersionState::Loading => "loading",
            VersionState::Loaded => "loaded",
            VersionState::Failed => "failed",
            VersionState::Registered => "registered",
            VersionState::Removed => "removed",
        }
    }
}

/// Answers by status code (`{"200": n, "429": n}`).
pub type Statuses = BTreeMap<u16, u64>;

/// The whole answer.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct History {
    pub interval_s: u64,
    /// How far back the server keeps samples.
    pub capacity_s: u64,
    /// The server's clock: ask `after_ms` from here next time.
    pub now_ms: u64,
    pub models: Vec<Series>,
    /// Per name, since the server started.
    pub totals: BTreeMap<String, Totals>,
    pub activity: Vec<Activity>,
    /// Traffic per API key (admin callers only; `[]` for others).
    pub keys: Vec<KeyTraffic>,
}

/// Whether a series is a model or a pipeline.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum SeriesKind {
    Model,
    Pipeline,
}

/// One model's or pipeline's columns.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Series {
    pub name: String,
    pub kind: SeriesKind,
    /// The end of each second, Unix milliseconds.
    pub t_ms: Vec<u64>,
    pub requests_per_s: Vec<f64>,
    pub client_errors_per_s: Vec<f64>,
    pub server_errors_per_s: Vec<f64>,
    pub p50_ms: Vec<Option<f64>>,
    pub p99_ms: Vec<Option<f64>>,
    pub avg_queue_ms: Vec<Option<f64>>,
    pub avg_batch: Vec<Option<f64>>,
    pub in_flight: Vec<u64>,
    // JSON object keys are strings: the status codes are too.
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<BTreeMap<String, u64>>))]
    pub statuses: Vec<Statuses>,
    /// Chat models: mean time to first token (null elsewhere and in idle seconds).
    pub ttft_ms: Vec<Option<f64>>,
    pub tokens_per_s: Vec<Option<f64>>,
}

/// A name's answers by status and executions by batch size since start.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Totals {
    #[cfg_attr(feature = "openapi", schema(value_type = BTreeMap<String, u64>))]
    pub statuses: Statuses,
    /// `[size, executions]` pairs, smallest size first.
    pub batch_sizes: Vec<(u64, u64)>,
}

/// A model version that changed state, with the server's time.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Activity {
    pub time_ms: u64,
    pub model: String,
    pub version: u64,
    pub state: VersionState,
    pub reason: Option<String>,
}

/// One API key's traffic.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct KeyTraffic {
    pub id: i64,
    pub public_id: String,
    pub name: String,
    pub t_ms: Vec<u64>,
    pub requests_per_s: Vec<f64>,
    /// Refused by the key's rate limit or concurrency cap.
    pub refused_per_s: Vec<f64>,
    /// Tokens (prompt plus completion) charged to the key, for LLM requests.
    #[serde(default)]
    pub tokens_per_s: Vec<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_answer_keeps_its_shape() {
        let answer = json!({
            "interval_s": 1, "capacity_s": 3600, "now_ms": 9,
            "models": [{"name": "m", "kind": "pipeline", "t_ms": [8], "requests_per_s": [1.5],
                "client_errors_per_s": [0.0], "server_errors_per_s": [0.0], "p50_ms": [null],
                "p99_ms": [2.0], "avg_queue_ms": [null], "avg_batch": [1.0], "in_flight": [0],
                "statuses": [{"200": 1, "429": 2}], "ttft_ms": [null], "tokens_per_s": [null]}],
            "totals": {"m": {"statuses": {"200": 3}, "batch_sizes": [[1, 3], [4, 1]]}},
            "activity": [{"time_ms": 7, "model": "m", "version": 1, "state": "registered",
                "reason": null}],
            "keys": [{"id": 1, "public_id": "p", "name": "k", "t_ms": [8],
                "requests_per_s": [1.0], "refused_per_s": [0.0], "tokens_per_s": [12.0]}],
        });
        let parsed: History = serde_json::from_value(answer.clone()).unwrap();
        assert_eq!(parsed.totals["m"].statuses[&200], 3);
        assert_eq!(serde_json::to_value(&parsed).unwrap(), answer);
    }
}
