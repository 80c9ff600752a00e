//! The gateway's admin, metadata, plugin and pipeline answers against the shared answer types
//! (`infergate-api-types`, which the dashboard and clients read them with), in process: each
//! answer is read into its type and written back, and must come back as the same JSON. A field
//! the server adds that the type lacks is dropped on the way, one the type expects that the
//! server no longer sends fails to read or comes back as a default: either way the test fails.
//! The routes that stream over WebSocket are checked end to end (`tests/e2e/api_types.rs`).

use crate::support::{plugin_file, App, Reply};
use http::Method;
use infergate_api_types::keys::{Identity, KeyCreated, KeyRevoked, KeyUpdated};
use infergate_api_types::kserve::{ModelMetadata, RepositoryEntry, ServerDevice, ServerMetadata};
use infergate_api_types::models::{ModelDeleted, VersionDeleted};
use infergate_api_types::pipelines::{
    Mode, PipelineDeleted, PipelineList, PipelineRun, PipelineView,
};
use infergate_api_types::plugins::{
    PluginDeleted, PluginKind, PluginList, PluginVersions, PluginView,
};
use infergate_api_types::workers::{JoinTokenCreated, TokenRevoked};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};

/// `answer` read as `T` and written again, which must give `answer` back. Written as text, as
/// the gateway writes it (an `f32` goes into a `Value` widened: 0.3 as 0.30000001192092896).
fn same_as<T: DeserializeOwned + Serialize>(what: &str, answer: &Value) -> T {
    let typed: T = serde_json::from_value(answer.clone())
        .unwrap_or_else(|e| panic!("{what}: the answer does not read as its type: {e}\n{answer}"));
    let written = serde_json::to_string(&typed).expect("a type that writes");
    let written: Value = serde_json::from_str(&written).expect("JSON");
    assert_eq!(
        &written, answer,
        "{what}: the type writes a different JSON than the server answered"
    );
    typed
}

/// `GET path` with the admin key, read as `T`.
async fn typed<T: DeserializeOwned + Serialize>(app: &App, path: &str) -> T {
    let answer = app.get(path, Some(&app.admin)).await;
    assert_eq!(answer.status, 200, "{path}: {}", answer.json());
    same_as(path, &answer.json())
}

/// `answer`'s JSON body read as `T` and written back (any status).
fn typed_answer<T: DeserializeOwned + Serialize>(what: &str, answer: Reply) -> (u16, T) {
    (answer.status.as_u16(), same_as(what, &answer.json()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_and_metadata_routes_answer_exactly_their_shared_types() {
    let app = App::start().await;
    app.register("cls", "ocr-cls.onnx");
    app.register("gone", "ocr-cls.onnx");
    let admin = Some(app.admin.as_str());
    let send = |method: Method, path: String, body: Option<Value>| {
        let app = &app;
        async move { app.send(method, &path, admin, body).await }
    };

    let server: ServerMetadata = typed(&app, "/v2").await;
    assert!(server.has_extension("openai"));
    assert!(matches!(server.device, ServerDevice::Cpu { .. }));
    let meta: ModelMetadata = typed(&app, "/v2/models/cls").await;
    assert_eq!(
        (meta.name.as_str(), meta.inputs[0].datatype.as_str()),
        ("cls", "FP32")
    );
    let index = send(Method::POST, "/v2/repository/index".into(), Some(json!({}))).await;
    let (_, index): (_, Vec<RepositoryEntry>) = typed_answer("repository index", index);
    assert!(index
        .iter()
        .any(|e| e.name == "gone" && e.state == "UNAVAILABLE"));

    let me: Identity = typed(&app, "/api/whoami").await;
    assert!(me.can("upload"));
    let key = json!({"name": "typed", "scopes": ["infer"], "max_concurrent": 2});
    let created = send(Method::POST, "/api/keys".into(), Some(key)).await;
    let (status, created): (_, KeyCreated) = typed_answer("key created", created);
    assert_eq!((status, created.key.max_concurrent), (201, Some(2)));
    let path = format!("/api/keys/{}", created.key.id);
    let limits = json!({"rate_limit": {"rps": 3}});
    let updated = send(Method::PATCH, path.clone(), Some(limits)).await;
    let (_, updated): (_, KeyUpdated) = typed_answer("key limits changed", updated);
    assert_eq!(updated.key.rate_limit.map(|r| r.rps), Some(3.0));
    let (_, revoked): (_, KeyRevoked) =
        typed_answer("key revoked", send(Method::DELETE, path, None).await);
    assert!(revoked.revoked.revoked_at.is_some());

    let token = send(
        Method::POST,
        "/api/workers/tokens".into(),
        Some(json!({"ttl_s": 60})),
    )
    .await;
    let (status, token): (_, JoinTokenCreated) = typed_answer("join secret", token);
    assert!(status == 201 && token.expires_at.is_some());
    let path = format!("/api/workers/tokens/{}", token.id);
    let (_, revoked): (_, TokenRevoked) = typed_answer(
        "join secret revoked",
        send(Method::DELETE, path, None).await,
    );
    assert_eq!(revoked.revoked, token.id);

    let deleted = send(Method::DELETE, "/api/models/gone/versions/1".into(), None).await;
    let (_, deleted): (_, VersionDeleted) = typed_answer("version deleted", deleted);
    assert!(deleted.deleted);
    let error = send(Method::DELETE, "/api/models/gone".into(), None).await;
    let (status, error): (_, infergate_api_types::ErrorBody) = typed_answer("an error", error);
    assert_eq!(status, 404, "{}", error.error);
    let all = send(Method::DELETE, "/api/models/cls".into(), None).await;
    let (_, all): (_, ModelDeleted) = typed_answer("model deleted", all);
    assert_eq!(all.deleted_versions, [1]);
}

/// `method path` with the admin key and `body` (JSON, or raw bytes with `content_type`): its
/// JSON answer, after checking its status.
async fn answer(app: &App, method: Method, path: &str, body: Body, status: u16) -> Value {
    let (body, content_type) = match body {
        Body::Json(json) => (axum::body::Body::from(json.to_string()), "application/json"),
        Body::Bytes(bytes, content_type) => (axum::body::Body::from(bytes), content_type),
        Body::None => (axum::body::Body::empty(), "application/json"),
    };
    let request = http::Request::builder()
        .method(method)
        .uri(path)
        .header(http::header::AUTHORIZATION, format!("Bearer {}", app.admin))
        .header(http::header::CONTENT_TYPE, content_type)
        .body(body)
        .expect("request");
    let reply = app.call(request).await;
    assert_eq!(reply.status.as_u16(), status, "{path}: {:?}", reply.body);
    reply.json()
}

enum Body {
    Json(Value),
    Bytes(Vec<u8>, &'static str),
    None,
}

/// A demo pipeline spec (scripts/demo/NAME.json).
fn demo(name: &str) -> Value {
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("../../scripts/demo/{name}.json"));
    serde_json::from_slice(&std::fs::read(file).expect("a demo spec")).expect("JSON")
}

/// A 40×30 PNG with colour gradients, written by the setup step's Pillow.
fn png() -> Vec<u8> {
    let python = std::env::var("INFERGATE_PYTHON")
        .expect("INFERGATE_PYTHON is unset: run scripts/setup.sh and `source .cache/env.sh`");
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("run.png");
    let script = "import sys; from PIL import Image; w, h = 40, 30; \
        img = Image.new('RGB', (w, h)); \
        img.putdata([(x * 255 // w, y * 255 // h, (x * y) % 256) for y in range(h) for x in range(w)]); \
        img.save(sys.argv[1])";
    let status = std::process::Command::new(python)
        .args(["-c", script])
        .arg(&out)
        .status()
        .expect("run python");
    assert!(status.success(), "Pillow could not write the test image");
    std::fs::read(out).expect("the image")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plugin_and_pipeline_routes_answer_exactly_their_shared_types() {
    let app = App::start().await;
    for name in ["efficientnet-lite0", "ocr-det", "ocr-cls", "ocr-rec"] {
        app.register(name, &format!("{name}.onnx"));
    }
    let mut uploaded = Vec::new();
    for plugin in ["image-decode", "imagenet-topk", "ctc-decode"] {
        let wasm = std::fs::read(plugin_file(plugin)).expect("a built plugin");
        let body = Body::Bytes(wasm, "application/wasm");
        let view = answer(&app, Method::POST, "/api/plugins", body, 201).await;
        uploaded.push(same_as::<PluginView>("POST /api/plugins", &view));
    }
    // One version with limits of its own, the others on the server's defaults.
    let topk = &uploaded[1];
    let path = format!("/api/plugins/imagenet-topk/versions/{}", topk.version);
    let limits = Body::Json(json!({"deadline_ms": 1500}));
    let limited = answer(&app, Method::PUT, &format!("{path}/limits"), limits, 200).await;
    let limited: PluginView = same_as("PUT limits", &limited);
    assert_eq!(
        (limited.limits.deadline_ms, limited.limits.memory_mib),
        (Some(1500), None)
    );
    assert_eq!(limited.effective_limits.deadline_ms, 1500);

    // The demo pipelines: a native pre-op, parameters, and a text-detection stage whose
    // defaults the answer fills in; `probabilities` ends in the model's tensors.
    let mut classify = demo("classify");
    classify["parameters"] = json!({"top_k": "3"});
    let mut probabilities = demo("classify");
    probabilities["post"] = json!([]);
    for (name, spec) in [
        ("classify", classify),
        ("probabilities", probabilities),
        ("ocr", demo("ocr")),
    ] {
        let path = format!("/api/pipelines/{name}");
        let view = answer(&app, Method::PUT, &path, Body::Json(spec), 201).await;
        let _: PipelineView = same_as("PUT /api/pipelines", &view);
    }

    let plugins: PluginList = typed(&app, "/api/plugins").await;
    assert_eq!(plugins.plugins.len(), 3);
    let decode = plugins
        .plugins
        .iter()
        .find(|p| p.name == "image-decode")
        .expect("image-decode listed");
    assert_eq!(
        (decode.kind, decode.description.kind),
        (PluginKind::Pre, PluginKind::Pre)
    );
    assert!(decode.limits.deadline_ms.is_none() && decode.effective_limits.memory_mib > 0);
    let versions: PluginVersions = typed(&app, "/api/plugins/imagenet-topk").await;
    assert_eq!(versions.versions, [limited]);

    let pipelines: PipelineList = typed(&app, "/api/pipelines").await;
    assert_eq!(pipelines.pipelines.len(), 3);
    let ocr: PipelineView = typed(&app, "/api/pipelines/ocr").await;
    let detect = ocr.spec.detect.as_ref().expect("a detect stage");
    assert_eq!((detect.max_side, detect.threshold), (960, 0.3));
    assert_eq!(
        ocr.spec.preprocess.as_ref().expect("a pre-op").mode,
        Mode::Letterbox
    );
    let classify: PipelineView = typed(&app, "/api/pipelines/classify").await;
    assert_eq!(classify.spec.parameters["top_k"], "3");

    let image = Body::Bytes(png(), "image/png");
    let run = answer(
        &app,
        Method::POST,
        "/api/pipelines/probabilities/run",
        image,
        200,
    )
    .await;
    let run: PipelineRun = same_as("a run's tensors", &run);
    assert_eq!(run.outputs[0].shape, [1, 1000]);

    for name in ["probabilities", "classify"] {
        let path = format!("/api/pipelines/{name}");
        let deleted = answer(&app, Method::DELETE, &path, Body::None, 200).await;
        let deleted: PipelineDeleted = same_as("DELETE /api/pipelines", &deleted);
        assert_eq!(deleted.deleted, name);
    }
    let deleted = answer(&app, Method::DELETE, &path, Body::None, 200).await;
    let deleted: PluginDeleted = same_as("DELETE a plugin version", &deleted);
    assert_eq!(deleted.deleted.versions, [topk.version.as_str()]);
}
