//! Request ids and CORS against the real server.

use crate::harness::{Options, Server, BIN};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_response_carries_a_request_id() {
    let s = Server::with_models(&[]);
    let mut seen = std::collections::HashSet::new();
    // Success, 401, 404 and a route without a key all carry a fresh id.
    for (path, key) in [
        ("/api/whoami", Some(s.admin_key.as_str())),
        ("/api/whoami", None),
        ("/nowhere", Some(s.admin_key.as_str())),
        ("/v2/health/live", None),
    ] {
        let mut req = s.client.get(s.url(path));
        if let Some(k) = key {
            req = req.bearer_auth(k);
        }
        let r = req.send().await.unwrap();
        let id = r.headers()["x-request-id"].to_str().unwrap().to_string();
        assert_eq!(id.len(), 32, "{path}: {id}");
        assert!(id.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
        assert!(seen.insert(id), "ids are unique");
    }
    // A sane incoming id is honoured; anything else is replaced.
    let r = s
        .client
        .get(s.url("/v2/health/live"))
        .header("X-Request-Id", "trace-42.abc:7")
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["x-request-id"], "trace-42.abc:7");
    for bad in ["has space", "<script>", &"x".repeat(200)] {
        let r = s
            .client
            .get(s.url("/v2/health/live"))
            .header("X-Request-Id", bad)
            .send()
            .await
            .unwrap();
        let id = r.headers()["x-request-id"].to_str().unwrap();
        assert_ne!(id, bad);
        assert_eq!(id.len(), 32);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_id_is_in_the_json_logs() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start_in(
        tmp.path(),
        Options {
            extra_args: vec!["--log-format".into(), "json".into()],
            ..Options::default()
        },
    );
    // A request whose handler logs (a key created) logs inside the request's span.
    let r = s
        .client
        .post(s.url("/api/keys"))
        .bearer_auth(&s.admin_key)
        .header("X-Request-Id", "log-me-123")
        .json(&serde_json::json!({"name": "x", "scopes": ["infer"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let line = s
        .wait_for_log("API key created", std::time::Duration::from_secs(10))
        .expect("the handler's log line");
    let v: serde_json::Value = serde_json::from_str(&line).expect("a JSON log line");
    assert_eq!(v["span"]["request_id"], "log-me-123", "{line}");
}

async fn preflight(s: &Server, origin: &str) -> reqwest::Response {
    s.client
        .request(reqwest::Method::OPTIONS, s.url("/v2/models/x/infer"))
        .header("Origin", origin)
        .header("Access-Control-Request-Method", "POST")
        .header(
            "Access-Control-Request-Headers",
            "authorization,content-type",
        )
        .send()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cors_allows_only_configured_origins() {
    // None by default: no CORS headers at all.
    let plain = Server::with_models(&[]);
    let r = preflight(&plain, "https://app.example").await;
    assert!(r.headers().get("access-control-allow-origin").is_none());
    drop(plain);

    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start_in(
        tmp.path(),
        Options {
            extra_args: vec!["--cors-origin".into(), "https://app.example".into()],
            ..Options::default()
        },
    );
    let r = preflight(&s, "https://app.example").await;
    assert!(r.status().is_success(), "{}", r.status());
    assert_eq!(
        r.headers()["access-control-allow-origin"],
        "https://app.example"
    );
    let methods = r.headers()["access-control-allow-methods"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(methods.contains("POST"), "{methods}");
    let allowed = r.headers()["access-control-allow-headers"]
        .to_str()
        .unwrap()
        .to_ascii_lowercase();
    assert!(allowed.contains("authorization"), "{allowed}");
    assert!(r
        .headers()
        .get("access-control-allow-credentials")
        .is_none());

    // Another origin gets no permission.
    let r = preflight(&s, "https://evil.example").await;
    assert!(r.headers().get("access-control-allow-origin").is_none());

    // Actual requests (even refused ones) expose the request id to the allowed origin.
    let r = s
        .client
        .get(s.url("/api/whoami"))
        .header("Origin", "https://app.example")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(
        r.headers()["access-control-allow-origin"],
        "https://app.example"
    );
    let exposed = r.headers()["access-control-expose-headers"]
        .to_str()
        .unwrap()
        .to_ascii_lowercase();
    assert!(exposed.contains("x-request-id"), "{exposed}");
}

#[test]
fn wildcard_origin_with_credentials_is_refused_at_start() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("infergate.toml");
    std::fs::write(
        &config,
        "[cors]\nallowed_origins = [\"*\"]\nallow_credentials = true\n",
    )
    .unwrap();
    let out = std::process::Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&config)
        .arg("--data-dir")
        .arg(tmp.path().join("data"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("allow_credentials"), "{err}");
}
