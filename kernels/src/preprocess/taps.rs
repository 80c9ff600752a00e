//! The fast path's tap tables, built once per image from the f64 taps of
//! [`taps_f64`]: [`AxisTaps`] (f32, one row per destination index), laid out
//! for the horizontal pass as [`RgbxTaps`] and [`QuadTaps`], and for the
//! integer vertical pass as [`FixedTaps`].

use super::geometry::{taps_f64, AxisMap};
use super::spec::CHANNELS;

/// Precomputed taps of one axis for the fast path: `taps` weights per
/// destination index (zero-padded), starting at source index `starts[d]`.
pub(super) struct AxisTaps {
    pub(super) starts: Vec<usize>,
    weights: Vec<f32>,
    pub(super) taps: usize,
}

impl AxisTaps {
    pub(super) fn new(axis: &AxisMap) -> Self {
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

    #[inline]
    pub(super) fn get(&self, d: usize) -> (usize, &[f32]) {
        (
            self.starts[d],
            &self.weights[d * self.taps..(d + 1) * self.taps],
        )
    }

    /// Source index range any destination index reads.
    pub(super) fn source_span(&self) -> (usize, usize) {
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
pub(super) struct RgbxTaps {
    /// Whole registers, so that no weight load straddles a cache line.
    weights: Vec<RgbxGroup>,
    stride: usize,
}

/// 16 weights on one 64-byte cache line.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct RgbxGroup([f32; RGBX_LANES]);

/// One AVX-512 register: 4 taps of RGBx.
pub(super) const RGBX_LANES: usize = 16;

impl RgbxTaps {
    pub(super) fn new(taps: &AxisTaps) -> Self {
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
    #[inline]
    pub(super) fn weights(&self, range: std::ops::Range<usize>) -> &[f32] {
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
    #[inline]
    pub(super) fn reach(&self) -> usize {
        self.stride / 4 * CHANNELS + 4
    }
}

/// The horizontal taps of [`AxisTaps`] four to a 16-byte group, zero-padded to the groups of
/// [`RgbxTaps`]: `groups` groups per destination index. [`horizontal_block_avx512`](super::horizontal::horizontal_block_avx512)
/// broadcasts a group to all four 128-bit lanes with a load (`vbroadcastf32x4`, no shuffle
/// port) and spreads the source pixels channel-major to match (`R0 R1 R2 R3 | G0 … | B0 … |
/// unused`), so the table is a quarter of [`RgbxTaps`]' and stays in L1 beside the row
/// (the 72 KiB RGBx table at 1920→224 came from L2 for every output row).
pub(super) struct QuadTaps {
    weights: Vec<TapQuad>,
    groups: usize,
}

/// Four taps' weights, 16-byte aligned so no broadcast load straddles a cache line.
#[derive(Clone, Copy)]
#[repr(C, align(16))]
pub(super) struct TapQuad([f32; 4]);

impl QuadTaps {
    pub(super) fn new(taps: &AxisTaps) -> Self {
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
    #[inline]
    pub(super) fn weights(&self, range: std::ops::Range<usize>) -> &[TapQuad] {
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
pub(super) struct FixedTaps {
    /// `(row a, row b, packed weights)`; destination `d` uses `pairs[offsets[d]..offsets[d + 1]]`.
    pairs: Vec<(usize, usize, i32)>,
    offsets: Vec<usize>,
    /// `1 / scale`, exact.
    pub(super) inv_scale: f32,
}

impl FixedTaps {
    pub(super) fn new(taps: &AxisTaps) -> Self {
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

    #[inline]
    pub(super) fn get(&self, d: usize) -> &[(usize, usize, i32)] {
        &self.pairs[self.offsets[d]..self.offsets[d + 1]]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixed_taps(src_len: usize, dst_len: usize) -> (AxisTaps, FixedTaps) {
        let axis = AxisMap::whole(src_len, dst_len);
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
}
