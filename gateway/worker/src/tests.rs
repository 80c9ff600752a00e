//! What the manager sends a worker ([`infergate_hop::remote`]) as the worker reads it (the
//! KServe decoding every protocol shares), and the worker's answer read back by the manager.

use infergate_engine::preprocess::ResizeNormalize;
use infergate_engine::{DataType, InferOptions, Tensor, TensorData};
use infergate_hop::remote::{decode, encode, encode_stage, stage_ops, STAGE_OPS_PARAMETER};
use infergate_protocol::kserve::{self, HEADER_LENGTH};
use serde_json::json;
use std::time::Duration;

#[test]
fn an_encoded_request_decodes_on_the_worker_and_an_answer_decodes_back() {
    let x = Tensor {
        name: "x".into(),
        datatype: DataType::Fp32,
        shape: vec![1, 2],
        data: TensorData::Raw(
            [1.5f32, -2.0]
                .iter()
                .flat_map(|f| f.to_le_bytes())
                .collect(),
        ),
    };
    let options = InferOptions {
        priority: 2,
        timeout: Some(Duration::from_millis(5)),
    };
    let encoded = encode(std::slice::from_ref(&x), &["y".into()], options);
    let mut headers = http::HeaderMap::new();
    if let Some(len) = encoded.header_len() {
        headers.insert(HEADER_LENGTH, len.into());
    }
    let (request, inputs) = infergate_kserve::codec::decode(&headers, encoded.body()).unwrap();
    assert_eq!(inputs, vec![x.clone()]);
    let parsed = infergate_service::infer::Request::kserve(&request, inputs).unwrap();
    assert_eq!(parsed.options, options);
    assert_eq!(parsed.outputs, ["y"]);
    // The worker answers in binary, as asked; the manager decodes the same tensors.
    let (body, header_len) =
        kserve::encode_response(&request, "m", 1, std::slice::from_ref(&x)).unwrap();
    assert!(header_len.is_some());
    assert_eq!(decode(&body, header_len).unwrap(), vec![x]);
}

#[test]
fn a_stage_request_carries_its_op_and_the_worker_reads_it_back() {
    let image = Tensor {
        name: "image".into(),
        datatype: DataType::Uint8,
        shape: vec![2, 3, 3],
        data: TensorData::Raw((0u8..18).collect()),
    };
    let op: ResizeNormalize = serde_json::from_value(json!({
        "output": "input", "width": 4, "height": 4,
        "mean": [127, 127, 127], "std": [128, 128, 128], "mode": "letterbox", "pad": 9
    }))
    .unwrap();
    let encoded = encode_stage(
        std::slice::from_ref(&image),
        &op,
        &[],
        InferOptions::default(),
    );
    assert!(encoded.is_stage());
    assert!(!encode(std::slice::from_ref(&image), &[], InferOptions::default()).is_stage());
    let mut headers = http::HeaderMap::new();
    if let Some(len) = encoded.header_len() {
        headers.insert(HEADER_LENGTH, len.into());
    }
    let (request, inputs) = infergate_kserve::codec::decode(&headers, encoded.body()).unwrap();
    assert_eq!(inputs, vec![image]);
    assert_eq!(stage_ops(&request).unwrap(), op);
    // The op's parameter is not a scalar: plugins and options never see it.
    let parsed = infergate_service::infer::Request::kserve(&request, inputs).unwrap();
    assert!(
        parsed
            .parameters
            .iter()
            .all(|(k, _)| k != STAGE_OPS_PARAMETER),
        "{:?}",
        parsed.parameters
    );
}
