//! Dynamic batching at the engine level: EfficientNet-Lite0 on the CPU, one instance, at
//! concurrency 1, 8 and 32, batching off vs on (max_batch_size 16, max_queue_delay 2 ms).
//! Prints throughput and p50/p99 latency per case, and the issue's two ratios from this one run.
//!
//! `cargo bench -p infergate-engine --bench batching` with `ORT_DYLIB_PATH` and
//! `INFERGATE_MODELS` set. Bounded: `BENCH_REQUESTS` requests per concurrency step (default 96,
//! at least 4 × concurrency), `BENCH_INTRA_THREADS` ORT threads (default 2).

use infergate_engine::{Engine, EngineConfig, ModelConfig, ModelKey, Tensor};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Case {
    throughput: f64,
    p50: Duration,
    p99: Duration,
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

async fn run_case(
    engine: &Arc<Engine>,
    key: &ModelKey,
    path: &Path,
    image: &[Tensor],
    concurrency: usize,
    requests: usize,
) -> Case {
    let issued = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let workers: Vec<_> = (0..concurrency)
        .map(|_| {
            let (engine, key, path, image, issued) = (
                engine.clone(),
                key.clone(),
                path.to_path_buf(),
                image.to_vec(),
                issued.clone(),
            );
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                while issued.fetch_add(1, Ordering::Relaxed) < requests {
                    let t = Instant::now();
                    engine
                        .infer(&key, &path, image.clone(), vec!["logits".into()])
                        .await
                        .expect("inference succeeds");
                    latencies.push(t.elapsed());
                }
                latencies
            })
        })
        .collect();
    let mut latencies = Vec::with_capacity(requests);
    for w in workers {
        latencies.extend(w.await.expect("worker"));
    }
    let elapsed = started.elapsed();
    latencies.sort();
    Case {
        throughput: latencies.len() as f64 / elapsed.as_secs_f64(),
        p50: percentile(&latencies, 0.50),
        p99: percentile(&latencies, 0.99),
    }
}

fn main() {
    let (Some(lib), Some(models)) = (
        std::env::var_os("ORT_DYLIB_PATH"),
        std::env::var_os("INFERGATE_MODELS"),
    ) else {
        eprintln!("skipped: set ORT_DYLIB_PATH and INFERGATE_MODELS (source .cache/env.sh)");
        return;
    };
    let path = PathBuf::from(models).join("efficientnet-lite0.onnx");
    let intra = env_usize("BENCH_INTRA_THREADS", 2);
    let base_requests = env_usize("BENCH_REQUESTS", 96);
    let mut config = EngineConfig::new(lib);
    config.intra_threads = Some(intra);
    config.instances = Some(1);
    config.max_queue_size = 256;
    let engine = Arc::new(Engine::new(config).expect("engine"));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let off = ModelKey {
        name: "effnet-unbatched".into(),
        version: 1,
    };
    let on = ModelKey {
        name: "effnet-batched".into(),
        version: 1,
    };
    let batching = ModelConfig::from_json_str(
        r#"{"max_batch_size": 16, "dynamic_batching": {"max_queue_delay_microseconds": 2000}}"#,
    )
    .expect("config");
    let pixels: Vec<f32> = (0..3 * 224 * 224)
        .map(|i| ((i * 7919) % 255) as f32 / 128.0 - 1.0)
        .collect();
    let image = vec![Tensor::from_f32("input", vec![1, 3, 224, 224], &pixels).expect("tensor")];
    println!(
        "efficientnet-lite0, CPU, 1 instance, intra_threads {intra}; batching on = max_batch_size 16, max_queue_delay 2 ms"
    );
    println!(
        "{:<10} {:>11} {:>12} {:>10} {:>10}",
        "batching", "concurrency", "infer/s", "p50 ms", "p99 ms"
    );
    let results = runtime.block_on(async {
        engine.set_config(&on, batching).await.expect("set config");
        for key in [&off, &on] {
            engine.load(key, &path).await.expect("load");
            // Warm both before measuring: first runs pay ORT's lazy allocations.
            run_case(&engine, key, &path, &image, 16, 32).await;
        }
        let mut results = Vec::new();
        for concurrency in [1usize, 8, 32] {
            let requests = base_requests.max(4 * concurrency);
            for (label, key) in [("off", &off), ("on", &on)] {
                let case = run_case(&engine, key, &path, &image, concurrency, requests).await;
                println!(
                    "{label:<10} {concurrency:>11} {:>12.1} {:>10.1} {:>10.1}",
                    case.throughput,
                    case.p50.as_secs_f64() * 1e3,
                    case.p99.as_secs_f64() * 1e3
                );
                results.push((label, concurrency, case));
            }
        }
        results
    });
    let find = |label: &str, c: usize| {
        results
            .iter()
            .find(|(l, cc, _)| *l == label && *cc == c)
            .map(|(_, _, case)| case)
            .expect("case ran")
    };
    let speedup = find("on", 32).throughput / find("off", 32).throughput;
    let p99_ratio = find("on", 1).p99.as_secs_f64() / find("off", 1).p99.as_secs_f64();
    println!("throughput at concurrency 32, on/off: {speedup:.2}x (target >= 2x)");
    println!("p99 at concurrency 1, on/off: {p99_ratio:.2}x (target < 2x)");
    if let Some(s) = engine.stats(&on) {
        let batches: Vec<String> = s
            .batch_stats
            .iter()
            .map(|b| format!("{}x{}", b.batch_size, b.compute_infer.count))
            .collect();
        println!("batched executions (size x count): {}", batches.join(" "));
    }
}
