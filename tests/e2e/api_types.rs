//! The gateway's answers and the shared answer types (`infergate-api-types`, which the
//! dashboard reads them with) must not drift: each answer of the routes the dashboard reads,
//! over WebSocket and SSE among them, is read into its type and written back, and must come
//! back as the same JSON (the admin, plugin and pipeline routes are checked in process,
//! `gateway/server/tests/handlers/api_types.rs`). A field the
//! server adds that the type lacks is dropped on the way, one the type expects that the server
//! no longer sends fails to read or comes back as a default: either way the test fails.

use crate::harness::{model, register, Options, Server};
use crate::replicas::cls_body;
use crate::websocket::{connect, next_json};
use futures_util::SinkExt;
use infergate_api_types::events::Event;
use infergate_api_types::history::{History, SeriesKind, VersionState};
use infergate_api_types::keys::{KeyList, KeyUsageReport};
use infergate_api_types::models::{ModelList, ModelVersion, ModelVersions};
use infergate_api_types::openai::{
    ChatCompletion, ChatCompletionChunk, ErrorBody, ModelCardList, TextCompletion,
};
use infergate_api_types::stats::StatsList;
use infergate_api_types::stream::{GeneratedToken, GenerationDone};
use infergate_api_types::traffic::TrafficAnswer;
use infergate_api_types::workers::WorkerList;

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
