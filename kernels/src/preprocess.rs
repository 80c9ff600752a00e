//! Fused resize + normalize + HWC u8 → NCHW f32, batched.
//!
//! # Sampling convention
//!
//! Source pixel `i` covers the interval `[i, i + 1)`; its centre is `i + 0.5`
//! (the half-pixel convention of OpenCV, PIL and `fast_image_resize`).
//! Destination pixel `x` (inside the resized region that starts at
//! `dst_start`) maps to the source coordinate
//!
//! ```text
//! centre(x) = offset + (x - dst_start + 0.5) * ratio        ratio = source span / destination span
//! ```
//!
//! and takes the bilinear (triangle) filter of PIL's `BILINEAR`, widened when
//! downscaling so that every source pixel contributes (antialiasing):
//!
//! ```text
//! support = max(ratio, 1)
//! taps    = i in [max(0, floor(centre - support + 0.5)), min(len, floor(centre + support + 0.5)))
//! w_i     = max(0, 1 - |(i + 0.5 - centre) / support|),  normalised to sum 1 over the taps
//! ```
//!
//! When upscaling this is exactly the two-tap half-pixel bilinear of OpenCV's
//! `INTER_LINEAR` (edge pixels replicated); when downscaling it is PIL's
//! antialiased bilinear, which is what `fast_image_resize`'s `Bilinear`
//! convolution computes too. Point-sampled bilinear would alias badly at the
//! usual 1920→224 (8.6×) reduction. The filter is separable:
//! `value = Σ_j wy_j Σ_i wx_i src[j][i][c]`, then
//! `out[n][c][y][x] = (value - mean[c]) * (1 / std[c])`, with `mean`/`std` in
//! 0‥255 pixel units.
//!
//! # Placement ([`ResizeMode`])
//!
//! - `Stretch`: the whole source fills the whole output (aspect not kept).
//! - `Letterbox`: scale `s = min(W/w, H/h)`, resized size `round(w·s) × round(h·s)`,
//!   placed at `((W - nw) / 2, (H - nh) / 2)` (integer division); the border is
//!   the pad value, normalised like a pixel.
//! - `CenterCrop`: scale `s = max(W/w, H/h)` so the output is covered; the
//!   centred source window `W/s × H/s` (fractional) is resampled. Filter taps
//!   may reach past the window into real pixels outside it, as PIL does with
//!   a box.
//!
//! The CPU fast path, the scalar reference ([`resize_normalize_reference`],
//! f64 throughout) and the CUDA kernel (`cuda/preprocess.cu`, f32) all
//! implement this formula; they differ only in rounding.
//!
//! On CPUs with AVX-512BW the fast path's vertical pass is fixed point: the
//! vertical weights are rounded to i16 at a power-of-two `scale` (2^17 at
//! 1080→224, 2^14 when a weight is 1), corrected so each row's integer
//! weights sum to exactly `scale` (flat areas stay exact), and the u8 × i16
//! sums are exact in i32. That moves a value by at most
//! `127.5 · (taps - 1) / scale` levels: 0.009 at 1080→224, 0.008 when
//! upscaling, under 0.02 for any bilinear reduction up to 500× (the f32
//! passes used elsewhere stay near 1e-5).

use rayon::prelude::*;

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

    fn row(&self, y: usize) -> &'a [u8] {
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

/// One axis of the destination → source mapping (see the module docs).
/// Parameters are f32 because the CUDA kernel receives them as f32; every
/// implementation starts from these same numbers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct AxisMap {
    /// First destination index inside the resized region.
    pub dst_start: usize,
    /// Number of destination indices inside the resized region.
    pub dst_len: usize,
    pub src_len: usize,
    /// Source span per destination pixel.
    pub ratio: f32,
    /// Source coordinate of the left edge of destination index `dst_start`.
    pub offset: f32,
}

/// Both axes of one image's mapping.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Geometry {
    pub x: AxisMap,
    pub y: AxisMap,
}

impl Geometry {
    pub(crate) fn new(image: &ImageU8<'_>, spec: &PreprocessSpec) -> Self {
        let (w, h) = (image.width as f64, image.height as f64);
        let (out_w, out_h) = (spec.width as f64, spec.height as f64);
        let axis =
            |dst_start: usize, dst_len: usize, src_len: usize, span: f64, offset: f64| AxisMap {
                dst_start,
                dst_len,
                src_len,
                ratio: (span / dst_len as f64) as f32,
                offset: offset as f32,
            };
        match spec.mode {
            ResizeMode::Stretch => Geometry {
                x: axis(0, spec.width, image.width, w, 0.0),
                y: axis(0, spec.height, image.height, h, 0.0),
            },
            ResizeMode::Letterbox { .. } => {
                let scale = (out_w / w).min(out_h / h);
                let new_w = ((w * scale).round() as usize).clamp(1, spec.width);
                let new_h = ((h * scale).round() as usize).clamp(1, spec.height);
                Geometry {
                    x: axis((spec.width - new_w) / 2, new_w, image.width, w, 0.0),
                    y: axis((spec.height - new_h) / 2, new_h, image.height, h, 0.0),
                }
            }
            ResizeMode::CenterCrop => {
                let scale = (out_w / w).max(out_h / h);
                let (crop_w, crop_h) = (out_w / scale, out_h / scale);
                Geometry {
                    x: axis(0, spec.width, image.width, crop_w, (w - crop_w) / 2.0),
                    y: axis(0, spec.height, image.height, crop_h, (h - crop_h) / 2.0),
                }
            }
        }
    }
}

/// Filter taps of one destination index, in f64 (the reference's precision;
/// the fast path rounds the normalised weights to f32 once).
fn taps_f64(axis: &AxisMap, dst: usize) -> (usize, Vec<f64>) {
    let ratio = axis.ratio as f64;
    let centre = axis.offset as f64 + ((dst - axis.dst_start) as f64 + 0.5) * ratio;
    let support = ratio.max(1.0);
    let lo = ((centre - support + 0.5).floor().max(0.0) as usize).min(axis.src_len - 1);
    let hi = ((centre + support + 0.5).floor() as usize).clamp(lo + 1, axis.src_len);
    let mut weights: Vec<f64> = (lo..hi)
        .map(|i| (1.0 - ((i as f64 + 0.5 - centre) / support).abs()).max(0.0))
        .collect();
    let sum: f64 = weights.iter().sum();
    if sum > 0.0 {
        weights.iter_mut().for_each(|w| *w /= sum);
    } else {
        // Unreachable for valid geometry (the pixel under the centre always
        // has positive weight); nearest pixel keeps the output defined.
        weights.iter_mut().for_each(|w| *w = 0.0);
        weights[0] = 1.0;
    }
    (lo, weights)
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

/// Scalar reference: the module's formula evaluated per output element in
/// f64, rounded to f32 at the end. Slow; the yardstick for the other paths.
pub fn resize_normalize_reference(
    images: &[ImageU8<'_>],
    spec: &PreprocessSpec,
    out: &mut [f32],
) -> Result<()> {
    check_batch(images, spec, out)?;
    let inv_std = spec.inv_std();
    let pad = spec.pad_normalized();
    let plane = spec.width * spec.height;
    for (image, out) in images
        .iter()
        .zip(out.chunks_exact_mut(spec.output_len_per_image()))
    {
        let geo = Geometry::new(image, spec);
        for y in 0..spec.height {
            for x in 0..spec.width {
                let inside = (geo.y.dst_start..geo.y.dst_start + geo.y.dst_len).contains(&y)
                    && (geo.x.dst_start..geo.x.dst_start + geo.x.dst_len).contains(&x);
                for c in 0..CHANNELS {
                    out[c * plane + y * spec.width + x] = if inside {
                        let (ylo, wy) = taps_f64(&geo.y, y);
                        let (xlo, wx) = taps_f64(&geo.x, x);
                        let mut value = 0.0f64;
                        for (j, wyj) in wy.iter().enumerate() {
                            let row = image.row(ylo + j);
                            let mut acc = 0.0f64;
                            for (i, wxi) in wx.iter().enumerate() {
                                acc += wxi * row[(xlo + i) * CHANNELS + c] as f64;
                            }
                            value += wyj * acc;
                        }
                        ((value - spec.mean[c] as f64) * inv_std[c] as f64) as f32
                    } else {
                        pad[c]
                    };
                }
            }
        }
    }
    Ok(())
}

/// Precomputed taps of one axis for the fast path: `taps` weights per
/// destination index (zero-padded), starting at source index `starts[d]`.
struct AxisTaps {
    starts: Vec<usize>,
    weights: Vec<f32>,
    taps: usize,
}

impl AxisTaps {
    fn new(axis: &AxisMap) -> Self {
        let per_dst: Vec<(usize, Vec<f64>)> = (axis.dst_start..axis.dst_start + axis.dst_len)
            .map(|d| taps_f64(axis, d))
            .collect();
        let taps = per_dst.iter().map(|(_, w)| w.len()).max().unwrap_or(1);
        let mut starts = Vec::with_capacity(per_dst.len());
        let mut weights = vec![0.0f32; per_dst.len() * taps];
        for (d, (lo, w)) in per_dst.iter().enumerate() {
            // Shift windows that would run past the end left, with zero
            // weights, so every row of the table can be read as `taps` wide.
            let start = (*lo).min(axis.src_len.saturating_sub(taps));
            starts.push(start);
            for (k, wk) in w.iter().enumerate() {
                weights[d * taps + (lo - start) + k] = *wk as f32;
            }
        }
        AxisTaps {
            starts,
            weights,
            taps,
        }
    }

    fn get(&self, d: usize) -> (usize, &[f32]) {
        (
            self.starts[d],
            &self.weights[d * self.taps..(d + 1) * self.taps],
        )
    }

    /// Source index range any destination index reads.
    fn source_span(&self) -> (usize, usize) {
        let lo = self.starts.iter().copied().min().unwrap_or(0);
        let hi = self.starts.iter().map(|s| s + self.taps).max().unwrap_or(0);
        (lo, hi)
    }
}

/// The horizontal taps of [`AxisTaps`] laid out for RGBx lanes: tap `k`'s weight in lanes
/// `4k..4k+3` (once per channel) and 0 in lane `4k+3`, zero-padded to a multiple of
/// [`RGBX_LANES`]. The horizontal pass loads 12 interleaved floats (4 source pixels), spreads
/// them to 16 RGBx lanes with one permute, and multiply-accumulates against this; the four
/// pixel groups of the accumulator then fold to (R, G, B) with two adds. The lane `t % 3`
/// layout this replaced needed a scalar fold of 24 lanes per output pixel, which cost more
/// than all its multiply-adds.
struct RgbxTaps {
    /// Whole registers, so that no weight load straddles a cache line.
    weights: Vec<RgbxGroup>,
    stride: usize,
}

/// 16 weights on one 64-byte cache line.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct RgbxGroup([f32; RGBX_LANES]);

/// One AVX-512 register: 4 taps of RGBx.
const RGBX_LANES: usize = 16;

impl RgbxTaps {
    fn new(taps: &AxisTaps) -> Self {
        let stride = (taps.taps * 4).div_ceil(RGBX_LANES) * RGBX_LANES;
        let mut weights =
            vec![RgbxGroup([0.0; RGBX_LANES]); taps.starts.len() * stride / RGBX_LANES];
        for d in 0..taps.starts.len() {
            for (k, w) in taps.get(d).1.iter().enumerate() {
                for c in 0..CHANNELS {
                    let lane = d * stride + k * 4 + c;
                    weights[lane / RGBX_LANES].0[lane % RGBX_LANES] = *w;
                }
            }
        }
        Self { weights, stride }
    }

    /// The weights of destination indices `range`, `stride` floats each.
    fn weights(&self, range: std::ops::Range<usize>) -> &[f32] {
        let groups = &self.weights
            [range.start * self.stride / RGBX_LANES..range.end * self.stride / RGBX_LANES];
        // SAFETY: `RgbxGroup` is `repr(C)` around `[f32; 16]` and 64 bytes (no padding), so
        // `groups` is `16 * groups.len()` initialised, contiguous f32.
        unsafe {
            std::slice::from_raw_parts(groups.as_ptr().cast::<f32>(), groups.len() * RGBX_LANES)
        }
    }

    /// Interleaved floats the pass may read past a pixel's first tap (zero-weighted ones
    /// included): 3 per padded tap, plus the 4 a 16-float load of the last group overreads.
    fn reach(&self) -> usize {
        self.stride / 4 * CHANNELS + 4
    }
}

/// The horizontal taps of [`AxisTaps`] four to a 16-byte group, zero-padded to the groups of
/// [`RgbxTaps`]: `groups` groups per destination index. [`horizontal_block_avx512`]
/// broadcasts a group to all four 128-bit lanes with a load (`vbroadcastf32x4`, no shuffle
/// port) and spreads the source pixels channel-major to match (`R0 R1 R2 R3 | G0 … | B0 … |
/// unused`), so the table is a quarter of [`RgbxTaps`]' and stays in L1 beside the row
/// (the 72 KiB RGBx table at 1920→224 came from L2 for every output row).
struct QuadTaps {
    weights: Vec<TapQuad>,
    groups: usize,
}

/// Four taps' weights, 16-byte aligned so no broadcast load straddles a cache line.
#[derive(Clone, Copy)]
#[repr(C, align(16))]
struct TapQuad([f32; 4]);

impl QuadTaps {
    fn new(taps: &AxisTaps) -> Self {
        let groups = (taps.taps * 4).div_ceil(RGBX_LANES) * RGBX_LANES / RGBX_LANES;
        let mut weights = vec![TapQuad([0.0; 4]); taps.starts.len() * groups];
        for d in 0..taps.starts.len() {
            for (k, w) in taps.get(d).1.iter().enumerate() {
                weights[d * groups + k / 4].0[k % 4] = *w;
            }
        }
        Self { weights, groups }
    }

    /// The groups of destination indices `range`, `groups` each.
    fn weights(&self, range: std::ops::Range<usize>) -> &[TapQuad] {
        &self.weights[range.start * self.groups..range.end * self.groups]
    }
}

/// The vertical taps of [`AxisTaps`] in i16 fixed point, for the integer vertical pass.
///
/// Weights are `q_j = round(w_j * scale)` with `scale` the largest power of two that keeps
/// every `q_j` (after the adjustment below) in i16 and every row's `255 * Σ|q_j|` in i32; the
/// largest weight of each destination index then absorbs the rounding so that `Σ q_j` is
/// exactly `round(scale * Σ w_j)` (`scale` for normalised taps): a flat image stays exact
/// and the error of a sum is `|Σ (q_j / scale - w_j) * x_j| ≤ 127.5 * Σ |q_j / scale - w_j|`,
/// at most `127.5 * (taps - 1) / scale` levels. The non-zero taps of each destination index
/// are paired (rows `a`, `b` with weights packed as `q_a | q_b << 16`, the i16 pair layout
/// of `vpmaddwd`); an odd count pairs its last row with itself at weight 0.
struct FixedTaps {
    /// `(row a, row b, packed weights)`; destination `d` uses `pairs[offsets[d]..offsets[d + 1]]`.
    pairs: Vec<(usize, usize, i32)>,
    offsets: Vec<usize>,
    /// `1 / scale`, exact.
    inv_scale: f32,
}

impl FixedTaps {
    fn new(taps: &AxisTaps) -> Self {
        let rows = taps.starts.len();
        let row_weights = |d: usize| taps.get(d).1.iter().map(|w| *w as f64);
        let max_weight = taps
            .weights
            .iter()
            .fold(0.0f64, |m, w| m.max((*w as f64).abs()));
        let max_sum = (0..rows)
            .map(|d| row_weights(d).map(f64::abs).sum::<f64>())
            .fold(0.0f64, f64::max);
        // The adjustment moves one weight by at most `taps / 2`; keep room for it.
        let slack = taps.taps as f64;
        let shift = (0..=30)
            .rev()
            .find(|&s| {
                let scale = (1u64 << s) as f64;
                max_weight * scale + slack <= i16::MAX as f64
                    && 255.0 * (max_sum * scale + slack) < i32::MAX as f64
            })
            .unwrap_or(0);
        let scale = (1u64 << shift) as f64;
        let mut pairs = Vec::with_capacity(rows * taps.taps.div_ceil(2));
        let mut offsets = Vec::with_capacity(rows + 1);
        offsets.push(0);
        let mut q = Vec::with_capacity(taps.taps);
        for d in 0..rows {
            let (start, weights) = taps.get(d);
            q.clear();
            q.extend(weights.iter().map(|w| (*w as f64 * scale).round() as i32));
            let target = (row_weights(d).sum::<f64>() * scale).round() as i32;
            let error = target - q.iter().sum::<i32>();
            if let Some(largest) = (0..q.len()).max_by_key(|&j| q[j].abs()) {
                q[largest] += error;
            }
            let first = q.iter().position(|w| *w != 0).unwrap_or(0);
            let last = q.iter().rposition(|w| *w != 0).unwrap_or(0);
            for j in (first..=last).step_by(2) {
                let (b, q_b) = if j < last { (j + 1, q[j + 1]) } else { (j, 0) };
                let packed = (q[j] as u16 as u32 | (q_b as u16 as u32) << 16) as i32;
                pairs.push((start + j, start + b, packed));
            }
            offsets.push(pairs.len());
        }
        FixedTaps {
            pairs,
            offsets,
            inv_scale: (1.0 / scale) as f32,
        }
    }

    fn get(&self, d: usize) -> &[(usize, usize, i32)] {
        &self.pairs[self.offsets[d]..self.offsets[d + 1]]
    }
}

/// Everything one image needs for the fast path.
struct ImagePlan<'a> {
    image: ImageU8<'a>,
    geo: Geometry,
    x: AxisTaps,
    x_rgbx: RgbxTaps,
    x_quads: QuadTaps,
    y: AxisTaps,
    y_fixed: FixedTaps,
}

/// Output rows one rayon task fills; small enough to spread a single
/// 224-row image over the available cores.
const ROWS_PER_TASK: usize = 8;

/// CPU fast path: per output row, a vertical pass over contiguous source rows
/// into one interleaved f32 row (i16 fixed-point `vpmaddwd`/`vpdpwssd` on
/// pairs of rows with AVX-512BW, [`FixedTaps`]; u8 → f32 multiply-adds
/// otherwise), then a horizontal pass of multiply-adds against per-channel
/// repeated weights ([`RgbxTaps`]; 16 output pixels at a time with
/// AVX-512F against broadcast 4-tap groups, [`QuadTaps`]), writing the three
/// normalised planes. Compiled three times
/// (AVX-512F, AVX2+FMA, baseline), picked by runtime detection. Rows of all
/// images are spread over rayon's pool.
pub fn resize_normalize(
    images: &[ImageU8<'_>],
    spec: &PreprocessSpec,
    out: &mut [f32],
) -> Result<()> {
    check_batch(images, spec, out)?;
    let plans: Vec<ImagePlan<'_>> = images
        .iter()
        .map(|image| {
            let geo = Geometry::new(image, spec);
            let x = AxisTaps::new(&geo.x);
            let y = AxisTaps::new(&geo.y);
            ImagePlan {
                image: *image,
                geo,
                x_rgbx: RgbxTaps::new(&x),
                x_quads: QuadTaps::new(&x),
                x,
                y_fixed: FixedTaps::new(&y),
                y,
            }
        })
        .collect();
    let plane = spec.width * spec.height;
    let band = ROWS_PER_TASK * spec.width;
    let mut tasks = Vec::new();
    for (plan, image_out) in plans
        .iter()
        .zip(out.chunks_exact_mut(spec.output_len_per_image()))
    {
        let (r, rest) = image_out.split_at_mut(plane);
        let (g, b) = rest.split_at_mut(plane);
        for (index, ((r, g), b)) in r
            .chunks_mut(band)
            .zip(g.chunks_mut(band))
            .zip(b.chunks_mut(band))
            .enumerate()
        {
            tasks.push((plan, index * ROWS_PER_TASK, [r, g, b]));
        }
    }
    let norm = Norm {
        mean: spec.mean,
        inv_std: spec.inv_std(),
        pad: spec.pad_normalized(),
    };
    tasks
        .into_par_iter()
        .for_each_init(Vec::new, |scratch, (plan, y0, planes)| {
            fill_rows(plan, spec.width, y0, planes, &norm, scratch)
        });
    Ok(())
}

struct Norm {
    mean: [f32; CHANNELS],
    inv_std: [f32; CHANNELS],
    pad: [f32; CHANNELS],
}

/// Which vertical pass `fill_rows_body` runs.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Vertical {
    /// f32 multiply-adds ([`vertical_pass`]).
    F32,
    /// i16 fixed point, AVX-512BW ([`vertical_fixed_avx512bw`]).
    #[cfg(target_arch = "x86_64")]
    Avx512Bw,
    /// i16 fixed point, AVX-512 VBMI + VNNI ([`vertical_fixed_avx512vbmi`]).
    #[cfg(target_arch = "x86_64")]
    Avx512Vbmi,
}

impl Vertical {
    /// The fastest vertical pass this CPU runs.
    fn detect() -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512bw")
            {
                if std::arch::is_x86_feature_detected!("avx512vbmi")
                    && std::arch::is_x86_feature_detected!("avx512vnni")
                {
                    return Vertical::Avx512Vbmi;
                }
                return Vertical::Avx512Bw;
            }
        }
        Vertical::F32
    }
}

fn fill_rows(
    plan: &ImagePlan<'_>,
    width: usize,
    y0: usize,
    planes: [&mut [f32]; CHANNELS],
    norm: &Norm,
    scratch: &mut Vec<f32>,
) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU supports the features the function is compiled for, and
            // `Vertical::detect` only picks passes whose features it detected.
            unsafe { fill_rows_avx512(plan, width, y0, planes, norm, scratch, Vertical::detect()) };
            return;
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: the CPU supports the features the function is compiled for.
            unsafe { fill_rows_avx2_fma(plan, width, y0, planes, norm, scratch) };
            return;
        }
    }
    fill_rows_body::<false, false>(plan, width, y0, planes, norm, scratch, Vertical::F32);
}

/// Both passes at 16 lanes: fewer instructions for the same work.
///
/// # Safety
/// `vertical` must be [`Vertical::F32`] or a pass [`Vertical::detect`] returned.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn fill_rows_avx512(
    plan: &ImagePlan<'_>,
    width: usize,
    y0: usize,
    planes: [&mut [f32]; CHANNELS],
    norm: &Norm,
    scratch: &mut Vec<f32>,
    vertical: Vertical,
) {
    fill_rows_body::<true, true>(plan, width, y0, planes, norm, scratch, vertical);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn fill_rows_avx2_fma(
    plan: &ImagePlan<'_>,
    width: usize,
    y0: usize,
    planes: [&mut [f32]; CHANNELS],
    norm: &Norm,
    scratch: &mut Vec<f32>,
) {
    fill_rows_body::<true, false>(plan, width, y0, planes, norm, scratch, Vertical::F32);
}

/// `a * b + c`, fused only when `FMA` (compiled with the fma feature):
/// `mul_add` without hardware FMA is a slow library call.
#[inline(always)]
fn madd<const FMA: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FMA {
        a.mul_add(b, c)
    } else {
        a * b + c
    }
}

/// `FMA`: compiled with avx2+fma; `WIDE`: with avx512f too. `vertical` is
/// [`Vertical::F32`] or a pass the CPU supports.
#[inline(always)]
fn fill_rows_body<const FMA: bool, const WIDE: bool>(
    plan: &ImagePlan<'_>,
    width: usize,
    y0: usize,
    planes: [&mut [f32]; CHANNELS],
    norm: &Norm,
    scratch: &mut Vec<f32>,
    vertical: Vertical,
) {
    let [r, g, b] = planes;
    let rows = r.len() / width;
    let (gx, gy) = (&plan.geo.x, &plan.geo.y);
    let (src_lo, src_hi) = plan.x.source_span();
    let row_len = (src_hi - src_lo) * CHANNELS;
    // Room for the zero-weight taps past the last tap of the last pixel; stays zero.
    scratch.clear();
    scratch.resize(row_len + plan.x_rgbx.reach(), 0.0);
    let mut taps: Vec<(&[u8], f32)> = Vec::with_capacity(plan.y.taps);
    let mut pairs: Vec<(&[u8], &[u8], i32)> = Vec::with_capacity(plan.y.taps.div_ceil(2));
    let source = |row: usize| &plan.image.row(row)[src_lo * CHANNELS..src_hi * CHANNELS];
    for dy in 0..rows {
        let y = y0 + dy;
        let out_r = &mut r[dy * width..(dy + 1) * width];
        let out_g = &mut g[dy * width..(dy + 1) * width];
        let out_b = &mut b[dy * width..(dy + 1) * width];
        if !(gy.dst_start..gy.dst_start + gy.dst_len).contains(&y) {
            out_r.fill(norm.pad[0]);
            out_g.fill(norm.pad[1]);
            out_b.fill(norm.pad[2]);
            continue;
        }
        let out = &mut scratch[..row_len];
        if vertical == Vertical::F32 {
            let (start, wy) = plan.y.get(y - gy.dst_start);
            taps.clear();
            taps.extend(
                wy.iter()
                    .enumerate()
                    .filter(|(_, w)| **w != 0.0)
                    .map(|(j, w)| (source(start + j), *w)),
            );
            vertical_pass::<FMA>(&taps, out);
        } else {
            pairs.clear();
            pairs.extend(
                plan.y_fixed
                    .get(y - gy.dst_start)
                    .iter()
                    .map(|&(a, b, w)| (source(a), source(b), w)),
            );
            // SAFETY: `vertical` is a pass the CPU supports (the caller's contract).
            unsafe { vertical_fixed(vertical, &pairs, plan.y_fixed.inv_scale, out) };
        }
        let (x_lo, x_hi) = (gx.dst_start, gx.dst_start + gx.dst_len);
        for (out, pad) in [&mut *out_r, &mut *out_g, &mut *out_b]
            .into_iter()
            .zip(norm.pad)
        {
            out[..x_lo].fill(pad);
            out[x_hi..].fill(pad);
        }
        let mut x = x_lo;
        #[cfg(target_arch = "x86_64")]
        if WIDE {
            while x + HORIZONTAL_BLOCK <= x_hi {
                let d = x - x_lo;
                let bases: [usize; HORIZONTAL_BLOCK] =
                    std::array::from_fn(|i| (plan.x.starts[d + i] - src_lo) * CHANNELS);
                let weights = plan.x_quads.weights(d..d + HORIZONTAL_BLOCK);
                let end = x + HORIZONTAL_BLOCK;
                // SAFETY: `WIDE` is only true inside `fill_rows_avx512` (avx512f detected).
                unsafe {
                    horizontal_block_avx512(
                        scratch,
                        &bases,
                        weights,
                        norm,
                        [&mut out_r[x..end], &mut out_g[x..end], &mut out_b[x..end]],
                    )
                };
                x = end;
            }
        }
        for x in x..x_hi {
            let d = x - x_lo;
            let base = (plan.x.starts[d] - src_lo) * CHANNELS;
            let src = &scratch[base..base + plan.x_rgbx.reach()];
            let weights = plan.x_rgbx.weights(d..d + 1);
            let v = horizontal_dot::<FMA, WIDE>(src, weights);
            out_r[x] = (v[0] - norm.mean[0]) * norm.inv_std[0];
            out_g[x] = (v[1] - norm.mean[1]) * norm.inv_std[1];
            out_b[x] = (v[2] - norm.mean[2]) * norm.inv_std[2];
        }
    }
}

/// Output pixels [`horizontal_block_avx512`] computes at once.
#[cfg(target_arch = "x86_64")]
const HORIZONTAL_BLOCK: usize = 16;

/// [`horizontal_dot_avx512`] for 16 consecutive output pixels (source offsets `bases`, taps
/// `weights` = 16 rows of [`QuadTaps`]), normalised and written as 16 values per plane.
/// Per group of 4 taps: one permute spreads the 12 loaded floats channel-major
/// (`R0 R1 R2 R3 | G0 G1 G2 G3 | B0 B1 B2 B3 | unused`), the group's 4 weights are broadcast
/// to the four 128-bit lanes by a load, one multiply-add. Four pixels are in flight at once;
/// a 4×4 in-lane transpose-add folds their accumulators to `R(p0‥p3) | G | B | unused`, and
/// six 128-bit lane shuffles turn four such quads into three planes. The sums are those of
/// [`horizontal_dot_avx512`]: per lane over the groups, then `(t0 + t2) + (t1 + t3)`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
#[inline]
unsafe fn horizontal_block_avx512(
    src: &[f32],
    bases: &[usize; HORIZONTAL_BLOCK],
    weights: &[TapQuad],
    norm: &Norm,
    out: [&mut [f32]; CHANNELS],
) {
    use std::arch::x86_64::*;
    let groups = weights.len() / HORIZONTAL_BLOCK;
    assert!(
        weights.len() == groups * HORIZONTAL_BLOCK
            && bases.iter().all(|b| b + groups * 12 + 4 <= src.len()),
        "source shorter than the taps' reach"
    );
    assert!(
        out.iter().all(|o| o.len() == HORIZONTAL_BLOCK),
        "output blocks must hold 16 pixels"
    );
    // Lane 4c + k takes channel c of tap k (float 3k + c); lanes 12-15 meet real (finite)
    // values and are never read.
    let spread = _mm512_setr_epi32(0, 3, 6, 9, 1, 4, 7, 10, 2, 5, 8, 11, 0, 0, 0, 0);
    let (s, w) = (src.as_ptr(), weights.as_ptr());
    let mut quads = [_mm512_setzero_ps(); 4];
    for (q, quad) in quads.iter_mut().enumerate() {
        let mut acc = [_mm512_setzero_ps(); 4];
        for g in 0..groups {
            for (i, acc) in acc.iter_mut().enumerate() {
                let p = 4 * q + i;
                // SAFETY: bases[p] + g * 12 + 16 <= src.len() (asserted), and
                // p * groups + g < 16 * groups = weights.len(); `TapQuad` is 4 f32.
                unsafe {
                    let pixels =
                        _mm512_permutexvar_ps(spread, _mm512_loadu_ps(s.add(bases[p] + g * 12)));
                    let taps =
                        _mm512_broadcast_f32x4(_mm_load_ps(w.add(p * groups + g).cast::<f32>()));
                    *acc = _mm512_fmadd_ps(pixels, taps, *acc);
                }
            }
        }
        // In-lane transpose-add: lane c of the result holds (t0 + t2) + (t1 + t3) of channel
        // c for pixels 4q..4q+3 in lanes 4c..4c+3.
        let ab = _mm512_add_ps(
            _mm512_unpacklo_ps(acc[0], acc[1]),
            _mm512_unpackhi_ps(acc[0], acc[1]),
        );
        let cd = _mm512_add_ps(
            _mm512_unpacklo_ps(acc[2], acc[3]),
            _mm512_unpackhi_ps(acc[2], acc[3]),
        );
        *quad = _mm512_add_ps(
            _mm512_shuffle_ps::<0x44>(ab, cd),
            _mm512_shuffle_ps::<0xEE>(ab, cd),
        );
    }
    // quads[q] 128-bit lane c = channel c of pixels 4q..4q+3.
    let rg01 = _mm512_shuffle_f32x4::<0x44>(quads[0], quads[1]);
    let rg23 = _mm512_shuffle_f32x4::<0x44>(quads[2], quads[3]);
    let b01 = _mm512_shuffle_f32x4::<0xAA>(quads[0], quads[1]);
    let b23 = _mm512_shuffle_f32x4::<0xAA>(quads[2], quads[3]);
    let planes = [
        _mm512_shuffle_f32x4::<0x88>(rg01, rg23),
        _mm512_shuffle_f32x4::<0xDD>(rg01, rg23),
        _mm512_shuffle_f32x4::<0x88>(b01, b23),
    ];
    for (c, (out, plane)) in out.into_iter().zip(planes).enumerate() {
        let value = _mm512_mul_ps(
            _mm512_sub_ps(plane, _mm512_set1_ps(norm.mean[c])),
            _mm512_set1_ps(norm.inv_std[c]),
        );
        // SAFETY: each output block holds 16 floats (asserted).
        unsafe { _mm512_storeu_ps(out.as_mut_ptr(), value) };
    }
}

/// Per-channel sums of `src[3k + c] * w_k` over interleaved RGB `src`, with the taps in
/// [`RgbxTaps`] layout (`weights.len()` a multiple of 16, `src` at least
/// [`RgbxTaps::reach`] long).
#[inline(always)]
fn horizontal_dot<const FMA: bool, const WIDE: bool>(
    src: &[f32],
    weights: &[f32],
) -> [f32; CHANNELS] {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `WIDE` is only true inside `fill_rows_avx512` (avx512f detected) and `FMA`
        // inside it or `fill_rows_avx2_fma` (avx2+fma detected).
        if WIDE {
            return unsafe { horizontal_dot_avx512(src, weights) };
        }
        if FMA {
            return unsafe { horizontal_dot_avx2_fma(src, weights) };
        }
    }
    let mut v = [0.0f32; CHANNELS];
    for (k, w) in weights.chunks_exact(4).enumerate() {
        for c in 0..CHANNELS {
            v[c] += src[k * CHANNELS + c] * w[c];
        }
    }
    v
}

/// 16 lanes = 4 taps of RGBx per multiply-add.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
#[inline]
unsafe fn horizontal_dot_avx512(src: &[f32], weights: &[f32]) -> [f32; CHANNELS] {
    use std::arch::x86_64::*;
    let groups = weights.len() / RGBX_LANES;
    assert!(
        src.len() >= groups * 12 + 4,
        "source shorter than the taps' reach"
    );
    // 12 interleaved floats -> 4 RGBx pixels; lane 3 of each takes a real (finite) value that
    // meets a zero weight.
    let spread = _mm512_setr_epi32(0, 1, 2, 0, 3, 4, 5, 0, 6, 7, 8, 0, 9, 10, 11, 0);
    let mut acc = _mm512_setzero_ps();
    let (s, w) = (src.as_ptr(), weights.as_ptr());
    for g in 0..groups {
        // SAFETY: g * 12 + 16 <= src.len() (asserted), g * 16 + 16 <= weights.len().
        unsafe {
            let pixels = _mm512_permutexvar_ps(spread, _mm512_loadu_ps(s.add(g * 12)));
            acc = _mm512_fmadd_ps(pixels, _mm512_loadu_ps(w.add(g * RGBX_LANES)), acc);
        }
    }
    let high = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1));
    let half = _mm256_add_ps(_mm512_castps512_ps256(acc), high);
    let rgbx = _mm_add_ps(_mm256_castps256_ps128(half), _mm256_extractf128_ps(half, 1));
    let mut out = [0.0f32; 4];
    // SAFETY: `out` holds 4 floats.
    unsafe { _mm_storeu_ps(out.as_mut_ptr(), rgbx) };
    [out[0], out[1], out[2]]
}

/// 8 lanes = 2 taps of RGBx per multiply-add.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn horizontal_dot_avx2_fma(src: &[f32], weights: &[f32]) -> [f32; CHANNELS] {
    use std::arch::x86_64::*;
    let pairs = weights.len() / 8;
    assert!(
        src.len() >= pairs * 6 + 2,
        "source shorter than the taps' reach"
    );
    let spread = _mm256_setr_epi32(0, 1, 2, 0, 3, 4, 5, 0);
    let (mut a0, mut a1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    let (s, w) = (src.as_ptr(), weights.as_ptr());
    // Two accumulators: the chain of dependent multiply-adds is the limit otherwise.
    for p in (0..pairs).step_by(2) {
        // SAFETY: p * 6 + 8 <= src.len() and p * 8 + 8 <= weights.len() (pairs is even: the
        // stride is a multiple of 16).
        unsafe {
            let x0 = _mm256_permutevar8x32_ps(_mm256_loadu_ps(s.add(p * 6)), spread);
            a0 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(w.add(p * 8)), a0);
            let x1 = _mm256_permutevar8x32_ps(_mm256_loadu_ps(s.add(p * 6 + 6)), spread);
            a1 = _mm256_fmadd_ps(x1, _mm256_loadu_ps(w.add(p * 8 + 8)), a1);
        }
    }
    let sum = _mm256_add_ps(a0, a1);
    let rgbx = _mm_add_ps(_mm256_castps256_ps128(sum), _mm256_extractf128_ps(sum, 1));
    let mut out = [0.0f32; 4];
    // SAFETY: `out` holds 4 floats.
    unsafe { _mm_storeu_ps(out.as_mut_ptr(), rgbx) };
    [out[0], out[1], out[2]]
}

/// `out[k] = Σ_j w_j * row_j[k]`. Column blocks of `BLOCK` accumulators stay
/// in registers while all taps stream past, so `out` is written once.
#[inline(always)]
fn vertical_pass<const FMA: bool>(taps: &[(&[u8], f32)], out: &mut [f32]) {
    const BLOCK: usize = 32;
    let len = out.len();
    let full = len - len % BLOCK;
    for k in (0..full).step_by(BLOCK) {
        let mut acc = [0.0f32; BLOCK];
        for &(row, w) in taps {
            let src: &[u8; BLOCK] = match row[k..k + BLOCK].try_into() {
                Ok(block) => block,
                Err(_) => unreachable!("slice has BLOCK elements"),
            };
            for t in 0..BLOCK {
                acc[t] = madd::<FMA>(w, src[t] as f32, acc[t]);
            }
        }
        out[k..k + BLOCK].copy_from_slice(&acc);
    }
    for (k, o) in out.iter_mut().enumerate().skip(full) {
        *o = taps
            .iter()
            .fold(0.0, |acc, &(row, w)| madd::<FMA>(w, row[k] as f32, acc));
    }
}

/// `out[k] = inv_scale * Σ (q_a * a[k] + q_b * b[k])` over `pairs` of source rows with
/// packed i16 weights ([`FixedTaps`]); the sums are exact in i32.
///
/// # Safety
/// `vertical` must not be [`Vertical::F32`] and the CPU must support its features.
#[inline(always)]
unsafe fn vertical_fixed(
    vertical: Vertical,
    pairs: &[(&[u8], &[u8], i32)],
    inv_scale: f32,
    out: &mut [f32],
) {
    assert!(
        pairs
            .iter()
            .all(|(a, b, _)| a.len() >= out.len() && b.len() >= out.len()),
        "source rows shorter than the output row"
    );
    let done = match vertical {
        Vertical::F32 => 0,
        // SAFETY: the caller guarantees the features; the rows cover `out` (asserted).
        #[cfg(target_arch = "x86_64")]
        Vertical::Avx512Bw => unsafe { vertical_fixed_avx512bw(pairs, inv_scale, out) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        Vertical::Avx512Vbmi => unsafe { vertical_fixed_avx512vbmi(pairs, inv_scale, out) },
    };
    vertical_fixed_scalar(pairs, inv_scale, out, done);
}

/// [`vertical_fixed`] for the columns from `from` on.
fn vertical_fixed_scalar(
    pairs: &[(&[u8], &[u8], i32)],
    inv_scale: f32,
    out: &mut [f32],
    from: usize,
) {
    for (k, o) in out.iter_mut().enumerate().skip(from) {
        let sum = pairs.iter().fold(0i32, |acc, &(a, b, w)| {
            acc + (w as i16 as i32) * a[k] as i32 + (w >> 16) * b[k] as i32
        });
        *o = sum as f32 * inv_scale;
    }
}

/// Columns per block of the integer vertical passes: four registers of i32 accumulators.
const FIXED_BLOCK: usize = 64;

/// Bytes ahead of the current block that the integer vertical passes prefetch in each source
/// row: about as far as the ~10 rows' blocks take to cover an L3 miss. Half the rows of an
/// output row are new (from L3 or memory), and the hardware prefetcher ramps up too slowly
/// on that many short (5760-byte) streams; the 1080p bench ran faster with it.
const PREFETCH: usize = 512;

/// [`vertical_fixed`] on whole blocks of [`FIXED_BLOCK`] columns; returns the columns done.
/// Per 32 columns of a pair of rows: two 32-byte loads, `vpunpck{l,h}bw` to interleave the
/// rows' bytes, `vpmovzxbw` to widen the pairs to i16, `vpmaddwd` + `vpaddd`.
///
/// # Safety
/// The CPU supports AVX-512F/BW; every row in `pairs` is at least `out.len()` long.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx2")]
unsafe fn vertical_fixed_avx512bw(
    pairs: &[(&[u8], &[u8], i32)],
    inv_scale: f32,
    out: &mut [f32],
) -> usize {
    use std::arch::x86_64::*;
    let full = out.len() - out.len() % FIXED_BLOCK;
    let scale = _mm512_set1_ps(inv_scale);
    let o = out.as_mut_ptr();
    for k in (0..full).step_by(FIXED_BLOCK) {
        let mut acc = [_mm512_setzero_si512(); 4];
        for &(a, b, w) in pairs {
            let w = _mm512_set1_epi32(w);
            _mm_prefetch::<_MM_HINT_T0>(a.as_ptr().wrapping_add(k + PREFETCH).cast());
            _mm_prefetch::<_MM_HINT_T0>(b.as_ptr().wrapping_add(k + PREFETCH).cast());
            for h in 0..2 {
                // SAFETY: k + 64 <= out.len() <= a.len(), b.len() (the caller's contract).
                let (va, vb) = unsafe {
                    (
                        _mm256_loadu_si256(a.as_ptr().add(k + 32 * h).cast()),
                        _mm256_loadu_si256(b.as_ptr().add(k + 32 * h).cast()),
                    )
                };
                // Columns 0-7 | 16-23 and 8-15 | 24-31 of the 32 (in-lane unpacks).
                let lo = _mm512_cvtepu8_epi16(_mm256_unpacklo_epi8(va, vb));
                let hi = _mm512_cvtepu8_epi16(_mm256_unpackhi_epi8(va, vb));
                acc[2 * h] = _mm512_add_epi32(acc[2 * h], _mm512_madd_epi16(lo, w));
                acc[2 * h + 1] = _mm512_add_epi32(acc[2 * h + 1], _mm512_madd_epi16(hi, w));
            }
        }
        for h in 0..2 {
            // 128-bit lanes (4 columns each): lo = 0, 4, 16, 20; hi = 8, 12, 24, 28.
            let (lo, hi) = (acc[2 * h], acc[2 * h + 1]);
            let first = _mm512_shuffle_i32x4::<0x44>(lo, hi);
            let second = _mm512_shuffle_i32x4::<0xEE>(lo, hi);
            // SAFETY: k + 64 <= out.len().
            unsafe {
                _mm512_storeu_ps(
                    o.add(k + 32 * h),
                    _mm512_mul_ps(_mm512_cvtepi32_ps(first), scale),
                );
                _mm512_storeu_ps(
                    o.add(k + 32 * h + 16),
                    _mm512_mul_ps(_mm512_cvtepi32_ps(second), scale),
                );
            }
        }
    }
    full
}

/// [`vertical_fixed`] on whole blocks of [`FIXED_BLOCK`] columns; returns the columns done.
/// Per 32 columns of a pair of rows: a 32-byte load of row `a` with row `b`'s 32 bytes
/// inserted above it (`vinserti64x4` from memory, no shuffle port), two zero-masked
/// single-source `vpermb` that build the i16 pairs of 16 columns each, two `vpdpwssd`.
/// (`vpermt2b`, the two-source byte permute, is three uops at half the rate of `vpermb`; it
/// made this pass shuffle-bound.)
///
/// # Safety
/// The CPU supports AVX-512F/BW/VBMI/VNNI; every row in `pairs` is at least `out.len()` long.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vbmi,avx512vnni")]
unsafe fn vertical_fixed_avx512vbmi(
    pairs: &[(&[u8], &[u8], i32)],
    inv_scale: f32,
    out: &mut [f32],
) -> usize {
    use std::arch::x86_64::*;
    // Bytes 0-31 of the register are 32 columns of row a, bytes 32-63 the same columns of
    // row b. Byte 4i of half q's pairs is column 16q + i of row a, byte 4i + 2 that of row b;
    // the odd bytes are zeroed by the mask.
    const INDEX: [[u8; 64]; 2] = {
        let mut index = [[0u8; 64]; 2];
        let mut q = 0;
        while q < 2 {
            let mut i = 0;
            while i < 16 {
                index[q][4 * i] = (16 * q + i) as u8;
                index[q][4 * i + 2] = (32 + 16 * q + i) as u8;
                i += 1;
            }
            q += 1;
        }
        index
    };
    const LOW_BYTES: __mmask64 = 0x5555_5555_5555_5555;
    // SAFETY: each INDEX row is 64 bytes.
    let index: [__m512i; 2] =
        std::array::from_fn(|q| unsafe { _mm512_loadu_si512(INDEX[q].as_ptr().cast()) });
    let full = out.len() - out.len() % FIXED_BLOCK;
    let scale = _mm512_set1_ps(inv_scale);
    let o = out.as_mut_ptr();
    for k in (0..full).step_by(FIXED_BLOCK) {
        let mut acc = [_mm512_setzero_si512(); 4];
        for &(a, b, w) in pairs {
            let w = _mm512_set1_epi32(w);
            _mm_prefetch::<_MM_HINT_T0>(a.as_ptr().wrapping_add(k + PREFETCH).cast());
            _mm_prefetch::<_MM_HINT_T0>(b.as_ptr().wrapping_add(k + PREFETCH).cast());
            for h in 0..2 {
                // SAFETY: k + 64 <= out.len() <= a.len(), b.len() (the caller's contract).
                let both = unsafe {
                    _mm512_inserti64x4::<1>(
                        _mm512_castsi256_si512(_mm256_loadu_si256(
                            a.as_ptr().add(k + 32 * h).cast(),
                        )),
                        _mm256_loadu_si256(b.as_ptr().add(k + 32 * h).cast()),
                    )
                };
                for q in 0..2 {
                    let pair = _mm512_maskz_permutexvar_epi8(LOW_BYTES, index[q], both);
                    acc[2 * h + q] = _mm512_dpwssd_epi32(acc[2 * h + q], pair, w);
                }
            }
        }
        for (q, acc) in acc.iter().enumerate() {
            // SAFETY: k + 64 <= out.len().
            unsafe {
                _mm512_storeu_ps(
                    o.add(k + 16 * q),
                    _mm512_mul_ps(_mm512_cvtepi32_ps(*acc), scale),
                )
            };
        }
    }
    full
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(width: usize, height: usize, mode: ResizeMode) -> PreprocessSpec {
        PreprocessSpec {
            width,
            height,
            mean: [0.0; 3],
            std: [1.0; 3],
            mode,
        }
    }

    #[test]
    fn upscaling_weights_are_two_tap_half_pixel_bilinear() {
        // 2 → 4: centres 0.25, 0.75, 1.25, 1.75 in source units.
        let image = ImageU8::new(&[0, 0, 0, 100, 100, 100], 2, 1).unwrap_or_else(|e| panic!("{e}"));
        let geo = Geometry::new(&image, &spec(4, 1, ResizeMode::Stretch));
        let got: Vec<(usize, Vec<f64>)> = (0..4).map(|x| taps_f64(&geo.x, x)).collect();
        assert_eq!(got[0], (0, vec![1.0])); // clamped to the edge pixel
        assert_eq!(got[1], (0, vec![0.75, 0.25]));
        assert_eq!(got[2], (0, vec![0.25, 0.75]));
        assert_eq!(got[3], (1, vec![1.0]));
    }

    #[test]
    fn letterbox_centres_the_resized_image() {
        let data = vec![0u8; 100 * 50 * 3];
        let image = ImageU8::new(&data, 100, 50).unwrap_or_else(|e| panic!("{e}"));
        let geo = Geometry::new(&image, &spec(64, 64, ResizeMode::Letterbox { pad: 114 }));
        assert_eq!((geo.x.dst_start, geo.x.dst_len), (0, 64));
        assert_eq!((geo.y.dst_start, geo.y.dst_len), (16, 32));
    }

    #[test]
    fn center_crop_takes_the_middle_window() {
        let data = vec![0u8; 200 * 100 * 3];
        let image = ImageU8::new(&data, 200, 100).unwrap_or_else(|e| panic!("{e}"));
        let geo = Geometry::new(&image, &spec(50, 50, ResizeMode::CenterCrop));
        assert_eq!(geo.x.offset, 50.0);
        assert_eq!(geo.x.ratio, 2.0);
        assert_eq!(geo.y.offset, 0.0);
        assert_eq!(geo.y.ratio, 2.0);
    }

    fn fixed_taps(src_len: usize, dst_len: usize) -> (AxisTaps, FixedTaps) {
        let axis = AxisMap {
            dst_start: 0,
            dst_len,
            src_len,
            ratio: (src_len as f64 / dst_len as f64) as f32,
            offset: 0.0,
        };
        let taps = AxisTaps::new(&axis);
        let fixed = FixedTaps::new(&taps);
        (taps, fixed)
    }

    #[test]
    fn fixed_vertical_weights_sum_to_the_scale_and_stay_close() {
        // Even and odd tap counts, upscaling (weights of exactly 1), a large reduction.
        for (src_len, dst_len) in [(1080, 224), (9, 4), (7, 3), (3, 10), (2, 7), (4000, 5)] {
            let (taps, fixed) = fixed_taps(src_len, dst_len);
            let scale = 1.0 / fixed.inv_scale as f64;
            assert_eq!(
                scale.log2().fract(),
                0.0,
                "scale {scale} not a power of two"
            );
            let mut odd = false;
            for d in 0..dst_len {
                let (start, w) = taps.get(d);
                let mut q = vec![0i64; w.len()];
                for &(a, b, packed) in fixed.get(d) {
                    let (q_a, q_b) = (packed as i16 as i64, (packed >> 16) as i64);
                    q[a - start] += q_a;
                    if b == a {
                        odd = true;
                        assert_eq!(q_b, 0, "an unpaired row carries a zero partner");
                    } else {
                        assert_eq!(b, a + 1);
                        q[b - start] += q_b;
                    }
                }
                assert_eq!(
                    q.iter().sum::<i64>() as f64,
                    scale,
                    "{src_len}->{dst_len} d{d}"
                );
                let error: f64 = q
                    .iter()
                    .zip(w)
                    .map(|(q, w)| (*q as f64 / scale - *w as f64).abs())
                    .sum();
                assert!(
                    error <= (w.len() as f64 - 1.0).max(1.0) / scale,
                    "{src_len}->{dst_len} d{d}: weight error {error}"
                );
                if w.contains(&1.0) {
                    assert!(q.contains(&(scale as i64)), "a weight of 1 stays exact");
                }
            }
            if (src_len, dst_len) == (7, 3) {
                assert!(odd, "7 -> 3 has odd tap counts");
            }
        }
    }

    /// Every compiled-in integer vertical kernel the CPU runs, against the scalar sums, on
    /// row lengths around the 64-column block and odd and even pair counts.
    #[test]
    fn fixed_vertical_kernels_match_exact_integer_sums() {
        let mut kernels = Vec::new();
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512bw")
            {
                kernels.push(Vertical::Avx512Bw);
                if std::arch::is_x86_feature_detected!("avx512vbmi")
                    && std::arch::is_x86_feature_detected!("avx512vnni")
                {
                    kernels.push(Vertical::Avx512Vbmi);
                }
            }
        }
        let mut seed = 0x9e37_79b9u32;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            seed
        };
        for len in [1, 63, 64, 65, 200, 5760] {
            let rows: Vec<Vec<u8>> = (0..7)
                .map(|_| (0..len).map(|_| next() as u8).collect())
                .collect();
            for count in 1..=4 {
                // Extreme bytes and weights: 255 and ±32767.
                let pairs: Vec<(&[u8], &[u8], i32)> = (0..count)
                    .map(|p| {
                        let q_a = (next() % 65535) as i32 - 32767;
                        let q_b = if p == 3 {
                            32767
                        } else {
                            (next() % 65535) as i32 - 32767
                        };
                        let packed = (q_a as u16 as u32 | (q_b as u16 as u32) << 16) as i32;
                        (rows[p].as_slice(), rows[p + 3].as_slice(), packed)
                    })
                    .collect();
                let mut want = vec![f32::NAN; len];
                vertical_fixed_scalar(&pairs, 1.0 / 4096.0, &mut want, 0);
                for &kernel in &kernels {
                    let mut got = vec![f32::NAN; len];
                    // SAFETY: only kernels whose features were detected are listed.
                    unsafe { vertical_fixed(kernel, &pairs, 1.0 / 4096.0, &mut got) };
                    assert_eq!(got, want, "{kernel:?} len {len} pairs {count}");
                }
            }
        }
    }

    /// The 16-pixel horizontal block (quarter-size broadcast tap table) against the per-pixel
    /// dot it replaces, bit for bit, normalised the same way: downscales with tap counts from
    /// 2 to 20 (4k + 1 to 4k + 3 included), upscales, odd source and output sizes.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn horizontal_block_matches_per_pixel_dot() {
        if !std::arch::is_x86_feature_detected!("avx512f") {
            return;
        }
        let mut seed = 0x2545_f491u32;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            seed
        };
        let norm = Norm {
            mean: [123.675, 116.28, 103.53],
            inv_std: [1.0 / 58.395, 1.0 / 57.12, 1.0 / 57.375],
            pad: [0.0; CHANNELS],
        };
        for (src_len, dst_len) in [
            (1920, 224),
            (640, 48),
            (97, 16),
            (333, 32),
            (50, 32),
            (17, 48),
            (1000, 112),
            (161, 16),
        ] {
            let axis = AxisMap {
                dst_start: 0,
                dst_len,
                src_len,
                ratio: (src_len as f64 / dst_len as f64) as f32,
                offset: 0.0,
            };
            let taps = AxisTaps::new(&axis);
            let (rgbx, quads) = (RgbxTaps::new(&taps), QuadTaps::new(&taps));
            let src: Vec<f32> = (0..src_len * CHANNELS + rgbx.reach())
                .map(|_| (next() % 25500) as f32 / 100.0)
                .collect();
            for x0 in (0..dst_len - dst_len % HORIZONTAL_BLOCK).step_by(HORIZONTAL_BLOCK) {
                let bases: [usize; HORIZONTAL_BLOCK] =
                    std::array::from_fn(|i| taps.starts[x0 + i] * CHANNELS);
                let mut got = [[f32::NAN; HORIZONTAL_BLOCK]; CHANNELS];
                let [r, g, b] = &mut got;
                // SAFETY: avx512f detected above.
                unsafe {
                    horizontal_block_avx512(
                        &src,
                        &bases,
                        quads.weights(x0..x0 + HORIZONTAL_BLOCK),
                        &norm,
                        [r, g, b],
                    )
                };
                for (i, base) in bases.iter().enumerate() {
                    // SAFETY: avx512f detected above.
                    let v = unsafe {
                        horizontal_dot_avx512(
                            &src[*base..*base + rgbx.reach()],
                            rgbx.weights(x0 + i..x0 + i + 1),
                        )
                    };
                    for c in 0..CHANNELS {
                        let want = (v[c] - norm.mean[c]) * norm.inv_std[c];
                        assert_eq!(
                            got[c][i].to_bits(),
                            want.to_bits(),
                            "{src_len}->{dst_len} pixel {} channel {c}",
                            x0 + i
                        );
                    }
                }
            }
        }
    }

    /// The fast path (fixed-point vertical and 16-pixel horizontal blocks where the CPU has
    /// them) against the reference: odd and even tap counts, upscaling, letterbox and
    /// centre crop, output widths around the 16-pixel block.
    #[test]
    fn fast_path_matches_reference_across_blocks_and_modes() {
        let cases = [
            ((97, 7), (37, 3)),
            ((31, 9), (16, 4)),
            ((5, 3), (33, 10)),
            ((130, 61), (17, 64)),
            ((640, 360), (48, 31)),
        ];
        let mut seed = 12345u32;
        for ((w, h), (out_w, out_h)) in cases {
            let data: Vec<u8> = (0..w * h * CHANNELS)
                .map(|_| {
                    seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                    (seed >> 24) as u8
                })
                .collect();
            let image = ImageU8::new(&data, w, h).unwrap_or_else(|e| panic!("{e}"));
            for mode in [
                ResizeMode::Stretch,
                ResizeMode::Letterbox { pad: 114 },
                ResizeMode::CenterCrop,
            ] {
                let spec = spec(out_w, out_h, mode);
                let mut fast = vec![f32::NAN; spec.output_len_per_image()];
                let mut reference = fast.clone();
                resize_normalize(&[image], &spec, &mut fast).unwrap_or_else(|e| panic!("{e}"));
                resize_normalize_reference(&[image], &spec, &mut reference)
                    .unwrap_or_else(|e| panic!("{e}"));
                // std 1: levels. The fixed-point bound, 127.5 * (taps - 1) / scale, is below
                // 0.017 levels for these sizes.
                let diff = fast
                    .iter()
                    .zip(&reference)
                    .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
                assert!(diff <= 0.02, "{w}x{h} -> {out_w}x{out_h} {mode:?}: {diff}");
            }
        }
    }

    #[test]
    fn rejects_wrong_lengths() {
        assert!(ImageU8::new(&[0; 5], 1, 2).is_err());
        let data = [0u8; 12];
        let image = ImageU8::new(&data, 2, 2).unwrap_or_else(|e| panic!("{e}"));
        let mut out = vec![0.0; 10];
        let err = resize_normalize(&[image], &spec(2, 2, ResizeMode::Stretch), &mut out);
        assert!(matches!(err, Err(Error::InvalidInput(_))));
    }
}
