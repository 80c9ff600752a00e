//! What a pipeline declares: pre-plugins → model → post-plugins, as the JSON users PUT.

use super::detect::TextDetection;
use super::native::ResizeNormalize;
use crate::error::{ApiError, ApiResult};
use crate::state::validate_name;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A plugin named by a pipeline: `name` runs the newest upload of that name (so uploading a
/// new version takes effect for new requests), `name@version` pins one version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginRef {
    pub name: String,
    pub version: Option<String>,
}

impl PluginRef {
    pub fn parse(s: &str) -> ApiResult<PluginRef> {
        let (name, version) = match s.split_once('@') {
            Some((n, v)) if !v.is_empty() => (n, Some(v.to_string())),
            Some(_) => {
                return Err(ApiError::bad_request(format!(
                    "plugin reference '{s}' has an empty version after '@'"
                )))
            }
            None => (s, None),
        };
        validate_name("plugin", name)?;
        Ok(PluginRef {
            name: name.to_string(),
            version,
        })
    }
}

impl std::fmt::Display for PluginRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.version {
            Some(v) => write!(f, "{}@{v}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

/// The JSON form of a pipeline.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineSpec {
    /// Pre-plugins, in order. The first receives the request (raw bytes or tensors); each
    /// next one receives the tensors the previous returned.
    #[serde(default)]
    pub pre: Vec<String>,
    /// The engine's native resize + normalize between the pre-plugins and the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preprocess: Option<ResizeNormalize>,
    /// Text detection after the pre-plugins: the rest of the pipeline then runs once per
    /// text region found (see [`super::detect`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detect: Option<TextDetection>,
    /// The model the pre-plugins feed.
    pub model: String,
    /// A fixed model version; the newest when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_version: Option<u64>,
    /// Which model outputs go on to the post-plugins (all when empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub model_outputs: Vec<String>,
    /// Post-plugins, in order. Each receives the previous stage's tensors; only the last may
    /// return JSON or bytes.
    #[serde(default)]
    pub post: Vec<String>,
    /// String parameters handed to every plugin as metadata (e.g. `top_k`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub parameters: BTreeMap<String, String>,
}

impl PipelineSpec {
    /// Parses and validates a spec: field names, plugin references, the model name.
    pub fn from_json(value: &serde_json::Value) -> ApiResult<PipelineSpec> {
        let spec: PipelineSpec = serde_json::from_value(value.clone())
            .map_err(|e| ApiError::bad_request(format!("invalid pipeline: {e}")))?;
        validate_name("model", &spec.model)?;
        spec.pre_refs()?;
        if let Some(p) = &spec.preprocess {
            p.validate()
                .map_err(|m| ApiError::bad_request(format!("invalid pipeline {m}")))?;
        }
        if let Some(d) = &spec.detect {
            d.validate()?;
        }
        spec.post_refs()?;
        if spec.pre.len() + spec.post.len() > 16 {
            return Err(ApiError::bad_request(
                "invalid pipeline: at most 16 plugins in one pipeline",
            ));
        }
        Ok(spec)
    }

    pub fn pre_refs(&self) -> ApiResult<Vec<PluginRef>> {
        self.pre.iter().map(|s| PluginRef::parse(s)).collect()
    }

    /// Every model the pipeline runs besides `model`: the detection stage's (newest versions).
    pub fn stage_models(&self) -> impl Iterator<Item = &str> {
        self.detect.iter().flat_map(TextDetection::models)
    }

    pub fn post_refs(&self) -> ApiResult<Vec<PluginRef>> {
        self.post.iter().map(|s| PluginRef::parse(s)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn references_parse_names_and_pinned_versions() {
        assert_eq!(
            PluginRef::parse("image-decode").unwrap(),
            PluginRef {
                name: "image-decode".into(),
                version: None
            }
        );
        let pinned = PluginRef::parse("top-k@1.2.0").unwrap();
        assert_eq!(pinned.version.as_deref(), Some("1.2.0"));
        assert_eq!(pinned.to_string(), "top-k@1.2.0");
        assert!(PluginRef::parse("top-k@").is_err());
        assert!(PluginRef::parse("../x").is_err());
    }

    #[test]
    fn specs_reject_unknown_fields_and_bad_names() {
        let ok = PipelineSpec::from_json(&json!({
            "pre": ["image-decode"], "model": "efficientnet-lite0", "post": ["imagenet-top-k@0.1.0"],
            "parameters": {"top_k": "5"}
        }))
        .unwrap();
        assert_eq!(ok.post_refs().unwrap()[0].version.as_deref(), Some("0.1.0"));
        let unknown = PipelineSpec::from_json(&json!({"model": "m", "prep": []})).unwrap_err();
        assert!(unknown.message.contains("prep"), "{}", unknown.message);
        assert!(PipelineSpec::from_json(&json!({"pre": ["a"]})).is_err());
        assert!(PipelineSpec::from_json(&json!({"model": "bad/name"})).is_err());
    }
}
