//! gRPC on the real binary, spoken as raw HTTP/2 frames over the server's TLS: a
//! `ModelStreamInfer` stream still open at SIGTERM is answered, then ended by the server
//! (the client never half-closes), the process exits 0 and the gRPC port is closed; a client
//! that resets its stream takes its queued requests with it. Client
//! compatibility, status codes and numerics are tested with tritonclient in
//! tests/python/test_grpc.py.

use crate::harness::{model, strip_ansi, Options, Server};
use infergate_kserve::proto::model_infer_request::InferInputTensor;
use infergate_kserve::proto::{ModelInferRequest, ModelStreamInferResponse};
use prost::Message;
use std::time::Duration;

/// One gRPC message on the wire: uncompressed flag, big-endian length, protobuf bytes.
pub fn frame(message: &impl Message) -> Vec<u8> {
    let body = message.encode_to_vec();
    let mut out = vec![0];
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&body);
    out
}

/// Takes every complete message off the front of `buf`.
pub fn unframe(buf: &mut Vec<u8>) -> Vec<ModelStreamInferResponse> {
    let mut out = Vec::new();
    while buf.len() >= 5 {
        let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
        if buf.len() < 5 + len {
            break;
        }
        out.push(ModelStreamInferResponse::decode(&buf[5..5 + len]).expect("a stream answer"));
        buf.drain(..5 + len);
    }
    out
}

/// A request for `model` with one all-zero FP32 input of `shape`.
fn zeros(model: &str, input: &str, shape: &[i64], id: &str) -> ModelInferRequest {
    let len = shape.iter().product::<i64>() as usize;
    ModelInferRequest {
        model_name: model.into(),
        id: id.into(),
        inputs: vec![InferInputTensor {
            name: input.into(),
            datatype: "FP32".into(),
            shape: shape.to_vec(),
            ..Default::default()
        }],
        raw_input_contents: vec![vec![0; len * 4]],
        ..Default::default()
    }
}

fn classify(id: &str) -> ModelInferRequest {
    zeros("cls", "x", &[1, 3, 48, 100], id)
}

/// The server's gRPC base URL, from its `grpc listening on` line.
pub fn grpc_url(s: &Server) -> String {
    let line = s
        .wait_for_log("grpc listening on ", Duration::from_secs(30))
        .expect("the gRPC listening line");
    let url = strip_ansi(&line)
        .split("grpc listening on ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .expect("an address")
        .to_string();
    assert!(url.starts_with("https://"), "{url}");
    url
}

/// Calls `method` of the inference service with `body` as its request frames.
pub async fn call(
    s: &Server,
    url: &str,
    method: &str,
    key: &str,
    body: reqwest::Body,
) -> reqwest::Response {
    crate::harness::client_for(&s.data, false)
        .post(format!("{url}/inference.GRPCInferenceService/{method}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .bearer_auth(key)
        .body(body)
        .send()
        .await
        .expect("the call is answered")
}

/// Opens `ModelStreamInfer` with `body` as the stream of request frames.
async fn stream_infer(s: &Server, url: &str, key: &str, body: reqwest::Body) -> reqwest::Response {
    call(s, url, "ModelStreamInfer", key, body).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_open_at_sigterm_is_answered_and_ended_by_the_server() {
    let tmp = tempfile::tempdir().unwrap();
    crate::harness::register(tmp.path(), "cls", &model("ocr-cls.onnx"));
    let s = Server::start_in(tmp.path(), Options::default());
    let url = grpc_url(&s);
    let key = s.key("infer");

    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Vec<u8>, std::io::Error>>(4);
    let requests = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    for id in ["a", "b"] {
        tx.send(Ok(frame(&classify(id)))).await.unwrap();
    }
    let mut response = stream_infer(&s, &url, &key, reqwest::Body::wrap_stream(requests)).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.version(), reqwest::Version::HTTP_2);

    let mut buf = Vec::new();
    let mut answers = Vec::new();
    while answers.len() < 2 {
        let chunk = response.chunk().await.unwrap().expect("two answers");
        buf.extend_from_slice(&chunk);
        answers.extend(unframe(&mut buf));
    }
    s.send_sigterm();
    // The server ends the stream although the client still holds its sending side open.
    while let Some(chunk) = response.chunk().await.unwrap() {
        buf.extend_from_slice(&chunk);
        answers.extend(unframe(&mut buf));
    }
    drop(tx);
    let mut ids: Vec<&str> = answers
        .iter()
        .map(|a| {
            assert_eq!(a.error_message, "");
            let r = a.infer_response.as_ref().expect("an inference response");
            assert_eq!(
                r.raw_output_contents[0].len(),
                2 * 4,
                "two FP32 class scores"
            );
            r.id.as_str()
        })
        .collect();
    ids.sort();
    assert_eq!(ids, ["a", "b"]);
    assert!(s.wait().success());
    let hostport = url.trim_start_matches("https://");
    assert!(tokio::net::TcpStream::connect(hostport).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_resets_its_stream_takes_its_queued_requests_with_it() {
    const SENT: usize = 16;
    let tmp = tempfile::tempdir().unwrap();
    crate::harness::register(tmp.path(), "slow", &model("efficientnet-lite0.onnx"));
    // One instance, one thread: the requests queue behind each other (tens of ms each).
    let s = Server::start_in(
        tmp.path(),
        Options {
            extra_args: vec![
                "--instances".into(),
                "1".into(),
                "--intra-threads".into(),
                "1".into(),
            ],
            ..Options::default()
        },
    );
    let url = grpc_url(&s);
    let key = s.key("infer");
    let batch = 4;
    let request = |id: usize| zeros("slow", "input", &[batch, 3, 224, 224], &id.to_string());
    let frames: Vec<Result<Vec<u8>, std::io::Error>> =
        (0..SENT).map(|i| Ok(frame(&request(i)))).collect();
    let body = reqwest::Body::wrap_stream(futures_util::stream::iter(frames));
    let mut response = stream_infer(&s, &url, &key, body).await;
    assert_eq!(response.status(), 200);
    // The first answer: the requests are being served. Then the client resets the stream.
    let mut buf = Vec::new();
    while unframe(&mut buf).is_empty() {
        let chunk = response.chunk().await.unwrap().expect("an answer");
        buf.extend_from_slice(&chunk);
    }
    drop(response);
    // Whatever was queued when the client left never runs: the count settles well short of
    // what was sent (each request runs for tens of milliseconds, the reset takes far less).
    let admin = s.admin_key.clone();
    let mut executed = 0;
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let stats = s.get_json("/v2/models/slow/stats", &admin).await;
        let now = stats["model_stats"][0]["execution_count"]
            .as_u64()
            .expect("an execution count");
        if now == executed && now > 0 {
            break;
        }
        executed = now;
    }
    assert!(
        (1..SENT as u64 / 2).contains(&executed),
        "{executed} of {SENT} requests ran after the client reset its stream"
    );
}
