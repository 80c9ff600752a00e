//! A model's traffic policy, in process: `PUT/GET/DELETE /api/models/{m}/traffic` with its
//! statuses and errors, a weighted split within binomial bounds, sticky callers, versions
//! named by the request, and mirrored copies that never answer a caller.

use http::{Method, Request, StatusCode};
use serde_json::{json, Value};
use std::collections::HashMap;
use crate::support::{App, Reply};

/// Uploads `file` as the next version of `model` (raw body), answering the new version.
async fn upload(app: &App, model: &str, file: &[u8]) -> u64 {
    let request = Request::builder()
        .method(Method::POST)
        .uri(format!("/api/models/{model}/versions"))
        .header("authorization", format!("Bearer {}", app.upload))
        .header("content-type", "application/octet-stream")
        .body(axum::body::Body::from(file.to_vec()))
        .expect("request");
    let reply = app.call(request).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{:?}", reply.body);
    reply.json()["version"].as_u64().expect("a version")
}

/// A model like tiny whose input is named `z`: a request for tiny fails on it.
fn wrong_input_model() -> Vec<u8> {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("z.onnx");
    let python = std::env::var("INFERGATE_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = format!(
        "import onnx\nfrom onnx import TensorProto, helper\n\
         z = helper.make_tensor_value_info('z', TensorProto.FLOAT, [1, 16])\n\
         y = helper.make_tensor_value_info('y', TensorProto.FLOAT, [1, 16])\n\
         g = helper.make_graph([helper.make_node('Add', ['z', 'z'], ['y'])], 'z', [z], [y])\n\
         m = helper.make_model(g, opset_imports=[helper.make_opsetid('', 17)])\n\
         m.ir_version = 8\nonnx.save(m, {:?})\n",
        path.to_str().expect("utf-8 path")
    );
    let status = std::process::Command::new(python)
        .arg("-c")
        .arg(script)
        .status()
        .expect("python");
    assert!(status.success());
    std::fs::read(path).expect("model file")
}

/// tiny with versions 1..=n, all the same file.
async fn versions(n: u64) -> App {
    let app = App::start().await;
    let file = std::fs::read(crate::support::tiny_model()).expect("tiny");
    for want in 2..=n {
        assert_eq!(upload(&app, "tiny", &file).await, want);
    }
    app
}

async fn put_policy(app: &App, policy: Value) -> Reply {
    app.send(
        Method::PUT,
        "/api/models/tiny/traffic",
        Some(&app.upload),
        Some(policy),
    )
    .await
}

/// Infers once; the answering version.
async fn served(app: &App, path: &str, header: Option<(&str, &str)>) -> u64 {
    let mut request = Request::builder()
        .method(Method::POST)
        .uri(path)
        .header("authorization", format!("Bearer {}", app.infer))
        .header("content-type", "application/json");
    if let Some((name, value)) = header {
        request = request.header(name, value);
    }
    let reply = app
        .call(
            request
                .body(axum::body::Body::from(
                    App::tiny_request(&[1.0; 16]).to_string(),
                ))
                .expect("request"),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
    let answer = reply.json();
    assert_eq!(answer["outputs"][0]["data"], json!(vec![2.0; 16]));
    answer["model_version"]
        .as_str()
        .and_then(|v| v.parse().ok())
        .expect("model_version")
}

/// The value of a metric line starting with `prefix` in the exposition (0 when absent).
async fn metric(app: &App, prefix: &str) -> f64 {
    let reply = app.get("/metrics", Some(&app.admin)).await;
    let text = String::from_utf8_lossy(&reply.body).to_string();
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test]
async fn a_policy_is_set_read_and_removed_and_bad_ones_name_their_field() {
    let app = versions(2).await;
    let none = app.get("/api/models/tiny/traffic", Some(&app.infer)).await;
    assert_eq!(none.status, StatusCode::OK);
    assert_eq!(none.json(), json!({"model": "tiny", "policy": null}));

    for (policy, field) in [
        (
            json!({"split": [{"version": 1, "weight": 0}]}),
            "split[0].weight",
        ),
        (
            json!({"split": [{"version": 1, "weight": 1.5}]}),
            "split[0].weight",
        ),
        (
            json!({"split": [{"version": 7, "weight": 1}]}),
            "split[0].version",
        ),
        (
            json!({"mirror": {"version": 2, "percent": 101}}),
            "mirror.percent",
        ),
        (
            json!({"split": [{"version": 1, "weight": 1}], "sticky": "cookie"}),
            "sticky",
        ),
        (json!({"canary": 10}), "canary"),
    ] {
        let refused = put_policy(&app, policy.clone()).await;
        assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{policy}");
        assert!(
            refused.error().contains(field),
            "{policy}: {}",
            refused.error()
        );
    }
    // Nothing was stored by the refusals.
    let still = app.get("/api/models/tiny/traffic", Some(&app.infer)).await;
    assert_eq!(still.json()["policy"], Value::Null);

    // The upload scope sets it; an infer key may only read it.
    let policy = json!({"split": [{"version": 1, "weight": 3}, {"version": 2, "weight": 1}], "sticky": "header:X-User"});
    let forbidden = app
        .send(
            Method::PUT,
            "/api/models/tiny/traffic",
            Some(&app.infer),
            Some(policy.clone()),
        )
        .await;
    assert_eq!(forbidden.status, StatusCode::FORBIDDEN);
    let set = put_policy(&app, policy).await;
    assert_eq!(set.status, StatusCode::OK, "{:?}", set.body);
    assert_eq!(set.json()["policy"]["sticky"], "header:x-user");
    let read = app.get("/api/models/tiny/traffic", Some(&app.infer)).await;
    assert_eq!(read.json()["policy"]["split"][0]["weight"], 3);

    // A mirror of the only version, and unknown models, are refused.
    let unknown = app
        .send(
            Method::PUT,
            "/api/models/nope/traffic",
            Some(&app.upload),
            Some(json!({"split": [{"version": 1, "weight": 1}]})),
        )
        .await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);

    let removed = app
        .send(
            Method::DELETE,
            "/api/models/tiny/traffic",
            Some(&app.upload),
            None,
        )
        .await;
    assert_eq!(removed.status, StatusCode::OK);
    assert_eq!(removed.json()["policy"], Value::Null);
    assert_eq!(
        served(&app, "/v2/models/tiny/infer", None).await,
        2,
        "newest again"
    );
}

#[tokio::test]
async fn a_90_10_split_lands_within_binomial_bounds_and_a_named_version_bypasses_it() {
    let app = versions(2).await;
    let set = put_policy(
        &app,
        json!({"split": [{"version": 1, "weight": 90}, {"version": 2, "weight": 10}]}),
    )
    .await;
    assert_eq!(set.status, StatusCode::OK, "{:?}", set.body);
    let n = 400u64;
    let mut counts: HashMap<u64, u64> = HashMap::new();
    for _ in 0..n {
        *counts
            .entry(served(&app, "/v2/models/tiny/infer", None).await)
            .or_default() += 1;
    }
    // Version 2 is drawn with p = 0.1: its count is Binomial(400, 0.1), mean 40, sd 6. Five
    // standard deviations either side (a false failure about once in 1.7 million runs).
    let (p, v2) = (0.1, counts.get(&2).copied().unwrap_or(0));
    let sd = (n as f64 * p * (1.0 - p)).sqrt();
    assert!(
        (v2 as f64 - n as f64 * p).abs() <= 5.0 * sd,
        "version 2 served {v2} of {n}: {counts:?}"
    );
    assert_eq!(counts.values().sum::<u64>(), n);
    assert_eq!(
        metric(
            &app,
            "infergate_split_requests_total{model=\"tiny\",version=\"2\"}"
        )
        .await,
        v2 as f64
    );
    // A request naming a version is served by it, whatever the split.
    for _ in 0..20 {
        assert_eq!(
            served(&app, "/v2/models/tiny/versions/2/infer", None).await,
            2
        );
    }
}

#[tokio::test]
async fn sticky_callers_never_switch() {
    let app = versions(2).await;
    let set = put_policy(
        &app,
        json!({"split": [{"version": 1, "weight": 1}, {"version": 2, "weight": 1}], "sticky": "header:x-user"}),
    )
    .await;
    assert_eq!(set.status, StatusCode::OK);
    let mut seen = std::collections::HashSet::new();
    for user in 0..16 {
        let user = format!("user-{user}");
        let first = served(&app, "/v2/models/tiny/infer", Some(("x-user", &user))).await;
        seen.insert(first);
        for _ in 0..5 {
            assert_eq!(
                served(&app, "/v2/models/tiny/infer", Some(("x-user", &user))).await,
                first,
                "{user} switched versions"
            );
        }
    }
    // 16 users over two equal halves: both versions serve someone (all on one side is a
    // 2^-15 event, and the hash is fixed, so this never flakes).
    assert_eq!(seen.len(), 2);
    // The key's own id is sticky too.
    let set = put_policy(
        &app,
        json!({"split": [{"version": 1, "weight": 1}, {"version": 2, "weight": 1}], "sticky": "key"}),
    )
    .await;
    assert_eq!(set.status, StatusCode::OK);
    let first = served(&app, "/v2/models/tiny/infer", None).await;
    for _ in 0..10 {
        assert_eq!(served(&app, "/v2/models/tiny/infer", None).await, first);
    }
}

/// Polls `metric` until it reaches `want` (mirrored copies run in the background), bounded.
async fn wait_for(app: &App, prefix: &str, want: f64) -> f64 {
    let mut last = 0.0;
    for _ in 0..200 {
        last = metric(app, prefix).await;
        if last >= want {
            return last;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    last
}

#[tokio::test]
async fn a_mirror_runs_copies_whose_answers_never_reach_callers_and_a_failing_one_changes_nothing()
{
    let app = versions(2).await;
    let set = put_policy(
        &app,
        json!({"split": [{"version": 1, "weight": 1}], "mirror": {"version": 2, "percent": 100}}),
    )
    .await;
    assert_eq!(set.status, StatusCode::OK, "{:?}", set.body);
    let n = 20;
    for _ in 0..n {
        assert_eq!(served(&app, "/v2/models/tiny/infer", None).await, 1);
    }
    // Every copy either ran on version 2 or was shed: none is lost, none answered a caller.
    let ok = "infergate_mirror_requests_total{model=\"tiny\",version=\"2\",outcome=\"ok\"}";
    let shed = "infergate_mirror_requests_total{model=\"tiny\",version=\"2\",outcome=\"shed\"}";
    let mut total = 0.0;
    for _ in 0..200 {
        total = metric(&app, ok).await + metric(&app, shed).await;
        if total >= n as f64 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert_eq!(total, n as f64);
    assert!(metric(&app, ok).await > 0.0, "no copy ran");
    let stats = app
        .get("/v2/models/tiny/versions/2/stats", Some(&app.infer))
        .await;
    assert!(
        stats.json()["model_stats"][0]["inference_count"].as_u64() > Some(0),
        "the mirror's statistics did not grow: {}",
        stats.json()
    );

    // A version that fails every copy: callers still get version 1's answers.
    let broken = upload(&app, "tiny", &wrong_input_model()).await;
    let set = put_policy(
        &app,
        json!({"split": [{"version": 1, "weight": 1}], "mirror": {"version": broken, "percent": 100}}),
    )
    .await;
    assert_eq!(set.status, StatusCode::OK, "{:?}", set.body);
    for _ in 0..5 {
        assert_eq!(served(&app, "/v2/models/tiny/infer", None).await, 1);
    }
    let errors = format!(
        "infergate_mirror_requests_total{{model=\"tiny\",version=\"{broken}\",outcome=\"error\"}}"
    );
    assert!(
        wait_for(&app, &errors, 1.0).await >= 1.0,
        "the failing copies were not counted"
    );
}

#[tokio::test]
async fn the_policy_goes_with_the_model_and_survives_a_new_version() {
    let app = versions(2).await;
    let set = put_policy(&app, json!({"split": [{"version": 1, "weight": 1}]})).await;
    assert_eq!(set.status, StatusCode::OK);
    // A new upload: the policy still sends everything to version 1.
    let file = std::fs::read(crate::support::tiny_model()).expect("tiny");
    assert_eq!(upload(&app, "tiny", &file).await, 3);
    assert_eq!(served(&app, "/v2/models/tiny/infer", None).await, 1);
    // Deleting the model deletes the policy: a model of the same name starts without one.
    let deleted = app
        .send(Method::DELETE, "/api/models/tiny", Some(&app.upload), None)
        .await;
    assert_eq!(deleted.status, StatusCode::OK, "{:?}", deleted.body);
    assert_eq!(upload(&app, "tiny", &file).await, 1);
    let read = app.get("/api/models/tiny/traffic", Some(&app.infer)).await;
    assert_eq!(read.json()["policy"], Value::Null);
    let stored = app.state.store().model_settings("tiny").expect("store");
    assert!(stored.is_empty(), "{stored:?}");
}
