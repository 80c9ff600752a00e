//! The KServe v2 (Open Inference Protocol) request and response documents, and the decoding
//! of their input tensors from JSON `data` or the binary section.

use crate::tensor::{DataType, Tensor, TensorData};
use crate::{binary, json, limits, DecodeError};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

pub const HEADER_LENGTH: &str = "inference-header-content-length";

/// The parameter naming the shared-memory region an input's data is read from, or an output's
/// written to (Triton's shared-memory extension); `shared_memory_byte_size` and
/// `shared_memory_offset` go with it.
pub const SHARED_MEMORY_REGION: &str = "shared_memory_region";

/// Whether `parameters` put the tensor in a shared-memory region.
pub fn in_shared_memory(parameters: &Map<String, Value>) -> bool {
    parameters.contains_key(SHARED_MEMORY_REGION)
}

/// Reads the data of an input that lives outside the request (a shared-memory region): given
/// the input, its datatype and its element count; `Ok(None)` when there is nowhere to read from.
pub type ExternalInput<'a> =
    dyn FnMut(&InputTensor, DataType, usize) -> Result<Option<TensorData>, String> + 'a;

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
    /// The elements' JSON text, kept unparsed until the datatype and shape are known (they may
    /// come after it): decoded by [`decode_inputs`] straight into bytes, then dropped.
    #[serde(default)]
    pub data: Option<Box<RawValue>>,
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

pub fn parse_request(json: &[u8]) -> Result<InferRequest, DecodeError> {
    serde_json::from_slice(json)
        .map_err(|e| DecodeError(format!("invalid inference request JSON: {e}")))
}

/// Decodes every input tensor, consuming binary sections in order. Each input's JSON text is
/// taken out of the request as it is decoded, so the text and its tensor are not both held.
pub fn decode_inputs(
    request: &mut InferRequest,
    binary: &[u8],
) -> Result<Vec<Tensor>, DecodeError> {
    decode_inputs_with(request, binary, &mut |_, _, _| Ok(None))
}

/// [`decode_inputs`], reading the inputs that name a shared-memory region with `external`.
/// An input gives its data one way only (`data`, `binary_data_size` or `shared_memory_region`),
/// as Triton requires.
pub fn decode_inputs_with(
    request: &mut InferRequest,
    mut binary: &[u8],
    external: &mut ExternalInput<'_>,
) -> Result<Vec<Tensor>, DecodeError> {
    let mut tensors = Vec::with_capacity(request.inputs.len());
    for input in &mut request.inputs {
        let text = input.data.take();
        let bad = |m: String| DecodeError(format!("input '{}': {m}", input.name));
        let datatype = DataType::from_name(&input.datatype)
            .ok_or_else(|| bad(format!("unknown datatype '{}'", input.datatype)))?;
        let count = limits::declared_elements(&input.shape).map_err(bad)?;
        let binary_size = input.parameters.get("binary_data_size");
        let shared = in_shared_memory(&input.parameters);
        let ways =
            usize::from(text.is_some()) + usize::from(binary_size.is_some()) + usize::from(shared);
        if ways > 1 {
            return Err(bad(
                "Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', 'shared_memory_region' in 'parameters'".into(),
            ));
        }
        if shared {
            let data = external(input, datatype, count)
                .map_err(bad)?
                .ok_or_else(|| bad("shared memory is not available on this endpoint".into()))?;
            tensors.push(Tensor {
                name: input.name.clone(),
                datatype,
                shape: input.shape.clone(),
                data,
            });
            continue;
        }
        let data = match binary_size {
            Some(size) => {
                let size = size
                    .as_u64()
                    .and_then(|s| usize::try_from(s).ok())
                    .ok_or_else(|| bad("binary_data_size must be a non-negative integer".into()))?;
                if size > binary.len() {
                    return Err(bad(format!(
                        "binary_data_size {size} exceeds the {} binary bytes left in the body",
                        binary.len()
                    )));
                }
                let (mine, rest) = binary.split_at(size);
                binary = rest;
                binary::decode(datatype, count, mine).map_err(bad)?
            }
            None => {
                let text = text.ok_or_else(|| bad("no 'data' and no binary_data_size".into()))?;
                json::decode(datatype, count, text.get()).map_err(bad)?
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
        return Err(DecodeError(format!(
            "{} binary bytes in the body belong to no input",
            binary.len()
        )));
    }
    Ok(tensors)
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

/// The response document and, when any output is binary, the binary section it announces.
pub fn response(
    request: &InferRequest,
    model_name: &str,
    model_version: u64,
    outputs: &[Tensor],
) -> (InferResponse, Option<Vec<u8>>) {
    let (response, binary) = head(request, model_name, model_version, outputs);
    if binary.is_empty() {
        return (response, None);
    }
    let mut bytes = Vec::with_capacity(binary.iter().map(|t| binary::encoded_len(t)).sum());
    for tensor in binary {
        binary::encode(tensor, &mut bytes);
    }
    (response, Some(bytes))
}

/// The response's JSON part, and the outputs that go after it in binary, in order.
fn head<'t>(
    request: &InferRequest,
    model_name: &str,
    model_version: u64,
    outputs: &'t [Tensor],
) -> (InferResponse, Vec<&'t Tensor>) {
    let mut binary = Vec::new();
    let mut encoded = Vec::with_capacity(outputs.len());
    for tensor in outputs {
        let mut parameters = Map::new();
        let requested = request.outputs.iter().find(|o| o.name == tensor.name);
        // BYTES that are not UTF-8 cannot be a JSON string: they go in the binary section,
        // which Triton's clients read whenever an output announces `binary_data_size`.
        let data = if requested.is_some_and(|o| o.parameters.contains_key(SHARED_MEMORY_REGION)) {
            // Written into the client's region already (by the transport): named, with no
            // parameters, as Triton answers. Its C++ client (perf_analyzer's) reads any
            // output's `parameters` as the binary section's `binary_data_size`.
            None
        } else if wants_binary(request, &tensor.name) || !json::represents(tensor) {
            parameters.insert(
                "binary_data_size".into(),
                Value::from(binary::encoded_len(tensor)),
            );
            binary.push(tensor);
            None
        } else {
            Some(json::encode(tensor))
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
    (response, binary)
}

/// Builds the response body: `(bytes, Some(json_len))` when any output is binary. The binary
/// outputs are written straight after the JSON, each copied once.
pub fn encode_response(
    request: &InferRequest,
    model_name: &str,
    model_version: u64,
    outputs: &[Tensor],
) -> serde_json::Result<(Vec<u8>, Option<usize>)> {
    let (response, binary) = head(request, model_name, model_version, outputs);
    let binary_len: usize = binary.iter().map(|t| binary::encoded_len(t)).sum();
    // The JSON head of a response is a few hundred bytes per output.
    let mut body = Vec::with_capacity(256 * outputs.len().max(1) + binary_len);
    serde_json::to_writer(&mut body, &response)?;
    if binary.is_empty() {
        return Ok((body, None));
    }
    let json_len = body.len();
    for tensor in binary {
        binary::encode(tensor, &mut body);
    }
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
        let mut flat = request(
            json!({"inputs":[{"name":"x","shape":[2,2],"datatype":"FP32","data":[1,2,3,4]}]}),
        );
        let mut nested = request(
            json!({"inputs":[{"name":"x","shape":[2,2],"datatype":"FP32","data":[[1,2],[3,4]]}]}),
        );
        let a = decode_inputs(&mut flat, &[]).unwrap();
        let b = decode_inputs(&mut nested, &[]).unwrap();
        assert_eq!(a, b);
        assert_eq!(a[0].to_f32().unwrap(), vec![1.0, 2.0, 3.0, 4.0]);
    }

    #[test]
    fn data_before_datatype_and_shape_decodes() {
        let mut req = parse_request(
            br#"{"inputs":[{"data":[5,6],"name":"x","datatype":"INT8","shape":[2]}]}"#,
        )
        .unwrap();
        let t = decode_inputs(&mut req, &[]).unwrap();
        assert_eq!(t[0].data, crate::tensor::TensorData::Raw(vec![5, 6]));
        assert!(
            req.inputs[0].data.is_none(),
            "the text is dropped once decoded"
        );
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
            let mut req =
                request(json!({"inputs":[{"name":"t","shape":[2],"datatype":dt,"data":data}]}));
            let tensors = decode_inputs(&mut req, &[]).unwrap();
            assert_eq!(json::encode(&tensors[0]), data, "{dt} via JSON");
            let mut bin = Vec::new();
            binary::encode(&tensors[0], &mut bin);
            let mut req = request(
                json!({"inputs":[{"name":"t","shape":[2],"datatype":dt,"parameters":{"binary_data_size":bin.len()}}]}),
            );
            assert_eq!(
                decode_inputs(&mut req, &bin).unwrap(),
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
            json!({"inputs":[{"name":"a","shape":[68719476736i64, 16],"datatype":"FP32","data":[1]}]}),
            json!({"inputs":[{"name":"a","shape":[i64::MAX],"datatype":"FP32","data":[1]}]}),
            json!({"inputs":[{"name":"a","shape":[i64::MAX, 4],"datatype":"FP32","data":[1]}]}),
            json!({"inputs":[{"name":"a","shape":[1],"datatype":"FP32","data":[1e39]}]}),
            json!({"inputs":[{"name":"a","shape":[68719476736i64],"datatype":"BYTES","parameters":{"binary_data_size":4}}]}),
        ];
        for c in cases {
            let e = decode_inputs(&mut request(c.clone()), &[0; 4]).unwrap_err();
            assert!(e.0.starts_with("input 'a'"), "{c}: {}", e.0);
        }
        let mut leftover = request(
            json!({"inputs":[{"name":"a","shape":[1],"datatype":"FP32","parameters":{"binary_data_size":4}}]}),
        );
        assert!(decode_inputs(&mut leftover, &[0; 8])
            .unwrap_err()
            .0
            .contains("belong to no input"));
    }

    #[test]
    fn bytes_with_any_bytes_round_trip_through_the_binary_section() {
        let items = vec![
            b"he\x00llo".to_vec(),
            b"\x00\x01\x02\x03".to_vec(),
            Vec::new(),
        ];
        let tensor = Tensor::new(
            "t",
            DataType::Bytes,
            vec![3],
            crate::tensor::TensorData::Bytes(items.clone()),
        )
        .unwrap();
        let mut bin = Vec::new();
        binary::encode(&tensor, &mut bin);
        assert_eq!(&bin[..9], b"\x06\x00\x00\x00he\x00ll");
        let mut req = request(
            json!({"inputs":[{"name":"t","shape":[3],"datatype":"BYTES","parameters":{"binary_data_size":bin.len()}}]}),
        );
        assert_eq!(decode_inputs(&mut req, &bin).unwrap(), vec![tensor.clone()]);

        // Asked for as JSON: the UTF-8 elements stay JSON strings, zero bytes included...
        let req = request(json!({"inputs":[]}));
        let (body, json_len) =
            encode_response(&req, "m", 1, std::slice::from_ref(&tensor)).unwrap();
        assert_eq!(json_len, None);
        let header: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            header["outputs"][0]["data"],
            json!(["he\u{0}llo", "\u{0}\u{1}\u{2}\u{3}", ""])
        );

        // ...and elements JSON cannot hold go in the binary section, announced as Triton does.
        let blob = Tensor::new(
            "blob",
            DataType::Bytes,
            vec![1],
            crate::tensor::TensorData::Bytes(vec![vec![0xff, 0x00, 0x80]]),
        )
        .unwrap();
        let (body, json_len) = encode_response(&req, "m", 1, &[blob]).unwrap();
        let json_len = json_len.expect("a binary section");
        let header: Value = serde_json::from_slice(&body[..json_len]).unwrap();
        assert_eq!(header["outputs"][0]["parameters"]["binary_data_size"], 7);
        assert!(header["outputs"][0].get("data").is_none());
        assert_eq!(&body[json_len..], &[3, 0, 0, 0, 0xff, 0x00, 0x80]);
    }

    #[test]
    fn shared_memory_inputs_come_from_outside_and_outputs_are_only_named() {
        let mut req = request(json!({"inputs":[
            {"name":"a","shape":[2],"datatype":"FP32","parameters":{"shared_memory_region":"r","shared_memory_byte_size":8}},
            {"name":"b","shape":[1],"datatype":"FP32","data":[1]}
        ], "outputs":[{"name":"y","parameters":{"shared_memory_region":"out","shared_memory_byte_size":64}}]}));
        let mut asked = Vec::new();
        let tensors = decode_inputs_with(&mut req, &[], &mut |input, datatype, count| {
            asked.push((input.name.clone(), datatype, count));
            Ok(Some(TensorData::Raw(vec![0; 8])))
        })
        .unwrap();
        assert_eq!(asked, [("a".to_string(), DataType::Fp32, 2)]);
        assert_eq!(tensors.len(), 2);
        let mut plain = request(json!({"inputs":[
            {"name":"a","shape":[2],"datatype":"FP32","parameters":{"shared_memory_region":"r"}}]}));
        assert!(decode_inputs(&mut plain, &[])
            .unwrap_err()
            .0
            .contains("not available"));
        let mut both = request(json!({"inputs":[
            {"name":"a","shape":[1],"datatype":"FP32","data":[1],"parameters":{"shared_memory_region":"r"}}]}));
        assert!(decode_inputs(&mut both, &[])
            .unwrap_err()
            .0
            .contains("only one"));

        let y = Tensor::from_f32("y", vec![2], &[1.0, 2.0]).unwrap();
        let (body, json_len) = encode_response(&req, "m", 1, &[y]).unwrap();
        assert_eq!(json_len, None);
        let header: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(header["outputs"][0]["name"], "y");
        assert_eq!(header["outputs"][0]["shape"], json!([2]));
        assert!(header["outputs"][0].get("parameters").is_none());
        assert!(header["outputs"][0].get("data").is_none());
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
