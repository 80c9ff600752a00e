use crate::harness::{Options, Server};
use serde_json::{json, Value};

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_and_binary_modes_agree() {
    let s = Server::with_models(&[("minilm", "minilm.onnx")]);
    let key = s.key("infer");

    let resp = s
        .client
        .post(s.url("/v2/models/minilm/infer"))
        .bearer_auth(&key)
        .json(&json!({"id": "req-1", "inputs": minilm_inputs()}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let out: Value = resp.json().await.unwrap();
    assert_eq!(out["id"], "req-1");
    assert_eq!(out["model_name"], "minilm");
    assert_eq!(out["model_version"], "1");
    assert_eq!(out["outputs"][0]["shape"], json!([1, 6, 384]));
    let from_json: Vec<f32> = out["outputs"][0]["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap() as f32)
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
    let header = serde_json::to_vec(&json!({"inputs": inputs, "outputs": [{"name": "last_hidden_state", "parameters": {"binary_data": true}}]})).unwrap();
    let mut body = header.clone();
    body.extend(&binary);
    let resp = s
        .client
        .post(s.url("/v2/models/minilm/versions/1/infer"))
        .bearer_auth(&key)
        .header("Inference-Header-Content-Length", header.len())
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let json_len: usize = resp.headers()["inference-header-content-length"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let bytes = resp.bytes().await.unwrap();
    let head: Value = serde_json::from_slice(&bytes[..json_len]).unwrap();
    assert_eq!(
        head["outputs"][0]["parameters"]["binary_data_size"],
        6 * 384 * 4
    );
    assert!(head["outputs"][0].get("data").is_none());
    let from_binary = le_f32(&bytes[json_len..]);
    assert_eq!(from_binary.len(), from_json.len());
    for (a, b) in from_binary.iter().zip(&from_json) {
        // JSON carries the f32 widened to f64 and back: exact.
        assert_eq!(a, b);
    }
}

async fn error_for(s: &Server, key: &str, path: &str, body: Value) -> (u16, String) {
    let resp = s
        .client
        .post(s.url(path))
        .bearer_auth(key)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let v: Value = resp.json().await.unwrap();
    (status, v["error"].as_str().unwrap_or_default().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_mismatch_is_a_400_naming_the_tensor() {
    let s = Server::with_models(&[("minilm", "minilm.onnx")]);
    let key = s.key("infer");
    let p = "/v2/models/minilm/infer";
    let mut inputs = minilm_inputs();

    // Wrong datatype.
    inputs[0]["datatype"] = json!("INT32");
    let (code, msg) = error_for(&s, &key, p, json!({"inputs": inputs})).await;
    assert_eq!(code, 400);
    assert!(
        msg.contains("'input_ids'") && msg.contains("INT32") && msg.contains("INT64"),
        "{msg}"
    );

    // Wrong rank.
    let mut inputs = minilm_inputs();
    inputs[1]["shape"] = json!([6]);
    let (code, msg) = error_for(&s, &key, p, json!({"inputs": inputs})).await;
    assert_eq!(code, 400);
    assert!(
        msg.contains("'attention_mask'") && msg.contains("shape"),
        "{msg}"
    );

    // Element count does not match the shape.
    let mut inputs = minilm_inputs();
    inputs[2]["shape"] = json!([1, 7]);
    let (code, msg) = error_for(&s, &key, p, json!({"inputs": inputs})).await;
    assert_eq!(code, 400);
    assert!(
        msg.contains("'token_type_ids'") && msg.contains("elements"),
        "{msg}"
    );

    // Unknown input, missing input, unknown output.
    let mut inputs = minilm_inputs();
    inputs[2]["name"] = json!("segment_ids");
    let (code, msg) = error_for(&s, &key, p, json!({"inputs": inputs})).await;
    assert_eq!(code, 400);
    assert!(msg.contains("'segment_ids'"), "{msg}");
    let inputs = minilm_inputs().as_array().unwrap()[..2].to_vec();
    let (code, msg) = error_for(&s, &key, p, json!({"inputs": inputs})).await;
    assert_eq!(code, 400);
    assert!(
        msg.contains("missing required input(s) ['token_type_ids']"),
        "{msg}"
    );
    let (code, msg) = error_for(
        &s,
        &key,
        p,
        json!({"inputs": minilm_inputs(), "outputs": [{"name": "pooled"}]}),
    )
    .await;
    assert_eq!(code, 400);
    assert!(msg.contains("'pooled'"), "{msg}");

    // Malformed JSON, unknown datatype, out-of-range value.
    let resp = s
        .client
        .post(s.url(p))
        .bearer_auth(&key)
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let mut inputs = minilm_inputs();
    inputs[0]["datatype"] = json!("FLOAT128");
    let (code, msg) = error_for(&s, &key, p, json!({"inputs": inputs})).await;
    assert_eq!(code, 400);
    assert!(
        msg.contains("'input_ids'") && msg.contains("FLOAT128"),
        "{msg}"
    );

    // Unknown model and version: 404.
    let (code, _) = error_for(&s, &key, "/v2/models/nope/infer", json!({"inputs": []})).await;
    assert_eq!(code, 404);
    let (code, msg) = error_for(
        &s,
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
    let resp = s
        .client
        .post(s.url(p))
        .bearer_auth(&key)
        .header("Inference-Header-Content-Length", header.len())
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let v: Value = resp.json().await.unwrap();
    assert!(v["error"].as_str().unwrap().contains("'input_ids'"));

    // The server is still healthy after all of that.
    let resp = s
        .client
        .post(s.url(p))
        .bearer_auth(&key)
        .json(&json!({"inputs": minilm_inputs()}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_inference_body_is_413() {
    let tmp = tempfile::tempdir().unwrap();
    crate::harness::register(tmp.path(), "minilm", &crate::harness::model("minilm.onnx"));
    let opts = Options {
        extra_args: vec!["--max-request-bytes".into(), "1024".into()],
        ..Options::default()
    };
    let s = Server::start_in(tmp.path(), opts);
    let key = s.key("infer");
    let ids = vec![101i64; 400];
    let body = json!({"inputs": [{"name": "input_ids", "shape": [1, 400], "datatype": "INT64", "data": ids}]});
    let (code, msg) = error_for(&s, &key, "/v2/models/minilm/infer", body).await;
    assert_eq!(code, 413);
    assert!(msg.contains("1024"), "{msg}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn triton_metadata_config_stats_and_repository() {
    let s = Server::with_models(&[("cls", "ocr-cls.onnx")]);
    let key = s.key("infer,upload");
    let get = |p: &str| s.client.get(s.url(p)).bearer_auth(&key).send();

    let server: Value = get("/v2").await.unwrap().json().await.unwrap();
    assert_eq!(server["name"], "infergate");
    // Where native ops run is reported; without a GPU (CI) it is the CPU.
    assert!(
        matches!(server["device"]["kind"].as_str(), Some("cpu" | "cuda")),
        "{server}"
    );
    assert!(server["extensions"]
        .as_array()
        .unwrap()
        .contains(&json!("binary_tensor_data")));
    assert_eq!(
        s.client
            .get(s.url("/v2/health/live"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    assert_eq!(
        s.client
            .get(s.url("/v2/health/ready"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    assert_eq!(get("/v2/models/cls/ready").await.unwrap().status(), 200);
    assert_eq!(
        get("/v2/models/cls/versions/1/ready")
            .await
            .unwrap()
            .status(),
        200
    );

    let config: Value = get("/v2/models/cls/config")
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(config["platform"], "onnxruntime_onnx");
    assert_eq!(config["input"][0]["data_type"], "TYPE_FP32");
    assert_eq!(
        config["output"][0]["name"],
        "save_infer_model/scale_0.tmp_1"
    );

    let index: Value = s
        .client
        .post(s.url("/v2/repository/index"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        index[0]["state"], "UNAVAILABLE",
        "lazy: not loaded before the first request"
    );
    let load = s
        .client
        .post(s.url("/v2/repository/models/cls/load"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(load.status(), 200);
    let index: Value = s
        .client
        .post(s.url("/v2/repository/index"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(index[0]["state"], "READY");

    let body = json!({"inputs": [{"name": "x", "shape": [2, 3, 48, 192], "datatype": "FP32", "data": vec![0.1f32; 2 * 3 * 48 * 192]}]});
    for _ in 0..3 {
        let r = s
            .client
            .post(s.url("/v2/models/cls/infer"))
            .bearer_auth(&key)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    let stats: Value = get("/v2/models/cls/stats")
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let st = &stats["model_stats"][0];
    assert_eq!(st["inference_stats"]["success"]["count"], 3);
    for stage in ["compute_input", "compute_infer", "compute_output"] {
        assert_eq!(st["inference_stats"][stage]["count"], 3, "{stage}");
    }
    assert!(
        st["inference_stats"]["compute_infer"]["ns"]
            .as_u64()
            .unwrap()
            > 0
    );

    let unload = s
        .client
        .post(s.url("/v2/repository/models/cls/unload"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(unload.status(), 200);
    let index: Value = s
        .client
        .post(s.url("/v2/repository/index"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(index[0]["state"], "UNAVAILABLE");
}
