//! Per-key rate limits and concurrency caps against the real server.

use crate::harness::{client_for, Options, Server, BIN};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn public_id(secret: &str) -> &str {
    secret.split('_').nth(1).unwrap()
}

async fn usage(s: &Server, id: &str) -> Value {
    let r = s
        .client
        .get(s.url(&format!("/api/keys/{id}/usage")))
        .bearer_auth(&s.admin_key)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rate_limit_is_exact_under_32_concurrent_clients() {
    const RPS: f64 = 5.0;
    const BURST: f64 = 10.0;
    const WINDOW: Duration = Duration::from_secs(3);
    let s = Server::with_models(&[]);
    let key = s.key_with("infer", &["--rps", "5", "--burst", "10"]);
    let url = s.url("/api/whoami");

    // 32 clients, each with its own connection, warmed up on a route that needs no key so
    // the handshakes happen before the window opens.
    let mut clients = Vec::new();
    for _ in 0..32 {
        let c = client_for(&s.data, false);
        assert_eq!(
            c.get(s.url("/v2/health/live"))
                .send()
                .await
                .unwrap()
                .status(),
            200
        );
        clients.push(c);
    }
    let ok = Arc::new(AtomicU64::new(0));
    let limited = Arc::new(AtomicU64::new(0));
    let barrier = Arc::new(tokio::sync::Barrier::new(clients.len() + 1));
    let mut tasks = Vec::new();
    for c in clients {
        let (ok, limited, barrier, url, key) = (
            ok.clone(),
            limited.clone(),
            barrier.clone(),
            url.clone(),
            key.clone(),
        );
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let start = Instant::now();
            let mut last = start;
            // How long the first and the last request took: the server decided on them
            // somewhere inside those round trips, not at the client's clock readings.
            let (mut first_rtt, mut last_rtt) = (None::<Duration>, Duration::ZERO);
            while start.elapsed() < WINDOW {
                let sent = Instant::now();
                let r = c.get(&url).bearer_auth(&key).send().await.unwrap();
                last_rtt = sent.elapsed();
                first_rtt.get_or_insert(last_rtt);
                match r.status().as_u16() {
                    200 => {
                        let policy = r.headers()["ratelimit-policy"].to_str().unwrap();
                        assert_eq!(policy, "\"default\";q=10;w=2");
                        assert!(r.headers()["ratelimit"]
                            .to_str()
                            .unwrap()
                            .starts_with("\"default\";r="));
                        ok.fetch_add(1, Ordering::Relaxed);
                    }
                    429 => {
                        let retry: u64 = r.headers()["retry-after"]
                            .to_str()
                            .unwrap()
                            .parse()
                            .unwrap();
                        assert!(retry >= 1);
                        assert!(r.headers()["ratelimit"]
                            .to_str()
                            .unwrap()
                            .starts_with("\"default\";r=0;t="));
                        let body: Value = r.json().await.unwrap();
                        assert!(body["error"].as_str().unwrap().contains("rate limit"));
                        limited.fetch_add(1, Ordering::Relaxed);
                    }
                    other => panic!("unexpected status {other}"),
                }
                last = Instant::now();
            }
            (start, last, first_rtt.unwrap_or_default() + last_rtt)
        }));
    }
    barrier.wait().await;
    let mut first = None::<Instant>;
    let mut end = None::<Instant>;
    let mut edges = Duration::ZERO;
    for t in tasks {
        let (start, last, rtts) = t.await.unwrap();
        first = Some(first.map_or(start, |f| f.min(start)));
        end = Some(end.map_or(last, |e| e.max(last)));
        edges = edges.max(rtts);
    }
    let elapsed = (end.unwrap() - first.unwrap()).as_secs_f64();
    let ok = ok.load(Ordering::Relaxed);
    let limited = limited.load(Ordering::Relaxed);
    // The clients' window holds the server's: the most the server can have allowed is the
    // burst plus the rate over the clients' window; the least, over that window less the
    // round trips at its two ends (long on a loaded machine), where the decisions fell.
    let most = BURST + RPS * elapsed;
    let least = BURST + RPS * (elapsed - edges.as_secs_f64()).max(0.0);
    eprintln!(
        "{ok} allowed, {limited} refused in {elapsed:.3} s (expected {least:.2}..={most:.2})"
    );
    assert!(
        ok as f64 <= most + 1.0 && ok as f64 >= least - 1.0,
        "{ok} requests allowed in {elapsed:.3} s; expected {least:.2} - 1 ..= {most:.2} + 1 \
         ({limited} refused; first + last round trip {edges:?})"
    );
    assert!(limited > 100, "the clients must have pushed past the limit");

    // The admin view counts exactly what the clients saw.
    let u = usage(&s, public_id(&key)).await;
    assert_eq!(u["limits"]["rate_limit"], json!({"rps": 5.0, "burst": 10}));
    assert_eq!(u["limits"]["rate_limit_source"], "key");
    assert_eq!(u["usage"]["allowed_total"], ok);
    assert_eq!(u["usage"]["rejected_rate_total"], limited);
    assert_eq!(u["usage"]["in_flight"], 0);
}

/// Holds one request of `key` in flight: an upload whose body never ends until the returned
/// sender is dropped.
async fn hold_request(
    s: &Server,
    key: &str,
) -> (
    tokio::sync::mpsc::Sender<Result<Vec<u8>, std::io::Error>>,
    tokio::task::JoinHandle<u16>,
) {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Vec<u8>, std::io::Error>>(1);
    let body = reqwest::Body::wrap_stream(tokio_stream_from(rx));
    let request = s
        .client
        .post(s.url("/api/models/held/versions"))
        .bearer_auth(key)
        .body(body);
    let task = tokio::spawn(async move {
        request
            .send()
            .await
            .map(|r| r.status().as_u16())
            .unwrap_or(0)
    });
    // The first chunk arriving means the server admitted the request and is reading it.
    tx.send(Ok(b"not an onnx file".to_vec())).await.unwrap();
    (tx, task)
}

fn tokio_stream_from<T: Send + 'static>(
    rx: tokio::sync::mpsc::Receiver<T>,
) -> impl futures_util::Stream<Item = T> {
    futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|v| (v, rx)) })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_cap_defaults_and_admin_changes() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start_in(
        tmp.path(),
        Options {
            extra_args: vec!["--default-max-concurrent".into(), "1".into()],
            ..Options::default()
        },
    );
    let key = s.key_with("infer,upload", &[]);
    let id = public_id(&key).to_string();

    // The server default applies: one request at a time.
    let (tx, held) = hold_request(&s, &key).await;
    let mut u = usage(&s, &id).await;
    for _ in 0..100 {
        if u["usage"]["in_flight"] == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        u = usage(&s, &id).await;
    }
    assert_eq!(u["usage"]["in_flight"], 1);
    assert_eq!(u["limits"]["max_concurrent"], 1);
    assert_eq!(u["limits"]["max_concurrent_source"], "default");
    assert_eq!(u["limits"]["rate_limit_source"], "unlimited");
    let refused = s
        .client
        .get(s.url("/api/whoami"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 429);
    assert_eq!(refused.headers()["retry-after"], "1");
    let body: Value = refused.json().await.unwrap();
    assert!(
        body["error"].as_str().unwrap().contains("concurrent"),
        "{body}"
    );

    // An admin raises this key's own cap: the next request passes while the first still runs.
    let patched = s
        .client
        .patch(s.url(&format!("/api/keys/{id}")))
        .bearer_auth(&s.admin_key)
        .json(&json!({"max_concurrent": 2, "rate_limit": {"rps": 100, "burst": 50}}))
        .send()
        .await
        .unwrap();
    assert_eq!(patched.status(), 200);
    let patched: Value = patched.json().await.unwrap();
    assert_eq!(patched["key"]["max_concurrent"], 2);
    assert_eq!(
        s.client
            .get(s.url("/api/whoami"))
            .bearer_auth(&key)
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let u = usage(&s, &id).await;
    assert_eq!(u["limits"]["max_concurrent_source"], "key");
    assert_eq!(u["usage"]["rejected_concurrency_total"], 1);

    // Ending the held upload frees its slot (the upload itself fails: not a model).
    drop(tx);
    let status = held.await.unwrap();
    assert_eq!(status, 400);
    assert_eq!(usage(&s, &id).await["usage"]["in_flight"], 0);

    // Bad limits are refused with the reason; unknown keys are 404.
    for bad in [
        json!({"max_concurrent": 0}),
        json!({"rate_limit": {"rps": -1}}),
        json!({"scopes": ["admin"]}),
    ] {
        let r = s
            .client
            .patch(s.url(&format!("/api/keys/{id}")))
            .bearer_auth(&s.admin_key)
            .json(&bad)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{bad}");
    }
    let r = s
        .client
        .patch(s.url("/api/keys/999999"))
        .bearer_auth(&s.admin_key)
        .json(&json!({"max_concurrent": 3}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    // Only admins see or change limits.
    let r = s
        .client
        .get(s.url(&format!("/api/keys/{id}/usage")))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);

    // Keys created through the API carry their limits; `--clear` from the CLI drops them.
    let created: Value = s
        .client
        .post(s.url("/api/keys"))
        .bearer_auth(&s.admin_key)
        .json(&json!({"name": "lim", "scopes": ["infer"], "rate_limit": {"rps": 2.5}, "max_concurrent": 4}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(created["rate_limit"], json!({"rps": 2.5, "burst": 3}));
    assert_eq!(created["max_concurrent"], 4);
    let out = std::process::Command::new(BIN)
        .args(["keys", "limits", "--clear", "--data-dir"])
        .arg(&s.data)
        .arg(created["public_id"].as_str().unwrap())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let u = usage(&s, created["public_id"].as_str().unwrap()).await;
    assert_eq!(
        u["limits"]["max_concurrent"], 1,
        "back to the server default"
    );
    assert_eq!(u["limits"]["rate_limit"], Value::Null);
}
