//! An input the model itself cannot run (a size its network cannot compute with) is the
//! client's fault: 400 with the model's own reason, never 500.

use crate::harness::Server;
use serde_json::{json, Value};

async fn infer(s: &Server, key: &str, height: usize, width: usize) -> (u16, Value) {
    let body = json!({"inputs": [{"name": "x", "shape": [1, 3, height, width], "datatype": "FP32",
                                  "data": vec![0.5f32; 3 * height * width]}]});
    let resp = s
        .client
        .post(s.url("/v2/models/det/infer"))
        .bearer_auth(key)
        .json(&body)
        .send()
        .await
        .unwrap();
    (resp.status().as_u16(), resp.json().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_size_the_detector_cannot_run_is_a_400_with_the_models_reason() {
    let s = Server::with_models(&[("det", "ocr-det.onnx")]);
    let key = s.key("infer");
    // The detector's height and width are open, but its feature pyramid adds maps upsampled
    // by 2 to maps downsampled by 2: sizes that are not multiples of 32 do not add up.
    let (status, body) = infer(&s, &key, 33, 45).await;
    let message = body["error"].as_str().unwrap_or_default();
    assert_eq!(status, 400, "{body}");
    assert!(message.contains("det"), "names the model: {message}");
    assert!(
        message.contains("[1, 3, 33, 45]"),
        "names the shape: {message}"
    );
    assert!(
        message.contains("broadcast"),
        "gives ORT's reason: {message}"
    );
    assert!(!message.contains("/onnxruntime_src"), "no paths: {message}");
    // A size it can run still works, on the same loaded model.
    let (status, body) = infer(&s, &key, 64, 96).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["outputs"][0]["shape"], json!([1, 1, 64, 96]));
}
