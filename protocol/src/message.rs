//! The text messages of the WebSocket inference stream (`/v2/stream`), classified before any
//! work is spawned so that the connection itself handles cancellations and duplicate ids.

use crate::kserve::InferRequest;
use crate::DecodeError;
use serde_json::{Map, Value};

/// One text message.
#[derive(Debug, PartialEq)]
pub enum Incoming {
    /// `{"cancel": ID}`: stop the request in flight with that id.
    Cancel(Value),
    /// An inference or generation request, its `"id"` taken out of the body.
    Request(Value, Map<String, Value>),
    /// Answered with an error frame (the id when the message had a usable one).
    Invalid(Value, DecodeError),
}

impl Incoming {
    pub fn parse(text: &str) -> Incoming {
        let invalid = |id, m: &str| Incoming::Invalid(id, DecodeError(m.to_string()));
        let mut body = match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(body)) => body,
            Ok(_) => return invalid(Value::Null, "a message must be a JSON object"),
            Err(e) => return invalid(Value::Null, &format!("invalid JSON: {e}")),
        };
        if let Some(id) = body.remove("cancel") {
            return match (is_id(&id), body.is_empty()) {
                (true, true) => Incoming::Cancel(id),
                (false, _) => invalid(
                    Value::Null,
                    "\"cancel\" takes the id (string or number) of a request",
                ),
                (true, false) => {
                    invalid(id, "a cancel message has no other fields: {\"cancel\": ID}")
                }
            };
        }
        match body.remove("id") {
            Some(id) if is_id(&id) => Incoming::Request(id, body),
            _ => invalid(
                Value::Null,
                "each message needs an \"id\" (string or number)",
            ),
        }
    }
}

fn is_id(id: &Value) -> bool {
    id.is_string() || id.is_number()
}

/// A request message's body (without `id`, `model`, `model_version`) as a KServe inference
/// request; its tensors are decoded by [`crate::kserve::decode_inputs`]. Binary tensor data has
/// no place in a text message.
pub fn inference_request(body: Map<String, Value>) -> Result<InferRequest, DecodeError> {
    let request: InferRequest = serde_json::from_value(Value::Object(body))
        .map_err(|e| DecodeError(format!("invalid inference request: {e}")))?;
    let binary = |p: &Map<String, Value>, name| p.get(name).and_then(Value::as_bool) == Some(true);
    if binary(&request.parameters, "binary_data_output")
        || request
            .outputs
            .iter()
            .any(|o| binary(&o.parameters, "binary_data"))
        || request
            .inputs
            .iter()
            .any(|i| i.parameters.contains_key("binary_data_size"))
    {
        return Err(DecodeError(
            "binary tensor data is not supported over WebSocket: use JSON data".into(),
        ));
    }
    Ok(request)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn messages_are_classified() {
        assert_eq!(
            Incoming::parse(r#"{"cancel": 3}"#),
            Incoming::Cancel(json!(3))
        );
        assert!(matches!(
            Incoming::parse(r#"{"id": "a", "model": "m"}"#),
            Incoming::Request(id, body) if id == "a" && body.contains_key("model")
        ));
        for bad in ["[]", "{", r#"{"cancel": [1]}"#, r#"{"model": "m"}"#] {
            assert!(
                matches!(Incoming::parse(bad), Incoming::Invalid(..)),
                "{bad}"
            );
        }
        assert!(matches!(
            Incoming::parse(r#"{"cancel": 1, "x": 2}"#),
            Incoming::Invalid(id, _) if id == 1
        ));
    }

    #[test]
    fn binary_data_is_refused() {
        let body = |v: Value| v.as_object().cloned().unwrap();
        let ok = json!({"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}]});
        assert!(inference_request(body(ok)).is_ok());
        let bin = json!({"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "parameters": {"binary_data_size": 4}}]});
        assert!(inference_request(body(bin)).is_err());
        let out = json!({"inputs": [], "parameters": {"binary_data_output": true}});
        assert!(inference_request(body(out)).is_err());
    }
}
