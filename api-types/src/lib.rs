//! The answers of the API routes the dashboard reads, one definition for both sides: the
//! gateway builds these and serializes them, the dashboard (wasm32) deserializes them. The
//! worker messages the dashboard shows (devices, loaded models, the heartbeat report) live here
//! too, so the manager, the workers and the dashboard share one definition of them.
//!
//! Field names and JSON shapes are the API's (README, "API"): a field is skipped only where the
//! route omits it.

#![forbid(unsafe_code)]

pub mod events;
pub mod history;
pub mod keys;
pub mod kserve;
pub mod models;
pub mod openai;
#[cfg(feature = "openapi")]
pub mod openapi;
pub mod pipelines;
pub mod plugins;
pub mod stats;
pub mod stream;
pub mod workers;

/// Deserializes a field that is present (`null` included) as `Some`, for answers that carry a
/// field as `null` on one route and leave it out on another: `Option<Value>` alone would read
/// both as `None` and lose the difference when written again.
fn present<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    T::deserialize(deserializer).map(Some)
}

/// The body of every error answer outside the OpenAI routes (which answer OpenAI's
/// [`openai::ErrorBody`]): `{"error": "..."}`, the message saying whose fault it is.
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ErrorBody {
    pub error: String,
}
