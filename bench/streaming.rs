//! Protocols and streaming, measured in one run against the real (release) binary over TLS:
//!
//! 1. Small inference (a one-node ONNX model, `y = x + x` on 16 floats, written by the venv's
//!    `onnx` package, so the protocol and not the model dominates) on ONE connection: WebSocket
//!    vs HTTP/1.1 keep-alive vs HTTP/2, requests/s at concurrency 1 and 8 (HTTP/1.1 cannot
//!    multiplex: at 8 it is shown with 8 connections for reference), ratios printed.
//! 2. Tokens/s of the character generator streamed over SSE and WebSocket (and answered whole,
//!    for reference) vs the same generation loop run in-process (same code, same seeds, no
//!    transport): ratio of the totals and median of the per-round ratios (robust to the
//!    host's bursts of load).
//!
//! Bounded: ~3 s per protocol case, ~4000 tokens per generation path.
//! `cargo bench -p infergate --bench streaming` (needs scripts/setup.sh's models).

#[allow(dead_code)]
#[path = "../tests/e2e/harness.rs"]
mod harness;

use futures_util::{SinkExt, StreamExt};
use harness::{model, Options, Server};
use infergate_server::api::textgen::start_generation;
use infergate_service::config::Config;
use infergate_service::state::AppState;
use infergate_service::textgen::Sampling;
use infergate_store::Store;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>;

const CASE: Duration = Duration::from_secs(3);
/// Seeded generations are run until this many tokens are made; the same seeds are then
/// streamed over SSE and WebSocket.
const TOKENS: u64 = 4000;
const MAX_TOKENS: u64 = 500;

/// Writes the tiny model ([1,16] -> x + x) with the setup step's Python (scripts/tiny_model.py).
fn tiny_model(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("tiny.onnx");
    let python = std::env::var("INFERGATE_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/tiny_model.py");
    let status = std::process::Command::new(python)
        .arg(script)
        .arg(&path)
        .status()
        .expect("run python (source .cache/env.sh)");
    assert!(status.success(), "writing the tiny model failed");
    path
}

async fn ws_connect(s: &Server, key: &str) -> Ws {
    let hostport = s.addr.trim_start_matches("https://").to_string();
    let tcp = tokio::net::TcpStream::connect(&hostport)
        .await
        .expect("connect");
    tcp.set_nodelay(true).expect("nodelay");
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(s.data.join("tls/cert.pem")).expect("cert") {
        roots.add(cert.expect("pem")).expect("root");
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("tls versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").expect("name"), tcp)
        .await
        .expect("tls");
    let mut request = format!("wss://{hostport}/v2/stream")
        .into_client_request()
        .expect("request");
    request
        .headers_mut()
        .insert("x-api-key", key.parse().expect("header"));
    tokio_tungstenite::client_async(request, tls)
        .await
        .expect("upgrade")
        .0
}

async fn ws_json(ws: &mut Ws) -> Value {
    loop {
        match ws.next().await.expect("open").expect("frame") {
            Message::Text(t) => return serde_json::from_str(t.as_str()).expect("json"),
            Message::Ping(_) | Message::Pong(_) => continue,
            other => panic!("unexpected frame {other:?}"),
        }
    }
}

fn small_body() -> Value {
    let x: Vec<f32> = (0..16).map(|i| i as f32).collect();
    json!({"inputs": [{"name": "x", "shape": [1, 16], "datatype": "FP32", "data": x}]})
}

/// Requests/s of `concurrency` loops sharing `client` for CASE.
async fn http_rate(client: &reqwest::Client, url: &str, key: &str, concurrency: usize) -> f64 {
    let body = small_body();
    let start = Instant::now();
    let loops: Vec<_> = (0..concurrency)
        .map(|_| {
            let (client, url, key, body) = (
                client.clone(),
                url.to_string(),
                key.to_string(),
                body.clone(),
            );
            tokio::spawn(async move {
                let mut n = 0u64;
                while start.elapsed() < CASE {
                    let r = client
                        .post(&url)
                        .bearer_auth(&key)
                        .json(&body)
                        .send()
                        .await
                        .expect("send");
                    assert_eq!(r.status(), 200);
                    r.bytes().await.expect("body");
                    n += 1;
                }
                n
            })
        })
        .collect();
    let mut total = 0;
    for l in loops {
        total += l.await.expect("loop");
    }
    total as f64 / start.elapsed().as_secs_f64()
}

/// Requests/s over one WebSocket keeping `concurrency` requests in flight.
async fn ws_rate(s: &Server, key: &str, concurrency: usize) -> f64 {
    let mut ws = ws_connect(s, key).await;
    let mut body = small_body();
    body["model"] = json!("tiny");
    let start = Instant::now();
    let mut sent = 0u64;
    let mut done = 0u64;
    while sent < concurrency as u64 {
        body["id"] = json!(sent);
        ws.send(Message::text(body.to_string()))
            .await
            .expect("send");
        sent += 1;
    }
    while done < sent {
        let answer = ws_json(&mut ws).await;
        assert!(answer.get("outputs").is_some(), "{answer}");
        done += 1;
        if start.elapsed() < CASE {
            body["id"] = json!(sent);
            ws.send(Message::text(body.to_string()))
                .await
                .expect("send");
            sent += 1;
        }
    }
    done as f64 / start.elapsed().as_secs_f64()
}

fn client(s: &Server, http2: bool) -> reqwest::Client {
    let pem = std::fs::read(s.data.join("tls/cert.pem")).expect("cert");
    let builder = reqwest::Client::builder()
        .use_rustls_tls()
        .add_root_certificate(reqwest::Certificate::from_pem(&pem).expect("pem"));
    let builder = if http2 {
        builder.http2_prior_knowledge()
    } else {
        builder.http1_only()
    };
    builder.build().expect("client")
}

/// The gateway's own generation loop in this process (no transport).
async fn in_process_state(data: &std::path::Path) -> Arc<AppState> {
    let mut config = Config::default();
    config.openai.vocab = Some(model("textgen-vocab.json"));
    let store = Arc::new(Store::open(data).expect("store"));
    let engine = Arc::new(
        infergate_engine::Engine::new(
            infergate_service::startup::engine_config(&config).expect("config"),
        )
        .expect("engine"),
    );
    infergate_service::model_repository::ModelRepository::new(store.clone(), engine.clone())
        .register_file(
            "textgen",
            &model("textgen.onnx"),
            &infergate_service::model_repository::ParsedConfig::empty(),
        )
        .expect("register");
    let plugin_host =
        Arc::new(infergate_service::startup::plugin_host(&config, &store).expect("plugin host"));
    Arc::new(AppState::new(config, store, engine, plugin_host).expect("state"))
}

const PROMPT: &str = "Once upon a time";

fn sampling(seed: u64) -> Sampling {
    Sampling {
        temperature: 1.0,
        top_p: 1.0,
        seed: Some(seed),
        max_tokens: MAX_TOKENS as u32,
        stop: vec![],
    }
}

/// One seeded generation in process: (time, tokens).
async fn in_process_one(state: &Arc<AppState>, seed: u64) -> (Duration, u64) {
    let record = state.catalog().resolve("textgen", None).expect("record");
    let vocab = state.textgen_vocab().cloned().expect("vocab");
    let start = Instant::now();
    let mut g = start_generation(state, vocab, record, PROMPT, sampling(seed)).expect("generation");
    while let Some(step) = g.next().await.expect("step") {
        if step.finish.is_some() {
            break;
        }
    }
    (start.elapsed(), g.completion_tokens as u64)
}

/// One seeded generation streamed over SSE: (time, tokens).
async fn sse_one(c: &reqwest::Client, s: &Server, key: &str, seed: u64) -> (Duration, u64) {
    let start = Instant::now();
    let mut r = c
        .post(s.url("/v1/completions"))
        .bearer_auth(key)
        .json(
            &json!({"model": "textgen", "prompt": PROMPT, "max_tokens": MAX_TOKENS,
                      "temperature": 1.0, "seed": seed, "stream": true,
                      "stream_options": {"include_usage": true}}),
        )
        .send()
        .await
        .expect("send");
    let mut text = String::new();
    while let Some(chunk) = r.chunk().await.expect("chunk") {
        text.push_str(std::str::from_utf8(&chunk).expect("utf8"));
    }
    let elapsed = start.elapsed();
    let tokens = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .find_map(|v| v["usage"]["completion_tokens"].as_u64())
        .expect("a usage chunk");
    (elapsed, tokens)
}

/// One seeded generation answered whole (not streamed): (time, tokens).
async fn plain_one(c: &reqwest::Client, s: &Server, key: &str, seed: u64) -> (Duration, u64) {
    let start = Instant::now();
    let r: Value = c
        .post(s.url("/v1/completions"))
        .bearer_auth(key)
        .json(
            &json!({"model": "textgen", "prompt": PROMPT, "max_tokens": MAX_TOKENS,
                      "temperature": 1.0, "seed": seed}),
        )
        .send()
        .await
        .expect("send")
        .json()
        .await
        .expect("json");
    let tokens = r["usage"]["completion_tokens"].as_u64().expect("usage");
    (start.elapsed(), tokens)
}

/// One seeded generation streamed over a WebSocket: (time, tokens).
async fn ws_one(ws: &mut Ws, seed: u64) -> (Duration, u64) {
    let start = Instant::now();
    ws.send(Message::text(
        json!({"id": seed, "model": "textgen", "generate": {"prompt": PROMPT,
               "max_tokens": MAX_TOKENS, "temperature": 1.0, "seed": seed}})
        .to_string(),
    ))
    .await
    .expect("send");
    loop {
        let f = ws_json(ws).await;
        if f["done"] == true {
            return (
                start.elapsed(),
                f["usage"]["completion_tokens"].as_u64().expect("usage"),
            );
        }
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let tmp = tempfile::tempdir().expect("tmp");
    let tiny = tiny_model(tmp.path());
    harness::register(tmp.path(), "tiny", &tiny);
    harness::register(tmp.path(), "textgen", &model("textgen.onnx"));
    let s = Server::start_in(
        tmp.path(),
        Options {
            extra_args: vec![
                "--openai-vocab".into(),
                model("textgen-vocab.json").display().to_string(),
            ],
            ..Options::default()
        },
    );
    let key = s.key("infer");
    let url = s.url("/v2/models/tiny/infer");
    let h1 = client(&s, false);
    let h2 = client(&s, true);
    // Warm-up: loads the model and opens the connections.
    http_rate(&h1, &url, &key, 1).await;

    println!(
        "Small inference (16 floats in and out, JSON) on one TLS connection, {CASE:?} per case:\n"
    );
    println!("| protocol | concurrency | requests/s | ratio |");
    println!("| --- | --- | --- | --- |");
    let h1_1 = http_rate(&h1, &url, &key, 1).await;
    let h2_1 = http_rate(&h2, &url, &key, 1).await;
    let ws_1 = ws_rate(&s, &key, 1).await;
    println!("| HTTP/1.1 keep-alive | 1 | {h1_1:.0} | 1.00 |");
    println!("| HTTP/2 | 1 | {h2_1:.0} | {:.2} |", h2_1 / h1_1);
    println!("| WebSocket | 1 | {ws_1:.0} | {:.2} |", ws_1 / h1_1);
    let h2_8 = http_rate(&h2, &url, &key, 8).await;
    let ws_8 = ws_rate(&s, &key, 8).await;
    let many = reqwest::Client::builder()
        .use_rustls_tls()
        .add_root_certificate(
            reqwest::Certificate::from_pem(
                &std::fs::read(s.data.join("tls/cert.pem")).expect("cert"),
            )
            .expect("pem"),
        )
        .http1_only()
        .build()
        .expect("client");
    let h1_8 = http_rate(&many, &url, &key, 8).await;
    println!("| HTTP/2 | 8 | {h2_8:.0} | 1.00 |");
    println!("| WebSocket | 8 | {ws_8:.0} | {:.2} |", ws_8 / h2_8);
    println!(
        "| HTTP/1.1 (8 connections, reference) | 8 | {h1_8:.0} | {:.2} |",
        h1_8 / h2_8
    );

    let data = tempfile::tempdir().expect("tmp");
    let state = in_process_state(data.path()).await;
    let c = client(&s, false);
    let mut ws = ws_connect(&s, &key).await;
    // Warm-up of every path (model loads). Then rounds: in each, every path runs the same
    // BLOCK seeded generations back to back, in an order that rotates from round to round.
    // Blocks, not single generations, because a path that has just waited for the others
    // starts with cold caches (the in-process loop and the server hold separate copies of the
    // model), which is not what a server streaming steadily sees; rotation and many rounds
    // because these VMs are noisy (the same loop varies by ±20% from minute to minute).
    in_process_one(&state, 1000).await;
    sse_one(&c, &s, &key, 1000).await;
    ws_one(&mut ws, 1000).await;
    plain_one(&c, &s, &key, 1000).await;
    const PATHS: usize = 4;
    const BLOCK: u64 = 8;
    let mut times = [Duration::ZERO; PATHS];
    // Per round and path: in-process time / path time (same seeds, same tokens).
    let mut ratios: [Vec<f64>; PATHS] = Default::default();
    let mut local_tokens = 0;
    let mut seeds = 0;
    let mut round = 0usize;
    while local_tokens < TOKENS {
        let mut runs = [(Duration::ZERO, 0u64); PATHS];
        for k in 0..PATHS {
            let path = (k + round) % PATHS;
            for seed in seeds..seeds + BLOCK {
                let (t, n) = match path {
                    0 => in_process_one(&state, seed).await,
                    1 => sse_one(&c, &s, &key, seed).await,
                    2 => ws_one(&mut ws, seed).await,
                    _ => plain_one(&c, &s, &key, seed).await,
                };
                runs[path].0 += t;
                runs[path].1 += n;
            }
        }
        assert!(
            runs.iter().all(|r| r.1 == runs[0].1),
            "same seeds, same generations: {runs:?}"
        );
        for p in 0..PATHS {
            times[p] += runs[p].0;
            ratios[p].push(runs[0].0.as_secs_f64() / runs[p].0.as_secs_f64());
        }
        local_tokens += runs[0].1;
        seeds += BLOCK;
        round += 1;
    }
    let rates = times.map(|t| local_tokens as f64 / t.as_secs_f64());
    let medians = ratios.map(|mut r| {
        r.sort_by(f64::total_cmp);
        r[r.len() / 2]
    });
    println!("\nText generation (textgen, {seeds} seeded generations, {local_tokens} tokens):\n");
    println!("| path | tokens/s | ratio of totals | median ratio per round |");
    println!("| --- | --- | --- | --- |");
    let names = [
        "in-process (same loop, no transport)",
        "SSE (`/v1/completions`, stream)",
        "WebSocket (`/v2/stream`, generate)",
        "`/v1/completions` not streamed (reference)",
    ];
    for p in 0..PATHS {
        println!(
            "| {} | {:.0} | {:.3} | {:.3} |",
            names[p],
            rates[p],
            rates[p] / rates[0],
            medians[p]
        );
    }
}
