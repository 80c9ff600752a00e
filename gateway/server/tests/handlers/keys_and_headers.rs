//! What the front door does before any handler, in process: keys missing, unknown or without
//! the scope are refused with the right status and a JSON reason; every answer carries a
//! request id; CORS answers only the configured origins.

use axum::body::Body;
use http::{Method, Request};
use serde_json::json;
use crate::support::{App, Reply};

async fn get_with(app: &App, path: &str, headers: &[(&str, &str)]) -> Reply {
    let mut request = Request::builder().method(Method::GET).uri(path);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    app.call(request.body(Body::empty()).expect("request"))
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_unknown_and_wrong_scope_keys_are_refused() {
    let app = App::start().await;
    let path = "/v2/models/tiny";

    let reply = app.get(path, None).await;
    assert_eq!(reply.status, 401);
    assert!(
        reply.error().contains("missing API key"),
        "{}",
        reply.error()
    );

    let reply = app.get(path, Some("ig_0123456789ab_nope")).await;
    assert_eq!(reply.status, 401);
    assert!(reply.error().contains("invalid"), "{}", reply.error());

    // A valid key without the scope: 403, both for upload and admin routes.
    let upload = Request::builder()
        .method(Method::POST)
        .uri("/api/models/x/versions")
        .header("X-API-Key", &app.infer)
        .body(Body::from(vec![1u8, 2, 3]))
        .expect("request");
    let reply = app.call(upload).await;
    assert_eq!(reply.status, 403);
    assert!(reply.error().contains("'upload'"), "{}", reply.error());
    let reply = app.get("/api/keys", Some(&app.infer)).await;
    assert_eq!(reply.status, 403);
    assert!(!reply.error().is_empty());

    // The same key is fine where its scope allows, through either header.
    assert_eq!(app.get(path, Some(&app.infer)).await.status, 200);
    let reply = get_with(&app, path, &[("X-API-Key", &app.infer)]).await;
    assert_eq!(reply.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_created_and_revoked_through_the_admin_api_apply_at_once() {
    let app = App::start().await;
    let path = "/v2/models/tiny";
    let created = app
        .post(
            "/api/keys",
            Some(&app.admin),
            json!({"name": "app", "scopes": ["infer"]}),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.json());
    let created = created.json();
    let secret = created["secret"].as_str().expect("the secret").to_owned();
    assert_eq!(app.get(path, Some(&secret)).await.status, 200);
    let listed = app.get("/api/keys", Some(&app.admin)).await;
    assert!(
        !String::from_utf8_lossy(&listed.body).contains(&secret),
        "secrets are never listed"
    );
    let id = created["id"].as_i64().expect("an id");
    let revoked = app
        .send(
            Method::DELETE,
            &format!("/api/keys/{id}"),
            Some(&app.admin),
            None,
        )
        .await;
    assert_eq!(revoked.status, 200);
    assert_eq!(app.get(path, Some(&secret)).await.status, 401);
    let missing = app
        .send(Method::DELETE, "/api/keys/999999", Some(&app.admin), None)
        .await;
    assert_eq!(missing.status, 404);
    assert!(!missing.error().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_response_carries_a_request_id() {
    let app = App::start().await;
    let mut seen = std::collections::HashSet::new();
    // Success, 401, 404 and a route without a key all carry a fresh id.
    for (path, key) in [
        ("/api/whoami", Some(app.admin.as_str())),
        ("/api/whoami", None),
        ("/nowhere", Some(app.admin.as_str())),
        ("/v2/health/live", None),
    ] {
        let reply = app.get(path, key).await;
        let id = reply
            .header("x-request-id")
            .expect("a request id")
            .to_owned();
        assert_eq!(id.len(), 32, "{path}: {id}");
        assert!(id.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
        assert!(seen.insert(id), "ids are unique");
    }
    // A sane incoming id is honoured; anything else is replaced.
    let reply = get_with(
        &app,
        "/v2/health/live",
        &[("X-Request-Id", "trace-42.abc:7")],
    )
    .await;
    assert_eq!(reply.header("x-request-id"), Some("trace-42.abc:7"));
    for bad in ["has space", "<script>", &"x".repeat(200)] {
        let reply = get_with(&app, "/v2/health/live", &[("X-Request-Id", bad)]).await;
        let id = reply.header("x-request-id").expect("a request id");
        assert_ne!(id, bad);
        assert_eq!(id.len(), 32);
    }
}

async fn preflight(app: &App, origin: &str) -> Reply {
    let request = Request::builder()
        .method(Method::OPTIONS)
        .uri("/v2/models/x/infer")
        .header("Origin", origin)
        .header("Access-Control-Request-Method", "POST")
        .header(
            "Access-Control-Request-Headers",
            "authorization,content-type",
        )
        .body(Body::empty())
        .expect("request");
    app.call(request).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cors_allows_only_configured_origins() {
    // None by default: no CORS headers at all.
    let plain = App::start().await;
    let reply = preflight(&plain, "https://app.example").await;
    assert!(reply.header("access-control-allow-origin").is_none());
    drop(plain);

    let app =
        App::with_config(|c| c.cors.allowed_origins = vec!["https://app.example".into()]).await;
    let reply = preflight(&app, "https://app.example").await;
    assert!(reply.status.is_success(), "{}", reply.status);
    assert_eq!(
        reply.header("access-control-allow-origin"),
        Some("https://app.example")
    );
    let methods = reply
        .header("access-control-allow-methods")
        .expect("allowed methods");
    assert!(methods.contains("POST"), "{methods}");
    let allowed = reply
        .header("access-control-allow-headers")
        .expect("allowed headers")
        .to_ascii_lowercase();
    assert!(allowed.contains("authorization"), "{allowed}");
    assert!(reply.header("access-control-allow-credentials").is_none());

    // Another origin gets no permission.
    let reply = preflight(&app, "https://evil.example").await;
    assert!(reply.header("access-control-allow-origin").is_none());

    // Actual requests (even refused ones) expose the request id to the allowed origin.
    let reply = get_with(&app, "/api/whoami", &[("Origin", "https://app.example")]).await;
    assert_eq!(reply.status, 401);
    assert_eq!(
        reply.header("access-control-allow-origin"),
        Some("https://app.example")
    );
    let exposed = reply
        .header("access-control-expose-headers")
        .expect("exposed headers")
        .to_ascii_lowercase();
    assert!(exposed.contains("x-request-id"), "{exposed}");
}
