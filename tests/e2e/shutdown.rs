//! SIGTERM while streamed requests are in flight: every accepted request is answered in full,
//! WebSocket streams finish and close with 1001, then the process exits 0. Requests sent on
//! idle keep-alive connections right after the signal are answered too, with
//! `Connection: close`, instead of finding their connection gone.

use crate::exhaustion::{
    closed_by_server, hostport, http1_exchange, server_with, tls_connect, tls_connector,
};
use crate::harness::{model, Options, Server};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use std::time::Duration;
use tokio_tungstenite::tungstenite::Message;

const TOKENS: u64 = 200;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_loses_no_accepted_request() {
    let tmp = tempfile::tempdir().unwrap();
    crate::harness::register(tmp.path(), "textgen", &model("textgen.onnx"));
    crate::harness::register(tmp.path(), "cls", &model("ocr-cls.onnx"));
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

    // Six streamed completions, each on its own connection, each with its first chunk read.
    let mut sse = Vec::new();
    for i in 0..6 {
        let client = crate::harness::client_for(&s.data, false);
        let mut r = client
            .post(s.url("/v1/completions"))
            .bearer_auth(&key)
            .json(
                &json!({"model": "textgen", "prompt": format!("Story {i}:"), "max_tokens": TOKENS,
                          "temperature": 0.8, "seed": i, "stream": true}),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let first = r.chunk().await.unwrap().expect("a first chunk");
        sse.push((r, first.to_vec()));
    }
    // Two WebSocket generations with a token each already received.
    let mut sockets = Vec::new();
    for i in 0..2 {
        let (mut ws, _) = crate::websocket::connect(&s, "/v2/stream", &[("x-api-key", &key)])
            .await
            .unwrap();
        ws.send(Message::text(
            json!({"id": i, "model": "textgen",
                   "generate": {"prompt": "Hi", "max_tokens": TOKENS, "seed": i}})
            .to_string(),
        ))
        .await
        .unwrap();
        assert!(crate::websocket::next_json(&mut ws)
            .await
            .get("token")
            .is_some());
        sockets.push(ws);
    }
    s.send_sigterm();

    for (mut r, first) in sse {
        let mut text = String::from_utf8(first).unwrap();
        while let Some(chunk) = r.chunk().await.expect("the stream continues") {
            text.push_str(std::str::from_utf8(&chunk).unwrap());
        }
        let events: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .collect();
        assert_eq!(events.last(), Some(&"[DONE]"), "{text}");
        let finish: Vec<Value> = events[..events.len() - 1]
            .iter()
            .map(|e| serde_json::from_str::<Value>(e).unwrap())
            .filter(|v| !v["choices"][0]["finish_reason"].is_null())
            .collect();
        assert_eq!(finish.len(), 1, "one final chunk: {text}");
    }
    for mut ws in sockets {
        let mut done = None;
        loop {
            match ws.next().await {
                Some(Ok(Message::Text(t))) => {
                    let v: Value = serde_json::from_str(t.as_str()).unwrap();
                    if v["done"] == true {
                        done = Some(v);
                    }
                }
                Some(Ok(Message::Close(Some(frame)))) => {
                    assert_eq!(u16::from(frame.code), 1001);
                    break;
                }
                Some(Ok(_)) => {}
                other => panic!("the stream ended without a close frame: {other:?}"),
            }
        }
        let done = done.expect("the generation finished before the close");
        assert!(done["usage"]["completion_tokens"].as_u64().unwrap() <= TOKENS);
    }
    let status = s.wait();
    assert!(status.success(), "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_on_idle_keepalive_connections_after_sigterm_are_answered() {
    let (_tmp, s) = server_with("[limits]\nshutdown_keepalive_s = 5\n");
    let key = s.key("infer");
    let request =
        format!("GET /api/whoami HTTP/1.1\r\nhost: localhost\r\nx-api-key: {key}\r\n\r\n");
    let connector = tls_connector(&s, b"http/1.1");
    let mut idle = Vec::new();
    for _ in 0..8 {
        let mut tls = tls_connect(&connector, &hostport(&s.addr)).await.unwrap();
        let (status, _) = http1_exchange(&mut tls, &request).await;
        assert_eq!(status, 200);
        idle.push(tls);
    }
    s.send_sigterm();
    assert!(s
        .wait_for_log("shutting down", Duration::from_secs(30))
        .is_some());
    for mut tls in idle {
        let (status, answer) = http1_exchange(&mut tls, &request).await;
        assert_eq!(status, 200, "{answer}");
        assert!(answer.contains("connection: close"), "{answer}");
        assert!(closed_by_server(tls, Duration::from_secs(30)).await);
    }
    let status = s.wait();
    assert!(status.success(), "{status:?}");
}
