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
    /// Text detection after the pre-plugins: the rest of the pipeline then runs once per
    /// text region found (see `crate::infer::detect`).
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
    pub fn from_json(value: &serde_json::Value) -> Result<PipelineSpec, DecodeError> {
        let spec: PipelineSpec = serde_json::from_value(value.clone())
            .map_err(|e| DecodeError(format!("invalid pipeline: {e}")))?;
        validate_name("model", &spec.model)?;
        spec.pre_refs()?;
        if let Some(p) = &spec.preprocess {
            p.validate()
                .map_err(|m| DecodeError(format!("invalid pipeline {m}")))?;
        }
        if let Some(d) = &spec.detect {
            d.validate()?;
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

    /// Every model the pipeline runs besides `model`: the detection stage's (newest versions).
    pub fn stage_models(&self) -> impl Iterator<Item = &str> {
        self.detect.iter().flat_map(TextDetection::models)
    }

    pub fn post_refs(&self) -> Result<Vec<PluginRef>, DecodeError> {
        self.post.iter().map(|s| PluginRef::parse(s)).collect()
    }
}

/// `"detect"` in a pipeline spec.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TextDetection {
    /// The detection model (probability map out).
    pub model: String,
    /// The 0°/180° classifier; without it every region is read as it stands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub angle_model: Option<String>,
    /// The image is scaled so that its longer side is at most this (and both sides are
    /// multiples of 32, as the detector needs) before detection.
    #[serde(default = "defaults::max_side")]
    pub max_side: usize,
    /// A map pixel above this belongs to text.
    #[serde(default = "defaults::threshold")]
    pub threshold: f32,
    /// Regions whose mean probability is this or less are dropped.
    #[serde(default = "defaults::box_threshold")]
    pub box_threshold: f32,
    /// How far each blob grows to cover its whole line (DB's unclip ratio).
    #[serde(default = "defaults::unclip_ratio")]
    pub unclip_ratio: f32,
    /// Of two regions overlapping by more than this IoU, the weaker is dropped (native NMS).
    #[serde(default = "defaults::iou_threshold")]
    pub iou_threshold: f32,
    #[serde(default = "defaults::max_regions")]
    pub max_regions: u32,
    /// A region is turned when the classifier says 180° with more than this probability.
    #[serde(default = "defaults::angle_threshold")]
    pub angle_threshold: f32,
}

/// PaddleOCR's defaults (`rapidocr_onnxruntime/config.yaml`).
mod defaults {
    pub fn max_side() -> usize {
        960
    }
    pub fn threshold() -> f32 {
        0.3
    }
    pub fn box_threshold() -> f32 {
        0.5
    }
    pub fn unclip_ratio() -> f32 {
        1.6
    }
    pub fn iou_threshold() -> f32 {
        0.3
    }
    pub fn max_regions() -> u32 {
        100
    }
    pub fn angle_threshold() -> f32 {
        0.9
    }
}

/// The detector's stride: its input sides must be multiples of this.
pub const STRIDE: usize = 32;

impl TextDetection {
    /// Checks names and ranges; the message names the field.
    pub fn validate(&self) -> Result<(), DecodeError> {
        validate_name("model", &self.model)?;
        if let Some(m) = &self.angle_model {
            validate_name("model", m)?;
        }
        let bad = |field: &str, why: &str| {
            Err(DecodeError(format!(
                "invalid pipeline: detect.{field} {why}"
            )))
        };
        if !(STRIDE..=4096).contains(&self.max_side) {
            return bad("max_side", "must be between 32 and 4096");
        }
        for (field, v) in [
            ("threshold", self.threshold),
            ("box_threshold", self.box_threshold),
            ("iou_threshold", self.iou_threshold),
            ("angle_threshold", self.angle_threshold),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return bad(field, "must be between 0 and 1");
            }
        }
        if !(self.unclip_ratio.is_finite() && (0.0..=10.0).contains(&self.unclip_ratio)) {
            return bad("unclip_ratio", "must be between 0 and 10");
        }
        if !(1..=1000).contains(&self.max_regions) {
            return bad("max_regions", "must be between 1 and 1000");
        }
        Ok(())
    }

    /// The models this stage runs (newest versions).
    pub fn models(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.model.as_str()).chain(self.angle_model.as_deref())
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

    #[test]
    fn stage_fields_default_to_paddleocr_and_are_range_checked() {
        let stage: TextDetection = serde_json::from_value(json!({"model": "ocr-det"})).unwrap();
        assert_eq!((stage.max_side, stage.threshold), (960, 0.3));
        stage.validate().unwrap();
        let bad: TextDetection =
            serde_json::from_value(json!({"model": "ocr-det", "box_threshold": 1.5})).unwrap();
        let e = bad.validate().unwrap_err();
        assert!(e.0.contains("detect.box_threshold"), "{e}");
        assert!(
            serde_json::from_value::<TextDetection>(json!({"model": "d", "angle": "c"})).is_err()
        );
    }
}
