//! The engine's native pre-op a pipeline can name between its pre-plugins and the model: fused
//! resize + mean/std normalize + HWC RGB8 → NCHW f32 (kernels crate; CUDA when present, else
//! the CPU fast path). A decode plugin hands over RGB8 pixels; this makes them a model input.

use crate::error::{ApiError, ApiResult};
use infergate_engine::kernels::preprocess::{ImageU8, PreprocessSpec, ResizeMode};
use infergate_engine::kernels::Ops;
use infergate_engine::{DataType, Tensor, TensorData};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    #[default]
    Stretch,
    Letterbox,
    CenterCrop,
}

/// `"preprocess"` in a pipeline spec.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResizeNormalize {
    /// Name of the RGB8 tensor ([H, W, 3] or [N, H, W, 3]) to convert; the first tensor when
    /// absent.
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

impl ResizeNormalize {
    pub fn validate(&self) -> ApiResult<()> {
        let bad = |m: String| {
            Err(ApiError::bad_request(format!(
                "invalid pipeline preprocess: {m}"
            )))
        };
        if self.width == 0 || self.height == 0 || self.width > 8192 || self.height > 8192 {
            return bad(format!(
                "{}x{} is not a usable size (1..8192)",
                self.width, self.height
            ));
        }
        if self.std.iter().any(|s| !s.is_finite() || *s == 0.0)
            || self.mean.iter().any(|m| !m.is_finite())
        {
            return bad("mean must be finite and std finite and non-zero".into());
        }
        Ok(())
    }

    fn spec(&self) -> PreprocessSpec {
        PreprocessSpec {
            width: self.width,
            height: self.height,
            mean: self.mean,
            std: self.std,
            mode: match self.mode {
                Mode::Stretch => ResizeMode::Stretch,
                Mode::Letterbox => ResizeMode::Letterbox { pad: self.pad },
                Mode::CenterCrop => ResizeMode::CenterCrop,
            },
        }
    }

    /// Replaces the RGB8 tensor among `tensors` by the model input. CPU-bound: call it on a
    /// blocking thread.
    pub fn apply(&self, ops: &Ops, mut tensors: Vec<Tensor>) -> ApiResult<Vec<Tensor>> {
        let index = match &self.input {
            Some(name) => tensors
                .iter()
                .position(|t| &t.name == name)
                .ok_or_else(|| {
                    ApiError::bad_request(format!("preprocess: no tensor named '{name}' to resize"))
                })?,
            None if tensors.is_empty() => {
                return Err(ApiError::bad_request("preprocess: no tensor to resize"))
            }
            None => 0,
        };
        let source = tensors.remove(index);
        let (batch, height, width) = match (source.datatype, source.shape.as_slice()) {
            (DataType::Uint8, [h, w, 3]) => (1, *h, *w),
            (DataType::Uint8, [n, h, w, 3]) => (*n, *h, *w),
            _ => {
                return Err(ApiError::bad_request(format!(
                "preprocess: tensor '{}' must be UINT8 [H, W, 3] or [N, H, W, 3] RGB, got {} {:?}",
                source.name, source.datatype, source.shape
            )))
            }
        };
        let TensorData::Raw(pixels) = &source.data else {
            return Err(ApiError::bad_request(format!(
                "preprocess: tensor '{}' has no pixel data",
                source.name
            )));
        };
        let (batch, height, width) = (batch as usize, height as usize, width as usize);
        let per_image = height * width * 3;
        if batch == 0 || per_image == 0 || pixels.len() != batch * per_image {
            return Err(ApiError::bad_request(format!(
                "preprocess: tensor '{}' holds {} bytes, not {batch}×{height}×{width}×3",
                source.name,
                pixels.len()
            )));
        }
        let images = pixels
            .chunks_exact(per_image)
            .map(|chunk| ImageU8::new(chunk, width, height))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| ApiError::bad_request(format!("preprocess: {e}")))?;
        let spec = self.spec();
        let mut out = vec![0f32; batch * spec.output_len_per_image()];
        ops.resize_normalize(&images, &spec, &mut out)
            .map_err(|e| ApiError::internal(format!("preprocess failed: {e}")))?;
        let data: Vec<u8> = out.iter().flat_map(|v| v.to_le_bytes()).collect();
        tensors.insert(
            index,
            Tensor {
                name: self.output.clone(),
                datatype: DataType::Fp32,
                shape: vec![batch as i64, 3, self.height as i64, self.width as i64],
                data: TensorData::Raw(data),
            },
        );
        Ok(tensors)
    }
}
