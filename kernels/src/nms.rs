//! Class-aware greedy non-max suppression over `[N, boxes]` candidates.
//!
//! Per batch item: candidates with `score > score_threshold` are visited in
//! order of score descending, equal scores (−0 == +0) by lower index first.
//! A candidate is kept unless a box already kept *of the same class* has
//! `iou(kept, candidate) > iou_threshold`; visiting stops after
//! `max_detections` boxes are kept. The result is the kept indices (within
//! the item) in visiting order.
//!
//! IoU uses only correctly rounded IEEE operations in a fixed order (see
//! [`iou`]); the CUDA kernel spells them with `__fmul_rn`-style intrinsics so
//! NVRTC cannot contract them into FMAs. The CPU fast path, the reference and
//! the GPU therefore keep exactly the same indices.

use std::collections::HashMap;

use rayon::prelude::*;

use crate::error::{Error, Result};

/// One candidate box, corners in any consistent unit. `#[repr(C)]` so a
/// slice of them is also the GPU kernel's input layout.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Candidate {
    pub x1: f32,
    pub y1: f32,
    pub x2: f32,
    pub y2: f32,
    pub score: f32,
    pub class: u32,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NmsSpec {
    /// Suppress when IoU is strictly greater than this.
    pub iou_threshold: f32,
    /// Keep candidates whose score is strictly greater than this.
    pub score_threshold: f32,
    pub max_detections: usize,
}

impl NmsSpec {
    pub(crate) fn check(&self, candidates: &[Candidate], boxes_per_item: usize) -> Result<()> {
        if self.iou_threshold.is_nan() || self.score_threshold.is_nan() {
            return Err(Error::input("NMS thresholds must not be NaN"));
        }
        if boxes_per_item == 0 || !candidates.len().is_multiple_of(boxes_per_item) {
            return Err(Error::input(format!(
                "{} candidates do not split into items of {boxes_per_item} boxes",
                candidates.len()
            )));
        }
        if boxes_per_item > i32::MAX as usize {
            return Err(Error::input("too many boxes per item"));
        }
        if let Some(i) = candidates.iter().position(|c| c.score.is_nan()) {
            return Err(Error::input(format!(
                "candidate {i} (item {}, box {}) has a NaN score",
                i / boxes_per_item,
                i % boxes_per_item
            )));
        }
        Ok(())
    }
}

/// `max(x2 - x1, 0) * max(y2 - y1, 0)`: inverted boxes have no area.
#[inline]
pub(crate) fn area(c: &Candidate) -> f32 {
    (c.x2 - c.x1).max(0.0) * (c.y2 - c.y1).max(0.0)
}

/// IoU of `a` (the kept box) and `b`, given their areas:
/// `inter / ((area_a + area_b) - inter)`, 0 when the union is not positive.
#[inline]
pub(crate) fn iou(a: &Candidate, area_a: f32, b: &Candidate, area_b: f32) -> f32 {
    let w = (a.x2.min(b.x2) - a.x1.max(b.x1)).max(0.0);
    let h = (a.y2.min(b.y2) - a.y1.max(b.y1)).max(0.0);
    let inter = w * h;
    let union = (area_a + area_b) - inter;
    if union > 0.0 {
        inter / union
    } else {
        0.0
    }
}

/// Scalar reference: sort, then compare each candidate with every kept box.
pub fn nms_reference(
    candidates: &[Candidate],
    boxes_per_item: usize,
    spec: &NmsSpec,
) -> Result<Vec<Vec<u32>>> {
    spec.check(candidates, boxes_per_item)?;
    Ok(candidates
        .chunks_exact(boxes_per_item)
        .map(|item| {
            let mut order: Vec<usize> = (0..item.len())
                .filter(|&i| item[i].score > spec.score_threshold)
                .collect();
            order.sort_by(|&a, &b| {
                item[b]
                    .score
                    .partial_cmp(&item[a].score)
                    .unwrap_or(std::cmp::Ordering::Equal)
                    .then(a.cmp(&b))
            });
            let mut kept: Vec<usize> = Vec::new();
            for i in order {
                if kept.len() >= spec.max_detections {
                    break;
                }
                let c = &item[i];
                let suppressed = kept.iter().any(|&k| {
                    let kb = &item[k];
                    kb.class == c.class && iou(kb, area(kb), c, area(c)) > spec.iou_threshold
                });
                if !suppressed {
                    kept.push(i);
                }
            }
            kept.into_iter().map(|i| i as u32).collect()
        })
        .collect())
}

/// A sort key whose ascending `u64` order is (score descending, index
/// ascending). −0 is folded into +0 first: they compare equal as floats, so
/// the index must decide, as it does in the reference and on the GPU.
#[inline]
fn order_key(score: f32, index: usize) -> u64 {
    let score = if score == 0.0 { 0.0 } else { score };
    let bits = score.to_bits();
    // Map IEEE bits onto an unsigned order (negatives reversed), then invert
    // so larger scores come first.
    let ascending = if bits & 0x8000_0000 != 0 {
        !bits
    } else {
        bits | 0x8000_0000
    };
    (u64::from(!ascending) << 32) | index as u64
}

/// CPU fast path: integer sort keys, areas computed once, kept boxes bucketed
/// by class so a candidate is only compared with its own class; batch items
/// in parallel.
pub fn nms(
    candidates: &[Candidate],
    boxes_per_item: usize,
    spec: &NmsSpec,
) -> Result<Vec<Vec<u32>>> {
    spec.check(candidates, boxes_per_item)?;
    Ok(candidates
        .par_chunks_exact(boxes_per_item)
        .map(|item| nms_item(item, spec))
        .collect())
}

fn nms_item(item: &[Candidate], spec: &NmsSpec) -> Vec<u32> {
    let mut keys: Vec<u64> = item
        .iter()
        .enumerate()
        .filter(|(_, c)| c.score > spec.score_threshold)
        .map(|(i, c)| order_key(c.score, i))
        .collect();
    keys.sort_unstable();
    let mut kept = Vec::new();
    // (box, area) of the kept boxes of each class.
    let mut by_class: HashMap<u32, Vec<(Candidate, f32)>> = HashMap::new();
    for key in keys {
        if kept.len() >= spec.max_detections {
            break;
        }
        let i = (key & 0xffff_ffff) as usize;
        let c = &item[i];
        let area_c = area(c);
        let same_class = by_class.entry(c.class).or_default();
        let suppressed = same_class
            .iter()
            .any(|(k, area_k)| iou(k, *area_k, c, area_c) > spec.iou_threshold);
        if !suppressed {
            same_class.push((*c, area_c));
            kept.push(i as u32);
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cand(x1: f32, y1: f32, x2: f32, y2: f32, score: f32, class: u32) -> Candidate {
        Candidate {
            x1,
            y1,
            x2,
            y2,
            score,
            class,
        }
    }

    const SPEC: NmsSpec = NmsSpec {
        iou_threshold: 0.5,
        score_threshold: 0.1,
        max_detections: 10,
    };

    #[test]
    fn suppresses_overlaps_within_a_class_only() {
        let boxes = [
            cand(0.0, 0.0, 10.0, 10.0, 0.9, 0),
            cand(1.0, 1.0, 11.0, 11.0, 0.8, 0), // IoU 81/119 with box 0: suppressed
            cand(1.0, 1.0, 11.0, 11.0, 0.7, 1), // other class: kept
            cand(20.0, 20.0, 30.0, 30.0, 0.6, 0),
            cand(20.0, 20.0, 30.0, 30.0, 0.05, 0), // below score threshold
        ];
        let expected = vec![vec![0u32, 2, 3]];
        assert_eq!(nms(&boxes, 5, &SPEC).ok(), Some(expected.clone()));
        assert_eq!(nms_reference(&boxes, 5, &SPEC).ok(), Some(expected));
    }

    #[test]
    fn equal_scores_visit_lower_index_first_including_signed_zero() {
        let spec = NmsSpec {
            score_threshold: -1.0,
            ..SPEC
        };
        let boxes = [
            cand(0.0, 0.0, 10.0, 10.0, 0.0, 0),
            cand(0.0, 0.0, 10.0, 10.0, -0.0, 0),
            cand(0.0, 0.0, 10.0, 10.0, 0.0, 1),
            cand(0.0, 0.0, 10.0, 10.0, -0.0, 1),
        ];
        // Within each class the two identical boxes tie; the lower index wins.
        assert_eq!(nms(&boxes, 4, &spec).ok(), Some(vec![vec![0, 2]]));
        let boxes = [boxes[1], boxes[0], boxes[3], boxes[2]];
        assert_eq!(nms(&boxes, 4, &spec).ok(), Some(vec![vec![0, 2]]));
        assert_eq!(nms_reference(&boxes, 4, &spec).ok(), Some(vec![vec![0, 2]]));
    }

    #[test]
    fn order_key_sorts_scores_descending() {
        let scores = [f32::INFINITY, 3.0, 1.0, 0.0, -0.0, -1.0, f32::NEG_INFINITY];
        let keys: Vec<u64> = scores.iter().map(|&s| order_key(s, 7)).collect();
        assert!(keys[..3].windows(2).all(|w| w[0] < w[1]));
        assert_eq!(keys[3], keys[4]);
        assert!(keys[4..].windows(2).all(|w| w[0] < w[1]));
        assert!(order_key(1.0, 1) < order_key(1.0, 2));
    }

    #[test]
    fn stops_at_max_detections_and_rejects_nan() {
        let boxes: Vec<Candidate> = (0..20)
            .map(|i| cand(i as f32 * 20.0, 0.0, i as f32 * 20.0 + 10.0, 10.0, 0.5, 0))
            .collect();
        let kept = nms(&boxes, 20, &SPEC).unwrap_or_default();
        assert_eq!(kept, vec![(0..10).collect::<Vec<u32>>()]);
        let mut bad = boxes.clone();
        bad[3].score = f32::NAN;
        assert!(matches!(nms(&bad, 20, &SPEC), Err(Error::InvalidInput(_))));
        assert!(nms(&boxes, 7, &SPEC).is_err());
    }
}
