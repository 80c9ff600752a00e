//! The Open Inference Protocol's tensor encodings: JSON `data` (flat or nested) and Triton's
//! binary tensor extension (a JSON header of `Inference-Header-Content-Length` bytes followed by
//! raw tensors; BYTES elements are 4-byte little-endian length-prefixed).

use crate::error::{ApiError, ApiResult};
use infergate_engine::tensor::element_count;
use infergate_engine::{DataType, Tensor, TensorData};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub const HEADER_LENGTH: &str = "inference-header-content-length";

#[derive(Debug, Deserialize)]
pub struct InferRequest {
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub parameters: Map<String, Value>,
    pub inputs: Vec<InputTensor>,
    #[serde(default)]
    pub outputs: Vec<RequestedOutput>,
}

#[derive(Debug, Deserialize)]
pub struct InputTensor {
    pub name: String,
    pub shape: Vec<i64>,
    pub datatype: String,
    #[serde(default)]
    pub parameters: Map<String, Value>,
    #[serde(default)]
    pub data: Option<Value>,
}

#[derive(Debug, Deserialize)]
pub struct RequestedOutput {
    pub name: String,
    #[serde(default)]
    pub parameters: Map<String, Value>,
}

#[derive(Debug, Serialize)]
pub struct InferResponse {
    pub model_name: String,
    pub model_version: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub outputs: Vec<OutputTensor>,
}

#[derive(Debug, Serialize)]
pub struct OutputTensor {
    pub name: String,
    pub datatype: &'static str,
    pub shape: Vec<i64>,
    #[serde(skip_serializing_if = "Map::is_empty")]
    pub parameters: Map<String, Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

/// Splits a body into its JSON header and binary section.
pub fn split_body(body: &[u8], header_len: Option<usize>) -> ApiResult<(&[u8], &[u8])> {
    match header_len {
        None => Ok((body, &[])),
        Some(n) if n <= body.len() => Ok(body.split_at(n)),
        Some(n) => Err(ApiError::bad_request(format!(
            "Inference-Header-Content-Length is {n} but the body has only {} bytes",
            body.len()
        ))),
    }
}

pub fn parse_request(json: &[u8]) -> ApiResult<InferRequest> {
    serde_json::from_slice(json)
        .map_err(|e| ApiError::bad_request(format!("invalid inference request JSON: {e}")))
}

/// Decodes every input tensor, consuming binary sections in order.
pub fn decode_inputs(request: &InferRequest, mut binary: &[u8]) -> ApiResult<Vec<Tensor>> {
    let mut tensors = Vec::with_capacity(request.inputs.len());
    for input in &request.inputs {
        let bad = |m: String| ApiError::bad_request(format!("input '{}': {m}", input.name));
        let datatype = DataType::from_name(&input.datatype)
            .ok_or_else(|| bad(format!("unknown datatype '{}'", input.datatype)))?;
        let count = element_count(&input.shape)
            .ok_or_else(|| bad(format!("invalid shape {:?}", input.shape)))?;
        let data = match input.parameters.get("binary_data_size") {
            Some(size) => {
                let size = size
                    .as_u64()
                    .ok_or_else(|| bad("binary_data_size must be a non-negative integer".into()))?
                    as usize;
                if size > binary.len() {
                    return Err(bad(format!(
                        "binary_data_size {size} exceeds the {} binary bytes left in the body",
                        binary.len()
                    )));
                }
                let (mine, rest) = binary.split_at(size);
                binary = rest;
                decode_binary(datatype, count, mine).map_err(bad)?
            }
            None => {
                let data = input
                    .data
                    .as_ref()
                    .ok_or_else(|| bad("no 'data' and no binary_data_size".into()))?;
                decode_json(datatype, count, data).map_err(bad)?
            }
        };
        tensors.push(Tensor {
            name: input.name.clone(),
            datatype,
            shape: input.shape.clone(),
            data,
        });
    }
    if !binary.is_empty() {
        return Err(ApiError::bad_request(format!(
            "{} binary bytes in the body belong to no input",
            binary.len()
        )));
    }
    Ok(tensors)
}

pub fn decode_binary(datatype: DataType, count: usize, bytes: &[u8]) -> Result<TensorData, String> {
    match datatype.size() {
        Some(size) => {
            if Some(bytes.len()) != count.checked_mul(size) {
                return Err(format!(
                    "{} binary bytes do not hold {count} {datatype} elements",
                    bytes.len()
                ));
            }
            if datatype == DataType::Bool && bytes.iter().any(|&b| b > 1) {
                return Err("BOOL elements must be 0 or 1".into());
            }
            Ok(TensorData::Raw(bytes.to_vec()))
        }
        None => {
            let mut items = Vec::with_capacity(count);
            let mut rest = bytes;
            while !rest.is_empty() {
                if rest.len() < 4 {
                    return Err("truncated BYTES element length".into());
                }
                let len = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
                rest = &rest[4..];
                if len > rest.len() {
                    return Err("BYTES element longer than the data left".into());
                }
                items.push(rest[..len].to_vec());
                rest = &rest[len..];
            }
            if items.len() != count {
                return Err(format!(
                    "{} BYTES elements given, shape needs {count}",
                    items.len()
                ));
            }
            Ok(TensorData::Bytes(items))
        }
    }
}

fn flatten<'a>(value: &'a Value, out: &mut Vec<&'a Value>) {
    match value {
        Value::Array(items) => items.iter().for_each(|v| flatten(v, out)),
        other => out.push(other),
    }
}

fn decode_json(datatype: DataType, count: usize, data: &Value) -> Result<TensorData, String> {
    let mut flat = Vec::with_capacity(count);
    flatten(data, &mut flat);
    if flat.len() != count {
        return Err(format!(
            "{} elements given, shape needs {count}",
            flat.len()
        ));
    }
    if datatype == DataType::Bytes {
        return flat
            .iter()
            .map(|v| match v {
                Value::String(s) => Ok(s.as_bytes().to_vec()),
                other => Err(format!("BYTES elements must be strings, got {other}")),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(TensorData::Bytes);
    }
    let size = datatype.size().unwrap_or(1);
    let mut out = Vec::with_capacity(count * size);
    for v in flat {
        push_element(datatype, v, &mut out)?;
    }
    Ok(TensorData::Raw(out))
}

fn push_element(datatype: DataType, v: &Value, out: &mut Vec<u8>) -> Result<(), String> {
    let not = |what: &str| format!("{v} is not {what}");
    macro_rules! int {
        ($t:ty) => {{
            let x = v
                .as_i64()
                .map(i128::from)
                .or_else(|| v.as_u64().map(i128::from))
                .ok_or_else(|| not("an integer"))?;
            let x = <$t>::try_from(x).map_err(|_| format!("{v} is out of range for {datatype}"))?;
            out.extend_from_slice(&x.to_le_bytes());
        }};
    }
    match datatype {
        DataType::Bool => {
            let b = match v {
                Value::Bool(b) => *b,
                Value::Number(n) if n.as_u64() == Some(0) => false,
                Value::Number(n) if n.as_u64() == Some(1) => true,
                _ => return Err(not("a boolean")),
            };
            out.push(b as u8);
        }
        DataType::Uint8 => int!(u8),
        DataType::Uint16 => int!(u16),
        DataType::Uint32 => int!(u32),
        DataType::Uint64 => int!(u64),
        DataType::Int8 => int!(i8),
        DataType::Int16 => int!(i16),
        DataType::Int32 => int!(i32),
        DataType::Int64 => int!(i64),
        DataType::Fp16 => {
            let x = v.as_f64().ok_or_else(|| not("a number"))?;
            out.extend_from_slice(&half::f16::from_f64(x).to_le_bytes());
        }
        DataType::Fp32 => {
            let x = v.as_f64().ok_or_else(|| not("a number"))?;
            out.extend_from_slice(&(x as f32).to_le_bytes());
        }
        DataType::Fp64 => {
            let x = v.as_f64().ok_or_else(|| not("a number"))?;
            out.extend_from_slice(&x.to_le_bytes());
        }
        DataType::Bytes => unreachable!("BYTES is decoded as strings before this point"),
    }
    Ok(())
}

/// Encodes a tensor's elements as a flat JSON array.
pub fn to_json(tensor: &Tensor) -> Value {
    let raw = match &tensor.data {
        TensorData::Bytes(items) => {
            return Value::Array(
                items
                    .iter()
                    .map(|b| Value::String(String::from_utf8_lossy(b).into_owned()))
                    .collect(),
            )
        }
        TensorData::Raw(raw) => raw,
    };
    macro_rules! each {
        ($n:expr, $conv:expr) => {
            Value::Array(raw.chunks_exact($n).map($conv).collect())
        };
    }
    fn num(x: f64) -> Value {
        serde_json::Number::from_f64(x).map_or(Value::Null, Value::Number)
    }
    match tensor.datatype {
        DataType::Bool => Value::Array(raw.iter().map(|&b| Value::Bool(b != 0)).collect()),
        DataType::Uint8 => Value::Array(raw.iter().map(|&b| Value::from(b)).collect()),
        DataType::Int8 => Value::Array(raw.iter().map(|&b| Value::from(b as i8)).collect()),
        DataType::Uint16 => each!(2, |c| Value::from(u16::from_le_bytes([c[0], c[1]]))),
        DataType::Int16 => each!(2, |c| Value::from(i16::from_le_bytes([c[0], c[1]]))),
        DataType::Uint32 => each!(4, |c| Value::from(u32::from_le_bytes([
            c[0], c[1], c[2], c[3]
        ]))),
        DataType::Int32 => each!(4, |c| Value::from(i32::from_le_bytes([
            c[0], c[1], c[2], c[3]
        ]))),
        DataType::Uint64 => each!(8, |c| Value::from(u64::from_le_bytes(
            c.try_into().unwrap_or([0; 8])
        ))),
        DataType::Int64 => each!(8, |c| Value::from(i64::from_le_bytes(
            c.try_into().unwrap_or([0; 8])
        ))),
        DataType::Fp16 => each!(2, |c| num(half::f16::from_le_bytes([c[0], c[1]]).to_f64())),
        DataType::Fp32 => each!(4, |c| num(
            f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64
        )),
        DataType::Fp64 => each!(8, |c| num(f64::from_le_bytes(
            c.try_into().unwrap_or([0; 8])
        ))),
        DataType::Bytes => Value::Array(Vec::new()),
    }
}

/// Encodes a tensor for the binary section.
pub fn to_binary(tensor: &Tensor, out: &mut Vec<u8>) {
    match &tensor.data {
        TensorData::Raw(raw) => out.extend_from_slice(raw),
        TensorData::Bytes(items) => {
            for item in items {
                out.extend_from_slice(&(item.len() as u32).to_le_bytes());
                out.extend_from_slice(item);
            }
        }
    }
}

/// Whether an output goes into the binary section: its own `binary_data` parameter wins, else
/// the request-wide `binary_data_output`.
pub fn wants_binary(request: &InferRequest, output: &str) -> bool {
    let own = request
        .outputs
        .iter()
        .find(|o| o.name == output)
        .and_then(|o| o.parameters.get("binary_data"))
        .and_then(Value::as_bool);
    own.unwrap_or_else(|| {
        request
            .parameters
            .get("binary_data_output")
            .and_then(Value::as_bool)
            .unwrap_or(false)
    })
}

/// Builds the response body: `(bytes, Some(json_len))` when any output is binary.
pub fn encode_response(
    request: &InferRequest,
    model_name: &str,
    model_version: u64,
    outputs: &[Tensor],
) -> ApiResult<(Vec<u8>, Option<usize>)> {
    let mut binary = Vec::new();
    let mut any_binary = false;
    let mut encoded = Vec::with_capacity(outputs.len());
    for tensor in outputs {
        let mut parameters = Map::new();
        let data = if wants_binary(request, &tensor.name) {
            any_binary = true;
            let before = binary.len();
            to_binary(tensor, &mut binary);
            parameters.insert(
                "binary_data_size".into(),
                Value::from(binary.len() - before),
            );
            None
        } else {
            Some(to_json(tensor))
        };
        encoded.push(OutputTensor {
            name: tensor.name.clone(),
            datatype: tensor.datatype.name(),
            shape: tensor.shape.clone(),
            parameters,
            data,
        });
    }
    let response = InferResponse {
        model_name: model_name.to_string(),
        model_version: model_version.to_string(),
        id: request.id.clone(),
        outputs: encoded,
    };
    let mut body = serde_json::to_vec(&response)
        .map_err(|e| ApiError::internal(format!("encoding response: {e}")))?;
    if !any_binary {
        return Ok((body, None));
    }
    let json_len = body.len();
    body.extend_from_slice(&binary);
    Ok((body, Some(json_len)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(v: Value) -> InferRequest {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn nested_and_flat_json_decode_the_same() {
        let flat = request(
            json!({"inputs":[{"name":"x","shape":[2,2],"datatype":"FP32","data":[1,2,3,4]}]}),
        );
        let nested = request(
            json!({"inputs":[{"name":"x","shape":[2,2],"datatype":"FP32","data":[[1,2],[3,4]]}]}),
        );
        let a = decode_inputs(&flat, &[]).unwrap();
        let b = decode_inputs(&nested, &[]).unwrap();
        assert_eq!(a, b);
        assert_eq!(a[0].to_f32().unwrap(), vec![1.0, 2.0, 3.0, 4.0]);
    }

    #[test]
    fn every_datatype_round_trips_through_json_and_binary() {
        let cases = [
            ("BOOL", json!([true, false])),
            ("UINT8", json!([0, 255])),
            ("UINT16", json!([0, 65535])),
            ("UINT32", json!([0, 4294967295u64])),
            ("UINT64", json!([0, 18446744073709551615u64])),
            ("INT8", json!([-128, 127])),
            ("INT16", json!([-32768, 32767])),
            ("INT32", json!([-2147483648i64, 2147483647])),
            ("INT64", json!([i64::MIN, i64::MAX])),
            ("FP16", json!([1.5, -2.0])),
            ("FP32", json!([1.5, -2.25])),
            ("FP64", json!([1.5, -2.125])),
            ("BYTES", json!(["héllo", ""])),
        ];
        for (dt, data) in cases {
            let req =
                request(json!({"inputs":[{"name":"t","shape":[2],"datatype":dt,"data":data}]}));
            let tensors = decode_inputs(&req, &[]).unwrap();
            assert_eq!(to_json(&tensors[0]), data, "{dt} via JSON");
            let mut bin = Vec::new();
            to_binary(&tensors[0], &mut bin);
            let req = request(
                json!({"inputs":[{"name":"t","shape":[2],"datatype":dt,"parameters":{"binary_data_size":bin.len()}}]}),
            );
            assert_eq!(
                decode_inputs(&req, &bin).unwrap(),
                tensors,
                "{dt} via binary"
            );
        }
    }

    #[test]
    fn errors_name_the_tensor() {
        let cases = [
            json!({"inputs":[{"name":"a","shape":[3],"datatype":"FP32","data":[1,2]}]}),
            json!({"inputs":[{"name":"a","shape":[1],"datatype":"FLOAT","data":[1]}]}),
            json!({"inputs":[{"name":"a","shape":[1],"datatype":"UINT8","data":[256]}]}),
            json!({"inputs":[{"name":"a","shape":[1],"datatype":"INT32","data":["x"]}]}),
            json!({"inputs":[{"name":"a","shape":[-1],"datatype":"INT32","data":[]}]}),
            json!({"inputs":[{"name":"a","shape":[1],"datatype":"INT32"}]}),
            json!({"inputs":[{"name":"a","shape":[2],"datatype":"FP32","parameters":{"binary_data_size":8}}]}),
        ];
        for c in cases {
            let e = decode_inputs(&request(c.clone()), &[0; 4]).unwrap_err();
            assert_eq!(e.status, 400);
            assert!(e.message.contains("input 'a'"), "{c}: {}", e.message);
        }
        let leftover = request(
            json!({"inputs":[{"name":"a","shape":[1],"datatype":"FP32","parameters":{"binary_data_size":4}}]}),
        );
        assert!(decode_inputs(&leftover, &[0; 8])
            .unwrap_err()
            .message
            .contains("belong to no input"));
    }

    #[test]
    fn response_puts_requested_outputs_in_the_binary_section() {
        let req = request(
            json!({"inputs":[], "outputs":[{"name":"b","parameters":{"binary_data":true}},{"name":"j"}]}),
        );
        let b = Tensor::from_f32("b", vec![2], &[1.0, 2.0]).unwrap();
        let j = Tensor::from_f32("j", vec![1], &[3.0]).unwrap();
        let (body, json_len) = encode_response(&req, "m", 1, &[b, j]).unwrap();
        let json_len = json_len.unwrap();
        let header: Value = serde_json::from_slice(&body[..json_len]).unwrap();
        assert_eq!(header["outputs"][0]["parameters"]["binary_data_size"], 8);
        assert_eq!(header["outputs"][1]["data"], json!([3.0]));
        assert_eq!(&body[json_len..], &[0, 0, 128, 63, 0, 0, 0, 64]);
    }
}
