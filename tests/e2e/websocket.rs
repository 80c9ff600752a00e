//! `/v2/stream` and `/v2/events` over TLS with tokio-tungstenite.

use crate::harness::{model, Options, Server};
use futures_util::{SinkExt, StreamExt};
use rustls::pki_types::ServerName;
use serde_json::{json, Value};
use std::time::Duration;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::{self, Message};

pub type Ws =
    tokio_tungstenite::WebSocketStream<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>;
type Handshake = http::Response<Option<Vec<u8>>>;

pub async fn connect(
    s: &Server,
    path: &str,
    headers: &[(&str, &str)],
) -> Result<(Ws, Handshake), tungstenite::Error> {
    connect_with(s, path, headers, None).await
}

/// `connect` with a given socket receive buffer (a small one makes a slow reader).
async fn connect_with(
    s: &Server,
    path: &str,
    headers: &[(&str, &str)],
    recv_buffer: Option<u32>,
) -> Result<(Ws, Handshake), tungstenite::Error> {
    let hostport = s.addr.trim_start_matches("https://").to_string();
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    if let Some(size) = recv_buffer {
        socket.set_recv_buffer_size(size).unwrap();
    }
    let tcp = socket.connect(hostport.parse().unwrap()).await.unwrap();
    let tls = crate::exhaustion::tls_connector(s, b"http/1.1")
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    let mut request = format!("wss://{hostport}{path}")
        .into_client_request()
        .unwrap();
    for (name, value) in headers {
        request.headers_mut().insert(
            http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            value.parse().unwrap(),
        );
    }
    tokio_tungstenite::client_async(request, tls).await
}

fn status_of(result: Result<(Ws, Handshake), tungstenite::Error>) -> u16 {
    match result {
        Err(tungstenite::Error::Http(response)) => response.status().as_u16(),
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => 101,
    }
}

/// The next JSON text frame (pings and pongs skipped).
pub async fn next_json(ws: &mut Ws) -> Value {
    loop {
        let m = tokio::time::timeout(Duration::from_secs(60), ws.next())
            .await
            .expect("a frame within 60 s")
            .expect("the connection is open")
            .expect("a valid frame");
        match m {
            Message::Text(t) => return serde_json::from_str(t.as_str()).unwrap(),
            Message::Ping(_) | Message::Pong(_) => continue,
            other => panic!("unexpected frame {other:?}"),
        }
    }
}

/// Sends a `generate` request and reads its stream to the end: the tokens joined, and the final
/// frame (its summary or its error). Every frame must carry the request's id.
async fn generate_to_end(ws: &mut Ws, request: Value) -> (String, Value) {
    let id = request["id"].clone();
    ws.send(Message::text(request.to_string())).await.unwrap();
    let mut tokens = String::new();
    loop {
        let f = next_json(ws).await;
        assert_eq!(f["id"], id, "{f}");
        match f["token"].as_str() {
            Some(t) => tokens.push_str(t),
            None => return (tokens, f),
        }
    }
}

/// The close frame's code, skipping other frames.
async fn close_code(ws: &mut Ws) -> u16 {
    loop {
        match tokio::time::timeout(Duration::from_secs(30), ws.next())
            .await
            .expect("a close frame within 30 s")
        {
            Some(Ok(Message::Close(Some(frame)))) => return frame.code.into(),
            Some(Ok(_)) => continue,
            other => panic!("expected a close frame, got {other:?}"),
        }
    }
}

fn cls_request(id: Value) -> Message {
    cls_message(id, "cls", json!({}))
}

/// A request shaped for the cls model to `model` (the model or a pipeline over it), with KServe
/// request `parameters`.
fn cls_message(id: Value, model: &str, parameters: Value) -> Message {
    let data = vec![0.0f32; 3 * 48 * 192];
    Message::text(
        json!({"id": id, "model": model, "parameters": parameters, "inputs": [
            {"name": "x", "shape": [1, 3, 48, 192], "datatype": "FP32", "data": data}
        ]})
        .to_string(),
    )
}

/// One value from /metrics (0 when absent).
pub async fn metric(s: &Server, name: &str, labels: &[(&str, &str)]) -> f64 {
    let text = s
        .client
        .get(s.url("/metrics"))
        .bearer_auth(&s.admin_key)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .find(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .and_then(|l| l.rsplit(' ').next())
        .map(|v| v.parse().unwrap())
        .unwrap_or(0.0)
}

/// Waits (bounded only against a hang) until no generation runs, then counts the tokens the
/// text generator streamed over WebSocket.
async fn tokens_once_no_generation_runs(s: &Server, when: &str) -> f64 {
    let mut waited = 0;
    while metric(s, "infergate_generations_in_progress", &[]).await != 0.0 {
        waited += 1;
        assert!(waited < 600, "a generation is still running {when}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    metric(
        s,
        "infergate_generated_tokens_total",
        &[("model", "textgen"), ("protocol", "websocket")],
    )
    .await
}

fn textgen_server() -> (tempfile::TempDir, Server) {
    let tmp = tempfile::tempdir().unwrap();
    crate::harness::register(tmp.path(), "cls", &model("ocr-cls.onnx"));
    crate::harness::register(tmp.path(), "textgen", &model("textgen.onnx"));
    let vocab = model("textgen-vocab.json");
    let s = Server::start_in(
        tmp.path(),
        Options {
            extra_args: vec!["--openai-vocab".into(), vocab.display().to_string()],
            ..Options::default()
        },
    );
    (tmp, s)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_keys_are_checked_before_any_work() {
    let s = Server::with_models(&[]);
    let infer = s.key("infer");
    let bearer = format!("Bearer {infer}");
    // Refused before upgrading: a bad key, a key without the scope, a key offered alone.
    assert_eq!(
        status_of(
            connect(
                &s,
                "/v2/stream",
                &[("authorization", "Bearer ig_0123456789ab_x")]
            )
            .await
        ),
        401
    );
    let upload = s.key("upload");
    assert_eq!(
        status_of(connect(&s, "/v2/stream", &[("x-api-key", &upload)]).await),
        403
    );
    assert_eq!(
        status_of(connect(&s, "/v2/stream", &[("sec-websocket-protocol", &infer)]).await),
        400
    );
    let offered = format!("infergate.v1, {}", "ig_0123456789ab_nope");
    assert_eq!(
        status_of(connect(&s, "/v2/stream", &[("sec-websocket-protocol", &offered)]).await),
        401
    );
    // Accepted: header, or subprotocol next to infergate.v1 (never echoed).
    let (_ws, r) = connect(&s, "/v2/stream", &[("authorization", &bearer)])
        .await
        .unwrap();
    assert_eq!(r.status(), 101);
    let offered = format!("infergate.v1, {infer}");
    let (_ws, r) = connect(&s, "/v2/stream", &[("sec-websocket-protocol", &offered)])
        .await
        .unwrap();
    assert_eq!(r.headers()["sec-websocket-protocol"], "infergate.v1");
    // Or as the first message; anything else first closes with 1008.
    let (mut ws, _) = connect(&s, "/v2/stream", &[]).await.unwrap();
    ws.send(Message::text(json!({"api_key": infer}).to_string()))
        .await
        .unwrap();
    assert_eq!(next_json(&mut ws).await, json!({"authenticated": true}));
    let (mut ws, _) = connect(&s, "/v2/stream", &[]).await.unwrap();
    ws.send(Message::text(json!({"id": 1, "model": "cls"}).to_string()))
        .await
        .unwrap();
    assert_eq!(close_code(&mut ws).await, 1008);
    let (mut ws, _) = connect(&s, "/v2/stream", &[]).await.unwrap();
    ws.send(Message::text(json!({"api_key": upload}).to_string()))
        .await
        .unwrap();
    assert_eq!(close_code(&mut ws).await, 1008);
    // Binary frames are not part of the protocol.
    let (mut ws, _) = connect(&s, "/v2/stream", &[("authorization", &bearer)])
        .await
        .unwrap();
    ws.send(Message::binary(vec![1u8, 2, 3])).await.unwrap();
    assert_eq!(close_code(&mut ws).await, 1003);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_answers_out_of_order_survives_bad_messages_and_streams_tokens() {
    let (_tmp, s) = textgen_server();
    let key = s.key("infer");
    let (mut ws, _) = connect(&s, "/v2/stream", &[("x-api-key", &key)])
        .await
        .unwrap();
    // A generation long enough (3000 tokens, seconds even on a fast machine) that it is
    // still running when the short requests sent after its first token are answered; it is
    // cancelled afterwards, and the cancel proves it had not finished. A fixed 150-token
    // generation raced the classifier on a loaded CI machine.
    ws.send(Message::text(
        json!({"id": "g", "model": "textgen",
               "generate": {"prompt": "Hello there", "max_tokens": 3000, "temperature": 0}})
        .to_string(),
    ))
    .await
    .unwrap();
    let first = next_json(&mut ws).await;
    assert_eq!(first["id"], "g", "{first}");
    assert!(first.get("token").is_some(), "{first}");
    ws.send(Message::text("{not json")).await.unwrap();
    ws.send(cls_request(json!(1))).await.unwrap();
    ws.send(Message::text(
        json!({"id": 2, "model": "nope", "inputs": []}).to_string(),
    ))
    .await
    .unwrap();
    ws.send(cls_request(json!("three"))).await.unwrap();

    let mut order = Vec::new();
    while order.len() < 4 {
        let f = next_json(&mut ws).await;
        if f["id"] == "g" {
            assert!(f.get("token").is_some(), "the generation ended early: {f}");
            continue;
        }
        order.push(f);
    }
    let find = |id: Value| order.iter().position(|f| f["id"] == id).unwrap();
    let bad = &order[find(Value::Null)];
    assert_eq!(bad["status"], 400);
    assert!(bad["error"].as_str().unwrap().contains("invalid JSON"));
    assert_eq!(order[find(json!(2))]["status"], 404);
    for id in [json!(1), json!("three")] {
        let answer = &order[find(id.clone())];
        assert_eq!(answer["model_name"], "cls", "{answer}");
        assert_eq!(answer["outputs"][0]["shape"], json!([1, 2]));
    }
    // The generation was sent first and is still running: answers come as they are ready.
    ws.send(Message::text(json!({"cancel": "g"}).to_string()))
        .await
        .unwrap();
    let cancelled = loop {
        let f = next_json(&mut ws).await;
        assert_eq!(f["id"], "g", "{f}");
        if f.get("token").is_none() {
            break f;
        }
    };
    assert_eq!(cancelled, json!({"id": "g", "cancelled": true}));

    // A generation that runs to its end streams its tokens and then one summary of them.
    let (tokens, done) = generate_to_end(
        &mut ws,
        json!({"id": "h", "model": "textgen",
               "generate": {"prompt": "Hello there", "max_tokens": 40, "temperature": 0}}),
    )
    .await;
    assert_eq!(done["done"], true, "{done}");
    assert_eq!(done["text"].as_str().unwrap(), tokens);
    assert_eq!(
        done["usage"]["completion_tokens"].as_u64().unwrap() as usize,
        tokens.chars().count()
    );
    assert_eq!(done["usage"]["prompt_tokens"], 11);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_messages_spend_the_keys_rate_limit() {
    let s = Server::with_models(&[("cls", "ocr-cls.onnx")]);
    // The upgrade request spends one of the three.
    let key = s.key_with("infer", &["--rps", "0.001", "--burst", "3"]);
    let (mut ws, _) = connect(&s, "/v2/stream", &[("x-api-key", &key)])
        .await
        .unwrap();
    for id in 0..3 {
        ws.send(cls_request(json!(id))).await.unwrap();
    }
    let mut ok = 0;
    let mut limited = 0;
    for _ in 0..3 {
        let f = next_json(&mut ws).await;
        if f.get("outputs").is_some() {
            ok += 1;
        } else {
            assert_eq!(f["status"], 429, "{f}");
            assert!(f["retry_after"].as_u64().unwrap() >= 1);
            limited += 1;
        }
    }
    assert_eq!((ok, limited), (2, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_disconnect_stops_generation() {
    // Greedy generations from "Once" run all 3000 tokens; sampled ones end on their own after a
    // few dozen, which could beat the disconnect (or the cancel below).
    let (_tmp, s) = textgen_server();
    let key = s.key("infer");
    let (mut ws, _) = connect(&s, "/v2/stream", &[("x-api-key", &key)])
        .await
        .unwrap();
    ws.send(Message::text(
        json!({"id": 1, "model": "textgen", "generate": {"prompt": "Once", "max_tokens": 3000, "temperature": 0}})
            .to_string(),
    ))
    .await
    .unwrap();
    for _ in 0..3 {
        assert!(next_json(&mut ws).await.get("token").is_some());
    }
    drop(ws);
    let tokens = tokens_once_no_generation_runs(&s, "after the client left").await;
    assert!((3.0..3000.0).contains(&tokens), "{tokens}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_report_model_state_and_throughput_to_admins() {
    let s = Server::with_models(&[("cls", "ocr-cls.onnx")]);
    let infer = s.key("infer");
    assert_eq!(
        status_of(connect(&s, "/v2/events", &[("x-api-key", &infer)]).await),
        403
    );
    let (mut ws, _) = connect(&s, "/v2/events", &[("x-api-key", &s.admin_key)])
        .await
        .unwrap();
    let first = next_json(&mut ws).await;
    assert_eq!(first["type"], "model_state");
    assert_eq!(first["state"], "unloaded");
    // Traffic: the model loads and serves.
    let body = json!({"inputs": [{"name": "x", "shape": [1, 3, 48, 192], "datatype": "FP32",
                                   "data": vec![0.0f32; 3 * 48 * 192]}]});
    for _ in 0..3 {
        let r = s
            .client
            .post(s.url("/v2/models/cls/infer"))
            .bearer_auth(&infer)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    let mut loaded = false;
    let mut served = 0.0;
    // The all-in-one server's own engine is the worker `local`, announced once.
    let mut local_announced = 0;
    let mut local_served = 0.0;
    for _ in 0..10 {
        let f = next_json(&mut ws).await;
        match f["type"].as_str().unwrap() {
            "model_state" => loaded |= f["model"] == "cls" && f["state"] == "loaded",
            "worker_state" => {
                assert_eq!(
                    (&f["worker"], &f["state"], &f["previous"]),
                    (&json!("local"), &json!("ready"), &Value::Null),
                    "{f}"
                );
                local_announced += 1;
            }
            "tick" => {
                let workers = f["workers"].as_array().unwrap();
                assert_eq!(workers.len(), 1, "{f}");
                let local = &workers[0];
                assert_eq!(
                    (&local["id"], &local["state"]),
                    (&json!("local"), &json!("ready"))
                );
                assert_eq!(local["last_seen_ms"], 0);
                // The address it listens on, the port it bound included.
                assert_eq!(local["address"], s.addr.trim_start_matches("https://"));
                assert!(local["rss_bytes"].as_u64().unwrap() > 0, "{local}");
                assert!(local["cpu_percent"].as_f64().unwrap() >= 0.0, "{local}");
                let rate = local["requests_per_s"].as_f64().unwrap();
                if rate > 0.0 {
                    // Alone, the gateway's percentiles are the local engine's.
                    let p50 = local["p50_ms"]
                        .as_f64()
                        .expect("p50 in a second with requests");
                    assert!(local["p99_ms"].as_f64().unwrap() >= p50, "{local}");
                }
                local_served += rate;
                let m = &f["models"][0];
                assert_eq!(m["model"], "cls");
                // No budget was set and the native ops run on the CPU here.
                let memory = &f["memory"];
                assert!(memory["host_budget_bytes"].is_null(), "{memory}");
                assert!(memory["gpu_pools"].is_null(), "{memory}");
                if loaded {
                    assert!(
                        memory["host_reserved_bytes"].as_u64().unwrap() > 0,
                        "{memory}"
                    );
                }
                served += m["requests_per_s"].as_f64().unwrap();
                if loaded && served > 0.0 {
                    break;
                }
            }
            other => panic!("unexpected event {other}"),
        }
    }
    assert!(loaded && served > 0.0, "loaded {loaded}, served {served}");
    assert_eq!(local_announced, 1);
    assert!(
        local_served > 0.0,
        "the local worker's rate: {local_served}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_slow_reader_stops_the_server_reading() {
    // Large answers (OCR recognition logits, ~MBs of JSON each) to a client that does not read:
    // the server runs at most max_in_flight at once, queues a few answers, and then stops
    // taking messages instead of buffering the rest.
    let tmp = tempfile::tempdir().unwrap();
    crate::harness::register(tmp.path(), "rec", &model("ocr-rec.onnx"));
    let config = tmp.path().join("infergate.toml");
    std::fs::write(&config, "[websocket]\nmax_in_flight = 2\n").unwrap();
    let s = Server::start_in(
        tmp.path(),
        Options {
            extra_args: vec!["--config".into(), config.display().to_string()],
            ..Options::default()
        },
    );
    let key = s.key("infer");
    let (ws, _) = connect_with(&s, "/v2/stream", &[("x-api-key", &key)], Some(16 << 10))
        .await
        .unwrap();
    let (mut sink, mut ws) = ws.split();
    const SENT: u64 = 40;
    // Sent from a task: once the server stops reading, sending blocks too.
    let sender = tokio::spawn(async move {
        let data = vec![0.0f32; 3 * 48 * 160];
        for id in 0..SENT {
            let m = json!({"id": id, "model": "rec", "inputs": [
                {"name": "x", "shape": [1, 3, 48, 160], "datatype": "FP32", "data": data}]});
            sink.send(Message::text(m.to_string())).await.unwrap();
        }
        sink
    });
    // Wait until the server stops making progress (its count stays put for 2 s).
    let mut last = -1.0;
    let mut stable = 0;
    while stable < 20 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = metric(
            &s,
            "infergate_inference_requests_total",
            &[("protocol", "websocket")],
        )
        .await;
        if now == last {
            stable += 1;
        } else {
            (last, stable) = (now, 0);
        }
    }
    eprintln!("slow reader: the server answered {last} of {SENT} and stopped reading");
    assert!(
        last < SENT as f64 / 2.0,
        "{last} of {SENT} answered to a client that reads nothing: the server must stop reading"
    );
    // Nothing is lost: reading now drains every answer.
    let mut ids = std::collections::BTreeSet::new();
    while ids.len() < SENT as usize {
        let f = match ws.next().await.unwrap().unwrap() {
            Message::Text(t) => serde_json::from_str::<Value>(t.as_str()).unwrap(),
            _ => continue,
        };
        assert!(f.get("outputs").is_some(), "{}", f["error"]);
        ids.insert(f["id"].as_u64().unwrap());
    }
    assert_eq!(ids.len() as u64, SENT);
    drop(sender.await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_cancel_by_id_stops_one_request_and_keeps_the_connection() {
    let (_tmp, s) = textgen_server();
    let key = s.key("infer");
    let (mut ws, _) = connect(&s, "/v2/stream", &[("x-api-key", &key)])
        .await
        .unwrap();
    let long = |id: Value| {
        Message::text(
            json!({"id": id, "model": "textgen", "generate": {"prompt": "Once", "max_tokens": 3000, "temperature": 0}})
                .to_string(),
        )
    };
    ws.send(long(json!("a"))).await.unwrap();
    assert!(next_json(&mut ws).await.get("token").is_some());
    // The same id twice while the first is in flight is refused; the first goes on.
    ws.send(long(json!("a"))).await.unwrap();
    ws.send(Message::text(json!({"cancel": "a"}).to_string()))
        .await
        .unwrap();
    let mut duplicate = None;
    let cancelled = loop {
        let f = next_json(&mut ws).await;
        assert_eq!(f["id"], "a", "{f}");
        if f.get("token").is_some() {
            continue;
        }
        if f["status"] == 409 {
            duplicate = Some(f);
            continue;
        }
        break f;
    };
    assert!(duplicate.unwrap()["error"]
        .as_str()
        .unwrap()
        .contains("already in flight"));
    assert_eq!(cancelled, json!({"id": "a", "cancelled": true}));

    // Cancelling what is not in flight (any more) says so; a malformed cancel is a 400.
    ws.send(Message::text(json!({"cancel": "a"}).to_string()))
        .await
        .unwrap();
    let f = next_json(&mut ws).await;
    assert_eq!(
        (f["id"].clone(), f["status"].clone()),
        (json!("a"), json!(404))
    );
    ws.send(Message::text(json!({"cancel": [1]}).to_string()))
        .await
        .unwrap();
    assert_eq!(next_json(&mut ws).await["status"], 400);

    // No frame of the cancelled generation follows, and the connection still serves: the id
    // may be reused.
    ws.send(cls_request(json!("a"))).await.unwrap();
    let answer = next_json(&mut ws).await;
    assert_eq!(answer["id"], "a");
    assert_eq!(answer["model_name"], "cls", "{answer}");
    let tokens = tokens_once_no_generation_runs(&s, "after it was cancelled").await;
    assert!((1.0..3000.0).contains(&tokens), "{tokens}");
}

/// A pipeline's name runs over the stream as over HTTP and gRPC, and the KServe parameters
/// `priority` and `timeout` reach the model's queue, a pipeline's model stage included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_runs_pipelines_and_applies_priority_and_timeout() {
    let s = Server::with_models(&[("cls", "ocr-cls.onnx")]);
    let put = |path: &str, body: Value| {
        s.client
            .put(s.url(path))
            .bearer_auth(&s.admin_key)
            .json(&body)
            .send()
    };
    let saved = put("/api/pipelines/orient", json!({"model": "cls"}))
        .await
        .unwrap();
    assert_eq!(saved.status(), 201, "{}", saved.text().await.unwrap());
    let key = s.key("infer");
    let (mut ws, _) = connect(&s, "/v2/stream", &[("x-api-key", &key)])
        .await
        .unwrap();

    ws.send(cls_message(json!(7), "orient", json!({})))
        .await
        .unwrap();
    let answer = next_json(&mut ws).await;
    assert_eq!(answer["id"], 7, "{answer}");
    assert_eq!(answer["model_name"], "orient", "{answer}");
    assert_eq!(answer["model_version"], "1", "{answer}");
    assert_eq!(answer["outputs"][0]["shape"], json!([1, 2]), "{answer}");
    ws.send(Message::text(
        json!({"id": "g", "model": "orient", "generate": {"prompt": "Hi"}}).to_string(),
    ))
    .await
    .unwrap();
    let refused = next_json(&mut ws).await;
    assert_eq!(
        (refused["id"].clone(), refused["status"].clone()),
        (json!("g"), json!(400))
    );
    assert!(
        refused["error"].as_str().unwrap().contains("pipeline"),
        "{refused}"
    );

    // Two priority levels, and a batch that waits 10 s to fill: only a request's own queue
    // timeout ends its wait sooner.
    let configured = put(
        "/api/models/cls/config",
        json!({"max_batch_size": 8, "dynamic_batching": {
            "max_queue_delay_microseconds": 10_000_000,
            "priority_levels": 2, "default_priority_level": 2,
            "default_queue_policy": {"allow_timeout_override": true}}}),
    )
    .await
    .unwrap();
    assert_eq!(
        configured.status(),
        200,
        "{}",
        configured.text().await.unwrap()
    );
    ws.send(cls_message(json!("low"), "cls", json!({"priority": 3})))
        .await
        .unwrap();
    ws.send(cls_message(
        json!("soon"),
        "cls",
        json!({"timeout": "soon"}),
    ))
    .await
    .unwrap();
    ws.send(cls_message(
        json!("model"),
        "cls",
        json!({"priority": 1, "timeout": 50_000}),
    ))
    .await
    .unwrap();
    ws.send(cls_message(
        json!("pipeline"),
        "orient",
        json!({"timeout": 50_000}),
    ))
    .await
    .unwrap();
    let mut frames = std::collections::HashMap::new();
    while frames.len() < 4 {
        let f = next_json(&mut ws).await;
        frames.insert(f["id"].as_str().unwrap().to_string(), f);
    }
    let expect = [
        ("low", 400, "priority 3 is out of range"),
        ("soon", 400, "'timeout' must be a non-negative integer"),
        ("model", 504, "timed out"),
        ("pipeline", 504, "timed out"),
    ];
    for (id, status, says) in expect {
        let f = &frames[id];
        assert_eq!(f["status"], status, "{f}");
        assert!(f["error"].as_str().unwrap().contains(says), "{f}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_generate_streams_a_chat_model() {
    let tmp = tempfile::tempdir().unwrap();
    crate::harness::register(tmp.path(), "smollm2", &model("smollm2.gguf"));
    let s = Server::start_in(
        tmp.path(),
        Options {
            // 1 llama.cpp thread: 2 stall on an oversubscribed machine (README "threads").
            extra_args: [
                "--llm-max-sequences",
                "2",
                "--llm-context",
                "512",
                "--llm-threads",
                "1",
            ]
            .map(String::from)
            .to_vec(),
            ..Options::default()
        },
    );
    let key = s.key("infer");
    let (mut ws, _) = connect(&s, "/v2/stream", &[("x-api-key", &key)])
        .await
        .unwrap();
    let question = "What is the capital city of France? Answer in one word.";
    // Messages go through the model's chat template; `n` > 1 has no frames to tell choices
    // apart, so it is refused with the field named, and the connection stays usable.
    ws.send(Message::text(
        json!({"id": "n", "model": "smollm2",
               "generate": {"messages": [{"role": "user", "content": question}], "n": 2}})
        .to_string(),
    ))
    .await
    .unwrap();
    let refused = next_json(&mut ws).await;
    assert_eq!(refused["id"], "n");
    assert_eq!(refused["status"], 400, "{refused}");
    assert!(
        refused["error"]
            .as_str()
            .unwrap()
            .contains("n, logprobs and tools"),
        "{refused}"
    );
    let (tokens, done) = generate_to_end(
        &mut ws,
        json!({"id": "c", "model": "smollm2",
               "generate": {"messages": [{"role": "user", "content": question}],
                            "max_tokens": 8, "temperature": 0}}),
    )
    .await;
    assert_eq!(done["done"], true, "{done}");
    assert_eq!(done["text"].as_str().unwrap(), tokens);
    assert!(tokens.contains("Paris"), "{tokens:?}");
    let completion = done["usage"]["completion_tokens"].as_u64().unwrap();
    assert!((1..=8).contains(&completion), "{done}");
    if completion < 8 {
        assert_eq!(done["finish_reason"], "stop", "{done}");
    }
    assert!(done["usage"]["prompt_tokens"].as_u64().unwrap() > 10);
}
