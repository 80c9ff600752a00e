//! Tensors and parameters between Triton's protobuf messages and the gateway's types. Inputs
//! come as typed `contents` or as `raw_input_contents` (one entry per input, what tritonclient
//! and perf_analyzer send); outputs always go out as `raw_output_contents`, as Triton answers.

pub use crate::codec::SharedInput;
use crate::proto::infer_parameter::ParameterChoice;
use crate::proto::model_infer_request::InferInputTensor;
use crate::proto::model_infer_response::InferOutputTensor;
use crate::proto::{InferParameter, InferTensorContents, ModelInferRequest, ModelInferResponse};
use infergate_engine::{DataType, Tensor, TensorData};
use infergate_protocol::contents::{self, TypedContents};
use infergate_protocol::kserve::{InferRequest, RequestedOutput};
use infergate_protocol::{binary, limits};
use infergate_service::error::{ApiError, ApiResult};
use infergate_service::infer::Inferred;
use serde_json::{Map, Value};
use std::collections::HashMap;

/// A version field: empty means the version the model's policy serves by default.
pub fn version(text: &str) -> ApiResult<Option<u64>> {
    if text.is_empty() {
        Ok(None)
    } else {
        infergate_service::names::parse_version(text).map(Some)
    }
}

fn parameter_value(parameter: &InferParameter) -> Value {
    match &parameter.parameter_choice {
        Some(ParameterChoice::BoolParam(b)) => Value::Bool(*b),
        Some(ParameterChoice::Int64Param(i)) => Value::from(*i),
        Some(ParameterChoice::Uint64Param(u)) => Value::from(*u),
        Some(ParameterChoice::DoubleParam(d)) => {
            serde_json::Number::from_f64(*d).map_or(Value::Null, Value::Number)
        }
        Some(ParameterChoice::StringParam(s)) => Value::String(s.clone()),
        None => Value::Null,
    }
}

fn parameters(map: &HashMap<String, InferParameter>) -> Map<String, Value> {
    map.iter()
        .map(|(name, p)| (name.clone(), parameter_value(p)))
        .collect()
}

/// The request as the shared KServe code reads it: id, parameters (`priority`, `timeout`,
/// pipeline metadata) and requested outputs. The tensors are decoded by [`decode_inputs`].
pub fn request(message: &ModelInferRequest) -> InferRequest {
    InferRequest {
        id: (!message.id.is_empty()).then(|| message.id.clone()),
        parameters: parameters(&message.parameters),
        inputs: Vec::new(),
        outputs: message
            .outputs
            .iter()
            .map(|o| RequestedOutput {
                name: o.name.clone(),
                parameters: parameters(&o.parameters),
            })
            .collect(),
    }
}

/// Decodes every input; errors are the client's (INVALID_ARGUMENT) and name the tensor.
pub fn decode_inputs(message: &ModelInferRequest) -> ApiResult<Vec<Tensor>> {
    decode_inputs_with(message, &mut |_, _, _| Ok(None))
}

/// [`decode_inputs`], reading the inputs that name a shared-memory region with `shared`. Those
/// carry no `raw_input_contents` entry (as tritonclient sends them): the raw entries belong to
/// the other inputs, in order.
pub fn decode_inputs_with(
    message: &ModelInferRequest,
    shared: &mut SharedInput<'_>,
) -> ApiResult<Vec<Tensor>> {
    let raw = &message.raw_input_contents;
    let in_shared_memory = |input: &InferInputTensor| {
        input
            .parameters
            .contains_key(infergate_protocol::kserve::SHARED_MEMORY_REGION)
    };
    let carried = message
        .inputs
        .iter()
        .filter(|input| !in_shared_memory(input))
        .count();
    if !raw.is_empty() && raw.len() != carried {
        return Err(ApiError::bad_request(format!(
            "{} raw_input_contents for {carried} inputs not in shared memory: send one per input, in the inputs' order",
            raw.len(),
        )));
    }
    let mut tensors = Vec::with_capacity(message.inputs.len());
    let mut next_raw = 0;
    for input in &message.inputs {
        let bad = |m: String| ApiError::bad_request(format!("input '{}': {m}", input.name));
        let datatype = DataType::from_name(&input.datatype)
            .ok_or_else(|| bad(format!("unknown datatype '{}'", input.datatype)))?;
        let count = limits::declared_elements(&input.shape).map_err(bad)?;
        if in_shared_memory(input) {
            if input.contents.is_some() {
                return Err(bad(
                    "contents must be empty when shared_memory_region is used".into(),
                ));
            }
            let data = shared(&parameters(&input.parameters), datatype, count)?
                .ok_or_else(|| bad("shared memory is not available on this endpoint".into()))?;
            tensors.push(Tensor {
                name: input.name.clone(),
                datatype,
                shape: input.shape.clone(),
                data,
            });
            continue;
        }
        let own_raw = raw.get(next_raw);
        if own_raw.is_some() {
            next_raw += 1;
        }
        let data = match (own_raw, &input.contents) {
            (Some(_), Some(_)) => {
                return Err(bad(
                    "contents must be empty when raw_input_contents is used".into(),
                ))
            }
            (Some(bytes), None) => binary::decode(datatype, count, bytes).map_err(bad)?,
            (None, Some(c)) => contents::decode(datatype, count, &typed(c)).map_err(bad)?,
            (None, None) => return Err(bad("no contents and no raw_input_contents".into())),
        };
        tensors.push(Tensor {
            name: input.name.clone(),
            datatype,
            shape: input.shape.clone(),
            data,
        });
    }
    Ok(tensors)
}

/// Typed contents as the protocol crate reads them.
fn typed(c: &InferTensorContents) -> TypedContents<'_> {
    TypedContents {
        bool_contents: &c.bool_contents,
        int_contents: &c.int_contents,
        int64_contents: &c.int64_contents,
        uint_contents: &c.uint_contents,
        uint64_contents: &c.uint64_contents,
        fp32_contents: &c.fp32_contents,
        fp64_contents: &c.fp64_contents,
        bytes_contents: &c.bytes_contents,
    }
}

/// The answer: output metadata plus one raw entry per output, in the same order.
pub fn response(inferred: Inferred, id: String) -> ModelInferResponse {
    response_with(inferred, id, &[])
}

/// [`response`], with the outputs in `shared` (written into the client's shared memory
/// already) named rather than carried: their raw entry is empty, so that the entries keep the
/// outputs' order as clients index them.
pub fn response_with(inferred: Inferred, id: String, shared: &[&str]) -> ModelInferResponse {
    let mut outputs = Vec::with_capacity(inferred.outputs.len());
    let mut raw = Vec::with_capacity(inferred.outputs.len());
    for tensor in inferred.outputs {
        let mut parameters = HashMap::new();
        if shared.contains(&tensor.name.as_str()) {
            let size = binary::encoded_len(&tensor) as i64;
            parameters.insert(
                "shared_memory_byte_size".to_string(),
                InferParameter {
                    parameter_choice: Some(ParameterChoice::Int64Param(size)),
                },
            );
            outputs.push(InferOutputTensor {
                name: tensor.name,
                datatype: tensor.datatype.name().to_string(),
                shape: tensor.shape,
                parameters,
                contents: None,
            });
            raw.push(Vec::new());
            continue;
        }
        outputs.push(InferOutputTensor {
            name: tensor.name.clone(),
            datatype: tensor.datatype.name().to_string(),
            shape: tensor.shape.clone(),
            parameters,
            contents: None,
        });
        raw.push(match tensor.data {
            TensorData::Raw(bytes) => bytes,
            TensorData::Bytes(_) => {
                let mut bytes = Vec::new();
                binary::encode(&tensor, &mut bytes);
                bytes
            }
        });
    }
    ModelInferResponse {
        model_name: inferred.model,
        model_version: inferred.version.to_string(),
        id,
        parameters: HashMap::new(),
        outputs,
        raw_output_contents: raw,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::model_infer_request::InferInputTensor;

    fn input(datatype: &str, shape: Vec<i64>, contents: InferTensorContents) -> InferInputTensor {
        InferInputTensor {
            name: "x".into(),
            datatype: datatype.into(),
            shape,
            parameters: HashMap::new(),
            contents: Some(contents),
        }
    }

    #[test]
    fn typed_and_raw_contents_decode_to_the_same_tensor() {
        let typed = ModelInferRequest {
            inputs: vec![input(
                "INT16",
                vec![2],
                InferTensorContents {
                    int_contents: vec![-2, 300],
                    ..Default::default()
                },
            )],
            ..Default::default()
        };
        let mut raw = typed.clone();
        raw.inputs[0].contents = None;
        raw.raw_input_contents = vec![[(-2i16).to_le_bytes(), 300i16.to_le_bytes()].concat()];
        assert_eq!(decode_inputs(&typed).unwrap(), decode_inputs(&raw).unwrap());
    }

    #[test]
    fn bad_inputs_are_client_errors_naming_the_tensor() {
        let out_of_range = input(
            "INT8",
            vec![1],
            InferTensorContents {
                int_contents: vec![300],
                ..Default::default()
            },
        );
        let wrong_count = input(
            "FP32",
            vec![3],
            InferTensorContents {
                fp32_contents: vec![1.0],
                ..Default::default()
            },
        );
        let fp16 = input("FP16", vec![1], InferTensorContents::default());
        for bad in [out_of_range, wrong_count, fp16] {
            let request = ModelInferRequest {
                inputs: vec![bad],
                ..Default::default()
            };
            let e = decode_inputs(&request).unwrap_err();
            assert_eq!(e.kind, infergate_service::error::Kind::Invalid);
            assert!(e.message.contains("input 'x'"), "{}", e.message);
        }
        let missing_raw = ModelInferRequest {
            inputs: vec![input("FP32", vec![1], InferTensorContents::default())],
            raw_input_contents: vec![vec![0; 4], vec![0; 4]],
            ..Default::default()
        };
        assert!(decode_inputs(&missing_raw)
            .unwrap_err()
            .message
            .contains("one per input"));
    }

    #[test]
    fn outputs_go_out_raw_in_order() {
        let inferred = Inferred {
            model: "m".into(),
            version: 3,
            outputs: vec![
                Tensor::from_f32("a", vec![2], &[1.0, 2.0]).unwrap(),
                Tensor {
                    name: "s".into(),
                    datatype: DataType::Bytes,
                    shape: vec![1],
                    data: TensorData::Bytes(vec![b"hi".to_vec()]),
                },
            ],
            served: None,
            times: None,
            passage: Default::default(),
        };
        let r = response(inferred, "req-1".into());
        assert_eq!((r.model_version.as_str(), r.id.as_str()), ("3", "req-1"));
        assert_eq!(r.outputs[1].datatype, "BYTES");
        assert_eq!(
            r.raw_output_contents[0],
            [1.0f32.to_le_bytes(), 2.0f32.to_le_bytes()].concat()
        );
        assert_eq!(
            r.raw_output_contents[1],
            [&2u32.to_le_bytes()[..], b"hi"].concat()
        );
    }
}
