//! A pipeline's text-detection stage (`"detect"`): between the pre-plugins and the model, a
//! detector finds the text regions of the decoded image, an optional angle classifier turns
//! upside-down ones, and the rest of the pipeline (native pre-op → model → post-plugins) then
//! runs once per region, concurrently, so the engine's dynamic batcher batches the lines. The
//! answer lists the regions in reading order with each one's box, angle and output.
//!
//! The models are PaddleOCR's (as `rapidocr-onnxruntime` ships them): a DB detector, FP32
//! [1, 3, H, W] → probability map [1, 1, H, W]; a 0°/180° classifier, FP32 [N, 3, 48, 192] →
//! [N, 2] softmax. Both take pixels normalised as `(p - 127.5) / 127.5`.

use super::target::StageModel;
use crate::error::{ApiError, ApiResult};
use crate::pipelines::spec::{TextDetection, STRIDE};
use crate::pipelines::text_regions::{self, MapReading, Region, RgbImage};
use crate::state::AppState;
use futures_util::future::try_join_all;
use infergate_engine::kernels::nms::{Candidate, NmsSpec};
use infergate_engine::preprocess::{Mode, ResizeNormalize};
use infergate_engine::{DataType, InferOptions, Tensor, TensorData};
use infergate_store::models::ModelRecord;

/// The angle classifier's input size (PaddleOCR's `cls_image_shape`).
const ANGLE_WIDTH: usize = 192;
const ANGLE_HEIGHT: usize = 48;

/// One region found, with the pixels the rest of the pipeline reads.
pub struct FoundRegion {
    pub region: Region,
    /// 0 or 180.
    pub angle: u16,
    /// The classifier's probability for `angle`; `None` without a classifier.
    pub angle_confidence: Option<f32>,
    /// UINT8 [h, w, 3], named like the image tensor it was cut from, upright.
    pub crop: Tensor,
}

/// The image and the text regions in it, in reading order.
pub struct Detected {
    pub width: usize,
    pub height: usize,
    pub regions: Vec<FoundRegion>,
    /// The versions of the detector and the angle classifier that ran.
    pub models: Vec<StageModel>,
}

fn image_of(tensors: Vec<Tensor>) -> ApiResult<(String, RgbImage)> {
    let source = tensors.into_iter().next();
    match source {
        Some(Tensor {
            name,
            datatype: DataType::Uint8,
            shape,
            data: TensorData::Raw(pixels),
        }) => match shape.as_slice() {
            &[h, w, 3] if h > 0 && w > 0 && pixels.len() as i64 == h * w * 3 => Ok((
                name,
                RgbImage {
                    width: w as usize,
                    height: h as usize,
                    pixels,
                },
            )),
            _ => Err(ApiError::bad_request(format!(
                "text detection needs one RGB8 image [H, W, 3] from the pre-plugins; tensor '{name}' is {shape:?}"
            ))),
        },
        Some(t) => Err(ApiError::bad_request(format!(
            "text detection needs one UINT8 RGB image from the pre-plugins; got '{}' {} {:?}",
            t.name, t.datatype, t.shape
        ))),
        None => Err(ApiError::bad_request(
            "text detection needs an image from the pre-plugins; they returned nothing",
        )),
    }
}

fn to_tensor(name: &str, image: RgbImage) -> Tensor {
    Tensor {
        name: name.to_string(),
        datatype: DataType::Uint8,
        shape: vec![image.height as i64, image.width as i64, 3],
        data: TensorData::Raw(image.pixels),
    }
}

/// The detector's input size: the longer side at most `max_side`, both sides rounded to the
/// stride (at least one stride).
fn detector_size(width: usize, height: usize, max_side: usize) -> (usize, usize) {
    let scale = (max_side as f64 / width.max(height) as f64).min(1.0);
    let round = |side: usize| {
        let scaled = (side as f64 * scale / STRIDE as f64).round() as usize;
        scaled.max(1) * STRIDE
    };
    (round(width), round(height))
}

/// PaddleOCR's pixel normalisation, `(p - 127.5) / 127.5`, into the model's first input.
fn normalize_for(
    record: &ModelRecord,
    width: usize,
    height: usize,
    mode: Mode,
) -> ApiResult<ResizeNormalize> {
    let input =
        record.signature.inputs.first().ok_or_else(|| {
            ApiError::bad_request(format!("model '{}' has no inputs", record.name))
        })?;
    Ok(ResizeNormalize {
        input: None,
        output: input.name.clone(),
        width,
        height,
        mean: [127.5; 3],
        std: [127.5; 3],
        mode,
        pad: 255,
    })
}

/// Runs `record` on one image resized by `pre` (where the model runs); its first output as FP32 values with shape.
async fn run_model(
    state: &AppState,
    record: &ModelRecord,
    pre: ResizeNormalize,
    image: Tensor,
    options: InferOptions,
) -> ApiResult<(Vec<f32>, Vec<i64>)> {
    // The resize goes with the model (to its worker when it runs on one).
    let mut outputs =
        super::backend::run_stage(state, record, vec![image], Some(&pre), Vec::new(), options)
            .await?;
    let Some(first) = outputs.drain(..).next() else {
        return Err(ApiError::internal(format!(
            "model '{}' returned no outputs",
            record.name
        )));
    };
    let values = first.to_f32().ok_or_else(|| {
        ApiError::bad_request(format!(
            "model '{}' answers {} '{}'; text detection needs FP32",
            record.name, first.datatype, first.name
        ))
    })?;
    Ok((values, first.shape))
}

/// Mid-gray: 0 after PaddleOCR's normalisation, what its recogniser is fed as padding.
const NEUTRAL: u8 = 128;

/// Finds the text regions of the image the pre-plugins produced (the first tensor). With
/// `reader_aspect` (the width/height of the recogniser's input, when the pipeline letterboxes
/// into it), each region is padded on the right to that aspect so that it is read
/// left-aligned, as PaddleOCR reads it.
pub async fn detect(
    state: &AppState,
    stage: &TextDetection,
    tensors: Vec<Tensor>,
    reader_aspect: Option<f32>,
    options: InferOptions,
) -> ApiResult<Detected> {
    let (name, image) = image_of(tensors)?;
    let detector = state.catalog().resolve(&stage.model, None)?;
    let classifier = match &stage.angle_model {
        Some(m) => Some(state.catalog().resolve(m, None)?),
        None => None,
    };
    let (width, height) = (image.width, image.height);

    let (map_w, map_h) = detector_size(width, height, stage.max_side);
    let pre = normalize_for(&detector, map_w, map_h, Mode::Stretch)?;
    let (map, shape) = run_model(
        state,
        &detector,
        pre,
        to_tensor(&name, image.clone()),
        options,
    )
    .await?;
    let (out_h, out_w) = match shape.as_slice() {
        &[1, 1, h, w] if (h * w) as usize == map.len() => (h as usize, w as usize),
        _ => {
            return Err(ApiError::bad_request(format!(
                "detection model '{}' answered shape {shape:?}; a probability map [1, 1, H, W] is needed",
                detector.name
            )))
        }
    };
    let reading = MapReading {
        threshold: stage.threshold,
        unclip_ratio: stage.unclip_ratio,
        max_candidates: 1000,
    };
    let ops = state.ops().clone();
    let (iou, score, max) = (stage.iou_threshold, stage.box_threshold, stage.max_regions);
    let regions = tokio::task::spawn_blocking(move || -> ApiResult<Vec<Region>> {
        let candidates =
            text_regions::regions_from_map(&map, out_w, out_h, width, height, &reading);
        if candidates.is_empty() {
            return Ok(candidates);
        }
        let boxes: Vec<Candidate> = candidates
            .iter()
            .map(|r| Candidate {
                x1: r.x1,
                y1: r.y1,
                x2: r.x2,
                y2: r.y2,
                score: r.score,
                class: 0,
            })
            .collect();
        let spec = NmsSpec {
            iou_threshold: iou,
            score_threshold: score,
            max_detections: max as usize,
        };
        let kept = ops
            .nms(&boxes, boxes.len(), &spec)
            .map_err(|e| ApiError::internal(format!("text region suppression failed: {e}")))?;
        let kept = kept.into_iter().next().unwrap_or_default();
        Ok(text_regions::reading_order(
            kept.into_iter().map(|i| candidates[i as usize]).collect(),
        ))
    })
    .await
    .map_err(|e| ApiError::internal(format!("text region task failed: {e}")))??;

    let crops = regions
        .into_iter()
        .filter_map(|r| text_regions::crop(&image, &r).map(|c| (r, c)));
    let found = try_join_all(crops.map(|(region, crop)| {
        let classifier = classifier.as_deref();
        let name = name.as_str();
        async move {
            let (crop, angle, angle_confidence) =
                upright(state, stage, classifier, name, crop, options).await?;
            let crop = match reader_aspect {
                Some(aspect) => text_regions::pad_right_to_aspect(crop, aspect, NEUTRAL),
                None => crop,
            };
            Ok::<_, ApiError>(FoundRegion {
                region,
                angle,
                angle_confidence,
                crop: to_tensor(name, crop),
            })
        }
    }))
    .await?;
    let mut models = vec![StageModel::of("detect", &detector)];
    models.extend(classifier.map(|c| StageModel::of("angle", &c)));
    Ok(Detected {
        width,
        height,
        regions: found,
        models,
    })
}

/// Classifies a region's angle and turns it upright when the classifier is sure enough:
/// the upright pixels, the angle (0 or 180) and the classifier's probability for it.
async fn upright(
    state: &AppState,
    stage: &TextDetection,
    classifier: Option<&ModelRecord>,
    name: &str,
    crop: RgbImage,
    options: InferOptions,
) -> ApiResult<(RgbImage, u16, Option<f32>)> {
    let Some(classifier) = classifier else {
        return Ok((crop, 0, None));
    };
    let pre = normalize_for(classifier, ANGLE_WIDTH, ANGLE_HEIGHT, Mode::Letterbox)?;
    let (probs, _) = run_model(
        state,
        classifier,
        pre,
        to_tensor(name, crop.clone()),
        options,
    )
    .await?;
    let &[up, down] = probs.as_slice() else {
        return Err(ApiError::bad_request(format!(
            "angle model '{}' answered {} values for one image; [1, 2] (0°, 180°) is needed",
            classifier.name,
            probs.len()
        )));
    };
    Ok(if down > stage.angle_threshold {
        (text_regions::rotate_180(&crop), 180, Some(down))
    } else {
        (crop, 0, Some(up))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detector_sides_are_stride_multiples_within_max_side() {
        assert_eq!(detector_size(420, 170, 960), (416, 160));
        assert_eq!(detector_size(3000, 1000, 960), (960, 320));
        assert_eq!(detector_size(10, 5, 960), (32, 32));
    }
}
