//! Anonymous access, in process: callers without a key from the granted networks get the
//! granted scopes (never admin) over HTTP and gRPC, a bad key is still a 401, the client address
//! comes from the peer or a trusted proxy only, and each address has its own rate limit while
//! the metrics count anonymous callers as one caller.

use http::StatusCode;
use infergate_kserve::proto::{ModelInferRequest, ServerMetadataRequest, ServerMetadataResponse};
use infergate_service::config::Config;
use serde_json::{json, Value};
use crate::support::App;

fn infer_only(c: &mut Config) {
    c.auth.anonymous_scopes = vec!["infer".into()];
}

fn body() -> Value {
    App::tiny_request(&[0.5; 16])
}

#[tokio::test]
async fn without_anonymous_access_a_keyless_caller_is_refused_even_on_loopback() {
    let app = App::start().await;
    let refused = app
        .post_from("127.0.0.1", "/v2/models/tiny/infer", None, body())
        .await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
    assert!(
        refused.error().contains("missing API key"),
        "{}",
        refused.error()
    );
}

#[tokio::test]
async fn loopback_callers_get_the_granted_scopes_and_nothing_more() {
    let app = App::with_config(infer_only).await;
    let answer = app
        .post_from("127.0.0.1", "/v2/models/tiny/infer", None, body())
        .await;
    assert_eq!(answer.status, StatusCode::OK, "{:?}", answer.body);
    assert_eq!(answer.json()["outputs"][0]["data"][0], json!(1.0));
    let v6 = app.get_from("[::1]", "/v2/models/tiny", None).await;
    assert_eq!(v6.status, StatusCode::OK);

    // Upload and admin need a key: a 401 that says so, not a 403.
    for path in ["/api/keys", "/api/workers"] {
        let admin = app.get_from("127.0.0.1", path, None).await;
        assert_eq!(admin.status, StatusCode::UNAUTHORIZED, "{path}");
        assert!(
            admin.error().contains("send an API key"),
            "{}",
            admin.error()
        );
    }
    let load = app
        .post_from(
            "127.0.0.1",
            "/v2/repository/models/tiny/load",
            None,
            json!({}),
        )
        .await;
    assert_eq!(load.status, StatusCode::UNAUTHORIZED);
    assert!(load.error().contains("'upload'"), "{}", load.error());
    // A route about the caller's own key.
    let whoami = app.get_from("127.0.0.1", "/api/whoami", None).await;
    assert_eq!(whoami.status, StatusCode::FORBIDDEN, "{:?}", whoami.body);

    // A bad key is a 401 even where no key would have been served.
    let forged = app
        .post_from(
            "127.0.0.1",
            "/v2/models/tiny/infer",
            Some("ig_0123456789ab_nope"),
            body(),
        )
        .await;
    assert_eq!(forged.status, StatusCode::UNAUTHORIZED);
    assert_eq!(forged.error(), "invalid or revoked API key");
    // A key is still served under its own scopes.
    let keyed = app
        .get_from("127.0.0.1", "/api/keys", Some(&app.admin))
        .await;
    assert_eq!(keyed.status, StatusCode::OK);
}

#[tokio::test]
async fn other_networks_and_unknown_peers_need_a_key() {
    let app = App::with_config(infer_only).await;
    let remote = app
        .post_from("10.0.0.5", "/v2/models/tiny/infer", None, body())
        .await;
    assert_eq!(remote.status, StatusCode::UNAUTHORIZED);
    assert!(
        remote.error().contains("not granted to 10.0.0.5"),
        "{}",
        remote.error()
    );
    // No listener marked a peer: nothing to grant.
    let unknown = app.post("/v2/models/tiny/infer", None, body()).await;
    assert_eq!(unknown.status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn only_a_trusted_proxy_names_the_client() {
    let app = App::with_config(|c| {
        infer_only(c);
        c.auth.trusted_proxies = vec!["10.0.0.0/8".into()];
    })
    .await;
    let through = |peer: &'static str, forwarded: &'static str| {
        http::Request::builder()
            .method("POST")
            .uri("/v2/models/tiny/infer")
            .header("content-type", "application/json")
            .header("x-forwarded-for", forwarded)
            .body(axum::body::Body::from(body().to_string()))
            .map(|r| (peer, r))
            .expect("request")
    };
    let (peer, request) = through("10.0.0.2", "127.0.0.1");
    assert_eq!(app.call_from(peer, request).await.status, StatusCode::OK);
    // The proxy appended the real client after what the client claimed.
    let (peer, request) = through("10.0.0.2", "127.0.0.1, 203.0.113.7");
    let refused = app.call_from(peer, request).await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
    assert!(
        refused.error().contains("203.0.113.7"),
        "{}",
        refused.error()
    );
    // Anyone else's header is their own claim.
    let (peer, request) = through("203.0.113.9", "127.0.0.1");
    assert_eq!(
        app.call_from(peer, request).await.status,
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn each_address_has_its_own_rate_limit_and_metrics_count_them_together() {
    let app = App::with_config(|c| {
        infer_only(c);
        c.auth.anonymous_networks = vec!["127.0.0.0/8".into()];
        c.limits.anonymous_rps = Some(0.01);
        c.limits.anonymous_burst = Some(1);
    })
    .await;
    let first = app
        .post_from("127.0.0.1", "/v2/models/tiny/infer", None, body())
        .await;
    assert_eq!(first.status, StatusCode::OK);
    let second = app
        .post_from("127.0.0.1", "/v2/models/tiny/infer", None, body())
        .await;
    assert_eq!(second.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(second.header("retry-after").is_some());
    let other = app
        .post_from("127.0.0.2", "/v2/models/tiny/infer", None, body())
        .await;
    assert_eq!(
        other.status,
        StatusCode::OK,
        "another address, another bucket"
    );
    // Keys keep their own limits (none here).
    for _ in 0..3 {
        let keyed = app
            .post_from(
                "127.0.0.1",
                "/v2/models/tiny/infer",
                Some(&app.infer),
                body(),
            )
            .await;
        assert_eq!(keyed.status, StatusCode::OK);
    }
    let metrics = app.get("/metrics", Some(&app.admin)).await;
    let text = String::from_utf8_lossy(&metrics.body);
    assert!(
        text.contains(
            r#"infergate_rate_limited_requests_total{key_id="anonymous",reason="rate"} 1"#
        ),
        "{text}"
    );
    let usage = app.state.metrics().keys.totals(0);
    assert_eq!((usage.admitted, usage.refused), (2, 1));
}

#[tokio::test]
async fn grpc_calls_without_metadata_are_anonymous_from_loopback() {
    let app = App::with_config(infer_only).await;
    let metadata = app
        .grpc_call(
            "ServerMetadata",
            &ServerMetadataRequest {},
            &[],
            Some("127.0.0.1"),
        )
        .await
        .decode::<ServerMetadataResponse>();
    assert_eq!(metadata.name, "infergate");
    let infer = ModelInferRequest {
        model_name: "tiny".into(),
        inputs: vec![
            infergate_kserve::proto::model_infer_request::InferInputTensor {
                name: "x".into(),
                datatype: "FP32".into(),
                shape: vec![1, 16],
                ..Default::default()
            },
        ],
        raw_input_contents: vec![[0.25f32.to_le_bytes(); 16].concat()],
        ..Default::default()
    };
    let answer = app
        .grpc_call("ModelInfer", &infer, &[], Some("127.0.0.1"))
        .await
        .decode::<infergate_kserve::proto::ModelInferResponse>();
    assert_eq!(&answer.raw_output_contents[0][..4], &0.5f32.to_le_bytes());
    let remote = app
        .grpc_call("ModelInfer", &infer, &[], Some("192.0.2.1"))
        .await;
    assert_eq!(remote.code, tonic::Code::Unauthenticated);
    assert!(remote.message.contains("not granted"), "{}", remote.message);
    let forged = app
        .grpc_call(
            "ModelInfer",
            &infer,
            &[("authorization", "Bearer ig_0123456789ab_nope")],
            Some("127.0.0.1"),
        )
        .await;
    assert_eq!(forged.code, tonic::Code::Unauthenticated);
}
