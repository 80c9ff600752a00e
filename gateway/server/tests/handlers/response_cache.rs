//! The response cache, in process: `"response_cache": {"enable": true}` in a model's config
//! and `[cache] bytes`: a repeated request is a hit in Triton's statistics and the metrics, a
//! changed byte is a miss, the answers are byte-identical (JSON and binary), and a config
//! change or a new version never serves an old answer.

use crate::support::{App, Reply};
use http::{Method, Request, StatusCode};
use serde_json::{json, Value};

async fn cached_app() -> App {
    let app = App::with_config(|c| c.cache.bytes = 8 << 20).await;
    app.configure("tiny", json!({"response_cache": {"enable": true}}))
        .await;
    app
}

async fn infer(app: &App, values: &[f32]) -> Reply {
    let reply = app
        .post(
            "/v2/models/tiny/infer",
            Some(&app.infer),
            App::tiny_request(values),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
    reply
}

/// Triton's `cache_hit` and `cache_miss` counts of tiny's newest version.
async fn hits_and_misses(app: &App) -> (u64, u64) {
    let stats = app
        .get("/v2/models/tiny/stats", Some(&app.infer))
        .await
        .json();
    let s = stats["model_stats"]
        .as_array()
        .and_then(|a| a.last())
        .cloned()
        .unwrap_or(Value::Null);
    let count = |what: &str| s["inference_stats"][what]["count"].as_u64().unwrap_or(0);
    (count("cache_hit"), count("cache_miss"))
}

#[tokio::test]
async fn a_repeated_request_is_a_hit_with_the_same_bytes_and_a_changed_byte_a_miss() {
    let app = cached_app().await;
    let values = [0.25f32; 16];
    let first = infer(&app, &values).await;
    assert_eq!(hits_and_misses(&app).await, (0, 1));
    let second = infer(&app, &values).await;
    assert_eq!(hits_and_misses(&app).await, (1, 1));
    assert_eq!(first.body, second.body, "a hit must be byte-identical");
    // The model ran once: the engine counted one inference.
    let stats = app
        .get("/v2/models/tiny/stats", Some(&app.infer))
        .await
        .json();
    assert_eq!(stats["model_stats"][0]["inference_count"], 1);
    let hit_ns = stats["model_stats"][0]["inference_stats"]["cache_hit"]["ns"].as_u64();
    assert!(hit_ns.is_some(), "{stats}");

    let mut changed = values;
    changed[15] = 0.5;
    let third = infer(&app, &changed).await;
    assert_eq!(hits_and_misses(&app).await, (1, 2));
    assert_ne!(third.body, first.body);
    assert_eq!(third.json()["outputs"][0]["data"][15], 1.0);

    // Binary outputs: the same tensors encoded as asked, identical again on a hit.
    let binary = json!({
        "inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 16], "data": values}],
        "outputs": [{"name": "y", "parameters": {"binary_data": true}}]
    });
    let b1 = app
        .post("/v2/models/tiny/infer", Some(&app.infer), binary.clone())
        .await;
    let b2 = app
        .post("/v2/models/tiny/infer", Some(&app.infer), binary)
        .await;
    assert_eq!(b1.status, StatusCode::OK);
    assert_eq!(b1.body, b2.body);
    assert!(b1.header("inference-header-content-length").is_some());

    let metrics = app.get("/metrics", Some(&app.admin)).await;
    let text = String::from_utf8_lossy(&metrics.body);
    assert!(
        text.contains("infergate_response_cache_hits_total{model=\"tiny\"} 2"),
        "{text}"
    );
    assert!(
        text.contains("infergate_response_cache_entries 3"),
        "{text}"
    );
}

#[tokio::test]
async fn a_config_change_or_a_new_version_never_serves_an_old_answer() {
    let app = cached_app().await;
    let values = [1.0f32; 16];
    infer(&app, &values).await;
    infer(&app, &values).await;
    assert_eq!(hits_and_misses(&app).await, (1, 1));
    // A new config (still caching): the old answers are gone, the next request misses.
    app.configure(
        "tiny",
        json!({"response_cache": {"enable": true}, "max_batch_size": 0}),
    )
    .await;
    infer(&app, &values).await;
    assert_eq!(hits_and_misses(&app).await, (1, 2));
    // Caching off: no lookup at all.
    app.configure("tiny", json!({})).await;
    infer(&app, &values).await;
    assert_eq!(hits_and_misses(&app).await, (1, 2));

    // A new version (with caching on) starts with nothing cached.
    let file = std::fs::read(crate::support::tiny_model()).expect("tiny");
    let request = Request::builder()
        .method(Method::POST)
        .uri("/api/models/tiny/versions")
        .header("authorization", format!("Bearer {}", app.upload))
        .body(axum::body::Body::from(file))
        .expect("request");
    assert_eq!(app.call(request).await.status, StatusCode::CREATED);
    app.configure("tiny", json!({"response_cache": {"enable": true}}))
        .await;
    let answer = infer(&app, &values).await;
    assert_eq!(answer.json()["model_version"], "2");
    assert_eq!(
        hits_and_misses(&app).await,
        (0, 1),
        "version 2's own counters"
    );
}

#[tokio::test]
async fn without_cache_bytes_nothing_is_cached() {
    let app = App::start().await;
    app.configure("tiny", json!({"response_cache": {"enable": true}}))
        .await;
    infer(&app, &[1.0; 16]).await;
    infer(&app, &[1.0; 16]).await;
    assert_eq!(hits_and_misses(&app).await, (0, 0));
    let config = app
        .get("/v2/models/tiny/config", Some(&app.infer))
        .await
        .json();
    assert_eq!(config["response_cache"], json!({"enable": true}));
}
