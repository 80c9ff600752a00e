//! CUDA kernels against the CPU references on random inputs. Runs only with
//! `INFERGATE_GPU_TESTS=1` (and then fails if no GPU can be opened);
//! otherwise each test prints why it skipped.

mod common;

use common::*;
use infergate_kernels::device::{ptx::PtxCache, Gpu};
use infergate_kernels::nms::{nms_reference, NmsSpec};
use infergate_kernels::preprocess::{resize_normalize_reference, ImageU8};
use infergate_kernels::softmax::{softmax_topk_reference, TopKShape};
use infergate_kernels::{DeviceChoice, Error, Ops};

fn gpu_or_skip() -> Option<Gpu> {
    if !std::env::var("INFERGATE_GPU_TESTS").is_ok_and(|v| v == "1") {
        eprintln!("skipping GPU test: set INFERGATE_GPU_TESTS=1 on a machine with a GPU");
        return None;
    }
    let cache = PtxCache::from_env();
    match Gpu::open(0, cache.as_ref()) {
        Ok(gpu) => {
            eprintln!(
                "GPU {} (sm {:?}), kernels for {}",
                gpu.name(),
                gpu.compute_capability(),
                gpu.arch()
            );
            Some(gpu)
        }
        Err(e) => panic!("INFERGATE_GPU_TESTS=1 but the GPU cannot be opened: {e}"),
    }
}

/// CUDA f32 (on-the-fly weights, FMA contraction, the sampling centre in f64) vs the f64
/// reference, in 0‥255 levels before normalisation. Measured on an H200 (2026-11-26): at most
/// 3.0e-4 over every case of `SIZE_CASES`; 1e-3 leaves room for another GPU's rounding.
const GPU_PREPROCESS_TOLERANCE_LEVELS: f32 = 1e-3;

#[test]
fn gpu_preprocess_matches_reference() {
    let Some(gpu) = gpu_or_skip() else {
        return;
    };
    let mut rng = rng(11);
    let buffers: Vec<(Vec<u8>, usize, usize)> = SIZE_CASES
        .iter()
        .map(|&((w, h), _)| (image(&mut rng, w, h), w, h))
        .collect();
    let images: Vec<ImageU8<'_>> = buffers
        .iter()
        .map(|(d, w, h)| ImageU8::new(d, *w, *h).unwrap_or_else(|e| panic!("{e}")))
        .collect();
    for (_, (out_w, out_h)) in SIZE_CASES {
        for mode in MODES {
            let spec = imagenet(out_w, out_h, mode);
            let len = images.len() * spec.output_len_per_image();
            let (mut got, mut want) = (vec![f32::NAN; len], vec![f32::NAN; len]);
            gpu.resize_normalize(&images, &spec, &mut got)
                .unwrap_or_else(|e| panic!("{e}"));
            resize_normalize_reference(&images, &spec, &mut want).unwrap_or_else(|e| panic!("{e}"));
            let min_std = spec.std.iter().copied().fold(f32::INFINITY, f32::min);
            let diff = max_abs_diff(&got, &want);
            eprintln!(
                "{out_w}x{out_h} {mode:?}: max diff {:e} levels",
                diff * min_std
            );
            assert!(
                diff <= GPU_PREPROCESS_TOLERANCE_LEVELS / min_std,
                "{out_w}x{out_h} {mode:?}: {diff}"
            );
        }
    }
}

#[test]
fn gpu_softmax_topk_matches_reference() {
    let Some(gpu) = gpu_or_skip() else {
        return;
    };
    let mut rng = rng(12);
    for (rows, cols, k) in [
        (1, 1, 1),
        (3, 7, 3),
        (64, 1000, 5),
        (7, 6625, 1),
        (2, 300, 300),
        (5, 33, 17),
    ] {
        let x = logits(&mut rng, rows * cols, 20.0);
        let shape = TopKShape { rows, cols, k };
        let (mut p, mut i) = (vec![0.0; rows * k], vec![0u32; rows * k]);
        let (mut pr, mut ir) = (vec![0.0; rows * k], vec![0u32; rows * k]);
        gpu.softmax_topk(&x, shape, &mut p, &mut i)
            .unwrap_or_else(|e| panic!("{e}"));
        softmax_topk_reference(&x, shape, &mut pr, &mut ir).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(i, ir, "{shape:?}");
        // expf is within 2 ulp; sums in a different order: relative 1e-5.
        for (a, b) in p.iter().zip(&pr) {
            assert!(
                (a - b).abs() <= 1e-5 * b.abs() + 1e-7,
                "{shape:?}: {a} vs {b}"
            );
        }
    }
}

#[test]
fn gpu_nms_keeps_exactly_the_reference_indices() {
    let Some(gpu) = gpu_or_skip() else {
        return;
    };
    let mut rng = rng(13);
    for (items, boxes, classes) in [
        (1, 1, 1),
        (3, 17, 2),
        (2, 500, 3),
        (4, 2000, 80),
        (1, 10_000, 5),
    ] {
        let cands = candidates(&mut rng, items * boxes, classes);
        for (iou_threshold, score_threshold, max_detections) in [
            (0.5, 0.1, 100),
            (0.3, 0.0, 100_000),
            (0.7, -1.0, 7),
            (0.0, 0.5, 300),
        ] {
            let spec = NmsSpec {
                iou_threshold,
                score_threshold,
                max_detections,
            };
            let got = gpu
                .nms(&cands, boxes, &spec)
                .unwrap_or_else(|e| panic!("{e}"));
            let want = nms_reference(&cands, boxes, &spec).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(got, want, "{items}x{boxes} classes {classes} {spec:?}");
        }
    }
}

#[test]
fn ops_returns_input_errors_without_falling_back() {
    let Some(_) = gpu_or_skip() else {
        return;
    };
    let ops = Ops::new(DeviceChoice::Cuda(0), None);
    assert!(ops.gpu().is_some());
    let shape = TopKShape {
        rows: 1,
        cols: 2,
        k: 1,
    };
    let err = ops.softmax_topk(&[0.0, f32::NAN], shape, &mut [0.0], &mut [0]);
    assert!(matches!(err, Err(Error::InvalidInput(_))));
}

#[test]
fn ops_without_a_gpu_still_serves_on_cpu() {
    // Runs everywhere: on a CPU-only host `Auto` must quietly pick the CPU.
    let ops = Ops::new(DeviceChoice::Auto, None);
    let shape = TopKShape {
        rows: 2,
        cols: 3,
        k: 2,
    };
    let (mut p, mut i) = ([0.0; 4], [0u32; 4]);
    ops.softmax_topk(&[1.0, 3.0, 2.0, 0.0, 0.0, 5.0], shape, &mut p, &mut i)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(i, [1, 2, 2, 0]);
}

/// After the first call of a shape, calls on every op (and on a forked stream) take their
/// buffers from the pools: the allocator is not called again.
#[test]
fn gpu_ops_reuse_pooled_buffers_after_warm_up() {
    let Some(gpu) = gpu_or_skip() else {
        return;
    };
    let forked = gpu.fork().unwrap_or_else(|e| panic!("{e}"));
    let mut rng = rng(5);
    let logits: Vec<f32> = (0..8 * 1000)
        .map(|i| ((i * 37) % 101) as f32 / 7.0)
        .collect();
    let shape = TopKShape {
        rows: 8,
        cols: 1000,
        k: 5,
    };
    let pixels = image(&mut rng, 640, 480);
    let images = [ImageU8::new(&pixels, 640, 480).unwrap_or_else(|e| panic!("{e}"))];
    let spec = imagenet(224, 224, MODES[0]);
    let run = |g: &Gpu| {
        let (mut p, mut i) = (vec![0f32; 40], vec![0u32; 40]);
        g.softmax_topk(&logits, shape, &mut p, &mut i)
            .unwrap_or_else(|e| panic!("{e}"));
        let mut out = vec![0f32; spec.output_len_per_image()];
        g.resize_normalize(&images, &spec, &mut out)
            .unwrap_or_else(|e| panic!("{e}"));
        (p, i, out)
    };
    let first = run(&gpu);
    let warm = gpu.memory_stats();
    assert!(warm.device.misses > 0 && warm.pinned.misses > 0);
    for g in [&gpu, &forked, &gpu] {
        assert_eq!(run(g), first, "pooled buffers give the same results");
    }
    let after = gpu.memory_stats();
    assert_eq!(after.device.misses, warm.device.misses, "{after:?}");
    assert_eq!(after.pinned.misses, warm.pinned.misses, "{after:?}");
    assert!(after.device.hits >= warm.device.hits + 3 * warm.device.misses);
    assert!(after.device.held_bytes <= after.device.limit_bytes);
}

/// What a worker reports of its GPUs, on a real one: the driver's listing (name, memory,
/// compute capability), memory in use, and NVML's figures for the same device, matched by
/// PCI bus id. A GPU machine has NVML beside its driver, so here an answer of `None` (NVML
/// could not match the device) is a bug, not an absence.
#[test]
fn gpu_inventory_and_nvml_figures_describe_the_same_device() {
    use infergate_kernels::device::{inventory, nvml};
    if gpu_or_skip().is_none() {
        return;
    }
    let gpus = inventory::list_gpus().unwrap_or_else(|e| panic!("{e}"));
    assert!(!gpus.is_empty(), "the driver lists no GPU");
    let used = inventory::memory_in_use().unwrap_or_else(|e| panic!("{e}"));
    let bus_ids = inventory::pci_bus_ids().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((used.len(), bus_ids.len()), (gpus.len(), gpus.len()));
    let figures = nvml::usage(&bus_ids).unwrap_or_else(|e| panic!("NVML on a GPU host: {e}"));
    for (((gpu, used), bus_id), nvml) in gpus.iter().zip(&used).zip(&bus_ids).zip(&figures) {
        eprintln!("{gpu:?} bus {bus_id}: {used} bytes in use (driver), NVML {nvml:?}");
        assert!(!gpu.name.is_empty() && gpu.memory_bytes > 0, "{gpu:?}");
        assert!(*used > 0 && *used <= gpu.memory_bytes, "{gpu:?}: {used}");
        let nvml = nvml.unwrap_or_else(|| panic!("NVML does not know {bus_id} ({gpu:?})"));
        assert!(nvml.utilisation_percent <= 100, "{nvml:?}");
        // Both count every process's allocations; they differ by what each reserves for
        // itself, far less than a tenth of the device.
        let gap = nvml.memory_used_bytes.abs_diff(*used);
        assert!(
            gap < gpu.memory_bytes / 10,
            "driver {used} vs NVML {nvml:?}"
        );
    }
}
