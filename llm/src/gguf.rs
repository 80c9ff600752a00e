//! Reading and checking a GGUF file's header, metadata and tensor table without loading it.
//!
//! Uploads are validated here before anything is stored, so a bad file is refused with the
//! reason (not a GGUF file, unsupported version, truncated, no tokenizer, tensors pointing past
//! the end of the file...) instead of failing later inside llama.cpp. The format:
//! <https://github.com/ggml-org/ggml/blob/master/docs/gguf.md>.

use std::collections::BTreeMap;
use std::io::{BufReader, Read};
use std::path::Path;

const MAGIC: &[u8; 4] = b"GGUF";
const DEFAULT_ALIGNMENT: u64 = 32;
/// Bounds that keep a hostile header from making us allocate without limit.
const MAX_STRING: u64 = 64 << 20;
const MAX_ARRAY: u64 = 1 << 24;
const MAX_KV: u64 = 1 << 16;
const MAX_TENSORS: u64 = 1 << 20;
const MAX_DIMS: u32 = 4;
/// ggml's `GGML_TYPE_COUNT` in the llama.cpp these bindings build.
const GGML_TYPE_COUNT: u32 = 43;
/// String values kept in [`GgufInfo::metadata`] are cut to this many bytes; arrays are
/// summarised. The chat template is kept whole in its own field.
const SHOWN_STRING: usize = 256;

/// What a GGUF file is, from its header and metadata.
#[derive(Debug, Clone, PartialEq)]
pub struct GgufInfo {
    pub version: u32,
    pub tensor_count: u64,
    /// `general.architecture` (`llama`, `qwen2`, ...).
    pub architecture: String,
    /// `general.name`, when present.
    pub name: Option<String>,
    /// `{arch}.context_length`: the context the model was trained with.
    pub context_length: Option<u64>,
    /// `tokenizer.chat_template`, when present.
    pub chat_template: Option<String>,
    /// Scalar metadata as text (long strings cut, arrays summarised), for display.
    pub metadata: BTreeMap<String, String>,
}

impl GgufInfo {
    /// Bytes of KV cache one token takes (f16 keys and values in every layer), from the
    /// architecture's metadata; 0 when the metadata does not say.
    pub fn kv_bytes_per_token(&self) -> u64 {
        let get = |key: &str| {
            self.metadata
                .get(&format!("{}.{key}", self.architecture))
                .and_then(|v| v.parse::<u64>().ok())
        };
        let (Some(layers), Some(embedding), Some(heads)) = (
            get("block_count"),
            get("embedding_length"),
            get("attention.head_count"),
        ) else {
            return 0;
        };
        let kv_heads = get("attention.head_count_kv").unwrap_or(heads);
        // K and V, 2 bytes each, per layer: kv_heads × head size (embedding / heads).
        2 * 2 * layers * kv_heads * (embedding / heads.max(1))
    }
}

#[derive(Debug, thiserror::Error, PartialEq)]
#[error("{0}")]
pub struct GgufError(pub String);

fn err<T>(message: impl Into<String>) -> Result<T, GgufError> {
    Err(GgufError(message.into()))
}

/// A metadata value, as much of it as we keep.
#[derive(Debug)]
enum Value {
    Uint(u64),
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(String),
    Array { kind: u32, len: u64 },
}

impl Value {
    fn display(&self) -> String {
        match self {
            Value::Uint(v) => v.to_string(),
            Value::Int(v) => v.to_string(),
            Value::Float(v) => v.to_string(),
            Value::Bool(v) => v.to_string(),
            Value::Str(s) => {
                let mut end = s.len().min(SHOWN_STRING);
                while !s.is_char_boundary(end) {
                    end -= 1;
                }
                s[..end].to_string()
            }
            Value::Array { kind, len } => format!("[{len} values of type {kind}]"),
        }
    }
}

struct Reader<R> {
    inner: R,
    offset: u64,
    file_len: u64,
}

impl<R: Read> Reader<R> {
    fn bytes(&mut self, n: u64, what: &str) -> Result<Vec<u8>, GgufError> {
        if self.offset + n > self.file_len {
            return err(format!(
                "truncated file: {what} at byte {} needs {n} bytes, the file has {}",
                self.offset, self.file_len
            ));
        }
        let mut buf = vec![0; n as usize];
        self.inner
            .read_exact(&mut buf)
            .map_err(|e| GgufError(format!("reading {what}: {e}")))?;
        self.offset += n;
        Ok(buf)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], GgufError> {
        let v = self.bytes(N as u64, what)?;
        let mut a = [0; N];
        a.copy_from_slice(&v);
        Ok(a)
    }

    fn u32(&mut self, what: &str) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &str) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    fn string(&mut self, what: &str) -> Result<String, GgufError> {
        let len = self.u64(what)?;
        if len > MAX_STRING {
            return err(format!("{what}: a string of {len} bytes is not plausible"));
        }
        String::from_utf8(self.bytes(len, what)?)
            .map_err(|_| GgufError(format!("{what} is not UTF-8")))
    }

    /// One value of type `kind`; arrays are skipped over (their elements checked for length).
    fn value(&mut self, kind: u32, what: &str) -> Result<Value, GgufError> {
        Ok(match kind {
            0 => Value::Uint(self.array::<1>(what)?[0] as u64),
            1 => Value::Int(self.array::<1>(what)?[0] as i8 as i64),
            2 => Value::Uint(u16::from_le_bytes(self.array(what)?) as u64),
            3 => Value::Int(i16::from_le_bytes(self.array(what)?) as i64),
            4 => Value::Uint(self.u32(what)? as u64),
            5 => Value::Int(i32::from_le_bytes(self.array(what)?) as i64),
            6 => Value::Float(f32::from_le_bytes(self.array(what)?) as f64),
            7 => match self.array::<1>(what)?[0] {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                b => return err(format!("{what}: boolean byte {b} is neither 0 nor 1")),
            },
            8 => Value::Str(self.string(what)?),
            9 => {
                let elem = self.u32(what)?;
                let len = self.u64(what)?;
                if len > MAX_ARRAY {
                    return err(format!("{what}: an array of {len} values is not plausible"));
                }
                if elem == 9 {
                    return err(format!("{what}: nested arrays are not supported"));
                }
                for _ in 0..len {
                    self.value(elem, what)?;
                }
                Value::Array { kind: elem, len }
            }
            10 => Value::Uint(self.u64(what)?),
            11 => Value::Int(i64::from_le_bytes(self.array(what)?)),
            12 => Value::Float(f64::from_le_bytes(self.array(what)?)),
            other => return err(format!("{what}: unknown value type {other}")),
        })
    }
}

/// Reads and checks `path`. Every failure says what is wrong with the file.
pub fn inspect(path: &Path) -> Result<GgufInfo, GgufError> {
    let file = std::fs::File::open(path)
        .map_err(|e| GgufError(format!("opening {}: {e}", path.display())))?;
    let file_len = file
        .metadata()
        .map_err(|e| GgufError(format!("reading {}: {e}", path.display())))?
        .len();
    let mut r = Reader {
        inner: BufReader::with_capacity(1 << 16, file),
        offset: 0,
        file_len,
    };
    let magic = r.bytes(4.min(file_len), "the magic number")?;
    if magic != MAGIC {
        return err(format!(
            "not a GGUF file: it starts with {:?}, not \"GGUF\"",
            String::from_utf8_lossy(&magic)
        ));
    }
    let version = r.u32("the version")?;
    if !(2..=3).contains(&version) {
        return err(format!(
            "GGUF version {version} is not supported (2 and 3 are)"
        ));
    }
    let tensor_count = r.u64("the tensor count")?;
    let kv_count = r.u64("the metadata count")?;
    if tensor_count == 0 || tensor_count > MAX_TENSORS {
        return err(format!(
            "{tensor_count} tensors: a model has between 1 and {MAX_TENSORS}"
        ));
    }
    if kv_count > MAX_KV {
        return err(format!("{kv_count} metadata entries is not plausible"));
    }
    let mut values = BTreeMap::new();
    for i in 0..kv_count {
        let key = r.string(&format!("metadata key #{i}"))?;
        let kind = r.u32(&format!("the type of '{key}'"))?;
        let value = r.value(kind, &format!("metadata '{key}'"))?;
        if values.insert(key.clone(), value).is_some() {
            return err(format!("metadata key '{key}' appears twice"));
        }
    }
    let alignment = match values.get("general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some(Value::Uint(a)) if *a > 0 && a.is_power_of_two() => *a,
        Some(other) => {
            return err(format!(
                "general.alignment {} is not a power of two",
                other.display()
            ))
        }
    };
    let mut data_end = 0u64;
    for i in 0..tensor_count {
        let name = r.string(&format!("tensor #{i}'s name"))?;
        let dims = r.u32(&format!("tensor '{name}' dimensions"))?;
        if dims == 0 || dims > MAX_DIMS {
            return err(format!(
                "tensor '{name}' has {dims} dimensions (1 to {MAX_DIMS})"
            ));
        }
        let mut elements: u64 = 1;
        for _ in 0..dims {
            let d = r.u64(&format!("tensor '{name}' shape"))?;
            elements = elements
                .checked_mul(d)
                .filter(|&e| e > 0)
                .ok_or_else(|| GgufError(format!("tensor '{name}' has an invalid shape")))?;
        }
        let kind = r.u32(&format!("tensor '{name}' type"))?;
        if kind >= GGML_TYPE_COUNT {
            return err(format!("tensor '{name}' has unknown type {kind}"));
        }
        let offset = r.u64(&format!("tensor '{name}' offset"))?;
        if offset % alignment != 0 {
            return err(format!(
                "tensor '{name}' offset {offset} is not aligned to {alignment}"
            ));
        }
        data_end = data_end.max(offset);
    }
    let data_start = r.offset.div_ceil(alignment) * alignment;
    if data_start + data_end >= file_len {
        return err(format!(
            "truncated file: tensor data reaches past byte {}, the file has {file_len}",
            data_start + data_end
        ));
    }
    let text = |key: &str| match values.get(key) {
        Some(Value::Str(s)) => Some(s.clone()),
        _ => None,
    };
    let architecture = text("general.architecture")
        .ok_or_else(|| GgufError("metadata 'general.architecture' is missing".into()))?;
    for key in ["tokenizer.ggml.model", "tokenizer.ggml.tokens"] {
        if !values.contains_key(key) {
            return err(format!(
                "metadata '{key}' is missing: the file carries no tokenizer"
            ));
        }
    }
    let context_length = match values.get(&format!("{architecture}.context_length")) {
        Some(Value::Uint(n)) => Some(*n),
        _ => None,
    };
    let chat_template = text("tokenizer.chat_template");
    let name = text("general.name");
    let metadata = values
        .iter()
        .filter(|(k, _)| k.as_str() != "tokenizer.chat_template")
        .map(|(k, v)| (k.clone(), v.display()))
        .collect();
    Ok(GgufInfo {
        version,
        tensor_count,
        architecture,
        name,
        context_length,
        chat_template,
        metadata,
    })
}

/// Whether a file starts like a GGUF file (to route an upload to this validator).
pub fn looks_like_gguf(path: &Path) -> bool {
    let mut magic = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok()
        && &magic == MAGIC
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::io::Write;

    /// A minimal well-formed GGUF file: the given metadata and one F32 tensor of 4 values.
    pub(crate) fn build(kvs: &[(&str, &str)], tensor_bytes: usize) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(b"GGUF");
        out.extend_from_slice(&3u32.to_le_bytes());
        out.extend_from_slice(&1u64.to_le_bytes());
        out.extend_from_slice(&(kvs.len() as u64).to_le_bytes());
        let string = |out: &mut Vec<u8>, s: &str| {
            out.extend_from_slice(&(s.len() as u64).to_le_bytes());
            out.extend_from_slice(s.as_bytes());
        };
        for (k, v) in kvs {
            string(&mut out, k);
            if *k == "tokenizer.ggml.tokens" {
                out.extend_from_slice(&9u32.to_le_bytes());
                out.extend_from_slice(&8u32.to_le_bytes());
                out.extend_from_slice(&1u64.to_le_bytes());
                string(&mut out, v);
            } else {
                out.extend_from_slice(&8u32.to_le_bytes());
                string(&mut out, v);
            }
        }
        string(&mut out, "w");
        out.extend_from_slice(&1u32.to_le_bytes());
        out.extend_from_slice(&4u64.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&0u64.to_le_bytes());
        while out.len() % 32 != 0 {
            out.push(0);
        }
        out.extend(std::iter::repeat_n(0u8, tensor_bytes));
        out
    }

    const GOOD: &[(&str, &str)] = &[
        ("general.architecture", "llama"),
        ("tokenizer.ggml.model", "gpt2"),
        ("tokenizer.ggml.tokens", "a"),
        ("tokenizer.chat_template", "{{ messages }}"),
    ];

    fn check(bytes: &[u8]) -> Result<GgufInfo, GgufError> {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(bytes).unwrap();
        inspect(f.path())
    }

    #[test]
    fn a_well_formed_file_is_described() {
        let info = check(&build(GOOD, 16)).unwrap();
        assert_eq!(info.architecture, "llama");
        assert_eq!(info.tensor_count, 1);
        assert_eq!(info.chat_template.as_deref(), Some("{{ messages }}"));
        assert_eq!(
            info.metadata["tokenizer.ggml.tokens"],
            "[1 values of type 8]"
        );
    }

    #[test]
    fn bad_files_are_refused_with_the_reason() {
        let reason = |bytes: &[u8]| check(bytes).unwrap_err().0;
        assert!(reason(b"").contains("not a GGUF file"), "{}", reason(b""));
        assert!(reason(b"GGUF\x03\0").contains("truncated"));
        assert!(reason(b"\x08\x01onnx-model").contains("not a GGUF file"));
        let mut v4 = build(GOOD, 16);
        v4[4] = 4;
        assert!(reason(&v4).contains("version 4"));
        let full = build(GOOD, 16);
        assert!(reason(&full[..full.len() - 20]).contains("truncated"));
        assert!(reason(&full[..60]).contains("truncated"));
        let no_tokenizer = build(&GOOD[..1], 16);
        assert!(reason(&no_tokenizer).contains("tokenizer"));
        let no_arch = build(&GOOD[1..], 16);
        assert!(reason(&no_arch).contains("general.architecture"));
    }
}
