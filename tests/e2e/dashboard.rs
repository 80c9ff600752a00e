//! The dashboard in a real browser (Debian's headless Chromium over WebDriver) against the
//! real gateway: static serving, sign-in, model upload, playground inference, keys, errors,
//! both layouts. Screenshots of every page go to target/dashboard-screenshots/.
//!
//! Needs `dashboard/build.sh` to have run and `chromium` + `chromium-driver` installed; without
//! them the test fails and says which setup step is missing.

use crate::harness::{model, register, Options, Server};
use crate::webdriver::{browser_binaries, spki_sha256, Driver};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn dist() -> PathBuf {
    let dir = repo().join("dashboard/dist");
    assert!(
        dir.join("index.html").is_file(),
        "{} is missing: build the dashboard with `dashboard/build.sh` (scripts/test.sh does)",
        dir.display()
    );
    dir
}

/// A test image from the scikit-image wheel the setup step installs.
fn test_image(name: &str) -> PathBuf {
    let python = std::env::var("INFERGATE_PYTHON")
        .expect("INFERGATE_PYTHON is unset: run scripts/setup.sh and `source .cache/env.sh`");
    let out = std::process::Command::new(python)
        .args([
            "-c",
            "import skimage, os; print(os.path.dirname(skimage.__file__))",
        ])
        .output()
        .expect("run python");
    let dir = String::from_utf8(out.stdout).unwrap();
    let path = Path::new(dir.trim()).join("data").join(name);
    assert!(
        path.is_file(),
        "{} missing: run scripts/setup.sh",
        path.display()
    );
    path
}

/// Runs an offline `infergate` subcommand on the test's data directory.
fn cli(args: &[&str]) {
    let out = std::process::Command::new(crate::harness::BIN)
        .args(args)
        .output()
        .expect("run infergate");
    assert!(
        out.status.success(),
        "infergate {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The demo plugins and pipelines (as scripts/run.sh registers them): OCR, ImageNet
/// classification and sentence embeddings.
fn register_pipelines(data: &Path) {
    let plugins = std::env::var("INFERGATE_PLUGINS")
        .map(PathBuf::from)
        .unwrap_or_else(|_| repo().join("plugins/dist"));
    let data = data.to_str().unwrap();
    let mut add = vec!["plugins", "add", "--data-dir", data];
    let files: Vec<String> = [
        "image-decode",
        "imagenet-topk",
        "ctc-decode",
        "wordpiece-tokenizer",
        "mean-pool",
    ]
    .iter()
    .map(|p| {
        let f = plugins.join(format!("{p}.wasm"));
        assert!(f.is_file(), "{} missing: run plugins/build.sh", f.display());
        f.display().to_string()
    })
    .collect();
    add.extend(files.iter().map(String::as_str));
    cli(&add);
    for name in ["ocr", "classify", "embed"] {
        let spec = format!(
            "@{}",
            repo().join(format!("scripts/demo/{name}.json")).display()
        );
        cli(&["pipelines", "put", "--data-dir", data, name, &spec]);
    }
}

/// A PNG of black `text` on white, rendered by Pillow from the setup step's Python.
fn text_image(text: &str, out: &Path) {
    let python = std::env::var("INFERGATE_PYTHON")
        .expect("INFERGATE_PYTHON is unset: run scripts/setup.sh and `source .cache/env.sh`");
    let script = "import sys; from PIL import Image, ImageDraw, ImageFont; \
        img = Image.new('RGB', (360, 48), 'white'); \
        ImageDraw.Draw(img).text((8, 6), sys.argv[1], fill='black', font=ImageFont.load_default(size=30)); \
        img.save(sys.argv[2])";
    let status = std::process::Command::new(python)
        .args(["-c", script, text, out.to_str().unwrap()])
        .status()
        .expect("run python");
    assert!(status.success(), "rendering the text image failed");
}

/// Picks `value` in the playground's model/pipeline picker.
const PICK: &str = "const s = document.querySelector('#pg-model'); s.value = arguments[0]; \
    s.dispatchEvent(new Event('change'));";

fn screenshots() -> PathBuf {
    let dir = repo().join("target/dashboard-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Console errors that are not the expected answers to the test's own bad requests (the
/// wrong key, the garbage upload) or to probes for endpoints this server lacks.
fn unexpected(logs: Vec<String>) -> Vec<String> {
    logs.into_iter()
        .filter(|l| {
            !(l.contains("Failed to load resource")
                && (l.contains("status of 400")
                    || l.contains("status of 401")
                    || l.contains("status of 404")))
        })
        .collect()
}

/// When the page scrolls sideways: the elements whose right edge passes the viewport.
const WIDER_THAN_VIEWPORT: &str = "const d = document.documentElement, w = d.clientWidth; \
    if (d.scrollWidth <= w) return []; \
    return [...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right > w + 1) \
    .slice(-5).map(e => e.tagName + '.' + e.className + ' ' + Math.round(e.getBoundingClientRect().right));";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_in_a_real_browser() {
    let (chromium, chromedriver) = browser_binaries();
    let dist = dist();
    let cat = test_image("chelsea.png");
    let tmp = tempfile::tempdir().unwrap();
    register(
        tmp.path(),
        "efficientnet-lite0",
        &model("efficientnet-lite0.onnx"),
    );
    register(tmp.path(), "textgen", &model("textgen.onnx"));
    register(tmp.path(), "ocr-rec", &model("ocr-rec.onnx"));
    register(tmp.path(), "minilm", &model("minilm.onnx"));
    register_pipelines(tmp.path());
    let text_png = tmp.path().join("hello.png");
    text_image("HELLO 2026", &text_png);
    let s = Server::start_in(
        tmp.path(),
        Options {
            extra_args: vec![
                "--dashboard-dir".into(),
                dist.display().to_string(),
                "--openai-vocab".into(),
                model("textgen-vocab.json").display().to_string(),
            ],
            ..Options::default()
        },
    );

    // Static serving: the app, its assets with their types and cache headers, SPA fallback,
    // and API paths that stay JSON 404s.
    let index = s.client.get(s.url("/")).send().await.unwrap();
    assert_eq!(index.status(), 200);
    assert_eq!(index.headers()["content-type"], "text/html; charset=utf-8");
    assert_eq!(index.headers()["cache-control"], "no-cache");
    assert!(index.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .contains("'wasm-unsafe-eval'"));
    let html = index.text().await.unwrap();
    let wasm = html
        .split("/assets/")
        .find_map(|p| p.split('"').next().filter(|f| f.ends_with(".wasm")))
        .expect("wasm link")
        .to_string();
    let asset = s
        .client
        .get(s.url(&format!("/assets/{wasm}")))
        .header("accept-encoding", "gzip")
        .send()
        .await
        .unwrap();
    assert_eq!(asset.status(), 200);
    assert_eq!(asset.headers()["content-type"], "application/wasm");
    assert!(asset.headers()["cache-control"]
        .to_str()
        .unwrap()
        .contains("immutable"));
    let spa = s.client.get(s.url("/models")).send().await.unwrap();
    assert_eq!(spa.status(), 200);
    assert_eq!(spa.text().await.unwrap(), html);
    for (path, status) in [
        ("/api/nothing", 404),
        ("/v2/nothing", 404),
        ("/assets/missing.js", 404),
        ("/../Cargo.toml", 404),
    ] {
        let r = s.client.get(s.url(path)).send().await.unwrap();
        assert_eq!(r.status(), status, "{path}");
        if path.starts_with("/api") || path.starts_with("/v2") {
            let v: Value = r.json().await.unwrap();
            assert!(
                v["error"].as_str().unwrap().contains("no route"),
                "{path}: {v}"
            );
        }
    }

    let cert = std::fs::read_to_string(s.data.join("tls/cert.pem")).unwrap();
    let driver = Driver::start(&chromedriver).await;
    let b = driver.session(&chromium, &spki_sha256(&cert)).await;
    let shots = screenshots();
    let base = s.addr.clone();
    b.set_viewport(1280, 800).await;

    // A wrong key is refused with the server's reason, shown where it happened.
    b.goto(&format!("{base}/")).await;
    b.type_into("#api-key", "ig_000000000000_not-a-real-key")
        .await;
    b.click("#sign-in").await;
    let err = b.wait_text("#signin-error", |t| !t.is_empty()).await;
    assert!(err.contains("401") && err.contains("invalid"), "{err}");
    b.screenshot(&shots.join("01-signin-wrong-key.png")).await;

    // Sign in as admin; the key is in session storage, not in the URL.
    b.type_into("#api-key", &s.admin_key).await;
    b.click("#sign-in").await;
    b.find(".topbar .who").await;
    let url = b.script("return location.href", json!([])).await;
    assert!(!url.as_str().unwrap().contains("ig_"), "{url}");
    let stored = b
        .script(
            "return sessionStorage.getItem('infergate.api_key')",
            json!([]),
        )
        .await;
    assert_eq!(stored.as_str(), Some(s.admin_key.as_str()));

    // Models: upload a model through the form and see it listed.
    b.click("a[href='/models']").await;
    b.find("section.model[data-model='efficientnet-lite0']")
        .await;
    b.type_into("#model-name", "uploaded-cls").await;
    b.choose_file("#model-file", &model("ocr-cls.onnx")).await;
    b.click("#upload-submit").await;
    let done = b
        .wait_text("#upload-form .success", |t| t.contains("uploaded-cls"))
        .await;
    assert!(done.contains("version 1"), "{done}");
    let card = b
        .wait_text("section.model[data-model='uploaded-cls']", |t| {
            t.contains("x") && t.contains("FP32")
        })
        .await;
    assert!(card.contains("v1"), "{card}");
    b.screenshot(&shots.join("02-models.png")).await;
    // A file ONNX Runtime rejects: the server's reason is shown.
    let garbage = tmp.path().join("garbage.onnx");
    std::fs::write(&garbage, b"not an onnx model").unwrap();
    b.type_into("#model-name", "garbage").await;
    b.choose_file("#model-file", &garbage).await;
    b.click("#upload-submit").await;
    let err = b.wait_text("#upload-form .error", |t| !t.is_empty()).await;
    assert!(err.contains("400"), "{err}");

    // Batching config: a value the server refuses shows its reason in the form; a good one
    // is stored and used.
    let card = "section.model[data-model='efficientnet-lite0']";
    b.click(&format!("{card} details.batching > summary")).await;
    b.type_into(&format!("{card} .cfg-max-batch"), "8").await;
    b.type_into(&format!("{card} .cfg-preferred"), "16").await;
    b.click(&format!("{card} .batching-form button[type='submit']"))
        .await;
    let err = b
        .wait_text(&format!("{card} .batching-form .error"), |t| !t.is_empty())
        .await;
    assert!(
        err.contains("400") && err.contains("preferred_batch_size 16"),
        "{err}"
    );
    b.type_into(&format!("{card} .cfg-preferred"), "4, 8").await;
    b.type_into(&format!("{card} .cfg-delay"), "2000").await;
    b.click(&format!("{card} .batching-form button[type='submit']"))
        .await;
    b.wait_text(&format!("{card} .batching-form .success"), |t| {
        t.contains("Saved")
    })
    .await;
    assert!(b
        .find_now(&format!("{card} .batching-form .error"))
        .await
        .is_none());
    let stored: Value = s
        .get_json("/api/models/efficientnet-lite0", &s.admin_key)
        .await;
    let config = &stored["versions"][0]["config"];
    assert_eq!(config["max_batch_size"], 8, "{stored}");
    assert_eq!(
        config["dynamic_batching"]["preferred_batch_size"],
        json!([4, 8]),
        "{stored}"
    );
    assert_eq!(
        config["dynamic_batching"]["max_queue_delay_microseconds"], 2000,
        "{stored}"
    );
    b.screenshot(&shots.join("02b-models-batching.png")).await;

    // Playground: drop the cat picture on EfficientNet-Lite0 and read back the top class.
    b.click("a[href='/playground']").await;
    b.find("#pg-model").await;
    b.script(PICK, json!(["efficientnet-lite0"])).await;
    b.choose_file("#pg-image", &cat).await;
    b.wait_text(".drop-text", |t| t.contains("224×224")).await;
    b.click("#run").await;
    let top = b
        .wait_text(
            "#outputs .output[data-output='probabilities'] .topk li",
            |t| t.contains("class"),
        )
        .await;
    let class: usize = top.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!(
        (281..=285).contains(&class),
        "top class {class} is not a cat: {top}"
    );
    let latency = b.wait_text("#latency", |t| t.contains("ms")).await;
    assert!(latency.contains("round trip"), "{latency}");
    let curl = b.wait_text("#curl", |t| t.contains("curl")).await;
    assert!(
        curl.contains("$KEY") && !curl.contains(&s.admin_key),
        "{curl}"
    );
    b.screenshot(&shots.join("03-playground.png")).await;

    // Text generation streams into the page over Server-Sent Events.
    b.script(PICK, json!(["textgen"])).await;
    b.find("#pg-prompt").await;
    b.click("#generate").await;
    let timing = b.wait_text("#latency", |t| t.contains("tokens/s")).await;
    assert!(!timing.contains(" 0 tokens"), "{timing}");
    let streamed = b.wait_text("#stream-output", |t| t.len() > 5).await;
    assert!(!streamed.trim().is_empty(), "nothing streamed: {timing}");
    b.screenshot(&shots.join("03b-playground-stream.png")).await;
    // ... and over the WebSocket stream.
    b.script(
        "const s = document.querySelector('#pg-transport'); s.value = 'ws'; s.dispatchEvent(new Event('change'));",
        json!([]),
    )
    .await;
    b.click("#generate").await;
    // The request shown changes with the click, the timing with the end of the stream.
    let curl = b.wait_text("#curl", |t| t.contains("/v2/stream")).await;
    assert!(!curl.contains(&s.admin_key), "{curl}");
    let timing = b.wait_text("#latency", |t| t.contains("tokens/s")).await;
    assert!(!timing.contains(" 0 tokens"), "{timing}");
    let streamed = crate::websocket::metric(
        &s,
        "infergate_generated_tokens_total",
        &[("protocol", "websocket")],
    )
    .await;
    assert!(streamed > 0.0, "no tokens went out over the WebSocket");
    b.screenshot(&shots.join("03c-playground-websocket.png"))
        .await;

    // The OCR pipeline reads the text rendered into an image.
    b.script(PICK, json!(["pipeline:ocr"])).await;
    b.choose_file("#pg-pipeline-file", &text_png).await;
    b.wait_text(".drop-text", |t| t.contains("hello.png")).await;
    b.click("#pipeline-run").await;
    let text = b.wait_text("#pipeline-text", |t| !t.is_empty()).await;
    assert!(
        text.to_uppercase().contains("HELLO") && text.contains("2026"),
        "recognised: {text}"
    );
    let stages = b.wait_text("#stages", |t| t.contains("ms")).await;
    for stage in ["Pre-plugins", "Model", "Post-plugins", "Server total"] {
        assert!(stages.contains(stage), "{stage} missing: {stages}");
    }
    let curl = b.wait_text("#curl", |t| t.contains("curl")).await;
    assert!(
        curl.contains("/api/pipelines/ocr/run")
            && curl.contains("$KEY")
            && !curl.contains(&s.admin_key),
        "{curl}"
    );
    b.screenshot(&shots.join("03d-playground-ocr.png")).await;

    // The classification pipeline names the cat, with scores.
    b.script(PICK, json!(["pipeline:classify"])).await;
    b.choose_file("#pg-pipeline-file", &cat).await;
    b.wait_text(".drop-text", |t| t.contains("chelsea.png"))
        .await;
    b.click("#pipeline-run").await;
    let top = b
        .wait_text("#pipeline-labels li", |t| t.contains('%'))
        .await;
    assert!(top.to_lowercase().contains("cat"), "top label: {top}");
    b.screenshot(&shots.join("03e-playground-classify.png"))
        .await;

    // Embeddings: a paraphrase is closer than an unrelated sentence.
    b.script(PICK, json!(["pipeline:embed"])).await;
    b.find("#embed-a").await;
    b.click("#compare").await;
    let close = b.wait_text("#similarity", |t| !t.is_empty()).await;
    b.type_into("#embed-b", "The stock market fell sharply on Tuesday.")
        .await;
    b.click("#compare").await;
    let far = b.wait_text("#similarity", |t| t != close).await;
    let (close, far): (f64, f64) = (close.parse().unwrap(), far.parse().unwrap());
    assert!(close > far + 0.1, "paraphrase {close} vs unrelated {far}");
    b.screenshot(&shots.join("03f-playground-embeddings.png"))
        .await;

    // Keys: create one (secret shown once), check it works, revoke it, check it is refused.
    b.click("a[href='/keys']").await;
    b.type_into("#key-name", "browser-made").await;
    b.click("#scope-upload").await;
    b.click("#create-key").await;
    let secret = b
        .wait_text("#new-key-secret", |t| t.starts_with("ig_"))
        .await;
    let whoami = |key: String| {
        let client = s.client.clone();
        let url = s.url("/api/whoami");
        async move { client.get(url).bearer_auth(key).send().await.unwrap() }
    };
    let me: Value = whoami(secret.clone()).await.json().await.unwrap();
    assert_eq!(me["name"], "browser-made");
    assert_eq!(me["scopes"], json!(["infer", "upload"]));
    b.wait_text("tr[data-key-name='browser-made']", |t| t.contains("active"))
        .await;
    b.screenshot(&shots.join("04-keys-created.png")).await;
    b.click("tr[data-key-name='browser-made'] .revoke").await;
    b.click("tr[data-key-name='browser-made'] .confirm-revoke")
        .await;
    let mut refused = false;
    for _ in 0..50 {
        if whoami(secret.clone()).await.status() == 401 {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(refused, "the revoked key still works");

    // Overview: live numbers while traffic flows (computed from the server's statistics).
    b.click("a[href='/']").await;
    b.find("section.model-live[data-model='efficientnet-lite0']")
        .await;
    let traffic = {
        let (client, url, key) = (
            s.client.clone(),
            s.url("/v2/models/efficientnet-lite0/infer"),
            s.admin_key.clone(),
        );
        tokio::spawn(async move {
            let body = json!({"inputs": [{"name": "input", "shape": [1, 3, 224, 224], "datatype": "FP32", "data": vec![0.0f32; 3 * 224 * 224]}]});
            for _ in 0..40 {
                let r = client
                    .post(&url)
                    .bearer_auth(&key)
                    .json(&body)
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), 200);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let rps = b
        .wait_text("#total-rps", |t| {
            t.trim_end_matches("/s")
                .parse::<f64>()
                .is_ok_and(|v| v > 0.0)
        })
        .await;
    // Per-second p50 and p99 from the events stream, p50 at most p99.
    let percentiles = b
        .wait_text(
            "section.model-live[data-model='efficientnet-lite0'] .chart.two-lines .chart-value",
            |t| t.matches(" ms").count() == 2,
        )
        .await;
    let ms: Vec<f64> = percentiles
        .split(" · ")
        .map(|v| v.trim_end_matches(" ms").parse().unwrap())
        .collect();
    assert!(ms[0] > 0.0 && ms[0] <= ms[1], "p50 · p99: {percentiles}");
    // The device of the native ops and the memory the loaded models reserve.
    b.wait_text("#device", |t| t == "CPU").await;
    let memory = b.wait_text("#memory", |t| t.ends_with("reserved")).await;
    assert!(!memory.starts_with("0 B"), "{memory}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    b.screenshot(&shots.join("05-overview.png")).await;
    traffic.await.unwrap();
    assert!(rps.ends_with("/s"), "{rps}");
    b.click("a[href='/workers']").await;
    b.wait_text(".worker-grid", |t| t.contains("efficientnet-lite0 v1"))
        .await;
    b.screenshot(&shots.join("06-workers.png")).await;
    b.click("a[href='/plugins']").await;
    b.wait_text(".content", |t| {
        t.contains("Pipelines") && !t.contains("Checking")
    })
    .await;
    b.screenshot(&shots.join("07-plugins.png")).await;

    // Phone-sized layout: every page still fits.
    b.set_viewport(390, 844).await;
    for (path, name) in [
        ("/", "overview"),
        ("/models", "models"),
        ("/playground", "playground"),
        ("/keys", "keys"),
    ] {
        b.goto(&format!("{base}{path}")).await;
        b.find(".topbar").await;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let wide = b.script(WIDER_THAN_VIEWPORT, json!([])).await;
        assert_eq!(
            wide,
            json!([]),
            "{path} scrolls sideways at 390 px because of these elements"
        );
        b.screenshot(&shots.join(format!("08-mobile-{name}.png")))
            .await;
    }

    let errors = unexpected(b.severe_logs().await);
    assert!(errors.is_empty(), "console errors: {errors:#?}");

    // Signing out forgets the key.
    b.click("#sign-out").await;
    b.find("#api-key").await;
    let stored = b
        .script(
            "return sessionStorage.getItem('infergate.api_key')",
            json!([]),
        )
        .await;
    assert!(stored.is_null());

    // A key with only the infer scope: what it may not do is hidden, not offered and refused.
    let reader = s.key("infer");
    b.type_into("#api-key", &reader).await;
    b.click("#sign-in").await;
    b.find(".topbar .who").await;
    b.click("a[href='/models']").await;
    b.find("section.model[data-model='efficientnet-lite0']")
        .await;
    assert!(
        b.find_now("#upload-form").await.is_none(),
        "upload offered to an infer-only key"
    );
    b.wait_text(".notice", |t| t.contains("upload")).await;
    b.click("a[href='/keys']").await;
    b.wait_text(".content", |t| t.contains("Admin only")).await;
    assert!(b.find_now("#create-key-form").await.is_none());
    b.screenshot(&shots.join("09-infer-only-keys.png")).await;
    b.close().await;
}
