//! What a pipeline declares: pre-plugins → model → post-plugins, as the JSON users PUT. The
//! spec's fields are shared with the dashboard (`infergate_api_types::pipelines`); what the
//! gateway checks before it saves one is here.
//!
//! Self-contained (no `crate::` paths): the fuzz target `pipeline_spec` (fuzz/) builds this
//! file without the gateway. Its errors are the client's (400).

use infergate_engine::preprocess::ResizeNormalizeExt;
use infergate_protocol::names::check as validate_name;
use infergate_protocol::DecodeError;

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

/// The data of a spec is shared with the dashboard (`infergate-api-types`); parsing and
/// checking it is here.
pub use infergate_api_types::pipelines::{PipelineSpec, TextDetection};

/// Parsing and checking a [`PipelineSpec`] as the gateway takes it.
pub trait PipelineSpecExt: Sized {
    /// Parses and validates a spec: field names, plugin references, the model name.
    fn from_json(value: &serde_json::Value) -> Result<Self, DecodeError>;
    fn pre_refs(&self) -> Result<Vec<PluginRef>, DecodeError>;
    fn post_refs(&self) -> Result<Vec<PluginRef>, DecodeError>;
}

impl PipelineSpecExt for PipelineSpec {
    fn from_json(value: &serde_json::Value) -> Result<PipelineSpec, DecodeError> {
        let spec: PipelineSpec = serde_json::from_value(value.clone())
            .map_err(|e| DecodeError(format!("invalid pipeline: {e}")))?;
        validate_name("model", &spec.model)?;
        spec.pre_refs()?;
        if let Some(p) = &spec.preprocess {
            p.validate()
                .map_err(|m| DecodeError(format!("invalid pipeline {m}")))?;
        }
        if let Some(d) = &spec.detect {
            validate_detection(d)?;
        }
        spec.post_refs()?;
        if spec.pre.len() + spec.post.len() > 16 {
            return Err(DecodeError(
                "invalid pipeline: at most 16 plugins in one pipeline".into(),
            ));
        }
        Ok(spec)
    }

    fn pre_refs(&self) -> Result<Vec<PluginRef>, DecodeError> {
        self.pre.iter().map(|s| PluginRef::parse(s)).collect()
    }

    fn post_refs(&self) -> Result<Vec<PluginRef>, DecodeError> {
        self.post.iter().map(|s| PluginRef::parse(s)).collect()
    }
}

/// The detector's stride: its input sides must be multiples of this.
pub const STRIDE: usize = 32;

/// Checks a `"detect"` stage's names and ranges; the message names the field.
fn validate_detection(stage: &TextDetection) -> Result<(), DecodeError> {
    validate_name("model", &stage.model)?;
    if let Some(m) = &stage.angle_model {
        validate_name("model", m)?;
    }
    let bad = |field: &str, why: &str| {
        Err(DecodeError(format!(
            "invalid pipeline: detect.{field} {why}"
        )))
    };
    if !(STRIDE..=4096).contains(&stage.max_side) {
        return bad("max_side", "must be between 32 and 4096");
    }
    for (field, v) in [
        ("threshold", stage.threshold),
        ("box_threshold", stage.box_threshold),
        ("iou_threshold", stage.iou_threshold),
        ("angle_threshold", stage.angle_threshold),
    ] {
        if !(0.0..=1.0).contains(&v) {
            return bad(field, "must be between 0 and 1");
        }
    }
    if !(stage.unclip_ratio.is_finite() && (0.0..=10.0).contains(&stage.unclip_ratio)) {
        return bad("unclip_ratio", "must be between 0 and 10");
    }
    if !(1..=1000).contains(&stage.max_regions) {
        return bad("max_regions", "must be between 1 and 1000");
    }
    Ok(())
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
        validate_detection(&stage).unwrap();
        let bad: TextDetection =
            serde_json::from_value(json!({"model": "ocr-det", "box_threshold": 1.5})).unwrap();
        let e = validate_detection(&bad).unwrap_err();
        assert!(e.0.contains("detect.box_threshold"), "{e}");
        assert!(
            serde_json::from_value::<TextDetection>(json!({"model": "d", "angle": "c"})).is_err()
        );
    }
}
