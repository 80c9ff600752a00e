//! Per-call host overhead of the pass-through plugin against a plain memcpy
//! of the same payload measured in the same run, and instantiation with the
//! pooling allocator on and off. Bounded: a fixed number of iterations, a few
//! seconds in all.
//!
//! `cargo bench -p infergate-plugin-host` (needs plugins/build.sh first);
//! `cargo bench -p infergate-plugin-host -- 588` runs only the rows whose
//! name contains `588`.
//!
//! A call is timed from handing the owned input to `preprocess` until its
//! output tensors are returned: fresh store and instance, lowering, the
//! guest, lifting, and the reset of the instance's memory when its store is
//! dropped. Cloning the input before and dropping the output after are not
//! timed (a server parses the one and sends the other).

use infergate_plugin_host::{DataType, HostConfig, Plugin, PluginHost, PreInput, Tensor};
use std::hint::black_box;
use std::path::PathBuf;
use std::time::{Duration, Instant};

const SMALL: usize = 1024;
/// 224×224×3 f32: one ImageNet-sized model input.
const LARGE: usize = 224 * 224 * 3 * 4;
/// Timed operations per batch; batches of the compared operations alternate,
/// so a change in the machine's load hits both sides of a ratio alike.
const BATCH: usize = 50;

fn tensor(bytes: usize) -> Tensor {
    Tensor {
        name: "x".into(),
        datatype: DataType::Fp32,
        shape: vec![(bytes / 4) as u64],
        data: (0..bytes).map(|i| i as u8).collect(),
    }
}

/// Something timed one operation at a time.
trait Timed {
    fn once(&mut self) -> Duration;
}

struct Memcpy {
    src: Vec<u8>,
    dst: Vec<u8>,
}

impl Memcpy {
    fn new(bytes: usize) -> Self {
        Memcpy {
            src: tensor(bytes).data,
            dst: vec![0u8; bytes],
        }
    }
}

impl Timed for Memcpy {
    fn once(&mut self) -> Duration {
        let start = Instant::now();
        self.dst.copy_from_slice(black_box(&self.src));
        black_box(&mut self.dst);
        start.elapsed()
    }
}

struct Call<'a> {
    plugin: &'a Plugin,
    input: Tensor,
}

impl Timed for Call<'_> {
    fn once(&mut self) -> Duration {
        let input = PreInput::Tensors(vec![self.input.clone()]);
        let start = Instant::now();
        let output = self
            .plugin
            .preprocess(input, &Vec::new())
            .expect("pass-through call");
        let elapsed = start.elapsed();
        assert_eq!(output[0].data.len(), self.input.data.len());
        drop(black_box(output));
        elapsed
    }
}

/// A small call on the pool slot a large call just used: the slot keeps the
/// large call's pages mapped, and resetting them is paid again by each call
/// that reuses the slot (the price of not faulting them in anew).
struct SmallAfterLarge<'a> {
    large: Call<'a>,
    small: Call<'a>,
}

impl Timed for SmallAfterLarge<'_> {
    fn once(&mut self) -> Duration {
        self.large.once();
        self.small.once()
    }
}

struct Instantiate<'a>(&'a Plugin);

impl Timed for Instantiate<'_> {
    fn once(&mut self) -> Duration {
        let start = Instant::now();
        self.0.instantiate_only().expect("instantiate");
        start.elapsed()
    }
}

/// Median single-operation time of each of `subjects`, after one warm-up
/// batch each, over `batches` alternating batches.
fn medians(subjects: &mut [&mut dyn Timed], batches: usize) -> Vec<Duration> {
    let mut times = vec![Vec::with_capacity(batches * BATCH); subjects.len()];
    for round in 0..=batches {
        for (subject, times) in subjects.iter_mut().zip(&mut times) {
            for _ in 0..BATCH {
                let time = subject.once();
                if round > 0 {
                    times.push(time);
                }
            }
        }
    }
    times
        .into_iter()
        .map(|mut t| {
            t.sort();
            t[t.len() / 2]
        })
        .collect()
}

fn us(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

fn main() {
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let wanted = |name: &str| filters.is_empty() || filters.iter().any(|f| name.contains(f));

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
    let pooled = pooled.compile(&bytes).expect("compile");
    let unpooled = unpooled.compile(&bytes).expect("compile");
    let call = |plugin, bytes| Call {
        plugin,
        input: tensor(bytes),
    };

    println!("\npass-through plugin, fresh instance per call; median of single operations");
    println!("{:<36} {:>12}", "what", "time");
    let mut results: Vec<(String, Duration)> = Vec::new();
    let mut run = |names: &[&str], subjects: &mut [&mut dyn Timed], batches| {
        if !names.iter().any(|n| wanted(n)) {
            return;
        }
        for (name, time) in names.iter().zip(medians(subjects, batches)) {
            println!("{name:<36} {:>12}", us(time));
            results.push((name.to_string(), time));
        }
    };
    run(
        &["memcpy 1 KiB", "call 1 KiB (pooling)"],
        &mut [&mut Memcpy::new(SMALL), &mut call(&pooled, SMALL)],
        40,
    );
    run(
        &["instantiate (pooling)", "instantiate (no pooling)"],
        &mut [&mut Instantiate(&pooled), &mut Instantiate(&unpooled)],
        10,
    );
    run(
        &["call 1 KiB (no pooling)", "call 588 KiB (no pooling)"],
        &mut [&mut call(&unpooled, SMALL), &mut call(&unpooled, LARGE)],
        6,
    );
    run(
        &["memcpy 588 KiB", "call 588 KiB (pooling)"],
        &mut [&mut Memcpy::new(LARGE), &mut call(&pooled, LARGE)],
        20,
    );
    run(
        &["call 1 KiB after 588 KiB (pooling)"],
        &mut [&mut SmallAfterLarge {
            large: call(&pooled, LARGE),
            small: call(&pooled, SMALL),
        }],
        10,
    );

    let get = |name: &str| {
        results
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, d)| d.as_secs_f64())
    };
    println!();
    if let Some(small) = get("call 1 KiB (pooling)") {
        println!(
            "1 KiB call (pooling): {} (target <= 20 µs)",
            us(Duration::from_secs_f64(small))
        );
    }
    if let (Some(call), Some(memcpy)) = (get("call 588 KiB (pooling)"), get("memcpy 588 KiB")) {
        println!(
            "588 KiB call / memcpy: {:.2}x (target <= 3x)",
            call / memcpy
        );
        if let Some(small) = get("call 1 KiB (pooling)") {
            // Copying in and out is two memcpys by itself; the rest of the
            // payload-dependent time is resetting the memory the payload dirtied.
            println!(
                "  of which payload-dependent (588 KiB call - 1 KiB call): {:.2}x memcpy",
                (call - small) / memcpy
            );
        }
    }
    if let (Some(off), Some(on)) = (
        get("instantiate (no pooling)"),
        get("instantiate (pooling)"),
    ) {
        println!("instantiate, pooling off / on: {:.1}x", off / on);
    }
}
