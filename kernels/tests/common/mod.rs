//! Random inputs shared by the CPU and GPU equivalence tests.
#![allow(dead_code)] // each test binary uses a different subset

use infergate_kernels::nms::Candidate;
use infergate_kernels::preprocess::{PreprocessSpec, ResizeMode};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

pub fn rng(seed: u64) -> StdRng {
    StdRng::seed_from_u64(seed)
}

/// A smooth gradient plus noise: exercises interpolation (noise alone would
/// hide weight errors in averaging) and every byte value.
pub fn image(rng: &mut StdRng, width: usize, height: usize) -> Vec<u8> {
    let mut data = Vec::with_capacity(width * height * 3);
    for y in 0..height {
        for x in 0..width {
            for c in 0..3 {
                let ramp = (x * 255 / width.max(1) + y * 97 / height.max(1) + c * 40) % 256;
                let noise: i32 = rng.random_range(-40..=40);
                data.push((ramp as i32 + noise).clamp(0, 255) as u8);
            }
        }
    }
    data
}

pub const MODES: [ResizeMode; 3] = [
    ResizeMode::Stretch,
    ResizeMode::Letterbox { pad: 114 },
    ResizeMode::CenterCrop,
];

/// ImageNet normalisation: outputs around ±2.5, the usual scale.
pub fn imagenet(width: usize, height: usize, mode: ResizeMode) -> PreprocessSpec {
    PreprocessSpec {
        width,
        height,
        mean: [123.675, 116.28, 103.53],
        std: [58.395, 57.12, 57.375],
        mode,
    }
}

/// (source, output) sizes: odd sides, up- and down-scaling, 1-pixel edges,
/// mixed aspect ratios.
pub const SIZE_CASES: [((usize, usize), (usize, usize)); 10] = [
    ((1, 1), (3, 5)),
    ((2, 3), (7, 4)),
    ((17, 13), (5, 9)),
    ((31, 7), (64, 64)),
    ((64, 48), (224, 224)),
    ((101, 203), (32, 48)),
    ((640, 480), (224, 224)),
    ((333, 999), (37, 111)),
    ((1920, 1080), (224, 224)),
    ((5, 400), (320, 12)),
];

/// Clustered boxes (so suppression actually happens), few classes, scores
/// quantised to 1/64 so ties are common, some inverted and degenerate boxes.
pub fn candidates(rng: &mut StdRng, count: usize, classes: u32) -> Vec<Candidate> {
    let centres: Vec<(f32, f32)> = (0..(count / 8).max(1))
        .map(|_| (rng.random_range(0.0..600.0), rng.random_range(0.0..600.0)))
        .collect();
    (0..count)
        .map(|i| {
            let (cx, cy) = centres[rng.random_range(0..centres.len())];
            let x1 = cx + rng.random_range(-15.0..15.0);
            let y1 = cy + rng.random_range(-15.0..15.0);
            let (w, h) = if i % 50 == 7 {
                (-3.0, 0.0) // inverted / zero area
            } else {
                (rng.random_range(5.0..80.0), rng.random_range(5.0..80.0))
            };
            Candidate {
                x1,
                y1,
                x2: x1 + w,
                y2: y1 + h,
                score: (rng.random_range(0..=64) as f32) / 64.0,
                class: rng.random_range(0..classes),
            }
        })
        .collect()
}

pub fn logits(rng: &mut StdRng, len: usize, spread: f32) -> Vec<f32> {
    (0..len)
        .map(|_| {
            // Quantised so equal logits (ties) occur.
            let x: f32 = rng.random_range(-spread..spread);
            (x * 8.0).round() / 8.0
        })
        .collect()
}

pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}
