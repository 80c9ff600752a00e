//! Requests whose declared sizes lie about their data, over HTTP (JSON and Triton's binary
//! tensors), in process: each is a 400 naming the input and the service goes on serving.
//! A shape of `[68719476736, 16]` with one element would be a 4 TiB allocation, and
//! `[9223372036854775807]` overflows a capacity: every size is checked before allocating.
//! The same over gRPC and WebSocket is in the end-to-end suite (`tests/e2e/hostile_input.rs`).

use axum::body::Body;
use http::{Method, Request};
use serde_json::{json, Value};
use crate::support::App;

/// Shapes whose element counts no body can back: 2^40 elements, i64::MAX, and an overflow.
const ABSURD_SHAPES: [&[i64]; 3] = [&[68719476736, 16], &[i64::MAX], &[i64::MAX, 4]];

/// The classifier's input (FP32 [1, 3, 48, W]) with W = 8, all zeros.
fn cls_input_json() -> Value {
    json!({"name": "x", "shape": [1, 3, 48, 8], "datatype": "FP32", "data": vec![0.0f32; 3 * 48 * 8]})
}

async fn post(app: &App, body: Vec<u8>, header_len: Option<usize>) -> (u16, Value) {
    let mut request = Request::builder()
        .method(Method::POST)
        .uri("/v2/models/cls/infer")
        .header(http::header::AUTHORIZATION, format!("Bearer {}", app.infer));
    if let Some(len) = header_len {
        request = request.header("Inference-Header-Content-Length", len);
    }
    let reply = app
        .call(request.body(Body::from(body)).expect("request"))
        .await;
    (reply.status.as_u16(), reply.json())
}

fn assert_names_input(status: u16, answer: &Value, what: &str) {
    assert_eq!(status, 400, "{what}: {answer}");
    let message = answer["error"].as_str().expect("a JSON error");
    assert!(message.contains("input 'x'"), "{what}: {message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absurd_shapes_over_http_json_and_binary_are_400s() {
    let app = App::with_config(|c| c.limits.max_request_bytes = 1 << 20).await;
    app.register("cls", "ocr-cls.onnx");
    let to_vec = |v: &Value| serde_json::to_vec(v).expect("json");
    for shape in ABSURD_SHAPES {
        for datatype in ["FP32", "BYTES"] {
            let data = if datatype == "BYTES" {
                json!(["a"])
            } else {
                json!([1])
            };
            let body = json!({"inputs": [{"name": "x", "shape": shape, "datatype": datatype, "data": data}]});
            let (status, answer) = post(&app, to_vec(&body), None).await;
            assert_names_input(status, &answer, &format!("JSON {datatype} {shape:?}"));

            // Triton's binary tensor extension: one element's bytes behind the header.
            let bytes: &[u8] = if datatype == "BYTES" {
                &[1, 0, 0, 0, b'a']
            } else {
                &[0, 0, 128, 63]
            };
            let header = to_vec(
                &json!({"inputs": [{"name": "x", "shape": shape, "datatype": datatype,
                "parameters": {"binary_data_size": bytes.len()}}]}),
            );
            let header_len = header.len();
            let body = [header, bytes.to_vec()].concat();
            let (status, answer) = post(&app, body, Some(header_len)).await;
            assert_names_input(status, &answer, &format!("binary {datatype} {shape:?}"));
        }
    }
    // FP32 beyond its range is not silently infinity.
    let mut input = cls_input_json();
    input["data"][0] = json!(1e39);
    let (status, answer) = post(&app, to_vec(&json!({"inputs": [input]})), None).await;
    assert_names_input(status, &answer, "FP32 1e39");
    assert!(answer["error"]
        .as_str()
        .is_some_and(|e| e.contains("out of range for FP32")));
    // Still serving.
    let (status, answer) = post(&app, to_vec(&json!({"inputs": [cls_input_json()]})), None).await;
    assert_eq!(status, 200, "{answer}");
}
