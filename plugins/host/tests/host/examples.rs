//! The example plugins on known inputs.

use crate::common::{host, load};
use infergate_plugin_host::{DataType, PluginFault, PostOutput, PreInput, Tensor};

fn i64s(tensor: &Tensor) -> Vec<i64> {
    assert_eq!(tensor.datatype, DataType::Int64, "{}", tensor.name);
    tensor
        .data
        .chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect()
}

fn f32_tensor(name: &str, shape: Vec<u64>, values: &[f32]) -> Tensor {
    Tensor {
        name: name.into(),
        datatype: DataType::Fp32,
        shape,
        data: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
    }
}

fn bytes_tensor(name: &str, items: &[&str]) -> Tensor {
    let mut data = Vec::new();
    for item in items {
        data.extend_from_slice(&(item.len() as u32).to_le_bytes());
        data.extend_from_slice(item.as_bytes());
    }
    Tensor {
        name: name.into(),
        datatype: DataType::Bytes,
        shape: vec![items.len() as u64],
        data,
    }
}

fn json(output: PostOutput) -> serde_json::Value {
    match output {
        PostOutput::Json(text) => serde_json::from_str(&text).expect("valid JSON"),
        other => panic!("expected JSON, got {other:?}"),
    }
}

#[test]
fn tokenizer_matches_bert_uncased_ids() {
    let host = host();
    let tokenizer = load(&host, "wordpiece-tokenizer");
    let cases: [(&str, &[i64]); 4] = [
        ("hello world", &[101, 7592, 2088, 102]),
        // Lowercasing, accent stripping, punctuation split.
        ("Héllo, WORLD!", &[101, 7592, 1010, 2088, 999, 102]),
        ("Café naïve résumé.", &[101, 7668, 15743, 13746, 1012, 102]),
        // WordPiece continuation pieces.
        ("embeddings", &[101, 7861, 8270, 4667, 2015, 102]),
    ];
    for (text, expected) in cases {
        let out = tokenizer
            .preprocess(PreInput::Bytes(text.as_bytes().to_vec()), &vec![])
            .expect("tokenize");
        let names: Vec<&str> = out.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["input_ids", "attention_mask", "token_type_ids"]);
        assert_eq!(i64s(&out[0]), expected, "{text:?}");
        assert_eq!(out[0].shape, vec![1, expected.len() as u64]);
        assert!(i64s(&out[1]).iter().all(|m| *m == 1));
        assert!(i64s(&out[2]).iter().all(|t| *t == 0));
    }
}

#[test]
fn tokenizer_pads_a_batch_to_the_longest_text() {
    let host = host();
    let tokenizer = load(&host, "wordpiece-tokenizer");
    let out = tokenizer
        .preprocess(
            PreInput::Tensors(vec![bytes_tensor("text", &["hello world", "hello"])]),
            &vec![],
        )
        .expect("tokenize batch");
    assert_eq!(out[0].shape, vec![2, 4]);
    assert_eq!(i64s(&out[0]), [101, 7592, 2088, 102, 101, 7592, 102, 0]);
    assert_eq!(i64s(&out[1]), [1, 1, 1, 1, 1, 1, 1, 0]);
}

#[test]
fn ctc_decode_collapses_repeats_and_drops_blanks() {
    const CLASSES: usize = 6625;
    // Class indices in the PP-OCRv4 charset (0 is the CTC blank).
    let (h, e, l, o, blank) = (3539, 3332, 2710, 4245, 0);
    let steps = [h, h, e, blank, l, blank, l, l, o, blank];
    let mut probs = vec![0.0f32; steps.len() * CLASSES];
    for (t, class) in steps.iter().enumerate() {
        probs[t * CLASSES + class] = 0.9;
    }
    let host = host();
    let ctc = load(&host, "ctc-decode");
    let out = ctc
        .postprocess(
            vec![f32_tensor(
                "softmax",
                vec![1, steps.len() as u64, CLASSES as u64],
                &probs,
            )],
            &vec![],
        )
        .expect("decode");
    let json = json(out);
    assert_eq!(json["texts"][0]["text"], "hello");
    let confidence = json["texts"][0]["confidence"].as_f64().expect("confidence");
    assert!((confidence - 0.9).abs() < 1e-5, "{confidence}");

    let out = ctc
        .postprocess(
            vec![f32_tensor(
                "softmax",
                vec![1, steps.len() as u64, CLASSES as u64],
                &probs,
            )],
            &vec![("output".into(), "tensor".into())],
        )
        .expect("decode to tensor");
    let PostOutput::Tensors(tensors) = out else {
        panic!("expected tensors")
    };
    assert_eq!(tensors[0].datatype, DataType::Bytes);
    assert_eq!(tensors[0].data, b"\x05\0\0\0hello");
}

#[test]
fn imagenet_top_k_labels_the_highest_scores() {
    let mut logits = vec![0.0f32; 1000];
    logits[207] = 9.0; // golden retriever
    logits[281] = 7.0; // tabby
    logits[1] = 5.0; // goldfish
    let host = host();
    let topk = load(&host, "imagenet-topk");
    let out = topk
        .postprocess(
            vec![f32_tensor("logits", vec![1, 1000], &logits)],
            &vec![("top-k".into(), "2".into())],
        )
        .expect("top-k");
    let json = json(out);
    let predictions = json["predictions"][0].as_array().expect("one image");
    assert_eq!(predictions.len(), 2);
    assert_eq!(predictions[0]["index"], 207);
    assert_eq!(predictions[0]["label"], "golden retriever");
    assert_eq!(predictions[1]["label"], "tabby");
    // Softmax over the logits: e^9 / (e^9 + e^7 + e^5 + 997 e^0).
    let expected = 9f64.exp() / (9f64.exp() + 7f64.exp() + 5f64.exp() + 997.0);
    let p0 = predictions[0]["probability"].as_f64().expect("probability");
    assert!((p0 - expected).abs() < 1e-4, "{p0} vs {expected}"); // f32 arithmetic in the plugin

    let err = topk
        .postprocess(vec![f32_tensor("logits", vec![1, 10], &[0.0; 10])], &vec![])
        .expect_err("wrong class count");
    assert_eq!(err.fault(), PluginFault::BadInput);
}

/// A 3x2 PNG: red, green, blue / (10,20,30), (200,100,50), white.
const PNG: &str = "89504e470d0a1a0a0000000d49484452000000030000000208020000001216f14d0000001849444154789c63f8cfc0c000c15c227227528cfeffff0f003c190795efc2c6d80000000049454e44ae426082";
/// A 16x8 JPEG filled with (40,120,200).
const JPEG: &str = "ffd8ffe000104a46494600010100000100010000ffdb0043000201010101010201010102020202020403020202020504040304060506060605060606070908060709070606080b08090a0a0a0a0a06080b0c0b0a0c090a0a0affdb004301020202020202050303050a0706070a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0affc00011080008001003012200021101031101ffc4001f0000010501010101010100000000000000000102030405060708090a0bffc400b5100002010303020403050504040000017d01020300041105122131410613516107227114328191a1082342b1c11552d1f02433627282090a161718191a25262728292a3435363738393a434445464748494a535455565758595a636465666768696a737475767778797a838485868788898a92939495969798999aa2a3a4a5a6a7a8a9aab2b3b4b5b6b7b8b9bac2c3c4c5c6c7c8c9cad2d3d4d5d6d7d8d9dae1e2e3e4e5e6e7e8e9eaf1f2f3f4f5f6f7f8f9faffc4001f0100030101010101010101010000000000000102030405060708090a0bffc400b51100020102040403040705040400010277000102031104052131061241510761711322328108144291a1b1c109233352f0156272d10a162434e125f11718191a262728292a35363738393a434445464748494a535455565758595a636465666768696a737475767778797a82838485868788898a92939495969798999aa2a3a4a5a6a7a8a9aab2b3b4b5b6b7b8b9bac2c3c4c5c6c7c8c9cad2d3d4d5d6d7d8d9dae2e3e4e5e6e7e8e9eaf2f3f4f5f6f7f8f9faffda000c03010002110311003f00f23a28a2bfb50fe433ffd9";

#[test]
fn image_decode_png_and_jpeg_to_rgb8() {
    let host = host();
    let decode = load(&host, "image-decode");
    let out = decode
        .preprocess(PreInput::Bytes(hex::decode(PNG).expect("hex")), &vec![])
        .expect("decode png");
    assert_eq!(out[0].name, "image");
    assert_eq!(out[0].datatype, DataType::Uint8);
    assert_eq!(out[0].shape, vec![2, 3, 3]);
    assert_eq!(
        out[0].data,
        [255, 0, 0, 0, 255, 0, 0, 0, 255, 10, 20, 30, 200, 100, 50, 255, 255, 255]
    );

    // The same, sent as a KServe bytes tensor.
    let jpeg = hex::decode(JPEG).expect("hex");
    let mut data = (jpeg.len() as u32).to_le_bytes().to_vec();
    data.extend_from_slice(&jpeg);
    let tensor = Tensor {
        name: "image".into(),
        datatype: DataType::Bytes,
        shape: vec![1],
        data,
    };
    let out = decode
        .preprocess(PreInput::Tensors(vec![tensor]), &vec![])
        .expect("decode jpeg");
    assert_eq!(out[0].shape, vec![8, 16, 3]);
    for pixel in out[0].data.chunks_exact(3) {
        for (got, want) in pixel.iter().zip([40u8, 120, 200]) {
            assert!(got.abs_diff(want) <= 3, "{pixel:?}");
        }
    }
}

#[test]
fn passthrough_round_trips_a_600_kib_tensor() {
    let host = host();
    let passthrough = load(&host, "passthrough");
    let input = f32_tensor(
        "pixels",
        vec![1, 3, 224, 224],
        &(0..3 * 224 * 224).map(|i| i as f32).collect::<Vec<_>>(),
    );
    let out = passthrough
        .preprocess(PreInput::Tensors(vec![input.clone()]), &vec![])
        .expect("pass through");
    assert_eq!(out, vec![input.clone()]);
    match passthrough
        .postprocess(vec![input.clone()], &vec![])
        .expect("post")
    {
        PostOutput::Tensors(t) => assert_eq!(t, vec![input]),
        other => panic!("{other:?}"),
    }
}

/// Output tensor data reuses the input's buffers (see `scope.rs`): with
/// several tensors of different sizes, each output must still get its own
/// bytes, in order, larger than any single page and than the arena's slack.
#[test]
fn passthrough_keeps_many_tensors_of_different_sizes_apart() {
    let host = host();
    let passthrough = load(&host, "passthrough");
    let tensors: Vec<Tensor> = [0usize, 3, 70_000, 1 << 20, 200_000, 16]
        .iter()
        .enumerate()
        .map(|(i, &n)| Tensor {
            name: format!("t{i}"),
            datatype: DataType::Uint8,
            shape: vec![n as u64],
            data: (0..n).map(|j| (j * 7 + i * 13) as u8).collect(),
        })
        .collect();
    let out = passthrough
        .preprocess(PreInput::Tensors(tensors.clone()), &vec![])
        .expect("pass through");
    assert_eq!(out, tensors);
    let body: Vec<u8> = (0..300_000).map(|j| (j % 251) as u8).collect();
    let out = passthrough
        .preprocess(PreInput::Bytes(body.clone()), &vec![])
        .expect("bytes");
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].data, body);
    match passthrough
        .postprocess(tensors.clone(), &vec![])
        .expect("post")
    {
        PostOutput::Tensors(t) => assert_eq!(t, tensors),
        other => panic!("{other:?}"),
    }
}

#[test]
fn plugins_describe_themselves() {
    let host = host();
    for (name, kind) in [
        ("image-decode", infergate_plugin_host::PluginKind::Pre),
        (
            "wordpiece-tokenizer",
            infergate_plugin_host::PluginKind::Pre,
        ),
        ("ctc-decode", infergate_plugin_host::PluginKind::Post),
        ("imagenet-topk", infergate_plugin_host::PluginKind::Post),
    ] {
        let plugin = load(&host, name);
        let d = plugin.description();
        assert_eq!(
            (d.name.as_str(), d.version.as_str(), d.kind),
            (name, "0.1.0", kind)
        );
        assert!(!d.consumes.is_empty() && !d.produces.is_empty());
    }
}
