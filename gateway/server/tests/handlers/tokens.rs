//! Token limits per key on the real chat model (`$INFERGATE_MODELS/smollm2.gguf`), in process:
//! keys created and changed with token limits (bad ones refused, nothing stored), requests
//! admitted until a limit is spent, then 429 with `Retry-After`, OpenAI's error body naming the
//! limit and the token policy's RateLimit fields; streams charged their real tokens, as the
//! usage API shows; no direct-mode token for a key held to a token limit.

use crate::support::{App, Reply};
use http::{Method, Request, StatusCode};
use serde_json::{json, Value};

fn gguf() -> std::path::PathBuf {
    crate::support::model_file("smollm2.gguf")
}

/// A gateway with the chat model registered as `smollm2`.
async fn chat_app() -> App {
    with_chat_model(App::start().await).await
}

/// `app` with the chat model registered as `smollm2`.
async fn with_chat_model(app: App) -> App {
    let request = Request::builder()
        .method(Method::POST)
        .uri("/api/models/smollm2/versions")
        .header("authorization", format!("Bearer {}", app.upload))
        .body(axum::body::Body::from(
            std::fs::read(gguf()).expect("the GGUF"),
        ))
        .expect("request");
    let reply = app.call(request).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{:?}", reply.body);
    app
}

/// A new infer key with `limits`; its id and secret.
async fn key_with(app: &App, limits: Value) -> (i64, String) {
    let json = app.create_key(&["infer"], limits).await;
    (
        json["id"].as_i64().expect("id"),
        json["secret"].as_str().expect("secret").to_owned(),
    )
}

async fn chat(app: &App, key: &str, max_tokens: u32, stream: bool) -> Reply {
    app.post(
        "/v1/chat/completions",
        Some(key),
        json!({
            "model": "smollm2",
            "messages": [{"role": "user", "content": "Name a colour."}],
            "max_tokens": max_tokens,
            "temperature": 0,
            "stream": stream,
            "stream_options": {"include_usage": true},
        }),
    )
    .await
}

#[tokio::test]
async fn bad_token_limits_are_refused_and_nothing_is_stored() {
    let app = App::start().await;
    let before = app.state.store().key_count().expect("count");
    for (limits, field) in [
        (json!({"tokens_per_minute": 0}), "tokens_per_minute"),
        (json!({"tokens_per_minute": "many"}), "tokens_per_minute"),
        (
            json!({"token_budget": {"tokens": 10, "period": "week"}}),
            "token_budget",
        ),
        (
            json!({"token_budget": {"tokens": 0, "period": "day"}}),
            "token_budget",
        ),
    ] {
        let mut body = json!({"scopes": ["infer"]});
        body.as_object_mut()
            .unwrap()
            .extend(limits.as_object().unwrap().clone());
        let refused = app.post("/api/keys", Some(&app.admin), body).await;
        assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{limits}");
        assert!(
            refused.error().contains(field),
            "{limits}: {}",
            refused.error()
        );
    }
    assert_eq!(app.state.store().key_count().expect("count"), before);
    // A PATCH sets, changes and clears them; a bad one leaves the key as it was.
    let (id, _) = key_with(&app, json!({"tokens_per_minute": 500})).await;
    let path = format!("/api/keys/{id}");
    let changed = app
        .send(
            Method::PATCH,
            &path,
            Some(&app.admin),
            Some(json!({"token_budget": {"tokens": 9000, "period": "month"}})),
        )
        .await;
    assert_eq!(changed.status, StatusCode::OK, "{:?}", changed.body);
    assert_eq!(changed.json()["key"]["tokens_per_minute"], 500);
    assert_eq!(
        changed.json()["key"]["token_budget"],
        json!({"tokens": 9000, "period": "month"})
    );
    let bad = app
        .send(
            Method::PATCH,
            &path,
            Some(&app.admin),
            Some(json!({"tokens_per_minute": -5, "token_budget": null})),
        )
        .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    let usage = app
        .get(&format!("{path}/usage"), Some(&app.admin))
        .await
        .json();
    assert_eq!(usage["limits"]["tokens_per_minute"], 500);
    assert_eq!(usage["limits"]["tokens_per_minute_source"], "key");
    assert_eq!(usage["limits"]["token_budget"]["tokens"], 9000);
    // A key held to a token limit gets no direct-mode token.
    let (_, secret) = key_with(&app, json!({"tokens_per_minute": 500})).await;
    let assign = app
        .post("/v2/models/tiny/assign", Some(&secret), json!({}))
        .await;
    assert_eq!(assign.status, StatusCode::FORBIDDEN, "{:?}", assign.body);
    assert!(
        assign.error().contains("token limits"),
        "{}",
        assign.error()
    );
}

#[tokio::test]
async fn a_per_minute_limit_admits_then_refuses_with_openai_body_and_ratelimit_fields() {
    let app = chat_app().await;
    let tpm = 300u64;
    let (_, key) = key_with(&app, json!({"tokens_per_minute": tpm})).await;
    let first = chat(&app, &key, 8, false).await;
    assert_eq!(first.status, StatusCode::OK, "{:?}", first.body);
    let policy = first.header("ratelimit-policy").expect("RateLimit-Policy");
    assert!(
        policy.contains("\"tokens-per-minute\";q=300;w=60"),
        "{policy}"
    );
    assert!(first
        .header("ratelimit")
        .expect("RateLimit")
        .contains("tokens-per-minute"));
    assert_eq!(first.header("x-infergate-model-version"), Some("1"));
    let prompt = first.json()["usage"]["prompt_tokens"]
        .as_u64()
        .expect("usage");
    assert!(prompt < tpm / 2, "{}", first.json());

    // A request reserving a whole minute's tokens (its prompt plus the rest) waits until the
    // first one's tokens have flowed back: refused, with the time it takes.
    let refused = chat(&app, &key, (tpm - prompt) as u32, false).await;
    assert_eq!(
        refused.status,
        StatusCode::TOO_MANY_REQUESTS,
        "{:?}",
        refused.body
    );
    let retry: u64 = refused
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .expect("Retry-After");
    assert!((1..=60).contains(&retry), "{retry}");
    let error = &refused.json()["error"];
    assert_eq!(error["type"], "rate_limit_error");
    assert_eq!(error["code"], "rate_limit_exceeded");
    let message = error["message"].as_str().expect("message");
    assert!(message.contains("tokens_per_minute 300"), "{message}");
    assert!(
        message.contains(&format!("retry after {retry} s")),
        "{message}"
    );
    assert!(refused
        .header("ratelimit")
        .expect("RateLimit")
        .contains("\"tokens-per-minute\";r="));

    // More than a whole minute's tokens can never fit: 400, not a wait.
    let never = chat(&app, &key, (tpm - prompt + 1) as u32, false).await;
    assert_eq!(never.status, StatusCode::BAD_REQUEST, "{:?}", never.body);
    assert!(never.json()["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .contains("ask for fewer max_tokens"));
}

#[tokio::test]
async fn a_daily_budget_is_spent_by_real_tokens_streams_included() {
    let app = chat_app().await;
    let budget = 400u64;
    let (id, key) = key_with(
        &app,
        json!({"token_budget": {"tokens": budget, "period": "day"}}),
    )
    .await;
    // A stream is charged what it used: its usage chunk, as the usage API counts it.
    let streamed = chat(&app, &key, 24, true).await;
    assert_eq!(streamed.status, StatusCode::OK);
    let text = String::from_utf8_lossy(&streamed.body).to_string();
    let usage_chunk = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|c| c["usage"].is_object())
        .expect("a usage chunk");
    let streamed_tokens = usage_chunk["usage"]["total_tokens"]
        .as_u64()
        .expect("total");
    let usage = app
        .get(&format!("/api/keys/{id}/usage"), Some(&app.admin))
        .await
        .json();
    let tokens = &usage["tokens"];
    let charged = |rows: &Value| {
        rows.as_array()
            .map(|r| {
                r.iter()
                    .map(|m| {
                        m["prompt_tokens"].as_u64().unwrap_or(0)
                            + m["completion_tokens"].as_u64().unwrap_or(0)
                    })
                    .sum::<u64>()
            })
            .unwrap_or(0)
    };
    assert_eq!(charged(&tokens["today"]), streamed_tokens, "{usage}");
    assert_eq!(tokens["today"][0]["model"], "smollm2");
    assert_eq!(
        tokens["budget"]["remaining"].as_u64(),
        Some(budget - streamed_tokens),
        "{usage}"
    );

    // Spend the rest: admitted while the budget holds the reservation, then refused.
    let mut spent = streamed_tokens;
    let mut refused = None;
    for _ in 0..(budget / 10) {
        let reply = chat(&app, &key, 24, false).await;
        match reply.status {
            StatusCode::OK => spent += reply.json()["usage"]["total_tokens"].as_u64().unwrap_or(0),
            StatusCode::TOO_MANY_REQUESTS => {
                refused = Some(reply);
                break;
            }
            other => panic!("{other}: {:?}", reply.body),
        }
    }
    let refused = refused.expect("the budget ran out");
    assert!(spent <= budget, "{spent} > {budget}");
    let error = &refused.json()["error"];
    assert_eq!(error["code"], "insufficient_quota");
    assert!(error["message"]
        .as_str()
        .unwrap_or_default()
        .contains("next UTC day"));
    let retry: u64 = refused
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .expect("Retry-After");
    assert!((1..=86_400).contains(&retry));
    assert!(refused
        .header("ratelimit-policy")
        .expect("RateLimit-Policy")
        .contains("\"token-budget\";q=400;w=86400"));
    let usage = app
        .get(&format!("/api/keys/{id}/usage"), Some(&app.admin))
        .await
        .json();
    assert_eq!(charged(&usage["tokens"]["today"]), spent, "{usage}");
    let metrics = app.get("/metrics", Some(&app.admin)).await;
    let text = String::from_utf8_lossy(&metrics.body);
    assert!(
        text.contains(&format!(
            "infergate_key_tokens_total{{key_id=\"{id}\",model=\"smollm2\"}} {spent}"
        )),
        "{text}"
    );
}

#[tokio::test]
async fn a_deterministic_chat_answer_is_cached_and_still_charged() {
    let app = with_chat_model(App::with_config(|c| c.cache.bytes = 4 << 20).await).await;
    app.configure("smollm2", json!({"response_cache": {"enable": true}}))
        .await;
    let (id, key) = key_with(
        &app,
        json!({"token_budget": {"tokens": 100000, "period": "month"}}),
    )
    .await;
    let a = chat(&app, &key, 16, false).await;
    let b = chat(&app, &key, 16, false).await;
    assert_eq!(a.status, StatusCode::OK);
    let text = |r: &Reply| r.json()["choices"][0]["message"]["content"].clone();
    assert_eq!(text(&a), text(&b));
    // A streamed hit replays the same text as a stream.
    let s = chat(&app, &key, 16, true).await;
    let streamed: String = String::from_utf8_lossy(&s.body)
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    assert_eq!(Value::String(streamed), text(&a));
    let stats = app
        .get("/v2/models/smollm2/stats", Some(&app.infer))
        .await
        .json();
    assert_eq!(
        stats["model_stats"][0]["inference_stats"]["cache_hit"]["count"], 2,
        "{stats}"
    );
    let usage = app
        .get(&format!("/api/keys/{id}/usage"), Some(&app.admin))
        .await
        .json();
    let row = &usage["tokens"]["today"][0];
    assert_eq!(row["requests"], 3, "{usage}");
    let total = a.json()["usage"]["total_tokens"].as_u64().expect("usage");
    assert_eq!(
        row["prompt_tokens"].as_u64().unwrap_or(0) + row["completion_tokens"].as_u64().unwrap_or(0),
        3 * total,
        "cached answers are charged as served: {usage}"
    );
    assert_eq!(row["cached_tokens"].as_u64(), Some(2 * total));
}

#[tokio::test]
async fn the_history_charts_tokens_per_key() {
    let app = chat_app().await;
    let (id, key) = key_with(&app, json!({})).await;
    let sample = |t_ms: u64| {
        let s = &app.state;
        s.history().sample(
            s.catalog(),
            s.pipelines(),
            s.engine(),
            s.metrics(),
            1.0,
            t_ms,
        )
    };
    // A key's ring starts at the first sample after its first use; the next one is a rate.
    let first = chat(&app, &key, 4, false).await;
    assert_eq!(first.status, StatusCode::OK, "{:?}", first.body);
    let t0 = infergate_service::history::now_ms();
    sample(t0);
    let second = chat(&app, &key, 4, false).await;
    let usage = &second.json()["usage"];
    let charged = usage["prompt_tokens"].as_u64().expect("prompt")
        + usage["completion_tokens"].as_u64().expect("completion");
    sample(t0 + 1000);
    let history = app
        .get("/api/metrics/history?seconds=60", Some(&app.admin))
        .await
        .json();
    let charted = history["keys"]
        .as_array()
        .expect("keys")
        .iter()
        .find(|k| k["id"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("the key is not charted: {history}"));
    assert_eq!(
        charted["tokens_per_s"],
        json!([charged as f64]),
        "{charted}"
    );
    let usage = app
        .get(&format!("/api/keys/{id}/usage"), Some(&app.admin))
        .await
        .json();
    assert!(
        usage["activity"]["tokens"].as_u64() >= Some(charged),
        "{usage}"
    );
}
