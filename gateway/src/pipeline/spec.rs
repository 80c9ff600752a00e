//! What a pipeline declares: pre-plugins → model → post-plugins, as the JSON users PUT.
//!
//! Self-contained (no `crate::` paths): the fuzz target `pipeline_spec` (fuzz/) builds this
//! file without the gateway. Its errors are the client's (400).

use infergate_engine::preprocess::ResizeNormalize;
use infergate_protocol::names::check as validate_name;
use infergate_protocol::DecodeError;
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
    pub fn parse(s: &str) -> Result<PluginRef, DecodeError> {
        let (name, version) = match s.split_once('@') {
            Some((n, v)) if !v.is_empty() => (n, Some(v.to_string())),
            Some(_) => {
                return Err(DecodeError(format!(
                    "plugin reference '{}' has an empty version after '@'",
                    s.escape_debug()
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
    pub fn from_json(value: &serde_json::Value) -> Result<PipelineSpec, DecodeError> {
        let spec: PipelineSpec = serde_json::from_value(value.clone())
            .map_err(|e| DecodeError(format!("invalid pipeline: {e}")))?;
        validate_name("model", &spec.model)?;
        spec.pre_refs()?;
        if let Some(p) = &spec.preprocess {
            p.validate()
                .map_err(|m| DecodeError(format!("invalid pipeline {m}")))?;
        }
        spec.post_refs()?;
        if spec.pre.len() + spec.post.len() > 16 {
            return Err(DecodeError(
                "invalid pipeline: at most 16 plugins in one pipeline".into(),
            ));
        }
        Ok(spec)
    }

    pub fn pre_refs(&self) -> Result<Vec<PluginRef>, DecodeError> {
        self.pre.iter().map(|s| PluginRef::parse(s)).collect()
    }

    pub fn post_refs(&self) -> Result<Vec<PluginRef>, DecodeError> {
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
        assert!(unknown.0.contains("prep"), "{unknown}");
        assert!(PipelineSpec::from_json(&json!({"pre": ["a"]})).is_err());
        assert!(PipelineSpec::from_json(&json!({"model": "bad/name"})).is_err());
    }
}
