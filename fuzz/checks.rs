//! What each fuzz target checks, shared by the libFuzzer targets (`fuzz_targets/`) and the
//! stable replay of the corpus and regression inputs (`replay.rs`, run by `cargo test`).
//! Beyond "never panics, never aborts": decoded tensors match their declared shape, and what
//! decodes re-encodes to the same tensors.

use infergate_engine::config::ModelConfig;
use infergate_protocol::contents::{self, TypedContents};
use infergate_protocol::kserve::{decode_inputs, encode_response, parse_request, InferRequest};
use infergate_protocol::message::{inference_request, Incoming};
use infergate_protocol::tensor::{DataType, Tensor, TensorData};
use infergate_protocol::{binary, limits};
use pipeline::PipelineSpecExt;

// Gateway and plugin-host code that needs neither (each file is self-contained), built here
// without them: the gateway's dependencies are too heavy for sanitizer builds. Only the
// parsing and checking parts are used here.
#[allow(dead_code)]
#[path = "../gateway/service/src/openai_request.rs"]
mod openai;
#[allow(dead_code)]
#[path = "../gateway/service/src/pipelines/spec.rs"]
mod pipeline;
#[allow(dead_code)]
#[path = "../plugins/host/src/types.rs"]
mod plugin_types;

/// What a target checks: one input, panicking on a defect.
pub type Check = fn(&[u8]);

/// The fuzz targets by name, as `fuzz_targets/NAME.rs` and `corpus/NAME/` call them.
pub const TARGETS: &[(&str, Check)] = &[
    ("kserve_json", kserve_json),
    ("kserve_binary", kserve_binary),
    ("grpc_contents", grpc_contents),
    ("websocket_message", websocket_message),
    ("model_config", model_config),
    ("pipeline_spec", pipeline_spec),
    ("openai_request", openai_request),
    ("plugin_output", plugin_output),
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

/// A pipeline spec as `PUT /api/pipelines/{name}` takes it: what parses and validates is
/// saved as its normalized JSON, which must parse again to the same spec (saved pipelines are
/// parsed again at every start), and every plugin reference must print as it parses.
pub fn pipeline_spec(data: &[u8]) {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let Ok(spec) = pipeline::PipelineSpec::from_json(&value) else {
        return;
    };
    let saved = serde_json::to_value(&spec).expect("a spec serializes");
    let again = pipeline::PipelineSpec::from_json(&saved).expect("a saved spec parses again");
    assert_eq!(
        serde_json::to_value(&again).expect("a spec serializes"),
        saved,
        "changed on the way back"
    );
    let refs = spec.pre_refs().expect("validated");
    for r in refs.iter().chain(&spec.post_refs().expect("validated")) {
        assert_eq!(
            &pipeline::PluginRef::parse(&r.to_string()).expect("a printed reference parses"),
            r
        );
    }
}

/// A tensor as a plugin returns it: datatype, rank (its top bit: 8-byte dimensions, else 2),
/// dimensions, then the data. The plugin host's layout check (`Tensor::check_layout`, applied
/// to every tensor a plugin returns) and the protocol decoders the gateway then converts it
/// with (`pipeline::convert::from_host`) must agree on what is well-formed, so a plugin can
/// neither get a malformed tensor past the host nor have a well-formed one refused.
pub fn plugin_output(data: &[u8]) {
    let [kind, rank, rest @ ..] = data else {
        return;
    };
    let datatype = DataType::ALL[usize::from(*kind) % DataType::ALL.len()];
    let (wide, rank) = (rank & 0x80 != 0, usize::from(*rank % 5));
    let width = if wide { 8 } else { 2 };
    if rest.len() < width * rank {
        return;
    }
    let (dims, payload) = rest.split_at(width * rank);
    let shape: Vec<u64> = dims
        .chunks_exact(width)
        .map(|c| {
            let mut le = [0; 8];
            le[..width].copy_from_slice(c);
            u64::from_le_bytes(le)
        })
        .collect();
    let tensor = plugin_types::Tensor {
        name: "t".into(),
        datatype: plugin_types::DataType::from_name(datatype.name())
            .expect("the host knows every KServe datatype"),
        shape: shape.clone(),
        data: payload.to_vec(),
    };
    let host = tensor.check_layout();
    // The gateway refuses dimensions beyond i64 and counts beyond usize whatever the host says.
    let Ok(shape) = shape
        .iter()
        .map(|&d| i64::try_from(d))
        .collect::<Result<Vec<_>, _>>()
    else {
        return;
    };
    let Ok(count) = limits::declared_elements(&shape) else {
        return;
    };
    let converted = if datatype == DataType::Bytes {
        binary::decode(datatype, count, payload)
    } else {
        Ok(TensorData::Raw(payload.to_vec()))
    }
    .and_then(|data| Tensor::new("t", datatype, shape, data).map_err(|e| e.to_string()));
    match (host, converted) {
        (Ok(()), Ok(t)) => assert_eq!(t.element_count(), Some(count)),
        (Err(_), Err(_)) => {}
        (host, converted) => panic!("the host says {host:?}, the gateway {converted:?}"),
    }
}

/// An OpenAI body as `/v1/completions`, `/v1/chat/completions` and `/v1/embeddings` read it
/// before any work (the same bytes tried as each): parsing and the checks never panic, and
/// what passes them is within what they promise.
pub fn openai_request(data: &[u8]) {
    const LIMIT: u32 = 1024;
    let within = |sampling: Result<openai::Sampling, _>| {
        if let Ok(s) = sampling {
            assert!(s.max_tokens <= LIMIT, "{s:?}");
            let _ = s.validate();
        }
    };
    if let Ok(r) = openai::parse::<openai::CompletionRequest>(data) {
        let _ = r.prompt();
        within(r.common.sampling(16, LIMIT));
    }
    if let Ok(r) = openai::parse::<openai::ChatRequest>(data) {
        let _ = r.prompt();
        within(r.common.sampling(256, LIMIT));
    }
    if let Ok(r) = openai::parse::<openai::EmbeddingRequest>(data) {
        let _ = r.base64();
        if let Ok(texts) = r.texts() {
            assert!((1..=openai::MAX_EMBEDDING_INPUTS).contains(&texts.len()));
            assert!(texts.iter().all(|t| !t.is_empty()));
        }
    }
}
