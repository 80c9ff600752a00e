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
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub(crate) fn dist() -> PathBuf {
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

/// A PNG of black `lines` of text on white, one under the other, rendered by Pillow from the
/// setup step's Python.
fn text_image(lines: &[&str], out: &Path) {
    let python = std::env::var("INFERGATE_PYTHON")
        .expect("INFERGATE_PYTHON is unset: run scripts/setup.sh and `source .cache/env.sh`");
    let script = "import sys; from PIL import Image, ImageDraw, ImageFont; \
        lines = sys.argv[2:]; img = Image.new('RGB', (420, 20 + 60 * len(lines)), 'white'); \
        draw = ImageDraw.Draw(img); font = ImageFont.load_default(size=30); \
        [draw.text((14, 12 + 60 * i), t, fill='black', font=font) for i, t in enumerate(lines)]; \
        img.save(sys.argv[1])";
    let status = std::process::Command::new(python)
        .args(["-c", script, out.to_str().unwrap()])
        .args(lines)
        .status()
        .expect("run python");
    assert!(status.success(), "rendering the text image failed");
}

/// Picks `value` in the playground's model/pipeline picker.
const PICK: &str = "const s = document.querySelector('#pg-model'); s.value = arguments[0]; \
    s.dispatchEvent(new Event('change'));";

pub(crate) fn screenshots() -> PathBuf {
    let dir = repo().join("target/dashboard-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Console errors that are not the expected answers to the test's own bad requests (the
/// wrong key, the garbage upload, the refused delete) or to probes for endpoints this server
/// lacks.
pub(crate) fn unexpected(logs: Vec<String>) -> Vec<String> {
    logs.into_iter()
        .filter(|l| {
            !(l.contains("Failed to load resource")
                && (l.contains("status of 400")
                    || l.contains("status of 401")
                    || l.contains("status of 404")
                    || l.contains("status of 409")))
        })
        .collect()
}

/// Navigation links not fully inside the viewport (a strip that hides sections).
const NAV_OFF_SCREEN: &str = "const w = document.documentElement.clientWidth, h = window.innerHeight; \
    return [...document.querySelectorAll('.sidebar a')].filter(a => { const r = a.getBoundingClientRect(); \
    return r.left < 0 || r.right > w + 1 || r.top < 0 || r.bottom > h || r.width === 0; }).map(a => a.textContent);";

/// Buttons in table rows whose right edge passes the viewport.
const ACTIONS_OFF_SCREEN: &str = "const w = document.documentElement.clientWidth; \
    return [...document.querySelectorAll('td.actions button')].filter(b => b.getBoundingClientRect().right > w + 1) \
    .map(b => b.textContent + ' ' + Math.round(b.getBoundingClientRect().right));";

/// The lowest contrast ratio (WCAG) between text and background among the matching elements.
const CONTRAST: &str = "const lum = c => { const v = c.match(/[\\d.]+/g).slice(0, 3).map(x => { x = x / 255; \
    return x <= 0.03928 ? x / 12.92 : Math.pow((x + 0.055) / 1.055, 2.4); }); return 0.2126 * v[0] + 0.7152 * v[1] + 0.0722 * v[2]; }; \
    const els = [...document.querySelectorAll(arguments[0])]; if (!els.length) return null; \
    return Math.min(...els.map(e => { const s = getComputedStyle(e); const a = lum(s.color), b = lum(s.backgroundColor); \
    return (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05); }));";

/// When the page scrolls sideways: the elements whose right edge passes the viewport.
const WIDER_THAN_VIEWPORT: &str = "const d = document.documentElement, w = d.clientWidth; \
    if (d.scrollWidth <= w) return []; \
    return [...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right > w + 1) \
    .slice(-5).map(e => e.tagName + '.' + e.className + ' ' + Math.round(e.getBoundingClientRect().right));";

/// The binary carries the dashboard: started in an empty working directory, with neither
/// --dashboard-dir nor its variable, it serves dashboard/dist's files byte for byte (the
/// precompressed copy when the client takes gzip) with the same headers and SPA fallback.
#[tokio::test]
async fn the_binary_serves_its_embedded_dashboard_from_any_directory() {
    let dist = dist();
    let cwd = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let s = Server::start_in(
        data.path(),
        Options {
            cwd: Some(cwd.path().to_path_buf()),
            env_remove: vec!["INFERGATE_DASHBOARD_DIR"],
            ..Options::default()
        },
    );
    let get = |path: &str, encoding: &str| {
        s.client
            .get(s.url(path))
            .header("accept-encoding", encoding)
            .send()
    };
    let index = get("/", "identity").await.unwrap();
    assert_eq!(index.status(), 200);
    assert_eq!(index.headers()["content-type"], "text/html; charset=utf-8");
    assert_eq!(index.headers()["cache-control"], "no-cache");
    assert!(index.headers().get("content-encoding").is_none());
    let html = index.bytes().await.unwrap();
    assert_eq!(html, std::fs::read(dist.join("index.html")).unwrap());

    let script = std::fs::read_dir(dist.join("assets"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .find(|name| name.ends_with(".js") && dist.join(format!("assets/{name}.gz")).is_file())
        .expect("a built script with its .gz");
    let path = format!("/assets/{script}");
    let plain = get(&path, "identity").await.unwrap();
    assert_eq!(plain.status(), 200);
    assert_eq!(
        plain.headers()["content-type"],
        "text/javascript; charset=utf-8"
    );
    assert_eq!(
        plain.headers()["cache-control"],
        "public, max-age=31536000, immutable"
    );
    let on_disk = std::fs::read(dist.join("assets").join(&script)).unwrap();
    assert_eq!(plain.bytes().await.unwrap(), on_disk);
    let gzipped = get(&path, "gzip, br").await.unwrap();
    assert_eq!(gzipped.headers()["content-encoding"], "gzip");
    let gz_on_disk = std::fs::read(dist.join(format!("assets/{script}.gz"))).unwrap();
    assert_eq!(gzipped.bytes().await.unwrap(), gz_on_disk);

    let spa = get("/keys", "identity").await.unwrap();
    assert_eq!(spa.status(), 200);
    assert_eq!(spa.bytes().await.unwrap(), html);
    for path in ["/assets/missing.js", "/v2/nothing"] {
        let r = get(path, "identity").await.unwrap();
        assert_eq!(r.status(), 404, "{path}");
        let body: Value = r.json().await.unwrap();
        assert!(body["error"].is_string(), "{path}: {body}");
    }
}

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
    register(tmp.path(), "ocr-det", &model("ocr-det.onnx"));
    register(tmp.path(), "ocr-cls", &model("ocr-cls.onnx"));
    register(tmp.path(), "minilm", &model("minilm.onnx"));
    // The chat model (llama.cpp) for the overview's text-generation figures.
    register(tmp.path(), "smollm2", &model("smollm2.gguf"));
    register_pipelines(tmp.path());
    let text_png = tmp.path().join("three-lines.png");
    text_image(&["HELLO 2026", "second line", "Third 333"], &text_png);
    let s = Server::start_in(
        tmp.path(),
        Options {
            extra_args: vec![
                "--dashboard-dir".into(),
                dist.display().to_string(),
                "--openai-vocab".into(),
                model("textgen-vocab.json").display().to_string(),
                // One llama.cpp thread: on a busy 2-core machine two of them wait on each
                // other for seconds per token (see tests/python/test_llm.py).
                "--llm-threads".into(),
                "1".into(),
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
    b.set_viewport(1400, 900).await;

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
    b.type_into("#model-config", r#"{"unload_after_s": 600}"#)
        .await;
    b.click("#upload-submit").await;
    let done = b
        .wait_text("#upload-form .success", |t| t.contains("uploaded-cls"))
        .await;
    assert!(done.contains("version 1"), "{done}");
    // The form starts over; the stored config is summarised in its own cell, not the SHA's.
    let left = b
        .script(
            "return document.querySelector('#model-config').value",
            json!([]),
        )
        .await;
    assert_eq!(
        left,
        json!(""),
        "the previous config stays in the upload box"
    );
    let sha = b
        .wait_text(
            "section.model[data-model='uploaded-cls'] tr[data-version='1'] code.sha",
            |t| !t.is_empty(),
        )
        .await;
    assert!(
        sha.len() == 12 && sha.chars().all(|c| c.is_ascii_hexdigit()),
        "SHA cell: {sha}"
    );
    let config_cell = b
        .wait_text(
            "section.model[data-model='uploaded-cls'] tr[data-version='1'] .config-cell summary",
            |t| !t.is_empty(),
        )
        .await;
    assert!(config_cell.contains("idle unload 600 s"), "{config_cell}");
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
    // Raw logits are said to be turned into probabilities here, and the labelling pipeline named.
    let scoring = b
        .wait_text(
            "#outputs .output[data-output='probabilities'] .scoring",
            |t| !t.is_empty(),
        )
        .await;
    // EfficientNet-Lite0's export ends in a softmax: the page says so rather than applying
    // another (what raw logits would get, said as plainly).
    assert!(
        scoring.contains("the model's own probabilities"),
        "{scoring}"
    );
    let named = b
        .wait_text("#outputs .output[data-output='probabilities']", |t| {
            t.contains("classify")
        })
        .await;
    assert!(named.contains("no class names"), "{named}");
    let latency = b.wait_text("#latency", |t| t.contains("ms")).await;
    assert!(latency.contains("round trip"), "{latency}");
    let curl = b.wait_text("#curl", |t| t.contains("curl")).await;
    assert!(
        curl.contains("$KEY") && !curl.contains(&s.admin_key),
        "{curl}"
    );
    b.screenshot(&shots.join("03-playground.png")).await;

    // A request the server refuses (wrong shape) is a failure, with the server's reason.
    b.script(PICK, json!(["uploaded-cls"])).await;
    b.click("#playground-form .segmented button:nth-child(2)")
        .await;
    b.type_into("#playground-form .shape-input", "1").await;
    b.type_into("#playground-form .data-input", "[1]").await;
    b.click("#run").await;
    let refused = b
        .wait_text("#result .latency.failed", |t| t.contains("refused"))
        .await;
    assert!(refused.contains("400"), "{refused}");
    let reason = b.wait_text("#result .error", |t| !t.is_empty()).await;
    assert!(reason.contains("400"), "{reason}");
    b.screenshot(&shots.join("03a-playground-refused.png"))
        .await;

    // Text generation streams into the page over Server-Sent Events; a temperature that is
    // not a number is refused in the form, before any request.
    b.script(PICK, json!(["textgen"])).await;
    b.find("#pg-prompt").await;
    b.type_into("#pg-temp", "abc").await;
    b.click("#generate").await;
    let refused = b.wait_text("#textgen-form .error", |t| !t.is_empty()).await;
    assert!(
        refused.contains("Temperature") && refused.contains("abc"),
        "{refused}"
    );
    assert!(b.find_now("#stream-output .prompt-echo").await.is_some());
    b.type_into("#pg-temp", "0.7").await;
    b.click("#generate").await;
    let timing = b.wait_text("#latency", |t| t.contains("tokens/s")).await;
    assert!(!timing.contains(" 0 tokens"), "{timing}");
    let finish = b.wait_text("#finish-reason", |t| !t.is_empty()).await;
    assert!(finish.starts_with("finished:"), "{finish}");
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
    // A long generation stops when asked, and says so.
    b.script(
        "const s = document.querySelector('#pg-transport'); s.value = 'sse'; s.dispatchEvent(new Event('change'));",
        json!([]),
    )
    .await;
    b.type_into("#pg-max", "4000").await;
    // Stop is pressed as soon as it shows; the character model can end its text by itself
    // within milliseconds, so a run that beat the click is tried again with another prompt.
    let mut finish = String::new();
    for attempt in 0..5 {
        b.type_into(
            "#pg-prompt",
            &format!("Chapter {attempt}. It was a dark and stormy night"),
        )
        .await;
        b.click("#generate").await;
        // On a loaded machine the button may show a moment after the click: look for it for
        // a while rather than once.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let mut clicked = false;
        while !clicked && std::time::Instant::now() < deadline {
            clicked = b
                .script(
                    "const s = document.querySelector('#stop'); if (s) { s.click(); return true; } return false;",
                    json!([]),
                )
                .await
                == json!(true);
            if !clicked {
                tokio::time::sleep(Duration::from_millis(30)).await;
            }
        }
        finish = b.wait_text("#finish-reason", |t| !t.is_empty()).await;
        if clicked && finish == "stopped by you" {
            break;
        }
    }
    assert_eq!(finish, "stopped by you");
    b.type_into("#pg-max", "120").await;
    // Chat over /v1/chat/completions: the answer streams into the conversation, with its
    // timings and the same call as curl and as the openai client.
    b.click("#mode-chat").await;
    // Today's chat model is the character LSTM: the completion's prompt, which it continues.
    b.script(
        "const e = document.querySelector('#chat-system'); e.value = ''; e.dispatchEvent(new Event('input', {bubbles: true}));",
        json!([]),
    )
    .await;
    b.type_into("#chat-input", "The meaning of life is").await;
    b.click("#chat-send").await;
    let chat = b
        .wait_text("#chat-latency", |t| t.contains("tokens/s"))
        .await;
    assert!(!chat.contains(" 0 tokens"), "{chat}");
    let log = b
        .wait_text("#chat-log", |t| {
            t.contains("ASSISTANT") || t.contains("assistant")
        })
        .await;
    assert!(log.contains("The meaning of life is"), "{log}");
    b.wait_text("#chat-finish", |t| t.starts_with("finished:"))
        .await;
    let python = b
        .wait_text("#chat-form", |t| t.contains("from openai import OpenAI"))
        .await;
    assert!(
        !python.contains(&s.admin_key),
        "the key leaked into the snippets"
    );
    b.screenshot(&shots.join("03g-playground-chat.png")).await;
    b.click("#mode-completion").await;

    // The OCR pipeline reads the three lines rendered into an image, in order, and draws
    // the box it found for each over the image.
    b.script(PICK, json!(["pipeline:ocr"])).await;
    b.choose_file("#pg-pipeline-file", &text_png).await;
    b.wait_text(".drop-text", |t| t.contains("three-lines.png"))
        .await;
    b.click("#pipeline-run").await;
    b.wait_text("#pipeline-text", |t| !t.is_empty()).await;
    let lines = b
        .script(
            "return [...document.querySelectorAll('#pipeline-text li strong')].map(e => e.textContent.replace(/\\s+/g, ''))",
            json!([]),
        )
        .await;
    // Spaces are compared away: PP-OCRv4 is unsure of Latin word spacing.
    assert_eq!(
        lines,
        json!(["HELLO2026", "secondline", "Third333"]),
        "lines read"
    );
    let boxes = b
        .script(
            "return [...document.querySelectorAll('#pipeline-regions g.region rect')].map(r => parseFloat(r.getAttribute('y')))",
            json!([]),
        )
        .await;
    let tops: Vec<f64> = boxes
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    assert!(
        tops.len() == 3 && tops.windows(2).all(|w| w[0] + 40.0 < w[1]),
        "one box per line, top to bottom: {tops:?}"
    );
    let chain = b.text_of(".playground .card-head .small").await.unwrap();
    assert!(
        chain.contains("ocr-det") && chain.contains("ocr-cls"),
        "{chain}"
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
    // The pipeline's own answer is an embedding: shown as a vector, not as classes.
    b.click("#pipeline-run").await;
    let vector = b
        .wait_text("#outputs .vector-dims", |t| !t.is_empty())
        .await;
    assert_eq!(vector, "vector of 384 values");
    assert!(
        b.find_now("#outputs .topk").await.is_none(),
        "an embedding drawn as classes"
    );
    b.screenshot(&shots.join("03f-playground-embeddings.png"))
        .await;

    // Keys: create one (secret shown once), check it works, revoke it, check it is refused.
    b.click("a[href='/keys']").await;
    b.type_into("#key-name", "browser-made").await;
    b.click("#scope-upload").await;
    b.type_into("#key-rps", "5").await;
    b.type_into("#key-burst", "10").await;
    b.type_into("#key-concurrent", "3").await;
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
    // The whoami call above used the key: the table says when, from the server's counters
    // (it refreshes every 5 s).
    let last = b
        .wait_text("tr[data-key-name='browser-made'] .key-last-used", |t| {
            t != "not since start"
        })
        .await;
    assert!(last == "just now" || last.ends_with("s ago"), "{last}");
    let traffic = b
        .text_of("tr[data-key-name='browser-made'] .key-usage")
        .await
        .unwrap();
    assert!(traffic.starts_with("1 allowed"), "{traffic}");
    // The table shows the key's limits; the form starts over for the next key.
    let row = "tr[data-key-name='browser-made']";
    assert_eq!(
        b.text_of(&format!("{row} .key-rate")).await.unwrap(),
        "5 /s"
    );
    assert_eq!(b.text_of(&format!("{row} .key-burst")).await.unwrap(), "10");
    assert_eq!(
        b.text_of(&format!("{row} .key-concurrent")).await.unwrap(),
        "3"
    );
    let form = b
        .script(
            "return ['#key-name', '#key-rps', '#key-burst', '#key-concurrent'].map(s => document.querySelector(s).value)\
             .concat([document.querySelector('#scope-upload').checked])",
            json!([]),
        )
        .await;
    assert_eq!(
        form,
        json!(["", "", "", "", false]),
        "the create form kept its values"
    );
    // Limits change from the table; the server stores them.
    b.click(&format!("{row} .edit-limits")).await;
    b.type_into(&format!("{row} .edit-rps"), "2.5").await;
    // Emptied as a person would (WebDriver's clear sends no input event): the server default.
    b.script(
        "const e = document.querySelector(arguments[0]); e.value = ''; e.dispatchEvent(new Event('input', {bubbles: true}));",
        json!([format!("{row} .edit-concurrent")]),
    )
    .await;
    b.click(&format!("{row} .save-limits")).await;
    b.wait_text(&format!("{row} .key-rate"), |t| t == "2.5 /s")
        .await;
    let stored: Value = s.get_json("/api/keys", &s.admin_key).await;
    let key = stored["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["name"] == "browser-made")
        .unwrap()
        .clone();
    assert_eq!(key["rate_limit"], json!({"rps": 2.5, "burst": 10}), "{key}");
    assert!(key["max_concurrent"].is_null(), "{key}");
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

    // Overview: live numbers while traffic flows, one request in ten refused (400), from the
    // server's history.
    b.click("a[href='/']").await;
    let traffic = {
        let (client, url, key) = (
            s.client.clone(),
            s.url("/v2/models/efficientnet-lite0/infer"),
            s.admin_key.clone(),
        );
        tokio::spawn(async move {
            let good = json!({"inputs": [{"name": "input", "shape": [1, 3, 224, 224], "datatype": "FP32", "data": vec![0.0f32; 3 * 224 * 224]}]});
            let bad = json!({"inputs": [{"name": "input", "shape": [1], "datatype": "FP32", "data": [0.0]}]});
            let chat = client.post(url.replace(
                "/v2/models/efficientnet-lite0/infer",
                "/v1/chat/completions",
            ));
            let chat = chat.bearer_auth(&key).json(&json!({
                "model": "smollm2", "max_tokens": 8, "temperature": 0,
                "messages": [{"role": "user", "content": "Name a colour."}]
            }));
            assert_eq!(chat.send().await.unwrap().status(), 200);
            for i in 0..40 {
                let body = if i % 10 == 3 { &bad } else { &good };
                let r = client
                    .post(&url)
                    .bearer_auth(&key)
                    .json(body)
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), if i % 10 == 3 { 400 } else { 200 });
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let card = "section.model-live[data-model='efficientnet-lite0']";
    b.find(card).await;
    let rps = b
        .wait_text("#total-rps", |t| {
            t.trim_end_matches("/s")
                .parse::<f64>()
                .is_ok_and(|v| v > 0.0)
        })
        .await;
    assert!(rps.ends_with("/s"), "{rps}");
    // Client errors count as errors, apart from server errors.
    b.wait_text("#error-rate", |t| {
        t.trim_end_matches('%')
            .parse::<f64>()
            .is_ok_and(|v| v > 0.0)
    })
    .await;
    b.wait_text("#status-breakdown [data-status='400']", |t| {
        t.contains("bad request")
    })
    .await;
    let errors = b
        .wait_text(&format!("{card} .model-errors"), |t| {
            !t.contains(" 0 client errors")
        })
        .await;
    assert!(
        errors.contains("client errors (4xx)") && errors.contains("0 server errors (5xx)"),
        "{errors}"
    );
    // p50 and p99 from the server's histograms, p50 at most p99, on a log scale; every chart
    // describes its values to screen readers.
    let latency = format!("{card} figure.chart[aria-label^='Latency']");
    b.wait_text(&format!("{latency} .legend"), |t| {
        t.matches(" ms").count() == 2
    })
    .await;
    let ms = b
        .script(
            "return [...document.querySelectorAll(arguments[0] + ' .legend-value')].map(e => parseFloat(e.textContent))",
            json!([latency]),
        )
        .await;
    let (p50, p99) = (ms[0].as_f64().unwrap(), ms[1].as_f64().unwrap());
    assert!(p50 > 0.0 && p50 <= p99, "p50 {p50} · p99 {p99}");
    let label = b
        .script(
            "return document.querySelector(arguments[0]).getAttribute('aria-label')",
            json!([latency]),
        )
        .await;
    assert!(label.as_str().unwrap().contains("p99 now"), "{label}");
    assert!(b
        .text_of(&format!("{latency} .chart-unit"))
        .await
        .unwrap()
        .contains("log scale"));
    // The activity feed says which state a model went to, at the server's time.
    let activity = b
        .wait_text("#activity", |t| {
            t.contains("efficientnet-lite0 v1 → loaded")
        })
        .await;
    assert!(activity.contains(':'), "{activity}");
    // The device of the native ops and the memory the loaded models reserve.
    b.wait_text("#device", |t| t == "CPU").await;
    let memory = b.wait_text("#memory", |t| t.ends_with("reserved")).await;
    assert!(!memory.starts_with("0 B"), "{memory}");
    traffic.await.unwrap();
    // The chat model's text-generation figures: time to first token and tokens.
    let ttft = b.wait_text("#total-ttft", |t| t.ends_with(" ms")).await;
    assert!(
        ttft.trim_end_matches(" ms")
            .parse::<f64>()
            .is_ok_and(|v| v > 0.0),
        "{ttft}"
    );
    let chat_card = "section.model-live[data-model='smollm2']";
    let figures = b
        .wait_text(&format!("{chat_card} .gen-figures"), |t| {
            t.contains(" ms") && !t.contains(" 0 tokens")
        })
        .await;
    assert!(figures.contains("time to first token"), "{figures}");
    b.find(&format!(
        "{chat_card} figure.chart[aria-label^='Time to first token']"
    ))
    .await;
    // Traffic per API key: the admin key sent all of it.
    let per_key = b
        .wait_text("#key-traffic .legend", |t| t.contains("/s"))
        .await;
    assert!(per_key.contains("admin"), "{per_key}");
    b.screenshot(&shots.join("05-overview.png")).await;
    // History lives on the server: another page and back, and the seconds are still there.
    b.click("a[href='/keys']").await;
    b.find("#create-key-form").await;
    b.click("a[href='/']").await;
    b.wait_text(&format!("{card} .model-errors"), |t| {
        !t.contains(" 0 client errors")
    })
    .await;

    b.click("a[href='/workers']").await;
    let workers = b
        .wait_text(".worker-grid", |t| t.contains("efficientnet-lite0 v1"))
        .await;
    assert!(workers.contains("Client errors (4xx)"), "{workers}");
    b.wait_text(".worker-grid .card", |_| true).await;
    let client_errors = b
        .script(
            "const c = [...document.querySelectorAll('.worker-grid .card')].find(c => c.textContent.includes('efficientnet-lite0 v1')); \
             return parseInt(c.querySelector('.client-errors').textContent)",
            json!([]),
        )
        .await;
    assert!(
        client_errors.as_u64().unwrap() >= 4,
        "4xx on the worker card: {client_errors}"
    );
    b.screenshot(&shots.join("06-workers.png")).await;

    // Models: a loaded model offers no Load; a model a pipeline runs cannot be deleted.
    b.click("a[href='/models']").await;
    let load = "section.model[data-model='efficientnet-lite0'] button.load";
    b.find(load).await;
    let disabled = b
        .script(
            "return document.querySelector(arguments[0]).disabled",
            json!([load]),
        )
        .await;
    assert_eq!(disabled, json!(true), "Load is offered on a loaded model");
    // Green badges read at 4.5:1 or better.
    b.find("section.model[data-model='efficientnet-lite0'] .badge-loaded")
        .await;
    let contrast = b
        .script(
            CONTRAST,
            json!([".badge-loaded, .badge-active, .badge-healthy"]),
        )
        .await;
    let worst = contrast.as_f64().unwrap_or(0.0);
    assert!(worst >= 4.5, "badge contrast {worst}:1");
    let rec = "section.model[data-model='ocr-rec']";
    b.click(&format!("{rec} tr[data-version='1'] .actions .btn.danger"))
        .await;
    b.click(&format!("{rec} tr[data-version='1'] .confirm .btn.danger"))
        .await;
    let refused = b
        .wait_text(&format!("{rec} .error"), |t| !t.is_empty())
        .await;
    assert!(
        refused.contains("409") && refused.contains("ocr"),
        "{refused}"
    );

    // Plugins and pipelines: the cards show each pipeline's stages and what each plugin takes.
    b.click("a[href='/plugins']").await;
    let ocr = b
        .wait_text("section.pipeline[data-pipeline='ocr']", |t| {
            t.contains("ocr-rec")
        })
        .await;
    for stage in ["image-decode", "ocr-rec", "ctc-decode"] {
        assert!(
            ocr.contains(stage),
            "{stage} missing from the ocr card: {ocr}"
        );
    }
    let consumes = b
        .wait_text(
            "section.plugin[data-plugin='image-decode'] .plugin-consumes",
            |t| !t.is_empty(),
        )
        .await;
    assert!(consumes.contains("image/png"), "{consumes}");
    // Pre-plugin lists offer only plugins that fit: no post-plugin, nothing after a raw decoder
    // that the decoder's output does not feed.
    let offered = b
        .script("return [...document.querySelectorAll('#pipe-pre option')].map(o => o.value).filter(v => v)", json!([]))
        .await;
    let offered: Vec<&str> = offered
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        offered.contains(&"image-decode") && !offered.contains(&"ctc-decode"),
        "{offered:?}"
    );
    // Editing a pipeline goes through a confirmation and keeps what the form does not show.
    b.click("section.pipeline[data-pipeline='classify'] .edit-pipeline")
        .await;
    b.wait_text("#pipeline-composer h3", |t| {
        t.to_lowercase() == "edit pipeline classify"
    })
    .await;
    b.type_into("#pipe-params", "top_k=3").await;
    b.click("#save-pipeline").await;
    b.wait_text("#pipeline-composer .confirm-box", |t| {
        t.contains("Replace pipeline")
    })
    .await;
    b.click("#confirm-pipeline").await;
    b.wait_text("#pipeline-composer .success", |t| t.contains("classify"))
        .await;
    let classify: Value = s.get_json("/api/pipelines/classify", &s.admin_key).await;
    assert_eq!(classify["spec"]["parameters"]["top_k"], "3", "{classify}");
    assert_eq!(classify["spec"]["preprocess"]["width"], 224, "{classify}");
    b.screenshot(&shots.join("07-plugins.png")).await;

    // Phone-sized layout: every page reachable from the navigation, nothing wider than the
    // screen, actions in tables on screen.
    b.set_viewport(390, 844).await;
    for (path, name) in [
        ("/", "overview"),
        ("/models", "models"),
        ("/playground", "playground"),
        ("/plugins", "plugins"),
        ("/workers", "workers"),
        ("/keys", "keys"),
    ] {
        b.goto(&format!("{base}{path}")).await;
        b.find(".topbar").await;
        let hidden = b.script(NAV_OFF_SCREEN, json!([])).await;
        assert_eq!(
            hidden,
            json!([]),
            "{path}: navigation links off screen at 390 px"
        );
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let wide = b.script(WIDER_THAN_VIEWPORT, json!([])).await;
        assert_eq!(
            wide,
            json!([]),
            "{path} scrolls sideways at 390 px because of these elements"
        );
        let actions = b.script(ACTIONS_OFF_SCREEN, json!([])).await;
        assert_eq!(
            actions,
            json!([]),
            "{path}: table actions off screen at 390 px"
        );
        b.screenshot(&shots.join(format!("08-mobile-{name}.png")))
            .await;
    }
    // Every page is one tap away.
    b.click(".sidebar a[href='/workers']").await;
    b.wait_text(".page-header h1", |t| t == "Workers").await;

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

/// Whether a server message says the same thing twice at its start ("invalid model config:
/// invalid model config: ...", "invalid model config: model config: ...").
fn repeats_prefix(message: &str) -> bool {
    let parts: Vec<String> = message
        .split(": ")
        .map(|p| p.trim().to_lowercase())
        .collect();
    parts
        .windows(2)
        .any(|w| !w[1].is_empty() && (w[0] == w[1] || w[0].ends_with(&w[1])))
}

#[test]
fn the_prefix_check_catches_repeats() {
    assert!(repeats_prefix(
        "invalid model config: invalid model config: x"
    ));
    assert!(repeats_prefix("invalid model config: model config: x"));
    assert!(!repeats_prefix(
        "invalid model config: dynamic_batching.max_queue_delay_microseconds: invalid type"
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_messages_name_the_field_once() {
    let s = crate::harness::Server::with_models(&[("cls", "ocr-cls.onnx")]);
    let key = s.admin_key.clone();
    let send = |method: reqwest::Method, path: &str, body: Option<String>| {
        let mut r = s.client.request(method, s.url(path)).bearer_auth(&key);
        if let Some(b) = body {
            r = r.header("content-type", "application/json").body(b);
        }
        r.send()
    };
    use reqwest::Method;
    let cases: Vec<(Method, &str, Option<&str>, u16, &str)> = vec![
        (
            Method::PUT,
            "/api/models/cls/config",
            Some(r#"{"dynamic_batchin": {}}"#),
            400,
            "dynamic_batchin",
        ),
        (
            Method::PUT,
            "/api/models/cls/config",
            Some(r#"{"dynamic_batching": {"max_queue_delay_microseconds": "soon"}}"#),
            400,
            "dynamic_batching.max_queue_delay_microseconds",
        ),
        (
            Method::PUT,
            "/api/models/cls/config",
            Some(r#"{"max_batch_size": 4, "dynamic_batching": {"preferred_batch_size": [8]}}"#),
            400,
            "preferred_batch_size",
        ),
        (
            Method::PUT,
            "/api/models/cls/config",
            Some(r#"{"instance_group": [{"count": 0}]}"#),
            400,
            "count",
        ),
        (
            Method::PUT,
            "/api/models/cls/config",
            Some(r#"{"unload_after_s": 0}"#),
            400,
            "unload_after_s",
        ),
        (
            Method::PUT,
            "/api/models/cls/config",
            Some(r#"{"version_policy": "newest"}"#),
            400,
            "version_policy",
        ),
        (
            Method::PUT,
            "/api/models/cls/config",
            Some("{nope"),
            400,
            "JSON",
        ),
        (
            Method::PUT,
            "/api/pipelines/p",
            Some(r#"{"model": "cls", "pre": ["no-such-plugin"]}"#),
            404,
            "no-such-plugin",
        ),
        (
            Method::PUT,
            "/api/pipelines/p",
            Some(r#"{"modle": "cls"}"#),
            400,
            "modle",
        ),
        (
            Method::POST,
            "/v2/models/cls/infer",
            Some(
                r#"{"inputs": [{"name": "nope", "shape": [1], "datatype": "FP32", "data": [1]}]}"#,
            ),
            400,
            "nope",
        ),
        (
            Method::POST,
            "/api/keys",
            Some(r#"{"name": "k", "scopes": ["root"]}"#),
            400,
            "root",
        ),
        (
            Method::GET,
            "/api/metrics/history?seconds=0",
            None,
            400,
            "seconds",
        ),
    ];
    for (method, path, body, status, names) in cases {
        let r = send(method.clone(), path, body.map(str::to_string))
            .await
            .unwrap();
        let got = r.status().as_u16();
        let v: Value = r.json().await.unwrap();
        let message = v["error"].as_str().unwrap_or_default().to_string();
        assert!(
            got == status || (status == 404 && got == 400),
            "{method} {path}: {got} {message}"
        );
        assert!(
            message.contains(names),
            "{method} {path}: '{message}' does not name {names}"
        );
        assert!(
            !repeats_prefix(&message),
            "{method} {path}: '{message}' repeats itself"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_model_a_pipeline_runs_is_refused() {
    let s =
        crate::harness::Server::with_models(&[("cls", "ocr-cls.onnx"), ("spare", "ocr-cls.onnx")]);
    let key = s.admin_key.clone();
    let put = s
        .client
        .put(s.url("/api/pipelines/orient"))
        .bearer_auth(&key)
        .json(&json!({"model": "cls"}))
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 201, "{}", put.text().await.unwrap());
    let delete = |path: &'static str| {
        let r = s.client.delete(s.url(path)).bearer_auth(&key);
        async move {
            let r = r.send().await.unwrap();
            let status = r.status().as_u16();
            (status, r.json::<Value>().await.unwrap())
        }
    };
    for path in ["/api/models/cls", "/api/models/cls/versions/1"] {
        let (status, v) = delete(path).await;
        assert_eq!(status, 409, "{path}: {v}");
        let message = v["error"].as_str().unwrap();
        assert!(
            message.contains("orient") && message.contains("cls"),
            "{message}"
        );
    }
    // A newer version takes over the unpinned pipeline: the old one may go, the last may not.
    let upload = s
        .client
        .post(s.url("/api/models/cls/versions"))
        .bearer_auth(&key)
        .body(std::fs::read(crate::harness::model("ocr-cls.onnx")).unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(upload.status(), 201);
    assert_eq!(delete("/api/models/cls/versions/1").await.0, 200);
    assert_eq!(delete("/api/models/cls/versions/2").await.0, 409);
    // The pipeline still answers; a model no pipeline uses deletes as before.
    let r = s
        .client
        .get(s.url("/v2/models/orient"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(delete("/api/models/spare").await.0, 200);
    // Once the pipeline is gone, so may the model be.
    let r = s
        .client
        .delete(s.url("/api/pipelines/orient"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(delete("/api/models/cls").await.0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_counts_client_errors_and_keeps_the_seconds() {
    let s = crate::harness::Server::with_models(&[("cls", "ocr-cls.onnx")]);
    let key = s.key("infer");
    let good = json!({"inputs": [{"name": "x", "shape": [1, 3, 48, 192], "datatype": "FP32",
                                  "data": vec![0.0f32; 3 * 48 * 192]}]});
    let bad =
        json!({"inputs": [{"name": "nope", "shape": [1], "datatype": "FP32", "data": [0.0]}]});
    for body in [&good, &bad, &good, &bad, &bad] {
        s.client
            .post(s.url("/v2/models/cls/infer"))
            .bearer_auth(&key)
            .json(body)
            .send()
            .await
            .unwrap();
    }
    // The sampler runs each second: wait (bounded) until both kinds of answer are in the ring.
    let mut last = Value::Null;
    for _ in 0..50 {
        last = s.get_json("/api/metrics/history?seconds=60", &key).await;
        let m = last["models"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == "cls")
            .cloned()
            .unwrap_or_default();
        let total = |column: &str| -> f64 {
            m[column]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_f64)
                .sum()
        };
        if total("client_errors_per_s") > 0.0 && total("requests_per_s") >= 5.0 * 0.5 {
            let totals = &last["totals"]["cls"]["statuses"];
            assert_eq!(totals["400"], 3, "{last}");
            assert_eq!(totals["200"], 2, "{last}");
            let ticks: Vec<u64> = m["t_ms"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t.as_u64().unwrap())
                .collect();
            assert!(ticks.windows(2).all(|w| w[0] < w[1]), "{ticks:?}");
            let by_status: u64 = m["statuses"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["400"].as_u64().unwrap_or(0))
                .sum();
            assert_eq!(by_status, 3, "{m}");
            // A poller asking for newer seconds only gets those.
            let newest = *ticks.last().unwrap();
            let after = s
                .get_json(&format!("/api/metrics/history?after_ms={newest}"), &key)
                .await;
            for m in after["models"].as_array().unwrap() {
                for t in m["t_ms"].as_array().unwrap() {
                    assert!(t.as_u64().unwrap() > newest);
                }
            }
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("the history never showed the 400s: {last}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_show_their_last_use_and_their_traffic_per_second() {
    let s = crate::harness::Server::with_models(&[("cls", "ocr-cls.onnx")]);
    let key = s.key("infer");
    let keys = s.get_json("/api/keys", &s.admin_key).await;
    let unused = keys["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["scopes"] == json!(["infer"]))
        .cloned()
        .unwrap();
    assert!(unused["activity"]["last_used_ms"].is_null(), "{unused}");
    let id = unused["public_id"].as_str().unwrap().to_string();

    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let body = json!({"inputs": [{"name": "x", "shape": [1, 3, 48, 192], "datatype": "FP32",
                                  "data": vec![0.0f32; 3 * 48 * 192]}]});
    // The key's ring starts at the sampler's first tick after its first use; requests keep
    // coming (bounded) until a second with traffic is in it.
    let mut sent = 0u64;
    let mut last = Value::Null;
    for _ in 0..50 {
        let r = s.post_json("/v2/models/cls/infer", &key, &body).await;
        assert_eq!(r.status(), 200);
        sent += 1;
        last = s
            .get_json("/api/metrics/history?seconds=60", &s.admin_key)
            .await;
        let charted = last["keys"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["public_id"] == id.as_str())
            .cloned();
        let per_second: f64 = charted
            .iter()
            .flat_map(|k| k["requests_per_s"].as_array().cloned().unwrap_or_default())
            .filter_map(|v| v.as_f64())
            .sum();
        if per_second > 0.0 {
            assert_eq!(charted.unwrap()["name"], unused["name"]);
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        last["keys"]
            .as_array()
            .unwrap()
            .iter()
            .any(|k| k["public_id"] == id.as_str()),
        "the key's traffic never showed: {last}"
    );
    // Every request counted, and when the last one came (server time).
    let usage = s
        .get_json(&format!("/api/keys/{id}/usage"), &s.admin_key)
        .await;
    assert_eq!(usage["activity"]["admitted"], sent, "{usage}");
    let used = usage["activity"]["last_used_ms"].as_u64().unwrap();
    assert!(used >= started, "{usage}");
    // Per-key traffic is for admins: an application key's history has none.
    let own = s.get_json("/api/metrics/history?seconds=60", &key).await;
    assert_eq!(own["keys"], json!([]), "{own}");
}
