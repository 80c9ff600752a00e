//! One rayon task's output rows: for each, the vertical pass into a scratch
//! row, the horizontal pass with normalisation into the three planes, and the
//! letterbox border.

use super::horizontal::horizontal_dot;
#[cfg(target_arch = "x86_64")]
use super::horizontal::{horizontal_block_avx512, HORIZONTAL_BLOCK};
use super::plan::RowTask;
use super::spec::CHANNELS;
use super::vertical::{vertical_fixed, vertical_pass, Vertical};

/// `FMA`: compiled with avx2+fma; `WIDE`: with avx512f too. `vertical` is
/// [`Vertical::F32`] or a pass the CPU supports.
#[inline(always)]
pub(super) fn fill_rows_body<const FMA: bool, const WIDE: bool>(
    task: RowTask<'_, '_>,
    scratch: &mut Vec<f32>,
    vertical: Vertical,
) {
    let RowTask {
        plan,
        width,
        y0,
        planes,
        norm,
    } = task;
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
