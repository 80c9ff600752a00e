//! The values exchanged with plugins, as plain Rust types (no wasmtime types
//! in the public API).

/// Element type of a tensor; one per KServe v2 datatype.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Datatype {
    Bool,
    Uint8,
    Uint16,
    Uint32,
    Uint64,
    Int8,
    Int16,
    Int32,
    Int64,
    Fp16,
    Fp32,
    Fp64,
    Bytes,
}

impl Datatype {
    /// Bytes per element; `None` for `Bytes`, whose elements vary in length.
    pub fn element_size(self) -> Option<usize> {
        match self {
            Datatype::Bool | Datatype::Uint8 | Datatype::Int8 => Some(1),
            Datatype::Uint16 | Datatype::Int16 | Datatype::Fp16 => Some(2),
            Datatype::Uint32 | Datatype::Int32 | Datatype::Fp32 => Some(4),
            Datatype::Uint64 | Datatype::Int64 | Datatype::Fp64 => Some(8),
            Datatype::Bytes => None,
        }
    }

    /// The KServe v2 name (`"FP32"`, `"BYTES"`...).
    pub fn kserve_name(self) -> &'static str {
        match self {
            Datatype::Bool => "BOOL",
            Datatype::Uint8 => "UINT8",
            Datatype::Uint16 => "UINT16",
            Datatype::Uint32 => "UINT32",
            Datatype::Uint64 => "UINT64",
            Datatype::Int8 => "INT8",
            Datatype::Int16 => "INT16",
            Datatype::Int32 => "INT32",
            Datatype::Int64 => "INT64",
            Datatype::Fp16 => "FP16",
            Datatype::Fp32 => "FP32",
            Datatype::Fp64 => "FP64",
            Datatype::Bytes => "BYTES",
        }
    }

    /// Parses a KServe v2 name.
    pub fn from_kserve_name(name: &str) -> Option<Datatype> {
        ALL_DATATYPES
            .iter()
            .copied()
            .find(|d| d.kserve_name() == name)
    }
}

const ALL_DATATYPES: [Datatype; 13] = [
    Datatype::Bool,
    Datatype::Uint8,
    Datatype::Uint16,
    Datatype::Uint32,
    Datatype::Uint64,
    Datatype::Int8,
    Datatype::Int16,
    Datatype::Int32,
    Datatype::Int64,
    Datatype::Fp16,
    Datatype::Fp32,
    Datatype::Fp64,
    Datatype::Bytes,
];

/// A named tensor: row-major little-endian elements; `Bytes` elements are
/// each a 4-byte little-endian length followed by the bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tensor {
    pub name: String,
    pub datatype: Datatype,
    pub shape: Vec<u64>,
    pub data: Vec<u8>,
}

impl Tensor {
    /// Checks that `data` holds exactly the elements `datatype` and `shape` describe.
    pub fn check_layout(&self) -> Result<(), String> {
        let count = self
            .shape
            .iter()
            .try_fold(1u64, |n, d| n.checked_mul(*d))
            .ok_or_else(|| format!("tensor `{}`: shape {:?} overflows", self.name, self.shape))?;
        match self.datatype.element_size() {
            Some(size) => {
                if count.checked_mul(size as u64) != Some(self.data.len() as u64) {
                    return Err(format!(
                        "tensor `{}`: {} data bytes for {} {} elements of shape {:?}",
                        self.name,
                        self.data.len(),
                        count,
                        self.datatype.kserve_name(),
                        self.shape
                    ));
                }
            }
            None => {
                let mut rest = self.data.as_slice();
                let mut elements = 0u64;
                while let Some((len, tail)) = rest.split_first_chunk::<4>() {
                    let len = u32::from_le_bytes(*len) as usize;
                    rest = tail.get(len..).ok_or_else(|| {
                        format!(
                            "tensor `{}`: bytes element {elements} is truncated",
                            self.name
                        )
                    })?;
                    elements += 1;
                }
                if !rest.is_empty() || elements != count {
                    return Err(format!(
                        "tensor `{}`: {elements} bytes elements for shape {:?}",
                        self.name, self.shape
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Request metadata: key/value pairs.
pub type Metadata = Vec<(String, String)>;

/// Input of a pre-processing call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PreInput {
    /// The raw request body.
    Bytes(Vec<u8>),
    Tensors(Vec<Tensor>),
}

/// Output of a post-processing call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PostOutput {
    Tensors(Vec<Tensor>),
    /// A JSON document, to be sent as `application/json`.
    Json(String),
    Bytes(Vec<u8>),
}

/// Where a plugin sits in a pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PluginKind {
    Pre,
    Post,
}

/// What a plugin says it is, read once when it is compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Description {
    pub name: String,
    pub version: String,
    pub kind: PluginKind,
    pub consumes: Vec<String>,
    pub produces: Vec<String>,
}
