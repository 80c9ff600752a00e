//! KServe JSON tensor data: a flat or nested array of elements (or a single element),
//! decoded straight from the request text into little-endian bytes, with no JSON tree in
//! between (a tree costs ~20 times the text's size), and encoded back for answers.

use crate::limits;
use crate::tensor::{DataType, Tensor, TensorData};
use serde::de::{self, DeserializeSeed, Deserializer, SeqAccess, Visitor};
use serde_json::Value;
use std::fmt;

/// Decodes `count` elements of `datatype` from a JSON `data` value's text.
pub fn decode(datatype: DataType, count: usize, text: &str) -> Result<TensorData, String> {
    limits::json_elements(count, text.len())?;
    let mut elements = Elements::new(datatype, count);
    let mut de = serde_json::Deserializer::from_str(text);
    let walked = Walk(&mut elements)
        .deserialize(&mut de)
        .and_then(|()| de.end());
    if let Some(reason) = elements.rejected.take() {
        return Err(reason);
    }
    walked.map_err(|e| format!("invalid data: {e}"))?;
    elements.finish()
}

/// One JSON scalar, as the parser hands it over.
#[derive(Clone, Copy)]
enum Scalar<'s> {
    Bool(bool),
    Unsigned(u64),
    Signed(i64),
    Float(f64),
    Str(&'s str),
}

impl fmt::Display for Scalar<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scalar::Bool(b) => write!(f, "{b}"),
            Scalar::Unsigned(u) => write!(f, "{u}"),
            Scalar::Signed(i) => write!(f, "{i}"),
            // Debug keeps the exponent (1e39), as the client wrote it.
            Scalar::Float(x) => write!(f, "{x:?}"),
            Scalar::Str(s) => write!(f, "{s:?}"),
        }
    }
}

/// The decoded elements so far; `rejected` keeps the reason the walk stopped, which reads
/// better than the parser's error wrapped around it.
struct Elements {
    datatype: DataType,
    expected: usize,
    seen: usize,
    raw: Vec<u8>,
    bytes: Vec<Vec<u8>>,
    rejected: Option<String>,
}

impl Elements {
    /// Reserves for `count` elements: [`limits::json_elements`] bounded it by the text's size.
    fn new(datatype: DataType, count: usize) -> Elements {
        let (raw, bytes) = match datatype.size() {
            Some(size) => (Vec::with_capacity(count.saturating_mul(size)), Vec::new()),
            None => (Vec::new(), Vec::with_capacity(count)),
        };
        Elements {
            datatype,
            expected: count,
            seen: 0,
            raw,
            bytes,
            rejected: None,
        }
    }

    fn push(&mut self, v: Scalar<'_>) -> Result<(), String> {
        if self.seen == self.expected {
            return Err(format!(
                "more elements given than the {} the shape declares",
                self.expected
            ));
        }
        self.seen += 1;
        let datatype = self.datatype;
        let not = |what: &str| format!("{v} is not {what}");
        let out = &mut self.raw;
        macro_rules! int {
            ($t:ty) => {{
                let x: i128 = match v {
                    Scalar::Unsigned(u) => u.into(),
                    Scalar::Signed(i) => i.into(),
                    _ => return Err(not("an integer")),
                };
                let x =
                    <$t>::try_from(x).map_err(|_| format!("{v} is out of range for {datatype}"))?;
                out.extend_from_slice(&x.to_le_bytes());
            }};
        }
        let float = || match v {
            Scalar::Unsigned(u) => Ok(u as f64),
            Scalar::Signed(i) => Ok(i as f64),
            Scalar::Float(x) => Ok(x),
            _ => Err(not("a number")),
        };
        let out_of_range = || format!("{v} is out of range for {datatype}");
        match datatype {
            DataType::Bool => {
                let b = match v {
                    Scalar::Bool(b) => b,
                    Scalar::Unsigned(0) => false,
                    Scalar::Unsigned(1) => true,
                    _ => return Err(not("a boolean")),
                };
                out.push(u8::from(b));
            }
            DataType::Uint8 => int!(u8),
            DataType::Uint16 => int!(u16),
            DataType::Uint32 => int!(u32),
            DataType::Uint64 => int!(u64),
            DataType::Int8 => int!(i8),
            DataType::Int16 => int!(i16),
            DataType::Int32 => int!(i32),
            DataType::Int64 => int!(i64),
            // JSON numbers are finite; one past the type's range would silently become
            // infinity, which no client means.
            DataType::Fp16 => {
                let x = half::f16::from_f64(float()?);
                if x.is_infinite() {
                    return Err(out_of_range());
                }
                out.extend_from_slice(&x.to_le_bytes());
            }
            DataType::Fp32 => {
                let x = float()? as f32;
                if x.is_infinite() {
                    return Err(out_of_range());
                }
                out.extend_from_slice(&x.to_le_bytes());
            }
            DataType::Fp64 => out.extend_from_slice(&float()?.to_le_bytes()),
            DataType::Bytes => match v {
                Scalar::Str(s) => self.bytes.push(s.as_bytes().to_vec()),
                _ => return Err(format!("BYTES elements must be strings, got {v}")),
            },
        }
        Ok(())
    }

    fn finish(self) -> Result<TensorData, String> {
        if self.seen != self.expected {
            return Err(format!(
                "{} elements given, shape needs {}",
                self.seen, self.expected
            ));
        }
        Ok(match self.datatype {
            DataType::Bytes => TensorData::Bytes(self.bytes),
            _ => TensorData::Raw(self.raw),
        })
    }
}

/// Walks nested arrays depth-first, handing each scalar to the elements (serde_json bounds
/// the nesting depth).
struct Walk<'e>(&'e mut Elements);

impl Walk<'_> {
    fn scalar<E: de::Error>(self, v: Scalar<'_>) -> Result<(), E> {
        self.0.push(v).map_err(|reason| {
            self.0.rejected = Some(reason);
            E::custom("element rejected")
        })
    }
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} elements, flat or in nested arrays", self.0.datatype)
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        self.scalar(Scalar::Bool(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        self.scalar(Scalar::Unsigned(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        self.scalar(Scalar::Signed(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        self.scalar(Scalar::Float(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        self.scalar(Scalar::Str(v))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let elements = self.0;
        while seq.next_element_seed(Walk(&mut *elements))?.is_some() {}
        Ok(())
    }
}

/// Whether [`encode`] gives a tensor's elements exactly: always, but for BYTES elements that
/// are not UTF-8 (a JSON string holds text; a zero byte is fine, as `\u0000`). Such a tensor
/// belongs in the binary section, where BYTES elements are any bytes.
pub fn represents(tensor: &Tensor) -> bool {
    match &tensor.data {
        TensorData::Bytes(items) => items.iter().all(|b| std::str::from_utf8(b).is_ok()),
        TensorData::Raw(_) => true,
    }
}

/// Encodes a tensor's elements as a flat JSON array. BYTES elements that are not UTF-8 come out
/// with U+FFFD in place of the invalid bytes ([`represents`] says when that happens).
pub fn encode(tensor: &Tensor) -> Value {
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
    fn each<const N: usize>(raw: &[u8], conv: impl Fn([u8; N]) -> Value) -> Value {
        Value::Array(
            raw.chunks_exact(N)
                .map(|c| conv(c.try_into().unwrap_or([0; N])))
                .collect(),
        )
    }
    fn num(x: f64) -> Value {
        serde_json::Number::from_f64(x).map_or(Value::Null, Value::Number)
    }
    match tensor.datatype {
        DataType::Bool => Value::Array(raw.iter().map(|&b| Value::Bool(b != 0)).collect()),
        DataType::Uint8 => Value::Array(raw.iter().map(|&b| Value::from(b)).collect()),
        DataType::Int8 => Value::Array(raw.iter().map(|&b| Value::from(b as i8)).collect()),
        DataType::Uint16 => each(raw, |c| Value::from(u16::from_le_bytes(c))),
        DataType::Int16 => each(raw, |c| Value::from(i16::from_le_bytes(c))),
        DataType::Uint32 => each(raw, |c| Value::from(u32::from_le_bytes(c))),
        DataType::Int32 => each(raw, |c| Value::from(i32::from_le_bytes(c))),
        DataType::Uint64 => each(raw, |c| Value::from(u64::from_le_bytes(c))),
        DataType::Int64 => each(raw, |c| Value::from(i64::from_le_bytes(c))),
        DataType::Fp16 => each(raw, |c| num(half::f16::from_le_bytes(c).to_f64())),
        DataType::Fp32 => each(raw, |c| num(f32::from_le_bytes(c) as f64)),
        DataType::Fp64 => each(raw, |c| num(f64::from_le_bytes(c))),
        DataType::Bytes => Value::Array(Vec::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_flat_and_scalar_data_decode() {
        let flat = decode(DataType::Fp32, 4, "[1, 2, 3, 4]").unwrap();
        assert_eq!(decode(DataType::Fp32, 4, "[[1, 2], [3, 4]]").unwrap(), flat);
        assert_eq!(
            decode(DataType::Int64, 1, "7").unwrap(),
            TensorData::Raw(7i64.to_le_bytes().to_vec())
        );
        assert_eq!(
            decode(DataType::Bytes, 2, r#"["a\n", ""]"#).unwrap(),
            TensorData::Bytes(vec![b"a\n".to_vec(), Vec::new()])
        );
    }

    #[test]
    fn wrong_elements_say_what_is_wrong() {
        let cases = [
            (DataType::Fp32, 1, "[1e39]", "1e39 is out of range for FP32"),
            (DataType::Fp32, 1, "[-3.5e38]", "out of range for FP32"),
            (
                DataType::Fp16,
                1,
                "[70000]",
                "70000 is out of range for FP16",
            ),
            (DataType::Uint8, 1, "[256]", "256 is out of range for UINT8"),
            (DataType::Int32, 1, r#"["x"]"#, r#""x" is not an integer"#),
            (DataType::Int32, 1, "[1.5]", "1.5 is not an integer"),
            (DataType::Bool, 1, "[2]", "2 is not a boolean"),
            (DataType::Bytes, 1, "[1]", "BYTES elements must be strings"),
            (
                DataType::Fp32,
                3,
                "[1, 2]",
                "2 elements given, shape needs 3",
            ),
            (
                DataType::Fp32,
                1,
                "[1, 2]",
                "more elements given than the 1",
            ),
            (DataType::Fp32, 1, "[null]", "invalid data"),
            (DataType::Fp32, 1, "[1", "invalid data"),
            (DataType::Fp32, 1 << 40, "[1]", "at most 2"),
        ];
        for (datatype, count, text, expected) in cases {
            let e = decode(datatype, count, text).unwrap_err();
            assert!(e.contains(expected), "{text}: {e}");
        }
        // Within range after rounding: the largest finite value.
        assert!(decode(DataType::Fp32, 1, "[3.4028235e38]").is_ok());
    }

    #[test]
    fn bytes_elements_with_zero_bytes_decode_and_encode_exactly() {
        let text = r#"["he\u0000llo", "\u0000\u0001\u0002\u0003"]"#;
        let data = decode(DataType::Bytes, 2, text).unwrap();
        assert_eq!(
            data,
            TensorData::Bytes(vec![b"he\x00llo".to_vec(), b"\x00\x01\x02\x03".to_vec()])
        );
        let tensor = Tensor::new("t", DataType::Bytes, vec![2], data).unwrap();
        assert!(represents(&tensor));
        let encoded = serde_json::to_string(&encode(&tensor)).unwrap();
        assert_eq!(encoded, text.replace(", ", ","));
    }

    #[test]
    fn bytes_that_are_not_utf8_are_not_represented_in_json() {
        let tensor = Tensor::new(
            "t",
            DataType::Bytes,
            vec![2],
            TensorData::Bytes(vec![b"ok".to_vec(), vec![0xff, 0x00, 0xfe]]),
        )
        .unwrap();
        assert!(!represents(&tensor));
        assert!(represents(&Tensor::from_f32("f", vec![1], &[1.0]).unwrap()));
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_stack_overflow() {
        let text = format!("{}1{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(decode(DataType::Fp32, 1, &text).is_err());
    }
}
