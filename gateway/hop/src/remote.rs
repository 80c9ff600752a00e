//! One inference on a worker: KServe v2 over HTTP with Triton's binary tensor extension (no
//! JSON number formatting on either side), on the manager's mutual-TLS client.
//!
//! A pipeline's model stage may carry its native op (resize + normalize, `[cluster]
//! pipeline_ops = "worker"`): the manager sends the pre-op tensors (a decoded RGB8 image, 3
//! bytes a pixel at its own size, instead of the model's FP32 input) with the op's spec as the
//! request parameter [`STAGE_OPS_PARAMETER`], to the worker's [`STAGE_PATH`]. The spec travels
//! with each request rather than the worker resolving the pipeline from the manager's catalog:
//! the worker runs exactly the op the manager resolved when the request started (a pipeline
//! changed meanwhile affects only later requests, as on one host), with no catalog round trip
//! or cache to invalidate, for a few hundred bytes of JSON. A separate path rather than a
//! parameter on the usual one, so that a worker too old to know it answers 404 (turned into a
//! clear error here) instead of ignoring the parameter and feeding the image to the model.

use bytes::Bytes;
use http::StatusCode;
use infergate_engine::preprocess::{ResizeNormalize, ResizeNormalizeExt};
use infergate_engine::{CorrelationId, InferOptions, SequenceFlags, Tensor};
use infergate_protocol::kserve::{self, InferRequest, InputTensor, HEADER_LENGTH};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::time::Duration;

/// The header that tells a worker which configuration of the version the manager holds, so a
/// config changed on the manager reaches the worker with the next request.
pub const CONFIG_HEADER: &str = "x-infergate-model-config";

/// A short digest of a version's configuration.
pub fn config_digest(config: &Value) -> String {
    use sha2::Digest;
    hex::encode(&sha2::Sha256::digest(config.to_string().as_bytes())[..8])
}

/// The request parameter that carries a pipeline stage's native op (a [`ResizeNormalize`]).
pub const STAGE_OPS_PARAMETER: &str = "infergate_preprocess";

/// The worker's endpoint for a model stage with its native op (manager only), under
/// `/cluster/v1/stage`; `{model}` and `{version}` as in KServe's infer path.
pub const STAGE_PATH: &str = "/cluster/v1/stage/models/{model}/versions/{version}/infer";

/// A request body, encoded once and sent to as many workers as it takes.
pub struct Encoded {
    pub(crate) body: Bytes,
    /// The JSON header's length (`Inference-Header-Content-Length`); None for a body that is
    /// all JSON.
    pub(crate) header_len: Option<usize>,
    /// Carries a native op: goes to [`STAGE_PATH`].
    pub(crate) stage: bool,
}

impl Encoded {
    /// A client's KServe v2 body as it came, relayed undecoded (see `infer::backend::forward`):
    /// the worker decodes it, and answers in the encoding the client asked for.
    pub fn relayed(body: Bytes, header_len: Option<usize>) -> Encoded {
        Encoded {
            body,
            header_len,
            stage: false,
        }
    }

    /// Bytes on the wire for the body.
    pub fn wire_bytes(&self) -> usize {
        self.body.len()
    }

    /// The body as it goes on the wire.
    pub fn body(&self) -> &Bytes {
        &self.body
    }

    /// The JSON header's length, sent as `Inference-Header-Content-Length`.
    pub fn header_len(&self) -> Option<usize> {
        self.header_len
    }

    /// Whether the request carries a native op (and goes to [`STAGE_PATH`]).
    pub fn is_stage(&self) -> bool {
        self.stage
    }
}

/// A model's inputs, as a plain KServe request.
pub fn encode(inputs: &[Tensor], outputs: &[String], options: InferOptions) -> Encoded {
    encode_with(inputs, None, outputs, options, None)
}

/// A request of a sequence: its flags travel as Triton's request parameters (`sequence_id`,
/// `sequence_start`, `sequence_end`), which the worker reads as any client's.
pub fn encode_sequence(
    inputs: &[Tensor],
    outputs: &[String],
    options: InferOptions,
    sequence: &SequenceFlags,
) -> Encoded {
    encode_with(inputs, None, outputs, options, Some(sequence))
}

/// A pipeline stage: `inputs` are the op's (pre-op tensors), the worker runs `ops` then the
/// model.
pub fn encode_stage(
    inputs: &[Tensor],
    ops: &ResizeNormalize,
    outputs: &[String],
    options: InferOptions,
) -> Encoded {
    encode_with(inputs, Some(ops), outputs, options, None)
}

fn encode_with(
    inputs: &[Tensor],
    ops: Option<&ResizeNormalize>,
    outputs: &[String],
    options: InferOptions,
    sequence: Option<&SequenceFlags>,
) -> Encoded {
    let sizes: Vec<usize> = inputs
        .iter()
        .map(infergate_protocol::binary::encoded_len)
        .collect();
    let document = WireRequest {
        inputs: inputs
            .iter()
            .zip(&sizes)
            .map(|(t, &binary_data_size)| WireInput {
                name: &t.name,
                shape: &t.shape,
                datatype: t.datatype.name(),
                parameters: WireBinary { binary_data_size },
            })
            .collect(),
        parameters: WireParameters {
            binary_data_output: true,
            priority: options.priority,
            timeout: options
                .timeout
                .map(|t| u64::try_from(t.as_micros()).unwrap_or(u64::MAX)),
            ops,
            sequence_id: sequence.map(|s| &s.id),
            sequence_start: sequence.is_some_and(|s| s.start),
            sequence_end: sequence.is_some_and(|s| s.end),
        },
        outputs: outputs.iter().map(|name| WireOutput { name }).collect(),
    };
    // The tensors go straight after the header, in one allocation: no second copy of them
    // (a 224x224 image is 602,112 bytes). Typed structs rather than a `serde_json::Value`:
    // building the document as a map allocated every key and value, a cost on every request
    // a manager relays.
    let mut body = Vec::with_capacity(256 + sizes.iter().sum::<usize>());
    if let Err(e) = serde_json::to_writer(&mut body, &document) {
        // Writing plain structs into a Vec cannot fail; should it, the worker refuses the
        // empty header with a clear 400.
        tracing::error!(error = %e, "encoding a worker request's header");
        body.clear();
    }
    let header_len = body.len();
    for tensor in inputs {
        infergate_protocol::binary::encode(tensor, &mut body);
    }
    Encoded {
        body: Bytes::from(body),
        header_len: Some(header_len),
        stage: ops.is_some(),
    }
}

/// The JSON header of a request to a worker (KServe v2 with the binary tensor extension).
#[derive(Serialize)]
struct WireRequest<'a> {
    inputs: Vec<WireInput<'a>>,
    parameters: WireParameters<'a>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    outputs: Vec<WireOutput<'a>>,
}

#[derive(Serialize)]
struct WireInput<'a> {
    name: &'a str,
    shape: &'a [i64],
    datatype: &'static str,
    parameters: WireBinary,
}

#[derive(Serialize)]
struct WireBinary {
    binary_data_size: usize,
}

#[derive(Serialize)]
struct WireParameters<'a> {
    binary_data_output: bool,
    /// 0 is the model's default level: left out.
    #[serde(skip_serializing_if = "is_zero")]
    priority: u32,
    /// Microseconds in the queue.
    #[serde(skip_serializing_if = "Option::is_none")]
    timeout: Option<u64>,
    /// [`STAGE_OPS_PARAMETER`] (a test checks the name).
    #[serde(
        rename = "infergate_preprocess",
        skip_serializing_if = "Option::is_none"
    )]
    ops: Option<&'a ResizeNormalize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sequence_id: Option<&'a CorrelationId>,
    #[serde(skip_serializing_if = "is_false")]
    sequence_start: bool,
    #[serde(skip_serializing_if = "is_false")]
    sequence_end: bool,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn is_false(b: &bool) -> bool {
    !*b
}

#[derive(Serialize)]
struct WireOutput<'a> {
    name: &'a str,
}

/// The native op a stage request carries, checked as a saved pipeline's is (the worker's side
/// of [`encode_stage`]). Its absence or a malformed spec is the manager's fault: the worker
/// answers 400 with this message, relayed to the client as the worker's answer.
pub fn stage_ops(request: &InferRequest) -> Result<ResizeNormalize, String> {
    let value = request.parameters.get(STAGE_OPS_PARAMETER).ok_or_else(|| {
        format!(
            "a pipeline stage request must carry its native op in the parameter '{STAGE_OPS_PARAMETER}'"
        )
    })?;
    let ops: ResizeNormalize = serde_json::from_value(value.clone())
        .map_err(|e| format!("invalid '{STAGE_OPS_PARAMETER}' parameter: {e}"))?;
    ops.validate()
        .map_err(|m| format!("invalid '{STAGE_OPS_PARAMETER}': {m}"))?;
    Ok(ops)
}

/// An error answer to relay to the client: a worker's own (its status says whose fault), or
/// the hop's when the worker's answer cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The HTTP status code the worker answered with (502 for an answer that does not decode,
    /// 500 for a request the manager could not build).
    pub status: u16,
    /// What the client reads.
    pub message: String,
    /// The worker's `Retry-After`, in seconds.
    pub retry_after: Option<u64>,
}

impl Refusal {
    fn new(status: StatusCode, message: String) -> Refusal {
        Refusal {
            status: status.as_u16(),
            message,
            retry_after: None,
        }
    }
}

/// Why a worker gave no answer: whether another worker may be tried.
pub enum Failure {
    /// The worker answered with an error that is the request's or the model's (4xx, 500): the
    /// client gets it as is, no retry (another worker would answer the same).
    Answered(Refusal),
    /// No answer (connection refused or reset, the worker died mid-response, the link went
    /// silent) or the worker refused new work (503 while draining): another worker may be
    /// tried. `reached`: the request was written to the worker, which may have run it.
    Unreachable { why: String, reached: bool },
    /// The request's deadline passed with the worker silent (hung): not retried, the time
    /// is spent.
    TimedOut(String),
}

#[derive(Deserialize)]
struct AnswerDocument {
    outputs: Vec<InputTensor>,
}

/// The worker, model version (and its configuration's digest) a request goes to.
pub struct Destination<'a> {
    pub advertise: &'a str,
    pub model: &'a str,
    pub version: u64,
    pub config_digest: &'a str,
}

/// A worker's successful answer, undecoded.
pub struct Answer {
    pub body: Bytes,
    /// `Inference-Header-Content-Length`: the answer's JSON header is followed by binary
    /// tensors.
    pub header_len: Option<usize>,
}

/// A successful answer's tensors; one that does not decode is the worker's fault.
pub fn decode_answer(advertise: &str, answer: &Answer) -> Result<Vec<Tensor>, Refusal> {
    decode(&answer.body, answer.header_len).map_err(|e| {
        Refusal::new(
            StatusCode::BAD_GATEWAY,
            format!("worker {advertise} sent an answer that does not decode: {e}"),
        )
    })
}

/// Sends `request` to the worker and reads its answer, without decoding a successful one; an
/// error answer becomes the [`Failure`] that says whether another worker may be tried.
pub async fn send(
    pool: &crate::pool::WorkerPool,
    to: &Destination<'_>,
    request: &Encoded,
    timeout: Duration,
) -> Result<Answer, Failure> {
    let Destination {
        advertise,
        model,
        version,
        config_digest,
    } = *to;
    let path = if request.stage {
        STAGE_PATH
            .replace("{model}", model)
            .replace("{version}", &version.to_string())
    } else {
        format!("/v2/models/{model}/versions/{version}/infer")
    };
    let mut call = http::Request::post(path)
        .header(CONFIG_HEADER, config_digest)
        .header(
            http::header::CONTENT_TYPE,
            if request.header_len.is_some() {
                "application/octet-stream"
            } else {
                "application/json"
            },
        );
    if let Some(len) = request.header_len {
        call = call.header(HEADER_LENGTH, len);
    }
    // The worker's spans join the trace of the span this hop runs in.
    if let Some(headers) = call.headers_mut() {
        infergate_telemetry::w3c::inject(&tracing::Span::current(), headers);
    }
    let call = call
        .body(http_body_util::Full::new(request.body.clone()))
        .map_err(|e| {
            // Registered names and versions make valid paths: this is the server's bug.
            Failure::Answered(Refusal::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!(
                    "model '{model}' version {version}: no request to a worker can be made: {e}"
                ),
            ))
        })?;
    let answer = match tokio::time::timeout(timeout, pool.send(advertise, call)).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(failed)) => {
            return Err(Failure::Unreachable {
                why: format!("worker {advertise}: {}", failed.message),
                reached: failed.reached,
            })
        }
        Err(_) => {
            return Err(Failure::TimedOut(format!(
                "worker {advertise} did not answer within {timeout:?}"
            )))
        }
    };
    let status = answer.status;
    let header = |name| {
        answer
            .headers
            .get(name)
            .and_then(|v: &http::HeaderValue| v.to_str().ok())
    };
    let header_len = header(HEADER_LENGTH).and_then(|v| v.parse::<usize>().ok());
    let retry_after =
        header(http::header::RETRY_AFTER.as_str()).and_then(|v| v.parse::<u64>().ok());
    let body = answer.body;
    if status.is_success() {
        return Ok(Answer { body, header_len });
    }
    let message = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v["error"].as_str().map(str::to_owned));
    if let Some(error) = unknown_stage(advertise, request.stage, status, message.is_none()) {
        return Err(Failure::Answered(error));
    }
    let message = message.unwrap_or_else(|| format!("worker {advertise} answered {status}"));
    if status == StatusCode::SERVICE_UNAVAILABLE {
        // The worker refused it (draining, its queue full): nothing ran.
        return Err(Failure::Unreachable {
            why: format!("worker {advertise}: {message}"),
            reached: false,
        });
    }
    // The worker's answer is relayed as it was given (its status says whose fault).
    Err(Failure::Answered(Refusal {
        status: status.as_u16(),
        message,
        retry_after,
    }))
}

/// A stage request answered 404 without a JSON error is a worker whose router lacks
/// [`STAGE_PATH`] (an older version; a missing model is a JSON 404): a clear error naming the
/// way out, never a retry elsewhere or a fallback that would hide the version skew.
fn unknown_stage(advertise: &str, stage: bool, status: StatusCode, bare: bool) -> Option<Refusal> {
    (stage && bare && status == StatusCode::NOT_FOUND).then(|| {
        Refusal::new(
            StatusCode::BAD_GATEWAY,
            format!(
                "worker {advertise} cannot run a pipeline's native ops (it has no {STAGE_PATH}: \
                 an older version?): upgrade it, or set [cluster] pipeline_ops = \"manager\" \
                 on the manager"
            ),
        )
    })
}

/// A worker's answer body (JSON, or a JSON header and binary tensors) as tensors.
pub fn decode(body: &[u8], header_len: Option<usize>) -> Result<Vec<Tensor>, String> {
    let (document, binary) =
        infergate_protocol::binary::split_body(body, header_len).map_err(|e| e.0)?;
    let answer: AnswerDocument = serde_json::from_slice(document).map_err(|e| e.to_string())?;
    // An answer's outputs have the shape of a request's inputs: decode them the same way.
    let mut as_request = InferRequest {
        id: None,
        parameters: Map::new(),
        inputs: answer.outputs,
        outputs: Vec::new(),
    };
    kserve::decode_inputs(&mut as_request, binary).map_err(|e| e.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_stage_request_carries_its_op_under_the_stage_parameter() {
        let ops: ResizeNormalize = serde_json::from_value(json!({"output": "x", "width": 4,
            "height": 4, "mean": [1, 2, 3], "std": [4, 5, 6]}))
        .unwrap();
        let image = Tensor {
            name: "image".into(),
            datatype: infergate_engine::DataType::Uint8,
            shape: vec![2, 2, 3],
            data: infergate_engine::TensorData::Raw((0..12).collect()),
        };
        let options = InferOptions::default();
        let encoded = encode_stage(std::slice::from_ref(&image), &ops, &[], options);
        assert!(encoded.stage);
        let header_len = encoded.header_len.unwrap();
        let mut request = kserve::parse_request(&encoded.body[..header_len]).unwrap();
        // Priority 0 and no timeout are left out; no outputs asked for means all of them.
        assert_eq!(
            request.parameters.keys().collect::<Vec<_>>(),
            ["binary_data_output", STAGE_OPS_PARAMETER]
        );
        assert!(request.outputs.is_empty());
        assert_eq!(stage_ops(&request).unwrap(), ops);
        let inputs = kserve::decode_inputs(&mut request, &encoded.body[header_len..]).unwrap();
        assert_eq!(inputs, vec![image]);
    }

    #[test]
    fn a_sequence_request_carries_tritons_parameters() {
        let x = Tensor::from_f32("x", vec![1, 1], &[2.0]).unwrap();
        let flags = SequenceFlags {
            id: CorrelationId::Str("s-1".into()),
            start: true,
            end: false,
        };
        let encoded = encode_sequence(
            std::slice::from_ref(&x),
            &[],
            InferOptions::default(),
            &flags,
        );
        let header_len = encoded.header_len.unwrap();
        let request = kserve::parse_request(&encoded.body[..header_len]).unwrap();
        assert_eq!(request.parameters["sequence_id"], json!("s-1"));
        assert_eq!(request.parameters["sequence_start"], json!(true));
        assert!(!request.parameters.contains_key("sequence_end"));
        let plain = encode(&[x], &[], InferOptions::default());
        let request = kserve::parse_request(&plain.body[..plain.header_len.unwrap()]).unwrap();
        assert!(!request.parameters.contains_key("sequence_id"));
    }

    #[test]
    fn a_stage_request_without_a_valid_op_is_refused() {
        let request = |parameters: Value| InferRequest {
            id: None,
            parameters: parameters.as_object().unwrap().clone(),
            inputs: Vec::new(),
            outputs: Vec::new(),
        };
        let missing = stage_ops(&request(json!({}))).unwrap_err();
        assert!(missing.contains(STAGE_OPS_PARAMETER), "{missing:?}");
        let zero_std = json!({STAGE_OPS_PARAMETER: {"output": "x", "width": 4, "height": 4,
            "mean": [0, 0, 0], "std": [1, 0, 1]}});
        let e = stage_ops(&request(zero_std)).unwrap_err();
        assert!(e.contains("std"), "{e:?}");
    }

    #[test]
    fn an_older_worker_without_the_stage_path_is_a_clear_error_not_a_retry() {
        let old = unknown_stage("w:1", true, StatusCode::NOT_FOUND, true).unwrap();
        assert_eq!(old.status, StatusCode::BAD_GATEWAY.as_u16());
        assert!(old.message.contains("pipeline_ops"), "{old:?}");
        // A model the worker cannot find answers JSON; a plain request's 404 is the model's.
        assert!(unknown_stage("w:1", true, StatusCode::NOT_FOUND, false).is_none());
        assert!(unknown_stage("w:1", false, StatusCode::NOT_FOUND, true).is_none());
        assert!(unknown_stage("w:1", true, StatusCode::BAD_REQUEST, true).is_none());
    }
}
