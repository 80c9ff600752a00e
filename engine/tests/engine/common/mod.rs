//! Shared helpers for the engine's integration tests, which run the real models.

#![allow(dead_code)] // each test binary uses a different subset

use infergate_engine::{Engine, EngineConfig, ModelConfig, ModelKey, Tensor};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// An engine on the real ONNX Runtime, or `None` (with the reason printed) when
/// `ORT_DYLIB_PATH` is unset. CI always sets it. One instance of one intra-op thread unless
/// `adjust` says otherwise, so tests behave the same whatever the machine's cores.
pub fn engine(adjust: impl FnOnce(&mut EngineConfig)) -> Option<Engine> {
    let Some(lib) = std::env::var_os("ORT_DYLIB_PATH") else {
        eprintln!("skipped: ORT_DYLIB_PATH is unset (source .cache/env.sh)");
        return None;
    };
    let mut config = EngineConfig::new(lib);
    config.instances = Some(1);
    config.intra_threads = Some(1);
    adjust(&mut config);
    Some(Engine::new(config).expect("engine starts"))
}

/// A model file from `$INFERGATE_MODELS`; with ORT present the models must be too.
pub fn model(file: &str) -> PathBuf {
    let dir = std::env::var_os("INFERGATE_MODELS")
        .expect("INFERGATE_MODELS must be set when ORT_DYLIB_PATH is (source .cache/env.sh)");
    let path = PathBuf::from(dir).join(file);
    assert!(path.is_file(), "{} is missing", path.display());
    path
}

pub fn key(name: &str, version: u64) -> ModelKey {
    ModelKey {
        name: name.into(),
        version,
    }
}

pub fn config(json: &str) -> ModelConfig {
    ModelConfig::from_json_str(json).expect("valid config")
}

/// Sets a version's config (JSON) and loads it.
pub async fn load_configured(engine: &Engine, k: &ModelKey, path: &Path, json: &str) {
    engine.set_config(k, config(json)).await.unwrap();
    engine.load(k, path).await.unwrap();
}

/// Deterministic pseudo-random values in [-1, 1).
pub fn values(seed: u64, n: usize) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

/// One EfficientNet input image [1, 3, 224, 224].
pub fn image(seed: u64) -> Vec<Tensor> {
    vec![Tensor::from_f32("input", vec![1, 3, 224, 224], &values(seed, 3 * 224 * 224)).unwrap()]
}

/// One MiniLM request of `seq` tokens.
pub fn tokens(seed: u64, seq: usize) -> Vec<Tensor> {
    let ids: Vec<i64> = (0..seq)
        .map(|i| 100 + ((seed as i64 * 31 + i as i64 * 7) % 5000))
        .collect();
    let s = vec![1, seq as i64];
    vec![
        Tensor::from_i64("input_ids", s.clone(), &ids).unwrap(),
        Tensor::from_i64("attention_mask", s.clone(), &vec![1; seq]).unwrap(),
        Tensor::from_i64("token_type_ids", s, &vec![0; seq]).unwrap(),
    ]
}

/// Largest absolute difference between two FP32 tensors of the same shape.
pub fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
    assert_eq!(a.shape, b.shape, "shapes of '{}'", a.name);
    let (a, b) = (a.to_f32().unwrap(), b.to_f32().unwrap());
    a.iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Polls `cond` until it holds; fails after a generous bound so a broken engine cannot hang the
/// suite. Nothing is asserted about how long it took.
pub async fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let give_up = Instant::now() + Duration::from_secs(60);
    while !cond() {
        assert!(Instant::now() < give_up, "gave up waiting until {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Writes a tiny batching model ([N,16] -> x + x, runs of microseconds) into `dir` with the
/// setup step's Python (scripts/tiny_model.py).
pub fn tiny_model(dir: &Path) -> PathBuf {
    let path = dir.join("tiny.onnx");
    run_script(
        "tiny_model.py",
        &["--dynamic-batch".as_ref(), path.as_os_str()],
    );
    path
}

/// Writes one of `scripts/test_models.py`'s models (`kind`: `string-identity`, `accumulator`)
/// into `dir` with the setup step's Python.
pub fn test_model(dir: &Path, kind: &str) -> PathBuf {
    let path = dir.join(format!("{kind}.onnx"));
    run_script("test_models.py", &[kind.as_ref(), path.as_os_str()]);
    path
}

/// Runs a script of `scripts/` with the setup step's Python; fails the test if it fails.
fn run_script(script: &str, args: &[&std::ffi::OsStr]) {
    let python = std::env::var("INFERGATE_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../scripts")
        .join(script);
    let status = std::process::Command::new(python)
        .arg(&script)
        .args(args)
        .status()
        .expect("run python (source .cache/env.sh)");
    assert!(status.success(), "{} {args:?} failed", script.display());
}
