//! `GET /v2/models/stats`, `/v2/models/{model}/stats` and
//! `/v2/models/{model}/versions/{version}/stats`: Triton's statistics extension.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A count and the nanoseconds spent over it.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StatDuration {
    pub count: u64,
    pub ns: u64,
}

/// Per request outcome and per phase, as Triton names them (the response cache is not
/// implemented: its two entries stay zero).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct InferenceStats {
    pub success: StatDuration,
    pub fail: StatDuration,
    pub queue: StatDuration,
    pub compute_input: StatDuration,
    pub compute_infer: StatDuration,
    pub compute_output: StatDuration,
    pub cache_hit: StatDuration,
    pub cache_miss: StatDuration,
}

/// The executions of one batch size.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BatchStats {
    pub batch_size: u64,
    pub compute_input: StatDuration,
    pub compute_infer: StatDuration,
    pub compute_output: StatDuration,
}

/// One model version's statistics.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ModelStats {
    pub name: String,
    /// The version number as a string, as Triton writes it.
    pub version: String,
    /// Unix milliseconds of the last inference (0: none yet).
    pub last_inference: u64,
    pub inference_count: u64,
    pub execution_count: u64,
    pub inference_stats: InferenceStats,
    /// Always `{}`: no decoupled models here.
    pub response_stats: Map<String, Value>,
    pub batch_stats: Vec<BatchStats>,
    /// Always `[]`.
    pub memory_usage: Vec<Value>,
}

/// The answer of the three statistics routes.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StatsList {
    pub model_stats: Vec<ModelStats>,
}
