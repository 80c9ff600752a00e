use crate::harness::{model, Options, Server};
use serde_json::Value;

fn stored_files(data: &std::path::Path) -> (usize, usize) {
    let count = |d: &str| {
        std::fs::read_dir(data.join(d))
            .map(|r| r.count())
            .unwrap_or(0)
    };
    (count("models"), count("tmp"))
}

async fn list(s: &Server, key: &str) -> Vec<Value> {
    let v: Value = s.get_json("/api/models", key).await;
    v["models"].as_array().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upload_valid_model_then_infer_and_delete() {
    let s = Server::with_models(&[]);
    let key = s.key("upload,infer");
    let bytes = std::fs::read(model("ocr-cls.onnx")).unwrap();

    let resp = s
        .client
        .post(s.url("/api/models/cls/versions"))
        .bearer_auth(&key)
        .body(bytes.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    let created: Value = resp.json().await.unwrap();
    assert_eq!(created["version"], 1);
    assert_eq!(created["inputs"][0]["name"], "x");
    assert_eq!(created["inputs"][0]["datatype"], "FP32");
    assert_eq!(created["outputs"][0]["shape"][1], 2);
    assert_eq!(stored_files(&s.data), (1, 0));

    // Multipart upload of the same content: version 2, file shared by content address.
    let form = reqwest::multipart::Form::new()
        .part(
            "file",
            reqwest::multipart::Part::bytes(bytes).file_name("cls.onnx"),
        )
        .text(
            "config",
            r#"{"max_batch_size": 8, "dynamic_batching": {"max_queue_delay_microseconds": 500}}"#,
        );
    let resp = s
        .client
        .post(s.url("/api/models/cls/versions"))
        .bearer_auth(&key)
        .multipart(form)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    let v2: Value = resp.json().await.unwrap();
    assert_eq!(v2["version"], 2);
    assert_eq!(v2["config"]["max_batch_size"], 8);
    assert_eq!(stored_files(&s.data), (1, 0));

    let meta: Value = s.get_json("/v2/models/cls", &key).await;
    assert_eq!(meta["versions"], serde_json::json!(["1", "2"]));

    let body = serde_json::json!({"inputs": [{"name": "x", "shape": [1, 3, 48, 192], "datatype": "FP32", "data": vec![0.5f32; 3 * 48 * 192]}]});
    let resp = s
        .client
        .post(s.url("/v2/models/cls/versions/1/infer"))
        .bearer_auth(&key)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let out: Value = resp.json().await.unwrap();
    let probs: Vec<f64> = out["outputs"][0]["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    assert_eq!(probs.len(), 2);
    assert!(
        (probs.iter().sum::<f64>() - 1.0).abs() < 1e-4,
        "softmax output sums to 1: {probs:?}"
    );

    // Deleting version 1 keeps the shared file; deleting version 2 removes it.
    let del = s
        .client
        .delete(s.url("/api/models/cls/versions/1"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(del.status(), 200);
    assert_eq!(stored_files(&s.data), (1, 0));
    let del = s
        .client
        .delete(s.url("/api/models/cls"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(del.status(), 200);
    assert_eq!(stored_files(&s.data), (0, 0));
    assert!(list(&s, &s.admin_key).await.is_empty());
    let gone = s
        .client
        .post(s.url("/v2/models/cls/infer"))
        .bearer_auth(&key)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(gone.status(), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_upload_is_rejected_with_the_runtime_reason_and_leaves_nothing() {
    let s = Server::with_models(&[]);
    let key = s.key("upload");
    let resp = s
        .client
        .post(s.url("/api/models/junk/versions"))
        .bearer_auth(&key)
        .body(b"this is not an onnx model".repeat(100))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let body: Value = resp.json().await.unwrap();
    let msg = body["error"].as_str().unwrap();
    assert!(msg.contains("ONNX Runtime rejected the model"), "{msg}");
    assert_eq!(stored_files(&s.data), (0, 0));
    assert!(list(&s, &s.admin_key).await.is_empty());

    let empty = s
        .client
        .post(s.url("/api/models/junk/versions"))
        .bearer_auth(&key)
        .body(Vec::new())
        .send()
        .await
        .unwrap();
    assert_eq!(empty.status(), 400);

    for bad in ["..", ".x", "a%20b", "a%0Ab"] {
        let resp = s
            .client
            .post(s.url(&format!("/api/models/{bad}/versions")))
            .bearer_auth(&key)
            .body(vec![0u8; 4])
            .send()
            .await
            .unwrap();
        assert!(
            resp.status() == 400 || resp.status() == 404,
            "{bad}: {}",
            resp.status()
        );
    }
    assert_eq!(stored_files(&s.data), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_upload_is_413_and_leaves_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let opts = Options {
        extra_args: vec!["--max-upload-bytes".into(), "100000".into()],
        ..Options::default()
    };
    let s = Server::start_in(tmp.path(), opts);
    let key = s.key("upload");
    let bytes = std::fs::read(model("ocr-cls.onnx")).unwrap();
    assert!(bytes.len() > 100_000);

    let resp = s
        .client
        .post(s.url("/api/models/big/versions"))
        .bearer_auth(&key)
        .body(bytes.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 413);
    let body: Value = resp.json().await.unwrap();
    assert!(body["error"].as_str().unwrap().contains("limit"));

    // Without Content-Length (chunked stream) the cap still holds.
    let stream = futures_util::stream::iter(
        bytes
            .chunks(8192)
            .map(|c| Ok::<_, std::io::Error>(c.to_vec()))
            .collect::<Vec<_>>(),
    );
    let resp = s
        .client
        .post(s.url("/api/models/big/versions"))
        .bearer_auth(&key)
        .body(reqwest::Body::wrap_stream(stream))
        .send()
        .await;
    if let Ok(resp) = resp {
        assert_eq!(resp.status(), 413);
    }
    assert_eq!(stored_files(&s.data), (0, 0));
    assert!(list(&s, &s.admin_key).await.is_empty());
}
