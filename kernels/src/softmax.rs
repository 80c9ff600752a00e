//! Softmax over the last dimension with top-k, batched over rows.
//!
//! Formula (all implementations): `m = max_i x_i`, `s = Σ_i exp(x_i - m)`,
//! `p_i = exp(x_i - m) / s` (subtracting the maximum keeps `exp` from
//! overflowing). The top `k` entries are ordered by logit descending, equal
//! logits by lower index first; selection compares logits, not rounded
//! probabilities, so every implementation picks the same indices.
//! Logits must be finite.

use rayon::prelude::*;

use crate::error::{Error, Result};

/// Shapes of one call: `logits.len() == rows * cols`, outputs `rows * k`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TopKShape {
    pub rows: usize,
    pub cols: usize,
    pub k: usize,
}

impl TopKShape {
    pub(crate) fn check(&self, logits: &[f32], probs: &[f32], indices: &[u32]) -> Result<()> {
        if self.cols == 0 || self.k == 0 || self.k > self.cols {
            return Err(Error::input(format!(
                "top-k needs 0 < k <= cols, got k={} cols={}",
                self.k, self.cols
            )));
        }
        if self.cols > u32::MAX as usize / 2 || self.rows > i32::MAX as usize {
            return Err(Error::input("softmax dimensions too large"));
        }
        if logits.len() != self.rows * self.cols {
            return Err(Error::input(format!(
                "logits hold {} values, {}x{} expected",
                logits.len(),
                self.rows,
                self.cols
            )));
        }
        if probs.len() != self.rows * self.k || indices.len() != self.rows * self.k {
            return Err(Error::input(format!(
                "outputs hold {}/{} values, {}x{} expected",
                probs.len(),
                indices.len(),
                self.rows,
                self.k
            )));
        }
        Ok(())
    }
}

/// The selection order: `a` before `b` when its logit is larger, or equal
/// (−0 == +0) with a lower index.
#[inline]
fn ranks_before(a: (f32, usize), b: (f32, usize)) -> bool {
    a.0 > b.0 || (a.0 == b.0 && a.1 < b.1)
}

fn non_finite(row: usize, logits: &[f32]) -> Error {
    let col = logits.iter().position(|x| !x.is_finite()).unwrap_or(0);
    Error::input(format!(
        "logit at row {row}, column {col} is {}: logits must be finite",
        logits[col]
    ))
}

/// Scalar reference: f64 arithmetic, selection by repeated scans.
pub fn softmax_topk_reference(
    logits: &[f32],
    shape: TopKShape,
    probs: &mut [f32],
    indices: &mut [u32],
) -> Result<()> {
    shape.check(logits, probs, indices)?;
    for r in 0..shape.rows {
        let row = &logits[r * shape.cols..(r + 1) * shape.cols];
        if row.iter().any(|x| !x.is_finite()) {
            return Err(non_finite(r, row));
        }
        let max = row.iter().fold(f64::NEG_INFINITY, |m, &x| m.max(x as f64));
        let sum: f64 = row.iter().map(|&x| (x as f64 - max).exp()).sum();
        let mut previous: Option<(f32, usize)> = None;
        for t in 0..shape.k {
            let mut best: Option<(f32, usize)> = None;
            for (i, &x) in row.iter().enumerate() {
                let eligible = previous.is_none_or(|p| ranks_before(p, (x, i)));
                if eligible && best.is_none_or(|b| ranks_before((x, i), b)) {
                    best = Some((x, i));
                }
            }
            let (x, i) = best.unwrap_or((row[0], 0));
            probs[r * shape.k + t] = ((x as f64 - max).exp() / sum) as f32;
            indices[r * shape.k + t] = i as u32;
            previous = best;
        }
    }
    Ok(())
}

/// Row number, its logits, and its probability and index outputs.
type RowTask<'a> = (usize, ((&'a [f32], &'a mut [f32]), &'a mut [u32]));

/// Rows below this many logits in total are done on the calling thread:
/// rayon's hand-off costs more than the work.
const PARALLEL_MIN_ELEMENTS: usize = 1 << 15;

/// CPU fast path: f32, one pass for the maximum, one for the sum, and a
/// k-sized insertion buffer (small k) or a partial sort (large k); rows in
/// parallel when there are enough of them.
pub fn softmax_topk(
    logits: &[f32],
    shape: TopKShape,
    probs: &mut [f32],
    indices: &mut [u32],
) -> Result<()> {
    shape.check(logits, probs, indices)?;
    let (cols, k) = (shape.cols, shape.k);
    let one_row = |(r, ((row, probs), indices)): RowTask<'_>| {
        topk_row(row, probs, indices).map_err(|_| non_finite(r, row))
    };
    if logits.len() >= PARALLEL_MIN_ELEMENTS && shape.rows > 1 {
        logits
            .par_chunks_exact(cols)
            .zip(probs.par_chunks_exact_mut(k))
            .zip(indices.par_chunks_exact_mut(k))
            .enumerate()
            .try_for_each(one_row)
    } else {
        logits
            .chunks_exact(cols)
            .zip(probs.chunks_exact_mut(k))
            .zip(indices.chunks_exact_mut(k))
            .enumerate()
            .try_for_each(one_row)
    }
}

/// Insertion into a sorted buffer is O(n·k) worst case but O(n) for random
/// data with small k; above this k a partial sort wins.
const INSERTION_MAX_K: usize = 32;

fn topk_row(row: &[f32], probs: &mut [f32], indices: &mut [u32]) -> std::result::Result<(), ()> {
    // Chunked maximum so the compiler can vectorise it; NaN/inf checked by
    // the same pass (x * 0 is NaN exactly for non-finite x).
    let mut lanes = [f32::NEG_INFINITY; 8];
    let mut bad = [0.0f32; 8];
    let chunks = row.chunks_exact(8);
    let tail = chunks.remainder();
    for chunk in chunks {
        for t in 0..8 {
            lanes[t] = lanes[t].max(chunk[t]);
            bad[t] += chunk[t] * 0.0;
        }
    }
    let mut max = lanes.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut finite = bad.iter().all(|b| *b == 0.0);
    for &x in tail {
        max = max.max(x);
        finite &= x.is_finite();
    }
    if !finite {
        return Err(());
    }
    let sum: f32 = row.iter().map(|&x| (x - max).exp()).sum();
    let k = probs.len();
    if k <= INSERTION_MAX_K {
        let mut best: Vec<(f32, usize)> = Vec::with_capacity(k + 1);
        for (i, &x) in row.iter().enumerate() {
            // Indices rise, so an equal logit never beats the current last.
            if best.len() == k && x <= best[k - 1].0 {
                continue;
            }
            let at = best.partition_point(|&b| ranks_before(b, (x, i)));
            best.insert(at, (x, i));
            best.truncate(k);
        }
        for (t, (x, i)) in best.into_iter().enumerate() {
            probs[t] = (x - max).exp() / sum;
            indices[t] = i as u32;
        }
    } else {
        let mut order: Vec<(f32, usize)> = row.iter().copied().zip(0..).collect();
        let cmp = |a: &(f32, usize), b: &(f32, usize)| {
            if ranks_before(*a, *b) {
                std::cmp::Ordering::Less
            } else if ranks_before(*b, *a) {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        };
        if k < order.len() {
            order.select_nth_unstable_by(k - 1, cmp);
        }
        order.truncate(k);
        order.sort_unstable_by(cmp);
        for (t, (x, i)) in order.into_iter().enumerate() {
            probs[t] = (x - max).exp() / sum;
            indices[t] = i as u32;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ties_break_to_the_lower_index() {
        let logits = [1.0, 3.0, 3.0, -0.0, 0.0, 3.0];
        let shape = TopKShape {
            rows: 1,
            cols: 6,
            k: 5,
        };
        let (mut p, mut i) = (vec![0.0; 5], vec![0u32; 5]);
        softmax_topk(&logits, shape, &mut p, &mut i).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(i, [1, 2, 5, 0, 3]);
        let (mut pr, mut ir) = (vec![0.0; 5], vec![0u32; 5]);
        softmax_topk_reference(&logits, shape, &mut pr, &mut ir).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(ir, [1, 2, 5, 0, 3]);
        let total: f32 = [3.0f32, 3.0, 3.0, 1.0, 0.0, 0.0]
            .iter()
            .map(|x| x.exp())
            .sum();
        assert!((p[0] - 3.0f32.exp() / total).abs() < 1e-6);
    }

    #[test]
    fn large_logits_do_not_overflow() {
        let logits = [1000.0, 999.0];
        let shape = TopKShape {
            rows: 1,
            cols: 2,
            k: 2,
        };
        let (mut p, mut i) = (vec![0.0; 2], vec![0u32; 2]);
        softmax_topk(&logits, shape, &mut p, &mut i).unwrap_or_else(|e| panic!("{e}"));
        let expected = 1.0 / (1.0 + (-1.0f32).exp());
        assert!((p[0] - expected).abs() < 1e-6, "{p:?}");
    }

    #[test]
    fn rejects_non_finite_and_bad_k() {
        let shape = TopKShape {
            rows: 1,
            cols: 9,
            k: 1,
        };
        let mut logits = [0.0f32; 9];
        logits[8] = f32::NAN;
        let (mut p, mut i) = (vec![0.0; 1], vec![0u32; 1]);
        assert!(softmax_topk(&logits, shape, &mut p, &mut i).is_err());
        logits[8] = f32::INFINITY;
        assert!(softmax_topk(&logits, shape, &mut p, &mut i).is_err());
        logits[8] = 0.0;
        logits[2] = f32::NEG_INFINITY;
        assert!(softmax_topk(&logits, shape, &mut p, &mut i).is_err());
        let bad_k = TopKShape { k: 10, ..shape };
        assert!(softmax_topk(&[0.0; 9], bad_k, &mut p, &mut i).is_err());
    }
}
