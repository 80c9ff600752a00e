//! Per-key rate limits and concurrency caps, in process: the GCRA admits exactly its burst plus
//! its rate under 32 concurrent callers, a held request counts against the cap, admins change
//! limits live, bad limits are refused, and the usage answer counts what callers saw.

use crate::support::{App, Reply};
use axum::body::Body;
use http::{Method, Request};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A key created over the admin API with `limits` beside its scopes: (public id, secret).
async fn key_with(app: &App, scopes: &[&str], limits: Value) -> (String, String) {
    let created = app.create_key(scopes, limits).await;
    (
        created["public_id"].as_str().expect("public_id").to_owned(),
        created["secret"].as_str().expect("secret").to_owned(),
    )
}

async fn usage(app: &App, id: &str) -> Value {
    let r = app
        .get(&format!("/api/keys/{id}/usage"), Some(&app.admin))
        .await;
    assert_eq!(r.status, 200, "{}", r.json());
    r.json()
}

/// One caller's requests, checked as they come: 200 with the policy's headers, or 429 with
/// `Retry-After` and the reason.
fn check(r: &Reply) -> bool {
    match r.status.as_u16() {
        200 => {
            assert_eq!(r.header("ratelimit-policy"), Some("\"default\";q=10;w=2"));
            let state = r
                .header("ratelimit")
                .expect("RateLimit on an admitted request");
            assert!(state.starts_with("\"default\";r="), "{state}");
            true
        }
        429 => {
            let retry: u64 = r
                .header("retry-after")
                .expect("Retry-After")
                .parse()
                .expect("whole seconds");
            assert!(retry >= 1);
            let state = r.header("ratelimit").expect("RateLimit on a refusal");
            assert!(state.starts_with("\"default\";r=0;t="), "{state}");
            assert!(r.error().contains("rate limit"), "{}", r.error());
            false
        }
        other => panic!("unexpected status {other}: {:?}", r.body),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rate_limit_is_exact_under_32_concurrent_callers() {
    const RPS: f64 = 5.0;
    const BURST: f64 = 10.0;
    const WINDOW: Duration = Duration::from_secs(2);
    let app = Arc::new(App::start().await);
    let (id, key) = key_with(
        &app,
        &["infer"],
        json!({"rate_limit": {"rps": 5, "burst": 10}}),
    )
    .await;

    let ok = Arc::new(AtomicU64::new(0));
    let limited = Arc::new(AtomicU64::new(0));
    let barrier = Arc::new(tokio::sync::Barrier::new(33));
    let mut tasks = Vec::new();
    for _ in 0..32 {
        let (app, ok, limited, barrier, key) = (
            app.clone(),
            ok.clone(),
            limited.clone(),
            barrier.clone(),
            key.clone(),
        );
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let start = Instant::now();
            let mut last = start;
            // How long the first and the last request took: the limiter decided on them
            // somewhere inside those calls, not at this task's clock readings.
            let (mut first_call, mut last_call) = (None::<Duration>, Duration::ZERO);
            while start.elapsed() < WINDOW {
                let sent = Instant::now();
                let r = app.get("/api/whoami", Some(&key)).await;
                last_call = sent.elapsed();
                first_call.get_or_insert(last_call);
                if check(&r) {
                    ok.fetch_add(1, Ordering::Relaxed);
                } else {
                    limited.fetch_add(1, Ordering::Relaxed);
                }
                last = Instant::now();
                // Callers that pause between requests, so the window holds some thousands of
                // requests rather than all the machine can make.
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            (start, last, first_call.unwrap_or_default() + last_call)
        }));
    }
    barrier.wait().await;
    let (mut first, mut end, mut edges) = (None::<Instant>, None::<Instant>, Duration::ZERO);
    for t in tasks {
        let (start, last, calls) = t.await.expect("a caller");
        first = Some(first.map_or(start, |f| f.min(start)));
        end = Some(end.map_or(last, |e| e.max(last)));
        edges = edges.max(calls);
    }
    let elapsed = (end.expect("calls") - first.expect("calls")).as_secs_f64();
    let (ok, limited) = (ok.load(Ordering::Relaxed), limited.load(Ordering::Relaxed));
    // The callers' window holds the limiter's: at most the burst plus the rate over that
    // window; at least, over the window less the calls at its two ends.
    let most = BURST + RPS * elapsed;
    let least = BURST + RPS * (elapsed - edges.as_secs_f64()).max(0.0);
    assert!(
        ok as f64 <= most + 1.0 && ok as f64 >= least - 1.0,
        "{ok} requests allowed in {elapsed:.3} s; expected {least:.2} - 1 ..= {most:.2} + 1 \
         ({limited} refused; first + last call {edges:?})"
    );
    assert!(limited > 100, "the callers must have pushed past the limit");

    // The admin view counts exactly what the callers saw.
    let u = usage(&app, &id).await;
    assert_eq!(u["limits"]["rate_limit"], json!({"rps": 5.0, "burst": 10}));
    assert_eq!(u["limits"]["rate_limit_source"], "key");
    assert_eq!(u["usage"]["allowed_total"], ok);
    assert_eq!(u["usage"]["rejected_rate_total"], limited);
    assert_eq!(u["usage"]["in_flight"], 0);
}

/// Holds one request of `key` in flight: an upload whose body does not end until the returned
/// sender is dropped. The task answers the upload's status.
async fn hold_request(
    app: &Arc<App>,
    key: &str,
) -> (
    tokio::sync::mpsc::Sender<Result<bytes::Bytes, std::io::Error>>,
    tokio::task::JoinHandle<u16>,
) {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<bytes::Bytes, std::io::Error>>(1);
    let stream =
        futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|v| (v, rx)) });
    let request = Request::builder()
        .method(Method::POST)
        .uri("/api/models/held/versions")
        .header(http::header::AUTHORIZATION, format!("Bearer {key}"))
        .body(Body::from_stream(stream))
        .expect("request");
    let app = app.clone();
    let task = tokio::spawn(async move { app.call(request).await.status.as_u16() });
    // The first chunk taken means the server admitted the request and is reading it.
    tx.send(Ok(bytes::Bytes::from_static(b"not an onnx file")))
        .await
        .expect("the upload reads its body");
    (tx, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_cap_defaults_and_admin_changes() {
    let app = Arc::new(
        App::with_config(|c| c.limits.default_max_concurrent = std::num::NonZeroU32::new(1)).await,
    );
    let (id, key) = key_with(&app, &["infer", "upload"], json!({})).await;

    // The server default applies: one request at a time.
    let (tx, held) = hold_request(&app, &key).await;
    let mut u = usage(&app, &id).await;
    for _ in 0..100 {
        if u["usage"]["in_flight"] == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        u = usage(&app, &id).await;
    }
    assert_eq!(u["usage"]["in_flight"], 1);
    assert_eq!(u["limits"]["max_concurrent"], 1);
    assert_eq!(u["limits"]["max_concurrent_source"], "default");
    assert_eq!(u["limits"]["rate_limit_source"], "unlimited");
    let refused = app.get("/api/whoami", Some(&key)).await;
    assert_eq!(refused.status, 429);
    assert_eq!(refused.header("retry-after"), Some("1"));
    assert!(
        refused.error().contains("concurrent"),
        "{}",
        refused.error()
    );

    // An admin raises this key's own cap: the next request passes while the first still runs.
    let limits = json!({"max_concurrent": 2, "rate_limit": {"rps": 100, "burst": 50}});
    let patched = app
        .send(
            Method::PATCH,
            &format!("/api/keys/{id}"),
            Some(&app.admin),
            Some(limits),
        )
        .await;
    assert_eq!(patched.status, 200, "{}", patched.json());
    assert_eq!(patched.json()["key"]["max_concurrent"], 2);
    assert_eq!(app.get("/api/whoami", Some(&key)).await.status, 200);
    let u = usage(&app, &id).await;
    assert_eq!(u["limits"]["max_concurrent_source"], "key");
    assert_eq!(u["usage"]["rejected_concurrency_total"], 1);

    // Ending the held upload frees its slot (the upload itself fails: not a model).
    drop(tx);
    assert_eq!(held.await.expect("the held upload"), 400);
    assert_eq!(usage(&app, &id).await["usage"]["in_flight"], 0);

    // Bad limits are refused with the reason, and nothing changes; unknown keys are 404.
    for (bad, field) in [
        (json!({"max_concurrent": 0}), "max_concurrent"),
        (json!({"rate_limit": {"rps": -1}}), "rps"),
        (json!({"scopes": ["admin"]}), "scopes"),
    ] {
        let r = app
            .send(
                Method::PATCH,
                &format!("/api/keys/{id}"),
                Some(&app.admin),
                Some(bad.clone()),
            )
            .await;
        assert_eq!(r.status, 400, "{bad}");
        assert!(r.error().contains(field), "{bad}: {}", r.error());
    }
    assert_eq!(usage(&app, &id).await["limits"]["max_concurrent"], 2);
    let r = app
        .send(
            Method::PATCH,
            "/api/keys/999999",
            Some(&app.admin),
            Some(json!({"max_concurrent": 3})),
        )
        .await;
    assert_eq!(r.status, 404);
    // Only admins see or change limits.
    let r = app.get(&format!("/api/keys/{id}/usage"), Some(&key)).await;
    assert_eq!(r.status, 403);

    // Keys created through the API carry their limits, the burst filled in from the rate.
    let created = app
        .post(
            "/api/keys",
            Some(&app.admin),
            json!({"name": "lim", "scopes": ["infer"], "rate_limit": {"rps": 2.5}, "max_concurrent": 4}),
        )
        .await
        .json();
    assert_eq!(created["rate_limit"], json!({"rps": 2.5, "burst": 3}));
    assert_eq!(created["max_concurrent"], 4);
}
