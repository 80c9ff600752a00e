//! CPU fast paths against the scalar references on random inputs.

mod common;

use common::*;
use infergate_kernels::nms::{nms, nms_reference, NmsSpec};
use infergate_kernels::preprocess::{
    resize_normalize, resize_normalize_reference, ImageU8, PreprocessSpec, ResizeMode,
};
use infergate_kernels::softmax::{softmax_topk, softmax_topk_reference, TopKShape};

/// Fast path vs reference (f64): at most 0.02 of one 0‥255 pixel level
/// before normalisation, i.e. 0.02 / std after it. The bound is that of the
/// i16 fixed-point vertical weights (AVX-512BW CPUs), `127.5 · (taps - 1) /
/// scale` ≤ 0.017 levels for these sizes (≤ 7.3e-3 measured); the f32 path
/// (f32 weights) measures ≤ 7e-5.
const PREPROCESS_TOLERANCE_LEVELS: f32 = 2e-2;

fn check_preprocess(images: &[ImageU8<'_>], spec: &PreprocessSpec) {
    let len = images.len() * spec.output_len_per_image();
    let (mut fast, mut reference) = (vec![f32::NAN; len], vec![f32::NAN; len]);
    resize_normalize(images, spec, &mut fast).unwrap_or_else(|e| panic!("fast: {e}"));
    resize_normalize_reference(images, spec, &mut reference)
        .unwrap_or_else(|e| panic!("reference: {e}"));
    let min_std = spec.std.iter().copied().fold(f32::INFINITY, f32::min);
    let tolerance = PREPROCESS_TOLERANCE_LEVELS / min_std;
    let diff = max_abs_diff(&fast, &reference);
    if std::env::var_os("PRINT_ERRORS").is_some() {
        eprintln!("{:?} max diff {:e} levels", spec.mode, diff * min_std);
    }
    let sizes: Vec<_> = images.iter().map(|i| (i.width, i.height)).collect();
    assert!(
        diff <= tolerance,
        "{sizes:?} -> {}x{} {:?}: max |fast - reference| = {diff} > {tolerance}",
        spec.width,
        spec.height,
        spec.mode
    );
    assert!(fast.iter().all(|v| v.is_finite()));
}

#[test]
fn preprocess_fast_matches_reference_for_many_sizes_and_modes() {
    let mut rng = rng(1);
    for ((w, h), (out_w, out_h)) in SIZE_CASES {
        let data = image(&mut rng, w, h);
        let img = ImageU8::new(&data, w, h).unwrap_or_else(|e| panic!("{e}"));
        for mode in MODES {
            check_preprocess(&[img], &imagenet(out_w, out_h, mode));
        }
    }
}

#[test]
fn preprocess_batches_of_mixed_sizes() {
    let mut rng = rng(2);
    let sizes = [(37, 23), (8, 120), (300, 200), (1, 9), (224, 224)];
    let buffers: Vec<Vec<u8>> = sizes.iter().map(|&(w, h)| image(&mut rng, w, h)).collect();
    let images: Vec<ImageU8<'_>> = buffers
        .iter()
        .zip(sizes)
        .map(|(d, (w, h))| ImageU8::new(d, w, h).unwrap_or_else(|e| panic!("{e}")))
        .collect();
    for mode in MODES {
        check_preprocess(&images, &imagenet(41, 29, mode));
        // Unnormalised output (std 1): the tolerance is then in raw levels.
        let raw = PreprocessSpec {
            mean: [0.0; 3],
            std: [1.0; 3],
            ..imagenet(96, 64, mode)
        };
        check_preprocess(&images, &raw);
    }
}

#[test]
fn preprocess_preserves_a_constant_image_and_pads_letterbox() {
    let data = vec![200u8; 50 * 20 * 3];
    let img = ImageU8::new(&data, 50, 20).unwrap_or_else(|e| panic!("{e}"));
    let spec = PreprocessSpec {
        width: 30,
        height: 30,
        mean: [100.0, 0.0, 50.0],
        std: [2.0, 1.0, 10.0],
        mode: ResizeMode::Letterbox { pad: 114 },
    };
    let mut out = vec![0.0; spec.output_len_per_image()];
    resize_normalize(&[img], &spec, &mut out).unwrap_or_else(|e| panic!("{e}"));
    // 50x20 into 30x30: 30x12 at row 9.
    let plane = 900;
    for y in 0..30 {
        let expected: [f32; 3] = if (9..21).contains(&y) {
            [50.0, 200.0, 15.0]
        } else {
            [7.0, 114.0, 6.4]
        };
        for (c, e) in expected.iter().enumerate() {
            for x in 0..30 {
                let v = out[c * plane + y * 30 + x];
                assert!((v - e).abs() < 1e-4, "c{c} y{y} x{x}: {v} != {e}");
            }
        }
    }
}

#[test]
fn softmax_fast_matches_reference() {
    let mut rng = rng(3);
    // (rows, cols, k): k = 1, small k (insertion path), large k (partial
    // sort path), k = cols; rows enough to take the parallel path.
    let cases = [
        (1, 1, 1),
        (3, 7, 3),
        (5, 1000, 5),
        (64, 1000, 1),
        (2, 1000, 100),
        (40, 6625, 1),
        (4, 33, 33),
        (9, 129, 40),
    ];
    for (rows, cols, k) in cases {
        for spread in [1.0, 30.0] {
            let x = logits(&mut rng, rows * cols, spread);
            let shape = TopKShape { rows, cols, k };
            let (mut p, mut i) = (vec![0.0; rows * k], vec![0u32; rows * k]);
            let (mut pr, mut ir) = (vec![0.0; rows * k], vec![0u32; rows * k]);
            softmax_topk(&x, shape, &mut p, &mut i).unwrap_or_else(|e| panic!("{e}"));
            softmax_topk_reference(&x, shape, &mut pr, &mut ir).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(i, ir, "indices differ for {shape:?}");
            // f32 exp and sum vs f64: relative 1e-5, absolute floor 1e-7 for
            // tiny probabilities.
            for (a, b) in p.iter().zip(&pr) {
                assert!(
                    (a - b).abs() <= 1e-5 * b.abs() + 1e-7,
                    "{shape:?}: prob {a} vs reference {b}"
                );
            }
        }
    }
}

#[test]
fn nms_fast_keeps_exactly_the_reference_indices() {
    let mut rng = rng(4);
    for (items, boxes, classes) in [
        (1, 1, 1),
        (3, 17, 2),
        (2, 500, 3),
        (4, 2000, 80),
        (1, 5000, 1),
    ] {
        let cands = candidates(&mut rng, items * boxes, classes);
        for (iou_threshold, score_threshold, max_detections) in [
            (0.5, 0.1, 100),
            (0.3, 0.0, 10_000),
            (0.7, -1.0, 7),
            (0.0, 0.5, 300),
        ] {
            let spec = NmsSpec {
                iou_threshold,
                score_threshold,
                max_detections,
            };
            let fast = nms(&cands, boxes, &spec).unwrap_or_else(|e| panic!("{e}"));
            let reference = nms_reference(&cands, boxes, &spec).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(
                fast, reference,
                "{items}x{boxes} classes {classes} {spec:?}"
            );
            let kept: usize = fast.iter().map(Vec::len).sum();
            let above = cands.iter().filter(|c| c.score > score_threshold).count();
            // Guard against a vacuous pass: on the clustered inputs something
            // is kept and, where max_detections does not bind, something is
            // suppressed.
            if boxes >= 500 {
                assert!(kept > 0);
                if max_detections >= boxes {
                    assert!(kept < above, "nothing suppressed: {kept} of {above}");
                }
            }
        }
    }
}
