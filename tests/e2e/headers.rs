//! What needs the process: request ids in its JSON logs, and a CORS configuration refused
//! at start. The headers themselves are checked in process (`gateway/server/tests/handlers/keys_and_headers.rs`).

use crate::harness::{Options, Server, BIN};

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
