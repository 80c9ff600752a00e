//! The vertical pass: per output row, the weighted sum of its source rows
//! into one interleaved f32 row. f32 multiply-adds ([`vertical_pass`]) where
//! the CPU lacks AVX-512BW; otherwise i16 fixed point on pairs of rows
//! ([`FixedTaps`](super::taps::FixedTaps), kernels in [`avx512`]), exact in
//! i32.

#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "x86_64")]
use avx512::{vertical_fixed_avx512bw, vertical_fixed_avx512vbmi};

/// Which vertical pass `fill_rows_body` runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Vertical {
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
    pub(super) fn detect() -> Self {
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

/// `out[k] = Σ_j w_j * row_j[k]`. Column blocks of `BLOCK` accumulators stay
/// in registers while all taps stream past, so `out` is written once.
#[inline(always)]
pub(super) fn vertical_pass<const FMA: bool>(taps: &[(&[u8], f32)], out: &mut [f32]) {
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
/// packed i16 weights ([`FixedTaps`](super::taps::FixedTaps)); the sums are exact in i32.
///
/// # Safety
/// `vertical` must not be [`Vertical::F32`] and the CPU must support its features.
#[inline(always)]
pub(super) unsafe fn vertical_fixed(
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

#[cfg(test)]
mod tests {
    use super::*;

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
        let mut next = crate::preprocess::test_support::xorshift(0x9e37_79b9u32);
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
}
