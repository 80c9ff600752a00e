//! KServe v2 inference over HTTP, in process: JSON and binary tensors agree, every mismatch
//! between a request and the model is a 400 naming the tensor, oversized bodies are 413, an
//! input the model's own network cannot compute with is the client's fault, and Triton's
//! metadata, configuration, statistics and repository routes answer as its clients expect.

use axum::body::Body;
use http::{Method, Request};
use serde_json::{json, Value};
use crate::support::{App, Reply};

fn minilm_inputs() -> Value {
    json!([
        {"name": "input_ids", "shape": [1, 6], "datatype": "INT64", "data": [[101, 1996, 4937, 7719, 1012, 102]]},
        {"name": "attention_mask", "shape": [1, 6], "datatype": "INT64", "data": [1, 1, 1, 1, 1, 1]},
        {"name": "token_type_ids", "shape": [1, 6], "datatype": "INT64", "data": [0, 0, 0, 0, 0, 0]},
    ])
}

fn le_f32(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// A POST with a raw body and, for Triton's binary tensor extension, the JSON header's length.
async fn post_raw(
    app: &App,
    path: &str,
    key: &str,
    body: Vec<u8>,
    header_len: Option<usize>,
) -> Reply {
    let mut request = Request::builder()
        .method(Method::POST)
        .uri(path)
        .header(http::header::AUTHORIZATION, format!("Bearer {key}"));
    if let Some(len) = header_len {
        request = request.header("Inference-Header-Content-Length", len);
    }
    app.call(request.body(Body::from(body)).expect("request"))
        .await
}

async fn error_for(app: &App, key: &str, path: &str, body: Value) -> (u16, String) {
    let reply = app.post(path, Some(key), body).await;
    (reply.status.as_u16(), reply.error())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_and_binary_modes_agree() {
    let app = App::start().await;
    app.register("minilm", "minilm.onnx");
    let key = app.infer.clone();

    let out = app
        .post(
            "/v2/models/minilm/infer",
            Some(&key),
            json!({"id": "req-1", "inputs": minilm_inputs()}),
        )
        .await;
    assert_eq!(out.status, 200, "{}", out.json());
    let out = out.json();
    assert_eq!(out["id"], "req-1");
    assert_eq!(out["model_name"], "minilm");
    assert_eq!(out["model_version"], "1");
    assert_eq!(out["outputs"][0]["shape"], json!([1, 6, 384]));
    let from_json: Vec<f32> = out["outputs"][0]["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|v| v.as_f64().expect("a number") as f32)
        .collect();
    assert_eq!(from_json.len(), 6 * 384);
    assert!(from_json.iter().all(|x| x.is_finite()) && from_json.iter().any(|x| x.abs() > 0.01));

    // Binary inputs and binary output, as tritonclient/perf_analyzer send them.
    let ids: Vec<i64> = vec![101, 1996, 4937, 7719, 1012, 102];
    let mut binary = Vec::new();
    let mut inputs = Vec::new();
    for (name, values) in [
        ("input_ids", ids.clone()),
        ("attention_mask", vec![1; 6]),
        ("token_type_ids", vec![0; 6]),
    ] {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        inputs.push(json!({"name": name, "shape": [1, 6], "datatype": "INT64", "parameters": {"binary_data_size": bytes.len()}}));
        binary.extend(bytes);
    }
    let header = serde_json::to_vec(&json!({"inputs": inputs, "outputs": [{"name": "last_hidden_state", "parameters": {"binary_data": true}}]})).expect("json");
    let mut body = header.clone();
    body.extend(&binary);
    let reply = post_raw(
        &app,
        "/v2/models/minilm/versions/1/infer",
        &key,
        body,
        Some(header.len()),
    )
    .await;
    assert_eq!(reply.status, 200);
    let json_len: usize = reply
        .header("inference-header-content-length")
        .expect("the header's length")
        .parse()
        .expect("a number");
    let head: Value = serde_json::from_slice(&reply.body[..json_len]).expect("JSON header");
    assert_eq!(
        head["outputs"][0]["parameters"]["binary_data_size"],
        6 * 384 * 4
    );
    assert!(head["outputs"][0].get("data").is_none());
    let from_binary = le_f32(&reply.body[json_len..]);
    assert_eq!(from_binary.len(), from_json.len());
    for (a, b) in from_binary.iter().zip(&from_json) {
        // JSON carries the f32 widened to f64 and back: exact.
        assert_eq!(a, b);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_mismatch_is_a_400_naming_the_tensor() {
    let app = App::start().await;
    app.register("minilm", "minilm.onnx");
    let key = app.infer.clone();
    let p = "/v2/models/minilm/infer";

    // Wrong datatype.
    let mut inputs = minilm_inputs();
    inputs[0]["datatype"] = json!("INT32");
    let (code, msg) = error_for(&app, &key, p, json!({"inputs": inputs})).await;
    assert_eq!(code, 400);
    assert!(
        msg.contains("'input_ids'") && msg.contains("INT32") && msg.contains("INT64"),
        "{msg}"
    );

    // Wrong rank.
    let mut inputs = minilm_inputs();
    inputs[1]["shape"] = json!([6]);
    let (code, msg) = error_for(&app, &key, p, json!({"inputs": inputs})).await;
    assert_eq!(code, 400);
    assert!(
        msg.contains("'attention_mask'") && msg.contains("shape"),
        "{msg}"
    );

    // Element count does not match the shape.
    let mut inputs = minilm_inputs();
    inputs[2]["shape"] = json!([1, 7]);
    let (code, msg) = error_for(&app, &key, p, json!({"inputs": inputs})).await;
    assert_eq!(code, 400);
    assert!(
        msg.contains("'token_type_ids'") && msg.contains("elements"),
        "{msg}"
    );

    // Unknown input, missing input, unknown output.
    let mut inputs = minilm_inputs();
    inputs[2]["name"] = json!("segment_ids");
    let (code, msg) = error_for(&app, &key, p, json!({"inputs": inputs})).await;
    assert_eq!(code, 400);
    assert!(msg.contains("'segment_ids'"), "{msg}");
    let inputs = minilm_inputs().as_array().expect("inputs")[..2].to_vec();
    let (code, msg) = error_for(&app, &key, p, json!({"inputs": inputs})).await;
    assert_eq!(code, 400);
    assert!(
        msg.contains("missing required input(s) ['token_type_ids']"),
        "{msg}"
    );
    let (code, msg) = error_for(
        &app,
        &key,
        p,
        json!({"inputs": minilm_inputs(), "outputs": [{"name": "pooled"}]}),
    )
    .await;
    assert_eq!(code, 400);
    assert!(msg.contains("'pooled'"), "{msg}");

    // Malformed JSON, unknown datatype, out-of-range value.
    let reply = post_raw(&app, p, &key, b"{not json".to_vec(), None).await;
    assert_eq!(reply.status, 400);
    assert!(!reply.error().is_empty());
    let mut inputs = minilm_inputs();
    inputs[0]["datatype"] = json!("FLOAT128");
    let (code, msg) = error_for(&app, &key, p, json!({"inputs": inputs})).await;
    assert_eq!(code, 400);
    assert!(
        msg.contains("'input_ids'") && msg.contains("FLOAT128"),
        "{msg}"
    );

    // Unknown model and version: 404.
    let (code, _) = error_for(&app, &key, "/v2/models/nope/infer", json!({"inputs": []})).await;
    assert_eq!(code, 404);
    let (code, msg) = error_for(
        &app,
        &key,
        "/v2/models/minilm/versions/9/infer",
        json!({"inputs": []}),
    )
    .await;
    assert_eq!(code, 404);
    assert!(msg.contains("version 9"), "{msg}");

    // Binary section shorter than declared.
    let header = br#"{"inputs":[{"name":"input_ids","shape":[1,2],"datatype":"INT64","parameters":{"binary_data_size":16}}]}"#;
    let mut body = header.to_vec();
    body.extend([0u8; 8]);
    let reply = post_raw(&app, p, &key, body, Some(header.len())).await;
    assert_eq!(reply.status, 400);
    assert!(reply.error().contains("'input_ids'"), "{}", reply.error());

    // The service still answers after all of that.
    let reply = app
        .post(p, Some(&key), json!({"inputs": minilm_inputs()}))
        .await;
    assert_eq!(reply.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_inference_body_is_413() {
    let app = App::with_config(|c| c.limits.max_request_bytes = 1024).await;
    app.register("minilm", "minilm.onnx");
    let ids = vec![101i64; 400];
    let body = json!({"inputs": [{"name": "input_ids", "shape": [1, 400], "datatype": "INT64", "data": ids}]});
    let (code, msg) = error_for(&app, &app.infer, "/v2/models/minilm/infer", body).await;
    assert_eq!(code, 413);
    assert!(msg.contains("1024"), "{msg}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_size_the_detector_cannot_run_is_a_400_with_the_models_reason() {
    let app = App::start().await;
    app.register("det", "ocr-det.onnx");
    let infer = |height: usize, width: usize| {
        let body = json!({"inputs": [{"name": "x", "shape": [1, 3, height, width], "datatype": "FP32",
                                      "data": vec![0.5f32; 3 * height * width]}]});
        app.post("/v2/models/det/infer", Some(&app.infer), body)
    };
    // The detector's height and width are open, but its feature pyramid adds maps upsampled
    // by 2 to maps downsampled by 2: sizes that are not multiples of 32 do not add up.
    let reply = infer(33, 45).await;
    assert_eq!(reply.status, 400, "{}", reply.json());
    let message = reply.error();
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
    let reply = infer(64, 96).await;
    assert_eq!(reply.status, 200, "{}", reply.json());
    assert_eq!(reply.json()["outputs"][0]["shape"], json!([1, 1, 64, 96]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn triton_metadata_config_stats_and_repository() {
    let app = App::start().await;
    app.register("cls", "ocr-cls.onnx");
    let key = app.key("infer,upload");
    let get = |p: &'static str| app.get(p, Some(&key));
    let post = |p: &'static str| app.send(Method::POST, p, Some(&key), None);

    let server = get("/v2").await.json();
    assert_eq!(server["name"], "infergate");
    // Where native ops run is reported; without a GPU (CI) it is the CPU.
    assert!(
        matches!(server["device"]["kind"].as_str(), Some("cpu" | "cuda")),
        "{server}"
    );
    assert!(server["extensions"]
        .as_array()
        .expect("extensions")
        .contains(&json!("binary_tensor_data")));
    assert_eq!(app.get("/v2/health/live", None).await.status, 200);
    assert_eq!(app.get("/v2/health/ready", None).await.status, 200);
    assert_eq!(get("/v2/models/cls/ready").await.status, 200);
    assert_eq!(get("/v2/models/cls/versions/1/ready").await.status, 200);

    let config = get("/v2/models/cls/config").await.json();
    assert_eq!(config["platform"], "onnxruntime_onnx");
    assert_eq!(config["input"][0]["data_type"], "TYPE_FP32");
    assert_eq!(
        config["output"][0]["name"],
        "save_infer_model/scale_0.tmp_1"
    );

    // The tiny model registered by the test support lists first; `cls` is the one loaded here.
    let state_of = |index: &Value| {
        index
            .as_array()
            .expect("an index")
            .iter()
            .find(|m| m["name"] == "cls")
            .map(|m| m["state"].clone())
            .expect("cls in the index")
    };
    let index = post("/v2/repository/index").await.json();
    assert_eq!(
        state_of(&index),
        "UNAVAILABLE",
        "lazy: not loaded before the first request"
    );
    assert_eq!(post("/v2/repository/models/cls/load").await.status, 200);
    assert_eq!(
        state_of(&post("/v2/repository/index").await.json()),
        "READY"
    );

    let body = json!({"inputs": [{"name": "x", "shape": [2, 3, 48, 192], "datatype": "FP32", "data": vec![0.1f32; 2 * 3 * 48 * 192]}]});
    for _ in 0..3 {
        let reply = app
            .post("/v2/models/cls/infer", Some(&key), body.clone())
            .await;
        assert_eq!(reply.status, 200);
    }
    let stats = get("/v2/models/cls/stats").await.json();
    let st = &stats["model_stats"][0];
    assert_eq!(st["inference_stats"]["success"]["count"], 3);
    for stage in ["compute_input", "compute_infer", "compute_output"] {
        assert_eq!(st["inference_stats"][stage]["count"], 3, "{stage}");
    }
    assert!(st["inference_stats"]["compute_infer"]["ns"].as_u64() > Some(0));

    assert_eq!(post("/v2/repository/models/cls/unload").await.status, 200);
    assert_eq!(
        state_of(&post("/v2/repository/index").await.json()),
        "UNAVAILABLE"
    );
}
