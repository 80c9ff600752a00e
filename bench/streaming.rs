//! Protocols and streaming, measured in one run against the real (release) binary over TLS:
//!
//! 1. Small inference (MiniLM, 8 tokens) on ONE connection: WebSocket vs HTTP/1.1 keep-alive vs
//!    HTTP/2, requests/s at concurrency 1 and 8 (HTTP/1.1 cannot multiplex: at 8 it is shown
//!    with 8 connections for reference), ratios printed.
//! 2. Tokens/s of the character generator streamed over SSE and WebSocket vs the same
//!    generation loop run in-process (same code, same seeds, no transport), ratio printed.
//!
//! Bounded: ~3 s per protocol case, ~2000 tokens per streaming case.
//! `cargo bench -p infergate --bench streaming` (needs scripts/setup.sh's models).

#[allow(dead_code)]
#[path = "../tests/e2e/harness.rs"]
mod harness;

use futures_util::{SinkExt, StreamExt};
use harness::{model, Options, Server};
use infergate::config::Config;
use infergate::state::AppState;
use infergate::store::Store;
use infergate::textgen::{Generation, Sampling};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

type Ws = tokio_tungstenite::WebSocketStream<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>;

const CASE: Duration = Duration::from_secs(3);
const GENERATIONS: u64 = 4;
const MAX_TOKENS: u64 = 500;

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

fn minilm_body() -> Value {
    let ids = [101, 7592, 2088, 2003, 1037, 3231, 1012, 102];
    let (ones, zeros) = ([1; 8], [0; 8]);
    json!({"inputs": [
        {"name": "input_ids", "shape": [1, 8], "datatype": "INT64", "data": ids},
        {"name": "attention_mask", "shape": [1, 8], "datatype": "INT64", "data": ones},
        {"name": "token_type_ids", "shape": [1, 8], "datatype": "INT64", "data": zeros}
    ]})
}

/// Requests/s of `concurrency` loops sharing `client` for CASE.
async fn http_rate(client: &reqwest::Client, url: &str, key: &str, concurrency: usize) -> f64 {
    let body = minilm_body();
    let start = Instant::now();
    let loops: Vec<_> = (0..concurrency)
        .map(|_| {
            let (client, url, key, body) =
                (client.clone(), url.to_string(), key.to_string(), body.clone());
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
    let mut body = minilm_body();
    body["model"] = json!("minilm");
    let start = Instant::now();
    let mut sent = 0u64;
    let mut done = 0u64;
    while sent < concurrency as u64 {
        body["id"] = json!(sent);
        ws.send(Message::text(body.to_string())).await.expect("send");
        sent += 1;
    }
    while done < sent {
        let answer = ws_json(&mut ws).await;
        assert!(answer.get("outputs").is_some(), "{answer}");
        done += 1;
        if start.elapsed() < CASE {
            body["id"] = json!(sent);
            ws.send(Message::text(body.to_string())).await.expect("send");
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

/// Tokens/s of the in-process generation loop: the gateway's own code without transport.
async fn in_process_rate(data: &std::path::Path) -> (f64, u64) {
    let mut config = Config::default();
    config.openai.vocab = Some(model("textgen-vocab.json"));
    let store = Arc::new(Store::open(data).expect("store"));
    let engine = Arc::new(
        infergate_engine::Engine::new(infergate::app::engine_config(&config).expect("config"))
            .expect("engine"),
    );
    infergate::registry::register_file(
        &store,
        &engine,
        "textgen",
        &model("textgen.onnx"),
        &json!({}),
    )
    .expect("register");
    let state = Arc::new(AppState::new(config, store, engine).expect("state"));
    let record = state.catalog.resolve("textgen", None).expect("record");
    let vocab = state.textgen_vocab.clone().expect("vocab");
    // Warm-up: the first call loads the model.
    let mut warm = Generation::new(
        state.clone(),
        vocab.clone(),
        record.clone(),
        "x",
        sampling(0, 1),
    )
    .expect("generation");
    warm.next().await.expect("warm-up");
    let start = Instant::now();
    let mut tokens = 0u64;
    for seed in 0..GENERATIONS {
        let mut g = Generation::new(
            state.clone(),
            vocab.clone(),
            record.clone(),
            "Once upon a time",
            sampling(seed, MAX_TOKENS),
        )
        .expect("generation");
        while let Some(step) = g.next().await.expect("step") {
            if step.finish.is_some() {
                break;
            }
        }
        tokens += g.completion_tokens as u64;
    }
    (tokens as f64 / start.elapsed().as_secs_f64(), tokens)
}

fn sampling(seed: u64, max_tokens: u64) -> Sampling {
    Sampling {
        temperature: 1.0,
        top_p: 1.0,
        seed: Some(seed),
        max_tokens: max_tokens as u32,
        stop: vec![],
    }
}

async fn sse_rate(s: &Server, key: &str) -> (f64, u64) {
    let c = client(s, false);
    let start = Instant::now();
    let mut tokens = 0u64;
    for seed in 0..GENERATIONS {
        let mut r = c
            .post(s.url("/v1/completions"))
            .bearer_auth(key)
            .json(&json!({"model": "textgen", "prompt": "Once upon a time", "max_tokens": MAX_TOKENS,
                          "temperature": 1.0, "seed": seed, "stream": true,
                          "stream_options": {"include_usage": true}}))
            .send()
            .await
            .expect("send");
        let mut text = String::new();
        while let Some(chunk) = r.chunk().await.expect("chunk") {
            text.push_str(std::str::from_utf8(&chunk).expect("utf8"));
        }
        let usage = text
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter_map(|d| serde_json::from_str::<Value>(d).ok())
            .find_map(|v| v["usage"]["completion_tokens"].as_u64())
            .expect("a usage chunk");
        tokens += usage;
    }
    (tokens as f64 / start.elapsed().as_secs_f64(), tokens)
}

async fn ws_token_rate(s: &Server, key: &str) -> (f64, u64) {
    let mut ws = ws_connect(s, key).await;
    let start = Instant::now();
    let mut tokens = 0u64;
    for seed in 0..GENERATIONS {
        ws.send(Message::text(
            json!({"id": seed, "model": "textgen", "generate": {"prompt": "Once upon a time",
                   "max_tokens": MAX_TOKENS, "temperature": 1.0, "seed": seed}})
            .to_string(),
        ))
        .await
        .expect("send");
        loop {
            let f = ws_json(&mut ws).await;
            if f["done"] == true {
                tokens += f["usage"]["completion_tokens"].as_u64().expect("usage");
                break;
            }
        }
    }
    (tokens as f64 / start.elapsed().as_secs_f64(), tokens)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let tmp = tempfile::tempdir().expect("tmp");
    harness::register(tmp.path(), "minilm", &model("minilm.onnx"));
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
    let url = s.url("/v2/models/minilm/infer");
    let h1 = client(&s, false);
    let h2 = client(&s, true);
    // Warm-up: loads the model and opens the connections.
    http_rate(&h1, &url, &key, 1).await;

    println!("Small inference (MiniLM, 8 tokens, JSON) on one TLS connection, {CASE:?} per case:\n");
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
            reqwest::Certificate::from_pem(&std::fs::read(s.data.join("tls/cert.pem")).expect("cert"))
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
    let (local, local_tokens) = in_process_rate(data.path()).await;
    // Warm the server's generator too.
    sse_rate(&s, &key).await;
    let (sse, sse_tokens) = sse_rate(&s, &key).await;
    let (ws, ws_tokens) = ws_token_rate(&s, &key).await;
    assert_eq!(
        (sse_tokens, ws_tokens),
        (local_tokens, local_tokens),
        "same seeds give the same generations"
    );
    println!("\nText generation (textgen, {GENERATIONS} seeded generations, {local_tokens} tokens):\n");
    println!("| path | tokens/s | ratio to in-process |");
    println!("| --- | --- | --- |");
    println!("| in-process (same loop, no transport) | {local:.0} | 1.00 |");
    println!("| SSE (`/v1/completions`, stream) | {sse:.0} | {:.3} |", sse / local);
    println!("| WebSocket (`/v2/stream`, generate) | {ws:.0} | {:.3} |", ws / local);
}
