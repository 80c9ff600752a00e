//! Tensors and parameters between Triton's protobuf messages and the gateway's types. Inputs
//! come as typed `contents` or as `raw_input_contents` (one entry per input, what tritonclient
//! and perf_analyzer send); outputs always go out as `raw_output_contents`, as Triton answers.

use super::proto::infer_parameter::ParameterChoice;
use super::proto::model_infer_response::InferOutputTensor;
use super::proto::{InferParameter, InferTensorContents, ModelInferRequest, ModelInferResponse};
use crate::api::codec::{self, InferRequest, RequestedOutput};
use crate::api::kserve::Inferred;
use crate::error::{ApiError, ApiResult};
use infergate_engine::tensor::element_count;
use infergate_engine::{DataType, Tensor, TensorData};
use serde_json::{Map, Value};
use std::collections::HashMap;

/// A version field: empty means the version the model's policy serves by default.
pub fn version(text: &str) -> ApiResult<Option<u64>> {
    if text.is_empty() {
        Ok(None)
    } else {
        crate::state::parse_version(text).map(Some)
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
    let raw = &message.raw_input_contents;
    if !raw.is_empty() && raw.len() != message.inputs.len() {
        return Err(ApiError::bad_request(format!(
            "{} raw_input_contents for {} inputs: send one per input, in the inputs' order",
            raw.len(),
            message.inputs.len()
        )));
    }
    let mut tensors = Vec::with_capacity(message.inputs.len());
    for (i, input) in message.inputs.iter().enumerate() {
        let bad = |m: String| ApiError::bad_request(format!("input '{}': {m}", input.name));
        let datatype = DataType::from_name(&input.datatype)
            .ok_or_else(|| bad(format!("unknown datatype '{}'", input.datatype)))?;
        let count = element_count(&input.shape)
            .ok_or_else(|| bad(format!("invalid shape {:?}", input.shape)))?;
        let data = match (raw.get(i), &input.contents) {
            (Some(_), Some(_)) => {
                return Err(bad(
                    "contents must be empty when raw_input_contents is used".into(),
                ))
            }
            (Some(bytes), None) => codec::decode_binary(datatype, count, bytes).map_err(bad)?,
            (None, Some(contents)) => decode_typed(datatype, count, contents).map_err(bad)?,
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

fn exactly<'a, T>(items: &'a [T], count: usize, field: &str) -> Result<&'a [T], String> {
    if items.len() == count {
        Ok(items)
    } else {
        Err(format!(
            "{} elements in contents.{field}, shape needs {count}",
            items.len()
        ))
    }
}

/// Typed contents as little-endian bytes: narrower integer types travel in the 32-bit fields
/// and must fit their datatype.
fn decode_typed(
    datatype: DataType,
    count: usize,
    c: &InferTensorContents,
) -> Result<TensorData, String> {
    macro_rules! le {
        ($field:ident, $t:ty) => {{
            let items = exactly(&c.$field, count, stringify!($field))?;
            let mut out = Vec::with_capacity(count * std::mem::size_of::<$t>());
            for &x in items {
                let x =
                    <$t>::try_from(x).map_err(|_| format!("{x} is out of range for {datatype}"))?;
                out.extend_from_slice(&x.to_le_bytes());
            }
            TensorData::Raw(out)
        }};
    }
    macro_rules! floats {
        ($field:ident) => {{
            let items = exactly(&c.$field, count, stringify!($field))?;
            TensorData::Raw(items.iter().flat_map(|x| x.to_le_bytes()).collect())
        }};
    }
    Ok(match datatype {
        DataType::Bool => TensorData::Raw(
            exactly(&c.bool_contents, count, "bool_contents")?
                .iter()
                .map(|&b| b as u8)
                .collect(),
        ),
        DataType::Int8 => le!(int_contents, i8),
        DataType::Int16 => le!(int_contents, i16),
        DataType::Int32 => le!(int_contents, i32),
        DataType::Int64 => le!(int64_contents, i64),
        DataType::Uint8 => le!(uint_contents, u8),
        DataType::Uint16 => le!(uint_contents, u16),
        DataType::Uint32 => le!(uint_contents, u32),
        DataType::Uint64 => le!(uint64_contents, u64),
        DataType::Fp32 => floats!(fp32_contents),
        DataType::Fp64 => floats!(fp64_contents),
        DataType::Fp16 => {
            return Err("FP16 has no typed contents field: send it in raw_input_contents".into())
        }
        DataType::Bytes => {
            TensorData::Bytes(exactly(&c.bytes_contents, count, "bytes_contents")?.to_vec())
        }
    })
}

/// The answer: output metadata plus one raw entry per output, in the same order.
pub fn response(inferred: Inferred, id: String) -> ModelInferResponse {
    let mut outputs = Vec::with_capacity(inferred.outputs.len());
    let mut raw = Vec::with_capacity(inferred.outputs.len());
    for tensor in inferred.outputs {
        outputs.push(InferOutputTensor {
            name: tensor.name.clone(),
            datatype: tensor.datatype.name().to_string(),
            shape: tensor.shape.clone(),
            parameters: HashMap::new(),
            contents: None,
        });
        raw.push(match tensor.data {
            TensorData::Raw(bytes) => bytes,
            TensorData::Bytes(_) => {
                let mut bytes = Vec::new();
                codec::to_binary(&tensor, &mut bytes);
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
    use crate::grpc::proto::model_infer_request::InferInputTensor;

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
            assert_eq!(e.status, 400);
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
