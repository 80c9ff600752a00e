//! One entry of a payload log: who asked which model what, and what it answered. Tensors are
//! written in KServe's JSON form while the entry has room (`max_entry_bytes` of tensor data),
//! then summarised by datatype, shape, size and SHA-256; names like a secret are redacted
//! before the entry leaves the process.

use super::config::TensorDataForm;
use infergate_engine::{Tensor, TensorData};
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};
use std::time::{SystemTime, UNIX_EPOCH};

const REDACTED: &str = "[redacted]";

/// What an entry redacts: lower-case name fragments.
#[derive(Debug, Clone)]
pub struct Redaction {
    names: Vec<String>,
    /// The bytes a fragment starts with (lower case): a name holding none of them, the common
    /// case, is passed after one look at each of its bytes.
    first: [bool; 256],
    shortest: usize,
    /// An empty fragment: every name is hidden.
    all: bool,
}

impl Redaction {
    /// The built-in names and `extra`.
    pub fn new(extra: &[String]) -> Redaction {
        let mut names: Vec<String> = super::config::ALWAYS_REDACTED
            .iter()
            .map(|n| n.to_string())
            .collect();
        names.extend(extra.iter().map(|n| n.to_ascii_lowercase()));
        let mut first = [false; 256];
        for n in &names {
            if let Some(&b) = n.as_bytes().first() {
                first[usize::from(b)] = true;
            }
        }
        Redaction {
            shortest: names.iter().map(String::len).min().unwrap_or(0),
            all: names.iter().any(String::is_empty),
            names,
            first,
        }
    }

    /// Whether `name` contains a fragment, case-insensitively. Asked for every field of every
    /// entry, so it neither allocates nor searches for a fragment where none can start.
    pub fn hides(&self, name: &str) -> bool {
        if self.all {
            return true;
        }
        let bytes = name.as_bytes();
        if self.shortest == 0 || bytes.len() < self.shortest {
            return false;
        }
        (0..=bytes.len() - self.shortest).any(|i| {
            self.first[usize::from(bytes[i].to_ascii_lowercase())]
                && self.names.iter().any(|n| {
                    let rest = &bytes[i..];
                    rest.len() >= n.len() && rest[..n.len()].eq_ignore_ascii_case(n.as_bytes())
                })
        })
    }

    /// Redacts, in place, every field of `value` (at any depth) whose name it hides.
    pub fn apply(&self, value: &mut Value) {
        match value {
            Value::Object(map) => {
                for (key, field) in map.iter_mut() {
                    if self.hides(key) {
                        *field = Value::String(REDACTED.into());
                    } else {
                        self.apply(field);
                    }
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|v| self.apply(v)),
            _ => {}
        }
    }
}

/// Tensors written into one entry, sharing its budget of bytes.
pub struct TensorWriter<'a> {
    redaction: &'a Redaction,
    left: usize,
    form: TensorDataForm,
}

impl<'a> TensorWriter<'a> {
    pub fn new(
        redaction: &'a Redaction,
        max_bytes: usize,
        form: TensorDataForm,
    ) -> TensorWriter<'a> {
        TensorWriter {
            redaction,
            left: max_bytes,
            form,
        }
    }

    /// Appends `tensor` to `out` as one JSON object: KServe's `name`, `datatype`, `shape`,
    /// then its elements (`data`, or `data_base64`) while the entry has room and they have
    /// that form, a `summary` otherwise. A tensor named like a secret keeps only its name,
    /// datatype and shape. Written straight into the entry's text: a `serde_json::Value` per
    /// element would cost more than the request that carried the tensor.
    pub fn write_into(&mut self, out: &mut String, tensor: &Tensor) {
        out.push_str("{\"name\":");
        push_json_string(out, &tensor.name);
        out.push_str(",\"datatype\":\"");
        out.push_str(tensor.datatype.name());
        out.push_str("\",\"shape\":[");
        for (i, d) in tensor.shape.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(itoa::Buffer::new().format(*d));
        }
        out.push_str("],");
        let bytes = tensor.byte_len();
        if self.redaction.hides(&tensor.name) {
            out.push_str("\"data\":\"");
            out.push_str(REDACTED);
            out.push('"');
        } else if bytes <= self.left && self.form == TensorDataForm::Base64 {
            self.left -= bytes;
            // The text's exact growth, at once: doubling up to it would copy the entry again.
            let framing = match &tensor.data {
                TensorData::Bytes(items) => 4 * items.len(),
                TensorData::Raw(_) => 0,
            };
            out.reserve((bytes + framing).div_ceil(3) * 4 + 20);
            out.push_str("\"data_base64\":\"");
            push_base64(out, &tensor.data);
            out.push('"');
        } else if bytes <= self.left && infergate_protocol::json::represents(tensor) {
            self.left -= bytes;
            out.push_str("\"data\":");
            push_json_data(out, tensor);
        } else {
            let mut digest = Sha256::new();
            match &tensor.data {
                TensorData::Raw(raw) => digest.update(raw),
                TensorData::Bytes(items) => {
                    for item in items {
                        digest.update((item.len() as u64).to_le_bytes());
                        digest.update(item);
                    }
                }
            }
            out.push_str("\"summary\":{\"bytes\":");
            out.push_str(itoa::Buffer::new().format(bytes));
            out.push_str(",\"sha256\":\"");
            out.push_str(&hex::encode(digest.finalize()));
            out.push_str("\"}");
        }
        out.push('}');
    }
}

/// `text` as a JSON string.
fn push_json_string(out: &mut String, text: &str) {
    // Serialising a &str cannot fail.
    out.push_str(&serde_json::to_string(text).unwrap_or_else(|_| "\"\"".into()));
}

/// The elements as KServe's `data` array. FP32, the common case, goes through ryu's shortest
/// form of each f32 (it reads back as the same f32); the other types through the protocol's
/// own encoder.
fn push_json_data(out: &mut String, tensor: &Tensor) {
    match (&tensor.data, tensor.datatype) {
        (TensorData::Raw(raw), infergate_engine::DataType::Fp32) => {
            let mut buffer = ryu::Buffer::new();
            out.push('[');
            for (i, c) in raw.chunks_exact(4).enumerate() {
                if i > 0 {
                    out.push(',');
                }
                let x = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                if x.is_finite() {
                    out.push_str(buffer.format_finite(x));
                } else {
                    out.push_str("null");
                }
            }
            out.push(']');
        }
        _ => out.push_str(&infergate_protocol::json::encode(tensor).to_string()),
    }
}

/// A tensor's elements as KServe's binary extension carries them, in base64 (no character of
/// which needs escaping in JSON): fixed-size elements as their little-endian bytes, each
/// BYTES element after its 4-byte length.
fn push_base64(out: &mut String, data: &TensorData) {
    let engine = base64_simd::STANDARD;
    match data {
        TensorData::Raw(raw) => engine.encode_append(raw, out),
        TensorData::Bytes(items) => {
            let mut framed = Vec::with_capacity(items.iter().map(|i| i.len() + 4).sum());
            for item in items {
                framed.extend_from_slice(&(item.len() as u32).to_le_bytes());
                framed.extend_from_slice(item);
            }
            engine.encode_append(&framed, out);
        }
    }
}

/// An entry as its request captured it: the fields known at once, and the tensors unencoded
/// (the sink's writer renders them, off the request's thread).
pub struct Captured {
    pub fields: Map<String, Value>,
    pub tensors: Option<CapturedTensors>,
}

/// A KServe request as an entry keeps it.
#[derive(Clone)]
pub struct CapturedRequest {
    pub inputs: Vec<Tensor>,
    /// The outputs asked for by name.
    pub outputs: Vec<String>,
    pub parameters: Vec<(String, String)>,
}

/// A KServe exchange's tensors, as the mode keeps them.
pub struct CapturedTensors {
    /// `None` when the mode leaves the request out.
    pub request: Option<CapturedRequest>,
    /// `None` when the mode leaves the answer out, or there was none.
    pub outputs: Option<Vec<Tensor>>,
}

/// Renders captured entries: tensors within the entry's budget, then redaction.
pub struct Renderer {
    pub redaction: Redaction,
    pub max_entry_bytes: usize,
    pub form: TensorDataForm,
}

impl Renderer {
    /// One JSON object, redacted: the fields as a JSON tree (they are few), the tensors
    /// written after them straight into the text.
    pub fn render(&self, captured: Captured) -> String {
        let mut fields = Value::Object(captured.fields);
        self.redaction.apply(&mut fields);
        let mut out = fields.to_string();
        let Some(tensors) = captured.tensors else {
            return out;
        };
        // Reopen the object: the fields always hold at least the time and the model.
        if out.ends_with('}') && out.len() > 2 {
            out.pop();
        } else {
            return out;
        }
        let mut writer = TensorWriter::new(&self.redaction, self.max_entry_bytes, self.form);
        let list = |out: &mut String, writer: &mut TensorWriter, list: &[Tensor]| {
            out.push('[');
            for (i, t) in list.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                writer.write_into(out, t);
            }
            out.push(']');
        };
        if let Some(request) = tensors.request {
            out.push_str(",\"request\":{\"inputs\":");
            list(&mut out, &mut writer, &request.inputs);
            out.push_str(",\"outputs\":");
            out.push_str(&json!(request.outputs).to_string());
            let mut params = parameters(&request.parameters);
            self.redaction.apply(&mut params);
            out.push_str(",\"parameters\":");
            out.push_str(&params.to_string());
            out.push('}');
        }
        if let Some(outputs) = tensors.outputs {
            out.push_str(",\"response\":{\"outputs\":");
            list(&mut out, &mut writer, &outputs);
            out.push('}');
        }
        out.push('}');
        out
    }
}

/// Parameters as a JSON object, values as text.
pub fn parameters(parameters: &[(String, String)]) -> Value {
    Value::Object(
        parameters
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect::<Map<String, Value>>(),
    )
}

/// Now as RFC 3339 in UTC, to the millisecond.
pub fn now_rfc3339() -> String {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    rfc3339(since.as_secs() as i64, since.subsec_millis())
}

fn rfc3339(unix_s: i64, millis: u32) -> String {
    let days = unix_s.div_euclid(86_400);
    let secs = unix_s.rem_euclid(86_400);
    let (y, m, d) = infergate_traffic::period::civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_like_a_secret_are_hidden_whatever_their_case() {
        let r = Redaction::new(&["ssn".into(), "X-Custom".into()]);
        for hidden in [
            "password",
            "DB_PASSWORD",
            "user.ApiKey",
            "ssn",
            "my_ssn_2",
            "x-custom-id",
            "Authorization",
        ] {
            assert!(r.hides(hidden), "{hidden}");
        }
        for shown in [
            "",
            "time",
            "request_id",
            "model",
            "input_ids",
            "ss",
            "pass",
            "key",
            "api",
        ] {
            assert!(!r.hides(shown), "{shown}");
        }
        assert!(Redaction::new(&["".into()]).hides("anything"));
    }

    #[test]
    fn times_are_rfc3339_in_utc() {
        assert_eq!(rfc3339(0, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_795_874_400, 123), "2026-11-28T14:00:00.123Z");
    }

    #[test]
    fn secrets_are_redacted_at_any_depth_and_tensors_summarised_past_the_budget() {
        let redaction = Redaction::new(&["ssn".to_string()]);
        let mut v =
            json!({"a": {"Api_Key": "k", "list": [{"user_SSN": 1, "ok": 2}]}, "password": "p"});
        redaction.apply(&mut v);
        assert_eq!(
            v,
            json!({"a": {"Api_Key": REDACTED, "list": [{"user_SSN": REDACTED, "ok": 2}]}, "password": REDACTED})
        );
        let small = Tensor::from_f32("x", vec![1, 2], &[1.0, 2.0]).expect("tensor");
        let large = Tensor::from_f32("y", vec![1, 4], &[1.0; 4]).expect("tensor");
        let hidden = Tensor::from_f32("secret_input", vec![1], &[3.0]).expect("tensor");
        let write = |w: &mut TensorWriter, t: &Tensor| -> Value {
            let mut out = String::new();
            w.write_into(&mut out, t);
            serde_json::from_str(&out).expect("one JSON object")
        };
        let mut w = TensorWriter::new(&redaction, 12, TensorDataForm::Json);
        let written = write(&mut w, &small);
        assert_eq!(
            written,
            json!({"name": "x", "datatype": "FP32", "shape": [1, 2], "data": [1.0, 2.0]})
        );
        let summary = write(&mut w, &large);
        assert!(summary.get("data").is_none());
        assert_eq!(summary["summary"]["bytes"], 16);
        assert_eq!(
            summary["summary"]["sha256"].as_str().map(str::len),
            Some(64)
        );
        assert_eq!(write(&mut w, &hidden)["data"], REDACTED);
        let mut w = TensorWriter::new(&redaction, 100, TensorDataForm::Base64);
        // 1.0 and 2.0 as little-endian FP32: 00 00 80 3f 00 00 00 40.
        assert_eq!(write(&mut w, &small)["data_base64"], "AACAPwAAAEA=");
        let text = Tensor::new(
            "t",
            infergate_engine::DataType::Bytes,
            vec![1],
            TensorData::Bytes(vec![b"ab".to_vec()]),
        )
        .expect("tensor");
        assert_eq!(write(&mut w, &text)["data_base64"], "AgAAAGFi");
        // A tenth as f32 is written in its shortest form, which reads back as the same f32.
        let tenth = Tensor::from_f32("z", vec![1], &[0.1]).expect("tensor");
        let mut w = TensorWriter::new(&redaction, 100, TensorDataForm::Json);
        assert_eq!(write(&mut w, &tenth)["data"], json!([0.1]));
    }
}
