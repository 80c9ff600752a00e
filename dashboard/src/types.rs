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
