//! Model uploads over the admin API, in process: a valid model is stored once by content
//! (raw body or multipart with a configuration), serves, and goes when deleted; garbage, empty
//! and oversized uploads are refused with the reason and leave nothing in the data directory.

use axum::body::Body;
use bytes::Bytes;
use http::{Method, Request};
use serde_json::json;
use crate::support::{App, Reply};

fn models_file(name: &str) -> Vec<u8> {
    std::fs::read(crate::support::model_file(name)).expect("a model setup.sh fetched")
}

/// Files under the data directory's `models/` (content-addressed blobs) and `tmp/` (uploads
/// in progress).
fn stored_files(app: &App) -> (usize, usize) {
    let data = &app.state.config().data_dir;
    let count = |d: &str| {
        std::fs::read_dir(data.join(d))
            .map(|r| r.count())
            .unwrap_or(0)
    };
    (count("models"), count("tmp"))
}

async fn upload(app: &App, path: &str, key: &str, body: Body, content_type: Option<&str>) -> Reply {
    let mut request = Request::builder()
        .method(Method::POST)
        .uri(path)
        .header(http::header::AUTHORIZATION, format!("Bearer {key}"));
    if let Some(content_type) = content_type {
        request = request.header(http::header::CONTENT_TYPE, content_type);
    }
    app.call(request.body(body).expect("request")).await
}

async fn model_names(app: &App) -> Vec<String> {
    let list = app.get("/api/models", Some(&app.admin)).await.json();
    list["models"]
        .as_array()
        .expect("models")
        .iter()
        .map(|m| m["name"].as_str().expect("a name").to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upload_valid_model_then_infer_and_delete() {
    let app = App::start().await;
    let key = app.key("upload,infer");
    let bytes = models_file("ocr-cls.onnx");
    // The test support's tiny model is already stored.
    let (before, _) = stored_files(&app);

    let reply = upload(
        &app,
        "/api/models/cls/versions",
        &key,
        Body::from(bytes.clone()),
        None,
    )
    .await;
    assert_eq!(reply.status, 201, "{}", reply.json());
    let created = reply.json();
    assert_eq!(created["version"], 1);
    assert_eq!(created["inputs"][0]["name"], "x");
    assert_eq!(created["inputs"][0]["datatype"], "FP32");
    assert_eq!(created["outputs"][0]["shape"][1], 2);
    assert_eq!(stored_files(&app), (before + 1, 0));

    // Multipart upload of the same content: version 2, file shared by content address.
    let boundary = "infergate-test-boundary";
    let mut form = Vec::new();
    form.extend(format!("--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"cls.onnx\"\r\nContent-Type: application/octet-stream\r\n\r\n").as_bytes());
    form.extend(&bytes);
    form.extend(
        format!("\r\n--{boundary}\r\nContent-Disposition: form-data; name=\"config\"\r\n\r\n")
            .as_bytes(),
    );
    form.extend(
        br#"{"max_batch_size": 8, "dynamic_batching": {"max_queue_delay_microseconds": 500}}"#,
    );
    form.extend(format!("\r\n--{boundary}--\r\n").as_bytes());
    let reply = upload(
        &app,
        "/api/models/cls/versions",
        &key,
        Body::from(form),
        Some(&format!("multipart/form-data; boundary={boundary}")),
    )
    .await;
    assert_eq!(reply.status, 201, "{}", reply.json());
    let v2 = reply.json();
    assert_eq!(v2["version"], 2);
    assert_eq!(v2["config"]["max_batch_size"], 8);
    assert_eq!(stored_files(&app), (before + 1, 0));

    let meta = app.get("/v2/models/cls", Some(&key)).await.json();
    assert_eq!(meta["versions"], json!(["1", "2"]));

    let body = json!({"inputs": [{"name": "x", "shape": [1, 3, 48, 192], "datatype": "FP32", "data": vec![0.5f32; 3 * 48 * 192]}]});
    let reply = app
        .post("/v2/models/cls/versions/1/infer", Some(&key), body.clone())
        .await;
    assert_eq!(reply.status, 200);
    let probs: Vec<f64> = reply.json()["outputs"][0]["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|v| v.as_f64().expect("a number"))
        .collect();
    assert_eq!(probs.len(), 2);
    assert!(
        (probs.iter().sum::<f64>() - 1.0).abs() < 1e-4,
        "softmax output sums to 1: {probs:?}"
    );

    // Deleting version 1 keeps the shared file; deleting version 2 removes it.
    let del = app
        .send(
            Method::DELETE,
            "/api/models/cls/versions/1",
            Some(&key),
            None,
        )
        .await;
    assert_eq!(del.status, 200);
    assert_eq!(stored_files(&app), (before + 1, 0));
    let del = app
        .send(Method::DELETE, "/api/models/cls", Some(&key), None)
        .await;
    assert_eq!(del.status, 200);
    assert_eq!(stored_files(&app), (before, 0));
    assert!(!model_names(&app).await.contains(&"cls".to_owned()));
    let gone = app.post("/v2/models/cls/infer", Some(&key), body).await;
    assert_eq!(gone.status, 404);
    assert!(!gone.error().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_upload_is_rejected_with_the_runtime_reason_and_leaves_nothing() {
    let app = App::start().await;
    let before = stored_files(&app);
    let key = app.upload.clone();
    let garbage = Body::from(b"this is not an onnx model".repeat(100));
    let reply = upload(&app, "/api/models/junk/versions", &key, garbage, None).await;
    assert_eq!(reply.status, 400);
    let msg = reply.error();
    assert!(msg.contains("ONNX Runtime rejected the model"), "{msg}");
    assert_eq!(stored_files(&app), before);
    assert!(!model_names(&app).await.contains(&"junk".to_owned()));

    let empty = upload(&app, "/api/models/junk/versions", &key, Body::empty(), None).await;
    assert_eq!(empty.status, 400);
    assert!(!empty.error().is_empty());

    for bad in ["..", ".x", "a%20b", "a%0Ab"] {
        let reply = upload(
            &app,
            &format!("/api/models/{bad}/versions"),
            &key,
            Body::from(vec![0u8; 4]),
            None,
        )
        .await;
        assert!(
            reply.status == 400 || reply.status == 404,
            "{bad}: {}",
            reply.status
        );
    }
    assert_eq!(stored_files(&app), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_upload_is_413_and_leaves_nothing() {
    let app = App::with_config(|c| c.limits.max_upload_bytes = 100_000).await;
    let before = stored_files(&app);
    let bytes = models_file("ocr-cls.onnx");
    assert!(bytes.len() > 100_000);

    let reply = upload(
        &app,
        "/api/models/big/versions",
        &app.upload,
        Body::from(bytes.clone()),
        None,
    )
    .await;
    assert_eq!(reply.status, 413);
    assert!(reply.error().contains("limit"), "{}", reply.error());

    // Without a declared length (a chunked stream) the cap still holds.
    let chunks: Vec<Result<Bytes, std::io::Error>> = bytes
        .chunks(8192)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    let stream = Body::from_stream(futures_util::stream::iter(chunks));
    let reply = upload(&app, "/api/models/big/versions", &app.upload, stream, None).await;
    assert_eq!(reply.status, 413);
    assert_eq!(stored_files(&app), before);
    assert!(!model_names(&app).await.contains(&"big".to_owned()));
}
