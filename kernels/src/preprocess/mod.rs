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
//!
//! # Layout
//!
//! - `spec`: the public inputs and their validation; `geometry`: the mapping
//!   and the f64 taps of the formula above; `reference`: the scalar reference.
//! - The fast path ([`resize_normalize`], here, with the runtime dispatch):
//!   `taps` (tables built once per image), `rows` (one task's rows),
//!   `vertical` (f32 and fixed-point passes, AVX-512 kernels in
//!   `vertical/avx512.rs`), `horizontal` (RGBx and 16-pixel block passes).

use rayon::prelude::*;

mod geometry;
mod horizontal;
mod plan;
mod reference;
mod rows;
mod spec;
mod taps;
#[cfg(test)]
mod test_support;
mod vertical;

pub(crate) use geometry::Geometry;
pub use reference::resize_normalize_reference;
pub(crate) use spec::check_batch;
pub use spec::{ImageU8, PreprocessSpec, ResizeMode, CHANNELS};

use crate::error::Result;
use plan::{ImagePlan, Norm, RowTask};
use rows::fill_rows_body;
use taps::{AxisTaps, FixedTaps, QuadTaps, RgbxTaps};
use vertical::Vertical;

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
    let isa = Isa::detect();
    let norm = Norm {
        mean: spec.mean,
        inv_std: spec.inv_std(),
        pad: spec.pad_normalized(),
    };
    tasks
        .into_par_iter()
        .for_each_init(Vec::new, |scratch, (plan, y0, planes)| {
            let task = RowTask {
                plan,
                width: spec.width,
                y0,
                planes,
                norm: &norm,
            };
            fill_rows(isa, task, scratch)
        });
    Ok(())
}

/// The instruction sets [`fill_rows`] runs with, detected once per
/// [`resize_normalize`] call rather than once per task. Only [`Isa::detect`]
/// makes the SIMD variants: holding one means the CPU has its features.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Isa {
    /// AVX-512F for both passes; the vertical pass is the one
    /// [`Vertical::detect`] picked.
    #[cfg(target_arch = "x86_64")]
    Avx512(Vertical),
    /// AVX2 + FMA, f32 vertical pass.
    #[cfg(target_arch = "x86_64")]
    Avx2Fma,
    /// No SIMD beyond the target's baseline, f32 vertical pass.
    Baseline,
}

impl Isa {
    /// The fastest paths this CPU runs.
    fn detect() -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f") {
                return Isa::Avx512(Vertical::detect());
            }
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
            {
                return Isa::Avx2Fma;
            }
        }
        Isa::Baseline
    }
}

fn fill_rows(isa: Isa, task: RowTask<'_, '_>, scratch: &mut Vec<f32>) {
    match isa {
        // SAFETY: `isa` came from `Isa::detect`, which found the features the function is
        // compiled for, and `Vertical::detect` only picks passes whose features it detected.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512(vertical) => unsafe { fill_rows_avx512(task, scratch, vertical) },
        // SAFETY: `isa` came from `Isa::detect`, which found the features the function is
        // compiled for.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2Fma => unsafe { fill_rows_avx2_fma(task, scratch) },
        Isa::Baseline => fill_rows_body::<false, false>(task, scratch, Vertical::F32),
    }
}

/// Both passes at 16 lanes: fewer instructions for the same work.
///
/// # Safety
/// `vertical` must be [`Vertical::F32`] or a pass [`Vertical::detect`] returned.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn fill_rows_avx512(task: RowTask<'_, '_>, scratch: &mut Vec<f32>, vertical: Vertical) {
    fill_rows_body::<true, true>(task, scratch, vertical);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn fill_rows_avx2_fma(task: RowTask<'_, '_>, scratch: &mut Vec<f32>) {
    fill_rows_body::<true, false>(task, scratch, Vertical::F32);
}

#[cfg(test)]
mod tests {
    use super::test_support::test_spec as spec;
    use super::*;
    use crate::error::Error;

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
