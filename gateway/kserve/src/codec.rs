//! KServe v2 over HTTP: a request body decoded into its document and input tensors, an answer
//! encoded, with the Open Inference Protocol's encodings from `infergate-protocol` (JSON
//! `data`, flat or nested; Triton's binary tensor extension, whose JSON header length travels
//! in `Inference-Header-Content-Length`, read and written only here).

use axum::body::Body;
use axum::response::Response;
use http::{HeaderMap, HeaderValue};
use infergate_engine::Tensor;
pub use infergate_protocol::json::encode as to_json;
use infergate_protocol::kserve::{self, InferRequest, HEADER_LENGTH};
use infergate_service::error::{ApiError, ApiResult};
use infergate_service::infer::stages::StageTimes;
use infergate_service::infer::Inferred;
use infergate_service::metrics::Served;

/// The binary extension's JSON header length, when the client sent one.
pub fn header_length(headers: &HeaderMap) -> ApiResult<Option<usize>> {
    headers
        .get(HEADER_LENGTH)
        .map(|v| {
            v.to_str()
                .ok()
                .and_then(|s| s.trim().parse::<usize>().ok())
                .ok_or_else(|| {
                    ApiError::bad_request("Inference-Header-Content-Length must be a byte count")
                })
        })
        .transpose()
}

/// A request body as its document and decoded input tensors; a body that does not decode is
/// the client's fault (400).
pub fn decode(headers: &HeaderMap, body: &[u8]) -> ApiResult<(InferRequest, Vec<Tensor>)> {
    decode_with(headers, body, &mut |_, _, _| Ok(None))
}

/// [`decode`], reading the inputs that live in shared memory with `shared`: given the input's
/// parameters, datatype and element count, its data (`Ok(None)`: no shared memory here).
pub fn decode_with(
    headers: &HeaderMap,
    body: &[u8],
    shared: &mut SharedInput<'_>,
) -> ApiResult<(InferRequest, Vec<Tensor>)> {
    let (json_part, binary_part) =
        infergate_protocol::binary::split_body(body, header_length(headers)?)?;
    let mut request = kserve::parse_request(json_part)?;
    // The service's own error (a region not found, a shrunk object) is kept as it is rather
    // than folded into the decoder's message.
    let mut failed = None;
    let decoded =
        kserve::decode_inputs_with(&mut request, binary_part, &mut |input, datatype, count| {
            shared(&input.parameters, datatype, count).map_err(|e| {
                let message = e.message.clone();
                failed = Some(e);
                message
            })
        });
    match (decoded, failed) {
        (Ok(inputs), _) => Ok((request, inputs)),
        (Err(_), Some(e)) => Err(e),
        (Err(e), None) => Err(e.into()),
    }
}

/// Reads an input that lives in shared memory (see [`decode_with`]).
pub type SharedInput<'a> = dyn FnMut(
        &serde_json::Map<String, serde_json::Value>,
        infergate_engine::DataType,
        usize,
    ) -> ApiResult<Option<infergate_engine::TensorData>>
    + 'a;

/// Whether a request body's JSON part mentions `word` (a parameter name): a cheap look before
/// a manager relays a body undecoded, for what only a decoded request can be routed by (shared
/// memory, sequences).
pub fn mentions(headers: &HeaderMap, body: &[u8], word: &str) -> ApiResult<bool> {
    let json_part = match header_length(headers)? {
        Some(n) => body.get(..n).unwrap_or(body),
        None => body,
    };
    Ok(json_part
        .windows(word.len())
        .any(|window| window == word.as_bytes()))
}

/// The answer: JSON, or JSON header + binary tensors as the request asked; with a pipeline's
/// stage times (`Server-Timing`) and, for the metrics, the model version that served.
pub fn respond(request: &InferRequest, inferred: Inferred) -> ApiResult<Response> {
    let (bytes, json_len) = kserve::encode_response(
        request,
        &inferred.model,
        inferred.version,
        &inferred.outputs,
    )
    .map_err(|e| ApiError::internal(format!("encoding response: {e}")))?;
    let mut response = Response::new(Body::from(bytes));
    set_encoding(&mut response, json_len);
    if let Some(times) = &inferred.times {
        timing_header(&mut response, times);
    }
    if let Some(served) = inferred.served {
        response.extensions_mut().insert(served);
    }
    Ok(response)
}

/// A worker's answer relayed as it came (see `infer::backend::forward`): its body is already in
/// the encoding the client asked for.
pub fn relay(answer: infergate_hop::remote::Answer, served: Served) -> Response {
    let mut response = Response::new(Body::from(answer.body));
    set_encoding(&mut response, answer.header_len);
    response.extensions_mut().insert(served);
    response
}

/// An answer's content type and, for binary tensors after a JSON header, that header's length.
fn set_encoding(response: &mut Response, json_len: Option<usize>) {
    let content_type = if json_len.is_some() {
        "application/octet-stream"
    } else {
        "application/json"
    };
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static(content_type),
    );
    if let Some(len) = json_len {
        response
            .headers_mut()
            .insert(HEADER_LENGTH, HeaderValue::from(len));
    }
}

/// A pipeline's stage times as `Server-Timing`.
pub fn timing_header(response: &mut Response, times: &StageTimes) {
    if let Ok(v) = HeaderValue::from_str(&times.header()) {
        response.headers_mut().insert("server-timing", v);
    }
}
