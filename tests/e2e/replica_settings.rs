//! Run-time payload log sinks and trace settings are the store's: changed on one PostgreSQL
//! replica they reach the other (the store's notifications), and on SQLite they outlive a
//! restart, over the configuration file's.

use crate::harness::{file_sink_config, model, register, register_with_env, Options, Server};
use crate::replicas::{cls_body, replica_with};
use crate::test_postgres::PgServer;
use crate::websocket::metric;
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, Instant};

/// Waits until `check` holds (bounded: changes travel by NOTIFY and sinks write in the
/// background).
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(15);
    while !check().await {
        assert!(Instant::now() < deadline, "after 15 s, still not: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn send(
    s: &Server,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut request = s
        .client
        .request(method, s.url(path))
        .bearer_auth(&s.admin_key);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let r = request.send().await.expect("reaches the server");
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

async fn get(s: &Server, path: &str) -> (u16, Value) {
    send(s, reqwest::Method::GET, path, None).await
}

async fn delete(s: &Server, path: &str) -> (u16, Value) {
    send(s, reqwest::Method::DELETE, path, None).await
}

async fn put(s: &Server, path: &str, body: Value) -> (u16, Value) {
    send(s, reqwest::Method::PUT, path, Some(body)).await
}

async fn post(s: &Server, path: &str, body: Value) -> (u16, Value) {
    send(s, reqwest::Method::POST, path, Some(body)).await
}

/// Logs every request of `cls` to sink `audit`.
async fn log_cls(s: &Server) -> (u16, Value) {
    let setting = json!({"mode": "all", "sample": 1.0, "sink": "audit"});
    put(s, "/api/models/cls/payload-log", setting).await
}

/// Entries `s` wrote through sink `audit`.
async fn written(s: &Server) -> f64 {
    let labels = [("sink", "audit"), ("outcome", "written")];
    metric(s, "infergate_payload_log_entries_total", &labels).await
}

async fn sink_names(s: &Server) -> Vec<String> {
    let (status, body) = get(s, "/api/payload-log/sinks").await;
    assert_eq!(status, 200, "{body}");
    body["sinks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_owned())
        .collect()
}

async fn infer(s: &Server) {
    let r = s
        .post_json("/v2/models/cls/infer", &s.admin_key, &cls_body())
        .await;
    assert_eq!(r.status(), 200);
}

fn entries(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON entry"))
        .collect()
}

fn pg_replicas(pg: &PgServer, data: &Path, extra_args: &[String]) -> (Server, Server) {
    let env = [("INFERGATE_STORE", pg.url())];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    register_with_env(data, "cls", &model("ocr-cls.onnx"), &env);
    (
        replica_with(data, pg, extra_args.to_vec()),
        replica_with(data, pg, extra_args.to_vec()),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_defined_on_one_replica_logs_on_the_other_until_removed() {
    let pg = PgServer::start();
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = pg_replicas(&pg, tmp.path(), &[]);
    let file = tmp.path().join("shared-audit.jsonl");
    let (status, body) = put(
        &a,
        "/api/payload-log/sinks/audit",
        json!({"file": {"path": file}}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    eventually("B has the sink A defined", || async {
        sink_names(&b).await.contains(&"audit".to_owned())
    })
    .await;
    // An uploader's setting on B may name it now, and B's requests are written through it.
    let (status, body) = log_cls(&b).await;
    assert_eq!(status, 200, "{body}");
    infer(&b).await;
    eventually("B's request is in the sink's file", || async {
        entries(&file).iter().any(|e| e["model"] == "cls")
    })
    .await;
    let by_b = written(&b).await;
    assert!(by_b >= 1.0, "B counts what it wrote: {by_b}");
    assert_eq!(written(&a).await, 0.0, "A served no request");

    // Still named by the model's setting: refused.
    let (status, body) = delete(&b, "/api/payload-log/sinks/audit").await;
    assert_eq!(status, 409, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("model 'cls'"),
        "{body}"
    );
    let (status, _) = delete(&b, "/api/models/cls/payload-log").await;
    assert_eq!(status, 200);
    eventually("A has no setting naming the sink", || async {
        let (_, view) = get(&a, "/api/models/cls/payload-log").await;
        view["payload_log"].is_null() && view["sinks"].is_array()
    })
    .await;
    let (status, body) = delete(&a, "/api/payload-log/sinks/audit").await;
    assert_eq!(status, 200, "{body}");
    eventually("B has the sink removed on A", || async {
        !sink_names(&b).await.contains(&"audit".to_owned())
    })
    .await;
    let (status, body) = log_cls(&b).await;
    assert_eq!(status, 400, "B no longer offers the sink: {body}");
}

/// A port nothing listens on: recorded spans are exported there and fail, counted.
fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Spans B recorded, whatever became of them.
async fn recorded_spans(s: &Server) -> f64 {
    let mut total = metric(s, "infergate_trace_spans_queued", &[]).await;
    for outcome in ["sent", "failed", "dropped"] {
        total += metric(s, "infergate_trace_spans_total", &[("outcome", outcome)]).await;
    }
    total
}

async fn trace_setting(s: &Server, path: &str) -> Value {
    let (status, body) = get(s, path).await;
    assert_eq!(status, 200, "{body}");
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trace_settings_changed_on_one_replica_apply_on_the_other() {
    let pg = PgServer::start();
    let tmp = tempfile::tempdir().unwrap();
    let endpoint = format!("http://127.0.0.1:{}/v1/traces", closed_port());
    let args = ["--otlp-endpoint", &endpoint, "--trace-sample-ratio", "0"].map(String::from);
    let (a, b) = pg_replicas(&pg, tmp.path(), &args);
    const GLOBAL: &str = "/v2/trace/setting";
    const CLS: &str = "/v2/models/cls/trace/setting";
    assert_eq!(trace_setting(&b, GLOBAL).await["trace_rate"], "0");
    infer(&b).await;
    assert_eq!(recorded_spans(&b).await, 0.0, "nothing recorded at rate 0");

    let (status, body) = post(&a, GLOBAL, json!({"trace_rate": "1"})).await;
    assert_eq!(status, 200, "{body}");
    eventually("B reads back the rate set on A", || async {
        trace_setting(&b, GLOBAL).await["trace_rate"] == "1"
    })
    .await;
    infer(&b).await;
    eventually("B records its requests' traces", || async {
        recorded_spans(&b).await > 0.0
    })
    .await;

    // A model's override, set on B, read back on A; cleared on A, gone on B.
    let (status, body) = post(&b, CLS, json!({"trace_level": ["OFF"], "trace_count": "5"})).await;
    assert_eq!(status, 200, "{body}");
    eventually("A reads back the model's override set on B", || async {
        let cls = trace_setting(&a, CLS).await;
        cls["trace_level"] == json!(["OFF"]) && cls["trace_count"] == "5"
    })
    .await;
    assert_eq!(
        trace_setting(&a, GLOBAL).await["trace_level"],
        json!(["TIMESTAMPS"])
    );
    let (status, _) = post(&a, CLS, json!({"trace_level": null, "trace_count": null})).await;
    assert_eq!(status, 200);
    let (status, _) = post(&a, GLOBAL, json!({"trace_rate": null})).await;
    assert_eq!(status, 200);
    eventually(
        "B follows the model's and the server's settings cleared on A",
        || async {
            let cls = trace_setting(&b, CLS).await;
            cls["trace_level"] == json!(["TIMESTAMPS"])
                && cls["trace_count"] == "-1"
                && cls["trace_rate"] == "0"
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_time_sinks_and_trace_settings_outlive_a_restart_over_the_configuration() {
    let tmp = tempfile::tempdir().unwrap();
    register(tmp.path(), "cls", &model("ocr-cls.onnx"));
    let config = file_sink_config(tmp.path(), "filed", "filed.jsonl");
    let options = || Options {
        extra_args: vec!["--config".into(), config.display().to_string()],
        ..Options::default()
    };
    let s = Server::start_in(tmp.path(), options());
    let file = tmp.path().join("api.jsonl");
    let (status, body) = put(
        &s,
        "/api/payload-log/sinks/api",
        json!({"file": {"path": file, "keep": 2}}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = delete(&s, "/api/payload-log/sinks/filed").await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = post(
        &s,
        "/v2/models/cls/trace/setting",
        json!({"trace_rate": "7"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    s.stop();

    let s = Server::start_in(tmp.path(), options());
    assert!(
        s.startup_log
            .iter()
            .any(|l| l.contains("removes the configuration file's sink") && l.contains("filed")),
        "the start says the file's sink is overridden: {:?}",
        s.startup_log
    );
    let (status, body) = get(&s, "/api/payload-log/sinks").await;
    assert_eq!(status, 200, "{body}");
    let sinks = body["sinks"].as_array().unwrap();
    assert_eq!(sinks.len(), 1, "the file's sink stays removed: {body}");
    assert_eq!(sinks[0]["name"], "api");
    assert_eq!(sinks[0]["origin"], "api");
    assert_eq!(sinks[0]["config"]["file"]["keep"], 2);
    assert_eq!(
        trace_setting(&s, "/v2/models/cls/trace/setting").await["trace_rate"],
        "7"
    );
    // Written through after the restart.
    let (status, _) = put(
        &s,
        "/api/models/cls/payload-log",
        json!({"mode": "request", "sample": 1.0, "sink": "api"}),
    )
    .await;
    assert_eq!(status, 200);
    infer(&s).await;
    eventually(
        "the restarted server writes through the stored sink",
        || async { !entries(&file).is_empty() },
    )
    .await;
    // Defined again, the file's name is the stored definition's.
    let (status, body) = put(
        &s,
        "/api/payload-log/sinks/filed",
        json!({"file": {"path": tmp.path().join("filed.jsonl")}}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["origin"], "api");
}
