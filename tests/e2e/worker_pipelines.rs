//! Pipelines whose model stage runs on a worker: the native op (resize + normalize)
//! runs with the model on the worker and the manager sends the decoded image, or with
//! `[cluster] pipeline_ops = "manager"` runs it itself and sends the model's input. Both answer
//! what an all-in-one server answers, on the demo `classify` pipeline, on the same pipeline
//! without its post-plugin (the model's 1000 probabilities), and on the demo `ocr` pipeline (its
//! detection stage's resize goes with the detector and the angle classifier too).

use crate::harness::Server;
use crate::websocket::metric;
use crate::workers::{manager, token, until, Worker};
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;

const MODELS: [(&str, &str); 4] = [
    ("efficientnet-lite0", "efficientnet-lite0.onnx"),
    ("ocr-det", "ocr-det.onnx"),
    ("ocr-cls", "ocr-cls.onnx"),
    ("ocr-rec", "ocr-rec.onnx"),
];
/// The photo `classify` gets: odd sizes, so the resize interpolates in both directions.
const WIDTH: usize = 97;
const HEIGHT: usize = 61;
/// EfficientNet-Lite0's input as FP32 [1, 3, 224, 224]: what the manager sends when it runs
/// the op itself.
const MODEL_INPUT_BYTES: f64 = (3 * 224 * 224 * 4) as f64;

/// A PNG drawn by the setup step's Pillow: `draw` is Python with `img` (RGB, WIDTH×HEIGHT
/// `w`×`h`) and `ImageDraw`, `ImageFont` in scope.
pub fn png(out: &Path, width: usize, height: usize, draw: &str) -> Vec<u8> {
    let python = std::env::var("INFERGATE_PYTHON")
        .expect("INFERGATE_PYTHON is unset: run scripts/setup.sh and `source .cache/env.sh`");
    let script = format!(
        "import sys; from PIL import Image, ImageDraw, ImageFont; w, h = {width}, {height}; \
         img = Image.new('RGB', (w, h), 'white'); {draw}; img.save(sys.argv[1])"
    );
    let status = std::process::Command::new(python)
        .args(["-c", &script, out.to_str().unwrap()])
        .status()
        .expect("run python");
    assert!(status.success(), "Pillow could not write the test image");
    std::fs::read(out).unwrap()
}

/// Colour gradients and a square, for `classify`.
const GRADIENTS: &str = "img.putdata([(x * 255 // w, y * 255 // h, (x * y) % 256) \
    for y in range(h) for x in range(w)]); \
    ImageDraw.Draw(img).rectangle((20, 15, 50, 40), fill=(250, 240, 10))";
/// Two lines of black text on white, for `ocr`.
const TEXT: &str = "d = ImageDraw.Draw(img); f = ImageFont.load_default(size=30); \
    d.text((14, 12), 'FIRST LINE 1', fill='black', font=f); \
    d.text((14, 72), 'SECOND 22', fill='black', font=f)";

/// What the three pipelines answer.
struct Answers {
    classify: Value,
    probabilities: Vec<f64>,
    ocr: Value,
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
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../plugins/dist"));
    for plugin in ["image-decode", "imagenet-topk", "ctc-decode"] {
        let wasm = std::fs::read(plugins.join(format!("{plugin}.wasm")))
            .unwrap_or_else(|e| panic!("{plugin}.wasm: {e}: run plugins/build.sh"));
        as_admin(s, plugin, s.client.post(s.url("/api/plugins")).body(wasm)).await;
    }
    let demo = |name: &str| -> Value {
        let file =
            Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../../scripts/demo/{name}.json"));
        serde_json::from_slice(&std::fs::read(file).unwrap()).unwrap()
    };
    let classify = demo("classify");
    let mut probabilities = classify.clone();
    probabilities["post"] = json!([]);
    let pipelines = [
        ("classify", classify),
        ("probabilities", probabilities),
        ("ocr", demo("ocr")),
    ];
    for (name, spec) in pipelines {
        let url = s.url(&format!("/api/pipelines/{name}"));
        as_admin(s, name, s.client.put(url).json(&spec)).await;
    }
}

/// Pipeline `name`'s JSON answer to a PNG.
async fn run(s: &Server, name: &str, image: &[u8]) -> Value {
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
    body
}

/// The classify pipelines' answers to `photo`, the bytes a manager sent its worker for them
/// (none on an all-in-one server), then the ocr pipeline's answer to `text`.
async fn answers(s: &Server, photo: &[u8], text: &[u8]) -> (Answers, f64) {
    let classify = run(s, "classify", photo).await;
    let probabilities = run(s, "probabilities", photo).await["outputs"][0]["data"]
        .as_array()
        .expect("the probabilities")
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    let sent = metric(s, "infergate_worker_request_bytes_total", &[]).await;
    let ocr = run(s, "ocr", text).await;
    let answers = Answers {
        classify,
        probabilities,
        ocr,
    };
    (answers, sent)
}

/// A manager (no local engine) with `[cluster] pipeline_ops = ops` and one worker; the
/// pipelines' answers and the bytes the manager sent the worker for them.
async fn through_a_worker(ops: &str, photo: &[u8], text: &[u8]) -> (Answers, f64) {
    let config_dir = tempfile::tempdir().unwrap();
    let config = config_dir.path().join("infergate.toml");
    std::fs::write(&config, format!("[cluster]\npipeline_ops = \"{ops}\"\n")).unwrap();
    let (data, s) = manager(&MODELS, &["--config".into(), config.display().to_string()]);
    save_pipelines(&s).await;
    let dir = tempfile::tempdir().unwrap();
    let _worker = Worker::start(&s.addr, &token(data.path()), dir.path());
    until(&s, Duration::from_secs(10), "a ready worker", |l| {
        l.len() == 1
    })
    .await;
    let (answers, sent) = answers(&s, photo, text).await;
    assert_eq!(metric(&s, "infergate_worker_retries_total", &[]).await, 0.0);
    (answers, sent)
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

fn assert_same(what: &str, expected: &Answers, got: &Answers) {
    // The same classes in the same order with the same scores; the same lines, boxes and texts.
    for (pipeline, e, g) in [
        ("classify", &expected.classify, &got.classify),
        ("ocr", &expected.ocr, &got.ocr),
    ] {
        assert!(same_json(e, g), "{what}, {pipeline}: {e} vs {g}");
    }
    assert_eq!(expected.probabilities.len(), 1000, "{what}");
    let worst = expected
        .probabilities
        .iter()
        .zip(&got.probabilities)
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
    let photo = png(&tmp.path().join("photo.png"), WIDTH, HEIGHT, GRADIENTS);
    let text = png(&tmp.path().join("text.png"), 420, 140, TEXT);

    let single = Server::with_models(&MODELS);
    save_pipelines(&single).await;
    let (expected, _) = answers(&single, &photo, &text).await;
    drop(single);
    assert!(
        expected.classify.to_string().contains("label"),
        "classify answers labels: {}",
        expected.classify
    );
    assert!(
        expected.ocr["regions"]
            .as_array()
            .is_some_and(|r| r.len() == 2),
        "ocr reads two lines: {}",
        expected.ocr
    );

    let (got, sent) = through_a_worker("worker", &photo, &text).await;
    assert_same("op on the worker", &expected, &got);
    // Two requests, each the decoded image (3 bytes a pixel) and a JSON header: far less than
    // the model's FP32 input.
    let image_bytes = (WIDTH * HEIGHT * 3) as f64;
    assert_two_requests_of("op on the worker", sent, image_bytes);

    let (got, sent) = through_a_worker("manager", &photo, &text).await;
    assert_same("op on the manager", &expected, &got);
    assert_two_requests_of("op on the manager", sent, MODEL_INPUT_BYTES);
}
