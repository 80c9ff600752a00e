//! The Open Inference Protocol's tensor encodings, from `infergate-protocol` (JSON `data`, flat
//! or nested; Triton's binary tensor extension), with its errors as the gateway's: a request
//! that does not decode is the client's fault (400).

use crate::error::{ApiError, ApiResult};
use infergate_engine::Tensor;
pub use infergate_protocol::binary::split_body;
pub use infergate_protocol::json::encode as to_json;
pub use infergate_protocol::kserve::{
    decode_inputs, parse_request, InferRequest, RequestedOutput, HEADER_LENGTH,
};
use infergate_protocol::DecodeError;

impl From<DecodeError> for ApiError {
    fn from(e: DecodeError) -> ApiError {
        ApiError::bad_request(e.0)
    }
}

/// Builds the response body: `(bytes, Some(json_len))` when any output is binary.
pub fn encode_response(
    request: &InferRequest,
    model_name: &str,
    model_version: u64,
    outputs: &[Tensor],
) -> ApiResult<(Vec<u8>, Option<usize>)> {
    infergate_protocol::kserve::encode_response(request, model_name, model_version, outputs)
        .map_err(|e| ApiError::internal(format!("encoding response: {e}")))
}
