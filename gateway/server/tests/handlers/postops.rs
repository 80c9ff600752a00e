//! Native pre- and post-ops named in a model's config, in process with the real
//! EfficientNet-Lite0: a plain KServe client gets top-k classes as named outputs, and a raw
//! image answers as the same image preprocessed by the client.

use crate::support::App;
use serde_json::{json, Value};

/// Deterministic pseudo-random pixels in roughly the normalised range.
fn image_values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

async fn upload(app: &App, key: &str, name: &str, config: Value) -> crate::support::Reply {
    app.upload_model(name, "efficientnet-lite0.onnx", &config, key)
        .await
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

fn output<'a>(response: &'a Value, name: &str) -> &'a Value {
    response["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["name"] == name)
        .unwrap_or_else(|| panic!("no output '{name}' in {response}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn softmax_topk_post_op_matches_topk_of_the_raw_logits() {
    let app = App::start().await;
    let key = app.key("upload,infer");

    // Refused at upload, naming the field: k of 0, k beyond the model's 1000 classes, a
    // source the model does not have, an unknown op field.
    for (config, needle) in [
        (
            json!({"op": "softmax_topk", "output": "logits", "k": 0}),
            "postprocess[0].k",
        ),
        (
            json!({"op": "softmax_topk", "output": "logits", "k": 1001}),
            "1000 classes",
        ),
        (
            json!({"op": "softmax_topk", "output": "logitz", "k": 5}),
            "postprocess[0].output",
        ),
        (
            json!({"op": "softmax_topk", "output": "logits", "top": 5}),
            "top",
        ),
    ] {
        let resp = upload(
            &app,
            &key,
            "bad",
            json!({"infergate": {"postprocess": config}}),
        )
        .await;
        assert_eq!(resp.status, 400, "{config}");
        let error = resp.error();
        assert!(error.contains(needle), "{needle} not in {error}");
    }

    let config = json!({
        "max_batch_size": 4,
        "infergate": {"postprocess": {"op": "softmax_topk", "output": "logits", "k": 5}},
    });
    let resp = upload(&app, &key, "effnet", config).await;
    assert_eq!(resp.status, 201, "{}", resp.json());

    // The metadata lists the post-op's outputs after the model's own.
    let meta = app.get("/v2/models/effnet", Some(&key)).await.json();
    let names: Vec<&str> = meta["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "logits",
            "probabilities",
            "logits_topk_indices",
            "logits_topk_scores"
        ]
    );
    assert_eq!(meta["outputs"][2]["datatype"], "INT64");
    assert_eq!(meta["outputs"][2]["shape"], json!([-1, 5]));

    // Two images in one request: the post-op runs per image after the model.
    let pixels = image_values(2 * 3 * 224 * 224, 7);
    let request = json!({
        "inputs": [{"name": "input", "shape": [2, 3, 224, 224], "datatype": "FP32", "data": pixels}],
        "outputs": [{"name": "logits_topk_indices"}, {"name": "logits"}, {"name": "logits_topk_scores"}],
    });
    let resp = app
        .post("/v2/models/effnet/infer", Some(&key), request)
        .await;
    assert_eq!(resp.status, 200, "{}", resp.json());
    let out = resp.json();
    let names: Vec<&str> = out["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["logits_topk_indices", "logits", "logits_topk_scores"],
        "in the requested order"
    );
    let indices = output(&out, "logits_topk_indices");
    assert_eq!(indices["datatype"], "INT64");
    assert_eq!(indices["shape"], json!([2, 5]));
    let indices: Vec<i64> = indices["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect();
    let scores = floats(&output(&out, "logits_topk_scores")["data"]);
    let logits = floats(&output(&out, "logits")["data"]);
    assert_eq!(logits.len(), 2000);
    for row in 0..2 {
        let row_logits = &logits[row * 1000..(row + 1) * 1000];
        // Top-5 of the raw logits, computed here: by logit, then lower index.
        let mut order: Vec<usize> = (0..1000).collect();
        order.sort_by(|&a, &b| row_logits[b].total_cmp(&row_logits[a]).then(a.cmp(&b)));
        let expected: Vec<i64> = order[..5].iter().map(|&i| i as i64).collect();
        assert_eq!(
            &indices[row * 5..row * 5 + 5],
            expected.as_slice(),
            "row {row}"
        );
        let max = row_logits.iter().copied().fold(f64::MIN, f64::max);
        let sum: f64 = row_logits.iter().map(|x| (x - max).exp()).sum();
        for (j, &i) in expected.iter().enumerate() {
            let p = (row_logits[i as usize] - max).exp() / sum;
            let got = scores[row * 5 + j];
            assert!((got - p).abs() < 1e-5, "row {row} rank {j}: {got} vs {p}");
        }
    }
    assert_ne!(indices[..5], indices[5..], "two different images");

    // Naming no outputs returns the model's and the post-op's.
    let request = json!({
        "inputs": [{"name": "input", "shape": [1, 3, 224, 224], "datatype": "FP32", "data": &pixels[..3 * 224 * 224]}],
    });
    let out = app
        .post("/v2/models/effnet/infer", Some(&key), request)
        .await
        .json();
    assert_eq!(out["outputs"].as_array().unwrap().len(), 4, "{out}");
    assert_eq!(output(&out, "logits_topk_indices")["shape"], json!([1, 5]));

    // An output that neither the model nor a post-op produces is the client's error.
    let request = json!({
        "inputs": [{"name": "input", "shape": [1, 3, 224, 224], "datatype": "FP32", "data": &pixels[..3 * 224 * 224]}],
        "outputs": [{"name": "top1"}],
    });
    let resp = app
        .post("/v2/models/effnet/infer", Some(&key), request)
        .await;
    assert_eq!(resp.status, 400);
    let error = resp.error();
    assert!(error.contains("logits_topk_scores"), "{error}");

    // Loaded now: the metadata says where it runs (the CPU on this machine).
    let meta = app.get("/v2/models/effnet", Some(&key)).await.json();
    let providers = meta["execution"]["providers"].as_array().unwrap();
    assert_eq!(providers.last().unwrap(), "CPUExecutionProvider", "{meta}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_config_preprocess_takes_raw_images_like_preprocessed_input() {
    use infergate_engine::kernels::preprocess::{
        resize_normalize, ImageU8, PreprocessSpec, ResizeMode,
    };
    let app = App::start().await;
    let key = app.key("upload,infer");
    let pre = json!({"output": "input", "width": 224, "height": 224,
                     "mean": [127.0, 127.0, 127.0], "std": [128.0, 128.0, 128.0]});
    let post = json!({"op": "softmax_topk", "output": "logits", "k": 3});

    // The pre-op must produce an FP32 image input of the model.
    let resp = upload(
        &app,
        &key,
        "bad",
        json!({"infergate": {"preprocess": {"output": "input", "width": 200, "height": 224,
               "mean": [0.0, 0.0, 0.0], "std": [1.0, 1.0, 1.0]}}}),
    )
    .await;
    assert_eq!(resp.status, 400);
    let error = resp.error();
    assert!(error.contains("infergate.preprocess.output"), "{error}");

    let config =
        json!({"max_batch_size": 2, "infergate": {"preprocess": pre, "postprocess": post}});
    assert_eq!(upload(&app, &key, "effnet", config).await.status, 201);

    // A 320×200 RGB8 image sent as UINT8 [H, W, 3] under the model input's name...
    let (w, h) = (320usize, 200usize);
    let pixels: Vec<u8> = (0..w * h * 3).map(|i| ((i * 7919) % 251) as u8).collect();
    let infer = |inputs: Value| {
        let (app, key) = (&app, key.clone());
        async move {
            let body = json!({"inputs": inputs,
                              "outputs": [{"name": "logits_topk_indices"}, {"name": "logits"}]});
            let resp = app.post("/v2/models/effnet/infer", Some(&key), body).await;
            assert_eq!(resp.status, 200, "{}", resp.json());
            resp.json()
        }
    };
    let raw =
        infer(json!([{"name": "input", "shape": [h, w, 3], "datatype": "UINT8", "data": pixels}]))
            .await;
    assert_eq!(output(&raw, "logits_topk_indices")["shape"], json!([1, 3]));

    // ...answers as the same image preprocessed here and sent as FP32 [1, 3, 224, 224].
    let spec = PreprocessSpec {
        width: 224,
        height: 224,
        mean: [127.0; 3],
        std: [128.0; 3],
        mode: ResizeMode::Stretch,
    };
    let mut nchw = vec![0f32; spec.output_len_per_image()];
    resize_normalize(&[ImageU8::new(&pixels, w, h).unwrap()], &spec, &mut nchw).unwrap();
    let ready = infer(
        json!([{"name": "input", "shape": [1, 3, 224, 224], "datatype": "FP32", "data": nchw}]),
    )
    .await;
    assert_eq!(
        output(&raw, "logits_topk_indices")["data"],
        output(&ready, "logits_topk_indices")["data"]
    );
    let (a, b) = (
        floats(&output(&raw, "logits")["data"]),
        floats(&output(&ready, "logits")["data"]),
    );
    let diff = a
        .iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max);
    assert!(diff < 1e-4, "max logit difference {diff}");
}
