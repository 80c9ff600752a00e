//! A model's traffic policy set on one PostgreSQL replica applies on the other (the store's
//! notifications), and goes with it when removed.

use crate::harness::{model, register_with_env};
use crate::replicas::{cls_body, replica_with};
use crate::test_postgres::PgServer;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

async fn served(s: &crate::harness::Server, key: &str) -> String {
    let r = s.post_json("/v2/models/cls/infer", key, &cls_body()).await;
    let status = r.status();
    let body: Value = r.json().await.unwrap_or(Value::Null);
    assert_eq!(status, 200, "{body}");
    body["model_version"].as_str().unwrap().to_owned()
}

/// Asks `s` until it serves `want` (bounded: the change travels by NOTIFY).
async fn until_served(s: &crate::harness::Server, key: &str, want: &str) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while served(s, key).await != want {
        assert!(
            Instant::now() < deadline,
            "still not version {want} after 15 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_set_on_one_replica_applies_on_the_other() {
    let pg = PgServer::start();
    let tmp = tempfile::tempdir().unwrap();
    let env = [("INFERGATE_STORE", pg.url())];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    for _ in 0..2 {
        register_with_env(tmp.path(), "cls", &model("ocr-cls.onnx"), &env);
    }
    let a = replica_with(tmp.path(), &pg, vec![]);
    let b = replica_with(tmp.path(), &pg, vec![]);
    let created: Value = a
        .post_json(
            "/api/keys",
            &a.admin_key,
            &json!({"name": "traffic", "scopes": ["infer"]}),
        )
        .await
        .json()
        .await
        .unwrap();
    let key = created["secret"].as_str().unwrap().to_owned();
    // A key created on A reaches B by the store's notification, a moment later.
    assert!(
        crate::replicas::until_status(&b, &key, 200).await.is_some(),
        "B never knew the key created on A"
    );
    assert_eq!(served(&b, &key).await, "2", "newest without a policy");
    let set = a
        .client
        .put(a.url("/api/models/cls/traffic"))
        .bearer_auth(&a.admin_key)
        .json(&json!({"split": [{"version": 1, "weight": 1}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(set.status(), 200);
    until_served(&b, &key, "1").await;
    for _ in 0..10 {
        assert_eq!(served(&b, &key).await, "1");
    }
    let gone = b
        .client
        .delete(b.url("/api/models/cls/traffic"))
        .bearer_auth(&b.admin_key)
        .send()
        .await
        .unwrap();
    assert_eq!(gone.status(), 200);
    until_served(&a, &key, "2").await;
}
