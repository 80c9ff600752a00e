//! The integer vertical kernels on AVX-512: [`vertical_fixed_avx512bw`] and,
//! where VBMI and VNNI exist, [`vertical_fixed_avx512vbmi`].

/// Columns per block of the integer vertical passes: four registers of i32 accumulators.
const FIXED_BLOCK: usize = 64;

/// Bytes ahead of the current block that the integer vertical passes prefetch in each source
/// row: about as far as the ~10 rows' blocks take to cover an L3 miss. Half the rows of an
/// output row are new (from L3 or memory), and the hardware prefetcher ramps up too slowly
/// on that many short (5760-byte) streams; the 1080p bench ran faster with it.
const PREFETCH: usize = 512;

/// [`vertical_fixed`](super::vertical_fixed) on whole blocks of [`FIXED_BLOCK`] columns; returns the columns done.
/// Per 32 columns of a pair of rows: two 32-byte loads, `vpunpck{l,h}bw` to interleave the
/// rows' bytes, `vpmovzxbw` to widen the pairs to i16, `vpmaddwd` + `vpaddd`.
///
/// # Safety
/// The CPU supports AVX-512F/BW; every row in `pairs` is at least `out.len()` long.
#[target_feature(enable = "avx512f,avx512bw,avx2")]
pub(super) unsafe fn vertical_fixed_avx512bw(
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

/// [`vertical_fixed`](super::vertical_fixed) on whole blocks of [`FIXED_BLOCK`] columns; returns the columns done.
/// Per 32 columns of a pair of rows: a 32-byte load of row `a` with row `b`'s 32 bytes
/// inserted above it (`vinserti64x4` from memory, no shuffle port), two zero-masked
/// single-source `vpermb` that build the i16 pairs of 16 columns each, two `vpdpwssd`.
/// (`vpermt2b`, the two-source byte permute, is three uops at half the rate of `vpermb`; it
/// made this pass shuffle-bound.)
///
/// # Safety
/// The CPU supports AVX-512F/BW/VBMI/VNNI; every row in `pairs` is at least `out.len()` long.
#[target_feature(enable = "avx512f,avx512bw,avx512vbmi,avx512vnni")]
pub(super) unsafe fn vertical_fixed_avx512vbmi(
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
