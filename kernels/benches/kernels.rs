//! `cargo bench -p infergate-kernels`: each op's CPU fast path against its
//! scalar reference (and, for preprocessing, against `fast_image_resize` +
//! a separate normalise pass), plus the GPU when one can be opened. Every
//! figure is measured in the same run, so the ratios are comparable. Each
//! measurement stops after ~1 s or its iteration cap.

use std::time::{Duration, Instant};

use fast_image_resize::{
    images::Image, images::ImageRef, FilterType, PixelType, ResizeAlg, ResizeOptions, Resizer,
};
use infergate_kernels::device::{ptx::PtxCache, Gpu};
use infergate_kernels::nms::{nms, nms_reference, Candidate, NmsSpec};
use infergate_kernels::preprocess::{
    resize_normalize, resize_normalize_reference, ImageU8, PreprocessSpec, ResizeMode,
};
use infergate_kernels::softmax::{softmax_topk, softmax_topk_reference, TopKShape};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Median wall time of `f` over up to `max_iters` runs (at least 3, at most
/// about `budget`), after one warm-up run.
fn time(max_iters: usize, budget: Duration, mut f: impl FnMut()) -> Duration {
    f();
    let start = Instant::now();
    let mut samples = Vec::new();
    while samples.len() < 3 || (samples.len() < max_iters && start.elapsed() < budget) {
        let t = Instant::now();
        f();
        samples.push(t.elapsed());
    }
    samples.sort();
    samples[samples.len() / 2]
}

/// Median wall times of `f` and `g`, run alternately (one call each per round, up to
/// `max_iters` rounds, at least 3, at most about `budget`) after one warm-up call each: on a
/// noisy machine both see the same interference, so their ratio is steadier than that of two
/// separate measurements.
fn time_pair(
    max_iters: usize,
    budget: Duration,
    mut f: impl FnMut(),
    mut g: impl FnMut(),
) -> (Duration, Duration) {
    f();
    g();
    let start = Instant::now();
    let (mut fs, mut gs) = (Vec::new(), Vec::new());
    while fs.len() < 3 || (fs.len() < max_iters && start.elapsed() < budget) {
        let t = Instant::now();
        f();
        fs.push(t.elapsed());
        let t = Instant::now();
        g();
        gs.push(t.elapsed());
    }
    fs.sort();
    gs.sort();
    (fs[fs.len() / 2], gs[gs.len() / 2])
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn photo(rng: &mut StdRng, width: usize, height: usize) -> Vec<u8> {
    // Smooth content with noise, like a camera frame (pure noise would make
    // every filter look equally wrong).
    let mut data = Vec::with_capacity(width * height * 3);
    for y in 0..height {
        for x in 0..width {
            for c in 0..3 {
                let v = 128.0
                    + 90.0 * ((x as f32 / 37.0 + c as f32).sin() * (y as f32 / 23.0).cos())
                    + rng.random_range(-20.0..20.0);
                data.push(v.clamp(0.0, 255.0) as u8);
            }
        }
    }
    data
}

/// `fast_image_resize` bilinear (PIL-style convolution, u8 out) followed by
/// the HWC u8 → NCHW f32 normalise pass a caller would have to write.
fn fir_then_normalize(
    resizer: &mut Resizer,
    src: &ImageRef<'_>,
    dst: &mut Image<'_>,
    spec: &PreprocessSpec,
    out: &mut [f32],
) {
    let options = ResizeOptions::new().resize_alg(ResizeAlg::Convolution(FilterType::Bilinear));
    if let Err(e) = resizer.resize(src, dst, &options) {
        panic!("fast_image_resize: {e}");
    }
    let plane = spec.width * spec.height;
    let inv_std = spec.std.map(|s| 1.0 / s);
    for (p, px) in dst.buffer().chunks_exact(3).enumerate() {
        for c in 0..3 {
            out[c * plane + p] = (px[c] as f32 - spec.mean[c]) * inv_std[c];
        }
    }
}

/// Max and mean absolute error in 0‥255 pixel levels (undoing the std).
fn error_levels(got: &[f32], want: &[f32], std: f32) -> (f64, f64) {
    let mut max = 0.0f64;
    let mut sum = 0.0f64;
    for (a, b) in got.iter().zip(want) {
        let d = ((a - b).abs() * std) as f64;
        max = max.max(d);
        sum += d;
    }
    (max, sum / got.len() as f64)
}

fn bench_preprocess(gpu: Option<&Gpu>) {
    let (w, h) = (1920usize, 1080usize);
    let mut rng = StdRng::seed_from_u64(7);
    let frames: Vec<Vec<u8>> = (0..8).map(|_| photo(&mut rng, w, h)).collect();
    let images: Vec<ImageU8<'_>> = frames
        .iter()
        .map(|d| ImageU8::new(d, w, h).unwrap_or_else(|e| panic!("{e}")))
        .collect();
    // Same std for all channels so the level conversion is exact.
    let spec = PreprocessSpec {
        width: 224,
        height: 224,
        mean: [127.0; 3],
        std: [128.0; 3],
        mode: ResizeMode::Stretch,
    };
    let per = spec.output_len_per_image();
    let budget = Duration::from_millis(1500);
    println!(
        "\n== preprocessing {w}x{h} RGB8 -> 224x224 NCHW f32 (bilinear, antialiased), per image =="
    );
    let threads = rayon::current_num_threads();

    // Single-image runs rotate over 8 frames (48 MB): a frame is not
    // cache-hot when it is processed, as in serving.
    let mut next = 0usize;
    let mut rotate = || {
        next = (next + 1) % images.len();
        next
    };
    let mut out1 = vec![0.0f32; per];
    let fast1 = time(2000, budget, || {
        let i = rotate();
        resize_normalize(&images[i..i + 1], &spec, &mut out1).unwrap_or_else(|e| panic!("{e}"))
    });
    let mut out8 = vec![0.0f32; per * 8];
    let fast8 = time(300, budget, || {
        resize_normalize(&images, &spec, &mut out8).unwrap_or_else(|e| panic!("{e}"))
    }) / 8;
    let single = match rayon::ThreadPoolBuilder::new().num_threads(1).build() {
        Ok(pool) => pool,
        Err(e) => panic!("rayon pool: {e}"),
    };
    let mut reference = vec![0.0f32; per];
    let reference_t = time(3, budget, || {
        resize_normalize_reference(&images[..1], &spec, &mut reference)
            .unwrap_or_else(|e| panic!("{e}"))
    });
    let sources: Vec<ImageRef<'_>> = frames
        .iter()
        .map(|f| {
            ImageRef::new(w as u32, h as u32, f, PixelType::U8x3).unwrap_or_else(|e| panic!("{e}"))
        })
        .collect();
    let mut dst = Image::new(224, 224, PixelType::U8x3);
    let mut resizer = Resizer::new();
    let mut fir_out = vec![0.0f32; per];
    // The 1-thread fast path and fir (single-threaded) alternate call by call, each on
    // the next frame of the rotation.
    let next = std::sync::atomic::AtomicUsize::new(0);
    let rotate = || (next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1) % images.len();
    let (fast_1t, fir) = single.install(|| {
        time_pair(
            4000,
            2 * budget,
            || {
                let i = rotate();
                resize_normalize(&images[i..i + 1], &spec, &mut out1)
                    .unwrap_or_else(|e| panic!("{e}"))
            },
            || {
                let i = rotate();
                fir_then_normalize(&mut resizer, &sources[i], &mut dst, &spec, &mut fir_out)
            },
        )
    });
    // Accuracy of both on frame 0, the reference's input.
    resize_normalize(&images[..1], &spec, &mut out1).unwrap_or_else(|e| panic!("{e}"));
    fir_then_normalize(&mut resizer, &sources[0], &mut dst, &spec, &mut fir_out);

    println!(
        "fast path, batch 1, {threads} threads : {:8.3} ms",
        ms(fast1)
    );
    println!(
        "fast path, batch 8, {threads} threads : {:8.3} ms/image",
        ms(fast8)
    );
    println!("fast path, batch 1, 1 thread   : {:8.3} ms", ms(fast_1t));
    println!(
        "fast_image_resize + normalize  : {:8.3} ms (1 thread, its rayon feature off; alternated with the 1-thread fast path)",
        ms(fir)
    );
    println!(
        "scalar reference (f64)         : {:8.3} ms",
        ms(reference_t)
    );
    println!(
        "ratios: fir+normalize / fast = {:.2}x (1 thread: {:.2}x); reference / fast = {:.0}x",
        fir.as_secs_f64() / fast1.as_secs_f64(),
        fir.as_secs_f64() / fast_1t.as_secs_f64(),
        reference_t.as_secs_f64() / fast1.as_secs_f64()
    );
    let (fast_max, fast_mean) = error_levels(&out1, &reference, 128.0);
    let (fir_max, fir_mean) = error_levels(&fir_out, &reference, 128.0);
    println!("error vs f64 reference, 0..255 levels: fast max {fast_max:.2e} mean {fast_mean:.2e}; fir+normalize max {fir_max:.2e} mean {fir_mean:.2e}");

    if let Some(gpu) = gpu {
        let batch: Vec<ImageU8<'_>> = (0..32).map(|i| images[i % images.len()]).collect();
        let resident = match gpu.upload(&batch) {
            Ok(r) => r,
            Err(e) => return println!("GPU upload failed: {e}"),
        };
        let Ok(mut device_out) = gpu.alloc::<f32>(per * 32) else {
            return println!("GPU alloc failed");
        };
        let kernel = time(500, budget, || {
            gpu.resize_normalize_on_device(&resident, &spec, &mut device_out)
                .and_then(|()| gpu.synchronize())
                .unwrap_or_else(|e| panic!("{e}"))
        }) / 32;
        let mut host_out = vec![0.0f32; per * 32];
        let end_to_end = time(100, budget, || {
            gpu.resize_normalize(&batch, &spec, &mut host_out)
                .unwrap_or_else(|e| panic!("{e}"))
        }) / 32;
        // Batch 8 (50 MB of 1080p pixels) fits the 128 MiB pinned staging pool; batch 32
        // (199 MB) does not, so each of its calls allocates and frees pinned memory.
        let batch8 = &batch[..8];
        let mut host_out8 = vec![0.0f32; per * 8];
        let end_to_end8 = time(100, budget, || {
            gpu.resize_normalize(batch8, &spec, &mut host_out8)
                .unwrap_or_else(|e| panic!("{e}"))
        }) / 8;
        let (gpu_max, gpu_mean) = error_levels(&host_out[..per], &reference, 128.0);
        println!(
            "GPU {} batch 32, device-resident : {:8.4} ms/image",
            gpu.name(),
            ms(kernel)
        );
        println!(
            "GPU batch 32, host->device->host      : {:8.4} ms/image",
            ms(end_to_end)
        );
        println!(
            "GPU batch 8, host->device->host       : {:8.4} ms/image (staging fits the pinned pool)",
            ms(end_to_end8)
        );
        println!("GPU error vs f64 reference: max {gpu_max:.2e} mean {gpu_mean:.2e} levels");
    }
}

fn bench_nms(gpu: Option<&Gpu>) {
    let mut rng = StdRng::seed_from_u64(9);
    let n = 10_000;
    // Detector-like output: boxes clustered around 300 objects, 80 classes.
    let objects: Vec<(f32, f32, f32, f32, u32)> = (0..300)
        .map(|_| {
            (
                rng.random_range(0.0..1200.0),
                rng.random_range(0.0..700.0),
                rng.random_range(20.0..200.0),
                rng.random_range(20.0..200.0),
                rng.random_range(0..80),
            )
        })
        .collect();
    let cands: Vec<Candidate> = (0..n)
        .map(|_| {
            let (x, y, w, h, class) = objects[rng.random_range(0..objects.len())];
            let jitter = |r: &mut StdRng, s: f32| r.random_range(-0.15..0.15) * s;
            let x1 = x + jitter(&mut rng, w);
            let y1 = y + jitter(&mut rng, h);
            Candidate {
                x1,
                y1,
                x2: x1 + w + jitter(&mut rng, w),
                y2: y1 + h + jitter(&mut rng, h),
                score: rng.random_range(0.0..1.0),
                class,
            }
        })
        .collect();
    println!("\n== NMS, {n} candidates, 300 objects, 80 classes ==");
    let budget = Duration::from_millis(1500);
    for (label, spec) in [
        (
            "iou 0.5, score > 0.25, max 300",
            NmsSpec {
                iou_threshold: 0.5,
                score_threshold: 0.25,
                max_detections: 300,
            },
        ),
        (
            "iou 0.5, score > 0.001, max 10000",
            NmsSpec {
                iou_threshold: 0.5,
                score_threshold: 0.001,
                max_detections: 10_000,
            },
        ),
    ] {
        let mut kept = 0;
        let fast = time(2000, budget, || {
            kept = nms(&cands, n, &spec)
                .map(|k| k[0].len())
                .unwrap_or_else(|e| panic!("{e}"))
        });
        let reference = time(200, budget, || {
            nms_reference(&cands, n, &spec).unwrap_or_else(|e| panic!("{e}"));
        });
        println!(
            "{label}: kept {kept}; fast {:.3} ms, reference {:.3} ms, reference / fast = {:.1}x",
            ms(fast),
            ms(reference),
            reference.as_secs_f64() / fast.as_secs_f64()
        );
        if let Some(gpu) = gpu {
            let t = time(200, budget, || {
                gpu.nms(&cands, n, &spec).unwrap_or_else(|e| panic!("{e}"));
            });
            println!("  GPU (incl. copies): {:.3} ms", ms(t));
        }
    }
}

fn bench_softmax(gpu: Option<&Gpu>) {
    let mut rng = StdRng::seed_from_u64(5);
    println!("\n== softmax + top-k ==");
    let budget = Duration::from_millis(1000);
    for (rows, cols, k, what) in [
        (32, 1000, 5, "ImageNet logits, batch 32"),
        (32 * 40, 6625, 1, "OCR CTC steps, batch 32 x 40"),
        (8, 30_000, 50, "vocabulary 30k, k 50"),
    ] {
        let logits: Vec<f32> = (0..rows * cols)
            .map(|_| rng.random_range(-10.0..10.0))
            .collect();
        let shape = TopKShape { rows, cols, k };
        let (mut p, mut i) = (vec![0.0; rows * k], vec![0u32; rows * k]);
        let fast = time(2000, budget, || {
            softmax_topk(&logits, shape, &mut p, &mut i).unwrap_or_else(|e| panic!("{e}"))
        });
        let reference = time(50, budget, || {
            softmax_topk_reference(&logits, shape, &mut p, &mut i).unwrap_or_else(|e| panic!("{e}"))
        });
        println!(
            "{what} ({rows}x{cols}, k={k}): fast {:.3} ms, reference {:.3} ms, reference / fast = {:.1}x",
            ms(fast),
            ms(reference),
            reference.as_secs_f64() / fast.as_secs_f64()
        );
        if let Some(gpu) = gpu {
            let t = time(500, budget, || {
                gpu.softmax_topk(&logits, shape, &mut p, &mut i)
                    .unwrap_or_else(|e| panic!("{e}"))
            });
            println!("  GPU (incl. copies): {:.3} ms", ms(t));
        }
    }
}

fn main() {
    // `cargo bench -p infergate-kernels -- [preprocess] [nms] [softmax]`
    // runs a subset; cargo's own `--bench` flag is ignored.
    let only: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let wanted = |name: &str| only.is_empty() || only.iter().any(|o| o == name);
    let gpu = match Gpu::open(0, PtxCache::from_env().as_ref()) {
        Ok(gpu) => Some(gpu),
        Err(e) => {
            println!("GPU figures skipped: {e}");
            None
        }
    };
    if wanted("preprocess") {
        bench_preprocess(gpu.as_ref());
    }
    if wanted("nms") {
        bench_nms(gpu.as_ref());
    }
    if wanted("softmax") {
        bench_softmax(gpu.as_ref());
    }
}
