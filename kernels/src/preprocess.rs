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
    weights: Vec<f32>,
    stride: usize,
}

/// One AVX-512 register: 4 taps of RGBx.
const RGBX_LANES: usize = 16;

impl RgbxTaps {
    fn new(taps: &AxisTaps) -> Self {
        let stride = (taps.taps * 4).div_ceil(RGBX_LANES) * RGBX_LANES;
        let mut weights = vec![0.0f32; taps.starts.len() * stride];
        for d in 0..taps.starts.len() {
            for (k, w) in taps.get(d).1.iter().enumerate() {
                for c in 0..CHANNELS {
                    weights[d * stride + k * 4 + c] = *w;
                }
            }
        }
        Self { weights, stride }
    }

    /// Interleaved floats the pass may read past a pixel's first tap (zero-weighted ones
    /// included): 3 per padded tap, plus the 4 a 16-float load of the last group overreads.
    fn reach(&self) -> usize {
        self.stride / 4 * CHANNELS + 4
    }
}

/// Everything one image needs for the fast path.
struct ImagePlan<'a> {
    image: ImageU8<'a>,
    geo: Geometry,
    x: AxisTaps,
    x_rgbx: RgbxTaps,
    y: AxisTaps,
}

/// Output rows one rayon task fills; small enough to spread a single
/// 224-row image over the available cores.
const ROWS_PER_TASK: usize = 8;

/// CPU fast path: per output row, a vertical pass over contiguous source rows
/// (u8 → f32 multiply-adds that vectorise) into one interleaved f32 row, then
/// a horizontal pass of contiguous multiply-adds against per-channel
/// repeated weights, writing the three normalised planes. Compiled three
/// times (AVX-512F, AVX2+FMA, baseline), picked by runtime detection. Rows of
/// all images are spread over rayon's pool.
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
            ImagePlan {
                image: *image,
                geo,
                x_rgbx: RgbxTaps::new(&x),
                x,
                y: AxisTaps::new(&geo.y),
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
            // SAFETY: the CPU supports the features the function is compiled for.
            unsafe { fill_rows_avx512(plan, width, y0, planes, norm, scratch) };
            return;
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: the CPU supports the features the function is compiled for.
            unsafe { fill_rows_avx2_fma(plan, width, y0, planes, norm, scratch) };
            return;
        }
    }
    fill_rows_body::<false, false>(plan, width, y0, planes, norm, scratch);
}

/// Both passes at 16 lanes: fewer instructions for the same work.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn fill_rows_avx512(
    plan: &ImagePlan<'_>,
    width: usize,
    y0: usize,
    planes: [&mut [f32]; CHANNELS],
    norm: &Norm,
    scratch: &mut Vec<f32>,
) {
    fill_rows_body::<true, true>(plan, width, y0, planes, norm, scratch);
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
    fill_rows_body::<true, false>(plan, width, y0, planes, norm, scratch);
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

/// `FMA`: compiled with avx2+fma; `WIDE`: with avx512f too.
#[inline(always)]
fn fill_rows_body<const FMA: bool, const WIDE: bool>(
    plan: &ImagePlan<'_>,
    width: usize,
    y0: usize,
    planes: [&mut [f32]; CHANNELS],
    norm: &Norm,
    scratch: &mut Vec<f32>,
) {
    let [r, g, b] = planes;
    let rows = r.len() / width;
    let (gx, gy) = (&plan.geo.x, &plan.geo.y);
    let (src_lo, src_hi) = plan.x.source_span();
    let row_len = (src_hi - src_lo) * CHANNELS;
    let stride = plan.x_rgbx.stride;
    // Room for the zero-weight taps past the last tap of the last pixel; stays zero.
    scratch.clear();
    scratch.resize(row_len + plan.x_rgbx.reach(), 0.0);
    let mut taps: Vec<(&[u8], f32)> = Vec::with_capacity(plan.y.taps);
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
        let (start, wy) = plan.y.get(y - gy.dst_start);
        taps.clear();
        taps.extend(
            wy.iter()
                .enumerate()
                .filter(|(_, w)| **w != 0.0)
                .map(|(j, w)| {
                    (
                        &plan.image.row(start + j)[src_lo * CHANNELS..src_hi * CHANNELS],
                        *w,
                    )
                }),
        );
        vertical_pass::<FMA>(&taps, &mut scratch[..row_len]);
        for x in 0..width {
            if !(gx.dst_start..gx.dst_start + gx.dst_len).contains(&x) {
                out_r[x] = norm.pad[0];
                out_g[x] = norm.pad[1];
                out_b[x] = norm.pad[2];
                continue;
            }
            let d = x - gx.dst_start;
            let base = (plan.x.starts[d] - src_lo) * CHANNELS;
            let src = &scratch[base..base + plan.x_rgbx.reach()];
            let weights = &plan.x_rgbx.weights[d * stride..(d + 1) * stride];
            let v = horizontal_dot::<FMA, WIDE>(src, weights);
            out_r[x] = (v[0] - norm.mean[0]) * norm.inv_std[0];
            out_g[x] = (v[1] - norm.mean[1]) * norm.inv_std[1];
            out_b[x] = (v[2] - norm.mean[2]) * norm.inv_std[2];
        }
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
