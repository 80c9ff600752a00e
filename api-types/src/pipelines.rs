//! `/api/pipelines`: a pipeline as users PUT it ([`PipelineSpec`]: pre-plugins → model →
//! post-plugins), the saved pipeline the routes answer with, and the answer of a raw-body run
//! that ends in tensors.
//!
//! These are the data only: the gateway parses and validates a spec (plugin references, names,
//! ranges) and runs it; the engine runs the native pre-op ([`ResizeNormalize`]), which a model
//! config names too.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// The JSON form of a pipeline: what `PUT /api/pipelines/{name}` takes, and its normalized
/// form the routes answer with (every default filled in).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PipelineSpec {
    /// Pre-plugins, in order (`name`, or `name@version` to pin one). The first receives the
    /// request (raw bytes or tensors); each next one receives the tensors the previous returned.
    #[serde(default)]
    pub pre: Vec<String>,
    /// The engine's native resize + normalize between the pre-plugins and the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preprocess: Option<ResizeNormalize>,
    /// Text detection after the pre-plugins: the rest of the pipeline then runs once per
    /// text region found.
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
    /// Answers a KServe gRPC stream request with one response per result (Triton's decoupled
    /// transaction policy): each row of the outputs' first dimension, or each element of a
    /// JSON array the last post-plugin returns, then the final flag. Unary calls are refused,
    /// as Triton refuses them for a decoupled model.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub decoupled: bool,
}

impl PipelineSpec {
    /// Every model the pipeline runs besides `model`: the detection stage's (newest versions).
    pub fn stage_models(&self) -> impl Iterator<Item = &str> {
        self.detect.iter().flat_map(TextDetection::models)
    }
}

/// How the native pre-op fits an image into the model's input size.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    #[default]
    Stretch,
    Letterbox,
    CenterCrop,
}

impl Mode {
    /// The name the JSON uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Stretch => "stretch",
            Mode::Letterbox => "letterbox",
            Mode::CenterCrop => "center_crop",
        }
    }
}

/// `"preprocess"` in a pipeline spec or in a model config's `"infergate"` block: fused resize +
/// mean/std normalize + HWC RGB8 → NCHW f32.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ResizeNormalize {
    /// Name of the RGB8 tensor ([H, W, 3] or [N, H, W, 3]) to convert; when absent, the first
    /// tensor (pipeline) or the tensor named `output` (model config).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<String>,
    /// Name of the FP32 [N, 3, height, width] tensor it becomes (the model's input name).
    pub output: String,
    pub width: usize,
    pub height: usize,
    /// Per-channel mean and standard deviation in 0..255 units: out = (pixel - mean) / std.
    pub mean: [f32; 3],
    pub std: [f32; 3],
    #[serde(default)]
    pub mode: Mode,
    /// Border pixel value for `letterbox`.
    #[serde(default)]
    pub pad: u8,
}

/// `"detect"` in a pipeline spec. Defaults are PaddleOCR's (`rapidocr_onnxruntime/config.yaml`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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

impl TextDetection {
    /// The models this stage runs (newest versions).
    pub fn models(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.model.as_str()).chain(self.angle_model.as_deref())
    }
}

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

/// A saved pipeline: `GET /api/pipelines/{name}`, and the answer of `PUT`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PipelineView {
    pub name: String,
    pub spec: PipelineSpec,
    /// Unix seconds.
    pub created_at: i64,
    /// Unix seconds.
    pub updated_at: i64,
}

/// `GET /api/pipelines`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PipelineList {
    pub pipelines: Vec<PipelineView>,
}

/// `DELETE /api/pipelines/{name}`: the name deleted.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PipelineDeleted {
    pub deleted: String,
}

/// `POST /api/pipelines/{name}/run` when the pipeline ends in tensors (a last post-plugin's
/// JSON or bytes are the answer as they are).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PipelineRun {
    pub pipeline: String,
    pub outputs: Vec<RunOutput>,
}

/// One output tensor of a run, as KServe JSON.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RunOutput {
    pub name: String,
    /// `FP32`, `BYTES`, ...
    pub datatype: String,
    pub shape: Vec<i64>,
    /// The elements, flat, as KServe JSON writes them for the datatype.
    pub data: Value,
}

/// The answer of a pipeline with a `detect` stage (text detection): the image's size and each
/// region found, in reading order, with what the rest of the pipeline made of its crop.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DetectedRegions {
    pub width: u64,
    pub height: u64,
    pub regions: Vec<DetectedRegion>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DetectedRegion {
    /// `[x1, y1, x2, y2]` in the image's pixels.
    #[serde(rename = "box")]
    pub bounds: [f64; 4],
    /// Mean probability of the detector's map inside the box.
    pub score: f64,
    /// 0 or 180: how the crop was turned upright.
    pub angle: u16,
    /// The orientation classifier's probability for `angle` (`null` without one).
    pub angle_confidence: Option<f64>,
    /// The last post-plugin's JSON for the crop, or its output tensors as [`RunOutput`]s.
    pub output: Value,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_saved_pipeline_keeps_its_shape() {
        let saved = json!({
            "name": "ocr",
            "spec": {
                "pre": ["image-decode"],
                "preprocess": {"input": "rgb", "output": "x", "width": 224, "height": 224,
                    "mean": [0.0, 0.0, 0.0], "std": [1.0, 1.0, 1.0], "mode": "center_crop", "pad": 0},
                "detect": {"model": "det", "angle_model": "cls", "max_side": 960, "threshold": 0.5,
                    "box_threshold": 0.5, "unclip_ratio": 1.5, "iou_threshold": 0.25,
                    "max_regions": 100, "angle_threshold": 0.75},
                "model": "rec", "model_version": 2, "model_outputs": ["logits"],
                "post": ["ctc-decode@0.1.0"], "parameters": {"top_k": "5"}
            },
            "created_at": 1, "updated_at": 2,
        });
        let parsed: PipelineView = serde_json::from_value(saved.clone()).unwrap();
        assert_eq!(
            parsed.spec.preprocess.as_ref().unwrap().mode,
            Mode::CenterCrop
        );
        assert_eq!(serde_json::to_value(&parsed).unwrap(), saved);
        let list = json!({"pipelines": [saved]});
        let parsed: PipelineList = serde_json::from_value(list.clone()).unwrap();
        assert_eq!(serde_json::to_value(&parsed).unwrap(), list);
    }

    #[test]
    fn a_spec_leaves_out_what_was_not_given_and_fills_in_defaults() {
        let spec: PipelineSpec =
            serde_json::from_value(json!({"model": "m", "detect": {"model": "d"}})).unwrap();
        let detect = spec.detect.as_ref().unwrap();
        assert_eq!((detect.max_side, detect.max_regions), (960, 100));
        assert_eq!(detect.models().collect::<Vec<_>>(), ["d"]);
        let written = serde_json::to_value(&spec).unwrap();
        assert_eq!(written["pre"], json!([]));
        for absent in ["preprocess", "model_version", "model_outputs", "parameters"] {
            assert!(written.get(absent).is_none(), "{absent} in {written}");
        }
        assert!(serde_json::from_value::<PipelineSpec>(json!({"model": "m", "prep": []})).is_err());
    }

    #[test]
    fn a_run_and_a_delete_keep_their_shape() {
        let run = json!({"pipeline": "p", "outputs": [
            {"name": "y", "datatype": "FP32", "shape": [1, 2], "data": [0.5, 1.0]}]});
        let parsed: PipelineRun = serde_json::from_value(run.clone()).unwrap();
        assert_eq!(serde_json::to_value(&parsed).unwrap(), run);
        let deleted = json!({"deleted": "p"});
        let parsed: PipelineDeleted = serde_json::from_value(deleted.clone()).unwrap();
        assert_eq!(serde_json::to_value(&parsed).unwrap(), deleted);
    }
}
