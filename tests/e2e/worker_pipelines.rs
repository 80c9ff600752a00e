//! Pipelines whose model stage runs on a worker (issue 14): the native op (resize + normalize)
//! runs with the model on the worker and the manager sends the decoded image, or with
//! `[cluster] pipeline_ops = "manager"` runs it itself and sends the model's input. Both answer
//! what an all-in-one server answers, on the demo `classify` pipeline and on the same pipeline
//! without its post-plugin (the model's 1000 probabilities).

use crate::harness::Server;
use crate::websocket::metric;
use crate::workers::{manager, token, until, Worker};
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;

const MODEL: (&str, &str) = ("efficientnet-lite0", "efficientnet-lite0.onnx");
/// The image the test sends: odd sizes, so the resize interpolates in both directions.
const WIDTH: usize = 97;
const HEIGHT: usize = 61;
/// EfficientNet-Lite0's input as FP32 [1, 3, 224, 224]: what the manager sends when it runs
/// the op itself.
const MODEL_INPUT_BYTES: f64 = (3 * 224 * 224 * 4) as f64;

/// A PNG with colour gradients and a square, written by the setup step's Pillow.
fn png(out: &Path) -> Vec<u8> {
    let python = std::env::var("INFERGATE_PYTHON")
        .expect("INFERGATE_PYTHON is unset: run scripts/setup.sh and `source .cache/env.sh`");
    let script = "import sys; from PIL import Image, ImageDraw; w, h = int(sys.argv[2]), int(sys.argv[3]); \
        img = Image.new('RGB', (w, h)); \
        img.putdata([(x * 255 // w, y * 255 // h, (x * y) % 256) for y in range(h) for x in range(w)]); \
        ImageDraw.Draw(img).rectangle((20, 15, 50, 40), fill=(250, 240, 10)); img.save(sys.argv[1])";
    let status = std::process::Command::new(python)
        .args(["-c", script, out.to_str().unwrap()])
        .args([WIDTH.to_string(), HEIGHT.to_string()])
        .status()
        .expect("run python");
    assert!(status.success(), "Pillow could not write the test image");
    std::fs::read(out).unwrap()
}

/// Sends `request` with the admin key, expecting success.
async fn as_admin(s: &Server, what: &str, request: reqwest::RequestBuilder) {
    let r = request.bearer_auth(&s.admin_key).send().await.unwrap();
    assert!(
        r.status().is_success(),
        "{what}: {}",
        r.text().await.unwrap()
    );
}

/// The demo `classify` pipeline (scripts/demo/classify.json) and `probabilities`: the same
/// without its post-plugin, saved through the API.
async fn save_pipelines(s: &Server) {
    let plugins = std::env::var("INFERGATE_PLUGINS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins/dist"));
    for plugin in ["image-decode", "imagenet-topk"] {
        let wasm = std::fs::read(plugins.join(format!("{plugin}.wasm")))
            .unwrap_or_else(|e| panic!("{plugin}.wasm: {e}: run plugins/build.sh"));
        as_admin(s, plugin, s.client.post(s.url("/api/plugins")).body(wasm)).await;
    }
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/demo/classify.json");
    let classify: Value = serde_json::from_slice(&std::fs::read(demo).unwrap()).unwrap();
    let mut probabilities = classify.clone();
    probabilities["post"] = json!([]);
    for (name, spec) in [("classify", classify), ("probabilities", probabilities)] {
        let url = s.url(&format!("/api/pipelines/{name}"));
        as_admin(s, name, s.client.put(url).json(&spec)).await;
    }
}

/// Both pipelines' answers to the image.
async fn answers(s: &Server, image: &[u8]) -> (Value, Vec<f64>) {
    let mut out = Vec::new();
    for name in ["classify", "probabilities"] {
        let r = s
            .client
            .post(s.url(&format!("/api/pipelines/{name}/run")))
            .bearer_auth(&s.admin_key)
            .header("content-type", "image/png")
            .body(image.to_vec())
            .send()
            .await
            .unwrap();
        let status = r.status();
        let body: Value = r.json().await.unwrap();
        assert_eq!(status, 200, "{name}: {body}");
        out.push(body);
    }
    let probabilities = out[1]["outputs"][0]["data"]
        .as_array()
        .expect("the probabilities")
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    (out.swap_remove(0), probabilities)
}

/// A manager (no local engine) with `[cluster] pipeline_ops = ops` and one worker; the
/// pipelines' answers and the bytes the manager sent the worker for them.
async fn through_a_worker(ops: &str, image: &[u8]) -> (Value, Vec<f64>, f64) {
    let config_dir = tempfile::tempdir().unwrap();
    let config = config_dir.path().join("infergate.toml");
    std::fs::write(&config, format!("[cluster]\npipeline_ops = \"{ops}\"\n")).unwrap();
    let (data, s) = manager(&[MODEL], &["--config".into(), config.display().to_string()]);
    save_pipelines(&s).await;
    let dir = tempfile::tempdir().unwrap();
    let _worker = Worker::start(&s.addr, &token(data.path()), dir.path());
    until(&s, Duration::from_secs(10), "a ready worker", |l| {
        l.len() == 1
    })
    .await;
    let (classify, probabilities) = answers(&s, image).await;
    let sent = metric(&s, "infergate_worker_request_bytes_total", &[]).await;
    assert_eq!(metric(&s, "infergate_worker_retries_total", &[]).await, 0.0);
    (classify, probabilities, sent)
}

/// The same JSON, numbers within `1e-5` (the model's own float noise between processes).
fn same_json(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            (x.as_f64().unwrap() - y.as_f64().unwrap()).abs() < 1e-5
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same_json(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| same_json(v, w)))
        }
        _ => a == b,
    }
}

fn assert_same(what: &str, expected: &(Value, Vec<f64>), got: &(Value, Vec<f64>)) {
    // The same classes in the same order with the same scores.
    assert!(
        same_json(&expected.0, &got.0),
        "{what}: {} vs {}",
        expected.0,
        got.0
    );
    assert_eq!(expected.1.len(), 1000, "{what}");
    let worst = expected
        .1
        .iter()
        .zip(&got.1)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    assert!(
        worst < 1e-5,
        "{what}: probabilities differ by up to {worst}"
    );
}

/// `sent` bytes are two requests of `payload` tensor bytes each, plus their JSON headers.
fn assert_two_requests_of(what: &str, sent: f64, payload: f64) {
    assert!(
        (2.0 * payload..2.0 * (payload + 4096.0)).contains(&sent),
        "{what}: {sent} bytes sent for two requests of {payload} tensor bytes"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pipelines_on_a_worker_answer_as_on_one_host_and_send_the_pre_op_tensors() {
    let tmp = tempfile::tempdir().unwrap();
    let image = png(&tmp.path().join("test.png"));

    let single = Server::with_models(&[MODEL]);
    save_pipelines(&single).await;
    let expected = answers(&single, &image).await;
    drop(single);
    assert!(
        expected.0.to_string().contains("label"),
        "classify answers labels: {}",
        expected.0
    );

    let (classify, probabilities, sent) = through_a_worker("worker", &image).await;
    assert_same("op on the worker", &expected, &(classify, probabilities));
    // Two requests, each the decoded image (3 bytes a pixel) and a JSON header: far less than
    // the model's FP32 input.
    let image_bytes = (WIDTH * HEIGHT * 3) as f64;
    assert_two_requests_of("op on the worker", sent, image_bytes);

    let (classify, probabilities, sent) = through_a_worker("manager", &image).await;
    assert_same("op on the manager", &expected, &(classify, probabilities));
    assert_two_requests_of("op on the manager", sent, MODEL_INPUT_BYTES);
}
