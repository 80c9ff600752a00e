//! What each fuzz target checks, shared by the libFuzzer targets (`fuzz_targets/`) and the
//! stable replay of the corpus and regression inputs (`replay.rs`, run by `cargo test`).
//! Beyond "never panics, never aborts": decoded tensors match their declared shape, and what
//! decodes re-encodes to the same tensors.

use infergate_engine::config::ModelConfig;
use infergate_protocol::contents::{self, TypedContents};
use infergate_protocol::kserve::{decode_inputs, encode_response, parse_request, InferRequest};
use infergate_protocol::message::{inference_request, Incoming};
use infergate_protocol::tensor::{DataType, Tensor};
use infergate_protocol::{binary, limits};

/// What a target checks: one input, panicking on a defect.
pub type Check = fn(&[u8]);

/// The fuzz targets by name, as `fuzz_targets/NAME.rs` and `corpus/NAME/` call them.
pub const TARGETS: &[(&str, Check)] = &[
    ("kserve_json", kserve_json),
    ("kserve_binary", kserve_binary),
    ("grpc_contents", grpc_contents),
    ("websocket_message", websocket_message),
    ("model_config", model_config),
];

/// Decoded tensors must match their shapes, and survive being encoded as an answer (JSON or
/// binary) and decoded again. Not those JSON cannot carry (binary input may): NaN and infinite
/// elements (answered as null) and BYTES that are not UTF-8 (answered lossily as strings).
fn check_decoded(request: &InferRequest, tensors: &[Tensor]) {
    for t in tensors {
        assert!(t.check().is_ok(), "decoded {t:?} does not match its shape");
    }
    if !tensors.iter().all(fits_json) {
        return;
    }
    let (body, json_len) =
        encode_response(request, "m", 1, tensors).expect("decoded tensors encode");
    let (head, tail) = binary::split_body(&body, json_len).expect("the answer splits");
    let answer: serde_json::Value = serde_json::from_slice(head).expect("the answer is JSON");
    let again = serde_json::json!({"inputs": answer["outputs"]});
    let mut again = parse_request(&serde_json::to_vec(&again).expect("JSON")).expect("parses");
    let decoded = decode_inputs(&mut again, tail).expect("an answer decodes as a request");
    assert_eq!(decoded, tensors, "tensors changed on the way back");
}

fn fits_json(t: &Tensor) -> bool {
    !has_nan(t)
        && match &t.data {
            infergate_protocol::tensor::TensorData::Bytes(items) => {
                items.iter().all(|b| std::str::from_utf8(b).is_ok())
            }
            infergate_protocol::tensor::TensorData::Raw(_) => true,
        }
}

fn has_nan(t: &Tensor) -> bool {
    let infergate_protocol::tensor::TensorData::Raw(raw) = &t.data else {
        return false;
    };
    match t.datatype {
        DataType::Fp16 => raw
            .chunks_exact(2)
            .any(|c| !half::f16::from_le_bytes([c[0], c[1]]).is_finite()),
        DataType::Fp32 => raw
            .chunks_exact(4)
            .any(|c| !f32::from_le_bytes([c[0], c[1], c[2], c[3]]).is_finite()),
        DataType::Fp64 => raw
            .chunks_exact(8)
            .any(|c| !f64::from_le_bytes(c.try_into().unwrap_or([0; 8])).is_finite()),
        _ => false,
    }
}

/// A KServe JSON request body.
pub fn kserve_json(data: &[u8]) {
    if let Ok(mut request) = parse_request(data) {
        if let Ok(tensors) = decode_inputs(&mut request, &[]) {
            check_decoded(&request, &tensors);
        }
    }
}

/// A binary-extension body: the first two bytes are the JSON header's length
/// (`Inference-Header-Content-Length`), the rest the body.
pub fn kserve_binary(data: &[u8]) {
    let Some((len, body)) = data.split_first_chunk::<2>() else {
        return;
    };
    let header_len = usize::from(u16::from_le_bytes(*len));
    let Ok((head, tail)) = binary::split_body(body, Some(header_len)) else {
        return;
    };
    if let Ok(mut request) = parse_request(head) {
        if let Ok(tensors) = decode_inputs(&mut request, tail) {
            check_decoded(&request, &tensors);
        }
    }
}

/// One gRPC input tensor: datatype, rank, dimensions (8 bytes each), then either
/// `raw_input_contents` or typed contents made from the remaining bytes.
pub fn grpc_contents(data: &[u8]) {
    let [kind, rank, rest @ ..] = data else {
        return;
    };
    let datatype = DataType::ALL[usize::from(*kind) % DataType::ALL.len()];
    let rank = usize::from(*rank % 5);
    if rest.len() < 8 * rank + 1 {
        return;
    }
    let (dims, rest) = rest.split_at(8 * rank);
    let shape: Vec<i64> = dims
        .chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
        .collect();
    let (raw, payload) = (rest[0] & 1 == 1, &rest[1..]);
    let Ok(count) = limits::declared_elements(&shape) else {
        return;
    };
    let decoded = if raw {
        binary::decode(datatype, count, payload)
    } else {
        let words = |n: usize| payload.chunks_exact(n);
        let int: Vec<i32> = words(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let uint: Vec<u32> = int.iter().map(|&x| x as u32).collect();
        let fp32: Vec<f32> = uint.iter().map(|&x| f32::from_bits(x)).collect();
        let int64: Vec<i64> = words(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
            .collect();
        let uint64: Vec<u64> = int64.iter().map(|&x| x as u64).collect();
        let fp64: Vec<f64> = uint64.iter().map(|&x| f64::from_bits(x)).collect();
        let bools: Vec<bool> = payload.iter().map(|b| b & 1 == 1).collect();
        let bytes: Vec<Vec<u8>> = payload.split(|&b| b == 0).map(<[u8]>::to_vec).collect();
        let typed = TypedContents {
            bool_contents: &bools,
            int_contents: &int,
            int64_contents: &int64,
            uint_contents: &uint,
            uint64_contents: &uint64,
            fp32_contents: &fp32,
            fp64_contents: &fp64,
            bytes_contents: &bytes,
        };
        contents::decode(datatype, count, &typed)
    };
    if let Ok(data) = decoded {
        let t = Tensor {
            name: "x".into(),
            datatype,
            shape,
            data,
        };
        assert!(t.check().is_ok(), "decoded {t:?} does not match its shape");
    }
}

/// A WebSocket text message, classified and, when it is an inference request, decoded.
pub fn websocket_message(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Incoming::Request(_, body) = Incoming::parse(text) {
        if let Ok(mut request) = inference_request(body) {
            if let Ok(tensors) = decode_inputs(&mut request, &[]) {
                check_decoded(&request, &tensors);
            }
        }
    }
}

/// A model configuration as `PUT /api/models/{name}/config` takes it: what parses and
/// validates must come back unchanged from its stored JSON.
pub fn model_config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(config) = ModelConfig::from_json_str(text) {
        let stored = config.to_json();
        let again = ModelConfig::from_json(&stored).expect("a stored config parses again");
        assert_eq!(again, config, "stored as {stored}");
    }
}
