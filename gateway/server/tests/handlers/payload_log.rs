//! Payload logs, in process: a model's setting names a sink the operator defined; its requests
//! and answers reach a JSON Lines file and an HTTP endpoint (as CloudEvents) with their request
//! id, caller and model, secrets redacted; a share of requests is logged within a binomial
//! tolerance; a sink that is down loses entries (counted) and no request. A key's setting logs
//! that key's requests and merges with the model's; a pipeline logs its own inputs and final
//! outputs; an entry names the trace of a recorded request; an admin defines, replaces and
//! removes sinks at run time.

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
    infer_as(app, "tiny", &app.infer, id, values).await;
}

async fn infer_as(
    app: &App,
    target: &str,
    key: &str,
    id: &str,
    values: &[f32],
) -> crate::support::Reply {
    let mut body = App::tiny_request(values);
    body["parameters"] = json!({"api_key": "sk-live-123", "note": "kept"});
    let request = http::Request::builder()
        .method(Method::POST)
        .uri(format!("/v2/models/{target}/infer"))
        .header(http::header::AUTHORIZATION, format!("Bearer {key}"))
        .header(http::header::CONTENT_TYPE, "application/json")
        .header("x-request-id", id)
        .body(axum::body::Body::from(body.to_string()))
        .expect("request");
    let reply = app.call(request).await;
    assert_eq!(reply.status, 200, "{}", reply.json());
    reply
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
        .into_iter()
        .map(|(_, c)| c)
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
        .into_iter()
        .find(|(name, _)| name == "dead")
        .map(|(_, c)| c)
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

fn named_file_sink(c: &mut Config, name: &str, path: &Path) {
    c.payload_log.sinks.insert(
        name.into(),
        SinkConfig::File(FileSink {
            path: path.to_path_buf(),
            max_bytes: 1 << 20,
            keep: 2,
            queue: 1000,
        }),
    );
}

/// The entry of request `id` among `logged`.
fn entry_of<'a>(logged: &'a [Value], id: &str) -> &'a Value {
    logged
        .iter()
        .find(|e| e["request_id"] == id)
        .unwrap_or_else(|| panic!("no entry for {id} in {logged:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keys_setting_logs_that_key_and_merges_with_the_models() {
    let dir = tempfile::tempdir().expect("dir");
    let (audit, other) = (
        dir.path().join("audit.jsonl"),
        dir.path().join("other.jsonl"),
    );
    let app = App::with_config(|c| {
        named_file_sink(c, "audit", &audit);
        named_file_sink(c, "other", &other);
    })
    .await;
    let key = app.create_key(&["infer"], json!({})).await;
    let (id, secret) = (
        key["id"].as_i64().expect("id"),
        key["secret"].as_str().expect("secret"),
    );
    let path = format!("/api/keys/{id}/payload-log");
    let put = |setting: Value, with: String| {
        let path = path.clone();
        let app = &app;
        async move {
            app.send(Method::PUT, &path, Some(&with), Some(setting))
                .await
        }
    };
    let setting = json!({"mode": "request", "sink": "audit"});
    for with in [&app.upload, &app.infer] {
        assert_eq!(put(setting.clone(), with.clone()).await.status, 403);
        assert_eq!(app.get(&path, Some(with)).await.status, 403);
    }
    for (bad, field) in [
        (json!({"mode": "all", "sink": "elsewhere"}), "sink"),
        (
            json!({"mode": "all", "sample": "half", "sink": "audit"}),
            "sample",
        ),
        (json!({"sink": "audit"}), "mode"),
    ] {
        let r = put(bad.clone(), app.admin.clone()).await;
        assert_eq!(r.status, 400, "{bad}");
        assert!(r.error().contains(field), "{bad}: {}", r.error());
    }
    let r = app
        .send(
            Method::PUT,
            "/api/keys/nope/payload-log",
            Some(&app.admin),
            Some(setting.clone()),
        )
        .await;
    assert_eq!(r.status, 404);
    assert_eq!(
        app.get(&path, Some(&app.admin)).await.json()["payload_log"],
        Value::Null
    );

    let r = put(setting.clone(), app.admin.clone()).await;
    assert_eq!(r.status, 200, "{}", r.json());
    assert_eq!(
        (&r.json()["key_id"], &r.json()["payload_log"]),
        (
            &json!(id),
            &json!({"mode": "request", "sample": 1.0, "sink": "audit"})
        )
    );
    let listed = app.get("/api/keys", Some(&app.admin)).await.json();
    let shown = listed["keys"]
        .as_array()
        .expect("keys")
        .iter()
        .find(|k| k["id"] == id)
        .expect("the key listed")
        .clone();
    assert_eq!(shown["payload_log"]["sink"], "audit");

    // The key's requests only, what its mode says.
    infer_as(&app, "tiny", secret, "k-1", &[1.0; 16]).await;
    infer_as(&app, "tiny", &app.infer, "k-2", &[2.0; 16]).await;
    let logged = entries(&audit, 1).await;
    assert_eq!(logged.len(), 1, "{logged:?}");
    let entry = entry_of(&logged, "k-1");
    assert_eq!(entry["key"]["id"], id);
    assert_eq!(entry["logged_by"], json!(["key"]));
    assert!(
        entry["request"].is_object() && entry.get("response").is_none(),
        "{entry}"
    );

    // The model logs answers to the same sink: one entry with both for the key's request.
    let r = set(&app, "tiny", json!({"mode": "response", "sink": "audit"})).await;
    assert_eq!(r.status, 200);
    infer_as(&app, "tiny", secret, "m-1", &[3.0; 16]).await;
    infer_as(&app, "tiny", &app.infer, "m-2", &[4.0; 16]).await;
    let logged = entries(&audit, 3).await;
    assert_eq!(logged.len(), 3, "one entry per request: {logged:?}");
    let merged = entry_of(&logged, "m-1");
    assert_eq!(merged["logged_by"], json!(["model", "key"]));
    assert_eq!(merged["request"]["inputs"][0]["data"], json!(vec![3.0; 16]));
    assert_eq!(
        merged["response"]["outputs"][0]["data"],
        json!(vec![6.0; 16])
    );
    let model_only = entry_of(&logged, "m-2");
    assert_eq!(model_only["logged_by"], json!(["model"]));
    assert!(model_only.get("request").is_none() && model_only["response"].is_object());

    // Different sinks: an entry in each, each with its own mode.
    let r = put(
        json!({"mode": "request", "sink": "other"}),
        app.admin.clone(),
    )
    .await;
    assert_eq!(r.status, 200);
    infer_as(&app, "tiny", secret, "d-1", &[5.0; 16]).await;
    let logged = entries(&audit, 4).await;
    let in_audit = entry_of(&logged, "d-1");
    assert_eq!(in_audit["logged_by"], json!(["model"]));
    assert!(in_audit.get("request").is_none());
    let elsewhere = entries(&other, 1).await;
    assert_eq!(elsewhere.len(), 1, "{elsewhere:?}");
    assert_eq!(elsewhere[0]["logged_by"], json!(["key"]));
    assert!(elsewhere[0]["request"].is_object() && elsewhere[0].get("response").is_none());

    let r = app
        .send(Method::DELETE, &path, Some(&app.admin), None)
        .await;
    assert_eq!(
        (r.status.as_u16(), &r.json()["payload_log"]),
        (200, &Value::Null)
    );
    infer_as(&app, "tiny", secret, "off", &[6.0; 16]).await;
    assert_eq!(
        entries(&audit, 5).await.len(),
        5,
        "the model's setting still logs it"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        entries(&other, 1).await.len(),
        1,
        "the key's does not any more"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipelines_entry_holds_its_inputs_and_final_outputs() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("payload.jsonl");
    let app = App::with_config(|c| file_sink(c, &path)).await;
    let r = app
        .send(
            Method::PUT,
            "/api/pipelines/doubled",
            Some(&app.upload),
            Some(json!({"model": "tiny"})),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.json());
    let route = "/api/pipelines/doubled/payload-log";
    let setting = json!({"mode": "all", "sink": "audit"});
    let r = app
        .send(Method::PUT, route, Some(&app.infer), Some(setting.clone()))
        .await;
    assert_eq!(r.status, 403);
    let r = app
        .send(
            Method::PUT,
            "/api/pipelines/nope/payload-log",
            Some(&app.upload),
            Some(setting.clone()),
        )
        .await;
    assert_eq!(r.status, 404);
    let r = app
        .send(
            Method::PUT,
            route,
            Some(&app.upload),
            Some(json!({"mode": "all", "sink": "x"})),
        )
        .await;
    assert!(
        r.status == 400 && r.error().contains("sink"),
        "{}",
        r.error()
    );
    let r = app
        .send(Method::PUT, route, Some(&app.upload), Some(setting))
        .await;
    assert_eq!(r.status, 200, "{}", r.json());
    assert_eq!(r.json()["pipeline"], "doubled");
    assert!(r.json().get("model").is_none());
    assert_eq!(
        app.get(route, Some(&app.upload)).await.json()["payload_log"]["sink"],
        "audit"
    );

    infer_as(&app, "doubled", &app.infer, "p-1", &[1.5; 16]).await;
    let logged = entries(&path, 1).await;
    assert_eq!(logged.len(), 1, "{logged:?}");
    let entry = &logged[0];
    assert_eq!(entry["pipeline"], "doubled");
    assert!(
        entry.get("model").is_none() && entry.get("version").is_none(),
        "{entry}"
    );
    // The version its model stage ran: the newest, which an upload of the model changes.
    assert_eq!(
        entry["stages"],
        json!([{"stage": "model", "model": "tiny", "version": 1}])
    );
    app.register_tiny("tiny");
    infer_as(&app, "doubled", &app.infer, "p-2", &[1.5; 16]).await;
    let logged = entries(&path, 2).await;
    assert_eq!(
        logged[1]["stages"],
        json!([{"stage": "model", "model": "tiny", "version": 2}]),
        "{}",
        logged[1]
    );
    assert_eq!(entry["logged_by"], json!(["pipeline"]));
    assert_eq!(entry["request"]["inputs"][0]["data"], json!(vec![1.5; 16]));
    assert_eq!(
        entry["response"]["outputs"][0]["data"],
        json!(vec![3.0; 16])
    );

    // The setting goes with the pipeline.
    let r = app
        .send(
            Method::DELETE,
            "/api/pipelines/doubled",
            Some(&app.upload),
            None,
        )
        .await;
    assert_eq!(r.status, 200);
    assert!(app.state.model_settings().get("doubled").is_none());
    assert!(app
        .state
        .store()
        .model_settings("doubled")
        .expect("read")
        .is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_names_the_trace_of_a_recorded_request_and_only_then() {
    crate::support::traces::install();
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("payload.jsonl");
    let app = App::with_config(|c| {
        file_sink(c, &path);
        c.llm.threads = 1;
    })
    .await;
    // Model names of this test's own: the trace settings are the process's.
    app.register_tiny("logged-traced");
    app.register_tiny("logged-quiet");
    app.register("logged-chat", "smollm2.gguf");
    let on = json!({"trace_level": ["TIMESTAMPS"], "trace_rate": "1"});
    app.set_trace("logged-traced", on.clone()).await;
    app.set_trace("logged-chat", on).await;
    app.set_trace("logged-quiet", json!({"trace_level": ["OFF"]}))
        .await;
    for model in ["logged-traced", "logged-quiet", "logged-chat"] {
        let r = set(&app, model, json!({"mode": "request", "sink": "audit"})).await;
        assert_eq!(r.status, 200, "{}", r.json());
    }

    let trace_of = |reply: &crate::support::Reply| {
        reply
            .header("x-trace-id")
            .expect("X-Trace-Id, recorded or not")
            .to_owned()
    };
    let traced = infer_as(&app, "logged-traced", &app.infer, "t-on", &[1.0; 16]).await;
    let quiet = infer_as(&app, "logged-quiet", &app.infer, "t-off", &[2.0; 16]).await;
    // A chat completion's trace is decided once its body named the model.
    let chat = http::Request::builder()
        .method(Method::POST)
        .uri("/v1/chat/completions")
        .header(http::header::AUTHORIZATION, format!("Bearer {}", app.infer))
        .header(http::header::CONTENT_TYPE, "application/json")
        .header("x-request-id", "t-chat")
        .body(axum::body::Body::from(
            json!({"model": "logged-chat", "max_tokens": 1, "temperature": 0,
                   "messages": [{"role": "user", "content": "Hi"}]})
            .to_string(),
        ))
        .expect("request");
    let chat = app.call(chat).await;
    assert_eq!(chat.status, 200, "{}", chat.json());

    let logged = entries(&path, 3).await;
    let entry = |id: &str| {
        logged
            .iter()
            .find(|e| e["request_id"] == id)
            .unwrap_or_else(|| panic!("no entry for {id} in {logged:?}"))
    };
    assert_eq!(entry("t-on")["trace_id"], trace_of(&traced));
    assert_eq!(entry("t-chat")["trace_id"], trace_of(&chat));
    assert!(
        !crate::support::traces::of(&trace_of(&chat)).is_empty(),
        "the chat's trace is recorded"
    );
    assert!(
        entry("t-off").get("trace_id").is_none(),
        "not recorded: {}",
        entry("t-off")
    );
    assert_eq!(trace_of(&quiet).len(), 32);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_defines_replaces_and_removes_sinks_at_run_time() {
    let dir = tempfile::tempdir().expect("dir");
    let (first, second) = (
        dir.path().join("first.jsonl"),
        dir.path().join("second.jsonl"),
    );
    let app = App::start().await;
    let sinks = "/api/payload-log/sinks";
    let late = "/api/payload-log/sinks/late";
    let body = |path: &Path| json!({"file": {"path": path, "max_bytes": 1 << 20}});
    for with in [&app.upload, &app.infer] {
        assert_eq!(app.get(sinks, Some(with)).await.status, 403);
        let r = app
            .send(Method::PUT, late, Some(with), Some(body(&first)))
            .await;
        assert_eq!(r.status, 403);
        assert_eq!(
            app.send(Method::DELETE, late, Some(with), None)
                .await
                .status,
            403
        );
    }
    assert_eq!(
        app.get(sinks, Some(&app.admin)).await.json(),
        json!({"sinks": []})
    );
    let r = set(&app, "tiny", json!({"mode": "all", "sink": "late"})).await;
    assert_eq!(r.status, 400, "no such sink yet");

    for (bad, field) in [
        (
            json!({"file": {"path": &first, "max_bytes": 10}}),
            "file.max_bytes",
        ),
        (json!({"file": {"max_bytes": 10000}}), "path"),
        (json!({"http": {"url": "ftp://x"}}), "http.url"),
        (json!({"file": {"path": &first, "rotate": true}}), "rotate"),
        (json!({"ftp": {}}), "ftp"),
    ] {
        let r = app
            .send(Method::PUT, late, Some(&app.admin), Some(bad.clone()))
            .await;
        assert_eq!(r.status, 400, "{bad}");
        assert!(r.error().contains(field), "{bad}: {}", r.error());
    }
    // A file that cannot be opened (beneath a plain file) is refused before the sink exists.
    let plain = dir.path().join("plain");
    std::fs::write(&plain, b"").expect("a plain file");
    let r = app
        .send(
            Method::PUT,
            late,
            Some(&app.admin),
            Some(body(&plain.join("x.jsonl"))),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.json());
    assert!(r.error().contains("x.jsonl"), "{}", r.error());
    let r = app
        .send(
            Method::PUT,
            "/api/payload-log/sinks/a%20b",
            Some(&app.admin),
            Some(body(&first)),
        )
        .await;
    assert_eq!(r.status, 400, "a name with a space");

    let r = app
        .send(Method::PUT, late, Some(&app.admin), Some(body(&first)))
        .await;
    assert_eq!(r.status, 200, "{}", r.json());
    let shown = r.json();
    assert_eq!(
        (&shown["kind"], &shown["origin"], &shown["target"]),
        (
            &json!("file"),
            &json!("api"),
            &json!(first.display().to_string())
        )
    );
    assert_eq!(
        set(&app, "tiny", json!({"mode": "all", "sink": "late"}))
            .await
            .status,
        200
    );
    const N: usize = 30;
    for i in 0..N {
        infer(&app, &format!("a-{i}"), &[1.0; 16]).await;
    }
    // Replaced while entries may still wait in the first writer's queue: none is lost.
    let r = app
        .send(Method::PUT, late, Some(&app.admin), Some(body(&second)))
        .await;
    assert_eq!(r.status, 200, "{}", r.json());
    infer(&app, "b-0", &[1.0; 16]).await;
    // Replaced again on the same file: the old writer finishes before the new one opens it.
    let mut same = body(&second);
    same["file"]["keep"] = json!(3);
    let r = app
        .send(Method::PUT, late, Some(&app.admin), Some(same))
        .await;
    assert_eq!(r.status, 200, "{}", r.json());
    infer(&app, "b-1", &[1.0; 16]).await;
    assert_eq!(entries(&first, N).await.len(), N);
    let later = entries(&second, 2).await;
    let ids: Vec<&Value> = later.iter().map(|e| &e["request_id"]).collect();
    assert_eq!(ids, [&json!("b-0"), &json!("b-1")]);

    let r = app
        .send(
            Method::PUT,
            "/api/payload-log/sinks/twin",
            Some(&app.admin),
            Some(body(&second)),
        )
        .await;
    assert_eq!(r.status, 409);
    assert!(r.error().contains("late"), "{}", r.error());
    // What was refused is not kept for the next start (or another replica) either.
    let stored = app
        .state
        .store()
        .list_payload_log_sinks()
        .expect("stored sinks");
    let names: Vec<&str> = stored.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names, ["late"]);

    let listed = app.get(sinks, Some(&app.admin)).await.json();
    let row = &listed["sinks"][0];
    assert_eq!(
        (&row["name"], &row["config"]["file"]["keep"]),
        (&json!("late"), &json!(3))
    );
    assert_eq!(
        row["written"],
        json!(N + 2),
        "the counts carry over a replacement"
    );

    // Refused while a setting names it, naming the setting.
    let r = app.send(Method::DELETE, late, Some(&app.admin), None).await;
    assert_eq!(r.status, 409);
    assert!(r.error().contains("model 'tiny'"), "{}", r.error());
    app.send(
        Method::DELETE,
        "/api/models/tiny/payload-log",
        Some(&app.upload),
        None,
    )
    .await;
    let key = app.create_key(&["infer"], json!({})).await;
    let key_route = format!("/api/keys/{}/payload-log", key["id"]);
    let r = app
        .send(
            Method::PUT,
            &key_route,
            Some(&app.admin),
            Some(json!({"mode": "all", "sink": "late"})),
        )
        .await;
    assert_eq!(r.status, 200);
    let r = app.send(Method::DELETE, late, Some(&app.admin), None).await;
    assert_eq!(r.status, 409);
    assert!(
        r.error().contains(&format!("API key {}", key["id"])),
        "{}",
        r.error()
    );
    app.send(Method::DELETE, &key_route, Some(&app.admin), None)
        .await;
    let r = app.send(Method::DELETE, late, Some(&app.admin), None).await;
    assert_eq!(
        (r.status.as_u16(), r.json()),
        (200, json!({"deleted": "late"}))
    );
    assert_eq!(
        app.get(sinks, Some(&app.admin)).await.json(),
        json!({"sinks": []})
    );
    assert_eq!(
        app.send(Method::DELETE, late, Some(&app.admin), None)
            .await
            .status,
        404
    );
}
