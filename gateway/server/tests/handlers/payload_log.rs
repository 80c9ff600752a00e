//! Payload logs, in process: a model's setting names a sink the operator defined; its requests
//! and answers reach a JSON Lines file and an HTTP endpoint (as CloudEvents) with their request
//! id, caller and model, secrets redacted; a share of requests is logged within a binomial
//! tolerance; a sink that is down loses entries (counted) and no request.

use crate::support::App;
use http::Method;
use infergate_service::config::Config;
use infergate_service::payload_log::config::{FileSink, HttpSink, SinkConfig};
use parking_lot::Mutex;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn file_sink(c: &mut Config, path: &Path) {
    c.payload_log.sinks.insert(
        "audit".into(),
        SinkConfig::File(FileSink {
            path: path.to_path_buf(),
            max_bytes: 1 << 20,
            keep: 2,
            queue: 1000,
        }),
    );
}

fn http_sink(c: &mut Config, name: &str, url: String, retries: u32, queue: usize) {
    c.payload_log.sinks.insert(
        name.into(),
        SinkConfig::Http(HttpSink {
            url,
            ca: None,
            batch: 10,
            queue,
            timeout_ms: 500,
            retries,
        }),
    );
}

/// The entries of the file once it holds `n` lines (or whatever it holds after 10 s).
async fn entries(path: &Path, n: usize) -> Vec<Value> {
    let started = Instant::now();
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).expect("each line is one JSON object"))
            .collect();
        if lines.len() >= n || started.elapsed() > Duration::from_secs(10) {
            return lines;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn set(app: &App, model: &str, setting: Value) -> crate::support::Reply {
    app.send(
        Method::PUT,
        &format!("/api/models/{model}/payload-log"),
        Some(&app.upload),
        Some(setting),
    )
    .await
}

async fn infer(app: &App, id: &str, values: &[f32]) {
    let mut body = App::tiny_request(values);
    body["parameters"] = json!({"api_key": "sk-live-123", "note": "kept"});
    let request = http::Request::builder()
        .method(Method::POST)
        .uri("/v2/models/tiny/infer")
        .header(http::header::AUTHORIZATION, format!("Bearer {}", app.infer))
        .header(http::header::CONTENT_TYPE, "application/json")
        .header("x-request-id", id)
        .body(axum::body::Body::from(body.to_string()))
        .expect("request");
    let reply = app.call(request).await;
    assert_eq!(reply.status, 200, "{}", reply.json());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_and_answers_reach_a_file_with_secrets_redacted() {
    let dir = tempfile::tempdir().expect("dir");
    let path: PathBuf = dir.path().join("payload.jsonl");
    let app = App::with_config(|c| file_sink(c, &path)).await;
    app.register("smollm2", "smollm2.gguf");

    // Only a sink the server defines, and only well-formed settings; nothing stored otherwise.
    for (bad, field) in [
        (json!({"mode": "all", "sink": "elsewhere"}), "sink"),
        (
            json!({"mode": "all", "sample": 2, "sink": "audit"}),
            "sample",
        ),
        (json!({"mode": "both", "sink": "audit"}), "mode"),
    ] {
        let r = set(&app, "tiny", bad.clone()).await;
        assert_eq!(r.status, 400, "{bad}");
        assert!(r.error().contains(field), "{bad}: {}", r.error());
    }
    let r = app
        .get("/api/models/tiny/payload-log", Some(&app.upload))
        .await;
    assert_eq!(r.json()["payload_log"], Value::Null);
    assert_eq!(r.json()["sinks"], json!(["audit"]));
    let r = app
        .get("/api/models/tiny/payload-log", Some(&app.infer))
        .await;
    assert_eq!(r.status, 403, "an infer key does not see the sinks");
    let r = set(&app, "nope", json!({"mode": "all", "sink": "audit"})).await;
    assert_eq!(r.status, 404);

    let r = set(&app, "tiny", json!({"mode": "all", "sink": "audit"})).await;
    assert_eq!(r.status, 200, "{}", r.json());
    assert_eq!(
        r.json()["payload_log"],
        json!({"mode": "all", "sample": 1.0, "sink": "audit"})
    );
    for i in 0..3 {
        infer(&app, &format!("pl-{i}"), &[i as f32; 16]).await;
    }
    let chat = json!({"model": "smollm2", "temperature": 0, "max_tokens": 4,
                      "messages": [{"role": "user", "content": "Say hello"}]});
    assert_eq!(
        set(&app, "smollm2", json!({"mode": "all", "sink": "audit"}))
            .await
            .status,
        200
    );
    let answer = app
        .post("/v1/chat/completions", Some(&app.infer), chat)
        .await;
    assert_eq!(answer.status, 200, "{}", answer.json());

    let logged = entries(&path, 4).await;
    assert_eq!(logged.len(), 4, "{logged:?}");
    let key_id = app
        .state
        .store()
        .list_keys()
        .expect("keys")
        .iter()
        .find(|k| k.name == "infer")
        .expect("the infer key")
        .id;
    for (i, entry) in logged[..3].iter().enumerate() {
        assert_eq!(entry["request_id"], format!("pl-{i}"));
        assert_eq!(entry["key"], json!({"id": key_id, "name": "infer"}));
        assert_eq!(
            (&entry["model"], &entry["version"]),
            (&json!("tiny"), &json!(1))
        );
        assert_eq!(entry["outcome"], "sent");
        let input = &entry["request"]["inputs"][0];
        assert_eq!(
            (&input["name"], &input["datatype"]),
            (&json!("x"), &json!("FP32"))
        );
        assert_eq!(input["data"], json!(vec![i as f64; 16]));
        assert_eq!(
            entry["response"]["outputs"][0]["data"],
            json!(vec![2.0 * i as f64; 16])
        );
        assert_eq!(
            entry["request"]["parameters"],
            json!({"api_key": "[redacted]", "note": "kept"})
        );
        assert!(entry["time"].as_str().is_some_and(|t| t.ends_with('Z')));
    }
    let chat = &logged[3];
    assert_eq!(
        (&chat["kind"], &chat["model"]),
        (&json!("chat"), &json!("smollm2"))
    );
    assert!(chat["request"]["prompt"]
        .as_str()
        .is_some_and(|p| p.contains("Say hello")));
    let text = chat["response"]["choices"][0]["text"]
        .as_str()
        .expect("the answer's text");
    assert_eq!(
        answer.json()["choices"][0]["message"]["content"].as_str(),
        Some(text),
        "the log holds the answer as sent"
    );
    assert!(chat["usage"]["completion_tokens"]
        .as_u64()
        .is_some_and(|n| n > 0));
    let text = std::fs::read_to_string(&path).expect("the log");
    assert!(!text.contains("sk-live-123"), "a secret reached the log");

    // Off again: nothing more is written.
    let r = app
        .send(
            Method::DELETE,
            "/api/models/tiny/payload-log",
            Some(&app.upload),
            None,
        )
        .await;
    assert_eq!(
        (r.status.as_u16(), &r.json()["payload_log"]),
        (200, &Value::Null)
    );
    infer(&app, "pl-off", &[1.0; 16]).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(entries(&path, 5).await.len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_share_of_requests_is_logged() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("payload.jsonl");
    let app = App::with_config(|c| file_sink(c, &path)).await;
    let r = set(
        &app,
        "tiny",
        json!({"mode": "request", "sample": 0.3, "sink": "audit"}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.json());
    const N: usize = 300;
    for i in 0..N {
        infer(&app, &format!("s-{i}"), &[0.5; 16]).await;
    }
    let counts = app
        .state
        .payload_logs()
        .counts()
        .map(|(_, c)| c.clone())
        .next()
        .expect("the sink");
    let started = Instant::now();
    let mut logged = entries(&path, 0).await.len();
    // Written settles once the writer drained its queue (nothing is dropped at this pace).
    while started.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let now = entries(&path, 0).await.len();
        if now == logged && now as u64 == counts.written.load(Ordering::Relaxed) {
            break;
        }
        logged = now;
    }
    // Binomial(300, 0.3): mean 90, standard deviation 7.9; 5 deviations either side.
    let (mean, sd) = (N as f64 * 0.3, (N as f64 * 0.3 * 0.7).sqrt());
    assert!(
        (logged as f64 - mean).abs() <= 5.0 * sd,
        "{logged} of {N} logged at sample 0.3"
    );
    assert_eq!(counts.dropped.load(Ordering::Relaxed), 0);
    let entry = &entries(&path, 1).await[0];
    assert!(
        entry["request"].is_object() && entry.get("response").is_none(),
        "{entry}"
    );
}

/// An HTTP endpoint keeping every body POSTed to it.
async fn receiver() -> (String, Arc<Mutex<Vec<(String, Value)>>>) {
    let got: Arc<Mutex<Vec<(String, Value)>>> = Arc::default();
    let kept = got.clone();
    let app = axum::Router::new().route(
        "/events",
        axum::routing::post(move |headers: http::HeaderMap, body: String| {
            let kept = kept.clone();
            async move {
                let kind = headers
                    .get(http::header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_owned();
                let body = serde_json::from_str(&body).unwrap_or(Value::Null);
                kept.lock().push((kind, body));
                http::StatusCode::ACCEPTED
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}/events"), got)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_sink_gets_cloudevents_and_a_dead_one_loses_entries_not_requests() {
    let (url, got) = receiver().await;
    // An endpoint that takes connections (the kernel's backlog) and never answers: each POST
    // runs into the sink's timeout, so its queue of 2 overflows.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let silent_addr = silent.local_addr().expect("address");
    let app = App::with_config(|c| {
        http_sink(c, "events", url, 3, 100);
        http_sink(c, "dead", format!("http://{silent_addr}/events"), 0, 2);
    })
    .await;
    assert_eq!(
        set(&app, "tiny", json!({"mode": "request", "sink": "events"}))
            .await
            .status,
        200
    );
    for i in 0..3 {
        infer(&app, &format!("h-{i}"), &[1.0; 16]).await;
    }
    let started = Instant::now();
    let events = loop {
        let events: Vec<Value> = got
            .lock()
            .iter()
            .flat_map(|(kind, body)| {
                assert_eq!(kind, "application/cloudevents-batch+json");
                body.as_array().cloned().unwrap_or_default()
            })
            .collect();
        if events.len() >= 3 || started.elapsed() > Duration::from_secs(10) {
            break events;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(events.len(), 3, "{events:?}");
    for event in &events {
        assert_eq!(event["specversion"], "1.0");
        assert_eq!(event["type"], "io.infergate.payload.v1");
        assert!(event["id"].as_str().is_some_and(|id| id.len() == 32));
        assert_eq!(event["data"]["model"], "tiny");
        assert!(event["data"]["request_id"]
            .as_str()
            .is_some_and(|id| id.starts_with("h-")));
    }

    // A sink that is down: every request answered, every entry counted as lost.
    assert_eq!(
        set(&app, "tiny", json!({"mode": "all", "sink": "dead"}))
            .await
            .status,
        200
    );
    const N: u64 = 20;
    for i in 0..N {
        infer(&app, &format!("d-{i}"), &[1.0; 16]).await;
    }
    let counts = app
        .state
        .payload_logs()
        .counts()
        .find(|(name, _)| *name == "dead")
        .map(|(_, c)| c.clone())
        .expect("the dead sink");
    let started = Instant::now();
    let lost = || counts.dropped.load(Ordering::Relaxed) + counts.failed.load(Ordering::Relaxed);
    while lost() < N && started.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(lost(), N, "every entry dropped or failed");
    assert_eq!(counts.written.load(Ordering::Relaxed), 0);
    assert!(
        counts.dropped.load(Ordering::Relaxed) > 0,
        "a queue of 2 overflowed"
    );
    drop(silent);
}
