//! A model's trace settings (Triton's trace extension) decide the traces of requests that name
//! the model where the front door cannot see it: in the body of an OpenAI request (chat,
//! streamed or not, and embeddings), in a WebSocket message: level `OFF` records nothing while
//! another model records, a rate draws from the trace id, a count is the model's own. Spans are
//! exported in process (`support::traces`); each model here sets its level itself, so what
//! another test does to the server-wide settings does not matter. Model names are this
//! module's own: the settings are the process's.

use crate::support::traces::{self, traceparent, CALLER_SPAN};
use crate::support::App;
use infergate_service::config::CallerSampling;
use opentelemetry::trace::SpanId;
use opentelemetry_sdk::trace::SpanData;
use serde_json::{json, Value};

/// A trace id whose low half is `low`: at rate 2 (a ratio of one half) those under 2^63 are
/// recorded, as OpenTelemetry's ratio sampler draws them.
fn trace(high: &str, low: u64) -> String {
    format!("{high:0>16}{low:016x}")
}

async fn trace_count(app: &App, model: &str) -> Value {
    let path = format!("/v2/models/{model}/trace/setting");
    app.get(&path, Some(&app.infer)).await.json()["trace_count"].clone()
}

/// The spans of `trace` once it holds every span named in `names` (failing after 30 s).
async fn recorded(trace: &str, names: &[&str]) -> Vec<SpanData> {
    traces::until(trace, &format!("all of {names:?}"), |spans| {
        let have = traces::names(spans);
        names.iter().all(|n| have.iter().any(|h| h == n))
    })
    .await
}

fn named<'a>(spans: &'a [SpanData], name: &str) -> &'a SpanData {
    spans
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no {name} span in {:?}", traces::names(spans)))
}

/// A short greedy chat completion on `model` (streamed when `stream`), with the caller's
/// `traceparent` if given; the answer's `X-Trace-Id`.
async fn chat(app: &App, model: &str, parent: Option<&str>, stream: bool) -> String {
    let body = json!({"model": model, "max_tokens": 2, "temperature": 0, "stream": stream,
                      "messages": [{"role": "user", "content": "Hi"}]});
    let request = traces::post("/v1/chat/completions", &app.infer, &body, parent);
    let reply = app.call(request).await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    if stream {
        assert!(
            reply.body.ends_with(b"data: [DONE]\n\n"),
            "{:?}",
            reply.body
        );
    }
    let trace = reply.header("x-trace-id").expect("X-Trace-Id").to_owned();
    assert_eq!(trace.len(), 32, "{trace}");
    trace
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_models_settings_decide_the_traces_of_its_chat_completions() {
    traces::install();
    let app = App::with_config(|c| {
        c.llm.max_sequences = 2;
        c.llm.context_per_sequence = 512;
        c.llm.threads = 1;
        c.llm.embeddings.threads = 1;
        // Callers' sampled flags never decide: the settings do.
        c.tracing.honour_caller_sampling = CallerSampling::None;
    })
    .await;
    app.register("chat-traced", "smollm2.gguf");
    app.register("chat-quiet", "smollm2.gguf");
    app.set_trace(
        "chat-traced",
        json!({"trace_level": ["TIMESTAMPS"], "trace_rate": "1", "trace_count": "4"}),
    )
    .await;
    app.set_trace("chat-quiet", json!({"trace_level": ["OFF"]}))
        .await;

    let quiet = chat(&app, "chat-quiet", None, false).await;

    // The caller's trace goes on, under the model's settings (its flag is not trusted here).
    let caller = trace("4bf92f3577b34da6", 7);
    let continued = chat(&app, "chat-traced", Some(&traceparent(&caller)), false).await;
    assert_eq!(continued, caller, "X-Trace-Id names the caller's trace");
    let spans = recorded(&caller, &["request", "prefill", "decode"]).await;
    let root = named(&spans, "request");
    assert_eq!(format!("{:016x}", root.parent_span_id), CALLER_SPAN);
    assert_eq!(
        traces::attribute(root, "model").as_deref(),
        Some("chat-traced")
    );
    for phase in ["prefill", "decode"] {
        assert_eq!(
            named(&spans, phase).parent_span_id,
            root.span_context.span_id(),
            "{phase} is under the request's span"
        );
    }

    // A trace that starts here is the one X-Trace-Id names.
    let own = chat(&app, "chat-traced", None, false).await;
    let spans = recorded(&own, &["request", "prefill", "decode"]).await;
    assert_eq!(named(&spans, "request").parent_span_id, SpanId::INVALID);

    // A streamed answer's generation goes on after the handler returned: still in its trace.
    let streamed = chat(&app, "chat-traced", None, true).await;
    let spans = recorded(&streamed, &["request", "prefill", "decode"]).await;
    let root = named(&spans, "request").span_context.span_id();
    assert_eq!(named(&spans, "decode").parent_span_id, root);

    // Embeddings name their model in the body too.
    let reply = app
        .post(
            "/v1/embeddings",
            Some(&app.infer),
            json!({"model": "chat-traced", "input": "Hi"}),
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.json());
    let embedded = reply.header("x-trace-id").expect("X-Trace-Id");
    let spans = recorded(embedded, &["request"]).await;
    assert_eq!(
        traces::attribute(named(&spans, "request"), "model").as_deref(),
        Some("chat-traced")
    );

    // The model's count is its own: the quiet model's request took none of it, and it is
    // used up now.
    assert_eq!(trace_count(&app, "chat-traced").await, "0");
    let past_count = chat(&app, "chat-traced", None, false).await;
    // Both were answered before the last recorded one was: their spans would have ended.
    assert!(traces::of(&quiet).is_empty(), "level OFF records nothing");
    assert!(traces::of(&past_count).is_empty(), "the count is used up");
    assert_ne!(past_count, quiet);
}

/// A WebSocket on `app`'s port with the infer key.
async fn websocket(
    app: &App,
) -> tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>> {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let addr = app.listen().await;
    let mut request = format!("ws://{addr}/v2/stream")
        .into_client_request()
        .expect("request");
    request.headers_mut().insert(
        http::header::AUTHORIZATION,
        format!("Bearer {}", app.infer).parse().expect("header"),
    );
    let (ws, _) = tokio_tungstenite::connect_async(request)
        .await
        .expect("upgraded");
    ws
}

/// Sends one inference message for `model` continuing `trace`, and reads its answer.
async fn message<S>(ws: &mut S, id: u64, model: &str, trace: &str)
where
    S: futures_util::Sink<tokio_tungstenite::tungstenite::Message>
        + futures_util::Stream<
            Item = Result<
                tokio_tungstenite::tungstenite::Message,
                tokio_tungstenite::tungstenite::Error,
            >,
        > + Unpin,
    S::Error: std::fmt::Debug,
{
    use futures_util::{SinkExt, StreamExt};
    let mut body = App::tiny_request(&[0.5; 16]);
    body["id"] = json!(id);
    body["model"] = json!(model);
    body["traceparent"] = json!(traceparent(trace));
    ws.send(body.to_string().into()).await.expect("sent");
    loop {
        let frame = ws.next().await.expect("an answer").expect("a frame");
        let Ok(text) = frame.to_text() else { continue };
        if text.is_empty() {
            continue;
        }
        let answer: Value = serde_json::from_str(text).expect("JSON");
        assert_eq!(answer["id"], id, "{answer}");
        assert!(answer.get("error").is_none(), "{answer}");
        return;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_models_settings_decide_the_traces_of_its_websocket_messages() {
    traces::install();
    let app = App::with_config(|c| c.tracing.honour_caller_sampling = CallerSampling::None).await;
    for name in ["ws-traced", "ws-quiet", "ws-halved", "ws-counted"] {
        app.register_tiny(name);
    }
    let on = json!({"trace_level": ["TIMESTAMPS"], "trace_rate": "1"});
    app.set_trace("ws-traced", on.clone()).await;
    app.set_trace("ws-quiet", json!({"trace_level": ["OFF"]}))
        .await;
    app.set_trace(
        "ws-halved",
        json!({"trace_level": ["TIMESTAMPS"], "trace_rate": "2"}),
    )
    .await;
    app.set_trace(
        "ws-counted",
        json!({"trace_level": ["TIMESTAMPS"], "trace_rate": "1", "trace_count": "1"}),
    )
    .await;
    let mut ws = websocket(&app).await;

    // Not recorded: the model's level is OFF; a trace id past the rate's share; past the count.
    let quiet = trace("a1", 1);
    let past_rate = trace("a2", u64::MAX - 1);
    let within_rate = trace("a3", 1);
    let counted = trace("a4", 1);
    let past_count = trace("a5", 1);
    let traced = trace("a6", 1);
    message(&mut ws, 1, "ws-quiet", &quiet).await;
    message(&mut ws, 2, "ws-halved", &past_rate).await;
    message(&mut ws, 3, "ws-halved", &within_rate).await;
    message(&mut ws, 4, "ws-counted", &counted).await;
    message(&mut ws, 5, "ws-counted", &past_count).await;
    message(&mut ws, 6, "ws-traced", &traced).await;

    for trace in [&within_rate, &counted] {
        recorded(trace, &["websocket message"]).await;
    }
    // The last message's trace, recorded after every other message was answered.
    let spans = recorded(&traced, &["websocket message", "model run"]).await;
    let root = named(&spans, "websocket message");
    assert_eq!(format!("{:016x}", root.parent_span_id), CALLER_SPAN);
    assert_eq!(
        traces::attribute(root, "model").as_deref(),
        Some("ws-traced")
    );
    for trace in [&quiet, &past_rate, &past_count] {
        assert!(traces::of(trace).is_empty(), "{trace} was recorded");
    }
    assert_eq!(trace_count(&app, "ws-counted").await, "0");
    assert_eq!(trace_count(&app, "ws-traced").await, "-1");
}
