//! The horizontal pass: per output pixel, multiply-adds of one interleaved
//! f32 row (the vertical pass's output) against the tap tables of
//! [`RgbxTaps`](super::taps::RgbxTaps) and, 16 pixels at a time on AVX-512F,
//! [`QuadTaps`](super::taps::QuadTaps), then normalisation.

#[cfg(target_arch = "x86_64")]
use super::plan::Norm;
use super::spec::CHANNELS;
#[cfg(target_arch = "x86_64")]
use super::taps::{TapQuad, RGBX_LANES};

/// Output pixels [`horizontal_block_avx512`] computes at once.
#[cfg(target_arch = "x86_64")]
pub(super) const HORIZONTAL_BLOCK: usize = 16;

/// [`horizontal_dot_avx512`] for 16 consecutive output pixels (source offsets `bases`, taps
/// `weights` = 16 rows of [`QuadTaps`](super::taps::QuadTaps)), normalised and written as 16 values per plane.
/// Per group of 4 taps: one permute spreads the 12 loaded floats channel-major
/// (`R0 R1 R2 R3 | G0 G1 G2 G3 | B0 B1 B2 B3 | unused`), the group's 4 weights are broadcast
/// to the four 128-bit lanes by a load, one multiply-add. Four pixels are in flight at once;
/// a 4×4 in-lane transpose-add folds their accumulators to `R(p0‥p3) | G | B | unused`, and
/// six 128-bit lane shuffles turn four such quads into three planes. The sums are those of
/// [`horizontal_dot_avx512`]: per lane over the groups, then `(t0 + t2) + (t1 + t3)`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
#[inline]
pub(super) unsafe fn horizontal_block_avx512(
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
/// [`RgbxTaps`](super::taps::RgbxTaps) layout (`weights.len()` a multiple of 16, `src` at least
/// [`RgbxTaps::reach`](super::taps::RgbxTaps::reach) long).
#[inline(always)]
pub(super) fn horizontal_dot<const FMA: bool, const WIDE: bool>(
    src: &[f32],
    weights: &[f32],
) -> [f32; CHANNELS] {
    #[cfg(target_arch = "x86_64")]
    {
        if WIDE {
            // SAFETY: `WIDE` is only true inside `fill_rows_avx512` (avx512f detected).
            return unsafe { horizontal_dot_avx512(src, weights) };
        }
        if FMA {
            // SAFETY: `FMA` is only true inside `fill_rows_avx512` or `fill_rows_avx2_fma`
            // (avx2+fma detected).
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

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;
    use crate::preprocess::geometry::AxisMap;
    use crate::preprocess::taps::{AxisTaps, QuadTaps, RgbxTaps};

    /// The 16-pixel horizontal block (quarter-size broadcast tap table) against the per-pixel
    /// dot it replaces, bit for bit, normalised the same way: downscales with tap counts from
    /// 2 to 20 (4k + 1 to 4k + 3 included), upscales, odd source and output sizes.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn horizontal_block_matches_per_pixel_dot() {
        if !std::arch::is_x86_feature_detected!("avx512f") {
            return;
        }
        let mut next = crate::preprocess::test_support::xorshift(0x2545_f491u32);
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
            let axis = AxisMap::whole(src_len, dst_len);
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
}
