//! The native pre-op: fused resize + mean/std normalize + HWC RGB8 → NCHW f32 (kernels crate;
//! CUDA when present, else the CPU fast path). A pipeline names it between its pre-plugins and
//! the model (a decode plugin hands over RGB8 pixels); a model's config names it
//! (`"infergate": {"preprocess": {...}}`) so clients can send UINT8 images to the model itself.

use crate::error::{EngineError, Result};
use crate::signature::ModelSignature;
use crate::tensor::{DataType, Tensor, TensorData};
use infergate_kernels::preprocess::{ImageU8, PreprocessSpec, ResizeMode};
use infergate_kernels::Ops;

/// The pre-op's JSON (`"preprocess"` in a pipeline spec or a model config) is shared with the
/// dashboard; its checks and its run are here.
pub use infergate_api_types::pipelines::{Mode, ResizeNormalize};

/// What the engine does with a [`ResizeNormalize`]: check it, and run it on tensors.
pub trait ResizeNormalizeExt {
    /// Checks sizes, mean and std; the message says what is wrong (callers say where).
    fn validate(&self) -> std::result::Result<(), String>;
    /// Checks that `output` is an FP32 image input [N, 3, height, width] of the model.
    fn validate_for(&self, signature: &ModelSignature) -> Result<()>;
    /// Whether a request to a model whose config names this pre-op sent raw pixels for it
    /// (UINT8 under its name) rather than the model's input itself.
    fn wanted_by(&self, tensors: &[Tensor]) -> bool;
    /// For a model whose config names the pre-op: converts the UINT8 tensor named
    /// [`ResizeNormalize::input`] (or `output`) into the model input. CPU-bound.
    fn apply_for_model(&self, ops: &Ops, tensors: Vec<Tensor>) -> Result<Vec<Tensor>>;
    /// Replaces the RGB8 tensor among `tensors` by the model input. CPU-bound: call it on a
    /// blocking thread.
    fn apply(&self, ops: &Ops, tensors: Vec<Tensor>) -> Result<Vec<Tensor>>;
}

impl ResizeNormalizeExt for ResizeNormalize {
    fn validate(&self) -> std::result::Result<(), String> {
        let bad = |m: String| Err(format!("preprocess: {m}"));
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

    fn validate_for(&self, signature: &ModelSignature) -> Result<()> {
        let bad = |m: String| {
            Err(EngineError::InvalidConfig(format!(
                "infergate.preprocess.output: {m}"
            )))
        };
        let Some(spec) = signature.input(&self.output) else {
            return bad(format!("the model has no input '{}'", self.output));
        };
        let fits = |got: i64, want: usize| got < 0 || got == want as i64;
        let ok = spec.datatype == DataType::Fp32
            && matches!(spec.shape.as_slice(), [_, c, h, w]
                if fits(*c, 3) && fits(*h, self.height) && fits(*w, self.width));
        if !ok {
            return bad(format!(
                "input '{}' is {} {:?}; FP32 [N, 3, {}, {}] needed",
                self.output, spec.datatype, spec.shape, self.height, self.width
            ));
        }
        Ok(())
    }

    fn wanted_by(&self, tensors: &[Tensor]) -> bool {
        let name = model_input_name(self);
        tensors
            .iter()
            .any(|t| t.name == name && t.datatype == DataType::Uint8)
    }

    fn apply_for_model(&self, ops: &Ops, tensors: Vec<Tensor>) -> Result<Vec<Tensor>> {
        let name = model_input_name(self);
        let index = tensors
            .iter()
            .position(|t| t.name == name && t.datatype == DataType::Uint8)
            .ok_or_else(|| {
                EngineError::InvalidInput(format!("preprocess: no UINT8 tensor named '{name}'"))
            })?;
        convert(self, ops, tensors, index)
    }

    fn apply(&self, ops: &Ops, tensors: Vec<Tensor>) -> Result<Vec<Tensor>> {
        let index = match &self.input {
            Some(name) => tensors
                .iter()
                .position(|t| &t.name == name)
                .ok_or_else(|| {
                    EngineError::InvalidInput(format!(
                        "preprocess: no tensor named '{name}' to resize"
                    ))
                })?,
            None if tensors.is_empty() => {
                return Err(EngineError::InvalidInput(
                    "preprocess: no tensor to resize".into(),
                ))
            }
            None => 0,
        };
        convert(self, ops, tensors, index)
    }
}

/// The kernels' form of the pre-op.
fn kernel_spec(op: &ResizeNormalize) -> PreprocessSpec {
    PreprocessSpec {
        width: op.width,
        height: op.height,
        mean: op.mean,
        std: op.std,
        mode: match op.mode {
            Mode::Stretch => ResizeMode::Stretch,
            Mode::Letterbox => ResizeMode::Letterbox { pad: op.pad },
            Mode::CenterCrop => ResizeMode::CenterCrop,
        },
    }
}

/// The name of the raw-pixel tensor a model's clients send: `input`, else `output`.
fn model_input_name(op: &ResizeNormalize) -> &str {
    op.input.as_deref().unwrap_or(&op.output)
}

fn convert(
    op: &ResizeNormalize,
    ops: &Ops,
    mut tensors: Vec<Tensor>,
    index: usize,
) -> Result<Vec<Tensor>> {
    let source = tensors.remove(index);
    let (batch, height, width) = match (source.datatype, source.shape.as_slice()) {
        (DataType::Uint8, [h, w, 3]) => (1, *h, *w),
        (DataType::Uint8, [n, h, w, 3]) => (*n, *h, *w),
        _ => {
            return Err(EngineError::InvalidInput(format!(
                "preprocess: tensor '{}' must be UINT8 [H, W, 3] or [N, H, W, 3] RGB, got {} {:?}",
                source.name, source.datatype, source.shape
            )))
        }
    };
    let TensorData::Raw(pixels) = &source.data else {
        return Err(EngineError::InvalidInput(format!(
            "preprocess: tensor '{}' has no pixel data",
            source.name
        )));
    };
    let (batch, height, width) = (batch as usize, height as usize, width as usize);
    let per_image = height * width * 3;
    if batch == 0 || per_image == 0 || pixels.len() != batch * per_image {
        return Err(EngineError::InvalidInput(format!(
            "preprocess: tensor '{}' holds {} bytes, not {batch}×{height}×{width}×3",
            source.name,
            pixels.len()
        )));
    }
    let images = pixels
        .chunks_exact(per_image)
        .map(|chunk| ImageU8::new(chunk, width, height))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| EngineError::InvalidInput(format!("preprocess: {e}")))?;
    let spec = kernel_spec(op);
    let mut out = vec![0f32; batch * spec.output_len_per_image()];
    ops.resize_normalize(&images, &spec, &mut out)
        .map_err(|e| EngineError::Internal(format!("preprocess failed: {e}")))?;
    let data: Vec<u8> = out.iter().flat_map(|v| v.to_le_bytes()).collect();
    tensors.insert(
        index,
        Tensor {
            name: op.output.clone(),
            datatype: DataType::Fp32,
            shape: vec![batch as i64, 3, op.height as i64, op.width as i64],
            data: TensorData::Raw(data),
        },
    );
    Ok(tensors)
}
