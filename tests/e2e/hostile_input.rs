//! Requests whose declared sizes lie about their data, over gRPC and WebSocket (HTTP is
//! checked in process, `gateway/server/tests/handlers/hostile_tensors.rs`): each is a gRPC
//! INVALID_ARGUMENT or a WebSocket error frame naming the input, and the server goes on
//! serving. An oversized gRPC message is RESOURCE_EXHAUSTED, unary or
//! in a stream (after the answers to the requests before it). Before the size checks in `infergate-protocol::limits`, a
//! shape of `[68719476736, 16]` with one element aborted the process (a 4 TiB allocation) and
//! `[9223372036854775807]` panicked ("capacity overflow").

use crate::grpc::{frame, grpc_url};
use crate::harness::{Options, Server};
use crate::websocket::{connect, next_json};
use futures_util::SinkExt;
use infergate_kserve::proto::model_infer_request::InferInputTensor;
use infergate_kserve::proto::ModelInferRequest;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

/// Shapes whose element counts no body can back: 2^40 elements, i64::MAX, and an overflow.
const ABSURD_SHAPES: [&[i64]; 3] = [&[68719476736, 16], &[i64::MAX], &[i64::MAX, 4]];

/// The classifier's input (FP32 [1, 3, 48, W]) with W = 8, all zeros.
fn cls_input_json() -> Value {
    json!({"name": "x", "shape": [1, 3, 48, 8], "datatype": "FP32", "data": vec![0.0f32; 3 * 48 * 8]})
}

fn server() -> (tempfile::TempDir, Server) {
    let tmp = tempfile::tempdir().unwrap();
    crate::harness::register(tmp.path(), "cls", &crate::harness::model("ocr-cls.onnx"));
    let s = Server::start_in(
        tmp.path(),
        Options {
            // Small enough that the gRPC test can pass it cheaply.
            extra_args: vec!["--max-request-bytes".into(), (1 << 20).to_string()],
            ..Options::default()
        },
    );
    (tmp, s)
}

/// A unary `ModelInfer` call; answers the grpc-status of a trailers-only (error) response, or
/// None when the call succeeded with a message.
async fn grpc_infer(s: &Server, url: &str, key: &str, body: Vec<u8>) -> Option<String> {
    let response = crate::grpc::call(s, url, "ModelInfer", key, body.into()).await;
    assert_eq!(response.status(), 200);
    let status = response
        .headers()
        .get("grpc-status")
        .map(|v| v.to_str().unwrap().to_string());
    let bytes = response.bytes().await.unwrap();
    assert!(
        status.is_some() || bytes.len() > 5,
        "neither a status nor a message"
    );
    status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absurd_shapes_over_grpc_are_invalid_argument_and_oversized_is_resource_exhausted() {
    let (_tmp, s) = server();
    let url = grpc_url(&s);
    let key = s.key("infer");
    let request = |shape: &[i64], datatype: &str, raw: Vec<u8>| ModelInferRequest {
        model_name: "cls".into(),
        inputs: vec![InferInputTensor {
            name: "x".into(),
            datatype: datatype.into(),
            shape: shape.to_vec(),
            ..Default::default()
        }],
        raw_input_contents: vec![raw],
        ..Default::default()
    };
    for shape in ABSURD_SHAPES {
        for (datatype, raw) in [
            ("FP32", vec![0, 0, 128, 63]),
            ("BYTES", vec![1, 0, 0, 0, b'a']),
        ] {
            let status = grpc_infer(&s, &url, &key, frame(&request(shape, datatype, raw))).await;
            assert_eq!(
                status.as_deref(),
                Some("3"),
                "{datatype} {shape:?}: INVALID_ARGUMENT"
            );
        }
    }
    // Over the message limit (1 MiB here): RESOURCE_EXHAUSTED, as gRPC reports it.
    let big = request(&[1, 3, 48, 2048], "FP32", vec![0; 3 * 48 * 2048 * 4]);
    let status = grpc_infer(&s, &url, &key, frame(&big)).await;
    assert_eq!(status.as_deref(), Some("8"), "RESOURCE_EXHAUSTED");
    let fine = request(&[1, 3, 48, 8], "FP32", vec![0; 3 * 48 * 8 * 4]);
    assert_eq!(grpc_infer(&s, &url, &key, frame(&fine)).await, None);

    // On a stream, the requests before an oversized one are answered, then the stream ends
    // with RESOURCE_EXHAUSTED in its trailers (it used to end with OK, as if the client had
    // finished).
    let mut frames = frame(&ModelInferRequest {
        id: "fine".into(),
        ..fine.clone()
    });
    frames.extend(frame(&big));
    let response = crate::grpc::call(&s, &url, "ModelStreamInfer", &key, frames.into()).await;
    assert_eq!(response.status(), 200);
    let body = http::Response::from(response).into_body();
    let collected = http_body_util::BodyExt::collect(body).await.unwrap();
    let trailers = collected
        .trailers()
        .cloned()
        .expect("trailers with a status");
    let mut answers = collected.to_bytes().to_vec();
    let answers = crate::grpc::unframe(&mut answers);
    assert_eq!(answers.len(), 1, "{answers:?}");
    assert_eq!(answers[0].error_message, "");
    assert_eq!(answers[0].infer_response.as_ref().unwrap().id, "fine");
    assert_eq!(
        trailers["grpc-status"], "8",
        "RESOURCE_EXHAUSTED: {trailers:?}"
    );
    // Percent-encoded, as gRPC sends it.
    let message = trailers["grpc-message"]
        .to_str()
        .unwrap()
        .replace("%20", " ");
    assert!(message.contains("too large"), "{message}");
    assert_eq!(grpc_infer(&s, &url, &key, frame(&fine)).await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absurd_shapes_over_websocket_are_error_frames() {
    let (_tmp, s) = server();
    let key = s.key("infer");
    let auth = format!("Bearer {key}");
    let (mut ws, _) = connect(&s, "/v2/stream", &[("authorization", auth.as_str())])
        .await
        .expect("upgrade");
    for (i, shape) in ABSURD_SHAPES.iter().enumerate() {
        let message = json!({"id": i, "model": "cls", "inputs": [
            {"name": "x", "shape": shape, "datatype": "FP32", "data": [1]}
        ]});
        ws.send(Message::text(message.to_string())).await.unwrap();
        let answer = next_json(&mut ws).await;
        assert_eq!(answer["id"], i, "{answer}");
        assert_eq!(answer["status"], 400, "{answer}");
        assert!(
            answer["error"].as_str().unwrap().contains("input 'x'"),
            "{answer}"
        );
    }
    // The same connection still serves.
    let message = json!({"id": "ok", "model": "cls", "inputs": [cls_input_json()]});
    ws.send(Message::text(message.to_string())).await.unwrap();
    let answer = next_json(&mut ws).await;
    assert_eq!(answer["id"], "ok");
    assert_eq!(answer["outputs"][0]["shape"], json!([1, 2]), "{answer}");
}
