//! `/api/models...`: registered model versions.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// One input or output of a model: name, datatype (`FP32`, `BYTES`, ...) and shape (`-1` for a
/// dynamic dimension).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TensorSpec {
    pub name: String,
    pub datatype: String,
    pub shape: Vec<i64>,
}

/// One model version: `GET /api/models/{name}/versions/{version}`, and each entry of
/// `GET /api/models` and `GET /api/models/{name}`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ModelVersion {
    pub name: String,
    pub version: u64,
    pub sha256: String,
    pub size_bytes: u64,
    pub created_at: i64,
    /// `gguf` for a chat model; absent for an ONNX model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
    /// Empty for a chat model.
    pub inputs: Vec<TensorSpec>,
    pub outputs: Vec<TensorSpec>,
    /// The names of an ONNX model's custom metadata entries (absent for a chat model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata_keys: Option<Vec<String>>,
    /// A chat model's metadata, entries and values (absent for an ONNX model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<BTreeMap<String, String>>,
    /// The version's configuration as stored (`null` when it has none).
    #[serde(default)]
    pub config: Value,
    /// loaded, loading, unloaded or failed.
    pub state: crate::history::VersionState,
    /// Why it failed to load (`null` otherwise).
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub in_flight: u64,
    /// An ONNX model's execution providers once loaded and why not the requested ones (`null`
    /// while not loaded); absent for a chat model.
    #[serde(
        default,
        deserialize_with = "crate::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub execution: Option<Value>,
}

/// `GET /api/models`: every registered version.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ModelList {
    pub models: Vec<ModelVersion>,
}

/// `GET /api/models/{name}`: one model's versions.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ModelVersions {
    pub name: String,
    pub versions: Vec<ModelVersion>,
}

/// `DELETE /api/models/{name}/versions/{version}`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct VersionDeleted {
    pub name: String,
    pub version: u64,
    /// Always `true`.
    pub deleted: bool,
}

/// `DELETE /api/models/{name}`: every version.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ModelDeleted {
    pub name: String,
    pub deleted_versions: Vec<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn execution_null_and_absent_stay_apart() {
        let onnx = serde_json::json!({
            "name": "m", "version": 1, "sha256": "00", "size_bytes": 1, "created_at": 0,
            "inputs": [], "outputs": [], "metadata_keys": [], "config": null,
            "state": "unloaded", "reason": null, "in_flight": 0, "execution": null,
        });
        let parsed: ModelVersion = serde_json::from_value(onnx.clone()).unwrap();
        assert_eq!(parsed.execution, Some(Value::Null));
        assert_eq!(serde_json::to_value(&parsed).unwrap(), onnx);

        let mut gguf = onnx;
        let fields = gguf.as_object_mut().unwrap();
        fields.remove("execution");
        fields.remove("metadata_keys");
        fields.insert("format".into(), "gguf".into());
        fields.insert("metadata".into(), serde_json::json!({"general.name": "x"}));
        let parsed: ModelVersion = serde_json::from_value(gguf.clone()).unwrap();
        assert_eq!(parsed.execution, None);
        assert_eq!(serde_json::to_value(&parsed).unwrap(), gguf);
    }
}
