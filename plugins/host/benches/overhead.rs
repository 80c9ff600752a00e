//! Per-call host overhead of the pass-through plugin, against a plain memcpy
//! of the same payload, and instantiation with the pooling allocator on and
//! off. Bounded: a fixed number of iterations, about 10 s in all.
//!
//! `cargo bench -p infergate-plugin-host` (needs plugins/build.sh first).

use infergate_plugin_host::{Datatype, HostConfig, Plugin, PluginHost, PreInput, Tensor};
use std::hint::black_box;
use std::path::PathBuf;
use std::time::{Duration, Instant};

const BATCHES: usize = 21;

/// Median over `BATCHES` batches of the mean time per iteration.
fn measure(iterations: usize, mut run: impl FnMut(usize)) -> Duration {
    run(0); // warm up
    let mut per_call: Vec<Duration> = (0..BATCHES)
        .map(|_| {
            let start = Instant::now();
            for i in 0..iterations {
                run(i);
            }
            start.elapsed() / iterations as u32
        })
        .collect();
    per_call.sort();
    per_call[BATCHES / 2]
}

fn tensor(bytes: usize) -> Tensor {
    Tensor {
        name: "x".into(),
        datatype: Datatype::Fp32,
        shape: vec![(bytes / 4) as u64],
        data: (0..bytes).map(|i| i as u8).collect(),
    }
}

fn memcpy(bytes: usize, iterations: usize) -> Duration {
    let src = tensor(bytes).data;
    let mut dst = vec![0u8; bytes];
    measure(iterations, |_| {
        dst.copy_from_slice(black_box(&src));
        black_box(&mut dst);
    })
}

/// One full call: fresh store + instance, lower, run, lift, check. Each call
/// is timed on its own; preparing inputs and dropping outputs are not timed.
/// Returns the median.
fn call(plugin: &Plugin, bytes: usize, calls: usize) -> Duration {
    let input = tensor(bytes);
    let metadata = vec![];
    let mut times = Vec::with_capacity(calls);
    let mut outputs = Vec::with_capacity(calls.min(64));
    for round in 0..=calls / 64 {
        let n = if round == calls / 64 { calls % 64 } else { 64 };
        let inputs: Vec<Tensor> = (0..n).map(|_| input.clone()).collect();
        for tensor in inputs {
            let start = Instant::now();
            let out = plugin
                .preprocess(PreInput::Tensors(vec![tensor]), &metadata)
                .expect("pass-through call");
            times.push(start.elapsed());
            outputs.push(out);
        }
        outputs.clear();
    }
    times.sort();
    times[times.len() / 2]
}

fn instantiate(plugin: &Plugin, iterations: usize) -> Duration {
    measure(iterations, |_| {
        plugin.instantiate_only().expect("instantiate")
    })
}

fn us(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

fn main() {
    let dist = std::env::var_os("INFERGATE_PLUGIN_DIST")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../dist"));
    let path = dist.join("passthrough.wasm");
    let bytes = std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read {}: {e}; run plugins/build.sh first",
            path.display()
        )
    });
    let config = HostConfig {
        max_concurrent_calls: 16,
        ..HostConfig::default()
    };
    let pooled = PluginHost::new(config.clone()).expect("pooling host");
    let unpooled = PluginHost::without_pooling(config).expect("host without pooling");
    let pooled_plugin = pooled.compile(&bytes).expect("compile");
    let unpooled_plugin = unpooled.compile(&bytes).expect("compile");

    const SMALL: usize = 1024;
    const LARGE: usize = 224 * 224 * 3 * 4;
    let rows = [
        ("memcpy 1 KiB", memcpy(SMALL, 20_000)),
        ("call 1 KiB (pooling)", call(&pooled_plugin, SMALL, 2000)),
        (
            "call 1 KiB (no pooling)",
            call(&unpooled_plugin, SMALL, 1000),
        ),
        ("memcpy 588 KiB", memcpy(LARGE, 500)),
        ("call 588 KiB (pooling)", call(&pooled_plugin, LARGE, 300)),
        (
            "call 588 KiB (no pooling)",
            call(&unpooled_plugin, LARGE, 200),
        ),
        ("instantiate (pooling)", instantiate(&pooled_plugin, 1000)),
        (
            "instantiate (no pooling)",
            instantiate(&unpooled_plugin, 200),
        ),
    ];
    println!("\npass-through plugin, median of {BATCHES} batches, per call");
    println!("{:<28} {:>12}", "what", "time");
    for (name, time) in &rows {
        println!("{name:<28} {:>12}", us(*time));
    }
    let get = |name: &str| {
        rows.iter()
            .find(|(n, _)| *n == name)
            .map(|(_, d)| d.as_secs_f64())
            .unwrap_or(f64::NAN)
    };
    println!();
    println!(
        "1 KiB call (pooling): {} (target <= 20 µs)",
        us(Duration::from_secs_f64(get("call 1 KiB (pooling)")))
    );
    println!(
        "588 KiB call / memcpy: {:.2}x (target <= 3x)",
        get("call 588 KiB (pooling)") / get("memcpy 588 KiB")
    );
    println!(
        "instantiate, pooling off / on: {:.1}x",
        get("instantiate (no pooling)") / get("instantiate (pooling)")
    );
}
