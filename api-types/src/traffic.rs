//! `/api/models/{model}/traffic`: a model's traffic policy between its versions and what each
//! version served since the server started, callers' requests apart from mirrored copies.

use serde::{Deserialize, Serialize};

/// The answer of every traffic route.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct TrafficAnswer {
    pub model: String,
    /// `null`: no policy, the model's version policy chooses the version.
    pub policy: Option<Policy>,
    #[serde(default)]
    pub figures: TrafficFigures,
}

/// A traffic policy as the API writes it (`PUT` takes the same shape).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct Policy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split: Option<Vec<SplitEntry>>,
    /// `key` or `header:NAME`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sticky: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mirror: Option<Mirror>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct SplitEntry {
    pub version: u64,
    pub weight: u32,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq)]
pub struct Mirror {
    pub version: u64,
    pub percent: f64,
}

/// Per version since the server started: what callers got, and the mirrored copies apart (a
/// copy never reaches a caller, so it is in no caller figure).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TrafficFigures {
    /// Every version of the model, oldest first.
    pub versions: Vec<VersionFigures>,
    /// Versions that received mirrored copies.
    pub mirror: Vec<MirrorFigures>,
}

/// One version's answers to callers.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct VersionFigures {
    pub version: u64,
    /// Requests the split sent here (requests that named the version are not among them).
    pub split_requests: u64,
    /// Answers to callers, every status.
    pub requests: u64,
    /// Answers with a 4xx or 5xx status.
    pub errors: u64,
    /// Successful answers' latency; `null` before the first.
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
}

/// The mirrored copies one version ran (their answers dropped).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MirrorFigures {
    pub version: u64,
    pub ok: u64,
    pub errors: u64,
    /// Not run because the server was busy.
    pub shed: u64,
    /// Mean time of the copies that ran; `null` before the first.
    pub mean_ms: Option<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_answer_keeps_its_shape() {
        let answer = json!({
            "model": "m",
            "policy": {"split": [{"version": 1, "weight": 90}, {"version": 2, "weight": 10}],
                "sticky": "header:x-user", "mirror": {"version": 3, "percent": 12.5}},
            "figures": {
                "versions": [{"version": 1, "split_requests": 9, "requests": 10, "errors": 1,
                    "p50_ms": 1.5, "p99_ms": null}],
                "mirror": [{"version": 3, "ok": 2, "errors": 0, "shed": 1, "mean_ms": 0.5}]},
        });
        let parsed: TrafficAnswer = serde_json::from_value(answer.clone()).unwrap();
        assert_eq!(parsed.figures.mirror[0].shed, 1);
        assert_eq!(serde_json::to_value(&parsed).unwrap(), answer);
        // Fields a policy leaves out stay out when it is sent back.
        let bare = json!({"split": [{"version": 2, "weight": 1}]});
        let policy: Policy = serde_json::from_value(bare.clone()).unwrap();
        assert_eq!(serde_json::to_value(&policy).unwrap(), bare);
    }
}
