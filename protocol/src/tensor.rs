//! Tensors as they cross the engine boundary: a KServe datatype, a shape and little-endian
//! bytes (or a list of byte strings for BYTES). The engine re-exports them; their encodings are
//! in [`crate::binary`], [`crate::json`] and [`crate::kserve`].

use crate::DecodeError;
use serde::{Deserialize, Serialize};

/// The datatypes of the Open Inference Protocol, with their ONNX Runtime equivalents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum DataType {
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

impl DataType {
    pub const ALL: [DataType; 13] = [
        DataType::Bool,
        DataType::Uint8,
        DataType::Uint16,
        DataType::Uint32,
        DataType::Uint64,
        DataType::Int8,
        DataType::Int16,
        DataType::Int32,
        DataType::Int64,
        DataType::Fp16,
        DataType::Fp32,
        DataType::Fp64,
        DataType::Bytes,
    ];

    /// The protocol's name (`FP32`, `INT64`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DataType::Bool => "BOOL",
            DataType::Uint8 => "UINT8",
            DataType::Uint16 => "UINT16",
            DataType::Uint32 => "UINT32",
            DataType::Uint64 => "UINT64",
            DataType::Int8 => "INT8",
            DataType::Int16 => "INT16",
            DataType::Int32 => "INT32",
            DataType::Int64 => "INT64",
            DataType::Fp16 => "FP16",
            DataType::Fp32 => "FP32",
            DataType::Fp64 => "FP64",
            DataType::Bytes => "BYTES",
        }
    }

    pub fn from_name(name: &str) -> Option<DataType> {
        DataType::ALL.into_iter().find(|d| d.name() == name)
    }

    /// Triton's model-configuration name (`TYPE_FP32`, `TYPE_STRING`, ...).
    pub fn config_name(self) -> &'static str {
        match self {
            DataType::Bool => "TYPE_BOOL",
            DataType::Uint8 => "TYPE_UINT8",
            DataType::Uint16 => "TYPE_UINT16",
            DataType::Uint32 => "TYPE_UINT32",
            DataType::Uint64 => "TYPE_UINT64",
            DataType::Int8 => "TYPE_INT8",
            DataType::Int16 => "TYPE_INT16",
            DataType::Int32 => "TYPE_INT32",
            DataType::Int64 => "TYPE_INT64",
            DataType::Fp16 => "TYPE_FP16",
            DataType::Fp32 => "TYPE_FP32",
            DataType::Fp64 => "TYPE_FP64",
            DataType::Bytes => "TYPE_STRING",
        }
    }

    /// The datatype Triton's model configuration calls `name` (`TYPE_FP32`, `TYPE_STRING`, ...).
    pub fn from_config_name(name: &str) -> Option<DataType> {
        DataType::ALL.into_iter().find(|d| d.config_name() == name)
    }

    /// Bytes per element, or `None` for variable-length BYTES.
    pub fn size(self) -> Option<usize> {
        match self {
            DataType::Bool | DataType::Uint8 | DataType::Int8 => Some(1),
            DataType::Uint16 | DataType::Int16 | DataType::Fp16 => Some(2),
            DataType::Uint32 | DataType::Int32 | DataType::Fp32 => Some(4),
            DataType::Uint64 | DataType::Int64 | DataType::Fp64 => Some(8),
            DataType::Bytes => None,
        }
    }
}

impl std::fmt::Display for DataType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Element storage: fixed-size elements as little-endian bytes, or one byte string per element.
#[derive(Debug, Clone, PartialEq)]
pub enum TensorData {
    Raw(Vec<u8>),
    Bytes(Vec<Vec<u8>>),
}

/// A named tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    pub name: String,
    pub datatype: DataType,
    pub shape: Vec<i64>,
    pub data: TensorData,
}

/// A tensor whose data does not match its shape and datatype is a [`DecodeError`] (the engine
/// reports it as the client's invalid input).
type Result<T> = std::result::Result<T, DecodeError>;

/// Number of elements of a shape; `None` for a negative dimension or overflow.
pub fn element_count(shape: &[i64]) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, &d| {
        usize::try_from(d).ok().and_then(|d| acc.checked_mul(d))
    })
}

impl Tensor {
    /// Builds a tensor and checks that the data length matches shape and datatype.
    pub fn new(
        name: impl Into<String>,
        datatype: DataType,
        shape: Vec<i64>,
        data: TensorData,
    ) -> Result<Tensor> {
        let tensor = Tensor {
            name: name.into(),
            datatype,
            shape,
            data,
        };
        tensor.check()?;
        Ok(tensor)
    }

    pub fn element_count(&self) -> Option<usize> {
        element_count(&self.shape)
    }

    /// Checks that the stored data matches shape and datatype.
    pub fn check(&self) -> Result<()> {
        let count = self.element_count().ok_or_else(|| {
            DecodeError(format!(
                "tensor '{}': invalid shape {:?}",
                self.name, self.shape
            ))
        })?;
        let ok = match (&self.data, self.datatype.size()) {
            (TensorData::Raw(bytes), Some(size)) => Some(bytes.len()) == count.checked_mul(size),
            (TensorData::Bytes(items), None) => items.len() == count,
            _ => false,
        };
        if ok {
            Ok(())
        } else {
            Err(DecodeError(format!(
                "tensor '{}': data does not match shape {:?} and datatype {}",
                self.name, self.shape, self.datatype
            )))
        }
    }

    /// Zeros of `shape` (empty elements for BYTES). The shape is the caller's, not a client's:
    /// it is allocated as given.
    pub fn zeros(name: impl Into<String>, datatype: DataType, shape: Vec<i64>) -> Result<Tensor> {
        let name = name.into();
        let count = element_count(&shape)
            .ok_or_else(|| DecodeError(format!("tensor '{name}': invalid shape {shape:?}")))?;
        let data = match datatype.size() {
            Some(size) => TensorData::Raw(vec![0; count * size]),
            None => TensorData::Bytes(vec![Vec::new(); count]),
        };
        Tensor::new(name, datatype, shape, data)
    }

    /// Convenience constructor for FP32 data.
    pub fn from_f32(name: impl Into<String>, shape: Vec<i64>, values: &[f32]) -> Result<Tensor> {
        let bytes = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        Tensor::new(name, DataType::Fp32, shape, TensorData::Raw(bytes))
    }

    /// Convenience constructor for INT64 data.
    pub fn from_i64(name: impl Into<String>, shape: Vec<i64>, values: &[i64]) -> Result<Tensor> {
        let bytes = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        Tensor::new(name, DataType::Int64, shape, TensorData::Raw(bytes))
    }

    /// Reads FP32 data back (for post-processing and tests).
    pub fn to_f32(&self) -> Option<Vec<f32>> {
        match (&self.data, self.datatype) {
            (TensorData::Raw(bytes), DataType::Fp32) => Some(
                bytes
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect(),
            ),
            _ => None,
        }
    }

    /// Size of the payload in bytes (for BYTES: the sum of the element lengths).
    pub fn byte_len(&self) -> usize {
        match &self.data {
            TensorData::Raw(b) => b.len(),
            TensorData::Bytes(items) => items.iter().map(Vec::len).sum(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for dt in DataType::ALL {
            assert_eq!(DataType::from_name(dt.name()), Some(dt));
            assert_eq!(DataType::from_config_name(dt.config_name()), Some(dt));
        }
        assert_eq!(DataType::from_name("FLOAT"), None);
    }

    #[test]
    fn check_rejects_wrong_lengths() {
        assert!(Tensor::from_f32("x", vec![2, 2], &[1.0; 4]).is_ok());
        let err = Tensor::new(
            "x",
            DataType::Fp32,
            vec![2, 2],
            TensorData::Raw(vec![0; 15]),
        )
        .expect_err("15 bytes cannot hold 4 FP32");
        assert!(err.to_string().contains("'x'"));
        assert!(Tensor::new("s", DataType::Bytes, vec![2], TensorData::Raw(vec![])).is_err());
        assert!(Tensor::new("n", DataType::Fp32, vec![-1], TensorData::Raw(vec![])).is_err());
    }
}
