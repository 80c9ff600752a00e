//! The API's JSON shapes the dashboard reads (see gateway/src/api/*.rs and the README).

use serde::Deserialize;
use serde_json::Value;

#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct TensorSpec {
    pub name: String,
    pub datatype: String,
    pub shape: Vec<i64>,
}

impl TensorSpec {
    pub fn shape_text(&self) -> String {
        let dims: Vec<String> = self
            .shape
            .iter()
            .map(|d| {
                if *d < 0 {
                    "?".to_string()
                } else {
                    d.to_string()
                }
            })
            .collect();
        format!("[{}]", dims.join(", "))
    }
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct ModelVersion {
    pub name: String,
    pub version: u64,
    pub sha256: String,
    pub size_bytes: u64,
    pub created_at: i64,
    pub inputs: Vec<TensorSpec>,
    pub outputs: Vec<TensorSpec>,
    #[serde(default)]
    pub config: Value,
    pub state: String,
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub in_flight: u64,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct ModelList {
    pub models: Vec<ModelVersion>,
}

/// Versions grouped by model name, newest version first.
pub fn group_models(list: &[ModelVersion]) -> Vec<(String, Vec<ModelVersion>)> {
    let mut groups: Vec<(String, Vec<ModelVersion>)> = Vec::new();
    for m in list {
        match groups.iter_mut().find(|(n, _)| *n == m.name) {
            Some((_, v)) => v.push(m.clone()),
            None => groups.push((m.name.clone(), vec![m.clone()])),
        }
    }
    for (_, v) in &mut groups {
        v.sort_by_key(|m| std::cmp::Reverse(m.version));
    }
    groups.sort_by(|a, b| a.0.cmp(&b.0));
    groups
}

#[derive(Clone, Copy, Debug, Deserialize, PartialEq)]
pub struct RateLimit {
    pub rps: f64,
    pub burst: u32,
}

#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq)]
pub struct EffectiveLimits {
    #[serde(default)]
    pub rate_limit: Option<RateLimit>,
    #[serde(default)]
    pub max_concurrent: Option<u32>,
}

/// A key's counters since the server started (`GET /api/keys` and `/api/keys/{id}/usage`).
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq)]
pub struct KeyUsage {
    pub in_flight: u32,
    #[serde(default)]
    pub remaining: Option<u64>,
    pub rejected_rate_total: u64,
    pub rejected_concurrency_total: u64,
}

/// A key's requests since the server started, whatever its limits, and its last use.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq)]
pub struct KeyActivity {
    pub admitted: u64,
    pub refused: u64,
    /// Unix milliseconds (server clock); `None` when unused since the server started.
    #[serde(default)]
    pub last_used_ms: Option<u64>,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct ApiKey {
    pub id: i64,
    pub public_id: String,
    pub name: String,
    pub scopes: Vec<String>,
    pub created_at: i64,
    #[serde(default)]
    pub revoked_at: Option<i64>,
    /// The key's own limits; `None` means the server's default.
    #[serde(default)]
    pub rate_limit: Option<RateLimit>,
    #[serde(default)]
    pub max_concurrent: Option<u32>,
    #[serde(default)]
    pub effective_limits: EffectiveLimits,
    #[serde(default)]
    pub usage: KeyUsage,
    #[serde(default)]
    pub activity: KeyActivity,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct KeyList {
    pub keys: Vec<ApiKey>,
}

#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq)]
pub struct StatDuration {
    pub count: u64,
    pub ns: u64,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct InferenceStats {
    pub success: StatDuration,
    pub fail: StatDuration,
    pub queue: StatDuration,
    #[serde(default)]
    pub compute_input: StatDuration,
    pub compute_infer: StatDuration,
    #[serde(default)]
    pub compute_output: StatDuration,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct ModelStats {
    pub name: String,
    pub version: String,
    #[serde(default)]
    pub last_inference: u64,
    #[serde(default)]
    pub inference_count: u64,
    #[serde(default)]
    pub execution_count: u64,
    pub inference_stats: InferenceStats,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct StatsList {
    pub model_stats: Vec<ModelStats>,
}

/// A host's hardware as it told the manager when it joined (`GET /api/workers`).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct Devices {
    pub cpu_model: String,
    pub cores: u32,
    pub ram_bytes: u64,
    pub gpus: Vec<GpuDevice>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct GpuDevice {
    pub name: String,
    pub memory_bytes: u64,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct GpuUsage {
    pub memory_used_bytes: u64,
    /// `None` when the worker cannot measure it (no NVML).
    pub utilisation_percent: Option<f64>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct LoadedModel {
    pub name: String,
    pub version: u64,
}

/// What a worker said in its last heartbeat.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct WorkerReport {
    pub models: Vec<LoadedModel>,
    pub in_flight: u64,
    pub queued: u64,
    pub requests_per_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub cpu_percent: f64,
    pub rss_bytes: u64,
    pub gpus: Vec<GpuUsage>,
}

/// One host: a worker, or the server's own engine (`local`).
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct WorkerHost {
    pub id: String,
    pub advertise: String,
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub devices: Devices,
    /// ready, draining or lost, as the manager judges it.
    pub state: String,
    /// The age of its last heartbeat on the manager's clock.
    #[serde(default)]
    pub last_seen_ms: u64,
    #[serde(default)]
    pub report: WorkerReport,
    #[serde(default)]
    pub outstanding: u64,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct WorkerList {
    pub workers: Vec<WorkerHost>,
}

/// One worker in a `/v2/events` tick: the manager's judgement (`state`, `last_seen_ms`,
/// `outstanding`) and what the worker measured over its last heartbeat interval (`None` while
/// it is lost, and the percentiles in an interval without requests).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct WorkerFigures {
    pub id: String,
    pub state: String,
    #[serde(default)]
    pub last_seen_ms: u64,
    #[serde(default)]
    pub outstanding: u64,
    #[serde(default)]
    pub models: Option<Vec<LoadedModel>>,
    #[serde(default)]
    pub in_flight: Option<u64>,
    #[serde(default)]
    pub queued: Option<u64>,
    #[serde(default)]
    pub requests_per_s: Option<f64>,
    #[serde(default)]
    pub p50_ms: Option<f64>,
    #[serde(default)]
    pub p99_ms: Option<f64>,
    #[serde(default)]
    pub cpu_percent: Option<f64>,
    #[serde(default)]
    pub rss_bytes: Option<u64>,
    #[serde(default)]
    pub gpus: Option<Vec<GpuUsage>>,
}

impl WorkerFigures {
    /// The same figures from `/api/workers`, before the first tick arrives.
    pub fn from_host(h: &WorkerHost) -> WorkerFigures {
        let live = h.state != "lost";
        let r = &h.report;
        let measured = |v: f64| (live && r.requests_per_s > 0.0).then_some(v);
        WorkerFigures {
            id: h.id.clone(),
            state: h.state.clone(),
            last_seen_ms: h.last_seen_ms,
            outstanding: h.outstanding,
            models: live.then(|| r.models.clone()),
            in_flight: live.then_some(r.in_flight),
            queued: live.then_some(r.queued),
            requests_per_s: live.then_some(r.requests_per_s),
            p50_ms: measured(r.p50_ms),
            p99_ms: measured(r.p99_ms),
            cpu_percent: live.then_some(r.cpu_percent),
            rss_bytes: live.then_some(r.rss_bytes),
            gpus: live.then(|| r.gpus.clone()),
        }
    }
}
