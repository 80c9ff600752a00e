//! The values exchanged with plugins, as plain Rust types (no wasmtime types
//! in the public API).

/// Element type of a tensor: the protocol crate's, shared with the engine and the gateway, so a
/// tensor crosses from a model to a plugin without a datatype translation.
pub use infergate_protocol::tensor::DataType;

/// A named tensor: row-major little-endian elements; `Bytes` elements are
/// each a 4-byte little-endian length followed by the bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tensor {
    pub name: String,
    pub datatype: DataType,
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
        match self.datatype.size() {
            Some(size) => {
                if count.checked_mul(size as u64) != Some(self.data.len() as u64) {
                    return Err(format!(
                        "tensor `{}`: {} data bytes for {} {} elements of shape {:?}",
                        self.name,
                        self.data.len(),
                        count,
                        self.datatype.name(),
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
