//! A request as every protocol hands it to [`super::run`].

use crate::error::{ApiError, ApiResult};
use infergate_engine::{CorrelationId, InferOptions, SequenceFlags, Tensor};
use infergate_protocol::kserve::InferRequest;
use serde_json::Value;
use std::time::Duration;

pub struct Request {
    pub inputs: Vec<Tensor>,
    /// The outputs asked for by name; empty for all of them.
    pub outputs: Vec<String>,
    /// The request's scalar parameters as text: a pipeline's plugins get them as metadata.
    pub parameters: Vec<(String, String)>,
    /// Queue priority and timeout for the model version that runs it.
    pub options: InferOptions,
    /// Its place in a sequence of a stateful model (request parameters `sequence_id`,
    /// `sequence_start`, `sequence_end`), when it names one.
    pub sequence: Option<SequenceFlags>,
    /// The request's header fields (HTTP headers, gRPC metadata, a WebSocket's upgrade
    /// request): what a traffic policy that is sticky by header reads. Empty when the
    /// transport passes none.
    pub headers: http::HeaderMap,
}

/// Triton's request parameter naming a request's sequence (an unsigned integer or a string).
pub const SEQUENCE_ID: &str = "sequence_id";
const SEQUENCE_START: &str = "sequence_start";
const SEQUENCE_END: &str = "sequence_end";

impl Request {
    /// A KServe v2 request, as HTTP, gRPC and WebSocket all decode one, with its decoded
    /// inputs. Triton's parameters `priority` (1 = highest) and `timeout` (microseconds in the
    /// queue) become the options.
    pub fn kserve(request: &InferRequest, inputs: Vec<Tensor>) -> ApiResult<Request> {
        let parameters = request
            .parameters
            .iter()
            .filter_map(|(k, v)| match v {
                Value::String(s) => Some((k.clone(), s.clone())),
                Value::Number(_) | Value::Bool(_) => Some((k.clone(), v.to_string())),
                _ => None,
            })
            .collect();
        Ok(Request {
            inputs,
            outputs: request.outputs.iter().map(|o| o.name.clone()).collect(),
            parameters,
            options: options(request)?,
            sequence: sequence(request)?,
            headers: http::HeaderMap::new(),
        })
    }

    /// The same request carrying the transport's header fields (for sticky traffic splits).
    pub fn with_headers(mut self, headers: http::HeaderMap) -> Request {
        self.headers = headers;
        self
    }

    /// Whether the request is one step of a stateful sequence (it names one in `sequence_id`,
    /// `sequence_start` or `sequence_end`): such a step depends on the state earlier steps
    /// left, so the traffic split, the mirror and the response cache leave it alone.
    pub fn is_stateful(&self) -> bool {
        self.sequence.is_some()
    }
}

/// The sequence flags a request carries: `None` when it names no sequence (no id, 0 or "", and
/// neither flag). A flag without an id is kept, so that a stateful model can say what is
/// missing.
fn sequence(request: &InferRequest) -> ApiResult<Option<SequenceFlags>> {
    let flag = |name: &str| -> ApiResult<bool> {
        match request.parameters.get(name) {
            None => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(v) => Err(ApiError::bad_request(format!(
                "request parameter '{name}' must be true or false, got {v}"
            ))),
        }
    };
    let id = match request.parameters.get(SEQUENCE_ID) {
        None => CorrelationId::Int(0),
        Some(Value::String(s)) => CorrelationId::Str(s.clone()),
        Some(v) => CorrelationId::Int(v.as_u64().ok_or_else(|| {
            ApiError::bad_request(format!(
                "request parameter '{SEQUENCE_ID}' must be a non-negative integer or a string, got {v}"
            ))
        })?),
    };
    let (start, end) = (flag(SEQUENCE_START)?, flag(SEQUENCE_END)?);
    if id.is_none() && !start && !end {
        return Ok(None);
    }
    Ok(Some(SequenceFlags { id, start, end }))
}

fn options(request: &InferRequest) -> ApiResult<InferOptions> {
    let number = |name: &str| -> ApiResult<Option<u64>> {
        match request.parameters.get(name) {
            None => Ok(None),
            Some(v) => v.as_u64().map(Some).ok_or_else(|| {
                ApiError::bad_request(format!(
                    "request parameter '{name}' must be a non-negative integer, got {v}"
                ))
            }),
        }
    };
    let priority = number("priority")?.unwrap_or(0);
    Ok(InferOptions {
        priority: u32::try_from(priority).map_err(|_| {
            ApiError::bad_request(format!(
                "request parameter 'priority' {priority} is too large"
            ))
        })?,
        timeout: number("timeout")?
            .filter(|&us| us > 0)
            .map(Duration::from_micros),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn kserve(body: Value) -> ApiResult<Request> {
        let request: InferRequest = serde_json::from_value(body).unwrap();
        Request::kserve(&request, Vec::new())
    }

    #[test]
    fn priority_and_timeout_become_the_options() {
        let r =
            kserve(json!({"inputs": [], "parameters": {"priority": 2, "timeout": 1500}})).unwrap();
        assert_eq!(r.options.priority, 2);
        assert_eq!(r.options.timeout, Some(Duration::from_micros(1500)));
        // A zero timeout is no timeout; no priority is the model's default level.
        let r = kserve(json!({"inputs": [], "parameters": {"timeout": 0}})).unwrap();
        assert_eq!((r.options.priority, r.options.timeout), (0, None));
    }

    #[test]
    fn malformed_options_are_the_clients_fault() {
        for parameters in [
            json!({"priority": -1}),
            json!({"priority": 4294967296u64}),
            json!({"timeout": "soon"}),
            json!({"timeout": 1.5}),
        ] {
            let e = kserve(json!({"inputs": [], "parameters": parameters}))
                .err()
                .unwrap();
            assert_eq!(e.kind, crate::error::Kind::Invalid, "{parameters}");
        }
    }

    #[test]
    fn sequence_parameters_become_flags() {
        let flags = |parameters: Value| {
            kserve(json!({"inputs": [], "parameters": parameters})).map(|r| r.sequence)
        };
        assert_eq!(flags(json!({})).unwrap(), None);
        assert_eq!(flags(json!({"sequence_id": 0})).unwrap(), None);
        assert_eq!(
            flags(json!({"sequence_id": 42, "sequence_start": true})).unwrap(),
            Some(SequenceFlags {
                id: CorrelationId::Int(42),
                start: true,
                end: false
            })
        );
        assert_eq!(
            flags(json!({"sequence_id": "user-7", "sequence_end": true})).unwrap(),
            Some(SequenceFlags {
                id: CorrelationId::Str("user-7".into()),
                start: false,
                end: true
            })
        );
        assert_eq!(
            flags(json!({"sequence_start": true})).unwrap().unwrap().id,
            CorrelationId::Int(0)
        );
        for bad in [
            json!({"sequence_id": -3}),
            json!({"sequence_id": 1.5}),
            json!({"sequence_id": 1, "sequence_start": 1}),
        ] {
            assert!(flags(bad.clone()).is_err(), "{bad}");
        }
    }

    #[test]
    fn scalar_parameters_reach_plugins_as_text_and_outputs_by_name() {
        let r = kserve(json!({
            "inputs": [],
            "parameters": {"lang": "en", "k": 3, "fast": true, "nested": {"a": 1}},
            "outputs": [{"name": "b"}, {"name": "a"}],
        }))
        .unwrap();
        let mut parameters = r.parameters.clone();
        parameters.sort();
        assert_eq!(
            parameters,
            [("fast", "true"), ("k", "3"), ("lang", "en")].map(|(k, v)| (k.into(), v.into()))
        );
        assert_eq!(r.outputs, ["b", "a"]);
    }
}
