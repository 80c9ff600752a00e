//! The public inputs of the op (images, output spec, placement) and their
//! validation, shared by the fast path, the reference and the GPU.

use crate::error::{Error, Result};

/// Interleaved RGB channels per pixel; the only layout the op accepts.
pub const CHANNELS: usize = 3;

/// A borrowed RGB8 image, rows packed (`data.len() == width * height * 3`).
#[derive(Clone, Copy, Debug)]
pub struct ImageU8<'a> {
    pub data: &'a [u8],
    pub width: usize,
    pub height: usize,
}

impl<'a> ImageU8<'a> {
    pub fn new(data: &'a [u8], width: usize, height: usize) -> Result<Self> {
        let image = Self {
            data,
            width,
            height,
        };
        image.validate()?;
        Ok(image)
    }

    fn validate(&self) -> Result<()> {
        if self.width == 0 || self.height == 0 {
            return Err(Error::input(format!(
                "image is {}x{}: both sides must be > 0",
                self.width, self.height
            )));
        }
        // GPU descriptors carry sides as i32.
        if self.width > i32::MAX as usize / CHANNELS || self.height > i32::MAX as usize {
            return Err(Error::input(format!(
                "image is {}x{}: too large",
                self.width, self.height
            )));
        }
        let expected = self.width * self.height * CHANNELS;
        if self.data.len() != expected {
            return Err(Error::input(format!(
                "image {}x{} RGB8 needs {expected} bytes, got {}",
                self.width,
                self.height,
                self.data.len()
            )));
        }
        Ok(())
    }

    #[inline]
    pub(super) fn row(&self, y: usize) -> &'a [u8] {
        let stride = self.width * CHANNELS;
        &self.data[y * stride..(y + 1) * stride]
    }
}

/// Where the resized image goes in the output tensor.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ResizeMode {
    Stretch,
    /// Keep the aspect ratio and fill the border with `pad` (a 0‥255 pixel
    /// value, normalised with each channel's mean/std; YOLO uses 114).
    Letterbox {
        pad: u8,
    },
    CenterCrop,
}

/// Output geometry and normalisation; `mean`/`std` are in 0‥255 units
/// (ImageNet: `mean = [123.675, 116.28, 103.53]`, `std = [58.395, 57.12, 57.375]`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PreprocessSpec {
    pub width: usize,
    pub height: usize,
    pub mean: [f32; CHANNELS],
    pub std: [f32; CHANNELS],
    pub mode: ResizeMode,
}

impl PreprocessSpec {
    /// Elements one image occupies in the NCHW output.
    pub fn output_len_per_image(&self) -> usize {
        CHANNELS * self.width * self.height
    }

    fn validate(&self) -> Result<()> {
        if self.width == 0 || self.height == 0 {
            return Err(Error::input(format!(
                "output is {}x{}: both sides must be > 0",
                self.width, self.height
            )));
        }
        if self.width > i32::MAX as usize || self.height > i32::MAX as usize {
            return Err(Error::input("output too large"));
        }
        for c in 0..CHANNELS {
            if !self.mean[c].is_finite() || !self.std[c].is_finite() || self.std[c] == 0.0 {
                return Err(Error::input(format!(
                    "channel {c}: mean {} / std {} must be finite and std non-zero",
                    self.mean[c], self.std[c]
                )));
            }
        }
        Ok(())
    }

    /// `1 / std[c]`, computed once in f32 so every implementation multiplies
    /// by the same number.
    pub(crate) fn inv_std(&self) -> [f32; CHANNELS] {
        self.std.map(|s| 1.0 / s)
    }

    /// The normalised pad value per channel (zeros outside letterbox mode,
    /// where no pixel is padding).
    pub(crate) fn pad_normalized(&self) -> [f32; CHANNELS] {
        let inv_std = self.inv_std();
        match self.mode {
            ResizeMode::Letterbox { pad } => {
                std::array::from_fn(|c| (pad as f32 - self.mean[c]) * inv_std[c])
            }
            _ => [0.0; CHANNELS],
        }
    }
}

pub(crate) fn check_batch(
    images: &[ImageU8<'_>],
    spec: &PreprocessSpec,
    out: &[f32],
) -> Result<()> {
    spec.validate()?;
    for (n, image) in images.iter().enumerate() {
        image
            .validate()
            .map_err(|e| Error::input(format!("image {n}: {e}")))?;
    }
    let expected = images.len() * spec.output_len_per_image();
    if out.len() != expected {
        return Err(Error::input(format!(
            "output holds {} f32, batch of {} at 3x{}x{} needs {expected}",
            out.len(),
            images.len(),
            spec.height,
            spec.width
        )));
    }
    Ok(())
}
