//! Gateway replicas on one PostgreSQL store (`--store postgres://...`; a real server started
//! here, `crate::test_postgres`). The replicas share one data directory for the model file and
//! the admin key, as they would share a volume; keys, models and the rest live in PostgreSQL.

use crate::harness::{model, register_with_env, Options, Server};
use crate::test_postgres::PgServer;
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, Instant};

/// Registers a model in the PostgreSQL store through the offline CLI (`INFERGATE_STORE`).
fn register(data: &Path, pg: &PgServer, name: &str, file: &str) {
    register_with_env(data, name, &model(file), &[("INFERGATE_STORE", &pg.url())]);
}

fn replica(data: &Path, pg: &PgServer, resync_s: u64) -> Server {
    Server::start_in(
        data,
        Options {
            extra_args: vec![
                "--store".into(),
                pg.url(),
                "--store-resync-s".into(),
                resync_s.to_string(),
            ],
            ..Options::default()
        },
    )
}

fn cls_body() -> Value {
    json!({"inputs": [{"name": "x", "shape": [1, 3, 48, 192], "datatype": "FP32",
                       "data": vec![0.0f32; 3 * 48 * 192]}]})
}

/// Asks `s`'s admin API for a new `infer` key.
async fn create_key(s: &Server, name: &str) -> reqwest::Response {
    s.post_json(
        "/api/keys",
        &s.admin_key,
        &json!({"name": name, "scopes": ["infer"]}),
    )
    .await
}

async fn status_with(s: &Server, key: &str) -> u16 {
    s.post_json("/v2/models/cls/infer", key, &cls_body())
        .await
        .status()
        .as_u16()
}

/// Polls `s`'s `/api/whoami` (cheap: the poll's period is the measurement's resolution) with
/// `key` every 2 ms for at most 10 s until it answers `status`; returns how long that took.
async fn until_status(s: &Server, key: &str, status: u16) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        let r = s
            .client
            .get(s.url("/api/whoami"))
            .bearer_auth(key)
            .send()
            .await;
        if r.is_ok_and(|r| r.status() == status) {
            return Some(start.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_created_on_one_replica_works_on_the_other_until_revoked_there() {
    let pg = PgServer::start();
    let tmp = tempfile::tempdir().unwrap();
    register(tmp.path(), &pg, "cls", "ocr-cls.onnx");
    // A long resync: only a notification can carry the revocation quickly.
    let a = replica(tmp.path(), &pg, 60);
    let b = replica(tmp.path(), &pg, 60);

    let created: Value = create_key(&a, "shared").await.json().await.unwrap();
    let secret = created["secret"].as_str().unwrap().to_string();
    let id = created["id"].as_i64().unwrap();
    assert!(
        until_status(&b, &secret, 200).await.is_some(),
        "B never accepted a key created on A"
    );
    assert_eq!(
        status_with(&b, &secret).await,
        200,
        "B runs A's key's inference"
    );
    let revoked = a
        .client
        .delete(a.url(&format!("/api/keys/{id}")))
        .bearer_auth(&a.admin_key)
        .send()
        .await
        .unwrap();
    assert_eq!(revoked.status(), 200);
    assert_eq!(status_with(&a, &secret).await, 401, "A refuses at once");
    let took = until_status(&b, &secret, 401).await;
    assert!(
        took.is_some(),
        "B still accepts a key revoked on A after 10 s"
    );
    eprintln!(
        "revocation on A reached replica B in {:.1} ms (measured from A's answer to the DELETE)",
        took.unwrap().as_secs_f64() * 1e3
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_postgres_down_cached_keys_infer_and_writes_get_503_until_it_is_back() {
    let mut pg = PgServer::start();
    let tmp = tempfile::tempdir().unwrap();
    register(tmp.path(), &pg, "cls", "ocr-cls.onnx");
    let a = replica(tmp.path(), &pg, 1);
    let created: Value = create_key(&a, "cached").await.json().await.unwrap();
    let secret = created["secret"].as_str().unwrap().to_string();
    assert_eq!(status_with(&a, &secret).await, 200);

    pg.stop();
    for _ in 0..3 {
        assert_eq!(
            status_with(&a, &secret).await,
            200,
            "inference goes on with a cached key"
        );
    }
    let write = create_key(&a, "during").await;
    assert_eq!(write.status(), 503);
    let body: Value = write.json().await.unwrap();
    assert!(
        body["error"].as_str().unwrap().contains("unavailable"),
        "{body}"
    );

    pg.resume();
    let start = Instant::now();
    let mut recovered = None;
    while start.elapsed() < Duration::from_secs(15) {
        let r = create_key(&a, "after").await;
        if r.status() == 200 || r.status() == 201 {
            recovered = Some(r.json::<Value>().await.unwrap());
            break;
        }
        assert_eq!(r.status(), 503, "only 'unavailable' while it comes back");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let after = recovered.expect("writes did not recover within 15 s of PostgreSQL's return");
    let after = after["secret"].as_str().unwrap().to_string();
    assert_eq!(status_with(&a, &after).await, 200);
    assert_eq!(status_with(&a, &secret).await, 200);
}
