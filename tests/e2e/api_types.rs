//! The gateway's answers and the shared answer types (`infergate-api-types`, which the
//! dashboard reads them with) must not drift: each answer of the routes the dashboard reads is
//! read into its type and written back, and must come back as the same JSON. A field the
//! server adds that the type lacks is dropped on the way, one the type expects that the server
//! no longer sends fails to read or comes back as a default: either way the test fails.

use crate::blobs::plugin_file;
use crate::harness::{model, register, Options, Server};
use crate::replicas::cls_body;
use crate::websocket::{connect, next_json};
use crate::worker_pipelines::png;
use futures_util::SinkExt;
use infergate_api_types::events::Event;
use infergate_api_types::history::{History, SeriesKind, VersionState};
use infergate_api_types::keys::{
    Identity, KeyCreated, KeyList, KeyRevoked, KeyUpdated, KeyUsageReport,
};
use infergate_api_types::kserve::{ModelMetadata, RepositoryEntry, ServerDevice, ServerMetadata};
use infergate_api_types::models::{
    ModelDeleted, ModelList, ModelVersion, ModelVersions, VersionDeleted,
};
use infergate_api_types::openai::{
    ChatCompletion, ChatCompletionChunk, ErrorBody, ModelCardList, TextCompletion,
};
use infergate_api_types::pipelines::{
    Mode, PipelineDeleted, PipelineList, PipelineRun, PipelineView,
};
use infergate_api_types::plugins::{
    PluginDeleted, PluginKind, PluginList, PluginVersions, PluginView,
};
use infergate_api_types::stats::StatsList;
use infergate_api_types::stream::{GeneratedToken, GenerationDone};
use infergate_api_types::traffic::TrafficAnswer;
use infergate_api_types::workers::{JoinTokenCreated, TokenRevoked, WorkerList};

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

/// `answer` read as `T` and written again, which must give `answer` back. Written as text, as
/// the gateway writes it (an `f32` goes into a `Value` widened: 0.3 as 0.30000001192092896).
fn same_as<T: DeserializeOwned + Serialize>(what: &str, answer: &Value) -> T {
    let typed: T = serde_json::from_value(answer.clone())
        .unwrap_or_else(|e| panic!("{what}: the answer does not read as its type: {e}\n{answer}"));
    let written: Value = serde_json::from_str(&serde_json::to_string(&typed).unwrap()).unwrap();
    assert_eq!(
        &written, answer,
        "{what}: the type writes a different JSON than the server answered"
    );
    typed
}

async fn typed<T: DeserializeOwned + Serialize>(s: &Server, path: &str) -> T {
    let answer = s.get_json(path, &s.admin_key).await;
    same_as(path, &answer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_routes_answer_exactly_their_shared_types() {
    let tmp = tempfile::tempdir().unwrap();
    // An ONNX model that serves, one that stays unloaded (its `execution` is null) and a chat
    // model (no `execution` at all): the shapes of a model version.
    register(tmp.path(), "cls", &model("ocr-cls.onnx"));
    register(tmp.path(), "idle", &model("ocr-cls.onnx"));
    register(tmp.path(), "smollm2", &model("smollm2.gguf"));
    let s = Server::start_in(tmp.path(), Options::default());
    // A key with its own limits next to the admin key on the server's defaults.
    let infer = s.key_with("infer", &["--rps", "5", "--burst", "10"]);
    let r = s
        .client
        .post(s.url("/v2/models/cls/infer"))
        .bearer_auth(&infer)
        .json(&cls_body())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);

    let models: ModelList = typed(&s, "/api/models").await;
    let cls = models.models.iter().find(|m| m.name == "cls").unwrap();
    assert_eq!(
        (cls.state.as_str(), cls.inputs[0].datatype.as_str()),
        ("loaded", "FP32")
    );
    assert!(cls.execution.as_ref().is_some_and(Value::is_object) && cls.metadata_keys.is_some());
    let idle = models.models.iter().find(|m| m.name == "idle").unwrap();
    assert_eq!(idle.execution, Some(Value::Null));
    let chat = models.models.iter().find(|m| m.name == "smollm2").unwrap();
    assert_eq!(chat.format.as_deref(), Some("gguf"));
    assert!(chat.execution.is_none() && chat.metadata.is_some());
    let versions: ModelVersions = typed(&s, "/api/models/cls").await;
    assert_eq!(versions.versions.len(), 1);
    let _: ModelVersion = typed(&s, "/api/models/smollm2/versions/1").await;

    let keys: KeyList = typed(&s, "/api/keys").await;
    let limited = keys
        .keys
        .iter()
        .find(|k| k.key.rate_limit.is_some())
        .expect("the key with its own limits is listed");
    assert_eq!(limited.activity.admitted, 1);
    assert_eq!(limited.key.scopes, ["infer"]);
    let usage: KeyUsageReport = typed(&s, &format!("/api/keys/{}/usage", limited.key.id)).await;
    assert_eq!(usage.limits.rate_limit_source, "key");

    let stats: StatsList = typed(&s, "/v2/models/stats").await;
    let served = stats.model_stats.iter().find(|m| m.name == "cls").unwrap();
    assert_eq!(served.inference_stats.success.count, 1);
    let _: StatsList = typed(&s, "/v2/models/cls/versions/1/stats").await;

    // The traffic routes: a policy as the server writes it, and the figures beside it.
    let put = s
        .client
        .put(s.url("/api/models/cls/traffic"))
        .bearer_auth(&s.admin_key)
        .json(&json!({"split": [{"version": 1, "weight": 3}], "sticky": "header:x-user"}))
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 200);
    let traffic: TrafficAnswer = same_as("PUT traffic", &put.json().await.unwrap());
    assert_eq!(
        traffic.policy.and_then(|p| p.sticky).as_deref(),
        Some("header:x-user")
    );
    let traffic: TrafficAnswer = typed(&s, "/api/models/cls/traffic").await;
    assert_eq!(traffic.figures.versions[0].requests, 1);

    let workers: WorkerList = typed(&s, "/api/workers").await;
    assert_eq!(workers.workers[0].info.id, "local");

    // Every `/v2/events` frame up to the first tick: the connection's first second reports
    // each version's state (`model_state`) and the local engine (`worker_state`) as new.
    let (mut ws, _) = connect(&s, "/v2/events", &[("x-api-key", &s.admin_key)])
        .await
        .unwrap();
    let mut changes = Vec::new();
    let tick = loop {
        match same_as::<Event>("a /v2/events frame", &next_json(&mut ws).await) {
            Event::Tick(tick) => break tick,
            change => changes.push(change),
        }
    };
    assert_eq!(tick.workers[0].id, "local");
    let served = tick.models.iter().find(|m| m.model == "cls").unwrap();
    assert_eq!(served.state, VersionState::Loaded);
    assert!(changes.iter().any(|c| matches!(c,
        Event::ModelState(m) if m.model == "idle" && m.state == VersionState::Unloaded)));
    assert!(changes.iter().any(|c| matches!(c,
        Event::WorkerState(w) if w.worker == "local" && w.previous.is_none())));

    // The history, once its sampler has taken a second with the request in it and a second
    // with the admin key's own requests (a key's first sample is its baseline, not a rate).
    let counted = |h: &History| {
        h.totals
            .get("cls")
            .is_some_and(|t| t.statuses.get(&200) == Some(&1))
            && h.keys
                .iter()
                .any(|k| k.requests_per_s.iter().any(|r| *r > 0.0))
    };
    let mut history: History = typed(&s, "/api/metrics/history?seconds=60").await;
    for _ in 0..50 {
        if counted(&history) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        history = typed(&s, "/api/metrics/history?seconds=60").await;
    }
    assert!(counted(&history), "the history never counted the requests");
    let cls = history.models.iter().find(|m| m.name == "cls").unwrap();
    assert_eq!(cls.kind, SeriesKind::Model);
    assert!(cls.t_ms.len() == cls.p50_ms.len() && cls.t_ms.len() == cls.statuses.len());
}

/// The `data:` payloads of a streamed answer, `[DONE]` left out.
async fn events(r: reqwest::Response) -> Vec<Value> {
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    text.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap_or_else(|e| panic!("{e}: {d}")))
        .collect()
}

/// Every chunk of a streamed answer read as `T` and written again.
async fn typed_chunks<T: DeserializeOwned + Serialize>(what: &str, r: reqwest::Response) -> Vec<T> {
    let chunks: Vec<T> = events(r).await.iter().map(|e| same_as(what, e)).collect();
    assert!(!chunks.is_empty(), "{what}: no chunks");
    chunks
}

/// The frames of a `generate` message over `/v2/stream`, each read as its type and written again.
async fn typed_generation(s: &Server, key: &str, model: &str) -> GenerationDone<'static> {
    let (mut ws, _) = connect(s, "/v2/stream", &[("x-api-key", key)])
        .await
        .unwrap();
    let message = json!({"id": "g", "model": model,
                         "generate": {"prompt": "Once", "max_tokens": 4, "temperature": 0}});
    ws.send(Message::text(message.to_string())).await.unwrap();
    loop {
        let frame = next_json(&mut ws).await;
        if frame.get("done").is_some() {
            return same_as("a generation's last frame", &frame);
        }
        let _: GeneratedToken = same_as("a generated token's frame", &frame);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_routes_answer_exactly_their_shared_types() {
    let tmp = tempfile::tempdir().unwrap();
    // A chat model (log probabilities, `system_fingerprint`, cached tokens) and the character
    // model (none of them).
    register(tmp.path(), "smollm2", &model("smollm2.gguf"));
    register(tmp.path(), "textgen", &model("textgen.onnx"));
    let vocab = model("textgen-vocab.json").display().to_string();
    let options = Options {
        extra_args: vec!["--openai-vocab".into(), vocab],
        ..Options::default()
    };
    let s = Server::start_in(tmp.path(), options);
    let key = s.key("infer");
    let post = |path: &'static str, body: Value| {
        let (s, key) = (&s, &key);
        async move { s.post_json(path, key, &body).await }
    };

    let models: ModelCardList = same_as("/v1/models", &s.get_json("/v1/models", &key).await);
    let context = |id: &str| {
        models
            .data
            .iter()
            .find(|m| m.id == id)
            .unwrap()
            .max_model_len
    };
    assert!(context("smollm2").is_some() && context("textgen").is_none());

    let messages = json!([{"role": "user", "content": "What is the capital of France?"}]);
    for model in ["smollm2", "textgen"] {
        let chat = json!({"model": model, "messages": messages, "max_tokens": 4, "temperature": 0});
        let mut completion = json!({"model": model, "prompt": "The capital of France is",
                                    "max_tokens": 4, "temperature": 0});
        let mut chat_with_logprobs = chat.clone();
        if model == "smollm2" {
            chat_with_logprobs["logprobs"] = json!(true);
            chat_with_logprobs["top_logprobs"] = json!(2);
            completion["logprobs"] = json!(2);
        }
        let answer = post("/v1/chat/completions", chat_with_logprobs.clone()).await;
        let answer: ChatCompletion = same_as("a chat answer", &answer.json().await.unwrap());
        assert_eq!(answer.system_fingerprint.is_some(), model == "smollm2");
        let answer = post("/v1/completions", completion.clone()).await;
        let answer: TextCompletion = same_as("a completion", &answer.json().await.unwrap());
        assert_eq!(answer.choices[0].logprobs.is_some(), model == "smollm2");

        let mut stream = chat_with_logprobs;
        stream["stream"] = json!(true);
        stream["stream_options"] = json!({"include_usage": true});
        let r = post("/v1/chat/completions", stream).await;
        let chunks: Vec<ChatCompletionChunk> = typed_chunks("a chat chunk", r).await;
        assert!(chunks.last().unwrap().usage.is_some());
        let mut stream = completion;
        stream["stream"] = json!(true);
        let r = post("/v1/completions", stream).await;
        let chunks: Vec<TextCompletion> = typed_chunks("a completion chunk", r).await;
        assert!(chunks.last().unwrap().choices[0].finish_reason.is_some());

        let done = typed_generation(&s, &key, model).await;
        assert!(done.done && done.usage.completion_tokens > 0);
    }

    let unknown = json!({"model": "nope", "messages": messages});
    let r = post("/v1/chat/completions", unknown).await;
    assert_eq!(r.status(), 404);
    let error: ErrorBody = same_as("an error answer", &r.json().await.unwrap());
    assert_eq!(error.error.kind, "invalid_request_error");
}

/// `answer`'s JSON body read as `T` and written back (any status).
async fn typed_answer<T: DeserializeOwned + Serialize>(
    what: &str,
    answer: reqwest::Response,
) -> (u16, T) {
    let status = answer.status().as_u16();
    let body: Value = answer.json().await.expect("a JSON body");
    (status, same_as(what, &body))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_and_metadata_routes_answer_exactly_their_shared_types() {
    let tmp = tempfile::tempdir().unwrap();
    register(tmp.path(), "cls", &model("ocr-cls.onnx"));
    register(tmp.path(), "gone", &model("ocr-cls.onnx"));
    let s = Server::start_in(tmp.path(), Options::default());
    let admin = &s.admin_key;
    let send = |method: reqwest::Method, path: &str, body: Option<Value>| {
        let mut r = s.client.request(method, s.url(path)).bearer_auth(admin);
        if let Some(body) = body {
            r = r.json(&body);
        }
        r.send()
    };

    let server: ServerMetadata = typed(&s, "/v2").await;
    assert!(server.has_extension("openai"));
    assert!(matches!(server.device, ServerDevice::Cpu { .. }));
    let meta: ModelMetadata = typed(&s, "/v2/models/cls").await;
    assert_eq!(
        (meta.name.as_str(), meta.inputs[0].datatype.as_str()),
        ("cls", "FP32")
    );
    let (_, index): (_, Vec<RepositoryEntry>) = typed_answer(
        "repository index",
        send(
            reqwest::Method::POST,
            "/v2/repository/index",
            Some(json!({})),
        )
        .await
        .unwrap(),
    )
    .await;
    assert!(index
        .iter()
        .any(|e| e.name == "gone" && e.state == "UNAVAILABLE"));

    let me: Identity = typed(&s, "/api/whoami").await;
    assert!(me.can("upload"));
    let (status, created): (_, KeyCreated) = typed_answer(
        "key created",
        send(
            reqwest::Method::POST,
            "/api/keys",
            Some(json!({"name": "typed", "scopes": ["infer"], "max_concurrent": 2})),
        )
        .await
        .unwrap(),
    )
    .await;
    assert_eq!((status, created.key.max_concurrent), (201, Some(2)));
    let path = format!("/api/keys/{}", created.key.id);
    let (_, updated): (_, KeyUpdated) = typed_answer(
        "key limits changed",
        send(
            reqwest::Method::PATCH,
            &path,
            Some(json!({"rate_limit": {"rps": 3}})),
        )
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(updated.key.rate_limit.map(|r| r.rps), Some(3.0));
    let (_, revoked): (_, KeyRevoked) = typed_answer(
        "key revoked",
        send(reqwest::Method::DELETE, &path, None).await.unwrap(),
    )
    .await;
    assert!(revoked.revoked.revoked_at.is_some());

    let (status, token): (_, JoinTokenCreated) = typed_answer(
        "join secret",
        send(
            reqwest::Method::POST,
            "/api/workers/tokens",
            Some(json!({"ttl_s": 60})),
        )
        .await
        .unwrap(),
    )
    .await;
    assert!(status == 201 && token.expires_at.is_some());
    let path = format!("/api/workers/tokens/{}", token.id);
    let (_, revoked): (_, TokenRevoked) = typed_answer(
        "join secret revoked",
        send(reqwest::Method::DELETE, &path, None).await.unwrap(),
    )
    .await;
    assert_eq!(revoked.revoked, token.id);

    let (_, deleted): (_, VersionDeleted) = typed_answer(
        "version deleted",
        send(reqwest::Method::DELETE, "/api/models/gone/versions/1", None)
            .await
            .unwrap(),
    )
    .await;
    assert!(deleted.deleted);
    let (status, error): (_, infergate_api_types::ErrorBody) = typed_answer(
        "an error",
        send(reqwest::Method::DELETE, "/api/models/gone", None)
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 404, "{}", error.error);
    let (_, all): (_, ModelDeleted) = typed_answer(
        "model deleted",
        send(reqwest::Method::DELETE, "/api/models/cls", None)
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(all.deleted_versions, [1]);
}

/// `request` sent with the admin key: its JSON answer, after checking its status.
async fn answer(s: &Server, request: reqwest::RequestBuilder, status: u16) -> Value {
    let r = request.bearer_auth(&s.admin_key).send().await.unwrap();
    assert_eq!(r.status(), status);
    r.json().await.unwrap()
}

/// A demo pipeline spec (scripts/demo/NAME.json).
fn demo(name: &str) -> Value {
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("../../scripts/demo/{name}.json"));
    serde_json::from_slice(&std::fs::read(file).unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plugin_and_pipeline_routes_answer_exactly_their_shared_types() {
    let tmp = tempfile::tempdir().unwrap();
    for name in ["efficientnet-lite0", "ocr-det", "ocr-cls", "ocr-rec"] {
        register(tmp.path(), name, &model(&format!("{name}.onnx")));
    }
    let s = Server::start_in(tmp.path(), Options::default());
    let mut uploaded = Vec::new();
    for plugin in ["image-decode", "imagenet-topk", "ctc-decode"] {
        let wasm = std::fs::read(plugin_file(plugin)).unwrap();
        let post = s.client.post(s.url("/api/plugins")).body(wasm);
        let view: PluginView = same_as("POST /api/plugins", &answer(&s, post, 201).await);
        uploaded.push(view);
    }
    // One version with limits of its own, the others on the server's defaults.
    let topk = &uploaded[1];
    let path = format!("/api/plugins/imagenet-topk/versions/{}", topk.version);
    let put = s
        .client
        .put(s.url(&format!("{path}/limits")))
        .json(&json!({"deadline_ms": 1500}));
    let limited: PluginView = same_as("PUT limits", &answer(&s, put, 200).await);
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
        let put = s
            .client
            .put(s.url(&format!("/api/pipelines/{name}")))
            .json(&spec);
        let _: PipelineView = same_as("PUT /api/pipelines", &answer(&s, put, 201).await);
    }

    let plugins: PluginList = typed(&s, "/api/plugins").await;
    assert_eq!(plugins.plugins.len(), 3);
    let decode = plugins
        .plugins
        .iter()
        .find(|p| p.name == "image-decode")
        .unwrap();
    assert_eq!(
        (decode.kind, decode.description.kind),
        (PluginKind::Pre, PluginKind::Pre)
    );
    assert!(decode.limits.deadline_ms.is_none() && decode.effective_limits.memory_mib > 0);
    let versions: PluginVersions = typed(&s, "/api/plugins/imagenet-topk").await;
    assert_eq!(versions.versions, [limited]);

    let pipelines: PipelineList = typed(&s, "/api/pipelines").await;
    assert_eq!(pipelines.pipelines.len(), 3);
    let ocr: PipelineView = typed(&s, "/api/pipelines/ocr").await;
    let detect = ocr.spec.detect.as_ref().unwrap();
    assert_eq!((detect.max_side, detect.threshold), (960, 0.3));
    assert_eq!(ocr.spec.preprocess.as_ref().unwrap().mode, Mode::Letterbox);
    let classify: PipelineView = typed(&s, "/api/pipelines/classify").await;
    assert_eq!(classify.spec.parameters["top_k"], "3");

    let image = png(&tmp.path().join("run.png"), 40, 30, "pass");
    let run = s
        .client
        .post(s.url("/api/pipelines/probabilities/run"))
        .header("content-type", "image/png")
        .body(image);
    let run: PipelineRun = same_as("a run's tensors", &answer(&s, run, 200).await);
    assert_eq!(run.outputs[0].shape, [1, 1000]);

    let delete = s.client.delete(s.url("/api/pipelines/probabilities"));
    let deleted: PipelineDeleted = same_as("DELETE /api/pipelines", &answer(&s, delete, 200).await);
    assert_eq!(deleted.deleted, "probabilities");
    let delete = s.client.delete(s.url("/api/pipelines/classify"));
    let _: PipelineDeleted = same_as("DELETE /api/pipelines", &answer(&s, delete, 200).await);
    let delete = s.client.delete(s.url(&path));
    let deleted: PluginDeleted = same_as("DELETE a plugin version", &answer(&s, delete, 200).await);
    assert_eq!(deleted.deleted.versions, [topk.version.as_str()]);
}
