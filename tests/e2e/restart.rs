use crate::harness::{model, Options, Server};
use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_keeps_models_keys_and_the_admin_key() {
    let tmp = tempfile::tempdir().unwrap();
    let first = Server::start_in(tmp.path(), Options::default());
    let admin = first.admin_key.clone();
    let created: Value = first
        .client
        .post(first.url("/api/keys"))
        .bearer_auth(&admin)
        .json(&json!({"name": "app", "scopes": ["infer", "upload"]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let key = created["secret"].as_str().unwrap().to_string();
    let bytes = std::fs::read(model("ocr-cls.onnx")).unwrap();
    let up = first
        .client
        .post(first.url("/api/models/cls/versions"))
        .bearer_auth(&key)
        .body(bytes)
        .send()
        .await
        .unwrap();
    assert_eq!(up.status(), 201);
    first.stop();

    let second = Server::start_in(tmp.path(), Options::default());
    assert_eq!(second.admin_key, admin, "the admin key is created once");
    let meta = second
        .client
        .get(second.url("/v2/models/cls"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(meta.status(), 200);
    let body = json!({"inputs": [{"name": "x", "shape": [1, 3, 48, 100], "datatype": "FP32", "data": vec![0.0f32; 3 * 48 * 100]}]});
    let r = second
        .client
        .post(second.url("/v2/models/cls/infer"))
        .bearer_auth(&key)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}
